//! The pager: page I/O, the shared cache of committed pages, the header
//! page, the free list, and write transactions' private dirty pages.
//!
//! A write transaction never changes shared state until it commits: its
//! pages live in [`WriteState`] (logical nodes for tree pages, bytes for
//! the rest). Commit encodes them with the node format, hands them to the
//! mode's [`Journal`], and only then installs them in the shared cache.
//! When the dirty set outgrows the cache budget, pages are *spilled*
//! through [`Journal::spill`] under the EXCLUSIVE lock.
//!
//! # Invariants
//!
//! Cited as "(P1)" ... where the code relies on them.
//!
//! - **P1** Uncommitted data never enters the shared cache: it holds only
//!   images of committed pages (the writer's pages live in [`WriteState`]
//!   until [`Journal::commit`] returned). A format that keeps versions
//!   inside the page is read from storage whole: an image a reader read
//!   beside a spilled writer may also carry that writer's version, which no
//!   snapshot sees (P14).
//! - **P2** A commit is installed after the journal made it durable: its
//!   pages go into the cache (each with its TID in `page_tid`) before the
//!   shared header is published, so a reader that starts with the new
//!   header finds every page of it, and one with an older header skips
//!   them (P3).
//! - **P3** A reader whose snapshot is older than a page's last commit
//!   (`page_tid`) never uses the cached image; it asks the journal for the
//!   version of its snapshot.
//! - **P4** No cache lock is held across storage I/O or decoding: a miss
//!   reads and decodes unlocked and inserts only if no commit wrote the
//!   page meanwhile.
//! - **P5** Every write transaction's identity (TID, snapshot) comes from
//!   the concurrency layer ([`LockManager::begin_txn`]); the pager never
//!   derives one.
//! - **P6** The pager is in exactly one [`PagerState`] and each write
//!   transaction in one [`TxnPhase`]; a transition not in
//!   [`PagerState::allows`] or [`TxnPhase::allows`] is an engine bug and
//!   returns [`Error::Internal`] instead of acting. Only a multi-writer
//!   protocol ([`cc::Profile::multi_writer`]) has more than one write
//!   transaction at a time.
//! - **P7** After a failed undo of storage (a sync or write that cannot be
//!   taken back) the pager is in [`PagerState::Error`] until reopen: every
//!   later operation fails with [`Error::Poisoned`].
//! - **P8** A read-only pager never writes, creates, truncates, renames or
//!   removes a file: its VFS refuses them ([`crate::storage::ReadOnlyVfs`]).
//! - **P9** A page that commit T freed is not reused while a reader of a
//!   snapshot older than T is open (in-memory free list): formats that
//!   keep old versions inside the page (MVBT) let such a reader descend
//!   into it. Modes whose commits wait for readers never hold a page.
//! - **P10** With several writers, page 1 is no transaction's page: its
//!   fields (FCC, page count, free-list count) are merged at commit, under
//!   the commit lock, from the committed header and the shared allocator
//!   (`alloc.rs`, A1-A3); the catalog root never moves. So two writers that
//!   touch different pages never conflict on the header.
//! - **P11** `page_tid` is set for every page a commit writes or frees
//!   before the next commit is validated (both happen under the commit
//!   lock), so a protocol's [`cc::CommitCheck::last_commit`] never misses
//!   a commit.
//! - **P12** With several writers, a commit is *sequenced* under the
//!   commit lock (validated, given its TID and the header it merges on,
//!   handed to [`Journal::sequence_commit`]) and then made durable without
//!   the lock ([`Journal::finish_commit`]: the journal's group commit), so
//!   commits that become ready during one fdatasync share the next one.
//!   Commits are installed for readers strictly in sequence order, each
//!   once it is durable, so the installed header (what readers see) is
//!   always a prefix of the sequenced ones and never runs ahead of
//!   durability (P2). Page TIDs are set when a commit is sequenced (P11):
//!   a reader's snapshot is an installed header, older than any sequenced
//!   commit not yet installed, so such a page sends it to the journal for
//!   its version (P3) until the commit is installed.
//! - **P13** A page that commit T retired in place
//!   ([`NodeFormat::retires_in_place`]: its final version carries TID T,
//!   and the page is free in T's state) is not reused before a later
//!   commit: until then a counting commit's proof of T may rest on that
//!   version, which a torn reuse would destroy.
//! - **P14** An undo of storage ([`Journal::rollback`] of a spill or a
//!   failed commit) evicts from the cache every page it undid (the
//!   transaction's spilled and dirty pages, and page 1), and a miss whose
//!   read began before an undo ended is not cached. The undo invalidates
//!   the aborted version on storage only, and the aborted TID is handed out
//!   again: a cached image that still carries it (a reader's miss beside
//!   the spill, P1) would turn the rolled-back cells into the next commit
//!   of that TID, for a reader that decodes the image at a later snapshot
//!   and for a later writer that writes over it as its base.
//! - **P15** A writer about to replace a committed leaf takes its cached
//!   node instead of copying its cells ([`PageWrite::leaf_to_modify`])
//!   only while the cache holds the sole other reference, checked under
//!   the shard's write lock (readers clone cached nodes under its read
//!   lock). The committed image stays cached without its node, flagged as
//!   verified, so a reader decodes it again on a hit and the leaf
//!   patch at commit may still build on it; a rollback leaves it so.
//! - **P16** `page_tid` forgets a page's last commit only once that commit
//!   is at or before every snapshot registered (readers, and writers of
//!   protocols with snapshot reads) and the newest published commit: every
//!   use asks whether the last commit is newer than a snapshot that is
//!   registered or taken later, and both answers agree for such a commit
//!   (commits sequenced but not yet published stay). The map then grows
//!   with the pages written since the oldest open snapshot, not with the
//!   table (`cache::Shard::prune_page_tids`).

mod alloc;
mod cache;
mod freelist;
mod savepoint;
mod spare;

use alloc::Alloc;
use freelist::TxnFree;
pub use savepoint::Savepoint;

use spare::Spare;

pub use cache::{CachedPage, PageCache, ShardedCache};

use crate::base::header::{seal_page1, verify_page1};
use crate::base::pgmap::{PgnoMap, PgnoSet};
use crate::base::timers::{self, Timer};
use crate::base::{valid_page_size, Header, Synchronous, HEADER_LEN};
use crate::base::{Error, KeyOrder, Pgno, Result, Tid, BYTEWISE};
use crate::cc::{self, CommitCheck, LockManager, Profile, Protocol, Txn};
use crate::journal::{
    registry, CheckpointInfo, CheckpointMode, Cleanup, CommitSet, CommitTicket, FreeListPolicy,
    Journal, ModeOptions, ModeSpec, OriginalSource, PageImage, PreOpenCtx, ReaderView, Readers,
    RecoverCtx, Recovery, TestFaults,
};
use crate::node::{
    Bytes, DecodeCtx, EncodeCtx, LeafCell, LeafChange, LeafPatch, Node, NodeFormat, Patched, Value,
};
use crate::page::{LeafPatched, PageRead, PageRole, PageWrite};
use crate::storage::{parent_dir, wait_os_lock, DbFile, OpenFlags, ReadOnlyVfs, Vfs, VfsFile};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Settings the pager needs at open.
#[derive(Clone)]
pub struct PagerConfig {
    /// Page size for a new database.
    pub page_size: usize,
    /// Cache budget in pages (shared cache, and the dirty-page spill limit).
    pub cache_pages: usize,
    /// How long to wait for locks.
    pub busy_timeout: Duration,
    /// Recovery scheme, as the registry describes it.
    pub spec: &'static ModeSpec,
    /// Sync level.
    pub sync: Synchronous,
    /// Create the file if missing.
    pub create: bool,
    /// Never write (P8).
    pub read_only: bool,
    /// Test-only breakage.
    pub faults: TestFaults,
    /// Mode-specific options.
    pub mode_opts: ModeOptions,
    /// Page checksums for a new database (an existing one keeps its own).
    pub page_checksums: bool,
    /// Concurrency protocol (`None`: the mode's default, the first its
    /// registry entry allows).
    pub protocol: Option<Protocol>,
    /// The caller's key orders (tables with their own order are walked in
    /// it when the free list is rebuilt after a crash).
    pub key_orders: Option<Arc<dyn crate::base::KeyOrders>>,
}

/// The commit order (P12), under the commit lock.
struct Sequencer {
    /// The header of the newest commit put in order: the one the next
    /// commit merges on top of (P10). Readers see [`Shared::header`], the
    /// newest commit installed, which trails it while commits are in
    /// flight.
    header: Header,
    /// The ordinal the next commit gets.
    next: u64,
}

struct Shared {
    header: Header,
    /// Open read transactions by snapshot. Registered with the header
    /// they read, in one critical section, off the cache shards and the
    /// writer's locks.
    readers: BTreeMap<Tid, usize>,
    /// The committed free list, when the mode keeps it in memory
    /// ([`FreeListPolicy::Volatile`]); the header's trunk fields are then 0
    /// and its count mirrors this list. Write transactions share it until
    /// they change it ([`freelist::TxnFree`]).
    free: Option<Arc<Vec<Pgno>>>,
    /// Pages of `free` that commit `Tid` freed while a reader of an older
    /// snapshot was open (P9): not reused until every such reader is gone.
    held: Vec<(Tid, Pgno)>,
    /// The buffer of the list `free` replaced at the last commit, for the
    /// next write transaction's working copy (none allocated per
    /// transaction).
    free_spare: Vec<Pgno>,
}

/// The states of a pager (P6). Readers do not change it: any number of
/// them run in every state but [`PagerState::Closed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagerState {
    /// No write transaction.
    Idle,
    /// At least one write transaction is open (each in its own
    /// [`TxnPhase`]).
    Writing,
    /// A failed undo left storage in a state only recovery at the next
    /// open can repair (P7).
    Error,
    /// Closed; nothing more runs.
    Closed,
}

impl PagerState {
    /// Whether the pager may go from `self` to `to`.
    pub fn allows(self, to: PagerState) -> bool {
        use PagerState::*;
        match (self, to) {
            (Error | Closed, _) => false,
            (_, Error) => true,
            (Idle, Writing | Closed) | (Writing, Idle | Writing) => true,
            _ => false,
        }
    }
}

/// The phases of one write transaction (P6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnPhase {
    /// It holds private pages; storage is untouched.
    Active,
    /// It has spilled pages to storage (through the journal, which can
    /// undo them).
    Spilled,
    /// The journal is making its commit durable.
    Committing,
    /// Committed or rolled back.
    Done,
}

impl TxnPhase {
    /// Whether a transaction may go from `self` to `to`.
    pub fn allows(self, to: TxnPhase) -> bool {
        use TxnPhase::*;
        match (self, to) {
            (Done, _) => false,
            (_, Done) => true,
            (Active | Spilled, Spilled | Committing) => true,
            _ => false,
        }
    }
}

/// The pager's state, why it failed, and how many writers are open.
struct StateBox {
    state: PagerState,
    why: Option<String>,
    writers: usize,
}

/// The pager of one open database.
pub struct Pager {
    /// The database file.
    pub db: DbFile,
    format: Arc<dyn NodeFormat>,
    /// The database carries page checksums (header byte 50): seal every
    /// page written and verify every page read.
    sums: bool,
    /// On its own cache line: readers write it at begin and end, and the
    /// read-mostly fields around it must not bounce between cores with it.
    shared: Padded<Mutex<Shared>>,
    /// Committed pages, and per page the TID of the last commit that wrote
    /// it this session: a reader whose snapshot is older than that must
    /// not use the cached (newest) image; it asks the journal for the
    /// version it may see (P3).
    cache: ShardedCache,
    /// Closed: set once, read by every reader without a lock.
    closed: AtomicBool,
    /// Unique per open pager (tags the per-thread hot nodes).
    id: u64,
    journal: Box<dyn Journal>,
    /// Serializes commits, spills and rollbacks, and holds the commit
    /// order (P12).
    commit_lock: Mutex<Sequencer>,
    /// Undos of storage so far: a miss read across one is not cached
    /// (P14).
    undos: AtomicU64,
    /// P12: the ordinal of the next commit to install for readers, and
    /// the commits waiting for their turn.
    installed: Mutex<u64>,
    install_cv: Condvar,
    /// The emptied collections of the last write transaction, reused by
    /// the next (no allocation per transaction for them once grown).
    spare: Mutex<Spare>,
    /// Leaf changes written by patching the page without its logical
    /// view, since open (`patch_leaf`).
    leaves_patched: AtomicU64,
    /// The state (P6), in [`PagerState::Error`] why, and the open writers.
    state: Mutex<StateBox>,
    locks: Arc<dyn LockManager>,
    /// What the protocol needs (read once: the hooks it does not want are
    /// never called).
    profile: Profile,
    /// The protocol's name.
    protocol: Protocol,
    /// The shared allocator of multi-writer sessions (P10).
    alloc: Mutex<Alloc>,
    cfg: PagerConfig,
    /// What recovery did at open.
    pub recovery: Recovery,
    /// The previous session did not close cleanly.
    pub opened_after_crash: bool,
}

impl Pager {
    /// Open or create the database at `path`, running crash recovery.
    pub fn open(vfs: Arc<dyn Vfs>, path: &Path, cfg: PagerConfig) -> Result<Pager> {
        let vfs: Arc<dyn Vfs> = if cfg.read_only {
            Arc::new(ReadOnlyVfs::new(vfs))
        } else {
            vfs
        };
        if !valid_page_size(cfg.page_size) {
            return Err(Error::InvalidArgument(format!(
                "page size {} is not a power of two between 512 and 65536",
                cfg.page_size
            )));
        }
        let spec = cfg.spec;
        let protocol = match cfg.protocol {
            None => spec.protocols[0],
            Some(p) if spec.protocols.contains(&p) => p,
            Some(p) => {
                let allowed: Vec<&str> = spec.protocols.iter().map(|p| p.name()).collect();
                return Err(Error::Unsupported(format!(
                    "journal mode {} does not run with concurrency protocol {p} (it allows: {})",
                    spec.name,
                    allowed.join(", ")
                )));
            }
        };
        let locks = cc::lock_manager(protocol, spec.locking, cfg.busy_timeout)?;
        let profile = locks.profile();
        let journal = (spec.make_journal)(cfg.sync, cfg.faults, &cfg.mode_opts)?;
        let leftovers = registry::foreign_leftovers(spec);
        let pre = PreOpenCtx {
            vfs: &vfs,
            path,
            busy_timeout: cfg.busy_timeout,
        };
        // DASH may have to finish renames before `path` names the database.
        // Files another mode's session left behind are recovered and
        // removed whatever the mode now is; their locks are held until ours
        // is.
        let mut pre_recovery = journal.pre_open(&pre)?;
        let mut guards = Vec::new();
        for l in &leftovers {
            if let Cleanup::PreOpen(clean) = l.cleanup {
                let (r, guard) = clean(&pre, cfg.sync)?;
                if r.recovered {
                    pre_recovery = r;
                }
                guards.extend(guard);
            }
        }
        let existed = vfs.exists(path)?;
        if !existed && (!cfg.create || cfg.read_only) {
            return Err(Error::io(
                "open",
                path,
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let file = vfs.open(path, OpenFlags::CREATE)?;
        // One process at a time: a second one gets Locked (after waiting).
        wait_os_lock(&file, path, cfg.busy_timeout)?;
        drop(guards);
        let format = journal.node_format();
        Self::check_format(&file, path, &*format, spec)?;
        let ctx = RecoverCtx {
            vfs: &vfs,
            path,
            file: &file,
        };
        // A hot rollback journal is rolled back, a log checkpointed (its
        // commits would be lost), whatever the mode now is.
        let mut recovery = Recovery::default();
        for l in &leftovers {
            if let Cleanup::Recover(clean) = l.cleanup {
                let r = clean(&ctx, cfg.sync)?;
                if r.recovered {
                    recovery = r;
                }
            }
        }
        if !recovery.recovered {
            recovery = pre_recovery;
        }
        let r = journal.recover(&ctx)?;
        if r.recovered || !r.detail.is_empty() {
            // A scan that found nothing to undo still reports what it did.
            recovery = r;
        }

        let len = file.len()?;
        let mut probe = [0u8; HEADER_LEN];
        let n = file.read_at(&mut probe, 0)?;
        let fresh = len == 0 || (probe[..n].iter().all(|&b| b == 0) && len <= 2 * 65536);
        let header = if fresh && cfg.read_only {
            return Err(Error::ReadOnly(format!(
                "{} is empty: there is no database to read yet",
                path.display()
            )));
        } else if fresh {
            Self::initialize(&vfs, path, &file, &cfg, existed)?
        } else {
            let mut h = Header::read_from(&probe[..n], &path.display().to_string())?;
            // The mode may hold a newer page 1 (WAL) or FCC (DHL).
            let ps = h.page_size as usize;
            let dbf = DbFile::new(vfs.clone(), path.to_path_buf(), file.clone(), ps);
            let mut page1 = vec![0u8; ps];
            journal.read_page(&dbf, 1, u64::MAX, &mut page1)?;
            h = Header::read_from(&page1, &path.display().to_string())?;
            verify_page1(&page1, &path.display().to_string())?;
            journal.fixup_header(&mut h)?;
            h
        };
        let ps = header.page_size as usize;
        let needed = header.page_count as u64 * ps as u64;
        if len < needed && !fresh {
            return Err(Error::corrupt(
                path.display().to_string(),
                0,
                format!(
                    "file is {len} bytes but the header says {} pages of {ps} bytes",
                    header.page_count
                ),
            ));
        }
        let opened_after_crash = !fresh && !header.clean_close;
        let cache_pages = (cfg.cache_pages).max(16);
        // Several writers cannot share trunk pages: their sessions keep the
        // free list in memory (P10).
        let volatile = spec.free_list == FreeListPolicy::Volatile || profile.multi_writer;
        let (count, trunks_missing) = (
            header.page_count,
            header.freelist_head == 0 && header.freelist_count > 0,
        );
        let pager = Pager {
            db: DbFile::new(vfs, path.to_path_buf(), file, ps),
            format,
            sums: header.page_checksums,
            shared: Padded(Mutex::new(Shared {
                header,
                readers: BTreeMap::new(),
                free: None,
                held: Vec::new(),
                free_spare: Vec::new(),
            })),
            cache: ShardedCache::new(cache_pages),
            closed: AtomicBool::new(false),
            id: NEXT_PAGER_ID.fetch_add(1, Ordering::Relaxed),
            journal,
            commit_lock: Mutex::new(Sequencer { header, next: 0 }),
            undos: AtomicU64::new(0),
            installed: Mutex::new(0),
            install_cv: Condvar::new(),
            spare: Mutex::new(Spare::default()),
            leaves_patched: AtomicU64::new(0),
            state: Mutex::new(StateBox {
                state: PagerState::Idle,
                why: None,
                writers: 0,
            }),
            locks,
            profile,
            protocol,
            alloc: Mutex::new(Alloc::new(count, &[])),
            cfg: PagerConfig { cache_pages, ..cfg },
            recovery,
            opened_after_crash,
        };
        let loaded = if volatile {
            pager.load_free_list()
        } else if trunks_missing && !pager.cfg.read_only {
            // The last session kept its free list in memory and did not
            // close (a crash of a multi-writer or in-page session): walk
            // the trees and write the list to trunk pages, as this mode
            // keeps it.
            pager
                .load_free_list()
                .and_then(|()| pager.persist_free_list(false))
        } else {
            Ok(())
        };
        if let Err(e) = loaded {
            // No session began: dropping the pager must not close it
            // cleanly, which would record an empty free list as the
            // truth (found by I/O errors during recovery).
            pager.poison(format!("open failed: {e}"));
            return Err(e);
        }
        if profile.multi_writer {
            let mut sh = pager.shared.lock();
            let free = sh.free.take().unwrap_or_default();
            *pager.alloc.lock() = Alloc::new(sh.header.page_count, free.as_slice());
        }
        Ok(pager)
    }

    /// Refuse a file whose pages are in another mode's node format (a DHL
    /// file cannot be read as slotted pages, nor the other way round).
    /// Runs before recovery, which would misread the pages too.
    fn check_format(
        file: &Arc<dyn VfsFile>,
        path: &Path,
        format: &dyn NodeFormat,
        spec: &ModeSpec,
    ) -> Result<()> {
        let mut probe = [0u8; HEADER_LEN];
        let n = file.read_at(&mut probe, 0)?;
        let Ok(h) = Header::read_from(&probe[..n], &path.display().to_string()) else {
            return Ok(()); // fresh, or damaged: reported later
        };
        match registry::by_code(h.journal_mode) {
            Some(m) if (m.node_format)().name() != format.name() => {
                Err(Error::Unsupported(format!(
                    "{} was written in journal mode {}, whose page format ({}) differs from \
                 the {} format of mode {}",
                    path.display(),
                    m.name,
                    (m.node_format)().name(),
                    format.name(),
                    spec.name
                )))
            }
            _ => Ok(()),
        }
    }

    /// Set up the in-memory free list: from the trunk pages written at the
    /// last clean close, or, after a crash, by walking every tree (pages
    /// nothing reaches are free). A walk that hits a damaged page frees
    /// nothing; the damage is reported when the page is read.
    fn load_free_list(&self) -> Result<()> {
        let h = self.header();
        let mut list = Vec::new();
        if h.clean_close {
            let mut trunk = h.freelist_head;
            while trunk != 0 {
                if list.len() > h.page_count as usize {
                    return Err(self.corrupt_at(trunk, "free-list trunk chain loops"));
                }
                let raw = self.committed_raw(trunk, None)?;
                self.check_raw(trunk, &raw, &self.decode_ctx(h.fcc, &BYTEWISE))?;
                let (next, leaves) = crate::base::freelist::parse_trunk(
                    &raw,
                    trunk,
                    h.page_count,
                    &self.file_name(),
                )?;
                list.push(trunk);
                list.extend(leaves);
                trunk = next;
            }
            if list.len() != h.freelist_count as usize {
                return Err(self.corrupt_at(
                    1,
                    format!(
                        "header counts {} free pages, the trunks hold {}",
                        h.freelist_count,
                        list.len()
                    ),
                ));
            }
        } else {
            let view = ReadPages {
                pager: self,
                snap: h,
                reader: 0,
            };
            match crate::btree::walk::reachable(&view, &h, self.cfg.key_orders.as_deref()) {
                Ok(used) => {
                    list = (2..=h.page_count).filter(|&p| !used[p as usize]).collect();
                }
                // A damaged tree still opens (the check reports it), with
                // no free pages to reuse. An I/O error must not: the
                // session would close with an empty list and leak every
                // free page for good (found by I/O errors during recovery).
                Err(e) if !e.is_corruption() => return Err(e),
                Err(_) => {}
            }
            self.clear_torn_free_pages(&list, &h)?;
        }
        let mut sh = self.shared.lock();
        sh.header.freelist_head = 0;
        sh.header.freelist_count = list.len() as u32;
        sh.free = Some(Arc::new(list));
        Ok(())
    }

    /// After a crash, a free page of an in-place format may hold what a
    /// torn write of an uncommitted transaction left (recovery repairs only
    /// pages that carry a version). No state references it, so it is reset
    /// to zeros: afterwards every free page verifies, and the integrity
    /// check can report any free page that does not as damage.
    fn clear_torn_free_pages(&self, free: &[Pgno], h: &Header) -> Result<()> {
        if !self.sums || self.cfg.read_only {
            return Ok(());
        }
        // Free pages belong to no table: no key order applies.
        let ctx = self.decode_ctx(h.fcc, &BYTEWISE);
        let zeros = vec![0u8; self.db.page_size];
        let mut cleared = 0;
        for &p in free {
            let raw = self.read_committed(p, h.fcc)?;
            if self.format.check_free(p, &raw, &ctx).is_err() {
                self.db.write_page(p, &zeros)?;
                cleared += 1;
            }
        }
        if cleared > 0 && self.cfg.sync != Synchronous::Off {
            self.db.file().sync_data()?;
        }
        Ok(())
    }

    /// A format's corruption error names "database": name the file.
    fn named(&self, e: Error) -> Error {
        match e {
            Error::Corruption { file, page, what } if file == "database" => Error::Corruption {
                file: self.file_name(),
                page,
                what,
            },
            e => e,
        }
    }

    /// Decode a tree page read from storage (its checksum is verified
    /// there), reading the tails of its overflowing keys through `view`
    /// (the state the page belongs to); errors name the file.
    fn decode_page(
        &self,
        pgno: Pgno,
        raw: &Arc<[u8]>,
        ctx: &DecodeCtx,
        view: &dyn PageRead,
    ) -> Result<Node> {
        let mut node = self
            .format
            .decode_shared(pgno, raw, ctx)
            .map_err(|e| self.named(e))?;
        crate::node::complete_keys(
            pgno,
            &mut node,
            ctx.order,
            self.format.unsorted_slots(),
            &mut |head, len| crate::btree::read_overflow(view, head, len),
        )
        .map_err(|e| self.named(e))?;
        Ok(node)
    }

    /// Verify a raw (overflow or free-list) page; errors name the file.
    fn check_raw(&self, pgno: Pgno, raw: &[u8], ctx: &DecodeCtx) -> Result<()> {
        self.format
            .check_raw(pgno, raw, ctx)
            .map_err(|e| self.named(e))
    }

    fn file_name(&self) -> String {
        self.db.path.display().to_string()
    }

    fn corrupt_at(&self, pgno: Pgno, what: impl Into<String>) -> Error {
        Error::corrupt(self.file_name(), pgno, what)
    }

    /// Write the first two pages of a new database: the header and an
    /// empty catalog leaf. The header goes last, so a crash before it is
    /// durable leaves a file that is recognised as fresh again.
    fn initialize(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        file: &Arc<dyn VfsFile>,
        cfg: &PagerConfig,
        existed: bool,
    ) -> Result<Header> {
        let ps = cfg.page_size;
        let header = Header {
            page_size: ps as u32,
            page_count: 2,
            fcc: 0,
            freelist_head: 0,
            freelist_count: 0,
            catalog_root: 2,
            journal_mode: cfg.spec.code,
            clean_close: true,
            page_checksums: cfg.page_checksums,
        };
        let mut p2 = vec![0u8; ps];
        (cfg.spec.node_format)().encode(
            2,
            &Node::empty_leaf(),
            None,
            &EncodeCtx::new(ps, 0, cfg.page_checksums),
            &mut p2,
        )?;
        file.set_len(0)?;
        file.write_at(&p2, ps as u64)?;
        if cfg.sync != Synchronous::Off {
            file.sync_data()?;
        }
        let mut p1 = vec![0u8; ps];
        header.write_to(&mut p1);
        seal_page1(&mut p1);
        file.write_at(&p1, 0)?;
        if cfg.sync != Synchronous::Off {
            file.sync_data()?;
            if !existed {
                vfs.sync_dir(&parent_dir(path))?;
            }
        }
        Ok(header)
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.db.page_size
    }

    /// The node format in use.
    pub fn format(&self) -> &dyn NodeFormat {
        &*self.format
    }

    /// The active journal mode.
    pub fn spec(&self) -> &'static ModeSpec {
        self.cfg.spec
    }

    /// The concurrency protocol.
    pub fn locks(&self) -> &Arc<dyn LockManager> {
        &self.locks
    }

    /// Busy timeout.
    pub fn busy_timeout(&self) -> Duration {
        self.cfg.busy_timeout
    }

    /// The committed header.
    pub fn header(&self) -> Header {
        self.shared.lock().header
    }

    /// Cache misses since open.
    pub fn cache_misses(&self) -> u64 {
        self.cache.misses()
    }

    /// Single-row changes written as a patch of their leaf, without its
    /// logical view, since open.
    pub fn leaves_patched(&self) -> u64 {
        self.leaves_patched.load(Ordering::Relaxed)
    }

    /// Run `f` on the committed node `pgno` as of `snap`: in place in the
    /// cache (under its shard's shared lock, no reference taken) when it
    /// is there and visible to the snapshot (P3), otherwise loaded.
    ///
    /// The version of a page a snapshot sees never changes (committed
    /// history is immutable), so each thread also keeps the nodes it
    /// visited last, tagged with (pager, page, snapshot FCC): a reader at
    /// the same snapshot uses them without touching any shared memory.
    pub fn visit_committed_node(
        &self,
        pgno: Pgno,
        snap: &Header,
        order: &dyn KeyOrder,
        f: &mut dyn FnMut(&Node),
    ) -> Result<()> {
        let slot = pgno as usize % HOT_SLOTS;
        let mut f = Some(f);
        let hit = HOT.with(|hot| {
            let Ok(hot) = hot.try_borrow() else {
                return false;
            };
            match &hot[slot] {
                Some(e) if e.pager == self.id && e.pgno == pgno && e.fcc == snap.fcc => {
                    if let Some(f) = f.take() {
                        f(&e.node);
                    }
                    true
                }
                _ => false,
            }
        });
        let Some(f) = f.filter(|_| !hit) else {
            return Ok(());
        };
        let node = 'found: {
            if pgno >= 2 && pgno <= snap.page_count {
                let sh = self.cache.read(pgno);
                if sh.page_tid.get(&pgno).is_none_or(|&t| t <= snap.fcc) {
                    if let Some(CachedPage { node: Some(n), .. }) = sh.cache.lookup(pgno) {
                        break 'found n.clone();
                    }
                }
            }
            self.committed_node(pgno, Some(snap), order)?
        };
        f(&node);
        HOT.with(|hot| {
            if let Ok(mut hot) = hot.try_borrow_mut() {
                hot[slot] = Some(HotNode {
                    pager: self.id,
                    pgno,
                    fcc: snap.fcc,
                    node,
                });
            }
        });
        Ok(())
    }

    fn check_poison(&self) -> Result<()> {
        let st = self.state.lock();
        match st.state {
            PagerState::Error => Err(Error::Poisoned(format!(
                "{}: an earlier failure left the database needing recovery; reopen it ({})",
                self.file_name(),
                st.why.as_deref().unwrap_or("unknown")
            ))),
            PagerState::Closed => Err(Error::Closed(self.file_name())),
            _ => Ok(()),
        }
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// True if opened read-only (P8).
    pub fn is_read_only(&self) -> bool {
        self.cfg.read_only
    }

    /// The current state.
    pub fn state(&self) -> PagerState {
        self.state.lock().state
    }

    /// The concurrency protocol the database runs with.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Move the pager to `to` (P6).
    fn transition(&self, to: PagerState) -> Result<()> {
        let mut st = self.state.lock();
        if st.state == to {
            return Ok(());
        }
        if !st.state.allows(to) {
            drop(st);
            self.check_poison()?;
            return Err(Error::Internal(format!(
                "{}: pager state {:?} cannot become {to:?}",
                self.file_name(),
                self.state()
            )));
        }
        st.state = to;
        Ok(())
    }

    /// A write transaction opens (P6): one at a time unless the protocol
    /// runs several.
    fn enter_writer(&self) -> Result<()> {
        let mut st = self.state.lock();
        match st.state {
            PagerState::Error | PagerState::Closed => {
                drop(st);
                return self.check_poison();
            }
            PagerState::Writing if !self.profile.multi_writer => {
                return Err(Error::Internal(format!(
                    "{}: a second write transaction under a one-writer protocol",
                    self.file_name()
                )));
            }
            _ => {}
        }
        st.writers += 1;
        st.state = PagerState::Writing;
        Ok(())
    }

    /// A write transaction is over (P6).
    fn leave_writer(&self) {
        let mut st = self.state.lock();
        st.writers = st.writers.saturating_sub(1);
        if st.writers == 0 && st.state == PagerState::Writing {
            st.state = PagerState::Idle;
        }
    }

    /// Enter [`PagerState::Error`] (P7).
    fn poison(&self, why: String) {
        let mut st = self.state.lock();
        if st.state != PagerState::Closed {
            st.state = PagerState::Error;
            st.why = Some(why);
        }
        drop(st);
        // Commits waiting for their turn to install give up (P12).
        let _g = self.installed.lock();
        self.install_cv.notify_all();
    }

    fn encode_ctx(&self, tid: u64) -> EncodeCtx {
        let mut ctx = EncodeCtx::new(self.db.page_size, tid, self.sums);
        if self.format.needs_base() {
            // Versions an open reader may still read stay in the page.
            ctx.horizon = ctx.horizon.min(self.oldest_snapshot());
        }
        ctx
    }

    fn decode_ctx<'a>(&self, committed_tid: u64, order: &'a dyn KeyOrder) -> DecodeCtx<'a> {
        DecodeCtx {
            page_size: self.db.page_size,
            committed_tid,
            checksums: self.sums,
            order,
        }
    }

    fn out_of_range(&self, pgno: Pgno, count: u32) -> Error {
        Error::corrupt(
            self.db.path.display().to_string(),
            pgno,
            format!("page number out of range (database has {count} pages)"),
        )
    }

    /// Committed image of a page as of `snap` (a reader's header; `None`:
    /// the newest commit).
    pub fn committed_raw(&self, pgno: Pgno, snap: Option<&Header>) -> Result<Arc<[u8]>> {
        self.load(pgno, snap, None).map(|(raw, _)| raw)
    }

    /// Committed logical view of a tree page as of `snap`, of a table
    /// whose keys follow `order`.
    pub fn committed_node(
        &self,
        pgno: Pgno,
        snap: Option<&Header>,
        order: &dyn KeyOrder,
    ) -> Result<Arc<Node>> {
        if pgno < 2 {
            let count = snap.map_or_else(|| self.header().page_count, |h| h.page_count);
            return Err(self.out_of_range(pgno, count));
        }
        let (_, node) = self.load(pgno, snap, Some(order))?;
        Ok(node.expect("load decodes when asked"))
    }

    /// The cached committed page `pgno` as of `snap`, if the cache holds
    /// that version (P3): its image, its node if decoded, and whether the
    /// image was verified. No read, no decode.
    fn cached(&self, pgno: Pgno, snap: Option<&Header>) -> Option<CachedPage> {
        let fcc = snap.map_or_else(|| self.header().fcc, |h| h.fcc);
        let sh = self.cache.read(pgno);
        if sh.page_tid.get(&pgno).is_some_and(|&t| t > fcc) {
            return None;
        }
        sh.cache.lookup(pgno).cloned()
    }

    /// The committed image of `pgno` as of `snap` and, when `order` is
    /// given (the key order of the page's table), its decoded node.
    fn load(
        &self,
        pgno: Pgno,
        snap: Option<&Header>,
        order: Option<&dyn KeyOrder>,
    ) -> Result<Loaded> {
        let want_node = order.is_some();
        let h = match snap {
            Some(h) => *h,
            None => self.header(),
        };
        if pgno == 0 || pgno > h.page_count {
            return Err(self.out_of_range(pgno, h.page_count));
        }
        let decode = |raw: &Arc<[u8]>| -> Result<Option<Arc<Node>>> {
            Ok(match order {
                Some(order) => {
                    let ctx = self.decode_ctx(h.fcc, order);
                    let view = ReadPages {
                        pager: self,
                        snap: h,
                        reader: 0,
                    };
                    Some(Arc::new(self.decode_page(pgno, raw, &ctx, &view)?))
                }
                None => None,
            })
        };
        let sh = self.cache.read(pgno);
        if sh.page_tid.get(&pgno).is_some_and(|&t| t > h.fcc) {
            // Changed after this snapshot: the cached image is too new (P3).
            drop(sh);
            let raw = self.read_committed(pgno, h.fcc)?;
            let node = decode(&raw)?;
            return Ok((raw, node));
        }
        if let Some(p) = sh.cache.get(pgno) {
            if !want_node || p.node.is_some() {
                return Ok((p.raw.clone(), p.node.clone()));
            }
            // Decode unlocked (P4); keep the node only if the image is
            // still the cached one.
            let raw = p.raw.clone();
            drop(sh);
            let node = decode(&raw)?;
            let mut sh = self.cache.write(pgno);
            if let Some(p) = sh.cache.peek(pgno) {
                if Arc::ptr_eq(&p.raw, &raw) {
                    p.verified |= node.is_some();
                    p.node = node.clone();
                }
            }
            return Ok((raw, node));
        }
        // Miss: read and decode unlocked (P4). No commit after this
        // snapshot wrote the page (P3 checked above), so its version here is
        // the newest; it is cached only if that still holds, and if no undo
        // of storage ended meanwhile: the read may have seen what it took
        // back (P14).
        drop(sh);
        let undos = self.undos.load(Ordering::Acquire);
        let raw = self.read_committed(pgno, h.fcc)?;
        let node = decode(&raw)?;
        let mut sh = self.cache.write(pgno);
        let unchanged = sh.page_tid.get(&pgno).is_none_or(|&t| t <= h.fcc)
            && self.undos.load(Ordering::Acquire) == undos;
        let evicted = if unchanged && sh.cache.peek(pgno).is_none() {
            sh.cache.put(
                pgno,
                CachedPage {
                    raw: raw.clone(),
                    node: node.clone(),
                    verified: node.is_some(),
                },
            )
        } else {
            None
        };
        drop(sh);
        if let Some(old) = evicted {
            self.recycle(old); // outside the shard's lock
        }
        Ok((raw, node))
    }

    fn read_committed(&self, pgno: Pgno, snapshot: u64) -> Result<Arc<[u8]>> {
        let mut buf = self.page_buffer();
        self.journal
            .read_page(&self.db, pgno, snapshot, unique(&mut buf)?)?;
        Ok(buf)
    }

    /// Register a read transaction; returns the header of its snapshot,
    /// read and registered in one critical section so that a commit cannot
    /// compute an oldest snapshot that misses it. Readers still run in
    /// [`PagerState::Error`]: the cache and the shared header hold only
    /// committed data (P1), and recovery at the next open decides what
    /// storage holds.
    pub fn begin_read(&self) -> Result<Header> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed(self.file_name()));
        }
        let mut sh = self.shared.lock();
        let h = sh.header;
        *sh.readers.entry(h.fcc).or_insert(0) += 1;
        Ok(h)
    }

    /// Unregister a read transaction.
    pub fn end_read(&self, snap: &Header) {
        let mut sh = self.shared.lock();
        if let Some(n) = sh.readers.get_mut(&snap.fcc) {
            *n -= 1;
            if *n == 0 {
                sh.readers.remove(&snap.fcc);
            }
        }
    }

    /// A read transaction that locked pages ([`ReadPages::reader`]) ended:
    /// drop its locks.
    pub fn end_reader(&self, reader: u64) {
        if reader != 0 {
            self.locks.end_reader(reader);
        }
    }

    /// Snapshots of the open readers, ascending, distinct.
    pub fn reader_snapshots(&self) -> Vec<Tid> {
        let sh = self.shared.lock();
        if sh.readers.is_empty() {
            return Vec::new();
        }
        sh.readers.keys().copied().collect()
    }

    /// Snapshot of the oldest open reader (`u64::MAX` if none).
    pub fn oldest_snapshot(&self) -> Tid {
        self.shared
            .lock()
            .readers
            .keys()
            .next()
            .copied()
            .unwrap_or(Tid::MAX)
    }

    /// Run a checkpoint (WAL); a no-op in modes without a log. No mode
    /// waits for readers: the log keeps in memory what their snapshots
    /// still read (docs/modes/wal.md, "Readers never pin the log").
    pub fn checkpoint(&self, mode: CheckpointMode) -> Result<CheckpointInfo> {
        self.check_poison()?;
        let _g = self.commit_lock.lock();
        let r = self.journal.checkpoint(&self.db, mode, self);
        self.poison_if_asked(r)
    }

    /// A journal's maintenance said the handle cannot go on (a failed
    /// sync it cannot take back, W9): poison it (P7).
    fn poison_if_asked<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(Error::Poisoned(why)) = &r {
            self.poison(why.clone());
        }
        r
    }

    /// The journal mode's own counters (see [`Journal::stats`]).
    pub fn journal_stats(&self) -> Vec<(&'static str, u64)> {
        self.journal.stats()
    }

    /// Start a write transaction's page state (the caller holds the
    /// writer lock).
    pub fn begin_write(&self) -> Result<WriteState> {
        self.check_poison()?;
        if self.cfg.read_only {
            return Err(Error::ReadOnly(format!(
                "{} was opened read-only",
                self.file_name()
            )));
        }
        self.enter_writer()?;
        let (header, free, held) = {
            let mut guard = self.shared.lock();
            let sh = &mut *guard;
            let oldest = sh.readers.keys().next().copied().unwrap_or(Tid::MAX);
            // Pages freed by T are reusable once every reader sees T (P9),
            // pages retired in place once a later commit exists (P13).
            let fcc = sh.header.fcc;
            sh.held.retain(|&(t, _)| t > oldest.min(fcc));
            let held: PgnoSet = sh.held.iter().map(|&(_, p)| p).collect();
            // The committed list is the transaction's, shared until it
            // changes (no copy per transaction).
            let free = sh.free.as_ref().map(|f| TxnFree::shared(Arc::clone(f)));
            let h = sh.header;
            if self.profile.snapshot_reads {
                // The writer reads this snapshot: a checkpoint keeps it.
                *sh.readers.entry(h.fcc).or_insert(0) += 1;
            }
            (h, free, held)
        };
        let sp = self.txn_scratch();
        Ok(WriteState {
            txn: Txn {
                // The transaction's lock waits (page locks, the exclusive
                // lock, commit order) take the database's busy timeout
                // unless it sets its own (`WriteTxn::set_busy_timeout`).
                busy_timeout: Some(self.cfg.busy_timeout),
                ..self.locks.begin_txn(header.fcc)
            },
            snap: header,
            orig_header: header,
            header,
            phase: TxnPhase::Active,
            dirty: sp.dirty,
            spilled: sp.spilled,
            freed: sp.freed,
            allocated: sp.allocated,
            free,
            held,
            exclusive: false,
            pgnos: sp.pgnos,
            pages: sp.pages,
            changed: sp.changed,
            reads: Mutex::new(ReadSet {
                table: NO_TABLE,
                ..ReadSet::default()
            }),
            generation: 0,
            spills: 0,
            full: None,
        })
    }

    /// Move a transaction to `to` (P6).
    fn phase(&self, st: &mut WriteState, to: TxnPhase) -> Result<()> {
        if st.phase == to && to != TxnPhase::Spilled {
            return Ok(());
        }
        if !st.phase.allows(to) {
            self.check_poison()?;
            return Err(Error::Internal(format!(
                "{}: transaction phase {:?} cannot become {to:?}",
                self.file_name(),
                st.phase
            )));
        }
        st.phase = to;
        Ok(())
    }

    /// The transaction is over: return what it reserved, unregister its
    /// snapshot, tell the protocol, and count it out (P6).
    fn end_txn(&self, st: &mut WriteState, committed: Option<Tid>) {
        if st.phase == TxnPhase::Done {
            return;
        }
        st.phase = TxnPhase::Done;
        if self.profile.multi_writer {
            if committed.is_none() {
                let pages = st.allocated.iter().copied();
                self.alloc.lock().release(st.txn.id, pages);
            }
            if self.profile.snapshot_reads {
                self.end_read(&st.snap);
            }
            self.locks.end_txn(&st.txn, committed);
        }
        self.leave_writer();
    }

    /// TID of the last commit that wrote or freed `pgno` this session (0:
    /// none) (P11).
    fn page_tid(&self, pgno: Pgno) -> Tid {
        self.cache
            .read(pgno)
            .page_tid
            .get(&pgno)
            .copied()
            .unwrap_or(0)
    }

    /// The image a format encodes over: the page as it is on storage for
    /// this transaction (spilled, or committed). Only formats that keep
    /// versions inside the page ask for it.
    fn base_image(&self, st: &WriteState, pgno: Pgno) -> Result<Option<Arc<[u8]>>> {
        if !self.format.needs_base() || st.allocated.contains(&pgno) {
            // A page this transaction allocated has no committed version.
            return Ok(None);
        }
        if st.spilled.contains(&pgno) {
            return self.read_committed(pgno, st.txn.tid).map(Some);
        }
        if pgno <= st.orig_header.page_count {
            return self.committed_raw(pgno, None).map(Some);
        }
        Ok(None)
    }

    /// Mark `raw`, if it is still the cached image of `pgno`, verified:
    /// its checksum was checked since it was read.
    fn note_verified(&self, pgno: Pgno, raw: &Arc<[u8]>) {
        let mut sh = self.cache.write(pgno);
        if let Some(p) = sh.cache.peek(pgno) {
            if Arc::ptr_eq(&p.raw, raw) {
                p.verified = true;
            }
        }
    }

    /// Whether `raw` is the cached image of `pgno` and was verified since
    /// it was read (decoded, patched over, or encoded by this process).
    fn is_verified(&self, pgno: Pgno, raw: &Arc<[u8]>) -> bool {
        let sh = self.cache.read(pgno);
        sh.cache
            .lookup(pgno)
            .is_some_and(|p| p.verified && Arc::ptr_eq(&p.raw, raw))
    }

    fn encode_dirty(&self, st: &WriteState, pgno: Pgno, d: &Dirty, tid: u64) -> Result<Arc<[u8]>> {
        match d {
            // Sealed when it was put (`put_raw`): handed on as it is.
            Dirty::Raw(r) | Dirty::Encoded(_, r) | Dirty::Image(Some(r)) => Ok(r.clone()),
            Dirty::Image(None) => Err(image_gone(pgno)),
            Dirty::Node(n) => {
                if let Some(out) = self.encode_changed(st, pgno, n, tid)? {
                    return Ok(out);
                }
                let base = self.base_image(st, pgno)?;
                let mut out = self.page_buffer();
                self.format.encode(
                    pgno,
                    n,
                    base.as_deref(),
                    &self.encode_ctx(tid),
                    unique(&mut out)?,
                )?;
                Ok(out)
            }
        }
    }

    /// The page patched from its committed image when the transaction
    /// made one leaf change to it (and nothing else) and that image is
    /// cached as verified (decoded once, or encoded here; its node may
    /// have been handed to this writer): a patch must not seal damage it
    /// never checked.
    fn encode_changed(
        &self,
        st: &WriteState,
        pgno: Pgno,
        node: &Node,
        tid: u64,
    ) -> Result<Option<Arc<[u8]>>> {
        let Some(&Some(change)) = st.changed.get(&pgno) else {
            return Ok(None);
        };
        self.patch_committed(st, pgno, node, change, tid)
    }

    /// [`Pager::encode_changed`] for a given `change` (the page's only
    /// one since its committed version, as the caller knows).
    fn patch_committed(
        &self,
        st: &WriteState,
        pgno: Pgno,
        node: &Node,
        change: LeafChange,
        tid: u64,
    ) -> Result<Option<Arc<[u8]>>> {
        if !st.committed_is_base(pgno) {
            return Ok(None);
        }
        let base = {
            let sh = self.cache.read(pgno);
            match sh.cache.get(pgno) {
                Some(p) if p.verified => p.raw.clone(),
                _ => return Ok(None),
            }
        };
        let mut out = self.page_buffer();
        let ctx = self.encode_ctx(tid);
        let done =
            self.format
                .encode_changed(pgno, node, &base, change, &ctx, unique(&mut out)?)?;
        if !done {
            self.keep_buffer(out);
            return Ok(None);
        }
        Ok(Some(out))
    }

    fn take_exclusive(&self, st: &mut WriteState) -> Result<()> {
        if !st.exclusive {
            self.locks
                .lock_exclusive(st.txn.timeout_or(self.cfg.busy_timeout))?;
            st.exclusive = true;
        }
        Ok(())
    }

    /// Write the dirty set through the journal before commit.
    fn spill(&self, st: &mut WriteState) -> Result<()> {
        st.spills += 1;
        self.take_exclusive(st)?;
        let _g = self.commit_lock.lock();
        self.phase(st, TxnPhase::Spilled)?;
        let tid = st.txn.tid;
        let mut pgnos: Vec<Pgno> = st.dirty.keys().copied().collect();
        pgnos.sort_unstable();
        let mut pages = Vec::with_capacity(pgnos.len());
        for &p in &pgnos {
            let d = &st.dirty[&p];
            let data = self.encode_dirty(st, p, d, tid)?;
            let sum_at = self.sealed_tree_sum(d, &data);
            pages.push(PageImage {
                pgno: p,
                data,
                sum_at,
            });
        }
        let src = Originals { pager: self };
        let readers = self.reader_snapshots();
        let set = CommitSet {
            tid,
            pages: &pages,
            orig_page_count: st.orig_header.page_count,
            new_page_count: st.header.page_count,
            originals: &src,
            prev_header: &st.orig_header,
            header: &st.header,
            oldest_snapshot: readers.first().copied().unwrap_or(Tid::MAX),
            readers: self,
            free: &[],
        };
        self.journal.spill(&self.db, &set)?;
        for p in pgnos {
            st.dirty.remove(&p);
            st.spilled.insert(p);
        }
        Ok(())
    }

    /// Write the header (and dirty pages) through the journal and install
    /// the new state (P1, P2). `st.header` already carries the new FCC.
    fn write_commit(&self, st: &mut WriteState) -> Result<()> {
        self.take_exclusive(st)?;
        let mut g = self.commit_lock.lock();
        self.write_commit_locked(&mut g, st)
    }

    /// [`Pager::write_commit`] with the commit lock held.
    fn write_commit_locked(&self, g: &mut Sequencer, st: &mut WriteState) -> Result<()> {
        self.phase(st, TxnPhase::Committing)?;
        let tid = st.txn.tid;
        let (mut pages, free) = self.commit_pages(st)?;
        let src = Originals { pager: self };
        let readers = self.reader_snapshots();
        let set = CommitSet {
            tid,
            pages: &pages,
            orig_page_count: st.orig_header.page_count,
            new_page_count: st.header.page_count,
            originals: &src,
            prev_header: &st.orig_header,
            header: &st.header,
            oldest_snapshot: readers.first().copied().unwrap_or(Tid::MAX),
            readers: self,
            free: &free,
        };
        let r = self.journal.commit(&self.db, &set);
        if let Err(e) = r {
            st.pages = pages;
            return Err(e);
        }
        // Durable: install the pages, then publish the header (P1, P2).
        self.mark_changed(st, &pages, &free);
        self.install(st, &mut pages);
        st.pages = pages;
        g.header = st.header;
        // Readers that start from now on see this commit, so the oldest
        // snapshot is final. The commit is durable: a failed maintenance
        // step is the mode's to retry, not the transaction's error.
        let _ = self.poison_if_asked(self.journal.after_commit(&self.db, self));
        Ok(())
    }

    /// The encoded pages of a commit (sorted; page 1 first, unless the
    /// journal writes page 1 itself) and the pages free in the state it
    /// commits although it may write them.
    fn commit_pages(&self, st: &mut WriteState) -> Result<(Vec<PageImage>, Vec<Pgno>)> {
        let tid = st.txn.tid;
        let mut pgnos = std::mem::take(&mut st.pgnos);
        pgnos.clear();
        pgnos.extend(st.dirty.keys().copied().filter(|&p| p != 1));
        // Pages allocated and freed again by this transaction and never
        // written: the file must still cover the page count, so they are
        // written, zero-filled and unsealed (a free page, no transaction's
        // version).
        let fillers: Vec<Pgno> = (st.orig_header.page_count + 1..=st.header.page_count)
            .filter(|p| !st.dirty.contains_key(p) && !st.spilled.contains(p))
            .collect();
        pgnos.extend(&fillers);
        pgnos.sort_unstable();
        // Free in the committed state although this transaction may have
        // written them (spilled, then freed; fillers).
        let mut free: Vec<Pgno> = st
            .freed
            .iter()
            .copied()
            .filter(|p| !st.dirty.contains_key(p))
            .chain(fillers.iter().copied())
            .collect();
        free.sort_unstable();
        free.dedup();
        let mut pages = std::mem::take(&mut st.pages);
        pages.clear();
        if self.journal.writes_pager_page1(&st.orig_header, &st.header) {
            let mut p1 = self.page_buffer();
            let b = unique(&mut p1)?;
            st.header.write_over(&self.committed_raw(1, None)?, b);
            pages.push(PageImage::new(1, p1));
        }
        // One shared zero page for the fillers, allocated only if needed.
        let mut zeros: Option<Arc<[u8]>> = None;
        for &p in &pgnos {
            // An image encoded at put time is moved out (its node stays), so
            // the journal may finish it in place without a copy.
            let image = st.dirty.get_mut(&p).and_then(Dirty::take_image);
            let (data, sum_at) = match (image, st.dirty.get(&p)) {
                (Some(img), Some(d)) => {
                    let at = self.sealed_tree_sum(d, &img);
                    (img, at)
                }
                (Some(img), None) => (img, None),
                (None, Some(d)) => {
                    let img = self.encode_dirty(st, p, d, tid)?;
                    let at = self.sealed_tree_sum(d, &img);
                    (img, at)
                }
                (None, None) => {
                    let z = zeros.get_or_insert_with(|| Arc::from(vec![0u8; self.db.page_size]));
                    (z.clone(), None)
                }
            };
            pages.push(PageImage {
                pgno: p,
                data,
                sum_at,
            });
        }
        st.pgnos = pgnos;
        self.journal
            .prepare_commit(tid, &st.orig_header, &st.header, &mut pages, &free)?;
        Ok((pages, free))
    }

    /// Where `data`, the image of dirty page `d` this process encoded or
    /// patched, holds the page checksum it sealed ([`PageImage::sum_at`]):
    /// tree pages only (a raw page is sealed by its format's envelope),
    /// and only in a database that carries checksums.
    fn sealed_tree_sum(&self, d: &Dirty, data: &[u8]) -> Option<usize> {
        let tree = matches!(d, Dirty::Node(_) | Dirty::Encoded(..) | Dirty::Image(_));
        (self.sums && tree)
            .then(|| self.format.tree_sum_at(data))
            .flatten()
    }

    /// Record that the commit of `st` changed its pages (P11): before the
    /// next commit is validated, and before any of them is installed.
    fn mark_changed(&self, st: &WriteState, pages: &[PageImage], free: &[Pgno]) {
        let tid = st.txn.tid;
        for &p in &st.spilled {
            let mut sh = self.cache.write(p);
            sh.cache.remove(p);
            sh.page_tid.insert(p, tid);
        }
        // Freed pages (or zero-filled ones): their old images stay cached
        // for older snapshots, but the commit changed them.
        for &p in free.iter().chain(pages.iter().map(|img| &img.pgno)) {
            self.cache.write(p).page_tid.insert(p, tid);
        }
    }

    /// Put a durable commit's pages into the cache, then publish its
    /// header (P1, P2). `pages` is emptied (its buffer is kept).
    fn install(&self, st: &mut WriteState, pages: &mut Vec<PageImage>) {
        let tid = st.txn.tid;
        let mut prune = false;
        for img in pages.drain(..) {
            let (node, patched) = match st.dirty.get(&img.pgno) {
                Some(Dirty::Node(n) | Dirty::Encoded(n, _)) => (Some(n.clone()), false),
                Some(Dirty::Image(_)) => (None, true),
                _ => (None, false),
            };
            let mut sh = self.cache.write(img.pgno);
            sh.page_tid.insert(img.pgno, tid);
            prune |= sh.page_tid.len() > sh.prune_at;
            let evicted = sh.cache.put(
                img.pgno,
                CachedPage {
                    raw: img.data,
                    // Encoded here: from its node, or patched from a
                    // verified image.
                    verified: node.is_some() || patched,
                    node,
                },
            );
            drop(sh);
            if let Some(old) = evicted {
                self.recycle(old);
            }
        }
        if st.header.page_count < st.orig_header.page_count {
            // The cache holds committed pages only, so nothing lies above
            // the count unless it shrank (a scan of every shard otherwise).
            self.cache.truncate(st.header.page_count);
        }
        if prune {
            // P16: before this commit is published, so the horizon is at
            // most the newest snapshot any reader or writer holds or takes.
            let horizon = {
                let sh = self.shared.lock();
                let oldest = sh.readers.keys().next().copied().unwrap_or(Tid::MAX);
                oldest.min(sh.header.fcc)
            };
            self.cache.prune_page_tids(horizon);
        }
        let mut sh = self.shared.lock();
        sh.header = st.header;
        if let Some(free) = st.free.take() {
            // The working list becomes the committed one (the transaction
            // is over); the replaced list's buffer is kept for the next. A
            // list shared and unchanged is the committed one, held pages
            // included.
            if let Some(mut all) = free.into_changed() {
                all.extend(st.held.iter().copied());
                let sh = &mut *sh;
                match sh.free.as_mut().and_then(Arc::get_mut) {
                    Some(list) => {
                        std::mem::swap(list, &mut all);
                        sh.free_spare = all;
                    }
                    None => sh.free = Some(Arc::new(all)),
                }
            }
            // Readers of older snapshots may still descend into the pages
            // this commit freed (P9).
            if sh.readers.keys().next().is_some_and(|&r| r < tid) {
                let freed = st.freed.iter().map(|&p| (tid, p));
                sh.held.extend(freed);
            }
            if self.format.retires_in_place() {
                // P13: the retired version carries T; it stays until T + 1
                // commits.
                let retired = st.freed.iter().filter(|p| st.dirty.contains_key(p));
                sh.held.extend(retired.map(|&p| (tid + 1, p)));
            }
        }
    }

    /// The first step of a multi-writer commit (P12), under the commit
    /// lock: encode, hand to the journal in commit order, mark the pages
    /// changed. Returns the journal's ticket, the commit's ordinal, its
    /// pages and its free pages.
    fn sequence_commit(&self, g: &mut Sequencer, st: &mut WriteState) -> Result<Sequenced> {
        self.phase(st, TxnPhase::Committing)?;
        let (pages, free) = self.commit_pages(st)?;
        let src = Originals { pager: self };
        let readers = self.reader_snapshots();
        let set = CommitSet {
            tid: st.txn.tid,
            pages: &pages,
            orig_page_count: st.orig_header.page_count,
            new_page_count: st.header.page_count,
            originals: &src,
            prev_header: &st.orig_header,
            header: &st.header,
            oldest_snapshot: readers.first().copied().unwrap_or(Tid::MAX),
            readers: self,
            free: &free,
        };
        let ticket = match self.journal.sequence_commit(&self.db, &set) {
            Ok(t) => t,
            Err(e) => {
                st.pages = pages;
                return Err(e);
            }
        };
        self.mark_changed(st, &pages, &free);
        g.header = st.header;
        let ordinal = g.next;
        g.next += 1;
        Ok(Sequenced {
            ticket,
            ordinal,
            pages,
        })
    }

    /// The rest of a multi-writer commit (P12), without the commit lock:
    /// the journal makes it durable (sharing an fdatasync with the commits
    /// ready at the same time), then it is published and installed once
    /// every earlier commit was.
    fn finish_commit(&self, st: &mut WriteState, mut seq: Sequenced) -> Result<()> {
        // A follower of a group commit waits for the leader's fdatasync:
        // that wait counts as sync time in the thread's breakdown (what
        // the journal's own I/O did not already count).
        let (start, io0) = (std::time::Instant::now(), timers::thread_times());
        let r = self
            .journal
            .finish_commit(&self.db, &mut seq.ticket)
            .and_then(|()| {
                let io = timers::thread_times() - io0;
                let own = io.write_ns.saturating_add(io.sync_ns);
                let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                timers::add(Timer::Sync, waited.saturating_sub(own));
                let mut next = self.installed.lock();
                if *next != seq.ordinal {
                    // Earlier commits install first: a commit-turn wait.
                    let start = std::time::Instant::now();
                    while *next != seq.ordinal {
                        self.check_poison()?;
                        self.install_cv.wait(&mut next);
                    }
                    timers::add_since(Timer::CommitWait, start);
                }
                self.journal.publish_commit(&seq.ticket)?;
                self.install(st, &mut seq.pages);
                *next += 1;
                drop(next);
                self.install_cv.notify_all();
                Ok(())
            });
        st.pages = seq.pages;
        if let Err(e) = r {
            // Commits behind it may be in flight: nothing can be undone
            // in place (P7).
            self.poison(format!("a commit failed after it was sequenced: {e}"));
            return Err(e);
        }
        if self.journal.maintenance_due() {
            let _g = self.commit_lock.lock();
            let _ = self.poison_if_asked(self.journal.after_commit(&self.db, self));
        }
        Ok(())
    }

    /// Undo storage effects of a failed commit or a spilled transaction.
    fn undo_storage(&self, st: &WriteState) {
        let _g = self.commit_lock.lock();
        let undone = self.journal.rollback(&self.db, st.orig_header.page_count);
        // P14: a miss that read before this point is not cached from now
        // on, and what one cached before is evicted (under each page's
        // shard lock, after the count: a miss that inserts later sees it).
        // Pages past the original end are not cached.
        self.undos.fetch_add(1, Ordering::AcqRel);
        match undone {
            Ok(()) => {
                let undid = st.spilled.iter().chain(st.dirty.keys());
                for &p in std::iter::once(&1).chain(undid) {
                    self.cache.write(p).cache.remove(p);
                }
            }
            // No commit follows (P7): the cached images, which carry every
            // committed version, serve readers at least as well as storage.
            Err(e) => self.poison(e.to_string()),
        }
    }

    /// One small transaction through the journal that writes an in-memory
    /// free list to trunk pages (they are all free, so overwriting them is
    /// safe) and commits the header: at a clean close (`clean`), or after
    /// a crash of a session that kept its list in memory when this mode
    /// keeps it in trunks.
    fn persist_free_list(&self, clean: bool) -> Result<()> {
        self.locks.begin_write(self.cfg.busy_timeout)?;
        let r = self.begin_write().and_then(|st| {
            let mut wp = WritePages { pager: self, st };
            if self.profile.multi_writer {
                // No other writer is open (closing, or opening).
                wp.st.free = Some(TxnFree::owned(self.alloc.lock().committed_free()));
            }
            let r = freelist::persist(&mut wp).and_then(|()| {
                let st = &mut wp.st;
                st.header.fcc = st.txn.tid;
                st.header.clean_close = clean;
                self.write_commit(st)
            });
            let tid = wp.st.txn.tid;
            match &r {
                Ok(()) => self.end_txn(&mut wp.st, Some(tid)),
                Err(_) => {
                    self.undo_storage(&wp.st);
                    self.end_txn(&mut wp.st, None);
                }
            }
            r
        });
        self.locks.end_write();
        if r.is_ok() && self.cfg.spec.free_list == FreeListPolicy::Trunks {
            self.shared.lock().free = None;
        }
        r
    }

    /// The committed free list when it is kept in memory (`None`: in
    /// trunk pages).
    fn committed_free_list(&self) -> Option<Vec<Pgno>> {
        if self.profile.multi_writer {
            return Some(self.alloc.lock().committed_free());
        }
        self.shared.lock().free.as_deref().cloned()
    }

    /// Mark the database cleanly closed (one small transaction through the
    /// journal, so a crash here is as safe as any commit) and release the
    /// journal's files.
    /// Idempotent: closing a closed pager does nothing. A read-only pager
    /// only releases its lock.
    pub fn close(&self) -> Result<()> {
        if self.state() == PagerState::Closed {
            return Ok(());
        }
        self.check_poison()?;
        let h = self.header();
        if !self.cfg.read_only && (!h.clean_close || self.journal.session_dirty()) {
            self.persist_free_list(true)?;
        }
        if !self.cfg.read_only {
            self.journal.close(&self.db)?;
        }
        self.db.file().unlock()?;
        self.closed.store(true, Ordering::Release);
        // This thread's hot nodes of this pager go now; other threads drop
        // theirs when they overwrite the slots.
        let id = self.id;
        HOT.with(|hot| {
            if let Ok(mut hot) = hot.try_borrow_mut() {
                for slot in hot.iter_mut() {
                    if slot.as_ref().is_some_and(|e| e.pager == id) {
                        *slot = None;
                    }
                }
            }
        });
        self.transition(PagerState::Closed)
    }
}

/// A value alone on its cache line(s) (128 bytes: adjacent-line prefetch
/// pairs lines on x86).
#[repr(align(128))]
struct Padded<T>(T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Slots of the per-thread hot-node table (direct-mapped by page number).
const HOT_SLOTS: usize = 64;

/// A node a thread visited: valid for readers of the same pager at the
/// same snapshot.
struct HotNode {
    pager: u64,
    pgno: Pgno,
    fcc: Tid,
    node: Arc<Node>,
}

thread_local! {
    static HOT: std::cell::RefCell<[Option<HotNode>; HOT_SLOTS]> =
        const { std::cell::RefCell::new([const { None }; HOT_SLOTS]) };
}

/// Pager ids: a thread's hot nodes never outlive their meaning, even when
/// a closed pager's address is reused.
static NEXT_PAGER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A zeroed page in a shared buffer, built in place: one allocation, no
/// copy from a `Vec`.
fn zeroed_page(ps: usize) -> Arc<[u8]> {
    std::iter::repeat_n(0u8, ps).collect()
}

/// The bytes of a buffer this code just built (so not yet shared).
/// A patched page read after its commit moved the image to the journal.
fn image_gone(pgno: Pgno) -> Error {
    Error::Internal(format!("page {pgno}: read after its commit began"))
}

fn unique(buf: &mut Arc<[u8]>) -> Result<&mut [u8]> {
    Arc::get_mut(buf).ok_or_else(|| Error::Internal("a fresh page buffer is shared".into()))
}

impl Readers for Pager {
    fn view(&self) -> ReaderView {
        let sh = self.shared.lock();
        ReaderView {
            installed: sh.header.fcc,
            snapshots: sh.readers.keys().copied().collect(),
        }
    }

    /// Installs of several writers' commits happen under `installed`, in
    /// order, and wake `install_cv` (P12).
    fn view_after(&self, tid: Tid) -> Result<ReaderView> {
        let mut n = self.installed.lock();
        loop {
            let v = self.view();
            if v.installed >= tid {
                return Ok(v);
            }
            self.check_poison()?;
            self.install_cv.wait(&mut n);
        }
    }
}

impl Drop for Pager {
    /// The last handle is gone: close cleanly (a failure leaves the file
    /// for recovery at the next open, as a crash would).
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A commit sequenced and not yet installed (P12).
struct Sequenced {
    ticket: CommitTicket,
    ordinal: u64,
    pages: Vec<PageImage>,
}

/// Committed images for undo logging.
struct Originals<'a> {
    pager: &'a Pager,
}

impl OriginalSource for Originals<'_> {
    fn original(&self, pgno: Pgno) -> Result<Arc<[u8]>> {
        if pgno > self.pager.header().page_count {
            // Past the installed count but not past the sequenced one
            // (P12): a commit in flight extended the file over a page this
            // transaction reserved, with zeros (A2); nobody else wrote it.
            return Ok(zeroed_page(self.pager.db.page_size));
        }
        self.pager.committed_raw(pgno, None)
    }

    fn verified_sum_at(&self, pgno: Pgno, image: &Arc<[u8]>) -> Option<usize> {
        // Verified at load, or sealed by the commit that installed it; a
        // database without page checksums has none to trust.
        (self.pager.sums && self.pager.is_verified(pgno, image))
            .then(|| self.pager.format.tree_sum_at(image))
            .flatten()
    }
}

/// A page image and, when asked for, its decoded node.
type Loaded = (Arc<[u8]>, Option<Arc<Node>>);

/// A private dirty page.
#[derive(Clone)]
enum Dirty {
    Node(Arc<Node>),
    /// A node encoded when it was put, with its page image: formats that
    /// place a version over the committed one work the placement out once
    /// (`put_node_if_fits`), not again at commit.
    Encoded(Arc<Node>, Arc<[u8]>),
    Raw(Arc<[u8]>),
    /// A tree page patched without its node (`patch_leaf`): the
    /// node is decoded from the image if the transaction reads the page
    /// again. The commit moves the image to the journal (which may finish
    /// it in place: a commit record), leaving `None`; a transaction's
    /// commit runs once (`WriteTxn::commit` takes it), so nothing reads
    /// the page after.
    Image(Option<Arc<[u8]>>),
}

impl Dirty {
    /// Move the image out of an encoded page (its node stays).
    fn take_image(&mut self) -> Option<Arc<[u8]>> {
        if let Dirty::Image(img) = self {
            return img.take();
        }
        let Dirty::Encoded(n, _) = self else {
            return None;
        };
        let node = Dirty::Node(n.clone());
        match std::mem::replace(self, node) {
            Dirty::Encoded(_, img) => Some(img),
            _ => None,
        }
    }
}

/// Pages and header of one write transaction.
pub struct WriteState {
    /// Identity from the concurrency layer (P5).
    pub txn: Txn,
    /// The committed header the transaction began on (its snapshot).
    snap: Header,
    /// The committed header its commit goes on top of: `snap`, or, with
    /// several writers, the newest at commit (P10).
    orig_header: Header,
    /// Working header (page count, free list, catalog root).
    pub header: Header,
    phase: TxnPhase,
    dirty: PgnoMap<Dirty>,
    spilled: PgnoSet,
    freed: Vec<Pgno>,
    /// Pages this transaction took from the free list or the file's end.
    allocated: PgnoSet,
    /// The working in-memory free list (volatile free-list modes).
    free: Option<TxnFree>,
    /// Free pages kept from reuse for older readers (P9), not in `free`.
    held: PgnoSet,
    exclusive: bool,
    /// Commit scratch, kept with the transaction for reuse.
    pgnos: Vec<Pgno>,
    pages: Vec<PageImage>,
    /// Per dirty tree page, the one leaf change by which it differs from
    /// its committed image (`PageWrite::note_change`), or [`CHANGED_MORE`].
    changed: PgnoMap<Option<LeafChange>>,
    /// Committed pages read, when the protocol tracks reads or names
    /// conflicts. Behind a mutex because reads take `&self`.
    reads: Mutex<ReadSet>,
    /// Bumped by every put or free ([`PageRead::generation`]).
    generation: u64,
    /// Spills so far (a savepoint cannot undo one).
    spills: u64,
    /// The page a leaf patch found full ([`Patched::Full`]), at the
    /// generation it did: the tree's put of the same change follows.
    full: Option<(Pgno, u64)>,
}

/// The committed pages a write transaction read, each with the table it
/// was reached through.
#[derive(Default)]
struct ReadSet {
    /// Page -> index into `tables` ([`NO_TABLE`]: the catalog).
    pages: PgnoMap<u32>,
    /// Tables named by the transaction's operations.
    tables: Vec<Arc<str>>,
    /// The table the current operation works on.
    table: u32,
}

/// The catalog (no user table).
const NO_TABLE: u32 = u32::MAX;

/// A page the transaction changed in more than one cell or step.
const CHANGED_MORE: Option<LeafChange> = None;

impl WriteState {
    /// The TID of the commit the transaction began on (its snapshot).
    pub fn snapshot_fcc(&self) -> u64 {
        self.snap.fcc
    }

    /// Whether the committed image of `pgno` (what the cache holds) is
    /// the base of this transaction's version: the page is neither one
    /// it allocated nor one it spilled, and existed before it began.
    fn committed_is_base(&self, pgno: Pgno) -> bool {
        !self.spilled.contains(&pgno)
            && !self.allocated.contains(&pgno)
            && pgno <= self.orig_header.page_count
    }

    /// Pages currently dirty in memory.
    pub fn dirty_pages(&self) -> usize {
        self.dirty.len()
    }

    /// True if the transaction has spilled pages to the database file.
    pub fn has_spilled(&self) -> bool {
        !self.spilled.is_empty()
    }

    /// The table a page was reached through, when known.
    fn table_of(&self, pgno: Pgno) -> Option<String> {
        let r = self.reads.lock();
        let i = *r.pages.get(&pgno)?;
        r.tables.get(i as usize).map(|t| t.to_string())
    }

    /// True if the transaction changed nothing.
    pub fn is_clean(&self) -> bool {
        self.dirty.is_empty()
            && self.spilled.is_empty()
            && self.freed.is_empty()
            && self.header == self.orig_header
    }
}

/// A write transaction's view of pages: its own dirty pages over the
/// committed state. The B+tree runs on this. `R` is how it holds the pager:
/// an `Arc` for a transaction an application keeps, a reference inside the
/// pager.
pub struct WritePages<R: Deref<Target = Pager> = Arc<Pager>> {
    /// The pager.
    pub pager: R,
    /// The transaction's state.
    pub st: WriteState,
}

impl<R: Deref<Target = Pager>> Drop for WritePages<R> {
    fn drop(&mut self) {
        if self.st.phase != TxnPhase::Done {
            // Neither committed nor rolled back (an early error return).
            if self.st.exclusive {
                self.pager.undo_storage(&self.st);
            }
            self.pager.end_txn(&mut self.st, None);
        }
        self.pager.keep_spare(&mut self.st);
    }
}

impl<R: Deref<Target = Pager>> WritePages<R> {
    fn check_range(&self, pgno: Pgno) -> Result<()> {
        if pgno == 0 || pgno > self.st.header.page_count {
            // A writer that reads the newest state may reach pages that
            // commits after its start added.
            let newest = match self.pager.profile {
                Profile {
                    multi_writer: true,
                    snapshot_reads: false,
                    ..
                } => self.pager.header().page_count,
                _ => 0,
            };
            if pgno == 0 || pgno > newest {
                return Err(self.pager.out_of_range(pgno, self.st.header.page_count));
            }
        }
        Ok(())
    }

    /// The per-page hook before this transaction first writes `pgno`.
    fn first_write(&self, pgno: Pgno) -> Result<()> {
        if !self.pager.profile.page_hooks || self.st.dirty.contains_key(&pgno) {
            return Ok(());
        }
        let tid = self.pager.page_tid(pgno);
        self.pager.locks.before_write(&self.st.txn, pgno, tid)
    }

    /// Before this transaction reads committed page `pgno`: the
    /// protocol's hook and read set, if it wants them.
    fn note_read(&self, pgno: Pgno) -> Result<()> {
        let prof = self.pager.profile;
        if prof.page_hooks {
            let tid = self.pager.page_tid(pgno);
            self.pager.locks.before_read(&self.st.txn, pgno, tid)?;
        }
        if prof.track_reads {
            let mut r = self.st.reads.lock();
            let t = r.table;
            r.pages.entry(pgno).or_insert(t);
        }
        Ok(())
    }

    /// A read of the snapshot failed with `e`. If it is a conflict (the
    /// version this snapshot needs is gone: commits since overwrote the
    /// page after [`Self::note_read`] let the read go), that is a page
    /// committed after the snapshot, which the protocol refuses itself:
    /// ask it again, so it counts the abort as its own (2VTO: the replay
    /// gets AFUW's forced sleep and one-abort bound).
    fn version_gone(&self, pgno: Pgno, e: Error) -> Error {
        if self.pager.profile.page_hooks && matches!(e, Error::Conflict { .. }) {
            let tid = self.pager.page_tid(pgno);
            if let Err(refused) = self.pager.locks.before_read(&self.st.txn, pgno, tid) {
                return refused;
            }
        }
        e
    }

    /// The committed state this transaction reads: its snapshot, or the
    /// newest (`None`).
    fn read_point(&self) -> Option<&Header> {
        self.pager.profile.snapshot_reads.then_some(&self.st.snap)
    }

    /// Name the table the next operations work on (`None`: the catalog),
    /// so that a conflict can say which table its page belongs to.
    pub fn set_table(&self, name: Option<&str>) {
        if !self.pager.profile.track_reads {
            return;
        }
        let mut r = self.st.reads.lock();
        r.table = match name {
            None => NO_TABLE,
            Some(n) => match r.tables.iter().position(|t| &**t == n) {
                Some(i) => i as u32,
                None => {
                    r.tables.push(Arc::from(n));
                    (r.tables.len() - 1) as u32
                }
            },
        };
    }

    /// Encode `node` over the base image of `pgno` now (a format that
    /// places cells around the committed version), or hand it back if it
    /// does not fit. `change`: [`EncodeCtx::leaf_change`].
    fn put_encoded(
        &mut self,
        pgno: Pgno,
        node: Node,
        change: Option<LeafChange>,
    ) -> Result<Option<Node>> {
        let Some(out) = self.encode_now(pgno, &node, change)? else {
            return Ok(Some(node));
        };
        self.put_image(pgno, node, out)?;
        Ok(None)
    }

    /// The page image of `node` at `pgno`, encoded over the page's base
    /// image now, or `None` if it does not fit there.
    fn encode_now(
        &mut self,
        pgno: Pgno,
        node: &Node,
        change: Option<LeafChange>,
    ) -> Result<Option<Arc<[u8]>>> {
        self.check_range(pgno)?;
        let base = self.pager.base_image(&self.st, pgno)?;
        let mut out = self.pager.page_buffer();
        let mut ctx = self.pager.encode_ctx(self.st.txn.tid);
        ctx.base_verified = base
            .as_ref()
            .is_some_and(|b| self.pager.is_verified(pgno, b));
        ctx.leaf_change = change;
        if !self.pager.format.encode_if_fits(
            pgno,
            node,
            base.as_deref(),
            &ctx,
            unique(&mut out)?,
        )? {
            self.pager.keep_buffer(out);
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// Put `node` at `pgno` with its page image `out` encoded already
    /// (`Dirty::Encoded`: the commit hands the image on as it is).
    fn put_image(&mut self, pgno: Pgno, node: Node, out: Arc<[u8]>) -> Result<()> {
        self.put_image_held(pgno, node, out)?;
        self.maybe_spill()
    }

    /// [`WritePages::put_image`] without the spill check: the caller puts
    /// other images encoded over the same bases first.
    fn put_image_held(&mut self, pgno: Pgno, node: Node, out: Arc<[u8]>) -> Result<()> {
        self.first_write(pgno)?;
        self.mark_put(pgno);
        let node = self.pager.node_arc(node);
        self.st.dirty.insert(pgno, Dirty::Encoded(node, out));
        Ok(())
    }

    /// Before `pgno` is put: a page put a second time (or freed) has no
    /// single changed cell any more.
    fn mark_put(&mut self, pgno: Pgno) {
        self.st.generation += 1;
        if self.st.dirty.contains_key(&pgno) {
            self.st.changed.insert(pgno, CHANGED_MORE);
        } else {
            self.st.changed.remove(&pgno);
        }
    }

    fn maybe_spill(&mut self) -> Result<()> {
        // Several writers keep their pages in memory: a spill would put
        // one transaction's uncommitted pages where the others read (v1).
        if self.st.dirty.len() > self.pager.cfg.cache_pages && !self.pager.profile.multi_writer {
            self.pager.spill(&mut self.st)?;
        }
        Ok(())
    }
}

impl<R: Deref<Target = Pager>> PageRead for WritePages<R> {
    fn page_size(&self) -> usize {
        self.pager.db.page_size
    }

    fn format(&self) -> &dyn NodeFormat {
        &*self.pager.format
    }

    fn page_count(&self) -> u32 {
        self.st.header.page_count
    }

    fn node(&self, pgno: Pgno, order: &dyn KeyOrder) -> Result<Arc<Node>> {
        self.check_range(pgno)?;
        if pgno < 2 {
            return Err(self.pager.out_of_range(pgno, self.st.header.page_count));
        }
        match self.st.dirty.get(&pgno) {
            Some(Dirty::Node(n) | Dirty::Encoded(n, _)) => return Ok(n.clone()),
            Some(Dirty::Raw(r) | Dirty::Image(Some(r))) => {
                let ctx = self.pager.decode_ctx(self.st.txn.tid, order);
                return Ok(Arc::new(self.pager.decode_page(pgno, r, &ctx, self)?));
            }
            Some(Dirty::Image(None)) => return Err(image_gone(pgno)),
            None => {}
        }
        self.note_read(pgno)?;
        if self.st.spilled.contains(&pgno) {
            let raw = self.pager.read_committed(pgno, self.st.txn.tid)?;
            let ctx = self.pager.decode_ctx(self.st.txn.tid, order);
            return Ok(Arc::new(self.pager.decode_page(pgno, &raw, &ctx, self)?));
        }
        self.pager
            .committed_node(pgno, self.read_point(), order)
            .map_err(|e| self.version_gone(pgno, e))
    }

    fn raw(&self, pgno: Pgno) -> Result<Arc<[u8]>> {
        self.check_range(pgno)?;
        match self.st.dirty.get(&pgno) {
            Some(Dirty::Raw(r) | Dirty::Encoded(_, r) | Dirty::Image(Some(r))) => {
                return Ok(r.clone())
            }
            Some(Dirty::Image(None)) => return Err(image_gone(pgno)),
            Some(d @ Dirty::Node(_)) => {
                return self.pager.encode_dirty(&self.st, pgno, d, self.st.txn.tid)
            }
            None => {}
        }
        self.note_read(pgno)?;
        let (raw, fcc) = if self.st.spilled.contains(&pgno) {
            let t = self.st.txn.tid;
            (self.pager.read_committed(pgno, t)?, t)
        } else {
            (
                self.pager
                    .committed_raw(pgno, self.read_point())
                    .map_err(|e| self.version_gone(pgno, e))?,
                self.st.orig_header.fcc,
            )
        };
        if pgno >= 2 {
            self.pager
                .check_raw(pgno, &raw, &self.pager.decode_ctx(fcc, &BYTEWISE))?;
        }
        Ok(raw)
    }

    fn free_pages(&self) -> Option<Vec<Pgno>> {
        Some(self.st.free.as_ref()?.all_pages(&self.st.held))
    }

    fn generation(&self) -> u64 {
        self.st.generation
    }
}

impl<R: Deref<Target = Pager>> PageWrite for WritePages<R> {
    fn put_node(&mut self, pgno: Pgno, node: Node) -> Result<()> {
        self.check_range(pgno)?;
        self.first_write(pgno)?;
        self.mark_put(pgno);
        let node = self.pager.node_arc(node);
        self.st.dirty.insert(pgno, Dirty::Node(node));
        self.maybe_spill()
    }

    fn value_bytes(&mut self, value: &[u8]) -> Bytes {
        self.pager.value_bytes(value)
    }

    /// Only where the logical view would cost a decode: a page this
    /// transaction has not written, whose node the cache does not hold,
    /// under the one-writer protocol without read hooks (the tree's read
    /// of the page would record nothing).
    fn patch_leaf(
        &mut self,
        pgno: Pgno,
        key: &[u8],
        patch: LeafPatch<'_>,
        order: &dyn KeyOrder,
    ) -> Result<LeafPatched> {
        let prof = self.pager.profile;
        if !self.pager.format.patches_leaf(&patch)
            || prof.multi_writer
            || prof.page_hooks
            || prof.track_reads
            || pgno < 2
            || self.st.dirty.contains_key(&pgno)
            || !self.st.committed_is_base(pgno)
        {
            return Ok(LeafPatched::Declined(None));
        }
        self.check_range(pgno)?;
        // One cache lookup: a decoded node goes back to the tree, which
        // would read it next (`PageRead::node` finds the same: the page is
        // neither dirty nor spilled, and no read hook runs).
        let snap = self.read_point().copied();
        let (base, verified) = match self.pager.cached(pgno, snap.as_ref()) {
            Some(CachedPage {
                node: Some(node), ..
            }) => return Ok(LeafPatched::Declined(Some(node))),
            Some(CachedPage { raw, verified, .. }) => (raw, verified),
            None => (
                self.pager
                    .committed_raw(pgno, snap.as_ref())
                    .map_err(|e| self.version_gone(pgno, e))?,
                false,
            ),
        };
        let mut ctx = self.pager.encode_ctx(self.st.txn.tid);
        ctx.base_verified = verified;
        let mut out = self.pager.page_buffer();
        let done = self.pager.format.patch_leaf(
            pgno,
            &base,
            key,
            patch,
            order,
            &ctx,
            unique(&mut out)?,
        )?;
        if done.is_some()
            && !verified
            && self.pager.journal.sums_originals()
            && self.pager.format.tree_sum_at(&base).is_some()
        {
            // A patch builds only on a base it verified (`patch_leaf`):
            // the cached image is now one a journal record of it may
            // derive its checksum from (C6) instead of summing it again.
            self.pager.note_verified(pgno, &base);
        }
        let existed = match done {
            Some(Patched::Written { existed }) => existed,
            Some(Patched::Absent) => {
                self.pager.keep_buffer(out);
                return Ok(LeafPatched::Done(false));
            }
            declined @ (Some(Patched::Full) | None) => {
                self.pager.keep_buffer(out);
                if declined.is_some() {
                    self.st.full = Some((pgno, self.st.generation));
                }
                return Ok(LeafPatched::Declined(None));
            }
        };
        self.first_write(pgno)?;
        self.mark_put(pgno);
        self.st.dirty.insert(pgno, Dirty::Image(Some(out)));
        self.pager.leaves_patched.fetch_add(1, Ordering::Relaxed);
        self.maybe_spill()?;
        Ok(LeafPatched::Done(existed))
    }

    fn note_change(&mut self, pgno: Pgno, change: LeafChange) {
        self.st.changed.entry(pgno).or_insert(Some(change));
    }

    fn leaf_buffer(&mut self) -> Vec<LeafCell> {
        self.pager.leaf_buffer()
    }

    /// The node the tree is about to replace: its cells are handed over
    /// when nothing else holds it (no copy of every cell, and none of the
    /// references into the page image to take and drop). A dirty node is
    /// this transaction's alone; a committed one leaves the cache (the
    /// page image stays: a reader decodes it again on a hit) only when the
    /// cache holds the sole other reference, under the shard's write lock,
    /// so no reader can take one meanwhile.
    fn leaf_to_modify(&mut self, pgno: Pgno, node: Arc<Node>) -> Result<Vec<LeafCell>> {
        let node = match self.st.dirty.get_mut(&pgno) {
            Some(Dirty::Node(n)) if Arc::ptr_eq(n, &node) => {
                drop(node);
                if let Some(Node::Leaf(cells)) = Arc::get_mut(n) {
                    return Ok(std::mem::take(cells));
                }
                n.clone()
            }
            Some(_) => node,
            None if self.st.spilled.contains(&pgno) => node,
            None => match self.pager.take_cached_leaf(pgno, node) {
                Ok(cells) => return Ok(cells),
                Err(node) => node,
            },
        };
        crate::page::copy_leaf(self.pager.leaf_buffer(), pgno, &node)
    }

    fn discard_value(&mut self, value: Value) {
        if let Value::Inline(b) = value {
            self.pager.discard_value(b);
        }
    }

    fn put_changed(
        &mut self,
        pgno: Pgno,
        node: Node,
        change: LeafChange,
        no_larger: bool,
    ) -> Result<Option<Node>> {
        // The node is the committed version with one cell changed when this
        // transaction has not written the page before and the committed
        // state cannot have moved past the version the tree read (one
        // writer at a time).
        let first_change = self.unwritten(pgno);
        // The leaf patch of this very change found the page full, and
        // nothing was put since: the layout would refuse the node too.
        let known_full = self.st.full.take() == Some((pgno, self.st.generation))
            && matches!(change, LeafChange::Value(_) | LeafChange::Inserted(_));
        if first_change && known_full {
            return Ok(Some(node));
        }
        if !self.pager.format.needs_base() {
            if no_larger {
                // The page held the larger node: no size sum.
                self.put_node(pgno, node)?;
                return Ok(None);
            }
            // A patch of the committed image now both places the change
            // and shows it fits: no sum of every cell's size.
            if first_change {
                self.check_range(pgno)?;
                let tid = self.st.txn.tid;
                if let Some(out) = self
                    .pager
                    .patch_committed(&self.st, pgno, &node, change, tid)?
                {
                    self.put_image(pgno, node, out)?;
                    return Ok(None);
                }
            }
            return self.put_node_if_fits(pgno, node);
        }
        self.put_encoded(pgno, node, first_change.then_some(change))
    }

    fn put_node_if_fits(&mut self, pgno: Pgno, node: Node) -> Result<Option<Node>> {
        if !self.pager.format.needs_base() {
            // Placement is a size sum: test now, encode once at commit.
            if !self.fits(pgno, &node)? {
                return Ok(Some(node));
            }
            self.put_node(pgno, node)?;
            return Ok(None);
        }
        self.put_encoded(pgno, node, None)
    }

    fn put_nodes_if_all_fit(
        &mut self,
        pages: &[Pgno],
        nodes: Vec<Node>,
    ) -> Result<Option<Vec<Node>>> {
        if !self.pager.format.needs_base() || pages.len() != nodes.len() {
            // Placement is a size sum: test now, encode once at commit.
            return crate::page::put_all_tested(self, pages, nodes);
        }
        // Each image encoded once, now, instead of a placement test here
        // and the encode at commit; none is put until all fit.
        let mut images = Vec::with_capacity(pages.len());
        for (&pg, n) in pages.iter().zip(&nodes) {
            match self.encode_now(pg, n, None) {
                Ok(Some(out)) => images.push(out),
                done => {
                    for out in images {
                        self.pager.keep_buffer(out);
                    }
                    return done.map(|_| Some(nodes));
                }
            }
        }
        // Put before any spill: a spill between the puts would change the
        // base the images not yet put were encoded over.
        for ((&pg, n), out) in pages.iter().zip(nodes).zip(images) {
            self.put_image_held(pg, n, out)?;
        }
        self.maybe_spill()?;
        Ok(None)
    }

    fn put_raw(&mut self, pgno: Pgno, data: Vec<u8>) -> Result<()> {
        self.check_range(pgno)?;
        self.first_write(pgno)?;
        self.st.generation += 1;
        self.st.changed.insert(pgno, CHANGED_MORE);
        if data.len() != self.pager.db.page_size {
            return Err(Error::InvalidArgument(format!(
                "page image of {} bytes for a {}-byte page",
                data.len(),
                self.pager.db.page_size
            )));
        }
        // Sealed once, here, by the transaction that writes it: every later
        // spill or commit hands the same image to the journal.
        let mut data = data;
        let ctx = self.pager.encode_ctx(self.st.txn.tid);
        self.pager.format.seal_raw(pgno, &mut data, &ctx);
        self.st.dirty.insert(pgno, Dirty::Raw(Arc::from(data)));
        self.maybe_spill()
    }

    fn allocate(&mut self) -> Result<Pgno> {
        let p = if self.pager.profile.multi_writer {
            // Reserved in the shared allocator (P10); the page count in
            // the header is merged at commit.
            let st = &mut self.st;
            let mut horizon = st.snap.fcc;
            if self.pager.format.needs_base() {
                // Old readers descend into freed pages that keep versions
                // in the page (P9).
                horizon = horizon.min(self.pager.oldest_snapshot());
            }
            let p = self.pager.alloc.lock().allocate(st.txn.id, horizon)?;
            st.header.page_count = st.header.page_count.max(p);
            p
        } else {
            freelist::allocate(self)?
        };
        self.st.allocated.insert(p);
        Ok(p)
    }

    fn unwritten(&self, pgno: Pgno) -> bool {
        let st = &self.st;
        !self.pager.profile.multi_writer
            && !st.dirty.contains_key(&pgno)
            && !st.changed.contains_key(&pgno)
            && st.committed_is_base(pgno)
    }

    fn fits(&self, pgno: Pgno, node: &Node) -> Result<bool> {
        let base = self.pager.base_image(&self.st, pgno)?;
        Ok(self.pager.format.fits(
            node,
            base.as_deref(),
            &self.pager.encode_ctx(self.st.txn.tid),
        ))
    }

    fn free(&mut self, pgno: Pgno) -> Result<()> {
        self.check_range(pgno)?;
        if pgno <= 2 {
            return Err(Error::corrupt(
                self.pager.db.path.display().to_string(),
                pgno,
                "attempt to free the header or catalog page",
            ));
        }
        self.first_write(pgno)?;
        self.st.generation += 1;
        self.st.changed.insert(pgno, CHANGED_MORE);
        self.st.dirty.remove(&pgno);
        self.st.freed.push(pgno);
        Ok(())
    }

    fn retire(&mut self, pgno: Pgno) -> Result<()> {
        if !self.pager.format.retires_in_place() || self.st.allocated.contains(&pgno) {
            // No committed version to end, or none the format records.
            return self.free(pgno);
        }
        // The empty version ends every cell of the committed one; the page
        // is written with it and free from the commit on (it stays out of
        // `CommitSet::free`, which lists pages free but not written).
        self.put_node(pgno, Node::empty_leaf())?;
        self.st.freed.push(pgno);
        Ok(())
    }
}

impl<R: Deref<Target = Pager>> WritePages<R> {
    /// Commit: return freed pages to the free list, bump the FCC, encode,
    /// journal, install. On failure the transaction is undone on storage
    /// as far as possible. Either way the transaction is over.
    pub fn commit(self) -> Result<()> {
        self.commit_tid().map(|_| ())
    }

    /// [`WritePages::commit`], returning the TID committed (`None`:
    /// nothing changed, no commit written).
    pub fn commit_tid(mut self) -> Result<Option<Tid>> {
        let r = if self.pager.profile.multi_writer {
            self.commit_merged()
        } else {
            self.commit_alone()
        };
        let committed = r.as_ref().ok().copied().flatten();
        self.pager.end_txn(&mut self.st, committed);
        r
    }

    /// The one-writer commit: the transaction owns page 1 and the free
    /// list. Returns the TID committed (`None`: nothing changed).
    fn commit_alone(&mut self) -> Result<Option<Tid>> {
        self.pager.check_poison()?;
        if self.st.is_clean() {
            return Ok(None);
        }
        // `st.freed` stays: the commit tells the journal which pages are
        // free in the state it commits.
        let freed = self.st.freed.clone();
        if let Err(e) = freelist::release(self, &freed) {
            // Releasing may itself spill; undo whatever reached the file.
            if self.st.exclusive {
                self.pager.undo_storage(&self.st);
            }
            return Err(e);
        }
        let st = &mut self.st;
        st.header.fcc = st.txn.tid;
        st.header.clean_close = false;
        st.header.journal_mode = self.pager.cfg.spec.code;
        if let Err(e) = self.pager.write_commit(st) {
            self.pager.undo_storage(st);
            return Err(e);
        }
        Ok(Some(st.txn.tid))
    }

    /// The commit of one of several writers (P10): lock the pages it
    /// writes and wait for its turn (outside the commit lock), then under
    /// the commit lock let the protocol validate it and name its TID,
    /// merge page 1 from the committed header and the allocator, and
    /// commit as [`Pager::write_commit`] does.
    fn commit_merged(&mut self) -> Result<Option<Tid>> {
        let pager = &*self.pager;
        let st = &mut self.st;
        pager.check_poison()?;
        if st.is_clean() {
            return Ok(None);
        }
        let timeout = st.txn.timeout_or(pager.cfg.busy_timeout);
        let mut writes = std::mem::take(&mut st.pgnos);
        writes.clear();
        writes.extend(st.dirty.keys().copied());
        writes.extend(st.freed.iter().copied());
        writes.sort_unstable();
        writes.dedup();
        let locked = pager
            .locks
            .lock_for_write(&st.txn, &writes, timeout)
            .and_then(|()| pager.locks.before_commit(&st.txn, timeout));
        // Pages it allocated are its own (A2): no one else can conflict.
        writes.retain(|p| !st.allocated.contains(p));
        let mut reads: Vec<Pgno> = st.reads.lock().pages.keys().copied().collect();
        reads.sort_unstable();
        if pager.cfg.faults.skip_read_validation {
            reads.clear();
        }
        st.pgnos = Vec::new();
        locked?;
        // Another writer's commit holds it: time the wait (only then).
        let mut guard = pager.commit_lock.try_lock().unwrap_or_else(|| {
            let start = std::time::Instant::now();
            let g = pager.commit_lock.lock();
            timers::add_since(Timer::LockWait, start);
            g
        });
        // The newest commit put in order, which may not be installed yet
        // (P12): this one goes on top of it.
        let committed = guard.header;
        let tid = {
            let last = |p: Pgno| pager.page_tid(p);
            let table_of = |p: Pgno| st.table_of(p);
            let check = CommitCheck {
                reads: &reads,
                writes: &writes,
                committed: committed.fcc,
                last_commit: &last,
                table_of: &table_of,
            };
            pager.locks.commit_turn(&st.txn, &check)?
        };
        if tid <= committed.fcc || (tid != st.txn.tid && pager.format.needs_base()) {
            // TIDs must grow; a format that stamps pages when they are put
            // needs the TID from the start.
            return Err(Error::Internal(format!(
                "{}: protocol {} gave TID {tid} (begun as {}, committed {})",
                pager.file_name(),
                pager.protocol,
                st.txn.tid,
                committed.fcc
            )));
        }
        st.txn.tid = tid;
        let plan = pager.alloc.lock().plan(&st.allocated, &st.freed);
        st.orig_header = committed;
        st.header = Header {
            fcc: tid,
            page_count: plan.count,
            freelist_head: 0,
            freelist_count: plan.free_count,
            clean_close: false,
            journal_mode: pager.cfg.spec.code,
            ..committed
        };
        st.pgnos = writes;
        let seq = match pager.sequence_commit(&mut guard, st) {
            Ok(seq) => seq,
            Err(e) => {
                drop(guard);
                pager.undo_storage(st);
                return Err(e);
            }
        };
        let (id, allocated, freed) = (st.txn.id, &st.allocated, &st.freed);
        pager.alloc.lock().apply(id, tid, &plan, allocated, freed);
        // Its successor in the protocol's order may go on (2VTO).
        pager.locks.sequenced(&st.txn);
        drop(guard);
        pager.finish_commit(st, seq)?;
        Ok(Some(tid))
    }

    /// Roll back: drop the private pages and undo any spill. A spill that
    /// failed half-way wrote pages it did not record as spilled, so any
    /// transaction that reached the journal is undone.
    pub fn rollback(mut self) -> Result<()> {
        let undone = self.st.exclusive;
        if undone {
            self.pager.undo_storage(&self.st);
        }
        self.pager.end_txn(&mut self.st, None);
        self.pager.check_poison()
    }
}

/// The committed state as of a snapshot, for readers. `R` is how it holds
/// the pager (see [`WritePages`]).
pub struct ReadPages<R: Deref<Target = Pager> = Arc<Pager>> {
    /// The pager.
    pub pager: R,
    /// The header of the snapshot (its FCC and page count).
    pub snap: Header,
    /// The reader's id in the protocol's page lock table (0: it takes no
    /// page locks and reads `snap`).
    pub reader: u64,
}

impl<R: Deref<Target = Pager>> ReadPages<R> {
    /// A read transaction's view from the header [`Pager::begin_read`]
    /// registered; it locks pages as it reads them if the protocol asks
    /// ([`cc::Profile::reader_locks`]). End it with [`Pager::end_read`]
    /// and [`Pager::end_reader`].
    pub fn new(pager: R, snap: Header) -> Self {
        let reader = if pager.profile.reader_locks {
            cc::next_txn_id()
        } else {
            0
        };
        ReadPages {
            pager,
            snap,
            reader,
        }
    }

    /// The committed state to read `pgno` in: the snapshot, or, for a
    /// reader that locks pages, the newest once the page is locked (no
    /// commit can change it while the lock is held).
    fn at(&self, pgno: Pgno) -> Result<Header> {
        if self.reader == 0 {
            return Ok(self.snap);
        }
        let p = &self.pager;
        p.locks.reader_page(self.reader, pgno, p.cfg.busy_timeout)?;
        Ok(p.header())
    }
}

impl<R: Deref<Target = Pager>> PageRead for ReadPages<R> {
    fn page_size(&self) -> usize {
        self.pager.db.page_size
    }

    fn format(&self) -> &dyn NodeFormat {
        &*self.pager.format
    }

    fn page_count(&self) -> u32 {
        self.snap.page_count
    }

    fn node(&self, pgno: Pgno, order: &dyn KeyOrder) -> Result<Arc<Node>> {
        let h = self.at(pgno)?;
        self.pager.committed_node(pgno, Some(&h), order)
    }

    fn visit_node(&self, pgno: Pgno, order: &dyn KeyOrder, f: &mut dyn FnMut(&Node)) -> Result<()> {
        if self.reader == 0 {
            return self.pager.visit_committed_node(pgno, &self.snap, order, f);
        }
        let h = self.at(pgno)?;
        self.pager.visit_committed_node(pgno, &h, order, f)
    }

    fn raw(&self, pgno: Pgno) -> Result<Arc<[u8]>> {
        let h = self.at(pgno)?;
        let raw = self.pager.committed_raw(pgno, Some(&h))?;
        if pgno >= 2 {
            self.pager
                .check_raw(pgno, &raw, &self.pager.decode_ctx(h.fcc, &BYTEWISE))?;
        }
        Ok(raw)
    }

    fn free_pages(&self) -> Option<Vec<Pgno>> {
        self.pager.committed_free_list()
    }

    fn verify_page(&self, pgno: Pgno, role: PageRole, order: &dyn KeyOrder) -> Result<()> {
        // Page 1 from storage: a mode may rewrite its fields there without
        // the pager's copy (DASH's tail).
        let h = self.at(pgno)?;
        let raw = if role == PageRole::Header {
            self.pager.read_committed(pgno, h.fcc)?
        } else {
            self.pager.committed_raw(pgno, Some(&h))?
        };
        let ctx = self.pager.decode_ctx(h.fcc, order);
        let file = self.pager.file_name();
        let f = &self.pager.format;
        match role {
            PageRole::Header => verify_page1(&raw, &file).and_then(|()| {
                if crate::journal::registry::page1_fields_intact(&raw) {
                    Ok(())
                } else {
                    Err(Error::corrupt(
                        &file,
                        1,
                        "header page: the mode's fields (bytes 60..84) are damaged",
                    ))
                }
            }),
            PageRole::Tree => f.verify_tree(pgno, &raw, &ctx),
            PageRole::Free => f.check_free(pgno, &raw, &ctx),
        }
        .map_err(|e| self.pager.named(e))
    }
}
