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

pub mod wal;

use crate::base::{Error, Pgno, Result, Tid};
use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// A concurrency protocol a database may run with (`Options::concurrency`
/// picks one of those its mode's registry entry allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// SQLite's own: one writer at a time; readers as the mode's lock
    /// tables allow ([`Locking`]).
    Sqlite,
}

impl Protocol {
    /// Canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Sqlite => "sqlite",
        }
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

/// The lock manager for a protocol over a mode's lock tables.
pub fn lock_manager(protocol: Protocol, locking: Locking) -> std::sync::Arc<dyn LockManager> {
    match (protocol, locking) {
        (Protocol::Sqlite, Locking::Rollback) => std::sync::Arc::new(SqliteLocks::new()),
        (Protocol::Sqlite, Locking::Wal) => std::sync::Arc::new(wal::WalLocks::new()),
    }
}

/// A write transaction's identity, handed out by the concurrency layer
/// (pager invariant P5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Txn {
    /// TID: the FCC the transaction commits as. DHL and IPS stamp pages
    /// with it; the header's FCC becomes it at commit.
    pub tid: Tid,
    /// The last commit the transaction sees (its start timestamp).
    pub snapshot: Tid,
}

/// A concurrency-control protocol.
///
/// Besides the lock moments, a protocol sees every transaction's identity
/// and, through the per-page hooks, every page a write transaction reads
/// or first writes, so page-level protocols (byte-range page locks, BEGIN
/// CONCURRENT's read and write sets, 2VTO) plug in without changing the
/// pager. The hooks run before the page is used; an error aborts the
/// operation with that error (a conflict, a busy lock).
pub trait LockManager: Send + Sync {
    /// Start a read transaction (SQLite: take SHARED).
    fn begin_read(&self, timeout: Duration) -> Result<()>;
    /// End a read transaction.
    fn end_read(&self);
    /// Start a write transaction (SQLite: take RESERVED).
    fn begin_write(&self, timeout: Duration) -> Result<()>;
    /// The writer is about to change the database file: wait until no
    /// reader can observe it (SQLite: PENDING, then EXCLUSIVE). Idempotent
    /// within one write transaction.
    fn lock_exclusive(&self, timeout: Duration) -> Result<()>;
    /// End a write transaction, dropping RESERVED/EXCLUSIVE.
    fn end_write(&self);

    /// The identity of a write transaction starting on top of commit
    /// `committed`. With one writer at a time, the next TID.
    fn begin_txn(&self, committed: Tid) -> Txn {
        Txn {
            tid: committed + 1,
            snapshot: committed,
        }
    }

    /// A write transaction is about to read committed page `pgno` (not one
    /// of its own dirty pages).
    fn before_read(&self, txn: &Txn, pgno: Pgno) -> Result<()> {
        let _ = (txn, pgno);
        Ok(())
    }

    /// A write transaction is about to write (or free) `pgno` for the
    /// first time.
    fn before_write(&self, txn: &Txn, pgno: Pgno) -> Result<()> {
        let _ = (txn, pgno);
        Ok(())
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
        let deadline = Instant::now() + timeout;
        let mut st = self.st.lock();
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
