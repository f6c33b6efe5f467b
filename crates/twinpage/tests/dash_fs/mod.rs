//! A small crash-simulating file system for the DASH tests.
//!
//! Data follows inodes. A write (or `set_len`) is durable once its inode
//! was synced; before that it may be lost: the images keep all of them,
//! none of them, or all but one of the first few of each inode.
//! Namespace operations (create, rename, remove) are what DASH depends on:
//! they survive as an ordered *prefix* (ext4 and F2FS commit metadata in
//! order), at least up to the last directory sync, and `sync_data(f)`
//! forces the creation of `f` (`sync_all(f)` also its last rename).
//! [`LagFs::images`] yields the crash images; with `unordered`, any
//! *subset* of the unforced namespace operations survives instead, the
//! model under which DASH is not correct.
#![allow(dead_code)]

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use twinpage::storage::{FileLock, MemVfs, OpenFlags, Vfs, VfsFile};
use twinpage::{Error, Result};

#[derive(Debug, Clone)]
enum Ns {
    Create(PathBuf, usize),
    Rename(PathBuf, PathBuf),
    Remove(PathBuf),
}

#[derive(Debug, Clone)]
enum Pending {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

/// How many unsynced writes per inode are dropped one at a time.
const DROP_ONE: usize = 6;

#[derive(Default)]
struct Inner {
    inodes: Vec<Vec<u8>>,
    /// Per inode: contents at its last sync, and the changes since.
    synced: Vec<Vec<u8>>,
    pending: Vec<Vec<Pending>>,
    names: BTreeMap<PathBuf, usize>,
    base: BTreeMap<PathBuf, usize>,
    log: Vec<Ns>,
    /// Namespace operations `0..forced` are durable.
    forced: usize,
    /// Per inode: log length after its creation / its last rename.
    created_at: BTreeMap<usize, usize>,
    renamed_at: BTreeMap<usize, usize>,
    /// Mutating operations allowed before the power cut.
    left: usize,
    trace: Vec<String>,
}

/// The file system; clones share state.
#[derive(Clone)]
pub struct LagFs {
    inner: Arc<Mutex<Inner>>,
}

fn cut() -> Error {
    Error::io("power cut", "/", std::io::Error::other("power cut"))
}

fn not_found(op: &'static str, p: &Path) -> Error {
    Error::io(op, p, std::io::Error::from(std::io::ErrorKind::NotFound))
}

impl LagFs {
    /// Start from the files of `base` (all durable); power is cut after
    /// `limit` mutating operations.
    pub fn new(base: &MemVfs, limit: usize) -> LagFs {
        let mut i = Inner {
            left: limit,
            ..Inner::default()
        };
        for p in base.list() {
            let data = base.read_file(&p).unwrap_or_default();
            i.synced.push(data.clone());
            i.inodes.push(data);
            i.pending.push(Vec::new());
            i.names.insert(p, i.inodes.len() - 1);
        }
        i.base = i.names.clone();
        LagFs {
            inner: Arc::new(Mutex::new(i)),
        }
    }

    /// Mutating operations performed (before the cut).
    pub fn ops(&self) -> usize {
        self.inner.lock().trace.len()
    }

    /// The operations performed, for failure messages.
    pub fn trace(&self) -> Vec<String> {
        self.inner.lock().trace.clone()
    }

    /// Crash images: every allowed set of surviving namespace operations,
    /// each with every unsynced write kept; with `data`, also with all of
    /// them lost and with each of the first few of an inode lost alone.
    pub fn images(&self, unordered: bool, data: bool) -> Vec<MemVfs> {
        let i = self.inner.lock();
        let free: Vec<usize> = (i.forced..i.log.len()).collect();
        let mut keeps: Vec<Vec<usize>> = Vec::new();
        if unordered && free.len() <= 12 {
            for mask in 0u32..(1 << free.len()) {
                keeps.push(
                    free.iter()
                        .enumerate()
                        .filter(|(b, _)| mask & (1 << b) != 0)
                        .map(|(_, &k)| k)
                        .collect(),
                );
            }
        } else {
            for n in 0..=free.len() {
                keeps.push(free[..n].to_vec());
            }
        }
        // Data variants: None keeps everything; Some((None, _)) drops every
        // unsynced change; Some((Some(ino), k)) drops change k of ino.
        let mut variants: Vec<Option<(Option<usize>, usize)>> = vec![None];
        if data && i.pending.iter().any(|p| !p.is_empty()) {
            variants.push(Some((None, 0)));
            for (ino, p) in i.pending.iter().enumerate() {
                for k in 0..p.len().min(DROP_ONE) {
                    variants.push(Some((Some(ino), k)));
                }
            }
        }
        let contents = |v: Option<(Option<usize>, usize)>, ino: usize| -> Vec<u8> {
            let Some((which, k)) = v else {
                return i.inodes[ino].clone();
            };
            let mut d = i.synced[ino].clone();
            if which.is_none() {
                return d;
            }
            for (j, op) in i.pending[ino].iter().enumerate() {
                if which == Some(ino) && j == k {
                    continue;
                }
                match op {
                    Pending::Write(off, b) => {
                        let end = *off as usize + b.len();
                        if d.len() < end {
                            d.resize(end, 0);
                        }
                        d[*off as usize..end].copy_from_slice(b);
                    }
                    Pending::SetLen(n) => d.resize(*n as usize, 0),
                }
            }
            d
        };
        let mut out = Vec::new();
        for extra in keeps {
            let mut names = i.base.clone();
            let chosen: BTreeSet<usize> = (0..i.forced).chain(extra).collect();
            for k in chosen {
                match &i.log[k] {
                    Ns::Create(p, ino) => {
                        names.insert(p.clone(), *ino);
                    }
                    Ns::Rename(a, b) => {
                        if let Some(ino) = names.remove(a) {
                            names.insert(b.clone(), ino);
                        }
                    }
                    Ns::Remove(p) => {
                        names.remove(p);
                    }
                }
            }
            for &v in &variants {
                let m = MemVfs::new();
                for (p, &ino) in &names {
                    m.write_file(p, contents(v, ino));
                }
                out.push(m);
            }
        }
        out
    }

    fn step(&self, what: String) -> Result<()> {
        let mut i = self.inner.lock();
        if i.left == 0 {
            return Err(cut());
        }
        i.left -= 1;
        i.trace.push(what);
        Ok(())
    }
}

struct LagFile {
    fs: LagFs,
    ino: usize,
    path: PathBuf,
}

impl Vfs for LagFs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        let existing = self.inner.lock().names.get(path).copied();
        let ino = match existing {
            Some(ino) => ino,
            None if flags.create => {
                self.step(format!("create {}", path.display()))?;
                let mut i = self.inner.lock();
                i.inodes.push(Vec::new());
                i.synced.push(Vec::new());
                i.pending.push(Vec::new());
                let ino = i.inodes.len() - 1;
                i.names.insert(path.to_path_buf(), ino);
                i.log.push(Ns::Create(path.to_path_buf(), ino));
                let n = i.log.len();
                i.created_at.insert(ino, n);
                ino
            }
            None => return Err(not_found("open", path)),
        };
        Ok(Arc::new(LagFile {
            fs: self.clone(),
            ino,
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        Ok(self.inner.lock().names.contains_key(path))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        if !self.exists(path)? {
            return Err(not_found("unlink", path));
        }
        self.step(format!("unlink {}", path.display()))?;
        let mut i = self.inner.lock();
        i.names.remove(path);
        i.log.push(Ns::Remove(path.to_path_buf()));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if !self.exists(from)? {
            return Err(not_found("rename", from));
        }
        self.step(format!("rename {} -> {}", from.display(), to.display()))?;
        let mut i = self.inner.lock();
        let ino = i.names.remove(from).expect("checked above");
        i.names.insert(to.to_path_buf(), ino);
        i.log.push(Ns::Rename(from.to_path_buf(), to.to_path_buf()));
        let n = i.log.len();
        i.renamed_at.insert(ino, n);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.step(format!("syncdir {}", dir.display()))?;
        let mut i = self.inner.lock();
        i.forced = i.log.len();
        Ok(())
    }
}

impl LagFile {
    fn force(&self, renames: bool) {
        let mut i = self.fs.inner.lock();
        let data = i.inodes[self.ino].clone();
        i.synced[self.ino] = data;
        i.pending[self.ino].clear();
        let mut upto = i.created_at.get(&self.ino).copied().unwrap_or(0);
        if renames {
            upto = upto.max(i.renamed_at.get(&self.ino).copied().unwrap_or(0));
        }
        i.forced = i.forced.max(upto);
    }
}

impl VfsFile for LagFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let i = self.fs.inner.lock();
        let d = &i.inodes[self.ino];
        if offset >= d.len() as u64 {
            return Ok(0);
        }
        let n = (d.len() - offset as usize).min(buf.len());
        buf[..n].copy_from_slice(&d[offset as usize..offset as usize + n]);
        Ok(n)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.fs.step(format!(
            "write {} @{offset} +{}",
            self.path.display(),
            buf.len()
        ))?;
        let mut i = self.fs.inner.lock();
        i.pending[self.ino].push(Pending::Write(offset, buf.to_vec()));
        let d = &mut i.inodes[self.ino];
        let end = offset as usize + buf.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[offset as usize..end].copy_from_slice(buf);
        Ok(())
    }
    fn sync_data(&self) -> Result<()> {
        self.fs.step(format!("fdatasync {}", self.path.display()))?;
        self.force(false);
        Ok(())
    }
    fn sync_all(&self) -> Result<()> {
        self.fs.step(format!("fsync {}", self.path.display()))?;
        self.force(true);
        Ok(())
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.fs
            .step(format!("ftruncate {} {len}", self.path.display()))?;
        let mut i = self.fs.inner.lock();
        i.pending[self.ino].push(Pending::SetLen(len));
        i.inodes[self.ino].resize(len as usize, 0);
        Ok(())
    }
    fn len(&self) -> Result<u64> {
        Ok(self.fs.inner.lock().inodes[self.ino].len() as u64)
    }
    fn try_lock(&self, _kind: FileLock) -> Result<bool> {
        Ok(true)
    }
    fn unlock(&self) -> Result<()> {
        Ok(())
    }
}

/// The DASH invariant after a clean close: the shadow equals the database
/// except on the pages of the database's GPL (all pages if it overflowed).
pub fn assert_shadow_invariant(vfs: &MemVfs, db: &Path, page_size: usize) {
    let shadow = {
        let mut s = db.as_os_str().to_owned();
        s.push("-shadow");
        PathBuf::from(s)
    };
    let (Some(d), Some(s)) = (vfs.read_file(db), vfs.read_file(&shadow)) else {
        return;
    };
    let be32 = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
    // The DASH fields follow the 60-byte header; GPL entries follow them.
    const T: usize = twinpage::base::HEADER_LEN;
    assert_eq!(&d[T..T + 4], b"DASH", "database has DASH fields");
    assert_eq!(&s[T..T + 4], b"DASH", "shadow has DASH fields");
    assert_eq!(&s[T + 4..T + 12], &[0u8; 8], "shadow version is reset");
    let identical = s[T + 12] & 1 != 0;
    let count = be32(&d, T + 16);
    let listed: BTreeSet<u32> = if identical {
        BTreeSet::new()
    } else if count == u32::MAX {
        return;
    } else {
        (0..count as usize)
            .map(|k| be32(&d, T + 24 + 4 * k))
            .collect()
    };
    let pages = d.len().min(s.len()) / page_size;
    for p in 2..=pages as u32 {
        if listed.contains(&p) {
            continue;
        }
        let r = (p as usize - 1) * page_size..p as usize * page_size;
        assert!(
            d[r.clone()] == s[r],
            "page {p} differs between database and shadow but is not in the GPL {listed:?}"
        );
    }
}
