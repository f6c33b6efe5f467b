//! The mode registry: every journal mode described once. The pager and
//! the API act on a [`ModeSpec`]; they never name a mode. Adding a mode is
//! its module plus one [`JournalMode`] variant and one [`ModeSpec`] entry
//! in this file (ARCHITECTURE.md, "Adding a mode").

use super::{
    shadow, wal, CommitProtocol, DashJournal, DhlJournal, Journal, ModeOptions, OffJournal,
    PreOpenCtx, RecoverCtx, Recovery, RollbackJournal, RollbackKind, TestFaults, WalJournal,
    WalOptions,
};
use crate::base::{Durability, Error, Result, Synchronous};
use crate::btree::{SplitPolicy, TreeConfig};
use crate::cc::{Locking, Protocol};
use crate::node::{DhlFormat, IpsFormat, MvbtFormat, NodeFormat, SlottedFormat};
use crate::storage::{with_suffix, VfsFile};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The recovery scheme of a database, selected per database at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JournalMode {
    /// No journal: in-memory rollback only; a crash during commit may
    /// leave a torn state (SQLite's OFF).
    Off,
    /// Rollback journal, deleted at commit (SQLite's DELETE).
    Delete,
    /// Rollback journal, truncated to zero at commit (SQLite's TRUNCATE).
    Truncate,
    /// Rollback journal whose header is zeroed at commit (SQLite's PERSIST).
    Persist,
    /// Write-ahead log `<db>-wal` with checkpoints (SQLite's WAL); options
    /// `wal_autocheckpoint`, `journal_size_limit`, `preallocate` (WAL_OPT),
    /// `delayed_checkpoint`.
    Wal,
    /// DASH database shadowing: a shadow file holds the state before the
    /// last commit; commit = Version Update, Aggregate Update, Atomic
    /// Exchange, Version Reset (three fdatasyncs).
    Shadow,
    /// DASH with the Exclusive Connection optimization: no sync after the
    /// Version Update, Header Reset at close (two fdatasyncs).
    ShadowX,
    /// Doubleheader logging, traditional commit: pages, sync, commit mark,
    /// sync (\[DHL\] §III-C). Option `embed=0|1` (default 1).
    DhlTc,
    /// Doubleheader logging, counting commit: pages and the commit mark
    /// with the transaction size under one sync (\[DHL\] §III-D).
    DhlCc,
    /// In-Page Shadowing (\[IPS\] §3): append-only records with two
    /// versions of the page metadata; DHL's counting commit with page 1 as
    /// the mark (option `embed=1`, beyond the paper: the commit record in
    /// the last page instead).
    Ips,
    /// Multi-version B-tree (\[LSM\] §3.2): cells with life spans, the
    /// original MVBT split (version split plus key split, the old node
    /// retired in place: four dirty nodes) and sibling redistribution;
    /// DHL's counting commit with page 1 as the mark. Options `embed`
    /// (default 0), `commit=counting|ordered`, `reserve`.
    Mvbt,
    /// LS-MVBT (\[LSM\] §4-5): the multi-version B-tree with Lazy Split
    /// (three dirty nodes), Reserved Buffer Space, Metadata Embedding,
    /// sibling redistribution disabled and Lazy Garbage Collection; the
    /// counting commit with the record in the last node written. Options
    /// `embed` (default 1), `commit=counting|ordered`, `reserve`.
    LsMvbt,
}

/// Where a mode keeps the free list between commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeListPolicy {
    /// Trunk pages chained from the header, rewritten at commit.
    Trunks,
    /// In memory during a session, in trunk pages only at a clean close,
    /// rebuilt by walking the trees after a crash. In-page schemes need
    /// this: a trunk rewritten in place may be a page the previous
    /// committed state still uses.
    Volatile,
}

/// What a pre-open cleanup returns: what it recovered and a lock to hold
/// until the database's own lock is taken.
pub type PreOpenCleanup = (Recovery, Option<Arc<dyn VfsFile>>);

/// How a leftover file of a mode is cleaned up when the database is opened
/// in another mode (a hot rollback journal is rolled back, a WAL is
/// checkpointed, a DASH shadow is settled), so that switching modes never
/// loses a commit.
pub enum Cleanup {
    /// Before the database file is opened. May return a lock that is held
    /// until the database's own lock is taken.
    PreOpen(fn(&PreOpenCtx<'_>, Synchronous) -> Result<PreOpenCleanup>),
    /// With the database's lock held, before the mode's own recovery.
    Recover(fn(&RecoverCtx<'_>, Synchronous) -> Result<Recovery>),
}

/// A kind of file a mode leaves next to the database.
pub struct Leftover {
    /// What it is, for messages and docs.
    pub what: &'static str,
    /// How to clean it up from another mode.
    pub cleanup: Cleanup,
}

/// Everything the engine needs to know about one mode.
pub struct ModeSpec {
    /// The mode's identity in the API.
    pub mode: JournalMode,
    /// Canonical lower-case name.
    pub name: &'static str,
    /// Code stored in the header page (byte 48).
    pub code: u8,
    /// Where the scheme comes from.
    pub origin: &'static str,
    /// The node format family of its tree pages (a mode's options may pick
    /// a variant of the same family: [`Journal::node_format`]). Files in
    /// another family cannot be opened in this mode.
    pub node_format: fn() -> Arc<dyn NodeFormat>,
    /// Build the journal; rejects options the mode does not know.
    pub make_journal: fn(Synchronous, TestFaults, &ModeOptions) -> Result<Box<dyn Journal>>,
    /// The lock tables its one-writer protocol uses.
    pub locking: Locking,
    /// Concurrency protocols allowed with this mode; the first is the
    /// default.
    pub protocols: &'static [Protocol],
    /// What survives power loss at each synchronous level, indexed by
    /// `Synchronous` (off, normal, full, extra).
    pub durability: [Durability; 4],
    /// Tree maintenance defaults.
    pub tree: TreeConfig,
    /// Where the free list lives.
    pub free_list: FreeListPolicy,
    /// Files it may leave behind; cleaned up when another mode opens the
    /// database.
    pub leftovers: &'static [&'static Leftover],
    /// Whether a whole page 1 holds intact fixed fields of this mode in
    /// bytes 60..84 (outside page 1's checksum; each mode checksums its
    /// own). `None` for modes that keep none there (the bytes stay zero).
    pub page1_fields: Option<fn(&[u8]) -> bool>,
}

impl ModeSpec {
    /// Durability at a synchronous level.
    pub fn durability(&self, sync: Synchronous) -> Durability {
        self.durability[sync as usize]
    }
}

use Durability::{Atomic, Durable, None as NoGuarantee};

/// The usual table: nothing without syncs, the last commits may be lost at
/// NORMAL, every acknowledged commit at FULL and EXTRA.
const SYNC_BY_LEVEL: [Durability; 4] = [NoGuarantee, Atomic, Durable, Durable];

const ONE_WRITER: &[Protocol] = &[Protocol::Sqlite];

/// The in-page modes whose versions carry their writer's TID in every
/// page, so readers find their snapshot beside a newer version: 2VTO
/// (\[IPS\] §4) and its comparison variants.
const TWO_VERSION: &[Protocol] = &[
    Protocol::Sqlite,
    Protocol::TwoVto,
    Protocol::TwoVtoFuw,
    Protocol::TwoVtoNs,
];

/// The modes that write pages in place with undo (or none) and no page
/// versions of their own: page locks keep readers off a committing
/// writer's pages.
const PAGE_LOCKS: &[Protocol] = &[
    Protocol::Sqlite,
    Protocol::PageLock,
    Protocol::PageLockRange,
];

/// WAL's: readers see snapshots, so optimistic writers can run too.
const WAL_PROTOCOLS: &[Protocol] = &[
    Protocol::Sqlite,
    Protocol::BeginConcurrent,
    Protocol::PageLock,
    Protocol::PageLockRange,
];

/// A hot rollback journal (`-journal`).
pub static ROLLBACK_JOURNAL: Leftover = Leftover {
    what: "rollback journal (-journal)",
    cleanup: Cleanup::Recover(|ctx, sync| {
        if !ctx.vfs.exists(&with_suffix(ctx.path, "-journal"))? {
            return Ok(Recovery::default());
        }
        RollbackJournal::new(RollbackKind::Delete, sync, TestFaults::default()).recover(ctx)
    }),
};

/// A write-ahead log (`-wal`): its commits are checkpointed, not lost.
pub static WAL_LOG: Leftover = Leftover {
    what: "write-ahead log (-wal)",
    cleanup: Cleanup::Recover(|ctx, sync| {
        if !ctx.vfs.exists(&with_suffix(ctx.path, "-wal"))? {
            return Ok(Recovery::default());
        }
        wal::checkpoint_leftover(ctx, sync)
    }),
};

/// DASH's shadow, temporary and lock files.
pub static DASH_FILES: Leftover = Leftover {
    what: "DASH shadow, temporary and lock files",
    cleanup: Cleanup::PreOpen(shadow::leave_shadow_mode),
};

fn rollback(
    kind: RollbackKind,
    mode: JournalMode,
    sync: Synchronous,
    faults: TestFaults,
    opts: &ModeOptions,
) -> Result<Box<dyn Journal>> {
    opts.only(mode, &[])?;
    Ok(Box::new(RollbackJournal::new(kind, sync, faults)))
}

fn dhl(
    protocol: CommitProtocol,
    sync: Synchronous,
    opts: &ModeOptions,
    mode: JournalMode,
) -> Result<Box<dyn Journal>> {
    opts.only(mode, &["embed"])?;
    Ok(Box::new(DhlJournal::new(
        protocol,
        sync,
        opts.flag_or("embed", true)?,
    )))
}

/// The two multi-version B-tree modes: DHL's journal over the MVBT page.
fn mvbt(
    mode: JournalMode,
    sync: Synchronous,
    opts: &ModeOptions,
    lazy: bool,
) -> Result<Box<dyn Journal>> {
    opts.only(mode, &["embed", "commit", "reserve"])?;
    let protocol = match opts.get("commit").unwrap_or("counting") {
        "counting" => CommitProtocol::Counting,
        "ordered" => CommitProtocol::Traditional,
        v => {
            return Err(Error::InvalidArgument(format!(
                "bad value {v:?} for option commit (counting or ordered)"
            )))
        }
    };
    let format = if opts.flag_or("reserve", lazy)? {
        MvbtFormat::LAZY
    } else {
        MvbtFormat::MVBT
    };
    Ok(Box::new(DhlJournal::with_format(
        mode,
        protocol,
        sync,
        opts.flag_or("embed", lazy)?,
        format,
    )))
}

fn dash(
    exclusive: bool,
    sync: Synchronous,
    opts: &ModeOptions,
    mode: JournalMode,
) -> Result<Box<dyn Journal>> {
    opts.only(mode, &[])?;
    Ok(Box::new(DashJournal::new(exclusive, sync)))
}

/// What most modes share: the slotted format, SQLite's rollback locks and
/// one writer, durable at FULL, the tree's defaults, trunk pages, no
/// leftovers. Each entry below states only what differs (its identity
/// fields are always its own).
const SLOTTED: ModeSpec = ModeSpec {
    mode: JournalMode::Off,
    name: "",
    code: u8::MAX,
    origin: "",
    node_format: || Arc::new(SlottedFormat),
    make_journal: |_, _, _| Err(Error::Internal("a mode without a journal".into())),
    locking: Locking::Rollback,
    protocols: ONE_WRITER,
    durability: SYNC_BY_LEVEL,
    tree: TreeConfig::DEFAULT,
    free_list: FreeListPolicy::Trunks,
    leftovers: &[],
    page1_fields: None,
};

/// Every implemented mode, in [`JournalMode::ALL`] order.
pub static REGISTRY: &[ModeSpec] = &[
    ModeSpec {
        mode: JournalMode::Off,
        name: "off",
        code: 0,
        origin: "SQLite journal_mode=OFF",
        make_journal: |sync, _, opts| {
            opts.only(JournalMode::Off, &["embed"])?;
            Ok(Box::new(OffJournal::new(
                sync,
                opts.flag_or("embed", false)?,
            )))
        },
        durability: [NoGuarantee; 4],
        protocols: PAGE_LOCKS,
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::Delete,
        name: "delete",
        code: 1,
        origin: "SQLite journal_mode=DELETE",
        make_journal: |s, f, o| rollback(RollbackKind::Delete, JournalMode::Delete, s, f, o),
        // SQLite's FULL does not sync the directory after unlinking the
        // journal, so the last commit may be rolled back; EXTRA does.
        durability: [NoGuarantee, Atomic, Atomic, Durable],
        leftovers: &[&ROLLBACK_JOURNAL],
        protocols: PAGE_LOCKS,
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::Truncate,
        name: "truncate",
        code: 2,
        origin: "SQLite journal_mode=TRUNCATE",
        make_journal: |s, f, o| rollback(RollbackKind::Truncate, JournalMode::Truncate, s, f, o),
        leftovers: &[&ROLLBACK_JOURNAL],
        protocols: PAGE_LOCKS,
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::Persist,
        name: "persist",
        code: 3,
        origin: "SQLite journal_mode=PERSIST",
        make_journal: |s, f, o| rollback(RollbackKind::Persist, JournalMode::Persist, s, f, o),
        leftovers: &[&ROLLBACK_JOURNAL],
        protocols: PAGE_LOCKS,
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::Wal,
        name: "wal",
        code: 4,
        origin: "SQLite journal_mode=WAL",
        make_journal: |sync, faults, opts| {
            Ok(Box::new(WalJournal::new(
                sync,
                faults,
                WalOptions::parse(opts)?,
            )))
        },
        locking: Locking::Wal,
        protocols: WAL_PROTOCOLS,
        leftovers: &[&WAL_LOG],
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::Shadow,
        name: "shadow",
        code: 6,
        origin: "DASH (database shadowing), USENIX ATC 2015",
        make_journal: |sync, _, opts| dash(false, sync, opts, JournalMode::Shadow),
        leftovers: &[&DASH_FILES],
        page1_fields: Some(shadow::page1_fields_intact),
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::ShadowX,
        name: "shadow-x",
        code: 7,
        origin: "DASH with the Exclusive Connection optimization",
        make_journal: |sync, _, opts| dash(true, sync, opts, JournalMode::ShadowX),
        // SHADOW-X keeps the Version Reset sync at NORMAL: without it the
        // next unsynced Version Update could not be told apart.
        durability: [NoGuarantee, Durable, Durable, Durable],
        leftovers: &[&DASH_FILES],
        page1_fields: Some(shadow::page1_fields_intact),
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::DhlTc,
        name: "dhl-tc",
        code: 8,
        origin: "Doubleheader logging, traditional commit (DHL §III-C)",
        node_format: || Arc::new(DhlFormat),
        make_journal: |sync, _, opts| {
            dhl(CommitProtocol::Traditional, sync, opts, JournalMode::DhlTc)
        },
        // The commit sync cannot be dropped: writer T+1 reuses space only
        // T's commit made free.
        durability: [NoGuarantee, Durable, Durable, Durable],
        free_list: FreeListPolicy::Volatile,
        page1_fields: Some(super::dhl::page1_fields_intact),
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::DhlCc,
        name: "dhl-cc",
        code: 9,
        origin: "Doubleheader logging, counting commit (DHL §III-D)",
        node_format: || Arc::new(DhlFormat),
        make_journal: |sync, _, opts| dhl(CommitProtocol::Counting, sync, opts, JournalMode::DhlCc),
        // DHL+2VTO (\[IPS\] §4.1, §5): the two slot headers at fixed
        // places with interleaved offset rows never move, so readers find
        // their version while a writer adds the other.
        protocols: TWO_VERSION,
        durability: [NoGuarantee, Durable, Durable, Durable],
        free_list: FreeListPolicy::Volatile,
        page1_fields: Some(super::dhl::page1_fields_intact),
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::Ips,
        name: "ips",
        code: 11,
        origin: "In-Page Shadowing with the counting commit (IPS, PVLDB 2022, §3)",
        node_format: || Arc::new(IpsFormat),
        protocols: TWO_VERSION,
        make_journal: |sync, _, opts| {
            opts.only(JournalMode::Ips, &["embed"])?;
            Ok(Box::new(DhlJournal::with_format(
                JournalMode::Ips,
                CommitProtocol::Counting,
                sync,
                opts.flag_or("embed", false)?,
                IpsFormat,
            )))
        },
        // As DHL: writer T+1 appends over the version T's commit made the
        // base, so the commit sync cannot be dropped.
        durability: [NoGuarantee, Durable, Durable, Durable],
        // IPS postpones rebalancing until a page overflows (§5.2.1).
        // Obsolete records are collected when a page overflows, by a
        // compacted copy to a fresh page (lazy GC, §3.2.2). A split keeps
        // the left half in place when it fits there (tombstones only; its
        // garbage goes at the page's next overflow) instead of the paper's
        // two fresh pages (Fig. 3): within one transaction a split page
        // would otherwise leave a free page behind per split.
        tree: TreeConfig {
            merge: false,
            redistribute: false,
            spread: false,
            split: SplitPolicy::KeepLeft,
            relocate_full: true,
        },
        free_list: FreeListPolicy::Volatile,
        page1_fields: Some(super::dhl::page1_fields_intact),
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::Mvbt,
        name: "mvbt",
        code: 12,
        origin: "Multi-version B-tree, original split (LS-MVBT, FAST 2014, §3.2)",
        node_format: || Arc::new(MvbtFormat::MVBT),
        make_journal: |sync, _, opts| mvbt(JournalMode::Mvbt, sync, opts, false),
        // Readers read their snapshot's cells from the pages: they never
        // wait for the writer, nor it for them.
        locking: Locking::Wal,
        // As DHL: writer T+1 writes over the version T's commit made the
        // base, so the commit sync cannot be dropped.
        durability: [NoGuarantee, Durable, Durable, Durable],
        // SQLite's B-tree with versions: an overflowing node first spreads
        // into its siblings (\[LSM\] §5.3, on here), underflowing ones
        // merge or redistribute; a split copies both halves to new nodes
        // and retires the old one (Fig. 1).
        tree: TreeConfig {
            merge: true,
            redistribute: true,
            spread: true,
            split: SplitPolicy::CopyBoth,
            relocate_full: false,
        },
        free_list: FreeListPolicy::Volatile,
        page1_fields: Some(super::dhl::page1_fields_intact),
        ..SLOTTED
    },
    ModeSpec {
        mode: JournalMode::LsMvbt,
        name: "ls-mvbt",
        code: 13,
        origin: "Multi-version B-tree with lazy split (LS-MVBT, FAST 2014, §4-5)",
        node_format: || Arc::new(MvbtFormat::LAZY),
        make_journal: |sync, _, opts| mvbt(JournalMode::LsMvbt, sync, opts, true),
        locking: Locking::Wal,
        durability: [NoGuarantee, Durable, Durable, Durable],
        // Lazy split keeps the lower half in place (three dirty nodes);
        // no sibling redistribution on overflow or underflow (\[LSM\]
        // §5.3); only empty leaves go (dropped, or merged as a right child).
        tree: TreeConfig {
            merge: false,
            redistribute: false,
            spread: false,
            split: SplitPolicy::KeepLeft,
            relocate_full: false,
        },
        free_list: FreeListPolicy::Volatile,
        page1_fields: Some(super::dhl::page1_fields_intact),
        ..SLOTTED
    },
];

/// Whether bytes 60..84 of page 1 are intact: zero, or the valid fixed
/// fields of some mode (a file may have been switched between modes).
pub fn page1_fields_intact(page1: &[u8]) -> bool {
    use crate::base::header::{MODE_FIELDS_AT, MODE_FIELDS_LEN};
    let Some(fields) = page1.get(MODE_FIELDS_AT..MODE_FIELDS_AT + MODE_FIELDS_LEN) else {
        return false;
    };
    fields.iter().all(|&b| b == 0)
        || REGISTRY
            .iter()
            .filter_map(|s| s.page1_fields)
            .any(|ok| ok(page1))
}

/// The mode whose header code is `code`.
pub fn by_code(code: u8) -> Option<&'static ModeSpec> {
    REGISTRY.iter().find(|s| s.code == code)
}

/// Leftover kinds of other modes that `spec` does not handle itself, each
/// once, in registry order.
pub fn foreign_leftovers(spec: &ModeSpec) -> Vec<&'static Leftover> {
    let mut out: Vec<&'static Leftover> = Vec::new();
    for s in REGISTRY {
        for &l in s.leftovers {
            let own = spec.leftovers.iter().any(|&m| std::ptr::eq(m, l));
            if !own && !out.iter().any(|&o| std::ptr::eq(o, l)) {
                out.push(l);
            }
        }
    }
    out
}

impl JournalMode {
    /// Every implemented mode. The crash explorer and the benchmark
    /// iterate this list; it is [`REGISTRY`]'s order (checked by a test).
    pub const ALL: &'static [JournalMode] = &[
        JournalMode::Off,
        JournalMode::Delete,
        JournalMode::Truncate,
        JournalMode::Persist,
        JournalMode::Wal,
        JournalMode::Shadow,
        JournalMode::ShadowX,
        JournalMode::DhlTc,
        JournalMode::DhlCc,
        JournalMode::Ips,
        JournalMode::Mvbt,
        JournalMode::LsMvbt,
    ];

    /// The registry entry of this mode.
    pub fn spec(self) -> &'static ModeSpec {
        REGISTRY
            .iter()
            .find(|s| s.mode == self)
            .expect("every JournalMode has a registry entry (tested)")
    }

    /// Canonical lower-case name.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Code stored in the header page.
    pub fn code(self) -> u8 {
        self.spec().code
    }

    /// Inverse of [`JournalMode::code`].
    pub fn from_code(c: u8) -> Option<JournalMode> {
        by_code(c).map(|s| s.mode)
    }

    /// What survives power loss in this mode at this synchronous level.
    pub fn durability(self, sync: Synchronous) -> Durability {
        self.spec().durability(sync)
    }

    /// Create the mode's journal object. `opts` are the mode-specific
    /// options (`wal_autocheckpoint=100`, ...); a mode rejects the ones it
    /// does not know.
    pub fn make_journal(
        self,
        sync: Synchronous,
        faults: TestFaults,
        opts: &ModeOptions,
    ) -> Result<Box<dyn Journal>> {
        (self.spec().make_journal)(sync, faults, opts)
    }

    /// The node format family the mode uses.
    pub fn node_format(self) -> Arc<dyn NodeFormat> {
        (self.spec().node_format)()
    }
}

impl Default for JournalMode {
    /// PERSIST, as the engine has always defaulted to (SQLite's default is
    /// DELETE).
    fn default() -> Self {
        JournalMode::Persist
    }
}

impl fmt::Display for JournalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for JournalMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.to_ascii_lowercase();
        JournalMode::ALL
            .iter()
            .copied()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = JournalMode::ALL.iter().map(|m| m.name()).collect();
                Error::InvalidArgument(format!(
                    "unknown journal mode {s:?} (known: {})",
                    names.join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_matches_the_mode_list() {
        let modes: Vec<JournalMode> = REGISTRY.iter().map(|s| s.mode).collect();
        assert_eq!(modes, JournalMode::ALL);
        for (i, a) in REGISTRY.iter().enumerate() {
            for b in &REGISTRY[i + 1..] {
                assert_ne!(a.code, b.code, "{} and {} share a code", a.name, b.name);
                assert_ne!(a.name, b.name);
            }
            assert_eq!(a.name.parse::<JournalMode>().unwrap(), a.mode);
            assert!(!a.protocols.is_empty(), "{} allows no protocol", a.name);
            assert_eq!(a.durability[Synchronous::Off as usize], Durability::None);
        }
    }

    #[test]
    fn foreign_leftovers_skip_the_modes_own() {
        let names = |m: JournalMode| -> Vec<&str> {
            foreign_leftovers(m.spec()).iter().map(|l| l.what).collect()
        };
        assert_eq!(names(JournalMode::Persist), [WAL_LOG.what, DASH_FILES.what]);
        assert_eq!(
            names(JournalMode::Wal),
            [ROLLBACK_JOURNAL.what, DASH_FILES.what]
        );
        assert_eq!(
            names(JournalMode::DhlCc),
            [ROLLBACK_JOURNAL.what, WAL_LOG.what, DASH_FILES.what]
        );
    }
}
