//! `twinpage bench`: twinpage's recovery schemes side by side with real
//! SQLite and the physical floor, on the same workload, counted the same
//! way. See docs/BENCH.md.
//!
//! * `twinpage bench` — the default suite: insert, update and delete, one
//!   row per auto-commit transaction, every twinpage mode, SQLite's five
//!   journal modes at synchronous=full, and the floor.
//! * `twinpage bench mobibench` — one Mobibench workload, every knob.
//! * `twinpage bench cpu` — CPU per insert, update, delete, select and
//!   100-row scan with the disk out of the picture, beside SQLite.
//! * `twinpage bench readers` — point reads from 1, 2, 4 threads, warm and cold cache.
//! * `twinpage bench long-reader` — the log's size while a reader stays
//!   open across an update run, beside SQLite's.
//! * `twinpage bench recovery` — time to open and query after a crash in
//!   the middle of a commit.
//!
//! Submodules: [`workload`] (the op stream), [`engines`] (twinpage, SQLite
//! with its counting VFS, the floor), [`blockdev`] (diskstats, loop
//! image), [`report`] (table, JSON, chart), [`recovery`].

pub mod blockdev;
pub mod cpu;
pub mod engines;
pub mod figure;
pub mod longreader;
pub mod readers;
pub mod recovery;
pub mod report;
pub mod trace;
pub mod verify;
pub mod workload;

use blockdev::{BlockDev, DiskStat, Ext4Image};
use engines::{EngineSpec, TxnError};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use twinpage::base::timers;
use twinpage::cc::Protocol;
use twinpage::storage::IoSnapshot;
use workload::{KeyDist, KeySharing, Operation, PrefillOrder, Workload, WorkloadSpec};

/// Errors of the benchmark tool.
#[derive(Debug)]
pub enum BenchError {
    /// From twinpage.
    Engine(twinpage::Error),
    /// From SQLite.
    Sqlite(rusqlite::Error),
    /// An OS call, with what was being done.
    Io(String, std::io::Error),
    /// Anything else (bad arguments, failed checks).
    Msg(String),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Engine(e) => write!(f, "twinpage: {e}"),
            BenchError::Sqlite(e) => write!(f, "SQLite: {e}"),
            BenchError::Io(what, e) => write!(f, "{what}: {e}"),
            BenchError::Msg(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<twinpage::Error> for BenchError {
    fn from(e: twinpage::Error) -> Self {
        BenchError::Engine(e)
    }
}

impl From<rusqlite::Error> for BenchError {
    fn from(e: rusqlite::Error) -> Self {
        BenchError::Sqlite(e)
    }
}

impl From<workload::SpecError> for BenchError {
    fn from(e: workload::SpecError) -> Self {
        BenchError::Msg(e.0)
    }
}

/// Arguments of `twinpage bench`. Without a subcommand it runs the
/// default suite.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// What to run (default: the default suite).
    #[command(subcommand)]
    pub cmd: Option<Box<BenchCmd>>,
    /// Options of the default suite (boxed: the CLI enum stays small).
    #[command(flatten)]
    pub suite: Box<SuiteArgs>,
}

/// Subcommands of `twinpage bench`.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// One Mobibench workload on the chosen engines.
    Mobibench(MobibenchArgs),
    /// Time open + first query after a crash in the middle of a commit.
    Recovery(recovery::RecoveryArgs),
    /// Point reads from several threads at once (warm and cold cache).
    Readers(readers::ReadersArgs),
    /// The log's size while one reader stays open across an update run,
    /// twinpage's WAL beside SQLite's.
    LongReader(longreader::LongReaderArgs),
    /// CPU per operation with the disk out of the picture (synchronous=off
    /// or in memory), twinpage's API beside SQLite's prepared statements.
    Cpu(cpu::CpuArgs),
    /// Replay real app SQL traces on stock SQLite and twinpage-SQL.
    Trace(trace::TraceArgs),
    /// Internal: one engine and operation, for instruction counters.
    #[command(hide = true)]
    CpuChild(cpu::CpuChildArgs),
    /// Internal: the process the recovery benchmark kills.
    #[command(hide = true)]
    CrashChild(recovery::ChildArgs),
    /// One figure of a paper (`list` shows them): table, the paper's
    /// claims beside ours, JSON and chart.
    Figure(figure::FigureArgs),
}

/// Where the benchmark runs.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EnvArgs {
    /// Directory for the databases (default: a fresh temporary directory,
    /// removed afterwards). Each engine gets a fresh subdirectory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Run on a fresh ext4 file system of this size (e.g. 256M) in an
    /// image file on a loop device (needs root; otherwise runs in --dir).
    #[arg(long, value_name = "SIZE")]
    pub ext4_image: Option<String>,
    /// Directory for the image file (default: the system temp directory).
    #[arg(long, value_name = "DIR")]
    pub image_dir: Option<PathBuf>,
    /// Do not sync and drop the page cache between engines.
    #[arg(long)]
    pub no_isolate: bool,
}

/// How the results are written.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// Engine the ratios are relative to.
    #[arg(long, default_value = "sqlite:wal")]
    pub baseline: String,
    /// Write every figure as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw throughput and I/O per transaction (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,
    /// Write the tables as Markdown.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// TrueType font for the chart (default: DejaVu Sans from
    /// fonts-dejavu-core, or $TWINPAGE_FONT).
    #[arg(long, value_name = "TTF")]
    pub font: Option<PathBuf>,
}

/// Options of the default suite.
#[derive(clap::Args, Debug, Clone)]
pub struct SuiteArgs {
    /// Measured transactions per workload and engine.
    #[arg(long, default_value_t = 2000)]
    pub txns: u64,
    /// Rows loaded before measuring.
    #[arg(long, default_value_t = 5000)]
    pub prefill: u64,
    /// Bytes of the Value column.
    #[arg(long, default_value_t = 100)]
    pub record_size: usize,
    /// Random seed of the op stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run every engine this many times (round robin); timings are medians.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Engines (repeatable; default: every twinpage mode, SQLite
    /// delete/truncate/persist/wal/off at synchronous=full, floor).
    #[arg(long = "engine", value_name = "SPEC")]
    pub engines: Vec<String>,
    /// Where to run.
    #[command(flatten)]
    pub env: EnvArgs,
    /// Output.
    #[command(flatten)]
    pub report: ReportArgs,
}

/// Arguments of `twinpage bench mobibench`.
#[derive(clap::Args, Debug, Clone)]
pub struct MobibenchArgs {
    /// Operation.
    #[arg(long, value_enum, default_value_t = Operation::Insert)]
    pub op: Operation,
    /// Fraction of writes for --op mix.
    #[arg(long, default_value_t = 0.5)]
    pub write_ratio: f64,
    /// Measured transactions (all threads together).
    #[arg(long, default_value_t = 5000)]
    pub txns: u64,
    /// Rows loaded into every table before measuring.
    #[arg(long, default_value_t = 5000)]
    pub prefill: u64,
    /// Operations per transaction (1 = auto-commit; up to 20).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub ops_per_txn: u32,
    /// Bytes of the Value column (Mobibench: 100; the papers also use 128).
    #[arg(long, default_value_t = 100)]
    pub record_size: usize,
    /// Key distribution of update, delete and select.
    #[arg(long, value_enum, default_value_t = KeyDist::Uniform)]
    pub dist: KeyDist,
    /// Zipf skew factor.
    #[arg(long, default_value_t = 0.99)]
    pub zipf_s: f64,
    /// Number of tables.
    #[arg(long, default_value_t = 1)]
    pub tables: u32,
    /// Threads (1..=8), each with its own connection/handle.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub threads: u32,
    /// Whether the threads own disjoint key ranges or pick from the same
    /// rows (conflicts, as in the IPS paper's concurrent Mobibench).
    #[arg(long, value_enum, default_value_t = KeySharing::Disjoint)]
    pub keys: KeySharing,
    /// Load the pre-fill in ascending key order (full leaves) or in a
    /// random order (leaves about two-thirds full).
    #[arg(long, value_enum, default_value_t = PrefillOrder::Sequential)]
    pub prefill_order: PrefillOrder,
    /// Random seed of the op stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run every engine this many times (round robin); timings are medians.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Engines (repeatable): twinpage:MODE[,opt=val..], sqlite:MODE[,pragma=val..], floor.
    /// Default: the default suite's list.
    #[arg(long = "engine", value_name = "SPEC")]
    pub engines: Vec<String>,
    /// Where to run.
    #[command(flatten)]
    pub env: EnvArgs,
    /// Output.
    #[command(flatten)]
    pub report: ReportArgs,
}

/// Run `twinpage bench`; returns the process exit code. Errors are
/// printed here, so the caller only sees the code.
pub fn run(a: Args) -> twinpage::Result<i32> {
    let r = match a.cmd.map(|c| *c) {
        None => run_suite(&a.suite),
        Some(BenchCmd::Mobibench(m)) => run_mobibench(&m),
        Some(BenchCmd::Recovery(r)) => recovery::run(&r),
        Some(BenchCmd::Readers(r)) => readers::run(&r),
        Some(BenchCmd::LongReader(l)) => longreader::run(&l),
        Some(BenchCmd::Cpu(c)) => cpu::run(&c),
        Some(BenchCmd::Trace(t)) => trace::run(&t),
        Some(BenchCmd::CpuChild(c)) => cpu::child(&c),
        Some(BenchCmd::CrashChild(c)) => recovery::child(&c),
        Some(BenchCmd::Figure(f)) => figure::run(&f),
    };
    match r {
        Ok(()) => Ok(0),
        Err(e) => {
            eprintln!("twinpage bench: {e}");
            Ok(1)
        }
    }
}

/// The directory, file system and device the benchmark runs on.
pub struct Env {
    /// Where engine directories are created.
    pub dir: PathBuf,
    /// The block device, when /proc/diskstats lists it.
    pub blockdev: Option<BlockDev>,
    /// Sync and drop caches between engines.
    pub isolate: bool,
    /// Human-readable facts about the environment, printed and saved.
    pub notes: Vec<(String, String)>,
    // Dropped last: the engines' files live inside.
    _tmp: Option<tempfile::TempDir>,
    _image: Option<Ext4Image>,
}

impl Env {
    /// Set up the directory (and image) described by `a`.
    pub fn new(a: &EnvArgs) -> Result<Env, BenchError> {
        let mut notes = Vec::new();
        let mut image = None;
        if let Some(size) = &a.ext4_image {
            let size = blockdev::parse_size(size).map_err(BenchError::Msg)?;
            let parent = a.image_dir.clone().unwrap_or_else(std::env::temp_dir);
            match Ext4Image::create(size, &parent) {
                Ok(img) => {
                    notes.push((
                        "ext4 image".into(),
                        format!(
                            "{} MiB at {} on {}, mkfs.ext4 -E lazy_itable_init=0,lazy_journal_init=0",
                            size >> 20,
                            img.image().display(),
                            img.device
                        ),
                    ));
                    image = Some(img);
                }
                Err(e) => {
                    eprintln!("twinpage bench: cannot use an ext4 image ({e}); running in the given directory instead");
                    notes.push(("ext4 image".into(), format!("not used: {e}")));
                }
            }
        }
        let mut tmp = None;
        let dir = if let Some(img) = &image {
            img.mount.clone()
        } else if let Some(d) = &a.dir {
            std::fs::create_dir_all(d)
                .map_err(|e| BenchError::Io(format!("mkdir {}", d.display()), e))?;
            d.clone()
        } else {
            let t = tempfile::Builder::new()
                .prefix("twinpage-bench")
                .tempdir()
                .map_err(|e| BenchError::Io("mkdtemp".into(), e))?;
            let p = t.path().to_path_buf();
            tmp = Some(t);
            p
        };
        let blockdev = BlockDev::for_dir(&dir);
        notes.push(("directory".into(), dir.display().to_string()));
        notes.push(("file system".into(), describe_fs(&dir)));
        notes.push((
            "block device".into(),
            match &blockdev {
                Some(b) => format!("{} ({}:{}) from /proc/diskstats", b.name, b.major, b.minor),
                None => "none visible in /proc/diskstats: block columns unavailable".into(),
            },
        ));
        let isolate = !a.no_isolate;
        Ok(Env {
            dir,
            blockdev,
            isolate,
            notes,
            _tmp: tmp,
            _image: image,
        })
    }
}

/// "ext4 /dev/loop0 rw,relatime" for the mount holding `dir`.
fn describe_fs(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let mp = Path::new(f[1]);
        if dir.starts_with(mp) {
            let len = f[1].len();
            if best.as_ref().is_none_or(|(l, _)| len >= *l) {
                best = Some((len, format!("{} on {} ({})", f[2], f[0], f[3])));
            }
        }
    }
    best.map(|(_, s)| s).unwrap_or_else(|| "unknown".into())
}

/// Everything measured in one run of one engine on one workload.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Workload name (insert, update, ...).
    pub workload: String,
    /// The `--engine` string as given.
    pub engine: String,
    /// Settings in effect.
    pub settings: Vec<(String, String)>,
    /// Measured transactions.
    pub txns: u64,
    /// Measured operations.
    pub ops: u64,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Transaction latency in nanoseconds (including retries).
    pub latency: Histogram<u64>,
    /// I/O calls of the measured phase.
    pub io: IoSnapshot,
    /// Device counters of the measured phase.
    pub block: Option<DiskStat>,
    /// Size of the database file at the end.
    pub db_bytes: u64,
    /// Size of every other file of the engine at the end.
    pub aux_bytes: u64,
    /// User CPU time of the measured phase.
    pub user_cpu: Duration,
    /// System CPU time of the measured phase.
    pub sys_cpu: Duration,
    /// Attempts rolled back (a conflict or a busy lock) and replayed.
    pub aborts: u64,
    /// Of those, refused by the concurrency protocol (a conflict).
    pub conflicts: u64,
    /// Transactions that needed at least one retry.
    pub retried_txns: u64,
    /// The most attempts one transaction lost.
    pub max_aborts_per_txn: u64,
    /// Where the transactions' time went, summed over them.
    pub breakdown: Breakdown,
    /// What the check after the run compared.
    pub verified: verify::Verified,
    /// The engine's integrity check after the run (`None`: it has none).
    pub integrity: Option<String>,
    /// The concurrency protocol's counters over the measured phase
    /// (`max_*` as at the end, the others as differences).
    pub protocol: Vec<(String, u64)>,
}

/// Transaction time split by what it was spent on, in nanoseconds summed
/// over the committed transactions (\[IPS\] Fig. 10): the successful
/// attempt's waits and I/O from the thread's clocks
/// ([`twinpage::base::timers`]; SQLite's counting VFS adds to the same
/// clocks, its busy handler's sleeps as lock wait), the attempts that were
/// rolled back and the backoff before each replay as `replay`, and the
/// rest of the successful attempt as compute.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Breakdown {
    /// Waiting for locks.
    pub lock_wait_ns: u64,
    /// 2VTO's forced sleep before a replay.
    pub forced_sleep_ns: u64,
    /// 2VTO's wait for the commit turn.
    pub commit_wait_ns: u64,
    /// Rolled-back attempts and the backoff before each replay.
    pub replay_ns: u64,
    /// `pwrite` of the successful attempt.
    pub write_ns: u64,
    /// `fdatasync`/`fsync` of the successful attempt.
    pub sync_ns: u64,
    /// Every transaction's whole latency.
    pub total_ns: u64,
}

impl Breakdown {
    /// What is left of the total: computing (and waits nothing timed).
    pub fn compute_ns(&self) -> u64 {
        self.total_ns.saturating_sub(
            self.lock_wait_ns
                + self.forced_sleep_ns
                + self.commit_wait_ns
                + self.replay_ns
                + self.write_ns
                + self.sync_ns,
        )
    }

    fn add(&mut self, o: &Breakdown) {
        self.lock_wait_ns += o.lock_wait_ns;
        self.forced_sleep_ns += o.forced_sleep_ns;
        self.commit_wait_ns += o.commit_wait_ns;
        self.replay_ns += o.replay_ns;
        self.write_ns += o.write_ns;
        self.sync_ns += o.sync_ns;
        self.total_ns += o.total_ns;
    }
}

fn rusage() -> (Duration, Duration) {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

fn file_sizes(dir: &Path) -> (u64, u64) {
    let (mut db, mut aux) = (0, 0);
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            if e.file_name() == engines::DB_FILE {
                db += len;
            } else {
                aux += len;
            }
        }
    }
    (db, aux)
}

/// A progress bar on stderr, hidden when stderr is not a terminal.
pub fn progress(len: u64, msg: String) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let pb = ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:<32} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg);
    pb
}

/// Give up a transaction after this many busy retries.
const MAX_RETRIES: u32 = 10_000;

/// Run `w` on a fresh instance of `spec` in a new subdirectory of `env`.
pub fn run_one(
    env: &Env,
    spec: &EngineSpec,
    w: &Workload,
    run_index: usize,
) -> Result<RunResult, BenchError> {
    let sub: String = spec
        .label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = env.dir.join(format!("{run_index:03}-{}-{sub}", w.spec.op));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| BenchError::Io(format!("rm -r {}", dir.display()), e))?;
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| BenchError::Io(format!("mkdir {}", dir.display()), e))?;
    if env.isolate {
        blockdev::isolate();
    }
    let engine = engines::open(spec, &dir)?;
    engine.load(w)?;
    // The pre-fill's writeback must not land in the measurement.
    blockdev::syncfs(&dir);
    if env.isolate {
        std::thread::sleep(Duration::from_millis(300));
    }

    let pb = progress(w.total_txns(), format!("{} {}", w.spec.op, spec.label));
    let threads = w.threads.len();
    let barrier = Barrier::new(threads + 1);
    let engine_ref = &*engine;
    type ThreadOut = Result<Driven, BenchError>;
    let afuw = spec.protocol() == Some(Protocol::TwoVto);
    let mut protocol_start = Vec::new();
    let mut start = (
        IoSnapshot::default(),
        None,
        (Duration::ZERO, Duration::ZERO),
    );
    let mut end = start;
    let mut elapsed = Duration::ZERO;
    let mut sizes = (0, 0);
    let mut protocol_end = Vec::new();
    let outs: Vec<ThreadOut> = std::thread::scope(|s| {
        let handles: Vec<_> = w
            .threads
            .iter()
            .map(|txns| {
                let barrier = &barrier;
                let pb = pb.clone();
                s.spawn(move || -> ThreadOut {
                    let worker = engine_ref.worker(w);
                    barrier.wait(); // A: every worker is ready
                    barrier.wait(); // B: counters are read, go
                    let r = match worker {
                        Ok(mut wk) => drive(&mut *wk, txns, &pb, afuw),
                        Err(e) => Err(e),
                    };
                    barrier.wait(); // C: done
                    barrier.wait(); // D: end counters are read
                    r
                })
            })
            .collect();
        barrier.wait(); // A
        protocol_start = engine_ref.protocol_counters();
        start = (
            engine_ref.io(),
            env.blockdev.as_ref().and_then(|b| b.snapshot()),
            rusage(),
        );
        let t0 = Instant::now();
        barrier.wait(); // B
        barrier.wait(); // C
        elapsed = t0.elapsed();
        end = (
            engine_ref.io(),
            env.blockdev.as_ref().and_then(|b| b.snapshot()),
            rusage(),
        );
        sizes = file_sizes(&dir);
        protocol_end = engine_ref.protocol_counters();
        barrier.wait(); // D
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Msg("worker thread panicked".into())))
            })
            .collect()
    });
    pb.finish_and_clear();
    let mut latency = Histogram::<u64>::new(3).map_err(|e| BenchError::Msg(e.to_string()))?;
    let mut d = Driven::default();
    let mut missed = Vec::with_capacity(outs.len());
    for o in outs {
        let o = o?;
        latency
            .add(&o.latency)
            .map_err(|e| BenchError::Msg(e.to_string()))?;
        d.aborts += o.aborts;
        d.conflicts += o.conflicts;
        d.retried += o.retried;
        d.max_aborts = d.max_aborts.max(o.max_aborts);
        d.breakdown.add(&o.breakdown);
        missed.push(o.missed);
    }
    let protocol: Vec<(String, u64)> = protocol_end
        .iter()
        .map(|(k, v)| {
            let before = protocol_start
                .iter()
                .find(|(a, _)| a == k)
                .map_or(0, |x| x.1);
            let v = if k.starts_with("max_") {
                *v
            } else {
                v.saturating_sub(before)
            };
            (k.clone(), v)
        })
        .collect();
    if afuw {
        // AFUW's promise, checked on the engine's own counters too.
        let get = |name: &str| protocol.iter().find(|(k, _)| k == name).map_or(0, |x| x.1);
        if get("second_aborts") > 0 || get("max_aborts_per_txn") > 1 {
            return Err(BenchError::Msg(format!(
                "{}: 2VTO/AFUW let a transaction abort more than once ({protocol:?})",
                spec.label
            )));
        }
    }
    let verified = verify::check(engine_ref, &spec.label, w, &missed)?;
    let integrity = engine.integrity()?;
    if let Some(i) = integrity.as_deref().filter(|i| *i != "ok") {
        return Err(BenchError::Msg(format!(
            "{}: integrity check after the run: {i}",
            spec.label
        )));
    }
    let settings = engine.settings();
    engine.close()?;
    let _ = std::fs::remove_dir_all(&dir);
    let block = match (end.1, start.1) {
        (Some(e), Some(s)) => Some(e.delta(&s)),
        _ => None,
    };
    Ok(RunResult {
        workload: w.spec.op.to_string(),
        engine: spec.label.clone(),
        settings,
        txns: w.total_txns(),
        ops: w.total_ops(),
        elapsed,
        latency,
        io: end.0 - start.0,
        block,
        db_bytes: sizes.0,
        aux_bytes: sizes.1,
        user_cpu: end.2 .0.saturating_sub(start.2 .0),
        sys_cpu: end.2 .1.saturating_sub(start.2 .1),
        aborts: d.aborts,
        conflicts: d.conflicts,
        retried_txns: d.retried,
        max_aborts_per_txn: d.max_aborts,
        breakdown: d.breakdown,
        verified,
        integrity,
        protocol,
    })
}

/// What one thread's measured loop returns.
struct Driven {
    latency: Histogram<u64>,
    aborts: u64,
    conflicts: u64,
    retried: u64,
    max_aborts: u64,
    breakdown: Breakdown,
    /// Each transaction's miss mask ([`engines::Worker::run`]).
    missed: Vec<u32>,
}

impl Default for Driven {
    fn default() -> Self {
        Driven {
            latency: Histogram::new(3).expect("3 significant digits is valid"),
            aborts: 0,
            conflicts: 0,
            retried: 0,
            max_aborts: 0,
            breakdown: Breakdown::default(),
            missed: Vec::new(),
        }
    }
}

/// The backoff before a replay, doubling from this (as `Db::write`)...
const BACKOFF_START: Duration = Duration::from_micros(20);
/// ...up to this.
const BACKOFF_MAX: Duration = Duration::from_millis(5);

/// One thread's measured loop. A transaction that fails with a conflict or
/// a busy lock was rolled back; it is replayed on the same thread after a
/// backoff, as `Db::write` replays (twinpage's 2VTO ties the replay to its
/// aborted transaction through the thread). With `afuw` (2VTO's AFUW) a
/// second abort of one write transaction ends the run: the protocol
/// promises at most one.
fn drive(
    wk: &mut dyn engines::Worker,
    txns: &[workload::Txn],
    pb: &ProgressBar,
    afuw: bool,
) -> Result<Driven, BenchError> {
    let mut d = Driven::default();
    d.missed.reserve(txns.len());
    for (i, txn) in txns.iter().enumerate() {
        let t0 = Instant::now();
        let mut attempts = 0u32;
        let mut backoff = BACKOFF_START;
        loop {
            let a0 = Instant::now();
            let c0 = timers::thread_times();
            let why = match wk.run(txn) {
                Ok(m) => {
                    let c = timers::thread_times() - c0;
                    let b = &mut d.breakdown;
                    b.lock_wait_ns += c.lock_wait_ns;
                    b.forced_sleep_ns += c.forced_sleep_ns;
                    b.commit_wait_ns += c.commit_wait_ns;
                    b.write_ns += c.write_ns;
                    b.sync_ns += c.sync_ns;
                    b.replay_ns += (a0 - t0).as_nanos() as u64;
                    d.missed.push(m);
                    break;
                }
                Err(TxnError::Busy(m)) => m,
                Err(TxnError::Conflict(m)) => {
                    d.conflicts += 1;
                    m
                }
                Err(TxnError::Fatal(e)) => return Err(e),
            };
            d.aborts += 1;
            attempts += 1;
            if attempts == 1 {
                d.retried += 1;
            }
            // AFUW bounds write transactions; a reader whose snapshot two
            // commits overwrote retries as often as that happens.
            if afuw && attempts > 1 && txn.writes() {
                return Err(BenchError::Msg(format!(
                    "2VTO/AFUW: a transaction aborted a second time ({why})"
                )));
            }
            if attempts >= MAX_RETRIES {
                return Err(BenchError::Msg(format!(
                    "transaction still failing after {MAX_RETRIES} retries: {why}"
                )));
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
        d.max_aborts = d.max_aborts.max(u64::from(attempts));
        let total = t0.elapsed().as_nanos() as u64;
        d.breakdown.total_ns += total;
        d.latency
            .record(total)
            .map_err(|e| BenchError::Msg(e.to_string()))?;
        if i % 16 == 15 {
            pb.inc(16);
        }
    }
    Ok(d)
}

/// Parse the `--engine` list (or the default one).
fn engine_specs(list: &[String]) -> Result<Vec<EngineSpec>, BenchError> {
    let list = if list.is_empty() {
        engines::default_engines()
    } else {
        list.to_vec()
    };
    list.iter().map(|s| s.parse()).collect()
}

/// Run every engine on every workload, `repeat` times round robin, and
/// summarise (medians of timings; I/O from the first round, checked for
/// equality across rounds).
pub fn run_matrix(
    env: &Env,
    specs: &[EngineSpec],
    workloads: &[Workload],
    repeat: u32,
) -> Result<Vec<report::Summary>, BenchError> {
    let mut out = Vec::new();
    let mut idx = 0;
    for w in workloads {
        let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); specs.len()];
        for _ in 0..repeat.max(1) {
            for (i, spec) in specs.iter().enumerate() {
                idx += 1;
                let r = run_one(env, spec, w, idx)?;
                eprintln!("{}", report::one_line(&r));
                runs[i].push(r);
            }
        }
        for r in runs {
            out.push(report::Summary::from_runs(r));
        }
    }
    Ok(out)
}

/// Load average and I/O pressure of the host: other work on the machine
/// disturbs the timings (not the counts), so every report shows it.
pub fn host_load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into());
    let psi = std::fs::read_to_string("/proc/pressure/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().find(|f| f.starts_with("avg60=")))
                .map(|f| format!(", I/O pressure (some) {}%", &f[6..]))
        })
        .unwrap_or_default();
    format!(
        "load average {load} on {} CPUs{psi}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    )
}

pub(crate) fn print_header(title: &str, env: &mut Env, extra: &[(String, String)]) {
    env.notes.push(("host load, start".into(), host_load()));
    println!("{title}");
    for (k, v) in extra.iter().chain(env.notes.iter()) {
        println!("  {k:<16} {v}");
    }
    println!(
        "  {:<16} {}",
        "isolation",
        if env.isolate {
            "sync + drop caches before each engine, syncfs + 300 ms pause after its pre-fill, fresh directory per engine"
        } else {
            "none (--no-isolate)"
        }
    );
    println!(
        "  {:<16} {}",
        "sqlite sync",
        if engines::vfs::SYNC_IS_FDATASYNC {
            "bundled SQLite built with HAVE_FDATASYNC: xSync = fdatasync()"
        } else {
            "bundled SQLite built without HAVE_FDATASYNC: xSync = fsync()"
        }
    );
}

fn finish(
    summaries: &[report::Summary],
    env: &mut Env,
    rep: &ReportArgs,
    settings: serde_json::Value,
) -> Result<(), BenchError> {
    let end = host_load();
    env.notes.push(("host load, end".into(), end.clone()));
    report::print_tables(summaries, &rep.baseline);
    report::print_settings(summaries);
    println!();
    println!("host load at the end: {end}");
    if let Some(path) = &rep.json {
        report::write_json(path, summaries, &rep.baseline, settings, &env.notes)?;
        println!("JSON written to {}", path.display());
    }
    if let Some(path) = &rep.markdown {
        std::fs::write(path, report::markdown(summaries, &rep.baseline, &env.notes))
            .map_err(|e| BenchError::Io(format!("write {}", path.display()), e))?;
        println!("Markdown written to {}", path.display());
    }
    if let Some(path) = &rep.chart {
        report::chart(path, summaries, rep.font.as_deref())?;
        println!("chart written to {}", path.display());
    }
    Ok(())
}

/// The default suite.
pub fn run_suite(a: &SuiteArgs) -> Result<(), BenchError> {
    let specs = engine_specs(&a.engines)?;
    let mut env = Env::new(&a.env)?;
    let mut workloads = Vec::new();
    for op in [Operation::Insert, Operation::Update, Operation::Delete] {
        let spec = WorkloadSpec {
            op,
            txns: a.txns,
            prefill: a.prefill,
            record_size: a.record_size,
            seed: a.seed,
            ..WorkloadSpec::default()
        };
        workloads.push(Workload::generate(&spec)?);
    }
    let desc = vec![(
        "workloads".to_string(),
        format!(
            "insert, update, delete; {} txns of 1 row (auto-commit) after a pre-fill of {} rows; {}-byte Value; uniform keys; 1 thread; seed {}; {} round(s)",
            a.txns, a.prefill, a.record_size, a.seed, a.repeat.max(1)
        ),
    )];
    print_header("twinpage bench: default suite", &mut env, &desc);
    let summaries = run_matrix(&env, &specs, &workloads, a.repeat)?;
    let settings = serde_json::json!({
        "suite": "default",
        "workloads": workloads.iter().map(|w| &w.spec).collect::<Vec<_>>(),
        "repeat": a.repeat.max(1),
    });
    finish(&summaries, &mut env, &a.report, settings)
}

/// `twinpage bench mobibench`.
pub fn run_mobibench(a: &MobibenchArgs) -> Result<(), BenchError> {
    let specs = engine_specs(&a.engines)?;
    let spec = WorkloadSpec {
        op: a.op,
        write_ratio: a.write_ratio,
        txns: a.txns,
        prefill: a.prefill,
        ops_per_txn: a.ops_per_txn,
        record_size: a.record_size,
        dist: a.dist,
        zipf_s: a.zipf_s,
        tables: a.tables,
        threads: a.threads,
        keys: a.keys,
        prefill_order: a.prefill_order,
        seed: a.seed,
    };
    let w = Workload::generate(&spec)?;
    let mut env = Env::new(&a.env)?;
    let desc = vec![(
        "workload".to_string(),
        format!(
            "{}{}; {} txns x {} op(s) after a pre-fill of {} rows/table ({:?} order); {}-byte Value; {} keys{}, {:?} between threads; {} table(s); {} thread(s); seed {}; {} round(s)",
            a.op,
            if matches!(a.op, Operation::Mix | Operation::SelectUpdate) { format!(" (write ratio {})", a.write_ratio) } else { String::new() },
            a.txns, a.ops_per_txn, a.prefill, a.prefill_order, a.record_size,
            match a.dist { KeyDist::Uniform => "uniform", KeyDist::Zipf => "zipf" },
            if a.dist == KeyDist::Zipf { format!(" (s={})", a.zipf_s) } else { String::new() },
            a.keys, a.tables, a.threads, a.seed, a.repeat.max(1)
        ),
    )];
    print_header("twinpage bench mobibench", &mut env, &desc);
    let summaries = run_matrix(&env, &specs, std::slice::from_ref(&w), a.repeat)?;
    let settings = serde_json::json!({
        "suite": "mobibench",
        "workloads": [&w.spec],
        "repeat": a.repeat.max(1),
    });
    finish(&summaries, &mut env, &a.report, settings)
}

/// A scratch directory for tests: tmpfs when available.
#[cfg(test)]
pub(crate) fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

/// A scratch directory for tests (tmpfs when available: syncs are free
/// there, so tests are fast and cover the "no block device" path) and a
/// benchmark environment in it that does not isolate runs.
#[cfg(test)]
pub(crate) fn scratch_env() -> (tempfile::TempDir, Env) {
    let tmp = scratch_dir();
    let env = Env::new(&EnvArgs {
        dir: Some(tmp.path().to_path_buf()),
        no_isolate: true,
        ..EnvArgs::default()
    })
    .expect("environment in a temporary directory");
    (tmp, env)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny run of every default engine on a temp dir (CI runs this).
    #[test]
    fn smoke_run() {
        let (_tmp, env) = scratch_env();
        let specs = engine_specs(&[]).unwrap();
        let mut workloads = Vec::new();
        for (op, ops) in [
            (Operation::Insert, 1),
            (Operation::Update, 3),
            (Operation::Delete, 1),
            (Operation::Mix, 2),
        ] {
            workloads.push(
                Workload::generate(&WorkloadSpec {
                    op,
                    txns: 20,
                    prefill: 50,
                    ops_per_txn: ops,
                    threads: if op == Operation::Mix { 2 } else { 1 },
                    ..WorkloadSpec::default()
                })
                .unwrap(),
            );
        }
        let s = run_matrix(&env, &specs, &workloads, 1).unwrap();
        assert_eq!(s.len(), specs.len() * workloads.len());
        for x in &s {
            assert_eq!(x.txns, 20, "{}", x.engine);
            // Every durable engine syncs at least once per write transaction.
            if x.engine != "twinpage:off" && x.engine != "sqlite:off" && x.workload != "mix" {
                assert!(x.io.fdatasync + x.io.fsync >= 20, "{} {}", x.engine, x.io);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("out.json");
        report::write_json(&json, &s, "sqlite:wal", serde_json::json!({}), &env.notes).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["runs"].as_array().unwrap().len(), s.len());
        assert!(v["runs"][0]["txn_per_sec"].as_f64().unwrap() > 0.0);
        report::print_tables(&s, "sqlite:wal");
    }

    /// Shared keys: threads conflict, every protocol replays, and the
    /// per-key model checks what each engine holds at the end.
    #[test]
    fn shared_keys_run() {
        let (_tmp, env) = scratch_env();
        let list: Vec<String> = [
            "twinpage:wal",
            "twinpage:wal,concurrency=begin-concurrent",
            "twinpage:wal,concurrency=page-lock",
            "twinpage:ips,concurrency=2vto",
            "twinpage:ips,concurrency=2vto-fuw",
            "twinpage:dhl-cc,concurrency=2vto",
            "twinpage:off",
            "sqlite:wal",
            "redb",
            "lmdb",
            "floor",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let specs = engine_specs(&list).unwrap();
        let mut workloads = Vec::new();
        for (op, ops, dist) in [
            (Operation::SelectUpdate, 1, KeyDist::Zipf),
            (Operation::SelectUpdate, 3, KeyDist::Uniform),
            (Operation::Mix, 2, KeyDist::Zipf),
        ] {
            workloads.push(
                Workload::generate(&WorkloadSpec {
                    op,
                    write_ratio: 0.5,
                    txns: 200,
                    prefill: 60,
                    ops_per_txn: ops,
                    dist,
                    zipf_s: 1.0,
                    threads: 4,
                    keys: KeySharing::Shared,
                    prefill_order: PrefillOrder::Random,
                    ..WorkloadSpec::default()
                })
                .unwrap(),
            );
        }
        assert!(workloads[2].may_miss && !workloads[0].may_miss);
        let s = run_matrix(&env, &specs, &workloads, 1).unwrap();
        for x in &s {
            assert_eq!(x.txns, 200, "{}", x.engine);
            if x.engine == "floor" {
                assert_eq!(x.verified.how, "none (no rows)");
                continue;
            }
            assert_eq!(x.verified.how, "per-key model", "{}", x.engine);
            if x.engine.contains("2vto") && !x.engine.contains("fuw") {
                assert!(x.max_aborts_per_txn <= 1, "{}", x.engine);
            }
            let b = &x.breakdown;
            assert!(b.total > 0.0 && b.compute <= b.total, "{} {b:?}", x.engine);
        }
        report::print_tables(&s, "sqlite:wal");
        report::print_settings(&s);
    }

    #[test]
    fn engine_specs_parse() {
        let s: EngineSpec = "twinpage:persist,synchronous=normal,cache_size=-4096"
            .parse()
            .unwrap();
        match s.kind {
            engines::EngineKind::Twinpage(o) => {
                assert_eq!(o.journal_mode, twinpage::JournalMode::Persist);
                assert_eq!(o.synchronous, twinpage::Synchronous::Normal);
                assert_eq!(o.cache_size, 4096 * 1024);
            }
            _ => panic!("wrong kind"),
        }
        let s: EngineSpec = "sqlite:wal,synchronous=normal,journal_size_limit=524288,wal_autocheckpoint=100,cache=shared"
            .parse()
            .unwrap();
        match s.kind {
            engines::EngineKind::Sqlite(q) => {
                assert_eq!(q.journal_mode, "wal");
                assert_eq!(q.synchronous, "normal");
                assert_eq!(q.journal_size_limit, 524288);
                assert_eq!(q.wal_autocheckpoint, 100);
                assert!(q.shared_cache);
            }
            _ => panic!("wrong kind"),
        }
        assert!("floor".parse::<EngineSpec>().is_ok());
        assert!(matches!(
            "redb,durability=none".parse::<EngineSpec>().map(|s| s.kind),
            Ok(engines::EngineKind::Redb { durable: false })
        ));
        assert!(matches!(
            "lmdb".parse::<EngineSpec>().map(|s| s.kind),
            Ok(engines::EngineKind::Lmdb { sync: true })
        ));
        assert!("redb,durability=eventual".parse::<EngineSpec>().is_err());
        assert!("sqlite:memory".parse::<EngineSpec>().is_err());
        assert!("twinpage:nope".parse::<EngineSpec>().is_err());
        assert!("sqlite:wal,bogus=1".parse::<EngineSpec>().is_err());
        assert!("mysql".parse::<EngineSpec>().is_err());
    }
}
