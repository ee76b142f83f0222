//! Process lifecycle: fork (track new threads; with FOLLOW also new processes), exec
//! and exit (send the thread's final class times, then forget it).

use aya_ebpf::helpers::generated::bpf_probe_read_user;
use aya_ebpf::helpers::{bpf_get_current_comm, bpf_get_current_task, bpf_ktime_get_ns};
use aya_ebpf::macros::{btf_tracepoint, map};
use aya_ebpf::maps::PerCpuArray;
use aya_ebpf::programs::BtfTracePointContext;
use kernelkite_common::bpf::{
    exit_flags, lost, record_flags, record_kind, run_state, ArgvRecord, LifecycleRecord,
    ThreadState, ARGV_BYTES, COMM_LEN, NO_SYSCALL,
};
use kernelkite_common::LatencyClass;

use crate::maps::{
    clear_target, count_lost, current_thread, insert_thread, is_gate, is_target,
    raise_notes_generation, remove_thread, set_target, split_pid_tgid, thread, EVENTS, GATE,
};
use crate::sched::close_interval;
use crate::{cgroup, stacks, task};

/// An argv record and its bytes, assembled before it is sent (too large for the BPF
/// stack).
#[repr(C)]
pub struct ArgvScratch {
    record: ArgvRecord,
    bytes: [u8; ARGV_BYTES],
}

#[map]
static ARGV_SCRATCH: PerCpuArray<ArgvScratch> = PerCpuArray::with_max_entries(1, 0);

/// 1 when `--follow`: new processes forked by targets become targets.
#[unsafe(no_mangle)]
static FOLLOW: u32 = 0;

#[inline(always)]
fn comm() -> [u8; COMM_LEN] {
    bpf_get_current_comm().unwrap_or([0; COMM_LEN])
}

#[inline(always)]
fn send(record: LifecycleRecord) -> bool {
    match EVENTS.reserve::<LifecycleRecord>(0) {
        Some(mut entry) => {
            entry.write(record);
            entry.submit(0);
            true
        }
        None => {
            count_lost(lost::RINGBUF_FULL);
            false
        }
    }
}

#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> i32 {
    let child: *const u8 = ctx.arg(1);
    // SAFETY: child is the tracepoint's task_struct.
    on_fork(|_| unsafe { task::ids::<true>(child) })
}

/// A fork, in the forking thread; `child` gives the child's (tid, tgid) from the
/// parent's tgid.
#[inline(always)]
pub fn on_fork(child: impl FnOnce(u32) -> (u32, u32)) -> i32 {
    let parent_tgid = (aya_ebpf::helpers::bpf_get_current_pid_tgid() >> 32) as u32;
    let traced = current_thread().is_some();
    let (child_tid, child_tgid) = child(parent_tgid);
    // The new task's tid is free, so a thread the map still holds under it is gone: its
    // exit was missed (the kernel skipped the exit hook's run). Forget it, and its
    // process's target bit if it was the process's first thread (a leader's tid is
    // free only once the whole process is), so the new task is not taken for it.
    if let Some(stale) = thread(child_tid) {
        // Not a missed event: EXITED (its lost exit record is counted), INITIAL (a
        // thread that exited between userspace's /proc read and its insert at attach).
        if stale.run_state != run_state::EXITED && stale.run_state != run_state::INITIAL {
            count_lost(lost::MISSED);
        }
        if stale.tgid == child_tid {
            clear_target(child_tid);
        }
        remove_thread(child_tid);
    }
    let new_process = child_tgid != parent_tgid;
    // `--cgroup`: a process of the traced cgroup that is not traced yet (moved in after
    // attach) brings its new processes in; its own threads wait for its next exec.
    let traced = traced || (new_process && cgroup::selecting() && cgroup::current_in_target());
    if !traced {
        return 0;
    }
    if new_process && unsafe { core::ptr::read_volatile(&FOLLOW) } == 0 {
        return 0;
    }
    // SAFETY: helper call without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let state = ThreadState {
        tgid: child_tgid,
        // wake_up_new_task() puts the child on a run queue right after this hook.
        run_state: run_state::RUNNABLE,
        since_ns: now,
        sleep_class: LatencyClass::UnknownWait as u32,
        sys_nr: NO_SYSCALL,
        sys_enter_ns: 0,
        sys_is_lock: 0,
        class_ns: [0; kernelkite_common::NUM_CLASSES],
        start_ns: now,
        ..ThreadState::default()
    };
    if insert_thread(child_tid, &state).is_err() {
        count_lost(lost::THREADS_FULL);
        return 0;
    }
    if new_process {
        set_target(child_tgid);
    } else {
        // A new thread of a traced process may get a dead untraced task's stack, and
        // with it a note on its `pt_regs` (`maps::UNTRACED_CPU`): void the notes.
        raise_notes_generation();
    }
    // New threads get a record too: it fixes the start of their window.
    send(LifecycleRecord {
        kind: record_kind::FORK,
        tgid: child_tgid,
        tid: child_tid,
        parent_tgid,
        ts_ns: now,
        comm: comm(),
        ..Default::default()
    });
    0
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(_ctx: BtfTracePointContext) -> i32 {
    on_exec()
}

/// An exec, in the thread that execs.
#[inline(always)]
pub fn on_exec() -> i32 {
    let Some((tgid, tid, _)) = current_thread().or_else(enter_target_cgroup) else {
        return 0;
    };
    // The command proper starts here: count its syscalls from now on (the exec call
    // itself included, as its sys_exit comes after this hook).
    if is_gate(tid) {
        if let Some(gate) = GATE.get_ptr_mut(0) {
            // SAFETY: a map value; only this thread's exec clears it.
            unsafe { *gate = 0 };
        }
    }
    // SAFETY: helper call without preconditions.
    let ts_ns = unsafe { bpf_ktime_get_ns() };
    if send(LifecycleRecord {
        kind: record_kind::EXEC,
        tgid,
        tid,
        ts_ns,
        comm: comm(),
        ..Default::default()
    }) {
        send_argv(tgid, tid, ts_ns);
    }
    0
}

/// `--cgroup`: the current process execs inside the traced cgroup without being traced
/// (a runtime moved it in, then execs the container's command): trace it from here.
/// Exec leaves one thread, the current one, on its CPU.
#[inline(always)]
fn enter_target_cgroup() -> Option<(u32, u32, &'static mut ThreadState)> {
    if !cgroup::selecting() || !cgroup::current_in_target() {
        return None;
    }
    let (tgid, tid) = split_pid_tgid();
    // SAFETY: helper calls without preconditions; the current task_struct is valid.
    let (now, runtime_ns) = unsafe {
        let current = bpf_get_current_task() as *const u8;
        (bpf_ktime_get_ns(), task::sum_exec_runtime::<false>(current))
    };
    let state = ThreadState {
        tgid,
        run_state: run_state::ON_CPU,
        since_ns: now,
        sleep_class: LatencyClass::UnknownWait as u32,
        // Inside execve, entered untraced: its return has no start time.
        sys_nr: NO_SYSCALL,
        start_ns: now,
        runtime_ns,
        ..ThreadState::default()
    };
    if insert_thread(tid, &state).is_err() {
        count_lost(lost::THREADS_FULL);
        return None;
    }
    set_target(tgid);
    current_thread()
}

/// The new program's argv, read where the kernel just laid it out (so a process that
/// exits at once is still named by its command line). Without the mm offsets (classic
/// tracepoints) nothing is sent, and userspace reads /proc/PID/cmdline instead.
#[inline(always)]
fn send_argv(tgid: u32, tid: u32, ts_ns: u64) {
    // SAFETY: the current task, read with probe reads.
    let Some((start, end)) =
        (unsafe { task::arg_range::<false>(bpf_get_current_task() as *const u8) })
    else {
        return;
    };
    let Some(scratch) = ARGV_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's scratch value.
    let scratch = unsafe { &mut *scratch };
    let want = end - start;
    // At most ARGV_BYTES - 1, as the verifier can bound it.
    let len = (if want >= ARGV_BYTES as u64 {
        ARGV_BYTES as u64 - 1
    } else {
        want
    }) as usize
        & (ARGV_BYTES - 1);
    // SAFETY: `len` < ARGV_BYTES fits the scratch bytes; the source is the current
    // task's user memory, read without faulting.
    let read = unsafe {
        bpf_probe_read_user(
            scratch.bytes.as_mut_ptr() as *mut _,
            len as u32,
            start as *const _,
        )
    };
    if read != 0 {
        return;
    }
    scratch.record = ArgvRecord {
        kind: record_kind::ARGV,
        tgid,
        tid,
        len: len as u32,
        ts_ns,
    };
    let total = core::mem::size_of::<ArgvRecord>() + len;
    if total > core::mem::size_of::<ArgvScratch>() {
        return;
    }
    // SAFETY: the first `total` bytes of the scratch value.
    let bytes =
        unsafe { core::slice::from_raw_parts(scratch as *const ArgvScratch as *const u8, total) };
    if EVENTS.output::<[u8]>(bytes, 0).is_err() {
        count_lost(lost::RINGBUF_FULL);
    }
}

/// 1 when sched_process_exit passes `group_dead` (recent kernels).
#[unsafe(no_mangle)]
static EXIT_HAS_GROUP_DEAD: u32 = 0;

#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: the current task pointer is valid while it runs this hook.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    // SAFETY: reading our own global, patched in by the loader.
    let group_dead = if unsafe { core::ptr::read_volatile(&EXIT_HAS_GROUP_DEAD) } != 0 {
        ctx.arg::<u64>(1) & 0xff != 0
    } else {
        unsafe { task::group_dead::<false>(task) }
    };
    on_exit(
        || Some(unsafe { task::exit_code::<false>(task) }),
        group_dead,
        true,
    )
}

/// A thread's exit, in the exiting thread (which is on a CPU); `exit_code` gives
/// `task_struct.exit_code`, or None where the hook cannot know it; `group_dead`: it was
/// the process's last thread. `defer` (tp_btf hooks): the record waits for the dead
/// task's final switch-out (`exit_flags`), which closes its last interval with the
/// runtime the rest of the exit used; without it the record is sent now.
#[inline(always)]
pub fn on_exit(exit_code: impl FnOnce() -> Option<u32>, group_dead: bool, defer: bool) -> i32 {
    let (tgid, tid) = split_pid_tgid();
    if !is_target(tgid) {
        return 0;
    }
    let Some(t) = thread(tid) else {
        if group_dead {
            clear_target(tgid);
        }
        return 0;
    };
    // A long block whose syscall never returned (the thread was killed in it): with
    // the call's user stack if a switch-out inside it took one.
    let user = t.sys_user_stack_id as i64;
    stacks::flush_pending(tgid, tid, t, user);
    let (exit_code, flags) = match exit_code() {
        Some(code) => (code, 0),
        None => (0, record_flags::EXIT_CODE_UNKNOWN),
    };
    if defer && flags == 0 {
        t.exit_code = exit_code;
        t.exit_flags = exit_flags::EXITING
            | if group_dead {
                exit_flags::GROUP_DEAD
            } else {
                0
            };
        return 0;
    }
    if group_dead {
        // Its pid is free for reuse by a process that is not ours.
        clear_target(tgid);
    }
    // SAFETY: helper call without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    close_interval(t, LatencyClass::OnCpu, now);
    send_exit(tgid, tid, t, now, exit_code, flags);
    0
}

/// The dead task `tid` leaves the CPU for the last time (its last interval is closed).
#[inline(always)]
pub fn on_final_switch(tgid: u32, tid: u32, t: &mut ThreadState, now: u64) {
    if t.exit_flags & exit_flags::GROUP_DEAD != 0 {
        // Its pid is free for reuse by a process that is not ours.
        clear_target(tgid);
    }
    send_exit(tgid, tid, t, now, t.exit_code, 0);
}

/// Send the exit record of `tid` and forget it (or leave it for userspace).
#[inline(always)]
fn send_exit(tgid: u32, tid: u32, t: &mut ThreadState, now: u64, exit_code: u32, flags: u32) {
    let sent = send(LifecycleRecord {
        kind: record_kind::EXIT,
        tgid,
        tid,
        ts_ns: now,
        exit_code,
        flags,
        class_ns: t.class_ns,
        start_ns: t.start_ns,
        comm: comm(),
        ..Default::default()
    });
    if sent {
        remove_thread(tid);
    } else {
        // Keep the final counters for userspace to collect; the loss is counted.
        t.exit_code = exit_code;
        t.run_state = run_state::EXITED;
    }
}
