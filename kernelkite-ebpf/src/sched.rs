//! Scheduler hooks: every switch and wakeup of a target thread closes one interval and
//! adds it to that thread's class counter (see `kernelkite_common::class` for the rules).

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use aya_ebpf::macros::btf_tracepoint;
use aya_ebpf::programs::BtfTracePointContext;
use kernelkite_common::bpf::{run_state, syscall_kind, ThreadState, NO_SYSCALL};
use kernelkite_common::LatencyClass;

use crate::maps::{is_target, thread, SYSCALL_KIND};
use crate::{stacks, task};

const TASK_RUNNING: u32 = 0;
const TASK_UNINTERRUPTIBLE: u32 = 0x2;

/// Add the interval since `since_ns` to `class`.
#[inline(always)]
///
/// Invariant, which userspace checks to detect a torn read of the entry: the class
/// counters add up to `since_ns - start_ns`. So `since_ns` never moves backwards (a
/// wakeup stamped on another CPU can be a few ns behind).
pub fn close_interval(t: &mut ThreadState, class: LatencyClass, now: u64) {
    if now <= t.since_ns {
        return;
    }
    if let Some(slot) = t.class_ns.get_mut(class as usize) {
        *slot += now - t.since_ns;
        t.since_ns = now;
    }
}

/// The class of the interval the thread is in now, if it is not on a CPU.
#[inline(always)]
fn waiting_class(t: &ThreadState) -> LatencyClass {
    if t.run_state == run_state::RUNNABLE {
        return LatencyClass::Runqueue;
    }
    match LatencyClass::from_id(t.sleep_class) {
        // An INITIAL thread /proc saw as R that waits for a switch-in was runnable.
        Some(LatencyClass::OnCpu) => LatencyClass::Runqueue,
        Some(c) => c,
        None => LatencyClass::UnknownWait,
    }
}

/// Rules 2-5 for a thread going to sleep (rule 1, runnable, is decided by the caller).
#[inline(always)]
fn sleep_class(t: &ThreadState, prev: *const u8, prev_state: u32) -> LatencyClass {
    let in_syscall = t.sys_nr != NO_SYSCALL;
    if in_syscall && t.sys_is_lock != 0 {
        return LatencyClass::LockWait;
    }
    // SAFETY: prev is the task_struct the tracepoint handed us.
    if unsafe { task::in_iowait(prev) } {
        return LatencyClass::IoWait;
    }
    if in_syscall {
        if prev_state & TASK_UNINTERRUPTIBLE != 0 {
            if let Some(kind) = SYSCALL_KIND.get(t.sys_nr) {
                if *kind == syscall_kind::IO {
                    return LatencyClass::IoWait;
                }
            }
        }
        return LatencyClass::SyscallBlocked;
    }
    LatencyClass::UnknownWait
}

#[inline(always)]
fn switch_out(t: &mut ThreadState, prev: *const u8, preempt: bool, prev_state: u32, now: u64) {
    match t.run_state {
        run_state::EXITED => return,
        // INITIAL: a thread that leaves the CPU was on it since we attached.
        run_state::ON_CPU | run_state::INITIAL => close_interval(t, LatencyClass::OnCpu, now),
        _ => close_interval(t, waiting_class(t), now),
    }
    if preempt || prev_state == TASK_RUNNING {
        t.run_state = run_state::RUNNABLE;
    } else {
        t.sleep_class = sleep_class(t, prev, prev_state) as u32;
        t.run_state = run_state::SLEEPING;
    }
}

#[inline(always)]
fn switch_in(t: &mut ThreadState, now: u64) {
    match t.run_state {
        run_state::EXITED => return,
        run_state::ON_CPU => close_interval(t, LatencyClass::OnCpu, now),
        _ => close_interval(t, waiting_class(t), now),
    }
    t.run_state = run_state::ON_CPU;
}

#[inline(always)]
fn on_switch(ctx: &BtfTracePointContext, prev_state: Option<u32>) -> i32 {
    let preempt = ctx.arg::<u64>(0) & 1 == 1;
    let prev: *const u8 = ctx.arg(1);
    let next: *const u8 = ctx.arg(2);
    // SAFETY: helper call without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // The tracepoint runs in the context of `prev`.
    let pid_tgid = bpf_get_current_pid_tgid();
    if is_target((pid_tgid >> 32) as u32) {
        if let Some(t) = thread(pid_tgid as u32) {
            // SAFETY: prev is the tracepoint's task_struct.
            let state = prev_state.unwrap_or_else(|| unsafe { task::state(prev) });
            // How long it ran (0 if it was not on a CPU since an event of ours).
            let ran_ns = if t.run_state == run_state::ON_CPU {
                now.saturating_sub(t.since_ns)
            } else {
                0
            };
            switch_out(t, prev, preempt, state, now);
            stacks::on_switch_out(ctx, t, now, ran_ns);
        }
    }
    // SAFETY: next is the tracepoint's task_struct.
    let next_tgid = unsafe { task::tgid(next) };
    if is_target(next_tgid) {
        let next_tid = unsafe { task::pid(next) };
        if let Some(t) = thread(next_tid) {
            stacks::on_switch_in(next, next_tgid, next_tid, t, now);
            switch_in(t, now);
        }
    }
    0
}

/// Kernels since 5.18 pass `prev_state` as the fourth argument.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let prev_state = ctx.arg::<u64>(3) as u32;
    on_switch(&ctx, Some(prev_state))
}

/// Older kernels: read `prev->__state` (or `state`) instead.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch_legacy(ctx: BtfTracePointContext) -> i32 {
    on_switch(&ctx, None)
}

#[inline(always)]
fn on_wakeup(ctx: &BtfTracePointContext) -> i32 {
    let p: *const u8 = ctx.arg(0);
    // SAFETY: p is the tracepoint's task_struct.
    if !is_target(unsafe { task::tgid(p) }) {
        return 0;
    }
    if let Some(t) = thread(unsafe { task::pid(p) }) {
        // A wakeup of a thread that never left the CPU (it was woken while going to
        // sleep) changes nothing: the switch-out will see it runnable.
        if t.run_state == run_state::SLEEPING || t.run_state == run_state::INITIAL {
            // SAFETY: helper call without preconditions.
            let now = unsafe { bpf_ktime_get_ns() };
            close_interval(t, waiting_class(t), now);
            stacks::on_wakeup(t, now);
            t.run_state = run_state::RUNNABLE;
        }
    }
    0
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    on_wakeup(&ctx)
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new(ctx: BtfTracePointContext) -> i32 {
    on_wakeup(&ctx)
}
