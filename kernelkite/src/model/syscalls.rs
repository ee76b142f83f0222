//! Syscall numbers → names (per architecture, from the `syscalls` crate) and the rule
//! that maps a sampled thread state to a latency class for the /proc estimate.

use kernelkite_common::LatencyClass;

/// The name of syscall `nr` on `arch` (`x86_64`, `aarch64`), or `None` when the
/// architecture or the number is unknown.
pub fn syscall_name(arch: &str, nr: i64) -> Option<&'static str> {
    if nr < 0 {
        return None;
    }
    let nr = usize::try_from(nr).ok()?;
    match arch {
        "x86_64" => syscalls::x86_64::Sysno::new(nr).map(|s| s.name()),
        "aarch64" | "arm64" => syscalls::aarch64::Sysno::new(nr).map(|s| s.name()),
        _ => None,
    }
}

/// The number of syscall `name` on `arch`, or `None` when unknown.
pub fn syscall_number(arch: &str, name: &str) -> Option<u32> {
    let id = match arch {
        "x86_64" => name.parse::<syscalls::x86_64::Sysno>().ok()?.id(),
        "aarch64" | "arm64" => name.parse::<syscalls::aarch64::Sysno>().ok()?.id(),
        _ => return None,
    };
    u32::try_from(id).ok()
}

pub use kernelkite_common::class::{IO_SYSCALLS, LOCK_SYSCALLS};

/// The latency class one off-CPU sample of a thread votes for (the /proc estimate).
///
/// The same order as the eBPF rules (`kernelkite_common::class`), first match wins:
/// 1. a syscall named in [`LOCK_SYSCALLS`] → `lock_wait`;
/// 2. state `D` (the kernel's in_iowait flag is not in /proc; uninterruptible sleep
///    is its proxy) → `io_wait`;
/// 3. any other syscall with a known name → `syscall_blocked` (so an `S`-state read
///    of a pipe or socket is `syscall_blocked`, as the eBPF backend counts it);
/// 4. anything else (no syscall known, `-1`, an unknown number or architecture,
///    states other than R/D/S) → `unknown_wait`.
///
/// Returns `None` for a running sample (state `R`): it votes for no sleep class.
pub fn sample_class(arch: &str, state: &str, syscall_nr: Option<i64>) -> Option<LatencyClass> {
    if state == "R" {
        return None;
    }
    let name = syscall_nr.and_then(|nr| syscall_name(arch, nr));
    if name.is_some_and(|n| LOCK_SYSCALLS.contains(&n)) {
        return Some(LatencyClass::LockWait);
    }
    if state == "D" {
        return Some(LatencyClass::IoWait);
    }
    match name {
        Some(_) => Some(LatencyClass::SyscallBlocked),
        None => Some(LatencyClass::UnknownWait),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_per_arch() {
        assert_eq!(syscall_name("x86_64", 0), Some("read"));
        assert_eq!(syscall_name("x86_64", 202), Some("futex"));
        assert_eq!(syscall_name("aarch64", 63), Some("read"));
        assert_eq!(syscall_name("aarch64", 98), Some("futex"));
        assert_eq!(syscall_name("riscv128", 0), None);
        assert_eq!(syscall_name("x86_64", -1), None);
        assert_eq!(syscall_name("x86_64", 100_000), None);
        assert_eq!(syscall_number("x86_64", "futex"), Some(202));
        assert_eq!(syscall_number("aarch64", "read"), Some(63));
        assert_eq!(syscall_number("x86_64", "nope"), None);
    }

    #[test]
    fn class_rules() {
        use LatencyClass::*;
        assert_eq!(sample_class("x86_64", "R", None), None);
        assert_eq!(sample_class("x86_64", "D", None), Some(IoWait));
        assert_eq!(sample_class("x86_64", "D", Some(202)), Some(LockWait));
        assert_eq!(sample_class("x86_64", "D", Some(0)), Some(IoWait));
        assert_eq!(sample_class("x86_64", "S", Some(0)), Some(SyscallBlocked)); // pipe read
        assert_eq!(sample_class("x86_64", "S", Some(202)), Some(LockWait));
        assert_eq!(sample_class("x86_64", "S", Some(7)), Some(SyscallBlocked)); // poll
        assert_eq!(sample_class("x86_64", "S", Some(-1)), Some(UnknownWait));
        assert_eq!(sample_class("x86_64", "S", None), Some(UnknownWait));
        assert_eq!(sample_class("mips", "S", Some(0)), Some(UnknownWait));
    }
}
