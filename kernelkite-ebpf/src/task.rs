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
/// `task->comm` (0: not set, classic tracepoints).
#[unsafe(no_mangle)]
static TASK_COMM_OFFSET: u32 = 0;
/// `task->se.sum_exec_runtime` (0: not set, classic tracepoints).
#[unsafe(no_mangle)]
static TASK_SUM_EXEC_RUNTIME_OFFSET: u32 = 0;
/// `task->on_cpu` (0: not set, or a kernel without the field).
#[unsafe(no_mangle)]
static TASK_ON_CPU_OFFSET: u32 = 0;
/// `task->flags`, and the syscall number's slot in `struct pt_regs` (`orig_ax`,
/// `syscallno`); 0: not set, and no softirq is taken for a task's own.
#[unsafe(no_mangle)]
static TASK_FLAGS_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static PT_REGS_SYSCALL_NR_OFFSET: u32 = 0;

/// `PF_KTHREAD` in `task->flags` (include/linux/sched.h).
const PF_KTHREAD: u32 = 0x0020_0000;

#[inline(always)]
fn global(v: &'static u32) -> u32 {
    // SAFETY: reading our own static; volatile so the value patched in by the loader is
    // used instead of the compile-time 0.
    unsafe { core::ptr::read_volatile(v) }
}

/// How a task pointer is read: `BTF` is true for a pointer the kernel typed (tp_btf
/// arguments, `bpf_get_current_task_btf`), loaded directly, and false for an untyped one
/// (`bpf_get_current_task`, classic tracepoints), read with `bpf_probe_read_kernel`.
/// A direct load is a plain instruction, which the verifier checks against the
/// kernel's BTF (the offsets are frozen read-only globals, so it knows them) and makes
/// fault-safe; the helper is a call, about 10 ns on every hook that reads a task.
#[inline(always)]
unsafe fn read_at<T: Copy + Default, const BTF: bool>(task: *const u8, offset: u32) -> T {
    if BTF {
        // SAFETY: a BTF task pointer: the verifier checks the access (BPF_PROBE_MEM).
        return unsafe { load(task, offset) };
    }
    // SAFETY: `task` is a task_struct pointer handed to us by the tracepoint; a failed
    // read yields the default.
    unsafe { bpf_probe_read_kernel(task.add(offset as usize) as *const T).unwrap_or_default() }
}

/// A field of a kernel struct the hook was handed as a BTF pointer (`tp_btf` arguments,
/// `bpf_get_current_task_btf`), loaded directly: the offset is a frozen read-only global,
/// so the verifier knows it and checks the access against the kernel's BTF, and the load
/// is a plain instruction where `bpf_probe_read_kernel` is a helper call.
#[inline(always)]
pub unsafe fn load<T: Copy>(task: *const u8, offset: u32) -> T {
    // SAFETY: the verifier turns this load into a fault-safe one (BPF_PROBE_MEM).
    unsafe { core::ptr::read_volatile(task.add(offset as usize) as *const T) }
}

/// The running thread's task_struct, as a BTF pointer. A helper call on this kernel
/// (6.18 does not inline it), as `bpf_get_current_pid_tgid` is: take it only where the
/// task's fields are read anyway.
#[inline(always)]
pub fn current_btf() -> *const u8 {
    // SAFETY: helper call without preconditions (tp_btf and other BTF-aware hooks).
    unsafe { aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8 }
}

/// `current->comm` (the BTF pointer [`current_btf`] gave) as its two words: two
/// loads, where `bpf_get_current_comm` is a helper call that copies it byte by byte.
#[inline(always)]
pub fn comm_words_of(current: *const u8) -> [u64; 2] {
    let offset = global(&TASK_COMM_OFFSET);
    // SAFETY: a BTF task pointer; both words lie inside `char comm[16]`, which the
    // verifier checks.
    unsafe {
        [
            load::<u64>(current, offset),
            load::<u64>(current, offset + 8),
        ]
    }
}

/// (tgid, tid) of `current`, the BTF pointer [`current_btf`] gave.
#[inline(always)]
pub fn current_ids_of(current: *const u8) -> (u32, u32) {
    // SAFETY: a BTF pointer to the current task, never null in task context.
    let (tid, tgid) = unsafe { ids::<true>(current) };
    (tgid, tid)
}

/// `task->pid` (the thread id).
#[inline(always)]
pub unsafe fn pid<const BTF: bool>(task: *const u8) -> u32 {
    unsafe { read_at::<i32, BTF>(task, global(&TASK_PID_OFFSET)) as u32 }
}

/// (`task->pid`, `task->tgid`): two loads of a BTF pointer (the verifier checks each
/// against its member); one 8-byte probe read otherwise where the two are adjacent, as
/// they are in every kernel so far (two reads where they are not).
#[inline(always)]
pub unsafe fn ids<const BTF: bool>(task: *const u8) -> (u32, u32) {
    let pid_offset = global(&TASK_PID_OFFSET);
    if !BTF && global(&TASK_TGID_OFFSET) == pid_offset + 4 {
        let both = unsafe { read_at::<u64, BTF>(task, pid_offset) };
        // Little-endian (bpfel): pid is the low half.
        (both as u32, (both >> 32) as u32)
    } else {
        unsafe { (pid::<BTF>(task), tgid::<BTF>(task)) }
    }
}

/// `task->tgid` (the process id).
#[inline(always)]
pub unsafe fn tgid<const BTF: bool>(task: *const u8) -> u32 {
    unsafe { read_at::<i32, BTF>(task, global(&TASK_TGID_OFFSET)) as u32 }
}

/// `task->__state` (`state` before 5.14).
#[inline(always)]
pub unsafe fn state<const BTF: bool>(task: *const u8) -> u32 {
    unsafe { read_at::<u32, BTF>(task, global(&TASK_STATE_OFFSET)) }
}

/// `task->exit_code`.
#[inline(always)]
pub unsafe fn exit_code<const BTF: bool>(task: *const u8) -> u32 {
    unsafe { read_at::<i32, BTF>(task, global(&TASK_EXIT_CODE_OFFSET)) as u32 }
}

/// Whether `task` (a BTF pointer, or null) is known to be off every CPU: its `on_cpu`
/// is 0. False when that cannot be read.
#[inline(always)]
pub fn off_cpu(task: *const u8) -> bool {
    let offset = global(&TASK_ON_CPU_OFFSET);
    // SAFETY: a BTF task pointer; the offset is the kernel's own for `int on_cpu`.
    !task.is_null() && offset != 0 && unsafe { load::<i32>(task, offset) } == 0
}

/// Whether `current` (a BTF pointer to the running task, or null) is a user task inside
/// a syscall: not a kernel thread (ksoftirqd runs softirqs for everyone), and its user
/// registers' syscall number is a syscall's (-1 outside one).
#[inline(always)]
pub fn in_own_syscall(current: *const u8) -> bool {
    let (flags_offset, nr_offset) = (
        global(&TASK_FLAGS_OFFSET),
        global(&PT_REGS_SYSCALL_NR_OFFSET),
    );
    if current.is_null() || flags_offset == 0 || nr_offset == 0 {
        return false;
    }
    // SAFETY: a BTF task pointer; the offset is the kernel's own for `flags`.
    if unsafe { load::<u32>(current, flags_offset) } & PF_KTHREAD != 0 {
        return false;
    }
    // SAFETY: the helper takes a BTF task pointer and returns a BTF pt_regs pointer.
    let regs =
        unsafe { aya_ebpf::helpers::generated::bpf_task_pt_regs(current as *mut _) } as *const u8;
    // SAFETY: a BTF pt_regs pointer (null-checked), the kernel's own offset.
    !regs.is_null() && unsafe { load::<i64>(regs, nr_offset) } >= 0
}

/// Whether `in_iowait` can be read (its offset was found in the kernel's BTF).
#[inline(always)]
pub fn in_iowait_known() -> bool {
    global(&TASK_IN_IOWAIT_MASK) != 0
}

/// `task->in_iowait`: set by io_schedule() for the duration of an I/O sleep.
#[inline(always)]
pub unsafe fn in_iowait<const BTF: bool>(task: *const u8) -> bool {
    let mask = global(&TASK_IN_IOWAIT_MASK);
    if mask == 0 {
        return false;
    }
    let byte = unsafe { read_at::<u8, BTF>(task, global(&TASK_IN_IOWAIT_BYTE)) };
    (byte as u32) & mask != 0
}

/// `task->se.sum_exec_runtime`: the ns of CPU the kernel accounted to the task (what
/// rusage and schedstat report), or `NO_RUNTIME` when it cannot be read.
#[inline(always)]
pub unsafe fn sum_exec_runtime<const BTF: bool>(task: *const u8) -> u64 {
    let offset = global(&TASK_SUM_EXEC_RUNTIME_OFFSET);
    if task.is_null() || offset == 0 {
        return NO_RUNTIME;
    }
    if BTF {
        // SAFETY: as in read_at.
        return unsafe { load(task, offset) };
    }
    // SAFETY: as in read_at; a failed read is NO_RUNTIME, not a runtime of 0.
    unsafe { bpf_probe_read_kernel(task.add(offset as usize) as *const u64) }.unwrap_or(NO_RUNTIME)
}

/// Whether the exiting `task` was the last live thread of its process: its
/// `signal->live` count, decremented before the exit tracepoint, is 0.
#[inline(always)]
pub unsafe fn group_dead<const BTF: bool>(task: *const u8) -> bool {
    let live = unsafe { live_threads::<BTF>(task) };
    live == Some(0)
}

/// `task->signal->live`: its process's live threads (None without a signal_struct).
#[inline(always)]
unsafe fn live_threads<const BTF: bool>(task: *const u8) -> Option<i32> {
    let signal = unsafe { read_at::<u64, BTF>(task, global(&TASK_SIGNAL_OFFSET)) } as *const u8;
    if signal.is_null() {
        return None;
    }
    Some(unsafe { read_at::<i32, BTF>(signal, global(&SIGNAL_LIVE_OFFSET)) })
}

/// Whether `current`, the running thread's BTF task pointer, is the only live thread
/// of its process (`signal->live` is 1); false without a BTF pointer (classic
/// tracepoints), where the probe reads would cost more than they save. Only a thread
/// of the process can start another (clone raises `live` before the new thread runs)
/// and a thread lowers it in do_exit, after its last sys_exit; so while the running thread sees 1, no other thread of its process can
/// run a syscall hook, and its per-process counters have a single writer.
#[inline(always)]
pub fn alone<const BTF: bool>(current: *const u8) -> bool {
    if !BTF || current.is_null() {
        return false;
    }
    // SAFETY: the current task's BTF pointer; both loads are checked by the verifier.
    let live = unsafe { live_threads::<true>(current) };
    live == Some(1)
}

/// `SIGNAL_GROUP_EXIT` (include/linux/sched/signal.h): exit_group or a fatal signal is
/// taking the whole thread group down.
const SIGNAL_GROUP_EXIT: u32 = 0x4;

/// Whether `task`'s thread group is exiting (exit_group, or a fatal signal): the
/// kernel wakes each of its sleeping threads to die, which is not a wakeup by work.
#[inline(always)]
pub unsafe fn group_exiting<const BTF: bool>(task: *const u8) -> bool {
    let flags_offset = global(&SIGNAL_FLAGS_OFFSET);
    if task.is_null() || flags_offset == 0 {
        return false;
    }
    let signal = unsafe { read_at::<u64, BTF>(task, global(&TASK_SIGNAL_OFFSET)) } as *const u8;
    if signal.is_null() {
        return false;
    }
    unsafe { read_at::<u32, BTF>(signal, flags_offset) & SIGNAL_GROUP_EXIT != 0 }
}

/// Where `task`'s argv lies in its user memory: (`mm->arg_start`, `mm->arg_end`), or
/// None (no offsets, no mm: a kernel thread).
#[inline(always)]
pub unsafe fn arg_range<const BTF: bool>(task: *const u8) -> Option<(u64, u64)> {
    let mm_offset = global(&TASK_MM_OFFSET);
    if task.is_null() || mm_offset == 0 {
        return None;
    }
    let mm = unsafe { read_at::<u64, BTF>(task, mm_offset) } as *const u8;
    if mm.is_null() {
        return None;
    }
    let start = unsafe { read_at::<u64, BTF>(mm, global(&MM_ARG_START_OFFSET)) };
    let end = unsafe { read_at::<u64, BTF>(mm, global(&MM_ARG_END_OFFSET)) };
    (start != 0 && end > start).then_some((start, end))
}
