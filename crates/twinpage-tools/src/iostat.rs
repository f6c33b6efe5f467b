//! `twinpage iostat`: the counted I/O of single-row auto-commit inserts in
//! every mode, with the exact call sequence of one commit.

use std::path::PathBuf;
use twinpage::{Db, JournalMode, Options, Result, Synchronous};

/// Arguments of `twinpage iostat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Directory for the databases (default: a fresh temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Rows to pre-fill before measuring.
    #[arg(long, default_value_t = 1000)]
    pub prefill: u64,
    /// Auto-commit inserts to measure.
    #[arg(long, default_value_t = 200)]
    pub txns: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Sync level.
    #[arg(long, default_value = "full")]
    pub synchronous: Synchronous,
}

/// Run it; returns the process exit code.
pub fn run(a: Args) -> Result<i32> {
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir().map_err(|e| twinpage::Error::io("mkdtemp", "/tmp", e))?;
            tmp.path().to_path_buf()
        }
    };
    println!(
        "single-row auto-commit insert, {} rows pre-filled, {}-byte values, synchronous={}, page_size=4096",
        a.prefill, a.value_size, a.synchronous
    );
    println!(
        "{:<9} {:>8} {:>10} {:>10} {:>6} {:>6} {:>7} {:>7} {:>9} {:>8}",
        "mode",
        "writes",
        "bytes",
        "fdatasync",
        "fsync",
        "unlink",
        "ftrunc",
        "dirsync",
        "us/txn",
        "txn/s"
    );
    let value = vec![0x5au8; a.value_size];
    for &mode in JournalMode::ALL {
        let path = dir.join(format!("iostat-{mode}.db"));
        let opts = Options::default()
            .journal_mode(mode)
            .synchronous(a.synchronous);
        let db = Db::open(&path, opts)?;
        db.create_table("t")?;
        let mut t = db.begin_write()?;
        for i in 0..a.prefill {
            t.put("t", &twinpage::keys::encode_u64(i * 2), &value)?;
        }
        t.commit()?;
        let before = db.io_counters();
        let start = std::time::Instant::now();
        for i in 0..a.txns {
            db.put("t", &twinpage::keys::encode_u64(i * 2 + 1), &value)?;
        }
        let el = start.elapsed();
        let d = db.io_counters() - before;
        let n = a.txns as f64;
        println!(
            "{:<9} {:>8.2} {:>10.1} {:>10.2} {:>6.2} {:>6.2} {:>7.2} {:>7.2} {:>9.1} {:>8.0}",
            mode.name(),
            d.write_calls as f64 / n,
            d.bytes_written as f64 / n,
            d.fdatasync as f64 / n,
            d.fsync as f64 / n,
            d.removes as f64 / n,
            d.truncates as f64 / n,
            d.dir_syncs as f64 / n,
            el.as_micros() as f64 / n,
            n / el.as_secs_f64()
        );
        // The exact call sequence of one more commit.
        db.counters().start_trace();
        db.put("t", &twinpage::keys::encode_u64(u64::MAX / 2), &value)?;
        let trace = db.counters().take_trace();
        let seq: Vec<String> = trace.iter().map(|e| e.to_string()).collect();
        println!("          sequence: {}", seq.join("; "));
        db.check()?;
        db.close()?;
    }
    Ok(0)
}
