//! Leaves patched in place (`PageWrite::patch_leaf`): a one-row change to
//! a leaf whose logical view the cache does not hold (a value replaced by
//! one of its size, a cell inserted or removed; in IPS any put, appended;
//! in the MVBT modes any put, as a new cell beside the one it ends)
//! is written as a patch of the page, without decoding it. Every
//! mode runs the same random single-row and multi-row transactions
//! (same-size and resized updates, inserts, deletes, reads of a patched
//! page in the same transaction, rollbacks, savepoints, reopens) on a
//! cache far smaller than the table, against a `BTreeMap` model; the
//! slotted modes must take the patch path, and every mode ends with the
//! integrity check.

use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use twinpage::storage::MemVfs;
use twinpage::{Db, Direction, JournalMode, Options, Synchronous};

const ROWS: u64 = 3000;

fn key(i: u64) -> [u8; 8] {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % ROWS).to_be_bytes()
}

fn value(rng: &mut rand::rngs::StdRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.random()).collect()
}

fn open(vfs: &MemVfs, mode: JournalMode, page_size: usize) -> Db {
    let opts = Options {
        journal_mode: mode,
        synchronous: Synchronous::Normal,
        page_size,
        // 64 KiB for a table of about 300 pages (1200 at 1 KiB): most
        // leaves are not cached.
        cache_size: 64 * 1024,
        vfs: Some(Arc::new(vfs.clone())),
        ..Options::default()
    };
    Db::open(Path::new("/patch.db"), opts).unwrap()
}

fn check_model(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, mode: JournalMode) {
    let got = db.scan("t", .., Direction::Forward).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got.len(), want.len(), "{mode}: row count");
    assert!(got == want, "{mode}: contents differ from the model");
}

#[test]
fn leaves_patched_in_place_match_the_model() {
    patched_in_place(4096);
}

/// Small pages: leaves run out of room often, so the patches that place a
/// cell (and decline when it does not fit) meet full pages.
#[test]
fn leaves_patched_in_place_match_the_model_on_small_pages() {
    patched_in_place(1024);
}

fn patched_in_place(page_size: usize) {
    for &mode in JournalMode::ALL {
        let vfs = MemVfs::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut model = BTreeMap::new();
        let mut db = open(&vfs, mode, page_size);
        let mut patched = 0;
        db.create_table("t").unwrap();
        let mut t = db.begin_write().unwrap();
        for i in 0..ROWS {
            let v = value(&mut rng, 100);
            t.put("t", &key(i), &v).unwrap();
            model.insert(key(i).to_vec(), v);
        }
        t.commit().unwrap();
        for round in 0..6 {
            for _ in 0..400 {
                let k = key(rng.random_range(0..ROWS + 200)).to_vec();
                match rng.random_range(0..100) {
                    // A same-size update: the patch path when the leaf's
                    // node is not cached.
                    0..=69 => {
                        let len = model.get(&k).map_or(100, Vec::len);
                        let v = value(&mut rng, len);
                        db.put("t", &k, &v).unwrap();
                        model.insert(k, v);
                    }
                    70..=79 => {
                        let len = rng.random_range(1..300);
                        let v = value(&mut rng, len);
                        db.put("t", &k, &v).unwrap();
                        model.insert(k, v);
                    }
                    80..=87 => {
                        assert_eq!(db.delete("t", &k).unwrap(), model.remove(&k).is_some());
                    }
                    // Several rows in one transaction, a page read back
                    // after it was patched; committed or rolled back.
                    _ => {
                        let mut t = db.begin_write().unwrap();
                        let mut staged = model.clone();
                        let mut savepoint = None;
                        for step in 0..rng.random_range(1..6) {
                            if step == 1 {
                                savepoint = Some((t.savepoint().unwrap(), staged.clone()));
                            }
                            let k = key(rng.random_range(0..ROWS)).to_vec();
                            let len = staged.get(&k).map_or(100, Vec::len);
                            let v = value(&mut rng, len);
                            t.put("t", &k, &v).unwrap();
                            assert_eq!(t.get("t", &k).unwrap().as_deref(), Some(&v[..]));
                            staged.insert(k, v);
                        }
                        let undo = rng.random_bool(0.3);
                        if let Some((sp, at)) = savepoint.take().filter(|_| undo) {
                            t.rollback_to(sp).unwrap();
                            staged = at;
                        }
                        if rng.random_bool(0.3) {
                            t.rollback().unwrap();
                        } else {
                            t.commit().unwrap();
                            model = staged;
                        }
                    }
                }
            }
            check_model(&db, &model, mode);
            if round % 2 == 1 {
                patched += db.stats().leaves_patched;
                db.close().unwrap();
                db = open(&vfs, mode, page_size);
                check_model(&db, &model, mode);
            }
        }
        patched += db.stats().leaves_patched;
        eprintln!("{mode:<9} {page_size}: leaf changes patched in place: {patched}");
        if matches!(
            mode.name(),
            "off"
                | "delete"
                | "truncate"
                | "persist"
                | "wal"
                | "shadow"
                | "shadow-x"
                | "dhl-tc"
                | "dhl-cc"
                | "ips"
                | "mvbt"
                | "ls-mvbt"
        ) {
            assert!(patched > 100, "{mode}: only {patched} leaf changes patched");
        }
        db.check().unwrap();
        db.close().unwrap();
    }
}

/// A file written by `off` without metadata embedding, whose leaves' cells
/// reach the page's last bytes, then patched with it: the format with the
/// embedding clears a 16-byte trailer at the end of every page it writes,
/// so it must not patch a page whose cells lie there (it encodes the page
/// in full instead), or the cell there is destroyed.
#[test]
fn off_switched_to_embedding_does_not_patch_over_a_cell_in_the_trailer() {
    let vfs = MemVfs::new();
    let path = Path::new("/switch.db");
    let opts = |embed: &str| {
        let mut o = Options {
            journal_mode: JournalMode::Off,
            page_size: 512,
            vfs: Some(Arc::new(vfs.clone())),
            ..Options::default()
        };
        o.set("embed", embed).unwrap();
        o
    };
    let mut model = BTreeMap::new();
    {
        let db = Db::open(path, opts("0")).unwrap();
        db.create_table("t").unwrap();
        let mut w = db.begin_write().unwrap();
        for i in 0..20u32 {
            let k = format!("k{i:02}").into_bytes();
            w.put("t", &k, b"v").unwrap();
            model.insert(k, b"v".to_vec());
        }
        w.commit().unwrap();
        db.close().unwrap();
    }
    let db = Db::open(path, opts("1")).unwrap();
    for k in [&b"k15x"[..], b"k03y", b"k19z"] {
        db.put("t", k, b"w").unwrap();
        model.insert(k.to_vec(), b"w".to_vec());
    }
    db.delete("t", b"k07").unwrap();
    model.remove(&b"k07"[..]);
    check_model(&db, &model, JournalMode::Off);
    db.check().unwrap();
}
