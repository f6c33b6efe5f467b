//! Minimum crash test for the rollback-journal modes on in-memory storage:
//! power is cut after each I/O operation of a commit (and of the recovery
//! that follows), and reopening must give exactly the old or the new state.
//! The full explorer with weaker persistence models lives in the crash
//! tools; this test uses the strict model (everything before the cut is
//! durable, nothing after).

mod common;

use common::*;
use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use twinpage::storage::{FileLock, MemVfs, OpenFlags, Vfs, VfsFile};
use twinpage::{Error, JournalMode, Options, Result, Synchronous};

/// Lets `limit` mutating operations through, then fails every later one:
/// the state of the inner file system is the crash image.
#[derive(Clone)]
struct CutVfs {
    inner: MemVfs,
    left: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
}

impl CutVfs {
    fn new(inner: MemVfs, limit: usize) -> Self {
        CutVfs {
            inner,
            left: Arc::new(AtomicUsize::new(limit)),
            log: Arc::default(),
        }
    }

    fn step(&self, what: String) -> Result<()> {
        let ok = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if ok {
            self.log.lock().push(what);
            Ok(())
        } else {
            Err(Error::io(
                "power cut",
                "/",
                std::io::Error::other("power cut"),
            ))
        }
    }
}

struct CutFile {
    inner: Arc<dyn VfsFile>,
    vfs: CutVfs,
}

impl Vfs for CutVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        if flags.create && !self.inner.exists(path)? {
            self.step(format!("create {}", path.display()))?;
        }
        Ok(Arc::new(CutFile {
            inner: self.inner.open(path, flags)?,
            vfs: self.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.step(format!("unlink {}", path.display()))?;
        self.inner.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.step(format!("rename {}", from.display()))?;
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.step(format!("syncdir {}", dir.display()))
    }
}

impl VfsFile for CutFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.vfs
            .step(format!("write {} @{offset}", self.path().display()))?;
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> Result<()> {
        self.vfs
            .step(format!("fdatasync {}", self.path().display()))
    }
    fn sync_all(&self) -> Result<()> {
        self.vfs.step(format!("fsync {}", self.path().display()))
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.vfs
            .step(format!("ftruncate {} {len}", self.path().display()))?;
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

fn copy(vfs: &MemVfs) -> MemVfs {
    let c = MemVfs::new();
    for f in vfs.list() {
        c.write_file(&f, vfs.read_file(&f).unwrap());
    }
    c
}

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

fn run_mode(mode: JournalMode, sync: Synchronous) -> usize {
    let base = base_state(mode, sync);
    let old = {
        let db = open(Path::new(PATH), opts(Arc::new(copy(&base)), mode, sync));
        dump(&db)
    };
    // A full run tells how many operations the workload issues.
    let full = CutVfs::new(copy(&base), usize::MAX);
    let new = {
        let db = open(Path::new(PATH), opts(Arc::new(full.clone()), mode, sync));
        workload(&db).unwrap();
        dump(&db)
    };
    let total = full.log.lock().len();
    let mut states = 0;
    for cut in 0..total {
        let fs = copy(&base);
        let cutvfs = CutVfs::new(fs.clone(), cut);
        let acked = match twinpage::Db::open(Path::new(PATH), opts(Arc::new(cutvfs), mode, sync)) {
            Ok(db) => workload(&db).is_ok(),
            Err(_) => false,
        };
        let image = copy(&fs);
        // Crash again at every step of recovery, then recover fully.
        let mut rec_cut = 0;
        loop {
            let attempt = copy(&image);
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
                    if acked && mode.durability(sync) == twinpage::journal::Durability::Durable {
                        assert!(got == new, "{mode}: acknowledged commit lost at cut {cut}");
                    }
                    std::mem::forget(db); // power is cut: no clean close
                    true
                }
                Err(_) => false,
            };
            states += 1;
            // Recover from what that attempt left (a crash during recovery).
            let db = open(Path::new(PATH), opts(Arc::new(copy(&attempt)), mode, sync));
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
