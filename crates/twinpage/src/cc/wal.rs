//! WAL-mode concurrency: readers never block and are never blocked; one
//! writer at a time. The writer does not wait for readers before touching
//! storage, because it only appends to the log: a reader's snapshot is
//! kept by the log's index, and checkpoints never copy frames newer than
//! the oldest reader's snapshot.

use super::LockManager;
use crate::base::sync::{Condvar, Mutex};
use crate::base::{Error, Result};
use std::time::{Duration, Instant};

/// The lock manager of the `wal` mode.
#[derive(Default)]
pub struct WalLocks {
    writer: Mutex<bool>,
    cv: Condvar,
}

impl WalLocks {
    /// No writer yet.
    pub fn new() -> Self {
        Self::default()
    }
}

impl LockManager for WalLocks {
    fn begin_read(&self, _timeout: Duration) -> Result<()> {
        Ok(())
    }

    fn end_read(&self) {}

    fn begin_write(&self, timeout: Duration) -> Result<()> {
        let mut busy = self.writer.lock();
        // The clock runs only when the writer lock is taken.
        let _clock = busy.then(|| super::WaitClock(Instant::now()));
        let deadline = Instant::now() + timeout;
        while *busy {
            if self.cv.wait_until(&mut busy, deadline).timed_out() && *busy {
                return Err(Error::Busy(format!(
                    "WAL write lock: busy timeout of {timeout:?} expired"
                )));
            }
        }
        *busy = true;
        Ok(())
    }

    fn lock_exclusive(&self, _timeout: Duration) -> Result<()> {
        // Appending to the log does not disturb readers.
        Ok(())
    }

    fn end_write(&self) {
        *self.writer.lock() = false;
        self.cv.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn readers_never_wait_one_writer_does() {
        let l = Arc::new(WalLocks::new());
        l.begin_read(Duration::ZERO).unwrap();
        l.begin_write(Duration::ZERO).unwrap();
        l.lock_exclusive(Duration::ZERO).unwrap();
        l.begin_read(Duration::ZERO).unwrap();
        assert!(matches!(
            l.begin_write(Duration::from_millis(5)),
            Err(Error::Busy(_))
        ));
        let l2 = l.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            l2.end_write();
        });
        l.begin_write(Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        l.end_write();
    }
}
