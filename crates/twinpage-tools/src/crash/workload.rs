//! The workload driver: random transactions over several tables, with a
//! model (a `BTreeMap` per table) of what the database must contain after
//! every commit.
//!
//! Transactions have 1..=16 operations (inserts, updates, deletes, point
//! reads and scans checked against the model), with small, page-sized and
//! overflow-sized values. Keys share long prefixes so separators are long
//! and trees get deep on small pages. The table sizes swing between a
//! growth and a shrink phase so splits, merges, redistribution and
//! free-list reuse all happen. A few transactions are bulk (up to 64
//! operations) so the dirty set outgrows a small cache and spills; some
//! roll back (after spilling, too), some drop and recreate a table, and
//! now and then the database is closed and reopened.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use twinpage::journal::CheckpointMode;
use twinpage::{Db, Direction, Error, Result};

/// One table's expected contents.
pub type Table = BTreeMap<Vec<u8>, Vec<u8>>;

/// The expected contents of a database.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Model {
    /// Table name to contents.
    pub tables: BTreeMap<String, Table>,
}

impl Model {
    /// A 64-bit digest of names, keys and values.
    pub fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }

    /// Read a database's committed contents.
    pub fn read(db: &Db) -> Result<Model> {
        let r = db.begin_read()?;
        let mut tables = BTreeMap::new();
        for name in r.tables()? {
            let mut t = Table::new();
            for kv in r.range(&name, .., Direction::Forward)? {
                let (k, v) = kv?;
                t.insert(k, v);
            }
            tables.insert(name, t);
        }
        Ok(Model { tables })
    }

    /// Total keys over all tables.
    pub fn keys(&self) -> usize {
        self.tables.values().map(|t| t.len()).sum()
    }

    /// A short description of how `self` differs from `want`.
    pub fn diff(&self, want: &Model, max: usize) -> String {
        let mut out = Vec::new();
        for name in want.tables.keys() {
            if !self.tables.contains_key(name) {
                out.push(format!("table {name:?} missing"));
            }
        }
        for (name, got) in &self.tables {
            let Some(exp) = want.tables.get(name) else {
                out.push(format!("unexpected table {name:?}"));
                continue;
            };
            for (k, v) in exp {
                match got.get(k) {
                    None => out.push(format!("{name}: key {} missing", show(k))),
                    Some(g) if g != v => out.push(format!(
                        "{name}: key {} has a {}-byte value, want {} bytes{}",
                        show(k),
                        g.len(),
                        v.len(),
                        if g.len() == v.len() { " (differs)" } else { "" }
                    )),
                    _ => {}
                }
            }
            for k in got.keys().filter(|k| !exp.contains_key(*k)) {
                out.push(format!("{name}: unexpected key {}", show(k)));
            }
        }
        let n = out.len();
        out.truncate(max);
        if n > max {
            out.push(format!("... {} more differences", n - max));
        }
        if out.is_empty() {
            "no difference".into()
        } else {
            out.join("; ")
        }
    }
}

/// A key, shortened for messages.
pub fn show(k: &[u8]) -> String {
    if k.len() > 24 {
        let tail = String::from_utf8_lossy(&k[k.len() - 12..]);
        format!("..{tail:?} ({} bytes)", k.len())
    } else {
        format!("{:?}", String::from_utf8_lossy(k))
    }
}

/// One operation of a planned transaction.
#[derive(Debug, Clone)]
pub enum Step {
    /// Insert or update.
    Put {
        /// Table.
        table: String,
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Delete (the key may be absent).
    Delete {
        /// Table.
        table: String,
        /// Key.
        key: Vec<u8>,
    },
    /// Point read, checked.
    Get {
        /// Table.
        table: String,
        /// Key.
        key: Vec<u8>,
        /// What the transaction must see.
        expect: Option<Vec<u8>>,
    },
    /// Full scan, checked.
    Scan {
        /// Table.
        table: String,
        /// Descending order.
        reverse: bool,
        /// Rows the transaction must see, ascending.
        expect: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// Create a table.
    CreateTable(String),
    /// Drop a table.
    DropTable(String),
}

/// What the driver does next.
#[derive(Debug, Clone)]
pub enum Plan {
    /// A write transaction.
    Txn {
        /// Operations.
        steps: Vec<Step>,
        /// Commit (true) or roll back.
        commit: bool,
        /// The model after the transaction commits.
        after: Model,
    },
    /// Close the database cleanly and open it again.
    Reopen,
    /// Run a checkpoint (copies a log into the database in log-based
    /// modes; a no-op elsewhere). Contents do not change.
    Checkpoint(CheckpointMode),
}

/// How a planned transaction failed.
#[derive(Debug)]
pub enum RunError {
    /// The engine returned an error.
    Db(Error),
    /// A read inside a transaction saw the wrong data.
    Mismatch(String),
}

impl From<Error> for RunError {
    fn from(e: Error) -> Self {
        RunError::Db(e)
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Db(e) => write!(f, "{e}"),
            RunError::Mismatch(m) => write!(f, "read mismatch: {m}"),
        }
    }
}

/// Workload shape.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// Seed: the same seed gives the same transactions.
    pub seed: u64,
    /// Planned transactions (after the one creating the tables).
    pub txns: usize,
    /// Page size (values are sized relative to it).
    pub page_size: usize,
    /// Number of tables.
    pub tables: usize,
    /// Allow close/reopen in the middle.
    pub reopen: bool,
    /// Longest key the database accepts (`Db::max_key_len`); `None`: only
    /// the page size limits the generated keys.
    pub max_key: Option<usize>,
    /// Write transactions open at once (1: one after the other). With more,
    /// under a protocol with several writers, one driver thread
    /// interleaves their operations ([`record_interleaved`]).
    pub in_flight: usize,
    /// With several in flight: transactions done at the same time commit
    /// together, each on its own thread, so their commits share the
    /// journal's group commit (the run is then not reproducible from its
    /// seed: the threads' I/O interleaves as the scheduler lets it).
    pub group_commit: bool,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            seed: 1,
            txns: 60,
            page_size: 1024,
            tables: 3,
            reopen: true,
            max_key: None,
            in_flight: 1,
            group_commit: false,
        }
    }
}

/// Shared key prefixes make long separators, hence deep trees on small
/// pages; the fourth is stretched to a sixth of the page, the last to one
/// and a half pages: keys longer than a cell, whose tails (and those of
/// the separators between them) overflow into chains.
const PREFIXES: [&str; 5] = [
    "",
    "user/profile/",
    "com.example.app/cache/thumbnails/2024/",
    "org.example.messages/conversations/inbox/attachments/metadata/v2/",
    "",
];

fn prefixes(page_size: usize, max_key: usize) -> Vec<String> {
    let mut v: Vec<String> = PREFIXES.iter().map(|s| s.to_string()).collect();
    // Every key is a prefix plus six digits, within the format's limit.
    let room = max_key.saturating_sub(6);
    for p in v.iter_mut() {
        p.truncate(room);
    }
    for (i, fill, want) in [(3, "x/", page_size / 6), (4, "k/", page_size * 3 / 2)] {
        let want = want.min(room);
        let long = &mut v[i];
        long.truncate(want);
        while long.len() < want {
            long.push_str(fill);
        }
        long.truncate(want);
    }
    v
}

/// Generates transactions from the current model.
pub struct Generator {
    cfg: WorkloadConfig,
    rng: SmallRng,
    prefixes: Vec<String>,
    model: Model,
    planned: usize,
    growing: bool,
    next_key: u64,
}

impl Generator {
    /// A generator for `cfg`.
    pub fn new(cfg: WorkloadConfig) -> Self {
        Generator {
            rng: SmallRng::seed_from_u64(cfg.seed ^ 0x7477_696e_7061_6765),
            prefixes: prefixes(cfg.page_size, cfg.max_key.unwrap_or(usize::MAX)),
            cfg,
            model: Model::default(),
            planned: 0,
            growing: true,
            next_key: 0,
        }
    }

    /// The committed model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Record that a planned transaction committed.
    pub fn committed(&mut self, plan: &Plan) {
        if let Plan::Txn { after, commit, .. } = plan {
            if *commit {
                self.model = after.clone();
            }
        }
    }

    /// Replace the committed model (after an ambiguous failure).
    pub fn set_model(&mut self, m: Model) {
        self.model = m;
    }

    fn table_name(i: usize) -> String {
        format!("t{i}")
    }

    fn value(&mut self) -> Vec<u8> {
        let ps = self.cfg.page_size;
        // Small, medium, around the inline limit (a quarter page), and
        // overflow chains of up to three pages.
        let len = match self.rng.random_range(0..100) {
            0..50 => self.rng.random_range(0..32),
            50..75 => self.rng.random_range(32..ps / 5),
            75..90 => self.rng.random_range(ps / 6..ps / 4 + 8),
            _ => self.rng.random_range(ps / 4..3 * ps),
        };
        let mut v = vec![0u8; len];
        self.rng.fill_bytes(&mut v);
        v
    }

    fn new_key(&mut self) -> Vec<u8> {
        let p = &self.prefixes[self.rng.random_range(0..self.prefixes.len())];
        // Spread new keys over the key space so inserts hit every leaf.
        self.next_key += 1;
        let n = self.next_key.wrapping_mul(0x9e37_79b9) % 1_000_000;
        format!("{p}{n:06}").into_bytes()
    }

    fn pick_key(&mut self, t: &Table) -> Option<Vec<u8>> {
        if t.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..t.len());
        t.keys().nth(i).cloned()
    }

    /// The next thing to do, or `None` when the workload is over.
    pub fn next_plan(&mut self) -> Option<Plan> {
        if self.model.tables.is_empty() && self.planned == 0 {
            self.planned += 1;
            let mut after = Model::default();
            let steps = (0..self.cfg.tables)
                .map(|i| {
                    after.tables.insert(Self::table_name(i), Table::new());
                    Step::CreateTable(Self::table_name(i))
                })
                .collect();
            return Some(Plan::Txn {
                steps,
                commit: true,
                after,
            });
        }
        if self.planned > self.cfg.txns {
            return None;
        }
        self.planned += 1;
        if self.cfg.reopen && self.planned > 3 && self.rng.random_bool(0.03) {
            return Some(Plan::Reopen);
        }
        if self.rng.random_bool(0.04) {
            const MODES: [CheckpointMode; 4] = [
                CheckpointMode::Passive,
                CheckpointMode::Full,
                CheckpointMode::Restart,
                CheckpointMode::Truncate,
            ];
            return Some(Plan::Checkpoint(MODES[self.rng.random_range(0..4)]));
        }
        let mut work = self.model.clone();
        let total = work.keys();
        let hi = 60 * self.cfg.tables.max(1);
        if total > hi {
            self.growing = false;
        } else if total < hi / 8 {
            self.growing = true;
        }
        let n = if self.rng.random_bool(0.08) {
            self.rng.random_range(24..=64)
        } else {
            self.rng.random_range(1..=16)
        };
        let mut steps = Vec::with_capacity(n);
        if self.rng.random_bool(0.015) {
            if let Some(name) = work.tables.keys().next().cloned() {
                steps.push(Step::DropTable(name.clone()));
                steps.push(Step::CreateTable(name.clone()));
                work.tables.insert(name, Table::new());
            }
        }
        let names: Vec<String> = work.tables.keys().cloned().collect();
        if names.is_empty() {
            return Some(Plan::Txn {
                steps,
                commit: true,
                after: work,
            });
        }
        for _ in 0..n {
            let table = names[self.rng.random_range(0..names.len())].clone();
            let roll = self.rng.random_range(0..100);
            let (ins, upd, del) = if self.growing {
                (60, 15, 15)
            } else {
                (15, 10, 65)
            };
            let t = work.tables.get_mut(&table).expect("name from the model");
            if roll < ins {
                let key = self.new_key();
                let value = self.value();
                t.insert(key.clone(), value.clone());
                steps.push(Step::Put { table, key, value });
            } else if roll < ins + upd {
                let Some(key) = self.pick_key(t) else {
                    continue;
                };
                // Half the updates keep the value's size: the engine may
                // then patch the leaf without decoding it.
                let old_len = t.get(&key).map(Vec::len);
                let value = match old_len {
                    Some(len) if self.rng.random_bool(0.5) => {
                        let mut v = vec![0u8; len];
                        self.rng.fill_bytes(&mut v);
                        v
                    }
                    _ => self.value(),
                };
                let t = work.tables.get_mut(&table).expect("name from the model");
                t.insert(key.clone(), value.clone());
                steps.push(Step::Put { table, key, value });
            } else if roll < ins + upd + del {
                // Now and then delete a run of neighbours: merges.
                let run = if self.rng.random_bool(0.2) {
                    self.rng.random_range(2..12)
                } else {
                    1
                };
                let Some(first) = self.pick_key(t) else {
                    steps.push(Step::Delete {
                        table,
                        key: self.new_key(),
                    });
                    continue;
                };
                let keys: Vec<Vec<u8>> =
                    t.range(first..).take(run).map(|(k, _)| k.clone()).collect();
                for key in keys {
                    t.remove(&key);
                    steps.push(Step::Delete {
                        table: table.clone(),
                        key,
                    });
                }
            } else if roll < 97 {
                let key = if self.rng.random_bool(0.7) {
                    self.pick_key(t).unwrap_or_else(|| b"absent".to_vec())
                } else {
                    self.new_key()
                };
                let expect = work.tables[&table].get(&key).cloned();
                steps.push(Step::Get { table, key, expect });
            } else {
                let expect = work.tables[&table]
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                steps.push(Step::Scan {
                    table,
                    reverse: self.rng.random_bool(0.5),
                    expect,
                });
            }
        }
        let commit = !self.rng.random_bool(0.1);
        Some(Plan::Txn {
            steps,
            commit,
            after: work,
        })
    }
}

/// Run the steps of a transaction (not its commit) and check its reads.
pub fn run_steps(t: &mut twinpage::WriteTxn, steps: &[Step]) -> Result<(), RunError> {
    for s in steps {
        match s {
            Step::Put { table, key, value } => t.put(table, key, value)?,
            Step::Delete { table, key } => {
                t.delete(table, key)?;
            }
            Step::Get { table, key, expect } => {
                let got = t.get(table, key)?;
                if &got != expect {
                    return Err(RunError::Mismatch(format!(
                        "get {table}/{} returned {:?} bytes, want {:?}",
                        show(key),
                        got.map(|v| v.len()),
                        expect.as_ref().map(|v| v.len())
                    )));
                }
            }
            Step::Scan {
                table,
                reverse,
                expect,
            } => {
                let dir = if *reverse {
                    Direction::Reverse
                } else {
                    Direction::Forward
                };
                let mut got = t
                    .range(table, .., dir)?
                    .collect::<Result<Vec<(Vec<u8>, Vec<u8>)>>>()?;
                if *reverse {
                    got.reverse();
                }
                if &got != expect {
                    return Err(RunError::Mismatch(format!(
                        "scan of {table} returned {} rows, want {}",
                        got.len(),
                        expect.len()
                    )));
                }
            }
            Step::CreateTable(n) => {
                t.create_table(n)?;
            }
            Step::DropTable(n) => {
                t.drop_table(n)?;
            }
        }
    }
    Ok(())
}

/// Commit `k` (1-based) of a recorded run.
#[derive(Debug, Clone, Copy)]
pub struct CommitMark {
    /// Operations issued before `commit()` was called.
    pub start_op: usize,
    /// Operations issued when `commit()` returned success.
    pub ack_op: usize,
}

/// What a run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Commits.
    pub commits: u64,
    /// Transactions rolled back.
    pub rollbacks: u64,
    /// Transactions that spilled dirty pages before commit or rollback.
    pub spills: u64,
    /// Clean close and reopen in the middle.
    pub reopens: u64,
    /// Checkpoints requested.
    pub checkpoints: u64,
    /// Deepest tree seen.
    pub max_depth: usize,
    /// Largest database, in pages.
    pub max_pages: u32,
    /// Longest free list, in pages.
    pub max_free: u64,
    /// Most overflow pages in use.
    pub max_overflow: u64,
    /// Most write transactions open at once.
    pub max_in_flight: usize,
    /// Commits made while other write transactions were open.
    pub overlapped_commits: u64,
    /// Commits made on parallel threads, several at once
    /// ([`WorkloadConfig::group_commit`]).
    pub parallel_commits: u64,
    /// Commits that shared an fdatasync with another (the journal's
    /// `commits_synced - groups_of_1`, summed over sessions).
    pub shared_sync_commits: u64,
    /// The largest group commit seen (the journal's `max_group`).
    pub max_group: u64,
}

impl Coverage {
    /// Combine two runs.
    pub fn add(&mut self, o: &Coverage) {
        self.commits += o.commits;
        self.rollbacks += o.rollbacks;
        self.spills += o.spills;
        self.reopens += o.reopens;
        self.checkpoints += o.checkpoints;
        self.max_depth = self.max_depth.max(o.max_depth);
        self.max_pages = self.max_pages.max(o.max_pages);
        self.max_free = self.max_free.max(o.max_free);
        self.max_overflow = self.max_overflow.max(o.max_overflow);
        self.max_in_flight = self.max_in_flight.max(o.max_in_flight);
        self.overlapped_commits += o.overlapped_commits;
        self.parallel_commits += o.parallel_commits;
        self.shared_sync_commits += o.shared_sync_commits;
        self.max_group = self.max_group.max(o.max_group);
    }
}

impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} commits, {} rollbacks, {} spilling txns, {} reopens, {} checkpoints, depth <= {}, <= {} pages, <= {} free, <= {} overflow",
            self.commits,
            self.rollbacks,
            self.spills,
            self.reopens,
            self.checkpoints,
            self.max_depth,
            self.max_pages,
            self.max_free,
            self.max_overflow
        )?;
        if self.max_in_flight > 1 {
            write!(
                f,
                ", <= {} write txns in flight, {} commits with others open",
                self.max_in_flight, self.overlapped_commits
            )?;
        }
        if self.parallel_commits > 0 {
            write!(
                f,
                ", {} commits on parallel threads, {} sharing an fdatasync, groups <= {}",
                self.parallel_commits, self.shared_sync_commits, self.max_group
            )?;
        }
        Ok(())
    }
}

/// A recorded run: the model after every commit and when each commit
/// started and was acknowledged, in operation counts.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// `models[k]`: contents after commit `k` (`models[0]`: empty).
    pub models: Vec<Model>,
    /// Fingerprints of `models`.
    pub fps: Vec<u64>,
    /// `marks[k - 1]` for commit `k`.
    pub marks: Vec<CommitMark>,
    /// What the run exercised.
    pub coverage: Coverage,
}

impl History {
    fn new() -> Self {
        let m = Model::default();
        History {
            fps: vec![m.fingerprint()],
            models: vec![m],
            marks: Vec::new(),
            coverage: Coverage::default(),
        }
    }

    fn push(&mut self, m: Model, mark: CommitMark) {
        self.fps.push(m.fingerprint());
        self.models.push(m);
        self.marks.push(mark);
    }

    /// A commit acknowledged: record its model and marks, check the
    /// database and note what the run reached.
    fn committed(&mut self, m: Model, mark: CommitMark, db: &Db) -> Result<()> {
        self.push(m, mark);
        let c = &mut self.coverage;
        c.commits += 1;
        let r = db.check()?;
        c.max_depth = c.max_depth.max(r.max_depth);
        c.max_pages = c.max_pages.max(r.page_count);
        c.max_free = c.max_free.max(r.free_pages);
        c.max_overflow = c.max_overflow.max(r.overflow_pages);
        Ok(())
    }

    /// Commits acknowledged within the first `cut` operations.
    pub fn acked(&self, cut: usize) -> usize {
        self.marks.iter().take_while(|m| m.ack_op <= cut).count()
    }

    /// Commits that had issued at least one operation within the first
    /// `cut` operations, or were acknowledged (a commit with nothing to
    /// write issues no operation).
    pub fn started(&self, cut: usize) -> usize {
        self.marks
            .iter()
            .take_while(|m| m.start_op < cut || m.ack_op <= cut)
            .count()
    }

    /// Commits `k` in `range` whose contents have fingerprint `fp`.
    pub fn find(&self, fp: u64, range: std::ops::RangeInclusive<usize>) -> Option<usize> {
        range.rev().find(|&k| self.fps.get(k) == Some(&fp))
    }
}

/// Run a whole workload against the database at `path`, recording the
/// history. `ops` reports how many storage operations were issued so far.
pub fn record(
    cfg: &WorkloadConfig,
    path: &std::path::Path,
    opts: &twinpage::Options,
    ops: &dyn Fn() -> usize,
) -> Result<History, RunError> {
    let mut hist = History::new();
    let first = Db::open(path, opts.clone())?;
    let mut cfg = cfg.clone();
    cfg.max_key.get_or_insert(first.max_key_len());
    let mut gen = Generator::new(cfg);
    let mut db = Some(first);
    while let Some(plan) = gen.next_plan() {
        match &plan {
            Plan::Reopen => {
                if let Some(d) = db.take() {
                    d.close()?;
                }
                db = Some(Db::open(path, opts.clone())?);
                hist.coverage.reopens += 1;
            }
            Plan::Checkpoint(mode) => {
                let d = db.as_ref().expect("database open between plans");
                d.checkpoint(*mode)?;
                hist.coverage.checkpoints += 1;
            }
            Plan::Txn {
                steps,
                commit,
                after,
            } => {
                let d = db.as_ref().expect("database open between plans");
                let mut t = d.begin_write()?;
                let before = ops();
                run_steps(&mut t, steps)?;
                if ops() > before {
                    hist.coverage.spills += 1;
                }
                if *commit {
                    let start_op = ops();
                    t.commit()?;
                    let mark = CommitMark {
                        start_op,
                        ack_op: ops(),
                    };
                    hist.committed(after.clone(), mark, d)?;
                    gen.committed(&plan);
                } else {
                    t.rollback()?;
                    hist.coverage.rollbacks += 1;
                }
            }
        }
    }
    if let Some(d) = db.take() {
        d.close()?;
    }
    Ok(hist)
}

/// The model after applying a transaction's writes to `base` (its reads
/// do not change what it writes: the planned writes are blind).
pub fn apply_steps(base: &Model, steps: &[Step]) -> Model {
    let mut m = base.clone();
    for s in steps {
        match s {
            Step::Put { table, key, value } => {
                m.tables
                    .entry(table.clone())
                    .or_default()
                    .insert(key.clone(), value.clone());
            }
            Step::Delete { table, key } => {
                if let Some(t) = m.tables.get_mut(table) {
                    t.remove(key);
                }
            }
            Step::CreateTable(n) => {
                m.tables.entry(n.clone()).or_default();
            }
            Step::DropTable(n) => {
                m.tables.remove(n);
            }
            Step::Get { .. } | Step::Scan { .. } => {}
        }
    }
    m
}

/// Run a step without checking what a read returns (with several
/// transactions in flight, what a read sees depends on the protocol; the
/// serializability checker tests that, the crash explorer tests
/// durability).
fn run_step_unchecked(t: &mut twinpage::WriteTxn, s: &Step) -> Result<()> {
    match s {
        Step::Put { table, key, value } => t.put(table, key, value),
        Step::Delete { table, key } => t.delete(table, key).map(|_| ()),
        Step::Get { table, key, .. } => t.get(table, key).map(|_| ()),
        Step::Scan { table, reverse, .. } => {
            let dir = if *reverse {
                Direction::Reverse
            } else {
                Direction::Forward
            };
            t.range(table, .., dir)?.try_for_each(|kv| kv.map(|_| ()))
        }
        Step::CreateTable(n) => t.create_table(n).map(|_| ()),
        Step::DropTable(n) => t.drop_table(n).map(|_| ()),
    }
}

/// The steps of a plan on the table of its first step.
fn one_table(steps: Vec<Step>) -> Vec<Step> {
    let table = |s: &Step| match s {
        Step::Put { table, .. }
        | Step::Delete { table, .. }
        | Step::Get { table, .. }
        | Step::Scan { table, .. } => Some(table.clone()),
        Step::CreateTable(_) | Step::DropTable(_) => None,
    };
    let Some(first) = steps.iter().find_map(table) else {
        return steps;
    };
    steps
        .into_iter()
        .filter(|s| table(s).as_ref() == Some(&first))
        .collect()
}

/// A write transaction of [`record_interleaved`] in flight.
struct InFlight {
    txn: twinpage::WriteTxn,
    steps: Vec<Step>,
    next: usize,
    commit: bool,
}

/// Whether an error ends only the transaction (the protocol refused it or
/// a lock was busy; with one driver thread a wait never ends well).
fn refused(e: &Error) -> bool {
    matches!(e, Error::Conflict { .. } | Error::Busy(_))
}

/// Add a session's group-commit counters to `c`.
fn note_groups(db: &Db, c: &mut Coverage) {
    let j = db.stats().journal;
    let get = |n: &str| j.iter().find(|(k, _)| *k == n).map_or(0, |(_, v)| *v);
    c.shared_sync_commits += get("commits_synced").saturating_sub(get("groups_of_1"));
    c.max_group = c.max_group.max(get("max_group"));
}

/// Commit `batch` on one thread each, all at once, so the commits meet in
/// the journal's group commit; returns the committed model. The history
/// takes them in commit (TID) order, each started when the batch started;
/// a commit acknowledged before an earlier one counts that one as
/// acknowledged then too (an acknowledgment covers every earlier commit:
/// invariant G1 of `journal/group.rs`). A refused commit rolls back.
fn commit_together(
    batch: Vec<InFlight>,
    committed: &Model,
    hist: &mut History,
    db: &Db,
    ops: &(dyn Fn() -> usize + Sync),
) -> Result<Model, RunError> {
    let start_op = ops();
    let go = std::sync::Barrier::new(batch.len());
    let outs: Vec<(Vec<Step>, Result<Option<u64>>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = batch
            .into_iter()
            .map(|f| {
                let go = &go;
                s.spawn(move || {
                    go.wait();
                    let r = f.txn.commit_tid();
                    (f.steps, r, ops())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a commit thread panicked"))
            .collect()
    });
    let mut done: Vec<(u64, Vec<Step>, usize)> = Vec::new();
    for (steps, r, ack) in outs {
        match r {
            // A commit that wrote nothing changes no model: first (so
            // no acknowledgment is taken from it for a real commit).
            Ok(tid) => done.push((tid.unwrap_or(0), steps, ack)),
            Err(e) if refused(&e) => hist.coverage.rollbacks += 1,
            Err(e) => return Err(e.into()),
        }
    }
    done.sort_by_key(|d| d.0);
    let mut acks: Vec<usize> = done.iter().map(|d| d.2).collect();
    for k in (0..acks.len().saturating_sub(1)).rev() {
        acks[k] = acks[k].min(acks[k + 1]);
    }
    let mut m = committed.clone();
    for ((_, steps, _), ack_op) in done.iter().zip(acks) {
        m = apply_steps(&m, steps);
        hist.committed(m.clone(), CommitMark { start_op, ack_op }, db)?;
    }
    Ok(m)
}

/// Run a workload with up to `cfg.in_flight` write transactions open at
/// once, their operations interleaved at random by this one thread, so a
/// crash finds several transactions in flight (each with its private
/// pages, reserved pages above the committed count, a free list in
/// memory) while one commits. Deterministic for a seed: with one thread no
/// lock wait can end well, so waits are refused at once (the caller sets
/// a zero busy timeout) and the transaction rolls back.
///
/// Commits still happen one at a time, so the recorded history has the
/// same shape as [`record`]'s: the model after each commit is the model
/// after the previous one plus the committing transaction's writes. When
/// `orders_commits` (2VTO: a younger transaction's commit waits for the
/// older ones), only the oldest open transaction commits. Transactions
/// that create or drop tables, and reopens, run when none is open.
pub fn record_interleaved(
    cfg: &WorkloadConfig,
    path: &std::path::Path,
    opts: &twinpage::Options,
    ops: &(dyn Fn() -> usize + Sync),
    orders_commits: bool,
) -> Result<History, RunError> {
    let mut hist = History::new();
    let first = Db::open(path, opts.clone())?;
    let mut cfg = cfg.clone();
    cfg.max_key.get_or_insert(first.max_key_len());
    let in_flight = cfg.in_flight.max(1);
    // More tables than transactions in flight, and most transactions on
    // one table: open transactions mostly touch different pages, so many
    // commits happen beside open transactions instead of refusing each
    // other (a page they both read is a conflict or a refused wait here).
    cfg.tables = cfg.tables.max(2 * in_flight);
    let mut rng = SmallRng::seed_from_u64(cfg.seed ^ 0x696e_666c_6967_6874);
    let group_commit = cfg.group_commit;
    let mut gen = Generator::new(cfg);
    let mut db = Some(first);
    let mut open: Vec<InFlight> = Vec::new();
    let mut committed = Model::default();
    // A plan that must run alone (DDL, reopen): drain the open ones first.
    let mut alone: Option<Plan> = None;
    let mut exhausted = false;
    loop {
        if exhausted && open.is_empty() && alone.is_none() {
            break;
        }
        if open.is_empty() {
            if let Some(plan) = alone.take() {
                let d = db.as_ref().expect("database open between plans");
                match &plan {
                    Plan::Reopen => {
                        if let Some(d) = db.take() {
                            note_groups(&d, &mut hist.coverage);
                            d.close()?;
                        }
                        db = Some(Db::open(path, opts.clone())?);
                        hist.coverage.reopens += 1;
                    }
                    Plan::Txn { steps, commit, .. } => {
                        let mut t = d.begin_write()?;
                        for s in steps {
                            run_step_unchecked(&mut t, s)?;
                        }
                        if *commit {
                            let start_op = ops();
                            t.commit()?;
                            let mark = CommitMark {
                                start_op,
                                ack_op: ops(),
                            };
                            committed = apply_steps(&committed, steps);
                            hist.committed(committed.clone(), mark, d)?;
                            gen.set_model(committed.clone());
                        } else {
                            t.rollback()?;
                            hist.coverage.rollbacks += 1;
                        }
                    }
                    Plan::Checkpoint(_) => {}
                }
                continue;
            }
        }
        let d = db.as_ref().expect("database open between plans");
        let begin = alone.is_none()
            && !exhausted
            && open.len() < in_flight
            && (open.is_empty() || rng.random_bool(0.35));
        if begin {
            let Some(plan) = gen.next_plan() else {
                exhausted = true;
                continue;
            };
            match plan {
                Plan::Checkpoint(mode) => {
                    match d.checkpoint(mode) {
                        Ok(_) => {}
                        Err(e) if refused(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                    hist.coverage.checkpoints += 1;
                }
                Plan::Reopen => alone = Some(Plan::Reopen),
                Plan::Txn {
                    steps,
                    commit,
                    after,
                } => {
                    let ddl = steps
                        .iter()
                        .any(|s| matches!(s, Step::CreateTable(_) | Step::DropTable(_)));
                    if ddl || committed.tables.is_empty() {
                        alone = Some(Plan::Txn {
                            steps,
                            commit,
                            after,
                        });
                        continue;
                    }
                    let steps = if rng.random_bool(0.75) {
                        one_table(steps)
                    } else {
                        steps
                    };
                    match d.begin_write() {
                        Ok(txn) => {
                            open.push(InFlight {
                                txn,
                                steps,
                                next: 0,
                                commit,
                            });
                            let c = &mut hist.coverage;
                            c.max_in_flight = c.max_in_flight.max(open.len());
                        }
                        // A replay's forced sleep (2VTO) cannot end while
                        // this thread holds older transactions: drop it.
                        Err(e) if refused(&e) => hist.coverage.rollbacks += 1,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            continue;
        }
        if open.is_empty() {
            continue;
        }
        let mut i = rng.random_range(0..open.len());
        if open[i].next >= open[i].steps.len() && orders_commits {
            // Only the oldest may commit; advance it instead.
            i = 0;
        }
        let f = &mut open[i];
        if f.next < f.steps.len() {
            let s = f.steps[f.next].clone();
            f.next += 1;
            match run_step_unchecked(&mut f.txn, &s) {
                Ok(()) => {}
                Err(e) if refused(&e) => {
                    let f = open.remove(i);
                    drop(f.txn);
                    hist.coverage.rollbacks += 1;
                }
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        if group_commit && open[i].commit {
            // The others done at the same moment commit with it, each on
            // its own thread; under commit ordering (2VTO, where `i` is
            // the oldest), the oldest ones, in order.
            let ready = |g: &InFlight| g.next >= g.steps.len() && g.commit;
            let mut idx = vec![i];
            if orders_commits {
                idx.extend((i + 1..open.len()).take_while(|&j| ready(&open[j])));
            } else {
                idx.extend((0..open.len()).filter(|&j| j != i && ready(&open[j])));
            }
            if idx.len() > 1 {
                idx.sort_unstable();
                let mut batch: Vec<InFlight> = idx.iter().rev().map(|&j| open.remove(j)).collect();
                batch.reverse();
                let (n, others) = (batch.len() as u64, !open.is_empty());
                committed = commit_together(batch, &committed, &mut hist, d, ops)?;
                gen.set_model(committed.clone());
                hist.coverage.parallel_commits += n;
                if others {
                    hist.coverage.overlapped_commits += n;
                }
                continue;
            }
        }
        let f = open.remove(i);
        if !f.commit {
            f.txn.rollback()?;
            hist.coverage.rollbacks += 1;
            continue;
        }
        let start_op = ops();
        let others = !open.is_empty();
        match f.txn.commit() {
            Ok(()) => {
                let mark = CommitMark {
                    start_op,
                    ack_op: ops(),
                };
                committed = apply_steps(&committed, &f.steps);
                hist.committed(committed.clone(), mark, d)?;
                gen.set_model(committed.clone());
                if others {
                    hist.coverage.overlapped_commits += 1;
                }
            }
            Err(e) if refused(&e) => hist.coverage.rollbacks += 1,
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(d) = db.take() {
        note_groups(&d, &mut hist.coverage);
        d.close()?;
    }
    Ok(hist)
}
