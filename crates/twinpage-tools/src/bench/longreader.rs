//! `twinpage bench long-reader`: the size of the write-ahead log while one
//! read transaction stays open across a whole update run, twinpage's `wal`
//! beside stock SQLite's WAL.
//!
//! Method: a table of `--rows` rows (`keys::encode_i64_compact(i)` keys for
//! twinpage, the same integers as SQLite rowids; `--record-size`-byte
//! values) is loaded in one transaction and checkpointed. A reader then
//! begins (twinpage: `Db::begin_read` and one read; SQLite: a second
//! connection, `BEGIN` and one `SELECT`, which holds the snapshot) and stays
//! open while `--updates` single-row auto-commit updates of uniformly
//! random keys (xorshift, `--seed`) run on the writer. Every
//! `--sample-every` updates the size of `<db>-wal` is sampled with
//! `stat(2)`. At the end the reader checks that it still sees the values it
//! began with (every row), ends, one more update runs, and the log is
//! measured again. Both engines get the same settings, printed:
//! `wal_autocheckpoint`, `journal_size_limit`, `synchronous`, 4 KiB pages.
//! SQLite cannot checkpoint past the reader's snapshot nor restart its log
//! while the reader lives, so its log grows with the run; twinpage
//! checkpoints and restarts on schedule and keeps the reader's versions in
//! memory (reported as `retained`).

use super::{BenchError, Env, EnvArgs};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;
use twinpage::{keys, Db, JournalMode, Options, Synchronous};

/// Arguments of `twinpage bench long-reader`.
#[derive(clap::Args, Debug, Clone)]
pub struct LongReaderArgs {
    /// Rows loaded before the reader begins.
    #[arg(long, default_value_t = 5000)]
    pub rows: u64,
    /// Single-row update transactions while the reader is open.
    #[arg(long, default_value_t = 20_000)]
    pub updates: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    pub record_size: usize,
    /// Sample the log size every this many updates.
    #[arg(long, default_value_t = 1000)]
    pub sample_every: u64,
    /// `wal_autocheckpoint` of both engines (frames).
    #[arg(long, default_value_t = 1000)]
    pub wal_autocheckpoint: i64,
    /// `journal_size_limit` of both engines (bytes; negative: none).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub journal_size_limit: i64,
    /// Sync level of both engines.
    #[arg(long, default_value = "full")]
    pub sync: String,
    /// Random seed of the keys.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Leave SQLite out.
    #[arg(long)]
    pub no_sqlite: bool,
    /// Where the databases go.
    #[command(flatten)]
    pub env: EnvArgs,
    /// Write every figure as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

const PAGE_SIZE: usize = 4096;

/// One engine's run.
struct Series {
    engine: String,
    /// (updates done, log bytes, retained bytes).
    samples: Vec<(u64, u64, u64)>,
    /// Log bytes after the reader ended and one more update ran.
    after: u64,
    seconds: f64,
}

fn value(k: u64, round: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (k as usize + i) as u8 ^ round as u8)
        .collect()
}

fn wal_len(db: &Path) -> u64 {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    std::fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len())
}

/// xorshift64*: the same key stream for both engines.
fn keys_of(a: &LongReaderArgs) -> impl Iterator<Item = u64> + '_ {
    let mut x = a.seed ^ 0x9E37_79B9_7F4A_7C15;
    (0..a.updates).map(move |_| {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) % a.rows
    })
}

fn stat(db: &Db, name: &str) -> u64 {
    db.stats()
        .journal
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |&(_, v)| v)
}

fn run_twinpage(path: &Path, a: &LongReaderArgs, sync: Synchronous) -> Result<Series, BenchError> {
    let mut o = Options::default()
        .journal_mode(JournalMode::Wal)
        .synchronous(sync)
        .page_size(PAGE_SIZE);
    o.set("wal_autocheckpoint", &a.wal_autocheckpoint.to_string())?;
    o.set("journal_size_limit", &a.journal_size_limit.to_string())?;
    let db = Db::open(path, o)?;
    db.create_table("t")?;
    let mut t = db.begin_write()?;
    for k in 0..a.rows {
        t.put(
            "t",
            &keys::encode_i64_compact(k as i64),
            &value(k, 0, a.record_size),
        )?;
    }
    t.commit()?;
    db.checkpoint(twinpage::journal::CheckpointMode::Truncate)?;
    let reader = db.begin_read()?;
    reader.get("t", &keys::encode_i64_compact(0))?;
    let mut samples = vec![(0, wal_len(path), 0)];
    let start = Instant::now();
    for (i, k) in keys_of(a).enumerate() {
        let i = i as u64 + 1;
        db.put(
            "t",
            &keys::encode_i64_compact(k as i64),
            &value(k, i, a.record_size),
        )?;
        if i.is_multiple_of(a.sample_every) || i == a.updates {
            samples.push((i, wal_len(path), stat(&db, "retained_bytes")));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    for k in 0..a.rows {
        let v = reader.get("t", &keys::encode_i64_compact(k as i64))?;
        if v.as_deref() != Some(&value(k, 0, a.record_size)[..]) {
            return Err(BenchError::Msg(format!(
                "twinpage: the reader lost its snapshot at key {k}"
            )));
        }
    }
    drop(reader);
    db.put("t", &keys::encode_i64_compact(0), b"after")?;
    let after = wal_len(path);
    db.check()?;
    db.close()?;
    Ok(Series {
        engine: "twinpage:wal".into(),
        samples,
        after,
        seconds,
    })
}

fn run_sqlite(path: &Path, a: &LongReaderArgs, sync: Synchronous) -> Result<Series, BenchError> {
    let mut w = rusqlite::Connection::open(path)?;
    w.pragma_update(None, "page_size", PAGE_SIZE)?;
    w.pragma_update(None, "journal_mode", "wal")?;
    w.pragma_update(None, "synchronous", sync.to_string())?;
    w.pragma_update(None, "wal_autocheckpoint", a.wal_autocheckpoint)?;
    w.pragma_update(None, "journal_size_limit", a.journal_size_limit)?;
    w.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB NOT NULL)", [])?;
    let tx = w.transaction()?;
    {
        let mut ins = tx.prepare("INSERT INTO t(k, v) VALUES (?1, ?2)")?;
        for k in 0..a.rows {
            ins.execute(rusqlite::params![k as i64, value(k, 0, a.record_size)])?;
        }
    }
    tx.commit()?;
    w.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    let r = rusqlite::Connection::open(path)?;
    r.execute_batch("BEGIN")?;
    let _: Vec<u8> = r.query_row("SELECT v FROM t WHERE k = 0", [], |row| row.get(0))?;
    let mut samples = vec![(0, wal_len(path), 0)];
    let start = Instant::now();
    {
        let mut up = w.prepare("UPDATE t SET v = ?2 WHERE k = ?1")?;
        for (i, k) in keys_of(a).enumerate() {
            let i = i as u64 + 1;
            up.execute(rusqlite::params![k as i64, value(k, i, a.record_size)])?;
            if i.is_multiple_of(a.sample_every) || i == a.updates {
                samples.push((i, wal_len(path), 0));
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    {
        let mut q = r.prepare("SELECT k, v FROM t ORDER BY k")?;
        let mut rows = q.query([])?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            let (k, v): (i64, Vec<u8>) = (row.get(0)?, row.get(1)?);
            if v != value(k as u64, 0, a.record_size) {
                return Err(BenchError::Msg(format!("SQLite: the reader lost key {k}")));
            }
            n += 1;
        }
        if n != a.rows {
            return Err(BenchError::Msg(format!("SQLite: the reader saw {n} rows")));
        }
    }
    r.execute_batch("COMMIT")?;
    drop(r);
    w.execute(
        "UPDATE t SET v = ?2 WHERE k = ?1",
        rusqlite::params![0i64, b"after".to_vec()],
    )?;
    let after = wal_len(path);
    Ok(Series {
        engine: "sqlite:wal".into(),
        samples,
        after,
        seconds,
    })
}

/// Run `twinpage bench long-reader`.
pub fn run(a: &LongReaderArgs) -> Result<(), BenchError> {
    if a.rows == 0 || a.updates == 0 || a.sample_every == 0 {
        return Err(BenchError::Msg(
            "need rows, updates and sample-every > 0".into(),
        ));
    }
    let sync: Synchronous = a.sync.parse()?;
    let env = Env::new(&a.env)?;
    println!(
        "twinpage bench long-reader: {} rows, {}-byte values, {} single-row updates (uniform keys, \
         seed {}) while one reader stays open; 4 KiB pages, synchronous={sync}, \
         wal_autocheckpoint={}, journal_size_limit={} for both engines; log size sampled every {} \
         updates",
        a.rows,
        a.record_size,
        a.updates,
        a.seed,
        a.wal_autocheckpoint,
        a.journal_size_limit,
        a.sample_every
    );
    for (k, v) in &env.notes {
        println!("  {k}: {v}");
    }
    let mut series = vec![run_twinpage(&env.dir.join("long-twinpage.db"), a, sync)?];
    if !a.no_sqlite {
        series.push(run_sqlite(&env.dir.join("long-sqlite.db"), a, sync)?);
    }
    print!("{:>8}", "updates");
    for s in &series {
        print!(" {:>18}", format!("{} KiB", s.engine));
    }
    println!(" {:>18}", "twinpage retained KiB");
    for (i, &(n, _, kept)) in series[0].samples.iter().enumerate() {
        print!("{n:>8}");
        for s in &series {
            print!(" {:>18}", s.samples.get(i).map_or(0, |x| x.1) / 1024);
        }
        println!(" {:>18}", kept / 1024);
    }
    for s in &series {
        let max = s.samples.iter().map(|x| x.1).max().unwrap_or(0);
        println!(
            "{}: largest log {} KiB, {} KiB after the reader ended and one more update; \
             {:.0} updates/s",
            s.engine,
            max / 1024,
            s.after / 1024,
            a.updates as f64 / s.seconds
        );
    }
    if let Some(path) = &a.json {
        let out = json!({
            "tool": "twinpage bench long-reader",
            "settings": {
                "rows": a.rows, "updates": a.updates, "record_size": a.record_size,
                "sample_every": a.sample_every, "wal_autocheckpoint": a.wal_autocheckpoint,
                "journal_size_limit": a.journal_size_limit, "synchronous": sync.to_string(),
                "seed": a.seed, "page_size": PAGE_SIZE,
            },
            "environment": env.notes.iter().map(|(k, v)| json!({k: v})).collect::<Vec<_>>(),
            "series": series.iter().map(|s| json!({
                "engine": s.engine,
                "samples": s.samples.iter().map(|&(n, log, kept)| json!({
                    "updates": n, "log_bytes": log, "retained_bytes": kept,
                })).collect::<Vec<_>>(),
                "log_bytes_after_reader": s.after,
                "updates_per_sec": a.updates as f64 / s.seconds,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&out).unwrap_or_default())
            .map_err(|e| BenchError::Io(format!("write {}", path.display()), e))?;
    }
    Ok(())
}
