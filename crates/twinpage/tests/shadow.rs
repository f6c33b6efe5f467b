//! DASH (`shadow`, `shadow-x`): the commit's I/O sequence, recovery from
//! each state pair (constructed by cutting the power at a chosen point),
//! GPL overflow, spills, mode switches, locking and damaged files.

mod common;
mod dash_fs;

use common::*;
use dash_fs::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use twinpage::storage::{MemVfs, Vfs};
use twinpage::{Db, Error, JournalMode, Options, Synchronous};

const PATH: &str = "/s.db";
const SHADOW: &str = "/s.db-shadow";

fn opts(vfs: Arc<dyn Vfs>, mode: JournalMode, ps: usize) -> Options {
    Options::default()
        .journal_mode(mode)
        .synchronous(Synchronous::Full)
        .page_size(ps)
        .cache_size(64 * ps)
        .vfs(vfs)
}

fn path() -> &'static Path {
    Path::new(PATH)
}

/// A closed database with 200 rows and a few transactions.
fn base(mode: JournalMode, ps: usize) -> MemVfs {
    let vfs = MemVfs::new();
    let db = open(path(), opts(Arc::new(vfs.clone()), mode, ps));
    db.create_table("t").unwrap();
    let mut t = db.begin_write().unwrap();
    for i in 0..200u32 {
        t.put("t", format!("k{i:04}").as_bytes(), &[7; 50]).unwrap();
    }
    t.commit().unwrap();
    db.put("t", b"k0001", b"one").unwrap();
    db.close().unwrap();
    vfs
}

fn state(vfs: &MemVfs, mode: JournalMode, ps: usize) -> Model {
    let db = open(path(), opts(Arc::new(vfs.duplicate()), mode, ps));
    let m = dump(&db);
    std::mem::forget(db);
    m
}

/// Run `work` on `base` with the power cut right before the first
/// operation whose trace starts with `before` (the `nth` such one);
/// returns the file system at the cut.
fn cut_before(base: &MemVfs, mode: JournalMode, before: &str, nth: usize, work: fn(&Db)) -> LagFs {
    let full = LagFs::new(base, usize::MAX);
    let db = open(path(), opts(Arc::new(full.clone()), mode, 4096));
    work(&db);
    std::mem::forget(db);
    let at = full
        .trace()
        .iter()
        .enumerate()
        .filter(|(_, op)| op.starts_with(before))
        .nth(nth)
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("no {before:?} in {:#?}", full.trace()));
    let fs = LagFs::new(base, at);
    if let Ok(db) = Db::open(path(), opts(Arc::new(fs.clone()), mode, 4096)) {
        work(&db);
        std::mem::forget(db);
    }
    fs
}

fn put_one(db: &Db) {
    let _ = db.put("t", b"k0100", b"new");
}

/// Open `image`, check it, and return the recovery detail and the state.
fn recover(image: &MemVfs, mode: JournalMode) -> (String, Model) {
    let db = open(path(), opts(Arc::new(image.clone()), mode, 4096));
    db.check().unwrap();
    let rec = db.stats().recovery;
    let m = dump(&db);
    // The recovered shadow must carry further transactions.
    db.put("t", b"zz", b"after").unwrap();
    db.close().unwrap();
    assert_shadow_invariant(image, path(), 4096);
    let db = open(path(), opts(Arc::new(image.clone()), mode, 4096));
    db.check().unwrap();
    assert_eq!(db.get("t", b"zz").unwrap().unwrap(), b"after");
    db.close().unwrap();
    (rec.detail, m)
}

fn with_new(old: &Model) -> Model {
    let mut m = old.clone();
    m.get_mut("t")
        .unwrap()
        .insert(b"k0100".to_vec(), b"new".to_vec());
    m
}

#[test]
fn commit_issues_three_or_two_fdatasyncs_and_three_renames() {
    for (mode, syncs) in [(JournalMode::Shadow, 3), (JournalMode::ShadowX, 2)] {
        let vfs = base(mode, 4096);
        let db = open(path(), opts(Arc::new(vfs.clone()), mode, 4096));
        db.put("t", b"first", b"of the session").unwrap();
        let first = db.last_commit_io();
        // The first commit of a shadow-x session syncs its Version Update:
        // the Header Reset left a shadow that promises no unsynced writes.
        assert_eq!(first.fdatasync, 3, "{mode} first commit: {first}");
        for i in 0..5u32 {
            db.put("t", format!("k{:04}", 10 + i).as_bytes(), b"v")
                .unwrap();
            let io = db.last_commit_io();
            assert_eq!(io.fdatasync, syncs, "{mode}: {io}");
            assert_eq!(io.renames, 3, "{mode}: {io}");
            assert_eq!(io.fsync + io.dir_syncs + io.removes, 0, "{mode}: {io}");
            // Version Update (page 1), the leaf, the previous transaction's
            // leaf (when it differs) and the 24-byte Version Reset.
            assert!((3..=4).contains(&io.write_calls), "{mode}: {io}");
        }
        db.check().unwrap();
        db.close().unwrap();
        assert_shadow_invariant(&vfs, path(), 4096);
    }
}

#[test]
fn state_n_0_needs_nothing() {
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let b = base(mode, 4096);
        let old = state(&b, mode, 4096);
        let (detail, got) = recover(&b.duplicate(), mode);
        assert_eq!(detail, "", "{mode}");
        assert_eq!(got, old);
    }
}

/// ⟨n, n+1⟩: the crash hit the Aggregate Update; undo by partial
/// reconstruction from both GPLs.
#[test]
fn state_n_n1_is_undone_by_partial_reconstruction() {
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let b = base(mode, 4096);
        let old = state(&b, mode, 4096);
        // In the aggregate (the first write after the Version Update), and
        // right before the first rename.
        for (op, nth) in [("write /s.db-shadow", 1), ("rename", 0)] {
            let fs = cut_before(&b, mode, op, nth, put_one);
            let img = &fs.images(false, false)[0];
            let (detail, got) = recover(img, mode);
            assert!(
                detail.contains("partial reconstruction"),
                "{mode} {op}: {detail}"
            );
            assert_eq!(got, old, "{mode} {op}");
        }
    }
}

/// ⟨n+1, n⟩: exchanged, Version Reset not written. The paper redoes the
/// reset; twinpage swaps the names back and undoes (the commit was not
/// acknowledged), because the same pair also arises when the renames of
/// the previous commit were lost (see `lost_renames_then_version_update`).
#[test]
fn state_n1_n_is_undone() {
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let b = base(mode, 4096);
        let old = state(&b, mode, 4096);
        let fs = cut_before(&b, mode, "write /s.db @60", 0, put_one);
        let img = &fs.images(false, false).pop().unwrap();
        let (detail, got) = recover(img, mode);
        assert!(
            detail.contains("exchanged the names") && detail.contains("partial reconstruction"),
            "{mode}: {detail}"
        );
        assert_eq!(got, old, "{mode}");
    }
}

/// ⟨0, n+1⟩: the Version Reset reached the disk but the renames did not
/// (fdatasync does not commit them): redo the Atomic Exchange.
#[test]
fn state_0_n1_redoes_the_exchange() {
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let b = base(mode, 4096);
        let old = state(&b, mode, 4096);
        let full = LagFs::new(&b, usize::MAX);
        let db = open(path(), opts(Arc::new(full.clone()), mode, 4096));
        put_one(&db);
        std::mem::forget(db);
        // The first image keeps no unforced namespace operation.
        let img = &full.images(false, false)[0];
        let (detail, got) = recover(img, mode);
        assert!(
            detail.starts_with("<0, ") && detail.contains("exchanged the names"),
            "{mode}: {detail}"
        );
        assert_eq!(got, with_new(&old), "{mode}: acknowledged commit kept");
    }
}

/// A crash inside the Atomic Exchange: only tmp and one of the two names.
#[test]
fn interrupted_exchange_is_finished() {
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let b = base(mode, 4096);
        let old = state(&b, mode, 4096);
        for (nth, note) in [(1, "renames 2 and 3"), (2, "rename 3")] {
            let fs = cut_before(&b, mode, "rename", nth, put_one);
            let img = fs.images(false, false).pop().unwrap();
            let names = img.list();
            assert!(
                names.contains(&PathBuf::from("/s.db-shadow-tmp")),
                "{names:?}"
            );
            let (detail, got) = recover(&img, mode);
            assert!(detail.contains(note), "{mode}: {detail}");
            // The Version Reset had not been written: not acknowledged.
            assert_eq!(got, old, "{mode}");
        }
    }
}

/// The case that makes ⟨n+1, n⟩ an undo: commit k's renames are lost while
/// commit k+1's Version Update reaches the old database file. The file
/// named db is then half-written and the file named shadow holds commit k.
#[test]
fn lost_renames_then_version_update() {
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let b = base(mode, 4096);
        let old = state(&b, mode, 4096);
        let work = |db: &Db| {
            put_one(db);
            let _ = db.put("t", b"k0150", b"second");
        };
        // Cut during the second commit's aggregate: before its sync.
        let full = LagFs::new(&b, usize::MAX);
        let db = open(path(), opts(Arc::new(full.clone()), mode, 4096));
        work(&db);
        std::mem::forget(db);
        let trace = full.trace();
        let second_rename = trace
            .iter()
            .enumerate()
            .filter(|(_, o)| o.starts_with("rename"))
            .nth(3)
            .unwrap()
            .0;
        let at = trace[..second_rename]
            .iter()
            .rposition(|o| o.starts_with("fdatasync"))
            .unwrap();
        let fs = LagFs::new(&b, at);
        let db = open(path(), opts(Arc::new(fs.clone()), mode, 4096));
        work(&db);
        std::mem::forget(db);
        // The first image has lost the first commit's renames.
        let img = &fs.images(false, false)[0];
        let (detail, got) = recover(img, mode);
        assert!(detail.contains("exchanged the names"), "{mode}: {detail}");
        assert_eq!(
            got,
            with_new(&old),
            "{mode}: the first commit was acknowledged"
        );
    }
}

/// shadow-x does not sync its Version Update, so after an unclean session
/// ⟨n, 0⟩ is not trusted: the shadow is cloned again. A database left by
/// shadow-x is judged the same way when opened in shadow mode.
#[test]
fn unclean_shadow_x_session_reclones() {
    for reopen in [JournalMode::ShadowX, JournalMode::Shadow] {
        let b = base(JournalMode::ShadowX, 4096);
        let db = open(
            path(),
            opts(Arc::new(b.clone()), JournalMode::ShadowX, 4096),
        );
        db.put("t", b"k0100", b"new").unwrap();
        db.put("t", b"k0101", b"new").unwrap();
        let m = dump(&db);
        std::mem::forget(db); // no Header Reset
        let (detail, got) = recover(&b.duplicate(), reopen);
        assert!(detail.contains("shadow untrusted"), "{reopen}: {detail}");
        assert_eq!(got, m);
    }
    // After a clean close, nothing to do.
    let b = base(JournalMode::ShadowX, 4096);
    let (detail, _) = recover(&b, JournalMode::ShadowX);
    assert_eq!(detail, "");
}

/// Reads the database file's GPL count (bytes 76..80 of page 1).
fn gpl_count(vfs: &MemVfs) -> u32 {
    let d = vfs.read_file(path()).unwrap();
    u32::from_be_bytes(d[76..80].try_into().unwrap())
}

/// A transaction writing more pages than the GPL holds (107 on 512-byte
/// pages) records "all pages"; recovery then copies the whole database,
/// and the next Aggregate Update copies exactly what it must.
#[test]
fn gpl_overflow_falls_back_to_a_full_copy() {
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let b = base(mode, 512);
        let db = open(path(), opts(Arc::new(b.clone()), mode, 512));
        let mut t = db.begin_write().unwrap();
        for i in 0..400u32 {
            t.put("t", format!("big{i:04}").as_bytes(), &[3; 60])
                .unwrap();
        }
        t.commit().unwrap();
        assert_eq!(gpl_count(&b), u32::MAX, "{mode}: GPL overflow");
        let pages = db.stats().page_count;
        assert!(pages > 108);
        db.put("t", b"k0001", b"small").unwrap();
        assert!(gpl_count(&b) < 10, "{mode}: small GPL again");
        let m = dump(&db);
        db.close().unwrap();
        assert_shadow_invariant(&b, path(), 512);

        // A crash in the transaction after an overflowing one: the database's
        // GPL says "all", so the undo copies every page.
        let work = |db: &Db| {
            let mut t = db.begin_write().unwrap();
            for i in 0..1200u32 {
                t.put("t", format!("new{i:04}").as_bytes(), &[4; 60])
                    .unwrap();
            }
            t.commit().unwrap();
            let _ = db.put("t", b"k0002", b"x");
        };
        let full = LagFs::new(&b, usize::MAX);
        let db = open(path(), opts(Arc::new(full.clone()), mode, 512));
        work(&db);
        std::mem::forget(db);
        let renames: Vec<usize> = full
            .trace()
            .iter()
            .enumerate()
            .filter(|(_, o)| o.starts_with("rename"))
            .map(|(i, _)| i)
            .collect();
        let fs = LagFs::new(&b, renames[3]);
        let db = open(path(), opts(Arc::new(fs.clone()), mode, 512));
        work(&db);
        let m2 = dump(&db);
        std::mem::forget(db);
        let img = &fs.images(false, false).pop().unwrap();
        let db = open(path(), opts(Arc::new(img.clone()), mode, 512));
        let rec = db.stats().recovery;
        assert!(
            rec.pages > pages as u64,
            "{mode}: full copy expected: {rec:?}"
        );
        assert_eq!(dump(&db), m2);
        assert_ne!(m, m2);
        db.check().unwrap();
        db.close().unwrap();
        assert_shadow_invariant(img, path(), 512);
    }
}

/// Transactions larger than the cache spill into the shadow (the new
/// version being built) and read their pages back from it; a rollback
/// makes the shadow identical to the database again.
#[test]
fn spills_go_to_the_shadow() {
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let b = base(mode, 512);
        let small_cache = opts(Arc::new(b.clone()), mode, 512).cache_size(16 * 512);
        let db = open(path(), small_cache);
        let old = dump(&db);
        let db_before = b.read_file(path()).unwrap();
        let mut t = db.begin_write().unwrap();
        for i in 0..300u32 {
            t.put("t", format!("s{i:04}").as_bytes(), &[5; 80]).unwrap();
        }
        // The spill wrote to the shadow only; the database is untouched.
        assert_eq!(b.read_file(path()).unwrap(), db_before, "{mode}");
        for i in (0..300u32).step_by(37) {
            assert_eq!(
                t.get("t", format!("s{i:04}").as_bytes()).unwrap().unwrap(),
                vec![5; 80]
            );
        }
        t.rollback().unwrap();
        assert_eq!(dump(&db), old);
        db.check().unwrap();
        let mut t = db.begin_write().unwrap();
        for i in 0..300u32 {
            t.put("t", format!("s{i:04}").as_bytes(), &[6; 80]).unwrap();
        }
        t.commit().unwrap();
        let mut m = old.clone();
        for i in 0..300u32 {
            m.get_mut("t")
                .unwrap()
                .insert(format!("s{i:04}").into_bytes(), vec![6; 80]);
        }
        assert_matches(&db, &m);
        db.close().unwrap();
        assert_shadow_invariant(&b, path(), 512);
        let db = open(path(), opts(Arc::new(b.clone()), mode, 512));
        assert_matches(&db, &m);
    }
}

/// A database a shadow mode left after a crash is recovered by any mode:
/// opening it as PERSIST redoes the exchange and removes the shadow;
/// switching back clones a new shadow.
#[test]
fn switching_modes_recovers_and_drops_the_shadow() {
    let b = base(JournalMode::Shadow, 4096);
    let old = state(&b, JournalMode::Shadow, 4096);
    let full = LagFs::new(&b, usize::MAX);
    let db = open(
        path(),
        opts(Arc::new(full.clone()), JournalMode::Shadow, 4096),
    );
    put_one(&db);
    std::mem::forget(db);
    let img = full.images(false, false).remove(0); // ⟨0, n+1⟩
    let db = open(
        path(),
        opts(Arc::new(img.clone()), JournalMode::Persist, 4096),
    );
    assert!(db.stats().recovery.recovered);
    assert_eq!(dump(&db), with_new(&old));
    assert!(!img.list().contains(&PathBuf::from(SHADOW)));
    db.put("t", b"p", b"persist").unwrap();
    db.check().unwrap();
    db.close().unwrap();
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        let db = open(path(), opts(Arc::new(img.clone()), mode, 4096));
        db.put("t", mode.name().as_bytes(), b"back").unwrap();
        db.check().unwrap();
        db.close().unwrap();
        assert_shadow_invariant(&img, path(), 4096);
    }
    let db = open(
        path(),
        opts(Arc::new(img.clone()), JournalMode::Delete, 4096),
    );
    assert_eq!(db.get("t", b"shadow-x").unwrap().unwrap(), b"back");
    assert_eq!(db.get("t", b"p").unwrap().unwrap(), b"persist");
    db.close().unwrap();
}

/// The OS lock is on `<db>-lock`, which never moves: a second open, in
/// any mode, gets `Locked` even after the exchange gave `<db>` to
/// another inode.
#[test]
fn second_open_is_locked_across_exchanges() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lock.db");
    let o = |m| {
        Options::default()
            .journal_mode(m)
            .busy_timeout(Duration::from_millis(20))
    };
    let db = Db::open(&p, o(JournalMode::Shadow)).unwrap();
    db.create_table("t").unwrap();
    for i in 0..3u8 {
        db.put("t", &[i], b"v").unwrap();
        for m in [
            JournalMode::Shadow,
            JournalMode::ShadowX,
            JournalMode::Persist,
        ] {
            // Its own file system handle: an opener that does not share
            // the open database, as another process.
            let other = o(m).vfs(std::sync::Arc::new(twinpage::storage::OsVfs::new()));
            match Db::open(&p, other) {
                Err(Error::Locked(x)) => assert_eq!(x, p),
                Err(e) => panic!("{m}: expected Locked, got {e}"),
                Ok(_) => panic!("{m}: expected Locked, got a second handle"),
            }
        }
    }
    db.close().unwrap();
    assert!(dir.path().join("lock.db-shadow").exists());
    let db = Db::open(&p, o(JournalMode::ShadowX)).unwrap();
    assert_eq!(db.get("t", &[2]).unwrap().unwrap(), b"v");
    db.check().unwrap();
    db.close().unwrap();
}

/// Damaged header pages in either file give a recovery or a typed error,
/// never a panic or a wrong answer.
#[test]
fn damaged_tails_do_not_panic() {
    let b = base(JournalMode::Shadow, 4096);
    let old = state(&b, JournalMode::Shadow, 4096);
    for target in [PATH, SHADOW] {
        for off in [20usize, 56, 60, 68, 72, 76, 80, 100] {
            for x in [0x01u8, 0xff] {
                let img = b.duplicate();
                let mut bytes = img.read_file(Path::new(target)).unwrap();
                bytes[off] ^= x;
                img.write_file(Path::new(target), bytes);
                match Db::open(
                    path(),
                    opts(Arc::new(img.clone()), JournalMode::Shadow, 4096),
                ) {
                    Ok(db) => {
                        assert_eq!(dump(&db), old, "{target}@{off}");
                        // Damaged DASH fields in the database file are
                        // reported by the check until the next write
                        // rewrites them (the shadow is re-cloned).
                        if let Err(e) = db.check() {
                            assert!(
                                target == PATH && e.to_string().contains("mode's fields"),
                                "{target}@{off}: {e}"
                            );
                        }
                        db.put("t", b"x", b"y").unwrap();
                        db.check().unwrap();
                        db.close().unwrap();
                        assert_shadow_invariant(&img, path(), 4096);
                    }
                    Err(e) => assert!(e.is_corruption(), "{target}@{off}: {e}"),
                }
            }
        }
    }
}

#[test]
fn garbage_shadow_is_recloned() {
    let b = base(JournalMode::Shadow, 4096);
    let old = state(&b, JournalMode::Shadow, 4096);
    for len in [0usize, 10, 4096, 3 * 4096 + 5] {
        let img = b.duplicate();
        img.write_file(Path::new(SHADOW), vec![0xA5; len]);
        let db = open(
            path(),
            opts(Arc::new(img.clone()), JournalMode::Shadow, 4096),
        );
        assert_eq!(dump(&db), old);
        db.put("t", b"x", b"y").unwrap();
        db.check().unwrap();
        db.close().unwrap();
        assert_shadow_invariant(&img, path(), 4096);
    }
}
