//! Differential correctness of twinpage-SQL on the shared app traces: a
//! serial replay of each trace (facebook, twitter, calendar) returns,
//! statement by statement, the same rows from every SELECT as stock
//! SQLite, and the final databases hold the same rows, in every twinpage
//! mode. (synchronous=off keeps the run short; the modes' commit paths run
//! all the same.) The traces are `shared/traces` beside the repository, or
//! `TWINPAGE_TRACES`.

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
        for mode in twinpage::JournalMode::ALL {
            let side = Side::Twinpage(mode.name().to_string());
            let run = serial_outcomes(&side, &dir, work.path(), "off")
                .unwrap_or_else(|e| panic!("{app} {mode}: {e}"));
            if let Some(d) = first_difference(&stock, &run) {
                panic!("{app} {mode}: differs from stock SQLite: {d}");
            }
            println!(
                "{app} {mode}: {} statements, {selects} SELECTs, {} tables: same as stock SQLite",
                run.0.len(),
                run.1.len() - 1
            );
        }
    }
}
