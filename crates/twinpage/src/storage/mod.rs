//! Storage layer: the file-system interface every other layer uses.
//!
//! Everything above this module does I/O only through [`Vfs`] and
//! [`VfsFile`], so the same engine runs on the OS ([`OsVfs`]), in memory
//! ([`MemVfs`]), and on the crash-simulating file system of the
//! `twinpage-sim` crate used by the crash explorer. [`CountingVfs`] wraps
//! any of them and counts every call.

mod counting;
mod dbfile;
mod mem;
mod os;
mod readonly;

pub use counting::{CountingVfs, IoCounters, IoEvent, IoSnapshot};
pub use dbfile::{wait_os_lock, DbFile};
pub use mem::MemVfs;
pub use os::OsVfs;
pub use readonly::ReadOnlyVfs;

use crate::base::Result;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFlags {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Open read-only.
    pub read_only: bool,
}

impl OpenFlags {
    /// Open an existing file or create it, read-write.
    pub const CREATE: OpenFlags = OpenFlags {
        create: true,
        read_only: false,
    };
    /// Open an existing file read-write.
    pub const EXISTING: OpenFlags = OpenFlags {
        create: false,
        read_only: false,
    };
}

/// Advisory whole-file lock kinds (used to keep a second process out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileLock {
    /// Shared lock (many holders).
    Shared,
    /// Exclusive lock (one holder).
    Exclusive,
}

/// A file system: namespace operations plus opening files.
pub trait Vfs: Send + Sync {
    /// Open (and possibly create) a file.
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>>;
    /// Whether a file exists.
    fn exists(&self, path: &Path) -> Result<bool>;
    /// Remove a file (unlink).
    fn remove(&self, path: &Path) -> Result<()>;
    /// Atomically rename `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Make the directory's entries durable (fsync on the directory).
    fn sync_dir(&self, dir: &Path) -> Result<()>;
}

/// An open file. All methods take `&self`: positional I/O needs no cursor,
/// so one handle can be shared by readers and the writer.
// `len` is fallible I/O, not a container length: no `is_empty`.
#[allow(clippy::len_without_is_empty)]
pub trait VfsFile: Send + Sync {
    /// The path the file was opened with.
    fn path(&self) -> &Path;
    /// Read up to `buf.len()` bytes at `offset`; returns the number read,
    /// which is short only at end of file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize>;
    /// Write all of `buf` at `offset`, extending the file if needed.
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Write `bufs` back to back from `offset` as one write: the same as a
    /// [`VfsFile::write_at`] of their concatenation, which is what the
    /// default does. A file that can write from scattered buffers (the OS
    /// file's `pwritev`) overrides it, so a journal writes a page image
    /// from where it lies instead of copying it behind a record header.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let mut all = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
        for b in bufs {
            all.extend_from_slice(b);
        }
        self.write_at(&all, offset)
    }
    /// fdatasync: make written data (and the size) durable.
    fn sync_data(&self) -> Result<()>;
    /// fsync: make data and all metadata durable.
    fn sync_all(&self) -> Result<()>;
    /// Truncate or extend the file.
    fn set_len(&self, len: u64) -> Result<()>;
    /// Current length in bytes.
    fn len(&self) -> Result<u64>;
    /// Try to take an advisory lock without waiting; `Ok(false)` if another
    /// holder prevents it.
    fn try_lock(&self, kind: FileLock) -> Result<bool>;
    /// Release the advisory lock.
    fn unlock(&self) -> Result<()>;
}

impl dyn VfsFile {
    /// Read exactly `buf.len()` bytes at `offset`, failing with a
    /// corruption error naming `page` if the file is too short.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64, page: u32) -> Result<()> {
        let n = self.read_at(buf, offset)?;
        if n != buf.len() {
            return Err(crate::base::Error::corrupt(
                self.path().display().to_string(),
                page,
                format!(
                    "short read: wanted {} bytes at offset {offset}, file ends after {n}",
                    buf.len()
                ),
            ));
        }
        Ok(())
    }
}

/// The parent directory of a path ("." when it has none).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `path` with `suffix` appended to its file name (`db` -> `db-journal`).
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// A fresh random number for log and journal salts. The standard library's
/// hasher keys are seeded from the OS's random source, which is all a salt
/// needs (it must differ between log generations, not be secret).
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}
