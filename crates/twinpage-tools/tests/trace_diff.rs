//! Differential correctness of twinpage-SQL on the shared app traces: a
//! serial replay of each trace (facebook, twitter, calendar) returns,
//! statement by statement, the same rows from every SELECT as stock
//! SQLite, and the final databases hold the same rows, in every twinpage
//! mode (its default protocol), and under every concurrency protocol in
//! the first mode that allows it (under a concurrent one, the trace's
//! BEGIN ... COMMIT blocks run as concurrent write transactions);
//! `TWINPAGE_TRACE_DIFF_ALL=1` runs every (mode, protocol) pair (CI keeps
//! to the shorter set: some modes sync even at synchronous=off).
//! (synchronous=off keeps the run short; the modes' commit paths run all
//! the same.) The traces are `shared/traces` beside the repository, or
//! `TWINPAGE_TRACES`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use twinpage_tools::bench::trace::{first_difference, serial_outcomes, Outcome, Side};

fn traces() -> PathBuf {
    if let Ok(d) = std::env::var("TWINPAGE_TRACES") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .skip(2)
        .map(|a| a.join("shared/traces"))
        .find(|d| d.exists())
        .expect("the app traces: shared/traces beside the repository, or TWINPAGE_TRACES")
}

/// Every mode with its default protocol, then each other protocol in the
/// first mode that allows it (every pair with `TWINPAGE_TRACE_DIFF_ALL`).
fn sides() -> Vec<Side> {
    let all = std::env::var_os("TWINPAGE_TRACE_DIFF_ALL").is_some();
    let mut seen = HashSet::new();
    let mut v = Vec::new();
    for mode in twinpage::JournalMode::ALL {
        for (i, &p) in mode.spec().protocols.iter().enumerate() {
            if i == 0 || all || seen.insert(p) {
                v.push(Side::Twinpage(
                    mode.name().to_string(),
                    (i > 0).then_some(p),
                ));
            }
        }
    }
    v
}

#[test]
fn serial_replay_matches_stock_sqlite_in_every_mode() {
    let root = traces();
    for app in ["facebook", "twitter", "calendar"] {
        let dir = root.join(app);
        let work = tempfile::tempdir().unwrap();
        let stock = serial_outcomes(&Side::Sqlite("wal".into()), &dir, work.path(), "off").unwrap();
        let selects = stock
            .0
            .iter()
            .filter(|o| matches!(o, Outcome::Rows(_)))
            .count();
        assert!(selects > 0, "{app}: no SELECT in the trace");
        for side in sides() {
            let name = side.name();
            let run = serial_outcomes(&side, &dir, work.path(), "off")
                .unwrap_or_else(|e| panic!("{app} {name}: {e}"));
            if let Some(d) = first_difference(&stock, &run) {
                panic!("{app} {name}: differs from stock SQLite: {d}");
            }
            println!(
                "{app} {name}: {} statements, {selects} SELECTs, {} tables: same as stock SQLite",
                run.0.len(),
                run.1.len() - 1
            );
        }
    }
}
