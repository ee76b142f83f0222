//! Running `kernelkite top` in a real terminal: a private tmux server (its own socket),
//! keys sent with `send-keys`, the screen read with `capture-pane`.
//!
//! Without tmux the tests print why and pass, except under CI (`CI` set), where CI's
//! install step provides tmux and a skip is a failure.

#![allow(
    dead_code,
    reason = "each test binary uses a different subset of these helpers"
)]

use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server with one session running one command. Dropping it (on every path,
/// panics included) kills the server and then every process that ran in the pane and
/// is still there, so no `top` outlives its test.
pub struct Tmux {
    socket: String,
    /// The pane's process and its descendants, as last seen.
    pane_pid: Option<i32>,
}

/// `true` when tmux can be used here; otherwise prints why (and panics under CI).
pub fn tmux_ready(test: &str) -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("{test}: tmux is missing under CI (xtask ci installs it)");
        }
        eprintln!("skipped {test}: tmux is not installed");
    }
    ok
}

impl Tmux {
    /// Start `command` (a shell command line) in a detached `width`x`height` session.
    /// After the command ends, the pane prints `EXIT=<status>` and stays open.
    pub fn start(name: &str, command: &str, width: u16, height: u16) -> Tmux {
        let socket = format!("kk-{name}-{}", std::process::id());
        let mut tmux = Tmux {
            socket,
            pane_pid: None,
        };
        let line = format!("{command}; echo EXIT=$?; sleep 600");
        let status = tmux
            .cmd()
            .args(["new-session", "-d", "-s", "kk", "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .arg(line)
            .status()
            .expect("running tmux");
        assert!(status.success(), "tmux new-session failed");
        tmux.pane_pid = Some(tmux.pane_pid());
        tmux
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "-f", "/dev/null"]);
        c
    }

    /// The visible screen, as text.
    pub fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "kk"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Send keys as tmux names them (`w`, `Enter`, `C-c`, or a literal string with `-l`).
    pub fn keys(&self, keys: &[&str]) {
        let status = self
            .cmd()
            .args(["send-keys", "-t", "kk"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// Resize the window (the program gets SIGWINCH).
    pub fn resize(&self, width: u16, height: u16) {
        let status = self
            .cmd()
            .args(["resize-window", "-t", "kk", "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .status()
            .expect("tmux resize-window");
        assert!(status.success());
    }

    /// Type literal text.
    pub fn type_text(&self, text: &str) {
        let status = self
            .cmd()
            .args(["send-keys", "-t", "kk", "-l", text])
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// Whether the pane is on the alternate screen (a full-screen program owns it).
    pub fn alternate_screen(&self) -> bool {
        let out = self
            .cmd()
            .args(["display-message", "-p", "-t", "kk", "#{alternate_on}"])
            .output()
            .expect("tmux display-message");
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// Wait until the screen satisfies `pred` (up to `timeout`); returns the last screen.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if pred(&screen) || Instant::now() >= deadline {
                return screen;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pid of the process running in the pane (the shell running the command line).
    pub fn pane_pid(&self) -> i32 {
        let out = self
            .cmd()
            .args(["display-message", "-p", "-t", "kk", "#{pane_pid}"])
            .output()
            .expect("tmux display-message");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("pane pid")
    }
}

impl Tmux {
    /// Kill the server now, as closing a terminal window would (the pane hangs up).
    pub fn kill_server(&self) {
        let _ = self
            .cmd()
            .arg("kill-server")
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// The processes that ran in the pane when it started, and their descendants now.
    pub fn pane_processes(&self) -> Vec<i32> {
        self.pane_pid.map(process_tree).unwrap_or_default()
    }
}

/// `pid` and all its descendants (from /proc/<pid>/task/*/children).
pub fn process_tree(pid: i32) -> Vec<i32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        let tasks = std::fs::read_dir(format!("/proc/{p}/task"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for task in tasks {
            let children = std::fs::read_to_string(task.join("children")).unwrap_or_default();
            out.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
        i += 1;
    }
    out
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let tree = self.pane_pid.map(process_tree).unwrap_or_default();
        let _ = self
            .cmd()
            .arg("kill-server")
            .stderr(std::process::Stdio::null())
            .status();
        // The hang-up ends `top` at once; anything still there after a grace period is
        // killed (by pid: only what ran in this pane).
        let deadline = Instant::now() + Duration::from_secs(2);
        let alive = |p: &i32| std::path::Path::new(&format!("/proc/{p}")).exists();
        while tree.iter().any(alive) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        for pid in tree.iter().filter(|p| alive(p)) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        remove_socket(&self.socket);
    }
}

/// tmux leaves its socket file behind after kill-server: remove ours.
pub fn remove_socket(name: &str) {
    let dir = std::env::var_os("TMUX_TMPDIR").unwrap_or_else(|| "/tmp".into());
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let _ = std::fs::remove_file(
        std::path::Path::new(&dir)
            .join(format!("tmux-{uid}"))
            .join(name),
    );
}

/// Single-quote a path or argument for the pane's shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
