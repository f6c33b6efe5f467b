//! Results: the aligned table on stdout, the JSON file and the chart.
//! Field names of the JSON are documented in docs/BENCH.md.

use super::verify::Verified;
use super::{BenchError, RunResult};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::OnceLock;
use twinpage::storage::IoSnapshot;

/// Device figures of one engine on one workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockFigures {
    /// Write requests completed by the device per transaction.
    pub write_reqs_per_txn: f64,
    /// KiB written to the device per transaction.
    pub kib_per_txn: f64,
    /// Flush requests per transaction.
    pub flushes_per_txn: f64,
}

/// The figures of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    /// Transactions per second.
    pub txn_per_sec: f64,
    /// Median latency in µs.
    pub p50_us: f64,
    /// 99th percentile latency in µs.
    pub p99_us: f64,
    /// Device figures.
    pub block: Option<BlockFigures>,
    /// Syscall-level I/O.
    pub io: IoSnapshot,
    /// Attempts rolled back.
    pub aborts: u64,
    /// Where the time went, µs per transaction.
    pub breakdown: BreakdownUs,
}

/// Mean µs per committed transaction by what it was spent on (see
/// [`super::Breakdown`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BreakdownUs {
    /// Waiting for locks.
    pub lock_wait: f64,
    /// 2VTO's forced sleep before a replay.
    pub forced_sleep: f64,
    /// 2VTO's wait for the commit turn.
    pub commit_wait: f64,
    /// Rolled-back attempts and the backoff before their replays.
    pub replay: f64,
    /// The rest.
    pub compute: f64,
    /// `pwrite`.
    pub write: f64,
    /// `fdatasync`/`fsync`.
    pub sync: f64,
    /// The whole latency (the mean).
    pub total: f64,
}

impl BreakdownUs {
    fn of(r: &RunResult) -> BreakdownUs {
        let n = r.txns.max(1) as f64 * 1000.0;
        let b = &r.breakdown;
        BreakdownUs {
            lock_wait: b.lock_wait_ns as f64 / n,
            forced_sleep: b.forced_sleep_ns as f64 / n,
            commit_wait: b.commit_wait_ns as f64 / n,
            replay: b.replay_ns as f64 / n,
            compute: b.compute_ns() as f64 / n,
            write: b.write_ns as f64 / n,
            sync: b.sync_ns as f64 / n,
            total: b.total_ns as f64 / n,
        }
    }

    /// The fields by name, for the JSON and the tables.
    pub fn fields(&self) -> [(&'static str, f64); 8] {
        [
            ("lock_wait", self.lock_wait),
            ("forced_sleep", self.forced_sleep),
            ("commit_wait", self.commit_wait),
            ("replay", self.replay),
            ("compute", self.compute),
            ("write", self.write),
            ("sync", self.sync),
            ("total", self.total),
        ]
    }
}

/// One engine on one workload, summarised over its rounds: timings are
/// medians over the rounds, counts come from the first round.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Workload name.
    pub workload: String,
    /// The `--engine` string as given.
    pub engine: String,
    /// Settings in effect.
    pub settings: Vec<(String, String)>,
    /// Transactions per round.
    pub txns: u64,
    /// Operations per round.
    pub ops: u64,
    /// Median wall time of the measured phase, seconds.
    pub elapsed_s: f64,
    /// Median transactions per second.
    pub txn_per_sec: f64,
    /// Latency percentiles in µs (medians over rounds): p50, p90, p99,
    /// p99.9, max, mean.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Syscall-level I/O of the first round.
    pub io: IoSnapshot,
    /// Every round counted exactly the same I/O calls.
    pub io_identical: bool,
    /// Device figures (medians), when the device is visible.
    pub block: Option<BlockFigures>,
    /// Database file size at the end.
    pub db_bytes: u64,
    /// Other files at the end.
    pub aux_bytes: u64,
    /// User CPU µs per transaction (median).
    pub user_cpu_us_per_txn: f64,
    /// System CPU µs per transaction (median).
    pub sys_cpu_us_per_txn: f64,
    /// User CPU µs per transaction over all rounds together (the sum of
    /// each round's user CPU over the sum of their transactions). Where
    /// the kernel splits a thread's exactly counted run time between user
    /// and system by which one each 4 ms tick found running (Linux's tick
    /// accounting), one round of 100 ms has about 25 samples and its user
    /// CPU is off by 10-20% either way; pooling the rounds' samples
    /// narrows that with the square root of the rounds.
    pub user_cpu_pooled_us_per_txn: f64,
    /// User plus system CPU µs per transaction (median). Counted exactly
    /// (the scheduler's run time) even where the split is sampled.
    pub cpu_us_per_txn: f64,
    /// Aborted attempts (conflicts and busy locks), summed over rounds.
    pub aborts: u64,
    /// Of those, refused by the concurrency protocol, summed over rounds.
    pub conflicts: u64,
    /// Transactions that were retried, summed over rounds.
    pub retried_txns: u64,
    /// The most attempts one transaction lost, over all rounds.
    pub max_aborts_per_txn: u64,
    /// Where the time went (medians over rounds of the per-transaction
    /// means).
    pub breakdown: BreakdownUs,
    /// What the check after the first round compared.
    pub verified: Verified,
    /// The engine's integrity check after the first round.
    pub integrity: Option<String>,
    /// The protocol's counters, summed over rounds (`max_*`: the maximum).
    pub protocol: Vec<(String, u64)>,
    /// Per-round figures.
    pub rounds: Vec<Round>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn block_of(r: &RunResult) -> Option<BlockFigures> {
    r.block.map(|b| {
        let n = r.txns.max(1) as f64;
        BlockFigures {
            write_reqs_per_txn: b.writes as f64 / n,
            kib_per_txn: b.sectors_written as f64 / 2.0 / n,
            flushes_per_txn: b.flushes as f64 / n,
        }
    })
}

impl Summary {
    /// Summarise the rounds of one engine on one workload (at least one).
    pub fn from_runs(runs: Vec<RunResult>) -> Summary {
        let first = &runs[0];
        let n = first.txns.max(1) as f64;
        let m = |f: &dyn Fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
        let rounds: Vec<Round> = runs
            .iter()
            .map(|r| Round {
                txn_per_sec: r.txns as f64 / r.elapsed.as_secs_f64().max(1e-9),
                p50_us: us(r.latency.value_at_quantile(0.5)),
                p99_us: us(r.latency.value_at_quantile(0.99)),
                block: block_of(r),
                io: r.io,
                aborts: r.aborts,
                breakdown: BreakdownUs::of(r),
            })
            .collect();
        let mb = |f: &dyn Fn(&BreakdownUs) -> f64| {
            median(rounds.iter().map(|r| f(&r.breakdown)).collect())
        };
        let breakdown = BreakdownUs {
            lock_wait: mb(&|b| b.lock_wait),
            forced_sleep: mb(&|b| b.forced_sleep),
            commit_wait: mb(&|b| b.commit_wait),
            replay: mb(&|b| b.replay),
            compute: mb(&|b| b.compute),
            write: mb(&|b| b.write),
            sync: mb(&|b| b.sync),
            total: mb(&|b| b.total),
        };
        let mut protocol: Vec<(String, u64)> = Vec::new();
        for (k, v) in runs.iter().flat_map(|r| &r.protocol) {
            match protocol.iter_mut().find(|(a, _)| a == k) {
                Some(e) if k.starts_with("max_") => e.1 = e.1.max(*v),
                Some(e) => e.1 += v,
                None => protocol.push((k.clone(), *v)),
            }
        }
        let block = if runs.iter().all(|r| r.block.is_some()) {
            let b: Vec<BlockFigures> = runs.iter().filter_map(block_of).collect();
            Some(BlockFigures {
                write_reqs_per_txn: median(b.iter().map(|x| x.write_reqs_per_txn).collect()),
                kib_per_txn: median(b.iter().map(|x| x.kib_per_txn).collect()),
                flushes_per_txn: median(b.iter().map(|x| x.flushes_per_txn).collect()),
            })
        } else {
            None
        };
        Summary {
            workload: first.workload.clone(),
            engine: first.engine.clone(),
            settings: first.settings.clone(),
            txns: first.txns,
            ops: first.ops,
            elapsed_s: m(&|r| r.elapsed.as_secs_f64()),
            txn_per_sec: median(rounds.iter().map(|r| r.txn_per_sec).collect()),
            p50_us: m(&|r| us(r.latency.value_at_quantile(0.5))),
            p90_us: m(&|r| us(r.latency.value_at_quantile(0.9))),
            p99_us: m(&|r| us(r.latency.value_at_quantile(0.99))),
            p999_us: m(&|r| us(r.latency.value_at_quantile(0.999))),
            max_us: m(&|r| us(r.latency.max())),
            mean_us: m(&|r| r.latency.mean() / 1000.0),
            io: first.io,
            io_identical: runs.iter().all(|r| r.io.counts() == first.io.counts()),
            block,
            db_bytes: first.db_bytes,
            aux_bytes: first.aux_bytes,
            user_cpu_us_per_txn: m(&|r| r.user_cpu.as_secs_f64() * 1e6 / n),
            sys_cpu_us_per_txn: m(&|r| r.sys_cpu.as_secs_f64() * 1e6 / n),
            user_cpu_pooled_us_per_txn: runs.iter().map(|r| r.user_cpu.as_secs_f64()).sum::<f64>()
                * 1e6
                / (n * runs.len().max(1) as f64),
            cpu_us_per_txn: m(&|r| (r.user_cpu + r.sys_cpu).as_secs_f64() * 1e6 / n),
            aborts: runs.iter().map(|r| r.aborts).sum(),
            conflicts: runs.iter().map(|r| r.conflicts).sum(),
            retried_txns: runs.iter().map(|r| r.retried_txns).sum(),
            max_aborts_per_txn: runs.iter().map(|r| r.max_aborts_per_txn).max().unwrap_or(0),
            breakdown,
            verified: first.verified.clone(),
            integrity: first.integrity.clone(),
            protocol,
            rounds,
        }
    }

    /// Aborted attempts per committed transaction, over every round.
    pub fn aborts_per_txn(&self) -> f64 {
        self.aborts as f64 / (self.txns.max(1) as f64 * self.rounds.len().max(1) as f64)
    }

    /// Transactions that needed a retry, as a fraction, over every round.
    pub fn retried_ratio(&self) -> f64 {
        self.retried_txns as f64 / (self.txns.max(1) as f64 * self.rounds.len().max(1) as f64)
    }

    fn per_txn(&self, v: u64) -> f64 {
        v as f64 / self.txns.max(1) as f64
    }
}

/// One line per finished run, for stderr.
pub fn one_line(r: &RunResult) -> String {
    let n = r.txns.max(1) as f64;
    let mut s = format!(
        "  done: {:<7} {:<28} {:>9.0} txn/s  p50 {:>8.1} us  writes/txn {:>5.2}  syncs/txn {:>5.2}",
        r.workload,
        r.engine,
        r.txns as f64 / r.elapsed.as_secs_f64().max(1e-9),
        us(r.latency.value_at_quantile(0.5)),
        r.io.write_calls as f64 / n,
        (r.io.fdatasync + r.io.fsync) as f64 / n,
    );
    if let Some(b) = block_of(r) {
        s += &format!(
            "  dev {:>5.2} req {:>6.2} KiB",
            b.write_reqs_per_txn, b.kib_per_txn
        );
    }
    s
}

fn ratio(v: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 => format!("{:.2}x", v / b),
        _ => "-".into(),
    }
}

/// Device KiB per transaction relative to the baseline's ("-" without both).
fn kib_ratio(b: Option<BlockFigures>, base: Option<BlockFigures>) -> String {
    match (b, base) {
        (Some(b), Some(bb)) => ratio(b.kib_per_txn, Some(bb.kib_per_txn)),
        _ => "-".into(),
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) => format!("{x:.prec$}"),
        None => "n/a".into(),
    }
}

/// Print the two tables (time, I/O) of every workload.
pub fn print_tables(s: &[Summary], baseline: &str) {
    let mut workloads: Vec<&str> = Vec::new();
    for x in s {
        if !workloads.contains(&x.workload.as_str()) {
            workloads.push(&x.workload);
        }
    }
    let w = s.iter().map(|x| x.engine.len()).max().unwrap_or(6).max(6);
    for wl in workloads {
        let rows: Vec<&Summary> = s.iter().filter(|x| x.workload == wl).collect();
        let base = rows.iter().find(|x| x.engine == baseline);
        let txns = rows.first().map(|r| r.txns).unwrap_or(0);
        println!();
        println!(
            "== {wl}: {txns} transactions; ratios relative to {} ==",
            if base.is_some() {
                baseline
            } else {
                "(baseline not run)"
            }
        );
        println!(
            "{:<w$} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7}",
            "engine",
            "txn/s",
            "ratio",
            "p50 us",
            "p90 us",
            "p99 us",
            "p99.9 us",
            "max us",
            "usr us",
            "sys us",
            "aborts"
        );
        for r in &rows {
            println!(
                "{:<w$} {:>9.0} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>8.1} {:>7}",
                r.engine,
                r.txn_per_sec,
                ratio(r.txn_per_sec, base.map(|b| b.txn_per_sec)),
                r.p50_us,
                r.p90_us,
                r.p99_us,
                r.p999_us,
                r.max_us,
                r.user_cpu_us_per_txn,
                r.sys_cpu_us_per_txn,
                r.aborts
            );
        }
        println!(
            "{:<w$} {:>6} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} | {:>7} {:>8} {:>7} {:>6} | {:>8} {:>8}",
            "per txn",
            "writes",
            "KiB",
            "fdsync",
            "fsync",
            "unlink",
            "rename",
            "ftrunc",
            "dirsyn",
            "dev req",
            "dev KiB",
            "ratio",
            "flush",
            "db KiB",
            "aux KiB"
        );
        for r in &rows {
            let b = r.block;
            println!(
                "{:<w$} {:>6.2} {:>8.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} {:>6.2} | {:>7} {:>8} {:>7} {:>6} | {:>8.0} {:>8.0}{}",
                r.engine,
                r.per_txn(r.io.write_calls),
                r.per_txn(r.io.bytes_written) / 1024.0,
                r.per_txn(r.io.fdatasync),
                r.per_txn(r.io.fsync),
                r.per_txn(r.io.removes),
                r.per_txn(r.io.renames),
                r.per_txn(r.io.truncates),
                r.per_txn(r.io.dir_syncs),
                opt(b.map(|b| b.write_reqs_per_txn), 2),
                opt(b.map(|b| b.kib_per_txn), 2),
                kib_ratio(b, base.and_then(|x| x.block)),
                opt(b.map(|b| b.flushes_per_txn), 2),
                r.db_bytes as f64 / 1024.0,
                r.aux_bytes as f64 / 1024.0,
                if r.io_identical { "" } else { "  (I/O counts differed between rounds)" }
            );
        }
        println!(
            "{:<w$} {:>7} {:>5} {:>7} {:>6} | {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} = {:>8}",
            "per committed txn",
            "aborts",
            "max",
            "retried",
            "fdsync",
            "lock us",
            "sleep us",
            "turn us",
            "replay",
            "compute",
            "write us",
            "sync us",
            "mean us"
        );
        for r in &rows {
            let b = &r.breakdown;
            println!(
                "{:<w$} {:>7.4} {:>5} {:>6.2}% {:>6.2} | {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} = {:>8.1}",
                r.engine,
                r.aborts_per_txn(),
                r.max_aborts_per_txn,
                r.retried_ratio() * 100.0,
                r.per_txn(r.io.fdatasync + r.io.fsync),
                b.lock_wait,
                b.forced_sleep,
                b.commit_wait,
                b.replay,
                b.compute,
                b.write,
                b.sync,
                b.total,
            );
        }
    }
}

/// The tables as Markdown (for the README), one per workload.
pub fn markdown(s: &[Summary], baseline: &str, notes: &[(String, String)]) -> String {
    let mut out = String::new();
    for (k, v) in notes {
        out += &format!("- {k}: {v}\n");
    }
    let mut workloads: Vec<&str> = Vec::new();
    for x in s {
        if !workloads.contains(&x.workload.as_str()) {
            workloads.push(&x.workload);
        }
    }
    for wl in workloads {
        let rows: Vec<&Summary> = s.iter().filter(|x| x.workload == wl).collect();
        let base = rows.iter().find(|x| x.engine == baseline);
        let (txns, rounds) = rows
            .first()
            .map(|r| (r.txns, r.rounds.len()))
            .unwrap_or((0, 0));
        out += &format!(
            "\n**{wl}**, {txns} transactions, {rounds} round(s); ratios to `{baseline}`\n\n"
        );
        out += "| engine | txn/s | ratio | p50 µs | p99 µs | writes/txn | KiB/txn | fdatasync/txn | dir syncs/txn | dev reqs/txn | dev KiB/txn | dev KiB ratio |\n";
        out += "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
        for r in &rows {
            let b = r.block;
            out += &format!(
                "| `{}` | {:.0} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} |\n",
                r.engine,
                r.txn_per_sec,
                ratio(r.txn_per_sec, base.map(|b| b.txn_per_sec)),
                r.p50_us,
                r.p99_us,
                r.per_txn(r.io.write_calls),
                r.per_txn(r.io.bytes_written) / 1024.0,
                r.per_txn(r.io.fdatasync + r.io.fsync),
                r.per_txn(r.io.dir_syncs),
                opt(b.map(|b| b.write_reqs_per_txn), 2),
                opt(b.map(|b| b.kib_per_txn), 2),
                kib_ratio(b, base.and_then(|x| x.block)),
            );
        }
    }
    out
}

/// Print each engine's settings once.
pub fn print_settings(s: &[Summary]) {
    println!();
    println!("== engine settings ==");
    let mut seen: Vec<&str> = Vec::new();
    for x in s {
        if seen.contains(&x.engine.as_str()) {
            continue;
        }
        seen.push(&x.engine);
        let kv: Vec<String> = x.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("{}: {}", x.engine, kv.join(", "));
    }
    println!();
    println!(
        "== after each run: contents checked against the workload's model, integrity check =="
    );
    for x in s {
        println!(
            "{} {}: {}, rows {:?}{}, integrity {}",
            x.workload,
            x.engine,
            x.verified.how,
            x.verified.rows,
            if x.verified.misses > 0 {
                format!(", {} operation(s) missed their row", x.verified.misses)
            } else {
                String::new()
            },
            x.integrity.as_deref().unwrap_or("n/a (no check)")
        );
    }
}

fn num(v: f64) -> Value {
    // Round to keep the file readable; NaN/inf become null.
    if v.is_finite() {
        json!((v * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

fn breakdown_json(b: &BreakdownUs) -> Value {
    Value::Object(
        b.fields()
            .iter()
            .map(|(k, v)| (k.to_string(), num(*v)))
            .collect(),
    )
}

fn io_json(io: &IoSnapshot) -> Value {
    json!({
        "write_calls": io.write_calls,
        "bytes_written": io.bytes_written,
        "read_calls": io.read_calls,
        "bytes_read": io.bytes_read,
        "fdatasync": io.fdatasync,
        "fsync": io.fsync,
        "renames": io.renames,
        "removes": io.removes,
        "truncates": io.truncates,
        "dir_syncs": io.dir_syncs,
        "write_ns": io.write_ns,
        "sync_ns": io.sync_ns,
    })
}

/// The JSON object of one summary (field names documented in
/// docs/BENCH.md).
pub fn summary_json(x: &Summary, base: Option<&Summary>) -> Value {
    let b = x.block;
    let settings: Map<String, Value> = x
        .settings
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let rounds: Vec<Value> = x
        .rounds
        .iter()
        .map(|r| {
            json!({
                "txn_per_sec": num(r.txn_per_sec),
                "p50_us": num(r.p50_us),
                "p99_us": num(r.p99_us),
                "block_write_reqs_per_txn": r.block.map(|b| num(b.write_reqs_per_txn)),
                "block_kib_per_txn": r.block.map(|b| num(b.kib_per_txn)),
                "aborts": r.aborts,
                "latency_breakdown_us": breakdown_json(&r.breakdown),
                "io_totals": io_json(&r.io),
            })
        })
        .collect();
    let block_ratio = match (b, base.and_then(|x| x.block)) {
        (Some(b), Some(bb)) if bb.kib_per_txn > 0.0 => num(b.kib_per_txn / bb.kib_per_txn),
        _ => Value::Null,
    };
    let opt = |v: Option<f64>| v.map(num).unwrap_or(Value::Null);
    let fields: Vec<(&str, Value)> = vec![
        ("workload", json!(x.workload)),
        ("engine", json!(x.engine)),
        ("txns", json!(x.txns)),
        ("ops", json!(x.ops)),
        ("rounds", json!(x.rounds.len())),
        ("elapsed_s", num(x.elapsed_s)),
        ("txn_per_sec", num(x.txn_per_sec)),
        (
            "txn_per_sec_ratio",
            opt(base.map(|b| x.txn_per_sec / b.txn_per_sec)),
        ),
        ("p50_us", num(x.p50_us)),
        ("p90_us", num(x.p90_us)),
        ("p99_us", num(x.p99_us)),
        ("p999_us", num(x.p999_us)),
        ("max_us", num(x.max_us)),
        ("mean_us", num(x.mean_us)),
        ("writes_per_txn", num(x.per_txn(x.io.write_calls))),
        ("bytes_written_per_txn", num(x.per_txn(x.io.bytes_written))),
        ("reads_per_txn", num(x.per_txn(x.io.read_calls))),
        ("bytes_read_per_txn", num(x.per_txn(x.io.bytes_read))),
        ("fdatasync_per_txn", num(x.per_txn(x.io.fdatasync))),
        ("fsync_per_txn", num(x.per_txn(x.io.fsync))),
        ("renames_per_txn", num(x.per_txn(x.io.renames))),
        ("removes_per_txn", num(x.per_txn(x.io.removes))),
        ("truncates_per_txn", num(x.per_txn(x.io.truncates))),
        ("dir_syncs_per_txn", num(x.per_txn(x.io.dir_syncs))),
        (
            "block_write_reqs_per_txn",
            opt(b.map(|b| b.write_reqs_per_txn)),
        ),
        ("block_kib_per_txn", opt(b.map(|b| b.kib_per_txn))),
        ("block_flushes_per_txn", opt(b.map(|b| b.flushes_per_txn))),
        ("block_kib_ratio", block_ratio),
        ("db_bytes", json!(x.db_bytes)),
        ("aux_bytes", json!(x.aux_bytes)),
        ("user_cpu_us_per_txn", num(x.user_cpu_us_per_txn)),
        ("sys_cpu_us_per_txn", num(x.sys_cpu_us_per_txn)),
        (
            "user_cpu_pooled_us_per_txn",
            num(x.user_cpu_pooled_us_per_txn),
        ),
        ("cpu_us_per_txn", num(x.cpu_us_per_txn)),
        ("aborts", json!(x.aborts)),
        ("aborts_per_txn", num(x.aborts_per_txn())),
        ("max_aborts_per_txn", json!(x.max_aborts_per_txn)),
        ("conflict_aborts", json!(x.conflicts)),
        ("busy_aborts", json!(x.aborts - x.conflicts)),
        ("retried_txns", json!(x.retried_txns)),
        ("retried_ratio", num(x.retried_ratio())),
        ("latency_breakdown_us", breakdown_json(&x.breakdown)),
        (
            "protocol_counters",
            Value::Object(
                x.protocol
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect(),
            ),
        ),
        (
            "verified",
            json!({
                "how": x.verified.how,
                "rows": x.verified.rows,
                "missed_ops": x.verified.misses,
                "integrity": x.integrity,
            }),
        ),
        ("io_identical_across_rounds", json!(x.io_identical)),
        ("io_totals", io_json(&x.io)),
        ("settings", Value::Object(settings)),
        ("per_round", Value::Array(rounds)),
    ];
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// Write every figure to `path`.
pub fn write_json(
    path: &Path,
    s: &[Summary],
    baseline: &str,
    settings: Value,
    notes: &[(String, String)],
) -> Result<(), BenchError> {
    let runs: Vec<Value> = s
        .iter()
        .map(|x| {
            let base = s
                .iter()
                .find(|b| b.workload == x.workload && b.engine == baseline);
            summary_json(x, base)
        })
        .collect();
    let env: Map<String, Value> = notes
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let doc = json!({
        "tool": "twinpage bench",
        "version": env!("CARGO_PKG_VERSION"),
        "baseline": baseline,
        "settings": settings,
        "environment": env,
        "sqlite_sync_call": if super::engines::vfs::SYNC_IS_FDATASYNC { "fdatasync" } else { "fsync" },
        // Everything the counting VFS saw since the process started (set-up,
        // pre-fill and close included), for cross-checks with strace -c.
        "sqlite_vfs_process_totals": io_json(&super::engines::vfs::snapshot()),
        "sqlite_xsync_flags_process_totals": {
            "sync_full": super::engines::vfs::sync_flag_counts().0,
            "sync_dataonly": super::engines::vfs::sync_flag_counts().1,
        },
        "runs": runs,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| BenchError::Msg(e.to_string()))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| BenchError::Io(format!("write {}", path.display()), e))
}

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Register a TrueType font as "sans-serif" for plotters (once).
pub(crate) fn load_font(explicit: Option<&Path>) -> Result<(), BenchError> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = std::env::var_os("TWINPAGE_FONT").map(std::path::PathBuf::from);
        let mut tried = Vec::new();
        let candidates = explicit
            .map(Path::to_path_buf)
            .into_iter()
            .chain(env)
            .chain(FONT_CANDIDATES.iter().map(std::path::PathBuf::from));
        for p in candidates {
            if let Ok(bytes) = std::fs::read(&p) {
                // plotters keeps a 'static reference; the chart is drawn once.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
                {
                    return Ok(());
                }
            }
            tried.push(p.display().to_string());
        }
        Err(format!(
            "no usable TrueType font for the chart (tried {}); install fonts-dejavu-core or pass --font FILE.ttf",
            tried.join(", ")
        ))
    })
    .clone()
    .map_err(BenchError::Msg)
}

struct Panel {
    title: String,
    unit: &'static str,
    bars: Vec<(String, f64)>,
}

fn panels(s: &[Summary]) -> Vec<Panel> {
    let mut workloads: Vec<&str> = Vec::new();
    for x in s {
        if !workloads.contains(&x.workload.as_str()) {
            workloads.push(&x.workload);
        }
    }
    let mut out = Vec::new();
    for wl in workloads {
        let rows: Vec<&Summary> = s.iter().filter(|x| x.workload == wl).collect();
        out.push(Panel {
            title: format!("{wl}: transactions/s"),
            unit: "txn/s",
            bars: rows
                .iter()
                .map(|r| (r.engine.clone(), r.txn_per_sec))
                .collect(),
        });
        let have_block = rows.iter().all(|r| r.block.is_some());
        out.push(Panel {
            title: if have_block {
                format!("{wl}: device KiB written per txn")
            } else {
                format!("{wl}: KiB passed to pwrite per txn")
            },
            unit: "KiB",
            bars: rows
                .iter()
                .map(|r| {
                    let v = match r.block {
                        Some(b) if have_block => b.kib_per_txn,
                        _ => r.per_txn(r.io.bytes_written) / 1024.0,
                    };
                    (r.engine.clone(), v)
                })
                .collect(),
        });
        out.push(Panel {
            title: format!("{wl}: syncs per txn (file + directory)"),
            unit: "syncs",
            bars: rows
                .iter()
                .map(|r| {
                    (
                        r.engine.clone(),
                        r.per_txn(r.io.fdatasync + r.io.fsync + r.io.dir_syncs),
                    )
                })
                .collect(),
        });
    }
    out
}

fn color(engine: &str) -> RGBColor {
    if engine.starts_with("twinpage") {
        RGBColor(31, 119, 180)
    } else if engine.starts_with("sqlite") {
        RGBColor(214, 39, 40)
    } else {
        RGBColor(110, 110, 110)
    }
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, s: &[Summary]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let root = root
        .titled(
            "twinpage bench: throughput and I/O per transaction (blue twinpage, red SQLite, grey floor)",
            ("sans-serif", 20),
        )
        .map_err(e)?;
    let ps = panels(s);
    let rows = ps.len().div_ceil(3);
    let areas = root.split_evenly((rows, 3));
    for (p, area) in ps.iter().zip(areas.iter()) {
        let n = p.bars.len();
        let max = p.bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.2;
        let names: Vec<String> = p.bars.iter().map(|b| b.0.clone()).collect();
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(22)
            .y_label_area_size(120)
            .build_cartesian_2d(0.0..max, (0..n).into_segmented())
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            // The first engine goes on top.
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if *i < n => names[n - 1 - *i].clone(),
                _ => String::new(),
            })
            .x_labels(5)
            .x_label_formatter(&|v| {
                if max >= 10.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.1}")
                }
            })
            .x_desc(p.unit)
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(e)?;
        chart
            .draw_series(p.bars.iter().enumerate().map(|(i, (name, v))| {
                let y = n - 1 - i;
                let mut r = Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(y)),
                        (*v, SegmentValue::Exact(y + 1)),
                    ],
                    color(name).filled(),
                );
                r.set_margin(2, 2, 0, 0);
                r
            }))
            .map_err(e)?;
        chart
            .draw_series(p.bars.iter().enumerate().map(|(i, (_, v))| {
                let label = if *v >= 100.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.2}")
                };
                Text::new(
                    format!(" {label}"),
                    (*v, SegmentValue::CenterOf(n - 1 - i)),
                    ("sans-serif", 10),
                )
            }))
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Draw the chart to `path` (.svg, or .png through the bitmap backend).
pub fn chart(path: &Path, s: &[Summary], font: Option<&Path>) -> Result<(), BenchError> {
    load_font(font)?;
    let rows = panels(s).len().div_ceil(3) as u32;
    let engines = s
        .iter()
        .filter(|x| s.first().is_some_and(|f| f.workload == x.workload))
        .count() as u32;
    let size = (1500, 40 + rows * (60 + 22 * engines.max(3)));
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let r = match ext.as_str() {
        "svg" => draw(SVGBackend::new(path, size).into_drawing_area(), s),
        "png" => draw(BitMapBackend::new(path, size).into_drawing_area(), s),
        _ => {
            return Err(BenchError::Msg(format!(
                "--chart {}: the file name must end in .svg or .png",
                path.display()
            )))
        }
    };
    r.map_err(|e| BenchError::Msg(format!("chart {}: {e}", path.display())))
}
