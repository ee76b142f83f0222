//! idle_tree: `--count N` (default 100) child processes (this binary's `idle`
//! workload) that each sleep `--seconds S` (default 10) in one `nanosleep`, and the
//! parent waits for them all. A large, quiet process tree: the benchmark of the /proc
//! sampler's own cost per process uses it (`cargo xtask bench`).
//!
//! idle: one `nanosleep` of `--seconds S` (default 10).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::report::Report;

pub fn run_tree(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 100)?;
    let seconds = args.f64("seconds", 10.0)?;
    let start = crate::gate(args)?;
    let me = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;

    start.wait()?;
    let t0 = Instant::now();
    let mut children: Vec<Child> = Vec::new();
    for _ in 0..count {
        let child = Command::new(&me)
            .args(["idle", "--seconds", &seconds.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                for mut c in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(format!("spawning child: {e}").into());
            }
        }
    }
    let mut failed = 0u64;
    for mut c in children {
        if !c.wait().is_ok_and(|s| s.success()) {
            failed += 1;
        }
    }

    Report::new("idle_tree")
        .u64("children", count)
        .u64("failed", failed)
        .f64("seconds", seconds)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    if failed > 0 {
        return Err(format!("{failed} children failed").into());
    }
    Ok(())
}

pub fn run_idle(args: &mut Args) -> Result<(), crate::Fail> {
    let seconds = args.f64("seconds", 10.0)?;
    let start = crate::gate(args)?;
    start.wait()?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    Report::new("idle")
        .f64("seconds", seconds)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    Ok(())
}
