//! WAL mode: the commit's I/O, snapshot readers during commits and
//! checkpoints, readers that never pin the log, pre-allocation (WAL_OPT), delayed
//! checkpoints, recovery from crash images and damaged logs, and leftover
//! logs opened in other modes.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use twinpage::journal::CheckpointMode;
use twinpage::storage::{FileLock, MemVfs, OpenFlags, Vfs, VfsFile};
use twinpage::{Db, Direction, Error, JournalMode, Options, Result, Synchronous};

const PATH: &str = "/wal.db";
const WAL: &str = "/wal.db-wal";

fn wal_opts(vfs: &MemVfs, sync: Synchronous, ps: usize, extra: &[(&str, &str)]) -> Options {
    let mut o = mem_opts(vfs, JournalMode::Wal, ps).synchronous(sync);
    for (k, v) in extra {
        o.set(k, v).unwrap();
    }
    o
}

/// The files as they are now, as power loss would leave them (MemVfs is
/// strict: every write issued is in the copy).
fn stat(db: &Db, name: &str) -> u64 {
    db.stats()
        .journal
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no stat {name}"))
        .1
}

fn wal_len(vfs: &MemVfs) -> Option<usize> {
    vfs.read_file(Path::new(WAL)).map(|b| b.len())
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

/// One table's rows.
type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

fn one_table(rows: &Rows) -> Model {
    let mut m = Model::new();
    m.insert("t".into(), rows.clone());
    m
}

#[test]
fn options_are_parsed_and_checked() {
    let vfs = MemVfs::new();
    for bad in [
        ("wal_autocheckpoint", "x"),
        ("preallocate", "maybe"),
        ("checkpoint_step", "many"),
        ("no_such_option", "1"),
    ] {
        match Db::open(PATH, wal_opts(&vfs, Synchronous::Full, 4096, &[bad])) {
            Err(Error::InvalidArgument(_)) => {}
            Err(e) => panic!("{bad:?}: {e}"),
            Ok(_) => panic!("{bad:?} accepted"),
        }
    }
    let o = [("preallocate", "1"), ("wal_autocheckpoint", "0")];
    assert!(matches!(
        Db::open(PATH, wal_opts(&vfs, Synchronous::Full, 4096, &o)),
        Err(Error::InvalidArgument(_))
    ));
    // Other modes reject WAL options.
    let mut o = mem_opts(&vfs, JournalMode::Persist, 4096);
    o.set("wal_autocheckpoint", "10").unwrap();
    assert!(matches!(Db::open(PATH, o), Err(Error::InvalidArgument(_))));
}

#[test]
fn a_one_row_commit_writes_one_frame_and_syncs_once_at_full() {
    for (sync, syncs) in [(Synchronous::Full, 1), (Synchronous::Normal, 0)] {
        let vfs = MemVfs::new();
        let db = open(Path::new(PATH), wal_opts(&vfs, sync, 4096, &[]));
        db.create_table("t").unwrap();
        let mut t = db.begin_write().unwrap();
        for i in 0..200 {
            t.put("t", &key(i), &[1; 100]).unwrap();
        }
        t.commit().unwrap();
        for i in 0..50 {
            db.put("t", &key(i * 3), &[2; 100]).unwrap();
            let io = db.last_commit_io();
            assert_eq!(io.write_calls, 1, "{sync}: {io}");
            assert_eq!(io.bytes_written, 24 + 4096, "{sync}: {io}");
            assert_eq!(io.fdatasync, syncs, "{sync}: {io}");
            assert_eq!(io.truncates + io.removes + io.dir_syncs, 0, "{sync}: {io}");
        }
        // The database file is untouched until a checkpoint.
        assert_eq!(stat(&db, "checkpoints"), 0);
        db.close().unwrap();
        assert_eq!(wal_len(&vfs), None, "a clean close removes the log");
        let db = open(Path::new(PATH), wal_opts(&vfs, sync, 4096, &[]));
        assert!(!db.stats().opened_after_crash);
        assert_eq!(db.get("t", &key(3)).unwrap().unwrap(), vec![2; 100]);
        db.check().unwrap();
    }
}

#[test]
fn a_long_reader_keeps_its_snapshot_through_commits_and_checkpoints() {
    let vfs = MemVfs::new();
    let o = wal_opts(
        &vfs,
        Synchronous::Normal,
        1024,
        &[("wal_autocheckpoint", "50")],
    )
    .busy_timeout(Duration::from_millis(20));
    let db = open(Path::new(PATH), o);
    db.create_table("t").unwrap();
    let mut model = BTreeMap::new();
    let mut t = db.begin_write().unwrap();
    for i in 0..500 {
        t.put("t", &key(i), b"v0").unwrap();
        model.insert(key(i), b"v0".to_vec());
    }
    t.commit().unwrap();
    // Phase A: auto-checkpoints and restarts with nobody reading.
    for i in 0..1000u32 {
        let v = format!("a{i}").into_bytes();
        db.put("t", &key(i * 7 % 500), &v).unwrap();
        model.insert(key(i * 7 % 500), v);
    }
    let restarts_a = stat(&db, "restarts");
    assert!(restarts_a >= 10, "restarts {restarts_a}");
    // Phase B: a reader holds its snapshot through 3000 commits.
    let r = db.begin_read().unwrap();
    let snap = model.clone();
    let view = |r: &twinpage::ReadTxn| -> BTreeMap<Vec<u8>, Vec<u8>> {
        r.range("t", .., Direction::Forward)
            .unwrap()
            .map(|kv| kv.unwrap())
            .collect()
    };
    assert_eq!(view(&r), snap);
    let mut second = None;
    for i in 0..3000u32 {
        let k = key(i * 13 % 600);
        if i % 10 == 9 {
            db.delete("t", &k).unwrap();
            model.remove(&k);
        } else {
            let v = vec![(i % 251) as u8; (i % 300) as usize];
            db.put("t", &k, &v).unwrap();
            model.insert(k, v);
        }
        if i % 500 == 499 {
            assert_eq!(view(&r), snap, "after {i} commits");
            assert_eq!(r.get("t", &key(7)).unwrap(), snap.get(&key(7)).cloned());
            // Neither waits for the reader nor stops below its snapshot.
            for mode in [CheckpointMode::Passive, CheckpointMode::Full] {
                let info = db.checkpoint(mode).unwrap();
                assert_eq!(info.blocked_by_readers, 0, "{info:?}");
                assert_eq!(info.checkpointed, info.log_frames, "{info:?}");
            }
        }
        if i == 1500 {
            second = Some((db.begin_read().unwrap(), model.clone()));
        }
    }
    assert_eq!(view(&r), snap);
    let (r2, snap2) = second.unwrap();
    assert_eq!(view(&r2), snap2);
    // The log restarted behind the readers and stayed within one
    // checkpoint window; their versions are kept in memory, at most one
    // per page and snapshot.
    assert!(stat(&db, "restarts") > restarts_a + 20);
    assert!(
        stat(&db, "wal_max_frames") < 2 * 50 + 10,
        "the log stays bounded"
    );
    let kept = stat(&db, "retained_pages");
    assert!(
        kept > 0 && kept <= 2 * db.stats().page_count as u64,
        "{kept}"
    );
    drop(r);
    drop(r2);
    // The next checkpoint drops what no reader needs any more.
    db.checkpoint(CheckpointMode::Passive).unwrap();
    assert_eq!(stat(&db, "retained_bytes"), 0);
    db.put("t", b"zz", b"end").unwrap();
    model.insert(b"zz".to_vec(), b"end".to_vec());
    db.put("t", b"zz", b"end").unwrap();
    assert!(stat(&db, "wal_frames") < 50);
    assert_matches(&db, &one_table(&model));
    db.close().unwrap();
    let db = open(
        Path::new(PATH),
        wal_opts(&vfs, Synchronous::Normal, 1024, &[]),
    );
    assert_matches(&db, &one_table(&model));
}

/// Readers that overlap each other forever keep a snapshot older than the
/// last commit in the log at every moment. In SQLite the log can then never
/// restart and grows without bound; here each reader's versions are kept in
/// memory and the log restarts on schedule.
fn overlapping_readers(delayed: bool) {
    let vfs = MemVfs::new();
    let flag = if delayed { "1" } else { "0" };
    let o = wal_opts(
        &vfs,
        Synchronous::Full,
        1024,
        &[("wal_autocheckpoint", "20"), ("delayed_checkpoint", flag)],
    )
    .busy_timeout(Duration::from_millis(10));
    let db = open(Path::new(PATH), o);
    db.create_table("t").unwrap();
    let mut model = BTreeMap::new();
    let mut old = (db.begin_read().unwrap(), model.clone());
    for i in 0..400u32 {
        // Two readers at all times: at each commit the older one has not
        // seen the previous commit.
        let new = (db.begin_read().unwrap(), model.clone());
        let v = i.to_be_bytes().to_vec();
        db.put("t", &key(i % 97), &v).unwrap();
        model.insert(key(i % 97), v);
        let (r, m) = std::mem::replace(&mut old, new);
        let got: BTreeMap<_, _> = r
            .range("t", .., Direction::Forward)
            .unwrap()
            .map(|kv| kv.unwrap())
            .collect();
        assert_eq!(got, m, "reader of commit {i}");
    }
    let frames = stat(&db, "wal_max_frames");
    assert!(frames <= 2 * 20 + 2, "log grew to {frames} frames");
    assert!(
        stat(&db, "restarts") >= 400 / 40,
        "{}",
        stat(&db, "restarts")
    );
    let info = db.checkpoint(CheckpointMode::Truncate).unwrap();
    assert_eq!(info.blocked_by_readers, 0, "{info:?}");
    assert_eq!(wal_len(&vfs), Some(0), "truncated with readers open");
    let (r, m) = old;
    let got: BTreeMap<_, _> = r
        .range("t", .., Direction::Forward)
        .unwrap()
        .map(|kv| kv.unwrap())
        .collect();
    assert_eq!(got, m, "the last reader after the truncation");
    drop(r);
    assert_matches(&db, &one_table(&model));
    // The FCC survives the loss of the log.
    let fcc = db.stats().fcc;
    let copy = vfs.duplicate();
    drop(db);
    let db = open(
        Path::new(PATH),
        wal_opts(&copy, Synchronous::Full, 1024, &[]),
    );
    assert_eq!(db.stats().fcc, fcc);
    assert_matches(&db, &one_table(&model));
}

#[test]
fn overlapping_readers_never_pin_the_log() {
    overlapping_readers(false);
    overlapping_readers(true);
}

/// Readers opened and closed at random while commits, checkpoints and
/// restarts run: every reader sees exactly the state it began on, to its
/// end, and the log never outgrows one checkpoint window.
#[test]
fn random_readers_keep_their_snapshots() {
    let seeds: u64 = std::env::var("TWINPAGE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let configs: &[&[(&str, &str)]] = &[
        &[("wal_autocheckpoint", "16"), ("journal_size_limit", "4096")],
        &[("wal_autocheckpoint", "16"), ("delayed_checkpoint", "1")],
        &[("wal_autocheckpoint", "16"), ("preallocate", "1")],
        &[
            ("wal_autocheckpoint", "16"),
            ("concurrency", "begin-concurrent"),
        ],
        &[("wal_autocheckpoint", "16"), ("checkpoint_step", "2")],
        &[
            ("wal_autocheckpoint", "16"),
            ("checkpoint_step", "1"),
            ("delayed_checkpoint", "1"),
        ],
        &[
            ("wal_autocheckpoint", "16"),
            ("checkpoint_step", "2"),
            ("concurrency", "begin-concurrent"),
        ],
        &[("wal_autocheckpoint", "16"), ("checkpoint_step", "0")],
    ];
    for seed in 0..seeds {
        for cfg in configs {
            random_readers(seed, cfg);
        }
    }
}

fn random_readers(seed: u64, cfg: &[(&str, &str)]) {
    let vfs = MemVfs::new();
    let o = wal_opts(&vfs, Synchronous::Normal, 512, cfg);
    let db = open(Path::new(PATH), o);
    db.create_table("t").unwrap();
    let mut model = BTreeMap::new();
    let mut seed = 99 + seed;
    let mut rnd = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut readers: Vec<(twinpage::ReadTxn, Rows)> = Vec::new();
    let view = |r: &twinpage::ReadTxn| -> BTreeMap<Vec<u8>, Vec<u8>> {
        r.range("t", .., Direction::Forward)
            .unwrap()
            .map(|kv| kv.unwrap())
            .collect()
    };
    for step in 0..1500u32 {
        match rnd(20) {
            0 if readers.len() < 6 => readers.push((db.begin_read().unwrap(), model.clone())),
            1 if !readers.is_empty() => {
                let (r, m) = readers.swap_remove(rnd(readers.len() as u64) as usize);
                assert_eq!(view(&r), m, "{cfg:?} seed {seed} step {step}");
            }
            2 => {
                let mode = [
                    CheckpointMode::Passive,
                    CheckpointMode::Restart,
                    CheckpointMode::Truncate,
                ][rnd(3) as usize];
                db.checkpoint(mode).unwrap();
            }
            _ => {
                let mut t = db.begin_write().unwrap();
                for _ in 0..=rnd(8) {
                    let k = key(rnd(300) as u32);
                    if rnd(5) == 0 {
                        t.delete("t", &k).unwrap();
                        model.remove(&k);
                    } else {
                        let v = vec![step as u8; [3, 40, 300][rnd(3) as usize]];
                        t.put("t", &k, &v).unwrap();
                        model.insert(k, v);
                    }
                }
                t.commit().unwrap();
            }
        }
        if step % 100 == 99 {
            for (r, m) in &readers {
                assert_eq!(&view(r), m, "{cfg:?} seed {seed} step {step}");
            }
        }
    }
    // Whole checkpoints: one window plus the commit that crossed it. In
    // steps (W7) the windows that follow the first add at most about as
    // much again as it held, plus a few commits.
    // (Small explicit steps only: the default 128 covers a 16-frame window
    // in one step.)
    let stepping = cfg.iter().any(|&(k, v)| k == "checkpoint_step" && v != "0");
    let bound = if stepping { 2 * 16 + 4 * 30 } else { 16 + 30 };
    assert!(
        stat(&db, "wal_max_frames") < bound,
        "{cfg:?} seed {seed}: {} frames, {} checkpoints in {} steps",
        stat(&db, "wal_max_frames"),
        stat(&db, "checkpoints"),
        stat(&db, "checkpoint_steps")
    );
    for (r, m) in readers {
        assert_eq!(view(&r), m);
    }
    assert_matches(&db, &one_table(&model));
}

#[test]
fn preallocated_log_keeps_its_size() {
    for sync in [Synchronous::Full, Synchronous::Normal] {
        let vfs = MemVfs::new();
        let o = [("preallocate", "1"), ("wal_autocheckpoint", "20")];
        let db = open(Path::new(PATH), wal_opts(&vfs, sync, 512, &o));
        db.create_table("t").unwrap();
        let size = 40 + 20 * (24 + 512);
        assert_eq!(wal_len(&vfs), Some(size));
        let mut model = BTreeMap::new();
        let before = db.io_counters();
        for i in 0..600u32 {
            let v = vec![i as u8; 30];
            db.put("t", &key(i % 150), &v).unwrap();
            model.insert(key(i % 150), v);
            assert_eq!(wal_len(&vfs), Some(size), "commit {i}");
        }
        let io = db.io_counters() - before;
        assert_eq!(io.truncates, 0, "{io}");
        assert!(stat(&db, "restarts") >= 20);
        assert_eq!(stat(&db, "prealloc_grows"), 0);
        // Crash: stale frames of earlier generations must not come back.
        let copy = vfs.duplicate();
        let db2 = open(Path::new(PATH), wal_opts(&copy, sync, 512, &o));
        assert_matches(&db2, &one_table(&model));
        drop(db2);
        // A reader does not pin the log: it keeps its size.
        let r = db.begin_read().unwrap();
        for i in 0..50u32 {
            db.put("t", &key(i), b"pinned").unwrap();
            model.insert(key(i), b"pinned".to_vec());
            assert_eq!(wal_len(&vfs), Some(size), "commit {i} with a reader");
        }
        assert_eq!(stat(&db, "prealloc_grows"), 0);
        drop(r);
        db.close().unwrap();
        assert!(wal_len(&vfs).unwrap() >= size, "the allocation is kept");
        let db = open(Path::new(PATH), wal_opts(&vfs, sync, 512, &o));
        assert!(!db.stats().opened_after_crash);
        assert!(!db.stats().recovery.recovered);
        assert_matches(&db, &one_table(&model));
    }
}

#[test]
fn journal_size_limit_truncates_the_log_at_restart() {
    let vfs = MemVfs::new();
    let o = [("wal_autocheckpoint", "10"), ("journal_size_limit", "8192")];
    let db = open(Path::new(PATH), wal_opts(&vfs, Synchronous::Full, 512, &o));
    db.create_table("t").unwrap();
    let mut t = db.begin_write().unwrap();
    for i in 0..2000 {
        t.put("t", &key(i), &[5; 40]).unwrap();
    }
    t.commit().unwrap();
    assert!(wal_len(&vfs).unwrap() > 100_000);
    // The checkpoint of the big commit takes a step per commit (W4); the
    // log is cut to the limit at the restart behind the last one.
    let mut n = 0;
    while stat(&db, "restarts") == 0 {
        db.put("t", b"a", &n.to_string().into_bytes()).unwrap();
        n += 1;
        assert!(n < 100, "no restart after {n} commits");
    }
    db.put("t", b"a", b"b").unwrap();
    assert!(wal_len(&vfs).unwrap() <= 8192, "{:?}", wal_len(&vfs));
    let copy = vfs.duplicate();
    let db2 = open(Path::new(PATH), wal_opts(&copy, Synchronous::Full, 512, &o));
    assert_eq!(db2.get("t", &key(1999)).unwrap().unwrap(), vec![5; 40]);
    assert_eq!(db2.get("t", b"a").unwrap().unwrap(), b"b");
    db2.check().unwrap();
}

/// Random transactions under every option set; after each one a crash
/// image must hold exactly the committed state (strict model), and the
/// database must survive being reopened.
#[test]
fn crash_images_hold_the_committed_state() {
    let configs: &[&[(&str, &str)]] = &[
        &[],
        &[("wal_autocheckpoint", "7")],
        &[("wal_autocheckpoint", "7"), ("preallocate", "1")],
        &[("wal_autocheckpoint", "7"), ("delayed_checkpoint", "1")],
        &[("wal_autocheckpoint", "5"), ("journal_size_limit", "0")],
        &[("wal_autocheckpoint", "7"), ("checkpoint_step", "1")],
        &[("wal_autocheckpoint", "7"), ("checkpoint_step", "0")],
        &[
            ("wal_autocheckpoint", "7"),
            ("checkpoint_step", "2"),
            ("delayed_checkpoint", "1"),
        ],
    ];
    for sync in [Synchronous::Full, Synchronous::Normal, Synchronous::Off] {
        for cfg in configs {
            let vfs = MemVfs::new();
            // A 12-page cache: bigger transactions spill.
            let o = wal_opts(&vfs, sync, 512, cfg).cache_size(12 * 512);
            let db = open(Path::new(PATH), o.clone());
            db.create_table("t").unwrap();
            let mut committed = BTreeMap::new();
            let mut seed = 12345u64;
            let mut rnd = move |n: u64| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 33) % n
            };
            for step in 0..60u32 {
                let mut working = committed.clone();
                let mut t = db.begin_write().unwrap();
                let n = [1, 1, 3, 40, 200][rnd(5) as usize];
                for _ in 0..n {
                    let k = key(rnd(400) as u32);
                    if rnd(4) == 0 {
                        t.delete("t", &k).unwrap();
                        working.remove(&k);
                    } else {
                        let v = vec![step as u8; [5, 50, 700][rnd(3) as usize]];
                        t.put("t", &k, &v).unwrap();
                        working.insert(k, v);
                    }
                }
                if rnd(6) == 0 {
                    t.rollback().unwrap();
                } else {
                    t.commit().unwrap();
                    committed = working;
                }
                if step % 15 == 14 {
                    let mode = [CheckpointMode::Passive, CheckpointMode::Truncate][rnd(2) as usize];
                    db.checkpoint(mode).unwrap();
                }
                let copy = vfs.duplicate();
                let o2 = wal_opts(&copy, sync, 512, cfg).cache_size(12 * 512);
                let db2 = open(Path::new(PATH), o2);
                assert_matches(&db2, &one_table(&committed));
                assert_eq!(db2.stats().fcc, db.stats().fcc, "{cfg:?} step {step}");
                db2.put("t", b"after", b"crash").unwrap();
                db2.close().unwrap();
                assert_eq!(
                    wal_len(&copy).is_some(),
                    cfg.contains(&("preallocate", "1"))
                );
            }
            db.close().unwrap();
            let db = open(Path::new(PATH), o);
            assert_matches(&db, &one_table(&committed));
        }
    }
}

/// W4-W7: a due checkpoint copies at most `checkpoint_step` pages per
/// commit (or twice the frames published since its last step), the log
/// restarts once a window is done, and every crash image between steps
/// recovers the committed state.
#[test]
fn an_incremental_checkpoint_spreads_its_copy_over_commits() {
    for delayed in ["0", "1"] {
        let vfs = MemVfs::new();
        let cfg = [
            ("wal_autocheckpoint", "100"),
            ("checkpoint_step", "8"),
            ("delayed_checkpoint", delayed),
        ];
        let o = wal_opts(&vfs, Synchronous::Full, 512, &cfg);
        let mut rows = BTreeMap::new();
        {
            // About 300 pages, checkpointed at close.
            let db = open(Path::new(PATH), o.clone());
            db.create_table("t").unwrap();
            let mut t = db.begin_write().unwrap();
            for i in 0..2000 {
                t.put("t", &key(i), &[7; 60]).unwrap();
                rows.insert(key(i), vec![7; 60]);
            }
            t.commit().unwrap();
            db.close().unwrap();
        }
        let db = open(Path::new(PATH), o.clone());
        let mut seed = 7u64;
        let mut most = 0;
        for step in 0..600u32 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = key(((seed >> 33) % 2000) as u32);
            let before = stat(&db, "checkpoint_pages");
            let v = vec![step as u8; 60];
            db.put("t", &k, &v).unwrap();
            rows.insert(k, v);
            let copied = stat(&db, "checkpoint_pages") - before;
            // A one-page commit publishes one frame: a step copies at most
            // max(8, 2) pages, plus what the last step of a window takes
            // in within the same budget.
            assert!(copied <= 8, "delayed={delayed} step {step}: {copied} pages");
            most = most.max(copied);
            if step % 50 == 0 {
                let copy = vfs.duplicate();
                let db2 = open(
                    Path::new(PATH),
                    wal_opts(&copy, Synchronous::Full, 512, &cfg),
                );
                assert_matches(&db2, &one_table(&rows));
                db2.check().unwrap();
            }
        }
        assert_eq!(most, 8);
        let (ckpts, steps) = (stat(&db, "checkpoints"), stat(&db, "checkpoint_steps"));
        assert!(
            ckpts >= 2 && steps >= 4 * ckpts,
            "{ckpts} checkpoints in {steps} steps"
        );
        assert!(
            stat(&db, "restarts") >= 2,
            "the log restarts behind a window"
        );
        // The log never held much more than one window of 100 frames.
        let most_frames = stat(&db, "wal_max_frames");
        assert!((100..150).contains(&most_frames), "{most_frames} frames");
        assert_eq!(stat(&db, "checkpoint_errors"), 0);
        db.check().unwrap();
        db.close().unwrap();
        let db = open(Path::new(PATH), o);
        assert_matches(&db, &one_table(&rows));
        db.check().unwrap();
    }
}

/// A window whose last step takes in later commits that did not log page
/// 1 must not record the later FCC as the database file's: a Truncate
/// checkpoint then writes the exact FCC into page 1 before the log goes,
/// and a crash right after it finds that FCC (W4).
#[test]
fn a_truncate_checkpoint_after_windows_leaves_the_exact_fcc() {
    let cfg = [("wal_autocheckpoint", "12"), ("checkpoint_step", "2")];
    for stop in 10..70u32 {
        let vfs = MemVfs::new();
        let o = wal_opts(&vfs, Synchronous::Full, 512, &cfg);
        let db = open(Path::new(PATH), o.clone());
        db.create_table("t").unwrap();
        let mut rows = BTreeMap::new();
        for i in 0..stop {
            // Every fourth commit appends rows (new pages: page 1 logged),
            // the others update one row (only the FCC of page 1 changes).
            if i % 4 == 0 {
                let mut t = db.begin_write().unwrap();
                for j in 0..12 {
                    let k = key(i * 100 + j);
                    t.put("t", &k, &[i as u8; 30]).unwrap();
                    rows.insert(k, vec![i as u8; 30]);
                }
                t.commit().unwrap();
            } else {
                let k = rows
                    .keys()
                    .nth((i as usize * 7) % rows.len())
                    .unwrap()
                    .clone();
                db.put("t", &k, &[i as u8; 30]).unwrap();
                rows.insert(k, vec![i as u8; 30]);
            }
        }
        let fcc = db.stats().fcc;
        db.checkpoint(CheckpointMode::Truncate).unwrap();
        assert_eq!(wal_len(&vfs), Some(0));
        let copy = vfs.duplicate();
        let db2 = open(
            Path::new(PATH),
            wal_opts(&copy, Synchronous::Full, 512, &cfg),
        );
        assert_eq!(db2.stats().fcc, fcc, "after {stop} commits");
        assert_matches(&db2, &one_table(&rows));
        drop(db);
    }
}

fn commits_then_crash(n: u32) -> (MemVfs, Vec<Model>) {
    let vfs = MemVfs::new();
    let db = open(Path::new(PATH), wal_opts(&vfs, Synchronous::Full, 512, &[]));
    db.create_table("t").unwrap();
    let mut rows = BTreeMap::new();
    let mut states = vec![Model::new(), one_table(&rows)];
    for i in 0..n {
        db.put("t", &key(i), &[i as u8; 20]).unwrap();
        rows.insert(key(i), vec![i as u8; 20]);
        states.push(one_table(&rows));
    }
    let copy = vfs.duplicate();
    drop(db);
    (copy, states)
}

#[test]
fn a_damaged_frame_ends_the_log() {
    let (vfs, states) = commits_then_crash(20);
    let log = vfs.read_file(Path::new(WAL)).unwrap();
    let frame = 24 + 512;
    let frames = (log.len() - 40) / frame;
    // Commits that end before each frame (bytes 4..8 of a commit frame
    // hold the database size).
    let commits_before: Vec<usize> = (0..frames)
        .scan(0, |n, f| {
            let before = *n;
            let at = 40 + f * frame + 4;
            if log[at..at + 4] != [0; 4] {
                *n += 1;
            }
            Some(before)
        })
        .collect();
    assert_eq!(commits_before.last().map(|n| n + 1), Some(states.len() - 1));
    for victim in (0..frames).step_by(3) {
        for at in [0usize, 5, 17, 22, 24, 300, 535] {
            let copy = vfs.duplicate();
            let mut bad = log.clone();
            bad[40 + victim * frame + at] ^= 0x40;
            copy.write_file(Path::new(WAL), bad);
            let db = open(
                Path::new(PATH),
                wal_opts(&copy, Synchronous::Full, 512, &[]),
            );
            // Exactly the commits before the damaged frame survive.
            assert_eq!(
                dump(&db),
                states[commits_before[victim]],
                "frame {victim} byte {at}"
            );
            db.check().unwrap();
        }
    }
    // Garbage and foreign logs are never applied and never panic.
    for garbage in [
        vec![0xA5u8; 5000],
        vec![0u8; 40],
        log[..30].to_vec(),
        log[..100].to_vec(),
    ] {
        let copy = vfs.duplicate();
        copy.write_file(Path::new(WAL), garbage);
        let db = open(
            Path::new(PATH),
            wal_opts(&copy, Synchronous::Full, 512, &[]),
        );
        db.check().unwrap();
    }
    // A log of another page size is corruption, reported as such.
    let copy = vfs.duplicate();
    let mut other = log.clone();
    other[8..12].copy_from_slice(&1024u32.to_be_bytes());
    let crc = crc32c::crc32c(&other[0..32]);
    other[32..36].copy_from_slice(&crc.to_be_bytes());
    copy.write_file(Path::new(WAL), other);
    match Db::open(PATH, wal_opts(&copy, Synchronous::Full, 512, &[])) {
        Err(e) => assert!(e.is_corruption(), "{e}"),
        Ok(_) => panic!("log with another page size accepted"),
    }
}

#[test]
fn a_leftover_log_is_applied_when_opened_in_another_mode() {
    let (vfs, states) = commits_then_crash(30);
    for mode in [JournalMode::Persist, JournalMode::Delete, JournalMode::Off] {
        let copy = vfs.duplicate();
        let db = open(Path::new(PATH), mem_opts(&copy, mode, 512));
        assert!(db.stats().recovery.recovered);
        assert_matches(&db, states.last().unwrap());
        assert_eq!(wal_len(&copy), None);
        db.put("t", b"x", b"y").unwrap();
        db.close().unwrap();
        let db = open(
            Path::new(PATH),
            wal_opts(&copy, Synchronous::Full, 512, &[]),
        );
        assert_eq!(db.get("t", b"x").unwrap().unwrap(), b"y");
        assert_eq!(db.stats().page_size, 512);
        db.check().unwrap();
    }
}

#[test]
fn a_log_without_its_database_is_discarded() {
    let (vfs, _) = commits_then_crash(5);
    vfs.remove(Path::new(PATH)).unwrap();
    let db = open(Path::new(PATH), wal_opts(&vfs, Synchronous::Full, 512, &[]));
    assert!(db.begin_read().unwrap().tables().unwrap().is_empty());
    db.check().unwrap();
}

/// A VFS whose fdatasync on the log fails while `fail` is set.
#[derive(Clone)]
struct FailSync {
    inner: MemVfs,
    fail: Arc<AtomicBool>,
    failures: Arc<AtomicUsize>,
}

struct FailSyncFile {
    inner: Arc<dyn VfsFile>,
    vfs: FailSync,
}

impl Vfs for FailSync {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(FailSyncFile {
            inner: self.inner.open(path, flags)?,
            vfs: self.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.inner.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.inner.sync_dir(dir)
    }
}

impl VfsFile for FailSyncFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> Result<()> {
        let log = self.path().to_string_lossy().ends_with("-wal");
        if log && self.vfs.fail.swap(false, Ordering::SeqCst) {
            self.vfs.failures.fetch_add(1, Ordering::SeqCst);
            return Err(Error::io(
                "fdatasync",
                PathBuf::from(self.path()),
                std::io::Error::other("EIO"),
            ));
        }
        self.inner.sync_data()
    }
    fn sync_all(&self) -> Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn try_lock(&self, kind: FileLock) -> Result<bool> {
        self.inner.try_lock(kind)
    }
    fn unlock(&self) -> Result<()> {
        self.inner.unlock()
    }
}

#[test]
fn a_failed_commit_is_never_recovered() {
    let mem = MemVfs::new();
    let vfs = FailSync {
        inner: mem.clone(),
        fail: Arc::default(),
        failures: Arc::default(),
    };
    let o = || {
        mem_opts(&mem, JournalMode::Wal, 512)
            .vfs(Arc::new(vfs.clone()))
            .synchronous(Synchronous::Full)
    };
    let db = open(Path::new(PATH), o());
    db.create_table("t").unwrap();
    db.put("t", b"a", b"1").unwrap();
    vfs.fail.store(true, Ordering::SeqCst);
    assert!(db.put("t", b"b", b"2").is_err());
    assert_eq!(vfs.failures.load(Ordering::SeqCst), 1);
    assert_eq!(db.get("t", b"b").unwrap(), None);
    // The failed commit's frames are on "disk", but recovery must not
    // resurrect them.
    let copy = mem.duplicate();
    let db2 = open(
        Path::new(PATH),
        wal_opts(&copy, Synchronous::Full, 512, &[]),
    );
    assert_eq!(db2.get("t", b"b").unwrap(), None);
    assert_eq!(db2.get("t", b"a").unwrap().unwrap(), b"1");
    db2.check().unwrap();
    // The handle goes on working.
    db.put("t", b"c", b"3").unwrap();
    let copy = mem.duplicate();
    let db2 = open(
        Path::new(PATH),
        wal_opts(&copy, Synchronous::Full, 512, &[]),
    );
    assert_eq!(db2.get("t", b"b").unwrap(), None);
    assert_eq!(db2.get("t", b"c").unwrap().unwrap(), b"3");
}

/// W9: at `synchronous=normal` commits do not sync the log; a checkpoint
/// does, before it copies frames into the database file. If that
/// fdatasync fails, the frames may be gone from the disk while the page
/// cache still serves them, and a later fdatasync would succeed: the
/// handle is poisoned instead of retrying, and reopening recovers every
/// commit the log still proves.
#[test]
fn a_failed_log_sync_before_a_checkpoint_poisons_the_handle() {
    for step in ["0", "128"] {
        let mem = MemVfs::new();
        let vfs = FailSync {
            inner: mem.clone(),
            fail: Arc::default(),
            failures: Arc::default(),
        };
        let mut o = mem_opts(&mem, JournalMode::Wal, 512)
            .vfs(Arc::new(vfs.clone()))
            .synchronous(Synchronous::Normal);
        o.set("wal_autocheckpoint", "8").unwrap();
        o.set("checkpoint_step", step).unwrap();
        let db = open(Path::new(PATH), o);
        db.create_table("t").unwrap();
        vfs.fail.store(true, Ordering::SeqCst);
        let mut committed = 0u32;
        let mut refused = None;
        for i in 0..64u32 {
            match db.put("t", &key(i), b"v") {
                Ok(()) => committed += 1,
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        assert_eq!(vfs.failures.load(Ordering::SeqCst), 1, "step {step}");
        // The commit whose checkpoint failed is durable in the log's
        // sense of `normal` (acknowledged); the next one is refused.
        let e = refused.expect("the handle refuses work after the failed sync");
        assert!(matches!(e, Error::Poisoned(_)), "step {step}: {e}");
        assert!(matches!(db.put("t", b"x", b"y"), Err(Error::Poisoned(_))));
        drop(db);
        // MemVfs kept every write: the reopened database has every
        // acknowledged commit.
        let db2 = open(
            Path::new(PATH),
            wal_opts(&mem.duplicate(), Synchronous::Normal, 512, &[]),
        );
        for i in 0..committed {
            assert_eq!(db2.get("t", &key(i)).unwrap().unwrap(), b"v", "step {step}");
        }
        db2.check().unwrap();
    }
}

/// Transfers between accounts keep the total constant; readers on other
/// threads must always see that total while the writer commits and
/// checkpoints run from a third thread.
#[test]
fn concurrent_readers_see_consistent_snapshots() {
    let vfs = MemVfs::new();
    let o = wal_opts(&vfs, Synchronous::Off, 512, &[("wal_autocheckpoint", "16")])
        .cache_size(64 * 512)
        .busy_timeout(Duration::from_millis(5));
    let db = open(Path::new(PATH), o);
    db.create_table("t").unwrap();
    const N: u32 = 300;
    let mut t = db.begin_write().unwrap();
    for i in 0..N {
        t.put("t", &key(i), &1000u64.to_be_bytes()).unwrap();
    }
    t.commit().unwrap();
    let done = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut x = 7u64;
            // 1,500 transfers, and more until the readers have read (on
            // a loaded machine the writer may finish first): the test is
            // about what readers see, not about who is scheduled.
            let mut n = 0;
            while n < 1500 || (reads.load(Ordering::Relaxed) <= 10 && n < 1_000_000) {
                n += 1;
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let (a, b) = (key((x >> 20) as u32 % N), key((x >> 40) as u32 % N));
                let mut t = db.begin_write().unwrap();
                let get = |t: &twinpage::WriteTxn, k: &[u8]| {
                    u64::from_be_bytes(t.get("t", k).unwrap().unwrap().try_into().unwrap())
                };
                let (va, vb) = (get(&t, &a), get(&t, &b));
                let amount = va.min(17);
                if a != b {
                    t.put("t", &a, &(va - amount).to_be_bytes()).unwrap();
                    t.put("t", &b, &(vb + amount).to_be_bytes()).unwrap();
                }
                t.commit().unwrap();
            }
            done.store(true, Ordering::SeqCst);
        });
        for _ in 0..2 {
            s.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    let r = db.begin_read().unwrap();
                    let total: u64 = r
                        .range("t", .., Direction::Forward)
                        .unwrap()
                        .map(|kv| u64::from_be_bytes(kv.unwrap().1.try_into().unwrap()))
                        .sum();
                    assert_eq!(total, 1000 * N as u64);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        s.spawn(|| {
            let modes = [
                CheckpointMode::Passive,
                CheckpointMode::Full,
                CheckpointMode::Restart,
                CheckpointMode::Truncate,
            ];
            let mut i = 0;
            while !done.load(Ordering::SeqCst) {
                db.checkpoint(modes[i % 4]).unwrap();
                i += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    });
    assert!(reads.load(Ordering::Relaxed) > 10);
    db.check().unwrap();
    let total: u64 = db
        .scan("t", .., Direction::Forward)
        .unwrap()
        .iter()
        .map(|(_, v)| u64::from_be_bytes(v.clone().try_into().unwrap()))
        .sum();
    assert_eq!(total, 1000 * N as u64);
}

#[test]
fn a_log_older_than_the_database_is_ignored() {
    let (vfs, _) = commits_then_crash(10);
    let stale = vfs.read_file(Path::new(WAL)).unwrap();
    let db = open(Path::new(PATH), wal_opts(&vfs, Synchronous::Full, 512, &[]));
    db.delete("t", &key(3)).unwrap();
    db.put("t", b"newer", b"yes").unwrap();
    let want = dump(&db);
    db.close().unwrap();
    assert_eq!(wal_len(&vfs), None);
    vfs.write_file(Path::new(WAL), stale);
    let db = open(Path::new(PATH), wal_opts(&vfs, Synchronous::Full, 512, &[]));
    assert!(!db.stats().recovery.recovered, "{:?}", db.stats().recovery);
    assert_matches(&db, &want);
    db.put("t", b"more", b"1").unwrap();
    db.close().unwrap();
    let db = open(Path::new(PATH), wal_opts(&vfs, Synchronous::Full, 512, &[]));
    assert_eq!(db.get("t", b"more").unwrap().unwrap(), b"1");
    assert_eq!(db.get("t", &key(3)).unwrap(), None);
    db.check().unwrap();
}

/// A transaction whose every page was spilled to the log before its commit
/// (a tiny cache), changing values in place (the header's FCC alone
/// changes): page 1 must still be built to be the commit frame. Found by
/// review: the commit failed with "commit without pages". Each commit is
/// checked against a model, then the integrity check and a reopen.
#[test]
fn a_commit_whose_pages_all_spilled_has_a_commit_frame() {
    let vfs = MemVfs::new();
    let opts = || mem_opts(&vfs, JournalMode::Wal, 512).cache_size(16 * 512);
    let db = Db::open(Path::new("/spilled.db"), opts()).unwrap();
    db.create_table("t").unwrap();
    let key = |i: u32| format!("k{i:05}").into_bytes();
    let mut model = BTreeMap::new();
    let mut t = db.begin_write().unwrap();
    for i in 0..3000u32 {
        t.put("t", &key(i), &[1; 20]).unwrap();
        model.insert(key(i), vec![1; 20]);
    }
    t.commit().unwrap();
    for k in 1..60u32 {
        let mut t = db.begin_write().unwrap();
        for i in 0..k {
            let v = vec![(k % 200) as u8 + 2; 20];
            t.put("t", &key(i * 50), &v).unwrap();
            model.insert(key(i * 50), v);
        }
        t.commit()
            .unwrap_or_else(|e| panic!("{k} leaves changed: {e}"));
    }
    let same = |db: &Db, when: &str| {
        let got: BTreeMap<Vec<u8>, Vec<u8>> = db
            .scan("t", .., Direction::Forward)
            .unwrap()
            .into_iter()
            .collect();
        assert!(got == model, "contents differ from the model {when}");
        db.check().unwrap();
    };
    same(&db, "after the commits");
    db.close().unwrap();
    same(
        &Db::open(Path::new("/spilled.db"), opts()).unwrap(),
        "after reopen",
    );
}
