//! read_loop: exactly `--count N` (default 2,000,000) `read(fd, buf, 1)` calls on
//! /dev/zero, made with `libc::read` so each is one `read` syscall. Used to check that
//! a tracer counts N reads as exactly N read calls, and as the workload of the tracing
//! overhead benchmark (the result has the elapsed nanoseconds per call).
//!
//! With `--threads T` it makes N reads alone, then N in each of T threads at once, then
//! N alone again after they are joined: N × (T + 2) in all, across a process that goes
//! from one thread to T + 1 and back (a tracer that counts a lone thread's calls
//! differently must stay exact through both changes). `--pause-ms P` sleeps P ms after
//! the join, before the last N (a tracer then snapshots the process with its threads
//! gone).
//!
//! Between the gate and the result line the process makes no other `read` call: /dev/zero
//! is opened before the gate, the clock is read through the vDSO, and the gate itself
//! consumes stdin with `readv` (see `start`).

use std::time::Instant;

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 2_000_000)?;
    let threads = args.u64("threads", 0)?;
    let pause_ms = args.u64("pause-ms", 0)?;
    let start = crate::gate(args)?;

    // SAFETY: valid NUL-terminated path.
    let fd = unsafe { libc::open(c"/dev/zero".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(crate::os_err("open /dev/zero").into());
    }
    start.wait()?;
    let t0 = Instant::now();
    let mut failed = reads(fd, count);
    let mut total = count;
    if threads > 0 {
        let workers: Vec<_> = (0..threads)
            .map(|_| std::thread::spawn(move || reads(fd, count)))
            .collect();
        for w in workers {
            failed += w
                .join()
                .map_err(|_| String::from("a reading thread panicked"))?;
        }
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
        failed += reads(fd, count);
        total = count * (threads + 2);
    }
    let elapsed = crate::elapsed_ns(t0);
    // SAFETY: fd is open and unused afterwards.
    unsafe { libc::close(fd) };
    if failed > 0 {
        return Err(format!("{failed} of {total} reads did not return 1 byte").into());
    }

    Report::new("read_loop")
        .u64("reads", total)
        .u64("bytes", total)
        .u64("threads", threads)
        .u64("elapsed_ns", elapsed)
        .f64("ns_per_call", elapsed as f64 / total.max(1) as f64)
        .print();
    Ok(())
}

/// `count` one-byte reads of `fd`; how many did not return 1 byte.
fn reads(fd: i32, count: u64) -> u64 {
    let mut byte = 0u8;
    let mut failed = 0u64;
    for _ in 0..count {
        // SAFETY: reads one byte into a live local.
        if unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) } != 1 {
            failed += 1;
        }
    }
    failed
}
