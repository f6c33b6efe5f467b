//! Typed errors. Every error carries enough context (page, file, OS error)
//! to diagnose it without a debugger.

use std::path::PathBuf;

/// Page number. Page 1 is the header page; 0 means "none".
pub type Pgno = u32;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// All errors twinpage returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file content is not what the format allows.
    #[error("corruption in {file}, page {page}: {what}")]
    Corruption {
        /// File name (database, journal, ...).
        file: String,
        /// Page number, 0 when the damage is not page-specific.
        page: Pgno,
        /// What was wrong.
        what: String,
    },
    /// An I/O call failed.
    #[error("I/O error during {op} on {}: {source}", path.display())]
    Io {
        /// The operation (read, write, fdatasync, ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another transaction holds a conflicting lock and the busy timeout expired.
    #[error("database is busy: {0}")]
    Busy(String),
    /// Another process holds the database file.
    #[error("database {} is locked by another process", .0.display())]
    Locked(PathBuf),
    /// The caller passed something invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A key exceeds the maximum key length for the page size.
    #[error("key of {len} bytes exceeds the maximum of {max} bytes")]
    KeyTooLarge {
        /// Length of the offending key.
        len: usize,
        /// Maximum allowed for this database.
        max: usize,
    },
    /// A named table does not exist.
    #[error("no such table: {0}")]
    NoSuchTable(String),
    /// A requested feature or combination is not implemented.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A transaction was used after an earlier error poisoned it, or the
    /// database was closed.
    #[error("transaction or database no longer usable: {0}")]
    Aborted(String),
}

impl Error {
    /// Build a corruption error.
    pub fn corrupt(file: impl Into<String>, page: Pgno, what: impl Into<String>) -> Self {
        Error::Corruption {
            file: file.into(),
            page,
            what: what.into(),
        }
    }

    /// Build an I/O error.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// True for errors caused by the contents of a file.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}
