//! OFF: no journal. Commit writes the pages in place. Rollback of a
//! transaction that spilled restores the original images kept in memory;
//! a crash during commit may leave a torn database, as in SQLite's OFF.

use super::{CommitSet, Journal, JournalMode, RecoverCtx, Recovery};
use crate::db::Synchronous;
use crate::error::{Pgno, Result};
use crate::pager::DbFile;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// The OFF scheme.
pub struct OffJournal {
    sync: Synchronous,
    st: Mutex<OffState>,
}

#[derive(Default)]
struct OffState {
    /// Originals of pages spilled by the current transaction.
    undo: HashMap<Pgno, Arc<[u8]>>,
    spilled: bool,
}

impl OffJournal {
    /// A new OFF journal.
    pub fn new(sync: Synchronous) -> Self {
        OffJournal {
            sync,
            st: Mutex::default(),
        }
    }
}

impl Journal for OffJournal {
    fn mode(&self) -> JournalMode {
        JournalMode::Off
    }

    fn recover(&self, _ctx: &RecoverCtx<'_>) -> Result<Recovery> {
        Ok(Recovery::default())
    }

    fn spill(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let mut st = self.st.lock();
        for p in set.pages {
            if p.pgno <= set.orig_page_count && !st.undo.contains_key(&p.pgno) {
                st.undo.insert(p.pgno, set.originals.original(p.pgno)?);
            }
            // Set before writing: a spill that fails half-way must be undone.
            st.spilled = true;
            db.write_page(p.pgno, &p.data)?;
        }
        Ok(())
    }

    fn commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        for p in set.pages {
            db.write_page(p.pgno, &p.data)?;
        }
        if set.new_page_count < set.orig_page_count {
            db.file()
                .set_len(set.new_page_count as u64 * db.page_size as u64)?;
        }
        if self.sync != Synchronous::Off {
            db.file().sync_data()?;
        }
        let mut st = self.st.lock();
        st.undo.clear();
        st.spilled = false;
        Ok(())
    }

    fn rollback(&self, db: &DbFile, orig_page_count: u32) -> Result<()> {
        let mut st = self.st.lock();
        if st.spilled {
            for (pgno, img) in st.undo.drain() {
                db.write_page(pgno, &img)?;
            }
            db.file()
                .set_len(orig_page_count as u64 * db.page_size as u64)?;
        }
        st.undo.clear();
        st.spilled = false;
        Ok(())
    }

    fn close(&self, _db: &DbFile) -> Result<()> {
        Ok(())
    }
}
