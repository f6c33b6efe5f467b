//! Free-list trunk page format (big-endian): `u32 next trunk`, `u32 count`,
//! then `count` u32 page numbers of free leaf pages. Trunks are chained
//! from the header's `freelist_head`. The pager allocates from and releases
//! to the list (`pager/freelist.rs`); the integrity check and recovery read
//! it through [`parse_trunk`].

use super::error::{Error, Pgno, Result};

pub(crate) fn be(raw: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(raw[at..at + 4].try_into().expect("4 bytes"))
}

/// Leaf slots per trunk page.
pub fn trunk_capacity(page_size: usize) -> usize {
    (page_size - 8) / 4
}

/// Parse a trunk page: (next trunk, leaves), validated.
pub fn parse_trunk(
    raw: &[u8],
    pgno: Pgno,
    page_count: u32,
    file: &str,
) -> Result<(Pgno, Vec<Pgno>)> {
    let next = be(raw, 0);
    let count = be(raw, 4) as usize;
    if count > trunk_capacity(raw.len()) {
        return Err(Error::corrupt(
            file,
            pgno,
            format!("free-list trunk claims {count} leaves"),
        ));
    }
    if next > page_count {
        return Err(Error::corrupt(
            file,
            pgno,
            format!("free-list next trunk {next} out of range"),
        ));
    }
    let mut leaves = Vec::with_capacity(count);
    for i in 0..count {
        let l = be(raw, 8 + 4 * i);
        if l < 3 || l > page_count {
            return Err(Error::corrupt(
                file,
                pgno,
                format!("free-list leaf {l} out of range"),
            ));
        }
        leaves.push(l);
    }
    Ok((next, leaves))
}
