//! The public API: [`Db`], [`ReadTxn`], [`WriteTxn`], [`Options`].

use crate::base::{Durability, Synchronous};
use crate::base::{Error, KeyOrders, Pgno, Result, BYTEWISE};
use crate::btree::walk::{self, CheckReport};
use crate::btree::{self, RangeIter, SplitPolicy, TreeConfig};
use crate::cc::gate::{Entry, WriterGate};
use crate::cc::Protocol;
use crate::journal::{
    CheckpointInfo, CheckpointMode, JournalMode, ModeOptions, Recovery, TestFaults,
};
use crate::page::PageRead;
use crate::pager::{Pager, PagerConfig, PagerState, ReadPages, Savepoint, WritePages};

mod roots;
mod tables;
use crate::storage::{CountingVfs, IoCounters, IoSnapshot, OsVfs, Vfs};
use parking_lot::Mutex;
use roots::RootCache;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
pub use tables::{SavepointId, Table, TableId};

/// Scan direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Ascending key order.
    Forward,
    /// Descending key order.
    Reverse,
}

/// Settings for [`Db::open`].
#[derive(Clone)]
pub struct Options {
    /// Recovery scheme (default: persist, what Android ships).
    pub journal_mode: JournalMode,
    /// Sync level (default: full).
    pub synchronous: Synchronous,
    /// Page size of a new database (512..=65536, power of two; default
    /// 4096). An existing database keeps its own.
    pub page_size: usize,
    /// Page cache budget in bytes (default 2 MiB, SQLite's default).
    /// Write transactions whose dirty pages exceed it spill to the file.
    pub cache_size: usize,
    /// How long to wait for a lock before returning [`Error::Busy`] or
    /// [`Error::Locked`] (default 5 s).
    pub busy_timeout: Duration,
    /// Create the file if it does not exist (default true).
    pub create: bool,
    /// Page checksums for a new database (default true): every page
    /// carries a crc32c verified on every read from storage, and the
    /// integrity check tests every byte of every page. An existing
    /// database keeps what it was created with. Off exists to measure
    /// their cost; see docs/CRASH.md.
    pub page_checksums: bool,
    /// B+tree merge/redistribution switches (default: the mode's, from the
    /// registry).
    pub tree: Option<TreeConfig>,
    /// Open read-only: never write, create or recover in place (default
    /// false). A database that needs recovery fails with
    /// [`Error::ReadOnly`]; writes fail with it too.
    pub read_only: bool,
    /// File system to use (default: the OS).
    pub vfs: Option<Arc<dyn Vfs>>,
    /// Options of the journal mode (e.g. `wal_autocheckpoint`); set them
    /// with [`Options::set`]. The mode rejects names it does not know.
    pub mode_opts: ModeOptions,
    /// Concurrency protocol (default `None`: the mode's default, `sqlite`,
    /// one writer at a time). It must be one the mode's registry entry
    /// allows, or the open fails with [`Error::Unsupported`]; e.g.
    /// `begin-concurrent` runs with `wal` only.
    pub concurrency: Option<Protocol>,
    /// The caller's key orders, for tables created with their own
    /// ([`WriteTxn::create_table_id`]): the integrity check, the free-list
    /// rebuild after a crash and [`WriteTxn::open_table`] resolve a
    /// table's order from the spec in the catalog through it.
    pub key_orders: Option<Arc<dyn KeyOrders>>,
    /// Deliberate breakage for testing the crash explorer. Never set this.
    #[doc(hidden)]
    pub faults: TestFaults,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            journal_mode: JournalMode::default(),
            synchronous: Synchronous::Full,
            page_size: 4096,
            cache_size: 2 << 20,
            busy_timeout: Duration::from_secs(5),
            create: true,
            page_checksums: true,
            tree: None,
            read_only: false,
            vfs: None,
            mode_opts: ModeOptions::default(),
            concurrency: None,
            key_orders: None,
            faults: TestFaults::default(),
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("journal_mode", &self.journal_mode)
            .field("synchronous", &self.synchronous)
            .field("page_size", &self.page_size)
            .field("cache_size", &self.cache_size)
            .field("busy_timeout", &self.busy_timeout)
            .field("create", &self.create)
            .field("tree", &self.tree)
            .field("read_only", &self.read_only)
            .field("mode_opts", &self.mode_opts)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// Set the journal mode.
    pub fn journal_mode(mut self, m: JournalMode) -> Self {
        self.journal_mode = m;
        self
    }

    /// Set the sync level.
    pub fn synchronous(mut self, s: Synchronous) -> Self {
        self.synchronous = s;
        self
    }

    /// Set the page size for a new database.
    pub fn page_size(mut self, ps: usize) -> Self {
        self.page_size = ps;
        self
    }

    /// Set the cache budget in bytes.
    pub fn cache_size(mut self, bytes: usize) -> Self {
        self.cache_size = bytes;
        self
    }

    /// Set the busy timeout.
    pub fn busy_timeout(mut self, t: Duration) -> Self {
        self.busy_timeout = t;
        self
    }

    /// Set the concurrency protocol (see [`Options::concurrency`]).
    pub fn concurrency(mut self, p: Protocol) -> Self {
        self.concurrency = Some(p);
        self
    }

    /// The concurrency protocol in effect: the one set, else the mode's
    /// default.
    pub fn protocol(&self) -> Protocol {
        self.concurrency
            .unwrap_or(self.journal_mode.spec().protocols[0])
    }

    /// Open read-only (see [`Options::read_only`]).
    pub fn read_only(mut self, yes: bool) -> Self {
        self.read_only = yes;
        self
    }

    /// Use another file system.
    pub fn vfs(mut self, vfs: Arc<dyn Vfs>) -> Self {
        self.vfs = Some(vfs);
        self
    }

    /// Resolve the key orders of tables created with their own.
    pub fn key_orders(mut self, orders: Arc<dyn KeyOrders>) -> Self {
        self.key_orders = Some(orders);
        self
    }

    fn tree_mut(&mut self) -> &mut TreeConfig {
        let default = self.journal_mode.spec().tree;
        self.tree.get_or_insert(default)
    }

    /// The tree settings in effect: the ones set, else the mode's.
    pub fn tree_config(&self) -> TreeConfig {
        self.tree.unwrap_or(self.journal_mode.spec().tree)
    }

    /// Set an option by name, as the CLI and benchmark spell them:
    /// `journal_mode`, `synchronous`, `page_size`, `cache_size` (bytes, or
    /// negative KiB like SQLite), `busy_timeout` (ms), `merge`,
    /// `redistribute`, `spread`, `split` (`keep-left` or `copy-both`),
    /// `read_only`, `checksums`, `concurrency` (a protocol name: `sqlite`,
    /// `begin-concurrent`, `page-lock`, `page-lock-range`); any other name
    /// is kept as a journal-mode option and checked by the mode at open.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = || Error::InvalidArgument(format!("bad value {value:?} for option {key}"));
        let boolean = |v: &str| match v {
            "1" | "on" | "true" | "yes" => Ok(true),
            "0" | "off" | "false" | "no" => Ok(false),
            _ => Err(bad()),
        };
        match key {
            "journal_mode" | "mode" => self.journal_mode = value.parse()?,
            "synchronous" | "sync" => self.synchronous = value.parse()?,
            "page_size" => self.page_size = value.parse().map_err(|_| bad())?,
            "cache_size" => {
                let v: i64 = value.parse().map_err(|_| bad())?;
                self.cache_size = if v < 0 {
                    (-v as usize) * 1024
                } else {
                    v as usize
                };
            }
            "busy_timeout" => {
                self.busy_timeout = Duration::from_millis(value.parse().map_err(|_| bad())?)
            }
            "merge" => self.tree_mut().merge = boolean(value)?,
            "redistribute" => self.tree_mut().redistribute = boolean(value)?,
            "spread" => self.tree_mut().spread = boolean(value)?,
            "split" => {
                self.tree_mut().split = match value {
                    "keep-left" | "lazy" => SplitPolicy::KeepLeft,
                    "copy-both" | "classic" => SplitPolicy::CopyBoth,
                    _ => return Err(bad()),
                }
            }
            "read_only" => self.read_only = boolean(value)?,
            "checksums" | "page_checksums" => self.page_checksums = boolean(value)?,
            "concurrency" | "protocol" => self.concurrency = Some(value.parse()?),
            _ => self.mode_opts.0.push((key.to_string(), value.to_string())),
        }
        Ok(())
    }
}

/// Engine statistics.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Journal mode.
    pub mode: JournalMode,
    /// Concurrency protocol.
    pub concurrency: Protocol,
    /// Page size.
    pub page_size: usize,
    /// Pages in the database.
    pub page_count: u32,
    /// Pages on the free list.
    pub free_pages: u32,
    /// File change counter (last committed TID).
    pub fcc: u64,
    /// Page cache misses since open (hits are not counted: that would
    /// make every reader write a shared counter).
    pub cache_misses: u64,
    /// Single-row changes written as a patch of their leaf, without
    /// decoding it, since open (on a page whose logical view the cache did
    /// not hold: a value replaced by one of its size, a cell inserted or
    /// removed where the format patches those).
    pub leaves_patched: u64,
    /// Cumulative I/O since open.
    pub io: IoSnapshot,
    /// What recovery did at open.
    pub recovery: Recovery,
    /// The previous session ended without a clean close.
    pub opened_after_crash: bool,
    /// The database carries page checksums ([`Options::page_checksums`]).
    pub page_checksums: bool,
    /// Counters of the journal mode, by name (WAL: `wal_frames`,
    /// `checkpoints`, `checkpoints_blocked_by_readers`, ...).
    pub journal: Vec<(&'static str, u64)>,
    /// Counters of the concurrency protocol, by name (2VTO: `committed`,
    /// `aborts`, `max_aborts_per_txn`, `second_aborts`, `wounds`,
    /// `forced_sleep_ns`, `commit_wait_ns`, ...).
    pub protocol: Vec<(&'static str, u64)>,
}

struct Inner {
    pager: Arc<Pager>,
    counters: Arc<IoCounters>,
    tree: TreeConfig,
    sync: Synchronous,
    last_commit_io: Mutex<IoSnapshot>,
    key_orders: Option<Arc<dyn KeyOrders>>,
    /// [`Db`] values sharing this open database.
    handles: AtomicUsize,
    /// The protocol runs several write transactions at once.
    multi_writer: bool,
    /// Readers lock the pages they read and read the newest committed
    /// version (no snapshot): the lock on the catalog's page is what keeps
    /// a drop from running under them, so they look tables up there (R3).
    reader_locks: bool,
    /// Exclusive write transactions beside concurrent ones (only under a
    /// multi-writer protocol).
    gate: WriterGate,
    /// Roots of named tables (invariants R1-R3 in `db/roots.rs`).
    roots: Mutex<RootCache>,
}

/// Databases open in this process, by file system and path: a second
/// [`Db::open`] of the same file shares the first one's pager instead of
/// failing on the file lock.
type OpenKey = (usize, PathBuf);
static OPEN: std::sync::Mutex<Vec<(OpenKey, Weak<Inner>)>> = std::sync::Mutex::new(Vec::new());

/// The registry key of `path` on `vfs` (`None`: the OS).
fn open_key(vfs: Option<&Arc<dyn Vfs>>, path: &Path) -> OpenKey {
    let id = vfs.map_or(0, |v| Arc::as_ptr(v) as *const () as usize);
    let path = if id == 0 {
        // The same file under two spellings is one database.
        std::fs::canonicalize(path).unwrap_or_else(|_| {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            match (parent.map(std::fs::canonicalize), path.file_name()) {
                (Some(Ok(dir)), Some(name)) => dir.join(name),
                _ => path.to_path_buf(),
            }
        })
    } else {
        path.to_path_buf()
    };
    (id, path)
}

/// An open database. Share it between threads by reference or `Arc`.
///
/// Transactions own a reference to the database ([`ReadTxn`] and
/// [`WriteTxn`] have no lifetime), so a binding or a SQL cursor can keep
/// one; the database closes cleanly when the `Db` and the last
/// transaction are gone.
pub struct Db {
    inner: Arc<Inner>,
    path: PathBuf,
}

impl Db {
    /// Open (or create) the database at `path`, recovering from a crash if
    /// the last session did not finish.
    ///
    /// A database already open in this process (same file, same file
    /// system) is shared: the new handle uses the open one's pager, cache
    /// and locks, so connections in one process coordinate as threads do.
    /// Its journal mode and read-only setting must then match.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let path = path.as_ref().to_path_buf();
        let key = open_key(opts.vfs.as_ref(), &path);
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|(_, w)| w.strong_count() > 0);
        let shared = open
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
            .filter(|inner| !inner.pager.is_closed());
        if let Some(inner) = shared {
            let mode = inner.pager.spec().mode;
            if mode != opts.journal_mode || inner.pager.is_read_only() != opts.read_only {
                return Err(Error::InvalidArgument(format!(
                    "{} is already open in this process in journal mode {mode}{}",
                    path.display(),
                    if inner.pager.is_read_only() {
                        ", read-only"
                    } else {
                        ""
                    }
                )));
            }
            inner.handles.fetch_add(1, AtomicOrdering::AcqRel);
            return Ok(Db { inner, path });
        }
        let db = Self::open_new(path, opts)?;
        open.push((key, Arc::downgrade(&db.inner)));
        Ok(db)
    }

    fn open_new(path: PathBuf, opts: Options) -> Result<Db> {
        let base: Arc<dyn Vfs> = opts.vfs.clone().unwrap_or_else(|| Arc::new(OsVfs::new()));
        let counting = CountingVfs::new(base);
        let counters = counting.counters().clone();
        let vfs: Arc<dyn Vfs> = Arc::new(counting);
        let cfg = PagerConfig {
            page_size: opts.page_size,
            cache_pages: opts.cache_size / opts.page_size.max(512),
            busy_timeout: opts.busy_timeout,
            spec: opts.journal_mode.spec(),
            read_only: opts.read_only,
            sync: opts.synchronous,
            create: opts.create,
            faults: opts.faults,
            mode_opts: opts.mode_opts.clone(),
            page_checksums: opts.page_checksums,
            protocol: opts.concurrency,
            key_orders: opts.key_orders.clone(),
        };
        let pager = Arc::new(Pager::open(vfs, &path, cfg)?);
        let profile = pager.locks().profile();
        let multi_writer = profile.multi_writer;
        Ok(Db {
            inner: Arc::new(Inner {
                multi_writer,
                reader_locks: profile.reader_locks,
                gate: WriterGate::new(),
                pager,
                counters,
                tree: opts.tree_config(),
                sync: opts.synchronous,
                last_commit_io: Mutex::new(IoSnapshot::default()),
                key_orders: opts.key_orders,
                handles: AtomicUsize::new(1),
                roots: Mutex::new(RootCache::default()),
            }),
            path,
        })
    }

    /// The journal mode recorded in an existing database file's header
    /// (`None` if the file is new or empty).
    pub fn detect_mode(path: impl AsRef<Path>) -> Result<Option<JournalMode>> {
        let path = path.as_ref();
        let vfs = OsVfs::new();
        if !vfs.exists(path)? {
            return Ok(None);
        }
        let f = vfs.open(path, crate::storage::OpenFlags::EXISTING)?;
        let mut h = [0u8; crate::base::HEADER_LEN];
        let n = f.read_at(&mut h, 0)?;
        if n == 0 || h[..n].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let header = crate::base::Header::read_from(&h[..n], &path.display().to_string())?;
        JournalMode::from_code(header.journal_mode)
            .map(Some)
            .ok_or_else(|| {
                Error::corrupt(
                    path.display().to_string(),
                    1,
                    format!("unknown journal mode code {}", header.journal_mode),
                )
            })
    }

    fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The database path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal mode in use.
    pub fn mode(&self) -> JournalMode {
        self.inner().pager.spec().mode
    }

    /// What survives power loss with the current settings.
    pub fn durability(&self) -> Durability {
        self.inner().pager.spec().durability(self.inner().sync)
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.inner().pager.page_size()
    }

    /// Largest key accepted: [`btree::MAX_KEY_LEN`] (4 GiB - 1) at every
    /// page size; a longer key gets [`Error::KeyTooLarge`].
    pub fn max_key_len(&self) -> usize {
        btree::MAX_KEY_LEN
    }

    /// Longest key a cell stores whole at this database's page size and
    /// format; a longer key keeps its first bytes in the cell and the rest
    /// in an overflow chain (an extra page read per chain page when its
    /// node is loaded).
    pub fn max_inline_key_len(&self) -> usize {
        let p = &self.inner().pager;
        p.format().max_key_len(p.page_size())
    }

    /// Start a read transaction: a stable view of the last commit. It
    /// holds its own reference to the database and may move to another
    /// thread.
    pub fn begin_read(&self) -> Result<ReadTxn> {
        let pager = &self.inner.pager;
        pager.locks().begin_read(pager.busy_timeout())?;
        let snap = match pager.begin_read() {
            Ok(s) => s,
            Err(e) => {
                pager.locks().end_read();
                return Err(e);
            }
        };
        Ok(ReadTxn {
            pages: ReadPages::new(pager.clone(), snap),
            orders: self.inner.key_orders.clone(),
        })
    }

    /// Start a write transaction. Dropping it without commit rolls back.
    pub fn begin_write(&self) -> Result<WriteTxn> {
        self.begin_write_within(self.inner.pager.busy_timeout())
    }

    /// [`Db::begin_write`], waiting at most `timeout` for another writer
    /// (zero: fail with [`Error::Busy`] at once, as a reader that wants to
    /// become a writer must, since the writer may be waiting for it).
    pub fn begin_write_within(&self, timeout: Duration) -> Result<WriteTxn> {
        self.begin_write_as(Entry::Shared, timeout)
    }

    /// Whether write transactions run concurrently under this database's
    /// protocol (`begin-concurrent`, `page-lock`, `2vto`...): then
    /// [`Db::begin_write`] starts one beside the others, and
    /// [`Db::begin_write_exclusive`] one that runs alone.
    pub fn concurrent_writers(&self) -> bool {
        self.inner.multi_writer
    }

    /// Start a write transaction that runs alone: no other write
    /// transaction of this database is open while it is (SQL's BEGIN
    /// IMMEDIATE and EXCLUSIVE). Under a one-writer protocol that is every
    /// write transaction; under a concurrent one it waits, up to the busy
    /// timeout, for the open ones to end and holds new ones back until it
    /// ends (`cc::gate`). Readers are not affected.
    pub fn begin_write_exclusive(&self) -> Result<WriteTxn> {
        self.begin_write_exclusive_within(self.inner.pager.busy_timeout())
    }

    /// [`Db::begin_write_exclusive`], waiting at most `timeout`.
    pub fn begin_write_exclusive_within(&self, timeout: Duration) -> Result<WriteTxn> {
        self.begin_write_as(Entry::Alone, timeout)
    }

    fn begin_write_as(&self, how: Entry, timeout: Duration) -> Result<WriteTxn> {
        let inner = &self.inner;
        let pager = &inner.pager;
        let gate = inner.multi_writer.then_some(how);
        if let Some(how) = gate {
            inner.gate.enter(how, timeout)?;
        }
        let leave = || {
            if let Some(how) = gate {
                inner.gate.leave(how);
            }
        };
        if let Err(e) = pager.locks().begin_write(timeout) {
            leave();
            return Err(e);
        }
        let st = match pager.begin_write() {
            Ok(st) => st,
            Err(e) => {
                pager.locks().end_write();
                leave();
                return Err(e);
            }
        };
        Ok(WriteTxn {
            db: inner.clone(),
            pages: Some(WritePages {
                pager: pager.clone(),
                st,
            }),
            io_start: inner.counters.snapshot(),
            failed: None,
            savepoints: Vec::new(),
            gate,
            catalog_changed: false,
        })
    }

    /// Run `f` in a write transaction and commit it. When the commit (or
    /// `f`) fails with [`Error::Conflict`], the transaction is rolled back
    /// and `f` runs again, with a short backoff, until the busy timeout
    /// has passed; any other error is returned at once. `f` may run more
    /// than once, so it should have no effects outside the transaction.
    pub fn write<T>(&self, mut f: impl FnMut(&mut WriteTxn) -> Result<T>) -> Result<T> {
        let deadline = Instant::now() + self.inner.pager.busy_timeout();
        let mut backoff = Duration::from_micros(20);
        loop {
            let r = self.begin_write().and_then(|mut t| {
                let v = f(&mut t)?;
                t.commit()?;
                Ok(v)
            });
            match r {
                Err(Error::Conflict { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(5));
                }
                r => return r,
            }
        }
    }

    /// Auto-commit: create a table (no-op if it exists).
    pub fn create_table(&self, name: &str) -> Result<bool> {
        let mut t = self.begin_write()?;
        let created = t.create_table(name)?;
        t.commit()?;
        Ok(created)
    }

    /// Auto-commit: insert or replace one key.
    pub fn put(&self, table: &str, key: &[u8], value: &[u8]) -> Result<()> {
        let mut t = self.begin_write()?;
        t.put(table, key, value)?;
        t.commit()
    }

    /// Auto-commit: delete one key; true if it existed.
    pub fn delete(&self, table: &str, key: &[u8]) -> Result<bool> {
        let mut t = self.begin_write()?;
        let existed = t.delete(table, key)?;
        t.commit()?;
        Ok(existed)
    }

    /// Read one key in its own read transaction.
    pub fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // A read transaction that borrows the pager: no reference count
        // written per lookup.
        let pager = &*self.inner.pager;
        pager.locks().begin_read(pager.busy_timeout())?;
        let r = pager.begin_read().and_then(|snap| {
            let pages = ReadPages::new(pager, snap);
            let root = if self.inner.reader_locks {
                table_root(&pages, snap.catalog_root, table)
            } else {
                cached_root(&self.inner, &pages, (snap.fcc, snap.catalog_root), table)
            };
            let r = root.and_then(|root| btree::get(&pages, root, key, &BYTEWISE));
            pager.end_reader(pages.reader);
            pager.end_read(&snap);
            r
        });
        pager.locks().end_read();
        r
    }

    /// Collect a range in its own read transaction.
    pub fn scan<R: RangeBounds<[u8]>>(
        &self,
        table: &str,
        range: R,
        dir: Direction,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let r = self.begin_read()?;
        let out = r.range(table, range, dir)?.collect();
        out
    }

    /// Integrity check of the committed state: every tree, the free list,
    /// and that together they cover the file exactly once.
    pub fn check(&self) -> Result<CheckReport> {
        let r = self.begin_read()?;
        walk::check(&r.pages, &r.pages.snap, self.inner.key_orders.as_deref())
    }

    /// The integrity check, with every problem it found (each a corruption
    /// error naming its page) instead of an error for the first: a damaged
    /// subtree, overflow chain or free-list trunk is reported and skipped.
    pub fn check_all(&self) -> Result<(CheckReport, Vec<Error>)> {
        let r = self.begin_read()?;
        Ok(walk::check_all(
            &r.pages,
            &r.pages.snap,
            self.inner.key_orders.as_deref(),
        ))
    }

    /// Cumulative I/O counters since open.
    pub fn io_counters(&self) -> IoSnapshot {
        self.inner().counters.snapshot()
    }

    /// The shared counters (for tracing individual calls).
    pub fn counters(&self) -> &Arc<IoCounters> {
        &self.inner.counters
    }

    /// I/O of the last committed write transaction (begin to commit).
    pub fn last_commit_io(&self) -> IoSnapshot {
        *self.inner().last_commit_io.lock()
    }

    /// Run a checkpoint: copy logged pages into the database file (WAL
    /// modes); a no-op in modes without a log.
    pub fn checkpoint(&self, mode: CheckpointMode) -> Result<CheckpointInfo> {
        self.inner().pager.checkpoint(mode)
    }

    /// Statistics.
    pub fn stats(&self) -> Stats {
        let p = &self.inner().pager;
        let h = p.header();

        Stats {
            mode: p.spec().mode,
            concurrency: p.protocol(),
            page_size: p.page_size(),
            page_count: h.page_count,
            free_pages: h.freelist_count,
            fcc: h.fcc,
            cache_misses: p.cache_misses(),
            leaves_patched: p.leaves_patched(),
            io: self.io_counters(),
            recovery: p.recovery.clone(),
            opened_after_crash: p.opened_after_crash,
            page_checksums: h.page_checksums,
            journal: p.journal_stats(),
            protocol: p.locks().stats(),
        }
    }

    /// Close cleanly: marks the file so the next open knows no recovery is
    /// needed, and releases the OS lock. With transactions still open it
    /// fails with [`Error::Busy`] and the database closes when the last of
    /// them ends (as SQLite's `sqlite3_close_v2`).
    ///
    /// With other handles of the same database open in this process
    /// ([`Db::open`] shares it), this handle just goes; the last one closes.
    pub fn close(self) -> Result<()> {
        let handles = self.inner.handles.load(AtomicOrdering::Acquire);
        if handles > 1 {
            return Ok(());
        }
        let open = Arc::strong_count(&self.inner) - 1 + Arc::strong_count(&self.inner.pager) - 1;
        if open > 0 {
            return Err(Error::Busy(format!(
                "{open} transaction(s) still open on {}; it closes when the last one ends",
                self.path.display()
            )));
        }
        self.inner.pager.close()
    }

    /// The pager's state (for tests and diagnostics).
    pub fn pager_state(&self) -> PagerState {
        self.inner.pager.state()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.inner.handles.fetch_sub(1, AtomicOrdering::AcqRel);
    }
}

fn bounds<R: RangeBounds<[u8]>>(r: &R) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let own = |b: Bound<&[u8]>| match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(r.start_bound()), own(r.end_bound()))
}

fn decode_root(name: &str, v: &[u8]) -> Result<Pgno> {
    let arr: [u8; 4] = v.try_into().map_err(|_| {
        Error::corrupt(
            "database",
            0,
            format!("catalog entry for {name:?} is not a page number"),
        )
    })?;
    Ok(u32::from_be_bytes(arr))
}

fn table_root<P: PageRead + ?Sized>(p: &P, catalog: Pgno, name: &str) -> Result<Pgno> {
    // Decoded in place: no copy of the catalog value per lookup.
    match btree::get_with(p, catalog, name.as_bytes(), &BYTEWISE, &mut |v| {
        decode_root(name, v)
    })? {
        Some(root) => root,
        None => Err(Error::NoSuchTable(name.to_string())),
    }
}

/// [`table_root`] for a snapshot `(fcc, catalog root)`, through the
/// database's roots of named tables (R1).
fn cached_root<P: PageRead + ?Sized>(
    db: &Inner,
    p: &P,
    (snapshot, catalog): (u64, Pgno),
    name: &str,
) -> Result<Pgno> {
    if let Some(root) = db.roots.lock().get(snapshot, catalog, name) {
        return Ok(root);
    }
    let root = table_root(p, catalog, name)?;
    db.roots.lock().put(snapshot, catalog, name, root);
    Ok(root)
}

fn list_tables<P: PageRead + ?Sized>(p: &P, catalog: Pgno) -> Result<Vec<(String, Pgno)>> {
    let mut out = Vec::new();
    // Tables by id sort first (keys starting with a zero byte).
    for kv in RangeIter::new(
        p,
        catalog,
        Bound::Included(vec![1u8]),
        Bound::Unbounded,
        false,
        &BYTEWISE,
    )? {
        let (k, v) = kv?;
        let name = String::from_utf8_lossy(&k).into_owned();
        let root = decode_root(&name, &v)?;
        out.push((name, root));
    }
    Ok(out)
}

/// A read transaction: a consistent view of the last commit. Writers
/// cannot commit while it is open (rollback-journal modes). It owns a
/// reference to the database: it may outlive the [`Db`] value and move
/// between threads.
pub struct ReadTxn {
    pages: ReadPages,
    orders: Option<Arc<dyn KeyOrders>>,
}

impl ReadTxn {
    fn catalog(&self) -> Pgno {
        self.pages.snap.catalog_root
    }

    /// The TID of the last commit this transaction sees (its snapshot).
    pub fn snapshot_tid(&self) -> u64 {
        self.pages.snap.fcc
    }

    /// Read one key.
    pub fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let root = table_root(&self.pages, self.catalog(), table)?;
        btree::get(&self.pages, root, key, &BYTEWISE)
    }

    /// Iterate a key range in either direction.
    pub fn range<R: RangeBounds<[u8]>>(
        &self,
        table: &str,
        range: R,
        dir: Direction,
    ) -> Result<RangeIter<'_, dyn PageRead + '_>> {
        let root = table_root(&self.pages, self.catalog(), table)?;
        let (lo, hi) = bounds(&range);
        RangeIter::new(
            &self.pages as &dyn PageRead,
            root,
            lo,
            hi,
            dir == Direction::Reverse,
            &BYTEWISE,
        )
    }

    /// Names of all tables.
    pub fn tables(&self) -> Result<Vec<String>> {
        Ok(list_tables(&self.pages, self.catalog())?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }
}

impl Drop for ReadTxn {
    fn drop(&mut self) {
        self.pages.pager.end_reader(self.pages.reader);
        self.pages.pager.end_read(&self.pages.snap);
        self.pages.pager.locks().end_read();
    }
}

/// A write transaction. Its changes are private until [`WriteTxn::commit`];
/// dropping it rolls back.
pub struct WriteTxn {
    db: Arc<Inner>,
    pages: Option<WritePages>,
    io_start: IoSnapshot,
    /// An operation failed half-way (its tree changes may be partial, a
    /// spill may have failed): the transaction can only roll back (or
    /// roll back to a savepoint).
    failed: Option<Failure>,
    /// Open savepoints, oldest first.
    savepoints: Vec<Savepoint>,
    /// How it entered the writer gate (multi-writer protocols).
    gate: Option<Entry>,
    /// It wrote the catalog: it looks tables up there, and its commit
    /// empties the roots of named tables (R2, R3).
    catalog_changed: bool,
}

/// Why a write transaction can only roll back.
enum Failure {
    /// It lost a conflict (2VTO's AFUW wound, a failed validation): every
    /// later operation reports the same conflict, so a caller that missed
    /// the first report (SQLite ignores errors from opening a cursor)
    /// still sees a retryable error ([`Error::is_retryable`]).
    Conflict {
        page: Pgno,
        table: Option<String>,
        what: String,
    },
    /// Any other error half-way through an operation.
    Other(String),
}

impl WriteTxn {
    fn aborted(&self) -> Result<()> {
        match &self.failed {
            Some(Failure::Conflict { page, table, what }) => Err(Error::Conflict {
                page: *page,
                table: table.clone(),
                what: format!("an earlier operation of this transaction lost: {what}"),
            }),
            Some(Failure::Other(why)) => Err(Error::Aborted(format!(
                "an earlier error aborted this transaction: {why}"
            ))),
            None => Ok(()),
        }
    }

    // Matches, not `ok_or(Error::AlreadyFinished)`: building and dropping
    // an error on every call costs a SQL cursor's every row.
    fn pages(&self) -> Result<&WritePages> {
        self.aborted()?;
        match &self.pages {
            Some(p) => Ok(p),
            None => Err(Error::AlreadyFinished),
        }
    }

    fn pages_mut(&mut self) -> Result<&mut WritePages> {
        self.aborted()?;
        match &mut self.pages {
            Some(p) => Ok(p),
            None => Err(Error::AlreadyFinished),
        }
    }

    /// Remember a failure that may have left partial changes. Errors
    /// raised before anything changes (bad argument, key too large, no
    /// such table) leave the transaction usable.
    fn note<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            let harmless = matches!(
                e,
                Error::KeyTooLarge { .. }
                    | Error::NoSuchTable(_)
                    | Error::InvalidArgument(_)
                    | Error::Aborted(_)
                    | Error::AlreadyFinished
                    | Error::ReadOnly(_)
            );
            if !harmless {
                self.failed = Some(match e {
                    Error::Conflict { page, table, what } => Failure::Conflict {
                        page: *page,
                        table: table.clone(),
                        what: what.clone(),
                    },
                    e => Failure::Other(e.to_string()),
                });
            }
        }
        r
    }

    fn catalog(&self) -> Result<Pgno> {
        Ok(self.pages()?.st.header.catalog_root)
    }

    /// A user table's root: the catalog's pages are the catalog's, the
    /// table's pages the table's (for conflicts). From the database's
    /// roots of named tables unless this transaction wrote the catalog or
    /// several writers run (R3).
    fn user_root(&self, name: &str) -> Result<Pgno> {
        let p = self.pages()?;
        let catalog = p.st.header.catalog_root;
        p.set_table(None);
        let root = if self.catalog_changed || self.db.multi_writer {
            table_root(p, catalog, name)?
        } else {
            cached_root(&self.db, p, (p.st.snapshot_fcc(), catalog), name)?
        };
        p.set_table(Some(name));
        Ok(root)
    }

    /// Note that this transaction writes the catalog (before it does).
    fn change_catalog(&mut self) {
        self.catalog_changed = true;
    }

    /// How long this transaction's later lock waits may take (page locks
    /// under `page-lock`, the exclusive lock of a spill or commit, waits
    /// for the commit order and the locks at commit); by default the
    /// database's `busy_timeout`. The SQL front end sets each
    /// connection's `sqlite3_busy_timeout` here.
    pub fn set_busy_timeout(&mut self, timeout: Duration) {
        if let Some(p) = &mut self.pages {
            p.st.txn.busy_timeout = Some(timeout);
        }
    }

    /// The TID of the last commit this transaction started from.
    pub fn base_tid(&self) -> Result<u64> {
        Ok(self.pages()?.st.txn.snapshot)
    }

    /// Create a table; false if it already exists.
    pub fn create_table(&mut self, name: &str) -> Result<bool> {
        let r = self.create_table_inner(name);
        self.note(r)
    }

    fn create_table_inner(&mut self, name: &str) -> Result<bool> {
        self.change_catalog();
        let catalog = self.catalog()?;
        let p = self.pages_mut()?;
        p.set_table(None);
        if btree::get(p, catalog, name.as_bytes(), &BYTEWISE)?.is_some() {
            return Ok(false);
        }
        let max = p.format().max_key_len(p.page_size());
        if name.is_empty() || name.len() > max || name.starts_with('\0') {
            return Err(Error::InvalidArgument(format!(
                "table name must be 1..={max} bytes, not starting with a zero byte"
            )));
        }
        let root = btree::create(p)?;
        btree::insert(
            p,
            catalog,
            name.as_bytes(),
            &root.to_be_bytes(),
            &TreeConfig::default(),
            &BYTEWISE,
        )?;
        Ok(true)
    }

    /// Drop a table and free its pages; false if it did not exist.
    pub fn drop_table(&mut self, name: &str) -> Result<bool> {
        let r = self.drop_table_inner(name);
        self.note(r)
    }

    fn drop_table_inner(&mut self, name: &str) -> Result<bool> {
        self.change_catalog();
        let catalog = self.catalog()?;
        let p = self.pages_mut()?;
        p.set_table(None);
        let root = match btree::get(p, catalog, name.as_bytes(), &BYTEWISE)? {
            Some(v) => decode_root(name, &v)?,
            None => return Ok(false),
        };
        btree::destroy(p, root, &BYTEWISE)?;
        btree::delete(
            p,
            catalog,
            name.as_bytes(),
            &TreeConfig::default(),
            &BYTEWISE,
        )?;
        Ok(true)
    }

    /// Names of all tables.
    pub fn tables(&self) -> Result<Vec<String>> {
        Ok(list_tables(self.pages()?, self.catalog()?)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    /// Insert or replace.
    pub fn put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<()> {
        let r = (|| {
            let root = self.user_root(table)?;
            let cfg = self.db.tree;
            let p = self.pages_mut()?;
            btree::insert(p, root, key, value, &cfg, &BYTEWISE).map(|_| ())
        })();
        self.note(r)
    }

    /// Delete; true if the key existed.
    pub fn delete(&mut self, table: &str, key: &[u8]) -> Result<bool> {
        let r = (|| {
            let root = self.user_root(table)?;
            let cfg = self.db.tree;
            let p = self.pages_mut()?;
            btree::delete(p, root, key, &cfg, &BYTEWISE)
        })();
        self.note(r)
    }

    /// Read one key (sees this transaction's own changes).
    pub fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let root = self.user_root(table)?;
        btree::get(self.pages()?, root, key, &BYTEWISE)
    }

    /// Iterate a key range (sees this transaction's own changes).
    pub fn range<R: RangeBounds<[u8]>>(
        &self,
        table: &str,
        range: R,
        dir: Direction,
    ) -> Result<RangeIter<'_, dyn PageRead + '_>> {
        let root = self.user_root(table)?;
        let p = self.pages()?;
        let (lo, hi) = bounds(&range);
        RangeIter::new(
            p as &dyn PageRead,
            root,
            lo,
            hi,
            dir == Direction::Reverse,
            &BYTEWISE,
        )
    }

    /// Make the changes atomic and durable.
    pub fn commit(self) -> Result<()> {
        self.commit_tid().map(|_| ())
    }

    /// [`WriteTxn::commit`], returning the TID the transaction committed
    /// as (its place in the commit order; `None`: it changed nothing and
    /// wrote no commit). The serializability checker orders by it.
    pub fn commit_tid(mut self) -> Result<Option<u64>> {
        if let Err(e) = self.aborted() {
            self.finish_rollback()?;
            return Err(e);
        }
        let pages = self.pages.take().ok_or(Error::AlreadyFinished)?;
        // A commit releases every savepoint; dropped first, their states
        // (the free list among them) stop sharing the transaction's, which
        // the commit can then hand on without a copy.
        self.savepoints.clear();
        if self.catalog_changed {
            self.db.roots.lock().begin_change();
        }
        let r = pages.commit_tid();
        if self.catalog_changed {
            let newest = self.db.pager.header().fcc;
            self.db.roots.lock().end_change(newest);
        }
        self.db.pager.locks().end_write();
        self.leave_gate();
        if r.is_ok() {
            *self.db.last_commit_io.lock() = self.db.counters.snapshot() - self.io_start;
        }
        r
    }

    /// Discard the changes.
    pub fn rollback(mut self) -> Result<()> {
        self.finish_rollback()
    }

    fn finish_rollback(&mut self) -> Result<()> {
        match self.pages.take() {
            Some(p) => {
                let r = p.rollback();
                self.db.pager.locks().end_write();
                self.leave_gate();
                r
            }
            None => Ok(()),
        }
    }

    fn leave_gate(&mut self) {
        if let Some(how) = self.gate.take() {
            self.db.gate.leave(how);
        }
    }
}

impl Drop for WriteTxn {
    fn drop(&mut self) {
        let _ = self.finish_rollback();
    }
}
