//! Concurrency correctness tooling: random concurrent histories checked
//! for serializability in commit order ([`histories`], [`check`]), and the
//! stress run (the same machinery for a fixed time with 8 threads, short
//! busy timeouts, transactions abandoned midway and a watchdog).
//! `twinpage histories` and `twinpage stress` are the command-line front
//! ends ([`Args`], [`StressArgs`]); docs/CONCURRENCY.md describes them.

pub mod check;
pub mod histories;

use histories::{run_history, HistoryConfig, Tally};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use twinpage::cc::Protocol;
use twinpage::journal::TestFaults;
use twinpage::{Error, JournalMode, Result, Synchronous};

/// The modes named (`all`: every mode in `JournalMode::ALL`, or a
/// comma-separated list).
pub fn modes(names: &str) -> Result<Vec<JournalMode>> {
    if names.eq_ignore_ascii_case("all") {
        Ok(JournalMode::ALL.to_vec())
    } else {
        names.split(',').map(|m| m.trim().parse()).collect()
    }
}

/// The (mode, protocol) pairs the registry allows, filtered by names
/// (`all` or comma-separated lists).
pub fn pairs(modes: &str, protocols: &str) -> Result<Vec<(JournalMode, Protocol)>> {
    let modes = self::modes(modes)?;
    let wanted: Option<Vec<Protocol>> = if protocols.eq_ignore_ascii_case("all") {
        None
    } else {
        Some(
            protocols
                .split(',')
                .map(|p| p.trim().parse())
                .collect::<Result<_>>()?,
        )
    };
    let mut v = Vec::new();
    for &m in &modes {
        for &p in m.spec().protocols {
            if wanted.as_ref().is_none_or(|w| w.contains(&p)) {
                v.push((m, p));
            }
        }
    }
    if v.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "no mode in {modes:?} allows protocol(s) {protocols}"
        )));
    }
    Ok(v)
}

/// Run `n` histories (seeds `seed..seed + n`) for one pair, stopping early
/// after `max_anomalies` anomalies or `time_limit`.
pub fn run_pair(
    cfg: &HistoryConfig,
    seed: u64,
    n: u64,
    max_anomalies: usize,
    time_limit: Option<Duration>,
    progress: bool,
) -> Result<Tally> {
    let start = Instant::now();
    let mut last = Instant::now();
    let mut tally = Tally::default();
    for i in 0..n {
        let t = run_history(cfg, seed.wrapping_add(i)).map_err(|e| {
            Error::InvalidArgument(format!(
                "{} {} history seed {}: the engine failed: {e}",
                cfg.mode,
                cfg.protocol,
                seed.wrapping_add(i)
            ))
        })?;
        tally.add(&t);
        if tally.anomalies.len() >= max_anomalies.max(1)
            || time_limit.is_some_and(|l| start.elapsed() >= l)
        {
            break;
        }
        if progress && last.elapsed() >= Duration::from_secs(10) {
            last = Instant::now();
            eprintln!(
                "  ... {} {}: {} histories, {} committed, {:.0}s",
                cfg.mode,
                cfg.protocol,
                tally.histories,
                tally.committed,
                start.elapsed().as_secs_f64()
            );
        }
    }
    Ok(tally)
}

/// One line of results.
pub fn summary(mode: JournalMode, p: Protocol, t: &Tally, elapsed: Duration) -> String {
    format!(
        "{:<9} {:<16} {:>6} histories, {:>7} committed, {:>6} readers, {:>6} conflicts, \
         {:>5} busy, {:>5} abandoned, {} gave up, max {} refusals/txn{}, {:.1}s: {} anomalies",
        mode.name(),
        p.name(),
        t.histories,
        t.committed,
        t.readers,
        t.conflicts,
        t.busy,
        t.abandoned,
        t.gave_up,
        t.max_conflicts_per_txn,
        if p.orders_commits() {
            format!(
                ", 2VTO max_aborts_per_txn {} second_aborts {}",
                t.max_aborts_per_txn, t.second_aborts
            )
        } else {
            String::new()
        },
        elapsed.as_secs_f64(),
        t.anomalies.len()
    )
}

/// Arguments of `twinpage histories`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Journal modes (`all` or a comma-separated list).
    #[arg(long, default_value = "all")]
    pub mode: String,
    /// Protocols (`all`: every one each mode's registry entry allows, or
    /// a comma-separated list).
    #[arg(long, default_value = "all")]
    pub protocol: String,
    /// Histories per (mode, protocol) pair.
    #[arg(long, default_value_t = 1000)]
    pub histories: u64,
    /// Seed of the first history.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fewest threads per history.
    #[arg(long, default_value_t = 2)]
    pub min_threads: usize,
    /// Most threads per history.
    #[arg(long, default_value_t = 8)]
    pub max_threads: usize,
    /// Transactions per thread.
    #[arg(long, default_value_t = 6)]
    pub txns: usize,
    /// Page size.
    #[arg(long, default_value_t = 1024)]
    pub page_size: usize,
    /// Busy timeout in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub busy_timeout_ms: u64,
    /// Sync level.
    #[arg(long, default_value = "full")]
    pub sync: Synchronous,
    /// Run on real files in this directory instead of in memory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Stop a pair after this many anomalies.
    #[arg(long, default_value_t = 5)]
    pub max_anomalies: usize,
    /// Print progress.
    #[arg(long)]
    pub progress: bool,
    /// Break the protocols on purpose (commit validation sees no reads,
    /// as the IPS paper describes BEGIN CONCURRENT) to see the checker
    /// catch write skew.
    #[arg(long, hide = true)]
    pub break_read_validation: bool,
}

/// `twinpage histories`: exit status 1 if any anomaly.
pub fn run(a: Args) -> Result<i32> {
    let mut bad = 0;
    for (mode, p) in pairs(&a.mode, &a.protocol)? {
        let mut cfg = HistoryConfig::new(mode, p);
        cfg.min_threads = a.min_threads;
        cfg.max_threads = a.max_threads;
        cfg.txns = a.txns;
        cfg.page_size = a.page_size;
        cfg.busy_timeout = Duration::from_millis(a.busy_timeout_ms);
        cfg.sync = a.sync;
        cfg.dir = a.dir.clone();
        cfg.faults = TestFaults {
            skip_read_validation: a.break_read_validation,
            ..TestFaults::default()
        };
        let start = Instant::now();
        let t = run_pair(&cfg, a.seed, a.histories, a.max_anomalies, None, a.progress)?;
        println!("{}", summary(mode, p, &t, start.elapsed()));
        for (seed, an) in t.anomalies.iter().take(a.max_anomalies) {
            println!("  ANOMALY in history seed {seed}: {an}");
            println!(
                "  reproduce: twinpage histories --mode {mode} --protocol {p} --seed {seed} \
                 --histories 1 --min-threads {} --max-threads {}",
                a.min_threads, a.max_threads
            );
        }
        bad += t.anomalies.len();
    }
    Ok(i32::from(bad > 0))
}

/// Arguments of `twinpage stress`.
#[derive(clap::Args, Debug, Clone)]
pub struct StressArgs {
    /// Journal modes (`all` or a comma-separated list).
    #[arg(long, default_value = "all")]
    pub mode: String,
    /// Protocols (`all` or a comma-separated list).
    #[arg(long, default_value = "all")]
    pub protocol: String,
    /// Threads.
    #[arg(long, default_value_t = 8)]
    pub threads: usize,
    /// Seconds per pair.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// Busy timeout in milliseconds (short, so timeouts fire).
    #[arg(long, default_value_t = 10)]
    pub busy_timeout_ms: u64,
    /// Percent of transactions abandoned on purpose midway.
    #[arg(long, default_value_t = 15)]
    pub abandon_pct: u32,
    /// Seconds without any transaction ending that count as a hang.
    #[arg(long, default_value_t = 30.0)]
    pub watchdog: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run on a real file in this directory instead of in memory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Sync level.
    #[arg(long, default_value = "full")]
    pub sync: Synchronous,
}

/// The stress configuration of one pair.
pub fn stress_config(a: &StressArgs, mode: JournalMode, p: Protocol) -> HistoryConfig {
    let mut cfg = HistoryConfig::new(mode, p);
    cfg.min_threads = a.threads;
    cfg.max_threads = a.threads;
    cfg.duration = Some(Duration::from_secs_f64(a.seconds));
    cfg.busy_timeout = Duration::from_millis(a.busy_timeout_ms);
    cfg.abandon_pct = a.abandon_pct;
    cfg.watchdog = Some(Duration::from_secs_f64(a.watchdog));
    cfg.dir = a.dir.clone();
    cfg.sync = a.sync;
    // Small values: a minute of transactions is kept for the check.
    cfg.max_pad = 64;
    cfg
}

/// `twinpage stress`: exit status 1 if any anomaly (a hang exits with 3
/// from the watchdog).
pub fn stress(a: StressArgs) -> Result<i32> {
    let mut bad = 0;
    for (mode, p) in pairs(&a.mode, &a.protocol)? {
        let cfg = stress_config(&a, mode, p);
        let start = Instant::now();
        let t = run_history(&cfg, a.seed)?;
        println!("{}", summary(mode, p, &t, start.elapsed()));
        for (_, an) in t.anomalies.iter().take(5) {
            println!("  ANOMALY: {an}");
        }
        bad += t.anomalies.len();
    }
    Ok(i32::from(bad > 0))
}
