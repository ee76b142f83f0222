//! The bundle: kernelkite's on-disk record of one profiling session.
//!
//! A bundle stores raw cumulative counters exactly as the kernel reported them (each
//! field names its /proc or BPF source) plus lifecycle facts. Nothing derived is stored:
//! durations, CPU seconds, peaks, class shares and percentiles are computed by
//! `analysis` when a report is made, so the maths can change without migrating files.

pub mod bundle;
pub mod cgroup_path;
pub mod fixture;
pub mod frame_keeper;
pub mod io;
pub mod schema;
pub mod syscalls;
#[cfg(test)]
pub(crate) mod test_builders;
pub mod validate;

pub use bundle::*;
pub use frame_keeper::FrameKeeper;
pub use io::{load_bundle, write_bundle, LoadError};
