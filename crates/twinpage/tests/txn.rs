//! Transactions: spills, rollback, drop, locking, clean-close detection.

mod common;

use common::*;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use twinpage::storage::MemVfs;
use twinpage::{Db, Error, JournalMode, Options};

fn big_txn(db: &Db, n: u32, salt: u8) {
    let mut t = db.begin_write().unwrap();
    for i in 0..n {
        t.put("t", format!("{i:06}").as_bytes(), &[salt; 200])
            .unwrap();
    }
    t.commit().unwrap();
}

#[test]
fn transactions_larger_than_the_cache_spill_and_roll_back() {
    for &mode in JournalMode::ALL {
        let vfs = MemVfs::new();
        let path = Path::new("/spill.db");
        // 16-page cache: a 3000-row transaction must spill many times.
        let opts = mem_opts(&vfs, mode, 1024).cache_size(16 * 1024);
        let db = open(path, opts.clone());
        db.create_table("t").unwrap();
        big_txn(&db, 3000, 1);
        let before = dump(&db);
        {
            let written = db.io_counters().bytes_written;
            let mut t = db.begin_write().unwrap();
            for i in 0..3000u32 {
                t.put("t", format!("{i:06}").as_bytes(), &[2; 300]).unwrap();
            }
            for i in 3000..6000u32 {
                t.put("t", format!("{i:06}").as_bytes(), &[3; 50]).unwrap();
            }
            // Reads see the transaction's own spilled pages.
            assert_eq!(t.get("t", b"000007").unwrap().unwrap(), vec![2; 300]);
            assert_eq!(t.get("t", b"005000").unwrap().unwrap(), vec![3; 50]);
            assert!(
                db.io_counters().bytes_written > written,
                "the transaction spilled"
            );
            t.rollback().unwrap();
        }
        assert_matches(&db, &before);
        // Dropping an open transaction rolls back too.
        {
            let mut t = db.begin_write().unwrap();
            for i in 0..3000u32 {
                t.delete("t", format!("{i:06}").as_bytes()).unwrap();
            }
        }
        assert_matches(&db, &before);
        big_txn(&db, 5000, 4);
        let after = dump(&db);
        assert_eq!(after["t"].len(), 5000);
        db.close().unwrap();
        let db = open(path, opts);
        assert_matches(&db, &after);
    }
}

#[test]
fn writer_is_busy_while_a_reader_holds_shared() {
    let vfs = MemVfs::new();
    let opts = mem_opts(&vfs, JournalMode::Persist, 4096).busy_timeout(Duration::from_millis(50));
    let db = open(Path::new("/busy.db"), opts);
    db.create_table("t").unwrap();
    db.put("t", b"a", b"1").unwrap();
    let r = db.begin_read().unwrap();
    let mut w = db.begin_write().unwrap();
    w.put("t", b"a", b"2").unwrap();
    match w.commit() {
        Err(Error::Busy(_)) => {}
        other => panic!("expected Busy, got {other:?}"),
    }
    // The failed commit rolled back; the reader's view never changed.
    assert_eq!(r.get("t", b"a").unwrap().unwrap(), b"1");
    drop(r);
    db.put("t", b"a", b"3").unwrap();
    assert_eq!(db.get("t", b"a").unwrap().unwrap(), b"3");
    db.check().unwrap();
}

/// Another opener that does not share the open database (another
/// process; here, its own file system handle) finds the file locked. (A
/// second `Db::open` through the same file system shares it: tests/tables.rs.)
#[test]
fn second_open_of_the_same_file_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock.db");
    let opts = Options::default().busy_timeout(Duration::from_millis(20));
    let db = Db::open(&path, opts.clone()).unwrap();
    let other = opts
        .clone()
        .vfs(std::sync::Arc::new(twinpage::storage::OsVfs::new()));
    match Db::open(&path, other) {
        Err(Error::Locked(p)) => assert_eq!(p, path),
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("expected Locked, got a second handle"),
    }
    db.close().unwrap();
    let db = Db::open(&path, opts).unwrap();
    db.check().unwrap();
}

#[test]
fn many_threads_share_one_db() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threads.db");
    let opts = Options::default()
        .synchronous(twinpage::Synchronous::Off)
        .busy_timeout(Duration::from_secs(20));
    let db = Db::open(&path, opts).unwrap();
    db.create_table("t").unwrap();
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| {
        for w in 0..4u32 {
            let db = &db;
            s.spawn(move || {
                for i in 0..200u32 {
                    let mut t = db.begin_write().unwrap();
                    t.put("t", format!("{w}-{i:04}").as_bytes(), &i.to_be_bytes())
                        .unwrap();
                    t.commit().unwrap();
                }
            });
        }
        for _ in 0..2 {
            let (db, reads) = (&db, &reads);
            s.spawn(move || {
                for _ in 0..200 {
                    let r = db.begin_read().unwrap();
                    let n = r
                        .range("t", .., twinpage::Direction::Forward)
                        .unwrap()
                        .count();
                    // A snapshot is a whole number of committed rows.
                    assert!(n <= 800);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    assert_eq!(reads.load(Ordering::Relaxed), 400);
    assert_eq!(
        db.scan("t", .., twinpage::Direction::Forward)
            .unwrap()
            .len(),
        800
    );
    db.check().unwrap();
}

#[test]
fn clean_close_is_distinguished_from_a_crash() {
    let vfs = MemVfs::new();
    let path = Path::new("/clean.db");
    let db = open(path, mem_opts(&vfs, JournalMode::Delete, 4096));
    db.create_table("t").unwrap();
    db.close().unwrap();
    let db = open(path, mem_opts(&vfs, JournalMode::Delete, 4096));
    assert!(!db.stats().opened_after_crash);
    db.put("t", b"k", b"v").unwrap();
    // Simulate a crash: copy the files as they are, without closing.
    let crashed = vfs.duplicate();
    drop(db);
    let db = open(path, mem_opts(&crashed, JournalMode::Delete, 4096));
    assert!(db.stats().opened_after_crash);
    assert_eq!(db.get("t", b"k").unwrap().unwrap(), b"v");
    db.check().unwrap();
}

#[test]
fn tables_are_created_listed_and_dropped() {
    let vfs = MemVfs::new();
    let db = open(
        Path::new("/tables.db"),
        mem_opts(&vfs, JournalMode::Truncate, 512),
    );
    assert!(db.create_table("a").unwrap());
    assert!(!db.create_table("a").unwrap());
    db.create_table("b").unwrap();
    let mut t = db.begin_write().unwrap();
    for i in 0..2000u32 {
        t.put("b", &i.to_be_bytes(), &[7; 100]).unwrap();
    }
    t.put("a", b"x", &vec![1; 5000]).unwrap();
    t.commit().unwrap();
    let pages = db.stats().page_count;
    let mut t = db.begin_write().unwrap();
    assert_eq!(t.tables().unwrap(), vec!["a", "b"]);
    assert!(t.drop_table("b").unwrap());
    t.commit().unwrap();
    assert!(matches!(db.get("b", b"x"), Err(Error::NoSuchTable(_))));
    let r = db.check().unwrap();
    assert_eq!(r.tables, 1);
    assert!(
        r.free_pages as u32 > pages / 2,
        "dropped table's pages are free"
    );
    // Keys longer than a cell overflow into chains of their own.
    db.put("a", &vec![0; 10_000], b"long").unwrap();
    assert_eq!(db.get("a", &vec![0; 10_000]).unwrap().unwrap(), b"long");
    assert_eq!(db.max_key_len(), u32::MAX as usize);
    assert_eq!(db.get("a", b"x").unwrap().unwrap(), vec![1; 5000]);
    db.check().unwrap();
}
