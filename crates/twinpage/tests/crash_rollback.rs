//! Minimum crash test for the rollback-journal modes on in-memory storage:
//! power is cut after each I/O operation of a commit (and of the recovery
//! that follows), and reopening must give exactly the old or the new state.
//! The full explorer with weaker persistence models lives in the crash
//! tools; this test uses the strict model (everything before the cut is
//! durable, nothing after).

mod common;

use common::*;
use std::path::Path;
use std::sync::Arc;
use twinpage::storage::{MemVfs, Vfs};
use twinpage::{JournalMode, Options, Result, Synchronous};

fn opts(vfs: Arc<dyn Vfs>, mode: JournalMode, sync: Synchronous) -> Options {
    Options::default()
        .journal_mode(mode)
        .synchronous(sync)
        .page_size(512)
        .cache_size(8 * 512)
        .vfs(vfs)
}

const PATH: &str = "/crash.db";

/// The transaction under test: splits, overflow values, deletes that
/// merge, and (with the small cache) a spill before commit.
fn workload(db: &twinpage::Db) -> Result<()> {
    let mut t = db.begin_write()?;
    for i in 0..120u32 {
        t.put("t", format!("k{:05}", i * 3).as_bytes(), &[i as u8; 60])?;
    }
    t.put("t", b"big", &[9; 3000])?;
    for i in 0..40u32 {
        t.delete("t", format!("k{:05}", i * 6).as_bytes())?;
    }
    t.commit()
}

fn base_state(mode: JournalMode, sync: Synchronous) -> MemVfs {
    let vfs = MemVfs::new();
    let db = open(Path::new(PATH), opts(Arc::new(vfs.clone()), mode, sync));
    db.create_table("t").unwrap();
    let mut t = db.begin_write().unwrap();
    for i in 0..300u32 {
        t.put("t", format!("k{i:05}").as_bytes(), &[1; 40]).unwrap();
    }
    t.commit().unwrap();
    db.close().unwrap();
    vfs
}

/// One row changed: no spill, so page 1 is in the commit's only batch and
/// goes into the journal header as its original prefix, not a record.
fn one_row(db: &twinpage::Db) -> Result<()> {
    db.put("t", b"k00007", &[7; 40])
}

fn run_mode(mode: JournalMode, sync: Synchronous) -> usize {
    run_workload(mode, sync, workload)
}

fn run_workload(
    mode: JournalMode,
    sync: Synchronous,
    workload: fn(&twinpage::Db) -> Result<()>,
) -> usize {
    let base = base_state(mode, sync);
    let old = {
        let db = open(
            Path::new(PATH),
            opts(Arc::new(base.duplicate()), mode, sync),
        );
        dump(&db)
    };
    // A full run tells how many operations the workload issues.
    let full = CutVfs::new(base.duplicate(), usize::MAX);
    let new = {
        let db = open(Path::new(PATH), opts(Arc::new(full.clone()), mode, sync));
        workload(&db).unwrap();
        dump(&db)
    };
    let total = full.log.lock().len();
    let mut states = 0;
    for cut in 0..total {
        let fs = base.duplicate();
        let cutvfs = CutVfs::new(fs.clone(), cut);
        let acked = match twinpage::Db::open(Path::new(PATH), opts(Arc::new(cutvfs), mode, sync)) {
            Ok(db) => workload(&db).is_ok(),
            Err(_) => false,
        };
        let image = fs.duplicate();
        // Crash again at every step of recovery, then recover fully.
        let mut rec_cut = 0;
        loop {
            let attempt = image.duplicate();
            let cv = CutVfs::new(attempt.clone(), rec_cut);
            let finished = match twinpage::Db::open(Path::new(PATH), opts(Arc::new(cv), mode, sync))
            {
                Ok(db) => {
                    db.check()
                        .unwrap_or_else(|e| panic!("{mode} cut {cut}/{rec_cut}: {e}"));
                    let got = dump(&db);
                    assert!(
                        got == old || got == new,
                        "{mode} {sync}: cut {cut} recovery cut {rec_cut}: neither old nor new state"
                    );
                    if acked && mode.durability(sync) == twinpage::Durability::Durable {
                        assert!(got == new, "{mode}: acknowledged commit lost at cut {cut}");
                    }
                    std::mem::forget(db); // power is cut: no clean close
                    true
                }
                Err(_) => false,
            };
            states += 1;
            // Recover from what that attempt left (a crash during recovery).
            let db = open(
                Path::new(PATH),
                opts(Arc::new(attempt.duplicate()), mode, sync),
            );
            db.check().unwrap();
            let got = dump(&db);
            assert!(
                got == old || got == new,
                "{mode}: recovery after recovery cut {rec_cut}"
            );
            // One more transaction works and survives a clean reopen.
            db.put("t", b"after", b"crash").unwrap();
            db.check().unwrap();
            if finished || rec_cut > 64 {
                break;
            }
            rec_cut += 1;
        }
    }
    states
}

#[test]
fn rollback_modes_survive_a_cut_after_every_operation() {
    for (mode, sync) in [
        (JournalMode::Delete, Synchronous::Full),
        (JournalMode::Delete, Synchronous::Extra),
        (JournalMode::Truncate, Synchronous::Full),
        (JournalMode::Persist, Synchronous::Full),
        (JournalMode::Persist, Synchronous::Normal),
    ] {
        let states = run_mode(mode, sync);
        assert!(states > 10, "{mode}: only {states} states");
    }
}

/// The commit of one row journals the leaf as a record and page 1 by the
/// original bytes of its header in the journal header; every cut of that
/// commit and of the recovery after it gives the old or the new state.
#[test]
fn page_1_journaled_by_its_header_survives_every_cut() {
    for mode in [
        JournalMode::Delete,
        JournalMode::Truncate,
        JournalMode::Persist,
    ] {
        let states = run_workload(mode, Synchronous::Full, one_row);
        assert!(states > 10, "{mode}: only {states} states");
    }
    // A PERSIST journal stays behind (its first 36 bytes zeroed): after
    // its 512-byte header, which kept page 1's 84-byte prefix, the first
    // record is the leaf's, not page 1's.
    let vfs = base_state(JournalMode::Persist, Synchronous::Full);
    let db = open(
        Path::new(PATH),
        opts(
            Arc::new(vfs.clone()),
            JournalMode::Persist,
            Synchronous::Full,
        ),
    );
    one_row(&db).unwrap();
    db.check().unwrap();
    let journal = vfs.read_file(Path::new("/crash.db-journal")).unwrap();
    assert_eq!(
        &journal[36..38],
        &84u16.to_be_bytes(),
        "page 1's prefix length"
    );
    let first = u32::from_be_bytes(journal[512..516].try_into().unwrap());
    assert!(first > 1, "the first record is page {first}");
}
