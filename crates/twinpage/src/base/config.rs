//! Settings shared by every layer: the sync level an app asks for and the
//! guarantee a mode gives at that level.

use super::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// When the engine waits for the storage device (SQLite's `synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Synchronous {
    /// Never sync: fast, not crash-safe.
    Off,
    /// Sync at the critical moments only; after power loss the database is
    /// consistent but the last commits may be rolled back.
    Normal,
    /// Sync so that every acknowledged commit survives (except DELETE mode,
    /// whose unlink is not synced, as in SQLite).
    Full,
    /// FULL plus a directory sync after the DELETE-mode unlink.
    Extra,
}

impl FromStr for Synchronous {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "0" => Ok(Synchronous::Off),
            "normal" | "1" => Ok(Synchronous::Normal),
            "full" | "2" => Ok(Synchronous::Full),
            "extra" | "3" => Ok(Synchronous::Extra),
            _ => Err(Error::InvalidArgument(format!(
                "synchronous must be off, normal, full or extra, not {s:?}"
            ))),
        }
    }
}

impl fmt::Display for Synchronous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Synchronous::Off => "off",
            Synchronous::Normal => "normal",
            Synchronous::Full => "full",
            Synchronous::Extra => "extra",
        })
    }
}

/// What a mode guarantees across power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After a crash the database holds exactly the last acknowledged
    /// commit, or a later one that was in flight.
    Durable,
    /// After a crash the database holds some committed state; the last
    /// acknowledged commits may be missing.
    Atomic,
    /// No guarantee: a crash during commit may tear the database.
    None,
}
