//! `--stacks`: the stacks of a thread that has been blocked in one syscall since before
//! tracing began. No switch-out inside that call was seen, so the BPF programs never
//! copied its stack; "why is my process hung?" needs it most. It is read from /proc
//! instead, where the kernel shows a task blocked in a syscall:
//!
//! - `/proc/PID/task/TID/syscall`: the call's number, and the user stack pointer and
//!   instruction pointer saved at its entry (not the frame pointer: the unwinder starts
//!   from `sp` and `ip` only, see [`BlockedStacks::user`]);
//! - the top [`STACK_COPY_BYTES`] of its user stack from `sp`, with `process_vm_readv`
//!   a page at a time (the copy ends at the first page that cannot be read), as the
//!   BPF programs copy it;
//! - `/proc/PID/task/TID/stack`: its kernel frames, by name (the addresses are hidden).
//!
//! Nothing here stops or signals the thread (ptrace would end its wait).

use std::path::PathBuf;

use kernelkite_common::bpf::STACK_COPY_BYTES;

use crate::source::procfs::PROC_ROOT;

/// Kernel frames read at most (the kernel prints at most 64).
const MAX_KERNEL_FRAMES: usize = 64;
/// The largest `stack` or `syscall` file read.
const MAX_PROC_FILE_BYTES: usize = 16 << 10;
const PAGE_BYTES: u64 = 4096;

/// What /proc shows of a thread blocked in a syscall.
#[derive(Debug)]
pub struct BlockedStacks {
    /// The syscall it is in.
    pub nr: u32,
    /// The user registers saved at the call's entry, and the stack from `sp` up
    /// (empty when no page could be read).
    pub ip: u64,
    pub sp: u64,
    pub user: Vec<u8>,
    /// The copy ended at an unreadable page before [`STACK_COPY_BYTES`].
    pub user_short: bool,
    /// Kernel frames, innermost first (empty when the file is not there: a kernel
    /// without CONFIG_STACKTRACE).
    pub kernel: Vec<String>,
}

/// Read `tid`'s stacks, if it is blocked in syscall `nr` now; `None` when it is not (it
/// runs, returned, or is in another call) or its files cannot be read.
pub fn read_blocked(tgid: u32, tid: u32, nr: u32) -> Option<BlockedStacks> {
    let dir = PathBuf::from(PROC_ROOT)
        .join(tgid.to_string())
        .join("task")
        .join(tid.to_string());
    let (in_nr, sp, ip) = parse_syscall(&read_small(&dir.join("syscall"))?)?;
    if in_nr != nr {
        return None;
    }
    let (user, user_short) = read_user_stack(tgid, sp);
    let kernel = read_small(&dir.join("stack"))
        .map(|b| parse_kernel_stack(&b))
        .unwrap_or_default();
    // It may have returned while we read: its stack then is not the call's.
    let (again, sp_again, ip_again) = parse_syscall(&read_small(&dir.join("syscall"))?)?;
    if (again, sp_again, ip_again) != (nr, sp, ip) {
        return None;
    }
    Some(BlockedStacks {
        nr,
        ip,
        sp,
        user,
        user_short,
        kernel,
    })
}

fn read_small(path: &std::path::Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_PROC_FILE_BYTES as u64)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

/// `NR ARG1 .. ARG6 SP PC` (hex but the number): the call, its stack pointer and
/// instruction pointer; `None` for `running`, `-1 SP PC` (blocked outside a syscall)
/// or anything else.
fn parse_syscall(bytes: &[u8]) -> Option<(u32, u64, u64)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    let [nr, _, _, _, _, _, _, sp, pc] = fields[..] else {
        return None;
    };
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    Some((nr.parse().ok()?, hex(sp)?, hex(pc)?))
}

/// `[<0>] do_epoll_wait+0x588/0x5e0` lines: the function names.
fn parse_kernel_stack(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|line| {
            let (_, frame) = line.split_once("] ")?;
            let name = frame.split('+').next()?.trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .take(MAX_KERNEL_FRAMES)
        .collect()
}

/// Up to [`STACK_COPY_BYTES`] of `pid`'s memory from `sp`, page by page: a page that
/// cannot be read (the end of the stack's mapping) ends the copy there. Returns the
/// bytes and whether it ended early.
fn read_user_stack(pid: u32, sp: u64) -> (Vec<u8>, bool) {
    let mut buf = vec![0u8; STACK_COPY_BYTES];
    // One remote iovec per page: process_vm_readv transfers whole iovecs, so a partial
    // read stops at the first page that failed.
    let mut remote = Vec::new();
    let mut addr = sp;
    let end = sp.saturating_add(STACK_COPY_BYTES as u64);
    while addr < end {
        let next = ((addr / PAGE_BYTES) + 1) * PAGE_BYTES;
        let len = next.min(end) - addr;
        remote.push(libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len as usize,
        });
        addr = next;
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which lives and is not otherwise borrowed for
    // the call; the remote iovecs are only read by the kernel, in the other process.
    let n = unsafe {
        libc::process_vm_readv(
            pid as libc::pid_t,
            &local,
            1,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    let n = usize::try_from(n).unwrap_or(0);
    buf.truncate(n);
    (buf, n < STACK_COPY_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syscall_file_gives_the_call_and_its_registers() {
        let line = b"232 0x5 0x7f9810f6f700 0x2790 0x64 0x2 0x0 0x7fff0eb93d80 0x7f9811726f36\n";
        assert_eq!(
            parse_syscall(line),
            Some((232, 0x7fff_0eb9_3d80, 0x7f98_1172_6f36))
        );
        assert_eq!(parse_syscall(b"running\n"), None);
        assert_eq!(parse_syscall(b"-1 0x7ffc 0x401000\n"), None);
        assert_eq!(parse_syscall(b""), None);
        assert_eq!(parse_syscall(b"1 2 3 4 5 6 7 zz 0x1\n"), None);
    }

    #[test]
    fn kernel_frames_are_named_innermost_first() {
        let text = b"[<0>] do_epoll_wait+0x588/0x5e0\n[<0>] __x64_sys_epoll_wait+0x6c/0x130\n\
                     [<0>] do_syscall_64+0x71/0x290\nnot a frame\n";
        assert_eq!(
            parse_kernel_stack(text),
            ["do_epoll_wait", "__x64_sys_epoll_wait", "do_syscall_64"]
        );
    }

    /// Our own thread is not blocked in the call asked about: nothing is read.
    #[test]
    fn a_thread_not_in_the_call_gives_nothing() {
        let pid = std::process::id();
        assert!(read_blocked(pid, pid, 232).is_none());
    }

    /// A page that cannot be read ends the copy (the first page is never mapped); a
    /// readable one is copied as it is.
    #[test]
    fn the_copy_stops_at_an_unmapped_page() {
        let (bytes, short) = read_user_stack(std::process::id(), 0x10);
        assert!(bytes.is_empty() && short);
        let local = [7u8; 64];
        let (bytes, _) = read_user_stack(std::process::id(), local.as_ptr() as u64);
        assert_eq!(&bytes[..64], &local[..]);
    }
}
