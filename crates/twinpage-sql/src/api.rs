//! A small rusqlite-like API over this crate's SQLite: open, execute,
//! prepare, query rows.

use crate::ffi;
use std::ffi::{c_char, c_int, CStr, CString};
use std::fmt;
use std::path::Path;

/// A SQL value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// NULL.
    Null,
    /// INTEGER.
    Integer(i64),
    /// REAL.
    Real(f64),
    /// TEXT.
    Text(String),
    /// BLOB.
    Blob(Vec<u8>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Integer(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Integer(v.into())
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Real(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Blob(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// An SQLite error: its (extended) result code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Extended result code (`SQLITE_BUSY` = 5, `SQLITE_CONSTRAINT` = 19...).
    pub code: i32,
    /// The message SQLite gave.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The primary result code (the low byte).
    pub fn primary(&self) -> i32 {
        self.code & 0xff
    }

    /// `SQLITE_BUSY` or `SQLITE_LOCKED`: retry later.
    pub fn is_busy(&self) -> bool {
        matches!(self.primary(), 5 | 6)
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// A connection to a twinpage database through SQLite's SQL engine.
pub struct Connection {
    db: *mut ffi::sqlite3,
}

// SAFETY: the SQLite build is threadsafe=1 (serialized): a connection may
// move between threads.
unsafe impl Send for Connection {}

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error {
        code: 21,
        message: "string contains a NUL byte".into(),
    })
}

impl Connection {
    /// Open (or create) the database at `path`. URI file names
    /// (`file:app.db?journal_mode=dhl-cc&synchronous=normal`) are accepted;
    /// an existing file keeps its journal mode.
    pub fn open(path: impl AsRef<Path>) -> Result<Connection> {
        let p = path.as_ref().to_string_lossy().into_owned();
        Self::open_with_flags(&p, ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE)
    }

    /// An in-memory database.
    pub fn open_in_memory() -> Result<Connection> {
        Self::open(":memory:")
    }

    fn open_with_flags(path: &str, flags: c_int) -> Result<Connection> {
        let name = cstr(path)?;
        let mut db = std::ptr::null_mut();
        let flags = flags | ffi::SQLITE_OPEN_URI | ffi::SQLITE_OPEN_FULLMUTEX;
        // SAFETY: valid name and out pointer.
        let rc = unsafe { ffi::sqlite3_open_v2(name.as_ptr(), &mut db, flags, std::ptr::null()) };
        let c = Connection { db };
        if rc != ffi::SQLITE_OK {
            let e = if db.is_null() {
                Error {
                    code: rc,
                    message: "cannot open".into(),
                }
            } else {
                c.error(rc)
            };
            return Err(e);
        }
        // SAFETY: open connection.
        unsafe { ffi::sqlite3_busy_timeout(db, 5000) };
        Ok(c)
    }

    fn error(&self, rc: c_int) -> Error {
        // SAFETY: the connection is open; errmsg returns a valid string.
        let (code, message) = unsafe {
            let code = ffi::sqlite3_extended_errcode(self.db);
            let m = ffi::sqlite3_errmsg(self.db);
            let msg = if m.is_null() {
                String::new()
            } else {
                CStr::from_ptr(m).to_string_lossy().into_owned()
            };
            (code, msg)
        };
        Error {
            code: if code == 0 { rc } else { code },
            message,
        }
    }

    /// Set how long a statement waits for a lock (SQLite's busy timeout).
    pub fn busy_timeout(&self, ms: i32) {
        // SAFETY: open connection.
        unsafe { ffi::sqlite3_busy_timeout(self.db, ms) };
    }

    /// Run one statement with parameters; returns the rows it changed.
    pub fn execute(&self, sql: &str, params: &[Value]) -> Result<usize> {
        let mut s = self.prepare(sql)?;
        s.bind(params)?;
        while s.step()? {}
        // SAFETY: open connection.
        Ok(unsafe { ffi::sqlite3_changes64(self.db) } as usize)
    }

    /// Run every statement of `sql` (no parameters), discarding rows.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        let text = cstr(sql)?;
        let mut tail: *const c_char = text.as_ptr();
        loop {
            // SAFETY: tail points into `text`, NUL-terminated.
            if unsafe { *tail } == 0 {
                return Ok(());
            }
            let mut stmt = std::ptr::null_mut();
            let mut next: *const c_char = std::ptr::null();
            // SAFETY: valid pointers.
            let rc = unsafe { ffi::sqlite3_prepare_v2(self.db, tail, -1, &mut stmt, &mut next) };
            if rc != ffi::SQLITE_OK {
                return Err(self.error(rc));
            }
            if stmt.is_null() {
                return Ok(()); // only comments or white space left
            }
            let mut s = Statement { conn: self, stmt };
            while s.step()? {}
            drop(s);
            tail = next;
        }
    }

    /// Compile one statement (more than one is an error, as in rusqlite:
    /// use [`Connection::execute_batch`]).
    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        let text = cstr(sql)?;
        let mut stmt = std::ptr::null_mut();
        let mut tail: *const c_char = std::ptr::null();
        // SAFETY: valid pointers.
        let rc =
            unsafe { ffi::sqlite3_prepare_v2(self.db, text.as_ptr(), -1, &mut stmt, &mut tail) };
        if rc != ffi::SQLITE_OK {
            return Err(self.error(rc));
        }
        // SAFETY: tail points into `text`, NUL-terminated.
        let rest = unsafe { CStr::from_ptr(tail) }.to_bytes();
        if rest.iter().any(|b| !b.is_ascii_whitespace() && *b != b';') {
            // SAFETY: stmt (possibly null) came from prepare.
            unsafe { ffi::sqlite3_finalize(stmt) };
            return Err(Error {
                code: 1,
                message: "Multiple statements provided".into(),
            });
        }
        if stmt.is_null() {
            return Err(Error {
                code: 21,
                message: "empty statement".into(),
            });
        }
        Ok(Statement { conn: self, stmt })
    }

    /// Run a query and collect every row.
    pub fn query(&self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>> {
        let mut s = self.prepare(sql)?;
        let mut rows = s.query(params)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(r.values());
        }
        Ok(out)
    }

    /// The first row of a query, mapped by `f`.
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: &[Value],
        f: impl FnOnce(&Row<'_, '_>) -> T,
    ) -> Result<T> {
        let mut s = self.prepare(sql)?;
        let mut rows = s.query(params)?;
        match rows.next()? {
            Some(r) => Ok(f(&r)),
            None => Err(Error {
                code: 12,
                message: "query returned no rows".into(),
            }),
        }
    }

    /// The rowid of the last insert.
    pub fn last_insert_rowid(&self) -> i64 {
        // SAFETY: open connection.
        unsafe { ffi::sqlite3_last_insert_rowid(self.db) }
    }

    /// True outside an explicit transaction.
    pub fn is_autocommit(&self) -> bool {
        // SAFETY: open connection.
        unsafe { ffi::sqlite3_get_autocommit(self.db) != 0 }
    }

    /// SQLite's version string.
    pub fn sqlite_version() -> String {
        // SAFETY: a static string.
        unsafe { CStr::from_ptr(ffi::sqlite3_libversion()) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: the connection is open; close_v2 defers while statements live.
        unsafe { ffi::sqlite3_close_v2(self.db) };
    }
}

/// A compiled statement.
pub struct Statement<'c> {
    conn: &'c Connection,
    stmt: *mut ffi::sqlite3_stmt,
}

impl<'c> Statement<'c> {
    fn bind(&mut self, params: &[Value]) -> Result<()> {
        // SAFETY: live statement.
        unsafe {
            ffi::sqlite3_reset(self.stmt);
            ffi::sqlite3_clear_bindings(self.stmt);
        }
        for (i, v) in params.iter().enumerate() {
            let i = i as c_int + 1;
            // SAFETY: live statement; SQLite copies text and blobs (TRANSIENT).
            let rc = unsafe {
                match v {
                    Value::Null => ffi::sqlite3_bind_null(self.stmt, i),
                    Value::Integer(x) => ffi::sqlite3_bind_int64(self.stmt, i, *x),
                    Value::Real(x) => ffi::sqlite3_bind_double(self.stmt, i, *x),
                    Value::Text(s) => ffi::sqlite3_bind_text(
                        self.stmt,
                        i,
                        s.as_ptr().cast(),
                        s.len() as c_int,
                        ffi::transient(),
                    ),
                    Value::Blob(b) => ffi::sqlite3_bind_blob(
                        self.stmt,
                        i,
                        b.as_ptr().cast(),
                        b.len() as c_int,
                        ffi::transient(),
                    ),
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(self.conn.error(rc));
            }
        }
        Ok(())
    }

    /// Step once: true if a row is ready.
    fn step(&mut self) -> Result<bool> {
        // SAFETY: live statement.
        match unsafe { ffi::sqlite3_step(self.stmt) } {
            ffi::SQLITE_ROW => Ok(true),
            ffi::SQLITE_DONE => Ok(false),
            rc => {
                // SAFETY: live statement; reset makes the error sticky-free.
                unsafe { ffi::sqlite3_reset(self.stmt) };
                Err(self.conn.error(rc))
            }
        }
    }

    /// Run with `params`; iterate the rows.
    pub fn query(&mut self, params: &[Value]) -> Result<Rows<'_, 'c>> {
        self.bind(params)?;
        Ok(Rows { stmt: self })
    }

    /// Run with `params` to completion; returns the rows changed.
    pub fn execute(&mut self, params: &[Value]) -> Result<usize> {
        self.bind(params)?;
        while self.step()? {}
        // SAFETY: open connection.
        Ok(unsafe { ffi::sqlite3_changes64(self.conn.db) } as usize)
    }

    /// Number of result columns.
    pub fn column_count(&self) -> usize {
        // SAFETY: live statement.
        unsafe { ffi::sqlite3_column_count(self.stmt) as usize }
    }

    /// Name of result column `i`.
    pub fn column_name(&self, i: usize) -> String {
        // SAFETY: live statement; i checked by SQLite (NULL when out of range).
        let p = unsafe { ffi::sqlite3_column_name(self.stmt, i as c_int) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a valid string while the statement lives.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Drop for Statement<'_> {
    fn drop(&mut self) {
        // SAFETY: live statement, finalized once.
        unsafe { ffi::sqlite3_finalize(self.stmt) };
    }
}

/// The rows of a running query.
pub struct Rows<'s, 'c> {
    stmt: &'s mut Statement<'c>,
}

impl<'s, 'c> Rows<'s, 'c> {
    /// The next row, or `None` at the end.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Row<'_, 'c>>> {
        if self.stmt.step()? {
            Ok(Some(Row { stmt: self.stmt }))
        } else {
            Ok(None)
        }
    }
}

/// One result row.
pub struct Row<'s, 'c> {
    stmt: &'s Statement<'c>,
}

impl Row<'_, '_> {
    /// Column `i` as a [`Value`].
    pub fn get(&self, i: usize) -> Value {
        let s = self.stmt.stmt;
        let i = i as c_int;
        // SAFETY: live statement positioned on a row.
        unsafe {
            match ffi::sqlite3_column_type(s, i) {
                ffi::SQLITE_INTEGER => Value::Integer(ffi::sqlite3_column_int64(s, i)),
                ffi::SQLITE_FLOAT => Value::Real(ffi::sqlite3_column_double(s, i)),
                ffi::SQLITE_TEXT => {
                    let p = ffi::sqlite3_column_text(s, i);
                    let n = ffi::sqlite3_column_bytes(s, i) as usize;
                    let b = if p.is_null() {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(p, n)
                    };
                    Value::Text(String::from_utf8_lossy(b).into_owned())
                }
                ffi::SQLITE_BLOB => {
                    let p = ffi::sqlite3_column_blob(s, i).cast::<u8>();
                    let n = ffi::sqlite3_column_bytes(s, i) as usize;
                    let b = if p.is_null() {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(p, n)
                    };
                    Value::Blob(b.to_vec())
                }
                _ => Value::Null,
            }
        }
    }

    /// Every column.
    pub fn values(&self) -> Vec<Value> {
        (0..self.stmt.column_count()).map(|i| self.get(i)).collect()
    }
}
