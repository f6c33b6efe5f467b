//! The multi-version B-tree modes (`mvbt`, `ls-mvbt`, \[LSM\]): random
//! commits, rollbacks and reopens against a model while readers hold old
//! snapshots open and read them from the pages; the dirty nodes an insert
//! writes, the nodes a split writes (3 with lazy split, 4 with the
//! original MVBT split), page 1 not written per commit with metadata
//! embedding, and the lazy node's two parent entries (Alg. 1).

mod common;

use common::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use twinpage::node::mvbt::{inspect, INV};
use twinpage::storage::{IoEvent, MemVfs, OpenFlags, Vfs};
use twinpage::{Db, Direction, JournalMode, Options, ReadTxn};

const MODES: [JournalMode; 2] = [JournalMode::Mvbt, JournalMode::LsMvbt];

fn rng(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

/// Everything a reader sees in table `t`.
fn read_all(r: &ReadTxn) -> Rows {
    try_read_all(r).unwrap()
}

fn try_read_all(r: &ReadTxn) -> twinpage::Result<Rows> {
    r.range("t", .., Direction::Forward)?.collect()
}

/// A reader reads its snapshot whole, or learns that it is too old.
fn check_reader(r: &ReadTxn, m: &Rows) {
    match try_read_all(r) {
        Ok(rows) => assert_eq!(&rows, m, "a reader's snapshot changed"),
        Err(e) => assert!(e.is_retryable(), "{e}"),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, usize),
    Delete(u16),
    Commit,
    Rollback,
    /// Open a reader on the committed state.
    Snapshot,
    /// Check every open reader against its snapshot, and close one.
    Close(usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => (0u16..600, prop_oneof![8 => 0usize..100, 1 => 0usize..3000])
            .prop_map(|(k, l)| Op::Put(k, l)),
        15 => (0u16..600).prop_map(Op::Delete),
        6 => Just(Op::Commit),
        1 => Just(Op::Rollback),
        3 => Just(Op::Snapshot),
        2 => (0usize..8).prop_map(Op::Close),
        1 => Just(Op::Reopen),
    ]
}

fn key(k: u16) -> Vec<u8> {
    // Every 13th key is longer than a cell holds (its tail overflows into
    // a chain of its own, which a reader of an old snapshot still reads
    // after the key is deleted), with long shared prefixes so that
    // separators overflow too.
    if k.is_multiple_of(13) {
        let pad = 200 + (k as usize * 37) % 3000;
        return format!("key/{}{k:05}", "x".repeat(pad)).into_bytes();
    }
    format!("key{:0w$}", k, w = (k % 5) as usize + 1).into_bytes()
}

/// Readers at old snapshots read their versions from the pages while the
/// writer commits (they never block it: a commit with readers open would
/// otherwise time out), spills (a small cache), rolls back and lazily
/// collects garbage.
fn run(mode: JournalMode, ps: usize, ops: &[Op]) {
    let vfs = MemVfs::new();
    let path = Path::new("/snap.db");
    let opts = || mem_opts(&vfs, mode, ps).cache_size(12 * ps);
    let mut db = open(path, opts());
    db.create_table("t").unwrap();
    let mut committed: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut work = committed.clone();
    let mut readers: Vec<(ReadTxn, Rows)> = Vec::new();
    let mut txn = Some(db.begin_write().unwrap());
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Put(k, l) => {
                let v = vec![(i % 251) as u8; *l];
                txn.as_mut().unwrap().put("t", &key(*k), &v).unwrap();
                work.insert(key(*k), v);
            }
            Op::Delete(k) => {
                let had = txn.as_mut().unwrap().delete("t", &key(*k)).unwrap();
                assert_eq!(had, work.remove(&key(*k)).is_some());
            }
            Op::Commit => {
                txn.take().unwrap().commit().unwrap();
                committed = work.clone();
                txn = Some(db.begin_write().unwrap());
            }
            Op::Rollback => {
                txn.take().unwrap().rollback().unwrap();
                work = committed.clone();
                txn = Some(db.begin_write().unwrap());
            }
            Op::Snapshot => {
                let r = db.begin_read().unwrap();
                assert_eq!(read_all(&r), committed);
                readers.push((r, committed.clone()));
            }
            Op::Close(j) => {
                // A reader either reads its snapshot, whole, or is told it
                // is too old (the root's last resort collected it).
                readers.retain(|(r, m)| match try_read_all(r) {
                    Ok(rows) => {
                        assert_eq!(&rows, m, "{mode}: a reader's snapshot changed");
                        true
                    }
                    Err(e) => {
                        assert!(e.is_retryable(), "{mode}: {e}");
                        false
                    }
                });
                if !readers.is_empty() {
                    readers.remove(j % readers.len());
                }
            }
            Op::Reopen => {
                txn.take().unwrap().commit().unwrap();
                committed = work.clone();
                for (r, m) in readers.drain(..) {
                    check_reader(&r, &m);
                }
                db.close().unwrap();
                db = open(path, opts());
                txn = Some(db.begin_write().unwrap());
            }
        }
    }
    txn.take().unwrap().commit().unwrap();
    committed = work;
    for (r, m) in readers.drain(..) {
        check_reader(&r, &m);
    }
    let mut want = Model::new();
    want.insert("t".into(), committed.clone());
    assert_matches(&db, &want);
    db.close().unwrap();
    let db = open(path, opts());
    assert_matches(&db, &want);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn snapshot_readers_match_the_model(
        ops in proptest::collection::vec(op(), 1..1500),
        ps in prop_oneof![Just(512usize), Just(1024), Just(4096)],
        lazy in any::<bool>(),
    ) {
        run(MODES[lazy as usize], ps, &ops);
    }
}

/// Many small transactions with rollbacks and reopens, checked after each.
#[test]
fn random_commits_match_the_model() {
    for mode in MODES {
        for ps in [512usize, 1024, 4096] {
            let vfs = MemVfs::new();
            let path = Path::new("/r.db");
            let mut db = open(path, mem_opts(&vfs, mode, ps));
            db.create_table("t").unwrap();
            let mut model = BTreeMap::new();
            let mut next = rng(0x1234_5678 ^ ps as u64);
            for round in 0..300 {
                let mut t = db.begin_write().unwrap();
                let mut work = model.clone();
                for _ in 0..(next() % 12 + 1) {
                    let r = next();
                    let k = format!("key{:04}", r % 700).into_bytes();
                    if r.is_multiple_of(3) {
                        t.delete("t", &k).unwrap();
                        work.remove(&k);
                    } else {
                        let len = if r.is_multiple_of(17) {
                            3000
                        } else {
                            (r >> 20) as usize % 90
                        };
                        let v = vec![(r >> 8) as u8; len];
                        t.put("t", &k, &v).unwrap();
                        work.insert(k, v);
                    }
                }
                if next().is_multiple_of(9) {
                    t.rollback().unwrap();
                } else {
                    t.commit().unwrap();
                    model = work;
                }
                let mut want = Model::new();
                want.insert("t".into(), model.clone());
                if let Err(e) = db.check() {
                    panic!("{mode} ps {ps} round {round}: {e}");
                }
                assert_eq!(dump(&db), want, "{mode} ps {ps} round {round}");
                if next().is_multiple_of(40) {
                    db.close().unwrap();
                    db = open(path, mem_opts(&vfs, mode, ps));
                }
            }
            db.close().unwrap();
        }
    }
}

/// Pages one auto-commit transaction wrote: (tree and other pages
/// besides page 1, page 1 written).
fn commit_pages(db: &Db, ps: u64, f: impl FnOnce()) -> (usize, bool) {
    db.counters().start_trace();
    f();
    let mut pages = std::collections::BTreeSet::new();
    for ev in db.counters().take_trace() {
        if let IoEvent::Write(p, off, len) = ev {
            if p.to_string_lossy().ends_with(".db") && len as u64 == ps {
                pages.insert(off / ps + 1);
            }
        }
    }
    let p1 = pages.remove(&1);
    (pages.len(), p1)
}

/// \[LSM\] §6.2's workload (a table of 2,000 records, then random inserts
/// and deletes, one per transaction) on 4 KiB pages: what each insert
/// writes. Returns (mean pages per insert, commits that wrote page 1,
/// histogram of pages per insert).
fn insert_delete_workload(
    mode: JournalMode,
    opts: &[(&str, &str)],
) -> (f64, usize, BTreeMap<usize, usize>) {
    let vfs = MemVfs::new();
    let mut o = mem_opts(&vfs, mode, 4096);
    for (k, v) in opts {
        o.set(k, v).unwrap();
    }
    let db = open(Path::new("/w.db"), o);
    db.create_table("t").unwrap();
    let mut next = rng(99);
    let mut keys: Vec<u64> = Vec::new();
    let mut t = db.begin_write().unwrap();
    for _ in 0..2000 {
        let k = next() % 1_000_000;
        t.put("t", &k.to_be_bytes(), &[7; 100]).unwrap();
        keys.push(k);
    }
    t.commit().unwrap();
    let (mut total, mut header) = (0, 0);
    let mut hist = BTreeMap::new();
    for _ in 0..1000 {
        let k = next() % 1_000_000;
        let (pages, p1) = commit_pages(&db, 4096, || {
            db.put("t", &k.to_be_bytes(), &[8; 100]).unwrap();
        });
        keys.push(k);
        total += pages;
        header += p1 as usize;
        *hist.entry(pages).or_insert(0) += 1;
        let victim = keys.swap_remove((next() % keys.len() as u64) as usize);
        db.delete("t", &victim.to_be_bytes()).unwrap();
    }
    db.check().unwrap();
    db.close().unwrap();
    (total as f64 / 1000.0, header, hist)
}

#[test]
fn ls_mvbt_writes_about_one_node_per_insert_and_three_per_split() {
    let (mean, header, hist) = insert_delete_workload(JournalMode::LsMvbt, &[]);
    eprintln!("ls-mvbt: {mean:.3} pages per insert, page 1 {header} times, {hist:?}");
    assert!(mean < 1.25, "{mean} pages per insert");
    assert_eq!(
        header, 0,
        "metadata embedding: page 1 is not written per commit"
    );
    // One node, or a lazy split (lazy node, new sibling, parent), or a
    // relocation of a node whose live cells fill at most half a page (the
    // node's new page and the parent); now and then the parent splits too.
    let cascades: usize = hist.iter().filter(|(n, _)| **n > 3).map(|(_, c)| c).sum();
    assert!(cascades <= 2, "{hist:?}");
    assert!(hist.get(&3).copied().unwrap_or(0) > 0, "no split: {hist:?}");
}

#[test]
fn mvbt_splits_write_four_nodes() {
    // Sibling redistribution off, so that every overflow splits.
    let (mean, header, hist) = insert_delete_workload(JournalMode::Mvbt, &[("spread", "0")]);
    eprintln!("mvbt: {mean:.3} pages per insert, page 1 {header} times, {hist:?}");
    // Page 1 is the commit mark of every commit (no embedding).
    assert_eq!(header, 1000);
    // A split retires the node and copies both halves: with the parent,
    // four nodes; a version split alone (live cells fit half a page):
    // three.
    let cascades: usize = hist.iter().filter(|(n, _)| **n > 4).map(|(_, c)| c).sum();
    assert!(cascades <= 2, "{hist:?}");
    assert!(hist.get(&4).copied().unwrap_or(0) > 0, "no split: {hist:?}");
    let (_, header, _) = insert_delete_workload(JournalMode::Mvbt, &[("embed", "1")]);
    assert_eq!(header, 0, "mvbt with embedding");
}

/// A table loaded by appends, in one transaction, takes updates without
/// restructuring, in both formats and with `mvbt`'s sibling
/// redistribution on: an append that overflows the rightmost leaf splits
/// without sharing its cells with the left sibling (nor does SQLite's
/// `balance_quick`), so every leaf keeps the format's slack, and an MVBT
/// leaf keeps two cells of it (the cell an update ends is dropped from
/// the next version, but its bytes stay the base's until that commits).
/// Before, `mvbt`'s load filled every leaf by redistribution and the
/// first update of each split it, retiring it (4.5 pages per update over
/// the first 300 of the CPU benchmark).
#[test]
fn updates_after_a_sequential_load_write_one_leaf() {
    for mode in [JournalMode::Mvbt, JournalMode::LsMvbt] {
        let vfs = MemVfs::new();
        let db = open(Path::new("/u.db"), mem_opts(&vfs, mode, 4096));
        db.create_table("t").unwrap();
        let mut t = db.begin_write().unwrap();
        for k in 0..2000u64 {
            t.put("t", &k.to_be_bytes(), &[7; 100]).unwrap();
        }
        t.commit().unwrap();
        let mut next = rng(7);
        let mut model: BTreeMap<u64, u8> = (0..2000).map(|k| (k, 7)).collect();
        for i in 0..600u64 {
            // Each picked leaf's cells updated several times in a row;
            // not in the last leaf, which the load may have left full.
            let k = next() % 1900;
            for (j, key) in [k, k, k ^ 1, k].into_iter().enumerate() {
                let v = (i as usize * 4 + j) as u8;
                let (pages, _) = commit_pages(&db, 4096, || {
                    db.put("t", &key.to_be_bytes(), &[v; 100]).unwrap();
                });
                assert_eq!(
                    pages, 1,
                    "{mode:?}: update {i}.{j} of key {key} wrote {pages} tree pages"
                );
                model.insert(key, v);
            }
        }
        let r = db.begin_read().unwrap();
        let got: Vec<(u64, u8)> = r
            .range("t", .., Direction::Forward)
            .unwrap()
            .map(|kv| {
                let (k, v) = kv.unwrap();
                (u64::from_be_bytes(k[..].try_into().unwrap()), v[0])
            })
            .collect();
        drop(r);
        assert_eq!(got, model.into_iter().collect::<Vec<_>>(), "{mode:?}");
        db.check().unwrap();
        db.close().unwrap();
    }
}

/// Alg. 1: a lazily split node keeps its lower half live and its upper
/// half dead at the split's TID, and its parent holds two entries for it,
/// the old one ended at T and a new one started at T; the new sibling's
/// cells start at T.
#[test]
fn a_lazy_node_has_two_parent_entries() {
    let vfs = MemVfs::new();
    let path = Path::new("/lazy.db");
    let db = open(path, mem_opts(&vfs, JournalMode::LsMvbt, 1024));
    db.create_table("t").unwrap();
    let mut next = rng(5);
    for _ in 0..400 {
        let k = next() % 100_000;
        db.put("t", &k.to_be_bytes(), &[1; 40]).unwrap();
    }
    // Keep every version: read the file as the last commit left it.
    let file = vfs.open(path, OpenFlags::EXISTING).unwrap();
    let len = file.len().unwrap() as usize;
    let mut bytes = vec![0u8; len];
    file.read_at(&mut bytes, 0).unwrap();
    let pages: Vec<&[u8]> = bytes.chunks(1024).collect();
    let mut lazy = 0;
    for (i, page) in pages.iter().enumerate().skip(1) {
        let Ok((_, cells)) = inspect(i as u32 + 1, page) else {
            continue;
        };
        for dead in cells
            .iter()
            .filter(|c| c.interior && !c.right && c.end != INV)
        {
            let t = dead.end;
            let Some(live) = cells
                .iter()
                .find(|c| c.interior && c.child == dead.child && c.start == t && c.end == INV)
            else {
                continue;
            };
            // The node's cells above the new separator ended at T.
            let child = pages[dead.child as usize - 1];
            let (_, kids) = inspect(dead.child, child).unwrap();
            let ended: Vec<_> = kids.iter().filter(|c| c.end == t).collect();
            if ended.is_empty() {
                continue; // collected since, or a later write
            }
            assert!(
                ended.iter().all(|c| c.key >= live.key),
                "{ended:?} vs {live:?}"
            );
            lazy += 1;
        }
    }
    assert!(lazy > 0, "no lazy node found");
    db.check().unwrap();
}

/// Options of both modes are checked at open.
#[test]
fn mode_options_are_checked() {
    for mode in MODES {
        let vfs = MemVfs::new();
        for (k, v, ok) in [
            ("embed", "0", true),
            ("embed", "1", true),
            ("commit", "ordered", true),
            ("commit", "counting", true),
            ("reserve", "0", true),
            ("commit", "sometimes", false),
            ("nonsense", "1", false),
        ] {
            let mut o: Options = mem_opts(&vfs, mode, 1024);
            o.set(k, v).unwrap();
            let r = Db::open(Path::new(&format!("/{k}{v}.db")), o);
            assert_eq!(r.is_ok(), ok, "{mode} {k}={v}");
        }
    }
}

/// Readers on other threads while a writer commits: every snapshot a
/// reader opens is one commit's state, whole (the writer rewrites every
/// row of the table with its commit number, and grows and shrinks the
/// table so that nodes split, move and lose their cells to lazy GC; on
/// 1 KiB pages the root runs out of room while readers hold old versions,
/// so its last resort collects them and such a reader may be told its
/// snapshot is too old, a retryable conflict).
#[test]
fn concurrent_readers_see_whole_commits() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    for (mode, ps) in [
        (JournalMode::Mvbt, 1024),
        (JournalMode::LsMvbt, 1024),
        (JournalMode::LsMvbt, 4096),
    ] {
        let vfs = MemVfs::new();
        let db = open(Path::new("/conc.db"), mem_opts(&vfs, mode, ps));
        db.create_table("t").unwrap();
        let stop = AtomicBool::new(false);
        let (reads, too_old) = (AtomicUsize::new(0), AtomicUsize::new(0));
        /// Stops the readers however the writer ends.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Relaxed);
            }
        }
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Relaxed) {
                        let r = db.begin_read().unwrap();
                        let (first, again) = match (try_read_all(&r), {
                            // Read it again after the writer moved on.
                            std::thread::yield_now();
                            try_read_all(&r)
                        }) {
                            (Ok(a), Ok(b)) => (a, b),
                            (Err(e), _) | (_, Err(e)) => {
                                assert!(e.is_retryable(), "{mode}: {e}");
                                too_old.fetch_add(1, Relaxed);
                                continue;
                            }
                        };
                        let stamps: HashSet<&[u8]> = first.values().map(|v| &v[..8]).collect();
                        assert!(stamps.len() <= 1, "{mode}: a snapshot mixes commits");
                        assert_eq!(first, again, "{mode}: a snapshot changed");
                        reads.fetch_add(1, Relaxed);
                    }
                });
            }
            let _stop = Stop(&stop);
            let mut next = rng(17);
            for c in 0..150u64 {
                db.write(|t| {
                    let mut next = rng(c + 1);
                    let n = 40 + next() % 80;
                    for k in 0..120u64 {
                        let key = format!("k{k:04}").into_bytes();
                        if k < n {
                            let mut v = c.to_be_bytes().to_vec();
                            v.extend(std::iter::repeat_n(k as u8, (next() % 60) as usize));
                            t.put("t", &key, &v)?;
                        } else {
                            t.delete("t", &key)?;
                        }
                    }
                    Ok(())
                })
                .unwrap();
                next();
            }
        });
        eprintln!(
            "{mode} {ps}: {} whole snapshots read, {} too old",
            reads.into_inner(),
            too_old.into_inner()
        );
        db.check().unwrap();
    }
}

/// `got` equals `want`, or a panic naming the first keys that differ.
fn same(got: &Rows, want: &Rows, what: &str) {
    if got == want {
        return;
    }
    let keys: std::collections::BTreeSet<&Vec<u8>> = got.keys().chain(want.keys()).collect();
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .take(4)
        .map(|k| {
            let len = |r: &Rows| r.get(k).map(|v| v.len());
            format!(
                "{}: {:?} bytes, want {:?}",
                String::from_utf8_lossy(k),
                len(got),
                len(want)
            )
        })
        .collect();
    panic!(
        "{what}: {} rows, want {}; first differences: {}",
        got.len(),
        want.len(),
        diff.join("; ")
    );
}

/// Pager P14: a reader that misses while a writer has spilled pages to
/// the file reads (and may cache) an image that holds the writer's
/// uncommitted version. The writer rolls back, and the next writer gets
/// the same TID: a stale image must not make the rolled-back cells that
/// commit's, for readers or as the base a later writer writes over (it
/// did: readers of the reused TID's snapshot lost rows once a later
/// commit wrote such a page). Every round: a big transaction that
/// spills (a tiny cache), a reader that reads the whole table beside it,
/// a rollback, a small commit with the same TID and a reader of it, a
/// commit that writes every leaf; then every open snapshot, a new reader
/// and the integrity check agree with the model. Also run for the other
/// modes that keep uncommitted versions in pages (under their default
/// protocol a reader waits for the writer's exclusive lock instead).
#[test]
fn a_read_during_a_spill_does_not_outlive_its_rollback() {
    use std::time::Duration;
    let modes = [
        JournalMode::Mvbt,
        JournalMode::LsMvbt,
        JournalMode::Ips,
        JournalMode::DhlCc,
    ];
    for mode in modes {
        for ps in [512usize, 1024, 4096] {
            let vfs = MemVfs::new();
            let path = Path::new("/spill.db");
            let opts = || {
                mem_opts(&vfs, mode, ps)
                    .cache_size(16 * ps)
                    .busy_timeout(Duration::from_millis(1))
            };
            let db = open(path, opts());
            db.create_table("t").unwrap();
            let mut next = rng(0x5eed ^ ps as u64 ^ (mode as u64) << 20);
            let rows = 40 * ps / 128;
            let key = |k: usize| format!("key{k:05}").into_bytes();
            let mut committed = Rows::new();
            let mut t = db.begin_write().unwrap();
            for k in 0..rows {
                let v = vec![k as u8; 40 + k % 50];
                t.put("t", &key(k), &v).unwrap();
                committed.insert(key(k), v);
            }
            t.commit().unwrap();
            let mut readers: Vec<(ReadTxn, Rows)> = Vec::new();
            let mut spilled_reads = 0;
            // Whether readers run beside a writer that changes the file
            // (otherwise none is kept open: the writer would wait for it).
            let mut beside = true;
            for round in 0..12 {
                let ctx = format!("{mode} ps {ps} round {round}");
                // A big transaction: every row changes (deleted, updated
                // or grown), so that its dirty pages outgrow the cache.
                db.counters().start_trace();
                let mut w = db.begin_write().unwrap();
                for k in 0..rows + rows / 8 {
                    let r = next();
                    if r.is_multiple_of(3) {
                        w.delete("t", &key(k)).unwrap();
                    } else {
                        let v = vec![(r >> 8) as u8; (r >> 16) as usize % 90];
                        w.put("t", &key(k), &v).unwrap();
                    }
                }
                let spilled = db.counters().take_trace().iter().any(|ev| {
                    matches!(ev, IoEvent::Write(p, ..) if p.to_string_lossy().ends_with(".db"))
                });
                assert!(spilled, "{ctx}: the big transaction did not spill");
                // A reader beside it reads every page, the spilled ones
                // from the file; backwards, so that the first pages the
                // writer spilled are the ones left in the cache.
                match db.begin_read() {
                    Ok(r) => {
                        let back: twinpage::Result<Vec<_>> =
                            r.range("t", .., Direction::Reverse).unwrap().collect();
                        let back: Rows = back.unwrap().into_iter().collect();
                        same(
                            &back,
                            &committed,
                            &format!("{ctx}: reader beside the spill"),
                        );
                        spilled_reads += 1;
                        if beside && round % 4 == 0 {
                            readers.push((r, committed.clone()));
                        }
                    }
                    Err(e) => {
                        assert!(e.is_retryable(), "{ctx}: {e}");
                        beside = false;
                    }
                }
                w.rollback().unwrap();
                // The next writer reuses the rolled-back TID: a few rows.
                let mut w = db.begin_write().unwrap();
                for _ in 0..(next() % 6 + 1) {
                    let r = next();
                    let k = key(r as usize % (rows + rows / 8));
                    if r.is_multiple_of(4) {
                        w.delete("t", &k).unwrap();
                        committed.remove(&k);
                    } else {
                        let v = vec![(r >> 24) as u8; (r >> 32) as usize % 60];
                        w.put("t", &k, &v).unwrap();
                        committed.insert(k, v);
                    }
                }
                w.commit().unwrap();
                // A reader of that commit (opened, not read yet: a read
                // would push the stale pages out of the cache), and a
                // writer after it (its TID is above the rolled-back one)
                // over the pages the big transaction had spilled.
                if beside {
                    readers.push((db.begin_read().unwrap(), committed.clone()));
                }
                let mut w = db.begin_write().unwrap();
                for k in (next() as usize % 7..rows + rows / 8).step_by(7) {
                    let r = next();
                    if r.is_multiple_of(5) {
                        w.delete("t", &key(k)).unwrap();
                        committed.remove(&key(k));
                    } else {
                        let v = vec![(r >> 24) as u8; (r >> 32) as usize % 70];
                        w.put("t", &key(k), &v).unwrap();
                        committed.insert(key(k), v);
                    }
                }
                w.commit().unwrap();
                let r = db.begin_read().unwrap();
                same(
                    &read_all(&r),
                    &committed,
                    &format!("{ctx}: newest snapshot"),
                );
                drop(r);
                for (r, m) in &readers {
                    match try_read_all(r) {
                        Ok(rows) => same(&rows, m, &format!("{ctx}: an old snapshot")),
                        Err(e) => assert!(e.is_retryable(), "{ctx}: {e}"),
                    }
                }
                if readers.len() > 6 {
                    readers.remove(0);
                }
                if let Err(e) = db.check() {
                    panic!("{ctx}: {e}");
                }
            }
            if matches!(mode, JournalMode::Mvbt | JournalMode::LsMvbt) {
                assert_eq!(
                    spilled_reads, 12,
                    "{mode}: a reader did not run beside a spill"
                );
            }
            drop(readers);
            let mut want = Model::new();
            want.insert("t".into(), committed);
            assert_matches(&db, &want);
            db.close().unwrap();
            let db = open(path, opts());
            assert_matches(&db, &want);
        }
    }
}
