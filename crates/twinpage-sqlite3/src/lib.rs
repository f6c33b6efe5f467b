//! `libsqlite3.so` with twinpage underneath: SQLite's standard C API
//! (`sqlite3_open`, `sqlite3_prepare_v2`, ...), built from the same
//! amalgamation as twinpage-sql, with SQLite's B-tree and pager replaced
//! by twinpage. An unchanged program that links SQLite dynamically (Python's
//! `sqlite3` module, the `sqlite3` shell) runs on twinpage files through
//! `LD_LIBRARY_PATH`; see docs/SQL.md and tests/python.rs.

// The Rust half of the B-tree (twinpage_bt_*), which the C code calls.
pub use twinpage_sql;
