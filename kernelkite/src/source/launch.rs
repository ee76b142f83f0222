//! Launching the command `kernelkite run` profiles, as the parent of its whole tree:
//! kernelkite becomes a child subreaper (orphaned descendants are reparented to it),
//! forwards SIGINT, SIGTERM and SIGHUP to the command instead of dying from them, drops root
//! privileges to the invoking user under sudo, reaps every descendant it inherits, and
//! reads the tree's exact CPU from `getrusage(RUSAGE_CHILDREN)` once all are reaped.
//!
//! Process-wide state: signal handlers and a blocked SIGCHLD. Only one [`Launcher`] may
//! exist per process.

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::Instant;

use crate::model::Rusage;

/// The launched command's pid while it can receive signals; 0 before it started and
/// once it exited (so a reused pid is never signalled).
static COMMAND_PID: AtomicI32 = AtomicI32::new(0);
/// The signals kernelkite passes on to the command. SIGHUP too: a closed terminal or
/// ssh session must not kill kernelkite before it wrote the bundle and leave the command
/// running unwatched.
const FORWARDED_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
/// Bit `1 << sig` for each of them that was ignored when kernelkite started.
static INHERITED_IGNORED: AtomicU32 = AtomicU32::new(0);

/// A signal that arrived while there was no command to forward it to.
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);
static LAUNCHER_EXISTS: AtomicBool = AtomicBool::new(false);

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It called exit with this code.
    Code(i32),
    /// This signal killed it.
    Signal(i32),
}

impl Exit {
    fn from_wait_status(status: libc::c_int) -> Exit {
        if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            Exit::Code(libc::WEXITSTATUS(status))
        }
    }

    /// The status a shell would report: the exit code, or 128 + the signal number.
    pub fn shell_status(self) -> u8 {
        match self {
            Exit::Code(c) => (c & 0xff) as u8,
            Exit::Signal(s) => (128 + s).clamp(0, 255) as u8,
        }
    }
}

/// The user who ran `sudo kernelkite ...`, whom the command runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvokingUser {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub home: Option<OsString>,
    /// Supplementary groups (getgrouplist), including `gid`.
    pub groups: Vec<u32>,
}

/// Under sudo as root (SUDO_UID and SUDO_GID set, effective uid 0): the invoking user.
pub fn invoking_user() -> io::Result<Option<InvokingUser>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let parse = |var: &str| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    let (Some(uid), Some(gid)) = (parse("SUDO_UID"), parse("SUDO_GID")) else {
        return Ok(None);
    };
    let (name, home) = passwd_entry(uid)?
        .unwrap_or_else(|| (std::env::var("SUDO_USER").unwrap_or_default(), None));
    let groups = if name.is_empty() {
        vec![gid]
    } else {
        group_list(&name, gid)?
    };
    Ok(Some(InvokingUser {
        uid,
        gid,
        name,
        home,
        groups,
    }))
}

fn passwd_entry(uid: u32) -> io::Result<Option<(String, Option<OsString>)>> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: all-zero is a valid passwd (null pointers); getpwuid_r fills it from buf.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: buf outlives the call and its length is passed; result is checked.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if result.is_null() {
            return Ok(None);
        }
        // SAFETY: on success pw_name and pw_dir point to NUL-terminated strings in buf.
        let name = unsafe { CStr::from_ptr(pwd.pw_name) }
            .to_string_lossy()
            .into_owned();
        let home = (!pwd.pw_dir.is_null())
            .then(|| OsString::from_vec(unsafe { CStr::from_ptr(pwd.pw_dir) }.to_bytes().to_vec()));
        return Ok(Some((name, home)));
    }
}

fn group_list(name: &str, gid: u32) -> io::Result<Vec<u32>> {
    let c_name = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name has a NUL"))?;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: groups has room for n entries; getgrouplist updates n.
        let rc = unsafe { libc::getgrouplist(c_name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n.max(0) as usize);
            return Ok(groups);
        }
        // Too small: n now holds the needed size.
        let needed = (n.max(0) as usize).max(groups.len() * 2);
        if needed > 65_536 {
            return Err(io::Error::other("getgrouplist: too many groups"));
        }
        groups.resize(needed, 0);
    }
}

/// The parent side of a launched command and everything below it.
#[derive(Debug)]
pub struct Launcher {
    pid: Option<i32>,
    exit: Option<Exit>,
    user: Option<InvokingUser>,
    chld: libc::sigset_t,
    /// The signal mask kernelkite started with, before it blocked SIGCHLD: the command
    /// gets it back (std's spawn passes the parent's mask on, and a command started with
    /// SIGCHLD blocked hangs in sigsuspend, as dash's `wait` does).
    inherited_mask: libc::sigset_t,
}

impl Launcher {
    /// Make this process a subreaper, install the SIGINT/SIGTERM/SIGHUP forwarders and block
    /// SIGCHLD (it is waited for with a timeout). Call before spawning.
    pub fn prepare() -> io::Result<Launcher> {
        if LAUNCHER_EXISTS.swap(true, Ordering::SeqCst) {
            return Err(io::Error::other(
                "only one command can be launched per process",
            ));
        }
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: sigset operations on a local set; sigaction with a valid handler.
        let (chld, inherited_mask) = unsafe {
            // An inherited SIG_IGN for SIGCHLD would make the kernel reap children itself
            // and lose their rusage.
            libc::signal(libc::SIGCHLD, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            let mut inherited: libc::sigset_t = std::mem::zeroed();
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut inherited);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            for sig in FORWARDED_SIGNALS {
                // Remember a signal ignored where we started (a background job's
                // SIGINT, nohup): the command gets it ignored again (see `spawn`),
                // where our handler would be reset to SIG_DFL by its exec.
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_IGN
                {
                    INHERITED_IGNORED.fetch_or(1 << sig, Ordering::SeqCst);
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = forward_signal as *const () as libc::sighandler_t;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            (set, inherited)
        };
        Ok(Launcher {
            pid: None,
            exit: None,
            user: invoking_user()?,
            chld,
            inherited_mask,
        })
    }

    /// The user the command runs as under sudo.
    pub fn invoking_user(&self) -> Option<&InvokingUser> {
        self.user.as_ref()
    }

    /// Start the command. Under sudo it runs as the invoking user, with their groups,
    /// HOME, USER and LOGNAME.
    pub fn spawn(&mut self, argv: &[String]) -> io::Result<i32> {
        self.spawn_inner(argv, None)
    }

    /// Start the command held at a gate, so a tracer can attach to its pid and see it
    /// from its first instruction. The child is kernelkite itself in its hidden
    /// `__exec-after-gate` mode: it waits until [`StartGate::open`], then execs the
    /// command in place (same pid). If the gate is dropped unopened it exits with 127
    /// without running the command. (A gate inside `pre_exec` cannot work: std's spawn
    /// waits for the exec.)
    pub fn spawn_gated(&mut self, argv: &[String]) -> io::Result<(i32, StartGate)> {
        let exe = std::env::current_exe()?;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills two fds; both close on exec (the read end is made
        // inheritable in the child only).
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let (read_fd, write_fd) = (fds[0], fds[1]);
        let mut shim = vec![
            exe.to_string_lossy().into_owned(),
            GATE_SUBCOMMAND.to_string(),
        ];
        if let Some(user) = &self.user {
            let groups: Vec<String> = user.groups.iter().map(|g| g.to_string()).collect();
            shim.extend([
                format!("--uid={}", user.uid),
                format!("--gid={}", user.gid),
                format!("--groups={}", groups.join(",")),
            ]);
        }
        shim.extend([read_fd.to_string(), "--".to_string()]);
        shim.extend(argv.iter().cloned());
        let result = self.spawn_inner(&shim, Some(read_fd));
        // SAFETY: the read end is the child's; the parent closes its copy.
        unsafe { libc::close(read_fd) };
        match result {
            Ok(pid) => Ok((pid, StartGate { write_fd })),
            Err(e) => {
                // SAFETY: our own fd.
                unsafe { libc::close(write_fd) };
                Err(e)
            }
        }
    }

    fn spawn_inner(&mut self, argv: &[String], inherit_fd: Option<libc::c_int>) -> io::Result<i32> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
        if self.pid.is_some() {
            return Err(io::Error::other("the command was already launched"));
        }
        let mut cmd = Command::new(program);
        cmd.args(args);
        let mask = self.inherited_mask;
        // SAFETY: pthread_sigmask is async-signal-safe; it sets only the child's mask.
        unsafe {
            cmd.pre_exec(move || {
                let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
                if rc != 0 {
                    return Err(io::Error::from_raw_os_error(rc));
                }
                Ok(())
            });
        }
        let ignored = INHERITED_IGNORED.load(Ordering::SeqCst);
        if ignored != 0 {
            // SAFETY: signal() is async-signal-safe; it only sets this child's disposition.
            unsafe {
                cmd.pre_exec(move || {
                    for sig in FORWARDED_SIGNALS {
                        if ignored & (1 << sig) != 0 {
                            libc::signal(sig, libc::SIG_IGN);
                        }
                    }
                    Ok(())
                });
            }
        }
        if let Some(fd) = inherit_fd {
            // SAFETY: fcntl is async-signal-safe; it clears close-on-exec on one fd.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some(user) = &self.user {
            if let Some(home) = &user.home {
                cmd.env("HOME", home);
            }
            if !user.name.is_empty() {
                cmd.env("USER", &user.name).env("LOGNAME", &user.name);
            }
            // A gated child is kernelkite itself, which may live where the user cannot
            // read (root's home): it drops privileges itself, after the gate.
            if inherit_fd.is_none() {
                let (uid, gid, groups) = (user.uid, user.gid, user.groups.clone());
                // SAFETY: the hook only makes async-signal-safe system calls on data
                // prepared before fork.
                unsafe {
                    cmd.pre_exec(move || drop_privileges(uid, gid, &groups));
                }
            }
        }
        let child = cmd.spawn()?;
        let pid = child.id() as i32;
        // Reaped through waitpid below, not through `child`; dropping it neither waits
        // nor kills.
        drop(child);
        self.pid = Some(pid);
        COMMAND_PID.store(pid, Ordering::SeqCst);
        // A signal that came in before the command existed is for it.
        let pending = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
        if pending != 0 {
            // SAFETY: kill has no memory-safety preconditions; pid is our unreaped child.
            unsafe { libc::kill(pid, pending) };
        }
        Ok(pid)
    }

    /// The launched command's pid.
    pub fn pid(&self) -> Option<i32> {
        self.pid
    }

    /// How the command ended, once it was reaped.
    pub fn exit(&self) -> Option<Exit> {
        self.exit
    }

    /// Sleep until `deadline`, or less when a child changed state or a signal arrived.
    pub fn wait_until(&self, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let timeout = libc::timespec {
            tv_sec: left.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: chld is an initialized set; a null siginfo is allowed. EAGAIN (timeout)
        // and EINTR (a forwarded signal) both just return.
        unsafe { libc::sigtimedwait(&self.chld, std::ptr::null_mut(), &timeout) };
    }

    /// Whether some child has exited and is not reaped yet (its /proc entry, with its
    /// final counters, is still there).
    pub fn child_exited(&self) -> bool {
        // SAFETY: waitid fills info; WNOWAIT leaves the child unreaped.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is valid to read after waitid succeeded (0 when none exited).
        rc == 0 && unsafe { info.si_pid() } != 0
    }

    /// Reap every child that has exited. Returns whether any child is still alive.
    pub fn reap(&mut self) -> io::Result<bool> {
        if let (Some(pid), None) = (self.pid, self.exit) {
            // Stop forwarding to the command before its pid can be reused.
            if exited_unreaped(pid) {
                COMMAND_PID.store(0, Ordering::SeqCst);
                let mut status = 0;
                // SAFETY: status is a valid out pointer; a null rusage is allowed.
                let rc = unsafe { libc::wait4(pid, &mut status, 0, std::ptr::null_mut()) };
                if rc == pid {
                    self.exit = Some(Exit::from_wait_status(status));
                }
            }
        }
        loop {
            let mut status = 0;
            // SAFETY: as above.
            let rc = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, std::ptr::null_mut()) };
            if rc > 0 {
                continue;
            }
            if rc == 0 {
                return Ok(true);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(false),
                _ => return Err(err),
            }
        }
    }

    /// A SIGINT, SIGTERM or SIGHUP that arrived after the command exited, for the orphans it
    /// left behind (taken once).
    pub fn take_signal_for_orphans(&self) -> Option<i32> {
        // Before the launch, a pending signal is for the command (see `spawn`).
        self.pid?;
        match PENDING_SIGNAL.swap(0, Ordering::SeqCst) {
            0 => None,
            sig => Some(sig),
        }
    }
}

/// Find `program` as execvp would (a name with a slash as is, else on PATH), so a
/// gated launch can report a missing command before starting anything.
pub fn find_program(program: &str) -> io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = std::path::PathBuf::from(program);
        std::fs::metadata(&p)?;
        return if executable(&p) {
            Ok(p)
        } else {
            Err(io::Error::from_raw_os_error(libc::EACCES))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// The hidden subcommand the gated child runs (see [`Launcher::spawn_gated`]).
pub const GATE_SUBCOMMAND: &str = "__exec-after-gate";

/// Become `uid`/`gid` with `groups` (async-signal-safe: used between fork and exec).
fn drop_privileges(uid: u32, gid: u32, groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: plain system calls on a slice we own.
    unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Who the gated child becomes before it execs the command (under sudo).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateUser {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// The child side of the gate: wait for the byte on `fd`, become `user` if given, then
/// exec `argv` in place. Returns only on failure (the caller exits 127, as a shell does).
pub fn exec_after_gate(fd: libc::c_int, user: Option<&GateUser>, argv: &[String]) -> io::Error {
    // Wear the command's name while waiting, so a snapshot taken before the exec does
    // not show the command as "kernelkite".
    if let Some(name) = argv.first().and_then(|p| p.rsplit('/').next()) {
        let mut comm = [0u8; 16];
        let n = name.len().min(15);
        comm[..n].copy_from_slice(&name.as_bytes()[..n]);
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, comm.as_ptr() as libc::c_ulong, 0, 0, 0) };
    }
    let mut byte = 0u8;
    loop {
        // SAFETY: reads one byte into a local from an fd we own.
        let n = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
        if n == 1 {
            break;
        }
        let err = io::Error::last_os_error();
        if n < 0 && err.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return io::Error::other("the tracer went away before starting the command");
    }
    // SAFETY: our own fd, closed once.
    unsafe { libc::close(fd) };
    if let Some(u) = user {
        if let Err(e) = drop_privileges(u.uid, u.gid, &u.groups) {
            return e;
        }
    }
    let Some((program, args)) = argv.split_first() else {
        return io::Error::new(io::ErrorKind::InvalidInput, "no command given");
    };
    Command::new(program).args(args).exec()
}

/// The parent's end of [`Launcher::spawn_gated`]'s gate.
#[derive(Debug)]
pub struct StartGate {
    write_fd: libc::c_int,
}

impl StartGate {
    /// Let the command run.
    pub fn open(self) -> io::Result<()> {
        let byte = 1u8;
        // SAFETY: write one byte from a local to our own pipe fd.
        let n = unsafe { libc::write(self.write_fd, (&byte as *const u8).cast(), 1) };
        if n == 1 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
        // Drop closes the fd.
    }
}

impl Drop for StartGate {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.write_fd) };
    }
}

/// Send `sig` to `pid` only if it is still an unreaped child of this process, so a pid
/// reused since some earlier sample is never hit.
pub fn signal_child(pid: i32, sig: i32) {
    // SAFETY: as in child_exited; WNOWAIT with every state leaves the child untouched.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WSTOPPED | libc::WCONTINUED | libc::WNOHANG | libc::WNOWAIT;
    if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } == 0 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, sig) };
    }
}

fn exited_unreaped(pid: i32) -> bool {
    // SAFETY: as in child_exited.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    rc == 0 && unsafe { info.si_pid() } == pid
}

/// The handler for SIGINT, SIGTERM and SIGHUP: pass the signal on to the command. A Ctrl-C
/// typed at the terminal was already delivered by the kernel to every process of the
/// foreground group, so it is only passed on when the command left that group.
extern "C" fn forward_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // SAFETY: only async-signal-safe calls; errno is saved and restored.
    unsafe {
        let errno = *libc::__errno_location();
        let pid = COMMAND_PID.load(Ordering::SeqCst);
        if pid > 0 {
            let from_terminal = !info.is_null() && (*info).si_code == libc::SI_KERNEL;
            if !from_terminal || libc::getpgid(pid) != libc::getpgrp() {
                libc::kill(pid, sig);
            }
        } else {
            PENDING_SIGNAL.store(sig, Ordering::SeqCst);
        }
        *libc::__errno_location() = errno;
    }
}

/// `getrusage(RUSAGE_CHILDREN)`: every reaped descendant whose parent waited for it.
pub fn children_rusage() -> Rusage {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let us = |tv: libc::timeval| (tv.tv_sec.max(0) as u64) * 1_000_000 + tv.tv_usec.max(0) as u64;
    let n = |v: libc::c_long| v.max(0) as u64;
    Rusage {
        user_us: us(ru.ru_utime),
        system_us: us(ru.ru_stime),
        max_rss_kib: n(ru.ru_maxrss),
        minor_faults: n(ru.ru_minflt),
        major_faults: n(ru.ru_majflt),
        voluntary_switches: n(ru.ru_nvcsw),
        involuntary_switches: n(ru.ru_nivcsw),
    }
}

/// Raise this process's soft limit on open files to the hard limit (best effort): the
/// sampler keeps a few files open per sampled process. Call after spawning, so the
/// command inherits the limit it would have had without kernelkite.
pub fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_status() {
        assert_eq!(Exit::Code(0).shell_status(), 0);
        assert_eq!(Exit::Code(7).shell_status(), 7);
        assert_eq!(Exit::Signal(libc::SIGINT).shell_status(), 130);
        assert_eq!(Exit::Signal(libc::SIGKILL).shell_status(), 137);
    }

    #[test]
    fn wait_status_decoding() {
        // Encoded as the kernel does: code << 8 for exits, the signal in the low bits.
        assert_eq!(Exit::from_wait_status(3 << 8), Exit::Code(3));
        assert_eq!(
            Exit::from_wait_status(libc::SIGTERM),
            Exit::Signal(libc::SIGTERM)
        );
    }

    #[test]
    fn group_list_includes_the_primary_group() {
        let groups = group_list("root", 0).unwrap();
        assert!(groups.contains(&0), "{groups:?}");
    }
}
