//! `kk-workload <name> [options]`: small deterministic programs whose dominant latency
//! class is known, for real-kernel tests and benchmarks of kernelkite.
//!
//! Every workload does its setup, passes the start gate (`--wait-stdin`,
//! `--start-delay-ms`; see [`start`]), runs the measured part and prints one line of
//! JSON on stdout saying what it did. Syscalls whose counts matter are made with `libc`
//! directly so the counts are exact. Errors go to stderr with exit status 1; usage
//! errors exit with 2.

mod args;
mod report;
mod start;

mod churn;
mod cpu;
mod exec;
mod futex;
mod io;
mod net;
mod pipe;
mod read_loop;
mod sleep;
mod tree;
mod waits;

use args::Args;

/// (name, dominant latency class / purpose, runner).
type Runner = fn(&mut Args) -> Result<(), Fail>;
const WORKLOADS: &[(&str, &str, Runner)] = &[
    ("cpu_stress", "runqueue: 2×nproc spinning threads [--threads T] [--seconds S] [--linger: threads made before the gate, parked after the result until a second stdin line]", cpu::run),
    ("futex_stress", "lock_wait: threads contend one Mutex [--threads T] [--seconds S] [--hold-us U] [--hold sleep|spin]", futex::run),
    ("io_stress", "io_wait: N × (pwrite + fsync) [--count N] [--block-size B] [--dir D] [--direct]", io::run),
    ("shared_write", "lock_wait: T threads write through one shared fd on tmpfs (f_pos_lock) [--threads T] [--count N] [--block-size B] [--dir D]", io::run_shared_write),
    ("sleep_stress", "syscall_blocked: nanosleeps and blocking pipe reads [--nanosleeps N] [--sleep-ms M] [--first-sleep-us U] [--reads R] [--delay-ms D]", sleep::run),
    ("read_loop", "exactly N 1-byte read() calls on /dev/zero [--count N] [--threads T]", read_loop::run),
    ("exec_storm", "N short processes [--count N] [--parallel P] [--program PATH | --self-exec]", exec::run),
    ("net_stress", "loopback TCP echo of M messages [--count M] [--size B]", net::run),
    ("pipe_pingpong", "two threads (or processes) ping-pong a byte over pipes [--count N] [--processes]", pipe::run),
    ("idle_tree", "N idle child processes for S seconds [--count N] [--seconds S]", tree::run_tree),
    ("idle", "sleep S seconds (one nanosleep) [--seconds S]", tree::run_idle),
    ("thread_churn", "short threads one after another [--seconds S] [--leader-exits: the main thread exits first]", churn::run),
    ("pool", "wakers: one busy thread, N workers parked on a condvar [--idle N] [--seconds S]", waits::run_pool),
    ("produce", "wakers: write C lines to stdout, one every G ms (`produce | consume`) [--count C] [--gap-ms G]", waits::run_produce),
    ("consume", "wakers: read stdin to EOF", waits::run_consume),
    ("timeouts", "wakers: N × (sleep M ms, poll timeout M ms) [--count N] [--ms M]", waits::run_timeouts),
    ("condvar_timeouts", "wakers: N × a condvar wait that times out after M ms [--count N] [--ms M]", waits::run_condvar_timeouts),
    ("burn", "a short CPU burn, the child of exec_storm --self-exec [--iterations K]", exec::run_burn),
];

fn usage() -> String {
    let mut s = String::from(
        "usage: kk-workload <name> [options] [--wait-stdin [--spin-wait]] [--start-delay-ms MS]\n\n\
         --wait-stdin prints \"ready <pid>\" and waits for a line on stdin before the\n\
         measured part (--spin-wait: polling without blocking, on its CPU); the result\n\
         is one JSON line on stdout.\n\nworkloads:\n",
    );
    for (name, what, _) in WORKLOADS {
        s.push_str(&format!("  {name:<14} {what}\n"));
    }
    s
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = argv.first() else {
        eprint!("{}", usage());
        std::process::exit(2);
    };
    if name == "--help" || name == "-h" || name == "help" {
        print!("{}", usage());
        return;
    }
    let Some((_, _, runner)) = WORKLOADS.iter().find(|(n, _, _)| n == name) else {
        eprintln!("kk-workload: unknown workload {name:?}\n");
        eprint!("{}", usage());
        std::process::exit(2);
    };
    let mut args = match Args::parse(&argv[1..]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kk-workload {name}: {}", e.0);
            std::process::exit(2);
        }
    };
    match runner(&mut args) {
        Ok(()) => {}
        Err(Fail::Usage(e)) => {
            eprintln!("kk-workload {name}: {e}");
            std::process::exit(2);
        }
        Err(Fail::Run(e)) => {
            eprintln!("kk-workload {name}: {e}");
            std::process::exit(1);
        }
    }
}

/// Why a workload failed: a usage error (exit 2) or a failure while running (exit 1).
pub enum Fail {
    Usage(String),
    Run(String),
}

impl From<args::UsageError> for Fail {
    fn from(e: args::UsageError) -> Fail {
        Fail::Usage(e.0)
    }
}

impl From<String> for Fail {
    fn from(e: String) -> Fail {
        Fail::Run(e)
    }
}

/// Parse the start-gate options, reject unknown options, then wait at the gate.
/// Workloads call this after reading their own options and before their setup.
pub fn gate(args: &mut Args) -> Result<start::Start, Fail> {
    let start = start::Start::from_args(args)?;
    args.finish()
        .map_err(|e| Fail::Usage(format!("{}\n\n{}", e.0, usage())))?;
    Ok(start)
}

/// Nanoseconds since `t`, saturating.
pub fn elapsed_ns(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The last OS error, formatted with what was being done.
pub fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}
