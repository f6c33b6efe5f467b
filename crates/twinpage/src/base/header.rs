//! The header page (page 1). Layout, big-endian:
//!
//! ```text
//! 0..16   magic "twinpage fmt v1\0"
//! 16..20  format version (1)
//! 20..24  page size in bytes
//! 24..28  page count
//! 28..36  file change counter (FCC): TID of the last committed transaction
//! 36..40  first free-list trunk page (0: empty)
//! 40..44  number of pages on the free list (trunks included)
//! 44..48  catalog root page
//! 48      journal mode code
//! 49      clean-close flag (1: closed cleanly, no recovery scan needed)
//! 50      page checksums (1: every page carries a verified checksum)
//! 51      reserved (0)
//! 52..56  crc32c of bytes 0..52
//! 56..60  page checksum of page 1: crc32c(1, bytes 0..56, bytes 84..ps),
//!         kept whatever byte 50 says, see [`seal_page1`]
//! 60..84  the mode's fixed fields (DASH, DHL): outside the page checksum,
//!         because a mode may rewrite them alone with one small write;
//!         they carry their own checksum
//! 84..    mode tail (DASH's GPL entries), then zeros; covered
//! ```
//!
//! The page checksum sits in the first 512 bytes with everything a
//! one-sector write changes, so a page-1 write torn after its first sector
//! (in-place modes write page 1 without a journal) still verifies when the
//! rest of the page did not change.
//!
//! Format 1 (before page checksums) is refused with a message saying so.

use crate::base::{Error, Pgno, Result};

/// Magic string at the start of every database file.
pub const MAGIC: &[u8; 16] = b"twinpage fmt v1\0";
/// Current format version.
pub const FORMAT_VERSION: u32 = 2;
/// Bytes of page 1 used by the header proper.
pub const HEADER_LEN: usize = 60;
/// Offset of the mode's fixed fields in page 1.
pub const MODE_FIELDS_AT: usize = HEADER_LEN;
/// Size of the mode's fixed fields (outside page 1's checksum).
pub const MODE_FIELDS_LEN: usize = 24;
/// Offset of the page-1 checksum.
const PAGE1_SUM_AT: usize = 56;

/// The decoded header page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Page size in bytes.
    pub page_size: u32,
    /// Number of pages in the database.
    pub page_count: u32,
    /// File change counter: TID of the last committed transaction.
    pub fcc: u64,
    /// First free-list trunk page, 0 if the free list is empty.
    pub freelist_head: Pgno,
    /// Pages on the free list (trunks and leaves).
    pub freelist_count: u32,
    /// Root page of the catalog tree.
    pub catalog_root: Pgno,
    /// Journal mode code ([`crate::JournalMode::code`]).
    pub journal_mode: u8,
    /// Set at a clean close, cleared by the first commit after open.
    pub clean_close: bool,
    /// Every page carries a checksum that is verified on every read from
    /// storage (chosen when the database is created).
    pub page_checksums: bool,
}

impl Header {
    /// Serialize into bytes 0..56 of `page` (the page-1 checksum is set
    /// by [`seal_page1`] once the whole page is written).
    pub fn write_to(&self, page: &mut [u8]) {
        page[..PAGE1_SUM_AT].fill(0);
        page[0..16].copy_from_slice(MAGIC);
        page[16..20].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
        page[20..24].copy_from_slice(&self.page_size.to_be_bytes());
        page[24..28].copy_from_slice(&self.page_count.to_be_bytes());
        page[28..36].copy_from_slice(&self.fcc.to_be_bytes());
        page[36..40].copy_from_slice(&self.freelist_head.to_be_bytes());
        page[40..44].copy_from_slice(&self.freelist_count.to_be_bytes());
        page[44..48].copy_from_slice(&self.catalog_root.to_be_bytes());
        page[48] = self.journal_mode;
        page[49] = self.clean_close as u8;
        page[50] = self.page_checksums as u8;
        let crc = crc32c::crc32c(&page[0..52]);
        page[52..56].copy_from_slice(&crc.to_be_bytes());
    }

    /// `page` := the sealed page 1 `old` with this header: the page
    /// checksum is patched from `old`'s for the 56 bytes that changed
    /// ([`super::pagesum::patch`]) rather than summed over the page again.
    /// A damaged `old` stays detectably damaged. `page` and `old` are
    /// whole pages of the same size.
    pub fn write_over(&self, old: &[u8], page: &mut [u8]) {
        page.copy_from_slice(old);
        self.write_to(page);
        let skip = (PAGE1_SUM_AT, MODE_FIELDS_AT + MODE_FIELDS_LEN);
        let s = super::pagesum::patch(
            super::pagesum::stored(old, PAGE1_SUM_AT),
            old,
            page,
            &[(0, PAGE1_SUM_AT)],
            skip,
        )
        .unwrap_or_else(|| page1_sum(page));
        page[PAGE1_SUM_AT..PAGE1_SUM_AT + 4].copy_from_slice(&s.to_be_bytes());
    }

    /// Parse and validate a header (at least [`HEADER_LEN`] bytes).
    pub fn read_from(page: &[u8], file: &str) -> Result<Header> {
        let bad = |what: String| Error::corrupt(file, 1, what);
        if page.len() < HEADER_LEN {
            return Err(bad(format!("header truncated to {} bytes", page.len())));
        }
        if &page[0..16] != MAGIC {
            return Err(bad("bad magic: not a twinpage database".into()));
        }
        let u32_at = |i: usize| u32::from_be_bytes(page[i..i + 4].try_into().expect("4"));
        let crc = u32_at(52);
        if crc != crc32c::crc32c(&page[0..52]) {
            return Err(bad("header checksum mismatch".into()));
        }
        let version = u32_at(16);
        if version == 1 {
            return Err(bad(
                "format version 1 (written before page checksums): this build reads \
                 version 2 only; export the data with the build that wrote it"
                    .into(),
            ));
        }
        if version != FORMAT_VERSION {
            return Err(bad(format!("unsupported format version {version}")));
        }
        let h = Header {
            page_size: u32_at(20),
            page_count: u32_at(24),
            fcc: u64::from_be_bytes(page[28..36].try_into().expect("8")),
            freelist_head: u32_at(36),
            freelist_count: u32_at(40),
            catalog_root: u32_at(44),
            journal_mode: page[48],
            clean_close: page[49] == 1,
            page_checksums: page[50] == 1,
        };
        if !valid_page_size(h.page_size as usize) {
            return Err(bad(format!("invalid page size {}", h.page_size)));
        }
        if h.page_count < 2 {
            return Err(bad(format!("page count {} below 2", h.page_count)));
        }
        if h.catalog_root < 2 || h.catalog_root > h.page_count {
            return Err(bad(format!("catalog root {} out of range", h.catalog_root)));
        }
        if h.freelist_head > h.page_count || h.freelist_count >= h.page_count {
            return Err(bad(format!(
                "free list head {} / count {} out of range",
                h.freelist_head, h.freelist_count
            )));
        }
        Ok(h)
    }
}

fn page1_sum(page: &[u8]) -> u32 {
    let c = crc32c::crc32c(&1u32.to_be_bytes());
    let c = crc32c::crc32c_append(c, &page[..PAGE1_SUM_AT]);
    crc32c::crc32c_append(c, &page[MODE_FIELDS_AT + MODE_FIELDS_LEN..])
}

/// Seal a complete page 1 (header and mode tail written): bytes 56..60
/// get its page checksum. Every writer of a whole page 1 calls this last.
pub fn seal_page1(page: &mut [u8]) {
    let s = page1_sum(page);
    page[PAGE1_SUM_AT..PAGE1_SUM_AT + 4].copy_from_slice(&s.to_be_bytes());
}

/// [`seal_page1`] for a page 1 that is zero past the mode's fields (the
/// in-page modes write nothing else there): the zeros are not read.
pub fn seal_page1_zero_tail(page: &mut [u8]) {
    seal_page1_zero_from(page, MODE_FIELDS_AT + MODE_FIELDS_LEN);
}

/// [`seal_page1`] for a page 1 that is zero from byte `zero_from` on (at
/// or past the mode's fields): the zeros are not read.
pub fn seal_page1_zero_from(page: &mut [u8], zero_from: usize) {
    let tail = MODE_FIELDS_AT + MODE_FIELDS_LEN;
    let from = zero_from.clamp(tail, page.len());
    debug_assert!(page[from..].iter().all(|&b| b == 0), "page 1 tail not zero");
    let c = crc32c::crc32c(&1u32.to_be_bytes());
    let c = crc32c::crc32c_append(c, &page[..PAGE1_SUM_AT]);
    let c = crc32c::crc32c_append(c, &page[tail..from]);
    let s = super::pagesum::append_zeros(c, page.len() - from);
    page[PAGE1_SUM_AT..PAGE1_SUM_AT + 4].copy_from_slice(&s.to_be_bytes());
}

/// Check a complete page 1 read from storage (the header's own checksum
/// was checked by [`Header::read_from`]; this covers the mode tail).
pub fn verify_page1(page: &[u8], file: &str) -> Result<()> {
    if page.len() < 512 || super::pagesum::stored(page, PAGE1_SUM_AT) != page1_sum(page) {
        return Err(Error::corrupt(
            file,
            1,
            "page checksum mismatch on the header page (its mode tail is damaged)",
        ));
    }
    Ok(())
}

/// Page sizes twinpage accepts: powers of two from 512 to 65536.
pub fn valid_page_size(ps: usize) -> bool {
    (512..=65536).contains(&ps) && ps.is_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_tail_seals_as_the_whole_page_does() {
        for ps in [512usize, 4096, 65536] {
            let mut a = vec![0u8; ps];
            a[..HEADER_LEN + 10]
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = i as u8);
            let mut b = a.clone();
            seal_page1(&mut a);
            seal_page1_zero_tail(&mut b);
            assert_eq!(a, b, "{ps}");
        }
    }

    #[test]
    fn write_over_patches_the_page_checksum() {
        let mut old = vec![0u8; 4096];
        old[300..400].fill(7);
        let mut h = Header {
            page_size: 4096,
            page_count: 9,
            fcc: 3,
            freelist_head: 0,
            freelist_count: 0,
            catalog_root: 2,
            journal_mode: 1,
            clean_close: false,
            page_checksums: true,
        };
        h.write_to(&mut old);
        seal_page1(&mut old);
        h.fcc = 4;
        h.page_count = 11;
        let mut page = vec![0u8; 4096];
        h.write_over(&old, &mut page);
        verify_page1(&page, "t").expect("patched sum verifies");
        let mut full = page.clone();
        seal_page1(&mut full);
        assert_eq!(page, full);
    }
}
