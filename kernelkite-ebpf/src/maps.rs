//! Every map the programs share with userspace, declared in one place.

use aya_ebpf::bindings::BPF_F_MMAPABLE;
use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, HashMap, PerCpuArray, RingBuf};
use kernelkite_common::bpf::{lost, targets, SyscallHist, SyscallKey, ThreadState, MAX_SYSCALL_NR};

/// Bit per tgid: set for every traced process (layout: `kernelkite_common::bpf::targets`).
/// Mappable: userspace sets and clears bits with atomics on the same words (an update
/// of a whole word from userspace would undo a bit a program set meanwhile).
#[map]
pub static TARGETS: Array<u64> = Array::with_max_entries(targets::WORDS, BPF_F_MMAPABLE);

/// Per-thread state and class counters, keyed by tid.
#[map]
pub static THREADS: HashMap<u32, ThreadState> = HashMap::with_max_entries(65_536, 0);

/// Tid of `run`'s gate process while it waits to exec the command (0 otherwise): its
/// syscalls are kernelkite's, not the command's, so they are not counted. Set by
/// userspace, cleared by the exec hook.
#[map]
pub static GATE: Array<u32> = Array::with_max_entries(1, 0);

/// Per-(tgid, syscall) latency histograms, updated with atomic adds. Preallocated: an
/// insert into a preallocated map cannot fail for want of memory (per-CPU maps without
/// prealloc dropped counts under exec storms). Userspace folds and deletes the entries
/// of exited processes at every snapshot, so the map holds live processes plus those
/// exited since the last snapshot. 16,384 entries (40 MiB of kernel memory at 2,448
/// bytes each): 4,096 hold only about 160 processes' syscalls, too few for an exec
/// storm on a machine so loaded that snapshots fall behind.
#[map]
pub static SYSCALL_HISTS: HashMap<SyscallKey, SyscallHist> = HashMap::with_max_entries(16_384, 0);

/// How a sleep inside each syscall number is classified (`syscall_kind`), filled by
/// userspace from the `syscalls` crate for the running architecture.
#[map]
pub static SYSCALL_KIND: Array<u8> = Array::with_max_entries(MAX_SYSCALL_NR, 0);

/// Lifecycle and slow-syscall records. 1 MiB holds about 10,000 records between two
/// drains (userspace drains as records arrive); its pages are mapped into the tracer
/// twice, so the size is also tracer RSS.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Counters of everything dropped, per CPU (`lost::*`).
#[map]
pub static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(lost::COUNT, 0);

#[inline(always)]
pub fn count_lost(which: u32) {
    if let Some(p) = LOST.get_ptr_mut(which) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while we run.
        unsafe { *p += 1 };
    }
}

/// `*p += v` as one BPF atomic add: several threads of a process may count the same
/// syscall on different CPUs at once.
#[inline(always)]
pub fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: p points into a map value, valid while the program runs.
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            p, v,
        )
    };
}

#[inline(always)]
pub fn is_target(tgid: u32) -> bool {
    match TARGETS.get(targets::word(tgid)) {
        Some(bits) => *bits & targets::bit(tgid) != 0,
        None => false,
    }
}

#[inline(always)]
pub fn set_target(tgid: u32) {
    if let Some(p) = TARGETS.get_ptr_mut(targets::word(tgid)) {
        let bit = targets::bit(tgid);
        // SAFETY: p points into the array map's value. An atomic OR (BPF_ATOMIC|BPF_OR)
        // keeps concurrent forks on other CPUs from losing each other's bits; core's
        // AtomicU64 has no fetch_or on this target, so use the intrinsic directly.
        unsafe {
            core::intrinsics::atomic_or::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                p, bit,
            )
        };
    }
}

/// A process is gone (its last thread exited): its pid may be reused by a process that
/// is not ours.
#[inline(always)]
pub fn clear_target(tgid: u32) {
    if let Some(p) = TARGETS.get_ptr_mut(targets::word(tgid)) {
        let bit = targets::bit(tgid);
        // SAFETY: as in set_target; atomic AND with the other bits kept.
        unsafe {
            core::intrinsics::atomic_and::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                p, !bit,
            )
        };
    }
}

/// The running thread's (tgid, tid, state), when it is traced: the target bit of its
/// process first (an inlined array load), then its entry.
#[inline(always)]
pub fn current_thread() -> Option<(u32, u32, &'static mut ThreadState)> {
    let (tgid, tid) = split_pid_tgid();
    traced_thread(tgid, tid)
}

/// Thread `tid` of process `tgid` with its state, when it is traced: the target bit of
/// its process first, then its entry.
#[inline(always)]
pub fn traced_thread(tgid: u32, tid: u32) -> Option<(u32, u32, &'static mut ThreadState)> {
    if !is_target(tgid) {
        return None;
    }
    thread(tid).map(|t| (tgid, tid, t))
}

/// The running thread's (tgid, tid), from `bpf_get_current_pid_tgid`.
#[inline(always)]
pub fn split_pid_tgid() -> (u32, u32) {
    let pid_tgid = aya_ebpf::helpers::bpf_get_current_pid_tgid();
    ((pid_tgid >> 32) as u32, pid_tgid as u32)
}

/// Whether `tid` is `run`'s gate process, not yet the command.
#[inline(always)]
pub fn is_gate(tid: u32) -> bool {
    matches!(GATE.get(0), Some(&gate) if gate == tid)
}

#[inline(always)]
pub fn thread(tid: u32) -> Option<&'static mut ThreadState> {
    // SAFETY: a thread's entry is only written by events of that thread (on its CPU) or
    // by its wakeup, which the scheduler orders after its switch-out.
    THREADS.get_ptr_mut(tid).map(|p| unsafe { &mut *p })
}
