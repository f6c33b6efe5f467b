//! The engines under test: twinpage in every mode, SQLite through rusqlite
//! (with a counting VFS), and the physical floor.
//!
//! An engine is named on the command line as
//! `twinpage:MODE[,option=value...]` (`vfs=memory`: an in-process file
//! system), `sqlite:JOURNAL_MODE[,pragma=value...]` (`vfs=memdb`: SQLite's
//! in-memory VFS),
//! `redb[,durability=immediate|none]`, `lmdb[,sync=on|off]` or
//! `floor[,page_size=N][,pages=N]`; see [`EngineSpec`].

mod floor;
mod lmdb;
mod redb;
mod sqlite;
mod twinpage;
pub mod vfs;

pub use sqlite::SqliteSpec;

use super::workload::{Txn, Workload};
use super::BenchError;
use ::twinpage::storage::{IoSnapshot, MemVfs};
use ::twinpage::{JournalMode, Options};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

/// What kind of engine, with its settings.
#[derive(Debug, Clone)]
pub enum EngineKind {
    /// twinpage with these options.
    Twinpage(Options),
    /// SQLite.
    Sqlite(SqliteSpec),
    /// redb; `durable`: one fsync per commit (its default), else
    /// `Durability::None`.
    Redb {
        /// Immediate durability.
        durable: bool,
    },
    /// LMDB through heed; `sync`: fdatasync per commit (its default),
    /// else `MDB_NOSYNC`.
    Lmdb {
        /// Sync at commit.
        sync: bool,
    },
    /// One in-place page write plus fdatasync per transaction.
    Floor {
        /// Bytes per write.
        page_size: usize,
        /// Pages in the file the writes land in (default 160).
        pages: u64,
    },
}

/// An engine as named on the command line.
#[derive(Debug, Clone)]
pub struct EngineSpec {
    /// The `--engine` string exactly as given.
    pub label: String,
    /// What it selects.
    pub kind: EngineKind,
}

impl EngineSpec {
    /// twinpage's concurrency protocol (`None` for the other engines).
    pub fn protocol(&self) -> Option<::twinpage::cc::Protocol> {
        match &self.kind {
            EngineKind::Twinpage(o) => Some(o.protocol()),
            _ => None,
        }
    }
}

impl FromStr for EngineSpec {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, BenchError> {
        let bad = |why: String| BenchError::Msg(format!("--engine {s:?}: {why}"));
        let (head, rest) = match s.split_once(':') {
            Some((h, r)) => (h, r),
            None => match s.split_once(',') {
                Some((h, r)) => (h, r),
                None => (s, ""),
            },
        };
        let mut parts = rest.split(',').filter(|p| !p.is_empty());
        let pairs =
            |it: &mut dyn Iterator<Item = &str>| -> Result<Vec<(String, String)>, BenchError> {
                it.map(|p| {
                    p.split_once('=')
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                        .ok_or_else(|| bad(format!("expected option=value, got {p:?}")))
                })
                .collect()
            };
        let kind = match head {
            "twinpage" => {
                let mode = parts
                    .next()
                    .ok_or_else(|| bad("missing mode, e.g. twinpage:persist".into()))?;
                let mut opts = Options::default()
                    .journal_mode(JournalMode::from_str(mode).map_err(|e| bad(e.to_string()))?);
                for (k, v) in pairs(&mut parts)? {
                    match (k.as_str(), v.as_str()) {
                        // In memory: a marker here, a fresh file system per
                        // run at `open`.
                        ("vfs", "memory") => opts = opts.vfs(Arc::new(MemVfs::new())),
                        ("vfs", "os") => opts.vfs = None,
                        ("vfs", _) => {
                            return Err(bad(format!("vfs must be memory or os, not {v:?}")))
                        }
                        _ => opts.set(&k, &v).map_err(|e| bad(e.to_string()))?,
                    }
                }
                EngineKind::Twinpage(opts)
            }
            "sqlite" => {
                let mode = parts
                    .next()
                    .ok_or_else(|| bad("missing journal mode, e.g. sqlite:wal".into()))?;
                let spec = SqliteSpec::new(mode, &pairs(&mut parts)?).map_err(bad)?;
                EngineKind::Sqlite(spec)
            }
            // The peers have one switch each: on (their durable default) or off.
            "redb" => EngineKind::Redb {
                durable: switch(&pairs(&mut parts)?, "durability", "immediate", "none")
                    .map_err(bad)?,
            },
            "lmdb" => EngineKind::Lmdb {
                sync: switch(&pairs(&mut parts)?, "sync", "on", "off").map_err(bad)?,
            },
            "floor" => {
                let mut page_size = 4096;
                let mut pages = floor::PAGES;
                for (k, v) in pairs(&mut parts)? {
                    match k.as_str() {
                        "page_size" => {
                            page_size = v
                                .parse()
                                .ok()
                                .filter(|n| *n >= 512)
                                .ok_or_else(|| bad(format!("bad page_size {v:?}")))?
                        }
                        "pages" => {
                            pages = v
                                .parse()
                                .ok()
                                .filter(|n| *n >= 1)
                                .ok_or_else(|| bad(format!("bad pages {v:?}")))?
                        }
                        _ => return Err(bad(format!("unknown floor option {k:?}"))),
                    }
                }
                EngineKind::Floor { page_size, pages }
            }
            _ => {
                return Err(bad(
                    "engine must start with twinpage:, sqlite:, redb, lmdb or floor".into(),
                ))
            }
        };
        Ok(EngineSpec {
            label: s.to_string(),
            kind,
        })
    }
}

/// The value of an engine's single on/off option `key` (spelled `on` or
/// `off`); true when absent. Any other option is an error.
fn switch(pairs: &[(String, String)], key: &str, on: &str, off: &str) -> Result<bool, String> {
    let mut value = true;
    for (k, v) in pairs {
        value = match (k == key, v.as_str()) {
            (true, v) if v == on => true,
            (true, v) if v == off => false,
            _ => return Err(format!("unknown option {k}={v} (only {key}={on}|{off})")),
        };
    }
    Ok(value)
}

/// Every implemented twinpage mode and SQLite's five journal modes at
/// synchronous=full, then the floor: the default engine list.
pub fn default_engines() -> Vec<String> {
    let mut v: Vec<String> = JournalMode::ALL
        .iter()
        .map(|m| format!("twinpage:{}", m.name()))
        .collect();
    for m in ["delete", "truncate", "persist", "wal", "off"] {
        v.push(format!("sqlite:{m}"));
    }
    v.push("floor".into());
    v
}

/// A transaction failed.
#[derive(Debug)]
pub enum TxnError {
    /// A lock could not be had (busy/locked, after the engine's own busy
    /// wait): the transaction was rolled back and may be retried.
    Busy(String),
    /// The concurrency protocol refused the transaction (a conflict: a
    /// page another transaction changed or holds): it was rolled back and
    /// may be replayed.
    Conflict(String),
    /// Anything else.
    Fatal(BenchError),
}

impl<E: Into<BenchError>> From<E> for TxnError {
    fn from(e: E) -> Self {
        TxnError::Fatal(e.into())
    }
}

/// What a row visitor receives: table index, key, payload (`Value` then
/// `creation_date`, as [`super::workload::Op::payload`]).
pub type RowVisitor<'a> = dyn FnMut(u32, i64, &[u8]) -> Result<(), BenchError> + 'a;

/// An open engine. Shared by reference between the worker threads.
pub trait Engine: Sync {
    /// Every setting in effect, as (name, value), read back where the engine
    /// allows it.
    fn settings(&self) -> Vec<(String, String)>;
    /// Create the tables and load the pre-fill rows (not measured).
    fn load(&self, w: &Workload) -> Result<(), BenchError>;
    /// A per-thread handle (SQLite: its own connection).
    fn worker(&self, w: &Workload) -> Result<Box<dyn Worker + '_>, BenchError>;
    /// Cumulative I/O counters.
    fn io(&self) -> IoSnapshot;
    /// Call `f` for every row of every table, to verify what the engine
    /// holds after the run; false for the floor, which stores no rows.
    fn visit(&self, w: &Workload, f: &mut RowVisitor<'_>) -> Result<bool, BenchError>;
    /// The engine's own integrity check, if it has one: `Some("ok")` or
    /// what it found.
    fn integrity(&self) -> Result<Option<String>, BenchError> {
        Ok(None)
    }
    /// Counters of the concurrency protocol (twinpage's `Stats::protocol`:
    /// aborts, the most aborts of one transaction, forced sleep, ...).
    fn protocol_counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Close cleanly.
    fn close(self: Box<Self>) -> Result<(), BenchError>;
}

/// The message for an operation that did not find the row the workload
/// expects (fatal unless the workload says rows may be missing).
pub fn mismatch(engine: &str, op: &super::workload::Op) -> String {
    format!(
        "{engine}: {:?} of key {} in table {} did not find the row the workload expects",
        op.action, op.key, op.table
    )
}

/// Runs transactions on one thread.
pub trait Worker {
    /// Execute one transaction and commit it. Returns the operations that
    /// missed their row (bit `i` for operation `i`: an update, delete or
    /// read of a row that is not there, which then changed nothing); on a
    /// [`TxnError::Busy`] or [`TxnError::Conflict`] it has been rolled
    /// back.
    fn run(&mut self, txn: &Txn) -> Result<u32, TxnError>;
}

/// Open `spec` with a fresh database in `dir` (which must exist).
pub fn open(spec: &EngineSpec, dir: &Path) -> Result<Box<dyn Engine>, BenchError> {
    Ok(match &spec.kind {
        EngineKind::Twinpage(opts) => {
            let mut opts = opts.clone();
            if opts.vfs.is_some() {
                // Only `vfs=memory` sets one: every run starts empty.
                opts = opts.vfs(Arc::new(MemVfs::new()));
            }
            Box::new(twinpage::TwinpageEngine::open(dir, opts)?)
        }
        EngineKind::Sqlite(s) => Box::new(sqlite::SqliteEngine::open(dir, s.clone())?),
        EngineKind::Redb { durable } => Box::new(redb::RedbEngine::open(dir, *durable)?),
        EngineKind::Lmdb { sync } => Box::new(lmdb::LmdbEngine::open(dir, *sync)?),
        EngineKind::Floor { page_size, pages } => {
            Box::new(floor::FloorEngine::open(dir, *page_size, *pages)?)
        }
    })
}

/// The main database file name an engine uses in its directory.
pub const DB_FILE: &str = "bench.db";

pub(crate) use self::twinpage::{
    open_recovered as twinpage_open_recovered, run_crash_child as twinpage_crash_child,
};
pub(crate) use sqlite::{
    open_recovered as sqlite_open_recovered, run_crash_child as sqlite_crash_child,
};
