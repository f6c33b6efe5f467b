//! The bytes of `<db>-wal`: the log header and the frame header.
//!
//! ```text
//! log header, 40 bytes (big-endian):
//!   0..4   magic 0x74705741 ("tpWA")
//!   4..8   format version (1)
//!   8..12  page size
//!   12..16 checkpoint sequence number (+1 at every restart)
//!   16..20 salt-1 (+1 at every restart)
//!   20..24 salt-2 (random at every restart)
//!   24..32 base FCC: the TID of the state the log starts from; the k-th
//!          commit in the log (k = 1, 2, ...) has TID base + k
//!   32..36 crc32c of bytes 0..32
//!   36..40 zero
//! frames from offset 40, each 24 + page_size bytes:
//!   0..4   page number
//!   4..8   commit frame: database size in pages after the commit; else 0
//!   8..12  salt-1, 12..16 salt-2 (must equal the header's)
//!   16..20 low 32 bits of the transaction's TID
//!   20..24 cumulative checksum: crc32c(previous checksum; bytes 0..20 ‖ page),
//!          seeded with the header's crc for the first frame
//!   24..   page image
//! ```
//!
//! The checksum chains every frame to all frames before it and to the
//! header, so a frame is valid only if every earlier frame of the same
//! generation is the one that was written before it: stale frames of an
//! earlier generation (other salts) or of a rolled-back transaction
//! (another chain) never validate.

use crate::base::pagesum;

/// Magic number at offset 0 of the log header.
pub const WAL_MAGIC: u32 = 0x7470_5741;
/// Log format version.
pub const WAL_VERSION: u32 = 1;
/// Size of the log header; the first frame starts here.
pub const WAL_HEADER_SIZE: u64 = 40;
/// Size of a frame header; the page image follows it.
pub const FRAME_HEADER_SIZE: usize = 24;

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    (u32_at(b, i) as u64) << 32 | u32_at(b, i + 4) as u64
}

/// The decoded log header of one generation of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalHeader {
    /// Page size of the frames.
    pub page_size: u32,
    /// Checkpoint sequence number.
    pub ckpt_seq: u32,
    /// Salt-1.
    pub salt1: u32,
    /// Salt-2.
    pub salt2: u32,
    /// TID of the database state the log starts from.
    pub base_fcc: u64,
}

impl WalHeader {
    /// Serialize; returns the bytes and their crc (the checksum seed).
    pub fn encode(&self) -> ([u8; WAL_HEADER_SIZE as usize], u32) {
        let mut h = [0u8; WAL_HEADER_SIZE as usize];
        h[0..4].copy_from_slice(&WAL_MAGIC.to_be_bytes());
        h[4..8].copy_from_slice(&WAL_VERSION.to_be_bytes());
        h[8..12].copy_from_slice(&self.page_size.to_be_bytes());
        h[12..16].copy_from_slice(&self.ckpt_seq.to_be_bytes());
        h[16..20].copy_from_slice(&self.salt1.to_be_bytes());
        h[20..24].copy_from_slice(&self.salt2.to_be_bytes());
        h[24..32].copy_from_slice(&self.base_fcc.to_be_bytes());
        let crc = crc32c::crc32c(&h[0..32]);
        h[32..36].copy_from_slice(&crc.to_be_bytes());
        (h, crc)
    }

    /// Parse and validate; `None` if this is not a valid header (never
    /// written, torn, or zeroed). Returns the header and its crc.
    pub fn decode(b: &[u8]) -> Option<(WalHeader, u32)> {
        if b.len() < WAL_HEADER_SIZE as usize
            || u32_at(b, 0) != WAL_MAGIC
            || u32_at(b, 4) != WAL_VERSION
        {
            return None;
        }
        let crc = u32_at(b, 32);
        if crc != crc32c::crc32c(&b[0..32]) {
            return None;
        }
        let h = WalHeader {
            page_size: u32_at(b, 8),
            ckpt_seq: u32_at(b, 12),
            salt1: u32_at(b, 16),
            salt2: u32_at(b, 20),
            base_fcc: u64_at(b, 24),
        };
        crate::base::valid_page_size(h.page_size as usize).then_some((h, crc))
    }
}

/// The fields of a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Page number.
    pub pgno: u32,
    /// Database size in pages after the commit, on a commit frame; else 0.
    pub commit_size: u32,
    /// Salt-1 of the generation.
    pub salt1: u32,
    /// Salt-2 of the generation.
    pub salt2: u32,
    /// Low 32 bits of the writing transaction's TID.
    pub tid32: u32,
}

impl FrameHeader {
    /// Write the header of a frame into `out[..24]`, chaining the checksum
    /// from `prev` over the header and `page`; returns the new checksum.
    /// `sum_at`: where `page` holds a page checksum its writer sealed
    /// ([`crate::journal::PageImage::sum_at`]), from which the chain over
    /// the page is derived without a pass over it.
    pub fn encode(&self, prev: u32, page: &[u8], sum_at: Option<usize>, out: &mut [u8]) -> u32 {
        out[0..4].copy_from_slice(&self.pgno.to_be_bytes());
        out[4..8].copy_from_slice(&self.commit_size.to_be_bytes());
        out[8..12].copy_from_slice(&self.salt1.to_be_bytes());
        out[12..16].copy_from_slice(&self.salt2.to_be_bytes());
        out[16..20].copy_from_slice(&self.tid32.to_be_bytes());
        let head = crc32c::crc32c_append(prev, &out[0..20]);
        let c = pagesum::append_image(head, self.pgno, page, sum_at);
        debug_assert_eq!(
            c,
            chain(prev, &out[0..20], page),
            "frame of page {}",
            self.pgno
        );
        out[20..24].copy_from_slice(&c.to_be_bytes());
        c
    }

    /// Parse a frame header and check its checksum against `prev` and
    /// `page`; returns the fields and the frame's checksum.
    pub fn decode(b: &[u8], prev: u32, page: &[u8]) -> Option<(FrameHeader, u32)> {
        if b.len() < FRAME_HEADER_SIZE {
            return None;
        }
        let c = chain(prev, &b[0..20], page);
        if c != u32_at(b, 20) {
            return None;
        }
        Some((
            FrameHeader {
                pgno: u32_at(b, 0),
                commit_size: u32_at(b, 4),
                salt1: u32_at(b, 8),
                salt2: u32_at(b, 12),
                tid32: u32_at(b, 16),
            },
            c,
        ))
    }
}

fn chain(prev: u32, head: &[u8], page: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(prev, head), page)
}

/// Byte offset of frame `frame` (0-based) for `page_size`.
pub fn frame_offset(frame: u64, page_size: usize) -> u64 {
    WAL_HEADER_SIZE + frame * (FRAME_HEADER_SIZE + page_size) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_damage() {
        let h = WalHeader {
            page_size: 4096,
            ckpt_seq: 7,
            salt1: 1,
            salt2: 0xdead_beef,
            base_fcc: 1 << 40,
        };
        let (b, crc) = h.encode();
        assert_eq!(WalHeader::decode(&b), Some((h, crc)));
        for i in 0..36 {
            let mut d = b;
            d[i] ^= 0x10;
            assert_eq!(WalHeader::decode(&d), None, "byte {i}");
        }
        assert_eq!(WalHeader::decode(&[0u8; 40]), None);
        assert_eq!(WalHeader::decode(&b[..39]), None);
    }

    #[test]
    fn frames_chain() {
        let page = vec![3u8; 512];
        let f = FrameHeader {
            pgno: 5,
            commit_size: 9,
            salt1: 1,
            salt2: 2,
            tid32: 3,
        };
        let mut out = [0u8; 24];
        let c = f.encode(77, &page, None, &mut out);
        assert_eq!(FrameHeader::decode(&out, 77, &page), Some((f, c)));
        // Another predecessor, another page, or a damaged header fails.
        assert_eq!(FrameHeader::decode(&out, 78, &page), None);
        assert_eq!(FrameHeader::decode(&out, 77, &[4u8; 512]), None);
        out[2] ^= 1;
        assert_eq!(FrameHeader::decode(&out, 77, &page), None);
    }

    #[test]
    fn a_frame_summed_from_its_page_checksum_is_the_frame_summed() {
        for (ps, at) in [(512usize, 12usize), (4096, 12), (4096, 200), (65_536, 0)] {
            let mut page: Vec<u8> = (0..ps).map(|i| (i * 31 % 251) as u8).collect();
            let f = FrameHeader {
                pgno: 9,
                commit_size: 0,
                salt1: 4,
                salt2: 5,
                tid32: 6,
            };
            pagesum::seal(f.pgno, &mut page, at);
            let (mut a, mut b) = ([0u8; 24], [0u8; 24]);
            let derived = f.encode(0x1234, &page, Some(at), &mut a);
            assert_eq!(derived, f.encode(0x1234, &page, None, &mut b), "{ps} {at}");
            assert_eq!(a, b);
            assert_eq!(FrameHeader::decode(&a, 0x1234, &page), Some((f, derived)));
        }
    }
}
