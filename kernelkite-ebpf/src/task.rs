//! Reading `struct task_struct` fields at offsets userspace found in the kernel's BTF.

use aya_ebpf::helpers::bpf_probe_read_kernel;
use kernelkite_common::bpf::NO_RUNTIME;

/// Offsets set by userspace at load time (`EbpfLoader::set_global`).
#[unsafe(no_mangle)]
static TASK_PID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_STATE_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_EXIT_CODE_OFFSET: u32 = 0;
/// Byte holding the `in_iowait` bitfield, and the bit's mask within it.
#[unsafe(no_mangle)]
static TASK_IN_IOWAIT_BYTE: u32 = 0;
#[unsafe(no_mangle)]
static TASK_IN_IOWAIT_MASK: u32 = 0;
/// `task->signal` and `signal_struct.live` (the thread group's live thread count).
#[unsafe(no_mangle)]
static TASK_SIGNAL_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static SIGNAL_LIVE_OFFSET: u32 = 0;
/// `task->mm`, `mm_struct.arg_start` and `arg_end` (0: not set, no argv is read).
#[unsafe(no_mangle)]
static TASK_MM_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static MM_ARG_START_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static MM_ARG_END_OFFSET: u32 = 0;
/// `signal_struct.flags` (0: not set, and nothing is taken for a group exit).
#[unsafe(no_mangle)]
static SIGNAL_FLAGS_OFFSET: u32 = 0;
/// `task->se.sum_exec_runtime` (0: not set, classic tracepoints).
#[unsafe(no_mangle)]
static TASK_SUM_EXEC_RUNTIME_OFFSET: u32 = 0;

#[inline(always)]
fn global(v: &'static u32) -> u32 {
    // SAFETY: reading our own static; volatile so the value patched in by the loader is
    // used instead of the compile-time 0.
    unsafe { core::ptr::read_volatile(v) }
}

#[inline(always)]
unsafe fn read_at<T: Copy + Default>(task: *const u8, offset: u32) -> T {
    // SAFETY: `task` is a task_struct pointer handed to us by the tracepoint; a failed
    // read yields the default.
    unsafe { bpf_probe_read_kernel(task.add(offset as usize) as *const T).unwrap_or_default() }
}

/// `task->pid` (the thread id).
#[inline(always)]
pub unsafe fn pid(task: *const u8) -> u32 {
    unsafe { read_at::<i32>(task, global(&TASK_PID_OFFSET)) as u32 }
}

/// (`task->pid`, `task->tgid`): one 8-byte read where the two are adjacent, as they
/// are in every kernel so far; two reads otherwise.
#[inline(always)]
pub unsafe fn ids(task: *const u8) -> (u32, u32) {
    let pid_offset = global(&TASK_PID_OFFSET);
    if global(&TASK_TGID_OFFSET) == pid_offset + 4 {
        let both = unsafe { read_at::<u64>(task, pid_offset) };
        // Little-endian (bpfel): pid is the low half.
        (both as u32, (both >> 32) as u32)
    } else {
        unsafe { (pid(task), tgid(task)) }
    }
}

/// `task->tgid` (the process id).
#[inline(always)]
pub unsafe fn tgid(task: *const u8) -> u32 {
    unsafe { read_at::<i32>(task, global(&TASK_TGID_OFFSET)) as u32 }
}

/// `task->__state` (`state` before 5.14).
#[inline(always)]
pub unsafe fn state(task: *const u8) -> u32 {
    unsafe { read_at::<u32>(task, global(&TASK_STATE_OFFSET)) }
}

/// `task->exit_code`.
#[inline(always)]
pub unsafe fn exit_code(task: *const u8) -> u32 {
    unsafe { read_at::<i32>(task, global(&TASK_EXIT_CODE_OFFSET)) as u32 }
}

/// Whether `in_iowait` can be read (its offset was found in the kernel's BTF).
#[inline(always)]
pub fn in_iowait_known() -> bool {
    global(&TASK_IN_IOWAIT_MASK) != 0
}

/// `task->in_iowait`: set by io_schedule() for the duration of an I/O sleep.
#[inline(always)]
pub unsafe fn in_iowait(task: *const u8) -> bool {
    let mask = global(&TASK_IN_IOWAIT_MASK);
    if mask == 0 {
        return false;
    }
    let byte = unsafe { read_at::<u8>(task, global(&TASK_IN_IOWAIT_BYTE)) };
    (byte as u32) & mask != 0
}

/// `task->se.sum_exec_runtime`: the ns of CPU the kernel accounted to the task (what
/// rusage and schedstat report), or `NO_RUNTIME` when it cannot be read.
#[inline(always)]
pub unsafe fn sum_exec_runtime(task: *const u8) -> u64 {
    let offset = global(&TASK_SUM_EXEC_RUNTIME_OFFSET);
    if task.is_null() || offset == 0 {
        return NO_RUNTIME;
    }
    // SAFETY: as in read_at; a failed read is NO_RUNTIME, not a runtime of 0.
    unsafe { bpf_probe_read_kernel(task.add(offset as usize) as *const u64) }.unwrap_or(NO_RUNTIME)
}

/// Whether the exiting `task` was the last live thread of its process: its
/// `signal->live` count, decremented before the exit tracepoint, is 0.
#[inline(always)]
pub unsafe fn group_dead(task: *const u8) -> bool {
    let signal = unsafe { read_at::<u64>(task, global(&TASK_SIGNAL_OFFSET)) } as *const u8;
    if signal.is_null() {
        return false;
    }
    unsafe { read_at::<i32>(signal, global(&SIGNAL_LIVE_OFFSET)) == 0 }
}

/// `SIGNAL_GROUP_EXIT` (include/linux/sched/signal.h): exit_group or a fatal signal is
/// taking the whole thread group down.
const SIGNAL_GROUP_EXIT: u32 = 0x4;

/// Whether `task`'s thread group is exiting (exit_group, or a fatal signal): the
/// kernel wakes each of its sleeping threads to die, which is not a wakeup by work.
#[inline(always)]
pub unsafe fn group_exiting(task: *const u8) -> bool {
    let flags_offset = global(&SIGNAL_FLAGS_OFFSET);
    if task.is_null() || flags_offset == 0 {
        return false;
    }
    let signal = unsafe { read_at::<u64>(task, global(&TASK_SIGNAL_OFFSET)) } as *const u8;
    if signal.is_null() {
        return false;
    }
    unsafe { read_at::<u32>(signal, flags_offset) & SIGNAL_GROUP_EXIT != 0 }
}

/// Where `task`'s argv lies in its user memory: (`mm->arg_start`, `mm->arg_end`), or
/// None (no offsets, no mm: a kernel thread).
#[inline(always)]
pub unsafe fn arg_range(task: *const u8) -> Option<(u64, u64)> {
    let mm_offset = global(&TASK_MM_OFFSET);
    if task.is_null() || mm_offset == 0 {
        return None;
    }
    let mm = unsafe { read_at::<u64>(task, mm_offset) } as *const u8;
    if mm.is_null() {
        return None;
    }
    let start = unsafe { read_at::<u64>(mm, global(&MM_ARG_START_OFFSET)) };
    let end = unsafe { read_at::<u64>(mm, global(&MM_ARG_END_OFFSET)) };
    (start != 0 && end > start).then_some((start, end))
}
