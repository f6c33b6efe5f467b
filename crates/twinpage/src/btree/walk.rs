//! The integrity check: walks the catalog, every table tree, every
//! overflow chain (of values and of overflowing keys, leaf and separator)
//! and the free list, and verifies that together they cover pages
//! 2..=page_count exactly once.

use super::{overflow_pages, MAX_DEPTH};
use crate::base::Header;
use crate::base::{Error, KeyOrder, KeyOrders, Pgno, Result, BYTEWISE};
use crate::node::{Bytes, Node, Value};
use crate::page::{PageRead, PageRole};
use std::fmt;
use std::sync::Arc;

/// What the check counted.
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
    /// Problems found so far; `None`: stop at the first (reachability).
    problems: Option<Vec<Error>>,
}

/// Say what the damaged page is (the check lists every problem; each
/// should tell what the page was for).
fn as_role(e: Error, role: &str) -> Error {
    match e {
        Error::Corruption { file, page, what } if !what.starts_with(role) => Error::Corruption {
            file,
            page,
            what: format!("{role}: {what}"),
        },
        e => e,
    }
}

fn bad(pgno: Pgno, what: impl Into<String>) -> Error {
    Error::corrupt("database", pgno, what)
}

impl<P: PageRead + ?Sized> Walker<'_, P> {
    /// Record `r`'s error and go on (check), or pass it up (reachability).
    fn note<T>(&mut self, r: Result<T>) -> Result<Option<T>> {
        match (r, &mut self.problems) {
            (Ok(v), _) => Ok(Some(v)),
            (Err(e), Some(list)) => {
                list.push(e);
                Ok(None)
            }
            (Err(e), None) => Err(e),
        }
    }

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

    /// Claim the pages of an overflow chain of `len` bytes at `head`
    /// (`what` names it in messages); a damaged chain is recorded.
    fn chain(&mut self, head: Pgno, len: u64, what: impl FnOnce() -> String) -> Result<()> {
        let chain = overflow_pages(self.p, head, len).map_err(|e| as_role(e, &what()));
        for pg in self.note(chain)?.unwrap_or_default() {
            let claimed = self.claim(pg, "overflow");
            if self.note(claimed)?.is_some() {
                self.report.overflow_pages += 1;
            }
        }
        Ok(())
    }

    /// Claim the chain of an overflowing key.
    fn key_chain(&mut self, key: &Bytes, pgno: Pgno, i: usize) -> Result<()> {
        match key.chain() {
            Some(c) => self.chain(c.head, c.tail_len(), || {
                format!("key overflow chain of page {pgno} cell {i}")
            }),
            None => Ok(()),
        }
    }

    /// Walk a tree whose keys follow `order`; keys must lie in [lo, hi).
    /// Returns the depth.
    #[allow(clippy::too_many_arguments)]
    fn tree(
        &mut self,
        pgno: Pgno,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: usize,
        leaves: &mut Vec<(Vec<u8>, Vec<u8>)>,
        collect: bool,
        order: &dyn KeyOrder,
    ) -> Result<usize> {
        if depth > MAX_DEPTH {
            return Err(bad(pgno, "tree deeper than the maximum"));
        }
        self.claim(pgno, "tree")?;
        self.report.tree_pages += 1;
        let node = self
            .p
            .node(pgno, order)
            .map_err(|e| as_role(e, "tree page"))?;
        if self.problems.is_some() {
            // The check also tests the bytes the decoded version does not
            // use (an in-page format's other version, free space).
            let verified = self
                .p
                .verify_page(pgno, PageRole::Tree, order)
                .map_err(|e| as_role(e, "tree page"));
            self.note(verified)?;
        }
        let in_bounds = |k: &[u8]| {
            lo.is_none_or(|l| order.compare(k, l).is_ge())
                && hi.is_none_or(|h| order.compare(k, h).is_lt())
        };
        let ascending = |a: &[u8], b: &[u8]| order.compare(a, b).is_lt();
        match &*node {
            Node::Leaf(cells) => {
                for (i, c) in cells.iter().enumerate() {
                    if i > 0 && !ascending(&cells[i - 1].key, &c.key) {
                        return Err(bad(pgno, format!("leaf keys out of order at cell {i}")));
                    }
                    if !in_bounds(&c.key) {
                        return Err(bad(
                            pgno,
                            format!("leaf key at cell {i} outside its parent's separators"),
                        ));
                    }
                    self.key_chain(&c.key, pgno, i)?;
                    if let Value::Overflow { len, head } = &c.value {
                        self.chain(*head, *len, || {
                            format!("overflow chain of leaf {pgno} cell {i}")
                        })?;
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
                    if i > 0 && !ascending(&cells[i - 1].key, &c.key) {
                        return Err(bad(pgno, format!("separators out of order at cell {i}")));
                    }
                    if !in_bounds(&c.key) && hi.is_none_or(|h| c.key.as_slice() != h) {
                        return Err(bad(
                            pgno,
                            format!("separator {i} outside its parent's range"),
                        ));
                    }
                    self.key_chain(&c.key, pgno, i)?;
                    // A damaged subtree is reported and skipped; its
                    // siblings are still checked.
                    let sub = self.tree(
                        c.child,
                        prev,
                        Some(&c.key),
                        depth + 1,
                        leaves,
                        collect,
                        order,
                    );
                    if let Some(d) = self.note(sub)? {
                        if *child_depth.get_or_insert(d) != d {
                            return Err(bad(pgno, "children at different depths"));
                        }
                    }
                    prev = Some(&c.key);
                }
                let sub = self.tree(*right, prev, hi, depth + 1, leaves, collect, order);
                let d = match self.note(sub)? {
                    Some(d) => d,
                    None => child_depth.unwrap_or(1),
                };
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
pub fn reachable<P: PageRead + ?Sized>(
    p: &P,
    header: &Header,
    orders: Option<&dyn KeyOrders>,
) -> Result<Vec<bool>> {
    let mut w = Walker {
        p,
        owner: vec![0u8; header.page_count as usize + 1],
        report: CheckReport::default(),
        problems: None,
    };
    walk_trees(&mut w, header, orders)?;
    Ok(w.owner.iter().map(|&o| o != 0).collect())
}

/// A catalog entry's root page and key order: the value is the root page
/// (u32), then the spec of the table's key order (empty: bytewise).
fn catalog_entry(
    catalog: Pgno,
    name: &[u8],
    v: &[u8],
    orders: Option<&dyn KeyOrders>,
) -> Result<(Pgno, Arc<dyn KeyOrder>)> {
    let what = || String::from_utf8_lossy(name).into_owned();
    let Some((root, spec)) = v.split_first_chunk::<4>() else {
        return Err(bad(
            catalog,
            format!("catalog entry {:?} is not a page number", what()),
        ));
    };
    let root = u32::from_be_bytes(*root);
    if spec.is_empty() {
        return Ok((root, Arc::new(crate::base::Bytewise)));
    }
    match orders {
        Some(o) => o.resolve(spec).map(|o| (root, o)).map_err(|e| {
            bad(
                root,
                format!("table {:?}: its key order cannot be resolved: {e}", what()),
            )
        }),
        None => Err(bad(
            root,
            format!(
                "table {:?} has its own key order; open the database with its key orders to \
                 check it",
                what()
            ),
        )),
    }
}

fn walk_trees<P: PageRead + ?Sized>(
    w: &mut Walker<'_, P>,
    header: &Header,
    orders: Option<&dyn KeyOrders>,
) -> Result<()> {
    let mut catalog = Vec::new();
    let walked = w.tree(
        header.catalog_root,
        None,
        None,
        0,
        &mut catalog,
        true,
        &BYTEWISE,
    );
    w.report.max_depth = w.note(walked)?.unwrap_or(0);
    // Catalog entries are counted as keys while walking; they are not rows.
    w.report.keys = w.report.keys.saturating_sub(catalog.len() as u64);
    for (name, v) in &catalog {
        let entry = catalog_entry(header.catalog_root, name, v, orders);
        let Some((root, order)) = w.note(entry)? else {
            continue;
        };
        let walked = w.tree(root, None, None, 0, &mut Vec::new(), false, &*order);
        if let Some(d) = w.note(walked)? {
            w.report.max_depth = w.report.max_depth.max(d);
        }
        w.report.tables += 1;
    }
    Ok(())
}

/// Check the state `p` sees, described by `header`: `Ok` if it is intact,
/// otherwise a corruption error naming the first damaged page and listing
/// every problem found ([`check_all`] gives them one by one).
///
/// Tables with their own key order are checked in it, resolved from the
/// spec in the catalog through `orders`.
pub fn check<P: PageRead + ?Sized>(
    p: &P,
    header: &Header,
    orders: Option<&dyn KeyOrders>,
) -> Result<CheckReport> {
    let (report, mut problems) = check_all(p, header, orders);
    // An I/O error is not damage: pass it on as itself.
    if let Some(i) = problems.iter().position(|e| !e.is_corruption()) {
        return Err(problems.swap_remove(i));
    }
    let Some(first) = problems.first() else {
        return Ok(report);
    };
    const SHOWN: usize = 20;
    let page = match first {
        Error::Corruption { page, .. } => *page,
        _ => 0,
    };
    let mut what = format!("{} problem(s): ", problems.len());
    for (i, e) in problems.iter().take(SHOWN).enumerate() {
        if i > 0 {
            what.push_str("; ");
        }
        what.push_str(&e.to_string());
    }
    if problems.len() > SHOWN {
        what.push_str(&format!("; and {} more", problems.len() - SHOWN));
    }
    Err(Error::corrupt("database", page, what))
}

/// Check the state `p` sees and return every problem found, not just the
/// first: a damaged subtree, overflow chain or free-list trunk is reported
/// and skipped, and the walk goes on with the rest.
pub fn check_all<P: PageRead + ?Sized>(
    p: &P,
    header: &Header,
    orders: Option<&dyn KeyOrders>,
) -> (CheckReport, Vec<Error>) {
    let n = header.page_count as usize;
    let mut w = Walker {
        p,
        owner: vec![0u8; n + 1],
        report: CheckReport {
            page_count: header.page_count,
            ..Default::default()
        },
        problems: Some(Vec::new()),
    };
    // With `problems` set, the walk records every error instead of
    // returning it; what it still returns is a structural one.
    if let Err(e) = check_walk(&mut w, header, orders) {
        w.problems.get_or_insert_with(Vec::new).push(e);
    }
    let problems = w.problems.take().unwrap_or_default();
    (w.report, problems)
}

fn check_walk<P: PageRead + ?Sized>(
    w: &mut Walker<'_, P>,
    header: &Header,
    orders: Option<&dyn KeyOrders>,
) -> Result<()> {
    let n = header.page_count as usize;
    let damaged_before = w.problems.as_ref().map_or(0, Vec::len);
    let verified = w.p.verify_page(1, PageRole::Header, &BYTEWISE);
    w.note(verified)?;
    walk_trees(w, header, orders)?;
    let trees_damaged = w.problems.as_ref().map_or(0, Vec::len) > damaged_before;
    // Free list: in memory (in-page schemes), or a trunk chain plus leaves.
    let mut free = 0u64;
    if let Some(list) = w.p.free_pages() {
        for l in list {
            let claimed = w.claim(l, "free-list");
            if w.note(claimed)?.is_some() {
                free += 1;
                let verified = w.p.verify_page(l, PageRole::Free, &BYTEWISE);
                w.note(verified)?;
            }
        }
    }
    let mut trunk = header.freelist_head;
    let mut hops = 0usize;
    while trunk != 0 && hops <= n {
        hops += 1;
        let claimed = w.claim(trunk, "free-list trunk");
        if w.note(claimed)?.is_none() {
            break;
        }
        free += 1;
        let parsed =
            w.p.raw(trunk)
                .map_err(|e| as_role(e, "free-list trunk"))
                .and_then(|raw| {
                    crate::base::freelist::parse_trunk(&raw, trunk, header.page_count, "database")
                });
        let Some((next, leaves)) = w.note(parsed)? else {
            break;
        };
        for l in leaves {
            let claimed = w.claim(l, "free-list leaf");
            if w.note(claimed)?.is_some() {
                free += 1;
                let verified = w.p.verify_page(l, PageRole::Free, &BYTEWISE);
                w.note(verified)?;
            }
        }
        trunk = next;
    }
    let complete = w.problems.as_ref().is_none_or(Vec::is_empty);
    if complete && free != header.freelist_count as u64 {
        let e = bad(
            1,
            format!(
                "header counts {} free pages, the free list holds {free}",
                header.freelist_count
            ),
        );
        w.note::<()>(Err(e))?;
    }
    w.report.free_pages = free;
    // Pages below a damaged subtree are unreachable too: name the first
    // orphan and count them, once.
    let orphans: Vec<usize> = (2..=n).filter(|&i| w.owner[i] == 0).collect();
    if let Some(&first) = orphans.first() {
        let why = if trees_damaged {
            " (some may belong to the damaged subtrees above)"
        } else {
            ""
        };
        let e = bad(
            first as Pgno,
            format!(
                "{} page(s) neither in a tree nor on the free list{why}",
                orphans.len()
            ),
        );
        w.note::<()>(Err(e))?;
    }
    Ok(())
}
