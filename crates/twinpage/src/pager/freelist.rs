//! The free list: trunk pages chained from the header, each listing free
//! leaf pages. Trunk layout (big-endian): `u32 next trunk`, `u32 count`,
//! then `count` u32 page numbers. Pages freed by a transaction join the
//! list only at its commit, so a transaction never reuses a page it freed
//! itself (in-page schemes rely on the old image staying intact).
//!
//! Modes that keep the previous committed state inside the database file
//! (DHL) cannot update trunks in place: a trunk rewritten at commit may be
//! a page the previous state still uses. For them the list is *volatile*
//! ([`crate::journal::Journal::volatile_free_list`]): it lives in memory
//! during a session, goes to trunk pages (all free, so safe to overwrite)
//! at a clean close, and is rebuilt by walking the trees after a crash.

use super::{Pager, WritePages};
use crate::base::freelist::{be, parse_trunk, trunk_capacity};
use crate::base::pgmap::PgnoSet;
use crate::base::{Error, Pgno, Result};
use crate::page::{PageRead, PageWrite};
use std::ops::Deref;
use std::sync::Arc;

/// A write transaction's in-memory free list: the committed list itself,
/// shared, until the transaction takes a page from it or adds one; then
/// a copy of its own without the pages held back for old readers (P9,
/// P13; the committed list includes them). Most single-row transactions
/// never copy it, so their cost does not grow with the list.
#[derive(Debug, Default)]
pub(crate) struct TxnFree {
    /// The committed list while it is unchanged, held pages included
    /// (`own` is then unused).
    shared: Option<Arc<Vec<Pgno>>>,
    own: Vec<Pgno>,
}

impl Clone for TxnFree {
    fn clone(&self) -> Self {
        TxnFree {
            shared: self.shared.clone(),
            own: self.own.clone(),
        }
    }

    /// Reuses `own`'s buffer (a rollback to a savepoint allocates none).
    fn clone_from(&mut self, source: &Self) {
        self.shared.clone_from(&source.shared);
        self.own.clone_from(&source.own);
    }
}

impl TxnFree {
    /// The committed list, shared.
    pub(crate) fn shared(list: Arc<Vec<Pgno>>) -> Self {
        TxnFree {
            shared: Some(list),
            own: Vec::new(),
        }
    }

    /// A list of the transaction's own (held pages excluded).
    pub(crate) fn owned(list: Vec<Pgno>) -> Self {
        TxnFree {
            shared: None,
            own: list,
        }
    }

    /// Every free page, `held` ones included.
    pub(crate) fn all_pages(&self, held: &PgnoSet) -> Vec<Pgno> {
        match &self.shared {
            Some(list) => list.to_vec(),
            None => self.own.iter().chain(held).copied().collect(),
        }
    }

    /// Whether no page is free but `held` ones.
    pub(crate) fn is_empty(&self, held: &PgnoSet) -> bool {
        match &self.shared {
            Some(list) => list.len() <= held.len(),
            None => self.own.is_empty(),
        }
    }

    /// The list to change: if still shared, copied into `buffer()` first,
    /// less the pages in `held`.
    pub(crate) fn changing(
        &mut self,
        buffer: impl FnOnce() -> Vec<Pgno>,
        held: &PgnoSet,
    ) -> &mut Vec<Pgno> {
        if let Some(list) = self.shared.take() {
            self.own = buffer();
            self.own.clear();
            match held.is_empty() {
                true => self.own.extend_from_slice(&list),
                false => self
                    .own
                    .extend(list.iter().copied().filter(|p| !held.contains(p))),
            }
        }
        &mut self.own
    }

    /// The transaction's own list, or `None` if it never changed the
    /// committed one.
    pub(crate) fn into_changed(self) -> Option<Vec<Pgno>> {
        self.shared.is_none().then_some(self.own)
    }

    /// The list as a vector of its own, less the pages in `held` (a copy
    /// if shared).
    pub(crate) fn into_vec(mut self, held: &PgnoSet) -> Vec<Pgno> {
        self.changing(Vec::new, held);
        self.own
    }
}

/// The buffer the committed list replaced at the last commit (for a
/// transaction's copy: none allocated per transaction).
fn spare_buffer(pager: &Pager) -> Vec<Pgno> {
    std::mem::take(&mut pager.shared.lock().free_spare)
}

fn corrupt<R: Deref<Target = Pager>>(wp: &WritePages<R>, pgno: Pgno, what: String) -> Error {
    Error::corrupt(wp.pager.db.path.display().to_string(), pgno, what)
}

/// Leaf slots per trunk page when the format reserves a tail.
fn capacity_for<R: Deref<Target = Pager>>(wp: &WritePages<R>) -> usize {
    trunk_capacity(wp.page_size() - wp.pager.format().raw_reserved())
}

/// Take a page from the free list, or grow the file by one page.
pub fn allocate<R: Deref<Target = Pager>>(wp: &mut WritePages<R>) -> Result<Pgno> {
    if let Some(free) = &mut wp.st.free {
        if !free.is_empty(&wp.st.held) {
            let list = free.changing(|| spare_buffer(&wp.pager), &wp.st.held);
            if let Some(p) = list.pop() {
                // Pages held back for old readers (P9, P13) are free too.
                wp.st.header.freelist_count = (list.len() + wp.st.held.len()) as u32;
                return Ok(p);
            }
        }
    }
    let head = wp.st.header.freelist_head;
    let count = wp.st.header.page_count;
    if head == 0 {
        let n = count
            .checked_add(1)
            .ok_or_else(|| Error::InvalidArgument("database is full (2^32 pages)".into()))?;
        wp.st.header.page_count = n;
        return Ok(n);
    }
    let raw = wp.raw(head)?;
    let file = wp.pager.db.path.display().to_string();
    let (next, mut leaves) = parse_trunk(&raw, head, count, &file)?;
    let remaining = wp
        .st
        .header
        .freelist_count
        .checked_sub(1)
        .ok_or_else(|| corrupt(wp, 1, "free-list count is zero but the list is not".into()))?;
    wp.st.header.freelist_count = remaining;
    if let Some(leaf) = leaves.pop() {
        let mut page = raw.to_vec();
        page[4..8].copy_from_slice(&(leaves.len() as u32).to_be_bytes());
        wp.put_raw(head, page)?;
        Ok(leaf)
    } else {
        wp.st.header.freelist_head = next;
        Ok(head)
    }
}

/// Return pages to the free list (at commit).
pub fn release<R: Deref<Target = Pager>>(wp: &mut WritePages<R>, pages: &[Pgno]) -> Result<()> {
    if let Some(free) = &mut wp.st.free {
        // Nothing freed: the list and its count are the committed ones.
        if !pages.is_empty() {
            let list = free.changing(|| spare_buffer(&wp.pager), &wp.st.held);
            list.extend_from_slice(pages);
            wp.st.header.freelist_count = (list.len() + wp.st.held.len()) as u32;
        }
        return Ok(());
    }
    let cap = capacity_for(wp);
    for &p in pages {
        let head = wp.st.header.freelist_head;
        if head != 0 {
            let raw = wp.raw(head)?;
            let n = be(&raw, 4) as usize;
            if n < cap {
                let mut page = raw.to_vec();
                page[8 + 4 * n..12 + 4 * n].copy_from_slice(&p.to_be_bytes());
                page[4..8].copy_from_slice(&(n as u32 + 1).to_be_bytes());
                wp.put_raw(head, page)?;
                wp.st.header.freelist_count += 1;
                continue;
            }
        }
        let mut page = vec![0u8; wp.page_size()];
        page[0..4].copy_from_slice(&head.to_be_bytes());
        wp.put_raw(p, page)?;
        wp.st.header.freelist_head = p;
        wp.st.header.freelist_count += 1;
    }
    Ok(())
}

/// Write a volatile free list to trunk pages taken from the list itself
/// and point the header at them (at a clean close). A no-op for a
/// persistent list. Pages held back (P9, P13) are listed as leaves but
/// never overwritten as trunks: a page retired in place by the last
/// commit still carries that commit's proof (P13); when only such pages
/// are free, the trunk is a new page at the end of the file.
pub fn persist<R: Deref<Target = Pager>>(wp: &mut WritePages<R>) -> Result<()> {
    let Some(free) = wp.st.free.take() else {
        return Ok(());
    };
    let mut free = free.into_vec(&wp.st.held);
    let mut held: Vec<Pgno> = wp.st.held.iter().copied().collect();
    held.sort_unstable();
    // Lowest pages last in the chain's leaves: allocation pops from the
    // end, so the next session reuses low pages first.
    free.sort_unstable_by(|a, b| b.cmp(a));
    let cap = capacity_for(wp);
    let mut head: Pgno = 0;
    let mut total = (free.len() + held.len()) as u32;
    while !free.is_empty() || !held.is_empty() {
        let trunk = match free.pop() {
            Some(t) => t,
            None => {
                let n = wp.st.header.page_count.checked_add(1).ok_or_else(|| {
                    Error::InvalidArgument("database is full (2^32 pages)".into())
                })?;
                wp.st.header.page_count = n;
                total += 1;
                n
            }
        };
        let from_held = held.len().min(cap);
        let mut leaves = held.split_off(held.len() - from_held);
        let take = free.len().min(cap - from_held);
        leaves.extend(free.split_off(free.len() - take));
        let mut page = vec![0u8; wp.page_size()];
        page[0..4].copy_from_slice(&head.to_be_bytes());
        page[4..8].copy_from_slice(&(leaves.len() as u32).to_be_bytes());
        for (i, l) in leaves.iter().enumerate() {
            page[8 + 4 * i..12 + 4 * i].copy_from_slice(&l.to_be_bytes());
        }
        wp.put_raw(trunk, page)?;
        head = trunk;
    }
    wp.st.header.freelist_head = head;
    wp.st.header.freelist_count = total;
    wp.st.free = Some(TxnFree::default());
    wp.st.held.clear();
    Ok(())
}
