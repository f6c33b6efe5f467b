//! What finished write transactions leave for the next, so that a
//! steady state of small transactions allocates nothing: the emptied
//! collections of the last transaction, page buffers of replaced cache
//! entries, leaf vectors and node allocations of replaced nodes, and value
//! buffers by power-of-two size class. Everything here is taken back only
//! when nothing else holds it (`Arc::get_mut`).

use super::{zeroed_page, CachedPage, Dirty, Pager, WriteState};
use crate::base::pgmap::{PgnoMap, PgnoSet, REUSE_BUCKETS};
use crate::base::Pgno;
use crate::journal::PageImage;
use crate::node::bytes::INLINE;
use crate::node::{Bytes, LeafCell, LeafChange, Node, Value};
use std::sync::Arc;

/// What finished write transactions leave for the next: the emptied
/// collections of the last one, and buffers nobody else holds.
#[derive(Default)]
pub(super) struct Spare {
    txn: TxnScratch,
    buffers: Vec<Arc<[u8]>>,
    /// Emptied leaf vectors and node allocations of replaced nodes.
    leaves: Vec<Vec<LeafCell>>,
    shells: Vec<Arc<Node>>,
    /// Value buffers of replaced cells, by size class (`values[c]` holds
    /// buffers of `1 << c` bytes).
    values: Vec<Vec<Arc<[u8]>>>,
}

/// A write transaction's collections, emptied.
#[derive(Default)]
pub(super) struct TxnScratch {
    pub(super) dirty: PgnoMap<Dirty>,
    pub(super) spilled: PgnoSet,
    pub(super) allocated: PgnoSet,
    pub(super) freed: Vec<Pgno>,
    pub(super) pgnos: Vec<Pgno>,
    pub(super) pages: Vec<PageImage>,
    pub(super) changed: PgnoMap<Option<LeafChange>>,
}

/// Smallest value-buffer class: 64 bytes (shorter values are inline).
const MIN_VALUE_CLASS: u32 = 6;

/// The size class of a value buffer for `len` bytes on `page_size`
/// pages: a power of two below the page size (page images are not value
/// buffers), or `None`.
fn value_class(len: usize, page_size: usize) -> Option<usize> {
    let c = len
        .next_power_of_two()
        .trailing_zeros()
        .max(MIN_VALUE_CLASS) as usize;
    ((1usize << c) < page_size).then_some(c)
}

/// Page buffers kept for reuse at most.
const SPARE_BUFFERS: usize = 8;

/// Vectors larger than this (a bulk transaction's) are not kept.
const SPARE_CAPACITY: usize = 4096;

impl Pager {
    /// A page-sized buffer for the caller to overwrite whole (an encoder,
    /// a page copy, a read): a recycled one when there is one, so its
    /// bytes are whatever it held.
    pub(super) fn page_buffer(&self) -> Arc<[u8]> {
        let spare = self.spare.lock().buffers.pop();
        match spare {
            Some(mut b) => match Arc::get_mut(&mut b) {
                Some(_) => b,
                None => zeroed_page(self.db.page_size),
            },
            None => zeroed_page(self.db.page_size),
        }
    }

    /// Keep the page buffer of a cache entry that was replaced, if nothing
    /// else holds it (a decoded node may still point into it).
    pub(super) fn recycle(&self, old: CachedPage) {
        let CachedPage { raw, node, .. } = old;
        let mut sp = self.spare.lock();
        if let Some(mut node) = node {
            // The node's allocation and its leaf vector, if nothing else
            // holds them; the cells' own references go now.
            if let Some(n) = Arc::get_mut(&mut node) {
                if let Node::Leaf(cells) = n {
                    let mut v = std::mem::take(cells);
                    // The image the node was decoded from, which its
                    // unchanged values share (not `raw` once a commit
                    // replaced the page): free when the last cell goes.
                    let mut origin: Option<Arc<[u8]>> = None;
                    for c in v.drain(..) {
                        if let Value::Inline(b) = c.value {
                            if let Some(page) = self.keep_value(&mut sp, b) {
                                if !origin.as_ref().is_some_and(|o| Arc::ptr_eq(o, &page)) {
                                    if let Some(o) = origin.replace(page) {
                                        self.keep_page(&mut sp, o);
                                    }
                                }
                            }
                        }
                    }
                    if let Some(o) = origin {
                        self.keep_page(&mut sp, o);
                    }
                    if sp.leaves.len() < SPARE_BUFFERS {
                        sp.leaves.push(v);
                    }
                } else {
                    *n = Node::empty_leaf();
                }
                if sp.shells.len() < SPARE_BUFFERS {
                    sp.shells.push(node);
                }
            }
        }
        self.keep_page(&mut sp, raw);
    }

    /// Give back a page buffer taken with [`Pager::page_buffer`] and not
    /// used.
    pub(super) fn keep_buffer(&self, page: Arc<[u8]>) {
        self.keep_page(&mut self.spare.lock(), page);
    }

    /// Keep a page buffer if nothing else holds it.
    fn keep_page(&self, sp: &mut Spare, mut page: Arc<[u8]>) {
        if page.len() == self.db.page_size
            && Arc::get_mut(&mut page).is_some()
            && sp.buffers.len() < SPARE_BUFFERS
        {
            sp.buffers.push(page);
        }
    }

    /// A value the tree replaced or deleted: keep its buffer if nothing
    /// else holds it.
    pub(super) fn discard_value(&self, b: Bytes) {
        let mut sp = self.spare.lock();
        if let Some(page) = self.keep_value(&mut sp, b) {
            self.keep_page(&mut sp, page);
        }
    }

    /// The cells of the cached committed node of `pgno`, which a writer is
    /// about to replace, if the cache holds the only other reference to
    /// `node`: the cache keeps the page image without its node, and the
    /// node's allocation is kept for the next one. Otherwise `node` back.
    pub(super) fn take_cached_leaf(
        &self,
        pgno: Pgno,
        mut node: Arc<Node>,
    ) -> Result<Vec<LeafCell>, Arc<Node>> {
        {
            // Readers clone a cached node under the shard's read lock: with
            // the write lock held, the count cannot grow.
            let mut sh = self.cache.write(pgno);
            if let Some(p) = sh.cache.peek(pgno) {
                if Arc::strong_count(&node) == 2
                    && p.node.as_ref().is_some_and(|n| Arc::ptr_eq(n, &node))
                {
                    p.node = None;
                }
            }
        }
        let Some(Node::Leaf(cells)) = Arc::get_mut(&mut node) else {
            return Err(node);
        };
        let cells = std::mem::take(cells);
        let mut sp = self.spare.lock();
        if sp.shells.len() < SPARE_BUFFERS {
            sp.shells.push(node);
        }
        Ok(cells)
    }

    /// Keep the buffer behind a replaced cell's value if it is a value
    /// buffer and nothing else holds it. A page image it shares is handed
    /// back, for the caller to keep once its other cells are gone.
    fn keep_value(&self, sp: &mut Spare, b: Bytes) -> Option<Arc<[u8]>> {
        let mut buf = b.into_buffer()?;
        if buf.len() == self.db.page_size {
            return Some(buf);
        }
        let c = value_class(buf.len(), self.db.page_size)?;
        if buf.len() != 1 << c || Arc::get_mut(&mut buf).is_none() {
            return None;
        }
        if sp.values.len() <= c {
            sp.values.resize_with(c + 1, Vec::new);
        }
        if sp.values[c].len() < SPARE_BUFFERS {
            sp.values[c].push(buf);
        }
        None
    }

    /// `node` in a shared allocation: a recycled one when there is one.
    pub(super) fn node_arc(&self, node: Node) -> Arc<Node> {
        let shell = self.spare.lock().shells.pop();
        match shell {
            Some(mut a) => match Arc::get_mut(&mut a) {
                Some(slot) => {
                    *slot = node;
                    a
                }
                None => Arc::new(node),
            },
            None => Arc::new(node),
        }
    }

    /// Take back the collections of a finished write transaction.
    pub(super) fn keep_spare(&self, st: &mut WriteState) {
        let sp = &mut self.spare.lock().txn;
        macro_rules! take {
            ($field:ident, $limit:expr) => {
                if st.$field.capacity() <= $limit {
                    st.$field.clear();
                    sp.$field = std::mem::take(&mut st.$field);
                }
            };
        }
        // Hash tables clear in time proportional to their buckets: a small
        // transaction must not inherit a bulk one's (pgmap::reset_map).
        take!(dirty, REUSE_BUCKETS);
        take!(spilled, REUSE_BUCKETS);
        take!(allocated, REUSE_BUCKETS);
        take!(freed, SPARE_CAPACITY);
        take!(pgnos, SPARE_CAPACITY);
        take!(pages, SPARE_CAPACITY);
        take!(changed, REUSE_BUCKETS);
    }

    /// `value` in a recycled value buffer of its size class (a new one
    /// when none is spare); short values stay inline.
    pub(super) fn value_bytes(&self, value: &[u8]) -> Bytes {
        let ps = self.db.page_size;
        let Some(c) = value_class(value.len(), ps).filter(|_| value.len() > INLINE) else {
            return Bytes::from(value);
        };
        let spare = self.spare.lock().values.get_mut(c).and_then(Vec::pop);
        let mut buf = match spare {
            Some(b) => b,
            None => zeroed_page(1 << c),
        };
        match Arc::get_mut(&mut buf) {
            Some(bytes) => bytes[..value.len()].copy_from_slice(value),
            None => return Bytes::from(value),
        }
        Bytes::in_buffer(buf, value.len()).unwrap_or_else(|| Bytes::from(value))
    }

    /// An empty leaf vector, recycled when one is spare.
    pub(super) fn leaf_buffer(&self) -> Vec<LeafCell> {
        self.spare.lock().leaves.pop().unwrap_or_default()
    }

    /// The collections the last write transaction left, emptied.
    pub(super) fn txn_scratch(&self) -> TxnScratch {
        std::mem::take(&mut self.spare.lock().txn)
    }
}
