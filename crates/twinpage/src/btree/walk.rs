//! The integrity check: walks the catalog, every table tree, every
//! overflow chain and the free list, and verifies that together they cover
//! pages 2..=page_count exactly once.

use super::{overflow_pages, MAX_DEPTH};
use crate::base::Header;
use crate::base::{Error, Pgno, Result};
use crate::node::{Node, Value};
use crate::page::PageRead;
use std::fmt;

/// What the check found (it returns an error on the first problem).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Tables in the catalog.
    pub tables: usize,
    /// Keys over all tables.
    pub keys: u64,
    /// Tree pages (catalog included).
    pub tree_pages: u64,
    /// Overflow pages.
    pub overflow_pages: u64,
    /// Free-list pages.
    pub free_pages: u64,
    /// Deepest tree (a single leaf has depth 1).
    pub max_depth: usize,
    /// Pages in the file.
    pub page_count: u32,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ok: {} tables, {} keys, {} pages ({} tree, {} overflow, {} free, 1 header), max depth {}",
            self.tables,
            self.keys,
            self.page_count,
            self.tree_pages,
            self.overflow_pages,
            self.free_pages,
            self.max_depth
        )
    }
}

struct Walker<'a, P: PageRead + ?Sized> {
    p: &'a P,
    owner: Vec<u8>,
    report: CheckReport,
}

fn bad(pgno: Pgno, what: impl Into<String>) -> Error {
    Error::corrupt("database", pgno, what)
}

impl<P: PageRead + ?Sized> Walker<'_, P> {
    fn claim(&mut self, pgno: Pgno, what: &str) -> Result<()> {
        if pgno < 2 || pgno as usize >= self.owner.len() {
            return Err(bad(pgno, format!("{what} page number out of range")));
        }
        if self.owner[pgno as usize] != 0 {
            return Err(bad(pgno, format!("{what} page is referenced twice")));
        }
        self.owner[pgno as usize] = 1;
        Ok(())
    }

    /// Walk a tree; keys must lie in [lo, hi). Returns the depth.
    fn tree(
        &mut self,
        pgno: Pgno,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: usize,
        leaves: &mut Vec<(Vec<u8>, Vec<u8>)>,
        collect: bool,
    ) -> Result<usize> {
        if depth > MAX_DEPTH {
            return Err(bad(pgno, "tree deeper than the maximum"));
        }
        self.claim(pgno, "tree")?;
        self.report.tree_pages += 1;
        let node = self.p.node(pgno)?;
        let in_bounds = |k: &[u8]| lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h);
        match &*node {
            Node::Leaf(cells) => {
                for (i, c) in cells.iter().enumerate() {
                    if i > 0 && cells[i - 1].key >= c.key {
                        return Err(bad(pgno, format!("leaf keys out of order at cell {i}")));
                    }
                    if !in_bounds(&c.key) {
                        return Err(bad(
                            pgno,
                            format!("leaf key at cell {i} outside its parent's separators"),
                        ));
                    }
                    if let Value::Overflow { len, head } = &c.value {
                        for pg in overflow_pages(self.p, *head, *len)? {
                            self.claim(pg, "overflow")?;
                            self.report.overflow_pages += 1;
                        }
                    }
                    if collect {
                        let v = match &c.value {
                            Value::Inline(v) => v.to_vec(),
                            Value::Overflow { .. } => Vec::new(),
                        };
                        leaves.push((c.key.to_vec(), v));
                    }
                    self.report.keys += 1;
                }
                Ok(1)
            }
            Node::Interior { cells, right } => {
                let mut child_depth = None;
                let mut prev: Option<&[u8]> = lo;
                for (i, c) in cells.iter().enumerate() {
                    if i > 0 && cells[i - 1].key >= c.key {
                        return Err(bad(pgno, format!("separators out of order at cell {i}")));
                    }
                    if !in_bounds(&c.key) && hi.is_none_or(|h| c.key.as_slice() != h) {
                        return Err(bad(
                            pgno,
                            format!("separator {i} outside its parent's range"),
                        ));
                    }
                    let d = self.tree(c.child, prev, Some(&c.key), depth + 1, leaves, collect)?;
                    if *child_depth.get_or_insert(d) != d {
                        return Err(bad(pgno, "children at different depths"));
                    }
                    prev = Some(&c.key);
                }
                let d = self.tree(*right, prev, hi, depth + 1, leaves, collect)?;
                if *child_depth.get_or_insert(d) != d {
                    return Err(bad(pgno, "children at different depths"));
                }
                Ok(d + 1)
            }
        }
    }
}

/// Pages reachable from the catalog: every tree page and overflow page
/// (indexed by page number, `0..=page_count`). Used to rebuild an
/// in-memory free list after a crash.
pub fn reachable<P: PageRead + ?Sized>(p: &P, header: &Header) -> Result<Vec<bool>> {
    let mut w = Walker {
        p,
        owner: vec![0u8; header.page_count as usize + 1],
        report: CheckReport::default(),
    };
    walk_trees(&mut w, header)?;
    Ok(w.owner.iter().map(|&o| o != 0).collect())
}

fn walk_trees<P: PageRead + ?Sized>(w: &mut Walker<'_, P>, header: &Header) -> Result<()> {
    let mut catalog = Vec::new();
    let d = w.tree(header.catalog_root, None, None, 0, &mut catalog, true)?;
    w.report.max_depth = d;
    for (name, v) in &catalog {
        let arr: [u8; 4] = v.as_slice().try_into().map_err(|_| {
            bad(
                header.catalog_root,
                format!(
                    "catalog entry {:?} is not a page number",
                    String::from_utf8_lossy(name)
                ),
            )
        })?;
        let root = u32::from_be_bytes(arr);
        let d = w.tree(root, None, None, 0, &mut Vec::new(), false)?;
        w.report.max_depth = w.report.max_depth.max(d);
        w.report.tables += 1;
    }
    w.report.keys -= catalog.len() as u64;
    Ok(())
}

/// Check the state `p` sees, described by `header`.
pub fn check<P: PageRead + ?Sized>(p: &P, header: &Header) -> Result<CheckReport> {
    let n = header.page_count as usize;
    let mut w = Walker {
        p,
        owner: vec![0u8; n + 1],
        report: CheckReport {
            page_count: header.page_count,
            ..Default::default()
        },
    };
    walk_trees(&mut w, header)?;
    // Free list: in memory (in-page schemes), or a trunk chain plus leaves.
    let mut free = 0u64;
    if let Some(list) = p.free_pages() {
        for l in list {
            w.claim(l, "free-list")?;
            free += 1;
        }
    }
    let mut trunk = header.freelist_head;
    while trunk != 0 {
        w.claim(trunk, "free-list trunk")?;
        free += 1;
        let raw = p.raw(trunk)?;
        let (next, leaves) =
            crate::base::freelist::parse_trunk(&raw, trunk, header.page_count, "database")?;
        for l in leaves {
            w.claim(l, "free-list leaf")?;
            free += 1;
        }
        trunk = next;
    }
    if free != header.freelist_count as u64 {
        return Err(bad(
            1,
            format!(
                "header counts {} free pages, the free list holds {free}",
                header.freelist_count
            ),
        ));
    }
    w.report.free_pages = free;
    if let Some(orphan) = (2..=n).find(|&i| w.owner[i] == 0) {
        return Err(bad(
            orphan as Pgno,
            "page is neither in a tree nor on the free list",
        ));
    }
    Ok(w.report)
}
