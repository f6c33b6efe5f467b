//! Property test over damaged files: bit flips, overwritten bytes,
//! truncation, zeroed, swapped and copied pages, pages pointing to
//! themselves or elsewhere, in the database and in a hot journal. Opening
//! (recovery), checking, scanning, reading and writing must return typed
//! errors only: no panic, no hang, no huge allocation. The same code runs
//! unbounded under cargo-fuzz (fuzz/fuzz_targets/damaged_file.rs).

use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;
use twinpage::tools::crash::damage::{
    apply, decode_mutations, exercise, seed, Mutation, Seed, Target,
};

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
    S.get_or_init(|| vec![seed(512), seed(1024)])
}

/// Run one damaged image with a time limit; panics inside fail the test.
fn run(which: usize, muts: Vec<Mutation>) -> Result<(), TestCaseError> {
    let s = &seeds()[which % seeds().len()];
    let (db, journal) = apply(s, &muts);
    let (tx, rx) = mpsc::channel();
    let s2 = s.clone();
    std::thread::spawn(move || {
        let ex = exercise(&s2, db, journal);
        let _ = tx.send(ex.unexpected);
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(unexpected) => {
            prop_assert!(
                unexpected.is_empty(),
                "untyped errors {unexpected:?} for {muts:?}"
            );
            Ok(())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            Err(TestCaseError::fail(format!("hang (> 20 s) for {muts:?}")))
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(TestCaseError::fail(format!("panic for {muts:?}")))
        }
    }
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![3 => Just(Target::Db), 1 => Just(Target::Journal)]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (target(), any::<u64>(), 0u8..8).prop_map(|(target, offset, bit)| Mutation::FlipBit { target, offset, bit }),
        2 => (target(), any::<u64>(), proptest::collection::vec(any::<u8>(), 1..24))
            .prop_map(|(target, offset, bytes)| Mutation::Bytes { target, offset, bytes }),
        1 => (target(), any::<u64>()).prop_map(|(target, len)| Mutation::Truncate { target, len }),
        2 => (target(), any::<u64>()).prop_map(|(target, page)| Mutation::ZeroPage { target, page }),
        2 => (any::<u64>(), any::<u64>()).prop_map(|(a, b)| Mutation::SwapPages { a, b }),
        1 => (any::<u64>(), any::<u64>()).prop_map(|(from, to)| Mutation::CopyPage { from, to }),
        2 => any::<u64>().prop_map(|page| Mutation::SelfPointer { page }),
        2 => (any::<u64>(), any::<u64>(), prop_oneof![any::<u32>(), 0u32..200])
            .prop_map(|(page, offset, to)| Mutation::Repoint { page, offset, to }),
    ]
}

#[test]
fn undamaged_seeds_recover_cleanly() {
    for s in seeds() {
        assert!(s.journal.is_some(), "the seed has a hot journal");
        let ex = exercise(s, s.db.clone(), s.journal.clone());
        assert!(ex.opened && ex.errors.is_empty(), "{:?}", ex.errors);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn damaged_files_give_typed_errors(which in 0usize..2, muts in proptest::collection::vec(mutation(), 1..5)) {
        run(which, muts)?;
        prop_assert!(LARGEST.load(Ordering::Relaxed) <= ALLOC_LIMIT);
    }

    #[test]
    fn fuzzer_bytecode_gives_typed_errors(which in 0usize..2, bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        run(which, decode_mutations(&bytes))?;
    }
}
