//! Engine bugs found by the crash tooling, each pinned by a test.

use std::sync::Arc;
use twinpage::storage::MemVfs;
use twinpage::{Db, JournalMode, Options};

fn opts(vfs: &MemVfs, mode: JournalMode) -> Options {
    Options::default()
        .journal_mode(mode)
        .page_size(1024)
        .vfs(Arc::new(vfs.clone()))
}

/// Pages allocated and freed by the same transaction join the free list
/// without ever being written: the file ended before `page_count` pages,
/// so the next open reported corruption and the next transaction that
/// reused such a page failed reading its "original" for the journal.
#[test]
fn pages_allocated_and_freed_in_one_transaction_keep_the_file_whole() {
    for &mode in JournalMode::ALL {
        let vfs = MemVfs::new();
        let db = Db::open("/t/a.db", opts(&vfs, mode)).unwrap();
        db.create_table("t").unwrap();
        let mut t = db.begin_write().unwrap();
        t.put("t", b"big", &vec![7u8; 3000]).unwrap();
        t.delete("t", b"big").unwrap();
        t.commit().unwrap();
        db.check().unwrap();
        // Reuse the free pages: the journal reads their committed images.
        db.put("t", b"again", &vec![8u8; 3000]).unwrap();
        db.check().unwrap();
        db.close().unwrap();
        let db = Db::open("/t/a.db", opts(&vfs, mode)).unwrap();
        db.check().unwrap();
        assert_eq!(db.get("t", b"again").unwrap(), Some(vec![8u8; 3000]));
        db.close().unwrap();
        let len = vfs.read_file(std::path::Path::new("/t/a.db")).unwrap().len();
        assert_eq!(len % 1024, 0, "{mode}");
    }
}
