//! exec_storm: start `--count N` (default 300) short processes, `--parallel P` at a time
//! (default 1: one after another), and wait for each. The program is `/bin/true` by
//! default, `--program PATH` to choose another, or `--self-exec` to run this binary's
//! `burn` workload (a tiny CPU burn, so every child has some on_cpu time).
//! Lots of fork/exec/exit lifecycle events in a short time.

use std::hint::black_box;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::args::Args;
use crate::report::Report;

pub fn run(args: &mut Args) -> Result<(), crate::Fail> {
    let count = args.u64("count", 300)?;
    let parallel = args.u64("parallel", 1)?.clamp(1, 64);
    let program = args.string("program")?;
    let self_exec = args.flag("self-exec")?;
    let start = crate::gate(args)?;

    let (program, argv): (String, Vec<String>) = match (program, self_exec) {
        (Some(_), true) => {
            let msg = "--program and --self-exec exclude each other";
            return Err(crate::args::UsageError(msg.into()).into());
        }
        (Some(p), false) => (p, vec![]),
        (None, true) => {
            let me = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
            (me.to_string_lossy().into_owned(), vec!["burn".into()])
        }
        (None, false) => ("/bin/true".into(), vec![]),
    };

    start.wait()?;
    let t0 = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..parallel)
        .map(|_| {
            let (next, ok, failed) = (Arc::clone(&next), Arc::clone(&ok), Arc::clone(&failed));
            let (program, argv) = (program.clone(), argv.clone());
            std::thread::spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < count {
                    let status = Command::new(&program)
                        .args(&argv)
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .status();
                    match status {
                        Ok(s) if s.success() => ok.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));

    Report::new("exec_storm")
        .u64("spawned", ok + failed)
        .u64("succeeded", ok)
        .u64("failed", failed)
        .u64("parallel", parallel)
        .str("program", &program)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    if failed > 0 {
        return Err(format!("{failed} of {count} children failed").into());
    }
    Ok(())
}

/// burn: `--iterations K` (default 200,000) rounds of xorshift, then exit.
pub fn run_burn(args: &mut Args) -> Result<(), crate::Fail> {
    let iterations = args.u64("iterations", 200_000)?;
    let start = crate::gate(args)?;
    start.wait()?;
    let t0 = Instant::now();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x);
    Report::new("burn")
        .u64("iterations", iterations)
        .u64("elapsed_ns", crate::elapsed_ns(t0))
        .print();
    Ok(())
}
