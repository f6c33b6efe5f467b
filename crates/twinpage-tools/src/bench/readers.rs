//! `twinpage bench readers`: point reads from several threads at once.
//!
//! Method: one table of `--rows` rows (`keys::encode_i64_compact(i)` keys
//! for twinpage, the same integers as SQLite rowids; `--value-size`-byte
//! values) is built once per engine and closed. For each cache setting it
//! is reopened: **warm** with a cache larger than the database and one read
//! of every key first; **cold** with a cache of `--cold-cache-pages` pages,
//! so most reads miss the engine's cache and are served by the OS page
//! cache (the file is not evicted from the OS cache: this measures the
//! engine's miss path, not the device). Then, for every thread count, each
//! thread reads uniformly random keys (xorshift seeded by `--seed` and the
//! thread number) for `--seconds`; twinpage does one `Db::get` (its own
//! read transaction) per read, SQLite one prepared `SELECT v FROM t WHERE
//! k = ?` on the thread's own connection. Every value read is checked
//! (present, right length); a wrong one is an error, not a number. The
//! thread counts are run round robin `--trials` times and the median
//! throughput is reported, with the speed-up over one thread and the
//! latency of every read of the median trial.

use super::{BenchError, Env, EnvArgs};
use hdrhistogram::Histogram;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use twinpage::{keys, Db, JournalMode, Options, Synchronous};

/// Arguments of `twinpage bench readers`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReadersArgs {
    /// Rows in the table.
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Thread counts (comma list).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4])]
    pub threads: Vec<usize>,
    /// Seconds each thread count runs per trial.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Trials per thread count (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub trials: usize,
    /// twinpage journal mode.
    #[arg(long, default_value = "wal")]
    pub mode: String,
    /// Cache settings to run.
    #[arg(long, value_enum, default_value_t = CacheSetting::Both)]
    pub cache: CacheSetting,
    /// Engine cache of the cold setting, in pages.
    #[arg(long, default_value_t = 256)]
    pub cold_cache_pages: usize,
    /// Leave SQLite out.
    #[arg(long)]
    pub no_sqlite: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the databases go.
    #[command(flatten)]
    pub env: EnvArgs,
    /// Write every figure as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Which cache settings to measure.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheSetting {
    /// Cache larger than the database, warmed first.
    Warm,
    /// A small engine cache: most reads miss it.
    Cold,
    /// Both.
    Both,
}

const PAGE_SIZE: usize = 4096;

/// One engine opened for reading by many threads.
enum Engine {
    Twinpage(Db),
    Sqlite(PathBuf, i64),
}

impl Engine {
    fn name(&self, mode: &str) -> String {
        match self {
            Engine::Twinpage(_) => format!("twinpage:{mode}"),
            Engine::Sqlite(..) => "sqlite:wal".into(),
        }
    }
}

/// A reader reading one key and checking it.
type Read<'a> = dyn FnMut(u64) -> Result<(), BenchError> + 'a;

/// Run `f` with a reader of `e` (SQLite: the thread's own connection and
/// prepared statement, closed afterwards).
fn with_reader<R>(
    e: &Engine,
    value_size: usize,
    f: impl FnOnce(&mut Read<'_>) -> Result<R, BenchError>,
) -> Result<R, BenchError> {
    match e {
        Engine::Twinpage(db) => f(&mut |k: u64| {
            let v = db.get("t", &keys::encode_i64_compact(k as i64))?;
            check(k, v.as_deref(), value_size)
        }),
        Engine::Sqlite(path, cache_kib) => {
            let conn = rusqlite::Connection::open(path)?;
            conn.pragma_update(None, "cache_size", -cache_kib)?;
            conn.pragma_update(None, "journal_mode", "wal")?;
            let mut stmt = conn.prepare("SELECT v FROM t WHERE k = ?1")?;
            f(&mut |k: u64| {
                let v: Option<Vec<u8>> = match stmt.query_row([k as i64], |r| r.get(0)) {
                    Ok(v) => Some(v),
                    Err(rusqlite::Error::QueryReturnedNoRows) => None,
                    Err(e) => return Err(e.into()),
                };
                check(k, v.as_deref(), value_size)
            })
        }
    }
}

fn check(k: u64, v: Option<&[u8]>, value_size: usize) -> Result<(), BenchError> {
    match v {
        Some(v) if v.len() == value_size => Ok(()),
        Some(v) => Err(BenchError::Msg(format!(
            "key {k}: value of {} bytes, expected {value_size}",
            v.len()
        ))),
        None => Err(BenchError::Msg(format!("key {k}: missing"))),
    }
}

fn value(k: u64, size: usize) -> Vec<u8> {
    (0..size).map(|i| (k as usize + i) as u8).collect()
}

fn build_twinpage(path: &Path, mode: JournalMode, a: &ReadersArgs) -> Result<(), BenchError> {
    let db = Db::open(
        path,
        Options::default()
            .journal_mode(mode)
            .synchronous(Synchronous::Normal)
            .page_size(PAGE_SIZE),
    )?;
    db.create_table("t")?;
    let mut t = db.begin_write()?;
    for k in 0..a.rows {
        t.put(
            "t",
            &keys::encode_i64_compact(k as i64),
            &value(k, a.value_size),
        )?;
    }
    t.commit()?;
    db.close()?;
    Ok(())
}

fn build_sqlite(path: &Path, a: &ReadersArgs) -> Result<(), BenchError> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    conn.pragma_update(None, "journal_mode", "wal")?;
    conn.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB NOT NULL)", [])?;
    let tx = conn.transaction()?;
    {
        let mut ins = tx.prepare("INSERT INTO t(k, v) VALUES (?1, ?2)")?;
        for k in 0..a.rows {
            ins.execute(rusqlite::params![k as i64, value(k, a.value_size)])?;
        }
    }
    tx.commit()?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    Ok(())
}

/// One trial of `threads` readers for `secs`: reads done and, when asked,
/// every read's latency.
fn trial(
    e: &Engine,
    a: &ReadersArgs,
    threads: usize,
    trial_no: usize,
) -> Result<(u64, f64, Histogram<u64>), BenchError> {
    let dur = Duration::from_secs_f64(a.seconds);
    let results: Vec<Result<(u64, Histogram<u64>), BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                s.spawn(move || -> Result<(u64, Histogram<u64>), BenchError> {
                    with_reader(e, a.value_size, |read| {
                        let mut hist =
                            Histogram::<u64>::new(3).map_err(|x| BenchError::Msg(x.to_string()))?;
                        let mut x = (a.seed ^ 0x9E37_79B9_7F4A_7C15)
                            .wrapping_add((th as u64 + 1) * 0x1000_0001)
                            .wrapping_add(trial_no as u64 * 7919)
                            | 1;
                        let start = Instant::now();
                        let mut n = 0u64;
                        loop {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let t0 = Instant::now();
                            read(x % a.rows)?;
                            let _ = hist.record(t0.elapsed().as_nanos() as u64);
                            n += 1;
                            if n.is_multiple_of(64) && start.elapsed() >= dur {
                                return Ok((n, hist));
                            }
                        }
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Msg("reader thread panicked".into())))
            })
            .collect()
    });
    let mut total = 0;
    let mut hist = Histogram::<u64>::new(3).map_err(|x| BenchError::Msg(x.to_string()))?;
    for r in results {
        let (n, h) = r?;
        total += n;
        hist.add(h).map_err(|x| BenchError::Msg(x.to_string()))?;
    }
    Ok((total, total as f64 / a.seconds, hist))
}

/// Run `twinpage bench readers`.
pub fn run(a: &ReadersArgs) -> Result<(), BenchError> {
    if a.rows == 0 || a.threads.is_empty() || a.trials == 0 || a.seconds <= 0.0 {
        return Err(BenchError::Msg(
            "need rows, threads, trials and seconds > 0".into(),
        ));
    }
    let mode: JournalMode = a.mode.parse()?;
    let env = Env::new(&a.env)?;
    let tp_path = env.dir.join("readers-twinpage.db");
    let sq_path = env.dir.join("readers-sqlite.db");
    build_twinpage(&tp_path, mode, a)?;
    if !a.no_sqlite {
        build_sqlite(&sq_path, a)?;
    }
    let db_bytes = std::fs::metadata(&tp_path).map(|m| m.len()).unwrap_or(0) as usize;
    let settings: Vec<(&str, usize)> = match a.cache {
        CacheSetting::Warm => vec![("warm", db_bytes + db_bytes / 4 + (1 << 20))],
        CacheSetting::Cold => vec![("cold", a.cold_cache_pages * PAGE_SIZE)],
        CacheSetting::Both => vec![
            ("warm", db_bytes + db_bytes / 4 + (1 << 20)),
            ("cold", a.cold_cache_pages * PAGE_SIZE),
        ],
    };
    println!(
        "twinpage bench readers: {} rows, {}-byte values, 4 KiB pages, mode {mode}, threads {:?}, \
         {} s x {} trials (median), seed {}; machine: {} CPUs; database {} KiB",
        a.rows,
        a.value_size,
        a.threads,
        a.seconds,
        a.trials,
        a.seed,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        db_bytes / 1024
    );
    for (k, v) in &env.notes {
        println!("  {k}: {v}");
    }
    println!(
        "{:<18} {:<5} {:>7} {:>12} {:>12} {:>8} {:>9} {:>9}",
        "engine", "cache", "threads", "reads/s", "per thread", "speedup", "p50 us", "p99 us"
    );
    let mut out = Vec::new();
    for &(setting, cache_bytes) in &settings {
        let mut engines = vec![Engine::Twinpage(Db::open(
            &tp_path,
            Options::default()
                .journal_mode(mode)
                .page_size(PAGE_SIZE)
                .cache_size(cache_bytes),
        )?)];
        if !a.no_sqlite {
            engines.push(Engine::Sqlite(sq_path.clone(), (cache_bytes / 1024) as i64));
        }
        for e in &engines {
            if setting == "warm" {
                with_reader(e, a.value_size, |read| (0..a.rows).try_for_each(read))?;
            }
            // Round robin over thread counts, trials times.
            let mut per: Vec<Vec<(f64, Histogram<u64>)>> = vec![Vec::new(); a.threads.len()];
            for t in 0..a.trials {
                for (i, &n) in a.threads.iter().enumerate() {
                    let (_, rate, hist) = trial(e, a, n, t)?;
                    per[i].push((rate, hist));
                }
            }
            let mut base = None;
            for (i, &n) in a.threads.iter().enumerate() {
                let mut v = std::mem::take(&mut per[i]);
                v.sort_by(|x, y| x.0.total_cmp(&y.0));
                let (rate, hist) = &v[v.len() / 2];
                let rates: Vec<f64> = v.iter().map(|x| x.0).collect();
                let b = *base.get_or_insert(*rate);
                let name = e.name(&a.mode);
                println!(
                    "{:<18} {:<5} {:>7} {:>12.0} {:>12.0} {:>7.2}x {:>9.2} {:>9.2}",
                    name,
                    setting,
                    n,
                    rate,
                    rate / n as f64,
                    rate / b,
                    hist.value_at_quantile(0.5) as f64 / 1000.0,
                    hist.value_at_quantile(0.99) as f64 / 1000.0
                );
                out.push(json!({
                    "engine": name, "cache": setting, "cache_bytes": cache_bytes,
                    "threads": n, "reads_per_sec": rate, "trial_reads_per_sec": rates,
                    "speedup_vs_first": rate / b,
                    "p50_us": hist.value_at_quantile(0.5) as f64 / 1000.0,
                    "p99_us": hist.value_at_quantile(0.99) as f64 / 1000.0,
                }));
            }
        }
        if let Some(Engine::Twinpage(db)) = engines.into_iter().next() {
            db.close()?;
        }
    }
    if let Some(p) = &a.json {
        let doc = json!({
            "tool": "twinpage bench readers",
            "rows": a.rows, "value_size": a.value_size, "mode": a.mode,
            "seconds": a.seconds, "trials": a.trials, "seed": a.seed,
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "results": out,
        });
        std::fs::write(p, serde_json::to_string_pretty(&doc).unwrap_or_default())
            .map_err(|e| BenchError::Io(format!("write {}", p.display()), e))?;
    }
    Ok(())
}
