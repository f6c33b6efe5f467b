//! Page versions kept in memory for open readers, so that neither a
//! checkpoint nor a log restart ever waits for a reader and the log stays
//! bounded (docs/modes/wal.md, "Readers never pin the log").
//!
//! A reader on snapshot S reads, for page p, the newest version with TID
//! ≤ S among the log's versions, the versions kept here, and the database
//! file's image (whose TID this store records once it matters). SQLite
//! keeps that version on storage for as long as the reader lives, which is
//! why its log grows without bound behind a long reader. twinpage's
//! readers all live in this process (`Db::open` holds an exclusive file
//! lock), and after a crash there is no reader to serve, so the versions
//! only open readers need can leave storage: a checkpoint copies every
//! committed frame into the database file and keeps here the images it
//! overwrites that a reader still selects; a restart keeps here the log
//! versions a reader still selects. Invariant:
//!
//! - **R1** For every open snapshot S and page p, the newest candidate with
//!   TID ≤ S (log index, this store, the database file at
//!   [`Kept::db_tid`]) is p's version in the state S.
//!
//! Memory: at most one version per page and distinct open snapshot (a long
//! reader costs at most the database's size), dropped as soon as no open
//! snapshot selects it.

use crate::base::pgmap::PgnoMap;
use crate::base::{Pgno, Tid};
use std::sync::Arc;

/// One committed version of a page in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Version {
    /// The commit that wrote it.
    pub tid: Tid,
    /// Its frame.
    pub frame: u64,
}

/// The kept versions of one page.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// (TID of the commit that wrote it, image), oldest first. TID 0 is
    /// the database file's image from before any logged version of the
    /// page this session: older than all of them.
    pub versions: Vec<(Tid, Arc<[u8]>)>,
    /// TID of the version the database file holds for the page (a
    /// checkpoint copied it); 0: older than every candidate.
    pub db_tid: Tid,
}

/// Where a snapshot finds a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Source {
    /// A log frame.
    Log(u64),
    /// A kept image.
    Kept(Arc<[u8]>),
    /// The database file.
    Db,
}

/// The store.
#[derive(Debug, Default)]
pub(super) struct Retained {
    pages: PgnoMap<Kept>,
    bytes: usize,
    /// The most bytes held at once.
    pub max_bytes: usize,
}

/// The newest of the log versions `log` (`(tid, frame)`, oldest first)
/// with TID ≤ `snapshot`.
fn newest_log(log: &[Version], snapshot: Tid) -> Option<Version> {
    let n = log.partition_point(|v| v.tid <= snapshot);
    (n > 0).then(|| log[n - 1])
}

impl Kept {
    /// Which candidate `snapshot` selects, given the page's log versions:
    /// the newest with TID ≤ `snapshot` (a log version and the database
    /// file may hold the same version, when a checkpoint copied it).
    fn select(&self, log: &[Version], snapshot: Tid) -> Source {
        let mut best: Option<(Tid, Source)> =
            (self.db_tid <= snapshot).then_some((self.db_tid, Source::Db));
        let n = self.versions.partition_point(|v| v.0 <= snapshot);
        if let Some((t, img)) = n.checked_sub(1).map(|i| &self.versions[i]) {
            if best.as_ref().is_none_or(|b| *t > b.0) {
                best = Some((*t, Source::Kept(img.clone())));
            }
        }
        if let Some(Version { tid: t, frame: f }) = newest_log(log, snapshot) {
            if best.as_ref().is_none_or(|b| t >= b.0) {
                best = Some((t, Source::Log(f)));
            }
        }
        best.map_or(Source::Db, |b| b.1)
    }
}

impl Retained {
    /// Nothing kept (the common case: no reader older than the log).
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Pages with kept versions and the bytes they hold.
    pub fn size(&self) -> (usize, usize) {
        (
            self.pages.values().map(|k| k.versions.len()).sum(),
            self.bytes,
        )
    }

    /// Where `snapshot` finds `pgno`, given its log versions.
    pub fn select(&self, pgno: Pgno, log: &[Version], snapshot: Tid) -> Source {
        match self.pages.get(&pgno) {
            Some(k) => k.select(log, snapshot),
            None => match newest_log(log, snapshot) {
                Some(v) => Source::Log(v.frame),
                None => Source::Db,
            },
        }
    }

    /// A checkpoint is about to overwrite `pgno` in the database file with
    /// its logged version `tid`: whether some reader in `readers` selects
    /// the file's current image (which must then be kept, [`Self::keep`]).
    pub fn needs_db_image(&self, pgno: Pgno, log: &[Version], readers: &[Tid], tid: Tid) -> bool {
        readers
            .iter()
            .take_while(|&&s| s < tid)
            .any(|&s| self.select(pgno, log, s) == Source::Db)
    }

    /// The database file now holds `pgno`'s version `tid` (R1).
    pub fn copied(&mut self, pgno: Pgno, tid: Tid) {
        if let Some(k) = self.pages.get_mut(&pgno) {
            k.db_tid = tid;
        }
    }

    /// The database file's image of `pgno`, about to be overwritten with
    /// version `tid`, is kept: under the TID of the version it holds.
    pub fn keep_db_image(&mut self, pgno: Pgno, image: Arc<[u8]>, tid: Tid) {
        let held = self.pages.get(&pgno).map_or(0, |k| k.db_tid);
        self.keep(pgno, held, image, tid);
    }

    /// Keep `image` as `pgno`'s version `tid` (0: the database file's image
    /// from before the log), the file holding version `db_tid` from now on.
    pub fn keep(&mut self, pgno: Pgno, tid: Tid, image: Arc<[u8]>, db_tid: Tid) {
        self.bytes += image.len();
        self.max_bytes = self.max_bytes.max(self.bytes);
        let k = self.pages.entry(pgno).or_default();
        let at = k.versions.partition_point(|v| v.0 < tid);
        if k.versions.get(at).is_some_and(|v| v.0 == tid) {
            self.bytes -= image.len();
            return;
        }
        k.versions.insert(at, (tid, image));
        k.db_tid = k.db_tid.max(db_tid);
    }

    /// Drop every version no snapshot in `readers` selects, given each
    /// page's log versions (`log(pgno)`).
    pub fn collect<'a>(&mut self, readers: &[Tid], log: impl Fn(Pgno) -> &'a [Version]) {
        if readers.is_empty() {
            self.pages.clear();
            self.bytes = 0;
            return;
        }
        let mut freed = 0;
        self.pages.retain(|&pgno, k| {
            let lv = log(pgno);
            let mut used = vec![false; k.versions.len()];
            for &s in readers {
                if let Source::Kept(img) = k.select(lv, s) {
                    if let Some(i) = k.versions.iter().position(|v| Arc::ptr_eq(&v.1, &img)) {
                        used[i] = true;
                    }
                }
            }
            let mut i = 0;
            k.versions.retain(|v| {
                let keep = used[i];
                i += 1;
                if !keep {
                    freed += v.1.len();
                }
                keep
            });
            !k.versions.is_empty()
        });
        self.bytes -= freed;
    }

    /// Forget everything (close).
    pub fn clear(&mut self) {
        self.pages.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(b: u8) -> Arc<[u8]> {
        Arc::from(vec![b; 8])
    }

    #[test]
    fn a_reader_keeps_its_versions_through_checkpoint_and_restart() {
        let mut r = Retained::default();
        // Page 5: database image (before the log), log versions 10 and 20.
        let v = |tid, frame| Version { tid, frame };
        let log = vec![v(10, 0), v(20, 7)];
        assert_eq!(r.select(5, &log, 9), Source::Db);
        assert_eq!(r.select(5, &log, 15), Source::Log(0));
        // A checkpoint copies version 20; reader 9 needs the old image.
        assert!(r.needs_db_image(5, &log, &[9, 15], 20));
        assert!(!r.needs_db_image(5, &log, &[15], 20));
        r.keep(5, 0, img(1), 20);
        assert_eq!(r.select(5, &log, 9), Source::Kept(img(1)));
        assert_eq!(r.select(5, &log, 25), Source::Log(7));
        // The log restarts: reader 15's version 10 is kept; the file has 20.
        r.keep(5, 10, img(2), 20);
        let none: Vec<Version> = Vec::new();
        assert_eq!(r.select(5, &none, 9), Source::Kept(img(1)));
        assert_eq!(r.select(5, &none, 15), Source::Kept(img(2)));
        assert_eq!(r.select(5, &none, 20), Source::Db);
        assert_eq!(r.select(5, &none, 99), Source::Db);
        // Reader 9 ends: its image goes, reader 15's stays.
        r.collect(&[15], |_| &[]);
        assert_eq!(r.size(), (1, 8));
        assert_eq!(r.select(5, &none, 15), Source::Kept(img(2)));
        r.collect(&[], |_| &[]);
        assert!(r.is_empty());
    }
}
