//! Shared definitions, the bottom layer: errors and ids, the sync level
//! and durability, the page-1 header format and the free-list trunk
//! format. Every other module may import from here; this module imports
//! from no other module of the crate.

pub mod config;
pub mod error;
pub mod freelist;
pub mod header;
pub mod order;
pub mod pagesum;
pub mod pgmap;
pub mod sync;
pub mod timers;

pub use config::{Durability, Synchronous};
pub use error::{Error, Pgno, Result, Tid};
pub use header::{valid_page_size, Header, HEADER_LEN, MAGIC};
pub use order::{Bytewise, KeyOrder, KeyOrders, BYTEWISE};
