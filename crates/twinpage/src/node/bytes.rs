//! [`Bytes`]: the bytes of a key or an inline value in the logical view.
//! Short strings (most keys) live in the value itself: no allocation, and
//! no reference count to touch when a node is decoded, copied or dropped.
//! Longer ones point into the page image they came from (one shared buffer
//! for the whole node: decoding a page does not allocate per cell); a long
//! string built by the tree owns a buffer of its own. A key too long for a
//! cell also names the overflow chain that stores its tail ([`KeyChain`]):
//! the tree moves such a key between nodes with its chain, and frees the
//! chain with the cell that owns it.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use crate::base::Pgno;

/// Longest string kept inline (the value stays 32 bytes).
pub const INLINE: usize = 30;

/// Where an overflowing key is stored: its first `local` bytes in the
/// cell, the other `total - local` in the overflow chain starting at
/// `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyChain {
    /// First page of the chain.
    pub head: Pgno,
    /// Bytes of the key kept in the cell.
    pub local: usize,
    /// Length of the whole key.
    pub total: usize,
}

impl KeyChain {
    /// Bytes of the key in the chain.
    pub fn tail_len(&self) -> u64 {
        (self.total - self.local) as u64
    }
}

/// An immutable byte string, inline, shared or owned; compares as `[u8]`.
#[derive(Clone)]
pub struct Bytes(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        data: [u8; INLINE],
    },
    /// A range of a page image (pages are far below 4 GiB).
    Slice {
        buf: Arc<[u8]>,
        start: u32,
        end: u32,
    },
    /// A buffer of its own.
    Whole(Arc<[u8]>),
    /// An overflowing key: `buf` holds the whole key (`total` bytes), or,
    /// as a format decodes it (a *stub*), only the `local` bytes the cell
    /// stores until the pager reads the chain's tail.
    Chained {
        buf: Arc<[u8]>,
        head: Pgno,
        local: u32,
        total: u32,
    },
}

impl Bytes {
    /// `buf[start..end]`, sharing `buf` (or copied inline when short).
    /// `None` if the range is not inside `buf`.
    #[inline]
    pub fn shared(buf: &Arc<[u8]>, start: usize, end: usize) -> Option<Bytes> {
        if start > end || end > buf.len() {
            return None;
        }
        if end - start <= INLINE {
            return Some(Bytes::inline_at(buf, start, end));
        }
        Some(Bytes(Repr::Slice {
            buf: buf.clone(),
            start: u32::try_from(start).ok()?,
            end: u32::try_from(end).ok()?,
        }))
    }

    /// A copy of `buf[start..end]`, which must be in bounds and at most
    /// [`INLINE`] bytes: a fixed-size copy of the window at `start` when
    /// `buf` holds one (the bytes past `end` are never read back).
    #[inline]
    pub(crate) fn inline_at(buf: &[u8], start: usize, end: usize) -> Bytes {
        match buf.get(start..start + INLINE) {
            Some(window) => {
                let mut data = [0u8; INLINE];
                data.copy_from_slice(window);
                Bytes(Repr::Inline {
                    len: (end - start) as u8,
                    data,
                })
            }
            None => Bytes::inline(&buf[start..end]),
        }
    }

    /// A copy of `v`, which must be at most [`INLINE`] bytes.
    fn inline(v: &[u8]) -> Bytes {
        let mut data = [0u8; INLINE];
        data[..v.len()].copy_from_slice(v);
        Bytes(Repr::Inline {
            len: v.len() as u8,
            data,
        })
    }

    /// The first `len` bytes of `buf`, a buffer the caller filled and may
    /// take back with [`Bytes::into_buffer`] (a pool of value buffers).
    /// `None` if `buf` is shorter than `len` or longer than 4 GiB.
    pub fn in_buffer(buf: Arc<[u8]>, len: usize) -> Option<Bytes> {
        if len > buf.len() {
            return None;
        }
        let end = u32::try_from(len).ok()?;
        u32::try_from(buf.len()).ok()?;
        Some(Bytes(Repr::Slice { buf, start: 0, end }))
    }

    /// The buffer behind a string that is not inline (a value buffer the
    /// pager may reuse; never an overflowing key's).
    pub fn into_buffer(self) -> Option<Arc<[u8]>> {
        match self.0 {
            Repr::Inline { .. } | Repr::Chained { .. } => None,
            Repr::Slice { buf, .. } | Repr::Whole(buf) => Some(buf),
        }
    }

    /// The whole key `key` stored as its first `local` bytes in the cell
    /// and the rest in the chain at `head`. `None` if `local` is not below
    /// the key's length or the key is 4 GiB or longer.
    pub fn chained(key: Arc<[u8]>, head: Pgno, local: usize) -> Option<Bytes> {
        let total = u32::try_from(key.len()).ok()?;
        if local >= key.len() {
            return None;
        }
        Some(Bytes(Repr::Chained {
            buf: key,
            head,
            local: local as u32,
            total,
        }))
    }

    /// A *stub*: what a format decodes from a cell whose key overflows,
    /// the `local` bytes in the cell, before the tail is read from the
    /// chain at `head` ([`crate::node::complete_keys`]). `None` unless
    /// `local.len() < total < 4 GiB`.
    pub fn chain_stub(local: &[u8], head: Pgno, total: u64) -> Option<Bytes> {
        let total = u32::try_from(total).ok()?;
        if local.len() >= total as usize {
            return None;
        }
        Some(Bytes(Repr::Chained {
            buf: Arc::from(local),
            head,
            local: local.len() as u32,
            total,
        }))
    }

    /// The overflow chain of a key too long for its cell.
    pub fn chain(&self) -> Option<KeyChain> {
        match &self.0 {
            Repr::Chained {
                head, local, total, ..
            } => Some(KeyChain {
                head: *head,
                local: *local as usize,
                total: *total as usize,
            }),
            _ => None,
        }
    }

    /// A stub whose tail has not been read yet (see [`Bytes::chain_stub`]).
    pub fn is_stub(&self) -> bool {
        matches!(&self.0, Repr::Chained { buf, total, .. } if buf.len() != *total as usize)
    }

    /// Number of bytes, from the representation alone: formats size every
    /// cell of a node with it, and building the slice costs a bounds check.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline { len, .. } => usize::from(*len),
            // The constructors keep `start <= end <= buf.len()`.
            Repr::Slice { start, end, .. } => (*end - *start) as usize,
            Repr::Whole(buf) | Repr::Chained { buf, .. } => buf.len(),
        }
    }

    /// No bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, data } => &data[..usize::from(*len)],
            Repr::Slice { buf, start, end } => &buf[*start as usize..*end as usize],
            Repr::Whole(buf) | Repr::Chained { buf, .. } => buf,
        }
    }
}

impl Default for Bytes {
    fn default() -> Self {
        Bytes::inline(&[])
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for Bytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        if v.len() <= INLINE {
            return Bytes::inline(&v);
        }
        Bytes(Repr::Whole(Arc::from(v)))
    }
}

impl From<&[u8]> for Bytes {
    fn from(v: &[u8]) -> Self {
        if v.len() <= INLINE {
            return Bytes::inline(v);
        }
        Bytes(Repr::Whole(Arc::from(v)))
    }
}

impl<const N: usize> From<&[u8; N]> for Bytes {
    fn from(v: &[u8; N]) -> Self {
        Bytes::from(&v[..])
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Bytes {}

impl PartialEq<[u8]> for Bytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<u8>> for Bytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialOrd for Bytes {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bytes {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Hash for Bytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_and_owned_compare_as_bytes() {
        let page: Arc<[u8]> = Arc::from(&b"..hello.."[..]);
        let a = Bytes::shared(&page, 2, 7).unwrap();
        assert_eq!(a, Bytes::from(&b"hello"[..]));
        assert_eq!(&*a, b"hello");
        assert!(Bytes::shared(&page, 7, 2).is_none());
        assert!(Bytes::shared(&page, 2, 10).is_none());
        assert!(a.as_slice() < &b"help"[..]);
        assert_eq!(Bytes::default().len(), 0);
    }

    #[test]
    fn short_strings_are_inline_and_long_ones_shared() {
        assert_eq!(std::mem::size_of::<Bytes>(), 32);
        let page: Arc<[u8]> = Arc::from((0..200u8).collect::<Vec<_>>());
        let short = Bytes::shared(&page, 10, 10 + INLINE).unwrap();
        let long = Bytes::shared(&page, 10, 11 + INLINE).unwrap();
        // Only the long one holds a reference to the page.
        assert_eq!(Arc::strong_count(&page), 2);
        assert_eq!(&*short, &page[10..10 + INLINE]);
        assert_eq!(&*long, &page[10..11 + INLINE]);
        assert_eq!(Bytes::from(vec![7u8; 100]).len(), 100);
        assert_eq!(Bytes::from(&[1u8, 2][..]), Bytes::from(vec![1u8, 2]));
        drop(long);
        assert_eq!(Arc::strong_count(&page), 1);
    }

    #[test]
    fn chained_keys_carry_their_chain() {
        let key: Arc<[u8]> = Arc::from(vec![9u8; 100]);
        let k = Bytes::chained(key.clone(), 7, 40).unwrap();
        assert_eq!(
            k.chain(),
            Some(KeyChain {
                head: 7,
                local: 40,
                total: 100
            })
        );
        assert!(!k.is_stub());
        assert_eq!(&*k, &key[..]);
        let stub = Bytes::chain_stub(&key[..40], 7, 100).unwrap();
        assert!(stub.is_stub());
        assert_eq!(stub.len(), 40);
        assert_eq!(stub.chain(), k.chain());
        assert!(Bytes::chained(key.clone(), 7, 100).is_none());
        assert!(Bytes::chain_stub(&key[..40], 7, 40).is_none());
        assert!(Bytes::from(&key[..]).chain().is_none());
        assert!(k.into_buffer().is_none());
    }
}
