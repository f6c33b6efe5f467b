//! The Mobibench workload: one deterministic stream of transactions,
//! generated once from the seed and replayed unchanged on every engine, so
//! every engine sees the same keys, values and transaction boundaries.
//!
//! Shape (Mobibench's `tblMyList`): each row is an integer key, a `Value`
//! of `record_size` printable bytes and a 19-byte `creation_date`.
//!
//! Keys ([`KeySharing`]): by default threads own disjoint key ranges
//! ([`THREAD_KEY_STRIDE`] apart) in every table, so any interleaving of the
//! threads ends in the same database contents. With shared keys (the IPS
//! paper's multi-threaded Mobibench, \[IPS\] §5.3) every thread picks from
//! the same rows and the same popularity order, so transactions conflict;
//! the streams are generated round robin over the threads, and inserts take
//! the next key of one counter per table.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::Serialize;
use std::fmt;

/// Distance between the key ranges of two threads.
pub const THREAD_KEY_STRIDE: i64 = 1 << 40;

/// Length of the `creation_date` column ("YYYY-MM-DD HH:MM:SS").
pub const DATE_LEN: usize = 19;

/// Rows a range scan reads ([`Action::Scan`]).
pub const SCAN_ROWS: usize = 100;

/// The operation a workload runs (`--op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Insert new rows (ascending keys after the pre-fill, like Mobibench's
    /// auto-increment id).
    Insert,
    /// Overwrite the value of existing rows.
    Update,
    /// Delete existing rows.
    Delete,
    /// Point reads of existing rows.
    Select,
    /// Range scans: [`SCAN_ROWS`] rows in key order from an existing key
    /// (fewer near the end of the table).
    Scan,
    /// Reads and writes: each operation is a write with probability
    /// `write_ratio`; writes are insert, update or delete with equal odds.
    Mix,
    /// \[IPS\] §5.3's concurrent Mobibench: each operation is an UPDATE
    /// with probability `write_ratio`, else a point SELECT.
    SelectUpdate,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Insert => "insert",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::Select => "select",
            Operation::Scan => "scan",
            Operation::Mix => "mix",
            Operation::SelectUpdate => "select-update",
        })
    }
}

/// How existing keys are picked for update, delete and select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDist {
    /// Every live key equally likely.
    Uniform,
    /// Zipf over the live keys (in a random but fixed order) with skew
    /// `zipf_s`.
    Zipf,
}

/// Whether threads work on their own rows or on the same ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeySharing {
    /// Each thread owns a key range: no two transactions touch one row.
    Disjoint,
    /// Every thread picks from the same rows: transactions conflict.
    Shared,
}

/// The order the pre-fill rows are loaded in (one transaction either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefillOrder {
    /// Ascending keys (Mobibench's auto-increment): full leaves.
    Sequential,
    /// The same keys in a random order: leaves about two-thirds full, as
    /// inserts of random keys leave a B-tree.
    Random,
}

/// Everything that determines the operation stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadSpec {
    /// The operation.
    pub op: Operation,
    /// Fraction of writes for [`Operation::Mix`].
    pub write_ratio: f64,
    /// Measured transactions (all threads together).
    pub txns: u64,
    /// Rows loaded into every table before measuring.
    pub prefill: u64,
    /// Operations per transaction (1 = auto-commit).
    pub ops_per_txn: u32,
    /// Bytes of the `Value` column.
    pub record_size: usize,
    /// Key distribution.
    pub dist: KeyDist,
    /// Zipf skew factor.
    pub zipf_s: f64,
    /// Number of tables.
    pub tables: u32,
    /// Number of threads.
    pub threads: u32,
    /// Disjoint or shared keys.
    pub keys: KeySharing,
    /// Order of the pre-fill.
    pub prefill_order: PrefillOrder,
    /// Random seed.
    pub seed: u64,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            op: Operation::Insert,
            write_ratio: 0.5,
            txns: 5000,
            prefill: 5000,
            ops_per_txn: 1,
            record_size: 100,
            dist: KeyDist::Uniform,
            zipf_s: 0.99,
            tables: 1,
            threads: 1,
            keys: KeySharing::Disjoint,
            prefill_order: PrefillOrder::Sequential,
            seed: 1,
        }
    }
}

/// What one operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Insert a new row.
    Insert,
    /// Replace the value of an existing row.
    Update,
    /// Delete an existing row.
    Delete,
    /// Read an existing row.
    Select,
    /// Read up to [`SCAN_ROWS`] rows in key order, from an existing row on.
    Scan,
}

impl Action {
    /// True for insert, update and delete.
    pub fn is_write(self) -> bool {
        !matches!(self, Action::Select | Action::Scan)
    }
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Op {
    /// What it does.
    pub action: Action,
    /// Index of the table.
    pub table: u32,
    /// Row key (SQLite's `id`).
    pub key: i64,
    /// For insert and update: `Value` followed by `creation_date`;
    /// empty otherwise.
    pub payload: Vec<u8>,
}

impl Op {
    /// The `Value` column (printable ASCII, valid UTF-8).
    pub fn value(&self) -> &str {
        let n = self.payload.len().saturating_sub(DATE_LEN);
        std::str::from_utf8(&self.payload[..n]).unwrap_or("")
    }

    /// The `creation_date` column.
    pub fn date(&self) -> &str {
        let n = self.payload.len().saturating_sub(DATE_LEN);
        std::str::from_utf8(&self.payload[n..]).unwrap_or("")
    }
}

/// One transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Txn {
    /// Its operations, in order.
    pub ops: Vec<Op>,
}

impl Txn {
    /// True if any operation writes.
    pub fn writes(&self) -> bool {
        self.ops.iter().any(|o| o.action.is_write())
    }
}

/// The generated workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// What it was generated from.
    pub spec: WorkloadSpec,
    /// Table names, index = [`Op::table`].
    pub tables: Vec<String>,
    /// Rows to load before measuring (all [`Action::Insert`]), ascending
    /// key order per table.
    pub prefill: Vec<Op>,
    /// The measured transactions of each thread.
    pub threads: Vec<Vec<Txn>>,
    /// Rows each table holds after the whole workload (when no operation
    /// can miss its row: see [`Workload::may_miss`]).
    pub expected_rows: Vec<u64>,
    /// With shared keys and deletes or inserts beside other operations, an
    /// update, delete or read may find its row gone (another thread deleted
    /// it) or not there yet: engines report such a miss instead of
    /// failing, and the check at the end uses the reported outcomes.
    pub may_miss: bool,
}

/// Why a spec cannot be generated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Name of table `i` (Mobibench's table is `tblMyList`).
pub fn table_name(i: u32) -> String {
    if i == 0 {
        "tblMyList".to_string()
    } else {
        format!("tblMyList{i}")
    }
}

const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A deterministic clock for `creation_date`: 2024-01-01 00:00:00 plus
/// `secs` seconds, formatted like SQLite's `datetime()`.
pub fn date_string(secs: u64) -> String {
    let days = (secs / 86_400) as i64 + 19_723; // days from 1970-01-01 to 2024-01-01
    let rem = secs % 86_400;
    // Civil-from-days (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

struct Gen {
    rng: StdRng,
    record_size: usize,
    clock: u64,
}

impl Gen {
    fn payload(&mut self) -> Vec<u8> {
        let mut p = Vec::with_capacity(self.record_size + DATE_LEN);
        for _ in 0..self.record_size {
            p.push(ALPHABET[self.rng.random_range(0..ALPHABET.len())]);
        }
        p.extend_from_slice(date_string(self.clock).as_bytes());
        self.clock += 1;
        p
    }
}

/// The keys one thread owns in one table.
struct Partition {
    /// Live keys in "popularity rank" order (rank 0 is the hottest).
    live: Vec<i64>,
    next_key: i64,
}

impl Workload {
    /// Generate the workload. The same spec always yields the same stream.
    pub fn generate(spec: &WorkloadSpec) -> Result<Workload, SpecError> {
        if spec.threads == 0 || spec.tables == 0 {
            return Err(SpecError("threads and tables must be at least 1".into()));
        }
        if !(1..=20).contains(&spec.ops_per_txn) {
            return Err(SpecError("ops per transaction must be 1..=20".into()));
        }
        if spec.record_size == 0 {
            return Err(SpecError("record size must be at least 1".into()));
        }
        if !(0.0..=1.0).contains(&spec.write_ratio) {
            return Err(SpecError("write ratio must be within 0..=1".into()));
        }
        if spec.dist == KeyDist::Zipf && (spec.zipf_s.is_nan() || spec.zipf_s < 0.0) {
            return Err(SpecError("zipf skew must be >= 0".into()));
        }
        let threads = spec.threads as usize;
        let tables = spec.tables as usize;
        let shared = spec.keys == KeySharing::Shared;
        let mut g = Gen {
            rng: StdRng::seed_from_u64(spec.seed),
            record_size: spec.record_size,
            clock: 0,
        };
        // parts[table][owner]: one owner per thread, or one for all of them.
        let owners = if shared { 1 } else { threads };
        let mut parts: Vec<Vec<Partition>> = Vec::with_capacity(tables);
        let mut prefill = Vec::new();
        for table in 0..tables {
            let mut row = Vec::with_capacity(owners);
            for t in 0..owners {
                let n = if shared {
                    spec.prefill
                } else {
                    share(spec.prefill, spec.threads, t)
                } as i64;
                let base = t as i64 * THREAD_KEY_STRIDE;
                let mut live = Vec::with_capacity(n as usize);
                for k in base..base + n {
                    prefill.push(Op {
                        action: Action::Insert,
                        table: table as u32,
                        key: k,
                        payload: g.payload(),
                    });
                    live.push(k);
                }
                // The popularity order of keys is random, so the hot keys of
                // a Zipf run are spread over the tree.
                shuffle(&mut live, &mut g.rng);
                row.push(Partition {
                    live,
                    next_key: base + n,
                });
            }
            parts.push(row);
        }
        if spec.prefill_order == PrefillOrder::Random {
            shuffle(&mut prefill, &mut g.rng);
        }
        let counts: Vec<u64> = (0..threads)
            .map(|t| share(spec.txns, spec.threads, t))
            .collect();
        let mut out_threads: Vec<Vec<Txn>> = counts
            .iter()
            .map(|&n| Vec::with_capacity(n as usize))
            .collect();
        // Disjoint keys: thread by thread. Shared keys: round robin, so the
        // threads' streams interleave in the one key space as they will
        // when run.
        let order: Vec<usize> = if shared {
            let rounds = counts.iter().copied().max().unwrap_or(0);
            let counts = &counts;
            (0..rounds)
                .flat_map(|r| (0..threads).filter(move |&t| r < counts[t]))
                .collect()
        } else {
            (0..threads)
                .flat_map(|t| std::iter::repeat_n(t, counts[t] as usize))
                .collect()
        };
        for t in order {
            let owner = if shared { 0 } else { t };
            let mut ops = Vec::with_capacity(spec.ops_per_txn as usize);
            for _ in 0..spec.ops_per_txn {
                let table = if tables > 1 {
                    g.rng.random_range(0..tables)
                } else {
                    0
                };
                let action = pick_action(spec, &mut g.rng, parts[table][owner].live.is_empty());
                let part = &mut parts[table][owner];
                let op = match action {
                    Action::Insert => {
                        let key = part.next_key;
                        part.next_key += 1;
                        part.live.push(key);
                        Op {
                            action,
                            table: table as u32,
                            key,
                            payload: g.payload(),
                        }
                    }
                    _ => {
                        if part.live.is_empty() {
                            return Err(SpecError(format!(
                                "{} ran out of rows: {} must cover its {}",
                                spec.op,
                                if shared {
                                    "the pre-fill (rows per table)"
                                } else {
                                    "each thread's share of the pre-fill (prefill / threads per table)"
                                },
                                action_name(action)
                            )));
                        }
                        let idx = pick_index(spec, &mut g.rng, part.live.len())?;
                        let key = if action == Action::Delete {
                            // remove (not swap_remove) keeps the rank
                            // order of the remaining keys.
                            part.live.remove(idx)
                        } else {
                            part.live[idx]
                        };
                        let payload = if action == Action::Update {
                            g.payload()
                        } else {
                            Vec::new()
                        };
                        Op {
                            action,
                            table: table as u32,
                            key,
                            payload,
                        }
                    }
                };
                ops.push(op);
            }
            out_threads[t].push(Txn { ops });
        }
        let expected_rows = parts
            .iter()
            .map(|row| row.iter().map(|p| p.live.len() as u64).sum())
            .collect();
        // A row can be missing only if one thread's insert or delete can
        // race another thread's operation on the same key.
        let may_miss = shared && threads > 1 && spec.op == Operation::Mix;
        Ok(Workload {
            spec: spec.clone(),
            tables: (0..spec.tables).map(table_name).collect(),
            prefill,
            threads: out_threads,
            expected_rows,
            may_miss,
        })
    }

    /// Measured transactions over all threads.
    pub fn total_txns(&self) -> u64 {
        self.threads.iter().map(|t| t.len() as u64).sum()
    }

    /// Measured operations over all threads.
    pub fn total_ops(&self) -> u64 {
        self.threads
            .iter()
            .flat_map(|t| t.iter())
            .map(|x| x.ops.len() as u64)
            .sum()
    }
}

fn action_name(a: Action) -> &'static str {
    match a {
        Action::Insert => "inserts",
        Action::Update => "updates",
        Action::Delete => "deletes",
        Action::Select => "selects",
        Action::Scan => "scans",
    }
}

/// Thread `t`'s share of `total` (the remainder goes to the first threads).
fn share(total: u64, threads: u32, t: usize) -> u64 {
    let threads = u64::from(threads);
    total / threads + u64::from((t as u64) < total % threads)
}

fn shuffle<T>(v: &mut [T], rng: &mut StdRng) {
    for i in (1..v.len()).rev() {
        let j = rng.random_range(0..=i);
        v.swap(i, j);
    }
}

fn pick_action(spec: &WorkloadSpec, rng: &mut StdRng, empty: bool) -> Action {
    match spec.op {
        Operation::Insert => Action::Insert,
        Operation::Update => Action::Update,
        Operation::Delete => Action::Delete,
        Operation::Select => Action::Select,
        Operation::Scan => Action::Scan,
        Operation::SelectUpdate => {
            if empty {
                Action::Insert
            } else if rng.random_bool(spec.write_ratio) {
                Action::Update
            } else {
                Action::Select
            }
        }
        Operation::Mix => {
            if rng.random_bool(spec.write_ratio) {
                match rng.random_range(0..3) {
                    _ if empty => Action::Insert,
                    0 => Action::Insert,
                    1 => Action::Update,
                    _ => Action::Delete,
                }
            } else if empty {
                Action::Insert
            } else {
                Action::Select
            }
        }
    }
}

fn pick_index(spec: &WorkloadSpec, rng: &mut StdRng, len: usize) -> Result<usize, SpecError> {
    match spec.dist {
        KeyDist::Uniform => Ok(rng.random_range(0..len)),
        KeyDist::Zipf => {
            let z = Zipf::new(len as f64, spec.zipf_s)
                .map_err(|e| SpecError(format!("zipf distribution: {e}")))?;
            let rank: f64 = z.sample(rng);
            Ok((rank as usize).clamp(1, len) - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashSet};

    fn spec(op: Operation) -> WorkloadSpec {
        WorkloadSpec {
            op,
            txns: 300,
            prefill: 1000,
            ops_per_txn: 3,
            ..WorkloadSpec::default()
        }
    }

    #[test]
    fn same_seed_same_stream() {
        for op in [
            Operation::Insert,
            Operation::Update,
            Operation::Delete,
            Operation::Select,
            Operation::Mix,
        ] {
            for dist in [KeyDist::Uniform, KeyDist::Zipf] {
                let s = WorkloadSpec {
                    dist,
                    tables: 2,
                    threads: 3,
                    ..spec(op)
                };
                let a = Workload::generate(&s).unwrap();
                let b = Workload::generate(&s).unwrap();
                assert_eq!(a.prefill, b.prefill);
                assert_eq!(a.threads, b.threads);
                assert_eq!(a.expected_rows, b.expected_rows);
                let c = Workload::generate(&WorkloadSpec {
                    seed: 2,
                    ..s.clone()
                })
                .unwrap();
                assert_ne!(a.threads, c.threads, "{op} {dist:?}: seed must matter");
            }
        }
    }

    /// Replaying the stream on a model table gives the expected row counts,
    /// and every update/delete/select hits an existing key.
    #[test]
    fn stream_is_consistent() {
        for op in [
            Operation::Insert,
            Operation::Update,
            Operation::Delete,
            Operation::Select,
            Operation::Scan,
            Operation::Mix,
        ] {
            let s = WorkloadSpec {
                tables: 2,
                threads: 2,
                dist: KeyDist::Zipf,
                ..spec(op)
            };
            let w = Workload::generate(&s).unwrap();
            let mut model: Vec<BTreeMap<i64, Vec<u8>>> = vec![BTreeMap::new(); 2];
            for o in &w.prefill {
                assert!(model[o.table as usize]
                    .insert(o.key, o.payload.clone())
                    .is_none());
            }
            for (t, txns) in w.threads.iter().enumerate() {
                assert_eq!(txns.len(), 150);
                for txn in txns {
                    assert_eq!(txn.ops.len(), 3);
                    for o in &txn.ops {
                        // Threads stay in their own key range.
                        assert_eq!(o.key / THREAD_KEY_STRIDE, t as i64);
                        let m = &mut model[o.table as usize];
                        match o.action {
                            Action::Insert => {
                                assert_eq!(o.payload.len(), 100 + DATE_LEN);
                                assert!(m.insert(o.key, o.payload.clone()).is_none());
                            }
                            Action::Update => {
                                assert!(m.insert(o.key, o.payload.clone()).is_some())
                            }
                            Action::Delete => assert!(m.remove(&o.key).is_some()),
                            Action::Select | Action::Scan => assert!(m.contains_key(&o.key)),
                        }
                    }
                }
            }
            let counts: Vec<u64> = model.iter().map(|m| m.len() as u64).collect();
            assert_eq!(counts, w.expected_rows, "{op}");
        }
    }

    /// Shared keys: every thread picks from the one pre-filled key space;
    /// [IPS]'s workload is updates and point reads only, so no row can be
    /// missing; a random pre-fill order loads the same rows.
    #[test]
    fn shared_keys_use_one_key_space() {
        let s = WorkloadSpec {
            op: Operation::SelectUpdate,
            write_ratio: 0.2,
            txns: 4000,
            prefill: 500,
            threads: 4,
            keys: KeySharing::Shared,
            dist: KeyDist::Zipf,
            zipf_s: 1.0,
            ..WorkloadSpec::default()
        };
        let w = Workload::generate(&s).unwrap();
        assert!(!w.may_miss);
        assert_eq!(w.expected_rows, vec![500]);
        let mut writes = 0;
        let mut per_thread_keys: Vec<HashSet<i64>> = vec![HashSet::new(); 4];
        for (t, txns) in w.threads.iter().enumerate() {
            assert_eq!(txns.len(), 1000);
            for o in txns.iter().flat_map(|x| &x.ops) {
                assert!((0..500).contains(&o.key));
                assert!(matches!(o.action, Action::Update | Action::Select));
                writes += usize::from(o.action == Action::Update);
                per_thread_keys[t].insert(o.key);
            }
        }
        assert!((600..1000).contains(&writes), "{writes} updates of 4000");
        // The hot keys are the same for every thread.
        let common = per_thread_keys[0]
            .iter()
            .filter(|k| per_thread_keys[1..].iter().all(|s| s.contains(k)))
            .count();
        assert!(common > 20, "{common} keys every thread used");
        let r = Workload::generate(&WorkloadSpec {
            prefill_order: PrefillOrder::Random,
            ..s
        })
        .unwrap();
        assert_ne!(r.prefill, w.prefill);
        let mut a: Vec<i64> = r.prefill.iter().map(|o| o.key).collect();
        a.sort_unstable();
        assert_eq!(a, (0..500).collect::<Vec<_>>());
        assert!(
            Workload::generate(&WorkloadSpec {
                op: Operation::Mix,
                ..s
            })
            .unwrap()
            .may_miss
        );
    }

    #[test]
    fn zipf_is_skewed() {
        let s = WorkloadSpec {
            op: Operation::Update,
            txns: 2000,
            ops_per_txn: 1,
            prefill: 1000,
            dist: KeyDist::Zipf,
            zipf_s: 1.2,
            ..WorkloadSpec::default()
        };
        let w = Workload::generate(&s).unwrap();
        let distinct: HashSet<i64> = w.threads[0].iter().map(|t| t.ops[0].key).collect();
        assert!(distinct.len() < 700, "{} distinct keys", distinct.len());
    }

    #[test]
    fn delete_needs_enough_rows() {
        let s = WorkloadSpec {
            op: Operation::Delete,
            txns: 100,
            prefill: 50,
            ..WorkloadSpec::default()
        };
        assert!(Workload::generate(&s).is_err());
    }

    #[test]
    fn dates_are_formatted() {
        assert_eq!(date_string(0), "2024-01-01 00:00:00");
        assert_eq!(date_string(86_400 * 60 + 3661), "2024-03-01 01:01:01");
        assert_eq!(date_string(86_400 * 366), "2025-01-01 00:00:00");
    }
}
