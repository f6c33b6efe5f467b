//! twinpage under the benchmark.

use super::super::workload::{Action, Op, Txn, Workload, SCAN_ROWS};
use super::super::BenchError;
use super::{vfs, Engine, RowVisitor, TxnError, Worker, DB_FILE};
use ::twinpage::keys::{decode_i64_compact, encode_i64_compact};
use ::twinpage::storage::{FileLock, IoSnapshot, OpenFlags, OsVfs, Vfs, VfsFile};
use ::twinpage::{Db, Direction, Error, Options};
use parking_lot::Mutex;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

pub(super) struct TwinpageEngine {
    db: Db,
    opts: Options,
}

impl TwinpageEngine {
    pub(super) fn open(dir: &Path, opts: Options) -> Result<Self, BenchError> {
        let db = Db::open(dir.join(DB_FILE), opts.clone())?;
        Ok(TwinpageEngine { db, opts })
    }
}

pub(super) fn settings(opts: &Options) -> Vec<(String, String)> {
    let mut v = vec![
        ("journal_mode".into(), opts.journal_mode.to_string()),
        ("concurrency".into(), opts.protocol().to_string()),
        ("synchronous".into(), opts.synchronous.to_string()),
        ("page_size".into(), opts.page_size.to_string()),
        (
            "cache_size".into(),
            format!("{} KiB", opts.cache_size / 1024),
        ),
        (
            "busy_timeout".into(),
            format!("{} ms", opts.busy_timeout.as_millis()),
        ),
        ("merge".into(), opts.tree_config().merge.to_string()),
        (
            "redistribute".into(),
            opts.tree_config().redistribute.to_string(),
        ),
        (
            "page_checksums".into(),
            if opts.page_checksums { "on" } else { "off" }.into(),
        ),
        (
            "vfs".into(),
            if opts.vfs.is_some() { "memory" } else { "os" }.into(),
        ),
    ];
    // Mode-specific options, as given (the mode validated them at open).
    v.extend(opts.mode_opts.0.iter().cloned());
    v
}

/// A failed call: busy/locked and the protocol's conflicts are retryable
/// (the transaction was rolled back), anything else ends the run.
fn classify(e: Error) -> TxnError {
    match e {
        Error::Busy(m) => TxnError::Busy(m),
        Error::Locked(p) => TxnError::Busy(format!("{} locked", p.display())),
        e @ Error::Conflict { .. } => TxnError::Conflict(e.to_string()),
        e => TxnError::Fatal(e.into()),
    }
}

impl Engine for TwinpageEngine {
    fn settings(&self) -> Vec<(String, String)> {
        let mut opts = self.opts.clone();
        opts.page_size = self.db.page_size();
        opts.page_checksums = self.db.stats().page_checksums;
        settings(&opts)
    }

    fn load(&self, w: &Workload) -> Result<(), BenchError> {
        let mut t = self.db.begin_write()?;
        for name in &w.tables {
            t.create_table(name)?;
        }
        for op in &w.prefill {
            t.put(
                &w.tables[op.table as usize],
                &encode_i64_compact(op.key),
                &op.payload,
            )?;
        }
        t.commit()?;
        Ok(())
    }

    fn worker(&self, w: &Workload) -> Result<Box<dyn Worker + '_>, BenchError> {
        Ok(Box::new(TwinpageWorker {
            db: &self.db,
            tables: w.tables.clone(),
            may_miss: w.may_miss,
        }))
    }

    fn io(&self) -> IoSnapshot {
        self.db.io_counters()
    }

    fn visit(&self, w: &Workload, f: &mut RowVisitor<'_>) -> Result<bool, BenchError> {
        let r = self.db.begin_read()?;
        for (i, name) in w.tables.iter().enumerate() {
            for kv in r.range(name, .., Direction::Forward)? {
                let (k, v) = kv?;
                let key = decode_i64_compact(&k).ok_or_else(|| {
                    BenchError::Msg(format!("twinpage: table {name} holds key {k:02x?}"))
                })?;
                f(i as u32, key, &v)?;
            }
        }
        Ok(true)
    }

    fn integrity(&self) -> Result<Option<String>, BenchError> {
        let (report, problems) = self.db.check_all()?;
        Ok(Some(if problems.is_empty() {
            "ok".into()
        } else {
            let p: Vec<String> = problems.iter().map(|e| e.to_string()).collect();
            format!("{report}; {} problem(s): {}", p.len(), p.join("; "))
        }))
    }

    fn protocol_counters(&self) -> Vec<(String, u64)> {
        self.db
            .stats()
            .protocol
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        self.db.close()?;
        Ok(())
    }
}

struct TwinpageWorker<'a> {
    db: &'a Db,
    tables: Vec<String>,
    /// Rows may be missing (shared keys with inserts and deletes): an
    /// update checks that its row is there, as SQL's UPDATE does.
    may_miss: bool,
}

impl TwinpageWorker<'_> {
    fn table(&self, op: &Op) -> &str {
        &self.tables[op.table as usize]
    }

    /// A transaction that only reads, in one read transaction (a single
    /// point read in `Db::get`'s own).
    fn reads(&self, txn: &Txn) -> Result<u32, TxnError> {
        if let [op] = txn.ops.as_slice() {
            if op.action == Action::Select {
                let k = encode_i64_compact(op.key);
                let found = self.db.get(self.table(op), &k).map_err(classify)?;
                return Ok(u32::from(found.is_none()));
            }
        }
        let r = self.db.begin_read().map_err(classify)?;
        let mut missed = 0;
        for (j, op) in txn.ops.iter().enumerate() {
            let (t, k) = (self.table(op), encode_i64_compact(op.key));
            let found = if op.action == Action::Scan {
                scan(r.range(t, from(&k), Direction::Forward), op)?
            } else {
                r.get(t, &k).map_err(classify)?.is_some()
            };
            if !found {
                missed |= 1 << j;
            }
        }
        Ok(missed)
    }
}

/// Keys from `k` on.
fn from(k: &[u8]) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (Bound::Included(k), Bound::Unbounded)
}

impl Worker for TwinpageWorker<'_> {
    fn run(&mut self, txn: &Txn) -> Result<u32, TxnError> {
        if !txn.writes() {
            return self.reads(txn);
        }
        // One write transaction, as `Db::put`/`Db::delete` run an
        // auto-commit statement; dropping it on an error rolls it back.
        let mut t = self.db.begin_write().map_err(classify)?;
        let mut missed = 0;
        for (j, op) in txn.ops.iter().enumerate() {
            let k = encode_i64_compact(op.key);
            let table = self.table(op);
            let found = match op.action {
                Action::Insert => t.put(table, &k, &op.payload).map(|()| true),
                Action::Update if self.may_miss => match t.get(table, &k) {
                    Ok(Some(_)) => t.put(table, &k, &op.payload).map(|()| true),
                    Ok(None) => Ok(false),
                    Err(e) => Err(e),
                },
                Action::Update => t.put(table, &k, &op.payload).map(|()| true),
                Action::Delete => t.delete(table, &k),
                Action::Select => t.get(table, &k).map(|v| v.is_some()),
                Action::Scan => {
                    if !scan(t.range(table, from(&k), Direction::Forward), op)? {
                        missed |= 1 << j;
                    }
                    continue;
                }
            }
            .map_err(classify)?;
            if !found {
                missed |= 1 << j;
            }
        }
        t.commit().map_err(classify)?;
        Ok(missed)
    }
}

/// Read up to [`SCAN_ROWS`] rows of a range; false unless it starts at
/// `op`'s key.
fn scan<I>(range: Result<I, Error>, op: &Op) -> Result<bool, TxnError>
where
    I: Iterator<Item = Result<(Vec<u8>, Vec<u8>), Error>>,
{
    let want = encode_i64_compact(op.key);
    let mut bytes = 0usize;
    for (i, kv) in range.map_err(classify)?.take(SCAN_ROWS).enumerate() {
        let (k, v) = kv.map_err(classify)?;
        if i == 0 && k != want {
            return Ok(false);
        }
        bytes += v.len();
    }
    Ok(bytes > 0)
}

/// Database writes held back by a torn commit: (offset, bytes).
type Held = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// A file system that SIGKILLs the process at the first write to the main
/// database file after a sync, once armed (see [`vfs::arm_kill`]); or,
/// `torn`, holds the database writes once armed and at the first sync of
/// the database lets half of them reach the file, then kills.
struct KillVfs {
    inner: OsVfs,
    db: std::path::PathBuf,
    armed: Arc<AtomicBool>,
    synced: Arc<AtomicBool>,
    torn: Option<Held>,
}

struct KillFile {
    inner: Arc<dyn VfsFile>,
    is_db: bool,
    armed: Arc<AtomicBool>,
    synced: Arc<AtomicBool>,
    torn: Option<Held>,
}

impl Vfs for KillVfs {
    fn open(&self, path: &Path, flags: OpenFlags) -> ::twinpage::Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(KillFile {
            inner: self.inner.open(path, flags)?,
            is_db: path == self.db,
            armed: self.armed.clone(),
            synced: self.synced.clone(),
            torn: self.torn.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> ::twinpage::Result<bool> {
        self.inner.exists(path)
    }
    fn remove(&self, path: &Path) -> ::twinpage::Result<()> {
        self.inner.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> ::twinpage::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> ::twinpage::Result<()> {
        self.inner.sync_dir(dir)?;
        if self.armed.load(Relaxed) {
            self.synced.store(true, Relaxed);
        }
        Ok(())
    }
}

impl KillFile {
    fn note_sync(&self) {
        if self.armed.load(Relaxed) {
            self.synced.store(true, Relaxed);
        }
    }

    /// At a sync of the database: the held writes of a torn commit, the
    /// first half of them, reach the file, then the process dies. A sync
    /// after writes of page 1 alone (the session's first write marks the
    /// file as in use) lets them through and goes on.
    fn tear(&self) -> ::twinpage::Result<()> {
        let Some(held) = self
            .torn
            .as_ref()
            .filter(|_| self.is_db && self.armed.load(Relaxed))
        else {
            return Ok(());
        };
        let held = std::mem::take(&mut *held.lock());
        let only_header = held.iter().all(|(off, _)| *off == 0);
        let keep = if only_header {
            held.len()
        } else {
            held.len() / 2
        };
        for (off, data) in &held[..keep] {
            self.inner.write_at(data, *off)?;
        }
        if only_header {
            return Ok(());
        }
        vfs::kill_self(b"M")
    }
}

impl VfsFile for KillFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> ::twinpage::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> ::twinpage::Result<()> {
        if let Some(held) = self.torn.as_ref() {
            if self.is_db && self.armed.load(Relaxed) {
                held.lock().push((offset, buf.to_vec()));
                return Ok(());
            }
            return self.inner.write_at(buf, offset);
        }
        self.inner.write_at(buf, offset)?;
        if self.is_db && self.armed.load(Relaxed) && self.synced.load(Relaxed) {
            vfs::kill_self(b"M");
        }
        Ok(())
    }
    fn sync_data(&self) -> ::twinpage::Result<()> {
        self.tear()?;
        self.inner.sync_data()?;
        self.note_sync();
        Ok(())
    }
    fn sync_all(&self) -> ::twinpage::Result<()> {
        self.tear()?;
        self.inner.sync_all()?;
        self.note_sync();
        Ok(())
    }
    fn set_len(&self, len: u64) -> ::twinpage::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> ::twinpage::Result<u64> {
        self.inner.len()
    }
    fn try_lock(&self, kind: FileLock) -> ::twinpage::Result<bool> {
        self.inner.try_lock(kind)
    }
    fn unlock(&self) -> ::twinpage::Result<()> {
        self.inner.unlock()
    }
}

/// Recovery benchmark, child side: insert `rows` into an existing
/// database inside one transaction and get killed during its commit (or
/// right after it, for modes whose commit never overwrites the database
/// file in place after a sync); `torn`: in the middle of the commit's
/// database writes.
pub(crate) fn run_crash_child(
    db_path: &Path,
    opts: Options,
    rows: &[Op],
    torn: bool,
) -> Result<(), BenchError> {
    let armed = Arc::new(AtomicBool::new(false));
    let kv = KillVfs {
        inner: OsVfs::new(),
        db: db_path.to_path_buf(),
        armed: armed.clone(),
        synced: Arc::new(AtomicBool::new(false)),
        torn: torn.then(Arc::default),
    };
    let db = Db::open(db_path, opts.vfs(Arc::new(kv)))?;
    let table = super::super::workload::table_name(0);
    let mut t = db.begin_write()?;
    for op in rows {
        t.put(&table, &encode_i64_compact(op.key), &op.payload)?;
    }
    armed.store(true, Relaxed);
    t.commit()?;
    vfs::kill_self(b"C")
}

/// Recovery benchmark, parent side: open after the crash (twinpage
/// recovers inside [`Db::open`]) and read one key. Returns the row count
/// and the I/O of open plus first query (counted separately, after the
/// timing).
pub(crate) fn open_recovered(
    db_path: &Path,
    opts: Options,
    probe: i64,
) -> Result<(std::time::Duration, u64, IoSnapshot, String), BenchError> {
    let table = super::super::workload::table_name(0);
    let start = std::time::Instant::now();
    let db = Db::open(db_path, opts)?;
    let found = db.get(&table, &encode_i64_compact(probe))?;
    let elapsed = start.elapsed();
    let io = db.io_counters();
    if found.is_none() {
        return Err(BenchError::Msg(format!(
            "twinpage: key {probe} missing after recovery"
        )));
    }
    let detail = db.stats().recovery.detail;
    let rows = db.scan(&table, .., Direction::Forward)?.len() as u64;
    db.check()?;
    db.close()?;
    Ok((elapsed, rows, io, detail))
}
