//! What the in-page recovery schemes need from their page formats.
//!
//! DHL (\[DHL\] §III) and IPS (\[IPS\] §3) keep two versions of every tree
//! page inside the page, each tagged with the TID of the transaction that
//! wrote it, and commit by counting the pages a transaction wrote (the
//! *counting commit*, \[DHL\] §III-D, which \[IPS\] §3.2.5 takes over). One
//! journal (`journal/dhl.rs`) runs both; it reaches the page layout only
//! through [`InPageFormat`]: find the versions on a page (recovery's scan),
//! invalidate some of them (rollback, recovery), and embed a commit record
//! (metadata embedding).
//!
//! Non-tree pages (overflow chains, free-list trunks) hold one version
//! only (they are never rewritten while the committed state uses them) and
//! end with the same 16-byte *envelope* in both formats:
//!
//! ```text
//! ps-16  u64  TID of the writer (INV: invalidated)
//! ps-8   u8   0xD5
//! ps-7   3    0
//! ps-4   u32  crc32c(pgno, bytes 0..ps-4)
//! ```

use super::{DecodeCtx, NodeFormat};
use crate::base::pagesum::{self, SUM_LEN};
use crate::base::{Error, Pgno, Result};
use std::cell::RefCell;
use std::thread::LocalKey;

/// The invalid TID ("INV" in \[DHL\] Fig. 6): a version rolled back by
/// rollback or recovery.
pub const INV: u64 = u64::MAX;
/// Size of the envelope at the end of a non-tree page.
pub const RAW_TAIL: usize = 16;
/// Magic byte of that envelope.
pub const RAW_MAGIC: u8 = 0xD5;

/// The commit record embedded in the commit page of a transaction
/// (metadata embedding, \[DHL\] §IV-B1 and §III-D).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitRecord {
    /// TID of the transaction, the FCC it commits.
    pub tid: u64,
    /// Transaction size: pages written with this TID (counting commit).
    pub txn_size: u32,
    /// Database size in pages after the commit.
    pub page_count: u32,
}

/// What a recovery scan finds on one page.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PageScan {
    /// TIDs of the valid (checksummed, not invalidated) versions on the
    /// page: up to two tree versions, or one non-tree envelope.
    pub tids: Vec<u64>,
    /// Commit records carried by valid versions (both versions of a page
    /// can be commit pages).
    pub records: Vec<CommitRecord>,
    /// Highest TID on the page, valid or not (a torn version included):
    /// what recovery must invalidate when it is above the FCC.
    pub top: u64,
    /// A version failed its checksum: a torn write (or damage) that
    /// recovery must look at even if its TID is not above the FCC (a torn
    /// new version may overwrite bytes of the older committed version
    /// whose header the torn write did not replace).
    pub broken: bool,
}

/// One version of a tree page as recovery and the integrity check see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionState {
    /// Which of the page's two version headers it is.
    pub index: usize,
    /// TID of its writer (INV: invalidated).
    pub tid: u64,
    /// The commit record it carries (metadata embedding).
    pub record: Option<CommitRecord>,
    /// Its checksum holds.
    pub intact: bool,
}

/// A page format that keeps two TID-tagged versions of a tree page in the
/// page, as the counting-commit journal needs.
pub trait InPageFormat: NodeFormat + Clone + Default + 'static {
    /// Offset of a tree page's page checksum.
    const PAGE_SUM_AT: usize;

    /// Whether `page` holds tree versions (a version header was written).
    fn has_versions(&self, page: &[u8]) -> bool;

    /// The written versions of tree page `page` (INV ones included), each
    /// checked against its own checksum. A format whose headers carry a
    /// checksum of their own leaves out a header that fails it.
    fn versions(&self, pgno: Pgno, page: &[u8]) -> Vec<VersionState>;

    /// Whether every version not invalidated passes its own checksum, as
    /// [`InPageFormat::versions`] lists them: only then may rollback or
    /// repair seal the page checksum over them (C5), so that a read that
    /// finds it intact need not sum the visible version again.
    fn versions_intact(&self, pgno: Pgno, page: &[u8]) -> bool {
        self.versions(pgno, page)
            .iter()
            .all(|v| v.tid == INV || v.intact)
    }

    /// Which version a reader at FCC `fcc` sees, if the page's version
    /// headers parse.
    fn visible(&self, pgno: Pgno, page: &[u8], fcc: u64) -> Option<usize>;

    /// Set the TID of every valid version for which `doomed` holds to INV
    /// (only the version's TID and version-selection bytes change; the page
    /// checksum is resealed). Returns the versions invalidated.
    fn invalidate(&self, page: &mut [u8], pgno: Pgno, doomed: &dyn Fn(u64) -> bool) -> usize;

    /// Recovery's repair of one page once the FCC is decided: invalidate
    /// every version above `fcc`, and every version below the visible one
    /// that fails its checksum. The visible version itself is never
    /// invalidated: if it is damaged, reads report it. A page whose page
    /// checksum fails is resealed. Returns the changes made (nonzero: the
    /// page must be written back).
    fn repair(&self, page: &mut [u8], pgno: Pgno, fcc: u64) -> usize;

    /// Put a commit record into the version `rec.tid` wrote on this page
    /// (metadata embedding). `Ok(false)` if the page holds no such version
    /// (a non-tree page).
    fn embed_commit(&self, pgno: Pgno, page: &mut [u8], rec: CommitRecord) -> Result<bool>;

    /// What recovery needs from a page: the TIDs of its valid versions and
    /// any commit record. Damaged or torn versions are left out.
    fn scan(&self, pgno: Pgno, page: &[u8]) -> PageScan {
        let mut out = PageScan::default();
        if page.len() < 512 {
            return out;
        }
        if let Some(tid) = raw_tid(pgno, page) {
            if tid != INV {
                out.tids.push(tid);
                out.top = tid;
            }
            return out;
        }
        if !self.has_versions(page) {
            return out;
        }
        // A torn write may have changed only bytes no valid version uses:
        // the page still needs rewriting so that its checksum holds.
        out.broken = !pagesum::verify(pgno, page, Self::PAGE_SUM_AT);
        for v in self.versions(pgno, page) {
            if v.tid == INV {
                continue;
            }
            out.top = out.top.max(v.tid);
            if !v.intact {
                out.broken = true;
                continue;
            }
            if !out.tids.contains(&v.tid) {
                out.tids.push(v.tid);
            }
            out.records.extend(v.record);
        }
        out
    }

    /// Rollback of one page the aborted transaction `tid` wrote: its
    /// versions become INV, a page checksum a failed (short) write broke is
    /// resealed, and a page left with neither a version nor an envelope
    /// (a fresh page whose write failed early) is zeroed, so that every
    /// free page verifies afterwards. Returns whether the page changed.
    fn roll_back_page(&self, page: &mut [u8], pgno: Pgno, tid: u64) -> bool {
        if page.len() < 512 {
            return false;
        }
        if self.invalidate(page, pgno, &|t| t == tid) > 0 {
            return true;
        }
        if raw_tid(pgno, page).is_some() {
            return false;
        }
        if self.has_versions(page) {
            let vs = self.versions(pgno, page);
            // No version header to trust (a format that checks its
            // headers lists none): a fresh page's torn bytes only look
            // like one, and it is zeroed below.
            if !vs.is_empty() {
                // A damaged version keeps the page checksum failing: a
                // format may trust an intact page checksum for its
                // versions.
                if pagesum::verify(pgno, page, Self::PAGE_SUM_AT)
                    || !vs.iter().all(|v| v.tid == INV || v.intact)
                {
                    return false;
                }
                pagesum::seal(pgno, page, Self::PAGE_SUM_AT);
                return true;
            }
        }
        if pagesum::is_zero(page) {
            return false;
        }
        page.fill(0);
        true
    }
}

/// [`NodeFormat::verify_tree`] of an in-page format: the page checksum
/// covers both versions and the free space; on a mismatch, name each
/// version and whether it is still intact.
pub fn verify_tree_page<F: InPageFormat>(
    f: &F,
    pgno: Pgno,
    page: &[u8],
    ctx: &DecodeCtx,
) -> Result<()> {
    if !ctx.checksums || pagesum::verify(pgno, page, F::PAGE_SUM_AT) {
        return Ok(());
    }
    let visible = f.visible(pgno, page, ctx.committed_tid);
    let versions: Vec<String> = f
        .versions(pgno, page)
        .iter()
        .map(|v| {
            let state = match (v.tid == INV, v.intact) {
                (true, _) => "invalidated",
                (false, true) => "intact",
                (false, false) => "damaged",
            };
            let vis = if Some(v.index) == visible {
                ", visible"
            } else {
                ""
            };
            format!("version {} (TID {}{vis}) {state}", v.index, v.tid)
        })
        .collect();
    Err(Error::corrupt(
        "database",
        pgno,
        format!(
            "page checksum mismatch: bytes outside the visible version are damaged; versions: {}",
            if versions.is_empty() {
                "none".to_string()
            } else {
                versions.join(", ")
            }
        ),
    ))
}

/// [`NodeFormat::check_free`] of an in-page format: a free page is all
/// zero, or a page this format wrote (its envelope or page checksum holds).
pub fn check_free_page<F: InPageFormat>(pgno: Pgno, page: &[u8], ctx: &DecodeCtx) -> Result<()> {
    if !ctx.checksums
        || page.len() < 512
        || pagesum::is_zero(page)
        || raw_tid(pgno, page).is_some()
        || pagesum::verify(pgno, page, F::PAGE_SUM_AT)
    {
        return Ok(());
    }
    Err(Error::corrupt(
        "database",
        pgno,
        "free page: neither all zero nor a page with an intact checksum (damaged)",
    ))
}

/// Run `f` with this thread's value of `key` (a fresh one if it is in use:
/// a format's scratch vectors, kept per thread so that once they have
/// grown, placing a version allocates nothing).
pub(crate) fn with_local<S: Default + 'static, T>(
    key: &'static LocalKey<RefCell<S>>,
    f: impl FnOnce(&mut S) -> T,
) -> T {
    key.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => f(&mut s),
        Err(_) => f(&mut S::default()),
    })
}

/// Whether a bitmap (bit `i` of slot `i` is `0x80 >> (i % 8)` of byte
/// `i / 8`) has a bit set at or past `from`: a byte at a time.
pub(crate) fn any_bit_from(map: &[u8], from: usize) -> bool {
    let Some(&partial) = map.get(from / 8) else {
        return false;
    };
    partial & (0xff >> (from % 8)) != 0 || map[from / 8 + 1..].iter().any(|&b| b != 0)
}

/// Sort `v` by `less`, fast when it is nearly sorted already (a page's
/// cells in the order a later version mostly kept): insertion sort while
/// the swaps stay within a few per element, the general sort past that
/// (no quadratic worst case).
pub(crate) fn sort_nearly_sorted_by<T>(v: &mut [T], mut less: impl FnMut(&T, &T) -> bool) {
    let mut budget = 4 * v.len();
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && less(&v[j], &v[j - 1]) {
            if budget == 0 {
                v.sort_unstable_by(|a, b| {
                    if less(a, b) {
                        std::cmp::Ordering::Less
                    } else if less(b, a) {
                        std::cmp::Ordering::Greater
                    } else {
                        std::cmp::Ordering::Equal
                    }
                });
                return;
            }
            budget -= 1;
            v.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// Seal `out`, a copy of `base` changed only inside `ranges`, with its
/// page checksum (field at `at`) patched from `base`'s instead of summed
/// again: a base whose checksum failed leaves a page whose checksum fails
/// (C5). Summed when a range cannot be patched.
pub(crate) fn seal_patched(
    pgno: Pgno,
    base: &[u8],
    out: &mut [u8],
    at: usize,
    ranges: &[(usize, usize)],
) {
    let skip = (at, at + SUM_LEN);
    let sum = pagesum::patch(pagesum::stored(base, at), base, out, ranges, skip)
        .unwrap_or_else(|| pagesum::page_sum(pgno, out, at));
    debug_assert!(
        !pagesum::verify(pgno, base, at) || sum == pagesum::page_sum(pgno, out, at),
        "patched page checksum, page {pgno}"
    );
    out[at..at + SUM_LEN].copy_from_slice(&sum.to_be_bytes());
}

/// The gaps of `[from, end)` that no run of `used` covers, ascending, into
/// `out`. Runs (half-open) are clipped to `[from, end)` and sorted by start
/// in `runs` (scratch): a page's cells mostly lie in key order, packed from
/// the page end down, so the runs come nearly sorted (ascending or
/// descending) and an insertion sort all but walks them.
pub(crate) fn free_gaps(
    from: usize,
    end: usize,
    used: impl Iterator<Item = (usize, usize)>,
    runs: &mut Vec<(usize, usize)>,
    out: &mut Vec<(usize, usize)>,
) {
    out.clear();
    runs.clear();
    runs.extend(
        used.map(|(s, e)| (s.max(from), e.min(end)))
            .filter(|&(s, e)| s < e),
    );
    if runs
        .first()
        .zip(runs.last())
        .is_some_and(|(f, l)| f.0 > l.0)
    {
        runs.reverse();
    }
    sort_nearly_sorted_by(runs, |a, b| a.0 < b.0);
    let mut pos = from.min(end);
    for &(s, e) in runs.iter() {
        if s > pos {
            out.push((pos, s));
        }
        pos = pos.max(e);
    }
    if pos < end {
        out.push((pos, end));
    }
}

/// The error of a reader whose snapshot is older than every version left
/// in a page: commits since it began overwrote the one it needs (under a
/// multi-writer protocol; \[IPS\] §4.2 aborts such a reader). Retryable.
pub fn snapshot_too_old(pgno: Pgno, snapshot: u64, tids: &[String]) -> Error {
    Error::Conflict {
        page: pgno,
        table: None,
        what: format!(
            "snapshot {snapshot} is older than every version of the page (TIDs [{}]): \
             commits since overwrote it",
            tids.join(", ")
        ),
    }
}

/// A crc32c over many small pieces (a version's header, offsets and
/// cells), gathered into a buffer and summed a chunk at a time: one
/// crc32c call per small piece costs more than the bytes. The buffer comes
/// from a per-thread pool and goes back on drop, so a sum neither
/// allocates nor clears 2 KiB in the steady state.
pub struct CrcGather {
    /// Always `Some` until the sum is dropped (then back to the pool).
    buf: Option<Box<[u8; GATHER]>>,
    fill: usize,
    crc: u32,
}

const GATHER: usize = 2048;

thread_local! {
    // Boxes: a buffer moves between the pool and a sum without a 2 KiB copy.
    #[allow(clippy::vec_box)]
    static GATHER_POOL: RefCell<Vec<Box<[u8; GATHER]>>> = const { RefCell::new(Vec::new()) };
}

impl CrcGather {
    /// An empty sum.
    pub fn new() -> Self {
        let buf = GATHER_POOL
            .try_with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.pop()))
            .ok()
            .flatten()
            .unwrap_or_else(|| Box::new([0; GATHER]));
        CrcGather {
            buf: Some(buf),
            fill: 0,
            crc: 0,
        }
    }

    /// A sum that goes on from `crc` (the crc32c of the message so far;
    /// `!0` sums from a zero register: the result, inverted, is the raw
    /// CRC of what is put).
    pub fn from_crc(crc: u32) -> Self {
        let mut g = Self::new();
        g.crc = crc;
        g
    }

    /// Append `bytes` to the message.
    #[inline]
    pub fn put(&mut self, bytes: &[u8]) {
        // Inlined, a piece of known length (a 2-byte offset) is a store,
        // not a call to copy it.
        if let Some(to) = self
            .buf
            .as_deref_mut()
            .and_then(|b| b.get_mut(self.fill..self.fill + bytes.len()))
        {
            to.copy_from_slice(bytes);
            self.fill += bytes.len();
            return;
        }
        self.put_spilling(bytes);
    }

    /// [`CrcGather::put`] of bytes that do not fit what is left of the
    /// buffer: summed a buffer at a time.
    #[inline(never)]
    fn put_spilling(&mut self, mut bytes: &[u8]) {
        let Some(buf) = self.buf.as_deref_mut() else {
            return;
        };
        while !bytes.is_empty() {
            if self.fill == GATHER {
                self.crc = crc32c::crc32c_append(self.crc, &buf[..]);
                self.fill = 0;
            }
            let n = bytes.len().min(GATHER - self.fill);
            buf[self.fill..self.fill + n].copy_from_slice(&bytes[..n]);
            self.fill += n;
            bytes = &bytes[n..];
        }
    }

    /// The crc32c of everything put.
    pub fn finish(self) -> u32 {
        match self.buf.as_deref() {
            Some(buf) => crc32c::crc32c_append(self.crc, &buf[..self.fill]),
            None => self.crc,
        }
    }
}

impl Drop for CrcGather {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            // Kept for the next sum on this thread (at most a few are
            // alive at once).
            let _ = GATHER_POOL.try_with(|p| {
                if let Ok(mut p) = p.try_borrow_mut() {
                    if p.len() < 4 {
                        p.push(buf);
                    }
                }
            });
        }
    }
}

/// The crc32c of the first part of a message whose whole crc32c is
/// `whole`, summing the shorter side: the part itself (`head`, which puts
/// its `head_len` bytes), or the rest (`rest`, `rest_len` bytes), whose raw
/// sum is removed from `whole` ([`pagesum::head_crc`]). A patch that
/// inserts or removes a run in the middle of a checksummed message needs
/// this sum at the change.
pub fn prefix_crc(
    whole: u32,
    (head_len, head): (usize, impl FnOnce(&mut CrcGather)),
    (rest_len, rest): (usize, impl FnOnce(&mut CrcGather)),
) -> u32 {
    if head_len <= rest_len {
        let mut g = CrcGather::new();
        head(&mut g);
        g.finish()
    } else {
        let mut g = CrcGather::from_crc(!0);
        rest(&mut g);
        pagesum::head_crc(whole, !g.finish(), rest_len)
    }
}

/// The crc32c of a message `crc` sums once a run `x` enters it (or
/// leaves it) right after its first part A, whose crc32c is `c_a`, with
/// `after` bytes following the run: `crc(A ‖ X ‖ R) ^ crc(A ‖ R)` is
/// `crc(A) ^ crc(A ‖ X)` carried over R, whichever of the two `crc` is.
#[inline]
pub fn splice_crc(crc: u32, c_a: u32, x: impl FnOnce(&mut CrcGather), after: usize) -> u32 {
    let mut g = CrcGather::from_crc(c_a);
    x(&mut g);
    crc ^ pagesum::advance(c_a ^ g.finish(), after)
}

impl Default for CrcGather {
    fn default() -> Self {
        Self::new()
    }
}

fn be32(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

fn envelope_crc(pgno: Pgno, page: &[u8]) -> u32 {
    let ps = page.len();
    crc32c::crc32c_append(crc32c::crc32c(&pgno.to_be_bytes()), &page[..ps - 4])
}

/// Set the checksum of a non-tree page's envelope.
pub fn seal_envelope(pgno: Pgno, page: &mut [u8]) {
    let ps = page.len();
    let crc = envelope_crc(pgno, page);
    page[ps - 4..].copy_from_slice(&crc.to_be_bytes());
}

/// Fill the envelope of a non-tree page written by `tid`.
pub fn write_envelope(pgno: Pgno, page: &mut [u8], tid: u64) {
    let ps = page.len();
    page[ps - RAW_TAIL..ps - 8].copy_from_slice(&tid.to_be_bytes());
    page[ps - 8] = RAW_MAGIC;
    page[ps - 7..ps - 4].fill(0);
    seal_envelope(pgno, page);
}

/// The TID in a non-tree page's envelope, if the envelope is intact.
pub fn raw_tid(pgno: Pgno, page: &[u8]) -> Option<u64> {
    let ps = page.len();
    if ps < RAW_TAIL || page[ps - 8] != RAW_MAGIC || page[ps - 7..ps - 4] != [0, 0, 0] {
        return None;
    }
    (envelope_crc(pgno, page) == be32(page, ps - 4)).then(|| {
        u64::from_be_bytes(
            page[ps - RAW_TAIL..ps - 8]
                .try_into()
                .expect("8 bytes of the envelope"),
        )
    })
}

/// Invalidate the envelope of a non-tree page if `doomed` holds for its
/// TID. `None` if the page has no intact envelope.
pub fn invalidate_envelope(
    pgno: Pgno,
    page: &mut [u8],
    doomed: &dyn Fn(u64) -> bool,
) -> Option<usize> {
    let tid = raw_tid(pgno, page)?;
    if tid != INV && doomed(tid) {
        let ps = page.len();
        page[ps - RAW_TAIL..ps - 8].copy_from_slice(&INV.to_be_bytes());
        seal_envelope(pgno, page);
        return Some(1);
    }
    Some(0)
}

/// [`NodeFormat::check_raw`] for a page with an envelope: a torn, damaged,
/// invalidated or not yet committed page is corruption.
pub fn check_envelope(pgno: Pgno, page: &[u8], committed: u64) -> Result<()> {
    let corrupt = |what: String| Error::corrupt("database", pgno, what);
    match raw_tid(pgno, page) {
        None => Err(corrupt(
            "overflow or free-list page: envelope checksum mismatch, the page is torn or damaged"
                .into(),
        )),
        Some(INV) => Err(corrupt("overflow or free-list page was invalidated".into())),
        Some(t) if t > committed => Err(corrupt(format!(
            "overflow or free-list page written by TID {t}, above the FCC {committed}"
        ))),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bit_from_reads_the_bitmap_as_the_bits_do() {
        let mut map = [0u8; 32];
        for set in [None, Some(0), Some(7), Some(8), Some(100), Some(255)] {
            map.fill(0);
            if let Some(i) = set {
                map[i / 8] |= 0x80 >> (i % 8);
            }
            for from in 0..=256 {
                let bits = (from..256).any(|i| map[i / 8] & (0x80 >> (i % 8)) != 0);
                assert_eq!(any_bit_from(&map, from), bits, "{set:?} {from}");
            }
        }
    }

    #[test]
    fn nearly_sorted_spans_sort_like_any_other() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for n in [0usize, 1, 2, 35, 300] {
            for swaps in [0usize, 1, 3, n] {
                let mut v: Vec<(usize, usize)> = (0..n).map(|i| (i * 7, i * 7 + 3)).collect();
                for _ in 0..swaps.min(n * n) {
                    let (a, b) = (rng.random_range(0..n), rng.random_range(0..n));
                    v.swap(a, b);
                }
                let mut want = v.clone();
                want.sort_unstable();
                sort_nearly_sorted_by(&mut v, |a, b| a < b);
                assert_eq!(v, want, "{n} cells, {swaps} swaps");
            }
        }
    }

    #[test]
    fn free_gaps_are_the_complement_of_the_used_runs() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (mut scratch, mut out) = (Vec::new(), Vec::new());
        for ps in [512usize, 4096, 65536] {
            for _ in 0..200 {
                let from = rng.random_range(0..ps / 4);
                let runs: Vec<(usize, usize)> = (0..rng.random_range(0..40))
                    .map(|_| {
                        let s = rng.random_range(from..ps);
                        (s, (s + rng.random_range(1..200)).min(ps))
                    })
                    .collect();
                free_gaps(from, ps, runs.iter().copied(), &mut scratch, &mut out);
                let mut free = vec![true; ps];
                free[..from].iter_mut().for_each(|f| *f = false);
                for &(s, e) in &runs {
                    free[s..e].iter_mut().for_each(|f| *f = false);
                }
                let mut want = Vec::new();
                let mut i = 0;
                while i < ps {
                    if free[i] {
                        let s = i;
                        while i < ps && free[i] {
                            i += 1;
                        }
                        want.push((s, i));
                    } else {
                        i += 1;
                    }
                }
                assert_eq!(out, want, "page {ps}, from {from}, runs {runs:?}");
            }
        }
        // A page size that is not a multiple of 64 bytes.
        free_gaps(10, 100, [(20, 30)].into_iter(), &mut scratch, &mut out);
        assert_eq!(out, vec![(10, 20), (30, 100)]);
    }

    #[test]
    fn envelope_roundtrip_and_invalidation() {
        let mut p = vec![3u8; 512];
        write_envelope(9, &mut p, 42);
        assert_eq!(raw_tid(9, &p), Some(42));
        assert_eq!(raw_tid(10, &p), None, "misplaced page");
        check_envelope(9, &p, 42).unwrap();
        assert!(check_envelope(9, &p, 41).is_err(), "not committed yet");
        assert_eq!(invalidate_envelope(9, &mut p, &|t| t == 41), Some(0));
        assert_eq!(invalidate_envelope(9, &mut p, &|t| t == 42), Some(1));
        assert_eq!(raw_tid(9, &p), Some(INV));
        assert!(check_envelope(9, &p, 100).is_err());
        p[100] ^= 1;
        assert_eq!(raw_tid(9, &p), None, "torn page");
    }
}
