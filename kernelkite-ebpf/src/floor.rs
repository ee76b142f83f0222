//! Reference programs for the overhead benchmark, on the syscall hooks and of the same
//! attach type as the real ones (`kernelkite bench-floor`):
//! - the floor: empty programs, what any syscall tracer pays at least;
//! - the clock floor: the least a syscall-latency tracer does (a target check, the
//!   clock read at entry and at exit, the difference kept), so the benchmark can tell
//!   what the clock reads cost apart from what kernelkite adds on top of them;
//! - the bit floor: the target bit test alone, what an untraced process's syscall
//!   costs at least under any tracer that selects processes;
//! - the scheduler floor: on sched_switch and sched_wakeup, the least a tracer that
//!   splits each traced thread's time at those events does;
//! - the waker floor: the scheduler floor, and the least a tracer that also says who
//!   ended each sleep does (the waker noted at sched_waking, in its context, and the
//!   sleep added to its total at sched_wakeup).

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use aya_ebpf::macros::{btf_tracepoint, map};
use aya_ebpf::maps::{HashMap, PerCpuArray};
use aya_ebpf::programs::BtfTracePointContext;

use kernelkite_common::bpf::targets;

use crate::maps::{is_target, split_pid_tgid, TARGETS};
use crate::task;

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

/// The bit floor: what any tracer that selects processes pays on a syscall of one it
/// does not trace, the target bit test and nothing else.
#[btf_tracepoint(function = "sys_enter")]
pub fn floor_bit_sys_enter(_ctx: BtfTracePointContext) -> i32 {
    bit_test()
}

#[btf_tracepoint(function = "sys_exit")]
pub fn floor_bit_sys_exit(_ctx: BtfTracePointContext) -> i32 {
    bit_test()
}

/// The running process's target bit. The word is read with a volatile load: the
/// program's return value is dropped by the macro, and until 2026-12-05 the compiler
/// removed the load with it, so the "bit floor" measured the helper call alone.
#[inline(always)]
fn bit_test() -> i32 {
    let tgid = split_pid_tgid().0;
    match TARGETS.get(targets::word(tgid)) {
        // SAFETY: a map value, valid while the program runs.
        Some(word) => {
            i32::from(unsafe { core::ptr::read_volatile(word) } & targets::bit(tgid) != 0)
        }
        None => 0,
    }
}

/// The scheduler floor's state of a thread: when its current interval began, and the
/// sum of the intervals closed.
struct FloorThread {
    since_ns: u64,
    total_ns: u64,
    /// The waker floor's note: the thread that woke it (its tid).
    waker_tid: u32,
}

/// The scheduler floor's threads.
#[map]
static FLOOR_THREADS: HashMap<u32, FloorThread> = HashMap::with_max_entries(4_096, 0);

/// Close the interval of thread `tid` at `now` and start the next.
#[inline(always)]
fn floor_interval(tid: u32, now: u64) {
    match FLOOR_THREADS.get_ptr_mut(&tid) {
        // SAFETY: a map value, valid while the program runs.
        Some(t) => unsafe {
            (*t).total_ns += now.saturating_sub((*t).since_ns);
            (*t).since_ns = now;
        },
        None => {
            let t = FloorThread {
                since_ns: now,
                total_ns: 0,
                waker_tid: 0,
            };
            let _ = FLOOR_THREADS.insert(&tid, &t, 0);
        }
    }
}

/// The scheduler floor: the least a tracer that splits each traced thread's time at its
/// switches and wakeups does: the target test of both tasks, one clock read, and each
/// traced thread's state looked up and its interval closed.
#[btf_tracepoint(function = "sched_switch")]
pub fn floor_sched_switch(ctx: BtfTracePointContext) -> i32 {
    let prev: *const u8 = ctx.arg(1);
    let next: *const u8 = ctx.arg(2);
    // SAFETY: the tracepoint's task_structs.
    let (prev_tid, prev_tgid) = unsafe { task::ids::<true>(prev) };
    let (next_tid, next_tgid) = unsafe { task::ids::<true>(next) };
    let mut now = 0;
    if is_target(prev_tgid) {
        // SAFETY: helper call without preconditions.
        now = unsafe { bpf_ktime_get_ns() };
        floor_interval(prev_tid, now);
    }
    if is_target(next_tgid) {
        if now == 0 {
            // SAFETY: as above.
            now = unsafe { bpf_ktime_get_ns() };
        }
        floor_interval(next_tid, now);
    }
    0
}

/// The thread of a wakeup tracepoint's task (its first argument), if traced.
#[inline(always)]
fn traced_wakee(ctx: &BtfTracePointContext) -> Option<u32> {
    let p: *const u8 = ctx.arg(0);
    // SAFETY: the tracepoint's task_struct.
    let (tid, tgid) = unsafe { task::ids::<true>(p) };
    is_target(tgid).then_some(tid)
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn floor_sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    if let Some(tid) = traced_wakee(&ctx) {
        // SAFETY: helper call without preconditions.
        floor_interval(tid, unsafe { bpf_ktime_get_ns() });
    }
    0
}

/// The waker floor's sleep time per (woken thread, waker thread).
#[map]
static FLOOR_WAKERS: HashMap<[u32; 2], u64> = HashMap::with_max_entries(4_096, 0);

/// The waker floor at sched_waking, which runs in the waker's context (sched_wakeup may
/// run later on the wakee's CPU, from an IPI): a traced wakee's waker noted.
#[btf_tracepoint(function = "sched_waking")]
pub fn floor_sched_waking(ctx: BtfTracePointContext) -> i32 {
    let Some(tid) = traced_wakee(&ctx) else {
        return 0;
    };
    if let Some(t) = FLOOR_THREADS.get_ptr_mut(&tid) {
        // SAFETY: a map value, valid while the program runs.
        unsafe { (*t).waker_tid = split_pid_tgid().1 };
    }
    0
}

/// The waker floor at sched_wakeup: the sleep added to its waker's total, then the
/// thread's interval closed as the scheduler floor closes it.
#[btf_tracepoint(function = "sched_wakeup")]
pub fn floor_wakers_sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    let Some(tid) = traced_wakee(&ctx) else {
        return 0;
    };
    // SAFETY: helper call without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(t) = FLOOR_THREADS.get_ptr_mut(&tid) else {
        floor_interval(tid, now);
        return 0;
    };
    // SAFETY: a map value, valid while the program runs.
    unsafe {
        let sleep_ns = now.saturating_sub((*t).since_ns);
        let key = [tid, (*t).waker_tid];
        match FLOOR_WAKERS.get_ptr_mut(&key) {
            Some(total) => *total += sleep_ns,
            None => {
                let _ = FLOOR_WAKERS.insert(&key, &sleep_ns, 0);
            }
        }
        (*t).total_ns += sleep_ns;
        (*t).since_ns = now;
    }
    0
}
