//! Node formats: how a B+tree node is laid out on a page.
//!
//! The tree algorithms ([`crate::btree`]) never touch page bytes. They work
//! on the *logical view* of a node, [`Node`]: sorted cells, decoded when a
//! page is loaded and encoded again when a dirty page is written. A
//! [`NodeFormat`] converts between the two, and may apply a one-row change
//! to a page it wrote without the logical view ([`NodeFormat::patch_leaf`]). This is the seam later modes
//! use to change the on-page layout (DHL's two slot headers, IPS's
//! append-only slots with two numSlots, LS-MVBT's versioned cells) without
//! touching the tree: see ARCHITECTURE.md.

pub(crate) mod bytes;
pub(crate) mod cell;
#[cfg(test)]
pub(crate) mod conformance;
pub mod dhl;
pub mod inpage;
pub mod ips;
pub mod mvbt;
pub mod slotted;

pub use bytes::{Bytes, KeyChain};
pub use cell::{complete_keys, overflow_key_local};
pub use dhl::DhlFormat;
pub use inpage::InPageFormat;
pub use ips::IpsFormat;
pub use mvbt::MvbtFormat;
pub use slotted::{SlottedFormat, SlottedMetaFormat, META_TRAILER};

use crate::base::{KeyOrder, Pgno, Result};
use std::sync::Arc;

/// A value as stored in a leaf cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Stored in the cell.
    Inline(Bytes),
    /// Stored in an overflow page chain starting at `head`.
    Overflow {
        /// Total value length in bytes.
        len: u64,
        /// First page of the chain.
        head: Pgno,
    },
}

/// A key/value cell of a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafCell {
    /// The key.
    pub key: Bytes,
    /// The value or a reference to its overflow chain.
    pub value: Value,
}

/// A separator cell of an interior node: `child` holds the keys that are
/// smaller than `key` (and not smaller than the previous cell's key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InteriorCell {
    /// Separator key.
    pub key: Bytes,
    /// Child page.
    pub child: Pgno,
}

/// The logical view of a node: what the tree algorithms see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A leaf: cells sorted by key.
    Leaf(Vec<LeafCell>),
    /// An interior node: cells sorted by key, plus the rightmost child,
    /// which holds every key not smaller than the last separator.
    Interior {
        /// Separators with their left children.
        cells: Vec<InteriorCell>,
        /// Rightmost child.
        right: Pgno,
    },
}

impl Node {
    /// An empty leaf.
    pub fn empty_leaf() -> Node {
        Node::Leaf(Vec::new())
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        match self {
            Node::Leaf(c) => c.len(),
            Node::Interior { cells, .. } => cells.len(),
        }
    }

    /// True when the node holds no cells.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True for leaves.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Node::Leaf(_))
    }

    /// All child pages of an interior node, left to right.
    pub fn children(&self) -> Vec<Pgno> {
        match self {
            Node::Leaf(_) => Vec::new(),
            Node::Interior { cells, right } => cells
                .iter()
                .map(|c| c.child)
                .chain(std::iter::once(*right))
                .collect(),
        }
    }
}

/// Context a format needs to decode a page: which writes are visible, and
/// the key order of the table the page belongs to.
#[derive(Debug, Clone, Copy)]
pub struct DecodeCtx<'a> {
    /// Page size in bytes.
    pub page_size: usize,
    /// TID of the last committed transaction (the FCC). In-page formats
    /// hide slot headers written by later, uncommitted transactions.
    pub committed_tid: u64,
    /// Verify page checksums (the database was created with them).
    pub checksums: bool,
    /// The key order of the page's table: a format validates that the
    /// cells it decodes ascend in it, and a format whose slots are
    /// unsorted on the page sorts them with it.
    pub order: &'a dyn KeyOrder,
}

/// Context a format needs to encode a page.
#[derive(Debug, Clone, Copy)]
pub struct EncodeCtx {
    /// Page size in bytes.
    pub page_size: usize,
    /// TID of the transaction writing the page (FCC + 1).
    pub tid: u64,
    /// Write page checksums (the database was created with them).
    pub checksums: bool,
    /// The oldest version anyone may still read: the snapshot the writer
    /// started from, or an older open reader's. A format that keeps old
    /// versions inside the page may drop those that ended at or before it
    /// (lazy garbage collection, \[LSM\] §5.1); the others ignore it.
    pub horizon: u64,
    /// The base image handed with this context was verified since it was
    /// read (decoded once, or written by this process): a format that
    /// writes a new version beside the committed one need not check the
    /// committed version's checksum again. False unless the pager knows.
    pub base_verified: bool,
    /// How the node differs from the base's committed version, when it is
    /// by one change (a leaf's cell, an interior node's moved, split or
    /// dropped child): a hint from the pager, which knows when the transaction has
    /// made no other change to the page. A format may then pair the other
    /// cells with the committed ones by position.
    pub leaf_change: Option<LeafChange>,
}

/// A one-row change written straight onto a leaf's page
/// ([`NodeFormat::patch_leaf`]).
#[derive(Debug, Clone, Copy)]
pub enum LeafPatch<'a> {
    /// Put an inline value under the key: over the old value if the key
    /// is there (a value of the same size), as a new cell if not.
    Put(&'a [u8]),
    /// Remove the key's cell, if at least `keep` bytes of cells (each
    /// with its slot, as [`NodeFormat::leaf_cell_size`] counts them) and
    /// one cell stay on the page: the tree's underflow bound, below which
    /// it merges or redistributes.
    Delete {
        /// Bytes of cells that must remain.
        keep: usize,
    },
}

/// What [`NodeFormat::patch_leaf`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patched {
    /// `out` holds the changed page; `existed`: the key was there.
    Written {
        /// The key was in the leaf.
        existed: bool,
    },
    /// The key to delete is not in the leaf: nothing to write.
    Absent,
    /// The put does not fit in the page, and the full layout of the
    /// changed node would refuse it too (nothing written): the caller
    /// need not lay the node out to learn that it splits.
    Full,
}

/// One change to a node (see [`EncodeCtx::leaf_change`]): the first three
/// to a leaf, the last three to an interior node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafChange {
    /// Cell `i` has a new value (same key).
    Value(usize),
    /// Cell `i` is new; the others are the committed ones, in order.
    Inserted(usize),
    /// The committed cell `i` is gone; the others remain, in order.
    Removed(usize),
    /// Interior: the child of slot `i` moved (the right child when `i` is
    /// the cell count); keys and the other children are the committed
    /// ones.
    Child(usize),
    /// Interior: a child split. Cell `i` is new (the left half and its
    /// separator), and the child of slot `i + 1` moved (the right child
    /// when `i + 1` is the cell count); the other cells are the committed
    /// ones, in order.
    Split(usize),
    /// Interior: the committed cell `i` (a separator and its child, never
    /// the right child) is gone, its child emptied and dropped, or merged
    /// into the next child (whose page took its cells); the other cells
    /// and the right child are the committed ones, in order.
    Dropped(usize),
}

impl LeafChange {
    /// The committed cell that cell `j` of the new leaf is, for a node of
    /// `n` cells over `base_n` committed ones (`None`: a new cell, or a
    /// change that does not fit those counts, or an interior change). The
    /// changed cell of [`LeafChange::Value`] maps to its old self: the
    /// caller compares it.
    pub fn base_index(self, j: usize, n: usize, base_n: usize) -> Option<usize> {
        if !self.fits_counts(n, base_n) {
            return None;
        }
        match self {
            LeafChange::Value(_) => Some(j),
            LeafChange::Inserted(c) => match j.cmp(&c) {
                std::cmp::Ordering::Less => Some(j),
                std::cmp::Ordering::Equal => None,
                std::cmp::Ordering::Greater => Some(j - 1),
            },
            LeafChange::Removed(c) => Some(if j < c { j } else { j + 1 }),
            LeafChange::Child(_) | LeafChange::Split(_) | LeafChange::Dropped(_) => None,
        }
    }

    /// The inverse of [`LeafChange::base_index`]: the cell of the new leaf
    /// that committed cell `b` is (`None`: the cell replaced or removed).
    /// The counts must fit ([`LeafChange::fits_counts`]).
    pub fn node_index(self, b: usize) -> Option<usize> {
        match self {
            LeafChange::Value(c) | LeafChange::Removed(c) if b == c => None,
            LeafChange::Inserted(c) if b >= c => Some(b + 1),
            LeafChange::Removed(c) if b > c => Some(b - 1),
            LeafChange::Child(_) | LeafChange::Split(_) | LeafChange::Dropped(_) => None,
            _ => Some(b),
        }
    }

    /// Whether the counts fit a leaf change (`n` new cells, `base_n`
    /// committed); false for an interior change.
    pub fn fits_counts(self, n: usize, base_n: usize) -> bool {
        match self {
            LeafChange::Value(c) => c < n && base_n == n,
            LeafChange::Inserted(c) => c < n && base_n + 1 == n,
            LeafChange::Removed(c) => c < base_n && base_n == n + 1,
            LeafChange::Child(_) | LeafChange::Split(_) | LeafChange::Dropped(_) => false,
        }
    }

    /// Whether the counts fit an interior change (`n` new cells, `base_n`
    /// committed); false for a leaf change.
    pub fn fits_interior(self, n: usize, base_n: usize) -> bool {
        match self {
            LeafChange::Child(c) => c <= n && base_n == n,
            LeafChange::Split(c) => c < n && base_n + 1 == n,
            LeafChange::Dropped(c) => c < base_n && base_n == n + 1,
            _ => false,
        }
    }
}

impl EncodeCtx {
    /// The context of writer `tid` with no reader older than its snapshot
    /// (`horizon = tid - 1`).
    pub fn new(page_size: usize, tid: u64, checksums: bool) -> Self {
        EncodeCtx {
            page_size,
            tid,
            checksums,
            horizon: tid.saturating_sub(1),
            base_verified: false,
            leaf_change: None,
        }
    }
}

/// Converts between page bytes and the logical view.
pub trait NodeFormat: Send + Sync {
    /// Short name, recorded in documentation and diagnostics.
    fn name(&self) -> &'static str;

    /// Decode a page. Must validate everything it reads: damaged input
    /// gives a corruption error naming `pgno`, never a panic.
    fn decode(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<Node>;

    /// [`NodeFormat::decode`] of a page held in a shared buffer: a format
    /// may make the node's keys and values point into `page` instead of
    /// copying them (one buffer per node, not one allocation per cell).
    fn decode_shared(&self, pgno: Pgno, page: &Arc<[u8]>, ctx: &DecodeCtx) -> Result<Node> {
        self.decode(pgno, page, ctx)
    }

    /// Whether `node` fits on one page when written over `base` (the
    /// page's committed image, if any). With `base = None` (a page the
    /// transaction allocated) this is the plain capacity test. Formats
    /// that keep the committed version inside the page may answer no for
    /// a node that would fit a fresh page; the tree then splits or moves
    /// the node. Every format must accept an interior node without cells
    /// over any base (the tree's last resort for the root, which never
    /// moves).
    fn fits(&self, node: &Node, base: Option<&[u8]>, ctx: &EncodeCtx) -> bool;

    /// Encoded size of a cell, used by the tree to choose split points.
    fn leaf_cell_size(&self, cell: &LeafCell) -> usize;

    /// Encoded size of an interior cell.
    fn interior_cell_size(&self, cell: &InteriorCell) -> usize;

    /// Bytes available for cells on an empty page.
    fn capacity(&self, page_size: usize) -> usize;

    /// Write `node` into `out` (one page), given the page's committed
    /// image `base`. Fails only if the node does not fit.
    fn encode(
        &self,
        pgno: Pgno,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        out: &mut [u8],
    ) -> Result<()>;

    /// [`NodeFormat::fits`] and [`NodeFormat::encode`] in one step:
    /// `Ok(false)` (with `out` unspecified) if the node does not fit. A
    /// format whose placement over `base` is costly to work out overrides
    /// it to do that work once.
    fn encode_if_fits(
        &self,
        pgno: Pgno,
        node: &Node,
        base: Option<&[u8]>,
        ctx: &EncodeCtx,
        out: &mut [u8],
    ) -> Result<bool> {
        if !self.fits(node, base, ctx) {
            return Ok(false);
        }
        self.encode(pgno, node, base, ctx, out)?;
        Ok(true)
    }

    /// Encode `node` when it is the page's committed content `base`
    /// (which this format wrote, and the caller verified since it was
    /// read: a patch may not seal damage it never checked) with one leaf
    /// change (`change`: a value replaced under the same key, a cell
    /// inserted or one removed): a format may patch a copy of `base`
    /// instead of encoding every cell.
    /// `Ok(false)`, with `out` unspecified, declines (the caller encodes in
    /// full); the image must be one [`decode`] reads back as `node`.
    ///
    /// [`decode`]: NodeFormat::decode
    fn encode_changed(
        &self,
        pgno: Pgno,
        node: &Node,
        base: &[u8],
        change: LeafChange,
        ctx: &EncodeCtx,
        out: &mut [u8],
    ) -> Result<bool> {
        let _ = (pgno, node, base, change, ctx, out);
        Ok(false)
    }

    /// Whether [`NodeFormat::patch_leaf`] may take a patch of this kind
    /// (a cheap test before the caller fetches the page). The default:
    /// none.
    fn patches_leaf(&self, patch: &LeafPatch<'_>) -> bool {
        let _ = patch;
        false
    }

    /// Write into `out` the leaf `base` (the page's committed image, which
    /// this format wrote) changed by `patch`, without decoding the node:
    /// the key is found by a search of the page in `order`, and the page
    /// is patched. `Ok(None)`, with `out` unspecified, declines (the cell
    /// or the page is not one the format patches, the change does not fit
    /// or would leave the leaf below [`LeafPatch::Delete`]'s `keep`): the
    /// caller goes through the logical view. `Ok(Some(Patched::Full))`,
    /// with `out` unspecified: the put does not fit, and the format's
    /// layout of the changed node would refuse it too. A base not verified
    /// since it was read (`ctx.base_verified`) is verified first, or
    /// declined: a patch may not seal damage it never checked, nor report
    /// on it. The default declines.
    #[allow(clippy::too_many_arguments)]
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
        let _ = (pgno, base, key, patch, order, ctx, out);
        Ok(None)
    }

    /// Longest key a cell stores whole at this page size. A longer key
    /// *overflows*: the tree stores its first [`overflow_key_local`] bytes
    /// in the cell and the rest in an overflow chain ([`Bytes::chained`]), and
    /// the format encodes it through `node::cell` (the format's decode
    /// returns it as a stub that the pager completes, [`complete_keys`]).
    fn max_key_len(&self, page_size: usize) -> usize;

    /// Whether the cells of a page are not stored in key order (the format
    /// sorts them when it decodes): [`complete_keys`] then sorts a node
    /// with overflowing keys after reading them, which the format could
    /// not order.
    fn unsorted_slots(&self) -> bool {
        false
    }

    /// Largest leaf cell kept inline; bigger values go to overflow pages.
    fn max_inline_cell(&self, page_size: usize) -> usize;

    /// Whether [`NodeFormat::encode`] needs the page's previous image
    /// (formats that keep the previous version inside the page).
    fn needs_base(&self) -> bool {
        false
    }

    /// Whether a tree page given up by [`PageWrite::retire`] gets a final,
    /// empty version written (a versioned format that records a node's
    /// death inside the page, \[LSM\] §3.2). Others only free it. Under a
    /// counting commit a version on a page free in the committed state
    /// could be overwritten wholesale by the next transaction, and its
    /// commit would then count short: the pager holds a retired page until
    /// a later commit exists (pager P13), so MVBT's retired versions count.
    ///
    /// [`PageWrite::retire`]: crate::page::PageWrite::retire
    fn retires_in_place(&self) -> bool {
        false
    }

    /// Cells an appending leaf split (sequential keys) moves to the new
    /// right page besides the appended one. The plain format keeps the
    /// left page full (0); a format that cannot overwrite a committed cell
    /// in place keeps one cell of room, so that the next update of a cell
    /// on the left page fits there instead of splitting it.
    fn append_split_slack(&self) -> usize {
        0
    }

    /// Where tree page `page` of this format carries its page checksum in
    /// [`crate::base::pagesum::page_sum`]'s form (seeded with the page
    /// number, over every other byte), when it does and the field lies in
    /// its first bytes; `None` otherwise. A journal that sums a verified
    /// image then sums the bytes up to the field only
    /// ([`crate::base::pagesum::append_page`]).
    fn tree_sum_at(&self, page: &[u8]) -> Option<usize> {
        let _ = page;
        None
    }

    /// Bytes at the end of every non-tree page (overflow pages, free-list
    /// trunks) that the format reserves for an envelope of its own, such
    /// as the writer's TID and a checksum. The tree and the free list
    /// never put data there.
    fn raw_reserved(&self) -> usize {
        0
    }

    /// Fill the reserved envelope of a non-tree page that transaction
    /// `ctx.tid` writes. The pager calls it on every such page when the
    /// transaction puts it, so every image the journal receives is sealed.
    fn seal_raw(&self, pgno: Pgno, page: &mut [u8], ctx: &EncodeCtx) {
        let _ = (pgno, page, ctx);
    }

    /// Validate a non-tree page read back from storage: a format with an
    /// envelope reports a torn or damaged page as corruption instead of
    /// handing out its bytes.
    fn check_raw(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
        let _ = (pgno, page, ctx);
        Ok(())
    }

    /// The integrity check's test of a tree page that decoded: every byte
    /// of the page, not only those the visible version uses. Formats whose
    /// reads already verify the whole page need nothing more; an in-page
    /// format that reads a version by its own checksum reports here damage
    /// outside it, and says which versions are still intact.
    fn verify_tree(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
        let _ = (pgno, page, ctx);
        Ok(())
    }

    /// The integrity check's test of a page on the free list: it holds no
    /// data, but it must be a page this format wrote (its checksum holds)
    /// or one never written (all zero); anything else is damage.
    fn check_free(&self, pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
        let _ = (pgno, page, ctx);
        Ok(())
    }
}

#[cfg(test)]
mod leaf_change_tests {
    use super::LeafChange;

    #[test]
    fn leaf_change_maps_cells_to_the_committed_ones() {
        let map = |ch: LeafChange, n, base_n| -> Vec<Option<usize>> {
            (0..n).map(|j| ch.base_index(j, n, base_n)).collect()
        };
        assert_eq!(map(LeafChange::Value(1), 3, 3), [Some(0), Some(1), Some(2)]);
        assert_eq!(map(LeafChange::Inserted(1), 3, 2), [Some(0), None, Some(1)]);
        assert_eq!(map(LeafChange::Inserted(2), 3, 2), [Some(0), Some(1), None]);
        assert_eq!(map(LeafChange::Removed(0), 2, 3), [Some(1), Some(2)]);
        assert_eq!(map(LeafChange::Removed(2), 2, 3), [Some(0), Some(1)]);
        assert!(!LeafChange::Inserted(0).fits_counts(3, 3));
        assert!(!LeafChange::Removed(3).fits_counts(2, 3));
        assert!(!LeafChange::Value(3).fits_counts(3, 3));
        assert_eq!(map(LeafChange::Removed(1), 2, 2), [None, None]);
        // node_index inverts base_index on the committed cells it keeps.
        for (ch, n, base_n) in [
            (LeafChange::Value(1), 3, 3),
            (LeafChange::Inserted(1), 3, 2),
            (LeafChange::Removed(0), 2, 3),
            (LeafChange::Removed(2), 2, 3),
        ] {
            for j in 0..n {
                if let Some(b) = ch
                    .base_index(j, n, base_n)
                    .filter(|_| ch != LeafChange::Value(j))
                {
                    assert_eq!(ch.node_index(b), Some(j), "{ch:?}");
                }
            }
        }
        assert_eq!(LeafChange::Value(1).node_index(1), None);
        assert_eq!(LeafChange::Removed(1).node_index(1), None);
    }
}
