//! redb, the pure-Rust copy-on-write B-tree an app might pick instead, as a
//! peer: same keys (`encode_i64_compact`), same values, one redb table per
//! workload table. Its storage goes through a redb `StorageBackend` over
//! twinpage's `CountingVfs`, so its pwrite, pread and fdatasync calls are
//! counted exactly like twinpage's. Spec: `redb[,durability=immediate|none]`
//! (immediate, one fsync per commit, is redb's default).

use super::super::workload::{Action, Op, Txn, Workload, SCAN_ROWS};
use super::super::BenchError;
use super::{Engine, RowVisitor, TxnError, Worker, DB_FILE};
use ::twinpage::keys::{decode_i64_compact, encode_i64_compact};
use ::twinpage::storage::{CountingVfs, IoCounters, IoSnapshot, OpenFlags, OsVfs, Vfs, VfsFile};
use redb::{
    Builder, Database, Durability, ReadableDatabase, ReadableTable, StorageBackend, TableDefinition,
};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

fn io_err(e: ::twinpage::Error) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// A redb backend on a twinpage `VfsFile` (counted).
struct Counted(Arc<dyn VfsFile>);

impl fmt::Debug for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Counted")
    }
}

impl StorageBackend for Counted {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len().map_err(io_err)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let mut done = 0;
        while done < out.len() {
            let n = self
                .0
                .read_at(&mut out[done..], offset + done as u64)
                .map_err(io_err)?;
            if n == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            done += n;
        }
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len).map_err(io_err)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data().map_err(io_err)
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write_at(data, offset).map_err(io_err)
    }
}

fn err(e: impl fmt::Display) -> BenchError {
    BenchError::Msg(format!("redb: {e}"))
}

fn def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

pub(super) struct RedbEngine {
    db: Database,
    counters: Arc<IoCounters>,
    durable: bool,
}

impl RedbEngine {
    pub(super) fn open(dir: &Path, durable: bool) -> Result<Self, BenchError> {
        let vfs = CountingVfs::new(Arc::new(OsVfs::new()));
        let counters = vfs.counters().clone();
        let file = vfs
            .open(&dir.join(DB_FILE), OpenFlags::CREATE)
            .map_err(BenchError::Engine)?;
        let db = Builder::new()
            .create_with_backend(Counted(file))
            .map_err(err)?;
        Ok(RedbEngine {
            db,
            counters,
            durable,
        })
    }

    fn begin(&self) -> Result<redb::WriteTransaction, BenchError> {
        let mut t = self.db.begin_write().map_err(err)?;
        if !self.durable {
            t.set_durability(Durability::None).map_err(err)?;
        }
        Ok(t)
    }
}

impl Engine for RedbEngine {
    fn settings(&self) -> Vec<(String, String)> {
        vec![
            ("version".into(), "redb 4 (crate)".into()),
            (
                "durability".into(),
                if self.durable { "immediate" } else { "none" }.into(),
            ),
            ("page_size".into(), "4096 (redb's)".into()),
            ("cache".into(), "redb default".into()),
            (
                "storage".into(),
                "StorageBackend over twinpage's CountingVfs (pwrite/pread/fdatasync counted)"
                    .into(),
            ),
        ]
    }

    fn load(&self, w: &Workload) -> Result<(), BenchError> {
        let t = self.begin()?;
        {
            for name in &w.tables {
                t.open_table(def(name)).map_err(err)?;
            }
            for op in &w.prefill {
                let mut table = t
                    .open_table(def(&w.tables[op.table as usize]))
                    .map_err(err)?;
                table
                    .insert(encode_i64_compact(op.key).as_slice(), op.payload.as_slice())
                    .map_err(err)?;
            }
        }
        t.commit().map_err(err)
    }

    fn worker(&self, w: &Workload) -> Result<Box<dyn Worker + '_>, BenchError> {
        Ok(Box::new(RedbWorker {
            e: self,
            tables: w.tables.clone(),
            may_miss: w.may_miss,
        }))
    }

    fn io(&self) -> IoSnapshot {
        self.counters.snapshot()
    }

    fn visit(&self, w: &Workload, f: &mut RowVisitor<'_>) -> Result<bool, BenchError> {
        let r = self.db.begin_read().map_err(err)?;
        for (i, name) in w.tables.iter().enumerate() {
            let t = r.open_table(def(name)).map_err(err)?;
            for kv in t.iter().map_err(err)? {
                let (k, v) = kv.map_err(err)?;
                let key = decode_i64_compact(k.value())
                    .ok_or_else(|| err(format!("table {name} holds key {:02x?}", k.value())))?;
                f(i as u32, key, v.value())?;
            }
        }
        Ok(true)
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        drop(self.db);
        Ok(())
    }
}

struct RedbWorker<'a> {
    e: &'a RedbEngine,
    tables: Vec<String>,
    /// Rows may be missing: an update checks that its row is there.
    may_miss: bool,
}

impl Worker for RedbWorker<'_> {
    fn run(&mut self, txn: &Txn) -> Result<u32, TxnError> {
        let mut missed = 0;
        if !txn.writes() {
            let r = self.e.db.begin_read().map_err(err)?;
            for (j, op) in txn.ops.iter().enumerate() {
                let t = r
                    .open_table(def(&self.tables[op.table as usize]))
                    .map_err(err)?;
                let found = if op.action == Action::Scan {
                    scan(&t, op)?
                } else {
                    t.get(encode_i64_compact(op.key).as_slice())
                        .map_err(err)?
                        .is_some()
                };
                if !found {
                    missed |= 1 << j;
                }
            }
            return Ok(missed);
        }
        let t = self.e.begin()?;
        for (j, op) in txn.ops.iter().enumerate() {
            let mut table = t
                .open_table(def(&self.tables[op.table as usize]))
                .map_err(err)?;
            let k = encode_i64_compact(op.key);
            let found = match op.action {
                Action::Update
                    if self.may_miss && table.get(k.as_slice()).map_err(err)?.is_none() =>
                {
                    false
                }
                Action::Insert | Action::Update => {
                    table
                        .insert(k.as_slice(), op.payload.as_slice())
                        .map_err(err)?;
                    true
                }
                Action::Delete => table.remove(k.as_slice()).map_err(err)?.is_some(),
                Action::Select => table.get(k.as_slice()).map_err(err)?.is_some(),
                Action::Scan => scan(&table, op)?,
            };
            if !found {
                missed |= 1 << j;
            }
        }
        t.commit().map_err(err)?;
        Ok(missed)
    }
}

/// Read up to [`SCAN_ROWS`] rows from `op`'s key on; false unless the
/// first is that key.
fn scan<T: ReadableTable<&'static [u8], &'static [u8]>>(t: &T, op: &Op) -> Result<bool, TxnError> {
    let k = encode_i64_compact(op.key);
    let (mut first, mut bytes) = (None, 0usize);
    for kv in t
        .range::<&[u8]>(k.as_slice()..)
        .map_err(err)?
        .take(SCAN_ROWS)
    {
        let (key, value) = kv.map_err(err)?;
        first.get_or_insert_with(|| key.value() == k.as_slice());
        bytes += value.value().len();
    }
    Ok(first == Some(true) && bytes > 0)
}
