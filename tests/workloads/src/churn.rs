//! `thread_churn`: one short thread after another for S seconds, so threads start and
//! exit while a tracer attaches. With `--leader-exits` the main thread exits first
//! (the process lives on in the churning thread, its leader a zombie in /proc).

use std::time::{Duration, Instant};

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let seconds = args.f64("seconds", 3.0)?;
    let leader_exits = args.flag("leader-exits")?;
    let start = crate::gate(args)?;
    start.wait()?;
    let churner = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut threads = 0u64;
        while t0.elapsed() < Duration::from_secs_f64(seconds) {
            let _ = std::thread::spawn(move || std::hint::black_box(threads)).join();
            threads += 1;
        }
        Report::new("thread_churn")
            .u64("threads", threads)
            .bool("leader_exits", leader_exits)
            .print();
        std::process::exit(0);
    });
    if leader_exits {
        // exit(2), not exit_group: only the main thread ends (no unwinding through
        // Rust frames, as pthread_exit would do).
        // SAFETY: the thread ends here; nothing of it is used afterwards.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
    }
    let _ = churner.join();
    Ok(())
}
