//! Real-kernel tests of `kernelkite trace`: each workload's known latency class must
//! dominate, every thread's classes must add up to its wall time, no event may be lost,
//! and syscall counts must equal the known counts. See tests/support/ebpf.rs.

#[path = "support/ebpf.rs"]
mod support;

use std::process::Command;

use kernelkite_common::LatencyClass;
use support::*;

fn share(c: &kernelkite::model::ClassTimes, class: LatencyClass) -> f64 {
    c.get(class) as f64 / c.total_ns().max(1) as f64
}

#[test]
fn read_loop_counts_every_read_exactly() {
    let Some(_serial) = ebpf_ready("read_loop_counts_every_read_exactly") else {
        return;
    };
    let (traced, result) = trace_workload(&["read_loop", "--count", "200000"], &[]);
    assert_eq!(result["reads"], 200_000);
    assert_eq!(
        traced.syscall_count("read"),
        200_000,
        "events lost {:?}, syscalls: {:?}",
        traced.bundle.events_lost,
        traced.analysis.syscalls
    );
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    let read = traced
        .analysis
        .syscalls
        .iter()
        .find(|s| s.name == "read")
        .unwrap();
    assert!(read.p50_ns <= read.p99_ns && read.p99_ns <= read.max_ns);
    assert!(traced.stdout.contains("read"), "{}", traced.stdout);
    // The report prints the count the bundle holds.
    let lost = format!("events lost: {}", traced.bundle.events_lost.unwrap());
    assert!(traced.stdout.contains(&lost), "{}", traced.stdout);
}

#[test]
fn cpu_stress_shows_runqueue_wait() {
    let Some(_serial) = ebpf_ready("cpu_stress_shows_runqueue_wait") else {
        return;
    };
    let nproc = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = (nproc * 2).to_string();
    let (traced, _) = trace_workload(
        &["cpu_stress", "--threads", &threads, "--seconds", "2"],
        &[],
    );
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    // The spinning threads (not the main thread, which waits in join): twice as many
    // as CPUs, so a large share of their time waits for a CPU and nearly all the rest
    // runs on one.
    let spinners: Vec<_> = traced
        .analysis
        .threads
        .iter()
        .filter(|t| t.tid != t.pid)
        .collect();
    assert_eq!(spinners.len(), nproc * 2);
    for t in spinners {
        let c = &t.classes;
        let rq = share(c, LatencyClass::Runqueue);
        let running_or_waiting = rq + share(c, LatencyClass::OnCpu);
        assert!(rq > 0.25, "tid {}: runqueue share {rq:.3}: {c:?}", t.tid);
        assert!(running_or_waiting > 0.95, "tid {}: {c:?}", t.tid);
    }
}

#[test]
fn futex_stress_shows_lock_wait() {
    let Some(_serial) = ebpf_ready("futex_stress_shows_lock_wait") else {
        return;
    };
    let (traced, _) = trace_workload(&["futex_stress", "--threads", "4", "--seconds", "2"], &[]);
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    let c = traced.analysis.latency_classes;
    let lock = c.get(LatencyClass::LockWait);
    for class in LatencyClass::ALL
        .into_iter()
        .filter(|c| *c != LatencyClass::LockWait)
    {
        assert!(
            lock > 2 * c.get(class),
            "lock_wait does not dominate {class:?}: {c:?}"
        );
    }
    assert!(traced.syscall_count("futex") > 0);
}

#[test]
fn io_stress_shows_io_wait() {
    let Some(_serial) = ebpf_ready("io_stress_shows_io_wait") else {
        return;
    };
    // A real block device, not tmpfs: the build directory.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let (traced, result) = trace_workload(
        &[
            "io_stress",
            "--count",
            "100",
            "--block-size",
            "1048576",
            "--dir",
            &dir_arg,
        ],
        &[],
    );
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    let c = traced.analysis.latency_classes;
    // io_wait dominates the other sleep classes. (Run-queue wait after each fsync
    // depends on what else the machine runs, so it is not compared.)
    let io = c.get(LatencyClass::IoWait);
    for class in [
        LatencyClass::LockWait,
        LatencyClass::SyscallBlocked,
        LatencyClass::UnknownWait,
    ] {
        assert!(
            io > 2 * c.get(class),
            "io_wait does not dominate {class:?}: {c:?}"
        );
    }
    let fsyncs = result["fsyncs"]
        .as_u64()
        .expect("io_stress reports its fsyncs");
    assert_eq!(
        traced.syscall_count("fsync") + traced.syscall_count("fdatasync"),
        fsyncs
    );
}

#[test]
fn sleep_stress_shows_syscall_blocked() {
    let Some(_serial) = ebpf_ready("sleep_stress_shows_syscall_blocked") else {
        return;
    };
    let (traced, result) = trace_workload(
        &[
            "sleep_stress",
            "--nanosleeps",
            "20",
            "--sleep-ms",
            "10",
            "--reads",
            "5",
            "--delay-ms",
            "20",
        ],
        &[],
    );
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    let c = traced.analysis.latency_classes;
    // The writer thread waits at the start gate on a futex (lock_wait) while the trace
    // attaches, so the margin over lock_wait is smaller than over the rest.
    let blocked = c.get(LatencyClass::SyscallBlocked);
    assert!(blocked * 2 > 3 * c.get(LatencyClass::LockWait), "{c:?}");
    for class in [
        LatencyClass::OnCpu,
        LatencyClass::Runqueue,
        LatencyClass::IoWait,
        LatencyClass::UnknownWait,
    ] {
        assert!(
            blocked > 2 * c.get(class),
            "syscall_blocked does not dominate {class:?}: {c:?}"
        );
    }
    let sleeps =
        result["nanosleeps"].as_u64().unwrap() + result["writer_nanosleeps"].as_u64().unwrap_or(0);
    assert_eq!(
        traced.syscall_count("nanosleep") + traced.syscall_count("clock_nanosleep"),
        sleeps,
        "{:?}",
        traced.analysis.syscalls
    );
}

#[test]
fn net_stress_over_loopback_is_traced() {
    let Some(_serial) = ebpf_ready("net_stress_over_loopback_is_traced") else {
        return;
    };
    let (traced, result) = trace_workload(&["net_stress", "--count", "2000"], &[]);
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    let c = traced.analysis.latency_classes;
    // Echo round trips block in socket reads: syscall_blocked, not io_wait.
    assert!(
        c.get(LatencyClass::SyscallBlocked) > c.get(LatencyClass::IoWait),
        "{c:?}"
    );
    assert_eq!(result["echoed"], 2000);
}

#[test]
fn follow_sees_every_short_child() {
    let Some(_serial) = ebpf_ready("follow_sees_every_short_child") else {
        return;
    };
    let (traced, result) = trace_workload(&["exec_storm", "--count", "100"], &["--follow"]);
    traced.assert_no_events_lost();
    let spawned = result["spawned"].as_u64().unwrap();
    let forks = traced
        .bundle
        .lifecycle
        .iter()
        .filter(|e| e.kind == kernelkite::model::LifecycleKind::Fork && e.tid == e.pid)
        .count() as u64;
    assert_eq!(forks, spawned, "every child's fork was seen");
    let exits_with_classes = traced
        .bundle
        .lifecycle
        .iter()
        .filter(|e| e.kind == kernelkite::model::LifecycleKind::Exit && e.class_ns.is_some())
        .count() as u64;
    assert!(
        exits_with_classes > spawned,
        "every child's exit carries its class times"
    );
    traced.assert_classes_sum_to_wall();
}

#[test]
fn nonexistent_pid_is_a_clear_error() {
    let Some(_serial) = ebpf_ready("nonexistent_pid_is_a_clear_error") else {
        return;
    };
    let out = Command::new(kernelkite_bin())
        .args(["trace", "--pid", "999999999", "--duration", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim(),
        "kernelkite: error: no process with pid 999999999"
    );
}

#[test]
fn thread_ids_kernel_threads_and_absurd_durations_are_refused() {
    let Some(_serial) = ebpf_ready("thread_ids_kernel_threads_and_absurd_durations_are_refused")
    else {
        return;
    };
    // This test binary is multi-threaded (the harness runs tests on threads).
    let me = std::process::id() as i32;
    // A thread of this test process that stays alive while kernelkite looks at it.
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let helper = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        let _ = done_rx.recv();
    });
    let tid: i32 = rx.recv().unwrap();
    let err = |args: &[&str]| {
        let out = Command::new(kernelkite_bin()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    };
    assert_eq!(
        err(&["trace", "--pid", &tid.to_string(), "--duration", "1"]),
        format!(
            "kernelkite: error: {tid} is a thread of process {me}: trace --pid {me} (every thread is traced)"
        )
    );
    assert_eq!(
        err(&["trace", "--pid", "2", "--duration", "1"]),
        "kernelkite: error: pid 2 is a kernel thread: kernelkite traces user-space processes"
    );
    assert!(
        err(&["trace", "--pid", &me.to_string(), "--duration", "1e308"]).contains("at most a year")
    );
    done_tx.send(()).unwrap();
    helper.join().unwrap();
}

#[test]
fn target_exiting_mid_trace_gives_a_clean_report_and_leaves_no_bpf_behind() {
    let Some(_serial) =
        ebpf_ready("target_exiting_mid_trace_gives_a_clean_report_and_leaves_no_bpf_behind")
    else {
        return;
    };
    let mut w = GatedWorkload::spawn(&[
        "sleep_stress",
        "--nanosleeps",
        "5",
        "--sleep-ms",
        "20",
        "--reads",
        "0",
    ]);
    let trace = RunningTrace::start(&[w.pid], &["--duration", "60"]);
    let ids = bpf_ids_held_by(trace.child.id());
    assert!(
        ids.iter().filter(|(kind, _)| kind == "prog_id").count() >= 8,
        "{ids:?}"
    );
    w.go();
    w.finish();
    let traced = trace.finish();
    assert!(
        traced
            .stderr
            .iter()
            .any(|l| l.contains("every traced process exited")),
        "{:?}",
        traced.stderr
    );
    assert!(traced.stdout.contains("latency classes per process"));
    traced.assert_no_events_lost();
    // Every program, link and map the trace held is gone with it.
    assert_bpf_ids_gone(&ids);
}

#[test]
fn trace_json_carries_the_summary_contract_and_syscalls() {
    let Some(_serial) = ebpf_ready("trace_json_carries_the_summary_contract_and_syscalls") else {
        return;
    };
    let (traced, _) = trace_workload(&["read_loop", "--count", "1000"], &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&traced.stdout).expect("trace --json is JSON");
    assert_eq!(v["backend"], "ebpf");
    assert_eq!(v["latency_classes_exact"], true);
    assert_events_lost_ok(v["events_lost"].as_u64(), classic_hooks());
    for key in [
        "on_cpu",
        "runqueue",
        "io_wait",
        "lock_wait",
        "syscall_blocked",
        "unknown_wait",
    ] {
        assert!(v["latency_classes"][key].is_u64(), "{key}");
    }
    let read = v["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "read")
        .unwrap();
    assert_eq!(read["count"], 1000);
    for key in ["total_ns", "p50_ns", "p95_ns", "p99_ns", "max_ns"] {
        assert!(read[key].is_u64(), "{key}");
    }
}

/// Kernels without BTF get classic tracepoints, which need tracefs: kernelkite mounts
/// it when it is not mounted and says so. (CI also runs this file once more with
/// KERNELKITE_HOOKS=classic, so every class test above holds for classic hooks too.)
#[test]
fn classic_tracepoints_mount_tracefs_and_say_so() {
    let Some(_serial) = ebpf_ready("classic_tracepoints_mount_tracefs_and_say_so") else {
        return;
    };
    if std::env::var_os("CI").is_none() {
        eprintln!("skipped: unmounts tracefs, so it runs in CI only (CI=true)");
        return;
    }
    let tracefs = "/sys/kernel/tracing";
    let _ = Command::new("umount").arg(tracefs).status();
    let mounted = || {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(tracefs))
    };
    assert!(!mounted(), "could not unmount {tracefs} for the test");
    let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
    let out = Command::new(kernelkite_bin())
        .env("KERNELKITE_HOOKS", "classic")
        .args(["--json", "trace", "--pid", &sleeper.id().to_string()])
        .args(["--duration", "1"])
        .output()
        .unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("classic tracepoints"), "{err}");
    assert!(
        err.contains(&format!("mounted tracefs at {tracefs}")),
        "{err}"
    );
    assert!(mounted());
    // A sleeper in nanosleep: its time is syscall_blocked.
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let blocked = summary["latency_class_shares"]["syscall_blocked"]
        .as_f64()
        .unwrap();
    assert!(blocked > 0.99, "{stdout}");
    assert_events_lost_ok(summary["events_lost"].as_u64(), true);
}

/// A traced process that exits frees its pid; a process that is not traced and gets that
/// pid again (pid_max is 32768 on small machines, so it wraps within a long session)
/// must not be counted. The pid is reused on purpose through ns_last_pid.
#[test]
fn a_reused_pid_of_an_exited_target_is_not_traced() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let Some(_serial) = ebpf_ready("a_reused_pid_of_an_exited_target_is_not_traced") else {
        return;
    };
    let mut root = Command::new("sh")
        .args(["-c", "read go; sleep 0.2 & echo $!; wait; read done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let trace = RunningTrace::start(&[root.id() as i32], &["--follow"]);
    let mut stdin = root.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    let mut line = String::new();
    BufReader::new(root.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let child: u32 = line.trim().parse().unwrap();
    while std::path::Path::new(&format!("/proc/{child}")).exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Not a descendant of the traced tree, with the pid the traced child had.
    let mut reuser = None;
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (child - 1).to_string()).unwrap();
        let p = Command::new(workload_bin())
            .args(["read_loop", "--count", "20000"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        if p.id() == child {
            reuser = Some(p);
            break;
        }
        let mut p = p;
        let _ = p.kill();
        let _ = p.wait();
    }
    let mut reuser = reuser.expect("could not get the exited child's pid again");
    assert!(reuser.wait().unwrap().success());
    stdin.write_all(b"done\n").unwrap();
    drop(stdin);
    assert!(root.wait().unwrap().success());
    let traced = trace.finish();
    assert!(
        traced.syscall_count("read") < 20_000,
        "the reused pid's reads were counted: {:?}",
        traced.analysis.syscalls
    );
    assert!(
        traced
            .analysis
            .processes
            .iter()
            .all(|p| p.comm != "kk-workload"),
        "{:?}",
        traced
            .analysis
            .processes
            .iter()
            .map(|p| (p.pid, &p.comm))
            .collect::<Vec<_>>()
    );
}
