//! twinpage: an embedded, single-file, crash-safe transactional storage
//! engine with pluggable recovery schemes.
//!
//! Layers, bottom to top (see ARCHITECTURE.md; `tests/layers.rs` checks
//! that no module imports from a layer above it): [`base`] (errors, ids,
//! header and free-list formats) → [`storage`] (file I/O, counting,
//! read-only) → [`node`] (on-page node formats) → [`page`] (the tree's page
//! contract) → [`btree`] (B+tree algorithms, integrity walk) → [`cc`]
//! (concurrency control) → [`journal`] (recovery schemes and the mode
//! registry) → [`pager`] (page cache, transactions) → [`Db`] (the API).
//! Tools, the simulated crash file system, SQL and bindings are crates of
//! their own.
//!
//! ```no_run
//! use twinpage::{Db, Options, JournalMode};
//! let db = Db::open("app.db", Options::default().journal_mode(JournalMode::Persist))?;
//! db.create_table("users")?;
//! db.put("users", b"alice", b"{...}")?;
//! let mut txn = db.begin_write()?;
//! txn.put("users", b"bob", b"{...}")?;
//! txn.delete("users", b"alice")?;
//! txn.commit()?;
//! assert!(db.get("users", b"alice")?.is_none());
//! db.close()?;
//! # Ok::<(), twinpage::Error>(())
//! ```

pub mod base;
pub mod btree;
pub mod cc;
mod db;
pub mod journal;
pub mod keys;
pub mod node;
pub mod page;
pub mod pager;
pub mod storage;

pub use base::{error, Durability, Error, Pgno, Result, Synchronous};
pub use base::{Bytewise, KeyOrder, KeyOrders};
pub use btree::walk as check;
pub use btree::Cursor;
pub use db::{Db, Direction, Options, ReadTxn, SavepointId, Stats, Table, TableId, WriteTxn};
pub use journal::JournalMode;
pub use storage::{IoSnapshot, Vfs};
