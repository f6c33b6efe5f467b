//! twinpage-sql: SQLite's SQL engine (its parser, planner and VDBE, from the
//! amalgamation of the pinned `libsqlite3-sys`) over twinpage storage.
//!
//! The build script cuts SQLite's B-tree and pager out of the amalgamation
//! and puts csrc/tp_btree.c in their place: SQLite's `btree.h` interface
//! implemented over twinpage ([`shim`] is its Rust half). This crate links
//! that SQLite with every symbol prefixed (`tp_sqlite3_open`...), so a
//! program can also link stock SQLite (rusqlite); the C library with the
//! standard names is the `twinpage-sqlite3` crate. [`Connection`] is a
//! small rusqlite-like API. See docs/SQL.md.

mod api;
mod ffi;
pub mod shim;

pub use api::{Connection, Error, Result, Row, Rows, Statement, Value};
pub use shim::set_file_system;
