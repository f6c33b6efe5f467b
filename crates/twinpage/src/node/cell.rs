//! Cell encoding shared by the node formats.
//!
//! Leaf cell: `flags u8` (bit 0: overflow), `varint key_len`, `varint
//! value_len`, key, then the value (inline) or a u32 overflow head page.
//! Interior cell: `varint key_len`, key, `u32 child`. Varints are LEB128.
//! Every length is checked against the page before it is used.

use super::{Bytes, InteriorCell, LeafCell, Node, Value};
use crate::base::{Error, Pgno, Result};
use std::sync::Arc;

/// Bytes of a LEB128 varint.
pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
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

/// Encoded size of a leaf cell (without its offset entry).
pub(crate) fn leaf_len(c: &LeafCell) -> usize {
    let (vlen, body) = match &c.value {
        Value::Inline(v) => (v.len() as u64, v.len()),
        Value::Overflow { len, .. } => (*len, 4),
    };
    1 + varint_len(c.key.len() as u64) + varint_len(vlen) + c.key.len() + body
}

/// Encoded size of an interior cell (without its offset entry).
pub(crate) fn interior_len(c: &InteriorCell) -> usize {
    varint_len(c.key.len() as u64) + c.key.len() + 4
}

/// Write a leaf cell at `out[at..]` (the caller reserved [`leaf_len`]).
pub(crate) fn put_leaf(out: &mut [u8], at: usize, c: &LeafCell) {
    let (flag, vlen) = match &c.value {
        Value::Inline(v) => (0, v.len() as u64),
        Value::Overflow { len, .. } => (1, *len),
    };
    out[at] = flag;
    let mut p = put_varint(out, at + 1, c.key.len() as u64);
    p = put_varint(out, p, vlen);
    out[p..p + c.key.len()].copy_from_slice(&c.key);
    p += c.key.len();
    match &c.value {
        Value::Inline(v) => out[p..p + v.len()].copy_from_slice(v),
        Value::Overflow { head, .. } => out[p..p + 4].copy_from_slice(&head.to_be_bytes()),
    }
}

/// Write an interior cell at `out[at..]` (the caller reserved [`interior_len`]).
pub(crate) fn put_interior(out: &mut [u8], at: usize, c: &InteriorCell) {
    let mut p = put_varint(out, at, c.key.len() as u64);
    out[p..p + c.key.len()].copy_from_slice(&c.key);
    p += c.key.len();
    out[p..p + 4].copy_from_slice(&c.child.to_be_bytes());
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
pub(crate) fn node_cell_key(node: &Node, i: usize) -> &[u8] {
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

/// The page-type byte and rightmost child of `node`.
pub(crate) fn kind_of(node: &Node) -> (u8, Pgno) {
    match node {
        Node::Leaf(_) => (LEAF, 0),
        Node::Interior { right, .. } => (INTERIOR, *right),
    }
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

    /// Parse a leaf cell (cell number `i`, for messages).
    pub fn leaf(&mut self, i: usize, max_key: usize) -> Result<LeafCell> {
        let flags = self.u8()?;
        let klen = self.varint()?;
        let vlen = self.varint()?;
        if klen > max_key as u64 {
            return Err(self.err(format!("key length {klen} exceeds {max_key}")));
        }
        let key = self.owned(klen)?;
        let value = match flags {
            0 => Value::Inline(self.owned(vlen)?),
            1 => {
                let head = self.u32()?;
                if head == 0 {
                    return Err(self.err(format!("cell {i}: overflow head is page 0")));
                }
                Value::Overflow { len: vlen, head }
            }
            f => return Err(self.err(format!("cell {i}: unknown flags {f:#x}"))),
        };
        Ok(LeafCell { key, value })
    }

    /// Skip over a leaf cell without copying it; returns its key.
    pub fn leaf_key(&mut self, i: usize, max_key: usize) -> Result<&'a [u8]> {
        let flags = self.u8()?;
        let klen = self.varint()?;
        let vlen = self.varint()?;
        if klen > max_key as u64 {
            return Err(self.err(format!("key length {klen} exceeds {max_key}")));
        }
        let key = self.bytes(klen)?;
        match flags {
            0 => {
                self.bytes(vlen)?;
            }
            1 => {
                if self.u32()? == 0 {
                    return Err(self.err(format!("cell {i}: overflow head is page 0")));
                }
            }
            f => return Err(self.err(format!("cell {i}: unknown flags {f:#x}"))),
        }
        Ok(key)
    }

    /// Skip over an interior cell without copying it; returns its key.
    pub fn interior_key(&mut self, i: usize, max_key: usize) -> Result<&'a [u8]> {
        let klen = self.varint()?;
        if klen > max_key as u64 {
            return Err(self.err(format!("key length {klen} exceeds {max_key}")));
        }
        let key = self.bytes(klen)?;
        if self.u32()? == 0 {
            return Err(self.err(format!("cell {i}: child is page 0")));
        }
        Ok(key)
    }

    /// Parse an interior cell (cell number `i`, for messages).
    pub fn interior(&mut self, i: usize, max_key: usize) -> Result<InteriorCell> {
        let klen = self.varint()?;
        if klen > max_key as u64 {
            return Err(self.err(format!("key length {klen} exceeds {max_key}")));
        }
        let key = self.owned(klen)?;
        let child = self.u32()?;
        if child == 0 {
            return Err(self.err(format!("cell {i}: child is page 0")));
        }
        Ok(InteriorCell { key, child })
    }
}
