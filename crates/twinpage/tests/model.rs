//! Random operation sequences against a BTreeMap model, in every mode and
//! on several page sizes, with commits, rollbacks and reopens.

mod common;

use common::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use twinpage::storage::MemVfs;
use twinpage::{Direction, JournalMode};

#[derive(Debug, Clone)]
enum Op {
    Put {
        table: u8,
        key: u16,
        len: usize,
    },
    Delete {
        table: u8,
        key: u16,
    },
    Range {
        table: u8,
        lo: u16,
        hi: u16,
        rev: bool,
    },
    Commit,
    Rollback,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => (0u8..3, 0u16..2000, prop_oneof![8 => 0usize..120, 1 => 0usize..9000])
            .prop_map(|(table, key, len)| Op::Put { table, key, len }),
        15 => (0u8..3, 0u16..2000).prop_map(|(table, key)| Op::Delete { table, key }),
        3 => (0u8..3, 0u16..2000, 0u16..2000, any::<bool>())
            .prop_map(|(table, lo, hi, rev)| Op::Range { table, lo, hi, rev }),
        3 => Just(Op::Commit),
        1 => Just(Op::Rollback),
        1 => Just(Op::Reopen),
    ]
}

fn key(k: u16) -> Vec<u8> {
    // Variable-length keys exercise separator truncation; every 11th key
    // is longer than a cell holds (it overflows into a chain), and they
    // share long prefixes, so separators between them overflow too.
    if k.is_multiple_of(11) {
        let pad = 300 + (k as usize * 37) % 5000;
        return format!("key/{}{k:05}", "x".repeat(pad)).into_bytes();
    }
    format!("key{:0width$}", k, width = (k % 7) as usize + 1).into_bytes()
}

fn value(k: u16, len: usize, salt: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i + k as usize * 31 + salt) as u8)
        .collect()
}

fn table(t: u8) -> String {
    format!("t{t}")
}

fn run(mode: JournalMode, page_size: usize, ops: &[Op]) {
    let vfs = MemVfs::new();
    let path = Path::new("/model.db");
    let mut committed: Model = BTreeMap::new();
    {
        let db = open(path, mem_opts(&vfs, mode, page_size));
        for t in 0..3 {
            db.create_table(&table(t)).unwrap();
            committed.insert(table(t), BTreeMap::new());
        }
        db.close().unwrap();
    }
    let mut working = committed.clone();
    // Each Reopen ends a session: commit, close, open again.
    for (s, session) in ops.split(|o| matches!(o, Op::Reopen)).enumerate() {
        let db = open(path, mem_opts(&vfs, mode, page_size));
        assert!(!db.stats().opened_after_crash);
        if s > 0 {
            assert_matches(&db, &committed);
        }
        let mut txn = Some(db.begin_write().unwrap());
        for (i, op) in session.iter().enumerate() {
            match op {
                Op::Put {
                    table: t,
                    key: k,
                    len,
                } => {
                    let v = value(*k, *len, i);
                    txn.as_mut().unwrap().put(&table(*t), &key(*k), &v).unwrap();
                    working.get_mut(&table(*t)).unwrap().insert(key(*k), v);
                }
                Op::Delete { table: t, key: k } => {
                    let existed = txn.as_mut().unwrap().delete(&table(*t), &key(*k)).unwrap();
                    let expected = working
                        .get_mut(&table(*t))
                        .unwrap()
                        .remove(&key(*k))
                        .is_some();
                    assert_eq!(existed, expected);
                }
                Op::Range {
                    table: t,
                    lo,
                    hi,
                    rev,
                } => {
                    let (lo, hi) = (key(*lo.min(hi)), key(*lo.max(hi)));
                    let dir = if *rev {
                        Direction::Reverse
                    } else {
                        Direction::Forward
                    };
                    let got: Vec<_> = txn
                        .as_ref()
                        .unwrap()
                        .range(
                            &table(*t),
                            (Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
                            dir,
                        )
                        .unwrap()
                        .map(|r| r.unwrap())
                        .collect();
                    let mut want: Vec<_> = if lo < hi {
                        working[&table(*t)]
                            .range(lo.clone()..hi.clone())
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    if *rev {
                        want.reverse();
                    }
                    assert_eq!(got, want);
                }
                Op::Commit => {
                    txn.take().unwrap().commit().unwrap();
                    committed = working.clone();
                    txn = Some(db.begin_write().unwrap());
                }
                Op::Rollback => {
                    txn.take().unwrap().rollback().unwrap();
                    working = committed.clone();
                    assert_matches(&db, &committed);
                    txn = Some(db.begin_write().unwrap());
                }
                Op::Reopen => unreachable!("split removes them"),
            }
        }
        txn.take().unwrap().commit().unwrap();
        drop(txn);
        committed = working.clone();
        assert_matches(&db, &committed);
        db.close().unwrap();
    }
    let db = open(path, mem_opts(&vfs, mode, page_size));
    assert_matches(&db, &committed);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_ops_match_model(
        ops in proptest::collection::vec(op(), 1..2500),
        page_size in prop_oneof![Just(512usize), Just(1024), Just(4096)],
        mode_idx in 0usize..16,
    ) {
        let mode = JournalMode::ALL[mode_idx % JournalMode::ALL.len()];
        run(mode, page_size, &ops);
    }
}

/// Deterministic deep-tree run in every mode: thousands of keys on small
/// pages give depth >= 3, and mass deletes exercise merges and the free list.
#[test]
fn deep_tree_every_mode() {
    for &mode in JournalMode::ALL {
        let vfs = MemVfs::new();
        let path = Path::new("/deep.db");
        let db = open(path, mem_opts(&vfs, mode, 512));
        db.create_table("t").unwrap();
        let mut model = BTreeMap::new();
        let mut t = db.begin_write().unwrap();
        for i in 0..6000u32 {
            let k = format!("{:08}", (i * 7919) % 6000).into_bytes();
            let v = vec![i as u8; (i % 50) as usize];
            t.put("t", &k, &v).unwrap();
            model.insert(k, v);
        }
        t.commit().unwrap();
        let report = db.check().unwrap();
        assert!(report.max_depth >= 3, "depth {}", report.max_depth);
        let mut t = db.begin_write().unwrap();
        for i in 0..6000u32 {
            if i % 4 != 0 {
                let k = format!("{i:08}").into_bytes();
                assert!(t.delete("t", &k).unwrap());
                model.remove(&k);
            }
        }
        t.commit().unwrap();
        let mut expect = Model::new();
        expect.insert("t".into(), model.clone());
        assert_matches(&db, &expect);
        let after = db.check().unwrap();
        // Modes that postpone rebalancing (IPS, [IPS] §5.2.1) keep their
        // pages; the others merge.
        if mode.spec().tree.merge {
            assert!(
                after.tree_pages < report.tree_pages / 2,
                "merges shrink the tree"
            );
        }
        // Freed pages are reused before the file grows.
        let pages = db.stats().page_count;
        let mut t = db.begin_write().unwrap();
        for i in 0..1000u32 {
            t.put("t", format!("new{i:05}").as_bytes(), b"v").unwrap();
        }
        t.commit().unwrap();
        // (The tree shapes differ by mode: IPS, which does not merge, may
        // free fewer pages than the inserts need.)
        let grown = db.stats().page_count > pages;
        let free = db.check().unwrap().free_pages;
        assert!(
            !grown || free == 0,
            "{mode:?}: the file grew by {} pages with {free} pages free",
            db.stats().page_count - pages
        );
        if after.free_pages >= 64 {
            assert_eq!(db.stats().page_count, pages, "{mode:?}: free list reused");
        }
        db.close().unwrap();
    }
}
