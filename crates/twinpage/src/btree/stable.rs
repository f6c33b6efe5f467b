//! A cursor that stays valid while the transaction it reads changes the
//! tree, and row counts.
//!
//! [`Cursor`] remembers the path to its entry and the view's generation
//! ([`PageRead::generation`]) when it got there. A write transaction's
//! view moves to a new generation with every page it puts or frees; a
//! cursor that finds the generation moved finds its key again from the
//! root before it moves or reads. If its entry was deleted meanwhile it
//! lands on the next entry and the following [`Cursor::next`] stays there
//! (so a scan that deletes the row under it sees every other row once).
//! The view is passed to each call, so the cursor borrows nothing and the
//! transaction may be used in between.

use super::{child_at, read_value, MAX_DEPTH};
use crate::base::{Error, KeyOrder, Pgno, Result};
use crate::node::{Bytes, LeafCell, Node, Value};
use crate::page::PageRead;
use std::cmp::Ordering;
use std::sync::Arc;

/// A cursor over one tree (see the module documentation).
pub struct Cursor {
    root: Pgno,
    order: Arc<dyn KeyOrder>,
    /// Interior nodes on the path, with the index of the child taken.
    path: Vec<(Arc<Node>, usize)>,
    leaf: Option<Arc<Node>>,
    pos: usize,
    /// The key of the entry, kept to find it again after a change.
    key: Option<Bytes>,
    generation: u64,
    /// After finding its key again: 1 if it landed past a deleted entry
    /// (the next `next` stays), -1 if before it (the next `prev` stays).
    skip: i8,
}

/// Where the value of a cursor's entry lies ([`Cursor::value_in_place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueAt<'a> {
    /// Inline, in the cursor's leaf: the bytes stay valid (the cursor
    /// holds the leaf) until the cursor moves or finds its key again
    /// after a change.
    Inline(&'a [u8]),
    /// In an overflow chain of this many bytes: read it with
    /// [`Cursor::value_with`].
    Overflow(u64),
}

/// How a key compares with the target of a seek.
type Probe<'a> = &'a mut dyn FnMut(&[u8]) -> Ordering;

fn corrupt(pgno: Pgno, what: &str) -> Error {
    Error::corrupt("database", pgno, what)
}

impl Cursor {
    /// A cursor over the tree at `root`, whose keys follow `order`. It
    /// points at no entry until positioned.
    pub fn new(root: Pgno, order: Arc<dyn KeyOrder>) -> Cursor {
        Cursor {
            root,
            order,
            path: Vec::new(),
            leaf: None,
            pos: 0,
            key: None,
            generation: 0,
            skip: 0,
        }
    }

    /// The tree's root page.
    pub fn root(&self) -> Pgno {
        self.root
    }

    /// Forget the position.
    pub fn reset(&mut self) {
        self.path.clear();
        self.leaf = None;
        self.key = None;
        self.skip = 0;
    }

    /// True while the cursor points at an entry.
    pub fn is_valid(&self) -> bool {
        self.key.is_some()
    }

    fn leaf_len(&self) -> usize {
        self.leaf.as_ref().map_or(0, |n| n.len())
    }

    /// Take the entry at `self.pos` of the current leaf as the position.
    fn settle(&mut self, p: &dyn PageRead) -> bool {
        self.generation = p.generation();
        self.skip = 0;
        self.key = match self.leaf.as_deref() {
            Some(Node::Leaf(cells)) => cells.get(self.pos).map(|c| c.key.clone()),
            _ => None,
        };
        self.key.is_some()
    }

    /// Descend from the root choosing children with `pick` (None: an
    /// edge: leftmost, or rightmost if `last`) and stop at a leaf.
    fn descend(
        &mut self,
        p: &dyn PageRead,
        mut from: Pgno,
        probe: &mut Option<Probe<'_>>,
        last: bool,
    ) -> Result<()> {
        self.leaf = None;
        loop {
            if self.path.len() > MAX_DEPTH {
                return Err(corrupt(from, "tree deeper than the maximum"));
            }
            let node = p.node(from, &*self.order)?;
            match &*node {
                Node::Interior { cells, right } => {
                    let idx = match probe {
                        // The first child whose separator is above the target.
                        Some(f) => cells.partition_point(|c| f(&c.key).is_le()),
                        None if last => cells.len(),
                        None => 0,
                    };
                    from = child_at(cells, *right, idx);
                    self.path.push((node.clone(), idx));
                }
                Node::Leaf(cells) => {
                    self.pos = match probe {
                        Some(f) => cells.partition_point(|c| f(&c.key).is_lt()),
                        None if last => cells.len().saturating_sub(1),
                        None => 0,
                    };
                    self.leaf = Some(node.clone());
                    return Ok(());
                }
            }
        }
    }

    /// Move to the neighbouring leaf (`forward` or back); false at the end.
    fn step_leaf(&mut self, p: &dyn PageRead, forward: bool) -> Result<bool> {
        loop {
            let Some((node, idx)) = self.path.pop() else {
                return Ok(false);
            };
            let Node::Interior { cells, right } = &*node else {
                return Err(corrupt(self.root, "leaf on the interior path"));
            };
            let next = if forward {
                (idx < cells.len()).then_some(idx + 1)
            } else {
                idx.checked_sub(1)
            };
            if let Some(n) = next {
                let child = child_at(cells, *right, n);
                self.path.push((node.clone(), n));
                self.descend(p, child, &mut None, !forward)?;
                if self.leaf_len() > 0 {
                    return Ok(true);
                }
                // An empty leaf (only a root can be one): keep going.
            }
        }
    }

    /// Position at the first entry; false if the tree is empty.
    pub fn first(&mut self, p: &dyn PageRead) -> Result<bool> {
        self.reset();
        self.descend(p, self.root, &mut None, false)?;
        if self.leaf_len() == 0 && !self.step_leaf(p, true)? {
            self.reset();
            return Ok(false);
        }
        Ok(self.settle(p))
    }

    /// Position at the last entry; false if the tree is empty.
    pub fn last(&mut self, p: &dyn PageRead) -> Result<bool> {
        self.reset();
        self.descend(p, self.root, &mut None, true)?;
        if self.leaf_len() == 0 && !self.step_leaf(p, false)? {
            self.reset();
            return Ok(false);
        }
        Ok(self.settle(p))
    }

    /// Position near a target described by `probe` (the ordering of a key
    /// relative to the target; it must agree with the table's order): at
    /// the first entry not below the target, or at the last entry if all
    /// are below. Returns how that entry compares with the target
    /// (`Equal`: found), or `None` if the tree is empty.
    pub fn seek_by(
        &mut self,
        p: &dyn PageRead,
        probe: &mut dyn FnMut(&[u8]) -> Ordering,
    ) -> Result<Option<Ordering>> {
        self.reset();
        let mut f = Some(probe);
        self.descend(p, self.root, &mut f, false)?;
        let probe = f.expect("kept");
        if self.pos >= self.leaf_len() {
            // Every key of this leaf is below the target: the next leaf
            // holds the first one that is not.
            if !self.step_leaf(p, true)? {
                return self.last(p).map(|found| found.then_some(Ordering::Less));
            }
        }
        if !self.settle(p) {
            return Ok(None);
        }
        let key = self.key.clone().expect("settled");
        Ok(Some(probe(&key)))
    }

    /// [`Cursor::seek_by`] an exact key.
    pub fn seek(&mut self, p: &dyn PageRead, key: &[u8]) -> Result<Option<Ordering>> {
        let order = self.order.clone();
        self.seek_by(p, &mut |k| order.compare(k, key))
    }

    /// If the view changed since the cursor was positioned, find its key
    /// again (see the module documentation).
    fn revalidate(&mut self, p: &dyn PageRead) -> Result<()> {
        if self.generation == p.generation() {
            return Ok(());
        }
        let Some(key) = self.key.clone() else {
            return Ok(());
        };
        let found = self.seek(p, &key)?;
        self.skip = match found {
            Some(Ordering::Equal) | None => 0,
            Some(Ordering::Greater) => 1,
            Some(Ordering::Less) => -1,
        };
        Ok(())
    }

    /// Move to the next entry; false (and no position) at the end.
    pub fn next(&mut self, p: &dyn PageRead) -> Result<bool> {
        if !self.is_valid() {
            return Ok(false);
        }
        self.revalidate(p)?;
        if !self.is_valid() {
            return Ok(false);
        }
        if std::mem::take(&mut self.skip) > 0 {
            return Ok(true);
        }
        self.pos += 1;
        if self.pos >= self.leaf_len() && !self.step_leaf(p, true)? {
            self.reset();
            return Ok(false);
        }
        Ok(self.settle(p))
    }

    /// Move to the previous entry; false (and no position) at the start.
    pub fn prev(&mut self, p: &dyn PageRead) -> Result<bool> {
        if !self.is_valid() {
            return Ok(false);
        }
        self.revalidate(p)?;
        if !self.is_valid() {
            return Ok(false);
        }
        if std::mem::take(&mut self.skip) < 0 {
            return Ok(true);
        }
        if self.pos == 0 {
            if !self.step_leaf(p, false)? {
                self.reset();
                return Ok(false);
            }
        } else {
            self.pos -= 1;
        }
        Ok(self.settle(p))
    }

    /// The key of the entry (as of the last move: a key the transaction
    /// deleted since is still returned until the cursor moves).
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    /// The entry's cell in the cursor's leaf, found again after a change;
    /// `None` if the cursor points at no entry, or its entry was deleted.
    fn entry(&mut self, p: &dyn PageRead) -> Result<Option<&LeafCell>> {
        self.revalidate(p)?;
        if self.skip != 0 {
            return Ok(None);
        }
        match self.leaf.as_deref() {
            Some(Node::Leaf(cells)) => Ok(cells.get(self.pos)),
            _ => Ok(None),
        }
    }

    /// Run `f` on the value of the entry (an inline value without a copy);
    /// `None` if the cursor points at no entry, or its entry was deleted.
    pub fn value_with<T>(
        &mut self,
        p: &dyn PageRead,
        f: &mut dyn FnMut(&[u8]) -> T,
    ) -> Result<Option<T>> {
        let Some(c) = self.entry(p)? else {
            return Ok(None);
        };
        match &c.value {
            Value::Inline(v) => Ok(Some(f(v))),
            v => {
                let v = v.clone();
                Ok(Some(f(&read_value(p, &v)?)))
            }
        }
    }

    /// The value of the entry where it lies, without a copy (see
    /// [`ValueAt`]); `None` as for [`Cursor::value_with`].
    pub fn value_in_place(&mut self, p: &dyn PageRead) -> Result<Option<ValueAt<'_>>> {
        Ok(self.entry(p)?.map(|c| match &c.value {
            Value::Inline(v) => ValueAt::Inline(v.as_slice()),
            Value::Overflow { len, .. } => ValueAt::Overflow(*len),
        }))
    }

    /// The value of the entry (see [`Cursor::value_with`]).
    pub fn value(&mut self, p: &dyn PageRead) -> Result<Option<Vec<u8>>> {
        self.value_with(p, &mut |v| v.to_vec())
    }

    /// The length of the entry's value without reading an overflow chain.
    pub fn value_len(&mut self, p: &dyn PageRead) -> Result<Option<u64>> {
        Ok(self.entry(p)?.map(|c| match &c.value {
            Value::Inline(v) => v.len() as u64,
            Value::Overflow { len, .. } => *len,
        }))
    }
}

/// Number of entries in the tree at `root` (walks every leaf).
pub fn count<P: PageRead + ?Sized>(p: &P, root: Pgno, order: &dyn KeyOrder) -> Result<u64> {
    let mut n = 0u64;
    let mut stack = vec![(root, 0usize)];
    while let Some((pg, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(corrupt(pg, "tree deeper than the maximum"));
        }
        let node = p.node(pg, order)?;
        match &*node {
            Node::Leaf(c) => n += c.len() as u64,
            Node::Interior { .. } => {
                stack.extend(node.children().into_iter().map(|c| (c, depth + 1)))
            }
        }
    }
    Ok(n)
}

// `child_index` is the tree's own descent rule; the cursor's probe
// descent must agree with it for exact keys.
#[cfg(test)]
#[test]
fn probe_descent_agrees_with_child_index() {
    use crate::base::BYTEWISE;
    use crate::btree::child_index;
    use crate::node::InteriorCell;
    let cells: Vec<InteriorCell> = [b"c", b"f", b"k"]
        .iter()
        .enumerate()
        .map(|(i, k)| InteriorCell {
            key: k.as_slice().into(),
            child: 10 + i as u32,
        })
        .collect();
    for t in [b"a", b"c", b"d", b"f", b"z"] {
        let by_probe = cells.partition_point(|c| BYTEWISE.compare(&c.key, t).is_le());
        assert_eq!(by_probe, child_index(&cells, t, &BYTEWISE));
    }
}
