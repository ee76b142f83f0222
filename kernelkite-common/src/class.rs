//! Latency classes: the seven ways a thread's wall time is spent.
//!
//! Every nanosecond of a thread's life inside the observed window belongs to exactly
//! one class, so the seven add up to the thread's wall time. The rules, applied in this
//! order to the interval that starts when a thread leaves the CPU:
//!
//! 1. `runqueue` — it was still runnable (preempted, state R), or it was woken and is
//!    waiting for a CPU;
//! 2. `lock_wait` — it sleeps inside a futex wait/lock operation;
//! 3. `io_wait` — it sleeps with `in_iowait` set (io_schedule(): what delay accounting
//!    counts as blkio delay). Where the flag can be read (tp_btf hooks), a D-state sleep
//!    inside a file or block I/O syscall without it is a kernel lock (a file's
//!    `f_pos_lock` in `fdget_pos`, an inode's `i_rwsem`), so `lock_wait`; where it
//!    cannot (classic tracepoints, /proc) such a sleep stands in for the flag: `io_wait`;
//! 4. `syscall_blocked` — it sleeps inside any other syscall;
//! 5. `unknown_wait` — anything else (no syscall in progress: a page fault, a signal stop).
//!
//! The interval from switch-in to switch-out is split in two: `on_cpu` is the part the
//! kernel accounted to the thread (the move of its `se.sum_exec_runtime`, what rusage
//! and schedstat report), `steal` the rest: time the thread was current but the kernel
//! did not run it (hypervisor steal with `CONFIG_PARAVIRT_TIME_ACCOUNTING`, interrupt
//! service with `CONFIG_IRQ_TIME_ACCOUNTING`). Where the runtime cannot be read
//! (classic tracepoints, /proc) the whole interval is `on_cpu` and `steal` is 0.
//! `off_cpu` is the sum of every class but `on_cpu`.

/// File and block I/O syscalls: a D-state sleep inside one of them is `io_wait` where
/// `in_iowait` cannot be read, `lock_wait` where it can and is not set.
pub const IO_SYSCALLS: &[&str] = &[
    "read",
    "write",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "preadv",
    "pwritev",
    "preadv2",
    "pwritev2",
    "fsync",
    "fdatasync",
    "sync_file_range",
    "sync",
    "syncfs",
    "msync",
    "io_uring_enter",
    "io_getevents",
    "io_pgetevents",
    "sendfile",
    "splice",
    "copy_file_range",
    "fallocate",
    "truncate",
    "ftruncate",
    "open",
    "openat",
    "close",
];

/// Syscalls whose sleeps are lock waits: `futex` (for its wait and lock operations,
/// which the BPF programs check; from /proc every futex sleep counts) and the
/// futex2 waits.
pub const LOCK_SYSCALLS: &[&str] = &["futex", "futex_waitv", "futex_wait"];

/// Number of latency classes; class ids are `0..NUM_CLASSES`.
pub const NUM_CLASSES: usize = 7;

/// One latency class. The discriminant is the id used in BPF maps and bundles.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LatencyClass {
    /// Running on a CPU (switch-in to switch-out).
    OnCpu = 0,
    /// Runnable, waiting for a CPU (preempted, or woken and not yet running).
    Runqueue = 1,
    /// Sleeping in I/O: `in_iowait` set, or D state inside a file/block I/O syscall.
    IoWait = 2,
    /// Sleeping inside a futex wait or lock operation.
    LockWait = 3,
    /// Sleeping inside any other syscall (epoll_wait, nanosleep, pipe/socket read, wait4, ...).
    SyscallBlocked = 4,
    /// Off-CPU with no syscall in progress (page fault, signal stop) or in an unknown state.
    UnknownWait = 5,
    /// Current on a CPU but not run for it: the part of a switch-in to switch-out
    /// interval the kernel did not account to the thread (hypervisor steal, irq time).
    Steal = 6,
}

impl LatencyClass {
    /// All classes in id order.
    pub const ALL: [LatencyClass; NUM_CLASSES] = [
        LatencyClass::OnCpu,
        LatencyClass::Runqueue,
        LatencyClass::IoWait,
        LatencyClass::LockWait,
        LatencyClass::SyscallBlocked,
        LatencyClass::UnknownWait,
        LatencyClass::Steal,
    ];

    /// The class with this id, if any.
    pub const fn from_id(id: u32) -> Option<LatencyClass> {
        match id {
            0 => Some(LatencyClass::OnCpu),
            1 => Some(LatencyClass::Runqueue),
            2 => Some(LatencyClass::IoWait),
            3 => Some(LatencyClass::LockWait),
            4 => Some(LatencyClass::SyscallBlocked),
            5 => Some(LatencyClass::UnknownWait),
            6 => Some(LatencyClass::Steal),
            _ => None,
        }
    }

    pub const fn id(self) -> u32 {
        self as u32
    }

    /// The snake_case name used in JSON, reports and `--class` arguments.
    pub const fn name(self) -> &'static str {
        match self {
            LatencyClass::OnCpu => "on_cpu",
            LatencyClass::Runqueue => "runqueue",
            LatencyClass::IoWait => "io_wait",
            LatencyClass::LockWait => "lock_wait",
            LatencyClass::SyscallBlocked => "syscall_blocked",
            LatencyClass::UnknownWait => "unknown_wait",
            LatencyClass::Steal => "steal",
        }
    }

    /// The rule that assigns time to this class, in one line.
    pub const fn rule(self) -> &'static str {
        match self {
            LatencyClass::OnCpu => "running on a CPU: the kernel's accounted runtime (se.sum_exec_runtime) from switch-in to switch-out",
            LatencyClass::Runqueue => "runnable but not running: preempted, or woken and waiting for a CPU",
            LatencyClass::IoWait => "asleep with in_iowait set (classic tracepoints, /proc: in D state inside a file/block I/O syscall)",
            LatencyClass::LockWait => "asleep inside a futex wait/lock operation (futex WAIT*, LOCK_PI*, futex_waitv), or in D state without in_iowait inside a file/block I/O syscall (a kernel lock)",
            LatencyClass::SyscallBlocked => "asleep inside any other syscall (poll, epoll_wait, nanosleep, pipe/socket read, wait4, ...)",
            LatencyClass::UnknownWait => "off-CPU with no syscall in progress (page fault, signal stop) or in an unknown state",
            LatencyClass::Steal => "current on a CPU but not run: the rest of a switch-in to switch-out interval (hypervisor steal, irq time)",
        }
    }

    /// Parse a class name as printed by [`LatencyClass::name`].
    pub fn from_name(name: &str) -> Option<LatencyClass> {
        let mut i = 0;
        while i < NUM_CLASSES {
            if LatencyClass::ALL[i].name().eq_ignore_ascii_case(name) {
                return Some(LatencyClass::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// True for every class except `on_cpu`.
    pub const fn is_off_cpu(self) -> bool {
        !matches!(self, LatencyClass::OnCpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_names_parse() {
        for (i, class) in LatencyClass::ALL.iter().enumerate() {
            assert_eq!(class.id() as usize, i);
            assert_eq!(LatencyClass::from_id(i as u32), Some(*class));
            assert_eq!(LatencyClass::from_name(class.name()), Some(*class));
        }
        assert_eq!(LatencyClass::from_id(7), None);
        assert_eq!(LatencyClass::from_name("sleeping"), None);
        assert!(!LatencyClass::OnCpu.is_off_cpu());
        assert!(LatencyClass::UnknownWait.is_off_cpu());
    }
}
