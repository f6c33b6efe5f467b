//! Key orders: how the keys of one table compare.
//!
//! Every table has a key order. Tables created by name use [`Bytewise`]
//! (memcmp), the order of `twinpage::keys`. A caller can give a table its
//! own order (a SQL layer's index records compare field by field under
//! collations): the tree searches, splits and checks that table with it,
//! and node formats that sort cells when they decode a page (formats with
//! unsorted slots) sort with it ([`crate::node::DecodeCtx::order`]).
//!
//! An order must be a strict total order on the keys the table holds and
//! must not change for the life of the table: the pages store keys in it.

use super::Result;
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// A total order on keys, supplied per table.
pub trait KeyOrder: Send + Sync {
    /// Compare two keys of the table.
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering;

    /// True only if [`KeyOrder::compare`] is plain byte order (memcmp). The
    /// tree then keeps the shortest byte prefix that separates two leaves
    /// as the separator; under any other order a separator is a whole key
    /// (a prefix of a key need not sort next to it).
    fn bytewise(&self) -> bool {
        false
    }

    /// A short name for diagnostics.
    fn name(&self) -> &str {
        "custom"
    }
}

impl fmt::Debug for dyn KeyOrder + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyOrder({})", self.name())
    }
}

/// memcmp order: the default order of every table created by name.
#[derive(Debug, Default, Clone, Copy)]
pub struct Bytewise;

impl KeyOrder for Bytewise {
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        a.cmp(b)
    }

    fn bytewise(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "bytewise"
    }
}

/// The bytewise order, for contexts that need a `&'static dyn KeyOrder`.
pub static BYTEWISE: Bytewise = Bytewise;

/// The caller's catalogue of key orders. A table created with an order
/// records the order's *spec* (bytes the caller chose, such as the
/// number of fields and their collations) in the catalog; whoever opens
/// the database later (the integrity check, the free-list rebuild after a
/// crash, [`crate::WriteTxn::open_table`]) gets the order back from the
/// spec through this.
pub trait KeyOrders: Send + Sync {
    /// The order of a table created with `spec`; an error if the spec is
    /// unknown or damaged.
    fn resolve(&self, spec: &[u8]) -> Result<Arc<dyn KeyOrder>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytewise_is_memcmp() {
        let o: &dyn KeyOrder = &BYTEWISE;
        assert!(o.bytewise());
        assert_eq!(o.compare(b"a", b"b"), Ordering::Less);
        assert_eq!(o.compare(b"ab", b"a"), Ordering::Greater);
        assert_eq!(o.compare(b"", b""), Ordering::Equal);
        assert_eq!(format!("{o:?}"), "KeyOrder(bytewise)");
    }
}
