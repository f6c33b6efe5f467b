//! Crash-simulating file system (built by the crash-explorer work).
