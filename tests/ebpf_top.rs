//! Real-kernel tests of `kernelkite top` (eBPF backend) in a real terminal: a futex
//! workload's row must show lock_wait as its dominant class and futex in the syscall
//! panel, watched by pid and system-wide. See tests/support/ebpf.rs and tmux.rs.

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
    t.keys(&["q"]);
    let s = t.wait_for(WAIT, |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(!t.alternate_screen());
    let result = workload.finish();
    assert!(result.is_object(), "{result}");
    eprintln!("{test}: {row}");
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
