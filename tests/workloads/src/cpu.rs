//! cpu_stress: more spinning threads than CPUs, so every thread spends a large share
//! of its time runnable but waiting for a CPU (runqueue), the rest on_cpu.
//!
//! `--linger`: the threads exist before the gate and outlive the work: they are
//! spawned first and wait for the go on a channel each, and once they have spun they
//! park on another until stdin has a second line (or is closed), after the result is
//! printed. A
//! tracer then sees a live multi-threaded process whose threads it did not see start or
//! end, asleep at both ends of its trace.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
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
    // One channel each way per thread, no shared lock: a thread asleep in its own
    // `recv` stays asleep until main sends to it (a shared barrier's mutex hands
    // wakeups from thread to thread, so "all asleep" could be seen mid-chain).
    let (ready, spun) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut go = Vec::new();
    let mut release = Vec::new();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let (release_tx, release_rx) = mpsc::channel::<()>();
            go.push(go_tx);
            release.push(release_tx);
            let (ready, spun) = (ready.clone(), spun.clone());
            std::thread::Builder::new()
                .name(format!("spin-{i}"))
                .spawn(move || {
                    // Counted just before each wait: a thread can also sleep in its
                    // start-up, so "asleep" alone does not say it reached the recv.
                    ready.fetch_add(1, Ordering::SeqCst);
                    let _ = go_rx.recv();
                    let n = spin_for(Duration::from_secs_f64(seconds));
                    spun.fetch_add(1, Ordering::SeqCst);
                    let _ = release_rx.recv();
                    n
                })
                .map_err(|e| format!("spawning thread: {e}"))
        })
        .collect::<Result<_, _>>()?;
    // Every thread asleep in its `recv` before `ready`, and again before the result:
    // none runs (or waits for a CPU) while a tracer attaches or reads the end.
    while ready.load(Ordering::SeqCst) < threads {
        std::thread::sleep(Duration::from_millis(5));
    }
    wait_until_others_sleep(threads)?;
    let start = crate::gate(args)?;
    start.wait()?;
    let t0 = Instant::now();
    for tx in &go {
        let _ = tx.send(());
    }
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
    crate::start::wait_for_stdin_line(-1)?;
    for tx in &release {
        let _ = tx.send(());
    }
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
