//! LMDB through the heed crate, as a peer: same keys and values, one named
//! LMDB database per workload table, a 1 GiB map. Spec:
//! `lmdb[,sync=on|off]`: `on` (LMDB's default) makes every commit durable
//! with one fdatasync of the data file; `off` opens the environment with
//! `MDB_NOSYNC`. LMDB does its own I/O, so nothing can sit under it: its
//! write and read calls are counted from the process's `/proc/self/io`
//! (`syscw`, `wchar`, `syscr`, `rchar`: every thread of the benchmark
//! process, which does no other I/O while an engine runs) and fsync-class
//! calls are not counted at all; use `--ext4-image` for device counts.

use super::super::workload::{Action, Op, Txn, Workload, SCAN_ROWS};
use super::super::BenchError;
use super::{Engine, RowVisitor, TxnError, Worker};
use ::twinpage::keys::{decode_i64_compact, encode_i64_compact};
use ::twinpage::storage::IoSnapshot;
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};
use std::fmt;
use std::ops::Bound;
use std::path::Path;
use std::sync::OnceLock;

fn err(e: impl fmt::Display) -> BenchError {
    BenchError::Msg(format!("lmdb: {e}"))
}

/// `/proc/self/io` as an I/O snapshot (calls and bytes only).
fn proc_io() -> IoSnapshot {
    let mut s = IoSnapshot::default();
    if let Ok(text) = std::fs::read_to_string("/proc/self/io") {
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v: u64 = v.trim().parse().unwrap_or(0);
            match k {
                "syscw" => s.write_calls = v,
                "wchar" => s.bytes_written = v,
                "syscr" => s.read_calls = v,
                "rchar" => s.bytes_read = v,
                _ => {}
            }
        }
    }
    s
}

pub(super) struct LmdbEngine {
    env: Env,
    /// One database per workload table, created by `load`.
    dbs: OnceLock<Vec<Database<Bytes, Bytes>>>,
    sync: bool,
}

impl LmdbEngine {
    pub(super) fn open(dir: &Path, sync: bool) -> Result<Self, BenchError> {
        let mut o = EnvOpenOptions::new();
        o.map_size(1 << 30).max_dbs(64);
        if !sync {
            // SAFETY: NO_SYNC only drops the fsync at commit (durability
            // after power loss), which is what this engine variant measures.
            unsafe { o.flags(EnvFlags::NO_SYNC) };
        }
        // SAFETY: the directory is fresh and private to this engine; no
        // other process or environment maps the same file.
        let env = unsafe { o.open(dir) }.map_err(err)?;
        Ok(LmdbEngine {
            env,
            dbs: OnceLock::new(),
            sync,
        })
    }

    fn db(&self, op: &Op) -> Result<&Database<Bytes, Bytes>, BenchError> {
        self.dbs
            .get()
            .and_then(|d| d.get(op.table as usize))
            .ok_or_else(|| err("table not loaded"))
    }
}

impl Engine for LmdbEngine {
    fn settings(&self) -> Vec<(String, String)> {
        vec![
            ("version".into(), "LMDB (heed 0.22, mdb.master)".into()),
            (
                "sync".into(),
                if self.sync {
                    "on (fdatasync per commit)"
                } else {
                    "off (MDB_NOSYNC)"
                }
                .into(),
            ),
            ("map_size".into(), "1 GiB".into()),
            ("page_size".into(), "4096 (OS page)".into()),
            (
                "counted".into(),
                "/proc/self/io calls and bytes; syncs not counted".into(),
            ),
        ]
    }

    fn load(&self, w: &Workload) -> Result<(), BenchError> {
        let mut t = self.env.write_txn().map_err(err)?;
        let mut dbs = Vec::new();
        for name in &w.tables {
            let db: Database<Bytes, Bytes> =
                self.env.create_database(&mut t, Some(name)).map_err(err)?;
            dbs.push(db);
        }
        for op in &w.prefill {
            dbs[op.table as usize]
                .put(&mut t, &encode_i64_compact(op.key), &op.payload)
                .map_err(err)?;
        }
        t.commit().map_err(err)?;
        self.dbs.set(dbs).map_err(|_| err("loaded twice"))
    }

    fn worker(&self, w: &Workload) -> Result<Box<dyn Worker + '_>, BenchError> {
        Ok(Box::new(LmdbWorker {
            e: self,
            may_miss: w.may_miss,
        }))
    }

    fn io(&self) -> IoSnapshot {
        proc_io()
    }

    fn visit(&self, _w: &Workload, f: &mut RowVisitor<'_>) -> Result<bool, BenchError> {
        let r = self.env.read_txn().map_err(err)?;
        for (i, db) in self.dbs.get().into_iter().flatten().enumerate() {
            for kv in db.iter(&r).map_err(err)? {
                let (k, v) = kv.map_err(err)?;
                let key = decode_i64_compact(k)
                    .ok_or_else(|| err(format!("table {i} holds key {k:02x?}")))?;
                f(i as u32, key, v)?;
            }
        }
        Ok(true)
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        self.env.force_sync().map_err(err)?;
        Ok(())
    }
}

struct LmdbWorker<'a> {
    e: &'a LmdbEngine,
    /// Rows may be missing: an update checks that its row is there.
    may_miss: bool,
}

impl Worker for LmdbWorker<'_> {
    fn run(&mut self, txn: &Txn) -> Result<u32, TxnError> {
        let mut missed = 0;
        if !txn.writes() {
            let r = self.e.env.read_txn().map_err(err)?;
            for (j, op) in txn.ops.iter().enumerate() {
                let db = self.e.db(op)?;
                let found = if op.action == Action::Scan {
                    scan(db, &r, op)?
                } else {
                    db.get(&r, &encode_i64_compact(op.key))
                        .map_err(err)?
                        .is_some()
                };
                if !found {
                    missed |= 1 << j;
                }
            }
            return Ok(missed);
        }
        let mut t = self.e.env.write_txn().map_err(err)?;
        for (j, op) in txn.ops.iter().enumerate() {
            let db = self.e.db(op)?;
            let k = encode_i64_compact(op.key);
            let found = match op.action {
                Action::Update if self.may_miss && db.get(&t, &k).map_err(err)?.is_none() => false,
                Action::Insert | Action::Update => {
                    db.put(&mut t, &k, &op.payload).map_err(err)?;
                    true
                }
                Action::Delete => db.delete(&mut t, &k).map_err(err)?,
                Action::Select => db.get(&t, &k).map_err(err)?.is_some(),
                Action::Scan => scan(db, &t, op)?,
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
fn scan(db: &Database<Bytes, Bytes>, t: &heed::RoTxn, op: &Op) -> Result<bool, TxnError> {
    let k = encode_i64_compact(op.key);
    let (mut first, mut bytes) = (None, 0usize);
    for kv in db
        .range(t, &(Bound::Included(k.as_slice()), Bound::Unbounded))
        .map_err(err)?
        .take(SCAN_ROWS)
    {
        let (key, value) = kv.map_err(err)?;
        first.get_or_insert(key == k.as_slice());
        bytes += value.len();
    }
    Ok(first == Some(true) && bytes > 0)
}
