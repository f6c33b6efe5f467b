//! The roots of named tables, kept per open database so that a
//! transaction need not look its table up in the catalog on every
//! operation (a B+tree search of the catalog, about 650 instructions per
//! single-row operation). SQLite's prepared statements hold a table's
//! root the same way, checked against the schema cookie.
//!
//! A named table's root never moves (the tree grows over a pinned root),
//! so the mapping changes only when a transaction changes the catalog
//! (creates or drops a table). Invariants:
//!
//! - R1. The entries are the catalog of every committed state from TID
//!   `since` on, as long as no catalog-changing commit is under way
//!   (`changing == 0`). A lookup is served, and an entry stored, only for
//!   a snapshot at or after `since`, and only then.
//! - R2. A transaction that changed the catalog calls
//!   [`RootCache::begin_change`] before its commit starts (nothing of it
//!   is visible yet) and [`RootCache::end_change`] with the newest
//!   committed TID once it returns, committed or not: `since` then lies at
//!   or after the change, so no older snapshot is served again.
//! - R3. A transaction that changed the catalog itself, a writer under a
//!   multi-writer protocol (whose catalog reads belong to its read set),
//!   and a reader under a protocol whose readers lock pages instead of
//!   reading a snapshot (page locks over a rollback journal: the lock on
//!   the catalog's page keeps a drop out), bypass the cache.

use crate::base::Pgno;

/// Entries kept at most: an app holds a few tables; a lookup is a short
/// linear search (no hashing of the name).
const ROOTS: usize = 16;

/// See the module documentation.
#[derive(Default)]
pub(super) struct RootCache {
    since: u64,
    changing: usize,
    catalog: Pgno,
    roots: Vec<(Box<str>, Pgno)>,
}

impl RootCache {
    fn serves(&self, snapshot: u64, catalog: Pgno) -> bool {
        self.changing == 0 && snapshot >= self.since && catalog == self.catalog
    }

    /// The root of `name` for a transaction whose snapshot is `snapshot`
    /// and whose catalog is rooted at `catalog` (R1).
    pub(super) fn get(&self, snapshot: u64, catalog: Pgno, name: &str) -> Option<Pgno> {
        if !self.serves(snapshot, catalog) {
            return None;
        }
        self.roots.iter().find(|(n, _)| &**n == name).map(|e| e.1)
    }

    /// Remember the root `name` has in the catalog of `snapshot` (R1).
    pub(super) fn put(&mut self, snapshot: u64, catalog: Pgno, name: &str, root: Pgno) {
        if self.changing != 0 || snapshot < self.since {
            return;
        }
        if catalog != self.catalog {
            self.roots.clear();
            self.catalog = catalog;
        }
        if self.roots.len() < ROOTS && !self.roots.iter().any(|(n, _)| &**n == name) {
            self.roots.push((name.into(), root));
        }
    }

    /// A commit that changes the catalog starts (R2).
    pub(super) fn begin_change(&mut self) {
        self.changing += 1;
        self.roots.clear();
    }

    /// That commit returned; `newest` is the newest committed TID (R2).
    pub(super) fn end_change(&mut self, newest: u64) {
        self.changing = self.changing.saturating_sub(1);
        self.since = self.since.max(newest);
        self.roots.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_only_snapshots_after_the_last_change() {
        let mut c = RootCache::default();
        c.put(3, 2, "t", 7);
        assert_eq!(c.get(3, 2, "t"), Some(7));
        assert_eq!(c.get(5, 2, "t"), Some(7));
        assert_eq!(c.get(5, 9, "t"), None, "another catalog root");
        c.begin_change();
        assert_eq!(c.get(5, 2, "t"), None, "a change under way");
        c.put(5, 2, "t", 7);
        c.end_change(6);
        assert_eq!(c.get(5, 2, "t"), None, "emptied by the change");
        c.put(5, 2, "t", 8);
        assert_eq!(
            c.get(6, 2, "t"),
            None,
            "stored for a snapshot before the change"
        );
        c.put(6, 2, "t", 8);
        assert_eq!(c.get(6, 2, "t"), Some(8));
        assert_eq!(c.get(5, 2, "t"), None, "a snapshot before the change");
    }
}
