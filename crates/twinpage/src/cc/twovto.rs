//! `2vto`: Two-Version Timestamp Ordering with the Abortee-or-First-Updater
//! Wins rule (\[IPS\] §4), for the in-page modes (`ips`, `dhl-cc`).
//!
//! - **Timestamps** (§4.2). A write transaction gets `TS_start` (its
//!   snapshot: the FCC when it begins) and `TS_commit` (its [`Txn::tid`],
//!   from a counter, in the order transactions begin). Commits happen
//!   strictly in `TS_commit` order: a transaction commits only when every
//!   transaction with a smaller `TS_commit` has committed or aborted
//!   ([`LockManager::before_commit`] sleeps until then), and the FCC
//!   becomes its `TS_commit` (gaps where transactions aborted). With
//!   group commit, "committed" means put in the journal's order
//!   ([`LockManager::sequenced`]): the successor commits while its
//!   predecessor waits for the fdatasync they then share; locks are held
//!   until the commit is durable.
//! - **Page locks** (§4.2.1). A page is exclusively locked from the
//!   transaction's first write of it until the transaction ends; the lock
//!   keeps the page's committed version (the journal of the new one, in
//!   the same page) safe. A request for a page another transaction holds
//!   never waits: under **FUW** the requester aborts; under **AFUW**
//!   (Algorithm 2) the requester aborts unless it is the *oldest* running
//!   transaction, which instead *wounds* the holder (the holder aborts at
//!   its next page access or commit) and takes the lock. After the lock,
//!   a page committed after the transaction's snapshot aborts it (step
//!   2-1).
//! - **AFUW's forced sleep** (§4.3). The replay of an aborted transaction
//!   takes a new `TS_commit` and sleeps (blocking on a condition variable)
//!   until it is the oldest; it then reads the newest state (nothing can
//!   commit before it), wounds whoever holds a page it needs, and never
//!   aborts again. [`TwoVto::stats`] counts aborts per transaction; a
//!   transaction about to abort a second time under AFUW is an engine bug
//!   and fails with [`Error::Internal`] instead (the hard assertion the
//!   tests and benchmarks check). **NS** (the paper's "no forced sleep")
//!   replays at once.
//! - **Readers** take no locks: they read their snapshot, which the two
//!   versions in every page (and the cache) serve (§4.2).
//!
//! **Beyond the paper: read validation.** The paper validates nothing a
//! write transaction only reads, which is not serializable: a transaction
//! that read page P at its snapshot commits after an older one that
//! changed P since, though commit order says it should have seen the
//! change. Here a write transaction aborts when a page it reads was
//! committed after its snapshot ([`LockManager::before_read`]) or is by the
//! time it commits ([`LockManager::commit_turn`]). The replay, being the
//! oldest, cannot fail either test, so AFUW's one-abort bound holds.
//!
//! The replay is tied to its aborted transaction by the thread: an abort
//! leaves a note in a thread-local that the next write transaction of the
//! same thread on the same database picks up (`Db::write` replays on the
//! thread that failed). The new `TS_commit` is taken when the replay
//! begins, not at the abort as Algorithm 2 line 3 does, so that a
//! transaction the application abandons after an abort holds no place in
//! the commit order.

use super::{next_txn_id, CommitCheck, LockManager, Profile, Txn};
use crate::base::sync::{thread_local, Condvar, Mutex, MutexGuard};
use crate::base::timers::{self, Timer};
use crate::base::{Error, Pgno, Result, Tid};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How a write-write conflict is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Abortee-or-First-Updater Wins (\[IPS\] Algorithm 2).
    Afuw,
    /// First Updater Wins (\[IPS\] §4.2.1): the requester always aborts.
    Fuw,
}

/// The 2VTO lock manager.
pub struct TwoVto {
    rule: Rule,
    forced_sleep: bool,
    /// How long the oldest waits for a wounded holder to let go of a page
    /// (the busy timeout).
    wound_wait: Duration,
    /// This instance, for the thread-local replay notes.
    instance: u64,
    st: Mutex<State>,
    cv: Condvar,
}

/// Counters of [`TwoVto::stats`].
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    committed: u64,
    aborts: u64,
    wounds: u64,
    max_aborts: u64,
    second_aborts: u64,
    forced_sleep_ns: u64,
    commit_wait_ns: u64,
    wound_wait_ns: u64,
}

#[derive(Default)]
struct State {
    /// The last `TS_commit` handed out.
    last_ts: Tid,
    /// Running write transactions by `TS_commit` (a replay sleeping for
    /// its turn included).
    active: BTreeMap<Tid, Active>,
    /// Page locks: the `TS_commit` of the holder.
    owner: HashMap<Pgno, Tid>,
    n: Counters,
}

#[derive(Default)]
struct Active {
    /// Pages it holds.
    pages: Vec<Pgno>,
    /// The oldest transaction took a page of it: it must abort.
    wounded: bool,
    /// It was refused (a conflict): its rollback is an abort the replay
    /// counts.
    conflicted: bool,
    /// Aborts of this transaction before this run (0 or, under AFUW, 1).
    aborts: u32,
    /// Its commit is in the journal's order (group commit: not yet
    /// durable): younger transactions may commit behind it. It keeps its
    /// page locks until it ends.
    sequenced: bool,
}

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The replay note: (instance, aborts so far, `TS_commit` reserved by
    /// the forced sleep, 0 if none).
    static REPLAY: Cell<Option<(u64, u32, Tid)>> = const { Cell::new(None) };
}

fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl TwoVto {
    /// A lock manager with conflict rule `rule`; `forced_sleep` false is
    /// the paper's NS variant. The oldest transaction waits up to
    /// `wound_wait` (the busy timeout) for a wounded holder to let go of a
    /// page it needs, then fails with [`Error::Busy`].
    pub fn new(rule: Rule, forced_sleep: bool, wound_wait: Duration) -> Self {
        TwoVto {
            rule,
            forced_sleep,
            wound_wait,
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            st: Mutex::new(State::default()),
            cv: Condvar::new(),
        }
    }

    fn oldest(st: &State) -> Option<Tid> {
        st.active.keys().next().copied()
    }

    /// Whether every transaction older than `ts` has finished or put its
    /// commit in order: `ts` may commit (§4.2's commit order, with group
    /// commit letting a commit go while its predecessor's sync runs).
    fn my_turn(st: &State, ts: Tid) -> bool {
        st.active.range(..ts).all(|(_, a)| a.sequenced)
    }

    /// Whether a second abort of a transaction is a broken guarantee (AFUW
    /// with forced sleep) rather than the rule's nature (FUW, NS).
    fn bounded(&self) -> bool {
        self.rule == Rule::Afuw && self.forced_sleep
    }

    /// Refuse `txn` with a conflict (it will roll back and replay).
    fn refuse(&self, st: &mut State, txn: &Txn, page: Pgno, what: String) -> Error {
        let Some(me) = st.active.get_mut(&txn.tid) else {
            return Error::Internal(format!("2VTO: transaction {} is not running", txn.tid));
        };
        if me.aborts >= 1 && self.bounded() {
            // AFUW's guarantee: a replay is the oldest and never aborts.
            st.n.second_aborts += 1;
            return Error::Internal(format!(
                "2VTO/AFUW: transaction {} would abort a second time ({what})",
                txn.tid
            ));
        }
        me.conflicted = true;
        Error::Conflict {
            page,
            table: None,
            what,
        }
    }

    /// Wait on the condition variable until `deadline`; false if it passed.
    fn wait(&self, st: &mut MutexGuard<'_, State>, deadline: Instant) -> bool {
        !self.cv.wait_until(st, deadline).timed_out()
    }

    /// A wounded transaction notices at its next step.
    fn check_wounded(&self, st: &mut State, txn: &Txn, page: Pgno) -> Result<()> {
        match st.active.get(&txn.tid) {
            Some(a) if a.wounded => Err(self.refuse(
                st,
                txn,
                page,
                "2VTO/AFUW: wounded by the oldest transaction, which needs one of its pages".into(),
            )),
            Some(_) => Ok(()),
            None => Err(Error::Internal(format!(
                "2VTO: transaction {} is not running",
                txn.tid
            ))),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let n = self.st.lock().n;
        vec![
            ("committed", n.committed),
            ("aborts", n.aborts),
            ("max_aborts_per_txn", n.max_aborts),
            ("second_aborts", n.second_aborts),
            ("wounds", n.wounds),
            ("forced_sleep_ns", n.forced_sleep_ns),
            ("commit_wait_ns", n.commit_wait_ns),
            ("wound_wait_ns", n.wound_wait_ns),
        ]
    }
}

impl LockManager for TwoVto {
    fn profile(&self) -> Profile {
        Profile {
            multi_writer: true,
            snapshot_reads: true,
            track_reads: true,
            page_hooks: true,
            reader_locks: false,
        }
    }

    fn begin_write(&self, timeout: Duration) -> Result<()> {
        let note = REPLAY.with(|r| r.get()).filter(|n| n.0 == self.instance);
        let Some((_, aborts, _)) = note else {
            return Ok(());
        };
        if !(self.rule == Rule::Afuw && self.forced_sleep) {
            return Ok(());
        }
        // AFUW's forced sleep (Algorithm 2, lines 3-6): a new TS_commit,
        // then sleep until every older transaction has finished.
        let start = Instant::now();
        let deadline = start + timeout;
        let mut st = self.st.lock();
        st.last_ts += 1;
        let ts = st.last_ts;
        st.active.insert(
            ts,
            Active {
                aborts,
                ..Active::default()
            },
        );
        while Self::oldest(&st) != Some(ts) {
            if !self.wait(&mut st, deadline) && Self::oldest(&st) != Some(ts) {
                st.active.remove(&ts);
                self.cv.notify_all();
                REPLAY.with(|r| r.set(None));
                return Err(Error::Busy(format!(
                    "2VTO: replay waited {timeout:?} to become the oldest transaction"
                )));
            }
        }
        st.n.forced_sleep_ns += elapsed_ns(start);
        timers::add_since(Timer::ForcedSleep, start);
        REPLAY.with(|r| r.set(Some((self.instance, aborts, ts))));
        Ok(())
    }

    fn end_write(&self) {
        // A replay that slept for its turn but never began (the pager
        // failed to start it) gives its place in the commit order back.
        let note = REPLAY.with(|r| r.get());
        if let Some((i, _, ts)) = note {
            if i == self.instance && ts != 0 {
                REPLAY.with(|r| r.set(None));
                self.st.lock().active.remove(&ts);
                self.cv.notify_all();
            }
        }
    }

    fn begin_txn(&self, committed: Tid) -> Txn {
        let note = REPLAY
            .with(|r| r.replace(None))
            .filter(|n| n.0 == self.instance);
        let mut st = self.st.lock();
        let ts = match note {
            Some((_, _, ts)) if ts != 0 && st.active.contains_key(&ts) => ts,
            _ => {
                st.last_ts = st.last_ts.max(committed) + 1;
                let ts = st.last_ts;
                st.active.insert(
                    ts,
                    Active {
                        aborts: note.map_or(0, |n| n.1),
                        ..Active::default()
                    },
                );
                ts
            }
        };
        Txn {
            id: next_txn_id(),
            tid: ts,
            snapshot: committed,
            busy_timeout: None,
        }
    }

    fn before_read(&self, txn: &Txn, pgno: Pgno, page_tid: Tid) -> Result<()> {
        let mut st = self.st.lock();
        self.check_wounded(&mut st, txn, pgno)?;
        if page_tid > txn.snapshot {
            return Err(self.refuse(
                &mut st,
                txn,
                pgno,
                format!(
                    "2VTO: page {pgno} was committed by {page_tid}, after the snapshot {} \
                     the transaction reads",
                    txn.snapshot
                ),
            ));
        }
        Ok(())
    }

    fn before_write(&self, txn: &Txn, pgno: Pgno, page_tid: Tid) -> Result<()> {
        let start = Instant::now();
        // The oldest waits for a wounded holder to let go: bounded by the
        // holder's next page access or commit, and by the busy timeout
        // (the holder may be waiting on the same thread: one thread can
        // drive several transactions).
        let deadline = start + self.wound_wait;
        let mut waited = false;
        let mut st = self.st.lock();
        loop {
            self.check_wounded(&mut st, txn, pgno)?;
            let holder = st.owner.get(&pgno).copied();
            match holder {
                None => {
                    st.owner.insert(pgno, txn.tid);
                    if let Some(me) = st.active.get_mut(&txn.tid) {
                        me.pages.push(pgno);
                    }
                    break;
                }
                Some(o) if o == txn.tid => break,
                Some(o) if self.rule == Rule::Afuw && Self::oldest(&st) == Some(txn.tid) => {
                    // Step (1-1): the oldest wounds the holder and takes
                    // the lock once it is released.
                    if let Some(h) = st.active.get_mut(&o) {
                        if !h.wounded {
                            h.wounded = true;
                            st.n.wounds += 1;
                        }
                    }
                    self.cv.notify_all();
                    waited = true;
                    if !self.wait(&mut st, deadline) && st.owner.get(&pgno) == Some(&o) {
                        return Err(Error::Busy(format!(
                            "2VTO: transaction {o} holds page {pgno} and did not notice \
                             it was wounded"
                        )));
                    }
                }
                Some(o) => {
                    // Step (1-2), or FUW: the requester aborts.
                    return Err(self.refuse(
                        &mut st,
                        txn,
                        pgno,
                        format!("2VTO: page {pgno} is locked by transaction {o}"),
                    ));
                }
            }
        }
        if waited {
            st.n.wound_wait_ns += elapsed_ns(start);
            timers::add_since(Timer::LockWait, start);
        }
        // Step (2-1): a page committed after the snapshot.
        if page_tid > txn.snapshot {
            return Err(self.refuse(
                &mut st,
                txn,
                pgno,
                format!(
                    "2VTO: page {pgno} was committed by {page_tid}, after the snapshot {}",
                    txn.snapshot
                ),
            ));
        }
        Ok(())
    }

    fn before_commit(&self, txn: &Txn, timeout: Duration) -> Result<()> {
        // Commits happen in TS_commit order (§4.2): sleep until every
        // older transaction has finished.
        let start = Instant::now();
        let deadline = start + timeout;
        let mut st = self.st.lock();
        loop {
            self.check_wounded(&mut st, txn, 0)?;
            if Self::my_turn(&st, txn.tid) {
                break;
            }
            if !self.wait(&mut st, deadline) && !Self::my_turn(&st, txn.tid) {
                return Err(Error::Busy(format!(
                    "2VTO: waited {timeout:?} for the transactions older than {} to finish",
                    txn.tid
                )));
            }
        }
        st.n.commit_wait_ns += elapsed_ns(start);
        timers::add_since(Timer::CommitWait, start);
        Ok(())
    }

    fn commit_turn(&self, txn: &Txn, check: &CommitCheck<'_>) -> Result<Tid> {
        let mut st = self.st.lock();
        self.check_wounded(&mut st, txn, 0)?;
        // Beyond the paper: the pages it read (and wrote) must still be as
        // of its snapshot, or commit order would contradict what it read.
        for (set, verb) in [(check.reads, "read"), (check.writes, "wrote")] {
            let last = check.last_commit;
            if let Some((page, by)) = set
                .iter()
                .map(|&p| (p, last(p)))
                .find(|&(_, t)| t > txn.snapshot)
            {
                let e = self.refuse(
                    &mut st,
                    txn,
                    page,
                    format!(
                        "2VTO: the transaction {verb} page {page} as of commit {}, and commit \
                         {by} changed it since",
                        txn.snapshot
                    ),
                );
                return Err(match e {
                    Error::Conflict { page, what, .. } => check.conflict(page, what),
                    e => e,
                });
            }
        }
        if txn.tid <= check.committed {
            return Err(Error::Internal(format!(
                "2VTO: transaction {} commits after commit {}",
                txn.tid, check.committed
            )));
        }
        Ok(txn.tid)
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        self.counters()
    }

    fn sequenced(&self, txn: &Txn) {
        if let Some(a) = self.st.lock().active.get_mut(&txn.tid) {
            a.sequenced = true;
        }
        self.cv.notify_all();
    }

    fn end_txn(&self, txn: &Txn, committed: Option<Tid>) {
        let mut st = self.st.lock();
        let Some(me) = st.active.remove(&txn.tid) else {
            return;
        };
        for p in &me.pages {
            if st.owner.get(p) == Some(&txn.tid) {
                st.owner.remove(p);
            }
        }
        match committed {
            Some(_) => {
                st.n.committed += 1;
                st.n.max_aborts = st.n.max_aborts.max(u64::from(me.aborts));
            }
            None if me.conflicted || me.wounded => {
                st.n.aborts += 1;
                let aborts = me.aborts + 1;
                st.n.max_aborts = st.n.max_aborts.max(u64::from(aborts));
                REPLAY.with(|r| r.set(Some((self.instance, aborts, 0))));
            }
            None => {}
        }
        drop(st);
        self.cv.notify_all();
    }
}

impl std::fmt::Debug for TwoVto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwoVto")
            .field("rule", &self.rule)
            .field("forced_sleep", &self.forced_sleep)
            .finish()
    }
}
