//! Write-ahead logging (SQLite's WAL), with the DHL paper's WAL_OPT
//! pre-allocation and the thesis' delayed checkpoint as options.
//!
//! A commit appends the transaction's pages to `<db>-wal` as frames; the
//! last one is the *commit frame*. The database file changes only at a
//! *checkpoint*, which copies the newest committed version of each logged
//! page into it, syncs it, and lets the log *restart* from its beginning
//! under new salts. An in-memory index maps every page to its committed
//! versions in the log (by TID), so a reader on an old snapshot finds the
//! version it may see while the writer appends newer ones. Readers never
//! pin the log: a checkpoint copies everything committed and a restart
//! drops the generation whatever the readers, after keeping in memory the
//! versions their snapshots still select (`retain.rs`, R1).
//!
//! Sync sequence. `synchronous=full` (and extra): write the frames (one
//! call), fdatasync the log: every acknowledged commit is durable.
//! `normal`: no sync at commit; the log is synced before a checkpoint
//! writes the database, the database after it. After power loss the
//! database is consistent, but the last commits may be missing (durability
//! Atomic). `off`: no syncs. Whatever the level, the log header of a new
//! generation is written and synced before its first frame, so a prefix of
//! an older generation can never look valid.
//!
//! Options (`twinpage:wal,name=value,...`): `wal_autocheckpoint` (frames,
//! default 1000, 0 = only on request and at close), `journal_size_limit`
//! (bytes the log is truncated to at a restart; default no limit),
//! `preallocate` (WAL_OPT: the log is created holding `wal_autocheckpoint`
//! zeroed frames and is overwritten in place, so commits never change its
//! size and the file system journals no metadata; a full log is
//! checkpointed before it would grow), `delayed_checkpoint` (the thesis:
//! checkpoint only when `wal_autocheckpoint` frames have accumulated since
//! the last one or on request, restart the log at the end of a checkpoint
//! instead of checking before every append), `checkpoint_step` (pages an
//! automatic checkpoint copies per commit, default 128; 0 = the whole
//! checkpoint in the commit that made it due). The file format is in
//! [`format`](mod@format) and docs/modes/wal.md.
//!
//! **The sequencer** (\[TH\] §4.3), for protocols with several writers
//! ([`Journal::sequence_commit`]): a commit reserves the frames `[next,
//! next + k)` under the writer lock, where their chained checksums are
//! computed in frame order (chaining after reservation, so the format is
//! unchanged), and writes them outside every lock, in parallel with other
//! commits' writes and syncs; commits whose frames are in the file share
//! one fdatasync ([`super::group`]). Invariants:
//!
//! - **W1** Frames `[mx, next)` belong to the in-flight commits, in
//!   reservation order. A commit is published (indexed for readers, `mx`
//!   moved past it) only when it is durable and every earlier commit was
//!   published; the pager installs it right after.
//! - **W2** No acknowledged commit sits behind a hole: a commit returns
//!   only when every frame before its end is durable (group commit G1).
//!   Recovery stops at the first invalid frame; a reserved frame not yet
//!   written holds bytes of another generation or zeros, which fail the
//!   salts or the chain, so a crash with a hole ends the log there and
//!   drops only commits nobody was told about. Within a generation a frame
//!   position is written once under the sequencer (no spills, and a failed
//!   commit poisons the handle instead of rewinding `next`), so no stale
//!   frame of the same generation can fill a hole.
//! - **W3** The log restarts, and a pre-allocated log is checkpointed
//!   before it would grow, only when no commit is in flight (`quiesce`):
//!   frames are never reserved in one generation and written in the
//!   next.
//!
//! **The incremental checkpoint** (beyond SQLite and the papers; a
//! *window* copies the committed frames below its end in steps, one step
//! after each installed commit, so no commit pays for a whole checkpoint):
//!
//! - **W4** `backfill` moves to a window's end only when every page of the
//!   window is in the database file and synced. Until then the log cannot
//!   restart (a restart needs `backfill == mx`), so recovery replays every
//!   frame of the window over whatever mixture of old and new images the
//!   database file holds; the database's page 1 may carry the window's FCC
//!   early, which recovery never trusts over a log that reaches it.
//! - **W5** The log is durable up to a window's end before the window's
//!   first page is written to the database file (as for a whole
//!   checkpoint), and each step fdatasyncs the database file, spreading
//!   the window's flush over its commits.
//! - **W6** A failed step drops the window; the next window starts again
//!   from `backfill` and rewrites every page of it, so a failed fdatasync
//!   that dropped dirty pages is never followed by one that vouches for
//!   them. A whole checkpoint (on request, at close, a full pre-allocated
//!   log) supersedes a window in progress.
//! - **W7** Each step copies at most max(`checkpoint_step`, 2 x the frames
//!   published since the previous step) pages, the first step counting the
//!   commit that made the window due, so a window ends after a bounded
//!   number of commits; windows follow each other until everything
//!   published is copied. The last step waits for the commits in flight
//!   (W3) and takes in what was published during the window if that fits
//!   the same budget, and whatever it is in a window that follows one
//!   (so the chain ends: at most two windows per checkpoint), so the log
//!   restarts right behind it. A pre-allocated log is checkpointed whole.
//!
//! **Readers and several writers** (R1 holds whatever the protocol):
//!
//! - **W8** A checkpoint copies, and a restart drops, only commits the
//!   pager has installed, and asks for the open readers ([`Readers`]) at
//!   that moment. With several writers a commit is published here before
//!   the pager installs it, and a reader starting in between is on the
//!   snapshot before it, in no list taken earlier: a window ends at an
//!   installed commit, and a step that waits for the commits in flight
//!   (W3) waits for their installs too and asks for the readers again.
//! - **W9** A failed fdatasync of the log before a checkpoint poisons the
//!   handle: the frames it covered may be gone from the disk while the
//!   page cache still serves them, and a later fdatasync that succeeds
//!   would vouch for them. A failed fdatasync of the database file only
//!   drops the window (W6): the log still holds every page of it.

pub mod format;
mod retain;

pub use crate::cc::wal::WalLocks;
pub use format::{FrameHeader, WalHeader, FRAME_HEADER_SIZE, WAL_HEADER_SIZE, WAL_MAGIC};

use super::group::GroupCommit;
use super::{
    CheckpointInfo, CheckpointMode, CommitSet, CommitTicket, Journal, JournalMode, ModeOptions,
    PageImage, PendingWrite, ReaderView, Readers, RecoverCtx, Recovery, TestFaults,
};
use crate::base::header::seal_page1;
use crate::base::pgmap::{reset_map, PgnoMap};
use crate::base::sync::{Condvar, Mutex, MutexGuard, RwLock};
use crate::base::Synchronous;
use crate::base::Tid;
use crate::base::{Error, Pgno, Result};
use crate::base::{Header, HEADER_LEN};
use crate::storage::DbFile;
use crate::storage::{parent_dir, with_suffix, OpenFlags, VfsFile};
use format::frame_offset;
use retain::{Retained, Source, Version};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest single write of a group commit's frames (the leader writes its
/// followers' from one buffer), of pre-allocation zeros and of checkpoint
/// runs, and the read batch of recovery's scan.
const WRITE_CHUNK: usize = 1 << 20;
/// Frames per vectored write of [`WalJournal::write_frames`] (two
/// buffers each: 64 iovecs, 128 KiB of 4 KiB pages).
const FRAMES_PER_WRITE: usize = 32;
/// Commits of at most this many pages skip pages that did not change
/// (comparing costs a committed image per page, cheap only when few).
const SAME_IMAGE_MAX_PAGES: usize = 16;

/// Index entries a log restart keeps (emptied) for the next generation;
/// beyond this many pages it frees them.
const KEEP_INDEX_ENTRIES: usize = 1 << 16;

/// Pages an automatic checkpoint copies per commit by default (W4): 512
/// KiB of 4 KiB pages, about one fdatasync's worth on a phone's flash.
const DEFAULT_CHECKPOINT_STEP: u32 = 128;

/// Settings of the `wal` mode, parsed from [`ModeOptions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalOptions {
    /// Checkpoint automatically once the log holds this many frames
    /// (0: only on request and at close). Default 1000, as in SQLite.
    pub autocheckpoint: u32,
    /// After a restart, truncate a longer log to this many bytes (at least
    /// the 40-byte header is kept). `None`: no limit.
    pub journal_size_limit: Option<u64>,
    /// WAL_OPT: pre-allocate `autocheckpoint` frames and overwrite them in
    /// place.
    pub preallocate: bool,
    /// Delayed checkpoint: no restart check per append; checkpoint when
    /// `autocheckpoint` frames accumulated since the last checkpoint.
    pub delayed_checkpoint: bool,
    /// Incremental checkpoint: an automatic checkpoint copies at most this
    /// many pages per commit (at least twice the frames published since
    /// its previous step), W4-W7. 0: the whole checkpoint in the commit
    /// that made it due, as SQLite does.
    pub checkpoint_step: u32,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            autocheckpoint: 1000,
            journal_size_limit: None,
            preallocate: false,
            delayed_checkpoint: false,
            checkpoint_step: DEFAULT_CHECKPOINT_STEP,
        }
    }
}

impl WalOptions {
    /// The option names the mode understands.
    pub const NAMES: &'static [&'static str] = &[
        "wal_autocheckpoint",
        "journal_size_limit",
        "preallocate",
        "delayed_checkpoint",
        "checkpoint_step",
    ];

    /// Parse the mode's options; unknown names are rejected. Like SQLite,
    /// a negative `wal_autocheckpoint` disables automatic checkpoints and a
    /// negative `journal_size_limit` means no limit.
    pub fn parse(opts: &ModeOptions) -> Result<WalOptions> {
        opts.only(JournalMode::Wal, Self::NAMES)?;
        let ac: i64 = opts.parse_or("wal_autocheckpoint", 1000)?;
        let limit: i64 = opts.parse_or("journal_size_limit", -1)?;
        let o = WalOptions {
            autocheckpoint: ac.clamp(0, u32::MAX as i64) as u32,
            journal_size_limit: u64::try_from(limit).ok(),
            preallocate: opts.flag_or("preallocate", false)?,
            delayed_checkpoint: opts.flag_or("delayed_checkpoint", false)?,
            checkpoint_step: opts
                .parse_or::<i64>("checkpoint_step", DEFAULT_CHECKPOINT_STEP as i64)?
                .clamp(0, u32::MAX as i64) as u32,
        };
        if o.preallocate && o.autocheckpoint == 0 {
            return Err(Error::InvalidArgument(
                "preallocate needs wal_autocheckpoint > 0 (the log is sized to it)".into(),
            ));
        }
        Ok(o)
    }
}

/// One committed transaction in the log.
#[derive(Debug, Clone, Copy)]
struct CommitRec {
    tid: u64,
    /// Frames `[0, end)` belong to this and earlier transactions.
    end: u64,
    /// Database size in pages after it.
    db_size: u32,
}

/// A commit whose frames are reserved (the sequencer) but not yet
/// published: its frames may still be in flight, or waiting for the
/// fdatasync that covers them.
#[derive(Debug)]
struct InFlight {
    /// Its group commit ticket.
    ticket: u64,
    tid: u64,
    /// Frames `[start, end)` are its own.
    end: u64,
    /// The chain checksum after its last frame.
    end_chain: u32,
    db_size: u32,
    /// (page, frame) of each of its frames.
    frames: Vec<(Pgno, u64)>,
}

/// One page a checkpoint copies into the database file: the version of
/// `tid` in log frame `frame` (`None`: page 1 as the database file holds
/// it, rewritten only to carry the exact FCC).
#[derive(Debug, Clone, Copy)]
struct CopyPage {
    pgno: Pgno,
    frame: Option<u64>,
    tid: Tid,
}

/// An incremental checkpoint in progress (W4-W7): the committed frames
/// below `end` are being copied, `todo[pos..]` still to go.
#[derive(Debug, Default)]
struct Window {
    end: u64,
    /// TID and database size of the last commit below `end`.
    tid: Tid,
    db_size: u32,
    todo: Vec<CopyPage>,
    pos: usize,
    /// The FCC page 1 was copied with, if it was (the window's `tid` at
    /// that step; a later extension does not rewrite page 1 unless it was
    /// logged again).
    p1_fcc: Option<Tid>,
    /// The window follows one that could not take in everything published
    /// during it: its last step takes in the rest whatever the budget, so
    /// the chain ends (W7).
    chained: bool,
}

/// What readers consult: the wal-index.
#[derive(Default)]
struct Index {
    file: Option<Arc<dyn VfsFile>>,
    /// Committed versions of each page, oldest first.
    versions: PgnoMap<Vec<Version>>,
    /// Frames the in-progress transaction spilled (newest per page).
    pending: PgnoMap<u64>,
    /// TID of the in-progress transaction that owns `pending` (0: none).
    pending_tid: u64,
    /// Versions open readers still select that storage no longer holds
    /// (R1, `retain`).
    retained: Retained,
}

/// The writer's and checkpointer's state (under one mutex; the pager
/// already serializes spills, commits, rollbacks and checkpoints).
struct Writer {
    file: Option<Arc<dyn VfsFile>>,
    /// Our idea of the log's length (never shorter than the real one).
    file_len: u64,
    /// The log file was created in this session and its directory entry
    /// is not yet durable.
    needs_dir_sync: bool,
    /// Header of the current generation and its crc (the chain's seed).
    hdr: WalHeader,
    hdr_crc: u32,
    /// The current generation's header is in the file.
    header_on_disk: bool,
    /// Next frame to write and the checksum after the frame before it.
    next: u64,
    chain: u32,
    /// End of the committed frames (SQLite's mxFrame) and the checksum there.
    mx: u64,
    mx_chain: u32,
    /// Frames `[0, synced)` are known durable.
    synced: u64,
    /// Committed transactions of this generation, in order.
    commits: Vec<CommitRec>,
    /// Frames `[0, backfill)` have been copied into the database file.
    backfill: u64,
    /// The current write transaction has appended (spill or commit).
    in_txn: bool,
    /// A commit frame of the current transaction may be in the file.
    commit_written: bool,
    /// FCC recorded in page 1 of the database file.
    db_fcc: u64,
    /// The sequencer's commits not yet published, in frame order: frames
    /// `[mx, next)` are theirs (W1).
    inflight: VecDeque<InFlight>,
    /// Commits of several writers went through the sequencer this session.
    pipelined: bool,
    /// Scratch kept between commits: the pages a commit logs (indices
    /// into its page set) and the frames written.
    which: Vec<usize>,
    frames: Vec<(Pgno, u64)>,
    /// The incremental checkpoint in progress (W4).
    window: Option<Window>,
    /// Windows follow each other until everything committed is copied
    /// (W7), whether or not a checkpoint is due.
    catch_up: bool,
    /// `mx` when the window last took a step (W7's budget).
    step_mark: u64,
    /// Checkpoint copy buffer (runs of consecutive pages).
    ckpt_buf: Vec<u8>,
}

impl Writer {
    fn new() -> Writer {
        let mut w = Writer {
            file: None,
            file_len: 0,
            needs_dir_sync: false,
            hdr: WalHeader {
                page_size: 0,
                ckpt_seq: 0,
                salt1: crate::storage::random_u64() as u32,
                salt2: crate::storage::random_u64() as u32,
                base_fcc: 0,
            },
            hdr_crc: 0,
            header_on_disk: false,
            next: 0,
            chain: 0,
            mx: 0,
            mx_chain: 0,
            synced: 0,
            commits: Vec::new(),
            backfill: 0,
            in_txn: false,
            commit_written: false,
            db_fcc: 0,
            inflight: VecDeque::new(),
            pipelined: false,
            which: Vec::new(),
            frames: Vec::new(),
            window: None,
            catch_up: false,
            step_mark: 0,
            ckpt_buf: Vec::new(),
        };
        w.reseal();
        w
    }

    /// TID of the last commit in the log (the base if there is none).
    fn last_tid(&self) -> u64 {
        self.hdr.base_fcc + self.commits.len() as u64
    }

    /// The last commit of the generation a reader starting now may see
    /// (W8): at or before `installed`.
    fn installed_commit(&self, installed: Tid) -> Option<CommitRec> {
        self.commits
            .iter()
            .rev()
            .find(|c| c.tid <= installed)
            .copied()
    }

    /// TID of the last commit the sequencer put in the log, published or
    /// not.
    fn last_sequenced(&self) -> u64 {
        self.last_tid() + self.inflight.len() as u64
    }

    /// The header changed while the generation is empty: recompute its crc
    /// (the chain seed) and have it written before the first frame.
    fn reseal(&mut self) {
        let (_, crc) = self.hdr.encode();
        self.hdr_crc = crc;
        self.chain = crc;
        self.mx_chain = crc;
        self.header_on_disk = false;
    }

    /// Start a new, empty generation of the log (in memory; the header is
    /// written before its first frame).
    fn new_generation(&mut self, base_fcc: u64) {
        self.hdr.ckpt_seq = self.hdr.ckpt_seq.wrapping_add(1);
        // Salt-1 always changes, so no frame of the previous generation
        // can match; salt-2 is random as in SQLite.
        self.hdr.salt1 = self.hdr.salt1.wrapping_add(1);
        self.hdr.salt2 = crate::storage::random_u64() as u32;
        self.hdr.base_fcc = base_fcc;
        self.next = 0;
        self.mx = 0;
        self.synced = 0;
        self.backfill = 0;
        self.commits.clear();
        self.window = None;
        self.catch_up = false;
        self.reseal();
    }
}

/// Counters behind [`Journal::stats`].
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    frames: u64,
    backfilled: u64,
    max_frames: u64,
    checkpoints: u64,
    checkpoint_steps: u64,
    checkpoint_pages: u64,
    checkpoints_blocked: u64,
    restarts: u64,
    restarts_blocked: u64,
    prealloc_grows: u64,
    checkpoint_errors: u64,
    retained_pages: u64,
    retained_bytes: u64,
    max_retained_bytes: u64,
}

/// The `wal` journal mode.
pub struct WalJournal {
    sync: Synchronous,
    faults: TestFaults,
    opts: WalOptions,
    w: Mutex<Writer>,
    /// Signalled when an in-flight commit is published or fails.
    published: Condvar,
    /// Group commit of the sequencer's commits (W2).
    group: GroupCommit<()>,
    idx: RwLock<Index>,
    counters: Mutex<Counters>,
}

fn wal_path(db: &Path) -> PathBuf {
    with_suffix(db, "-wal")
}

fn corrupt_wal(db: &Path, what: String) -> Error {
    Error::corrupt(wal_path(db).display().to_string(), 0, what)
}

/// Apply and remove a `<db>-wal` that a WAL session left behind when the
/// database is now opened in another mode (otherwise its committed
/// transactions would be lost). Runs at open, before the header is read.
pub fn checkpoint_leftover(ctx: &RecoverCtx<'_>, sync: Synchronous) -> Result<Recovery> {
    let j = WalJournal::new(sync, TestFaults::default(), WalOptions::default());
    let r = j.recover(ctx)?;
    let ps = {
        let w = j.w.lock();
        if w.file.is_none() {
            return Ok(r);
        }
        w.hdr.page_size as usize
    };
    if !crate::base::valid_page_size(ps) {
        return Ok(r);
    }
    let db = DbFile::new(
        ctx.vfs.clone(),
        ctx.path.to_path_buf(),
        ctx.file.clone(),
        ps,
    );
    j.close(&db)?;
    Ok(r)
}

impl WalJournal {
    /// A WAL journal with the given sync level and options.
    pub fn new(sync: Synchronous, faults: TestFaults, opts: WalOptions) -> Self {
        WalJournal {
            sync,
            faults,
            opts,
            w: Mutex::new(Writer::new()),
            published: Condvar::new(),
            group: GroupCommit::new(),
            idx: RwLock::new(Index::default()),
            counters: Mutex::default(),
        }
    }

    fn syncs(&self) -> bool {
        self.sync != Synchronous::Off
    }

    /// Pre-allocated size of the log in bytes (WAL_OPT).
    fn capacity_bytes(&self, ps: usize) -> u64 {
        frame_offset(self.opts.autocheckpoint as u64, ps)
    }

    fn note_frames(&self, w: &Writer) {
        let mut c = self.counters.lock();
        c.frames = w.mx;
        c.backfilled = w.backfill;
        c.max_frames = c.max_frames.max(w.mx);
    }

    /// Open or create the log file and make sure the current generation's
    /// header is durable before any frame of it is written.
    fn ensure_header(&self, w: &mut Writer, db: &DbFile) -> Result<()> {
        let ps = db.page_size;
        if w.file.is_none() {
            let path = wal_path(&db.path);
            let created = !db.vfs.exists(&path)?;
            let f = db.vfs.open(&path, OpenFlags::CREATE)?;
            w.file_len = f.len()?;
            w.file = Some(f.clone());
            w.needs_dir_sync = created;
            w.header_on_disk = false;
            self.idx.write().file = Some(f);
        }
        if w.header_on_disk {
            return Ok(());
        }
        let file = w.file.clone().expect("opened above");
        if self.opts.preallocate {
            let want = self.capacity_bytes(ps);
            if w.file_len < want {
                // Real zeros, not set_len: a sparse file would allocate
                // blocks (and journal metadata) at the first appends.
                let zeros = vec![0u8; WRITE_CHUNK];
                let mut off = w.file_len;
                while off < want {
                    let n = (want - off).min(WRITE_CHUNK as u64) as usize;
                    file.write_at(&zeros[..n], off)?;
                    off += n as u64;
                }
                w.file_len = want;
            }
        }
        let (bytes, crc) = w.hdr.encode();
        debug_assert_eq!(crc, w.hdr_crc);
        file.write_at(&bytes, 0)?;
        w.file_len = w.file_len.max(WAL_HEADER_SIZE);
        if self.syncs() {
            file.sync_data()?;
            if w.needs_dir_sync {
                db.vfs.sync_dir(&parent_dir(&db.path))?;
                w.needs_dir_sync = false;
            }
        }
        w.header_on_disk = true;
        Ok(())
    }

    /// Wait until no commit of the sequencer is in flight (W3). The caller
    /// holds the pager's commit lock, so no new one can start; the ones in
    /// flight finish without it.
    fn quiesce(&self, w: &mut MutexGuard<'_, Writer>) -> Result<()> {
        while !w.inflight.is_empty() {
            if let Some(why) = self.group.failed() {
                return Err(Error::Poisoned(format!(
                    "a commit of this session failed to become durable ({why}); reopen the database"
                )));
            }
            self.published.wait(w);
        }
        Ok(())
    }

    /// [`Self::quiesce`], then wait until the pager has installed every
    /// published commit and ask for the readers (W8). Installs take
    /// neither the writer lock nor the commit lock, so holding both here
    /// is safe.
    fn quiesce_installed(
        &self,
        w: &mut MutexGuard<'_, Writer>,
        readers: &dyn Readers,
    ) -> Result<ReaderView> {
        self.quiesce(w)?;
        readers.view_after(w.last_tid())
    }

    /// Encode `pages[i]` for each `i` in `which` as frames starting at
    /// frame `start` after chain value `chain`, the last one a commit frame
    /// for a database of `commit` pages. Returns the bytes, the (page,
    /// frame) pairs and the chain after the last frame.
    #[allow(clippy::type_complexity)]
    fn encode_frames(
        &self,
        w: &Writer,
        ps: usize,
        set: &CommitSet<'_>,
        which: &[usize],
        start: u64,
    ) -> Result<(Vec<u8>, Vec<(Pgno, u64)>, u32)> {
        let fsz = FRAME_HEADER_SIZE + ps;
        let mut buf = Vec::with_capacity(which.len() * fsz);
        let mut frames = Vec::with_capacity(which.len());
        let mut chain = w.chain;
        for (i, p) in which.iter().map(|&i| &set.pages[i]).enumerate() {
            if p.data.len() != ps || p.pgno == 0 {
                return Err(Error::InvalidArgument(format!(
                    "page {} image of {} bytes for a {ps}-byte page",
                    p.pgno,
                    p.data.len()
                )));
            }
            let last = i + 1 == which.len();
            let fh = FrameHeader {
                pgno: p.pgno,
                commit_size: if last { set.new_page_count } else { 0 },
                salt1: w.hdr.salt1,
                salt2: w.hdr.salt2,
                tid32: set.tid as u32,
            };
            let at = buf.len();
            buf.resize(at + FRAME_HEADER_SIZE, 0);
            chain = fh.encode(
                chain,
                &p.data,
                p.sum_at,
                &mut buf[at..at + FRAME_HEADER_SIZE],
            );
            buf.extend_from_slice(&p.data);
            frames.push((p.pgno, start + i as u64));
        }
        Ok((buf, frames, chain))
    }

    /// Is an automatic checkpoint due after a commit? The log holds
    /// `wal_autocheckpoint` frames (delayed: that many not yet copied).
    fn checkpoint_due(&self, w: &Writer) -> bool {
        let n = self.opts.autocheckpoint as u64;
        let size = if self.opts.delayed_checkpoint {
            w.mx - w.backfill
        } else {
            w.mx
        };
        n > 0 && w.mx > 0 && size >= n
    }

    /// Before the first frame of a transaction: a pre-allocated log that
    /// cannot take the frames is checkpointed first; the plain variant
    /// restarts the log if it can; then the log header.
    fn begin_append(
        &self,
        w: &mut MutexGuard<'_, Writer>,
        db: &DbFile,
        frames: u64,
        tid: u64,
        readers: &dyn Readers,
    ) -> Result<()> {
        if !w.in_txn {
            let n = self.opts.autocheckpoint as u64;
            if self.opts.preallocate && w.mx > 0 && w.next + frames > n {
                // W3: the restart after it must not strand frames in flight.
                let view = self.quiesce_installed(w, readers)?;
                self.run_checkpoint(w, db, CheckpointMode::Passive, &view, false)?;
            }
            if !self.opts.delayed_checkpoint {
                self.try_restart(w, db, readers)?;
            }
            w.in_txn = true;
            w.commit_written = false;
        }
        if w.next == 0 && (w.hdr.page_size as usize != db.page_size || w.hdr.base_fcc + 1 != tid) {
            // An empty generation starts from whatever the database is now.
            w.hdr.page_size = db.page_size as u32;
            w.hdr.base_fcc = tid.saturating_sub(1);
            w.reseal();
        }
        if w.hdr.page_size as usize != db.page_size || tid != w.last_sequenced() + 1 {
            return Err(corrupt_wal(
                &db.path,
                format!(
                    "log holds TIDs up to {} with {}-byte pages; transaction {tid} has {}-byte pages",
                    w.last_sequenced(),
                    w.hdr.page_size,
                    db.page_size
                ),
            ));
        }
        self.ensure_header(w, db)
    }

    /// Append `pages` as frames (the last one a commit frame if `commit`
    /// gives the database size); returns (page, frame) pairs.
    /// Append `pages[i]` for each `i` in `which` as frames; `out` receives
    /// (page, frame) for each.
    #[allow(clippy::too_many_arguments)]
    fn write_frames(
        &self,
        w: &mut Writer,
        db: &DbFile,
        pages: &[PageImage],
        which: &[usize],
        tid: u64,
        commit: Option<u32>,
        out: &mut Vec<(Pgno, u64)>,
    ) -> Result<()> {
        let ps = db.page_size;
        let file = w.file.clone().expect("ensure_header opened the log");
        out.clear();
        let mut chain = w.chain;
        let mut frame = w.next;
        // Each frame goes out as its header and the page image where it
        // lies (one vectored write per batch): no copy of the page.
        let mut heads = [[0u8; FRAME_HEADER_SIZE]; FRAMES_PER_WRITE];
        for (b, batch) in which.chunks(FRAMES_PER_WRITE).enumerate() {
            let batch_start = frame;
            for (j, p) in batch.iter().map(|&i| &pages[i]).enumerate() {
                if p.data.len() != ps || p.pgno == 0 {
                    return Err(Error::InvalidArgument(format!(
                        "page {} image of {} bytes for a {ps}-byte page",
                        p.pgno,
                        p.data.len()
                    )));
                }
                let last = b * FRAMES_PER_WRITE + j + 1 == which.len();
                let fh = FrameHeader {
                    pgno: p.pgno,
                    commit_size: if last { commit.unwrap_or(0) } else { 0 },
                    salt1: w.hdr.salt1,
                    salt2: w.hdr.salt2,
                    tid32: tid as u32,
                };
                chain = fh.encode(chain, &p.data, p.sum_at, &mut heads[j]);
                out.push((p.pgno, frame));
                frame += 1;
            }
            let mut parts: [&[u8]; 2 * FRAMES_PER_WRITE] = [&[]; 2 * FRAMES_PER_WRITE];
            for (j, p) in batch.iter().map(|&i| &pages[i]).enumerate() {
                parts[2 * j] = &heads[j];
                parts[2 * j + 1] = &p.data;
            }
            file.write_vectored_at(&parts[..2 * batch.len()], frame_offset(batch_start, ps))?;
        }
        let end = frame_offset(frame, ps);
        if end > w.file_len {
            if self.opts.preallocate && w.file_len >= self.capacity_bytes(ps) {
                // Readers pinned the log or a transaction outgrew it.
                self.counters.lock().prealloc_grows += 1;
            }
            w.file_len = end;
        }
        w.next = frame;
        w.chain = chain;
        Ok(())
    }

    /// Restart the log if everything is checkpointed and no transaction
    /// has frames in it. Readers do not stop it: the versions their
    /// snapshots still select in this generation are kept in memory first
    /// (R1). A published commit the pager has not installed yet does (W8):
    /// a reader starting now would be on the snapshot before it, and the
    /// list could not name that reader. Returns whether it restarted.
    fn try_restart(&self, w: &mut Writer, db: &DbFile, readers: &dyn Readers) -> Result<bool> {
        if w.next == 0 || w.next != w.mx || w.backfill < w.mx {
            return Ok(false);
        }
        let view = readers.view();
        if view.installed < w.last_tid() {
            return Ok(false);
        }
        if view.snapshots.first().is_some_and(|&s| s < w.last_tid()) {
            self.keep_for_readers(w, db, &view.snapshots)?;
        }
        let base = w.last_tid();
        w.new_generation(base);
        {
            let mut idx = self.idx.write();
            if idx.versions.len() > KEEP_INDEX_ENTRIES {
                idx.versions.clear();
            } else {
                // Emptied, not removed: the next generation reuses the
                // entries and their vectors (an empty list is no version).
                // When most entries sat idle through the ending generation,
                // those go: every checkpoint walks the whole index, and a
                // bulk load's pages would otherwise stay in it for good (a
                // million-row table's 34,000 pages walked at every
                // checkpoint step). A steady working set keeps its entries.
                let used = idx.versions.values().filter(|vs| !vs.is_empty()).count();
                let idle = idx.versions.len() > 4 * used + 64;
                idx.versions.retain(|_, vs| {
                    let keep = !idle || !vs.is_empty();
                    vs.clear();
                    keep
                });
            }
            idx.pending.clear();
            idx.pending_tid = 0;
        }
        self.counters.lock().restarts += 1;
        self.note_frames(w);
        if let Some(limit) = self.opts.journal_size_limit {
            if !self.opts.preallocate && w.file_len > limit.max(WAL_HEADER_SIZE) {
                // The new header goes first: under the old one, the frames
                // left below the limit would be a valid prefix of the old
                // generation and would override newer database pages.
                self.ensure_header(w, db)?;
                let keep = limit.max(WAL_HEADER_SIZE);
                w.file.as_ref().expect("log is open").set_len(keep)?;
                w.file_len = keep;
            }
        }
        Ok(true)
    }

    /// Before a restart drops this generation: keep in memory each log
    /// version a snapshot in `readers` selects that the database file does
    /// not hold (every frame is backfilled, so the file holds each page's
    /// newest version): R1.
    fn keep_for_readers(&self, w: &Writer, db: &DbFile, readers: &[Tid]) -> Result<()> {
        let mut want: Vec<(Pgno, Tid, u64, Tid)> = Vec::new();
        {
            let idx = self.idx.read();
            for (&pg, vs) in &idx.versions {
                let Some(newest) = vs.last() else { continue };
                for &s in readers.iter().take_while(|&&s| s < newest.tid) {
                    if let Source::Log(f) = idx.retained.select(pg, vs, s) {
                        if let Some(v) = vs.iter().find(|v| v.frame == f) {
                            if !want.iter().any(|x| x.0 == pg && x.2 == f) {
                                want.push((pg, v.tid, f, newest.tid));
                            }
                        }
                    }
                }
            }
        }
        if want.is_empty() {
            return Ok(());
        }
        let file = w.file.clone().expect("a log with frames is open");
        let mut images = Vec::with_capacity(want.len());
        for &(pg, _, f, _) in &want {
            let mut buf = vec![0u8; db.page_size];
            Self::read_frame(&file, f, pg, &mut buf)?;
            images.push(Arc::<[u8]>::from(buf));
        }
        let mut idx = self.idx.write();
        for ((pg, tid, _, db_tid), img) in want.into_iter().zip(images) {
            idx.retained.keep(pg, tid, img, db_tid);
        }
        self.note_retained(&idx);
        Ok(())
    }

    /// Update the retention counters.
    fn note_retained(&self, idx: &Index) {
        let (pages, bytes) = idx.retained.size();
        let mut c = self.counters.lock();
        c.retained_pages = pages as u64;
        c.retained_bytes = bytes as u64;
        c.max_retained_bytes = c.max_retained_bytes.max(bytes as u64);
    }

    /// The pages a checkpoint of the committed frames below `end` copies,
    /// in page order: each page whose newest version below `end` is at or
    /// after frame `from` (older ones the database file holds already),
    /// within the database size `db_size` of the last commit below `end`.
    /// With `fix_fcc`, page 1 is in the list even if it was not logged since
    /// `from`, so that the database file gets the exact FCC `tid`.
    fn checkpoint_todo(
        &self,
        from: u64,
        end: u64,
        db_size: Option<u32>,
        fix_fcc: bool,
        tid: Tid,
    ) -> Vec<CopyPage> {
        if end <= from && !fix_fcc {
            // Nothing new: no need to scan the index.
            return Vec::new();
        }
        let idx = self.idx.read();
        let mut todo = Vec::new();
        for (&pg, vs) in &idx.versions {
            let n = vs.partition_point(|v| v.frame < end);
            if n > 0 && vs[n - 1].frame >= from && db_size.is_none_or(|s| pg <= s) {
                todo.push(CopyPage {
                    pgno: pg,
                    frame: Some(vs[n - 1].frame),
                    tid: vs[n - 1].tid,
                });
            }
        }
        todo.sort_unstable_by_key(|t| t.pgno);
        if fix_fcc && todo.first().is_none_or(|t| t.pgno != 1) {
            let frame = idx.versions.get(&1).and_then(|vs| {
                let n = vs.partition_point(|v| v.frame < end);
                (n > 0).then(|| vs[n - 1].frame)
            });
            todo.insert(
                0,
                CopyPage {
                    pgno: 1,
                    frame,
                    tid,
                },
            );
        }
        todo
    }

    /// Before the database file reflects frames below `end`, make them
    /// durable: otherwise power loss could leave the database ahead of a log
    /// that then overrides it with older versions.
    /// A failure poisons the handle (W9): the frames it covered may have
    /// been dropped from the page cache, and a later fdatasync that
    /// succeeds would not say so, yet the checkpoint would copy them into
    /// the database file from memory.
    fn sync_log_to(&self, w: &mut Writer, end: u64) -> Result<()> {
        if end > w.synced && self.syncs() && !self.faults.skip_journal_sync {
            let file = w.file.as_ref().expect("a log with frames is open");
            file.sync_data().map_err(|e| {
                Error::Poisoned(format!(
                    "fdatasync of {} before a checkpoint failed: {e}; reopen the database",
                    file.path().display()
                ))
            })?;
            w.synced = w.mx;
        }
        Ok(())
    }

    /// Copy `pages` from the log into the database file, each run of
    /// consecutive page numbers in one write; page 1 gets the FCC `tid`.
    /// With `tracking`, an image an open snapshot still selects is kept in
    /// memory before it is overwritten (R1).
    fn copy_pages(
        &self,
        w: &mut Writer,
        db: &DbFile,
        pages: &[CopyPage],
        tid: Tid,
        readers: &[Tid],
        tracking: bool,
    ) -> Result<()> {
        let ps = db.page_size;
        let file = w.file.clone().expect("a log with frames is open");
        let max_run = (WRITE_CHUNK / ps).max(1);
        let mut buf = std::mem::take(&mut w.ckpt_buf);
        let r = (|| {
            let mut i = 0;
            while i < pages.len() {
                let first = pages[i].pgno;
                let mut n = 1;
                while i + n < pages.len()
                    && n < max_run
                    && pages[i + n].pgno as u64 == first as u64 + n as u64
                {
                    n += 1;
                }
                // Grown once and kept: every byte of the run is read over,
                // so the buffer is never cleared (a shrink and a regrow
                // would zero-fill a chunk per run).
                if buf.len() < n * ps {
                    buf.resize(n * ps, 0);
                }
                let run = &mut buf[..n * ps];
                for (t, page) in pages[i..i + n].iter().zip(run.chunks_exact_mut(ps)) {
                    if tracking {
                        self.keep_db_image(db, t.pgno, readers, t.tid)?;
                    }
                    match t.frame {
                        Some(f) => Self::read_frame(&file, f, t.pgno, page)?,
                        None => db.read_page(t.pgno, page)?,
                    }
                    if t.pgno == 1 {
                        // Commits that change only the FCC skip page 1; the
                        // copy in the database file gets the exact one.
                        let mut h = Header::read_from(page, &db.path.display().to_string())?;
                        h.fcc = tid;
                        h.write_to(page);
                        seal_page1(page);
                    }
                }
                db.write_pages(first, &buf[..n * ps])?;
                i += n;
            }
            Ok(())
        })();
        w.ckpt_buf = buf;
        r
    }

    /// The window's end is copied: shrink the database file to the size of
    /// its last commit (keeping for older snapshots what they may still
    /// read past that end, R1). Returns whether it shrank.
    fn truncate_db(
        &self,
        db: &DbFile,
        size: u32,
        tid: Tid,
        readers: &[Tid],
        tracking: bool,
    ) -> Result<bool> {
        let ps = db.page_size as u64;
        let dbf = db.file();
        let len = dbf.len()?;
        let want = size as u64 * ps;
        if len > want {
            if tracking {
                let end = u32::try_from(len / ps).unwrap_or(u32::MAX);
                for pg in size + 1..=end {
                    self.keep_db_image(db, pg, readers, tid)?;
                }
            }
            dbf.set_len(want)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Whether the checkpoint must track what it overwrites (R1): readers
    /// are open or kept versions remain. Without readers, drops them all.
    fn tracking(&self, readers: &[Tid]) -> bool {
        let mut idx = self.idx.write();
        if readers.is_empty() && !idx.retained.is_empty() {
            idx.retained.clear();
            self.note_retained(&idx);
        }
        !readers.is_empty() || !idx.retained.is_empty()
    }

    /// After a checkpoint or one of its steps: drop the kept versions no
    /// open snapshot selects any more.
    fn collect_retained(&self, readers: &[Tid]) {
        let mut idx = self.idx.write();
        let Index {
            versions, retained, ..
        } = &mut *idx;
        retained.collect(readers, |pg| versions.get(&pg).map_or(&[][..], |v| v));
        self.note_retained(&idx);
    }

    /// The checkpoint proper: copy the newest version of every page in the
    /// log into the database file, sync it, and restart the log if `mode`
    /// (or the delayed variant) asks. Readers do not stop it: an image it
    /// overwrites that a snapshot in `readers` still selects is kept in
    /// memory first (R1). `exact_fcc`: the log may vanish afterwards, so
    /// page 1 in the database file must carry the exact FCC. It supersedes
    /// an incremental checkpoint in progress (W6).
    fn run_checkpoint(
        &self,
        w: &mut Writer,
        db: &DbFile,
        mode: CheckpointMode,
        view: &ReaderView,
        exact_fcc: bool,
    ) -> Result<CheckpointInfo> {
        w.window = None;
        w.catch_up = false;
        // W8: only installed commits (the callers wait for every published
        // one to be installed first, so this bound rarely bites).
        let (safe_end, ckpt_tid, db_size) = match w.installed_commit(view.installed) {
            None => (w.backfill, w.hdr.base_fcc, None),
            Some(c) => (c.end, c.tid, Some(c.db_size)),
        };
        w.catch_up = safe_end < w.mx;
        let readers = &view.snapshots[..];
        let fix_fcc = exact_fcc && w.db_fcc != ckpt_tid;
        let tracking = self.tracking(readers);
        let todo = self.checkpoint_todo(w.backfill, safe_end, db_size, fix_fcc, ckpt_tid);
        if !todo.is_empty() {
            self.sync_log_to(w, safe_end)?;
            self.copy_pages(w, db, &todo, ckpt_tid, readers, tracking)?;
            if let Some(size) = db_size {
                self.truncate_db(db, size, ckpt_tid, readers, tracking)?;
            }
            if self.syncs() {
                db.file().sync_data()?;
            }
            if todo[0].pgno == 1 {
                w.db_fcc = ckpt_tid;
            }
            let mut c = self.counters.lock();
            c.checkpoints += 1;
            c.checkpoint_steps += 1;
            c.checkpoint_pages += todo.len() as u64;
        }
        w.backfill = w.backfill.max(safe_end);
        let info = CheckpointInfo {
            log_frames: w.mx,
            checkpointed: w.backfill,
            blocked_by_readers: 0,
        };
        let restart = matches!(mode, CheckpointMode::Restart | CheckpointMode::Truncate)
            || self.opts.delayed_checkpoint;
        if restart {
            self.try_restart(w, db, view)?;
        }
        if tracking {
            self.collect_retained(readers);
        }
        if mode == CheckpointMode::Truncate
            && !self.opts.preallocate
            && w.next == 0
            && w.file_len > 0
        {
            let file = w.file.clone().expect("a log with a length is open");
            file.set_len(0)?;
            w.file_len = 0;
            w.header_on_disk = false;
        }
        self.note_frames(w);
        Ok(info)
    }

    /// One step of the incremental checkpoint (W4-W7), after a commit was
    /// installed: start a window over the committed frames if none is in
    /// progress, copy the next pages of it in page order, fdatasync the
    /// database file; on the last step, wait for the commits in flight,
    /// take in what was published meanwhile, move `backfill` to the end and
    /// let the log restart.
    fn checkpoint_step(
        &self,
        w: &mut MutexGuard<'_, Writer>,
        db: &DbFile,
        source: &dyn Readers,
    ) -> Result<()> {
        let mut view = source.view();
        let mut tracking = self.tracking(&view.snapshots);
        if w.window.is_none() {
            if w.commits.is_empty() {
                w.catch_up = false;
                return Ok(());
            }
            // W8: a window ends at an installed commit.
            let Some(last) = w.installed_commit(view.installed) else {
                return Ok(());
            };
            let todo =
                self.checkpoint_todo(w.backfill, last.end, Some(last.db_size), false, last.tid);
            if todo.is_empty() {
                w.backfill = w.backfill.max(last.end);
            } else {
                self.sync_log_to(w, last.end)?;
            }
            w.window = Some(Window {
                end: last.end,
                tid: last.tid,
                db_size: last.db_size,
                todo,
                pos: 0,
                p1_fcc: None,
                chained: w.catch_up,
            });
            // The commit that made the window due counts toward its first
            // step's budget (W7).
            let n = w.commits.len();
            w.step_mark = if n >= 2 { w.commits[n - 2].end } else { 0 };
        }
        // W7: at least twice what was published since the last step, so the
        // window ends after a bounded number of commits.
        let budget = (self.opts.checkpoint_step as u64)
            .max(2 * w.mx.saturating_sub(w.step_mark))
            .max(1);
        w.step_mark = w.mx;
        let mut win = w.window.take().expect("a window was started");
        let left = (win.todo.len() - win.pos) as u64;
        let last = left <= budget;
        if last {
            // W3, W7: the commits in flight are published, and what was
            // published during the window joins it if that fits the budget
            // (otherwise the next window takes it), so that the log can
            // restart right behind this step. W8: once they are installed,
            // the readers are asked again.
            view = self.quiesce_installed(w, source)?;
            tracking = self.tracking(&view.snapshots);
            if let Some(c) = w.commits.last().copied() {
                if c.end > win.end {
                    let more = self.checkpoint_todo(win.end, c.end, Some(c.db_size), false, c.tid);
                    if win.chained || left + more.len() as u64 <= budget {
                        self.sync_log_to(w, c.end)?;
                        win.todo.extend(more);
                        (win.end, win.tid, win.db_size) = (c.end, c.tid, c.db_size);
                    }
                }
            }
        }
        let to = if last {
            win.todo.len()
        } else {
            win.pos + budget as usize
        };
        let step = &win.todo[win.pos..to];
        if !step.is_empty() {
            if step.iter().any(|t| t.pgno == 1) {
                win.p1_fcc = Some(win.tid);
            }
            self.copy_pages(w, db, step, win.tid, &view.snapshots, tracking)?;
        }
        let shrank = last
            && !win.todo.is_empty()
            && self.truncate_db(db, win.db_size, win.tid, &view.snapshots, tracking)?;
        if !step.is_empty() || shrank {
            // Every step, not only the last: the flush of a window is spread
            // over its commits instead of landing on one of them.
            if self.syncs() {
                db.file().sync_data()?;
            }
            let mut c = self.counters.lock();
            c.checkpoint_steps += 1;
            c.checkpoint_pages += step.len() as u64;
            c.checkpoints += last as u64;
        }
        win.pos = to;
        if last {
            // W4: only now is the whole window in the database file.
            if let Some(fcc) = win.p1_fcc {
                w.db_fcc = fcc;
            }
            w.backfill = w.backfill.max(win.end);
            w.catch_up = w.backfill < w.mx;
            if !w.catch_up && (w.pipelined || self.opts.delayed_checkpoint) {
                // Under load the next append rarely finds the log quiet;
                // restart now, while it is.
                self.try_restart(w, db, &view)?;
            }
        } else {
            w.window = Some(win);
        }
        if tracking {
            self.collect_retained(&view.snapshots);
        }
        self.note_frames(w);
        Ok(())
    }

    /// The database file is about to receive `pgno`'s version `tid` (or
    /// lose the page, at a truncation to a state at `tid`): keep the image
    /// it holds now if a snapshot in `readers` still selects it, and
    /// record which version the file holds from now on (R1).
    fn keep_db_image(&self, db: &DbFile, pgno: Pgno, readers: &[Tid], tid: Tid) -> Result<()> {
        let needed = {
            let idx = self.idx.read();
            let vs = idx.versions.get(&pgno).map_or(&[][..], |v| v.as_slice());
            idx.retained.needs_db_image(pgno, vs, readers, tid)
        };
        let image = if needed && (pgno as u64) * (db.page_size as u64) <= db.file().len()? {
            let mut buf = vec![0u8; db.page_size];
            db.read_page(pgno, &mut buf)?;
            Some(Arc::<[u8]>::from(buf))
        } else {
            None
        };
        let mut idx = self.idx.write();
        match image {
            Some(img) => idx.retained.keep_db_image(pgno, img, tid),
            None => idx.retained.copied(pgno, tid),
        }
        if needed {
            self.note_retained(&idx);
        }
        Ok(())
    }

    /// The pages of a commit that need a frame. One frame for a one-row
    /// change, as in SQLite: page 1 is left out when only the FCC changed
    /// (the log's TIDs carry it), and in small transactions (the
    /// auto-commit case) so is a page whose image equals its committed one
    /// (the full left half of an appending split, which SQLite's
    /// balance-quick never touches). Spilled pages are always logged: their
    /// pending frame is not the committed image.
    /// The pages of `set` a commit logs, as indices into `set.pages`.
    fn pages_to_log(&self, set: &CommitSet<'_>, out: &mut Vec<usize>) -> Result<()> {
        let header_same = only_fcc_changed(set.prev_header, set.header);
        let compare = set.pages.len() <= SAME_IMAGE_MAX_PAGES;
        out.clear();
        let mut page1 = None;
        // Spilled pages are always logged again; most commits spilled none.
        let any_spilled = !self.idx.read().pending.is_empty();
        for (i, p) in set.pages.iter().enumerate() {
            if any_spilled && self.idx.read().pending.contains_key(&p.pgno) {
                out.push(i);
            } else if p.pgno == 1 {
                page1 = Some(i);
                if !header_same {
                    out.push(i);
                }
            } else if !(compare
                && p.pgno <= set.orig_page_count
                && *set.originals.original(p.pgno)? == *p.data)
            {
                out.push(i);
            }
        }
        if out.is_empty() {
            // The commit frame has to be some page.
            match page1.or((!set.pages.is_empty()).then_some(0)) {
                Some(i) => out.push(i),
                None => return Err(Error::InvalidArgument("commit without pages".into())),
            }
        }
        Ok(())
    }

    fn read_frame(file: &Arc<dyn VfsFile>, frame: u64, pgno: Pgno, buf: &mut [u8]) -> Result<()> {
        file.read_exact_at(
            buf,
            frame_offset(frame, buf.len()) + FRAME_HEADER_SIZE as u64,
            pgno,
        )
    }
}

/// Whether `header` differs from `prev` only in its FCC: page 1 then
/// needs no frame (the log's TIDs carry the FCC).
fn only_fcc_changed(prev: &Header, header: &Header) -> bool {
    let mut prev = *prev;
    prev.fcc = header.fcc;
    prev == *header
}

impl Journal for WalJournal {
    fn writes_pager_page1(&self, prev: &Header, header: &Header) -> bool {
        // Only the FCC changed: the page gets no frame (`pages_to_log`),
        // unless the transaction's pages all went to the log as spilled
        // frames already, when page 1 is the one left to be the commit
        // frame.
        !only_fcc_changed(prev, header) || !self.idx.read().pending.is_empty()
    }

    fn mode(&self) -> JournalMode {
        JournalMode::Wal
    }

    fn recover(&self, ctx: &RecoverCtx<'_>) -> Result<Recovery> {
        let mut w = self.w.lock();
        *w = Writer::new();
        *self.idx.write() = Index::default();
        let wpath = wal_path(ctx.path);
        let mut probe = [0u8; HEADER_LEN];
        let n = ctx.file.read_at(&mut probe, 0)?;
        let db_len = ctx.file.len()?;
        // The pager's own test for a database that is still to be created.
        let fresh = db_len == 0 || (probe[..n].iter().all(|&b| b == 0) && db_len <= 2 * 65536);
        let dbh = Header::read_from(&probe[..n], &ctx.path.display().to_string()).ok();
        if let Some(h) = &dbh {
            w.db_fcc = h.fcc;
        }
        if !ctx.vfs.exists(&wpath)? {
            return Ok(Recovery::default());
        }
        if fresh {
            // A log without its database (the database was deleted) must
            // not be applied to a new one of the same name.
            ctx.vfs.remove(&wpath)?;
            return Ok(Recovery {
                recovered: false,
                pages: 0,
                detail: "removed a WAL left without its database".into(),
            });
        }
        let Some(dbh) = dbh else {
            // The pager reports the damaged header; leave the log alone.
            return Ok(Recovery::default());
        };
        let ps = dbh.page_size as usize;
        let file = ctx.vfs.open(&wpath, OpenFlags::EXISTING)?;
        let len = file.len()?;
        w.file_len = len;
        w.file = Some(file.clone());
        self.idx.write().file = Some(file.clone());
        w.hdr.page_size = ps as u32;
        w.hdr.base_fcc = dbh.fcc;
        w.reseal();
        let mut hb = [0u8; WAL_HEADER_SIZE as usize];
        let got = file.read_at(&mut hb, 0)?;
        let Some((hdr, crc)) = (got == hb.len()).then(|| WalHeader::decode(&hb)).flatten() else {
            // No valid header: the log was being created or truncated.
            return Ok(Recovery::default());
        };
        if hdr.page_size as usize != ps {
            return Err(corrupt_wal(
                ctx.path,
                format!(
                    "log has {}-byte pages, the database {ps}-byte pages",
                    hdr.page_size
                ),
            ));
        }
        w.hdr = hdr;
        w.hdr_crc = crc;
        w.header_on_disk = true;

        // Scan frames while salts, TIDs and the checksum chain hold.
        let fsz = FRAME_HEADER_SIZE + ps;
        let total = len.saturating_sub(WAL_HEADER_SIZE) / fsz as u64;
        let batch = (WRITE_CHUNK / fsz).max(1) as u64;
        let mut buf = vec![0u8; batch as usize * fsz];
        let mut chain = crc;
        let mut frame = 0u64;
        let mut txn: PgnoMap<u64> = PgnoMap::default();
        let mut versions: PgnoMap<Vec<Version>> = PgnoMap::default();
        let (mut mx, mut mx_chain) = (0u64, crc);
        'scan: while frame < total {
            let n = (total - frame).min(batch);
            let bytes = &mut buf[..n as usize * fsz];
            file.read_exact_at(bytes, frame_offset(frame, ps), 0)?;
            for fb in bytes.chunks_exact(fsz) {
                let Some((fh, c)) =
                    FrameHeader::decode(&fb[..FRAME_HEADER_SIZE], chain, &fb[FRAME_HEADER_SIZE..])
                else {
                    break 'scan;
                };
                let tid = hdr.base_fcc + w.commits.len() as u64 + 1;
                if fh.salt1 != hdr.salt1
                    || fh.salt2 != hdr.salt2
                    || fh.pgno == 0
                    || fh.tid32 != tid as u32
                    || fh.commit_size == 1
                {
                    break 'scan;
                }
                chain = c;
                txn.insert(fh.pgno, frame);
                frame += 1;
                if fh.commit_size != 0 {
                    for (pg, f) in txn.drain() {
                        if pg <= fh.commit_size {
                            versions
                                .entry(pg)
                                .or_default()
                                .push(Version { tid, frame: f });
                        }
                    }
                    w.commits.push(CommitRec {
                        tid,
                        end: frame,
                        db_size: fh.commit_size,
                    });
                    mx = frame;
                    mx_chain = chain;
                }
            }
        }
        let log_end = w.last_tid();
        if log_end < dbh.fcc {
            // The database is newer than everything in the log (a log that
            // outlived its checkpoint by other means): never apply it. The
            // next append starts a new generation over it.
            w.commits.clear();
            w.hdr.salt1 = w.hdr.salt1.wrapping_add(1);
            w.hdr.base_fcc = dbh.fcc;
            w.reseal();
            return Ok(Recovery {
                recovered: false,
                pages: 0,
                detail: format!(
                    "ignored a WAL ending at TID {log_end} below the database's {}",
                    dbh.fcc
                ),
            });
        }
        w.next = mx;
        w.mx = mx;
        w.chain = mx_chain;
        w.mx_chain = mx_chain;
        // After a process crash the frames may sit in the OS cache only:
        // sync before the first checkpoint relies on them.
        w.synced = 0;
        let pages = versions.len() as u64;
        self.idx.write().versions = versions;
        self.note_frames(&w);
        let Some(last) = w.commits.last().copied() else {
            return Ok(Recovery::default());
        };
        // Pages past the end of the database file live in the log; the file
        // must cover the page count all the same.
        let need = last.db_size as u64 * ps as u64;
        if db_len < need {
            ctx.file.set_len(need)?;
        }
        Ok(Recovery {
            recovered: true,
            pages,
            detail: format!(
                "WAL: {} transactions in {mx} committed frames ({pages} pages) to TID {}; {} frames after them ignored",
                w.commits.len(),
                last.tid,
                total - mx
            ),
        })
    }

    fn spill(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        if set.pages.is_empty() {
            return Ok(());
        }
        let mut w = self.w.lock();
        let (mut which, mut frames) = (std::mem::take(&mut w.which), std::mem::take(&mut w.frames));
        which.clear();
        which.extend(0..set.pages.len());
        self.begin_append(&mut w, db, which.len() as u64, set.tid, set.readers)?;
        self.write_frames(&mut w, db, set.pages, &which, set.tid, None, &mut frames)?;
        let mut idx = self.idx.write();
        idx.pending_tid = set.tid;
        idx.pending.extend(frames.iter().copied());
        (w.which, w.frames) = (which, frames);
        Ok(())
    }

    fn commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<()> {
        let mut w = self.w.lock();
        let (mut which, mut frames) = (std::mem::take(&mut w.which), std::mem::take(&mut w.frames));
        self.pages_to_log(set, &mut which)?;
        self.begin_append(&mut w, db, which.len() as u64, set.tid, set.readers)?;
        w.commit_written = true;
        let commit = Some(set.new_page_count);
        self.write_frames(&mut w, db, set.pages, &which, set.tid, commit, &mut frames)?;
        if self.sync >= Synchronous::Full && !self.faults.skip_journal_sync {
            w.file.as_ref().expect("log is open").sync_data()?;
            w.synced = w.next;
            self.group.note_single();
        }
        // Publish: from here on readers with a new enough snapshot see it.
        {
            let mut idx = self.idx.write();
            let Index {
                pending, versions, ..
            } = &mut *idx;
            // Spilled frames, overridden by the commit's own (the newest).
            pending.extend(frames.iter().copied());
            for (pg, f) in pending.drain() {
                if pg <= set.new_page_count {
                    versions.entry(pg).or_default().push(Version {
                        tid: set.tid,
                        frame: f,
                    });
                }
            }
            // A bulk transaction's spills grew it: a drain walks every bucket.
            reset_map(pending);
            idx.pending_tid = 0;
        }
        (w.which, w.frames) = (which, frames);
        let end = w.next;
        w.commits.push(CommitRec {
            tid: set.tid,
            end,
            db_size: set.new_page_count,
        });
        w.mx = end;
        w.mx_chain = w.chain;
        w.in_txn = false;
        w.commit_written = false;
        self.note_frames(&w);
        Ok(())
    }

    fn sequence_commit(&self, db: &DbFile, set: &CommitSet<'_>) -> Result<CommitTicket> {
        let mut w = self.w.lock();
        w.pipelined = true;
        let mut which = std::mem::take(&mut w.which);
        self.pages_to_log(set, &mut which)?;
        let r = self.begin_append(&mut w, db, which.len() as u64, set.tid, set.readers);
        // A sequenced commit is never the writer's open transaction: a
        // rollback must not rewind over frames in flight (W1, W2).
        w.in_txn = false;
        r?;
        // The sequencer: reserve the frames, chain them in frame order.
        let start = w.next;
        let (buf, frames, chain) = self.encode_frames(&w, db.page_size, set, &which, start)?;
        w.which = which;
        let end = start + frames.len() as u64;
        let ticket = self.group.enqueue(None)?;
        w.next = end;
        w.chain = chain;
        let file = w.file.clone().expect("begin_append opened the log");
        let len = frame_offset(end, db.page_size);
        if len > w.file_len {
            if self.opts.preallocate && w.file_len >= self.capacity_bytes(db.page_size) {
                self.counters.lock().prealloc_grows += 1;
            }
            w.file_len = len;
        }
        w.inflight.push_back(InFlight {
            ticket,
            tid: set.tid,
            end,
            end_chain: chain,
            db_size: set.new_page_count,
            frames,
        });
        Ok(CommitTicket {
            group: Some(ticket),
            writes: vec![PendingWrite {
                file,
                at: frame_offset(start, db.page_size),
                bytes: buf,
            }],
        })
    }

    fn finish_commit(&self, _db: &DbFile, ticket: &mut CommitTicket) -> Result<()> {
        let Some(t) = ticket.group else {
            return Ok(());
        };
        let mut file = None;
        for wr in ticket.writes.drain(..) {
            // Outside every lock, in parallel with other commits (\[TH\]
            // §4.3), in chunks of at most WRITE_CHUNK.
            let mut r = Ok(());
            for (i, chunk) in wr.bytes.chunks(WRITE_CHUNK).enumerate() {
                r = wr.file.write_at(chunk, wr.at + (i * WRITE_CHUNK) as u64);
                if r.is_err() {
                    break;
                }
            }
            if let Err(e) = r {
                // G3: every commit behind this one fails with it.
                self.group.fail(&e.to_string());
                let _w = self.w.lock();
                self.published.notify_all();
                return Err(e);
            }
            file = Some(wr.file);
        }
        self.group.ready(t, ());
        let sync = self.sync >= Synchronous::Full && !self.faults.skip_journal_sync;
        let r = self.group.wait_durable(t, |_| match (&file, sync) {
            (Some(f), true) => f.sync_data().map(|()| true),
            _ => Ok(false),
        });
        if r.is_err() {
            let _w = self.w.lock();
            self.published.notify_all();
        }
        r
    }

    fn publish_commit(&self, ticket: &CommitTicket) -> Result<()> {
        let Some(t) = ticket.group else {
            return Ok(());
        };
        let mut w = self.w.lock();
        let Some(f) = w.inflight.pop_front() else {
            return Err(Error::Internal(format!(
                "WAL: commit ticket {t} published but no commit is in flight"
            )));
        };
        if f.ticket != t {
            return Err(Error::Internal(format!(
                "WAL: commit ticket {t} published out of order (next is {})",
                f.ticket
            )));
        }
        {
            let mut idx = self.idx.write();
            for &(pg, frame) in &f.frames {
                if pg <= f.db_size {
                    idx.versions
                        .entry(pg)
                        .or_default()
                        .push(Version { tid: f.tid, frame });
                }
            }
        }
        w.commits.push(CommitRec {
            tid: f.tid,
            end: f.end,
            db_size: f.db_size,
        });
        w.mx = f.end;
        w.mx_chain = f.end_chain;
        if self.sync >= Synchronous::Full && !self.faults.skip_journal_sync {
            w.synced = w.synced.max(f.end);
        }
        self.note_frames(&w);
        drop(w);
        self.published.notify_all();
        Ok(())
    }

    fn maintenance_due(&self) -> bool {
        let w = self.w.lock();
        w.window.is_some() || w.catch_up || self.checkpoint_due(&w)
    }

    fn rollback(&self, db: &DbFile, _orig_page_count: u32) -> Result<()> {
        let mut w = self.w.lock();
        if !w.in_txn && !w.commit_written {
            // Nothing of this transaction is in the log (frames past `mx`
            // belong to the sequencer's commits in flight: W1).
            return Ok(());
        }
        {
            let mut idx = self.idx.write();
            idx.pending.clear();
            idx.pending_tid = 0;
        }
        let cut = w.commit_written && w.next > w.mx;
        w.next = w.mx;
        w.chain = w.mx_chain;
        w.in_txn = false;
        w.commit_written = false;
        if cut {
            // A failed commit may have left a complete commit frame; break
            // the chain at the first frame past the committed end so that
            // recovery can never resurrect it.
            // Every byte is complemented, so whichever sectors of this
            // write survive a crash, they change checksummed bytes.
            let file = w.file.clone().expect("log is open");
            let at = frame_offset(w.mx, db.page_size);
            let mut h = [0u8; FRAME_HEADER_SIZE];
            file.read_exact_at(&mut h, at, 0)?;
            h.iter_mut().for_each(|b| *b = !*b);
            file.write_at(&h, at)?;
            if self.syncs() {
                file.sync_data()?;
            }
        }
        Ok(())
    }

    fn close(&self, db: &DbFile) -> Result<()> {
        let mut w = self.w.lock();
        if w.file.is_none() {
            return Ok(());
        }
        self.quiesce(&mut w)?;
        self.run_checkpoint(
            &mut w,
            db,
            CheckpointMode::Restart,
            &ReaderView::none(),
            true,
        )?;
        if w.next == 0 {
            if self.opts.preallocate {
                // Keep the allocation; the new header invalidates the frames.
                self.ensure_header(&mut w, db)?;
            } else {
                // Like SQLite's last connection: the log is gone. Losing
                // the unlink to power loss is harmless (fully backfilled).
                w.file = None;
                self.idx.write().file = None;
                db.vfs.remove(&wal_path(&db.path))?;
            }
        }
        w.file = None;
        *self.idx.write() = Index::default();
        Ok(())
    }

    fn read_page(&self, db: &DbFile, pgno: Pgno, snapshot: u64, buf: &mut [u8]) -> Result<()> {
        // The read lock is held across the frame read, so a restart (which
        // lets frames be overwritten) cannot slip in between.
        let idx = self.idx.read();
        if let Some(file) = &idx.file {
            let pending = (idx.pending_tid != 0 && snapshot >= idx.pending_tid)
                .then(|| idx.pending.get(&pgno).copied())
                .flatten();
            if let Some(f) = pending {
                return Self::read_frame(file, f, pgno, buf);
            }
            let vs = idx.versions.get(&pgno).map_or(&[][..], |v| v.as_slice());
            match idx.retained.select(pgno, vs, snapshot) {
                Source::Log(f) => return Self::read_frame(file, f, pgno, buf),
                Source::Kept(img) => {
                    buf.copy_from_slice(&img);
                    return Ok(());
                }
                Source::Db => {}
            }
        }
        db.read_page(pgno, buf)
    }

    fn fixup_header(&self, header: &mut Header) -> Result<()> {
        let w = self.w.lock();
        if !w.header_on_disk {
            return Ok(());
        }
        match w.commits.last() {
            Some(c) => {
                header.fcc = c.tid;
                header.page_count = c.db_size;
            }
            None => header.fcc = header.fcc.max(w.hdr.base_fcc),
        }
        Ok(())
    }

    fn after_commit(&self, db: &DbFile, readers: &dyn Readers) -> Result<()> {
        // The automatic checkpoint, on the commit that filled the log (as
        // SQLite's WAL hook does; DASH Table 2's latency spikes). It must
        // not run inside `commit`: a reader starting before the pager
        // installs the commit would get the previous snapshot, which the
        // copy could overwrite in the database file.
        let mut w = self.w.lock();
        let stepping = w.window.is_some() || w.catch_up || self.checkpoint_due(&w);
        // A pre-allocated log is full when a checkpoint is due: the next
        // append checkpoints it whole, so steps would only copy twice.
        if self.opts.checkpoint_step > 0 && !self.opts.preallocate && stepping {
            // W4-W7: a step of the window per commit. On failure the window
            // is dropped (W6): the next one rewrites every page of it.
            let r = self.checkpoint_step(&mut w, db, readers);
            if let Err(e) = r {
                w.window = None;
                w.catch_up = true;
                self.counters.lock().checkpoint_errors += 1;
                return Err(e);
            }
        } else if self.checkpoint_due(&w) {
            // The pager holds its commit lock: the commits in flight are
            // the last before the checkpoint; wait for them (W3), so that
            // the checkpoint copies them too and the log can restart.
            let r = self.quiesce_installed(&mut w, readers).and_then(|view| {
                self.run_checkpoint(&mut w, db, CheckpointMode::Passive, &view, false)?;
                if w.pipelined && !self.opts.delayed_checkpoint {
                    // Under load the next append rarely finds the log
                    // quiet; restart now, while it is.
                    self.try_restart(&mut w, db, &view)?;
                }
                Ok(())
            });
            if let Err(e) = r {
                self.counters.lock().checkpoint_errors += 1;
                return Err(e);
            }
        }
        Ok(())
    }

    fn checkpoint(
        &self,
        db: &DbFile,
        mode: CheckpointMode,
        readers: &dyn Readers,
    ) -> Result<CheckpointInfo> {
        let mut w = self.w.lock();
        if w.file.is_none() {
            return Ok(CheckpointInfo::default());
        }
        let view = self.quiesce_installed(&mut w, readers)?;
        self.run_checkpoint(&mut w, db, mode, &view, mode == CheckpointMode::Truncate)
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        let c = *self.counters.lock();
        vec![
            ("wal_frames", c.frames),
            ("wal_backfilled", c.backfilled),
            ("wal_max_frames", c.max_frames),
            ("checkpoints", c.checkpoints),
            ("checkpoint_steps", c.checkpoint_steps),
            ("checkpoint_pages", c.checkpoint_pages),
            ("checkpoints_blocked_by_readers", c.checkpoints_blocked),
            ("restarts", c.restarts),
            ("restarts_blocked_by_readers", c.restarts_blocked),
            ("prealloc_grows", c.prealloc_grows),
            ("checkpoint_errors", c.checkpoint_errors),
            ("retained_pages", c.retained_pages),
            ("retained_bytes", c.retained_bytes),
            ("max_retained_bytes", c.max_retained_bytes),
        ]
        .into_iter()
        .chain(self.group.stats().named())
        .collect()
    }
}
