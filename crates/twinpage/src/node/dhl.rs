//! The doubleheader-logging (DHL) slotted page (\[DHL\] §III-A, Fig. 2).
//!
//! A page holds two *slot headers*; each is the journal of the other. A
//! writer never touches the committed (visible) header or the bytes it
//! references: it writes its new version into the other header, keeps the
//! cells it shares with the committed version where they are, and puts new
//! cells into space the committed version does not use. Visibility: a
//! header whose TID is above the committed FCC is invisible; of the rest,
//! the higher TID wins.
//!
//! Layout (big-endian), documented byte by byte in `docs/modes/dhl.md`:
//!
//! ```text
//! 0..32    slot header 0          32..64   slot header 1
//!   +0  u8   magic 0xD1 (0: never written)
//!   +1  u8   page type: 0x0D leaf, 0x05 interior
//!   +2  u16  n, the cells of this version
//!   +4  u8   flags; bit 0: this header carries the commit record
//!   +5  u24  bytes of the version's cells in its checksum message
//!            (2 + cell length, per cell; 0 if not recorded)
//!   +8  u64  TID (u64::MAX = INV, invalidated by recovery or rollback)
//!   +16 u32  rightmost child (interior), 0 (leaf)
//!   +20 u32  commit record: transaction size (pages written with TID)
//!   +24 u32  commit record: page count after the commit
//!   +28 u32  crc32c(pgno, bytes +0..+28, each offset and cell of the version)
//! 64..68   page checksum: crc32c(pgno, bytes 0..64, bytes 68..ps), over
//!          both versions and the free space; rewritten with every write
//! 68..     offset rows, 4 bytes each: row i = [u16 offset of cell i in
//!          version 0][u16 offset of cell i in version 1]
//! ...      free space, then cells (slotted-format cell encoding, with
//!          overflowing keys as `node::cell` describes)
//! ```
//!
//! Reads select and verify a version by its own checksum, so a write torn
//! in the new version leaves the committed one readable although the page
//! checksum fails; recovery rewrites such a page. The integrity check
//! tests the page checksum too and names the versions still intact.
//!
//! Non-tree pages (overflow, free-list trunks) end with a 16-byte envelope:
//! `u64 TID`, `u8 0xD5`, 3 zero bytes, `u32 crc32c(pgno, bytes 0..ps-4)`,
//! so that a counting commit can count them and a torn one is detected.

use super::cell::{
    self, kind_of, node_cell_key as cell_key, node_cell_len as cell_len, put_node_cell as put_cell,
    Reader,
};
use super::inpage::{
    check_envelope, check_free_page, free_gaps, invalidate_envelope, prefix_crc, raw_tid,
    seal_patched, snapshot_too_old, verify_tree_page, with_local, write_envelope, CrcGather,
    InPageFormat, VersionState,
};
pub use super::inpage::{CommitRecord, PageScan, INV, RAW_MAGIC, RAW_TAIL};
use super::{
    DecodeCtx, EncodeCtx, InteriorCell, LeafCell, LeafChange, LeafPatch, Node, NodeFormat, Patched,
    Value,
};
use crate::base::pagesum::{self, SUM_LEN};
use crate::base::{Error, KeyOrder, Pgno, Result};
use std::cell::RefCell;
use std::sync::Arc;

/// New cells up to which a write patches the page checksum from the
/// base's instead of summing the page again.
const PATCH_CELLS: usize = 4;

/// Size of one slot header.
pub const SLOT_LEN: usize = 32;
/// Offset of the page checksum.
pub const PAGE_SUM_AT: usize = 2 * SLOT_LEN;
/// Offset of the first offset row.
pub const ROWS_AT: usize = PAGE_SUM_AT + SUM_LEN;
/// Bytes per offset row (one u16 per slot header).
pub const ROW_LEN: usize = 4;
/// Magic byte of a written slot header.
pub const MAGIC: u8 = 0xD1;
/// Page type of a leaf version.
pub const LEAF: u8 = cell::LEAF;
/// Page type of an interior version.
pub const INTERIOR: u8 = cell::INTERIOR;
const FLAG_COMMIT: u8 = 1;

/// The DHL page format.
#[derive(Debug, Default, Clone, Copy)]
pub struct DhlFormat;

/// A parsed slot header (not yet checked against its checksum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotHeader {
    /// 0 or 1.
    pub slot: usize,
    /// Page type of this version.
    pub kind: u8,
    /// Cells of this version.
    pub n: usize,
    /// Flag bits (bit 0: commit record).
    pub flags: u8,
    /// Transaction that wrote the version.
    pub tid: u64,
    /// Rightmost child of an interior version.
    pub right: Pgno,
    /// Commit record: pages written by the transaction.
    pub txn_size: u32,
    /// Commit record: page count after the commit.
    pub page_count: u32,
    /// Bytes of the cells' part of the checksum message (0: not recorded):
    /// a commit record is embedded by patching the checksum, without
    /// parsing the cells again.
    pub cells_len: u32,
    /// Stored checksum.
    pub crc: u32,
}

fn be16(p: &[u8], at: usize) -> usize {
    u16::from_be_bytes([p[at], p[at + 1]]) as usize
}

fn be32(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(p[at..at + 4].try_into().expect("4 bytes"))
}

fn be64(p: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}

/// Most offset rows a page can hold.
fn max_rows(ps: usize) -> usize {
    (ps - ROWS_AT) / ROW_LEN
}

/// Read slot header `slot` (`None` if it was never written).
pub fn read_slot(page: &[u8], slot: usize) -> Option<SlotHeader> {
    let b = &page[slot * SLOT_LEN..(slot + 1) * SLOT_LEN];
    if b[0] != MAGIC {
        return None;
    }
    Some(SlotHeader {
        slot,
        kind: b[1],
        n: be16(b, 2),
        flags: b[4],
        cells_len: u32::from_be_bytes([0, b[5], b[6], b[7]]),
        tid: be64(b, 8),
        right: be32(b, 16),
        txn_size: be32(b, 20),
        page_count: be32(b, 24),
        crc: be32(b, 28),
    })
}

fn write_slot(page: &mut [u8], h: &SlotHeader) {
    let b = &mut page[h.slot * SLOT_LEN..(h.slot + 1) * SLOT_LEN];
    b.fill(0);
    b[0] = MAGIC;
    b[1] = h.kind;
    b[2..4].copy_from_slice(&(h.n as u16).to_be_bytes());
    b[4] = h.flags;
    if h.cells_len < 1 << 24 {
        b[5..8].copy_from_slice(&h.cells_len.to_be_bytes()[1..]);
    }
    b[8..16].copy_from_slice(&h.tid.to_be_bytes());
    b[16..20].copy_from_slice(&h.right.to_be_bytes());
    b[20..24].copy_from_slice(&h.txn_size.to_be_bytes());
    b[24..28].copy_from_slice(&h.page_count.to_be_bytes());
    b[28..32].copy_from_slice(&h.crc.to_be_bytes());
}

fn row_at(i: usize, slot: usize) -> usize {
    ROWS_AT + ROW_LEN * i + 2 * slot
}

/// Set column `to` of the offset rows `out` to the other column of the
/// rows `from` (row for row): a whole row at a time, so the loop runs
/// without a branch or a byte-wise store per row.
fn copy_column(out: &mut [u8], from: &[u8], to: usize) {
    const _: () = assert!(ROW_LEN == 4, "a row is two u16 columns");
    let keep = if to == 0 { 0x0000_ffff } else { 0xffff_0000u32 };
    for (o, f) in out
        .chunks_exact_mut(ROW_LEN)
        .zip(from.chunks_exact(ROW_LEN))
    {
        let f = u32::from_be_bytes([f[0], f[1], f[2], f[3]]);
        let moved = if to == 0 { f << 16 } else { f >> 16 };
        let w = u32::from_be_bytes([o[0], o[1], o[2], o[3]]) & keep | moved;
        o.copy_from_slice(&w.to_be_bytes());
    }
}

fn corrupt(pgno: Pgno, what: impl Into<String>) -> Error {
    Error::corrupt("database", pgno, what)
}

/// A cell of a version: (offset, length, key start, key end) in the page.
type Span = (usize, usize, usize, usize);

/// Parse the cells of version `h` into `out`: every offset and length is
/// checked against the page.
fn spans_into(
    pgno: Pgno,
    page: &[u8],
    h: &SlotHeader,
    max_key: usize,
    out: &mut Vec<Span>,
) -> Result<()> {
    let ps = page.len();
    out.clear();
    if h.kind != LEAF && h.kind != INTERIOR {
        return Err(corrupt(
            pgno,
            format!("slot header {}: bad page type {:#04x}", h.slot, h.kind),
        ));
    }
    if h.n > max_rows(ps) {
        return Err(corrupt(
            pgno,
            format!("slot header {}: {} cells cannot fit", h.slot, h.n),
        ));
    }
    if h.kind == INTERIOR && h.right == 0 {
        return Err(corrupt(pgno, "interior version without a right child"));
    }
    let min = ROWS_AT + ROW_LEN * h.n;
    out.reserve(h.n);
    for i in 0..h.n {
        let off = be16(page, row_at(i, h.slot));
        if off < min || off >= ps {
            return Err(corrupt(
                pgno,
                format!(
                    "slot header {}: cell {i} offset {off} outside the cell area",
                    h.slot
                ),
            ));
        }
        let mut r = Reader::new(page, off, ps, pgno);
        let key = if h.kind == LEAF {
            r.leaf_key(i, max_key)?
        } else {
            r.interior_key(i, max_key)?
        };
        // The key is a slice of `page`: its position, not a copy. Key
        // order is the table's, checked where a version is decoded.
        let ks = key.as_ptr() as usize - page.as_ptr() as usize;
        out.push((off, r.pos - off, ks, ks + key.len()));
    }
    Ok(())
}

/// [`spans_into`] for a leaf version `h` that the node of `lens` (its
/// cells' encoded lengths) is, but for `change`, read from a verified
/// page: each cell's offset from its row, its length from the node's
/// cell at the same position; only a cell the change replaced or removed
/// is parsed. Key positions are left empty: the caller pairs by position.
fn hinted_spans(
    pgno: Pgno,
    page: &[u8],
    h: &SlotHeader,
    change: LeafChange,
    lens: &[usize],
    max_key: usize,
    out: &mut Vec<Span>,
) -> Result<()> {
    let ps = page.len();
    out.clear();
    let min = ROWS_AT + ROW_LEN * h.n;
    if h.n > max_rows(ps) || min > ps {
        return Err(corrupt(
            pgno,
            format!("slot header {}: {} cells cannot fit", h.slot, h.n),
        ));
    }
    out.reserve(h.n);
    for b in 0..h.n {
        let off = be16(page, row_at(b, h.slot));
        let len = match change.node_index(b) {
            Some(j) => lens[j],
            None => {
                // The reader stops at the page end; the range is checked below.
                let mut r = Reader::new(page, off, ps, pgno);
                r.leaf_key(b, max_key)?;
                r.pos - off
            }
        };
        if off < min || len > ps - off.min(ps) {
            return Err(corrupt(
                pgno,
                format!(
                    "slot header {}: cell {b} at {off} ({len} bytes) outside the cell area",
                    h.slot
                ),
            ));
        }
        out.push((off, len, off, off));
    }
    Ok(())
}

/// The plain cell (`cell::Reader::plain_leaf`) whose offset row is at
/// `row` of `page`, if it lies in the cell area (from `rows_end`): its
/// span (offset, length, key start, key end).
#[inline]
fn plain_cell(
    pgno: Pgno,
    page: &[u8],
    row: usize,
    rows_end: usize,
    max_key: usize,
) -> Option<Span> {
    let off = be16(page, row);
    if off < rows_end || off >= page.len() {
        return None;
    }
    let (ks, vs, end) = Reader::new(page, off, page.len(), pgno).plain_leaf(max_key)?;
    Some((off, end - off, ks, vs))
}

/// The plain cells `rows` of version `vh` of `page`, in row order, into
/// `out`; `None` if one is not plain ([`plain_cell`]). Kept out of line:
/// inlined into the patches it costs them more than the call.
#[inline(never)]
fn plain_cells_into(
    pgno: Pgno,
    page: &[u8],
    vh: &SlotHeader,
    rows: std::ops::Range<usize>,
    max_key: usize,
    out: &mut Vec<Span>,
) -> Option<()> {
    let rows_end = ROWS_AT + ROW_LEN * vh.n;
    out.clear();
    for i in rows {
        out.push(plain_cell(
            pgno,
            page,
            row_at(i, vh.slot),
            rows_end,
            max_key,
        )?);
    }
    Some(())
}

/// The gaps between the offset rows (ending at `rows_end`) and the page
/// end `ps` that no cell of `spans` (a committed version) covers, into
/// `free`, ascending.
fn committed_gaps(
    rows_end: usize,
    ps: usize,
    spans: &[Span],
    runs: &mut Vec<(usize, usize)>,
    free: &mut Vec<(usize, usize)>,
) {
    free_gaps(
        rows_end,
        ps,
        spans.iter().map(|c| (c.0, c.0 + c.1)),
        runs,
        free,
    );
}

/// The checksum of version `h` does not match: a torn write or damage.
fn crc_mismatch(pgno: Pgno, h: &SlotHeader) -> Error {
    corrupt(
        pgno,
        format!(
            "slot header {} (TID {}): checksum mismatch, the page is torn or damaged",
            h.slot, h.tid
        ),
    )
}

/// Checksum of the version in slot header `slot` whose cells lie at
/// `cells` (offset, length; already checked against the page):
/// crc32c(pgno, header bytes +0..+28, then each cell's u16 offset and
/// bytes).
fn version_crc(
    pgno: Pgno,
    page: &[u8],
    slot: usize,
    cells: impl Iterator<Item = (usize, usize)>,
) -> u32 {
    let mut crc = CrcGather::new();
    let hb = slot * SLOT_LEN;
    crc.put(&pgno.to_be_bytes());
    crc.put(&page[hb..hb + 28]);
    for (off, len) in cells {
        crc.put(&(off as u16).to_be_bytes());
        crc.put(&page[off..off + len]);
    }
    crc.finish()
}

/// Write a new version into `slot` of `out`: its offset rows (`offsets`;
/// `lens` the cells' lengths, for the header's message length) and its
/// header of page type and right child `kind`, with checksum 0 for the
/// caller to fill in. Returns the header.
fn write_shared_version(
    out: &mut [u8],
    slot: usize,
    (kind, right): (u8, Pgno),
    offsets: &[usize],
    lens: &[usize],
    tid: u64,
) -> SlotHeader {
    for (i, &off) in offsets.iter().enumerate() {
        let r = row_at(i, slot);
        out[r..r + 2].copy_from_slice(&(off as u16).to_be_bytes());
    }
    let h = SlotHeader {
        slot,
        kind,
        n: offsets.len(),
        flags: 0,
        tid,
        right,
        txn_size: 0,
        page_count: 0,
        cells_len: lens.iter().map(|l| 2 + l).sum::<usize>() as u32,
        crc: 0,
    };
    write_slot(out, &h);
    h
}

/// The checksum of the version just written to `slot` of `out` that is
/// the committed version `vh` of `base` (its cells `spans`) with one cell
/// inserted at position `at` (`inserted`: its bytes in `out`) or cell `at`
/// removed, patched from `vh.crc` rather than summed. The message (page
/// number, 28 header bytes, then per cell its u16 offset and its bytes) is
/// H ‖ A ‖ [D] ‖ B before and H' ‖ A ‖ [X] ‖ B after: B only moves, so
/// crc(new) = crc(old) ^ advance(crc(H' ‖ A ‖ X) ^ crc(H ‖ A ‖ D), |B|).
/// crc(H ‖ A) is summed over A, or, when the rest is shorter, found from
/// crc(old) with the rest's raw sum removed ([`pagesum::remove_zeros`]).
#[allow(clippy::too_many_arguments)]
fn reshaped_crc(
    pgno: Pgno,
    base: &[u8],
    out: &[u8],
    vh: &SlotHeader,
    slot: usize,
    spans: &[Span],
    at: usize,
    inserted: Option<(usize, usize)>,
) -> u32 {
    let pair = |c: &Span| 2 + c.1;
    let a_len: usize = spans[..at].iter().map(pair).sum();
    let rest_len: usize = spans[at..].iter().map(pair).sum();
    let put = |g: &mut CrcGather, c: &Span| {
        g.put(&(c.0 as u16).to_be_bytes());
        g.put(&base[c.0..c.0 + c.1]);
    };
    let (hb_old, hb_new) = (vh.slot * SLOT_LEN, slot * SLOT_LEN);
    let c_ha = prefix_crc(
        vh.crc,
        (32 + a_len, |g: &mut CrcGather| {
            g.put(&pgno.to_be_bytes());
            g.put(&base[hb_old..hb_old + 28]);
            spans[..at].iter().for_each(|c| put(g, c));
        }),
        (rest_len, |g: &mut CrcGather| {
            spans[at..].iter().for_each(|c| put(g, c))
        }),
    );
    let c_h2a =
        c_ha ^ pagesum::run_term(&base[hb_old..hb_old + 28], &out[hb_new..hb_new + 28], a_len);
    let (c_new, c_old, b_len) = match inserted {
        Some((off, end)) => {
            let c = crc32c::crc32c_append(c_h2a, &(off as u16).to_be_bytes());
            (crc32c::crc32c_append(c, &out[off..end]), c_ha, rest_len)
        }
        None => {
            let d = &spans[at];
            let c = crc32c::crc32c_append(c_ha, &(d.0 as u16).to_be_bytes());
            let c = crc32c::crc32c_append(c, &base[d.0..d.0 + d.1]);
            (c_h2a, c, rest_len - pair(d))
        }
    };
    vh.crc ^ pagesum::advance(c_new ^ c_old, b_len)
}

/// The checksum of the version just written to `slot` of `out`, from the
/// committed version's on `base` that `p` describes ([`VersionPatch`]).
fn patched_crc(p: &VersionPatch, base: &[u8], out: &[u8], slot: usize, sc: &Scratch) -> u32 {
    let (hb_old, hb_new) = (p.slot * SLOT_LEN, slot * SLOT_LEN);
    let mut crc = p.crc
        ^ pagesum::run_term(
            &base[hb_old..hb_old + 28],
            &out[hb_new..hb_new + 28],
            p.len - 32,
        );
    let (new_off, len) = (sc.offsets[p.cell], sc.lens[p.cell]);
    if new_off != p.old_off {
        let after = p.len - p.at - 2;
        crc ^= pagesum::run_term(
            &(p.old_off as u16).to_be_bytes(),
            &(new_off as u16).to_be_bytes(),
            after,
        );
        crc ^= pagesum::run_term(
            &base[p.old_off..p.old_off + len],
            &out[new_off..new_off + len],
            after - len,
        );
    }
    crc
}

/// Parse the cells of version `h` into `out` and compute its checksum.
fn parse_version_into(
    pgno: Pgno,
    page: &[u8],
    h: &SlotHeader,
    max_key: usize,
    out: &mut Vec<Span>,
) -> Result<u32> {
    spans_into(pgno, page, h, max_key, out)?;
    Ok(version_crc(
        pgno,
        page,
        h.slot,
        out.iter().map(|c| (c.0, c.1)),
    ))
}

/// Parse and verify version `h` into `out`: a checksum mismatch (a torn
/// write or damage) is corruption.
fn verify_into(
    pgno: Pgno,
    page: &[u8],
    h: &SlotHeader,
    max_key: usize,
    out: &mut Vec<Span>,
) -> Result<()> {
    if parse_version_into(pgno, page, h, max_key, out)? != h.crc {
        return Err(crc_mismatch(pgno, h));
    }
    Ok(())
}

/// [`verify_into`] a new vector.
fn verified(pgno: Pgno, page: &[u8], h: &SlotHeader, max_key: usize) -> Result<Vec<Span>> {
    let mut cells = Vec::new();
    verify_into(pgno, page, h, max_key, &mut cells)?;
    Ok(cells)
}

/// Where the versions of a node go on a page (with the cell offsets in
/// [`Scratch`]).
struct Layout {
    /// Slot header the new version is written to.
    slot: usize,
    /// No committed version: the page is written from scratch.
    fresh: bool,
    /// The new version is the committed one with one cell's value
    /// replaced by one of the same length: its checksum follows from the
    /// committed version's.
    patch: Option<VersionPatch>,
}

/// What [`DhlFormat::write_version`] needs to derive the new version's
/// checksum from the committed version's (CRC is linear: equal-length
/// messages differ by the raw CRC of the changed runs, each advanced over
/// the bytes after it): the slot header, and cell `cell`'s offset and
/// bytes, are the only runs that change.
#[derive(Debug, Clone, Copy)]
struct VersionPatch {
    /// The committed version's slot and stored (verified) checksum.
    slot: usize,
    crc: u32,
    /// The cell whose value changed, its committed offset, and where its
    /// entry (u16 offset, then bytes) starts in the checksum message.
    cell: usize,
    old_off: usize,
    at: usize,
    /// Length of the checksum message (the same for both versions).
    len: usize,
}

/// The vectors [`DhlFormat::layout`] works in, kept per thread: once they
/// have grown, placing a version allocates nothing.
#[derive(Default)]
struct Scratch {
    /// Cells of the committed version.
    spans: Vec<Span>,
    /// Encoded length of every cell of the new version.
    lens: Vec<usize>,
    /// Offset of every cell of the new version.
    offsets: Vec<usize>,
    /// Cells that need new bytes (the rest are shared with the committed
    /// version and stay where they are).
    new: Vec<usize>,
    /// The committed cells' byte runs, sorted (`free_gaps`' scratch).
    runs: Vec<(usize, usize)>,
    free: Vec<(usize, usize)>,
    order: Vec<usize>,
    cell: Vec<u8>,
    /// A node cell's key identity when it is not the key
    /// (`cell::key_ident`).
    ident: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Run `f` with this thread's scratch.
fn with_scratch<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
    with_local(&SCRATCH, f)
}

impl DhlFormat {
    /// Decode, with keys and values pointing into `share` when given.
    fn decode_in(
        &self,
        pgno: Pgno,
        page: &[u8],
        share: Option<&Arc<[u8]>>,
        ctx: &DecodeCtx,
    ) -> Result<Node> {
        Self::check_len(pgno, page, ctx.page_size)?;
        let max_key = self.max_key_len(ctx.page_size);
        // Under one-writer locking a reader meets at most the next
        // writer's version above its FCC (recovery and rollback
        // invalidate the rest), and every version not invalidated checks
        // out. Verifying both headers turns damage to the visible header's
        // TID or magic into an error instead of a silent fallback to the
        // older version.
        //
        // An intact page checksum vouches for both versions (C5): the
        // visible one is then only parsed, not summed again.
        let page_ok = pagesum::verify(pgno, page, PAGE_SUM_AT);
        let mut checked: [Option<Vec<Span>>; 2] = [None, None];
        let mut intact = [false; 2];
        for s in 0..2 {
            match page[s * SLOT_LEN] {
                0 => {}
                MAGIC => {
                    let h = read_slot(page, s).expect("magic checked");
                    if h.tid == INV {
                        continue;
                    }
                    intact[s] = true;
                    if !page_ok {
                        checked[s] = Some(verified(pgno, page, &h, max_key)?);
                    }
                }
                b => {
                    return Err(corrupt(
                        pgno,
                        format!("slot header {s}: bad magic {b:#04x}"),
                    ))
                }
            }
        }
        let Some(h) = Self::visible_slot(page, ctx.committed_tid) else {
            let tids: Vec<String> = (0..2)
                .filter_map(|s| read_slot(page, s))
                .map(|h| h.tid.to_string())
                .collect();
            if intact.iter().all(|&i| i) {
                // Two intact versions, both newer than the snapshot: two
                // commits since the reader began (a multi-writer protocol)
                // overwrote the version it needs (\[IPS\] §4.2: such a
                // reader aborts). One version alone is a page the
                // snapshot cannot reach: damage.
                return Err(snapshot_too_old(pgno, ctx.committed_tid, &tids));
            }
            return Err(corrupt(
                pgno,
                format!(
                    "no committed version (slot TIDs [{}], FCC {})",
                    tids.join(", "),
                    ctx.committed_tid
                ),
            ));
        };
        if h.kind == LEAF && checked[h.slot].is_none() {
            if let Some(node) = Self::plain_leaf_version(pgno, page, &h, share, ctx, max_key)? {
                return Ok(node);
            }
        }
        let cells = match checked[h.slot].take() {
            Some(c) => c,
            None => {
                let mut c = Vec::new();
                spans_into(pgno, page, &h, max_key, &mut c)?;
                c
            }
        };
        let leaf = h.kind == LEAF;
        for (i, w) in cells.windows(2).enumerate() {
            // An overflowing key is ordered once it is complete
            // (`cell::complete_keys`).
            let skip = cell::key_overflows_at(page, w[0].0, leaf)
                || cell::key_overflows_at(page, w[1].0, leaf);
            if !skip
                && !ctx
                    .order
                    .compare(&page[w[0].2..w[0].3], &page[w[1].2..w[1].3])
                    .is_lt()
            {
                return Err(corrupt(
                    pgno,
                    format!("slot header {}: cell {} keys out of order", h.slot, i + 1),
                ));
            }
        }
        if h.kind == LEAF {
            let mut out: Vec<LeafCell> = Vec::with_capacity(cells.len());
            for (i, &(off, ..)) in cells.iter().enumerate() {
                out.push(
                    Reader::new(page, off, page.len(), pgno)
                        .sharing(share)
                        .leaf(i, max_key)?,
                );
            }
            Ok(Node::Leaf(out))
        } else {
            let mut out: Vec<InteriorCell> = Vec::with_capacity(cells.len());
            for (i, &(off, ..)) in cells.iter().enumerate() {
                out.push(
                    Reader::new(page, off, page.len(), pgno)
                        .sharing(share)
                        .interior(i, max_key)?,
                );
            }
            Ok(Node::Interior {
                cells: out,
                right: h.right,
            })
        }
    }

    /// Decode leaf version `h` (vouched for by the page checksum) in one
    /// pass when every cell is plain (`cell::Reader::plain`: most leaves),
    /// ordering neighbours on the page's bytes; `Ok(None)` sends any other
    /// page down the general path, which checks it again from the start.
    fn plain_leaf_version(
        pgno: Pgno,
        page: &[u8],
        h: &SlotHeader,
        share: Option<&Arc<[u8]>>,
        ctx: &DecodeCtx,
        max_key: usize,
    ) -> Result<Option<Node>> {
        let ps = page.len();
        if h.n > max_rows(ps) {
            return Ok(None);
        }
        let min = ROWS_AT + ROW_LEN * h.n;
        let bytewise = ctx.order.bytewise();
        let mut out: Vec<LeafCell> = Vec::with_capacity(h.n);
        let mut prev: Option<(usize, usize)> = None;
        for i in 0..h.n {
            let off = be16(page, row_at(i, h.slot));
            if off < min || off >= ps {
                return Ok(None);
            }
            let mut r = Reader::new(page, off, ps, pgno).sharing(share);
            let Some((c, ks, vs)) = r.plain(max_key) else {
                return Ok(None);
            };
            if let Some((pk, pv)) = prev {
                let ok = if bytewise {
                    cell::key_lt(&page[pk..pv], &page[ks..vs])
                } else {
                    ctx.order.compare(&page[pk..pv], &page[ks..vs]).is_lt()
                };
                if !ok {
                    return Err(corrupt(
                        pgno,
                        format!("slot header {}: cell {i} keys out of order", h.slot),
                    ));
                }
            }
            prev = Some((ks, vs));
            out.push(c);
        }
        Ok(Some(Node::Leaf(out)))
    }

    /// The committed version a writer with TID `tid` must preserve: the
    /// valid header with the highest TID below `tid`.
    fn committed_slot(page: &[u8], tid: u64) -> Option<SlotHeader> {
        (0..2)
            .filter_map(|s| read_slot(page, s))
            .filter(|h| h.tid != INV && h.tid < tid)
            .max_by_key(|h| h.tid)
    }

    /// The version a reader at FCC `committed` sees.
    fn visible_slot(page: &[u8], committed: u64) -> Option<SlotHeader> {
        (0..2)
            .filter_map(|s| read_slot(page, s))
            .filter(|h| h.tid != INV && h.tid <= committed)
            .max_by_key(|h| h.tid)
    }

    /// Plan the placement of `node` over `base`. `Ok(None)`: it does not
    /// fit in place. The committed version's checksum is verified when
    /// `verify` (encode over a base not verified since it was read);
    /// `fits` only gets the layout.
    fn layout(
        &self,
        pgno: Option<Pgno>,
        verify: bool,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        sc: &mut Scratch,
    ) -> Result<Option<Layout>> {
        let (ps, tid) = (ctx.page_size, ctx.tid);
        let n = node.len();
        if n > max_rows(ps) {
            return Ok(None);
        }
        let Scratch {
            spans,
            lens,
            offsets,
            new,
            runs,
            free,
            order,
            cell: scratch,
            ident,
        } = sc;
        lens.clear();
        lens.extend((0..n).map(|i| cell_len(node, i)));
        offsets.clear();
        new.clear();
        let Some(base) = base else {
            // A page this transaction allocated: pack the cells at the end.
            let total: usize = lens.iter().sum::<usize>() + ROWS_AT + ROW_LEN * n;
            if total > ps {
                return Ok(None);
            }
            let mut end = ps;
            offsets.extend(lens.iter().map(|l| {
                end -= l;
                end
            }));
            new.extend(0..n);
            return Ok(Some(Layout {
                slot: 0,
                fresh: true,
                patch: None,
            }));
        };
        let at = pgno.unwrap_or(0);
        if base.len() != ps {
            return Err(corrupt(at, format!("base image of {} bytes", base.len())));
        }
        let Some(vh) = Self::committed_slot(base, tid) else {
            return Err(corrupt(
                at,
                "no committed version to write the new one over",
            ));
        };
        let max_key = self.max_key_len(ps);
        // The pager's hint (see below) over a base it verified: the node
        // came from that version, so its cells give the committed cells'
        // lengths and only a replaced or removed cell is parsed.
        let hinted = ctx.leaf_change.filter(|&ch| {
            !verify && vh.kind == LEAF && matches!(node, Node::Leaf(_)) && ch.fits_counts(n, vh.n)
        });
        if verify {
            verify_into(at, base, &vh, max_key, spans)?;
        } else if let Some(ch) = hinted {
            hinted_spans(at, base, &vh, ch, lens, max_key, spans)?;
        } else {
            spans_into(at, base, &vh, max_key, spans)?;
        }
        let rows_end = ROWS_AT + ROW_LEN * vh.n.max(n);
        if rows_end > ps || spans.iter().any(|c| c.0 < rows_end) {
            // The new offset rows would run into committed cells.
            return Ok(None);
        }
        // Cells equal to a committed one are shared, not copied
        // (the paper's in-page copy-on-write copies only the header).
        offsets.resize(n, 0);
        // The pager's hint: the node is the committed version with one
        // leaf cell changed, inserted or removed. Every other cell pairs
        // with the committed cell at its position; only a changed value is
        // compared.
        // Spans built under `hinted` take their lengths from the node: no
        // test to repeat.
        let by_position = hinted.or_else(|| {
            ctx.leaf_change.filter(|&ch| {
                ch.fits_counts(n, spans.len())
                    && vh.kind == LEAF
                    && matches!(node, Node::Leaf(_))
                    && (0..n).all(|j| {
                        ch == LeafChange::Value(j)
                            || ch
                                .base_index(j, n, spans.len())
                                .is_none_or(|b| spans[b].1 == lens[j])
                    })
            })
        });
        if let Some(ch) = by_position {
            for (j, o) in offsets.iter_mut().enumerate() {
                match ch.base_index(j, n, spans.len()) {
                    Some(b) if ch != LeafChange::Value(j) => *o = spans[b].0,
                    Some(b) => {
                        let (off, len, ..) = spans[b];
                        if len == lens[j]
                            && cell::node_cell_matches(node, j, base, (off, len), scratch)
                        {
                            *o = off;
                        } else {
                            new.push(j);
                        }
                    }
                    None => new.push(j),
                }
            }
        } else {
            // Both versions ascend in the table's order, which the format does
            // not see here. When the committed keys ascend bytewise (the
            // default order) one merge walk finds the pairs; otherwise each key
            // is looked up in an index of the committed keys sorted bytewise.
            let bytewise = spans
                .windows(2)
                .all(|w| base[w[0].2..w[0].3] < base[w[1].2..w[1].3]);
            if !bytewise {
                order.clear();
                order.extend(0..spans.len());
                order.sort_unstable_by(|&a, &b| {
                    base[spans[a].2..spans[a].3].cmp(&base[spans[b].2..spans[b].3])
                });
            }
            let mut j = 0;
            for i in 0..n {
                // Paired by the bytes the page stores for the key.
                let key = cell::key_ident(cell_key(node, i), ident);
                if bytewise {
                    while j < spans.len() && base[spans[j].2..spans[j].3] < *key {
                        j += 1;
                    }
                } else {
                    j = order
                        .binary_search_by(|&s| base[spans[s].2..spans[s].3].cmp(key))
                        .map_or(spans.len(), |x| order[x]);
                }
                let shared = spans
                    .get(j)
                    .filter(|c| base[c.2..c.3] == *key)
                    .copied()
                    .filter(|&(off, len, _, _)| {
                        len == lens[i]
                            && cell::node_cell_matches(node, i, base, (off, len), scratch)
                    });
                match shared {
                    Some((off, ..)) => offsets[i] = off,
                    None => new.push(i),
                }
            }
        }
        // Free space: everything between the rows and the page end that
        // the committed version does not reference.
        committed_gaps(rows_end, ps, spans, runs, free);
        // Largest cells first, each at the top of the highest gap that
        // holds it: keeps the space next to the rows free for them to grow.
        order.clear();
        order.extend_from_slice(new);
        order.sort_by(|a, b| lens[*b].cmp(&lens[*a]).then(a.cmp(b)));
        for &i in order.iter() {
            let Some(gap) = free.iter_mut().rev().find(|g| g.1 - g.0 >= lens[i]) else {
                return Ok(None);
            };
            gap.1 -= lens[i];
            offsets[i] = gap.1;
        }
        // A changed value of the same length, every other cell shared
        // (encode only: `fits` writes no checksum).
        let patch = match by_position.filter(|_| pgno.is_some()) {
            Some(LeafChange::Value(j))
                if n == spans.len() && spans[j].1 == lens[j] && new.iter().all(|&i| i == j) =>
            {
                // pgno, then 28 header bytes, then (u16 offset, cell) each.
                let mut len = 4 + 28;
                let mut at = 0;
                for (b, c) in spans.iter().enumerate() {
                    if b == j {
                        at = len;
                    }
                    len += 2 + c.1;
                }
                Some(VersionPatch {
                    slot: vh.slot,
                    crc: vh.crc,
                    cell: j,
                    old_off: spans[j].0,
                    at,
                    len,
                })
            }
            _ => None,
        };
        Ok(Some(Layout {
            slot: 1 - vh.slot,
            fresh: false,
            patch,
        }))
    }

    /// [`NodeFormat::patch_leaf`]: the committed leaf version changed by
    /// `patch`, written as the new version in the other slot header; every
    /// other cell is shared. A value replaced by one of its size goes into
    /// the hole the older version left, or the top of the highest gap the
    /// committed version leaves free (as [`DhlFormat::layout`] places it),
    /// both checksums patched from the committed ones; an insert or a
    /// delete is [`DhlFormat::reshape`]. Cells that are not plain, or no
    /// gap, decline.
    #[allow(clippy::too_many_arguments)]
    fn patch_version(
        &self,
        pgno: Pgno,
        base: &[u8],
        key: &[u8],
        patch: LeafPatch<'_>,
        order: &dyn KeyOrder,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Option<Patched> {
        let ps = ctx.page_size;
        if base.len() != ps || out.len() != ps || ps < 512 {
            return None;
        }
        let vh = Self::committed_slot(base, ctx.tid)?;
        let n = vh.n;
        if vh.kind != LEAF || n == 0 || n > max_rows(ps) {
            return None;
        }
        let max_key = self.max_key_len(ps);
        let rows_end = ROWS_AT + ROW_LEN * n;
        let cell = |i: usize| plain_cell(pgno, base, row_at(i, vh.slot), rows_end, max_key);
        // The key first (a few cells read); the checksum and every cell
        // only once the change is known to apply: a declined patch is
        // cheap. The page checksum vouches for both versions (C5).
        let found = cell::search_cells(n, key, order, |i| {
            let c = cell(i)?;
            Some((c, &base[c.2..c.3]))
        })?;
        let intact = || ctx.base_verified || pagesum::verify(pgno, base, PAGE_SUM_AT);
        match (patch, found) {
            (LeafPatch::Delete { .. }, Err(_)) => return intact().then_some(Patched::Absent),
            (LeafPatch::Put(value), Ok((_, (old_off, len, _, vs))))
                if old_off + len - vs != value.len() =>
            {
                // A value of another size: the logical view moves cells.
                return None;
            }
            _ => {}
        }
        if !intact() {
            return None;
        }
        let found = found.map(|(j, _)| j);
        if let (LeafPatch::Delete { keep }, Ok(at), true) = (patch, found, vh.cells_len != 0) {
            self.delete_at(pgno, base, at, keep, &vh, ctx, out, sc)?;
            return Some(Patched::Written { existed: true });
        }
        self.patch_at(pgno, base, key, patch, found, &vh, ctx, out, sc)
    }

    /// [`NodeFormat::encode_if_fits`] of a leaf `cells` that is the
    /// committed version of `base` (verified since it was read) with the
    /// one change `ch`, the pager's hint ([`EncodeCtx::leaf_change`]): the
    /// change is known by position, so the page is patched as
    /// [`DhlFormat::patch_version`] patches it, without the layout's walk
    /// of every cell. `None` declines (the layout places the node).
    #[allow(clippy::too_many_arguments)]
    fn patch_hinted(
        &self,
        pgno: Pgno,
        cells: &[LeafCell],
        ch: LeafChange,
        base: &[u8],
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Option<Patched> {
        let ps = ctx.page_size;
        if !ctx.base_verified || base.len() != ps || out.len() != ps || ps < 512 {
            return None;
        }
        let vh = Self::committed_slot(base, ctx.tid)?;
        if vh.kind != LEAF || vh.n == 0 || vh.n > max_rows(ps) || !ch.fits_counts(cells.len(), vh.n)
        {
            return None;
        }
        let put = |i: usize| match &cells[i].value {
            Value::Inline(v) => Some((&cells[i].key[..], LeafPatch::Put(&v[..]))),
            _ => None,
        };
        let (key, patch, found) = match ch {
            LeafChange::Value(i) => put(i).map(|(k, p)| (k, p, Ok(i)))?,
            LeafChange::Inserted(i) => put(i).map(|(k, p)| (k, p, Err(i)))?,
            LeafChange::Removed(i) if vh.cells_len != 0 => {
                // Only the removed cell and the shorter side of it are read.
                self.delete_at(pgno, base, i, 0, &vh, ctx, out, sc)?;
                return Some(Patched::Written { existed: true });
            }
            LeafChange::Removed(i) => (&[][..], LeafPatch::Delete { keep: 0 }, Ok(i)),
            LeafChange::Child(_) | LeafChange::Split(_) | LeafChange::Dropped(_) => return None,
        };
        self.patch_at(pgno, base, key, patch, found, &vh, ctx, out, sc)
    }

    /// [`NodeFormat::encode_if_fits`] of an interior `node` that is the
    /// committed version of `base` (verified since it was read) with one
    /// child moved, or split (`ch`, the pager's hint): the cells that hold
    /// a moved child, and a split's new cell, are written to the highest
    /// gaps the committed version leaves; every other cell is shared. The
    /// version checksum is summed (an interior write is rare: a split or a
    /// move below), the page checksum patched. False declines.
    #[allow(clippy::too_many_arguments)]
    fn patch_interior(
        &self,
        pgno: Pgno,
        node: &Node,
        ch: LeafChange,
        base: &[u8],
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> bool {
        let ps = ctx.page_size;
        let n = node.len();
        let Node::Interior { right, .. } = node else {
            return false;
        };
        // Node cell `j`'s committed cell, and whether its bytes are new
        // (a dropped child is laid out whole: declined before any parse).
        let (fresh, moved) = match ch {
            LeafChange::Child(i) => (n, i),
            LeafChange::Split(i) => (i, i + 1),
            _ => return false,
        };
        if !ctx.base_verified || base.len() != ps || out.len() != ps || ps < 512 {
            return false;
        }
        let Some(vh) = Self::committed_slot(base, ctx.tid) else {
            return false;
        };
        if vh.kind != INTERIOR || !ch.fits_interior(n, vh.n) || n > max_rows(ps) {
            return false;
        }
        let max_key = self.max_key_len(ps);
        if spans_into(pgno, base, &vh, max_key, &mut sc.spans).is_err() {
            return false;
        }
        let base_of = |j: usize| if j > fresh && fresh < n { j - 1 } else { j };
        let rows_end = ROWS_AT + ROW_LEN * n.max(vh.n);
        let Scratch {
            spans,
            runs,
            free,
            offsets,
            lens,
            ident,
            ..
        } = sc;
        if spans.iter().any(|c| c.0 < rows_end) {
            // The new offset rows would run into a committed cell.
            return false;
        }
        // A cell whose child moved must be the committed cell of its key.
        if moved < n {
            let c = spans[base_of(moved)];
            let key = cell::key_ident(cell_key(node, moved), ident);
            if base[c.2..c.3] != *key {
                return false;
            }
        }
        committed_gaps(rows_end, ps, spans, runs, free);
        out.copy_from_slice(base);
        offsets.clear();
        lens.clear();
        let mut written = [(0, 0); 2];
        let mut w = 0;
        for j in 0..n {
            if j == fresh || j == moved {
                let len = cell_len(node, j);
                let Some(gap) = free.iter_mut().rev().find(|g| g.1 - g.0 >= len) else {
                    return false;
                };
                gap.1 -= len;
                put_cell(node, j, out, gap.1);
                written[w] = (gap.1, gap.1 + len);
                w += 1;
                offsets.push(gap.1);
                lens.push(len);
            } else {
                let c = spans[base_of(j)];
                offsets.push(c.0);
                lens.push(c.1);
            }
        }
        let slot = 1 - vh.slot;
        let mut h = write_shared_version(out, slot, (INTERIOR, *right), offsets, lens, ctx.tid);
        h.crc = version_crc(
            pgno,
            out,
            slot,
            offsets.iter().copied().zip(lens.iter().copied()),
        );
        write_slot(out, &h);
        let hb = slot * SLOT_LEN;
        let ranges = [
            (hb, hb + SLOT_LEN),
            (ROWS_AT, rows_end),
            written[0],
            written[1],
        ];
        seal_patched(pgno, base, out, PAGE_SUM_AT, &ranges);
        true
    }

    /// The new version of a patch over the committed version `vh` of
    /// `base`, which the caller verified: `found` is the key's cell
    /// (`Ok`) or where it goes (`Err`). A value of the old size replaces
    /// the cell's (the committed checksum patched); anything else is
    /// [`DhlFormat::reshape`].
    #[allow(clippy::too_many_arguments)]
    fn patch_at(
        &self,
        pgno: Pgno,
        base: &[u8],
        key: &[u8],
        patch: LeafPatch<'_>,
        found: std::result::Result<usize, usize>,
        vh: &SlotHeader,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Option<Patched> {
        let (ps, n) = (ctx.page_size, vh.n);
        let max_key = self.max_key_len(ps);
        let rows_end = ROWS_AT + ROW_LEN * n;
        plain_cells_into(pgno, base, vh, 0..n, max_key, &mut sc.spans)?;
        let (value, j) = match (patch, found) {
            (LeafPatch::Put(value), Ok(j)) => (value, j),
            (_, found) => {
                let existed = found.is_ok();
                let at = found.unwrap_or_else(|at| at);
                let done = self.reshape(pgno, base, key, patch, at, vh, ctx, out, sc);
                return done.then_some(Patched::Written { existed });
            }
        };
        // A value of the old size: the committed version's own checksum is
        // patched.
        let Scratch {
            spans, runs, free, ..
        } = sc;
        let (old_off, len, ks, vs) = *spans.get(j)?;
        if old_off + len - vs != value.len() || base[ks..vs] != *key {
            return None;
        }
        // Where the older version (the one this write replaces) kept a
        // cell the committed one moved: after an update of one value that
        // is a hole of the cell's size, found without sorting every cell.
        // Any other placement looks for the highest free gap.
        let moved_from = read_slot(base, 1 - vh.slot)
            .filter(|o| o.tid != INV && o.kind == LEAF)
            .and_then(|o| {
                // Two candidates at most: after an insert or a delete the
                // rows no longer pair, and the sort below is cheaper.
                (0..o.n.min(n))
                    .filter(|&i| be16(base, row_at(i, o.slot)) != spans[i].0)
                    .take(2)
                    .find_map(|i| {
                        let at = row_at(i, o.slot);
                        let (off, clen, ..) = plain_cell(pgno, base, at, rows_end, max_key)?;
                        let start = (off + clen).checked_sub(len).filter(|&s| s >= off)?;
                        let end = start + len;
                        spans
                            .iter()
                            .all(|c| end <= c.0 || c.0 + c.1 <= start)
                            .then_some(start)
                    })
            });
        let new_off = match moved_from {
            Some(at) => at,
            None => {
                committed_gaps(rows_end, ps, spans, runs, free);
                let gap = free.iter().rev().find(|g| g.1 - g.0 >= len)?;
                gap.1 - len
            }
        };
        let head = vs - old_off;
        out.copy_from_slice(base);
        out[new_off..new_off + head].copy_from_slice(&base[old_off..vs]);
        out[new_off + head..new_off + len].copy_from_slice(value);
        let slot = 1 - vh.slot;
        for (i, c) in spans.iter().enumerate() {
            let off = if i == j { new_off } else { c.0 };
            let at = row_at(i, slot);
            out[at..at + 2].copy_from_slice(&(off as u16).to_be_bytes());
        }
        // The checksum message: pgno, 28 header bytes, then (u16 offset,
        // cell) per cell; the same length for both versions.
        let at_j = 4 + 28 + spans[..j].iter().map(|c| 2 + c.1).sum::<usize>();
        let msg_len = at_j + spans[j..].iter().map(|c| 2 + c.1).sum::<usize>();
        let mut h = SlotHeader {
            slot,
            kind: LEAF,
            n,
            flags: 0,
            tid: ctx.tid,
            right: 0,
            txn_size: 0,
            page_count: 0,
            cells_len: (msg_len - 32) as u32,
            crc: 0,
        };
        write_slot(out, &h);
        let (hb_old, hb_new) = (vh.slot * SLOT_LEN, slot * SLOT_LEN);
        let mut crc = vh.crc
            ^ pagesum::run_term(
                &base[hb_old..hb_old + 28],
                &out[hb_new..hb_new + 28],
                msg_len - 32,
            );
        let after = msg_len - at_j - 2;
        crc ^= pagesum::run_term(
            &(old_off as u16).to_be_bytes(),
            &(new_off as u16).to_be_bytes(),
            after,
        );
        crc ^= pagesum::run_term(
            &base[old_off..old_off + len],
            &out[new_off..new_off + len],
            after - len,
        );
        h.crc = crc;
        write_slot(out, &h);
        // A committed version whose own checksum fails (damage the page
        // checksum missed) leaves one that fails: that is the point (C5).
        debug_assert!(
            version_crc(pgno, base, vh.slot, spans.iter().map(|c| (c.0, c.1))) != vh.crc
                || crc
                    == version_crc(
                        pgno,
                        out,
                        slot,
                        spans
                            .iter()
                            .enumerate()
                            .map(|(i, c)| (if i == j { new_off } else { c.0 }, c.1))
                    ),
            "patched version checksum, page {pgno}"
        );
        let ranges = [
            (hb_new, hb_new + SLOT_LEN),
            (ROWS_AT, rows_end),
            (new_off, new_off + len),
        ];
        seal_patched(pgno, base, out, PAGE_SUM_AT, &ranges);
        Some(Patched::Written { existed: true })
    }

    /// [`DhlFormat::patch_version`] of the delete of cell `at` from the
    /// committed version `vh` (verified by the caller) whose header records
    /// its cells' share of the checksum message (`cells_len`): the new
    /// version shares every other cell, and only the removed cell and the
    /// cells on the shorter side of it are read, the side the version
    /// checksum is patched over (the other side only moves). The cells'
    /// total comes from `cells_len`. `None` declines: a cell read is not
    /// plain, or fewer than `keep` bytes of cells (with their rows) or no
    /// cell would be left.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn delete_at(
        &self,
        pgno: Pgno,
        base: &[u8],
        at: usize,
        keep: usize,
        vh: &SlotHeader,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Option<()> {
        let (ps, n) = (ctx.page_size, vh.n);
        let max_key = self.max_key_len(ps);
        let rows_end = ROWS_AT + ROW_LEN * n;
        let pair = |c: &Span| 2 + c.1;
        let d = plain_cell(pgno, base, row_at(at, vh.slot), rows_end, max_key)?;
        // Every cell's (2 + length), summed: the message's cell part.
        let total = vh.cells_len as usize;
        let lens = total.checked_sub(2 * n)?;
        let left = lens.checked_sub(d.1)? + ROW_LEN * (n - 1);
        if n < 2 || at >= n || left < keep {
            return None;
        }
        // The shorter side's cells, in row order.
        let head = at <= n - 1 - at;
        let side = if head { 0..at } else { at + 1..n };
        plain_cells_into(pgno, base, vh, side, max_key, &mut sc.spans)?;
        let side_len: usize = sc.spans.iter().map(pair).sum();
        // The message is H ‖ A ‖ D ‖ B before and H' ‖ A ‖ B after.
        let (a_len, b_len) = if head {
            (side_len, total.checked_sub(side_len + pair(&d))?)
        } else {
            (total.checked_sub(side_len + pair(&d))?, side_len)
        };
        let put = |g: &mut CrcGather, c: &Span| {
            g.put(&(c.0 as u16).to_be_bytes());
            g.put(&base[c.0..c.0 + c.1]);
        };
        let hb_old = vh.slot * SLOT_LEN;
        // crc(H ‖ A): summed over the side read (`prefix_crc` by hand: the
        // side is chosen by cell count, before the lengths are known).
        let c_ha = if head {
            let mut g = CrcGather::new();
            g.put(&pgno.to_be_bytes());
            g.put(&base[hb_old..hb_old + 28]);
            sc.spans.iter().for_each(|c| put(&mut g, c));
            g.finish()
        } else {
            let mut g = CrcGather::from_crc(!0);
            put(&mut g, &d);
            sc.spans.iter().for_each(|c| put(&mut g, c));
            pagesum::head_crc(vh.crc, !g.finish(), pair(&d) + b_len)
        };
        // The new version: every row but `at`'s, its header.
        out.copy_from_slice(base);
        let slot = 1 - vh.slot;
        let mid = row_at(at, 0);
        copy_column(&mut out[ROWS_AT..mid], &base[ROWS_AT..mid], slot);
        copy_column(
            &mut out[mid..rows_end - ROW_LEN],
            &base[mid + ROW_LEN..rows_end],
            slot,
        );
        let mut h = SlotHeader {
            slot,
            kind: LEAF,
            n: n - 1,
            flags: 0,
            tid: ctx.tid,
            right: 0,
            txn_size: 0,
            page_count: 0,
            cells_len: (total - pair(&d)) as u32,
            crc: 0,
        };
        write_slot(out, &h);
        let hb = slot * SLOT_LEN;
        let c_h2a = c_ha ^ pagesum::run_term(&base[hb_old..hb_old + 28], &out[hb..hb + 28], a_len);
        let c_old = crc32c::crc32c_append(c_ha, &(d.0 as u16).to_be_bytes());
        let c_old = crc32c::crc32c_append(c_old, &base[d.0..d.0 + d.1]);
        h.crc = vh.crc ^ pagesum::advance(c_h2a ^ c_old, b_len);
        write_slot(out, &h);
        // A committed version whose checksum fails (damage the page
        // checksum missed) leaves one that fails (C5).
        // Every cell read, overflowing ones too (in the scratch's own
        // vector: the allocation-count test runs debug builds).
        debug_assert!(
            {
                let summed = |page: &[u8], h: &SlotHeader, spans: &mut Vec<Span>| {
                    spans_into(pgno, page, h, max_key, spans)
                        .map(|()| version_crc(pgno, page, h.slot, spans.iter().map(|c| (c.0, c.1))))
                        .ok()
                };
                summed(base, vh, &mut sc.spans) != Some(vh.crc)
                    || summed(out, &h, &mut sc.spans) == Some(h.crc)
            },
            "removed-cell version checksum, page {pgno}"
        );
        let ranges = [(hb, hb + SLOT_LEN), (ROWS_AT, rows_end)];
        seal_patched(pgno, base, out, PAGE_SUM_AT, &ranges);
        Some(())
    }

    /// [`DhlFormat::patch_version`] of an insert of a plain cell at
    /// position `at` (the key absent) or a delete of cell `at`, over a
    /// committed version the caller verified and whose cells it read into
    /// `sc.spans`: the new version shares every
    /// other cell; an inserted one goes to the top of the highest gap the
    /// committed version leaves beyond the grown offset rows, and a delete
    /// must leave `keep` bytes of cells (with their rows) and a cell. The
    /// new version's checksum is summed (its message changed length), the
    /// page checksum patched.
    #[allow(clippy::too_many_arguments)]
    fn reshape(
        &self,
        pgno: Pgno,
        base: &[u8],
        key: &[u8],
        patch: LeafPatch<'_>,
        at: usize,
        vh: &SlotHeader,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> bool {
        let (ps, n) = (ctx.page_size, vh.n);
        let max_key = self.max_key_len(ps);
        let Scratch {
            spans,
            runs,
            free,
            offsets,
            lens,
            ..
        } = sc;
        offsets.clear();
        lens.clear();
        let mut written = (0, 0);
        match patch {
            LeafPatch::Put(value) => {
                let (klen, vlen) = (key.len(), value.len());
                if klen > max_key || klen >= 1 << 14 || vlen >= 1 << 14 || n + 1 > max_rows(ps) {
                    return false;
                }
                let len =
                    1 + cell::varint_len(klen as u64) + cell::varint_len(vlen as u64) + klen + vlen;
                let grown = ROWS_AT + ROW_LEN * (n + 1);
                if spans.iter().any(|c| c.0 < grown) {
                    // The new offset row would run into a committed cell.
                    return false;
                }
                committed_gaps(grown, ps, spans, runs, free);
                let Some(gap) = free.iter().rev().find(|g| g.1 - g.0 >= len) else {
                    return false;
                };
                let new_off = gap.1 - len;
                out.copy_from_slice(base);
                cell::put_plain_leaf(out, new_off, key, value);
                for (i, c) in spans.iter().enumerate() {
                    if i == at {
                        offsets.push(new_off);
                        lens.push(len);
                    }
                    offsets.push(c.0);
                    lens.push(c.1);
                }
                if at == n {
                    offsets.push(new_off);
                    lens.push(len);
                }
                written = (new_off, new_off + len);
            }
            LeafPatch::Delete { keep } => {
                let left: usize = spans
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != at)
                    .map(|(_, c)| ROW_LEN + c.1)
                    .sum();
                if n < 2 || at >= n || left < keep {
                    return false;
                }
                out.copy_from_slice(base);
                for (i, c) in spans.iter().enumerate() {
                    if i != at {
                        offsets.push(c.0);
                        lens.push(c.1);
                    }
                }
            }
        }
        let slot = 1 - vh.slot;
        let mut h = write_shared_version(out, slot, (LEAF, 0), offsets, lens, ctx.tid);
        let inserted = (written.1 > written.0).then_some(written);
        h.crc = reshaped_crc(pgno, base, out, vh, slot, spans, at, inserted);
        debug_assert!(
            version_crc(pgno, base, vh.slot, spans.iter().map(|c| (c.0, c.1))) != vh.crc
                || h.crc
                    == version_crc(
                        pgno,
                        out,
                        slot,
                        offsets.iter().copied().zip(lens.iter().copied()),
                    ),
            "reshaped version checksum, page {pgno}"
        );
        write_slot(out, &h);
        let hb = slot * SLOT_LEN;
        let ranges = [
            (hb, hb + SLOT_LEN),
            (ROWS_AT, ROWS_AT + ROW_LEN * n.max(offsets.len())),
            written,
        ];
        seal_patched(pgno, base, out, PAGE_SUM_AT, &ranges);
        true
    }

    fn check_len(pgno: Pgno, page: &[u8], ps: usize) -> Result<()> {
        if page.len() != ps || ps < 512 {
            return Err(corrupt(
                pgno,
                format!("page buffer of {} bytes", page.len()),
            ));
        }
        Ok(())
    }

    /// Set the TID of every version on the page for which `doomed` holds
    /// to INV (\[DHL\] §III-B: "invalidate the updated slot-header"). Only
    /// the 8-byte TID fields change. Returns the versions invalidated.
    pub fn invalidate(&self, page: &mut [u8], pgno: Pgno, doomed: impl Fn(u64) -> bool) -> usize {
        let ps = page.len();
        if ps < 512 {
            return 0;
        }
        if let Some(n) = invalidate_envelope(pgno, page, &doomed) {
            return n;
        }
        if page[0] != MAGIC {
            return 0;
        }
        let mut n = 0;
        let slots: Vec<SlotHeader> = (0..2).filter_map(|s| read_slot(page, s)).collect();
        for h in slots {
            if h.tid != INV && doomed(h.tid) {
                let at = h.slot * SLOT_LEN + 8;
                page[at..at + 8].copy_from_slice(&INV.to_be_bytes());
                n += 1;
            }
        }
        if n > 0 && self.versions_intact(pgno, page) {
            pagesum::seal(pgno, page, PAGE_SUM_AT);
        }
        n
    }

    /// Recovery's repair of one page once the FCC is decided: invalidate
    /// every version above `fcc`, and every version below the visible one
    /// that fails its checksum (cells a torn write reclaimed from it). The
    /// visible version itself is never invalidated: if it is damaged,
    /// reads report it (and the page checksum is left failing, C5). A page
    /// whose page checksum fails (a write torn in bytes no valid version
    /// uses) is resealed. Returns the changes made
    /// (versions invalidated, plus one for a reseal): nonzero means the
    /// page must be written back.
    pub fn repair(&self, page: &mut [u8], pgno: Pgno, fcc: u64) -> usize {
        let ps = page.len();
        if ps < 512 {
            return 0;
        }
        if raw_tid(pgno, page).is_some() {
            return self.invalidate(page, pgno, |t| t > fcc);
        }
        if page[0] != MAGIC {
            return 0;
        }
        let max_key = self.max_key_len(ps);
        let visible = Self::visible_slot(page, fcc).map(|h| h.slot);
        let slots: Vec<SlotHeader> = (0..2).filter_map(|s| read_slot(page, s)).collect();
        let mut n = 0;
        for h in slots {
            let doomed = h.tid != INV
                && (h.tid > fcc
                    || (Some(h.slot) != visible && verified(pgno, page, &h, max_key).is_err()));
            if doomed {
                let at = h.slot * SLOT_LEN + 8;
                page[at..at + 8].copy_from_slice(&INV.to_be_bytes());
                n += 1;
            }
        }
        if (n > 0 || !pagesum::verify(pgno, page, PAGE_SUM_AT)) && self.versions_intact(pgno, page)
        {
            pagesum::seal(pgno, page, PAGE_SUM_AT);
            n += usize::from(n == 0);
        }
        n
    }

    /// Put a commit record into the version `rec.tid` wrote on this page
    /// (metadata embedding). `Ok(false)` if the page holds no such
    /// version (a non-tree page).
    pub fn embed_commit(&self, pgno: Pgno, page: &mut [u8], rec: CommitRecord) -> Result<bool> {
        if page.len() < 512 || page[0] != MAGIC || raw_tid(pgno, page).is_some() {
            return Ok(false);
        }
        let Some(mut h) = (0..2)
            .filter_map(|s| read_slot(page, s))
            .find(|h| h.tid == rec.tid)
        else {
            return Ok(false);
        };
        let hb = h.slot * SLOT_LEN;
        let mut before = [0u8; SLOT_LEN];
        before.copy_from_slice(&page[hb..hb + SLOT_LEN]);
        h.flags |= FLAG_COMMIT;
        h.txn_size = rec.txn_size;
        h.page_count = rec.page_count;
        write_slot(page, &h);
        let cells_len = h.cells_len as usize;
        let ps = page.len();
        if cells_len == 0 || cells_len > 2 * max_rows(ps) + ps {
            // Not recorded: parse the cells again.
            let max_key = self.max_key_len(ps);
            h.crc = with_scratch(|sc| parse_version_into(pgno, page, &h, max_key, &mut sc.spans))?;
            write_slot(page, &h);
            pagesum::seal(pgno, page, PAGE_SUM_AT);
            return Ok(true);
        }
        // Only header bytes changed: the version checksum (message: pgno,
        // header bytes 0..28, then `cells_len` bytes) and the page checksum
        // (the slot header lies before its field) are patched. A version or
        // page that did not match its checksum still does not.
        h.crc ^= pagesum::run_term(&before[..28], &page[hb..hb + 28], cells_len);
        write_slot(page, &h);
        let sum = pagesum::stored(page, PAGE_SUM_AT)
            ^ pagesum::run_term(
                &before,
                &page[hb..hb + SLOT_LEN],
                ps - SUM_LEN - (hb + SLOT_LEN),
            );
        page[PAGE_SUM_AT..PAGE_SUM_AT + SUM_LEN].copy_from_slice(&sum.to_be_bytes());
        Ok(true)
    }
}

impl NodeFormat for DhlFormat {
    fn name(&self) -> &'static str {
        "dhl"
    }

    fn decode(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<Node> {
        self.decode_in(pgno, page, None, ctx)
    }

    fn decode_shared(&self, pgno: Pgno, page: &Arc<[u8]>, ctx: &DecodeCtx) -> Result<Node> {
        self.decode_in(pgno, page, Some(page), ctx)
    }

    fn fits(&self, node: &Node, base: Option<&[u8]>, ctx: &EncodeCtx) -> bool {
        with_scratch(|sc| matches!(self.layout(None, false, node, base, ctx, sc), Ok(Some(_))))
    }

    fn leaf_cell_size(&self, c: &LeafCell) -> usize {
        ROW_LEN + cell::leaf_len(c)
    }

    fn interior_cell_size(&self, c: &InteriorCell) -> usize {
        ROW_LEN + cell::interior_len(c)
    }

    fn capacity(&self, page_size: usize) -> usize {
        page_size - ROWS_AT
    }

    fn encode(
        &self,
        pgno: Pgno,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        out: &mut [u8],
    ) -> Result<()> {
        if !self.encode_if_fits(pgno, node, base, ctx, out)? {
            return Err(Error::InvalidArgument(format!(
                "node for page {pgno} does not fit over its committed version"
            )));
        }
        Ok(())
    }

    fn encode_if_fits(
        &self,
        pgno: Pgno,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        out: &mut [u8],
    ) -> Result<bool> {
        let ps = ctx.page_size;
        if out.len() != ps {
            return Err(Error::InvalidArgument(format!(
                "output buffer of {} bytes for a {ps}-byte page",
                out.len()
            )));
        }
        with_scratch(|sc| self.write_version(pgno, node, base, ctx, out, sc))
    }

    fn patches_leaf(&self, _patch: &LeafPatch<'_>) -> bool {
        true
    }

    fn patch_leaf(
        &self,
        pgno: Pgno,
        base: &[u8],
        key: &[u8],
        patch: LeafPatch<'_>,
        order: &dyn KeyOrder,
        ctx: &EncodeCtx,
        out: &mut [u8],
    ) -> Result<Option<Patched>> {
        Ok(with_scratch(|sc| {
            self.patch_version(pgno, base, key, patch, order, ctx, out, sc)
        }))
    }

    fn max_key_len(&self, page_size: usize) -> usize {
        // An overflow leaf cell is 1 + 3 + 10 + key + 4 bytes plus its
        // 4-byte row; keep every cell within a quarter page.
        self.max_inline_cell(page_size) - 22
    }

    fn max_inline_cell(&self, page_size: usize) -> usize {
        self.capacity(page_size) / 4
    }

    fn needs_base(&self) -> bool {
        true
    }

    fn raw_reserved(&self) -> usize {
        RAW_TAIL
    }

    fn append_split_slack(&self) -> usize {
        1
    }

    fn seal_raw(&self, pgno: Pgno, page: &mut [u8], ctx: &EncodeCtx) {
        write_envelope(pgno, page, ctx.tid);
    }

    fn check_raw(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
        Self::check_len(pgno, page, ctx.page_size)?;
        check_envelope(pgno, page, ctx.committed_tid)
    }

    fn verify_tree(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
        verify_tree_page(self, pgno, page, ctx)
    }

    fn check_free(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
        check_free_page::<Self>(pgno, page, ctx)
    }
}

impl DhlFormat {
    /// [`NodeFormat::encode_if_fits`] with this thread's scratch.
    fn write_version(
        &self,
        pgno: Pgno,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Result<bool> {
        if let (Some(ch), Some(b)) = (ctx.leaf_change, base) {
            let done = match node {
                Node::Leaf(cells) => self
                    .patch_hinted(pgno, cells, ch, b, ctx, out, sc)
                    .is_some(),
                Node::Interior { .. } => self.patch_interior(pgno, node, ch, b, ctx, out, sc),
            };
            if done {
                return Ok(true);
            }
        }
        let Some(lay) = self.layout(Some(pgno), !ctx.base_verified, node, base, ctx, sc)? else {
            return Ok(false);
        };
        match (lay.fresh, base) {
            (false, Some(b)) => out.copy_from_slice(b),
            _ => out.fill(0),
        }
        for &i in &sc.new {
            put_cell(node, i, out, sc.offsets[i]);
        }
        for (i, off) in sc.offsets.iter().enumerate() {
            let at = row_at(i, lay.slot);
            out[at..at + 2].copy_from_slice(&(*off as u16).to_be_bytes());
        }
        let (kind, right) = kind_of(node);
        let mut h = SlotHeader {
            slot: lay.slot,
            kind,
            n: node.len(),
            flags: 0,
            tid: ctx.tid,
            right,
            txn_size: 0,
            page_count: 0,
            cells_len: sc.lens.iter().map(|l| 2 + l).sum::<usize>() as u32,
            crc: 0,
        };
        write_slot(out, &h);
        let full_crc = |out: &[u8]| {
            // The layout placed every cell inside the page: its checksum
            // needs no second parse.
            version_crc(
                pgno,
                out,
                lay.slot,
                sc.offsets
                    .iter()
                    .zip(sc.lens.iter())
                    .map(|(&off, &len)| (off, len)),
            )
        };
        h.crc = match (lay.patch, base) {
            (Some(p), Some(b)) => {
                let c = patched_crc(&p, b, out, lay.slot, sc);
                debug_assert_eq!(c, full_crc(out), "patched version checksum, page {pgno}");
                c
            }
            _ => full_crc(out),
        };
        write_slot(out, &h);
        match base.filter(|_| !lay.fresh && sc.new.len() <= PATCH_CELLS) {
            Some(b) => {
                // Patched from the base's page checksum over the bytes this
                // write changed: a base whose checksum failed leaves one
                // that fails (damage is never sealed, C5).
                let hb = lay.slot * SLOT_LEN;
                let mut ranges = [(0, 0); 2 + PATCH_CELLS];
                ranges[0] = (hb, hb + SLOT_LEN);
                ranges[1] = (ROWS_AT, row_at(node.len(), 0));
                for (r, &i) in ranges[2..].iter_mut().zip(&sc.new) {
                    *r = (sc.offsets[i], sc.offsets[i] + sc.lens[i]);
                }
                seal_patched(pgno, b, out, PAGE_SUM_AT, &ranges);
            }
            None => pagesum::seal(pgno, out, PAGE_SUM_AT),
        }
        Ok(true)
    }
}

impl InPageFormat for DhlFormat {
    const PAGE_SUM_AT: usize = PAGE_SUM_AT;

    fn has_versions(&self, page: &[u8]) -> bool {
        page.len() >= 512 && (page[0] == MAGIC || page[SLOT_LEN] == MAGIC)
    }

    fn versions(&self, pgno: Pgno, page: &[u8]) -> Vec<VersionState> {
        let max_key = self.max_key_len(page.len());
        (0..2)
            .filter_map(|s| read_slot(page, s))
            .map(|h| VersionState {
                index: h.slot,
                tid: h.tid,
                record: (h.flags & FLAG_COMMIT != 0).then_some(CommitRecord {
                    tid: h.tid,
                    txn_size: h.txn_size,
                    page_count: h.page_count,
                }),
                intact: verified(pgno, page, &h, max_key).is_ok(),
            })
            .collect()
    }

    fn visible(&self, _pgno: Pgno, page: &[u8], fcc: u64) -> Option<usize> {
        Self::visible_slot(page, fcc).map(|h| h.slot)
    }

    fn invalidate(&self, page: &mut [u8], pgno: Pgno, doomed: &dyn Fn(u64) -> bool) -> usize {
        DhlFormat::invalidate(self, page, pgno, doomed)
    }

    fn repair(&self, page: &mut [u8], pgno: Pgno, fcc: u64) -> usize {
        DhlFormat::repair(self, page, pgno, fcc)
    }

    fn embed_commit(&self, pgno: Pgno, page: &mut [u8], rec: CommitRecord) -> Result<bool> {
        DhlFormat::embed_commit(self, pgno, page, rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: usize = 512;

    /// A whole-row column copy writes one column, row for row, from the
    /// other column of the source rows, and leaves the rest alone.
    #[test]
    fn copy_column_moves_one_column_row_for_row() {
        let from: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for to in [0, 1] {
            let before: Vec<u8> = (0..40u8).map(|i| 200 - i).collect();
            let mut out = before.clone();
            copy_column(&mut out, &from, to);
            for r in 0..10 {
                let (o, f) = (&out[4 * r..4 * r + 4], &from[4 * r..4 * r + 4]);
                let b = &before[4 * r..4 * r + 4];
                assert_eq!(
                    o[2 * to..2 * to + 2],
                    f[2 * (1 - to)..2 * (1 - to) + 2],
                    "row {r}"
                );
                assert_eq!(
                    o[2 * (1 - to)..2 * (1 - to) + 2],
                    b[2 * (1 - to)..2 * (1 - to) + 2]
                );
            }
        }
    }

    #[test]
    fn version_checksum_is_the_documented_message() {
        // crc32c(pgno, header +0..+28, then each u16 offset and cell),
        // summed piece by piece, across chunk boundaries of the gatherer.
        let page: Vec<u8> = (0..8192u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let cells: Vec<(usize, usize)> = (0..40).map(|i| (100 + i * 190, 1 + i * 4)).collect();
        let mut want = crc32c::crc32c_append(0, &9u32.to_be_bytes());
        want = crc32c::crc32c_append(want, &page[SLOT_LEN..SLOT_LEN + 28]);
        for &(off, len) in &cells {
            want = crc32c::crc32c_append(want, &(off as u16).to_be_bytes());
            want = crc32c::crc32c_append(want, &page[off..off + len]);
        }
        assert_eq!(version_crc(9, &page, 1, cells.iter().copied()), want);
    }

    fn ectx(tid: u64) -> EncodeCtx {
        EncodeCtx::new(PS, tid, true)
    }

    fn dctx(fcc: u64) -> DecodeCtx<'static> {
        DecodeCtx {
            page_size: PS,
            committed_tid: fcc,
            checksums: true,
            order: &crate::base::BYTEWISE,
        }
    }

    fn leaf(keys: &[(&str, usize)]) -> Node {
        Node::Leaf(
            keys.iter()
                .map(|(k, l)| LeafCell {
                    key: k.as_bytes().into(),
                    value: Value::Inline(vec![k.as_bytes()[0]; *l].into()),
                })
                .collect(),
        )
    }

    fn enc(node: &Node, base: Option<&[u8]>, tid: u64) -> Vec<u8> {
        let mut out = vec![0u8; PS];
        DhlFormat
            .encode(7, node, base, &ectx(tid), &mut out)
            .unwrap();
        out
    }

    #[test]
    fn versions_alternate_and_visibility_follows_the_fcc() {
        let f = DhlFormat;
        let v1 = leaf(&[("a", 10), ("b", 10)]);
        let p1 = enc(&v1, None, 1);
        assert_eq!(f.decode(7, &p1, &dctx(1)).unwrap(), v1);
        assert!(f.decode(7, &p1, &dctx(0)).is_err(), "TID 1 above FCC 0");
        let v2 = leaf(&[("a", 10), ("c", 12)]);
        let p2 = enc(&v2, Some(&p1), 2);
        assert_eq!(
            f.decode(7, &p2, &dctx(1)).unwrap(),
            v1,
            "uncommitted is invisible"
        );
        assert_eq!(f.decode(7, &p2, &dctx(2)).unwrap(), v2);
        // The committed version's bytes are untouched: only slot 1, column
        // 1 and free space changed.
        let h1 = read_slot(&p1, 0).unwrap();
        let cells1 = verified(7, &p1, &h1, 100).unwrap();
        for (off, len, ..) in cells1 {
            assert_eq!(p1[off..off + len], p2[off..off + len]);
        }
        assert_eq!(p1[..SLOT_LEN], p2[..SLOT_LEN]);
        let v3 = leaf(&[("c", 12), ("d", 40)]);
        let p3 = enc(&v3, Some(&p2), 3);
        assert_eq!(
            read_slot(&p3, 0).unwrap().tid,
            3,
            "the older header is reused"
        );
        assert_eq!(f.decode(7, &p3, &dctx(3)).unwrap(), v3);
        assert_eq!(f.decode(7, &p3, &dctx(2)).unwrap(), v2);
    }

    #[test]
    fn interior_moves_and_splits_are_patched_beside_the_committed_version() {
        let f = DhlFormat;
        let cells: Vec<InteriorCell> = (0..20u32)
            .map(|i| InteriorCell {
                key: format!("key{i:03}").as_bytes().into(),
                child: 100 + i,
            })
            .collect();
        let v1 = Node::Interior {
            cells: cells.clone(),
            right: 99,
        };
        let p1 = enc(&v1, None, 1);
        let mut split = cells.clone();
        split[8].child = 500;
        split.insert(
            8,
            InteriorCell {
                key: b"key007x".as_slice().into(),
                child: 501,
            },
        );
        let mut moved = cells.clone();
        moved[3].child = 502;
        let cases = [
            (
                LeafChange::Split(8),
                Node::Interior {
                    cells: split,
                    right: 99,
                },
            ),
            (
                LeafChange::Child(3),
                Node::Interior {
                    cells: moved,
                    right: 99,
                },
            ),
            (LeafChange::Child(20), Node::Interior { cells, right: 503 }),
        ];
        for (ch, v2) in cases {
            let mut ctx = ectx(2);
            ctx.base_verified = true;
            let mut out = vec![0u8; PS];
            assert!(
                with_scratch(|sc| f.patch_interior(7, &v2, ch, &p1, &ctx, &mut out, sc)),
                "{ch:?}"
            );
            assert_eq!(f.decode(7, &out, &dctx(2)).unwrap(), v2, "{ch:?}");
            assert_eq!(f.decode(7, &out, &dctx(1)).unwrap(), v1, "{ch:?}");
            f.verify_tree(7, &out, &dctx(2)).unwrap();
        }
    }

    #[test]
    fn rewriting_a_spilled_version_keeps_the_committed_one() {
        let f = DhlFormat;
        let v1 = leaf(&[("a", 10)]);
        let p1 = enc(&v1, None, 1);
        let spilled = enc(&leaf(&[("a", 10), ("b", 30)]), Some(&p1), 2);
        let v2 = leaf(&[("b", 30), ("z", 5)]);
        let p2 = enc(&v2, Some(&spilled), 2);
        assert_eq!(f.decode(7, &p2, &dctx(1)).unwrap(), v1);
        assert_eq!(f.decode(7, &p2, &dctx(2)).unwrap(), v2);
    }

    #[test]
    fn full_committed_page_forces_a_move_but_subsets_fit() {
        let f = DhlFormat;
        let mut keys = Vec::new();
        let names: Vec<String> = (0..40).map(|i| format!("k{i:03}")).collect();
        for n in &names {
            keys.push((n.as_str(), 6));
            if !f.fits(&leaf(&keys), None, &ectx(1)) {
                keys.pop();
                break;
            }
        }
        let full = leaf(&keys);
        let p = enc(&full, None, 1);
        // Adding a cell needs space the committed version occupies.
        let mut more = keys.clone();
        more.push(("zzz", 6));
        assert!(!f.fits(&leaf(&more), Some(&p), &ectx(2)));
        // Deleting only shares cells and shrinks the rows: always fits.
        let fewer = leaf(&keys[1..]);
        assert!(f.fits(&fewer, Some(&p), &ectx(2)));
        let empty_interior = Node::Interior {
            cells: vec![],
            right: 9,
        };
        assert!(f.fits(&empty_interior, Some(&p), &ectx(2)));
    }

    #[test]
    fn torn_or_damaged_versions_are_detected() {
        let f = DhlFormat;
        let v1 = leaf(&[("a", 10), ("b", 200)]);
        let p1 = enc(&v1, None, 1);
        for at in [2usize, 9, 30, ROWS_AT, PS - 5, PS - 100] {
            let mut bad = p1.clone();
            bad[at] ^= 0x40;
            let r = f.decode(7, &bad, &dctx(1));
            assert!(r.is_err() || r.unwrap() != v1, "flip at {at} undetected");
        }
        // Bytes no version uses (the page checksum, free space): reads
        // still return the version, the integrity check reports the page.
        assert!(f.verify_tree(7, &p1, &dctx(1)).is_ok());
        for at in [PAGE_SUM_AT, ROWS_AT + 40, PS / 2] {
            let mut bad = p1.clone();
            bad[at] ^= 0x40;
            assert_eq!(f.decode(7, &bad, &dctx(1)).unwrap(), v1);
            let e = f.verify_tree(7, &bad, &dctx(1)).unwrap_err().to_string();
            assert!(e.contains("version 0 (TID 1, visible) intact"), "{e}");
        }
        // An in-flight version torn mid-page is invisible to recovery and
        // does not disturb the committed one.
        let v2 = leaf(&[("a", 10), ("b", 200), ("c", 150)]);
        let p2 = enc(&v2, Some(&p1), 2);
        let mut torn = p2.clone();
        torn[256..].copy_from_slice(&p1[256..]);
        assert_eq!(f.scan(7, &torn).tids, vec![1]);
        assert!(
            f.decode(7, &torn, &dctx(1)).is_err(),
            "torn version reported"
        );
        assert_eq!(f.invalidate(&mut torn, 7, |t| t > 1), 1, "as recovery does");
        assert_eq!(f.decode(7, &torn, &dctx(1)).unwrap(), v1);
        // A version two transactions ahead cannot be legitimate.
        let mut ahead = p2.clone();
        ahead[SLOT_LEN + 8..SLOT_LEN + 16].copy_from_slice(&3u64.to_be_bytes());
        assert!(f.decode(7, &ahead, &dctx(1)).is_err());
    }

    #[test]
    fn raw_envelope_roundtrip_and_invalidation() {
        let f = DhlFormat;
        let mut page = vec![3u8; PS];
        f.seal_raw(9, &mut page, &ectx(5));
        assert!(f.check_raw(9, &page, &dctx(5)).is_ok());
        assert!(f.check_raw(9, &page, &dctx(4)).is_err());
        assert!(f.check_raw(8, &page, &dctx(5)).is_err(), "misdirected");
        assert_eq!(f.scan(9, &page).tids, vec![5]);
        assert_eq!(f.invalidate(&mut page, 9, |t| t == 5), 1);
        assert!(f.scan(9, &page).tids.is_empty());
    }

    #[test]
    fn embedded_commit_record_is_found() {
        let f = DhlFormat;
        let p1 = enc(&leaf(&[("a", 1)]), None, 1);
        let mut p2 = enc(&leaf(&[("b", 1)]), Some(&p1), 2);
        let rec = CommitRecord {
            tid: 2,
            txn_size: 3,
            page_count: 10,
        };
        assert!(f.embed_commit(7, &mut p2, rec).unwrap());
        let s = f.scan(7, &p2);
        assert_eq!(s.records, vec![rec]);
        let mut t = s.tids.clone();
        t.sort();
        assert_eq!(t, vec![1, 2]);
        assert_eq!(f.decode(7, &p2, &dctx(2)).unwrap(), leaf(&[("b", 1)]));
        assert_eq!(f.invalidate(&mut p2, 7, |t| t > 1), 1);
        assert_eq!(f.scan(7, &p2).tids, vec![1]);
        assert_eq!(f.decode(7, &p2, &dctx(2)).unwrap(), leaf(&[("a", 1)]));
    }

    #[test]
    fn an_embedded_record_patches_both_checksums_like_a_full_sum() {
        let f = DhlFormat;
        let p1 = enc(&leaf(&[("a", 1), ("c", 40)]), None, 1);
        let p2 = enc(&leaf(&[("a", 1), ("b", 300), ("c", 40)]), Some(&p1), 2);
        let rec = CommitRecord {
            tid: 2,
            txn_size: 1,
            page_count: 12,
        };
        let mut patched = p2.clone();
        assert!(f.embed_commit(7, &mut patched, rec).unwrap());
        let h = read_slot(&patched, 1).unwrap();
        assert_eq!((h.tid, h.flags & FLAG_COMMIT), (2, FLAG_COMMIT));
        assert!(h.cells_len > 0, "the length is recorded");
        let mut spans = Vec::new();
        let full = parse_version_into(7, &patched, &h, 100, &mut spans).unwrap();
        assert_eq!(h.crc, full, "version checksum as summed in full");
        assert!(pagesum::verify(7, &patched, PAGE_SUM_AT));
        // Without the length field the record is embedded by a full sum.
        let mut old = p2.clone();
        old[SLOT_LEN + 5..SLOT_LEN + 8].fill(0);
        let mut hh = read_slot(&old, 1).unwrap();
        hh.crc = parse_version_into(7, &old, &hh, 100, &mut spans).unwrap();
        write_slot(&mut old, &hh);
        pagesum::seal(7, &mut old, PAGE_SUM_AT);
        assert!(f.embed_commit(7, &mut old, rec).unwrap());
        let h = read_slot(&old, 1).unwrap();
        assert_eq!(
            h.crc,
            parse_version_into(7, &old, &h, 100, &mut spans).unwrap()
        );
        assert!(pagesum::verify(7, &old, PAGE_SUM_AT));
        assert_eq!(
            f.decode(7, &patched, &dctx(2)).unwrap(),
            f.decode(7, &old, &dctx(2)).unwrap()
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let f = DhlFormat;
        let mut rng = 0x1234_5678u64;
        for round in 0..4000 {
            let mut page = vec![0u8; PS];
            for b in page.iter_mut() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                *b = rng as u8;
            }
            page[0] = MAGIC;
            page[1] = if round % 2 == 0 { LEAF } else { INTERIOR };
            page[2] = 0;
            page[8..16].copy_from_slice(&1u64.to_be_bytes());
            let _ = f.decode(9, &page, &dctx(u64::MAX - 1));
            let _ = f.scan(9, &page);
            let _ = f.fits(&leaf(&[("a", 3)]), Some(&page), &ectx(2));
            let mut out = vec![0u8; PS];
            let _ = f.encode(9, &leaf(&[("a", 3)]), Some(&page), &ectx(2), &mut out);
            let _ = f.embed_commit(
                9,
                &mut page,
                CommitRecord {
                    tid: 1,
                    txn_size: 1,
                    page_count: 1,
                },
            );
        }
    }
}
