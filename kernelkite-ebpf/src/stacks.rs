//! `--stacks`: where each latency class's time goes, by stack, summed in the kernel.
//!
//! Capturing a stack at every context switch (what offcputime does) is what makes
//! off-CPU profilers expensive, so kernelkite captures only where it matters:
//! - an off-CPU period of at least `STACK_MIN_BLOCK_NS` gets its stacks and exact time;
//!   a shorter one gets them with probability `len / STACK_MIN_BLOCK_NS`, weighted as
//!   the threshold (an unbiased estimate, kept apart as `StackTime::estimated_ns`);
//! - for a longer one, the thread's kernel stack is read when it is switched back in
//!   (it is still the stack it slept on) with `bpf_get_task_stack`;
//! - its user stack cannot be read from another task, so: inside a syscall it is taken
//!   at that syscall's sys_exit (the user side has not moved since the call began);
//!   outside a syscall (preemption, page fault) it is taken at switch-out, which
//!   happens at most once per scheduler slice or fault. Inside a syscall it may also be
//!   taken at a switch-out, once per call, rate-limited per thread (`on_switch_out`).
//!
//! On-CPU time is sampled by a perf event at `--sample-hz`.
//! Every stack that could not be captured or stored is counted in `LOST[STACK]`.
//!
//! User stacks: frame-pointer walks (`bpf_get_stackid`) skip the caller of every
//! function built without frame pointers (glibc, libstdc++, Rust std). So where a user
//! stack is taken, the thread's user registers and the top `STACK_COPY_BYTES` of its
//! stack are copied into a STACK_COPY ring-buffer record with the time it stands for,
//! and userspace unwinds it with the binaries' `.eh_frame` (docs/STACKS.md). A copy is
//! sent at most once per `STACK_COPY_INTERVAL_NS` per CPU on average (bursts of
//! `COPY_BURST` allowed; on-CPU samples, bounded by `--sample-hz`, are kept off that
//! budget) and only while the ring buffer is less than half full; past that the
//! frame-pointer stack is kept instead (counted in `LOST[STACK_COPY]`).

use aya_ebpf::bindings::{BPF_F_USER_STACK, BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_RING_SIZE};
use aya_ebpf::helpers::generated::{bpf_probe_read_user, bpf_task_pt_regs};
use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_get_prandom_u32, bpf_get_stack,
    bpf_get_task_stack, bpf_ktime_get_ns, bpf_probe_read_kernel,
};
use aya_ebpf::macros::{map, perf_event};
use aya_ebpf::maps::{HashMap, PerCpuArray, StackTrace};
use aya_ebpf::programs::tracing::StackIdContext;
use aya_ebpf::programs::PerfEventContext;
use aya_ebpf::EbpfContext;
use kernelkite_common::bpf::{
    copy_flags, lost, record_kind, run_state, KernelStack, StackCaptureRecord, StackKey, StackTime,
    ThreadState, COPIED_STACK, KERNEL_STACK_DEPTH, NO_CLASS, NO_PENDING, NO_STACK, NO_SYSCALL,
    STACK_COPY_BYTES, STACK_COPY_CHUNK,
};
use kernelkite_common::LatencyClass;

use crate::maps::{atomic_add, count_lost, current_thread, is_gate, EVENTS};

/// Off-CPU periods at least this long get stacks; 0 turns stacks off (set by userspace).
#[unsafe(no_mangle)]
static STACK_MIN_BLOCK_NS: u64 = 0;
/// Nanoseconds one on-CPU sample stands for: 1e9 / `--sample-hz`.
#[unsafe(no_mangle)]
static SAMPLE_PERIOD_NS: u64 = 0;

/// User stacks, by id (`bpf_get_stackid`). Userspace sizes it (1 entry without --stacks).
#[map]
pub static USER_STACKS: StackTrace = StackTrace::with_max_entries(16_384, 0);

/// Kernel stacks, keyed by a hash of their addresses.
#[map]
pub static KERNEL_STACKS: HashMap<u64, KernelStack> = HashMap::with_max_entries(8_192, 0);

/// Time per (thread, class, user stack, kernel stack).
#[map]
pub static STACK_TIMES: HashMap<StackKey, StackTime> = HashMap::with_max_entries(16_384, 0);

/// A kernel stack being captured: it does not fit on the BPF stack.
#[map]
static STACK_SCRATCH: PerCpuArray<KernelStack> = PerCpuArray::with_max_entries(1, 0);

/// Average ns between two stack copies on a CPU; 0 sends none (set by userspace).
#[unsafe(no_mangle)]
static STACK_COPY_INTERVAL_NS: u64 = 0;
/// Offsets of the instruction, stack and frame pointers in `struct pt_regs` (BTF).
#[unsafe(no_mangle)]
static PT_REGS_IP_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static PT_REGS_SP_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static PT_REGS_BP_OFFSET: u32 = 0;

/// Copies a CPU may send at once after a quiet time (the budget's cap, in intervals).
const COPY_BURST: u64 = 64;

/// A stack copy being assembled. The slack after the stack lets the verifier see that
/// a chunk read at any offset below `STACK_COPY_BYTES` stays inside the value.
#[repr(C)]
pub struct StackCopy {
    record: StackCaptureRecord,
    stack: [u8; STACK_COPY_BYTES + 2 * STACK_COPY_CHUNK],
}

#[map]
static COPY_SCRATCH: PerCpuArray<StackCopy> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: [credit in ns, last refill ns] of the copy rate bound.
#[map]
static COPY_BUDGET: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

const EFAULT: i32 = 14;

#[inline(always)]
fn global_u32(v: &'static u32) -> usize {
    // SAFETY: a read-only global set at load time.
    unsafe { core::ptr::read_volatile(v) as usize }
}

/// What bounds the rate of a kind of copy.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CopyRate {
    /// Copies the scheduler and syscalls drive (switch-outs, long blocks, slow calls):
    /// their rate has no bound of its own, so they draw on the per-CPU budget.
    Budgeted,
    /// On-CPU samples: the perf event already bounds them to --sample-hz per CPU. Kept
    /// off the budget, a burst of switch-out copies (a server blocking in epoll_wait
    /// a thousand times a second) cannot leave the on-CPU samples with frame-pointer
    /// stacks, which stop at the first caller built without one.
    SampleHz,
    /// As `Budgeted`, but the caller tries again later when the copy is not sent, so
    /// it is not counted as a copy not sent here.
    BudgetedRetried,
}

/// Average ns between two budgeted copies on a CPU; 0 when copies are off.
#[inline(always)]
fn copy_interval_ns() -> u64 {
    // SAFETY: a read-only global set at load time.
    unsafe { core::ptr::read_volatile(&STACK_COPY_INTERVAL_NS) }
}

/// Whether user-stack copies are on (`--stacks` on x86_64).
#[inline(always)]
fn copies_on() -> bool {
    copy_interval_ns() != 0
}

/// Whether the rate bound and the ring buffer allow one more copy now.
#[inline(always)]
fn may_copy(interval_ns: u64, rate: CopyRate) -> bool {
    let size = EVENTS.query(BPF_RB_RING_SIZE as u64);
    let queued = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    // Half the ring stays for lifecycle records and slow calls.
    if queued + core::mem::size_of::<StackCopy>() as u64 > size / 2 {
        return false;
    }
    if rate == CopyRate::SampleHz {
        return true;
    }
    let Some(budget) = COPY_BUDGET.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: helper call without preconditions; budget is this CPU's value.
    let now = unsafe { bpf_ktime_get_ns() };
    let b = unsafe { &mut *budget };
    let cap = interval_ns * COPY_BURST;
    let mut credit = b[0] + now.saturating_sub(b[1]);
    if b[1] == 0 || credit > cap {
        credit = cap;
    }
    b[1] = now;
    if credit < interval_ns {
        b[0] = credit;
        return false;
    }
    b[0] = credit - interval_ns;
    true
}

/// Send the running thread's user registers and stack top, with the time they stand
/// for (`class` NO_CLASS: sent later, joined on (tid, `capture_ns`)). Returns whether
/// the copy went out; when not (and copies are on) it is counted in `LOST[STACK_COPY]`.
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one capture record"
)]
pub fn send_copy(
    class: u32,
    capture_ns: u64,
    kernel_stack: u64,
    class_ns: u64,
    runq_ns: u64,
    count: u64,
    sampled: bool,
    rate: CopyRate,
) -> bool {
    let interval_ns = copy_interval_ns();
    if interval_ns == 0 {
        return false;
    }
    // A copy the caller tries again later is counted there if it is not sent then.
    let not_sent = || {
        if rate != CopyRate::BudgetedRetried {
            count_lost(lost::STACK_COPY);
        }
        false
    };
    if !may_copy(interval_ns, rate) {
        return not_sent();
    }
    let Some(buf) = COPY_SCRATCH.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: the current task, as a BTF pointer; its user registers at kernel entry.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf() as *mut _) } as *const u8;
    if regs.is_null() {
        return not_sent();
    }
    let reg = |off: &'static u32| {
        // SAFETY: regs is the task's pt_regs; the offsets come from BTF.
        unsafe { bpf_probe_read_kernel(regs.add(global_u32(off)) as *const u64) }.unwrap_or(0)
    };
    let (ip, sp, bp) = (
        reg(&PT_REGS_IP_OFFSET),
        reg(&PT_REGS_SP_OFFSET),
        reg(&PT_REGS_BP_OFFSET),
    );
    if sp == 0 || ip == 0 {
        return not_sent();
    }
    // SAFETY: buf is this CPU's scratch value.
    let copy = unsafe { &mut *buf };
    let mut copied: usize = 0;
    let mut flags = if sampled { copy_flags::SAMPLED } else { 0 };
    let mut addr = sp;
    for _ in 0..STACK_COPY_BYTES / STACK_COPY_CHUNK + 1 {
        if copied >= STACK_COPY_BYTES {
            break;
        }
        // Up to the end of the page, then whole pages.
        let mut len = STACK_COPY_CHUNK - (addr as usize & (STACK_COPY_CHUNK - 1));
        if len > STACK_COPY_BYTES - copied {
            len = STACK_COPY_BYTES - copied;
        }
        let len = len & (2 * STACK_COPY_CHUNK - 1);
        let off = copied & (STACK_COPY_BYTES - 1);
        // SAFETY: off + len stays inside `stack` (its slack); the source is user memory
        // of the current task, read without faulting.
        let r = unsafe {
            bpf_probe_read_user(
                copy.stack.as_mut_ptr().add(off) as *mut _,
                len as u32,
                addr as *const _,
            )
        };
        if r != 0 {
            flags |= copy_flags::SHORT;
            break;
        }
        copied += len;
        addr += len as u64;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    copy.record = StackCaptureRecord {
        kind: record_kind::STACK_COPY,
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        class,
        capture_ns,
        kernel_stack,
        class_ns,
        runq_ns,
        count,
        ip,
        sp,
        bp,
        stack_len: copied as u32,
        flags,
    };
    let total = core::mem::size_of::<StackCaptureRecord>() + (copied & (2 * STACK_COPY_BYTES - 1));
    if total > core::mem::size_of::<StackCaptureRecord>() + STACK_COPY_BYTES {
        return false;
    }
    // SAFETY: the first `total` bytes of the scratch value.
    let bytes = unsafe { core::slice::from_raw_parts(buf as *const u8, total) };
    if EVENTS.output::<[u8]>(bytes, 0).is_err() {
        return not_sent();
    }
    true
}

/// The times of a switch-out copy (`capture_ns` joins them to it).
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one capture record"
)]
fn send_period(
    tgid: u32,
    tid: u32,
    class: u32,
    capture_ns: u64,
    kernel_stack: u64,
    class_ns: u64,
    runq_ns: u64,
    count: u64,
    weight: Weight,
) {
    match EVENTS.reserve::<StackCaptureRecord>(0) {
        Some(mut entry) => {
            entry.write(StackCaptureRecord {
                kind: record_kind::STACK_PERIOD,
                tgid,
                tid,
                class,
                capture_ns,
                kernel_stack,
                class_ns,
                runq_ns,
                count,
                flags: if weight == Weight::Sampled {
                    copy_flags::SAMPLED
                } else {
                    0
                },
                ..StackCaptureRecord::default()
            });
            entry.submit(0);
        }
        None => count_lost(lost::STACK),
    }
}

#[inline(always)]
fn min_block_ns() -> u64 {
    // SAFETY: a read-only global set at load time.
    unsafe { core::ptr::read_volatile(&STACK_MIN_BLOCK_NS) }
}

#[inline(always)]
pub fn enabled() -> bool {
    min_block_ns() != 0
}

/// The running thread's user stack id, or NO_STACK (counted lost unless the thread has
/// no user stack at all, as kernel threads do).
#[inline(always)]
pub fn user_stack<C: StackIdContext>(ctx: &C) -> i64 {
    match ctx.get_stackid(&USER_STACKS, BPF_F_USER_STACK as u64) {
        Ok(id) => id,
        Err(e) => {
            if e != -EFAULT {
                count_lost(lost::STACK);
            }
            NO_STACK as i64
        }
    }
}

/// Store the `len_bytes` of addresses in the scratch buffer as a kernel stack; returns
/// its key, or 0 when it could not be stored.
#[inline(always)]
fn store_kernel_stack(buf: *mut KernelStack, len_bytes: i64) -> u64 {
    if len_bytes <= 0 {
        count_lost(lost::STACK);
        return 0;
    }
    // FNV-1a over the addresses; the rest of the buffer is zero-filled by the helper.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for i in 0..KERNEL_STACK_DEPTH {
        // SAFETY: buf is the per-CPU scratch value, KERNEL_STACK_DEPTH entries long.
        let ip = unsafe { (*buf)[i] };
        if ip == 0 {
            break;
        }
        hash = (hash ^ ip).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let key = if hash == 0 { 1 } else { hash };
    // SAFETY: buf points to a map value of the right type.
    match KERNEL_STACKS.insert(&key, unsafe { &*buf }, BPF_NOEXIST as u64) {
        Ok(()) => key,
        // Already stored (the same stack seen before).
        Err(-17) => key,
        Err(_) => {
            count_lost(lost::STACK);
            0
        }
    }
}

/// The kernel stack of a task that is not running (it is about to be switched in).
#[inline(always)]
fn kernel_stack_of(task: *const u8) -> u64 {
    let Some(buf) = STACK_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let size = core::mem::size_of::<KernelStack>() as u32;
    // SAFETY: task is the tracepoint's task_struct; buf holds `size` bytes.
    let n = unsafe { bpf_get_task_stack(task as *mut _, buf as *mut _, size, 0) };
    store_kernel_stack(buf, n)
}

/// How an off-CPU period's time goes into `STACK_TIMES`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Weight {
    /// At least the threshold long: its exact time.
    Exact,
    /// Shorter, captured with probability `len / threshold`: weighted as the threshold.
    Sampled,
}

#[inline(always)]
fn add(key: &StackKey, ns: u64, count: u64, weight: Weight) {
    if ns == 0 {
        return;
    }
    let (exact_ns, exact_count, est_ns, est_count) = match weight {
        Weight::Exact => (ns, count, 0, 0),
        Weight::Sampled => (0, 0, ns, count),
    };
    for _ in 0..2 {
        if let Some(v) = STACK_TIMES.get_ptr_mut(key) {
            // SAFETY: a map value; a perf sample and a switch of the same thread can
            // race on other CPUs, hence atomic adds.
            unsafe {
                if weight == Weight::Exact {
                    atomic_add(&raw mut (*v).total_ns, exact_ns);
                    atomic_add(&raw mut (*v).count, exact_count);
                } else {
                    atomic_add(&raw mut (*v).estimated_ns, est_ns);
                    atomic_add(&raw mut (*v).sampled_count, est_count);
                }
            }
            return;
        }
        let first = StackTime {
            total_ns: exact_ns,
            count: exact_count,
            estimated_ns: est_ns,
            sampled_count: est_count,
        };
        // Another CPU may insert the key first: then look it up again.
        if STACK_TIMES.insert(key, &first, BPF_NOEXIST as u64).is_ok() {
            return;
        }
    }
    count_lost(lost::STACK);
}

/// Add one off-CPU period: its asleep part to `sleep_class`, the rest to runqueue.
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one stack key and its times"
)]
fn add_period(
    tgid: u32,
    tid: u32,
    sleep_class: u32,
    sleep_ns: u64,
    runq_ns: u64,
    user_stack_id: i64,
    kernel_stack: u64,
    periods: u64,
    weight: Weight,
) {
    let mut key = StackKey {
        tgid,
        tid,
        class: sleep_class,
        user_stack_id: user_stack_id as i32,
        kernel_stack,
    };
    add(&key, sleep_ns, periods, weight);
    key.class = LatencyClass::Runqueue as u32;
    add(&key, runq_ns, periods, weight);
}

/// A traced thread leaves the CPU (`ctx` runs in it) after running `ran_ns`.
///
/// Outside a syscall its user stack must be taken now. A sleep there (a page fault) is
/// rare and slow, so it always gets one. A preemption gets one only after a run of at
/// least the block threshold: a CPU-bound thread is preempted at most once per slice,
/// so that costs at most one walk per threshold of CPU time, while a thread preempted
/// right after a wakeup (ping-pong patterns, millions per second) costs nothing; its
/// runqueue wait, if long, keeps its kernel stack only.
///
/// Inside a syscall the user stack is the same at every switch-out of the call and at
/// its sys_exit. It is taken here, once per call, when a block of the call already
/// waits for it (a second wait in one call: each keeps the stack), or when this thread
/// had no such capture for a threshold's time (so a wait still in progress at the end
/// of the session has its stack, at a bounded cost of one walk per threshold per
/// thread); otherwise at sys_exit, and only if a wait of the call was given a stack.
#[inline(always)]
pub fn on_switch_out<C: StackIdContext>(
    ctx: &C,
    tid: u32,
    t: &mut ThreadState,
    now: u64,
    ran_ns: u64,
) {
    if !enabled() {
        return;
    }
    t.off_cpu_since_ns = now;
    t.off_cpu_sleep_ns = 0;
    if is_gate(tid) {
        // kernelkite's gate waiting to exec the command: its frames would be resolved
        // with the command's mappings. Its time keeps no stack.
        t.user_stack_id = NO_STACK;
        t.sys_user_stack_id = NO_STACK;
        return;
    }
    if t.sys_nr != NO_SYSCALL {
        t.user_stack_id = NO_STACK;
        let pending = t.pending_class != NO_PENDING;
        if t.sys_user_stack_id == NO_STACK
            && (pending || now.saturating_sub(t.last_capture_ns) >= min_block_ns())
        {
            t.last_capture_ns = now;
            // A copy (unwound in userspace) where copies are on; the call's periods
            // are then sent with `last_capture_ns`, which joins them to it. Over the
            // copy budget, with no period waiting, the stack is left for the call's
            // sys_exit (the user side does not move meanwhile, and the block refills
            // the budget): taken by frame pointer now, it stopped at the first caller
            // built without one (redis under redis-benchmark at --min-block-us 100:
            // 12-24 % of its syscall_blocked time cut so, 7-9 % with the retry).
            let rate = if pending {
                CopyRate::Budgeted
            } else {
                CopyRate::BudgetedRetried
            };
            t.sys_user_stack_id = if send_copy(NO_CLASS, now, 0, 0, 0, 0, false, rate) {
                COPIED_STACK
            } else if !pending && copies_on() {
                NO_STACK
            } else {
                user_stack(ctx) as i32
            };
            if pending && t.sys_user_stack_id != NO_STACK {
                flush_pending(t.tgid, tid, t, t.sys_user_stack_id as i64);
            }
        }
        return;
    }
    let preempted = t.run_state == run_state::RUNNABLE;
    t.user_stack_id = if !preempted || ran_ns >= min_block_ns() {
        if send_copy(NO_CLASS, now, 0, 0, 0, 0, false, CopyRate::Budgeted) {
            t.last_capture_ns = now;
            COPIED_STACK
        } else {
            user_stack(ctx) as i32
        }
    } else {
        NO_STACK
    };
}

/// A traced sleeping thread is woken: its sleep ends here, its runqueue wait begins.
#[inline(always)]
pub fn on_wakeup(t: &mut ThreadState, now: u64) {
    if t.off_cpu_since_ns != 0 && now > t.off_cpu_since_ns {
        t.off_cpu_sleep_ns = now - t.off_cpu_since_ns;
    }
}

/// Whether a period of `off_ns`, shorter than `threshold_ns`, is picked: with
/// probability `off_ns / threshold_ns`, from a 32-bit random draw.
#[inline(always)]
fn sampled(off_ns: u64, threshold_ns: u64) -> bool {
    // SAFETY: helper call without preconditions.
    let r = unsafe { bpf_get_prandom_u32() } as u64;
    // off_ns < threshold_ns: the shifts keep `off << 32` within 64 bits.
    let bar = if threshold_ns <= 1 << 31 {
        (off_ns << 32) / threshold_ns
    } else {
        (off_ns << 16) / (threshold_ns >> 16)
    };
    r < bar
}

/// A traced thread is switched back in (this runs in the task leaving the CPU, so the
/// thread's kernel stack is read from its task_struct).
///
/// A period of at least the threshold gets its stacks and its exact time. A shorter
/// one gets them with probability `len / threshold`, and then counts as `threshold`
/// (its asleep and runqueue parts scaled alike): the expected time per stack is its
/// true time, while the walks stay about one per threshold of off-CPU time.
#[inline(always)]
pub fn on_switch_in(next: *const u8, tgid: u32, tid: u32, t: &mut ThreadState, now: u64) {
    if !enabled() || t.off_cpu_since_ns == 0 || t.run_state == run_state::EXITED {
        return;
    }
    let since = t.off_cpu_since_ns;
    t.off_cpu_since_ns = 0;
    if now <= since {
        return;
    }
    let threshold = min_block_ns();
    let off_ns = now - since;
    let mut sleep_ns = if t.off_cpu_sleep_ns < off_ns {
        t.off_cpu_sleep_ns
    } else {
        off_ns
    };
    let mut runq_ns = off_ns - sleep_ns;
    let weight = if off_ns >= threshold {
        Weight::Exact
    } else if sampled(off_ns, threshold) {
        // threshold * sleep / off, without overflow for thresholds up to 4 s.
        sleep_ns = if threshold <= 1 << 32 {
            sleep_ns * threshold / off_ns
        } else {
            sleep_ns * (threshold / off_ns)
        };
        runq_ns = threshold.saturating_sub(sleep_ns);
        Weight::Sampled
    } else {
        return;
    };
    let kernel_stack = kernel_stack_of(next);
    let in_syscall = t.sys_nr != NO_SYSCALL;
    let user = if in_syscall {
        t.sys_user_stack_id
    } else {
        t.user_stack_id
    };
    if user == COPIED_STACK {
        // A copy's periods go to userspace, joined to it on (tid, capture time).
        send_period(
            tgid,
            tid,
            t.sleep_class,
            t.last_capture_ns,
            kernel_stack,
            sleep_ns,
            runq_ns,
            1,
            weight,
        );
        if !in_syscall {
            t.user_stack_id = NO_STACK;
        }
        return;
    }
    if user != NO_STACK || !in_syscall {
        add_period(
            tgid,
            tid,
            t.sleep_class,
            sleep_ns,
            runq_ns,
            user as i64,
            kernel_stack,
            1,
            weight,
        );
        return;
    }
    // Inside a syscall whose user stack is not taken yet: it comes at the call's next
    // switch-out or its sys_exit. A second block before then joins the pending one when
    // it slept in the same class on the same kernel stack with the same weighting (one
    // slot; else the older goes without a user stack).
    let sampled_flag = (weight == Weight::Sampled) as u32;
    if t.pending_class == t.sleep_class
        && t.pending_kernel_stack == kernel_stack
        && t.pending_sampled == sampled_flag
    {
        t.pending_sleep_ns += sleep_ns;
        t.pending_runq_ns += runq_ns;
        t.pending_periods += 1;
        return;
    }
    flush_pending(tgid, tid, t, NO_STACK as i64);
    t.pending_class = t.sleep_class;
    t.pending_periods = 1;
    t.pending_sleep_ns = sleep_ns;
    t.pending_runq_ns = runq_ns;
    t.pending_kernel_stack = kernel_stack;
    t.pending_sampled = sampled_flag;
}

/// Add a long block waiting for its user stack, with `user_stack_id` (NO_STACK when
/// the syscall never returned).
#[inline(always)]
pub fn flush_pending(tgid: u32, tid: u32, t: &mut ThreadState, user_stack_id: i64) {
    if t.pending_class == NO_PENDING {
        return;
    }
    let weight = if t.pending_sampled != 0 {
        Weight::Sampled
    } else {
        Weight::Exact
    };
    if user_stack_id == COPIED_STACK as i64 {
        send_period(
            tgid,
            tid,
            t.pending_class,
            t.last_capture_ns,
            t.pending_kernel_stack,
            t.pending_sleep_ns,
            t.pending_runq_ns,
            t.pending_periods as u64,
            weight,
        );
        t.pending_class = NO_PENDING;
        return;
    }
    add_period(
        tgid,
        tid,
        t.pending_class,
        t.pending_sleep_ns,
        t.pending_runq_ns,
        user_stack_id,
        t.pending_kernel_stack,
        t.pending_periods as u64,
        weight,
    );
    t.pending_class = NO_PENDING;
}

/// The user stack of the syscall in progress: the one taken at a switch-out inside it,
/// else taken now (at its sys_exit, where it is unchanged).
#[inline(always)]
pub fn syscall_user_stack<C: StackIdContext>(ctx: &C, t: &mut ThreadState) -> i64 {
    if t.sys_user_stack_id == NO_STACK {
        t.sys_user_stack_id = user_stack(ctx) as i32;
    }
    t.sys_user_stack_id as i64
}

/// At sys_exit: a long block inside this syscall gets the (unchanged) user stack now.
#[inline(always)]
pub fn on_sys_exit<C: StackIdContext>(ctx: &C, tgid: u32, tid: u32, t: &mut ThreadState) {
    if t.pending_class != NO_PENDING {
        if t.sys_user_stack_id == NO_STACK {
            // SAFETY: helper call without preconditions.
            let now = unsafe { bpf_ktime_get_ns() };
            if send_copy(
                t.pending_class,
                now,
                t.pending_kernel_stack,
                t.pending_sleep_ns,
                t.pending_runq_ns,
                t.pending_periods as u64,
                t.pending_sampled != 0,
                CopyRate::Budgeted,
            ) {
                t.pending_class = NO_PENDING;
                return;
            }
        }
        let user = syscall_user_stack(ctx, t);
        flush_pending(tgid, tid, t, user);
    }
}

/// On-CPU samples of traced threads, `--sample-hz` per CPU.
#[perf_event]
pub fn on_cpu_sample(ctx: PerfEventContext) -> u32 {
    let Some((tgid, tid, t)) = current_thread() else {
        return 0;
    };
    if t.run_state == run_state::EXITED {
        return 0;
    }
    let Some(buf) = STACK_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let size = core::mem::size_of::<KernelStack>() as u32;
    // SAFETY: ctx is the perf event context; buf holds `size` bytes.
    let n = unsafe { bpf_get_stack(ctx.as_ptr(), buf as *mut _, size, 0) };
    let kernel_stack = if n > 0 {
        store_kernel_stack(buf, n)
    } else {
        0 // interrupted in user mode: no kernel stack
    };
    // SAFETY: a read-only global set at load time.
    let period_ns = unsafe { core::ptr::read_volatile(&SAMPLE_PERIOD_NS) };
    let user_stack_id = if is_gate(tid) {
        // kernelkite's gate between its release and its exec: as at its switch-outs,
        // its frames would be resolved with the command's mappings (and reading
        // kernelkite's own binary for them held up the reader while a short command
        // ran and exited). The sample keeps no user stack.
        NO_STACK
    } else {
        // SAFETY: helper call without preconditions.
        let now = unsafe { bpf_ktime_get_ns() };
        if send_copy(
            LatencyClass::OnCpu as u32,
            now,
            kernel_stack,
            period_ns,
            0,
            1,
            false,
            CopyRate::SampleHz,
        ) {
            return 0;
        }
        user_stack(&ctx) as i32
    };
    let key = StackKey {
        tgid,
        tid,
        class: LatencyClass::OnCpu as u32,
        user_stack_id,
        kernel_stack,
    };
    add(&key, period_ns, 1, Weight::Exact);
    0
}
