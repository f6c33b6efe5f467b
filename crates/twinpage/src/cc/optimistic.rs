//! `begin-concurrent`: SQLite's BEGIN CONCURRENT branch, as the IPS paper
//! measures it (\[IPS\] §5.3), in the WAL mode.
//!
//! Writers take no lock while they run: each works on its private pages
//! and reads the committed state as of the snapshot it began on (the log
//! keeps those versions). At commit, under the pager's commit lock (the
//! log's append lock), the transaction is validated: if any page it read
//! or wrote was committed by another transaction after its snapshot, it
//! fails with a retryable [`crate::Error::Conflict`] naming the page and table,
//! and `Db::write` replays it. Otherwise it commits as the next TID.
//!
//! The paper describes the branch as checking the pages a transaction
//! *modified*; the branch itself checks the pages it *read*, and so do we:
//! validating writes only admits write skew (two transactions that each
//! read what the other writes both commit). Every page a writer changes
//! it reads first (the tree descends to it), so the read set covers the
//! write set except for pages freed or allocated without a read.
//!
//! Serializability: a committed writer's reads are exactly the state at
//! its commit point (no page it read changed between its snapshot and its
//! commit), so the committed writers are equivalent to running one after
//! the other in commit order; a read-only transaction reads one snapshot,
//! the state after a prefix of that order.

use super::{CommitCheck, LockManager, Profile, Txn};
use crate::base::{Pgno, Result, Tid};

/// The lock manager of `begin-concurrent`: no locks, validation at commit.
#[derive(Debug, Default)]
pub struct BeginConcurrent;

impl BeginConcurrent {
    /// The protocol (it keeps no state: the pager holds the read and write
    /// sets and the TID of each page's last commit).
    pub fn new() -> Self {
        BeginConcurrent
    }
}

/// The first page in `pages` that a commit after `snapshot` changed.
fn first_changed(pages: &[Pgno], snapshot: Tid, last: &dyn Fn(Pgno) -> Tid) -> Option<(Pgno, Tid)> {
    pages.iter().find_map(|&p| {
        let t = last(p);
        (t > snapshot).then_some((p, t))
    })
}

impl LockManager for BeginConcurrent {
    fn profile(&self) -> Profile {
        Profile {
            multi_writer: true,
            snapshot_reads: true,
            track_reads: true,
            page_hooks: false,
            reader_locks: false,
        }
    }

    fn commit_turn(&self, txn: &Txn, check: &CommitCheck<'_>) -> Result<Tid> {
        let last = check.last_commit;
        for (set, verb) in [(check.writes, "wrote"), (check.reads, "read")] {
            if let Some((page, by)) = first_changed(set, txn.snapshot, last) {
                return Err(check.conflict(
                    page,
                    format!(
                        "BEGIN CONCURRENT: the transaction {verb} page {page} as of commit {}, \
                         and commit {by} changed it since",
                        txn.snapshot
                    ),
                ));
            }
        }
        Ok(check.committed + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::Error;

    #[test]
    fn validation_checks_reads_and_writes() {
        let bc = BeginConcurrent::new();
        let txn = Txn {
            id: 1,
            tid: 6,
            snapshot: 5,
            busy_timeout: None,
        };
        let last = |p: Pgno| if p == 7 { 9 } else { 3 };
        let table = |p: Pgno| (p == 7).then(|| "t".to_string());
        let check = |reads: &'static [Pgno], writes: &'static [Pgno]| {
            let c = CommitCheck {
                reads,
                writes,
                committed: 9,
                last_commit: &last,
                table_of: &table,
            };
            bc.commit_turn(&txn, &c)
        };
        assert_eq!(check(&[3, 4], &[4]).unwrap(), 10);
        match check(&[3, 7], &[4]) {
            Err(Error::Conflict { page: 7, table, .. }) => assert_eq!(table.as_deref(), Some("t")),
            r => panic!("{r:?}"),
        }
        assert!(matches!(
            check(&[], &[7]),
            Err(Error::Conflict { page: 7, .. })
        ));
    }
}
