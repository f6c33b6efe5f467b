//! Tables by integer id, with a key order of the caller's choosing,
//! stable cursors, row counts and savepoints: what a SQL layer needs on
//! top of the named tables of [`super::Db`].
//!
//! A table created by id is registered in the catalog under the key
//! `0x00 ‖ id` (u32, big-endian; table names cannot start with a zero
//! byte); its value is the root page (u32) followed by the spec of its key
//! order (empty: bytewise). The id is the table's root page, which never
//! moves, so an operation on a table needs no catalog lookup once the
//! table is open.

use super::{ReadTxn, WriteTxn};
use crate::base::{Bytewise, Error, KeyOrder, KeyOrders, Pgno, Result, BYTEWISE};
use crate::btree::{self, Cursor, RangeIter, TreeConfig};
use crate::page::PageRead;
use crate::pager::Savepoint;
use std::ops::Bound;
use std::sync::Arc;

/// An integer table id: the table's root page, fixed for its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId(pub u32);

/// An open table: its id and key order.
#[derive(Clone)]
pub struct Table {
    id: TableId,
    order: Arc<dyn KeyOrder>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table({}, {:?})", self.id.0, &*self.order)
    }
}

impl Table {
    /// The table's id.
    pub fn id(&self) -> TableId {
        self.id
    }

    /// The table's key order.
    pub fn order(&self) -> &Arc<dyn KeyOrder> {
        &self.order
    }

    /// This handle with `order` in place of the resolved one: an order
    /// equal to the table's (for instance one bound to a connection's own
    /// collation functions). Using an order that differs from the table's
    /// breaks the table.
    pub fn with_order(mut self, order: Arc<dyn KeyOrder>) -> Table {
        self.order = order;
        self
    }

    /// A cursor over the table, positioned nowhere.
    pub fn cursor(&self) -> Cursor {
        Cursor::new(self.id.0, self.order.clone())
    }

    fn root(&self) -> Pgno {
        self.id.0
    }
}

/// A savepoint of a write transaction ([`WriteTxn::savepoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavepointId(usize);

/// The catalog key of table `id`.
fn catalog_key(id: TableId) -> [u8; 5] {
    let mut k = [0u8; 5];
    k[1..].copy_from_slice(&id.0.to_be_bytes());
    k
}

fn resolve(spec: &[u8], orders: Option<&Arc<dyn KeyOrders>>) -> Result<Arc<dyn KeyOrder>> {
    if spec.is_empty() {
        return Ok(Arc::new(Bytewise));
    }
    match orders {
        Some(o) => o.resolve(spec),
        None => Err(Error::InvalidArgument(
            "a table with its own key order needs Options::key_orders".into(),
        )),
    }
}

/// Resolve a catalog value (root, spec) of table `id` to an open table.
fn table_from(id: TableId, v: &[u8], orders: Option<&Arc<dyn KeyOrders>>) -> Result<Table> {
    let Some((root, spec)) = v.split_first_chunk::<4>() else {
        return Err(Error::corrupt(
            "database",
            0,
            format!("catalog entry of table {} is not a page number", id.0),
        ));
    };
    if u32::from_be_bytes(*root) != id.0 {
        return Err(Error::corrupt(
            "database",
            id.0,
            format!("catalog entry of table {} names another root", id.0),
        ));
    }
    Ok(Table {
        id,
        order: resolve(spec, orders)?,
    })
}

fn lookup<P: PageRead + ?Sized>(
    p: &P,
    catalog: Pgno,
    id: TableId,
    orders: Option<&Arc<dyn KeyOrders>>,
) -> Result<Table> {
    match btree::get(p, catalog, &catalog_key(id), &BYTEWISE)? {
        Some(v) => table_from(id, &v, orders),
        None => Err(Error::NoSuchTable(format!("table id {}", id.0))),
    }
}

fn ids<P: PageRead + ?Sized>(p: &P, catalog: Pgno) -> Result<Vec<TableId>> {
    let lo = Bound::Included(vec![0u8]);
    let hi = Bound::Excluded(vec![1u8]);
    let mut out = Vec::new();
    for kv in RangeIter::new(p, catalog, lo, hi, false, &BYTEWISE)? {
        let (k, _) = kv?;
        if let Some((_, id)) = k.split_first() {
            if let Ok(b) = <[u8; 4]>::try_from(id) {
                out.push(TableId(u32::from_be_bytes(b)));
            }
        }
    }
    Ok(out)
}

impl ReadTxn {
    /// Open table `id` (its key order resolved through the database's
    /// [`crate::Options::key_orders`]).
    pub fn open_table(&self, id: TableId) -> Result<Table> {
        lookup(&self.pages, self.catalog(), id, self.orders.as_ref())
    }

    /// The ids of every table created by id.
    pub fn table_ids(&self) -> Result<Vec<TableId>> {
        ids(&self.pages, self.catalog())
    }

    /// The transaction's view of the pages, for [`Cursor`]s.
    pub fn view(&self) -> &dyn PageRead {
        &self.pages
    }

    /// Read one key of `t`.
    pub fn get_in(&self, t: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        btree::get(&self.pages, t.root(), key, &*t.order)
    }

    /// Number of entries in `t`.
    pub fn count(&self, t: &Table) -> Result<u64> {
        btree::count(&self.pages, t.root(), &*t.order)
    }
}

impl WriteTxn {
    /// Create an empty table whose keys follow the order `spec` names
    /// (resolved through [`crate::Options::key_orders`]; an empty spec is
    /// bytewise order). Returns it open.
    pub fn create_table_id(&mut self, spec: &[u8]) -> Result<Table> {
        let order = resolve(spec, self.db.key_orders.as_ref())?;
        self.change_catalog();
        let r = (|| {
            let catalog = self.catalog()?;
            let p = self.pages_mut()?;
            let root = btree::create(p)?;
            let mut v = root.to_be_bytes().to_vec();
            v.extend_from_slice(spec);
            let key = catalog_key(TableId(root));
            btree::insert(p, catalog, &key, &v, &TreeConfig::default(), &BYTEWISE)?;
            Ok(Table {
                id: TableId(root),
                order,
            })
        })();
        self.note(r)
    }

    /// Give table `id`, while it is empty, the key order `spec` names
    /// (a caller that creates a tree before it knows its order). A table
    /// that has entries keeps its order: asking for another one fails.
    pub fn set_key_order(&mut self, id: TableId, spec: &[u8]) -> Result<Table> {
        let cur = self.open_table(id)?;
        let p = self.pages()?;
        let catalog = self.catalog()?;
        let stored = btree::get(p, catalog, &catalog_key(id), &BYTEWISE)?.unwrap_or_default();
        if stored.get(4..) == Some(spec) {
            return Ok(cur);
        }
        if btree::count(p, id.0, &*cur.order)? > 0 {
            return Err(Error::InvalidArgument(format!(
                "table {} has entries: its key order cannot change",
                id.0
            )));
        }
        let order = resolve(spec, self.db.key_orders.as_ref())?;
        self.change_catalog();
        let r = (|| {
            let p = self.pages_mut()?;
            let mut v = id.0.to_be_bytes().to_vec();
            v.extend_from_slice(spec);
            btree::insert(
                p,
                catalog,
                &catalog_key(id),
                &v,
                &TreeConfig::default(),
                &BYTEWISE,
            )?;
            Ok(Table { id, order })
        })();
        self.note(r)
    }

    /// Open table `id` (see [`ReadTxn::open_table`]).
    pub fn open_table(&self, id: TableId) -> Result<Table> {
        let p = self.pages()?;
        lookup(p, self.catalog()?, id, self.db.key_orders.as_ref())
    }

    /// The ids of every table created by id.
    pub fn table_ids(&self) -> Result<Vec<TableId>> {
        ids(self.pages()?, self.catalog()?)
    }

    /// Drop table `id` and free its pages; false if it did not exist.
    pub fn drop_table_id(&mut self, id: TableId) -> Result<bool> {
        let t = match self.open_table(id) {
            Ok(t) => t,
            Err(Error::NoSuchTable(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        self.change_catalog();
        let r = (|| {
            let catalog = self.catalog()?;
            let p = self.pages_mut()?;
            btree::destroy(p, t.root(), &*t.order)?;
            btree::delete(
                p,
                catalog,
                &catalog_key(id),
                &TreeConfig::default(),
                &BYTEWISE,
            )?;
            Ok(true)
        })();
        self.note(r)
    }

    /// Remove every entry of `t` (it stays, empty); returns how many.
    pub fn clear_table(&mut self, t: &Table) -> Result<u64> {
        let r = (|| {
            let p = self.pages_mut()?;
            btree::clear(p, t.root(), &*t.order)
        })();
        self.note(r)
    }

    /// Insert or replace a key of `t`; true if it existed.
    pub fn put_in(&mut self, t: &Table, key: &[u8], value: &[u8]) -> Result<bool> {
        let cfg = self.db.tree;
        let r = (|| {
            let p = self.pages_mut()?;
            btree::insert(p, t.root(), key, value, &cfg, &*t.order)
        })();
        self.note(r)
    }

    /// Delete a key of `t`; true if it existed.
    pub fn delete_in(&mut self, t: &Table, key: &[u8]) -> Result<bool> {
        let cfg = self.db.tree;
        let r = (|| {
            let p = self.pages_mut()?;
            btree::delete(p, t.root(), key, &cfg, &*t.order)
        })();
        self.note(r)
    }

    /// Read one key of `t` (sees this transaction's changes).
    pub fn get_in(&self, t: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        btree::get(self.pages()?, t.root(), key, &*t.order)
    }

    /// Number of entries in `t` (with this transaction's changes).
    pub fn count(&self, t: &Table) -> Result<u64> {
        btree::count(self.pages()?, t.root(), &*t.order)
    }

    /// The transaction's view of the pages, for [`Cursor`]s: a cursor
    /// stays valid while the transaction changes the table under it.
    pub fn view(&self) -> Result<&dyn PageRead> {
        Ok(self.pages()? as &dyn PageRead)
    }

    /// Start a savepoint (they nest): [`WriteTxn::rollback_to`] undoes
    /// every change made after it, [`WriteTxn::release`] forgets it.
    pub fn savepoint(&mut self) -> Result<SavepointId> {
        let sp: Savepoint = self.pages()?.savepoint();
        self.savepoints.push(sp);
        Ok(SavepointId(self.savepoints.len() - 1))
    }

    fn check_savepoint(&self, sp: SavepointId) -> Result<()> {
        if sp.0 >= self.savepoints.len() {
            return Err(Error::InvalidArgument(format!(
                "no savepoint {} ({} open)",
                sp.0,
                self.savepoints.len()
            )));
        }
        Ok(())
    }

    /// Undo every change made since `sp`, which stays open (as SQL's
    /// `ROLLBACK TO`); savepoints started after it are released. An
    /// operation that failed half-way after `sp` is undone with the rest,
    /// and the transaction goes on. Fails with [`Error::Unsupported`],
    /// aborting the transaction, if pages were spilled to the file since
    /// `sp`.
    pub fn rollback_to(&mut self, sp: SavepointId) -> Result<()> {
        self.check_savepoint(sp)?;
        self.savepoints.truncate(sp.0 + 1);
        let r = (|| {
            let saved = self.savepoints.last().expect("checked");
            let pages = self.pages.as_mut().ok_or(Error::AlreadyFinished)?;
            pages.rollback_to(saved)
        })();
        match r {
            Ok(()) => {
                self.failed = None;
                Ok(())
            }
            Err(e) => self.note(Err(e)),
        }
    }

    /// Forget `sp` and every savepoint started after it (their changes
    /// stay in the transaction).
    pub fn release(&mut self, sp: SavepointId) -> Result<()> {
        self.check_savepoint(sp)?;
        self.savepoints.truncate(sp.0);
        Ok(())
    }

    /// Savepoints open.
    pub fn savepoints(&self) -> usize {
        self.savepoints.len()
    }
}
