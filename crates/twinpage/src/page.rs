//! The page contract between the tree and the pager: the tree reads and
//! writes logical nodes and raw pages through these two traits and never
//! sees the cache, the journal or the mode. The pager implements them for
//! a reader's snapshot (`pager::ReadPages`) and for a writer's
//! private pages (`pager::WritePages`).

use crate::base::{Error, KeyOrder, Pgno, Result};
use crate::node::{Bytes, EncodeCtx, LeafCell, LeafChange, LeafPatch, Node, NodeFormat, Value};
use std::sync::Arc;

/// Read access to pages (the committed state, or a writer's view).
pub trait PageRead {
    /// Page size in bytes.
    fn page_size(&self) -> usize;
    /// The node format.
    fn format(&self) -> &dyn NodeFormat;
    /// Pages in the database (as this view sees it).
    fn page_count(&self) -> u32;
    /// Logical view of a tree page of a table whose keys follow `order`
    /// (the format validates, or sorts, the cells it decodes with it).
    fn node(&self, pgno: Pgno, order: &dyn KeyOrder) -> Result<Arc<Node>>;
    /// Run `f` on the logical view of tree page `pgno`. A view of the
    /// committed state may run it on the cached node in place, without
    /// taking a reference (so concurrent lookups do not all write to the
    /// hot pages' reference counts); `f` must not call back into the view.
    fn visit_node(&self, pgno: Pgno, order: &dyn KeyOrder, f: &mut dyn FnMut(&Node)) -> Result<()> {
        f(&*self.node(pgno, order)?);
        Ok(())
    }
    /// A number that changes whenever the view's trees change (a write
    /// transaction puts or frees a page); a committed view never changes.
    /// [`crate::btree::Cursor`] finds its key again when it moved.
    fn generation(&self) -> u64 {
        0
    }
    /// Raw bytes of a page (overflow and free-list pages).
    fn raw(&self, pgno: Pgno) -> Result<Arc<[u8]>>;
    /// The free pages, when the pager keeps the free list in memory (the
    /// in-page schemes); `None` when it lives in trunk pages chained from
    /// the header.
    fn free_pages(&self) -> Option<Vec<Pgno>> {
        None
    }
    /// The integrity check's byte-level test of a page in `role`, beyond
    /// what reading it verified (see [`NodeFormat::verify_tree`] and
    /// [`NodeFormat::check_free`]); `order` is the key order of the
    /// page's table (tree pages). Views that are not checked accept.
    fn verify_page(&self, pgno: Pgno, role: PageRole, order: &dyn KeyOrder) -> Result<()> {
        let _ = (pgno, role, order);
        Ok(())
    }
}

/// What the integrity check found a page to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageRole {
    /// Page 1.
    Header,
    /// A tree page that decoded.
    Tree,
    /// A page on the free list (not a trunk).
    Free,
}

/// What [`PageWrite::patch_leaf`] did.
pub enum LeafPatched {
    /// The change is written (a delete of an absent key writes nothing);
    /// `true` if the key was there.
    Done(bool),
    /// Nothing written: the tree goes through the logical view, with the
    /// node when the pager found it at hand (what [`PageRead::node`]
    /// would return next).
    Declined(Option<Arc<Node>>),
}

/// Write access: the private pages of a write transaction.
pub trait PageWrite: PageRead {
    /// Replace a tree page's logical content.
    fn put_node(&mut self, pgno: Pgno, node: Node) -> Result<()>;
    /// Replace a page's raw bytes.
    fn put_raw(&mut self, pgno: Pgno, data: Vec<u8>) -> Result<()>;
    /// A page to use (from the free list, or a new one).
    fn allocate(&mut self) -> Result<Pgno>;
    /// Give a page back (it joins the free list at commit).
    fn free(&mut self, pgno: Pgno) -> Result<()>;
    /// Give a tree page back after its content moved elsewhere (the
    /// classic multi-version split, \[LSM\] §3.2): a format that keeps
    /// versions inside the page records the node's death by writing its
    /// final, empty version; others just free it.
    fn retire(&mut self, pgno: Pgno) -> Result<()> {
        self.free(pgno)
    }
    /// Whether `node` fits on page `pgno` (formats that keep the previous
    /// version in the page need that page's committed image to tell).
    fn fits(&self, pgno: Pgno, node: &Node) -> Result<bool>;
    /// `value` as the bytes of a new leaf cell: a pager may copy it into a
    /// buffer it recycled from a replaced cell instead of allocating.
    fn value_bytes(&mut self, value: &[u8]) -> Bytes {
        Bytes::from(value)
    }
    /// The node just put at `pgno`, and not moved or split since, differs
    /// from the node [`PageRead::node`] gave for it by `change` alone: a
    /// pager that knows that node was the committed one may have the
    /// format patch the committed image instead of encoding the whole
    /// node. A hint only: ignoring it is always correct.
    fn note_change(&mut self, pgno: Pgno, change: LeafChange) {
        let _ = (pgno, change);
    }
    /// An empty vector to build a modified leaf in: a pager may hand out
    /// one it recycled from a node it no longer holds.
    fn leaf_buffer(&mut self) -> Vec<LeafCell> {
        Vec::new()
    }
    /// The cells of leaf `pgno` to modify and put back, given its node as
    /// [`PageRead::node`] returned it: a pager may hand over the node's
    /// own cells when nothing else holds the node (it is about to be
    /// replaced), instead of a copy. The page's content is then undefined
    /// until the caller puts the modified node (an error in between
    /// aborts the transaction).
    fn leaf_to_modify(&mut self, pgno: Pgno, node: Arc<Node>) -> Result<Vec<LeafCell>> {
        copy_leaf(self.leaf_buffer(), pgno, &node)
    }
    /// A value the tree took out of a leaf and no longer needs: a pager
    /// may keep its buffer for a later value.
    fn discard_value(&mut self, value: Value) {
        let _ = value;
    }
    /// Put `node` at `pgno` if it fits there ([`PageWrite::fits`]), or
    /// hand it back. A pager may do the placement work once here instead
    /// of once for the test and again when it encodes the page.
    fn put_node_if_fits(&mut self, pgno: Pgno, node: Node) -> Result<Option<Node>> {
        if !self.fits(pgno, &node)? {
            return Ok(Some(node));
        }
        self.put_node(pgno, node)?;
        Ok(None)
    }
    /// Put each of `nodes` at the page of `pages` in the same place if
    /// every one fits there ([`PageWrite::fits`]), or hand them all back
    /// with none put (an error may leave some put, as a failed put does).
    /// A pager may place each once here instead of once for the test and
    /// again when it encodes the page.
    fn put_nodes_if_all_fit(
        &mut self,
        pages: &[Pgno],
        nodes: Vec<Node>,
    ) -> Result<Option<Vec<Node>>> {
        put_all_tested(self, pages, nodes)
    }
    /// [`PageWrite::put_node_if_fits`] for a node that differs from the
    /// one `pgno` holds now by one change (`change`: a leaf's cell, or an
    /// interior node's moved, split or dropped child). `no_larger`: its cells take
    /// no more room than before (a cell removed, a value replaced by one no
    /// longer, a child moved), so a format that places cells by size alone
    /// ([`crate::node::NodeFormat::needs_base`] false) needs no test. A
    /// pager that knows the page has no other change since the committed
    /// version may tell the format ([`crate::node::EncodeCtx::leaf_change`]).
    /// Both are hints: the default ignores them.
    fn put_changed(
        &mut self,
        pgno: Pgno,
        node: Node,
        change: LeafChange,
        no_larger: bool,
    ) -> Result<Option<Node>> {
        let _ = (change, no_larger);
        self.put_node_if_fits(pgno, node)
    }
    /// Apply `patch` to the leaf `pgno` without its logical view, when
    /// the page and the format allow it
    /// ([`crate::node::NodeFormat::patch_leaf`]): `pgno` is a leaf where
    /// `key` belongs (or the call declines), the cell changed holds no
    /// overflow chain (nothing to free) and the leaf keeps fitting its
    /// page without falling below the tree's underflow bound, so the tree
    /// above does not change. The default declines.
    fn patch_leaf(
        &mut self,
        pgno: Pgno,
        key: &[u8],
        patch: LeafPatch<'_>,
        order: &dyn KeyOrder,
    ) -> Result<LeafPatched> {
        let _ = (pgno, key, patch, order);
        Ok(LeafPatched::Declined(None))
    }
    /// Whether page `pgno` holds the committed version [`PageRead::node`]
    /// gave for it, unwritten by this transaction, with no other writer
    /// able to change it first: a node equal to that one may then be left
    /// where it is instead of put again. The default says no.
    fn unwritten(&self, pgno: Pgno) -> bool {
        let _ = pgno;
        false
    }
    /// Whether `node` fits on a page this transaction allocates.
    fn fits_fresh(&self, node: &Node) -> bool {
        let ctx = EncodeCtx::new(self.page_size(), 0, false);
        self.format().fits(node, None, &ctx)
    }
}

/// The cells of leaf `node` (page `pgno`) copied into `buf`, with room
/// for one more: what [`PageWrite::leaf_to_modify`] returns when it cannot
/// hand the node's own cells over.
pub fn copy_leaf(mut buf: Vec<LeafCell>, pgno: Pgno, node: &Node) -> Result<Vec<LeafCell>> {
    match node {
        Node::Leaf(cells) => {
            buf.reserve(cells.len() + 1);
            buf.extend(cells.iter().cloned());
            Ok(buf)
        }
        Node::Interior { .. } => Err(crate::base::Error::Internal(format!(
            "page {pgno}: a leaf to modify is an interior node"
        ))),
    }
}

/// [`PageWrite::put_nodes_if_all_fit`] by [`PageWrite::fits`] tests, then
/// [`PageWrite::put_node`]s.
pub(crate) fn put_all_tested<P: PageWrite + ?Sized>(
    p: &mut P,
    pages: &[Pgno],
    nodes: Vec<Node>,
) -> Result<Option<Vec<Node>>> {
    if pages.len() != nodes.len() {
        return Err(Error::Internal(format!(
            "{} nodes for {} pages",
            nodes.len(),
            pages.len()
        )));
    }
    for (&pg, n) in pages.iter().zip(&nodes) {
        if !p.fits(pg, n)? {
            return Ok(Some(nodes));
        }
    }
    for (&pg, n) in pages.iter().zip(nodes) {
        p.put_node(pg, n)?;
    }
    Ok(None)
}
