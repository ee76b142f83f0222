//! Workloads whose wakers are known (`kernelkite waits`):
//! - pool: one busy thread and `--idle N` workers parked on a condition variable until
//!   the end, then woken and joined (or, with `--leave-parked`, left parked when the
//!   process exits, as a program with a detached pool does);
//! - produce / consume: the two ends of a shell pipeline, `produce | consume`: the
//!   consumer blocks in read(2) until the producer writes;
//! - timeouts: sleeps and poll(2) timeouts on a pipe nobody writes, each ended by a timer.
//! - condvar_timeouts: waits on a condition variable nobody signals (std's Condvar,
//!   std, futex-based), each ended by its own timeout.

use std::io::{Read, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::report::Report;

pub fn run_pool(args: &mut Args) -> Result<(), crate::Fail> {
    let idle = args.usize("idle", 3)?;
    let seconds = args.f64("seconds", 1.0)?;
    let leave_parked = args.flag("leave-parked")?;
    let start = crate::gate(args)?;
    let parked = Arc::new((Mutex::new(false), Condvar::new()));
    let workers: Vec<_> = (0..idle)
        .map(|i| {
            let parked = Arc::clone(&parked);
            std::thread::Builder::new()
                .name(format!("idle-{i}"))
                .spawn(move || {
                    let (done, cv) = &*parked;
                    let mut d = done.lock().unwrap_or_else(|p| p.into_inner());
                    while !*d {
                        d = cv.wait(d).unwrap_or_else(|p| p.into_inner());
                    }
                })
                .map_err(|e| format!("spawning thread: {e}"))
        })
        .collect::<Result<_, _>>()?;
    start.wait()?;
    let run_for = Duration::from_secs_f64(seconds);
    let busy = std::thread::Builder::new()
        .name("busy".into())
        .spawn(move || {
            let t0 = Instant::now();
            let mut n = 0u64;
            while t0.elapsed() < run_for {
                n = std::hint::black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            n
        })
        .map_err(|e| format!("spawning thread: {e}"))?;
    let t0 = Instant::now();
    let _ = busy.join();
    if leave_parked {
        // The workers are still parked when main returns: exit_group wakes them to die.
        drop(workers);
    } else {
        let (done, cv) = &*parked;
        *done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        for w in workers {
            let _ = w.join();
        }
    }
    Report::new("pool")
        .u64("idle", idle as u64)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    Ok(())
}

pub fn run_produce(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 200)?;
    let gap_ms = args.u64("gap-ms", 2)?;
    let start = crate::gate(args)?;
    start.wait()?;
    let mut out = std::io::stdout().lock();
    for i in 0..count {
        writeln!(out, "item {i}").map_err(|e| format!("write: {e}"))?;
        out.flush().map_err(|e| format!("flush: {e}"))?;
        std::thread::sleep(Duration::from_millis(gap_ms));
    }
    // The report goes to stderr: stdout is the pipe.
    eprintln!(
        "{{\"workload\":\"produce\",\"count\":{count},\"pid\":{}}}",
        std::process::id()
    );
    Ok(())
}

pub fn run_consume(args: &mut Args) -> Result<(), crate::Fail> {
    let start = crate::gate(args)?;
    start.wait()?;
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 4096];
    let (mut bytes, mut reads) = (0u64, 0u64);
    loop {
        let n = stdin.read(&mut buf).map_err(|e| format!("read: {e}"))?;
        reads += 1;
        if n == 0 {
            break;
        }
        bytes += n as u64;
    }
    Report::new("consume")
        .u64("bytes", bytes)
        .u64("reads", reads)
        .print();
    Ok(())
}

pub fn run_timeouts(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 50)?;
    let ms = args.u64("ms", 5)?;
    let start = crate::gate(args)?;
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(crate::os_err("pipe").into());
    }
    start.wait()?;
    let t0 = Instant::now();
    let mut timed_out = 0u64;
    for _ in 0..count {
        std::thread::sleep(Duration::from_millis(ms));
        let mut p = libc::pollfd {
            fd: fds[0],
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; nobody writes the pipe, so this times out.
        let rc = unsafe { libc::poll(&mut p, 1, ms as i32) };
        if rc == 0 {
            timed_out += 1;
        }
    }
    Report::new("timeouts")
        .u64("count", count)
        .u64("poll_timeouts", timed_out)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    Ok(())
}

pub fn run_condvar_timeouts(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 20)?;
    let ms = args.u64("ms", 5)?;
    let start = crate::gate(args)?;
    let pair = (std::sync::Mutex::new(false), std::sync::Condvar::new());
    start.wait()?;
    let t0 = Instant::now();
    let mut timed_out = 0u64;
    let mut guard = pair.0.lock().map_err(|_| crate::os_err("lock"))?;
    for _ in 0..count {
        let (g, result) = pair
            .1
            .wait_timeout(guard, Duration::from_millis(ms))
            .map_err(|_| crate::os_err("wait"))?;
        guard = g;
        if result.timed_out() {
            timed_out += 1;
        }
    }
    drop(guard);
    Report::new("condvar_timeouts")
        .u64("count", count)
        .u64("timed_out", timed_out)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    Ok(())
}
