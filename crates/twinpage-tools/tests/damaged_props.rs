//! Property test over damaged files, in every journal mode: bit flips,
//! overwritten bytes, truncation, zeroed, swapped and copied pages (WAL
//! frames, journal records), pages pointing to themselves or elsewhere, in
//! the database and in the mode's auxiliary file as a crash left it (hot
//! rollback journal, WAL with a torn uncommitted tail, shadow file mid
//! protocol). Opening (recovery), checking, scanning, reading and writing
//! must return typed errors only: no panic, no hang, no huge allocation.
//! One test per mode, on two page sizes each; the same code runs
//! unbounded under cargo-fuzz (fuzz/fuzz_targets/damaged_file.rs).

use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;
use twinpage::JournalMode;
use twinpage_tools::crash::damage::{
    all_seeds, apply, aux_suffix, decode_mutations, exercise, Mutation, Seed, Target,
    SEEDS_PER_MODE,
};

/// Cases per mode (half on each page size; a case is a few random
/// mutations or a random fuzzer bytecode). 9 modes × 1000 cases take a
/// few seconds in the test profile (opt-level 2), well under two minutes.
const CASES_PER_MODE: u32 = 1000;

/// No single allocation may exceed this: the seed files are a few hundred
/// KiB, so anything near it means a length read from a damaged file was
/// trusted.
const ALLOC_LIMIT: usize = 64 << 20;
static LARGEST: AtomicUsize = AtomicUsize::new(0);

struct Guarded;

// SAFETY: forwards to the system allocator; refusing a request (null) is
// allowed by the GlobalAlloc contract.
unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        LARGEST.fetch_max(new, Ordering::Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Guarded = Guarded;

fn seeds() -> &'static [Seed] {
    static S: OnceLock<Vec<Seed>> = OnceLock::new();
    S.get_or_init(all_seeds)
}

fn seed_of(mode: JournalMode, ps_index: usize) -> &'static Seed {
    let m = JournalMode::ALL
        .iter()
        .position(|&x| x == mode)
        .expect("a mode of ALL");
    &seeds()[m * SEEDS_PER_MODE + ps_index % SEEDS_PER_MODE]
}

/// Run one damaged image with a time limit; panics inside fail the test.
fn run(s: &'static Seed, muts: Vec<Mutation>) -> Result<(), TestCaseError> {
    let (db, aux) = apply(s, &muts);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let ex = exercise(s, db, aux);
        let _ = tx.send(ex.unexpected);
    });
    let name = s.name();
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(unexpected) => {
            prop_assert!(
                unexpected.is_empty(),
                "untyped errors {unexpected:?} in {name} for {muts:?}"
            );
            Ok(())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => Err(TestCaseError::fail(format!(
            "hang (> 20 s) in {name} for {muts:?}"
        ))),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(TestCaseError::fail(format!("panic in {name} for {muts:?}")))
        }
    }
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![3 => Just(Target::Db), 2 => Just(Target::Aux)]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (target(), any::<u64>(), 0u8..8).prop_map(|(target, offset, bit)| Mutation::FlipBit { target, offset, bit }),
        2 => (target(), any::<u64>(), proptest::collection::vec(any::<u8>(), 1..24))
            .prop_map(|(target, offset, bytes)| Mutation::Bytes { target, offset, bytes }),
        1 => (target(), any::<u64>()).prop_map(|(target, len)| Mutation::Truncate { target, len }),
        2 => (target(), any::<u64>()).prop_map(|(target, page)| Mutation::ZeroPage { target, page }),
        2 => (target(), any::<u64>(), any::<u64>()).prop_map(|(target, a, b)| Mutation::SwapPages { target, a, b }),
        1 => (target(), any::<u64>(), any::<u64>()).prop_map(|(target, from, to)| Mutation::CopyPage { target, from, to }),
        2 => (target(), any::<u64>()).prop_map(|(target, page)| Mutation::SelfPointer { target, page }),
        2 => (target(), any::<u64>(), any::<u64>(), prop_oneof![any::<u32>(), 0u32..200])
            .prop_map(|(target, page, offset, to)| Mutation::Repoint { target, page, offset, to }),
    ]
}

/// A case: a few structured mutations, or a fuzzer bytecode program.
fn damage() -> impl Strategy<Value = Vec<Mutation>> {
    prop_oneof![
        3 => proptest::collection::vec(mutation(), 1..5),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(|b| decode_mutations(&b)),
    ]
}

#[test]
fn undamaged_seeds_recover_cleanly() {
    assert_eq!(seeds().len(), JournalMode::ALL.len() * SEEDS_PER_MODE);
    for s in seeds() {
        assert_eq!(
            s.aux.is_some(),
            aux_suffix(s.mode).is_some(),
            "{}: the crash state keeps the auxiliary file",
            s.name()
        );
        assert!(
            s.aux.as_ref().is_none_or(|a| !a.is_empty()),
            "{}: empty auxiliary file",
            s.name()
        );
        eprintln!(
            "seed {}: db {} bytes, aux {:?} bytes",
            s.name(),
            s.db.len(),
            s.aux.as_ref().map(Vec::len)
        );
        let ex = exercise(s, s.db.clone(), s.aux.clone());
        assert!(
            ex.opened && ex.errors.is_empty(),
            "{}: {:?}",
            s.name(),
            ex.errors
        );
    }
}

macro_rules! per_mode {
    ($($name:ident => $mode:expr,)*) => {
        proptest! {
            #![proptest_config(ProptestConfig {
                cases: CASES_PER_MODE,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]
            $(
                #[test]
                fn $name(ps in 0..SEEDS_PER_MODE, muts in damage()) {
                    run(seed_of($mode, ps), muts)?;
                    prop_assert!(LARGEST.load(Ordering::Relaxed) <= ALLOC_LIMIT);
                }
            )*
        }

        /// Every mode of `JournalMode::ALL` has its test above.
        #[test]
        fn every_mode_is_covered() {
            let covered = [$($mode),*];
            for m in JournalMode::ALL {
                assert!(covered.contains(m), "no damaged-file test for {m}");
            }
        }
    };
}

per_mode! {
    damaged_off => JournalMode::Off,
    damaged_delete => JournalMode::Delete,
    damaged_truncate => JournalMode::Truncate,
    damaged_persist => JournalMode::Persist,
    damaged_wal => JournalMode::Wal,
    damaged_shadow => JournalMode::Shadow,
    damaged_shadow_x => JournalMode::ShadowX,
    damaged_dhl_tc => JournalMode::DhlTc,
    damaged_dhl_cc => JournalMode::DhlCc,
    damaged_ips => JournalMode::Ips,
    damaged_mvbt => JournalMode::Mvbt,
    damaged_ls_mvbt => JournalMode::LsMvbt,
}
