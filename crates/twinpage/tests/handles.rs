//! Transactions own their database: they move between threads, outlive the
//! `Db` value that opened them, and the database closes cleanly after the
//! last of them. `Db::write` retries conflicts. Read-only opens never
//! write, whatever the file holds.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};
use twinpage::{Db, Error, JournalMode, Options};

fn opts(mode: JournalMode) -> Options {
    Options::default()
        .journal_mode(mode)
        .busy_timeout(Duration::from_millis(200))
}

fn fill(db: &Db, n: u32) {
    db.create_table("t").unwrap();
    let mut t = db.begin_write().unwrap();
    for i in 0..n {
        t.put("t", &i.to_be_bytes(), &[7u8; 50]).unwrap();
    }
    t.commit().unwrap();
}

#[test]
fn a_read_txn_moves_to_another_thread_and_outlives_its_scope() {
    for &mode in JournalMode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let txn = {
            let db = Db::open(&path, opts(mode)).unwrap();
            fill(&db, 100);
            let txn = db.begin_read().unwrap();
            // The Db value goes away here; the transaction keeps the
            // database open.
            assert!(matches!(db.close(), Err(Error::Busy(_))), "{mode}");
            txn
        };
        let got = std::thread::spawn(move || {
            let v = txn.get("t", &42u32.to_be_bytes()).unwrap();
            let n = txn
                .range("t", .., twinpage::Direction::Forward)
                .unwrap()
                .count();
            (v, n)
        })
        .join()
        .unwrap();
        assert_eq!(got, (Some(vec![7u8; 50]), 100), "{mode}");
        // The last handle is gone: the database was closed cleanly.
        let db = Db::open(&path, opts(mode)).unwrap();
        assert!(!db.stats().opened_after_crash, "{mode}: not closed cleanly");
        assert_eq!(
            db.get("t", &99u32.to_be_bytes()).unwrap(),
            Some(vec![7u8; 50])
        );
        db.check().unwrap();
        db.close().unwrap();
    }
}

#[test]
fn a_write_txn_outlives_the_db_value_and_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut t = {
        let db = Db::open(&path, opts(JournalMode::Wal)).unwrap();
        fill(&db, 10);
        db.begin_write().unwrap()
    };
    std::thread::spawn(move || {
        t.put("t", b"late", b"v").unwrap();
        t.commit().unwrap();
    })
    .join()
    .unwrap();
    let db = Db::open(&path, opts(JournalMode::Wal)).unwrap();
    assert_eq!(db.get("t", b"late").unwrap(), Some(b"v".to_vec()));
    db.check().unwrap();
}

#[test]
fn db_write_retries_conflicts_and_returns_other_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), opts(JournalMode::Persist)).unwrap();
    fill(&db, 1);
    let calls = AtomicU32::new(0);
    let v = db
        .write(|t| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            t.put("t", b"k", &n.to_be_bytes())?;
            if n < 2 {
                // What a concurrency protocol reports when a page the
                // transaction used was committed by someone else.
                return Err(Error::Conflict {
                    page: 3,
                    table: Some("t".into()),
                    what: "test".into(),
                });
            }
            Ok(n)
        })
        .unwrap();
    assert_eq!(v, 2);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Only the last run's change committed.
    assert_eq!(
        db.get("t", b"k").unwrap(),
        Some(2u32.to_be_bytes().to_vec())
    );
    let e = db.write(|t| t.delete("nope", b"k")).unwrap_err();
    assert!(matches!(e, Error::NoSuchTable(_)), "{e}");
    // A finished transaction says so.
    let mut t = db.begin_write().unwrap();
    t.put("t", b"x", b"y").unwrap();
    t.commit().unwrap();
    db.check().unwrap();
}

/// Bytes and modification time of every file in `dir`.
fn fingerprint(dir: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let m = fs::metadata(&p).unwrap().modified().unwrap();
            (p.display().to_string(), fs::read(&p).unwrap(), m)
        })
        .collect();
    v.sort();
    v
}

fn read_only(mode: JournalMode) -> Options {
    opts(mode).read_only(true)
}

#[test]
fn read_only_open_of_an_empty_file_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    fs::write(&path, b"").unwrap();
    let before = fingerprint(dir.path());
    std::thread::sleep(Duration::from_millis(20));
    for &mode in JournalMode::ALL {
        let e = Db::open(&path, read_only(mode)).err().expect("empty file");
        assert!(matches!(e, Error::ReadOnly(_)), "{mode}: {e}");
    }
    assert_eq!(fingerprint(dir.path()), before);
    // A missing file is not created either.
    let missing = dir.path().join("missing");
    assert!(Db::open(&missing, read_only(JournalMode::Wal)).is_err());
    assert!(!missing.exists());
}

#[test]
fn read_only_open_of_a_damaged_file_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let db = Db::open(&path, opts(JournalMode::Persist)).unwrap();
        fill(&db, 300);
        db.close().unwrap();
    }
    // Garbage over the header and one tree page.
    let mut bytes = fs::read(&path).unwrap();
    for (i, b) in bytes[20..40].iter_mut().enumerate() {
        *b = 0xA5 ^ i as u8;
    }
    let n = bytes.len();
    bytes[n - 3000..n - 2000].fill(0x5A);
    fs::write(&path, &bytes).unwrap();
    let before = fingerprint(dir.path());
    std::thread::sleep(Duration::from_millis(20));
    for &mode in JournalMode::ALL {
        if let Ok(db) = Db::open(&path, read_only(mode)) {
            let _ = db.check();
            let _ = db.get("t", &1u32.to_be_bytes());
            assert!(matches!(db.put("t", b"k", b"v"), Err(Error::ReadOnly(_))));
            db.close().unwrap();
        }
    }
    assert_eq!(fingerprint(dir.path()), before);
}

#[test]
fn read_only_open_of_a_crashed_file_writes_nothing() {
    for &mode in JournalMode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live");
        let image = dir.path().join("image");
        fs::create_dir_all(&live).unwrap();
        fs::create_dir_all(&image).unwrap();
        let path = live.join("db");
        let o = opts(mode).cache_size(64 * 1024);
        let db = Db::open(&path, o).unwrap();
        fill(&db, 200);
        // A transaction large enough to spill: the files are mid-commit.
        let mut t = db.begin_write().unwrap();
        for i in 0..2000u32 {
            t.put("t", &(10_000 + i).to_be_bytes(), &[9u8; 100])
                .unwrap();
        }
        // The crash image: every file as it is now, the process "dies".
        for e in fs::read_dir(&live).unwrap() {
            let p = e.unwrap().path();
            fs::copy(&p, image.join(p.file_name().unwrap())).unwrap();
        }
        drop(t);
        drop(db);
        let before = fingerprint(&image);
        std::thread::sleep(Duration::from_millis(20));
        match Db::open(image.join("db"), read_only(mode)) {
            // OFF has no journal: its crash image may be torn.
            Ok(db)
                if mode.durability(twinpage::Synchronous::Full) == twinpage::Durability::None =>
            {
                db.close().unwrap();
            }
            Ok(db) => {
                // Nothing to repair by writing: the committed rows read.
                assert_eq!(
                    db.get("t", &5u32.to_be_bytes()).unwrap(),
                    Some(vec![7u8; 50]),
                    "{mode}"
                );
                let got = db.get("t", &10_000u32.to_be_bytes()).unwrap();
                assert_eq!(got, None, "{mode}");
                db.check().unwrap();
                db.close().unwrap();
            }
            Err(e) => assert!(
                matches!(e, Error::ReadOnly(_)),
                "{mode}: a crashed file gives a read-only error, not {e}"
            ),
        }
        assert_eq!(fingerprint(&image), before, "{mode}: read-only open wrote");
        // Read-write recovers it (OFF has nothing to recover with).
        if mode.durability(twinpage::Synchronous::Full) != twinpage::Durability::None {
            let db = Db::open(image.join("db"), opts(mode)).unwrap();
            let got = db.get("t", &10_000u32.to_be_bytes()).unwrap();
            assert_eq!(got, None, "{mode}");
            db.check().unwrap();
        }
    }
}

#[test]
fn read_only_open_of_a_clean_file_reads_and_writes_nothing() {
    for &mode in JournalMode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let db = Db::open(&path, opts(mode)).unwrap();
            fill(&db, 300);
            // A second transaction, so rollback journals exist on disk.
            db.put("t", b"k", b"v").unwrap();
            db.close().unwrap();
        }
        let before = fingerprint(dir.path());
        std::thread::sleep(Duration::from_millis(20));
        let db = Db::open(&path, read_only(mode))
            .unwrap_or_else(|e| panic!("{mode}: read-only open of a clean file: {e}"));
        assert_eq!(db.get("t", b"k").unwrap(), Some(b"v".to_vec()), "{mode}");
        assert_eq!(
            db.get("t", &7u32.to_be_bytes()).unwrap(),
            Some(vec![7u8; 50])
        );
        db.check().unwrap();
        assert!(
            matches!(db.put("t", b"x", b"y"), Err(Error::ReadOnly(_))),
            "{mode}"
        );
        db.close().unwrap();
        assert_eq!(
            fingerprint(dir.path()),
            before,
            "{mode}: read-only open wrote"
        );
    }
}
