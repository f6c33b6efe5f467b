//! The crash explorer: run a workload on a [`SimVfs`], then, for every
//! cut point of its operation log and several crash states per cut under
//! a persistence model, recover a database from the crash image and check
//! it:
//!
//! 1. `Db::open` (recovery) succeeds and `Db::check` passes;
//! 2. the contents equal the model after some commit `k` the mode's
//!    [`Durability`] allows at that cut (`Durable`: acknowledged ≤ k ≤
//!    started; `Atomic`: k ≤ started);
//! 3. one more transaction commits and survives a clean reopen;
//! 4. a crash at any operation of that recovery, followed by a second
//!    recovery, ends in the same contents (recovery is idempotent).
//!
//! Configurations whose durability is [`Durability::None`] (mode off,
//! synchronous=off) are explored and reported, never failed.

use super::slow_sync::SlowSync;
use super::workload::{record, record_interleaved, Coverage, History, Model, WorkloadConfig};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use twinpage::cc::Protocol;
use twinpage::journal::{ModeOptions, TestFaults};
use twinpage::storage::Vfs;
use twinpage::Durability;
use twinpage::{Db, Error, JournalMode, Options, Result, Synchronous};
use twinpage_sim::sim::{CrashImage, CrashSpec, PersistenceModel, SimLog, SimVfs};

/// Where the database lives inside the simulated file system.
pub const DB_PATH: &str = "/crash/test.db";
/// Key the post-recovery transaction writes.
pub const MARKER_KEY: &[u8] = b"\xffcrashtest-marker";
/// Table the post-recovery transaction creates when there is none.
pub const MARKER_TABLE: &str = "crashtest-after";

/// One crash state to look at alone (a reproducer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Workload seed of the round.
    pub seed: u64,
    /// Cut point.
    pub cut: usize,
    /// Draw at that cut.
    pub draw: u64,
}

/// What to explore.
#[derive(Debug, Clone)]
pub struct ExploreConfig {
    /// Journal mode.
    pub mode: JournalMode,
    /// Concurrency protocol.
    pub protocol: Protocol,
    /// Sync level.
    pub sync: Synchronous,
    /// Persistence model.
    pub model: PersistenceModel,
    /// Seed of the first round (round `r` uses `seed + r`).
    pub seed: u64,
    /// Stop after this many distinct crash states.
    pub states: u64,
    /// Crash states drawn per cut point.
    pub per_cut: u64,
    /// Workload shape (its seed is set per round).
    pub workload: WorkloadConfig,
    /// Mode options (`Options::mode_opts`), e.g. a log size for WAL.
    pub mode_opts: ModeOptions,
    /// Page cache budget in bytes (small, so transactions spill).
    pub cache_size: usize,
    /// Deliberate breakage, to prove the explorer catches it.
    pub faults: TestFaults,
    /// Also crash during recovery and recover again.
    pub recovery_crashes: bool,
    /// Crash states drawn per operation of recovery.
    pub recovery_per_cut: u64,
    /// Stop after this many violations.
    pub max_violations: usize,
    /// Stop after this long.
    pub time_limit: Option<Duration>,
    /// Look at one state only.
    pub only: Option<Target>,
    /// Print progress to stderr.
    pub progress: bool,
    /// With `only`: write the crash image into this directory.
    pub dump_dir: Option<std::path::PathBuf>,
}

impl ExploreConfig {
    /// Defaults for `mode` under `model`.
    pub fn new(mode: JournalMode, model: PersistenceModel) -> Self {
        ExploreConfig {
            mode,
            sync: Synchronous::Full,
            model,
            seed: 1,
            states: 2000,
            per_cut: 8,
            workload: WorkloadConfig::default(),
            mode_opts: ModeOptions::default(),
            protocol: Protocol::Sqlite,
            cache_size: 16 * 1024,
            faults: TestFaults::default(),
            recovery_crashes: true,
            recovery_per_cut: 2,
            max_violations: 3,
            time_limit: None,
            only: None,
            progress: false,
            dump_dir: None,
        }
    }

    /// Whether the workload interleaves several write transactions: asked
    /// for (`workload.in_flight > 1`) and the protocol runs several
    /// writers.
    pub fn interleaved(&self) -> bool {
        self.workload.in_flight > 1
            && twinpage::cc::lock_manager(self.protocol, self.mode.spec().locking, Duration::ZERO)
                .is_ok_and(|l| l.profile().multi_writer)
    }

    /// Database options for this configuration on `vfs`.
    pub fn options(&self, vfs: Arc<dyn Vfs>) -> Options {
        Options {
            journal_mode: self.mode,
            synchronous: self.sync,
            page_size: self.workload.page_size,
            cache_size: self.cache_size,
            // One driver thread interleaving transactions: a wait for
            // another of its transactions can never end, so refuse it at
            // once (deterministic, and no time lost).
            // Group commit under commit ordering (2VTO): a batch's younger
            // commits, on their own threads, wait for the older ones to be
            // sequenced.
            busy_timeout: if self.interleaved()
                && self.workload.group_commit
                && self.protocol.orders_commits()
            {
                Duration::from_millis(100)
            } else if self.interleaved() {
                Duration::ZERO
            } else {
                Duration::from_millis(50)
            },
            vfs: Some(vfs),
            mode_opts: self.mode_opts.clone(),
            faults: self.faults,
            concurrency: Some(self.protocol),
            ..Options::default()
        }
    }
}

/// A crash state the mode did not survive.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Round seed.
    pub seed: u64,
    /// Cut point.
    pub cut: usize,
    /// Draw at that cut.
    pub draw: u64,
    /// What went wrong.
    pub what: String,
    /// The crash state: durable namespace ops, kept and lost writes.
    pub state: String,
    /// The operations around the cut.
    pub trace: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "VIOLATION at seed {} cut {} draw {}: {}",
            self.seed, self.cut, self.draw, self.what
        )?;
        writeln!(f, "crash state: {}", self.state.trim_end())?;
        write!(f, "operations before the cut:\n{}", self.trace.trim_end())
    }
}

/// What an exploration found.
#[derive(Debug, Clone)]
pub struct Report {
    /// Mode explored.
    pub mode: JournalMode,
    /// Concurrency protocol it ran with.
    pub protocol: Protocol,
    /// Sync level.
    pub sync: Synchronous,
    /// Persistence model.
    pub model: PersistenceModel,
    /// What the mode promises at this sync level.
    pub durability: Durability,
    /// Workload rounds (seeds) run.
    pub rounds: u64,
    /// Storage operations recorded over all rounds.
    pub ops: u64,
    /// Cut points explored.
    pub cuts: u64,
    /// Cut points whose state space was enumerated exhaustively.
    pub exhausted_cuts: u64,
    /// Crash states drawn (with repeats).
    pub sampled: u64,
    /// Distinct crash images recovered and checked.
    pub states: u64,
    /// Crash states during recovery, recovered again.
    pub recovery_states: u64,
    /// States (allowed) where acknowledged commits were rolled back.
    pub lost_acked: u64,
    /// Failures in configurations without a guarantee (not violations).
    pub unprotected: u64,
    /// Violations found (at most `max_violations`).
    pub violations: Vec<Violation>,
    /// What the workloads exercised.
    pub coverage: Coverage,
    /// Wall time.
    pub elapsed: Duration,
}

impl Report {
    /// Distinct states per second.
    pub fn rate(&self) -> f64 {
        (self.states + self.recovery_states) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<9} sync={:<6} model={:<12} {:?}: {} rounds, {} ops, {} cuts ({} exhaustive), \
             {} states ({} drawn) + {} recovery states in {:.1}s ({:.0}/s), {} violations",
            match self.protocol {
                Protocol::Sqlite => self.mode.name().to_string(),
                p => format!("{}+{p}", self.mode.name()),
            },
            self.sync,
            self.model,
            self.durability,
            self.rounds,
            self.ops,
            self.cuts,
            self.exhausted_cuts,
            self.states,
            self.sampled,
            self.recovery_states,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.violations.len()
        )?;
        if self.lost_acked > 0 {
            write!(
                f,
                ", {} states lost acknowledged commits (allowed)",
                self.lost_acked
            )?;
        }
        if self.unprotected > 0 {
            write!(
                f,
                ", {} states damaged (no guarantee in this configuration)",
                self.unprotected
            )?;
        }
        Ok(())
    }
}

/// Why a recovered state is wrong, independent of the cut.
#[derive(Debug, Clone)]
struct Failure {
    what: String,
    /// A crash during recovery: (recovery cut, draw, state).
    nested: Option<(usize, u64, String)>,
}

#[derive(Debug, Clone)]
struct Outcome {
    /// Fingerprint of the recovered contents.
    result: std::result::Result<u64, Failure>,
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Crash state number `draw` at `cut`: enumerated when the cut's whole
/// state space has at most `per_cut` states (ext4-ordered), else drawn
/// from a generator seeded by (seed, cut, draw).
pub fn spec_at(
    log: &SimLog,
    cut: usize,
    model: PersistenceModel,
    per_cut: u64,
    seed: u64,
    draw: u64,
) -> CrashSpec {
    if let Some(n) = space_size(log, cut, model) {
        if n <= per_cut {
            return enumerate(log, cut, model, draw % n);
        }
    }
    let mut rng = SmallRng::seed_from_u64(mix(seed ^ mix(cut as u64 ^ mix(draw))));
    log.sample(cut, model, draw, &mut rng)
}

/// Number of crash states at a cut, if small and enumerable.
fn space_size(log: &SimLog, cut: usize, model: PersistenceModel) -> Option<u64> {
    match model {
        PersistenceModel::Strict => Some(1),
        PersistenceModel::Ext4Ordered => {
            let info = log.cut_info(cut, model);
            let prefixes = (info.ns_max - info.ns_min + 1) as u64;
            if info.uncertain.len() >= 20 {
                return None;
            }
            prefixes.checked_mul(1u64 << info.uncertain.len())
        }
        PersistenceModel::Torn => None,
    }
}

fn enumerate(log: &SimLog, cut: usize, model: PersistenceModel, idx: u64) -> CrashSpec {
    if model == PersistenceModel::Strict {
        return log.strict_spec(cut);
    }
    let info = log.cut_info(cut, model);
    let u = info.uncertain.len();
    let mask = idx & ((1u64 << u) - 1);
    let prefix = info.ns_min + (idx >> u) as u32;
    CrashSpec {
        model,
        cut,
        ns_durable: prefix.min(info.ns_max),
        writes: info
            .uncertain
            .iter()
            .enumerate()
            .map(|(j, &(w, _))| {
                let k = if mask >> j & 1 == 1 {
                    twinpage_sim::sim::Keep::Kept
                } else {
                    twinpage_sim::sim::Keep::Lost
                };
                (w, k)
            })
            .collect(),
    }
}

/// The operations just before a cut, with commit boundaries.
pub fn trace_around(log: &SimLog, hist: &History, cut: usize, before: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let from = cut.saturating_sub(before);
    for i in from..cut.min(log.len()) {
        let mut note = String::new();
        for (k, m) in hist.marks.iter().enumerate() {
            if m.start_op == i {
                let _ = write!(note, "  <- commit {} starts", k + 1);
            }
            if m.ack_op == i + 1 {
                let _ = write!(note, "  <- commit {} acknowledged", k + 1);
            }
        }
        let _ = writeln!(s, "  op {i:>5} {}{note}", log.op(i));
    }
    let _ = writeln!(s, "  ---- power lost here (cut {cut})");
    if let Some(op) = (cut < log.len()).then(|| log.op(cut)) {
        let _ = writeln!(s, "  op {cut:>5} {op} (not issued)");
    }
    s
}

/// Explore per `cfg`. Errors only when the workload itself fails on the
/// simulated file system (an engine bug outside crashes).
pub fn explore(cfg: &ExploreConfig) -> Result<Report> {
    let start = Instant::now();
    let durability = cfg.mode.durability(cfg.sync);
    let mut rep = Report {
        mode: cfg.mode,
        protocol: cfg.protocol,
        sync: cfg.sync,
        model: cfg.model,
        durability,
        rounds: 0,
        ops: 0,
        cuts: 0,
        exhausted_cuts: 0,
        sampled: 0,
        states: 0,
        recovery_states: 0,
        lost_acked: 0,
        unprotected: 0,
        violations: Vec::new(),
        coverage: Coverage::default(),
        elapsed: Duration::ZERO,
    };
    let out_of_time = |rep: &Report| {
        cfg.time_limit.is_some_and(|t| start.elapsed() >= t)
            || rep.violations.len() >= cfg.max_violations.max(1)
    };
    let mut last_progress = Instant::now();
    let mut round = 0u64;
    loop {
        let seed = match cfg.only {
            Some(t) => t.seed,
            None => cfg.seed.wrapping_add(round),
        };
        round += 1;
        rep.rounds += 1;
        let sim = SimVfs::new();
        let wcfg = WorkloadConfig {
            seed,
            ..cfg.workload.clone()
        };
        let counter = sim.clone();
        let vfs: Arc<dyn Vfs> = if cfg.interleaved() && cfg.workload.group_commit {
            // Parallel commits find a sync in flight and share the next.
            Arc::new(SlowSync {
                inner: Arc::new(sim.clone()),
                delay: Duration::from_micros(500),
            })
        } else {
            Arc::new(sim.clone())
        };
        let opts = cfg.options(vfs);
        let ops = move || counter.op_count();
        let hist = if cfg.interleaved() {
            record_interleaved(
                &wcfg,
                Path::new(DB_PATH),
                &opts,
                &ops,
                cfg.protocol.orders_commits(),
            )
        } else {
            record(&wcfg, Path::new(DB_PATH), &opts, &ops)
        }
        .map_err(|e| {
            Error::InvalidArgument(format!(
                "workload (seed {seed}) failed without any crash: {e}"
            ))
        })?;
        let log = sim.log();
        rep.ops += log.len() as u64;
        rep.coverage.add(&hist.coverage);
        let mut seen: HashMap<u64, Outcome> = HashMap::new();
        let cuts: Vec<usize> = match cfg.only {
            Some(t) => vec![t.cut],
            None => (0..=log.len()).filter(|&c| log.cut_matters(c)).collect(),
        };
        for cut in cuts {
            rep.cuts += 1;
            let acked = hist.acked(cut);
            let started = hist.started(cut);
            let lo = if durability == Durability::Durable {
                acked
            } else {
                0
            };
            let space = space_size(&log, cut, cfg.model);
            let draws: Vec<u64> = match cfg.only {
                Some(t) => vec![t.draw],
                None => {
                    let n = match space {
                        Some(n) if n <= cfg.per_cut => {
                            rep.exhausted_cuts += 1;
                            n
                        }
                        _ => cfg.per_cut,
                    };
                    (0..n).collect()
                }
            };
            let mut cut_seen = HashSet::new();
            for draw in draws {
                let spec = spec_at(&log, cut, cfg.model, cfg.per_cut, seed, draw);
                let img = log.image(&spec);
                let digest = img.digest();
                rep.sampled += 1;
                if !cut_seen.insert(digest) && cfg.only.is_none() {
                    continue;
                }
                let outcome = match seen.get(&digest) {
                    Some(o) => o.clone(),
                    None => {
                        rep.states += 1;
                        let (o, n) = recover_and_check(cfg, &img);
                        rep.recovery_states += n;
                        seen.insert(digest, o.clone());
                        o
                    }
                };
                let failure = match &outcome.result {
                    Err(f) => Some(f.clone()),
                    Ok(fp) => match hist.find(*fp, lo..=started) {
                        Some(k) => {
                            if k < acked {
                                rep.lost_acked += 1;
                            }
                            None
                        }
                        None => Some(Failure {
                            what: wrong_contents(cfg, &img, &hist, *fp, lo, acked, started),
                            nested: None,
                        }),
                    },
                };
                if let (Some(_), Some(dir)) = (cfg.only, &cfg.dump_dir) {
                    std::fs::create_dir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
                    for f in img.write_to_dir(dir)? {
                        eprintln!("wrote {}", f.display());
                    }
                }
                if cfg.only.is_some() {
                    eprintln!(
                        "seed {seed} cut {cut} draw {draw}: allowed commits {lo}..={started} (acknowledged {acked}); {}\n{}",
                        match &failure {
                            None => "ok".to_string(),
                            Some(f) => f.what.clone(),
                        },
                        log.describe(&spec)
                    );
                }
                if let Some(f) = failure {
                    if durability == Durability::None {
                        rep.unprotected += 1;
                        continue;
                    }
                    let mut state = log.describe(&spec);
                    if let Some((rc, rd, rs)) = &f.nested {
                        state.push_str(&format!(
                            "then a crash during recovery at recovery op {rc} (draw {rd}):\n{rs}"
                        ));
                    }
                    rep.violations.push(Violation {
                        seed,
                        cut,
                        draw,
                        what: format!(
                            "{} [allowed commits {lo}..={started}, acknowledged {acked}]",
                            f.what
                        ),
                        state,
                        trace: trace_around(&log, &hist, cut, 14),
                    });
                }
                if out_of_time(&rep) || (cfg.only.is_none() && rep.states >= cfg.states) {
                    break;
                }
            }
            if cfg.progress && last_progress.elapsed() >= Duration::from_secs(10) {
                last_progress = Instant::now();
                eprintln!(
                    "  ... {} {}: round {} cut {cut}/{}, {} states, {} recovery states, {:.0}s",
                    cfg.mode,
                    cfg.model,
                    rep.rounds,
                    log.len(),
                    rep.states,
                    rep.recovery_states,
                    start.elapsed().as_secs_f64()
                );
            }
            if out_of_time(&rep) || (cfg.only.is_none() && rep.states >= cfg.states) {
                break;
            }
        }
        if cfg.only.is_some() || out_of_time(&rep) || rep.states >= cfg.states {
            break;
        }
    }
    rep.elapsed = start.elapsed();
    Ok(rep)
}

fn wrong_contents(
    cfg: &ExploreConfig,
    img: &CrashImage,
    hist: &History,
    fp: u64,
    lo: usize,
    acked: usize,
    started: usize,
) -> String {
    let elsewhere = hist.find(fp, 0..=hist.models.len().saturating_sub(1));
    let mut s = match elsewhere {
        Some(k) => format!("recovered the contents of commit {k}, outside the allowed range"),
        None => "recovered contents match no commit".to_string(),
    };
    let got =
        Db::open(DB_PATH, cfg.options(Arc::new(img.to_mem_vfs()))).and_then(|db| Model::read(&db));
    if let Ok(m) = got {
        let want = acked.clamp(lo, started);
        s.push_str(&format!(
            "; versus commit {want}: {}",
            m.diff(&hist.models[want], 6)
        ));
    }
    s
}

fn fail(what: impl Into<String>) -> Failure {
    Failure {
        what: what.into(),
        nested: None,
    }
}

/// Open a crash image (recovery), check it, run one more transaction,
/// reopen, and crash the recovery itself. Returns the outcome and the
/// number of recovery crash states explored.
fn recover_and_check(cfg: &ExploreConfig, img: &CrashImage) -> (Outcome, u64) {
    let path = Path::new(DB_PATH);
    let sim = img.to_sim_vfs();
    let opts = cfg.options(Arc::new(sim.clone()));
    let bad = |f: Failure| (Outcome { result: Err(f) }, 0);
    let db = match Db::open(path, opts.clone()) {
        Ok(db) => db,
        Err(e) => return bad(fail(format!("recovery (open) failed: {e}"))),
    };
    let recovery_ops = sim.op_count();
    if let Err(e) = db.check() {
        return bad(fail(format!("integrity check after recovery failed: {e}")));
    }
    let got = match Model::read(&db) {
        Ok(m) => m,
        Err(e) => return bad(fail(format!("reading the recovered database failed: {e}"))),
    };
    let fp = got.fingerprint();
    // One more transaction must work and survive a clean reopen.
    let mut want = got.clone();
    let after = (|| -> Result<()> {
        let mut t = db.begin_write()?;
        let table = match got.tables.keys().next() {
            Some(t) => t.clone(),
            None => {
                t.create_table(MARKER_TABLE)?;
                MARKER_TABLE.to_string()
            }
        };
        t.put(&table, MARKER_KEY, b"after-crash")?;
        t.commit()?;
        want.tables
            .entry(table)
            .or_default()
            .insert(MARKER_KEY.to_vec(), b"after-crash".to_vec());
        db.close()
    })();
    if let Err(e) = after {
        return bad(fail(format!("transaction after recovery failed: {e}")));
    }
    let reopened = (|| -> Result<Model> {
        let db = Db::open(path, opts.clone())?;
        db.check()?;
        let m = Model::read(&db)?;
        db.close()?;
        Ok(m)
    })();
    match reopened {
        Err(e) => return bad(fail(format!("clean reopen after recovery failed: {e}"))),
        Ok(m) if m != want => {
            return bad(fail(format!(
                "after one more transaction and a clean reopen: {}",
                m.diff(&want, 6)
            )))
        }
        Ok(_) => {}
    }
    let mut nested_states = 0;
    if cfg.recovery_crashes {
        let log = sim.log();
        let mut seen = HashSet::new();
        seen.insert(img.digest());
        for rcut in 1..=recovery_ops {
            if !log.cut_matters(rcut) {
                continue;
            }
            for draw in 0..cfg.recovery_per_cut {
                let spec = spec_at(&log, rcut, cfg.model, cfg.recovery_per_cut, fp, draw);
                let img2 = log.image(&spec);
                if !seen.insert(img2.digest()) {
                    continue;
                }
                nested_states += 1;
                let again = (|| -> Result<Model> {
                    let db = Db::open(path, cfg.options(Arc::new(img2.to_mem_vfs())))?;
                    db.check()?;
                    let m = Model::read(&db)?;
                    db.close()?;
                    Ok(m)
                })();
                let what = match again {
                    Err(e) => Some(format!("second recovery after a crash during recovery failed: {e}")),
                    Ok(m) if m.fingerprint() != fp => Some(format!(
                        "recovery is not idempotent: a crash during recovery, then recovery again, gives other contents: {}",
                        m.diff(&got, 6)
                    )),
                    Ok(_) => None,
                };
                if let Some(what) = what {
                    return (
                        Outcome {
                            result: Err(Failure {
                                what,
                                nested: Some((rcut, draw, log.describe(&spec))),
                            }),
                        },
                        nested_states,
                    );
                }
            }
        }
    }
    (Outcome { result: Ok(fp) }, nested_states)
}
