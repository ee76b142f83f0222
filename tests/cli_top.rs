//! `kernelkite top` in a real terminal (tmux): a bundle replay driven by keys, a
//! committed recording's replay, a live /proc view of a known workload stopped by
//! SIGTERM (recorded with `--record`), and the one-line errors.

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::{kk, kk_path};

#[path = "support/tmux.rs"]
mod tmux;

use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use predicates::prelude::*;
use tmux::{shell_quote, tmux_ready, Tmux};

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn replay_in_tmux_follows_the_keys_and_restores_the_terminal() {
    if !tmux_ready("replay_in_tmux_follows_the_keys_and_restores_the_terminal") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("api.json");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/api-server-ebpf.json");
    kk().arg("replay")
        .arg(&fixture)
        .arg(&bundle)
        .assert()
        .success();
    let cmd = format!(
        "{} top --replay {} --speed 4",
        shell_quote(&kk_path().display().to_string()),
        shell_quote(&bundle.to_string_lossy())
    );
    let t = Tmux::start("replay", &cmd, 120, 30);
    let s = t.wait_for(WAIT, |s| s.contains("replay finished"));
    assert!(s.contains("replay finished"), "{s}");
    assert!(t.alternate_screen(), "top runs on the alternate screen");
    assert!(s.contains("6000") && s.contains("api-server"), "{s}");
    assert!(s.contains("epoll_wait"), "the final histograms: {s}");
    assert!(s.contains("last 1 s"), "{s}");

    t.keys(&["w"]);
    let s = t.wait_for(WAIT, |s| s.contains("last 10 s"));
    assert!(s.contains("last 10 s ("), "{s}");
    t.keys(&["s"]);
    let s = t.wait_for(WAIT, |s| s.contains("sort on_cpu"));
    assert!(s.contains("TIME BY CLASS (sort on_cpu)"), "{s}");

    t.keys(&["/"]);
    t.type_text("zzz");
    t.keys(&["Enter"]);
    let s = t.wait_for(WAIT, |s| s.contains("no process matches \"zzz\""));
    assert!(s.contains("no process matches \"zzz\""), "{s}");
    assert!(!s.contains("▸ api-server"), "{s}");
    t.keys(&["/"]);
    t.type_text("api");
    t.keys(&["Enter"]);
    let s = t.wait_for(WAIT, |s| {
        s.contains("filter: api") && s.contains("▸ api-server")
    });
    assert!(
        s.contains("filter: api") && s.contains("▸ api-server"),
        "{s}"
    );

    // Resizes redraw at the new size, down to a one-line notice, and back.
    t.resize(30, 6);
    let s = t.wait_for(WAIT, |s| s.contains("terminal too small"));
    assert!(s.contains("terminal too small (30x6)"), "{s}");
    t.resize(90, 20);
    let s = t.wait_for(WAIT, |s| s.contains("TIME BY CLASS"));
    assert!(
        s.contains("TIME BY CLASS") && s.contains("api-server"),
        "{s}"
    );

    t.keys(&["q"]);
    let s = t.wait_for(WAIT, |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(
        !t.alternate_screen(),
        "the terminal left the alternate screen"
    );
    assert!(!s.contains("TIME BY CLASS"), "the main screen is back: {s}");
}

#[test]
fn replay_of_a_committed_recording_shows_its_dominant_class() {
    if !tmux_ready("replay_of_a_committed_recording_shows_its_dominant_class") {
        return;
    }
    // A real eBPF session of kk-workload futex_stress: its threads wait on a contended
    // lock, so the process row's dominant class is lock_wait.
    let recording =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/recordings/run-ebpf-futex.kkr");
    let cmd = format!(
        "{} top --replay {}",
        shell_quote(&kk_path().display().to_string()),
        shell_quote(&recording.to_string_lossy())
    );
    let t = Tmux::start("replay-kkr", &cmd, 140, 30);
    let row = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("8627 ") && l.contains("kk-workload"))
            .map(str::to_string)
    };
    let s = t.wait_for(WAIT, |s| {
        s.contains("replay finished") && row(s).is_some_and(|r| r.contains("lock_wait"))
    });
    assert!(s.contains("replay of run-ebpf-futex.kkr (ebpf, 1x)"), "{s}");
    assert!(s.contains("recorded pids"), "{s}");
    let r = row(&s).unwrap_or_default();
    assert!(r.contains("lock_wait"), "the dominant class: {s}");
    // The histograms the session recorded with its last frame.
    assert!(s.lines().any(|l| l.starts_with("futex ")), "{s}");
    t.keys(&["q"]);
    let s = t.wait_for(WAIT, |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=0"), "{s}");
}

#[test]
fn proc_top_records_a_session_that_replays() {
    if !tmux_ready("proc_top_records_a_session_that_replays") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("top.kkr");
    let mut sleeper = StdCommand::new("sleep")
        .arg("300")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let cmd = format!(
        "{} --backend proc top --pid {} --refresh 0.2 --record {}",
        shell_quote(&kk_path().display().to_string()),
        sleeper.id(),
        shell_quote(&recording.to_string_lossy())
    );
    let t = Tmux::start("proc-record", &cmd, 140, 24);
    let pid = sleeper.id().to_string();
    let s = t.wait_for(WAIT, |s| s.lines().any(|l| l.starts_with(&pid)));
    assert!(s.lines().any(|l| l.starts_with(&pid)), "{s}");
    std::thread::sleep(Duration::from_millis(600));
    t.keys(&["q"]);
    let s = t.wait_for(WAIT, |s| s.contains("EXIT="));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(s.contains("kernelkite: recorded"), "{s}");
    let bundle = dir.path().join("top.json");
    kk().arg("replay")
        .arg(&recording)
        .arg(&bundle)
        .assert()
        .success()
        .stderr(predicate::str::is_empty());
    let b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bundle).unwrap()).unwrap();
    assert_eq!(b["backend"], "proc");
    let frames = b["frames"].as_array().unwrap();
    assert!(frames.len() >= 3, "{b}");
    assert!(
        frames
            .iter()
            .all(|f| f["processes"].to_string().contains(&format!("[{pid},"))),
        "{b}"
    );
}

/// The pids of `pid`'s children.
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn proc_backend_shows_a_sleeper_blocked_in_a_syscall_and_stops_on_sigterm() {
    if !tmux_ready("proc_backend_shows_a_sleeper_blocked_in_a_syscall_and_stops_on_sigterm") {
        return;
    }
    let mut sleeper = StdCommand::new("sleep")
        .arg("300")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let cmd = format!(
        "{} --backend proc top --pid {} --refresh 0.2",
        shell_quote(&kk_path().display().to_string()),
        sleeper.id()
    );
    let t = Tmux::start("proc", &cmd, 140, 24);
    let pid = sleeper.id().to_string();
    let has_row = |s: &str| {
        s.lines().any(|l| {
            l.starts_with(&pid) && l.contains(" sleep ") && l.contains("syscall_blocked 100%")
        })
    };
    let s = t.wait_for(WAIT, has_row);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(has_row(&s), "{s}");
    // nanosleep with the thread asleep: the /proc estimate says syscall_blocked.
    assert!(s.contains("syscall_blocked 100%"), "{s}");
    assert!(s.contains("the rest estimated from /proc"), "{s}");
    assert!(s.contains("syscall latency needs the eBPF backend"), "{s}");
    // The sleeper is gone: the view says so and keeps running until told to stop.
    let s = t.wait_for(WAIT, |s| s.contains("every watched process exited"));
    assert!(s.contains("every watched process exited"), "{s}");

    let kk_pid = children(t.pane_pid())
        .into_iter()
        .find(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "kernelkite")
        })
        .expect("kernelkite runs in the pane");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(kk_pid, libc::SIGTERM) }, 0);
    let s = t.wait_for(WAIT, |s| s.contains("EXIT="));
    assert!(s.contains("top stopped: terminated by a signal"), "{s}");
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(!t.alternate_screen());
}

#[test]
fn top_exits_when_its_terminal_goes_away() {
    if !tmux_ready("top_exits_when_its_terminal_goes_away") {
        return;
    }
    let cmd = format!(
        "{} --backend proc top --pid 1",
        shell_quote(&kk_path().display().to_string())
    );
    let t = Tmux::start("hangup", &cmd, 100, 30);
    let s = t.wait_for(WAIT, |s| s.contains("TIME BY CLASS"));
    assert!(s.contains("TIME BY CLASS"), "{s}");
    let kk_pid = t
        .pane_processes()
        .into_iter()
        .find(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "kernelkite")
        })
        .expect("kernelkite runs in the pane");
    t.kill_server();
    // It must notice the hang-up and exit by itself (not spin on the dead tty).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let gone = || {
        std::fs::read_to_string(format!("/proc/{kk_pid}/stat")).map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    };
    while !gone() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        gone(),
        "kernelkite top ({kk_pid}) is still running after its terminal went away"
    );
}

#[test]
fn bad_input_is_one_line_naming_the_problem() {
    kk().args(["top", "--replay", "/nonexistent/x.json"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("/nonexistent/x.json")
                .and(predicate::str::contains("\n").count(1)),
        );
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.kkr");
    std::fs::write(&damaged, b"not a recording").unwrap();
    kk().args(["top", "--replay"])
        .arg(&damaged)
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("damaged.kkr")
                .and(predicate::str::contains("not a kernelkite recording"))
                .and(predicate::str::contains("\n").count(1)),
        );
    let recording =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/recordings/run-ebpf-futex.kkr");
    kk().args(["top", "--record", "x.kkr", "--replay"])
        .arg(&recording)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be used with --replay"));
    assert!(!Path::new("x.kkr").exists());
    kk().args(["--backend", "proc", "top", "--stacks"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--stacks needs the eBPF backend"));
    let unwritable = dir.path().join("no/such/dir/x.kkr");
    kk().args(["--backend", "proc", "top", "--pid", "1", "--record"])
        .arg(&unwritable)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot create recording"));
    kk().args(["top", "--refresh", "0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--refresh must be between"));
    kk().args(["--backend", "proc", "top", "--pid", "999999999"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no process with pid 999999999"));
    // A thread id names its process; a kernel thread is refused.
    let thread = std::thread::spawn(|| std::thread::sleep(Duration::from_secs(3)));
    let tids: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", std::process::id()))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|t| *t != std::process::id().to_string())
        .collect();
    kk().args(["--backend", "proc", "top", "--pid", &tids[0]])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "is a thread of process {}",
            std::process::id()
        )));
    drop(thread);
    if Path::new("/proc/2/stat").exists() {
        // kthreadd, where this pid namespace shows it.
        kk().args(["--backend", "proc", "top", "--pid", "2"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("kernel thread"));
    }
    // Not a terminal: refuse before touching it.
    kk().args(["--backend", "proc", "top"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("top needs a terminal"));
}
