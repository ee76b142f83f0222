//! Wakers: what ended each sleep of a traced thread (another thread, a timer, an
//! interrupt), summed in the kernel per (waiter thread, sleep class, waker).
//!
//! sched_waking runs in `try_to_wake_up`, in the waker's context, so `current` is the
//! waker; sched_wakeup may run later on the wakee's CPU (from an IPI, where `current` is
//! whatever ran there), so the waker is noted at sched_waking and the sleep, which
//! `sched::on_wakeup` closes at sched_wakeup, is added to it then. Whether the waking
//! ran in interrupt context comes from the irq, softirq and hrtimer entry/exit hooks
//! (aya-ebpf has no ksym access to `preempt_count`): they keep a per-CPU note of the
//! interrupt the CPU is in. Interrupts those hooks do not see (IPIs, irq_work) are taken
//! for the thread they interrupted, except on the idle task, which is counted as an
//! interrupt of unknown source. (A classic record's `common_flags` cannot say instead: a
//! BPF program sees the record before the kernel fills its common fields, whose first
//! 8 bytes then hold a pt_regs pointer.)

use aya_ebpf::bindings::BPF_F_MMAPABLE;
use aya_ebpf::helpers::bpf_get_current_task;
use aya_ebpf::macros::{btf_tracepoint, map, tracepoint};
use aya_ebpf::maps::{Array, HashMap, PerCpuArray};
use aya_ebpf::programs::{BtfTracePointContext, TracePointContext};
use kernelkite_common::bpf::{run_state, ThreadState};
use kernelkite_common::wake::{
    waker_kind, waker_slots, IrqContext, WakerKey, WakerSlot, WakerTime, HRTIMER_SOFTIRQ,
    IRQ_TAIL_NS, TIMER_SOFTIRQ, WAKERS_MAX_ENTRIES,
};

use crate::maps::{is_target, split_pid_tgid, swap_holder, thread};
use crate::task;

/// Time and count per (waiter, class, waker), in its slot
/// (`kernelkite_common::wake::waker_slots`).
#[map]
pub static WAKER_SLOTS: Array<WakerSlot> = Array::with_max_entries(waker_slots::DEFAULT, 0);

/// Which woken thread holds each slot of `WAKER_SLOTS` (mapped into the tracer).
#[map]
pub static WAKER_HOLDERS: Array<u64> =
    Array::with_max_entries(waker_slots::DEFAULT, BPF_F_MMAPABLE);

/// `WAKER_SLOTS`' length less one, set by the loader.
#[unsafe(no_mangle)]
static WAKER_SLOTS_MASK: u32 = waker_slots::DEFAULT - 1;

/// The overflow of `WAKER_SLOTS`: keys whose slot another thread holds. Bounded: a full
/// map drops the sleep's attribution (counted in `WAKERS_LOST`), never its class time.
#[map]
pub static WAKERS: HashMap<WakerKey, WakerTime> = HashMap::with_max_entries(WAKERS_MAX_ENTRIES, 0);

/// Which interrupt each CPU is in.
#[map]
static IRQ_CONTEXT: PerCpuArray<IrqContext> = PerCpuArray::with_max_entries(1, 0);

/// Sleeps whose waker could not be stored (WAKERS full), per CPU.
#[map]
pub static WAKERS_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// 0 when userspace turned waker aggregation off (`KERNELKITE_WAKERS=off`, to measure
/// its cost): the wakeup path then does nothing here.
#[unsafe(no_mangle)]
static WAKERS_ON: u32 = 1;

/// Field offsets of the classic records, set by userspace from tracefs.
#[unsafe(no_mangle)]
static CLASSIC_IRQ_HANDLER_IRQ: u32 = 0;
#[unsafe(no_mangle)]
static CLASSIC_SOFTIRQ_VEC: u32 = 0;

#[inline(always)]
fn irq_context() -> Option<&'static mut IrqContext> {
    // SAFETY: this CPU's slot; programs on one CPU do not run concurrently except
    // nested by an interrupt, which restores what it changed.
    IRQ_CONTEXT.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

/// A comm's two words. Every `comm` written here is 8-aligned in its struct (after two
/// u64s or four u32s of a struct with u64s), so it is copied with two loads and two
/// stores, where the compiler copies a `[u8; 16]` (align 1) byte by byte.
#[inline(always)]
fn comm_words(comm: &[u8; 16]) -> [u64; 2] {
    let p = comm.as_ptr() as *const u64;
    // SAFETY: 16 readable bytes, 8-aligned (above).
    unsafe { [core::ptr::read(p), core::ptr::read(p.add(1))] }
}

#[inline(always)]
fn set_comm(comm: &mut [u8; 16], words: [u64; 2]) {
    let p = comm.as_mut_ptr() as *mut u64;
    // SAFETY: 16 writable bytes, 8-aligned (above).
    unsafe {
        core::ptr::write(p, words[0]);
        core::ptr::write(p.add(1), words[1]);
    }
}

/// The running thread's comm, by the helper (no task pointer at hand).
#[inline(always)]
fn current_comm_words() -> [u64; 2] {
    let mut words = [0u64; 2];
    // SAFETY: a 16-byte buffer on our stack.
    unsafe { aya_ebpf::helpers::generated::bpf_get_current_comm(words.as_mut_ptr().cast(), 16) };
    words
}

/// Who is running the wakeup now: (kind, source, waker tgid, waker tid). `current`: the
/// running task's BTF pointer where the hook can have one (tp_btf), else null.
#[inline(always)]
fn current_waker(current: *const u8) -> (u32, u32, u32, u32) {
    if let Some(c) = irq_context() {
        if c.timer != 0 {
            return (waker_kind::TIMER, 0, 0, 0);
        }
        if c.hardirq != 0 {
            return (waker_kind::HARDIRQ, c.hardirq - 1, 0, 0);
        }
        if c.softirq != 0 {
            let vec = c.softirq - 1;
            if vec == TIMER_SOFTIRQ || vec == HRTIMER_SOFTIRQ {
                return (waker_kind::TIMER, 0, 0, 0);
            }
            // Not an interrupt's: the current task raised and ran it itself, inside a
            // syscall (a loopback send's local_bh_enable). The wakeup is its doing.
            if c.softirq_of_irq == 0 && task::in_own_syscall(current) {
                let (tgid, tid) = task::current_ids_of(current);
                return (waker_kind::THREAD, vec + 1, tgid, tid);
            }
            return (waker_kind::SOFTIRQ, vec, 0, 0);
        }
    }
    let (tgid, tid) = if current.is_null() {
        split_pid_tgid()
    } else {
        task::current_ids_of(current)
    };
    if tid == 0 {
        return (waker_kind::INTERRUPT, 0, 0, 0);
    }
    (waker_kind::THREAD, 0, tgid, tid)
}

/// [`current_waker`], or [`waker_kind::GROUP_EXIT`] when the woken thread (of process
/// `wakee_tgid`, task `wakee`) is woken to die with its process (exit_group, a fatal
/// signal): that is no wakeup by work, and an idle pool thread must not read as waiting
/// on the thread that exited. Without the wakee's task (classic tracepoints) only the
/// waker is at hand: its own group's exit, which covers exit_group (its task's flag
/// where the BTF offsets are set, else the syscall it is in).
#[inline(always)]
fn waker_of(wakee_tgid: u32, wakee: *const u8, current: *const u8) -> (u32, u32, u32, u32) {
    let waker = current_waker(current);
    let exiting = if !wakee.is_null() {
        // SAFETY: the tracepoint's task_struct.
        unsafe { task::group_exiting::<true>(wakee) }
    } else {
        waker.0 == waker_kind::THREAD
            && waker.2 == wakee_tgid
            // SAFETY: the current task, read with probe reads.
            && (unsafe { task::group_exiting::<false>(bpf_get_current_task() as *const u8) }
                || crate::classic::in_exit_group(waker.3))
    };
    match (exiting, waker.0) {
        // The thread that ran the exit (exit_group's caller, or a killer) is kept for
        // the critical path, which goes on through it; the WAKERS totals drop it.
        (true, waker_kind::THREAD) => (waker_kind::GROUP_EXIT, 0, waker.2, waker.3),
        (true, _) => (waker_kind::GROUP_EXIT, 0, 0, 0),
        (false, _) => waker,
    }
}

/// sched_waking of thread `tid` (`tgid` 0: unknown, its entry says), whose task_struct
/// is `wakee` (null on classic tracepoints, whose record has no task pointer).
#[inline(always)]
fn on_waking(tid: u32, tgid: u32, wakee: *const u8) -> i32 {
    if tgid != 0 && !is_target(tgid) {
        return 0;
    }
    let Some(t) = thread(tid) else {
        return 0;
    };
    if t.run_state != run_state::SLEEPING && t.run_state != run_state::INITIAL {
        return 0;
    }
    // tp_btf (a wakee task pointer): the waker's ids and name are loads from its task.
    let current = if wakee.is_null() {
        core::ptr::null()
    } else {
        task::current_btf()
    };
    let (kind, source, waker_tgid, waker_tid) = waker_of(t.tgid, wakee, current);
    let comm = match kind {
        waker_kind::THREAD if !current.is_null() => task::comm_words_of(current),
        waker_kind::THREAD => current_comm_words(),
        _ => [0; 2],
    };
    let pending = &mut t.waker;
    pending.kind = kind;
    pending.source = source;
    pending.waker_tgid = waker_tgid;
    pending.waker_tid = waker_tid;
    set_comm(&mut pending.comm, comm);
    pending.sleep_since_ns = t.since_ns;
    0
}

/// A sleep of `tid` in class `class` lasting `sleep_ns` ended at a wakeup: add it to the
/// waker noted at sched_waking, or (none noted for this sleep: its sched_waking was
/// missed) to whoever runs this wakeup.
#[inline(always)]
pub fn on_woken(tid: u32, t: &ThreadState, class: u32, sleep_ns: u64) {
    // SAFETY: reading our own static, patched by the loader.
    let aggregate = unsafe { core::ptr::read_volatile(&WAKERS_ON) } != 0;
    let stream = crate::critical_path::on();
    if !aggregate && !stream {
        return;
    }
    let since = t.since_ns;
    let mut key = WakerKey {
        tgid: t.tgid,
        tid,
        class,
        ..WakerKey::default()
    };
    let mut comm = [0u64; 2];
    match &t.waker {
        p if p.sleep_since_ns == since && p.sleep_since_ns != 0 => {
            key.kind = p.kind;
            key.source = p.source;
            key.waker_tgid = p.waker_tgid;
            key.waker_tid = p.waker_tid;
            comm = comm_words(&p.comm);
        }
        _ => {
            let (kind, source, waker_tgid, waker_tid) =
                waker_of(t.tgid, core::ptr::null(), core::ptr::null());
            key.kind = kind;
            key.source = source;
            key.waker_tgid = waker_tgid;
            key.waker_tid = waker_tid;
            if kind == waker_kind::THREAD {
                comm = current_comm_words();
            }
        }
    }
    if stream {
        crate::critical_path::on_woken(tid, t, &key, since + sleep_ns);
    }
    if aggregate {
        if key.kind == waker_kind::GROUP_EXIT {
            // One entry per thread and class, whoever ran the exit.
            key.waker_tgid = 0;
            key.waker_tid = 0;
            comm = [0; 2];
        }
        add(&key, sleep_ns, comm);
    }
}

/// Add one sleep of `ns` to `key`: in its slot, else the overflow map.
#[inline(always)]
fn add(key: &WakerKey, ns: u64, comm: [u64; 2]) {
    // SAFETY (both): a map value, valid while the program runs. The key holds the woken
    // thread, and the scheduler serialises a thread's wakeups (a wakeup needs the
    // thread asleep, and try_to_wake_up holds its pi_lock until it is runnable), so
    // this entry has one writer at a time and plain adds are exact.
    if let Some(slot) = slot_of(key) {
        unsafe {
            let time = &mut (*slot).time;
            time.total_ns += ns;
            // The count last (userspace skips a slot counted 0: one being filled).
            core::ptr::write_volatile(&mut time.count, time.count + 1);
            set_comm(&mut time.comm, comm);
        }
        return;
    }
    if let Some(v) = WAKERS.get_ptr_mut(key) {
        unsafe {
            (*v).total_ns += ns;
            (*v).count += 1;
            set_comm(&mut (*v).comm, comm);
        }
        return;
    }
    let mut value = WakerTime {
        total_ns: ns,
        count: 1,
        comm: [0; 16],
    };
    set_comm(&mut value.comm, comm);
    if WAKERS.insert(key, &value, 0).is_err() {
        if let Some(p) = WAKERS_LOST.get_ptr_mut(0) {
            // SAFETY: per-CPU slot.
            unsafe { *p += 1 };
        }
    }
}

/// `key`'s slot: when its woken thread holds it for this key, or claims it free (the
/// key is written into it then, with nothing counted yet). None: the slot is another
/// key's, or being freed.
#[inline(always)]
fn slot_of(key: &WakerKey) -> Option<*mut WakerSlot> {
    // SAFETY: a read-only global set at load time.
    let mask = unsafe { core::ptr::read_volatile(&WAKER_SLOTS_MASK) };
    let index = waker_slots::index(key, mask);
    let (h, slot) = (
        WAKER_HOLDERS.get_ptr_mut(index)?,
        WAKER_SLOTS.get_ptr_mut(index)?,
    );
    let holder = waker_slots::holder(key.tgid, key.tid);
    // SAFETY: map values, valid while the program runs; the holder changes only
    // atomically, the slot only by its holder's wakeups (one at a time, above).
    unsafe {
        let seen = core::ptr::read_volatile(h);
        if seen == holder {
            return ((*slot).key == *key).then_some(slot);
        }
        if seen != waker_slots::FREE || !swap_holder(h, waker_slots::FREE, holder).1 {
            return None;
        }
        // A free slot is zero (userspace zeroes it before freeing it).
        core::ptr::write_volatile(&mut (*slot).key, *key);
    }
    Some(slot)
}

#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking(ctx: BtfTracePointContext) -> i32 {
    let p: *const u8 = ctx.arg(0);
    // SAFETY: p is the tracepoint's task_struct.
    let (tid, tgid) = unsafe { task::ids::<true>(p) };
    on_waking(tid, tgid, p)
}

#[tracepoint]
pub fn classic_sched_waking(ctx: TracePointContext) -> u32 {
    on_waking(crate::classic::wakeup_pid(&ctx), 0, core::ptr::null()) as u32
}

#[inline(always)]
fn set(f: impl FnOnce(&mut IrqContext)) -> i32 {
    if let Some(c) = irq_context() {
        f(c);
    }
    0
}

#[btf_tracepoint(function = "irq_handler_entry")]
pub fn irq_handler_entry(ctx: BtfTracePointContext) -> i32 {
    let irq = ctx.arg::<u64>(0) as u32;
    set(|c| c.hardirq = irq.wrapping_add(1))
}

#[btf_tracepoint(function = "irq_handler_exit")]
pub fn irq_handler_exit(_ctx: BtfTracePointContext) -> i32 {
    set(on_irq_exit)
}

#[btf_tracepoint(function = "softirq_entry")]
pub fn softirq_entry(ctx: BtfTracePointContext) -> i32 {
    let vec = ctx.arg::<u64>(0) as u32;
    set(|c| on_softirq_entry(c, vec))
}

#[btf_tracepoint(function = "softirq_exit")]
pub fn softirq_exit(_ctx: BtfTracePointContext) -> i32 {
    set(on_softirq_exit)
}

/// A device interrupt's handler returned: softirqs that start right after run at its
/// exit (`IRQ_TAIL_NS`).
#[inline(always)]
fn on_irq_exit(c: &mut IrqContext) {
    c.hardirq = 0;
    // SAFETY: helper call without preconditions.
    c.irq_exit_ns = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
}

#[inline(always)]
fn on_softirq_entry(c: &mut IrqContext, vec: u32) {
    c.softirq = vec.wrapping_add(1);
    // SAFETY: helper call without preconditions.
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    c.softirq_of_irq = u32::from(now.wrapping_sub(c.irq_exit_ns) <= IRQ_TAIL_NS);
}

#[inline(always)]
fn on_softirq_exit(c: &mut IrqContext) {
    c.softirq = 0;
    c.softirq_of_irq = 0;
}

#[btf_tracepoint(function = "hrtimer_expire_entry")]
pub fn hrtimer_expire_entry(_ctx: BtfTracePointContext) -> i32 {
    set(|c| c.timer = 1)
}

#[btf_tracepoint(function = "hrtimer_expire_exit")]
pub fn hrtimer_expire_exit(_ctx: BtfTracePointContext) -> i32 {
    set(|c| c.timer = 0)
}

#[inline(always)]
fn classic_field(ctx: &TracePointContext, offset: &'static u32) -> u32 {
    // SAFETY: reading our own static (patched by the loader), then the record at the
    // offset tracefs gave.
    unsafe { ctx.read_at::<u32>(core::ptr::read_volatile(offset) as usize) }.unwrap_or(0)
}

#[tracepoint]
pub fn classic_irq_handler_entry(ctx: TracePointContext) -> u32 {
    let irq = classic_field(&ctx, &CLASSIC_IRQ_HANDLER_IRQ);
    set(|c| c.hardirq = irq.wrapping_add(1)) as u32
}

#[tracepoint]
pub fn classic_irq_handler_exit(_ctx: TracePointContext) -> u32 {
    set(on_irq_exit) as u32
}

#[tracepoint]
pub fn classic_softirq_entry(ctx: TracePointContext) -> u32 {
    let vec = classic_field(&ctx, &CLASSIC_SOFTIRQ_VEC);
    set(|c| on_softirq_entry(c, vec)) as u32
}

#[tracepoint]
pub fn classic_softirq_exit(_ctx: TracePointContext) -> u32 {
    set(on_softirq_exit) as u32
}

#[tracepoint]
pub fn classic_hrtimer_expire_entry(_ctx: TracePointContext) -> u32 {
    set(|c| c.timer = 1) as u32
}

#[tracepoint]
pub fn classic_hrtimer_expire_exit(_ctx: TracePointContext) -> u32 {
    set(|c| c.timer = 0) as u32
}
