//! cpu_stress: more spinning threads than CPUs, so every thread spends a large share
//! of its time runnable but waiting for a CPU (runqueue), the rest on_cpu.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = args.usize("threads", 2 * cpus)?.max(1);
    let seconds = args.f64("seconds", 2.0)?;
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
