//! `VfsFile::write_vectored_at` writes what one `write_at` of the
//! concatenated buffers writes, on every file system of the engine and
//! through the trait's default: empty buffers (and writes of nothing,
//! which extend no file), more buffers than one `pwritev` takes, writes
//! past the end and over existing bytes.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use twinpage::storage::{CountingVfs, FileLock, MemVfs, OpenFlags, OsVfs, Vfs, VfsFile};
use twinpage::Result;

/// A file that implements only `write_at`, so the trait's default
/// `write_vectored_at` runs.
struct Plain(Arc<dyn VfsFile>);

impl VfsFile for Plain {
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.0.write_at(buf, offset)
    }
    fn sync_data(&self) -> Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> Result<()> {
        self.0.sync_all()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.0.set_len(len)
    }
    fn len(&self) -> Result<u64> {
        self.0.len()
    }
    fn try_lock(&self, kind: FileLock) -> Result<bool> {
        self.0.try_lock(kind)
    }
    fn unlock(&self) -> Result<()> {
        self.0.unlock()
    }
}

fn contents(f: &dyn VfsFile) -> Vec<u8> {
    let mut v = vec![0u8; f.len().unwrap() as usize];
    assert_eq!(f.read_at(&mut v, 0).unwrap(), v.len());
    v
}

/// Each file system: a file written by vectored writes and one written by
/// `write_at` of the same bytes end up equal, and equal to the model.
fn check(vfs: &dyn Vfs, dir: &Path, writes: &[(u64, Vec<Vec<u8>>)]) {
    let (a, b) = (dir.join("vectored"), dir.join("plain"));
    let fa = vfs.open(&a, OpenFlags::CREATE).unwrap();
    let fb = vfs.open(&b, OpenFlags::CREATE).unwrap();
    let fd: Arc<dyn VfsFile> = Arc::new(Plain(
        vfs.open(&dir.join("default"), OpenFlags::CREATE).unwrap(),
    ));
    let mut model: Vec<u8> = Vec::new();
    for (off, bufs) in writes {
        let parts: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let all = bufs.concat();
        fa.write_vectored_at(&parts, *off).unwrap();
        fd.write_vectored_at(&parts, *off).unwrap();
        fb.write_at(&all, *off).unwrap();
        // As pwrite: writing nothing does not extend the file.
        let end = *off as usize + all.len();
        if all.is_empty() {
            continue;
        }
        if model.len() < end {
            model.resize(end, 0);
        }
        model[*off as usize..end].copy_from_slice(&all);
    }
    assert_eq!(contents(&*fa), model);
    assert_eq!(contents(&*fd), model);
    assert_eq!(contents(&*fb), model);
}

fn writes() -> impl Strategy<Value = Vec<(u64, Vec<Vec<u8>>)>> {
    let buf = prop::collection::vec(any::<u8>(), 0..300);
    let bufs = prop::collection::vec(buf, 0..150);
    prop::collection::vec((0u64..20_000, bufs), 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn vectored_writes_equal_one_write_of_the_concatenation(w in writes()) {
        check_all(&w);
    }
}

/// Every file system of the engine, and the counting one over the OS's.
fn check_all(w: &[(u64, Vec<Vec<u8>>)]) {
    let tmp = tempfile::tempdir().unwrap();
    check(&OsVfs::new(), tmp.path(), w);
    check(&MemVfs::new(), &PathBuf::from("/m"), w);
    let counted = tmp.path().join("counted");
    std::fs::create_dir(&counted).unwrap();
    check(&CountingVfs::new(Arc::new(OsVfs::new())), &counted, w);
}

/// Writing nothing past the end extends no file (found by the property
/// above: the memory file system used to extend it).
#[test]
fn writing_nothing_extends_no_file() {
    check_all(&[(1, vec![]), (5, vec![vec![], vec![]]), (3, vec![vec![7]])]);
}

#[test]
fn a_counted_vectored_write_is_one_call() {
    let tmp = tempfile::tempdir().unwrap();
    let vfs = CountingVfs::new(Arc::new(MemVfs::new()));
    let f = vfs.open(&tmp.path().join("f"), OpenFlags::CREATE).unwrap();
    let before = vfs.counters().snapshot();
    f.write_vectored_at(&[b"ab", b"", b"cde"], 7).unwrap();
    let d = vfs.counters().snapshot() - before;
    assert_eq!((d.write_calls, d.bytes_written), (1, 5));
    assert_eq!(contents(&*f), b"\0\0\0\0\0\0\0abcde");
}
