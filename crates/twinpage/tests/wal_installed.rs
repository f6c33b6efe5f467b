//! WAL invariant W8, driven at the journal's interface: with several
//! writers the pager publishes a commit in the journal and installs it
//! right after, and a reader that starts in between is on the snapshot
//! before that commit. A checkpoint (or a log restart) must not overwrite
//! or drop what that reader reads, although no reader list taken before it
//! started can name it: the journal copies only installed commits, and
//! asks for the readers again once it waited for the installs. (Without
//! W8 the first assertion fails: the step copies commit 8 into the
//! database file and the reader of snapshot 7 reads it.)

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use twinpage::base::header::seal_page1;
use twinpage::base::Tid;
use twinpage::base::{Header, Synchronous};
use twinpage::journal::{
    CommitSet, Journal, ModeOptions, OriginalSource, PageImage, ReaderView, Readers, TestFaults,
    WalJournal, WalOptions,
};
use twinpage::storage::{DbFile, MemVfs, OpenFlags, Vfs};
use twinpage::{Pgno, Result};

const PS: usize = 512;
const OLD: u8 = 0x11;
const NEW: u8 = 0x22;

/// The committed images: what the database file holds.
struct FromDb<'a>(&'a DbFile);
impl OriginalSource for FromDb<'_> {
    fn original(&self, pgno: Pgno) -> Result<Arc<[u8]>> {
        let mut b = vec![0u8; PS];
        self.0.read_page(pgno, &mut b)?;
        Ok(Arc::from(b))
    }
}

/// The pager's side, scripted: what `view` reports, and what the readers
/// look like once the installs the journal waits for are done.
struct Script {
    now: RefCell<ReaderView>,
    after_install: RefCell<ReaderView>,
}

impl Readers for Script {
    fn view(&self) -> ReaderView {
        self.now.borrow().clone()
    }
    fn view_after(&self, tid: Tid) -> Result<ReaderView> {
        let v = self.after_install.borrow().clone();
        assert!(v.installed >= tid, "the script installs up to {tid}");
        *self.now.borrow_mut() = v.clone();
        Ok(v)
    }
}

fn header(fcc: Tid, page_count: u32) -> Header {
    Header {
        page_size: PS as u32,
        page_count,
        fcc,
        freelist_head: 0,
        freelist_count: 0,
        catalog_root: 2,
        journal_mode: 4,
        clean_close: false,
        page_checksums: false,
    }
}

fn page1(h: &Header) -> Vec<u8> {
    let mut p = vec![0u8; PS];
    h.write_to(&mut p);
    seal_page1(&mut p);
    p
}

fn read(j: &WalJournal, db: &DbFile, pgno: Pgno, snapshot: Tid) -> u8 {
    let mut b = vec![0u8; PS];
    j.read_page(db, pgno, snapshot, &mut b).unwrap();
    b[0]
}

fn in_db(db: &DbFile, pgno: Pgno) -> u8 {
    let mut b = vec![0u8; PS];
    db.read_page(pgno, &mut b).unwrap();
    b[0]
}

/// A database of two pages at FCC 7 (page 2 holds `OLD`) and its log.
fn open(autocheckpoint: u32, step: u32) -> (WalJournal, DbFile) {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let file = vfs.open(Path::new("/w.db"), OpenFlags::CREATE).unwrap();
    let db = DbFile::new(vfs.clone(), PathBuf::from("/w.db"), file, PS);
    let mut img = page1(&header(7, 2));
    img.extend(vec![OLD; PS]);
    db.file().write_at(&img, 0).unwrap();
    let mut opts = ModeOptions::default();
    opts.0
        .push(("wal_autocheckpoint".into(), autocheckpoint.to_string()));
    opts.0.push(("checkpoint_step".into(), step.to_string()));
    let j = WalJournal::new(
        Synchronous::Full,
        TestFaults::default(),
        WalOptions::parse(&opts).unwrap(),
    );
    (j, db)
}

/// Commit `tid` through the sequencer (a multi-writer commit) and publish
/// it; the pager's install is up to the test's [`Script`].
fn commit(j: &WalJournal, db: &DbFile, tid: Tid, count: (u32, u32), pages: &[(Pgno, u8)]) {
    let (prev, h) = (header(tid - 1, count.0), header(tid, count.1));
    let mut images = vec![PageImage::new(1, Arc::from(page1(&h)))];
    images.extend(
        pages
            .iter()
            .map(|&(pgno, b)| PageImage::new(pgno, Arc::from(vec![b; PS]))),
    );
    let nobody = ReaderView {
        installed: tid - 1,
        snapshots: Vec::new(),
    };
    let set = CommitSet {
        tid,
        pages: &images,
        orig_page_count: count.0,
        new_page_count: count.1,
        originals: &FromDb(db),
        prev_header: &prev,
        header: &h,
        oldest_snapshot: u64::MAX,
        readers: &nobody,
        free: &[],
    };
    let mut t = j.sequence_commit(db, &set).unwrap();
    j.finish_commit(db, &mut t).unwrap();
    j.publish_commit(&t).unwrap();
}

fn view(installed: Tid, snapshots: &[Tid]) -> ReaderView {
    ReaderView {
        installed,
        snapshots: snapshots.to_vec(),
    }
}

fn stat(j: &WalJournal, name: &str) -> u64 {
    j.stats().into_iter().find(|s| s.0 == name).unwrap().1
}

/// Commit 8 rewrites page 2 and is published but not installed. The whole
/// checkpoint waits for the install and asks for the readers again; the
/// incremental one starts its window once 8 is installed.
#[test]
fn a_checkpoint_asks_for_the_readers_after_the_installs() {
    for step in [128, 0] {
        let (j, db) = open(1, step);
        commit(&j, &db, 8, (2, 2), &[(2, NEW)]);
        let s = Script {
            now: RefCell::new(view(7, &[])),
            after_install: RefCell::new(view(8, &[7])),
        };
        j.after_commit(&db, &s).unwrap();
        if step > 0 {
            // A window starts only at an installed commit: none yet.
            assert_eq!(stat(&j, "checkpoints"), 0);
            assert_eq!(in_db(&db, 2), OLD);
            assert_eq!(read(&j, &db, 2, 7), OLD);
            *s.now.borrow_mut() = view(8, &[7]);
            j.after_commit(&db, &s).unwrap();
        }
        assert_eq!(stat(&j, "checkpoints"), 1, "checkpoint_step={step}");
        assert_eq!(in_db(&db, 2), NEW, "checkpoint_step={step}");
        // The reader of snapshot 7 started before the install: R1 kept
        // its version.
        assert_eq!(read(&j, &db, 2, 7), OLD, "checkpoint_step={step}");
        assert_eq!(read(&j, &db, 2, 8), NEW, "checkpoint_step={step}");
    }
}

/// Commit 8 (installed) adds pages 3-12; commit 9 (published, not
/// installed) rewrites page 2 and makes the checkpoint due. The window's
/// first step is not its last, so it copies with the readers it was given
/// (none): it must stop at commit 8, or page 2 of commit 9 lands in the
/// database file under the reader of snapshot 8 that starts before the
/// install. (Without W8's bound this test fails.)
#[test]
fn a_window_ends_at_an_installed_commit() {
    let (j, db) = open(11, 1);
    let pages: Vec<(Pgno, u8)> = (3..=12).map(|p| (p, NEW)).collect();
    commit(&j, &db, 8, (2, 12), &pages);
    commit(&j, &db, 9, (12, 12), &[(2, NEW)]);
    let s = Script {
        now: RefCell::new(view(8, &[])),
        after_install: RefCell::new(view(9, &[8])),
    };
    j.after_commit(&db, &s).unwrap();
    assert!(stat(&j, "checkpoint_steps") >= 1);
    assert_eq!(stat(&j, "checkpoints"), 0, "a window in progress");
    assert_eq!(in_db(&db, 2), OLD);
    assert_eq!(read(&j, &db, 2, 8), OLD);
    assert_eq!(read(&j, &db, 2, 9), NEW);
    // Once 9 is installed the following steps take it in.
    *s.now.borrow_mut() = view(9, &[8]);
    for _ in 0..12 {
        j.after_commit(&db, &s).unwrap();
    }
    assert!(stat(&j, "checkpoints") >= 1);
    assert_eq!(in_db(&db, 2), NEW);
    assert_eq!(read(&j, &db, 2, 8), OLD);
    for p in 3..=12 {
        assert_eq!(in_db(&db, p), NEW, "page {p}");
        assert_eq!(read(&j, &db, p, 8), NEW, "page {p}");
    }
}
