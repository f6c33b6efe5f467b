//! Fuzz damaged database files: the input is a small mutation program
//! (see `damage::decode_mutations`) applied to a valid database with a hot
//! journal, or, when it starts with `raw:`, the database file itself.
//! Opening (recovery), checking, scanning, reading and writing must give
//! typed errors only; a panic, a hang or an abort on a huge allocation is a
//! finding.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use twinpage::tools::crash::damage::{apply, decode_mutations, exercise, seed, Seed};

fn seeds() -> &'static [Seed] {
    static S: OnceLock<Vec<Seed>> = OnceLock::new();
    S.get_or_init(|| vec![seed(512), seed(1024)])
}

fuzz_target!(|data: &[u8]| {
    let seeds = seeds();
    let ex = if let Some(raw) = data.strip_prefix(b"raw:") {
        exercise(&seeds[0], raw.to_vec(), None)
    } else {
        let Some((&which, prog)) = data.split_first() else {
            return;
        };
        let s = &seeds[which as usize % seeds.len()];
        let (db, journal) = apply(s, &decode_mutations(prog));
        exercise(s, db, journal)
    };
    assert!(ex.unexpected.is_empty(), "untyped errors: {:?}", ex.unexpected);
});
