//! The unprivileged /proc sampler: each tick, find the profiled subtree from the ppid
//! links in /proc/<pid>/stat and record every process's stat and io counters and every
//! thread's state, schedstat and blocked syscall as a [`Frame`](crate::model::Frame).
//!
//! One door to the kernel: a [`Sampler`] reads only below the procfs root it was given,
//! so tests point it at a synthetic tree ([`synthetic`]).
//!
//! Modules: `files` (reading below the root), `parse` (procfs crate types to model
//! types), `tree` (which processes are in the subtree), `sampler` (one frame),
//! `schedule` (the sampling deadlines), `identities` (each process's cgroup and
//! namespace pids, once per program).

mod files;
mod identities;
pub mod parse;
mod pidmap;
mod sampler;
mod schedule;
pub mod synthetic;
mod tree;

#[cfg(test)]
mod tests;

pub use identities::IdentityReader;
pub use sampler::{Sampler, SamplerOptions};
pub use schedule::Schedule;
pub use tree::Scope;

/// Entry points for the fuzz targets (`fuzz/`).
#[doc(hidden)]
pub mod fuzz_support {
    /// Run every /proc file parser on `bytes` (stat, io, schedstat, syscall, net/dev);
    /// how many of them accepted it. Each gives its fields or `None`, never a panic.
    pub fn parse_all(bytes: &[u8]) -> usize {
        use super::parse;
        [
            parse::stat(bytes).is_some(),
            parse::io(bytes).is_some(),
            parse::schedstat(bytes).is_some(),
            parse::syscall_nr(bytes).is_some(),
            parse::net_dev(bytes).is_some(),
            !parse::ns_pids(bytes).is_empty(),
            parse::status(bytes).tgid.is_some(),
        ]
        .into_iter()
        .filter(|&ok| ok)
        .count()
            + cgroup_files(&String::from_utf8_lossy(bytes))
    }

    /// The cgroup files' parsers: /proc/PID/cgroup and the names in its path,
    /// mountinfo, `cpu.stat` and the pressure files.
    fn cgroup_files(text: &str) -> usize {
        use crate::model::cgroup_path;
        use crate::source::{cgroup_counters, cgroups};
        let path = cgroup_path::parse_proc_cgroup(text);
        let labels = cgroup_path::labels(text);
        [
            path.is_some(),
            labels.container_id.is_some(),
            cgroups::mounts_of_type(text, "cgroup").count() > 0,
            cgroups::v2_mount_from_mountinfo(text).is_some(),
            cgroup_counters::keyed_value(text, "nr_throttled").is_some(),
            cgroup_counters::pressure_totals(text).0.is_some(),
        ]
        .into_iter()
        .filter(|&ok| ok)
        .count()
    }
}

/// The real procfs root.
pub const PROC_ROOT: &str = "/proc";
