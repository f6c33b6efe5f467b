//! The physical floor: per write transaction, one in-place page-sized
//! `pwrite` plus `fdatasync` into a pre-allocated file on the same file
//! system — the least any durable engine can do. Read-only transactions
//! cost one `pread`.

use super::super::workload::{Txn, Workload};
use super::super::BenchError;
use super::{Engine, RowVisitor, TxnError, Worker, DB_FILE};
use ::twinpage::storage::IoSnapshot;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Pages in the floor file by default (floor.py's 160).
pub const PAGES: u64 = 160;

pub(super) struct FloorEngine {
    file: File,
    page_size: usize,
    pages: u64,
    writes: AtomicU64,
    bytes: AtomicU64,
    reads: AtomicU64,
    syncs: AtomicU64,
}

impl FloorEngine {
    pub(super) fn open(dir: &Path, page_size: usize, pages: u64) -> Result<Self, BenchError> {
        let path = dir.join(DB_FILE);
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| BenchError::Io(format!("create {}", path.display()), e))?;
        Ok(FloorEngine {
            file,
            page_size,
            pages,
            writes: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        })
    }
}

impl Engine for FloorEngine {
    fn settings(&self) -> Vec<(String, String)> {
        vec![
            ("page_size".into(), self.page_size.to_string()),
            ("file_pages".into(), self.pages.to_string()),
            (
                "per write txn".into(),
                "1 pwrite in place + 1 fdatasync".into(),
            ),
        ]
    }

    fn load(&self, _w: &Workload) -> Result<(), BenchError> {
        // Allocate the whole file so every measured write is an overwrite.
        // In chunks: a large file (`pages=`) needs no buffer of its size.
        let zero = vec![0u8; self.page_size * 256];
        let total = self.page_size as u64 * self.pages;
        let mut at = 0;
        while at < total {
            let n = (total - at).min(zero.len() as u64) as usize;
            self.file
                .write_all_at(&zero[..n], at)
                .map_err(|e| BenchError::Io("floor prefill".into(), e))?;
            at += n as u64;
        }
        self.file
            .sync_all()
            .map_err(|e| BenchError::Io("floor prefill".into(), e))
    }

    fn worker(&self, _w: &Workload) -> Result<Box<dyn Worker + '_>, BenchError> {
        Ok(Box::new(FloorWorker {
            e: self,
            buf: vec![0xa5; self.page_size],
        }))
    }

    fn io(&self) -> IoSnapshot {
        IoSnapshot {
            write_calls: self.writes.load(Relaxed),
            bytes_written: self.bytes.load(Relaxed),
            read_calls: self.reads.load(Relaxed),
            bytes_read: self.reads.load(Relaxed) * self.page_size as u64,
            fdatasync: self.syncs.load(Relaxed),
            ..IoSnapshot::default()
        }
    }

    fn visit(&self, _w: &Workload, _f: &mut RowVisitor<'_>) -> Result<bool, BenchError> {
        Ok(false)
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        Ok(())
    }
}

struct FloorWorker<'a> {
    e: &'a FloorEngine,
    buf: Vec<u8>,
}

impl Worker for FloorWorker<'_> {
    fn run(&mut self, txn: &Txn) -> Result<u32, TxnError> {
        // The page follows from the transaction's first key, so every run
        // writes the same pages.
        let key = txn.ops.first().map(|o| o.key as u64).unwrap_or(0);
        let page = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32 & 0xffff_ffff;
        let off = (page % self.e.pages) * self.e.page_size as u64;
        let io = |what: &str, e| TxnError::Fatal(BenchError::Io(format!("floor {what}"), e));
        if txn.writes() {
            self.buf[0] = self.buf[0].wrapping_add(1);
            self.e
                .file
                .write_all_at(&self.buf, off)
                .map_err(|e| io("pwrite", e))?;
            self.e.writes.fetch_add(1, Relaxed);
            self.e.bytes.fetch_add(self.buf.len() as u64, Relaxed);
            self.e.file.sync_data().map_err(|e| io("fdatasync", e))?;
            self.e.syncs.fetch_add(1, Relaxed);
        } else {
            self.e
                .file
                .read_exact_at(&mut self.buf, off)
                .map_err(|e| io("pread", e))?;
            self.e.reads.fetch_add(1, Relaxed);
        }
        Ok(0)
    }
}
