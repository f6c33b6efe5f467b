//! Real process kills: the `twinpage` binary runs a workload on a real file
//! in a child process, which is SIGKILLed at random moments; after
//! recovery the contents must be a prefix of the acknowledged commits (at
//! most one more, in flight). Every mode in `JournalMode::ALL`.

use std::time::Duration;
use twinpage::{JournalMode, Synchronous};
use twinpage_tools::crash::child::{kill_campaign, KillConfig};

#[test]
fn sigkill_at_random_moments_keeps_the_prefix_property() {
    let dir = tempfile::tempdir().unwrap();
    for &mode in JournalMode::ALL {
        for (sync, seed) in [(Synchronous::Full, 1), (Synchronous::Off, 100)] {
            let rep = kill_campaign(&KillConfig {
                binary: env!("CARGO_BIN_EXE_twinpage").into(),
                dir: dir.path().to_path_buf(),
                mode,
                sync,
                seed,
                rounds: 6,
                page_size: 1024,
                max_delay: Duration::from_millis(250),
            })
            .unwrap();
            eprintln!(
                "{mode} sync={sync}: {} kills, {} acked, {} in flight, {} recovered, {:?}",
                rep.rounds, rep.acked, rep.in_flight, rep.recovered, rep.elapsed
            );
            assert!(rep.violations.is_empty(), "{}", rep.violations.join("\n"));
            assert_eq!(rep.rounds, 6);
        }
    }
}
