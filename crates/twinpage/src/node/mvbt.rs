//! The multi-version B-tree page (\[LSM\] §3.2, §4.1, Fig. 2): every cell,
//! in leaves and interior nodes, carries its *life span* [start, end); a
//! cell is visible to a reader whose snapshot `s` has `start <= s < end`
//! (end = INV: ∞, a *live* cell; otherwise *dead*). An insert adds a cell
//! [T, ∞), a delete sets the end of the live cell to T, an update does
//! both. Old versions of the node stay readable in the page for readers
//! of any snapshot not older than the lazy-GC horizon.
//!
//! **Byte-preserving writes.** A transaction T writes a page over its
//! committed image without changing a byte the committed content uses,
//! except end fields going from ∞ to T: new cells go into bytes no
//! committed cell occupies, new slots into slot entries the committed
//! version does not use. The page keeps two version headers, each with
//! its own TID, membership bitmap and checksums (as DHL and IPS do, so
//! that the counting commit of `journal/dhl.rs` runs over it unchanged);
//! a version's checksum covers its members' bytes with every end field
//! above the version's TID read as ∞, so a later writer's ends never
//! break it, and a torn write of T leaves the committed version intact.
//! It is a sum of one term per member, in any order, so a write changes
//! it by the terms of the members it adds, ends or drops.
//! Lazy garbage collection (\[LSM\] §5.1) drops dead cells that ended at
//! or before the horizon from the new version's membership; their bytes
//! are reused from the next write of the page on (the committed version
//! still names them until T commits).
//!
//! Layout (big-endian), byte by byte in `docs/modes/mvbt.md`:
//!
//! ```text
//! 0..40    version header 0        40..80   version header 1
//!   +0  u8   magic 0x3C (0: never written; 0x3B: the first layout,
//!            whose body crc is one crc32c in slot order, still read)
//!   +1  u8   kind of the node at the version: 0x0D leaf, 0x05 interior
//!   +2  u16  nslots: slots 0..nslots are the version's slot array
//!   +4  u16  members: bits set in the version's membership bitmap
//!   +6  u8   flags; bit 0: the version carries a commit record
//!   +7  u8   0
//!   +8  u64  TID of the writer (INV: rolled back)
//!   +16 u32  commit record: transaction size
//!   +20 u32  commit record: page count after the commit
//!   +24 u64  GC horizon: the version holds every cell visible at a
//!            snapshot not below it (older readers get "snapshot too old")
//!   +32 u32  body crc, mod 2^32: crc32c(bitmap) continued from pgno,
//!            plus per member crc32c(its cell with the end field clamped)
//!            continued from slot << 16 | its slot entry
//!   +36 u32  header crc: crc32c(pgno, +0..+36)
//! 80..84   page checksum: crc32c(pgno, bytes 0..80, bytes 84..ps)
//! 84..88   0
//! 88..     membership bitmaps M[0], M[1]: ps/128 bytes each (ps/16 slots)
//! 88+ps/64 slot array: u16 cell offsets (unsorted; shared by the versions)
//! ...      free space and cells (holes are reused)
//! cell:    u8 flags (bit 0 interior, bit 1 the interior's rightmost
//!          child: key +∞, stored empty), u64 start, u64 end, then the
//!          leaf or interior cell of `cell.rs` (overflowing keys as
//!          `node::cell` describes: cells pair by the stored bytes)
//! ```

use super::cell::{self, key_prefix, Reader};
use super::inpage::{
    any_bit_from, check_envelope, check_free_page, free_gaps, invalidate_envelope, raw_tid,
    seal_patched, snapshot_too_old, verify_tree_page, with_local, write_envelope, InPageFormat,
    VersionState,
};
pub use super::inpage::{CommitRecord, INV, RAW_TAIL};
use super::{
    Bytes, DecodeCtx, EncodeCtx, InteriorCell, LeafCell, LeafChange, LeafPatch, Node, NodeFormat,
    Patched, Value,
};
use crate::base::pagesum;
use crate::base::{Error, KeyOrder, Pgno, Result, BYTEWISE};
use std::cell::RefCell;
use std::cmp::Ordering;
use std::sync::Arc;

/// Size of one version header.
pub const HDR_LEN: usize = 40;
/// Offset of the page checksum.
pub const PAGE_SUM_AT: usize = 2 * HDR_LEN;
/// Offset of the first membership bitmap.
pub const MAP_AT: usize = PAGE_SUM_AT + 8;
/// Magic byte of a version header written by this layout: its body
/// checksum sums one term per member, in any order.
pub const MAGIC: u8 = 0x3C;
/// Magic byte of the first layout's version header: its body checksum is
/// one crc32c over the members in slot order. Still read and verified;
/// every new version is written with [`MAGIC`].
pub const MAGIC_ORDERED: u8 = 0x3B;
/// Page type of a leaf.
pub const LEAF: u8 = cell::LEAF;
/// Page type of an interior node.
pub const INTERIOR: u8 = cell::INTERIOR;
const FLAG_COMMIT: u8 = 1;
/// Cell flag: an interior cell.
pub const CELL_INTERIOR: u8 = 1;
/// Cell flag: the interior node's rightmost child (key +∞).
pub const CELL_RIGHT: u8 = 2;
/// Bytes before a cell's body: flags, start, end.
pub const PREFIX: usize = 17;
/// Offset of the end field in a cell.
const END_AT: usize = 9;
/// A +∞ interior cell and its slot: the root's last resort (an interior
/// node with only its rightmost child). Every page keeps room for two.
pub const STUB: usize = PREFIX + 1 + 4 + 2;

/// Most changed byte ranges a write patches the page checksum over; past
/// them it sums the page.
const PATCH_RANGES: usize = 16;

/// Ranges closer than this are patched as one (unchanged bytes between
/// them add nothing to the patch, and each range costs a sum and a shift).
const PATCH_GAP: usize = 64;

/// Sort and merge the changed byte ranges of a write for the page
/// checksum's patch: neighbours closer than [`PATCH_GAP`] become one,
/// except across the checksum field. Returns how many are left, or
/// `usize::MAX` if two overlap (members sharing bytes in a crafted base
/// would cancel out in the patch: such a page is summed).
fn merge_ranges(ranges: &mut Vec<(usize, usize)>) -> usize {
    ranges.sort_unstable();
    let mut n = 0;
    for k in 0..ranges.len() {
        let (s, e) = ranges[k];
        if n > 0 {
            let last = &mut ranges[n - 1];
            if s < last.1 {
                return usize::MAX;
            }
            if s - last.1 <= PATCH_GAP && (last.1 > PAGE_SUM_AT || s < PAGE_SUM_AT + 4) {
                last.1 = e;
                continue;
            }
        }
        ranges[n] = (s, e);
        n += 1;
    }
    ranges.truncate(n);
    n
}

/// Most slots a page can have (the bitmaps' capacity): ps / 16.
pub fn max_slots(ps: usize) -> usize {
    ps / 16
}

/// Bytes of one membership bitmap.
pub fn map_len(ps: usize) -> usize {
    max_slots(ps) / 8
}

fn map_at(ps: usize, v: usize) -> usize {
    MAP_AT + v * map_len(ps)
}

/// Offset of the slot array.
pub fn slots_at(ps: usize) -> usize {
    MAP_AT + 2 * map_len(ps)
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

fn member(page: &[u8], ps: usize, v: usize, i: usize) -> bool {
    page[map_at(ps, v) + i / 8] & (0x80 >> (i % 8)) != 0
}

fn corrupt(pgno: Pgno, what: impl Into<String>) -> Error {
    Error::corrupt("database", pgno, what)
}

/// The MVBT page format. `reserve` is LS-MVBT's Reserved Buffer Space
/// (\[LSM\] §4.3): a write that ends no cell must leave room for one more
/// cell of the node's largest size, which a write that ends cells (a
/// lazily split node, Fig. 4) may then use.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MvbtFormat {
    reserve: bool,
}

impl MvbtFormat {
    /// The original MVBT's page: no reserved buffer.
    pub const MVBT: MvbtFormat = MvbtFormat { reserve: false };
    /// LS-MVBT's page: one cell of reserved buffer space.
    pub const LAZY: MvbtFormat = MvbtFormat { reserve: true };

    /// Whether writes keep the reserved buffer space.
    pub fn reserves(&self) -> bool {
        self.reserve
    }
}

/// A version header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// 0 or 1: which header.
    pub v: usize,
    /// Kind of the node at the version's TID.
    pub kind: u8,
    /// Slots 0..nslots are the version's slot array.
    pub nslots: usize,
    /// Number of member cells.
    pub members: usize,
    /// Flag bits (bit 0: commit record).
    pub flags: u8,
    /// Transaction that wrote the version (INV: rolled back).
    pub tid: u64,
    /// Commit record: pages written by the transaction.
    pub txn_size: u32,
    /// Commit record: page count after the commit.
    pub page_count: u32,
    /// The version holds every cell visible at snapshots not below it.
    pub horizon: u64,
    /// Checksum of the members.
    pub body_crc: u32,
    /// The first layout's header ([`MAGIC_ORDERED`]): the body checksum
    /// is summed in slot order.
    pub ordered: bool,
}

impl Version {
    fn valid(&self) -> bool {
        self.tid != INV
    }
}

fn header_crc(pgno: Pgno, page: &[u8], v: usize) -> u32 {
    // One sum over a copy: two calls cost more than the 40 bytes.
    let mut msg = [0u8; 40];
    msg[..4].copy_from_slice(&pgno.to_be_bytes());
    msg[4..].copy_from_slice(&page[v * HDR_LEN..v * HDR_LEN + 36]);
    crc32c::crc32c(&msg)
}

/// Header `v` if it was written: `(version, its header crc holds)`.
fn read_header(pgno: Pgno, page: &[u8], v: usize) -> Option<(Version, bool)> {
    let h = header_fields(page, v)?;
    Some((h, header_holds(pgno, page, v)))
}

/// Whether header `v`'s checksum holds.
fn header_holds(pgno: Pgno, page: &[u8], v: usize) -> bool {
    be32(page, v * HDR_LEN + 36) == header_crc(pgno, page, v)
}

/// Header `v`'s fields if it was written, its checksum unchecked.
fn header_fields(page: &[u8], v: usize) -> Option<Version> {
    let b = &page[v * HDR_LEN..(v + 1) * HDR_LEN];
    if b[0] != MAGIC && b[0] != MAGIC_ORDERED {
        return None;
    }
    Some(Version {
        v,
        kind: b[1],
        nslots: be16(b, 2),
        members: be16(b, 4),
        flags: b[6],
        tid: be64(b, 8),
        txn_size: be32(b, 16),
        page_count: be32(b, 20),
        horizon: be64(b, 24),
        body_crc: be32(b, 32),
        ordered: b[0] == MAGIC_ORDERED,
    })
}

fn write_header(pgno: Pgno, page: &mut [u8], h: &Version) {
    let b = &mut page[h.v * HDR_LEN..(h.v + 1) * HDR_LEN];
    b.fill(0);
    // A header rewritten in place (a commit record, an invalidation)
    // keeps its layout: its body checksum was summed by it.
    b[0] = if h.ordered { MAGIC_ORDERED } else { MAGIC };
    b[1] = h.kind;
    b[2..4].copy_from_slice(&(h.nslots as u16).to_be_bytes());
    b[4..6].copy_from_slice(&(h.members as u16).to_be_bytes());
    b[6] = h.flags;
    b[8..16].copy_from_slice(&h.tid.to_be_bytes());
    b[16..20].copy_from_slice(&h.txn_size.to_be_bytes());
    b[20..24].copy_from_slice(&h.page_count.to_be_bytes());
    b[24..32].copy_from_slice(&h.horizon.to_be_bytes());
    b[32..36].copy_from_slice(&h.body_crc.to_be_bytes());
    let crc = header_crc(pgno, page, h.v);
    page[h.v * HDR_LEN + 36..h.v * HDR_LEN + 40].copy_from_slice(&crc.to_be_bytes());
}

/// Both headers; a bad magic or a header whose checksum fails is
/// corruption (a header lies in the page's first sector and is never
/// torn: a failing one is damage, not a crash).
fn headers(pgno: Pgno, page: &[u8]) -> Result<[Option<Version>; 2]> {
    let mut out = [None, None];
    for (v, slot) in out.iter_mut().enumerate() {
        match page[v * HDR_LEN] {
            0 => {}
            MAGIC | MAGIC_ORDERED => match read_header(pgno, page, v) {
                Some((h, true)) => *slot = Some(h),
                _ => {
                    return Err(corrupt(
                        pgno,
                        format!("version header {v}: checksum mismatch (damaged)"),
                    ))
                }
            },
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

/// The version a reader at snapshot `s` reads: the newer valid one if
/// its TID is at most `s`, else the older valid one. Only the newest
/// version can be uncommitted (a writer's, in flight), and the older one
/// keeps every cell a reader of an older snapshot can see (lazy GC drops
/// only cells dead at the oldest open snapshot), so either serves `s`.
fn select(vs: &[Option<Version>; 2], s: u64) -> Option<Version> {
    match (vs[0].filter(|h| h.valid()), vs[1].filter(|h| h.valid())) {
        (None, None) => None,
        (Some(h), None) | (None, Some(h)) => Some(h),
        (Some(a), Some(b)) => {
            let (newer, older) = if a.tid >= b.tid { (a, b) } else { (b, a) };
            Some(if newer.tid <= s { newer } else { older })
        }
    }
}

/// A member cell of a version.
#[derive(Debug, Clone, Copy)]
struct Span {
    slot: usize,
    off: usize,
    len: usize,
    flags: u8,
    start: u64,
    end: u64,
    /// The key's position in the page.
    ks: usize,
    ke: usize,
    /// The key's first 8 bytes, big-endian, zero-padded ([`key_prefix`]).
    pfx: u64,
}

impl Span {
    fn live_at(&self, s: u64) -> bool {
        self.start <= s && self.end > s
    }

    /// Sort rank of the cell's kind: leaf, interior, rightmost child.
    fn rank(&self) -> u8 {
        self.flags
    }

    /// Bytewise order of (kind, key): the prefixes decide unless equal.
    fn cmp_key(&self, other: &Span, page: &[u8]) -> Ordering {
        (self.rank(), self.pfx)
            .cmp(&(other.rank(), other.pfx))
            .then_with(|| page[self.ks..self.ke].cmp(&page[other.ks..other.ke]))
    }
}

/// A varint of one or two bytes at `page[at..]`: its value and the
/// position after it.
fn short_varint(page: &[u8], at: usize) -> Option<(usize, usize)> {
    let b0 = *page.get(at)?;
    if b0 < 0x80 {
        return Some((usize::from(b0), at + 1));
    }
    let b1 = *page.get(at + 1)?;
    (b1 < 0x80).then(|| (usize::from(b0 & 0x7f) | usize::from(b1) << 7, at + 2))
}

/// Most cells: a leaf cell with a whole key and an inline value, or an
/// interior cell with a whole key, short lengths, inside the page. For
/// such a cell body at `at`, where its key starts and ends and where the
/// cell ends, as [`Reader::leaf_key`] or [`Reader::interior_key`] would
/// find them; `None` sends the caller to them (every other cell, and
/// every error).
#[inline]
fn plain_cell(page: &[u8], at: usize, flags: u8, max_key: usize) -> Option<(usize, usize, usize)> {
    if flags & CELL_INTERIOR == 0 {
        if *page.get(at)? != 0 {
            return None;
        }
        let (klen, p) = short_varint(page, at + 1)?;
        let (vlen, ks) = short_varint(page, p)?;
        let end = ks + klen + vlen;
        (klen <= max_key && end <= page.len()).then_some((ks, ks + klen, end))
    } else {
        // A one-byte key length is never the overflow marker (0x80 0x00).
        let klen = usize::from(*page.get(at)?);
        let (ks, ke) = (at + 1, at + 1 + klen);
        let child = page.get(ke..ke + 4)?;
        (klen < 0x80 && klen <= max_key && child != [0; 4]).then_some((ks, ke, ke + 4))
    }
}

/// [`key_prefix`] of the key `page[ks..ks + klen]`: one load and a mask
/// where eight bytes from `ks` lie in the page (no copy of a variable
/// length, which is a call to `memcpy`).
#[inline]
fn prefix_at(page: &[u8], ks: usize, klen: usize) -> u64 {
    match page.get(ks..ks + 8) {
        Some(b) => {
            let keep = if klen >= 8 {
                u64::MAX
            } else {
                !(u64::MAX >> (8 * klen))
            };
            be64(b, 0) & keep
        }
        None => key_prefix(&page[ks..ks + klen]),
    }
}

/// Parse the members of version `h` (in slot order) into `out`, checking
/// every offset and length against the page. Returns the body checksum as
/// computed from the page when `sum` (else 0: a base verified since it was
/// read is only parsed).
fn parse(
    pgno: Pgno,
    page: &[u8],
    h: &Version,
    max_key: usize,
    out: &mut Vec<Span>,
    sum: bool,
) -> Result<u32> {
    let ps = page.len();
    out.clear();
    let bad = |what: String| corrupt(pgno, format!("version {} (TID {}): {what}", h.v, h.tid));
    if h.kind != LEAF && h.kind != INTERIOR {
        return Err(bad(format!("bad node kind {:#04x}", h.kind)));
    }
    if h.nslots > max_slots(ps) || h.members > h.nslots {
        return Err(bad(format!(
            "{} slots ({} members) cannot fit",
            h.nslots, h.members
        )));
    }
    let m = map_at(ps, h.v);
    let map = &page[m..m + map_len(ps)];
    if any_bit_from(map, h.nslots) {
        return Err(bad("membership bit set past the slot count".into()));
    }
    let lo = slot_at(ps, h.nslots);
    out.reserve(h.members);
    // The set bits a byte at a time (a clear slot costs nothing); none
    // lies past `nslots` (checked above).
    for (at, &byte) in map[..h.nslots.div_ceil(8)].iter().enumerate() {
        let mut bits = byte;
        while bits != 0 {
            let k = bits.leading_zeros() as usize;
            bits &= !(0x80 >> k);
            let i = at * 8 + k;
            let off = be16(page, slot_at(ps, i));
            if off < lo || off + PREFIX >= ps {
                return Err(bad(format!(
                    "slot {i}: cell offset {off} outside the cell area"
                )));
            }
            let flags = page[off];
            let start = be64(page, off + 1);
            let end = be64(page, off + END_AT);
            // A leaf cell, an interior one, or the rightmost child's.
            if flags != 0 && flags != CELL_INTERIOR && flags != CELL_INTERIOR | CELL_RIGHT {
                return Err(bad(format!("slot {i}: bad cell flags {flags:#04x}")));
            }
            if start == 0 || start >= end || start > h.tid {
                return Err(bad(format!("slot {i}: bad life span [{start}, {end})")));
            }
            let (ks, ke, cell_end) = match plain_cell(page, off + PREFIX, flags, max_key) {
                Some(k) => k,
                None => {
                    let mut r = Reader::new(page, off + PREFIX, ps, pgno);
                    let key = if flags & CELL_INTERIOR == 0 {
                        r.leaf_key(i, max_key)?
                    } else {
                        r.interior_key(i, max_key)?
                    };
                    let ks = key.as_ptr() as usize - page.as_ptr() as usize;
                    (ks, ks + key.len(), r.pos)
                }
            };
            let key = &page[ks..ke];
            if flags & CELL_RIGHT != 0 && !key.is_empty() {
                return Err(bad(format!("slot {i}: rightmost child with a key")));
            }
            let len = cell_end - off;
            out.push(Span {
                slot: i,
                off,
                len,
                flags,
                start,
                end,
                ks,
                ke,
                pfx: prefix_at(page, ks, key.len()),
            });
        }
    }
    if out.len() != h.members {
        return Err(bad(format!(
            "{} members, the header says {}",
            out.len(),
            h.members
        )));
    }
    if !sum {
        return Ok(0);
    }
    if !h.ordered {
        let terms = out
            .iter()
            .map(|sp| member_term(page, sp.slot, sp.off, sp.len, h.tid));
        return Ok(terms.fold(head_term(pgno, map), u32::wrapping_add));
    }
    Ok(body_crc(|msg| {
        msg.extend_from_slice(&pgno.to_be_bytes());
        msg.extend_from_slice(map);
        for sp in out.iter() {
            let at = slot_at(ps, sp.slot);
            msg.extend_from_slice(&[page[at], page[at + 1]]);
            let cell = &page[sp.off..sp.off + sp.len];
            if sp.end > h.tid && sp.end != INV {
                // A later writer's end: summed as ∞.
                msg.extend_from_slice(&cell[..END_AT]);
                msg.extend_from_slice(&INV.to_be_bytes());
                msg.extend_from_slice(&cell[PREFIX..]);
            } else {
                msg.extend_from_slice(cell);
            }
        }
    }))
}

/// The body checksum's first term: the crc32c of the membership bitmap
/// continued from the value `pgno` (`crc32c_append`, as
/// [`member_term`] binds a cell to its slot).
fn head_term(pgno: Pgno, map: &[u8]) -> u32 {
    crc32c::crc32c_append(pgno, map)
}

/// A member's term of the body checksum (the sum, mod 2^32, of
/// [`head_term`] and one term per member, so a write that adds, ends or
/// drops a member changes the sum by that member's terms alone): the
/// crc32c of its cell with the end field *clamped* (an end above `tid`,
/// the version's TID, is summed as ∞), continued from the value
/// `slot << 16 | offset` (`crc32c_append`), which binds the cell to its
/// slot and its slot entry. `page[off..off + len]` lies in the page.
fn member_term(page: &[u8], slot: usize, off: usize, len: usize, tid: u64) -> u32 {
    let seed = (slot as u32) << 16 | off as u32;
    let cell = &page[off..off + len];
    let end = be64(cell, END_AT);
    if end > tid && end != INV {
        let c = crc32c::crc32c_append(seed, &cell[..END_AT]);
        let c = crc32c::crc32c_append(c, &INV.to_be_bytes());
        crc32c::crc32c_append(c, &cell[PREFIX..])
    } else {
        crc32c::crc32c_append(seed, cell)
    }
}

thread_local! {
    static BODY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The first layout's body checksum ([`MAGIC_ORDERED`]): the crc32c of
/// a version's body message, which `put` writes into a per-thread buffer.
fn body_crc(put: impl FnOnce(&mut Vec<u8>)) -> u32 {
    with_local(&BODY, |msg| {
        msg.clear();
        put(msg);
        crc32c::crc32c(msg)
    })
}

/// [`parse`] and compare with the stored body checksum.
fn verify(pgno: Pgno, page: &[u8], h: &Version, max_key: usize, out: &mut Vec<Span>) -> Result<()> {
    if parse(pgno, page, h, max_key, out, true)? != h.body_crc {
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

/// What happens to a member of the base version in the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Live and unchanged: stays live.
    Keep,
    /// Live in the base, not in the new node: its life span ends at T.
    End,
    /// Dead, and a reader may still need it: stays a member.
    Dead,
    /// Dead at the horizon: dropped from the new version (lazy GC).
    Drop,
}

/// How many root stubs, up to two, the next writer of a version can place
/// as [`MvbtFormat::layout`] would: each stub's cell in a hole between
/// the version's members or in the gap above its slot array, its slot
/// among the version's free slot entries or, past them, growing the slot
/// array into the gap. Free bytes in holes too small for a stub do not
/// count. `used`: the members' byte ranges; `members` of the version's
/// `nslots` slots are taken; `bits` and `gaps` are scratch.
fn stub_room(
    ps: usize,
    nslots: usize,
    members: usize,
    used: impl Iterator<Item = (usize, usize)>,
    runs: &mut Vec<(usize, usize)>,
    gaps: &mut Vec<(usize, usize)>,
) -> usize {
    const CELL: usize = STUB - 2;
    let from = slot_at(ps, nslots);
    free_gaps(from, ps, used, runs, gaps);
    // The first free run, if it starts at the slot array, is the gap the
    // array may grow into; the others are holes between members.
    let (gap, holes) = match gaps.split_first() {
        Some((&(s, e), rest)) if s == from => (e - s, rest),
        _ => (0, &gaps[..]),
    };
    let in_holes: usize = holes.iter().map(|&(s, e)| (e - s) / CELL).sum();
    let free_slots = nslots.saturating_sub(members);
    (0..=2)
        .rev()
        .find(|&k| {
            let in_gap = k - in_holes.min(k);
            let new_slots = k.saturating_sub(free_slots);
            members + k <= max_slots(ps) && gap >= in_gap * CELL + 2 * new_slots
        })
        .unwrap_or(0)
}

/// The free space a new version of the base members `spans` (none starts
/// below `lo`, its slot array's end) may use: the free runs of `[lo, ps)`
/// around them, ascending, into `holes` (as [`free_gaps`] finds them: a
/// node's few dozen cells sort faster than they mark a page bitmap).
/// Returns the top of the gap from `lo` to the lowest member and the index
/// of the first hole in `holes` (the free run at `lo`, if any, is the
/// gap). `used` is scratch.
fn free_space(
    lo: usize,
    ps: usize,
    spans: &[Span],
    used: &mut Vec<u64>,
    holes: &mut Vec<(usize, usize)>,
) -> (usize, usize) {
    holes.clear();
    // Most versions have no holes (nothing dropped since the page was
    // laid out): their members fill `[lowest, ps)` exactly, the gap is
    // all the free space, and nothing needs sorting. (Members that overlap,
    // in a crafted page, can only make this take the gap, which is free;
    // `plan` and the patches decide alike, both asking here.)
    let (lowest, bytes) = spans
        .iter()
        .fold((ps, 0), |(l, b), sp| (l.min(sp.off), b + sp.len));
    if lowest >= lo && bytes == ps - lowest {
        return (lowest, 0);
    }
    used.clear();
    used.extend(
        spans
            .iter()
            .map(|sp| (sp.off as u64) << 32 | (sp.off + sp.len) as u64),
    );
    used.sort_unstable();
    let mut at = lo;
    for &u in used.iter() {
        let (s, e) = ((u >> 32) as usize, (u & 0xFFFF_FFFF) as usize);
        if s > at {
            holes.push((at, s));
        }
        at = at.max(e);
    }
    if at < ps {
        holes.push((at, ps));
    }
    match holes.first() {
        Some(&(s, e)) if s == lo => (e, 1),
        _ => (lo, 0),
    }
}

/// Offset for a new cell of `need` bytes: the top of the smallest hole
/// that takes it, else the top of the gap below the lowest cell (`gap_hi`,
/// above `lo`). `None`: it does not fit.
fn place_cell(
    holes: &mut [(usize, usize)],
    gap_hi: &mut usize,
    lo: usize,
    need: usize,
) -> Option<usize> {
    let best = holes
        .iter_mut()
        .filter(|h| h.1 - h.0 >= need)
        .min_by_key(|h| h.1 - h.0);
    match best {
        Some(h) => {
            h.1 -= need;
            Some(h.1)
        }
        None if *gap_hi >= lo + need => {
            *gap_hi -= need;
            Some(*gap_hi)
        }
        None => None,
    }
}

/// The body checksum of a version of `out` whose bitmap is at `m` and
/// whose members are `members` (slot, offset, length): every member's
/// stored end is the one the version reads (none is a later writer's).
fn members_crc(pgno: Pgno, out: &[u8], m: usize, members: &[(usize, usize, usize)]) -> u32 {
    let map = &out[m..m + map_len(out.len())];
    members
        .iter()
        .map(|&(slot, off, len)| member_term(out, slot, off, len, INV - 1))
        .fold(head_term(pgno, map), u32::wrapping_add)
}

/// The bytes every write of version `w` changes in its base image: its
/// header, the zeroed bytes after the page checksum, its bitmap.
fn version_ranges(ps: usize, w: usize) -> [(usize, usize); 3] {
    let m = map_at(ps, w);
    [
        (w * HDR_LEN, (w + 1) * HDR_LEN),
        (PAGE_SUM_AT + 4, MAP_AT),
        (m, m + map_len(ps)),
    ]
}

/// Finish version `h.v` of `out`, whose members `sc.members` (in any
/// order) are in place: its bitmap (unless `mapped`: the caller wrote
/// it), its body checksum (into `h`), its header, and the page checksum,
/// patched from `base`'s over `sc.ranges` when few ranges changed (each
/// costs a short sum and a shift; a base whose checksum failed leaves one
/// that fails: damage is never sealed), else summed.
fn finish_version(
    pgno: Pgno,
    base: Option<&[u8]>,
    out: &mut [u8],
    mut h: Version,
    sc: &mut Scratch,
    patch: Option<BodyPatch>,
    mapped: bool,
) {
    let ps = out.len();
    let m = map_at(ps, h.v);
    if !mapped {
        out[m..m + map_len(ps)].fill(0);
        for &(slot, _, _) in &sc.members {
            out[m + slot / 8] |= 0x80 >> (slot % 8);
        }
    }
    #[cfg(debug_assertions)]
    {
        // On the stack: a debug build counts allocations too (the
        // largest page's bitmap is 512 bytes).
        let mut want = [0u8; 512];
        for &(slot, _, _) in &sc.members {
            want[slot / 8] |= 0x80 >> (slot % 8);
        }
        debug_assert!(
            out[m..m + map_len(ps)] == want[..map_len(ps)],
            "membership bitmap of page {pgno}"
        );
    }
    // Members end at T at the latest: their stored ends are it.
    h.body_crc = match (patch, base) {
        // A base of the first layout summed its members in order.
        (Some(p), Some(b)) if !p.base.ordered => {
            let c = p.body_crc(pgno, b, out, m, &sc.gone, &sc.came);
            debug_assert!(
                !p.base_sum_holds(pgno, b, &mut sc.other)
                    || c == members_crc(pgno, out, m, &sc.members),
                "patched body checksum, page {pgno}"
            );
            c
        }
        _ => members_crc(pgno, out, m, &sc.members),
    };
    write_header(pgno, out, &h);
    out[PAGE_SUM_AT + 4..MAP_AT].fill(0);
    match base {
        Some(b) if merge_ranges(&mut sc.ranges) <= PATCH_RANGES => {
            seal_patched(pgno, b, out, PAGE_SUM_AT, &sc.ranges)
        }
        _ => pagesum::seal(pgno, out, PAGE_SUM_AT),
    }
}

/// How a write's new version differs from its base version, for
/// [`BodyPatch::body_crc`]: the bitmap, and the members whose terms
/// change ([`Scratch::gone`]: the base's members that are dropped or
/// whose summed end changes, as the base summed them; [`Scratch::came`]:
/// the new version's members that are new or whose end changed). Every
/// other member's term is the same in both versions. Each costs a sum of
/// its own bytes.
#[derive(Clone, Copy)]
struct BodyPatch {
    /// The base version.
    base: Version,
    /// The longest key of the page size (to parse the base, in debug
    /// checks).
    max_key: usize,
}

impl BodyPatch {
    /// The new version's body checksum from the base's. `out` holds the
    /// new version (bitmap at `m`). The base's terms of the bitmap and of
    /// `gone` come off, the new version's terms of the bitmap and of
    /// `came` go on. A base whose checksum fails leaves one that fails.
    fn body_crc(
        &self,
        pgno: Pgno,
        base: &[u8],
        out: &[u8],
        m: usize,
        gone: &[(usize, usize, usize)],
        came: &[(usize, usize, usize)],
    ) -> u32 {
        let ps = out.len();
        let (ml, bm) = (map_len(ps), map_at(ps, self.base.v));
        let crc = self
            .base
            .body_crc
            .wrapping_sub(head_term(pgno, &base[bm..bm + ml]))
            .wrapping_add(head_term(pgno, &out[m..m + ml]));
        let crc = gone.iter().fold(crc, |c, &(slot, off, len)| {
            c.wrapping_sub(member_term(base, slot, off, len, self.base.tid))
        });
        came.iter().fold(crc, |c, &(slot, off, len)| {
            c.wrapping_add(member_term(out, slot, off, len, INV - 1))
        })
    }

    /// Whether the base version's stored body checksum is right (debug
    /// checks compare a patched checksum only over a sound base).
    fn base_sum_holds(&self, pgno: Pgno, base: &[u8], spans: &mut Vec<Span>) -> bool {
        parse(pgno, base, &self.base, self.max_key, spans, true).ok() == Some(self.base.body_crc)
    }
}

/// Where a new version goes ([`MvbtFormat::layout`]).
struct Plan {
    /// GC horizon of the new version.
    horizon: u64,
    /// Root stubs (up to two) the next writer can place over the new
    /// version ([`stub_room`]); counted for the root's last resort only
    /// (2 for any other node).
    next_stubs: usize,
    /// The committed version written over (`None`: a fresh page).
    base: Option<Version>,
    /// Header the new version takes.
    w: usize,
    /// Slot count of the new version.
    nslots: usize,
    /// Members of the new version.
    members: usize,
}

/// The vectors a layout works in, kept per thread.
#[derive(Default)]
struct Scratch {
    /// Members of the base version, in slot order.
    spans: Vec<Span>,
    /// Their fates.
    fate: Vec<Fate>,
    /// Indices of the base's live members, sorted by kind and key.
    live: Vec<usize>,
    /// Full encoded length (prefix and body) of every cell of the node.
    lens: Vec<usize>,
    /// New cells of the node: (cell index, slot, offset).
    new: Vec<(usize, usize, usize)>,
    /// Free byte ranges of the cell area above the gap.
    holes: Vec<(usize, usize)>,
    /// The base members' byte ranges, packed (start << 32 | end).
    used: Vec<u64>,
    /// Byte ranges a write changed (the page checksum's patch).
    ranges: Vec<(usize, usize)>,
    /// [`stub_room`]'s scratch: the used runs, sorted, and the free ones.
    runs: Vec<(usize, usize)>,
    gaps: Vec<(usize, usize)>,
    /// Members of the new version: (slot, offset, length).
    members: Vec<(usize, usize, usize)>,
    /// Members whose body checksum terms a write takes off (the base's)
    /// and puts on (the new version's): (slot, offset, length).
    gone: Vec<(usize, usize, usize)>,
    came: Vec<(usize, usize, usize)>,
    /// One cell body.
    cell: Vec<u8>,
    /// An overflowing key's identity.
    ident: Vec<u8>,
    /// Members of another version (verification).
    other: Vec<Span>,
    /// Set when [`MvbtFormat::patch_write`] declined for want of a slot or
    /// of room, where [`MvbtFormat::plan`] would decline too.
    no_room: bool,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

fn with_scratch<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
    with_local(&SCRATCH, f)
}

/// Flags and key identity of cell `i` of `node` as this format stores it
/// (an overflowing key's local bytes and chain head, `cell::key_ident`,
/// built in `ident`).
fn node_cell<'a>(node: &'a Node, i: usize, ident: &'a mut Vec<u8>) -> (u8, &'a [u8]) {
    match node {
        Node::Leaf(c) => (0, cell::key_ident(&c[i].key, ident)),
        Node::Interior { cells, .. } if i < cells.len() => {
            (CELL_INTERIOR, cell::key_ident(&cells[i].key, ident))
        }
        Node::Interior { .. } => (CELL_INTERIOR | CELL_RIGHT, &[]),
    }
}

/// Cells of `node` as this format stores them: an interior node's
/// rightmost child is a cell of its own.
fn cell_count(node: &Node) -> usize {
    match node {
        Node::Leaf(c) => c.len(),
        Node::Interior { cells, .. } => cells.len() + 1,
    }
}

fn body_len(node: &Node, i: usize) -> usize {
    match node {
        Node::Leaf(c) => cell::leaf_len(&c[i]),
        Node::Interior { cells, .. } if i < cells.len() => cell::interior_len(&cells[i]),
        Node::Interior { .. } => 1 + 4,
    }
}

fn put_body(node: &Node, i: usize, out: &mut [u8], at: usize) {
    match node {
        Node::Leaf(c) => cell::put_leaf(out, at, &c[i]),
        Node::Interior { cells, .. } if i < cells.len() => cell::put_interior(out, at, &cells[i]),
        Node::Interior { right, .. } => cell::put_interior(
            out,
            at,
            &InteriorCell {
                key: Bytes::default(),
                child: *right,
            },
        ),
    }
}

/// A cell a patch adds ([`MvbtFormat::patch_write`]): a leaf's plain
/// cell (a whole key, an inline value), or cell `i` of an interior node.
enum NewCell<'a> {
    Plain { key: &'a [u8], value: &'a [u8] },
    Of { node: &'a Node, i: usize },
}

impl NewCell<'_> {
    /// The cell's flags byte (its first).
    fn flags(&self) -> u8 {
        match self {
            NewCell::Plain { .. } => 0,
            NewCell::Of { node, i } => match node {
                Node::Leaf(_) => 0,
                Node::Interior { cells, .. } if *i < cells.len() => CELL_INTERIOR,
                Node::Interior { .. } => CELL_INTERIOR | CELL_RIGHT,
            },
        }
    }

    /// Write the cell's body (after its life span) at `out[at..]`.
    fn put(&self, out: &mut [u8], at: usize) {
        match self {
            NewCell::Plain { key, value } => {
                cell::put_plain_leaf(out, at, key, value);
            }
            NewCell::Of { node, i } => put_body(node, *i, out, at),
        }
    }
}

/// Whether the base cell `sp` stores `key` (an identity) of the kind
/// `flags`, against its first 8 bytes `pfx`.
fn key_eq(sp: &Span, page: &[u8], flags: u8, pfx: u64, key: &[u8]) -> bool {
    sp.rank() == flags
        && sp.pfx == pfx
        && sp.ke - sp.ks == key.len()
        && (key.len() <= 8 || page[sp.ks + 8..sp.ke] == key[8..])
}

/// Whether cell `i` of `node`, of the base cell `sp`'s kind and key (the
/// caller compared them) and encoded length (`len`, prefix included), is
/// stored as `sp` (same bytes after the life span). A plain cell (a whole
/// key, an inline value) has only its value or child left to compare: of
/// one length, and with its key's, equal lengths leave one encoding of
/// the length fields. Any other cell is encoded and compared.
fn cell_matches(
    node: &Node,
    i: usize,
    len: usize,
    page: &[u8],
    sp: &Span,
    scratch: &mut Vec<u8>,
) -> bool {
    let (off, end) = (sp.off + PREFIX, sp.off + sp.len);
    if sp.len != len {
        return false;
    }
    let child_is = |child: Pgno| page[end - 4..end] == child.to_be_bytes();
    match node {
        Node::Leaf(c) => {
            if let (Value::Inline(v), None, 0) = (&c[i].value, c[i].key.chain(), page[off]) {
                let stored = &page[sp.ke..end];
                // A value the node shares with this page's bytes is them.
                return stored.len() == v.len()
                    && (std::ptr::eq(stored.as_ptr(), v.as_ptr()) || *stored == v[..]);
            }
        }
        Node::Interior { cells, right } => match cells.get(i) {
            None => return sp.ke == sp.ks && child_is(*right),
            Some(c) if c.key.chain().is_none() && !cell::key_overflows_at(page, off, false) => {
                return child_is(c.child);
            }
            Some(_) => {}
        },
    }
    cell::node_cell_matches(node, i, page, (off, sp.len - PREFIX), scratch)
}

/// Pair the cells of `node` with the base's live members `sc.live`
/// (sorted by kind and key, bytewise): a cell stored exactly as one of
/// them keeps it (its fate becomes `Keep`), the others go to `sc.new` in
/// node order. Fills `sc.lens`. Returns the cells kept.
///
/// `hint`: the pager's [`EncodeCtx::leaf_change`]. When the live members
/// hold the node's keys at the hinted positions (the table orders keys
/// bytewise), the other cells are those members and only a changed value
/// is compared. Otherwise a node whose keys ascend bytewise is paired in
/// one merge walk, any other by binary search.
fn pair(node: &Node, page: &[u8], hint: Option<LeafChange>, sc: &mut Scratch) -> usize {
    let n = cell_count(node);
    let Scratch {
        spans,
        fate,
        live,
        lens,
        new,
        cell: scratch,
        ident,
        ..
    } = sc;
    let mut kept = 0;
    let keep = |j: usize, fate: &mut Vec<Fate>| {
        if fate[j] == Fate::End {
            fate[j] = Fate::Keep;
            true
        } else {
            false
        }
    };
    if let Node::Leaf(cells) = node {
        let by_position = hint.filter(|&ch| {
            ch.fits_counts(n, live.len())
                && (0..n).all(|i| match ch.base_index(i, n, live.len()) {
                    Some(b) => {
                        let key = cell::key_ident(&cells[i].key, ident);
                        key_eq(&spans[live[b]], page, 0, key_prefix(key), key)
                    }
                    None => true,
                })
        });
        if let Some(ch) = by_position {
            // The other cells are the committed ones: so are their lengths.
            lens.extend((0..n).map(|i| match ch.base_index(i, n, live.len()) {
                Some(b) if ch != LeafChange::Value(i) => spans[live[b]].len,
                _ => PREFIX + body_len(node, i),
            }));
            for (i, &len) in lens.iter().enumerate() {
                let same = ch.base_index(i, n, live.len()).filter(|&b| {
                    let sp = &spans[live[b]];
                    ch != LeafChange::Value(i) || cell_matches(node, i, len, page, sp, scratch)
                });
                match same {
                    Some(b) if keep(live[b], fate) => kept += 1,
                    _ => new.push((i, 0, 0)),
                }
            }
            return kept;
        }
    }
    lens.extend((0..n).map(|i| PREFIX + body_len(node, i)));
    // The merge walk needs the node's (kind, key) to ascend bytewise, and
    // whole keys (an overflowing key's identity is built in `ident`).
    let whole = |i: usize| -> Option<(u8, u64, &[u8])> {
        let (flags, key): (u8, &[u8]) = match node {
            Node::Leaf(c) if c[i].key.chain().is_none() => (0, &c[i].key),
            Node::Interior { cells, .. } if i < cells.len() && cells[i].key.chain().is_none() => {
                (CELL_INTERIOR, &cells[i].key)
            }
            Node::Interior { cells, .. } if i == cells.len() => (CELL_INTERIOR | CELL_RIGHT, &[]),
            _ => return None,
        };
        Some((flags, key_prefix(key), key))
    };
    let ascending = (0..n).all(|i| whole(i).is_some()) && (1..n).all(|i| whole(i - 1) < whole(i));
    let mut p = 0;
    for (i, &len) in lens.iter().enumerate() {
        let (flags, key) = node_cell(node, i, ident);
        let pfx = key_prefix(key);
        let cmp = |sp: &Span| {
            (sp.rank(), sp.pfx)
                .cmp(&(flags, pfx))
                .then_with(|| page[sp.ks..sp.ke].cmp(key))
        };
        let found = if ascending {
            while p < live.len() && cmp(&spans[live[p]]) == Ordering::Less {
                p += 1;
            }
            (p < live.len() && cmp(&spans[live[p]]) == Ordering::Equal).then(|| live[p])
        } else {
            live.binary_search_by(|&j| cmp(&spans[j]))
                .ok()
                .map(|k| live[k])
        };
        let same = found.filter(|&j| cell_matches(node, i, len, page, &spans[j], scratch));
        match same {
            Some(j) if keep(j, fate) => kept += 1,
            _ => new.push((i, 0, 0)),
        }
    }
    kept
}

impl MvbtFormat {
    fn check_len(pgno: Pgno, page: &[u8], ps: usize) -> Result<()> {
        if page.len() != ps || ps < 512 {
            return Err(corrupt(
                pgno,
                format!("page buffer of {} bytes", page.len()),
            ));
        }
        Ok(())
    }

    /// Decode at the snapshot `ctx.committed_tid`, with keys and values
    /// pointing into `share` when given.
    fn decode_in(
        &self,
        pgno: Pgno,
        page: &[u8],
        share: Option<&Arc<[u8]>>,
        ctx: &DecodeCtx,
    ) -> Result<Node> {
        Self::check_len(pgno, page, ctx.page_size)?;
        let ps = ctx.page_size;
        let max_key = self.max_key_len(ps);
        let vs = headers(pgno, page)?;
        let s = ctx.committed_tid;
        let Some(h) = select(&vs, s) else {
            return Err(corrupt(
                pgno,
                if vs.iter().all(|v| v.is_none()) {
                    "tree page never written".to_string()
                } else {
                    "no valid version (every version rolled back)".to_string()
                },
            ));
        };
        if s < h.horizon {
            let tids: Vec<String> = vs.iter().flatten().map(|v| v.tid.to_string()).collect();
            return Err(snapshot_too_old(pgno, s, &tids));
        }
        // An intact page checksum vouches for every version (C5): the
        // visible one is then only parsed, not summed again. Not for a
        // version of the first layout: the builds that wrote it resealed
        // without checking the versions.
        let page_ok = !h.ordered && pagesum::verify(pgno, page, PAGE_SUM_AT);
        with_scratch(|sc| {
            if page_ok {
                parse(pgno, page, &h, max_key, &mut sc.spans, false)?;
            } else {
                verify(pgno, page, &h, max_key, &mut sc.spans)?;
            }
            sc.live.clear();
            sc.live
                .extend((0..sc.spans.len()).filter(|&j| sc.spans[j].live_at(s)));
            let interior = sc
                .live
                .iter()
                .filter(|&&j| sc.spans[j].flags & CELL_INTERIOR != 0)
                .count();
            let bad = |what: String| corrupt(pgno, format!("at snapshot {s}: {what}"));
            if interior != 0 && interior != sc.live.len() {
                return Err(bad("leaf and interior cells are both live".into()));
            }
            if sc.live.is_empty() && s >= h.tid && h.kind == INTERIOR {
                return Err(bad("interior node without cells".into()));
            }
            let spans = &sc.spans;
            // An overflowing key's identity is not the key: the table's
            // order cannot compare it. Such a node is listed in bytewise
            // order of the identities (unique to each cell) and sorted once
            // its keys are complete (`cell::complete_keys`, `unsorted_slots`).
            let overflows = |sp: &Span| {
                cell::key_overflows_at(page, sp.off + PREFIX, sp.flags & CELL_INTERIOR == 0)
            };
            let order: &dyn KeyOrder = if sc.live.iter().any(|&j| overflows(&spans[j])) {
                &BYTEWISE
            } else {
                ctx.order
            };
            let cmp = |a: &Span, b: &Span| {
                if order.bytewise() {
                    a.cmp_key(b, page)
                } else {
                    a.rank()
                        .cmp(&b.rank())
                        .then_with(|| order.compare(&page[a.ks..a.ke], &page[b.ks..b.ke]))
                }
            };
            sc.live.sort_unstable_by(|&a, &b| cmp(&spans[a], &spans[b]));
            for w in sc.live.windows(2) {
                let (a, b) = (&spans[w[0]], &spans[w[1]]);
                if cmp(a, b) == Ordering::Equal {
                    return Err(bad(if a.flags & CELL_RIGHT != 0 {
                        "two rightmost children".into()
                    } else {
                        "two live cells with the same key".into()
                    }));
                }
            }
            if interior == 0 {
                let mut out: Vec<LeafCell> = Vec::with_capacity(sc.live.len());
                for &j in &sc.live {
                    let sp = &spans[j];
                    out.push(
                        Reader::new(page, sp.off + PREFIX, ps, pgno)
                            .sharing(share)
                            .leaf(sp.slot, max_key)?,
                    );
                }
                return Ok(Node::Leaf(out));
            }
            let Some(&last) = sc
                .live
                .last()
                .filter(|&&j| spans[j].flags & CELL_RIGHT != 0)
            else {
                return Err(bad("interior node without a rightmost child".into()));
            };
            let mut cells: Vec<InteriorCell> = Vec::with_capacity(sc.live.len() - 1);
            for &j in &sc.live[..sc.live.len() - 1] {
                let sp = &spans[j];
                cells.push(
                    Reader::new(page, sp.off + PREFIX, ps, pgno)
                        .sharing(share)
                        .interior(sp.slot, max_key)?,
                );
            }
            let right = Reader::new(page, spans[last].off + PREFIX, ps, pgno)
                .interior(spans[last].slot, max_key)?
                .child;
            Ok(Node::Interior { cells, right })
        })
    }

    /// The committed version a writer with TID `tid` writes over: the
    /// valid one with the highest TID below `tid` (its own spilled version
    /// is overwritten). `vouched`: the page checksum vouches for the
    /// headers (verified since the page was read, or before any write the
    /// caller makes): the choice reads both headers' TIDs and checks only
    /// the chosen one's checksum. Otherwise both headers' checksums are
    /// checked first ([`headers`]): a damaged TID in the newest header
    /// could make the older version the base, and the write would replace
    /// the newest one.
    fn base_version(pgno: Option<Pgno>, page: &[u8], tid: u64, vouched: bool) -> Result<Version> {
        let at = pgno.unwrap_or(0);
        let newest_below = |vs: [Option<Version>; 2]| {
            let below = |h: Option<Version>| h.filter(|h| h.valid() && h.tid < tid);
            match (below(vs[0]), below(vs[1])) {
                (Some(a), Some(b)) => Ok(if b.tid >= a.tid { b } else { a }),
                (Some(h), None) | (None, Some(h)) => Ok(h),
                (None, None) => Err(corrupt(
                    at,
                    "no committed version to write the new one over",
                )),
            }
        };
        if let Some(p) = pgno.filter(|_| !vouched) {
            return newest_below(headers(p, page)?);
        }
        for v in (0..2).filter(|_| pgno.is_some()) {
            match page[v * HDR_LEN] {
                0 | MAGIC | MAGIC_ORDERED => {}
                b => {
                    return Err(corrupt(
                        at,
                        format!("version header {v}: bad magic {b:#04x}"),
                    ))
                }
            }
        }
        let base = newest_below([header_fields(page, 0), header_fields(page, 1)])?;
        // Only the base's checksum is checked (one sum, not two): the
        // other header is the one the write replaces. Checksums are seeded
        // with the page number: without it (`fits`) headers are only
        // parsed.
        match pgno {
            Some(p) if !header_holds(p, page, base.v) => Err(corrupt(
                p,
                format!("version header {}: checksum mismatch (damaged)", base.v),
            )),
            _ => Ok(base),
        }
    }

    /// Plan the version of `node` that transaction `ctx.tid` writes over
    /// `base`: which base members stay, end or go (lazy GC), which cells
    /// are new and where they go. `Ok(None)`: it does not fit. The base's
    /// checksums are verified when `pgno` is known (encode: a damaged base
    /// is an error); `fits` only plans.
    ///
    /// The root's last resort (an interior node with only its rightmost
    /// child) also collects, when the page would otherwise leave its next
    /// writer room for fewer than two stubs ([`stub_room`]: a stub needs
    /// its cell's bytes in one piece and a slot, so free bytes alone do
    /// not tell), every cell that ended before T, also those open readers
    /// still need: the fixed root cannot move, and readers holding the
    /// horizon back must not fill it for good. Dropped cells free their
    /// bytes only for the next writer (the base still names them), so the
    /// decision is made one write ahead. The version then records the
    /// higher horizon, and a reader of an older snapshot gets "snapshot
    /// too old" (a retryable conflict) from it.
    fn layout(
        &self,
        pgno: Option<Pgno>,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        sc: &mut Scratch,
    ) -> Result<Option<Plan>> {
        let ps = ctx.page_size;
        // The base's members, parsed once for both plans.
        sc.spans.clear();
        let b = match base {
            Some(page) => {
                let at = pgno.unwrap_or(0);
                if page.len() != ps {
                    return Err(corrupt(at, format!("base image of {} bytes", page.len())));
                }
                let b = Self::base_version(pgno, page, ctx.tid, ctx.base_verified)?;
                let max_key = self.max_key_len(ps);
                match pgno {
                    // A base verified since it was read is only parsed.
                    Some(p) if !ctx.base_verified => verify(p, page, &b, max_key, &mut sc.spans)?,
                    _ => {
                        parse(at, page, &b, max_key, &mut sc.spans, false)?;
                    }
                }
                Some((b, page))
            }
            None => None,
        };
        // The pager's hint holds for the committed version, which a base
        // verified since it was read is.
        let hint = ctx.leaf_change.filter(|_| ctx.base_verified);
        let plan = self.plan(node, b, ctx, ctx.horizon, hint, sc)?;
        let last_resort = matches!(node, Node::Interior { cells, .. } if cells.is_empty());
        let forced = ctx.tid.saturating_sub(1);
        match plan {
            Some(p) if last_resort && p.next_stubs < 2 && ctx.horizon < forced => {
                self.plan(node, b, ctx, forced, hint, sc)
            }
            p => Ok(p),
        }
    }

    /// [`MvbtFormat::layout`] with lazy GC up to `horizon`, over the base
    /// version `b` whose members `sc.spans` holds.
    fn plan(
        &self,
        node: &Node,
        b: Option<(Version, &[u8])>,
        ctx: &EncodeCtx,
        horizon: u64,
        hint: Option<LeafChange>,
        sc: &mut Scratch,
    ) -> Result<Option<Plan>> {
        let ps = ctx.page_size;
        let tid = ctx.tid;
        let n = cell_count(node);
        sc.lens.clear();
        sc.new.clear();
        sc.fate.clear();
        // Fates of the base's members. An end at or above T was written by
        // T's own spill (or a rolled-back transaction): ∞ again.
        let last_resort = matches!(node, Node::Interior { cells, .. } if cells.is_empty());
        let mut ended = false;
        sc.live.clear();
        for (j, sp) in sc.spans.iter().enumerate() {
            let end = if sp.end >= tid { INV } else { sp.end };
            let fate = if sp.start >= tid {
                Fate::Drop
            } else if end == INV {
                sc.live.push(j);
                Fate::End
            } else if end > horizon {
                Fate::Dead
            } else {
                Fate::Drop
            };
            sc.fate.push(fate);
        }
        // Cells of the node equal to a live base cell stay; the others
        // are new.
        let keep_count = match b {
            Some((_, page)) => {
                let spans = &sc.spans;
                sc.live
                    .sort_unstable_by(|&a, &b| spans[a].cmp_key(&spans[b], page));
                pair(node, page, hint, sc)
            }
            None => {
                sc.lens.extend((0..n).map(|i| PREFIX + body_len(node, i)));
                sc.new.extend((0..n).map(|i| (i, 0, 0)));
                0
            }
        };
        ended |= keep_count < sc.live.len();
        // Slots for the new cells: entries the base does not use, lowest
        // first, then past its slot array.
        let base_nslots = b.map_or(0, |(h, _)| h.nslots);
        let max = max_slots(ps);
        let mut next = 0;
        for k in 0..sc.new.len() {
            while next < base_nslots && b.is_some_and(|(h, page)| member(page, ps, h.v, next)) {
                next += 1;
            }
            if next >= max {
                return Ok(None);
            }
            sc.new[k].1 = next;
            next += 1;
        }
        let mut members = sc.new.len();
        let mut nslots = sc.new.last().map_or(0, |&(_, s, _)| s + 1);
        for (sp, f) in sc.spans.iter().zip(&sc.fate) {
            if *f != Fate::Drop {
                members += 1;
                nslots = nslots.max(sp.slot + 1);
            }
        }
        // Bytes: the base's slot array and members are not touched.
        let lo = slot_at(ps, nslots.max(base_nslots));
        if sc.spans.iter().any(|sp| sp.off < lo) {
            return Ok(None); // the slot array would grow into a cell
        }
        // The gap runs from the slot array to the lowest cell (the free
        // run starting at `lo`, if any); holes lie between and above the
        // cells.
        // (Nothing to place: no need to know.)
        let (mut gap_hi, first_hole) = if sc.new.is_empty() {
            (lo, 0)
        } else {
            free_space(lo, ps, &sc.spans, &mut sc.used, &mut sc.holes)
        };
        for k in 0..sc.new.len() {
            let need = sc.lens[sc.new[k].0];
            let Some(off) = place_cell(&mut sc.holes[first_hole..], &mut gap_hi, lo, need) else {
                return Ok(None);
            };
            sc.new[k].2 = off;
        }
        // What the next writers of the page need: room for the root's
        // last resort twice (a second push-down may follow before the
        // first one's dead cells can be reused), and (LS-MVBT) one more
        // cell unless this write ended cells. The last resort itself only
        // has to fit.
        // A write that adds nothing takes no room from the next one.
        let (mut reserve, mut slots_needed) = if last_resort || sc.new.is_empty() {
            (0, 0)
        } else {
            (2 * STUB, 2)
        };
        if self.reserve && !ended && !last_resort && !sc.new.is_empty() {
            reserve += sc.lens.iter().copied().max().unwrap_or(0) + 2;
            slots_needed += 1;
        }
        if gap_hi - lo < reserve || max - members < slots_needed {
            return Ok(None);
        }
        // What the next writer can place (its base is the new version):
        // only the root's last resort asks.
        let next_stubs = if !last_resort {
            2
        } else {
            stub_room(
                ps,
                nslots,
                members,
                sc.spans
                    .iter()
                    .zip(&sc.fate)
                    .filter(|(_, f)| **f != Fate::Drop)
                    .map(|(sp, _)| (sp.off, sp.off + sp.len))
                    .chain(sc.new.iter().map(|&(i, _, off)| (off, off + sc.lens[i]))),
                &mut sc.runs,
                &mut sc.gaps,
            )
        };
        Ok(Some(Plan {
            horizon: b.map_or(0, |(h, _)| h.horizon).max(horizon),
            next_stubs,
            base: b.map(|(h, _)| h),
            w: b.map_or(0, |(h, _)| 1 - h.v),
            nslots,
            members,
        }))
    }

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
        let ps = ctx.page_size;
        let Some(plan) = self.layout(Some(pgno), node, base, ctx, sc)? else {
            return Ok(false);
        };
        let base = base.filter(|_| plan.base.is_some());
        match base {
            Some(b) => out.copy_from_slice(b),
            None => out.fill(0),
        }
        let tid = ctx.tid;
        // What this write changes in the base image: its header, the
        // zeroed bytes after the page checksum, its bitmap (all three in
        // `version_ranges`), the end fields that change, the new cells and
        // their slots.
        sc.ranges.clear();
        sc.ranges.extend(version_ranges(ps, plan.w));
        sc.members.clear();
        // The members whose body checksum terms change (BodyPatch): the
        // dropped ones and those whose end, as the base summed it, is not
        // the one written.
        sc.gone.clear();
        sc.came.clear();
        let base_tid = plan.base.map_or(0, |h| h.tid);
        for (sp, f) in sc.spans.iter().zip(&sc.fate) {
            let m = (sp.slot, sp.off, sp.len);
            let end = match f {
                Fate::Keep => INV,
                Fate::End => tid,
                Fate::Dead => sp.end,
                Fate::Drop => {
                    sc.gone.push(m);
                    continue;
                }
            };
            let at = sp.off + END_AT;
            if end != sp.end {
                out[at..at + 8].copy_from_slice(&end.to_be_bytes());
                sc.ranges.push((at, at + 8));
            }
            let summed = if sp.end > base_tid { INV } else { sp.end };
            if end != summed {
                sc.gone.push(m);
                sc.came.push(m);
            }
            sc.members.push(m);
        }
        for &(i, slot, off) in &sc.new {
            let flags = node_cell(node, i, &mut sc.cell).0;
            out[off] = flags;
            out[off + 1..off + END_AT].copy_from_slice(&tid.to_be_bytes());
            out[off + END_AT..off + PREFIX].copy_from_slice(&INV.to_be_bytes());
            put_body(node, i, out, off + PREFIX);
            let s = slot_at(ps, slot);
            out[s..s + 2].copy_from_slice(&(off as u16).to_be_bytes());
            sc.members.push((slot, off, sc.lens[i]));
            sc.came.push((slot, off, sc.lens[i]));
            sc.ranges.extend([(s, s + 2), (off, off + sc.lens[i])]);
        }
        let (kind, _) = cell::kind_of(node);
        let h = Version {
            v: plan.w,
            kind,
            nslots: plan.nslots,
            members: plan.members,
            flags: 0,
            tid,
            txn_size: 0,
            page_count: 0,
            horizon: plan.horizon,
            body_crc: 0,
            ordered: false,
        };
        // A write over a base is patched from its body checksum (a fresh
        // page's is summed).
        let body = plan.base.map(|b| BodyPatch {
            base: b,
            max_key: self.max_key_len(ps),
        });
        finish_version(pgno, base, out, h, sc, body, false);
        Ok(true)
    }

    /// [`NodeFormat::patch_leaf`]: the committed leaf version of `base`
    /// changed by `patch`, written as the new version in the other header
    /// without the logical view. The members are parsed, not sorted (the
    /// key is found by equality; slots are unsorted anyway); a put ends the
    /// key's live cell, if any, at T and adds a cell [T, ∞) where
    /// [`MvbtFormat::plan`] would place it, a delete ends the cell; lazy GC
    /// drops what it drops. The new version's checksum is summed, the page
    /// checksum patched. `None` declines (the full layout decides): a live
    /// cell that is not plain, an end or start a later transaction wrote
    /// (a spill, a rollback), a key too long to store whole, or a delete
    /// below `keep`. A put with no slot or room where `plan` would look is
    /// [`Patched::Full`] (with [`Scratch::no_room`] set).
    #[allow(clippy::too_many_arguments)]
    fn patch_version(
        &self,
        pgno: Pgno,
        base: &[u8],
        key: &[u8],
        patch: LeafPatch<'_>,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Option<Patched> {
        let (ps, tid) = (ctx.page_size, ctx.tid);
        let max_key = self.max_key_len(ps);
        if base.len() != ps || out.len() != ps || ps < 512 || tid == INV || key.len() > max_key {
            return None;
        }
        // The page checksum is checked below, before anything is written.
        let b = self.parsed_base(pgno, base, tid, LEAF, sc)?;
        // The key's live cell; the live cells' bytes (as the tree counts
        // them, slots included) and largest length.
        let (mut found, mut live, mut live_bytes, mut largest) = (None, 0, 0, 0);
        let pfx = key_prefix(key);
        for (j, sp) in sc.spans.iter().enumerate() {
            if sp.start >= tid || (sp.end != INV && sp.end >= tid) {
                return None;
            }
            if sp.end == INV {
                if sp.flags != 0 || base[sp.off + PREFIX] != 0 {
                    return None;
                }
                if key_eq(sp, base, 0, pfx, key) {
                    found = Some(j);
                }
                live += 1;
                live_bytes += sp.len + 2;
                largest = largest.max(sp.len);
            }
        }
        // The page checksum vouches for every version (a patch may not
        // seal damage it never checked).
        let intact = ctx.base_verified || pagesum::verify(pgno, base, PAGE_SUM_AT);
        // The cell that ends at T, and a put's new cell's length. A put of
        // the value the cell holds changes no cell (as `pair` keeps it).
        let (ends, new_len) = match (patch, found) {
            (LeafPatch::Delete { .. }, None) => return intact.then_some(Patched::Absent),
            (LeafPatch::Delete { keep }, Some(j)) => {
                if live < 2 || live_bytes - (sc.spans[j].len + 2) < keep {
                    return None;
                }
                (found, None)
            }
            (LeafPatch::Put(v), Some(j))
                if base[sc.spans[j].ke..sc.spans[j].off + sc.spans[j].len] == *v =>
            {
                (None, None)
            }
            (LeafPatch::Put(v), _) => (
                found,
                Some(
                    PREFIX
                        + 1
                        + cell::varint_len(key.len() as u64)
                        + cell::varint_len(v.len() as u64)
                        + key.len()
                        + v.len(),
                ),
            ),
        };
        if !intact {
            return None;
        }
        let new = match (new_len, patch) {
            (Some(len), LeafPatch::Put(value)) => Some((NewCell::Plain { key, value }, len)),
            _ => None,
        };
        sc.no_room = false;
        if self
            .patch_write(pgno, base, b, ends, new.as_slice(), largest, ctx, out, sc)
            .is_none()
        {
            // No slot or room where the layout would look either.
            return sc.no_room.then_some(Patched::Full);
        }
        Some(Patched::Written {
            existed: found.is_some(),
        })
    }

    /// The base version of a patch, of node kind `kind`, its members
    /// parsed into `sc.spans`. The caller's page checksum vouches for the
    /// headers (a hinted patch's base was verified since it was read; the
    /// leaf patch verifies it before it writes). `None` declines.
    #[inline]
    fn parsed_base(
        &self,
        pgno: Pgno,
        base: &[u8],
        tid: u64,
        kind: u8,
        sc: &mut Scratch,
    ) -> Option<Version> {
        let b = Self::base_version(Some(pgno), base, tid, true).ok()?;
        let max_key = self.max_key_len(base.len());
        (b.kind == kind && parse(pgno, base, &b, max_key, &mut sc.spans, false).is_ok())
            .then_some(b)
    }

    /// [`MvbtFormat::patch_write`] of a write that only ends member `j`
    /// (a removed leaf cell, a dropped child's separator). Nothing is
    /// added, so a decline is never for want of room: the layout decides,
    /// whatever `patch_write` noted.
    #[allow(clippy::too_many_arguments)]
    fn end_one(
        &self,
        pgno: Pgno,
        base: &[u8],
        b: Version,
        j: usize,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> bool {
        let done = self
            .patch_write(pgno, base, b, Some(j), &[], 0, ctx, out, sc)
            .is_some();
        sc.no_room = false;
        done
    }

    /// The write step of [`MvbtFormat::patch_version`] and
    /// [`MvbtFormat::patch_interior`], over the base version `b` whose
    /// members `sc.spans` holds (none written at or after T): the member
    /// `ends` ends at T, the cells `new` (with their encoded lengths,
    /// prefix included) are added in that order where
    /// [`MvbtFormat::plan`] would place them, lazy GC drops what it
    /// drops. `largest`: the longest live cell (LS-MVBT's reserved buffer,
    /// when nothing ends). The new version's body checksum is patched from
    /// the base's, the page checksum too. `None` declines: no slot, no
    /// room.
    #[allow(clippy::too_many_arguments)]
    fn patch_write(
        &self,
        pgno: Pgno,
        base: &[u8],
        b: Version,
        ends: Option<usize>,
        new: &[(NewCell<'_>, usize)],
        largest: usize,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> Option<()> {
        let (ps, tid) = (ctx.page_size, ctx.tid);
        let horizon = ctx.horizon;
        let drop = |sp: &Span| sp.end != INV && sp.end <= horizon;
        // New cells' slots: the lowest entries the base does not use, in
        // order, then past its slot array.
        let max = max_slots(ps);
        let mut slots = [0usize; 2];
        if new.len() > slots.len() {
            return None;
        }
        // Every decline below is one `plan` makes for the same write.
        sc.no_room = true;
        let mut next = 0;
        for s in slots.iter_mut().take(new.len()) {
            while next < b.nslots && member(base, ps, b.v, next) {
                next += 1;
            }
            *s = next;
            next += 1;
        }
        let mut members = new.len();
        let mut nslots = new.len().checked_sub(1).map_or(0, |k| slots[k] + 1);
        for sp in sc.spans.iter().filter(|sp| !drop(sp)) {
            members += 1;
            nslots = nslots.max(sp.slot + 1);
        }
        let lo = slot_at(ps, nslots.max(b.nslots));
        if nslots > max || sc.spans.iter().any(|sp| sp.off < lo) {
            return None;
        }
        // Placed as `plan` places them, with the room it keeps for the
        // next writers: two root stubs and (LS-MVBT, when no cell ends)
        // one more cell of the node's largest size.
        let mut offs = [0usize; 2];
        if !new.is_empty() {
            let (mut gap_hi, first) = free_space(lo, ps, &sc.spans, &mut sc.used, &mut sc.holes);
            for (o, &(_, need)) in offs.iter_mut().zip(new) {
                *o = place_cell(&mut sc.holes[first..], &mut gap_hi, lo, need)?;
            }
            let (mut reserve, mut want) = (2 * STUB, 2);
            if self.reserve && ends.is_none() {
                let need = new.iter().map(|&(_, n)| n).max().unwrap_or(0);
                reserve += largest.max(need) + 2;
                want += 1;
            }
            if gap_hi - lo < reserve || max - members < want {
                return None;
            }
        }
        sc.no_room = false;
        out.copy_from_slice(base);
        let w = 1 - b.v;
        // The new version's bitmap is the base version's, less the
        // dropped members, plus the new cells (set below).
        let (bm, m) = (map_at(ps, b.v), map_at(ps, w));
        out.copy_within(bm..bm + map_len(ps), m);
        sc.ranges.clear();
        sc.ranges.extend(version_ranges(ps, w));
        sc.members.clear();
        // The members whose checksum terms change (BodyPatch): the
        // dropped ones, the one that ends, and any the base summed with
        // its end as ∞ (a later writer's, rolled back), now summed as
        // stored.
        sc.gone.clear();
        sc.came.clear();
        for (j, sp) in sc.spans.iter().enumerate() {
            let mm = (sp.slot, sp.off, sp.len);
            if drop(sp) {
                out[m + sp.slot / 8] &= !(0x80 >> (sp.slot % 8));
                sc.gone.push(mm);
                continue;
            }
            if ends == Some(j) {
                let at = sp.off + END_AT;
                out[at..at + 8].copy_from_slice(&tid.to_be_bytes());
                sc.ranges.push((at, at + 8));
            }
            if ends == Some(j) || (sp.end != INV && sp.end > b.tid) {
                sc.gone.push(mm);
                sc.came.push(mm);
            }
            sc.members.push(mm);
        }
        for ((cell, len), (&slot, &off)) in new.iter().zip(slots.iter().zip(&offs)) {
            out[m + slot / 8] |= 0x80 >> (slot % 8);
            out[off] = cell.flags();
            out[off + 1..off + END_AT].copy_from_slice(&tid.to_be_bytes());
            out[off + END_AT..off + PREFIX].copy_from_slice(&INV.to_be_bytes());
            cell.put(out, off + PREFIX);
            let s = slot_at(ps, slot);
            out[s..s + 2].copy_from_slice(&(off as u16).to_be_bytes());
            sc.members.push((slot, off, *len));
            sc.came.push((slot, off, *len));
            sc.ranges.extend([(s, s + 2), (off, off + len)]);
        }
        let body = Some(BodyPatch {
            base: b,
            max_key: self.max_key_len(ps),
        });
        let h = Version {
            v: w,
            kind: b.kind,
            nslots,
            members,
            flags: 0,
            tid,
            txn_size: 0,
            page_count: 0,
            horizon: b.horizon.max(horizon),
            body_crc: 0,
            ordered: false,
        };
        finish_version(pgno, Some(base), out, h, sc, body, true);
        Some(())
    }

    /// An interior `node` that is the committed version of `base`
    /// (verified since it was read) with one child moved or split (the
    /// pager's hint, [`LeafChange::Child`], [`LeafChange::Split`]), written
    /// as [`MvbtFormat::plan`] would write it without pairing every cell
    /// or sorting them: the live cell of the moved child's key ends at T,
    /// the changed cells are added. False declines (the full layout
    /// decides): a key that overflows, a live cell of the new key, a count
    /// that does not fit the hint, an end or start a later transaction
    /// wrote, no room.
    #[allow(clippy::too_many_arguments)]
    fn patch_interior(
        &self,
        pgno: Pgno,
        base: &[u8],
        node: &Node,
        ch: LeafChange,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> bool {
        let (ps, tid) = (ctx.page_size, ctx.tid);
        let Node::Interior { cells, right } = node else {
            return false;
        };
        if let LeafChange::Dropped(_) = ch {
            return self.patch_dropped(pgno, base, cells, *right, ctx, out, sc);
        }
        let n = cells.len() + 1;
        // The node's new cells (in node order) and the one of them whose
        // key the base holds with another child.
        let (first, moved) = match ch {
            LeafChange::Child(i) if i < n => (i, i),
            LeafChange::Split(i) if i + 1 < n => (i, i + 1),
            _ => return false,
        };
        if base.len() != ps || out.len() != ps || ps < 512 || tid == INV || cells.is_empty() {
            return false;
        }
        let max_key = self.max_key_len(ps);
        let plain = |i: usize| {
            cells
                .get(i)
                .is_none_or(|c| c.key.chain().is_none() && c.key.len() <= max_key)
        };
        if !(first..=moved).all(plain) {
            return false;
        }
        let Some(b) = self.parsed_base(pgno, base, tid, INTERIOR, sc) else {
            return false;
        };
        let key_of = |i: usize| -> (u8, &[u8]) {
            match cells.get(i) {
                Some(c) => (CELL_INTERIOR, &c.key),
                None => (CELL_INTERIOR | CELL_RIGHT, &[]),
            }
        };
        let (mflags, mkey) = key_of(moved);
        let (nflags, nkey) = key_of(first);
        let (mpfx, npfx) = (key_prefix(mkey), key_prefix(nkey));
        let (mut found, mut live) = (None, 0);
        for (j, sp) in sc.spans.iter().enumerate() {
            if sp.start >= tid || (sp.end != INV && sp.end >= tid) {
                return false;
            }
            if sp.end != INV {
                continue;
            }
            live += 1;
            if first != moved && key_eq(sp, base, nflags, npfx, nkey) {
                return false;
            }
            if key_eq(sp, base, mflags, mpfx, mkey) {
                if found.is_some() || cell::key_overflows_at(base, sp.off + PREFIX, false) {
                    return false;
                }
                found = Some(j);
            }
        }
        let Some(j) = found else {
            return false;
        };
        // The moved child is another page (else the full layout keeps
        // the cell), and the base holds every other cell once.
        let child = cells.get(moved).map_or(*right, |c| c.child);
        let end = sc.spans[j].off + sc.spans[j].len;
        if base[end - 4..end] == child.to_be_bytes() || live + (moved - first) != n {
            return false;
        }
        let new = [first, moved].map(|i| (NewCell::Of { node, i }, PREFIX + body_len(node, i)));
        let new = &new[..=moved - first];
        self.patch_write(pgno, base, b, Some(j), new, 0, ctx, out, sc)
            .is_some()
    }

    /// [`MvbtFormat::patch_interior`] for [`LeafChange::Dropped`]: the
    /// interior node `cells`/`right` is the committed version of `base`
    /// with one separator cell gone (its child emptied and dropped, or
    /// merged into the next child). The live cell that ends at T is the
    /// one whose child the node no longer names: the live cells' children
    /// (the rightmost child's cell included) sum, mod 2^32, to the node's
    /// plus that one. Nothing is added, so the write always has room.
    /// False declines: no live cell, or two, with that child, the
    /// rightmost child's cell, counts that do not fit, an end or start a
    /// later transaction wrote.
    #[allow(clippy::too_many_arguments)]
    fn patch_dropped(
        &self,
        pgno: Pgno,
        base: &[u8],
        cells: &[InteriorCell],
        right: Pgno,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> bool {
        let (ps, tid) = (ctx.page_size, ctx.tid);
        // The root's last resort (no cells) is the layout's to place.
        if base.len() != ps || out.len() != ps || ps < 512 || tid == INV || cells.is_empty() {
            return false;
        }
        let Some(b) = self.parsed_base(pgno, base, tid, INTERIOR, sc) else {
            return false;
        };
        // An interior cell ends with its child (`node::cell`).
        let child_of = |sp: &Span| be32(base, sp.off + sp.len - 4);
        let (mut live, mut sum) = (0, 0u32);
        for sp in &sc.spans {
            if sp.start >= tid || (sp.end != INV && sp.end >= tid) || sp.len < PREFIX + 5 {
                return false;
            }
            if sp.end == INV {
                // The right child stays (the hint says so: check it).
                if sp.flags & CELL_RIGHT != 0 && child_of(sp) != right {
                    return false;
                }
                live += 1;
                sum = sum.wrapping_add(child_of(sp));
            }
        }
        // The node's cells and its rightmost child's, plus the one gone.
        let node_sum = cells.iter().fold(right, |a, c| a.wrapping_add(c.child));
        let gone = sum.wrapping_sub(node_sum);
        if live != cells.len() + 2 {
            return false;
        }
        let mut found = None;
        for (j, sp) in sc.spans.iter().enumerate() {
            if sp.end == INV && child_of(sp) == gone {
                if found.is_some() || sp.flags & CELL_RIGHT != 0 {
                    return false;
                }
                found = Some(j);
            }
        }
        let Some(j) = found else {
            return false;
        };
        self.end_one(pgno, base, b, j, ctx, out, sc)
    }

    /// A leaf `node` that is the committed version of `base` (verified
    /// since it was read) with one value replaced or one cell inserted
    /// (the pager's hint, [`EncodeCtx::leaf_change`]), written as
    /// [`MvbtFormat::patch_version`] writes that put; an interior one with
    /// a child moved or split, as [`MvbtFormat::patch_interior`] writes
    /// it: no pairing of every cell, no sort. False declines (`out`
    /// unspecified).
    fn patch_hinted(
        &self,
        pgno: Pgno,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> bool {
        let (Some(base), Some(ch), true) = (base, ctx.leaf_change, ctx.base_verified) else {
            return false;
        };
        let cells = match node {
            Node::Leaf(cells) => cells,
            Node::Interior { .. } => {
                return self.patch_interior(pgno, base, node, ch, ctx, out, sc)
            }
        };
        let (i, existed) = match ch {
            LeafChange::Value(i) => (i, true),
            LeafChange::Inserted(i) => (i, false),
            LeafChange::Removed(_) => return self.patch_removed(pgno, base, cells, ctx, out, sc),
            _ => return false,
        };
        let Some(LeafCell {
            key,
            value: Value::Inline(v),
        }) = cells.get(i)
        else {
            return false;
        };
        key.chain().is_none()
            && self.patch_version(pgno, base, key, LeafPatch::Put(v), ctx, out, sc)
                == Some(Patched::Written { existed })
    }

    /// [`MvbtFormat::patch_hinted`] for [`LeafChange::Removed`]: the leaf
    /// `cells` is the committed version of `base` less one cell, which
    /// ends at T (the tree removed it and checked the leaf does not
    /// underflow). The node does not name the removed key, and slots are
    /// unsorted: the live cells' key prefixes ([`key_prefix`]) sum, mod
    /// 2^64, to the node's keys' plus the removed one's, and the one live
    /// cell with that prefix is it. Nothing is added, so the write always
    /// has room. False declines: a key stored in overflow pages, counts
    /// that do not fit, no live cell or two with that prefix, a cell that
    /// is not plain, an end or start a later transaction wrote.
    #[allow(clippy::too_many_arguments)]
    fn patch_removed(
        &self,
        pgno: Pgno,
        base: &[u8],
        cells: &[LeafCell],
        ctx: &EncodeCtx,
        out: &mut [u8],
        sc: &mut Scratch,
    ) -> bool {
        let (ps, tid) = (ctx.page_size, ctx.tid);
        if base.len() != ps || out.len() != ps || ps < 512 || tid == INV {
            return false;
        }
        let mut node_sum = 0u64;
        for c in cells {
            if c.key.chain().is_some() {
                return false;
            }
            node_sum = node_sum.wrapping_add(key_prefix(&c.key));
        }
        let Some(b) = self.parsed_base(pgno, base, tid, LEAF, sc) else {
            return false;
        };
        let (mut live, mut sum) = (0, 0u64);
        for sp in &sc.spans {
            if sp.start >= tid || (sp.end != INV && sp.end >= tid) {
                return false;
            }
            if sp.end == INV {
                if sp.flags != 0 || base[sp.off + PREFIX] != 0 {
                    return false;
                }
                live += 1;
                sum = sum.wrapping_add(sp.pfx);
            }
        }
        if live != cells.len() + 1 {
            return false;
        }
        let gone = sum.wrapping_sub(node_sum);
        let mut found = None;
        for (j, sp) in sc.spans.iter().enumerate() {
            if sp.end == INV && sp.pfx == gone {
                if found.is_some() {
                    return false;
                }
                found = Some(j);
            }
        }
        let Some(j) = found else {
            return false;
        };
        debug_assert!(
            {
                let sp = &sc.spans[j];
                let key = &base[sp.ks..sp.ke];
                cells.iter().all(|c| *c.key != *key)
            },
            "the removed cell's key is in the node, page {pgno}"
        );
        self.end_one(pgno, base, b, j, ctx, out, sc)
    }

    /// Set the ends of the members of every valid version for which
    /// `doomed` holds back to ∞ (the life spans an aborted transaction
    /// ended are reopened: \[LSM\] Alg. 2, lines 11-12). Versions whose
    /// cells do not parse are left alone. Returns the cells changed.
    fn reopen_spans(&self, page: &mut [u8], pgno: Pgno, doomed: &dyn Fn(u64) -> bool) -> usize {
        let ps = page.len();
        let max_key = self.max_key_len(ps);
        let mut changed = 0;
        for v in 0..2 {
            let Some((h, true)) = read_header(pgno, page, v) else {
                continue;
            };
            if !h.valid() {
                continue;
            }
            let offs: Vec<usize> = with_scratch(|sc| {
                // Only a version whose checksum holds names real cells: a
                // torn one may point into other cells' bytes.
                verify(pgno, page, &h, max_key, &mut sc.other)
                    .map(|()| {
                        sc.other
                            .iter()
                            .filter(|sp| sp.end != INV && doomed(sp.end))
                            .map(|sp| sp.off)
                            .collect()
                    })
                    .unwrap_or_default()
            });
            for off in offs {
                page[off + END_AT..off + PREFIX].copy_from_slice(&INV.to_be_bytes());
                changed += 1;
            }
        }
        changed
    }

    /// Invalidate the versions (with an intact header) whose TID `doomed`
    /// picks, and reopen the life spans they ended.
    fn invalidate_versions(
        &self,
        page: &mut [u8],
        pgno: Pgno,
        doomed: &dyn Fn(u64) -> bool,
    ) -> usize {
        // The life spans they ended are reopened in the surviving
        // versions' cells (also where a torn write's header did not land).
        let mut n = self.reopen_spans(page, pgno, doomed);
        for v in 0..2 {
            if let Some((mut h, true)) = read_header(pgno, page, v) {
                if h.valid() && doomed(h.tid) {
                    h.tid = INV;
                    write_header(pgno, page, &h);
                    n += 1;
                }
            }
        }
        if n > 0 && self.versions_intact(pgno, page) {
            pagesum::seal(pgno, page, PAGE_SUM_AT);
        }
        n
    }
}

impl NodeFormat for MvbtFormat {
    fn name(&self) -> &'static str {
        "mvbt"
    }

    fn decode(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<Node> {
        self.decode_in(pgno, page, None, ctx)
    }

    fn decode_shared(&self, pgno: Pgno, page: &Arc<[u8]>, ctx: &DecodeCtx) -> Result<Node> {
        self.decode_in(pgno, page, Some(page), ctx)
    }

    fn fits(&self, node: &Node, base: Option<&[u8]>, ctx: &EncodeCtx) -> bool {
        with_scratch(|sc| matches!(self.layout(None, node, base, ctx, sc), Ok(Some(_))))
    }

    fn leaf_cell_size(&self, c: &LeafCell) -> usize {
        PREFIX + cell::leaf_len(c) + 2
    }

    fn interior_cell_size(&self, c: &InteriorCell) -> usize {
        PREFIX + cell::interior_len(c) + 2
    }

    fn capacity(&self, page_size: usize) -> usize {
        page_size - slots_at(page_size) - 2 * STUB
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
        // TID 0 writes only the new database's empty catalog leaf.
        if ctx.tid == INV {
            return Err(Error::Internal(format!("MVBT write with TID {}", ctx.tid)));
        }
        with_scratch(|sc| {
            sc.no_room = false;
            if self.patch_hinted(pgno, node, base, ctx, out, sc) {
                return Ok(true);
            }
            if sc.no_room {
                // The patch placed the change as the layout would and
                // found no room: the layout would not either (no second
                // parse and plan of the page to learn it).
                debug_assert!(
                    !self
                        .write_version(pgno, node, base, ctx, out, sc)
                        .unwrap_or(false),
                    "patch found no room where the layout did, page {pgno}"
                );
                return Ok(false);
            }
            self.write_version(pgno, node, base, ctx, out, sc)
        })
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
        // The key is found by its bytes: under an order where other bytes
        // compare equal, the tree (which keeps the stored key) decides.
        if !order.bytewise() {
            return Ok(None);
        }
        Ok(with_scratch(|sc| {
            self.patch_version(pgno, base, key, patch, ctx, out, sc)
        }))
    }

    fn max_key_len(&self, page_size: usize) -> usize {
        // A leaf cell with an overflow value: prefix, flags, a key length
        // of up to 3 bytes, a value length of up to 10, the key, the head
        // and its slot.
        self.max_inline_cell(page_size) - (PREFIX + 1 + 3 + 10 + 4 + 2)
    }

    fn max_inline_cell(&self, page_size: usize) -> usize {
        // A fifth of the capacity: an overflowing node splits into halves
        // that each fit a fresh page with the reserved buffer space.
        self.capacity(page_size) / 5
    }

    fn unsorted_slots(&self) -> bool {
        true
    }

    fn needs_base(&self) -> bool {
        true
    }

    fn retires_in_place(&self) -> bool {
        true
    }

    fn append_split_slack(&self) -> usize {
        // An update of a cell on the left page adds a cell there, and the
        // next one another: the cell the first ended is dropped from the
        // second's version, but its bytes stay the base's until that
        // commits (byte-preserving writes). LS-MVBT keeps that second
        // cell's room anyway (its reserved buffer).
        match self.reserve {
            true => 1,
            false => 2,
        }
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

impl InPageFormat for MvbtFormat {
    const PAGE_SUM_AT: usize = PAGE_SUM_AT;

    fn has_versions(&self, page: &[u8]) -> bool {
        let written = |b: u8| b == MAGIC || b == MAGIC_ORDERED;
        page.len() >= 512 && (written(page[0]) || written(page[HDR_LEN]))
    }

    fn versions(&self, pgno: Pgno, page: &[u8]) -> Vec<VersionState> {
        let max_key = self.max_key_len(page.len());
        // A header whose own checksum fails is not listed: its TID and
        // fields are not to be trusted (a torn fresh page's bytes may
        // carry a magic byte where a header would be).
        (0..2)
            .filter_map(|v| read_header(pgno, page, v))
            .filter(|&(_, hdr_ok)| hdr_ok)
            .map(|(h, _)| VersionState {
                index: h.v,
                tid: h.tid,
                record: (h.flags & FLAG_COMMIT != 0).then_some(CommitRecord {
                    tid: h.tid,
                    txn_size: h.txn_size,
                    page_count: h.page_count,
                }),
                intact: with_scratch(|sc| verify(pgno, page, &h, max_key, &mut sc.other).is_ok()),
            })
            .collect()
    }

    fn visible(&self, pgno: Pgno, page: &[u8], fcc: u64) -> Option<usize> {
        let vs = [
            read_header(pgno, page, 0).filter(|h| h.1).map(|h| h.0),
            read_header(pgno, page, 1).filter(|h| h.1).map(|h| h.0),
        ];
        // Recovery's view: versions above the FCC do not count.
        let below = [
            vs[0].filter(|h| h.tid <= fcc),
            vs[1].filter(|h| h.tid <= fcc),
        ];
        select(&below, fcc).map(|h| h.v)
    }

    fn invalidate(&self, page: &mut [u8], pgno: Pgno, doomed: &dyn Fn(u64) -> bool) -> usize {
        if page.len() < 512 {
            return 0;
        }
        if let Some(n) = invalidate_envelope(pgno, page, doomed) {
            return n;
        }
        if !self.has_versions(page) {
            return 0;
        }
        self.invalidate_versions(page, pgno, doomed)
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
        // Versions above the FCC go, and every life span they (or a torn
        // write whose header did not land) ended is reopened.
        let mut n = self.invalidate_versions(page, pgno, &|t| t > fcc);
        // A torn older version (its slots or cells reused by the write
        // that tore) is invalidated; the visible one never is.
        let visible = self.visible(pgno, page, fcc);
        for v in 0..2 {
            if Some(v) == visible {
                continue;
            }
            if let Some((mut h, true)) = read_header(pgno, page, v) {
                if h.valid()
                    && with_scratch(|sc| verify(pgno, page, &h, max_key, &mut sc.other)).is_err()
                {
                    h.tid = INV;
                    write_header(pgno, page, &h);
                    n += 1;
                }
            }
        }
        // A damaged version keeps the page checksum failing (C5).
        if (n > 0 || !pagesum::verify(pgno, page, PAGE_SUM_AT)) && self.versions_intact(pgno, page)
        {
            pagesum::seal(pgno, page, PAGE_SUM_AT);
            n = n.max(1);
        }
        n
    }

    fn embed_commit(&self, pgno: Pgno, page: &mut [u8], rec: CommitRecord) -> Result<bool> {
        if page.len() < 512 || raw_tid(pgno, page).is_some() {
            return Ok(false);
        }
        // The checksum of the transaction's header only (one sum).
        let Some(mut h) = (0..2)
            .filter_map(|v| header_fields(page, v))
            .find(|h| h.tid == rec.tid)
            .filter(|h| header_holds(pgno, page, h.v))
        else {
            return Ok(false);
        };
        h.flags |= FLAG_COMMIT;
        h.txn_size = rec.txn_size;
        h.page_count = rec.page_count;
        // Only the header changes: the page checksum is patched over it
        // (a page whose checksum failed keeps failing: damage is never
        // sealed).
        let (s, e) = (h.v * HDR_LEN, (h.v + 1) * HDR_LEN);
        let mut old = [0u8; HDR_LEN];
        old.copy_from_slice(&page[s..e]);
        #[cfg(debug_assertions)]
        let intact = pagesum::verify(pgno, page, PAGE_SUM_AT);
        write_header(pgno, page, &h);
        // The message bytes after the header: the rest of the page but
        // the checksum field (which follows both headers).
        let after = page.len() - e - pagesum::SUM_LEN;
        let sum = pagesum::stored(page, PAGE_SUM_AT) ^ pagesum::run_term(&old, &page[s..e], after);
        page[PAGE_SUM_AT..PAGE_SUM_AT + pagesum::SUM_LEN].copy_from_slice(&sum.to_be_bytes());
        #[cfg(debug_assertions)]
        debug_assert!(
            !intact || pagesum::verify(pgno, page, PAGE_SUM_AT),
            "patched page checksum, page {pgno}"
        );
        Ok(true)
    }
}

/// One member cell of a page's newest valid version, as tests and the
/// figures inspect it (life spans, the lazy node's two parent entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedCell {
    /// Slot of the cell.
    pub slot: usize,
    /// An interior cell.
    pub interior: bool,
    /// The interior node's rightmost child (key +∞).
    pub right: bool,
    /// The key (empty for the rightmost child).
    pub key: Vec<u8>,
    /// Child page of an interior cell (0 in a leaf).
    pub child: Pgno,
    /// Start of the life span.
    pub start: u64,
    /// End of the life span (INV: ∞).
    pub end: u64,
    /// Bytes of the cell (prefix and body) without its slot.
    pub len: usize,
}

/// What a page of this format holds: the TID of its newest valid version
/// and every member cell of it. `Err` if the page does not parse.
pub fn inspect(pgno: Pgno, page: &[u8]) -> Result<(u64, Vec<VersionedCell>)> {
    let ps = page.len();
    MvbtFormat::check_len(pgno, page, ps)?;
    let f = MvbtFormat::MVBT;
    let max_key = f.max_key_len(ps);
    let vs = headers(pgno, page)?;
    let h = select(&vs, INV - 1).ok_or_else(|| corrupt(pgno, "no valid version"))?;
    let mut spans = Vec::new();
    verify(pgno, page, &h, max_key, &mut spans)?;
    let mut out = Vec::with_capacity(spans.len());
    for sp in spans {
        let interior = sp.flags & CELL_INTERIOR != 0;
        let mut r = Reader::new(page, sp.off + PREFIX, ps, pgno);
        let child = if interior {
            r.interior(sp.slot, max_key)?.child
        } else {
            0
        };
        out.push(VersionedCell {
            slot: sp.slot,
            interior,
            right: sp.flags & CELL_RIGHT != 0,
            key: page[sp.ks..sp.ke].to_vec(),
            child,
            start: sp.start,
            end: sp.end,
            len: sp.len,
        });
    }
    Ok((h.tid, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::BYTEWISE;
    use crate::node::Value;

    const PS: usize = 512;

    fn ectx(tid: u64) -> EncodeCtx {
        EncodeCtx::new(PS, tid, true)
    }

    fn dctx(s: u64) -> DecodeCtx<'static> {
        DecodeCtx {
            page_size: PS,
            committed_tid: s,
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

    fn enc(f: MvbtFormat, node: &Node, base: Option<&[u8]>, tid: u64) -> Vec<u8> {
        let mut out = vec![0u8; PS];
        f.encode(7, node, base, &ectx(tid), &mut out).unwrap();
        out
    }

    fn dec(page: &[u8], s: u64) -> Node {
        MvbtFormat::MVBT.decode(7, page, &dctx(s)).unwrap()
    }

    /// A damaged TID in the newest header must not make the older
    /// version the base of a write over an unverified base: the write
    /// would replace the newest version. The layout checks both headers.
    #[test]
    fn a_damaged_newest_header_is_not_written_over() {
        let f = MvbtFormat::MVBT;
        let p5 = enc(f, &leaf(&[("a", 10)]), None, 5);
        let p10 = enc(f, &leaf(&[("a", 10), ("b", 10)]), Some(&p5), 10);
        let v = (0..2)
            .find(|&v| header_fields(&p10, v).is_some_and(|h| h.tid == 10))
            .unwrap();
        for bad_tid in [20u64, 1, INV] {
            let mut page = p10.clone();
            page[v * HDR_LEN + 8..v * HDR_LEN + 16].copy_from_slice(&bad_tid.to_be_bytes());
            let node = leaf(&[("a", 10), ("b", 10), ("c", 10)]);
            let mut out = vec![0u8; PS];
            let r = f.encode_if_fits(7, &node, Some(&page), &ectx(15), &mut out);
            assert!(
                matches!(r, Err(Error::Corruption { .. })),
                "TID {bad_tid}: {r:?}"
            );
        }
    }

    #[test]
    fn prefix_at_is_the_key_prefix() {
        let page: Vec<u8> = (0..40u8).map(|b| b.wrapping_mul(37) | 1).collect();
        for ks in 0..page.len() {
            for klen in 0..=page.len() - ks {
                let key = &page[ks..ks + klen];
                assert_eq!(prefix_at(&page, ks, klen), key_prefix(key), "{ks} {klen}");
            }
        }
    }

    #[test]
    fn every_snapshot_reads_its_node() {
        let f = MvbtFormat::MVBT;
        let n1 = leaf(&[("a", 4), ("b", 4)]);
        let n2 = leaf(&[("a", 4), ("c", 4)]);
        let n3 = leaf(&[("a", 5), ("c", 4), ("d", 1)]);
        let p1 = enc(f, &n1, None, 1);
        let p2 = enc(f, &n2, Some(&p1), 2);
        let p3 = enc(f, &n3, Some(&p2), 3);
        assert_eq!(dec(&p3, 3), n3);
        assert_eq!(dec(&p3, 2), n2);
        // Version 1's header was overwritten by version 3, but version 2
        // keeps every cell a reader of snapshot 1 sees.
        assert_eq!(dec(&p3, 1), n1);
        let (tid, cells) = inspect(7, &p2).unwrap();
        assert_eq!(tid, 2);
        let b = cells.iter().find(|c| c.key == b"b").unwrap();
        assert_eq!((b.start, b.end), (1, 2));
        let (_, cells) = inspect(7, &p3).unwrap();
        let a: Vec<_> = cells.iter().filter(|c| c.key == b"a").collect();
        assert_eq!(a.len(), 2, "an update ends one cell and starts another");
        assert!(
            cells.iter().all(|c| c.key != b"b"),
            "b, dead at 2, collected"
        );
    }

    #[test]
    fn writes_preserve_the_committed_bytes() {
        let f = MvbtFormat::MVBT;
        let p1 = enc(f, &leaf(&[("a", 20), ("b", 20), ("c", 20)]), None, 1);
        let p2 = enc(f, &leaf(&[("a", 20), ("c", 20), ("d", 20)]), Some(&p1), 2);
        let h1 = read_header(7, &p1, 0).unwrap().0;
        let mut spans = Vec::new();
        parse(7, &p1, &h1, 100, &mut spans, true).unwrap();
        for sp in &spans {
            for i in sp.off..sp.off + sp.len {
                if !(sp.off + END_AT..sp.off + PREFIX).contains(&i) {
                    assert_eq!(p1[i], p2[i], "byte {i} of a committed cell changed");
                }
            }
        }
        // The committed version still verifies in the new image.
        verify(7, &p2, &h1, 100, &mut spans).unwrap();
    }

    #[test]
    fn lazy_gc_drops_only_below_the_horizon() {
        let f = MvbtFormat::MVBT;
        let p1 = enc(f, &leaf(&[("a", 4), ("b", 4)]), None, 1);
        let p2 = enc(f, &leaf(&[("a", 4)]), Some(&p1), 2);
        // A reader at snapshot 1 is open: b (ended at 2) stays.
        let mut ctx = ectx(3);
        ctx.horizon = 1;
        let mut p3 = vec![0u8; PS];
        f.encode(7, &leaf(&[("a", 4), ("c", 4)]), Some(&p2), &ctx, &mut p3)
            .unwrap();
        assert_eq!(dec(&p3, 1), leaf(&[("a", 4), ("b", 4)]));
        // No reader: it goes.
        let p3 = enc(f, &leaf(&[("a", 4), ("c", 4)]), Some(&p2), 3);
        assert!(inspect(7, &p3).unwrap().1.iter().all(|c| c.key != b"b"));
        // Never a cell the writer itself ended.
        let p4 = enc(f, &leaf(&[("c", 4)]), Some(&p3), 4);
        let a = inspect(7, &p4).unwrap().1;
        assert!(a.iter().any(|c| c.key == b"a" && c.end == 4));
    }

    /// Rewrite version `v` of `page` as the first layout wrote it: magic
    /// 0x3B, the body checksum one sum over the members in slot order.
    fn to_first_layout(page: &mut [u8], v: usize) {
        let Some((mut h, true)) = read_header(7, page, v) else {
            panic!("no intact header {v}");
        };
        h.ordered = true;
        let max_key = MvbtFormat::MVBT.max_key_len(PS);
        h.body_crc = parse(7, page, &h, max_key, &mut Vec::new(), true).unwrap();
        write_header(7, page, &h);
        pagesum::seal(7, page, PAGE_SUM_AT);
    }

    #[test]
    fn versions_of_the_first_layout_still_read_and_take_writes() {
        let f = MvbtFormat::MVBT;
        let n1 = leaf(&[("a", 4), ("b", 4), ("c", 4)]);
        let mut p1 = enc(f, &n1, None, 1);
        to_first_layout(&mut p1, 0);
        assert_eq!(p1[0], MAGIC_ORDERED);
        assert_eq!(dec(&p1, 1), n1);
        // Its checksum is the ordered sum: the order-free one differs, and
        // damage to a member is still found.
        let h = read_header(7, &p1, 0).unwrap().0;
        let spans = &mut Vec::new();
        let unordered = Version {
            ordered: false,
            ..h
        };
        assert_ne!(
            parse(7, &p1, &unordered, f.max_key_len(PS), spans, true).unwrap(),
            h.body_crc
        );
        let mut bad = p1.clone();
        let last = spans.iter().map(|sp| sp.off + sp.len).max().unwrap();
        bad[last - 1] ^= 1;
        assert!(verify(7, &bad, &h, f.max_key_len(PS), spans).is_err());
        assert!(f.decode(7, &bad, &dctx(1)).is_err());
        // A full write over it: the new version is of this layout, and
        // both read.
        let n2 = leaf(&[("a", 4), ("c", 4), ("d", 2)]);
        let p2 = enc(f, &n2, Some(&p1), 2);
        assert_eq!((p2[0], p2[HDR_LEN]), (MAGIC_ORDERED, MAGIC));
        assert_eq!((dec(&p2, 1), dec(&p2, 2)), (n1.clone(), n2));
        // A patch over it: the body is summed whole (a first-layout base
        // cannot be patched), and both versions read.
        let mut p3 = vec![0u8; PS];
        let put = f.patch_leaf(
            7,
            &p1,
            b"b",
            LeafPatch::Put(b"bbbbbb"),
            &BYTEWISE,
            &ectx(2),
            &mut p3,
        );
        assert_eq!(put.unwrap(), Some(Patched::Written { existed: true }));
        assert_eq!(dec(&p3, 1), n1);
        assert_eq!(dec(&p3, 2), leaf(&[("a", 4), ("b", 6), ("c", 4)]));
        // A commit record embedded in it keeps its layout.
        let mut p4 = p1.clone();
        let rec = CommitRecord {
            tid: 1,
            txn_size: 1,
            page_count: 9,
        };
        assert!(f.embed_commit(7, &mut p4, rec).unwrap());
        assert_eq!(p4[0], MAGIC_ORDERED);
        assert_eq!(dec(&p4, 1), n1);
        assert!(f.versions(7, &p4).iter().all(|v| v.intact));
    }

    #[test]
    fn a_torn_fresh_page_that_only_looks_versioned_is_zeroed_on_rollback() {
        let f = MvbtFormat::LAZY;
        // A fresh page of transaction 5 over stale bytes, its write torn:
        // no envelope, and a magic byte where header 1 would start.
        let mut page: Vec<u8> = (0..PS).map(|i| (i * 7 + 3) as u8).collect();
        page[HDR_LEN] = MAGIC;
        assert!(f.has_versions(&page) && f.versions(7, &page).is_empty());
        assert!(f.roll_back_page(&mut page, 7, 5));
        assert!(page.iter().all(|&b| b == 0));
        // A page whose committed version is intact and whose page
        // checksum a torn write broke (bytes no version uses) is
        // resealed, not zeroed.
        let n1 = leaf(&[("a", 4), ("b", 4)]);
        let mut torn = enc(f, &n1, None, 1);
        torn[PS / 2] ^= 0x5a;
        assert!(f.roll_back_page(&mut torn, 7, 5));
        assert_eq!(dec(&torn, 1), n1);
        // One whose committed version is damaged is left failing.
        let mut bad = enc(f, &n1, None, 1);
        bad[PS - 1] ^= 1;
        assert!(!f.roll_back_page(&mut bad, 7, 5));
        assert!(f.decode(7, &bad, &dctx(1)).is_err());
    }

    #[test]
    fn the_reserved_buffer_takes_one_more_cell_only_when_cells_ended() {
        let f = MvbtFormat::LAZY;
        // Fill a fresh page as far as the reserve allows.
        let mut keys: Vec<String> = Vec::new();
        let mut last_fit = None;
        for i in 0..64 {
            keys.push(format!("k{i:02}"));
            let node = leaf(&keys.iter().map(|k| (k.as_str(), 8)).collect::<Vec<_>>());
            if f.fits(&node, None, &ectx(1)) {
                last_fit = Some(node);
            } else {
                keys.pop();
                break;
            }
        }
        let full = last_fit.unwrap();
        let p1 = enc(f, &full, None, 1);
        let Node::Leaf(cells) = &full else {
            unreachable!()
        };
        // One more cell without ending any: refused (the reserve).
        let mut more = cells.clone();
        more.push(LeafCell {
            key: b"zz".as_slice().into(),
            value: Value::Inline(vec![1; 8].into()),
        });
        assert!(!f.fits(&Node::Leaf(more.clone()), Some(&p1), &ectx(2)));
        // A lazy split ended the upper half: the new cell takes the reserve.
        let mut lower: Vec<LeafCell> = cells[..cells.len() / 2].to_vec();
        lower.push(LeafCell {
            key: b"k0!".as_slice().into(),
            value: Value::Inline(vec![1; 8].into()),
        });
        lower.sort_by(|a, b| a.key.cmp(&b.key));
        assert!(f.fits(&Node::Leaf(lower.clone()), Some(&p1), &ectx(2)));
        // A second new cell in the same transaction does not fit (Fig. 4).
        lower.push(LeafCell {
            key: b"k0\"".as_slice().into(),
            value: Value::Inline(vec![1; 8].into()),
        });
        lower.sort_by(|a, b| a.key.cmp(&b.key));
        assert!(!f.fits(&Node::Leaf(lower), Some(&p1), &ectx(2)));
        // The plain MVBT page has no reserve.
        assert!(MvbtFormat::MVBT.fits(&Node::Leaf(more), Some(&p1), &ectx(2)));
    }

    #[test]
    fn interior_nodes_keep_life_spans_and_two_entries_for_a_lazy_node() {
        let f = MvbtFormat::LAZY;
        let n1 = Node::Interior {
            cells: vec![InteriorCell {
                key: b"m".as_slice().into(),
                child: 10,
            }],
            right: 11,
        };
        // Child 10 split lazily at T = 2: (m -> 10) ends, (f -> 10) and
        // (m -> 12) start.
        let n2 = Node::Interior {
            cells: vec![
                InteriorCell {
                    key: b"f".as_slice().into(),
                    child: 10,
                },
                InteriorCell {
                    key: b"m".as_slice().into(),
                    child: 12,
                },
            ],
            right: 11,
        };
        let p1 = enc(f, &n1, None, 1);
        let p2 = enc(f, &n2, Some(&p1), 2);
        assert_eq!(dec(&p2, 2), n2);
        assert_eq!(dec(&p2, 1), n1);
        let cells = inspect(7, &p2).unwrap().1;
        let to10: Vec<_> = cells.iter().filter(|c| c.child == 10).collect();
        assert_eq!(to10.len(), 2, "the lazy node has two parent entries");
        assert!(to10.iter().any(|c| c.key == b"m" && c.end == 2));
        assert!(to10
            .iter()
            .any(|c| c.key == b"f" && c.start == 2 && c.end == INV));
        // Rolling version 2 back (Alg. 2) restores version 1 exactly.
        let mut r = p2.clone();
        assert!(f.invalidate(&mut r, 7, &|t| t == 2) > 0);
        assert_eq!(dec(&r, 9), n1);
        // A leaf root that becomes interior: its leaf cells end, the
        // interior ones start, old readers still see the leaf.
        let l = leaf(&[("a", 3)]);
        let q1 = enc(f, &l, None, 1);
        let q2 = enc(f, &n1, Some(&q1), 2);
        assert_eq!(dec(&q2, 1), l);
        assert_eq!(dec(&q2, 2), n1);
    }

    #[test]
    fn recovery_rolls_back_a_torn_write() {
        // Every mix of 512-byte sectors of a committed image and the next
        // writer's: recovery (repair) gives the committed node back.
        const BIG: usize = 2048;
        let f = MvbtFormat::MVBT;
        let e = |tid| EncodeCtx::new(BIG, tid, true);
        let d = |s| DecodeCtx {
            page_size: BIG,
            committed_tid: s,
            checksums: true,
            order: &BYTEWISE,
        };
        let big = |keys: &[(&str, usize)]| leaf(keys);
        let mut p1 = vec![0u8; BIG];
        let n1 = big(&[("a", 200), ("b", 200), ("c", 200)]);
        f.encode(7, &n1, None, &e(1), &mut p1).unwrap();
        let mut p2 = vec![0u8; BIG];
        let n2 = big(&[("b", 201), ("d", 200), ("e", 200), ("f", 100)]);
        f.encode(7, &n2, Some(&p1), &e(2), &mut p2).unwrap();
        let sectors = BIG / 512;
        for mask in 0..1u32 << sectors {
            let mut t = p1.clone();
            for k in 0..sectors {
                if mask & (1 << k) != 0 {
                    t[k * 512..(k + 1) * 512].copy_from_slice(&p2[k * 512..(k + 1) * 512]);
                }
            }
            f.repair(&mut t, 7, 1);
            assert_eq!(f.decode(7, &t, &d(1)).unwrap(), n1, "mask {mask:b}");
            assert!(pagesum::verify(7, &t, PAGE_SUM_AT));
            let mut again = t.clone();
            assert_eq!(f.repair(&mut again, 7, 1), 0, "idempotent");
            // The next writer (reusing TID 2) writes over the repaired page.
            let mut p3 = vec![0u8; BIG];
            f.encode(7, &n2, Some(&t), &e(2), &mut p3).unwrap();
            assert_eq!(f.decode(7, &p3, &d(2)).unwrap(), n2);
            assert_eq!(f.decode(7, &p3, &d(1)).unwrap(), n1);
        }
        // Whole, version 2 is kept when it is committed.
        let mut t = p2.clone();
        f.repair(&mut t, 7, 2);
        assert_eq!(f.decode(7, &t, &d(2)).unwrap(), n2);
    }

    #[test]
    fn the_root_stub_fits_over_any_image() {
        for f in [MvbtFormat::MVBT, MvbtFormat::LAZY] {
            let mut keys = Vec::new();
            let mut page = None;
            for i in 0..64 {
                keys.push(format!("key{i:03}"));
                let node = leaf(&keys.iter().map(|k| (k.as_str(), 6)).collect::<Vec<_>>());
                let mut out = vec![0u8; PS];
                match page.as_deref() {
                    None => {
                        f.encode(7, &node, None, &ectx(i as u64 + 1), &mut out)
                            .unwrap();
                        page = Some(out);
                    }
                    Some(b) => {
                        if !f
                            .encode_if_fits(7, &node, Some(b), &ectx(i as u64 + 1), &mut out)
                            .unwrap()
                        {
                            break;
                        }
                        page = Some(out);
                    }
                }
            }
            let stub = Node::Interior {
                cells: Vec::new(),
                right: 3,
            };
            assert!(f.fits(&stub, page.as_deref(), &ectx(100)));
        }
    }

    /// The fixed root under readers that hold its old versions: separators
    /// come and go, a node that does not fit is pushed down (or the root
    /// moves), and the stub written instead must always fit. It did not
    /// when the last resort counted the free bytes, which lay in holes
    /// too small for a stub beside a gap too small for a stub and a new
    /// slot (two last resorts in a row under a reader).
    #[test]
    fn the_root_stub_fits_while_old_readers_hold_its_dead_cells() {
        for ps in [512, 1024] {
            for f in [MvbtFormat::MVBT, MvbtFormat::LAZY] {
                for seed in 1..=40 {
                    root_under_readers(f, ps, seed);
                }
            }
        }
    }

    fn root_under_readers(f: MvbtFormat, ps: usize, seed: u64) {
        let mut x = seed;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let d = |s| DecodeCtx {
            page_size: ps,
            ..dctx(s)
        };
        let first = leaf(&[("a", 4)]);
        let mut page = vec![0u8; ps];
        f.encode(7, &first, None, &EncodeCtx::new(ps, 1, true), &mut page)
            .unwrap();
        // The node each TID wrote (index: TID - 1).
        let mut written = vec![first];
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut reader = 1;
        for tid in 2..300u64 {
            for _ in 0..1 + rnd(4) {
                if keys.is_empty() || rnd(3) != 0 {
                    let len = 1 + rnd(9);
                    keys.push((0..len).map(|_| b'a' + rnd(26) as u8).collect());
                } else {
                    keys.remove(rnd(keys.len() as u64) as usize);
                }
            }
            keys.sort();
            keys.dedup();
            // A reader opens now and then and stays a while.
            if rnd(20) == 0 {
                reader = tid - 1;
            }
            let mut ctx = EncodeCtx::new(ps, tid, true);
            ctx.horizon = reader;
            let cells = keys.iter().map(|k| InteriorCell {
                key: k.as_slice().into(),
                child: 100 + rnd(4) as Pgno,
            });
            let mut node = Node::Interior {
                cells: cells.collect(),
                right: 99,
            };
            let mut out = vec![0u8; ps];
            if rnd(8) == 0
                || !f
                    .encode_if_fits(7, &node, Some(&page), &ctx, &mut out)
                    .unwrap()
            {
                // Pushed down (or a moved root): the stub must fit.
                node = Node::Interior {
                    cells: Vec::new(),
                    right: tid as Pgno,
                };
                let fits = f.encode_if_fits(7, &node, Some(&page), &ctx, &mut out);
                assert!(
                    fits.unwrap(),
                    "{f:?} ps {ps} seed {seed} TID {tid}: no room for the stub"
                );
                keys.clear();
            }
            page = out;
            written.push(node);
            // Each snapshot reads its node or, below a forced collection,
            // is told it is too old.
            for s in [reader, tid - 1, tid] {
                match f.decode(7, &page, &d(s)) {
                    Ok(n) => assert_eq!(n, written[s as usize - 1], "snapshot {s}"),
                    Err(e) => assert!(e.is_retryable() && s < tid, "snapshot {s}: {e}"),
                }
            }
        }
    }

    /// Apply a put (`Some`) or delete of `k` to the sorted `cells`: the
    /// change, if any.
    fn apply(cells: &mut Vec<LeafCell>, k: &[u8], v: Option<Vec<u8>>) -> Option<LeafChange> {
        match (cells.binary_search_by(|c| c.key[..].cmp(k)), v) {
            (Ok(i), Some(v)) => {
                cells[i].value = Value::Inline(v.into());
                Some(LeafChange::Value(i))
            }
            (Ok(i), None) => {
                cells.remove(i);
                Some(LeafChange::Removed(i))
            }
            (Err(i), Some(v)) => {
                let key = k.to_vec().into();
                cells.insert(
                    i,
                    LeafCell {
                        key,
                        value: Value::Inline(v.into()),
                    },
                );
                Some(LeafChange::Inserted(i))
            }
            (Err(_), None) => None,
        }
    }

    /// Over pages a random history of full encodes left (dead cells, holes,
    /// lazy GC at random horizons, both formats, two page sizes), one more
    /// change as a patch (`patch_leaf`, and as a hinted put) writes what the
    /// full encode of the changed node writes, byte for byte, or declines.
    #[test]
    fn patches_write_what_the_full_encode_writes() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(36);
        let key = |r: &mut rand::rngs::StdRng| -> Vec<u8> {
            let alpha = r.random_range(1..=4u8);
            (0..r.random_range(1..=12))
                .map(|_| b'a' + r.random_range(0..alpha))
                .collect()
        };
        let (mut patched, mut hinted, mut removed) = (0, 0, 0);
        for trial in 0..3000 {
            let f = [MvbtFormat::MVBT, MvbtFormat::LAZY][trial % 2];
            let ps = [512, 512, 1024][trial % 3];
            let mut cells = Vec::new();
            for _ in 0..r.random_range(1..=6) {
                let (k, v) = (key(&mut r), vec![r.random(); r.random_range(0..90)]);
                apply(&mut cells, &k, Some(v));
            }
            let mut page = vec![0u8; ps];
            let node = Node::Leaf(cells.clone());
            if !f
                .encode_if_fits(9, &node, None, &EncodeCtx::new(ps, 1, true), &mut page)
                .unwrap()
            {
                continue;
            }
            let mut tid = 1;
            for _ in 0..r.random_range(1..=14) {
                let t = tid + r.random_range(1..=2);
                let mut node = cells.clone();
                let k = match node.is_empty() || r.random_bool(0.5) {
                    true => key(&mut r),
                    false => node[r.random_range(0..node.len())].key.to_vec(),
                };
                let v = (node.len() < 2 || r.random_ratio(3, 4))
                    .then(|| vec![r.random(); r.random_range(0..90)]);
                apply(&mut node, &k, v);
                let mut ctx = EncodeCtx::new(ps, t, true);
                ctx.horizon = r.random_range(0..t);
                let mut out = vec![0u8; ps];
                if !f
                    .encode_if_fits(9, &Node::Leaf(node.clone()), Some(&page), &ctx, &mut out)
                    .unwrap()
                {
                    break;
                }
                (page, cells, tid) = (out, node, t);
            }
            let ctx = DecodeCtx {
                page_size: ps,
                ..dctx(tid)
            };
            assert_eq!(f.decode(9, &page, &ctx).unwrap(), Node::Leaf(cells.clone()));
            // The last change: a put (sometimes of the value the key holds)
            // or a delete.
            let t = tid + r.random_range(1..=2);
            let k = match cells.is_empty() || r.random_bool(0.5) {
                true => key(&mut r),
                false => cells[r.random_range(0..cells.len())].key.to_vec(),
            };
            let held = cells
                .iter()
                .find(|c| c.key[..] == k[..])
                .map(|c| match &c.value {
                    Value::Inline(v) => v.to_vec(),
                    Value::Overflow { .. } => unreachable!("inline values only"),
                });
            let v = match r.random_range(0..5) {
                0 => None,
                1 => held.or(Some(vec![1; 3])),
                _ => Some(vec![r.random(); r.random_range(0..90)]),
            };
            let mut node = cells.clone();
            let change = apply(&mut node, &k, v.clone());
            let mut ctx = EncodeCtx::new(ps, t, true);
            ctx.horizon = r.random_range(0..t + 2);
            ctx.base_verified = r.random_bool(0.5);
            let patch = match &v {
                Some(v) => LeafPatch::Put(v),
                None => LeafPatch::Delete { keep: 0 },
            };
            let mut out = vec![0xEEu8; ps];
            let done = f
                .patch_leaf(9, &page, &k, patch, &BYTEWISE, &ctx, &mut out)
                .unwrap();
            let mut full = vec![0u8; ps];
            let node = Node::Leaf(node);
            let fits = f
                .encode_if_fits(9, &node, Some(&page), &ctx, &mut full)
                .unwrap();
            match done {
                Some(Patched::Written { existed }) => {
                    assert_eq!(existed, !matches!(change, Some(LeafChange::Inserted(_))));
                    assert!(
                        fits && out == full,
                        "trial {trial}: {change:?} patched unlike the full encode"
                    );
                    patched += 1;
                }
                Some(Patched::Absent) => assert!(change.is_none(), "trial {trial}: {change:?}"),
                Some(Patched::Full) => assert!(!fits, "trial {trial}: {change:?} full, yet fits"),
                None => {}
            }
            if let (
                Some(
                    ch @ (LeafChange::Value(_) | LeafChange::Inserted(_) | LeafChange::Removed(_)),
                ),
                true,
            ) = (change, fits)
            {
                let mut hctx = ctx;
                (hctx.base_verified, hctx.leaf_change) = (true, Some(ch));
                let mut out = vec![0x11u8; ps];
                assert!(f
                    .encode_if_fits(9, &node, Some(&page), &hctx, &mut out)
                    .unwrap());
                assert!(
                    out == full,
                    "trial {trial}: hinted {ch:?} unlike the full encode"
                );
                hinted += 1;
                if let LeafChange::Removed(_) = ch {
                    // The patch itself, not the layout behind it.
                    let mut own = vec![0x22u8; ps];
                    if with_scratch(|sc| f.patch_hinted(9, &node, Some(&page), &hctx, &mut own, sc))
                    {
                        assert!(
                            own == full,
                            "trial {trial}: removal patched unlike the full encode"
                        );
                        removed += 1;
                    }
                }
            }
        }
        assert!(
            patched > 300 && hinted > 300 && removed > 100,
            "only {patched} patches, {hinted} hinted ({removed} removals)"
        );
    }

    /// Over interior pages a random history of full encodes left (dead
    /// cells, holes, both formats, three page sizes), a hinted child move or
    /// split ([`MvbtFormat::patch_interior`]) writes what the full encode
    /// of the changed node writes, byte for byte, or declines.
    #[test]
    fn interior_patches_write_what_the_full_encode_writes() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(41);
        let mut page_no = 1000;
        let mut fresh = || {
            page_no += 1;
            page_no
        };
        // A random change of `cells`/`right`: a child moved (a cell's or
        // the right one), a child split (a new key below the next one), or
        // a separator dropped with its child.
        let change = |r: &mut rand::rngs::StdRng,
                      cells: &mut Vec<InteriorCell>,
                      right: &mut Pgno,
                      fresh: &mut dyn FnMut() -> Pgno|
         -> LeafChange {
            let i = r.random_range(0..=cells.len());
            // A separator and its emptied child dropped (a cell stays).
            if cells.len() > 1 && i < cells.len() && r.random_bool(0.2) {
                cells.remove(i);
                return LeafChange::Dropped(i);
            }
            let lo = if i == 0 {
                0
            } else {
                u32::from_be_bytes(cells[i - 1].key[..4].try_into().unwrap())
            };
            let hi = cells.get(i).map_or(u32::MAX, |c| {
                u32::from_be_bytes(c.key[..4].try_into().unwrap())
            });
            if r.random_bool(0.5) && hi - lo > 1 {
                let k = r.random_range(lo + 1..hi);
                let mut key = k.to_be_bytes().to_vec();
                key.extend(std::iter::repeat_n(b'x', r.random_range(0..20)));
                let left = cells.get(i).map_or(*right, |c| c.child);
                let left = if r.random_bool(0.5) { left } else { fresh() };
                match cells.get_mut(i) {
                    Some(c) => c.child = fresh(),
                    None => *right = fresh(),
                }
                cells.insert(
                    i,
                    InteriorCell {
                        key: key.into(),
                        child: left,
                    },
                );
                LeafChange::Split(i)
            } else {
                match cells.get_mut(i) {
                    Some(c) => c.child = fresh(),
                    None => *right = fresh(),
                }
                LeafChange::Child(i)
            }
        };
        let (mut patched, mut declined) = (0, 0);
        for trial in 0..1500 {
            let f = [MvbtFormat::MVBT, MvbtFormat::LAZY][trial % 2];
            let ps = [512, 1024, 4096][trial % 3];
            let mut cells: Vec<InteriorCell> = Vec::new();
            let mut right = fresh();
            for _ in 0..r.random_range(1..=4) {
                change(&mut r, &mut cells, &mut right, &mut fresh);
            }
            let node = Node::Interior {
                cells: cells.clone(),
                right,
            };
            let mut page = vec![0u8; ps];
            if !f
                .encode_if_fits(9, &node, None, &EncodeCtx::new(ps, 1, true), &mut page)
                .unwrap()
            {
                continue;
            }
            let mut tid = 1;
            for _ in 0..r.random_range(0..=12) {
                let t = tid + r.random_range(1..=2);
                let (mut c, mut rt) = (cells.clone(), right);
                change(&mut r, &mut c, &mut rt, &mut fresh);
                let mut ctx = EncodeCtx::new(ps, t, true);
                ctx.horizon = r.random_range(0..t);
                let mut out = vec![0u8; ps];
                let node = Node::Interior {
                    cells: c.clone(),
                    right: rt,
                };
                if !f
                    .encode_if_fits(9, &node, Some(&page), &ctx, &mut out)
                    .unwrap()
                {
                    break;
                }
                (page, cells, right, tid) = (out, c, rt, t);
            }
            let t = tid + r.random_range(1..=2);
            let (mut c, mut rt) = (cells.clone(), right);
            let ch = change(&mut r, &mut c, &mut rt, &mut fresh);
            let node = Node::Interior {
                cells: c,
                right: rt,
            };
            let mut ctx = EncodeCtx::new(ps, t, true);
            ctx.horizon = r.random_range(0..t + 2);
            let mut full = vec![0u8; ps];
            let fits = f
                .encode_if_fits(9, &node, Some(&page), &ctx, &mut full)
                .unwrap();
            ctx.base_verified = true;
            let mut out = vec![0xEEu8; ps];
            let done = with_scratch(|sc| f.patch_interior(9, &page, &node, ch, &ctx, &mut out, sc));
            if done {
                assert!(
                    fits && out == full,
                    "trial {trial}: {ch:?} patched unlike the full encode"
                );
                let dctx = DecodeCtx {
                    page_size: ps,
                    ..dctx(t.max(ctx.horizon))
                };
                assert_eq!(f.decode(9, &out, &dctx).unwrap(), node, "trial {trial}");
                patched += 1;
            } else {
                declined += 1;
            }
            // Through the hint, the same bytes either way.
            ctx.leaf_change = Some(ch);
            let mut hinted = vec![0x11u8; ps];
            assert_eq!(
                f.encode_if_fits(9, &node, Some(&page), &ctx, &mut hinted)
                    .unwrap(),
                fits
            );
            assert!(
                !fits || hinted == full,
                "trial {trial}: hinted {ch:?} unlike the full encode"
            );
        }
        eprintln!("interior patches: {patched} patched, {declined} declined");
        assert!(
            patched > 500,
            "only {patched} patched ({declined} declined)"
        );
    }

    /// A patch of a damaged page (bytes overwritten, the headers' and
    /// sometimes the page's checksums sealed again so the parse gets far)
    /// declines or writes a page, and never panics.
    #[test]
    fn patches_of_damaged_pages_do_not_panic() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::StdRng::seed_from_u64(7);
        let mut tried = 0;
        for trial in 0..20_000 {
            let f = [MvbtFormat::MVBT, MvbtFormat::LAZY][trial % 2];
            let cells = (0..r.random_range(1..=8))
                .map(|i| LeafCell {
                    key: format!("k{i:02}").into_bytes().into(),
                    value: Value::Inline(vec![i as u8; r.random_range(0..40)].into()),
                })
                .collect();
            let mut page = vec![0u8; PS];
            if !f
                .encode_if_fits(9, &Node::Leaf(cells), None, &ectx(1), &mut page)
                .unwrap()
            {
                continue;
            }
            for _ in 0..r.random_range(1..=6) {
                page[r.random_range(0..PS)] = r.random();
            }
            for v in 0..2 {
                if page[v * HDR_LEN] == MAGIC {
                    let crc = header_crc(9, &page, v);
                    page[v * HDR_LEN + 36..v * HDR_LEN + 40].copy_from_slice(&crc.to_be_bytes());
                }
            }
            if r.random_bool(0.5) {
                pagesum::seal(9, &mut page, PAGE_SUM_AT);
            }
            let mut ctx = ectx(r.random_range(2..5));
            ctx.base_verified = r.random_bool(0.5);
            ctx.horizon = r.random_range(0..4);
            let k = format!("k{:02}", r.random_range(0..10)).into_bytes();
            let v = vec![7u8; r.random_range(0..60)];
            let patch = match r.random_ratio(1, 3) {
                true => LeafPatch::Delete { keep: 0 },
                false => LeafPatch::Put(&v),
            };
            let _ = f.patch_leaf(9, &page, &k, patch, &BYTEWISE, &ctx, &mut vec![0u8; PS]);
            tried += 1;
        }
        assert!(tried > 10_000, "only {tried} damaged pages");
    }
}
