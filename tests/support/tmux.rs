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

/// A tmux server with one session running one command; killed on drop.
pub struct Tmux {
    socket: String,
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
        let tmux = Tmux { socket };
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

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// Single-quote a path or argument for the pane's shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
