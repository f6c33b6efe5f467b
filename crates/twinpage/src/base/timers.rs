//! Where a thread's time went: per-thread clocks the engine adds to where
//! a transaction waits (for a lock, for its turn) or does I/O, so a caller
//! can split one transaction's latency (the benchmark's breakdown after
//! \[IPS\] Fig. 10) by reading [`thread_times`] before and after it.
//!
//! Only waits that actually happen are timed (an uncontended lock costs no
//! clock read), and the I/O calls were already timed for
//! [`crate::storage::IoSnapshot`]: adding to a thread-local cell is the
//! whole cost. The clocks only grow; callers take differences.

use std::cell::Cell;
use std::time::Instant;

/// What a thread spent time on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Waiting for a lock another transaction holds: the one-writer lock,
    /// page locks, the pager's commit lock, a wounded holder (2VTO).
    LockWait,
    /// 2VTO's forced sleep: a replay waiting to become the oldest
    /// transaction (\[IPS\] Algorithm 2).
    ForcedSleep,
    /// Waiting for the commit turn: 2VTO commits in `TS_commit` order; a
    /// durable commit waits for the earlier ones to be installed.
    CommitWait,
    /// Inside `pwrite` (database, journal or log).
    Write,
    /// Inside `fdatasync` / `fsync`, or waiting for the group commit's
    /// leader to make this commit durable (the pager adds the part of the
    /// journal's commit step its own I/O does not account for).
    Sync,
}

const N: usize = 5;

thread_local! {
    static CLOCKS: [Cell<u64>; N] = const {
        [Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0)]
    };
}

/// Add `ns` nanoseconds to this thread's `t` clock.
pub fn add(t: Timer, ns: u64) {
    CLOCKS.with(|c| {
        let c = &c[t as usize];
        c.set(c.get().wrapping_add(ns));
    });
}

/// Add the time since `start` to this thread's `t` clock.
pub fn add_since(t: Timer, start: Instant) {
    add(
        t,
        u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
    );
}

/// This thread's clocks, in nanoseconds since the thread started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadTimes {
    /// [`Timer::LockWait`].
    pub lock_wait_ns: u64,
    /// [`Timer::ForcedSleep`].
    pub forced_sleep_ns: u64,
    /// [`Timer::CommitWait`].
    pub commit_wait_ns: u64,
    /// [`Timer::Write`].
    pub write_ns: u64,
    /// [`Timer::Sync`].
    pub sync_ns: u64,
}

impl std::ops::Sub for ThreadTimes {
    type Output = ThreadTimes;
    fn sub(self, o: ThreadTimes) -> ThreadTimes {
        ThreadTimes {
            lock_wait_ns: self.lock_wait_ns.wrapping_sub(o.lock_wait_ns),
            forced_sleep_ns: self.forced_sleep_ns.wrapping_sub(o.forced_sleep_ns),
            commit_wait_ns: self.commit_wait_ns.wrapping_sub(o.commit_wait_ns),
            write_ns: self.write_ns.wrapping_sub(o.write_ns),
            sync_ns: self.sync_ns.wrapping_sub(o.sync_ns),
        }
    }
}

/// This thread's clocks.
pub fn thread_times() -> ThreadTimes {
    CLOCKS.with(|c| ThreadTimes {
        lock_wait_ns: c[Timer::LockWait as usize].get(),
        forced_sleep_ns: c[Timer::ForcedSleep as usize].get(),
        commit_wait_ns: c[Timer::CommitWait as usize].get(),
        write_ns: c[Timer::Write as usize].get(),
        sync_ns: c[Timer::Sync as usize].get(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_are_per_thread() {
        let before = thread_times();
        add(Timer::Sync, 5);
        add(Timer::LockWait, 7);
        let d = thread_times() - before;
        assert_eq!((d.sync_ns, d.lock_wait_ns, d.write_ns), (5, 7, 0));
        let other = std::thread::spawn(thread_times).join().unwrap();
        assert_eq!(other, ThreadTimes::default());
    }
}
