//! The concurrency figures of \[IPS\] §5.3 (Fig. 8-11): the multi-threaded
//! Mobibench with shared keys, 128-byte records and 5,000 pre-filled rows,
//! on SQLite WAL (the paper's Baseline), twinpage's BEGIN CONCURRENT
//! (BeginConc), IPS+2VTO and DHL+2VTO.

use super::{f, pct, strings, Bar, Claim, Figure, FigureArgs, Panel};
use crate::bench::engines::EngineSpec;
use crate::bench::report::Summary;
use crate::bench::workload::{
    KeyDist, KeySharing, Operation, PrefillOrder, Workload, WorkloadSpec,
};
use crate::bench::{host_load, print_header, run_matrix, BenchError, Env};
use serde_json::{json, Value};

/// The paper's WAL settings for its concurrency runs (§5.3): a checkpoint
/// every 100 pages and a 512 KB journal size limit.
const PAPER_WAL: &str = "wal_autocheckpoint=100,journal_size_limit=524288";

/// The paper's names and our engines (Fig. 8-10). `Baseline` is SQLite
/// WAL with one private-cache connection per thread (it waits for the
/// write lock in its busy handler); `Baseline-sc` is the paper's Baseline
/// configuration, shared-cache mode, where a writer that finds the table
/// locked fails at once (`SQLITE_LOCKED`) and is replayed.
fn engines() -> Vec<(&'static str, String)> {
    vec![
        ("Baseline", format!("sqlite:wal,{PAPER_WAL}")),
        (
            "Baseline-sc",
            format!("sqlite:wal,cache=shared,{PAPER_WAL}"),
        ),
        (
            "BeginConc",
            format!("twinpage:wal,concurrency=begin-concurrent,{PAPER_WAL}"),
        ),
        ("IPS+2VTO", "twinpage:ips,concurrency=2vto".into()),
        ("DHL+2VTO", "twinpage:dhl-cc,concurrency=2vto".into()),
    ]
}

/// Fig. 11's engines: IPS+2VTO with and without forced sleep (NS) and
/// with FUW, DHL+2VTO and BeginConc.
fn engines11() -> Vec<(&'static str, String)> {
    vec![
        ("IPS+2VTO", "twinpage:ips,concurrency=2vto".into()),
        ("NS", "twinpage:ips,concurrency=2vto-ns".into()),
        ("FUW", "twinpage:ips,concurrency=2vto-fuw".into()),
        ("DHL+2VTO", "twinpage:dhl-cc,concurrency=2vto".into()),
        (
            "BeginConc",
            format!("twinpage:wal,concurrency=begin-concurrent,{PAPER_WAL}"),
        ),
    ]
}

/// One cell of a concurrency figure.
struct Cell {
    threads: u32,
    write_ratio: f64,
    ops_per_txn: u32,
    zipf_s: f64,
}

/// The figure's measurements: one summary per (cell, engine), in the
/// order `cells` × `engines`.
struct Measured {
    env_notes: Vec<(String, String)>,
    names: Vec<(&'static str, String)>,
    cells: Vec<Cell>,
    sums: Vec<Summary>,
    per_thread: u64,
    prefill: u64,
    prefill_order: PrefillOrder,
}

impl Measured {
    fn get(&self, cell: usize, name: &str) -> Option<&Summary> {
        let e = self.names.iter().position(|(n, _)| *n == name)?;
        self.sums.get(cell * self.names.len() + e)
    }

    fn cell(&self, pred: impl Fn(&Cell) -> bool) -> Option<usize> {
        self.cells.iter().position(pred)
    }

    fn data(&self) -> Value {
        let mut out = Vec::new();
        for (i, c) in self.cells.iter().enumerate() {
            for (name, spec) in &self.names {
                if let Some(s) = self.get(i, name) {
                    out.push(json!({
                        "engine_name": name,
                        "engine": spec,
                        "threads": c.threads,
                        "write_ratio": c.write_ratio,
                        "ops_per_txn": c.ops_per_txn,
                        "zipf_s": c.zipf_s,
                        "txns": s.txns,
                        "txn_per_sec": s.txn_per_sec,
                        "p50_us": s.p50_us,
                        "p99_us": s.p99_us,
                        "p999_us": s.p999_us,
                        "mean_us": s.mean_us,
                        "aborts_per_txn": s.aborts_per_txn(),
                        "max_aborts_per_txn": s.max_aborts_per_txn,
                        "retried_ratio": s.retried_ratio(),
                        "fdatasync_per_txn": s.io.fdatasync as f64 / s.txns.max(1) as f64,
                        "latency_breakdown_us": s.breakdown.fields().iter()
                            .map(|(k, v)| (k.to_string(), json!(v)))
                            .collect::<serde_json::Map<_, _>>(),
                        "protocol_counters": s.protocol.iter()
                            .map(|(k, v)| (k.clone(), json!(v)))
                            .collect::<serde_json::Map<_, _>>(),
                        "verified": s.verified.how,
                        "db_bytes": s.db_bytes,
                        "aux_bytes": s.aux_bytes,
                        "rounds": s.rounds.iter().map(|r| r.txn_per_sec).collect::<Vec<_>>(),
                    }));
                }
            }
        }
        json!(out)
    }

    fn notes(&self, extra: &[(&str, String)]) -> Vec<(String, String)> {
        let mut n = self.env_notes.clone();
        n.push((
            "workload".into(),
            format!(
                "[IPS] §5.3's Mobibench: {} rows of 128-byte records pre-filled ({} order), \
                 then {} transactions per thread, every thread on the same rows; writes are \
                 UPDATEs, the rest point SELECTs",
                self.prefill,
                match self.prefill_order {
                    PrefillOrder::Sequential => "ascending",
                    PrefillOrder::Random => "random",
                },
                self.per_thread
            ),
        ));
        n.push((
            "engines".into(),
            self.names
                .iter()
                .map(|(l, s)| format!("{l} = {s}"))
                .collect::<Vec<_>>()
                .join("; "),
        ));
        n.push((
            "retries".into(),
            "a transaction refused by the protocol (a conflict) or by a lock that stayed busy \
             is rolled back and replayed on its thread after a backoff of 20 µs doubling to \
             5 ms (as Db::write); SQLite waits in its busy handler (busy_timeout 5000 ms) first"
                .into(),
        ));
        for (k, v) in extra {
            n.push((k.to_string(), v.clone()));
        }
        n.push(("host load, end".into(), host_load()));
        n
    }
}

/// Run every cell on every engine.
fn measure(
    a: &FigureArgs,
    title: &str,
    names: Vec<(&'static str, String)>,
    cells: Vec<Cell>,
) -> Result<Measured, BenchError> {
    let specs: Vec<EngineSpec> = names
        .iter()
        .map(|(_, s)| s.parse())
        .collect::<Result<_, _>>()?;
    let per_thread = a.txns.unwrap_or(5000);
    let prefill = a.prefill.unwrap_or(5000);
    let prefill_order = a.prefill_order.unwrap_or(PrefillOrder::Random);
    let mut workloads = Vec::new();
    for c in &cells {
        workloads.push(Workload::generate(&WorkloadSpec {
            op: Operation::SelectUpdate,
            write_ratio: c.write_ratio,
            txns: per_thread * u64::from(c.threads),
            prefill,
            ops_per_txn: c.ops_per_txn,
            record_size: 128,
            dist: if c.zipf_s > 0.0 {
                KeyDist::Zipf
            } else {
                KeyDist::Uniform
            },
            zipf_s: c.zipf_s,
            tables: 1,
            threads: c.threads,
            keys: KeySharing::Shared,
            prefill_order,
            seed: 1,
        })?);
    }
    let mut env = Env::new(&a.env)?;
    let desc = vec![(
        "cells".to_string(),
        format!(
            "{} workload(s) x {} engine(s), {} round(s) each, round robin; timings are medians",
            workloads.len(),
            specs.len(),
            a.repeat.max(1)
        ),
    )];
    print_header(title, &mut env, &desc);
    let sums = run_matrix(&env, &specs, &workloads, a.repeat)?;
    Ok(Measured {
        env_notes: env.notes.clone(),
        names,
        cells,
        sums,
        per_thread,
        prefill,
        prefill_order,
    })
}

fn threads_or(a: &FigureArgs, default: &[u32]) -> Vec<u32> {
    a.threads.clone().unwrap_or_else(|| default.to_vec())
}

/// The throughput of `name` at the cell `pred` picks.
fn tput(m: &Measured, name: &str, pred: impl Fn(&Cell) -> bool) -> Option<f64> {
    m.cell(pred)
        .and_then(|i| m.get(i, name))
        .map(|s| s.txn_per_sec)
}

fn opt(v: Option<f64>, p: usize) -> String {
    v.map_or("-".into(), |x| f(x, p))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// \[IPS\] Fig. 8: throughput for 1-4 threads at 10, 20 and 50% writes.
pub fn fig8(a: &FigureArgs) -> Result<Figure, BenchError> {
    let threads = threads_or(a, &[1, 2, 3, 4]);
    let ratios = [0.1, 0.2, 0.5];
    let mut cells = Vec::new();
    for &w in &ratios {
        for &t in &threads {
            cells.push(Cell {
                threads: t,
                write_ratio: w,
                ops_per_txn: 1,
                zipf_s: 0.0,
            });
        }
    }
    let m = measure(a, "twinpage bench figure ips-8", engines(), cells)?;
    let tmin = threads.iter().copied().min().unwrap_or(1);
    // The paper's comparisons are at 4 threads.
    let tmax = if threads.contains(&4) {
        4
    } else {
        threads.iter().copied().max().unwrap_or(1)
    };
    let mut header = vec!["writes".to_string(), "engine".to_string()];
    header.extend(threads.iter().map(|t| format!("{t} thr txn/s")));
    header.extend([
        format!("{tmax}/{tmin} thr"),
        format!("vs Baseline-sc @{tmax}"),
        format!("aborts/txn @{tmax}"),
        format!("max aborts @{tmax}"),
        format!("fdatasync/txn @{tmax}"),
    ]);
    let mut rows = Vec::new();
    let mut panels = Vec::new();
    for &w in &ratios {
        let mut bars = Vec::new();
        for (name, _) in &m.names {
            let at = |t: u32| tput(&m, name, |c| c.threads == t && c.write_ratio == w);
            let top = m
                .cell(|c| c.threads == tmax && c.write_ratio == w)
                .and_then(|i| m.get(i, name));
            let mut row = vec![format!("{:.0}%", w * 100.0), name.to_string()];
            row.extend(threads.iter().map(|&t| opt(at(t), 0)));
            row.push(opt(ratio(at(tmax), at(tmin)), 2));
            let base = tput(&m, "Baseline-sc", |c| {
                c.threads == tmax && c.write_ratio == w
            });
            row.push(opt(ratio(at(tmax), base), 2));
            row.push(opt(top.map(|s| s.aborts_per_txn()), 4));
            row.push(top.map_or("-".into(), |s| s.max_aborts_per_txn.to_string()));
            row.push(opt(
                top.map(|s| s.io.fdatasync as f64 / s.txns.max(1) as f64),
                3,
            ));
            rows.push(row);
            for &t in &threads {
                bars.push(Bar {
                    label: format!("{name} {t}T"),
                    segments: vec![("txn/s".into(), at(t).unwrap_or(0.0))],
                });
            }
        }
        panels.push(Panel {
            title: format!("{:.0}% writes: transactions/s", w * 100.0),
            unit: "txn/s".into(),
            bars,
        });
    }
    let mut claims = Vec::new();
    let scale = |name: &str, w: f64| {
        ratio(
            tput(&m, name, |c| c.threads == tmax && c.write_ratio == w),
            tput(&m, name, |c| c.threads == tmin && c.write_ratio == w),
        )
    };
    for &w in &ratios {
        let (b, bsc, bc) = (
            scale("Baseline", w),
            scale("Baseline-sc", w),
            scale("BeginConc", w),
        );
        claims.push(Claim {
            what: format!(
                "{:.0}% writes: Baseline and BeginConc from {tmin} to {tmax} threads",
                w * 100.0
            ),
            paper: if w <= 0.1 {
                "very small gain even at 10% writes".into()
            } else {
                "throughput degrades with more threads".into()
            },
            ours: format!(
                "Baseline-sc {}x, Baseline {}x, BeginConc {}x",
                opt(bsc, 2),
                opt(b, 2),
                opt(bc, 2)
            ),
            holds: match (bsc, bc) {
                (Some(b), Some(bc)) => Some(b < 1.3 && bc < 1.3),
                _ => None,
            },
        });
        let (i, d) = (scale("IPS+2VTO", w), scale("DHL+2VTO", w));
        claims.push(Claim {
            what: format!(
                "{:.0}% writes: IPS+2VTO and DHL+2VTO from {tmin} to {tmax} threads",
                w * 100.0
            ),
            paper: "they scale to 4 threads".into(),
            ours: format!("IPS+2VTO {}x, DHL+2VTO {}x", opt(i, 2), opt(d, 2)),
            holds: match (i, d) {
                (Some(i), Some(d)) => Some(i > 1.2 && d > 1.2),
                _ => None,
            },
        });
        let at = |n: &str| tput(&m, n, |c| c.threads == tmax && c.write_ratio == w);
        let vs = ratio(at("IPS+2VTO"), at("Baseline-sc"));
        claims.push(Claim {
            what: format!(
                "{:.0}% writes, {tmax} threads: IPS+2VTO against Baseline",
                w * 100.0
            ),
            paper: "more than 2x".into(),
            ours: format!(
                "{}x Baseline-sc, {}x Baseline",
                opt(vs, 2),
                opt(ratio(at("IPS+2VTO"), at("Baseline")), 2)
            ),
            holds: vs.map(|v| v > 2.0),
        });
        let dhl = ratio(at("DHL+2VTO"), at("IPS+2VTO"));
        claims.push(Claim {
            what: format!(
                "{:.0}% writes, {tmax} threads: DHL+2VTO against IPS+2VTO",
                w * 100.0
            ),
            paper: "up to 23.7% lower (page utilisation)".into(),
            ours: pct_opt(at("DHL+2VTO"), at("IPS+2VTO")),
            holds: dhl.map(|v| v < 1.0),
        });
    }
    let notes = m.notes(&[(
        "note",
        "Baseline is stock SQLite 3.50.2 in WAL mode with one private-cache connection per \
         thread, Baseline-sc the same in shared-cache mode (the paper's Baseline); BeginConc \
         is twinpage's begin-concurrent protocol on its WAL mode (SQLite's branch is not in \
         the bundled library); DHL+2VTO embeds its commit record (one page per commit), IPS+2VTO writes \
         page 1 (the paper's)"
            .into(),
    )]);
    Ok(Figure {
        name: "ips-8",
        title: format!(
            "concurrent throughput, {tmin}-{tmax} threads, 10/20/50% writes ([IPS] Fig. 8)"
        ),
        header,
        rows,
        claims,
        panels,
        data: m.data(),
        notes,
    })
}

fn pct_opt(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{} ({} vs {} txn/s)", pct(a, b), f(a, 0), f(b, 0)),
        _ => "-".into(),
    }
}

/// \[IPS\] Fig. 9: 4 threads, transactions of 2, 4 and 6 statements, 85%
/// SELECT.
pub fn fig9(a: &FigureArgs) -> Result<Figure, BenchError> {
    let t = threads_or(a, &[4]).into_iter().max().unwrap_or(4);
    let sizes = [2u32, 4, 6];
    let cells = sizes
        .iter()
        .map(|&n| Cell {
            threads: t,
            write_ratio: 0.15,
            ops_per_txn: n,
            zipf_s: 0.0,
        })
        .collect();
    let m = measure(a, "twinpage bench figure ips-9", engines(), cells)?;
    let header: Vec<String> = strings(&[
        "statements/txn",
        "engine",
        "txn/s",
        "vs Baseline-sc",
        "aborts/txn",
        "max aborts",
        "lock wait µs",
        "replay µs",
        "mean µs",
    ]);
    let mut rows = Vec::new();
    let mut panels = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let base = m.get(i, "Baseline-sc").map(|s| s.txn_per_sec);
        let mut bars = Vec::new();
        for (name, _) in &m.names {
            let Some(s) = m.get(i, name) else { continue };
            rows.push(vec![
                n.to_string(),
                name.to_string(),
                f(s.txn_per_sec, 0),
                opt(ratio(Some(s.txn_per_sec), base), 2),
                f(s.aborts_per_txn(), 4),
                s.max_aborts_per_txn.to_string(),
                f(s.breakdown.lock_wait, 1),
                f(s.breakdown.replay, 1),
                f(s.breakdown.total, 1),
            ]);
            bars.push(Bar {
                label: name.to_string(),
                segments: vec![("txn/s".into(), s.txn_per_sec)],
            });
        }
        panels.push(Panel {
            title: format!("{n} statements per transaction: txn/s"),
            unit: "txn/s".into(),
            bars,
        });
    }
    let get = |i: usize, n: &str| m.get(i, n).map(|s| s.txn_per_sec);
    let mut claims = Vec::new();
    let falls = |n: &str| {
        let v: Vec<Option<f64>> = (0..sizes.len()).map(|i| get(i, n)).collect();
        v.windows(2)
            .all(|w| matches!(w, [Some(a), Some(b)] if b < a))
    };
    claims.push(Claim {
        what: "throughput against transaction size".into(),
        paper: "decreases as transactions grow".into(),
        ours: m
            .names
            .iter()
            .map(|(n, _)| {
                let v: Vec<String> = (0..sizes.len()).map(|i| opt(get(i, n), 0)).collect();
                format!("{n} {}", v.join(" / "))
            })
            .collect::<Vec<_>>()
            .join("; "),
        holds: Some(m.names.iter().all(|(n, _)| falls(n))),
    });
    let best = (0..sizes.len()).all(|i| {
        let top = m
            .names
            .iter()
            .filter_map(|(n, _)| get(i, n).map(|v| (*n, v)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        matches!(top, Some(("IPS+2VTO", _)) | Some(("DHL+2VTO", _)))
    });
    claims.push(Claim {
        what: "2VTO against Baseline and BeginConc".into(),
        paper: "2VTO consistently outperforms both".into(),
        ours: (0..sizes.len())
            .map(|i| {
                format!(
                    "{} stmts: IPS+2VTO {} vs Baseline-sc, {} vs BeginConc",
                    sizes[i],
                    opt(ratio(get(i, "IPS+2VTO"), get(i, "Baseline-sc")), 2),
                    opt(ratio(get(i, "IPS+2VTO"), get(i, "BeginConc")), 2)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        holds: Some(best),
    });
    let bc: Vec<Option<f64>> = (0..sizes.len())
        .map(|i| ratio(get(i, "BeginConc"), get(i, "Baseline-sc")))
        .collect();
    claims.push(Claim {
        what: "BeginConc against Baseline-sc at 2 / 4 / 6 statements".into(),
        paper: "+27.3% / +43.8% / +43.9% (private cache against shared cache)".into(),
        ours: bc
            .iter()
            .map(|r| r.map_or("-".into(), |r| format!("{:+.1}%", (r - 1.0) * 100.0)))
            .collect::<Vec<_>>()
            .join(" / "),
        holds: Some(bc.iter().all(|r| r.is_some_and(|r| r > 1.0))),
    });
    let notes = m.notes(&[(
        "note",
        format!(
            "{t} threads, 15% UPDATEs and 85% SELECTs in every transaction size, uniform keys; \
             multi-statement transactions run in one write transaction when they write \
             (SQLite: BEGIN IMMEDIATE), in one read transaction otherwise"
        ),
    )]);
    Ok(Figure {
        name: "ips-9",
        title: format!("transaction size 2/4/6, {t} threads, 85% SELECT ([IPS] Fig. 9)"),
        header,
        rows,
        claims,
        panels,
        data: m.data(),
        notes,
    })
}

/// \[IPS\] Fig. 10: where a transaction's time goes at 4 threads and 20%
/// writes.
pub fn fig10(a: &FigureArgs) -> Result<Figure, BenchError> {
    let t = threads_or(a, &[4]).into_iter().max().unwrap_or(4);
    let cells = vec![Cell {
        threads: t,
        write_ratio: 0.2,
        ops_per_txn: 1,
        zipf_s: 0.0,
    }];
    let m = measure(a, "twinpage bench figure ips-10", engines(), cells)?;
    let header: Vec<String> = strings(&[
        "engine",
        "lock wait µs",
        "forced sleep µs",
        "rollback/replay µs",
        "compute µs",
        "write µs",
        "fsync µs",
        "mean µs",
        "txn/s",
        "aborts/txn",
    ]);
    let mut rows = Vec::new();
    let mut bars = Vec::new();
    for (name, _) in &m.names {
        let Some(s) = m.get(0, name) else { continue };
        let b = &s.breakdown;
        let sleep = b.forced_sleep + b.commit_wait;
        rows.push(vec![
            name.to_string(),
            f(b.lock_wait, 1),
            f(sleep, 1),
            f(b.replay, 1),
            f(b.compute, 1),
            f(b.write, 1),
            f(b.sync, 1),
            f(b.total, 1),
            f(s.txn_per_sec, 0),
            f(s.aborts_per_txn(), 4),
        ]);
        bars.push(Bar {
            label: name.to_string(),
            segments: vec![
                ("lock wait".into(), b.lock_wait),
                ("forced sleep".into(), sleep),
                ("rollback/replay".into(), b.replay),
                ("compute".into(), b.compute),
                ("write()".into(), b.write),
                ("fsync()".into(), b.sync),
            ],
        });
    }
    let share = |n: &str, part: &dyn Fn(&Summary) -> f64| {
        m.get(0, n).map(|s| part(s) / s.breakdown.total.max(1e-9))
    };
    let lock = share("Baseline", &|s| s.breakdown.lock_wait);
    let sc_replay = share("Baseline-sc", &|s| s.breakdown.replay);
    let replay = share("BeginConc", &|s| s.breakdown.replay);
    let sleep = share("IPS+2VTO", &|s| {
        s.breakdown.forced_sleep + s.breakdown.commit_wait
    });
    let mean = |n: &str| m.get(0, n).map(|s| s.breakdown.total);
    let lowest = m
        .names
        .iter()
        .filter_map(|(n, _)| mean(n).map(|v| (*n, v)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let pcts = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0));
    let claims = vec![
        Claim {
            what: "Baseline: time waiting for locks".into(),
            paper: "69% of its execution time (file locks)".into(),
            ours: format!(
                "Baseline (busy handler): {} lock wait; Baseline-sc (SQLITE_LOCKED, replayed): \
                 {} rollback/replay",
                pcts(lock),
                pcts(sc_replay)
            ),
            holds: lock.map(|v| v > 0.5),
        },
        Claim {
            what: "BeginConc: time in rollback and replay".into(),
            paper: "48% of its execution time".into(),
            ours: pcts(replay),
            holds: replay.map(|v| v > 0.3),
        },
        Claim {
            what: "IPS+2VTO: latency against the others".into(),
            paper: "much lower query response time than the other modes".into(),
            ours: format!(
                "lowest mean: {} ({} µs); IPS+2VTO {} µs",
                lowest.map_or("-", |l| l.0),
                opt(lowest.map(|l| l.1), 1),
                opt(mean("IPS+2VTO"), 1)
            ),
            holds: lowest.map(|l| l.0 == "IPS+2VTO"),
        },
        Claim {
            what: "IPS+2VTO: time in forced sleep (replays waiting to be the oldest, commits \
                   waiting for their turn)"
                .into(),
            paper: "66% of the average latency".into(),
            ours: pcts(sleep),
            holds: sleep.map(|v| v > 0.5),
        },
    ];
    let notes = m.notes(&[(
        "breakdown",
        "per committed transaction, reads included: lock wait (SQLite's busy-handler sleeps; \
         twinpage's writer lock, page locks, commit lock, wounded holders), forced sleep \
         (2VTO: a replay waiting to be the oldest plus a commit waiting for its turn), \
         rollback/replay (attempts that were rolled back and the backoff before each \
         replay), write() and fsync() of the attempt that committed, compute = the rest"
            .into(),
    )]);
    Ok(Figure {
        name: "ips-10",
        title: format!("latency breakdown, {t} threads, 20% writes ([IPS] Fig. 10)"),
        header,
        rows,
        claims,
        panels: vec![Panel {
            title: "µs per transaction".into(),
            unit: "µs".into(),
            bars,
        }],
        data: m.data(),
        notes,
    })
}

/// \[IPS\] Fig. 11: Zipf skew 0-1.0 at 4 threads and 15% writes:
/// throughput and replays, with and without forced sleep, and FUW.
pub fn fig11(a: &FigureArgs) -> Result<Figure, BenchError> {
    let t = threads_or(a, &[4]).into_iter().max().unwrap_or(4);
    let skews = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0];
    let cells = skews
        .iter()
        .map(|&s| Cell {
            threads: t,
            write_ratio: 0.15,
            ops_per_txn: 1,
            zipf_s: s,
        })
        .collect();
    let m = measure(a, "twinpage bench figure ips-11", engines11(), cells)?;
    let mut header = vec!["engine".to_string(), "".to_string()];
    header.extend(skews.iter().map(|s| format!("zipf {s:.1}")));
    let mut rows = Vec::new();
    let mut tp = Vec::new();
    let mut rp = Vec::new();
    for (name, _) in &m.names {
        let mut t_row = vec![name.to_string(), "txn/s (T)".into()];
        let mut r_row = vec![name.to_string(), "aborts/txn (R)".into()];
        let mut x_row = vec![name.to_string(), "max aborts".into()];
        for (i, skew) in skews.iter().enumerate() {
            let s = m.get(i, name);
            t_row.push(opt(s.map(|s| s.txn_per_sec), 0));
            r_row.push(opt(s.map(|s| s.aborts_per_txn()), 4));
            x_row.push(s.map_or("-".into(), |s| s.max_aborts_per_txn.to_string()));
            tp.push(Bar {
                label: format!("{name} {skew:.1}"),
                segments: vec![("txn/s".into(), s.map_or(0.0, |s| s.txn_per_sec))],
            });
            rp.push(Bar {
                label: format!("{name} {skew:.1}"),
                segments: vec![(
                    "aborts per txn".into(),
                    s.map_or(0.0, |s| s.aborts_per_txn()),
                )],
            });
        }
        rows.push(t_row);
        rows.push(r_row);
        rows.push(x_row);
    }
    let last = skews.len() - 1;
    let aborts = |i: usize, n: &str| m.get(i, n).map(|s| s.aborts_per_txn());
    let tput = |i: usize, n: &str| m.get(i, n).map(|s| s.txn_per_sec);
    let pcts = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2}%", v * 100.0));
    let drop = |n: &str| ratio(tput(last, n), tput(0, n)).map(|r| (1.0 - r) * 100.0);
    let most = |n: &str| {
        (0..skews.len())
            .filter_map(|i| m.get(i, n))
            .map(|s| s.max_aborts_per_txn)
            .max()
            .unwrap_or(0)
    };
    let ns_more = ratio(aborts(last, "NS"), aborts(last, "IPS+2VTO"));
    let ns_tput = ratio(tput(last, "NS"), tput(last, "IPS+2VTO"));
    let claims = vec![
        Claim {
            what: "IPS+2VTO and DHL+2VTO: transactions aborted, uniform keys (skew 0)".into(),
            paper: "about 1%".into(),
            ours: format!(
                "IPS+2VTO {}, DHL+2VTO {}",
                pcts(aborts(0, "IPS+2VTO")),
                pcts(aborts(0, "DHL+2VTO"))
            ),
            holds: aborts(0, "IPS+2VTO").map(|v| v < 0.03),
        },
        Claim {
            what: "IPS+2VTO at skew 1.0: aborted transactions and throughput".into(),
            paper: "5.7% abort, throughput -13%".into(),
            ours: format!(
                "{} abort, throughput {}",
                pcts(aborts(last, "IPS+2VTO")),
                drop("IPS+2VTO").map_or("-".into(), |d| format!("{:+.1}%", -d))
            ),
            holds: match (aborts(last, "IPS+2VTO"), aborts(0, "IPS+2VTO")) {
                (Some(h), Some(l)) => Some(h > l),
                _ => None,
            },
        },
        Claim {
            what: "DHL+2VTO against IPS+2VTO at skew 1.0".into(),
            paper: "slightly fewer aborts, throughput only -5% but still below IPS+2VTO".into(),
            ours: format!(
                "aborts {} vs {}; throughput {} from skew 0; {} vs IPS+2VTO",
                pcts(aborts(last, "DHL+2VTO")),
                pcts(aborts(last, "IPS+2VTO")),
                drop("DHL+2VTO").map_or("-".into(), |d| format!("{:+.1}%", -d)),
                pct_opt(tput(last, "DHL+2VTO"), tput(last, "IPS+2VTO"))
            ),
            holds: match (aborts(last, "DHL+2VTO"), aborts(last, "IPS+2VTO")) {
                (Some(d), Some(i)) => Some(d <= i),
                _ => None,
            },
        },
        Claim {
            what: "no forced sleep (NS) against IPS+2VTO at skew 1.0".into(),
            paper: "up to 3.8x more conflicts, throughput at least 11.5% lower".into(),
            ours: format!(
                "{}x the aborts, throughput {}",
                opt(ns_more, 2),
                ns_tput.map_or("-".into(), |r| format!("{:+.1}%", (r - 1.0) * 100.0))
            ),
            holds: ns_more.map(|r| r > 1.0),
        },
        Claim {
            what: "BeginConc: aborts per transaction, skew 0 and 1.0".into(),
            paper: "more than 2.4 (uniform), 2.5 (skew 1.0); throughput -4.7%".into(),
            ours: format!(
                "{} and {}; throughput {}",
                opt(aborts(0, "BeginConc"), 3),
                opt(aborts(last, "BeginConc"), 3),
                drop("BeginConc").map_or("-".into(), |d| format!("{:+.1}%", -d))
            ),
            holds: aborts(0, "BeginConc").map(|v| v > 1.0),
        },
        Claim {
            what: "aborts of one transaction under AFUW (IPS+2VTO, DHL+2VTO) and FUW".into(),
            paper: "at most one under AFUW; FUW can abort a transaction again".into(),
            ours: format!(
                "max {} (IPS+2VTO), {} (DHL+2VTO), {} (FUW), {} (NS)",
                most("IPS+2VTO"),
                most("DHL+2VTO"),
                most("FUW"),
                most("NS"),
            ),
            holds: Some(most("IPS+2VTO") <= 1 && most("DHL+2VTO") <= 1),
        },
    ];
    let notes = m.notes(&[(
        "note",
        format!(
            "{t} threads, 15% UPDATEs, Zipf skew over the rows in a random popularity order \
             (skew 0 = uniform); NS = 2vto-ns (no forced sleep), FUW = 2vto-fuw"
        ),
    )]);
    Ok(Figure {
        name: "ips-11",
        title: format!("Zipf skew 0-1.0, {t} threads, 15% writes ([IPS] Fig. 11)"),
        header,
        rows,
        claims,
        panels: vec![
            Panel {
                title: "throughput (T), txn/s".into(),
                unit: "txn/s".into(),
                bars: tp,
            },
            Panel {
                title: "replays (R): aborts per committed transaction".into(),
                unit: "aborts/txn".into(),
                bars: rp,
            },
        ],
        data: m.data(),
        notes,
    })
}
