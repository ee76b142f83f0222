//! Every file kernelkite writes (bundles, recordings, reports, exports, the `check_writable`
//! probe) is created here, so one set of rules holds for all of them:
//!
//! - a new file is created `O_CREAT|O_EXCL|O_NOFOLLOW` (mode 0600) under a random name
//!   (`.NAME.kk-<16 hex digits>`) in the output's directory, opened once by fd; nothing
//!   is ever opened or chowned by a path someone else could have planted;
//! - it is written, `fchmod`ed to 0666 minus the umask, `fchown`ed to the invoking user
//!   through its fd when kernelkite writes as root on their behalf, fsynced, renamed over
//!   the final name and the directory fsynced;
//! - that is for a name that holds nothing or a regular file. A name that holds a
//!   device node, a FIFO or a socket is written in place (opened, or connected to), never
//!   replaced, with the invoking user's rights; `-` (or `/dev/stdout`, `/dev/stderr`) is
//!   the stream itself; a directory or a symlink at the name is refused
//!   ([`Destination`], docs/SECURITY.md);
//! - a streaming output (the `--record` file) is renamed into place right after its
//!   creation, before anything is written: a session killed with SIGKILL or by the OOM
//!   killer still leaves its complete chunks under the name the user gave;
//! - as root with an invoking user ([`set_invoking_user`], from `sudo`'s SUDO_UID and
//!   SUDO_GID), an output whose directory someone other than root could change (the
//!   directory or any directory above it is not root's, or is writable by others, as a
//!   user's home or /tmp are) is created with that user's file rights only; root's
//!   rights are used only in directories that only root can change.
//!
//! Writing as the user is done on a short-lived thread that sets its own filesystem
//! uid/gid and groups with the raw `setfsuid`, `setfsgid` and `setgroups` syscalls. The
//! kernel keeps credentials per thread (glibc's wrappers for setgroups would change
//! every thread; the raw syscalls do not), and a changed fsuid drops the thread's
//! filesystem capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN), so the thread has
//! exactly the user's rights on files and nothing else of the process changes. A forked
//! child would do the same, but kernelkite is multi-threaded by then (tokio, the
//! symbolizer), where only async-signal-safe calls are allowed after fork, and a thread
//! returns the opened file and the error directly.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The user kernelkite writes outputs for when it runs as root on their behalf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputOwner {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, including `gid`.
    pub groups: Vec<u32>,
}

static INVOKING_USER: OnceLock<Option<OutputOwner>> = OnceLock::new();

/// Set once, before the first output is created: the user outputs are written for (see
/// the module comment). Later calls are ignored.
pub fn set_invoking_user(owner: Option<OutputOwner>) {
    let _ = INVOKING_USER.set(owner);
}

fn invoking_user() -> Option<&'static OutputOwner> {
    INVOKING_USER.get().and_then(Option::as_ref)
}

/// Write `bytes` as the file `path`: readers see the old file or the complete new one.
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file_for(path, bytes, invoking_user())
}

/// Create `path` for a stream of writes: the returned file is already in place under its
/// final name, empty (see the module comment).
pub fn create_streaming(path: &Path) -> io::Result<File> {
    create_streaming_for(path, invoking_user())
}

/// Remove `path` if it still names `file` (one [`create_streaming`] returned), as the
/// same user that created it.
pub fn remove_created(path: &Path, file: &File) -> io::Result<()> {
    let ours = file.metadata()?;
    // Only a file this module created: never a device, FIFO or socket written in place.
    if !ours.is_file() || matches!(Destination::of(path), Ok(Destination::Stream(_))) {
        return Ok(());
    }
    let target = Target::of(path)?;
    let owner = invoking_user();
    as_writer(&target.dir, owner, |_| {
        let dir = Dir::open(&target.dir)?;
        let name = cstring(&target.name)?;
        // SAFETY: an all-zero stat is valid; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: name is NUL-terminated, st is writable.
        let rc = unsafe {
            libc::fstatat(
                dir.fd.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_dev != ours.dev() || st.st_ino != ours.ino() {
            return Ok(());
        }
        dir.unlink(&name)
    })
}

/// Fail early (before a long session) when `path` could not be written at the end:
/// create and remove a probe file beside it, exactly as the final write will.
pub fn check_writable(path: &Path) -> io::Result<()> {
    check_writable_for(path, invoking_user())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))
}

fn check_writable_for(path: &Path, owner: Option<&OutputOwner>) -> io::Result<()> {
    match Destination::of(path)? {
        Destination::Stream(_) => return Ok(()),
        Destination::InPlace(_) => {
            // Not opened: a FIFO's open would wait for its reader.
            let target = Target::of(path)?;
            return as_user_in_place(owner, || {
                let dir = Dir::open(&target.dir)?;
                dir.check_write_access(&cstring(&target.name)?)
            });
        }
        Destination::Replace => {}
    }
    let target = Target::of(path)?;
    as_writer(&target.dir, owner, |_| {
        let dir = Dir::open(&target.dir)?;
        TempFile::create(&dir, &target.name).map(drop)
    })
}

fn write_file_for(path: &Path, bytes: &[u8], owner: Option<&OutputOwner>) -> io::Result<()> {
    match Destination::of(path)? {
        Destination::Stream(stream) => return write_stream(stream, bytes),
        Destination::InPlace(kind) => {
            let mut file = open_in_place(path, kind, owner)?;
            return file.write_all(bytes);
        }
        Destination::Replace => {}
    }
    let target = Target::of(path)?;
    as_writer(&target.dir, owner, |chown_to| {
        let dir = Dir::open(&target.dir)?;
        let mut tmp = TempFile::create(&dir, &target.name)?;
        tmp.file.write_all(bytes)?;
        tmp.seal(chown_to)?;
        tmp.file.sync_all()?;
        tmp.rename_over(&target.name)?;
        dir.sync()
    })
}

fn create_streaming_for(path: &Path, owner: Option<&OutputOwner>) -> io::Result<File> {
    match Destination::of(path)? {
        Destination::Stream(stream) => return stream.dup(),
        Destination::InPlace(kind) => return open_in_place(path, kind, owner),
        Destination::Replace => {}
    }
    let target = Target::of(path)?;
    as_writer(&target.dir, owner, |chown_to| {
        let dir = Dir::open(&target.dir)?;
        let mut tmp = TempFile::create(&dir, &target.name)?;
        tmp.seal(chown_to)?;
        tmp.rename_over(&target.name)?;
        dir.sync()?;
        tmp.file.try_clone()
    })
}

/// Whether `path` names standard output (`-`, `/dev/stdout`): a command that also prints
/// text there sends the text to standard error instead.
pub fn is_stdout(path: &Path) -> bool {
    matches!(
        Destination::of(path),
        Ok(Destination::Stream(Stream::Stdout))
    )
}

/// How a message names an output: its path, or "standard output" for `-`.
pub fn display_name(path: &Path) -> String {
    match Destination::of(path) {
        Ok(Destination::Stream(Stream::Stdout)) => "standard output".to_owned(),
        Ok(Destination::Stream(Stream::Stderr)) => "standard error".to_owned(),
        _ => path.display().to_string(),
    }
}

/// Sync what [`create_streaming`] returned, where syncing means something: a regular
/// file is fsynced; a pipe, a device or a socket (which reject fsync) is left as it is.
pub fn sync_output(file: &File) -> io::Result<()> {
    if file.metadata()?.is_file() {
        file.sync_all()
    } else {
        Ok(())
    }
}

/// Standard output or error, named `-` (standard output), `/dev/stdout` or `/dev/stderr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn fd(self) -> libc::c_int {
        match self {
            Stream::Stdout => libc::STDOUT_FILENO,
            Stream::Stderr => libc::STDERR_FILENO,
        }
    }

    /// The stream as a file of its own (a duplicate of its descriptor).
    fn dup(self) -> io::Result<File> {
        // SAFETY: F_DUPFD_CLOEXEC on a descriptor number; a closed one fails with EBADF.
        let fd = unsafe { libc::fcntl(self.fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd we own.
        Ok(unsafe { File::from_raw_fd(fd) })
    }
}

/// The kind of existing file an output is written into in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InPlace {
    /// A character or block device, or a FIFO: opened for writing.
    Opened,
    /// A Unix socket: connected to.
    Socket,
}

/// What an output path names, read without following a link at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Destination {
    Stream(Stream),
    /// An existing device node, FIFO or socket: written in place, never replaced.
    InPlace(InPlace),
    /// Nothing, or a regular file: a new file is renamed over the name.
    Replace,
}

impl Destination {
    fn of(path: &Path) -> io::Result<Destination> {
        use std::os::unix::fs::FileTypeExt;
        match path.as_os_str().as_bytes() {
            b"-" | b"/dev/stdout" => return Ok(Destination::Stream(Stream::Stdout)),
            b"/dev/stderr" => return Ok(Destination::Stream(Stream::Stderr)),
            _ => {}
        }
        let meta = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Destination::Replace),
            // The directory cannot be read (or is missing): the write says why.
            Err(_) => return Ok(Destination::Replace),
        };
        let kind = meta.file_type();
        if kind.is_file() {
            Ok(Destination::Replace)
        } else if kind.is_dir() {
            Err(io::Error::other("it is a directory"))
        } else if kind.is_symlink() {
            Err(io::Error::other(
                "it is a symbolic link, which outputs never follow or replace (name the file it points to)",
            ))
        } else if kind.is_socket() {
            Ok(Destination::InPlace(InPlace::Socket))
        } else {
            // Character and block devices and FIFOs.
            Ok(Destination::InPlace(InPlace::Opened))
        }
    }
}

/// Write all of `bytes` to standard output or error, through std's handle (in order
/// with everything else printed there). A reader that went away (a closed pipe, `|
/// head`) is not an error: what it read was whole up to there.
fn write_stream(stream: Stream, bytes: &[u8]) -> io::Result<()> {
    let written = match stream {
        Stream::Stdout => {
            let mut out = io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
        Stream::Stderr => {
            let mut err = io::stderr().lock();
            err.write_all(bytes).and_then(|()| err.flush())
        }
    };
    match written {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// [`write_stream`] to standard output: every command's printed text and bytes.
pub fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    write_stream(Stream::Stdout, bytes)
}

/// [`write_stream`] to standard error.
pub fn write_stderr(bytes: &[u8]) -> io::Result<()> {
    write_stream(Stream::Stderr, bytes)
}

/// Open an existing device node, FIFO or socket at `path` for writing, in place: the
/// name is never replaced, a link at it is never followed, and as root for a user the
/// user's own rights decide (a device is not a new file that root could hand over).
fn open_in_place(path: &Path, kind: InPlace, owner: Option<&OutputOwner>) -> io::Result<File> {
    let target = Target::of(path)?;
    as_user_in_place(owner, || {
        let dir = Dir::open(&target.dir)?;
        let name = cstring(&target.name)?;
        let file = match kind {
            InPlace::Opened => dir.open_existing(&name)?,
            InPlace::Socket => dir.connect_existing(&name)?,
        };
        // Something else took the name between the look and the open: a regular file
        // or a directory is never written in place.
        let meta = file.metadata()?;
        if meta.is_file() || meta.is_dir() {
            return Err(io::Error::other(
                "it changed from a device, FIFO or socket while being opened",
            ));
        }
        Ok(file)
    })
}

/// Run `f` with the invoking user's file rights (on a short-lived thread, as
/// [`as_writer`] does) when there is one, else with the process's own.
fn as_user_in_place<T: Send>(
    owner: Option<&OutputOwner>,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    match owner {
        None => f(),
        Some(owner) => std::thread::scope(|s| {
            s.spawn(|| {
                become_for_files(owner)?;
                f()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("opening the output panicked")))
        }),
    }
}

/// An output path split into its directory and file name.
struct Target {
    dir: PathBuf,
    name: OsString,
}

impl Target {
    fn of(path: &Path) -> io::Result<Target> {
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name")
        })?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok(Target {
            dir,
            name: name.to_os_string(),
        })
    }
}

/// Run `f` with the rights an output in `dir` is written with: as the invoking user when
/// someone other than root could change `dir` (on a thread with the user's filesystem
/// ids), else with the process's own. `f` is told whom to `fchown` the new file to.
fn as_writer<T: Send>(
    dir: &Path,
    owner: Option<&OutputOwner>,
    f: impl FnOnce(Option<&OutputOwner>) -> io::Result<T> + Send,
) -> io::Result<T> {
    match owner {
        None => f(None),
        Some(owner) if only_root_can_change(dir) => f(Some(owner)),
        Some(owner) => std::thread::scope(|s| {
            s.spawn(|| {
                become_for_files(owner)?;
                // Created as the user already: nothing to chown.
                f(None)
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("writing the output panicked")))
        }),
    }
}

/// Give this thread (only) the user's filesystem identity: groups, fsgid, fsuid.
fn become_for_files(owner: &OutputOwner) -> io::Result<()> {
    // SAFETY: raw syscalls on this thread's credentials; groups outlives the call.
    unsafe {
        let groups: &[libc::gid_t] = &owner.groups;
        if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        libc::syscall(libc::SYS_setfsgid, owner.gid);
        libc::syscall(libc::SYS_setfsuid, owner.uid);
        // Both return the previous id and never fail; an invalid id (-1) asks for it.
        let fsgid = libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32;
        let fsuid = libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32;
        if (fsuid, fsgid) != (owner.uid, owner.gid) {
            return Err(io::Error::other(format!(
                "cannot take the file rights of uid {} gid {}",
                owner.uid, owner.gid
            )));
        }
    }
    Ok(())
}

/// Whether only root can change what `dir` names and what is in it: the directory and
/// every directory above it (as written, and as resolved) are root's and not writable by
/// group or others; in a root-owned sticky directory (/tmp) an entry owned by root is
/// also fixed. Symlink targets that go up (`..`) through a user's directory are not
/// followed step by step: a root-owned symlink pointing into a user's tree is assumed
/// not to exist.
fn only_root_can_change(dir: &Path) -> bool {
    let Ok(as_written) = std::path::absolute(dir) else {
        return false;
    };
    let Ok(resolved) = std::fs::canonicalize(&as_written) else {
        return false;
    };
    chain_only_root_can_change(&as_written) && chain_only_root_can_change(&resolved)
}

fn chain_only_root_can_change(dir: &Path) -> bool {
    let roots_alone = |m: &std::fs::Metadata| m.uid() == 0 && m.mode() & 0o022 == 0;
    if !std::fs::metadata(dir).is_ok_and(|m| roots_alone(&m)) {
        return false;
    }
    let mut child = dir;
    while let Some(parent) = child.parent() {
        let (Ok(p), Ok(c)) = (std::fs::metadata(parent), std::fs::symlink_metadata(child)) else {
            return false;
        };
        let sticky = p.mode() & libc::S_ISVTX != 0;
        if !(roots_alone(&p) || (p.uid() == 0 && sticky && c.uid() == 0)) {
            return false;
        }
        child = parent;
    }
    true
}

/// A directory opened once; every operation on its entries goes through the fd.
struct Dir {
    fd: OwnedFd,
    /// Opened `O_PATH` (no read permission): it cannot be fsynced.
    path_only: bool,
}

impl Dir {
    fn open(path: &Path) -> io::Result<Dir> {
        let c = cstring(path.as_os_str())?;
        let open = |flags| {
            // SAFETY: c is NUL-terminated.
            let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_DIRECTORY | libc::O_CLOEXEC) };
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                // SAFETY: a new fd we own.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            }
        };
        match open(libc::O_RDONLY) {
            Ok(fd) => Ok(Dir {
                fd,
                path_only: false,
            }),
            // A directory one may write but not list (mode 0333).
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => Ok(Dir {
                fd: open(libc::O_PATH)?,
                path_only: true,
            }),
            Err(e) => Err(e),
        }
    }

    fn sync(&self) -> io::Result<()> {
        if self.path_only {
            return Ok(());
        }
        // SAFETY: our fd.
        if unsafe { libc::fsync(self.fd.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Open the existing entry `name` for writing, without following a link or
    /// creating anything (a FIFO's open waits for its reader, as the shell's would).
    fn open_existing(&self, name: &CString) -> io::Result<File> {
        let flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_CLOEXEC;
        // SAFETY: name is NUL-terminated.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), name.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd we own.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Connect to the existing Unix socket `name` (stream, else seqpacket). The socket
    /// is reached through an `O_PATH` descriptor of the entry itself, so a link swapped
    /// in after the look is refused rather than followed.
    fn connect_existing(&self, name: &CString) -> io::Result<File> {
        let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: name is NUL-terminated.
        let raw = unsafe { libc::openat(self.fd.as_raw_fd(), name.as_ptr(), flags) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd we own.
        let entry = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero stat is valid; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: our fd, st is writable.
        if unsafe { libc::fstat(entry.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(io::Error::other("it is no longer a socket"));
        }
        let via = format!("/proc/self/fd/{}", entry.as_raw_fd());
        // SAFETY: an all-zero sockaddr_un is valid.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (dst, src) in addr.sun_path.iter_mut().zip(via.as_bytes()) {
            *dst = *src as libc::c_char;
        }
        let mut last = io::Error::other("no socket type to connect with");
        for kind in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET] {
            // SAFETY: plain socket creation.
            let sock = unsafe { libc::socket(libc::AF_UNIX, kind | libc::SOCK_CLOEXEC, 0) };
            if sock < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a new fd we own.
            let sock = unsafe { OwnedFd::from_raw_fd(sock) };
            // SAFETY: addr is a valid sockaddr_un of the given size.
            let rc = unsafe {
                libc::connect(
                    sock.as_raw_fd(),
                    (&raw const addr).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                return Ok(File::from(sock));
            }
            last = io::Error::last_os_error();
            if last.raw_os_error() != Some(libc::EPROTOTYPE) {
                break;
            }
        }
        Err(last)
    }

    /// Whether this thread's file rights may write the entry `name` (not followed).
    fn check_write_access(&self, name: &CString) -> io::Result<()> {
        let flags = libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW;
        // SAFETY: name is NUL-terminated.
        if unsafe { libc::faccessat(self.fd.as_raw_fd(), name.as_ptr(), libc::W_OK, flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn unlink(&self, name: &CString) -> io::Result<()> {
        // SAFETY: name is NUL-terminated.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A new file under a random name in a [`Dir`]; removed on drop unless renamed.
struct TempFile<'d> {
    dir: &'d Dir,
    name: CString,
    file: File,
    renamed: bool,
}

impl<'d> TempFile<'d> {
    fn create(dir: &'d Dir, final_name: &OsStr) -> io::Result<TempFile<'d>> {
        // Room for the prefix and suffix within NAME_MAX (255).
        let stem = &final_name.as_bytes()[..final_name.len().min(200)];
        let mut last = io::Error::other("no free temporary name");
        for _ in 0..16 {
            let mut name = b".".to_vec();
            name.extend_from_slice(stem);
            name.extend_from_slice(format!(".kk-{:016x}", random_u64()).as_bytes());
            let name = CString::new(name)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the name"))?;
            let flags =
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            // SAFETY: name is NUL-terminated; the mode argument is read for O_CREAT.
            let fd = unsafe { libc::openat(dir.fd.as_raw_fd(), name.as_ptr(), flags, 0o600) };
            if fd >= 0 {
                return Ok(TempFile {
                    dir,
                    name,
                    // SAFETY: a new fd we own.
                    file: unsafe { File::from_raw_fd(fd) },
                    renamed: false,
                });
            }
            last = io::Error::last_os_error();
            if last.raw_os_error() != Some(libc::EEXIST) {
                break;
            }
        }
        Err(last)
    }

    /// The final mode (0666 minus the umask) and, if asked, the owner; through the fd.
    fn seal(&mut self, chown_to: Option<&OutputOwner>) -> io::Result<()> {
        let fd = self.file.as_raw_fd();
        if let Some(owner) = chown_to {
            // SAFETY: our fd.
            if unsafe { libc::fchown(fd, owner.uid, owner.gid) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: our fd.
        if unsafe { libc::fchmod(fd, 0o666 & !umask()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Rename over `final_name` in the same directory (replacing whatever entry is there,
    /// a symlink included, without following it).
    fn rename_over(&mut self, final_name: &OsStr) -> io::Result<()> {
        let to = cstring(final_name)?;
        let dirfd = self.dir.fd.as_raw_fd();
        // SAFETY: both names are NUL-terminated.
        if unsafe { libc::renameat(dirfd, self.name.as_ptr(), dirfd, to.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.renamed = true;
        Ok(())
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = self.dir.unlink(&self.name);
        }
    }
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))
}

/// The process umask, read without changing it (umask(2) can only set it, which would
/// race with other threads creating files).
fn umask() -> libc::mode_t {
    static UMASK: OnceLock<libc::mode_t> = OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .and_then(|v| libc::mode_t::from_str_radix(v.trim(), 8).ok())
            })
            .unwrap_or(0o022)
    })
}

/// 64 random bits from the kernel (the clock and a counter if getrandom fails).
fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: buf is writable for its length.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == buf.len() as isize {
        return u64::from_ne_bytes(buf);
    }
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    nanos ^ (u64::from(std::process::id()) << 32) ^ count.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    const NOBODY: u32 = 65534;

    fn nobody() -> OutputOwner {
        OutputOwner {
            uid: NOBODY,
            gid: NOBODY,
            groups: vec![NOBODY],
        }
    }

    fn is_root() -> bool {
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A root-only file somewhere else, which no output may touch.
    fn victim() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("root-only");
        std::fs::write(&path, b"secret").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        (dir, path)
    }

    fn assert_untouched(victim: &Path) {
        let meta = std::fs::metadata(victim).unwrap();
        assert_eq!(std::fs::read(victim).unwrap(), b"secret");
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    }

    #[test]
    fn writes_replace_the_file_and_leave_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        write_file_for(&path, b"one", None).unwrap();
        write_file_for(&path, b"two", None).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(entries(dir.path()), ["out.json"]);
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask());
    }

    #[test]
    fn a_symlink_at_the_final_name_is_refused_neither_followed_nor_replaced() {
        let (_v, victim) = victim();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        symlink(&victim, &path).unwrap();
        let err = write_file_for(&path, b"bundle", None).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let err = check_writable_for(&path, None).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let err = create_streaming_for(&path, None).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_untouched(&victim);
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(entries(dir.path()), ["out.json"]);
    }

    fn mkfifo(path: &Path) {
        let c = cstring(path.as_os_str()).unwrap();
        // SAFETY: c is NUL-terminated.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    fn file_type(path: &Path) -> std::fs::FileType {
        std::fs::symlink_metadata(path).unwrap().file_type()
    }

    #[test]
    fn a_fifo_is_written_in_place_and_its_reader_gets_the_bytes() {
        use std::io::Read;
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        mkfifo(&fifo);
        let before = std::fs::symlink_metadata(&fifo).unwrap();
        check_writable_for(&fifo, None).unwrap();
        for write in [
            |p: &Path| write_file_for(p, b"bundle", None),
            |p: &Path| {
                let mut f = create_streaming_for(p, None)?;
                f.write_all(b"bundle")?;
                sync_output(&f)?;
                remove_created(p, &f)
            },
        ] {
            let reader = {
                let fifo = fifo.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    File::open(fifo).unwrap().read_to_end(&mut got).unwrap();
                    got
                })
            };
            write(&fifo).unwrap();
            assert_eq!(reader.join().unwrap(), b"bundle");
            let after = std::fs::symlink_metadata(&fifo).unwrap();
            assert!(after.file_type().is_fifo());
            assert_eq!((after.ino(), after.mode()), (before.ino(), before.mode()));
        }
        assert_eq!(entries(dir.path()), ["pipe"]);
    }

    #[test]
    fn a_socket_is_connected_to_and_written() {
        use std::io::Read;
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let reader = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            conn.read_to_end(&mut got).unwrap();
            got
        });
        check_writable_for(&path, None).unwrap();
        write_file_for(&path, b"bundle", None).unwrap();
        assert_eq!(reader.join().unwrap(), b"bundle");
        assert!(file_type(&path).is_socket());
    }

    #[test]
    fn a_device_node_is_written_in_place_never_replaced() {
        use std::os::unix::fs::FileTypeExt;
        if !is_root() {
            // CI runs as root: there, this test must run.
            assert!(
                std::env::var_os("CI").is_none(),
                "mknod needs root, and CI is root"
            );
            eprintln!("skipped a_device_node_is_written_in_place_never_replaced: mknod needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("null");
        let c = cstring(node.as_os_str()).unwrap();
        // A copy of /dev/null's node (1, 3): writes to it go nowhere.
        // SAFETY: c is NUL-terminated.
        let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        let before = std::fs::symlink_metadata(&node).unwrap();
        check_writable_for(&node, None).unwrap();
        write_file_for(&node, b"bundle", None).unwrap();
        let mut f = create_streaming_for(&node, None).unwrap();
        f.write_all(b"header").unwrap();
        sync_output(&f).unwrap();
        remove_created(&node, &f).unwrap();
        let after = std::fs::symlink_metadata(&node).unwrap();
        assert!(after.file_type().is_char_device());
        assert_eq!(
            (after.ino(), after.mode(), after.rdev(), after.uid()),
            (before.ino(), before.mode(), before.rdev(), before.uid())
        );
        assert_eq!(entries(dir.path()), ["null"]);
        // As a user with no rights on it: refused, not replaced.
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = write_file_for(&node, b"x", Some(&nobody())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert!(check_writable_for(&node, Some(&nobody())).is_err());
        assert!(file_type(&node).is_char_device());
    }

    #[test]
    fn a_dash_names_standard_output_and_a_directory_is_refused() {
        assert_eq!(
            Destination::of(Path::new("-")).unwrap(),
            Destination::Stream(Stream::Stdout)
        );
        assert_eq!(
            Destination::of(Path::new("/dev/stderr")).unwrap(),
            Destination::Stream(Stream::Stderr)
        );
        check_writable_for(Path::new("-"), None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = write_file_for(dir.path(), b"x", None).unwrap_err();
        assert_eq!(err.to_string(), "it is a directory");
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn failures_name_no_file_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write_file_for(&dir.path().join("no-dir/x"), b"x", None).is_err());
        // Renaming a file over a directory fails; the temporary is removed.
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert!(write_file_for(&dir.path().join("sub"), b"x", None).is_err());
        assert_eq!(entries(dir.path()), ["sub"]);
        let err = check_writable_for(&dir.path().join("sub"), None).unwrap_err();
        assert!(err.to_string().contains("directory"), "{err}");
        check_writable_for(&dir.path().join("probe.json"), None).unwrap();
        assert_eq!(entries(dir.path()), ["sub"]);
        assert!(Target::of(Path::new("/")).is_err());
    }

    #[test]
    fn a_stream_is_in_place_at_once_and_removed_only_if_still_ours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.kkr");
        let f = create_streaming_for(&path, None).unwrap();
        assert_eq!(entries(dir.path()), ["s.kkr"]);
        // Something else took the name: it stays.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"other").unwrap();
        remove_created(&path, &f).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"other");
        let f = create_streaming_for(&path, None).unwrap();
        remove_created(&path, &f).unwrap();
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn who_can_change_a_directory() {
        if !is_root() {
            return crate::test_skip::required("who_can_change_a_directory", "needs root");
        }
        // A root-owned 0700 directory in /tmp (sticky): only root can change it.
        let dir = tempfile::tempdir().unwrap();
        assert!(only_root_can_change(dir.path()));
        // The user's directory, and a root-owned one below it (the user can swap it).
        let user_dir = dir.path().join("home");
        std::fs::create_dir(&user_dir).unwrap();
        std::os::unix::fs::chown(&user_dir, Some(NOBODY), Some(NOBODY)).unwrap();
        assert!(!only_root_can_change(&user_dir));
        let below = user_dir.join("sub");
        std::fs::create_dir(&below).unwrap();
        assert!(!only_root_can_change(&below));
        // A root symlink to the user's directory, and a world-writable directory.
        let link = dir.path().join("link");
        symlink(&user_dir, &link).unwrap();
        assert!(!only_root_can_change(&link));
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(!only_root_can_change(&open));
    }

    #[test]
    fn for_the_invoking_user_a_directory_they_control_is_written_as_them() {
        if !is_root() {
            let test = "for_the_invoking_user_a_directory_they_control_is_written_as_them";
            return crate::test_skip::required(test, "needs root");
        }
        let (_v, victim) = victim();
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let user_dir = dir.path().join("home");
        std::fs::create_dir(&user_dir).unwrap();
        std::os::unix::fs::chown(&user_dir, Some(NOBODY), Some(NOBODY)).unwrap();
        let owner = nobody();

        let path = user_dir.join("out.json");
        symlink(&victim, &path).unwrap();
        assert!(write_file_for(&path, b"bundle", Some(&owner)).is_err());
        assert_untouched(&victim);
        std::fs::remove_file(&path).unwrap();
        write_file_for(&path, b"bundle", Some(&owner)).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file());
        assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
        let kkr = create_streaming_for(&user_dir.join("out.kkr"), Some(&owner)).unwrap();
        assert_eq!(kkr.metadata().unwrap().uid(), NOBODY);
        check_writable_for(&user_dir.join("probe"), Some(&owner)).unwrap();
        assert_eq!(entries(&user_dir), ["out.json", "out.kkr"]);

        // A root-owned directory inside the user's: written with the user's rights,
        // which do not reach it.
        let below = user_dir.join("sub");
        std::fs::create_dir(&below).unwrap();
        let err = write_file_for(&below.join("x"), b"x", Some(&owner)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert!(check_writable_for(&below.join("x"), Some(&owner)).is_err());
        assert!(entries(&below).is_empty());

        // A directory only root can change: written as root, then given to the user.
        let path = dir.path().join("root.json");
        write_file_for(&path, b"bundle", Some(&owner)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
        // This thread kept root's rights.
        // SAFETY: as above, -1 only asks.
        assert_eq!(unsafe { libc::syscall(libc::SYS_setfsuid, u32::MAX) }, 0);
    }
}
