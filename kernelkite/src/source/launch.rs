//! Launching the command `kernelkite run` profiles, as the parent of its whole tree:
//! kernelkite becomes a child subreaper (orphaned descendants are reparented to it),
//! forwards SIGINT, SIGTERM and SIGHUP to the command instead of dying from them, runs the
//! command as the user who started kernelkite as root (sudo, doas, pkexec) or whom
//! `--user` names, without kernelkite's ambient capabilities or raised memlock limit,
//! reaps every descendant it inherits, and sums the tree's exact CPU from the rusage
//! `wait4` returns for each process it reaps (not `getrusage(RUSAGE_CHILDREN)`, which
//! survives exec and so also holds whatever the process kernelkite was exec'd from had
//! reaped: `cargo run -- run ...` once reported the compile's CPU as the command's).
//!
//! Process-wide state: signal handlers and a blocked SIGCHLD. Only one [`Launcher`] may
//! exist per process.

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::Instant;

use crate::model::Rusage;
use crate::source::exit_stops::{self, ExitStops, Stop};

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
/// In the gated child only (its own copy after fork): the gate said it is traced, so
/// it installs the ptrace step-aside filter last before its exec.
static CHILD_TRACED: AtomicBool = AtomicBool::new(false);

/// The gate's byte for an untraced start.
const GATE_OPEN: u8 = 1;
/// The gate's byte for a start traced for exit accounting.
const GATE_OPEN_TRACED: u8 = 2;

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

/// A user the command can run as: who started kernelkite as root (through sudo, doas
/// or pkexec), or whom `run --user` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvokingUser {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub home: Option<OsString>,
    /// The login shell from the passwd entry.
    pub shell: Option<OsString>,
    /// Supplementary groups (getgrouplist), including `gid`.
    pub groups: Vec<u32>,
    /// How kernelkite knows the user: "sudo", "doas", "pkexec" or "--user".
    pub via: &'static str,
}

/// Running as root: who started kernelkite, from what sudo (SUDO_UID and SUDO_GID),
/// doas (DOAS_USER) or pkexec (PKEXEC_UID) leave in the environment. `None` when not
/// root, or when none of them is set (su, a root login).
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
    if let (Some(uid), Some(gid)) = (parse("SUDO_UID"), parse("SUDO_GID")) {
        let entry = passwd_by_uid(uid)?;
        let name = match &entry {
            Some(p) => p.name.clone(),
            None => std::env::var("SUDO_USER").unwrap_or_default(),
        };
        return user_from(uid, gid, name, entry, "sudo").map(Some);
    }
    if let Some(name) = std::env::var("DOAS_USER").ok().filter(|n| !n.is_empty()) {
        let entry = passwd_by_name(&name)?
            .ok_or_else(|| io::Error::other(format!("DOAS_USER {name:?} has no passwd entry")))?;
        return user_from(
            entry.uid,
            entry.gid,
            entry.name.clone(),
            Some(entry),
            "doas",
        )
        .map(Some);
    }
    if let Some(uid) = parse("PKEXEC_UID") {
        let entry = passwd_by_uid(uid)?
            .ok_or_else(|| io::Error::other(format!("PKEXEC_UID {uid} has no passwd entry")))?;
        return user_from(uid, entry.gid, entry.name.clone(), Some(entry), "pkexec").map(Some);
    }
    Ok(None)
}

/// `name` (a user name or a numeric uid) from the passwd database, for `run --user`.
pub fn named_user(name: &str) -> io::Result<InvokingUser> {
    let entry = match passwd_by_name(name)? {
        Some(p) => Some(p),
        None => match name.parse::<u32>() {
            Ok(uid) => passwd_by_uid(uid)?,
            Err(_) => None,
        },
    };
    let entry = entry.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no user {name:?} in the passwd database"),
        )
    })?;
    user_from(
        entry.uid,
        entry.gid,
        entry.name.clone(),
        Some(entry),
        "--user",
    )
}

fn user_from(
    uid: u32,
    gid: u32,
    name: String,
    entry: Option<Passwd>,
    via: &'static str,
) -> io::Result<InvokingUser> {
    let groups = if name.is_empty() {
        vec![gid]
    } else {
        group_list(&name, gid)?
    };
    let (home, shell) = entry.map_or((None, None), |p| (p.home, p.shell));
    Ok(InvokingUser {
        uid,
        gid,
        name,
        home,
        shell,
        groups,
        via,
    })
}

/// Whom `run`'s command runs as, and whom kernelkite's outputs belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandUsers {
    /// Who started kernelkite as root (sudo, doas, pkexec): outputs are handed to them.
    pub invoker: Option<InvokingUser>,
    /// Whom the command runs as; `None`: as kernelkite itself runs.
    pub command: Option<InvokingUser>,
    /// `--user` was given.
    pub requested: bool,
}

/// Why `run` will not run the command as asked.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("cannot find out who started kernelkite: {0}")]
    Invoker(#[source] io::Error),
    #[error("--user {0}: {1}")]
    Lookup(String, #[source] io::Error),
    #[error("--user {0}: only root can run the command as another user")]
    NotRoot(String),
    #[error("--user {requested}: kernelkite was started by {invoker} through {via}, so the command runs only as {invoker}")]
    NotTheInvoker {
        requested: String,
        invoker: String,
        via: &'static str,
    },
}

impl CommandUsers {
    /// The privilege rules of `run`: as root, the command runs as whoever started
    /// kernelkite through sudo, doas or pkexec; `--user` may only name that same user
    /// (or anyone, when root itself started kernelkite or no invoker is known), so a
    /// sudo rule that allows kernelkite never lets its user become someone else. Not as
    /// root, the command runs as kernelkite does; `--user` may only name that user.
    pub fn resolve(requested: Option<&str>) -> Result<CommandUsers, UserError> {
        let invoker = invoking_user().map_err(UserError::Invoker)?;
        let Some(requested) = requested else {
            let command = invoker.clone().filter(|u| u.uid != 0);
            return Ok(CommandUsers {
                invoker,
                command,
                requested: false,
            });
        };
        let named = named_user(requested).map_err(|e| UserError::Lookup(requested.into(), e))?;
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return if named.uid == euid {
                Ok(CommandUsers {
                    invoker: None,
                    command: None,
                    requested: true,
                })
            } else {
                Err(UserError::NotRoot(requested.into()))
            };
        }
        if let Some(inv) = invoker.as_ref().filter(|u| u.uid != 0) {
            if named.uid != inv.uid {
                return Err(UserError::NotTheInvoker {
                    requested: requested.into(),
                    invoker: inv.name.clone(),
                    via: inv.via,
                });
            }
        }
        let command = (named.uid != 0).then_some(named);
        Ok(CommandUsers {
            invoker,
            command,
            requested: true,
        })
    }

    /// One line for stderr when the command will run as root although nobody said so:
    /// kernelkite runs as root and does not know who started it (su, a root login).
    pub fn root_without_invoker(&self) -> Option<&'static str> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        (root && !self.requested && self.invoker.is_none()).then_some(
            "the command runs as root (no SUDO_UID, DOAS_USER or PKEXEC_UID says who started kernelkite; --user USER runs it as USER)",
        )
    }
}

/// The fields of a passwd entry kernelkite uses.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Passwd {
    name: String,
    uid: u32,
    gid: u32,
    home: Option<OsString>,
    shell: Option<OsString>,
}

fn passwd_by_uid(uid: u32) -> io::Result<Option<Passwd>> {
    passwd_lookup(|pwd, buf, len, result| {
        // SAFETY: the caller passes a valid passwd, buffer and result pointer.
        unsafe { libc::getpwuid_r(uid, pwd, buf, len, result) }
    })
}

fn passwd_by_name(name: &str) -> io::Result<Option<Passwd>> {
    let Ok(c_name) = CString::new(name) else {
        return Ok(None);
    };
    passwd_lookup(|pwd, buf, len, result| {
        // SAFETY: c_name is NUL-terminated; the rest as in passwd_lookup.
        unsafe { libc::getpwnam_r(c_name.as_ptr(), pwd, buf, len, result) }
    })
}

/// Run a getpw*_r call with a growing buffer and copy out the entry.
fn passwd_lookup(
    call: impl Fn(*mut libc::passwd, *mut libc::c_char, usize, *mut *mut libc::passwd) -> libc::c_int,
) -> io::Result<Option<Passwd>> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: all-zero is a valid passwd (null pointers); the call fills it from buf.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut result);
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
        let text = |p: *const libc::c_char| {
            // SAFETY: on success the entry's strings are NUL-terminated, inside buf.
            (!p.is_null())
                .then(|| OsString::from_vec(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()))
                .filter(|s| !s.is_empty())
        };
        return Ok(Some(Passwd {
            name: text(pwd.pw_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            home: text(pwd.pw_dir),
            shell: text(pwd.pw_shell),
        }));
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

/// What [`Launcher::serve_stops`] left pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildEvent {
    /// Nothing: every stop was served.
    Nothing,
    /// A child of ours exited and waits to be reaped.
    Exited,
    /// No child or tracee is left.
    AllGone,
}

/// What waiting would return next.
enum Pending {
    Nothing,
    AllGone,
    Exited(i32),
    Stopped(i32),
    /// A traced thread, or a traced process of another parent, has exited and waits for
    /// the tracer before its parent may reap it: its counters are final.
    TraceeGone {
        tid: i32,
        pid: Option<i32>,
    },
}

/// How the gated command's start ended, for exit accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExecReached {
    Stopped,
    Exited,
}

/// `Ok` when the exited `pid` is a process (not a thread) whose parent is this
/// process: ours to reap, with its rusage (its /proc entry lasts until it is reaped).
/// Otherwise (a traced thread, or a traced process of another parent) its process id,
/// when its /proc entry still says.
fn exited_task(pid: i32) -> Result<(), Option<i32>> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Err(None);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<i32>().ok())
    };
    let tgid = field("Tgid:");
    if tgid == Some(pid) && field("PPid:") == Some(std::process::id() as i32) {
        Ok(())
    } else {
        Err(tgid)
    }
}

/// Take a pending ptrace stop, of `tid` or (`None`) of any tracee, without waiting:
/// its tid and its status in waitpid's encoding (`(code << 8) | 0x7f`). Stops only
/// (`WSTOPPED`): an exit is never taken here by mistake.
fn take_stop(tid: Option<i32>) -> Option<(i32, libc::c_int)> {
    let (idtype, id) = match tid {
        Some(tid) => (libc::P_PID, tid as libc::id_t),
        None => (libc::P_ALL, 0),
    };
    // SAFETY: waitid fills info; si_pid and si_status are valid to read after it
    // succeeded (si_pid 0: nothing pending).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WSTOPPED | libc::WNOHANG | libc::__WALL;
    let rc = unsafe { libc::waitid(idtype, id, &mut info, flags) };
    let got = unsafe { info.si_pid() };
    if rc != 0 || got == 0 || tid.is_some_and(|t| t != got) {
        return None;
    }
    Some((got, (unsafe { info.si_status() } << 8) | 0x7f))
}

/// The parent side of a launched command and everything below it.
#[derive(Debug)]
pub struct Launcher {
    pid: Option<i32>,
    exit: Option<Exit>,
    users: CommandUsers,
    chld: libc::sigset_t,
    /// The signal mask kernelkite started with, before it blocked SIGCHLD: the command
    /// gets it back (std's spawn passes the parent's mask on, and a command started with
    /// SIGCHLD blocked hangs in sigsuspend, as dash's `wait` does).
    inherited_mask: libc::sigset_t,
    /// The rusage of every process reaped so far (each includes the descendants it
    /// waited for itself): CPU, faults and switches summed, max RSS the largest.
    reaped: Rusage,
    /// The largest `ru_maxrss` of the reaped processes other than the command's own.
    others_max_rss_kib: u64,
    /// The command's own process's rusage from `wait4`, once reaped.
    command_rusage: Option<Rusage>,
    /// What the gated child had used right before it exec'd the command (kernelkite's
    /// copy of itself), as its `getrusage(RUSAGE_SELF)` said; set by the spawning thread.
    pre_exec: std::sync::Arc<std::sync::OnceLock<Rusage>>,
    /// The tracer's state while exit accounting is on.
    stops: Option<ExitStops>,
    /// The kernel's taskstats exit messages (as root): the command's own peak RSS, which
    /// its `ru_maxrss` cannot say (see [`Launcher::reaped_rusage`]).
    exit_watch: Option<super::taskstats::ExitWatch>,
}

impl Launcher {
    /// Make this process a subreaper, install the SIGINT/SIGTERM/SIGHUP forwarders and
    /// block SIGCHLD (it is waited for with a timeout). Call before spawning. The command
    /// will run as `users.command` (see [`CommandUsers::resolve`]).
    pub fn prepare(users: CommandUsers) -> io::Result<Launcher> {
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
            users,
            chld,
            inherited_mask,
            reaped: Rusage::default(),
            others_max_rss_kib: 0,
            command_rusage: None,
            pre_exec: Default::default(),
            stops: None,
            // Without CAP_NET_ADMIN (or taskstats) there is none: the figure is then a
            // bound where it must be.
            exit_watch: super::taskstats::ExitWatch::register().ok(),
        })
    }

    /// Who started kernelkite as root (sudo, doas, pkexec): its outputs are theirs.
    pub fn invoking_user(&self) -> Option<&InvokingUser> {
        self.users.invoker.as_ref()
    }

    /// Whom the command runs as, and why.
    pub fn users(&self) -> &CommandUsers {
        &self.users
    }

    /// Start the command: as `users.command` when set (its groups, and HOME, USER,
    /// LOGNAME, SHELL and MAIL from its passwd entry, without sudo's, doas's or pkexec's
    /// variables), with kernelkite's own ambient and inheritable capabilities and its
    /// raised RLIMIT_MEMLOCK taken away.
    pub fn spawn(&mut self, argv: &[String]) -> io::Result<i32> {
        self.check_unlaunched()?;
        let child = self.command(argv, None)?.spawn()?;
        let pid = child.id() as i32;
        // Reaped through waitpid below, not through `child`; dropping it neither waits
        // nor kills.
        drop(child);
        self.launched(pid);
        Ok(pid)
    }

    /// Start the command held at a gate, so a tracer can attach to its pid and see it
    /// from its first instruction: the forked child waits (in `pre_exec`, before it
    /// drops privileges and execs) until [`StartGate::open`]; dropped unopened, the gate
    /// makes it exit without running the command. std's spawn returns only once the
    /// child has exec'd, so it runs on a helper thread and the child reports its pid
    /// through a pipe. Only `run` itself starts a command this way: kernelkite has no
    /// subcommand that execs its arguments.
    pub fn spawn_gated(&mut self, argv: &[String]) -> io::Result<(i32, StartGate)> {
        self.check_unlaunched()?;
        let (gate_read, gate_write) = cloexec_pipe()?;
        let (pid_read, pid_write) = cloexec_pipe()?;
        let (usage_read, usage_write) = cloexec_pipe()?;
        let hook = GateHook {
            gate_read: gate_read.as_raw_fd(),
            gate_write: gate_write.as_raw_fd(),
            pid_read: pid_read.as_raw_fd(),
            pid_write: pid_write.as_raw_fd(),
            usage_read: usage_read.as_raw_fd(),
            usage_write: usage_write.as_raw_fd(),
            comm: command_comm(argv),
        };
        let mut cmd = self.command(argv, Some(hook))?;
        let pre_exec = std::sync::Arc::clone(&self.pre_exec);
        let spawner = std::thread::Builder::new()
            .name("kk-spawn".into())
            .spawn(move || {
                let spawned = cmd.spawn().map(drop);
                // After the fork: the parent's copies go, so a failed spawn reads as EOF.
                drop((gate_read, pid_write, usage_write));
                if spawned.is_ok() {
                    // Written by the child's last hook; its copy closed at the exec.
                    if let Some(usage) = read_pre_exec_usage(usage_read) {
                        let _ = pre_exec.set(usage);
                    }
                }
                spawned
            })?;
        let mut pid = [0u8; 4];
        let mut pid_file = std::fs::File::from(pid_read);
        if std::io::Read::read_exact(&mut pid_file, &mut pid).is_err() {
            return Err(join_spawner(spawner)
                .err()
                .unwrap_or_else(|| io::Error::other("the command started past its gate")));
        }
        let pid = i32::from_ne_bytes(pid);
        self.launched(pid);
        Ok((
            pid,
            StartGate {
                write: Some(gate_write),
                spawner: Some(spawner),
            },
        ))
    }

    fn check_unlaunched(&self) -> io::Result<()> {
        if self.pid.is_some() {
            return Err(io::Error::other("the command was already launched"));
        }
        Ok(())
    }

    fn launched(&mut self, pid: i32) {
        self.pid = Some(pid);
        if let Some(watch) = &self.exit_watch {
            watch.watch();
        }
        COMMAND_PID.store(pid, Ordering::SeqCst);
        // A signal that came in before the command existed is for it.
        let pending = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
        if pending != 0 {
            // SAFETY: kill has no memory-safety preconditions; pid is our unreaped child.
            unsafe { libc::kill(pid, pending) };
        }
    }

    /// The command as it will be exec'd: its environment, signal state, limits,
    /// capabilities and user; held at `gate` first, when given.
    fn command(&self, argv: &[String], gate: Option<GateHook>) -> io::Result<Command> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        let user = self.users.command.as_ref();
        if let Some(user) = user {
            set_user_environment(&mut cmd, user);
        }
        let mask = self.inherited_mask;
        let ignored = INHERITED_IGNORED.load(Ordering::SeqCst);
        let memlock = crate::source::limits::memlock_before_raise();
        let ids = user.map(|u| (u.uid, u.gid, u.groups.clone()));
        // SAFETY: the hooks only make async-signal-safe system calls on data prepared
        // before fork. They run in this order.
        unsafe {
            cmd.pre_exec(move || {
                let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
                if rc != 0 {
                    return Err(io::Error::from_raw_os_error(rc));
                }
                // A signal ignored where kernelkite started (a background job's SIGINT,
                // nohup) is ignored in the command too; our handler would be reset to
                // SIG_DFL by the exec.
                for sig in FORWARDED_SIGNALS {
                    if ignored & (1 << sig) != 0 {
                        libc::signal(sig, libc::SIG_IGN);
                    }
                }
                Ok(())
            });
            if let Some(gate) = gate {
                cmd.pre_exec(move || gate.wait());
            }
            cmd.pre_exec(move || {
                // The limit kernelkite raised for its BPF maps is not the command's.
                if let Some(lim) = memlock {
                    if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                drop_capabilities()?;
                if let Some((uid, gid, groups)) = &ids {
                    drop_privileges(*uid, *gid, groups)?;
                }
                if CHILD_TRACED.load(Ordering::SeqCst) {
                    exit_stops::install_filter()?;
                }
                Ok(())
            });
            if let Some(gate) = gate {
                // Last: what kernelkite's copy of itself used, then the exec itself, so
                // that nothing runs between the two (std's exec path would fault in
                // pages of kernelkite's code, 64 KiB each with fault-around: 832 KiB
                // measured, all of it counted in the command's ru_maxrss).
                let exec = PreparedExec::new(&cmd)?;
                cmd.pre_exec(move || {
                    gate.report_usage();
                    exec.exec()
                });
            }
        }
        Ok(cmd)
    }

    /// The launched command's pid.
    pub fn pid(&self) -> Option<i32> {
        self.pid
    }

    /// How the command ended, once it was reaped.
    pub fn exit(&self) -> Option<Exit> {
        self.exit
    }

    /// The tree's rusage: every process reaped so far, summed (exact once all are).
    /// The command's own process started as kernelkite's copy of itself (the fork
    /// before the exec), and `wait4` counts that copy in it: its CPU, faults and
    /// switches are taken out here, as its gated child measured them right before the
    /// exec.
    pub fn reaped_rusage(&self) -> ReapedRusage {
        program_rusage(
            self.reaped,
            self.command_rusage,
            self.others_max_rss_kib,
            self.pre_exec.get().copied(),
        )
    }

    /// Make `rusage`'s max RSS exact where it is only a bound (the kernel keeps the
    /// copy's high-water mark in the command's `ru_maxrss`, and in that of every
    /// ancestor that reaped it): the largest of the tree's processes (`pids`, every one
    /// exited) as taskstats gave each process's own address space's peak, and the
    /// `ru_maxrss` of those kernelkite reaped other than the command. Left a bound
    /// without taskstats, or when an exit of the tree's did not arrive.
    pub fn adopt_exit_peaks(&self, rusage: &mut ReapedRusage, pids: &[u32]) {
        if !rusage.max_rss_upper_bound {
            return;
        }
        let watch = self.exit_watch.as_ref();
        if let Some(kib) = watch.and_then(|w| w.largest_peak_kib(pids.iter().copied())) {
            rusage.tree.max_rss_kib = kib.max(self.others_max_rss_kib);
            rusage.max_rss_upper_bound = false;
        }
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

    /// Serve every pending ptrace stop (telling `on` about each before the tracee goes
    /// on), until a child of ours has exited and is not reaped yet (its /proc entry,
    /// with its final counters, is still there: sample, then [`Launcher::reap`]), or
    /// nothing is pending.
    pub fn serve_stops(&mut self, on: &mut dyn FnMut(Stop) -> bool) -> io::Result<ChildEvent> {
        loop {
            if self.stops.is_some() && self.serve_next_stop(on) {
                continue;
            }
            match self.peek()? {
                Pending::Nothing => return Ok(ChildEvent::Nothing),
                Pending::AllGone => return Ok(ChildEvent::AllGone),
                Pending::Exited(_) => return Ok(ChildEvent::Exited),
                Pending::Stopped(tid) => self.serve_one(tid, on),
                Pending::TraceeGone { tid, pid } => {
                    if let Some(pid) = pid {
                        on(Stop::Gone { tid, pid });
                    }
                    // Let it go to its parent (no rusage: it reaches us through the
                    // parent's, when we reap that).
                    // SAFETY: waitid fills info; this one exit report only.
                    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    let flags = libc::WEXITED | libc::WNOHANG | libc::__WALL;
                    unsafe { libc::waitid(libc::P_PID, tid as libc::id_t, &mut info, flags) };
                }
            }
        }
    }

    /// Reap every child of ours that has exited (and let go of traced processes and
    /// threads that are not: their parents reap them). Returns whether any child or
    /// tracee is still alive.
    pub fn reap(&mut self) -> io::Result<bool> {
        loop {
            let pid = match self.peek()? {
                Pending::Nothing | Pending::Stopped(_) | Pending::TraceeGone { .. } => {
                    return Ok(true)
                }
                Pending::AllGone => return Ok(false),
                Pending::Exited(pid) => pid,
            };
            if Some(pid) == self.pid && self.exit.is_none() {
                // Stop forwarding to the command before its pid can be reused.
                COMMAND_PID.store(0, Ordering::SeqCst);
            }
            let mut status = 0;
            // SAFETY: status and ru are valid out pointers.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            let rc =
                unsafe { libc::wait4(pid, &mut status, libc::WNOHANG | libc::__WALL, &mut ru) };
            if rc != pid {
                let err = io::Error::last_os_error();
                match (rc, err.raw_os_error()) {
                    (0, _) | (_, Some(libc::EINTR)) | (_, Some(libc::ECHILD)) => continue,
                    _ => return Err(err),
                }
            }
            let usage = rusage_of(&ru);
            if Some(pid) == self.pid && self.exit.is_none() {
                self.exit = Some(Exit::from_wait_status(status));
                self.command_rusage = Some(usage);
            } else {
                self.others_max_rss_kib = self.others_max_rss_kib.max(usage.max_rss_kib);
            }
            self.reaped.add_reaped(&usage);
        }
    }

    /// The next thing waiting would return, left pending. With exit stops on, a traced
    /// process or thread that is not our child is let go of here (its own parent reaps
    /// it, and its rusage reaches us through that parent's).
    fn peek(&mut self) -> io::Result<Pending> {
        loop {
            // SAFETY: waitid fills info; WNOWAIT leaves the child as it is.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL;
            if unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) } != 0 {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::ECHILD) => return Ok(Pending::AllGone),
                    _ => return Err(err),
                }
            }
            // SAFETY: si_pid is valid to read after waitid succeeded (0: none pending).
            let pid = unsafe { info.si_pid() };
            if pid == 0 {
                return Ok(Pending::Nothing);
            }
            if self.stops.is_none() {
                return Ok(Pending::Exited(pid));
            }
            match info.si_code {
                libc::CLD_TRAPPED | libc::CLD_STOPPED => return Ok(Pending::Stopped(pid)),
                _ => {
                    return Ok(match exited_task(pid) {
                        Ok(()) => Pending::Exited(pid),
                        Err(tgid) => Pending::TraceeGone {
                            tid: pid,
                            pid: tgid,
                        },
                    })
                }
            }
        }
    }

    /// Take any pending stop (stops only: an exit is never taken here) and serve it;
    /// false when none was pending.
    fn serve_next_stop(&mut self, on: &mut dyn FnMut(Stop) -> bool) -> bool {
        let Some((tid, status)) = take_stop(None) else {
            return false;
        };
        if let Some(stops) = self.stops.as_mut() {
            stops.serve(tid, status, on);
        }
        true
    }

    /// Take tracee `tid`'s pending stop and serve it.
    fn serve_one(&mut self, tid: i32, on: &mut dyn FnMut(Stop) -> bool) {
        if let (Some((tid, status)), Some(stops)) = (take_stop(Some(tid)), self.stops.as_mut()) {
            stops.serve(tid, status, on);
        }
    }

    /// Let the gated command run, traced for exit accounting when this machine allows
    /// it: seize it at the gate, open the gate (the command installs the ptrace
    /// step-aside filter, see [`crate::source::exit_stops`]), and once it has exec'd,
    /// turn exit stops on. Returns why exit accounting is off, or `None` when it is on.
    /// The command's own start failure is the error, as from [`StartGate::open`].
    pub fn start_with_exit_stops(
        &mut self,
        mut gate: StartGate,
        on: &mut dyn FnMut(Stop) -> bool,
    ) -> io::Result<Option<String>> {
        let pid = self.pid.expect("a gated command");
        if let Some(refusal) = exit_stops::machine_yama_refusal() {
            gate.open_or_killed()?;
            return Ok(Some(refusal));
        }
        let stops = match ExitStops::seize(pid) {
            Ok(stops) => stops,
            Err(e) => {
                gate.open_or_killed()?;
                return Ok(Some(format!(
                    "cannot trace the command ({e}): exit accounting is off, and each \
                     process is only as exact as the samples"
                )));
            }
        };
        self.stops = Some(stops);
        let mut write = std::fs::File::from(gate.write.take().expect("an unopened gate"));
        match std::io::Write::write_all(&mut write, &[GATE_OPEN_TRACED]) {
            // A signal passed on to the command killed it at the gate: it is reaped and
            // reported like any other death of the command.
            Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(e),
            _ => {}
        }
        drop(write);
        let spawner = gate.spawner.take().expect("an unopened gate");
        // Until std's spawn returns (at the exec), a signal-delivery stop must still be
        // served, or the command would never get to its exec.
        let mut reached = None;
        while !spawner.is_finished() {
            if reached.is_none() {
                reached = self.serve_until_exec(pid, libc::WNOHANG, on);
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        join_spawner(spawner)?;
        while reached.is_none() {
            reached = self.serve_until_exec(pid, 0, on);
        }
        if reached == Some(ExecReached::Stopped) {
            let stops = self.stops.as_mut().expect("seized above");
            stops.command_execd(pid)?;
            let exec_stop = ((libc::PTRACE_EVENT_EXEC << 8) | libc::SIGTRAP) << 8 | 0x7f;
            stops.serve(pid, exec_stop, on);
        }
        Ok(None)
    }

    /// Serve `pid`'s stops before its exec: `Some` once it is in its exec stop (left
    /// stopped) or has exited (left for the reaper).
    fn serve_until_exec(
        &mut self,
        pid: i32,
        nohang: libc::c_int,
        on: &mut dyn FnMut(Stop) -> bool,
    ) -> Option<ExecReached> {
        // SAFETY: waitid fills info; WNOWAIT leaves an exit for std's spawn (a failed
        // start) or the reaper.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WSTOPPED | libc::WEXITED | libc::WNOWAIT | libc::__WALL | nohang;
        let rc = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
        if rc != 0 {
            let gone = io::Error::last_os_error().raw_os_error() != Some(libc::EINTR);
            return gone.then_some(ExecReached::Exited);
        }
        // SAFETY: as above.
        if unsafe { info.si_pid() } != pid {
            return None;
        }
        if !matches!(info.si_code, libc::CLD_TRAPPED | libc::CLD_STOPPED) {
            return Some(ExecReached::Exited);
        }
        let (_, status) = take_stop(Some(pid))?;
        if status >> 16 == libc::PTRACE_EVENT_EXEC {
            return Some(ExecReached::Stopped);
        }
        if let Some(stops) = self.stops.as_mut() {
            stops.serve(pid, status, on);
        }
        None
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

/// Clear the ambient and inheritable capability sets (async-signal-safe), so a
/// kernelkite given CAP_BPF and CAP_PERFMON as ambient capabilities (`setpriv
/// --ambient-caps`, `capsh --addamb`) does not hand them to the command: after its exec
/// the command holds only what its own file grants.
fn drop_capabilities() -> io::Result<()> {
    // SAFETY: prctl with integer arguments; capget/capset on local structs.
    unsafe {
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
            && *libc::__errno_location() != libc::EINVAL
        {
            // EINVAL: a kernel before 4.3, which has no ambient set.
            return Err(io::Error::last_os_error());
        }
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        if data.iter().any(|d| d.inheritable != 0) {
            for d in &mut data {
                d.inheritable = 0;
            }
            if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets as two 32-bit halves.
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The environment a user's command expects, as `sudo -i` sets it (without a login):
/// HOME, USER, LOGNAME, SHELL and MAIL from the passwd entry, and nothing left of the
/// tool that made kernelkite root (SUDO_*, DOAS_USER, PKEXEC_UID).
fn set_user_environment(cmd: &mut Command, user: &InvokingUser) {
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("SUDO_") || n == "DOAS_USER" || n == "PKEXEC_UID" {
            cmd.env_remove(&name);
        }
    }
    match &user.home {
        Some(home) => cmd.env("HOME", home),
        None => cmd.env_remove("HOME"),
    };
    match &user.shell {
        Some(shell) => cmd.env("SHELL", shell),
        None => cmd.env("SHELL", "/bin/sh"),
    };
    if user.name.is_empty() {
        cmd.env_remove("USER")
            .env_remove("LOGNAME")
            .env_remove("MAIL");
    } else {
        cmd.env("USER", &user.name)
            .env("LOGNAME", &user.name)
            .env("MAIL", format!("/var/mail/{}", user.name));
    }
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two fds, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The command's name as the kernel's 16-byte, NUL-terminated `comm`.
fn command_comm(argv: &[String]) -> [u8; 16] {
    let mut comm = [0u8; 16];
    if let Some(name) = argv.first().and_then(|p| p.rsplit('/').next()) {
        let n = name.len().min(15);
        comm[..n].copy_from_slice(&name.as_bytes()[..n]);
    }
    comm
}

/// The gated child's side of [`Launcher::spawn_gated`], run between fork and exec.
#[derive(Clone, Copy)]
struct GateHook {
    gate_read: libc::c_int,
    gate_write: libc::c_int,
    pid_read: libc::c_int,
    pid_write: libc::c_int,
    usage_read: libc::c_int,
    usage_write: libc::c_int,
    comm: [u8; 16],
}

impl GateHook {
    /// Report our pid, then wait for the gate's byte (async-signal-safe).
    fn wait(&self) -> io::Result<()> {
        // SAFETY: system calls on the pipe fds inherited through fork and on locals.
        unsafe {
            // Wear the command's name while waiting (the fork has the spawning thread's),
            // so a snapshot before the exec does not show "kk-spawn".
            libc::prctl(
                libc::PR_SET_NAME,
                self.comm.as_ptr() as libc::c_ulong,
                0,
                0,
                0,
            );
            // Our copies of the parent's ends, or the gate would never see EOF.
            libc::close(self.gate_write);
            libc::close(self.pid_read);
            libc::close(self.usage_read);
            let pid = libc::getpid().to_ne_bytes();
            let n = libc::write(self.pid_write, pid.as_ptr().cast(), pid.len());
            if n != pid.len() as isize {
                return Err(io::Error::last_os_error());
            }
            libc::close(self.pid_write);
            let mut byte = 0u8;
            loop {
                let n = libc::read(self.gate_read, (&mut byte as *mut u8).cast(), 1);
                if n == 1 {
                    CHILD_TRACED.store(byte == GATE_OPEN_TRACED, Ordering::SeqCst);
                    break;
                }
                if n < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                // The tracer went away before starting the command.
                return Err(io::Error::from_raw_os_error(libc::ECANCELED));
            }
            libc::close(self.gate_read);
        }
        Ok(())
    }

    /// Write this process's `getrusage(RUSAGE_SELF)` to the usage pipe, whose end
    /// closes at the exec (async-signal-safe). Best effort: a parent that reads nothing
    /// takes nothing out of the command's rusage. Through `syscall(2)`, as the exec
    /// that follows: no code page is first touched after the measurement.
    fn report_usage(&self) {
        // SAFETY: getrusage into a local; write from a local buffer.
        unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            let ptr: *mut libc::rusage = &mut ru;
            if libc::syscall(libc::SYS_getrusage, libc::RUSAGE_SELF, ptr) != 0 {
                return;
            }
            let buf = encode_usage(&rusage_of(&ru));
            libc::syscall(libc::SYS_write, self.usage_write, buf.as_ptr(), buf.len());
        }
    }
}

/// The command's execve(2), prepared before the fork (the child may not allocate): the
/// program found on PATH as execvp would, its arguments, and the environment std's
/// spawn would pass.
struct PreparedExec {
    _strings: Vec<CString>,
    path: *const libc::c_char,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_strings`, owned and never changed; the child reads
// them between fork and exec only.
unsafe impl Send for PreparedExec {}
// SAFETY: as above (read-only).
unsafe impl Sync for PreparedExec {}

impl PreparedExec {
    fn new(cmd: &Command) -> io::Result<PreparedExec> {
        use std::os::unix::ffi::OsStrExt;
        let c = |bytes: &[u8]| {
            CString::new(bytes)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the command"))
        };
        let program = cmd.get_program().to_string_lossy().into_owned();
        let path = c(find_program(&program)?.as_os_str().as_bytes())?;
        let mut args = vec![c(cmd.get_program().as_bytes())?];
        for a in cmd.get_args() {
            args.push(c(a.as_bytes())?);
        }
        let mut env: std::collections::BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => env.insert(k.to_os_string(), v.to_os_string()),
                None => env.remove(k),
            };
        }
        let mut vars = Vec::with_capacity(env.len());
        for (k, v) in env {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            vars.push(c(&kv)?);
        }
        let pointers = |strings: &[CString]| {
            let mut p: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        let argv = pointers(&args);
        let envp = pointers(&vars);
        let path_ptr = path.as_ptr();
        let mut strings = args;
        strings.extend(vars);
        strings.push(path);
        Ok(PreparedExec {
            _strings: strings,
            path: path_ptr,
            argv,
            envp,
        })
    }

    /// execve(2) (async-signal-safe); returns only when it failed. ENOEXEC (a script
    /// without `#!`) is left to std's execvp, which runs it with /bin/sh.
    fn exec(&self) -> io::Result<()> {
        // SAFETY: NUL-terminated strings and null-terminated arrays, alive in self.
        unsafe {
            libc::syscall(
                libc::SYS_execve,
                self.path,
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            );
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENOEXEC) => Ok(()),
            _ => Err(err),
        }
    }
}

/// [`Launcher::reaped_rusage`]: the tree's summed rusage `reaped`, of which `command`
/// is the command's own process's and `others_max_rss_kib` the largest `ru_maxrss` of
/// the rest, less `pre`, what the command's process had used before its exec.
fn program_rusage(
    reaped: Rusage,
    command: Option<Rusage>,
    others_max_rss_kib: u64,
    pre: Option<Rusage>,
) -> ReapedRusage {
    let mut tree = reaped;
    let Some(pre) = pre else {
        return ReapedRusage {
            tree,
            max_rss_upper_bound: false,
        };
    };
    tree.user_us = tree.user_us.saturating_sub(pre.user_us);
    tree.system_us = tree.system_us.saturating_sub(pre.system_us);
    tree.minor_faults = tree.minor_faults.saturating_sub(pre.minor_faults);
    tree.major_faults = tree.major_faults.saturating_sub(pre.major_faults);
    tree.voluntary_switches = tree
        .voluntary_switches
        .saturating_sub(pre.voluntary_switches);
    tree.involuntary_switches = tree
        .involuntary_switches
        .saturating_sub(pre.involuntary_switches);
    // The kernel keeps the copy's high-water mark across the exec (exec_mmap's
    // setmax_mm_hiwater_rss), so the command's ru_maxrss is the larger of the copy's
    // and the program's own: no larger than the copy's, it only bounds the program's,
    // unless another process of the tree was as large. The kernel's figure for the copy
    // exceeds what the child read right before its exec by up to 832 KiB (measured, with
    // a C fork-exec too), hence the margin: within it, the figure is called a bound,
    // which it then may be.
    let command_max = command.map_or(0, |r| r.max_rss_kib);
    let max_rss_upper_bound = command.is_some()
        && command_max <= pre.max_rss_kib.saturating_add(PRE_EXEC_RSS_MARGIN_KIB)
        && others_max_rss_kib < command_max;
    ReapedRusage {
        tree,
        max_rss_upper_bound,
    }
}

/// How far above the gated child's own pre-exec `ru_maxrss` the kernel's figure for it
/// may be (see [`Launcher::reaped_rusage`]): 2 MiB, over twice the gap measured.
const PRE_EXEC_RSS_MARGIN_KIB: u64 = 2048;

/// Length of a [`Rusage`] as the gated child sends it: seven native-endian u64.
const USAGE_BYTES: usize = 7 * 8;

/// A [`Rusage`] as bytes (no allocation: called between fork and exec).
fn encode_usage(r: &Rusage) -> [u8; USAGE_BYTES] {
    let fields = [
        r.user_us,
        r.system_us,
        r.max_rss_kib,
        r.minor_faults,
        r.major_faults,
        r.voluntary_switches,
        r.involuntary_switches,
    ];
    let mut buf = [0u8; USAGE_BYTES];
    for (chunk, v) in buf.chunks_exact_mut(8).zip(fields) {
        chunk.copy_from_slice(&v.to_ne_bytes());
    }
    buf
}

fn decode_usage(buf: &[u8; USAGE_BYTES]) -> Rusage {
    let f = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[i * 8..i * 8 + 8]);
        u64::from_ne_bytes(b)
    };
    Rusage {
        user_us: f(0),
        system_us: f(1),
        max_rss_kib: f(2),
        minor_faults: f(3),
        major_faults: f(4),
        voluntary_switches: f(5),
        involuntary_switches: f(6),
    }
}

/// The gated child's usage record, once its end of the pipe has closed (at its exec).
fn read_pre_exec_usage(read: OwnedFd) -> Option<Rusage> {
    let mut buf = [0u8; USAGE_BYTES];
    let mut file = std::fs::File::from(read);
    std::io::Read::read_exact(&mut file, &mut buf).ok()?;
    Some(decode_usage(&buf))
}

/// The tree's rusage as [`Launcher::reaped_rusage`] gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReapedRusage {
    /// Every reaped process summed, less what kernelkite's copy of itself used in the
    /// command's process before its exec.
    pub tree: Rusage,
    /// `tree.max_rss_kib` is the command's `ru_maxrss` no larger than kernelkite's copy
    /// before its exec held: the program's own peak is at most that, not that.
    pub max_rss_upper_bound: bool,
}

/// The spawning thread's result: the command exec'd, or why it did not.
fn join_spawner(spawner: std::thread::JoinHandle<io::Result<()>>) -> io::Result<()> {
    spawner
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the thread starting the command panicked")))
}

/// The parent's end of [`Launcher::spawn_gated`]'s gate.
#[derive(Debug)]
pub struct StartGate {
    write: Option<OwnedFd>,
    spawner: Option<std::thread::JoinHandle<io::Result<()>>>,
}

impl StartGate {
    /// Let the command run; returns once it has exec'd, or with why it could not (it
    /// has then exited, and been reaped).
    pub fn open(mut self) -> io::Result<()> {
        let mut write = std::fs::File::from(self.write.take().expect("an unopened gate"));
        std::io::Write::write_all(&mut write, &[GATE_OPEN])?;
        drop(write);
        join_spawner(self.spawner.take().expect("an unopened gate"))
    }
}

impl StartGate {
    /// [`StartGate::open`], where a command killed at the gate (by a signal passed on
    /// to it: SIGHUP, SIGTERM) is not an error: it is reaped and reported like any
    /// other death of the command.
    pub fn open_or_killed(self) -> io::Result<()> {
        match self.open() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            other => other,
        }
    }
}

impl Drop for StartGate {
    fn drop(&mut self) {
        // Unopened: EOF on the gate makes the child exit without running the command,
        // and std's spawn reaps it. Waiting for that here keeps the caller's own
        // reaping from racing std's.
        drop(self.write.take());
        if let Some(spawner) = self.spawner.take() {
            let _ = join_spawner(spawner);
        }
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

/// The fields kernelkite keeps of a `struct rusage`.
fn rusage_of(ru: &libc::rusage) -> Rusage {
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

    fn usage(cpu_us: u64, max_rss_kib: u64, minor_faults: u64) -> Rusage {
        Rusage {
            user_us: cpu_us,
            system_us: cpu_us / 2,
            max_rss_kib,
            minor_faults,
            major_faults: 1,
            voluntary_switches: 3,
            involuntary_switches: 2,
        }
    }

    #[test]
    fn the_copy_before_the_exec_is_taken_out_of_the_programs_rusage() {
        // `run -- true` as measured: the child read 3,488 KiB and 40 faults right before
        // its exec, wait4 said 4,140 KiB and 101 faults.
        let pre = usage(395, 3_488, 40);
        let command = usage(1_516, 4_140, 101);
        let r = program_rusage(command, Some(command), 0, Some(pre));
        assert_eq!(r.tree.user_us, 1_516 - 395);
        assert_eq!(r.tree.system_us, 758 - 197);
        assert_eq!(r.tree.minor_faults, 61);
        assert_eq!(r.tree.major_faults, 0);
        assert_eq!(r.tree.voluntary_switches, 0);
        assert_eq!(
            r.tree.max_rss_kib, 4_140,
            "a bound is still the kernel's figure"
        );
        assert!(r.max_rss_upper_bound, "{r:?}");
    }

    #[test]
    fn a_program_larger_than_the_copy_has_an_exact_max_rss() {
        let pre = usage(300, 3_500, 40);
        let command = usage(200_000, 64_600, 22_000);
        let r = program_rusage(command, Some(command), 0, Some(pre));
        assert!(!r.max_rss_upper_bound);
        assert_eq!(r.tree.max_rss_kib, 64_600);
        // Just past the margin is exact; at it, a bound.
        let at = usage(1_000, 3_500 + PRE_EXEC_RSS_MARGIN_KIB, 50);
        assert!(program_rusage(at, Some(at), 0, Some(pre)).max_rss_upper_bound);
        let past = usage(1_000, 3_500 + PRE_EXEC_RSS_MARGIN_KIB + 4, 50);
        assert!(!program_rusage(past, Some(past), 0, Some(pre)).max_rss_upper_bound);
    }

    #[test]
    fn another_process_as_large_makes_the_tree_max_rss_exact() {
        let pre = usage(300, 3_500, 40);
        let command = usage(1_000, 4_000, 60);
        let orphan = usage(5_000, 4_000, 900);
        let mut tree = command;
        tree.add_reaped(&orphan);
        let r = program_rusage(tree, Some(command), orphan.max_rss_kib, Some(pre));
        assert!(
            !r.max_rss_upper_bound,
            "the orphan's own 4,000 KiB is exact"
        );
        let smaller = usage(5_000, 3_000, 900);
        let r = program_rusage(tree, Some(command), smaller.max_rss_kib, Some(pre));
        assert!(r.max_rss_upper_bound);
    }

    #[test]
    fn without_the_childs_report_nothing_is_taken_out() {
        let command = usage(1_000, 4_000, 60);
        let r = program_rusage(command, Some(command), 0, None);
        assert_eq!(r.tree, command);
        assert!(!r.max_rss_upper_bound);
    }

    #[test]
    fn the_childs_usage_record_round_trips() {
        let u = usage(u64::MAX - 1, 12_345, 7);
        assert_eq!(decode_usage(&encode_usage(&u)), u);
    }

    #[test]
    fn group_list_includes_the_primary_group() {
        let groups = group_list("root", 0).unwrap();
        assert!(groups.contains(&0), "{groups:?}");
    }
}
