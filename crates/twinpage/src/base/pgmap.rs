//! Hash maps and sets keyed by page number.
//!
//! The pager looks pages up several times per operation (dirty set, cache
//! index, per-page TIDs, the WAL index). The standard library's SipHash
//! resists hash flooding, which page numbers do not need: a page number
//! only degrades a lookup's speed, never its result. A multiply-and-fold
//! hash costs a few instructions instead of about a hundred.

use super::Pgno;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher for page numbers (and other small integer keys).
#[derive(Debug, Default, Clone, Copy)]
pub struct PgnoHasher(u64);

impl Hasher for PgnoHasher {
    fn finish(&self) -> u64 {
        // Fold the well-mixed high half into the low bits, which pick the
        // bucket.
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// Builds [`PgnoHasher`]s.
pub type BuildPgnoHasher = BuildHasherDefault<PgnoHasher>;

/// A map keyed by page number.
pub type PgnoMap<V> = HashMap<Pgno, V, BuildPgnoHasher>;

/// A set of page numbers.
pub type PgnoSet = HashSet<Pgno, BuildPgnoHasher>;

/// Buckets up to which an emptied map or set is kept for reuse.
pub const REUSE_BUCKETS: usize = 256;

/// Empty `m` for the next transaction. Clearing a hash table, and every
/// walk over it, costs time in its capacity, not its length: a table that
/// one bulk transaction grew (a load of a million rows) would tax every
/// small transaction after it. Such a table is dropped instead of kept.
pub fn reset_map<K, V, S: Default>(m: &mut HashMap<K, V, S>) {
    if m.capacity() > REUSE_BUCKETS {
        *m = HashMap::default();
    } else {
        m.clear();
    }
}

/// [`reset_map`] for a set.
pub fn reset_set<K, S: Default>(s: &mut HashSet<K, S>) {
    if s.capacity() > REUSE_BUCKETS {
        *s = HashSet::default();
    } else {
        s.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_pages_spread_over_buckets() {
        let b = BuildPgnoHasher::default();
        let mut seen = HashSet::new();
        for p in 1..=4096u32 {
            seen.insert(b.hash_one(p) & 4095);
        }
        // As good as a random hash: 4,096 keys in 4,096 buckets fill about
        // 1 - 1/e of them (2,589).
        assert!(seen.len() > 2300, "{}", seen.len());
        let mut m: PgnoMap<u32> = PgnoMap::default();
        for p in 1..10_000u32 {
            m.insert(p, p * 2);
        }
        assert!((1..10_000u32).all(|p| m[&p] == p * 2));
    }
}
