//! I/O error injection campaigns: run a workload once per storage call
//! with that call failing (EIO, ENOSPC from then on, or a short write),
//! and check that
//!
//! 1. nothing panics, and the failure surfaces as a typed error;
//! 2. the database stays usable (one more transaction commits and reads
//!    back an allowed state) or refuses clearly;
//! 3. after a restart (no power loss) recovery succeeds, `check` passes,
//!    and the contents are allowed: the last acknowledged commit, or a
//!    commit whose `commit()` failed (its outcome is unknown to the
//!    caller), never anything else;
//! 4. for `Durable` configurations, the same holds after a power loss
//!    right after the failure (crash states drawn under ext4-ordered,
//!    with Linux's behaviour after a failed fsync: the unsynced writes it
//!    covered may be lost even if a later fsync succeeds).

use super::explore::{spec_at, DB_PATH};
use super::workload::{run_steps, Generator, Model, Plan, RunError, WorkloadConfig};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use twinpage::journal::ModeOptions;
use twinpage::storage::Vfs;
use twinpage::Durability;
use twinpage::{Db, Error, JournalMode, Options, Result, Synchronous};
use twinpage_sim::fault::{FaultKind, FaultPlan, FaultVfs};
use twinpage_sim::sim::{PersistenceModel, SimVfs};

/// Table and key of the transaction run after the failure.
const AFTER_TABLE: &str = "inject-after";
const AFTER_KEY: &[u8] = b"after-error";

/// What to inject.
#[derive(Debug, Clone)]
pub struct InjectConfig {
    /// Journal mode.
    pub mode: JournalMode,
    /// Sync level.
    pub sync: Synchronous,
    /// Kind of failure.
    pub kind: FaultKind,
    /// Workload (keep it short: it runs once per call).
    pub workload: WorkloadConfig,
    /// Mode options (`Options::mode_opts`), e.g. a log size for WAL.
    pub mode_opts: ModeOptions,
    /// Page cache budget in bytes.
    pub cache_size: usize,
    /// Power-loss states drawn after each failure (Durable configs).
    pub power_loss_states: u64,
    /// Test every `stride`-th call only (1: every call).
    pub stride: u64,
    /// Stop after this many violations.
    pub max_violations: usize,
}

impl InjectConfig {
    /// Defaults for `mode` and `kind`.
    pub fn new(mode: JournalMode, kind: FaultKind) -> Self {
        InjectConfig {
            mode,
            sync: Synchronous::Full,
            kind,
            workload: WorkloadConfig {
                txns: 14,
                ..WorkloadConfig::default()
            },
            mode_opts: ModeOptions::default(),
            cache_size: 16 * 1024,
            power_loss_states: 3,
            stride: 1,
            max_violations: 3,
        }
    }

    fn options(&self, vfs: Arc<dyn Vfs>) -> Options {
        Options {
            journal_mode: self.mode,
            synchronous: self.sync,
            page_size: self.workload.page_size,
            cache_size: self.cache_size,
            busy_timeout: Duration::from_millis(50),
            vfs: Some(vfs),
            mode_opts: self.mode_opts.clone(),
            ..Options::default()
        }
    }
}

/// What a campaign found.
#[derive(Debug, Clone)]
pub struct InjectReport {
    /// Mode.
    pub mode: JournalMode,
    /// Sync level.
    pub sync: Synchronous,
    /// Kind of failure.
    pub kind: FaultKind,
    /// Calls of that kind in a clean run.
    pub calls: u64,
    /// Runs (failure points tested).
    pub points: u64,
    /// Runs where an API call returned the error.
    pub surfaced: u64,
    /// Runs where the database stayed usable: one more transaction
    /// committed after the error.
    pub usable_after: u64,
    /// Runs where the database refused further work until reopened.
    pub refused_after: u64,
    /// Errors by kind: I/O, aborted, corruption, other.
    pub errors: [u64; 4],
    /// Power-loss states checked after failures.
    pub power_states: u64,
    /// Failures in configurations without a guarantee (not violations).
    pub unprotected: u64,
    /// Violations.
    pub violations: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

impl fmt::Display for InjectReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<9} sync={:<6} {:<11}: {} calls, {} failure points, {} surfaced \
             (io {}, aborted {}, corruption {}, other {}), {} usable after, {} refused until reopen, \
             {} power-loss states, {:.1}s, {} violations",
            self.mode.name(),
            self.sync,
            self.kind,
            self.calls,
            self.points,
            self.surfaced,
            self.errors[0],
            self.errors[1],
            self.errors[2],
            self.errors[3],
            self.usable_after,
            self.refused_after,
            self.power_states,
            self.elapsed.as_secs_f64(),
            self.violations.len()
        )?;
        if self.unprotected > 0 {
            write!(
                f,
                ", {} damaged states (no guarantee in this mode)",
                self.unprotected
            )?;
        }
        Ok(())
    }
}

fn with_after(m: &Model) -> Model {
    let mut m = m.clone();
    m.tables
        .entry(AFTER_TABLE.to_string())
        .or_default()
        .insert(AFTER_KEY.to_vec(), b"1".to_vec());
    m
}

fn in_set(m: &Model, set: &[Model]) -> bool {
    set.iter().any(|c| c == m)
}

fn describe_miss(m: &Model, set: &[Model]) -> String {
    match set.first() {
        Some(c) => format!(
            "matches none of {} allowed states; versus the last acknowledged: {}",
            set.len(),
            m.diff(c, 5)
        ),
        None => "no allowed state".into(),
    }
}

#[derive(Default)]
struct Point {
    surfaced: bool,
    usable_after: bool,
    refused_after: bool,
    error_kind: Option<usize>,
    power_states: u64,
    unprotected: bool,
}

fn error_kind(e: &Error) -> usize {
    match e {
        Error::Io { .. } => 0,
        Error::Aborted(_) | Error::Poisoned(_) => 1,
        Error::Corruption { .. } => 2,
        _ => 3,
    }
}

/// Run one failure point; `Err` is a violation. Also returns the number
/// of calls of the kind the run made.
fn run_point(cfg: &InjectConfig, at: u64) -> (std::result::Result<Point, String>, u64) {
    let sim = SimVfs::new();
    let hook = sim.clone();
    let fvfs = FaultVfs::with_hook(
        Arc::new(sim.clone()),
        Some(FaultPlan { kind: cfg.kind, at }),
        Some(Box::new(move |p: &Path| hook.forget_unsynced(p))),
    );
    let r = catch_unwind(AssertUnwindSafe(|| drive(cfg, at, &sim, &fvfs)))
        .unwrap_or_else(|p| Err(format!("panic: {}", panic_message(&*p))));
    let r = r.map_err(|v| {
        format!(
            "{v} (injected: {})",
            fvfs.fired().unwrap_or_else(|| "nothing".into())
        )
    });
    (r, fvfs.calls())
}

fn drive(
    cfg: &InjectConfig,
    at: u64,
    sim: &SimVfs,
    fvfs: &FaultVfs,
) -> std::result::Result<Point, String> {
    let path = Path::new(DB_PATH);
    let opts = cfg.options(Arc::new(fvfs.clone()));
    // The contents the database may hold now; the first is the last
    // acknowledged state.
    let mut allowed = vec![Model::default()];
    let mut pt = Point::default();
    let mut first_err: Option<Error> = None;
    let mut wl = cfg.workload.clone();
    // Keys within the format's limit, as `record` and the child do.
    wl.max_key
        .get_or_insert(cfg.mode.node_format().max_key_len(wl.page_size));
    let mut gen = Generator::new(wl);
    let mut db = match Db::open(path, opts.clone()) {
        Ok(d) => Some(d),
        Err(e) => {
            first_err = Some(e);
            None
        }
    };
    while first_err.is_none() {
        let Some(plan) = gen.next_plan() else {
            // The clean close is part of the workload: its errors count.
            if let Some(d) = db.take() {
                if let Err(e) = d.close() {
                    first_err = Some(e);
                }
            }
            break;
        };
        let Some(cur) = db.as_ref() else { break };
        match &plan {
            Plan::Reopen => {
                let r = db.take().map_or(Ok(()), |o| o.close());
                if let Err(e) = r {
                    first_err = Some(e);
                    break;
                }
                match Db::open(path, opts.clone()) {
                    Ok(n) => db = Some(n),
                    Err(e) => first_err = Some(e),
                }
            }
            Plan::Checkpoint(m) => {
                if let Err(e) = cur.checkpoint(*m) {
                    first_err = Some(e);
                }
            }
            Plan::Txn {
                steps,
                commit,
                after,
            } => {
                let mut t = match cur.begin_write() {
                    Ok(t) => t,
                    Err(e) => {
                        first_err = Some(e);
                        break;
                    }
                };
                match run_steps(&mut t, steps) {
                    Ok(()) => {}
                    Err(RunError::Db(e)) => {
                        first_err = Some(e);
                        break;
                    }
                    Err(RunError::Mismatch(m)) => {
                        return Err(format!("a read returned wrong data: {m}"));
                    }
                }
                let r = if *commit { t.commit() } else { t.rollback() };
                match r {
                    Ok(()) if *commit => {
                        allowed = vec![after.clone()];
                        gen.committed(&plan);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        if *commit {
                            // The caller cannot know whether it took.
                            allowed.push(after.clone());
                        }
                        first_err = Some(e);
                    }
                }
            }
        }
    }
    if let Some(e) = &first_err {
        pt.surfaced = true;
        pt.error_kind = Some(error_kind(e));
        if error_kind(e) == 3 {
            return Err(format!(
                "the failure surfaced as an unexpected error kind: {e}"
            ));
        }
    }
    let guarded = cfg.mode.durability(Synchronous::Full) != Durability::None;
    // One more transaction on the same handle.
    if let (Some(d), true) = (db.as_ref(), first_err.is_some()) {
        let mut reached_commit = false;
        let r = (|| -> Result<()> {
            let mut t = d.begin_write()?;
            t.create_table(AFTER_TABLE)?;
            t.put(AFTER_TABLE, AFTER_KEY, b"1")?;
            reached_commit = true;
            t.commit()
        })();
        match r {
            Ok(()) => {
                pt.usable_after = true;
                let want: Vec<Model> = allowed.iter().map(with_after).collect();
                match Model::read(d) {
                    Err(e) if guarded => {
                        return Err(format!(
                            "after a successful commit the database cannot be read: {e}"
                        ))
                    }
                    Ok(live) if guarded && !in_set(&live, &want) => {
                        return Err(format!(
                            "after the error, one more commit succeeded but the contents {}",
                            describe_miss(&live, &want)
                        ))
                    }
                    Ok(live) if guarded => allowed = vec![live],
                    _ => pt.unprotected = true,
                }
            }
            Err(e) => {
                pt.refused_after = true;
                if reached_commit {
                    let more: Vec<Model> = allowed.iter().map(with_after).collect();
                    allowed.extend(more);
                }
                if error_kind(&e) == 3 {
                    return Err(format!(
                        "a later call failed with an unexpected error kind: {e}"
                    ));
                }
            }
        }
    }
    drop(db);
    let cut = sim.op_count();
    // Restart without power loss: the file system as the process left it.
    let reopen = (|| -> Result<Model> {
        let db = Db::open(path, cfg.options(Arc::new(sim.clone())))?;
        db.check()?;
        let m = Model::read(&db)?;
        db.close()?;
        Ok(m)
    })();
    match reopen {
        Err(e) if guarded => return Err(format!("reopen after the failure failed: {e}")),
        Ok(m) if guarded && !in_set(&m, &allowed) => {
            return Err(format!(
                "after a restart the contents {}",
                describe_miss(&m, &allowed)
            ))
        }
        Err(_) => pt.unprotected = true,
        Ok(m) if !in_set(&m, &allowed) => pt.unprotected = true,
        Ok(_) => {}
    }
    // Power loss right after the failure.
    if cfg.mode.durability(cfg.sync) == Durability::Durable {
        let log = sim.log();
        for draw in 0..cfg.power_loss_states {
            let spec = spec_at(
                &log,
                cut,
                PersistenceModel::Ext4Ordered,
                cfg.power_loss_states,
                at,
                draw,
            );
            let img = log.image(&spec);
            pt.power_states += 1;
            let r = (|| -> Result<Model> {
                let db = Db::open(path, cfg.options(Arc::new(img.to_mem_vfs())))?;
                db.check()?;
                Model::read(&db)
            })();
            match r {
                Err(e) => {
                    return Err(format!(
                        "power loss after the failure: recovery failed: {e}\n{}",
                        log.describe(&spec)
                    ))
                }
                Ok(m) if !in_set(&m, &allowed) => {
                    return Err(format!(
                        "power loss after the failure: the contents {}\n{}",
                        describe_miss(&m, &allowed),
                        log.describe(&spec)
                    ))
                }
                Ok(_) => {}
            }
        }
    }
    Ok(pt)
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".into()
    }
}

/// Count the calls of `cfg.kind` a clean run makes.
pub fn count_calls(cfg: &InjectConfig) -> Result<u64> {
    match run_point(cfg, u64::MAX) {
        (Ok(_), n) => Ok(n),
        (Err(e), _) => Err(Error::InvalidArgument(format!(
            "the workload fails without any injected error: {e}"
        ))),
    }
}

/// Run a campaign: one run per call of the kind (every `stride`-th).
pub fn inject(cfg: &InjectConfig) -> Result<InjectReport> {
    let start = Instant::now();
    let calls = count_calls(cfg)?;
    let mut rep = InjectReport {
        mode: cfg.mode,
        sync: cfg.sync,
        kind: cfg.kind,
        calls,
        points: 0,
        surfaced: 0,
        usable_after: 0,
        refused_after: 0,
        errors: [0; 4],
        power_states: 0,
        unprotected: 0,
        violations: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let mut at = 0;
    while at < calls {
        rep.points += 1;
        match run_point(cfg, at).0 {
            Ok(pt) => {
                rep.surfaced += pt.surfaced as u64;
                rep.usable_after += pt.usable_after as u64;
                rep.refused_after += pt.refused_after as u64;
                if let Some(k) = pt.error_kind {
                    rep.errors[k] += 1;
                }
                rep.power_states += pt.power_states;
                rep.unprotected += pt.unprotected as u64;
            }
            Err(v) => {
                rep.violations.push(format!(
                    "{} sync={} seed {}, {} at call {at}: {v}",
                    cfg.mode, cfg.sync, cfg.workload.seed, cfg.kind
                ));
                if rep.violations.len() >= cfg.max_violations.max(1) {
                    break;
                }
            }
        }
        at += cfg.stride.max(1);
    }
    rep.elapsed = start.elapsed();
    Ok(rep)
}
