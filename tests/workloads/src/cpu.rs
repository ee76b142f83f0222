//! cpu_stress: more spinning threads than CPUs, so every thread spends a large share
//! of its time runnable but waiting for a CPU (runqueue), the rest on_cpu.
//!
//! `--linger`: the threads exist before the gate and outlive the work: they are
//! spawned first and wait for the go on a barrier, and once they have spun they park on
//! another until stdin has a second line (or is closed), after the result is printed. A
//! tracer then sees a live multi-threaded process whose threads it did not see start or
//! end, asleep at both ends of its trace.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args.usize("threads", 2 * cpus)?.max(1);
    let seconds = args.f64("seconds", 2.0)?;
    if args.flag("linger")? {
        return run_lingering(args, threads, cpus, seconds);
    }
    let start = crate::gate(args)?;

    // Threads are created after the gate: waiting for it (on a barrier, a futex) would
    // show up as lock_wait while a tracer is attaching.
    start.wait()?;
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("spin-{i}"))
                .spawn(move || spin_for(Duration::from_secs_f64(seconds)))
                .map_err(|e| format!("spawning thread: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let iterations: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();

    Report::new("cpu_stress")
        .u64("threads", threads as u64)
        .u64("cpus", cpus as u64)
        .f64("seconds", seconds)
        .u64("iterations", iterations)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    Ok(())
}

/// `--linger` (see the module docs).
fn run_lingering(
    args: &mut Args,
    threads: usize,
    cpus: usize,
    seconds: f64,
) -> Result<(), crate::Fail> {
    let go = Arc::new(Barrier::new(threads + 1));
    let parked = Arc::new(Barrier::new(threads + 1));
    let spun = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (go, parked, spun) = (go.clone(), parked.clone(), spun.clone());
            std::thread::Builder::new()
                .name(format!("spin-{i}"))
                .spawn(move || {
                    go.wait();
                    let n = spin_for(Duration::from_secs_f64(seconds));
                    spun.fetch_add(1, Ordering::SeqCst);
                    parked.wait();
                    n
                })
                .map_err(|e| format!("spawning thread: {e}"))
        })
        .collect::<Result<_, _>>()?;
    // Every thread asleep on its barrier before `ready`, and again before the result:
    // none runs (or waits for a CPU) while a tracer attaches or reads the end.
    wait_until_others_sleep(threads)?;
    let start = crate::gate(args)?;
    start.wait()?;
    let t0 = Instant::now();
    go.wait();
    while spun.load(Ordering::SeqCst) < threads {
        std::thread::sleep(Duration::from_millis(5));
    }
    wait_until_others_sleep(threads)?;
    Report::new("cpu_stress")
        .u64("threads", threads as u64)
        .u64("cpus", cpus as u64)
        .f64("seconds", seconds)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    crate::start::wait_for_stdin_line()?;
    parked.wait();
    let iterations: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    std::hint::black_box(iterations);
    Ok(())
}

/// Wait until `n` threads of this process other than the calling one are asleep
/// (state `S` in /proc/self/task/TID/stat).
fn wait_until_others_sleep(n: usize) -> Result<(), String> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() }.to_string();
    loop {
        let mut asleep = 0;
        for entry in std::fs::read_dir("/proc/self/task").map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            if entry.file_name().to_string_lossy() == me {
                continue;
            }
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.as_bytes()[0]);
            asleep += usize::from(state == Some(b'S'));
        }
        if asleep >= n {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Spin without syscalls (the clock is read through the vDSO) until `d` has passed;
/// returns the number of work chunks done.
fn spin_for(d: Duration) -> u64 {
    let t0 = Instant::now();
    let mut chunks = 0u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while t0.elapsed() < d {
        for _ in 0..10_000 {
            // xorshift: cheap, not optimizable away.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        black_box(x);
        chunks += 1;
    }
    chunks
}
