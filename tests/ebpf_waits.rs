//! Real-kernel tests of waker aggregation: `kernelkite run` of workloads whose wakers
//! are known, read back through `kernelkite waits --json` and `summary --json` as users
//! read them.

#[path = "support/ebpf.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use support::*;

/// `kernelkite run <tempdir>/b.json -- command...`; the directory lives with the guard.
fn kk_run(command: &[&str]) -> (Output, PathBuf, tempfile::TempDir) {
    kk_run_env(command, &[])
}

/// [`kk_run`] with `env` set for kernelkite.
fn kk_run_env(command: &[&str], env: &[(&str, &str)]) -> (Output, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let out = output_ok(
        "run",
        Command::new(kernelkite_bin())
            .envs(env.iter().copied())
            .arg("run")
            .arg(&bundle)
            .arg("--")
            .args(command),
    );
    (out, bundle, dir)
}

/// N of kernelkite's "the kernel skipped N runs of the programs" line, or 0.
fn skipped_program_runs(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.split("the kernel skipped ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn kk_json(command: &str, bundle: &Path) -> Value {
    let out = Command::new(kernelkite_bin())
        .args(["--json", command])
        .arg(bundle)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn threads(waits: &Value) -> &Vec<Value> {
    waits["threads"].as_array().expect("threads list")
}

/// (ns, count) of a thread's sleeps of `class` woken as `pred` says.
fn woken(t: &Value, class: &str, pred: impl Fn(&Value) -> bool) -> (u64, u64) {
    let mut sum = (0, 0);
    for w in t["woken_by"].as_array().unwrap() {
        if w["class"] == class && pred(w) {
            sum.0 += w["ns"].as_u64().unwrap();
            sum.1 += w["count"].as_u64().unwrap();
        }
    }
    sum
}

fn workload() -> String {
    workload_bin().to_string_lossy().into_owned()
}

#[test]
fn each_lock_waiter_is_woken_by_the_other_workers() {
    let Some(_serial) = ebpf_ready("each_lock_waiter_is_woken_by_the_other_workers") else {
        return;
    };
    let w = workload();
    let (_, bundle, _dir) = kk_run(&[&w, "futex_stress", "--threads", "3", "--seconds", "1"]);
    let waits = kk_json("waits", &bundle);
    let workers: Vec<&Value> = (threads(&waits).iter())
        .filter(|t| t["comm"].as_str().unwrap().starts_with("contend-"))
        .collect();
    assert_eq!(workers.len(), 3, "{waits:#}");
    // std's Mutex is not fair: a worker that unlocks and locks again at once can take
    // most turns and seldom wait (one had 1 lock wait and 889 holds in a CI run), while
    // the others wait for it. So at least two workers wait often.
    let often = (workers.iter())
        .filter(|t| woken(t, "lock_wait", |_| true).1 >= 20)
        .count();
    assert!(often >= 2, "few lock waits: {waits:#}");
    for t in workers {
        let tid = t["tid"].as_i64().unwrap();
        let (all_ns, _) = woken(t, "lock_wait", |_| true);
        // The others: the other workers, and the main thread, whose arrival at the
        // start barrier (a Mutex and Condvar: futex waits) releases the workers waiting
        // there (16 ms of 690 in a loaded CI run).
        let pid = t["pid"].as_i64();
        let (by_others_ns, _) = woken(t, "lock_wait", |w| {
            w["kind"] == "thread" && w["tid"].as_i64() != Some(tid) && w["pid"].as_i64() == pid
        });
        // A wakeup whose sched_waking the kernel skipped (its recursion guard) is taken
        // for whoever runs the sched_wakeup: at most a trace of the time.
        assert!(
            by_others_ns as f64 >= 0.98 * all_ns as f64,
            "lock waits of {tid} woken by others: {by_others_ns} of {all_ns}: {t:#}"
        );
        assert_eq!(
            woken(t, "lock_wait", |w| w["tid"].as_i64() == Some(tid)).1,
            0,
            "a thread does not release its own lock wait: {t:#}"
        );
    }
}

/// Every sleep that ended is added to its waker, whichever home the (wakee, class,
/// waker) entry has: its slot, or the overflow map (`KERNELKITE_WAKER_SLOTS=1` leaves
/// one slot, so nearly every entry overflows). So each worker's wakers add up to its
/// sleep time, with slots and without.
#[test]
fn wakers_add_up_to_the_sleep_time_in_slots_and_in_the_overflow_map() {
    let Some(_serial) =
        ebpf_ready("wakers_add_up_to_the_sleep_time_in_slots_and_in_the_overflow_map")
    else {
        return;
    };
    let w = workload();
    for slots in ["1", "4096"] {
        let (_, bundle, _dir) = kk_run_env(
            &[&w, "futex_stress", "--threads", "3", "--seconds", "1"],
            &[("KERNELKITE_WAKER_SLOTS", slots)],
        );
        let waits = kk_json("waits", &bundle);
        let workers: Vec<&Value> = (threads(&waits).iter())
            .filter(|t| t["comm"].as_str().unwrap().starts_with("contend-"))
            .collect();
        assert_eq!(workers.len(), 3, "{waits:#}");
        let mut waiting = 0;
        for t in workers {
            let entries = t["woken_by"].as_array().unwrap();
            let ns: u64 = entries.iter().map(|w| w["ns"].as_u64().unwrap()).sum();
            let sleep_ns = t["sleep_ns"].as_u64().unwrap();
            // Within 1 %: with slots or without, one worker a run had about a
            // millisecond of its 990 asleep without a waker (cause not found).
            assert!(
                ns as f64 >= 0.99 * sleep_ns as f64 && ns <= sleep_ns,
                "slots {slots}: wakers {ns} ns of {sleep_ns} ns asleep: {t:#}"
            );
            if woken(t, "lock_wait", |_| true).1 >= 20 {
                waiting += 1;
            }
        }
        // Many wakeups, many entries: std's Mutex is unfair, but two workers wait often.
        assert!(waiting >= 2, "slots {slots}: few lock waits: {waits:#}");
    }
}

#[test]
fn a_pipeline_consumer_is_woken_by_the_producer() {
    let Some(_serial) = ebpf_ready("a_pipeline_consumer_is_woken_by_the_producer") else {
        return;
    };
    let w = workload();
    let script = format!("{w} produce --count 100 --gap-ms 2 | {w} consume");
    let (out, bundle, _dir) = kk_run(&["sh", "-c", &script]);
    // The producer says its pid on stderr (its stdout is the pipe).
    let stderr = String::from_utf8_lossy(&out.stderr);
    let producer: Value = (stderr.lines())
        .find(|l| l.contains("\"workload\":\"produce\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no producer line: {stderr}"));
    let producer_pid = producer["pid"].as_i64().unwrap();
    let waits = kk_json("waits", &bundle);
    // The consumer: the thread with the most blocking-syscall sleeps, not the producer.
    let consumer = (threads(&waits).iter())
        .filter(|t| t["pid"].as_i64() != Some(producer_pid))
        .max_by_key(|t| woken(t, "syscall_blocked", |_| true).1)
        .unwrap();
    let (all_ns, all_count) = woken(consumer, "syscall_blocked", |_| true);
    assert!(all_count >= 50, "consumer read sleeps: {consumer:#}");
    let (by_producer_ns, _) = woken(consumer, "syscall_blocked", |w| {
        w["kind"] == "thread" && w["pid"].as_i64() == Some(producer_pid)
    });
    assert!(
        by_producer_ns as f64 >= 0.9 * all_ns as f64,
        "consumer woken by producer {producer_pid}: {by_producer_ns} of {all_ns}: {consumer:#}"
    );
}

#[test]
fn a_pool_with_idle_workers_leads_with_the_busy_one() {
    let Some(_serial) = ebpf_ready("a_pool_with_idle_workers_leads_with_the_busy_one") else {
        return;
    };
    let w = workload();
    let (_, bundle, _dir) = kk_run(&[&w, "pool", "--idle", "3", "--seconds", "1"]);
    let waits = kk_json("waits", &bundle);
    for i in 0..3 {
        let name = format!("idle-{i}");
        let t = (threads(&waits).iter())
            .find(|t| t["comm"] == name.as_str())
            .unwrap_or_else(|| panic!("no {name}: {waits:#}"));
        assert_eq!(t["idle"], true, "{t:#}");
    }
    assert!(
        !threads(&waits)
            .iter()
            .any(|t| t["comm"] == "busy" && t["idle"] == true),
        "{waits:#}"
    );
    let summary = kk_json("summary", &bundle);
    assert!(
        summary["idle_threads"].as_u64().unwrap() >= 3,
        "{summary:#}"
    );
    // The headline (the busy threads' classes) is the busy thread's CPU, not the idle
    // workers' condvar waits.
    let busy = &summary["busy_latency_classes"];
    let ns = |c: &str| busy[c].as_u64().unwrap();
    let running = ns("on_cpu") + ns("runqueue") + ns("steal");
    let total: u64 = busy
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(running as f64 >= 0.8 * total as f64, "{busy:#}");
    assert!(ns("on_cpu") > ns("lock_wait"), "{busy:#}");
}

/// Workers still parked when their process exits are woken by the kernel to die, not
/// by work: that last sleep is `not_woken` with source `group_exit`, never a wakeup
/// by the thread that called exit, so the workers are idle, not waiting on main.
#[test]
fn workers_parked_until_their_process_exits_are_not_woken_by_the_exit() {
    let Some(_serial) =
        ebpf_ready("workers_parked_until_their_process_exits_are_not_woken_by_the_exit")
    else {
        return;
    };
    let w = workload();
    let (_, bundle, _dir) = kk_run(&[
        &w,
        "pool",
        "--idle",
        "3",
        "--seconds",
        "0.5",
        "--leave-parked",
    ]);
    let waits = kk_json("waits", &bundle);
    // The workers: the threads but the main one that slept most of their life (`busy`
    // spins). Not by name: on a loaded machine a worker can go unsampled, and exit
    // with its name unrecorded.
    let workers: Vec<&Value> = (threads(&waits).iter())
        .filter(|t| {
            let (sleep, wall) = (
                t["sleep_ns"].as_u64().unwrap(),
                t["wall_ns"].as_u64().unwrap(),
            );
            t["tid"] != t["pid"] && sleep as f64 > 0.8 * wall as f64
        })
        .collect();
    assert_eq!(workers.len(), 3, "{waits:#}");
    for t in workers {
        assert_eq!(t["idle"], true, "{t:#}");
        let (exit_ns, exits) = woken(t, "lock_wait", |w| {
            w["kind"] == "not_woken" && w["source"] == "group_exit"
        });
        assert_eq!(exits, 1, "{t:#}");
        let (by_threads, _) = woken(t, "lock_wait", |w| w["kind"] == "thread");
        // The parked sleep is the worker's whole life after it started (the gate and the
        // 0.5 s of work); whatever a thread woke is the startup's brief lock hand-off.
        assert!(exit_ns >= 400_000_000, "{t:#}");
        assert!(by_threads < exit_ns / 10, "{t:#}");
    }
}

#[test]
fn sleep_and_poll_timeouts_are_woken_by_a_timer() {
    let Some(_serial) = ebpf_ready("sleep_and_poll_timeouts_are_woken_by_a_timer") else {
        return;
    };
    let w = workload();
    let (out, bundle, _dir) = kk_run(&[&w, "timeouts", "--count", "20", "--ms", "5"]);
    let result: Value = serde_json::from_slice(out.stdout.trim_ascii()).unwrap();
    assert_eq!(result["poll_timeouts"], 20);
    let waits = kk_json("waits", &bundle);
    let t = (threads(&waits).iter())
        .max_by_key(|t| woken(t, "syscall_blocked", |_| true).1)
        .unwrap();
    let (timer_ns, timer_count) = woken(t, "syscall_blocked", |w| {
        w["kind"] == "interrupt" && w["source"] == "timer"
    });
    // The command's wait in `run`'s gate, until kernelkite releases it to exec once the
    // hooks are live, is woken by kernelkite: as long as attach took, not a timeout.
    let (all_ns, _) = woken(t, "syscall_blocked", |w| w["comm"] != "kernelkite");
    // A wakeup from an interrupt that arrives while the wakeup hook already runs on that
    // CPU is skipped by the kernel's recursion guard (a busy machine has many wakeups):
    // its sleep then has no waker. kernelkite counts such runs and says so.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let skipped = skipped_program_runs(&stderr);
    // Known and open (issue 16's note): now and then, with no skipped run, one sleep of
    // the 40 is closed without its timer having been seen: by the switch hooks (its
    // wakeup unseen; its time is then left without a waker) or at a wakeup run on an
    // idle CPU outside any interrupt the hooks saw (an interrupt of unknown source; a
    // loaded CI run, once in about a hundred runs). Never given to a wrong waker: at most
    // one sleep missing, and then a sleep's worth of time without a waker or unknown.
    let attributed_ns: u64 = (t["woken_by"].as_array().unwrap().iter())
        .map(|w| w["ns"].as_u64().unwrap())
        .sum();
    let unattributed_ns = t["sleep_ns"].as_u64().unwrap() - attributed_ns;
    let (unknown_ns, unknown_count) = woken(t, "syscall_blocked", |w| {
        w["kind"] == "interrupt" && w["source"] == "unknown"
    });
    let stray_ns = unattributed_ns + unknown_ns;
    let missing = 40u64.saturating_sub(timer_count + skipped);
    assert!(
        missing == 0
            || (missing == 1
                && unknown_count <= 1
                && (4_000_000..=25_000_000).contains(&stray_ns)),
        "20 sleeps and 20 poll timeouts ({skipped} program runs skipped by the kernel, {unattributed_ns} ns without a waker): {t:#}\n{stderr}"
    );
    assert!(timer_ns as f64 >= 0.8 * all_ns as f64, "{t:#}");
}

/// A condvar wait nobody signals ends by its own timeout: lock_wait whose waker is a
/// timer, and `waits` says the wait timed out, never that anything released it (issue
/// 37: a timeout read "a timer released it").
#[test]
fn a_condvar_wait_that_times_out_is_said_to_time_out() {
    let Some(_serial) = ebpf_ready("a_condvar_wait_that_times_out_is_said_to_time_out") else {
        return;
    };
    let w = workload();
    let (out, bundle, _dir) = kk_run(&[&w, "condvar_timeouts", "--count", "20", "--ms", "10"]);
    let result: Value = serde_json::from_slice(out.stdout.trim_ascii()).unwrap();
    assert_eq!(result["timed_out"], 20, "{result}");
    let waits = kk_json("waits", &bundle);
    let t = (threads(&waits).iter())
        .max_by_key(|t| woken(t, "lock_wait", |_| true).0)
        .unwrap();
    let (timer_ns, timer_count) = woken(t, "lock_wait", |w| {
        w["kind"] == "interrupt" && w["source"] == "timer"
    });
    let (all_ns, _) = woken(t, "lock_wait", |_| true);
    // 20 waits of 10 ms: the kernel's recursion guard can skip a wakeup's hook now and
    // then (a busy machine); most are there.
    assert!(timer_count >= 18, "{t:#}");
    assert!(timer_ns as f64 >= 0.9 * all_ns as f64, "{t:#}");
    let text = Command::new(kernelkite_bin())
        .arg("waits")
        .arg(&bundle)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let tid = t["tid"].as_i64().unwrap();
    let sentence = text
        .lines()
        .skip_while(|l| !l.contains(&format!("tid {tid}")))
        .find(|l| l.contains("in lock_wait"))
        .unwrap_or_else(|| panic!("no lock_wait sentence for tid {tid}:\n{text}"));
    assert!(
        sentence.contains("a timer ended it: the wait timed out"),
        "{sentence}\n{text}"
    );
    assert!(!text.contains("released"), "{text}");
}

#[test]
fn a_bundle_without_wakeup_data_exits_2_saying_why() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("samples/api-server-ebpf.bundle.json");
    for json in [false, true] {
        let mut cmd = Command::new(kernelkite_bin());
        if json {
            cmd.arg("--json");
        }
        let out = cmd.arg("waits").arg(&sample).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("has no wakeup data"), "{err}");
    }
}

/// A shell running 17,000 short children is woken by each one as it exits: one
/// (wakee, class, waker) entry each, more than the kernel's waker table holds (16,384).
/// The entries of wakers that are gone are folded out of it, so none of those wakeups is
/// lost. Before, a 10-minute soak lost 4.8 M waker updates this way.
#[test]
fn a_churn_of_short_wakers_does_not_fill_the_waker_table() {
    let Some(_serial) = ebpf_ready("a_churn_of_short_wakers_does_not_fill_the_waker_table") else {
        return;
    };
    let children = 17_000;
    let script = format!("i=0; while [ $i -lt {children} ]; do /bin/true; i=$((i+1)); done");
    let (_, bundle, _dir) = kk_run(&["sh", "-c", &script]);
    let raw: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let lost = raw["events_lost_by_cause"]["waker_updates"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(
        lost, 0,
        "waker updates lost: {}",
        raw["events_lost_by_cause"]
    );
    let waits = kk_json("waits", &bundle);
    let shell = (threads(&waits).iter())
        .find(|t| t["comm"] == "sh")
        .expect("the shell's thread");
    let woken_by_threads: u64 = (shell["woken_by"].as_array().unwrap().iter())
        .filter(|w| w["kind"] == "thread")
        .map(|w| w["count"].as_u64().unwrap())
        .sum();
    assert!(
        woken_by_threads >= children,
        "{woken_by_threads} wakeups of the shell by threads, {children} children"
    );
}
