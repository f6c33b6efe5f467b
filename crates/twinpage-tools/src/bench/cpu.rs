//! `twinpage bench cpu`: the CPU an operation costs when the disk is out of
//! the picture (synchronous=off on files, or an in-memory file system),
//! twinpage's native API beside SQLite's prepared statements.
//!
//! Every engine runs insert, update, delete, point select and a range scan
//! of [`SCAN_ROWS`] rows, one operation per auto-commit transaction, on the
//! same generated workload. The tables at the end give CPU per operation
//! from `getrusage` and its ratio to the baseline: user CPU (the median
//! of the rounds, and pooled over all of them) and user plus system. The
//! kernel counts a thread's run time exactly but, with tick accounting
//! (`CONFIG_TICK_CPU_ACCOUNTING`, 250 Hz here), splits it between user and
//! system by sampling: a round of 100 ms carries about 25 samples, so its
//! user CPU alone moves by 10-20% from round to round, and the pooled
//! figure over many rounds (`--repeat 25`) is the one to read. With `--instructions perf|callgrind` each engine and
//! operation also runs in a child process twice, with and without the
//! measured operations, under `perf stat -e instructions:u` or valgrind's
//! callgrind; the difference divided by the operations is instructions per
//! operation (load and start-up cancel out).

use super::engines::{self, EngineSpec};
use super::workload::{Operation, Workload, WorkloadSpec, SCAN_ROWS};
use super::{engine_specs, finish, print_header, report, run_matrix, BenchError, Env};
use super::{EnvArgs, ReportArgs};
use std::path::Path;
use std::process::Command;

/// How instructions are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Counter {
    /// Not counted.
    None,
    /// `perf stat -e instructions:u` (needs hardware counters: not in
    /// most VMs).
    Perf,
    /// valgrind's callgrind (exact and slow: about 50x).
    Callgrind,
}

/// Arguments of `twinpage bench cpu`.
#[derive(clap::Args, Debug, Clone)]
pub struct CpuArgs {
    /// Rows loaded before measuring.
    #[arg(long, default_value_t = 20_000)]
    pub rows: u64,
    /// Measured operations per engine and operation (one per transaction).
    #[arg(long, default_value_t = 20_000)]
    pub ops: u64,
    /// Operations to run (repeatable; default: insert, update, delete,
    /// select, scan).
    #[arg(long = "op", value_enum)]
    pub op_list: Vec<Operation>,
    /// Bytes of the Value column.
    #[arg(long, default_value_t = 100)]
    pub record_size: usize,
    /// Random seed of the op stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run every engine this many times (round robin); timings are medians.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// In memory: twinpage on its in-process file system (`vfs=memory`),
    /// SQLite on its memdb VFS (journal_mode=memory; memdb has no WAL).
    #[arg(long)]
    pub memory: bool,
    /// Count instructions per operation too.
    #[arg(long, value_enum, default_value_t = Counter::None)]
    pub instructions: Counter,
    /// Engines (repeatable). Default: every twinpage mode and SQLite WAL,
    /// all at synchronous=off (with --memory: in memory, SQLite
    /// journal_mode=memory).
    #[arg(long = "engine", value_name = "SPEC")]
    pub engines: Vec<String>,
    /// Where to run.
    #[command(flatten)]
    pub env: EnvArgs,
    /// Output (the baseline defaults to the default list's SQLite engine).
    #[command(flatten)]
    pub report: ReportArgs,
}

/// Arguments of the hidden child that runs one engine on one operation.
#[derive(clap::Args, Debug, Clone)]
pub struct CpuChildArgs {
    /// The engine.
    #[arg(long)]
    pub engine: String,
    /// The operation.
    #[arg(long, value_enum)]
    pub op: Operation,
    /// Rows loaded.
    #[arg(long)]
    pub rows: u64,
    /// Operations generated.
    #[arg(long)]
    pub ops: u64,
    /// Bytes of the Value column.
    #[arg(long)]
    pub record_size: usize,
    /// Seed.
    #[arg(long)]
    pub seed: u64,
    /// Run the operations (without: load only).
    #[arg(long)]
    pub measure: bool,
    /// Directory for the database.
    #[arg(long)]
    pub dir: std::path::PathBuf,
}

const OPS: [Operation; 5] = [
    Operation::Insert,
    Operation::Update,
    Operation::Delete,
    Operation::Select,
    Operation::Scan,
];

/// The default engine list of the CPU benchmark.
pub fn default_engines(memory: bool) -> Vec<String> {
    let tail = if memory {
        ",synchronous=off,vfs=memory"
    } else {
        ",synchronous=off"
    };
    let mut v: Vec<String> = twinpage::JournalMode::ALL
        .iter()
        .map(|m| format!("twinpage:{}{tail}", m.name()))
        .collect();
    v.push(sqlite_baseline(memory).into());
    v
}

fn sqlite_baseline(memory: bool) -> &'static str {
    if memory {
        "sqlite:memory,synchronous=off,vfs=memdb"
    } else {
        "sqlite:wal,synchronous=off"
    }
}

fn spec(op: Operation, rows: u64, ops: u64, record_size: usize, seed: u64) -> WorkloadSpec {
    WorkloadSpec {
        op,
        txns: ops,
        prefill: rows,
        record_size,
        seed,
        ..WorkloadSpec::default()
    }
}

/// `twinpage bench cpu`.
pub fn run(a: &CpuArgs) -> Result<(), BenchError> {
    let list = if a.engines.is_empty() {
        default_engines(a.memory)
    } else {
        a.engines.clone()
    };
    let specs = engine_specs(&list)?;
    let mut rep = a.report.clone();
    if a.engines.is_empty() && rep.baseline == "sqlite:wal" {
        rep.baseline = sqlite_baseline(a.memory).into();
    }
    let ops: Vec<Operation> = if a.op_list.is_empty() {
        OPS.to_vec()
    } else {
        a.op_list.clone()
    };
    let mut workloads = Vec::new();
    for &op in &ops {
        workloads.push(Workload::generate(&spec(
            op,
            a.rows,
            a.ops,
            a.record_size,
            a.seed,
        ))?);
    }
    let mut env = Env::new(&a.env)?;
    let desc = vec![(
        "workloads".to_string(),
        format!(
            "{}; {} txns of 1 operation (auto-commit) after {} rows; scan = {SCAN_ROWS} rows from an existing key; {}-byte Value; uniform keys; seed {}; {} round(s); {}",
            ops.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", "),
            a.ops, a.rows, a.record_size, a.seed, a.repeat.max(1),
            if a.memory { "in memory" } else { "files, synchronous=off" }
        ),
    )];
    print_header("twinpage bench cpu", &mut env, &desc);
    let summaries = run_matrix(&env, &specs, &workloads, a.repeat)?;
    let instr = match a.instructions {
        Counter::None => Vec::new(),
        c => count_all(c, &specs, &ops, a, &env.dir)?,
    };
    let settings = serde_json::json!({
        "suite": "cpu",
        "workloads": workloads.iter().map(|w| &w.spec).collect::<Vec<_>>(),
        "repeat": a.repeat.max(1),
        "memory": a.memory,
        "instructions_per_op": instr.iter().map(|(e, o, n)| serde_json::json!({
            "engine": e, "op": o.to_string(), "instructions": n,
        })).collect::<Vec<_>>(),
    });
    finish(&summaries, &mut env, &rep, settings)?;
    print_cpu_table(&summaries, &rep.baseline, &ops, &specs, &instr);
    Ok(())
}

/// CPU per operation: engines down, operations across, three ways (user
/// CPU per round's median, user CPU pooled over the rounds, user plus
/// system), then instructions when they were counted.
fn print_cpu_table(
    s: &[report::Summary],
    baseline: &str,
    ops: &[Operation],
    specs: &[EngineSpec],
    instr: &[(String, Operation, Option<f64>)],
) {
    type Pick = fn(&report::Summary) -> f64;
    let tables: [(&str, Pick); 3] = [
        ("user CPU µs per operation (median)", |x| x.user_cpu_us_per_txn),
        (
            "user CPU µs per operation, pooled over the rounds (the kernel samples the user/system split by ticks)",
            |x| x.user_cpu_pooled_us_per_txn,
        ),
        (
            "user + system CPU µs per operation (median; counted exactly)",
            |x| x.cpu_us_per_txn,
        ),
    ];
    for (title, pick) in tables {
        println!();
        println!("== {title}, ratio to {baseline}; lower is better ==");
        for spec in specs {
            let mut line = format!("{:<44}", spec.label);
            for &op in ops {
                let cell = |engine: &str| {
                    s.iter()
                        .find(|x| x.engine == engine && x.workload == op.to_string())
                        .map(pick)
                };
                let txt = match (cell(&spec.label), cell(baseline)) {
                    (Some(v), Some(b)) if b > 0.0 => format!("{op} {v:.2} ({:.2}x)", v / b),
                    (Some(v), _) => format!("{op} {v:.2}"),
                    _ => format!("{op} -"),
                };
                line.push_str(&format!("  {txt:<22}"));
            }
            println!("{line}");
        }
    }
    if !instr.is_empty() {
        println!();
        println!("== instructions per operation (user space, child process difference) ==");
        for spec in specs {
            let mut line = format!("{:<44}", spec.label);
            for &op in ops {
                let n = instr
                    .iter()
                    .find(|(e, o, _)| *e == spec.label && *o == op)
                    .and_then(|x| x.2);
                let txt = match n {
                    Some(n) => format!("{op} {n:.0}"),
                    None => format!("{op} n/a"),
                };
                line.push_str(&format!("  {txt:<22}"));
            }
            println!("{line}");
        }
    }
}

/// Instructions per operation for every engine and operation.
fn count_all(
    c: Counter,
    specs: &[EngineSpec],
    ops: &[Operation],
    a: &CpuArgs,
    dir: &Path,
) -> Result<Vec<(String, Operation, Option<f64>)>, BenchError> {
    let exe = std::env::current_exe()
        .map_err(|e| BenchError::Io("locate the twinpage binary".into(), e))?;
    let mut out = Vec::new();
    for spec in specs {
        for &op in ops {
            let run = |measure: bool| -> Result<Option<u64>, BenchError> {
                let sub = dir.join("instructions");
                let _ = std::fs::remove_dir_all(&sub);
                std::fs::create_dir_all(&sub)
                    .map_err(|e| BenchError::Io(format!("mkdir {}", sub.display()), e))?;
                let mut cmd = match c {
                    Counter::Perf => {
                        let mut c = Command::new("perf");
                        c.args(["stat", "-x,", "-e", "instructions:u", "--"]);
                        c.arg(&exe);
                        c
                    }
                    _ => {
                        let mut c = Command::new("valgrind");
                        c.args(["--tool=callgrind", "--callgrind-out-file=/dev/null"]);
                        c.arg(&exe);
                        c
                    }
                };
                cmd.args(["bench", "cpu-child", "--engine", &spec.label, "--op"])
                    .arg(op.to_string())
                    .args(["--rows", &a.rows.to_string(), "--ops", &a.ops.to_string()])
                    .args(["--record-size", &a.record_size.to_string()])
                    .args(["--seed", &a.seed.to_string(), "--dir"])
                    .arg(&sub);
                if measure {
                    cmd.arg("--measure");
                }
                let o = cmd
                    .output()
                    .map_err(|e| BenchError::Io(format!("run {c:?} counter"), e))?;
                let _ = std::fs::remove_dir_all(&sub);
                if !o.status.success() {
                    return Err(BenchError::Msg(format!(
                        "instruction count of {} {op} failed: {}",
                        spec.label,
                        String::from_utf8_lossy(&o.stderr)
                            .lines()
                            .last()
                            .unwrap_or("")
                    )));
                }
                Ok(parse_count(c, &String::from_utf8_lossy(&o.stderr)))
            };
            let n = match (run(true)?, run(false)?) {
                (Some(with), Some(without)) => {
                    Some(with.saturating_sub(without) as f64 / a.ops.max(1) as f64)
                }
                _ => None,
            };
            eprintln!(
                "  instructions: {} {op}: {}",
                spec.label,
                n.map_or("n/a".into(), |n| format!("{n:.0} per op"))
            );
            out.push((spec.label.clone(), op, n));
        }
    }
    Ok(out)
}

/// The instruction total a counter printed, if it could count.
fn parse_count(c: Counter, stderr: &str) -> Option<u64> {
    match c {
        // CSV: "value,unit,event,..."; "<not supported>" without a PMU.
        Counter::Perf => stderr
            .lines()
            .find(|l| l.contains("instructions"))
            .and_then(|l| l.split(',').next())
            .and_then(|v| v.trim().parse().ok()),
        // "==PID== Collected : N"
        Counter::Callgrind => stderr
            .lines()
            .find_map(|l| l.split("Collected :").nth(1))
            .and_then(|v| v.trim().parse().ok()),
        Counter::None => None,
    }
}

/// The child: load, then (with `--measure`) run the operations.
pub fn child(a: &CpuChildArgs) -> Result<(), BenchError> {
    let engine_spec: EngineSpec = a.engine.parse()?;
    let w = Workload::generate(&spec(a.op, a.rows, a.ops, a.record_size, a.seed))?;
    let engine = engines::open(&engine_spec, &a.dir)?;
    engine.load(&w)?;
    if a.measure {
        let mut wk = engine.worker(&w)?;
        for txn in w.threads.iter().flatten() {
            let missed = wk.run(txn).map_err(|e| match e {
                engines::TxnError::Busy(m) | engines::TxnError::Conflict(m) => BenchError::Msg(m),
                engines::TxnError::Fatal(e) => e,
            })?;
            if missed != 0 {
                let op = &txn.ops[missed.trailing_zeros() as usize];
                return Err(BenchError::Msg(engines::mismatch(&a.engine, op)));
            }
        }
    }
    engine.close()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_output_parses() {
        assert_eq!(
            parse_count(Counter::Perf, "123456,,instructions:u,1000,100.00,,\n"),
            Some(123_456)
        );
        assert_eq!(
            parse_count(
                Counter::Perf,
                "<not supported>,,instructions:u,0,100.00,,\n"
            ),
            None
        );
        assert_eq!(
            parse_count(
                Counter::Callgrind,
                "==12== Events    : Ir\n==12== Collected : 98765\n"
            ),
            Some(98_765)
        );
    }

    #[test]
    fn default_engines_parse_and_include_the_baseline() {
        for memory in [false, true] {
            let list = default_engines(memory);
            assert!(list.iter().any(|e| e == sqlite_baseline(memory)));
            for e in &list {
                e.parse::<EngineSpec>().unwrap();
            }
        }
    }
}
