//! OFF: no journal. Commit writes the pages in place. Rollback of a
//! transaction that spilled restores the original images kept in memory;
//! a crash during commit may leave a torn database, as in SQLite's OFF.
//!
//! With `embed=1` (the paper's OFF_OPT, [DHL] §IV-B1) the FCC and page
//! count go into a trailer of the last tree page written instead of page
//! 1, so a one-page transaction writes one page. Page 1 is then written
//! only at the first commit of a session (clearing the clean-close flag),
//! when the free list or another header field changes, and at close;
//! after a crash, recovery takes the highest embedded FCC.

use super::dhl::header_must_be_written;
use super::{CommitSet, Journal, JournalMode, PageImage, RecoverCtx, Recovery};
use crate::base::header::seal_page1;
use crate::base::pgmap::reset_map;
use crate::base::Synchronous;
use crate::base::{Header, HEADER_LEN};
use crate::base::{Pgno, Result};
use crate::node::slotted::{self, INTERIOR, LEAF};
use crate::node::{NodeFormat, SlottedFormat, SlottedMetaFormat, META_TRAILER};
use crate::storage::DbFile;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// The OFF scheme.
pub struct OffJournal {
    sync: Synchronous,
    embed: bool,
    st: Mutex<OffState>,
}

#[derive(Default)]
struct OffState {
    /// Originals of pages spilled by the current transaction.
    undo: HashMap<Pgno, Arc<[u8]>>,
    spilled: bool,
    /// Page 1 on storage has the clean-close flag cleared.
    session_marked: bool,
    /// Tree page carrying the embedded FCC of the commit in progress.
    commit_page: Option<(u64, Pgno)>,
    /// FCC and page count found by recovery in an embedded trailer.
    recovered: Option<(u64, u32)>,
}

fn trailer_crc(pgno: Pgno, t: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&pgno.to_be_bytes()), &t[..12])
}

/// The (FCC, page count) embedded in a tree page's trailer, if intact.
fn read_trailer(pgno: Pgno, page: &[u8]) -> Option<(u64, u32)> {
    let t = &page[page.len() - META_TRAILER..];
    let crc = u32::from_be_bytes(t[12..16].try_into().ok()?);
    if crc != trailer_crc(pgno, t) {
        return None;
    }
    Some((
        u64::from_be_bytes(t[0..8].try_into().ok()?),
        u32::from_be_bytes(t[8..12].try_into().ok()?),
    ))
}

fn write_trailer(pgno: Pgno, page: &mut [u8], fcc: u64, page_count: u32) {
    let ps = page.len();
    let t = &mut page[ps - META_TRAILER..];
    t[0..8].copy_from_slice(&fcc.to_be_bytes());
    t[8..12].copy_from_slice(&page_count.to_be_bytes());
    let crc = trailer_crc(pgno, t);
    t[12..16].copy_from_slice(&crc.to_be_bytes());
}

impl OffJournal {
    /// A new OFF journal; `embed` selects metadata embedding (OFF_OPT).
    pub fn new(sync: Synchronous, embed: bool) -> Self {
        OffJournal {
            sync,
            embed,
            st: Mutex::default(),
        }
    }

    /// With embedding, page 1 stops being written at every commit, so the
    /// clean-close flag must be cleared (durably) before the first page.
    fn mark_session(&self, st: &mut OffState, db: &DbFile, committed: &Header) -> Result<()> {
        if !self.embed || st.session_marked {
            return Ok(());
        }
        let mut p1 = vec![0u8; db.page_size];
        db.read_page(1, &mut p1)?;
        let mut h = *committed;
        h.clean_close = false;
        h.write_to(&mut p1);
        seal_page1(&mut p1);
        db.write_page(1, &p1)?;
        if self.sync != Synchronous::Off {
            db.file().sync_data()?;
        }
        st.session_marked = true;
        Ok(())
    }
}

impl Journal for OffJournal {
    fn mode(&self) -> JournalMode {
        JournalMode::Off
    }

    fn node_format(&self) -> Arc<dyn NodeFormat> {
        if self.embed {
            Arc::new(SlottedMetaFormat)
        } else {
            Arc::new(SlottedFormat)
        }
    }

    fn recover(&self, ctx: &RecoverCtx<'_>) -> Result<Recovery> {
        if !self.embed {
            return Ok(Recovery::default());
        }
        let mut probe = [0u8; HEADER_LEN];
        let n = ctx.file.read_at(&mut probe, 0)?;
        let Ok(h) = Header::read_from(&probe[..n], &ctx.path.display().to_string()) else {
            return Ok(Recovery::default());
        };
        if h.clean_close {
            return Ok(Recovery::default());
        }
        let ps = h.page_size as usize;
        let pages = u32::try_from(ctx.file.len()? / ps as u64).unwrap_or(u32::MAX);
        let mut best: Option<(u64, u32)> = None;
        let mut buf = vec![0u8; ps];
        for pgno in 2..=pages {
            ctx.file
                .read_exact_at(&mut buf, (pgno as u64 - 1) * ps as u64, pgno)?;
            if buf[0] != LEAF && buf[0] != INTERIOR {
                continue;
            }
            if let Some(t) = read_trailer(pgno, &buf) {
                if best.is_none_or(|b| t.0 > b.0) {
                    best = Some(t);
                }
            }
        }
        let mut st = self.st.lock();
        st.session_marked = true;
        match best {
            Some((fcc, pc)) if fcc > h.fcc => {
                // OFF promises nothing after a crash; keep the file
                // openable even if the last commit's pages did not land.
                let pc = pc.clamp(h.page_count.min(pages), pages);
                st.recovered = Some((fcc, pc));
                Ok(Recovery {
                    recovered: true,
                    pages: 0,
                    detail: format!("embedded FCC {fcc}, page count {pc}"),
                })
            }
            _ => Ok(Recovery::default()),
        }
    }

    fn fixup_header(&self, header: &mut Header) -> Result<()> {
        if let Some((fcc, pc)) = self.st.lock().recovered {
            header.fcc = fcc;
            header.page_count = pc;
        }
        Ok(())
    }

    fn spill(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let mut st = self.st.lock();
        self.mark_session(&mut st, db, set.prev_header)?;
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

    fn prepare_commit(
        &self,
        tid: u64,
        prev_header: &Header,
        header: &Header,
        pages: &mut [PageImage],
        _free: &[Pgno],
    ) -> Result<()> {
        if !self.embed || header_must_be_written(prev_header, header, false) {
            return Ok(());
        }
        for img in pages.iter_mut().rev().filter(|p| p.pgno != 1) {
            if img.data[0] == LEAF || img.data[0] == INTERIOR {
                // In place when the image is not shared (it was just encoded).
                let data = Arc::make_mut(&mut img.data);
                write_trailer(img.pgno, data, tid, header.page_count);
                if header.page_checksums {
                    slotted::seal_tree(img.pgno, data);
                }
                self.st.lock().commit_page = Some((tid, img.pgno));
                break;
            }
        }
        Ok(())
    }

    fn commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let mut st = self.st.lock();
        self.mark_session(&mut st, db, set.prev_header)?;
        let embedded = self.embed
            && st.commit_page.is_some_and(|(t, _)| t == set.tid)
            && !header_must_be_written(set.prev_header, set.header, false);
        for p in set.pages {
            if p.pgno == 1 && embedded {
                continue;
            }
            db.write_page(p.pgno, &p.data)?;
        }
        if set.new_page_count < set.orig_page_count {
            db.file()
                .set_len(set.new_page_count as u64 * db.page_size as u64)?;
        }
        if self.sync != Synchronous::Off {
            db.file().sync_data()?;
        }
        reset_map(&mut st.undo);
        st.spilled = false;
        st.commit_page = None;
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
        reset_map(&mut st.undo);
        st.spilled = false;
        st.commit_page = None;
        Ok(())
    }

    fn close(&self, _db: &DbFile) -> Result<()> {
        Ok(())
    }
}
