//! Crash-simulating file system for the crash explorer.
//!
//! [`SimVfs`] is an in-memory file system (POSIX inode semantics, like
//! [`MemVfs`]) that also records every mutating call in order. A frozen
//! copy of that record, a [`SimLog`], answers the question the explorer
//! asks: *after power loss at operation `cut`, which file contents could
//! a real device hold?* A [`CrashSpec`] names one such possibility (how
//! many namespace operations became durable, which unsynced writes
//! survived, which sectors of torn writes survived) and
//! [`SimLog::image`] materializes it as a [`CrashImage`], which can be
//! loaded into a [`MemVfs`], a new [`SimVfs`] (to crash recovery itself),
//! or written to a real directory.
//!
//! The persistence models ([`PersistenceModel`]) are specified precisely
//! in `docs/CRASH.md`. In short, for `ext4-ordered`:
//!
//! * *Namespace operations* — create, rename, remove, set_len, and the
//!   growth of a file by a write past its end — become durable in issue
//!   order: any prefix of them survives (jbd2 commits transactions in
//!   order).
//! * A sync forces a prefix: `sync_data(f)` everything up to the last
//!   create / set_len / growth of `f`'s inode; `sync_all(f)` additionally
//!   up to the last rename of it; `sync_dir(d)` everything up to the last
//!   create / rename / remove of an entry of `d`.
//! * Data written *inside* the file's size at the time of the write (an
//!   overwrite) is durable once a later sync of the same inode completed;
//!   until then each such write independently survives or not. Writes
//!   follow the inode, not the name: a write lands in the blocks the
//!   inode had when it was issued, so after a non-durable truncate the
//!   old blocks come back without it.
//! * Data written *past* the end (an append) is durable exactly when its
//!   growth is (data=ordered flushes new blocks before committing them).
//!
//! `torn` is `ext4-ordered` where, in addition, any write not yet synced
//! may survive only in part, at 512-byte sector granularity (sectors of
//! appended data that did not survive read as zeros). `strict` keeps every
//! operation before the cut and nothing after.

use parking_lot::Mutex;
use rand::Rng;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use twinpage::storage::{FileLock, MemVfs, OpenFlags, Vfs, VfsFile};
use twinpage::{Error, Result};

/// Sector size of the `torn` model.
pub const SECTOR: u64 = 512;

type Ino = u32;
/// The namespace operation that allocated a byte range (`None`: the range
/// was in the initial image, hence durable).
type Dep = Option<u32>;

/// What a device may hold after power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PersistenceModel {
    /// Every operation before the cut is durable, nothing after it.
    Strict,
    /// ext4 with `data=ordered` (what Android runs); see the module docs.
    Ext4Ordered,
    /// `ext4-ordered` plus torn writes at 512-byte sector granularity.
    Torn,
}

impl PersistenceModel {
    /// Every model.
    pub const ALL: &'static [PersistenceModel] = &[
        PersistenceModel::Strict,
        PersistenceModel::Ext4Ordered,
        PersistenceModel::Torn,
    ];

    /// Canonical name.
    pub fn name(self) -> &'static str {
        match self {
            PersistenceModel::Strict => "strict",
            PersistenceModel::Ext4Ordered => "ext4-ordered",
            PersistenceModel::Torn => "torn",
        }
    }
}

impl fmt::Display for PersistenceModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PersistenceModel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "strict" => Ok(PersistenceModel::Strict),
            "ext4-ordered" | "ext4" | "ordered" => Ok(PersistenceModel::Ext4Ordered),
            "torn" => Ok(PersistenceModel::Torn),
            _ => Err(Error::InvalidArgument(format!(
                "unknown persistence model {s:?} (known: strict, ext4-ordered, torn)"
            ))),
        }
    }
}

/// One recorded operation, as shown in traces and reproducers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimOp {
    /// An existing file was opened (no effect on the device).
    Open {
        /// Path opened.
        path: PathBuf,
    },
    /// A new file was created.
    Create {
        /// Path created.
        path: PathBuf,
    },
    /// pwrite.
    Write {
        /// Path the handle was opened with.
        path: PathBuf,
        /// File offset.
        offset: u64,
        /// Bytes written.
        len: u64,
    },
    /// ftruncate (shrink or extend).
    SetLen {
        /// Path the handle was opened with.
        path: PathBuf,
        /// New length.
        len: u64,
    },
    /// fdatasync.
    SyncData {
        /// Path the handle was opened with.
        path: PathBuf,
    },
    /// fsync.
    SyncAll {
        /// Path the handle was opened with.
        path: PathBuf,
    },
    /// rename.
    Rename {
        /// Old name.
        from: PathBuf,
        /// New name (replaced if it existed).
        to: PathBuf,
    },
    /// unlink.
    Remove {
        /// Name removed.
        path: PathBuf,
    },
    /// fsync of a directory.
    SyncDir {
        /// The directory.
        dir: PathBuf,
    },
}

impl SimOp {
    /// False for operations that cannot change what a device holds
    /// (opening an existing file); a crash right after one of them is the
    /// same as a crash right before it.
    pub fn mutates(&self) -> bool {
        !matches!(self, SimOp::Open { .. })
    }
}

fn short(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

impl fmt::Display for SimOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimOp::Open { path } => write!(f, "open {}", short(path)),
            SimOp::Create { path } => write!(f, "create {}", short(path)),
            SimOp::Write { path, offset, len } => {
                write!(f, "write {} @{offset} len {len}", short(path))
            }
            SimOp::SetLen { path, len } => write!(f, "ftruncate {} to {len}", short(path)),
            SimOp::SyncData { path } => write!(f, "fdatasync {}", short(path)),
            SimOp::SyncAll { path } => write!(f, "fsync {}", short(path)),
            SimOp::Rename { from, to } => write!(f, "rename {} -> {}", short(from), short(to)),
            SimOp::Remove { path } => write!(f, "unlink {}", short(path)),
            SimOp::SyncDir { dir } => write!(f, "fsync dir {}", dir.display()),
        }
    }
}

/// Part of an overwrite, inside a range allocated by one namespace op.
#[derive(Debug, Clone)]
struct Piece {
    off: u64,
    len: u64,
    /// Offset of the piece's bytes in the write's data.
    src: usize,
    dep: Dep,
}

#[derive(Debug, Clone)]
enum Kind {
    Nop,
    Create {
        path: PathBuf,
        ino: Ino,
    },
    Remove {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    SetLen {
        ino: Ino,
        len: u64,
    },
    Write {
        ino: Ino,
        offset: u64,
        data: Arc<[u8]>,
        /// Parts inside the file as it was when written.
        over: Vec<Piece>,
        /// Start of the part past the end (its growth is the record's
        /// namespace op).
        append: Option<u64>,
        /// The first later sync of the inode that makes this write
        /// durable (`usize::MAX`: none yet).
        synced_at: usize,
    },
    Sync,
    SyncDir,
}

#[derive(Debug, Clone)]
struct Rec {
    op: SimOp,
    kind: Kind,
    /// Index of this record's namespace operation, if it has one.
    ns: Option<u32>,
    /// For syncs: the number of namespace operations the sync forces.
    barrier: u32,
}

struct Inode {
    data: Vec<u8>,
    /// (start, end, allocating op) covering `0..data.len()`.
    segs: Vec<(u64, u64, Dep)>,
    /// (shared holders, exclusive held).
    lock: (u32, bool),
    /// Barrier forced by fdatasync (create, set_len, growth).
    data_meta: u32,
    /// Barrier forced by fsync (also renames).
    all_meta: u32,
    /// Writes not yet covered by a sync.
    pending: Vec<usize>,
}

impl Inode {
    fn new(data: Vec<u8>, dep: Dep, barrier: u32) -> Inode {
        let len = data.len() as u64;
        Inode {
            data,
            segs: if len > 0 { vec![(0, len, dep)] } else { vec![] },
            lock: (0, false),
            data_meta: barrier,
            all_meta: barrier,
            pending: Vec::new(),
        }
    }

    fn truncate_segs(&mut self, len: u64) {
        self.segs.retain(|s| s.0 < len);
        if let Some(last) = self.segs.last_mut() {
            last.1 = last.1.min(len);
        }
    }
}

/// A file of the initial image.
#[derive(Debug, Clone)]
struct BaseFile {
    path: PathBuf,
    ino: Ino,
    data: Arc<[u8]>,
}

#[derive(Default)]
struct State {
    names: BTreeMap<PathBuf, Ino>,
    inodes: Vec<Inode>,
    base: Arc<Vec<BaseFile>>,
    recs: Vec<Rec>,
    ns: u32,
    dir_meta: HashMap<PathBuf, u32>,
}

impl State {
    fn next_ns(&mut self) -> u32 {
        self.ns += 1;
        self.ns - 1
    }

    fn push(&mut self, op: SimOp, kind: Kind, ns: Option<u32>, barrier: u32) -> usize {
        self.recs.push(Rec {
            op,
            kind,
            ns,
            barrier,
        });
        self.recs.len() - 1
    }

    fn touch_dir(&mut self, path: &Path, ns: u32) {
        self.dir_meta
            .insert(twinpage::storage::parent_dir(path), ns + 1);
    }
}

/// The crash-simulating file system. Clones share the same files and log.
#[derive(Clone, Default)]
pub struct SimVfs {
    st: Arc<Mutex<State>>,
}

fn not_found(op: &'static str, path: &Path) -> Error {
    Error::io(op, path, std::io::Error::from(std::io::ErrorKind::NotFound))
}

impl SimVfs {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// A file system holding `img`, all of it durable.
    pub fn from_image(img: &CrashImage) -> Self {
        let mut st = State::default();
        let mut base = Vec::new();
        for (path, bytes) in &img.files {
            let ino = st.inodes.len() as Ino;
            st.inodes.push(Inode::new(bytes.clone(), None, 0));
            st.names.insert(path.clone(), ino);
            base.push(BaseFile {
                path: path.clone(),
                ino,
                data: Arc::from(bytes.as_slice()),
            });
        }
        st.base = Arc::new(base);
        SimVfs {
            st: Arc::new(Mutex::new(st)),
        }
    }

    /// Operations recorded so far; a cut is a number in `0..=op_count()`.
    pub fn op_count(&self) -> usize {
        self.st.lock().recs.len()
    }

    /// The current contents of every file (what a process would read, or a
    /// device after a clean shutdown).
    pub fn live_image(&self) -> CrashImage {
        let st = self.st.lock();
        CrashImage {
            files: st
                .names
                .iter()
                .map(|(p, &i)| (p.clone(), st.inodes[i as usize].data.clone()))
                .collect(),
        }
    }

    /// Model a failed fsync (Linux marks the dirty pages clean after a
    /// writeback error): writes of this file not yet synced may be lost
    /// even if a later sync succeeds.
    pub fn forget_unsynced(&self, path: &Path) {
        let mut st = self.st.lock();
        if let Some(&ino) = st.names.get(path) {
            st.inodes[ino as usize].pending.clear();
        }
    }

    /// Freeze the record for exploration.
    pub fn log(&self) -> SimLog {
        let st = self.st.lock();
        SimLog::new(st.recs.clone(), st.base.clone())
    }

    fn sync(&self, ino: Ino, path: &Path, all: bool) {
        let mut st = self.st.lock();
        let idx = st.recs.len();
        let node = &mut st.inodes[ino as usize];
        let barrier = if all { node.all_meta } else { node.data_meta };
        let pending = std::mem::take(&mut node.pending);
        for w in pending {
            if let Kind::Write { synced_at, .. } = &mut st.recs[w].kind {
                *synced_at = idx;
            }
        }
        let op = if all {
            SimOp::SyncAll {
                path: path.to_path_buf(),
            }
        } else {
            SimOp::SyncData {
                path: path.to_path_buf(),
            }
        };
        st.push(op, Kind::Sync, None, barrier);
    }
}

impl Vfs for SimVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        let mut st = self.st.lock();
        let ino = match st.names.get(path) {
            Some(&i) => {
                st.push(
                    SimOp::Open {
                        path: path.to_path_buf(),
                    },
                    Kind::Nop,
                    None,
                    0,
                );
                i
            }
            None if flags.create && !flags.read_only => {
                let ino = st.inodes.len() as Ino;
                let ns = st.next_ns();
                st.inodes.push(Inode::new(Vec::new(), Some(ns), ns + 1));
                st.names.insert(path.to_path_buf(), ino);
                st.touch_dir(path, ns);
                st.push(
                    SimOp::Create {
                        path: path.to_path_buf(),
                    },
                    Kind::Create {
                        path: path.to_path_buf(),
                        ino,
                    },
                    Some(ns),
                    0,
                );
                ino
            }
            None => return Err(not_found("open", path)),
        };
        Ok(Arc::new(SimFile {
            vfs: self.clone(),
            ino,
            path: path.to_path_buf(),
            held: Mutex::new(None),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        Ok(self.st.lock().names.contains_key(path))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut st = self.st.lock();
        if st.names.remove(path).is_none() {
            return Err(not_found("unlink", path));
        }
        let ns = st.next_ns();
        st.touch_dir(path, ns);
        st.push(
            SimOp::Remove {
                path: path.to_path_buf(),
            },
            Kind::Remove {
                path: path.to_path_buf(),
            },
            Some(ns),
            0,
        );
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut st = self.st.lock();
        let ino = st
            .names
            .remove(from)
            .ok_or_else(|| not_found("rename", from))?;
        st.names.insert(to.to_path_buf(), ino);
        let ns = st.next_ns();
        st.touch_dir(from, ns);
        st.touch_dir(to, ns);
        st.inodes[ino as usize].all_meta = ns + 1;
        st.push(
            SimOp::Rename {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
            },
            Kind::Rename {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
            },
            Some(ns),
            0,
        );
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut st = self.st.lock();
        let barrier = st.dir_meta.get(dir).copied().unwrap_or(0);
        st.push(
            SimOp::SyncDir {
                dir: dir.to_path_buf(),
            },
            Kind::SyncDir,
            None,
            barrier,
        );
        Ok(())
    }
}

struct SimFile {
    vfs: SimVfs,
    ino: Ino,
    path: PathBuf,
    held: Mutex<Option<FileLock>>,
}

impl VfsFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let st = self.vfs.st.lock();
        let data = &st.inodes[self.ino as usize].data;
        let len = data.len() as u64;
        if offset >= len {
            return Ok(0);
        }
        let n = ((len - offset) as usize).min(buf.len());
        buf[..n].copy_from_slice(&data[offset as usize..offset as usize + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut guard = self.vfs.st.lock();
        let st = &mut *guard;
        let idx = st.recs.len();
        let end = offset + buf.len() as u64;
        let node = &mut st.inodes[self.ino as usize];
        let live = node.data.len() as u64;
        // Split the part inside the file by the op that allocated it.
        let mut over = Vec::new();
        for &(s, e, dep) in &node.segs {
            let (a, b) = (s.max(offset), e.min(end));
            if a < b {
                over.push(Piece {
                    off: a,
                    len: b - a,
                    src: (a - offset) as usize,
                    dep,
                });
            }
        }
        let (append, ns) = if end > live {
            let ns = st.ns;
            st.ns += 1;
            node.segs.push((live, end, Some(ns)));
            node.data_meta = ns + 1;
            node.all_meta = ns + 1;
            node.data.resize(end as usize, 0);
            (Some(offset.max(live)), Some(ns))
        } else {
            (None, None)
        };
        node.data[offset as usize..end as usize].copy_from_slice(buf);
        if !buf.is_empty() {
            node.pending.push(idx);
        }
        st.push(
            SimOp::Write {
                path: self.path.clone(),
                offset,
                len: buf.len() as u64,
            },
            Kind::Write {
                ino: self.ino,
                offset,
                data: Arc::from(buf),
                over,
                append,
                synced_at: usize::MAX,
            },
            ns,
            0,
        );
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        self.vfs.sync(self.ino, &self.path, false);
        Ok(())
    }

    fn sync_all(&self) -> Result<()> {
        self.vfs.sync(self.ino, &self.path, true);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut guard = self.vfs.st.lock();
        let st = &mut *guard;
        let ns = st.ns;
        st.ns += 1;
        let node = &mut st.inodes[self.ino as usize];
        let live = node.data.len() as u64;
        if len < live {
            node.truncate_segs(len);
        } else if len > live {
            node.segs.push((live, len, Some(ns)));
        }
        node.data.resize(len as usize, 0);
        node.data_meta = ns + 1;
        node.all_meta = ns + 1;
        st.push(
            SimOp::SetLen {
                path: self.path.clone(),
                len,
            },
            Kind::SetLen { ino: self.ino, len },
            Some(ns),
            0,
        );
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.vfs.st.lock().inodes[self.ino as usize].data.len() as u64)
    }

    fn try_lock(&self, kind: FileLock) -> Result<bool> {
        let mut held = self.held.lock();
        let mut st = self.vfs.st.lock();
        let l = &mut st.inodes[self.ino as usize].lock;
        match *held {
            Some(FileLock::Shared) => l.0 -= 1,
            Some(FileLock::Exclusive) => l.1 = false,
            None => {}
        }
        let ok = match kind {
            FileLock::Shared => !l.1,
            FileLock::Exclusive => !l.1 && l.0 == 0,
        };
        let now = if ok { Some(kind) } else { *held };
        match now {
            Some(FileLock::Shared) => l.0 += 1,
            Some(FileLock::Exclusive) => l.1 = true,
            None => {}
        }
        *held = now;
        Ok(ok)
    }

    fn unlock(&self) -> Result<()> {
        let mut held = self.held.lock();
        let mut st = self.vfs.st.lock();
        let l = &mut st.inodes[self.ino as usize].lock;
        match held.take() {
            Some(FileLock::Shared) => l.0 -= 1,
            Some(FileLock::Exclusive) => l.1 = false,
            None => {}
        }
        Ok(())
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let _ = self.unlock();
    }
}

/// Whether an unsynced write survived.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Keep {
    /// None of it reached the device.
    Lost,
    /// All of it did.
    Kept,
    /// Only these 512-byte sectors did (bit `i`: the i-th sector the write
    /// touches, counted from the sector holding its first byte).
    Sectors(Vec<u64>),
}

impl Keep {
    fn sector(&self, i: usize) -> bool {
        match self {
            Keep::Lost => false,
            Keep::Kept => true,
            Keep::Sectors(m) => m.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1),
        }
    }
}

/// One possible device state after power loss.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CrashSpec {
    /// The model the state was drawn under (decides whether appended data
    /// can be torn).
    pub model: PersistenceModel,
    /// Operations `0..cut` were issued before power was lost.
    pub cut: usize,
    /// How many namespace operations (in issue order) became durable.
    pub ns_durable: u32,
    /// The fate of every write that no completed sync covers; writes not
    /// listed were lost.
    pub writes: Vec<(usize, Keep)>,
}

/// What may vary at a cut.
#[derive(Debug, Clone)]
pub struct CutInfo {
    /// Namespace operations that must be durable.
    pub ns_min: u32,
    /// Namespace operations issued.
    pub ns_max: u32,
    /// Writes whose fate is open, with the number of sectors they touch.
    pub uncertain: Vec<(usize, usize)>,
}

/// The files of a crash state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashImage {
    /// Path to contents.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
}

impl CrashImage {
    /// A fresh in-memory file system holding these files.
    pub fn to_mem_vfs(&self) -> MemVfs {
        let m = MemVfs::new();
        for (p, b) in &self.files {
            m.write_file(p, b.clone());
        }
        m
    }

    /// A fresh simulated file system holding these files, all durable.
    pub fn to_sim_vfs(&self) -> SimVfs {
        SimVfs::from_image(self)
    }

    /// Write the files into `dir` (under their file names) and sync them,
    /// so a real process can open the crashed database.
    pub fn write_to_dir(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for (p, b) in &self.files {
            let name = p.file_name().ok_or_else(|| {
                Error::InvalidArgument(format!("no file name in {}", p.display()))
            })?;
            let dest = dir.join(name);
            std::fs::write(&dest, b).map_err(|e| Error::io("write", &dest, e))?;
            std::fs::File::open(&dest)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io("fsync", &dest, e))?;
            out.push(dest);
        }
        Ok(out)
    }

    /// A hash of names and contents (to skip states already explored).
    pub fn digest(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.files.hash(&mut h);
        h.finish()
    }
}

/// A frozen record of a [`SimVfs`], ready for exploration. Cheap to clone
/// and shareable between threads.
#[derive(Clone)]
pub struct SimLog {
    recs: Arc<Vec<Rec>>,
    base: Arc<Vec<BaseFile>>,
    /// Namespace ops among the first `c` records.
    ns_before: Arc<Vec<u32>>,
    /// Namespace ops forced durable by syncs among the first `c` records.
    lo: Arc<Vec<u32>>,
}

impl SimLog {
    fn new(recs: Vec<Rec>, base: Arc<Vec<BaseFile>>) -> SimLog {
        let mut ns_before = Vec::with_capacity(recs.len() + 1);
        let mut lo = Vec::with_capacity(recs.len() + 1);
        let (mut n, mut l) = (0u32, 0u32);
        ns_before.push(0);
        lo.push(0);
        for r in &recs {
            if r.ns.is_some() {
                n += 1;
            }
            l = l.max(r.barrier);
            ns_before.push(n);
            lo.push(l.min(n));
        }
        SimLog {
            recs: Arc::new(recs),
            base,
            ns_before: Arc::new(ns_before),
            lo: Arc::new(lo),
        }
    }

    /// Number of recorded operations.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// Operation `i`.
    pub fn op(&self, i: usize) -> &SimOp {
        &self.recs[i].op
    }

    /// True if a crash right after operation `cut - 1` can differ from a
    /// crash right before it.
    pub fn cut_matters(&self, cut: usize) -> bool {
        cut == 0 || self.recs.get(cut - 1).is_some_and(|r| r.op.mutates())
    }

    /// The freedom at a cut under a model.
    pub fn cut_info(&self, cut: usize, model: PersistenceModel) -> CutInfo {
        let cut = cut.min(self.recs.len());
        let mut uncertain = Vec::new();
        if model != PersistenceModel::Strict {
            for (i, r) in self.recs[..cut].iter().enumerate() {
                if let Kind::Write {
                    offset,
                    data,
                    over,
                    synced_at,
                    ..
                } = &r.kind
                {
                    if *synced_at < cut {
                        continue;
                    }
                    // Under ext4-ordered a pure append is decided by its
                    // growth alone.
                    if over.is_empty() && model == PersistenceModel::Ext4Ordered {
                        continue;
                    }
                    let first = offset / SECTOR;
                    let last = (offset + data.len() as u64 - 1) / SECTOR;
                    uncertain.push((i, (last - first + 1) as usize));
                }
            }
        }
        CutInfo {
            ns_min: self.lo[cut],
            ns_max: self.ns_before[cut],
            uncertain,
        }
    }

    /// The single state of the strict model at `cut`.
    pub fn strict_spec(&self, cut: usize) -> CrashSpec {
        let info = self.cut_info(cut, PersistenceModel::Torn);
        CrashSpec {
            model: PersistenceModel::Strict,
            cut,
            ns_durable: info.ns_max,
            writes: info
                .uncertain
                .iter()
                .map(|&(w, _)| (w, Keep::Kept))
                .collect(),
        }
    }

    /// Draw a crash state at `cut`. Draws 0 and 1 are the extremes (all
    /// issued / only what is forced); later draws mix.
    pub fn sample(
        &self,
        cut: usize,
        model: PersistenceModel,
        draw: u64,
        rng: &mut impl Rng,
    ) -> CrashSpec {
        if model == PersistenceModel::Strict {
            return self.strict_spec(cut);
        }
        let info = self.cut_info(cut, model);
        let (ns_durable, p_keep) = match draw {
            0 => (info.ns_max, 1.0),
            1 => (info.ns_min, 0.0),
            _ => {
                let ns = match rng.random_range(0..3) {
                    0 => info.ns_min,
                    1 => info.ns_max,
                    _ => rng.random_range(info.ns_min..=info.ns_max),
                };
                let p = match rng.random_range(0..4) {
                    0 => 0.1,
                    1 => 0.9,
                    _ => 0.5,
                };
                (ns, p)
            }
        };
        let torn_p = if model == PersistenceModel::Torn && draw >= 2 {
            0.5
        } else {
            0.0
        };
        let mut writes = Vec::with_capacity(info.uncertain.len());
        for &(w, sectors) in &info.uncertain {
            let keep = if sectors > 1 && torn_p > 0.0 && rng.random_bool(torn_p) {
                let mut m = vec![0u64; sectors.div_ceil(64)];
                for (i, word) in m.iter_mut().enumerate() {
                    *word = rng.random::<u64>();
                    let bits = sectors - i * 64;
                    if bits < 64 {
                        *word &= (1u64 << bits) - 1;
                    }
                }
                Keep::Sectors(m)
            } else if rng.random_bool(p_keep) {
                Keep::Kept
            } else {
                Keep::Lost
            };
            writes.push((w, keep));
        }
        CrashSpec {
            model,
            cut,
            ns_durable,
            writes,
        }
    }

    /// Materialize a crash state.
    pub fn image(&self, spec: &CrashSpec) -> CrashImage {
        let cut = spec.cut.min(self.recs.len());
        let prefix = spec.ns_durable;
        let durable = |dep: Dep| dep.is_none_or(|n| n < prefix);
        let mut names: BTreeMap<PathBuf, Ino> = BTreeMap::new();
        let mut inodes: HashMap<Ino, Vec<u8>> = HashMap::new();
        for b in self.base.iter() {
            names.insert(b.path.clone(), b.ino);
            inodes.insert(b.ino, b.data.to_vec());
        }
        let fate: HashMap<usize, &Keep> = spec.writes.iter().map(|(w, k)| (*w, k)).collect();
        for (i, r) in self.recs[..cut].iter().enumerate() {
            let ns_ok = r.ns.is_some_and(|n| n < prefix);
            match &r.kind {
                Kind::Nop | Kind::Sync | Kind::SyncDir => {}
                Kind::Create { path, ino } => {
                    if ns_ok {
                        names.insert(path.clone(), *ino);
                        inodes.insert(*ino, Vec::new());
                    }
                }
                Kind::Remove { path } => {
                    if ns_ok {
                        names.remove(path);
                    }
                }
                Kind::Rename { from, to } => {
                    if ns_ok {
                        if let Some(ino) = names.remove(from) {
                            names.insert(to.clone(), ino);
                        }
                    }
                }
                Kind::SetLen { ino, len } => {
                    if ns_ok {
                        if let Some(d) = inodes.get_mut(ino) {
                            d.resize(*len as usize, 0);
                        }
                    }
                }
                Kind::Write {
                    ino,
                    offset,
                    data,
                    over,
                    append,
                    synced_at,
                } => {
                    let Some(file) = inodes.get_mut(ino) else {
                        continue;
                    };
                    let keep = if *synced_at < cut {
                        &Keep::Kept
                    } else {
                        fate.get(&i).copied().unwrap_or(&Keep::Lost)
                    };
                    let first_sector = offset / SECTOR;
                    let copy = |file: &mut Vec<u8>, off: u64, len: u64, src: usize, zero: bool| {
                        // Sector by sector, so torn writes keep a subset.
                        let mut o = off;
                        while o < off + len {
                            let s = o / SECTOR;
                            let e = ((s + 1) * SECTOR).min(off + len);
                            let n = (e - o) as usize;
                            let from = src + (o - off) as usize;
                            if keep.sector((s - first_sector) as usize) {
                                let end = (o as usize + n).min(file.len());
                                if (o as usize) < end {
                                    let m = end - o as usize;
                                    file[o as usize..end].copy_from_slice(&data[from..from + m]);
                                }
                            } else if zero {
                                let end = (o as usize + n).min(file.len());
                                if (o as usize) < end {
                                    file[o as usize..end].fill(0);
                                }
                            }
                            o = e;
                        }
                    };
                    for p in over {
                        if durable(p.dep) {
                            copy(file, p.off, p.len, p.src, false);
                        }
                    }
                    if let Some(start) = append {
                        if ns_ok {
                            let end = offset + data.len() as u64;
                            if (file.len() as u64) < end {
                                file.resize(end as usize, 0);
                            }
                            let src = (start - offset) as usize;
                            // data=ordered: an append is written before its
                            // growth commits, unless the model tears it.
                            if spec.model == PersistenceModel::Torn && *synced_at >= cut {
                                copy(file, *start, end - start, src, true);
                            } else {
                                file[*start as usize..end as usize].copy_from_slice(&data[src..]);
                            }
                        }
                    }
                }
            }
        }
        CrashImage {
            files: names
                .into_iter()
                .filter_map(|(p, ino)| inodes.remove(&ino).map(|d| (p, d)))
                .collect(),
        }
    }

    /// Describe a crash state for a reproducer: what was durable, and
    /// what happened to every write whose fate was open.
    pub fn describe(&self, spec: &CrashSpec) -> String {
        use std::fmt::Write as _;
        let info = self.cut_info(spec.cut, spec.model);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "model {}, crash after {} ops; namespace ops durable: {} of {} (forced by syncs: {})",
            spec.model, spec.cut, spec.ns_durable, info.ns_max, info.ns_min
        );
        let lost_ns: Vec<usize> = self.recs[..spec.cut.min(self.recs.len())]
            .iter()
            .enumerate()
            .filter(|(_, r)| r.ns.is_some_and(|n| n >= spec.ns_durable))
            .map(|(i, _)| i)
            .collect();
        for &i in lost_ns.iter().take(8) {
            let what = if matches!(self.recs[i].kind, Kind::Write { .. }) {
                "growth not durable (appended data lost)"
            } else {
                "not durable"
            };
            let _ = writeln!(s, "  op {i:>5} {}: {what}", self.recs[i].op);
        }
        if lost_ns.len() > 8 {
            let _ = writeln!(
                s,
                "  ... {} more namespace ops not durable",
                lost_ns.len() - 8
            );
        }
        let fate: HashMap<usize, &Keep> = spec.writes.iter().map(|(w, k)| (*w, k)).collect();
        for &(w, n) in &info.uncertain {
            let what = match fate.get(&w).copied().unwrap_or(&Keep::Lost) {
                Keep::Lost => "unsynced, lost".to_string(),
                Keep::Kept => "unsynced, kept".to_string(),
                k @ Keep::Sectors(_) => {
                    let kept: Vec<String> = (0..n)
                        .filter(|&i| k.sector(i))
                        .map(|i| i.to_string())
                        .collect();
                    format!("unsynced, torn: sectors [{}] of {n} kept", kept.join(","))
                }
            };
            let _ = writeln!(s, "  op {w:>5} {}: {what}", self.recs[w].op);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn file(img: &CrashImage, s: &str) -> Option<Vec<u8>> {
        img.files.get(&p(s)).cloned()
    }

    #[test]
    fn strict_keeps_everything_before_the_cut() {
        let fs = SimVfs::new();
        let f = fs.open(&p("/d/a"), OpenFlags::CREATE).unwrap();
        f.write_at(b"hello", 0).unwrap();
        f.write_at(b"J", 0).unwrap();
        let log = fs.log();
        assert_eq!(log.len(), 3);
        assert_eq!(file(&log.image(&log.strict_spec(0)), "/d/a"), None);
        assert_eq!(file(&log.image(&log.strict_spec(1)), "/d/a"), Some(vec![]));
        assert_eq!(
            file(&log.image(&log.strict_spec(2)), "/d/a"),
            Some(b"hello".to_vec())
        );
        assert_eq!(
            file(&log.image(&log.strict_spec(3)), "/d/a"),
            Some(b"Jello".to_vec())
        );
        assert_eq!(fs.live_image(), log.image(&log.strict_spec(3)));
    }

    #[test]
    fn unsynced_overwrite_may_be_lost_synced_may_not() {
        let fs = SimVfs::from_image(&CrashImage {
            files: [(p("/d/a"), b"aaaa".to_vec())].into(),
        });
        let f = fs.open(&p("/d/a"), OpenFlags::EXISTING).unwrap();
        f.write_at(b"bb", 0).unwrap(); // op 1
        let log = fs.log();
        let info = log.cut_info(2, PersistenceModel::Ext4Ordered);
        assert_eq!(info.uncertain, vec![(1, 1)]);
        let lost = CrashSpec {
            model: PersistenceModel::Torn,
            cut: 2,
            ns_durable: 0,
            writes: vec![],
        };
        assert_eq!(file(&log.image(&lost), "/d/a"), Some(b"aaaa".to_vec()));
        f.sync_data().unwrap(); // op 2
        let log = fs.log();
        assert!(log
            .cut_info(3, PersistenceModel::Ext4Ordered)
            .uncertain
            .is_empty());
        let spec = CrashSpec {
            model: PersistenceModel::Torn,
            cut: 3,
            ns_durable: 0,
            writes: vec![],
        };
        assert_eq!(file(&log.image(&spec), "/d/a"), Some(b"bbaa".to_vec()));
    }

    #[test]
    fn appends_follow_their_growth_and_syncs_force_prefixes() {
        let fs = SimVfs::new();
        let a = fs.open(&p("/d/a"), OpenFlags::CREATE).unwrap(); // 0: ns 0
        a.write_at(b"xyz", 0).unwrap(); // 1: ns 1 (growth)
        let b = fs.open(&p("/d/b"), OpenFlags::CREATE).unwrap(); // 2: ns 2
        b.write_at(b"q", 0).unwrap(); // 3: ns 3
        a.sync_data().unwrap(); // 4: forces ns 0..=1
        let log = fs.log();
        let info = log.cut_info(5, PersistenceModel::Ext4Ordered);
        assert_eq!((info.ns_min, info.ns_max), (2, 4));
        assert!(info.uncertain.is_empty());
        let img = log.image(&CrashSpec {
            model: PersistenceModel::Torn,
            cut: 5,
            ns_durable: 2,
            writes: vec![],
        });
        assert_eq!(file(&img, "/d/a"), Some(b"xyz".to_vec()));
        assert_eq!(file(&img, "/d/b"), None);
        let img = log.image(&CrashSpec {
            model: PersistenceModel::Torn,
            cut: 5,
            ns_durable: 3,
            writes: vec![],
        });
        assert_eq!(file(&img, "/d/b"), Some(vec![]));
        // Directory sync forces the creates.
        fs.sync_dir(&p("/d")).unwrap();
        assert_eq!(fs.log().cut_info(6, PersistenceModel::Torn).ns_min, 3);
    }

    #[test]
    fn writes_follow_the_inode_not_the_name() {
        // A write after an undurable truncate lands in new blocks: the old
        // contents come back without it.
        let fs = SimVfs::from_image(&CrashImage {
            files: [(p("/d/j"), vec![7u8; 1024])].into(),
        });
        let j = fs.open(&p("/d/j"), OpenFlags::EXISTING).unwrap(); // 0
        j.set_len(0).unwrap(); // 1: ns 0
        j.write_at(&[1u8; 100], 0).unwrap(); // 2: ns 1
        j.write_at(&[2u8; 10], 0).unwrap(); // 3: overwrite, dep ns 1
        let log = fs.log();
        let all_kept = |ns| CrashSpec {
            model: PersistenceModel::Ext4Ordered,
            cut: 4,
            ns_durable: ns,
            writes: vec![(3, Keep::Kept)],
        };
        assert_eq!(
            file(&log.image(&all_kept(0)), "/d/j"),
            Some(vec![7u8; 1024])
        );
        assert_eq!(file(&log.image(&all_kept(1)), "/d/j"), Some(vec![]));
        let mut want = vec![1u8; 100];
        want[..10].fill(2);
        assert_eq!(file(&log.image(&all_kept(2)), "/d/j"), Some(want));
        // A renamed file's pending write still lands in it.
        let fs = SimVfs::new();
        let a = fs.open(&p("/d/a"), OpenFlags::CREATE).unwrap(); // 0
        a.write_at(b"12", 0).unwrap(); // 1
        a.sync_data().unwrap(); // 2
        a.write_at(b"3", 0).unwrap(); // 3
        fs.rename(&p("/d/a"), &p("/d/b")).unwrap(); // 4
        let log = fs.log();
        let img = log.image(&CrashSpec {
            model: PersistenceModel::Torn,
            cut: 5,
            ns_durable: 3,
            writes: vec![(3, Keep::Kept)],
        });
        assert_eq!(file(&img, "/d/b"), Some(b"32".to_vec()));
        assert_eq!(file(&img, "/d/a"), None);
        let img = log.image(&CrashSpec {
            model: PersistenceModel::Torn,
            cut: 5,
            ns_durable: 2,
            writes: vec![],
        });
        assert_eq!(file(&img, "/d/a"), Some(b"12".to_vec()));
    }

    #[test]
    fn torn_writes_keep_a_subset_of_sectors() {
        let fs = SimVfs::from_image(&CrashImage {
            files: [(p("/d/a"), vec![0u8; 2048])].into(),
        });
        let a = fs.open(&p("/d/a"), OpenFlags::EXISTING).unwrap();
        a.write_at(&[9u8; 1536], 256).unwrap(); // sectors 0..=3
        let log = fs.log();
        assert_eq!(
            log.cut_info(2, PersistenceModel::Torn).uncertain,
            vec![(1, 4)]
        );
        let img = log.image(&CrashSpec {
            model: PersistenceModel::Torn,
            cut: 2,
            ns_durable: 0,
            writes: vec![(1, Keep::Sectors(vec![0b0101]))],
        });
        let d = file(&img, "/d/a").unwrap();
        assert!(d[256..512].iter().all(|&b| b == 9));
        assert!(d[512..1024].iter().all(|&b| b == 0));
        assert!(d[1024..1536].iter().all(|&b| b == 9));
        assert!(d[1536..].iter().all(|&b| b == 0));
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for draw in 0..50 {
            let s = log.sample(2, PersistenceModel::Torn, draw, &mut rng);
            let _ = log.image(&s);
            assert!(!log.describe(&s).is_empty());
        }
    }

    #[test]
    fn removed_files_vanish_only_when_the_unlink_is_durable() {
        let fs = SimVfs::new();
        let a = fs.open(&p("/d/j"), OpenFlags::CREATE).unwrap();
        a.write_at(b"hot", 0).unwrap();
        a.sync_data().unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        drop(a);
        fs.remove(&p("/d/j")).unwrap(); // op 4, ns 2
        let log = fs.log();
        let info = log.cut_info(5, PersistenceModel::Ext4Ordered);
        assert_eq!((info.ns_min, info.ns_max), (2, 3));
        let keep = log.image(&CrashSpec {
            model: PersistenceModel::Torn,
            cut: 5,
            ns_durable: 2,
            writes: vec![],
        });
        assert_eq!(file(&keep, "/d/j"), Some(b"hot".to_vec()));
        let gone = log.image(&CrashSpec {
            model: PersistenceModel::Torn,
            cut: 5,
            ns_durable: 3,
            writes: vec![],
        });
        assert_eq!(file(&gone, "/d/j"), None);
        // An fdatasync of an unrelated, unchanged file does not force it.
        let b = fs.open(&p("/d/b"), OpenFlags::CREATE).unwrap(); // 5, ns 3
        b.sync_data().unwrap(); // forces up to the create of b (ns 3 + 1)
        assert_eq!(fs.log().cut_info(7, PersistenceModel::Torn).ns_min, 4);
    }
}
