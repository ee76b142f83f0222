//! Wakers: what ended each sleep of a traced thread, summed in the kernel per
//! (waiter thread, sleep class, waker). Shared by the BPF programs (`wakers` module of
//! kernelkite-ebpf) and the session that reads the map.

use crate::bpf::COMM_LEN;

/// `WakerKey::kind`: what ran the wakeup.
pub mod waker_kind {
    /// Another thread (`current` at the wakeup): `waker_tgid`, `waker_tid`, comm.
    pub const THREAD: u32 = 0;
    /// A timer expiry: an hrtimer callback, or the TIMER/HRTIMER softirq.
    pub const TIMER: u32 = 1;
    /// A device interrupt handler; `source` is the irq number.
    pub const HARDIRQ: u32 = 2;
    /// A softirq other than the timer ones; `source` is its vector (NET_RX is 3). A
    /// softirq the current task started itself, inside a syscall (a loopback or local
    /// socket send's `local_bh_enable`), is that task's instead: kind THREAD with
    /// `source` the vector + 1.
    pub const SOFTIRQ: u32 = 3;
    /// Interrupt context whose source no hook saw: a wakeup run by the idle task.
    pub const INTERRUPT: u32 = 4;
    /// No wakeup by work: the sleeper's thread group was exiting (exit_group, or a
    /// fatal signal), and the kernel woke the thread to die. The `--critical-path`
    /// stream keeps the thread that ran it (`waker_tgid`, `waker_tid`); the WAKERS
    /// totals do not.
    pub const GROUP_EXIT: u32 = 5;
}

/// Entries of the kernel's `WAKERS` map, one per (wakee thread, class, waker): a full
/// map drops a sleep's attribution (counted), never its time.
pub const WAKERS_MAX_ENTRIES: u32 = 16_384;

/// Softirq vectors (include/linux/interrupt.h) that run timers.
pub const TIMER_SOFTIRQ: u32 = 1;
pub const HRTIMER_SOFTIRQ: u32 = 8;

/// Key of the `WAKERS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakerKey {
    /// The woken (waiting) thread.
    pub tgid: u32,
    pub tid: u32,
    /// Latency class id of the sleep the wakeup ended.
    pub class: u32,
    /// One of [`waker_kind`].
    pub kind: u32,
    /// HARDIRQ: irq number; SOFTIRQ: vector; otherwise 0.
    pub source: u32,
    /// THREAD: the waking thread; otherwise 0.
    pub waker_tgid: u32,
    pub waker_tid: u32,
    /// Explicit padding; always 0.
    pub _pad: u32,
}

/// Value of the `WAKERS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakerTime {
    /// Summed ns of the sleeps this waker ended.
    pub total_ns: u64,
    /// Number of those sleeps.
    pub count: u64,
    /// THREAD: the waker's comm at its latest wakeup, NUL-padded.
    pub comm: [u8; COMM_LEN],
}

/// An entry of the `WAKER_SLOTS` array: a key and its time, kept in slot
/// [`waker_slots::index`] of the key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakerSlot {
    pub key: WakerKey,
    pub time: WakerTime,
}

/// The waker slots: `WAKERS` entries kept in an array, where a wakeup finds its key
/// with one multiply and two loads instead of a hash lookup of a 32-byte key (about
/// 20 ns a wakeup here). `WAKERS` is their overflow, and a key in both homes is their
/// sum. A slot's holder (`WAKER_HOLDERS`, mapped into the tracer) is the woken
/// thread, whose wakeups alone write the slot; they come one at a time (the scheduler
/// serialises a thread's wakeups), so the one that claims a free slot fills the key,
/// and the adds need no atomics.
pub mod waker_slots {
    use super::WakerKey;

    /// Slots (a power of two): 4,096 x 64 bytes is 256 KiB of kernel memory.
    pub const DEFAULT: u32 = 4_096;
    /// The holder of a free slot (tid 0 is the idle task, never traced).
    pub const FREE: u64 = 0;
    /// The holder of a slot userspace is freeing (no thread: tgids stay below 2^22).
    /// The programs take it for another thread's.
    pub const CLEARING: u64 = u64::MAX;

    /// The holder word of the slots of woken thread `tid` of `tgid`.
    pub const fn holder(tgid: u32, tid: u32) -> u64 {
        ((tgid as u64) << 32) | tid as u64
    }

    /// The woken thread (tgid, tid) of a holder word.
    pub const fn wakee(holder: u64) -> (u32, u32) {
        ((holder >> 32) as u32, holder as u32)
    }

    /// The slot index of `key` in a table of `mask + 1` slots (Fibonacci hashing of
    /// its fields mixed into one word).
    pub const fn index(key: &WakerKey, mask: u32) -> u32 {
        let a = ((key.tid as u64) << 32) | key.waker_tid as u64;
        let b = ((key.class as u64) << 56)
            ^ ((key.kind as u64) << 48)
            ^ ((key.waker_tgid as u64) << 24)
            ^ key.source as u64;
        ((a ^ b.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32 & mask
    }
}

/// `ThreadState::waker`: who ran `try_to_wake_up` (sched_waking, in the waker's
/// context), kept until the wakeup ends the sleep (sched_wakeup, which may run later on
/// the wakee's CPU, from an IPI).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingWaker {
    pub kind: u32,
    pub source: u32,
    pub waker_tgid: u32,
    pub waker_tid: u32,
    pub comm: [u8; COMM_LEN],
    /// The `ThreadState::since_ns` of the sleep it ends (when that sleep began; it does
    /// not move until the wakeup closes the sleep): an entry for another sleep is stale
    /// (a wakeup of an earlier sleep whose sched_wakeup was missed). A stamp, not a
    /// clock read, which would cost sched_waking about 20 ns.
    pub sleep_since_ns: u64,
}

/// Value of the per-CPU `IRQ_CONTEXT` array: which interrupt context the CPU is in, kept
/// by the irq, softirq and hrtimer entry/exit hooks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqContext {
    /// 1 inside an hrtimer callback.
    pub timer: u32,
    /// irq number + 1 inside a device interrupt handler, else 0.
    pub hardirq: u32,
    /// softirq vector + 1 while a softirq runs, else 0.
    pub softirq: u32,
    /// 1 while the softirq running now was started by a device interrupt's exit (over
    /// whatever task it interrupted), 0 when the current task started it itself (its
    /// `local_bh_enable`, as a loopback send's).
    pub softirq_of_irq: u32,
    /// When a device interrupt's handler last returned (CLOCK_MONOTONIC ns).
    pub irq_exit_ns: u64,
}

/// A softirq that starts within this long of a device interrupt handler's return ran at
/// that interrupt's exit: `irq_exit` goes straight on to the pending softirqs with
/// interrupts off, a path of a few µs; a softirq a task starts itself comes at its own
/// `local_bh_enable`, at any time. Without the bound, a mark left by an interrupt that
/// raised no softirq (this VM's vsock) took 19 % of redis's loopback wakeups for an
/// interrupt's.
pub const IRQ_TAIL_NS: u64 = 20_000;

/// `WakeupRecord::class` of a new task's first wakeup (`sched_wakeup_new`): the waker
/// is the thread that created it, and there was no sleep.
pub const NEW_TASK: u32 = u32::MAX;

/// `--critical-path`: one wakeup of a traced thread, sent over the ring buffer (record
/// kind [`crate::bpf::record_kind::WAKEUP`]): the sleep it ended, who ended it, and the
/// thread's cumulative on-CPU, runqueue and steal time when the sleep began (what it did
/// between two sleeps is the difference of two records' counters).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeupRecord {
    /// [`crate::bpf::record_kind::WAKEUP`].
    pub kind: u32,
    /// The woken thread.
    pub tgid: u32,
    pub tid: u32,
    /// Latency class id of the sleep, or [`NEW_TASK`].
    pub class: u32,
    /// CLOCK_MONOTONIC ns when the sleep began (NEW_TASK: the wakeup).
    pub sleep_start_ns: u64,
    /// CLOCK_MONOTONIC ns of the wakeup.
    pub wake_ns: u64,
    /// The waker, as in [`WakerKey`].
    pub waker_kind: u32,
    pub waker_source: u32,
    pub waker_tgid: u32,
    pub waker_tid: u32,
    /// The woken thread's class counters when the sleep began.
    pub on_cpu_ns: u64,
    pub runqueue_ns: u64,
    pub steal_ns: u64,
}

const _: () = assert!(core::mem::size_of::<WakerKey>() == 32);
const _: () = assert!(core::mem::size_of::<WakeupRecord>() == 72);
const _: () = assert!(core::mem::size_of::<WakerTime>() == 32);
const _: () = assert!(core::mem::size_of::<WakerSlot>() == 64);
const _: () = assert!(core::mem::size_of::<PendingWaker>() == 40);
const _: () = assert!(core::mem::size_of::<IrqContext>() == 24);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), has no padding beyond explicit fields, and every bit
    // pattern is a valid value.
    unsafe impl aya::Pod for super::WakerKey {}
    unsafe impl aya::Pod for super::WakerTime {}
    unsafe impl aya::Pod for super::WakerSlot {}
    unsafe impl aya::Pod for super::WakeupRecord {}
}
