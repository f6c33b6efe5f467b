//! The prefixed SQLite C API this crate links (`tp_sqlite3_*`: the build
//! script renames every symbol of its SQLite build).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// `sqlite3`.
#[repr(C)]
pub struct sqlite3 {
    _p: [u8; 0],
}

/// `sqlite3_stmt`.
#[repr(C)]
pub struct sqlite3_stmt {
    _p: [u8; 0],
}

pub const SQLITE_OK: c_int = 0;
pub const SQLITE_ROW: c_int = 100;
pub const SQLITE_DONE: c_int = 101;
pub const SQLITE_INTEGER: c_int = 1;
pub const SQLITE_FLOAT: c_int = 2;
pub const SQLITE_TEXT: c_int = 3;
pub const SQLITE_BLOB: c_int = 4;
pub const SQLITE_OPEN_READWRITE: c_int = 0x2;
pub const SQLITE_OPEN_CREATE: c_int = 0x4;
pub const SQLITE_OPEN_URI: c_int = 0x40;
pub const SQLITE_OPEN_FULLMUTEX: c_int = 0x10000;

/// `SQLITE_TRANSIENT`: SQLite copies the bound value.
pub fn transient() -> Option<unsafe extern "C" fn(*mut c_void)> {
    // SAFETY: SQLite defines SQLITE_TRANSIENT as the destructor value -1.
    Some(unsafe { std::mem::transmute::<isize, unsafe extern "C" fn(*mut c_void)>(-1) })
}

extern "C" {
    #[link_name = "tp_sqlite3_open_v2"]
    pub fn sqlite3_open_v2(
        name: *const c_char,
        db: *mut *mut sqlite3,
        flags: c_int,
        vfs: *const c_char,
    ) -> c_int;
    #[link_name = "tp_sqlite3_close_v2"]
    pub fn sqlite3_close_v2(db: *mut sqlite3) -> c_int;
    #[link_name = "tp_sqlite3_prepare_v2"]
    pub fn sqlite3_prepare_v2(
        db: *mut sqlite3,
        sql: *const c_char,
        n: c_int,
        stmt: *mut *mut sqlite3_stmt,
        tail: *mut *const c_char,
    ) -> c_int;
    #[link_name = "tp_sqlite3_step"]
    pub fn sqlite3_step(s: *mut sqlite3_stmt) -> c_int;
    #[link_name = "tp_sqlite3_reset"]
    pub fn sqlite3_reset(s: *mut sqlite3_stmt) -> c_int;
    #[link_name = "tp_sqlite3_finalize"]
    pub fn sqlite3_finalize(s: *mut sqlite3_stmt) -> c_int;
    #[link_name = "tp_sqlite3_clear_bindings"]
    pub fn sqlite3_clear_bindings(s: *mut sqlite3_stmt) -> c_int;
    #[link_name = "tp_sqlite3_column_count"]
    pub fn sqlite3_column_count(s: *mut sqlite3_stmt) -> c_int;
    #[link_name = "tp_sqlite3_column_type"]
    pub fn sqlite3_column_type(s: *mut sqlite3_stmt, i: c_int) -> c_int;
    #[link_name = "tp_sqlite3_column_int64"]
    pub fn sqlite3_column_int64(s: *mut sqlite3_stmt, i: c_int) -> i64;
    #[link_name = "tp_sqlite3_column_double"]
    pub fn sqlite3_column_double(s: *mut sqlite3_stmt, i: c_int) -> f64;
    #[link_name = "tp_sqlite3_column_text"]
    pub fn sqlite3_column_text(s: *mut sqlite3_stmt, i: c_int) -> *const u8;
    #[link_name = "tp_sqlite3_column_blob"]
    pub fn sqlite3_column_blob(s: *mut sqlite3_stmt, i: c_int) -> *const c_void;
    #[link_name = "tp_sqlite3_column_bytes"]
    pub fn sqlite3_column_bytes(s: *mut sqlite3_stmt, i: c_int) -> c_int;
    #[link_name = "tp_sqlite3_column_name"]
    pub fn sqlite3_column_name(s: *mut sqlite3_stmt, i: c_int) -> *const c_char;
    #[link_name = "tp_sqlite3_bind_null"]
    pub fn sqlite3_bind_null(s: *mut sqlite3_stmt, i: c_int) -> c_int;
    #[link_name = "tp_sqlite3_bind_int64"]
    pub fn sqlite3_bind_int64(s: *mut sqlite3_stmt, i: c_int, v: i64) -> c_int;
    #[link_name = "tp_sqlite3_bind_double"]
    pub fn sqlite3_bind_double(s: *mut sqlite3_stmt, i: c_int, v: f64) -> c_int;
    #[link_name = "tp_sqlite3_bind_text"]
    pub fn sqlite3_bind_text(
        s: *mut sqlite3_stmt,
        i: c_int,
        v: *const c_char,
        n: c_int,
        d: Option<unsafe extern "C" fn(*mut c_void)>,
    ) -> c_int;
    #[link_name = "tp_sqlite3_bind_blob"]
    pub fn sqlite3_bind_blob(
        s: *mut sqlite3_stmt,
        i: c_int,
        v: *const c_void,
        n: c_int,
        d: Option<unsafe extern "C" fn(*mut c_void)>,
    ) -> c_int;
    #[link_name = "tp_sqlite3_errmsg"]
    pub fn sqlite3_errmsg(db: *mut sqlite3) -> *const c_char;
    #[link_name = "tp_sqlite3_extended_errcode"]
    pub fn sqlite3_extended_errcode(db: *mut sqlite3) -> c_int;
    #[link_name = "tp_sqlite3_changes64"]
    pub fn sqlite3_changes64(db: *mut sqlite3) -> i64;
    #[link_name = "tp_sqlite3_last_insert_rowid"]
    pub fn sqlite3_last_insert_rowid(db: *mut sqlite3) -> i64;
    #[link_name = "tp_sqlite3_busy_timeout"]
    pub fn sqlite3_busy_timeout(db: *mut sqlite3, ms: c_int) -> c_int;
    #[link_name = "tp_sqlite3_get_autocommit"]
    pub fn sqlite3_get_autocommit(db: *mut sqlite3) -> c_int;
    #[link_name = "tp_sqlite3_libversion"]
    pub fn sqlite3_libversion() -> *const c_char;
}
