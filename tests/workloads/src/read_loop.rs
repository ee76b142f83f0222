//! read_loop: exactly `--count N` (default 2,000,000) `read(fd, buf, 1)` calls on
//! /dev/zero, made with `libc::read` so each is one `read` syscall. Used to check that
//! a tracer counts N reads as exactly N read calls, and as the workload of the tracing
//! overhead benchmark (the result has the elapsed nanoseconds per call).
//!
//! Between the gate and the result line the process makes no other `read` call: /dev/zero
//! is opened before the gate, the clock is read through the vDSO, and the gate itself
//! consumes stdin with `readv` (see `start`).

use std::time::Instant;

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 2_000_000)?;
    let start = crate::gate(args)?;

    // SAFETY: valid NUL-terminated path.
    let fd = unsafe { libc::open(c"/dev/zero".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(crate::os_err("open /dev/zero").into());
    }
    start.wait()?;
    let t0 = Instant::now();
    let mut byte = 0u8;
    let mut failed = 0u64;
    for _ in 0..count {
        // SAFETY: reads one byte into a live local.
        if unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) } != 1 {
            failed += 1;
        }
    }
    let elapsed = crate::elapsed_ns(t0);
    // SAFETY: fd is open and unused afterwards.
    unsafe { libc::close(fd) };
    if failed > 0 {
        return Err(format!("{failed} of {count} reads did not return 1 byte").into());
    }

    Report::new("read_loop")
        .u64("reads", count)
        .u64("bytes", count)
        .u64("elapsed_ns", elapsed)
        .f64("ns_per_call", elapsed as f64 / count.max(1) as f64)
        .print();
    Ok(())
}
