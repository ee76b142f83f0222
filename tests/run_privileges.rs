//! Who `kernelkite run`'s command runs as, and with what: the privilege rules as root
//! (sudo, doas, pkexec, `--user`, none of them), the environment a dropped command gets,
//! capabilities and RLIMIT_MEMLOCK it must not inherit, and no hidden way to exec a
//! command as root. Real programs, run as root; an unprivileged attacker is `nobody`.

#![cfg(target_os = "linux")]

#[path = "support/ebpf.rs"]
mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use kernelkite::model::{load_bundle, Backend};
use support::*;

/// Return unless root: these tests switch users. CI runs as root, so there a test
/// that cannot fails instead (`skip::root_or_required`).
macro_rules! needs_root {
    ($name:expr) => {
        if !skip::root_or_required($name) {
            return;
        }
    };
}

/// A directory every user may write, with a copy of kernelkite every user can run.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o777)).unwrap();
        let exe = dir.path().join("kernelkite");
        std::fs::copy(kernelkite_bin(), &exe).unwrap();
        // Another test thread that forked while the copy was open for writing holds that
        // fd until its exec, and until then executing the copy fails with ETXTBSY: wait
        // for the first successful exec.
        for _ in 0..200 {
            match Command::new(&exe).arg("--version").output() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                other => {
                    other.unwrap();
                    break;
                }
            }
        }
        Scratch { dir }
    }

    fn exe(&self) -> PathBuf {
        self.dir.path().join("kernelkite")
    }

    fn bundle(&self) -> PathBuf {
        self.dir.path().join("b.json")
    }
}

/// `kernelkite [global...] run BUNDLE [run_args...] -- sh -c SCRIPT` with `env` set
/// (on a cleared environment plus PATH), started through `prefix` (e.g. setpriv).
fn run_sh(
    prefix: &[&str],
    exe: &Path,
    global: &[&str],
    run_args: &[&str],
    bundle: &Path,
    env: &[(&str, &str)],
    script: &str,
) -> Output {
    let mut argv: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
    argv.push(exe.to_string_lossy().into_owned());
    argv.extend(global.iter().map(|s| s.to_string()));
    argv.push("run".into());
    argv.push(bundle.to_string_lossy().into_owned());
    argv.extend(run_args.iter().map(|s| s.to_string()));
    argv.extend(["--", "sh", "-c", script].map(String::from));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_ok(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

/// `NAME=value` lines as a map.
fn env_map(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const BACKENDS: [&[&str]; 2] = [&["--backend", "proc"], &[]];

/// Both backends, eBPF only where it can run (the gated launch is its own code path).
fn backends(
    test: &str,
) -> Vec<(
    &'static [&'static str],
    Option<std::sync::MutexGuard<'static, ()>>,
)> {
    let mut out = vec![(BACKENDS[0], None)];
    if let Some(guard) = ebpf_ready(test) {
        out.push((BACKENDS[1], Some(guard)));
    }
    out
}

fn nobody_passwd() -> (String, String) {
    let out = Command::new("getent")
        .args(["passwd", "nobody"])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let fields: Vec<&str> = line.split(':').collect();
    (fields[5].to_string(), fields[6].to_string())
}

#[test]
fn under_sudo_the_command_gets_the_users_environment_without_sudos() {
    needs_root!("under_sudo_the_command_gets_the_users_environment_without_sudos");
    let (home, shell) = nobody_passwd();
    for (backend, _serial) in
        backends("under_sudo_the_command_gets_the_users_environment_without_sudos")
    {
        let s = Scratch::new();
        // What sudo leaves for `sudo kernelkite ...` run by nobody, with root's
        // SHELL and MAIL as `sudo` without -i keeps them.
        let out = run_sh(
            &[],
            &s.exe(),
            backend,
            &[],
            &s.bundle(),
            &[
                ("SUDO_UID", "65534"),
                ("SUDO_GID", "65534"),
                ("SUDO_USER", "nobody"),
                ("SUDO_COMMAND", "/usr/bin/kernelkite run"),
                ("HOME", "/root"),
                ("USER", "root"),
                ("LOGNAME", "root"),
                ("SHELL", "/bin/bash"),
                ("MAIL", "/var/mail/root"),
                ("KK_KEPT", "yes"),
            ],
            "id -u; env",
        );
        assert_ok(&out);
        let text = stdout(&out);
        assert_eq!(text.lines().next(), Some("65534"), "{backend:?}: {text}");
        let env = env_map(&text);
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("HOME"), Some(home.as_str()), "{backend:?}: {text}");
        assert_eq!(get("SHELL"), Some(shell.as_str()), "{backend:?}: {text}");
        assert_eq!(get("USER"), Some("nobody"), "{backend:?}: {text}");
        assert_eq!(get("LOGNAME"), Some("nobody"), "{backend:?}: {text}");
        assert_eq!(get("MAIL"), Some("/var/mail/nobody"), "{backend:?}: {text}");
        assert_eq!(get("KK_KEPT"), Some("yes"), "other variables pass: {text}");
        let sudo: Vec<&String> = env.keys().filter(|k| k.starts_with("SUDO_")).collect();
        assert!(sudo.is_empty(), "{backend:?}: {sudo:?} passed through");
    }
}

#[test]
fn doas_and_pkexec_invokers_are_honoured() {
    needs_root!("doas_and_pkexec_invokers_are_honoured");
    for (backend, _serial) in backends("doas_and_pkexec_invokers_are_honoured") {
        for env in [("DOAS_USER", "nobody"), ("PKEXEC_UID", "65534")] {
            let s = Scratch::new();
            let out = run_sh(
                &[],
                &s.exe(),
                backend,
                &[],
                &s.bundle(),
                &[env],
                "id -u; id -g; env",
            );
            assert_ok(&out);
            let text = stdout(&out);
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(
                &lines[..2],
                ["65534", "65534"],
                "{backend:?} {env:?}: {text}"
            );
            assert!(!text.contains(env.0), "{env:?} passed through: {text}");
            // The bundle is the invoker's, as under sudo.
            use std::os::unix::fs::MetadataExt;
            assert_eq!(std::fs::metadata(s.bundle()).unwrap().uid(), 65534);
        }
    }
}

#[test]
fn as_root_with_no_invoker_the_command_runs_as_root_and_says_so() {
    needs_root!("as_root_with_no_invoker_the_command_runs_as_root_and_says_so");
    for (backend, _serial) in
        backends("as_root_with_no_invoker_the_command_runs_as_root_and_says_so")
    {
        let s = Scratch::new();
        let out = run_sh(&[], &s.exe(), backend, &[], &s.bundle(), &[], "id -u");
        assert_ok(&out);
        assert_eq!(stdout(&out).trim(), "0");
        let err = stderr(&out);
        let notes: Vec<&str> = err.lines().filter(|l| l.contains("runs as root")).collect();
        assert_eq!(notes.len(), 1, "{backend:?}: {err}");
        assert!(notes[0].contains("--user"), "{err}");

        // --user names whom to run it as instead.
        let out = run_sh(
            &[],
            &s.exe(),
            backend,
            &["--user", "nobody"],
            &s.bundle(),
            &[],
            "id -u; id -G",
        );
        assert_ok(&out);
        assert_eq!(
            stdout(&out),
            "65534\n65534\n",
            "{backend:?}: {}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("runs as root"), "{}", stderr(&out));
        let bundle = load_bundle(&s.bundle()).unwrap();
        assert_eq!(
            bundle.backend,
            if backend.is_empty() {
                Backend::Ebpf
            } else {
                Backend::Proc
            }
        );
    }
}

#[test]
fn user_cannot_name_someone_else_than_who_started_kernelkite() {
    needs_root!("user_cannot_name_someone_else_than_who_started_kernelkite");
    let s = Scratch::new();
    let marker = s.dir.path().join("ran");
    let script = format!("touch {}", marker.display());
    // sudo by nobody, asking to run as root: refused before anything runs.
    let out = run_sh(
        &[],
        &s.exe(),
        &["--backend", "proc"],
        &["--user", "root"],
        &s.bundle(),
        &[("SUDO_UID", "65534"), ("SUDO_GID", "65534")],
        &script,
    );
    // kernelkite's own failure (`--user` refused), not the command's.
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("--user root") && err.contains("sudo"), "{err}");
    assert!(!marker.exists() && !s.bundle().exists());
    // The same user is fine.
    let out = run_sh(
        &[],
        &s.exe(),
        &["--backend", "proc"],
        &["--user", "65534"],
        &s.bundle(),
        &[("SUDO_UID", "65534"), ("SUDO_GID", "65534")],
        "id -u",
    );
    assert_ok(&out);
    assert_eq!(stdout(&out).trim(), "65534");
    // Without root, --user cannot name anyone else.
    let out = run_sh(
        &[
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
        ],
        &s.exe(),
        &["--backend", "proc"],
        &["--user", "root"],
        &s.dir.path().join("n.json"),
        &[],
        &script,
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("only root"), "{}", stderr(&out));
    assert!(!marker.exists());
}

/// The hidden `__exec-after-gate` subcommand used to exec its arguments as root after
/// reading one byte from a given fd: with a sudo rule that allows only kernelkite, a
/// root shell. No subcommand may run a command other than `run`, under its rules.
#[test]
fn no_hidden_subcommand_execs_a_command_as_root() {
    needs_root!("no_hidden_subcommand_execs_a_command_as_root");
    let s = Scratch::new();
    for args in [
        vec!["__exec-after-gate", "0", "--", "id", "-u"],
        vec![
            "__exec-after-gate",
            "--uid=0",
            "--gid=0",
            "0",
            "--",
            "id",
            "-u",
        ],
    ] {
        let mut child = Command::new(s.exe())
            .args(&args)
            .env("SUDO_UID", "65534")
            .env("SUDO_GID", "65534")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The "gate" byte, on fd 0.
        let _ = std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"x");
        let out = child.wait_with_output().unwrap();
        let text = stdout(&out);
        assert!(
            !text.lines().any(|l| l.trim() == "0"),
            "{args:?} ran a command as root: {text}"
        );
        assert!(!out.status.success(), "{args:?}: {text}");
    }
}

/// `CapXxx:` fields of a /proc/PID/status text.
fn caps(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("Cap")?.split_once(':'))
        .map(|(k, v)| (k.to_string(), u64::from_str_radix(v.trim(), 16).unwrap()))
        .collect()
}

/// kernelkite given CAP_BPF and CAP_PERFMON as ambient capabilities (how one runs it
/// without root): the command it launches must not hold them.
#[test]
fn ambient_and_inheritable_capabilities_do_not_reach_the_command() {
    needs_root!("ambient_and_inheritable_capabilities_do_not_reach_the_command");
    let s = Scratch::new();
    let prefix = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "--inh-caps=+bpf,+perfmon",
        "--ambient-caps=+bpf,+perfmon",
    ];
    // What kernelkite itself holds under that prefix.
    let out = Command::new(prefix[0])
        .args(&prefix[1..])
        .args(["grep", "^Cap", "/proc/self/status"])
        .output()
        .unwrap();
    let own = caps(&stdout(&out));
    assert_ne!(
        own["Amb"], 0,
        "setpriv gave no ambient capabilities: {own:?}"
    );
    for backend in BACKENDS {
        let out = run_sh(
            &prefix,
            &s.exe(),
            backend,
            &[],
            &s.bundle(),
            &[],
            "grep ^Cap /proc/self/status",
        );
        assert_ok(&out);
        let cmd = caps(&stdout(&out));
        for set in ["Inh", "Prm", "Eff", "Amb"] {
            assert_eq!(cmd[set], 0, "{backend:?}: Cap{set} of the command: {cmd:?}");
        }
    }
}

/// kernelkite lifts RLIMIT_MEMLOCK to load BPF maps (to unlimited with
/// CAP_SYS_RESOURCE, else its soft limit to the hard one); the command gets the limit
/// kernelkite started with.
#[test]
fn the_command_gets_the_memlock_limit_kernelkite_started_with() {
    let Some(_serial) = ebpf_ready("the_command_gets_the_memlock_limit_kernelkite_started_with")
    else {
        return;
    };
    let s = Scratch::new();
    let out = run_sh(
        &["prlimit", "--memlock=65536:131072", "--"],
        &s.exe(),
        &[],
        &[],
        &s.bundle(),
        &[],
        "ulimit -S -l; ulimit -H -l; grep 'locked memory' /proc/$PPID/limits",
    );
    assert_ok(&out);
    assert_eq!(load_bundle(&s.bundle()).unwrap().backend, Backend::Ebpf);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[..2], ["64", "128"], "{text}");
    // kernelkite's own limit was raised (else this test would prove nothing).
    let own: Vec<&str> = lines[2].split_whitespace().collect();
    assert_ne!(
        own[3], "65536",
        "kernelkite's soft limit was not raised: {text}"
    );
}

/// A program root may exec but the user may not: the exec after the privilege drop
/// fails, which is one line and a non-zero exit on both backends, not a hang.
#[test]
fn a_command_the_user_cannot_exec_is_one_line() {
    needs_root!("a_command_the_user_cannot_exec_is_one_line");
    for (backend, _serial) in backends("a_command_the_user_cannot_exec_is_one_line") {
        let s = Scratch::new();
        let script = s.dir.path().join("root-only.sh");
        std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
        std::fs::set_permissions(&script, PermissionsExt::from_mode(0o700)).unwrap();
        let out = Command::new(s.exe())
            .args(backend)
            .arg("run")
            .arg(s.bundle())
            .arg("--")
            .arg(&script)
            .env("SUDO_UID", "65534")
            .env("SUDO_GID", "65534")
            .output()
            .unwrap();
        // Found but not executable for the user: 126, as a shell says.
        assert_eq!(
            out.status.code(),
            Some(126),
            "{backend:?}: {}",
            stderr(&out)
        );
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{backend:?}: {err}");
        assert!(
            err.contains("root-only.sh") && err.contains("ermission denied"),
            "{err}"
        );
        assert!(stdout(&out).is_empty());
        assert!(!s.bundle().exists());
    }
}
