//! The writer gate: write transactions that exclude every other one
//! (SQL's BEGIN IMMEDIATE and BEGIN EXCLUSIVE) beside the concurrent ones
//! of a multi-writer protocol (a plain BEGIN under `begin-concurrent`,
//! `2vto`, `page-lock`...).
//!
//! A concurrent writer enters *shared*, an exclusive one *alone*: it waits
//! until the writers in the gate have left, and keeps new ones out until
//! it leaves. A waiting exclusive writer holds new concurrent ones back,
//! so a stream of short concurrent transactions cannot starve it. Waits
//! end with [`Error::Busy`] after the busy timeout. The protocol's own
//! locks and validation still apply inside the gate: it only decides who
//! may run at the same time. Under a one-writer protocol every write
//! transaction is exclusive already and the gate is not used.
//!
//! - **G1** While an exclusive writer is in the gate, no other writer is.
//! - **G2** A concurrent writer does not enter while an exclusive one
//!   waits (no starvation of exclusive writers).

use crate::base::sync::{Condvar, Mutex};
use crate::base::{Error, Result};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    /// Concurrent writers in the gate.
    shared: usize,
    /// An exclusive writer is in the gate.
    alone: bool,
    /// Exclusive writers waiting to enter.
    waiting: usize,
}

/// See the module documentation.
#[derive(Default)]
pub struct WriterGate {
    st: Mutex<State>,
    cv: Condvar,
}

/// How a writer went through the [`WriterGate`]; leave with the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Beside other concurrent writers.
    Shared,
    /// Alone (G1).
    Alone,
}

impl WriterGate {
    /// An empty gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Enter as `how`, waiting at most `timeout`.
    pub fn enter(&self, how: Entry, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut st = self.st.lock();
        if how == Entry::Alone {
            st.waiting += 1;
        }
        loop {
            let free = match how {
                // G2: behind a waiting exclusive writer.
                Entry::Shared => !st.alone && st.waiting == 0,
                Entry::Alone => !st.alone && st.shared == 0,
            };
            if free {
                match how {
                    Entry::Shared => st.shared += 1,
                    Entry::Alone => {
                        st.waiting -= 1;
                        st.alone = true;
                    }
                }
                return Ok(());
            }
            if self.cv.wait_until(&mut st, deadline).timed_out() && Instant::now() >= deadline {
                if how == Entry::Alone {
                    st.waiting -= 1;
                    // Concurrent writers held back by this one may go.
                    self.cv.notify_all();
                }
                return Err(Error::Busy(format!(
                    "{} write transaction: busy timeout of {timeout:?} expired waiting for \
                     the other writers",
                    match how {
                        Entry::Shared => "a concurrent",
                        Entry::Alone => "an exclusive",
                    }
                )));
            }
        }
    }

    /// Exclusive writers waiting to enter (a snapshot, for diagnostics and
    /// the schedule tests of G2).
    pub fn exclusive_waiting(&self) -> usize {
        self.st.lock().waiting
    }

    /// Leave after entering as `how`.
    pub fn leave(&self, how: Entry) {
        let mut st = self.st.lock();
        match how {
            Entry::Shared => st.shared = st.shared.saturating_sub(1),
            Entry::Alone => st.alone = false,
        }
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const SHORT: Duration = Duration::from_millis(20);

    #[test]
    fn an_exclusive_writer_is_alone_and_is_not_starved() {
        let g = WriterGate::new();
        g.enter(Entry::Shared, SHORT).unwrap();
        g.enter(Entry::Shared, SHORT).unwrap();
        // G1: not while concurrent writers are in.
        assert!(matches!(g.enter(Entry::Alone, SHORT), Err(Error::Busy(_))));
        // A timed-out exclusive writer no longer holds others back.
        g.enter(Entry::Shared, SHORT).unwrap();
        for _ in 0..3 {
            g.leave(Entry::Shared);
        }
        g.enter(Entry::Alone, SHORT).unwrap();
        assert!(matches!(g.enter(Entry::Shared, SHORT), Err(Error::Busy(_))));
        assert!(matches!(g.enter(Entry::Alone, SHORT), Err(Error::Busy(_))));
        g.leave(Entry::Alone);
        g.enter(Entry::Shared, SHORT).unwrap();
        // G2: a waiting exclusive writer holds new concurrent ones back and
        // enters when the last one leaves.
        let g = Arc::new(g);
        let w = {
            let g = g.clone();
            std::thread::spawn(move || g.enter(Entry::Alone, Duration::from_secs(10)))
        };
        while g.st.lock().waiting == 0 {
            std::thread::yield_now();
        }
        assert!(matches!(g.enter(Entry::Shared, SHORT), Err(Error::Busy(_))));
        g.leave(Entry::Shared);
        w.join().unwrap().unwrap();
        assert!(g.st.lock().alone);
        g.leave(Entry::Alone);
        g.enter(Entry::Shared, SHORT).unwrap();
    }
}
