//! Appending splits onto a committed, unwritten leaf (the in-page formats
//! put the left half as the committed leaf less its last cell,
//! `LeafChange::Removed`), with reader snapshots held, rollbacks and
//! reopens; MVBT one-cell writes whose new member lands inside the slot
//! order, under held snapshots (no member dropped, so the body checksum
//! is patched). Every step is compared with a model, every reader with
//! the model as of its snapshot, and the database passes the integrity
//! check, also after a reopen (which verifies every checksum from the
//! file).

mod common;

use common::{snapshot_view, Rows};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::Arc;
use twinpage::cc::Locking;
use twinpage::storage::MemVfs;
use twinpage::{Db, Direction, JournalMode, Options, ReadTxn, Synchronous};

fn open(vfs: &MemVfs, mode: JournalMode, page_size: usize, cache_pages: usize) -> Db {
    let opts = Options {
        journal_mode: mode,
        synchronous: Synchronous::Normal,
        page_size,
        cache_size: cache_pages * page_size,
        vfs: Some(Arc::new(vfs.clone())),
        ..Options::default()
    };
    Db::open(Path::new("/appends.db"), opts).unwrap()
}

fn scan(db: &Db) -> Rows {
    db.scan("t", .., Direction::Forward)
        .unwrap()
        .into_iter()
        .collect()
}

fn check_reader(r: &ReadTxn, want: &Rows, at: &str) {
    if let Some(got) = snapshot_view(r) {
        assert!(got == *want, "{at}: reader snapshot");
    }
}

/// Readers never block the writer (they may be held across commits).
fn readers_coexist(mode: JournalMode) -> bool {
    mode.spec().locking == Locking::Wal
}

fn modes() -> Vec<JournalMode> {
    JournalMode::ALL.to_vec()
}

fn value(rng: &mut rand::rngs::StdRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.random()).collect()
}

/// Sequential keys one (or a few) per transaction: every append lands on
/// the committed, unwritten rightmost leaf, and splits it the appending
/// way. Mixed in: updates of earlier keys (the slack the split keeps),
/// overflow values, reads in the writing transaction, rollbacks, reader
/// snapshots held across commits, reopens.
fn appending_splits(page_size: usize, seed: u64) {
    for mode in modes() {
        let vfs = MemVfs::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut db = open(&vfs, mode, page_size, 12);
        db.create_table("t").unwrap();
        let mut model = Rows::new();
        let mut next = 0u64;
        let mut readers: Vec<(ReadTxn, Rows)> = Vec::new();
        for step in 0..1500 {
            let mut t = db.begin_write().unwrap();
            let mut staged = model.clone();
            let appends = if rng.random_bool(0.8) {
                1
            } else {
                rng.random_range(2..4)
            };
            for _ in 0..appends {
                let k = next.to_be_bytes().to_vec();
                next += 1;
                let len = match rng.random_range(0..100) {
                    0..=4 => rng.random_range(page_size / 2..page_size * 2),
                    5..=20 => rng.random_range(150..page_size / 5),
                    _ => rng.random_range(8..80),
                };
                let v = value(&mut rng, len);
                t.put("t", &k, &v).unwrap();
                staged.insert(k, v);
            }
            if rng.random_bool(0.15) && next > 10 {
                // An update of a cell on a left page.
                let k = rng.random_range(0..next).to_be_bytes().to_vec();
                let len = rng.random_range(8..80);
                let v = value(&mut rng, len);
                t.put("t", &k, &v).unwrap();
                staged.insert(k, v);
            }
            if rng.random_bool(0.05) && next > 10 {
                let k = rng.random_range(0..next).to_be_bytes().to_vec();
                assert_eq!(t.delete("t", &k).unwrap(), staged.remove(&k).is_some());
            }
            if rng.random_bool(0.1) {
                let got: Rows = t
                    .range("t", .., Direction::Forward)
                    .unwrap()
                    .map(|kv| kv.unwrap())
                    .collect();
                assert!(got == staged, "{mode} step {step}: in-transaction view");
            }
            if rng.random_bool(0.1) {
                t.rollback().unwrap();
                next -= appends as u64;
            } else {
                t.commit().unwrap();
                model = staged;
            }
            if readers_coexist(mode) && rng.random_bool(0.05) && readers.len() < 3 {
                readers.push((db.begin_read().unwrap(), model.clone()));
            }
            if !readers.is_empty() && rng.random_bool(0.04) {
                let (r, want) = readers.remove(0);
                check_reader(&r, &want, &format!("{mode} step {step}: reader snapshot"));
            }
            if step % 300 == 299 {
                for (r, want) in readers.drain(..) {
                    check_reader(&r, &want, &format!("{mode} step {step}: reader snapshot"));
                }
                assert!(scan(&db) == model, "{mode} step {step}: contents");
                db.check()
                    .unwrap_or_else(|e| panic!("{mode} step {step}: {e}"));
                db.close().unwrap();
                db = open(&vfs, mode, page_size, 12);
                assert!(
                    scan(&db) == model,
                    "{mode} step {step}: contents after reopen"
                );
            }
        }
        for (r, want) in readers.drain(..) {
            check_reader(&r, &want, &format!("{mode}: reader snapshot"));
        }
        assert!(scan(&db) == model, "{mode}: contents");
        db.check().unwrap_or_else(|e| panic!("{mode}: {e}"));
        db.close().unwrap();
        let db = open(&vfs, mode, page_size, 12);
        assert!(scan(&db) == model, "{mode}: contents after reopen");
        db.check()
            .unwrap_or_else(|e| panic!("{mode}: after reopen: {e}"));
        eprintln!("{mode:<9} {page_size}: {} rows", model.len());
    }
}

#[test]
fn appending_splits_onto_committed_leaves_1k() {
    appending_splits(1024, 39);
}

#[test]
fn appending_splits_onto_committed_leaves_4k() {
    appending_splits(4096, 40);
}

/// MVBT: one-row transactions over a small key space (slots freed by lazy
/// GC get reused, so a new member often lands inside the slot order),
/// with reader snapshots held for a while (ended members stay, no member
/// is dropped: the body checksum is patched), deletes, updates to values
/// of other sizes, reopens.
#[test]
fn mvbt_members_inside_the_slot_order_under_snapshots() {
    for mode in modes()
        .into_iter()
        .filter(|m| m.name() == "mvbt" || m.name() == "ls-mvbt")
    {
        for page_size in [1024, 4096] {
            let vfs = MemVfs::new();
            let mut rng = rand::rngs::StdRng::seed_from_u64(page_size as u64);
            let mut db = open(&vfs, mode, page_size, 8);
            db.create_table("t").unwrap();
            let mut model = Rows::new();
            let keys = (page_size / 40) as u64;
            let mut readers: Vec<(ReadTxn, Rows)> = Vec::new();
            for step in 0..4000 {
                let k = (rng.random_range(0..keys) * 7919 % 100_000)
                    .to_be_bytes()
                    .to_vec();
                if rng.random_bool(0.35) {
                    assert_eq!(db.delete("t", &k).unwrap(), model.remove(&k).is_some());
                } else {
                    let len = rng.random_range(1..24);
                    let v = value(&mut rng, len);
                    db.put("t", &k, &v).unwrap();
                    model.insert(k, v);
                }
                if readers_coexist(mode) && rng.random_bool(0.08) && readers.len() < 4 {
                    readers.push((db.begin_read().unwrap(), model.clone()));
                }
                if !readers.is_empty() && rng.random_bool(0.05) {
                    let i = rng.random_range(0..readers.len());
                    let (r, want) = readers.remove(i);
                    check_reader(&r, &want, &format!("{mode} step {step}: reader snapshot"));
                }
                if step % 1000 == 999 {
                    for (r, want) in readers.drain(..) {
                        check_reader(&r, &want, &format!("{mode} step {step}: reader"));
                    }
                    db.check()
                        .unwrap_or_else(|e| panic!("{mode} step {step}: {e}"));
                    db.close().unwrap();
                    db = open(&vfs, mode, page_size, 8);
                    assert!(scan(&db) == model, "{mode} step {step}: after reopen");
                    db.check()
                        .unwrap_or_else(|e| panic!("{mode} step {step}: reopened: {e}"));
                }
            }
            for (r, want) in readers.drain(..) {
                check_reader(&r, &want, &format!("{mode}: reader"));
            }
            assert!(scan(&db) == model, "{mode}: contents");
            db.check().unwrap();
        }
    }
}
