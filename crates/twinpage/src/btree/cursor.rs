//! Ordered range scans in both directions. The iterator keeps the path
//! from the root (no sibling pointers: shadowing and versioned formats
//! rewrite pages, and sibling links would force extra page writes).

use super::{child_at, child_index, read_value, MAX_DEPTH};
use crate::base::{Error, KeyOrder, Pgno, Result};
use crate::node::Node;
use crate::page::PageRead;
use std::ops::Bound;
use std::sync::Arc;

/// Iterator over `(key, value)` pairs of a key range.
pub struct RangeIter<'a, P: PageRead + ?Sized> {
    pages: &'a P,
    order: &'a dyn KeyOrder,
    /// Interior nodes on the path, with the index of the child taken.
    path: Vec<(Arc<Node>, usize)>,
    leaf: Option<Arc<Node>>,
    /// Next position in `leaf` (forward) or one past it (backward).
    pos: usize,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    reverse: bool,
    done: bool,
}

impl<'a, P: PageRead + ?Sized> RangeIter<'a, P> {
    /// Scan `root` between the bounds, ascending or (`reverse`) descending;
    /// the table's keys follow `order`.
    pub fn new(
        pages: &'a P,
        root: Pgno,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
        reverse: bool,
        order: &'a dyn KeyOrder,
    ) -> Result<Self> {
        let mut it = RangeIter {
            pages,
            order,
            path: Vec::new(),
            leaf: None,
            pos: 0,
            lower,
            upper,
            reverse,
            done: false,
        };
        it.seek(root)?;
        Ok(it)
    }

    /// Descend from `root` to the leaf where the scan starts.
    fn seek(&mut self, root: Pgno) -> Result<()> {
        let start: Option<Vec<u8>> = if self.reverse {
            match &self.upper {
                Bound::Included(k) | Bound::Excluded(k) => Some(k.clone()),
                Bound::Unbounded => None,
            }
        } else {
            match &self.lower {
                Bound::Included(k) | Bound::Excluded(k) => Some(k.clone()),
                Bound::Unbounded => None,
            }
        };
        let mut pgno = root;
        loop {
            if self.path.len() > MAX_DEPTH {
                return Err(Error::corrupt(
                    "database",
                    pgno,
                    "tree deeper than the maximum",
                ));
            }
            let node = self.pages.node(pgno, self.order)?;
            match &*node {
                Node::Interior { cells, right } => {
                    let idx = match &start {
                        Some(k) => child_index(cells, k, self.order),
                        None if self.reverse => cells.len(),
                        None => 0,
                    };
                    pgno = child_at(cells, *right, idx);
                    self.path.push((node.clone(), idx));
                }
                Node::Leaf(cells) => {
                    let o = self.order;
                    self.pos = match (&start, self.reverse) {
                        (None, false) => 0,
                        (None, true) => cells.len(),
                        (Some(k), false) => match &self.lower {
                            Bound::Excluded(_) => {
                                cells.partition_point(|c| o.compare(&c.key, k).is_le())
                            }
                            _ => cells.partition_point(|c| o.compare(&c.key, k).is_lt()),
                        },
                        (Some(k), true) => match &self.upper {
                            Bound::Excluded(_) => {
                                cells.partition_point(|c| o.compare(&c.key, k).is_lt())
                            }
                            _ => cells.partition_point(|c| o.compare(&c.key, k).is_le()),
                        },
                    };
                    self.leaf = Some(node.clone());
                    return Ok(());
                }
            }
        }
    }

    /// Move to the next leaf in scan order; false at the end of the tree.
    fn next_leaf(&mut self) -> Result<bool> {
        // Climb to the first ancestor with a child left to visit.
        loop {
            let Some((node, idx)) = self.path.pop() else {
                return Ok(false);
            };
            let Node::Interior { cells, right } = &*node else {
                return Err(Error::corrupt("database", 0, "leaf on the interior path"));
            };
            let next = if self.reverse {
                idx.checked_sub(1)
            } else if idx < cells.len() {
                Some(idx + 1)
            } else {
                None
            };
            if let Some(n) = next {
                let child = child_at(cells, *right, n);
                self.path.push((node.clone(), n));
                return self.descend_edge(child).map(|_| true);
            }
        }
    }

    /// Descend to the leftmost (or rightmost when reversed) leaf below.
    fn descend_edge(&mut self, mut pgno: Pgno) -> Result<()> {
        loop {
            if self.path.len() > MAX_DEPTH {
                return Err(Error::corrupt(
                    "database",
                    pgno,
                    "tree deeper than the maximum",
                ));
            }
            let node = self.pages.node(pgno, self.order)?;
            match &*node {
                Node::Interior { cells, right } => {
                    let idx = if self.reverse { cells.len() } else { 0 };
                    pgno = child_at(cells, *right, idx);
                    self.path.push((node.clone(), idx));
                }
                Node::Leaf(cells) => {
                    self.pos = if self.reverse { cells.len() } else { 0 };
                    self.leaf = Some(node.clone());
                    return Ok(());
                }
            }
        }
    }

    fn in_range(&self, key: &[u8]) -> bool {
        let o = self.order;
        if self.reverse {
            match &self.lower {
                Bound::Included(k) => o.compare(key, k).is_ge(),
                Bound::Excluded(k) => o.compare(key, k).is_gt(),
                Bound::Unbounded => true,
            }
        } else {
            match &self.upper {
                Bound::Included(k) => o.compare(key, k).is_le(),
                Bound::Excluded(k) => o.compare(key, k).is_lt(),
                Bound::Unbounded => true,
            }
        }
    }

    fn step(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        loop {
            let Some(leaf) = self.leaf.clone() else {
                return Ok(None);
            };
            let Node::Leaf(cells) = &*leaf else {
                return Ok(None);
            };
            let cell = if self.reverse {
                if self.pos > 0 {
                    self.pos -= 1;
                    Some(&cells[self.pos])
                } else {
                    None
                }
            } else if self.pos < cells.len() {
                self.pos += 1;
                Some(&cells[self.pos - 1])
            } else {
                None
            };
            match cell {
                Some(c) => {
                    if !self.in_range(&c.key) {
                        return Ok(None);
                    }
                    return Ok(Some((c.key.to_vec(), read_value(self.pages, &c.value)?)));
                }
                None => {
                    if !self.next_leaf()? {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

impl<P: PageRead + ?Sized> Iterator for RangeIter<'_, P> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(kv)) => Some(Ok(kv)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
