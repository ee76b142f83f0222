//! The same hooks as classic tracepoints, for kernels without BTF (where tp_btf programs
//! cannot load). They read the tracepoint's own record at field offsets userspace takes
//! from tracefs (`events/<category>/<name>/format`), and share everything after that
//! with the tp_btf programs. What they cannot know without `task_struct` offsets:
//! - the tgid of the task switched in or woken: its entry in THREADS holds it (and only
//!   traced threads have one);
//! - whether a new task is a thread or a process: the clone flags of the syscall the
//!   parent is in (clone, clone3) say, fork and vfork make processes;
//! - `in_iowait`: io_wait then comes from rule 3's second half only (a D-state sleep in
//!   a file or block I/O syscall);
//! - the exit code: known from the status passed to exit or exit_group, unknown for a
//!   thread killed by a signal.
//!
//! `--stacks` needs tp_btf (the kernel stack of the task switched in).

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user};
use aya_ebpf::macros::tracepoint;
use aya_ebpf::programs::TracePointContext;
use kernelkite_common::bpf::NO_SYSCALL;

use crate::maps::{split_pid_tgid, thread};
use crate::sched::{on_switch, on_wakeup, Switch};
use crate::{lifecycle, syscalls};

/// Field offsets in the tracepoints' records, set by userspace from tracefs.
#[unsafe(no_mangle)]
static CLASSIC_SWITCH_PREV_STATE: u32 = 0;
#[unsafe(no_mangle)]
static CLASSIC_SWITCH_NEXT_PID: u32 = 0;
#[unsafe(no_mangle)]
static CLASSIC_WAKEUP_PID: u32 = 0;
#[unsafe(no_mangle)]
static CLASSIC_FORK_CHILD_PID: u32 = 0;
#[unsafe(no_mangle)]
static CLASSIC_SYS_ENTER_ID: u32 = 0;
#[unsafe(no_mangle)]
static CLASSIC_SYS_ENTER_ARGS: u32 = 0;
#[unsafe(no_mangle)]
static CLASSIC_SYS_EXIT_RET: u32 = 0;
/// sched_process_exit's `group_dead`, or u32::MAX on kernels without it.
#[unsafe(no_mangle)]
static CLASSIC_EXIT_GROUP_DEAD: u32 = u32::MAX;
/// Syscall numbers of the running architecture (u32::MAX where it has no such call).
#[unsafe(no_mangle)]
static NR_CLONE: u32 = u32::MAX;
#[unsafe(no_mangle)]
static NR_CLONE3: u32 = u32::MAX;
#[unsafe(no_mangle)]
static NR_FORK: u32 = u32::MAX;
#[unsafe(no_mangle)]
static NR_VFORK: u32 = u32::MAX;
#[unsafe(no_mangle)]
static NR_EXIT: u32 = u32::MAX;
#[unsafe(no_mangle)]
static NR_EXIT_GROUP: u32 = u32::MAX;

/// Whether traced thread `tid` is inside exit_group (classic hooks only: elsewhere
/// NR_EXIT_GROUP is unset and this is false). Without BTF no task field says that a
/// thread group is exiting; the syscall it is in does.
#[inline(always)]
pub fn in_exit_group(tid: u32) -> bool {
    let nr = global(&NR_EXIT_GROUP);
    nr != u32::MAX && thread(tid).is_some_and(|t| t.sys_nr == nr)
}

const CLONE_THREAD: u64 = 0x10000;
/// sched_switch's `prev_state` at or above this (TASK_REPORT_MAX, or TASK_STATE_MAX
/// before 4.14) means the task was preempted.
const PREEMPTED_STATE: u64 = 0x100;

#[inline(always)]
fn global(v: &'static u32) -> u32 {
    // SAFETY: reading our own static; volatile so the value patched in by the loader is
    // used instead of the compile-time one.
    unsafe { core::ptr::read_volatile(v) }
}

/// A field of the tracepoint's record (0 if it cannot be read).
#[inline(always)]
fn field<T: Default>(ctx: &TracePointContext, offset: &'static u32) -> T {
    // SAFETY: the offset comes from the tracepoint's format in tracefs.
    unsafe { ctx.read_at::<T>(global(offset) as usize) }.unwrap_or_default()
}

/// The current thread's syscall in progress (number, first argument), if we saw it.
#[inline(always)]
fn current_syscall() -> (u32, u64) {
    let tid = bpf_get_current_pid_tgid() as u32;
    match thread(tid) {
        Some(t) => (t.sys_nr, t.sys_arg0),
        None => (NO_SYSCALL, 0),
    }
}

#[tracepoint]
pub fn classic_sched_switch(ctx: TracePointContext) -> u32 {
    let state: u64 = field(&ctx, &CLASSIC_SWITCH_PREV_STATE);
    let preempt = state >= PREEMPTED_STATE;
    on_switch(
        &ctx,
        Switch {
            preempt,
            prev_state: Some(if preempt { 0 } else { state as u32 }),
            prev: core::ptr::null(),
            prev_ids: split_pid_tgid(),
            next_tid: field::<i32>(&ctx, &CLASSIC_SWITCH_NEXT_PID) as u32,
            next_tgid: 0,
            next: core::ptr::null(),
        },
    ) as u32
}

/// The woken task's pid in a sched_wakeup/sched_waking record (one format).
#[inline(always)]
pub(crate) fn wakeup_pid(ctx: &TracePointContext) -> u32 {
    field::<i32>(ctx, &CLASSIC_WAKEUP_PID) as u32
}

#[tracepoint]
pub fn classic_sched_wakeup(ctx: TracePointContext) -> u32 {
    on_wakeup(wakeup_pid(&ctx), 0, core::ptr::null()) as u32
}

#[tracepoint]
pub fn classic_sched_wakeup_new(ctx: TracePointContext) -> u32 {
    crate::sched::on_wakeup_new(
        field::<i32>(&ctx, &CLASSIC_WAKEUP_PID) as u32,
        0,
        core::ptr::null(),
    ) as u32
}

#[tracepoint]
pub fn classic_sys_enter(ctx: TracePointContext) -> u32 {
    let nr = field::<i64>(&ctx, &CLASSIC_SYS_ENTER_ID) as u32;
    let args = global(&CLASSIC_SYS_ENTER_ARGS) as usize;
    // SAFETY: args[0] and args[1] of the record; the offset comes from tracefs.
    let arg0 = unsafe { ctx.read_at::<u64>(args) }.unwrap_or(0);
    syscalls::on_enter(split_pid_tgid(), nr, arg0, || {
        unsafe { ctx.read_at::<u64>(args + 8) }.unwrap_or(u64::MAX)
    }) as u32
}

#[tracepoint]
pub fn classic_sys_exit(ctx: TracePointContext) -> u32 {
    syscalls::on_exit(&ctx, split_pid_tgid(), || {
        field::<i64>(&ctx, &CLASSIC_SYS_EXIT_RET)
    }) as u32
}

#[tracepoint]
pub fn classic_sched_process_fork(ctx: TracePointContext) -> u32 {
    let child_tid = field::<i32>(&ctx, &CLASSIC_FORK_CHILD_PID) as u32;
    lifecycle::on_fork(|parent_tgid| {
        let (nr, arg0) = current_syscall();
        let thread = if nr == global(&NR_CLONE) {
            arg0 & CLONE_THREAD != 0
        } else if nr == global(&NR_CLONE3) {
            // clone3's first argument points to struct clone_args, flags first.
            // SAFETY: a user pointer of the current task, read with the checked helper.
            unsafe { bpf_probe_read_user(arg0 as *const u64) }
                .is_ok_and(|flags| flags & CLONE_THREAD != 0)
        } else if nr == global(&NR_FORK) || nr == global(&NR_VFORK) {
            false
        } else {
            // Created by the kernel on the process's behalf (io_uring workers): a thread.
            true
        };
        (child_tid, if thread { parent_tgid } else { child_tid })
    }) as u32
}

#[tracepoint]
pub fn classic_sched_process_exec(_ctx: TracePointContext) -> u32 {
    lifecycle::on_exec() as u32
}

#[tracepoint]
pub fn classic_sched_process_exit(ctx: TracePointContext) -> u32 {
    // Without group_dead (older kernels) a process's target bit stays set after it is
    // gone; a process that reuses its pid passes the target check, but its threads have
    // no entries, so nothing of it is recorded.
    let group_dead = global(&CLASSIC_EXIT_GROUP_DEAD) != u32::MAX
        && field::<u8>(&ctx, &CLASSIC_EXIT_GROUP_DEAD) != 0;
    let exit_code = || {
        let (nr, status) = current_syscall();
        // exit(2) and exit_group(2) keep the low byte of the status, as wait(2) sees it.
        (nr == global(&NR_EXIT) || nr == global(&NR_EXIT_GROUP))
            .then_some(((status & 0xff) << 8) as u32)
    };
    // No task_struct here: the record is sent now (see lifecycle::on_exit).
    lifecycle::on_exit(exit_code, group_dead, false) as u32
}
