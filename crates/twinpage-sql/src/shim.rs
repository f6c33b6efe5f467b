//! The Rust half of SQLite's B-tree interface over twinpage: the
//! `twinpage_bt_*` functions csrc/tp_btree.c calls. A [`TpConn`] is one
//! SQLite connection's view of one database (SQLite's `Btree`), a
//! [`TpCur`] one cursor (`BtCursor`).
//!
//! How SQLite's objects map onto twinpage:
//!
//! - the database file is a [`twinpage::Db`]; connections of one process
//!   share it (`Db::open` shares an open database), `:memory:` and temporary
//!   databases (TEMP, and the ephemeral trees of DISTINCT, IN, ORDER BY...)
//!   are twinpage databases on a `MemVfs` in journal mode off;
//! - SQLite's table numbers (root pages) are twinpage [`TableId`]s; table 1,
//!   `sqlite_schema`, is the id stored in the named table `sqlite` under
//!   the key `schema`, where the sixteen meta values (schema cookie, user
//!   version...) are stored too, under their one-byte index;
//! - a rowid table keys its entries with `keys::encode_i64` (memcmp order is
//!   numeric order) and stores the record as the value; an index (and a
//!   WITHOUT ROWID table) keys them with the record, compared by SQLite's
//!   record comparator under the index's KeyInfo (a [`KeyOrder`] calling
//!   back into C), and recorded in the catalog by a spec naming its fields'
//!   sort orders and collations, so the integrity check and the free-list
//!   rebuild after a crash can order it without a connection;
//! - a read transaction is a [`ReadTxn`], a write transaction a [`WriteTxn`];
//!   SQLite's statement and SAVEPOINT savepoints are twinpage savepoints.
//!
//! No function here unwinds into C: a panic becomes `SQLITE_INTERNAL`.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use twinpage::btree::ValueAt;
use twinpage::journal::CheckpointMode;
use twinpage::storage::MemVfs;
use twinpage::{
    keys, Cursor, Db, Error, JournalMode, KeyOrder, KeyOrders, Options, ReadTxn, SavepointId,
    Synchronous, Table, TableId, WriteTxn,
};

// SQLite result codes used here.
pub(crate) const SQLITE_OK: c_int = 0;
pub(crate) const SQLITE_ERROR: c_int = 1;
const SQLITE_INTERNAL: c_int = 2;
const SQLITE_ABORT: c_int = 4;
pub(crate) const SQLITE_BUSY: c_int = 5;
const SQLITE_READONLY: c_int = 8;
const SQLITE_IOERR: c_int = 10;
const SQLITE_CORRUPT: c_int = 11;
const SQLITE_CANTOPEN: c_int = 14;
const SQLITE_TOOBIG: c_int = 18;
const SQLITE_MISUSE: c_int = 21;
const SQLITE_BUSY_SNAPSHOT: c_int = SQLITE_BUSY | (2 << 8);

const SAVEPOINT_RELEASE: c_int = 1;
const SAVEPOINT_ROLLBACK: c_int = 2;

const BTREE_FREE_PAGE_COUNT: c_int = 0;
const BTREE_SCHEMA_VERSION: c_int = 1;
/// SQLite's meta values (`SQLITE_N_BTREE_META`).
const N_META: usize = 16;

/// The named table holding the meta values and the schema table's id.
const META_TABLE: &str = "sqlite";
const SCHEMA_KEY: &[u8] = b"schema";

type CompareFn =
    unsafe extern "C" fn(*mut c_void, *const c_void, c_int, *const c_void, c_int) -> c_int;
type ProbeFn = unsafe extern "C" fn(*mut c_void, *const c_void, c_int) -> c_int;
type OrderFromSpecFn = unsafe extern "C" fn(*const u8, c_int) -> *mut c_void;
type OrderFreeFn = unsafe extern "C" fn(*mut c_void);

/// The comparator functions of the C half that created a connection.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TpCallbacks {
    compare: CompareFn,
    order_from_spec: OrderFromSpecFn,
    order_free: OrderFreeFn,
}

/// What a cursor move leaves for C (see `TpRow` in tp_btree.c).
#[repr(C)]
pub struct TpRow {
    valid: c_int,
    n_key: i64,
    data: *const u8,
    n_data: c_uint,
}

/// SQLite's record order under one KeyInfo, owned by this value.
struct RecordOrder {
    ctx: *mut c_void,
    cb: TpCallbacks,
}

// SAFETY: the KeyInfo behind `ctx` is only read by the comparator, and it
// is freed once, when the last holder drops the order.
unsafe impl Send for RecordOrder {}
unsafe impl Sync for RecordOrder {}

impl KeyOrder for RecordOrder {
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        // SAFETY: both slices are valid for their lengths during the call.
        let c = unsafe {
            (self.cb.compare)(
                self.ctx,
                a.as_ptr().cast(),
                a.len() as c_int,
                b.as_ptr().cast(),
                b.len() as c_int,
            )
        };
        c.cmp(&0)
    }

    fn name(&self) -> &str {
        "sqlite-record"
    }
}

impl Drop for RecordOrder {
    fn drop(&mut self) {
        // SAFETY: ctx came from the C half and is released exactly once.
        unsafe { (self.cb.order_free)(self.ctx) }
    }
}

/// Resolves the specs of index trees (tp_btree.c's `tpSpecOf`).
struct RecordOrders {
    cb: TpCallbacks,
}

impl KeyOrders for RecordOrders {
    fn resolve(&self, spec: &[u8]) -> twinpage::Result<Arc<dyn KeyOrder>> {
        // SAFETY: spec is valid for its length; the C half copies it.
        let ctx = unsafe { (self.cb.order_from_spec)(spec.as_ptr(), spec.len() as c_int) };
        if ctx.is_null() {
            return Err(Error::Unsupported(format!(
                "index key order {:?}: unknown spec or collation (an application's collation \
                 needs its connection)",
                String::from_utf8_lossy(spec)
            )));
        }
        Ok(Arc::new(RecordOrder { ctx, cb: self.cb }))
    }
}

enum Txn {
    None,
    Read(ReadTxn),
    Write {
        w: Box<WriteTxn>,
        /// `sps[0]` is the transaction's start; `sps[i + 1]` is SQLite's
        /// savepoint `i`.
        sps: Vec<SavepointId>,
        /// Opened for the reads of an explicit transaction under a
        /// concurrent protocol, and nothing written yet: SQLite is told it
        /// is a read transaction.
        reading: bool,
    },
}

/// `wrflag` of `sqlite3BtreeBeginTrans`: a write of a plain transaction
/// (1), BEGIN EXCLUSIVE (2) and BEGIN IMMEDIATE (3, renumbered by the
/// build), which run alone under a concurrent protocol.
const WRITE_ALONE: c_int = 2;

/// One SQLite connection's handle of one database (`Btree`).
pub struct TpConn {
    db: Option<Db>,
    path: PathBuf,
    temp: bool,
    opts: Options,
    txn: Txn,
    err: CString,
    cb: TpCallbacks,
    /// What this connection read of its storage, kept so that a statement
    /// does not look it up again (SQLite's own B-tree has page 1 and its
    /// pages at hand; these lookups go through the catalog).
    cache: Cache,
}

/// [`TpConn::cache`].
#[derive(Default)]
struct Cache {
    /// Meta values read or written in the open transaction.
    meta: [Option<u32>; N_META],
    /// The schema table's id as a committed state holds it (it never
    /// changes once created).
    schema: Option<TableId>,
    /// Tables opened, by SQLite's table number, with whether their key
    /// order's spec is known to be recorded; valid while the schema
    /// cookie is `tables_cookie` (SQLite changes it with every schema
    /// change, and the same root page may then hold another tree).
    tables: HashMap<u32, (Table, bool)>,
    tables_cookie: Option<u32>,
}

impl Cache {
    /// After a rollback: nothing read in the transaction holds.
    fn forget(&mut self) {
        *self = Cache::default();
    }
}

/// One cursor (`BtCursor`).
pub struct TpCur {
    conn: *mut TpConn,
    itable: u32,
    intkey: bool,
    table: Option<Table>,
    order: Option<Arc<dyn KeyOrder>>,
    cursor: Option<Cursor>,
    /// The payload of an entry whose value is in an overflow chain.
    buf: Vec<u8>,
    /// The current entry's payload (record), handed to C by pointer: into
    /// the cursor's leaf (an inline value), its key (an index entry), or
    /// `buf`. Valid until the cursor moves or is filled again.
    data: *const u8,
    n_data: usize,
    key: i64,
    valid: bool,
    /// The view's generation when the row was filled.
    generation: u64,
}

fn code(e: &Error) -> c_int {
    match e {
        Error::Busy(_) | Error::Locked(_) => SQLITE_BUSY,
        Error::Conflict { .. } => SQLITE_BUSY_SNAPSHOT,
        Error::Corruption { .. } | Error::NoSuchTable(_) => SQLITE_CORRUPT,
        Error::Io { .. } | Error::Poisoned(_) => SQLITE_IOERR,
        Error::ReadOnly(_) => SQLITE_READONLY,
        Error::KeyTooLarge { .. } => SQLITE_TOOBIG,
        Error::Aborted(_) => SQLITE_ABORT,
        Error::Closed(_) | Error::AlreadyFinished => SQLITE_MISUSE,
        Error::Internal(_) => SQLITE_INTERNAL,
        _ => SQLITE_ERROR,
    }
}

/// Run `f`, turning a panic into `SQLITE_INTERNAL`.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(SQLITE_INTERNAL)
}

/// The file system databases opened by path use (`None`: the OS).
static FILE_SYSTEM: parking_lot::Mutex<Option<Arc<dyn twinpage::Vfs>>> =
    parking_lot::Mutex::new(None);

/// Open databases (other than in-memory and temporary ones) on `vfs`
/// instead of the OS from now on, in this process (`None`: the OS again).
/// The crash tests run SQL on the simulated crash file system this way.
pub fn set_file_system(vfs: Option<Arc<dyn twinpage::Vfs>>) {
    *FILE_SYSTEM.lock() = vfs;
}

fn mode_list() -> &'static [JournalMode] {
    JournalMode::ALL
}

fn sync_of(level: c_int) -> Option<Synchronous> {
    Some(match level {
        1 => Synchronous::Off,
        2 => Synchronous::Normal,
        3 => Synchronous::Full,
        4 => Synchronous::Extra,
        _ => return None,
    })
}

unsafe fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_str().ok()
    }
}

impl TpConn {
    fn fail(&mut self, e: &Error) -> c_int {
        self.err = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
        code(e)
    }

    fn db(&self) -> Result<&Db, Error> {
        self.db
            .as_ref()
            .ok_or_else(|| Error::Closed(self.path.display().to_string()))
    }

    fn open_db(path: &std::path::Path, opts: &Options) -> twinpage::Result<Db> {
        let mut opts = opts.clone();
        if opts.vfs.is_none() {
            // An existing file keeps the mode it was written in.
            if let Ok(Some(m)) = Db::detect_mode(path) {
                opts.journal_mode = m;
            }
        }
        Db::open(path, opts)
    }

    /// Close and reopen with `opts` (a new mode or sync level); on failure
    /// the database is reopened as it was.
    ///
    /// A read transaction (the pragma's own) ends and a new one starts on
    /// the reopened database; a write transaction refuses.
    fn reopen(&mut self, opts: Options) -> twinpage::Result<()> {
        let reading = match self.txn {
            Txn::None => false,
            Txn::Read(_) => true,
            Txn::Write { .. } => return Err(Error::Busy("a write transaction is open".into())),
        };
        self.txn = Txn::None;
        if let Some(db) = self.db.take() {
            // Before the first write the file holds nothing but twinpage's
            // empty catalog: a mode of another page format starts it anew
            // (twinpage cannot convert a written file between formats).
            let s = db.stats();
            let fresh = s.page_count <= 2
                && db
                    .begin_read()
                    .and_then(|r| r.tables())
                    .is_ok_and(|t| t.is_empty());
            let other_format =
                s.mode.node_format().name() != opts.journal_mode.node_format().name();
            db.close()?;
            if fresh && other_format {
                let vfs: Arc<dyn twinpage::Vfs> = match &opts.vfs {
                    Some(v) => v.clone(),
                    None => Arc::new(twinpage::storage::OsVfs::new()),
                };
                vfs.remove(&self.path)?;
            }
        }
        let r = match Db::open(&self.path, opts.clone()) {
            Ok(db) => {
                self.db = Some(db);
                self.opts = opts;
                Ok(())
            }
            Err(e) => {
                self.db = Some(Self::open_db(&self.path, &self.opts)?);
                Err(e)
            }
        };
        if reading {
            self.txn = Txn::Read(self.db()?.begin_read()?);
        }
        r
    }

    fn view(&self) -> twinpage::Result<&dyn twinpage::page::PageRead> {
        match &self.txn {
            Txn::Read(r) => Ok(r.view()),
            Txn::Write { w, .. } => w.view(),
            Txn::None => Err(Error::InvalidArgument(
                "no transaction open on this connection".into(),
            )),
        }
    }

    fn generation(&self) -> u64 {
        self.view().map_or(0, |v| v.generation())
    }

    fn get_named(&self, table: &str, key: &[u8]) -> twinpage::Result<Option<Vec<u8>>> {
        let r = match &self.txn {
            Txn::Read(r) => r.get(table, key),
            Txn::Write { w, .. } => w.get(table, key),
            Txn::None => {
                let r = self.db()?.begin_read()?;
                r.get(table, key)
            }
        };
        match r {
            Err(Error::NoSuchTable(_)) => Ok(None),
            r => r,
        }
    }

    /// Meta value `idx`, read once per transaction.
    fn meta(&mut self, idx: c_int) -> twinpage::Result<u32> {
        if idx == BTREE_FREE_PAGE_COUNT {
            return Ok(self.db()?.stats().free_pages);
        }
        let slot = usize::try_from(idx).ok().filter(|&i| i < N_META);
        if let Some(v) = slot.and_then(|i| self.cache.meta[i]) {
            return Ok(v);
        }
        let v = self.get_named(META_TABLE, &[idx as u8])?;
        let v = v
            .and_then(|v| v.try_into().ok())
            .map_or(0, u32::from_be_bytes);
        if let (Some(i), false) = (slot, matches!(self.txn, Txn::None)) {
            self.cache.meta[i] = Some(v);
        }
        Ok(v)
    }

    fn schema_id(&mut self) -> twinpage::Result<Option<TableId>> {
        if let Some(id) = self.cache.schema {
            return Ok(Some(id));
        }
        let v = self.get_named(META_TABLE, SCHEMA_KEY)?;
        let id = v
            .and_then(|v| v.try_into().ok())
            .map(|b| TableId(u32::from_be_bytes(b)));
        // Only a committed id is kept: a rolled-back transaction may have
        // created it (the cache is forgotten then too).
        if matches!(self.txn, Txn::Read(_)) {
            self.cache.schema = id;
        }
        Ok(id)
    }

    /// SQLite's table number as a twinpage table id (`None`: the schema
    /// table of a database that has none yet, which reads as empty).
    fn table_id(&mut self, itable: u32) -> twinpage::Result<Option<TableId>> {
        if itable == 1 {
            self.schema_id()
        } else {
            Ok(Some(TableId(itable)))
        }
    }

    /// SQLite's table `itable`, open (`None`: see [`TpConn::table_id`]),
    /// from the table cache while the schema cookie has not changed.
    fn cached_table(&mut self, itable: u32) -> twinpage::Result<Option<Table>> {
        let cookie = self.meta(BTREE_SCHEMA_VERSION)?;
        if self.cache.tables_cookie != Some(cookie) {
            self.cache.tables.clear();
            self.cache.tables_cookie = Some(cookie);
        }
        if let Some((t, _)) = self.cache.tables.get(&itable) {
            return Ok(Some(t.clone()));
        }
        let Some(id) = self.table_id(itable)? else {
            return Ok(None);
        };
        let t = self.open_table(id)?;
        self.cache.tables.insert(itable, (t.clone(), false));
        Ok(Some(t))
    }

    fn open_table(&self, id: TableId) -> twinpage::Result<Table> {
        match &self.txn {
            Txn::Read(r) => r.open_table(id),
            Txn::Write { w, .. } => w.open_table(id),
            Txn::None => Err(Error::InvalidArgument("no transaction".into())),
        }
    }

    fn writer(&mut self) -> twinpage::Result<&mut WriteTxn> {
        match &mut self.txn {
            Txn::Write { w, .. } => Ok(w),
            _ => Err(Error::ReadOnly(
                "no write transaction on this connection".into(),
            )),
        }
    }

    /// A new write transaction makes sure the meta and schema tables
    /// exist; returns the schema table's id if it was there already
    /// (committed), `None` if this transaction created it.
    fn prepare_writer(w: &mut WriteTxn) -> twinpage::Result<Option<TableId>> {
        let stored = w.get(META_TABLE, SCHEMA_KEY).or_else(|e| match e {
            Error::NoSuchTable(_) => Ok(None),
            e => Err(e),
        })?;
        if let Some(id) = stored.and_then(|v| <[u8; 4]>::try_from(v).ok()) {
            return Ok(Some(TableId(u32::from_be_bytes(id))));
        }
        w.create_table(META_TABLE)?;
        let t = w.create_table_id(b"")?;
        w.put(META_TABLE, SCHEMA_KEY, &t.id().0.to_be_bytes())?;
        Ok(None)
    }

    /// Begin a transaction for `wrflag` (see [`WRITE_ALONE`]); `explicit`:
    /// inside BEGIN ... COMMIT; a writer waits for others up to `busy`.
    ///
    /// Under a concurrent protocol (`Db::concurrent_writers`) a plain
    /// BEGIN runs beside other writers, and its transaction is a write
    /// transaction from its first statement on, reads included: the
    /// protocol validates what it read with what it wrote (a read
    /// transaction upgraded at the first write would leave the reads
    /// before it unchecked: write skew). BEGIN IMMEDIATE and EXCLUSIVE run
    /// alone (`Db::begin_write_exclusive`). A conflict surfaces as
    /// `SQLITE_BUSY_SNAPSHOT`; the application rolls back and retries.
    fn begin(&mut self, wrflag: c_int, explicit: bool, busy: Duration) -> twinpage::Result<c_int> {
        if matches!(self.txn, Txn::None) {
            self.cache.meta = [None; N_META];
        }
        let want_write = wrflag != 0 || (explicit && self.db()?.concurrent_writers());
        match (&mut self.txn, want_write) {
            (Txn::Write { reading, .. }, _) => {
                *reading &= wrflag == 0;
                return Ok(SQLITE_OK);
            }
            (Txn::Read(_), false) => return Ok(SQLITE_OK),
            _ => {}
        }
        let db = self.db()?;
        if !want_write {
            self.txn = Txn::Read(db.begin_read()?);
            return Ok(SQLITE_OK);
        }
        let seen = match &self.txn {
            Txn::Read(r) => Some(r.snapshot_tid()),
            _ => None,
        };
        // A reader that becomes a writer must not wait: the writer ahead of
        // it may be waiting for it to finish reading (SQLite's rule too).
        let wait = match seen {
            Some(_) => Duration::ZERO,
            None => busy,
        };
        let mut w = if wrflag >= WRITE_ALONE {
            db.begin_write_exclusive_within(wait)?
        } else {
            db.begin_write_within(wait)?
        };
        // Its lock waits after the start follow this connection's busy
        // timeout too, not the shared database's.
        w.set_busy_timeout(busy);
        if let Some(seen) = seen {
            if w.base_tid()? != seen {
                // Another connection committed after this one read.
                return Ok(SQLITE_BUSY_SNAPSHOT);
            }
        }
        // The tables exist once a committed state names the schema table.
        if self.cache.schema.is_none() {
            self.cache.schema = Self::prepare_writer(&mut w)?;
        }
        // The transaction reads the newest state, not the reader's.
        self.cache.meta = [None; N_META];
        let base = w.savepoint()?;
        self.txn = Txn::Write {
            w: Box::new(w),
            sps: vec![base],
            reading: wrflag == 0,
        };
        Ok(SQLITE_OK)
    }
}

/// Open a database for one connection (`sqlite3BtreeOpen`).
///
/// # Safety
/// Pointers are NUL-terminated strings or null; `cb` and `rc` are valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_open(
    path: *const c_char,
    is_temp: c_int,
    mode: *const c_char,
    concurrency: *const c_char,
    sync: *const c_char,
    page_size: c_int,
    read_only: c_int,
    cb: *const TpCallbacks,
    rc: *mut c_int,
) -> *mut TpConn {
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<TpConn, (c_int, String)> {
        // SAFETY: per the contract above.
        let cb = unsafe { *cb };
        let mut opts = Options::default().key_orders(Arc::new(RecordOrders { cb }));
        let temp = is_temp != 0;
        let path = if temp {
            opts = opts
                .vfs(Arc::new(MemVfs::new()))
                .journal_mode(JournalMode::Off)
                .synchronous(Synchronous::Off);
            PathBuf::from("temp.db")
        } else {
            // SAFETY: per the contract above.
            let p = unsafe { opt_str(path) }.ok_or((SQLITE_CANTOPEN, "bad path".into()))?;
            if let Some(fs) = FILE_SYSTEM.lock().clone() {
                opts = opts.vfs(fs);
            }
            PathBuf::from(p)
        };
        let bad = |e: Error| (code(&e), e.to_string());
        // SAFETY: per the contract above.
        if let Some(m) = unsafe { opt_str(mode) } {
            opts.journal_mode = m.parse().map_err(bad)?;
        }
        // SAFETY: per the contract above.
        if let Some(s) = unsafe { opt_str(sync) } {
            opts.set("synchronous", s).map_err(bad)?;
        }
        // SAFETY: per the contract above.
        if let Some(c) = unsafe { opt_str(concurrency) } {
            // Checked against the mode's registry entry when the database opens.
            opts.set("concurrency", c).map_err(bad)?;
        }
        if page_size > 0 {
            opts.page_size = page_size as usize;
        }
        opts.read_only = read_only != 0;
        let db = TpConn::open_db(&path, &opts).map_err(bad)?;
        Ok(TpConn {
            db: Some(db),
            path,
            temp,
            opts,
            txn: Txn::None,
            err: CString::default(),
            cb,
            cache: Cache::default(),
        })
    }));
    let (out, code) = match r {
        Ok(Ok(c)) => (Box::into_raw(Box::new(c)), SQLITE_OK),
        Ok(Err((c, _msg))) => (std::ptr::null_mut(), c),
        Err(_) => (std::ptr::null_mut(), SQLITE_INTERNAL),
    };
    // SAFETY: rc is valid per the contract.
    unsafe { *rc = code };
    out
}

/// Borrow a connection handed out by [`twinpage_bt_open`].
unsafe fn conn<'a>(c: *mut TpConn) -> &'a mut TpConn {
    // SAFETY: C passes back the pointer it got, while the connection lives.
    unsafe { &mut *c }
}

/// Close a connection (`sqlite3BtreeClose`).
///
/// # Safety
/// `c` came from [`twinpage_bt_open`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_close(c: *mut TpConn) -> c_int {
    if c.is_null() {
        return SQLITE_OK;
    }
    guard(|| {
        // SAFETY: per the contract.
        let mut b = unsafe { Box::from_raw(c) };
        b.txn = Txn::None;
        match b.db.take().map(Db::close) {
            Some(Err(e)) => code(&e),
            _ => SQLITE_OK,
        }
    })
}

/// The last error's message.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_errmsg(c: *mut TpConn) -> *const c_char {
    // SAFETY: per the contract.
    unsafe { conn(c) }.err.as_ptr()
}

/// Begin a read (0) or write (1; 2 EXCLUSIVE, 3 IMMEDIATE) transaction,
/// in or outside an explicit transaction, waiting at most `busy_ms` for
/// other writers.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_begin(
    c: *mut TpConn,
    wrflag: c_int,
    in_explicit_txn: c_int,
    busy_ms: c_int,
) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    let busy = Duration::from_millis(busy_ms.max(0) as u64);
    guard(|| {
        c.begin(wrflag, in_explicit_txn != 0, busy)
            .unwrap_or_else(|e| c.fail(&e))
    })
}

/// Commit (or end a read transaction).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_commit(c: *mut TpConn) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| match std::mem::replace(&mut c.txn, Txn::None) {
        // A failed commit has rolled the transaction back. SQLite keeps a
        // transaction open after a plain SQLITE_BUSY at COMMIT, for the
        // COMMIT to be retried, which would then commit nothing: a busy
        // commit is reported as SQLITE_BUSY_SNAPSHOT (retry the
        // transaction), which SQLite rolls back.
        Txn::Write { w, .. } => w.commit().map_or_else(
            |e| {
                c.cache.forget();
                match c.fail(&e) {
                    SQLITE_BUSY => SQLITE_BUSY_SNAPSHOT,
                    rc => rc,
                }
            },
            |()| SQLITE_OK,
        ),
        _ => SQLITE_OK,
    })
}

/// Roll back (the write transaction; with `write_only` 0 the read too).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_rollback(c: *mut TpConn, write_only: c_int) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let _ = write_only;
        match std::mem::replace(&mut c.txn, Txn::None) {
            Txn::Write { w, .. } => {
                c.cache.forget();
                w.rollback().map_or_else(|e| c.fail(&e), |()| SQLITE_OK)
            }
            _ => SQLITE_OK,
        }
    })
}

/// 0 none, 1 read, 2 write (SQLITE_TXN_*).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_txn_state(c: *mut TpConn) -> c_int {
    // SAFETY: per the contract.
    match unsafe { &conn(c).txn } {
        Txn::None => 0,
        Txn::Read(_) | Txn::Write { reading: true, .. } => 1,
        Txn::Write { .. } => 2,
    }
}

/// Make sure `n` savepoints are open (`sqlite3BtreeBeginStmt`).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_savepoints_open(c: *mut TpConn, n: c_int) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let r = (|| -> twinpage::Result<()> {
            if let Txn::Write { w, sps, .. } = &mut c.txn {
                while sps.len() < n as usize + 1 {
                    sps.push(w.savepoint()?);
                }
            }
            Ok(())
        })();
        r.map_or_else(|e| c.fail(&e), |()| SQLITE_OK)
    })
}

/// Release or roll back to SQLite's savepoint `i` (-1: the start).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_savepoint(c: *mut TpConn, op: c_int, i: c_int) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let r = (|| -> twinpage::Result<()> {
            let Txn::Write { w, sps, .. } = &mut c.txn else {
                return Ok(());
            };
            let idx = (i + 1).max(0) as usize;
            if idx >= sps.len() {
                return Ok(());
            }
            match op {
                SAVEPOINT_RELEASE if idx > 0 => {
                    w.release(sps[idx])?;
                    sps.truncate(idx);
                }
                SAVEPOINT_ROLLBACK => {
                    c.cache.forget();
                    w.rollback_to(sps[idx])?;
                    sps.truncate(idx + 1);
                }
                _ => {}
            }
            Ok(())
        })();
        r.map_or_else(|e| c.fail(&e), |()| SQLITE_OK)
    })
}

/// Read meta value `idx`.
///
/// # Safety
/// `c` is a live connection, `v` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_get_meta(c: *mut TpConn, idx: c_int, v: *mut c_uint) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| match c.meta(idx) {
        Ok(x) => {
            // SAFETY: per the contract.
            unsafe { *v = x };
            SQLITE_OK
        }
        Err(e) => c.fail(&e),
    })
}

/// Write meta value `idx` (in the write transaction).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_update_meta(c: *mut TpConn, idx: c_int, v: c_uint) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let r = c
            .writer()
            .and_then(|w| w.put(META_TABLE, &[idx as u8], &v.to_be_bytes()));
        if let Some(m) = usize::try_from(idx)
            .ok()
            .and_then(|i| c.cache.meta.get_mut(i))
        {
            *m = r.is_ok().then_some(v);
        }
        r.map_or_else(|e| c.fail(&e), |()| SQLITE_OK)
    })
}

/// Create a tree (`int_key` 1 rowid table, 0 index); with `int_key` -1,
/// record the key order `spec` of the empty tree `*itable` instead.
///
/// # Safety
/// `c` is a live connection; `spec` valid for `n` bytes; `itable` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_create_table(
    c: *mut TpConn,
    int_key: c_int,
    spec: *const u8,
    n: c_int,
    itable: *mut c_uint,
) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let spec: &[u8] = if spec.is_null() || n <= 0 {
            &[]
        } else {
            // SAFETY: per the contract.
            unsafe { std::slice::from_raw_parts(spec, n as usize) }
        };
        let r = (|| -> twinpage::Result<u32> {
            if int_key < 0 {
                // SAFETY: per the contract.
                let id = TableId(unsafe { *itable });
                if id.0 == 1 {
                    return Ok(1);
                }
                if c.cache.tables.get(&id.0).is_some_and(|e| e.1) {
                    return Ok(id.0);
                }
                // Trees with entries keep their order (an index reopened).
                match c.writer()?.set_key_order(id, spec) {
                    Ok(t) => {
                        c.cache.tables.insert(id.0, (t, true));
                        Ok(id.0)
                    }
                    Err(Error::InvalidArgument(_)) => Ok(id.0),
                    Err(e) => Err(e),
                }
            } else {
                let id = c.writer()?.create_table_id(spec)?.id().0;
                c.cache.tables.remove(&id);
                Ok(id)
            }
        })();
        match r {
            Ok(id) => {
                // SAFETY: per the contract.
                unsafe { *itable = id };
                SQLITE_OK
            }
            Err(e) => c.fail(&e),
        }
    })
}

/// Drop a tree.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_drop_table(c: *mut TpConn, itable: c_uint) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        c.cache.tables.remove(&itable);
        let r = c.writer().and_then(|w| w.drop_table_id(TableId(itable)));
        r.map_or_else(|e| c.fail(&e), |_| SQLITE_OK)
    })
}

/// Remove every entry of a tree; `*n` gets how many.
///
/// # Safety
/// `c` is a live connection, `n` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_clear_table(
    c: *mut TpConn,
    itable: c_uint,
    n: *mut i64,
) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let r = (|| -> twinpage::Result<u64> {
            let Some(id) = c.table_id(itable)? else {
                return Ok(0);
            };
            let t = c.open_table(id)?;
            c.writer()?.clear_table(&t)
        })();
        match r {
            Ok(k) => {
                // SAFETY: per the contract.
                unsafe { *n = k as i64 };
                SQLITE_OK
            }
            Err(e) => c.fail(&e),
        }
    })
}

/// Page size.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_page_size(c: *mut TpConn) -> c_int {
    // SAFETY: per the contract.
    unsafe { conn(c) }
        .db()
        .map_or(0, |d| d.page_size() as c_int)
}

/// Pages in the database.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_page_count(c: *mut TpConn) -> c_uint {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    // As this connection's transaction sees it (its new tables included).
    match c.view() {
        Ok(v) => v.page_count(),
        Err(_) => c.db().map_or(0, |d| d.stats().page_count),
    }
}

/// Opened read-only.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_read_only(c: *mut TpConn) -> c_int {
    // SAFETY: per the contract.
    unsafe { conn(c) }.opts.read_only as c_int
}

/// A temporary or in-memory database.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_is_temp(c: *mut TpConn) -> c_int {
    // SAFETY: per the contract.
    unsafe { conn(c) }.temp as c_int
}

/// The database path (valid while the connection lives).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_filename(c: *mut TpConn) -> *const c_char {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    let full = std::fs::canonicalize(&c.path).unwrap_or_else(|_| c.path.clone());
    c.err = CString::new(full.display().to_string().replace('\0', " ")).unwrap_or_default();
    c.err.as_ptr()
}

/// Number of journal modes listed.
#[no_mangle]
pub extern "C" fn twinpage_bt_mode_count() -> c_int {
    mode_list().len() as c_int
}

static MODE_NAMES: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();

/// Name of listed mode `i` (static).
#[no_mangle]
pub extern "C" fn twinpage_bt_mode_name(i: c_int) -> *const c_char {
    let names = MODE_NAMES.get_or_init(|| {
        mode_list()
            .iter()
            .map(|m| CString::new(m.name()).expect("mode names have no NUL"))
            .collect()
    });
    names
        .get(i as usize)
        .map_or(std::ptr::null(), |n| n.as_ptr())
}

/// The listed index of the connection's mode.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_mode(c: *mut TpConn) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    let m = c.db().map_or(c.opts.journal_mode, |d| d.mode());
    mode_list().iter().position(|&x| x == m).unwrap_or(0) as c_int
}

/// Switch to listed mode `i` (reopens the database; refused while a
/// transaction is open or another connection shares it).
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_set_mode(c: *mut TpConn, i: c_int) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let Some(&m) = mode_list().get(i as usize) else {
            return SQLITE_ERROR;
        };
        if c.temp || c.db().is_ok_and(|d| d.mode() == m) {
            return SQLITE_OK;
        }
        let opts = c.opts.clone().journal_mode(m);
        c.reopen(opts).map_or_else(|e| c.fail(&e), |()| SQLITE_OK)
    })
}

/// Set the sync level (1 off .. 4 extra); reopens when it changes.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_set_sync(c: *mut TpConn, level: c_int) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let Some(s) = sync_of(level) else {
            return SQLITE_OK;
        };
        if c.temp || c.opts.synchronous == s {
            return SQLITE_OK;
        }
        let mut opts = c.opts.clone().synchronous(s);
        if let Ok(d) = c.db() {
            opts.journal_mode = d.mode();
        }
        // Another connection sharing the database keeps its level.
        match c.reopen(opts) {
            Ok(()) => SQLITE_OK,
            Err(_) => SQLITE_OK,
        }
    })
}

/// Run a checkpoint (WAL): frames in the log and copied.
///
/// # Safety
/// `c` is a live connection; the counters valid or null.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_checkpoint(
    c: *mut TpConn,
    mode: c_int,
    n_log: *mut c_int,
    n_ckpt: *mut c_int,
) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let m = match mode {
            1 => CheckpointMode::Full,
            2 => CheckpointMode::Restart,
            3 => CheckpointMode::Truncate,
            _ => CheckpointMode::Passive,
        };
        match c.db().and_then(|d| d.checkpoint(m)) {
            Ok(info) => {
                // SAFETY: per the contract.
                unsafe {
                    if !n_log.is_null() {
                        *n_log = info.log_frames as c_int;
                    }
                    if !n_ckpt.is_null() {
                        *n_ckpt = info.checkpointed as c_int;
                    }
                }
                SQLITE_OK
            }
            Err(e) => c.fail(&e),
        }
    })
}

/// The twinpage integrity check of the whole file, and the entries of
/// each of SQLite's trees `roots` (as its check reports them).
///
/// # Safety
/// `c` is a live connection; `roots` and `counts` hold `n` entries; `err`
/// and `n_err` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_integrity(
    c: *mut TpConn,
    roots: *const c_uint,
    counts: *mut i64,
    n: c_int,
    err: *mut *mut c_char,
    n_err: *mut c_int,
) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { conn(c) };
    guard(|| {
        let n = n.max(0) as usize;
        // SAFETY: per the contract.
        let roots = unsafe { std::slice::from_raw_parts(roots, n) };
        let mut problems: Vec<String> = Vec::new();
        match c.db().map(|d| d.check_all()) {
            Ok(Ok((_, errs))) => problems.extend(errs.iter().map(|e| e.to_string())),
            Ok(Err(e)) | Err(e) => problems.push(e.to_string()),
        }
        for (i, &root) in roots.iter().enumerate() {
            let k = (|| -> twinpage::Result<i64> {
                if root == 0 {
                    return Ok(0);
                }
                let Some(id) = c.table_id(root)? else {
                    return Ok(0);
                };
                let t = c.open_table(id)?;
                let view = c.view()?;
                Ok(twinpage::btree::count(view, id.0, &**t.order())? as i64)
            })();
            let k = k.unwrap_or_else(|e| {
                problems.push(format!("tree {root}: {e}"));
                0
            });
            // SAFETY: per the contract.
            unsafe { *counts.add(i) = k };
        }
        // SAFETY: per the contract.
        unsafe {
            *n_err = problems.len() as c_int;
            *err = if problems.is_empty() {
                std::ptr::null_mut()
            } else {
                CString::new(problems.join("\n").replace('\0', " "))
                    .unwrap_or_default()
                    .into_raw()
            };
        }
        SQLITE_OK
    })
}

/// Free a string from [`twinpage_bt_integrity`].
///
/// # Safety
/// `s` came from that function, or is null.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_free_string(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: per the contract.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// A number that changes when the database changes (PRAGMA data_version):
/// the last commit's TID.
///
/// # Safety
/// `c` is a live connection.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_data_version(c: *mut TpConn) -> c_uint {
    // SAFETY: per the contract.
    unsafe { conn(c) }
        .db()
        .map_or(0, |d| d.stats().fcc as c_uint)
}

// ---------------------------------------------------------------- cursors

impl TpCur {
    fn conn(&mut self) -> &mut TpConn {
        // SAFETY: C closes every cursor before its connection.
        unsafe { &mut *self.conn }
    }

    /// The cursor, its table resolved on first use (the schema table may
    /// be created after the cursor opened); `None`: a schema table not
    /// created yet, which reads as empty.
    fn cursor(&mut self) -> twinpage::Result<Option<&mut Cursor>> {
        if self.cursor.is_none() {
            let itable = self.itable;
            let Some(mut t) = self.conn().cached_table(itable)? else {
                return Ok(None);
            };
            if let Some(o) = &self.order {
                t = t.with_order(o.clone());
            }
            self.cursor = Some(t.cursor());
            self.table = Some(t);
        }
        Ok(self.cursor.as_mut())
    }

    /// The cursor's table (after [`TpCur::cursor`] resolved it).
    fn table(&mut self) -> twinpage::Result<Option<Table>> {
        self.cursor()?;
        Ok(self.table.clone())
    }

    /// Describe the entry under the cursor: its payload is pointed at
    /// where it lies (an inline value in the cursor's leaf, an index key
    /// in the cursor), copied only from an overflow chain.
    fn fill(&mut self, row: &mut TpRow) -> twinpage::Result<()> {
        let conn = self.conn;
        // SAFETY: see `conn`.
        let view = unsafe { &*conn }.view()?;
        self.generation = view.generation();
        self.valid = false;
        self.n_data = 0;
        let Some(cur) = self.cursor.as_mut() else {
            self.describe(row);
            return Ok(());
        };
        if self.intkey {
            if let Some(k) = cur.key() {
                self.key = keys::decode_i64(k).ok_or_else(|| {
                    Error::corrupt("database", self.itable, "rowid key is not 8 bytes")
                })?;
                self.valid = true;
                match cur.value_in_place(view)? {
                    Some(ValueAt::Inline(v)) => (self.data, self.n_data) = (v.as_ptr(), v.len()),
                    Some(ValueAt::Overflow(_)) => {
                        let buf = &mut self.buf;
                        buf.clear();
                        cur.value_with(view, &mut |v| buf.extend_from_slice(v))?;
                        (self.data, self.n_data) = (buf.as_ptr(), buf.len());
                    }
                    // Deleted by this transaction: no payload.
                    None => {}
                }
            }
        } else if let Some(k) = cur.key() {
            (self.data, self.n_data) = (k.as_ptr(), k.len());
            self.valid = true;
        }
        self.describe(row);
        Ok(())
    }

    fn describe(&self, row: &mut TpRow) {
        row.valid = self.valid as c_int;
        row.n_key = self.key;
        row.data = if self.n_data == 0 {
            self.buf.as_ptr()
        } else {
            self.data
        };
        row.n_data = self.n_data as c_uint;
    }
}

unsafe fn cur<'a>(c: *mut TpCur) -> &'a mut TpCur {
    // SAFETY: C passes back the pointer it got, while the cursor lives.
    unsafe { &mut *c }
}

fn cur_result(c: &mut TpCur, r: twinpage::Result<()>) -> c_int {
    match r {
        Ok(()) => SQLITE_OK,
        Err(e) => c.conn().fail(&e),
    }
}

/// Open a cursor on SQLite's tree `itable`. `order` is a comparator
/// context of the C half (index trees) that the cursor takes over.
///
/// # Safety
/// `c` is a live connection; `order` null or from the C half; `rc` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_cursor(
    c: *mut TpConn,
    itable: c_uint,
    int_key: c_int,
    write: c_int,
    order: *mut c_void,
    rc: *mut c_int,
) -> *mut TpCur {
    // SAFETY: per the contract.
    let conn_ref = unsafe { conn(c) };
    let r = catch_unwind(AssertUnwindSafe(|| {
        let order: Option<Arc<dyn KeyOrder>> = if order.is_null() {
            None
        } else {
            Some(Arc::new(RecordOrder {
                ctx: order,
                cb: conn_ref.cb,
            }))
        };
        let _ = write;
        Box::new(TpCur {
            conn: c,
            itable,
            intkey: int_key != 0,
            table: None,
            order,
            cursor: None,
            buf: Vec::new(),
            data: std::ptr::null(),
            n_data: 0,
            key: 0,
            valid: false,
            generation: 0,
        })
    }));
    match r {
        Ok(b) => {
            // SAFETY: per the contract.
            unsafe { *rc = SQLITE_OK };
            Box::into_raw(b)
        }
        Err(_) => {
            // SAFETY: per the contract.
            unsafe { *rc = SQLITE_INTERNAL };
            std::ptr::null_mut()
        }
    }
}

/// Close a cursor.
///
/// # Safety
/// `c` came from [`twinpage_bt_cursor`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_cursor_close(c: *mut TpCur) {
    if !c.is_null() {
        // SAFETY: per the contract.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(c) })));
    }
}

/// Move the cursor with `f` (given its tree and the transaction's view),
/// then describe where it is in `row`.
fn move_cursor(
    c: &mut TpCur,
    row: &mut TpRow,
    f: impl FnOnce(&mut Cursor, &dyn twinpage::page::PageRead) -> twinpage::Result<bool>,
) -> c_int {
    guard(|| {
        let r = (|| {
            let view_conn = c.conn;
            if let Some(cursor) = c.cursor()? {
                // SAFETY: see TpCur::conn.
                let view = unsafe { &*view_conn }.view()?;
                f(cursor, view)?;
            }
            c.fill(row)
        })();
        cur_result(c, r)
    })
}

/// Move to the first (or, with `last`, the last) entry.
///
/// # Safety
/// `c` is a live cursor, `row` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_first(c: *mut TpCur, last: c_int, row: *mut TpRow) -> c_int {
    // SAFETY: per the contract.
    let (c, row) = unsafe { (cur(c), &mut *row) };
    move_cursor(c, row, |cursor, view| {
        if last != 0 {
            cursor.last(view)
        } else {
            cursor.first(view)
        }
    })
}

/// Move to the next (`forward`) or previous entry; `row.valid` 0 at the end.
///
/// # Safety
/// `c` is a live cursor, `row` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_step(c: *mut TpCur, forward: c_int, row: *mut TpRow) -> c_int {
    // SAFETY: per the contract.
    let (c, row) = unsafe { (cur(c), &mut *row) };
    move_cursor(c, row, |cursor, view| {
        if forward != 0 {
            cursor.next(view)
        } else {
            cursor.prev(view)
        }
    })
}

fn sign(o: Option<Ordering>) -> c_int {
    match o {
        Some(Ordering::Equal) => 0,
        Some(Ordering::Greater) => 1,
        _ => -1,
    }
}

/// Seek rowid `key` in a rowid table.
///
/// # Safety
/// `c` is a live cursor; `res`, `row` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_seek_int(
    c: *mut TpCur,
    key: i64,
    res: *mut c_int,
    row: *mut TpRow,
) -> c_int {
    // SAFETY: per the contract.
    let (c, row) = unsafe { (cur(c), &mut *row) };
    guard(|| {
        let r = (|| {
            let view_conn = c.conn;
            let mut found = None;
            if let Some(cursor) = c.cursor()? {
                // SAFETY: see TpCur::conn.
                let view = unsafe { &*view_conn }.view()?;
                found = cursor.seek(view, &keys::encode_i64(key))?;
            }
            // SAFETY: per the contract.
            unsafe { *res = sign(found) };
            c.fill(row)
        })();
        cur_result(c, r)
    })
}

/// Seek an index key: `probe(ctx, cell)` compares a cell with the target.
///
/// # Safety
/// `c` is a live cursor; `probe` and `ctx` from the C half; `res`, `row`
/// valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_seek_probe(
    c: *mut TpCur,
    probe: ProbeFn,
    ctx: *mut c_void,
    res: *mut c_int,
    row: *mut TpRow,
) -> c_int {
    // SAFETY: per the contract.
    let (c, row) = unsafe { (cur(c), &mut *row) };
    guard(|| {
        let r = (|| {
            let view_conn = c.conn;
            let mut found = None;
            if let Some(cursor) = c.cursor()? {
                // SAFETY: see TpCur::conn.
                let view = unsafe { &*view_conn }.view()?;
                found = cursor.seek_by(view, &mut |k| {
                    // SAFETY: k is valid for its length during the call.
                    let r = unsafe { probe(ctx, k.as_ptr().cast(), k.len() as c_int) };
                    r.cmp(&0)
                })?;
            }
            // SAFETY: per the contract.
            unsafe { *res = sign(found) };
            c.fill(row)
        })();
        cur_result(c, r)
    })
}

/// Bring the cursor's row up to date after changes by its transaction:
/// `moved` if the tree changed since it was read, `different` if the
/// cursor no longer points at the same entry.
///
/// # Safety
/// `c` is a live cursor; pointers valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_sync(
    c: *mut TpCur,
    row: *mut TpRow,
    moved: *mut c_int,
    different: *mut c_int,
) -> c_int {
    // SAFETY: per the contract.
    let (c, row) = unsafe { (cur(c), &mut *row) };
    guard(|| {
        if c.conn().generation() == c.generation || !c.valid {
            return SQLITE_OK;
        }
        let r = (|| {
            let view_conn = c.conn;
            let mut diff = true;
            if let Some(cursor) = c.cursor()? {
                // SAFETY: see TpCur::conn.
                let view = unsafe { &*view_conn }.view()?;
                // Reading the value finds the key again; `None`: the entry
                // is gone (it landed on a neighbour).
                diff = cursor.value_len(view)?.is_none();
            }
            c.fill(row)?;
            let same = !diff && c.valid;
            // SAFETY: per the contract.
            unsafe {
                *moved = 1;
                *different = (!same) as c_int;
            }
            Ok(())
        })();
        cur_result(c, r)
    })
}

/// Insert (or replace) an entry: rowid tables `key` with the record
/// `data` and `zero` zero bytes; indexes the record `pkey`. With
/// `save_position` the cursor is left on the new entry.
///
/// # Safety
/// `c` is a live cursor; buffers valid for their lengths; `row` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_insert(
    c: *mut TpCur,
    key: i64,
    pkey: *const c_void,
    n_key: c_int,
    data: *const c_void,
    n_data: c_int,
    zero: c_int,
    save_position: c_int,
    row: *mut TpRow,
) -> c_int {
    // SAFETY: per the contract.
    let (c, row) = unsafe { (cur(c), &mut *row) };
    guard(|| {
        let r = (|| {
            let slice = |p: *const c_void, n: c_int| -> &[u8] {
                if p.is_null() || n <= 0 {
                    &[]
                } else {
                    // SAFETY: per the contract.
                    unsafe { std::slice::from_raw_parts(p.cast(), n as usize) }
                }
            };
            let intkey = c.intkey;
            let t = c.table()?.ok_or_else(|| {
                Error::InvalidArgument("insert into a table that does not exist".into())
            })?;
            let conn = c.conn();
            let w = conn.writer()?;
            let k: Vec<u8>;
            let kb: &[u8] = if intkey {
                k = keys::encode_i64(key).to_vec();
                &k
            } else {
                slice(pkey, n_key)
            };
            if intkey {
                let d = slice(data, n_data);
                if zero > 0 {
                    let mut v = Vec::with_capacity(d.len() + zero as usize);
                    v.extend_from_slice(d);
                    v.resize(d.len() + zero as usize, 0);
                    w.put_in(&t, kb, &v)?;
                } else {
                    w.put_in(&t, kb, d)?;
                }
            } else {
                w.put_in(&t, kb, &[])?;
            }
            let kb = kb.to_vec();
            let view_conn = c.conn;
            let cursor = c.cursor()?.expect("resolved above");
            if save_position != 0 {
                // SAFETY: see TpCur::conn.
                let view = unsafe { &*view_conn }.view()?;
                cursor.seek(view, &kb)?;
                c.fill(row)
            } else {
                cursor.reset();
                c.valid = false;
                c.describe(row);
                Ok(())
            }
        })();
        cur_result(c, r)
    })
}

/// Delete the entry under the cursor (which keeps its place: the next
/// step goes where it would have gone).
///
/// # Safety
/// `c` is a live cursor, `row` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_delete(c: *mut TpCur, row: *mut TpRow) -> c_int {
    // SAFETY: per the contract.
    let (c, _row) = unsafe { (cur(c), &mut *row) };
    guard(|| {
        let r = (|| {
            let t = c
                .table()?
                .ok_or_else(|| Error::InvalidArgument("delete from a missing table".into()))?;
            let key = c
                .cursor
                .as_ref()
                .and_then(Cursor::key)
                .ok_or_else(|| Error::InvalidArgument("delete without a position".into()))?;
            // SAFETY: see TpCur::conn (the cursor is not the connection's).
            unsafe { &mut *c.conn }.writer()?.delete_in(&t, key)?;
            Ok(())
        })();
        cur_result(c, r)
    })
}

/// Number of entries in the cursor's tree.
///
/// # Safety
/// `c` is a live cursor, `n` valid.
#[no_mangle]
pub unsafe extern "C" fn twinpage_bt_count(c: *mut TpCur, n: *mut i64) -> c_int {
    // SAFETY: per the contract.
    let c = unsafe { cur(c) };
    guard(|| {
        let r = (|| {
            let k = match c.table()? {
                Some(t) => {
                    let view = c.conn().view()?;
                    twinpage::btree::count(view, t.id().0, &**t.order())?
                }
                None => 0,
            };
            // SAFETY: per the contract.
            unsafe { *n = k as i64 };
            Ok(())
        })();
        cur_result(c, r)
    })
}
