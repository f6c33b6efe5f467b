//! A file system whose syncs take time, for the interleaved workload with
//! group commit ([`super::workload::WorkloadConfig::group_commit`]).
//!
//! The simulated file system syncs instantly, so commits on parallel
//! threads would almost never find a sync in flight and share it. Here a
//! sync first goes to the inner file system, which fixes what it covers
//! (the writes issued before it), then sleeps: writes other threads issue
//! meanwhile are not covered by it, as on a device whose fdatasync is in
//! flight, and commits that become ready meanwhile queue up for the next.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use twinpage::storage::{FileLock, OpenFlags, Vfs, VfsFile};
use twinpage::Result;

/// `inner` with every `sync_data`/`sync_all` of a file taking `delay`
/// after it has reached `inner`.
pub struct SlowSync {
    /// The file system underneath.
    pub inner: Arc<dyn Vfs>,
    /// How long a sync stays in flight.
    pub delay: Duration,
}

struct SlowFile {
    inner: Arc<dyn VfsFile>,
    delay: Duration,
}

impl Vfs for SlowSync {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(SlowFile {
            inner: self.inner.open(path, flags)?,
            delay: self.delay,
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

impl VfsFile for SlowFile {
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
        let r = self.inner.sync_data();
        std::thread::sleep(self.delay);
        r
    }
    fn sync_all(&self) -> Result<()> {
        let r = self.inner.sync_all();
        std::thread::sleep(self.delay);
        r
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
