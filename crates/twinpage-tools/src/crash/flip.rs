//! Damage campaigns on a committed, cleanly closed database (docs/CRASH.md
//! §5b): one damaged page per trial, then open (read-only), read every
//! table, and run the integrity check, all against the model of what the
//! database holds. Each trial ends in one outcome:
//!
//! * detected at open, at read (a typed error) or at check (the check lists
//!   the page; reads may have returned other data than the model first,
//!   counted separately);
//! * silent: no error anywhere, and reads returned other data;
//! * undetected: no error, and the data still equal the model (the damage
//!   hit bytes nothing reads, and nothing verified them).
//!
//! Damage kinds: a bit flip at a random position of a random page; a page
//! read back as zeros; a stale page (the image the page had in an earlier
//! committed state: a lost write); a misdirected write (another page's
//! current image lands on this page). Page checksums catch the first,
//! second and fourth; no per-page checksum can tell a stale image from a
//! current one, which is what the third shows.

use super::workload::Model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use twinpage::storage::MemVfs;
use twinpage::{Db, Error, JournalMode, Options, Result};

/// Path of the database inside the in-memory file system.
pub const DB_PATH: &str = "/flip/test.db";

/// What happens to the chosen page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// One bit flipped at a random position.
    BitFlip,
    /// The page reads back as zeros.
    Zero,
    /// The page reads back as it was in an earlier committed state.
    Stale,
    /// Another page's current image lands on this page.
    Misdirected,
}

impl Damage {
    /// Every kind, in report order.
    pub const ALL: &'static [Damage] = &[
        Damage::BitFlip,
        Damage::Zero,
        Damage::Stale,
        Damage::Misdirected,
    ];
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Damage::BitFlip => "bitflip",
            Damage::Zero => "zero",
            Damage::Stale => "stale",
            Damage::Misdirected => "misdirected",
        })
    }
}

impl FromStr for Damage {
    type Err = Error;
    fn from_str(s: &str) -> Result<Damage> {
        Damage::ALL
            .iter()
            .copied()
            .find(|d| d.to_string() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown damage {s:?}: bitflip, zero, stale or misdirected"
                ))
            })
    }
}

/// One campaign: a mode, a damage kind, a number of trials.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    /// Journal mode of the database.
    pub mode: JournalMode,
    /// What each trial does to its page.
    pub damage: Damage,
    /// Trials.
    pub trials: u64,
    /// Seed of the workload and of the trial draws.
    pub seed: u64,
    /// Page size.
    pub page_size: usize,
    /// Create the database with page checksums.
    pub checksums: bool,
}

impl CampaignConfig {
    /// Defaults: 10,000 trials, seed 1, 1024-byte pages, checksums on.
    pub fn new(mode: JournalMode, damage: Damage) -> Self {
        CampaignConfig {
            mode,
            damage,
            trials: 10_000,
            seed: 1,
            page_size: 1024,
            checksums: true,
        }
    }
}

/// What a campaign found.
#[derive(Debug, Clone, Default)]
pub struct CampaignReport {
    /// The configuration's description.
    pub label: String,
    /// Pages of the database damaged (page 1 included).
    pub pages: u32,
    /// Keys in the model.
    pub keys: usize,
    /// Trials run.
    pub trials: u64,
    /// Open failed with a typed error.
    pub at_open: u64,
    /// Reading the tables failed with a typed error.
    pub at_read: u64,
    /// Reads succeeded, the integrity check reported damage.
    pub at_check: u64,
    /// Of `at_check`: the reads had returned other data than the model.
    pub wrong_then_check: u64,
    /// No error, data equal the model.
    pub undetected: u64,
    /// No error, data differ from the model.
    pub silent: u64,
    /// Panics (a bug, whatever the damage).
    pub panics: u64,
    /// Trials whose damage changed no byte (a page already equal to its
    /// replacement); drawn again, counted here.
    pub redrawn: u64,
    /// The first few undetected, silent or panicking trials.
    pub examples: Vec<String>,
}

impl CampaignReport {
    /// Trials that ended in an error or a check report.
    pub fn detected(&self) -> u64 {
        self.at_open + self.at_read + self.at_check
    }
}

impl fmt::Display for CampaignReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} trials on {} pages ({} keys): detected {} (open {}, read {}, check {}; \
             wrong data before the check {}), undetected {} (data intact), silent {}, panics {}",
            self.label,
            self.trials,
            self.pages,
            self.keys,
            self.detected(),
            self.at_open,
            self.at_read,
            self.at_check,
            self.wrong_then_check,
            self.undetected,
            self.silent,
            self.panics
        )?;
        for e in &self.examples {
            write!(f, "\n    {e}")?;
        }
        Ok(())
    }
}

/// The committed database the trials damage.
struct Built {
    /// Every file after a clean close (the database first).
    files: Vec<(PathBuf, Vec<u8>)>,
    /// The database file after the first half of the workload.
    old: Vec<u8>,
    model: Model,
    pages: u32,
}

fn options(cfg: &CampaignConfig, vfs: &MemVfs, read_only: bool) -> Options {
    let mut o = Options {
        journal_mode: cfg.mode,
        page_size: cfg.page_size,
        page_checksums: cfg.checksums,
        read_only,
        vfs: Some(Arc::new(vfs.clone())),
        ..Options::default()
    };
    o.cache_size = 64 * cfg.page_size;
    o
}

fn value(rng: &mut StdRng, ps: usize) -> Vec<u8> {
    let len = match rng.random_range(0..100) {
        0..70 => rng.random_range(0..60),
        70..95 => rng.random_range(60..300),
        _ => rng.random_range(ps..3 * ps),
    };
    let b = rng.random::<u8>();
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

/// Three tables, inserts, updates, deletes (so there are overflow chains
/// and free pages), closed once half-way for the stale images.
fn build(cfg: &CampaignConfig) -> Result<Built> {
    let vfs = MemVfs::new();
    let path = Path::new(DB_PATH);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let tables = ["a", "b", "c"];
    let db = Db::open(path, options(cfg, &vfs, false))?;
    for t in tables {
        db.create_table(t)?;
    }
    let txn_round = |db: &Db, rng: &mut StdRng, deletes: bool| -> Result<()> {
        let mut t = db.begin_write()?;
        for _ in 0..10 {
            let table = tables[rng.random_range(0..3)];
            let key = format!("k{:05}", rng.random_range(0..1500));
            if deletes && rng.random_range(0..10) < 4 {
                t.delete(table, key.as_bytes())?;
            } else {
                t.put(table, key.as_bytes(), &value(rng, cfg.page_size))?;
            }
        }
        t.commit()
    };
    for _ in 0..40 {
        txn_round(&db, &mut rng, false)?;
    }
    db.close()?;
    let old = vfs
        .read_file(path)
        .ok_or_else(|| Error::Internal("database file missing".into()))?;
    let db = Db::open(path, options(cfg, &vfs, false))?;
    for _ in 0..40 {
        txn_round(&db, &mut rng, true)?;
    }
    // Empty most of one table: free pages (and a trunk) to damage too.
    let mut t = db.begin_write()?;
    let doomed: Vec<Vec<u8>> = t
        .range("c", .., twinpage::Direction::Forward)?
        .map(|kv| kv.map(|(k, _)| k))
        .collect::<Result<_>>()?;
    for k in doomed.iter().take(doomed.len() * 3 / 4) {
        t.delete("c", k)?;
    }
    t.commit()?;
    let model = Model::read(&db)?;
    let pages = db.stats().page_count;
    db.check()?;
    db.close()?;
    let mut files: Vec<(PathBuf, Vec<u8>)> = vfs
        .list()
        .into_iter()
        .filter_map(|p| vfs.read_file(&p).map(|b| (p, b)))
        .collect();
    files.sort_by_key(|(p, _)| p.as_path() != path);
    if files.first().is_none_or(|(p, _)| p.as_path() != path) {
        return Err(Error::Internal("database file missing".into()));
    }
    Ok(Built {
        files,
        old,
        model,
        pages,
    })
}

enum Outcome {
    Open,
    Read,
    Check { wrong: bool },
    Undetected,
    Silent,
}

fn probe(cfg: &CampaignConfig, vfs: &MemVfs, model: &Model) -> Outcome {
    let Ok(db) = Db::open(DB_PATH, options(cfg, vfs, true)) else {
        return Outcome::Open;
    };
    let wrong = match Model::read(&db) {
        Err(_) => return Outcome::Read,
        Ok(m) => m != *model,
    };
    match db.check_all() {
        Ok((_, problems)) if problems.is_empty() => {
            if wrong {
                Outcome::Silent
            } else {
                Outcome::Undetected
            }
        }
        _ => Outcome::Check { wrong },
    }
}

/// Run one campaign.
pub fn campaign(cfg: &CampaignConfig) -> Result<CampaignReport> {
    let built = build(cfg)?;
    let ps = cfg.page_size;
    let pages = built.pages as usize;
    let db_img = &built.files[0].1;
    let page = |img: &[u8], p: usize| -> Vec<u8> {
        img.get((p - 1) * ps..p * ps)
            .map_or_else(|| vec![0; ps], <[u8]>::to_vec)
    };
    // Pages whose earlier image differs from the current one.
    let stale: Vec<usize> = (1..=pages)
        .filter(|&p| (p - 1) * ps < built.old.len() && page(&built.old, p) != page(db_img, p))
        .collect();
    let mut rep = CampaignReport {
        label: format!(
            "{:<9} {:<11} checksums={} page_size={}",
            cfg.mode.to_string(),
            cfg.damage.to_string(),
            if cfg.checksums { "on" } else { "off" },
            ps
        ),
        pages: built.pages,
        keys: built.model.keys(),
        ..Default::default()
    };
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed_f11b);
    for trial in 0..cfg.trials {
        let mut img = db_img.clone();
        let what = loop {
            let p = match cfg.damage {
                Damage::Stale if stale.is_empty() => {
                    return Err(Error::InvalidArgument(
                        "no page changed between the two states".into(),
                    ))
                }
                Damage::Stale => stale[rng.random_range(0..stale.len())],
                _ => rng.random_range(1..=pages),
            };
            let r = (p - 1) * ps..p * ps;
            let what = match cfg.damage {
                Damage::BitFlip => {
                    let bit = rng.random_range(0..ps * 8);
                    img[r.start + bit / 8] ^= 1 << (bit % 8);
                    format!("page {p} byte {} bit {}", bit / 8, bit % 8)
                }
                Damage::Zero => {
                    img[r].fill(0);
                    format!("page {p} zeroed")
                }
                Damage::Stale => {
                    img[r].copy_from_slice(&page(&built.old, p));
                    format!("page {p} stale")
                }
                Damage::Misdirected => {
                    let q = rng.random_range(1..=pages);
                    img[r].copy_from_slice(&page(db_img, q));
                    format!("page {q}'s image written at page {p}")
                }
            };
            if img != *db_img {
                break what;
            }
            rep.redrawn += 1;
        };
        let vfs = MemVfs::new();
        vfs.write_file(Path::new(DB_PATH), img);
        for (path, bytes) in &built.files[1..] {
            vfs.write_file(path, bytes.clone());
        }
        rep.trials += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| probe(cfg, &vfs, &built.model)));
        let example = |rep: &mut CampaignReport, kind: &str| {
            if rep.examples.len() < 8 {
                rep.examples.push(format!("trial {trial}: {kind}: {what}"));
            }
        };
        match outcome {
            Ok(Outcome::Open) => rep.at_open += 1,
            Ok(Outcome::Read) => rep.at_read += 1,
            Ok(Outcome::Check { wrong }) => {
                rep.at_check += 1;
                rep.wrong_then_check += u64::from(wrong);
            }
            Ok(Outcome::Undetected) => {
                rep.undetected += 1;
                example(&mut rep, "undetected");
            }
            Ok(Outcome::Silent) => {
                rep.silent += 1;
                example(&mut rep, "SILENT");
            }
            Err(_) => {
                rep.panics += 1;
                example(&mut rep, "PANIC");
            }
        }
    }
    Ok(rep)
}
