//! Damaged files: mutate a valid database of any journal mode, together
//! with its auxiliary file in a crash state (hot rollback journal, WAL with
//! committed frames and a torn uncommitted tail, DASH shadow file in the
//! middle of the commit protocol; DHL pages holding two versions with the
//! clean-close flag cleared), and check that opening, recovering, reading,
//! scanning, checking and writing return typed errors only: no panic, no
//! hang, no unbounded allocation. Shared by the bounded property test
//! (`tests/damaged_props.rs`) and the cargo-fuzz target
//! (`fuzz/fuzz_targets/damaged_file.rs`).

use super::explore::DB_PATH;
use super::workload::{record, CommitMark, WorkloadConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use twinpage::journal::wal::format::{FRAME_HEADER_SIZE, WAL_HEADER_SIZE};
use twinpage::journal::JOURNAL_HEADER_SIZE;
use twinpage::storage::{with_suffix, MemVfs, Vfs};
use twinpage::{Db, Direction, Error, JournalMode, Options};
use twinpage_sim::sim::{CrashSpec, Keep, PersistenceModel, SimLog, SimOp, SimVfs};

/// Seeds per mode: one per page size of [`seed_page_sizes`].
pub const SEEDS_PER_MODE: usize = 2;

/// The page sizes `mode` is seeded with. DHL pages carry two slot
/// headers (IPS two metadata versions), so their largest key is below what the workload's longest key
/// prefix needs on 512-byte pages: DHL starts at 1024.
pub fn seed_page_sizes(mode: JournalMode) -> [usize; SEEDS_PER_MODE] {
    match mode {
        JournalMode::DhlTc
        | JournalMode::DhlCc
        | JournalMode::Ips
        | JournalMode::Mvbt
        | JournalMode::LsMvbt => [1024, 2048],
        _ => [512, 1024],
    }
}

/// Which file a mutation damages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The database file.
    Db,
    /// The mode's auxiliary file: rollback journal (hot), WAL or shadow
    /// file. A no-op for modes without one (`off`, `dhl-*`).
    Aux,
}

/// One way to damage a file. Offsets and page numbers are taken modulo
/// the file's size, so any value is meaningful. "Page" means a unit of the
/// target file: a database or shadow page, a WAL frame (header and
/// image), or a rollback-journal record (page number, image, checksum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Flip one bit.
    FlipBit {
        /// File.
        target: Target,
        /// Byte offset.
        offset: u64,
        /// Bit 0..8.
        bit: u8,
    },
    /// Overwrite bytes.
    Bytes {
        /// File.
        target: Target,
        /// Byte offset.
        offset: u64,
        /// New bytes.
        bytes: Vec<u8>,
    },
    /// Cut the file to a length (modulo its length + 1).
    Truncate {
        /// File.
        target: Target,
        /// New length.
        len: u64,
    },
    /// Zero a whole page (frame, record).
    ZeroPage {
        /// File.
        target: Target,
        /// Page index (0-based).
        page: u64,
    },
    /// Swap two pages (frames, records).
    SwapPages {
        /// File.
        target: Target,
        /// Page index (0-based).
        a: u64,
        /// Page index (0-based).
        b: u64,
    },
    /// Copy one page (frame, record) over another.
    CopyPage {
        /// File.
        target: Target,
        /// Source page index.
        from: u64,
        /// Destination page index.
        to: u64,
    },
    /// Make a page image point to itself: an interior node's right child,
    /// an overflow or free-list page's next pointer.
    SelfPointer {
        /// File.
        target: Target,
        /// Page index (0-based).
        page: u64,
    },
    /// Make a u32 page reference inside a page image point somewhere else.
    Repoint {
        /// File.
        target: Target,
        /// Page index (0-based).
        page: u64,
        /// Byte offset in the page image (aligned down to 4).
        offset: u64,
        /// New page number.
        to: u32,
    },
}

impl Mutation {
    /// The file the mutation damages.
    pub fn target(&self) -> Target {
        match self {
            Mutation::FlipBit { target, .. }
            | Mutation::Bytes { target, .. }
            | Mutation::Truncate { target, .. }
            | Mutation::ZeroPage { target, .. }
            | Mutation::SwapPages { target, .. }
            | Mutation::CopyPage { target, .. }
            | Mutation::SelfPointer { target, .. }
            | Mutation::Repoint { target, .. } => *target,
        }
    }
}

/// A valid database of one mode, with its auxiliary file in a crash
/// state: the starting point of mutations.
#[derive(Debug, Clone)]
pub struct Seed {
    /// Mode to open it with.
    pub mode: JournalMode,
    /// Page size.
    pub page_size: usize,
    /// Database file.
    pub db: Vec<u8>,
    /// The mode's auxiliary file ([`aux_suffix`]) as the crash left it.
    pub aux: Option<Vec<u8>>,
    /// Other files of the crash image (suffix, contents), written as they
    /// are (never mutated).
    pub others: Vec<(String, Vec<u8>)>,
    /// The crash state, for messages.
    pub state: String,
}

impl Seed {
    /// `mode/page size: state`, for messages.
    pub fn name(&self) -> String {
        format!("{}/{}: {}", self.mode, self.page_size, self.state)
    }
}

/// Suffix of `mode`'s auxiliary file, if it has one.
pub fn aux_suffix(mode: JournalMode) -> Option<&'static str> {
    match mode {
        JournalMode::Delete | JournalMode::Truncate | JournalMode::Persist => Some("-journal"),
        JournalMode::Wal => Some("-wal"),
        JournalMode::Shadow | JournalMode::ShadowX => {
            Some(twinpage::journal::shadow::SHADOW_SUFFIX)
        }
        JournalMode::Off
        | JournalMode::DhlTc
        | JournalMode::DhlCc
        | JournalMode::Ips
        | JournalMode::Mvbt
        | JournalMode::LsMvbt => None,
    }
}

/// How a file divides into pages: units of `stride` bytes from `base`,
/// the page image at `image` inside a unit, the page number (big-endian
/// u32) at `pgno` inside a unit if the unit records it.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    base: usize,
    stride: usize,
    image: usize,
    pgno: Option<usize>,
}

fn geometry(mode: JournalMode, target: Target, ps: usize) -> Geometry {
    let db = Geometry {
        base: 0,
        stride: ps,
        image: 0,
        pgno: None,
    };
    match (target, mode) {
        (Target::Db, _) => db,
        (Target::Aux, JournalMode::Delete | JournalMode::Truncate | JournalMode::Persist) => {
            Geometry {
                base: JOURNAL_HEADER_SIZE as usize,
                stride: ps + 8,
                image: 4,
                pgno: Some(0),
            }
        }
        (Target::Aux, JournalMode::Wal) => Geometry {
            base: WAL_HEADER_SIZE as usize,
            stride: FRAME_HEADER_SIZE + ps,
            image: FRAME_HEADER_SIZE,
            pgno: Some(0),
        },
        (Target::Aux, _) => db,
    }
}

impl Geometry {
    fn units(&self, len: usize) -> usize {
        len.saturating_sub(self.base) / self.stride
    }

    fn unit(&self, k: usize) -> std::ops::Range<usize> {
        let s = self.base + k * self.stride;
        s..s + self.stride
    }
}

/// The options the seeds are built and opened with.
pub fn options(mode: JournalMode, page_size: usize, vfs: Arc<dyn Vfs>) -> Options {
    Options {
        journal_mode: mode,
        page_size,
        cache_size: 16 * page_size,
        busy_timeout: std::time::Duration::from_millis(10),
        vfs: Some(vfs),
        ..Options::default()
    }
}

/// The operations of commit `m` (from `commit()` to its return).
fn window(m: &CommitMark, log: &SimLog) -> std::ops::Range<usize> {
    m.start_op.min(log.len())..m.ack_op.min(log.len())
}

/// Indices of the writes to `path` in `w`, with offset and length.
fn writes_to(log: &SimLog, w: std::ops::Range<usize>, path: &Path) -> Vec<(usize, u64, u64)> {
    w.filter_map(|i| match log.op(i) {
        SimOp::Write {
            path: p,
            offset,
            len,
        } if p == path => Some((i, *offset, *len)),
        _ => None,
    })
    .collect()
}

/// A crash state of commit `m` typical of `mode`, or `None` if this
/// commit has none (too small, say).
fn crash_state(
    mode: JournalMode,
    ps: usize,
    log: &SimLog,
    m: &CommitMark,
) -> Option<(CrashSpec, String)> {
    let db = PathBuf::from(DB_PATH);
    let w = window(m, log);
    let strict = |cut: usize, what: String| Some((log.strict_spec(cut), what));
    match mode {
        // A consistent file that was not closed: `off` has no crash state
        // it can recover from.
        JournalMode::Off => strict(w.end, "after a commit, not closed".into()),
        JournalMode::Delete | JournalMode::Truncate | JournalMode::Persist => {
            // The last database write that follows a journal sync: the
            // journal is hot and database pages were overwritten.
            let jpath = with_suffix(&db, "-journal");
            let mut synced = false;
            let mut cut = None;
            for i in w {
                match log.op(i) {
                    SimOp::SyncData { path } | SimOp::SyncAll { path } if *path == jpath => {
                        synced = true
                    }
                    SimOp::Write { path, .. } if synced && *path == db => cut = Some(i + 1),
                    _ => {}
                }
            }
            strict(cut?, "hot journal, database pages overwritten".into())
        }
        JournalMode::Wal => {
            // The commit's frames written in one go after committed frames
            // of the same log generation, torn: the first half of the
            // sectors reached the disk, the commit frame did not.
            let fsz = (FRAME_HEADER_SIZE + ps) as u64;
            let (i, off, len) = writes_to(log, w, &with_suffix(&db, "-wal"))
                .into_iter()
                .rev()
                .find(|&(_, off, len)| off > WAL_HEADER_SIZE && len >= 2 * fsz)?;
            let mut spec = log.strict_spec(i + 1);
            spec.model = PersistenceModel::Torn;
            let sectors = ((off + len - 1) / 512 - off / 512 + 1) as usize;
            let mut mask = vec![0u64; sectors.div_ceil(64)];
            for s in 0..sectors / 2 {
                mask[s / 64] |= 1 << (s % 64);
            }
            for (wi, keep) in &mut spec.writes {
                if *wi == i {
                    *keep = Keep::Sectors(mask.clone());
                }
            }
            let frames = (off - WAL_HEADER_SIZE) / fsz;
            Some((
                spec,
                format!("log with {frames} frames, then a torn uncommitted tail"),
            ))
        }
        JournalMode::Shadow | JournalMode::ShadowX => {
            let sw = writes_to(log, w.clone(), &with_suffix(&db, "-shadow"));
            if ps == seed_page_sizes(mode)[0] {
                // In the middle of the Aggregate Update.
                if sw.len() < 3 {
                    return None;
                }
                strict(sw[sw.len() / 2].0 + 1, "shadow mid Aggregate Update".into())
            } else {
                // After the Atomic Exchange, before the Version Reset.
                let r = w
                    .rev()
                    .find(|&i| matches!(log.op(i), SimOp::Rename { .. }))?;
                strict(
                    r + 1,
                    "after the Atomic Exchange, before the Version Reset".into(),
                )
            }
        }
        JournalMode::DhlTc
        | JournalMode::DhlCc
        | JournalMode::Ips
        | JournalMode::Mvbt
        | JournalMode::LsMvbt => {
            let dw = writes_to(log, w, &db);
            if dw.len() < 2 {
                return None;
            }
            if ps == seed_page_sizes(mode)[0] {
                strict(
                    dw[dw.len() / 2].0 + 1,
                    "mid commit, new versions in place".into(),
                )
            } else {
                strict(dw[dw.len() - 1].0 + 1, "commit written, not synced".into())
            }
        }
    }
}

/// Build the seed of `mode` on `page_size` pages: a workload cut by power
/// loss in one of its last commits, at a point typical of the mode (see
/// [`Seed::state`]). The latest commit whose crash state recovers without
/// any error is taken. Deterministic.
pub fn seed_for(mode: JournalMode, page_size: usize) -> Seed {
    let sim = SimVfs::new();
    let counter = sim.clone();
    let cfg = WorkloadConfig {
        seed: 7,
        txns: 30,
        page_size,
        reopen: false,
        ..WorkloadConfig::default()
    };
    let opts = options(mode, page_size, Arc::new(sim.clone()));
    // The workload is fixed and known to run; a failure here is a bug the
    // explorer reports, so fall back to what was recorded instead of
    // panicking.
    let hist =
        record(&cfg, Path::new(DB_PATH), &opts, &move || counter.op_count()).unwrap_or_default();
    let log = sim.log();
    let make = |spec: &CrashSpec, state: String| {
        let db_path = PathBuf::from(DB_PATH);
        let mut img = log.image(spec);
        let db = img.files.remove(&db_path).unwrap_or_default();
        let aux = aux_suffix(mode).and_then(|s| img.files.remove(&with_suffix(&db_path, s)));
        let name = db_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let others = img
            .files
            .into_iter()
            .filter_map(|(p, b)| {
                let f = p.file_name()?.to_string_lossy().into_owned();
                let suffix = f.strip_prefix(name.as_deref()?)?.to_string();
                Some((suffix, b))
            })
            .collect();
        Seed {
            mode,
            page_size,
            db,
            aux,
            others,
            state,
        }
    };
    let mut fallback = None;
    for m in hist.marks.iter().rev().take(8) {
        let Some((spec, state)) = crash_state(mode, page_size, &log, m) else {
            continue;
        };
        let s = make(&spec, state);
        let ex = exercise(&s, s.db.clone(), s.aux.clone());
        if ex.opened && ex.errors.is_empty() && (s.aux.is_some() || aux_suffix(mode).is_none()) {
            return s;
        }
        fallback.get_or_insert(s);
    }
    // No crash state recovered cleanly: the caller's check of the seed
    // will say so.
    fallback.unwrap_or_else(|| make(&log.strict_spec(log.len()), "end of the workload".into()))
}

/// The seed of `persist` mode (kept for callers of the first version).
pub fn seed(page_size: usize) -> Seed {
    seed_for(JournalMode::Persist, page_size)
}

/// Every seed: each mode of [`JournalMode::ALL`] on each of its
/// [`seed_page_sizes`], mode-major: seed `m * SEEDS_PER_MODE + i` is mode
/// `ALL[m]` on its `i`-th page size.
pub fn all_seeds() -> Vec<Seed> {
    JournalMode::ALL
        .iter()
        .flat_map(|&m| seed_page_sizes(m).map(|ps| seed_for(m, ps)))
        .collect()
}

/// Apply mutations to copies of the seed's files; returns the database
/// and the auxiliary file.
pub fn apply(seed: &Seed, muts: &[Mutation]) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut db = seed.db.clone();
    let mut aux = seed.aux.clone();
    let ps = seed.page_size;
    for m in muts {
        let t = m.target();
        let g = geometry(seed.mode, t, ps);
        let Some(f) = (match t {
            Target::Db => Some(&mut db),
            Target::Aux => aux.as_mut(),
        }) else {
            continue;
        };
        let units = g.units(f.len());
        match m {
            Mutation::FlipBit { offset, bit, .. } => {
                if !f.is_empty() {
                    let i = (*offset % f.len() as u64) as usize;
                    f[i] ^= 1 << (bit % 8);
                }
            }
            Mutation::Bytes { offset, bytes, .. } => {
                if !f.is_empty() {
                    let i = (*offset % f.len() as u64) as usize;
                    let n = bytes.len().min(f.len() - i);
                    f[i..i + n].copy_from_slice(&bytes[..n]);
                }
            }
            Mutation::Truncate { len, .. } => {
                let l = (*len % (f.len() as u64 + 1)) as usize;
                f.truncate(l);
            }
            Mutation::ZeroPage { page, .. } => {
                if units > 0 {
                    f[g.unit((*page % units as u64) as usize)].fill(0);
                }
            }
            Mutation::SwapPages { a, b, .. } => {
                if units > 1 {
                    let (a, b) = ((*a % units as u64) as usize, (*b % units as u64) as usize);
                    if a != b {
                        let pa = f[g.unit(a)].to_vec();
                        let pb = f[g.unit(b)].to_vec();
                        f[g.unit(a)].copy_from_slice(&pb);
                        f[g.unit(b)].copy_from_slice(&pa);
                    }
                }
            }
            Mutation::CopyPage { from, to, .. } => {
                if units > 1 {
                    let (a, b) = (
                        (*from % units as u64) as usize,
                        (*to % units as u64) as usize,
                    );
                    let pa = f[g.unit(a)].to_vec();
                    f[g.unit(b)].copy_from_slice(&pa);
                }
            }
            Mutation::SelfPointer { page, .. } => {
                // Skip a database's header page (index 0).
                let first = usize::from(g.pgno.is_none());
                if units > first {
                    let k = first + (*page % (units - first) as u64) as usize;
                    let u = &mut f[g.unit(k)];
                    let me = match g.pgno {
                        Some(at) => [u[at], u[at + 1], u[at + 2], u[at + 3]],
                        None => (k as u32 + 1).to_be_bytes(),
                    };
                    let pg = &mut u[g.image..g.image + ps];
                    match pg[0] {
                        // Tree node: the right-child field (a leaf must
                        // ignore or reject it).
                        0x05 | 0x0D => pg[8..12].copy_from_slice(&me),
                        // Overflow or free-list trunk: next pointer.
                        _ => pg[0..4].copy_from_slice(&me),
                    }
                }
            }
            Mutation::Repoint {
                page, offset, to, ..
            } => {
                if units > 0 {
                    let k = (*page % units as u64) as usize;
                    let o = ((*offset % ps as u64) as usize & !3).min(ps - 4);
                    let at = g.unit(k).start + g.image + o;
                    f[at..at + 4].copy_from_slice(&to.to_be_bytes());
                }
            }
        }
    }
    (db, aux)
}

/// What exercising a damaged image did.
#[derive(Debug, Default)]
pub struct Exercise {
    /// Errors returned (all typed).
    pub errors: Vec<Error>,
    /// Errors of an unexpected kind (not corruption, I/O, no such table or
    /// aborted): a test should fail on these.
    pub unexpected: Vec<String>,
    /// The database opened.
    pub opened: bool,
}

/// An in-memory file system holding `seed`'s crash image with `db` as the
/// database file (at [`DB_PATH`]) and `aux` as the mode's auxiliary file.
pub fn seed_vfs(seed: &Seed, db: Vec<u8>, aux: Option<Vec<u8>>) -> MemVfs {
    let vfs = MemVfs::new();
    let db_path = PathBuf::from(DB_PATH);
    vfs.write_file(&db_path, db);
    if let (Some(a), Some(s)) = (aux, aux_suffix(seed.mode)) {
        vfs.write_file(&with_suffix(&db_path, s), a);
    }
    for (s, b) in &seed.others {
        vfs.write_file(&with_suffix(&db_path, s), b.clone());
    }
    vfs
}

/// Open the files (recovery runs), check, list tables, scan every table
/// both ways, read keys, write a transaction and close. Panics propagate.
pub fn exercise(seed: &Seed, db: Vec<u8>, aux: Option<Vec<u8>>) -> Exercise {
    let vfs = seed_vfs(seed, db, aux);
    let db_path = PathBuf::from(DB_PATH);
    let mut ex = Exercise::default();
    let note = |ex: &mut Exercise, e: Error| {
        if !matches!(
            e,
            Error::Corruption { .. }
                | Error::Io { .. }
                | Error::NoSuchTable(_)
                | Error::Aborted(_)
                | Error::Poisoned(_)
        ) {
            ex.unexpected.push(e.to_string());
        }
        ex.errors.push(e);
    };
    let opts = options(seed.mode, seed.page_size, Arc::new(vfs.clone()));
    let d = match Db::open(&db_path, opts) {
        Ok(d) => d,
        Err(e) => {
            note(&mut ex, e);
            return ex;
        }
    };
    ex.opened = true;
    if let Err(e) = d.check() {
        note(&mut ex, e);
    }
    let mut tables = match d.begin_read().and_then(|r| r.tables()) {
        Ok(t) => t,
        Err(e) => {
            note(&mut ex, e);
            Vec::new()
        }
    };
    tables.push("t0".into());
    tables.truncate(8);
    let mut some_keys = Vec::new();
    for t in &tables {
        for dir in [Direction::Forward, Direction::Reverse] {
            match d.begin_read() {
                Ok(r) => match r.range(t, .., dir) {
                    Ok(it) => {
                        for kv in it.take(10_000) {
                            match kv {
                                Ok((k, _)) => {
                                    if some_keys.len() < 16 {
                                        some_keys.push((t.clone(), k));
                                    }
                                }
                                Err(e) => {
                                    note(&mut ex, e);
                                    break;
                                }
                            }
                        }
                    }
                    Err(e) => note(&mut ex, e),
                },
                Err(e) => note(&mut ex, e),
            }
        }
    }
    for (t, k) in &some_keys {
        if let Err(e) = d.get(t, k) {
            note(&mut ex, e);
        }
    }
    // Writing over damage must fail cleanly too.
    let w = (|| {
        let mut txn = d.begin_write()?;
        for (i, (t, k)) in some_keys.iter().enumerate() {
            if i % 2 == 0 {
                txn.delete(t, k)?;
            } else {
                txn.put(t, k, &[7u8; 300])?;
            }
        }
        txn.put("t0", b"fuzz", &vec![1u8; 3 * seed.page_size])?;
        txn.commit()
    })();
    if let Err(e) = w {
        note(&mut ex, e);
    }
    if let Err(e) = d.close() {
        note(&mut ex, e);
    }
    ex
}

/// Decode fuzzer bytes into mutations (a tiny bytecode: one opcode byte,
/// then fixed-size operands), so the fuzzer explores damage to a valid
/// file instead of random bytes that fail the header checksum. Bit 7 of
/// the opcode selects the auxiliary file ([`Target::Aux`]), bits 0..3 the
/// mutation.
pub fn decode_mutations(data: &[u8]) -> Vec<Mutation> {
    let mut out = Vec::new();
    let mut i = 0;
    let take = |n: usize, i: &mut usize| -> Option<Vec<u8>> {
        let s = data.get(*i..*i + n)?.to_vec();
        *i += n;
        Some(s)
    };
    let u32_of = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    while i < data.len() && out.len() < 64 {
        let op = data[i];
        i += 1;
        let target = if op & 0x80 != 0 {
            Target::Aux
        } else {
            Target::Db
        };
        let m = match op & 0x7 {
            0 => take(5, &mut i).map(|b| Mutation::FlipBit {
                target,
                offset: u32_of(&b) as u64,
                bit: b[4],
            }),
            1 => take(5, &mut i).and_then(|b| {
                let n = (b[4] % 16) as usize + 1;
                take(n, &mut i).map(|bytes| Mutation::Bytes {
                    target,
                    offset: u32_of(&b) as u64,
                    bytes,
                })
            }),
            2 => take(4, &mut i).map(|b| Mutation::Truncate {
                target,
                len: u32_of(&b) as u64,
            }),
            3 => take(2, &mut i).map(|b| Mutation::ZeroPage {
                target,
                page: b[0] as u64 | (b[1] as u64) << 8,
            }),
            4 => take(2, &mut i).map(|b| Mutation::SwapPages {
                target,
                a: b[0] as u64,
                b: b[1] as u64,
            }),
            5 => take(2, &mut i).map(|b| Mutation::CopyPage {
                target,
                from: b[0] as u64,
                to: b[1] as u64,
            }),
            6 => take(1, &mut i).map(|b| Mutation::SelfPointer {
                target,
                page: b[0] as u64,
            }),
            _ => take(7, &mut i).map(|b| Mutation::Repoint {
                target,
                page: b[0] as u64,
                offset: b[1] as u64 | (b[2] as u64) << 8,
                to: u32_of(&b[3..]),
            }),
        };
        match m {
            Some(m) => out.push(m),
            None => break,
        }
    }
    out
}
