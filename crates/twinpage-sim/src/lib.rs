//! Test file systems for twinpage: the crash-simulating file system the
//! crash explorer runs on ([`sim::SimVfs`] with its persistence models) and
//! a [`fault::FaultVfs`] that makes a chosen call fail. Tests and tools use
//! them; the engine never does.

pub mod fault;
pub mod sim;
