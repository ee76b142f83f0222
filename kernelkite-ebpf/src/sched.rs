//! Scheduler hooks: every switch and wakeup of a target thread closes one interval and
//! adds it to that thread's class counter (see `kernelkite_common::class` for the rules).

use aya_ebpf::helpers::bpf_ktime_get_ns;
use aya_ebpf::macros::btf_tracepoint;
use aya_ebpf::programs::tracing::StackIdContext;
use aya_ebpf::programs::BtfTracePointContext;
use kernelkite_common::bpf::{
    exit_flags, run_state, syscall_kind, ThreadState, NO_RUNTIME, NO_SYSCALL,
};
use kernelkite_common::LatencyClass;

use crate::maps::{is_target, thread, SYSCALL_KIND};
use crate::{lifecycle, stacks, task, wakers};

const TASK_RUNNING: u32 = 0;
const TASK_UNINTERRUPTIBLE: u32 = 0x2;
/// A task's state at its final switch-out (do_task_dead).
const TASK_DEAD: u32 = 0x80;

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

/// Close an on-CPU interval of a thread whose kernel runtime is now `runtime_ns`: the
/// part the kernel accounted to it is on_cpu, the rest of the interval steal
/// (`ThreadState::split_on_cpu`). At sched_switch the kernel has just updated the
/// outgoing thread's runtime (put_prev_task -> update_curr), so the move of
/// `se.sum_exec_runtime` is what rusage and schedstat count. Without a baseline (first
/// observation on a CPU) or a runtime (classic tracepoints) the whole interval is on_cpu.
#[inline(always)]
fn close_on_cpu(t: &mut ThreadState, runtime_ns: u64, now: u64) {
    if runtime_ns == NO_RUNTIME || t.runtime_ns == NO_RUNTIME {
        close_interval(t, LatencyClass::OnCpu, now);
        t.runtime_ns = runtime_ns;
        return;
    }
    t.split_on_cpu(runtime_ns, now);
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

#[inline(always)]
fn is_io_syscall(nr: u32) -> bool {
    matches!(SYSCALL_KIND.get(nr), Some(kind) if *kind == syscall_kind::IO)
}

/// Rules 2-5 for a thread going to sleep (rule 1, runnable, is decided by the caller).
#[inline(always)]
fn sleep_class(t: &ThreadState, prev: *const u8, prev_state: u32) -> LatencyClass {
    let in_syscall = t.sys_nr != NO_SYSCALL;
    if in_syscall && t.sys_is_lock != 0 {
        return LatencyClass::LockWait;
    }
    // Where the flag can be read (tp_btf) it alone decides io_wait: io_schedule() sets
    // it, as it starts delay accounting's blkio clock. An uninterruptible sleep without
    // it inside a file syscall is a kernel lock (a file's f_pos_lock in fdget_pos, an
    // inode's i_rwsem), not the device: lock_wait.
    let iowait_known = !prev.is_null() && task::in_iowait_known();
    // SAFETY: prev is the task_struct the tracepoint handed us.
    if iowait_known && unsafe { task::in_iowait::<true>(prev) } {
        return LatencyClass::IoWait;
    }
    if in_syscall {
        if iowait_known {
            if prev_state & TASK_UNINTERRUPTIBLE != 0 && is_io_syscall(t.sys_nr) {
                return LatencyClass::LockWait;
            }
            return LatencyClass::SyscallBlocked;
        }
        // Classic tracepoints: an uninterruptible sleep in a file syscall stands in
        // for the flag.
        if prev_state & TASK_UNINTERRUPTIBLE != 0 && is_io_syscall(t.sys_nr) {
            return LatencyClass::IoWait;
        }
        return LatencyClass::SyscallBlocked;
    }
    LatencyClass::UnknownWait
}

#[inline(always)]
fn switch_out(t: &mut ThreadState, prev: *const u8, preempt: bool, prev_state: u32, now: u64) {
    match t.run_state {
        run_state::EXITED => return,
        // SAFETY: prev is the tracepoint's task_struct (null: classic tracepoints).
        run_state::ON_CPU => close_on_cpu(t, unsafe { task::sum_exec_runtime::<true>(prev) }, now),
        // INITIAL: a thread that leaves the CPU was on it since we attached (from an
        // unknown runtime: the interval is on_cpu; this read is the baseline).
        run_state::INITIAL => {
            close_interval(t, LatencyClass::OnCpu, now);
            // SAFETY: as above.
            t.runtime_ns = unsafe { task::sum_exec_runtime::<true>(prev) };
        }
        // Held runnable with a runtime baseline: its switch-in was not seen (an INITIAL
        // thread woken while still on its CPU, taken for runnable and switched out so
        // in exec storms under `run`, has no baseline). The runtime it moved is on_cpu.
        run_state::RUNNABLE if t.runtime_ns != NO_RUNTIME => {
            // SAFETY: prev is the tracepoint's task_struct (null: classic tracepoints).
            let runtime_ns = unsafe { task::sum_exec_runtime::<true>(prev) };
            if runtime_ns == NO_RUNTIME {
                close_interval(t, waiting_class(t), now);
            } else {
                t.close_unseen_run(runtime_ns, now);
            }
        }
        // Not counted as a missed switch-in: an INITIAL thread woken while still on its
        // CPU is taken for runnable, then switched out so (exec storms under `run`).
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
fn switch_in(t: &mut ThreadState, next: *const u8, now: u64) {
    if t.runtime_ns == NO_RUNTIME {
        // First observation: the runtime it enters the CPU with is the baseline (it
        // does not move while the thread is off the CPU).
        // SAFETY: next is the tracepoint's task_struct (null: classic tracepoints).
        t.runtime_ns = unsafe { task::sum_exec_runtime::<true>(next) };
    }
    match t.run_state {
        run_state::EXITED => return,
        // A switch-out that was not seen (not counted as a missed run: system-wide
        // sessions show such switch-ins with no skipped run at all, cause not found).
        // The kernel's runtime, which does not move off the CPU, says how much of the
        // interval was a run.
        run_state::ON_CPU => {
            // SAFETY: as above.
            let runtime_ns = unsafe { task::sum_exec_runtime::<true>(next) };
            if runtime_ns == NO_RUNTIME {
                close_interval(t, LatencyClass::OnCpu, now);
            } else {
                t.close_missed_switch_out(runtime_ns, now);
            }
        }
        _ => close_interval(t, waiting_class(t), now),
    }
    t.run_state = run_state::ON_CPU;
}

#[inline(always)]
fn clock_ns() -> u64 {
    // SAFETY: helper call without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// What a sched_switch hook knows, however it learned it.
pub struct Switch {
    /// The leaving thread was preempted (it stays runnable).
    pub preempt: bool,
    /// The leaving thread's state (`TASK_*` bits; 0 is running), or None to read it
    /// from `prev` (kernels before 5.18; read only when the thread is traced).
    pub prev_state: Option<u32>,
    /// The leaving task's task_struct, or null where the hook has none (classic
    /// tracepoints: then `in_iowait` is unknown).
    pub prev: *const u8,
    /// The leaving thread's (tgid, tid) (the tracepoint runs in its context).
    pub prev_ids: (u32, u32),
    /// The entering thread's tid.
    pub next_tid: u32,
    /// The entering thread's tgid, or 0 when the hook does not know it (classic
    /// tracepoints: then its entry says, and only traced threads have one).
    pub next_tgid: u32,
    /// The entering task's task_struct, or null (classic tracepoints).
    pub next: *const u8,
}

#[inline(always)]
pub fn on_switch<C: StackIdContext>(ctx: &C, sw: Switch) -> i32 {
    // The clock is read only when a traced thread is involved: it is the dearest part of
    // the program (about 50 ns here), and most switches of a busy machine are not ours.
    let mut now = 0;
    let (prev_tgid, prev_tid) = sw.prev_ids;
    // A dead task's last switch-out is looked at even when its process's target bit is
    // already clear: the last thread to exit can finish before another one does.
    let dead = matches!(sw.prev_state, Some(s) if s & TASK_DEAD != 0);
    if dead || is_target(prev_tgid) {
        if let Some(t) = thread(prev_tid) {
            now = clock_ns();
            // How long it ran (0 if it was not on a CPU since an event of ours).
            let ran_ns = if t.run_state == run_state::ON_CPU {
                now.saturating_sub(t.since_ns)
            } else {
                0
            };
            // SAFETY: prev is the tracepoint's task_struct when prev_state is None.
            let prev_state = sw
                .prev_state
                .unwrap_or_else(|| unsafe { task::state::<true>(sw.prev) });
            if t.exit_flags & exit_flags::EXITING != 0 && prev_state & TASK_DEAD != 0 {
                // SAFETY: prev is the tracepoint's task_struct.
                close_on_cpu(t, unsafe { task::sum_exec_runtime::<true>(sw.prev) }, now);
                lifecycle::on_final_switch(prev_tgid, prev_tid, t, now);
            } else {
                switch_out(t, sw.prev, sw.preempt, prev_state, now);
                stacks::on_switch_out(ctx, prev_tid, t, now, ran_ns);
            }
        }
    }
    if sw.next_tgid != 0 && !is_target(sw.next_tgid) {
        return 0;
    }
    if let Some(t) = thread(sw.next_tid) {
        if now == 0 {
            now = clock_ns();
        }
        stacks::on_switch_in(sw.next, t.tgid, sw.next_tid, t, now);
        switch_in(t, sw.next, now);
    }
    0
}

#[inline(always)]
fn on_switch_btf(ctx: &BtfTracePointContext, prev_state: Option<u32>) -> i32 {
    let prev: *const u8 = ctx.arg(1);
    let next: *const u8 = ctx.arg(2);
    // SAFETY: prev and next are the tracepoint's task_structs.
    let (prev_tid, prev_tgid) = unsafe { task::ids::<true>(prev) };
    let (next_tid, next_tgid) = unsafe { task::ids::<true>(next) };
    on_switch(
        ctx,
        Switch {
            preempt: ctx.arg::<u64>(0) & 1 == 1,
            prev_state,
            prev,
            prev_ids: (prev_tgid, prev_tid),
            next_tid,
            next_tgid,
            next,
        },
    )
}

/// Kernels since 5.18 pass `prev_state` as the fourth argument.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let prev_state = ctx.arg::<u64>(3) as u32;
    on_switch_btf(&ctx, Some(prev_state))
}

/// Older kernels: read `prev->__state` (or `state`) instead.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch_legacy(ctx: BtfTracePointContext) -> i32 {
    on_switch_btf(&ctx, None)
}

/// A wakeup of thread `tid` (its task_struct `task`, null on classic tracepoints);
/// `tgid` 0 when the hook does not know it (its entry does).
#[inline(always)]
pub fn on_wakeup(tid: u32, tgid: u32, task: *const u8) -> i32 {
    if tgid != 0 && !is_target(tgid) {
        return 0;
    }
    if let Some(t) = thread(tid) {
        // Taken to be on a CPU, but the kernel says it is off every CPU: its switch-out
        // was not seen (`ThreadState::close_missed_switch_out`). The runtime it moved is
        // the run; what follows it is the sleep this wakeup ends, in the class its
        // syscall and io flag give, so the sleep gets its waker like any other.
        if t.run_state == run_state::ON_CPU && task::off_cpu(task) && t.runtime_ns != NO_RUNTIME {
            // SAFETY: task is the tracepoint's task_struct.
            let runtime_ns = unsafe { task::sum_exec_runtime::<true>(task) };
            if runtime_ns != NO_RUNTIME {
                let now = clock_ns();
                let ran = runtime_ns.saturating_sub(t.runtime_ns);
                let run_end = t.since_ns.saturating_add(ran);
                t.split_on_cpu(runtime_ns, if run_end < now { run_end } else { now });
                t.sleep_class = sleep_class(t, task, 0) as u32;
                t.run_state = run_state::SLEEPING;
            }
        }
        // A wakeup of a thread that never left the CPU (it was woken while going to
        // sleep) changes nothing: the switch-out will see it runnable.
        if t.run_state == run_state::SLEEPING || t.run_state == run_state::INITIAL {
            let now = clock_ns();
            let class = waiting_class(t);
            if class != LatencyClass::Runqueue && now > t.since_ns {
                wakers::on_woken(tid, t, class as u32, now - t.since_ns);
            }
            close_interval(t, class, now);
            stacks::on_wakeup(t, now);
            t.run_state = run_state::RUNNABLE;
        }
    }
    0
}

#[inline(always)]
fn on_wakeup_btf(ctx: &BtfTracePointContext) -> i32 {
    let p: *const u8 = ctx.arg(0);
    // SAFETY: p is the tracepoint's task_struct.
    let (tid, tgid) = unsafe { task::ids::<true>(p) };
    on_wakeup(tid, tgid, p)
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    on_wakeup_btf(&ctx)
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new(ctx: BtfTracePointContext) -> i32 {
    let p: *const u8 = ctx.arg(0);
    // SAFETY: p is the tracepoint's task_struct.
    let (tid, tgid) = unsafe { task::ids::<true>(p) };
    on_wakeup_new(tid, tgid, p)
}

/// A new task's first wakeup: `--critical-path` notes who created it, then it is an
/// ordinary wakeup.
#[inline(always)]
pub fn on_wakeup_new(tid: u32, tgid: u32, task: *const u8) -> i32 {
    if crate::critical_path::on() && (tgid == 0 || is_target(tgid)) {
        if let Some(t) = thread(tid) {
            crate::critical_path::on_new_task(tid, t);
        }
    }
    on_wakeup(tid, tgid, task)
}
