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
    // Every hook is live and listed, the syscall hooks too (they attach last, after
    // the targets' bits).
    assert!(
        traced
            .stderr
            .iter()
            .any(|l| l.contains("(15 hooks live in")),
        "{:?}",
        traced.stderr
    );
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
fn reads_stay_exact_as_a_process_gains_threads_and_loses_them() {
    let Some(_serial) = ebpf_ready("reads_stay_exact_as_a_process_gains_threads_and_loses_them")
    else {
        return;
    };
    // 100,000 reads alone, 100,000 in each of 3 threads at once, 100,000 alone again: a
    // lone thread's histogram adds are plain, the others atomic (kernelkite-ebpf's
    // syscalls.rs); both, and the changes between them, must count every call.
    reads_of_a_process_gaining_threads_are_exact(&[]);
}

/// `read_loop --count 100000 --threads 3` traced with `env`: every read counted, no
/// event lost, each thread's classes adding up to its wall time.
fn reads_of_a_process_gaining_threads_are_exact(env: &[(&str, &str)]) -> Traced {
    let (traced, result) = trace_workload_env(
        &["read_loop", "--count", "100000", "--threads", "3"],
        &[],
        env,
    );
    assert_eq!(result["reads"], 500_000);
    assert_eq!(
        traced.syscall_count("read"),
        500_000,
        "events lost {:?}, syscalls: {:?}",
        traced.bundle.events_lost,
        traced.analysis.syscalls
    );
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    traced
}

/// The thread table puts a thread whose slot another live thread holds in its overflow
/// map (kernelkite-ebpf's `maps::thread`), and the syscall histograms a (process,
/// syscall) whose slot another holds in theirs (`maps::hist_slot`). With one slot each,
/// every thread and histogram but one lives there: reads, classes and exits stay as
/// exact as in the slots.
#[test]
fn threads_and_histograms_in_the_overflow_maps_are_counted_exactly() {
    let Some(_serial) =
        ebpf_ready("threads_and_histograms_in_the_overflow_maps_are_counted_exactly")
    else {
        return;
    };
    let traced = reads_of_a_process_gaining_threads_are_exact(&[
        ("KERNELKITE_THREAD_SLOTS", "1"),
        ("KERNELKITE_HIST_SLOTS", "1"),
    ]);
    // All four threads were seen, the three in the overflow with their exits.
    assert_eq!(
        traced.analysis.threads.len(),
        4,
        "{:?}",
        traced.analysis.threads
    );
}

/// Each thread counts its calls in a histogram slot of its own (kernelkite-ebpf's
/// `maps::hist_slot`); the slots of threads gone are freed at the next snapshot and
/// their calls kept with their process's. Snapshots (every 50 ms) come while the
/// process lives on without its three reading threads: every read stays counted, with
/// slots and with one slot (the rest in the overflow, per process).
#[test]
fn reads_of_threads_gone_before_their_process_stay_counted() {
    let Some(_serial) = ebpf_ready("reads_of_threads_gone_before_their_process_stay_counted")
    else {
        return;
    };
    for slots in ["4096", "1"] {
        let (traced, result) = trace_workload_env(
            &[
                "read_loop",
                "--count",
                "100000",
                "--threads",
                "3",
                "--pause-ms",
                "300",
            ],
            &[],
            &[("KERNELKITE_HIST_SLOTS", slots)],
        );
        assert_eq!(result["reads"], 500_000);
        assert_eq!(
            traced.syscall_count("read"),
            500_000,
            "slots {slots}: events lost {:?}, syscalls: {:?}",
            traced.bundle.events_lost,
            traced.analysis.syscalls
        );
        traced.assert_no_events_lost();
    }
}

#[test]
fn a_process_on_its_cpu_through_attach_has_every_read_counted() {
    let Some(_serial) = ebpf_ready("a_process_on_its_cpu_through_attach_has_every_read_counted")
    else {
        return;
    };
    // The workload spins (polling stdin without blocking) while kernelkite loads and
    // attaches. Were sys_enter/sys_exit live before its target bit is set, its polls
    // would note it untraced (kernelkite-ebpf's `maps::UNTRACED_CPU`) and its reads
    // would be skipped: they attach only after the bits (`Probes::attach_deferred`).
    // Ten rounds: the notes are taken in that window only sometimes (with the hooks
    // attached first and nothing voiding the notes, one run in three failed with five
    // rounds).
    for round in 0..10 {
        let (traced, result) =
            trace_workload(&["read_loop", "--count", "200000", "--spin-wait"], &[]);
        assert_eq!(result["reads"], 200_000);
        assert_eq!(
            traced.syscall_count("read"),
            200_000,
            "round {round}: events lost {:?}, syscalls: {:?}",
            traced.bundle.events_lost,
            traced.analysis.syscalls
        );
        traced.assert_no_events_lost();
    }
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
    // runs on one (or is current on one while the hypervisor runs something else:
    // steal, several percent on a busy VM).
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
        let running_or_waiting = rq + share(c, LatencyClass::OnCpu) + share(c, LatencyClass::Steal);
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
    // io_wait dominates the other sleep classes of the measured part: the gate's wait
    // for `go` is syscall_blocked time before it, as long as attach-to-go took. (Run-
    // queue wait after each fsync depends on what else the machine runs, so it is not
    // compared.)
    let io = c.get(LatencyClass::IoWait);
    let gate_ns = traced.gate_wait_ns();
    for class in [
        LatencyClass::LockWait,
        LatencyClass::SyscallBlocked,
        LatencyClass::UnknownWait,
    ] {
        let measured = if class == LatencyClass::SyscallBlocked {
            c.get(class).saturating_sub(gate_ns)
        } else {
            c.get(class)
        };
        assert!(
            io > 2 * measured,
            "io_wait does not dominate {class:?} ({measured} ns past the gate's {gate_ns} ns): {c:?}"
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
    // Not runqueue: after each wakeup the threads wait for a CPU as long as the machine
    // is busy (on a loaded CI machine, half as long as they slept).
    for class in [
        LatencyClass::OnCpu,
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
    // Every child exits while its parent, the workload, is alive: its exit event names
    // that parent (the BPF exit record carries none).
    let root = traced
        .bundle
        .lifecycle
        .iter()
        .find(|e| e.kind == kernelkite::model::LifecycleKind::Fork && e.tid == e.pid)
        .unwrap()
        .ppid;
    let child_exits: Vec<_> = traced
        .bundle
        .lifecycle
        .iter()
        .filter(|e| e.kind == kernelkite::model::LifecycleKind::Exit)
        .filter(|e| e.tid == e.pid && e.pid != root)
        .collect();
    assert_eq!(child_exits.len() as u64, spawned);
    for e in &child_exits {
        assert_eq!(e.ppid, root, "{e:?}");
    }
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
    // Children that lived between two snapshots were never sampled: their RSS is not
    // measured and reads so (null, n/a), not as 0 B. Their CPU is eBPF's exact on_cpu.
    let unsampled: Vec<_> = traced
        .analysis
        .processes
        .iter()
        .filter(|p| p.frames == 0)
        .collect();
    assert!(!unsampled.is_empty(), "some child lived between snapshots");
    let json = kernelkite::report::summary::summary_json(&traced.analysis);
    for p in &unsampled {
        assert_eq!(p.peak_rss_bytes, None, "pid {}", p.pid);
        assert!(p.cpu_seconds.is_some(), "pid {}: on_cpu is measured", p.pid);
        let row = json["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["pid"] == p.pid)
            .unwrap();
        assert!(row["peak_rss_bytes"].is_null(), "{row}");
    }
    let tree = kernelkite::report::tree::tree_text(&traced.analysis);
    let line = tree
        .lines()
        .find(|l| {
            l.trim_start_matches(|c| " │├└─".contains(c))
                .starts_with(&format!("{} ", unsampled[0].pid))
        })
        .unwrap_or_else(|| panic!("{tree}"));
    assert!(line.ends_with("n/a"), "{line}");
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
    assert_events_lost_ok(v["events_lost"].as_u64());
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
    // In a mount namespace of its own, so another tracer on the machine (which keeps
    // tracefs busy) is neither disturbed nor in the way: the namespace's copy of the
    // mount is unmounted, kernelkite mounts it again there, and the shell says whether
    // it was gone before and back after.
    let tracefs = "/sys/kernel/tracing";
    let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
    let script = format!(
        "umount {tracefs} 2>/dev/null; \
         if grep -q ' {tracefs} ' /proc/self/mounts; then exit 98; fi; \
         \"$0\" \"$@\"; rc=$?; \
         grep -q ' {tracefs} ' /proc/self/mounts || exit 99; exit $rc"
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(kernelkite_bin())
        .env("KERNELKITE_HOOKS", "classic")
        .args(["--json", "trace", "--pid", &sleeper.id().to_string()])
        .args(["--duration", "1"])
        .output()
        .unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    match out.status.code() {
        Some(98) => panic!("could not unmount {tracefs} in a new mount namespace"),
        Some(99) => panic!("kernelkite did not mount {tracefs}"),
        _ => {}
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("classic tracepoints"), "{err}");
    assert!(
        err.contains(&format!("mounted tracefs at {tracefs}")),
        "{err}"
    );
    // A sleeper in nanosleep: its time is syscall_blocked.
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let blocked = summary["latency_class_shares"]["syscall_blocked"]
        .as_f64()
        .unwrap();
    assert!(blocked > 0.99, "{stdout}");
    assert_events_lost_ok(summary["events_lost"].as_u64());
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

/// A `sleep 30` to trace, killed when dropped.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap(),
        )
    }
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `trace ... -o tr.json | true`: the reader of stdout is gone when the report is
/// printed. The bundle is written first, and the closed pipe is no panic.
#[test]
fn a_closed_stdout_still_gets_the_bundle_written() {
    let Some(_serial) = ebpf_ready("a_closed_stdout_still_gets_the_bundle_written") else {
        return;
    };
    let target = Sleeper::start();
    let mut trace = RunningTrace::start(&[target.pid()], &["--duration", "0.5"]);
    drop(trace.child.stdout.take());
    let traced = trace.finish();
    assert!(
        !traced.stderr.iter().any(|l| l.contains("panicked")),
        "{:?}",
        traced.stderr
    );
    assert_eq!(traced.bundle.root_pids, vec![target.pid()]);
}

/// SIGHUP (the terminal or ssh session closed) ends a trace as SIGTERM does: the report
/// and the bundle are written.
#[test]
fn sighup_ends_the_trace_with_its_bundle() {
    let Some(_serial) = ebpf_ready("sighup_ends_the_trace_with_its_bundle") else {
        return;
    };
    let target = Sleeper::start();
    let trace = RunningTrace::start(&[target.pid()], &[]);
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(
        unsafe { libc::kill(trace.child.id() as i32, libc::SIGHUP) },
        0
    );
    let traced = trace.finish();
    assert!(
        traced.stderr.iter().any(|l| l.contains("stopped: hung up")),
        "{:?}",
        traced.stderr
    );
    assert_eq!(traced.bundle.root_pids, vec![target.pid()]);
    assert!(traced.stdout.contains("events lost"), "{}", traced.stdout);
}

/// Under nohup (SIGHUP ignored when it starts) a hangup does not stop the trace: it
/// runs to its `--duration`.
#[test]
fn under_nohup_a_hangup_does_not_stop_the_trace() {
    let Some(_serial) = ebpf_ready("under_nohup_a_hangup_does_not_stop_the_trace") else {
        return;
    };
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let target = Sleeper::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("nohup.json");
    let mut cmd = Command::new(kernelkite_bin());
    cmd.args([
        "trace",
        "--pid",
        &target.pid().to_string(),
        "--duration",
        "1.5",
        "-o",
    ])
    .arg(&bundle)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    // SAFETY: signal() is async-signal-safe; it only changes this child's disposition.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stderr = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let live = line.contains("hooks live");
        stderr.push(line);
        if live {
            break;
        }
    }
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGHUP) }, 0);
    stderr.extend(lines.map(Result::unwrap));
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?} {stderr:?}");
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("stopped: duration reached")),
        "{stderr:?}"
    );
    kernelkite::model::load_bundle(&bundle).unwrap();
}

/// Thread ids are reused (pid_max is 32768 on small machines): a traced child that gets
/// the pid of one that exited earlier in the session is a new thread. It must keep the
/// trace going until it exits (it was taken for dead, so the trace ended as soon as the
/// other targets had), and its frames must not carry the old thread's class times. The
/// pid is reused on purpose through ns_last_pid.
#[test]
fn a_traced_child_reusing_an_exited_ones_pid_is_a_new_thread() {
    use kernelkite::model::LifecycleKind;
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let Some(_serial) = ebpf_ready("a_traced_child_reusing_an_exited_ones_pid_is_a_new_thread")
    else {
        return;
    };
    // The first child sleeps 0.4 s (syscall_blocked); then, on `try`, a child that
    // should get its pid back; `kill` drops a try that got another pid.
    let script = "read go; sleep 0.4 & echo $!; wait; \
        while read cmd; do case $cmd in \
        try) sleep 1.5 & echo $! ;; kill) kill $!; wait $! ;; *) exit 0 ;; esac; done";
    let mut root = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let trace = RunningTrace::start(&[root.id() as i32], &["--follow"]);
    let mut stdin = root.stdin.take().unwrap();
    let mut stdout = BufReader::new(root.stdout.take().unwrap());
    let mut read_pid = || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        line.trim().parse::<u32>().unwrap()
    };
    stdin.write_all(b"go\n").unwrap();
    let first = read_pid();
    while std::path::Path::new(&format!("/proc/{first}")).exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut reused = false;
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (first - 1).to_string()).unwrap();
        stdin.write_all(b"try\n").unwrap();
        if read_pid() == first {
            reused = true;
            break;
        }
        stdin.write_all(b"kill\n").unwrap();
    }
    assert!(reused, "could not get the first child's pid again");
    // The root exits while the reusing child still sleeps.
    stdin.write_all(b"exit\n").unwrap();
    drop(stdin);
    assert!(root.wait().unwrap().success());
    let traced = trace.finish();
    traced.assert_no_events_lost();
    let events = |kind| -> Vec<u64> {
        (traced.bundle.lifecycle.iter())
            .filter(|e| e.kind == kind && e.tid == first as i32)
            .map(|e| e.t_ns)
            .collect()
    };
    let (forks, exits) = (events(LifecycleKind::Fork), events(LifecycleKind::Exit));
    assert_eq!(forks.len(), 2, "two children had pid {first}: {forks:?}");
    assert_eq!(
        exits.len(),
        2,
        "the trace ended before the child that reused pid {first} exited: exits at {exits:?}"
    );
    let (reused_at, reused_exit) = (forks[1], exits[1]);
    assert!(
        reused_exit - reused_at >= 1_400_000_000,
        "{forks:?} {exits:?}"
    );
    // Every frame of the second child shows at most the time it lived.
    let mut checked = 0;
    for frame in traced.bundle.frames.iter().filter(|f| f.t_ns > reused_at) {
        let threads = frame.processes.iter().flat_map(|p| &p.threads);
        for t in threads.filter(|t| t.tid == first as i32) {
            let total = t.class_ns.map_or(0, |c| c.total_ns());
            let lived = frame.t_ns - reused_at;
            assert!(
                total <= lived + 20_000_000,
                "frame at {} ns: pid {first} shows {total} ns of class time but the child reusing it lived {lived} ns",
                frame.t_ns
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no frame showed the child reusing pid {first}");
}

/// Threads that do not fit in the kernel's thread table are not traced, and are counted
/// as lost: here 5 threads exist at attach and the table holds 2, one slot and one
/// overflow entry (it held 65,536, and the threads past it were dropped without a word).
#[test]
fn threads_past_the_thread_table_are_counted_as_lost() {
    let Some(_serial) = ebpf_ready("threads_past_the_thread_table_are_counted_as_lost") else {
        return;
    };
    let (traced, _) = trace_workload(
        &["futex_stress", "--threads", "4", "--seconds", "0.5"],
        &["--max-threads", "1"],
    );
    assert_eq!(traced.bundle.events_lost, Some(3), "{:?}", traced.stderr);
    let lost = "events lost: 3";
    assert!(traced.stdout.contains(lost), "{}", traced.stdout);
}

/// `trace --max-frames` caps the frames as `run`'s does: the last frame keeps being
/// refreshed, the bundle says how many were dropped.
#[test]
fn trace_max_frames_keeps_refreshing_the_last_frame() {
    let Some(_serial) = ebpf_ready("trace_max_frames_keeps_refreshing_the_last_frame") else {
        return;
    };
    let (traced, _) = trace_workload(
        &["futex_stress", "--threads", "2", "--seconds", "0.6"],
        &["--max-frames", "3"],
    );
    let b = &traced.bundle;
    assert_eq!((b.frames.len(), b.frame_cap.max_frames), (3, 3));
    assert!(b.frame_cap.frames_dropped >= 5, "{:?}", b.frame_cap);
    // The last frame kept is the latest: the workload ran 0.6 s, in 50 ms frames.
    assert!(b.frames[1].t_ns < 300_000_000, "{}", b.frames[1].t_ns);
    assert!(b.frames[2].t_ns >= 550_000_000, "{}", b.frames[2].t_ns);
}

/// The kernel can skip a program run (its recursion guard, with other tracers on the
/// machine), an exit hook's too: the exited thread then stays in the thread table and
/// its process's target bit stays set. A process that is not traced and gets that pid
/// must not be traced through them; the fork hook forgets the stale entry and counts
/// the missed exit. The missed exit is made by hand: a thread table entry and a target
/// bit for a pid that is free, written into the trace's maps with bpftool.
#[test]
fn a_new_task_with_the_tid_of_a_missed_exit_is_not_traced() {
    use std::process::Stdio;
    let Some(_serial) = ebpf_ready("a_new_task_with_the_tid_of_a_missed_exit_is_not_traced") else {
        return;
    };
    if Command::new("bpftool").arg("version").output().is_err() {
        return skip::required(
            "a_new_task_with_the_tid_of_a_missed_exit_is_not_traced",
            "bpftool is not installed",
        );
    }
    let mut target = Command::new("sleep").arg("2").spawn().unwrap();
    let trace = RunningTrace::start(&[target.id() as i32], &["--duration", "3"]);
    let map_id = |name: &str| -> u32 {
        let held: Vec<u32> = bpf_ids_held_by(trace.child.id())
            .into_iter()
            .filter(|(kind, _)| kind == "map_id")
            .map(|(_, id)| id)
            .collect();
        let out = Command::new("bpftool")
            .args(["-j", "map", "show"])
            .output()
            .unwrap();
        let maps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (maps.as_array().unwrap().iter())
            .find(|m| m["name"] == name && held.contains(&(m["id"].as_u64().unwrap() as u32)))
            .and_then(|m| m["id"].as_u64())
            .unwrap_or_else(|| panic!("the trace holds no map {name}")) as u32
    };
    let hex = |bytes: &[u8]| -> Vec<String> { bytes.iter().map(|b| format!("{b:#04x}")).collect() };
    let update = |id: u32, key: &[u8], value: &[u8]| {
        let status = Command::new("bpftool")
            .args(["map", "update", "id", &id.to_string(), "key", "hex"])
            .args(hex(key).iter().map(|h| &h[2..]))
            .args(["value", "hex"])
            .args(hex(value).iter().map(|h| &h[2..]))
            .status()
            .unwrap();
        assert!(status.success(), "bpftool map update {id}");
    };
    // A free pid: the next one, taken by nobody yet.
    let pid = {
        let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        (last + 50..last + 1000)
            .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
            .unwrap()
    };
    let stale = kernelkite_common::bpf::ThreadState {
        tgid: pid,
        run_state: kernelkite_common::bpf::run_state::ON_CPU,
        sys_nr: kernelkite_common::bpf::NO_SYSCALL,
        ..Default::default()
    };
    // SAFETY: ThreadState is repr(C) with explicit padding: every byte is initialised.
    let stale_bytes = unsafe {
        std::slice::from_raw_parts(
            (&stale as *const kernelkite_common::bpf::ThreadState).cast::<u8>(),
            std::mem::size_of_val(&stale),
        )
    };
    update(map_id("THREADS"), &pid.to_le_bytes(), stale_bytes);
    update(
        map_id("TARGETS"),
        &(pid >> 6).to_le_bytes(),
        &(1u64 << (pid & 63)).to_le_bytes(),
    );
    let mut reuser = None;
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let mut p = Command::new(workload_bin())
            .args(["read_loop", "--count", "20000"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        if p.id() == pid {
            reuser = Some(p);
            break;
        }
        let _ = p.kill();
        let _ = p.wait();
    }
    let mut reuser = reuser.expect("could not get the free pid");
    assert!(reuser.wait().unwrap().success());
    target.wait().unwrap();
    let traced = trace.finish();
    assert!(
        traced.syscall_count("read") < 20_000,
        "the process with the stale entry's pid was traced: {:?}",
        traced.analysis.syscalls
    );
    assert!(
        traced
            .analysis
            .processes
            .iter()
            .all(|p| p.pid != pid as i32),
        "{:?}",
        (traced.analysis.processes.iter())
            .map(|p| (p.pid, &p.comm))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        traced.bundle.events_lost,
        Some(1),
        "the missed exit is counted"
    );
}

/// Run kernelkite with `args`; its stdout, after asserting it succeeded.
fn kk_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = Command::new(kernelkite_bin()).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kernelkite failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// A process blocked in one long nanosleep: its whole time is syscall_blocked, no call
/// completes. The syscall table shows the call in progress since the start with its
/// time (not that histograms need the eBPF backend, which this is), and `stacks` lists
/// syscall_blocked with its time (not that no class was asked for), all of it with the
/// stack /proc showed for the wait that began before tracing did.
#[test]
fn a_process_in_one_long_sleep_is_labelled_truthfully() {
    let Some(_serial) = ebpf_ready("a_process_in_one_long_sleep_is_labelled_truthfully") else {
        return;
    };
    // It checks the stacks report too, and --stacks needs tp_btf hooks.
    if stacks_refused_under_classic("trace") {
        return;
    }
    let sleeper = Sleeper::start();
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("sleep.bundle.json");
    let pid = sleeper.pid().to_string();
    let b = bundle.to_str().unwrap();
    let stdout = kk_ok(&[
        "trace",
        "--pid",
        &pid,
        "--duration",
        "1",
        "--stacks",
        "-o",
        b,
    ]);
    assert!(!stdout.contains("come from the eBPF backend"), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.contains("(in progress since start)"))
        .unwrap_or_else(|| panic!("no call in progress: {stdout}"));
    assert!(row.contains("nanosleep"), "{row}");
    assert!(
        stdout.contains("100.0% of every thread's time in syscall sleep classes"),
        "{stdout}"
    );
    let text = kk_ok(&["stacks", b]);
    assert!(!text.contains("classes asked for"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("syscall_blocked: "))
        .unwrap_or_else(|| panic!("no syscall_blocked line: {text}"));
    assert!(line.contains(", 0 ns without;"), "{text}");
    assert!(!text.contains("no stack: "), "{text}");
    assert!(text.contains("nanosleep"), "{text}");
    let doc: serde_json::Value = serde_json::from_str(&kk_ok(&["--json", "stacks", b])).unwrap();
    let blocked = doc["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["class"] == "syscall_blocked")
        .unwrap_or_else(|| panic!("no syscall_blocked class: {doc}"));
    let class_ns = blocked["class_ns"].as_u64().unwrap();
    assert!(class_ns > 500_000_000, "{blocked}");
    assert_eq!(
        blocked["without_stack_ns"].as_u64().unwrap() + blocked["stack_ns"].as_u64().unwrap(),
        class_ns,
        "{blocked}"
    );
    assert_eq!(blocked["without_stack_ns"], 0, "{blocked}");
    assert!(blocked["no_stacks_reason"].is_null(), "{blocked}");
    // The HTML report's stacks table gives the class its row.
    let html = dir.path().join("sleep.html");
    kk_ok(&["report", b, "-o", html.to_str().unwrap()]);
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(
        html.contains("<tr><td>syscall_blocked</td>"),
        "no syscall_blocked row"
    );
    assert!(
        html.contains("nanosleep"),
        "no nanosleep frame in the report"
    );
}

/// `trace --help` says what `--follow` does, and it does it: a child already running
/// when tracing starts is traced with `--follow` and not without.
#[test]
fn follow_traces_existing_children_and_help_says_so() {
    let help = kk_ok(&["trace", "--help"]);
    assert!(!help.contains("future children"), "{help}");
    assert!(help.contains("already running"), "{help}");
    let Some(_serial) = ebpf_ready("follow_traces_existing_children_and_help_says_so") else {
        return;
    };
    let mut parent = Command::new("sh")
        .args(["-c", "sleep 30 & wait"])
        .spawn()
        .unwrap();
    let ppid = parent.id();
    let children = format!("/proc/{ppid}/task/{ppid}/children");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let child: i64 = loop {
        let list = std::fs::read_to_string(&children).unwrap_or_default();
        if let Some(c) = list.split_whitespace().next() {
            break c.parse().unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "sh started no child");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let traced_pids = |follow: bool| -> Vec<i64> {
        let pid = ppid.to_string();
        let mut args = vec!["--json", "trace", "--pid", &pid, "--duration", "1"];
        if follow {
            args.push("--follow");
        }
        let doc: serde_json::Value = serde_json::from_str(&kk_ok(&args)).unwrap();
        doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_i64().unwrap())
            .collect()
    };
    let followed = traced_pids(true);
    let alone = traced_pids(false);
    let _ = Command::new("kill").arg(child.to_string()).status();
    let _ = parent.kill();
    let _ = parent.wait();
    assert!(followed.contains(&child), "{followed:?}");
    assert!(
        !alone.contains(&child) && alone.contains(&(ppid as i64)),
        "{alone:?}"
    );
}

/// A process whose whole life lies inside the trace: forked, stopped before its exec,
/// continued once the hooks are live, reaped with wait4. Its on_cpu is the kernel's
/// own CPU account of it (rusage) to within 0.1%, with CPU hogs beside it.
#[test]
fn on_cpu_of_a_whole_traced_life_equals_its_wait4_rusage() {
    use std::ffi::CString;
    let Some(_serial) = ebpf_ready("on_cpu_of_a_whole_traced_life_equals_its_wait4_rusage") else {
        return;
    };
    let _hogs = CpuHogs::start();
    let argv: Vec<CString> = [
        workload_bin().to_string_lossy().as_ref(),
        "futex_stress",
        "--threads",
        "4",
        "--seconds",
        "2",
        "--hold",
        "spin",
    ]
    .iter()
    .map(|s| CString::new(*s).unwrap())
    .collect();
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: the child calls only async-signal-safe functions (raise, execv, _exit) on
    // memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        unsafe {
            libc::raise(libc::SIGSTOP);
            libc::execv(ptrs[0], ptrs.as_ptr());
            libc::_exit(127);
        }
    }
    let mut status = 0;
    // SAFETY: plain syscalls on our own child.
    let stopped = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
    assert!(
        stopped == pid && libc::WIFSTOPPED(status),
        "child did not stop"
    );
    // What it ran before the trace (the fork's return, the raise): outside the window.
    let schedstat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    let before_trace_ns: u64 = schedstat
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let trace = RunningTrace::start(&[pid], &[]);
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe {
        assert_eq!(libc::kill(pid, libc::SIGCONT), 0);
        assert_eq!(libc::wait4(pid, &mut status, 0, &mut rusage), pid);
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let traced = trace.finish();
    if classic_hooks() {
        // Clock-based on_cpu (steal and irq time are in it), steal not measured; the CPU
        // hogs make the kernel skip more classic-tracepoint runs than other tests allow.
        assert_eq!(traced.analysis.latency_classes.steal, 0);
        return;
    }
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    let rusage_ns = (us(rusage.ru_utime) + us(rusage.ru_stime)) * 1000 - before_trace_ns;
    let on_cpu_ns = traced.analysis.latency_classes.on_cpu;
    let ratio = on_cpu_ns as f64 / rusage_ns as f64;
    eprintln!(
        "on_cpu {on_cpu_ns} ns, rusage {rusage_ns} ns, ratio {ratio:.5}, steal {} ns",
        traced.analysis.latency_classes.steal
    );
    // 0.1 %. What remains above the kernel's own figure is the rusage's blind spot: a
    // non-leader thread's runtime after __exit_signal added its (not refreshed)
    // sum_exec_runtime to the process total, which the exit record includes.
    assert!(
        (ratio - 1.0).abs() <= 0.001,
        "on_cpu {on_cpu_ns} ns vs wait4 rusage {rusage_ns} ns: ratio {ratio:.5}"
    );
}

/// Two threads writing through one shared fd to a tmpfs file (glibc `write`): they wait
/// for each other on the file's position lock (`fdget_pos`), an uninterruptible sleep
/// without `in_iowait`. With tp_btf hooks that is lock_wait, not io_wait: no device is
/// involved. (Classic tracepoints cannot read `in_iowait` and keep taking a D-state
/// sleep in a file syscall for io_wait.)
#[test]
fn a_file_position_lock_is_lock_wait_not_io_wait() {
    let Some(_serial) = ebpf_ready("a_file_position_lock_is_lock_wait_not_io_wait") else {
        return;
    };
    let _hogs = CpuHogs::start();
    let (traced, result) =
        trace_workload(&["shared_write", "--threads", "2", "--count", "3000"], &[]);
    assert_eq!(result["tmpfs"], true, "{result}");
    traced.assert_no_events_lost();
    traced.assert_classes_sum_to_wall();
    // Every write counted (the gate's read is not a write; the result line is one).
    assert!(traced.syscall_count("write") >= 6000);
    let pid = traced.bundle.root_pids[0];
    let workers: Vec<_> = traced
        .analysis
        .threads
        .iter()
        .filter(|t| t.pid == pid && t.tid != pid)
        .collect();
    assert_eq!(workers.len(), 2, "{workers:?}");
    let lock: u64 = workers
        .iter()
        .map(|t| t.classes.get(LatencyClass::LockWait))
        .sum();
    let io: u64 = workers
        .iter()
        .map(|t| t.classes.get(LatencyClass::IoWait))
        .sum();
    if classic_hooks() {
        // No in_iowait on classic tracepoints: the D-state sleep in write() is taken
        // for io_wait, as docs/PROFILE.md says, and little of it for lock_wait.
        assert!(
            io > 0 && lock * 10 <= io,
            "classic: lock_wait {lock} ns, io_wait {io} ns"
        );
        return;
    }
    // A page fault on the binary can wait for the disk (in_iowait) on a cold cache;
    // the lock waits are what dominates.
    assert!(
        lock > 0 && io * 10 <= lock,
        "lock_wait {lock} ns, io_wait {io} ns"
    );
}

/// `/proc/PID/task/*/schedstat` of every thread: tid → (sum_exec_runtime ns,
/// run_delay ns).
fn task_schedstats(pid: i32) -> std::collections::BTreeMap<i32, (u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let entry = entry.unwrap();
        let tid: i32 = entry.file_name().to_string_lossy().parse().unwrap();
        let text = std::fs::read_to_string(entry.path().join("schedstat")).unwrap();
        let mut fields = text.split_whitespace().map(|v| v.parse::<u64>().unwrap());
        out.insert(tid, (fields.next().unwrap(), fields.next().unwrap()));
    }
    out
}

/// `trace` of a live multi-threaded process, started before the trace and running
/// after it, beside CPU hogs: per thread, on_cpu equals the move of the kernel's own
/// counter (schedstat field 1, `se.sum_exec_runtime`) and runqueue the move of
/// `run_delay` (field 2), both read by the test when the trace was live and before it
/// stopped (the threads are asleep then, so nothing moves between the test's reads
/// and the trace's ends); the bundle's frames carry the same counters.
#[test]
fn a_live_process_traced_mid_life_matches_schedstat_per_thread() {
    let Some(_serial) = ebpf_ready("a_live_process_traced_mid_life_matches_schedstat_per_thread")
    else {
        return;
    };
    let _hogs = CpuHogs::start();
    let mut w = GatedWorkload::spawn(&[
        "cpu_stress",
        "--threads",
        "4",
        "--seconds",
        "1.5",
        "--linger",
    ]);
    let pid = w.pid;
    let trace = RunningTrace::start(&[pid], &[]);
    let before = task_schedstats(pid);
    w.go();
    let result = w.read_result();
    assert_eq!(result["threads"], 4, "{result}");
    // Every thread is parked now (the spinners in a channel recv, the main thread on stdin).
    let after = task_schedstats(pid);
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(
        unsafe { libc::kill(trace.child.id() as i32, libc::SIGTERM) },
        0
    );
    let traced = trace.finish();
    w.go(); // the second line: the threads are released and the process exits
    w.finish_silently();
    traced.assert_no_events_lost();
    assert_eq!(before.len(), 5, "{before:?}");
    if classic_hooks() {
        // Clock-based on_cpu: steal and irq time are in it, steal is not measured.
        assert_eq!(traced.analysis.latency_classes.steal, 0);
        return;
    }
    let mut worst_on_cpu = 0.0f64;
    let mut worst_runqueue = 0.0f64;
    // The spinners: asleep in a channel recv when the trace attached and when it ended (the
    // workload waits for that). The main thread is not held to it: it may still be on a
    // CPU or queued after printing `ready` when the trace attaches, and a thread's
    // first interval seen at attach counts from that moment (docs/PROFILE.md).
    let spinners: Vec<i32> = before.keys().copied().filter(|&t| t != pid).collect();
    assert_eq!(spinners.len(), 4, "{before:?}");
    for tid in &spinners {
        let ((cpu0, delay0), (cpu1, delay1)) = (before[tid], after[tid]);
        let row = traced
            .analysis
            .threads
            .iter()
            .find(|t| t.tid == *tid)
            .unwrap_or_else(|| panic!("thread {tid} not in the analysis"));
        let (kernel_cpu, kernel_delay) = (cpu1 - cpu0, delay1 - delay0);
        let (on_cpu, runqueue) = (row.classes.on_cpu, row.classes.runqueue);
        let cpu_err = on_cpu.abs_diff(kernel_cpu) as f64 / kernel_cpu.max(1) as f64;
        let queue_err = runqueue.abs_diff(kernel_delay) as f64 / kernel_delay.max(1) as f64;
        eprintln!(
            "tid {tid}: on_cpu {on_cpu} vs schedstat {kernel_cpu} ({cpu_err:.5}), runqueue {runqueue} vs run_delay {kernel_delay} ({queue_err:.5}), steal {}",
            row.classes.steal
        );
        // The spinners ran and waited for a CPU (how much depends on the machine's load:
        // beside two hogs on a busy 2-CPU VM, 60 ms of 1.5 s ran).
        assert!(
            kernel_cpu > 1_000_000 && kernel_delay > 1_000_000,
            "tid {tid}: schedstat moved {kernel_cpu} ns on CPU, {kernel_delay} ns queued"
        );
        // The bundle's own frames hold the same raw counters, read at the frames' times
        // (the first at attach, before the test's first read): asleep at both ends, the
        // thread moved them no further.
        let framed: Vec<_> = traced
            .bundle
            .frames
            .iter()
            .flat_map(|f| &f.processes)
            .flat_map(|p| &p.threads)
            .filter(|t| t.tid == *tid)
            .filter_map(|t| t.schedstat)
            .collect();
        let (first, last) = (framed.first().unwrap(), framed.last().unwrap());
        let (framed_cpu, framed_delay) = (
            last.on_cpu_ns - first.on_cpu_ns,
            last.runqueue_ns - first.runqueue_ns,
        );
        // The test's reads lie inside the frames' window. (Now and then a spinner moves
        // a little between them, microseconds on CPU, under a millisecond queued: a
        // wakeup of the parked thread the test cannot rule out; the frames, read at the
        // same instants as the class counters, are the exact reference.)
        assert!(
            framed_cpu >= kernel_cpu && framed_delay >= kernel_delay,
            "tid {tid}: the bundle's schedstat moved ({framed_cpu}, {framed_delay}) ns, less than between the test's reads"
        );
        let framed_cpu_err = on_cpu.abs_diff(framed_cpu) as f64 / framed_cpu as f64;
        let framed_queue_err = runqueue.abs_diff(framed_delay) as f64 / framed_delay as f64;
        eprintln!(
            "tid {tid}: against the bundle's schedstat: on_cpu {framed_cpu_err:.5}, runqueue {framed_queue_err:.5}"
        );
        let (cpu_err, queue_err) = (cpu_err.max(framed_cpu_err), queue_err.max(framed_queue_err));
        worst_on_cpu = worst_on_cpu.max(cpu_err);
        worst_runqueue = worst_runqueue.max(queue_err);
    }
    eprintln!("worst spinner: on_cpu {worst_on_cpu:.5}, runqueue {worst_runqueue:.5}");
    // A sched_switch run the kernel skipped (its BPF recursion guard, more frequent with
    // other tracers on the machine; the trace says so on stderr) leaves a switch-in
    // unseen: that timeslice reads as runqueue, not lost. Then each spinner's on_cpu +
    // runqueue must still be schedstat's, to the same 0.1 %.
    let skipped = (traced.stderr.iter()).any(|l| l.contains("the kernel skipped"));
    if skipped && worst_on_cpu > 0.001 {
        eprintln!("the kernel skipped program runs: on_cpu + runqueue held to schedstat instead");
        for tid in &spinners {
            let ((cpu0, delay0), (cpu1, delay1)) = (before[tid], after[tid]);
            let row = (traced.analysis.threads.iter())
                .find(|t| t.tid == *tid)
                .unwrap();
            let kernel = (cpu1 - cpu0) + (delay1 - delay0);
            let ours = row.classes.on_cpu + row.classes.runqueue;
            let err = ours.abs_diff(kernel) as f64 / kernel.max(1) as f64;
            assert!(err <= 0.001, "tid {tid}: on_cpu + runqueue off by {err:.5}");
        }
        return;
    }
    assert!(worst_on_cpu <= 0.001, "on_cpu off by {worst_on_cpu:.5}");
    // Not 0.1 %: run_delay runs between the rq clock reads at the start of the two
    // `__schedule` calls, the hooks between the tracepoints after each pick, and where
    // an interval's steal covers the kernel's earlier start of the runtime, that gap
    // stays in runqueue (docs/PROFILE.md). Measured beside two hogs (five runs):
    // 0.000-0.4 % per spinner, either sign.
    assert!(
        worst_runqueue <= 0.02,
        "runqueue off by {worst_runqueue:.5}"
    );
}

/// The overhead benchmark's reference programs (`kernelkite bench-floor`, hidden) load
/// and attach on this kernel: the empty, bit, clock, scheduler and waker floors each
/// name the programs they attached and hold one loaded program per name, and detach
/// when their stdin closes: every program, link and map they held is gone from the
/// kernel after.
#[test]
fn the_benchmark_floors_load_attach_and_detach() {
    let Some(_serial) = ebpf_ready("the_benchmark_floors_load_attach_and_detach") else {
        return;
    };
    let pid = std::process::id().to_string();
    let floors: [(Vec<&str>, &[&str]); 5] = [
        (vec![], &["floor_sys_enter", "floor_sys_exit"]),
        (
            vec!["--bit", "--pid", &pid],
            &["floor_bit_sys_enter", "floor_bit_sys_exit"],
        ),
        (
            vec!["--clock", "--pid", &pid],
            &["floor_clock_sys_enter", "floor_clock_sys_exit"],
        ),
        (
            vec!["--sched", "--pid", &pid],
            &["floor_sched_switch", "floor_sched_wakeup"],
        ),
        (
            vec!["--wakers", "--pid", &pid],
            &[
                "floor_sched_switch",
                "floor_sched_waking",
                "floor_wakers_sched_wakeup",
            ],
        ),
    ];
    for (args, programs) in floors {
        let mut child = Command::new(kernelkite_bin())
            .arg("bench-floor")
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        // Attached now (the line says so): what it holds, read before it lets go.
        let held = bpf_ids_held_by(child.id());
        let progs = held.iter().filter(|(kind, _)| kind == "prog_id").count();
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "bench-floor {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for program in programs {
            assert!(line.contains(program), "bench-floor {args:?}: {line}");
        }
        assert_eq!(progs, programs.len(), "bench-floor {args:?} held {held:?}");
        assert_bpf_ids_gone(&held);
    }
}
