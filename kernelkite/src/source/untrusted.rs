//! The one door to files that a traced process controls: its perf map
//! (`/tmp/perf-PID.map`), the binaries and libraries it mapped, read by path once it
//! has exited (below its own root when it lives in another mount namespace). kernelkite runs as root next to that process, so each such file is
//! untrusted input, and nothing else in kernelkite opens one (a test below checks the
//! source for other opens).
//!
//! The rules, in the order they are applied (docs/SECURITY.md):
//! - The read runs on a short-lived thread that first takes the traced process's
//!   filesystem credentials (no supplementary groups, its fsgid, its fsuid; all three are
//!   per thread in the kernel, so the raw syscalls change that thread only): root's
//!   DAC rights are never used on the target's behalf, and the credentials end with the
//!   thread. Chosen over a separate helper process because it needs no exec and no
//!   IPC; it is the same kernel check the target itself would meet.
//! - The caller waits at most a deadline: a read stuck anywhere (a FUSE file system the
//!   target serves) is left to finish on its own (its answer is taken if asked again),
//!   and one read per uid runs at a time, so a stalled target holds one thread.
//! - A path is opened `O_PATH | O_NOFOLLOW` (a symlink is not followed); a mapped file
//!   through `/proc/PID/map_files/START-END` (the kernel's own link to the mapped
//!   inode). `O_PATH` opens nothing: no FIFO or device is ever opened for reading.
//!   A path inside another mount namespace is opened with `openat2` below a handle of
//!   the process's root: `RESOLVE_IN_ROOT` (that root is `/`, `..` cannot leave it) and
//!   `RESOLVE_NO_SYMLINKS` (no link anywhere on the path, magic links included).
//! - `fstat` of that handle: a regular file only; owned by the target's uid or root when
//!   asked (the rule perf applies to perf maps); the expected device and inode when
//!   asked (the mapping's, from /proc/PID/maps: a path renamed over is not read); not
//!   larger than the size bound.
//! - Reopened through `/proc/self/fd/N` with `O_RDONLY | O_NONBLOCK`, read to at most
//!   the size bound (a file that grows past it is refused too).
//!
//! Every refusal is a [`Skip`], which callers report with the path.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Why a file was not read. `name()` is the word bundles and reports use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    /// The path does not exist (any more).
    Missing,
    /// The path is a symbolic link.
    Symlink,
    /// Not a regular file (FIFO, device, socket, directory).
    NotRegular,
    /// Owned by neither the traced process's uid nor root.
    WrongOwner,
    /// Larger than the size bound.
    TooLarge,
    /// Another file than the one that was mapped (device or inode differ).
    Replaced,
    /// The traced process's credentials may not read it.
    Denied,
    /// The read did not finish before its deadline (or an earlier one for this uid did
    /// not).
    TimedOut,
    /// Any other error opening or reading it.
    Unreadable,
}

impl Skip {
    pub fn name(self) -> &'static str {
        match self {
            Skip::Missing => "missing",
            Skip::Symlink => "symlink",
            Skip::NotRegular => "not_regular",
            Skip::WrongOwner => "wrong_owner",
            Skip::TooLarge => "too_large",
            Skip::Replaced => "replaced",
            Skip::Denied => "permission_denied",
            Skip::TimedOut => "timed_out",
            Skip::Unreadable => "unreadable",
        }
    }
}

/// The device (major, minor) and inode of a file, as /proc/PID/maps shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
}

/// Where the file is.
#[derive(Clone, Debug)]
pub enum Place {
    /// A path the target may have made a symlink, a FIFO or another file.
    Path(PathBuf),
    /// The file mapped at `start..end` in live process `pid`.
    Mapped { pid: u32, start: u64, end: u64 },
    /// `path` as a process of another mount namespace sees it: resolved below `root`
    /// (its root directory, which is `/` for the path; `..` cannot leave it), never
    /// through a symlink.
    InRoot { root: Arc<Root>, path: PathBuf },
}

impl Place {
    /// What the door's pending and answered reads are keyed by: the path opened, or
    /// for [`Place::InRoot`] the path with its root handle's serial (a path means
    /// another file in another root).
    fn key(&self) -> PathBuf {
        match self {
            Place::Path(p) => p.clone(),
            Place::Mapped { pid, start, end } => {
                PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
            }
            Place::InRoot { root, path } => {
                PathBuf::from(format!("root#{}:{}", root.serial, path.display()))
            }
        }
    }

    /// How reports name the file: the path, and for [`Place::InRoot`] the mount
    /// namespace it is in (as `/proc/PID/ns/mnt` reads, `mnt:[INODE]`).
    pub fn shown(&self) -> String {
        match self {
            Place::InRoot { root, path } => {
                format!("{} in mnt:[{}]", path.display(), root.key.mount_namespace)
            }
            other => other.key().to_string_lossy().into_owned(),
        }
    }
}

/// What tells one [`Root`] from another: its mount namespace (the inode of
/// `/proc/PID/ns/mnt`) and the device and inode of the root directory (a process may
/// have chrooted inside its namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RootKey {
    pub mount_namespace: u64,
    pub dev: u64,
    pub inode: u64,
}

/// A process's root directory and its mount namespace, held to read files as that
/// process sees them ([`Place::InRoot`]) also after it has exited: the namespace
/// handle keeps its mounts in place even once its last process is gone (without it, a
/// container's `/tmp` would be unmounted with its last process, and the root's `/tmp`
/// be the one beneath).
#[derive(Debug)]
pub struct Root {
    /// `O_PATH` handle of the root directory.
    dir: OwnedFd,
    /// Handle of the mount namespace (nsfs): held, never read.
    _namespace: OwnedFd,
    key: RootKey,
    /// Unique among the handles of this process: keys the door's pending reads.
    serial: u64,
}

impl Root {
    /// The root and mount namespace of live process `pid`. `/proc/PID/root` and
    /// `/proc/PID/ns/mnt` are the kernel's magic links, followed here (as root, before
    /// any credentials are taken): /proc/PID is the kernel's, not the target's, and
    /// what they lead to is the process's root and namespace whatever the target does.
    /// Nothing is read through them but by [`Door::read`] of a [`Place::InRoot`].
    pub fn of_process(pid: u32) -> Option<Root> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        let dir = open_raw(Path::new(&format!("/proc/{pid}/root")), flags).ok()?;
        let namespace = open_raw(Path::new(&format!("/proc/{pid}/ns/mnt")), libc::O_RDONLY).ok()?;
        let (root, ns) = (fstat(&dir).ok()?, fstat(&namespace).ok()?);
        Some(Root {
            dir,
            _namespace: namespace,
            key: RootKey {
                mount_namespace: ns.st_ino,
                dev: root.st_dev,
                inode: root.st_ino,
            },
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        })
    }

    pub fn key(&self) -> RootKey {
        self.key
    }

    /// A directory taken as a root, in kernelkite's own mount namespace (tests).
    #[cfg(test)]
    fn of_dir(dir: &Path) -> Root {
        let dir = open_raw(dir, libc::O_PATH | libc::O_DIRECTORY).unwrap();
        let namespace = open_raw(Path::new("/proc/self/ns/mnt"), libc::O_RDONLY).unwrap();
        let (root, ns) = (fstat(&dir).unwrap(), fstat(&namespace).unwrap());
        Root {
            dir,
            _namespace: namespace,
            key: RootKey {
                mount_namespace: ns.st_ino,
                dev: root.st_dev,
                inode: root.st_ino,
            },
            serial: u64::MAX - root.st_ino,
        }
    }
}

/// The mount namespace of `pid` (kernelkite's own with `None`): the inode of
/// `/proc/PID/ns/mnt`, a kernel file; `None` when the process is gone.
pub fn mount_namespace(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/ns/mnt"),
        None => "/proc/self/ns/mnt".to_string(),
    };
    std::fs::metadata(path)
        .ok()
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
}

/// What the file must be to be read.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// Larger files are refused ([`Skip::TooLarge`]); nothing past it is read.
    pub max_bytes: u64,
    /// Refuse files owned by anyone but the target's uid or root (perf's rule for perf
    /// maps).
    pub owner_is_target_or_root: bool,
    /// Refuse a file that is not this one.
    pub file: Option<FileId>,
}

/// The identity a traced process reads files with: its fsuid and fsgid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
}

impl Credentials {
    /// The filesystem uid and gid of live process `pid` (/proc/PID/status).
    pub fn of_process(pid: u32) -> Option<Credentials> {
        ProcessStatus::of_process(pid).map(|s| s.who)
    }
}

/// What the door needs of a live process, from one read of `/proc/PID/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessStatus {
    /// Its filesystem uid and gid.
    pub who: Credentials,
    /// Its pid in its own pid namespace (the last number of `NSpid:`): the pid a JIT
    /// runtime in a container names its perf map by. Its host pid on a kernel without
    /// that line.
    pub ns_pid: u32,
}

/// /proc/PID/status is a few KiB; more than this is not read.
const MAX_STATUS_BYTES: u64 = 64 << 10;

impl ProcessStatus {
    /// `None` when the process is gone (or the file is not as the kernel writes it).
    pub fn of_process(pid: u32) -> Option<ProcessStatus> {
        let file = File::open(format!("/proc/{pid}/status")).ok()?;
        let mut text = Vec::new();
        file.take(MAX_STATUS_BYTES).read_to_end(&mut text).ok()?;
        ProcessStatus::parse(pid, &String::from_utf8_lossy(&text))
    }

    fn parse(pid: u32, text: &str) -> Option<ProcessStatus> {
        let field = |name: &str| {
            (text.lines())
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.split_whitespace().collect::<Vec<_>>())
        };
        // Real, effective, saved, filesystem.
        let fs_id = |name: &str| field(name)?.get(3)?.parse::<u32>().ok();
        let ns_pid = match field("NSpid") {
            Some(pids) => pids.last()?.parse().ok()?,
            None => pid,
        };
        Some(ProcessStatus {
            who: Credentials {
                uid: fs_id("Uid")?,
                gid: fs_id("Gid")?,
            },
            ns_pid,
        })
    }
}

/// `/tmp/perf-PID.map`, where JIT runtimes list the code they generate.
pub fn perf_map_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// What a read through the door gives: the file's bytes, or why not.
type ReadAnswer = Result<Vec<u8>, Skip>;

/// The door: reads under [`Rules`] with a target's [`Credentials`] and a deadline.
#[derive(Debug)]
pub struct Door {
    deadline: Duration,
    /// Per uid, a token each read thread holds until it ends: one read per uid at a
    /// time, so a target that stalls reads (a FUSE file system it serves) holds one
    /// thread, and its other reads are refused at once instead of each waiting out
    /// the deadline.
    in_flight: BTreeMap<u32, Arc<()>>,
    /// Reads past their deadline, by the path opened, with the uid reading: asking
    /// again takes the answer once it has come.
    pending: BTreeMap<PathBuf, (u32, mpsc::Receiver<ReadAnswer>)>,
    /// Answers of pending reads taken while waiting for their uid's turn, by path.
    answered: BTreeMap<PathBuf, ReadAnswer>,
    /// Set by [`Door::finish_by`]: reads wait until then instead of the deadline.
    finish_by: Option<Instant>,
}

impl Door {
    pub fn new(deadline: Duration) -> Door {
        Door {
            deadline,
            in_flight: BTreeMap::new(),
            pending: BTreeMap::new(),
            answered: BTreeMap::new(),
            finish_by: None,
        }
    }

    /// The last pass of a session, which must end by `until`: from now on a read waits
    /// until then (for its answer, or for a read of its uid still under way to end)
    /// instead of answering [`Skip::TimedOut`] after the deadline. Without this, one
    /// slow read (a large binary on a loaded machine) left every other file of its uid
    /// unread at the end, and their processes' stacks without unwind information.
    pub fn finish_by(&mut self, until: Instant) {
        self.finish_by = Some(until);
    }

    /// How long a read may wait now: the deadline, or what is left of the last pass.
    fn wait(&self) -> Duration {
        match self.finish_by {
            Some(until) => until.saturating_duration_since(Instant::now()),
            None => self.deadline,
        }
    }

    /// The answer of a pending read, waiting at most `wait`; `None` if it has not come.
    fn take_pending(&mut self, path: &Path, wait: Duration) -> Option<ReadAnswer> {
        let (_, rx) = self.pending.get(path)?;
        let answer = match rx.recv_timeout(wait) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => return None,
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Skip::Unreadable),
        };
        self.pending.remove(path);
        Some(answer)
    }

    /// The file's contents, read by the rules of this module. [`Skip::TimedOut`] is
    /// not final: the read goes on, and asking again later may give its result.
    pub fn read(&mut self, place: &Place, rules: Rules, who: Credentials) -> Result<Vec<u8>, Skip> {
        let path = place.key();
        if let Some(answer) = self.answered.remove(&path) {
            return answer;
        }
        if self.pending.contains_key(&path) {
            let wait = if self.finish_by.is_some() {
                self.wait()
            } else {
                Duration::ZERO
            };
            return self
                .take_pending(&path, wait)
                .unwrap_or(Err(Skip::TimedOut));
        }
        if self.finish_by.is_some() {
            // The last pass: this uid's read under way is waited for, and kept.
            let busy: Vec<PathBuf> = (self.pending.iter())
                .filter(|(_, (uid, _))| *uid == who.uid)
                .map(|(p, _)| p.clone())
                .collect();
            for p in busy {
                if let Some(answer) = self.take_pending(&p, self.wait()) {
                    self.answered.insert(p, answer);
                }
            }
        }
        let token = self.in_flight.entry(who.uid).or_default();
        if Arc::strong_count(token) > 1 {
            return Err(Skip::TimedOut);
        }
        let held = Arc::clone(token);
        let (tx, rx) = mpsc::channel();
        let opened = place.clone();
        let spawned = std::thread::Builder::new()
            .name("kk-untrusted-read".into())
            .spawn(move || {
                let result = take_credentials(who).and_then(|()| read_checked(&opened, rules, who));
                // Done before the answer, so the next read of this uid may start.
                drop(held);
                let _ = tx.send(result);
            });
        if spawned.is_err() {
            return Err(Skip::Unreadable);
        }
        match rx.recv_timeout(self.wait()) {
            Ok(result) => result,
            Err(_) => {
                // The thread goes on where it is blocked; it holds nothing of ours.
                self.pending.insert(path, (who.uid, rx));
                Err(Skip::TimedOut)
            }
        }
    }

    /// The file's contents copied into a sealed anonymous file of our own, so a parser
    /// that maps it (blazesym) never maps the target's file: the target cannot truncate
    /// it under the mapping (SIGBUS) or change it.
    pub fn copy(
        &mut self,
        place: &Place,
        rules: Rules,
        who: Credentials,
    ) -> Result<FileCopy, Skip> {
        let bytes = self.read(place, rules, who)?;
        FileCopy::of(&bytes).ok_or(Skip::Unreadable)
    }
}

/// A copy of kernelkite's own vDSO: the kernel maps the same image into every process
/// of its architecture, so it names a traced process's vDSO frames without reading
/// anything of that process.
pub fn own_vdso() -> Option<FileCopy> {
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    let maps = procfs::process::Process::myself()
        .and_then(|p| p.maps())
        .ok()?;
    let vdso = maps
        .into_iter()
        .find(|m| matches!(m.pathname, procfs::process::MMapPath::Vdso) && m.address.0 == base)?;
    let len = (vdso.address.1 - vdso.address.0) as usize;
    // SAFETY: our own vDSO, mapped readable for the life of the process.
    let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
    FileCopy::of(bytes)
}

/// A private, sealed copy of a file read through the door.
#[derive(Debug)]
pub struct FileCopy {
    file: File,
    len: u64,
    debug_link: bool,
}

impl FileCopy {
    fn of(bytes: &[u8]) -> Option<FileCopy> {
        let name = CString::new("kernelkite-copy").ok()?;
        // SAFETY: a valid C string; the fd returned is ours.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: just created, owned here only.
        let mut file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.write_all(bytes).ok()?;
        let seals =
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our own fd.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return None;
        }
        Some(FileCopy {
            file,
            len: bytes.len() as u64,
            debug_link: has_debug_link(bytes),
        })
    }

    /// The path a parser opens the copy by (our own fd; never the target's file).
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    pub fn size_bytes(&self) -> u64 {
        self.len
    }

    /// Whether `other` holds the same bytes (both read back from our sealed copies).
    pub fn same_contents(&self, other: &FileCopy) -> bool {
        self.len == other.len && self.bytes().is_some_and(|a| other.bytes() == Some(a))
    }

    /// The copy's bytes (read back from our sealed copy, never from the target's file).
    pub fn bytes(&self) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0; usize::try_from(self.len).ok()?];
        self.file.read_exact_at(&mut bytes, 0).ok()?;
        Some(bytes)
    }

    /// Whether the ELF names a separate debug file (`.gnu_debuglink`), or is not an ELF
    /// this check understands. Such a file's DWARF must not be looked for: blazesym
    /// would open the debug link's name, which the target chose, as a path.
    pub fn has_debug_link(&self) -> bool {
        self.debug_link
    }
}

/// Give this thread the target's filesystem identity (this thread only: raw syscalls,
/// not glibc's process-wide wrappers).
fn take_credentials(who: Credentials) -> Result<(), Skip> {
    // SAFETY: plain syscalls with integer arguments; they act on this thread only.
    unsafe {
        let groups_cleared =
            libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) == 0;
        libc::syscall(libc::SYS_setfsgid, who.gid);
        libc::syscall(libc::SYS_setfsuid, who.uid);
        // An invalid id changes nothing and returns the current one.
        let fsuid = libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32;
        let fsgid = libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32;
        if fsuid == who.uid && fsgid == who.gid && groups_cleared {
            return Ok(());
        }
        // Without CAP_SETUID/CAP_SETGID we are not root: our own rights are then no
        // more than an unprivileged user's, and we read with them. As root, never.
        if libc::geteuid() == 0 {
            return Err(Skip::Denied);
        }
    }
    Ok(())
}

fn errno_skip(e: &std::io::Error) -> Skip {
    match e.raw_os_error() {
        // ESRCH: a map_files link of a process that has exited (a zombie's): gone.
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ESRCH) => Skip::Missing,
        Some(libc::EACCES) | Some(libc::EPERM) => Skip::Denied,
        Some(libc::ELOOP) => Skip::Symlink,
        _ => Skip::Unreadable,
    }
}

fn open_raw(path: &Path, flags: libc::c_int) -> Result<OwnedFd, Skip> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Skip::Unreadable)?;
    // SAFETY: a valid C string; the fd returned is ours.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno_skip(&std::io::Error::last_os_error()));
    }
    // SAFETY: just opened, owned here only.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd) -> Result<libc::stat, Skip> {
    // SAFETY: a zeroed stat is a valid out buffer for fstat on our fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Skip::Unreadable);
    }
    Ok(st)
}

/// `path` below `root`, as `O_PATH`: resolved as if `root` were `/` (`..` stops there,
/// an absolute path starts there), through no symlink at all (ELOOP, a
/// [`Skip::Symlink`]), magic links included; mount points inside the root are crossed
/// (a container's /tmp is a mount of its own).
fn open_in_root(root: &Root, path: &Path) -> Result<OwnedFd, Skip> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Skip::Unreadable)?;
    // SAFETY: a zeroed open_how is valid (no flags); the fields are set below.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a valid fd, C string and open_how of the size passed; the fd returned is
    // ours.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(errno_skip(&std::io::Error::last_os_error()));
    }
    // SAFETY: just opened, owned here only.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Open (never following a symlink, never opening a non-regular file) and check.
fn read_checked(place: &Place, rules: Rules, who: Credentials) -> Result<Vec<u8>, Skip> {
    let handle = match place {
        // map_files entries are the kernel's links to the mapped inode: followed.
        Place::Mapped { .. } => open_raw(&place.key(), libc::O_PATH)?,
        // Any other path: its last component must not be a link.
        Place::Path(path) => open_raw(path, libc::O_PATH | libc::O_NOFOLLOW)?,
        Place::InRoot { root, path } => open_in_root(root, path)?,
    };
    let st = fstat(&handle)?;
    check(&st, rules, who)?;
    let fd = open_raw(
        Path::new(&format!("/proc/self/fd/{}", handle.as_raw_fd())),
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    )?;
    let reopened = fstat(&fd)?;
    if (reopened.st_dev, reopened.st_ino) != (st.st_dev, st.st_ino) {
        return Err(Skip::Replaced);
    }
    let mut bytes = Vec::with_capacity(st.st_size.max(0) as usize);
    // One byte past the bound tells a file that grew past it.
    File::from(fd)
        .take(rules.max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| errno_skip(&e))?;
    if bytes.len() as u64 > rules.max_bytes {
        return Err(Skip::TooLarge);
    }
    Ok(bytes)
}

fn check(st: &libc::stat, rules: Rules, who: Credentials) -> Result<(), Skip> {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFLNK => return Err(Skip::Symlink),
        _ => return Err(Skip::NotRegular),
    }
    if let Some(want) = rules.file {
        let have = FileId {
            dev_major: libc::major(st.st_dev),
            dev_minor: libc::minor(st.st_dev),
            inode: st.st_ino,
        };
        if have != want {
            return Err(Skip::Replaced);
        }
    }
    if rules.owner_is_target_or_root && st.st_uid != who.uid && st.st_uid != 0 {
        return Err(Skip::WrongOwner);
    }
    if st.st_size < 0 || st.st_size as u64 > rules.max_bytes {
        return Err(Skip::TooLarge);
    }
    Ok(())
}

/// Whether a 64-bit little-endian ELF has a `.gnu_debuglink` section; `true` for
/// anything this does not understand (so its debug data is not looked for).
fn has_debug_link(elf: &[u8]) -> bool {
    let u16_at = |o: usize| {
        elf.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    let scan = || -> Option<bool> {
        // ELFCLASS64, ELFDATA2LSB.
        if elf.get(..6)? != b"\x7fELF\x02\x01" {
            return None;
        }
        let (shoff, shentsize, shnum, shstrndx) =
            (u64_at(0x28)?, u16_at(0x3a)?, u16_at(0x3c)?, u16_at(0x3e)?);
        if shentsize < 0x40 {
            return None;
        }
        let header = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
        let strtab = u64_at(header(shstrndx)? + 0x18)?;
        for i in 0..shnum {
            let name = strtab.checked_add(u32_at(header(i)?)?)?;
            if elf.get(name..)?.starts_with(b".gnu_debuglink\0") {
                return Some(true);
            }
        }
        Some(false)
    };
    scan().unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Credentials {
        Credentials { uid: 0, gid: 0 }
    }

    #[test]
    fn copies_with_the_same_bytes_are_the_same_contents() {
        let copy = |b: &[u8]| FileCopy::of(b).unwrap();
        assert!(copy(b"\x7fELF one").same_contents(&copy(b"\x7fELF one")));
        assert!(!copy(b"\x7fELF one").same_contents(&copy(b"\x7fELF two")));
        assert!(!copy(b"\x7fELF one").same_contents(&copy(b"\x7fELF on")));
    }

    fn rules(max_bytes: u64) -> Rules {
        Rules {
            max_bytes,
            owner_is_target_or_root: true,
            file: None,
        }
    }

    #[test]
    fn a_regular_file_is_read_and_a_link_to_it_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"hello").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let mut door = Door::new(Duration::from_secs(5));
        assert_eq!(
            door.read(&Place::Path(file), rules(100), root()).unwrap(),
            b"hello"
        );
        assert_eq!(
            door.read(&Place::Path(link), rules(100), root()),
            Err(Skip::Symlink)
        );
        let missing = dir.path().join("nothing");
        assert_eq!(
            door.read(&Place::Path(missing), rules(100), root()),
            Err(Skip::Missing)
        );
    }

    #[test]
    fn a_fifo_is_never_opened_and_the_bound_holds() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let mut door = Door::new(Duration::from_secs(5));
        assert_eq!(
            door.read(&Place::Path(fifo), rules(100), root()),
            Err(Skip::NotRegular)
        );
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 101]).unwrap();
        assert_eq!(
            door.read(&Place::Path(big), rules(100), root()),
            Err(Skip::TooLarge)
        );
    }

    #[test]
    fn the_expected_inode_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let mut door = Door::new(Duration::from_secs(5));
        let other = FileId {
            dev_major: 0,
            dev_minor: 0,
            inode: 1,
        };
        let r = Rules {
            file: Some(other),
            ..rules(10)
        };
        assert_eq!(
            door.read(&Place::Path(file), r, root()),
            Err(Skip::Replaced)
        );
    }

    /// The last pass waits for a read under way instead of refusing its uid's other
    /// reads: one large file still being read (kernelkite's own 180 MB debug binary, on
    /// a loaded machine) left a short command's libraries unread, and its stacks cut.
    #[test]
    fn the_last_pass_waits_for_a_read_under_way() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 64 << 20]).unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, b"small").unwrap();
        // No wait at all: the 64 MiB read cannot have ended when it is asked.
        let mut door = Door::new(Duration::ZERO);
        let (big, small) = (Place::Path(big), Place::Path(small));
        assert_eq!(
            door.read(&big, rules(128 << 20), root()),
            Err(Skip::TimedOut)
        );
        // Its uid's next read is refused while it runs, not queued behind it.
        assert_eq!(door.read(&small, rules(100), root()), Err(Skip::TimedOut));
        door.finish_by(Instant::now() + Duration::from_secs(60));
        assert_eq!(door.read(&small, rules(100), root()).unwrap(), b"small");
        // The answer the last pass waited for is kept for its own asking.
        assert_eq!(
            door.read(&big, rules(128 << 20), root()).map(|b| b.len()),
            Ok(64 << 20)
        );
    }

    /// A process that has exited (a zombie) has no map_files links: the kernel says
    /// ESRCH, which is "missing" (the caller then tries the file's path), not a refusal
    /// of the file for the rest of the session.
    #[test]
    fn a_zombies_mapped_file_is_missing() {
        if !crate::test_skip::root_or_required("a_zombies_mapped_file_is_missing") {
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(100));
        let mapping = std::fs::read_dir(format!("/proc/{pid}/map_files"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .file_name();
        let (start, end) = mapping.to_str().unwrap().split_once('-').unwrap();
        let place = Place::Mapped {
            pid,
            start: u64::from_str_radix(start, 16).unwrap(),
            end: u64::from_str_radix(end, 16).unwrap(),
        };
        let any = Rules {
            max_bytes: 1 << 30,
            owner_is_target_or_root: false,
            file: None,
        };
        let mut door = Door::new(Duration::from_secs(5));
        assert!(door.read(&place, any, root()).is_ok());
        child.kill().unwrap();
        // Not reaped: a zombie until the wait below.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(door.read(&place, any, root()), Err(Skip::Missing));
        child.wait().unwrap();
    }

    /// A path in another root is resolved below it, as that root's `/`: `..` and
    /// absolute paths stay inside, and no symlink is followed anywhere on the path.
    #[test]
    fn a_path_in_a_root_is_read_below_it_and_never_leaves_it() {
        let outer = tempfile::tempdir().unwrap();
        std::fs::write(outer.path().join("secret"), b"outside the root").unwrap();
        let dir = outer.path().join("root");
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::write(dir.join("tmp/perf-1.map"), b"1000 10 kk_jit\n").unwrap();
        std::fs::write(dir.join("secret"), b"the root's own").unwrap();
        std::os::unix::fs::symlink("../secret", dir.join("tmp/up")).unwrap();
        std::os::unix::fs::symlink("tmp", dir.join("via")).unwrap();
        let fifo = CString::new(dir.join("tmp/fifo").as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let held = Arc::new(Root::of_dir(&dir));
        let at = |path: &str| Place::InRoot {
            root: Arc::clone(&held),
            path: PathBuf::from(path),
        };
        let mut door = Door::new(Duration::from_secs(5));
        let mut read = |path: &str| door.read(&at(path), rules(100), root());
        assert_eq!(read("/tmp/perf-1.map").unwrap(), b"1000 10 kk_jit\n");
        assert_eq!(read("tmp/perf-1.map").unwrap(), b"1000 10 kk_jit\n");
        // `..` stops at the root: the root's own file, never the one beside it.
        assert_eq!(read("/../../secret").unwrap(), b"the root's own");
        assert_eq!(read("/tmp/../../../secret").unwrap(), b"the root's own");
        // No link, last component or not.
        assert_eq!(read("/tmp/up"), Err(Skip::Symlink));
        assert_eq!(read("/via/perf-1.map"), Err(Skip::Symlink));
        assert_eq!(read("/tmp/fifo"), Err(Skip::NotRegular));
        assert_eq!(read("/tmp/perf-2.map"), Err(Skip::Missing));
        // A mapped file of a gone process: the mapping's device and inode, checked.
        let st = std::fs::metadata(dir.join("tmp/perf-1.map")).unwrap();
        let mapped = FileId {
            dev_major: libc::major(std::os::unix::fs::MetadataExt::dev(&st)),
            dev_minor: libc::minor(std::os::unix::fs::MetadataExt::dev(&st)),
            inode: std::os::unix::fs::MetadataExt::ino(&st),
        };
        let other = FileId {
            inode: mapped.inode + 1,
            ..mapped
        };
        for (file, want) in [
            (mapped, Ok(b"1000 10 kk_jit\n".to_vec())),
            (other, Err(Skip::Replaced)),
        ] {
            let r = Rules {
                file: Some(file),
                ..rules(100)
            };
            assert_eq!(door.read(&at("/tmp/perf-1.map"), r, root()), want);
        }
        // Shown with the namespace it is in.
        assert_eq!(
            at("/tmp/perf-1.map").shown(),
            format!("/tmp/perf-1.map in mnt:[{}]", held.key().mount_namespace)
        );
    }

    /// The same path below two roots is two files to the door (its pending reads are
    /// keyed by the root too).
    #[test]
    fn the_same_path_below_two_roots_is_two_files() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(a.path().join("f"), b"a").unwrap();
        std::fs::write(b.path().join("f"), b"b").unwrap();
        let place = |dir: &Path| Place::InRoot {
            root: Arc::new(Root::of_dir(dir)),
            path: PathBuf::from("/f"),
        };
        let mut door = Door::new(Duration::from_secs(5));
        assert_eq!(
            door.read(&place(a.path()), rules(10), root()).unwrap(),
            b"a"
        );
        assert_eq!(
            door.read(&place(b.path()), rules(10), root()).unwrap(),
            b"b"
        );
    }

    #[test]
    fn a_status_gives_fs_ids_and_the_innermost_pid() {
        let text = "Name:\tnode\nNSpid:\t4242\t17\t1\nNSpgid:\t9\t9\t9\n\
                    Uid:\t1000\t1001\t1002\t1003\nGid:\t2000\t2001\t2002\t2003\n";
        let status = ProcessStatus::parse(4242, text).unwrap();
        assert_eq!(
            status.who,
            Credentials {
                uid: 1003,
                gid: 2003
            }
        );
        assert_eq!(status.ns_pid, 1);
        // No NSpid line (kernels before 4.1): the pid it was asked for.
        let old = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(ProcessStatus::parse(7, old).unwrap().ns_pid, 7);
        assert_eq!(ProcessStatus::parse(7, "Uid:\t0\n"), None);
        let me = std::process::id();
        assert_eq!(ProcessStatus::of_process(me).unwrap().ns_pid, me);
        assert_eq!(ProcessStatus::of_process(u32::MAX), None);
    }

    #[test]
    fn our_own_vdso_is_an_elf_image() {
        let copy = own_vdso().expect("a vDSO");
        let bytes = std::fs::read(copy.fd_path()).unwrap();
        assert!(bytes.starts_with(b"\x7fELF"));
        assert_eq!(bytes.len() as u64, copy.size_bytes());
    }

    #[test]
    fn our_own_executable_copies_and_has_no_debug_link_check_crash() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        // A test binary has DWARF inline, no debug link.
        assert!(!has_debug_link(&exe));
        assert!(has_debug_link(b"not an elf"));
        let copy = FileCopy::of(&exe[..4096]).unwrap();
        assert_eq!(std::fs::read(copy.fd_path()).unwrap(), exe[..4096]);
    }

    /// Reads use the target's credentials, not root's: a root-only file (owner root,
    /// so perf's owner rule alone would let it through) is refused to `nobody`.
    #[test]
    fn reads_use_the_targets_credentials() {
        if !crate::test_skip::root_or_required("reads_use_the_targets_credentials") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root only").unwrap();
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
        let nobody = Credentials {
            uid: 65534,
            gid: 65534,
        };
        let mut door = Door::new(Duration::from_secs(5));
        let place = Place::Path(secret);
        assert_eq!(door.read(&place, rules(100), nobody), Err(Skip::Denied));
        // The same read as root works, and this thread kept its own credentials.
        assert_eq!(door.read(&place, rules(100), root()).unwrap(), b"root only");
        assert_eq!(unsafe { libc::syscall(libc::SYS_setfsuid, u32::MAX) }, 0);
    }

    /// Every open of a file a traced process controls goes through this module:
    /// nothing else in kernelkite names perf maps or map_files, builds a blazesym file
    /// source from anything but a [`FileCopy`], or lets blazesym read a process's files.
    #[test]
    fn no_other_module_opens_target_files() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut offenders = Vec::new();
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs")
                    || path.ends_with("source/untrusted.rs")
                {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // Tests may read what they like.
                let code_part = text.split("#[cfg(test)]").next().unwrap_or("");
                for (n, line) in code_part.lines().enumerate() {
                    let code = line.split("//").next().unwrap_or("");
                    let bad = code.contains("/perf-")
                        || code.contains("perf-{")
                        || code.contains("map_files")
                        || code.contains("Normalizer")
                        || (code.contains("Elf::new(") && !code.contains(".fd_path()"))
                        || code.contains("Elf {")
                        || code.contains("Source::Process")
                        || code.contains("openat2")
                        || code.contains("}/root")
                        || code.contains("source::Process")
                        || (path.ends_with("source/ebpf/stacks.rs")
                            && (code.contains("File::open")
                                || code.contains("fs::read")
                                || code.contains("OpenOptions")));
                    if bad {
                        offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "target files opened outside the door:\n{}",
            offenders.join("\n")
        );
    }
}
