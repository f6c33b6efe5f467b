//! Fuzz damaged database files in every journal mode. The first input byte
//! picks the seed (mode × page size, see `damage::all_seeds`): a valid
//! database with its auxiliary file in a crash state (hot rollback
//! journal, WAL with a torn uncommitted tail, shadow file mid protocol,
//! DHL pages with two versions). The rest is a small mutation program (see
//! `damage::decode_mutations`) that damages the database or the auxiliary
//! file. An input starting with `raw:` is the database file itself, opened
//! in `persist` mode without a journal.
//! Opening (recovery), checking, scanning, reading and writing must give
//! typed errors only; a panic, a hang or an abort on a huge allocation is a
//! finding.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use twinpage_tools::crash::damage::{
    all_seeds, apply, decode_mutations, exercise, seed_for, Seed,
};
use twinpage::JournalMode;

fn seeds() -> &'static [Seed] {
    static S: OnceLock<Vec<Seed>> = OnceLock::new();
    S.get_or_init(all_seeds)
}

/// The seed of the `raw:` path: persist on 512-byte pages, as before the
/// other modes were added.
fn raw_seed() -> &'static Seed {
    static S: OnceLock<Seed> = OnceLock::new();
    S.get_or_init(|| seed_for(JournalMode::Persist, 512))
}

fuzz_target!(|data: &[u8]| {
    let ex = if let Some(raw) = data.strip_prefix(b"raw:") {
        exercise(raw_seed(), raw.to_vec(), None)
    } else {
        let seeds = seeds();
        let Some((&which, prog)) = data.split_first() else {
            return;
        };
        let s = &seeds[which as usize % seeds.len()];
        let (db, aux) = apply(s, &decode_mutations(prog));
        exercise(s, db, aux)
    };
    assert!(
        ex.unexpected.is_empty(),
        "untyped errors: {:?}",
        ex.unexpected
    );
});
