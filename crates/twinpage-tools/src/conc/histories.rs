//! Random concurrent histories against the real engine, recorded for the
//! serializability checker ([`super::check`]).
//!
//! A history: a fresh database (in-memory, or a real file in a directory)
//! with two tables of a few keys each, values an `i64` counter plus
//! padding (so keys spread over one page or several); then 2..=8 threads
//! start together, each running a few transactions chosen at random:
//!
//! - read-only transactions (`ReadTxn`): point and range reads;
//! - increments (read-modify-write: a lost update shows);
//! - transfers (read two keys, write both);
//! - the write-skew pattern: read `a/k` and `b/k`, and if their sum is
//!   positive decrement one of them (which one depends on the thread);
//! - blind writes and deletes;
//! - a range count written back into the range (phantoms);
//! - toggles (delete if present, insert if absent);
//! - mixed programs of 2..6 random operations.
//!
//! Threads yield and sometimes sleep between operations so transactions
//! interleave. A transaction the protocol refuses (`Conflict`) or that
//! times out (`Busy`) rolls back and runs again on the same thread (2VTO's
//! AFUW replay is tied to the thread); some transactions are abandoned on
//! purpose midway (rolled back or dropped) and never recorded. Each
//! transaction that ended well is recorded with what it read and wrote and
//! its TID (`WriteTxn::commit_tid`) or snapshot, and [`super::check`]
//! decides. At the end the integrity check runs, the contents are read,
//! and under `2vto` (AFUW) the protocol's counters must show no
//! transaction aborted twice.

use super::check::{
    check, Access, Anomaly, Contents, Kind, Place, Recorded, Rows, Table, TxnRecord,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use twinpage::cc::Protocol;
use twinpage::journal::TestFaults;
use twinpage::storage::MemVfs;
use twinpage::{Db, Direction, Error, JournalMode, Options, ReadTxn, Synchronous, WriteTxn};

/// The tables of every history.
pub const TABLES: [&str; 2] = ["a", "b"];

/// What to run.
#[derive(Debug, Clone)]
pub struct HistoryConfig {
    /// Journal mode.
    pub mode: JournalMode,
    /// Concurrency protocol.
    pub protocol: Protocol,
    /// Fewest threads.
    pub min_threads: usize,
    /// Most threads.
    pub max_threads: usize,
    /// Transactions per thread (ignored with `duration`).
    pub txns: usize,
    /// Run each thread until this much time has passed instead (stress).
    pub duration: Option<Duration>,
    /// Page size.
    pub page_size: usize,
    /// Page cache budget in bytes.
    pub cache_size: usize,
    /// Busy timeout.
    pub busy_timeout: Duration,
    /// Sync level.
    pub sync: Synchronous,
    /// Run on real files in this directory instead of in memory.
    pub dir: Option<PathBuf>,
    /// Deliberate breakage (to prove the checker catches it).
    pub faults: TestFaults,
    /// Percent of transactions abandoned on purpose midway.
    pub abandon_pct: u32,
    /// Most key padding, in bytes (values are 16 bytes plus padding).
    pub max_pad: usize,
    /// Fail the run (a hang) if no transaction finishes for this long.
    pub watchdog: Option<Duration>,
}

impl HistoryConfig {
    /// Defaults for a mode and protocol.
    pub fn new(mode: JournalMode, protocol: Protocol) -> Self {
        HistoryConfig {
            mode,
            protocol,
            min_threads: 2,
            max_threads: 8,
            txns: 6,
            duration: None,
            page_size: 1024,
            cache_size: 256 * 1024,
            busy_timeout: Duration::from_secs(2),
            sync: Synchronous::Full,
            dir: None,
            faults: TestFaults::default(),
            abandon_pct: 5,
            max_pad: 200,
            watchdog: None,
        }
    }
}

/// What one history (or many, added up) did.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Histories run.
    pub histories: u64,
    /// Write transactions committed.
    pub committed: u64,
    /// Transactions that wrote nothing, recorded as readers.
    pub readers: u64,
    /// Refusals by the protocol (`Conflict`), each followed by a rerun.
    pub conflicts: u64,
    /// Busy timeouts, each followed by a rerun.
    pub busy: u64,
    /// Transactions abandoned on purpose.
    pub abandoned: u64,
    /// Transactions given up after too many reruns.
    pub gave_up: u64,
    /// Most refusals of one transaction.
    pub max_conflicts_per_txn: u64,
    /// 2VTO's `second_aborts` counter, summed.
    pub second_aborts: u64,
    /// 2VTO's `max_aborts_per_txn`, the largest seen.
    pub max_aborts_per_txn: u64,
    /// Anomalies, with the seed of their history.
    pub anomalies: Vec<(u64, Anomaly)>,
}

impl Tally {
    /// Add another tally.
    pub fn add(&mut self, o: &Tally) {
        self.histories += o.histories;
        self.committed += o.committed;
        self.readers += o.readers;
        self.conflicts += o.conflicts;
        self.busy += o.busy;
        self.abandoned += o.abandoned;
        self.gave_up += o.gave_up;
        self.max_conflicts_per_txn = self.max_conflicts_per_txn.max(o.max_conflicts_per_txn);
        self.second_aborts += o.second_aborts;
        self.max_aborts_per_txn = self.max_aborts_per_txn.max(o.max_aborts_per_txn);
        self.anomalies.extend(o.anomalies.iter().cloned());
    }
}

/// The shape of one history, drawn from its seed.
#[derive(Debug, Clone, Copy)]
struct Shape {
    threads: usize,
    keys: usize,
    pad: usize,
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

/// A value: the counter, a tag naming the writer, padding.
fn value(n: i64, tag: u64, pad: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + pad);
    v.extend_from_slice(&n.to_be_bytes());
    v.extend_from_slice(&tag.to_be_bytes());
    v.resize(16 + pad, tag as u8);
    v
}

fn number(v: &Option<Vec<u8>>) -> i64 {
    match v {
        Some(v) if v.len() >= 8 => i64::from_be_bytes(v[..8].try_into().expect("8 bytes")),
        _ => 0,
    }
}

/// Why an attempt stopped.
enum Stop {
    Db(Error),
    /// Abandoned on purpose.
    Abandon,
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Db(e)
    }
}

enum Handle<'a> {
    W(&'a mut WriteTxn),
    R(&'a ReadTxn),
}

/// A transaction being run and recorded.
struct Rec<'a> {
    h: Handle<'a>,
    ops: Vec<Access>,
    /// Abandon before this many operations (on purpose).
    stop_at: Option<usize>,
    tag: u64,
    pad: usize,
}

impl Rec<'_> {
    fn step(&mut self) -> Result<(), Stop> {
        if self.stop_at == Some(self.ops.len()) {
            return Err(Stop::Abandon);
        }
        Ok(())
    }

    fn get(&mut self, table: &str, k: &[u8]) -> Result<Option<Vec<u8>>, Stop> {
        self.step()?;
        let got = match &self.h {
            Handle::W(t) => t.get(table, k)?,
            Handle::R(r) => r.get(table, k)?,
        };
        self.ops.push(Access::Get {
            table: table.into(),
            key: k.to_vec(),
            got: got.clone(),
        });
        Ok(got)
    }

    fn range(
        &mut self,
        table: &str,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        reverse: bool,
    ) -> Result<Rows, Stop> {
        self.step()?;
        let dir = if reverse {
            Direction::Reverse
        } else {
            Direction::Forward
        };
        let r = (lo.clone(), hi.clone());
        let bounds = (
            r.0.as_ref().map(|v| v.as_slice()),
            r.1.as_ref().map(|v| v.as_slice()),
        );
        let got = match &self.h {
            Handle::W(t) => t
                .range(table, bounds, dir)?
                .collect::<twinpage::Result<Vec<_>>>()?,
            Handle::R(t) => t
                .range(table, bounds, dir)?
                .collect::<twinpage::Result<Vec<_>>>()?,
        };
        self.ops.push(Access::Range {
            table: table.into(),
            lo,
            hi,
            reverse,
            got: got.clone(),
        });
        Ok(got)
    }

    fn put(&mut self, table: &str, k: &[u8], n: i64) -> Result<(), Stop> {
        self.step()?;
        let v = value(n, self.tag + self.ops.len() as u64, self.pad);
        match &mut self.h {
            Handle::W(t) => t.put(table, k, &v)?,
            Handle::R(_) => return Err(Stop::Db(Error::Internal("put in a reader".into()))),
        }
        self.ops.push(Access::Put {
            table: table.into(),
            key: k.to_vec(),
            value: v,
        });
        Ok(())
    }

    fn delete(&mut self, table: &str, k: &[u8]) -> Result<bool, Stop> {
        self.step()?;
        let existed = match &mut self.h {
            Handle::W(t) => t.delete(table, k)?,
            Handle::R(_) => return Err(Stop::Db(Error::Internal("delete in a reader".into()))),
        };
        self.ops.push(Access::Delete {
            table: table.into(),
            key: k.to_vec(),
            existed,
        });
        Ok(existed)
    }
}

/// The kinds of transaction program.
#[derive(Debug, Clone, Copy)]
enum Program {
    ReadOnly,
    Increment,
    Transfer,
    Skew,
    Blind,
    Phantom,
    Toggle,
    Mixed,
}

impl Program {
    fn draw(rng: &mut SmallRng) -> Program {
        match rng.random_range(0..100) {
            0..20 => Program::ReadOnly,
            20..35 => Program::Increment,
            35..45 => Program::Transfer,
            45..60 => Program::Skew,
            60..70 => Program::Blind,
            70..78 => Program::Phantom,
            78..85 => Program::Toggle,
            _ => Program::Mixed,
        }
    }
}

/// Random choices of one program, fixed before its first attempt so a
/// rerun does the same thing (its reads may differ).
#[derive(Debug, Clone)]
struct Plan {
    program: Program,
    /// Random numbers the program draws from.
    picks: Vec<u64>,
    /// Abandon on purpose before this many operations.
    stop_at: Option<usize>,
    /// Roll back (true) or drop (false) when abandoning.
    rollback: bool,
}

struct Picks<'a> {
    v: &'a [u64],
    i: usize,
}

impl Picks<'_> {
    fn next(&mut self, n: usize) -> usize {
        let x = self.v[self.i % self.v.len()];
        self.i += 1;
        (x % n.max(1) as u64) as usize
    }
}

fn run_program(rec: &mut Rec<'_>, plan: &Plan, shape: Shape, thread: usize) -> Result<(), Stop> {
    let mut p = Picks {
        v: &plan.picks,
        i: 0,
    };
    let k = shape.keys;
    let table = |p: &mut Picks| TABLES[p.next(2)];
    match plan.program {
        Program::ReadOnly => {
            for _ in 0..1 + p.next(4) {
                let t = table(&mut p);
                if p.next(3) == 0 {
                    let (lo, hi) = (p.next(k), p.next(k));
                    rec.range(
                        t,
                        Bound::Included(key(lo.min(hi))),
                        Bound::Excluded(key(lo.max(hi) + 1)),
                        p.next(2) == 0,
                    )?;
                } else {
                    rec.get(t, &key(p.next(k)))?;
                }
            }
        }
        Program::Increment => {
            let (t, kk) = (table(&mut p), key(p.next(k)));
            let n = number(&rec.get(t, &kk)?);
            rec.put(t, &kk, n + 1)?;
        }
        Program::Transfer => {
            let (t1, k1) = (table(&mut p), key(p.next(k)));
            let (t2, k2) = (table(&mut p), key(p.next(k)));
            let a = number(&rec.get(t1, &k1)?);
            let b = number(&rec.get(t2, &k2)?);
            rec.put(t1, &k1, a - 1)?;
            rec.put(t2, &k2, b + 1)?;
        }
        Program::Skew => {
            let kk = key(p.next(k));
            let x = number(&rec.get("a", &kk)?);
            let y = number(&rec.get("b", &kk)?);
            if x + y > 0 {
                let t = TABLES[thread % 2];
                let cur = if thread.is_multiple_of(2) { x } else { y };
                rec.put(t, &kk, cur - 1)?;
            }
        }
        Program::Blind => {
            for _ in 0..1 + p.next(3) {
                let (t, kk) = (table(&mut p), key(p.next(k + 2)));
                if p.next(4) == 0 {
                    rec.delete(t, &kk)?;
                } else {
                    rec.put(t, &kk, p.next(1000) as i64)?;
                }
            }
        }
        Program::Phantom => {
            let t = table(&mut p);
            let (lo, hi) = (p.next(k), p.next(k));
            let (lo, hi) = (lo.min(hi), lo.max(hi) + 1);
            let rows = rec.range(t, Bound::Included(key(lo)), Bound::Excluded(key(hi)), false)?;
            let at = lo + p.next(hi - lo);
            rec.put(t, &key(at), rows.len() as i64)?;
        }
        Program::Toggle => {
            let (t, kk) = (table(&mut p), key(p.next(k)));
            if rec.get(t, &kk)?.is_some() {
                rec.delete(t, &kk)?;
            } else {
                rec.put(t, &kk, 1)?;
            }
        }
        Program::Mixed => {
            for _ in 0..2 + p.next(5) {
                let (t, kk) = (table(&mut p), key(p.next(k)));
                match p.next(6) {
                    0 => {
                        rec.get(t, &kk)?;
                    }
                    1 => {
                        rec.range(t, Bound::Included(kk), Bound::Unbounded, p.next(2) == 0)?;
                    }
                    2 => rec.put(t, &kk, p.next(100) as i64)?,
                    3 => {
                        rec.delete(t, &kk)?;
                    }
                    _ => {
                        let n = number(&rec.get(t, &kk)?);
                        rec.put(t, &kk, n + 1)?;
                    }
                }
                if p.next(3) == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }
    Ok(())
}

/// Per-history context shared by its threads.
struct Ctx {
    shape: Shape,
    /// Readers read exactly their snapshot (no reader page locks).
    exact_readers: bool,
    /// Write transactions that change nothing read their snapshot.
    exact_clean: bool,
    /// AFUW with the forced sleep: a second refusal is a broken promise.
    bounded: bool,
    deadline: Option<Instant>,
    txns: usize,
    abandon_pct: u32,
    /// Finished transactions (attempts that ended), for the watchdog.
    progress: AtomicU64,
}

struct ThreadOut {
    records: Vec<TxnRecord>,
    tally: Tally,
}

fn is_retryable(e: &Error) -> Option<bool> {
    match e {
        Error::Conflict { .. } => Some(true),
        Error::Busy(_) => Some(false),
        _ => None,
    }
}

/// One thread's transactions.
fn worker(db: &Db, ctx: &Ctx, thread: usize, seed: u64) -> twinpage::Result<ThreadOut> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = ThreadOut {
        records: Vec::new(),
        tally: Tally::default(),
    };
    let mut seq = 0;
    loop {
        match ctx.deadline {
            Some(d) if Instant::now() >= d => break,
            None if seq >= ctx.txns => break,
            _ => {}
        }
        seq += 1;
        let program = Program::draw(&mut rng);
        let picks: Vec<u64> = (0..24).map(|_| rng.random()).collect();
        let abandon = rng.random_range(0..100) < ctx.abandon_pct;
        let plan = Plan {
            program,
            stop_at: abandon.then(|| rng.random_range(0..4)),
            rollback: rng.random_bool(0.5),
            picks,
        };
        let tag = ((thread as u64) << 40) | ((seq as u64) << 8);
        let mut conflicts = 0u64;
        // Refusals since the last busy timeout: a replay that times out
        // waiting for its turn gives its place up, and the next run is a
        // new transaction to the protocol.
        let mut run = 0u64;
        let mut first_refusal = String::new();
        let mut busy = 0u64;
        let mut backoff = Duration::from_micros(20);
        loop {
            let r = attempt(db, ctx, &plan, thread, seq, tag, &mut rng);
            ctx.progress.fetch_add(1, Ordering::Relaxed);
            match r {
                Ok(Some(rec)) => {
                    match rec.place {
                        Place::Committed(_) => out.tally.committed += 1,
                        Place::Read { .. } => out.tally.readers += 1,
                    }
                    out.records.push(rec);
                    break;
                }
                Ok(None) => {
                    out.tally.abandoned += 1;
                    break;
                }
                Err(e) => match is_retryable(&e) {
                    Some(true) => {
                        conflicts += 1;
                        run += 1;
                        if run == 1 {
                            first_refusal = e.to_string();
                        }
                        // AFUW bounds write transactions; a reader whose
                        // snapshot version was overwritten aborts as often
                        // as that happens (\[IPS\] §4.2).
                        let writer = !matches!(plan.program, Program::ReadOnly);
                        if ctx.bounded && writer && run == 2 {
                            out.tally.anomalies.push((
                                0,
                                Anomaly {
                                    kind: Kind::Protocol,
                                    what: format!(
                                        "2VTO/AFUW: thread {thread} transaction {seq} was \
                                         refused twice: first {first_refusal}; then {e}"
                                    ),
                                },
                            ));
                        }
                    }
                    Some(false) => {
                        busy += 1;
                        run = 0;
                    }
                    None => {
                        if ctx.bounded && matches!(e, Error::Internal(_)) {
                            out.tally.anomalies.push((
                                0,
                                Anomaly {
                                    kind: Kind::Protocol,
                                    what: format!("thread {thread} transaction {seq}: {e}"),
                                },
                            ));
                            break;
                        }
                        return Err(e);
                    }
                },
            }
            if conflicts + busy >= 500 {
                out.tally.gave_up += 1;
                break;
            }
            if ctx
                .deadline
                .is_some_and(|d| Instant::now() >= d + Duration::from_secs(30))
            {
                out.tally.gave_up += 1;
                break;
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(2));
        }
        out.tally.conflicts += conflicts;
        out.tally.busy += busy;
        out.tally.max_conflicts_per_txn = out.tally.max_conflicts_per_txn.max(conflicts);
    }
    Ok(out)
}

/// One attempt: `Ok(None)` when abandoned on purpose.
fn attempt(
    db: &Db,
    ctx: &Ctx,
    plan: &Plan,
    thread: usize,
    seq: usize,
    tag: u64,
    rng: &mut SmallRng,
) -> twinpage::Result<Option<TxnRecord>> {
    let yield_now = |rng: &mut SmallRng| {
        match rng.random_range(0..20) {
            0..6 => std::thread::yield_now(),
            6 => std::thread::sleep(Duration::from_micros(50)),
            _ => {}
        };
    };
    let done = |r: Result<(), Stop>| -> twinpage::Result<bool> {
        match r {
            Ok(()) => Ok(true),
            Err(Stop::Abandon) => Ok(false),
            Err(Stop::Db(e)) => Err(e),
        }
    };
    // Run the program, recorded; `None`: abandoned on purpose.
    let run = |h: Handle<'_>| -> twinpage::Result<Option<Vec<Access>>> {
        let mut rec = Rec {
            h,
            ops: Vec::new(),
            stop_at: plan.stop_at,
            tag,
            pad: ctx.shape.pad,
        };
        let res = run_program(&mut rec, plan, ctx.shape, thread);
        Ok(done(res)?.then_some(rec.ops))
    };
    yield_now(rng);
    if let Program::ReadOnly = plan.program {
        let r = db.begin_read()?;
        let from = r.snapshot_tid();
        let Some(ops) = run(Handle::R(&r))? else {
            return Ok(None);
        };
        yield_now(rng);
        let to = db.stats().fcc;
        drop(r);
        return Ok(Some(TxnRecord {
            thread,
            seq,
            place: Place::Read {
                from,
                to,
                exact: ctx.exact_readers,
            },
            ops,
        }));
    }
    let mut t = db.begin_write()?;
    let from = t.base_tid()?;
    let Some(ops) = run(Handle::W(&mut t))? else {
        if plan.rollback {
            t.rollback()?;
        } else {
            drop(t);
        }
        return Ok(None);
    };
    yield_now(rng);
    let place = match t.commit_tid()? {
        Some(tid) => Place::Committed(tid),
        None => Place::Read {
            from,
            to: db.stats().fcc,
            exact: ctx.exact_clean,
        },
    };
    Ok(Some(TxnRecord {
        thread,
        seq,
        place,
        ops,
    }))
}

fn read_contents(db: &Db) -> twinpage::Result<Contents> {
    let r = db.begin_read()?;
    let mut c = Contents::new();
    for name in TABLES {
        let mut t = Table::new();
        for kv in r.range(name, .., Direction::Forward)? {
            let (k, v) = kv?;
            t.insert(k, v);
        }
        c.insert(name.to_string(), t);
    }
    Ok(c)
}

/// Open the database of history `seed`.
fn open(cfg: &HistoryConfig, seed: u64) -> twinpage::Result<(Db, Option<PathBuf>)> {
    let mut opts = Options::default()
        .journal_mode(cfg.mode)
        .synchronous(cfg.sync)
        .page_size(cfg.page_size)
        .cache_size(cfg.cache_size)
        .busy_timeout(cfg.busy_timeout)
        .concurrency(cfg.protocol);
    opts.faults = cfg.faults;
    match &cfg.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
            let path = dir.join(format!("history-{seed}.db"));
            remove_db(&path);
            Ok((Db::open(&path, opts)?, Some(path)))
        }
        None => {
            let vfs = MemVfs::new();
            Ok((Db::open("/history.db", opts.vfs(Arc::new(vfs)))?, None))
        }
    }
}

fn remove_db(path: &std::path::Path) {
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        let name = name.to_string_lossy().into_owned();
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(&name) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

/// Run one history and check it.
pub fn run_history(cfg: &HistoryConfig, seed: u64) -> twinpage::Result<Tally> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x6869_7374_6f72_7921);
    let shape = Shape {
        threads: rng.random_range(cfg.min_threads..=cfg.max_threads.max(cfg.min_threads)),
        keys: [3, 6, 12, 32][rng.random_range(0..4)],
        pad: [0, 16, 64, 200][rng.random_range(0..4)].min(cfg.max_pad),
    };
    let (db, path) = open(cfg, seed)?;
    // Initial contents: most keys present, counter 1.
    let mut initial = Contents::new();
    {
        let mut t = db.begin_write()?;
        for name in TABLES {
            t.create_table(name)?;
            let rows = initial.entry(name.to_string()).or_default();
            for i in 0..shape.keys {
                if rng.random_bool(0.8) {
                    let v = value(1, 0, shape.pad);
                    t.put(name, &key(i), &v)?;
                    rows.insert(key(i), v);
                }
            }
        }
        t.commit()?;
    }
    let initial_tid = db.stats().fcc;
    let profile =
        twinpage::cc::lock_manager(cfg.protocol, cfg.mode.spec().locking, cfg.busy_timeout)?
            .profile();
    let ctx = Ctx {
        shape,
        exact_readers: !profile.reader_locks,
        exact_clean: !profile.multi_writer || profile.snapshot_reads,
        bounded: cfg.protocol == Protocol::TwoVto,
        deadline: cfg.duration.map(|d| Instant::now() + d),
        txns: cfg.txns,
        abandon_pct: cfg.abandon_pct,
        progress: AtomicU64::new(0),
    };
    let barrier = Barrier::new(shape.threads);
    let finished = AtomicBool::new(false);
    let outs: Vec<twinpage::Result<ThreadOut>> = std::thread::scope(|s| {
        if let Some(limit) = cfg.watchdog {
            let (ctx, finished) = (&ctx, &finished);
            s.spawn(move || watchdog(ctx, finished, limit, cfg, seed));
        }
        let hs: Vec<_> = (0..shape.threads)
            .map(|i| {
                let (db, ctx, barrier) = (&db, &ctx, &barrier);
                let tseed = rng.random();
                s.spawn(move || {
                    barrier.wait();
                    worker(db, ctx, i, tseed)
                })
            })
            .collect();
        let outs = hs
            .into_iter()
            .map(|h| h.join().expect("history thread panicked"))
            .collect();
        finished.store(true, Ordering::Release);
        outs
    });
    let mut tally = Tally {
        histories: 1,
        ..Tally::default()
    };
    let mut txns = Vec::new();
    for o in outs {
        let o = o?;
        tally.add(&o.tally);
        txns.extend(o.records);
    }
    db.check()?;
    let final_contents = read_contents(&db)?;
    let stat = |name: &str| {
        db.stats()
            .protocol
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    };
    if let (Some(second), Some(most)) = (stat("second_aborts"), stat("max_aborts_per_txn")) {
        tally.second_aborts += second;
        tally.max_aborts_per_txn = tally.max_aborts_per_txn.max(most);
        if ctx.bounded && (second > 0 || most > 1) {
            tally.anomalies.push((
                seed,
                Anomaly {
                    kind: Kind::Protocol,
                    what: format!(
                        "2VTO/AFUW: second_aborts = {second}, max_aborts_per_txn = {most}"
                    ),
                },
            ));
        }
    }
    let rec = Recorded {
        initial,
        initial_tid,
        txns,
        final_contents: Some(final_contents),
    };
    tally
        .anomalies
        .extend(check(&rec).into_iter().map(|a| (seed, a)));
    for a in tally.anomalies.iter_mut() {
        a.0 = seed;
    }
    db.close()?;
    if let Some(p) = path {
        remove_db(&p);
    }
    Ok(tally)
}

/// Fails the process when no transaction finishes for `limit`: a hang.
fn watchdog(ctx: &Ctx, finished: &AtomicBool, limit: Duration, cfg: &HistoryConfig, seed: u64) {
    let mut last = ctx.progress.load(Ordering::Relaxed);
    let mut since = Instant::now();
    while !finished.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        let now = ctx.progress.load(Ordering::Relaxed);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= limit {
            eprintln!(
                "HANG: {} {} history seed {seed}: no transaction ended for {limit:?} \
                 ({now} ended before); failing the run",
                cfg.mode, cfg.protocol
            );
            std::process::exit(3);
        }
    }
}
