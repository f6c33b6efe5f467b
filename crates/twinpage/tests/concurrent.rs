//! Several write transactions at once: the multi-writer pager layer (page
//! 1 merged at commit, the shared allocator, commits installed for
//! readers) under each protocol that runs more than one writer.

mod common;

use common::{assert_matches, dump, mem_opts, Model};
use std::sync::Arc;
use twinpage::cc::Protocol;
use twinpage::storage::MemVfs;
use twinpage::{Db, Error, JournalMode, Options};

const PATH: &str = "/c.db";

/// The (mode, protocol) pairs with several writers whose writers on
/// different pages do not wait for each other (page-lock-range's commits
/// lock every page up to their last, the catalog included, so a commit
/// waits for every other open transaction).
fn disjoint_pairs() -> Vec<(JournalMode, Protocol)> {
    let mut v = multi_writer_pairs();
    v.retain(|&(_, p)| p != Protocol::PageLockRange);
    v
}

/// The (mode, protocol) pairs with several writers.
fn multi_writer_pairs() -> Vec<(JournalMode, Protocol)> {
    let mut v = Vec::new();
    for &m in JournalMode::ALL {
        for &p in m.spec().protocols {
            if p != Protocol::Sqlite {
                v.push((m, p));
            }
        }
    }
    v
}

fn opts(vfs: &MemVfs, mode: JournalMode, p: Protocol) -> Options {
    mem_opts(vfs, mode, 1024).concurrency(p)
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

#[test]
fn a_protocol_the_mode_does_not_allow_is_refused() {
    let vfs = MemVfs::new();
    let r = Db::open(
        PATH,
        mem_opts(&vfs, JournalMode::Persist, 1024).concurrency(Protocol::BeginConcurrent),
    );
    match r {
        Err(Error::Unsupported(m)) => assert!(m.contains("begin-concurrent"), "{m}"),
        r => panic!("{:?}", r.map(|_| ())),
    }
    let mut o = Options::default();
    assert!(o.set("concurrency", "no-such-protocol").is_err());
    o.set("concurrency", "begin-concurrent").unwrap();
    assert_eq!(o.protocol(), Protocol::BeginConcurrent);
}

#[test]
fn writers_on_different_pages_both_commit() {
    for (mode, p) in disjoint_pairs() {
        let vfs = MemVfs::new();
        let db = Db::open(PATH, opts(&vfs, mode, p)).unwrap();
        assert_eq!(db.stats().concurrency, p);
        db.create_table("a").unwrap();
        db.create_table("b").unwrap();
        let mut t1 = db.begin_write().unwrap();
        let mut t2 = db.begin_write().unwrap();
        // Enough rows that both tables split: both allocate pages at once.
        for i in 0..200 {
            t1.put("a", &key(i), &[1u8; 40]).unwrap();
            t2.put("b", &key(i), &[2u8; 40]).unwrap();
        }
        let r = db.begin_read().unwrap();
        if p.orders_commits() {
            // 2VTO commits in begin order: the younger would wait for t1.
            t1.commit().unwrap();
            t2.commit().unwrap();
        } else {
            t2.commit().unwrap();
            t1.commit().unwrap();
        }
        // A reader that began before both sees neither (a snapshot) or,
        // if it locks pages as it reads (rollback modes under page
        // locks), both: it comes after them in the serial order.
        let seen = (r.get("a", &key(0)).unwrap(), r.get("b", &key(0)).unwrap());
        assert_eq!(seen.0.is_some(), seen.1.is_some(), "{mode} {p}");
        drop(r);
        let mut m = Model::new();
        for (t, v) in [("a", 1u8), ("b", 2)] {
            let rows = m.entry(t.to_string()).or_default();
            for i in 0..200 {
                rows.insert(key(i), vec![v; 40]);
            }
        }
        assert_matches(&db, &m);
        let fcc = db.stats().fcc;
        db.close().unwrap();
        let db = Db::open(PATH, opts(&vfs, mode, p)).unwrap();
        assert_matches(&db, &m);
        // The clean close committed its header once more.
        assert_eq!(db.stats().fcc, fcc + 1);
        db.close().unwrap();
        // The trunk pages written at the clean close serve the one-writer
        // protocol too.
        let db = Db::open(PATH, mem_opts(&vfs, mode, 1024)).unwrap();
        assert_matches(&db, &m);
    }
}

#[test]
fn a_conflict_names_the_page_and_table() {
    let vfs = MemVfs::new();
    let db = Db::open(
        PATH,
        opts(&vfs, JournalMode::Wal, Protocol::BeginConcurrent),
    )
    .unwrap();
    db.create_table("t").unwrap();
    db.put("t", b"x", b"0").unwrap();
    let mut t1 = db.begin_write().unwrap();
    let mut t2 = db.begin_write().unwrap();
    t1.put("t", b"x", b"1").unwrap();
    t2.put("t", b"x", b"2").unwrap();
    t1.commit().unwrap();
    match t2.commit() {
        Err(Error::Conflict { page, table, what }) => {
            assert!(page > 2, "{page}");
            assert_eq!(table.as_deref(), Some("t"), "{what}");
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(db.get("t", b"x").unwrap().as_deref(), Some(&b"1"[..]));
    db.check().unwrap();
}

#[test]
fn write_skew_is_refused() {
    // Each reads the row the other writes; both rows on different pages.
    let vfs = MemVfs::new();
    let db = Db::open(
        PATH,
        opts(&vfs, JournalMode::Wal, Protocol::BeginConcurrent),
    )
    .unwrap();
    db.create_table("x").unwrap();
    db.create_table("y").unwrap();
    db.put("x", b"v", b"1").unwrap();
    db.put("y", b"v", b"1").unwrap();
    let mut t1 = db.begin_write().unwrap();
    let mut t2 = db.begin_write().unwrap();
    assert!(t1.get("x", b"v").unwrap().is_some());
    assert!(t2.get("y", b"v").unwrap().is_some());
    t1.put("y", b"v", b"0").unwrap();
    t2.put("x", b"v", b"0").unwrap();
    t1.commit().unwrap();
    assert!(matches!(t2.commit(), Err(Error::Conflict { .. })));
    db.check().unwrap();
}

#[test]
fn no_lost_update_with_retries() {
    for (mode, p) in multi_writer_pairs() {
        let vfs = MemVfs::new();
        let db = Arc::new(Db::open(PATH, opts(&vfs, mode, p)).unwrap());
        db.create_table("c").unwrap();
        for k in 0..4u32 {
            db.put("c", &key(k), &0u64.to_be_bytes()).unwrap();
        }
        let threads = 4;
        let per = 50;
        std::thread::scope(|s| {
            for t in 0..threads {
                let db = &db;
                s.spawn(move || {
                    for i in 0..per {
                        let k = key((t + i) % 4);
                        db.write(|w| {
                            let v = w.get("c", &k)?.expect("counter");
                            let n = u64::from_be_bytes(v.try_into().unwrap());
                            w.put("c", &k, &(n + 1).to_be_bytes())
                        })
                        .unwrap();
                    }
                });
            }
        });
        let total: u64 = dump(&db)["c"]
            .values()
            .map(|v| u64::from_be_bytes(v.clone().try_into().unwrap()))
            .sum();
        assert_eq!(total, (threads * per) as u64, "{mode} {p}");
        db.check().unwrap();
    }
}

#[test]
fn a_rolled_back_writer_returns_its_pages() {
    for (mode, p) in disjoint_pairs() {
        let vfs = MemVfs::new();
        let db = Db::open(PATH, opts(&vfs, mode, p)).unwrap();
        db.create_table("a").unwrap();
        db.create_table("b").unwrap();
        let mut t1 = db.begin_write().unwrap();
        let mut t2 = db.begin_write().unwrap();
        for i in 0..300 {
            t1.put("a", &key(i), &[1u8; 60]).unwrap();
            t2.put("b", &key(i), &[2u8; 60]).unwrap();
        }
        // t2 holds pages above the committed count while t1 commits: they
        // are written as zeros and free in the committed state.
        t1.commit().unwrap();
        db.check().unwrap();
        let pages = db.stats().page_count;
        t2.rollback().unwrap();
        db.check().unwrap();
        // The returned pages are reused, not the file grown.
        let mut t3 = db.begin_write().unwrap();
        for i in 0..300 {
            t3.put("b", &key(i), &[3u8; 60]).unwrap();
        }
        t3.commit().unwrap();
        assert!(db.stats().page_count <= pages + 2, "{mode} {p}");
        db.check().unwrap();
    }
}

#[test]
fn a_crash_leaves_a_free_list_the_walk_rebuilds() {
    for (mode, p) in multi_writer_pairs() {
        let vfs = MemVfs::new();
        let db = Db::open(PATH, opts(&vfs, mode, p)).unwrap();
        db.create_table("a").unwrap();
        for i in 0..400 {
            db.put("a", &key(i), &[1u8; 50]).unwrap();
        }
        for i in 0..400 {
            db.delete("a", &key(i)).unwrap();
        }
        assert!(db.stats().free_pages > 0);
        let m = dump(&db);
        // Power stays on, the process dies: the file as it is now.
        let crashed = vfs.duplicate();
        drop(db);
        // Reopened in the same protocol, and with the one-writer protocol
        // (which keeps the list in trunk pages).
        for q in [p, Protocol::Sqlite] {
            let vfs = crashed.duplicate();
            let db = Db::open(PATH, opts(&vfs, mode, q)).unwrap();
            assert!(db.stats().opened_after_crash);
            assert_matches(&db, &m);
            for i in 0..100 {
                db.put("a", &key(i), &[2u8; 50]).unwrap();
            }
            db.check().unwrap();
            db.close().unwrap();
            let db = Db::open(PATH, opts(&vfs, mode, q)).unwrap();
            db.check().unwrap();
        }
    }
}

#[test]
fn page_locks_keep_a_committer_off_pages_a_reader_holds() {
    use std::time::Duration;
    let vfs = MemVfs::new();
    let o = opts(&vfs, JournalMode::Persist, Protocol::PageLock)
        .busy_timeout(Duration::from_millis(200));
    let db = Arc::new(Db::open(PATH, o).unwrap());
    db.create_table("a").unwrap();
    db.create_table("b").unwrap();
    db.put("a", b"x", b"1").unwrap();
    db.put("b", b"y", b"1").unwrap();
    // The reader holds SHARED on a's leaf (and the catalog).
    let r = db.begin_read().unwrap();
    assert_eq!(r.get("a", b"x").unwrap().as_deref(), Some(&b"1"[..]));
    // A writer of another table commits while the reader runs.
    db.put("b", b"y", b"2").unwrap();
    // A writer of a's leaf waits for the reader, then times out (Busy).
    let mut w = db.begin_write().unwrap();
    w.put("a", b"x", b"2").unwrap();
    assert!(matches!(w.commit(), Err(Error::Busy(_))));
    // Repeatable read: the reader still sees its value.
    assert_eq!(r.get("a", b"x").unwrap().as_deref(), Some(&b"1"[..]));
    // Once the reader is gone (from another thread, later), the commit
    // goes through.
    let db2 = db.clone();
    let t = std::thread::spawn(move || {
        let mut w = db2.begin_write().unwrap();
        w.put("a", b"x", b"3").unwrap();
        w.commit()
    });
    std::thread::sleep(Duration::from_millis(20));
    drop(r);
    t.join().unwrap().unwrap();
    assert_eq!(db.get("a", b"x").unwrap().as_deref(), Some(&b"3"[..]));
    db.check().unwrap();
}

#[test]
fn two_writers_upgrading_the_same_page_do_not_deadlock() {
    for mode in [JournalMode::Wal, JournalMode::Persist] {
        let vfs = MemVfs::new();
        let db = Arc::new(Db::open(PATH, opts(&vfs, mode, Protocol::PageLock)).unwrap());
        db.create_table("a").unwrap();
        db.put("a", b"x", b"0").unwrap();
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|i| {
                    let (db, barrier) = (&db, &barrier);
                    s.spawn(move || {
                        let mut w = db.begin_write().unwrap();
                        w.get("a", b"x").unwrap();
                        barrier.wait(); // both hold SHARED on the leaf
                        w.put("a", b"x", &[b'1' + i]).unwrap();
                        w.commit()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let conflicts = results
            .iter()
            .filter(|r| matches!(r, Err(Error::Conflict { .. })))
            .count();
        assert_eq!((ok, conflicts), (1, 1), "{mode}: {results:?}");
        db.check().unwrap();
    }
}
