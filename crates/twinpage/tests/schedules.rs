//! The lock tables under a schedule explorer: the page lock table
//! (`cc/pagelock.rs`) and the 2VTO lock manager (`cc/twovto.rs`) run on
//! shuttle's primitives (`base::sync` with the feature `shuttle`), which
//! chooses every interleaving: randomly, by PCT (bugs of small depth with
//! high probability), and exhaustively (DFS) for the smallest scenarios.
//! A schedule in which every thread blocks is a deadlock and fails the
//! test; timed waits never time out under shuttle, so progress never rests
//! on a busy timeout.
//!
//! Checked in every schedule:
//! - **mutual exclusion** (L1): a ghost table, updated only while the real
//!   lock is held, never sees an EXCLUSIVE holder beside another holder;
//! - **no deadlock, waits-for refusal** (L3): every thread finishes; a
//!   refused wait (`Conflict`) rolls its transaction back and retries;
//! - **serializability in commit order**: transactions read pages, write
//!   values computed from what they read, and commit through a mock pager
//!   (one commit lock, a version list per page); at each commit every
//!   value the transaction read must still be the committed one, so the
//!   commits are equivalent to running one after the other in commit
//!   order (no lost update, no write skew);
//! - **2VTO**: commits in `TS_commit` order (each TID above the last),
//!   the oldest wounds a younger holder, and under AFUW with the forced
//!   sleep no transaction aborts twice (`second_aborts == 0`,
//!   `max_aborts_per_txn <= 1`); FUW and NS may abort more.
//!
//! - **the writer gate** (`cc/gate.rs`): G1, an exclusive writer is never
//!   in the gate beside another writer (a ghost of who is inside, threads
//!   entering shared or alone at random); G2, a concurrent writer that
//!   arrives while an exclusive one waits enters after it.
//!
//! Run: `cargo test -p twinpage --features shuttle --test schedules`
//! (`SHUTTLE_SCALE=10` for ten times the schedules).

#![cfg(feature = "shuttle")]

use shuttle::rand::RngCore;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use twinpage::base::sync::Mutex;
use twinpage::cc::gate::{Entry, WriterGate};
use twinpage::cc::pagelock::{Granularity, PageLocks};
use twinpage::cc::twovto::{Rule, TwoVto};
use twinpage::cc::{CommitCheck, LockManager, Txn};
use twinpage::{Error, Pgno};

/// Long enough never to matter: under shuttle no wait times out anyway.
const T: Duration = Duration::from_secs(3600);

fn scale() -> usize {
    std::env::var("SHUTTLE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// The ghost of a lock table: who holds what, per the callers.
#[derive(Default)]
struct Ghost {
    shared: HashMap<Pgno, BTreeSet<u64>>,
    exclusive: HashMap<Pgno, u64>,
}

impl Ghost {
    fn granted(&mut self, owner: u64, p: Pgno, exclusive: bool) {
        if exclusive {
            let others: Vec<_> = self
                .shared
                .get(&p)
                .into_iter()
                .flatten()
                .filter(|&&o| o != owner)
                .collect();
            assert!(
                others.is_empty(),
                "L1: EXCLUSIVE on page {p} to {owner} beside SHARED holders {others:?}"
            );
            if let Some(&o) = self.exclusive.get(&p) {
                assert_eq!(o, owner, "L1: two EXCLUSIVE holders of page {p}");
            }
            self.exclusive.insert(p, owner);
        } else {
            if let Some(&o) = self.exclusive.get(&p) {
                assert_eq!(
                    o, owner,
                    "L1: SHARED on page {p} to {owner} beside EXCLUSIVE {o}"
                );
            }
            self.shared.entry(p).or_default().insert(owner);
        }
    }

    fn released(&mut self, owner: u64) {
        for s in self.shared.values_mut() {
            s.remove(&owner);
        }
        self.exclusive.retain(|_, o| *o != owner);
    }
}

/// Random lock sequences on a few pages: mutual exclusion, no deadlock,
/// refused waits only (no hang).
fn lock_table_round(threads: u64, pages: u32, steps: usize) {
    let locks = Arc::new(PageLocks::new(Granularity::Pages, true, T));
    let ghost = Arc::new(Mutex::new(Ghost::default()));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (locks, ghost) = (locks.clone(), ghost.clone());
            shuttle::thread::spawn(move || {
                let mut rng = shuttle::rand::thread_rng();
                let mut owner = t * 1000 + 1;
                let mut refused = 0;
                for _ in 0..steps {
                    let p = 2 + (rng.next_u32() % pages);
                    let exclusive = rng.next_u32().is_multiple_of(2);
                    match locks.lock(owner, p, exclusive, T) {
                        Ok(()) => ghost.lock().granted(owner, p, exclusive),
                        Err(Error::Conflict { .. }) => {
                            // L3: refused instead of closing a cycle; the
                            // transaction gives everything up.
                            refused += 1;
                            ghost.lock().released(owner);
                            locks.release(owner);
                            owner += 1;
                        }
                        Err(e) => panic!("unexpected {e}"),
                    }
                    if rng.next_u32().is_multiple_of(3) {
                        ghost.lock().released(owner);
                        locks.release(owner);
                        owner += 1;
                    }
                }
                ghost.lock().released(owner);
                locks.release(owner);
                refused
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(ghost.lock().exclusive.is_empty());
}

#[test]
fn page_lock_table_random_schedules() {
    shuttle::check_random(|| lock_table_round(3, 3, 6), 3000 * scale());
}

#[test]
fn page_lock_table_pct_schedules() {
    shuttle::check_pct(|| lock_table_round(3, 2, 5), 3000 * scale(), 3);
}

/// Two transactions that both read a page and then both upgrade: exactly
/// one is refused (waits-for), in every interleaving (exhaustive).
#[test]
fn upgrade_deadlock_is_refused_in_every_interleaving() {
    shuttle::check_dfs(
        || {
            let locks = Arc::new(PageLocks::new(Granularity::Pages, false, T));
            let results: Vec<_> = (0..2u64)
                .map(|i| {
                    let locks = locks.clone();
                    shuttle::thread::spawn(move || {
                        let owner = i + 1;
                        locks.lock(owner, 7, false, T).unwrap();
                        let r = locks.lock(owner, 7, true, T);
                        locks.release(owner);
                        r.is_ok()
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect();
            // Both may succeed one after the other (the first released
            // before the second asked), never neither.
            assert!(results.iter().any(|&ok| ok), "{results:?}");
        },
        None,
    );
}

/// The mock pager: committed versions per page and the FCC, under one
/// mutex that plays the pager's commit lock.
#[derive(Default)]
struct Store {
    fcc: u64,
    /// Page -> (TID, value), oldest first.
    versions: BTreeMap<Pgno, Vec<(u64, u64)>>,
    /// Commit TIDs in commit order.
    commits: Vec<u64>,
}

impl Store {
    fn last_tid(&self, p: Pgno) -> u64 {
        self.versions
            .get(&p)
            .and_then(|v| v.last())
            .map_or(0, |v| v.0)
    }

    fn current(&self, p: Pgno) -> u64 {
        self.versions
            .get(&p)
            .and_then(|v| v.last())
            .map_or(0, |v| v.1)
    }

    fn at(&self, p: Pgno, snapshot: u64) -> u64 {
        self.versions
            .get(&p)
            .and_then(|v| v.iter().rev().find(|x| x.0 <= snapshot))
            .map_or(0, |v| v.1)
    }
}

/// One operation of a mock transaction.
#[derive(Clone, Copy, Debug)]
enum Op {
    Read(Pgno),
    /// Read, then write the value read plus one (a lost update shows).
    Increment(Pgno),
    /// Write the sum of the values read so far (write skew shows).
    WriteSum(Pgno),
}

/// How a lock manager's writers read: their snapshot (2VTO) or the newest
/// committed state (page locks).
#[derive(Clone, Copy, PartialEq)]
enum Reads {
    Snapshot,
    Newest,
}

/// Run one transaction through `lm` against the mock pager; retries a
/// refused one on the same thread (AFUW's replay is tied to the thread).
/// Returns the number of aborts.
fn run_txn(lm: &dyn LockManager, store: &Mutex<Store>, reads_from: Reads, ops: &[Op]) -> u32 {
    let mut aborts = 0;
    loop {
        lm.begin_write(T).expect("begin_write never times out here");
        let committed = store.lock().fcc;
        let txn = lm.begin_txn(committed);
        match attempt(lm, store, reads_from, &txn, ops) {
            Ok(tid) => {
                lm.end_txn(&txn, Some(tid));
                lm.end_write();
                return aborts;
            }
            Err(e) => {
                lm.end_txn(&txn, None);
                lm.end_write();
                match e {
                    Error::Conflict { .. } => aborts += 1,
                    e => panic!("transaction {}: {e}", txn.tid),
                }
            }
        }
    }
}

fn attempt(
    lm: &dyn LockManager,
    store: &Mutex<Store>,
    reads_from: Reads,
    txn: &Txn,
    ops: &[Op],
) -> twinpage::Result<u64> {
    let profile = lm.profile();
    let mut read: BTreeMap<Pgno, u64> = BTreeMap::new();
    let mut writes: BTreeMap<Pgno, u64> = BTreeMap::new();
    let read_page = |p: Pgno, read: &mut BTreeMap<Pgno, u64>, writes: &BTreeMap<Pgno, u64>| {
        if let Some(&v) = writes.get(&p) {
            return Ok(v);
        }
        let page_tid = store.lock().last_tid(p);
        if profile.page_hooks {
            lm.before_read(txn, p, page_tid)?;
        }
        let s = store.lock();
        let v = match reads_from {
            Reads::Snapshot => s.at(p, txn.snapshot),
            Reads::Newest => s.current(p),
        };
        read.entry(p).or_insert(v);
        Ok::<u64, Error>(v)
    };
    let write_page = |p: Pgno, v: u64, writes: &mut BTreeMap<Pgno, u64>| {
        if !writes.contains_key(&p) && profile.page_hooks {
            let page_tid = store.lock().last_tid(p);
            lm.before_write(txn, p, page_tid)?;
        }
        writes.insert(p, v);
        Ok::<(), Error>(())
    };
    let mut sum = 0;
    for &op in ops {
        match op {
            Op::Read(p) => sum += read_page(p, &mut read, &writes)?,
            Op::Increment(p) => {
                let v = read_page(p, &mut read, &writes)?;
                write_page(p, v + 1, &mut writes)?;
            }
            Op::WriteSum(p) => write_page(p, sum + 1, &mut writes)?,
        }
    }
    let pages: Vec<Pgno> = writes.keys().copied().collect();
    lm.lock_for_write(txn, &pages, T)?;
    lm.before_commit(txn, T)?;
    let mut s = store.lock();
    let reads: Vec<Pgno> = read.keys().copied().collect();
    let tid = {
        let st = &*s;
        let last = |p: Pgno| st.last_tid(p);
        let table_of = |_: Pgno| None;
        let check = CommitCheck {
            reads: &reads,
            writes: &pages,
            committed: st.fcc,
            last_commit: &last,
            table_of: &table_of,
        };
        lm.commit_turn(txn, &check)?
    };
    assert!(tid > s.fcc, "TID {tid} after commit {}", s.fcc);
    // Serializable in commit order: what it read is still committed.
    for (&p, &v) in &read {
        assert_eq!(
            s.current(p),
            v,
            "transaction {} read {v} from page {p}, but commit order gives it {}",
            txn.tid,
            s.current(p)
        );
    }
    for (&p, &v) in &writes {
        s.versions.entry(p).or_default().push((tid, v));
    }
    s.fcc = tid;
    s.commits.push(tid);
    Ok(tid)
}

fn random_ops(rng: &mut impl RngCore, pages: u32) -> Vec<Op> {
    let n = 1 + rng.next_u32() % 3;
    (0..n)
        .map(|_| {
            // Page 1 is merged at commit, never locked (pager P10).
            let p = 2 + rng.next_u32() % pages;
            match rng.next_u32() % 3 {
                0 => Op::Read(p),
                1 => Op::Increment(p),
                _ => Op::WriteSum(p),
            }
        })
        .collect()
}

/// Threads run random transactions through `lm`; checks the mock pager's
/// invariants and returns the lock manager's counters.
fn protocol_round(
    lm: Arc<dyn LockManager>,
    reads_from: Reads,
    threads: usize,
    txns: usize,
    pages: u32,
) -> HashMap<&'static str, u64> {
    let store = Arc::new(Mutex::new(Store::default()));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (lm, store) = (lm.clone(), store.clone());
            shuttle::thread::spawn(move || {
                let mut rng = shuttle::rand::thread_rng();
                for _ in 0..txns {
                    let ops = random_ops(&mut rng, pages);
                    run_txn(&*lm, &store, reads_from, &ops);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = store.lock();
    assert!(s.commits.windows(2).all(|w| w[0] < w[1]));
    lm.stats().into_iter().collect()
}

fn afuw_round() {
    let lm: Arc<dyn LockManager> = Arc::new(TwoVto::new(Rule::Afuw, true, T));
    let n = protocol_round(lm, Reads::Snapshot, 3, 2, 2);
    assert_eq!(n["second_aborts"], 0, "{n:?}");
    assert!(n["max_aborts_per_txn"] <= 1, "{n:?}");
    assert_eq!(n["committed"], 6);
}

#[test]
fn twovto_afuw_random_schedules() {
    shuttle::check_random(afuw_round, 2000 * scale());
}

#[test]
fn twovto_afuw_pct_schedules() {
    shuttle::check_pct(afuw_round, 2000 * scale(), 3);
}

#[test]
fn twovto_fuw_and_ns_stay_serializable() {
    for (rule, sleep) in [(Rule::Fuw, false), (Rule::Afuw, false)] {
        shuttle::check_random(
            move || {
                let lm: Arc<dyn LockManager> = Arc::new(TwoVto::new(rule, sleep, T));
                let n = protocol_round(lm, Reads::Snapshot, 3, 2, 2);
                assert_eq!(n["committed"], 6);
            },
            1000 * scale(),
        );
    }
}

#[test]
fn page_lock_protocol_is_serializable_in_commit_order() {
    shuttle::check_pct(
        || {
            let lm: Arc<dyn LockManager> = Arc::new(PageLocks::new(Granularity::Pages, false, T));
            protocol_round(lm, Reads::Newest, 3, 2, 3);
        },
        2000 * scale(),
        3,
    );
    shuttle::check_random(
        || {
            let lm: Arc<dyn LockManager> = Arc::new(PageLocks::new(Granularity::Range, false, T));
            protocol_round(lm, Reads::Newest, 2, 2, 3);
        },
        1000 * scale(),
    );
}

/// The oldest transaction wounds a younger holder of its page, in every
/// interleaving of two transactions (exhaustive); the younger aborts once
/// and its replay commits after the oldest.
#[test]
fn the_oldest_wounds_in_every_interleaving() {
    shuttle::check_dfs(
        || {
            let lm: Arc<dyn LockManager> = Arc::new(TwoVto::new(Rule::Afuw, true, T));
            let n = protocol_round_fixed(lm, vec![vec![Op::Increment(2)], vec![Op::Increment(2)]]);
            assert_eq!(n["committed"], 2);
            assert_eq!(n["second_aborts"], 0);
        },
        Some(200_000),
    );
}

fn protocol_round_fixed(
    lm: Arc<dyn LockManager>,
    plans: Vec<Vec<Op>>,
) -> HashMap<&'static str, u64> {
    let store = Arc::new(Mutex::new(Store::default()));
    let handles: Vec<_> = plans
        .into_iter()
        .map(|ops| {
            let (lm, store) = (lm.clone(), store.clone());
            shuttle::thread::spawn(move || run_txn(&*lm, &store, Reads::Snapshot, &ops))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(store.lock().current(2), 2, "an increment was lost");
    lm.stats().into_iter().collect()
}

/// Who is inside the gate, per the callers.
#[derive(Default)]
struct GateGhost {
    shared: usize,
    alone: usize,
}

fn gate_g1_round(threads: usize, steps: usize) {
    let gate = Arc::new(WriterGate::new());
    let ghost = Arc::new(Mutex::new(GateGhost::default()));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (gate, ghost) = (gate.clone(), ghost.clone());
            shuttle::thread::spawn(move || {
                let mut rng = shuttle::rand::thread_rng();
                for _ in 0..steps {
                    let how = if rng.next_u32().is_multiple_of(3) {
                        Entry::Alone
                    } else {
                        Entry::Shared
                    };
                    gate.enter(how, T).expect("no timeout under shuttle");
                    {
                        let mut g = ghost.lock();
                        match how {
                            Entry::Alone => {
                                assert_eq!(
                                    (g.shared, g.alone),
                                    (0, 0),
                                    "G1: an exclusive writer beside others"
                                );
                                g.alone += 1;
                            }
                            Entry::Shared => {
                                assert_eq!(g.alone, 0, "G1: a writer beside an exclusive one");
                                g.shared += 1;
                            }
                        }
                    }
                    // Others may run while this one is inside.
                    shuttle::thread::yield_now();
                    {
                        let mut g = ghost.lock();
                        match how {
                            Entry::Alone => g.alone -= 1,
                            Entry::Shared => g.shared -= 1,
                        }
                    }
                    gate.leave(how);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(gate.exclusive_waiting(), 0);
}

#[test]
fn gate_g1_random_schedules() {
    shuttle::check_random(|| gate_g1_round(3, 4), 3000 * scale());
}

#[test]
fn gate_g1_pct_schedules() {
    shuttle::check_pct(|| gate_g1_round(3, 3), 3000 * scale(), 3);
}

/// Order in which the writers entered.
type GateLog = Arc<Mutex<Vec<&'static str>>>;

/// A concurrent writer S1 is inside; an exclusive writer E comes and
/// waits; only then does a second concurrent writer S2 try to enter. S1
/// leaves at any point after S2 was started. G2: E enters before S2.
fn gate_g2_round() {
    let gate = Arc::new(WriterGate::new());
    let log: GateLog = Arc::default();
    gate.enter(Entry::Shared, T).unwrap(); // S1
    let e = {
        let (gate, log) = (gate.clone(), log.clone());
        shuttle::thread::spawn(move || {
            gate.enter(Entry::Alone, T).unwrap();
            log.lock().push("E");
            gate.leave(Entry::Alone);
        })
    };
    // E cannot enter while S1 is inside: once it counts as waiting, it
    // waits until S1 leaves.
    while gate.exclusive_waiting() == 0 {
        shuttle::thread::yield_now();
    }
    let s2 = {
        let (gate, log) = (gate.clone(), log.clone());
        shuttle::thread::spawn(move || {
            gate.enter(Entry::Shared, T).unwrap();
            log.lock().push("S2");
            gate.leave(Entry::Shared);
        })
    };
    shuttle::thread::yield_now();
    gate.leave(Entry::Shared); // S1
    e.join().unwrap();
    s2.join().unwrap();
    assert_eq!(
        *log.lock(),
        ["E", "S2"],
        "G2: a concurrent writer went ahead of a waiting exclusive one"
    );
}

#[test]
fn gate_g2_random_schedules() {
    shuttle::check_random(gate_g2_round, 3000 * scale());
}

#[test]
fn gate_g2_pct_schedules() {
    shuttle::check_pct(gate_g2_round, 3000 * scale(), 3);
}
