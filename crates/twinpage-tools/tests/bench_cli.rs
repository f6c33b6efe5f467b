//! The `twinpage bench` command line, end to end (small and fast: tmpfs
//! when available, a handful of transactions).

use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fn twinpage() -> Command {
    Command::new(env!("CARGO_BIN_EXE_twinpage"))
}

/// Run `twinpage ARGS --dir D/db --json D/NAME`, require success, and
/// return the JSON it wrote and its standard output.
fn bench_json(dir: &tempfile::TempDir, name: &str, args: &[&str]) -> (serde_json::Value, String) {
    let json = dir.path().join(name);
    let out = twinpage()
        .args(args)
        .arg("--dir")
        .arg(dir.path().join("db"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn mobibench_writes_json_with_documented_fields() {
    let dir = scratch();
    #[rustfmt::skip]
    let (v, stdout) = bench_json(&dir, "out.json", &[
        "bench", "mobibench", "--no-isolate", "--txns", "20", "--prefill", "100",
        "--op", "update", "--ops-per-txn", "2", "--dist", "zipf",
        "--engine", "twinpage:persist", "--engine", "sqlite:wal,synchronous=normal",
        "--engine", "floor", "--baseline", "sqlite:wal,synchronous=normal",
    ]);
    assert!(stdout.contains("journal_mode=wal"), "{stdout}");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[1]["engine"], "sqlite:wal,synchronous=normal");
    for r in runs {
        for f in [
            "engine",
            "txns",
            "txn_per_sec",
            "p50_us",
            "p99_us",
            "p999_us",
            "writes_per_txn",
            "bytes_written_per_txn",
            "fdatasync_per_txn",
            "fsync_per_txn",
            "block_write_reqs_per_txn",
            "block_kib_per_txn",
            "db_bytes",
            "aux_bytes",
        ] {
            assert!(r.get(f).is_some(), "missing {f} in {r}");
        }
        assert_eq!(r["txns"], 20);
    }
    assert_eq!(runs[1]["txn_per_sec_ratio"], 1.0);
}

#[test]
fn shared_keys_report_aborts_and_the_breakdown() {
    let dir = scratch();
    #[rustfmt::skip]
    let (v, stdout) = bench_json(&dir, "shared.json", &[
        "bench", "mobibench", "--no-isolate", "--txns", "200", "--prefill", "50",
        "--op", "select-update", "--write-ratio", "0.5", "--keys", "shared",
        "--threads", "4", "--dist", "zipf", "--zipf-s", "1.0", "--prefill-order", "random",
        "--engine", "twinpage:ips,concurrency=2vto", "--engine", "sqlite:wal",
    ]);
    assert!(stdout.contains("per-key model"), "{stdout}");
    assert_eq!(v["settings"]["workloads"][0]["keys"], "shared");
    for r in v["runs"].as_array().unwrap() {
        for f in [
            "aborts_per_txn",
            "max_aborts_per_txn",
            "fdatasync_per_txn",
            "conflict_aborts",
            "busy_aborts",
            "latency_breakdown_us",
            "protocol_counters",
            "verified",
        ] {
            assert!(r.get(f).is_some(), "missing {f} in {r}");
        }
        let b = &r["latency_breakdown_us"];
        let parts: f64 = [
            "lock_wait",
            "forced_sleep",
            "commit_wait",
            "replay",
            "compute",
            "write",
            "sync",
        ]
        .iter()
        .map(|k| b[k].as_f64().unwrap())
        .sum();
        assert!(
            (parts - b["total"].as_f64().unwrap()).abs() < 0.01 + 0.01 * parts,
            "{b}"
        );
        assert_eq!(r["verified"]["integrity"], "ok");
    }
    let ips = &v["runs"][0];
    assert!(ips["max_aborts_per_txn"].as_u64().unwrap() <= 1);
    assert_eq!(ips["protocol_counters"]["second_aborts"], 0);
}

/// The Rust peers run the same workload (each checks the rows it ends
/// with, as every engine does); redb's I/O is counted by the same VFS.
#[test]
fn redb_and_lmdb_run_the_workload() {
    let dir = scratch();
    #[rustfmt::skip]
    let (v, _) = bench_json(&dir, "peers.json", &[
        "bench", "mobibench", "--no-isolate", "--txns", "30", "--prefill", "200",
        "--op", "mix", "--ops-per-txn", "3", "--tables", "2",
        "--engine", "redb", "--engine", "redb,durability=none",
        "--engine", "lmdb", "--engine", "lmdb,sync=off", "--baseline", "redb",
    ]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    // Durable redb syncs every write transaction; its writes were counted.
    assert!(
        runs[0]["fdatasync_per_txn"].as_f64().unwrap() > 0.0,
        "{}",
        runs[0]
    );
    assert!(
        runs[0]["writes_per_txn"].as_f64().unwrap() > 0.0,
        "{}",
        runs[0]
    );
    assert_eq!(
        runs[1]["fdatasync_per_txn"].as_f64().unwrap(),
        0.0,
        "{}",
        runs[1]
    );
}

#[test]
fn recovery_rolls_back_or_commits() {
    let dir = scratch();
    #[rustfmt::skip]
    let (v, _) = bench_json(&dir, "rec.json", &[
        "bench", "recovery", "--no-isolate", "--cache", "warm",
        "--warm", "100", "--records", "2", "--reps", "1",
    ]);
    let runs = v["runs"].as_array().unwrap();
    assert!(runs.len() >= 9, "{runs:?}");
    for r in runs {
        let engine = r["engine"].as_str().unwrap();
        let outcome = r["outcome"].as_str().unwrap();
        // Rollback journals are killed mid-commit and must roll back; WAL,
        // OFF and DHL (embedded mark) commits finish before the kill.
        if ["delete", "truncate", "persist"]
            .iter()
            .any(|m| engine.ends_with(m))
        {
            assert_eq!(r["killed"], "mid-commit", "{r}");
            assert_eq!(outcome, "rolled back", "{r}");
            assert!(r["leftover_aux_bytes"].as_u64().unwrap() > 0, "{r}");
        } else if engine.ends_with(":ips") || engine.ends_with(":mvbt") {
            // IPS's and MVBT's counting commit writes its pages, then page
            // 1 (the mark) under one fdatasync: the kill lands after the
            // first page, before the mark, and recovery rolls the pages
            // back.
            assert_eq!(r["killed"], "mid-commit", "{r}");
            assert_eq!(outcome, "rolled back", "{r}");
        } else if engine.ends_with(":ls-mvbt") {
            // LS-MVBT's commit record rides in the last page it writes: a
            // kill after the first of several pages rolls back, a
            // one-page commit is whole or not written at all.
            let want = if r["killed"] == "mid-commit" {
                "rolled back"
            } else {
                "committed"
            };
            assert_eq!(outcome, want, "{r}");
        } else {
            assert_eq!(outcome, "committed", "{r}");
        }
    }
}

#[test]
fn readers_checks_every_read_and_reports_each_thread_count() {
    let dir = scratch();
    let json: PathBuf = dir.path().join("readers.json");
    let out = twinpage()
        .args(["bench", "readers", "--no-isolate", "--rows", "300"])
        .args(["--threads", "1,2", "--seconds", "0.05", "--trials", "1"])
        .args(["--cold-cache-pages", "16", "--dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = doc["results"].as_array().unwrap();
    // twinpage and SQLite, warm and cold, 1 and 2 threads.
    assert_eq!(rows.len(), 8, "{doc:#}");
    for r in rows {
        assert!(r["reads_per_sec"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// `bench cpu` runs all five operations (the scan included) on files and
/// in memory, on every kind of engine, and prints the CPU table.
#[test]
fn cpu_runs_every_operation_on_files_and_in_memory() {
    let dir = scratch();
    #[rustfmt::skip]
    let (v, stdout) = bench_json(&dir, "cpu.json", &[
        "bench", "cpu", "--no-isolate", "--rows", "300", "--ops", "20", "--repeat", "1",
        "--engine", "twinpage:dhl-cc,synchronous=off",
        "--engine", "twinpage:wal,synchronous=off,vfs=memory",
        "--engine", "sqlite:wal,synchronous=off",
        "--engine", "sqlite:memory,synchronous=off,vfs=memdb",
        "--engine", "redb,durability=none", "--engine", "lmdb,sync=off",
        "--baseline", "sqlite:wal,synchronous=off",
    ]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 5 * 6);
    for op in ["insert", "update", "delete", "select", "scan"] {
        assert_eq!(
            runs.iter().filter(|r| r["workload"] == op).count(),
            6,
            "{op}"
        );
    }
    assert!(stdout.contains("user CPU µs per operation"), "{stdout}");
    assert!(stdout.contains("vfs=memory"), "{stdout}");
    assert!(stdout.contains("memdb (in memory"), "{stdout}");
}
