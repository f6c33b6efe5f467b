//! Tables by id with a caller's key order, stable cursors, row counts,
//! savepoints and a database shared by two opens in one process: each
//! against a model, every writing test ending with the integrity check.

use rand::{Rng, SeedableRng};
use std::cmp::Ordering;
use std::sync::Arc;
use twinpage::{Db, Error, JournalMode, KeyOrder, KeyOrders, Options, Result, TableId};

/// Keys compare by length first, then bytes, optionally reversed: orders
/// under which byte prefixes are no separators.
struct LenFirst {
    reverse: bool,
}

impl KeyOrder for LenFirst {
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        let o = a.len().cmp(&b.len()).then_with(|| a.cmp(b));
        if self.reverse {
            o.reverse()
        } else {
            o
        }
    }
}

struct Orders;

impl KeyOrders for Orders {
    fn resolve(&self, spec: &[u8]) -> Result<Arc<dyn KeyOrder>> {
        match spec {
            b"len" => Ok(Arc::new(LenFirst { reverse: false })),
            b"len-rev" => Ok(Arc::new(LenFirst { reverse: true })),
            _ => Err(Error::InvalidArgument(format!("unknown order {spec:?}"))),
        }
    }
}

fn opts(mode: JournalMode) -> Options {
    Options::default()
        .journal_mode(mode)
        .page_size(512)
        .key_orders(Arc::new(Orders))
}

fn key(rng: &mut impl Rng) -> Vec<u8> {
    // One key in ten is longer than a cell holds at 512-byte pages: under
    // these orders the separators are whole keys, so they overflow too.
    let n = if rng.random_bool(0.1) {
        rng.random_range(100..1500)
    } else {
        rng.random_range(1..40)
    };
    (0..n).map(|_| rng.random_range(b'a'..=b'f')).collect()
}

/// The model: entries sorted by the order.
fn sorted(
    model: &std::collections::HashMap<Vec<u8>, Vec<u8>>,
    o: &dyn KeyOrder,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| o.compare(&a.0, &b.0));
    v
}

#[test]
fn custom_order_tables_match_the_model_in_every_mode() {
    for mode in JournalMode::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let db = Db::open(&path, opts(*mode)).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut t = db.begin_write().unwrap();
        let tab = t.create_table_id(b"len-rev").unwrap();
        let plain = t.create_table_id(b"").unwrap();
        let id = tab.id();
        t.commit().unwrap();
        let mut model = std::collections::HashMap::new();
        for round in 0..6 {
            let mut t = db.begin_write().unwrap();
            let tab = t.open_table(id).unwrap();
            for _ in 0..250 {
                let k = key(&mut rng);
                if rng.random_bool(0.3) {
                    let had = t.delete_in(&tab, &k).unwrap();
                    assert_eq!(had, model.remove(&k).is_some());
                } else {
                    let v = vec![round as u8; rng.random_range(0..120)];
                    let had = t.put_in(&tab, &k, &v).unwrap();
                    assert_eq!(had, model.insert(k.clone(), v).is_some());
                }
                t.put_in(&plain, &k, b"x").unwrap();
            }
            t.commit().unwrap();
        }
        let want = sorted(&model, &LenFirst { reverse: true });
        let r = db.begin_read().unwrap();
        let tab = r.open_table(id).unwrap();
        assert_eq!(r.count(&tab).unwrap(), want.len() as u64);
        let mut c = tab.cursor();
        let mut got = Vec::new();
        let mut ok = c.first(r.view()).unwrap();
        while ok {
            got.push((
                c.key().unwrap().to_vec(),
                c.value(r.view()).unwrap().unwrap(),
            ));
            ok = c.next(r.view()).unwrap();
        }
        assert_eq!(got, want, "{mode}: forward scan");
        let mut back = Vec::new();
        let mut ok = c.last(r.view()).unwrap();
        while ok {
            back.push(c.key().unwrap().to_vec());
            ok = c.prev(r.view()).unwrap();
        }
        back.reverse();
        assert_eq!(back, want.iter().map(|e| e.0.clone()).collect::<Vec<_>>());
        for (k, v) in &want {
            assert_eq!(r.get_in(&tab, k).unwrap().as_ref(), Some(v));
            assert_eq!(c.seek(r.view(), k).unwrap(), Some(Ordering::Equal));
        }
        assert_eq!(r.table_ids().unwrap().len(), 2);
        drop(r);
        let report = db.check().unwrap();
        assert_eq!(report.tables, 2, "{mode}");
        db.close().unwrap();
        // Reopened: the order comes back from the spec in the catalog.
        let db = Db::open(&path, opts(*mode)).unwrap();
        db.check().unwrap();
        let r = db.begin_read().unwrap();
        assert_eq!(
            r.count(&r.open_table(id).unwrap()).unwrap(),
            want.len() as u64
        );
        drop(r);
        db.close().unwrap();
        // Without the orders the check says why it cannot check the table.
        let db = Db::open(&path, Options::default().journal_mode(*mode).page_size(512)).unwrap();
        let err = db.check().unwrap_err().to_string();
        assert!(err.contains("own key order"), "{err}");
        db.close().unwrap();
    }
}

#[test]
fn seek_lands_on_the_first_entry_not_below_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("s.db"), opts(JournalMode::Wal)).unwrap();
    let mut t = db.begin_write().unwrap();
    let tab = t.create_table_id(b"len").unwrap();
    let mut c = tab.cursor();
    assert_eq!(c.seek(t.view().unwrap(), b"a").unwrap(), None, "empty");
    for i in 0..500u32 {
        t.put_in(&tab, format!("{}", i * 2).as_bytes(), b"v")
            .unwrap();
    }
    let o = LenFirst { reverse: false };
    let all: Vec<Vec<u8>> = {
        let mut v: Vec<Vec<u8>> = (0..500u32)
            .map(|i| format!("{}", i * 2).into_bytes())
            .collect();
        v.sort_by(|a, b| o.compare(a, b));
        v
    };
    for probe in ["0", "1", "5", "999", "998", "1000", "9999", ""] {
        let p = probe.as_bytes();
        let r = c.seek(t.view().unwrap(), p).unwrap().unwrap();
        match all.iter().find(|k| o.compare(k, p).is_ge()) {
            Some(k) => {
                assert_eq!(c.key().unwrap(), &k[..], "probe {probe}");
                assert_eq!(r, o.compare(k, p));
            }
            None => {
                assert_eq!(c.key().unwrap(), &all.last().unwrap()[..]);
                assert_eq!(r, Ordering::Less);
            }
        }
    }
    t.commit().unwrap();
    db.check().unwrap();
}

#[test]
fn cursor_survives_changes_by_its_own_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("c.db"), opts(JournalMode::Persist)).unwrap();
    let mut t = db.begin_write().unwrap();
    let tab = t.create_table_id(b"").unwrap();
    for i in 0..2000u32 {
        t.put_in(&tab, &i.to_be_bytes(), &[1; 40]).unwrap();
    }
    // Delete the row under the cursor and insert others while scanning:
    // every original row is visited once.
    let mut c = tab.cursor();
    let mut seen = Vec::new();
    let mut ok = c.first(t.view().unwrap()).unwrap();
    while ok {
        let k = c.key().unwrap().to_vec();
        let i = u32::from_be_bytes(k[..4].try_into().unwrap());
        seen.push(i);
        if i < 2000 && i % 2 == 0 {
            t.delete_in(&tab, &k).unwrap();
        }
        if i < 2000 && i % 100 == 0 {
            // Keys after the end of the original range, seen later.
            t.put_in(&tab, &(1_000_000 + i).to_be_bytes(), b"new")
                .unwrap();
        }
        ok = c.next(t.view().unwrap()).unwrap();
    }
    let mut expect: Vec<u32> = (0..2000).collect();
    expect.extend((0..2000).step_by(100).map(|i| 1_000_000 + i));
    assert_eq!(seen, expect);
    assert_eq!(t.count(&tab).unwrap(), 1000 + 20);
    // A deleted entry reads as gone until the cursor moves.
    c.seek(t.view().unwrap(), &1u32.to_be_bytes()).unwrap();
    t.delete_in(&tab, &1u32.to_be_bytes()).unwrap();
    assert_eq!(c.value(t.view().unwrap()).unwrap(), None);
    assert!(c.next(t.view().unwrap()).unwrap());
    assert_eq!(c.key().unwrap(), &3u32.to_be_bytes());
    t.commit().unwrap();
    db.check().unwrap();
}

#[test]
fn nested_savepoints_roll_back_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("p.db"), opts(JournalMode::DhlCc)).unwrap();
    let mut t = db.begin_write().unwrap();
    let tab = t.create_table_id(b"").unwrap();
    let id = tab.id();
    for i in 0..300u32 {
        t.put_in(&tab, &i.to_be_bytes(), &[0; 30]).unwrap();
    }
    let a = t.savepoint().unwrap();
    for i in 300..600u32 {
        t.put_in(&tab, &i.to_be_bytes(), &[1; 30]).unwrap();
    }
    let b = t.savepoint().unwrap();
    for i in 0..100u32 {
        t.delete_in(&tab, &i.to_be_bytes()).unwrap();
    }
    let t2 = t.create_table_id(b"").unwrap();
    t.put_in(&t2, b"k", b"v").unwrap();
    assert_eq!(t.count(&tab).unwrap(), 500);
    t.rollback_to(b).unwrap();
    assert_eq!(t.count(&tab).unwrap(), 600);
    assert_eq!(t.table_ids().unwrap(), vec![id]);
    assert_eq!(t.savepoints(), 2);
    t.release(b).unwrap();
    assert_eq!(t.savepoints(), 1);
    t.rollback_to(a).unwrap();
    assert_eq!(t.count(&tab).unwrap(), 300);
    for i in 1000..1010u32 {
        t.put_in(&tab, &i.to_be_bytes(), b"after").unwrap();
    }
    t.release(a).unwrap();
    assert!(t.rollback_to(a).is_err(), "released");
    t.commit().unwrap();
    let r = db.begin_read().unwrap();
    let tab = r.open_table(id).unwrap();
    assert_eq!(r.count(&tab).unwrap(), 310);
    assert_eq!(
        r.get_in(&tab, &299u32.to_be_bytes()).unwrap(),
        Some(vec![0; 30])
    );
    assert_eq!(r.get_in(&tab, &300u32.to_be_bytes()).unwrap(), None);
    drop(r);
    db.check().unwrap();
    // Clear keeps the table, empty.
    let mut t = db.begin_write().unwrap();
    let tab = t.open_table(id).unwrap();
    assert_eq!(t.clear_table(&tab).unwrap(), 310);
    assert_eq!(t.count(&tab).unwrap(), 0);
    assert!(t.drop_table_id(id).unwrap());
    assert!(!t.drop_table_id(id).unwrap());
    t.commit().unwrap();
    let report = db.check().unwrap();
    assert_eq!(report.tables, 0);
}

#[test]
fn a_second_open_in_the_process_shares_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = Db::open(&path, Options::default()).unwrap();
    // Another spelling of the same path.
    let b = Db::open(dir.path().join(".").join("shared.db"), Options::default()).unwrap();
    a.create_table("t").unwrap();
    a.put("t", b"k", b"from a").unwrap();
    assert_eq!(b.get("t", b"k").unwrap(), Some(b"from a".to_vec()));
    // One writer at a time across the handles, as across threads.
    let w = b.begin_write().unwrap();
    let busy = Db::open(
        &path,
        Options::default().busy_timeout(std::time::Duration::from_millis(50)),
    )
    .unwrap();
    assert!(matches!(busy.begin_write(), Err(Error::Busy(_))));
    drop(w);
    drop(busy);
    // A different mode is refused while it is open.
    let e = Db::open(&path, Options::default().journal_mode(JournalMode::Wal))
        .err()
        .unwrap();
    assert!(e.to_string().contains("already open"), "{e}");
    a.close().unwrap();
    b.put("t", b"k2", b"after a closed").unwrap();
    b.check().unwrap();
    b.close().unwrap();
    let c = Db::open(&path, Options::default()).unwrap();
    assert_eq!(
        c.scan("t", .., twinpage::Direction::Forward).unwrap().len(),
        2
    );
    assert!(!c.stats().opened_after_crash);
    c.close().unwrap();
    let _ = TableId(0);
}

/// The roots of named tables are kept per open database (R1-R3 in
/// `db/roots.rs`): a table dropped and created again, a drop rolled back,
/// and a reader older than the drop each find the right tree.
#[test]
fn named_tables_are_found_after_drop_and_recreate() {
    for mode in [JournalMode::Wal, JournalMode::DhlCc, JournalMode::Off] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(
            dir.path().join("t.db"),
            Options::default().journal_mode(mode),
        )
        .unwrap();
        db.create_table("t").unwrap();
        db.create_table("filler").unwrap();
        for i in 0..50u32 {
            db.put("t", &i.to_be_bytes(), b"first").unwrap();
        }
        assert_eq!(
            db.get("t", &7u32.to_be_bytes()).unwrap(),
            Some(b"first".to_vec())
        );
        // A reader of the first table (WAL keeps its snapshot).
        let old = (mode == JournalMode::Wal).then(|| db.begin_read().unwrap());
        // A drop rolled back leaves the table and its root.
        let mut w = db.begin_write().unwrap();
        assert!(w.drop_table("t").unwrap());
        w.rollback().unwrap();
        assert_eq!(
            db.get("t", &7u32.to_be_bytes()).unwrap(),
            Some(b"first".to_vec())
        );
        // Dropped, its pages taken by another table, created again.
        let mut w = db.begin_write().unwrap();
        assert!(w.drop_table("t").unwrap());
        for i in 0..200u32 {
            w.put("filler", &i.to_be_bytes(), &[9; 200]).unwrap();
        }
        w.commit().unwrap();
        assert!(matches!(db.get("t", b"x"), Err(Error::NoSuchTable(_))));
        assert!(matches!(
            db.put("t", b"x", b"y"),
            Err(Error::NoSuchTable(_))
        ));
        db.create_table("t").unwrap();
        assert_eq!(db.get("t", &7u32.to_be_bytes()).unwrap(), None);
        db.put("t", &7u32.to_be_bytes(), b"second").unwrap();
        assert_eq!(
            db.get("t", &7u32.to_be_bytes()).unwrap(),
            Some(b"second".to_vec())
        );
        let w = db.begin_write().unwrap();
        assert_eq!(
            w.get("t", &7u32.to_be_bytes()).unwrap(),
            Some(b"second".to_vec())
        );
        w.rollback().unwrap();
        if let Some(r) = old {
            assert_eq!(
                r.get("t", &7u32.to_be_bytes()).unwrap(),
                Some(b"first".to_vec())
            );
        }
        assert_eq!(
            db.scan("filler", .., twinpage::Direction::Forward)
                .unwrap()
                .len(),
            200
        );
        db.check().unwrap();
    }
}
