//! Doubleheader logging (DHL): `dhl-tc` and `dhl-cc` ([DHL], ICDE 2020).
//!
//! Pages are written in place in the [`DhlFormat`]: each page keeps its
//! committed version next to the new one, so there is no log file. A
//! transaction T tags everything it writes with TID T; it commits when the
//! commit mark says so:
//!
//! - **metadata embedding** (`embed=1`, default, [DHL] §IV-B1): the commit
//!   record (FCC = T, transaction size, page count) goes into the slot
//!   header T wrote on the last page of the transaction, and page 1 is not
//!   written at all during a session (only once at its start, to clear the
//!   clean-close flag, and at close);
//! - without embedding, page 1 carries the FCC, as in [DHL] §III-A.
//!
//! **Traditional commit** (`dhl-tc`, §III-C): the other pages, fdatasync,
//! the commit mark, fdatasync. **Counting commit** (`dhl-cc`, §III-D):
//! pages and mark under one fdatasync; the mark also holds the transaction
//! size, the number of pages written with TID T, and recovery counts them.
//!
//! Recovery (after a crash only) scans every page, decides the last
//! committed TID, writes it to page 1, invalidates every newer version
//! (TID := INV) and truncates the file to the committed page count. See
//! `docs/modes/dhl.md` for the rules and why each step is safe.

use super::group::GroupCommit;
use super::{CommitSet, CommitTicket, Journal, JournalMode, PageImage, RecoverCtx, Recovery};
use crate::base::header::{seal_page1_zero_tail, MODE_FIELDS_AT, MODE_FIELDS_LEN};
use crate::base::pgmap::{reset_set, PgnoSet};
use crate::base::Synchronous;
use crate::base::{Error, Pgno, Result};
use crate::base::{Header, HEADER_LEN};
use crate::node::inpage::{CommitRecord, InPageFormat};
use crate::node::{DhlFormat, NodeFormat};
use crate::storage::DbFile;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How a DHL transaction commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitProtocol {
    /// Pages, fdatasync, commit mark, fdatasync (`dhl-tc`).
    Traditional,
    /// Pages and a commit mark with the transaction size, one fdatasync
    /// (`dhl-cc`).
    Counting,
}

/// The DHL recovery scheme, over any in-page format: DHL's own
/// ([`DhlFormat`]) for `dhl-tc` and `dhl-cc`, and IPS's for `ips`, which
/// takes DHL's counting commit over (\[IPS\] §3.2.5).
pub struct DhlJournal<F: InPageFormat = DhlFormat> {
    mode: JournalMode,
    protocol: CommitProtocol,
    sync: Synchronous,
    embed: bool,
    format: F,
    st: Mutex<State>,
    /// An fdatasync failed this session. After a failed fsync Linux may
    /// drop the dirty pages it covered while later syncs succeed, so
    /// neither memory nor a rollback that rewrites pages can know what
    /// storage holds: the handle refuses further work and the next open's
    /// recovery scan decides from storage alone (as PostgreSQL does after
    /// a failed fsync).
    sync_failed: AtomicBool,
    /// Page I/O stripes: a write of page p holds stripe p % 16 exclusively,
    /// a read shares it. Under a multi-writer protocol a reader may miss
    /// the cache on a page a commit is writing; it must see the page before
    /// or after the write, never half of it (its version checksums would
    /// fail).
    io: [RwLock<()>; IO_STRIPES],
    /// Group commit of several writers' counting commits (2VTO): the
    /// leader writes a batch's pages, one page-1 mark for all of it, and
    /// syncs once (docs/modes/dhl.md §3, *Group commit*).
    group: GroupCommit<Batched>,
}

const IO_STRIPES: usize = 16;

/// A counting commit waiting in the group commit queue for the leader to
/// write it.
struct Batched {
    /// Its pages (page 1 excluded; zero-filled extensions included).
    pages: Vec<PageImage>,
    /// The header it commits and the one before it.
    header: Header,
    prev: Header,
    /// Pages that carry its TID and count (|W|).
    size: u32,
    /// Its commit record is embedded in one of `pages` (it was the first
    /// of its batch: every commit before it durable when it is written).
    embedded: bool,
}

#[derive(Default)]
struct State {
    /// Page 1 on storage has the clean-close flag cleared: written at the
    /// first write of the session, or by recovery.
    session_marked: bool,
    /// TID of the transaction in progress, and the pages written (or
    /// being written) with it, spills included. W, the pages the commit
    /// record counts, is this set minus the pages free in the committed
    /// state ([`CommitSet::free`]): at commit their versions are
    /// invalidated, so every counted version lies on a live page.
    tid: u64,
    written: PgnoSet,
    /// The page that carries the embedded commit record of `tid`.
    commit_page: Option<(u64, Pgno)>,
    /// Page 1 was rewritten as the commit mark of `tid`; a rollback must
    /// put this header back.
    restore_page1: Option<Header>,
    /// The header committed before `tid` (what a rollback writes to page
    /// 1 before it destroys the evidence that `tid` ever ran).
    committed: Option<Header>,
    /// Some page of `written` was written twice (spilled, then spilled or
    /// committed again). Its earlier version carries the same TID, so a
    /// count cannot tell it from the final one: the commit then orders
    /// the pages before the mark with an fdatasync, as `dhl-tc` does.
    rewritten: bool,
    /// Page 1's buffer, reused by every commit that writes it.
    page1: Vec<u8>,
}

impl State {
    fn begin(&mut self, tid: u64) {
        if self.tid != tid {
            self.tid = tid;
            reset_set(&mut self.written);
            self.commit_page = None;
            self.restore_page1 = None;
            self.rewritten = false;
            self.committed = None;
        }
    }

    /// Add a page to the written set before it is written.
    fn note(&mut self, pgno: Pgno) {
        if !self.written.insert(pgno) {
            self.rewritten = true;
        }
    }

    /// |W|: the pages written with `tid` that are live in the state it
    /// commits (`free` is sorted).
    fn counted(&self, extra: impl Iterator<Item = Pgno>, free: &[Pgno]) -> usize {
        // `extra` holds distinct pages (a commit's page set).
        let live = |p: &Pgno| free.binary_search(p).is_err();
        let noted = self.written.iter().filter(|p| live(p)).count();
        noted
            + extra
                .filter(|p| !self.written.contains(p) && live(p))
                .count()
    }
}

/// The DHL fields in page 1, after the header proper.
const TAIL_AT: usize = HEADER_LEN;
const TAIL_LEN: usize = 16;
const TAIL_MAGIC: u8 = 0xD1;
/// The tail of a pending FCC whose predecessor is not FCC − 1 (2VTO skips
/// the TIDs of aborted transactions): 24 bytes, with the predecessor.
const TAIL_MAGIC_GAP: u8 = 0xD2;
const TAIL_GAP_LEN: usize = 24;
const TAIL_PENDING: u8 = 1;

/// Page 1's DHL tail: whether the FCC it names still has to be verified by
/// counting (counting commit without embedding writes page 1 in the same
/// sync batch as the pages), with the transaction size, the page count and
/// the FCC to fall back to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tail {
    pending: Option<Pending>,
}

/// A counting commit page 1 names and recovery must verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    /// Pages written with the FCC's TID.
    size: u32,
    /// The page count before it.
    prev_pages: u32,
    /// The FCC before it.
    prev_fcc: u64,
}

/// Write the tail of a page 1 whose FCC is `fcc`.
fn write_tail(p1: &mut [u8], t: Tail, fcc: u64) {
    let gap = t
        .pending
        .is_some_and(|p| p.prev_fcc.checked_add(1) != Some(fcc));
    let b = &mut p1[TAIL_AT..TAIL_AT + TAIL_GAP_LEN];
    b.fill(0);
    b[0] = if gap { TAIL_MAGIC_GAP } else { TAIL_MAGIC };
    if let Some(p) = t.pending {
        b[1] = TAIL_PENDING;
        b[4..8].copy_from_slice(&p.size.to_be_bytes());
        b[8..12].copy_from_slice(&p.prev_pages.to_be_bytes());
    }
    if gap {
        let prev = t.pending.map_or(0, |p| p.prev_fcc);
        b[12..20].copy_from_slice(&prev.to_be_bytes());
        let crc = crc32c::crc32c(&b[..20]);
        b[20..24].copy_from_slice(&crc.to_be_bytes());
    } else {
        let crc = crc32c::crc32c(&b[..12]);
        b[12..16].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Whether header page `p1` holds intact DHL fields: the tail with its
/// checksum, then zeros to the end of the mode's fields (registry hook for
/// the integrity check).
pub(super) fn page1_fields_intact(p1: &[u8]) -> bool {
    let Some(b) = p1.get(TAIL_AT..MODE_FIELDS_AT + MODE_FIELDS_LEN) else {
        return false;
    };
    let be32 = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    match b[0] {
        TAIL_MAGIC => be32(12) == crc32c::crc32c(&b[..12]) && b[TAIL_LEN..].iter().all(|&x| x == 0),
        TAIL_MAGIC_GAP => {
            b.len() >= TAIL_GAP_LEN
                && be32(20) == crc32c::crc32c(&b[..20])
                && b[TAIL_GAP_LEN..].iter().all(|&x| x == 0)
        }
        _ => false,
    }
}

/// The tail of page 1 `p1`, whose FCC is `fcc`.
fn read_tail(p1: &[u8], fcc: u64) -> Tail {
    if p1.len() < TAIL_AT + TAIL_GAP_LEN || !page1_fields_intact(p1) {
        // No tail (a file created by another mode), or a damaged one.
        return Tail::default();
    }
    let b = &p1[TAIL_AT..TAIL_AT + TAIL_GAP_LEN];
    if b[1] & TAIL_PENDING == 0 {
        return Tail::default();
    }
    let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let prev_fcc = if b[0] == TAIL_MAGIC_GAP {
        u64::from_be_bytes([b[12], b[13], b[14], b[15], b[16], b[17], b[18], b[19]])
    } else {
        fcc.saturating_sub(1)
    };
    Tail {
        pending: Some(Pending {
            size: u32_at(4),
            prev_pages: u32_at(8),
            prev_fcc,
        }),
    }
}

/// Whether the header changed in a way that only page 1 can record: a
/// clean close, or any field other than those a session keeps elsewhere
/// (FCC and page count: commit record; free list: memory).
pub(super) fn header_must_be_written(
    prev: &Header,
    new: &Header,
    volatile_free_list: bool,
) -> bool {
    let strip = |h: &Header| {
        let mut h = *h;
        h.fcc = 0;
        h.page_count = 0;
        h.clean_close = false;
        h.journal_mode = 0;
        if volatile_free_list {
            h.freelist_head = 0;
            h.freelist_count = 0;
        }
        h
    };
    new.clean_close || strip(prev) != strip(new)
}

impl DhlJournal<DhlFormat> {
    /// A DHL journal (`dhl-tc` or `dhl-cc`).
    pub fn new(protocol: CommitProtocol, sync: Synchronous, embed: bool) -> Self {
        let mode = match protocol {
            CommitProtocol::Traditional => JournalMode::DhlTc,
            CommitProtocol::Counting => JournalMode::DhlCc,
        };
        DhlJournal::with_format(mode, protocol, sync, embed, DhlFormat)
    }
}

impl<F: InPageFormat> DhlJournal<F> {
    /// The journal of `mode` over the in-page `format`.
    pub fn with_format(
        mode: JournalMode,
        protocol: CommitProtocol,
        sync: Synchronous,
        embed: bool,
        format: F,
    ) -> Self {
        DhlJournal {
            mode,
            protocol,
            sync,
            embed,
            format,
            st: Mutex::default(),
            sync_failed: AtomicBool::new(false),
            io: Default::default(),
            group: GroupCommit::new(),
        }
    }

    fn write_page(&self, db: &DbFile, pgno: Pgno, data: &[u8]) -> Result<()> {
        let _g = self.io[pgno as usize % IO_STRIPES].write();
        db.write_page(pgno, data)
    }

    fn sync(&self, db: &DbFile) -> Result<()> {
        if self.sync != Synchronous::Off {
            if let Err(e) = db.file().sync_data() {
                self.sync_failed.store(true, Ordering::SeqCst);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Write a batch of counting commits and make it durable (the group
    /// commit's flush, run by the leader without any journal lock). Every
    /// commit before the batch is durable (G2). The pages of all its
    /// commits, then, unless the batch is one commit with an embedded
    /// record, page 1 as the mark of the whole batch: FCC = the last
    /// commit, pending, counting the versions of every TID above the FCC
    /// before the batch (§3, *Group commit*); one fdatasync.
    fn flush_batch(&self, db: &DbFile, batch: &[Batched]) -> Result<bool> {
        let r = (|| {
            self.check_sync_failed()?;
            for b in batch {
                for p in &b.pages {
                    self.write_page(db, p.pgno, &p.data)?;
                }
            }
            let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
                return Ok(false);
            };
            if batch.len() > 1 || !first.embedded {
                let tail = Tail {
                    pending: Some(Pending {
                        size: batch.iter().map(|b| b.size).sum(),
                        prev_pages: first.prev.page_count,
                        prev_fcc: first.prev.fcc,
                    }),
                };
                let p1 = self.page1(db.page_size, &last.header, tail);
                self.write_page(db, 1, &p1)?;
            }
            self.sync(db)?;
            Ok(self.sync != Synchronous::Off)
        })();
        if r.is_err() {
            // Whatever part of the batch reached storage, recovery decides
            // (the same reasoning as a failed fdatasync).
            self.sync_failed.store(true, Ordering::SeqCst);
        }
        r
    }

    /// Refuse to touch storage after a failed sync (see `sync_failed`).
    fn check_sync_failed(&self) -> Result<()> {
        if self.sync_failed.load(Ordering::SeqCst) {
            return Err(Error::Poisoned(
                "an fdatasync of the database failed; reopen the database to recover".into(),
            ));
        }
        Ok(())
    }

    /// Page 1 as this journal writes it: during a session the free-list
    /// fields are 0 (the list is in memory and its trunks may be reused).
    fn page1(&self, ps: usize, h: &Header, tail: Tail) -> Vec<u8> {
        let mut p = vec![0u8; ps];
        self.page1_into(&mut p, h, tail);
        p
    }

    /// [`DhlJournal::page1`] into `p`, which is zero past the mode's
    /// fields (reused: IPS writes page 1 at every commit, and this writes
    /// nothing past them).
    fn page1_into(&self, p: &mut [u8], h: &Header, tail: Tail) {
        let mut h = *h;
        h.journal_mode = self.mode().code();
        if !h.clean_close {
            h.freelist_head = 0;
            h.freelist_count = 0;
        }
        let fields_end = (MODE_FIELDS_AT + MODE_FIELDS_LEN).min(p.len());
        p[..fields_end].fill(0);
        h.write_to(p);
        write_tail(p, tail, h.fcc);
        // Header and tail only: the rest of the page is the zeros above.
        seal_page1_zero_tail(p);
    }

    /// Before the first page of a session is written, clear the
    /// clean-close flag durably: an open that finds it set skips the
    /// recovery scan, so no page may carry a TID above page 1's FCC then.
    fn mark_session(&self, st: &mut State, db: &DbFile, committed: &Header) -> Result<()> {
        if st.session_marked {
            return Ok(());
        }
        let mut h = *committed;
        h.clean_close = false;
        self.write_page(db, 1, &self.page1(db.page_size, &h, Tail::default()))?;
        self.sync(db)?;
        st.session_marked = true;
        Ok(())
    }

    /// Decide the last committed transaction from a scan. Returns (FCC,
    /// page count). The page count may exceed the file only when the FCC
    /// was proven here by counting its pages: the zero-filled free pages
    /// that extended the file are not counted and may be lost, and the
    /// caller extends the file over them.
    fn decide(
        &self,
        h: &Header,
        tail: Tail,
        scan: &ScanResult,
        file_pages: u32,
    ) -> Result<(u64, u32)> {
        let count = |t: u64| scan.count.get(&t).copied().unwrap_or(0);
        let top = scan.top;
        // Page 1 first. A pending FCC L (counting commit without
        // embedding, or the mark of a group commit's batch) is committed if
        // a later TID exists (the next batch was written only after this
        // one's sync: G2) or if the versions of every TID in (F0, L], F0 the
        // FCC before it, number S.
        let (mut fcc, mut pc) = (h.fcc, h.page_count);
        let mut counted = false;
        if let Some(p) = tail.pending {
            if top <= h.fcc {
                let range: u64 = scan
                    .count
                    .iter()
                    .filter(|(&t, _)| t > p.prev_fcc && t <= h.fcc)
                    .map(|(_, &n)| n)
                    .sum();
                if range == p.size as u64 {
                    counted = true;
                } else {
                    fcc = p.prev_fcc;
                    pc = p.prev_pages;
                }
            }
        }
        // Then the TIDs above it, newest first. Above page 1's FCC lie the
        // batches written since page 1 last reached storage: batches of one
        // embedded commit, every one durable but the last, and the last
        // batch (maybe in flight), whose first commit alone may carry a
        // record. So TIDs without a record at the top belong to the last
        // batch and are not committed (its mark never reached storage); the
        // newest record is committed if all its pages are there; if not, it
        // was the first of the last batch, and the record below it is
        // durable (it must be complete). Anything else is damage: a record
        // missing or incomplete below that point.
        if top > fcc {
            counted = false;
            let mut tids: Vec<u64> = scan
                .count
                .keys()
                .chain(scan.records.keys())
                .copied()
                .filter(|&t| t > fcc)
                .collect();
            tids.sort_unstable_by(|a, b| b.cmp(a));
            tids.dedup();
            let mut first_incomplete: Option<u64> = None;
            for t in tids {
                match (scan.records.get(&t), first_incomplete) {
                    (Some(r), _) if count(t) == r.txn_size as u64 => {
                        fcc = t;
                        pc = r.page_count;
                        counted = true;
                        break;
                    }
                    (Some(_), None) => first_incomplete = Some(t),
                    (None, None) => {}
                    // Without durability every reordering is possible:
                    // take what is complete.
                    _ if self.sync == Synchronous::Off => {}
                    (r, Some(newer)) => {
                        return Err(Error::corrupt(
                            "database",
                            0,
                            format!(
                                "transaction {t} is below the unfinished transaction {newer} \
                                 but its commit record is {}",
                                if r.is_some() { "incomplete" } else { "missing" }
                            ),
                        ))
                    }
                }
            }
        }
        if self.sync == Synchronous::Off {
            pc = pc.min(file_pages);
        }
        if pc < 2 || (pc > file_pages && !counted) {
            return Err(Error::corrupt(
                "database",
                0,
                format!("committed page count {pc} does not match a file of {file_pages} pages"),
            ));
        }
        Ok((fcc, pc))
    }
}

/// What the recovery scan found.
#[derive(Default)]
struct ScanResult {
    /// Pages with a valid version of each TID.
    count: HashMap<u64, u64>,
    /// Commit records by TID.
    records: HashMap<u64, CommitRecord>,
    /// Highest valid TID.
    top: u64,
    /// Highest TID on each page (valid or not), to find what to
    /// invalidate; `u64::MAX` marks a page with a torn version.
    page_top: Vec<u64>,
}

impl<F: InPageFormat> Journal for DhlJournal<F> {
    fn mode(&self) -> JournalMode {
        self.mode
    }

    fn writes_pager_page1(&self, _prev: &Header, _header: &Header) -> bool {
        // Page 1 is the commit mark, written from `page1_into` (header and
        // tail); a commit with an embedded record does not write it.
        false
    }

    fn node_format(&self) -> Arc<dyn NodeFormat> {
        Arc::new(self.format.clone())
    }

    fn recover(&self, ctx: &RecoverCtx<'_>) -> Result<Recovery> {
        let file = ctx.file;
        let mut probe = [0u8; TAIL_AT + TAIL_GAP_LEN];
        let n = file.read_at(&mut probe, 0)?;
        let name = ctx.path.display().to_string();
        let Ok(h) = Header::read_from(&probe[..n], &name) else {
            // A new file, or a damaged header the pager reports.
            return Ok(Recovery::default());
        };
        if h.clean_close {
            // Nothing was written after the clean close: no scan.
            return Ok(Recovery::default());
        }
        let started = std::time::Instant::now();
        let tail = read_tail(&probe[..n], h.fcc);
        let ps = h.page_size as usize;
        let len = file.len()?;
        let file_pages = u32::try_from(len / ps as u64).unwrap_or(u32::MAX);
        // Scan in chunks; every page is parsed independently.
        let mut scan = ScanResult {
            page_top: vec![0; file_pages as usize + 1],
            ..Default::default()
        };
        let chunk = (256 * 1024 / ps).max(1) as u32;
        let mut buf = vec![0u8; chunk as usize * ps];
        let mut pg = 2u32;
        while pg <= file_pages {
            let k = chunk.min(file_pages - pg + 1);
            let bytes = &mut buf[..k as usize * ps];
            file.read_exact_at(bytes, (pg as u64 - 1) * ps as u64, pg)?;
            for i in 0..k {
                let pgno = pg + i;
                let page = &bytes[i as usize * ps..(i as usize + 1) * ps];
                let s = self.format.scan(pgno, page);
                for &t in &s.tids {
                    *scan.count.entry(t).or_insert(0) += 1;
                    scan.top = scan.top.max(t);
                }
                for r in s.records {
                    scan.records.insert(r.tid, r);
                }
                scan.page_top[pgno as usize] = if s.broken { u64::MAX } else { s.top };
            }
            pg += k;
        }
        let (fcc, pc) = self.decide(&h, tail, &scan, file_pages)?;
        let want = pc as u64 * ps as u64;
        // A file shorter than the decided page count (only after a count
        // proved the FCC): the pages past its end are free in the decided
        // state (every page it uses was counted or is older), zero-filled
        // pages whose growth was lost. Extend it before page 1 names the
        // decision as verified (the fdatasync below makes the extension
        // durable first), so a rerun never finds page 1 naming a page count
        // the file does not cover.
        let extended = len < want;
        if extended {
            file.set_len(want)?;
        }
        // Record the decision first: a crash below leaves page 1 naming
        // it, and the rerun reaches the same one (it only ever finds fewer
        // versions above it).
        let mut nh = h;
        nh.fcc = fcc;
        nh.page_count = pc;
        nh.clean_close = false;
        file.write_at(&self.page1(ps, &nh, Tail::default()), 0)?;
        if self.sync != Synchronous::Off {
            file.sync_data()?;
        }
        let mut invalidated = 0u64;
        let mut page = vec![0u8; ps];
        for pgno in 2..=pc.min(file_pages) {
            if scan.page_top[pgno as usize] <= fcc {
                continue;
            }
            let off = (pgno as u64 - 1) * ps as u64;
            file.read_exact_at(&mut page, off, pgno)?;
            if self.format.repair(&mut page, pgno, fcc) > 0 {
                file.write_at(&page, off)?;
                invalidated += 1;
            }
        }
        let truncated = len > want;
        if truncated {
            file.set_len(want)?;
        }
        if self.sync != Synchronous::Off {
            file.sync_data()?;
        }
        self.st.lock().session_marked = true;
        let rolled_back = scan.top > fcc;
        Ok(Recovery {
            recovered: invalidated > 0 || truncated || extended || rolled_back,
            pages: invalidated,
            detail: format!(
                "scanned {} pages in {:.1} ms: FCC {fcc} (page 1 said {}), {} page count {pc}, \
                 {invalidated} pages invalidated{}",
                file_pages.saturating_sub(1),
                started.elapsed().as_secs_f64() * 1e3,
                h.fcc,
                if rolled_back {
                    format!("transaction {} rolled back,", scan.top)
                } else {
                    "nothing to roll back,".to_string()
                },
                if truncated {
                    ", file truncated"
                } else if extended {
                    ", file extended"
                } else {
                    ""
                }
            ),
        })
    }

    fn spill(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        self.check_sync_failed()?;
        let mut st = self.st.lock();
        self.mark_session(&mut st, db, set.prev_header)?;
        st.begin(set.tid);
        st.committed = Some(*set.prev_header);
        for p in set.pages.iter().filter(|p| p.pgno != 1) {
            // Into W before the write, so a failure is undone too.
            st.note(p.pgno);
            self.write_page(db, p.pgno, &p.data)?;
        }
        Ok(())
    }

    fn prepare_commit(
        &self,
        tid: u64,
        prev_header: &Header,
        header: &Header,
        pages: &mut [PageImage],
        free: &[Pgno],
    ) -> Result<()> {
        // A commit record names no predecessor: it is embedded only when
        // the predecessor is TID − 1 (2VTO skips aborted TIDs; after a gap
        // page 1 is the mark, with the predecessor in its tail).
        if !self.embed
            || header_must_be_written(prev_header, header, true)
            || prev_header.fcc.checked_add(1) != Some(tid)
            || !self.group.idle()
        {
            // Nor when commits are queued or being flushed: a record names
            // one transaction, and only the first of a batch may count
            // alone (§3, *Group commit*).
            return Ok(());
        }
        let mut st = self.st.lock();
        st.begin(tid);
        let size = st.counted(pages.iter().map(|p| p.pgno).filter(|&p| p != 1), free);
        let rec = CommitRecord {
            tid,
            txn_size: size as u32,
            page_count: header.page_count,
        };
        // The last live tree page of the transaction carries the record.
        for img in pages
            .iter_mut()
            .rev()
            .filter(|p| p.pgno != 1 && free.binary_search(&p.pgno).is_err())
        {
            // In place when the image is not shared (it was just encoded);
            // `embed_commit` changes nothing on a page it declines.
            if self
                .format
                .embed_commit(img.pgno, Arc::make_mut(&mut img.data), rec)?
            {
                st.commit_page = Some((tid, img.pgno));
                break;
            }
        }
        Ok(())
    }

    fn commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        self.check_sync_failed()?;
        let mut st = self.st.lock();
        self.mark_session(&mut st, db, set.prev_header)?;
        st.begin(set.tid);
        st.committed = Some(*set.prev_header);
        let free = set.free;
        let is_free = |p: Pgno| free.binary_search(&p).is_ok();
        // Pages T spilled and then freed hold T versions on pages that are
        // free in T's state. T + 1 may reuse such a page wholesale, and a
        // torn write there would leave neither T's version nor a valid
        // T + 1 one: recovery would count T short and roll back an
        // acknowledged commit. So their T versions are invalidated before
        // the mark, and W counts live pages only. The invalidation is a
        // second write of the page in T: the commit is ordered, as for
        // any rewritten page.
        let mut doomed: Vec<Pgno> = st.written.iter().copied().filter(|&p| is_free(p)).collect();
        doomed.sort_unstable();
        let body = || set.pages.iter().filter(|p| p.pgno != 1);
        let mut fillers = 0;
        for p in body() {
            // Zero-filled pages that extend the file carry no version and
            // lie beyond the original end (a rollback truncates them).
            if is_free(p.pgno) {
                fillers += 1;
            } else {
                st.note(p.pgno);
            }
        }
        if !doomed.is_empty() {
            st.rewritten = true;
            let tid = set.tid;
            let mut page = vec![0u8; db.page_size];
            for &pgno in &doomed {
                db.read_page(pgno, &mut page)?;
                if self.format.invalidate(&mut page, pgno, &|t| t == tid) > 0 {
                    self.write_page(db, pgno, &page)?;
                }
            }
        }
        let size = st.counted(std::iter::empty(), free);
        let ordered = self.protocol == CommitProtocol::Traditional || st.rewritten;
        let header_mark = header_must_be_written(set.prev_header, set.header, true);
        let commit_page = match st.commit_page {
            Some((t, p)) if t == set.tid && self.embed && !header_mark => Some(p),
            _ => None,
        };
        match commit_page {
            Some(cp) => {
                // Embedded commit record in page `cp`.
                if ordered {
                    for p in body().filter(|p| p.pgno != cp) {
                        self.write_page(db, p.pgno, &p.data)?;
                    }
                    // Order the other pages (and earlier spills and
                    // invalidations) before the mark; a one-page
                    // transaction has nothing to order.
                    if st.written.len() + fillers > 1 {
                        self.sync(db)?;
                    }
                    let Some(last) = body().find(|p| p.pgno == cp) else {
                        return Err(Error::Internal(format!(
                            "commit page {cp} is not in the commit's page set"
                        )));
                    };
                    self.write_page(db, cp, &last.data)?;
                } else {
                    for p in body() {
                        self.write_page(db, p.pgno, &p.data)?;
                    }
                }
                self.sync(db)?;
            }
            None => {
                // Page 1 is the commit mark.
                for p in body() {
                    self.write_page(db, p.pgno, &p.data)?;
                }
                let counting = !ordered && !header_mark;
                let tail = if counting {
                    Tail {
                        pending: Some(Pending {
                            size: size as u32,
                            prev_pages: set.orig_page_count,
                            prev_fcc: set.prev_header.fcc,
                        }),
                    }
                } else {
                    if !st.written.is_empty() || fillers > 0 {
                        self.sync(db)?;
                    }
                    Tail::default()
                };
                st.restore_page1 = Some(*set.prev_header);
                let mut p1 = std::mem::take(&mut st.page1);
                p1.resize(db.page_size, 0);
                self.page1_into(&mut p1, set.header, tail);
                let written = self.write_page(db, 1, &p1);
                st.page1 = p1;
                written?;
                self.sync(db)?;
            }
        }
        reset_set(&mut st.written);
        st.commit_page = None;
        st.restore_page1 = None;
        st.rewritten = false;
        if self.sync != Synchronous::Off {
            self.group.note_single();
        }
        Ok(())
    }

    fn sequence_commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<CommitTicket> {
        self.check_sync_failed()?;
        let mut st = self.st.lock();
        self.mark_session(&mut st, db, set.prev_header)?;
        st.begin(set.tid);
        let free = set.free;
        let counting = self.protocol == CommitProtocol::Counting
            && st.written.is_empty()
            && !header_must_be_written(set.prev_header, set.header, true);
        if !counting {
            // Spilled pages, a traditional commit or a header only page 1
            // can hold: the one-writer sequence, once nothing is in flight.
            drop(st);
            self.group
                .wait_quiet(|batch| self.flush_batch(db, &batch))?;
            self.commit(db, set)?;
            return Ok(CommitTicket::default());
        }
        let body: Vec<PageImage> = set.pages.iter().filter(|p| p.pgno != 1).cloned().collect();
        let size = st.counted(body.iter().map(|p| p.pgno), free) as u32;
        let embedded = self.embed && matches!(st.commit_page, Some((t, _)) if t == set.tid);
        st.commit_page = None;
        st.committed = None;
        let t = self.group.enqueue(Some(Batched {
            pages: body,
            header: *set.header,
            prev: *set.prev_header,
            size,
            embedded,
        }))?;
        Ok(CommitTicket {
            group: Some(t),
            writes: Vec::new(),
        })
    }

    fn finish_commit(&self, db: &DbFile, ticket: &mut CommitTicket) -> Result<()> {
        match ticket.group {
            Some(t) => self
                .group
                .wait_durable(t, |batch| self.flush_batch(db, &batch)),
            None => Ok(()),
        }
    }

    fn rollback(&self, db: &DbFile, orig_page_count: u32) -> Result<()> {
        let mut st = self.st.lock();
        if st.written.is_empty() && st.restore_page1.is_none() {
            return Ok(());
        }
        self.check_sync_failed()?;
        // The aborted TID is reused by the next transaction: every version
        // it left on storage must become invalid first. But those versions
        // are also the evidence that the previous transaction completed
        // (this one started after its sync): a page this one took from the
        // free list may have held a version of the previous one, which a
        // recovery would then count short. So page 1 first records the
        // committed FCC as verified, as recovery does.
        let ps = db.page_size;
        let committed = st.restore_page1.take().or(st.committed);
        if let Some(mut h) = committed {
            h.clean_close = false;
            self.write_page(db, 1, &self.page1(ps, &h, Tail::default()))?;
            self.sync(db)?;
        }
        let file_pages = db.file().len()? / ps as u64;
        let tid = st.tid;
        let mut page = vec![0u8; ps];
        for &pgno in st.written.iter() {
            if pgno > orig_page_count || pgno as u64 > file_pages {
                continue;
            }
            db.read_page(pgno, &mut page)?;
            if self.format.roll_back_page(&mut page, pgno, tid) {
                self.write_page(db, pgno, &page)?;
            }
        }
        if file_pages > orig_page_count as u64 {
            db.file().set_len(orig_page_count as u64 * ps as u64)?;
        }
        self.sync(db)?;
        reset_set(&mut st.written);
        st.commit_page = None;
        st.rewritten = false;
        Ok(())
    }

    fn read_page(&self, db: &DbFile, pgno: Pgno, _snapshot: u64, buf: &mut [u8]) -> Result<()> {
        let _g = self.io[pgno as usize % IO_STRIPES].read();
        db.read_page(pgno, buf)
    }

    fn close(&self, _db: &DbFile) -> Result<()> {
        Ok(())
    }

    fn session_dirty(&self) -> bool {
        // Page 1 says "not clean" (a spill that was rolled back marked it,
        // and its pages may have taken the free-list trunks).
        self.st.lock().session_marked
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        self.group.stats().named().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_roundtrip() {
        let p = vec![0u8; 512];
        assert_eq!(read_tail(&p, 9), Tail::default());
        for prev_fcc in [8, 5] {
            let t = Tail {
                pending: Some(Pending {
                    size: 3,
                    prev_pages: 17,
                    prev_fcc,
                }),
            };
            let mut p = vec![0u8; 512];
            write_tail(&mut p, t, 9);
            assert_eq!(p[TAIL_AT] == TAIL_MAGIC_GAP, prev_fcc != 8);
            assert!(page1_fields_intact(&p));
            assert_eq!(read_tail(&p, 9), t);
            p[TAIL_AT + 5] ^= 1;
            assert_eq!(read_tail(&p, 9), Tail::default(), "damaged tail ignored");
        }
    }
}
