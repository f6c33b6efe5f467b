//! The synchronization primitives of the engine's coordination code (the
//! lock tables in `cc`, the WAL sequencer), behind one facade so a
//! schedule explorer can drive them.
//!
//! In a normal build these are `parking_lot`'s `Mutex`, `Condvar` and
//! `RwLock`, `std`'s atomics and `std::thread_local!`, re-exported
//! unchanged: the facade costs nothing. With the crate feature `shuttle`
//! (tests only, never a build of the engine that ships) they become thin
//! wrappers with the same API over the [shuttle] crate's primitives, so a
//! test can run the real lock-table code under shuttle's scheduler, which
//! picks every interleaving point (randomly, by PCT, or exhaustively for
//! small cases) and reports a schedule where every thread is blocked as a
//! deadlock:
//!
//! ```text
//! cargo test -p twinpage --features shuttle --test schedules
//! ```
//!
//! Rules for code that wants to be explored this way:
//! - take `Mutex`, `Condvar`, `RwLock`, atomics and `thread_local!` from
//!   here, not from `parking_lot` or `std` (a primitive shuttle does not
//!   see is invisible to it, and a blocking one hangs the explorer);
//! - timed waits (`Condvar::wait_until`, `wait_for`) never time out under
//!   shuttle (it does not model time), so a test proves progress without
//!   relying on a timeout: a schedule that could only end by a timeout is
//!   reported as a deadlock;
//! - a build with the feature runs only inside shuttle's runtime
//!   (`shuttle::check_*`): the primitives panic elsewhere, so the feature
//!   is for the schedule tests alone (`cargo test --workspace` never turns
//!   it on).
//!
//! [shuttle]: https://docs.rs/shuttle

#[cfg(not(feature = "shuttle"))]
pub use parking_lot::{
    Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult,
};
#[cfg(not(feature = "shuttle"))]
pub use std::sync::atomic;
#[cfg(not(feature = "shuttle"))]
pub use std::thread_local;

#[cfg(feature = "shuttle")]
pub use explored::{
    Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult,
};
#[cfg(feature = "shuttle")]
pub use shuttle::sync::atomic;
#[cfg(feature = "shuttle")]
pub use shuttle::thread_local;

/// `parking_lot`'s API over shuttle's `std`-like primitives.
#[cfg(feature = "shuttle")]
mod explored {
    use std::ops::{Deref, DerefMut};
    use std::time::{Duration, Instant};

    /// A mutex (`parking_lot::Mutex`'s API: no poisoning).
    #[derive(Debug, Default)]
    pub struct Mutex<T: ?Sized>(shuttle::sync::Mutex<T>);

    /// Its guard. The inner guard is taken out while a condition variable
    /// waits with it, and always put back before the wait returns.
    #[derive(Debug)]
    pub struct MutexGuard<'a, T: ?Sized>(Option<shuttle::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        /// A mutex holding `v`.
        pub fn new(v: T) -> Self {
            Mutex(shuttle::sync::Mutex::new(v))
        }

        /// The value, consuming the mutex.
        pub fn into_inner(self) -> T {
            self.0.into_inner().unwrap_or_else(|e| e.into_inner())
        }
    }

    impl<T: ?Sized> Mutex<T> {
        /// Lock, blocking.
        pub fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(|e| e.into_inner())))
        }

        /// Lock if free.
        pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok().map(|g| MutexGuard(Some(g)))
        }

        /// The value, through exclusive access.
        pub fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(|e| e.into_inner())
        }
    }

    impl<T: ?Sized> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_deref().expect("guard present outside a wait")
        }
    }

    impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_deref_mut().expect("guard present outside a wait")
        }
    }

    /// Whether a timed wait timed out (never, under shuttle).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct WaitTimeoutResult(bool);

    impl WaitTimeoutResult {
        /// True if the wait ended because its time ran out.
        pub fn timed_out(&self) -> bool {
            self.0
        }
    }

    /// A condition variable (`parking_lot::Condvar`'s API).
    #[derive(Debug, Default)]
    pub struct Condvar(shuttle::sync::Condvar);

    impl Condvar {
        /// A condition variable.
        pub fn new() -> Self {
            Condvar(shuttle::sync::Condvar::new())
        }

        /// Wait for a notification.
        pub fn wait<T>(&self, g: &mut MutexGuard<'_, T>) {
            let inner = g.0.take().expect("guard present");
            g.0 = Some(self.0.wait(inner).unwrap_or_else(|e| e.into_inner()));
        }

        /// Wait for a notification or `timeout` (shuttle: no timeout).
        pub fn wait_for<T>(
            &self,
            g: &mut MutexGuard<'_, T>,
            timeout: Duration,
        ) -> WaitTimeoutResult {
            let inner = g.0.take().expect("guard present");
            let (inner, r) = self
                .0
                .wait_timeout(inner, timeout)
                .unwrap_or_else(|e| e.into_inner());
            g.0 = Some(inner);
            WaitTimeoutResult(r.timed_out())
        }

        /// Wait for a notification or `deadline` (shuttle: no timeout).
        pub fn wait_until<T>(
            &self,
            g: &mut MutexGuard<'_, T>,
            deadline: Instant,
        ) -> WaitTimeoutResult {
            self.wait_for(g, deadline.saturating_duration_since(Instant::now()))
        }

        /// Wake one waiter.
        pub fn notify_one(&self) -> bool {
            self.0.notify_one();
            true
        }

        /// Wake every waiter.
        pub fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }
    }

    /// A reader-writer lock (`parking_lot::RwLock`'s API).
    #[derive(Debug, Default)]
    pub struct RwLock<T: ?Sized>(shuttle::sync::RwLock<T>);

    /// A shared guard.
    pub type RwLockReadGuard<'a, T> = shuttle::sync::RwLockReadGuard<'a, T>;
    /// An exclusive guard.
    pub type RwLockWriteGuard<'a, T> = shuttle::sync::RwLockWriteGuard<'a, T>;

    impl<T> RwLock<T> {
        /// A lock holding `v`.
        pub fn new(v: T) -> Self {
            RwLock(shuttle::sync::RwLock::new(v))
        }
    }

    impl<T: ?Sized> RwLock<T> {
        /// Lock shared.
        pub fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(|e| e.into_inner())
        }

        /// Lock exclusive.
        pub fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(|e| e.into_inner())
        }
    }
}
