//! The crash explorer through SQL: a SQL workload (transactions of
//! inserts, an update and a delete over an indexed table, each ended by
//! COMMIT) runs on the simulated crash file system; then power is cut at
//! sampled points of its I/O (every unsynced write surviving or not, torn
//! at sector granularity under `torn`), the database is reopened through
//! SQL on each crash state, and it must hold exactly the rows of some
//! committed prefix of the transactions: no transaction partial, and, in
//! modes durable at synchronous=full, every acknowledged COMMIT present;
//! `PRAGMA integrity_check` (twinpage's check) must pass. Every mode, both
//! persistence models. `TWINPAGE_SQL_CRASH_STATES` raises the number of
//! states per mode and model (CI: 150).

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use twinpage::{Durability, JournalMode, Synchronous};
use twinpage_sim::sim::{PersistenceModel, SimVfs};
use twinpage_sql::{set_file_system, Connection, Value};

const TXNS: i64 = 12;
const PATH: &str = "/crash/app.db";

/// The statements of transaction `i` (1-based).
fn txn(i: i64) -> String {
    format!(
        "BEGIN; \
         INSERT INTO items(id, tag, body) VALUES ({a}, 'tag{m}', printf('%.*c', 300, 'x')), \
           ({b}, 'tag{m}', 'b{i}'), ({c}, 'tag{n}', 'c{i}'); \
         UPDATE state SET n = {i}, total = total + 3 WHERE id = 1; \
         DELETE FROM items WHERE id = {d}; \
         COMMIT;",
        a = 3 * i,
        b = 3 * i + 1,
        c = 3 * i + 2,
        d = 3 * (i - 1) + 1,
        m = i % 5,
        n = i % 7,
    )
}

/// The ids the table holds after transactions 1..=k.
fn expected_ids(k: i64) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 1..=k {
        ids.extend([3 * i, 3 * i + 1, 3 * i + 2]);
        ids.retain(|&x| x != 3 * (i - 1) + 1);
    }
    ids.sort_unstable();
    ids
}

/// Reopen the crash state and check it (see the module documentation).
fn verify(uri: &str, durable: bool, last_acked: i64) -> Result<(), String> {
    let c = Connection::open(uri).map_err(|e| format!("reopen: {e}"))?;
    let one = |sql: &str| -> Result<Vec<i64>, String> {
        c.query(sql, &[])
            .map_err(|e| format!("{sql}: {e}"))?
            .into_iter()
            .map(|r| match r[0] {
                Value::Integer(i) => Ok(i),
                ref v => Err(format!("{sql}: {v:?}")),
            })
            .collect()
    };
    // A mode that is atomic but not durable may lose the setup's own
    // commits too: no tables, or no state row yet, is the empty state.
    let tables = one("SELECT count(*) FROM sqlite_schema WHERE name IN ('items', 'state')")?[0];
    let (n, total, ids, by_tag) = if tables < 2 {
        if durable {
            return Err("the acknowledged setup is lost".into());
        }
        (0, 0, Vec::new(), Vec::new())
    } else {
        let n = one("SELECT n FROM state")?;
        let total = one("SELECT total FROM state")?;
        (
            n.first().copied().unwrap_or(0),
            total.first().copied().unwrap_or(0),
            one("SELECT id FROM items ORDER BY id")?,
            one("SELECT id FROM items INDEXED BY items_tag ORDER BY id")?,
        )
    };
    if total != 3 * n {
        return Err(format!("state n={n}: partial transaction (total {total})"));
    }
    if ids != expected_ids(n) {
        return Err(format!("state n={n}: rows of no committed state: {ids:?}"));
    }
    if by_tag != ids {
        return Err(format!("state n={n}: index differs from table"));
    }
    if durable && n < last_acked {
        return Err(format!(
            "acknowledged COMMIT {last_acked} lost (state n={n})"
        ));
    }
    let check = c
        .query("PRAGMA integrity_check", &[])
        .map_err(|e| e.to_string())?;
    if check != vec![vec![Value::Text("ok".into())]] {
        return Err(format!("integrity_check: {check:?}"));
    }
    Ok(())
}

fn explore(mode: JournalMode, states: usize, rng: &mut impl Rng) -> (usize, usize) {
    let sim = Arc::new(SimVfs::new());
    set_file_system(Some(sim.clone()));
    let uri = format!("file:{PATH}?journal_mode={mode}&synchronous=full");
    let c = Connection::open(&uri).unwrap();
    c.execute_batch(
        "BEGIN; \
         CREATE TABLE items(id INTEGER PRIMARY KEY, tag TEXT, body TEXT); \
         CREATE INDEX items_tag ON items(tag, body); \
         CREATE TABLE state(id INTEGER PRIMARY KEY, n INT, total INT); \
         INSERT INTO state VALUES (1, 0, 0); \
         COMMIT;",
    )
    .unwrap();
    let setup = sim.op_count();
    // The operation count when each COMMIT returned.
    let mut acked = Vec::new();
    for i in 1..=TXNS {
        c.execute_batch(&txn(i)).unwrap();
        acked.push((sim.op_count(), i));
    }
    let log = sim.log();
    drop(c);
    set_file_system(None);
    let guarantee = mode.spec().durability(Synchronous::Full);
    let durable = guarantee == Durability::Durable;
    let mut checked = 0;
    let mut unprotected = 0;
    for model in [PersistenceModel::Ext4Ordered, PersistenceModel::Torn] {
        for s in 0..states {
            let cut = rng.random_range(setup..=log.len());
            if !log.cut_matters(cut) {
                continue;
            }
            let spec = log.sample(cut, model, s as u64, rng);
            let img = log.image(&spec);
            set_file_system(Some(Arc::new(img.to_mem_vfs())));
            let what = format!("{mode} {} cut {cut}", model.name());
            let last_acked = acked
                .iter()
                .filter(|(op, _)| *op <= cut)
                .map(|(_, i)| *i)
                .max()
                .unwrap_or(0);
            let verdict = verify(&uri, durable, last_acked);
            set_file_system(None);
            if let Err(e) = verdict {
                if guarantee == Durability::None {
                    // Not crash-safe by design (mode off): counted only.
                    unprotected += 1;
                    continue;
                }
                panic!("{what}: {e}");
            }
            checked += 1;
        }
    }
    (checked, unprotected)
}

#[test]
fn every_acknowledged_commit_survives_and_none_is_partial() {
    let states: usize = std::env::var("TWINPAGE_SQL_CRASH_STATES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    for &mode in JournalMode::ALL {
        let (n, unprotected) = explore(mode, states, &mut rng);
        println!(
            "{mode}: {n} crash states verified, {unprotected} violations where the mode \
             promises nothing (off)"
        );
        assert!(n > 0, "{mode}: no crash state explored");
    }
}
