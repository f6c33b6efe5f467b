//! The shared page cache: committed page images (and their decoded logical
//! view) with CLOCK eviction. Uncommitted pages never enter it; they live
//! in the writer's private dirty set until commit.
//!
//! The CLOCK is weighted (GCLOCK): a use of a page sets its slot's count
//! to the page's weight, and the hand takes one off per pass, evicting a
//! slot at zero. Interior nodes weigh [`INTERIOR_WEIGHT`], every other
//! page one. Under random access to a table larger than the cache, every
//! operation misses a leaf, and a plain CLOCK's hand comes round faster
//! than a given interior node is used again: interior nodes, far fewer
//! and each worth a whole subtree (and the dearest to decode: hundreds of
//! separators), were evicted with the leaves and decoded again. SQLite's
//! LRU keeps them by recency; the weight does it here.

use crate::base::pgmap::PgnoMap;
use crate::base::{Pgno, Tid};
use crate::node::Node;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

/// A cached committed page.
#[derive(Clone)]
pub struct CachedPage {
    /// Page bytes.
    pub raw: Arc<[u8]>,
    /// Decoded node, filled on first tree access (and taken out by a
    /// writer about to replace it).
    pub node: Option<Arc<Node>>,
    /// The image decoded as a tree page once (it was verified), a leaf
    /// patch checked its checksum, or this process encoded it: a one-cell
    /// patch may build on it, a journal derive its checksum (C6).
    pub verified: bool,
}

struct Slot {
    pgno: Pgno,
    page: CachedPage,
    /// The CLOCK count: passes of the hand the slot survives; atomic so
    /// that a hit needs only a shared lock.
    count: AtomicU8,
}

/// Passes of the hand an interior node survives unused (a leaf or any
/// other page: 1). At 3, random updates of a million-row table in the
/// default 2 MiB cache (16 shards of 32 pages; 112 interior nodes) still
/// evicted interior nodes between uses: 189 decodes in 20,000 updates.
/// At 8, 112: each node once, on its first use (64 gives the same).
pub const INTERIOR_WEIGHT: u8 = 8;

/// The CLOCK count a use of `page` sets.
fn weight(page: &CachedPage) -> u8 {
    match &page.node {
        Some(n) if !n.is_leaf() => INTERIOR_WEIGHT,
        _ => 1,
    }
}

/// CLOCK cache of committed pages.
pub struct PageCache {
    capacity: usize,
    slots: Vec<Slot>,
    index: PgnoMap<usize>,
    hand: usize,
    /// Lookups that missed. (Hits are not counted: a shared counter would
    /// be written by every reader of every hot page.)
    pub misses: AtomicU64,
}

impl PageCache {
    /// A cache holding at most `capacity` pages (at least 8).
    pub fn new(capacity: usize) -> Self {
        PageCache {
            capacity: capacity.max(8),
            slots: Vec::new(),
            index: PgnoMap::default(),
            hand: 0,
            misses: AtomicU64::new(0),
        }
    }

    /// Look a page up (a shared borrow: readers hit in parallel); a miss
    /// is counted.
    pub fn get(&self, pgno: Pgno) -> Option<&CachedPage> {
        let p = self.lookup(pgno);
        if p.is_none() {
            self.misses.fetch_add(1, Relaxed);
        }
        p
    }

    /// Look a page up, marking it used; a miss is not counted.
    pub fn lookup(&self, pgno: Pgno) -> Option<&CachedPage> {
        match self.index.get(&pgno) {
            Some(&i) => {
                let s = &self.slots[i];
                let w = weight(&s.page);
                // Written only when it changes: hits on a hot page leave
                // its cache line shared between readers.
                if s.count.load(Relaxed) < w {
                    s.count.store(w, Relaxed);
                }
                Some(&s.page)
            }
            None => None,
        }
    }

    /// Look a page up without counting a hit or a miss or marking it
    /// used.
    pub fn peek(&mut self, pgno: Pgno) -> Option<&mut CachedPage> {
        let i = *self.index.get(&pgno)?;
        Some(&mut self.slots[i].page)
    }

    /// Insert or replace a page; returns the page it replaced or evicted,
    /// for the caller to drop after releasing its lock (freeing a node's
    /// cells is not free).
    pub fn put(&mut self, pgno: Pgno, page: CachedPage) -> Option<CachedPage> {
        let w = weight(&page);
        if let Some(&i) = self.index.get(&pgno) {
            let c = self.slots[i].count.get_mut();
            *c = (*c).max(w);
            return Some(std::mem::replace(&mut self.slots[i].page, page));
        }
        let slot = |pgno, page| Slot {
            pgno,
            page,
            count: AtomicU8::new(w),
        };
        if self.slots.len() < self.capacity {
            self.index.insert(pgno, self.slots.len());
            self.slots.push(slot(pgno, page));
            return None;
        }
        loop {
            let h = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            let s = &mut self.slots[h];
            let c = s.count.get_mut();
            if *c > 0 {
                *c -= 1;
                continue;
            }
            self.index.remove(&s.pgno);
            let old = std::mem::replace(s, slot(pgno, page));
            self.index.insert(pgno, h);
            return Some(old.page);
        }
    }

    /// Drop a page.
    pub fn remove(&mut self, pgno: Pgno) {
        if let Some(i) = self.index.remove(&pgno) {
            let last = self.slots.len() - 1;
            self.slots.swap(i, last);
            self.slots.pop();
            if i < self.slots.len() {
                self.index.insert(self.slots[i].pgno, i);
            }
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
        }
    }

    /// Drop every page numbered above `count`.
    pub fn truncate(&mut self, count: Pgno) {
        let gone: Vec<Pgno> = self.index.keys().copied().filter(|&p| p > count).collect();
        for p in gone {
            self.remove(p);
        }
    }

    /// Drop everything.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
        self.hand = 0;
    }

    /// Pages currently cached.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// One shard of the shared cache: its pages and, for the same pages, the
/// TID of the last commit that wrote each one this session (P3).
pub struct Shard {
    /// Cached committed pages.
    pub cache: PageCache,
    /// Last committing TID per page.
    pub page_tid: PgnoMap<Tid>,
    /// Entries of `page_tid` above which the next commit prunes it.
    pub prune_at: usize,
}

impl Shard {
    /// Drop the `page_tid` entries no snapshot can tell from "not written
    /// this session": commits at or before `horizon`, which is at most the
    /// oldest snapshot still registered and the newest published commit
    /// (every later snapshot is newer). Every use of `page_tid` asks
    /// whether a page's last commit is newer than a snapshot (P3, P11), so
    /// the map need not keep one entry per page ever written (after a
    /// million-row load it held every page of the table, for the life of
    /// the handle). The next pruning waits until the map doubles.
    pub fn prune_page_tids(&mut self, horizon: Tid) {
        self.page_tid.retain(|_, t| *t > horizon);
        self.prune_at = (2 * self.page_tid.len()).max(prune_floor(self.cache.capacity));
    }
}

/// The fewest `page_tid` entries a shard of `capacity` cached pages prunes
/// at: four per cached page.
fn prune_floor(capacity: usize) -> usize {
    4 * capacity
}

/// The shared cache split by page number, so readers of different pages
/// do not wait for one lock; hits take a shard's lock shared. Every shard
/// holds at least 16 pages (a cache of fewer keeps one shard and exact
/// CLOCK order).
pub struct ShardedCache {
    shards: Box<[RwLock<Shard>]>,
}

impl ShardedCache {
    /// A cache of about `capacity` pages in total.
    pub fn new(capacity: usize) -> Self {
        let n = (capacity / 16).clamp(1, 16);
        let per = capacity.div_ceil(n);
        ShardedCache {
            shards: (0..n)
                .map(|_| {
                    let cache = PageCache::new(per);
                    RwLock::new(Shard {
                        prune_at: prune_floor(cache.capacity),
                        cache,
                        page_tid: PgnoMap::default(),
                    })
                })
                .collect(),
        }
    }

    fn slot(&self, pgno: Pgno) -> &RwLock<Shard> {
        &self.shards[pgno as usize % self.shards.len()]
    }

    /// The shard that holds `pgno`, shared: lookups.
    pub fn read(&self, pgno: Pgno) -> RwLockReadGuard<'_, Shard> {
        self.slot(pgno).read()
    }

    /// The shard that holds `pgno`, exclusive: inserts and removals.
    pub fn write(&self, pgno: Pgno) -> RwLockWriteGuard<'_, Shard> {
        self.slot(pgno).write()
    }

    /// Misses over all shards.
    pub fn misses(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.read().cache.misses.load(Relaxed))
            .sum()
    }

    /// `Shard::prune_page_tids` on every shard whose map is due.
    pub fn prune_page_tids(&self, horizon: Tid) {
        for s in self.shards.iter() {
            let mut sh = s.write();
            if sh.page_tid.len() > sh.prune_at {
                sh.prune_page_tids(horizon);
            }
        }
    }

    /// Drop pages above `count` (the file shrank).
    pub fn truncate(&self, count: Pgno) {
        for s in self.shards.iter() {
            s.write().cache.truncate(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_and_keeps_index_consistent() {
        let mut c = PageCache::new(8);
        for p in 1..100u32 {
            c.put(
                p,
                CachedPage {
                    raw: Arc::from(vec![p as u8; 4]),
                    node: None,
                    verified: false,
                },
            );
            assert!(c.len() <= 8);
            assert_eq!(c.get(p).unwrap().raw[0], p as u8);
        }
        c.remove(99);
        assert!(c.get(99).is_none());
        c.truncate(50);
        assert!(c.is_empty());
    }

    /// Pages used once per `capacity / 2` insertions of new pages (the pattern
    /// of interior nodes under random updates of a table larger than the
    /// cache): interior nodes stay, leaves used as often do not.
    #[test]
    fn interior_nodes_outlive_a_stream_of_leaves() {
        use crate::node::InteriorCell;
        let page = |node: Option<Node>| CachedPage {
            raw: Arc::from(vec![0u8; 4]),
            node: node.map(Arc::new),
            verified: false,
        };
        let interior = || {
            Some(Node::Interior {
                cells: vec![InteriorCell {
                    key: crate::node::Bytes::from(&b"k"[..]),
                    child: 7,
                }],
                right: 8,
            })
        };
        for (hot, want_kept) in [(interior as fn() -> Option<Node>, true), (|| None, false)] {
            let mut c = PageCache::new(16);
            for p in 1..=4 {
                c.put(p, page(hot()));
            }
            let mut misses = 0;
            for round in 0..100u32 {
                for i in 0..8 {
                    c.put(1000 + round * 8 + i, page(Some(Node::empty_leaf())));
                }
                for p in 1..=4 {
                    if c.lookup(p).is_none() {
                        misses += 1;
                        c.put(p, page(hot()));
                    }
                }
            }
            assert_eq!(misses == 0, want_kept, "{misses} misses");
        }
    }
}
