//! Savepoints inside a write transaction (SQL's statement rollback and
//! `SAVEPOINT`): a savepoint is a copy of the transaction's private state
//! (its dirty pages are shared `Arc`s, so the copy costs one map entry per
//! dirty page), and rolling back to it restores that state.
//!
//! Pages already spilled to the database file cannot be restored from
//! memory: rolling back to a savepoint taken before a spill fails with
//! [`Error::Unsupported`], which aborts the whole transaction (the caller
//! rolls it back; the journal undoes the spill).

use super::{Dirty, WritePages, WriteState};
use crate::base::pgmap::{PgnoMap, PgnoSet};
use crate::base::{Error, Header, Pgno, Result};
use crate::node::LeafChange;
use std::ops::Deref;

/// The private state of a write transaction at a savepoint.
pub struct Savepoint {
    dirty: PgnoMap<Dirty>,
    header: Header,
    freed: Vec<Pgno>,
    allocated: PgnoSet,
    free: Option<super::freelist::TxnFree>,
    changed: PgnoMap<Option<LeafChange>>,
    spills: u64,
}

impl Savepoint {
    fn of(st: &WriteState) -> Savepoint {
        Savepoint {
            dirty: st.dirty.clone(),
            header: st.header,
            freed: st.freed.clone(),
            allocated: st.allocated.clone(),
            free: st.free.clone(),
            changed: st.changed.clone(),
            spills: st.spills,
        }
    }
}

impl<R: Deref<Target = super::Pager>> WritePages<R> {
    /// The transaction's state now, to roll back to later.
    pub fn savepoint(&self) -> Savepoint {
        Savepoint::of(&self.st)
    }

    /// Restore the state of `sp`: every change made since is undone.
    pub fn rollback_to(&mut self, sp: &Savepoint) -> Result<()> {
        if self.st.spills != sp.spills {
            return Err(Error::Unsupported(format!(
                "{}: rolling back to a savepoint after the transaction spilled pages to the \
                 file; the whole transaction must roll back",
                self.pager.file_name()
            )));
        }
        let st = &mut self.st;
        st.dirty.clone_from(&sp.dirty);
        st.header = sp.header;
        st.freed.clone_from(&sp.freed);
        st.allocated.clone_from(&sp.allocated);
        st.free.clone_from(&sp.free);
        st.changed.clone_from(&sp.changed);
        st.generation += 1;
        Ok(())
    }
}
