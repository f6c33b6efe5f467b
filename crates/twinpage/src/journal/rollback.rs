//! SQLite's rollback journal: DELETE, TRUNCATE and PERSIST.
//!
//! Before the database file is touched, the original image of every page
//! the transaction overwrites goes to `<db>-journal`, which is synced.
//! Then the database pages are written and synced, and the journal is
//! invalidated: deleted, truncated to zero, or its header zeroed. A journal
//! with a valid header found at open is *hot*: its records are written back
//! and the database truncated to its original size.
//!
//! Journal layout (big-endian), see ARCHITECTURE.md:
//!
//! ```text
//! header, 512 bytes:
//!   0..8   magic "tpjrnl02" ("tpjrnl01": no page-1 prefix, still read)
//!   8..12  page size
//!   12..16 database page count before the transaction
//!   16..24 salt (random per transaction)
//!   24..32 TID of the transaction
//!   32..36 crc32c of bytes 0..32, then (tpjrnl02) bytes 36..40 + L
//!   36..38 L: length of page 1's original prefix kept here (0 or 84)
//!   38..40 0
//!   40..40+L page 1's original bytes 0..L
//! records from offset 512, each page size + 8 bytes:
//!   u32 page number, page image, u32 crc32c(salt, page number, image)
//! ```
//!
//! Records are valid only with the header's salt, so stale records left by
//! an earlier transaction (PERSIST, TRUNCATE interrupted) are never replayed.
//!
//! **Page 1's prefix.** A commit rewrites page 1's header (the FCC, the
//! page count, the free list) and its checksum, bytes 0..84, and nothing
//! else ([`CommitSet::pages`]). When the first batch of a transaction holds
//! page 1 (a commit without a spill before it), its original 84 bytes go
//! into the journal header instead of a record of the whole page (covered
//! by the header's checksum, written and synced with it before the
//! database is touched); playback writes them back over page 1, whose
//! other bytes are the original's. After a spill that journaled a record
//! the header is not written again (a torn rewrite could lose a hot
//! journal), and page 1 is journaled as a record, as before. (A spill that
//! journaled no record, having written only pages past the original end,
//! leaves the header to be written again at the commit: truncation undoes
//! those pages whatever the header holds.)

use super::{CommitSet, Journal, JournalMode, RecoverCtx, Recovery, TestFaults};
use crate::base::header::{MODE_FIELDS_AT, MODE_FIELDS_LEN};
use crate::base::pagesum;
use crate::base::pgmap::{reset_set, PgnoSet};
use crate::base::Synchronous;
use crate::base::{Error, Pgno, Result};
use crate::storage::DbFile;
use crate::storage::{parent_dir, with_suffix, OpenFlags, Vfs, VfsFile};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Magic bytes at the start of a journal header.
pub const JOURNAL_MAGIC: &[u8; 8] = b"tpjrnl02";
/// Magic of the first layout (no page-1 prefix), still played back.
const JOURNAL_MAGIC_V1: &[u8; 8] = b"tpjrnl01";
/// Bytes of page 1 a commit's header rewrite changes: the header, its
/// checksum and the mode's fields ([`MODE_FIELDS_AT`] + [`MODE_FIELDS_LEN`]).
const PAGE1_PREFIX: usize = MODE_FIELDS_AT + MODE_FIELDS_LEN;
/// Where the page-1 prefix's length and bytes sit in the journal header.
const PREFIX_LEN_AT: usize = 36;
const PREFIX_AT: usize = 40;
/// Size of the journal header; records start here.
pub const JOURNAL_HEADER_SIZE: u64 = 512;

/// How the journal is invalidated at commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackKind {
    /// unlink the journal.
    Delete,
    /// ftruncate the journal to zero bytes.
    Truncate,
    /// zero the journal header.
    Persist,
}

/// The rollback-journal scheme.
pub struct RollbackJournal {
    kind: RollbackKind,
    sync: Synchronous,
    faults: TestFaults,
    st: Mutex<State>,
    /// The journal's path, worked out once (the delete mode opens and
    /// removes the file every transaction).
    jpath: OnceLock<PathBuf>,
    /// Its directory, synced after every create (and, at EXTRA, unlink).
    jdir: OnceLock<PathBuf>,
}

/// A record on its way to the journal: the original image, its page
/// number and its checksum (big-endian), written around the image.
type Record = (Arc<[u8]>, [u8; 4], [u8; 4]);

#[derive(Default)]
struct State {
    file: Option<Arc<dyn VfsFile>>,
    /// The current transaction: salt, records written, pages journaled.
    salt: u64,
    records: u64,
    journaled: PgnoSet,
    /// The database file holds pages of the current transaction.
    db_dirty: bool,
    /// Kept between transactions: the journal header being written, and
    /// each record's original image with its page number and checksum
    /// (the records go out by one vectored write, the images uncopied).
    buf: Vec<u8>,
    records_out: Vec<Record>,
}

/// The header's checksum: bytes 0..32 and, in the second layout, the
/// page-1 prefix's length field and bytes (`prefix`: L).
fn header_crc(h: &[u8], prefix: Option<usize>) -> u32 {
    let c = crc32c::crc32c(&h[0..32]);
    match prefix {
        Some(l) => crc32c::crc32c_append(c, &h[PREFIX_LEN_AT..PREFIX_AT + l]),
        None => c,
    }
}

fn record_crc(salt: u64, pgno: Pgno, image: &[u8]) -> u32 {
    crc32c::crc32c_append(record_head(salt, pgno), image)
}

/// A record's checksum before its image: crc32c(salt, page number).
fn record_head(salt: u64, pgno: Pgno) -> u32 {
    let c = crc32c::crc32c_append(0, &salt.to_be_bytes());
    crc32c::crc32c_append(c, &pgno.to_be_bytes())
}

/// A parsed journal header.
struct Header {
    page_size: usize,
    orig_pages: u32,
    salt: u64,
    /// Page 1's original bytes 0..L (L = 0: none).
    page1_prefix: Vec<u8>,
}

fn parse_header(h: &[u8]) -> Option<Header> {
    if h.len() < JOURNAL_HEADER_SIZE as usize {
        return None;
    }
    let prefix = match &h[0..8] {
        m if m == JOURNAL_MAGIC => {
            let l = usize::from(u16::from_be_bytes([h[PREFIX_LEN_AT], h[PREFIX_LEN_AT + 1]]));
            if l != 0 && l != PAGE1_PREFIX {
                return None;
            }
            Some(l)
        }
        m if m == JOURNAL_MAGIC_V1 => None,
        _ => return None,
    };
    let crc = u32::from_be_bytes(h[32..36].try_into().ok()?);
    if crc != header_crc(h, prefix) {
        return None;
    }
    let l = prefix.unwrap_or(0);
    let page_size = u32::from_be_bytes(h[8..12].try_into().ok()?) as usize;
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return None;
    }
    Some(Header {
        page_size,
        orig_pages: u32::from_be_bytes(h[12..16].try_into().ok()?),
        salt: u64::from_be_bytes(h[16..24].try_into().ok()?),
        page1_prefix: h[PREFIX_AT..PREFIX_AT + l].to_vec(),
    })
}

impl RollbackJournal {
    /// A journal of the given kind.
    pub fn new(kind: RollbackKind, sync: Synchronous, faults: TestFaults) -> Self {
        RollbackJournal {
            kind,
            sync,
            faults,
            st: Mutex::default(),
            jpath: OnceLock::new(),
            jdir: OnceLock::new(),
        }
    }

    fn journal_path(&self, db: &Path) -> &Path {
        self.jpath.get_or_init(|| Self::path(db))
    }

    fn journal_dir(&self, db: &Path) -> &Path {
        self.jdir.get_or_init(|| parent_dir(db))
    }

    fn path(db: &Path) -> PathBuf {
        with_suffix(db, "-journal")
    }

    fn syncs(&self) -> bool {
        self.sync != Synchronous::Off
    }

    /// Write the originals of the pages in `set` that are not journaled
    /// yet, then sync the journal: after this the database file may be
    /// overwritten.
    fn journal_originals(&self, st: &mut State, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let ps = db.page_size;
        let mut buf = std::mem::take(&mut st.buf);
        buf.clear();
        let first = st.file.is_none() || st.records == 0 && st.journaled.is_empty();
        let mut created = false;
        if st.file.is_none() {
            let path = self.journal_path(&db.path);
            // Whether the open creates the journal decides only a
            // directory sync: without syncs, no stat call to find out.
            created = self.syncs() && !db.vfs.exists(path)?;
            st.file = Some(db.vfs.open(path, OpenFlags::CREATE)?);
        }
        if first {
            st.salt = crate::storage::random_u64() | 1;
            let mut h = [0u8; JOURNAL_HEADER_SIZE as usize];
            h[0..8].copy_from_slice(JOURNAL_MAGIC);
            h[8..12].copy_from_slice(&(ps as u32).to_be_bytes());
            h[12..16].copy_from_slice(&set.orig_page_count.to_be_bytes());
            h[16..24].copy_from_slice(&st.salt.to_be_bytes());
            h[24..32].copy_from_slice(&set.tid.to_be_bytes());
            // Page 1 (sorted first) changed only in its header, as the pager
            // writes it ([`CommitSet::pages`]): its original prefix here
            // instead of a record.
            let l = match set.pages.first().filter(|p| p.pgno == 1) {
                Some(p1) if set.orig_page_count >= 1 => {
                    let orig = set.originals.original(1)?;
                    if orig.len() != ps || p1.data.len() != ps || ps <= PAGE1_PREFIX {
                        return Err(Error::InvalidArgument(format!(
                            "page 1 images of {} and {} bytes for a {ps}-byte page",
                            orig.len(),
                            p1.data.len()
                        )));
                    }
                    debug_assert!(
                        orig[PAGE1_PREFIX..] == p1.data[PAGE1_PREFIX..],
                        "page 1 changed beyond its header"
                    );
                    h[PREFIX_AT..PREFIX_AT + PAGE1_PREFIX].copy_from_slice(&orig[..PAGE1_PREFIX]);
                    st.journaled.insert(1);
                    PAGE1_PREFIX
                }
                _ => 0,
            };
            h[PREFIX_LEN_AT..PREFIX_LEN_AT + 2].copy_from_slice(&(l as u16).to_be_bytes());
            let crc = header_crc(&h, Some(l));
            h[32..36].copy_from_slice(&crc.to_be_bytes());
            buf.extend_from_slice(&h);
        }
        let start = JOURNAL_HEADER_SIZE + st.records * (ps as u64 + 8);
        let offset = if first { 0 } else { start };
        let mut recs = std::mem::take(&mut st.records_out);
        recs.clear();
        for p in set.pages {
            // Pages past the original end need no undo: rollback truncates.
            if p.pgno > set.orig_page_count || st.journaled.contains(&p.pgno) {
                continue;
            }
            let orig = set.originals.original(p.pgno)?;
            // From the image's own checksum where the pager vouches for it:
            // no pass over the page (ARCHITECTURE.md C6).
            let at = set.originals.verified_sum_at(p.pgno, &orig);
            let crc = pagesum::append_image(record_head(st.salt, p.pgno), p.pgno, &orig, at);
            debug_assert_eq!(
                crc,
                record_crc(st.salt, p.pgno, &orig),
                "record of page {}",
                p.pgno
            );
            recs.push((orig, p.pgno.to_be_bytes(), crc.to_be_bytes()));
            st.journaled.insert(p.pgno);
            st.records += 1;
        }
        let written = self.write_records(st, &buf, &recs, offset);
        st.buf = buf;
        recs.clear();
        st.records_out = recs;
        let Some(file) = written? else {
            return Ok(());
        };
        if self.syncs() && !self.faults.skip_journal_sync {
            file.sync_data()?;
            if created {
                // A new journal's directory entry must be durable before
                // the database is touched, or a crash could lose it.
                db.vfs.sync_dir(self.journal_dir(&db.path))?;
            }
        }
        Ok(())
    }

    /// Write `head` (the journal header, or nothing) and then `recs` at
    /// `offset` of the open journal, by vectored writes from where the
    /// images lie; the journal file, or `None` when there was nothing to
    /// write.
    fn write_records(
        &self,
        st: &State,
        head: &[u8],
        recs: &[Record],
        offset: u64,
    ) -> Result<Option<Arc<dyn VfsFile>>> {
        // Records per write: three buffers each, and the header.
        const PER_WRITE: usize = 21;
        if head.is_empty() && recs.is_empty() {
            return Ok(None);
        }
        let file = st.file.clone().expect("journal opened above");
        let (mut at, mut head, mut rest) = (offset, head, recs);
        let mut parts: [&[u8]; 1 + 3 * PER_WRITE] = [&[]; 1 + 3 * PER_WRITE];
        loop {
            let (chunk, more) = rest.split_at(rest.len().min(PER_WRITE));
            parts[0] = head;
            let mut n = 1;
            for (orig, pgno, crc) in chunk {
                parts[n..n + 3].copy_from_slice(&[&pgno[..], &orig[..], &crc[..]]);
                n += 3;
            }
            file.write_vectored_at(&parts[..n], at)?;
            at += parts[..n].iter().map(|b| b.len() as u64).sum::<u64>();
            (head, rest) = (&[], more);
            if rest.is_empty() {
                return Ok(Some(file));
            }
        }
    }

    /// Invalidate the journal: the transaction is committed (or rolled back).
    /// The transaction's state is forgotten only once that succeeded, so
    /// a failed invalidation at commit is rolled back from the journal.
    fn finish(&self, st: &mut State, vfs: &Arc<dyn Vfs>, db_path: &Path) -> Result<()> {
        if let Some(file) = st.file.clone() {
            match self.kind {
                RollbackKind::Delete => {
                    drop(file);
                    vfs.remove(self.journal_path(db_path))?;
                    st.file = None;
                    if self.sync == Synchronous::Extra {
                        vfs.sync_dir(self.journal_dir(db_path))?;
                    }
                }
                RollbackKind::Truncate => {
                    file.set_len(0)?;
                    if self.sync >= Synchronous::Full {
                        file.sync_data()?;
                    }
                }
                RollbackKind::Persist => {
                    file.write_at(&[0u8; 36], 0)?;
                    if self.sync >= Synchronous::Full {
                        file.sync_data()?;
                    }
                }
            }
        }
        st.records = 0;
        reset_set(&mut st.journaled);
        st.db_dirty = false;
        Ok(())
    }

    /// Write every valid record of the journal back into the database and
    /// restore its size. Returns the number of pages restored, or `None`
    /// if the journal is not hot.
    fn play_back(&self, journal: &Arc<dyn VfsFile>, dbf: &Arc<dyn VfsFile>) -> Result<Option<u64>> {
        let mut h = [0u8; JOURNAL_HEADER_SIZE as usize];
        if journal.read_at(&mut h, 0)? < 36 {
            return Ok(None);
        }
        let Some(hdr) = parse_header(&h) else {
            return Ok(None);
        };
        let ps = hdr.page_size;
        let rec_len = ps + 8;
        let mut rec = vec![0u8; rec_len];
        let mut off = JOURNAL_HEADER_SIZE;
        let mut restored = 0;
        // Page 1's original prefix (its other bytes are the original's,
        // or a record below restores them too).
        if !hdr.page1_prefix.is_empty() && hdr.orig_pages >= 1 {
            dbf.write_at(&hdr.page1_prefix, 0)?;
            restored += 1;
        }
        loop {
            if journal.read_at(&mut rec, off)? < rec_len {
                break;
            }
            let pgno = u32::from_be_bytes(rec[0..4].try_into().expect("4 bytes"));
            let image = &rec[4..4 + ps];
            let crc = u32::from_be_bytes(rec[4 + ps..].try_into().expect("4 bytes"));
            if pgno == 0 || crc != record_crc(hdr.salt, pgno, image) {
                break;
            }
            if pgno <= hdr.orig_pages {
                dbf.write_at(image, (pgno as u64 - 1) * ps as u64)?;
                restored += 1;
            }
            off += rec_len as u64;
        }
        dbf.set_len(hdr.orig_pages as u64 * ps as u64)?;
        if self.syncs() {
            dbf.sync_data()?;
        }
        Ok(Some(restored))
    }
}

impl Journal for RollbackJournal {
    fn sums_originals(&self) -> bool {
        true
    }

    fn mode(&self) -> JournalMode {
        match self.kind {
            RollbackKind::Delete => JournalMode::Delete,
            RollbackKind::Truncate => JournalMode::Truncate,
            RollbackKind::Persist => JournalMode::Persist,
        }
    }

    fn recover(&self, ctx: &RecoverCtx<'_>) -> Result<Recovery> {
        let jpath = Self::path(ctx.path);
        if !ctx.vfs.exists(&jpath)? {
            return Ok(Recovery::default());
        }
        let journal = ctx.vfs.open(&jpath, OpenFlags::EXISTING)?;
        let restored = self.play_back(&journal, ctx.file)?;
        let mut st = self.st.lock();
        // Invalidate it the way this mode does (a journal a crashed
        // session of another rollback mode left behind works the same).
        st.file = Some(journal);
        match self.finish(&mut st, ctx.vfs, ctx.path) {
            // A journal that is not hot needs no invalidation: a read-only
            // open leaves it as it is.
            Err(Error::ReadOnly(_)) if restored.is_none() => st.file = None,
            r => r?,
        }
        Ok(match restored {
            Some(n) => Recovery {
                recovered: true,
                pages: n,
                detail: format!("rolled back hot journal: {n} pages restored"),
            },
            None => Recovery::default(),
        })
    }

    fn spill(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let mut st = self.st.lock();
        self.journal_originals(&mut st, db, set)?;
        st.db_dirty = true;
        for p in set.pages {
            db.write_page(p.pgno, &p.data)?;
        }
        Ok(())
    }

    fn commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let mut st = self.st.lock();
        self.journal_originals(&mut st, db, set)?;
        st.db_dirty = true;
        for p in set.pages {
            db.write_page(p.pgno, &p.data)?;
        }
        if set.new_page_count < set.orig_page_count {
            db.file()
                .set_len(set.new_page_count as u64 * db.page_size as u64)?;
        }
        if self.syncs() {
            db.file().sync_data()?;
        }
        self.finish(&mut st, &db.vfs, &db.path)
    }

    fn rollback(&self, db: &DbFile, _orig_page_count: u32) -> Result<()> {
        let mut st = self.st.lock();
        if !st.db_dirty {
            return self.finish(&mut st, &db.vfs, &db.path);
        }
        // The database file holds pages of the transaction: only the
        // journal can undo them. If it is gone or no longer valid (its
        // invalidation failed half-way), the transaction may be durable
        // and cannot be undone here: fail, so the pager requires a reopen
        // and recovery decides.
        let undone = match st.file.clone() {
            Some(j) => self.play_back(&j, &db.file())?.is_some(),
            None => false,
        };
        if !undone {
            return Err(Error::corrupt(
                Self::path(&db.path).display().to_string(),
                0,
                "journal gone or invalid while the database holds uncommitted pages; reopen to recover",
            ));
        }
        self.finish(&mut st, &db.vfs, &db.path)
    }

    fn close(&self, db: &DbFile) -> Result<()> {
        // A PERSIST/TRUNCATE journal stays on disk between transactions,
        // as in SQLite; only the handle is released.
        let _ = db;
        self.st.lock().file = None;
        Ok(())
    }
}
