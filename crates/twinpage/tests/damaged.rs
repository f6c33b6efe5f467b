//! Damaged files: open, read, scan and check return typed errors; never a
//! panic, a hang or an unbounded allocation.

mod common;

use common::*;
use std::path::Path;
use twinpage::storage::MemVfs;
use twinpage::{Db, Direction, Error, JournalMode};

const PATH: &str = "/damaged.db";
const PS: usize = 512;

fn build() -> Vec<u8> {
    let vfs = MemVfs::new();
    let db = open(Path::new(PATH), mem_opts(&vfs, JournalMode::Persist, PS));
    db.create_table("a").unwrap();
    db.create_table("b").unwrap();
    let mut t = db.begin_write().unwrap();
    for i in 0..1500u32 {
        t.put("a", format!("{i:06}").as_bytes(), &[i as u8; 30])
            .unwrap();
    }
    t.put("b", b"big", &[5; 4000]).unwrap();
    for i in 0..300u32 {
        t.delete("a", format!("{:06}", i * 5).as_bytes()).unwrap();
    }
    t.commit().unwrap();
    db.close().unwrap();
    vfs.read_file(Path::new(PATH)).unwrap()
}

/// Open and exercise a damaged image; Ok(()) if everything that failed
/// failed with a typed error. Panics propagate and fail the test.
fn exercise(bytes: Vec<u8>) -> Vec<Error> {
    let vfs = MemVfs::new();
    vfs.write_file(Path::new(PATH), bytes);
    let mut errors = Vec::new();
    let db = match Db::open(Path::new(PATH), mem_opts(&vfs, JournalMode::Persist, PS)) {
        Ok(db) => db,
        Err(e) => {
            errors.push(e);
            return errors;
        }
    };
    if let Err(e) = db.check() {
        errors.push(e);
    }
    for t in ["a", "b"] {
        match db.scan(t, .., Direction::Forward) {
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
        match db.scan(t, .., Direction::Reverse) {
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
        for k in [&b"000001"[..], b"000777", b"big", b"zzz"] {
            if let Err(e) = db.get(t, k) {
                errors.push(e);
            }
        }
    }
    // Writing to a damaged file must not panic either.
    if let Err(e) = db.put("a", b"000778", b"x") {
        errors.push(e);
    }
    std::mem::forget(db);
    errors
}

fn all_typed(errors: &[Error]) {
    for e in errors {
        assert!(
            matches!(
                e,
                Error::Corruption { .. } | Error::NoSuchTable(_) | Error::Io { .. }
            ),
            "unexpected error kind: {e}"
        );
    }
}

#[test]
fn truncated_file_is_corruption() {
    let img = build();
    for len in [
        0usize,
        10,
        PS - 1,
        PS,
        PS + 100,
        img.len() / 2,
        img.len() - 1,
    ] {
        let errs = exercise(img[..len].to_vec());
        all_typed(&errs);
        if len > PS {
            assert!(errs.iter().any(|e| e.is_corruption()), "truncated to {len}");
        }
    }
}

#[test]
fn bad_magic_is_corruption() {
    let mut img = build();
    img[0] ^= 0xff;
    let errs = exercise(img);
    assert!(matches!(
        errs.as_slice(),
        [Error::Corruption { page: 1, .. }]
    ));
}

#[test]
fn random_bytes_in_any_page_give_typed_errors() {
    let img = build();
    let pages = img.len() / PS;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut detected = 0;
    for p in 1..pages {
        for _ in 0..6 {
            let mut m = img.clone();
            let start = p * PS + (next() as usize % PS);
            let n = 1 + next() as usize % 64;
            for b in &mut m[start..(start + n).min((p + 1) * PS)] {
                *b = next() as u8;
            }
            let errs = exercise(m);
            all_typed(&errs);
            detected += !errs.is_empty() as usize;
        }
        // A whole page of garbage.
        let mut m = img.clone();
        for b in &mut m[p * PS..(p + 1) * PS] {
            *b = next() as u8;
        }
        let errs = exercise(m);
        all_typed(&errs);
        assert!(!errs.is_empty(), "garbage page {p} went unnoticed");
    }
    assert!(detected > pages, "most damage is detected ({detected})");
}

#[test]
fn a_page_that_points_to_itself_is_caught() {
    let img = build();
    // Find an interior page (type byte 0x05) and point its right child at itself.
    let pages = img.len() / PS;
    let p = (2..pages)
        .find(|&p| img[p * PS] == 0x05)
        .expect("an interior page");
    let mut m = img.clone();
    m[p * PS + 8..p * PS + 12].copy_from_slice(&(p as u32 + 1).to_be_bytes());
    let errs = exercise(m);
    all_typed(&errs);
    assert!(errs.iter().any(|e| e.is_corruption()));
    // An overflow page whose chain loops back to itself.
    let b_over = (2..pages)
        .find(|&p| img[p * PS + 4..p * PS + 20].iter().all(|&b| b == 5))
        .expect("overflow page");
    let mut m = img.clone();
    m[b_over * PS..b_over * PS + 4].copy_from_slice(&(b_over as u32 + 1).to_be_bytes());
    let errs = exercise(m);
    all_typed(&errs);
    assert!(errs.iter().any(|e| e.is_corruption()));
}

#[test]
fn huge_lengths_do_not_allocate() {
    use twinpage::node::{DecodeCtx, EncodeCtx, Node, NodeFormat, SlottedFormat, Value};
    let img = build();
    let pages = img.len() / PS;
    let f = SlottedFormat;
    let dctx = DecodeCtx {
        page_size: PS,
        committed_tid: u64::MAX,
        checksums: true,
        order: &twinpage::base::BYTEWISE,
    };
    let ectx = EncodeCtx::new(PS, 1, true);
    let mut m = img.clone();
    let mut patched = 0;
    for p in 2..pages {
        let page = &mut m[p * PS..(p + 1) * PS];
        if let Ok(Node::Leaf(mut cells)) = f.decode(p as u32 + 1, page, &dctx) {
            for c in &mut cells {
                if let Value::Overflow { head, .. } = c.value {
                    // Claims 2^60 bytes: must be rejected before allocating.
                    c.value = Value::Overflow { len: 1 << 60, head };
                    patched += 1;
                }
            }
            f.encode(p as u32 + 1, &Node::Leaf(cells), None, &ectx, page)
                .unwrap();
        }
    }
    assert_eq!(patched, 1);
    let errs = exercise(m);
    all_typed(&errs);
    assert!(errs.iter().any(|e| e.is_corruption()));
}
