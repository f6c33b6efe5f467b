//! The tree's split policies and sibling redistribution on overflow
//! (`TreeConfig::split`, `TreeConfig::spread`) in every mode: random
//! inserts, updates and deletes against a model, ending with the
//! integrity check; and what each policy does to the tree's shape.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use twinpage::storage::MemVfs;
use twinpage::JournalMode;

fn run(mode: JournalMode, spread: bool, split: &str, seed: u64) -> (u32, u32) {
    let vfs = MemVfs::new();
    let path = Path::new("/policies.db");
    let mut opts = mem_opts(&vfs, mode, 512);
    opts.set("spread", if spread { "1" } else { "0" }).unwrap();
    opts.set("split", split).unwrap();
    let db = open(path, opts);
    db.create_table("t").unwrap();
    let mut model = BTreeMap::new();
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..6 {
        let mut t = db.begin_write().unwrap();
        for _ in 0..400 {
            let r = next();
            // Some keys overflow their cells (and the separators
            // between them, which share a long prefix).
            let long = if (r % 3000).is_multiple_of(7) {
                500 + r % 2000
            } else {
                0
            };
            let k = format!("k{}{:05}", "/".repeat(long as usize), r % 3000).into_bytes();
            if round >= 3 && r % 3 == 0 {
                let existed = t.delete("t", &k).unwrap();
                assert_eq!(existed, model.remove(&k).is_some());
            } else {
                let v = vec![(r >> 8) as u8; (r % 40) as usize];
                t.put("t", &k, &v).unwrap();
                model.insert(k, v);
            }
        }
        t.commit().unwrap();
        let mut want = Model::new();
        want.insert("t".into(), model.clone());
        assert_matches(&db, &want);
    }
    let report = db.check().unwrap();
    let pages = db.stats().page_count;
    db.close().unwrap();
    (report.tree_pages as u32, pages)
}

#[test]
fn every_policy_matches_the_model_in_every_mode() {
    for &mode in JournalMode::ALL {
        for spread in [false, true] {
            for split in ["keep-left", "copy-both"] {
                run(mode, spread, split, 0x9E37_79B9_7F4A_7C15);
            }
        }
    }
}

#[test]
fn spreading_fills_pages_better_than_splitting() {
    let mode = JournalMode::Persist;
    let (split_pages, _) = run(mode, false, "keep-left", 7);
    let (spread_pages, _) = run(mode, true, "keep-left", 7);
    assert!(
        spread_pages < split_pages,
        "sibling redistribution should need fewer tree pages: {spread_pages} vs {split_pages}"
    );
}

/// An append that splits a leaf no transaction has written since it
/// committed leaves that leaf as it stands: only the new right leaf, the
/// parent and the header are written (SQLite's `balance_quick`). In `off`
/// every page is one write, so a commit whose leaf split (the page count
/// grew by one) writes three pages, where it wrote four while the left
/// half was put again. The in-page formats keep one cell of slack on the
/// left page, which is then the committed leaf less its last cell, put as
/// that one removal (DHL's delete patch; IPS and MVBT lay it out by the
/// hint). Every mode keeps the model and passes the check.
#[test]
fn an_append_split_leaves_the_committed_left_leaf_unwritten() {
    for mode in [
        JournalMode::Off,
        JournalMode::Wal,
        JournalMode::Persist,
        JournalMode::Shadow,
        JournalMode::DhlCc,
        JournalMode::DhlTc,
        JournalMode::Ips,
        JournalMode::LsMvbt,
        JournalMode::Mvbt,
    ] {
        let vfs = MemVfs::new();
        let path = Path::new("/append.db");
        let db = open(path, mem_opts(&vfs, mode, 512));
        db.create_table("t").unwrap();
        let mut model = BTreeMap::new();
        let mut split_commits = 0;
        for i in 0u64..600 {
            let before = (db.stats().page_count, db.stats().io.write_calls);
            let (k, v) = (i.to_be_bytes().to_vec(), vec![i as u8; 20]);
            db.put("t", &k, &v).unwrap();
            model.insert(k, v);
            let after = (db.stats().page_count, db.stats().io.write_calls);
            if mode == JournalMode::Off && after.0 == before.0 + 1 {
                split_commits += 1;
                assert_eq!(after.1 - before.1, 3, "append {i}: pages written");
            }
        }
        if mode == JournalMode::Off {
            assert!(split_commits > 20, "{split_commits} leaf splits");
        }
        let mut want = Model::new();
        want.insert("t".into(), model);
        assert_matches(&db, &want);
        db.check().unwrap();
        db.close().unwrap();
    }
}
