//! DASH-specific measurements (docs/modes/shadow.md, "Figures"):
//!
//! ```text
//! cargo run --release --example dash_bench -- DIR [BLOCKDEV] [TXNS]
//! ```
//!
//! DIR should be on the file system under test (an ext4 loop mount);
//! BLOCKDEV (e.g. `loop2`) is its device in /proc/diskstats, for the
//! block-level figures. Prints, per mode: syscalls and block I/O per
//! single-row transaction; the Aggregate Update's cost against the
//! duplication ratio (the paper's Fig. 18); the files' sizes; and the time
//! to open the database in each recovery state.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use twinpage::storage::{FileLock, OpenFlags, OsVfs, Vfs, VfsFile};
use twinpage::{Db, Error, JournalMode, Options, Result};

/// (write requests, sectors written) of a block device.
fn diskstats(dev: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/diskstats").ok()?;
    s.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(2) != Some(&dev) || f.len() < 10 {
            return None;
        }
        Some((f[7].parse().ok()?, f[9].parse().ok()?))
    })
}

fn sync_all() {
    let _ = std::process::Command::new("sync").status();
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    for s in ["", "-shadow", "-shadow-tmp", "-lock", "-journal", "-wal"] {
        let mut q = p.as_os_str().to_owned();
        q.push(s);
        let _ = std::fs::remove_file(PathBuf::from(q));
    }
    p
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

fn opts(mode: JournalMode) -> Options {
    Options::default().journal_mode(mode)
}

/// Single-row auto-commit inserts after a 1,000-row prefill.
fn per_txn(dir: &Path, dev: Option<&str>, txns: u64) -> Result<()> {
    println!("\n## single-row insert, 1000 rows pre-filled, 100-byte values, {txns} txns");
    println!(
        "mode      fdatasync/txn renames/txn writes/txn bytes/txn  blk-writes/txn KiB/txn  us/txn"
    );
    for mode in [
        JournalMode::Persist,
        JournalMode::Shadow,
        JournalMode::ShadowX,
        JournalMode::Off,
    ] {
        let p = fresh(dir, &format!("txn-{mode}.db"));
        let db = Db::open(&p, opts(mode))?;
        db.create_table("t")?;
        let mut t = db.begin_write()?;
        for i in 0..1000 {
            t.put("t", &key(i * 2), &[7; 100])?;
        }
        t.commit()?;
        db.put("t", b"warm", b"up")?; // clone the shadow before measuring
        sync_all();
        let b0 = dev.and_then(diskstats);
        let io0 = db.io_counters();
        let t0 = Instant::now();
        for i in 0..txns {
            db.put("t", &key(i * 2 + 1), &[9; 100])?;
        }
        let el = t0.elapsed();
        let io = db.io_counters() - io0;
        sync_all();
        let b1 = dev.and_then(diskstats);
        let n = txns as f64;
        let (bw, kib) = match (b0, b1) {
            (Some(a), Some(b)) => (
                format!("{:.2}", (b.0 - a.0) as f64 / n),
                format!("{:.1}", (b.1 - a.1) as f64 / 2.0 / n),
            ),
            _ => ("-".into(), "-".into()),
        };
        println!(
            "{:<9} {:>13.2} {:>11.2} {:>10.2} {:>9.0} {:>15} {:>7} {:>7.0}",
            mode.name(),
            io.fdatasync as f64 / n,
            io.renames as f64 / n,
            io.write_calls as f64 / n,
            io.bytes_written as f64 / n,
            bw,
            kib,
            el.as_micros() as f64 / n
        );
        db.check()?;
        db.close()?;
    }
    Ok(())
}

/// Transactions of `ops` updates, each on its own leaf; a fraction `ratio`
/// of them hit leaves the previous transaction updated (paper Fig. 18).
fn duplication(dir: &Path, dev: Option<&str>, txns: u64) -> Result<()> {
    println!("\n## Aggregate Update vs duplication ratio: 20,000 rows; txns of N updates on distinct leaves");
    println!("mode      N  ratio  pages/txn  KiB/txn(blk)  us/txn   txn/s");
    // 100-byte values: about 35 rows per 4 KiB leaf; keys 100 apart are on
    // different leaves.
    for mode in [
        JournalMode::Shadow,
        JournalMode::ShadowX,
        JournalMode::Persist,
    ] {
        let p = fresh(dir, &format!("dup-{mode}.db"));
        let db = Db::open(&p, opts(mode))?;
        db.create_table("t")?;
        let mut t = db.begin_write()?;
        for i in 0..20_000 {
            t.put("t", &key(i), &[1; 100])?;
        }
        t.commit()?;
        db.put("t", &key(0), &[2; 100])?;
        for ops in [3u64, 5, 10] {
            for ratio in [0.0, 0.5, 1.0] {
                let shared = (ops as f64 * ratio).round() as u64;
                let mut next_leaf = 1u64;
                let mut prev: Vec<u64> = Vec::new();
                sync_all();
                let b0 = dev.and_then(diskstats);
                let io0 = db.io_counters();
                let t0 = Instant::now();
                for n in 0..txns {
                    let mut leaves: Vec<u64> = prev.iter().copied().take(shared as usize).collect();
                    while leaves.len() < ops as usize {
                        leaves.push(next_leaf % 190);
                        next_leaf += 1;
                    }
                    let mut t = db.begin_write()?;
                    for &l in &leaves {
                        t.put("t", &key(l * 100 + 7), &[(n % 251) as u8; 100])?;
                    }
                    t.commit()?;
                    prev = leaves;
                }
                let el = t0.elapsed();
                let io = db.io_counters() - io0;
                sync_all();
                let b1 = dev.and_then(diskstats);
                let n = txns as f64;
                let kib = match (b0, b1) {
                    (Some(a), Some(b)) => format!("{:.1}", (b.1 - a.1) as f64 / 2.0 / n),
                    _ => "-".into(),
                };
                println!(
                    "{:<9} {:>2} {:>6.1} {:>10.2} {:>13} {:>7.0} {:>7.0}",
                    mode.name(),
                    ops,
                    ratio,
                    io.bytes_written as f64 / 4096.0 / n,
                    kib,
                    el.as_micros() as f64 / n,
                    n / el.as_secs_f64()
                );
            }
        }
        db.check()?;
        db.close()?;
    }
    Ok(())
}

fn size(p: &Path, suffix: &str) -> u64 {
    let mut q = p.as_os_str().to_owned();
    q.push(suffix);
    std::fs::metadata(PathBuf::from(q))
        .map(|m| m.len())
        .unwrap_or(0)
}

fn storage(dir: &Path) -> Result<()> {
    println!("\n## storage after 10,000 single-row inserts (100-byte values)");
    println!("mode      db KiB  shadow KiB  total/db");
    for mode in [
        JournalMode::Shadow,
        JournalMode::ShadowX,
        JournalMode::Persist,
    ] {
        let p = fresh(dir, &format!("size-{mode}.db"));
        let db = Db::open(&p, opts(mode))?;
        db.create_table("t")?;
        let mut t = db.begin_write()?;
        for i in 0..9_900 {
            t.put("t", &key(i * 2), &[3; 100])?;
        }
        t.commit()?;
        for i in 0..100 {
            db.put("t", &key(i * 2 + 1), &[4; 100])?;
        }
        db.close()?;
        let (d, s) = (size(&p, ""), size(&p, "-shadow"));
        let j = size(&p, "-journal");
        println!(
            "{:<9} {:>6} {:>11} {:>9.2}",
            mode.name(),
            d / 1024,
            (s + j) / 1024,
            (d + s + j) as f64 / d as f64
        );
    }
    Ok(())
}

/// OsVfs that cuts the power (fails every later mutating call) before
/// the `rename_cut`-th rename or before the Version Reset write, and can
/// pretend renames succeeded without doing them (their metadata lost).
#[derive(Clone, Default)]
struct Cut {
    renames: Arc<AtomicUsize>,
    rename_cut: Option<usize>,
    reset_cut: bool,
    drop_renames: bool,
    dead: Arc<AtomicBool>,
}

struct CutFile {
    inner: Arc<dyn VfsFile>,
    cut: Cut,
}

impl Cut {
    fn step(&self) -> Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Error::io("power cut", "/", std::io::Error::other("cut")));
        }
        Ok(())
    }
    fn kill(&self) -> Result<()> {
        self.dead.store(true, Ordering::SeqCst);
        self.step()
    }
}

impl Vfs for Cut {
    fn open(&self, path: &Path, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(CutFile {
            inner: OsVfs.open(path, flags)?,
            cut: self.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        OsVfs.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.step()?;
        OsVfs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.step()?;
        let n = self.renames.fetch_add(1, Ordering::SeqCst);
        if self.rename_cut == Some(n) {
            return self.kill();
        }
        if self.drop_renames {
            return Ok(());
        }
        OsVfs.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.step()?;
        OsVfs.sync_dir(dir)
    }
}

impl VfsFile for CutFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.cut.step()?;
        if self.cut.reset_cut && offset == 56 && buf.len() == 24 {
            return self.cut.kill();
        }
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> Result<()> {
        self.cut.step()?;
        self.inner.sync_data()
    }
    fn sync_all(&self) -> Result<()> {
        self.cut.step()?;
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.cut.step()?;
        self.inner.set_len(len)
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn try_lock(&self, kind: FileLock) -> Result<bool> {
        self.inner.try_lock(kind)
    }
    fn unlock(&self) -> Result<()> {
        self.inner.unlock()
    }
}

/// Time to open (and recover) after a crash leaving each state. The
/// interrupted transaction updates `pages` leaves, half of them shared with
/// the previous transaction (the paper's Fig. 17 setting).
fn recovery(dir: &Path, reps: u32) -> Result<()> {
    println!("\n## open + first read after a crash, by DASH state (5,000 rows; warm cache; median of {reps})");
    println!("mode      pages  state                      open-us  pages-copied");
    let states: [(&str, Cut); 5] = [
        ("<n, 0> (no crash)", Cut::default()),
        (
            "<n, n+1> (before rename 1)",
            Cut {
                rename_cut: Some(0),
                ..Cut::default()
            },
        ),
        (
            "tmp+db (before rename 2)",
            Cut {
                rename_cut: Some(1),
                ..Cut::default()
            },
        ),
        (
            "<n+1, n> (before reset)",
            Cut {
                reset_cut: true,
                ..Cut::default()
            },
        ),
        (
            "<0, n+1> (renames lost)",
            Cut {
                drop_renames: true,
                ..Cut::default()
            },
        ),
    ];
    for mode in [JournalMode::Shadow, JournalMode::ShadowX] {
        for pages in [1u64, 5, 20] {
            for (name, cut) in &states {
                let mut times = Vec::new();
                let mut copied = 0;
                for _ in 0..reps {
                    let p = fresh(dir, &format!("rec-{mode}.db"));
                    {
                        let db = Db::open(&p, opts(mode))?;
                        db.create_table("t")?;
                        let mut t = db.begin_write()?;
                        for i in 0..5_000 {
                            t.put("t", &key(i), &[1; 100])?;
                        }
                        t.commit()?;
                        let mut t = db.begin_write()?;
                        for l in 0..pages {
                            t.put("t", &key(l * 100 + 3), &[2; 100])?;
                        }
                        t.commit()?;
                        db.close()?;
                    }
                    let c = Cut {
                        renames: Arc::new(AtomicUsize::new(0)),
                        dead: Arc::new(AtomicBool::new(false)),
                        ..cut.clone()
                    };
                    let db = Db::open(&p, opts(mode).vfs(Arc::new(c.clone())))?;
                    let mut t = db.begin_write()?;
                    for l in 0..pages {
                        let leaf = if l % 2 == 0 { l } else { pages + l };
                        t.put("t", &key(leaf * 100 + 3), &[3; 100])?;
                    }
                    let _ = t.commit();
                    // Power is cut: nothing more reaches the files (the
                    // drop's close fails and releases the locks).
                    c.dead.store(true, Ordering::SeqCst);
                    drop(db);
                    sync_all();
                    let t0 = Instant::now();
                    let db = Db::open(&p, opts(mode))?;
                    db.get("t", &key(3))?;
                    times.push(t0.elapsed().as_micros());
                    copied = db.stats().recovery.pages;
                    db.check()?;
                    db.close()?;
                }
                times.sort_unstable();
                println!(
                    "{:<9} {:>5}  {:<26} {:>7} {:>8}",
                    mode.name(),
                    pages,
                    name,
                    times[times.len() / 2],
                    copied
                );
            }
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).map(String::as_str).unwrap_or("."));
    let dev = args.get(2).map(String::as_str);
    let txns: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1000);
    per_txn(&dir, dev, txns)?;
    duplication(&dir, dev, txns / 4)?;
    storage(&dir)?;
    recovery(&dir, 3)?;
    Ok(())
}
