//! Crash-consistency tooling: the workload driver and its model, the crash
//! explorer, I/O error injection, damaged-file checks and the child
//! process of the kill test. `twinpage crashtest` ([`super::crashtest`])
//! is the command-line front end; docs/CRASH.md describes the design.

pub mod child;
pub mod damage;
pub mod explore;
pub mod flip;
pub mod inject;
pub mod recovery_faults;
pub mod slow_sync;
pub mod workload;
