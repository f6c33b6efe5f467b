//! The counting layer: every call that reaches storage is counted here.
//! The counters are public API; the benchmark and the main job read them.

use super::{FileLock, OpenFlags, Vfs, VfsFile};
use crate::base::timers::{self, Timer};
use crate::base::Result;
use parking_lot::Mutex;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Cumulative I/O counters, shared by a [`CountingVfs`] and its files.
#[derive(Default)]
pub struct IoCounters {
    write_calls: AtomicU64,
    bytes_written: AtomicU64,
    read_calls: AtomicU64,
    bytes_read: AtomicU64,
    fdatasync: AtomicU64,
    fsync: AtomicU64,
    renames: AtomicU64,
    removes: AtomicU64,
    set_len: AtomicU64,
    dir_syncs: AtomicU64,
    write_ns: AtomicU64,
    sync_ns: AtomicU64,
    trace: Mutex<Option<Vec<IoEvent>>>,
    /// Whether a trace is recording: checked before `trace` is locked, so
    /// an untraced call costs only atomic adds.
    tracing: AtomicBool,
}

/// A point-in-time copy of the counters; subtract two to get a delta.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoSnapshot {
    /// pwrite calls.
    pub write_calls: u64,
    /// Bytes passed to pwrite.
    pub bytes_written: u64,
    /// pread calls.
    pub read_calls: u64,
    /// Bytes returned by pread.
    pub bytes_read: u64,
    /// fdatasync calls.
    pub fdatasync: u64,
    /// fsync calls on files.
    pub fsync: u64,
    /// rename calls.
    pub renames: u64,
    /// unlink calls.
    pub removes: u64,
    /// ftruncate calls (truncates and extends).
    pub truncates: u64,
    /// fsync calls on directories.
    pub dir_syncs: u64,
    /// Nanoseconds spent inside pwrite calls (the \[IPS\] Fig. 5 split of
    /// latency into compute, `write()` and `fsync()`).
    pub write_ns: u64,
    /// Nanoseconds spent inside fdatasync and fsync calls on files.
    pub sync_ns: u64,
}

impl IoSnapshot {
    /// The counts only, without the times (which differ between runs of
    /// the same work).
    pub fn counts(self) -> IoSnapshot {
        IoSnapshot {
            write_ns: 0,
            sync_ns: 0,
            ..self
        }
    }
}

impl std::ops::Sub for IoSnapshot {
    type Output = IoSnapshot;
    fn sub(self, o: IoSnapshot) -> IoSnapshot {
        IoSnapshot {
            write_calls: self.write_calls - o.write_calls,
            bytes_written: self.bytes_written - o.bytes_written,
            read_calls: self.read_calls - o.read_calls,
            bytes_read: self.bytes_read - o.bytes_read,
            fdatasync: self.fdatasync - o.fdatasync,
            fsync: self.fsync - o.fsync,
            renames: self.renames - o.renames,
            removes: self.removes - o.removes,
            truncates: self.truncates - o.truncates,
            dir_syncs: self.dir_syncs - o.dir_syncs,
            write_ns: self.write_ns - o.write_ns,
            sync_ns: self.sync_ns - o.sync_ns,
        }
    }
}

impl fmt::Display for IoSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "writes={} bytes={} reads={} fdatasync={} fsync={} renames={} removes={} truncates={} dirsyncs={}",
            self.write_calls,
            self.bytes_written,
            self.read_calls,
            self.fdatasync,
            self.fsync,
            self.renames,
            self.removes,
            self.truncates,
            self.dir_syncs
        )
    }
}

/// One recorded storage call (when tracing is on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoEvent {
    /// pwrite(file, offset, len)
    Write(PathBuf, u64, usize),
    /// fdatasync(file)
    SyncData(PathBuf),
    /// fsync(file)
    SyncAll(PathBuf),
    /// ftruncate(file, len)
    SetLen(PathBuf, u64),
    /// rename(from, to)
    Rename(PathBuf, PathBuf),
    /// unlink(file)
    Remove(PathBuf),
    /// fsync(dir)
    SyncDir(PathBuf),
}

impl fmt::Display for IoEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |p: &PathBuf| {
            p.file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        match self {
            IoEvent::Write(p, off, len) => write!(f, "write {} @{off} len {len}", n(p)),
            IoEvent::SyncData(p) => write!(f, "fdatasync {}", n(p)),
            IoEvent::SyncAll(p) => write!(f, "fsync {}", n(p)),
            IoEvent::SetLen(p, len) => write!(f, "ftruncate {} to {len}", n(p)),
            IoEvent::Rename(a, b) => write!(f, "rename {} -> {}", n(a), n(b)),
            IoEvent::Remove(p) => write!(f, "unlink {}", n(p)),
            IoEvent::SyncDir(p) => write!(f, "fsync dir {}", p.display()),
        }
    }
}

impl IoCounters {
    /// Current values.
    pub fn snapshot(&self) -> IoSnapshot {
        IoSnapshot {
            write_calls: self.write_calls.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
            read_calls: self.read_calls.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            fdatasync: self.fdatasync.load(Relaxed),
            fsync: self.fsync.load(Relaxed),
            renames: self.renames.load(Relaxed),
            removes: self.removes.load(Relaxed),
            truncates: self.set_len.load(Relaxed),
            dir_syncs: self.dir_syncs.load(Relaxed),
            write_ns: self.write_ns.load(Relaxed),
            sync_ns: self.sync_ns.load(Relaxed),
        }
    }

    /// Start recording every mutating call (discarding an earlier trace).
    pub fn start_trace(&self) {
        *self.trace.lock() = Some(Vec::new());
        self.tracing.store(true, Relaxed);
    }

    /// Stop recording and return what was recorded.
    pub fn take_trace(&self) -> Vec<IoEvent> {
        self.tracing.store(false, Relaxed);
        self.trace.lock().take().unwrap_or_default()
    }

    fn record(&self, ev: impl FnOnce() -> IoEvent) {
        if !self.tracing.load(Relaxed) {
            return;
        }
        if let Some(t) = self.trace.lock().as_mut() {
            t.push(ev());
        }
    }
}

/// A [`Vfs`] that counts every call before passing it on.
#[derive(Clone)]
pub struct CountingVfs {
    inner: Arc<dyn Vfs>,
    counters: Arc<IoCounters>,
}

impl CountingVfs {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn Vfs>) -> Self {
        CountingVfs {
            inner,
            counters: Arc::new(IoCounters::default()),
        }
    }

    /// The shared counters.
    pub fn counters(&self) -> &Arc<IoCounters> {
        &self.counters
    }
}

impl Vfs for CountingVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        let inner = self.inner.open(path, flags)?;
        Ok(Arc::new(CountingFile {
            inner,
            counters: self.counters.clone(),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.counters.removes.fetch_add(1, Relaxed);
        self.counters.record(|| IoEvent::Remove(path.to_path_buf()));
        self.inner.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.counters.renames.fetch_add(1, Relaxed);
        self.counters
            .record(|| IoEvent::Rename(from.to_path_buf(), to.to_path_buf()));
        self.inner.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.counters.dir_syncs.fetch_add(1, Relaxed);
        self.counters.record(|| IoEvent::SyncDir(dir.to_path_buf()));
        self.inner.sync_dir(dir)
    }
}

/// Run `f`, adding the time it took to `ns` and to this thread's clock
/// `t` ([`timers`]).
fn timed<T>(ns: &AtomicU64, t: Timer, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let r = f();
    let spent = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    ns.fetch_add(spent, Relaxed);
    timers::add(t, spent);
    r
}

struct CountingFile {
    inner: Arc<dyn VfsFile>,
    counters: Arc<IoCounters>,
}

impl VfsFile for CountingFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let n = self.inner.read_at(buf, offset)?;
        self.counters.read_calls.fetch_add(1, Relaxed);
        self.counters.bytes_read.fetch_add(n as u64, Relaxed);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.counters.write_calls.fetch_add(1, Relaxed);
        self.counters
            .bytes_written
            .fetch_add(buf.len() as u64, Relaxed);
        self.counters
            .record(|| IoEvent::Write(self.path().to_path_buf(), offset, buf.len()));
        timed(&self.counters.write_ns, Timer::Write, || {
            self.inner.write_at(buf, offset)
        })
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum::<usize>();
        self.counters.write_calls.fetch_add(1, Relaxed);
        self.counters.bytes_written.fetch_add(len as u64, Relaxed);
        self.counters
            .record(|| IoEvent::Write(self.path().to_path_buf(), offset, len));
        timed(&self.counters.write_ns, Timer::Write, || {
            self.inner.write_vectored_at(bufs, offset)
        })
    }

    fn sync_data(&self) -> Result<()> {
        self.counters.fdatasync.fetch_add(1, Relaxed);
        self.counters
            .record(|| IoEvent::SyncData(self.path().to_path_buf()));
        timed(&self.counters.sync_ns, Timer::Sync, || {
            self.inner.sync_data()
        })
    }

    fn sync_all(&self) -> Result<()> {
        self.counters.fsync.fetch_add(1, Relaxed);
        self.counters
            .record(|| IoEvent::SyncAll(self.path().to_path_buf()));
        timed(&self.counters.sync_ns, Timer::Sync, || {
            self.inner.sync_all()
        })
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.counters.set_len.fetch_add(1, Relaxed);
        self.counters
            .record(|| IoEvent::SetLen(self.path().to_path_buf(), len));
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
