//! [`Bytes`]: the bytes of a key or an inline value in the logical view.
//! A decoded cell points into the page image it came from (one shared
//! buffer for the whole node: decoding a page does not allocate per cell);
//! a cell built by the tree owns a buffer of its own.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// An immutable byte string, shared or owned; compares as `[u8]`.
#[derive(Clone)]
pub struct Bytes {
    buf: Arc<[u8]>,
    start: usize,
    end: usize,
}

impl Bytes {
    /// `buf[start..end]`, sharing `buf`. `None` if the range is not inside
    /// `buf`.
    pub fn shared(buf: &Arc<[u8]>, start: usize, end: usize) -> Option<Bytes> {
        (start <= end && end <= buf.len()).then(|| Bytes {
            buf: buf.clone(),
            start,
            end,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

impl Default for Bytes {
    fn default() -> Self {
        Bytes::from(&[][..])
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
        let end = v.len();
        Bytes {
            buf: Arc::from(v),
            start: 0,
            end,
        }
    }
}

impl From<&[u8]> for Bytes {
    fn from(v: &[u8]) -> Self {
        Bytes {
            buf: Arc::from(v),
            start: 0,
            end: v.len(),
        }
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
}
