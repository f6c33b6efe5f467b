//! The serializability checker: does a recorded concurrent history equal
//! the serial execution of its committed transactions in commit order?
//!
//! Input ([`Recorded`]): the initial contents, and for every transaction
//! that ended well what it did in order — point reads with what they
//! returned (a value or absent), range reads with the rows they returned,
//! puts, deletes with whether the key existed — and where it stands:
//! a write transaction that committed has its TID (its place in the commit
//! order); a read-only transaction (or a write transaction that changed
//! nothing) saw some committed prefix, either exactly its snapshot (the
//! protocols whose readers read snapshots) or one in a range of commits
//! (readers that lock pages and read the newest state).
//!
//! Method:
//! 1. Sort the committed write transactions by TID (TIDs must be unique)
//!    and replay them one after the other on a model that keeps every
//!    version of every key (TID, value or deleted). Each read must return
//!    exactly what the model holds at that point of the serial order, the
//!    transaction's own earlier writes included; then its writes become
//!    versions at its TID.
//! 2. Each read-only transaction must match the model as of one committed
//!    prefix: its snapshot (exact), or some commit in its range.
//! 3. The database's final contents must equal the model after the last
//!    commit.
//!
//! A read that disagrees is an anomaly, classified: a **lost update** (the
//! transaction wrote the key it read stale, overwriting a commit it did
//! not see), **write skew** (it read a key stale that an earlier
//! transaction in commit order wrote, and that transaction read a key this
//! one writes: the rw-antidependency cycle), a **dirty read** (a value no
//! transaction committed), or a **stale read** (any other read the commit
//! order contradicts). This is stronger than "some serial order exists":
//! the order is fixed to the commit order, which every protocol here
//! promises (2VTO commits in TS order, the others validate or lock up to
//! their commit).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::ops::Bound;

/// One table's contents.
pub type Table = BTreeMap<Vec<u8>, Vec<u8>>;
/// Contents of a database: table name to rows.
pub type Contents = BTreeMap<String, Table>;
/// Rows as a range read returns them.
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;
/// A key's versions: (TID, value or deleted), oldest first.
type KeyVersions = Vec<(u64, Option<Vec<u8>>)>;

/// One operation of a transaction and what it returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// A point read.
    Get {
        /// Table.
        table: String,
        /// Key.
        key: Vec<u8>,
        /// What it returned.
        got: Option<Vec<u8>>,
    },
    /// A range read.
    Range {
        /// Table.
        table: String,
        /// Lower bound.
        lo: Bound<Vec<u8>>,
        /// Upper bound.
        hi: Bound<Vec<u8>>,
        /// Descending.
        reverse: bool,
        /// The rows it returned, in the order returned.
        got: Rows,
    },
    /// Insert or replace.
    Put {
        /// Table.
        table: String,
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// A delete and whether the key existed (a read too).
    Delete {
        /// Table.
        table: String,
        /// Key.
        key: Vec<u8>,
        /// What the delete reported.
        existed: bool,
    },
}

impl Access {
    fn writes(&self) -> Option<(&str, &[u8])> {
        match self {
            Access::Put { table, key, .. } | Access::Delete { table, key, .. } => {
                Some((table, key))
            }
            _ => None,
        }
    }
}

/// Where a transaction stands in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A committed write transaction: its TID.
    Committed(u64),
    /// A transaction that wrote nothing: it saw the committed prefix up to
    /// some commit `k` with `from <= k <= to` (TIDs); `exact`: `k` is the
    /// last commit at or below `from` (a snapshot).
    Read {
        /// The snapshot it began on.
        from: u64,
        /// The newest commit when it ended.
        to: u64,
        /// It reads exactly its snapshot.
        exact: bool,
    },
}

/// A transaction that ended well (committed, or a reader that finished).
#[derive(Debug, Clone)]
pub struct TxnRecord {
    /// Thread that ran it.
    pub thread: usize,
    /// Its number on that thread.
    pub seq: usize,
    /// Where it stands.
    pub place: Place,
    /// What it did, in order.
    pub ops: Vec<Access>,
}

impl TxnRecord {
    fn name(&self) -> String {
        match self.place {
            Place::Committed(tid) => format!("T{}.{} (TID {tid})", self.thread, self.seq),
            Place::Read { from, .. } => format!("R{}.{} (snapshot {from})", self.thread, self.seq),
        }
    }
}

/// A recorded history.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The contents before any recorded transaction.
    pub initial: Contents,
    /// The TID of the initial contents (every recorded commit is above).
    pub initial_tid: u64,
    /// The transactions that ended well.
    pub txns: Vec<TxnRecord>,
    /// The database's contents after the history, if read.
    pub final_contents: Option<Contents>,
}

/// Kinds of anomaly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A write transaction overwrote a commit it did not see.
    LostUpdate,
    /// Two transactions each read what the other wrote (rw cycle).
    WriteSkew,
    /// A value no committed transaction wrote.
    DirtyRead,
    /// Any other read the commit order contradicts.
    StaleRead,
    /// A reader saw no committed prefix it could have seen.
    NotAPrefix,
    /// Two commits with one TID.
    DuplicateTid,
    /// The final contents differ from the model.
    FinalContents,
    /// A protocol guarantee broke (AFUW aborted a transaction twice).
    Protocol,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::LostUpdate => "lost update",
            Kind::WriteSkew => "write skew",
            Kind::DirtyRead => "dirty read",
            Kind::StaleRead => "stale read",
            Kind::NotAPrefix => "reader saw no committed prefix",
            Kind::DuplicateTid => "duplicate TID",
            Kind::FinalContents => "final contents differ",
            Kind::Protocol => "protocol guarantee broken",
        })
    }
}

/// One anomaly.
#[derive(Debug, Clone)]
pub struct Anomaly {
    /// What kind.
    pub kind: Kind,
    /// The details.
    pub what: String,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.what)
    }
}

/// Every version of every key: (TID, value or deleted), oldest first.
#[derive(Default)]
struct Versions {
    tables: BTreeMap<String, BTreeMap<Vec<u8>, KeyVersions>>,
    /// Who wrote each version (index into the sorted commits).
    writer: HashMap<(String, Vec<u8>, u64), usize>,
    /// The TID of the initial contents.
    initial_tid: u64,
}

impl Versions {
    fn at(&self, table: &str, key: &[u8], prefix: u64) -> Option<&Vec<u8>> {
        self.tables
            .get(table)?
            .get(key)?
            .iter()
            .rev()
            .find(|v| v.0 <= prefix)?
            .1
            .as_ref()
    }

    fn range_at(&self, table: &str, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>, prefix: u64) -> Rows {
        let Some(t) = self.tables.get(table) else {
            return Vec::new();
        };
        if !valid_range(lo, hi) {
            return Vec::new();
        }
        t.range::<Vec<u8>, _>((lo.as_ref(), hi.as_ref()))
            .filter_map(|(k, vs)| {
                let v = vs.iter().rev().find(|v| v.0 <= prefix)?.1.as_ref()?;
                Some((k.clone(), v.clone()))
            })
            .collect()
    }

    /// Whether the key ever held `value` (absent: before its first write
    /// too, unless it was in the initial contents).
    fn ever(&self, table: &str, key: &[u8], value: &Option<Vec<u8>>) -> bool {
        let vs = self.tables.get(table).and_then(|t| t.get(key));
        let Some(vs) = vs else {
            return value.is_none();
        };
        if value.is_none() && vs.first().is_some_and(|v| v.0 > self.initial_tid) {
            return true;
        }
        vs.iter().any(|v| &v.1 == value)
    }

    fn push(&mut self, table: &str, key: &[u8], tid: u64, v: Option<Vec<u8>>, by: usize) {
        self.tables
            .entry(table.to_string())
            .or_default()
            .entry(key.to_vec())
            .or_default()
            .push((tid, v));
        self.writer
            .insert((table.to_string(), key.to_vec(), tid), by);
    }

    fn contents(&self) -> Contents {
        let mut c = Contents::new();
        for (name, t) in &self.tables {
            let rows = c.entry(name.clone()).or_default();
            for (k, vs) in t {
                if let Some(Some(v)) = vs.last().map(|v| &v.1) {
                    rows.insert(k.clone(), v.clone());
                }
            }
        }
        c
    }
}

/// Whether a range's bounds are in order (a reversed range is empty, and
/// `BTreeMap::range` would panic on it).
fn valid_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a < b,
        _ => true,
    }
}

fn in_range(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let above = match lo {
        Bound::Included(a) => k >= a.as_slice(),
        Bound::Excluded(a) => k > a.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match hi {
        Bound::Included(b) => k <= b.as_slice(),
        Bound::Excluded(b) => k < b.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

/// A key's value for messages.
fn show(v: &Option<Vec<u8>>) -> String {
    match v {
        None => "absent".into(),
        Some(v) if v.len() >= 8 => format!(
            "{} ({} bytes)",
            i64::from_be_bytes(v[..8].try_into().expect("8 bytes")),
            v.len()
        ),
        Some(v) => format!("{v:?}"),
    }
}

/// A read that disagrees with the model: what it saw of one key and what
/// the model holds.
struct Mismatch {
    table: String,
    key: Vec<u8>,
    got: Option<Vec<u8>>,
    want: Option<Vec<u8>>,
    /// The read saw only whether the key existed (a delete): `got` is
    /// `Some(empty)` for "present".
    presence_only: bool,
}

impl Mismatch {
    fn got(&self) -> String {
        match (&self.got, self.presence_only) {
            (Some(_), true) => "present".into(),
            (g, _) => show(g),
        }
    }
}

/// What one read returned against what the model says, at a prefix and
/// with the transaction's own writes on top.
fn read_matches(
    a: &Access,
    model: &Versions,
    prefix: u64,
    own: &BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>,
) -> Result<(), Mismatch> {
    let point = |table: &String, key: &Vec<u8>| -> Option<Vec<u8>> {
        match own.get(&(table.clone(), key.clone())) {
            Some(v) => v.clone(),
            None => model.at(table, key, prefix).cloned(),
        }
    };
    match a {
        Access::Get { table, key, got } => {
            let want = point(table, key);
            if &want != got {
                return Err(Mismatch {
                    table: table.clone(),
                    key: key.clone(),
                    got: got.clone(),
                    want,
                    presence_only: false,
                });
            }
        }
        Access::Delete {
            table,
            key,
            existed,
            ..
        } => {
            let want = point(table, key);
            if want.is_some() != *existed {
                return Err(Mismatch {
                    table: table.clone(),
                    key: key.clone(),
                    got: existed.then(Vec::new),
                    want,
                    presence_only: true,
                });
            }
        }
        Access::Range {
            table,
            lo,
            hi,
            reverse,
            got,
        } => {
            let mut rows: BTreeMap<Vec<u8>, Vec<u8>> =
                model.range_at(table, lo, hi, prefix).into_iter().collect();
            for ((t, k), v) in own {
                if t == table && in_range(k, lo, hi) {
                    match v {
                        Some(v) => rows.insert(k.clone(), v.clone()),
                        None => rows.remove(k),
                    };
                }
            }
            let mut want: Rows = rows.into_iter().collect();
            if *reverse {
                want.reverse();
            }
            if &want != got {
                // Name the first key that differs.
                let got_map: BTreeMap<_, _> = got.iter().cloned().collect();
                let want_map: BTreeMap<_, _> = want.iter().cloned().collect();
                let keys: BTreeSet<&Vec<u8>> = got_map.keys().chain(want_map.keys()).collect();
                let key = keys
                    .into_iter()
                    .find(|k| got_map.get(*k) != want_map.get(*k))
                    .cloned()
                    .unwrap_or_default();
                return Err(Mismatch {
                    table: table.clone(),
                    got: got_map.get(&key).cloned(),
                    want: want_map.get(&key).cloned(),
                    key,
                    presence_only: false,
                });
            }
        }
        Access::Put { .. } => {}
    }
    Ok(())
}

/// Check a recorded history; an empty list means serializable in commit
/// order.
pub fn check(h: &Recorded) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let mut model = Versions {
        initial_tid: h.initial_tid,
        ..Versions::default()
    };
    for (name, t) in &h.initial {
        model.tables.entry(name.clone()).or_default();
        for (k, v) in t {
            model.push(name, k, h.initial_tid, Some(v.clone()), usize::MAX);
        }
    }
    let mut commits: Vec<&TxnRecord> = h
        .txns
        .iter()
        .filter(|t| matches!(t.place, Place::Committed(_)))
        .collect();
    let tid = |t: &TxnRecord| match t.place {
        Place::Committed(tid) => tid,
        Place::Read { .. } => 0,
    };
    commits.sort_by_key(|t| tid(t));
    for w in commits.windows(2) {
        if tid(w[0]) == tid(w[1]) {
            out.push(Anomaly {
                kind: Kind::DuplicateTid,
                what: format!("{} and {} committed as one TID", w[0].name(), w[1].name()),
            });
        }
    }
    if let Some(first) = commits.first() {
        if tid(first) <= h.initial_tid {
            out.push(Anomaly {
                kind: Kind::DuplicateTid,
                what: format!(
                    "{} committed at or below the initial TID {}",
                    first.name(),
                    h.initial_tid
                ),
            });
        }
    }
    // 1. The commits in commit order.
    for (i, t) in commits.iter().enumerate() {
        let me = tid(t);
        let mut own: BTreeMap<(String, Vec<u8>), Option<Vec<u8>>> = BTreeMap::new();
        let mut reported = false;
        for a in &t.ops {
            if !reported {
                if let Err(m) = read_matches(a, &model, u64::MAX, &own) {
                    reported = true;
                    out.push(classify(t, &commits, &model, &m));
                }
            }
            match a {
                Access::Put { table, key, value } => {
                    own.insert((table.clone(), key.clone()), Some(value.clone()));
                }
                Access::Delete { table, key, .. } => {
                    own.insert((table.clone(), key.clone()), None);
                }
                _ => {}
            }
        }
        for ((table, key), v) in own {
            model.push(&table, &key, me, v, i);
        }
    }
    // 2. Readers: some committed prefix.
    let tids: Vec<u64> = commits.iter().map(|t| tid(t)).collect();
    for t in h.txns.iter() {
        let Place::Read { from, to, exact } = t.place else {
            continue;
        };
        let mut candidates = vec![from];
        if !exact {
            candidates.extend(tids.iter().copied().filter(|&c| c > from && c <= to));
        }
        let own = BTreeMap::new();
        let fits = |prefix: u64| {
            t.ops
                .iter()
                .all(|a| read_matches(a, &model, prefix, &own).is_ok())
        };
        if !candidates.iter().any(|&p| fits(p)) {
            let why = t
                .ops
                .iter()
                .find_map(|a| read_matches(a, &model, from, &own).err())
                .map(|m| {
                    format!(
                        "at its snapshot {}/{} is {}, it read {}",
                        m.table,
                        String::from_utf8_lossy(&m.key),
                        show(&m.want),
                        m.got()
                    )
                })
                .unwrap_or_default();
            out.push(Anomaly {
                kind: Kind::NotAPrefix,
                what: format!(
                    "{} matches no committed prefix {}: {why}",
                    t.name(),
                    if exact {
                        format!("(exactly its snapshot {from})")
                    } else {
                        format!("between commits {from} and {to}")
                    }
                ),
            });
        }
    }
    // 3. The final contents.
    if let Some(fin) = &h.final_contents {
        let want = model.contents();
        let differs: Vec<String> = want
            .keys()
            .chain(fin.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter_map(|name| {
                let (w, g) = (want.get(name), fin.get(name));
                let empty = Table::new();
                let (w, g) = (w.unwrap_or(&empty), g.unwrap_or(&empty));
                let bad: Vec<_> = w
                    .keys()
                    .chain(g.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter(|k| w.get(*k) != g.get(*k))
                    .take(3)
                    .map(|k| {
                        format!(
                            "{name}/{}: {} (model {})",
                            String::from_utf8_lossy(k),
                            show(&g.get(k).cloned()),
                            show(&w.get(k).cloned())
                        )
                    })
                    .collect();
                (!bad.is_empty()).then(|| bad.join(", "))
            })
            .collect();
        if !differs.is_empty() {
            out.push(Anomaly {
                kind: Kind::FinalContents,
                what: differs.join("; "),
            });
        }
    }
    out
}

fn classify(t: &TxnRecord, commits: &[&TxnRecord], model: &Versions, m: &Mismatch) -> Anomaly {
    let (table, key) = (m.table.as_str(), m.key.as_slice());
    let k = String::from_utf8_lossy(key);
    let what_read = format!(
        "{} read {table}/{k} = {}, but in commit order it is {}",
        t.name(),
        m.got(),
        show(&m.want)
    );
    if !m.presence_only && !model.ever(table, key, &m.got) {
        return Anomaly {
            kind: Kind::DirtyRead,
            what: format!("{what_read}; no commit ever wrote what it read"),
        };
    }
    // The transaction that wrote what the serial order says it should see.
    let last = model
        .tables
        .get(table)
        .and_then(|t| t.get(key))
        .and_then(|vs| vs.last())
        .and_then(|v| model.writer.get(&(table.to_string(), key.to_vec(), v.0)))
        .and_then(|&w| commits.get(w).copied());
    let writes: BTreeSet<(&str, &[u8])> = t.ops.iter().filter_map(Access::writes).collect();
    if writes.contains(&(table, key)) {
        return Anomaly {
            kind: Kind::LostUpdate,
            what: format!(
                "{what_read}; it then wrote the key, overwriting {} unseen",
                last.map_or("the initial contents".into(), |w| w.name())
            ),
        };
    }
    if let Some(w) = last {
        let theirs_read: BTreeSet<(String, Vec<u8>)> = w
            .ops
            .iter()
            .filter_map(|a| match a {
                Access::Get { table, key, .. } | Access::Delete { table, key, .. } => {
                    Some((table.clone(), key.clone()))
                }
                _ => None,
            })
            .collect();
        let in_their_ranges = |tb: &str, k: &[u8]| {
            w.ops.iter().any(|a| match a {
                Access::Range { table, lo, hi, .. } => table == tb && in_range(k, lo, hi),
                _ => false,
            })
        };
        let cycle = writes.iter().find(|(tb, k)| {
            theirs_read.contains(&(tb.to_string(), k.to_vec())) || in_their_ranges(tb, k)
        });
        if let Some((tb, k2)) = cycle {
            return Anomaly {
                kind: Kind::WriteSkew,
                what: format!(
                    "{what_read}; {} (earlier in commit order) wrote it after reading \
                     {tb}/{}, which {} writes",
                    w.name(),
                    String::from_utf8_lossy(k2),
                    t.name()
                ),
            };
        }
    }
    Anomaly {
        kind: Kind::StaleRead,
        what: format!(
            "{what_read} (written by {})",
            last.map_or("the initial contents".into(), |w| w.name())
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(n: i64) -> Vec<u8> {
        n.to_be_bytes().to_vec()
    }

    fn get(t: &str, k: &str, got: Option<i64>) -> Access {
        Access::Get {
            table: t.into(),
            key: k.as_bytes().to_vec(),
            got: got.map(v),
        }
    }

    fn put(t: &str, k: &str, n: i64) -> Access {
        Access::Put {
            table: t.into(),
            key: k.as_bytes().to_vec(),
            value: v(n),
        }
    }

    fn txn(thread: usize, place: Place, ops: Vec<Access>) -> TxnRecord {
        TxnRecord {
            thread,
            seq: 0,
            place,
            ops,
        }
    }

    fn initial() -> Recorded {
        let mut c = Contents::new();
        let t = c.entry("a".into()).or_default();
        t.insert(b"x".to_vec(), v(1));
        t.insert(b"y".to_vec(), v(1));
        Recorded {
            initial: c,
            initial_tid: 5,
            ..Recorded::default()
        }
    }

    #[test]
    fn a_serial_history_passes() {
        let mut h = initial();
        h.txns = vec![
            txn(
                0,
                Place::Committed(6),
                vec![get("a", "x", Some(1)), put("a", "x", 2)],
            ),
            txn(
                1,
                Place::Committed(7),
                vec![get("a", "x", Some(2)), put("a", "x", 3)],
            ),
            txn(
                2,
                Place::Read {
                    from: 6,
                    to: 6,
                    exact: true,
                },
                vec![get("a", "x", Some(2)), get("a", "y", Some(1))],
            ),
        ];
        let mut fin = h.initial.clone();
        fin.get_mut("a").unwrap().insert(b"x".to_vec(), v(3));
        h.final_contents = Some(fin);
        assert!(check(&h).is_empty(), "{:?}", check(&h));
    }

    #[test]
    fn a_lost_update_is_caught() {
        let mut h = initial();
        // Both read x = 1 and write 2: the second overwrote the first.
        h.txns = vec![
            txn(
                0,
                Place::Committed(6),
                vec![get("a", "x", Some(1)), put("a", "x", 2)],
            ),
            txn(
                1,
                Place::Committed(7),
                vec![get("a", "x", Some(1)), put("a", "x", 2)],
            ),
        ];
        let a = check(&h);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].kind, Kind::LostUpdate, "{}", a[0]);
    }

    #[test]
    fn write_skew_is_caught() {
        let mut h = initial();
        // Each reads both, and writes one: both saw x + y = 2.
        h.txns = vec![
            txn(
                0,
                Place::Committed(6),
                vec![
                    get("a", "x", Some(1)),
                    get("a", "y", Some(1)),
                    put("a", "x", 0),
                ],
            ),
            txn(
                1,
                Place::Committed(7),
                vec![
                    get("a", "x", Some(1)),
                    get("a", "y", Some(1)),
                    put("a", "y", 0),
                ],
            ),
        ];
        let a = check(&h);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].kind, Kind::WriteSkew, "{}", a[0]);
    }

    #[test]
    fn a_reader_outside_every_prefix_is_caught() {
        let mut h = initial();
        h.txns = vec![
            txn(
                0,
                Place::Committed(6),
                vec![put("a", "x", 2), put("a", "y", 2)],
            ),
            // Half of the commit: x new, y old.
            txn(
                1,
                Place::Read {
                    from: 5,
                    to: 6,
                    exact: false,
                },
                vec![get("a", "x", Some(2)), get("a", "y", Some(1))],
            ),
            // A snapshot reader must see its snapshot, not a later one.
            txn(
                2,
                Place::Read {
                    from: 5,
                    to: 6,
                    exact: true,
                },
                vec![get("a", "x", Some(2))],
            ),
            // A lock reader may see the later one.
            txn(
                3,
                Place::Read {
                    from: 5,
                    to: 6,
                    exact: false,
                },
                vec![get("a", "x", Some(2)), get("a", "y", Some(2))],
            ),
        ];
        let a = check(&h);
        assert_eq!(a.len(), 2, "{a:?}");
        assert!(a.iter().all(|a| a.kind == Kind::NotAPrefix));
    }

    #[test]
    fn dirty_reads_ranges_and_final_contents() {
        let mut h = initial();
        h.txns = vec![
            txn(0, Place::Committed(6), vec![get("a", "x", Some(99))]),
            txn(
                1,
                Place::Committed(7),
                vec![
                    put("a", "z", 4),
                    Access::Range {
                        table: "a".into(),
                        lo: Bound::Included(b"x".to_vec()),
                        hi: Bound::Unbounded,
                        reverse: true,
                        got: vec![
                            (b"z".to_vec(), v(4)),
                            (b"y".to_vec(), v(1)),
                            (b"x".to_vec(), v(1)),
                        ],
                    },
                ],
            ),
        ];
        h.final_contents = Some(h.initial.clone());
        let a = check(&h);
        let kinds: Vec<Kind> = a.iter().map(|a| a.kind).collect();
        assert_eq!(kinds, vec![Kind::DirtyRead, Kind::FinalContents], "{a:?}");
    }
}
