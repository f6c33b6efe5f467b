//! A file system that refuses every change: what a read-only database runs
//! on (pager invariant P8). Reads, lengths and advisory locks pass through;
//! creating, writing, syncing, truncating, renaming and removing fail with
//! [`Error::ReadOnly`] naming the file and the operation, so recovery that
//! would have to write explains why it cannot run.

use super::{FileLock, OpenFlags, Vfs, VfsFile};
use crate::base::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// Wraps a [`Vfs`] and refuses every change.
pub struct ReadOnlyVfs {
    inner: Arc<dyn Vfs>,
}

impl ReadOnlyVfs {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Vfs>) -> Self {
        ReadOnlyVfs { inner }
    }
}

fn refuse(op: &str, path: &Path) -> Error {
    Error::ReadOnly(format!(
        "opened read-only, so {op} of {} is refused (a database that needs \
         recovery must be opened read-write once)",
        path.display()
    ))
}

impl Vfs for ReadOnlyVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        if flags.create && !self.inner.exists(path)? {
            return Err(refuse("creation", path));
        }
        let inner = self.inner.open(
            path,
            OpenFlags {
                create: false,
                read_only: true,
            },
        )?;
        Ok(Arc::new(ReadOnlyFile { inner }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        Err(refuse("removal", path))
    }

    fn rename(&self, from: &Path, _to: &Path) -> Result<()> {
        Err(refuse("renaming", from))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        Err(refuse("directory sync", dir))
    }
}

struct ReadOnlyFile {
    inner: Arc<dyn VfsFile>,
}

impl VfsFile for ReadOnlyFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> Result<()> {
        Err(refuse("a write", self.path()))
    }

    fn write_vectored_at(&self, _bufs: &[&[u8]], _offset: u64) -> Result<()> {
        Err(refuse("a write", self.path()))
    }

    fn sync_data(&self) -> Result<()> {
        Err(refuse("fdatasync", self.path()))
    }

    fn sync_all(&self) -> Result<()> {
        Err(refuse("fsync", self.path()))
    }

    fn set_len(&self, _len: u64) -> Result<()> {
        Err(refuse("truncation", self.path()))
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
