//! The damage campaigns of docs/CRASH.md §5b at CI size: in every mode, a
//! bit flip anywhere in a committed database is detected (at open, read or
//! check); a zeroed page or a misdirected write never returns wrong data
//! (a free page zeroed is a page never written: harmless); a stale
//! page (a lost write), which no per-page checksum can recognise, is at
//! least never a panic. `twinpage crashtest --damage all` runs them at full
//! size.

use twinpage::JournalMode;
use twinpage_tools::crash::flip::{campaign, CampaignConfig, Damage};

fn run(mode: JournalMode, damage: Damage, trials: u64) {
    let cfg = CampaignConfig {
        trials,
        ..CampaignConfig::new(mode, damage)
    };
    let rep = campaign(&cfg).unwrap_or_else(|e| panic!("{mode} {damage}: {e}"));
    eprintln!("{rep}");
    assert_eq!(rep.trials, trials);
    assert_eq!(rep.panics, 0, "{rep}");
    match damage {
        Damage::BitFlip => assert_eq!(rep.detected(), trials, "{rep}"),
        // A free page zeroed (or overwritten by a zero page) is a page
        // never written: harmless, and not distinguishable. Never silent.
        Damage::Zero | Damage::Misdirected => assert_eq!(rep.silent, 0, "{rep}"),
        Damage::Stale => {}
    }
}

#[test]
fn every_damaged_page_is_detected_in_every_mode() {
    for &mode in JournalMode::ALL {
        run(mode, Damage::BitFlip, 200);
        run(mode, Damage::Zero, 40);
        run(mode, Damage::Misdirected, 40);
        run(mode, Damage::Stale, 40);
    }
}

/// Without page checksums the same flips go unnoticed (the reason they
/// exist): the campaign must see that, or it is not testing anything.
#[test]
fn without_checksums_flips_go_unnoticed() {
    let cfg = CampaignConfig {
        trials: 200,
        checksums: false,
        ..CampaignConfig::new(JournalMode::Persist, Damage::BitFlip)
    };
    let rep = campaign(&cfg).unwrap();
    eprintln!("{rep}");
    assert_eq!(rep.panics, 0);
    assert!(rep.silent + rep.undetected > 0, "{rep}");
}
