//! Recovery schemes ("journal modes"). Each lives in its own module behind
//! the [`Journal`] trait; the pager calls it to make a transaction atomic
//! and durable, and at open to recover from a crash. The tree algorithms
//! never know which mode runs.
//!
//! Every mode registers itself in [`JournalMode::ALL`] so that the crash
//! explorer (`twinpage crashtest --mode all`) and the benchmark cover it.

mod dhl;
pub mod group;
mod off;
pub mod registry;
mod rollback;
pub mod wal;

pub use dhl::{CommitProtocol, DhlJournal};
pub use off::OffJournal;
pub use rollback::{RollbackJournal, RollbackKind, JOURNAL_HEADER_SIZE, JOURNAL_MAGIC};
pub use wal::{WalJournal, WalLocks, WalOptions};
pub mod shadow;

pub use registry::{by_code, Cleanup, FreeListPolicy, JournalMode, Leftover, ModeSpec, REGISTRY};
pub use shadow::DashJournal;

use crate::base::Header;
use crate::base::{Error, Pgno, Result, Tid};
use crate::node::NodeFormat;
use crate::storage::DbFile;
use crate::storage::{Vfs, VfsFile};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Options that only some modes understand, as `name=value` pairs in the
/// order given. Each mode parses its own and rejects the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModeOptions(pub Vec<(String, String)>);

impl ModeOptions {
    /// The last value given for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Parse the last value given for `name`, or `default`.
    pub fn parse_or<T: FromStr>(&self, name: &str, default: T) -> Result<T> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| Error::InvalidArgument(format!("bad value {v:?} for option {name}"))),
        }
    }

    /// A boolean option (`1/0`, `on/off`, `true/false`, `yes/no`).
    pub fn flag_or(&self, name: &str, default: bool) -> Result<bool> {
        match self.get(name) {
            None => Ok(default),
            Some("1" | "on" | "true" | "yes") => Ok(true),
            Some("0" | "off" | "false" | "no") => Ok(false),
            Some(v) => Err(Error::InvalidArgument(format!(
                "bad value {v:?} for option {name}"
            ))),
        }
    }

    /// Fail if any option is not in `known`.
    pub fn only(&self, mode: JournalMode, known: &[&str]) -> Result<()> {
        match self.0.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            Some((k, _)) => Err(Error::InvalidArgument(format!(
                "option {k:?} is not known to journal mode {mode}"
            ))),
            None => Ok(()),
        }
    }
}

/// Switches that deliberately break a mode, so tests can prove that the
/// crash explorer catches a broken mode. Never set in production.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TestFaults {
    /// Skip the journal sync before the database file is written.
    pub skip_journal_sync: bool,
    /// Hand the protocol's commit validation no read set (the IPS paper's
    /// description of BEGIN CONCURRENT, which admits write skew), so tests
    /// can prove the serializability checker catches it.
    pub skip_read_validation: bool,
}

/// One page of a transaction, as it will be written.
#[derive(Debug, Clone)]
pub struct PageImage {
    /// Page number.
    pub pgno: Pgno,
    /// Full page image.
    pub data: Arc<[u8]>,
    /// Where `data` holds its page checksum, sealed by this process in
    /// [`crate::base::pagesum::page_sum`]'s form (a tree page it encoded
    /// or patched): a journal may derive a sum over the image from it
    /// ([`crate::base::pagesum::append_page`]). `None`: sum the bytes.
    pub sum_at: Option<usize>,
}

impl PageImage {
    /// An image with no checksum to derive sums from.
    pub fn new(pgno: Pgno, data: Arc<[u8]>) -> Self {
        PageImage {
            pgno,
            data,
            sum_at: None,
        }
    }
}

/// Where a journal finds the committed image of a page (for undo logs).
pub trait OriginalSource {
    /// The committed image of `pgno` (which is below the committed page
    /// count).
    fn original(&self, pgno: Pgno) -> Result<Arc<[u8]>>;
    /// Where `image`, the committed image [`OriginalSource::original`]
    /// returned for `pgno`, holds a page checksum the pager verified
    /// (or sealed), in [`crate::base::pagesum::page_sum`]'s form: a
    /// journal may derive a sum over the image from it
    /// ([`crate::base::pagesum::append_page`]). `None`: sum the bytes.
    fn verified_sum_at(&self, pgno: Pgno, image: &Arc<[u8]>) -> Option<usize> {
        let _ = (pgno, image);
        None
    }
}

/// The pages of a transaction handed to [`Journal::commit`] or
/// [`Journal::spill`].
pub struct CommitSet<'a> {
    /// TID of the transaction (the FCC it commits).
    pub tid: u64,
    /// Pages to write, sorted by page number. On commit, page 1 (the
    /// header, with the new FCC and page count) is included unless the
    /// journal writes page 1 itself ([`Journal::writes_pager_page1`]): the
    /// committed page 1 with only its header, the header's page checksum
    /// and the mode's fields (bytes `0..MODE_FIELDS_AT + MODE_FIELDS_LEN`)
    /// rewritten, which the rollback journal relies on. A spill never
    /// holds page 1 (the tree cannot write it).
    pub pages: &'a [PageImage],
    /// Database size in pages before the transaction.
    pub orig_page_count: u32,
    /// Database size in pages after the transaction.
    pub new_page_count: u32,
    /// Committed images, for schemes that log them.
    pub originals: &'a dyn OriginalSource,
    /// The committed header before this transaction.
    pub prev_header: &'a Header,
    /// The header this transaction commits (also encoded in page 1 of
    /// `pages` on commit). Modes that keep the FCC elsewhere (WAL frames,
    /// DHL's embedded metadata) may skip page 1 when only `fcc` and
    /// `clean_close` differ from `prev_header`.
    pub header: &'a Header,
    /// Snapshot (FCC) of the oldest open read transaction; `u64::MAX` if
    /// none (the first of `readers`).
    pub oldest_snapshot: u64,
    /// The open read transactions, asked for right before a mode drops
    /// what a snapshot may read (a WAL restarting its log: R1).
    pub readers: &'a dyn Readers,
    /// Sorted pages that are free in the state this transaction commits
    /// although the transaction may have written them (empty on a spill):
    /// pages it freed (a spill may have written them first) and the
    /// zero-filled pages in `pages` that extend the file over pages it
    /// allocated and freed again. They are not part of the committed state;
    /// a mode that counts a transaction's pages (DHL) must not count them.
    pub free: &'a [Pgno],
}

/// The open readers as the pager sees them: the newest installed commit
/// and the readers' snapshots, read in one critical section, so a reader
/// missing from `snapshots` has a snapshot at or after `installed`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReaderView {
    /// FCC of the newest installed commit (readers starting now see it).
    /// With several writers, commits the journal has published may not be
    /// installed yet: a reader starting now does not see them.
    pub installed: Tid,
    /// Snapshots of the open read transactions, ascending, distinct.
    pub snapshots: Vec<Tid>,
}

impl ReaderView {
    /// No reader, every commit installed (a database being closed).
    pub fn none() -> ReaderView {
        ReaderView {
            installed: Tid::MAX,
            snapshots: Vec::new(),
        }
    }
}

/// Where a mode asks for the open readers before it overwrites or drops
/// a version a snapshot may read (WAL: a checkpoint copying into the
/// database file, a log restart; R1). Asked at that moment, not at the
/// start of the call: with several writers, a reader can start between a
/// commit's publication in the journal and its install, on the snapshot
/// before it.
pub trait Readers {
    /// The readers now.
    fn view(&self) -> ReaderView;

    /// Wait until commit `tid` is installed, then the readers. The caller
    /// must not hold anything an install needs: every commit up to `tid`
    /// is already published in the journal.
    fn view_after(&self, tid: Tid) -> Result<ReaderView>;
}

impl Readers for ReaderView {
    fn view(&self) -> ReaderView {
        self.clone()
    }

    fn view_after(&self, tid: Tid) -> Result<ReaderView> {
        if self.installed < tid {
            return Err(Error::Internal(format!(
                "commit {tid} is not installed (a fixed reader view at {})",
                self.installed
            )));
        }
        Ok(self.clone())
    }
}

/// Checkpoint flavours (SQLite's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Copy what can be copied without waiting for readers.
    Passive,
    /// Wait for readers, copy everything.
    Full,
    /// Full, then restart the log from the beginning.
    Restart,
    /// Restart, then truncate the log file to zero bytes.
    Truncate,
}

/// What a checkpoint did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Frames in the log.
    pub log_frames: u64,
    /// Frames copied into the database file.
    pub checkpointed: u64,
    /// Frames that could not be copied because a reader still needs them.
    pub blocked_by_readers: u64,
}

/// What recovery found and did at open.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// A crash left work to undo or redo, and it was done.
    pub recovered: bool,
    /// Pages restored or replayed.
    pub pages: u64,
    /// Human-readable description.
    pub detail: String,
}

/// Files a journal may need during recovery, before the header is read.
pub struct RecoverCtx<'a> {
    /// The file system.
    pub vfs: &'a Arc<dyn Vfs>,
    /// Path of the database file.
    pub path: &'a Path,
    /// The open database file.
    pub file: &'a Arc<dyn VfsFile>,
}

/// What a journal may use before the database file is opened.
pub struct PreOpenCtx<'a> {
    /// The file system.
    pub vfs: &'a Arc<dyn Vfs>,
    /// Path of the database file (which may not exist yet).
    pub path: &'a Path,
    /// How long to wait for another process's lock.
    pub busy_timeout: Duration,
}

/// Bytes a pipelined commit writes outside the pager's commit lock
/// ([`Journal::finish_commit`]).
pub struct PendingWrite {
    /// The file.
    pub file: Arc<dyn VfsFile>,
    /// Byte offset.
    pub at: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A commit that [`Journal::sequence_commit`] put in commit order and that
/// [`Journal::finish_commit`] makes durable and [`Journal::publish_commit`]
/// publishes.
#[derive(Default)]
pub struct CommitTicket {
    /// Its ticket in the journal's group commit (`None`: the commit is
    /// already durable).
    pub group: Option<u64>,
    /// Writes left to do outside the commit lock.
    pub writes: Vec<PendingWrite>,
}

/// A recovery scheme. Methods take `&self` so that readers can fetch
/// pages (WAL) while a commit is under way; implementations lock inside.
pub trait Journal: Send + Sync {
    /// Which mode this is.
    fn mode(&self) -> JournalMode;

    /// Recovery that must run before the database file is opened or
    /// created (DASH: a crash during the Atomic Exchange can leave the
    /// database name missing). Default: nothing.
    fn pre_open(&self, ctx: &PreOpenCtx<'_>) -> Result<Recovery> {
        let _ = ctx;
        Ok(Recovery::default())
    }

    /// Crash recovery, run at open while the OS lock is held and before
    /// the header page is read. Must itself be crash-safe (idempotent).
    fn recover(&self, ctx: &RecoverCtx<'_>) -> Result<Recovery>;

    /// Write some pages of a transaction before commit because the cache
    /// is full. Afterwards the database file may hold uncommitted pages;
    /// [`Journal::rollback`] must be able to undo them.
    fn spill(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()>;

    /// Make the transaction atomic and durable (per [`Durability`](crate::base::Durability)).
    fn commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()>;

    /// The commit of one of several concurrent writers, first step, under
    /// the pager's commit lock (so in commit order): put the transaction
    /// in the log's order and do what must happen in that order. The pager
    /// then calls [`Journal::finish_commit`] without the lock and, once
    /// every earlier commit was published, [`Journal::publish_commit`]. An
    /// error here leaves no trace of the commit; an error in a later step
    /// poisons the handle (other commits may be in flight behind it).
    /// Default: the whole [`Journal::commit`], under the lock.
    fn sequence_commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<CommitTicket> {
        self.commit(db, set)?;
        Ok(CommitTicket::default())
    }

    /// Second step of a pipelined commit, outside the commit lock: write
    /// what [`Journal::sequence_commit`] left and return once the commit
    /// and every commit sequenced before it are durable (group commit:
    /// `journal::group`). Default: nothing (already durable).
    fn finish_commit(&self, db: &DbFile, ticket: &mut CommitTicket) -> Result<()> {
        let _ = (db, ticket);
        Ok(())
    }

    /// Last step of a pipelined commit, in commit order, just before the
    /// pager installs it for readers: make it readable (the WAL's index).
    fn publish_commit(&self, ticket: &CommitTicket) -> Result<()> {
        let _ = ticket;
        Ok(())
    }

    /// Whether [`Journal::after_commit`] has anything to do (the pager
    /// takes its commit lock for it only then).
    fn maintenance_due(&self) -> bool {
        false
    }

    /// Undo what [`Journal::spill`] or a failed commit wrote to the database
    /// file, restoring `orig_page_count` pages. A no-op when nothing was
    /// written.
    fn rollback(&self, db: &DbFile, orig_page_count: u32) -> Result<()>;

    /// Release files at a clean close.
    fn close(&self, db: &DbFile) -> Result<()>;

    /// Read the committed image of `pgno` as of `snapshot` (an FCC) into
    /// `buf`. Schemes that keep newer images outside the database file
    /// (WAL) override this; the default reads the database file.
    fn read_page(&self, db: &DbFile, pgno: Pgno, snapshot: u64, buf: &mut [u8]) -> Result<()> {
        let _ = snapshot;
        db.read_page(pgno, buf)
    }

    /// Adjust the header read from page 1 at open with state the mode keeps
    /// elsewhere (the FCC in WAL frames or in DHL's embedded metadata).
    fn fixup_header(&self, header: &mut Header) -> Result<()> {
        let _ = header;
        Ok(())
    }

    /// The node format this journal's pages use (default: the mode's).
    fn node_format(&self) -> Arc<dyn NodeFormat> {
        self.mode().node_format()
    }

    /// Whether commits sum the committed images of the pages they
    /// overwrite ([`OriginalSource::verified_sum_at`]: a rollback
    /// journal's records). The pager then notes which of those images it
    /// verified along the way; for any other journal that would be wasted.
    fn sums_originals(&self) -> bool {
        false
    }

    /// Whether a commit from `prev` to `header` writes the pager's image
    /// of page 1 (the new header over the committed page 1). A journal
    /// that writes page 1 from state of its own (DHL's commit mark and
    /// tail), or that leaves page 1 out when only the FCC changed (the
    /// WAL, whose frames carry the TID), says no: the pager then neither
    /// builds that image nor caches it, a 4 KiB copy and a page checksum
    /// patch less per commit.
    fn writes_pager_page1(&self, prev: &Header, header: &Header) -> bool {
        let _ = (prev, header);
        true
    }

    /// Adjust the encoded pages of a commit before they are handed to
    /// [`Journal::commit`] and installed in the cache (so the cache holds
    /// exactly what is written). `pages` is sorted and starts with page 1
    /// (unless [`Journal::writes_pager_page1`] said no);
    /// `free` is [`CommitSet::free`]. Metadata embedding puts the commit
    /// record into one of them.
    fn prepare_commit(
        &self,
        tid: u64,
        prev_header: &Header,
        header: &Header,
        pages: &mut [PageImage],
        free: &[Pgno],
    ) -> Result<()> {
        let _ = (tid, prev_header, header, pages, free);
        Ok(())
    }

    /// The file no longer looks cleanly closed although no commit of this
    /// session says so (a rolled-back spill cleared the flag in page 1):
    /// [`crate::Db::close`] must still commit its header-only transaction.
    fn session_dirty(&self) -> bool {
        false
    }

    /// Maintenance after a commit is installed (readers starting now see
    /// it): WAL's automatic checkpoint. Errors do not undo the commit; an
    /// [`Error::Poisoned`] means the handle must refuse work until reopen.
    fn after_commit(&self, db: &DbFile, readers: &dyn Readers) -> Result<()> {
        let _ = (db, readers);
        Ok(())
    }

    /// Copy logged pages into the database file (WAL); a no-op elsewhere.
    fn checkpoint(
        &self,
        db: &DbFile,
        mode: CheckpointMode,
        readers: &dyn Readers,
    ) -> Result<CheckpointInfo> {
        let _ = (db, mode, readers);
        Ok(CheckpointInfo::default())
    }

    /// Mode-specific counters for [`crate::Stats`] (WAL: log size,
    /// checkpoints, checkpoints and restarts blocked by readers).
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
