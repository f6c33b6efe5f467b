//! The shared page allocator of multi-writer sessions
//! ([`crate::cc::Profile::multi_writer`]).
//!
//! With several write transactions open at once, none of them may own the
//! free list or the page count: both live in page 1, which is merged at
//! commit. Instead a transaction *reserves* a page here when the tree
//! allocates one (a free page of the committed state, or a new page past
//! everything handed out so far); the reservation is returned when the
//! transaction rolls back and becomes part of the committed state when it
//! commits. The free list is kept in memory for the session (trunk pages
//! at a clean close, a walk of the trees after a crash), as in the modes
//! with [`crate::journal::FreeListPolicy::Volatile`].
//!
//! Invariants (A1-A3, cited where relied on):
//! - **A1** `committed_free` is exactly the set of pages in `2..=count`
//!   that the last commit left unreachable: the free list of the committed
//!   state, whoever holds a reservation on them.
//! - **A2** Every page `<= end` is in exactly one place: reachable in the
//!   committed state, in `avail`, or reserved by one open transaction
//!   (`reserved`).
//! - **A3** A page freed by commit *t* is handed only to a transaction
//!   whose snapshot is at least *t*: one reading an older snapshot may
//!   still reach the page through its old parent, and must not find its
//!   own new content there. For formats that keep versions in the page,
//!   the oldest open reader's snapshot must include *t* too (pager P9).

use crate::base::pgmap::{PgnoMap, PgnoSet};
use crate::base::{Error, Pgno, Result, Tid};

/// How many free pages allocation looks at for one whose freeing commit
/// the transaction's snapshot includes (A3) before it grows the file.
const SCAN: usize = 64;

/// The shared allocator.
#[derive(Default)]
pub(super) struct Alloc {
    /// The committed page count.
    count: Pgno,
    /// The highest page number handed out or committed.
    end: Pgno,
    /// Free pages any transaction may take, with the TID of the commit
    /// that freed them (0: free since the session began, or never seen
    /// by anyone). Pages above `count` were returned by a rollback.
    avail: Vec<(Pgno, Tid)>,
    /// Reserved pages: owning transaction id and the freeing TID to
    /// restore if it rolls back.
    reserved: PgnoMap<(u64, Tid)>,
    /// A1.
    committed_free: PgnoSet,
}

/// What a commit does to the allocator, worked out before the journal
/// writes (the commit may still fail) and applied after.
pub(super) struct AllocPlan {
    /// The page count the commit records.
    pub count: Pgno,
    /// Pages free in the committed state after it (the header's count).
    pub free_count: u32,
}

impl Alloc {
    /// The allocator of a session over a committed state of `count` pages
    /// whose free pages are `free`.
    pub(super) fn new(count: Pgno, free: &[Pgno]) -> Alloc {
        Alloc {
            count,
            end: count,
            avail: free.iter().rev().map(|&p| (p, 0)).collect(),
            reserved: PgnoMap::default(),
            committed_free: free.iter().copied().collect(),
        }
    }

    /// Reserve a page for transaction `owner`: a free page whose freeing
    /// commit is at or below `horizon` (A3), or a new one.
    pub(super) fn allocate(&mut self, owner: u64, horizon: Tid) -> Result<Pgno> {
        let n = self.avail.len();
        let lo = n.saturating_sub(SCAN);
        if let Some(i) = (lo..n).rev().find(|&i| self.avail[i].1 <= horizon) {
            let (p, freed) = self.avail.remove(i);
            self.reserved.insert(p, (owner, freed));
            return Ok(p);
        }
        let p = self
            .end
            .checked_add(1)
            .ok_or_else(|| Error::InvalidArgument("database is full (2^32 pages)".into()))?;
        self.end = p;
        self.reserved.insert(p, (owner, 0));
        Ok(p)
    }

    /// Return the reservations of a transaction that rolled back (A2).
    pub(super) fn release(&mut self, owner: u64, pages: impl IntoIterator<Item = Pgno>) {
        for p in pages {
            if let Some((o, freed)) = self.reserved.get(&p).copied() {
                if o == owner {
                    self.reserved.remove(&p);
                    self.avail.push((p, freed));
                }
            }
        }
    }

    /// The page count and free count after a commit of a transaction that
    /// allocated `allocated` and freed `freed` (committed pages it no
    /// longer uses, and pages it allocated and freed again).
    pub(super) fn plan(&self, allocated: &PgnoSet, freed: &[Pgno]) -> AllocPlan {
        let count = allocated.iter().copied().max().unwrap_or(0).max(self.count);
        let mut free = self.committed_free.len() as i64;
        // Pages it took from the committed free list and keeps.
        let freed_set: PgnoSet = freed.iter().copied().collect();
        free -= allocated
            .iter()
            .filter(|p| !freed_set.contains(p) && self.committed_free.contains(p))
            .count() as i64;
        // Pages it freed (committed ones, or its own above the old count
        // that the new count covers).
        free += freed_set
            .iter()
            .filter(|p| !self.committed_free.contains(p))
            .count() as i64;
        // Pages the new count covers that others hold or nobody took:
        // written as zeros, free in the committed state.
        free += (self.count + 1..=count)
            .filter(|p| !allocated.contains(p))
            .count() as i64;
        AllocPlan {
            count,
            free_count: free.max(0) as u32,
        }
    }

    /// Apply a commit as [`Alloc::plan`] worked it out, freed pages
    /// stamped with the commit's TID (A3).
    pub(super) fn apply(
        &mut self,
        owner: u64,
        tid: Tid,
        plan: &AllocPlan,
        allocated: &PgnoSet,
        freed: &[Pgno],
    ) {
        let freed_set: PgnoSet = freed.iter().copied().collect();
        for p in self.count + 1..=plan.count {
            if !allocated.contains(&p) {
                self.committed_free.insert(p);
            }
        }
        for &p in allocated {
            if let Some((o, was)) = self.reserved.get(&p).copied() {
                if o == owner {
                    self.reserved.remove(&p);
                    if freed_set.contains(&p) {
                        // Allocated and freed again: nobody saw it.
                        self.avail.push((p, was));
                        self.committed_free.insert(p);
                    } else {
                        self.committed_free.remove(&p);
                    }
                }
            }
        }
        for &p in freed {
            if !allocated.contains(&p) {
                self.avail.push((p, tid));
                self.committed_free.insert(p);
            }
        }
        self.count = plan.count;
        self.end = self.end.max(plan.count);
    }

    /// The committed free list (A1), sorted.
    pub(super) fn committed_free(&self) -> Vec<Pgno> {
        let mut v: Vec<Pgno> = self.committed_free.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// Pages reserved by open transactions.
    #[cfg(test)]
    pub(super) fn reserved(&self) -> usize {
        self.reserved.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(p: &[Pgno]) -> PgnoSet {
        p.iter().copied().collect()
    }

    #[test]
    fn reservations_commit_and_return() {
        // Pages 1..=10 committed, 4 and 7 free.
        let mut a = Alloc::new(10, &[4, 7]);
        let t1 = a.allocate(1, 0).unwrap();
        let t2 = a.allocate(2, 0).unwrap();
        assert_eq!(set(&[t1, t2]), set(&[4, 7]));
        let t1b = a.allocate(1, 0).unwrap();
        assert_eq!(t1b, 11);
        let t2b = a.allocate(2, 0).unwrap();
        assert_eq!(t2b, 12);
        // Transaction 2 commits first: it covers 11 (held by 1) with zeros.
        let (al2, fr2) = (set(&[t2, 12]), vec![5]);
        let plan = a.plan(&al2, &fr2);
        assert_eq!(plan.count, 12);
        // Free before: {4, 7}; t2 keeps its page, 5 freed, 11 covered.
        assert_eq!(plan.free_count, 3);
        a.apply(2, 20, &plan, &al2, &fr2);
        assert_eq!(a.committed_free(), vec![t1, 5, 11]);
        // 5 was freed by commit 20: not for a snapshot before it (A3).
        assert_eq!(a.allocate(3, 19).unwrap(), 13);
        // Transaction 1 rolls back: 4/7 and 11 go back, still free.
        a.release(1, [t1, 11]);
        assert_eq!(a.committed_free(), vec![t1, 5, 11]);
        assert_eq!(a.reserved(), 1);
        let p = a.allocate(4, 25).unwrap();
        assert!([t1, 5, 11].contains(&p));
    }

    #[test]
    fn allocated_and_freed_again_stays_free() {
        let mut a = Alloc::new(3, &[]);
        let p = a.allocate(1, 0).unwrap();
        let al = set(&[p]);
        let plan = a.plan(&al, &[p]);
        assert_eq!((plan.count, plan.free_count), (4, 1));
        a.apply(1, 5, &plan, &al, &[p]);
        assert_eq!(a.committed_free(), vec![4]);
        assert_eq!(a.allocate(2, 0).unwrap(), 4);
    }
}
