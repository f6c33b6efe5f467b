//! `twinpage bench recovery`: how long open + first query takes after a
//! crash in the middle of a commit.
//!
//! Method: the parent builds a warm table (1,500 or 5,000 rows of 128
//! bytes, closed cleanly), then re-executes its own binary with the hidden
//! `crash-child` subcommand. The child opens the database through a file
//! system wrapper that, once armed right before COMMIT, SIGKILLs the
//! process immediately after the first write to the main database file
//! that follows a sync — the moment a rollback-journal commit has made its
//! journal durable and begun overwriting the database in place, so the
//! file is torn and the journal is hot. Commits that never write the
//! database file after a sync (SQLite WAL, OFF modes) complete, and the
//! child kills itself as soon as COMMIT returns: a WAL then holds the
//! committed frames and its index must be rebuilt. The child reports
//! which happened (`M` mid-commit, `C` after commit) on stdout. The parent
//! then (after sync + drop caches, when permitted) times opening the
//! database with the benchmark's settings plus one point query, checks
//! the row count (the interrupted transaction must be all or nothing) and
//! the database's integrity.

use super::engines::{self, EngineKind, EngineSpec};
use super::workload::{Operation, Txn, Workload, WorkloadSpec};
use super::{blockdev, BenchError, Env, EnvArgs};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use twinpage::storage::IoSnapshot;

/// Arguments of `twinpage bench recovery`.
#[derive(clap::Args, Debug, Clone)]
pub struct RecoveryArgs {
    /// Rows in the table before the interrupted transaction (comma list).
    #[arg(long, value_delimiter = ',', default_values_t = [1500u64, 5000])]
    pub warm: Vec<u64>,
    /// Rows the interrupted transaction inserts (comma list, each
    /// 1..=10000).
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 2, 4, 8, 16])]
    pub records: Vec<u32>,
    /// Bytes of the Value column.
    #[arg(long, default_value_t = 128)]
    pub record_size: usize,
    /// Crashes per cell; the time reported is the median.
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Engines (repeatable; default: every twinpage mode and SQLite
    /// delete/truncate/persist/wal/off at synchronous=full).
    #[arg(long = "engine", value_name = "SPEC")]
    pub engines: Vec<String>,
    /// Page cache state for the timed open: cold (sync + drop caches, as
    /// after a power loss; needs root), warm (sync only, as after a process
    /// crash) or both.
    #[arg(long, value_enum, default_value_t = CacheMode::Both)]
    pub cache: CacheMode,
    /// Write every figure as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Binary to run as the crashing child (default: this executable).
    #[arg(long, hide = true)]
    pub exe: Option<PathBuf>,
    /// Kill twinpage in the middle of its commit's database writes: they
    /// are held, and at the commit's first sync of the database file half
    /// of them (in issue order) reach the file before the kill, so an
    /// in-place mode's transaction is outstanding at the crash (default:
    /// the first database write after a sync, or right after the commit).
    #[arg(long)]
    pub torn: bool,
    /// Where to run.
    #[command(flatten)]
    pub env: EnvArgs,
}

/// Page cache state for the timed open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CacheMode {
    /// Sync and drop the page cache first.
    Cold,
    /// Sync first, keep the cache.
    Warm,
    /// Measure both (separate crashes).
    Both,
}

/// Arguments of the hidden `crash-child` subcommand.
#[derive(clap::Args, Debug, Clone)]
pub struct ChildArgs {
    /// Engine spec.
    #[arg(long)]
    pub engine: String,
    /// Database file.
    #[arg(long)]
    pub db: PathBuf,
    /// Warm rows (to regenerate the same keys).
    #[arg(long)]
    pub warm: u64,
    /// Rows to insert.
    #[arg(long)]
    pub records: u32,
    /// Value size.
    #[arg(long)]
    pub record_size: usize,
    /// Seed.
    #[arg(long)]
    pub seed: u64,
    /// Kill in the middle of the commit's database writes (twinpage).
    #[arg(long)]
    pub torn: bool,
}

fn workload(
    warm: u64,
    records: u32,
    record_size: usize,
    seed: u64,
) -> Result<Workload, BenchError> {
    // `records` single-row inserts gathered into one transaction (a
    // generated transaction holds at most 20 operations).
    let mut w = Workload::generate(&WorkloadSpec {
        op: Operation::Insert,
        txns: u64::from(records),
        prefill: warm,
        ops_per_txn: 1,
        record_size,
        seed,
        ..WorkloadSpec::default()
    })?;
    let ops = w.threads[0].drain(..).flat_map(|t| t.ops).collect();
    w.threads[0].push(Txn { ops });
    Ok(w)
}

/// The crashing child: never returns normally unless something failed.
pub fn child(a: &ChildArgs) -> Result<(), BenchError> {
    let spec: EngineSpec = a.engine.parse()?;
    let w = workload(a.warm, a.records, a.record_size, a.seed)?;
    let ops = &w.threads[0][0].ops;
    match &spec.kind {
        EngineKind::Twinpage(o) => engines::twinpage_crash_child(&a.db, o.clone(), ops, a.torn),
        EngineKind::Sqlite(s) => engines::sqlite_crash_child(&a.db, s, ops),
        EngineKind::Floor { .. } => Err(BenchError::Msg("floor has no recovery".into())),
        EngineKind::Redb { .. } | EngineKind::Lmdb { .. } => Err(BenchError::Msg(
            "the recovery benchmark runs twinpage and SQLite only".into(),
        )),
    }
}

/// One cell of the result table.
#[derive(Debug, Clone)]
pub struct RecoveryResult {
    /// Engine as given.
    pub engine: String,
    /// Warm rows.
    pub warm: u64,
    /// Rows of the interrupted transaction.
    pub records: u32,
    /// Killed mid-commit (true) or right after COMMIT returned (false), per
    /// repetition.
    pub mid_commit: Vec<bool>,
    /// Bytes of the files other than the database after the crash (hot
    /// journal or WAL), first repetition.
    pub leftover_aux_bytes: u64,
    /// Time of open + first query with a cold page cache, per repetition.
    pub cold: Vec<Duration>,
    /// Time of open + first query with a warm page cache, per repetition.
    pub warm_times: Vec<Duration>,
    /// Rows after recovery, first repetition.
    pub rows_after: u64,
    /// I/O of open + first query, first repetition.
    pub io: IoSnapshot,
    /// Recovery detail (twinpage).
    pub detail: String,
}

impl RecoveryResult {
    /// Median of `times` in milliseconds.
    pub fn median_ms(times: &[Duration]) -> Option<f64> {
        let mut v: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        }
    }

    /// Rolled back, committed or TORN (a failure).
    pub fn outcome(&self) -> &'static str {
        if self.rows_after == self.warm {
            "rolled back"
        } else if self.rows_after == self.warm + u64::from(self.records) {
            "committed"
        } else {
            "TORN"
        }
    }

    /// When the child was killed: mid-commit, after commit or mixed.
    pub fn killed(&self) -> &'static str {
        if self.mid_commit.iter().all(|m| *m) {
            "mid-commit"
        } else if self.mid_commit.iter().all(|m| !*m) {
            "after commit"
        } else {
            "mixed"
        }
    }
}

fn aux_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name() != engines::DB_FILE)
                .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

/// One crash and recovery.
struct Trial<'a> {
    spec: &'a EngineSpec,
    warm: u64,
    records: u32,
    rep: u32,
    cold: bool,
}

fn one(
    env: &Env,
    a: &RecoveryArgs,
    exe: &Path,
    trial: Trial<'_>,
) -> Result<(bool, u64, Duration, u64, IoSnapshot, String), BenchError> {
    let Trial {
        spec,
        warm,
        records,
        rep,
        cold,
    } = trial;
    let dir = env.dir.join(format!(
        "rec-{}-{warm}-{records}-{rep}",
        spec.label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect::<String>()
    ));
    if dir.exists() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| BenchError::Io(format!("mkdir {}", dir.display()), e))?;
    let w = workload(warm, records, a.record_size, a.seed)?;
    {
        let e = engines::open(spec, &dir)?;
        e.load(&w)?;
        e.close()?;
    }
    let db = dir.join(engines::DB_FILE);
    let out = Command::new(exe)
        .args(["bench", "crash-child", "--engine", &spec.label, "--db"])
        .arg(&db)
        .args([
            "--warm",
            &warm.to_string(),
            "--records",
            &records.to_string(),
            "--record-size",
            &a.record_size.to_string(),
            "--seed",
            &a.seed.to_string(),
        ])
        .args(a.torn.then_some("--torn"))
        .output()
        .map_err(|e| BenchError::Io(format!("run {}", exe.display()), e))?;
    use std::os::unix::process::ExitStatusExt;
    if out.status.signal() != Some(libc::SIGKILL) {
        return Err(BenchError::Msg(format!(
            "{}: crash child was not killed ({}): {}",
            spec.label,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mid = match out.stdout.as_slice() {
        b"M" => true,
        b"C" => false,
        other => {
            return Err(BenchError::Msg(format!(
                "{}: unexpected crash child output {:?}",
                spec.label,
                String::from_utf8_lossy(other)
            )))
        }
    };
    let leftover = aux_bytes(&dir);
    if cold {
        blockdev::isolate();
    } else {
        // The child's unsynced writes should not be billed to recovery.
        blockdev::syncfs(&dir);
    }
    let probe = w.prefill[w.prefill.len() / 2].key;
    let (t, rows, io, detail) = match &spec.kind {
        EngineKind::Twinpage(o) => engines::twinpage_open_recovered(&db, o.clone(), probe)?,
        EngineKind::Sqlite(s) => engines::sqlite_open_recovered(&db, s, probe)?,
        EngineKind::Floor { .. } => return Err(BenchError::Msg("floor has no recovery".into())),
        EngineKind::Redb { .. } | EngineKind::Lmdb { .. } => {
            return Err(BenchError::Msg(
                "the recovery benchmark runs twinpage and SQLite only".into(),
            ))
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok((mid, leftover, t, rows, io, detail))
}

/// Run the recovery benchmark.
pub fn run(a: &RecoveryArgs) -> Result<(), BenchError> {
    let m = measure(a)?;
    let Measured {
        results,
        mut env,
        locked,
        cold_note,
    } = m;
    print_table(&results);
    let end = super::host_load();
    println!();
    println!("host load at the end: {end}");
    env.notes.push(("host load, end".into(), end));
    if let Some(path) = &a.json {
        let runs: Vec<_> = results.iter().map(|r| r.json(a.record_size)).collect();
        let env_notes: serde_json::Map<String, serde_json::Value> = env
            .notes
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let doc = json!({
            "tool": "twinpage bench recovery",
            "code_mlocked": locked,
            "note": cold_note,
            "environment": env_notes,
            "runs": runs,
        });
        let text =
            serde_json::to_string_pretty(&doc).map_err(|e| BenchError::Msg(e.to_string()))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| BenchError::Io(format!("write {}", path.display()), e))?;
        println!("JSON written to {}", path.display());
    }
    Ok(())
}

/// What [`measure`] found, with the environment it ran in.
pub struct Measured {
    /// One result per engine, warm size and transaction size.
    pub results: Vec<RecoveryResult>,
    /// The environment (its notes are printed and saved).
    pub env: Env,
    /// The benchmark's own code was locked in memory for cold opens.
    pub locked: bool,
    /// Why cold opens were not measured, if they were not.
    pub cold_note: String,
}

/// Crash every engine in every cell and time its recovery.
pub fn measure(a: &RecoveryArgs) -> Result<Measured, BenchError> {
    let list = if a.engines.is_empty() {
        engines::default_engines()
            .into_iter()
            .filter(|e| e != "floor")
            .collect()
    } else {
        a.engines.clone()
    };
    let specs: Vec<EngineSpec> = list.iter().map(|s| s.parse()).collect::<Result<_, _>>()?;
    if let Some(s) = specs
        .iter()
        .find(|s| matches!(s.kind, EngineKind::Floor { .. }))
    {
        return Err(BenchError::Msg(format!(
            "{}: the floor has no recovery",
            s.label
        )));
    }
    if let Some(r) = a.records.iter().find(|r| !(1..=10_000).contains(*r)) {
        return Err(BenchError::Msg(format!("--records {r}: must be 1..=10000")));
    }
    let exe = match &a.exe {
        Some(e) => e.clone(),
        None => std::env::current_exe()
            .map_err(|e| BenchError::Io("locate the twinpage executable".into(), e))?,
    };
    let env = Env::new(&a.env)?;
    let mut modes = Vec::new();
    let mut cold_note = String::new();
    if matches!(a.cache, CacheMode::Cold | CacheMode::Both) {
        if !env.isolate {
            cold_note = "cold cache not measured (--no-isolate)".into();
        } else if !blockdev::isolate() {
            cold_note = "cold cache not measured: dropping the page cache needs root".into();
        } else {
            modes.push(true);
        }
    }
    if matches!(a.cache, CacheMode::Warm | CacheMode::Both) || modes.is_empty() {
        modes.push(false);
    }
    // Dropping the page cache would also evict this program's own code,
    // and re-reading it from disk would be billed to recovery; lock it in.
    // SAFETY: mlockall has no memory-safety preconditions.
    let locked = modes.contains(&true) && unsafe { libc::mlockall(libc::MCL_CURRENT) } == 0;
    let mut env = env;
    env.notes
        .push(("host load, start".into(), super::host_load()));
    println!("twinpage bench recovery");
    for (k, v) in &env.notes {
        println!("  {k:<16} {v}");
    }
    println!(
        "  {:<16} warm table {:?} rows, interrupted txn inserts {:?} rows of {} bytes, {} crash(es) per cell and cache state, median reported",
        "workload", a.warm, a.records, a.record_size, a.reps.max(1)
    );
    println!(
        "  {:<16} open (with the benchmark's settings) + first point query",
        "timed"
    );
    if modes.contains(&true) {
        println!(
            "  {:<16} sync + drop caches before the timed open{}",
            "cold",
            if locked {
                "; the benchmark's own code is mlock'ed so its page faults are not billed"
            } else {
                "; mlockall failed, so the benchmark's own code page faults are included"
            }
        );
    }
    if modes.contains(&false) {
        println!(
            "  {:<16} syncfs before the timed open, page cache kept",
            "warm"
        );
    }
    if !cold_note.is_empty() {
        println!("  {:<16} {cold_note}", "note");
    }
    let total = specs.len() * a.warm.len() * a.records.len() * a.reps.max(1) as usize * modes.len();
    let pb = super::progress(total as u64, "recovery".into());
    let mut results = Vec::new();
    for spec in &specs {
        for &warm in &a.warm {
            for &records in &a.records {
                let mut r = RecoveryResult {
                    engine: spec.label.clone(),
                    warm,
                    records,
                    mid_commit: Vec::new(),
                    leftover_aux_bytes: 0,
                    cold: Vec::new(),
                    warm_times: Vec::new(),
                    rows_after: 0,
                    io: IoSnapshot::default(),
                    detail: String::new(),
                };
                for rep in 0..a.reps.max(1) {
                    for &cold in &modes {
                        pb.set_message(format!("{} {warm}+{records}", spec.label));
                        let (mid, left, t, rows, io, detail) = one(
                            &env,
                            a,
                            &exe,
                            Trial {
                                spec,
                                warm,
                                records,
                                rep,
                                cold,
                            },
                        )?;
                        if r.mid_commit.is_empty() {
                            r.leftover_aux_bytes = left;
                            r.rows_after = rows;
                            r.io = io;
                            r.detail = detail;
                        } else if rows != r.rows_after {
                            return Err(BenchError::Msg(format!(
                                "{}: {rows} rows after recovery, previously {}",
                                spec.label, r.rows_after
                            )));
                        }
                        r.mid_commit.push(mid);
                        if cold {
                            r.cold.push(t);
                        } else {
                            r.warm_times.push(t);
                        }
                        pb.inc(1);
                    }
                }
                if r.outcome() == "TORN" {
                    return Err(BenchError::Msg(format!(
                        "{}: {} rows after recovery, expected {} or {}",
                        spec.label,
                        r.rows_after,
                        warm,
                        warm + u64::from(records)
                    )));
                }
                results.push(r);
            }
        }
    }
    pb.finish_and_clear();
    Ok(Measured {
        results,
        env,
        locked,
        cold_note,
    })
}

impl RecoveryResult {
    /// The JSON object of one result (fields in docs/BENCH.md).
    pub fn json(&self, record_size: usize) -> serde_json::Value {
        let r = self;
        json!({
            "engine": r.engine,
            "warm_rows": r.warm,
            "records": r.records,
            "record_size": record_size,
            "killed": r.killed(),
            "leftover_aux_bytes": r.leftover_aux_bytes,
            "recovery_ms_cold": RecoveryResult::median_ms(&r.cold),
            "recovery_ms_warm": RecoveryResult::median_ms(&r.warm_times),
            "recovery_ms_cold_each": r.cold.iter().map(|t| t.as_secs_f64() * 1e3).collect::<Vec<_>>(),
            "recovery_ms_warm_each": r.warm_times.iter().map(|t| t.as_secs_f64() * 1e3).collect::<Vec<_>>(),
            "rows_after": r.rows_after,
            "outcome": r.outcome(),
            "recovery_writes": r.io.write_calls,
            "recovery_reads": r.io.read_calls,
            "recovery_syncs": r.io.fdatasync + r.io.fsync + r.io.dir_syncs,
            "recovery_truncates": r.io.truncates,
            "recovery_removes": r.io.removes,
            "detail": r.detail,
        })
    }
}

fn print_table(rs: &[RecoveryResult]) {
    let w = rs.iter().map(|r| r.engine.len()).max().unwrap_or(6).max(6);
    let ms = |t: &[Duration]| match RecoveryResult::median_ms(t) {
        Some(v) => format!("{v:.3}"),
        None => "-".into(),
    };
    println!();
    println!(
        "{:<w$} {:>5} {:>4} {:>12} {:>9} {:>10} {:>10} {:>11} {:>6} {:>6} {:>6}",
        "engine",
        "warm",
        "rows",
        "killed",
        "left KiB",
        "cold ms",
        "warm ms",
        "outcome",
        "reads",
        "writes",
        "syncs"
    );
    for r in rs {
        println!(
            "{:<w$} {:>5} {:>4} {:>12} {:>9.1} {:>10} {:>10} {:>11} {:>6} {:>6} {:>6}",
            r.engine,
            r.warm,
            r.records,
            r.killed(),
            r.leftover_aux_bytes as f64 / 1024.0,
            ms(&r.cold),
            ms(&r.warm_times),
            r.outcome(),
            r.io.read_calls,
            r.io.write_calls,
            r.io.fdatasync + r.io.fsync + r.io.dir_syncs,
        );
    }
}
