//! Syscall numbers of the running architecture (from the `syscalls` crate), and how a
//! sleep inside each one is classified by the BPF programs.

use kernelkite_common::bpf::{syscall_kind, MAX_SYSCALL_NR};
use kernelkite_common::class::{IO_SYSCALLS, LOCK_SYSCALLS};
use syscalls::Sysno;

use crate::model::syscalls::syscall_name;

/// The `SYSCALL_KIND` map contents: one entry per syscall number below MAX_SYSCALL_NR.
pub fn kind_table() -> Vec<(u32, u8)> {
    Sysno::iter()
        .filter_map(|s| {
            let nr = u32::try_from(s.id())
                .ok()
                .filter(|nr| *nr < MAX_SYSCALL_NR)?;
            let name = s.name();
            let kind = if name == "futex" {
                syscall_kind::FUTEX
            } else if LOCK_SYSCALLS.contains(&name) {
                // futex_waitv, futex_wait: always a wait.
                syscall_kind::LOCK
            } else if IO_SYSCALLS.contains(&name) {
                syscall_kind::IO
            } else {
                syscall_kind::OTHER
            };
            (kind != syscall_kind::OTHER).then_some((nr, kind))
        })
        .collect()
}

/// The name of syscall `nr` on this architecture, or `syscall_<nr>`.
pub fn name(nr: u32) -> String {
    match syscall_name(std::env::consts::ARCH, i64::from(nr)) {
        Some(name) => name.to_string(),
        None => format!("syscall_{nr}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn futex_read_and_fsync_are_classified() {
        let table = kind_table();
        let number = |n: &str| crate::model::syscalls::syscall_number(std::env::consts::ARCH, n);
        let kind_of = |n: &str| {
            table
                .iter()
                .find(|(nr, _)| Some(*nr) == number(n))
                .map(|(_, k)| *k)
        };
        assert_eq!(kind_of("futex"), Some(syscall_kind::FUTEX));
        assert_eq!(kind_of("read"), Some(syscall_kind::IO));
        assert_eq!(kind_of("fsync"), Some(syscall_kind::IO));
        assert_eq!(kind_of("nanosleep"), None);
        assert_eq!(name(number("read").unwrap()), "read");
    }
}
