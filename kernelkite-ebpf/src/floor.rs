//! Reference programs for the overhead benchmark, on the syscall hooks and of the same
//! attach type as the real ones (`kernelkite bench-floor`):
//! - the floor: empty programs, what any syscall tracer pays at least;
//! - the clock floor: the least a syscall-latency tracer does (a target check, the
//!   clock read at entry and at exit, the difference kept), so the benchmark can tell
//!   what the clock reads cost apart from what kernelkite adds on top of them.

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use aya_ebpf::macros::{btf_tracepoint, map};
use aya_ebpf::maps::PerCpuArray;
use aya_ebpf::programs::BtfTracePointContext;

use crate::maps::is_target;

/// The clock floor's syscall in progress on a CPU.
struct FloorSyscall {
    /// The thread it belongs to; 0 (the idle task, never traced) when empty.
    tid: u32,
    /// CLOCK_MONOTONIC ns at sys_enter.
    enter_ns: u64,
}

/// The clock floor's syscall in progress, per CPU.
#[map]
static FLOOR_SYSCALL: PerCpuArray<FloorSyscall> = PerCpuArray::with_max_entries(1, 0);

/// The clock floor's sum of syscall latencies (kept so the work is not optimised away).
#[map]
static FLOOR_LATENCY_NS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn slot() -> Option<&'static mut FloorSyscall> {
    // SAFETY: a per-CPU value: only programs running on this CPU touch it.
    FLOOR_SYSCALL.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

#[btf_tracepoint(function = "sys_enter")]
pub fn floor_sys_enter(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn floor_sys_exit(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "sys_enter")]
pub fn floor_clock_sys_enter(_ctx: BtfTracePointContext) -> i32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_target((pid_tgid >> 32) as u32) {
        return 0;
    }
    if let Some(slot) = slot() {
        slot.tid = pid_tgid as u32;
        // SAFETY: helper call without preconditions.
        slot.enter_ns = unsafe { bpf_ktime_get_ns() };
    }
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn floor_clock_sys_exit(_ctx: BtfTracePointContext) -> i32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !is_target((pid_tgid >> 32) as u32) {
        return 0;
    }
    let (Some(slot), Some(total)) = (slot(), FLOOR_LATENCY_NS.get_ptr_mut(0)) else {
        return 0;
    };
    if slot.tid == pid_tgid as u32 {
        slot.tid = 0;
        // SAFETY: helper call without preconditions; total is this CPU's value.
        unsafe { *total += bpf_ktime_get_ns().saturating_sub(slot.enter_ns) };
    }
    0
}
