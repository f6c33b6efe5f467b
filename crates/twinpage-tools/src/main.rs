//! The `twinpage` command-line tool.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use twinpage::{Db, JournalMode, Options};

#[derive(Parser)]
#[command(name = "twinpage", version, about = "twinpage storage engine tools")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Integrity check of a database file, opened read-only: prints every
    /// problem found. Exit status 0 if intact, 2 if damaged, 1 if it cannot
    /// be checked (a file that needs recovery is reported, not recovered).
    Check {
        /// Database file.
        file: PathBuf,
        /// Journal mode to open it with; default: the mode recorded in the
        /// file.
        #[arg(long)]
        mode: Option<JournalMode>,
    },
    /// Count the I/O of single-row auto-commit transactions in every mode.
    Iostat(twinpage_tools::iostat::Args),
    /// Benchmark twinpage against SQLite and the physical floor.
    Bench(twinpage_tools::bench::Args),
    /// Explore crash states of every journal mode (docs/CRASH.md).
    Crashtest(Box<twinpage_tools::crashtest::Args>),
    /// Random concurrent histories checked for serializability in commit
    /// order, per mode and protocol (docs/CONCURRENCY.md).
    Histories(twinpage_tools::conc::Args),
    /// 8 threads for a minute per mode and protocol: random aborts, short
    /// busy timeouts, readers, a watchdog; then the serializability check.
    Stress(twinpage_tools::conc::StressArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Check { file, mode } => (|| {
            let mode = match mode {
                Some(m) => m,
                None => Db::detect_mode(&file)?.unwrap_or_default(),
            };
            // Read-only: checking never changes the file (an empty file is
            // reported, not turned into a database; one that needs recovery
            // says so).
            let opts = Options {
                create: false,
                ..Options::default().journal_mode(mode).read_only(true)
            };
            let db = Db::open(&file, opts)?;
            let (report, problems) = db.check_all()?;
            db.close()?;
            if problems.is_empty() {
                println!("{}: {report}", file.display());
                return Ok::<i32, twinpage::Error>(0);
            }
            // Every damaged page, not just the first.
            println!("{}: {} problem(s)", file.display(), problems.len());
            for p in &problems {
                println!("  {p}");
            }
            Ok(2)
        })(),
        Cmd::Iostat(a) => twinpage_tools::iostat::run(a),
        Cmd::Bench(a) => twinpage_tools::bench::run(a),
        Cmd::Crashtest(a) => twinpage_tools::crashtest::run(*a),
        Cmd::Histories(a) => twinpage_tools::conc::run(a),
        Cmd::Stress(a) => twinpage_tools::conc::stress(a),
    };
    match r {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("twinpage: {e}");
            ExitCode::from(1)
        }
    }
}
