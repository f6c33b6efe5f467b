//! Thread CPU per point get and per 100-row range scan through the
//! library API, with nothing else in the process: the check that the
//! write-path work did not slow reads (run it on two checkouts and
//! compare). 20,000 rows of 119 bytes, synchronous=off, the default
//! 2 MiB cache; three rounds of 200,000 gets and 20,000 scans.
//!
//!     cargo run --release -p twinpage --example read_cpu -- wal

use std::ops::Bound;
use std::time::Instant;
use twinpage::keys::encode_i64_compact;
use twinpage::{Db, Direction, JournalMode, Options, Synchronous};

/// User CPU of this thread, µs.
fn cpu_us() -> f64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_utime.tv_sec as f64 * 1e6 + ru.ru_utime.tv_usec as f64
}

fn main() -> twinpage::Result<()> {
    let mode: JournalMode = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "wal".into())
        .parse()?;
    let rows = 20_000i64;
    let dir = tempfile::tempdir().map_err(|e| twinpage::Error::io("mkdtemp", "/tmp", e))?;
    let opts = Options::default()
        .journal_mode(mode)
        .synchronous(Synchronous::Off);
    let db = Db::open(dir.path().join("read.db"), opts)?;
    db.create_table("t")?;
    let val = vec![b'x'; 119];
    db.write(|t| {
        for k in 0..rows {
            t.put("t", &encode_i64_compact(k), &val)?;
        }
        Ok(())
    })?;
    // xorshift: the same keys on every checkout.
    let mut x: u64 = 88_172_645_463_325_252;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % rows as u64) as i64
    };
    for round in 0..3 {
        let n = 200_000;
        let (c0, t0) = (cpu_us(), Instant::now());
        for _ in 0..n {
            db.get("t", &encode_i64_compact(next()))?;
        }
        let get = (
            (cpu_us() - c0) / n as f64,
            t0.elapsed().as_secs_f64() * 1e6 / n as f64,
        );
        let n = 20_000;
        let (c0, t0) = (cpu_us(), Instant::now());
        for _ in 0..n {
            let k = encode_i64_compact(next());
            let r = db.begin_read()?;
            let from = (Bound::Included(k.as_slice()), Bound::Unbounded);
            for kv in r.range("t", from, Direction::Forward)?.take(100) {
                kv?;
            }
        }
        let scan = (
            (cpu_us() - c0) / n as f64,
            t0.elapsed().as_secs_f64() * 1e6 / n as f64,
        );
        println!(
            "{mode} round {round}: get {:.2} us CPU ({:.2} wall); scan of 100 rows {:.2} us CPU ({:.2} wall)",
            get.0, get.1, scan.0, scan.1
        );
    }
    Ok(())
}
