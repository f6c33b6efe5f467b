//! The OS file system: pread/pwrite/fdatasync/fsync and flock.

use super::{FileLock, OpenFlags, Vfs, VfsFile};
use crate::base::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The real file system.
#[derive(Debug, Default, Clone)]
pub struct OsVfs;

impl OsVfs {
    /// A handle to the OS file system.
    pub fn new() -> Self {
        OsVfs
    }
}

struct OsFile {
    file: File,
    path: PathBuf,
}

impl Vfs for OsVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(!flags.read_only)
            .create(flags.create && !flags.read_only)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        Ok(Arc::new(OsFile {
            file,
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        match std::fs::symlink_metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("stat", path, e)),
        }
    }

    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io("unlink", path, e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let d = File::open(dir).map_err(|e| Error::io("open dir", dir, e))?;
        d.sync_all().map_err(|e| Error::io("fsync dir", dir, e))
    }
}

impl VfsFile for OsFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("pread", &self.path, e)),
            }
        }
        Ok(done)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| Error::io("pwrite", &self.path, e))
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        // Up to this many buffers per pwritev, from an array on the stack.
        const IOV: usize = 64;
        let (mut i, mut skip, mut at) = (0, 0, offset);
        loop {
            // Past the buffers written in full (and empty ones).
            while i < bufs.len() && skip == bufs[i].len() {
                (i, skip) = (i + 1, 0);
            }
            if i == bufs.len() {
                return Ok(());
            }
            let Ok(off) = libc::off_t::try_from(at) else {
                // An offset this platform's off_t cannot hold: one pwrite.
                let rest: Vec<u8> = (bufs[i][skip..].iter())
                    .chain(bufs[i + 1..].iter().flat_map(|b| b.iter()))
                    .copied()
                    .collect();
                return self.write_at(&rest, at);
            };
            let n = (bufs.len() - i).min(IOV);
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; IOV];
            for (k, b) in bufs[i..i + n].iter().enumerate() {
                let b = if k == 0 { &b[skip..] } else { b };
                iov[k] = libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                };
            }
            // SAFETY: the iovecs point into `bufs`, borrowed for the call;
            // pwritev only reads them.
            let rc = unsafe {
                libc::pwritev(self.file.as_raw_fd(), iov.as_ptr(), n as libc::c_int, off)
            };
            let mut done = match rc {
                0 => {
                    let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                    return Err(Error::io("pwritev", &self.path, e));
                }
                n if n > 0 => n as usize,
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(Error::io("pwritev", &self.path, e));
                }
            };
            at += done as u64;
            // A short write: go on from the first byte not written.
            while done > 0 {
                let left = bufs[i].len() - skip;
                if done < left {
                    skip += done;
                    break;
                }
                done -= left;
                (i, skip) = (i + 1, 0);
            }
        }
    }

    fn sync_data(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("fdatasync", &self.path, e))
    }

    fn sync_all(&self) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|e| Error::io("fsync", &self.path, e))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .map_err(|e| Error::io("ftruncate", &self.path, e))
    }

    fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| Error::io("fstat", &self.path, e))
    }

    fn try_lock(&self, kind: FileLock) -> Result<bool> {
        let op = match kind {
            FileLock::Shared => libc::LOCK_SH,
            FileLock::Exclusive => libc::LOCK_EX,
        } | libc::LOCK_NB;
        // SAFETY: flock on a valid, owned descriptor has no memory effects.
        let rc = unsafe { libc::flock(self.file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(false)
        } else {
            Err(Error::io("flock", &self.path, err))
        }
    }

    fn unlock(&self) -> Result<()> {
        // SAFETY: as above.
        let rc = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::io(
                "flock",
                &self.path,
                std::io::Error::last_os_error(),
            ))
        }
    }
}
