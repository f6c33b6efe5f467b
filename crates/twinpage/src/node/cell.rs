//! Cell encoding shared by the node formats (slotted, DHL, IPS, and any
//! format to come: encode keys and values through these helpers and a
//! format gets overflowing keys and values for free).
//!
//! Leaf cell: `flags u8` (bit 0: the value overflows, bit 1: the key
//! overflows), `varint key_len`, `varint value_len`, the key, then the
//! value (inline) or a `u32` overflow head page.
//! Interior cell: `varint key_len`, key, `u32 child`.
//!
//! A key longer than the format's [`NodeFormat::max_key_len`] *overflows*:
//! the cell keeps its first `local_len` bytes followed by the `u32` head
//! of the overflow chain holding the rest (`key_len - local_len` bytes,
//! same page layout as a value's chain). In a leaf cell (flag bit 1) that
//! is `varint local_len`, the local bytes, `u32 key head` in place of the
//! key; an interior cell starts with the two bytes `0x80 0x00` (a varint
//! no encoder writes: zero in two bytes), then `varint key_len`, `varint local_len`, the local bytes, `u32 key
//! head`, `u32 child`. The local bytes and the head are adjacent, so the
//! format's byte string for the key (its *identity*, [`key_ident`]) is
//! unique to the cell: formats that pair committed cells by key (DHL, IPS)
//! pair overflowing keys by it. Varints are LEB128. Every length is
//! checked against the page before it is used.
//!
//! A format decodes an overflowing key as a *stub* ([`Bytes::chain_stub`]:
//! the local bytes and the chain); the pager reads the tail and puts the
//! cells in key order with [`complete_keys`] before the tree sees them.
//!
//! What a format owes overflowing keys, beyond writing cells with
//! [`put_leaf`]/[`put_interior`] and reading them with [`Reader`]: its own
//! order checks (and any sort in the table's order) skip a cell whose key
//! overflows ([`key_overflows_at`], [`Bytes::is_stub`]); it pairs cells
//! of two versions by [`key_ident`], never by the key; and a format whose
//! slots are unsorted on the page says so ([`NodeFormat::unsorted_slots`])
//! and lists a version that holds an overflowing key in any total order of
//! the identities (they are unique to each cell). The conformance kit
//! generates overflowing keys.
//!
//! [`NodeFormat::unsorted_slots`]: super::NodeFormat::unsorted_slots
//! [`NodeFormat::max_key_len`]: super::NodeFormat::max_key_len

use super::bytes::INLINE;
use super::{Bytes, InteriorCell, LeafCell, Node, Value};
use crate::base::{Error, KeyOrder, Pgno, Result};
use std::cmp::Ordering;
use std::sync::Arc;

/// Leaf flag: the value is in an overflow chain.
pub(crate) const FLAG_VALUE_CHAIN: u8 = 1;
/// Leaf flag: the key overflows.
pub(crate) const FLAG_KEY_CHAIN: u8 = 2;
/// First bytes of an interior cell whose key overflows: a non-canonical
/// varint (zero in two bytes), which no cell without it starts with.
pub(crate) const INTERIOR_KEY_CHAIN: [u8; 2] = [0x80, 0x00];

/// Bytes of a LEB128 varint.
pub(crate) fn varint_len(v: u64) -> usize {
    // Seven bits a byte, at least one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(out: &mut [u8], mut pos: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        out[pos] = (v as u8) | 0x80;
        v >>= 7;
        pos += 1;
    }
    out[pos] = v as u8;
    pos + 1
}

/// Bytes of an overflowing key its cell keeps, for a format whose
/// [`NodeFormat::max_key_len`] is `max_key`: 10 fewer, the room the local
/// length and the chain head need (and a longer key length), so an
/// overflowing key's cell is no larger than the largest whole key's.
///
/// [`NodeFormat::max_key_len`]: super::NodeFormat::max_key_len
pub fn overflow_key_local(max_key: usize) -> usize {
    max_key.saturating_sub(10)
}

/// Bytes the key takes in a cell after its length: the key, or for an
/// overflowing key `varint local_len`, the local bytes and the head.
fn key_body_len(key: &Bytes) -> usize {
    match key.chain() {
        None => key.len(),
        Some(c) => varint_len(c.local as u64) + c.local + 4,
    }
}

/// Length the cell records for the key: the whole key's.
fn key_total(key: &Bytes) -> u64 {
    key.chain().map_or(key.len(), |c| c.total) as u64
}

/// Write the key's body (see [`key_body_len`]) at `out[p..]`.
fn put_key_body(out: &mut [u8], mut p: usize, key: &Bytes) -> usize {
    match key.chain() {
        None => {
            out[p..p + key.len()].copy_from_slice(key);
            p + key.len()
        }
        Some(c) => {
            p = put_varint(out, p, c.local as u64);
            out[p..p + c.local].copy_from_slice(&key[..c.local]);
            p += c.local;
            out[p..p + 4].copy_from_slice(&c.head.to_be_bytes());
            p + 4
        }
    }
}

/// The first 8 bytes of `key` as a big-endian integer, zero-padded: a
/// smaller prefix means a smaller key bytewise (equal ones tell nothing),
/// so most comparisons of a sort or a scan are integer ones.
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Encoded size of a leaf cell (without its offset entry).
pub(crate) fn leaf_len(c: &LeafCell) -> usize {
    let (vlen, body) = match &c.value {
        Value::Inline(v) => (v.len() as u64, v.len()),
        Value::Overflow { len, .. } => (*len, 4),
    };
    let key = match c.key.chain() {
        None => varint_len(c.key.len() as u64) + c.key.len(),
        Some(ch) => varint_len(ch.total as u64) + varint_len(ch.local as u64) + ch.local + 4,
    };
    1 + key + varint_len(vlen) + body
}

/// Encoded size of an interior cell (without its offset entry).
pub(crate) fn interior_len(c: &InteriorCell) -> usize {
    let marker = if c.key.chain().is_some() {
        INTERIOR_KEY_CHAIN.len()
    } else {
        0
    };
    marker + varint_len(key_total(&c.key)) + key_body_len(&c.key) + 4
}

/// Write a leaf cell at `out[at..]` (the caller reserved [`leaf_len`]).
pub(crate) fn put_leaf(out: &mut [u8], at: usize, c: &LeafCell) {
    let (mut flags, vlen) = match &c.value {
        Value::Inline(v) => (0, v.len() as u64),
        Value::Overflow { len, .. } => (FLAG_VALUE_CHAIN, *len),
    };
    if c.key.chain().is_some() {
        flags |= FLAG_KEY_CHAIN;
    }
    out[at] = flags;
    let mut p = put_varint(out, at + 1, key_total(&c.key));
    p = put_varint(out, p, vlen);
    p = put_key_body(out, p, &c.key);
    match &c.value {
        Value::Inline(v) => out[p..p + v.len()].copy_from_slice(v),
        Value::Overflow { head, .. } => out[p..p + 4].copy_from_slice(&head.to_be_bytes()),
    }
}

/// Write a plain leaf cell (an inline value, a key stored whole) of
/// `key` and `value` at `out[at..]`, which the caller sized; returns
/// where the value starts.
pub(crate) fn put_plain_leaf(out: &mut [u8], at: usize, key: &[u8], value: &[u8]) -> usize {
    out[at] = 0;
    let mut p = put_varint(out, at + 1, key.len() as u64);
    p = put_varint(out, p, value.len() as u64);
    out[p..p + key.len()].copy_from_slice(key);
    p += key.len();
    out[p..p + value.len()].copy_from_slice(value);
    p
}

/// Write an interior cell at `out[at..]` (the caller reserved [`interior_len`]).
pub(crate) fn put_interior(out: &mut [u8], at: usize, c: &InteriorCell) {
    let mut p = at;
    if c.key.chain().is_some() {
        out[p..p + 2].copy_from_slice(&INTERIOR_KEY_CHAIN);
        p += 2;
    }
    p = put_varint(out, p, key_total(&c.key));
    p = put_key_body(out, p, &c.key);
    out[p..p + 4].copy_from_slice(&c.child.to_be_bytes());
}

/// The byte string a format stores for `key` and pairs cells by (the key
/// itself, or an overflowing key's local bytes and chain head, the same
/// bytes [`Reader::leaf_key`] and [`Reader::interior_key`] return): built
/// in `scratch` when it is not the key.
pub(crate) fn key_ident<'a>(key: &'a Bytes, scratch: &'a mut Vec<u8>) -> &'a [u8] {
    match key.chain() {
        None => key,
        Some(c) => {
            scratch.clear();
            scratch.extend_from_slice(&key[..c.local]);
            scratch.extend_from_slice(&c.head.to_be_bytes());
            scratch
        }
    }
}

/// Whether the cell at `page[off]` (a leaf cell if `leaf`) stores an
/// overflowing key: its key identity is then not the key, and the
/// format's own order checks skip it ([`complete_keys`] makes them).
pub(crate) fn key_overflows_at(page: &[u8], off: usize, leaf: bool) -> bool {
    if leaf {
        page.get(off).is_some_and(|&b| b & FLAG_KEY_CHAIN != 0)
    } else {
        page.get(off..off + 2) == Some(&INTERIOR_KEY_CHAIN[..])
    }
}

/// Whether `node` holds a key decoded as a stub.
pub(crate) fn has_stubs(node: &Node) -> bool {
    match node {
        Node::Leaf(c) => c.iter().any(|c| c.key.is_stub()),
        Node::Interior { cells, .. } => cells.iter().any(|c| c.key.is_stub()),
    }
}

/// Complete a node a format decoded from page `pgno`: read the tail of
/// every overflowing key with `tail(head, len)` (which must check `len`
/// against the file before allocating), then make sure the cells ascend
/// strictly in `order`. Cells come out of the format in key order except
/// where a comparison needed an overflowing key; a format whose slots are
/// `unsorted` on the page listed those in some order of its own, and they
/// are sorted here. Does nothing for a node without overflowing keys.
pub fn complete_keys(
    pgno: Pgno,
    node: &mut Node,
    order: &dyn KeyOrder,
    unsorted: bool,
    tail: &mut dyn FnMut(Pgno, u64) -> Result<Vec<u8>>,
) -> Result<()> {
    if !has_stubs(node) {
        return Ok(());
    }
    let bad = |what: String| Error::corrupt("database", pgno, what);
    let mut complete = |key: &mut Bytes, tail: Tail<'_>| {
        let Some(c) = key.chain().filter(|_| key.is_stub()) else {
            return Ok(());
        };
        let rest = tail(c.head, c.tail_len())?;
        if rest.len() as u64 != c.tail_len() {
            return Err(bad(format!(
                "key overflow chain at page {} holds {} bytes, the cell says {}",
                c.head,
                rest.len(),
                c.tail_len()
            )));
        }
        let mut whole = Vec::with_capacity(c.total);
        whole.extend_from_slice(key);
        whole.extend_from_slice(&rest);
        *key = Bytes::chained(Arc::from(whole), c.head, c.local)
            .ok_or_else(|| bad("overflowing key shorter than its local part".into()))?;
        Ok(())
    };
    let (cells, what) = match node {
        Node::Leaf(cells) => {
            return in_order(cells, order, unsorted, &mut complete, tail, &bad, "keys")
        }
        Node::Interior { cells, .. } => (cells, "separators"),
    };
    in_order(cells, order, unsorted, &mut complete, tail, &bad, what)
}

/// A cell of either kind, for [`in_order`].
trait Keyed {
    fn key(&self) -> &Bytes;
    fn key_mut(&mut self) -> &mut Bytes;
}

impl Keyed for LeafCell {
    fn key(&self) -> &Bytes {
        &self.key
    }
    fn key_mut(&mut self) -> &mut Bytes {
        &mut self.key
    }
}

impl Keyed for InteriorCell {
    fn key(&self) -> &Bytes {
        &self.key
    }
    fn key_mut(&mut self) -> &mut Bytes {
        &mut self.key
    }
}

type Tail<'a> = &'a mut dyn FnMut(Pgno, u64) -> Result<Vec<u8>>;

/// [`complete_keys`] on one node's `what` (keys or separators).
fn in_order<C: Keyed>(
    cells: &mut [C],
    order: &dyn KeyOrder,
    unsorted: bool,
    complete: &mut dyn FnMut(&mut Bytes, Tail<'_>) -> Result<()>,
    tail: Tail<'_>,
    bad: &dyn Fn(String) -> Error,
    what: &str,
) -> Result<()> {
    for c in cells.iter_mut() {
        complete(c.key_mut(), &mut *tail)?;
    }
    if unsorted {
        cells.sort_by(|a, b| order.compare(a.key(), b.key()));
    }
    let ascending = |i: usize| order.compare(cells[i - 1].key(), cells[i].key()) == Ordering::Less;
    match (1..cells.len()).find(|&i| !ascending(i)) {
        Some(i) => Err(bad(format!("cell {i}: {what} out of order or repeated"))),
        None => Ok(()),
    }
}

/// Page-type byte of a leaf (every format's).
pub(crate) const LEAF: u8 = 0x0D;
/// Page-type byte of an interior node (every format's).
pub(crate) const INTERIOR: u8 = 0x05;

/// Encoded size of cell `i` of `node`.
pub(crate) fn node_cell_len(node: &Node, i: usize) -> usize {
    match node {
        Node::Leaf(c) => leaf_len(&c[i]),
        Node::Interior { cells, .. } => interior_len(&cells[i]),
    }
}

/// Key of cell `i` of `node`.
pub(crate) fn node_cell_key(node: &Node, i: usize) -> &Bytes {
    match node {
        Node::Leaf(c) => &c[i].key,
        Node::Interior { cells, .. } => &cells[i].key,
    }
}

/// Write cell `i` of `node` at `out[at..]`.
pub(crate) fn put_node_cell(node: &Node, i: usize, out: &mut [u8], at: usize) {
    match node {
        Node::Leaf(c) => put_leaf(out, at, &c[i]),
        Node::Interior { cells, .. } => put_interior(out, at, &cells[i]),
    }
}

/// Whether cell `i` of `node` is encoded as exactly `page[off..off + len]`
/// (how an in-page format finds the cells a new version shares with the
/// committed one). A leaf cell with an inline value and a whole key is
/// compared field by field, without encoding it; any other is encoded
/// into `scratch` and compared.
pub(crate) fn node_cell_matches(
    node: &Node,
    i: usize,
    page: &[u8],
    (off, len): (usize, usize),
    scratch: &mut Vec<u8>,
) -> bool {
    let Some(stored) = off.checked_add(len).and_then(|e| page.get(off..e)) else {
        return false;
    };
    if let Node::Leaf(cells) = node {
        let c = &cells[i];
        if let (Value::Inline(v), None) = (&c.value, c.key.chain()) {
            let mut head = [0u8; 21];
            let mut p = put_varint(&mut head, 1, c.key.len() as u64);
            p = put_varint(&mut head, p, v.len() as u64);
            return p + c.key.len() + v.len() == len
                && stored[..p] == head[..p]
                && stored[p..p + c.key.len()] == c.key[..]
                && stored[p + c.key.len()..] == v[..];
        }
    }
    scratch.clear();
    scratch.resize(len, 0);
    if node_cell_len(node, i) != len {
        return false;
    }
    put_node_cell(node, i, scratch, 0);
    scratch[..] == *stored
}

/// The page-type byte and rightmost child of `node`.
pub(crate) fn kind_of(node: &Node) -> (u8, Pgno) {
    match node {
        Node::Leaf(_) => (LEAF, 0),
        Node::Interior { right, .. } => (INTERIOR, *right),
    }
}

/// A varint of one or two bytes at `page[at..end]`: its value and the
/// position after it. `None` for a longer one or one that runs past `end`
/// (the checked [`Reader`] path reports those).
#[inline]
fn short_varint(page: &[u8], at: usize, end: usize) -> Option<(usize, usize)> {
    if at >= end {
        return None;
    }
    let b0 = *page.get(at)?;
    if b0 < 0x80 {
        return Some((usize::from(b0), at + 1));
    }
    if at + 1 >= end {
        return None;
    }
    let b1 = *page.get(at + 1)?;
    (b1 < 0x80).then(|| (usize::from(b0 & 0x7f) | usize::from(b1) << 7, at + 2))
}

/// `a < b` bytewise: short keys (most) are compared byte by byte in line
/// instead of through a call to `memcmp`.
#[inline]
pub(crate) fn key_lt(a: &[u8], b: &[u8]) -> bool {
    let (mut a, mut b) = (a, b);
    if let (Some((x, ra)), Some((y, rb))) = (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x < y;
        }
        (a, b) = (ra, rb);
    }
    let n = a.len().min(b.len());
    if n > 16 {
        return a < b;
    }
    for i in 0..n {
        if a[i] != b[i] {
            return a[i] < b[i];
        }
    }
    a.len() < b.len()
}

/// Binary search for `key` among the `n` cells of a page, in `order`:
/// `cell(i)` reads cell `i` (anything the caller wants back with it, and
/// its key's bytes), `None` when it cannot (not a plain cell, out of the
/// page), which ends the search with `None`. `Ok((i, t))`: the key is
/// cell `i`; `Err(i)`: it would go at position `i`.
#[inline]
pub(crate) fn search_cells<'p, T>(
    n: usize,
    key: &[u8],
    order: &dyn KeyOrder,
    mut cell: impl FnMut(usize) -> Option<(T, &'p [u8])>,
) -> Option<std::result::Result<(usize, T), usize>> {
    let bytewise = order.bytewise();
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let (t, stored) = cell(mid)?;
        let ord = if bytewise {
            stored.cmp(key)
        } else {
            order.compare(stored, key)
        };
        match ord {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(Ok((mid, t))),
        }
    }
    Some(Err(lo))
}

/// Bounds-checked reader over one page.
pub(crate) struct Reader<'a> {
    page: &'a [u8],
    /// Current position.
    pub pos: usize,
    end: usize,
    pgno: Pgno,
    /// The page as a shared buffer, when cells may point into it.
    share: Option<&'a Arc<[u8]>>,
}

impl<'a> Reader<'a> {
    /// A reader of `page[pos..end]`.
    pub fn new(page: &'a [u8], pos: usize, end: usize, pgno: Pgno) -> Self {
        Reader {
            page,
            pos,
            end: end.min(page.len()),
            pgno,
            share: None,
        }
    }

    /// Make parsed keys and values point into `buf` (which must hold the
    /// same bytes as the page) instead of copying them.
    pub fn sharing(mut self, buf: Option<&'a Arc<[u8]>>) -> Self {
        self.share = buf.filter(|b| std::ptr::eq(b.as_ptr(), self.page.as_ptr()));
        self
    }

    /// Most leaf cells: no chain, lengths of one or two varint bytes, a
    /// key within `max_key`, all inside the page. For such a cell at the
    /// current position, where its key and value start and where it
    /// ends; `None` sends the caller down the checked path.
    #[inline]
    pub(crate) fn plain_leaf(&self, max_key: usize) -> Option<(usize, usize, usize)> {
        let p = self.pos;
        if self.page.get(p) != Some(&0) {
            return None;
        }
        let (klen, ks) = short_varint(self.page, p + 1, self.end)?;
        let (vlen, start) = short_varint(self.page, ks, self.end)?;
        let (vs, end) = (start + klen, start + klen + vlen);
        (klen <= max_key && end <= self.end).then_some((start, vs, end))
    }

    /// An interior cell with its key in the cell and a length of one or
    /// two varint bytes (nearly all): where its key starts and ends and
    /// where the cell ends, read without the checked path's per-byte
    /// steps. `None` (anything else, a bad cell included) sends the caller
    /// down the checked path, which gives the same answer or the error.
    #[inline]
    pub(crate) fn plain_interior(&self, max_key: usize) -> Option<(usize, usize, usize)> {
        let p = self.pos;
        if self.page.get(p..p + 2) == Some(&INTERIOR_KEY_CHAIN[..]) {
            return None;
        }
        let (klen, ks) = short_varint(self.page, p, self.end)?;
        let (ke, end) = (ks + klen, ks + klen + 4);
        if klen > max_key || end > self.end {
            return None;
        }
        let child = self.page.get(ke..end)?;
        (child != [0, 0, 0, 0]).then_some((ks, ke, end))
    }

    /// `page[start..end]` (in bounds) as [`Bytes`]: shared with the page
    /// when possible.
    fn span(&self, start: usize, end: usize) -> Bytes {
        if end - start <= INLINE {
            return Bytes::inline_at(self.page, start, end);
        }
        self.share
            .and_then(|buf| Bytes::shared(buf, start, end))
            .unwrap_or_else(|| Bytes::from(&self.page[start..end]))
    }

    /// The next `n` bytes as [`Bytes`]: shared with the page when possible.
    fn owned(&mut self, n: u64) -> Result<Bytes> {
        let start = self.pos;
        let b = self.bytes(n)?;
        Ok(
            match self
                .share
                .and_then(|buf| Bytes::shared(buf, start, self.pos))
            {
                Some(shared) => shared,
                None => Bytes::from(b),
            },
        )
    }

    fn err(&self, what: impl Into<String>) -> Error {
        Error::corrupt("database", self.pgno, what)
    }

    fn u8(&mut self) -> Result<u8> {
        if self.pos >= self.end {
            return Err(self.err("cell runs past the end of the page"));
        }
        self.pos += 1;
        Ok(self.page[self.pos - 1])
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("varint longer than 10 bytes"))
    }

    fn bytes(&mut self, n: u64) -> Result<&'a [u8]> {
        let n = usize::try_from(n).map_err(|_| self.err("length overflows"))?;
        if self.pos > self.end || n > self.end - self.pos {
            return Err(self.err(format!(
                "length {n} at offset {} runs past the end of the page",
                self.pos
            )));
        }
        self.pos += n;
        Ok(&self.page[self.pos - n..self.pos])
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A key of `klen` bytes at the current position: stored whole
    /// (`Ok(None)` from [`Reader::key_parts`] means that) or overflowing.
    /// Returns the key's identity (the bytes the cell stores for it) and,
    /// for an overflowing key, its chain head.
    fn key_parts(
        &mut self,
        i: usize,
        klen: u64,
        chained: bool,
        max_key: usize,
    ) -> Result<(&'a [u8], Option<Pgno>)> {
        if !chained {
            if klen > max_key as u64 {
                return Err(self.err(format!("key length {klen} exceeds {max_key}")));
            }
            return Ok((self.bytes(klen)?, None));
        }
        let local = self.varint()?;
        if local > max_key as u64 || local >= klen || klen > u64::from(u32::MAX) {
            return Err(self.err(format!(
                "cell {i}: overflowing key of {klen} bytes keeps {local} in the cell (at most {max_key})"
            )));
        }
        let start = self.pos;
        self.bytes(local)?;
        let head = self.u32()?;
        if head == 0 {
            return Err(self.err(format!("cell {i}: key overflow head is page 0")));
        }
        Ok((&self.page[start..self.pos], Some(head)))
    }

    /// The key from its identity: shared with the page, or a stub.
    fn key_from(&self, ident: &'a [u8], klen: u64, head: Option<Pgno>) -> Result<Bytes> {
        match head {
            Some(head) => Bytes::chain_stub(&ident[..ident.len() - 4], head, klen)
                .ok_or_else(|| self.err("overflowing key shorter than its local part")),
            None => {
                let start = ident.as_ptr() as usize - self.page.as_ptr() as usize;
                Ok(self
                    .share
                    .and_then(|buf| Bytes::shared(buf, start, start + ident.len()))
                    .unwrap_or_else(|| Bytes::from(ident)))
            }
        }
    }

    /// Parse a leaf cell (cell number `i`, for messages).
    pub fn leaf(&mut self, i: usize, max_key: usize) -> Result<LeafCell> {
        if let Some((ks, vs, end)) = self.plain_leaf(max_key) {
            self.pos = end;
            return Ok(LeafCell {
                key: self.span(ks, vs),
                value: Value::Inline(self.span(vs, end)),
            });
        }
        let flags = self.u8()?;
        let klen = self.varint()?;
        let vlen = self.varint()?;
        if flags & !(FLAG_VALUE_CHAIN | FLAG_KEY_CHAIN) != 0 {
            return Err(self.err(format!("cell {i}: unknown flags {flags:#x}")));
        }
        let (ident, head) = self.key_parts(i, klen, flags & FLAG_KEY_CHAIN != 0, max_key)?;
        let key = self.key_from(ident, klen, head)?;
        let value = if flags & FLAG_VALUE_CHAIN == 0 {
            Value::Inline(self.owned(vlen)?)
        } else {
            let head = self.u32()?;
            if head == 0 {
                return Err(self.err(format!("cell {i}: overflow head is page 0")));
            }
            Value::Overflow { len: vlen, head }
        };
        Ok(LeafCell { key, value })
    }

    /// [`Reader::leaf`] of a plain cell (see `plain_leaf`), with where its
    /// key lies in the page, for a decoder to compare keys without going
    /// through [`Bytes`]; `None`, the position unchanged, for any other.
    #[inline]
    pub fn plain(&mut self, max_key: usize) -> Option<(LeafCell, usize, usize)> {
        let (ks, vs, end) = self.plain_leaf(max_key)?;
        self.pos = end;
        let cell = LeafCell {
            key: self.span(ks, vs),
            value: Value::Inline(self.span(vs, end)),
        };
        Some((cell, ks, vs))
    }

    /// Skip over a leaf cell without copying it; returns its key's
    /// identity (see [`key_ident`]).
    pub fn leaf_key(&mut self, i: usize, max_key: usize) -> Result<&'a [u8]> {
        if let Some((ks, vs, end)) = self.plain_leaf(max_key) {
            self.pos = end;
            return Ok(&self.page[ks..vs]);
        }
        let flags = self.u8()?;
        let klen = self.varint()?;
        let vlen = self.varint()?;
        if flags & !(FLAG_VALUE_CHAIN | FLAG_KEY_CHAIN) != 0 {
            return Err(self.err(format!("cell {i}: unknown flags {flags:#x}")));
        }
        let (key, _) = self.key_parts(i, klen, flags & FLAG_KEY_CHAIN != 0, max_key)?;
        if flags & FLAG_VALUE_CHAIN == 0 {
            self.bytes(vlen)?;
        } else if self.u32()? == 0 {
            return Err(self.err(format!("cell {i}: overflow head is page 0")));
        }
        Ok(key)
    }

    /// The length and overflow flag of an interior cell's key.
    fn interior_len_and_flag(&mut self) -> Result<(u64, bool)> {
        let chained =
            self.pos + 2 <= self.end && self.page[self.pos..self.pos + 2] == INTERIOR_KEY_CHAIN;
        if chained {
            self.pos += 2;
        }
        Ok((self.varint()?, chained))
    }

    /// Skip over an interior cell without copying it; returns its key's
    /// identity (see [`key_ident`]).
    pub fn interior_key(&mut self, i: usize, max_key: usize) -> Result<&'a [u8]> {
        if let Some((ks, ke, end)) = self.plain_interior(max_key) {
            self.pos = end;
            return Ok(&self.page[ks..ke]);
        }
        self.interior_key_checked(i, max_key)
    }

    /// [`Reader::interior_key`] without the fast path.
    fn interior_key_checked(&mut self, i: usize, max_key: usize) -> Result<&'a [u8]> {
        let (klen, chained) = self.interior_len_and_flag()?;
        let (key, _) = self.key_parts(i, klen, chained, max_key)?;
        if self.u32()? == 0 {
            return Err(self.err(format!("cell {i}: child is page 0")));
        }
        Ok(key)
    }

    /// Parse an interior cell (cell number `i`, for messages).
    pub fn interior(&mut self, i: usize, max_key: usize) -> Result<InteriorCell> {
        if let Some((ks, ke, end)) = self.plain_interior(max_key) {
            self.pos = end;
            let c = &self.page[ke..end];
            return Ok(InteriorCell {
                key: self.span(ks, ke),
                child: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
            });
        }
        let (klen, chained) = self.interior_len_and_flag()?;
        let (ident, head) = self.key_parts(i, klen, chained, max_key)?;
        let key = self.key_from(ident, klen, head)?;
        let child = self.u32()?;
        if child == 0 {
            return Err(self.err(format!("cell {i}: child is page 0")));
        }
        Ok(InteriorCell { key, child })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_lt_is_bytewise_less_than() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // Short alphabets and shared prefixes, so that keys often tie on
        // their first eight bytes and differ past them, or only in length.
        let key = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
            let len = rng.random_range(0..40);
            (0..len).map(|_| rng.random_range(0..3u8)).collect()
        };
        for _ in 0..20_000 {
            let a = key(&mut rng);
            let mut b = if rng.random_bool(0.5) {
                a.clone()
            } else {
                key(&mut rng)
            };
            if rng.random_bool(0.3) && !b.is_empty() {
                let cut = rng.random_range(0..b.len());
                b.truncate(cut);
            }
            assert_eq!(key_lt(&a, &b), a < b, "{a:?} {b:?}");
            assert_eq!(key_lt(&b, &a), b < a, "{b:?} {a:?}");
        }
    }

    #[test]
    fn varint_len_is_what_put_varint_writes() {
        let mut buf = [0u8; 10];
        for shift in 0..64 {
            for v in [
                1u64 << shift,
                (1u64 << shift) - 1,
                (1u64 << shift) + 1,
                u64::MAX >> shift,
            ] {
                assert_eq!(varint_len(v), put_varint(&mut buf, 0, v), "{v}");
            }
        }
        assert_eq!(varint_len(0), 1);
    }

    /// Wherever the fast path reads an interior cell, the checked path
    /// reads the same key and stops at the same byte: over cells of every
    /// length class, chained keys, a child of 0, cut-short cells and
    /// random bytes.
    #[test]
    fn interior_cells_read_the_same_on_both_paths() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut pages: Vec<(Vec<u8>, usize)> = Vec::new();
        for klen in [0usize, 1, 8, 127, 128, 200, 300] {
            for child in [0u32, 1, 0x0102_0304] {
                // A whole cell with a key of one or two length bytes
                // within the limit and a child takes the fast path.
                let whole = |page: &[u8], end: usize, max_key: usize| {
                    let fast = Reader::new(page, 3, end, 7).plain_interior(max_key);
                    let expect = child != 0 && klen <= max_key && klen < 1 << 14;
                    assert_eq!(fast.is_some(), expect, "{klen} {child} {max_key}");
                };
                let mut page = vec![0u8; 3 + 10 + klen + 4 + 8];
                let ks = put_varint(&mut page, 3, klen as u64);
                page[ks..ks + klen]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, b)| *b = i as u8);
                let end = ks + klen + 4;
                page[ks + klen..end].copy_from_slice(&child.to_be_bytes());
                page.truncate(end + 8);
                [0, 8, 200, 300]
                    .into_iter()
                    .for_each(|m| whole(&page, end, m));
                pages.push((page.clone(), end));
                pages.push((page, end - 1));
            }
        }
        let mut chained = vec![0u8; 3];
        chained.extend_from_slice(&INTERIOR_KEY_CHAIN);
        chained.extend_from_slice(&[0x90, 0x03, 4, 1, 2, 3, 4, 0, 0, 0, 9, 0, 0, 0, 5]);
        let end = chained.len();
        pages.push((chained, end));
        for _ in 0..20_000 {
            let n = rng.random_range(4..24);
            let page: Vec<u8> = (0..n)
                .map(|_| match rng.random_range(0..4) {
                    0 => 0,
                    1 => 0x80,
                    _ => rng.random(),
                })
                .collect();
            let end = rng.random_range(3..=n);
            pages.push((page, end));
        }
        let mut fast = 0;
        for (page, end) in &pages {
            for max_key in [0, 8, 200] {
                let r = Reader::new(page, 3, *end, 7);
                let mut checked = Reader::new(page, 3, *end, 7);
                let slow = checked.interior_key_checked(0, max_key);
                let Some((ks, ke, stop)) = r.plain_interior(max_key) else {
                    continue;
                };
                fast += 1;
                assert_eq!(slow.ok(), Some(&page[ks..ke]), "{page:?} to {end}");
                assert_eq!(checked.pos, stop, "{page:?} to {end}");
                // The decoded cell, shared with the page or copied: the
                // same key and child.
                let buf: Arc<[u8]> = Arc::from(&page[..]);
                for share in [None, Some(&buf)] {
                    let mut r = Reader::new(&buf, 3, *end, 7).sharing(share);
                    let cell = r.interior(0, max_key).unwrap();
                    assert_eq!(&cell.key[..], &page[ks..ke]);
                    assert_eq!(cell.child.to_be_bytes(), page[ke..stop]);
                    assert_eq!(r.pos, stop);
                }
            }
        }
        assert!(fast > 1000, "the fast path read {fast} cells");
    }

    /// Cells whose lengths take one, two and three varint bytes decode the
    /// same whichever path reads them, shared or copied, and a cell cut
    /// short is an error on either path.
    #[test]
    fn leaf_cells_read_back_whatever_their_length() {
        for klen in [0usize, 1, 29, 30, 31, 127, 128, 200] {
            for vlen in [0usize, 5, 30, 31, 127, 128, 1000, 16_384] {
                let cell = LeafCell {
                    key: Bytes::from((0..klen).map(|i| i as u8).collect::<Vec<_>>()),
                    value: Value::Inline(Bytes::from(vec![0xa5; vlen])),
                };
                let len = leaf_len(&cell);
                let mut page = vec![0u8; 3 + len + 40];
                put_leaf(&mut page, 3, &cell);
                let page: Arc<[u8]> = Arc::from(page);
                for share in [None, Some(&page)] {
                    let mut r = Reader::new(&page, 3, 3 + len, 7).sharing(share);
                    assert_eq!(r.leaf(0, 200).unwrap(), cell, "{klen}/{vlen}");
                    assert_eq!(r.pos, 3 + len);
                    let mut k = Reader::new(&page, 3, 3 + len, 7).sharing(share);
                    assert_eq!(k.leaf_key(0, 200).unwrap(), &cell.key[..]);
                    assert_eq!(k.pos, 3 + len);
                    let mut short = Reader::new(&page, 3, 2 + len, 7);
                    assert!(
                        short.leaf_key(0, 200).is_err(),
                        "{klen}/{vlen} key cut short"
                    );
                    let mut short = Reader::new(&page, 3, 2 + len, 7).sharing(share);
                    assert!(short.leaf(0, 200).is_err(), "{klen}/{vlen} cut short");
                }
                let mut small = Reader::new(&page, 3, 3 + len, 7);
                assert_eq!(small.leaf(0, 100).is_err(), klen > 100);
            }
        }
    }
}
