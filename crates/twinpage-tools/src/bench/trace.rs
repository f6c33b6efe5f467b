//! `twinpage bench trace DIR`: replay real app SQL traces (a directory with
//! `loading.sql` and `benchset/N.sql`) on stock SQLite and on twinpage-SQL
//! (SQLite's SQL engine over twinpage, crates/twinpage-sql), the same
//! SQLite version on both sides.
//!
//! `loading.sql` builds the starting database; then each `benchset` file
//! is replayed by its own thread and connection, concurrently (or, with
//! `--serial`, one after the other on one connection), one statement per
//! line. A statement that gets SQLITE_BUSY is retried; inside an explicit
//! transaction the transaction is rolled back and replayed from its BEGIN
//! (retries are counted). `--compare` replays serially and checks every
//! SELECT's rows and the final contents of every table against stock
//! SQLite, failing on the first difference.

use super::blockdev::{self, BlockDev, DiskStat, Ext4Image};
use super::engines::vfs;
use super::BenchError;
use hdrhistogram::Histogram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use twinpage::storage::IoSnapshot;

/// Arguments of `twinpage bench trace`.
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// The trace directory (`loading.sql`, `benchset/N.sql`).
    pub dir: PathBuf,
    /// Replay every file on one connection, one after the other.
    #[arg(long)]
    pub serial: bool,
    /// Replay serially and check every SELECT's rows and the final
    /// contents against stock SQLite; exit 1 on a difference.
    #[arg(long)]
    pub compare: bool,
    /// Engines: `sqlite:MODE` (stock SQLite's journal modes) and
    /// `twinpage:MODE[,concurrency=PROTOCOL]` (twinpage-SQL, in a mode and
    /// one of the concurrency protocols its registry entry allows, e.g.
    /// `twinpage:ips,concurrency=2vto`; a plain BEGIN then runs beside
    /// other writers); comma-separated or repeated. Default: sqlite:wal,
    /// sqlite:persist and every twinpage mode with every protocol it
    /// allows.
    #[arg(long)]
    pub engines: Vec<String>,
    /// PRAGMA synchronous for every engine.
    #[arg(long, default_value = "full")]
    pub synchronous: String,
    /// Directory for the databases (default: a temporary directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Run on a fresh ext4 image of this size (root; e.g. 512M) and report
    /// device I/O per statement.
    #[arg(long)]
    pub ext4_image: Option<String>,
}

/// The apps ran with SQLite's default, foreign keys off; the pinned build
/// (as rusqlite's) turns them on by default, so both sides turn them off.
const FOREIGN_KEYS: &str = "PRAGMA foreign_keys=OFF;";

/// Which engine replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    /// Stock SQLite (rusqlite), in one of its journal modes.
    Sqlite(String),
    /// twinpage-SQL in a twinpage mode, under a concurrency protocol
    /// (`None`: the mode's default).
    Twinpage(String, Option<twinpage::cc::Protocol>),
}

impl Side {
    /// Parse `sqlite:MODE` or `twinpage:MODE[,concurrency=PROTOCOL]`; the
    /// protocol must be one the mode's registry entry allows.
    pub fn parse(s: &str) -> Result<Side, String> {
        match s.split_once(':') {
            Some(("sqlite", m)) => Ok(Side::Sqlite(m.to_string())),
            Some(("twinpage", spec)) => {
                let (m, opt) = match spec.split_once(',') {
                    Some((m, o)) => (m, Some(o)),
                    None => (spec, None),
                };
                let mode = m
                    .parse::<twinpage::JournalMode>()
                    .map_err(|e| e.to_string())?;
                let protocol = match opt.map(|o| o.split_once('=')) {
                    None => None,
                    Some(Some(("concurrency", p))) => {
                        let p = p
                            .parse::<twinpage::cc::Protocol>()
                            .map_err(|e| e.to_string())?;
                        if !mode.spec().protocols.contains(&p) {
                            return Err(format!("engine {s:?}: {mode} does not run {p}"));
                        }
                        Some(p)
                    }
                    Some(_) => {
                        return Err(format!(
                            "engine {s:?}: expected twinpage:MODE,concurrency=PROTOCOL"
                        ))
                    }
                };
                Ok(Side::Twinpage(m.to_string(), protocol))
            }
            _ => Err(format!(
                "engine {s:?}: expected sqlite:MODE or twinpage:MODE[,concurrency=PROTOCOL]"
            )),
        }
    }

    /// `sqlite:wal`, `twinpage:dhl-cc`, `twinpage:ips,concurrency=2vto`.
    pub fn name(&self) -> String {
        match self {
            Side::Sqlite(m) => format!("sqlite:{m}"),
            Side::Twinpage(m, None) => format!("twinpage:{m}"),
            Side::Twinpage(m, Some(p)) => format!("twinpage:{m},concurrency={p}"),
        }
    }

    /// The database file's name in the work directory.
    fn file_name(&self) -> String {
        format!("{}.db", self.name().replace([':', ',', '='], "-"))
    }

    /// The engines of `--engines` values: comma-separated lists in which
    /// `name=value` belongs to the engine before it.
    pub fn parse_list(args: &[String]) -> Result<Vec<Side>, String> {
        let mut specs: Vec<String> = Vec::new();
        for part in args.iter().flat_map(|a| a.split(',')) {
            match specs.last_mut() {
                Some(last) if part.contains('=') && !part.contains(':') => {
                    last.push(',');
                    last.push_str(part);
                }
                _ => specs.push(part.to_string()),
            }
        }
        specs.iter().map(|s| Side::parse(s)).collect()
    }
}

/// A statement's outcome as compared between engines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A statement without result rows.
    Done,
    /// A query's rows, each value printed with its type.
    Rows(Vec<Vec<String>>),
    /// An error (other than busy) and its message.
    Error(String),
}

/// Every table's rows by name (the schema first).
pub type Dump = Vec<(String, Vec<Vec<String>>)>;

/// One open connection of either side.
pub enum Conn {
    /// Stock SQLite.
    Sqlite(rusqlite::Connection),
    /// twinpage-SQL.
    Twinpage(twinpage_sql::Connection),
}

enum Fail {
    Busy,
    Other(String),
}

fn stock_value(v: rusqlite::types::ValueRef<'_>) -> String {
    use rusqlite::types::ValueRef as V;
    match v {
        V::Null => "null".into(),
        V::Integer(i) => format!("i:{i}"),
        V::Real(r) => format!("r:{:x}", r.to_bits()),
        V::Text(t) => format!("t:{}", String::from_utf8_lossy(t)),
        V::Blob(b) => format!("b:{}", hex(b)),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn twin_value(v: &twinpage_sql::Value) -> String {
    use twinpage_sql::Value as V;
    match v {
        V::Null => "null".into(),
        V::Integer(i) => format!("i:{i}"),
        V::Real(r) => format!("r:{:x}", r.to_bits()),
        V::Text(t) => format!("t:{t}"),
        V::Blob(b) => format!("b:{}", hex(b)),
    }
}

impl Conn {
    /// Open `path` for `side` with PRAGMA synchronous `sync`.
    pub fn open(side: &Side, path: &Path, sync: &str) -> Result<Conn, String> {
        match side {
            Side::Sqlite(mode) => {
                vfs::register()?;
                let c = rusqlite::Connection::open_with_flags_and_vfs(
                    path,
                    rusqlite::OpenFlags::default(),
                    vfs::VFS_NAME,
                )
                .map_err(|e| e.to_string())?;
                c.busy_timeout(Duration::from_secs(5))
                    .map_err(|e| e.to_string())?;
                c.execute_batch(&format!(
                    "PRAGMA journal_mode={mode}; PRAGMA synchronous={sync}; {FOREIGN_KEYS}"
                ))
                .map_err(|e| e.to_string())?;
                Ok(Conn::Sqlite(c))
            }
            Side::Twinpage(mode, protocol) => {
                let mut uri = format!(
                    "file:{}?journal_mode={mode}&synchronous={sync}",
                    path.display()
                );
                if let Some(p) = protocol {
                    uri.push_str(&format!("&concurrency={p}"));
                }
                let c = twinpage_sql::Connection::open(uri).map_err(|e| e.to_string())?;
                c.busy_timeout(5000);
                c.execute_batch(FOREIGN_KEYS).map_err(|e| e.to_string())?;
                Ok(Conn::Twinpage(c))
            }
        }
    }

    fn run(&self, sql: &str) -> Result<Outcome, Fail> {
        match self {
            Conn::Sqlite(c) => {
                let busy = |e: &rusqlite::Error| {
                    matches!(
                        e.sqlite_error_code(),
                        Some(rusqlite::ErrorCode::DatabaseBusy)
                            | Some(rusqlite::ErrorCode::DatabaseLocked)
                    )
                };
                let fail = |e: rusqlite::Error| {
                    if busy(&e) {
                        Fail::Busy
                    } else {
                        Fail::Other(e.to_string())
                    }
                };
                let mut s = c.prepare(sql).map_err(fail)?;
                let n = s.column_count();
                let mut rows = s.query([]).map_err(fail)?;
                let mut out = Vec::new();
                while let Some(r) = rows.next().map_err(fail)? {
                    out.push(
                        (0..n)
                            .map(|i| r.get_ref(i).map(stock_value).unwrap_or_default())
                            .collect(),
                    );
                }
                Ok(if n == 0 {
                    Outcome::Done
                } else {
                    Outcome::Rows(out)
                })
            }
            Conn::Twinpage(c) => {
                let fail = |e: twinpage_sql::Error| {
                    if e.is_busy() {
                        Fail::Busy
                    } else {
                        Fail::Other(e.message)
                    }
                };
                let mut s = c.prepare(sql).map_err(fail)?;
                let n = s.column_count();
                let mut rows = s.query(&[]).map_err(fail)?;
                let mut out = Vec::new();
                while let Some(r) = rows.next().map_err(fail)? {
                    out.push(r.values().iter().map(twin_value).collect());
                }
                Ok(if n == 0 {
                    Outcome::Done
                } else {
                    Outcome::Rows(out)
                })
            }
        }
    }

    /// Every table's rows in storage order, and the schema: the final
    /// contents compared between engines.
    pub fn dump(&self) -> Result<Dump, String> {
        let q = |sql: &str| match self.run(sql) {
            Ok(Outcome::Rows(r)) => Ok(r),
            Ok(_) => Ok(Vec::new()),
            Err(Fail::Busy) => Err("busy".to_string()),
            Err(Fail::Other(e)) => Err(e),
        };
        let schema = q("SELECT type, name, tbl_name, sql FROM sqlite_schema \
                        WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")?;
        let mut out = vec![("sqlite_schema".to_string(), schema.clone())];
        for row in &schema {
            if row[0] == "t:table" {
                let name = row[1].trim_start_matches("t:").replace('"', "\"\"");
                out.push((name.clone(), q(&format!("SELECT * FROM \"{name}\""))?));
            }
        }
        Ok(out)
    }
}

/// The statements of a trace file: one a line, a trailing `;` dropped.
pub fn statements(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim().trim_end_matches(';').trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The benchset files of a trace directory, by thread number.
pub fn benchset(dir: &Path) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("benchset"))
        .map_err(|e| format!("{}: {e}", dir.join("benchset").display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort_by_key(|p| {
        p.file_stem()
            .and_then(|s| s.to_str()?.parse::<u32>().ok())
            .unwrap_or(u32::MAX)
    });
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            Ok((p.display().to_string(), statements(&text)))
        })
        .collect()
}

/// What one replay thread measured.
#[derive(Default)]
pub struct Replay {
    /// Statements completed.
    pub statements: u64,
    /// Statements that failed with an error other than busy.
    pub errors: u64,
    /// Busy retries (a statement, or a transaction from its BEGIN).
    pub retries: u64,
    /// Per statement outcome, in order (kept with `--compare`).
    pub outcomes: Vec<Outcome>,
    /// First few error messages.
    pub error_samples: Vec<String>,
    /// Latency of each statement (microseconds).
    pub latency: Option<Histogram<u64>>,
}

/// Replay `stmts` on `conn`.
pub fn replay(conn: &Conn, stmts: &[String], keep: bool) -> Replay {
    let mut r = Replay {
        latency: Histogram::new_with_bounds(1, 60_000_000, 3).ok(),
        ..Replay::default()
    };
    let mut i = 0;
    let mut txn_start: Option<(usize, usize)> = None;
    let mut backoff = Duration::from_micros(100);
    while i < stmts.len() {
        let s = &stmts[i];
        let head: String = s
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        if head == "BEGIN" {
            txn_start = Some((i, r.outcomes.len()));
        }
        let t0 = Instant::now();
        let out = conn.run(s);
        let us = t0.elapsed().as_micros() as u64;
        match out {
            Err(Fail::Busy) => {
                r.retries += 1;
                if let Some((b, k)) = txn_start.take() {
                    let _ = conn.run("ROLLBACK");
                    // The transaction's statements run again: counted once.
                    r.statements -= (i - b) as u64;
                    i = b;
                    r.outcomes.truncate(k);
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(20));
                continue;
            }
            Ok(o) => {
                if keep {
                    r.outcomes.push(o);
                }
            }
            Err(Fail::Other(e)) => {
                r.errors += 1;
                if r.error_samples.len() < 5 {
                    r.error_samples.push(format!("{s}: {e}"));
                }
                if keep {
                    r.outcomes.push(Outcome::Error(e));
                }
            }
        }
        backoff = Duration::from_micros(100);
        if matches!(head.as_str(), "COMMIT" | "END" | "ROLLBACK") {
            txn_start = None;
        }
        if let Some(h) = r.latency.as_mut() {
            let _ = h.record(us.max(1));
        }
        r.statements += 1;
        i += 1;
    }
    r
}

/// Build the starting database at `path` for `side` from `loading.sql`.
pub fn load(side: &Side, path: &Path, dir: &Path, sync: &str) -> Result<(), String> {
    let sql = std::fs::read_to_string(dir.join("loading.sql"))
        .map_err(|e| format!("{}: {e}", dir.join("loading.sql").display()))?;
    let conn = Conn::open(side, path, sync)?;
    match &conn {
        Conn::Sqlite(c) => c.execute_batch(&sql).map_err(|e| e.to_string()),
        Conn::Twinpage(c) => c.execute_batch(&sql).map_err(|e| e.to_string()),
    }
}

/// A serial replay of every benchset file on one connection: each
/// statement's outcome, and the final contents.
pub type SerialRun = (Vec<Outcome>, Dump);

/// Load and replay the trace serially on `side` in `work`, keeping every
/// outcome (the differential check).
pub fn serial_outcomes(
    side: &Side,
    dir: &Path,
    work: &Path,
    sync: &str,
) -> Result<SerialRun, String> {
    let path = work.join(side.file_name());
    load(side, &path, dir, sync)?;
    let conn = Conn::open(side, &path, sync)?;
    let mut all = Vec::new();
    for (name, stmts) in benchset(dir)? {
        let r = replay(&conn, &stmts, true);
        if r.errors > 0 {
            return Err(format!(
                "{}: {name}: {} errors, e.g. {:?}",
                side.name(),
                r.errors,
                r.error_samples
            ));
        }
        all.extend(r.outcomes);
    }
    let dump = conn.dump()?;
    Ok((all, dump))
}

/// The first difference between two serial runs, if any.
pub fn first_difference(a: &SerialRun, b: &SerialRun) -> Option<String> {
    if a.0.len() != b.0.len() {
        return Some(format!("{} vs {} statements", a.0.len(), b.0.len()));
    }
    if let Some(i) = a.0.iter().zip(&b.0).position(|(x, y)| x != y) {
        return Some(format!(
            "statement {i}: {:?} vs {:?}",
            truncate(&a.0[i]),
            truncate(&b.0[i])
        ));
    }
    for ((ta, ra), (tb, rb)) in a.1.iter().zip(&b.1) {
        if ta != tb || ra != rb {
            return Some(format!("final contents of {ta} / {tb} differ"));
        }
    }
    (a.1.len() != b.1.len()).then(|| "different tables at the end".to_string())
}

fn truncate(o: &Outcome) -> String {
    let s = format!("{o:?}");
    s.chars().take(200).collect()
}

struct Measured {
    side: Side,
    statements: u64,
    errors: u64,
    retries: u64,
    secs: f64,
    latency: Histogram<u64>,
    io: IoSnapshot,
    device: Option<DiskStat>,
    samples: Vec<String>,
}

fn twinpage_io(side: &Side, path: &Path) -> Option<twinpage::Db> {
    // A handle on the database the SQL connections opened (one process
    // shares one open database), for its I/O counters.
    let Side::Twinpage(m, _) = side else {
        return None;
    };
    let mode: twinpage::JournalMode = m.parse().ok()?;
    twinpage::Db::open(path, twinpage::Options::default().journal_mode(mode)).ok()
}

fn io_now(side: &Side, handle: Option<&twinpage::Db>) -> IoSnapshot {
    match (side, handle) {
        (Side::Sqlite(_), _) => vfs::snapshot(),
        (Side::Twinpage(..), Some(db)) => db.io_counters(),
        _ => IoSnapshot::default(),
    }
}

fn measure(a: &TraceArgs, side: &Side, work: &Path) -> Result<Measured, String> {
    let path = work.join(side.file_name());
    load(side, &path, &a.dir, &a.synchronous)?;
    blockdev::isolate();
    let files = benchset(&a.dir)?;
    let dev = BlockDev::for_dir(work);
    let mut conns: Vec<Conn> = if a.serial {
        vec![Conn::open(side, &path, &a.synchronous)?]
    } else {
        files
            .iter()
            .map(|_| Conn::open(side, &path, &a.synchronous))
            .collect::<Result<_, _>>()?
    };
    let handle = twinpage_io(side, &path);
    let io0 = io_now(side, handle.as_ref());
    let d0 = dev.as_ref().and_then(BlockDev::snapshot);
    let t0 = Instant::now();
    let results: Vec<Replay> = if a.serial {
        files
            .iter()
            .map(|(_, stmts)| replay(&conns[0], stmts, false))
            .collect()
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = files
                .iter()
                .zip(conns.drain(..))
                .map(|((_, stmts), c)| s.spawn(move || replay(&c, stmts, false)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        })
    };
    let secs = t0.elapsed().as_secs_f64();
    drop(conns);
    let io = io_now(side, handle.as_ref()) - io0;
    blockdev::syncfs(work);
    let device = match (dev.as_ref().and_then(BlockDev::snapshot), d0) {
        (Some(d1), Some(d0)) => Some(d1.delta(&d0)),
        _ => None,
    };
    drop(handle);
    let mut latency = Histogram::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?;
    let mut m = Measured {
        side: side.clone(),
        statements: 0,
        errors: 0,
        retries: 0,
        secs,
        latency: Histogram::new(3).map_err(|e| e.to_string())?,
        io,
        device,
        samples: Vec::new(),
    };
    for r in results {
        m.statements += r.statements;
        m.errors += r.errors;
        m.retries += r.retries;
        m.samples.extend(r.error_samples);
        if let Some(h) = &r.latency {
            let _ = latency.add(h);
        }
    }
    m.latency = latency;
    Ok(m)
}

/// Stock SQLite WAL and persist, and every twinpage mode with every
/// protocol its registry entry allows (the first, its default, unnamed).
fn default_sides() -> Vec<Side> {
    let mut v = vec![Side::Sqlite("wal".into()), Side::Sqlite("persist".into())];
    for m in twinpage::JournalMode::ALL {
        for (i, &p) in m.spec().protocols.iter().enumerate() {
            v.push(Side::Twinpage(m.name().to_string(), (i > 0).then_some(p)));
        }
    }
    v
}

/// Run `twinpage bench trace`.
pub fn run(a: &TraceArgs) -> Result<(), BenchError> {
    vfs::register().map_err(BenchError::Msg)?;
    let sides: Vec<Side> = if a.engines.is_empty() {
        default_sides()
    } else {
        Side::parse_list(&a.engines).map_err(BenchError::Msg)?
    };
    let _image;
    let tmp = tempfile::tempdir().map_err(|e| BenchError::Io("tempdir".into(), e))?;
    let work: PathBuf = match (&a.ext4_image, &a.work_dir) {
        (Some(size), _) => {
            let size = blockdev::parse_size(size).map_err(BenchError::Msg)?;
            let img = Ext4Image::create(size, &std::env::temp_dir())?;
            let m = img.mount.clone();
            _image = Some(img);
            m
        }
        (None, Some(d)) => d.clone(),
        (None, None) => tmp.path().to_path_buf(),
    };
    println!(
        "trace {} ({} mode), synchronous={}, SQLite {} on both sides",
        a.dir.display(),
        if a.serial || a.compare {
            "serial"
        } else {
            "concurrent"
        },
        a.synchronous,
        twinpage_sql::Connection::sqlite_version()
    );
    if a.compare {
        let reference = serial_outcomes(&Side::Sqlite("wal".into()), &a.dir, &work, &a.synchronous)
            .map_err(BenchError::Msg)?;
        let selects = reference
            .0
            .iter()
            .filter(|o| matches!(o, Outcome::Rows(_)))
            .count();
        let mut failed = false;
        for side in sides.iter().filter(|s| matches!(s, Side::Twinpage(..))) {
            let run =
                serial_outcomes(side, &a.dir, &work, &a.synchronous).map_err(BenchError::Msg)?;
            match first_difference(&reference, &run) {
                None => println!(
                    "{}: same as stock SQLite: {} statements ({} SELECTs) and {} tables' final rows",
                    side.name(),
                    run.0.len(),
                    selects,
                    run.1.len() - 1
                ),
                Some(d) => {
                    failed = true;
                    println!("{}: DIFFERS from stock SQLite: {d}", side.name());
                }
            }
        }
        if failed {
            return Err(BenchError::Msg("results differ from stock SQLite".into()));
        }
        return Ok(());
    }
    println!(
        "| engine | statements | errors | busy retries | seconds | statements/s | p50 µs | p99 µs | p99.9 µs | writes/stmt | KiB written/stmt | syncs/stmt | device KiB/stmt | device writes/stmt |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    let mut errors = 0;
    for side in &sides {
        let m = measure(a, side, &work).map_err(BenchError::Msg)?;
        let n = m.statements.max(1) as f64;
        let syncs = m.io.fdatasync + m.io.fsync;
        let (dk, dw) = match m.device {
            Some(d) => (
                format!("{:.2}", d.sectors_written as f64 * 0.5 / n),
                format!("{:.2}", d.writes as f64 / n),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "| `{}` | {} | {} | {} | {:.2} | {:.0} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {dk} | {dw} |",
            m.side.name(),
            m.statements,
            m.errors,
            m.retries,
            m.secs,
            m.statements as f64 / m.secs.max(1e-9),
            m.latency.value_at_quantile(0.5),
            m.latency.value_at_quantile(0.99),
            m.latency.value_at_quantile(0.999),
            m.io.write_calls as f64 / n,
            m.io.bytes_written as f64 / 1024.0 / n,
            syncs as f64 / n,
        );
        for s in &m.samples {
            eprintln!("  {}: {s}", m.side.name());
        }
        errors += m.errors;
    }
    if errors > 0 {
        return Err(BenchError::Msg(format!("{errors} statements failed")));
    }
    Ok(())
}
