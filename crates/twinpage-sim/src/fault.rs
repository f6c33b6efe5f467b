//! I/O error injection: a [`Vfs`] wrapper that makes one chosen call fail.
//!
//! Calls are numbered per [`FaultKind`]: every call for [`FaultKind::Eio`],
//! every call that may allocate space (a create, a write or `set_len`
//! past the end of a file) for [`FaultKind::Enospc`], every write for
//! [`FaultKind::ShortWrite`]. A [`FaultPlan`] names the kind and the
//! number of the call that fails. Run once with `at: u64::MAX` to learn
//! how many calls of the kind a workload makes ([`FaultVfs::calls`]), then
//! once per call.

use parking_lot::Mutex;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use twinpage::storage::{FileLock, OpenFlags, Vfs, VfsFile};
use twinpage::{Error, Result};

/// What kind of failure to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The call fails with EIO and has no effect (a failed fsync loses
    /// the unsynced writes it was meant to make durable, see
    /// the `on_failed_sync` hook of [`FaultVfs::with_hook`]).
    Eio,
    /// The disk is full: this and every later call that needs space fails
    /// with ENOSPC (overwrites inside a file still work).
    Enospc,
    /// The write persists only a prefix of its bytes, then fails with EIO.
    ShortWrite,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: &'static [FaultKind] =
        &[FaultKind::Eio, FaultKind::Enospc, FaultKind::ShortWrite];

    /// Canonical name.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Eio => "eio",
            FaultKind::Enospc => "enospc",
            FaultKind::ShortWrite => "short-write",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        FaultKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown fault {s:?} (known: eio, enospc, short-write)"
                ))
            })
    }
}

/// Which call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPlan {
    /// Kind of failure.
    pub kind: FaultKind,
    /// Number (from 0) of the call, counted among the calls of that kind.
    pub at: u64,
}

type SyncHook = Box<dyn Fn(&Path) + Send + Sync>;

struct State {
    plan: Option<FaultPlan>,
    calls: AtomicU64,
    /// Sticky ENOSPC is in force.
    full: std::sync::atomic::AtomicBool,
    fired: Mutex<Option<String>>,
    on_failed_sync: Option<SyncHook>,
}

/// A [`Vfs`] that fails one planned call.
#[derive(Clone)]
pub struct FaultVfs {
    inner: Arc<dyn Vfs>,
    st: Arc<State>,
}

fn os_error(code: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(code)
}

impl FaultVfs {
    /// Wrap `inner`; with `plan` `None` every call is counted (as EIO
    /// candidates) and none fails.
    pub fn new(inner: Arc<dyn Vfs>, plan: Option<FaultPlan>) -> Self {
        Self::with_hook(inner, plan, None)
    }

    /// Like [`FaultVfs::new`], calling `on_failed_sync` with the file's
    /// path when an injected error fails a sync (so a simulated device can
    /// drop the writes the sync was meant to make durable, as Linux does
    /// after a writeback error).
    pub fn with_hook(
        inner: Arc<dyn Vfs>,
        plan: Option<FaultPlan>,
        on_failed_sync: Option<SyncHook>,
    ) -> Self {
        FaultVfs {
            inner,
            st: Arc::new(State {
                plan,
                calls: AtomicU64::new(0),
                full: std::sync::atomic::AtomicBool::new(false),
                fired: Mutex::new(None),
                on_failed_sync,
            }),
        }
    }

    /// Calls of the plan's kind (or of every kind, counted as EIO) so far.
    pub fn calls(&self) -> u64 {
        self.st.calls.load(SeqCst)
    }

    /// The injected failure, once it happened.
    pub fn fired(&self) -> Option<String> {
        self.st.fired.lock().clone()
    }

    fn kind(&self) -> FaultKind {
        self.st.plan.map_or(FaultKind::Eio, |p| p.kind)
    }

    /// Count a call of `kind`; true if it is the one to fail.
    fn hit(&self, kind: FaultKind, what: impl FnOnce() -> String) -> bool {
        if self.kind() != kind {
            return false;
        }
        let n = self.st.calls.fetch_add(1, SeqCst);
        let fire = self.st.plan.is_some_and(|p| p.at == n);
        if fire {
            *self.st.fired.lock() = Some(format!("{kind} at call {n}: {}", what()));
        }
        fire
    }

    /// For calls that need space: fail with ENOSPC if the disk is full.
    fn needs_space(&self, what: impl FnOnce() -> String) -> bool {
        if self.st.full.load(SeqCst) {
            return true;
        }
        if self.hit(FaultKind::Enospc, what) {
            self.st.full.store(true, SeqCst);
            return true;
        }
        false
    }

    fn eio(&self, op: &'static str, path: &Path) -> Result<()> {
        if self.hit(FaultKind::Eio, || format!("{op} {}", path.display())) {
            return Err(Error::io(op, path, os_error(libc::EIO)));
        }
        Ok(())
    }
}

impl Vfs for FaultVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        self.eio("open", path)?;
        if flags.create
            && !self.inner.exists(path)?
            && self.needs_space(|| format!("create {}", path.display()))
        {
            return Err(Error::io("open", path, os_error(libc::ENOSPC)));
        }
        let inner = self.inner.open(path, flags)?;
        Ok(Arc::new(FaultFile {
            inner,
            vfs: self.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.eio("stat", path)?;
        self.inner.exists(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.eio("unlink", path)?;
        self.inner.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.eio("rename", from)?;
        self.inner.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.eio("fsync dir", dir)?;
        self.inner.sync_dir(dir)
    }
}

struct FaultFile {
    inner: Arc<dyn VfsFile>,
    vfs: FaultVfs,
    path: PathBuf,
}

impl FaultFile {
    fn failed_sync(&self, op: &'static str) -> Error {
        if let Some(h) = &self.vfs.st.on_failed_sync {
            h(&self.path);
        }
        Error::io(op, &self.path, os_error(libc::EIO))
    }
}

impl VfsFile for FaultFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.vfs.eio("pread", &self.path)?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.vfs.eio("pwrite", &self.path)?;
        let end = offset + buf.len() as u64;
        if end > self.inner.len()?
            && self.vfs.needs_space(|| {
                format!("pwrite {} @{offset} len {}", self.path.display(), buf.len())
            })
        {
            return Err(Error::io("pwrite", &self.path, os_error(libc::ENOSPC)));
        }
        if self.vfs.hit(FaultKind::ShortWrite, || {
            format!("pwrite {} @{offset} len {}", self.path.display(), buf.len())
        }) {
            // Persist a prefix: the first half, at least one byte short.
            let n = (buf.len() / 2).min(buf.len().saturating_sub(1));
            if n > 0 {
                self.inner.write_at(&buf[..n], offset)?;
            }
            return Err(Error::io("pwrite", &self.path, os_error(libc::EIO)));
        }
        self.inner.write_at(buf, offset)
    }

    fn sync_data(&self) -> Result<()> {
        if self.vfs.hit(FaultKind::Eio, || {
            format!("fdatasync {}", self.path.display())
        }) {
            return Err(self.failed_sync("fdatasync"));
        }
        self.inner.sync_data()
    }

    fn sync_all(&self) -> Result<()> {
        if self
            .vfs
            .hit(FaultKind::Eio, || format!("fsync {}", self.path.display()))
        {
            return Err(self.failed_sync("fsync"));
        }
        self.inner.sync_all()
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.vfs.eio("ftruncate", &self.path)?;
        if len > self.inner.len()?
            && self
                .vfs
                .needs_space(|| format!("ftruncate {} to {len}", self.path.display()))
        {
            return Err(Error::io("ftruncate", &self.path, os_error(libc::ENOSPC)));
        }
        self.inner.set_len(len)
    }

    fn len(&self) -> Result<u64> {
        self.vfs.eio("fstat", &self.path)?;
        self.inner.len()
    }

    fn try_lock(&self, kind: FileLock) -> Result<bool> {
        self.inner.try_lock(kind)
    }

    fn unlock(&self) -> Result<()> {
        self.inner.unlock()
    }
}
