//! Concurrency control: who may read and write when.
//!
//! The engine asks a [`LockManager`] for permission at four moments: a read
//! transaction starts, a write transaction starts, a writer needs to touch
//! the database file (commit or cache spill), and either ends. The rollback
//! modes use [`SqliteLocks`], SQLite's SHARED / RESERVED / PENDING /
//! EXCLUSIVE protocol. Later protocols (WAL's never-blocked readers,
//! byte-range page locks, BEGIN CONCURRENT, 2VTO) implement the same trait;
//! page-level protocols additionally see every page read and write through
//! the hooks documented in ARCHITECTURE.md.

pub mod gate;
pub mod optimistic;
pub mod pagelock;
pub mod twovto;
pub mod wal;

use crate::base::sync::{Condvar, Mutex};
use crate::base::timers::{self, Timer};
use crate::base::{Error, Pgno, Result, Tid};
use std::str::FromStr;
// Ids, not coordination: a plain atomic, also under a schedule explorer.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A concurrency protocol a database may run with (`Options::concurrency`
/// picks one of those its mode's registry entry allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// SQLite's own: one writer at a time; readers as the mode's lock
    /// tables allow ([`Locking`]).
    Sqlite,
    /// SQLite's BEGIN CONCURRENT branch (\[IPS\] §5.3): writers run
    /// without locks on private pages, reading the snapshot they began
    /// on; a commit validates that no page it read or wrote was committed
    /// by someone else since ([`optimistic::BeginConcurrent`]).
    BeginConcurrent,
    /// The thesis' page locks (\[TH\] §2.2.2): SHARED and EXCLUSIVE per
    /// page in an in-process lock table, EXCLUSIVE on a commit's sorted
    /// page set ([`pagelock::PageLocks`]).
    PageLock,
    /// `page-lock` with the thesis' single EXCLUSIVE range from page 1 to
    /// the last page a commit writes, kept to measure what it costs.
    PageLockRange,
    /// Two-Version Timestamp Ordering with AFUW (\[IPS\] §4), for the
    /// in-page modes ([`twovto::TwoVto`]).
    TwoVto,
    /// 2VTO with First Updater Wins instead of AFUW (the paper's
    /// comparison, Fig. 4): an aborted transaction replays at once and may
    /// abort again.
    TwoVtoFuw,
    /// 2VTO with AFUW but no forced sleep (the paper's NS, Fig. 11).
    TwoVtoNs,
}

impl Protocol {
    /// Whether write transactions commit in the order they began (2VTO's
    /// timestamp order): a younger one waits for the older ones at commit.
    pub fn orders_commits(self) -> bool {
        matches!(
            self,
            Protocol::TwoVto | Protocol::TwoVtoFuw | Protocol::TwoVtoNs
        )
    }

    /// Every protocol, in the order their names are listed.
    pub const ALL: &'static [Protocol] = &[
        Protocol::Sqlite,
        Protocol::BeginConcurrent,
        Protocol::PageLock,
        Protocol::PageLockRange,
        Protocol::TwoVto,
        Protocol::TwoVtoFuw,
        Protocol::TwoVtoNs,
    ];

    /// Canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Sqlite => "sqlite",
            Protocol::BeginConcurrent => "begin-concurrent",
            Protocol::PageLock => "page-lock",
            Protocol::PageLockRange => "page-lock-range",
            Protocol::TwoVto => "2vto",
            Protocol::TwoVtoFuw => "2vto-fuw",
            Protocol::TwoVtoNs => "2vto-ns",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Protocol {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.to_ascii_lowercase().replace('_', "-");
        Protocol::ALL
            .iter()
            .copied()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Protocol::ALL.iter().map(|p| p.name()).collect();
                Error::InvalidArgument(format!(
                    "unknown concurrency protocol {s:?} (known: {})",
                    names.join(", ")
                ))
            })
    }
}

/// The lock tables a mode's one-writer protocol uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locking {
    /// SHARED / RESERVED / PENDING / EXCLUSIVE ([`SqliteLocks`]): a
    /// committing writer waits for readers, who may see the database file
    /// change under them otherwise.
    Rollback,
    /// Readers never block and are never blocked ([`wal::WalLocks`]): the
    /// writer only appends to a log that readers index by snapshot.
    Wal,
}

/// The lock manager for a protocol over a mode's lock tables, waiting up
/// to `busy_timeout` for a lock. A protocol that needs lock tables the
/// mode does not have (BEGIN CONCURRENT needs readers that see snapshots,
/// i.e. a log) is refused.
pub fn lock_manager(
    protocol: Protocol,
    locking: Locking,
    busy_timeout: Duration,
) -> Result<Arc<dyn LockManager>> {
    use pagelock::{Granularity, PageLocks};
    // Readers of the rollback modes read the file a commit changes in
    // place: they lock the pages they read.
    let readers = locking == Locking::Rollback;
    match (protocol, locking) {
        (Protocol::Sqlite, Locking::Rollback) => Ok(Arc::new(SqliteLocks::new())),
        (Protocol::Sqlite, Locking::Wal) => Ok(Arc::new(wal::WalLocks::new())),
        (Protocol::BeginConcurrent, Locking::Wal) => {
            Ok(Arc::new(optimistic::BeginConcurrent::new()))
        }
        (Protocol::PageLock, _) => Ok(Arc::new(PageLocks::new(
            Granularity::Pages,
            readers,
            busy_timeout,
        ))),
        (Protocol::PageLockRange, _) => Ok(Arc::new(PageLocks::new(
            Granularity::Range,
            readers,
            busy_timeout,
        ))),
        // Readers read their snapshot from the two versions in each page.
        (Protocol::TwoVto, _) => Ok(Arc::new(twovto::TwoVto::new(
            twovto::Rule::Afuw,
            true,
            busy_timeout,
        ))),
        (Protocol::TwoVtoFuw, _) => Ok(Arc::new(twovto::TwoVto::new(
            twovto::Rule::Fuw,
            false,
            busy_timeout,
        ))),
        (Protocol::TwoVtoNs, _) => Ok(Arc::new(twovto::TwoVto::new(
            twovto::Rule::Afuw,
            false,
            busy_timeout,
        ))),
        (p, l) => Err(Error::Unsupported(format!(
            "concurrency protocol {p} needs other lock tables than {l:?}"
        ))),
    }
}

/// Transaction ids: unique per write transaction (and per read
/// transaction that takes page locks) in the process.
static NEXT_TXN_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh transaction id.
pub fn next_txn_id() -> u64 {
    NEXT_TXN_ID.fetch_add(1, Ordering::Relaxed)
}

/// A write transaction's identity, handed out by the concurrency layer
/// (pager invariant P5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Txn {
    /// Unique per transaction in the process: the owner in lock tables.
    pub id: u64,
    /// TID: the FCC the transaction commits as. DHL and IPS stamp pages
    /// with it; the header's FCC becomes it at commit. A protocol that
    /// orders transactions at commit (BEGIN CONCURRENT) hands out a
    /// provisional one here and the real one from
    /// [`LockManager::commit_turn`]; 2VTO's is its `ts_commit`.
    pub tid: Tid,
    /// The last commit the transaction sees (its start timestamp).
    pub snapshot: Tid,
    /// How long this transaction's lock waits may take; `None`: the busy
    /// timeout the lock manager was made with. The pager sets it (a SQL
    /// connection's `sqlite3_busy_timeout` is per transaction).
    pub busy_timeout: Option<Duration>,
}

impl Txn {
    /// The wait allowed for one of this transaction's locks.
    pub fn timeout_or(&self, default: Duration) -> Duration {
        self.busy_timeout.unwrap_or(default)
    }
}

/// What a protocol needs from the pager, read once at open: the pager
/// skips every hook a protocol does not ask for, so the one-writer
/// protocols cost nothing per page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Profile {
    /// Several write transactions may be open at once: page 1 is merged
    /// at commit, pages come from the shared allocator, the free list is
    /// kept in memory, and transactions do not spill.
    pub multi_writer: bool,
    /// Write transactions read the committed state as of their snapshot
    /// (and register it, so a checkpoint keeps it), instead of the newest.
    pub snapshot_reads: bool,
    /// The pager records every committed page a write transaction reads
    /// and hands the set to [`LockManager::commit_turn`].
    pub track_reads: bool,
    /// Call [`LockManager::before_read`] and [`LockManager::before_write`].
    pub page_hooks: bool,
    /// Read transactions lock the pages they read
    /// ([`LockManager::reader_page`], [`LockManager::end_reader`]).
    pub reader_locks: bool,
}

/// What [`LockManager::commit_turn`] may inspect. It runs under the
/// pager's commit lock, so nothing in it changes while it runs.
pub struct CommitCheck<'a> {
    /// Committed pages the transaction read, sorted (empty unless the
    /// protocol's [`Profile::track_reads`]).
    pub reads: &'a [Pgno],
    /// Pages the transaction wrote or freed, sorted; pages it allocated
    /// fresh (no other transaction can have them) are left out.
    pub writes: &'a [Pgno],
    /// The newest committed TID (the header's FCC).
    pub committed: Tid,
    /// The TID of the last commit that wrote or freed a page in this
    /// session (0: none since the database was opened, so older than any
    /// snapshot).
    pub last_commit: &'a dyn Fn(Pgno) -> Tid,
    /// The table a page was reached through, when known.
    pub table_of: &'a dyn Fn(Pgno) -> Option<String>,
}

impl CommitCheck<'_> {
    /// The conflict error for `page`.
    pub fn conflict(&self, page: Pgno, what: String) -> Error {
        Error::Conflict {
            page,
            table: (self.table_of)(page),
            what,
        }
    }
}

/// A concurrency-control protocol.
///
/// Besides the lock moments, a protocol sees every transaction's identity
/// and, through the per-page hooks, every page a write transaction reads
/// or first writes, so page-level protocols (byte-range page locks, BEGIN
/// CONCURRENT's read and write sets, 2VTO) plug in without changing the
/// pager. The hooks run before the page is used; an error aborts the
/// operation with that error (a conflict, a busy lock).
///
/// The life of a write transaction: `begin_write`, `begin_txn`, the page
/// hooks, then at commit `lock_for_write` and `before_commit` (both
/// outside the pager's commit lock: they may wait), `commit_turn` and
/// `sequenced` (under it), `end_txn` (once durable and installed),
/// `end_write`. A rollback calls `end_txn(txn, None)` and
/// `end_write`.
///
/// The file-level lock moments default to taking no lock: protocols that
/// lock pages instead (or nothing) implement only what they need.
pub trait LockManager: Send + Sync {
    /// Start a read transaction (SQLite: take SHARED).
    fn begin_read(&self, timeout: Duration) -> Result<()> {
        let _ = timeout;
        Ok(())
    }
    /// End a read transaction.
    fn end_read(&self) {}
    /// Start a write transaction (SQLite: take RESERVED).
    fn begin_write(&self, timeout: Duration) -> Result<()> {
        let _ = timeout;
        Ok(())
    }
    /// The writer is about to change the database file: wait until no
    /// reader can observe it (SQLite: PENDING, then EXCLUSIVE). Idempotent
    /// within one write transaction.
    fn lock_exclusive(&self, timeout: Duration) -> Result<()> {
        let _ = timeout;
        Ok(())
    }
    /// End a write transaction, dropping RESERVED/EXCLUSIVE.
    fn end_write(&self) {}

    /// What the protocol needs from the pager (default: nothing; one
    /// writer at a time).
    fn profile(&self) -> Profile {
        Profile::default()
    }

    /// The identity of a write transaction starting on top of commit
    /// `committed`. With one writer at a time, the next TID.
    fn begin_txn(&self, committed: Tid) -> Txn {
        Txn {
            id: next_txn_id(),
            tid: committed + 1,
            snapshot: committed,
            busy_timeout: None,
        }
    }

    /// A write transaction is about to read committed page `pgno` (not one
    /// of its own dirty pages), last written by commit `page_tid` (see
    /// [`CommitCheck::last_commit`]). Only with [`Profile::page_hooks`].
    fn before_read(&self, txn: &Txn, pgno: Pgno, page_tid: Tid) -> Result<()> {
        let _ = (txn, pgno, page_tid);
        Ok(())
    }

    /// A write transaction is about to write (or free) `pgno` for the
    /// first time. Only with [`Profile::page_hooks`].
    fn before_write(&self, txn: &Txn, pgno: Pgno, page_tid: Tid) -> Result<()> {
        let _ = (txn, pgno, page_tid);
        Ok(())
    }

    /// Read transaction `reader` is about to read `pgno`. Only with
    /// [`Profile::reader_locks`].
    fn reader_page(&self, reader: u64, pgno: Pgno, timeout: Duration) -> Result<()> {
        let _ = (reader, pgno, timeout);
        Ok(())
    }

    /// Read transaction `reader` ended: drop its page locks. Only with
    /// [`Profile::reader_locks`].
    fn end_reader(&self, reader: u64) {
        let _ = reader;
    }

    /// Before a spill or commit writes `pages` (sorted, page 1 left out):
    /// lock them against readers. Called outside the pager's commit lock.
    /// Default: [`LockManager::lock_exclusive`].
    fn lock_for_write(&self, txn: &Txn, pages: &[Pgno], timeout: Duration) -> Result<()> {
        let _ = (txn, pages);
        self.lock_exclusive(timeout)
    }

    /// The transaction wants to commit: wait for its turn if the protocol
    /// orders commits (2VTO). Called outside the pager's commit lock, so
    /// predecessors can commit meanwhile. Default: go.
    fn before_commit(&self, txn: &Txn, timeout: Duration) -> Result<()> {
        let _ = (txn, timeout);
        Ok(())
    }

    /// Under the pager's commit lock: validate the transaction (an error
    /// aborts it) and return the TID it commits as, greater than
    /// `check.committed`. Default: the TID [`LockManager::begin_txn`]
    /// handed out.
    fn commit_turn(&self, txn: &Txn, check: &CommitCheck<'_>) -> Result<Tid> {
        let _ = check;
        Ok(txn.tid)
    }

    /// The transaction's commit is in the journal's order (validated,
    /// TID fixed, under the commit lock) but not yet durable: with group
    /// commit it waits for a shared fdatasync, and a protocol that orders
    /// commits may let its successor commit now. It keeps its locks until
    /// [`LockManager::end_txn`]. Default: nothing.
    fn sequenced(&self, txn: &Txn) {
        let _ = txn;
    }

    /// The transaction is over: committed as `committed` (durable and
    /// installed for readers) or rolled back (`None`).
    fn end_txn(&self, txn: &Txn, committed: Option<Tid>) {
        let _ = (txn, committed);
    }

    /// The protocol's counters, by name (2VTO: aborts, the most aborts of
    /// one transaction, forced sleep), for [`crate::Stats::protocol`].
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Adds the time since its start to this thread's lock-wait clock when
/// dropped ([`crate::base::timers`]).
pub(crate) struct WaitClock(pub(crate) Instant);

impl Drop for WaitClock {
    fn drop(&mut self) {
        timers::add_since(Timer::LockWait, self.0);
    }
}

#[derive(Default)]
struct State {
    readers: usize,
    reserved: bool,
    pending: bool,
    exclusive: bool,
}

/// SQLite's rollback-journal locking, in process: many readers or one
/// committing writer; a writer that waits for EXCLUSIVE holds PENDING,
/// which keeps new readers out so it cannot starve.
#[derive(Default)]
pub struct SqliteLocks {
    st: Mutex<State>,
    cv: Condvar,
}

impl SqliteLocks {
    /// A fresh lock table.
    pub fn new() -> Self {
        Self::default()
    }

    fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut ready: impl FnMut(&State) -> bool,
        mut take: impl FnMut(&mut State),
    ) -> Result<()> {
        let mut st = self.st.lock();
        if ready(&st) {
            take(&mut st);
            return Ok(());
        }
        // It has to wait: only now is the clock read.
        let start = Instant::now();
        let deadline = start + timeout;
        let _clock = WaitClock(start);
        loop {
            if ready(&st) {
                take(&mut st);
                return Ok(());
            }
            if self.cv.wait_until(&mut st, deadline).timed_out() && !ready(&st) {
                return Err(Error::Busy(format!(
                    "{what}: busy timeout of {timeout:?} expired"
                )));
            }
        }
    }
}

impl LockManager for SqliteLocks {
    fn begin_read(&self, timeout: Duration) -> Result<()> {
        self.wait_until(
            timeout,
            "SHARED lock",
            |s| !s.pending && !s.exclusive,
            |s| s.readers += 1,
        )
    }

    fn end_read(&self) {
        let mut st = self.st.lock();
        st.readers = st.readers.saturating_sub(1);
        self.cv.notify_all();
    }

    fn begin_write(&self, timeout: Duration) -> Result<()> {
        self.wait_until(
            timeout,
            "RESERVED lock",
            |s| !s.reserved,
            |s| s.reserved = true,
        )
    }

    fn lock_exclusive(&self, timeout: Duration) -> Result<()> {
        {
            let mut st = self.st.lock();
            if st.exclusive {
                return Ok(());
            }
            st.pending = true;
        }
        let r = self.wait_until(
            timeout,
            "EXCLUSIVE lock",
            |s| s.readers == 0,
            |s| s.exclusive = true,
        );
        if r.is_err() {
            // Give up PENDING so readers can proceed; RESERVED stays.
            self.st.lock().pending = false;
            self.cv.notify_all();
        }
        r
    }

    fn end_write(&self) {
        let mut st = self.st.lock();
        st.reserved = false;
        st.pending = false;
        st.exclusive = false;
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn writer_waits_for_readers_and_times_out() {
        let l = Arc::new(SqliteLocks::new());
        l.begin_read(Duration::ZERO).unwrap();
        l.begin_write(Duration::ZERO).unwrap();
        assert!(matches!(
            l.begin_write(Duration::from_millis(5)),
            Err(Error::Busy(_))
        ));
        assert!(matches!(
            l.lock_exclusive(Duration::from_millis(5)),
            Err(Error::Busy(_))
        ));
        let l2 = l.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            l2.end_read();
        });
        l.lock_exclusive(Duration::from_secs(5)).unwrap();
        // PENDING/EXCLUSIVE keep new readers out.
        assert!(l.begin_read(Duration::from_millis(5)).is_err());
        l.end_write();
        l.begin_read(Duration::ZERO).unwrap();
        t.join().unwrap();
    }
}
