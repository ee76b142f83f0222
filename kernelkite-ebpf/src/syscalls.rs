//! raw_syscalls sys_enter/sys_exit: remember the syscall in progress (for the class of
//! a sleep inside it) and count its latency into a per-(tgid, nr) histogram.

use core::ffi::c_void;

use aya_ebpf::bindings::BPF_NOEXIST;
use aya_ebpf::helpers::bpf_ktime_get_ns;
use aya_ebpf::macros::{btf_tracepoint, map};
use aya_ebpf::maps::Array;
use aya_ebpf::programs::tracing::StackIdContext;
use aya_ebpf::programs::BtfTracePointContext;
use aya_ebpf::EbpfContext;
use kernelkite_common::bpf::{
    lost, record_kind, sys_flags, syscall_kind, SlowSyscallRecord, SyscallHist, SyscallKey,
    ThreadState, COPIED_STACK, NO_CLASS, NO_PENDING, NO_STACK, NO_SYSCALL, SYSCALL_BEFORE_START,
};
use kernelkite_common::hist::{bucket_index, NUM_BUCKETS};

use crate::maps::{
    atomic_add, count_lost, hist_slot, is_gate, is_target, note_untraced, noted_untraced,
    notes_generation, split_pid_tgid, thread, traced_thread, EVENTS, SYSCALL_HISTS, SYSCALL_KIND,
};
use crate::{stacks, task};

/// Calls at least this slow are streamed as `SlowSyscallRecord`s; 0 disables.
#[unsafe(no_mangle)]
static MIN_LATENCY_NS: u64 = 0;
/// Offset of the second syscall argument in `struct pt_regs` (x86_64: `si`).
#[unsafe(no_mangle)]
static PT_REGS_ARG1_OFFSET: u32 = 0;

/// A zeroed histogram to insert from: a SyscallHist does not fit on the BPF stack.
#[map]
static ZERO_HIST: Array<SyscallHist> = Array::with_max_entries(1, 0);

// futex(2) operations that wait (FUTEX_CMD_MASK applied).
const FUTEX_WAIT: u64 = 0;
const FUTEX_LOCK_PI: u64 = 6;
const FUTEX_WAIT_BITSET: u64 = 9;
const FUTEX_WAIT_REQUEUE_PI: u64 = 11;
const FUTEX_LOCK_PI2: u64 = 13;
const FUTEX_CMD_MASK: u64 = !(128 | 256);

/// 1 when syscall `nr` is a lock wait; `futex_op` reads futex's second argument.
#[inline(always)]
fn is_lock_wait(nr: u32, futex_op: impl FnOnce() -> u64) -> u32 {
    let Some(kind) = SYSCALL_KIND.get(nr) else {
        return 0;
    };
    match *kind {
        syscall_kind::LOCK => 1,
        syscall_kind::FUTEX => match futex_op() & FUTEX_CMD_MASK {
            FUTEX_WAIT
            | FUTEX_WAIT_BITSET
            | FUTEX_LOCK_PI
            | FUTEX_LOCK_PI2
            | FUTEX_WAIT_REQUEUE_PI => 1,
            _ => 0,
        },
        _ => 0,
    }
}

/// sys_enter, whatever the hook: the running thread's (tgid, tid), `nr`, the first
/// argument (0 where the hook does not read it), and a reader of the second.
#[inline(always)]
pub fn on_enter(ids: (u32, u32), nr: u32, arg0: u64, arg1: impl FnOnce() -> u64) -> i32 {
    let Some((_, _, t)) = traced_thread(ids.0, ids.1) else {
        return 0;
    };
    enter_traced(t, nr, arg0, arg1);
    0
}

/// sys_enter of a traced thread, state `t`.
#[inline(always)]
fn enter_traced(t: &mut ThreadState, nr: u32, arg0: u64, arg1: impl FnOnce() -> u64) {
    t.sys_nr = nr;
    t.sys_arg0 = arg0;
    t.sys_is_lock = is_lock_wait(nr, arg1);
    t.sys_flags = 0;
    t.sys_user_stack_id = NO_STACK;
    // SAFETY: helper call without preconditions.
    t.sys_enter_ns = unsafe { bpf_ktime_get_ns() };
}

/// sys_exit where the hook has no task pointer (classic tracepoints): the running
/// thread's (tgid, tid); `ret` reads the return value.
#[inline(always)]
pub fn on_exit<C: StackIdContext>(ctx: &C, ids: (u32, u32), ret: impl FnOnce() -> i64) -> i32 {
    let Some((tgid, tid, t)) = traced_thread(ids.0, ids.1) else {
        return 0;
    };
    exit_traced::<_, false>(ctx, tgid, tid, t, core::ptr::null(), ret)
}

/// sys_exit of traced thread `tid` of `tgid`, state `t`; `current`: its task's BTF
/// pointer (`BTF`, tp_btf), or null.
#[inline(always)]
fn exit_traced<C: StackIdContext, const BTF: bool>(
    ctx: &C,
    tgid: u32,
    tid: u32,
    t: &mut ThreadState,
    current: *const u8,
    ret: impl FnOnce() -> i64,
) -> i32 {
    let nr = t.sys_nr;
    if nr == NO_SYSCALL {
        // Entered before we attached (or a fork child returning): no start time.
        return 0;
    }
    let gate = is_gate(tid);
    if gate {
        // kernelkite's own stack (the gate waiting to exec the command): its frames
        // would be resolved with the command's mappings. The time keeps no stack.
        t.pending_class = NO_PENDING;
    } else {
        stacks::on_sys_exit(ctx, tgid, tid, t);
    }
    t.sys_nr = NO_SYSCALL;
    t.sys_is_lock = 0;
    let flags = t.sys_flags;
    t.sys_flags = 0;
    if gate {
        // Still kernelkite's gate process: its syscalls are not the command's.
        return 0;
    }
    let start_ns = t.sys_enter_ns;
    // SAFETY: helper call without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let latency_ns = now.saturating_sub(start_ns);
    if flags & sys_flags::BEFORE_START != 0 {
        // Running since before attach: its own row, the part inside the session only,
        // and no slow-call record (its start is unknown).
        count_latency::<BTF>(
            SyscallKey {
                tgid,
                nr: nr | SYSCALL_BEFORE_START,
            },
            tid,
            latency_ns,
            current,
        );
        return 0;
    }
    count_latency::<BTF>(SyscallKey { tgid, nr }, tid, latency_ns, current);

    // SAFETY: a read-only global set at load time.
    let min = unsafe { core::ptr::read_volatile(&MIN_LATENCY_NS) };
    if min != 0 && latency_ns >= min {
        // The copy goes first: userspace then has it when the slow call's record comes.
        let user_stack_id = if !stacks::enabled() {
            NO_STACK
        } else if stacks::send_copy(
            NO_CLASS,
            start_ns,
            0,
            0,
            0,
            0,
            false,
            stacks::CopyRate::Budgeted,
        ) {
            COPIED_STACK
        } else if t.sys_user_stack_id >= 0 {
            // The frame-pointer stack a switch-out inside the call took.
            t.sys_user_stack_id
        } else {
            stacks::user_stack(ctx) as i32
        };
        match EVENTS.reserve::<SlowSyscallRecord>(0) {
            Some(mut entry) => {
                entry.write(SlowSyscallRecord {
                    kind: record_kind::SLOW_SYSCALL,
                    tgid,
                    tid,
                    nr,
                    start_ns,
                    duration_ns: latency_ns,
                    ret: ret(),
                    user_stack_id,
                    _pad: 0,
                });
                entry.submit(0);
            }
            None => count_lost(lost::SLOW_RECORD),
        }
    }
    0
}

/// sys_enter: first this CPU's note of an untraced task (`maps::UNTRACED_CPU`: a few
/// loads, no helper call, nothing on the stack), which every syscall of the machine
/// runs. The rest stays inline: out of line it saved an untraced syscall about 0.5 ns
/// and cost a traced one 2-3 (docs/PERFORMANCE.md).
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> i32 {
    if noted_untraced(ctx.arg::<u64>(0)) {
        return 0;
    }
    sys_enter_unnoted(ctx.as_ptr())
}

/// sys_enter of a task without a note: the bit test (and a note if it fails), then the
/// syscall's start.
#[inline(always)]
fn sys_enter_unnoted(ctx: *mut c_void) -> i32 {
    let ctx = BtfTracePointContext::new(ctx);
    let regs: *const u8 = ctx.arg(0);
    let generation = notes_generation();
    let (tgid, tid) = split_pid_tgid();
    if !is_target(tgid) {
        note_untraced(regs as u64, generation);
        return 0;
    }
    let Some(t) = thread(tid) else {
        return 0;
    };
    enter_traced(t, ctx.arg::<i64>(1) as u32, 0, || {
        // SAFETY: regs is the tracepoint's BTF-typed pt_regs; the offset comes from BTF.
        let off = unsafe { core::ptr::read_volatile(&PT_REGS_ARG1_OFFSET) };
        unsafe { task::load::<u64>(regs, off) }
    });
    0
}

/// sys_exit: the note, then the rest out of line, which takes the context as a raw
/// pointer (a reference would put it on the stack first): the program every syscall
/// runs keeps a small frame.
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> i32 {
    if noted_untraced(ctx.arg::<u64>(0)) {
        return 0;
    }
    sys_exit_unnoted(ctx.as_ptr())
}

/// sys_exit of a task without a note: the bit test (and a note if it fails), then the
/// syscall's end.
#[inline(never)]
// A fixed symbol: a mangled one carries the crate's hash, which changes with the
// checkout's path, and the committed object must match a fresh build anywhere.
#[unsafe(no_mangle)]
fn sys_exit_unnoted(ctx: *mut c_void) -> i32 {
    let ctx = BtfTracePointContext::new(ctx);
    let generation = notes_generation();
    // One helper call for the task: its tgid here, its tid and thread count below.
    let current = task::current_btf();
    // SAFETY: the current task's BTF pointer.
    let tgid = unsafe { task::tgid::<true>(current) };
    if !is_target(tgid) {
        note_untraced(ctx.arg::<u64>(0), generation);
        return 0;
    }
    // SAFETY: the current task's BTF pointer.
    let tid = unsafe { task::pid::<true>(current) };
    let Some(t) = thread(tid) else {
        return 0;
    };
    exit_traced::<_, true>(&ctx, tgid, tid, t, current, || ctx.arg::<i64>(1))
}

/// Count one call of `latency_ns` by thread `tid` (task `current`, its BTF pointer
/// with `BTF`, or null) into `key`'s histogram: the thread's slot, whose one writer it
/// is (a thread's calls end one at a time), so plain adds are exact. In the overflow,
/// shared by the process's threads, the adds are atomic (about 5 ns more per call
/// here) unless the thread is its process's only one (`task::alone`).
#[inline(always)]
fn count_latency<const BTF: bool>(key: SyscallKey, tid: u32, latency_ns: u64, current: *const u8) {
    let idx = bucket_index(latency_ns);
    if let Some(hist) = hist_slot(key, tid) {
        // SAFETY: a map value, valid while the program runs, with this thread its
        // only writer.
        unsafe { add_plain(hist, idx, latency_ns) };
        return;
    }
    let hist = match SYSCALL_HISTS.get_ptr_mut(&key) {
        Some(h) => h,
        None => {
            let Some(zero) = ZERO_HIST.get(0) else {
                return;
            };
            // Another CPU may insert the same key first: NOEXIST then fails harmlessly
            // and the lookup below finds its entry.
            let _ = SYSCALL_HISTS.insert(&key, zero, BPF_NOEXIST as u64);
            match SYSCALL_HISTS.get_ptr_mut(&key) {
                Some(h) => h,
                None => {
                    count_lost(lost::HIST_FULL);
                    return;
                }
            }
        }
    };
    // SAFETY: a map value, valid while the program runs. Alone, this thread is its only
    // writer; otherwise every update below is atomic except `max_ns`, which is raised
    // with compare-and-swap.
    unsafe {
        if task::alone::<BTF>(current) {
            add_plain(hist, idx, latency_ns);
            return;
        }
        atomic_add(&raw mut (*hist).total_ns, latency_ns);
        if idx < NUM_BUCKETS {
            atomic_add(&raw mut (*hist).buckets[idx], 1);
        }
        raise_max(&raw mut (*hist).max_ns, latency_ns);
    }
}

/// Count a call of `latency_ns` (bucket `idx`) into `hist` with plain adds.
#[inline(always)]
unsafe fn add_plain(hist: *mut SyscallHist, idx: usize, latency_ns: u64) {
    // SAFETY: the caller's: a map value with no other writer now.
    unsafe {
        (*hist).total_ns += latency_ns;
        if idx < NUM_BUCKETS {
            (*hist).buckets[idx] += 1;
        }
        if latency_ns > (*hist).max_ns {
            (*hist).max_ns = latency_ns;
        }
    }
}

/// `*p = max(*p, v)` with a few compare-and-swap attempts (BPF has no atomic max; a
/// loss needs four concurrent larger updates in a row).
#[inline(always)]
unsafe fn raise_max(p: *mut u64, v: u64) {
    let mut seen = unsafe { core::ptr::read_volatile(p) };
    let mut tries = 0;
    while v > seen && tries < 4 {
        let (old, ok) = unsafe {
            core::intrinsics::atomic_cxchg::<
                u64,
                { core::intrinsics::AtomicOrdering::Relaxed },
                { core::intrinsics::AtomicOrdering::Relaxed },
            >(p, seen, v)
        };
        if ok {
            return;
        }
        seen = old;
        tries += 1;
    }
}
