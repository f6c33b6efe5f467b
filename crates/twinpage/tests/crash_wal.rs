//! Crash test for WAL mode on in-memory storage, in the style of
//! `crash_rollback.rs`: power is cut after each I/O operation of a
//! workload of several transactions (spills, a rollback, automatic and
//! manual checkpoints, log restarts), and again after each operation of
//! the recovery that follows. The recovered state must be one of the
//! committed states, and at synchronous=FULL no older than the last
//! acknowledged commit. Strict persistence model (everything before the
//! cut is durable); the crash explorer covers the weaker ones.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use twinpage::journal::CheckpointMode;
use twinpage::storage::{MemVfs, Vfs};
use twinpage::Durability;
use twinpage::{Db, JournalMode, Options, Result, Synchronous};

const PATH: &str = "/crash.db";

fn opts(vfs: Arc<dyn Vfs>, sync: Synchronous, prealloc: bool) -> Options {
    let mut o = Options::default()
        .journal_mode(JournalMode::Wal)
        .synchronous(sync)
        .page_size(512)
        .cache_size(8 * 512)
        .vfs(vfs);
    // A small log: the workload crosses several checkpoints and restarts.
    o.set("wal_autocheckpoint", "6").unwrap();
    o.set("preallocate", if prealloc { "1" } else { "0" })
        .unwrap();
    o
}

type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

/// The transactions under test. `states` receives the state after each
/// commit; the return value counts the acknowledged commits.
fn workload(db: &Db, base: &Rows, states: &mut Vec<Rows>) -> usize {
    let mut rows = base.clone();
    let mut acked = 0;
    let commit = |t: twinpage::WriteTxn, after: &Rows, states: &mut Vec<Rows>| {
        states.push(after.clone());
        let ok = t.commit().is_ok();
        if !ok {
            states.pop();
        }
        ok
    };
    macro_rules! txn {
        ($body:expr) => {{
            let Ok(mut t) = db.begin_write() else {
                return acked;
            };
            let mut next = rows.clone();
            #[allow(clippy::redundant_closure_call)]
            let r: Result<()> = ($body)(&mut t, &mut next);
            if r.is_err() || !commit(t, &next, states) {
                return acked;
            }
            #[allow(unused_assignments)]
            {
                rows = next;
            }
            acked += 1;
        }};
    }
    // A transaction that spills (8-page cache) with splits and overflow.
    txn!(|t: &mut twinpage::WriteTxn, m: &mut Rows| {
        for i in 0..90u32 {
            let (k, v) = (format!("k{:05}", i * 3).into_bytes(), vec![i as u8; 60]);
            t.put("t", &k, &v)?;
            m.insert(k, v);
        }
        t.put("t", b"big", &[9; 3000])?;
        m.insert(b"big".to_vec(), vec![9; 3000]);
        Ok(())
    });
    // Single-row commits (one frame each) across automatic checkpoints.
    for i in 0..8u32 {
        txn!(|t: &mut twinpage::WriteTxn, m: &mut Rows| {
            let (k, v) = (format!("k{:05}", i * 7).into_bytes(), vec![0xEE; 10]);
            t.put("t", &k, &v)?;
            m.insert(k, v);
            Ok(())
        });
    }
    // A spilled transaction that rolls back: its frames must never count.
    {
        let Ok(mut t) = db.begin_write() else {
            return acked;
        };
        for i in 0..200u32 {
            if t.put("t", format!("r{i:05}").as_bytes(), &[7; 50]).is_err() {
                return acked;
            }
        }
        if t.rollback().is_err() {
            return acked;
        }
    }
    // Deletes that merge pages.
    txn!(|t: &mut twinpage::WriteTxn, m: &mut Rows| {
        for i in 0..40u32 {
            let k = format!("k{:05}", i * 6).into_bytes();
            t.delete("t", &k)?;
            m.remove(&k);
        }
        Ok(())
    });
    if db.checkpoint(CheckpointMode::Restart).is_err() {
        return acked;
    }
    for i in 0..3u32 {
        txn!(|t: &mut twinpage::WriteTxn, m: &mut Rows| {
            let (k, v) = (format!("z{i}").into_bytes(), vec![i as u8; 100]);
            t.put("t", &k, &v)?;
            m.insert(k, v);
            Ok(())
        });
    }
    if db.checkpoint(CheckpointMode::Truncate).is_err() {
        return acked;
    }
    txn!(|t: &mut twinpage::WriteTxn, m: &mut Rows| {
        t.put("t", b"last", b"one")?;
        m.insert(b"last".to_vec(), b"one".to_vec());
        Ok(())
    });
    acked
}

fn base_state(sync: Synchronous, prealloc: bool) -> (MemVfs, Rows) {
    let vfs = MemVfs::new();
    let db = open(Path::new(PATH), opts(Arc::new(vfs.clone()), sync, prealloc));
    db.create_table("t").unwrap();
    let mut rows = Rows::new();
    let mut t = db.begin_write().unwrap();
    for i in 0..150u32 {
        let (k, v) = (format!("k{i:05}").into_bytes(), vec![1; 40]);
        t.put("t", &k, &v).unwrap();
        rows.insert(k, v);
    }
    t.commit().unwrap();
    // Leave a non-empty log behind: the cuts start from a crashed session.
    std::mem::forget(db);
    (vfs, rows)
}

fn table(rows: &Rows) -> Model {
    let mut m = Model::new();
    m.insert("t".into(), rows.clone());
    m
}

fn run(sync: Synchronous, prealloc: bool) -> usize {
    let (base, rows) = base_state(sync, prealloc);
    let mut states = vec![rows.clone()];
    let full = CutVfs::new(base.duplicate(), usize::MAX);
    {
        let db = open(
            Path::new(PATH),
            opts(Arc::new(full.clone()), sync, prealloc),
        );
        let acked = workload(&db, &rows, &mut states);
        assert_eq!(acked, states.len() - 1, "a full run commits everything");
        assert_matches(&db, &table(states.last().unwrap()));
    }
    let total = full.log.lock().len();
    eprintln!("{total} operations: {:?}", full.log.lock());
    let durable = JournalMode::Wal.durability(sync) == Durability::Durable;
    let name = format!("wal {sync} preallocate={prealloc}");
    let mut images = 0;
    for cut in 0..total {
        let fs = base.duplicate();
        let mut seen = vec![rows.clone()];
        let acked = match Db::open(
            PATH,
            opts(Arc::new(CutVfs::new(fs.clone(), cut)), sync, prealloc),
        ) {
            Ok(db) => {
                let a = workload(&db, &rows, &mut seen);
                std::mem::forget(db); // power is cut: no clean close
                a
            }
            Err(_) => 0,
        };
        let image = fs.duplicate();
        let mut rec_cut = 0;
        loop {
            let attempt = image.duplicate();
            let cv = CutVfs::new(attempt.clone(), rec_cut);
            let finished = match Db::open(PATH, opts(Arc::new(cv), sync, prealloc)) {
                Ok(db) => {
                    db.check()
                        .unwrap_or_else(|e| panic!("{name}: cut {cut}/{rec_cut}: {e}"));
                    let got = dump(&db);
                    let j = states
                        .iter()
                        .position(|s| table(s) == got)
                        .unwrap_or_else(|| {
                            panic!("{name}: cut {cut}/{rec_cut}: not a committed state")
                        });
                    assert!(
                        j <= acked + 1,
                        "{name}: cut {cut}: state {j} after {acked} acks"
                    );
                    if durable {
                        assert!(
                            j >= acked,
                            "{name}: cut {cut}: acked commit lost ({j} < {acked})"
                        );
                    }
                    std::mem::forget(db);
                    true
                }
                Err(_) => false,
            };
            images += 1;
            // Recover from what that attempt left, then keep working.
            let db = open(
                Path::new(PATH),
                opts(Arc::new(attempt.duplicate()), sync, prealloc),
            );
            db.check().unwrap();
            let got = dump(&db);
            assert!(
                states.iter().any(|s| table(s) == got),
                "{name}: cut {cut}: recovery after recovery cut {rec_cut}"
            );
            db.put("t", b"after", b"crash").unwrap();
            db.close().unwrap();
            if finished || rec_cut > 64 {
                break;
            }
            rec_cut += 1;
        }
    }
    images
}

#[test]
fn wal_survives_a_cut_after_every_operation() {
    for sync in [Synchronous::Full, Synchronous::Normal] {
        for prealloc in [false, true] {
            let images = run(sync, prealloc);
            eprintln!("wal {sync} preallocate={prealloc}: {images} crash images");
            assert!(images > 50, "only {images} crash images");
        }
    }
}
