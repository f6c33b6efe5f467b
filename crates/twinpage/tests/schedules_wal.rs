//! The WAL sequencer and its group commit under the schedule explorer: the
//! real `WalJournal` (its locks and condition variable, and the group
//! commit's, come from `base::sync`, shuttle's with the feature `shuttle`)
//! driven by several committers, each doing what the pager does for a
//! multi-writer commit: sequence under a commit lock, finish without it,
//! publish in commit order. The file system records every write and sync;
//! shuttle interleaves at every lock, wait, write and sync, and a sync lets
//! other threads run while it is in flight (it covers the writes issued
//! before it began).
//!
//! Checked in every schedule:
//! - frame ranges never overlap, and together they tile the log from its
//!   header on (the sequencer hands out contiguous ranges from one counter);
//! - when a commit is acknowledged, every byte of the log below its last
//!   frame is durable: no acknowledged commit sits behind a hole (a crash
//!   then keeps it, since recovery reads the log up to the first invalid
//!   frame);
//! - commits publish in sequence order, and a journal recovered from the
//!   durable bytes holds every acknowledged commit;
//! - power cut after every write and at every sync's end, three ways (the durable writes only;
//!   every write issued; the durable writes plus every later one but the
//!   first, which leaves a hole when frames were written out of order):
//!   recovery keeps exactly the commits before the first one the image
//!   lacks a byte of, so it stops at the first invalid frame and never
//!   takes a whole commit that sits behind a hole;
//! - every thread finishes (no lost wake-up, no deadlock).
//!
//! Run: `cargo test -p twinpage --features shuttle --test schedules_wal`
//! (`SHUTTLE_SCALE=10` for ten times the schedules).

#![cfg(feature = "shuttle")]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use twinpage::base::sync::{Condvar, Mutex};
use twinpage::base::{Header, Synchronous};
use twinpage::journal::{
    CommitSet, Journal, ModeOptions, OriginalSource, PageImage, ReaderView, RecoverCtx, TestFaults,
    WalJournal, WalOptions,
};
use twinpage::storage::{DbFile, FileLock, MemVfs, OpenFlags, Vfs, VfsFile};
use twinpage::{Pgno, Result};

const PS: usize = 512;
const DB: &str = "/s.db";
const WAL: &str = "/s.db-wal";

fn scale() -> usize {
    std::env::var("SHUTTLE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// What the log's device holds: the bytes written, and which are durable.
#[derive(Default)]
struct Device {
    /// (offset, bytes) of every write to the log, in issue order.
    writes: Vec<(u64, Vec<u8>)>,
    /// Writes `[0, durable)` of `writes` are covered by a finished sync.
    durable: usize,
    /// After every write and at the end of every sync: (`durable`,
    /// writes issued so far).
    cuts: Vec<(usize, usize)>,
}

/// A file system over `MemVfs` that records the log's writes and syncs
/// and yields to the explorer around them.
#[derive(Clone)]
struct Recording {
    inner: MemVfs,
    dev: Arc<std::sync::Mutex<Device>>,
}

struct RecFile {
    inner: Arc<dyn VfsFile>,
    dev: Option<Arc<std::sync::Mutex<Device>>>,
}

impl Vfs for Recording {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        let log = path == Path::new(WAL);
        Ok(Arc::new(RecFile {
            inner: self.inner.open(path, flags)?,
            dev: log.then(|| self.dev.clone()),
        }))
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.inner.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.inner.sync_dir(dir)
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
        if let Some(dev) = &self.dev {
            shuttle::thread::yield_now();
            let mut d = dev.lock().unwrap();
            d.writes.push((offset, buf.to_vec()));
            let cut = (d.durable, d.writes.len());
            d.cuts.push(cut);
        }
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> Result<()> {
        if let Some(dev) = &self.dev {
            // The sync covers what was issued when it began; others run
            // while it is in flight.
            let covers = dev.lock().unwrap().writes.len();
            shuttle::thread::yield_now();
            let mut d = dev.lock().unwrap();
            d.durable = d.durable.max(covers);
            let cut = (d.durable, d.writes.len());
            d.cuts.push(cut);
        }
        self.inner.sync_data()
    }
    fn sync_all(&self) -> Result<()> {
        self.sync_data()
    }
    fn set_len(&self, len: u64) -> Result<()> {
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

/// Whether `writes` cover every byte of `[from, to)`.
fn covers(writes: &[&(u64, Vec<u8>)], from: u64, to: u64) -> bool {
    let mut spans: Vec<(u64, u64)> = writes
        .iter()
        .map(|(o, b)| (*o, *o + b.len() as u64))
        .collect();
    spans.sort_unstable();
    let mut at = from;
    for (a, b) in spans {
        if a <= at && b > at {
            at = b;
        }
    }
    at >= to
}

/// The log a device holding only `writes` (applied in issue order) shows.
fn image(writes: &[&(u64, Vec<u8>)]) -> Vec<u8> {
    let mut img = Vec::new();
    for (o, b) in writes {
        let end = *o as usize + b.len();
        if img.len() < end {
            img.resize(end, 0);
        }
        img[*o as usize..end].copy_from_slice(b);
    }
    img
}

impl Device {
    /// Whether bytes `[from, to)` of the log are covered by durable writes.
    fn durable_range(&self, from: u64, to: u64) -> bool {
        let durable: Vec<_> = self.writes[..self.durable].iter().collect();
        covers(&durable, from, to)
    }

    /// The write sets a power cut can leave, from the cuts taken after
    /// every write and sync (see the module's comment).
    fn crash_sets(&self) -> Vec<Vec<&(u64, Vec<u8>)>> {
        let mut sets = Vec::new();
        for &(durable, issued) in &self.cuts {
            let w = &self.writes;
            sets.push(w[..durable].iter().collect());
            if issued > durable {
                sets.push(w[..issued].iter().collect());
            }
            if issued > durable + 1 {
                sets.push(w[..durable].iter().chain(&w[durable + 1..issued]).collect());
            }
        }
        sets
    }
}

struct Zeros;
impl OriginalSource for Zeros {
    fn original(&self, _pgno: Pgno) -> Result<Arc<[u8]>> {
        Ok(Arc::from(vec![0u8; PS]))
    }
}

/// The pager's side of the commit order: the sequenced header and the
/// ordinal of the next commit to publish.
struct Order {
    header: Mutex<(Header, u64)>,
    published: Mutex<u64>,
    turn: Condvar,
}

/// What the committers share.
struct World {
    j: WalJournal,
    db: DbFile,
    order: Order,
    dev: Arc<std::sync::Mutex<Device>>,
    /// TIDs acknowledged.
    acked: std::sync::Mutex<Vec<u64>>,
    /// Every commit's TID and log bytes `[start, end)`.
    ranges: std::sync::Mutex<Vec<(u64, u64, u64)>>,
}

/// One committer: `commits` commits of `pages` pages each.
fn committer(w: &World, who: u8, commits: usize, pages: u32) {
    let (j, db, order, dev) = (&w.j, &w.db, &w.order, &w.dev);
    for c in 0..commits {
        let (mut ticket, ordinal, tid, end) = {
            let mut g = order.header.lock();
            let prev = g.0;
            let tid = prev.fcc + 1;
            let mut header = prev;
            header.fcc = tid;
            let mut images = vec![PageImage::new(1, Arc::from(vec![0xEEu8; PS]))];
            for p in 0..pages {
                // Every commit writes pages of its own.
                let pgno = 2 + u32::from(who) * 16 + (c as u32) * 4 + p;
                let fill = who.wrapping_mul(31).wrapping_add(c as u8);
                images.push(PageImage::new(pgno, Arc::from(vec![fill; PS])));
            }
            header.page_count = header.page_count.max(2 + 16 * 4);
            let set = CommitSet {
                tid,
                pages: &images,
                orig_page_count: prev.page_count,
                new_page_count: header.page_count,
                originals: &Zeros,
                prev_header: &prev,
                header: &header,
                oldest_snapshot: u64::MAX,
                readers: &ReaderView::none(),
                free: &[],
            };
            let t = j.sequence_commit(db, &set).expect("sequence");
            let end = t.writes.iter().map(|w| w.at + w.bytes.len() as u64).max();
            let start = t.writes.iter().map(|w| w.at).min();
            if let (Some(s), Some(e)) = (start, end) {
                w.ranges.lock().unwrap().push((tid, s, e));
            }
            g.0 = header;
            let ordinal = g.1;
            g.1 += 1;
            (t, ordinal, tid, end.expect("a commit writes frames"))
        };
        j.finish_commit(db, &mut ticket).expect("finish");
        // Acknowledged: everything below its last frame must be durable.
        {
            let d = dev.lock().unwrap();
            assert!(
                d.durable_range(40, end),
                "commit {tid} acknowledged with a hole below byte {end}"
            );
        }
        w.acked.lock().unwrap().push(tid);
        let mut p = order.published.lock();
        while *p != ordinal {
            order.turn.wait(&mut p);
        }
        j.publish_commit(&ticket).expect("publish in order");
        *p += 1;
        drop(p);
        order.turn.notify_all();
    }
}

fn round(threads: u8, commits: usize, pages: u32) {
    let mem = MemVfs::new();
    let dev = Arc::new(std::sync::Mutex::new(Device::default()));
    let vfs: Arc<dyn Vfs> = Arc::new(Recording {
        inner: mem.clone(),
        dev: dev.clone(),
    });
    let file = vfs.open(Path::new(DB), OpenFlags::CREATE).unwrap();
    let mut opts = ModeOptions::default();
    opts.0.push(("wal_autocheckpoint".into(), "0".into()));
    let h = Header {
        page_size: PS as u32,
        page_count: 2,
        fcc: 7,
        freelist_head: 0,
        freelist_count: 0,
        catalog_root: 2,
        journal_mode: 4,
        clean_close: false,
        page_checksums: false,
    };
    let world = Arc::new(World {
        j: WalJournal::new(
            Synchronous::Full,
            TestFaults::default(),
            WalOptions::parse(&opts).unwrap(),
        ),
        db: DbFile::new(vfs.clone(), PathBuf::from(DB), file, PS),
        order: Order {
            header: Mutex::new((h, 0)),
            published: Mutex::new(0),
            turn: Condvar::new(),
        },
        dev: dev.clone(),
        acked: std::sync::Mutex::new(Vec::new()),
        ranges: std::sync::Mutex::new(Vec::new()),
    });
    let handles: Vec<_> = (0..threads)
        .map(|who| {
            let w = world.clone();
            shuttle::thread::spawn(move || committer(&w, who, commits, pages))
        })
        .collect();
    for t in handles {
        t.join().unwrap();
    }
    // The ranges tile the log: no two writes of frames overlap.
    let d = dev.lock().unwrap();
    let mut frames: Vec<(u64, u64)> = d
        .writes
        .iter()
        .filter(|(o, _)| *o >= 40)
        .map(|(o, b)| (*o, *o + b.len() as u64))
        .collect();
    frames.sort_unstable();
    for w in frames.windows(2) {
        assert!(w[0].1 <= w[1].0, "frame ranges overlap: {w:?}");
    }
    // Every acknowledged commit is in the durable bytes at the end.
    let n = world.acked.lock().unwrap().len() as u64;
    let mut sets: Vec<Vec<&(u64, Vec<u8>)>> = vec![d.writes[..d.durable].iter().collect()];
    sets.extend(d.crash_sets());
    let mut ranges = world.ranges.lock().unwrap().clone();
    ranges.sort_unstable();
    let mut seen = std::collections::HashSet::new();
    for (i, set) in sets.iter().enumerate() {
        let log = image(set);
        if !seen.insert(log.clone()) {
            continue;
        }
        // Recovery keeps the commits before the first one with a byte
        // missing (the header included): the first invalid frame ends it.
        let kept = if covers(set, 0, 40) {
            ranges
                .iter()
                .take_while(|(_, s, e)| covers(set, *s, *e))
                .count() as u64
        } else {
            0
        };
        let got = recovered_fcc(&h, log) - 7;
        assert_eq!(got, kept, "crash image {i}: recovered {got} commits, the image holds {kept} whole ones from the first");
        if i == 0 {
            assert_eq!(got, n, "an acknowledged commit was lost");
        }
    }
}

/// The FCC a journal recovers from `log` beside a database holding `h`.
fn recovered_fcc(h: &Header, log: Vec<u8>) -> u64 {
    let copy = MemVfs::new();
    copy.write_file(Path::new(WAL), log);
    let mut dbimg = vec![0u8; 2 * PS];
    h.write_to(&mut dbimg);
    twinpage::base::header::seal_page1(&mut dbimg[..PS]);
    copy.write_file(Path::new(DB), dbimg);
    let cvfs: Arc<dyn Vfs> = Arc::new(copy);
    let cfile = cvfs.open(Path::new(DB), OpenFlags::EXISTING).unwrap();
    let r = WalJournal::new(
        Synchronous::Full,
        TestFaults::default(),
        WalOptions::default(),
    );
    let rec = r
        .recover(&RecoverCtx {
            vfs: &cvfs,
            path: Path::new(DB),
            file: &cfile,
        })
        .unwrap();
    let mut header = *h;
    r.fixup_header(&mut header).unwrap();
    assert!(header.fcc >= h.fcc, "{}", rec.detail);
    header.fcc
}

#[test]
fn sequencer_random_schedules() {
    shuttle::check_random(|| round(3, 2, 2), 2000 * scale());
}

#[test]
fn sequencer_pct_schedules() {
    shuttle::check_pct(|| round(3, 2, 1), 2000 * scale(), 3);
}

#[test]
fn sequencer_depth_first_schedules_of_two_commits() {
    shuttle::check_dfs(|| round(2, 1, 1), Some(50_000 * scale()));
}
