//! The figures of \[IPS\] (In-Page Shadowing and Two-Version Timestamp
//! Ordering, PVLDB 2022), measured on twinpage's modes.

use super::{f, pct, strings, Bar, Claim, Figure, FigureArgs, Panel};
use crate::bench::recovery::{self, CacheMode, RecoveryArgs, RecoveryResult};
use crate::bench::report::Summary;
use crate::bench::workload::{Operation, Workload, WorkloadSpec};
use crate::bench::{engines::EngineSpec, print_header, run_matrix, BenchError, Env};
use serde_json::json;

/// Fig. 5's engines: the paper's letter and our engine spec. `D` is DHL as
/// its paper runs it (metadata embedding: one page per commit); `D0` is
/// DHL writing page 1 at every commit, the same I/O as IPS; `I+e` is IPS
/// with metadata embedding, beyond the paper.
const FIG5: &[(&str, &str)] = &[
    ("S", "twinpage:shadow"),
    ("W-r", "twinpage:wal,journal_size_limit=524288"),
    ("W", "twinpage:wal"),
    ("D", "twinpage:dhl-cc"),
    ("D0", "twinpage:dhl-cc,embed=0"),
    ("O", "twinpage:off"),
    ("I", "twinpage:ips"),
    ("I+e", "twinpage:ips,embed=1"),
];

/// Mean per-transaction microseconds of one summary, median over its
/// rounds: (compute, write(), fsync()).
fn split(s: &Summary) -> (f64, f64, f64) {
    let n = s.txns.max(1) as f64;
    let med = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let w = med(s
        .rounds
        .iter()
        .map(|r| r.io.write_ns as f64 / n / 1e3)
        .collect());
    let y = med(s
        .rounds
        .iter()
        .map(|r| r.io.sync_ns as f64 / n / 1e3)
        .collect());
    let t = med(s
        .rounds
        .iter()
        .map(|r| 1e6 / r.txn_per_sec.max(1e-9))
        .collect());
    ((t - w - y).max(0.0), w, y)
}

/// \[IPS\] Fig. 5.
pub fn fig5(a: &FigureArgs) -> Result<Figure, BenchError> {
    let specs: Vec<EngineSpec> = FIG5
        .iter()
        .map(|(_, s)| s.parse())
        .collect::<Result<_, _>>()?;
    let txns = a.txns.unwrap_or(5000);
    let prefill = a.prefill.unwrap_or(5000);
    let mut workloads = Vec::new();
    for op in [Operation::Insert, Operation::Update, Operation::Delete] {
        workloads.push(Workload::generate(&WorkloadSpec {
            op,
            txns,
            prefill,
            record_size: 128,
            ..WorkloadSpec::default()
        })?);
    }
    let mut env = Env::new(&a.env)?;
    let desc = vec![(
        "workloads".to_string(),
        format!(
            "Mobibench insert, update, delete: {txns} auto-commit queries of 1 row after a \
             pre-fill of {prefill} rows, 128-byte records, 1 thread, uniform keys; {} round(s), \
             medians",
            a.repeat.max(1)
        ),
    )];
    print_header("twinpage bench figure ips-5", &mut env, &desc);
    let sums = run_matrix(&env, &specs, &workloads, a.repeat)?;
    let letter = |engine: &str| {
        FIG5.iter()
            .find(|(_, s)| *s == engine)
            .map_or("?", |(l, _)| l)
    };
    let find = |op: &str, l: &str| {
        sums.iter()
            .find(|s| s.workload == op && letter(&s.engine) == l)
            .map(split)
    };
    let mut rows = Vec::new();
    let mut panels = Vec::new();
    let mut data = Vec::new();
    for op in ["insert", "update", "delete"] {
        let mut bars = Vec::new();
        let ips_total = find(op, "I").map(|(c, w, y)| c + w + y).unwrap_or(0.0);
        for s in sums.iter().filter(|s| s.workload == op) {
            let (c, w, y) = split(s);
            let n = s.txns.max(1) as f64;
            let l = letter(&s.engine);
            rows.push(vec![
                op.to_string(),
                l.to_string(),
                s.engine.clone(),
                f(c, 1),
                f(w, 1),
                f(y, 1),
                f(c + w + y, 1),
                pct(c + w + y, ips_total),
                f(s.io.write_calls as f64 / n, 2),
                f(s.io.fdatasync as f64 / n, 2),
                f(s.db_bytes as f64 / 1024.0, 0),
            ]);
            bars.push(Bar {
                label: format!("{l} {}", s.engine.trim_start_matches("twinpage:")),
                segments: vec![
                    ("compute".into(), c),
                    ("write()".into(), w),
                    ("fsync()".into(), y),
                ],
            });
            data.push(json!({
                "op": op, "letter": l, "engine": s.engine,
                "compute_us": c, "write_us": w, "fsync_us": y, "total_us": c + w + y,
                "txn_per_sec": s.txn_per_sec,
                "writes_per_txn": s.io.write_calls as f64 / n,
                "fdatasync_per_txn": s.io.fdatasync as f64 / n,
                "db_bytes": s.db_bytes,
                "settings": s.settings.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            }));
        }
        panels.push(Panel {
            title: format!("{op}: µs per query"),
            unit: "µs".into(),
            bars,
        });
    }
    let total = |op: &str, l: &str| find(op, l).map(|(c, w, y)| c + w + y).unwrap_or(f64::NAN);
    let sync = |op: &str, l: &str| find(op, l).map(|t| t.2).unwrap_or(f64::NAN);
    let mut claims = Vec::new();
    for (op, paper) in [
        (
            "insert",
            "IPS 22% / 20% faster than DHL / OFF (inserts and deletes)",
        ),
        (
            "delete",
            "IPS 22% / 20% faster than DHL / OFF (inserts and deletes)",
        ),
        ("update", "IPS about 5% faster than DHL and OFF"),
    ] {
        let (i, d, d0, o) = (
            total(op, "I"),
            total(op, "D"),
            total(op, "D0"),
            total(op, "O"),
        );
        claims.push(Claim {
            what: format!("{op}: latency of IPS against DHL and OFF"),
            paper: paper.into(),
            ours: format!(
                "DHL (embedding) {} / DHL (page 1) {} / OFF {} slower than IPS ({} / {} / {} µs vs {} µs)",
                pct(d, i),
                pct(d0, i),
                pct(o, i),
                f(d, 0),
                f(d0, 0),
                f(o, 0),
                f(i, 0)
            ),
            holds: Some(d0 > i && o > i),
        });
    }
    let avg = |l: &str| {
        ["insert", "update", "delete"]
            .iter()
            .map(|op| sync(op, l))
            .sum::<f64>()
            / 3.0
    };
    claims.push(Claim {
        what: "fsync() time of IPS against OFF".into(),
        paper: "less than 1% higher (internal fragmentation)".into(),
        ours: format!(
            "{} ({} vs {} µs, mean of the three ops)",
            pct(avg("I"), avg("O")),
            f(avg("I"), 0),
            f(avg("O"), 0)
        ),
        holds: Some(avg("I") <= avg("O") * 1.05),
    });
    claims.push(Claim {
        what: "fsync() time of DHL against IPS".into(),
        paper: "about 10% higher (DHL's larger metadata: more splits)".into(),
        ours: format!(
            "DHL with page 1 {} (same pages written as IPS), DHL with embedding {} (one page fewer)",
            pct(avg("D0"), avg("I")),
            pct(avg("D"), avg("I"))
        ),
        holds: Some(avg("D0") > avg("I")),
    });
    let dio = (avg("D") + avg("O") + avg("I")) / 3.0;
    claims.push(Claim {
        what: "fsync() time of WAL (unlimited) against DHL, OFF, IPS".into(),
        paper: "28% higher (checkpoints)".into(),
        ours: format!(
            "{} ({} vs {} µs)",
            pct(avg("W"), dio),
            f(avg("W"), 0),
            f(dio, 0)
        ),
        holds: Some(avg("W") > dio),
    });
    let dash_worst = ["insert", "update", "delete"].iter().all(|op| {
        let s = total(op, "S");
        FIG5.iter().all(|(l, _)| *l == "S" || total(op, l) <= s)
    });
    claims.push(Claim {
        what: "DASH against the others".into(),
        paper: "the worst latency of all modes".into(),
        ours: format!(
            "S {} / {} / {} µs (insert / update / delete)",
            f(total("insert", "S"), 0),
            f(total("update", "S"), 0),
            f(total("delete", "S"), 0)
        ),
        holds: Some(dash_worst),
    });
    let mut notes = env.notes.clone();
    notes.push((
        "engines".into(),
        FIG5.iter()
            .map(|(l, s)| format!("{l} = {s}"))
            .collect::<Vec<_>>()
            .join("; "),
    ));
    notes.push((
        "beyond the paper".into(),
        "I+e (IPS with metadata embedding) and D0 (DHL without it) are not in the paper".into(),
    ));
    notes.push(("host load, end".into(), crate::bench::host_load()));
    Ok(Figure {
        name: "ips-5",
        title: "1-thread latency per query: compute, write(), fsync() ([IPS] Fig. 5)".into(),
        header: strings(&[
            "op",
            "",
            "engine",
            "compute µs",
            "write µs",
            "fsync µs",
            "total µs",
            "vs I",
            "writes/txn",
            "fdatasync/txn",
            "db KiB",
        ]),
        rows,
        claims,
        panels,
        data: json!(data),
        notes,
    })
}

/// \[IPS\] Fig. 7.
pub fn fig7(a: &FigureArgs) -> Result<Figure, BenchError> {
    let engines = [
        "sqlite:wal",
        "twinpage:wal",
        "twinpage:shadow",
        "twinpage:dhl-cc",
        "twinpage:ips",
    ];
    let records = vec![1u32, 2, 4, 8, 16];
    let warm = a.prefill.unwrap_or(1500);
    let args = RecoveryArgs {
        warm: vec![warm],
        records: records.clone(),
        record_size: 128,
        reps: a.repeat.max(1),
        seed: 1,
        engines: engines.iter().map(|s| s.to_string()).collect(),
        cache: CacheMode::Both,
        json: None,
        exe: None,
        torn: false,
        env: a.env.clone(),
    };
    let m = recovery::measure(&args)?;
    let ms = |r: &RecoveryResult, cold: bool| {
        RecoveryResult::median_ms(if cold { &r.cold } else { &r.warm_times })
    };
    let mut rows = Vec::new();
    for r in &m.results {
        rows.push(vec![
            r.engine.clone(),
            r.records.to_string(),
            r.killed().to_string(),
            r.outcome().to_string(),
            ms(r, false).map_or("-".into(), |v| f(v, 2)),
            ms(r, true).map_or("-".into(), |v| f(v, 2)),
            r.io.read_calls.to_string(),
            r.io.write_calls.to_string(),
            (r.io.fdatasync + r.io.fsync + r.io.dir_syncs).to_string(),
        ]);
    }
    let cold = m.results.iter().any(|r| !r.cold.is_empty());
    let panels: Vec<Panel> = records
        .iter()
        .map(|&n| Panel {
            title: format!("{n} interrupted insert(s): open + first query"),
            unit: "ms".into(),
            bars: m
                .results
                .iter()
                .filter(|r| r.records == n)
                .map(|r| Bar {
                    label: r.engine.clone(),
                    segments: vec![(
                        if cold { "cold" } else { "warm" }.into(),
                        ms(r, cold).unwrap_or(0.0),
                    )],
                })
                .collect(),
        })
        .collect();
    let mean = |engine: &str| {
        let v: Vec<f64> = m
            .results
            .iter()
            .filter(|r| r.engine == engine)
            .filter_map(|r| ms(r, false))
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let (wal, swal, dash, dhl, ips) = (
        mean("twinpage:wal"),
        mean("sqlite:wal"),
        mean("twinpage:shadow"),
        mean("twinpage:dhl-cc"),
        mean("twinpage:ips"),
    );
    let claims = vec![
        Claim {
            what: "WAL recovery against the in-page modes".into(),
            paper: "WAL about 16 ms, much longer than DHL and IPS (checkpoint at open)".into(),
            ours: format!(
                "warm, mean over 1-16 rows: SQLite WAL {} ms, twinpage WAL {} ms, DHL {} ms, IPS {} ms",
                f(swal, 2),
                f(wal, 2),
                f(dhl, 2),
                f(ips, 2)
            ),
            holds: Some(swal > ips && wal > ips),
        },
        Claim {
            what: "DASH against DHL and IPS".into(),
            paper: "longer, and growing with the transaction size".into(),
            ours: format!("DASH {} ms", f(dash, 2)),
            holds: Some(dash > ips && dash > dhl),
        },
        Claim {
            what: "IPS against DHL".into(),
            paper: "slightly faster (a bit flip instead of memcpy)".into(),
            ours: format!("{} ({} vs {} ms)", pct(ips, dhl), f(ips, 2), f(dhl, 2)),
            holds: Some(ips <= dhl),
        },
    ];
    let data: Vec<_> = m.results.iter().map(|r| r.json(128)).collect();
    let mut notes = m.env.notes.clone();
    notes.push((
        "workload".into(),
        format!(
            "{warm} rows of 128 bytes, then a transaction inserting 1-16 rows killed during its \
             commit; open + first point query timed; {} crash(es) per cell, median",
            a.repeat.max(1)
        ),
    ));
    if !m.cold_note.is_empty() {
        notes.push(("note".into(), m.cold_note.clone()));
    }
    notes.push(("host load, end".into(), crate::bench::host_load()));
    Ok(Figure {
        name: "ips-7",
        title: "recovery time after a crash in a transaction of 1-16 inserts ([IPS] Fig. 7)".into(),
        header: strings(&[
            "engine", "rows", "killed", "outcome", "warm ms", "cold ms", "reads", "writes", "syncs",
        ]),
        rows,
        claims,
        panels,
        data: json!(data),
        notes,
    })
}
