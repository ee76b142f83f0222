//! Real-kernel bounds that hold on any program: no thread is on a CPU longer than the
//! kernel ran it, and no process uses more than the machine's CPUs. Traced on a process
//! nobody here wrote, the machine's init (on the test machine a 40-thread agent, nearly
//! all asleep, whose threads' own-context events, their switch-outs and syscalls, go
//! unseen by every tracer, bpftrace too: four of them read 100 % on_cpu each, 400 % on
//! 2 CPUs in `top`, where schedstat moved 0-35 ms in 3 s).

#[path = "support/ebpf.rs"]
mod support;

use std::collections::BTreeMap;

use support::*;

/// `/proc/PID/task/*/schedstat` field 1 (`se.sum_exec_runtime`, ns) of every thread.
fn runtimes(pid: i32) -> BTreeMap<i32, u64> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let entry = entry.unwrap();
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // A thread that exited between the listing and the read has no figure.
        if let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) {
            if let Some(ns) = text.split_whitespace().next().and_then(|v| v.parse().ok()) {
                out.insert(tid, ns);
            }
        }
    }
    out
}

/// One scheduler tick at the slowest common rate (HZ=100): a running thread's runtime
/// is brought up to date at its ticks, so a read can lag its run by this much.
const TICK_NS: u64 = 10_000_000;

#[test]
fn no_thread_of_init_is_on_cpu_longer_than_the_kernel_ran_it() {
    let Some(_serial) = ebpf_ready("no_thread_of_init_is_on_cpu_longer_than_the_kernel_ran_it")
    else {
        return;
    };
    // The kernel's runtimes read before the trace starts and after it ends: each
    // thread's on_cpu in the trace lies inside that window.
    let before = runtimes(1);
    let traced = RunningTrace::start(&[1], &["--duration", "2"]).finish();
    let after = runtimes(1);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut checked = 0;
    let mut on_cpu_total = 0;
    for row in traced.analysis.threads.iter().filter(|t| t.pid == 1) {
        on_cpu_total += row.classes.on_cpu;
        let (Some(b), Some(a)) = (before.get(&row.tid), after.get(&row.tid)) else {
            continue;
        };
        let ran = a - b;
        eprintln!(
            "tid {} ({}): on_cpu {} ns, schedstat moved {ran} ns",
            row.tid, row.comm, row.classes.on_cpu
        );
        assert!(
            row.classes.on_cpu <= ran + TICK_NS,
            "tid {} ({}): on_cpu {} ns, but the kernel ran it {ran} ns around the trace",
            row.tid,
            row.comm,
            row.classes.on_cpu
        );
        checked += 1;
    }
    assert!(checked > 0, "no thread of pid 1 in the trace");
    let wall = traced.analysis.duration_ms * 1e6;
    assert!(
        on_cpu_total as f64 <= cpus as f64 * wall,
        "pid 1 on_cpu {on_cpu_total} ns in {wall} ns on {cpus} CPUs"
    );
}
