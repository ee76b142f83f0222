//! futex_stress: threads take turns holding one `std::sync::Mutex` (futex-based) and
//! hold it for `--hold-us`, sleeping (`--hold sleep`, default) or spinning
//! (`--hold spin`). While one thread holds it, the others block in `futex(FUTEX_WAIT)`:
//! lock_wait dominates for the waiters (with N threads, about (N-1)/N of thread time).

use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let threads = args.usize("threads", 4)?.max(2);
    let seconds = args.f64("seconds", 2.0)?;
    let hold_us = args.u64("hold-us", 1000)?;
    let hold = args.string("hold")?.unwrap_or_else(|| "sleep".into());
    let spin = match hold.as_str() {
        "sleep" => false,
        "spin" => true,
        other => {
            let msg = format!("--hold must be sleep or spin, not {other:?}");
            return Err(crate::args::UsageError(msg).into());
        }
    };
    let start = crate::gate(args)?;

    let lock = Arc::new(Mutex::new(0u64));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let hold = Duration::from_micros(hold_us);
    let run_for = Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (lock, barrier) = (Arc::clone(&lock), Arc::clone(&barrier));
            std::thread::Builder::new()
                .name(format!("contend-{i}"))
                .spawn(move || {
                    barrier.wait();
                    let t0 = Instant::now();
                    let mut mine = 0u64;
                    while t0.elapsed() < run_for {
                        let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                        *guard += 1;
                        mine += 1;
                        if spin {
                            let t = Instant::now();
                            while t.elapsed() < hold {
                                black_box(&guard);
                            }
                        } else {
                            std::thread::sleep(hold);
                        }
                        drop(guard);
                    }
                    mine
                })
                .map_err(|e| format!("spawning thread: {e}"))
        })
        .collect::<Result<_, _>>()?;
    start.wait()?;
    let t0 = Instant::now();
    barrier.wait();
    let per_thread: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap_or(0)).collect();
    let total = *lock.lock().unwrap_or_else(|p| p.into_inner());

    Report::new("futex_stress")
        .u64("threads", threads as u64)
        .f64("seconds", seconds)
        .u64("hold_us", hold_us)
        .str("hold", if spin { "spin" } else { "sleep" })
        .u64("acquisitions", total)
        .u64(
            "min_per_thread",
            per_thread.iter().copied().min().unwrap_or(0),
        )
        .u64(
            "max_per_thread",
            per_thread.iter().copied().max().unwrap_or(0),
        )
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    Ok(())
}
