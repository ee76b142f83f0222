//! The sampler's one door to the kernel: reads of files under a procfs root (normally
//! `/proc`, a synthetic tree in tests). Paths are opened relative to a directory fd held
//! open for the sampler's life, and per-process files stay open across ticks, so reading
//! one costs a single pread(2) into a reused buffer.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::pidmap::PidMap;

/// An open procfs root.
#[derive(Debug)]
pub(crate) struct ProcDir {
    path: PathBuf,
    fd: OwnedFd,
    /// Reused NUL-terminated relative path.
    name: Vec<u8>,
    kept: PidMap<KeptKey, KeptFile>,
    /// How many descriptors `kept` may hold.
    kept_budget: usize,
    tick: u64,
}

/// A per-process or per-thread file that [`ProcDir::read_kept`] keeps open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TaskFile {
    /// /proc/<pid>/stat
    Stat,
    /// /proc/<pid>/io
    Io,
    /// /proc/<pid>/task/<tid>/stat
    TaskStat,
    /// /proc/<pid>/task/<tid>/schedstat
    Schedstat,
    /// /proc/<pid>/task/<tid>/syscall
    Syscall,
    /// /proc/loadavg (not per process: use pid 0)
    LoadAvg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KeptKey {
    pub pid: i32,
    /// The thread for task files; ignored (use `pid`) for Stat and Io.
    pub tid: i32,
    pub file: TaskFile,
}

impl KeptKey {
    pub(crate) fn process(pid: i32, file: TaskFile) -> KeptKey {
        KeptKey {
            pid,
            tid: pid,
            file,
        }
    }

    pub(crate) fn thread(pid: i32, tid: i32, file: TaskFile) -> KeptKey {
        KeptKey { pid, tid, file }
    }
}

#[derive(Debug)]
struct KeptFile {
    file: File,
    dir_ino: u64,
    used_tick: u64,
}

/// Descriptors the sampler may keep: what RLIMIT_NOFILE leaves after a reserve for the
/// rest of the program, at most 1 << 16.
fn kept_budget() -> usize {
    // SAFETY: getrlimit fills the zeroed struct.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    (lim.rlim_cur as usize).saturating_sub(256).min(1 << 16)
}

/// Read a whole file from offset 0 into `buf`.
fn read_whole(file: &File, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    loop {
        // Most of these files are a few hundred bytes: start small, grow by doubling,
        // and read straight into spare capacity (no zero-filling of unused buffer).
        if buf.capacity() - buf.len() < 256 {
            buf.reserve(buf.capacity().max(512));
        }
        let spare = buf.capacity() - buf.len();
        let start = buf.len();
        // SAFETY: the destination is the vector's spare capacity, `spare` bytes long;
        // only the `n` bytes the kernel wrote are then added to its length.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf.as_mut_ptr().add(start).cast(),
                spare,
                start as libc::off_t,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        let n = n as usize;
        // SAFETY: the kernel initialized these n bytes (n <= spare).
        unsafe { buf.set_len(start + n) };
        // procfs seq files and regular files both return a short read only at the end,
        // so a short read saves the extra read(2) that would return 0.
        if n == 0 || n < spare {
            return Ok(());
        }
    }
}

impl ProcDir {
    pub(crate) fn open(path: &Path) -> io::Result<ProcDir> {
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "procfs root contains a NUL byte",
            )
        })?;
        // SAFETY: c_path is a valid NUL-terminated string; the fd is checked below.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let err = io::Error::last_os_error();
            return Err(io::Error::new(
                err.kind(),
                format!("cannot open {}: {err}", path.display()),
            ));
        }
        Ok(ProcDir {
            path: path.to_path_buf(),
            // SAFETY: fd is a freshly opened descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            name: Vec::with_capacity(64),
            kept: PidMap::default(),
            kept_budget: kept_budget(),
            tick: 0,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Read the whole file at `rel` (relative to the root) into `buf`, replacing its
    /// contents.
    pub(crate) fn read(
        &mut self,
        rel: std::fmt::Arguments<'_>,
        buf: &mut Vec<u8>,
    ) -> io::Result<()> {
        let file = self.open_at(rel, libc::O_RDONLY)?;
        read_whole(&file, buf)
    }

    /// Read at most `max` bytes of the file at `rel` (a file its process controls, such
    /// as cmdline, whose size is its to choose).
    pub(crate) fn read_at_most(
        &mut self,
        rel: std::fmt::Arguments<'_>,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> io::Result<()> {
        let file = self.open_at(rel, libc::O_RDONLY)?;
        buf.clear();
        std::io::Read::read_to_end(&mut std::io::Read::take(&file, max as u64), buf)?;
        Ok(())
    }

    /// Read one of a process's or thread's files through a descriptor kept open across
    /// ticks: one pread(2) instead of open, read and close, and no path lookup. The
    /// descriptor stays bound to the process it was opened for; once that process is
    /// gone reads fail with ESRCH and the file is reopened, which finds a process that
    /// reused the pid.
    ///
    /// `dir_ino` is the inode of /proc/<pid> in this tick's listing: a descriptor opened
    /// under another inode belongs to an earlier process with this pid (or, in a
    /// synthetic tree, to a replaced file) and is reopened.
    pub(crate) fn read_kept(
        &mut self,
        key: KeptKey,
        dir_ino: u64,
        buf: &mut Vec<u8>,
    ) -> io::Result<()> {
        if let Some(kept) = self.kept.get_mut(&key) {
            if kept.dir_ino == dir_ino {
                kept.used_tick = self.tick;
                match read_whole(&kept.file, buf) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.raw_os_error() != Some(libc::ESRCH) => return Err(e),
                    Err(_) => {}
                }
            }
            self.kept.remove(&key);
        }
        let KeptKey { pid, tid, file } = key;
        let opened = match file {
            TaskFile::Stat => self.open_at(format_args!("{pid}/stat"), libc::O_RDONLY),
            TaskFile::Io => self.open_at(format_args!("{pid}/io"), libc::O_RDONLY),
            TaskFile::TaskStat => {
                self.open_at(format_args!("{pid}/task/{tid}/stat"), libc::O_RDONLY)
            }
            TaskFile::Schedstat => {
                self.open_at(format_args!("{pid}/task/{tid}/schedstat"), libc::O_RDONLY)
            }
            TaskFile::Syscall => {
                self.open_at(format_args!("{pid}/task/{tid}/syscall"), libc::O_RDONLY)
            }
            TaskFile::LoadAvg => self.open_at(format_args!("loadavg"), libc::O_RDONLY),
        }?;
        let result = read_whole(&opened, buf);
        // Keep it only while descriptors are plentiful; past the budget this is a plain
        // open-read-close.
        if result.is_ok() && self.kept.len() < self.kept_budget {
            self.kept.insert(
                key,
                KeptFile {
                    file: opened,
                    dir_ino,
                    used_tick: self.tick,
                },
            );
        }
        result
    }

    /// Keep a descriptor open through this tick without reading it (its contents are
    /// known not to have changed).
    pub(crate) fn keep(&mut self, key: KeptKey) {
        if let Some(kept) = self.kept.get_mut(&key) {
            kept.used_tick = self.tick;
        }
    }

    /// Close the kept descriptors that were not used since the last call: their
    /// processes left the subtree or exited.
    pub(crate) fn end_tick(&mut self) {
        let tick = self.tick;
        self.kept.retain(|_, f| f.used_tick == tick);
        self.tick += 1;
        // The limit may be raised after the sampler started (see launch).
        if self.tick % 16 == 1 {
            self.kept_budget = kept_budget();
        }
    }

    /// Whether a directory exists at `rel`.
    pub(crate) fn dir_exists(&mut self, rel: std::fmt::Arguments<'_>) -> bool {
        self.open_at(rel, libc::O_RDONLY | libc::O_DIRECTORY)
            .is_ok()
    }

    /// List the numeric entries of the directory at `rel` (pids or tids) with their inode
    /// numbers, into `out` (cleared first).
    pub(crate) fn list_numeric(
        &mut self,
        rel: std::fmt::Arguments<'_>,
        out: &mut Vec<(i32, u64)>,
    ) -> io::Result<()> {
        out.clear();
        let dir = self.open_at(rel, libc::O_RDONLY | libc::O_DIRECTORY)?;
        // fdopendir takes ownership of the descriptor; closedir closes it.
        let fd = OwnedFd::from(dir);
        // SAFETY: fd is a valid open directory descriptor; ownership passes to the DIR.
        let dirp = unsafe { libc::fdopendir(fd.as_raw_fd()) };
        if dirp.is_null() {
            return Err(io::Error::last_os_error());
        }
        std::mem::forget(fd);
        let result = (|| loop {
            // SAFETY: errno is thread-local; dirp is a valid DIR* until closedir below.
            unsafe { *libc::__errno_location() = 0 };
            let entry = unsafe { libc::readdir(dirp) };
            if entry.is_null() {
                let errno = io::Error::last_os_error();
                return match errno.raw_os_error() {
                    Some(0) | None => Ok(()),
                    _ => Err(errno),
                };
            }
            // SAFETY: readdir returned a valid entry that stays valid until the next call.
            #[allow(
                clippy::useless_conversion,
                reason = "ino_t is u32 on some 32-bit targets"
            )]
            let (name, ino) = unsafe {
                let e = &*entry;
                (
                    std::ffi::CStr::from_ptr(e.d_name.as_ptr()).to_bytes(),
                    u64::from(e.d_ino),
                )
            };
            if let Some(n) = parse_decimal(name) {
                out.push((n, ino));
            }
        })();
        // SAFETY: dirp came from fdopendir and is closed exactly once.
        unsafe { libc::closedir(dirp) };
        result
    }

    fn open_at(&mut self, rel: std::fmt::Arguments<'_>, flags: libc::c_int) -> io::Result<File> {
        self.name.clear();
        self.name.write_fmt(rel)?;
        self.name.push(0);
        // SAFETY: self.name is NUL-terminated (pushed above) and the root fd is open.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                self.name.as_ptr().cast(),
                flags | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a freshly opened descriptor nobody else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }
}

/// A pid-like directory name: ASCII digits only, fits an i32, positive.
fn parse_decimal(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 10 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(name)
        .ok()?
        .parse::<i32>()
        .ok()
        .filter(|&n| n > 0)
}

/// Whether an error means the process or thread is gone (rather than unreadable).
pub(crate) fn is_gone(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ESRCH) | Some(libc::ENOTDIR)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_files_follow_content_identity_and_budget() {
        let dir = tempfile::tempdir().unwrap();
        for pid in [10, 11, 12] {
            std::fs::create_dir(dir.path().join(pid.to_string())).unwrap();
            std::fs::write(dir.path().join(format!("{pid}/stat")), format!("v1 {pid}")).unwrap();
        }
        let mut d = ProcDir::open(dir.path()).unwrap();
        d.kept_budget = 2;
        let mut buf = Vec::new();
        for pid in [10, 11, 12] {
            d.read_kept(KeptKey::process(pid, TaskFile::Stat), 1, &mut buf)
                .unwrap();
            assert_eq!(buf, format!("v1 {pid}").as_bytes());
        }
        // Past the budget nothing more is kept, but every read still works.
        assert_eq!(d.kept.len(), 2);
        // In-place updates are seen through kept files.
        for pid in [10, 11, 12] {
            std::fs::write(dir.path().join(format!("{pid}/stat")), format!("v2 {pid}")).unwrap();
            d.read_kept(KeptKey::process(pid, TaskFile::Stat), 1, &mut buf)
                .unwrap();
            assert_eq!(buf, format!("v2 {pid}").as_bytes());
        }
        // Another directory inode (another process with the pid) means reopening.
        std::fs::remove_dir_all(dir.path().join("10")).unwrap();
        std::fs::create_dir(dir.path().join("10")).unwrap();
        std::fs::write(dir.path().join("10/stat"), "reused").unwrap();
        d.read_kept(KeptKey::process(10, TaskFile::Stat), 2, &mut buf)
            .unwrap();
        assert_eq!(buf, b"reused");
        // Files not used during a tick are closed at its end.
        d.end_tick();
        d.read_kept(KeptKey::process(11, TaskFile::Stat), 1, &mut buf)
            .unwrap();
        d.end_tick();
        assert_eq!(d.kept.keys().map(|k| k.pid).collect::<Vec<_>>(), [11]);
    }

    #[test]
    fn decimal_names_only() {
        assert_eq!(parse_decimal(b"123"), Some(123));
        assert_eq!(parse_decimal(b"self"), None);
        assert_eq!(parse_decimal(b"12a"), None);
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"0"), None);
        assert_eq!(parse_decimal(b"99999999999"), None);
    }

    #[test]
    fn reads_files_larger_than_one_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("big"), &big).unwrap();
        std::fs::write(dir.path().join("small"), b"abc").unwrap();
        let mut proc_dir = ProcDir::open(dir.path()).unwrap();
        let mut buf = Vec::new();
        proc_dir.read(format_args!("big"), &mut buf).unwrap();
        assert_eq!(buf, big);
        proc_dir.read(format_args!("small"), &mut buf).unwrap();
        assert_eq!(buf, b"abc");
        let err = proc_dir
            .read(format_args!("missing"), &mut buf)
            .unwrap_err();
        assert!(is_gone(&err));
    }
}
