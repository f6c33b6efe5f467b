//! What the engine holds after a run, checked against a model of the
//! workload and of what each transaction reported.
//!
//! * **Disjoint keys** (or one thread): every operation of every thread
//!   must have found its row, and the final contents must equal the
//!   stream replayed thread by thread (each key belongs to one thread, so
//!   the interleaving does not matter): every row, key and payload.
//! * **Shared keys**: the interleaving decides the result, so the check is
//!   per key. For each key the model collects the committed outcomes each
//!   thread reported: inserts and deletes that hit, and each thread's last
//!   successful write of the key. The engine's rows must then satisfy, for
//!   every key: present at the end exactly when `initially present +
//!   inserts - deletes` is 1 (and that count stays within 0..=1); a present
//!   row's payload is the last write of one of the threads that wrote it
//!   (each thread's writes of a key commit in its program order, so the
//!   last in commit order is some thread's last), or the pre-fill's when
//!   nobody wrote it; no row the model does not know. This is the final
//!   state of *some* order of the committed transactions per key; it does
//!   not check that one order explains every key at once (the
//!   serializability checker, `twinpage histories`, does that for
//!   twinpage's protocols).

use super::engines::{mismatch, Engine};
use super::workload::{Action, KeySharing, Workload};
use super::BenchError;
use std::collections::HashMap;

/// What the check compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// How: "exact contents", "per-key model" or "none (no rows)".
    pub how: &'static str,
    /// Rows per table at the end.
    pub rows: Vec<u64>,
    /// Operations that missed their row (shared keys with inserts and
    /// deletes only).
    pub misses: u64,
}

/// The model of one key under shared keys.
#[derive(Default)]
struct KeyModel<'a> {
    initial: Option<&'a [u8]>,
    inserts: u32,
    deletes: u32,
    /// The last successful write of each thread that wrote the key.
    last: Vec<(usize, &'a [u8])>,
}

/// Check `engine` after running `w`; `missed[t][i]` is the miss mask
/// transaction `i` of thread `t` reported when it committed.
pub fn check(
    engine: &dyn Engine,
    label: &str,
    w: &Workload,
    missed: &[Vec<u32>],
) -> Result<Verified, BenchError> {
    let misses: u64 = missed
        .iter()
        .flatten()
        .map(|m| u64::from(m.count_ones()))
        .sum();
    if misses > 0 && !w.may_miss {
        for (t, txns) in w.threads.iter().enumerate() {
            for (txn, &m) in txns.iter().zip(&missed[t]) {
                if m != 0 {
                    let op = &txn.ops[m.trailing_zeros() as usize];
                    return Err(BenchError::Msg(mismatch(label, op)));
                }
            }
        }
    }
    let shared = w.spec.keys == KeySharing::Shared && w.threads.len() > 1;
    let bad = |what: String| BenchError::Msg(format!("{label}: after the run, {what}"));
    if !shared {
        // Replay every stream on the pre-fill: the exact final contents.
        let mut model: HashMap<(u32, i64), &[u8]> = HashMap::with_capacity(w.prefill.len());
        for op in &w.prefill {
            model.insert((op.table, op.key), &op.payload);
        }
        for op in w.threads.iter().flatten().flat_map(|t| &t.ops) {
            match op.action {
                Action::Insert | Action::Update => {
                    model.insert((op.table, op.key), &op.payload);
                }
                Action::Delete => {
                    model.remove(&(op.table, op.key));
                }
                Action::Select | Action::Scan => {}
            }
        }
        let expected = model.len();
        return walk(
            engine,
            w,
            misses,
            expected,
            "exact contents",
            &bad,
            |t, key, payload| match model.get(&(t, key)) {
                Some(p) if *p == payload => Ok(()),
                Some(_) => Err(format!("row {key} of table {t} has the wrong value")),
                None => Err(format!(
                    "table {t} holds row {key}, which the workload does not"
                )),
            },
        );
    }
    let mut model: HashMap<(u32, i64), KeyModel> = HashMap::with_capacity(w.prefill.len());
    for op in &w.prefill {
        model.entry((op.table, op.key)).or_default().initial = Some(&op.payload);
    }
    for (t, txns) in w.threads.iter().enumerate() {
        for (txn, &m) in txns.iter().zip(&missed[t]) {
            for (j, op) in txn.ops.iter().enumerate() {
                if m & (1 << j) != 0 {
                    continue;
                }
                let k = model.entry((op.table, op.key)).or_default();
                match op.action {
                    Action::Insert | Action::Update => {
                        if op.action == Action::Insert {
                            k.inserts += 1;
                        }
                        match k.last.iter_mut().find(|l| l.0 == t) {
                            Some(l) => l.1 = &op.payload,
                            None => k.last.push((t, &op.payload)),
                        }
                    }
                    Action::Delete => k.deletes += 1,
                    Action::Select | Action::Scan => {}
                }
            }
        }
    }
    if let Some(((t, key), k)) = model.iter().find(|(_, k)| !(0..=1).contains(&k.count())) {
        return Err(bad(format!(
            "the transactions report {} insert(s) and {} delete(s) of row {key} of table {t}",
            k.inserts, k.deletes
        )));
    }
    let expected = model.values().filter(|k| k.count() == 1).count();
    walk(
        engine,
        w,
        misses,
        expected,
        "per-key model",
        &bad,
        |t, key, payload| {
            let Some(k) = model.get(&(t, key)) else {
                return Err(format!(
                    "table {t} holds row {key}, which no transaction wrote"
                ));
            };
            if k.count() != 1 {
                return Err(format!(
                    "row {key} of table {t} is there, though the committed inserts and deletes \
                 leave it {} time(s)",
                    k.count()
                ));
            }
            let ok = if k.last.is_empty() {
                k.initial == Some(payload)
            } else {
                k.last.iter().any(|l| l.1 == payload)
            };
            if !ok {
                return Err(format!(
                    "row {key} of table {t} holds a value no thread wrote last"
                ));
            }
            Ok(())
        },
    )
}

impl KeyModel<'_> {
    /// How many times the committed inserts and deletes leave the row.
    fn count(&self) -> i64 {
        i64::from(self.initial.is_some()) + i64::from(self.inserts) - i64::from(self.deletes)
    }
}

/// Visit every row of `engine`, check each with `row`, and require that
/// `expected` rows were there.
fn walk(
    engine: &dyn Engine,
    w: &Workload,
    misses: u64,
    expected: usize,
    how: &'static str,
    bad: &dyn Fn(String) -> BenchError,
    row: impl Fn(u32, i64, &[u8]) -> Result<(), String>,
) -> Result<Verified, BenchError> {
    let mut rows = vec![0u64; w.tables.len()];
    let mut seen = 0usize;
    let any = engine.visit(w, &mut |t, key, payload| {
        row(t, key, payload).map_err(bad)?;
        seen += 1;
        rows[t as usize] += 1;
        Ok(())
    })?;
    if !any {
        return Ok(Verified {
            how: "none (no rows)",
            rows: Vec::new(),
            misses,
        });
    }
    if seen != expected {
        return Err(bad(format!(
            "{} of the {expected} rows the committed transactions leave are missing (tables \
             hold {rows:?})",
            expected.saturating_sub(seen)
        )));
    }
    Ok(Verified { how, rows, misses })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engines::{RowVisitor, Worker};
    use crate::bench::workload::{KeyDist, Operation, PrefillOrder, WorkloadSpec};
    use std::collections::BTreeMap;
    use twinpage::storage::IoSnapshot;

    /// An engine that holds fixed rows.
    struct Rows(BTreeMap<(u32, i64), Vec<u8>>);

    impl Engine for Rows {
        fn settings(&self) -> Vec<(String, String)> {
            Vec::new()
        }
        fn load(&self, _w: &Workload) -> Result<(), BenchError> {
            Ok(())
        }
        fn worker(&self, _w: &Workload) -> Result<Box<dyn Worker + '_>, BenchError> {
            Err(BenchError::Msg("no workers".into()))
        }
        fn io(&self) -> IoSnapshot {
            IoSnapshot::default()
        }
        fn visit(&self, _w: &Workload, f: &mut RowVisitor<'_>) -> Result<bool, BenchError> {
            for ((t, k), v) in &self.0 {
                f(*t, *k, v)?;
            }
            Ok(true)
        }
        fn close(self: Box<Self>) -> Result<(), BenchError> {
            Ok(())
        }
    }

    fn workload(keys: KeySharing, op: Operation) -> Workload {
        Workload::generate(&WorkloadSpec {
            op,
            write_ratio: 0.5,
            txns: 40,
            prefill: 20,
            threads: 2,
            keys,
            dist: KeyDist::Zipf,
            zipf_s: 1.0,
            prefill_order: PrefillOrder::Sequential,
            ..WorkloadSpec::default()
        })
        .unwrap()
    }

    /// Serial execution of the streams, thread 0 then thread 1.
    fn serial(w: &Workload) -> (Rows, Vec<Vec<u32>>) {
        let mut m: BTreeMap<(u32, i64), Vec<u8>> = w
            .prefill
            .iter()
            .map(|o| ((o.table, o.key), o.payload.clone()))
            .collect();
        let mut missed = Vec::new();
        for txns in &w.threads {
            let mut t = Vec::new();
            for txn in txns {
                let mut mask = 0;
                for (j, o) in txn.ops.iter().enumerate() {
                    let k = (o.table, o.key);
                    let hit = match o.action {
                        Action::Insert => m.insert(k, o.payload.clone()).is_none(),
                        Action::Update if m.contains_key(&k) => {
                            m.insert(k, o.payload.clone());
                            true
                        }
                        Action::Update => false,
                        Action::Delete => m.remove(&k).is_some(),
                        Action::Select | Action::Scan => m.contains_key(&k),
                    };
                    if !hit {
                        mask |= 1 << j;
                    }
                }
                t.push(mask);
            }
            missed.push(t);
        }
        (Rows(m), missed)
    }

    #[test]
    fn a_serial_run_passes_and_damage_is_found() {
        for (keys, op) in [
            (KeySharing::Disjoint, Operation::Mix),
            (KeySharing::Shared, Operation::SelectUpdate),
            (KeySharing::Shared, Operation::Mix),
        ] {
            let w = workload(keys, op);
            let (rows, missed) = serial(&w);
            let v = check(&rows, "t", &w, &missed).unwrap();
            assert_eq!(v.rows, vec![rows.0.len() as u64], "{keys:?} {op}");
            // A changed value, a lost row, an extra row: each is found.
            let (&k, _) = rows.0.iter().next().unwrap();
            let mut bad = Rows(rows.0.clone());
            bad.0.get_mut(&k).unwrap()[0] ^= 1;
            assert!(
                check(&bad, "t", &w, &missed).is_err(),
                "{keys:?} {op}: value"
            );
            let mut bad = Rows(rows.0.clone());
            bad.0.remove(&k);
            assert!(
                check(&bad, "t", &w, &missed).is_err(),
                "{keys:?} {op}: lost"
            );
            let mut bad = Rows(rows.0.clone());
            bad.0.insert((0, 1 << 50), b"x".to_vec());
            assert!(
                check(&bad, "t", &w, &missed).is_err(),
                "{keys:?} {op}: extra"
            );
        }
    }

    #[test]
    fn shared_keys_accept_any_threads_last_write() {
        // Thread 1 then thread 0 is as valid as 0 then 1.
        let w = workload(KeySharing::Shared, Operation::SelectUpdate);
        let mut flipped = w.clone();
        flipped.threads.reverse();
        let (rows, mut missed) = serial(&flipped);
        missed.reverse();
        check(&rows, "t", &w, &missed).unwrap();
    }

    #[test]
    fn a_miss_is_fatal_unless_rows_may_be_missing() {
        let w = workload(KeySharing::Disjoint, Operation::Mix);
        let (rows, mut missed) = serial(&w);
        missed[0][0] = 1;
        assert!(check(&rows, "t", &w, &missed).is_err());
    }
}
