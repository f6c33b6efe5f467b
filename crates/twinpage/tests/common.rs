//! Helpers shared by the integration tests.
#![allow(dead_code)]

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use twinpage::storage::{FileLock, MemVfs, OpenFlags, Vfs, VfsFile};
use twinpage::{Db, Direction, Error, JournalMode, Options, ReadTxn, Result, Synchronous};

pub type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// One table's rows.
pub type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

/// A reader's rows of table `t`, or `None` for MVBT's documented
/// "snapshot too old" (a retryable conflict: the versions it needs were
/// collected, \[LSM\] §4).
pub fn snapshot_view(r: &ReadTxn) -> Option<Rows> {
    let rows: Result<Rows> = r
        .range("t", .., Direction::Forward)
        .and_then(|it| it.collect());
    match rows {
        Ok(rows) => Some(rows),
        Err(e) if e.is_retryable() => None,
        Err(e) => panic!("{e}"),
    }
}

pub fn mem_opts(vfs: &MemVfs, mode: JournalMode, page_size: usize) -> Options {
    Options::default()
        .journal_mode(mode)
        .synchronous(Synchronous::Full)
        .page_size(page_size)
        .cache_size(64 * page_size)
        .vfs(Arc::new(vfs.clone()))
}

/// Everything in the database, table by table.
pub fn dump(db: &Db) -> Model {
    let r = db.begin_read().unwrap();
    let mut m = Model::new();
    for t in r.tables().unwrap() {
        let rows: BTreeMap<_, _> = r
            .range(&t, .., Direction::Forward)
            .unwrap()
            .map(|kv| kv.unwrap())
            .collect();
        m.insert(t, rows);
    }
    m
}

/// Assert the database equals the model and passes the integrity check.
pub fn assert_matches(db: &Db, model: &Model) {
    db.check().expect("integrity check");
    assert_eq!(&dump(db), model);
}

pub fn open(path: &Path, opts: Options) -> Db {
    Db::open(path, opts).expect("open")
}

/// Lets `limit` mutating operations through, then fails every later one:
/// the state of the inner file system is the crash image.
#[derive(Clone)]
pub struct CutVfs {
    pub inner: MemVfs,
    left: Arc<AtomicUsize>,
    /// The operations let through, in order.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl CutVfs {
    pub fn new(inner: MemVfs, limit: usize) -> Self {
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

pub struct CutFile {
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
