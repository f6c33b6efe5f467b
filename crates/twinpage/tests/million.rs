//! One million keys: insert in random order, read every key back, check.

use twinpage::keys::encode_u64;
use twinpage::{Db, Direction, JournalMode, Options, Synchronous};

#[test]
fn one_million_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("million.db");
    let opts = Options::default()
        .journal_mode(JournalMode::Persist)
        .synchronous(Synchronous::Normal)
        .cache_size(16 << 20);
    let db = Db::open(&path, opts.clone()).unwrap();
    db.create_table("t").unwrap();
    const N: u64 = 1_000_000;
    // A fixed permutation: multiplication by an odd constant mod 2^20 is a
    // bijection on [0, 2^20); keep the values below N.
    let order: Vec<u64> = (0..1u64 << 20)
        .map(|i| (i * 0x9E3779B1) & ((1 << 20) - 1))
        .filter(|&k| k < N)
        .collect();
    assert_eq!(order.len() as u64, N);
    for chunk in order.chunks(100_000) {
        let mut t = db.begin_write().unwrap();
        for &k in chunk {
            t.put("t", &encode_u64(k), &(k * 3).to_le_bytes()).unwrap();
        }
        t.commit().unwrap();
    }
    db.close().unwrap();
    let db = Db::open(&path, opts).unwrap();
    let report = db.check().unwrap();
    assert_eq!(report.keys, N);
    assert!(report.max_depth >= 3);
    let r = db.begin_read().unwrap();
    for k in 0..N {
        assert_eq!(
            r.get("t", &encode_u64(k)).unwrap().unwrap(),
            (k * 3).to_le_bytes()
        );
    }
    let mut expect = 0u64;
    for kv in r.range("t", .., Direction::Forward).unwrap() {
        let (k, _) = kv.unwrap();
        assert_eq!(k, encode_u64(expect));
        expect += 1;
    }
    assert_eq!(expect, N);
    println!("{report}");
}
