//! sleep_stress: the main thread blocks in syscalls that wait for time or for another
//! thread, never for a device or a lock (syscall_blocked):
//! 1. `--nanosleeps N` × `nanosleep(--sleep-ms)`, after one short
//!    `nanosleep(--first-sleep-us)` when that is given;
//! 2. `--reads R` × a blocking 1-byte `read` on a pipe whose writer thread (started
//!    after step 1) sleeps `--delay-ms` before each 1-byte `write`.
//!
//! Exact syscall counts: the process makes N + R `nanosleep`s (N in the main thread, R in
//! the writer), R `read`s on the pipe and R `write`s to it.

use std::time::Instant;

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let nanosleeps = args.u64("nanosleeps", 50)?;
    let sleep_ms = args.u64("sleep-ms", 10)?;
    let reads = args.u64("reads", 20)?;
    let delay_ms = args.u64("delay-ms", 10)?;
    let first_sleep_us = args.u64("first-sleep-us", 0)?;
    let start = crate::gate(args)?;

    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(crate::os_err("pipe2").into());
    }
    let [read_fd, write_fd] = fds;

    start.wait()?;
    let t0 = Instant::now();
    if first_sleep_us > 0 {
        // A block just before the long ones: a tracer that copies a thread's stack at
        // most once per interval has just used this thread's copy.
        nanosleep_us(first_sleep_us);
    }
    for _ in 0..nanosleeps {
        nanosleep_ms(sleep_ms);
    }
    // The writer is created only now, so it never waits for anything but its own
    // nanosleeps (waiting on a channel or lock instead would add lock_wait).
    let writer = std::thread::Builder::new()
        .name("delayed-writer".into())
        .spawn(move || -> Result<(), String> {
            for _ in 0..reads {
                nanosleep_ms(delay_ms);
                // SAFETY: writes one byte from a live local.
                if unsafe { libc::write(write_fd, [1u8].as_ptr().cast(), 1) } != 1 {
                    return Err(crate::os_err("write to pipe"));
                }
            }
            Ok(())
        })
        .map_err(|e| format!("spawning thread: {e}"))?;
    let mut done_reads = 0u64;
    let mut byte = 0u8;
    for _ in 0..reads {
        // SAFETY: reads one byte into a live local.
        let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
        if n != 1 {
            return Err(crate::os_err("read from pipe").into());
        }
        done_reads += 1;
    }
    let elapsed = crate::elapsed_ns(t0);
    writer
        .join()
        .map_err(|_| "writer thread panicked".to_string())??;
    // SAFETY: both descriptors are open and unused from here on.
    unsafe {
        libc::close(read_fd);
        libc::close(write_fd);
    }

    Report::new("sleep_stress")
        .u64("reads", done_reads)
        .u64("nanosleeps", nanosleeps)
        .u64("writer_nanosleeps", reads)
        .u64("sleep_ms", sleep_ms)
        .u64("delay_ms", delay_ms)
        .u64("elapsed_ns", elapsed)
        .print();
    Ok(())
}

/// One `nanosleep(2)` of `ms` milliseconds (resumed, with one more call, if a signal
/// interrupts it). Made with `syscall(SYS_nanosleep)`: glibc's `nanosleep()` wrapper
/// issues `clock_nanosleep`, and tests count the `nanosleep` syscall by name.
pub fn nanosleep_ms(ms: u64) {
    nanosleep_us(ms.saturating_mul(1000));
}

/// [`nanosleep_ms`] in microseconds.
pub fn nanosleep_us(us: u64) {
    let mut req = libc::timespec {
        tv_sec: (us / 1_000_000) as libc::time_t,
        tv_nsec: ((us % 1_000_000) * 1000) as libc::c_long,
    };
    loop {
        let mut rem = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid timespec pointers.
        let r = unsafe {
            libc::syscall(
                libc::SYS_nanosleep,
                &req as *const libc::timespec,
                &mut rem as *mut libc::timespec,
            )
        };
        if r == 0 {
            return;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
        req = rem;
    }
}
