//! Typed errors. Every error carries enough context (page, file, OS error)
//! to diagnose it without a debugger.

use std::path::PathBuf;

/// Page number. Page 1 is the header page; 0 means "none".
pub type Pgno = u32;

/// Transaction id (TID): the file change counter (FCC) value a write
/// transaction commits as; a reader's snapshot is the TID of the last
/// commit it sees. Handed out by the concurrency layer.
pub type Tid = u64;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// All errors twinpage returns. New cases may be added: match with a
/// wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A key exceeds the maximum key length (4 GiB - 1; keys longer than
    /// a cell holds overflow into chains, whatever the page size).
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
    /// An earlier error in this transaction may have left its changes
    /// partial: it can only roll back. (One that lost a conflict reports
    /// that [`Error::Conflict`] again instead, which is retryable.)
    #[error("transaction aborted: {0}")]
    Aborted(String),
    /// The transaction was already committed or rolled back.
    #[error("transaction already finished")]
    AlreadyFinished,
    /// A failed sync or write that could not be undone left the database
    /// needing recovery: the handle refuses work until the database is
    /// reopened.
    #[error("database poisoned: {0}")]
    Poisoned(String),
    /// The database was closed.
    #[error("database {0} is closed")]
    Closed(String),
    /// The transaction conflicts with one that committed after it began;
    /// retry it ([`Error::is_retryable`]; `Db::write` does).
    #[error("conflict on page {page}{}: {what}", table.as_deref().map(|t| format!(" of table {t}")).unwrap_or_default())]
    Conflict {
        /// The page the transactions both touched.
        page: Pgno,
        /// The table the page belongs to, when known.
        table: Option<String>,
        /// What happened.
        what: String,
    },
    /// The database was opened read-only and the operation would write
    /// (including recovery that needs to write: open it read-write once).
    #[error("read-only: {0}")]
    ReadOnly(String),
    /// An engine invariant did not hold. A bug: please report it.
    #[error("internal error: {0}")]
    Internal(String),
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

    /// True for errors after which running the transaction again may
    /// succeed (a conflict with a concurrent commit, a busy lock).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict { .. } | Error::Busy(_))
    }

    /// True for errors caused by the contents of a file.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}
