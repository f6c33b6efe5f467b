//! Tools built on the engine: the I/O counter, the crash explorer, the
//! benchmark.

pub mod bench;
pub mod conc;
pub mod crash;
pub mod crashtest;
pub mod iostat;
