//! In-memory file system for tests. Files behave like POSIX inodes: a
//! removed or renamed file stays readable through handles already open.
//!
//! Like a kernel, which reuses its inodes and name buffers without the
//! program allocating, it recycles what removed files leave (names, and
//! inodes with their byte buffers, once no handle is open) for the next
//! files created, and renames move a name's buffer to the new name: so a
//! heap-counting test sees the engine's allocations, not this file
//! system's. Opening a file still allocates its handle.

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
    spare: Arc<Mutex<Spare>>,
}

/// What removed files and closed handles leave for the next files.
#[derive(Default)]
struct Spare {
    names: Vec<PathBuf>,
    /// Unlinked inodes no handle refers to, emptied.
    inodes: Vec<Arc<Inode>>,
}

/// Names and inodes kept for reuse at most.
const SPARE_FILES: usize = 8;
/// A recycled inode keeps a byte buffer up to this capacity.
const SPARE_BYTES: usize = 1 << 20;

impl Spare {
    /// `path` in a recycled name buffer (growing it if it is too short).
    fn name(&mut self, path: &Path) -> PathBuf {
        match self.names.pop() {
            Some(b) => reuse_name(b, path),
            None => path.to_path_buf(),
        }
    }

    fn keep_name(&mut self, name: PathBuf) {
        if self.names.len() < SPARE_FILES {
            self.names.push(name);
        }
    }

    /// Keep `inode`, emptied, for a file created later. The caller made
    /// sure nothing else refers to it: no name, no other handle.
    fn keep_inode(&mut self, inode: Arc<Inode>) {
        if self.inodes.len() >= SPARE_FILES {
            return;
        }
        {
            let mut data = inode.data.lock();
            if data.capacity() > SPARE_BYTES {
                *data = Vec::new();
            } else {
                data.clear();
            }
            *inode.lock.lock() = (0, false);
        }
        self.inodes.push(inode);
    }

    fn inode(&mut self) -> Arc<Inode> {
        self.inodes.pop().unwrap_or_default()
    }
}

/// `path`, written into the buffer of `name`.
fn reuse_name(name: PathBuf, path: &Path) -> PathBuf {
    let mut s = name.into_os_string();
    s.clear();
    s.push(path.as_os_str());
    PathBuf::from(s)
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
        let mut spare = self.spare.lock();
        let inode = match files.get(path) {
            Some(i) => i.clone(),
            None if flags.create && !flags.read_only => {
                let i = spare.inode();
                files.insert(spare.name(path), i.clone());
                i
            }
            None => return Err(not_found("open", path)),
        };
        Ok(Arc::new(MemFile {
            inode,
            path: spare.name(path),
            held: Mutex::new(None),
            spare: self.spare.clone(),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        Ok(self.files.lock().contains_key(path))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let (name, inode) = self
            .files
            .lock()
            .remove_entry(path)
            .ok_or_else(|| not_found("unlink", path))?;
        let mut spare = self.spare.lock();
        spare.keep_name(name);
        if Arc::strong_count(&inode) == 1 {
            spare.keep_inode(inode);
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut files = self.files.lock();
        let (name, inode) = files
            .remove_entry(from)
            .ok_or_else(|| not_found("rename", from))?;
        let replaced = match files.get_mut(to) {
            Some(slot) => {
                self.spare.lock().keep_name(name);
                Some(std::mem::replace(slot, inode))
            }
            // The name's buffer moves to the new name.
            None => {
                files.insert(reuse_name(name, to), inode);
                None
            }
        };
        drop(files);
        if let Some(old) = replaced.filter(|i| Arc::strong_count(i) == 1) {
            self.spare.lock().keep_inode(old);
        }
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
    spare: Arc<Mutex<Spare>>,
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
        // As pwrite: writing nothing does not extend the file.
        if buf.is_empty() {
            return Ok(());
        }
        let mut data = self.inode.data.lock();
        let end = offset as usize + buf.len();
        if data.len() < end {
            data.resize(end, 0);
        }
        data[offset as usize..end].copy_from_slice(buf);
        Ok(())
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum::<usize>();
        if len == 0 {
            return Ok(());
        }
        let mut data = self.inode.data.lock();
        let mut at = offset as usize;
        let end = at + len;
        if data.len() < end {
            data.resize(end, 0);
        }
        for b in bufs {
            data[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
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
        let mut spare = self.spare.lock();
        spare.keep_name(std::mem::take(&mut self.path));
        // The last handle of an unlinked file: nothing else can reach the
        // inode (a name would hold a reference), so it is recycled; this
        // handle's reference goes when the fields drop.
        if Arc::strong_count(&self.inode) == 1 {
            spare.keep_inode(self.inode.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_files_start_empty_and_unlinked_ones_stay_readable() {
        let vfs = MemVfs::new();
        let (a, b) = (Path::new("/a"), Path::new("/b"));
        let f = vfs.open(a, OpenFlags::CREATE).unwrap();
        f.write_at(b"old bytes", 0).unwrap();
        f.try_lock(FileLock::Exclusive).unwrap();
        vfs.remove(a).unwrap();
        // Unlinked but open: still readable, and not handed out again.
        let g = vfs.open(a, OpenFlags::CREATE).unwrap();
        assert_eq!(g.len().unwrap(), 0);
        let mut buf = [0u8; 9];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 9);
        assert_eq!(&buf, b"old bytes");
        drop(f);
        // The recycled inode comes back empty and unlocked.
        let h = vfs.open(b, OpenFlags::CREATE).unwrap();
        assert_eq!(h.len().unwrap(), 0);
        assert!(h.try_lock(FileLock::Exclusive).unwrap());
        assert_eq!(h.path(), b);
        g.write_at(b"g", 0).unwrap();
        // A rename over an existing name replaces its file.
        vfs.rename(a, b).unwrap();
        assert!(!vfs.exists(a).unwrap());
        assert_eq!(vfs.read_file(b).unwrap(), b"g");
        let mut one = [0u8; 1];
        assert_eq!(h.read_at(&mut one, 0).unwrap(), 0);
        assert_eq!(vfs.list(), vec![PathBuf::from("/b")]);
        vfs.rename(b, Path::new("/a-much-longer-name")).unwrap();
        assert_eq!(vfs.list(), vec![PathBuf::from("/a-much-longer-name")]);
    }
}
