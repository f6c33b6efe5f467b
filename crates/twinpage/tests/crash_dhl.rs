//! Crash test for doubleheader logging (`dhl-tc`, `dhl-cc`, with and
//! without metadata embedding). Every mutating I/O of a workload of
//! several transactions (a spill, a rollback of a spilled transaction,
//! single- and multi-page commits, a clean close) is recorded; crash
//! images are rebuilt from the record:
//!
//! - **strict**: everything before the cut is durable, nothing after;
//! - **reordered**: everything up to the last fdatasync before the cut is
//!   durable, and any subset of the writes issued since (the file system
//!   may persist them in any order), with one of them torn at 512-byte
//!   sector granularity in some images.
//!
//! Reopening must give the state after the last acknowledged commit or
//! the one in flight, pass the integrity check, and accept a new commit.
//! Recovery itself is then cut after each of its own operations (strict
//! and reordered), and the next recovery must reach the same state.

mod common;

use common::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use twinpage::storage::{FileLock, MemVfs, OpenFlags, Vfs, VfsFile};
use twinpage::{Db, JournalMode, Options, Result, Synchronous};

#[derive(Clone, Debug)]
enum Op {
    Write(PathBuf, u64, Arc<[u8]>),
    Sync,
    SetLen(PathBuf, u64),
}

/// Records every mutating operation while passing it to a MemVfs.
#[derive(Clone)]
struct RecVfs {
    inner: MemVfs,
    log: Arc<Mutex<Vec<Op>>>,
}

struct RecFile {
    inner: Arc<dyn VfsFile>,
    log: Arc<Mutex<Vec<Op>>>,
}

impl Vfs for RecVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(RecFile {
            inner: self.inner.open(path, flags)?,
            log: self.log.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        panic!("DHL removes no file ({})", path.display())
    }
    fn rename(&self, from: &Path, _to: &Path) -> Result<()> {
        panic!("DHL renames no file ({})", from.display())
    }
    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }
}

impl VfsFile for RecFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.log
            .lock()
            .push(Op::Write(self.path().to_path_buf(), offset, Arc::from(buf)));
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> Result<()> {
        self.log.lock().push(Op::Sync);
        Ok(())
    }
    fn sync_all(&self) -> Result<()> {
        self.sync_data()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.log
            .lock()
            .push(Op::SetLen(self.path().to_path_buf(), len));
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

type Files = HashMap<PathBuf, Vec<u8>>;

fn snapshot(vfs: &MemVfs) -> Files {
    vfs.list()
        .into_iter()
        .map(|p| {
            let b = vfs.read_file(&p).unwrap();
            (p, b)
        })
        .collect()
}

fn to_vfs(files: &Files) -> MemVfs {
    let v = MemVfs::new();
    for (p, b) in files {
        v.write_file(p, b.clone());
    }
    v
}

/// Apply an operation; `sectors` (a bit mask over 512-byte sectors) keeps
/// only part of a write: a torn write.
fn apply(files: &mut Files, op: &Op, sectors: Option<u64>) {
    match op {
        Op::Write(p, off, data) => {
            let f = files.entry(p.clone()).or_default();
            let end = *off as usize + data.len();
            if f.len() < end {
                f.resize(end, 0);
            }
            for (i, chunk) in data.chunks(512).enumerate() {
                if sectors.is_none_or(|m| m & (1 << (i % 64)) != 0) {
                    let at = *off as usize + i * 512;
                    f[at..at + chunk.len()].copy_from_slice(chunk);
                }
            }
        }
        Op::SetLen(p, len) => files.entry(p.clone()).or_default().resize(*len as usize, 0),
        Op::Sync => {}
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Crash images for a cut after `cut` operations of `log` over `base`:
/// the strict one, then reordered ones (subsets of the unsynced writes,
/// some with a torn write).
fn images(base: &Files, log: &[Op], cut: usize, rng: &mut Rng, reorder: bool) -> Vec<Files> {
    let mut strict = base.clone();
    for op in &log[..cut] {
        apply(&mut strict, op, None);
    }
    let mut out = vec![strict];
    if !reorder {
        return out;
    }
    let last_sync = log[..cut].iter().rposition(|o| matches!(o, Op::Sync));
    let durable = last_sync.map_or(0, |s| s + 1);
    let pending: Vec<usize> = (durable..cut).collect();
    if pending.is_empty() {
        return out;
    }
    let mut prefix = base.clone();
    for op in &log[..durable] {
        apply(&mut prefix, op, None);
    }
    let n = pending.len();
    let mut masks: Vec<u64> = if n <= 3 {
        (0..(1u64 << n)).collect()
    } else {
        let all = (1u64 << n.min(63)) - 1;
        let mut m = vec![0, all];
        for _ in 0..2 {
            // Lose one write, or keep only one.
            let i = rng.next() % n.min(63) as u64;
            m.push(all & !(1 << i));
            m.push(1 << i);
        }
        for _ in 0..4 {
            m.push(rng.next() & all);
        }
        m
    };
    masks.sort_unstable();
    masks.dedup();
    for (k, mask) in masks.iter().enumerate() {
        // Every fourth image also tears one of the writes it keeps.
        let tear = if k % 4 == 3 {
            let kept: Vec<usize> = (0..n.min(63)).filter(|i| mask & (1 << i) != 0).collect();
            (!kept.is_empty()).then(|| kept[rng.next() as usize % kept.len()])
        } else {
            None
        };
        let mut img = prefix.clone();
        for (i, &at) in pending.iter().enumerate() {
            let keep = if i < 63 { mask & (1 << i) != 0 } else { true };
            if keep {
                let sectors = (tear == Some(i)).then(|| rng.next() | 1);
                apply(&mut img, &log[at], sectors);
            }
        }
        out.push(img);
    }
    out
}

const PATH: &str = "/crash.db";

fn opts(vfs: Arc<dyn Vfs>, mode: JournalMode, embed: bool) -> Options {
    let mut o = Options::default()
        .journal_mode(mode)
        .synchronous(Synchronous::Full)
        .page_size(512)
        .cache_size(8 * 512)
        .vfs(vfs);
    o.set("embed", if embed { "1" } else { "0" }).unwrap();
    o
}

fn k(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// The transactions under test; each returns after its commit. The
/// states after each are collected by the caller.
fn workload(db: &Db, step: usize) -> Result<()> {
    match step {
        0 => {
            // Large: splits, overflow values, deletes, spills (small cache).
            let mut t = db.begin_write()?;
            for i in 0..120u32 {
                t.put("t", &k(i * 3), &[i as u8; 60])?;
            }
            t.put("t", b"big", &[9; 3000])?;
            for i in 0..40u32 {
                t.delete("t", &k(i * 6))?;
            }
            t.commit()
        }
        1 => {
            // Spills, then rolls back: the aborted TID is reused next.
            let mut t = db.begin_write()?;
            for i in 0..200u32 {
                t.put("t", &k(1000 + i), &[7; 50])?;
            }
            t.rollback()?;
            db.put("t", &k(3), b"single")
        }
        2 => {
            let mut t = db.begin_write()?;
            t.put("t", &k(0), b"left")?;
            t.put("t", b"zzz", b"right")?;
            t.put("u", b"other", b"table")?;
            t.commit()
        }
        3 => {
            let mut t = db.begin_write()?;
            for i in 0..100u32 {
                t.delete("t", &k(i * 3))?;
            }
            t.delete("t", b"big")?;
            t.commit()
        }
        _ => unreachable!(),
    }
}

const STEPS: usize = 4;

fn base_image(mode: JournalMode, embed: bool) -> Files {
    let vfs = MemVfs::new();
    let db = open(Path::new(PATH), opts(Arc::new(vfs.clone()), mode, embed));
    db.create_table("t").unwrap();
    db.create_table("u").unwrap();
    let mut t = db.begin_write().unwrap();
    for i in 0..300u32 {
        t.put("t", &k(i), &[1; 40]).unwrap();
    }
    t.commit().unwrap();
    db.close().unwrap();
    snapshot(&vfs)
}

/// Open a crash image, check it, return its content (and the file system
/// after recovery).
fn recover(files: &Files, mode: JournalMode, embed: bool) -> (Model, MemVfs) {
    let vfs = to_vfs(files);
    let db = Db::open(Path::new(PATH), opts(Arc::new(vfs.clone()), mode, embed))
        .unwrap_or_else(|e| panic!("{mode} embed={embed}: open after crash: {e}"));

    db.check()
        .unwrap_or_else(|e| panic!("{mode} embed={embed}: check after crash: {e}"));
    let m = dump(&db);
    // The state recovery left, as a copy: dropping the handle then closes
    // the original cleanly and frees it (forgetting it, as a crash would,
    // kept every explored database in memory: gigabytes over a run).
    let after = vfs.duplicate();
    drop(db);
    (m, after)
}

/// Recovery's report, for a failure message.
fn recover_verbose(files: &Files, mode: JournalMode, embed: bool) -> Option<String> {
    let vfs = to_vfs(files);
    let db = Db::open(Path::new(PATH), opts(Arc::new(vfs), mode, embed)).ok()?;
    let r = format!("{:?}", db.stats().recovery);
    eprintln!("recovery: {r}");
    Some(r)
}

fn run(mode: JournalMode, embed: bool, reorder: bool) -> usize {
    let base = base_image(mode, embed);
    // The full run: record the log, the states, and when each commit
    // returned.
    let rec = RecVfs {
        inner: to_vfs(&base),
        log: Arc::default(),
    };
    let mut states = Vec::new();
    let mut acks = Vec::new();
    {
        let db = open(Path::new(PATH), opts(Arc::new(rec.clone()), mode, embed));
        states.push(dump(&db));
        for step in 0..STEPS {
            workload(&db, step).unwrap();
            acks.push(rec.log.lock().len());
            states.push(dump(&db));
        }
        db.close().unwrap();
        acks.push(rec.log.lock().len());
        states.push(states[STEPS].clone());
    }
    let log = rec.log.lock().clone();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut checked = 0;
    // The reordered run looks at every third cut unless DHL_CRASH_FULL is
    // set (all of them: about 190,000 states, several minutes).
    let step = if reorder && std::env::var_os("DHL_CRASH_FULL").is_none() {
        3
    } else {
        1
    };
    for cut in (0..=log.len()).step_by(step) {
        let acked = acks.iter().filter(|&&a| a <= cut).count();
        for (i, img) in images(&base, &log, cut, &mut rng, reorder)
            .into_iter()
            .enumerate()
        {
            let (got, after) = recover(&img, mode, embed);
            let ok = got == states[acked] || states.get(acked + 1).is_some_and(|s| *s == got);
            if !ok {
                let which = states.iter().position(|s| *s == got);
                let rows: Vec<usize> = got.values().map(|t| t.len()).collect();
                eprintln!("matches state {which:?}; rows {rows:?}");
                let pend: Vec<String> = log[..cut]
                    .iter()
                    .rev()
                    .take_while(|o| !matches!(o, Op::Sync))
                    .map(|o| match o {
                        Op::Write(_, off, d) => format!("w{}+{}", off / 512 + 1, d.len()),
                        Op::SetLen(_, l) => format!("len{l}"),
                        Op::Sync => "s".into(),
                    })
                    .collect();
                eprintln!("pending (newest first): {pend:?}");
                let _ = recover_verbose(&img, mode, embed);
            }
            assert!(
                ok,
                "{mode} embed={embed}: cut {cut}/{} image {i}: not the state after commit {acked} or {}",
                log.len(),
                acked + 1
            );
            checked += 1;
            // Crash during recovery, at every step (for the strict image,
            // and for every 24th reordered one).
            if (!reorder && i == 0) || (reorder && checked % 24 == 0) {
                checked += crash_recovery(&img, &got, mode, embed, &mut rng, reorder);
            }
            if !reorder {
                // The recovered database accepts a commit and closes.
                let db = open(
                    Path::new(PATH),
                    opts(Arc::new(after.duplicate()), mode, embed),
                );
                db.put("t", b"after", b"crash").unwrap();
                db.check().unwrap();
                db.close().unwrap();
            }
        }
    }
    checked
}

/// Record the recovery of `img`, cut it after each operation (strict and
/// reordered), and recover again: the result must be `want`.
fn crash_recovery(
    img: &Files,
    want: &Model,
    mode: JournalMode,
    embed: bool,
    rng: &mut Rng,
    reorder: bool,
) -> usize {
    let rec = RecVfs {
        inner: to_vfs(img),
        log: Arc::default(),
    };
    let db = Db::open(Path::new(PATH), opts(Arc::new(rec.clone()), mode, embed)).unwrap();
    // Recovery's operations; the clean close that dropping adds comes after.
    let log = rec.log.lock().clone();
    drop(db);
    let mut n = 0;
    for cut in 0..log.len() {
        for again in images(img, &log, cut, rng, reorder) {
            let (got, _) = recover(&again, mode, embed);
            assert!(
                got == *want,
                "{mode} embed={embed}: recovery cut at {cut}/{} changed the outcome",
                log.len()
            );
            n += 1;
        }
    }
    n
}

#[test]
fn dhl_survives_a_cut_after_every_operation() {
    for (mode, embed) in [
        (JournalMode::DhlCc, true),
        (JournalMode::DhlTc, true),
        (JournalMode::DhlCc, false),
        (JournalMode::DhlTc, false),
    ] {
        let n = run(mode, embed, false);
        assert!(n > 100, "{mode}: only {n} states");
    }
}

#[test]
fn dhl_survives_reordered_and_torn_unsynced_writes() {
    let mut total = 0;
    for (mode, embed) in [
        (JournalMode::DhlCc, true),
        (JournalMode::DhlTc, true),
        (JournalMode::DhlCc, false),
        (JournalMode::DhlTc, false),
    ] {
        let n = run(mode, embed, true);
        println!("{mode} embed={embed}: {n} crash states");
        total += n;
    }
    println!("{total} crash states checked");
}
