//! I/O errors during recovery (docs/CRASH.md §4): start from the crash
//! states of the damaged-file seeds (`damage::seed_for`: a hot rollback
//! journal, a WAL with a torn tail, a shadow file mid protocol, DHL pages
//! with an uncommitted version), and fail each storage call of "open
//! (recovery), read everything, check, close" in turn, with EIO, ENOSPC
//! (from then on) or a short write. Every failure must surface as a typed
//! error (or be absorbed), never a panic; and a plain reopen afterwards
//! must recover to exactly the state an undisturbed recovery reaches, with
//! a clean integrity check: a recovery cut short by an error is resumed,
//! never half-applied.

use super::damage::{options, seed_for, seed_page_sizes, seed_vfs, Seed};
use super::explore::DB_PATH;
use super::workload::Model;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use twinpage::storage::{MemVfs, Vfs};
use twinpage::{Db, Error, JournalMode, Result};
use twinpage_sim::fault::{FaultKind, FaultPlan, FaultVfs};

/// What a campaign found.
#[derive(Debug, Default)]
pub struct RecoveryFaultReport {
    /// `mode kind`.
    pub label: String,
    /// Crash states started from.
    pub seeds: usize,
    /// Calls failed (one run each).
    pub points: u64,
    /// Runs in which the failure surfaced as an error.
    pub surfaced: u64,
    /// Of those, errors that were not `Io`, `Aborted` or `Poisoned`.
    pub odd_errors: u64,
    /// Failures of the failed run's recovery itself (the open).
    pub failed_opens: u64,
    /// Violations: panics, untyped outcomes, a reopen that fails or
    /// reaches another state.
    pub violations: Vec<String>,
}

impl fmt::Display for RecoveryFaultReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} crash states, {} failure points, {} surfaced ({} during the open itself, \
             {} other than io/aborted/poisoned), {} violations",
            self.label,
            self.seeds,
            self.points,
            self.surfaced,
            self.failed_opens,
            self.odd_errors,
            self.violations.len()
        )
    }
}

fn files(seed: &Seed) -> MemVfs {
    seed_vfs(seed, seed.db.clone(), seed.aux.clone())
}

/// Open (recovery), read every table, check, close. `Err((opened, e))`.
fn session(seed: &Seed, vfs: Arc<dyn Vfs>) -> std::result::Result<Model, (bool, Error)> {
    let db = Db::open(Path::new(DB_PATH), options(seed.mode, seed.page_size, vfs))
        .map_err(|e| (false, e))?;
    let run = || -> Result<Model> {
        let m = Model::read(&db)?;
        db.check()?;
        Ok(m)
    };
    let m = run().map_err(|e| (true, e))?;
    db.close().map_err(|e| (true, e))?;
    Ok(m)
}

/// Run the campaign for one mode and fault kind.
pub fn inject_recovery(mode: JournalMode, kind: FaultKind) -> Result<RecoveryFaultReport> {
    let mut rep = RecoveryFaultReport {
        label: format!(
            "{:<9} {:<11} during recovery",
            mode.name(),
            kind.to_string()
        ),
        ..Default::default()
    };
    for ps in seed_page_sizes(mode) {
        let seed = seed_for(mode, ps);
        rep.seeds += 1;
        let reference = session(&seed, Arc::new(files(&seed))).map_err(|(_, e)| {
            Error::Internal(format!("{}: clean recovery failed: {e}", seed.name()))
        })?;
        // Count the calls of this kind an undisturbed run makes.
        let counter = FaultVfs::new(
            Arc::new(files(&seed)),
            Some(FaultPlan { kind, at: u64::MAX }),
        );
        session(&seed, Arc::new(counter.clone())).map_err(|(_, e)| {
            Error::Internal(format!("{}: counting run failed: {e}", seed.name()))
        })?;
        for at in 0..counter.calls() {
            rep.points += 1;
            let mem = files(&seed);
            let fv = FaultVfs::new(Arc::new(mem.clone()), Some(FaultPlan { kind, at }));
            let where_ = || {
                format!(
                    "{} {kind} at call {at} ({})",
                    seed.name(),
                    fv.fired().unwrap_or_default()
                )
            };
            match catch_unwind(AssertUnwindSafe(|| session(&seed, Arc::new(fv.clone())))) {
                Err(_) => {
                    rep.violations.push(format!("{}: panic", where_()));
                    continue;
                }
                Ok(Ok(m)) if m != reference => {
                    rep.violations.push(format!(
                        "{}: the failed run read a state other than recovery's: {}",
                        where_(),
                        m.diff(&reference, 3)
                    ));
                }
                Ok(Ok(_)) => {}
                Ok(Err((opened, e))) => {
                    rep.surfaced += 1;
                    rep.failed_opens += u64::from(!opened);
                    if !matches!(e, Error::Io { .. } | Error::Aborted(_) | Error::Poisoned(_)) {
                        rep.odd_errors += 1;
                        rep.violations.push(format!(
                            "{}: surfaced as an unexpected error: {e}",
                            where_()
                        ));
                    }
                }
            }
            // The next open, without faults, finishes the job.
            match catch_unwind(AssertUnwindSafe(|| session(&seed, Arc::new(mem.clone())))) {
                Err(_) => rep
                    .violations
                    .push(format!("{}: reopen panicked", where_())),
                Ok(Err((_, e))) => rep.violations.push(format!(
                    "{}: reopen after the failure failed: {e}",
                    where_()
                )),
                Ok(Ok(m)) if m != reference => rep.violations.push(format!(
                    "{}: reopen reached another state: {}",
                    where_(),
                    m.diff(&reference, 3)
                )),
                Ok(Ok(_)) => {}
            }
        }
    }
    Ok(rep)
}
