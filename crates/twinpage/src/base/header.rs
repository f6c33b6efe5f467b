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
//! 50..52  reserved (0)
//! 52..56  crc32c of bytes 0..52
//! 56..    reserved for modes (DASH keeps its GPL in this tail)
//! ```

use crate::base::{Error, Pgno, Result};

/// Magic string at the start of every database file.
pub const MAGIC: &[u8; 16] = b"twinpage fmt v1\0";
/// Current format version.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of page 1 used by the header proper.
pub const HEADER_LEN: usize = 56;

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
}

impl Header {
    /// Serialize into the first [`HEADER_LEN`] bytes of `page`.
    pub fn write_to(&self, page: &mut [u8]) {
        page[..HEADER_LEN].fill(0);
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
        let crc = crc32c::crc32c(&page[0..52]);
        page[52..56].copy_from_slice(&crc.to_be_bytes());
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

/// Page sizes twinpage accepts: powers of two from 512 to 65536.
pub fn valid_page_size(ps: usize) -> bool {
    (512..=65536).contains(&ps) && ps.is_power_of_two()
}
