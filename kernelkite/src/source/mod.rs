//! Sources of bundles: one module per collector. Each has one door to the kernel that
//! tests can replace (a procfs root path; a BPF loader).

#[cfg(target_os = "linux")]
pub mod cgroup_counters;
#[cfg(target_os = "linux")]
pub mod cgroups;
#[cfg(target_os = "linux")]
pub mod ebpf;
#[cfg(target_os = "linux")]
pub mod exit_stops;
pub mod host;
#[cfg(target_os = "linux")]
pub mod launch;
#[cfg(target_os = "linux")]
pub mod limits;
#[cfg(target_os = "linux")]
pub mod procfs;
#[cfg(target_os = "linux")]
pub mod taskstats;
#[cfg(target_os = "linux")]
pub mod untrusted;
