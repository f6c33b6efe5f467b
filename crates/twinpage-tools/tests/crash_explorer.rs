//! Bounded crash exploration of every mode in `JournalMode::ALL` (a new
//! mode is covered as soon as it registers there). Budgets are totals
//! shared by the modes that promise something (with a floor per mode), so
//! CI time stays about the same as modes are added: about two CPU minutes
//! in the test profile. Set `TWINPAGE_CRASH_SCALE=10` for a longer run, or
//! use `twinpage crashtest`.

use twinpage::journal::TestFaults;
use twinpage::Durability;
use twinpage::{JournalMode, Synchronous};
use twinpage_sim::sim::PersistenceModel;
use twinpage_tools::crash::explore::{explore, ExploreConfig, Report};

fn scale() -> u64 {
    std::env::var("TWINPAGE_CRASH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Distinct crash states per mode out of a total for all modes.
fn share(total: u64, sync: Synchronous) -> u64 {
    let guarded = JournalMode::ALL
        .iter()
        .filter(|m| m.durability(sync) != Durability::None)
        .count()
        .max(1) as u64;
    (total / guarded).max(total / 16)
}

fn run(
    mode: JournalMode,
    model: PersistenceModel,
    sync: Synchronous,
    total: u64,
    seed: u64,
) -> Report {
    let mut cfg = ExploreConfig::new(mode, model);
    cfg.sync = sync;
    cfg.seed = seed;
    // Configurations without a guarantee are only smoke-tested.
    cfg.states = if mode.durability(sync) == Durability::None {
        200
    } else {
        share(total, sync) * scale()
    };
    let rep = explore(&cfg).unwrap_or_else(|e| panic!("{mode} {model}: {e}"));
    eprintln!("{rep}");
    rep
}

fn assert_clean(rep: &Report) {
    assert!(
        rep.violations.is_empty(),
        "{} {} sync={}:\n{}",
        rep.mode,
        rep.model,
        rep.sync,
        rep.violations
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

#[test]
fn every_mode_survives_ext4_ordered_crashes() {
    for &mode in JournalMode::ALL {
        let rep = run(
            mode,
            PersistenceModel::Ext4Ordered,
            Synchronous::Full,
            24_000,
            11,
        );
        assert_clean(&rep);
        if mode.durability(Synchronous::Full) != Durability::None {
            assert!(
                rep.states >= share(24_000, Synchronous::Full),
                "{mode}: budget not reached"
            );
            assert!(
                rep.recovery_states > 0,
                "{mode}: recovery was never crashed"
            );
            assert!(
                rep.coverage.spills > 0 && rep.coverage.max_depth >= 3,
                "{mode}: {}",
                rep.coverage
            );
        }
    }
}

#[test]
fn every_mode_survives_or_detects_torn_writes() {
    for &mode in JournalMode::ALL {
        assert_clean(&run(
            mode,
            PersistenceModel::Torn,
            Synchronous::Full,
            12_000,
            21,
        ));
    }
}

/// The smallest and largest page sizes: the workload keeps its keys within
/// each format's limit (DHL accepts 90-byte keys on 512-byte pages), so
/// every mode is explored at every size.
#[test]
fn every_mode_at_the_smallest_and_largest_page_size() {
    for &mode in JournalMode::ALL {
        for (page_size, model) in [
            (512, PersistenceModel::Torn),
            (65536, PersistenceModel::Ext4Ordered),
        ] {
            let mut cfg = ExploreConfig::new(mode, model);
            cfg.workload.page_size = page_size;
            cfg.seed = 4242;
            cfg.states = if mode.durability(Synchronous::Full) == Durability::None {
                100
            } else {
                300 * scale()
            };
            let rep = explore(&cfg).unwrap_or_else(|e| panic!("{mode} {page_size}: {e}"));
            eprintln!("{rep}");
            assert_clean(&rep);
            assert!(rep.states > 0, "{mode} at {page_size}: nothing explored");
        }
    }
}

#[test]
fn every_mode_at_every_sync_level() {
    for &mode in JournalMode::ALL {
        for sync in [Synchronous::Normal, Synchronous::Extra, Synchronous::Off] {
            assert_clean(&run(mode, PersistenceModel::Ext4Ordered, sync, 4_500, 31));
        }
        assert_clean(&run(
            mode,
            PersistenceModel::Strict,
            Synchronous::Full,
            3_000,
            41,
        ));
    }
}

/// The explorer must catch a broken mode: skipping the journal sync
/// before the database is written lets a crash tear a commit.
#[test]
fn explorer_catches_a_skipped_journal_sync() {
    for mode in [
        JournalMode::Delete,
        JournalMode::Truncate,
        JournalMode::Persist,
    ] {
        for model in [PersistenceModel::Ext4Ordered, PersistenceModel::Torn] {
            let mut cfg = ExploreConfig::new(mode, model);
            cfg.states = 3000;
            cfg.max_violations = 1;
            cfg.faults = TestFaults {
                skip_journal_sync: true,
                ..TestFaults::default()
            };
            let rep = explore(&cfg).unwrap();
            assert!(
                !rep.violations.is_empty(),
                "{mode} {model}: a mode without its journal sync went unnoticed ({rep})"
            );
            let v = &rep.violations[0];
            assert!(
                v.state.contains("unsynced") || v.state.contains("not durable"),
                "{v}"
            );
        }
        // The strict model keeps everything in order: it cannot see a
        // missing sync.
        let mut cfg = ExploreConfig::new(mode, PersistenceModel::Strict);
        cfg.states = 300;
        cfg.faults = TestFaults {
            skip_journal_sync: true,
            ..TestFaults::default()
        };
        assert!(explore(&cfg).unwrap().violations.is_empty());
    }
}

/// A reported state can be replayed alone from its seed, cut and draw.
#[test]
fn a_violation_reproduces_from_its_coordinates() {
    let mut cfg = ExploreConfig::new(JournalMode::Persist, PersistenceModel::Ext4Ordered);
    cfg.states = 3000;
    cfg.max_violations = 1;
    cfg.faults = TestFaults {
        skip_journal_sync: true,
        ..TestFaults::default()
    };
    let rep = explore(&cfg).unwrap();
    let v = rep.violations.first().expect("a violation");
    cfg.only = Some(twinpage_tools::crash::explore::Target {
        seed: v.seed,
        cut: v.cut,
        draw: v.draw,
    });
    let again = explore(&cfg).unwrap();
    assert_eq!(again.violations.len(), 1);
    assert_eq!(again.violations[0].state, v.state);
}

/// The in-page modes under 2VTO: commits carry timestamps with gaps where
/// transactions rolled back (page 1 then names the predecessor), and the
/// multi-writer pager merges page 1 at commit.
#[test]
fn in_page_modes_under_2vto() {
    use twinpage::cc::Protocol;
    for mode in [JournalMode::Ips, JournalMode::DhlCc] {
        for (model, seed) in [
            (PersistenceModel::Ext4Ordered, 21),
            (PersistenceModel::Torn, 22),
        ] {
            let mut cfg = ExploreConfig::new(mode, model);
            cfg.protocol = Protocol::TwoVto;
            cfg.seed = seed;
            cfg.states = 1500 * scale();
            let rep = explore(&cfg).unwrap_or_else(|e| panic!("{mode} 2vto {model}: {e}"));
            eprintln!("{rep}");
            assert_clean(&rep);
            assert!(rep.states >= 1500, "{mode}: {} states", rep.states);
        }
    }
}

/// Several write transactions in flight at the crash, for every (mode,
/// protocol) pair with several writers the registry allows: one driver
/// thread interleaves up to three transactions' operations (2VTO: the
/// oldest commits first), so power is cut while one commits and others
/// hold private pages, reserved pages above the committed count and a free
/// list in memory. Every acknowledged commit survives, none is partial.
#[test]
fn several_transactions_in_flight_for_every_multi_writer_pair() {
    use twinpage::cc::Protocol;
    for &mode in JournalMode::ALL {
        for &p in mode.spec().protocols {
            if p == Protocol::Sqlite {
                continue;
            }
            for (model, seed) in [
                (PersistenceModel::Ext4Ordered, 61),
                (PersistenceModel::Torn, 62),
            ] {
                let mut cfg = ExploreConfig::new(mode, model);
                cfg.protocol = p;
                cfg.seed = seed;
                cfg.workload.in_flight = 3;
                cfg.states = if mode.durability(Synchronous::Full) == Durability::None {
                    100
                } else {
                    500 * scale()
                };
                assert!(cfg.interleaved(), "{mode} {p}");
                let rep = explore(&cfg).unwrap_or_else(|e| panic!("{mode} {p} {model}: {e}"));
                eprintln!("{rep}\n    {}", rep.coverage);
                assert_clean(&rep);
                let c = &rep.coverage;
                assert!(
                    c.max_in_flight >= 3 && c.overlapped_commits > 0,
                    "{mode} {p}: transactions did not overlap ({c})"
                );
            }
        }
    }
}

/// Transactions done at the same moment commit on parallel threads and
/// meet in the journal's group commit (wal's sequencer: frames written in
/// parallel, one fdatasync; dhl-cc/ips under 2VTO: one page-1 mark per
/// batch); power is cut anywhere in the interleaved I/O.
#[test]
fn parallel_commits_share_group_commit_and_survive_crashes() {
    use twinpage::cc::Protocol;
    for (mode, p) in [
        (JournalMode::Wal, Protocol::BeginConcurrent),
        (JournalMode::DhlCc, Protocol::TwoVto),
        (JournalMode::Ips, Protocol::TwoVto),
    ] {
        let mut cfg = ExploreConfig::new(mode, PersistenceModel::Ext4Ordered);
        cfg.protocol = p;
        cfg.seed = 71;
        cfg.workload.in_flight = 3;
        cfg.workload.group_commit = true;
        cfg.states = 300 * scale();
        let rep = explore(&cfg).unwrap_or_else(|e| panic!("{mode} {p}: {e}"));
        eprintln!("{rep}\n    {}", rep.coverage);
        assert_clean(&rep);
        let c = &rep.coverage;
        assert!(
            c.parallel_commits > 0,
            "{mode} {p}: no commits ran in parallel ({c})"
        );
        // Which batches share a sync is up to the scheduler: a bounded
        // run may form none (the manual runs of docs/CRASH.md §9 count
        // them); tests/group_commit.rs asserts that groups form.
    }
}
