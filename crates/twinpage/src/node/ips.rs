//! The In-Page Shadowing (IPS) page (\[IPS\] §3.1, Fig. 2).
//!
//! Records and their offsets are only ever *appended* inside the page, in
//! insertion order, never in key order (§3.2.1); the page keeps two
//! versions of its metadata, each the journal of the other: a slot count
//! (`numSlots`), a tombstone bitmap (`TB`) and, here, the TID that wrote
//! the version. A write copies the committed version's metadata into the
//! other half, appends new records below the free space, sets tombstone
//! bits for removed and replaced records, and flips `F` to the new half.
//! Nothing the committed version uses is touched, so a crash or an abort
//! falls back to it by invalidating the new half (the paper's "flip back").
//! Decoding sorts the live records into the tree's *logical view*.
//!
//! Layout (big-endian), documented byte by byte in `docs/modes/ips.md`:
//!
//! ```text
//! 0..40    version header 0        40..80   version header 1
//!   +0  u8   magic 0x16 (0: never written; 0x15: the first layout,
//!            whose crc is one crc32c in slot order, still read)
//!   +1  u8   page type of the version: 0x0D leaf, 0x05 interior
//!   +2  u16  numSlots: slots 0..numSlots belong to the version
//!   +4  u16  live: slots of the version whose TB bit is clear
//!   +6  u8   flags; bit 0: the version carries a commit record
//!   +7  u8   0
//!   +8  u64  TID of the transaction that wrote the version (INV: rolled back)
//!   +16 u32  rightmost child (interior), 0 (leaf)
//!   +20 u32  free_offset: lowest record byte of the version
//!   +24 u32  commit record: transaction size
//!   +28 u32  commit record: page count after the commit
//!   +32 u32  version crc, mod 2^32: crc32c(+0..+32, TB of the version)
//!            continued from pgno, plus per live slot crc32c(its record)
//!            continued from slot << 16 | its 2-byte entry
//!   +36 u32  0
//! 80..84   page checksum: crc32c(pgno, bytes 0..80, bytes 84..ps)
//! 84       F: the version written last (0 or 1); 85..88 zero
//! 88..     TB[0], TB[1]: ps/128 bytes each (ps/16 slots); bit i of TB[v]
//!          set: slot i is deleted in version v
//! 88+ps/64 arrSlots: u16 record offsets, insertion order, shared
//! ...      free space, then records (slotted cell encoding, overflowing
//!          keys as `node::cell` describes), growing down
//! ```

use super::cell::{
    self, kind_of, node_cell_key as cell_key, node_cell_len as cell_len, put_node_cell as put_cell,
    Reader,
};
use super::inpage::{
    any_bit_from, check_envelope, check_free_page, free_gaps, invalidate_envelope, raw_tid,
    seal_patched, snapshot_too_old, sort_nearly_sorted_by, verify_tree_page, with_local,
    write_envelope, CrcGather, InPageFormat, VersionState,
};
pub use super::inpage::{CommitRecord, PageScan, INV, RAW_TAIL};
use super::{
    DecodeCtx, EncodeCtx, InteriorCell, LeafCell, LeafChange, LeafPatch, Node, NodeFormat, Patched,
    Value,
};
use crate::base::pagesum::{self, SUM_LEN};
use crate::base::{Error, KeyOrder, Pgno, Result, BYTEWISE};
use std::cell::RefCell;
use std::cmp::Ordering;
use std::sync::Arc;

/// New records up to which a write patches the page checksum from the
/// base's instead of summing the page again.
const PATCH_RECORDS: usize = 4;

/// Size of one version header.
pub const HDR_LEN: usize = 40;
/// Offset of the page checksum.
pub const PAGE_SUM_AT: usize = 2 * HDR_LEN;
/// Offset of the flip byte F.
pub const FLIP_AT: usize = PAGE_SUM_AT + SUM_LEN;
/// Offset of the first tombstone bitmap.
pub const TB_AT: usize = FLIP_AT + 4;
/// Magic byte of a version header written by this layout: its checksum
/// sums one term per live record, in any order.
pub const MAGIC: u8 = 0x16;
/// Magic byte of the first layout's version header: its checksum is one
/// crc32c over the live records in slot order. Still read and verified;
/// every new version is written with [`MAGIC`].
pub const MAGIC_ORDERED: u8 = 0x15;
/// Page type of a leaf version.
pub const LEAF: u8 = cell::LEAF;
/// Page type of an interior version.
pub const INTERIOR: u8 = cell::INTERIOR;
const FLAG_COMMIT: u8 = 1;
/// The part of a version header its checksum covers directly.
const HDR_SUMMED: usize = 32;

/// The IPS page format.
#[derive(Debug, Default, Clone, Copy)]
pub struct IpsFormat;

/// Most slots a page can have (the tombstone bitmaps' capacity): ps / 16.
pub fn max_slots(ps: usize) -> usize {
    ps / 16
}

/// Bytes of one tombstone bitmap.
pub fn tb_len(ps: usize) -> usize {
    max_slots(ps) / 8
}

/// Offset of the slot array.
pub fn slots_at(ps: usize) -> usize {
    TB_AT + 2 * tb_len(ps)
}

fn tb_at(ps: usize, v: usize) -> usize {
    TB_AT + v * tb_len(ps)
}

fn slot_at(ps: usize, i: usize) -> usize {
    slots_at(ps) + 2 * i
}

fn be16(p: &[u8], at: usize) -> usize {
    u16::from_be_bytes([p[at], p[at + 1]]) as usize
}

fn be32(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

fn be64(p: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&p[at..at + 8]);
    u64::from_be_bytes(b)
}

fn tombstoned(page: &[u8], ps: usize, v: usize, i: usize) -> bool {
    page[tb_at(ps, v) + i / 8] & (0x80 >> (i % 8)) != 0
}

fn corrupt(pgno: Pgno, what: impl Into<String>) -> Error {
    Error::corrupt("database", pgno, what)
}

/// A parsed version header (not yet checked against its checksum).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// 0 or 1: which half of the metadata.
    pub v: usize,
    /// Page type of this version.
    pub kind: u8,
    /// numSlots: slots 0..nslots belong to the version.
    pub nslots: usize,
    /// Slots of the version not tombstoned.
    pub live: usize,
    /// Flag bits (bit 0: commit record).
    pub flags: u8,
    /// Transaction that wrote the version.
    pub tid: u64,
    /// Rightmost child of an interior version.
    pub right: Pgno,
    /// Lowest record byte of the version.
    pub free: usize,
    /// Commit record: pages written by the transaction.
    pub txn_size: u32,
    /// Commit record: page count after the commit.
    pub page_count: u32,
    /// Stored checksum.
    pub crc: u32,
    /// The first layout's header ([`MAGIC_ORDERED`]): the checksum is
    /// summed in slot order.
    pub ordered: bool,
}

impl Version {
    fn valid(&self) -> bool {
        self.tid != INV
    }
}

/// Read version header `v` (`None` if it was never written or its magic
/// is wrong, which decoding reports as corruption).
pub fn read_version(page: &[u8], v: usize) -> Option<Version> {
    let b = &page[v * HDR_LEN..(v + 1) * HDR_LEN];
    if b[0] != MAGIC && b[0] != MAGIC_ORDERED {
        return None;
    }
    Some(Version {
        v,
        kind: b[1],
        nslots: be16(b, 2),
        live: be16(b, 4),
        flags: b[6],
        tid: be64(b, 8),
        right: be32(b, 16),
        free: be32(b, 20) as usize,
        txn_size: be32(b, 24),
        page_count: be32(b, 28),
        crc: be32(b, 32),
        ordered: b[0] == MAGIC_ORDERED,
    })
}

fn write_header(page: &mut [u8], h: &Version) {
    let b = &mut page[h.v * HDR_LEN..(h.v + 1) * HDR_LEN];
    b.fill(0);
    // A header rewritten in place (a commit record) keeps its layout: its
    // checksum was summed by it.
    b[0] = if h.ordered { MAGIC_ORDERED } else { MAGIC };
    b[1] = h.kind;
    b[2..4].copy_from_slice(&(h.nslots as u16).to_be_bytes());
    b[4..6].copy_from_slice(&(h.live as u16).to_be_bytes());
    b[6] = h.flags;
    b[8..16].copy_from_slice(&h.tid.to_be_bytes());
    b[16..20].copy_from_slice(&h.right.to_be_bytes());
    b[20..24].copy_from_slice(&(h.free as u32).to_be_bytes());
    b[24..28].copy_from_slice(&h.txn_size.to_be_bytes());
    b[28..32].copy_from_slice(&h.page_count.to_be_bytes());
    b[32..36].copy_from_slice(&h.crc.to_be_bytes());
}

/// Both version headers; a header whose magic is neither 0, [`MAGIC`]
/// nor [`MAGIC_ORDERED`] is corruption.
fn versions(pgno: Pgno, page: &[u8]) -> Result<[Option<Version>; 2]> {
    let mut out = [None, None];
    for (v, slot) in out.iter_mut().enumerate() {
        match page[v * HDR_LEN] {
            0 => {}
            MAGIC | MAGIC_ORDERED => *slot = read_version(page, v),
            b => {
                return Err(corrupt(
                    pgno,
                    format!("version header {v}: bad magic {b:#04x}"),
                ))
            }
        }
    }
    Ok(out)
}

fn is_valid(h: &Option<Version>) -> bool {
    h.is_some_and(|h| h.valid())
}

/// Check F against the versions: it names a valid version whenever there
/// is one, and the newer of two. A flipped or damaged F is an error, never
/// a silent switch to the other version.
fn check_flip(pgno: Pgno, page: &[u8], vs: &[Option<Version>; 2]) -> Result<usize> {
    let f = page[FLIP_AT] as usize;
    if f > 1 || page[FLIP_AT + 1..TB_AT] != [0, 0, 0] {
        return Err(corrupt(pgno, format!("bad flip byte {f:#04x}")));
    }
    match (&vs[f], &vs[1 - f]) {
        (Some(a), Some(b)) if a.valid() && b.valid() && a.tid <= b.tid => Err(corrupt(
            pgno,
            format!(
                "F names version {f} (TID {}), older than version {} (TID {})",
                a.tid,
                1 - f,
                b.tid
            ),
        )),
        (a, b) if !is_valid(a) && is_valid(b) => Err(corrupt(
            pgno,
            format!("F names version {f}, which is not valid, beside a valid one"),
        )),
        _ => Ok(f),
    }
}

/// Algorithm 1 of \[IPS\] generalised to the reader's snapshot `s`: version
/// F if its TID is at most `s`, else the other one if its TID is.
fn select(vs: &[Option<Version>; 2], f: usize, s: u64) -> Option<Version> {
    [f, 1 - f]
        .into_iter()
        .filter_map(|v| vs[v])
        .find(|h| h.valid() && h.tid <= s)
}

/// A live record of a version: (offset, length, key start, key end, slot).
type Span = (usize, usize, usize, usize, usize);

/// How [`parse`] lists a version's records.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parse {
    /// Sorted by key, with the version's checksum computed from the page.
    Verify,
    /// Sorted by key, not summed: the caller has the version vouched for.
    Sorted,
    /// In slot order, neither summed nor sorted (nor checked for two
    /// records with one key): a version verified since it was read.
    Slots,
}

/// Parse version `h`: every live record is checked against the page and
/// listed in `out`, sorted by key in `order` (two records with one key are
/// corruption) unless `how` is [`Parse::Slots`]. Returns the version's
/// checksum as computed from the page under [`Parse::Verify`], else 0.
fn parse(
    pgno: Pgno,
    page: &[u8],
    h: &Version,
    max_key: usize,
    order: &dyn KeyOrder,
    out: &mut Vec<Span>,
    how: Parse,
) -> Result<u32> {
    let sum = how == Parse::Verify;
    let ps = page.len();
    out.clear();
    let bad = |what: String| corrupt(pgno, format!("version {} (TID {}): {what}", h.v, h.tid));
    if h.kind != LEAF && h.kind != INTERIOR {
        return Err(bad(format!("bad page type {:#04x}", h.kind)));
    }
    if h.kind == INTERIOR && h.right == 0 {
        return Err(bad("interior version without a right child".into()));
    }
    if h.nslots > max_slots(ps) || h.live > h.nslots {
        return Err(bad(format!(
            "{} slots ({} live) cannot fit",
            h.nslots, h.live
        )));
    }
    if h.free > ps || h.free < slot_at(ps, h.nslots) {
        return Err(bad(format!(
            "free offset {} outside the page's record area",
            h.free
        )));
    }
    out.reserve(h.live);
    for i in 0..h.nslots {
        if tombstoned(page, ps, h.v, i) {
            continue;
        }
        let off = be16(page, slot_at(ps, i));
        if off < h.free || off >= ps {
            return Err(bad(format!(
                "slot {i}: record offset {off} outside the record area"
            )));
        }
        let mut r = Reader::new(page, off, ps, pgno);
        let key = if h.kind == LEAF {
            r.leaf_key(i, max_key)?
        } else {
            r.interior_key(i, max_key)?
        };
        // The key is a slice of `page`: its position, not a copy.
        let ks = key.as_ptr() as usize - page.as_ptr() as usize;
        out.push((off, r.pos - off, ks, ks + key.len(), i));
    }
    // Bits past numSlots must be clear: a later writer inherits them.
    let tb = tb_at(ps, h.v);
    if any_bit_from(&page[tb..tb + tb_len(ps)], h.nslots) {
        return Err(bad("tombstone bit set past numSlots".into()));
    }
    if out.len() != h.live {
        return Err(bad(format!(
            "{} live slots, the header says {}",
            out.len(),
            h.live
        )));
    }
    // Summed over the records in slot order (`out` is, until sorted): the
    // first layout one message, this one a term per record.
    let crc = match (sum, h.ordered) {
        (false, _) => 0,
        (true, false) => version_sum(pgno, page, h.v, out.iter().map(|s| (s.4, s.0, s.1))),
        (true, true) => {
            let mut g = CrcGather::new();
            g.put(&pgno.to_be_bytes());
            let hb = h.v * HDR_LEN;
            g.put(&page[hb..hb + HDR_SUMMED]);
            g.put(&page[tb..tb + tb_len(ps)]);
            for &(off, len, _, _, i) in out.iter() {
                g.put(&page[slot_at(ps, i)..slot_at(ps, i) + 2]);
                g.put(&page[off..off + len]);
            }
            g.finish()
        }
    };
    if how == Parse::Slots {
        return Ok(0);
    }
    // An overflowing key's identity is not the key: the table's order
    // cannot compare it. Such a version is listed in bytewise order of the
    // identities (unique to each cell), and sorted once its keys are
    // complete (`cell::complete_keys`, `unsorted_slots`).
    let leaf = h.kind == LEAF;
    let order = if out.iter().any(|s| cell::key_overflows_at(page, s.0, leaf)) {
        &BYTEWISE
    } else {
        order
    };
    // Slots are appended: mostly in key order already, a few updated
    // records out of it.
    if order.bytewise() {
        sort_nearly_sorted_by(out, |a, b| page[a.2..a.3] < page[b.2..b.3]);
    } else {
        sort_nearly_sorted_by(out, |a, b| {
            order.compare(&page[a.2..a.3], &page[b.2..b.3]).is_lt()
        });
    }
    if out
        .windows(2)
        .any(|w| order.compare(&page[w[0].2..w[0].3], &page[w[1].2..w[1].3]) == Ordering::Equal)
    {
        return Err(bad("two live records with the same key".into()));
    }
    Ok(crc)
}

/// The version checksum's first term: the crc32c of version `v`'s header
/// bytes 0..32 and its tombstone bitmap, continued from the value `pgno`
/// (`crc32c_append`, as [`record_term`] binds a record to its slot). The
/// checksum is this plus one [`record_term`] per live record, mod 2^32,
/// so a write that adds or tombstones a record changes it by that
/// record's term alone.
fn head_term(pgno: Pgno, page: &[u8], v: usize) -> u32 {
    let (hb, tb) = (v * HDR_LEN, tb_at(page.len(), v));
    let c = crc32c::crc32c_append(pgno, &page[hb..hb + HDR_SUMMED]);
    crc32c::crc32c_append(c, &page[tb..tb + tb_len(page.len())])
}

/// A live record's term of the version checksum: the crc32c of the
/// record continued from the value `slot << 16 | offset`, which binds it
/// to its slot and its slot entry. `page[off..off + len]` lies in the
/// page.
fn record_term(page: &[u8], slot: usize, off: usize, len: usize) -> u32 {
    crc32c::crc32c_append((slot as u32) << 16 | off as u32, &page[off..off + len])
}

/// The checksum of version `v` of `page` whose live records are
/// `records` (slot, offset, length), in any order.
fn version_sum(
    pgno: Pgno,
    page: &[u8],
    v: usize,
    records: impl Iterator<Item = (usize, usize, usize)>,
) -> u32 {
    records.fold(head_term(pgno, page, v), |c, (slot, off, len)| {
        c.wrapping_add(record_term(page, slot, off, len))
    })
}

/// [`parse`] and compare with the stored checksum.
fn verify(
    pgno: Pgno,
    page: &[u8],
    h: &Version,
    max_key: usize,
    order: &dyn KeyOrder,
    out: &mut Vec<Span>,
) -> Result<()> {
    if parse(pgno, page, h, max_key, order, out, Parse::Verify)? != h.crc {
        return Err(corrupt(
            pgno,
            format!(
                "version {} (TID {}): checksum mismatch, the page is torn or damaged",
                h.v, h.tid
            ),
        ));
    }
    Ok(())
}

/// Where a new version goes ([`IpsFormat::layout`]); the cells to append
/// and the slots to tombstone are in [`Scratch`].
struct Plan {
    /// The version written over (`None`: a fresh page).
    base: Option<Version>,
    /// Half of the metadata the new version takes.
    v: usize,
    /// numSlots of the new version.
    nslots: usize,
    /// free_offset of the new version.
    free: usize,
}

/// The vectors [`IpsFormat::layout`] works in, kept per thread: once they
/// have grown, placing a version allocates nothing.
#[derive(Default)]
struct Scratch {
    /// Live records of the base version, sorted by key (bytewise when
    /// placing a new version: the node's table order is not known there).
    spans: Vec<Span>,
    /// Which of `spans` the new version keeps in place.
    kept: Vec<bool>,
    /// Live records of the other version (decode verifies it too).
    other: Vec<Span>,
    /// Encoded length of every cell of the new node.
    lens: Vec<usize>,
    /// Slot of every cell of the new node (after the layout: kept or new).
    slots: Vec<usize>,
    /// Cells of the new node that are appended.
    new: Vec<usize>,
    /// Slots of the base version tombstoned by the new one.
    tomb: Vec<usize>,
    /// The base's live records' byte runs, sorted (`free_gaps`' scratch).
    runs: Vec<(usize, usize)>,
    /// Where each of `new` goes (its record offset), in `new`'s order.
    place: Vec<usize>,
    /// Slots the base version tombstoned that the new version reuses.
    reused: Vec<usize>,
    /// Free byte ranges of the record area, `(start, end)`, ascending:
    /// what the base version does not use ([`IpsFormat::fill_holes`]).
    holes: Vec<(usize, usize)>,
    cell: Vec<u8>,
    /// A node cell's key identity when it is not the key
    /// (`cell::key_ident`).
    ident: Vec<u8>,
    /// Set by [`IpsFormat::patch_record`] when it declined a new key, over
    /// a base checked intact, for want of room that the layout could not
    /// find either (a hinted encode then refuses the node; the leaf patch
    /// reports [`Patched::Full`]).
    no_room: bool,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Run `f` with this thread's scratch.
fn with_scratch<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
    with_local(&SCRATCH, f)
}

impl IpsFormat {
    fn check_len(pgno: Pgno, page: &[u8], ps: usize) -> Result<()> {
        if page.len() != ps || ps < 512 {
            return Err(corrupt(
                pgno,
                format!("page buffer of {} bytes", page.len()),
            ));
        }
        Ok(())
    }

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
        let vs = versions(pgno, page)?;
        let f = check_flip(pgno, page, &vs)?;
        let Some(h) = select(&vs, f, ctx.committed_tid) else {
            let tids: Vec<String> = vs.iter().flatten().map(|h| h.tid.to_string()).collect();
            let intact = vs.iter().flatten().filter(|h| h.valid()).all(|h| {
                with_scratch(|sc| verify(pgno, page, h, max_key, ctx.order, &mut sc.other)).is_ok()
            });
            if intact && vs.iter().flatten().filter(|h| h.valid()).count() == 2 {
                // Two commits since the reader began overwrote its version;
                // one version alone is a page its snapshot cannot reach.
                return Err(snapshot_too_old(pgno, ctx.committed_tid, &tids));
            }
            return Err(corrupt(
                pgno,
                format!(
                    "no version visible at snapshot {} (version TIDs [{}])",
                    ctx.committed_tid,
                    tids.join(", ")
                ),
            ));
        };
        // An intact page checksum vouches for both versions (C5): the
        // visible one is then only parsed, not summed again. Not for a
        // version of the first layout: the builds that wrote it resealed
        // after a rollback without checking the versions.
        let page_ok = !h.ordered && pagesum::verify(pgno, page, PAGE_SUM_AT);
        with_scratch(|sc| {
            if page_ok {
                parse(
                    pgno,
                    page,
                    &h,
                    max_key,
                    ctx.order,
                    &mut sc.spans,
                    Parse::Sorted,
                )?;
            } else {
                // Every valid version checks out: damage to the visible
                // version's TID becomes an error instead of a silent
                // fallback to the older one.
                if let Some(o) = vs[1 - h.v].filter(|o| o.valid()) {
                    verify(pgno, page, &o, max_key, ctx.order, &mut sc.other)?;
                }
                verify(pgno, page, &h, max_key, ctx.order, &mut sc.spans)?;
            }
            if h.kind == LEAF {
                let mut out: Vec<LeafCell> = Vec::with_capacity(sc.spans.len());
                for &(off, _, _, _, slot) in &sc.spans {
                    out.push(
                        Reader::new(page, off, page.len(), pgno)
                            .sharing(share)
                            .leaf(slot, max_key)?,
                    );
                }
                Ok(Node::Leaf(out))
            } else {
                let mut out: Vec<InteriorCell> = Vec::with_capacity(sc.spans.len());
                for &(off, _, _, _, slot) in &sc.spans {
                    out.push(
                        Reader::new(page, off, page.len(), pgno)
                            .sharing(share)
                            .interior(slot, max_key)?,
                    );
                }
                Ok(Node::Interior {
                    cells: out,
                    right: h.right,
                })
            }
        })
    }

    /// The version a writer with TID `tid` writes over: the valid one with
    /// the highest TID below `tid` (its own earlier, spilled version is
    /// overwritten).
    fn base_version(pgno: Pgno, page: &[u8], tid: u64) -> Result<Version> {
        let vs = versions(pgno, page)?;
        vs.into_iter()
            .flatten()
            .filter(|h| h.valid() && h.tid < tid)
            .max_by_key(|h| h.tid)
            .ok_or_else(|| corrupt(pgno, "no committed version to write the new one over"))
    }

    /// Plan the new version of `node` over `base` (\[IPS\] Alg. 1,
    /// SelectVersionForWrite, and §3.2.1-3.2.2): records equal to a live
    /// one of the base version keep their slot; removed and replaced ones
    /// get a tombstone; new ones are appended. `Ok(None)`: it does not fit
    /// in place. The base version's checksum is verified when
    /// `verify_base` (encode over a base not verified since it was read);
    /// `fits` only plans. `hint`: the pager's [`EncodeCtx::leaf_change`]
    /// over a verified base.
    #[allow(clippy::too_many_arguments)]
    fn layout(
        &self,
        pgno: Option<Pgno>,
        verify_base: bool,
        node: &Node,
        base: Option<&[u8]>,
        ps: usize,
        tid: u64,
        hint: Option<LeafChange>,
        sc: &mut Scratch,
    ) -> Result<Option<Plan>> {
        let n = node.len();
        sc.lens.clear();
        sc.new.clear();
        sc.tomb.clear();
        sc.slots.clear();
        let Some(base) = base else {
            sc.lens.extend((0..n).map(|i| cell_len(node, i)));
            // A page this transaction allocated: pack the records at the end.
            let total: usize = sc.lens.iter().sum();
            if n > max_slots(ps) || slot_at(ps, n) + total > ps {
                return Ok(None);
            }
            sc.new.extend(0..n);
            sc.slots.extend(0..n);
            return Ok(Some(Plan {
                base: None,
                v: 0,
                nslots: n,
                free: ps - total,
            }));
        };
        let at = pgno.unwrap_or(0);
        if base.len() != ps {
            return Err(corrupt(at, format!("base image of {} bytes", base.len())));
        }
        let b = Self::base_version(at, base, tid)?;
        let max_key = self.max_key_len(ps);
        sc.slots.resize(n, usize::MAX);
        let hint = hint.filter(|_| !verify_base);
        let leaf = matches!(node, Node::Leaf(_));
        let paired = match hint {
            Some(ch) if leaf => Self::pair_changed(at, node, base, &b, ch, max_key, sc)?,
            Some(ch) => Self::pair_interior(at, node, base, &b, ch, max_key, sc)?,
            None => false,
        };
        if !paired {
            let hint = hint.filter(|_| leaf);
            self.pair_all(at, verify_base, node, base, &b, hint, max_key, sc)?;
        }
        // Deleted and replaced records get their tombstones.
        sc.tomb.extend(
            sc.spans
                .iter()
                .zip(&sc.kept)
                .filter(|(_, &k)| !k)
                .map(|(s, _)| s.4),
        );
        let added: usize = sc.new.iter().map(|&i| sc.lens[i]).sum();
        let appended = b.nslots + sc.new.len();
        sc.place.clear();
        sc.reused.clear();
        let (nslots, free) = if appended <= max_slots(ps)
            && b.free >= added
            && b.free - added >= slot_at(ps, appended)
        {
            // Append below the base version's records, new slots at the
            // end (\[IPS\] §3.2.1).
            let mut at = b.free;
            for &i in &sc.new {
                at -= sc.lens[i];
                sc.place.push(at);
            }
            for (k, &i) in sc.new.iter().enumerate() {
                sc.slots[i] = b.nslots + k;
            }
            (appended, at)
        } else {
            // Overflow: garbage-collect in place before the tree moves the
            // node (docs/modes/ips.md §5).
            sc.reused.extend(
                (0..b.nslots)
                    .filter(|&i| tombstoned(base, ps, b.v, i))
                    .take(sc.new.len()),
            );
            let nslots = b.nslots + sc.new.len() - sc.reused.len();
            if nslots > max_slots(ps) || !Self::fill_holes(ps, nslots, sc) {
                return Ok(None);
            }
            for (k, &i) in sc.new.iter().enumerate() {
                sc.slots[i] = match sc.reused.get(k) {
                    Some(&slot) => slot,
                    None => b.nslots + k - sc.reused.len(),
                };
            }
            let lowest = sc.place.iter().copied().min().unwrap_or(b.free);
            (nslots, lowest.min(b.free).max(slot_at(ps, nslots)))
        };
        Ok(Some(Plan {
            base: Some(b),
            v: 1 - b.v,
            nslots,
            free,
        }))
    }

    /// The pager's hint for a one-value update or an insert over a base
    /// verified since it was read: the node is the base version but for
    /// cell `i`, so every other live record stays and only the record
    /// with `i`'s key (if any) is compared, found by a scan of the records
    /// in slot order: no sort, and no length of the other cells. Fills
    /// `spans` (slot order), `kept`, `new` and the length of `i`; false
    /// when the hint does not apply (a removal, counts that disagree, an
    /// insert whose key is there): the caller pairs every cell.
    fn pair_changed(
        at: Pgno,
        node: &Node,
        base: &[u8],
        b: &Version,
        ch: LeafChange,
        max_key: usize,
        sc: &mut Scratch,
    ) -> Result<bool> {
        let n = node.len();
        let (i, inserted) = match ch {
            LeafChange::Value(i) => (i, false),
            LeafChange::Inserted(i) => (i, true),
            _ => return Ok(false),
        };
        if b.kind != LEAF || !ch.fits_counts(n, b.live) {
            return Ok(false);
        }
        parse(at, base, b, max_key, &BYTEWISE, &mut sc.spans, Parse::Slots)?;
        let key = cell::key_ident(cell_key(node, i), &mut sc.ident);
        let found = sc.spans.iter().position(|s| base[s.2..s.3] == *key);
        if found.is_some() == inserted {
            return Ok(false);
        }
        sc.kept.clear();
        sc.kept.resize(sc.spans.len(), true);
        sc.lens.clear();
        sc.lens.resize(n, 0);
        sc.lens[i] = cell_len(node, i);
        match found {
            Some(j) => {
                let (off, len, ..) = sc.spans[j];
                if !(len == sc.lens[i]
                    && cell::node_cell_matches(node, i, base, (off, len), &mut sc.cell))
                {
                    sc.kept[j] = false;
                    sc.new.push(i);
                }
            }
            None => sc.new.push(i),
        }
        debug_assert!(
            (0..n).filter(|&k| k != i).all(|k| {
                let mut id = Vec::new();
                let key = cell::key_ident(cell_key(node, k), &mut id);
                sc.spans.iter().any(|s| base[s.2..s.3] == *key)
            }),
            "page {at}: the hint's node has a key the base version lacks"
        );
        Ok(true)
    }

    /// The pager's hint for an interior node over a base verified since
    /// it was read: one child moved, or split ([`LeafChange::Child`],
    /// [`LeafChange::Split`]). Every record stays but the one whose child
    /// moved, found by its key in a scan of the records in slot order: no
    /// sort and no comparison of the other cells, which a split of a
    /// child under a node of hundreds of cells would otherwise pay. Fills
    /// `spans` (slot order), `kept`, `new` and the new cells' lengths;
    /// false when the hint does not apply (the caller pairs every cell).
    fn pair_interior(
        at: Pgno,
        node: &Node,
        base: &[u8],
        b: &Version,
        ch: LeafChange,
        max_key: usize,
        sc: &mut Scratch,
    ) -> Result<bool> {
        let n = node.len();
        if let LeafChange::Dropped(_) = ch {
            return Self::pair_dropped(at, node, base, b, ch, max_key, sc);
        }
        // The split's new cell, and the cell whose child moved (none when
        // it is the right child, which the header holds).
        let (fresh, moved) = match ch {
            LeafChange::Child(i) => (None, i),
            LeafChange::Split(i) => (Some(i), i + 1),
            _ => return Ok(false),
        };
        if b.kind != INTERIOR
            || !matches!(node, Node::Interior { .. })
            || !ch.fits_interior(n, b.live)
        {
            return Ok(false);
        }
        parse(at, base, b, max_key, &BYTEWISE, &mut sc.spans, Parse::Slots)?;
        let gone = match moved < n {
            true => {
                let key = cell::key_ident(cell_key(node, moved), &mut sc.ident);
                match sc.spans.iter().position(|s| base[s.2..s.3] == *key) {
                    Some(j) => Some(j),
                    None => return Ok(false),
                }
            }
            false => None,
        };
        sc.kept.clear();
        sc.kept.resize(sc.spans.len(), true);
        sc.lens.clear();
        sc.lens.resize(n, 0);
        // `new` in node order: the split's cell comes before the moved one.
        for i in fresh.into_iter().chain(gone.map(|_| moved)) {
            sc.lens[i] = cell_len(node, i);
            sc.new.push(i);
        }
        if let Some(j) = gone {
            sc.kept[j] = false;
        }
        debug_assert!(
            (0..n)
                .filter(|&i| Some(i) != fresh && !(gone.is_some() && i == moved))
                .all(|i| Self::kept_holds(node, i, base, sc)),
            "page {at}: the hint's interior node has a cell the base version lacks"
        );
        Ok(true)
    }

    /// [`IpsFormat::pair_interior`] for [`LeafChange::Dropped`]: one
    /// committed record is gone, the others and the right child stay. The
    /// record that goes is the one whose child the node no longer names:
    /// the base's children sum (mod 2^32) to the node's plus that one, so
    /// one scan of the records finds it, whatever the table's key order,
    /// without comparing keys. False when the hint does not apply (no
    /// record, or two, with that child; another right child).
    #[allow(clippy::too_many_arguments)]
    fn pair_dropped(
        at: Pgno,
        node: &Node,
        base: &[u8],
        b: &Version,
        ch: LeafChange,
        max_key: usize,
        sc: &mut Scratch,
    ) -> Result<bool> {
        let Node::Interior { cells, right } = node else {
            return Ok(false);
        };
        let n = cells.len();
        if n == 0 || b.kind != INTERIOR || !ch.fits_interior(n, b.live) || b.right != *right {
            return Ok(false);
        }
        parse(at, base, b, max_key, &BYTEWISE, &mut sc.spans, Parse::Slots)?;
        // An interior record ends with its child (`node::cell`).
        let child_of = |s: &Span| be32(base, s.0 + s.1 - 4);
        if sc.spans.iter().any(|s| s.1 < 5) {
            return Ok(false);
        }
        let sum = |a: u32, c: u32| a.wrapping_add(c);
        let gone_child = sc
            .spans
            .iter()
            .map(child_of)
            .fold(0, sum)
            .wrapping_sub(cells.iter().map(|c| c.child).fold(0, sum));
        let mut gone = None;
        for (j, s) in sc.spans.iter().enumerate() {
            if child_of(s) == gone_child {
                if gone.is_some() {
                    return Ok(false);
                }
                gone = Some(j);
            }
        }
        let Some(j) = gone else {
            return Ok(false);
        };
        sc.kept.clear();
        sc.kept.resize(sc.spans.len(), true);
        sc.kept[j] = false;
        sc.lens.clear();
        sc.lens.resize(n, 0);
        debug_assert!(
            (0..n).all(|i| Self::kept_holds(node, i, base, sc)),
            "page {at}: the hint's interior node has a cell the base version lacks"
        );
        Ok(true)
    }

    /// Debug check of a hinted pairing: cell `i` of `node` is one of the
    /// base records `sc.kept` keeps, byte for byte.
    fn kept_holds(node: &Node, i: usize, base: &[u8], sc: &Scratch) -> bool {
        let mut id = Vec::new();
        let key = cell::key_ident(cell_key(node, i), &mut id);
        let len = cell_len(node, i);
        sc.spans.iter().zip(&sc.kept).any(|(s, &k)| {
            k && base[s.2..s.3] == *key
                && s.1 == len
                && cell::node_cell_matches(node, i, base, (s.0, s.1), &mut Vec::new())
        })
    }

    /// Pair every cell of `node` with the base's live records (sorted
    /// bytewise): fills `spans`, `kept`, `lens`, `new` and the slots of
    /// the kept cells.
    #[allow(clippy::too_many_arguments)]
    fn pair_all(
        &self,
        at: Pgno,
        verify_base: bool,
        node: &Node,
        base: &[u8],
        b: &Version,
        hint: Option<LeafChange>,
        max_key: usize,
        sc: &mut Scratch,
    ) -> Result<()> {
        let n = node.len();
        sc.lens.clear();
        sc.lens.extend((0..n).map(|i| cell_len(node, i)));
        // The base's records sorted bytewise: each key of the node (which
        // ascends in its table's order, not known here) is looked up.
        if verify_base {
            verify(at, base, b, max_key, &BYTEWISE, &mut sc.spans)?;
        } else {
            // Verified since it was read: its records, not its sum.
            parse(
                at,
                base,
                b,
                max_key,
                &BYTEWISE,
                &mut sc.spans,
                Parse::Sorted,
            )?;
        }
        sc.kept.clear();
        sc.kept.resize(sc.spans.len(), false);
        // The pager's hint (a removal): the node is the base version but
        // for one leaf cell. When the base's records, sorted bytewise,
        // hold the node's keys at the hinted positions (the table orders
        // keys bytewise), the other cells are those records and only the
        // changed one is compared: no search and no value comparison per
        // cell.
        let by_position = hint.filter(|&ch| {
            ch.fits_counts(n, sc.spans.len())
                && (0..n).all(|i| match ch.base_index(i, n, sc.spans.len()) {
                    Some(j) => {
                        let s = sc.spans[j];
                        (ch == LeafChange::Value(i) || s.1 == sc.lens[i])
                            && base[s.2..s.3] == *cell::key_ident(cell_key(node, i), &mut sc.ident)
                    }
                    None => true,
                })
        });
        if let Some(ch) = by_position {
            for i in 0..n {
                let Some(j) = ch.base_index(i, n, sc.spans.len()) else {
                    sc.new.push(i);
                    continue;
                };
                let (off, len, _, _, slot) = sc.spans[j];
                let same = ch != LeafChange::Value(i)
                    || (len == sc.lens[i]
                        && cell::node_cell_matches(node, i, base, (off, len), &mut sc.cell));
                if same {
                    sc.kept[j] = true;
                    sc.slots[i] = slot;
                } else {
                    sc.new.push(i);
                }
            }
        } else {
            for i in 0..n {
                // Paired by the bytes the page stores for the key.
                let key = cell::key_ident(cell_key(node, i), &mut sc.ident);
                let same = match sc.spans.binary_search_by(|s| base[s.2..s.3].cmp(key)) {
                    Ok(j) => {
                        let (off, len, _, _, slot) = sc.spans[j];
                        let same = len == sc.lens[i]
                            && cell::node_cell_matches(node, i, base, (off, len), &mut sc.cell);
                        // Only ever set: each base record is one cell's.
                        sc.kept[j] |= same;
                        same.then_some(slot)
                    }
                    Err(_) => None,
                };
                match same {
                    Some(slot) => sc.slots[i] = slot,
                    None => sc.new.push(i),
                }
            }
        }
        Ok(())
    }

    /// In-page garbage collection, beyond the paper (docs/modes/ips.md §5):
    /// when the new records do not fit below the base version's, place
    /// them in the space of records the base version no longer has
    /// (deleted or replaced before it committed). Those bytes belong to
    /// nothing the base version reads, so the page stays byte-preserving
    /// for the base, and the older version they belonged to is
    /// overwritten by the new header anyway. `sc.spans` holds the base's
    /// live records; fills `sc.place`. False when they do not fit (the
    /// tree then relocates or splits the node, \[IPS\] §3.2.2).
    fn fill_holes(ps: usize, nslots: usize, sc: &mut Scratch) -> bool {
        let lo = slot_at(ps, nslots);
        if sc.spans.iter().any(|s| s.0 < lo) {
            // The slot array would run into a live record.
            return false;
        }
        free_gaps(
            lo,
            ps,
            sc.spans.iter().map(|s| (s.0, s.0 + s.1)),
            &mut sc.runs,
            &mut sc.holes,
        );
        // First fit from the top of the page down, each record at the top
        // of its hole.
        for &i in &sc.new {
            let len = sc.lens[i];
            let Some(h) = sc.holes.iter_mut().rev().find(|h| h.1 - h.0 >= len) else {
                return false;
            };
            h.1 -= len;
            sc.place.push(h.1);
        }
        true
    }

    /// [`NodeFormat::encode_if_fits`] with this thread's scratch.
    /// [`NodeFormat::patch_leaf`]: the committed leaf version changed by
    /// `patch` as \[IPS\] §3.2.1-3.2.2 writes it, without the logical
    /// view. A put appends the new record below the records, in a new
    /// slot, and tombstones the record it replaces; a delete tombstones
    /// the record. The new version's metadata (header, tombstone bitmap)
    /// goes to the other half, and F flips to it. The key is found by a
    /// scan of the live records in slot order (they are not in key order),
    /// unless `absent` is the base version's live record count: the caller
    /// vouches that those records lack the key (the logical view it read
    /// from this verified base), and a put with room to append skips the
    /// scan (and so does not look at the other records). With no room to
    /// append, a put goes where the in-page garbage collection would put
    /// it (docs/modes/ips.md §5), or, for a new key that finds no room
    /// there either, declines with [`Scratch::no_room`] set. A record that
    /// is not plain declines. The version checksum is patched from the
    /// committed one (the head term swapped, the tombstoned record's term
    /// off, the new record's on), the page checksum over the bytes
    /// written.
    #[allow(clippy::too_many_arguments)]
    fn patch_record(
        &self,
        pgno: Pgno,
        base: &[u8],
        key: &[u8],
        patch: LeafPatch<'_>,
        order: &dyn KeyOrder,
        absent: Option<usize>,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Option<Patched> {
        let ps = ctx.page_size;
        sc.no_room = false;
        if base.len() != ps || out.len() != ps || ps < 512 {
            return None;
        }
        let b = Self::base_version(pgno, base, ctx.tid).ok()?;
        if b.kind != LEAF
            || b.live == 0
            || b.nslots > max_slots(ps)
            || b.live > b.nslots
            || b.free > ps
            || b.free < slot_at(ps, b.nslots)
        {
            return None;
        }
        let max_key = self.max_key_len(ps);
        // The length of a put's record, and whether it can be appended
        // below the records in a new slot (§3.2.1).
        let len = match patch {
            LeafPatch::Delete { .. } => 0,
            LeafPatch::Put(value) => {
                let (klen, vlen) = (key.len(), value.len());
                if klen > max_key || klen >= 1 << 14 || vlen >= 1 << 14 {
                    return None;
                }
                1 + cell::varint_len(klen as u64) + cell::varint_len(vlen as u64) + klen + vlen
            }
        };
        let appendable = len > 0
            && b.nslots < max_slots(ps)
            && b.free >= len
            && b.free - len >= slot_at(ps, b.nslots + 1);
        // A put of a key the caller vouches the base version lacks, with
        // room to append: nothing to find and nothing to tombstone, so no
        // walk of the records (the committed page was verified, and the
        // first layout's in-order checksum needs every record's place).
        let append_only = absent == Some(b.live) && appendable && !b.ordered && ctx.base_verified;
        // The live records' spans are kept only where they are needed: the
        // first layout's checksum, and the holes of a put with no room to
        // append. The walk itself counts them and their bytes.
        let keep_spans = b.ordered || (len > 0 && !appendable);
        sc.spans.clear();
        let mut found: Option<Span> = None;
        let (mut live, mut bytes) = (0, 0);
        if !append_only {
            // Bytewise, a record's key is compared as an integer of its
            // first eight bytes before any byte comparison.
            let pfx = cell::key_prefix(key);
            let bytewise = order.bytewise();
            let tb = tb_at(ps, b.v);
            for i in 0..b.nslots {
                if base[tb + i / 8] & (0x80 >> (i % 8)) != 0 {
                    continue;
                }
                let off = be16(base, slot_at(ps, i));
                if off < b.free || off >= ps {
                    return None;
                }
                let (ks, vs, end) = Reader::new(base, off, ps, pgno).plain_leaf(max_key)?;
                let k = &base[ks..vs];
                let same = match bytewise {
                    true => k.len() == key.len() && cell::key_prefix(k) == pfx && k == key,
                    false => order.compare(k, key).is_eq(),
                };
                if same && found.is_none() {
                    found = Some((off, end - off, ks, vs, i));
                }
                if keep_spans {
                    sc.spans.push((off, end - off, ks, vs, i));
                }
                live += 1;
                bytes += end - off;
            }
            if live != b.live {
                return None;
            }
            bytes += 2 * live;
        }
        let intact = || ctx.base_verified || pagesum::verify(pgno, base, PAGE_SUM_AT);
        // The record tombstoned.
        let gone = match (patch, found) {
            (LeafPatch::Delete { .. }, None) => return intact().then_some(Patched::Absent),
            (LeafPatch::Delete { keep }, Some(g)) => {
                if b.live < 2 || bytes - 2 - g.1 < keep {
                    return None;
                }
                Some(g)
            }
            (LeafPatch::Put(_), found) => found,
        };
        // Where a put's record goes: appended below the records in a new
        // slot (§3.2.1), or, with no room there, as the in-page garbage
        // collection places it (docs/modes/ips.md §5): in a hole the
        // committed version does not use, in a slot it tombstoned.
        let place = match len {
            0 => None,
            _ if appendable => Some((b.nslots, b.free - len)),
            _ => {
                let slot = (0..b.nslots)
                    .find(|&i| tombstoned(base, ps, b.v, i))
                    .unwrap_or(b.nslots);
                // A new slot entry must not run into the committed
                // version's lowest record.
                if slot >= max_slots(ps) || (slot == b.nslots && b.free < slot_at(ps, slot + 1)) {
                    return None;
                }
                let used = sc.spans.iter().map(|s| (s.0, s.0 + s.1));
                free_gaps(
                    slot_at(ps, b.nslots.max(slot + 1)),
                    ps,
                    used,
                    &mut sc.runs,
                    &mut sc.holes,
                );
                let Some(gap) = sc.holes.iter().rev().find(|g| g.1 - g.0 >= len) else {
                    // The layout's in-page garbage collection places a new
                    // record exactly so: it would not fit there either.
                    // Said only of a base checked intact (`Patched::Full`
                    // is a patch's verdict on a verified page).
                    sc.no_room = found.is_none() && intact();
                    return None;
                };
                Some((slot, gap.1 - len))
            }
        };
        if !intact() {
            return None;
        }
        out.copy_from_slice(base);
        let v = 1 - b.v;
        let (old_tb, tb, tbl) = (tb_at(ps, b.v), tb_at(ps, v), tb_len(ps));
        out.copy_within(old_tb..old_tb + tbl, tb);
        if let Some(g) = gone {
            let s = g.4;
            out[tb + s / 8] |= 0x80 >> (s % 8);
        }
        let mut ranges = [
            (v * HDR_LEN, (v + 1) * HDR_LEN),
            (FLIP_AT, tb + tbl),
            (0, 0),
            (0, 0),
        ];
        let (mut nslots, mut free) = (b.nslots, b.free);
        if let (LeafPatch::Put(value), Some((slot, at))) = (patch, place) {
            cell::put_plain_leaf(out, at, key, value);
            let s = slot_at(ps, slot);
            out[s..s + 2].copy_from_slice(&(at as u16).to_be_bytes());
            out[tb + slot / 8] &= !(0x80 >> (slot % 8));
            ranges[2] = (at, at + len);
            ranges[3] = (s, s + 2);
            nslots = nslots.max(slot + 1);
            free = free.min(at);
        }
        let mut h = Version {
            v,
            kind: LEAF,
            nslots,
            live: b.live + place.is_some() as usize - gone.is_some() as usize,
            flags: 0,
            tid: ctx.tid,
            right: 0,
            free,
            txn_size: 0,
            page_count: 0,
            crc: 0,
            ordered: false,
        };
        write_header(out, &h);
        out[FLIP_AT..TB_AT].copy_from_slice(&[v as u8, 0, 0, 0]);
        let new = place.map(|(slot, at)| (slot, at, len));
        h.crc = Self::patched_crc(pgno, base, out, &b, v, &sc.spans, gone, new);
        write_header(out, &h);
        // A base version whose own checksum fails (damage the page
        // checksum missed) leaves one that fails: that is the point (C5).
        debug_assert!(
            parse(
                pgno,
                base,
                &b,
                max_key,
                &BYTEWISE,
                &mut sc.other,
                Parse::Verify
            )
            .ok()
                != Some(b.crc)
                || parse(
                    pgno,
                    out,
                    &h,
                    max_key,
                    &BYTEWISE,
                    &mut sc.other,
                    Parse::Verify
                )
                .ok()
                    == Some(h.crc),
            "patched version checksum, page {pgno}"
        );
        seal_patched(pgno, base, out, PAGE_SUM_AT, &ranges);
        Some(Patched::Written {
            existed: found.is_some(),
        })
    }

    /// The checksum of the version [`IpsFormat::patch_record`] wrote to
    /// half `v` of `out`, from the committed version `b`'s (live records
    /// `spans`, kept when `b` is of the first layout): the head term
    /// changes (header and tombstone bitmap),
    /// record `gone`'s term comes off and `new`'s (slot, offset, length)
    /// goes on. Over a base of the first layout, whose checksum is summed
    /// in order, the new version is summed whole.
    #[allow(clippy::too_many_arguments)]
    fn patched_crc(
        pgno: Pgno,
        base: &[u8],
        out: &[u8],
        b: &Version,
        v: usize,
        spans: &[Span],
        gone: Option<Span>,
        new: Option<(usize, usize, usize)>,
    ) -> u32 {
        if b.ordered {
            // `spans` holds every live record of the base (slots unique).
            let kept = spans
                .iter()
                .filter(|s| gone.is_none_or(|g| g.4 != s.4))
                .map(|s| (s.4, s.0, s.1));
            return version_sum(pgno, out, v, kept.chain(new));
        }
        let mut crc = b
            .crc
            .wrapping_sub(head_term(pgno, base, b.v))
            .wrapping_add(head_term(pgno, out, v));
        if let Some(s) = gone {
            crc = crc.wrapping_sub(record_term(base, s.4, s.0, s.1));
        }
        if let Some((slot, at, len)) = new {
            crc = crc.wrapping_add(record_term(out, slot, at, len));
        }
        crc
    }

    fn write_version(
        &self,
        pgno: Pgno,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Result<bool> {
        let ps = ctx.page_size;
        // The pager's hint of one put over a verified base: written as the
        // patch path writes it (the key's record found by its bytes, which
        // the hint says the base stores for it, if at all).
        if let (Some(b), Node::Leaf(cells), Some(LeafChange::Value(i) | LeafChange::Inserted(i))) =
            (base, node, ctx.leaf_change.filter(|_| ctx.base_verified))
        {
            // A new key: the base version holds the others, and not it.
            let absent = match ctx.leaf_change {
                Some(LeafChange::Inserted(_)) => cells.len().checked_sub(1),
                _ => None,
            };
            let plain = cells.get(i).filter(|c| c.key.chain().is_none());
            if let Some(Value::Inline(v)) = plain.map(|c| &c.value) {
                let put = LeafPatch::Put(&v[..]);
                let key = &cells[i].key[..];
                if self
                    .patch_record(pgno, b, key, put, &BYTEWISE, absent, ctx, out, sc)
                    .is_some()
                {
                    return Ok(true);
                }
                if sc.no_room {
                    // A new key with no room even after the in-page garbage
                    // collection: the tree splits the node (no layout of
                    // every record to find that out again).
                    return Ok(false);
                }
            }
        }
        let Some(plan) = self.layout(
            Some(pgno),
            !ctx.base_verified,
            node,
            base,
            ps,
            ctx.tid,
            ctx.leaf_change.filter(|_| ctx.base_verified),
            sc,
        )?
        else {
            return Ok(false);
        };
        match (plan.base, base) {
            (Some(_), Some(b)) => out.copy_from_slice(b),
            _ => out.fill(0),
        }
        // The new records where the layout put them: appended below the
        // base version's records, or in space the base does not use.
        if plan.base.is_none() {
            sc.place.clear();
            sc.reused.clear();
            let mut at = ps;
            for &i in &sc.new {
                at -= sc.lens[i];
                sc.place.push(at);
            }
        }
        for (&i, &at) in sc.new.iter().zip(&sc.place) {
            put_cell(node, i, out, at);
            let s = slot_at(ps, sc.slots[i]);
            out[s..s + 2].copy_from_slice(&(at as u16).to_be_bytes());
        }
        // The new version's tombstones: the base version's plus its own.
        let tb = tb_at(ps, plan.v);
        match plan.base {
            Some(b) => out.copy_within(tb_at(ps, b.v)..tb_at(ps, b.v) + tb_len(ps), tb),
            None => out[tb..tb + tb_len(ps)].fill(0),
        }
        for &s in &sc.tomb {
            out[tb + s / 8] |= 0x80 >> (s % 8);
        }
        for &s in &sc.reused {
            out[tb + s / 8] &= !(0x80 >> (s % 8));
        }
        let (kind, right) = kind_of(node);
        let mut h = Version {
            v: plan.v,
            kind,
            nslots: plan.nslots,
            live: node.len(),
            flags: 0,
            tid: ctx.tid,
            right,
            free: plan.free,
            txn_size: 0,
            page_count: 0,
            crc: 0,
            ordered: false,
        };
        write_header(out, &h);
        out[FLIP_AT..TB_AT].copy_from_slice(&[plan.v as u8, 0, 0, 0]);
        // The checksum, patched from the base's when it is of this layout:
        // the head term swapped, the terms of the base's records this
        // version does not keep off, the new records' on. Else summed over
        // the live records: the base's kept ones and the new ones.
        let kept = sc
            .spans
            .iter()
            .zip(&sc.kept)
            .filter(|_| plan.base.is_some());
        let new = sc.new.iter().zip(&sc.place);
        let new = new.map(|(&i, &at)| (sc.slots[i], at, sc.lens[i]));
        let live = kept
            .clone()
            .filter(|(_, &k)| k)
            .map(|(s, _)| (s.4, s.0, s.1))
            .chain(new.clone());
        h.crc = match (plan.base.filter(|b| !b.ordered), base) {
            (Some(b), Some(bp)) if sc.kept.len() == sc.spans.len() => {
                let crc = b
                    .crc
                    .wrapping_sub(head_term(pgno, bp, b.v))
                    .wrapping_add(head_term(pgno, out, plan.v));
                let gone = kept.filter(|(_, &k)| !k);
                let crc = gone.fold(crc, |c, (s, _)| {
                    c.wrapping_sub(record_term(bp, s.4, s.0, s.1))
                });
                let crc = new.fold(crc, |c, (slot, at, len)| {
                    c.wrapping_add(record_term(out, slot, at, len))
                });
                // Over a sound base, the patched sum is the summed one.
                debug_assert!(
                    parse(
                        pgno,
                        bp,
                        &b,
                        self.max_key_len(ps),
                        &BYTEWISE,
                        &mut sc.other,
                        Parse::Verify
                    )
                    .ok()
                        != Some(b.crc)
                        || crc == version_sum(pgno, out, plan.v, live),
                    "patched version checksum, page {pgno}"
                );
                crc
            }
            _ => version_sum(pgno, out, plan.v, live),
        };
        write_header(out, &h);
        match base.filter(|_| plan.base.is_some() && sc.new.len() <= PATCH_RECORDS) {
            Some(b) => {
                // Patched from the base's page checksum over what this
                // write changed: the new version's header, F and the
                // tombstone bitmaps, each new record and its slot entry. A
                // base whose checksum failed leaves one that fails (C5).
                let mut ranges = [(0, 0); 2 + 2 * PATCH_RECORDS];
                ranges[0] = (plan.v * HDR_LEN, (plan.v + 1) * HDR_LEN);
                ranges[1] = (FLIP_AT, tb + tb_len(ps));
                for (k, (&i, &at)) in sc.new.iter().zip(&sc.place).enumerate() {
                    let s = slot_at(ps, sc.slots[i]);
                    ranges[2 + 2 * k] = (at, at + sc.lens[i]);
                    ranges[3 + 2 * k] = (s, s + 2);
                }
                seal_patched(pgno, b, out, PAGE_SUM_AT, &ranges);
            }
            None => pagesum::seal(pgno, out, PAGE_SUM_AT),
        }
        Ok(true)
    }

    /// Invalidate the versions `doomed` picks (TID := INV), flipping F back
    /// when it named one of them (\[IPS\] §3.2.4: "inverts the bit flag").
    fn invalidate_versions(
        &self,
        page: &mut [u8],
        pgno: Pgno,
        doomed: &dyn Fn(&Version) -> bool,
    ) -> usize {
        let mut n = 0;
        let vs = [read_version(page, 0), read_version(page, 1)];
        for h in vs.into_iter().flatten() {
            if h.valid() && doomed(&h) {
                let at = h.v * HDR_LEN + 8;
                page[at..at + 8].copy_from_slice(&INV.to_be_bytes());
                if page[FLIP_AT] as usize == h.v {
                    page[FLIP_AT] = (1 - h.v) as u8;
                }
                n += 1;
            }
        }
        if n > 0 && self.versions_intact(pgno, page) {
            pagesum::seal(pgno, page, PAGE_SUM_AT);
        }
        n
    }
}

impl NodeFormat for IpsFormat {
    fn name(&self) -> &'static str {
        "ips"
    }

    fn decode(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<Node> {
        self.decode_in(pgno, page, None, ctx)
    }

    fn decode_shared(&self, pgno: Pgno, page: &Arc<[u8]>, ctx: &DecodeCtx) -> Result<Node> {
        self.decode_in(pgno, page, Some(page), ctx)
    }

    fn fits(&self, node: &Node, base: Option<&[u8]>, ctx: &EncodeCtx) -> bool {
        with_scratch(|sc| {
            matches!(
                self.layout(
                    None,
                    false,
                    node,
                    base,
                    ctx.page_size,
                    ctx.tid,
                    ctx.leaf_change.filter(|_| ctx.base_verified),
                    sc,
                ),
                Ok(Some(_))
            )
        })
    }

    fn leaf_cell_size(&self, c: &LeafCell) -> usize {
        2 + cell::leaf_len(c)
    }

    fn interior_cell_size(&self, c: &InteriorCell) -> usize {
        2 + cell::interior_len(c)
    }

    fn capacity(&self, page_size: usize) -> usize {
        page_size - slots_at(page_size)
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
        if out.len() != ps || ps < 512 {
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
            let done = self.patch_record(pgno, base, key, patch, order, None, ctx, out, sc);
            // A new key with no room even after the in-page garbage
            // collection: the layout would not place it either.
            match done {
                None if sc.no_room => Some(Patched::Full),
                done => done,
            }
        }))
    }

    fn max_key_len(&self, page_size: usize) -> usize {
        // An overflow leaf cell is 1 + 3 + 10 + key + 4 bytes plus its
        // 2-byte slot; keep every cell within a quarter page (a longer key
        // overflows into a cell no larger: `overflow_key_local`).
        self.max_inline_cell(page_size) - 20
    }

    fn unsorted_slots(&self) -> bool {
        true
    }

    fn max_inline_cell(&self, page_size: usize) -> usize {
        self.capacity(page_size) / 4
    }

    fn needs_base(&self) -> bool {
        true
    }

    /// An update appends the cell's new version beside the committed one
    /// (\[IPS\] §3.2.2): a leaf left full by an appending split would
    /// overflow, and move, at every update of one of its cells. With one
    /// cell of room it takes the update in place, and the in-page garbage
    /// collection frees the replaced record for the next one.
    fn append_split_slack(&self) -> usize {
        1
    }

    fn raw_reserved(&self) -> usize {
        RAW_TAIL
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

impl InPageFormat for IpsFormat {
    const PAGE_SUM_AT: usize = PAGE_SUM_AT;

    fn has_versions(&self, page: &[u8]) -> bool {
        let written = |b: u8| b == MAGIC || b == MAGIC_ORDERED;
        page.len() >= 512 && (written(page[0]) || written(page[HDR_LEN]))
    }

    fn versions(&self, pgno: Pgno, page: &[u8]) -> Vec<VersionState> {
        let max_key = self.max_key_len(page.len());
        (0..2)
            .filter_map(|v| read_version(page, v))
            .map(|h| VersionState {
                index: h.v,
                tid: h.tid,
                record: (h.flags & FLAG_COMMIT != 0).then_some(CommitRecord {
                    tid: h.tid,
                    txn_size: h.txn_size,
                    page_count: h.page_count,
                }),
                intact: with_scratch(|sc| {
                    verify(pgno, page, &h, max_key, &BYTEWISE, &mut sc.other).is_ok()
                }),
            })
            .collect()
    }

    fn visible(&self, pgno: Pgno, page: &[u8], fcc: u64) -> Option<usize> {
        let vs = versions(pgno, page).ok()?;
        let f = check_flip(pgno, page, &vs).ok()?;
        select(&vs, f, fcc).map(|h| h.v)
    }

    fn invalidate(&self, page: &mut [u8], pgno: Pgno, doomed: &dyn Fn(u64) -> bool) -> usize {
        if page.len() < 512 {
            return 0;
        }
        if let Some(n) = invalidate_envelope(pgno, page, doomed) {
            return n;
        }
        self.invalidate_versions(page, pgno, &|h| doomed(h.tid))
    }

    fn repair(&self, page: &mut [u8], pgno: Pgno, fcc: u64) -> usize {
        let ps = page.len();
        if ps < 512 {
            return 0;
        }
        if raw_tid(pgno, page).is_some() {
            return self.invalidate(page, pgno, &|t| t > fcc);
        }
        if !self.has_versions(page) {
            return 0;
        }
        let max_key = self.max_key_len(ps);
        // Versions above the FCC go first; the visible one is then chosen
        // among the rest.
        let mut n = self.invalidate_versions(page, pgno, &|h| h.tid > fcc);
        let visible = self.visible(pgno, page, fcc);
        let snapshot = page.to_vec();
        n += self.invalidate_versions(page, pgno, &|h| {
            Some(h.v) != visible
                && with_scratch(|sc| verify(pgno, &snapshot, h, max_key, &BYTEWISE, &mut sc.other))
                    .is_err()
        });
        // A damaged version keeps the page checksum failing (C5).
        if n == 0 && !pagesum::verify(pgno, page, PAGE_SUM_AT) && self.versions_intact(pgno, page) {
            pagesum::seal(pgno, page, PAGE_SUM_AT);
            n = 1;
        }
        n
    }

    fn embed_commit(&self, pgno: Pgno, page: &mut [u8], rec: CommitRecord) -> Result<bool> {
        if page.len() < 512 || raw_tid(pgno, page).is_some() {
            return Ok(false);
        }
        let Some(mut h) = (0..2)
            .filter_map(|v| read_version(page, v))
            .find(|h| h.tid == rec.tid)
        else {
            return Ok(false);
        };
        let (s, e) = (h.v * HDR_LEN, (h.v + 1) * HDR_LEN);
        let mut old = [0u8; HDR_LEN];
        old.copy_from_slice(&page[s..e]);
        #[cfg(debug_assertions)]
        let intact = pagesum::verify(pgno, page, PAGE_SUM_AT);
        // The version's checksum changes by its header bytes alone: the
        // head term here, a same-length edit of the message in the first
        // layout (stored ^ old sum ^ new sum). A checksum that failed
        // keeps failing: damage is never sealed.
        let max_key = self.max_key_len(page.len());
        let ordered_sum = |page: &[u8], h: &Version| {
            with_scratch(|sc| {
                let o = &mut sc.other;
                parse(pgno, page, h, max_key, &BYTEWISE, o, Parse::Verify)
            })
        };
        let before = match h.ordered {
            true => ordered_sum(page, &h)?,
            false => head_term(pgno, page, h.v),
        };
        h.flags |= FLAG_COMMIT;
        h.txn_size = rec.txn_size;
        h.page_count = rec.page_count;
        write_header(page, &h);
        h.crc = match h.ordered {
            true => h.crc ^ before ^ ordered_sum(page, &h)?,
            false => h
                .crc
                .wrapping_sub(before)
                .wrapping_add(head_term(pgno, page, h.v)),
        };
        write_header(page, &h);
        // Only the header changed: the page checksum is patched over it
        // (the message bytes after it: the rest of the page but the
        // checksum field, which follows both headers).
        let after = page.len() - e - SUM_LEN;
        let sum = pagesum::stored(page, PAGE_SUM_AT) ^ pagesum::run_term(&old, &page[s..e], after);
        page[PAGE_SUM_AT..PAGE_SUM_AT + SUM_LEN].copy_from_slice(&sum.to_be_bytes());
        #[cfg(debug_assertions)]
        debug_assert!(
            !intact || pagesum::verify(pgno, page, PAGE_SUM_AT),
            "patched page checksum, page {pgno}"
        );
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Value;

    const PS: usize = 512;

    fn ectx(tid: u64) -> EncodeCtx {
        EncodeCtx::new(PS, tid, true)
    }

    fn dctx(fcc: u64) -> DecodeCtx<'static> {
        DecodeCtx {
            page_size: PS,
            committed_tid: fcc,
            checksums: true,
            order: &BYTEWISE,
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
        IpsFormat
            .encode(7, node, base, &ectx(tid), &mut out)
            .unwrap();
        out
    }

    /// Byte ranges where two images differ.
    fn changed(a: &[u8], b: &[u8]) -> Vec<usize> {
        (0..a.len()).filter(|&i| a[i] != b[i]).collect()
    }

    /// Offsets of the live records of the version with `tid`.
    fn offsets(page: &[u8], tid: u64) -> Vec<usize> {
        let h = (0..2)
            .filter_map(|v| read_version(page, v))
            .find(|h| h.tid == tid)
            .unwrap();
        let mut spans = Vec::new();
        verify(7, page, &h, 100, &BYTEWISE, &mut spans).unwrap();
        let mut o: Vec<usize> = spans.iter().map(|s| s.0).collect();
        o.sort_unstable();
        o
    }

    /// Rewrite version `v` of `page` as the first layout wrote it: magic
    /// 0x15, the checksum one sum over the live records in slot order.
    fn to_first_layout(page: &mut [u8], v: usize) {
        let mut h = read_version(page, v).unwrap();
        h.ordered = true;
        write_header(page, &h);
        let max_key = IpsFormat.max_key_len(PS);
        h.crc = parse(
            7,
            page,
            &h,
            max_key,
            &BYTEWISE,
            &mut Vec::new(),
            Parse::Verify,
        )
        .unwrap();
        write_header(page, &h);
        pagesum::seal(7, page, PAGE_SUM_AT);
    }

    #[test]
    fn versions_of_the_first_layout_still_read_and_take_writes() {
        let f = IpsFormat;
        let n1 = leaf(&[("a", 10), ("b", 10), ("c", 10)]);
        let mut p1 = enc(&n1, None, 1);
        let v = p1[FLIP_AT] as usize;
        to_first_layout(&mut p1, v);
        assert_eq!(p1[v * HDR_LEN], MAGIC_ORDERED);
        assert_eq!(f.decode(7, &p1, &dctx(1)).unwrap(), n1);
        // Its checksum is the ordered sum: the order-free one differs, and
        // damage to a record is still found.
        let h = read_version(&p1, v).unwrap();
        let unordered = Version {
            ordered: false,
            ..h
        };
        let spans = &mut Vec::new();
        let max_key = f.max_key_len(PS);
        let free_sum = parse(7, &p1, &unordered, max_key, &BYTEWISE, spans, Parse::Verify);
        assert_ne!(free_sum.unwrap(), h.crc);
        let mut bad = p1.clone();
        bad[PS - 1] ^= 1;
        assert!(verify(7, &bad, &h, max_key, &BYTEWISE, spans).is_err());
        // A full write and a patch over it: the new version is of this
        // layout, and both versions read.
        let n2 = leaf(&[("a", 10), ("c", 12), ("d", 3)]);
        let p2 = enc(&n2, Some(&p1), 2);
        assert_eq!(p2[(1 - v) * HDR_LEN], MAGIC);
        assert_eq!(f.decode(7, &p2, &dctx(1)).unwrap(), n1);
        assert_eq!(f.decode(7, &p2, &dctx(2)).unwrap(), n2);
        let mut p3 = vec![0u8; PS];
        let put = LeafPatch::Put(b"bbbbbb");
        let r = f.patch_leaf(7, &p1, b"b", put, &BYTEWISE, &ectx(2), &mut p3);
        assert_eq!(r.unwrap(), Some(Patched::Written { existed: true }));
        assert_eq!(f.decode(7, &p3, &dctx(1)).unwrap(), n1);
        let n3 = leaf(&[("a", 10), ("b", 6), ("c", 10)]);
        assert_eq!(f.decode(7, &p3, &dctx(2)).unwrap(), n3);
        // A commit record embedded in it keeps its layout.
        let rec = CommitRecord {
            tid: 1,
            txn_size: 1,
            page_count: 9,
        };
        let mut p4 = p1.clone();
        assert!(f.embed_commit(7, &mut p4, rec).unwrap());
        assert_eq!(p4[v * HDR_LEN], MAGIC_ORDERED);
        assert_eq!(f.decode(7, &p4, &dctx(1)).unwrap(), n1);
        assert!(f.versions(7, &p4).iter().all(|x| x.intact));
        // And in one of this layout, the head term alone changes.
        let mut p5 = enc(&n1, None, 1);
        assert!(f.embed_commit(7, &mut p5, rec).unwrap());
        assert!(f.versions(7, &p5).iter().all(|x| x.intact));
    }

    #[test]
    fn versions_alternate_and_visibility_follows_the_snapshot() {
        let f = IpsFormat;
        let v1 = leaf(&[("a", 10), ("b", 10)]);
        let p1 = enc(&v1, None, 1);
        assert_eq!(f.decode(7, &p1, &dctx(1)).unwrap(), v1);
        assert!(
            f.decode(7, &p1, &dctx(0)).is_err(),
            "TID 1 above snapshot 0"
        );
        let v2 = leaf(&[("a", 10), ("c", 12)]);
        let p2 = enc(&v2, Some(&p1), 2);
        assert_eq!(p2[FLIP_AT], 1, "F flips to the new half");
        assert_eq!(
            f.decode(7, &p2, &dctx(1)).unwrap(),
            v1,
            "uncommitted is invisible"
        );
        assert_eq!(f.decode(7, &p2, &dctx(2)).unwrap(), v2);
        let v3 = leaf(&[("c", 12), ("d", 40)]);
        let p3 = enc(&v3, Some(&p2), 3);
        assert_eq!(
            read_version(&p3, 0).unwrap().tid,
            3,
            "the older half is reused"
        );
        assert_eq!(p3[FLIP_AT], 0);
        assert_eq!(f.decode(7, &p3, &dctx(3)).unwrap(), v3);
        assert_eq!(f.decode(7, &p3, &dctx(2)).unwrap(), v2);
        // A snapshot older than both versions cannot be served (a reader
        // that old aborts, [IPS] §4.2).
        assert!(f.decode(7, &p3, &dctx(1)).is_err());
    }

    #[test]
    fn records_are_appended_and_committed_ones_never_move() {
        let v1 = leaf(&[("m", 20), ("n", 20)]);
        let p1 = enc(&v1, None, 1);
        // Insert "a" (smaller key): appended below, slot at the end.
        let p2 = enc(&leaf(&[("a", 20), ("m", 20), ("n", 20)]), Some(&p1), 2);
        let h2 = read_version(&p2, 1).unwrap();
        assert_eq!((h2.nslots, h2.live), (3, 3));
        assert_eq!(
            be16(&p2, slot_at(PS, 2)),
            h2.free,
            "new slot points at the new record"
        );
        assert!(offsets(&p2, 2).starts_with(&[h2.free]));
        assert_eq!(
            offsets(&p1, 1),
            offsets(&p2, 2)[1..],
            "committed records stay put"
        );
        // Delete "m": only the new half's header, its tombstone bitmap, F
        // and the page checksum change.
        let p3 = enc(&leaf(&[("a", 20), ("n", 20)]), Some(&p2), 3);
        let h3 = read_version(&p3, 0).unwrap();
        assert_eq!((h3.nslots, h3.live, h3.free), (3, 2, h2.free));
        let allowed = |i: usize| {
            i < HDR_LEN
                || (PAGE_SUM_AT..PAGE_SUM_AT + 4).contains(&i)
                || i == FLIP_AT
                || (tb_at(PS, 0)..tb_at(PS, 0) + tb_len(PS)).contains(&i)
        };
        for i in changed(&p2, &p3) {
            assert!(allowed(i), "delete changed byte {i}");
        }
        assert!(tombstoned(&p3, PS, 0, 0), "slot 0 (\"m\") is tombstoned");
        // Update "n": tombstone + append.
        let p4 = enc(&leaf(&[("a", 20), ("n", 25)]), Some(&p3), 4);
        let h4 = read_version(&p4, 1).unwrap();
        assert_eq!((h4.nslots, h4.live), (4, 2));
        assert!(tombstoned(&p4, PS, 1, 1), "old \"n\" is tombstoned");
        assert!(h4.free < h3.free);
        assert_eq!(
            IpsFormat.decode(7, &p4, &dctx(3)).unwrap(),
            leaf(&[("a", 20), ("n", 20)])
        );
    }

    #[test]
    fn rewriting_a_spilled_version_keeps_the_committed_one() {
        let f = IpsFormat;
        let v1 = leaf(&[("a", 10)]);
        let p1 = enc(&v1, None, 1);
        let spilled = enc(&leaf(&[("a", 10), ("b", 30)]), Some(&p1), 2);
        let v2 = leaf(&[("b", 30), ("z", 5)]);
        let p2 = enc(&v2, Some(&spilled), 2);
        assert_eq!(f.decode(7, &p2, &dctx(1)).unwrap(), v1);
        assert_eq!(f.decode(7, &p2, &dctx(2)).unwrap(), v2);
    }

    #[test]
    fn a_full_page_overflows_and_the_root_stub_always_fits() {
        let f = IpsFormat;
        let names: Vec<String> = (0..40).map(|i| format!("k{i:03}")).collect();
        let mut keys = Vec::new();
        for n in &names {
            keys.push((n.as_str(), 6));
            if !f.fits(&leaf(&keys), None, &ectx(1)) {
                keys.pop();
                break;
            }
        }
        let p = enc(&leaf(&keys), None, 1);
        // Updating one record needs space that only garbage collection
        // (a copy to a fresh page) can give.
        let mut upd = leaf(&keys);
        if let Node::Leaf(c) = &mut upd {
            c[0].value = Value::Inline(vec![9; 6].into());
        }
        assert!(!f.fits(&upd, Some(&p), &ectx(2)));
        assert!(f.fits(&upd, None, &ectx(2)));
        // Deleting fits: it only sets tombstones.
        assert!(f.fits(&leaf(&keys[1..]), Some(&p), &ectx(2)));
        let stub = Node::Interior {
            cells: Vec::new(),
            right: 9,
        };
        assert!(f.fits(&stub, Some(&p), &ectx(2)));
        let s = enc(&stub, Some(&p), 2);
        assert_eq!(f.decode(7, &s, &dctx(2)).unwrap(), stub);
        assert_eq!(f.decode(7, &s, &dctx(1)).unwrap(), leaf(&keys));
    }

    /// In-page garbage collection: a page with room for one more record
    /// takes update after update in place (the replaced records' space and
    /// slots are reused), and each version leaves every byte the committed
    /// one reads as it was.
    #[test]
    fn updates_reuse_the_space_of_replaced_records() {
        let f = IpsFormat;
        let names: Vec<String> = (0..40).map(|i| format!("k{i:03}")).collect();
        let mut keys: Vec<(&str, usize)> = Vec::new();
        for n in &names {
            keys.push((n.as_str(), 30));
            if !f.fits(&leaf(&keys), None, &ectx(1)) {
                keys.pop();
                break;
            }
        }
        // One record fewer than a full page: room for one appended update.
        keys.pop();
        let mut node = leaf(&keys);
        let mut page = enc(&node, None, 1);
        let mut updates = 0;
        for tid in 2..200u64 {
            let mut next = node.clone();
            if let Node::Leaf(c) = &mut next {
                let i = (tid as usize * 7) % c.len();
                c[i].value = Value::Inline(vec![tid as u8; 30].into());
            }
            if !f.fits(&next, Some(&page), &ectx(tid)) {
                break;
            }
            let out = enc(&next, Some(&page), tid);
            // The committed version is untouched and still decodes.
            let base = read_version(&page, page[FLIP_AT] as usize).unwrap();
            let mut spans = Vec::new();
            verify(7, &page, &base, 100, &BYTEWISE, &mut spans).unwrap();
            for i in changed(&page, &out) {
                assert!(
                    !spans.iter().any(|s| (s.0..s.0 + s.1).contains(&i)),
                    "update {tid} changed byte {i} of a committed record"
                );
            }
            assert_eq!(f.decode(7, &out, &dctx(tid - 1)).unwrap(), node);
            assert_eq!(f.decode(7, &out, &dctx(tid)).unwrap(), next);
            page = out;
            node = next;
            updates += 1;
        }
        // Without the reuse the page would overflow at the second update;
        // with it (records' space and slots), never.
        assert_eq!(updates, 198);
        let h = read_version(&page, page[FLIP_AT] as usize).unwrap();
        assert_eq!((h.nslots, h.live), (keys.len() + 1, keys.len()));
    }

    #[test]
    fn torn_damaged_or_flipped_versions_are_detected() {
        let f = IpsFormat;
        // A write of version 2 torn in any subset of the eight 512-byte
        // sectors of a 4 KiB page: version 1 stays intact, recovery's scan
        // never counts a torn version 2, and repair restores version 1.
        const BIG: usize = 4096;
        let e = |tid| EncodeCtx::new(BIG, tid, true);
        let d = |fcc| DecodeCtx {
            page_size: BIG,
            committed_tid: fcc,
            checksums: true,
            order: &BYTEWISE,
        };
        let names: Vec<String> = (0..30).map(|i| format!("key{i:02}")).collect();
        let cells = |n: usize, len: usize| -> Node {
            let keys: Vec<(&str, usize)> = names[..n].iter().map(|k| (k.as_str(), len)).collect();
            leaf(&keys)
        };
        let v1 = cells(20, 60);
        let mut p1 = vec![0u8; BIG];
        f.encode(7, &v1, None, &e(1), &mut p1).unwrap();
        let v2 = cells(26, 61);
        let mut p2 = vec![0u8; BIG];
        f.encode(7, &v2, Some(&p1), &e(2), &mut p2).unwrap();
        for mask in 0u32..256 {
            let mut torn = p1.clone();
            for sec in 0..8 {
                if mask & (1 << sec) != 0 {
                    torn[sec * 512..(sec + 1) * 512]
                        .copy_from_slice(&p2[sec * 512..(sec + 1) * 512]);
                }
            }
            // Before recovery a read sees version 1 or an error (the torn
            // version 2 fails its checksum), never other data.
            if let Ok(n) = f.decode(7, &torn, &d(1)) {
                assert_eq!(n, v1, "mask {mask:#x}");
            }
            let s = f.scan(7, &torn);
            assert!(s.tids.contains(&1));
            if s.tids.contains(&2) {
                assert_eq!(f.decode(7, &torn, &d(2)).unwrap(), v2, "mask {mask:#x}");
            }
            let mut rolled = torn.clone();
            f.repair(&mut rolled, 7, 1);
            assert_eq!(f.decode(7, &rolled, &d(5)).unwrap(), v1);
            assert!(pagesum::verify(7, &rolled, PAGE_SUM_AT));
        }
        let p2 = enc(
            &leaf(&[("a", 40), ("c", 60)]),
            Some(&enc(&leaf(&[("a", 40)]), None, 1)),
            2,
        );
        // Damage to the visible version's TID is an error, not a fallback.
        let mut d = p2.clone();
        d[HDR_LEN + 8] ^= 0x40;
        assert!(f.decode(7, &d, &dctx(u64::MAX - 1)).is_err());
        // A flipped F is an error.
        let mut d = p2.clone();
        d[FLIP_AT] ^= 1;
        assert!(f.decode(7, &d, &dctx(2)).is_err());
        // A record byte of the visible version.
        let mut d = p2.clone();
        d[PS - 3] ^= 1;
        assert!(f.decode(7, &d, &dctx(2)).is_err());
        assert!(f.verify_tree(7, &d, &dctx(2)).is_err());
    }

    #[test]
    fn rollback_flips_back_and_invalidates() {
        let f = IpsFormat;
        let v1 = leaf(&[("a", 10)]);
        let p1 = enc(&v1, None, 1);
        let mut p2 = enc(&leaf(&[("b", 10)]), Some(&p1), 2);
        assert!(f.roll_back_page(&mut p2, 7, 2));
        assert_eq!(p2[FLIP_AT], 0, "F flipped back");
        assert_eq!(read_version(&p2, 1).unwrap().tid, INV);
        assert_eq!(f.decode(7, &p2, &dctx(9)).unwrap(), v1);
        assert!(!f.roll_back_page(&mut p2, 7, 2), "idempotent");
        assert_eq!(f.scan(7, &p2).tids, vec![1]);
        // The next writer reuses the rolled-back half and its space.
        let v3 = leaf(&[("a", 10), ("c", 10)]);
        let p3 = enc(&v3, Some(&p2), 3);
        assert_eq!(f.decode(7, &p3, &dctx(3)).unwrap(), v3);
        assert_eq!(
            read_version(&p3, 1).unwrap().free,
            read_version(&p2, 1).unwrap().free
        );
    }

    #[test]
    fn embedded_commit_record_is_found() {
        let f = IpsFormat;
        let mut p = enc(&leaf(&[("a", 10)]), None, 4);
        let rec = CommitRecord {
            tid: 4,
            txn_size: 3,
            page_count: 17,
        };
        assert!(f.embed_commit(7, &mut p, rec).unwrap());
        let s = f.scan(7, &p);
        assert_eq!((s.tids, s.records), (vec![4], vec![rec]));
        assert!(f.decode(7, &p, &dctx(4)).is_ok());
        assert!(!f
            .embed_commit(7, &mut p, CommitRecord { tid: 5, ..rec })
            .unwrap());
    }

    /// Descending byte order: a table order other than memcmp.
    struct Descending;

    impl KeyOrder for Descending {
        fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
            b.cmp(a)
        }
    }

    #[test]
    fn any_key_order_sorts_the_view_and_keeps_unchanged_records() {
        let f = IpsFormat;
        let d = |fcc| DecodeCtx {
            page_size: PS,
            committed_tid: fcc,
            checksums: true,
            order: &Descending,
        };
        let v1 = leaf(&[("c", 5), ("b", 5), ("a", 5)]);
        let p1 = enc(&v1, None, 1);
        assert_eq!(f.decode(7, &p1, &d(1)).unwrap(), v1);
        // Replace "b", keep "c" and "a": only one record is appended.
        let mut v2 = v1.clone();
        if let Node::Leaf(c) = &mut v2 {
            c[1].value = Value::Inline(vec![9; 5].into());
        }
        let p2 = enc(&v2, Some(&p1), 2);
        let h = read_version(&p2, 1).unwrap();
        assert_eq!((h.nslots, h.live), (4, 3));
        assert_eq!(f.decode(7, &p2, &d(2)).unwrap(), v2);
        assert_eq!(f.decode(7, &p2, &d(1)).unwrap(), v1);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let f = IpsFormat;
        for fill in [0u8, 0x15, 0xFF] {
            let mut p = vec![fill; PS];
            p[0] = MAGIC;
            let _ = f.decode(7, &p, &dctx(3));
            let _ = f.scan(7, &p);
            let _ = f.repair(&mut p, 7, 3);
            let _ = f.fits(&leaf(&[("a", 1)]), Some(&p), &ectx(4));
        }
    }

    /// A put of a key the logical view says is new, over a verified base
    /// (the pager's `Inserted` hint), skips the walk of the records: it
    /// must write the bytes the walking patch writes, and a page that
    /// decodes to the node.
    #[test]
    fn a_hinted_insert_writes_what_the_walking_patch_writes() {
        use rand::{Rng, SeedableRng};
        let f = IpsFormat;
        let mut rng = rand::rngs::StdRng::seed_from_u64(43);
        let (mut skipped, mut tid) = (0, 1);
        let mut node = leaf(&[("m", 10)]);
        let mut page = enc(&node, None, tid);
        for _ in 0..3000 {
            tid += 1;
            let Node::Leaf(cells) = &node else {
                unreachable!()
            };
            let mut cells = cells.clone();
            let key = vec![b'a' + rng.random_range(0..26u8), rng.random()];
            let at = match cells.binary_search_by(|c| c.key[..].cmp(&key[..])) {
                // An existing key: replace or delete it (tombstones, holes).
                Ok(j) => {
                    match rng.random_bool(0.5) && cells.len() > 1 {
                        true => drop(cells.remove(j)),
                        false => {
                            cells[j].value = Value::Inline(vec![1; rng.random_range(1..30)].into())
                        }
                    }
                    let next = Node::Leaf(cells);
                    let mut out = vec![0u8; PS];
                    if !f
                        .encode_if_fits(7, &next, Some(&page), &ectx(tid), &mut out)
                        .unwrap()
                    {
                        (node, page) = (leaf(&[("m", 10)]), enc(&leaf(&[("m", 10)]), None, tid));
                    } else {
                        (node, page) = (next, out);
                    }
                    continue;
                }
                Err(j) => j,
            };
            let value = vec![7u8; rng.random_range(1..30)];
            cells.insert(
                at,
                LeafCell {
                    key: key.clone().into(),
                    value: Value::Inline(value.clone().into()),
                },
            );
            let next = Node::Leaf(cells);
            let mut ctx = ectx(tid);
            ctx.base_verified = true;
            ctx.leaf_change = Some(LeafChange::Inserted(at));
            let mut hinted = vec![0u8; PS];
            let fits = f
                .encode_if_fits(7, &next, Some(&page), &ctx, &mut hinted)
                .unwrap();
            let mut walked = vec![0u8; PS];
            let patch = LeafPatch::Put(&value);
            let w = with_scratch(|sc| {
                f.patch_record(
                    7,
                    &page,
                    &key,
                    patch,
                    &BYTEWISE,
                    None,
                    &ctx,
                    &mut walked,
                    sc,
                )
            });
            if w.is_some() {
                assert!(
                    fits,
                    "the walking patch placed what the hinted write refused"
                );
                assert_eq!(hinted, walked, "hinted insert {tid}");
                skipped += 1;
            }
            if !fits {
                (node, page) = (leaf(&[("m", 10)]), enc(&leaf(&[("m", 10)]), None, tid));
                continue;
            }
            assert_eq!(f.decode(7, &hinted, &dctx(tid)).unwrap(), next);
            (node, page) = (next, hinted);
        }
        assert!(skipped > 500, "only {skipped} hinted inserts compared");
    }
}
