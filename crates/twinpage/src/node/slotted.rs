//! The plain slotted-page format used by the SQLite-style modes.
//!
//! Layout (big-endian integers), documented byte by byte in ARCHITECTURE.md:
//!
//! ```text
//! 0      u8   page type: 0x0D leaf, 0x05 interior
//! 1      u8   reserved (0)
//! 2..4   u16  cell count n
//! 4..8   u32  offset of the first cell byte (cells lie at the end)
//! 8..12  u32  interior: rightmost child; leaf: bytes of holes among the
//!             cells (zeroed cells removed in place; 0 when packed)
//! 12..16 u32  page checksum: crc32c(pgno, bytes 0..12, bytes 16..ps)
//!             (0 in a database created without page checksums)
//! 16..   u16  n cell offsets, in key order
//! ```
//!
//! Overflow pages and free-list trunks end with a 4-byte page checksum,
//! crc32c(pgno, bytes 0..ps-4) ([`NodeFormat::raw_reserved`] = 4).
//!
//! Leaf cell: `flags u8` (bit 0: the value overflows, bit 1: the key
//! overflows), `varint key_len`, `varint value_len`, key, then the value
//! (inline) or a u32 overflow head page. Interior cell: `varint key_len`,
//! key, `u32 child`. An overflowing key is stored as `node::cell`
//! describes (local bytes and a chain head).

use super::cell::{self, Reader};
use super::{
    Bytes, DecodeCtx, EncodeCtx, InteriorCell, LeafCell, LeafChange, LeafPatch, Node, NodeFormat,
    Patched,
};
use crate::base::pagesum::{self, SUM_LEN};
use crate::base::{Error, KeyOrder, Pgno, Result};
use std::sync::Arc;

/// Page-type byte of a leaf.
pub const LEAF: u8 = 0x0D;
/// Page-type byte of an interior node.
pub const INTERIOR: u8 = 0x05;
/// Size of the page header.
pub const HEADER: usize = 16;
/// Offset of a tree page's checksum.
pub const SUM_AT: usize = 12;

/// Seal tree page `pgno` after a change to its bytes (the OFF journal's
/// embedded commit record).
pub fn seal_tree(pgno: Pgno, page: &mut [u8]) {
    pagesum::seal(pgno, page, SUM_AT);
}

fn raw_sum_at(page: &[u8]) -> usize {
    page.len() - SUM_LEN
}
/// Bytes [`SlottedMetaFormat`] keeps free at the end of every tree page
/// for an embedded commit record (OFF with metadata embedding).
pub const META_TRAILER: usize = 16;

/// The plain slotted format.
#[derive(Debug, Default, Clone, Copy)]
pub struct SlottedFormat;

/// The slotted format with [`META_TRAILER`] bytes reserved at the end of
/// each tree page, where OFF with metadata embedding (the paper's OFF_OPT)
/// stores the FCC and page count of the commit. Pages decode exactly like
/// [`SlottedFormat`] pages (the trailer lies outside every cell), so a file
/// can switch between the two.
#[derive(Debug, Default, Clone, Copy)]
pub struct SlottedMetaFormat;

fn be_u16(p: &[u8], at: usize) -> usize {
    u16::from_be_bytes([p[at], p[at + 1]]) as usize
}

fn be_u32(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

fn decode(
    pgno: Pgno,
    page: &[u8],
    share: Option<&Arc<[u8]>>,
    ctx: &DecodeCtx,
    max_key: usize,
) -> Result<Node> {
    let corrupt = |what: String| Error::corrupt("database", pgno, what);
    if page.len() != ctx.page_size || page.len() < HEADER {
        return Err(corrupt(format!("page buffer of {} bytes", page.len())));
    }
    if ctx.checksums && !pagesum::verify(pgno, page, SUM_AT) {
        return Err(corrupt(
            "page checksum mismatch: the page is damaged, torn, or belongs at another \
             offset"
                .into(),
        ));
    }
    let kind = page[0];
    if kind != LEAF && kind != INTERIOR {
        return Err(corrupt(format!("not a tree page (type byte {kind:#04x})")));
    }
    let n = be_u16(page, 2);
    let content = be_u32(page, 4) as usize;
    if HEADER + 2 * n > page.len() || content > page.len() || content < HEADER + 2 * n {
        return Err(corrupt(format!(
            "cell count {n} / content offset {content} do not fit the page"
        )));
    }
    // `n` is bounded by the page size (checked above): sized once.
    let mut leaf = Vec::with_capacity(if kind == LEAF { n } else { 0 });
    let mut interior: Vec<InteriorCell> = Vec::with_capacity(if kind == LEAF { 0 } else { n });
    let bytewise = ctx.order.bytewise();
    let ordered = |a: &Bytes, b: &Bytes| {
        // Overflowing keys are stubs here: complete_keys orders them.
        a.is_stub()
            || b.is_stub()
            || if bytewise {
                a.as_slice() < b.as_slice()
            } else {
                ctx.order.compare(a, b).is_lt()
            }
    };
    // Where the previous cell's key lies when it was a plain cell: plain
    // neighbours (most cells) are ordered on the page's bytes.
    let mut prev: Option<(usize, usize)> = None;
    // A leaf's cell bytes, for S1.
    let mut cell_bytes = 0;
    for i in 0..n {
        let off = be_u16(page, HEADER + 2 * i);
        if off < content || off >= page.len() {
            return Err(corrupt(format!(
                "cell {i} offset {off} outside the cell area"
            )));
        }
        let mut r = Reader::new(page, off, page.len(), pgno).sharing(share);
        let in_order = if kind == LEAF {
            if let Some((c, ks, vs)) = r.plain(max_key) {
                let ok = match prev {
                    Some((pk, pv)) if bytewise => cell::key_lt(&page[pk..pv], &page[ks..vs]),
                    Some((pk, pv)) => ctx.order.compare(&page[pk..pv], &page[ks..vs]).is_lt(),
                    None => leaf
                        .last()
                        .is_none_or(|p: &LeafCell| ordered(&p.key, &c.key)),
                };
                prev = Some((ks, vs));
                cell_bytes += r.pos - off;
                leaf.push(c);
                if !ok {
                    return Err(corrupt(format!("cell {i}: keys out of order")));
                }
                continue;
            }
            prev = None;
            let c = r.leaf(i, max_key)?;
            cell_bytes += r.pos - off;
            let ok = leaf
                .last()
                .is_none_or(|p: &LeafCell| ordered(&p.key, &c.key));
            leaf.push(c);
            ok
        } else {
            let c = r.interior(i, max_key)?;
            let ok = interior.last().is_none_or(|p| ordered(&p.key, &c.key));
            interior.push(c);
            ok
        };
        if !in_order {
            return Err(corrupt(format!("cell {i}: keys out of order")));
        }
    }
    if kind == LEAF {
        // S1: the area holds the cells and the counted holes, and, on a
        // page of the format with a trailer, the trailer.
        let rest = (be_u32(page, 8) as usize)
            .checked_add(cell_bytes)
            .and_then(|used| (page.len() - content).checked_sub(used));
        if !matches!(rest, Some(0 | META_TRAILER)) {
            return Err(corrupt(format!(
                "cell area of {} bytes holds {cell_bytes} bytes of cells and {} of holes",
                page.len() - content,
                be_u32(page, 8)
            )));
        }
        Ok(Node::Leaf(leaf))
    } else {
        let right = be_u32(page, 8);
        if right == 0 {
            return Err(corrupt("interior node without a right child".into()));
        }
        Ok(Node::Interior {
            cells: interior,
            right,
        })
    }
}

fn used(node: &Node) -> usize {
    match node {
        Node::Leaf(c) => c.iter().map(|c| 2 + cell::leaf_len(c)).sum(),
        Node::Interior { cells, .. } => cells.iter().map(|c| 2 + cell::interior_len(c)).sum(),
    }
}

fn encode(pgno: Pgno, node: &Node, ctx: &EncodeCtx, reserve: usize, out: &mut [u8]) -> Result<()> {
    let ps = ctx.page_size;
    if used(node) > ps - HEADER - reserve || out.len() != ps {
        return Err(Error::InvalidArgument(format!(
            "node for page {pgno} does not fit a {ps}-byte page"
        )));
    }
    // Every byte is written below except the gap between the offsets and
    // the cells (and the reserved trailer): only those are zeroed, not
    // the whole page (the buffer may be a recycled one).
    out[..HEADER].fill(0);
    out[ps - reserve..].fill(0);
    let mut end = ps - reserve;
    match node {
        Node::Leaf(cells) => {
            out[0] = LEAF;
            for (i, c) in cells.iter().enumerate() {
                end -= cell::leaf_len(c);
                out[HEADER + 2 * i..HEADER + 2 * i + 2]
                    .copy_from_slice(&(end as u16).to_be_bytes());
                cell::put_leaf(out, end, c);
            }
        }
        Node::Interior { cells, right } => {
            out[0] = INTERIOR;
            out[8..12].copy_from_slice(&right.to_be_bytes());
            for (i, c) in cells.iter().enumerate() {
                end -= cell::interior_len(c);
                out[HEADER + 2 * i..HEADER + 2 * i + 2]
                    .copy_from_slice(&(end as u16).to_be_bytes());
                cell::put_interior(out, end, c);
            }
        }
    }
    out[HEADER + 2 * node.len()..end].fill(0);
    out[2..4].copy_from_slice(&(node.len() as u16).to_be_bytes());
    out[4..8].copy_from_slice(&(end as u32).to_be_bytes());
    if ctx.checksums {
        seal_tree(pgno, out);
    }
    Ok(())
}

/// The bytes of holes a leaf's cell area holds (header bytes 8..12): the
/// zeroed bytes of cells removed where they lay (ARCHITECTURE.md S1).
fn holes(page: &[u8]) -> usize {
    be_u32(page, 8) as usize
}

/// `base` with the cell of slot `i` (bytes `off..end`) removed into `out`
/// where it lies, as SQLite drops a cell: its bytes are zeroed and added
/// to the leaf's holes (or, the lowest cell, given back to the gap), its
/// offset entry goes and the later ones move down one slot. No other cell
/// moves, so the checksum is patched over the header, the slots from `i`
/// and the cell alone. Writes the changed runs to `ranges[0..3]`; false
/// (with `out` unspecified) if another cell starts inside the removed
/// one's bytes (damage).
fn remove_hole(
    base: &[u8],
    out: &mut [u8],
    (n, content): (usize, usize),
    (i, off, end): (usize, usize, usize),
    ranges: &mut [(usize, usize); 4],
) -> bool {
    // Every other slot at once, without a branch per slot (vectorizes):
    // `o - off < end - off` is `off <= o < end` in wrapping arithmetic.
    let starts_inside = |slots: &[u8]| {
        slots.chunks_exact(2).fold(false, |hit, s| {
            hit | ((u16::from_be_bytes([s[0], s[1]]) as usize).wrapping_sub(off) < end - off)
        })
    };
    if starts_inside(&base[HEADER..HEADER + 2 * i])
        || starts_inside(&base[HEADER + 2 * (i + 1)..HEADER + 2 * n])
    {
        return false;
    }
    out.copy_from_slice(base);
    out[off..end].fill(0);
    out.copy_within(HEADER + 2 * (i + 1)..HEADER + 2 * n, HEADER + 2 * i);
    out[HEADER + 2 * (n - 1)..HEADER + 2 * n].fill(0);
    out[2..4].copy_from_slice(&((n - 1) as u16).to_be_bytes());
    if off == content {
        out[4..8].copy_from_slice(&(end as u32).to_be_bytes());
    } else {
        out[8..12].copy_from_slice(&((holes(base) + end - off) as u32).to_be_bytes());
    }
    ranges[0] = (2, 12);
    ranges[1] = (HEADER + 2 * i, HEADER + 2 * n);
    ranges[2] = (off, end);
    true
}

/// Give the cell just written at `at` (below the cells, `content` the old
/// top of the cell area) slot `i` of `out`, a copy of a page of `n`
/// cells: the slots from `i` move one up. Writes the changed runs to
/// `ranges[1..3]`.
fn insert_slot(
    out: &mut [u8],
    (n, content): (usize, usize),
    (i, at): (usize, usize),
    ranges: &mut [(usize, usize); 4],
) {
    out.copy_within(HEADER + 2 * i..HEADER + 2 * n, HEADER + 2 * (i + 1));
    out[HEADER + 2 * i..HEADER + 2 * i + 2].copy_from_slice(&(at as u16).to_be_bytes());
    out[2..4].copy_from_slice(&((n + 1) as u16).to_be_bytes());
    out[4..8].copy_from_slice(&(at as u32).to_be_bytes());
    ranges[1] = (HEADER + 2 * i, HEADER + 2 * (n + 1));
    ranges[2] = (at, content);
}

/// [`NodeFormat::encode_changed`]: `base` (a leaf this format wrote)
/// with one cell changed, patched in a copy and its checksum patched over
/// the bytes that changed:
/// - a new value of the same encoded size: the cell rewritten in place;
/// - an inserted cell: written just below the others, its offset entry
///   inserted at its slot;
/// - a removed cell: zeroed where it lies, a hole ([`remove_hole`]), its
///   entry gone.
///
/// The reserved trailer is cleared. Anything that does not match `base`
/// (counts, the changed or neighbouring keys, room on the page) declines.
fn encode_changed(
    pgno: Pgno,
    node: &Node,
    base: &[u8],
    change: LeafChange,
    ctx: &EncodeCtx,
    reserve: usize,
    out: &mut [u8],
) -> bool {
    let ps = ctx.page_size;
    let cells = match node {
        Node::Leaf(cells) => cells,
        Node::Interior { cells, right } => {
            return encode_interior_changed(pgno, (cells, *right), base, change, ctx, reserve, out)
        }
    };
    let Some((n, content, limit)) = patchable(base, out, ps, reserve, LEAF) else {
        return false;
    };
    if !change.fits_counts(cells.len(), n) {
        return false;
    }
    let max_key = SlottedFormat.max_key_len(ps);
    // The key of committed cell `j` and the end of its bytes, if intact.
    let base_cell = |j: usize| -> Option<(&[u8], usize, usize)> {
        let off = be_u16(base, HEADER + 2 * j);
        if off < content || off >= limit {
            return None;
        }
        let mut r = Reader::new(base, off, limit, pgno);
        let key = r.leaf_key(j, max_key).ok()?;
        Some((key, off, r.pos))
    };
    let key_is = |j: usize, key: &Bytes| base_cell(j).is_some_and(|(k, ..)| k == &key[..]);
    let mut ranges = [(2, 8), (0, 0), (0, 0), (limit, ps)];
    match change {
        LeafChange::Value(i) => {
            let cell = &cells[i];
            let Some((key, off, end)) = base_cell(i) else {
                return false;
            };
            let len = cell::leaf_len(cell);
            if key != &cell.key[..] || end - off != len {
                return false;
            }
            out.copy_from_slice(base);
            cell::put_leaf(out, off, cell);
            // The header is unchanged: its run gives way to the cell's.
            ranges[0] = (off, off + len);
        }
        LeafChange::Inserted(i) => {
            let cell = &cells[i];
            let len = cell::leaf_len(cell);
            // The neighbours are the committed cells around the slot.
            let neighbours_match = (i == 0 || key_is(i - 1, &cells[i - 1].key))
                && (i == n || key_is(i, &cells[i + 1].key));
            if !neighbours_match || content < HEADER + 2 * (n + 1) + len {
                return false;
            }
            let at = content - len;
            out.copy_from_slice(base);
            cell::put_leaf(out, at, cell);
            insert_slot(out, (n, content), (i, at), &mut ranges);
        }
        LeafChange::Removed(i) => {
            let Some((_, off, end)) = base_cell(i) else {
                return false;
            };
            let neighbours_match = (i == 0 || key_is(i - 1, &cells[i - 1].key))
                && (i + 1 == n || key_is(i + 1, &cells[i].key));
            if !neighbours_match
                || !remove_hole(base, out, (n, content), (i, off, end), &mut ranges)
            {
                return false;
            }
        }
        LeafChange::Child(_) | LeafChange::Split(_) | LeafChange::Dropped(_) => return false,
    }
    seal_changed(pgno, base, out, limit, ctx, &ranges);
    true
}

/// The cell count, the first cell byte and the end of the cell area of
/// `base`, a page of type `kind` with `reserve` trailer bytes, when its
/// header is one a patch can work from (`out` a page too); else `None`.
fn patchable(
    base: &[u8],
    out: &[u8],
    ps: usize,
    reserve: usize,
    kind: u8,
) -> Option<(usize, usize, usize)> {
    if base.len() != ps || out.len() != ps || ps < HEADER + reserve || base[0] != kind {
        return None;
    }
    let n = be_u16(base, 2);
    let content = be_u32(base, 4) as usize;
    let limit = ps - reserve;
    (content <= limit && HEADER + 2 * n <= content && cells_end_by(base, (n, content, limit), kind))
        .then_some((n, content, limit))
}

/// Whether the cells of `base` (a page of type `kind` with `n` cells from
/// `content`) all end by `limit`. A page this format wrote always does;
/// one written by the variant without the trailer (a file may switch
/// between the two) may have a cell in the bytes a patch clears, and is
/// encoded in full instead. The cell that ends last starts last.
fn cells_end_by(base: &[u8], (n, content, limit): (usize, usize, usize), kind: u8) -> bool {
    if limit == base.len() || n == 0 {
        return true;
    }
    let top = (0..n)
        .map(|j| be_u16(base, HEADER + 2 * j))
        .max()
        .unwrap_or(content);
    if top < content || top >= limit {
        return false;
    }
    let max_key = SlottedFormat.max_key_len(base.len());
    let mut r = Reader::new(base, top, base.len(), 0);
    let parsed = if kind == LEAF {
        r.leaf_key(0, max_key).is_ok()
    } else {
        r.interior_key(0, max_key).is_ok()
    };
    parsed && r.pos <= limit
}

/// The end of a patch of `base` into `out`: the reserved trailer (from
/// `limit`) cleared, the page checksum patched over the changed `ranges`
/// (which include the trailer's).
fn seal_changed(
    pgno: Pgno,
    base: &[u8],
    out: &mut [u8],
    limit: usize,
    ctx: &EncodeCtx,
    ranges: &[(usize, usize)],
) {
    out[limit..].fill(0);
    if !ctx.checksums {
        return;
    }
    // Patching reads the changed runs twice (old and new): past half a
    // page, one sum of the new page costs less. `base` is the image the
    // pager verified, so neither way seals damage.
    let s = if 2 * ranges.iter().map(|&(s, e)| e - s).sum::<usize>() > ctx.page_size {
        pagesum::page_sum(pgno, out, SUM_AT)
    } else {
        pagesum::patched_sum(pgno, base, out, SUM_AT, ranges)
    };
    debug_assert!(
        !pagesum::verify(pgno, base, SUM_AT) || s == pagesum::page_sum(pgno, out, SUM_AT),
        "patched checksum of page {pgno}"
    );
    out[SUM_AT..SUM_AT + SUM_LEN].copy_from_slice(&s.to_be_bytes());
}

/// [`encode_changed`] of an interior node (`cells` and its right child),
/// `base` an interior page this format wrote:
/// - a moved child: its four bytes rewritten (the end of its cell, or the
///   header's right child);
/// - a split: the new cell written just below the others with its slot
///   inserted, and the next slot's child moved.
///
/// Declines as [`encode_changed`] does.
fn encode_interior_changed(
    pgno: Pgno,
    (cells, right): (&[InteriorCell], Pgno),
    base: &[u8],
    change: LeafChange,
    ctx: &EncodeCtx,
    reserve: usize,
    out: &mut [u8],
) -> bool {
    let ps = ctx.page_size;
    let Some((n, content, limit)) = patchable(base, out, ps, reserve, INTERIOR) else {
        return false;
    };
    if !change.fits_interior(cells.len(), n) {
        return false;
    }
    let max_key = SlottedFormat.max_key_len(ps);
    let mut scratch = Vec::new();
    // Where the child of committed cell `b` is, if that cell holds the
    // key of `c` (the node's cell it must be).
    let mut child_at = |b: usize, c: &InteriorCell| -> Option<usize> {
        let off = be_u16(base, HEADER + 2 * b);
        if off < content || off >= limit {
            return None;
        }
        let mut r = Reader::new(base, off, limit, pgno);
        let key = r.interior_key(b, max_key).ok()?;
        (key == cell::key_ident(&c.key, &mut scratch)).then_some(r.pos - 4)
    };
    // Header (count, content offset, right child), slots, new cell, a
    // moved child, trailer.
    let mut ranges = [(2, 12), (0, 0), (0, 0), (0, 0), (limit, ps)];
    // The child field to rewrite (`None`: the right child, in the header).
    let moved = match change {
        LeafChange::Child(i) if i == n => None,
        LeafChange::Child(i) => match child_at(i, &cells[i]) {
            Some(at) => Some((at, cells[i].child)),
            None => return false,
        },
        LeafChange::Split(i) => {
            let cell = &cells[i];
            let len = cell::interior_len(cell);
            let next = match i < n {
                true => match child_at(i, &cells[i + 1]) {
                    Some(at) => Some((at, cells[i + 1].child)),
                    None => return false,
                },
                false => None,
            };
            let before_matches = i == 0 || child_at(i - 1, &cells[i - 1]).is_some();
            if !before_matches || content < HEADER + 2 * (n + 1) + len {
                return false;
            }
            let at = content - len;
            out.copy_from_slice(base);
            cell::put_interior(out, at, cell);
            let mut r4 = [(0, 0); 4];
            insert_slot(out, (n, content), (i, at), &mut r4);
            ranges[1] = r4[1];
            ranges[2] = r4[2];
            next
        }
        _ => return false,
    };
    if let LeafChange::Child(_) = change {
        out.copy_from_slice(base);
    }
    match moved {
        Some((at, child)) => {
            out[at..at + 4].copy_from_slice(&child.to_be_bytes());
            ranges[3] = (at, at + 4);
        }
        None => out[8..12].copy_from_slice(&right.to_be_bytes()),
    }
    seal_changed(pgno, base, out, limit, ctx, &ranges);
    true
}

/// [`NodeFormat::patch_leaf`] for the slotted formats. Only plain cells
/// (`cell::Reader::plain_leaf`) are patched: a put over a value of the
/// same size changes its bytes alone; a new cell goes below the cells
/// with its slot inserted (when the gap above the slots holds it: holes
/// are not reused, the full encode packs the page again); a removed cell
/// becomes a hole as in [`encode_changed`]. The reserved trailer is
/// cleared, as every encode leaves it.
#[allow(clippy::too_many_arguments)]
fn patch_leaf(
    pgno: Pgno,
    base: &[u8],
    key: &[u8],
    patch: LeafPatch<'_>,
    order: &dyn KeyOrder,
    ctx: &EncodeCtx,
    reserve: usize,
    out: &mut [u8],
) -> Option<Patched> {
    let ps = ctx.page_size;
    // Without page checksums nothing vouches for the rest of the page: the
    // logical view decodes (and checks) it whole.
    if !ctx.checksums
        || base.len() != ps
        || out.len() != ps
        || ps < HEADER + reserve
        || base[0] != LEAF
    {
        return None;
    }
    // Checked only once the change is known to apply (the reads before
    // are bounds-checked): a declined patch costs no checksum.
    let intact = || ctx.base_verified || pagesum::verify(pgno, base, SUM_AT);
    let n = be_u16(base, 2);
    let content = be_u32(base, 4) as usize;
    let limit = ps - reserve;
    if HEADER + 2 * n > content || content > limit || !cells_end_by(base, (n, content, limit), LEAF)
    {
        return None;
    }
    let max_key = SlottedFormat.max_key_len(ps);
    // Cell `i`: (offset, value start, end) and its key.
    let found = cell::search_cells(n, key, order, |i| {
        let off = be_u16(base, HEADER + 2 * i);
        if off < content || off >= limit {
            return None;
        }
        let (ks, vs, end) = Reader::new(base, off, limit, pgno).plain_leaf(max_key)?;
        Some(((off, vs, end), &base[ks..vs]))
    })?;
    let mut ranges = [(2, 8), (0, 0), (0, 0), (limit, ps)];
    let existed = found.is_ok();
    match (patch, found) {
        (LeafPatch::Put(value), Ok((_, (_, vs, end)))) => {
            if end - vs != value.len() || !intact() {
                return None;
            }
            out.copy_from_slice(base);
            out[vs..end].copy_from_slice(value);
            // The header is unchanged: its run gives way to the value's.
            ranges[0] = (vs, end);
        }
        (LeafPatch::Put(value), Err(i)) => {
            // A plain cell: flags 0, one- or two-byte lengths.
            if key.len() > max_key || key.len() >= 1 << 14 || value.len() >= 1 << 14 {
                return None;
            }
            let len = 1
                + cell::varint_len(key.len() as u64)
                + cell::varint_len(value.len() as u64)
                + key.len()
                + value.len();
            if content < HEADER + 2 * (n + 1) + len || !intact() {
                return None;
            }
            let at = content - len;
            out.copy_from_slice(base);
            let vs = cell::put_plain_leaf(out, at, key, value);
            debug_assert_eq!(vs + value.len(), content);
            insert_slot(out, (n, content), (i, at), &mut ranges);
        }
        (LeafPatch::Delete { keep }, Ok((i, (off, _, end)))) => {
            // The cells left (the cell area less its holes), each with its
            // slot; holes past the area are damage, for the logical view.
            let cells = (limit - content).checked_sub(holes(base) + (end - off))?;
            if n < 2
                || cells + 2 * (n - 1) < keep
                || !intact()
                || !remove_hole(base, out, (n, content), (i, off, end), &mut ranges)
            {
                return None;
            }
        }
        // Nothing to write; a damaged page is the logical view's to report.
        (LeafPatch::Delete { .. }, Err(_)) => return intact().then_some(Patched::Absent),
    }
    seal_changed(pgno, base, out, limit, ctx, &ranges);
    Some(Patched::Written { existed })
}

/// A free page holds the last image this format wrote there (a tree page
/// or a raw page, checksum intact) or was never written.
fn check_free(pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
    if !ctx.checksums || pagesum::is_zero(page) {
        return Ok(());
    }
    let tree = (page[0] == LEAF || page[0] == INTERIOR) && pagesum::verify(pgno, page, SUM_AT);
    if tree || pagesum::verify(pgno, page, raw_sum_at(page)) {
        return Ok(());
    }
    Err(Error::corrupt(
        "database",
        pgno,
        "free page: neither all zero nor a page with an intact checksum (damaged)",
    ))
}

macro_rules! slotted_impl {
    ($ty:ty, $reserve:expr) => {
        impl NodeFormat for $ty {
            fn name(&self) -> &'static str {
                "slotted"
            }

            fn tree_sum_at(&self, page: &[u8]) -> Option<usize> {
                let tree = matches!(page.first(), Some(&LEAF | &INTERIOR));
                (tree && page.len() >= HEADER).then_some(SUM_AT)
            }

            fn decode(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<Node> {
                // Both variants read each other's pages: accept the longer
                // keys of the plain format.
                decode(
                    pgno,
                    page,
                    None,
                    ctx,
                    SlottedFormat.max_key_len(ctx.page_size),
                )
            }

            fn decode_shared(&self, pgno: Pgno, page: &Arc<[u8]>, ctx: &DecodeCtx) -> Result<Node> {
                let max_key = SlottedFormat.max_key_len(ctx.page_size);
                decode(pgno, page, Some(page), ctx, max_key)
            }

            fn fits(&self, node: &Node, _base: Option<&[u8]>, ctx: &EncodeCtx) -> bool {
                used(node) <= self.capacity(ctx.page_size)
            }

            fn leaf_cell_size(&self, c: &LeafCell) -> usize {
                2 + cell::leaf_len(c)
            }

            fn interior_cell_size(&self, c: &InteriorCell) -> usize {
                2 + cell::interior_len(c)
            }

            fn capacity(&self, page_size: usize) -> usize {
                page_size - HEADER - $reserve
            }

            fn encode(
                &self,
                pgno: Pgno,
                node: &Node,
                _base: Option<&[u8]>,
                ctx: &EncodeCtx,
                out: &mut [u8],
            ) -> Result<()> {
                encode(pgno, node, ctx, $reserve, out)
            }

            fn encode_changed(
                &self,
                pgno: Pgno,
                node: &Node,
                base: &[u8],
                change: LeafChange,
                ctx: &EncodeCtx,
                out: &mut [u8],
            ) -> Result<bool> {
                Ok(encode_changed(pgno, node, base, change, ctx, $reserve, out))
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
                Ok(patch_leaf(
                    pgno, base, key, patch, order, ctx, $reserve, out,
                ))
            }

            fn max_key_len(&self, page_size: usize) -> usize {
                // An overflow leaf cell is 1 + 3 + 10 + key + 4 bytes (+2
                // pointer); keep every cell within a quarter page so a
                // split always works. A longer key overflows, and its
                // cell is no larger (`overflow_key_local`).
                self.max_inline_cell(page_size) - 20
            }

            fn max_inline_cell(&self, page_size: usize) -> usize {
                self.capacity(page_size) / 4
            }

            fn raw_reserved(&self) -> usize {
                SUM_LEN
            }

            fn seal_raw(&self, pgno: Pgno, page: &mut [u8], ctx: &EncodeCtx) {
                if ctx.checksums {
                    let at = raw_sum_at(page);
                    pagesum::seal(pgno, page, at);
                }
            }

            fn check_raw(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
                if ctx.checksums && !pagesum::verify(pgno, page, raw_sum_at(page)) {
                    return Err(Error::corrupt(
                        "database",
                        pgno,
                        "overflow or free-list page: page checksum mismatch (damaged, torn, \
                         or belongs at another offset)",
                    ));
                }
                Ok(())
            }

            fn check_free(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
                check_free(pgno, page, ctx)
            }
        }
    };
}

slotted_impl!(SlottedFormat, 0);
slotted_impl!(SlottedMetaFormat, META_TRAILER);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Value;

    /// Decoding with checksums, bytewise order, committed TID 1.
    fn dctx(page_size: usize) -> DecodeCtx<'static> {
        DecodeCtx {
            page_size,
            committed_tid: 1,
            checksums: true,
            order: &crate::base::BYTEWISE,
        }
    }

    #[test]
    fn roundtrip_leaf_and_interior() {
        let f = SlottedFormat;
        let ps = 512;
        let ectx = EncodeCtx::new(ps, 1, true);
        let dctx = dctx(ps);
        let leaf = Node::Leaf(vec![
            LeafCell {
                key: b"a".into(),
                value: Value::Inline(vec![].into()),
            },
            LeafCell {
                key: b"b".into(),
                value: Value::Overflow { len: 9000, head: 7 },
            },
        ]);
        let mut page = vec![0u8; ps];
        f.encode(3, &leaf, None, &ectx, &mut page).unwrap();
        assert_eq!(f.decode(3, &page, &dctx).unwrap(), leaf);
        let int = Node::Interior {
            cells: vec![InteriorCell {
                key: b"m".into(),
                child: 4,
            }],
            right: 5,
        };
        f.encode(3, &int, None, &ectx, &mut page).unwrap();
        assert_eq!(f.decode(3, &page, &dctx).unwrap(), int);
    }

    /// S1: the cell area of leaf `page` is its cells and its holes, the
    /// holes and the gap above the slots zero, the identity `remove_hole`
    /// and the delete's underflow bound rely on.
    fn holes_account(page: &[u8], limit: usize) {
        let n = be_u16(page, 2);
        let content = be_u32(page, 4) as usize;
        let mut covered = vec![false; page.len()];
        let mut cells = 0;
        for i in 0..n {
            let off = be_u16(page, HEADER + 2 * i);
            let mut r = Reader::new(page, off, limit, 9);
            r.leaf(i, usize::MAX).expect("a cell");
            covered[off..r.pos].iter_mut().for_each(|c| *c = true);
            cells += r.pos - off;
        }
        assert_eq!(
            cells + holes(page),
            limit - content,
            "cells and holes fill the area"
        );
        assert!((HEADER + 2 * n..limit).all(|b| covered[b] || page[b] == 0));
    }

    #[test]
    fn removed_cells_leave_zeroed_holes_that_the_header_counts() {
        let (ps, pgno) = (1024, 9);
        let ctx = EncodeCtx::new(ps, 1, true);
        let dctx = dctx(ps);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        let mut model = std::collections::BTreeMap::<Vec<u8>, Vec<u8>>::new();
        let node = |m: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>| {
            Node::Leaf(
                m.iter()
                    .map(|(k, v)| LeafCell {
                        key: k[..].into(),
                        value: Value::Inline(v[..].into()),
                    })
                    .collect(),
            )
        };
        let mut page = vec![0u8; ps];
        SlottedFormat
            .encode(pgno, &node(&model), None, &ctx, &mut page)
            .unwrap();
        let (mut holed, mut out) = (0, vec![0u8; ps]);
        for step in 0..4000 {
            let key = (rnd(48) as u32).to_be_bytes().to_vec();
            let value = vec![step as u8; 4 + rnd(36) as usize];
            let mut next = model.clone();
            let patch = if rnd(5) < 2 {
                next.insert(key.clone(), value.clone());
                LeafPatch::Put(&value)
            } else {
                next.remove(&key);
                LeafPatch::Delete {
                    keep: rnd(2) as usize * 300,
                }
            };
            // The node path for a removal, else the byte patch.
            let removed_at = model.keys().position(|k| *k == key);
            let done = match (patch, removed_at) {
                (LeafPatch::Delete { .. }, Some(i)) if step % 3 == 0 => SlottedFormat
                    .encode_changed(
                        pgno,
                        &node(&next),
                        &page,
                        LeafChange::Removed(i),
                        &ctx,
                        &mut out,
                    )
                    .unwrap()
                    .then_some(Patched::Written { existed: true }),
                _ => SlottedFormat
                    .patch_leaf(
                        pgno,
                        &page,
                        &key,
                        patch,
                        &crate::base::BYTEWISE,
                        &ctx,
                        &mut out,
                    )
                    .unwrap(),
            };
            match done {
                Some(Patched::Written { .. }) => std::mem::swap(&mut page, &mut out),
                Some(Patched::Absent) => assert!(!model.contains_key(&key)),
                Some(Patched::Full) => panic!("the slotted patch never reports a full page"),
                // Declined: the logical view's full encode, if it fits.
                None if SlottedFormat.fits(&node(&next), None, &ctx) => SlottedFormat
                    .encode(pgno, &node(&next), None, &ctx, &mut page)
                    .unwrap(),
                None => continue,
            }
            model = next;
            holed += usize::from(holes(&page) > 0);
            assert_eq!(
                SlottedFormat.decode(pgno, &page, &dctx).unwrap(),
                node(&model)
            );
            holes_account(&page, ps);
        }
        assert!(holed > 500, "deletes left holes in {holed} steps");
    }

    /// A removal zeroes the cell where it lies, so it declines when any
    /// other slot starts inside that cell (damage: two cells overlap),
    /// wherever that slot is, and goes ahead when none does.
    #[test]
    fn a_removal_declines_when_another_slot_starts_inside_the_cell() {
        let (ps, pgno) = (1024, 9);
        let ctx = EncodeCtx::new(ps, 1, true);
        let cells: Vec<LeafCell> = (0..6u8)
            .map(|i| LeafCell {
                key: vec![i; 3].into(),
                value: Value::Inline(vec![i; 20].into()),
            })
            .collect();
        let node = Node::Leaf(cells.clone());
        let mut page = vec![0u8; ps];
        SlottedFormat
            .encode(pgno, &node, None, &ctx, &mut page)
            .unwrap();
        let n = cells.len();
        let (mut out, mut ranges) = (vec![0u8; ps], [(0, 0); 4]);
        let content = be_u32(&page, 4) as usize;
        for (i, c) in cells.iter().enumerate() {
            let off = be_u16(&page, HEADER + 2 * i);
            let end = off + cell::leaf_len(c);
            assert!(remove_hole(
                &page,
                &mut out,
                (n, content),
                (i, off, end),
                &mut ranges
            ));
            for j in (0..n).filter(|&j| j != i) {
                for (at, inside) in [(off, true), (end - 1, true), (end, false)] {
                    let mut bad = page.clone();
                    bad[HEADER + 2 * j..HEADER + 2 * j + 2]
                        .copy_from_slice(&(at as u16).to_be_bytes());
                    let done =
                        remove_hole(&bad, &mut out, (n, content), (i, off, end), &mut ranges);
                    assert_eq!(done, !inside, "cell {i}, slot {j} at {at}");
                }
            }
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let f = SlottedFormat;
        let dctx = dctx(512);
        let mut rng = 0x1234_5678u64;
        for _ in 0..2000 {
            let mut page = vec![0u8; 512];
            for b in page.iter_mut() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                *b = rng as u8;
            }
            page[0] = if rng & 1 == 0 { LEAF } else { INTERIOR };
            let _ = f.decode(9, &page, &dctx);
        }
    }
}
