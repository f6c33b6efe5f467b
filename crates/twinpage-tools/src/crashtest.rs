//! `twinpage crashtest`: explore crash states of every journal mode (see
//! docs/CRASH.md). Prints, per mode, the cut points, the crash states
//! explored, states per second and violations; on a violation prints a
//! reproducer and exits non-zero.

use super::crash::child::{kill_campaign, run_child, KillConfig};
use super::crash::explore::{explore, ExploreConfig, Target};
use super::crash::flip::{campaign, CampaignConfig, Damage};
use super::crash::inject::{inject, InjectConfig};
use super::crash::recovery_faults::inject_recovery;
use super::crash::workload::WorkloadConfig;
use std::time::Duration;
use twinpage::cc::Protocol;
use twinpage::journal::{ModeOptions, TestFaults};
use twinpage::Durability;
use twinpage::{Error, JournalMode, Result, Synchronous};
use twinpage_sim::fault::FaultKind;
use twinpage_sim::sim::PersistenceModel;

/// Arguments of `twinpage crashtest`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Journal mode to explore, or `all` for every mode in JournalMode::ALL.
    #[arg(long, default_value = "all")]
    pub mode: String,
    /// Concurrency protocol (`sqlite`, `begin-concurrent`, ...), or `all`
    /// for every protocol each mode's registry entry allows. Modes that do
    /// not allow the protocol are skipped.
    #[arg(long, default_value = "sqlite")]
    pub concurrency: String,
    /// Persistence model: strict, ext4-ordered or torn.
    #[arg(long, default_value = "ext4-ordered")]
    pub model: PersistenceModel,
    /// Seed of the first workload round (round r uses seed + r).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Distinct crash states to explore per mode.
    #[arg(long, default_value_t = 2000)]
    pub states: u64,
    /// Sync level: off, normal, full or extra.
    #[arg(long, default_value = "full")]
    pub sync: Synchronous,
    /// Crash states drawn per cut point.
    #[arg(long, default_value_t = 8)]
    pub per_cut: u64,
    /// Transactions per workload round.
    #[arg(long, default_value_t = 60)]
    pub txns: usize,
    /// Write transactions open at once under a protocol with several
    /// writers (their operations interleaved by one driver thread); 1 runs
    /// them one after the other. One-writer protocols always run one.
    #[arg(long, default_value_t = 3)]
    pub in_flight: usize,
    /// With several in flight: transactions done at the same moment commit
    /// together, one thread each, sharing the journal's group commit (the
    /// run is then not reproducible from a violation's coordinates).
    #[arg(long)]
    pub group_commit: bool,
    /// Page size of the test database.
    #[arg(long, default_value_t = 1024)]
    pub page_size: usize,
    /// Page cache budget in pages (small, so transactions spill).
    #[arg(long, default_value_t = 16)]
    pub cache_pages: usize,
    /// Do not crash during recovery.
    #[arg(long)]
    pub no_recovery_crashes: bool,
    /// Stop each mode after this many seconds.
    #[arg(long)]
    pub max_seconds: Option<f64>,
    /// Stop each mode after this many violations.
    #[arg(long, default_value_t = 3)]
    pub max_violations: usize,
    /// Reproduce one state: the cut point (with --seed and --draw).
    #[arg(long, requires = "draw")]
    pub cut: Option<usize>,
    /// Reproduce one state: the draw at the cut.
    #[arg(long, requires = "cut")]
    pub draw: Option<u64>,
    /// Break the mode on purpose (skip the journal sync) to see the
    /// explorer catch it.
    #[arg(long, hide = true)]
    pub break_journal_sync: bool,
    /// Print progress every few seconds.
    #[arg(long)]
    pub progress: bool,
    /// A mode option, `name=value` (repeatable; the mode rejects names it
    /// does not know, so use it with a single --mode).
    #[arg(long = "opt", value_name = "NAME=VALUE")]
    pub opts: Vec<String>,
    /// Instead of exploring crash states, inject I/O errors at every call
    /// of a workload: eio, enospc, short-write or all.
    #[arg(long)]
    pub inject: Option<String>,
    /// Instead of exploring crash states, run a child process on a real
    /// file this many times per mode, SIGKILL it at a random moment and
    /// check the prefix property after recovery.
    #[arg(long)]
    pub kill: Option<u64>,
    /// Directory for --kill (default: a fresh temporary directory).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// The child of --kill: run the workload on this file until killed.
    #[arg(long, hide = true)]
    pub child_workload: Option<std::path::PathBuf>,
    /// Write the crash image of a reproduced state (--cut/--draw) into
    /// this directory.
    #[arg(long, requires = "cut")]
    pub dump_dir: Option<std::path::PathBuf>,
    /// Instead of exploring crash states, damage one page of a committed
    /// database per trial and check that it is detected: bitflip, zero,
    /// stale, misdirected or all (docs/CRASH.md §5b).
    #[arg(long)]
    pub damage: Option<String>,
    /// Trials per mode and damage kind for --damage.
    #[arg(long, default_value_t = 10_000)]
    pub trials: u64,
    /// With --damage: create the database without page checksums.
    #[arg(long)]
    pub no_checksums: bool,
    /// With --inject: fail the calls of a recovery (opening the crash
    /// states of the damaged-file seeds) instead of the workload's.
    #[arg(long, requires = "inject")]
    pub recovery: bool,
}

impl Args {
    /// The modes selected by `--mode`.
    pub fn modes(&self) -> Result<Vec<JournalMode>> {
        crate::conc::modes(&self.mode)
    }

    /// The (mode, protocol) pairs selected by `--mode` and `--concurrency`.
    pub fn pairs(&self) -> Result<Vec<(JournalMode, Protocol)>> {
        crate::conc::pairs(&self.mode, &self.concurrency)
    }

    /// The mode options given with --opt.
    pub fn mode_opts(&self) -> Result<ModeOptions> {
        let mut o = ModeOptions::default();
        for kv in &self.opts {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                Error::InvalidArgument(format!("--opt wants NAME=VALUE, not {kv:?}"))
            })?;
            o.0.push((k.trim().to_string(), v.trim().to_string()));
        }
        Ok(o)
    }

    /// The explorer configuration for one mode.
    pub fn config(&self, mode: JournalMode, protocol: Protocol) -> ExploreConfig {
        let mut cfg = ExploreConfig::new(mode, self.model);
        cfg.protocol = protocol;
        cfg.mode_opts = self.mode_opts().unwrap_or_default();
        cfg.sync = self.sync;
        cfg.seed = self.seed;
        cfg.states = self.states;
        cfg.per_cut = self.per_cut.max(1);
        cfg.workload = WorkloadConfig {
            seed: self.seed,
            txns: self.txns,
            page_size: self.page_size,
            in_flight: self.in_flight,
            group_commit: self.group_commit,
            ..WorkloadConfig::default()
        };
        cfg.cache_size = self.cache_pages * self.page_size;
        cfg.faults = TestFaults {
            skip_journal_sync: self.break_journal_sync,
            ..TestFaults::default()
        };
        cfg.recovery_crashes = !self.no_recovery_crashes;
        cfg.max_violations = self.max_violations;
        cfg.time_limit = self.max_seconds.map(Duration::from_secs_f64);
        cfg.only = match (self.cut, self.draw) {
            (Some(cut), Some(draw)) => Some(Target {
                seed: self.seed,
                cut,
                draw,
            }),
            _ => None,
        };
        cfg.progress = self.progress;
        cfg.dump_dir = self.dump_dir.clone();
        cfg
    }

    /// The fault kinds selected by `--inject`.
    pub fn fault_kinds(&self) -> Result<Vec<FaultKind>> {
        match self.inject.as_deref() {
            None => Ok(Vec::new()),
            Some("all") => Ok(FaultKind::ALL.to_vec()),
            Some(list) => list.split(',').map(|k| k.trim().parse()).collect(),
        }
    }
}

fn run_kill(a: &Args, modes: &[JournalMode], rounds: u64) -> Result<i32> {
    let binary = std::env::current_exe().map_err(|e| Error::io("current_exe", "twinpage", e))?;
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir().map_err(|e| Error::io("mkdtemp", "/tmp", e))?;
            tmp.path().to_path_buf()
        }
    };
    println!(
        "crashtest --kill: {rounds} SIGKILLs per mode, sync={} seed={} page_size={} in {}",
        a.sync,
        a.seed,
        a.page_size,
        dir.display()
    );
    let mut failed = 0;
    for &mode in modes {
        let rep = kill_campaign(&KillConfig {
            binary: binary.clone(),
            dir: dir.clone(),
            mode,
            sync: a.sync,
            seed: a.seed,
            rounds,
            page_size: a.page_size,
            max_delay: Duration::from_millis(300),
        })?;
        println!(
            "{:<9} sync={:<6}: {} kills, {} commits acknowledged before them, {} in flight, {} recoveries with work to do, {:.1}s, {} violations{}",
            mode.name(),
            a.sync,
            rep.rounds,
            rep.acked,
            rep.in_flight,
            rep.recovered,
            rep.elapsed.as_secs_f64(),
            rep.violations.len(),
            if rep.unprotected > 0 {
                format!(", {} damaged (no guarantee in this mode)", rep.unprotected)
            } else {
                String::new()
            }
        );
        for v in &rep.violations {
            failed += 1;
            println!("VIOLATION: {v}");
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

fn run_damage(a: &Args, modes: &[JournalMode], kinds: &str) -> Result<i32> {
    let kinds: Vec<Damage> = if kinds == "all" {
        Damage::ALL.to_vec()
    } else {
        kinds
            .split(',')
            .map(|k| k.trim().parse())
            .collect::<Result<_>>()?
    };
    println!(
        "crashtest --damage: {} trials per mode and kind, seed={} page_size={} checksums={}",
        a.trials,
        a.seed,
        a.page_size,
        if a.no_checksums { "off" } else { "on" }
    );
    let mut failed = 0;
    for &mode in modes {
        for &damage in &kinds {
            let cfg = CampaignConfig {
                trials: a.trials,
                seed: a.seed,
                page_size: a.page_size,
                checksums: !a.no_checksums,
                ..CampaignConfig::new(mode, damage)
            };
            let started = std::time::Instant::now();
            let rep = campaign(&cfg)?;
            println!("{rep} [{:.1}s]", started.elapsed().as_secs_f64());
            // Panics are bugs whatever the damage. With checksums on, every
            // bit flip is detected, and a zeroed or misdirected page never
            // returns wrong data (zeros on a free page are a page never
            // written); a stale page is what checksums cannot catch.
            let missed = match damage {
                Damage::BitFlip => rep.undetected + rep.silent,
                Damage::Zero | Damage::Misdirected => rep.silent,
                Damage::Stale => 0,
            };
            if rep.panics > 0 || (cfg.checksums && missed > 0) {
                failed += 1;
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

fn run_inject(a: &Args, modes: &[JournalMode]) -> Result<i32> {
    let kinds = a.fault_kinds()?;
    if a.recovery {
        println!(
            "crashtest --inject --recovery: every call of open (recovery), read, check, close"
        );
        let mut failed = 0;
        for &mode in modes {
            for &kind in &kinds {
                let rep = inject_recovery(mode, kind)?;
                println!("{rep}");
                for v in rep.violations.iter().take(a.max_violations) {
                    println!("VIOLATION: {v}");
                }
                failed += rep.violations.len();
            }
        }
        return Ok(if failed > 0 { 1 } else { 0 });
    }
    println!(
        "crashtest --inject: sync={} seed={} txns={} page_size={} cache_pages={}",
        a.sync, a.seed, a.txns, a.page_size, a.cache_pages
    );
    let mut failed = 0;
    for &mode in modes {
        for &kind in &kinds {
            let mut cfg = InjectConfig::new(mode, kind);
            cfg.sync = a.sync;
            cfg.workload = WorkloadConfig {
                seed: a.seed,
                txns: a.txns,
                page_size: a.page_size,
                ..WorkloadConfig::default()
            };
            cfg.cache_size = a.cache_pages * a.page_size;
            cfg.mode_opts = a.mode_opts()?;
            cfg.max_violations = a.max_violations;
            let rep = inject(&cfg)?;
            println!("{rep}");
            for v in &rep.violations {
                failed += 1;
                println!("VIOLATION: {v}");
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// Run it; returns the process exit code (1 on any violation).
pub fn run(a: Args) -> Result<i32> {
    let modes = a.modes()?;
    a.mode_opts()?;
    if a.cut.is_some() && modes.len() != 1 {
        return Err(Error::InvalidArgument(
            "reproducing a state (--cut/--draw) needs a single --mode".into(),
        ));
    }
    if let Some(path) = &a.child_workload {
        let [mode] = modes[..] else {
            return Err(Error::InvalidArgument(
                "--child-workload needs one --mode".into(),
            ));
        };
        return run_child(path, mode, a.sync, a.seed, a.page_size);
    }
    if let Some(rounds) = a.kill {
        return run_kill(&a, &modes, rounds);
    }
    if a.inject.is_some() {
        return run_inject(&a, &modes);
    }
    if let Some(kinds) = &a.damage {
        return run_damage(&a, &modes, kinds);
    }
    println!(
        "crashtest: model={} sync={} seed={} states={} per-cut={} txns={} page_size={} cache_pages={}",
        a.model, a.sync, a.seed, a.states, a.per_cut, a.txns, a.page_size, a.cache_pages
    );
    let mut failed = 0;
    for (mode, protocol) in a.pairs()? {
        let cfg = a.config(mode, protocol);
        let rep = explore(&cfg)?;
        println!("{rep}");
        println!("          workload: {}", rep.coverage);
        if rep.durability == Durability::None {
            println!(
                "          ({} at synchronous={} promises nothing across power loss: reported, not failed)",
                mode, a.sync
            );
        }
        for v in &rep.violations {
            failed += 1;
            println!("{v}");
            println!(
                "reproduce: twinpage crashtest --mode {} --concurrency {} --model {} --sync {} --seed {} \
                 --cut {} --draw {} --per-cut {} --txns {} --in-flight {} --page-size {} --cache-pages {}{}",
                mode,
                protocol,
                a.model,
                a.sync,
                v.seed,
                v.cut,
                v.draw,
                a.per_cut,
                a.txns,
                a.in_flight,
                a.page_size,
                a.cache_pages,
                if a.break_journal_sync {
                    " --break-journal-sync"
                } else {
                    ""
                }
            );
            if a.group_commit {
                println!(
                    "  (--group-commit: parallel commits interleave their I/O as the scheduler let them; a rerun draws another log, so the state above is the record)"
                );
            }
        }
    }
    Ok(if failed > 0 { 1 } else { 0 })
}
