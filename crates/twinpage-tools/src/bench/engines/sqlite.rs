//! SQLite under the benchmark: rusqlite's bundled SQLite, every connection
//! opened through the counting VFS ([`super::vfs`]), every pragma set
//! explicitly and read back for the report.
//!
//! The table is shaped like Mobibench's `tblMyList`:
//! `CREATE TABLE tblMyList (id INTEGER PRIMARY KEY, Value TEXT NOT NULL,
//! creation_date TEXT)`. Mobibench declares `id ... AUTOINCREMENT`; that
//! makes every insert also update `sqlite_sequence`, one more page per
//! transaction that twinpage does not write, so it is left out (the ids
//! come from the shared op stream anyway).

use super::super::workload::{Action, Op, Txn, Workload, SCAN_ROWS};
use super::super::BenchError;
use super::{vfs, Engine, RowVisitor, TxnError, Worker, DB_FILE};
use ::twinpage::storage::IoSnapshot;
use parking_lot::Mutex;
use rusqlite::{params, Connection, ErrorCode, OpenFlags};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// SQLite settings (`sqlite:JOURNAL_MODE[,name=value...]`).
#[derive(Debug, Clone)]
pub struct SqliteSpec {
    /// delete, truncate, persist, wal or off.
    pub journal_mode: String,
    /// off, normal, full or extra (default full).
    pub synchronous: String,
    /// PRAGMA journal_size_limit (default -1, SQLite's: no limit).
    pub journal_size_limit: i64,
    /// PRAGMA wal_autocheckpoint in pages (default 1000, SQLite's).
    pub wal_autocheckpoint: i64,
    /// Open with `cache=shared` instead of private caches.
    pub shared_cache: bool,
    /// PRAGMA cache_size (default -2048: 2 MiB, twinpage's default budget).
    pub cache_size: i64,
    /// PRAGMA page_size (default 4096).
    pub page_size: u32,
    /// PRAGMA locking_mode (default normal).
    pub locking_mode: String,
    /// Busy timeout in ms (default 5000, twinpage's).
    pub busy_timeout_ms: u64,
    /// SQLite's in-memory `memdb` VFS instead of the counting one over
    /// unix (`vfs=memdb`; no I/O is counted).
    pub memdb: bool,
}

impl SqliteSpec {
    /// Parse the journal mode and the `name=value` options.
    pub fn new(mode: &str, opts: &[(String, String)]) -> Result<Self, String> {
        let mode = mode.to_ascii_lowercase();
        if !["delete", "truncate", "persist", "wal", "off", "memory"].contains(&mode.as_str()) {
            return Err(format!(
                "SQLite journal mode must be delete, truncate, persist, wal, off or memory, not {mode:?}"
            ));
        }
        let mut s = SqliteSpec {
            journal_mode: mode,
            synchronous: "full".into(),
            journal_size_limit: -1,
            wal_autocheckpoint: 1000,
            shared_cache: false,
            cache_size: -2048,
            page_size: 4096,
            locking_mode: "normal".into(),
            busy_timeout_ms: 5000,
            memdb: false,
        };
        for (k, v) in opts {
            let int = || {
                v.parse::<i64>()
                    .map_err(|_| format!("bad value {v:?} for {k}"))
            };
            match k.as_str() {
                "synchronous" | "sync" => {
                    let v = v.to_ascii_lowercase();
                    if !["off", "normal", "full", "extra"].contains(&v.as_str()) {
                        return Err(format!("bad synchronous {v:?}"));
                    }
                    s.synchronous = v;
                }
                "journal_size_limit" => s.journal_size_limit = int()?,
                "wal_autocheckpoint" => s.wal_autocheckpoint = int()?,
                "cache_size" => s.cache_size = int()?,
                "page_size" => {
                    s.page_size = u32::try_from(int()?).map_err(|_| format!("bad page_size {v}"))?
                }
                "busy_timeout" => {
                    s.busy_timeout_ms =
                        u64::try_from(int()?).map_err(|_| format!("bad busy_timeout {v}"))?
                }
                "locking_mode" => {
                    let v = v.to_ascii_lowercase();
                    if v != "normal" && v != "exclusive" {
                        return Err(format!("bad locking_mode {v:?}"));
                    }
                    s.locking_mode = v;
                }
                "cache" => match v.as_str() {
                    "shared" => s.shared_cache = true,
                    "private" => s.shared_cache = false,
                    _ => return Err(format!("cache must be shared or private, not {v:?}")),
                },
                "vfs" => match v.as_str() {
                    "memdb" => s.memdb = true,
                    "unix" => s.memdb = false,
                    _ => return Err(format!("vfs must be memdb or unix, not {v:?}")),
                },
                _ => return Err(format!("unknown SQLite option {k:?}")),
            }
        }
        if s.journal_mode == "memory" && !s.memdb {
            // A journal in memory on a file database is not crash-safe.
            return Err("journal mode memory only with vfs=memdb".into());
        }
        if s.journal_mode == "wal" && s.memdb {
            return Err("memdb has no WAL (it needs shared memory): use memory or delete".into());
        }
        Ok(s)
    }
}

fn run_pragma(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    // Some pragmas answer with a row; step through it.
    let mut st = conn.prepare(sql)?;
    let mut rows = st.query([])?;
    while rows.next()?.is_some() {}
    Ok(())
}

/// Open a connection through the counting VFS with every pragma set.
fn connect(path: &Path, spec: &SqliteSpec, new_db: bool) -> Result<Connection, BenchError> {
    vfs::register().map_err(BenchError::Msg)?;
    let cache = if spec.shared_cache {
        OpenFlags::SQLITE_OPEN_SHARED_CACHE
    } else {
        OpenFlags::SQLITE_OPEN_PRIVATE_CACHE
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI
        | cache;
    let conn = if spec.memdb {
        // A name starting with '/' is shared by the connections of the
        // process; the run directory's path keeps runs apart.
        Connection::open_with_flags(format!("file:{}?vfs=memdb", path.display()), flags)?
    } else {
        Connection::open_with_flags_and_vfs(path, flags, vfs::VFS_NAME)?
    };
    conn.busy_timeout(Duration::from_millis(spec.busy_timeout_ms))?;
    if new_db {
        run_pragma(&conn, &format!("PRAGMA page_size={}", spec.page_size))?;
    }
    run_pragma(&conn, &format!("PRAGMA journal_mode={}", spec.journal_mode))?;
    run_pragma(&conn, &format!("PRAGMA synchronous={}", spec.synchronous))?;
    run_pragma(&conn, &format!("PRAGMA cache_size={}", spec.cache_size))?;
    run_pragma(&conn, &format!("PRAGMA locking_mode={}", spec.locking_mode))?;
    run_pragma(
        &conn,
        &format!("PRAGMA journal_size_limit={}", spec.journal_size_limit),
    )?;
    run_pragma(
        &conn,
        &format!("PRAGMA wal_autocheckpoint={}", spec.wal_autocheckpoint),
    )?;
    Ok(conn)
}

fn read_back(conn: &Connection, spec: &SqliteSpec) -> Result<Vec<(String, String)>, BenchError> {
    let mut out = Vec::new();
    for name in [
        "page_size",
        "journal_mode",
        "synchronous",
        "cache_size",
        "locking_mode",
        "journal_size_limit",
        "wal_autocheckpoint",
        "busy_timeout",
    ] {
        let v: rusqlite::types::Value =
            conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))?;
        let v = match v {
            rusqlite::types::Value::Integer(i) if name == "synchronous" => {
                ["off", "normal", "full", "extra"]
                    .get(i as usize)
                    .map(|s| s.to_string())
                    .unwrap_or(i.to_string())
            }
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        };
        out.push((name.to_string(), v));
    }
    if out[1].1 != spec.journal_mode {
        return Err(BenchError::Msg(format!(
            "SQLite refused journal_mode={} (it reports {})",
            spec.journal_mode, out[1].1
        )));
    }
    out.push((
        "cache".into(),
        if spec.shared_cache {
            "shared"
        } else {
            "private"
        }
        .into(),
    ));
    out.push((
        "vfs".into(),
        if spec.memdb {
            "memdb (in memory, I/O not counted)".into()
        } else {
            format!(
                "{} over unix; xSync = {}",
                vfs::VFS_NAME,
                if vfs::SYNC_IS_FDATASYNC {
                    "fdatasync"
                } else {
                    "fsync"
                }
            )
        },
    ));
    out.push(("sqlite_version".into(), rusqlite::version().to_string()));
    Ok(out)
}

fn create_sql(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY, Value TEXT NOT NULL, creation_date TEXT)"
    )
}

/// The statements per table: insert, update, delete, select, scan.
fn statements(tables: &[String]) -> Vec<[String; 5]> {
    tables
        .iter()
        .map(|t| {
            [
                format!("INSERT INTO {t} (id, Value, creation_date) VALUES (?1, ?2, ?3)"),
                format!("UPDATE {t} SET Value = ?2, creation_date = ?3 WHERE id = ?1"),
                format!("DELETE FROM {t} WHERE id = ?1"),
                format!("SELECT Value, creation_date FROM {t} WHERE id = ?1"),
                format!(
                    "SELECT id, Value, creation_date FROM {t} WHERE id >= ?1 ORDER BY id LIMIT ?2"
                ),
            ]
        })
        .collect()
}

pub(super) struct SqliteEngine {
    path: PathBuf,
    spec: SqliteSpec,
    // Keeps the database open for the whole run (a WAL survives until the
    // last connection closes); a Mutex because Connection is not Sync.
    main: Mutex<Option<Connection>>,
    settings: Vec<(String, String)>,
}

impl SqliteEngine {
    pub(super) fn open(dir: &Path, spec: SqliteSpec) -> Result<Self, BenchError> {
        let path = dir.join(DB_FILE);
        let conn = connect(&path, &spec, true)?;
        let settings = read_back(&conn, &spec)?;
        Ok(SqliteEngine {
            path,
            spec,
            main: Mutex::new(Some(conn)),
            settings,
        })
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked)
    )
}

/// SQLITE_BUSY_SNAPSHOT: a WAL read transaction cannot become a writer
/// because another connection committed since it began (a conflict, not a
/// lock wait); other busy/locked codes are lock waits that timed out.
fn classify(e: rusqlite::Error) -> TxnError {
    let snapshot = matches!(&e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == ffi_busy_snapshot());
    if snapshot {
        TxnError::Conflict(e.to_string())
    } else if is_busy(&e) {
        TxnError::Busy(e.to_string())
    } else {
        TxnError::Fatal(e.into())
    }
}

fn ffi_busy_snapshot() -> std::ffi::c_int {
    rusqlite::ffi::SQLITE_BUSY_SNAPSHOT
}

impl Engine for SqliteEngine {
    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn load(&self, w: &Workload) -> Result<(), BenchError> {
        let guard = self.main.lock();
        let conn = guard
            .as_ref()
            .ok_or_else(|| BenchError::Msg("SQLite connection closed".into()))?;
        let tx = conn.unchecked_transaction()?;
        let sql = statements(&w.tables);
        for t in &w.tables {
            tx.execute(&create_sql(t), [])?;
        }
        for op in &w.prefill {
            tx.prepare_cached(&sql[op.table as usize][0])?
                .execute(params![op.key, op.value(), op.date()])?;
        }
        tx.commit()?;
        Ok(())
    }

    fn worker(&self, w: &Workload) -> Result<Box<dyn Worker + '_>, BenchError> {
        let conn = connect(&self.path, &self.spec, false)?;
        Ok(Box::new(SqliteWorker {
            conn,
            sql: statements(&w.tables),
        }))
    }

    fn io(&self) -> IoSnapshot {
        vfs::snapshot()
    }

    fn visit(&self, w: &Workload, f: &mut RowVisitor<'_>) -> Result<bool, BenchError> {
        let guard = self.main.lock();
        let conn = guard
            .as_ref()
            .ok_or_else(|| BenchError::Msg("SQLite connection closed".into()))?;
        let mut payload = Vec::new();
        for (i, t) in w.tables.iter().enumerate() {
            let mut st = conn.prepare(&format!(
                "SELECT id, Value, creation_date FROM {t} ORDER BY id"
            ))?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                payload.clear();
                payload.extend_from_slice(r.get_ref(1)?.as_bytes().unwrap_or(&[]));
                payload.extend_from_slice(r.get_ref(2)?.as_bytes().unwrap_or(&[]));
                f(i as u32, r.get(0)?, &payload)?;
            }
        }
        Ok(true)
    }

    fn integrity(&self) -> Result<Option<String>, BenchError> {
        let guard = self.main.lock();
        let conn = guard
            .as_ref()
            .ok_or_else(|| BenchError::Msg("SQLite connection closed".into()))?;
        let mut st = conn.prepare("PRAGMA integrity_check")?;
        let lines: Vec<String> = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(Some(lines.join("; ")))
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        if let Some(c) = self.main.lock().take() {
            c.close().map_err(|(_, e)| e)?;
        }
        Ok(())
    }
}

struct SqliteWorker {
    conn: Connection,
    sql: Vec<[String; 5]>,
}

impl SqliteWorker {
    /// Run one statement; false if its row was not there.
    fn exec(&self, op: &Op) -> Result<bool, TxnError> {
        let sql = &self.sql[op.table as usize];
        let changed = match op.action {
            Action::Insert => self
                .conn
                .prepare_cached(&sql[0])
                .and_then(|mut s| s.execute(params![op.key, op.value(), op.date()])),
            Action::Update => self
                .conn
                .prepare_cached(&sql[1])
                .and_then(|mut s| s.execute(params![op.key, op.value(), op.date()])),
            Action::Delete => self
                .conn
                .prepare_cached(&sql[2])
                .and_then(|mut s| s.execute(params![op.key])),
            Action::Select => self.conn.prepare_cached(&sql[3]).and_then(|mut s| {
                s.query_row(params![op.key], |r| {
                    let v: String = r.get(0)?;
                    Ok(usize::from(!v.is_empty()))
                })
            }),
            // Columns read in place: the fastest a SQLite caller can scan.
            Action::Scan => self.conn.prepare_cached(&sql[4]).and_then(|mut s| {
                let mut rows = s.query(params![op.key, SCAN_ROWS as i64])?;
                let (mut first, mut bytes) = (None, 0usize);
                while let Some(r) = rows.next()? {
                    first.get_or_insert(r.get::<_, i64>(0)?);
                    bytes += r.get_ref(1)?.as_bytes().map_or(0, <[u8]>::len);
                    bytes += r.get_ref(2)?.as_bytes().map_or(0, <[u8]>::len);
                }
                Ok(usize::from(first == Some(op.key) && bytes > 0))
            }),
        };
        match changed {
            Ok(1) => Ok(true),
            Ok(_) | Err(rusqlite::Error::QueryReturnedNoRows) => Ok(false),
            Err(e) => Err(classify(e)),
        }
    }
}

impl Worker for SqliteWorker {
    fn run(&mut self, txn: &Txn) -> Result<u32, TxnError> {
        if let [op] = txn.ops.as_slice() {
            // Auto-commit, as Mobibench runs a single statement (an UPDATE,
            // DELETE or INSERT takes the write lock when it starts, as
            // BEGIN IMMEDIATE does).
            return Ok(u32::from(!self.exec(op)?));
        }
        // IMMEDIATE takes the write lock up front, as twinpage's
        // begin_write does, so two writers cannot deadlock on an upgrade.
        let begin = if txn.writes() {
            "BEGIN IMMEDIATE"
        } else {
            "BEGIN"
        };
        let r = (|| {
            self.conn.execute_batch(begin).map_err(classify)?;
            let mut missed = 0;
            for (j, op) in txn.ops.iter().enumerate() {
                if !self.exec(op)? {
                    missed |= 1 << j;
                }
            }
            self.conn.execute_batch("COMMIT").map_err(classify)?;
            Ok(missed)
        })();
        if r.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        r
    }
}

/// Recovery benchmark, child side: insert `rows` in one transaction and
/// get killed during COMMIT (see [`vfs::arm_kill`]) or right after it.
pub(crate) fn run_crash_child(
    db_path: &Path,
    spec: &SqliteSpec,
    rows: &[Op],
) -> Result<(), BenchError> {
    let conn = connect(db_path, spec, false)?;
    let sql = statements(&[super::super::workload::table_name(0)]);
    conn.execute_batch("BEGIN IMMEDIATE")?;
    for op in rows {
        conn.prepare_cached(&sql[0][0])?
            .execute(params![op.key, op.value(), op.date()])?;
    }
    vfs::arm_kill();
    conn.execute_batch("COMMIT")?;
    vfs::kill_self(b"C")
}

/// Recovery benchmark, parent side: open (with the benchmark's pragmas)
/// and run the first query, which finds and rolls back a hot journal or
/// rebuilds the WAL index. Returns the time, the row count and the I/O.
pub(crate) fn open_recovered(
    db_path: &Path,
    spec: &SqliteSpec,
    probe: i64,
) -> Result<(Duration, u64, IoSnapshot, String), BenchError> {
    let table = super::super::workload::table_name(0);
    let before = vfs::snapshot();
    let start = Instant::now();
    let conn = connect(db_path, spec, false)?;
    let found: Option<String> = conn
        .query_row(
            &format!("SELECT Value FROM {table} WHERE id = ?1"),
            [probe],
            |r| r.get(0),
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    let elapsed = start.elapsed();
    let io = vfs::snapshot() - before;
    if found.is_none() {
        return Err(BenchError::Msg(format!(
            "SQLite: id {probe} missing after recovery"
        )));
    }
    let rows: i64 = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(BenchError::Msg(format!(
            "SQLite integrity_check after recovery: {check}"
        )));
    }
    conn.close().map_err(|(_, e)| e)?;
    Ok((elapsed, rows as u64, io, String::new()))
}
