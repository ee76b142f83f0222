//! Real-kernel tests of `kernelkite top` (eBPF backend) in a real terminal: a futex
//! workload's row must show lock_wait as its dominant class and futex in the syscall
//! panel, watched by pid and system-wide; `--record` writes a recording `replay`
//! reads; `--stacks` shows the lock_wait stacks. See tests/support/ebpf.rs and tmux.rs.

#[path = "support/ebpf.rs"]
mod support;
#[path = "support/tmux.rs"]
mod tmux;

use std::time::Duration;

use support::*;
use tmux::{shell_quote, tmux_ready, Tmux};

const WAIT: Duration = Duration::from_secs(30);

/// The table line of process `pid`.
fn row_of(screen: &str, pid: i32) -> Option<String> {
    let pid = pid.to_string();
    screen
        .lines()
        .find(|l| l.split_whitespace().next() == Some(pid.as_str()))
        .map(str::to_string)
}

fn futex_row_is_lock_wait(screen: &str, pid: i32) -> bool {
    row_of(screen, pid).is_some_and(|l| l.contains("futex_stress") || l.contains("kk-workload"))
        && row_of(screen, pid).is_some_and(|l| l.contains("lock_wait"))
        && screen.lines().any(|l| l.starts_with("futex "))
}

fn watch_futex_workload(test: &str, top_args: &str, filter_by_pid: bool) {
    let Some(_serial) = ebpf_ready(test) else {
        return;
    };
    if !tmux_ready(test) {
        return;
    }
    let mut workload = GatedWorkload::spawn(&["futex_stress", "--threads", "4", "--seconds", "6"]);
    let pid = workload.pid;
    let top_args = top_args.replace("{pid}", &pid.to_string());
    let cmd = format!(
        "{} --backend ebpf top {top_args} --refresh 0.5",
        shell_quote(&kernelkite_bin().to_string_lossy())
    );
    let t = Tmux::start(test, &cmd, 160, 40);
    let s = t.wait_for(WAIT, |s| s.contains("hooks ·"));
    assert!(
        s.contains("backend ebpf ·") && s.contains("(all exact)"),
        "{s}"
    );
    if filter_by_pid {
        t.keys(&["/"]);
        t.type_text(&pid.to_string());
        t.keys(&["Enter"]);
    }
    workload.go();
    let s = t.wait_for(WAIT, |s| futex_row_is_lock_wait(s, pid));
    assert!(futex_row_is_lock_wait(&s, pid), "{s}");
    assert!(s.contains("events lost 0"), "{s}");
    let row = row_of(&s, pid).unwrap();
    // Five threads (main + 4 contenders): expand them, each a row of its own.
    t.keys(&["Down", "Enter"]);
    let s = t.wait_for(WAIT, |s| s.matches("└ ").count() >= 5);
    assert!(s.matches("└ ").count() >= 5, "{s}");
    // A contender's row names its main waker: another of the workload's threads (each
    // releases the lock the others wait for).
    let s = t.wait_for(WAIT, |s| woken_by_a_sibling(s).is_some());
    assert!(woken_by_a_sibling(&s).is_some(), "{s}");
    t.keys(&["q"]);
    let s = t.wait_for(WAIT, |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(!t.alternate_screen());
    let result = workload.finish();
    assert!(result.is_object(), "{result}");
    eprintln!("{test}: {row}");
}

/// A thread row in lock_wait whose main waker (`← COMM (TID)`) is another thread row
/// of the screen: (waiter tid, waker tid).
fn woken_by_a_sibling(screen: &str) -> Option<(i32, i32)> {
    let rows: Vec<(i32, &str)> = (screen.lines())
        .filter(|l| l.contains("└ "))
        .filter_map(|l| Some((l.split_whitespace().next()?.parse().ok()?, l)))
        .collect();
    rows.iter().find_map(|&(tid, line)| {
        let (_, waker) = line.rsplit_once(" ← ")?;
        let waker_tid: i32 = waker
            .trim()
            .rsplit_once('(')?
            .1
            .strip_suffix(')')?
            .parse()
            .ok()?;
        (line.contains("lock_wait") && waker_tid != tid && rows.iter().any(|r| r.0 == waker_tid))
            .then_some((tid, waker_tid))
    })
}

#[test]
fn top_pid_shows_a_futex_workload_in_lock_wait() {
    watch_futex_workload(
        "top_pid_shows_a_futex_workload_in_lock_wait",
        "--pid {pid}",
        false,
    );
}

#[test]
fn top_system_wide_shows_a_futex_workload_in_lock_wait() {
    watch_futex_workload(
        "top_system_wide_shows_a_futex_workload_in_lock_wait",
        "",
        true,
    );
}

/// Run `top --pid <futex workload> <extra>` in tmux until the workload's row shows
/// lock_wait and `ready` holds for the screen, then quit; the last screen (with what
/// kernelkite printed after leaving the view) and the workload's pid.
fn top_on_futex_workload(
    test: &str,
    extra: &str,
    ready: impl Fn(&str, i32) -> bool,
) -> (String, i32) {
    let mut workload = GatedWorkload::spawn(&["futex_stress", "--threads", "4", "--seconds", "6"]);
    let pid = workload.pid;
    let cmd = format!(
        "{} --backend ebpf top --pid {pid} --refresh 0.5 {extra}",
        shell_quote(&kernelkite_bin().to_string_lossy())
    );
    let t = Tmux::start(test, &cmd, 200, 50);
    let s = t.wait_for(WAIT, |s| s.contains("hooks ·"));
    assert!(s.contains("backend ebpf ·"), "{s}");
    workload.go();
    let s = t.wait_for(WAIT, |s| futex_row_is_lock_wait(s, pid));
    assert!(futex_row_is_lock_wait(&s, pid), "{s}");
    t.keys(&["Down"]);
    let s = t.wait_for(WAIT, |s| ready(s, pid));
    assert!(ready(&s, pid), "{s}");
    t.keys(&["q"]);
    let end = t.wait_for(WAIT, |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=0"), "{end}");
    assert!(!t.alternate_screen());
    let result = workload.finish();
    assert!(result.is_object(), "{result}");
    (end, pid)
}

#[test]
fn top_record_writes_a_recording_that_replays_with_the_workload() {
    let test = "top_record_writes_a_recording_that_replays_with_the_workload";
    let Some(_serial) = ebpf_ready(test) else {
        return;
    };
    if !tmux_ready(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("top.kkr");
    let extra = format!("--record {}", shell_quote(&recording.to_string_lossy()));
    let (end, pid) = top_on_futex_workload(test, &extra, |s, pid| {
        s.contains(&format!("syscalls · pid {pid}"))
    });
    assert!(end.contains("kernelkite: recorded"), "{end}");
    let bundle = dir.path().join("top.json");
    let out = std::process::Command::new(kernelkite_bin())
        .arg("replay")
        .arg(&recording)
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bundle).unwrap()).unwrap();
    assert_eq!(b["backend"], "ebpf");
    assert_eq!(b["root_pids"], serde_json::json!([pid]));
    let frames = b["frames"].as_array().unwrap();
    assert!(frames.len() >= 3, "{}", frames.len());
    assert!(
        frames
            .iter()
            .any(|f| f["processes"].to_string().contains(&format!("[{pid},"))),
        "the workload is in the frames"
    );
    let futex_calls: u64 = b["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["pid"] == pid && h["name"] == "futex")
        .map(|h| h["count"].as_u64().unwrap())
        .sum();
    assert!(futex_calls > 100, "futex calls recorded: {futex_calls}");
    // Reports read the recording as they read a bundle.
    let report = std::process::Command::new(kernelkite_bin())
        .arg("summary")
        .arg(&recording)
        .output()
        .unwrap();
    assert!(report.status.success());
    assert!(
        String::from_utf8_lossy(&report.stdout).contains("lock_wait"),
        "{}",
        String::from_utf8_lossy(&report.stdout)
    );
}

#[test]
fn top_stacks_shows_the_lock_wait_stacks_of_the_selected_process() {
    let test = "top_stacks_shows_the_lock_wait_stacks_of_the_selected_process";
    let Some(_serial) = ebpf_ready(test) else {
        return;
    };
    if !tmux_ready(test) {
        return;
    }
    let panel_ready = |s: &str, pid: i32| {
        s.contains(&format!("stacks · pid {pid} kk-workload · lock_wait"))
            && s.lines().any(|l| l.contains("[k]") && l.contains("futex"))
    };
    let (end, _) = top_on_futex_workload(test, "--stacks", panel_ready);
    eprintln!("{test}: {end}");
}
