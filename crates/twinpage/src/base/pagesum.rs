//! Page checksums: crc32c over a page, seeded with its page number.
//!
//! Every page of a database carries one 4-byte checksum field (where
//! depends on the format; see ARCHITECTURE.md "Page checksums"). The sum
//! covers the page number and every byte of the page except the field
//! itself, so a page that rots, is torn, or lands at another page's offset
//! (a misdirected write) fails it. A page that is stale but intact (a lost
//! write) passes: no per-page sum can tell an old image from a new one.
//!
//! crc32c because both targets have it in hardware (SSE 4.2 `crc32`, ARMv8
//! `crc32c*`); the `crc32c` crate picks the instruction at run time.

use super::Pgno;

/// Size of a checksum field.
pub const SUM_LEN: usize = 4;

/// The checksum of `page` as page `pgno`, skipping the field at `at`.
pub fn page_sum(pgno: Pgno, page: &[u8], at: usize) -> u32 {
    let c = crc32c::crc32c(&pgno.to_be_bytes());
    let c = crc32c::crc32c_append(c, &page[..at]);
    crc32c::crc32c_append(c, &page[at + SUM_LEN..])
}

/// Store the checksum of `page` in its field at `at`.
pub fn seal(pgno: Pgno, page: &mut [u8], at: usize) {
    let s = page_sum(pgno, page, at);
    page[at..at + SUM_LEN].copy_from_slice(&s.to_be_bytes());
}

/// The checksum stored at `at`.
pub fn stored(page: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]])
}

/// Whether the field at `at` holds the checksum of `page`.
pub fn verify(pgno: Pgno, page: &[u8], at: usize) -> bool {
    page.len() >= at + SUM_LEN && stored(page, at) == page_sum(pgno, page, at)
}

/// Whether every byte is zero (a page that was never written: the file
/// grew over it, or a transaction allocated and freed it).
pub fn is_zero(page: &[u8]) -> bool {
    page.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_flips_and_misplacement() {
        let mut p = vec![7u8; 512];
        seal(9, &mut p, 508);
        assert!(verify(9, &p, 508));
        assert!(!verify(10, &p, 508), "a page at the wrong offset fails");
        for bit in [0, 100 * 8 + 3, 508 * 8, 511 * 8 + 7] {
            let mut q = p.clone();
            q[bit / 8] ^= 1 << (bit % 8);
            assert!(!verify(9, &q, 508), "flip of bit {bit} detected");
        }
    }
}
