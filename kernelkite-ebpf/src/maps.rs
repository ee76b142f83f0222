//! Every map the programs share with userspace, declared in one place.

use aya_ebpf::bindings::BPF_F_MMAPABLE;
use aya_ebpf::bindings::BPF_NOEXIST;
use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, HashMap, PerCpuArray, RingBuf};
use kernelkite_common::bpf::{
    hist_slots, lost, targets, thread_slots, untraced_notes, SyscallHist, SyscallKey, ThreadState,
    MAX_SYSCALL_NR,
};

/// Bit per tgid: set for every traced process (layout: `kernelkite_common::bpf::targets`).
/// Mappable: userspace sets and clears bits with atomics on the same words (an update
/// of a whole word from userspace would undo a bit a program set meanwhile).
#[map]
pub static TARGETS: Array<u64> = Array::with_max_entries(targets::WORDS, BPF_F_MMAPABLE);

/// Per CPU, a cache line each (`untraced_notes`): the `pt_regs` pointer of the last task
/// whose syscall found its process untraced on this CPU, and the notes' generation
/// read before that bit test. sys_enter and sys_exit skip a syscall whose `pt_regs`
/// (their first argument, the top of the task's kernel stack: one per live task) and
/// generation match: a few loads and no helper call, less than the bit test costs
/// (`bpf_get_current_pid_tgid` is a helper call). A global, not a map: its address is
/// a constant of the program, so there is no key on the stack.
///
/// Why a matching note is true: it names one task, and says its process was untraced.
/// Nothing else about the CPU matters (a task that migrates keeps its note elsewhere,
/// and a switch the kernel skipped our programs for changes nothing). It stops being
/// true when its process's bit is set, or its stack goes to another task:
/// - a program sets a bit (a followed fork, an exec into the traced cgroup) or a traced
///   process gains a thread: `NOTES_GENERATION` is raised, voiding every note, so a
///   new traced thread on a dead untraced task's stack is not taken for it;
/// - userspace sets bits only before sys_enter and sys_exit attach
///   (`Probes::attach_deferred`), so no note predates them;
/// - a stack reused by a task that is not traced either is skipped rightly.
#[unsafe(no_mangle)]
static mut UNTRACED_CPU: [u64; untraced_notes::LEN] = [0; untraced_notes::LEN];

/// The notes' generation (starts at 1, so a zeroed note never matches). Raised by
/// programs only: userspace sets its bits before the syscall hooks attach.
#[unsafe(no_mangle)]
static mut NOTES_GENERATION: u64 = 1;

/// This CPU's note (bpf_get_smp_processor_id is inlined: a per-CPU load).
#[inline(always)]
fn this_cpu_note() -> Option<*mut u64> {
    // SAFETY: helper call without preconditions.
    let cpu = unsafe { aya_ebpf::helpers::bpf_get_smp_processor_id() } as usize;
    if cpu >= untraced_notes::CPUS {
        return None;
    }
    // SAFETY: inside the array: cpu < CPUS.
    Some(unsafe {
        (&raw mut UNTRACED_CPU)
            .cast::<u64>()
            .add(cpu * untraced_notes::STRIDE)
    })
}

/// The notes' generation; read it before the bit test a note is written from.
#[inline(always)]
pub fn notes_generation() -> u64 {
    // SAFETY: our own global, raised with atomic adds.
    unsafe { core::ptr::read_volatile(&raw const NOTES_GENERATION) }
}

/// Void every CPU's note (see `UNTRACED_CPU`).
#[inline(always)]
pub fn raise_notes_generation() {
    // Atomic: programs on other CPUs raise it too.
    atomic_add(&raw mut NOTES_GENERATION, 1);
}

/// A syscall hook found the running task's process untraced, testing its bit after
/// reading `generation`: note its `regs` on this CPU.
#[inline(always)]
pub fn note_untraced(regs: u64, generation: u64) {
    if let Some(p) = this_cpu_note() {
        // SAFETY: this CPU's note; the syscall hooks run with preemption off.
        unsafe {
            core::ptr::write_volatile(p, regs);
            core::ptr::write_volatile(p.add(1), generation);
        }
    }
}

/// Whether this CPU's note names the task whose syscall has `regs` as untraced.
#[inline(always)]
pub fn noted_untraced(regs: u64) -> bool {
    let Some(p) = this_cpu_note() else {
        return false;
    };
    // SAFETY: this CPU's note.
    unsafe {
        core::ptr::read_volatile(p) == regs
            && core::ptr::read_volatile(p.add(1)) == notes_generation()
    }
}

/// The thread table's slots (`kernelkite_common::bpf::thread_slots`): thread `tid`'s
/// state and class counters at index `tid & THREAD_SLOTS_MASK`, when that slot is its
/// own.
#[map]
pub static THREAD_SLOTS: Array<ThreadState> = Array::with_max_entries(thread_slots::DEFAULT, 0);

/// Whose each slot is (`thread_slots::FREE`, a tid, or a tid being inserted).
/// Mappable: userspace claims and frees slots with compare-and-swap on these words, as
/// the programs do.
#[map]
pub static THREAD_HOLDERS: Array<u64> =
    Array::with_max_entries(thread_slots::DEFAULT, BPF_F_MMAPABLE);

/// `THREAD_SLOTS`' length less one, set by the loader.
#[unsafe(no_mangle)]
static THREAD_SLOTS_MASK: u32 = thread_slots::DEFAULT - 1;

/// The thread table's overflow: the state of a thread whose slot another live thread
/// holds, keyed by tid (`--max-threads` entries).
#[map]
pub static THREADS: HashMap<u32, ThreadState> = HashMap::with_max_entries(65_536, 0);

/// Tid of `run`'s gate process while it waits to exec the command (0 otherwise): its
/// syscalls are kernelkite's, not the command's, so they are not counted. Set by
/// userspace, cleared by the exec hook.
#[map]
pub static GATE: Array<u32> = Array::with_max_entries(1, 0);

/// The syscall histograms' overflow (`HIST_SLOTS` first): per-(tgid, syscall) latency
/// histograms, updated with atomic adds (plain ones for a process's only thread).
/// Preallocated: an insert into a preallocated map cannot fail for want of memory (per-CPU maps without
/// prealloc dropped counts under exec storms). Userspace folds and deletes the entries
/// of exited processes at every snapshot, so the map holds live processes plus those
/// exited since the last snapshot. 16,384 entries (40 MiB of kernel memory at 2,448
/// bytes each): 4,096 hold only about 160 processes' syscalls, too few for an exec
/// storm on a machine so loaded that snapshots fall behind.
#[map]
pub static SYSCALL_HISTS: HashMap<SyscallKey, SyscallHist> = HashMap::with_max_entries(16_384, 0);

/// The syscall histograms' slots (`kernelkite_common::bpf::hist_slots`): the
/// histogram of a (thread, syscall) whose slot is its own, found with a few loads where
/// the `SYSCALL_HISTS` lookup cost a syscall about 8 ns, and counted without atomics
/// (one thread writes it), where threads of a process on two CPUs made each call's
/// shared histogram cost 37 ns more. `SYSCALL_HISTS` is the overflow.
#[map]
pub static HIST_SLOTS: Array<SyscallHist> = Array::with_max_entries(hist_slots::DEFAULT, 0);

/// Whose each histogram slot is. Mappable: userspace frees a slot (after zeroing it)
/// with compare-and-swap.
#[map]
pub static HIST_HOLDERS: Array<u64> = Array::with_max_entries(hist_slots::DEFAULT, BPF_F_MMAPABLE);

/// `HIST_SLOTS`' length less one, set by the loader.
#[unsafe(no_mangle)]
static HIST_SLOTS_MASK: u32 = hist_slots::DEFAULT - 1;

/// The histogram slot of thread `tid`'s calls of `key` when it holds one or can claim
/// a free one (zeroed by userspace before it was freed); None: the slot is another's.
#[inline(always)]
pub fn hist_slot(key: SyscallKey, tid: u32) -> Option<*mut SyscallHist> {
    let holder = hist_slots::holder(key.tgid, tid, key.nr)?;
    // SAFETY: a read-only global set at load time.
    let mask = unsafe { core::ptr::read_volatile(&HIST_SLOTS_MASK) };
    let index = hist_slots::index(holder, mask);
    let (h, p) = (
        HIST_HOLDERS.get_ptr_mut(index)?,
        HIST_SLOTS.get_ptr_mut(index)?,
    );
    // SAFETY: a map value, valid while the program runs; changed only atomically.
    let seen = unsafe { core::ptr::read_volatile(h) };
    if seen == holder {
        return Some(p);
    }
    if seen != hist_slots::FREE {
        return None;
    }
    // Another CPU may claim it at once, for this key too.
    let (now, claimed) = swap_holder(h, hist_slots::FREE, holder);
    (claimed || now == holder).then_some(p)
}

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
    // Notes of the process's tasks, if any, say it is untraced. After the bit: a hook
    // that reads the raised generation then sees the bit (both are atomic operations,
    // full barriers on x86_64), so no note of the new generation says untraced.
    raise_notes_generation();
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

/// Thread `tid`'s slot index.
#[inline(always)]
fn slot_index(tid: u32) -> u32 {
    // SAFETY: a read-only global set at load time.
    tid & unsafe { core::ptr::read_volatile(&THREAD_SLOTS_MASK) }
}

/// Who holds slot `index`, if the index is inside the table.
#[inline(always)]
fn holder(index: u32) -> Option<*mut u64> {
    THREAD_HOLDERS.get_ptr_mut(index)
}

/// Compare-and-swap of a holder: whether it was `from` and is now `to`, and what it
/// was.
#[inline(always)]
pub fn swap_holder(h: *mut u64, from: u64, to: u64) -> (u64, bool) {
    // SAFETY: a map value, valid while the program runs.
    unsafe {
        core::intrinsics::atomic_cxchg::<
            u64,
            { core::intrinsics::AtomicOrdering::SeqCst },
            { core::intrinsics::AtomicOrdering::SeqCst },
        >(h, from, to)
    }
}

/// Whether holder `h` is thread `tid` (published, not being filled).
#[inline(always)]
fn holds(h: *mut u64, tid: u32) -> bool {
    // SAFETY: a map value, valid while the program runs; changed only atomically.
    tid as u64 != thread_slots::FREE && unsafe { core::ptr::read_volatile(h) } == tid as u64
}

/// Thread `tid`'s entry: its slot when it holds it (a few loads), else the overflow.
#[inline(always)]
pub fn thread(tid: u32) -> Option<&'static mut ThreadState> {
    // SAFETY (both): a thread's entry is only written by events of that thread (on its
    // CPU) or by its wakeup, which the scheduler orders after its switch-out.
    let index = slot_index(tid);
    if let Some(h) = holder(index) {
        if holds(h, tid) {
            if let Some(p) = THREAD_SLOTS.get_ptr_mut(index) {
                return Some(unsafe { &mut *p });
            }
        }
    }
    THREADS.get_ptr_mut(tid).map(|p| unsafe { &mut *p })
}

/// Insert `state` as thread `tid`'s entry unless it has one (as BPF_NOEXIST): into its
/// slot when free, else the overflow. Err: it has one, or the overflow is full.
#[inline(always)]
pub fn insert_thread(tid: u32, state: &ThreadState) -> Result<(), ()> {
    if tid as u64 == thread_slots::FREE || thread(tid).is_some() {
        return Err(());
    }
    let index = slot_index(tid);
    let filling = tid as u64 | thread_slots::FILLING;
    if let (Some(h), Some(p)) = (holder(index), THREAD_SLOTS.get_ptr_mut(index)) {
        let (seen, claimed) = swap_holder(h, thread_slots::FREE, filling);
        if claimed {
            // SAFETY: the slot is ours (claimed above); lookups do not match it until
            // its holder is `tid`.
            unsafe { *p = *state };
            swap_holder(h, filling, tid as u64);
            // Another inserter of this tid may have put it in the overflow meanwhile
            // (its slot was another thread's when it looked): the slot wins.
            let _ = THREADS.remove(&tid);
            return Ok(());
        }
        if seen & !thread_slots::FILLING == tid as u64 {
            // Being inserted by someone else (userspace at attach).
            return Err(());
        }
    }
    THREADS
        .insert(&tid, state, BPF_NOEXIST as u64)
        .map_err(|_| ())?;
    // The slot may have been freed and taken for this tid since the lookup above: the
    // slot wins, and this entry goes.
    if let Some(h) = holder(index) {
        // SAFETY: a map value, valid while the program runs.
        if unsafe { core::ptr::read_volatile(h) } & !thread_slots::FILLING == tid as u64 {
            let _ = THREADS.remove(&tid);
            return Err(());
        }
    }
    Ok(())
}

/// Forget thread `tid`'s entry.
#[inline(always)]
pub fn remove_thread(tid: u32) {
    if let Some(h) = holder(slot_index(tid)) {
        if holds(h, tid) {
            swap_holder(h, tid as u64, thread_slots::FREE);
            return;
        }
    }
    let _ = THREADS.remove(&tid);
}
