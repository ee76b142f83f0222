//! Exit accounting without privileges: `run` on /proc ptrace-seizes the command it
//! launched (a parent may trace its own descendants), with fork, vfork, clone and exit
//! events but no syscall stops, so every process and thread of the tree stops once as
//! it exits, still holding its final counters (and its command line), however short
//! its life. The sampler reads them there ([`Stop::Exit`]); a thread of a large process
//! is read once more when its exit is reported to kernelkite before its parent
//! ([`Stop::Gone`]), so its CPU includes tearing down its memory (5% of a linker's),
//! and a small one is let go at its exit stop. A process costs its fork stop, its first
//! stop, its exit stop (and report, when large), and a stop for each signal it is sent
//! (its parent's SIGCHLD among them).
//!
//! Where ptrace bites:
//! - A debugger in the tree (gdb, strace, rr, a sanitizer's leak checker) needs ptrace
//!   itself. The command runs under a seccomp filter that hands `ptrace(TRACEME |
//!   ATTACH | SEIZE)` to kernelkite first, and kernelkite steps aside: it detaches the
//!   caller of TRACEME, or the target of ATTACH/SEIZE, before the call goes on. The
//!   subtree it left is sampled as before. (A process it detached that later makes
//!   such a call again gets ENOSYS: the filter finds no tracer.)
//! - The filter needs `no_new_privs`, and a traced exec does not raise privileges
//!   anyway: setuid and file-capability programs in the tree run with the user's own.
//!   `--no-exit-stops` runs them as they would run untraced ([`note_setuid`]).
//! - Signals: a signal-delivery stop is resumed with its own signal at once (never
//!   swallowed or reordered); a group-stop is left stopped with `PTRACE_LISTEN`, so job
//!   control works as it does untraced.
//! - Yama's `ptrace_scope` 2 or 3 forbids it: `run` samples instead, and says so.

use std::collections::BTreeSet;
use std::io;
use std::path::PathBuf;

/// Followed into every descendant, and the ptrace step-aside's stops.
const FOLLOW: libc::c_int = libc::PTRACE_O_TRACEFORK
    | libc::PTRACE_O_TRACEVFORK
    | libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_TRACESECCOMP;
/// `PTRACE_O_*` options while the command is held at its gate: its exec stops (the
/// start is then complete), no exit stops yet, so a failed exec exits as it would
/// untraced (std's spawn reaps it).
const GATE_OPTIONS: libc::c_int = FOLLOW | libc::PTRACE_O_TRACEEXEC;
/// Once the command has exec'd: exits stop; execs do not (the command line is read at
/// the exit, one stop fewer per process).
const OPTIONS: libc::c_int = FOLLOW | libc::PTRACE_O_TRACEEXIT;

/// `PTRACE_GET_SYSCALL_INFO` (Linux 5.3), arch-independent syscall arguments.
const PTRACE_GET_SYSCALL_INFO: libc::c_uint = 0x420e;
const PTRACE_SYSCALL_INFO_SECCOMP: u8 = 3;

/// A thread whose process's peak resident set (VmHWM) is at least this large at its
/// exit stop is read again once it is gone ([`Stop::Gone`]): unmapping that memory
/// costs CPU (5% of a linker's, several ms), in whichever thread drops it last. A
/// smaller one is let go at its exit stop, saving a stop on its parent's path (tens of
/// µs of teardown are then not in its row).
pub const READ_AGAIN_RSS_BYTES: u64 = 32 << 20;

/// What a tracee stopped for, for the session to act on before it goes on. For
/// [`Stop::Exit`] the session answers whether to read the thread again when it is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Thread `tid` is exiting: its counters are nearly final (what tearing down its
    /// memory and files costs is still to come), and its memory, so its command line,
    /// is still readable.
    Exit { tid: i32 },
    /// Thread `tid` of process `pid` has exited and waits for the tracer: its CPU is
    /// final, teardown included.
    Gone { tid: i32, pid: i32 },
}

/// The tracer's side: what it learnt while serving stops.
#[derive(Debug, Default)]
pub struct ExitStops {
    /// Tracees detached so that a debugger in the tree could trace them.
    stepped_aside: u64,
    /// setuid/setgid programs already noted, by (device, inode).
    setuid_noted: BTreeSet<(u64, u64)>,
}

/// Why exit stops cannot be used on this machine (Yama), from `ptrace_scope`'s text and
/// whether kernelkite holds CAP_SYS_PTRACE; `None` when they can.
pub fn yama_refusal(ptrace_scope: Option<&str>, cap_sys_ptrace: bool) -> Option<String> {
    match ptrace_scope?.trim() {
        "2" if !cap_sys_ptrace => Some(
            "Yama's kernel.yama.ptrace_scope is 2 (only CAP_SYS_PTRACE may trace): exit \
             accounting is off, and each process is only as exact as the samples"
                .into(),
        ),
        "3" => Some(
            "Yama's kernel.yama.ptrace_scope is 3 (no ptrace at all): exit accounting is \
             off, and each process is only as exact as the samples"
                .into(),
        ),
        _ => None,
    }
}

/// Yama's setting on this machine: `/proc/sys/kernel/yama/ptrace_scope`, unless the
/// test suite injects one (`KERNELKITE_TEST_PTRACE_SCOPE`; this kernel has no Yama).
/// An injected value can only turn exit accounting off.
pub fn machine_yama_refusal() -> Option<String> {
    let scope = std::env::var("KERNELKITE_TEST_PTRACE_SCOPE")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok());
    yama_refusal(scope.as_deref(), has_cap_sys_ptrace())
}

/// linux/capability.h.
const CAP_SYS_PTRACE: u32 = 19;

fn has_cap_sys_ptrace() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

impl ExitStops {
    /// Seize `pid`, held at its start gate (it has not exec'd yet). Call from the
    /// thread that will serve the stops: ptrace requests come from the tracer thread.
    pub fn seize(pid: i32) -> io::Result<ExitStops> {
        // SAFETY: PTRACE_SEIZE takes the options in `data`; no memory is passed.
        let rc = unsafe {
            libc::ptrace(
                libc::PTRACE_SEIZE,
                pid,
                std::ptr::null_mut::<libc::c_void>(),
                GATE_OPTIONS as usize as *mut libc::c_void,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ExitStops::default())
    }

    /// The command exec'd (its exec stop): from now on every exit stops too.
    pub fn command_execd(&mut self, pid: i32) -> io::Result<()> {
        // SAFETY: as in seize; pid is in its exec stop.
        let rc = unsafe {
            libc::ptrace(
                libc::PTRACE_SETOPTIONS,
                pid,
                std::ptr::null_mut::<libc::c_void>(),
                OPTIONS as usize as *mut libc::c_void,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// How many tracees were detached for a debugger in the tree.
    pub fn stepped_aside(&self) -> u64 {
        self.stepped_aside
    }

    /// Serve the ptrace stop `status` that `waitpid` returned for `tid`: tell `on` what
    /// it was, then let the tracee go on exactly as it would have untraced.
    pub fn serve(&mut self, tid: i32, status: libc::c_int, on: &mut dyn FnMut(Stop) -> bool) {
        let sig = libc::WSTOPSIG(status);
        let event = (status >> 16) & 0xff;
        match event {
            libc::PTRACE_EVENT_EXIT => {
                note_setuid(tid, &mut self.setuid_noted);
                if on(Stop::Exit { tid }) {
                    // Still traced: its exit is reported here first ([`Stop::Gone`]).
                    resume(tid, 0);
                } else {
                    // Untraced from here: its parent hears of its exit at once.
                    // SAFETY: PTRACE_DETACH from a ptrace-stop, signal 0.
                    unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, 0usize) };
                }
            }
            libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                resume(tid, 0)
            }
            libc::PTRACE_EVENT_SECCOMP => {
                self.step_aside(tid, on);
            }
            libc::PTRACE_EVENT_STOP => match sig {
                // A group-stop: stay stopped until SIGCONT, as untraced.
                libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => {
                    // SAFETY: PTRACE_LISTEN takes no memory.
                    unsafe { libc::ptrace(libc::PTRACE_LISTEN, tid, 0usize, 0usize) };
                }
                // A new tracee's first stop, or an interrupt.
                _ => resume(tid, 0),
            },
            // A signal-delivery stop: deliver it, now.
            0 => resume(tid, sig),
            // Any other event stop (the command's own exec, at its start): no signal
            // to deliver (its SIGTRAP is the stop's mark, not a signal).
            _ => resume(tid, 0),
        }
    }

    /// A tracee asked for ptrace itself (the filter's stop): get out of its way.
    fn step_aside(&mut self, tid: i32, on: &mut dyn FnMut(Stop) -> bool) {
        let mut info = [0u64; 11];
        // SAFETY: the kernel writes at most `size` bytes of ptrace_syscall_info.
        let n = unsafe {
            libc::ptrace(
                PTRACE_GET_SYSCALL_INFO,
                tid,
                std::mem::size_of_val(&info),
                info.as_mut_ptr(),
            )
        };
        // op (u8) is the first byte; seccomp.nr at 24, args from 32.
        let op = info[0] as u8;
        if n <= 0 || op != PTRACE_SYSCALL_INFO_SECCOMP {
            resume(tid, 0);
            return;
        }
        let request = info[4] as libc::c_uint;
        let target = info[5] as i32;
        if request == libc::PTRACE_TRACEME {
            // The caller wants its parent as tracer: it can have only one.
            self.stepped_aside += 1;
            // SAFETY: PTRACE_DETACH from a ptrace-stop, signal 0.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, 0usize) };
            return;
        }
        if target > 0 && target != tid && detach(target, on) {
            self.stepped_aside += 1;
        }
        resume(tid, 0);
    }
}

/// Detach `target` if it is a tracee of ours: interrupt it, wait for its stop (serving
/// an exit stop first), and let it go with the signal it stopped for, if any.
fn detach(target: i32, on: &mut dyn FnMut(Stop) -> bool) -> bool {
    // SAFETY: PTRACE_INTERRUPT takes no memory; ESRCH when it is not our tracee.
    if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, target, 0usize, 0usize) } != 0 {
        return false;
    }
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out pointer.
        let rc = unsafe { libc::waitpid(target, &mut status, libc::__WALL) };
        if rc < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return false;
        }
        if !libc::WIFSTOPPED(status) {
            // It died before stopping: nothing left to detach.
            return false;
        }
        let event = (status >> 16) & 0xff;
        let sig = match event {
            0 => libc::WSTOPSIG(status),
            libc::PTRACE_EVENT_EXIT => {
                on(Stop::Exit { tid: target });
                0
            }
            _ => 0,
        };
        // SAFETY: PTRACE_DETACH from a ptrace-stop, with the stop's signal.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, target, 0usize, sig as usize) };
        return true;
    }
}

/// Let a stopped tracee go on, delivering `sig` (0: none).
fn resume(tid: i32, sig: libc::c_int) {
    // SAFETY: PTRACE_CONT takes the signal in `data`. ESRCH (killed meanwhile) is fine.
    unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0usize, sig as usize) };
}

/// Say once per program that a setuid or setgid program ran without its privileges
/// (a traced exec does not raise them).
fn note_setuid(tid: i32, noted: &mut BTreeSet<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    let exe = PathBuf::from(format!("/proc/{tid}/exe"));
    let Ok(meta) = std::fs::metadata(&exe) else {
        return;
    };
    let special = meta.mode() & (libc::S_ISUID | libc::S_ISGID) != 0;
    if special && noted.insert((meta.dev(), meta.ino())) {
        let path = std::fs::read_link(&exe).unwrap_or(exe);
        crate::note!(
            "kernelkite: {} is setuid/setgid; under exit accounting it runs with your own \
             privileges, as under any tracer (--no-exit-stops runs it with its owner's)",
            path.display()
        );
    }
}

/// The classic BPF program the command runs under while traced: `ptrace(TRACEME |
/// ATTACH | SEIZE)` stops for kernelkite first (SECCOMP_RET_TRACE); everything else is
/// allowed. Checked for the native arch (and i386 on x86_64); a call from another ABI
/// is allowed as it is.
mod filter {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_TRACE: u32 = 0x7ff0_0000;
    // struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (low half on little endian).
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    const ARG0_LOW: u32 = 16;

    const fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
        libc::sock_filter { code, jt, jf, k }
    }

    #[cfg(target_arch = "x86_64")]
    const ARCHS: [(u32, u32); 2] = [(0xc000_003e, 101), (0x4000_0003, 26)];
    #[cfg(target_arch = "aarch64")]
    const ARCHS: [(u32, u32); 2] = [(0xc000_00b7, 117), (0xc000_00b7, 117)];

    /// arch → nr → request checks for each ABI, then allow. Jumps count from the next
    /// instruction: 4 is the compat arch check, 7 the request, 11 allow, 12 trace.
    pub(super) static PROGRAM: [libc::sock_filter; 13] = [
        op(LD_W_ABS, 0, 0, ARCH),              // 0
        op(JEQ_K, 0, 2, ARCHS[0].0),           // 1: native → 2, else → 4
        op(LD_W_ABS, 0, 0, NR),                // 2
        op(JEQ_K, 3, 7, ARCHS[0].1),           // 3: ptrace → 7, else → 11
        op(JEQ_K, 0, 6, ARCHS[1].0),           // 4: compat → 5, else → 11
        op(LD_W_ABS, 0, 0, NR),                // 5
        op(JEQ_K, 0, 4, ARCHS[1].1),           // 6: ptrace → 7, else → 11
        op(LD_W_ABS, 0, 0, ARG0_LOW),          // 7: the request
        op(JEQ_K, 3, 0, libc::PTRACE_TRACEME), // 8 → 12
        op(JEQ_K, 2, 0, libc::PTRACE_ATTACH),  // 9 → 12
        op(JEQ_K, 1, 0, libc::PTRACE_SEIZE),   // 10 → 12
        op(RET_K, 0, 0, RET_ALLOW),            // 11
        op(RET_K, 0, 0, RET_TRACE),            // 12
    ];
}

/// Install [`filter::PROGRAM`] in the calling process (the command, between fork and
/// exec): `no_new_privs`, then the filter. Async-signal-safe.
pub(crate) fn install_filter() -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: filter::PROGRAM.len() as u16,
        filter: filter::PROGRAM.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with integer arguments; seccomp reads `prog`, which outlives the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &prog as *const libc::sock_fprog,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yama_two_refuses_without_cap_sys_ptrace_and_three_always() {
        assert!(yama_refusal(Some("2\n"), false).is_some());
        assert!(yama_refusal(Some("2\n"), true).is_none());
        assert!(yama_refusal(Some("3\n"), true).is_some());
        assert!(yama_refusal(Some("1\n"), false).is_none());
        assert!(yama_refusal(None, false).is_none());
    }
}
