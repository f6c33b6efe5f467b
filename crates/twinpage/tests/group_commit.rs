//! Group commit and the WAL sequencer: commits of several writers that
//! become ready while an fdatasync is in flight share the next one, each
//! returns only once it is durable, and everything survives a reopen.

mod common;

use common::{dump, mem_opts, Model};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use twinpage::cc::Protocol;
use twinpage::storage::{FileLock, MemVfs, OpenFlags, Vfs, VfsFile};
use twinpage::{Db, JournalMode, Options, Result};

/// A file system whose fdatasync takes `delay` (as a flash device's does),
/// so that commits overlap with syncs in a test as they do on a phone.
#[derive(Clone)]
struct SlowSync {
    inner: Arc<dyn Vfs>,
    delay: Duration,
    syncs: Arc<AtomicU64>,
}

impl SlowSync {
    fn new(inner: Arc<dyn Vfs>, delay: Duration) -> Self {
        SlowSync {
            inner,
            delay,
            syncs: Arc::new(AtomicU64::new(0)),
        }
    }
}

struct SlowFile {
    inner: Arc<dyn VfsFile>,
    delay: Duration,
    syncs: Arc<AtomicU64>,
}

impl Vfs for SlowSync {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(SlowFile {
            inner: self.inner.open(path, flags)?,
            delay: self.delay,
            syncs: self.syncs.clone(),
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

impl VfsFile for SlowFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> Result<()> {
        // Writes issued during the first half are covered, during the
        // second half not: both happen on a real device.
        std::thread::sleep(self.delay / 2);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.sync_data();
        std::thread::sleep(self.delay / 2);
        r
    }
    fn sync_all(&self) -> Result<()> {
        std::thread::sleep(self.delay / 2);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.sync_all();
        std::thread::sleep(self.delay / 2);
        r
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

/// The (mode, protocol) pairs whose commits can share an fdatasync.
const GROUPED: &[(JournalMode, Protocol)] = &[
    (JournalMode::Wal, Protocol::BeginConcurrent),
    (JournalMode::Wal, Protocol::PageLock),
    (JournalMode::Ips, Protocol::TwoVto),
    (JournalMode::DhlCc, Protocol::TwoVto),
];

fn opts(vfs: &SlowSync, mode: JournalMode, p: Protocol) -> Options {
    let mut o = mem_opts(&MemVfs::new(), mode, 1024).concurrency(p);
    o.vfs = Some(Arc::new(vfs.clone()));
    o.busy_timeout = Duration::from_secs(30);
    o
}

fn stat(db: &Db, name: &str) -> u64 {
    db.stats()
        .journal
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |&(_, v)| v)
}

/// `threads` writers, each committing `per` single-row transactions into
/// its own table; returns the model.
fn run(db: &Arc<Db>, threads: u32, per: u32) -> Model {
    for t in 0..threads {
        db.create_table(&format!("t{t}")).unwrap();
    }
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    let k = format!("k{i:04}").into_bytes();
                    db.write(|w| w.put(&format!("t{t}"), &k, &[t as u8; 40]))
                        .unwrap();
                    // Acknowledged means durable: the row is there for a
                    // reader at once.
                    assert!(db.get(&format!("t{t}"), &k).unwrap().is_some());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut m = Model::new();
    for t in 0..threads {
        let rows = (0..per)
            .map(|i| (format!("k{i:04}").into_bytes(), vec![t as u8; 40]))
            .collect();
        m.insert(format!("t{t}"), rows);
    }
    m
}

#[test]
fn concurrent_commits_share_fdatasyncs() {
    for &(mode, p) in GROUPED {
        let vfs = SlowSync::new(Arc::new(MemVfs::new()), Duration::from_millis(3));
        let db = Arc::new(Db::open("/g.db", opts(&vfs, mode, p)).unwrap());
        let (threads, per) = (4, 30);
        let before = stat(&db, "commits_synced");
        let model = run(&db, threads, per);
        let commits = stat(&db, "commits_synced") - before;
        let syncs = stat(&db, "commit_syncs");
        assert!(
            commits >= u64::from(threads * per),
            "{mode}/{p}: {commits} commits synced"
        );
        assert!(
            stat(&db, "max_group") > 1 && syncs < commits,
            "{mode}/{p}: {syncs} syncs for {commits} commits: no group formed"
        );
        db.check().unwrap();
        assert_eq!(dump(&db), model, "{mode}/{p}");
        Arc::try_unwrap(db).ok().unwrap().close().unwrap();
        let db = Db::open("/g.db", opts(&vfs, mode, p)).unwrap();
        db.check().unwrap();
        assert_eq!(dump(&db), model, "{mode}/{p} after reopen");
    }
}

#[test]
fn one_writer_syncs_once_per_commit() {
    for &(mode, p) in GROUPED {
        let vfs = SlowSync::new(Arc::new(MemVfs::new()), Duration::ZERO);
        let db = Arc::new(Db::open("/g.db", opts(&vfs, mode, p)).unwrap());
        let before = stat(&db, "commit_syncs");
        run(&db, 1, 20);
        assert_eq!(stat(&db, "commit_syncs") - before, 21, "{mode}/{p}");
        assert_eq!(stat(&db, "max_group"), 1, "{mode}/{p}");
    }
}

/// A crash at every operation of a run in which four writers commit
/// multi-row transactions through group commit: recovery always yields a
/// state in which every transaction is whole or absent, each writer's
/// transactions form a prefix of what it committed (it began each after
/// the previous one returned), and every transaction acknowledged before
/// the crash is there.
#[test]
fn crashes_with_commits_in_flight() {
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use twinpage_sim::sim::{PersistenceModel, SimVfs};

    const THREADS: u32 = 4;
    const PER: u32 = 12;
    for &(mode, p) in GROUPED {
        let sim = SimVfs::new();
        let vfs = SlowSync::new(Arc::new(sim.clone()), Duration::from_millis(2));
        let mut o = opts(&vfs, mode, p);
        if mode == JournalMode::Wal {
            // Checkpoints and log restarts while commits are in flight and
            // a reader stays open.
            o.set("wal_autocheckpoint", "8").unwrap();
        }
        let db = Arc::new(Db::open("/g.db", o).unwrap());
        for t in 0..THREADS {
            db.create_table(&format!("t{t}")).unwrap();
        }
        // (The in-page modes refuse a reader older than both versions of a
        // page with a retryable Conflict, [IPS] §4.2: WAL only.)
        let reader = (mode == JournalMode::Wal).then(|| db.begin_read().unwrap());
        // (thread, transaction, operations recorded when it returned)
        let acks = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (db, sim, acks) = (db.clone(), sim.clone(), acks.clone());
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let table = format!("t{t}");
                        db.write(|w| {
                            for part in 0..3u8 {
                                let k = format!("k{i:04}-{part}").into_bytes();
                                w.put(&table, &k, &[part; 30])?;
                            }
                            Ok(())
                        })
                        .unwrap();
                        acks.lock().push((t, i, sim.op_count()));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let groups = stat(&db, "max_group");
        if mode == JournalMode::Wal {
            assert!(stat(&db, "restarts") > 2, "{mode}/{p}: no restart");
        }
        // The reader still sees the empty tables it began with.
        for t in 0..THREADS {
            if let Some(r) = &reader {
                let rows = r.range(&format!("t{t}"), .., twinpage::Direction::Forward);
                assert_eq!(rows.unwrap().count(), 0, "{mode}/{p}: reader of t{t}");
            }
        }
        drop(reader);
        let log = sim.log();
        std::mem::forget(db); // power is cut: no clean close
        let acks = acks.lock().clone();
        let mut rng = SmallRng::seed_from_u64(7);
        let mut states = 0;
        for model in [PersistenceModel::Ext4Ordered, PersistenceModel::Torn] {
            for cut in 0..=log.len() {
                if !log.cut_matters(cut) {
                    continue;
                }
                for draw in 0..4 {
                    let spec = log.sample(cut, model, draw, &mut rng);
                    let img = log.image(&spec);
                    let mem = img.to_mem_vfs();
                    let mut o = mem_opts(&mem, mode, 1024).concurrency(p);
                    o.busy_timeout = Duration::from_secs(5);
                    let what = format!("{mode}/{p} {model} cut {cut} draw {draw}");
                    let Ok(db) = Db::open("/g.db", o) else {
                        // Before the database was created.
                        assert!(acks.iter().all(|a| a.2 > cut), "{what}: open failed");
                        continue;
                    };
                    db.check().unwrap_or_else(|e| panic!("{what}: {e}"));
                    let got = dump(&db);
                    for t in 0..THREADS {
                        let rows = got.get(&format!("t{t}"));
                        let has = |i: u32, part: u8| {
                            rows.is_some_and(|r| {
                                r.contains_key(format!("k{i:04}-{part}").as_bytes())
                            })
                        };
                        let mut prefix = true;
                        for i in 0..PER {
                            let n = (0..3).filter(|&part| has(i, part)).count();
                            assert!(n == 0 || n == 3, "{what}: t{t} txn {i} is partial");
                            assert!(prefix || n == 0, "{what}: t{t} txn {i} after a gap");
                            prefix &= n == 3;
                            let acked = acks.iter().any(|a| a.0 == t && a.1 == i && a.2 <= cut);
                            assert!(!acked || n == 3, "{what}: acknowledged t{t} txn {i} lost");
                        }
                    }
                    std::mem::forget(db);
                    states += 1;
                }
            }
        }
        eprintln!("{mode}/{p}: {states} crash states, largest group {groups}");
        assert!(groups > 1, "{mode}/{p}: no group formed");
    }
}
