//! Inputs that would exhaust memory or hang a reader: devices, FIFOs and directories
//! in place of a bundle, fixture or recording, and small recordings whose zstd chunks
//! decompress to gigabytes (fixtures/recordings/bombs, built by its make.py). Each
//! gives a one-line error and exit 2, quickly and with a small peak RSS.

#![cfg(target_os = "linux")]

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::{fixtures, kk_path};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Far above what decoding these small inputs needs, far below what they decoded to.
const PEAK_RSS_LIMIT_KIB: i64 = 200 * 1024;

struct Ran {
    code: Option<i32>,
    stderr: String,
    max_rss_kib: i64,
}

/// Run kernelkite with `args` under a 2 GiB address-space limit (so a regression fails
/// fast instead of swapping a shared machine), killing it after 20 s; its exit code,
/// stderr and peak RSS (from wait4).
fn run(args: &[&std::ffi::OsStr]) -> Ran {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let mut cmd = Command::new(kk_path());
    cmd.args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    // SAFETY: setrlimit is async-signal-safe and only affects the child.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    #[allow(
        clippy::zombie_processes,
        reason = "reaped below with wait4, for its rusage"
    )]
    let pid = cmd.spawn().unwrap().id() as i32;
    let started = Instant::now();
    let mut status = 0;
    // SAFETY: rusage is filled by wait4 for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if rc == pid {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            // SAFETY: our own unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::wait4(pid, &mut status, 0, &mut ru);
            }
            panic!("kernelkite {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ran {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
        max_rss_kib: ru.ru_maxrss,
    }
}

fn assert_one_line_error(ran: &Ran, what: &str, mentions: &str) {
    assert_eq!(ran.code, Some(2), "{what}: {}", ran.stderr);
    assert_eq!(
        ran.stderr.trim_end().lines().count(),
        1,
        "{what}: {}",
        ran.stderr
    );
    assert!(ran.stderr.contains(mentions), "{what}: {}", ran.stderr);
    assert!(
        ran.max_rss_kib < PEAK_RSS_LIMIT_KIB,
        "{what}: peak RSS {} KiB",
        ran.max_rss_kib
    );
}

#[test]
fn small_recordings_that_decompress_to_gigabytes_are_refused() {
    for name in ["one-chunk.kkr", "many-chunks.kkr"] {
        let kkr = fixtures().join("recordings/bombs").join(name);
        let len = std::fs::metadata(&kkr).unwrap().len();
        assert!(len < 64 * 1024, "{name} is {len} bytes");
        for args in [
            vec!["replay".as_ref(), kkr.as_os_str(), "out.json".as_ref()],
            vec!["summary".as_ref(), kkr.as_os_str()],
            vec!["compare".as_ref(), kkr.as_os_str(), kkr.as_os_str()],
        ] {
            let ran = run(&args);
            assert_one_line_error(&ran, &format!("{args:?}"), "may hold");
        }
    }
}

#[test]
fn devices_fifos_and_directories_are_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: c is NUL-terminated.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let fifo_kkr = dir.path().join("fifo.kkr");
    let c = std::ffi::CString::new(fifo_kkr.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let good = dir.path().join("good.json");
    let made = Command::new(kk_path())
        .arg("replay")
        .arg(fixtures().join("api-server-ebpf.json"))
        .arg(&good)
        .status()
        .unwrap();
    assert!(made.success());
    for (input, what) in [
        (Path::new("/dev/zero"), "a character device"),
        (fifo.as_path(), "a FIFO"),
        (fifo_kkr.as_path(), "a FIFO"),
        (dir.path(), "a directory"),
    ] {
        let i = input.as_os_str();
        for args in [
            vec!["summary".as_ref(), i],
            vec!["tree".as_ref(), i],
            vec!["compare".as_ref(), good.as_os_str(), i],
            vec!["report".as_ref(), i, "-o".as_ref(), "r.html".as_ref()],
            vec!["export".as_ref(), i, "--format".as_ref(), "json".as_ref()],
            vec!["stacks".as_ref(), i],
            vec!["replay".as_ref(), i, "out.json".as_ref()],
        ] {
            let ran = run(&args);
            assert_one_line_error(&ran, &format!("{args:?}"), what);
        }
    }
}
