//! The plain slotted-page format used by the SQLite-style modes.
//!
//! Layout (big-endian integers), documented byte by byte in ARCHITECTURE.md:
//!
//! ```text
//! 0      u8   page type: 0x0D leaf, 0x05 interior
//! 1      u8   reserved (0)
//! 2..4   u16  cell count n
//! 4..8   u32  offset of the first cell byte (cells are packed at the end)
//! 8..12  u32  interior: rightmost child; leaf: 0
//! 12..16 u32  reserved (0)
//! 16..   u16  n cell offsets, in key order
//! ```
//!
//! Leaf cell: `flags u8` (bit 0: overflow), `varint key_len`, `varint
//! value_len`, key, then the value (inline) or a u32 overflow head page.
//! Interior cell: `varint key_len`, key, `u32 child`.

use super::{DecodeCtx, EncodeCtx, InteriorCell, LeafCell, Node, NodeFormat, Value};
use crate::error::{Error, Pgno, Result};

/// Page-type byte of a leaf.
pub const LEAF: u8 = 0x0D;
/// Page-type byte of an interior node.
pub const INTERIOR: u8 = 0x05;
/// Size of the page header.
pub const HEADER: usize = 16;

/// The plain slotted format.
#[derive(Debug, Default, Clone, Copy)]
pub struct SlottedFormat;

fn varint_len(mut v: u64) -> usize {
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

/// Bounds-checked reader over one page.
struct Reader<'a> {
    page: &'a [u8],
    pos: usize,
    end: usize,
    pgno: Pgno,
}

impl<'a> Reader<'a> {
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
        if n > self.end - self.pos {
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
}

fn be_u16(p: &[u8], at: usize) -> usize {
    u16::from_be_bytes([p[at], p[at + 1]]) as usize
}

fn be_u32(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

impl NodeFormat for SlottedFormat {
    fn name(&self) -> &'static str {
        "slotted"
    }

    fn decode(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<Node> {
        let corrupt = |what: String| Error::corrupt("database", pgno, what);
        if page.len() != ctx.page_size || page.len() < HEADER {
            return Err(corrupt(format!("page buffer of {} bytes", page.len())));
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
        let max_key = self.max_key_len(page.len());
        let mut prev: Option<&[u8]> = None;
        let mut leaf = Vec::new();
        let mut interior = Vec::new();
        for i in 0..n {
            let off = be_u16(page, HEADER + 2 * i);
            if off < content || off >= page.len() {
                return Err(corrupt(format!(
                    "cell {i} offset {off} outside the cell area"
                )));
            }
            let mut r = Reader {
                page,
                pos: off,
                end: page.len(),
                pgno,
            };
            let key: &[u8];
            if kind == LEAF {
                let flags = r.u8()?;
                let klen = r.varint()?;
                let vlen = r.varint()?;
                if klen as usize > max_key {
                    return Err(corrupt(format!("key length {klen} exceeds {max_key}")));
                }
                key = r.bytes(klen)?;
                let value = match flags {
                    0 => Value::Inline(r.bytes(vlen)?.to_vec()),
                    1 => {
                        let head = r.u32()?;
                        if head == 0 {
                            return Err(corrupt(format!("cell {i}: overflow head is page 0")));
                        }
                        Value::Overflow { len: vlen, head }
                    }
                    f => return Err(corrupt(format!("cell {i}: unknown flags {f:#x}"))),
                };
                leaf.push(LeafCell {
                    key: key.to_vec(),
                    value,
                });
            } else {
                let klen = r.varint()?;
                if klen as usize > max_key {
                    return Err(corrupt(format!("key length {klen} exceeds {max_key}")));
                }
                key = r.bytes(klen)?;
                let child = r.u32()?;
                if child == 0 {
                    return Err(corrupt(format!("cell {i}: child is page 0")));
                }
                interior.push(InteriorCell {
                    key: key.to_vec(),
                    child,
                });
            }
            if let Some(p) = prev {
                if p >= key {
                    return Err(corrupt(format!("cell {i}: keys out of order")));
                }
            }
            prev = Some(key);
        }
        if kind == LEAF {
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

    fn fits(&self, node: &Node, _base: Option<&[u8]>, ctx: &EncodeCtx) -> bool {
        let used: usize = match node {
            Node::Leaf(c) => c.iter().map(|c| self.leaf_cell_size(c)).sum(),
            Node::Interior { cells, .. } => cells.iter().map(|c| self.interior_cell_size(c)).sum(),
        };
        used <= self.capacity(ctx.page_size)
    }

    fn leaf_cell_size(&self, c: &LeafCell) -> usize {
        let (vlen, body) = match &c.value {
            Value::Inline(v) => (v.len() as u64, v.len()),
            Value::Overflow { len, .. } => (*len, 4),
        };
        2 + 1 + varint_len(c.key.len() as u64) + varint_len(vlen) + c.key.len() + body
    }

    fn interior_cell_size(&self, c: &InteriorCell) -> usize {
        2 + varint_len(c.key.len() as u64) + c.key.len() + 4
    }

    fn capacity(&self, page_size: usize) -> usize {
        page_size - HEADER
    }

    fn encode(
        &self,
        pgno: Pgno,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        out: &mut [u8],
    ) -> Result<()> {
        if !self.fits(node, base, ctx) || out.len() != ctx.page_size {
            return Err(Error::InvalidArgument(format!(
                "node for page {pgno} does not fit a {}-byte page",
                ctx.page_size
            )));
        }
        out.fill(0);
        let mut end = out.len();
        let n = node.len();
        match node {
            Node::Leaf(cells) => {
                out[0] = LEAF;
                for (i, c) in cells.iter().enumerate() {
                    let size = self.leaf_cell_size(c) - 2;
                    end -= size;
                    out[HEADER + 2 * i..HEADER + 2 * i + 2]
                        .copy_from_slice(&(end as u16).to_be_bytes());
                    let mut p = end;
                    let (flag, vlen) = match &c.value {
                        Value::Inline(v) => (0, v.len() as u64),
                        Value::Overflow { len, .. } => (1, *len),
                    };
                    out[p] = flag;
                    p = put_varint(out, p + 1, c.key.len() as u64);
                    p = put_varint(out, p, vlen);
                    out[p..p + c.key.len()].copy_from_slice(&c.key);
                    p += c.key.len();
                    match &c.value {
                        Value::Inline(v) => out[p..p + v.len()].copy_from_slice(v),
                        Value::Overflow { head, .. } => {
                            out[p..p + 4].copy_from_slice(&head.to_be_bytes())
                        }
                    }
                }
            }
            Node::Interior { cells, right } => {
                out[0] = INTERIOR;
                out[8..12].copy_from_slice(&right.to_be_bytes());
                for (i, c) in cells.iter().enumerate() {
                    let size = self.interior_cell_size(c) - 2;
                    end -= size;
                    out[HEADER + 2 * i..HEADER + 2 * i + 2]
                        .copy_from_slice(&(end as u16).to_be_bytes());
                    let mut p = put_varint(out, end, c.key.len() as u64);
                    out[p..p + c.key.len()].copy_from_slice(&c.key);
                    p += c.key.len();
                    out[p..p + 4].copy_from_slice(&c.child.to_be_bytes());
                }
            }
        }
        out[2..4].copy_from_slice(&(n as u16).to_be_bytes());
        out[4..8].copy_from_slice(&(end as u32).to_be_bytes());
        Ok(())
    }

    fn max_key_len(&self, page_size: usize) -> usize {
        // An overflow leaf cell is 1 + 3 + 10 + key + 4 bytes (+2 pointer);
        // keep every cell within a quarter page so a split always works.
        self.max_inline_cell(page_size) - 20
    }

    fn max_inline_cell(&self, page_size: usize) -> usize {
        self.capacity(page_size) / 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_leaf_and_interior() {
        let f = SlottedFormat;
        let ps = 512;
        let ectx = EncodeCtx {
            page_size: ps,
            tid: 1,
        };
        let dctx = DecodeCtx {
            page_size: ps,
            committed_tid: 1,
        };
        let leaf = Node::Leaf(vec![
            LeafCell {
                key: b"a".to_vec(),
                value: Value::Inline(vec![]),
            },
            LeafCell {
                key: b"b".to_vec(),
                value: Value::Overflow { len: 9000, head: 7 },
            },
        ]);
        let mut page = vec![0u8; ps];
        f.encode(3, &leaf, None, &ectx, &mut page).unwrap();
        assert_eq!(f.decode(3, &page, &dctx).unwrap(), leaf);
        let int = Node::Interior {
            cells: vec![InteriorCell {
                key: b"m".to_vec(),
                child: 4,
            }],
            right: 5,
        };
        f.encode(3, &int, None, &ectx, &mut page).unwrap();
        assert_eq!(f.decode(3, &page, &dctx).unwrap(), int);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let f = SlottedFormat;
        let dctx = DecodeCtx {
            page_size: 512,
            committed_tid: 1,
        };
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
