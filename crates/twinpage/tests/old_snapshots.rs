//! Readers of old snapshots while a small cache forgets page TIDs (pager
//! P16): the pager prunes its map of each page's last commit once no
//! registered snapshot is older than the commit. With an 8-page cache the
//! map is pruned every few dozen pages written, so these workloads prune it
//! many times while readers hold snapshots of different ages.

mod common;

use common::*;
use std::path::Path;
use twinpage::storage::MemVfs;
use twinpage::{JournalMode, ReadTxn};

fn key(i: u32) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

/// 3,000 rows over about 200 pages of 1 KiB, then 2,000 single-row
/// commits spread over all of them; a reader opened at the start and one
/// opened every 400 commits must each see their snapshot exactly, before
/// and after the readers older than them close. Returns how many of those
/// checks read (the others were refused as too old, which only MVBT may).
fn readers_keep_their_snapshots(mode: JournalMode) -> usize {
    let vfs = MemVfs::new();
    let o = mem_opts(&vfs, mode, 1024).cache_size(8 * 1024);
    let db = open(Path::new("/snap.db"), o);
    db.create_table("t").unwrap();
    let mut model = Rows::new();
    let mut t = db.begin_write().unwrap();
    for i in 0..3000 {
        t.put("t", &key(i), b"v0").unwrap();
        model.insert(key(i), b"v0".to_vec());
    }
    t.commit().unwrap();
    let mut readers = vec![(db.begin_read().unwrap(), model.clone())];
    let (mut read, mut refused) = (0, 0);
    let mut check = |r: &ReadTxn, snap: &Rows, at: &str| match snapshot_view(r) {
        Some(rows) => {
            assert_eq!(&rows, snap, "{mode:?} {at}");
            read += 1;
        }
        None => refused += 1,
    };
    for i in 0..2000u32 {
        let k = key(i * 7919 % 3000);
        if i % 9 == 8 {
            db.delete("t", &k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("v{i}-{}", "x".repeat((i % 40) as usize)).into_bytes();
            db.put("t", &k, &v).unwrap();
            model.insert(k, v);
        }
        if i % 400 == 399 {
            for (r, snap) in &readers {
                check(r, snap, &format!("after {i} commits"));
            }
            readers.push((db.begin_read().unwrap(), model.clone()));
            if readers.len() == 3 {
                // The oldest goes: what only it needed may be forgotten now.
                readers.remove(0);
            }
        }
    }
    for (r, snap) in &readers {
        check(r, snap, "at the end");
    }
    drop(readers);
    assert_eq!(
        snapshot_view(&db.begin_read().unwrap()).as_ref(),
        Some(&model)
    );
    // No reader: commits may forget every earlier one. Then a reader
    // again, through commits to the pages forgotten.
    let churn = |model: &mut Rows, from: u32| {
        for i in from..from + 600 {
            let k = key(i * 104_729 % 3000);
            let v = format!("w{i}").into_bytes();
            db.put("t", &k, &v).unwrap();
            model.insert(k, v);
        }
    };
    churn(&mut model, 0);
    let (r, snap) = (db.begin_read().unwrap(), model.clone());
    churn(&mut model, 600);
    check(&r, &snap, "after the churn");
    drop(r);
    let mut m = Model::new();
    m.insert("t".into(), model);
    assert_matches(&db, &m);
    assert!(
        mode != JournalMode::Wal || refused == 0,
        "WAL refused {refused}"
    );
    read
}

#[test]
fn wal_readers_keep_their_snapshots_while_page_tids_are_pruned() {
    assert_eq!(readers_keep_their_snapshots(JournalMode::Wal), 12);
}

#[test]
fn mvbt_readers_keep_their_snapshots_while_page_tids_are_pruned() {
    for mode in [JournalMode::Mvbt, JournalMode::LsMvbt] {
        let read = readers_keep_their_snapshots(mode);
        assert!(read > 0, "{mode:?}: every old snapshot refused");
        eprintln!("{mode:?}: {read} of 12 old-snapshot reads");
    }
}
