//! io_stress: N × (`pwrite` of one block + `fsync`) to a fresh file, so the thread
//! mostly waits for the storage device (io_wait). With `--direct` the file is opened
//! `O_DIRECT | O_DSYNC` and each `pwrite` itself waits for the device (no fsync).
//!
//! The default directory is /var/tmp, which is on disk on most systems (/tmp is often
//! a tmpfs, where fsync returns at once). The result says the filesystem type so a test
//! can tell when there was no device to wait for.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Instant;

use crate::args::Args;
use crate::report::Report;

const TMPFS_MAGIC: i64 = 0x0102_1994;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 200)?;
    let block = args.usize("block-size", 4096)?;
    let dir = args.string("dir")?.map(PathBuf::from);
    let direct = args.flag("direct")?;
    if block == 0 || (direct && block % 4096 != 0) {
        let msg = "--block-size must be > 0 (a multiple of 4096 with --direct)";
        return Err(crate::args::UsageError(msg.into()).into());
    }
    let start = crate::gate(args)?;

    let base = dir.unwrap_or_else(|| {
        let var_tmp = PathBuf::from("/var/tmp");
        if var_tmp.is_dir() {
            var_tmp
        } else {
            std::env::temp_dir()
        }
    });
    let work = base.join(format!("kk-workload-io-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;
    let result = run_in(&work, count, block, direct, start);
    let _ = std::fs::remove_dir_all(&work);
    Ok(result?)
}

fn run_in(
    work: &std::path::Path,
    count: u64,
    block: usize,
    direct: bool,
    start: crate::start::Start,
) -> Result<(), String> {
    let path = work.join("data");
    let cpath = CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    let mut flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
    if direct {
        flags |= libc::O_DIRECT | libc::O_DSYNC;
    }
    // SAFETY: valid NUL-terminated path.
    let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o600) };
    if fd < 0 {
        return Err(crate::os_err(&format!("open {}", path.display())));
    }
    let fs_type = fs_type(fd);

    // O_DIRECT needs an aligned buffer: over-allocate and start at a 4096 boundary.
    let mut storage = vec![0xa5u8; block + 4096];
    let offset = storage.as_ptr().align_offset(4096);
    let buf = &mut storage[offset..offset + block];

    start.wait()?;
    let t0 = Instant::now();
    let (mut writes, mut fsyncs) = (0u64, 0u64);
    let mut failure = None;
    for i in 0..count {
        // Distinct content per block so nothing can be deduplicated.
        buf[..8].copy_from_slice(&i.to_le_bytes());
        // SAFETY: buf is valid for `block` bytes.
        let n = unsafe {
            libc::pwrite(
                fd,
                buf.as_ptr().cast(),
                block,
                (i as usize * block) as libc::off_t,
            )
        };
        if n != block as isize {
            failure = Some(crate::os_err("pwrite"));
            break;
        }
        writes += 1;
        if !direct {
            // SAFETY: fd is open.
            if unsafe { libc::fsync(fd) } != 0 {
                failure = Some(crate::os_err("fsync"));
                break;
            }
            fsyncs += 1;
        }
    }
    let elapsed = crate::elapsed_ns(t0);
    // SAFETY: fd is open and not used afterwards.
    unsafe { libc::close(fd) };
    if let Some(e) = failure {
        return Err(e);
    }

    Report::new("io_stress")
        .u64("writes", writes)
        .u64("fsyncs", fsyncs)
        .u64("block_size", block as u64)
        .u64("bytes", writes * block as u64)
        .bool("direct", direct)
        .str("fs_type", &format!("0x{fs_type:x}"))
        .bool("tmpfs", fs_type == TMPFS_MAGIC)
        .u64("elapsed_ns", elapsed)
        .print();
    Ok(())
}

fn fs_type(fd: libc::c_int) -> i64 {
    // SAFETY: statfs is plain old data; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return 0;
    }
    #[allow(
        clippy::unnecessary_cast,
        reason = "f_type's width differs between architectures"
    )]
    {
        st.f_type as i64
    }
}

/// shared_write: T threads write blocks through one shared file descriptor (std's
/// `File`, so glibc's `write`) to a file on tmpfs. No device is involved; the threads
/// wait for each other on the file's position lock (`fdget_pos`: the fd table is
/// shared, so the kernel takes `f_pos_lock`), an uninterruptible sleep without
/// `in_iowait`.
pub fn run_shared_write(args: &mut Args) -> Result<(), crate::Fail> {
    use std::io::Write as _;
    let threads = args.u64("threads", 2)?.max(1);
    let count = args.u64("count", 2000)?;
    let block = args.usize("block-size", 65536)?.max(1);
    let dir = args.string("dir")?.map(PathBuf::from);
    let start = crate::gate(args)?;
    let base = dir.unwrap_or_else(|| PathBuf::from("/dev/shm"));
    let path = base.join(format!("kk-workload-shared-{}", std::process::id()));
    let file =
        std::fs::File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    let fs_type = {
        use std::os::fd::AsRawFd as _;
        fs_type(file.as_raw_fd())
    };
    start.wait()?;
    let t0 = Instant::now();
    let results: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let file = &file;
                s.spawn(move || {
                    let buf = vec![0x5au8; block];
                    for i in 0..count {
                        // Rewind now and then so the tmpfs file stays small.
                        if i % 64 == 0 {
                            use std::io::Seek as _;
                            let mut f = file;
                            f.seek(std::io::SeekFrom::Start(0))
                                .map_err(|e| format!("seek: {e}"))?;
                        }
                        let mut f = file;
                        f.write_all(&buf).map_err(|e| format!("write: {e}"))?;
                    }
                    Ok(count)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    let mut writes = 0;
    for r in results {
        writes += r?;
    }
    Report::new("shared_write")
        .u64("threads", threads)
        .u64("writes", writes)
        .u64("block_size", block as u64)
        .bool("tmpfs", fs_type == TMPFS_MAGIC)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    Ok(())
}
