//! `trace --cgroup`: selecting the processes of a cgroup v2 subtree in the kernel.
//!
//! The hot path keeps its one bit test (the TARGETS bitmap): a process of the cgroup
//! gets its target bit when it is forked by a process of the cgroup, or when it execs
//! there (a container runtime moves its init into the cgroup, then execs the command;
//! `docker exec` and systemd do the same). Userspace sets the bits of the processes
//! already there at attach, from the subtree's `cgroup.procs`.

use aya_ebpf::helpers::generated::bpf_get_current_ancestor_cgroup_id;

/// The traced cgroup's id (its directory's inode on cgroup2), 0 when no cgroup is
/// traced; set by userspace at load time.
#[unsafe(no_mangle)]
static TARGET_CGROUP_ID: u64 = 0;
/// How deep the traced cgroup lies below the root of the v2 hierarchy (the root: 0).
#[unsafe(no_mangle)]
static TARGET_CGROUP_LEVEL: u32 = 0;

/// Whether a cgroup is traced (`--cgroup`, `--container`).
#[inline(always)]
pub fn selecting() -> bool {
    // SAFETY: reading our own static, patched by the loader.
    unsafe { core::ptr::read_volatile(&TARGET_CGROUP_ID) != 0 }
}

/// Whether the current task lies in the traced cgroup or below it: its ancestor at the
/// traced cgroup's level is that cgroup (a task higher up has none there, and the
/// helper gives 0).
#[inline(always)]
pub fn current_in_target() -> bool {
    // SAFETY: reading our own statics, patched by the loader.
    let (id, level) = unsafe {
        (
            core::ptr::read_volatile(&TARGET_CGROUP_ID),
            core::ptr::read_volatile(&TARGET_CGROUP_LEVEL),
        )
    };
    // SAFETY: helper call without preconditions.
    id != 0 && unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) } == id
}
