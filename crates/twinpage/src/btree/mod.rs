//! The B+tree: keys are byte strings ordered by the table's [`KeyOrder`]
//! (memcmp unless the caller gives the table its own); keys and values of
//! any size (up to [`MAX_KEY_LEN`] for keys; the tail of a key longer than
//! the format's [`NodeFormat::max_key_len`] and large values go to
//! overflow chains). A tree is named by its root page, which never
//! changes: a root split moves the root's contents down.
//!
//! An overflowing key's chain belongs to the one cell that holds the key
//! ([`Bytes::chain`]): a leaf cell, or a separator, which gets a chain of
//! its own when it is made (`own_key`). Cells that move between nodes
//! (splits, merges, the root's push-down) keep their chains; a cell that
//! goes away frees its chain (`free_key`): a deleted entry, a separator
//! dropped by a leaf merge or replaced by a leaf redistribution, and every
//! cell of a destroyed tree.
//!
//! [`NodeFormat::max_key_len`]: crate::node::NodeFormat::max_key_len
//!
//! The algorithms work on logical nodes through [`PageRead`] and
//! [`PageWrite`]; they do not know the node format or the journal mode.

mod cursor;
mod stable;
pub mod walk;

pub use cursor::RangeIter;
pub use stable::{count, Cursor, ValueAt};

use crate::base::{Error, KeyOrder, Pgno, Result};
use crate::node::{
    overflow_key_local, Bytes, InteriorCell, LeafCell, LeafChange, LeafPatch, Node, Value,
};
use crate::page::{LeafPatched, PageRead, PageWrite};
use std::sync::Arc;

/// Deeper than this means a cycle in a damaged file.
pub const MAX_DEPTH: usize = 40;

/// Longest key a tree accepts (4 GiB - 1: cells record key lengths in
/// 32 bits). Keys longer than the format keeps in a cell overflow.
pub const MAX_KEY_LEN: usize = u32::MAX as usize;

/// Tree maintenance switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeConfig {
    /// Merge an underflowing node into a sibling when both fit one page.
    pub merge: bool,
    /// Otherwise, move cells from a sibling (LS-MVBT turns this off).
    pub redistribute: bool,
    /// Sibling redistribution on overflow (SQLite's balance, \[LSM\] §5.3):
    /// a node that does not fit its page first shares its cells with its
    /// left and right siblings, rewriting them and the parent, and splits
    /// only when the siblings cannot take them.
    pub spread: bool,
    /// How an overflowing node splits.
    pub split: SplitPolicy,
    /// A node that does not fit over its page's committed image moves to
    /// a fresh page whenever it fits one (a compacted copy: \[IPS\]'s lazy
    /// garbage collection, §3.2.2), not only when it fills at most half a
    /// page. The root never moves.
    pub relocate_full: bool,
}

/// How [`insert`] splits a node that does not fit its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitPolicy {
    /// The node keeps its left half in place and the right half moves to
    /// a new page (B+tree split; under a versioned format the node keeps
    /// the moved cells as dead ones: \[LSM\]'s *lazy split*, three dirty
    /// nodes).
    KeepLeft,
    /// Both halves move to new pages and the node is retired
    /// ([`PageWrite::retire`]): the classic multi-version split, a
    /// version split plus a key split (\[LSM\] §3.2, Fig. 1: four dirty
    /// nodes). A node that moves without splitting retires its page too.
    CopyBoth,
}

impl TreeConfig {
    /// Merge and redistribute after deletes, split keeping the left half:
    /// the engine's default (SQLite also spreads on overflow).
    pub const DEFAULT: TreeConfig = TreeConfig {
        merge: true,
        redistribute: true,
        spread: false,
        split: SplitPolicy::KeepLeft,
        relocate_full: false,
    };
}

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig::DEFAULT
    }
}

fn corrupt(pgno: Pgno, what: impl Into<String>) -> Error {
    Error::corrupt("database", pgno, what)
}

/// Index of the child to follow for `key` in an interior node.
pub fn child_index(cells: &[InteriorCell], key: &[u8], order: &dyn KeyOrder) -> usize {
    // The default order compared inline: no call through the trait object
    // per probe of a search that runs at every level of every operation.
    if order.bytewise() {
        return cells.partition_point(|c| c.key.as_slice() <= key);
    }
    cells.partition_point(|c| order.compare(&c.key, key).is_le())
}

/// Position of `key` in a leaf's cells (`Err`: where it would go).
pub fn leaf_search(
    cells: &[LeafCell],
    key: &[u8],
    order: &dyn KeyOrder,
) -> std::result::Result<usize, usize> {
    if order.bytewise() {
        return cells.binary_search_by(|c| c.key.as_slice().cmp(key));
    }
    cells.binary_search_by(|c| order.compare(&c.key, key))
}

/// The child page at `idx` (cells.len() means the rightmost).
pub fn child_at(cells: &[InteriorCell], right: Pgno, idx: usize) -> Pgno {
    if idx < cells.len() {
        cells[idx].child
    } else {
        right
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

/// Longest key a cell of `p`'s format stores whole.
fn whole_key_max<P: PageRead + ?Sized>(p: &P) -> usize {
    p.format().max_key_len(p.page_size())
}

/// `key` as a cell of this tree stores it: whole, or, when it is too long,
/// with its tail in a new overflow chain that the cell will own. A key
/// that already has its chain (a cell moving) is returned as it is.
fn own_key<P: PageWrite + ?Sized>(p: &mut P, key: Bytes) -> Result<Bytes> {
    let max = whole_key_max(p);
    if key.chain().is_some() || key.len() <= max {
        return Ok(key);
    }
    let local = overflow_key_local(max);
    let head = write_overflow(p, &key[local..])?;
    Bytes::chained(Arc::from(&*key), head, local)
        .ok_or_else(|| Error::Internal(format!("key of {} bytes cannot overflow", key.len())))
}

/// Free the overflow chain of a key whose cell goes away.
fn free_key<P: PageWrite + ?Sized>(p: &mut P, key: &Bytes) -> Result<()> {
    if let Some(c) = key.chain() {
        for pg in overflow_pages(p, c.head, c.tail_len())? {
            p.free(pg)?;
        }
    }
    Ok(())
}

/// Create an empty tree; returns its root page.
pub fn create<P: PageWrite + ?Sized>(p: &mut P) -> Result<Pgno> {
    let root = p.allocate()?;
    p.put_node(root, Node::empty_leaf())?;
    Ok(root)
}

/// Look a key up. Descends with [`PageRead::visit_node`], so a lookup in
/// the committed state takes no reference to the nodes it passes.
pub fn get<P: PageRead + ?Sized>(
    p: &P,
    root: Pgno,
    key: &[u8],
    order: &dyn KeyOrder,
) -> Result<Option<Vec<u8>>> {
    get_with(p, root, key, order, &mut |v| v.to_vec())
}

/// [`get`], handing the value to `f` instead of returning a copy: an inline
/// value is passed straight from the cached page (no allocation), an
/// overflow value after reading its chain. `f` must not call back into `p`.
pub fn get_with<P: PageRead + ?Sized, T>(
    p: &P,
    root: Pgno,
    key: &[u8],
    order: &dyn KeyOrder,
    f: &mut dyn FnMut(&[u8]) -> T,
) -> Result<Option<T>> {
    enum Step<T> {
        Child(Pgno),
        Done(T),
        Overflow(Value),
        Missing,
    }
    let mut pgno = root;
    for _ in 0..MAX_DEPTH {
        let mut step = Step::Missing;
        p.visit_node(pgno, order, &mut |node| {
            step = match node {
                Node::Interior { cells, right } => {
                    Step::Child(child_at(cells, *right, child_index(cells, key, order)))
                }
                // Used in place: cloning the cell would write the shared
                // page buffer's reference count.
                Node::Leaf(cells) => match leaf_search(cells, key, order) {
                    Ok(i) => match &cells[i].value {
                        Value::Inline(b) => Step::Done(f(b.as_slice())),
                        v => Step::Overflow(v.clone()),
                    },
                    Err(_) => Step::Missing,
                },
            }
        })?;
        match step {
            Step::Child(c) => pgno = c,
            Step::Done(t) => return Ok(Some(t)),
            Step::Overflow(v) => return Ok(Some(f(&read_value(p, &v)?))),
            Step::Missing => return Ok(None),
        }
    }
    Err(corrupt(
        root,
        "tree deeper than the maximum: cycle in child pointers",
    ))
}

/// Materialize a value (reading its overflow chain if needed).
pub fn read_value<P: PageRead + ?Sized>(p: &P, v: &Value) -> Result<Vec<u8>> {
    match v {
        Value::Inline(b) => Ok(b.to_vec()),
        Value::Overflow { len, head } => read_overflow(p, *head, *len),
    }
}

/// Value bytes per overflow page: after the `next` pointer, before the
/// format's envelope.
fn overflow_per_page<P: PageRead + ?Sized>(p: &P) -> usize {
    p.page_size() - 4 - p.format().raw_reserved()
}

/// Read an overflow chain of `len` bytes. The length is checked against
/// the file size before anything is allocated, and the chain may not be
/// longer than the length implies (no cycles).
pub fn read_overflow<P: PageRead + ?Sized>(p: &P, head: Pgno, len: u64) -> Result<Vec<u8>> {
    let per = overflow_per_page(p) as u64;
    let pages = len.div_ceil(per);
    if pages > p.page_count() as u64 || (len > 0 && head == 0) {
        return Err(corrupt(
            head,
            format!("overflow value of {len} bytes cannot fit the database"),
        ));
    }
    let mut out = Vec::with_capacity(len as usize);
    let mut pg = head;
    for _ in 0..pages {
        if pg < 3 {
            return Err(corrupt(
                pg,
                "overflow chain ends early or points at a reserved page",
            ));
        }
        let raw = p.raw(pg)?;
        let take = ((len - out.len() as u64).min(per)) as usize;
        out.extend_from_slice(&raw[4..4 + take]);
        pg = u32::from_be_bytes(raw[0..4].try_into().expect("4 bytes"));
    }
    if pg != 0 {
        return Err(corrupt(head, "overflow chain longer than its value"));
    }
    Ok(out)
}

/// Pages of an overflow chain (validated as in [`read_overflow`]).
pub fn overflow_pages<P: PageRead + ?Sized>(p: &P, head: Pgno, len: u64) -> Result<Vec<Pgno>> {
    let per = overflow_per_page(p) as u64;
    let pages = len.div_ceil(per);
    if pages > p.page_count() as u64 {
        return Err(corrupt(
            head,
            format!("overflow value of {len} bytes cannot fit"),
        ));
    }
    let mut out = Vec::with_capacity(pages as usize);
    let mut pg = head;
    for _ in 0..pages {
        if pg < 3 {
            return Err(corrupt(pg, "overflow chain ends early"));
        }
        out.push(pg);
        let raw = p.raw(pg)?;
        pg = u32::from_be_bytes(raw[0..4].try_into().expect("4 bytes"));
    }
    if pg != 0 {
        return Err(corrupt(head, "overflow chain longer than its value"));
    }
    Ok(out)
}

fn write_overflow<P: PageWrite + ?Sized>(p: &mut P, data: &[u8]) -> Result<Pgno> {
    let ps = p.page_size();
    let per = overflow_per_page(p);
    let chunks: Vec<&[u8]> = data.chunks(per).collect();
    let mut pages = Vec::with_capacity(chunks.len());
    for _ in 0..chunks.len() {
        pages.push(p.allocate()?);
    }
    for (i, chunk) in chunks.iter().enumerate() {
        let mut page = vec![0u8; ps];
        let next = pages.get(i + 1).copied().unwrap_or(0);
        page[0..4].copy_from_slice(&next.to_be_bytes());
        page[4..4 + chunk.len()].copy_from_slice(chunk);
        p.put_raw(pages[i], page)?;
    }
    Ok(pages[0])
}

fn free_value<P: PageWrite + ?Sized>(p: &mut P, v: &Value) -> Result<()> {
    if let Value::Overflow { len, head } = v {
        for pg in overflow_pages(p, *head, *len)? {
            p.free(pg)?;
        }
    }
    Ok(())
}

fn make_value<P: PageWrite + ?Sized>(p: &mut P, key: &[u8], value: &[u8]) -> Result<Value> {
    let bytes = p.value_bytes(value);
    let max = whole_key_max(p);
    // The key as its cell will store it (an overflowing key's local part:
    // the chain is written only if the key is new, in `modify`).
    let key = if key.len() > max {
        let local = overflow_key_local(max);
        Bytes::chain_stub(&key[..local], 0, key.len() as u64)
            .ok_or_else(|| Error::Internal("overflowing key shorter than its cell".into()))?
    } else {
        key.into()
    };
    let f = p.format();
    let inline = LeafCell {
        key,
        value: Value::Inline(bytes),
    };
    if f.leaf_cell_size(&inline) <= f.max_inline_cell(p.page_size()) {
        return Ok(inline.value);
    }
    let head = write_overflow(p, value)?;
    Ok(Value::Overflow {
        len: value.len() as u64,
        head,
    })
}

/// A node split: `sep` is the smallest key of the new right sibling.
struct Split {
    sep: Bytes,
    right: Pgno,
}

/// Where [`store`] put a node: the page now holding it (or its left
/// half), and the right half if it split. When `first` differs from the
/// page the node came from, the node moved and its parent must follow.
struct Placed {
    first: Pgno,
    split: Option<Split>,
    /// The node fits neither at `first` nor, moved, on a fresh page, and
    /// was left to the parent ([`TreeConfig::spread`]): it offers the
    /// cells to the node's siblings ([`spread`]) and splits it
    /// ([`split_node`]) only if they cannot take them.
    overflow: Option<Overflow>,
    /// The leaf was patched where it stands and stays above the underflow
    /// bound ([`PageWrite::patch_leaf`]), or the interior node did not
    /// change: the parent has nothing to check.
    settled: bool,
}

/// An overflowing node handed up to its parent.
struct Overflow {
    node: Node,
    appended: bool,
}

impl Placed {
    fn at(pgno: Pgno) -> Placed {
        Placed {
            first: pgno,
            split: None,
            overflow: None,
            settled: false,
        }
    }
}

/// A separator `s` with `left < s <= right`: under memcmp order the
/// shortest such byte string; under any other order `right` itself (a
/// prefix of a key need not sort next to it).
fn separator(left: &[u8], right: &[u8], order: &dyn KeyOrder) -> Bytes {
    if !order.bytewise() {
        return right.into();
    }
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    right[..(common + 1).min(right.len())].into()
}

/// Split point by encoded size: the first index of the right half.
fn split_point(sizes: &[usize]) -> usize {
    let total: usize = sizes.iter().sum();
    let mut acc = 0;
    for (i, s) in sizes.iter().enumerate() {
        acc += s;
        if acc * 2 >= total {
            return (i + 1).clamp(1, sizes.len() - 1);
        }
    }
    sizes.len() / 2
}

fn used_bytes<P: PageRead + ?Sized>(p: &P, node: &Node) -> usize {
    let f = p.format();
    match node {
        Node::Leaf(c) => c.iter().map(|c| f.leaf_cell_size(c)).sum(),
        Node::Interior { cells, .. } => cells.iter().map(|c| f.interior_cell_size(c)).sum(),
    }
}

/// Whether `node`'s cells take fewer than `limit` bytes: summed only
/// until the limit is reached (an interior node has hundreds of cells).
fn used_below<P: PageRead + ?Sized>(p: &P, node: &Node, limit: usize) -> bool {
    let f = p.format();
    // A cell is never smaller than one with an empty key (and value):
    // enough cells settle it without sizing each (a wide interior node).
    let least = match node {
        Node::Leaf(_) => f.leaf_cell_size(&LeafCell {
            key: Bytes::default(),
            value: Value::Inline(Bytes::default()),
        }),
        Node::Interior { .. } => f.interior_cell_size(&InteriorCell {
            key: Bytes::default(),
            child: 1,
        }),
    };
    if node.len().saturating_mul(least) >= limit {
        return false;
    }
    let mut used = 0;
    match node {
        Node::Leaf(c) => c.iter().all(|c| {
            used += f.leaf_cell_size(c);
            used < limit
        }),
        Node::Interior { cells, .. } => cells.iter().all(|c| {
            used += f.interior_cell_size(c);
            used < limit
        }),
    }
}

/// Give up a tree page whose content now lives elsewhere: freed, or
/// retired under the classic multi-version split ([`SplitPolicy::CopyBoth`]).
fn give_back<P: PageWrite + ?Sized>(p: &mut P, pgno: Pgno, cfg: &TreeConfig) -> Result<()> {
    match cfg.split {
        SplitPolicy::KeepLeft => p.free(pgno),
        SplitPolicy::CopyBoth => p.retire(pgno),
    }
}

/// Put `node` on a page this transaction allocates, giving up `old`
/// unless it is pinned (the root never moves).
fn relocate<P: PageWrite + ?Sized>(
    p: &mut P,
    old: Pgno,
    node: Node,
    pinned: bool,
    cfg: &TreeConfig,
) -> Result<Pgno> {
    let new = p.allocate()?;
    p.put_node(new, node)?;
    if !pinned {
        give_back(p, old, cfg)?;
    }
    Ok(new)
}

/// Store `node` at `pgno`; if it does not fit there, split it, or move it
/// to a new page. A format that keeps the committed version inside the
/// page can refuse a node that would fit an empty page (the space it
/// frees becomes usable only after the commit); a small node then moves,
/// a large one splits, and a half that still does not fit in place moves.
/// `pinned` pages (the root) never move: the caller grows the tree over
/// the pages returned instead. With [`TreeConfig::spread`] a node that
/// would split is handed to the parent instead ([`Placed::overflow`]).
fn store<P: PageWrite + ?Sized>(
    p: &mut P,
    pgno: Pgno,
    node: Node,
    appended: bool,
    pinned: bool,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<Placed> {
    let rest = p.put_node_if_fits(pgno, node)?;
    place(p, pgno, rest, Append::from(appended), pinned, cfg, order)
}

/// Where an overflowing node's new cell went, for [`halves`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Append {
    /// Anywhere but at the end.
    No,
    /// At the end (sequential keys): the left half keeps the rest.
    Yes,
    /// At the end of a leaf that is the committed one, unwritten
    /// ([`PageWrite::unwritten`]): when the left half is every other
    /// cell, it is that page as it stands, and is not put again (no
    /// encode, no journal record, no write: SQLite's `balance_quick`).
    OntoCommitted,
}

impl From<bool> for Append {
    fn from(appended: bool) -> Self {
        match appended {
            true => Append::Yes,
            false => Append::No,
        }
    }
}

/// The rest of [`store`] once the pager was asked to put the node at
/// `pgno`: done if it took it (`rest` is `None`); otherwise move it,
/// spread it or split it.
fn place<P: PageWrite + ?Sized>(
    p: &mut P,
    pgno: Pgno,
    rest: Option<Node>,
    append: Append,
    pinned: bool,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<Placed> {
    let appended = append != Append::No;
    let Some(node) = rest else {
        return Ok(Placed::at(pgno));
    };
    let f = p.format();
    let half = f.capacity(p.page_size()) / 2;
    let small = node.len() < 3 || (!pinned && (cfg.relocate_full || used_bytes(p, &node) <= half));
    if small && p.fits_fresh(&node) {
        let new = relocate(p, pgno, node, pinned, cfg)?;
        return Ok(Placed::at(new));
    }
    if node.len() < 3 {
        return Err(corrupt(
            pgno,
            "node with fewer than three cells does not fit a page",
        ));
    }
    if cfg.spread && !pinned {
        return Ok(Placed {
            first: pgno,
            split: None,
            overflow: Some(Overflow { node, appended }),
            settled: false,
        });
    }
    split_node(p, pgno, node, append, pinned, cfg, order)
}

/// The two halves of an overflowing node and the separator between them.
fn halves(
    f: &dyn crate::node::NodeFormat,
    node: Node,
    appended: bool,
    order: &dyn KeyOrder,
) -> (Node, Node, Bytes) {
    match node {
        Node::Leaf(mut cells) => {
            // Appending at the end (sequential keys): keep the left page
            // full instead of leaving two half-empty pages.
            let m = if appended {
                (cells.len() - 1)
                    .saturating_sub(f.append_split_slack())
                    .max(1)
            } else {
                let sizes: Vec<usize> = cells.iter().map(|c| f.leaf_cell_size(c)).collect();
                split_point(&sizes)
            };
            let right_cells = cells.split_off(m);
            let sep = separator(
                &cells.last().expect("left half").key,
                &right_cells[0].key,
                order,
            );
            (Node::Leaf(cells), Node::Leaf(right_cells), sep)
        }
        Node::Interior { mut cells, right } => {
            let sizes: Vec<usize> = cells.iter().map(|c| f.interior_cell_size(c)).collect();
            let m = if appended {
                cells.len() - 2
            } else {
                split_point(&sizes)
            }
            .clamp(1, cells.len() - 2);
            let right_cells = cells.split_off(m + 1);
            let mid = cells.pop().expect("middle cell");
            (
                Node::Interior {
                    cells,
                    right: mid.child,
                },
                Node::Interior {
                    cells: right_cells,
                    right,
                },
                mid.key,
            )
        }
    }
}

/// Split a node of at least three cells that does not fit at `pgno`: the
/// right half goes to a new page; the left half stays in place if it fits
/// there ([`SplitPolicy::KeepLeft`]) or moves to a new page too.
fn split_node<P: PageWrite + ?Sized>(
    p: &mut P,
    pgno: Pgno,
    node: Node,
    append: Append,
    pinned: bool,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<Placed> {
    let n = node.len();
    let (left, right_node, sep) = halves(p.format(), node, append != Append::No, order);
    // The committed leaf with one cell appended, split just before that
    // cell: the left half is the page as it stands.
    let onto_committed = append == Append::OntoCommitted
        && !pinned
        && cfg.split == SplitPolicy::KeepLeft
        && left.is_leaf();
    let as_committed = onto_committed && left.len() + 1 == n;
    // Split one cell earlier (a format's append slack of one): the left
    // half is the committed leaf less its last cell, a change the pager
    // can patch into the page instead of encoding every cell again.
    let less_last = onto_committed && left.len() + 2 == n;
    // A leaf split makes a new separator; an interior one moves its
    // middle key (and its chain) up.
    let sep = own_key(p, sep)?;
    let right = p.allocate()?;
    p.put_node(right, right_node)?;
    let first = match cfg.split {
        SplitPolicy::KeepLeft if as_committed => pgno,
        SplitPolicy::KeepLeft => {
            let rest = match less_last {
                true => {
                    let last = LeafChange::Removed(left.len());
                    p.put_changed(pgno, left, last, true)?
                }
                false => p.put_node_if_fits(pgno, left)?,
            };
            match rest {
                None => pgno,
                Some(left) => relocate(p, pgno, left, pinned, cfg)?,
            }
        }
        SplitPolicy::CopyBoth => relocate(p, pgno, left, pinned, cfg)?,
    };
    Ok(Placed {
        first,
        split: Some(Split { sep, right }),
        overflow: None,
        settled: false,
    })
}

/// Start of each share when `sizes` are dealt to `k` pages in order,
/// evenly by size: `k - 1` indices, increasing, each share non-empty.
fn share_bounds(sizes: &[usize], k: usize) -> Option<Vec<usize>> {
    let total: usize = sizes.iter().sum();
    let mut bounds = Vec::with_capacity(k.saturating_sub(1));
    let mut acc = 0;
    for (i, s) in sizes.iter().enumerate() {
        if bounds.len() + 1 == k {
            break;
        }
        acc += s;
        if acc * k >= total * (bounds.len() + 1) {
            bounds.push(i + 1);
        }
    }
    let ok = bounds.len() + 1 == k
        && bounds.windows(2).all(|w| w[0] < w[1])
        && bounds.first().is_some_and(|&b| b > 0)
        && bounds.last().is_some_and(|&b| b < sizes.len());
    ok.then_some(bounds)
}

/// [`TreeConfig::spread`]: deal the cells of an overflowing child (`node`,
/// child `idx` of the parent) and of its left and right siblings evenly
/// over the same pages, each share over its own page, and update the
/// parent's separators. Hands the node back, having written nothing, when
/// it has no sibling or a share does not fit its page.
fn spread<P: PageWrite + ?Sized>(
    p: &mut P,
    cells: &mut [InteriorCell],
    right: Pgno,
    idx: usize,
    node: Node,
    order: &dyn KeyOrder,
) -> Result<Option<Node>> {
    let children = cells.len() + 1;
    if children < 2 {
        return Ok(Some(node));
    }
    let (lo, hi) = (idx.saturating_sub(1), (idx + 1).min(children - 1));
    let pages: Vec<Pgno> = (lo..=hi).map(|j| child_at(cells, right, j)).collect();
    let mut sibs = Vec::with_capacity(pages.len());
    for (j, &pg) in (lo..=hi).zip(&pages) {
        if j != idx {
            let n = p.node(pg, order)?;
            if n.is_leaf() != node.is_leaf() {
                return Err(corrupt(pg, "siblings at different depths"));
            }
            sibs.push(Some(n));
        } else {
            sibs.push(None);
        }
    }
    let f = p.format();
    let k = pages.len();
    let (shares, seps): (Vec<Node>, Vec<Bytes>) = match &node {
        Node::Leaf(own) => {
            let mut all: Vec<LeafCell> = Vec::new();
            for s in &sibs {
                match s.as_deref() {
                    Some(Node::Leaf(c)) => all.extend(c.iter().cloned()),
                    _ => all.extend(own.iter().cloned()),
                }
            }
            let sizes: Vec<usize> = all.iter().map(|c| f.leaf_cell_size(c)).collect();
            let Some(bounds) = share_bounds(&sizes, k) else {
                return Ok(Some(node));
            };
            let seps = bounds
                .iter()
                .map(|&b| separator(&all[b - 1].key, &all[b].key, order))
                .collect();
            let mut shares = Vec::with_capacity(k);
            for &b in bounds.iter().rev() {
                shares.push(Node::Leaf(all.split_off(b)));
            }
            shares.push(Node::Leaf(all));
            shares.reverse();
            (shares, seps)
        }
        Node::Interior {
            cells: own,
            right: own_right,
        } => {
            // The parent's separators between the siblings come down as
            // cells over each sibling's rightmost child.
            let mut all: Vec<InteriorCell> = Vec::new();
            let mut last_right = *own_right;
            for (i, s) in sibs.iter().enumerate() {
                let (c, r) = match s.as_deref() {
                    Some(Node::Interior { cells, right }) => (cells, *right),
                    _ => (own, *own_right),
                };
                all.extend(c.iter().cloned());
                if i + 1 < k {
                    all.push(InteriorCell {
                        key: cells[lo + i].key.clone(),
                        child: r,
                    });
                } else {
                    last_right = r;
                }
            }
            // Each boundary cell goes up: its child becomes the right
            // child of the share before it.
            let sizes: Vec<usize> = all.iter().map(|c| f.interior_cell_size(c)).collect();
            let Some(bounds) = share_bounds(&sizes, k) else {
                return Ok(Some(node));
            };
            let ups: Vec<usize> = bounds.iter().map(|&b| b - 1).collect();
            if ups.windows(2).any(|w| w[1] <= w[0] + 1) || ups[0] == 0 {
                return Ok(Some(node));
            }
            let mut shares = Vec::with_capacity(k);
            let mut seps = Vec::with_capacity(k - 1);
            let mut rest = all;
            let mut taken = 0;
            for &u in &ups {
                let mut tail = rest.split_off(u - taken + 1);
                std::mem::swap(&mut rest, &mut tail);
                // `tail` is this share plus its boundary cell.
                let up = tail.pop().expect("boundary cell");
                taken = u + 1;
                seps.push(up.key);
                shares.push(Node::Interior {
                    cells: tail,
                    right: up.child,
                });
            }
            shares.push(Node::Interior {
                cells: rest,
                right: last_right,
            });
            (shares, seps)
        }
    };
    // The overflowing node's own page is tested first: it is the one most
    // likely to refuse its share (a format that keeps the committed
    // version's cells in the page cannot give their bytes back before
    // the commit), and a refusal then costs no sibling's placement.
    let (mut pages, mut shares) = (pages, shares);
    pages.swap(0, idx - lo);
    shares.swap(0, idx - lo);
    if p.put_nodes_if_all_fit(&pages, shares)?.is_some() {
        return Ok(Some(node));
    }
    // Leaf shares get new separators (the old ones go); interior shares
    // moved the old ones down and the boundary cells up.
    let leaf = node.is_leaf();
    for (j, sep) in (lo..hi).zip(seps) {
        if leaf {
            free_key(p, &cells[j].key)?;
            cells[j].key = own_key(p, sep)?;
        } else {
            cells[j].key = sep;
        }
    }
    Ok(None)
}

/// Point the parent's child slot `idx` at where the child went.
fn absorb(cells: &mut Vec<InteriorCell>, right: &mut Pgno, idx: usize, placed: Placed) {
    let last = match &placed.split {
        Some(s) => s.right,
        None => placed.first,
    };
    if idx < cells.len() {
        cells[idx].child = last;
        if let Some(s) = placed.split {
            cells.insert(
                idx,
                InteriorCell {
                    key: s.sep,
                    child: placed.first,
                },
            );
        }
    } else {
        *right = last;
        if let Some(s) = placed.split {
            cells.push(InteriorCell {
                key: s.sep,
                child: placed.first,
            });
        }
    }
}

/// Insert or replace. Returns true if the key existed.
pub fn insert<P: PageWrite + ?Sized>(
    p: &mut P,
    root: Pgno,
    key: &[u8],
    value: &[u8],
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<bool> {
    check_key(key)?;
    let v = make_value(p, key, value)?;
    let mut op = Op::Put(Some(v));
    let (existed, placed) = modify(p, root, key, &mut op, cfg, order, 0)?;
    settle_root(p, root, placed, order)?;
    Ok(existed)
}

/// Delete a key. Returns true if it existed.
pub fn delete<P: PageWrite + ?Sized>(
    p: &mut P,
    root: Pgno,
    key: &[u8],
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<bool> {
    let mut op = Op::Delete;
    let (existed, placed) = modify(p, root, key, &mut op, cfg, order, 0)?;
    settle_root(p, root, placed, order)?;
    shrink_root(p, root, cfg, order)?;
    Ok(existed)
}

/// Free every page of a tree, root included.
pub fn destroy<P: PageWrite + ?Sized>(p: &mut P, root: Pgno, order: &dyn KeyOrder) -> Result<()> {
    destroy_at(p, root, order, 0)
}

fn destroy_at<P: PageWrite + ?Sized>(
    p: &mut P,
    pg: Pgno,
    order: &dyn KeyOrder,
    depth: usize,
) -> Result<()> {
    free_below(p, pg, order, depth)?;
    p.free(pg)
}

/// Free what page `pg` holds (a leaf's overflow keys and values, or every
/// subtree of an interior node and its separators' chains), not `pg`
/// itself.
fn free_below<P: PageWrite + ?Sized>(
    p: &mut P,
    pg: Pgno,
    order: &dyn KeyOrder,
    depth: usize,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(corrupt(pg, "tree deeper than the maximum"));
    }
    let node = p.node(pg, order)?;
    match &*node {
        Node::Leaf(cells) => {
            for c in cells {
                free_key(p, &c.key)?;
                free_value(p, &c.value)?;
            }
        }
        Node::Interior { cells, .. } => {
            for c in cells {
                free_key(p, &c.key)?;
            }
            for c in node.children() {
                destroy_at(p, c, order, depth + 1)?;
            }
        }
    }
    Ok(())
}

/// Remove every entry of a tree and free its pages, keeping the root (an
/// empty leaf afterwards). Returns the number of entries removed.
pub fn clear<P: PageWrite + ?Sized>(p: &mut P, root: Pgno, order: &dyn KeyOrder) -> Result<u64> {
    let n = count(p, root, order)?;
    free_below(p, root, order, 0)?;
    let empty = Node::empty_leaf();
    if !p.fits(root, &empty)? {
        return Err(corrupt(root, "the format cannot hold an empty root leaf"));
    }
    p.put_node(root, empty)?;
    Ok(n)
}

enum Op {
    Put(Option<Value>),
    Delete,
}

/// The root stays at its page: when its content split or moved, the root
/// becomes an interior node over the pages that hold it. If even that
/// does not fit in place, it goes one level down and the root keeps a
/// single child (an interior node without cells fits any page).
fn settle_root<P: PageWrite + ?Sized>(
    p: &mut P,
    root: Pgno,
    placed: Placed,
    order: &dyn KeyOrder,
) -> Result<()> {
    if placed.first == root && placed.split.is_none() {
        return Ok(());
    }
    // The root's content moves down to a new page. The half a split kept
    // in place fits there but not always on a fresh page (a format may
    // free room in place that a fresh page keeps, as \[LSM\] §4.3's
    // reserved cell once cells ended): it then moves down as two halves.
    let mut lower = None;
    let first = if placed.first == root {
        let content = (*p.node(root, order)?).clone();
        if content.len() >= 3 && !p.fits_fresh(&content) {
            let (a, b, sep) = halves(p.format(), content, false, order);
            let sep = own_key(p, sep)?;
            let (left, right) = (p.allocate()?, p.allocate()?);
            p.put_node(left, a)?;
            p.put_node(right, b)?;
            lower = Some(InteriorCell {
                key: sep,
                child: left,
            });
            right
        } else {
            let left = p.allocate()?;
            p.put_node(left, content)?;
            left
        }
    } else {
        placed.first
    };
    let node = match placed.split {
        Some(s) => Node::Interior {
            cells: lower
                .into_iter()
                .chain([InteriorCell {
                    key: s.sep,
                    child: first,
                }])
                .collect(),
            right: s.right,
        },
        None => Node::Interior {
            cells: lower.into_iter().collect(),
            right: first,
        },
    };
    if p.fits(root, &node)? {
        return p.put_node(root, node);
    }
    let down = p.allocate()?;
    p.put_node(down, node)?;
    let stub = Node::Interior {
        cells: Vec::new(),
        right: down,
    };
    if !p.fits(root, &stub)? {
        return Err(corrupt(root, "the format cannot hold a one-child root"));
    }
    p.put_node(root, stub)
}

/// A root interior node left with a single child takes over its content.
fn shrink_root<P: PageWrite + ?Sized>(
    p: &mut P,
    root: Pgno,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<()> {
    for _ in 0..MAX_DEPTH {
        let node = p.node(root, order)?;
        match &*node {
            Node::Interior { cells, right } if cells.is_empty() => {
                let child = *right;
                let content = p.node(child, order)?;
                if !p.fits(root, &content)? {
                    // Possible once the root's current version commits.
                    return Ok(());
                }
                // Copied only once it is known to fit (a versioned root
                // often cannot take it yet).
                p.put_node(root, (*content).clone())?;
                give_back(p, child, cfg)?;
            }
            _ => return Ok(()),
        }
    }
    Ok(())
}

fn modify<P: PageWrite + ?Sized>(
    p: &mut P,
    pgno: Pgno,
    key: &[u8],
    op: &mut Op,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
    depth: usize,
) -> Result<(bool, Placed)> {
    if depth > MAX_DEPTH {
        return Err(corrupt(
            pgno,
            "tree deeper than the maximum: cycle in child pointers",
        ));
    }
    // A one-row change to a leaf whose logical view is not at hand: the
    // pager patches the page (no decode), or declines. A delete may not
    // leave the leaf below the bound at which `underflows` rebalances.
    let patch = match op {
        Op::Put(Some(Value::Inline(v))) => Some(LeafPatch::Put(v.as_slice())),
        Op::Delete => Some(LeafPatch::Delete {
            keep: p.format().capacity(p.page_size()) / 4,
        }),
        Op::Put(_) => None,
    };
    let at_hand = match patch.map(|patch| p.patch_leaf(pgno, key, patch, order)) {
        Some(Ok(LeafPatched::Done(existed))) => {
            if let Op::Put(v) = op {
                if let Some(new) = v.take() {
                    p.discard_value(new);
                }
            }
            let mut placed = Placed::at(pgno);
            placed.settled = true;
            return Ok((existed, placed));
        }
        Some(Ok(LeafPatched::Declined(node))) => node,
        Some(Err(e)) => return Err(e),
        None => None,
    };
    let node = match at_hand {
        Some(node) => node,
        None => p.node(pgno, order)?,
    };
    let pos = match &*node {
        Node::Leaf(cells) => Some(leaf_search(cells, key, order)),
        Node::Interior { .. } => None,
    };
    if let Some(pos) = pos {
        return modify_leaf(p, (pgno, node), (key, pos), op, cfg, order, depth);
    }
    match &*node {
        // Leaves returned above.
        Node::Leaf(_) => Err(corrupt(pgno, "a leaf where an interior node was read")),
        Node::Interior { cells, right } => {
            let idx = child_index(cells, key, order);
            let child = child_at(cells, *right, idx);
            let (existed, mut placed) = modify(p, child, key, op, cfg, order, depth + 1)?;
            // This node's cells, copied once it changes.
            let mut copied = None;
            if let Some(ov) = placed.overflow.take() {
                // The child overflows (`spread`): its siblings take the
                // cells, or it splits.
                let (mut cells, right) = (cells.clone(), *right);
                let appended = idx == cells.len();
                // An append at the end of the rightmost leaf splits
                // without sharing (nor does SQLite's `balance_quick`):
                // sharing would fill the left sibling to its last byte,
                // and every later update of its cells would overflow
                // it, where the split keeps the format's slack there.
                let quick = appended && ov.appended && ov.node.is_leaf();
                let shared = match quick {
                    true => Some(ov.node),
                    false => spread(p, &mut cells, right, idx, ov.node, order)?,
                };
                match shared {
                    None => {
                        let node = Node::Interior { cells, right };
                        let placed = store(p, pgno, node, appended, depth == 0, cfg, order)?;
                        return Ok((existed, placed));
                    }
                    // A split changes this node as any other child's
                    // split does (below: one cell more, one child moved);
                    // a spread that gives up leaves the copy unchanged.
                    Some(n) => {
                        let append = Append::from(ov.appended);
                        placed = split_node(p, child, n, append, false, cfg, order)?;
                        copied = Some(cells);
                    }
                }
            }
            let split = placed.split.is_some();
            let moved = split || placed.first != child;
            let under = match !split && !placed.settled && matches!(op, Op::Delete) && existed {
                true => underflows(p, cells, *right, idx, cfg, order)?,
                false => None,
            };
            let may_rebalance = under.is_some();
            if !moved && under == Some(true) && idx < cells.len() {
                // An emptied leaf that is not the right child goes, with
                // its separator: the next child takes its key range (it
                // held no key), and nothing else changes. No sibling is
                // rewritten, and the pager may patch this node instead of
                // encoding every cell.
                let mut cells = cells.clone();
                give_back(p, child, cfg)?;
                let gone = cells.remove(idx);
                free_key(p, &gone.key)?;
                let change = LeafChange::Dropped(idx);
                let node = Node::Interior {
                    cells,
                    right: *right,
                };
                let placed =
                    put_hinted(p, pgno, node, change, true, Append::No, depth, cfg, order)?;
                return Ok((existed, placed));
            }
            if !moved && !may_rebalance {
                // The child changed in place: this node stays as it is
                // (no copy of its cells on the common path), and so does
                // its fill: the parent has no underflow to check.
                let mut placed = Placed::at(pgno);
                placed.settled = true;
                return Ok((existed, placed));
            }
            let (mut cells, mut right) = (copied.unwrap_or_else(|| cells.clone()), *right);
            let appended = idx == cells.len();
            let change = match split {
                true => LeafChange::Split(idx),
                false => LeafChange::Child(idx),
            };
            if moved {
                absorb(&mut cells, &mut right, idx, placed);
            }
            let rebalanced = match may_rebalance {
                true => rebalance(p, &mut cells, &mut right, idx, cfg, order)?,
                false => Rebalanced::No,
            };
            if !moved && rebalanced == Rebalanced::No {
                return Ok((existed, Placed::at(pgno)));
            }
            let node = Node::Interior { cells, right };
            let placed = if let (false, Rebalanced::Dropped(j)) = (moved, rebalanced) {
                // Only separator `j` and its child went (merged into the
                // next child): the pager may patch this node.
                let change = LeafChange::Dropped(j);
                put_hinted(p, pgno, node, change, true, Append::No, depth, cfg, order)?
            } else if rebalanced != Rebalanced::No {
                store(p, pgno, node, appended, depth == 0, cfg, order)?
            } else {
                // One child moved (and split, maybe): the pager may patch
                // the committed page instead of encoding every cell. A moved
                // child takes no more room.
                let no_larger = !split;
                let append = Append::from(appended);
                put_hinted(p, pgno, node, change, no_larger, append, depth, cfg, order)?
            };
            Ok((existed, placed))
        }
    }
}

/// [`modify`] at the leaf `pgno` (its node `node`; `key`'s position in
/// it, `pos`): the cells are the pager's to hand over ([`PageWrite::leaf_to_modify`]).
fn modify_leaf<P: PageWrite + ?Sized>(
    p: &mut P,
    (pgno, node): (Pgno, Arc<Node>),
    (key, pos): (&[u8], std::result::Result<usize, usize>),
    op: &mut Op,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
    depth: usize,
) -> Result<(bool, Placed)> {
    match (op, pos) {
        (Op::Put(v), Ok(i)) => {
            let mut cells = p.leaf_to_modify(pgno, node)?;
            let new = v.take().expect("value consumed once");
            let before = p.format().leaf_cell_size(&cells[i]);
            let old = std::mem::replace(&mut cells[i].value, new);
            let no_larger = p.format().leaf_cell_size(&cells[i]) <= before;
            free_value(p, &old)?;
            p.discard_value(old);
            let last = i + 1 == cells.len();
            let (node, change) = (Node::Leaf(cells), LeafChange::Value(i));
            let append = Append::from(last);
            let placed = put_hinted(p, pgno, node, change, no_larger, append, depth, cfg, order)?;
            Ok((true, placed))
        }
        (Op::Put(v), Err(i)) => {
            let key = own_key(p, key.into())?;
            // Asked before the cells are handed over, and only for an
            // append (the one case that can leave the page unwritten).
            let appended = match i == node.len() {
                false => Append::No,
                true if p.unwritten(pgno) => Append::OntoCommitted,
                true => Append::Yes,
            };
            let mut cells = p.leaf_to_modify(pgno, node)?;
            cells.insert(
                i,
                LeafCell {
                    key,
                    value: v.take().expect("value consumed once"),
                },
            );
            let (node, change) = (Node::Leaf(cells), LeafChange::Inserted(i));
            let placed = put_hinted(p, pgno, node, change, false, appended, depth, cfg, order)?;
            Ok((false, placed))
        }
        (Op::Delete, Ok(i)) => {
            let mut cells = p.leaf_to_modify(pgno, node)?;
            let c = cells.remove(i);
            free_key(p, &c.key)?;
            free_value(p, &c.value)?;
            p.discard_value(c.value);
            // A merge or redistribution that follows puts the page again
            // (or frees it), which ends the hint.
            let (node, change) = (Node::Leaf(cells), LeafChange::Removed(i));
            let placed = put_hinted(p, pgno, node, change, true, Append::No, depth, cfg, order)?;
            Ok((true, placed))
        }
        (Op::Delete, Err(_)) => Ok((false, Placed::at(pgno))),
    }
}

/// Put `node` at `pgno` as the node the tree read there, one `change`
/// away (the pager may patch the committed page: [`PageWrite::put_changed`];
/// `no_larger`: the node takes no more room than that one), then move or
/// split what did not fit there, and note the change if it stayed whole.
#[allow(clippy::too_many_arguments)]
fn put_hinted<P: PageWrite + ?Sized>(
    p: &mut P,
    pgno: Pgno,
    node: Node,
    change: LeafChange,
    no_larger: bool,
    append: Append,
    depth: usize,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<Placed> {
    let rest = p.put_changed(pgno, node, change, no_larger)?;
    let placed = place(p, pgno, rest, append, depth == 0, cfg, order)?;
    // The node stayed at `pgno` whole: the pager learns it is one
    // `change` away from the node the tree read ([`PageWrite::note_change`]).
    if placed.first == pgno && placed.split.is_none() {
        p.note_change(pgno, change);
    }
    Ok(placed)
}

/// Whether child `idx` underflows after a delete so that [`rebalance`]
/// has work: `Some(true)` if it is an empty leaf (always dropped or
/// merged).
fn underflows<P: PageWrite + ?Sized>(
    p: &P,
    cells: &[InteriorCell],
    right: Pgno,
    idx: usize,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<Option<bool>> {
    if cells.is_empty() {
        return Ok(None);
    }
    let cnode = p.node(child_at(cells, right, idx), order)?;
    let cap = p.format().capacity(p.page_size());
    let empty_leaf = matches!(&*cnode, Node::Leaf(c) if c.is_empty());
    let underflow = cnode.is_empty() || used_below(p, &cnode, cap / 4);
    Ok((empty_leaf || (underflow && (cfg.merge || cfg.redistribute))).then_some(empty_leaf))
}

/// What [`rebalance`] did to the parent's cells.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rebalanced {
    /// Nothing.
    No,
    /// Cell `j` (a separator and its child) went, and nothing else
    /// changed: [`LeafChange::Dropped`].
    Dropped(usize),
    /// Separators or children changed otherwise.
    Changed,
}

/// After a delete below child `idx`, merge or redistribute it with a
/// sibling if it underflows.
fn rebalance<P: PageWrite + ?Sized>(
    p: &mut P,
    cells: &mut Vec<InteriorCell>,
    right: &mut Pgno,
    idx: usize,
    cfg: &TreeConfig,
    order: &dyn KeyOrder,
) -> Result<Rebalanced> {
    let Some(empty_leaf) = underflows(p, cells, *right, idx, cfg, order)? else {
        return Ok(Rebalanced::No);
    };
    // Pair (j, j + 1) with separator cells[j].key.
    let j = if idx > 0 { idx - 1 } else { 0 };
    let a = child_at(cells, *right, j);
    let b = child_at(cells, *right, j + 1);
    if empty_leaf && idx == j + 1 {
        // The emptied leaf is `b` (the right child, or a child that moved:
        // `modify` drops one that stayed in place otherwise): `a` keeps its
        // cells as they are, unwritten, and takes `b`'s place.
        give_back(p, b, cfg)?;
        let gone = cells.remove(j);
        free_key(p, &gone.key)?;
        match cells.get_mut(j) {
            Some(c) => c.child = a,
            None => *right = a,
        }
        return Ok(Rebalanced::Changed);
    }
    let (an, bn) = ((*p.node(a, order)?).clone(), (*p.node(b, order)?).clone());
    let sep = cells[j].key.clone();
    let merged = match (&an, &bn) {
        (Node::Leaf(x), Node::Leaf(y)) => Node::Leaf(x.iter().chain(y).cloned().collect()),
        (
            Node::Interior {
                cells: x,
                right: xr,
            },
            Node::Interior {
                cells: y,
                right: yr,
            },
        ) => {
            let mut c = x.clone();
            c.push(InteriorCell {
                key: sep.clone(),
                child: *xr,
            });
            c.extend(y.iter().cloned());
            Node::Interior {
                cells: c,
                right: *yr,
            }
        }
        _ => return Err(corrupt(a, "siblings at different depths")),
    };
    if cfg.merge || empty_leaf {
        // Merge into `b` when it takes the cells in place: the parent then
        // loses only cell j, `a` with it (a change the pager may patch,
        // where any other rewrites every cell of the parent). Else into
        // `a`, else into a new page (in-page formats keep a page's
        // committed version: it takes the other's cells only into its
        // free room).
        if p.fits(b, &merged)? {
            // An empty leaf `a` leaves `b` as it stands.
            if !matches!(&an, Node::Leaf(c) if c.is_empty()) {
                p.put_node(b, merged)?;
            }
            give_back(p, a, cfg)?;
            let gone = cells.remove(j);
            if an.is_leaf() {
                free_key(p, &gone.key)?;
            }
            return Ok(Rebalanced::Dropped(j));
        }
        let target = if p.fits(a, &merged)? {
            Some(a)
        } else if p.fits_fresh(&merged) {
            Some(p.allocate()?)
        } else {
            None
        };
        if let Some(t) = target {
            p.put_node(t, merged)?;
            give_back(p, b, cfg)?;
            if t != a {
                give_back(p, a, cfg)?;
            }
            // Merged leaves need no separator; merged interior nodes took
            // it down.
            let gone = cells.remove(j);
            if an.is_leaf() {
                free_key(p, &gone.key)?;
            }
            if j < cells.len() {
                cells[j].child = t;
            } else {
                *right = t;
            }
            return Ok(Rebalanced::Changed);
        }
    }
    if !cfg.redistribute {
        return Ok(Rebalanced::No);
    }
    let f = p.format();
    let (left, new_right, new_sep) = match merged {
        Node::Leaf(mut all) => {
            let sizes: Vec<usize> = all.iter().map(|c| f.leaf_cell_size(c)).collect();
            let m = split_point(&sizes);
            let r = all.split_off(m);
            let s = separator(&all.last().expect("left").key, &r[0].key, order);
            (Node::Leaf(all), Node::Leaf(r), s)
        }
        Node::Interior { cells: all, .. } if all.len() < 3 => return Ok(Rebalanced::No),
        Node::Interior {
            cells: mut all,
            right: rr,
        } => {
            let sizes: Vec<usize> = all.iter().map(|c| f.interior_cell_size(c)).collect();
            let m = split_point(&sizes).clamp(1, all.len().saturating_sub(2).max(1));
            let r = all.split_off(m + 1);
            let mid = all.pop().expect("middle");
            (
                Node::Interior {
                    cells: all,
                    right: mid.child,
                },
                Node::Interior {
                    cells: r,
                    right: rr,
                },
                mid.key,
            )
        }
    };
    if !p.fits(a, &left)? || !p.fits(b, &new_right)? {
        return Ok(Rebalanced::No);
    }
    let leaf = left.is_leaf();
    p.put_node(a, left)?;
    p.put_node(b, new_right)?;
    // Leaves get a new separator; interior nodes moved the old one down
    // and a middle key up.
    if leaf {
        free_key(p, &cells[j].key)?;
        cells[j].key = own_key(p, new_sep)?;
    } else {
        cells[j].key = new_sep;
    }
    Ok(Rebalanced::Changed)
}
