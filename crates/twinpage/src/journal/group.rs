//! Group commit (beyond the papers): commits that become ready while
//! another commit's fdatasync is in flight share the next one.
//!
//! Each commit a journal sequences gets a *ticket* (a sequence number, in
//! commit order) and a slot in a queue. A slot is *ready* once its writes
//! are in the operating system (the WAL's frames), or at once when the
//! flush itself does the writes (the in-page modes: [`GroupCommit::enqueue`]
//! with an item). A committer then waits in [`GroupCommit::wait_durable`]:
//! if no flush is in flight and every queued slot is ready, it becomes the
//! *leader*, takes the queue as one batch, and runs the journal's flush for
//! it (write what the batch needs, one fdatasync) without the queue's lock;
//! the others (*followers*) sleep until a flush covers them or one of them
//! can lead the next batch.
//!
//! Invariants (G1-G4, cited where relied on):
//! - **G1** Durability is a prefix: every ticket below `durable` is
//!   durable, none at or above it is known to be. A commit is acknowledged
//!   only when its ticket is below `durable`, so no acknowledged commit
//!   can sit behind an earlier one that is not durable (the WAL's "hole").
//! - **G2** At most one flush is in flight, and a batch is the whole queue
//!   from the oldest ticket not yet taken: batches are disjoint, contiguous
//!   and flushed in ticket order. A flush starts only when the previous one
//!   returned, so everything the previous batch wrote was synced before
//!   anything of the next batch is written by a flush (what the in-page
//!   modes' recovery relies on).
//! - **G3** A failed flush, or a commit that failed between its ticket and
//!   its readiness, fails every ticket not yet durable, now and later: the
//!   journal is then poisoned until the database is reopened (a failed
//!   fdatasync may have dropped pages the kernel no longer reports).
//! - **G4** The leader waits for no one: it leads only when every queued
//!   slot is ready, and a slot becomes ready (or failed) without waiting
//!   for any flush, so a flush never waits for a commit that waits for it.

use crate::base::sync::{Condvar, Mutex};
use crate::base::{Error, Result};
use std::collections::VecDeque;

/// Counters of [`GroupCommit`], for [`crate::Stats::journal`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupStats {
    /// Flushes that made commits durable (one fdatasync each, when the
    /// sync level syncs at commit).
    pub syncs: u64,
    /// Commits those flushes covered.
    pub commits: u64,
    /// The largest batch.
    pub max_group: u64,
    /// Batches of 1, 2, 3-4, 5-8 and 9 or more commits.
    pub sizes: [u64; 5],
}

impl GroupStats {
    fn note(&mut self, n: u64) {
        self.syncs += 1;
        self.commits += n;
        self.max_group = self.max_group.max(n);
        let bucket = match n {
            0 | 1 => 0,
            2 => 1,
            3..=4 => 2,
            5..=8 => 3,
            _ => 4,
        };
        self.sizes[bucket] += 1;
    }

    /// The counters by name.
    pub fn named(&self) -> [(&'static str, u64); 8] {
        [
            ("commit_syncs", self.syncs),
            ("commits_synced", self.commits),
            ("max_group", self.max_group),
            ("groups_of_1", self.sizes[0]),
            ("groups_of_2", self.sizes[1]),
            ("groups_of_3_4", self.sizes[2]),
            ("groups_of_5_8", self.sizes[3]),
            ("groups_of_9_up", self.sizes[4]),
        ]
    }
}

/// The queue and the durability mark: the whole protocol, without
/// blocking ([`GroupCommit`] wraps it in a mutex and a condition variable;
/// the tests drive it through every interleaving).
#[derive(Clone, PartialEq, Eq, Hash)]
struct State<T> {
    /// The next ticket to hand out.
    next: u64,
    /// G1: tickets below are durable.
    durable: u64,
    /// Tickets below are taken by a flush (durable ≤ taken ≤ next).
    taken: u64,
    /// Slots of tickets `taken..next`: `None` until ready.
    queue: VecDeque<Option<T>>,
    /// A flush is in flight (G2).
    leading: bool,
    /// G3: why every ticket not yet durable fails.
    failed: Option<String>,
    stats: GroupStats,
}

/// What a committer waiting for ticket `t` does next.
enum Step<T> {
    /// Return: durable, or failed (G3).
    Done(Result<()>),
    /// Flush this batch, then report with [`State::flushed`].
    Lead(Vec<T>),
    /// Sleep until the state changes.
    Wait,
}

impl<T> Default for State<T> {
    fn default() -> Self {
        State {
            next: 0,
            durable: 0,
            taken: 0,
            queue: VecDeque::new(),
            leading: false,
            failed: None,
            stats: GroupStats::default(),
        }
    }
}

impl<T> State<T> {
    fn enqueue(&mut self, item: Option<T>) -> Result<u64> {
        if let Some(why) = &self.failed {
            return Err(poisoned(why));
        }
        let t = self.next;
        self.next += 1;
        self.queue.push_back(item);
        Ok(t)
    }

    fn ready(&mut self, t: u64, item: T) {
        if t >= self.taken {
            if let Some(slot) = self.queue.get_mut((t - self.taken) as usize) {
                *slot = Some(item);
            }
        }
    }

    fn fail(&mut self, why: &str) {
        if self.failed.is_none() {
            self.failed = Some(why.to_string());
        }
    }

    fn step(&mut self, t: u64) -> Step<T> {
        if t < self.durable {
            return Step::Done(Ok(()));
        }
        if let Some(why) = &self.failed {
            return Step::Done(Err(poisoned(why)));
        }
        // G4: lead only when no slot waits for its writes.
        if !self.leading && !self.queue.is_empty() && self.queue.iter().all(Option::is_some) {
            self.leading = true;
            let batch: Vec<T> = self.queue.drain(..).flatten().collect();
            self.taken += batch.len() as u64;
            return Step::Lead(batch);
        }
        Step::Wait
    }

    /// The leader's flush of the batch ending at `taken` returned `r`
    /// (whether it synced).
    fn flushed(&mut self, n: u64, r: &Result<bool>) {
        self.leading = false;
        match r {
            Ok(synced) => {
                self.durable = self.taken;
                if *synced {
                    self.stats.note(n);
                }
            }
            Err(e) => self.fail(&e.to_string()),
        }
    }
}

/// The group commit of one journal: tickets, the queue, the leader.
pub struct GroupCommit<T> {
    st: Mutex<State<T>>,
    cv: Condvar,
}

impl<T> Default for GroupCommit<T> {
    fn default() -> Self {
        GroupCommit {
            st: Mutex::new(State::default()),
            cv: Condvar::new(),
        }
    }
}

impl<T> GroupCommit<T> {
    /// A group commit with no tickets yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hand out the next ticket. The caller sequences commits (under its
    /// own lock), so tickets follow commit order. `item`: the slot is ready
    /// at once with it; `None`: [`GroupCommit::ready`] follows.
    pub fn enqueue(&self, item: Option<T>) -> Result<u64> {
        self.st.lock().enqueue(item)
    }

    /// Ticket `t`'s writes are done: its slot holds `item`.
    pub fn ready(&self, t: u64, item: T) {
        self.st.lock().ready(t, item);
        self.cv.notify_all();
    }

    /// A ticket cannot become ready (its writes failed): G3.
    pub fn fail(&self, why: &str) {
        self.st.lock().fail(why);
        self.cv.notify_all();
    }

    /// Whether no ticket is queued and none is being flushed: a commit
    /// enqueued now is the first of its batch, written after every earlier
    /// commit is durable (G2).
    pub fn idle(&self) -> bool {
        let st = self.st.lock();
        st.queue.is_empty() && st.durable == st.taken
    }

    /// Wait until every ticket handed out so far is durable (or the group
    /// failed, which is returned).
    pub fn wait_quiet(&self, flush: impl FnMut(Vec<T>) -> Result<bool>) -> Result<()> {
        let last = {
            let st = self.st.lock();
            if st.durable == st.next {
                return st.failed.as_deref().map_or(Ok(()), |w| Err(poisoned(w)));
            }
            st.next - 1
        };
        self.wait_durable(last, flush)
    }

    /// Wait until ticket `t` is durable, leading flushes when it is this
    /// caller's turn (G2, G4). `flush` makes a batch durable and says
    /// whether it synced (counted in [`GroupStats`]); an error fails the
    /// batch and every later ticket (G3).
    pub fn wait_durable(
        &self,
        t: u64,
        mut flush: impl FnMut(Vec<T>) -> Result<bool>,
    ) -> Result<()> {
        let mut st = self.st.lock();
        loop {
            match st.step(t) {
                Step::Done(r) => return r,
                Step::Wait => self.cv.wait(&mut st),
                Step::Lead(batch) => {
                    let n = batch.len() as u64;
                    drop(st);
                    let r = flush(batch);
                    st = self.st.lock();
                    st.flushed(n, &r);
                    self.cv.notify_all();
                    r?;
                }
            }
        }
    }

    /// A commit made durable outside the queue (the one-writer path): one
    /// sync for one commit.
    pub fn note_single(&self) {
        self.st.lock().stats.note(1);
    }

    /// The counters.
    pub fn stats(&self) -> GroupStats {
        self.st.lock().stats
    }

    /// Why the group failed, if it did (G3).
    pub fn failed(&self) -> Option<String> {
        self.st.lock().failed.clone()
    }
}

fn poisoned(why: &str) -> Error {
    Error::Poisoned(format!(
        "a commit of this session failed to become durable ({why}); reopen the database"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_batch_is_the_ready_queue_and_durability_is_a_prefix() {
        let g = GroupCommit::<u64>::new();
        let a = g.enqueue(None).unwrap();
        let b = g.enqueue(Some(11)).unwrap();
        assert_eq!((a, b), (0, 1));
        assert!(!g.idle());
        g.ready(a, 10);
        let mut seen = Vec::new();
        g.wait_durable(b, |batch| {
            seen.push(batch);
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen, vec![vec![10, 11]]);
        // Ticket 0 is covered by the same flush.
        g.wait_durable(a, |_| panic!("no second flush")).unwrap();
        assert!(g.idle());
        assert_eq!(g.stats().syncs, 1);
        assert_eq!(g.stats().max_group, 2);
    }

    #[test]
    fn a_failed_flush_fails_every_later_ticket() {
        let g = GroupCommit::<u64>::new();
        let a = g.enqueue(Some(1)).unwrap();
        let e = g.wait_durable(a, |_| Err(Error::Internal("disk gone".into())));
        assert!(matches!(e, Err(Error::Internal(_))));
        assert!(matches!(g.enqueue(Some(2)), Err(Error::Poisoned(_))));
        assert!(matches!(
            g.wait_durable(a, |_| Ok(true)),
            Err(Error::Poisoned(_))
        ));
    }

    #[test]
    fn followers_share_the_next_flush() {
        // Ten threads commit while flushes are slow: fewer flushes than
        // commits, and each thread returns only once its ticket is durable.
        let g = Arc::new(GroupCommit::<u64>::new());
        let seq = Arc::new(Mutex::new(()));
        let durable = Arc::new(Mutex::new(Vec::<u64>::new()));
        let threads: Vec<_> = (0..10)
            .map(|_| {
                let (g, seq, durable) = (g.clone(), seq.clone(), durable.clone());
                std::thread::spawn(move || {
                    let t = {
                        let _s = seq.lock();
                        g.enqueue(None).unwrap()
                    };
                    g.ready(t, t);
                    g.wait_durable(t, |batch| {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        durable.lock().extend(batch);
                        Ok(true)
                    })
                    .unwrap();
                    assert!(durable.lock().contains(&t));
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let d = durable.lock().clone();
        assert_eq!(d, (0..10).collect::<Vec<_>>(), "batches in ticket order");
        assert_eq!(g.stats().commits, 10);
    }

    /// The WAL sequencer and its group commit, driven through every
    /// interleaving of a few committers (a model checker over the real
    /// [`State`]; the blocking wrapper only loops over [`State::step`]).
    /// Each committer reserves a contiguous frame range (one atomic step,
    /// as under the writer lock), writes its frames one by one, marks its
    /// ticket ready and waits; a leader's flush is an fdatasync in two
    /// steps (what was written when it started becomes durable when it
    /// ends; writes in between are not covered) that may fail. Checked in
    /// every reachable state: frame ranges never overlap; no acknowledged
    /// commit has a frame below its end that is not durable (a crash there
    /// would end the log at that hole); commits are published in ticket
    /// order and only when durable; a failed flush fails every commit not
    /// yet durable; and some committer can always move until all are done
    /// (no lost wake-up, no deadlock).
    mod explore {
        use super::super::{State, Step};
        use std::collections::HashSet;

        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        enum Frame {
            Reserved,
            Written,
            Durable,
        }

        #[derive(Clone, PartialEq, Eq, Hash, Debug)]
        enum Pc {
            /// Before reserving commit `i` of the program.
            Reserve(usize),
            /// Writing frame `start + w` of `[start, end)`.
            Write {
                t: u64,
                start: u64,
                end: u64,
                w: u64,
            },
            Ready {
                t: u64,
                end: u64,
            },
            Wait {
                t: u64,
                end: u64,
            },
            /// Leading: the sync starts (its coverage is fixed here).
            SyncStart {
                t: u64,
                end: u64,
                n: u64,
            },
            SyncEnd {
                t: u64,
                end: u64,
                n: u64,
                covers: Vec<u64>,
            },
            Publish {
                t: u64,
            },
            Failed,
            Done,
        }

        #[derive(Clone, PartialEq, Eq, Hash)]
        struct World {
            g: State<u64>,
            frames: Vec<Frame>,
            pcs: Vec<Pc>,
            /// Commit `i` of thread `j` reserves `programs[j][i]` frames.
            programs: Vec<Vec<u64>>,
            /// The next ticket to publish.
            publish: u64,
            /// Acknowledged (ticket, end of its frames).
            acked: Vec<(u64, u64)>,
            /// Flushes may fail.
            failures: bool,
            /// A flush failed.
            failed: bool,
        }

        impl World {
            fn new(programs: Vec<Vec<u64>>, failures: bool) -> World {
                World {
                    g: State::default(),
                    frames: Vec::new(),
                    pcs: vec![Pc::Reserve(0); programs.len()],
                    programs,
                    publish: 0,
                    acked: Vec::new(),
                    failures,
                    failed: false,
                }
            }

            /// The states thread `j` can move to (none: blocked or done).
            fn moves(&self, j: usize) -> Vec<World> {
                let mut out = Vec::new();
                let mut w = self.clone();
                match self.pcs[j].clone() {
                    Pc::Reserve(i) => {
                        let Some(&k) = self.programs[j].get(i) else {
                            return out;
                        };
                        // One step: the writer lock covers the reservation
                        // and the ticket.
                        let start = w.frames.len() as u64;
                        let end = start + k;
                        match w.g.enqueue(None) {
                            Ok(t) => {
                                w.frames.extend((0..k).map(|_| Frame::Reserved));
                                w.programs[j][i] = 0;
                                w.pcs[j] = Pc::Write {
                                    t,
                                    start,
                                    end,
                                    w: 0,
                                };
                            }
                            Err(_) => w.pcs[j] = Pc::Failed,
                        }
                        out.push(w);
                    }
                    Pc::Write {
                        t,
                        start,
                        end,
                        w: i,
                    } => {
                        let f = (start + i) as usize;
                        assert_eq!(w.frames[f], Frame::Reserved, "frame {f} written twice");
                        w.frames[f] = Frame::Written;
                        w.pcs[j] = if start + i + 1 == end {
                            Pc::Ready { t, end }
                        } else {
                            Pc::Write {
                                t,
                                start,
                                end,
                                w: i + 1,
                            }
                        };
                        out.push(w);
                    }
                    Pc::Ready { t, end } => {
                        w.g.ready(t, end);
                        w.pcs[j] = Pc::Wait { t, end };
                        out.push(w);
                    }
                    Pc::Wait { t, end } => match w.g.step(t) {
                        Step::Wait => {}
                        Step::Done(Ok(())) => {
                            w.acked.push((t, end));
                            w.pcs[j] = Pc::Publish { t };
                            out.push(w);
                        }
                        Step::Done(Err(_)) => {
                            w.pcs[j] = Pc::Failed;
                            out.push(w);
                        }
                        Step::Lead(batch) => {
                            w.pcs[j] = Pc::SyncStart {
                                t,
                                end,
                                n: batch.len() as u64,
                            };
                            out.push(w);
                        }
                    },
                    Pc::SyncStart { t, end, n } => {
                        let covers = (0..w.frames.len() as u64)
                            .filter(|&f| w.frames[f as usize] == Frame::Written)
                            .collect();
                        w.pcs[j] = Pc::SyncEnd { t, end, n, covers };
                        out.push(w);
                    }
                    Pc::SyncEnd { t, end, n, covers } => {
                        let mut ok = w.clone();
                        for &f in &covers {
                            ok.frames[f as usize] = Frame::Durable;
                        }
                        ok.g.flushed(n, &Ok(true));
                        ok.pcs[j] = Pc::Wait { t, end };
                        out.push(ok);
                        if self.failures && !self.failed {
                            let mut bad = w;
                            bad.failed = true;
                            let e = crate::base::Error::Internal("EIO".into());
                            bad.g.flushed(n, &Err(e));
                            bad.pcs[j] = Pc::Failed;
                            out.push(bad);
                        }
                    }
                    Pc::Publish { t } => {
                        if w.publish == t {
                            w.publish += 1;
                            let next = self.programs[j].iter().position(|&k| k != 0);
                            w.pcs[j] = match next {
                                Some(i) => Pc::Reserve(i),
                                None => Pc::Done,
                            };
                            out.push(w);
                        }
                    }
                    Pc::Failed | Pc::Done => {}
                }
                out
            }

            fn check(&self) {
                for &(t, end) in &self.acked {
                    // W2 / G1: everything below an acknowledged commit's
                    // end is durable, so recovery's prefix holds it.
                    assert!(
                        self.frames[..end as usize]
                            .iter()
                            .all(|&f| f == Frame::Durable),
                        "commit {t} acknowledged behind a hole: {:?}",
                        self.frames
                    );
                    assert!(!self.failed || t < self.g.durable);
                }
                assert!(self.publish <= self.g.durable, "published before durable");
            }
        }

        /// Explore every interleaving; returns the number of states.
        fn explore(programs: Vec<Vec<u64>>, failures: bool) -> usize {
            let mut seen = HashSet::new();
            let mut stack = vec![World::new(programs, failures)];
            while let Some(w) = stack.pop() {
                if !seen.insert(w.clone()) {
                    continue;
                }
                w.check();
                let mut any = false;
                for j in 0..w.pcs.len() {
                    for next in w.moves(j) {
                        any = true;
                        stack.push(next);
                    }
                }
                if !any {
                    // Nobody can move: every committer must be finished.
                    assert!(
                        w.pcs.iter().all(|p| matches!(p, Pc::Done | Pc::Failed)),
                        "deadlock: {:?}",
                        w.pcs
                    );
                    assert!(w.failed || w.pcs.iter().all(|p| *p == Pc::Done));
                    if !w.failed {
                        assert_eq!(w.acked.len() as u64, w.g.next);
                    }
                }
            }
            seen.len()
        }

        #[test]
        fn three_committers_every_interleaving() {
            let n = explore(vec![vec![2], vec![1], vec![2]], false);
            eprintln!("{n} states");
            assert!(n > 1000, "{n} states");
        }

        #[test]
        fn two_committers_twice_every_interleaving() {
            let n = explore(vec![vec![1, 2], vec![2, 1]], false);
            assert!(n > 1000, "{n} states");
        }

        #[test]
        fn a_failing_flush_in_every_interleaving() {
            let n = explore(vec![vec![1], vec![2], vec![1]], true);
            assert!(n > 1000, "{n} states");
        }
    }
}
