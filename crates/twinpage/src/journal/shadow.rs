//! DASH database shadowing (Won et al., PVLDB 2019): `shadow` and
//! `shadow-x`.
//!
//! Beside `<db>` lives `<db>-shadow`, a full copy of the database as it was
//! before the last committed transaction. The two differ only on the pages
//! that transaction wrote; the database file lists them in its Global Page
//! List (GPL), kept in the unused tail of its header page. A transaction T
//! is written to the shadow, never to the database:
//!
//! 1. **Version Update**: the shadow's page 1 becomes T's header page with
//!    version FCC(T) + 1 and GPL = pages(T); fdatasync (`shadow-x` skips
//!    this sync, paper §6).
//! 2. **Aggregate Update**: pages(T), plus the pages of the database's GPL
//!    (the previous transaction's) copied from the database; fdatasync. The
//!    shadow now holds the state after T.
//! 3. **Atomic Exchange**: rename shadow → tmp, db → shadow, tmp → db, with
//!    no sync: it relies on renames becoming durable in issue order.
//! 4. **Version Reset**: version 0 in the new shadow (the old database);
//!    fdatasync. This is the commit point.
//!
//! Recovery runs before the database is opened ([`Journal::pre_open`]):
//! it finishes an interrupted exchange, then reads the version pair
//! ⟨db, shadow⟩ and undoes or redoes. `docs/modes/shadow.md` has the byte
//! layout, the decision table and why ⟨n+1, n⟩ is undone, not redone.

use super::{CommitSet, Journal, JournalMode, PreOpenCtx, RecoverCtx, Recovery};
use crate::base::header::seal_page1_zero_from;
use crate::base::Synchronous;
use crate::base::{Error, Pgno, Result};
use crate::base::{Header, HEADER_LEN};
use crate::storage::{parent_dir, with_suffix, OpenFlags, Vfs, VfsFile};
use crate::storage::{wait_os_lock, DbFile};
use parking_lot::{Mutex, RwLock};
use std::collections::HashSet;
use std::mem::take;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Suffix of the shadow file.
pub const SHADOW_SUFFIX: &str = "-shadow";
/// Suffix of the temporary name used by the Atomic Exchange.
pub const TMP_SUFFIX: &str = "-shadow-tmp";
/// Suffix of the lock file: it is never renamed, so it keeps a second
/// process out while the exchange moves the database name between inodes.
pub const LOCK_SUFFIX: &str = "-lock";

/// Offset of the DASH fields in page 1 (right after the header proper).
pub const TAIL_OFFSET: usize = HEADER_LEN;
/// Magic of the DASH fields.
pub const TAIL_MAGIC: &[u8; 4] = b"DASH";
/// Size of the fixed DASH fields; the GPL entries follow them.
pub const TAIL_FIELDS: usize = 24;
const GPL_OFFSET: usize = TAIL_OFFSET + TAIL_FIELDS;
/// GPL count meaning "every page may differ" (a transaction larger than
/// the GPL, or a spill whose final page set is not known yet).
pub const GPL_ALL: u32 = u32::MAX;
/// Flag of a reset tail: the shadow is identical to the database.
pub const FLAG_IDENTICAL: u8 = 1;
/// Flag of a reset tail written by `shadow-x`: unsynced Version Updates
/// and Aggregate Updates may follow it until the Header Reset at close.
pub const FLAG_EXCLUSIVE: u8 = 2;

/// How many page numbers the GPL of a `page_size` header page holds.
pub fn gpl_capacity(page_size: usize) -> usize {
    page_size.saturating_sub(GPL_OFFSET) / 4
}

/// The shadow file of database `db`.
pub fn shadow_path(db: &Path) -> PathBuf {
    with_suffix(db, SHADOW_SUFFIX)
}

fn tmp_path(db: &Path) -> PathBuf {
    with_suffix(db, TMP_SUFFIX)
}

fn lock_path(db: &Path) -> PathBuf {
    with_suffix(db, LOCK_SUFFIX)
}

/// The pages on which the shadow may differ from the database.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Gpl {
    All,
    Pages(Vec<Pgno>),
}

impl Gpl {
    /// Append pages 2..=`page_count` that are listed (page 1 is handled
    /// apart) to `out`, in order.
    fn data_pages_into(&self, page_count: u32, out: &mut Vec<Pgno>) {
        match self {
            Gpl::All => out.extend(2..=page_count),
            Gpl::Pages(v) => out.extend(v.iter().copied().filter(|&p| p >= 2 && p <= page_count)),
        }
    }

    /// Pages 2..=`page_count` that are listed (page 1 is handled apart).
    fn data_pages(&self, page_count: u32) -> Vec<Pgno> {
        let mut v = Vec::new();
        self.data_pages_into(page_count, &mut v);
        v
    }

    fn union(&self, other: &Gpl) -> Gpl {
        match (self, other) {
            (Gpl::Pages(a), Gpl::Pages(b)) => {
                let mut v: Vec<Pgno> = a.iter().chain(b).copied().collect();
                v.sort_unstable();
                v.dedup();
                Gpl::Pages(v)
            }
            _ => Gpl::All,
        }
    }
}

/// A GPL to write: every page, or these pages (sorted, distinct).
#[derive(Debug, Clone, Copy)]
enum GplRef<'a> {
    All,
    Pages(&'a [Pgno]),
}

/// The empty GPL (a reset, or a database equal to its shadow).
const NO_PAGES: GplRef<'static> = GplRef::Pages(&[]);

/// The DASH fields of a header page.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tail {
    /// All zero: DASH never wrote this page.
    Zero,
    /// Not zero but not valid (torn write, damage).
    Invalid,
    /// Checksum holds.
    Valid { version: u64, flags: u8, gpl: Gpl },
}

fn tail_crc(fields: &[u8], entries: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(fields), entries)
}

/// The fixed DASH fields, as written at `TAIL_OFFSET`, for a GPL of
/// `count` entries encoded as `entries` (empty for `GPL_ALL`).
fn tail_fields(version: u64, flags: u8, count: u32, entries: &[u8]) -> [u8; TAIL_FIELDS] {
    let mut t = [0u8; TAIL_FIELDS];
    t[0..4].copy_from_slice(TAIL_MAGIC);
    t[4..12].copy_from_slice(&version.to_be_bytes());
    t[12] = flags;
    t[16..20].copy_from_slice(&count.to_be_bytes());
    let crc = tail_crc(&t[..20], entries);
    t[20..24].copy_from_slice(&crc.to_be_bytes());
    t
}

/// Version Reset and Header Reset: version 0, empty GPL, `flags`. 24
/// bytes inside the first sector, so the write cannot tear.
fn reset_bytes(flags: u8) -> [u8; TAIL_FIELDS] {
    tail_fields(0, flags, 0, &[])
}

/// Replace the DASH fields of header page `page`, encoding the GPL in
/// place. A list the page cannot hold is written as `GPL_ALL` (callers
/// check the capacity first; this keeps a bad size from panicking).
fn put_tail(page: &mut [u8], version: u64, flags: u8, gpl: GplRef<'_>) {
    page[TAIL_OFFSET..].fill(0);
    let pages = match gpl {
        GplRef::Pages(v) if v.len() <= gpl_capacity(page.len()) => Some(v),
        _ => None,
    };
    let (count, n) = match pages {
        Some(v) => {
            for (i, p) in v.iter().enumerate() {
                let at = GPL_OFFSET + 4 * i;
                page[at..at + 4].copy_from_slice(&p.to_be_bytes());
            }
            (v.len() as u32, v.len())
        }
        None => (GPL_ALL, 0),
    };
    let t = tail_fields(version, flags, count, &page[GPL_OFFSET..GPL_OFFSET + 4 * n]);
    page[TAIL_OFFSET..GPL_OFFSET].copy_from_slice(&t);
    // Zero past the GPL (cleared above): those bytes are not summed.
    seal_page1_zero_from(page, GPL_OFFSET + 4 * n);
}

/// Whether header page `page` holds intact DASH fields (registry hook for
/// the integrity check).
pub fn page1_fields_intact(page: &[u8]) -> bool {
    matches!(parse_tail(page), Tail::Valid { .. })
}

/// Parse the DASH fields of a whole header page.
fn parse_tail(page: &[u8]) -> Tail {
    let Some(f) = page.get(TAIL_OFFSET..GPL_OFFSET) else {
        return Tail::Invalid;
    };
    if f.iter().all(|&b| b == 0) {
        return Tail::Zero;
    }
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    if &f[0..4] != TAIL_MAGIC || f[13..16] != [0, 0, 0] {
        return Tail::Invalid;
    }
    let version = u64::from_be_bytes(f[4..12].try_into().expect("8 bytes"));
    let flags = f[12];
    let count = be32(&f[16..20]);
    let crc = be32(&f[20..24]);
    let entries: &[u8] = if count == GPL_ALL {
        &[]
    } else if count as usize > gpl_capacity(page.len()) {
        return Tail::Invalid;
    } else {
        &page[GPL_OFFSET..GPL_OFFSET + 4 * count as usize]
    };
    if crc != tail_crc(&f[..20], entries) {
        return Tail::Invalid;
    }
    let gpl = if count == GPL_ALL {
        Gpl::All
    } else {
        let pages: Vec<Pgno> = entries.chunks_exact(4).map(be32).collect();
        // Sorted, distinct, no page 0: anything else is damage.
        if pages.first() == Some(&0) || pages.windows(2).any(|w| w[0] >= w[1]) {
            return Tail::Invalid;
        }
        Gpl::Pages(pages)
    };
    Tail::Valid {
        version,
        flags,
        gpl,
    }
}

/// What the header page of one file says.
struct Side {
    header: Option<Header>,
    tail: Tail,
    /// The whole header page (empty without a valid header).
    page1: Vec<u8>,
}

fn read_side(f: &Arc<dyn VfsFile>) -> Result<Side> {
    let name = f.path().display().to_string();
    let mut first = [0u8; 512];
    let n = f.read_at(&mut first, 0)?;
    let Ok(h) = Header::read_from(&first[..n], &name) else {
        let zero = first[..n.min(GPL_OFFSET)].iter().all(|&b| b == 0);
        return Ok(Side {
            header: None,
            tail: if zero { Tail::Zero } else { Tail::Invalid },
            page1: Vec::new(),
        });
    };
    // The page size was validated by Header::read_from (512..=65536).
    let mut page1 = vec![0u8; h.page_size as usize];
    let m = f.read_at(&mut page1, 0)?;
    let tail = if m < page1.len() {
        Tail::Invalid
    } else {
        parse_tail(&page1)
    };
    Ok(Side {
        header: Some(h),
        tail,
        page1,
    })
}

/// What a file is, from its header page alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Version = FCC + 1: the database, or a shadow in the middle of a
    /// transaction (Version Update done).
    Versioned(u64),
    /// Version 0: complete and stable (after a Version Reset, a clone or a
    /// reconstruction), unless `FLAG_EXCLUSIVE` is set.
    Reset { fcc: u64, flags: u8 },
    /// No DASH fields, or fields that do not match the header: a new
    /// database or one a non-shadow mode committed to.
    Untracked,
    /// Damaged fields (with the header's FCC if the header is intact), or
    /// a damaged header: a torn or failed write.
    Damaged(Option<u64>),
}

impl Role {
    fn of(s: &Side) -> Role {
        match (&s.header, &s.tail) {
            (
                Some(h),
                Tail::Valid {
                    version: 0, flags, ..
                },
            ) => Role::Reset {
                fcc: h.fcc,
                flags: *flags,
            },
            (Some(h), Tail::Valid { version, .. }) if h.fcc.checked_add(1) == Some(*version) => {
                Role::Versioned(h.fcc)
            }
            (Some(_), Tail::Valid { .. }) | (Some(_), Tail::Zero) => Role::Untracked,
            (None, Tail::Zero) => Role::Untracked,
            (h, _) => Role::Damaged(h.map(|h| h.fcc)),
        }
    }

    /// The paper's version number (0 for reset, "-" otherwise).
    fn show(self) -> String {
        match self {
            Role::Versioned(f) => (f + 1).to_string(),
            Role::Reset { .. } => "0".into(),
            Role::Untracked => "none".into(),
            Role::Damaged(_) => "damaged".into(),
        }
    }
}

fn complete_reset(flags: u8) -> bool {
    flags & FLAG_EXCLUSIVE == 0
}

/// What recovery does with a pair of header pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// ⟨n, 0⟩: nothing to do.
    Consistent,
    /// ⟨n, n+1⟩: the shadow may hold part of an aggregate; copy the pages
    /// of both GPLs back from the database.
    Undo,
    /// The file named shadow is the complete one: swap the names.
    Exchange,
    /// The database is complete but the shadow cannot be trusted: rebuild
    /// it by cloning (at the next write). `crash` tells whether a crash
    /// caused it (as opposed to a new database or a mode switch).
    Clone { crash: bool },
    /// Neither file is known to be complete.
    Fail,
}

/// The recovery decision for the file named db (`a`) and the file named
/// shadow (`b`). Principle: the commit protocol writes only to the file it
/// believes is the shadow, and only when the other file is complete; the
/// on-disk names may lag one exchange behind that belief (renames are not
/// synced), so the table is symmetric where the paper's is not.
fn decide(a: Role, b: Role) -> Action {
    use Role::*;
    match (a, b) {
        (Versioned(fa), Versioned(fb)) if Some(fb) == fa.checked_add(1) => Action::Undo,
        // ⟨n+1, n⟩: after the exchange, before the Version Reset. The paper
        // redoes the reset; but the same pair arises when the renames of the
        // previous commit were lost and the next transaction's Version
        // Update reached the old database, and then only the file named
        // shadow is complete. Undoing is right in both cases (the
        // transaction was not acknowledged: its reset was not durable).
        (Versioned(fa), Versioned(fb)) if Some(fa) == fb.checked_add(1) => Action::Exchange,
        (Versioned(_), Reset { flags, .. }) if complete_reset(flags) => Action::Consistent,
        // shadow-x did not close cleanly: the shadow may hold unsynced writes.
        (Versioned(_), Reset { .. }) => Action::Clone { crash: true },
        (Versioned(_), Untracked) => Action::Clone { crash: false },
        (Versioned(_), _) => Action::Clone { crash: true },
        // ⟨0, n+1⟩: the Version Reset is durable, the exchange is not.
        (Reset { .. }, Versioned(_)) => Action::Exchange,
        (Reset { fcc: fa, flags: x }, Reset { fcc: fb, flags: y }) => {
            match (complete_reset(x), complete_reset(y)) {
                (true, true) if fb > fa => Action::Exchange,
                (true, _) => Action::Clone { crash: true },
                (false, true) => Action::Exchange,
                (false, false) => Action::Fail,
            }
        }
        (Reset { flags, .. }, _) if complete_reset(flags) => Action::Clone { crash: true },
        (Reset { .. }, _) => Action::Fail,
        // A torn header page on the file named db that was being written as
        // the shadow (its header, if readable, is one transaction ahead)
        // before an exchange that did not reach the disk.
        (Damaged(Some(fa)), Versioned(fb)) if Some(fa) == fb.checked_add(1) => Action::Exchange,
        // Intact header, damaged fields: an in-place write of the fields
        // (clone step 1, a Version Reset) failed; the contents are complete.
        (Damaged(Some(_)), _) => Action::Clone { crash: true },
        (Damaged(None), Versioned(_)) => Action::Exchange,
        (Damaged(None), Reset { flags, .. }) if complete_reset(flags) => Action::Exchange,
        (Damaged(None), _) => Action::Fail,
        // DASH never wrote this database state (new, or another mode ran).
        (Untracked, _) => Action::Clone { crash: false },
    }
}

/// The state of the shadow after recovery.
enum ShadowState {
    /// No shadow file.
    Missing,
    /// The shadow must be rebuilt by cloning before the next write.
    NeedsClone,
    /// The shadow is the state before the database's last transaction.
    Ready { identical: bool, db_gpl: Gpl },
}

struct Settled {
    recovery: Recovery,
    state: ShadowState,
}

fn syncs(sync: Synchronous) -> bool {
    sync != Synchronous::Off
}

/// The Atomic Exchange of database `db`, shadow `sp` and temporary name
/// `tp`.
fn exchange(vfs: &Arc<dyn Vfs>, db: &Path, sp: &Path, tp: &Path) -> Result<()> {
    vfs.rename(sp, tp)?;
    vfs.rename(db, sp)?;
    vfs.rename(tp, db)
}

/// Copy `pages` (none of them page 1) from `from` to `to`, in runs of
/// consecutive pages.
fn copy_pages(
    from: &Arc<dyn VfsFile>,
    to: &Arc<dyn VfsFile>,
    pages: &[Pgno],
    page_size: usize,
) -> Result<()> {
    const RUN_BYTES: usize = 256 << 10;
    let max_run = (RUN_BYTES / page_size).max(1);
    let mut buf = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let mut j = i + 1;
        while j < pages.len() && j - i < max_run && pages[j] == pages[j - 1] + 1 {
            j += 1;
        }
        buf.resize((j - i) * page_size, 0);
        let off = (pages[i] as u64 - 1) * page_size as u64;
        from.read_exact_at(&mut buf, off, pages[i])?;
        to.write_at(&buf, off)?;
        i = j;
    }
    Ok(())
}

/// Partial reconstruction (paper §5.3): make the shadow identical to the
/// database by copying the pages of `gpl` from it, then reset the
/// shadow's version. Rerunning it after a crash is safe: until the last
/// write the shadow keeps its version.
fn reconstruct(
    db: &Arc<dyn VfsFile>,
    db_side: &Side,
    shadow: &Arc<dyn VfsFile>,
    gpl: &Gpl,
    sync: bool,
) -> Result<u64> {
    let h = db_side
        .header
        .ok_or_else(|| Error::corrupt(db.path().display().to_string(), 1, "no header"))?;
    let ps = h.page_size as usize;
    let pages = gpl.data_pages(h.page_count);
    copy_pages(db, shadow, &pages, ps)?;
    let want = h.page_count as u64 * ps as u64;
    if shadow.len()? != want {
        shadow.set_len(want)?;
    }
    if sync {
        shadow.sync_data()?;
    }
    let mut p1 = db_side.page1.clone();
    put_tail(&mut p1, 0, FLAG_IDENTICAL, NO_PAGES);
    shadow.write_at(&p1, 0)?;
    if sync {
        shadow.sync_data()?;
    }
    Ok(pages.len() as u64 + 1)
}

/// Crash recovery on the file names and the version pair, shared by the
/// shadow modes (`repair`: undo into the shadow) and by other modes
/// opening a database a shadow mode left (the shadow is then dropped, so
/// an undo is just a decision).
fn settle(vfs: &Arc<dyn Vfs>, db: &Path, sync: Synchronous, repair: bool) -> Result<Settled> {
    let (sp, tp) = (shadow_path(db), tmp_path(db));
    let name = db.display().to_string();
    let mut rec = Recovery::default();
    let mut notes = Vec::new();
    // Step 1: a crash inside the Atomic Exchange leaves tmp and one of the
    // two names; the aggregate was durable before the first rename, so
    // finish the exchange.
    match (vfs.exists(db)?, vfs.exists(&sp)?, vfs.exists(&tp)?) {
        (false, false, false) | (true, false, false) => {
            return Ok(Settled {
                recovery: rec,
                state: ShadowState::Missing,
            })
        }
        (true, true, false) => {}
        (true, false, true) => {
            vfs.rename(db, &sp)?;
            vfs.rename(&tp, db)?;
            notes.push("finished the Atomic Exchange (renames 2 and 3)".to_string());
        }
        (false, true, true) => {
            vfs.rename(&tp, db)?;
            notes.push("finished the Atomic Exchange (rename 3)".to_string());
        }
        (true, true, true) => {
            return Err(Error::corrupt(
                name,
                0,
                "database, shadow and shadow-tmp files all exist; DASH never leaves three",
            ))
        }
        (false, _, _) => {
            return Err(Error::corrupt(
                name,
                0,
                "a DASH shadow file exists but the database file does not",
            ))
        }
    }
    // Recovery renames are not synced either: if they are lost, the next
    // open finds the same (or the mirrored) pair, and the table is
    // symmetric.
    rec.recovered = !notes.is_empty();
    // Step 2: the version pair. An exchange moves to a pair that is decided
    // without another exchange, so two rounds suffice; three is a bound.
    for _ in 0..3 {
        let a_file = vfs.open(db, OpenFlags::EXISTING)?;
        let b_file = vfs.open(&sp, OpenFlags::EXISTING)?;
        let a = read_side(&a_file)?;
        let b = read_side(&b_file)?;
        let (ra, rb) = (Role::of(&a), Role::of(&b));
        let pair = format!("<{}, {}>", ra.show(), rb.show());
        let db_gpl = match &a.tail {
            Tail::Valid { gpl, .. } => gpl.clone(),
            _ => Gpl::All,
        };
        let state = match decide(ra, rb) {
            Action::Consistent => {
                let identical =
                    matches!(rb, Role::Reset { flags, .. } if flags & FLAG_IDENTICAL != 0);
                ShadowState::Ready { identical, db_gpl }
            }
            Action::Undo => {
                rec.recovered = true;
                if repair {
                    let shadow_gpl = match &b.tail {
                        Tail::Valid { gpl, .. } => gpl.clone(),
                        _ => Gpl::All,
                    };
                    let union = db_gpl.union(&shadow_gpl);
                    let n = reconstruct(&a_file, &a, &b_file, &union, syncs(sync))?;
                    rec.pages += n;
                    notes.push(format!(
                        "{pair}: undone by partial reconstruction of {n} pages"
                    ));
                    ShadowState::Ready {
                        identical: true,
                        db_gpl,
                    }
                } else {
                    notes.push(format!("{pair}: transaction undone"));
                    ShadowState::NeedsClone
                }
            }
            Action::Exchange => {
                rec.recovered = true;
                notes.push(format!("{pair}: exchanged the names"));
                drop((a_file, b_file));
                exchange(vfs, db, &sp, &tp)?;
                continue;
            }
            Action::Clone { crash } => {
                if crash {
                    rec.recovered = true;
                    notes.push(format!(
                        "{pair}: shadow untrusted, rebuilt at the next write"
                    ));
                }
                if let (true, Role::Damaged(Some(fcc))) = (repair, ra) {
                    // Intact database, damaged DASH fields: write now what
                    // the clone's first step writes (the current version),
                    // so that the integrity check finds intact fields. A
                    // read-only open leaves them to the next writer.
                    let t = tail_fields(fcc + 1, 0, 0, &[]);
                    match a_file.write_at(&t, TAIL_OFFSET as u64) {
                        Ok(()) if syncs(sync) => a_file.sync_data()?,
                        Ok(()) | Err(Error::ReadOnly(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                ShadowState::NeedsClone
            }
            Action::Fail => {
                return Err(Error::corrupt(
                    name,
                    1,
                    format!(
                        "DASH state {pair}: neither the database nor the shadow is known complete"
                    ),
                ))
            }
        };
        rec.detail = notes.join("; ");
        return Ok(Settled {
            recovery: rec,
            state,
        });
    }
    Err(Error::corrupt(
        name,
        1,
        "DASH recovery did not settle after three exchanges",
    ))
}

fn acquire_lock(ctx: &PreOpenCtx<'_>) -> Result<Arc<dyn VfsFile>> {
    let f = ctx.vfs.open(&lock_path(ctx.path), OpenFlags::CREATE)?;
    wait_os_lock(&f, ctx.path, ctx.busy_timeout)?;
    Ok(f)
}

/// Called by `Pager::open` for every mode other than the shadow modes:
/// if a shadow mode left files behind, recover the database from them
/// (finishing or undoing the last transaction) and remove the shadow. The
/// returned lock guard must be held until the database file is locked.
pub fn leave_shadow_mode(
    ctx: &PreOpenCtx<'_>,
    sync: Synchronous,
) -> Result<(Recovery, Option<Arc<dyn VfsFile>>)> {
    if !ctx.vfs.exists(&lock_path(ctx.path))? {
        return Ok((Recovery::default(), None));
    }
    let lock = acquire_lock(ctx)?;
    let sp = shadow_path(ctx.path);
    if !ctx.vfs.exists(&sp)? && !ctx.vfs.exists(&tmp_path(ctx.path))? {
        return Ok((Recovery::default(), Some(lock)));
    }
    let settled = settle(ctx.vfs, ctx.path, sync, false)?;
    if ctx.vfs.exists(&sp)? {
        ctx.vfs.remove(&sp)?;
        // Durably, or a later shadow-mode session could find a stale
        // shadow beside a database another mode changed.
        if syncs(sync) {
            ctx.vfs.sync_dir(&parent_dir(ctx.path))?;
        }
    }
    Ok((settled.recovery, Some(lock)))
}

/// The transaction being written into the shadow.
#[derive(Default)]
struct Txn {
    /// Pages written into the shadow (a rollback copies them back), in
    /// write order and possibly repeated: sorted and deduplicated when
    /// read.
    touched: Vec<Pgno>,
    /// Pages spilled before commit (they belong to the GPL), possibly
    /// repeated.
    spilled: Vec<Pgno>,
    /// The Version Update is written (and synced unless `shadow-x` may
    /// skip it).
    vu_done: bool,
    /// The first rename was attempted: the names may be mid-exchange.
    exchanging: bool,
}

impl Txn {
    /// Forget the transaction, keeping its vectors for the next one.
    fn clear(&mut self) {
        reuse(&mut self.touched);
        reuse(&mut self.spilled);
        self.vu_done = false;
        self.exchanging = false;
    }
}

/// Page lists longer than this (a bulk transaction's) are not kept.
const REUSE_PAGES: usize = 4096;

/// Empty `v` for reuse, dropping a bulk transaction's large buffer.
fn reuse(v: &mut Vec<Pgno>) {
    if v.capacity() > REUSE_PAGES {
        *v = Vec::new();
    } else {
        v.clear();
    }
}

fn sort_dedup(v: &mut Vec<Pgno>) {
    v.sort_unstable();
    v.dedup();
}

/// Commit bookkeeping kept between transactions: a steady state of small
/// commits reuses these vectors instead of building sets and page copies
/// each time.
#[derive(Default)]
struct Scratch {
    /// `<db>-shadow` and `<db>-shadow-tmp`, worked out once.
    names: Option<(PathBuf, PathBuf)>,
    /// Pages the commit writes, spills included (sorted, distinct).
    written: Vec<Pgno>,
    /// The commit's GPL: `written` and the pages its failed spills left
    /// (sorted, distinct). Becomes `State::db_gpl`, whose old vector
    /// comes back here.
    listed: Vec<Pgno>,
    /// Pages copied from the database into the shadow.
    old: Vec<Pgno>,
    /// Page 1 as the Version Update writes it.
    page1: Vec<u8>,
    /// An emptied transaction for the next one.
    txn: Txn,
}

struct State {
    /// `<db>-lock`, held for the session.
    lock: Option<Arc<dyn VfsFile>>,
    busy_timeout: Duration,
    /// The open (and OS-locked) shadow file.
    shadow: Option<Arc<dyn VfsFile>>,
    /// The shadow on disk is the state before the database's last
    /// transaction (or identical to the database).
    ready: bool,
    /// The shadow is identical to the database.
    identical: bool,
    /// Pages where the shadow differs from the database (the last
    /// transaction's, exact in memory even when the on-disk GPL says all).
    db_gpl: Gpl,
    /// The shadow's durable tail is a reset with `FLAG_EXCLUSIVE`: a
    /// `shadow-x` Version Update may skip its sync.
    excl_durable: bool,
    /// A reset with `FLAG_EXCLUSIVE` was written: Header Reset at close.
    excl_written: bool,
    txn: Option<Txn>,
    scratch: Scratch,
}

/// Spilled pages, readable without the commit state's lock (the pager
/// reads pages while a commit holds it).
#[derive(Default)]
struct SpillView {
    tid: u64,
    pages: HashSet<Pgno>,
    shadow: Option<Arc<dyn VfsFile>>,
}

impl SpillView {
    /// No spilled pages (the set's table is kept unless it is large).
    fn reset(&mut self) {
        self.tid = 0;
        if self.pages.capacity() > REUSE_PAGES {
            self.pages = HashSet::new();
        } else {
            self.pages.clear();
        }
        self.shadow = None;
    }
}

/// The DASH scheme: `shadow`, or `shadow-x` when `exclusive`.
pub struct DashJournal {
    exclusive: bool,
    sync: Synchronous,
    st: Mutex<State>,
    spill: RwLock<SpillView>,
}

impl DashJournal {
    /// A DASH journal; `exclusive` selects SHADOW-X.
    pub fn new(exclusive: bool, sync: Synchronous) -> Self {
        DashJournal {
            exclusive,
            sync,
            st: Mutex::new(State {
                lock: None,
                busy_timeout: Duration::from_secs(5),
                shadow: None,
                ready: false,
                identical: false,
                db_gpl: Gpl::All,
                excl_durable: false,
                excl_written: false,
                txn: None,
                scratch: Scratch::default(),
            }),
            spill: RwLock::default(),
        }
    }

    fn syncs(&self) -> bool {
        syncs(self.sync)
    }

    fn open_shadow(&self, st: &State, db: &DbFile, flags: OpenFlags) -> Result<Arc<dyn VfsFile>> {
        let sp = shadow_path(&db.path);
        let f = db.vfs.open(&sp, flags)?;
        // The name `<db>` will point at this inode after the next exchange;
        // lock it as the pager locked the database file.
        wait_os_lock(&f, &sp, st.busy_timeout)?;
        Ok(f)
    }

    /// Make sure a usable shadow is open before the first write.
    fn ensure_shadow(&self, st: &mut State, db: &DbFile) -> Result<Arc<dyn VfsFile>> {
        if st.ready {
            if st.shadow.is_none() {
                st.shadow = Some(self.open_shadow(st, db, OpenFlags::EXISTING)?);
            }
            if let Some(f) = &st.shadow {
                return Ok(f.clone());
            }
        }
        self.clone_shadow(st, db)
    }

    /// Create the shadow by cloning the database, crash-safely (paper
    /// §5.3): the database gets a current version, the shadow the next
    /// version with GPL = all (so a crash here is undone by a full copy),
    /// then every page is copied and the shadow's version reset.
    fn clone_shadow(&self, st: &mut State, db: &DbFile) -> Result<Arc<dyn VfsFile>> {
        st.ready = false;
        let ps = db.page_size;
        let dbf = db.file();
        let mut p1 = vec![0u8; ps];
        dbf.read_exact_at(&mut p1, 0, 1)?;
        let h = Header::read_from(&p1, &db.path.display().to_string())?;
        let current = h.fcc + 1;
        if !matches!(parse_tail(&p1), Tail::Valid { version, .. } if version == current) {
            let t = tail_fields(current, 0, 0, &[]);
            dbf.write_at(&t, TAIL_OFFSET as u64)?;
            if self.syncs() {
                dbf.sync_data()?;
            }
            p1[TAIL_OFFSET..TAIL_OFFSET + t.len()].copy_from_slice(&t);
        }
        let created = !db.vfs.exists(&shadow_path(&db.path))?;
        let f = match st.shadow.take() {
            Some(f) => f,
            None => self.open_shadow(st, db, OpenFlags::CREATE)?,
        };
        st.shadow = Some(f.clone());
        let mut s1 = p1.clone();
        let mut hs = h;
        hs.fcc += 1;
        hs.write_to(&mut s1);
        put_tail(&mut s1, hs.fcc + 1, 0, GplRef::All);
        f.write_at(&s1, 0)?;
        if self.syncs() {
            f.sync_data()?;
            if created {
                db.vfs.sync_dir(&parent_dir(&db.path))?;
            }
        }
        let pages: Vec<Pgno> = (2..=h.page_count).collect();
        copy_pages(&dbf, &f, &pages, ps)?;
        let want = h.page_count as u64 * ps as u64;
        if f.len()? != want {
            f.set_len(want)?;
        }
        if self.syncs() {
            f.sync_data()?;
        }
        put_tail(&mut p1, 0, FLAG_IDENTICAL, NO_PAGES);
        f.write_at(&p1, 0)?;
        if self.syncs() {
            f.sync_data()?;
        }
        st.ready = true;
        st.identical = true;
        st.db_gpl = Gpl::Pages(Vec::new());
        st.excl_durable = false;
        Ok(f)
    }

    /// Version Update for a spill: the final page set is unknown, so the
    /// GPL says all pages; the commit rewrites it exactly.
    fn spill_inner(
        &self,
        st: &mut State,
        txn: &mut Txn,
        sc: &mut Scratch,
        shadow: &Arc<dyn VfsFile>,
        set: &CommitSet<'_>,
        ps: usize,
    ) -> Result<()> {
        if !txn.vu_done {
            let p1 = &mut sc.page1;
            p1.clear();
            p1.extend_from_slice(&set.originals.original(1)?);
            let mut h = *set.header;
            h.fcc = set.tid;
            h.write_to(p1);
            put_tail(p1, set.tid + 1, 0, GplRef::All);
            // Recorded before the write: a failed write may leave part of it.
            txn.touched.push(1);
            shadow.write_at(p1, 0)?;
            if self.syncs() && !(self.exclusive && st.excl_durable) {
                shadow.sync_data()?;
            }
            txn.vu_done = true;
        }
        for p in set.pages {
            let off = (p.pgno as u64 - 1) * ps as u64;
            txn.touched.push(p.pgno);
            if p.pgno == 1 {
                let img = &mut sc.page1;
                img.clear();
                img.extend_from_slice(&p.data);
                put_tail(img, set.tid + 1, 0, GplRef::All);
                shadow.write_at(img, off)?;
            } else {
                shadow.write_at(&p.data, off)?;
            }
        }
        // Only a spill that completed counts: the pager keeps the pages of a
        // failed one dirty and writes them again.
        txn.spilled.extend(set.pages.iter().map(|p| p.pgno));
        let mut v = self.spill.write();
        v.tid = set.tid;
        v.pages.extend(set.pages.iter().map(|p| p.pgno));
        v.shadow = Some(shadow.clone());
        Ok(())
    }

    fn commit_inner(
        &self,
        st: &mut State,
        txn: &mut Txn,
        sc: &mut Scratch,
        shadow: &Arc<dyn VfsFile>,
        db: &DbFile,
        set: &CommitSet<'_>,
    ) -> Result<()> {
        let ps = db.page_size;
        let off = |p: Pgno| (p as u64 - 1) * ps as u64;
        let first = set
            .pages
            .first()
            .filter(|p| p.pgno == 1)
            .ok_or_else(|| Error::InvalidArgument("commit set without page 1".into()))?;
        // Sorted, distinct page lists in kept vectors: the order the sets
        // of sorted page numbers gave, without building sets per commit.
        let written = &mut sc.written;
        written.clear();
        written.extend(set.pages.iter().map(|p| p.pgno));
        written.extend_from_slice(&txn.spilled);
        sort_dedup(written);
        sort_dedup(&mut txn.touched);
        // Pages a failed spill left in the shadow: restored below, and
        // listed so that an undo after a crash covers them too.
        sc.old.clear();
        let stray = txn.touched.iter().copied();
        sc.old
            .extend(stray.filter(|p| written.binary_search(p).is_err()));
        sc.listed.clear();
        sc.listed.extend_from_slice(written);
        sc.listed.extend_from_slice(&txn.touched);
        sort_dedup(&mut sc.listed);
        let gpl = if sc.listed.len() <= gpl_capacity(ps) {
            GplRef::Pages(&sc.listed)
        } else {
            GplRef::All
        };

        // Version Update: the shadow's header page announces the new
        // version and lists the pages this transaction writes.
        let p1 = &mut sc.page1;
        p1.clear();
        p1.extend_from_slice(&first.data);
        put_tail(p1, set.tid + 1, 0, gpl);
        // Pages are recorded as touched before they are written: a failed
        // write may have changed part of the page.
        txn.touched.push(1);
        shadow.write_at(p1, 0)?;
        if !txn.vu_done {
            if self.syncs() && !(self.exclusive && st.excl_durable) {
                shadow.sync_data()?;
            }
            txn.vu_done = true;
        }

        // Aggregate Update: this transaction's pages, plus the previous
        // transaction's (on which the shadow still holds older images).
        for p in &set.pages[1..] {
            txn.touched.push(p.pgno);
            shadow.write_at(&p.data, off(p.pgno))?;
        }
        let keep = set.orig_page_count.min(set.new_page_count);
        if !st.identical {
            st.db_gpl.data_pages_into(keep, &mut sc.old);
        }
        sort_dedup(&mut sc.old);
        for &q in &sc.old {
            if q >= 2 && q <= keep && written.binary_search(&q).is_err() {
                txn.touched.push(q);
                shadow.write_at(&set.originals.original(q)?, off(q))?;
            }
        }
        let want = set.new_page_count as u64 * ps as u64;
        if shadow.len()? != want {
            shadow.set_len(want)?;
        }
        if self.syncs() {
            shadow.sync_data()?;
        }

        // Atomic Exchange: no sync; renames become durable in order.
        txn.exchanging = true;
        let (sp, tp) = sc
            .names
            .get_or_insert_with(|| (shadow_path(&db.path), tmp_path(&db.path)));
        exchange(&db.vfs, &db.path, sp, tp)?;

        // Version Reset on the new shadow (the old database file).
        let old = db.file();
        let flags = if self.exclusive { FLAG_EXCLUSIVE } else { 0 };
        old.write_at(&reset_bytes(flags), TAIL_OFFSET as u64)?;
        // NORMAL drops this sync in `shadow` (the commit may roll back);
        // `shadow-x` needs it durable before its next unsynced update.
        let synced = self.syncs() && (self.sync >= Synchronous::Full || self.exclusive);
        if synced {
            old.sync_data()?;
        }
        db.set_file(shadow.clone());
        st.shadow = Some(old);
        // The listed pages become the database's GPL; the vector of the
        // previous one is kept for the next commit's list.
        let spare = match std::mem::replace(&mut st.db_gpl, Gpl::All) {
            Gpl::Pages(v) => v,
            Gpl::All => Vec::new(),
        };
        st.db_gpl = Gpl::Pages(std::mem::replace(&mut sc.listed, spare));
        st.identical = false;
        st.excl_durable = self.exclusive && synced;
        st.excl_written |= self.exclusive;
        Ok(())
    }

    /// Undo a spill or a failed commit before the exchange: make the shadow
    /// identical to the database again.
    fn restore(&self, st: &State, db: &DbFile, txn: &Txn, orig_page_count: u32) -> Result<()> {
        let Some(shadow) = st.shadow.clone() else {
            return Ok(());
        };
        let dbf = db.file();
        let side = read_side(&dbf)?;
        let mut pages = txn.touched.clone();
        if !st.identical {
            st.db_gpl.data_pages_into(orig_page_count, &mut pages);
        }
        sort_dedup(&mut pages);
        let gpl = Gpl::Pages(pages);
        let gpl = if side.header.is_some_and(|h| h.page_count == orig_page_count) {
            gpl
        } else {
            return Err(Error::corrupt(
                db.path.display().to_string(),
                1,
                "database header changed during a DASH transaction",
            ));
        };
        reconstruct(&dbf, &side, &shadow, &gpl, self.syncs())?;
        Ok(())
    }
}

impl Journal for DashJournal {
    fn mode(&self) -> JournalMode {
        if self.exclusive {
            JournalMode::ShadowX
        } else {
            JournalMode::Shadow
        }
    }

    fn pre_open(&self, ctx: &PreOpenCtx<'_>) -> Result<Recovery> {
        let lock = acquire_lock(ctx)?;
        let settled = settle(ctx.vfs, ctx.path, self.sync, true)?;
        let mut st = self.st.lock();
        st.lock = Some(lock);
        st.busy_timeout = ctx.busy_timeout;
        match settled.state {
            ShadowState::Ready { identical, db_gpl } => {
                st.ready = true;
                st.identical = identical;
                st.db_gpl = db_gpl;
            }
            ShadowState::Missing | ShadowState::NeedsClone => st.ready = false,
        }
        Ok(settled.recovery)
    }

    fn recover(&self, _ctx: &RecoverCtx<'_>) -> Result<Recovery> {
        // Everything happened in pre_open, before the file was opened.
        Ok(Recovery::default())
    }

    fn spill(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let mut st = self.st.lock();
        let shadow = self.ensure_shadow(&mut st, db)?;
        let mut txn = st.txn.take().unwrap_or_else(|| take(&mut st.scratch.txn));
        let mut sc = take(&mut st.scratch);
        let r = self.spill_inner(&mut st, &mut txn, &mut sc, &shadow, set, db.page_size);
        st.scratch = sc;
        st.txn = Some(txn);
        r
    }

    fn commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let mut st = self.st.lock();
        let shadow = self.ensure_shadow(&mut st, db)?;
        // Carries the spills of this transaction. (Should a failed
        // transaction ever not be rolled back through the journal, its
        // stray pages carry over and this aggregate restores them.)
        let mut txn = st.txn.take().unwrap_or_else(|| take(&mut st.scratch.txn));
        let mut sc = take(&mut st.scratch);
        let r = self.commit_inner(&mut st, &mut txn, &mut sc, &shadow, db, set);
        if r.is_err() {
            // A failed write may have left a partial page in either file;
            // settle it with the crash-tested recovery at the next open
            // rather than an in-place undo (found by short-write injection).
            txn.exchanging = true;
            st.txn = Some(txn);
        } else {
            self.spill.write().reset();
            txn.clear();
            sc.txn = txn;
        }
        st.scratch = sc;
        r
    }

    fn rollback(&self, db: &DbFile, orig_page_count: u32) -> Result<()> {
        let mut st = self.st.lock();
        self.spill.write().reset();
        let Some(mut txn) = st.txn.take() else {
            return Ok(());
        };
        if txn.exchanging {
            // The names may be mid-exchange; recovery at the next open
            // settles them.
            st.ready = false;
            return Err(Error::Poisoned(
                "a DASH commit failed part-way; reopen the database to recover".into(),
            ));
        }
        let untouched = txn.touched.is_empty();
        let r = if untouched {
            Ok(())
        } else {
            self.restore(&st, db, &txn, orig_page_count)
        };
        txn.clear();
        st.scratch.txn = txn;
        if untouched {
            return Ok(());
        }
        match r {
            Ok(()) => {
                st.identical = true;
                st.excl_durable = false;
                Ok(())
            }
            Err(e) => {
                st.ready = false;
                Err(e)
            }
        }
    }

    fn close(&self, db: &DbFile) -> Result<()> {
        let _ = db;
        let mut st = self.st.lock();
        if self.exclusive && st.ready && st.txn.is_none() && st.excl_written {
            if let Some(f) = &st.shadow {
                // Header Reset (paper §6): the next open trusts ⟨n, 0⟩ again.
                let flags = if st.identical { FLAG_IDENTICAL } else { 0 };
                f.write_at(&reset_bytes(flags), TAIL_OFFSET as u64)?;
                if self.syncs() {
                    f.sync_data()?;
                }
            }
            st.excl_written = false;
            st.excl_durable = false;
        }
        if let Some(f) = st.shadow.take() {
            f.unlock()?;
        }
        if let Some(l) = st.lock.take() {
            l.unlock()?;
        }
        Ok(())
    }

    fn read_page(&self, db: &DbFile, pgno: Pgno, snapshot: u64, buf: &mut [u8]) -> Result<()> {
        {
            // The writer reads its spilled pages back from the shadow.
            let v = self.spill.read();
            if snapshot == v.tid && v.pages.contains(&pgno) {
                if let Some(f) = &v.shadow {
                    let off = (pgno as u64 - 1) * db.page_size as u64;
                    return f.read_exact_at(buf, off, pgno);
                }
            }
        }
        db.read_page(pgno, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_round_trips_and_rejects_damage() {
        let mut page = vec![0u8; 512];
        assert_eq!(parse_tail(&page), Tail::Zero);
        let gpl = Gpl::Pages(vec![1, 2, 9]);
        put_tail(&mut page, 7, FLAG_EXCLUSIVE, GplRef::Pages(&[1, 2, 9]));
        assert_eq!(
            parse_tail(&page),
            Tail::Valid {
                version: 7,
                flags: FLAG_EXCLUSIVE,
                gpl: gpl.clone()
            }
        );
        for i in TAIL_OFFSET..GPL_OFFSET + 12 {
            let mut p = page.clone();
            p[i] ^= 0x40;
            assert_eq!(parse_tail(&p), Tail::Invalid, "byte {i}");
        }
        put_tail(&mut page, 3, 0, GplRef::All);
        assert!(matches!(
            parse_tail(&page),
            Tail::Valid { gpl: Gpl::All, .. }
        ));
        // A count beyond the capacity is damage, not an allocation.
        let mut p = page.clone();
        let count_at = TAIL_OFFSET + 16;
        p[count_at..count_at + 4].copy_from_slice(&(gpl_capacity(512) as u32 + 1).to_be_bytes());
        assert_eq!(parse_tail(&p), Tail::Invalid);
        assert_eq!(gpl_capacity(512), 107);
        assert_eq!(gpl_capacity(4096), 1003);
    }

    #[test]
    fn tail_layout_matches_the_format() {
        // docs/modes/shadow.md, byte by byte: magic, version, flags and 3
        // zero bytes, count, crc32c of bytes 60..80 and the entries, then
        // the entries; zeros after them.
        let mut page = vec![0xAAu8; 512];
        put_tail(&mut page, 0x0102, 3, GplRef::Pages(&[1, 0x0a0b]));
        let entries = [0, 0, 0, 1, 0, 0, 0x0a, 0x0b];
        let mut want = b"DASH".to_vec();
        want.extend_from_slice(&0x0102u64.to_be_bytes());
        want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 2]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&want), &entries);
        want.extend_from_slice(&crc.to_be_bytes());
        want.extend_from_slice(&entries);
        let end = TAIL_OFFSET + want.len();
        assert_eq!(&page[TAIL_OFFSET..end], &want[..]);
        assert!(page[end..].iter().all(|&b| b == 0));
        // A list the page cannot hold is written as "all pages".
        let many: Vec<Pgno> = (1..=200).collect();
        put_tail(&mut page, 5, 0, GplRef::Pages(&many));
        assert!(matches!(
            parse_tail(&page),
            Tail::Valid {
                version: 5,
                gpl: Gpl::All,
                ..
            }
        ));
        let mut want = b"DASH".to_vec();
        want.extend_from_slice(&0u64.to_be_bytes());
        want.extend_from_slice(&[FLAG_IDENTICAL, 0, 0, 0, 0, 0, 0, 0]);
        let crc = crc32c::crc32c(&want);
        want.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(&reset_bytes(FLAG_IDENTICAL)[..], &want[..]);
    }

    #[test]
    fn reset_fits_in_one_sector() {
        assert_eq!(reset_bytes(0).len(), TAIL_FIELDS);
        const { assert!(TAIL_OFFSET + TAIL_FIELDS <= 512) };
    }

    #[test]
    fn decision_table() {
        use Role::*;
        let r = |flags| Reset { fcc: 4, flags };
        assert_eq!(decide(Versioned(5), r(0)), Action::Consistent);
        assert_eq!(decide(Versioned(5), Versioned(6)), Action::Undo);
        assert_eq!(decide(Versioned(6), Versioned(5)), Action::Exchange);
        assert_eq!(decide(r(0), Versioned(6)), Action::Exchange);
        assert_eq!(
            decide(Versioned(5), r(FLAG_EXCLUSIVE)),
            Action::Clone { crash: true }
        );
        assert_eq!(decide(Untracked, r(0)), Action::Clone { crash: false });
        assert_eq!(decide(Damaged(None), Versioned(3)), Action::Exchange);
        assert_eq!(decide(Damaged(Some(4)), Versioned(3)), Action::Exchange);
        assert_eq!(
            decide(Damaged(Some(5)), Versioned(3)),
            Action::Clone { crash: true }
        );
        assert_eq!(decide(Damaged(None), Damaged(None)), Action::Fail);
        assert_eq!(decide(r(FLAG_EXCLUSIVE), Untracked), Action::Fail);
    }
}
