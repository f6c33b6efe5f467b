//! The database file as the journal modes and the pager see it: page-sized
//! positional I/O on a replaceable handle, and the exclusive advisory lock
//! that guards recovery.

use super::{FileLock, Vfs, VfsFile};
use crate::base::{Error, Pgno, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The database file as the journal modes see it.
pub struct DbFile {
    /// The file system (counted).
    pub vfs: Arc<dyn Vfs>,
    /// Database path.
    pub path: PathBuf,
    /// Open database file; replaceable because DASH's Atomic Exchange
    /// renames another inode to the database name at every commit.
    file: parking_lot::RwLock<Arc<dyn VfsFile>>,
    /// Page size in bytes.
    pub page_size: usize,
}

impl DbFile {
    /// A database file handle.
    pub fn new(vfs: Arc<dyn Vfs>, path: PathBuf, file: Arc<dyn VfsFile>, page_size: usize) -> Self {
        DbFile {
            vfs,
            path,
            file: parking_lot::RwLock::new(file),
            page_size,
        }
    }

    /// The open database file.
    pub fn file(&self) -> Arc<dyn VfsFile> {
        self.file.read().clone()
    }

    /// Replace the open handle (after a rename put another file at the
    /// database path).
    pub fn set_file(&self, f: Arc<dyn VfsFile>) {
        *self.file.write() = f;
    }

    fn offset(&self, pgno: Pgno) -> u64 {
        (pgno as u64 - 1) * self.page_size as u64
    }

    /// Read page `pgno` into `buf` (one page).
    pub fn read_page(&self, pgno: Pgno, buf: &mut [u8]) -> Result<()> {
        self.file().read_exact_at(buf, self.offset(pgno), pgno)
    }

    /// Write one page image.
    pub fn write_page(&self, pgno: Pgno, data: &[u8]) -> Result<()> {
        self.file().write_at(data, self.offset(pgno))
    }

    /// Write the images of consecutive pages from `first` in one call
    /// (`data` holds a whole number of pages).
    pub fn write_pages(&self, first: Pgno, data: &[u8]) -> Result<()> {
        if first == 0 || !data.len().is_multiple_of(self.page_size) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes from page {first} are not whole {}-byte pages",
                data.len(),
                self.page_size
            )));
        }
        self.file().write_at(data, self.offset(first))
    }
}

/// Take an exclusive advisory lock on `file`, retrying until `timeout`;
/// `Error::Locked(path)` if another holder keeps it.
pub fn wait_os_lock(file: &Arc<dyn VfsFile>, path: &Path, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if file.try_lock(FileLock::Exclusive)? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Locked(path.to_path_buf()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
