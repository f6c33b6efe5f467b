//! Page checksums (format 2): a damaged page is an error naming the file
//! and the page, at read or at check; format-1 files are refused with a
//! message that says so; a database created without checksums keeps that
//! choice. The campaigns at scale are in twinpage-tools (damage_campaign).

mod common;

use common::*;
use std::path::Path;
use twinpage::storage::MemVfs;
use twinpage::{Db, Error, JournalMode};

const PATH: &str = "/sums.db";
const PS: usize = 1024;

fn build(mode: JournalMode, sums: bool) -> MemVfs {
    let vfs = MemVfs::new();
    let mut o = mem_opts(&vfs, mode, PS);
    o.page_checksums = sums;
    let db = open(Path::new(PATH), o);
    db.create_table("t").unwrap();
    let mut t = db.begin_write().unwrap();
    for i in 0..300u32 {
        t.put("t", format!("k{i:05}").as_bytes(), &[i as u8; 40])
            .unwrap();
    }
    t.put("t", b"big", &[7; 3 * PS]).unwrap();
    t.commit().unwrap();
    db.check().unwrap();
    db.close().unwrap();
    vfs
}

fn reopen(vfs: &MemVfs, mode: JournalMode) -> twinpage::Result<Db> {
    Db::open(Path::new(PATH), mem_opts(vfs, mode, PS))
}

fn flip(vfs: &MemVfs, pgno: usize, at: usize) {
    let mut b = vfs.read_file(Path::new(PATH)).unwrap();
    b[(pgno - 1) * PS + at] ^= 0x10;
    vfs.write_file(Path::new(PATH), b);
}

/// Every key's value, or the first error.
fn read_all(db: &Db) -> twinpage::Result<usize> {
    let r = db.begin_read()?;
    let mut n = 0;
    for kv in r.range("t", .., twinpage::Direction::Forward)? {
        kv?;
        n += 1;
    }
    Ok(n)
}

#[test]
fn a_flipped_bit_in_any_page_is_named() {
    for &mode in JournalMode::ALL {
        let vfs = build(mode, true);
        let pages = vfs.read_file(Path::new(PATH)).unwrap().len() / PS;
        assert!(pages > 10, "{mode}: {pages} pages");
        for pgno in 2..=pages {
            // A byte near the end: free space on most tree pages, value
            // bytes on overflow pages; nothing a structural check sees.
            let img = vfs.duplicate();
            flip(&img, pgno, PS - 7);
            let named =
                |e: &Error| matches!(e, Error::Corruption { page, .. } if *page as usize == pgno);
            // Modes that keep the free list in memory read its trunk pages
            // at open: a damaged one fails the open, naming it.
            let db = match reopen(&img, mode) {
                Ok(db) => db,
                Err(e) if named(&e) => continue,
                Err(e) => panic!("{mode}: open after a flip in page {pgno}: {e}"),
            };
            let read = read_all(&db);
            let (_, problems) = db.check_all().unwrap();
            assert!(
                read.as_ref().err().is_some_and(named) || problems.iter().any(named),
                "{mode}: flip in page {pgno} not reported (read {read:?}, check {problems:?})"
            );
            if let Err(Error::Corruption { file, .. }) = &read {
                assert_eq!(file, PATH, "{mode}: the error names the file");
            }
            db.close().unwrap();
        }
    }
}

#[test]
fn the_header_page_is_covered_outside_its_fields() {
    let vfs = build(JournalMode::Persist, true);
    // Bytes 100.. of page 1 are zeros under the page-1 checksum.
    flip(&vfs, 1, 100);
    let e = reopen(&vfs, JournalMode::Persist).err().unwrap();
    assert!(
        e.to_string()
            .contains("page checksum mismatch on the header page"),
        "{e}"
    );
}

#[test]
fn format_1_files_are_refused_with_a_message() {
    let vfs = build(JournalMode::Persist, true);
    let mut b = vfs.read_file(Path::new(PATH)).unwrap();
    b[16..20].copy_from_slice(&1u32.to_be_bytes());
    let crc = crc32c(&b[0..52]);
    b[52..56].copy_from_slice(&crc.to_be_bytes());
    vfs.write_file(Path::new(PATH), b);
    let e = reopen(&vfs, JournalMode::Persist).err().unwrap();
    assert!(e.is_corruption());
    assert!(e.to_string().contains("format version 1"), "{e}");
}

/// crc32c (Castagnoli), bitwise: the tests do not depend on the crate.
fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
    }
    !c
}

#[test]
fn without_checksums_the_choice_sticks() {
    let vfs = build(JournalMode::Wal, false);
    // Asking for checksums does not change an existing database.
    let mut o = mem_opts(&vfs, JournalMode::Wal, PS);
    o.page_checksums = true;
    let db = Db::open(Path::new(PATH), o).unwrap();
    assert!(!db.stats().page_checksums);
    db.put("t", b"more", b"x").unwrap();
    assert_eq!(read_all(&db).unwrap(), 302);
    db.check().unwrap();
    db.close().unwrap();
    let db = reopen(&build(JournalMode::Wal, true), JournalMode::Wal).unwrap();
    assert!(db.stats().page_checksums);
    db.close().unwrap();
}
