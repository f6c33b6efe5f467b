//! In-memory file system for tests. Files behave like POSIX inodes: a
//! removed or renamed file stays readable through handles already open.

use super::{FileLock, OpenFlags, Vfs, VfsFile};
use crate::base::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Default)]
struct Inode {
    data: Mutex<Vec<u8>>,
    /// (number of shared holders, exclusive held)
    lock: Mutex<(u32, bool)>,
}

/// An in-memory file system; clones share the same files.
#[derive(Default, Clone)]
pub struct MemVfs {
    files: Arc<Mutex<HashMap<PathBuf, Arc<Inode>>>>,
}

impl MemVfs {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of a file's current bytes, if it exists.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        self.files.lock().get(path).map(|i| i.data.lock().clone())
    }

    /// Create or replace a file with the given bytes.
    pub fn write_file(&self, path: &Path, bytes: Vec<u8>) {
        let inode = Arc::new(Inode::default());
        *inode.data.lock() = bytes;
        self.files.lock().insert(path.to_path_buf(), inode);
    }

    /// Names of all files.
    pub fn list(&self) -> Vec<PathBuf> {
        let mut v: Vec<_> = self.files.lock().keys().cloned().collect();
        v.sort();
        v
    }

    /// An independent file system holding a copy of every file as it is
    /// now (`clone` shares the files): what a crash at this moment leaves
    /// when every write so far is durable.
    pub fn duplicate(&self) -> MemVfs {
        let copy = MemVfs::new();
        for f in self.list() {
            if let Some(bytes) = self.read_file(&f) {
                copy.write_file(&f, bytes);
            }
        }
        copy
    }
}

fn not_found(op: &'static str, path: &Path) -> Error {
    Error::io(op, path, std::io::Error::from(std::io::ErrorKind::NotFound))
}

impl Vfs for MemVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        let mut files = self.files.lock();
        let inode = match files.get(path) {
            Some(i) => i.clone(),
            None if flags.create && !flags.read_only => {
                let i = Arc::new(Inode::default());
                files.insert(path.to_path_buf(), i.clone());
                i
            }
            None => return Err(not_found("open", path)),
        };
        Ok(Arc::new(MemFile {
            inode,
            path: path.to_path_buf(),
            held: Mutex::new(None),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        Ok(self.files.lock().contains_key(path))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        match self.files.lock().remove(path) {
            Some(_) => Ok(()),
            None => Err(not_found("unlink", path)),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut files = self.files.lock();
        let inode = files
            .remove(from)
            .ok_or_else(|| not_found("rename", from))?;
        files.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }
}

struct MemFile {
    inode: Arc<Inode>,
    path: PathBuf,
    held: Mutex<Option<FileLock>>,
}

impl VfsFile for MemFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let data = self.inode.data.lock();
        let len = data.len() as u64;
        if offset >= len {
            return Ok(0);
        }
        let n = ((len - offset) as usize).min(buf.len());
        buf[..n].copy_from_slice(&data[offset as usize..offset as usize + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut data = self.inode.data.lock();
        let end = offset as usize + buf.len();
        if data.len() < end {
            data.resize(end, 0);
        }
        data[offset as usize..end].copy_from_slice(buf);
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        Ok(())
    }

    fn sync_all(&self) -> Result<()> {
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.inode.data.lock().resize(len as usize, 0);
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.inode.data.lock().len() as u64)
    }

    fn try_lock(&self, kind: FileLock) -> Result<bool> {
        let mut held = self.held.lock();
        let mut st = self.inode.lock.lock();
        // Drop what this handle holds first (flock converts in place).
        match *held {
            Some(FileLock::Shared) => st.0 -= 1,
            Some(FileLock::Exclusive) => st.1 = false,
            None => {}
        }
        let ok = match kind {
            FileLock::Shared => !st.1,
            FileLock::Exclusive => !st.1 && st.0 == 0,
        };
        let now = if ok { Some(kind) } else { *held };
        match now {
            Some(FileLock::Shared) => st.0 += 1,
            Some(FileLock::Exclusive) => st.1 = true,
            None => {}
        }
        *held = now;
        Ok(ok)
    }

    fn unlock(&self) -> Result<()> {
        let mut held = self.held.lock();
        let mut st = self.inode.lock.lock();
        match held.take() {
            Some(FileLock::Shared) => st.0 -= 1,
            Some(FileLock::Exclusive) => st.1 = false,
            None => {}
        }
        Ok(())
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        let _ = self.unlock();
    }
}
