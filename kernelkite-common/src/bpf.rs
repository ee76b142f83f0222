//! Map keys, map values, globals and ring-buffer records shared with `kernelkite-ebpf`.
//!
//! Every type is `#[repr(C)]` with explicit padding so both sides agree on the layout
//! byte for byte; the size assertions at the bottom fail the build if they drift.

use crate::hist::NUM_BUCKETS;
use crate::{LatencyClass, NUM_CLASSES};

/// `ThreadState::run_state`: where the thread is, as far as the BPF programs know.
pub mod run_state {
    /// Running on a CPU since `since_ns`.
    pub const ON_CPU: u32 = 0;
    /// Runnable (preempted, or woken) since `since_ns`, waiting for a CPU.
    pub const RUNNABLE: u32 = 1;
    /// Asleep since `since_ns`; the sleep's class is `sleep_class`.
    pub const SLEEPING: u32 = 2;
    /// Inserted by userspace at attach time; `sleep_class` holds the class read from
    /// /proc, used if the thread's first event is a wakeup or a switch-in. A first
    /// switch-out means the thread was on a CPU all along.
    pub const INITIAL: u32 = 3;
    /// Exited, but its exit record could not be sent: userspace reads and removes it.
    pub const EXITED: u32 = 4;
}

/// `ThreadState::exit_flags`. The work of an exit after `sched_process_exit` (freeing
/// the address space, closing files) is CPU the kernel accounts to the thread, so under
/// tp_btf hooks its last interval closes, and its exit record is sent, at the switch-out
/// of the dead task, with the final runtime.
pub mod exit_flags {
    /// Past `sched_process_exit`; `exit_code` holds the exit code.
    pub const EXITING: u32 = 1;
    /// It was its process's last thread: the target bit is cleared with the record.
    pub const GROUP_DEAD: u32 = 2;
}

/// The names of the maps userspace opens, defined once: the BPF programs' map statics
/// (`kernelkite-ebpf/src/maps.rs`) carry the same names, which the object's own map
/// table is checked against (`source::ebpf::loader`'s tests).
pub mod map_names {
    pub const CRITICAL_PATH_LOST: &str = "CRITICAL_PATH_LOST";
    pub const EVENTS: &str = "EVENTS";
    pub const GATE: &str = "GATE";
    pub const KERNEL_STACKS: &str = "KERNEL_STACKS";
    pub const LOST: &str = "LOST";
    pub const STACK_TIMES: &str = "STACK_TIMES";
    pub const SYSCALL_HISTS: &str = "SYSCALL_HISTS";
    pub const SYSCALL_KIND: &str = "SYSCALL_KIND";
    pub const TARGETS: &str = "TARGETS";
    pub const THREADS: &str = "THREADS";
    pub const HIST_HOLDERS: &str = "HIST_HOLDERS";
    pub const HIST_SLOTS: &str = "HIST_SLOTS";
    pub const THREAD_HOLDERS: &str = "THREAD_HOLDERS";
    pub const THREAD_SLOTS: &str = "THREAD_SLOTS";
    pub const USER_STACKS: &str = "USER_STACKS";
    pub const WAKERS: &str = "WAKERS";
    pub const WAKERS_LOST: &str = "WAKERS_LOST";
    pub const WAKER_HOLDERS: &str = "WAKER_HOLDERS";
    pub const WAKER_SLOTS: &str = "WAKER_SLOTS";
    /// Every one of them.
    pub const ALL: &[&str] = &[
        CRITICAL_PATH_LOST,
        EVENTS,
        GATE,
        HIST_HOLDERS,
        HIST_SLOTS,
        KERNEL_STACKS,
        LOST,
        STACK_TIMES,
        SYSCALL_HISTS,
        SYSCALL_KIND,
        TARGETS,
        THREADS,
        THREAD_HOLDERS,
        THREAD_SLOTS,
        USER_STACKS,
        WAKERS,
        WAKERS_LOST,
        WAKER_HOLDERS,
        WAKER_SLOTS,
    ];
}

/// The `TARGETS` bitmap: one bit per tgid, 64 to a `u64` word, for every pid up to the
/// kernel's largest `pid_max` (2^22).
pub mod targets {
    /// Words in the map.
    pub const WORDS: u32 = (1 << 22) / 64;

    /// The word holding `tgid`'s bit.
    #[inline(always)]
    pub const fn word(tgid: u32) -> u32 {
        tgid >> 6
    }

    /// `tgid`'s bit within its word.
    #[inline(always)]
    pub const fn bit(tgid: u32) -> u64 {
        1u64 << (tgid & 63)
    }
}

/// The per-CPU notes of an untraced task that sys_enter and sys_exit skip on
/// (kernelkite-ebpf's `maps::UNTRACED_CPU`): a `pt_regs` pointer and a generation.
pub mod untraced_notes {
    /// CPUs with a note; tasks on higher CPU ids take the bit test.
    pub const CPUS: usize = 1024;
    /// u64s from one CPU's note to the next: a cache line each, since a CPU writes
    /// its note while the other CPUs read theirs.
    pub const STRIDE: usize = 8;
    /// Size of the array, in u64s.
    pub const LEN: usize = CPUS * STRIDE;
}

/// The thread table: each traced thread's [`ThreadState`] lives in `THREAD_SLOTS`, an
/// array indexed by `tid & mask` (a lookup is a few loads, where a hash lookup cost the
/// hot path about 8 ns a time), unless another live thread holds that slot; then it
/// lives in `THREADS`, a hash map keyed by tid (the overflow). `THREAD_HOLDERS`, an
/// array of u64 beside the slots, says whose each slot is: the tid, [`FREE`], or the
/// tid with [`FILLING`] while its inserter writes the slot. The holders are apart so
/// that userspace maps only them (128 KiB), not the slots (3.75 MiB): a mapping of a
/// BPF array is resident in full. 64 bits: BPF has no 32-bit compare-and-swap
/// without alu32.
pub mod thread_slots {
    /// Slots unless `--max-threads` is smaller (a power of two: the index is a mask).
    /// 16,384 x 240 bytes is 3.75 MiB of kernel memory.
    pub const DEFAULT: u32 = 16_384;
    /// The holder of a free slot.
    pub const FREE: u64 = 0;
    /// Bit set in a holder while its inserter fills the slot (the rest is the tid
    /// being inserted).
    pub const FILLING: u64 = 1 << 63;

    /// Slots for a table of `max_threads` (`--max-threads`): the largest power of two
    /// not above it, at most [`DEFAULT`].
    pub fn for_max_threads(max_threads: u32) -> u32 {
        let n = max_threads.clamp(1, DEFAULT);
        1 << (31 - n.leading_zeros())
    }
}

/// The syscall histograms' slots: the calls of syscall `nr` by thread `tid` of `tgid`
/// are counted in `HIST_SLOTS` at [`hist_slots::index`] of their holder (a hash of
/// the three), unless another holds that slot; then in `SYSCALL_HISTS` (the overflow,
/// per (tgid, nr)). A slot is one thread's, so its calls end one at a time and the
/// programs add to it without atomics. Userspace adds a process's slots and overflow
/// entry up, and frees the slots of threads gone. `HIST_HOLDERS` says whose each slot
/// is ([`hist_slots::FREE`] or a holder); a free slot is zeroed, so a program claims
/// one with a single compare-and-swap.
pub mod hist_slots {
    use super::SYSCALL_BEFORE_START;

    /// Slots (a power of two): 4,096 x 2,448 bytes is 9.6 MiB of kernel memory.
    pub const DEFAULT: u32 = 4_096;
    /// The holder of a free slot (tid 0 is the idle task, never traced).
    pub const FREE: u64 = 0;
    /// The holder of a slot userspace is freeing (no holder: pids stay below 2^22, so
    /// holders below 2^55). The programs take it for another's.
    pub const CLEARING: u64 = u64::MAX;
    /// Pids (tgids and tids) are below 2^22 (PID_MAX_LIMIT).
    const PID_BITS: u32 = 22;
    /// Syscall numbers a slot holds are below 2^10 (x86-64 and arm64 numbers are);
    /// larger ones (x32's) are counted in the overflow.
    const NR_BITS: u32 = 10;

    /// The holder word of thread `tid` of `tgid` calling `nr` (which may carry
    /// [`SYSCALL_BEFORE_START`]), or None when they do not fit one.
    pub const fn holder(tgid: u32, tid: u32, nr: u32) -> Option<u64> {
        let before = (nr & SYSCALL_BEFORE_START != 0) as u64;
        let nr = nr & !SYSCALL_BEFORE_START;
        if nr >= 1 << NR_BITS || tgid >= 1 << PID_BITS || tid >= 1 << PID_BITS || tid == 0 {
            return None;
        }
        Some(
            ((tgid as u64) << (PID_BITS + NR_BITS + 1))
                | ((tid as u64) << (NR_BITS + 1))
                | (before << NR_BITS)
                | nr as u64,
        )
    }

    /// The (tgid, tid, nr) of a holder word.
    pub const fn key(holder: u64) -> (u32, u32, u32) {
        let before = if holder & (1 << NR_BITS) != 0 {
            SYSCALL_BEFORE_START
        } else {
            0
        };
        (
            (holder >> (PID_BITS + NR_BITS + 1)) as u32,
            ((holder >> (NR_BITS + 1)) & ((1 << PID_BITS) - 1)) as u32,
            (holder & ((1 << NR_BITS) - 1)) as u32 | before,
        )
    }

    /// The slot index of a holder word in a table of `mask + 1` slots (Fibonacci
    /// hashing: the threads' syscalls spread over the table).
    pub const fn index(holder: u64, mask: u32) -> u32 {
        (holder.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32 & mask
    }
}

/// `ThreadState::sys_nr` when the thread is not inside a syscall.
pub const NO_SYSCALL: u32 = u32::MAX;

/// Values of the `SYSCALL_KIND` array map (indexed by syscall number): how a sleep
/// inside that syscall is classified.
pub mod syscall_kind {
    /// Any other syscall: a sleep inside it is `syscall_blocked`.
    pub const OTHER: u8 = 0;
    /// File or block I/O: a sleep in D state inside it is `io_wait`.
    pub const IO: u8 = 1;
    /// `futex`: a lock wait only for the WAIT/LOCK operations (decided at sys_enter).
    pub const FUTEX: u8 = 2;
    /// Always a lock wait (`futex_waitv`, `futex_wait`).
    pub const LOCK: u8 = 3;
}

/// Size of the `SYSCALL_KIND` array: syscall numbers at or above it count as OTHER.
pub const MAX_SYSCALL_NR: u32 = 1024;

/// Per-thread state, the value of the `THREADS` hash map (key: tid as u32). The BPF
/// programs update it in place, so a syscall costs lookups, never an insert or delete.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadState {
    /// The thread's process id.
    pub tgid: u32,
    /// One of [`run_state`].
    pub run_state: u32,
    /// CLOCK_MONOTONIC ns when `run_state` was entered.
    pub since_ns: u64,
    /// Class id of the current sleep (SLEEPING, INITIAL).
    pub sleep_class: u32,
    /// Syscall in progress, or [`NO_SYSCALL`].
    pub sys_nr: u32,
    /// CLOCK_MONOTONIC ns at sys_enter of the syscall in progress.
    pub sys_enter_ns: u64,
    /// 1 when the syscall in progress is a lock wait (futex WAIT/LOCK ops, futex_waitv).
    pub sys_is_lock: u32,
    /// Exit code (`task_struct.exit_code`) once the thread exited (EXITED only).
    pub exit_code: u32,
    /// Nanoseconds per latency class, by class id, completed intervals only.
    pub class_ns: [u64; NUM_CLASSES],
    /// CLOCK_MONOTONIC ns when tracking of this thread started (attach or fork).
    pub start_ns: u64,
    /// [`exit_flags`] bits: the thread is past `sched_process_exit` and its exit record
    /// waits for its final switch-out (tp_btf hooks).
    pub exit_flags: u32,
    /// `--stacks`: stack id (in `USER_STACKS`) of the user stack captured when the thread
    /// last left the CPU outside a syscall; [`NO_STACK`] otherwise (inside a syscall the
    /// user stack is taken at sys_exit, where it is the same, and only after a long block).
    pub user_stack_id: i32,
    /// `--stacks`: CLOCK_MONOTONIC ns when the thread last left the CPU.
    pub off_cpu_since_ns: u64,
    /// `--stacks`: the part of the current off-CPU period spent asleep (closed at the
    /// wakeup); the rest of the period is runqueue time.
    pub off_cpu_sleep_ns: u64,
    /// `--stacks`: a long block inside a syscall waiting for its user stack at sys_exit:
    /// sleep class id (or [`NO_PENDING`]), off-CPU periods, asleep ns, runqueue ns,
    /// kernel stack hash.
    pub pending_class: u32,
    pub pending_periods: u32,
    pub pending_sleep_ns: u64,
    pub pending_runq_ns: u64,
    pub pending_kernel_stack: u64,
    /// First argument of the syscall in progress (classic tracepoints only, where the
    /// fork and exit hooks need it: clone flags, exit status).
    pub sys_arg0: u64,
    /// The thread's `se.sum_exec_runtime` already given to `on_cpu` (read at its first
    /// switch-in, then advanced by each on-CPU interval's on_cpu part), or
    /// [`NO_RUNTIME`] before it is known (classic tracepoints: always).
    pub runtime_ns: u64,
    /// `--stacks`: the user stack of the syscall in progress, captured at a switch-out
    /// inside it (it does not move while the call runs, so every wait of the call
    /// shares it, and a wait still in progress at the end has it), or [`NO_STACK`].
    pub sys_user_stack_id: i32,
    /// [`sys_flags`] bits of the syscall in progress.
    pub sys_flags: u32,
    /// `--stacks`: CLOCK_MONOTONIC ns of the last capture at a switch-out inside a
    /// syscall: such captures are at most one per `STACK_MIN_BLOCK_NS` per thread.
    pub last_capture_ns: u64,
    /// `--stacks`: 1 when the pending block is a sampled one (its times are weighted
    /// estimates, see `StackTime::estimated_ns`), 0 when it is exact.
    pub pending_sampled: u32,
    /// Explicit padding; always 0.
    pub _pad: u32,
    /// Who ran `try_to_wake_up` for the thread's current sleep (sched_waking, in the
    /// waker's context), kept until the wakeup ends the sleep (sched_wakeup, which may
    /// run later on the wakee's CPU). In the thread's own entry, which both hooks look
    /// up anyway: a map of its own cost an LRU update per wakeup.
    pub waker: crate::wake::PendingWaker,
}

/// `ThreadState::sys_flags`.
pub mod sys_flags {
    /// The syscall was already running when tracing started (userspace read it from
    /// /proc at attach): `sys_enter_ns` is the attach time, and its completion is
    /// counted under `nr | SYSCALL_BEFORE_START` in the histograms, apart from the
    /// calls that started inside the session.
    pub const BEFORE_START: u32 = 1;
}

/// Bit set in `SyscallKey::nr` for calls that were already running at attach
/// ([`sys_flags::BEFORE_START`]): their latency is only the part inside the session.
pub const SYSCALL_BEFORE_START: u32 = 1 << 31;

impl Default for ThreadState {
    /// All zero, but no stack captured and nothing pending.
    fn default() -> Self {
        ThreadState {
            tgid: 0,
            run_state: 0,
            since_ns: 0,
            sleep_class: 0,
            sys_nr: 0,
            sys_enter_ns: 0,
            sys_is_lock: 0,
            exit_code: 0,
            class_ns: [0; NUM_CLASSES],
            start_ns: 0,
            exit_flags: 0,
            user_stack_id: NO_STACK,
            off_cpu_since_ns: 0,
            off_cpu_sleep_ns: 0,
            pending_class: NO_PENDING,
            pending_periods: 0,
            pending_sleep_ns: 0,
            pending_runq_ns: 0,
            pending_kernel_stack: 0,
            sys_arg0: 0,
            runtime_ns: NO_RUNTIME,
            sys_user_stack_id: NO_STACK,
            sys_flags: 0,
            last_capture_ns: 0,
            pending_sampled: 0,
            _pad: 0,
            waker: crate::wake::PendingWaker {
                kind: 0,
                source: 0,
                waker_tgid: 0,
                waker_tid: 0,
                comm: [0; COMM_LEN],
                sleep_since_ns: 0,
            },
        }
    }
}

/// `ThreadState::runtime_ns` while the thread's kernel runtime is not known.
pub const NO_RUNTIME: u64 = u64::MAX;

impl ThreadState {
    /// Close the interval that ends at `now` of a thread switched out while it was
    /// held runnable: the switch-in that put it on the CPU was not seen (the hook's
    /// run was skipped; another tracer attaching to or detaching from the same
    /// tracepoint can cause it without the kernel counting a recursion miss). The
    /// interval is a wait in the runqueue followed by a run, and the move of the
    /// thread's kernel runtime (`runtime_ns`, against the baseline) says how long the
    /// run was: that is on_cpu, as in [`ThreadState::split_on_cpu`], and what came
    /// before it runqueue. Before, the whole interval was runqueue (one timeslice,
    /// 3.4 ms, once in a CI run).
    #[inline(always)]
    pub fn close_unseen_run(&mut self, runtime_ns: u64, now: u64) {
        self.close_around_run(LatencyClass::Runqueue, runtime_ns, now);
    }

    /// Close the interval that ends at `now` of a thread switched in while it was
    /// taken to be on a CPU already: its switch-out was not seen. Seen on the test
    /// machine's init process, every one of whose threads' own-context events
    /// (switch-outs, syscalls) went missing for bpftrace too, cause not found. Its
    /// runtime moved only by what it ran, so that is on_cpu and the rest of the
    /// interval, a wait of unknown kind, unknown_wait. Before, the whole interval was
    /// on_cpu: 4 asleep threads at 100 % on_cpu each, where schedstat moved 0-35 ms
    /// in 3 s.
    #[inline(always)]
    pub fn close_missed_switch_out(&mut self, runtime_ns: u64, now: u64) {
        self.close_around_run(LatencyClass::UnknownWait, runtime_ns, now);
    }

    /// An interval of a run of the length the runtime moved, plus a wait in `class`
    /// for the rest (none when the clock did not move); the run itself, and any
    /// runtime beyond it, as split_on_cpu does.
    #[inline(always)]
    fn close_around_run(&mut self, class: LatencyClass, runtime_ns: u64, now: u64) {
        let ran = runtime_ns.saturating_sub(self.runtime_ns);
        let waited = now.saturating_sub(self.since_ns).saturating_sub(ran);
        if let Some(slot) = self.class_ns.get_mut(class as usize) {
            *slot += waited;
            self.since_ns += waited;
        }
        self.split_on_cpu(runtime_ns, now);
    }

    /// Close the on-CPU interval that ends at `now` of a thread whose kernel runtime
    /// (`se.sum_exec_runtime`) is now `runtime_ns`, against a known baseline
    /// (`self.runtime_ns`): the runtime the kernel accounted over it is on_cpu, the rest
    /// of the interval steal.
    ///
    /// Runtime beyond the interval is not lost. The kernel starts charging a thread at
    /// the rq clock read before it picked the thread, and the hook runs after the pick
    /// (a newly idle CPU's load balancing in between can take microseconds), so the
    /// kernel's runtime runs ahead of the hook's intervals. The excess is taken from the
    /// thread's steal so far, then from its runqueue time (the kernel says it ran while
    /// the hook still had it queued), and what neither covers waits in the baseline for
    /// a later interval. So on_cpu keeps up with the kernel's counter and the classes
    /// still add up exactly (`close_interval`'s invariant). Without the runqueue step a
    /// thread that never had steal lost its whole excess (up to 2 % of its runtime,
    /// measured beside CPU hogs).
    #[inline(always)]
    pub fn split_on_cpu(&mut self, runtime_ns: u64, now: u64) {
        if now <= self.since_ns {
            return;
        }
        let interval = now - self.since_ns;
        let accounted = runtime_ns.saturating_sub(self.runtime_ns);
        let on_cpu = if accounted < interval {
            accounted
        } else {
            interval
        };
        let excess = accounted - on_cpu;
        let stolen = self.class_ns[LatencyClass::Steal as usize] + (interval - on_cpu);
        let from_steal = if excess < stolen { excess } else { stolen };
        let queued = self.class_ns[LatencyClass::Runqueue as usize];
        let rest = excess - from_steal;
        let from_queue = if rest < queued { rest } else { queued };
        let moved = from_steal + from_queue;
        self.class_ns[LatencyClass::OnCpu as usize] += on_cpu + moved;
        self.class_ns[LatencyClass::Steal as usize] = stolen - from_steal;
        self.class_ns[LatencyClass::Runqueue as usize] = queued - from_queue;
        self.since_ns = now;
        self.runtime_ns += on_cpu + moved;
    }
}

/// `ThreadState::user_stack_id` when no stack was captured.
pub const NO_STACK: i32 = -1;
/// `ThreadState::pending_class` when nothing waits for a stack.
pub const NO_PENDING: u32 = u32::MAX;
/// Frames kept of a kernel stack (deeper frames are cut; the leaf end is kept).
pub const KERNEL_STACK_DEPTH: usize = 64;

/// A kernel stack: instruction addresses, leaf first, zero-filled after the last frame.
/// Value of the `KERNEL_STACKS` map, keyed by a hash of the addresses (never 0).
pub type KernelStack = [u64; KERNEL_STACK_DEPTH];

/// Key of the `STACK_TIMES` map: time of one thread in one class with one pair of stacks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackKey {
    pub tgid: u32,
    pub tid: u32,
    /// Latency class id.
    pub class: u32,
    /// Id in `USER_STACKS`, or [`NO_STACK`].
    pub user_stack_id: i32,
    /// Key in `KERNEL_STACKS`, or 0 when none was captured.
    pub kernel_stack: u64,
}

/// Value of the `STACK_TIMES` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackTime {
    /// Off-CPU: summed ns of the intervals at least `STACK_MIN_BLOCK_NS` long (exact);
    /// on_cpu: samples × the sampling period.
    pub total_ns: u64,
    /// Off-CPU intervals at least the threshold long, or on-CPU samples.
    pub count: u64,
    /// Off-CPU intervals shorter than the threshold are captured with probability
    /// `len / threshold` and weighted as `threshold` (split between the sleep class and
    /// runqueue as the interval was): an unbiased estimate of their time, summed here.
    pub estimated_ns: u64,
    /// Short intervals captured so (each stands for `threshold / len` of them).
    pub sampled_count: u64,
}

/// Key of the per-(process, syscall) latency histogram map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SyscallKey {
    pub tgid: u32,
    pub nr: u32,
}

/// Value of the latency histogram map. There is no count field: the buckets hold the
/// count, and leaving it out saves an atomic add per syscall.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallHist {
    pub total_ns: u64,
    pub max_ns: u64,
    pub buckets: [u64; NUM_BUCKETS],
}

impl Default for SyscallHist {
    fn default() -> Self {
        SyscallHist {
            total_ns: 0,
            max_ns: 0,
            buckets: [0; NUM_BUCKETS],
        }
    }
}

/// Indices of the per-CPU `LOST` counter array.
pub mod lost {
    /// A ring-buffer reservation for a lifecycle record (fork, exec, exit) failed (the
    /// buffer was full). A lost exit record's counters are still read from the map.
    pub const RINGBUF_FULL: u32 = 0;
    /// A new thread could not be tracked because `THREADS` was full.
    pub const THREADS_FULL: u32 = 1;
    /// A syscall latency could not be counted because the histogram map was full.
    pub const HIST_FULL: u32 = 2;
    /// `--stacks`: a stack could not be captured or stored (stack map full or a
    /// collision, a failed walk), or `STACK_TIMES` was full.
    pub const STACK: u32 = 3;
    /// A traced thread's exit was missed (the kernel skipped the exit hook's run: its
    /// recursion guard), seen when a new task gets its tid while its entry is still in
    /// `THREADS`.
    pub const MISSED: u32 = 4;
    /// A ring-buffer reservation for a slow-syscall record failed (the buffer was full).
    pub const SLOW_RECORD: u32 = 5;
    /// `--stacks`: a user stack copy was not sent (over the copy rate, ring buffer more
    /// than half full, registers unreadable): that stack came from frame pointers only.
    pub const STACK_COPY: u32 = 6;
    /// Number of counters.
    pub const COUNT: u32 = 7;
}

/// Ring-buffer record kinds (the first u32 of every record).
pub mod record_kind {
    pub const FORK: u32 = 1;
    pub const EXEC: u32 = 2;
    pub const EXIT: u32 = 3;
    pub const SLOW_SYSCALL: u32 = 4;
    /// A [`StackCaptureRecord`] followed by `stack_len` bytes of user stack.
    pub const STACK_COPY: u32 = 5;
    /// A [`StackCaptureRecord`] without stack: the times of the copy with the same
    /// (tid, `capture_ns`) sent at switch-out.
    pub const STACK_PERIOD: u32 = 6;
    /// An [`ArgvRecord`] followed by `len` bytes of the new program's argv.
    pub const ARGV: u32 = 7;
    /// `--critical-path`: a [`crate::wake::WakeupRecord`]. Numbered apart from the
    /// kinds above so kinds added next to them cannot collide with it.
    pub const WAKEUP: u32 = 16;
}

/// `--stacks`: bytes of user stack copied from the stack pointer up at each capture.
/// 16 KiB: twice perf's default `--call-graph dwarf` size, so Rust and C++ callers
/// with large frames above a libc leaf still fit, at 16 KiB of ring buffer per copy.
pub const STACK_COPY_BYTES: usize = 16 << 10;
/// The copy is read a page at a time (a page that is not resident ends the copy there
/// instead of failing all of it).
pub const STACK_COPY_CHUNK: usize = 4096;

/// `ThreadState::user_stack_id` and `SlowSyscallRecord::user_stack_id` when the user
/// stack was sent as a [`record_kind::STACK_COPY`] record (unwound in userspace).
pub const COPIED_STACK: i32 = -2;
/// `StackCaptureRecord::class` when the times follow in a STACK_PERIOD record (or,
/// for a slow syscall, the stack is its next record's).
pub const NO_CLASS: u32 = u32::MAX;

/// `StackCaptureRecord::flags`.
pub mod copy_flags {
    /// A page read failed before `STACK_COPY_BYTES` were copied: the stack's top
    /// mapping ended, or the page was not resident.
    pub const SHORT: u32 = 1;
    /// The times are an estimate: a short period captured with probability
    /// len/threshold, weighted as the threshold (`StackTime::estimated_ns`).
    pub const SAMPLED: u32 = 2;
}

/// `--stacks`: a user stack copy (its registers; `stack_len` bytes of the stack from
/// `sp` up follow the record) with the time it stands for, or (STACK_PERIOD) the time
/// of an earlier copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCaptureRecord {
    /// [`record_kind::STACK_COPY`] or [`record_kind::STACK_PERIOD`].
    pub kind: u32,
    pub tgid: u32,
    pub tid: u32,
    /// Latency class id of `class_ns`, or [`NO_CLASS`].
    pub class: u32,
    /// CLOCK_MONOTONIC ns of the capture (a slow syscall's: its start): with `tid`, what
    /// joins a copy to its period or slow syscall.
    pub capture_ns: u64,
    /// Key in `KERNEL_STACKS`, or 0.
    pub kernel_stack: u64,
    /// Time in `class`, and (off-CPU periods) the runqueue time that followed.
    pub class_ns: u64,
    pub runq_ns: u64,
    /// Off-CPU periods or on-CPU samples.
    pub count: u64,
    /// User registers at the capture (`task_pt_regs`).
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Bytes of stack following the record.
    pub stack_len: u32,
    /// [`copy_flags`] bits.
    pub flags: u32,
}

/// `LifecycleRecord::flags`.
pub mod record_flags {
    /// Exit: the exit code is not known. Classic tracepoints cannot read
    /// `task_struct.exit_code`; they know it only from the status passed to exit or
    /// exit_group, not for a thread killed by a signal.
    pub const EXIT_CODE_UNKNOWN: u32 = 1;
}

/// Length of `task_struct.comm`.
pub const COMM_LEN: usize = 16;

/// A process lifecycle event (fork, exec, exit) as sent over the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LifecycleRecord {
    /// [`record_kind`] FORK, EXEC or EXIT.
    pub kind: u32,
    /// Process the event is about (fork: the child's tgid; a new thread's fork has the
    /// tgid of the process it joined).
    pub tgid: u32,
    /// Thread the event is about (fork: the child's tid).
    pub tid: u32,
    /// Fork: the forking process's tgid; otherwise 0.
    pub parent_tgid: u32,
    /// CLOCK_MONOTONIC ns.
    pub ts_ns: u64,
    /// Exit: `task_struct.exit_code` (see [`record_flags::EXIT_CODE_UNKNOWN`]).
    pub exit_code: u32,
    /// [`record_flags`] bits.
    pub flags: u32,
    /// Exit: the thread's class times over its traced life.
    pub class_ns: [u64; NUM_CLASSES],
    /// Exit: CLOCK_MONOTONIC ns when tracking of the thread started.
    pub start_ns: u64,
    /// `task_struct.comm` (current for exec/exit, the parent's for fork), NUL-padded.
    pub comm: [u8; COMM_LEN],
}

/// Bytes of a new program's argv read at exec (its first 4 KiB, less one byte for the
/// verifier's bound): enough for `rustc --crate-name serde ...`.
pub const ARGV_BYTES: usize = 4096;

/// An exec's argv (NUL-separated, as the kernel lays it out between `mm->arg_start`
/// and `mm->arg_end`), read in the exec tracepoint; `len` bytes follow the record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgvRecord {
    /// [`record_kind::ARGV`].
    pub kind: u32,
    pub tgid: u32,
    pub tid: u32,
    /// Bytes following the record.
    pub len: u32,
    /// CLOCK_MONOTONIC ns: the exec's (its EXEC record's `ts_ns`).
    pub ts_ns: u64,
}

/// One syscall slower than the `MIN_LATENCY_NS` global.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlowSyscallRecord {
    /// [`record_kind::SLOW_SYSCALL`].
    pub kind: u32,
    pub tgid: u32,
    pub tid: u32,
    pub nr: u32,
    /// CLOCK_MONOTONIC ns at sys_enter.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// The syscall's return value.
    pub ret: i64,
    /// `--stacks`: id of the caller's user stack in `USER_STACKS`, or [`NO_STACK`].
    pub user_stack_id: i32,
    /// Explicit padding; always 0.
    pub _pad: u32,
}

const _: () = assert!(core::mem::size_of::<ThreadState>() == 240);
const _: () = assert!(core::mem::size_of::<StackKey>() == 24);
const _: () = assert!(core::mem::size_of::<StackTime>() == 32);
const _: () = assert!(core::mem::size_of::<SyscallKey>() == 8);
const _: () = assert!(core::mem::size_of::<SyscallHist>() == 16 + 8 * NUM_BUCKETS);
const _: () = assert!(core::mem::size_of::<LifecycleRecord>() == 112);
const _: () = assert!(core::mem::size_of::<SlowSyscallRecord>() == 48);
const _: () = assert!(core::mem::size_of::<StackCaptureRecord>() == 88);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), has no padding beyond explicit fields, and every bit
    // pattern is a valid value.
    unsafe impl aya::Pod for super::ThreadState {}
    unsafe impl aya::Pod for super::SyscallKey {}
    unsafe impl aya::Pod for super::SyscallHist {}
    unsafe impl aya::Pod for super::LifecycleRecord {}
    unsafe impl aya::Pod for super::ArgvRecord {}
    unsafe impl aya::Pod for super::SlowSyscallRecord {}
    unsafe impl aya::Pod for super::StackCaptureRecord {}
    unsafe impl aya::Pod for super::StackKey {}
    unsafe impl aya::Pod for super::StackTime {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hist_holder_gives_back_its_key_and_an_index_inside_the_table() {
        for (tgid, tid, nr) in [
            (1, 1, 0),
            (4_194_303, 4_194_303, 0x8000_0000 | 335),
            (77, 78, 1),
            (5, 9, 1023),
        ] {
            let holder = hist_slots::holder(tgid, tid, nr).unwrap();
            assert_ne!(holder, hist_slots::FREE);
            assert_ne!(holder, hist_slots::CLEARING);
            assert_eq!(hist_slots::key(holder), (tgid, tid, nr));
            assert!(hist_slots::index(holder, hist_slots::DEFAULT - 1) < hist_slots::DEFAULT);
        }
        // What does not fit goes to the overflow: x32 numbers, tid 0.
        assert_eq!(hist_slots::holder(1, 1, 0x4000_0000), None);
        assert_eq!(hist_slots::holder(1, 1, 1024), None);
        assert_eq!(hist_slots::holder(1, 0, 1), None);
        // Neighbouring keys spread: one thread's syscalls, consecutive threads.
        let mut taken = [false; hist_slots::DEFAULT as usize];
        let mut distinct = 0;
        for tid in 1000..1064 {
            for nr in 0..16 {
                let holder = hist_slots::holder(999, tid, nr).unwrap();
                let index = hist_slots::index(holder, hist_slots::DEFAULT - 1) as usize;
                distinct += usize::from(!taken[index]);
                taken[index] = true;
            }
        }
        assert!(distinct > 800, "{distinct} of 1024 keys in distinct slots");
    }

    #[test]
    fn thread_slots_are_a_power_of_two_not_above_max_threads_nor_the_default() {
        let cases = [
            (1, 1),
            (2, 2),
            (3, 2),
            (1000, 512),
            (16_384, 16_384),
            (65_536, 16_384),
        ];
        for (max_threads, slots) in cases {
            assert_eq!(
                thread_slots::for_max_threads(max_threads),
                slots,
                "{max_threads}"
            );
        }
        assert_eq!(thread_slots::for_max_threads(0), 1);
        assert_eq!(
            thread_slots::for_max_threads(u32::MAX),
            thread_slots::DEFAULT
        );
    }

    /// Three on-CPU intervals of one thread: the hook's clock at switch-in and
    /// switch-out, and `se.sum_exec_runtime` at switch-out (its baseline at the first
    /// switch-in was 41_000_000).
    #[test]
    fn on_cpu_is_the_accounted_runtime_and_the_rest_of_the_interval_is_steal() {
        let mut t = ThreadState {
            run_state: run_state::ON_CPU,
            since_ns: 5_000_000,
            start_ns: 5_000_000,
            runtime_ns: 41_000_000,
            ..ThreadState::default()
        };
        let on = LatencyClass::OnCpu as usize;
        let steal = LatencyClass::Steal as usize;
        // 4 ms on the CPU, of which the hypervisor took 0.25 ms.
        t.split_on_cpu(44_750_000, 9_000_000);
        assert_eq!((t.class_ns[on], t.class_ns[steal]), (3_750_000, 250_000));
        // Off the CPU for 1 ms (runqueue), then 2 ms on it that the kernel counts as
        // 300 ns more (its rq clock was read before the hook's clock at switch-in): the
        // 300 ns come out of the steal so far.
        t.class_ns[LatencyClass::Runqueue as usize] += 1_000_000;
        t.since_ns = 10_000_000;
        t.split_on_cpu(46_750_300, 12_000_000);
        assert_eq!((t.class_ns[on], t.class_ns[steal]), (5_750_300, 249_700));
        // 1 ms, 0.1 ms of it stolen.
        t.split_on_cpu(47_650_000, 13_000_000);
        assert_eq!((t.class_ns[on], t.class_ns[steal]), (6_650_000, 350_000));
        // Beyond the steal so far, the excess waits for a later interval's slack.
        let mut fresh = ThreadState {
            since_ns: 0,
            start_ns: 0,
            runtime_ns: 0,
            ..ThreadState::default()
        };
        fresh.split_on_cpu(1_000_500, 1_000_000);
        assert_eq!((fresh.class_ns[on], fresh.class_ns[steal]), (1_000_000, 0));
        fresh.split_on_cpu(1_999_500, 2_000_000);
        assert_eq!(
            (fresh.class_ns[on], fresh.class_ns[steal]),
            (1_999_500, 500)
        );
        assert_eq!(fresh.runtime_ns, 1_999_500);
        // A thread with no steal so far that waited 2 ms in the runqueue: 40 us of the
        // kernel's runtime beyond the hook's 1 ms interval come out of the runqueue.
        let runq = LatencyClass::Runqueue as usize;
        let mut queued = ThreadState {
            since_ns: 3_000_000,
            start_ns: 0,
            runtime_ns: 5_000_000,
            ..ThreadState::default()
        };
        queued.class_ns[runq] = 2_000_000;
        queued.class_ns[LatencyClass::LockWait as usize] = 1_000_000;
        queued.split_on_cpu(6_040_000, 4_000_000);
        assert_eq!(
            (
                queued.class_ns[on],
                queued.class_ns[steal],
                queued.class_ns[runq]
            ),
            (1_040_000, 0, 1_960_000)
        );
        assert_eq!(queued.runtime_ns, 6_040_000);
        assert_eq!(queued.class_ns.iter().sum::<u64>(), 4_000_000);
        // on_cpu is exactly the runtime the kernel accounted since the baseline.
        assert_eq!(t.class_ns[on], 47_650_000 - 41_000_000);
        assert_eq!(t.runtime_ns, 47_650_000);
        // The classes add up to the thread's wall time, as close_interval's do.
        let sum: u64 = t.class_ns.iter().sum();
        assert_eq!(sum, t.since_ns - t.start_ns);
        // A clock that did not move changes nothing.
        let before = t;
        t.split_on_cpu(50_000_000, 13_000_000);
        assert_eq!(t, before);
    }

    /// A preempted thread (runnable since 10 ms, runtime 20 ms) whose switch-in was not
    /// seen is switched out at 15 ms with a runtime of 23 ms: it ran 3 ms, so it waited
    /// 2 ms.
    #[test]
    fn a_run_whose_switch_in_was_not_seen_is_on_cpu_by_the_runtime_it_moved() {
        let (on, runq) = (
            LatencyClass::OnCpu as usize,
            LatencyClass::Runqueue as usize,
        );
        let mut t = ThreadState {
            run_state: run_state::RUNNABLE,
            since_ns: 10_000_000,
            start_ns: 0,
            runtime_ns: 20_000_000,
            ..ThreadState::default()
        };
        t.class_ns[on] = 10_000_000;
        t.close_unseen_run(23_000_000, 15_000_000);
        assert_eq!((t.class_ns[on], t.class_ns[runq]), (13_000_000, 2_000_000));
        assert_eq!((t.since_ns, t.runtime_ns), (15_000_000, 23_000_000));
        assert_eq!(t.class_ns.iter().sum::<u64>(), t.since_ns - t.start_ns);
        // Runtime beyond the interval (the kernel's clock ahead of the hook's): all of
        // the interval is on_cpu, and the excess comes out of the runqueue so far.
        t.close_unseen_run(25_500_000, 17_000_000);
        assert_eq!((t.class_ns[on], t.class_ns[runq]), (15_500_000, 1_500_000));
        assert_eq!(t.class_ns.iter().sum::<u64>(), t.since_ns - t.start_ns);
        // A clock that did not move changes nothing.
        let before = t;
        t.close_unseen_run(30_000_000, 17_000_000);
        assert_eq!(t, before);
    }

    /// The test machine's init process: a thread switched in at 1.0 s, its switch-out
    /// never seen, switched in again at 3.0 s having run 35 µs in all (schedstat).
    #[test]
    fn a_switch_in_of_a_thread_taken_to_be_on_cpu_is_on_cpu_only_by_its_runtime() {
        let (on, unknown, steal) = (
            LatencyClass::OnCpu as usize,
            LatencyClass::UnknownWait as usize,
            LatencyClass::Steal as usize,
        );
        let mut t = ThreadState {
            run_state: run_state::ON_CPU,
            since_ns: 1_000_000_000,
            start_ns: 0,
            runtime_ns: 500_000_000,
            ..ThreadState::default()
        };
        t.class_ns[unknown] = 1_000_000_000;
        t.close_missed_switch_out(500_035_000, 3_000_000_000);
        assert_eq!(t.class_ns[on], 35_000);
        assert_eq!(t.class_ns[unknown], 1_000_000_000 + 2_000_000_000 - 35_000);
        assert_eq!(t.class_ns[steal], 0);
        assert_eq!((t.since_ns, t.runtime_ns), (3_000_000_000, 500_035_000));
        assert_eq!(t.class_ns.iter().sum::<u64>(), t.since_ns - t.start_ns);
    }
}
