//! The integrity check reports every damaged page, not just the first.

use std::fs;
use twinpage::{Db, Error, JournalMode, Options};

#[test]
fn every_damaged_page_is_reported_and_the_rest_still_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let opts = Options::default()
        .journal_mode(JournalMode::Persist)
        .page_size(1024);
    {
        let db = Db::open(&path, opts.clone()).unwrap();
        for t in ["a", "b", "c"] {
            db.create_table(t).unwrap();
            let mut w = db.begin_write().unwrap();
            for i in 0..400u32 {
                w.put(t, &i.to_be_bytes(), &[7u8; 40]).unwrap();
            }
            w.commit().unwrap();
        }
        let (report, problems) = db.check_all().unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(report.tables, 3);
        assert_eq!(report.keys, 1200);
        db.close().unwrap();
    }
    // Break the type byte of the first and the last leaf page (slotted
    // format: 0x0D at offset 0).
    let mut bytes = fs::read(&path).unwrap();
    let leaves: Vec<usize> = (2..bytes.len() / 1024)
        .filter(|&p| bytes[p * 1024] == 0x0D)
        .collect();
    assert!(leaves.len() > 10);
    let (first, last) = (leaves[1], leaves[leaves.len() - 1]);
    bytes[first * 1024] = 0x42;
    bytes[last * 1024] = 0x42;
    fs::write(&path, &bytes).unwrap();
    let db = Db::open(&path, opts.read_only(true)).unwrap();
    let (report, problems) = db.check_all().unwrap();
    let pages: Vec<u32> = problems
        .iter()
        .filter_map(|e| match e {
            Error::Corruption { page, .. } => Some(*page),
            _ => None,
        })
        .collect();
    // Page numbers are 1-based: page p starts at byte (p - 1) * 1024.
    for p in [first + 1, last + 1] {
        assert!(
            pages.contains(&(p as u32)),
            "page {p} not reported: {problems:#?}"
        );
    }
    // The undamaged leaves were still walked.
    assert!(report.keys > 1000, "{report:?}");
    let e = db.check().unwrap_err();
    assert!(e.is_corruption(), "{e}");
    assert!(e.to_string().contains("problem(s)"), "{e}");
}
