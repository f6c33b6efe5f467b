//! `page-lock`: the thesis' byte-range page locks (\[TH\] §2.2.2) as an
//! in-process lock table.
//!
//! Two lock states per page, SHARED and EXCLUSIVE; no RESERVED or
//! PENDING. A write transaction takes SHARED on every committed page it
//! reads and holds it to its end (strict two-phase locking); at commit it
//! takes EXCLUSIVE on its written pages in page order, waiting for the
//! SHARED holders to leave, and releases everything once the commit is
//! durable and installed. Readers of other pages keep running meanwhile.
//! In the rollback modes read transactions take SHARED page locks too
//! (they read the database file, which a commit changes in place); in WAL
//! they read snapshots and take none.
//!
//! The thesis implements the locks with `fcntl` record locks, which
//! belong to the process and cannot separate its threads: this table does,
//! and [`crate::storage`]'s `flock` keeps other processes out. Where the
//! thesis leaves gaps:
//! - page 1 is not locked: its fields are merged at commit (pager P10);
//! - the thesis takes one EXCLUSIVE range from the first to the last page
//!   of the sorted set; [`Granularity::Range`] does that (from page 1, as a
//!   commit there always writes the header) so its cost can be measured
//!   against per-page locks ([`Granularity::Pages`], the default);
//! - a SHARED holder that asks for EXCLUSIVE while another does the same
//!   deadlocks (two writers that read the same page): the table keeps the
//!   waits-for graph, and the transaction whose wait would close a cycle
//!   fails with a retryable [`Error::Conflict`] instead of waiting;
//! - a wait longer than the busy timeout fails with [`Error::Busy`].
//!
//! Invariants (L1-L3):
//! - **L1** A page has at most one EXCLUSIVE holder, and then no SHARED
//!   holder but that same owner.
//! - **L2** An owner waits for at most one page at a time, and its
//!   waits-for edges name exactly the owners that block that page.
//! - **L3** No cycle of waits-for edges ever exists: the owner whose wait
//!   would close one does not wait.

use super::{CommitCheck, LockManager, Profile, Txn};
use crate::base::pgmap::PgnoMap;
use crate::base::sync::{Condvar, Mutex};
use crate::base::timers::{self, Timer};
use crate::base::{Error, Pgno, Result, Tid};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How a commit locks the pages it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// Each written page, in page order.
    Pages,
    /// Every page from 1 to the last written one: the thesis' single
    /// byte range `[(first-1)*ps, last*ps)` with the header in every
    /// commit (kept to measure what it costs).
    Range,
}

#[derive(Default, Debug)]
struct Entry {
    shared: Vec<u64>,
    exclusive: Option<u64>,
}

impl Entry {
    /// Owners other than `me` that keep `me` from the lock (L1).
    fn blockers(&self, me: u64, exclusive: bool) -> Vec<u64> {
        let mut v: Vec<u64> = self.exclusive.into_iter().filter(|&o| o != me).collect();
        if exclusive {
            v.extend(self.shared.iter().copied().filter(|&o| o != me));
        }
        v
    }

    fn is_free(&self) -> bool {
        self.shared.is_empty() && self.exclusive.is_none()
    }
}

#[derive(Default)]
struct Table {
    pages: PgnoMap<Entry>,
    /// Pages each owner holds a lock on.
    held: HashMap<u64, Vec<Pgno>>,
    /// Waits-for edges (L2).
    waits: HashMap<u64, Vec<u64>>,
}

impl Table {
    /// Whether `from` reaches `to` through waits-for edges.
    fn reaches(&self, from: &[u64], to: u64) -> bool {
        let mut stack: Vec<u64> = from.to_vec();
        let mut seen: Vec<u64> = Vec::new();
        while let Some(o) = stack.pop() {
            if o == to {
                return true;
            }
            if seen.contains(&o) {
                continue;
            }
            seen.push(o);
            if let Some(next) = self.waits.get(&o) {
                stack.extend_from_slice(next);
            }
        }
        false
    }

    fn grant(&mut self, owner: u64, pgno: Pgno, exclusive: bool) {
        let e = self.pages.entry(pgno).or_default();
        let new = !e.shared.contains(&owner) && e.exclusive != Some(owner);
        if exclusive {
            e.exclusive = Some(owner);
        } else if new {
            e.shared.push(owner);
        }
        if new {
            self.held.entry(owner).or_default().push(pgno);
        }
    }

    fn release(&mut self, owner: u64) {
        self.waits.remove(&owner);
        for p in self.held.remove(&owner).unwrap_or_default() {
            if let Some(e) = self.pages.get_mut(&p) {
                e.shared.retain(|&o| o != owner);
                if e.exclusive == Some(owner) {
                    e.exclusive = None;
                }
                if e.is_free() {
                    self.pages.remove(&p);
                }
            }
        }
    }
}

/// Counters of the lock table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LockStats {
    /// Lock requests that had to wait.
    pub waits: u64,
    /// Total time spent waiting, in microseconds.
    pub wait_us: u64,
    /// Waits refused because they would have closed a cycle.
    pub deadlocks: u64,
    /// Waits that ran out of time.
    pub timeouts: u64,
}

/// The lock manager of `page-lock`.
pub struct PageLocks {
    granularity: Granularity,
    /// How long a transaction waits for a SHARED lock while it runs.
    timeout: Duration,
    /// Read transactions lock pages (rollback modes).
    reader_locks: bool,
    t: Mutex<Table>,
    cv: Condvar,
    stats: Mutex<LockStats>,
}

impl PageLocks {
    /// A lock table; `reader_locks` when read transactions read the file a
    /// commit changes in place (the rollback modes); `timeout` for the
    /// SHARED locks a write transaction takes as it reads.
    pub fn new(granularity: Granularity, reader_locks: bool, timeout: Duration) -> Self {
        PageLocks {
            granularity,
            timeout,
            reader_locks,
            t: Mutex::new(Table::default()),
            cv: Condvar::new(),
            stats: Mutex::new(LockStats::default()),
        }
    }

    /// The table's counters so far.
    pub fn stats(&self) -> LockStats {
        *self.stats.lock()
    }

    /// Lock `pgno` for `owner`, waiting up to `timeout`.
    pub fn lock(&self, owner: u64, pgno: Pgno, exclusive: bool, timeout: Duration) -> Result<()> {
        let mut t = self.t.lock();
        let mut blockers = match t.pages.get(&pgno) {
            Some(e) => e.blockers(owner, exclusive),
            None => Vec::new(),
        };
        if blockers.is_empty() {
            t.grant(owner, pgno, exclusive);
            return Ok(());
        }
        let start = Instant::now();
        let deadline = start + timeout;
        let what = if exclusive { "EXCLUSIVE" } else { "SHARED" };
        let r = loop {
            if t.reaches(&blockers, owner) {
                // L3: waiting would close a cycle.
                self.stats.lock().deadlocks += 1;
                break Err(Error::Conflict {
                    page: pgno,
                    table: None,
                    what: format!(
                        "page-lock: {what} lock on page {pgno} would deadlock with transaction(s) {blockers:?}"
                    ),
                });
            }
            t.waits.insert(owner, blockers);
            let timed_out = self.cv.wait_until(&mut t, deadline).timed_out();
            t.waits.remove(&owner);
            blockers = match t.pages.get(&pgno) {
                Some(e) => e.blockers(owner, exclusive),
                None => Vec::new(),
            };
            if blockers.is_empty() {
                t.grant(owner, pgno, exclusive);
                break Ok(());
            }
            if timed_out {
                self.stats.lock().timeouts += 1;
                break Err(Error::Busy(format!(
                    "page-lock: {what} lock on page {pgno}: busy timeout of {timeout:?} expired \
                     (held by {blockers:?})"
                )));
            }
        };
        drop(t);
        timers::add_since(Timer::LockWait, start);
        let mut s = self.stats.lock();
        s.waits += 1;
        s.wait_us += start.elapsed().as_micros() as u64;
        r
    }

    /// Drop every lock of `owner` and wake the waiters.
    pub fn release(&self, owner: u64) {
        let mut t = self.t.lock();
        if t.held.contains_key(&owner) || t.waits.contains_key(&owner) {
            t.release(owner);
            drop(t);
            self.cv.notify_all();
        }
    }

    /// Locks held by `owner` (for tests).
    pub fn held(&self, owner: u64) -> usize {
        self.t.lock().held.get(&owner).map_or(0, Vec::len)
    }
}

impl LockManager for PageLocks {
    // No file-level lock moments: `lock_exclusive` is asked only by the
    // one-writer paths (the clean close), when nothing else is open.

    fn profile(&self) -> Profile {
        Profile {
            multi_writer: true,
            snapshot_reads: false,
            track_reads: false,
            page_hooks: true,
            reader_locks: self.reader_locks,
        }
    }

    fn before_read(&self, txn: &Txn, pgno: Pgno, _page_tid: Tid) -> Result<()> {
        self.lock(txn.id, pgno, false, txn.timeout_or(self.timeout))
    }

    fn reader_page(&self, reader: u64, pgno: Pgno, timeout: Duration) -> Result<()> {
        self.lock(reader, pgno, false, timeout)
    }

    fn end_reader(&self, reader: u64) {
        self.release(reader);
    }

    fn lock_for_write(&self, txn: &Txn, pages: &[Pgno], timeout: Duration) -> Result<()> {
        match self.granularity {
            Granularity::Pages => {
                for &p in pages.iter().filter(|&&p| p != 1) {
                    self.lock(txn.id, p, true, timeout)?;
                }
            }
            Granularity::Range => {
                if let Some(&last) = pages.last() {
                    for p in 1..=last {
                        self.lock(txn.id, p, true, timeout)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn commit_turn(&self, _txn: &Txn, check: &CommitCheck<'_>) -> Result<Tid> {
        // The locks already serialize conflicting transactions.
        Ok(check.committed + 1)
    }

    fn end_txn(&self, txn: &Txn, _committed: Option<Tid>) {
        self.release(txn.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const T: Duration = Duration::from_millis(20);

    #[test]
    fn shared_locks_coexist_exclusive_waits_for_them() {
        let l = PageLocks::new(Granularity::Pages, true, T);
        l.lock(1, 5, false, T).unwrap();
        l.lock(2, 5, false, T).unwrap();
        assert!(matches!(l.lock(3, 5, true, T), Err(Error::Busy(_))));
        // An owner's own SHARED does not block its EXCLUSIVE.
        l.release(2);
        l.lock(1, 5, true, T).unwrap();
        assert!(matches!(l.lock(2, 5, false, T), Err(Error::Busy(_))));
        l.lock(2, 6, false, T).unwrap();
        l.release(1);
        l.lock(2, 5, false, T).unwrap();
        assert_eq!(l.held(2), 2);
        assert_eq!(l.stats().timeouts, 2);
    }

    #[test]
    fn an_upgrade_deadlock_is_refused_not_waited() {
        let l = Arc::new(PageLocks::new(Granularity::Pages, false, T));
        l.lock(1, 9, false, T).unwrap();
        l.lock(2, 9, false, T).unwrap();
        let l2 = l.clone();
        let waiter = std::thread::spawn(move || l2.lock(1, 9, true, Duration::from_secs(10)));
        // Wait until 1 is waiting for 2, then 2 asks for the same upgrade.
        while !l.t.lock().waits.contains_key(&1) {
            std::thread::yield_now();
        }
        match l.lock(2, 9, true, Duration::from_secs(10)) {
            Err(Error::Conflict { page: 9, .. }) => {}
            r => panic!("{r:?}"),
        }
        l.release(2);
        waiter.join().unwrap().unwrap();
        assert_eq!(l.stats().deadlocks, 1);
    }
}
