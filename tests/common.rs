//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use twinpage::storage::MemVfs;
use twinpage::{Db, Direction, JournalMode, Options, Synchronous};

pub type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

pub fn mem_opts(vfs: &MemVfs, mode: JournalMode, page_size: usize) -> Options {
    Options::default()
        .journal_mode(mode)
        .synchronous(Synchronous::Full)
        .page_size(page_size)
        .cache_size(64 * page_size)
        .vfs(Arc::new(vfs.clone()))
}

/// Everything in the database, table by table.
pub fn dump(db: &Db) -> Model {
    let r = db.begin_read().unwrap();
    let mut m = Model::new();
    for t in r.tables().unwrap() {
        let rows: BTreeMap<_, _> = r
            .range(&t, .., Direction::Forward)
            .unwrap()
            .map(|kv| kv.unwrap())
            .collect();
        m.insert(t, rows);
    }
    m
}

/// Assert the database equals the model and passes the integrity check.
pub fn assert_matches(db: &Db, model: &Model) {
    db.check().expect("integrity check");
    assert_eq!(&dump(db), model);
}

pub fn open(path: &Path, opts: Options) -> Db {
    Db::open(path, opts).expect("open")
}
