//! Every file kernelkite writes goes through `kernelkite/src/output.rs`: these run each
//! output-writing command the way users do and check that a symlink planted at the
//! output path, or at the predictable temporary name kernelkite used to write through
//! (`.NAME.tmp-PID`), never makes it write to another file; and that a closed stdout or
//! stderr neither panics nor loses a written file.

#![cfg(target_os = "linux")]

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::{fixtures, kk_path};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn run_ok(cmd: &mut Command) {
    let out = cmd.env_remove("RUST_BACKTRACE").output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each output-writing command with `OUT` for its output file (in the current
/// directory), given a bundle with stacks.
fn output_commands(bundle: &Path) -> Vec<Vec<String>> {
    let b = bundle.display().to_string();
    let fixture = fixtures()
        .join("cargo-build-before.json")
        .display()
        .to_string();
    [
        vec!["replay", &fixture, "OUT"],
        vec!["report", &b, "-o", "OUT"],
        vec!["export", &b, "--format", "prometheus", "-o", "OUT"],
        vec!["viewer", &b, "OUT"],
        vec!["flamegraph", &b, "-o", "OUT"],
    ]
    .into_iter()
    .map(|args| args.into_iter().map(String::from).collect())
    .collect()
}

fn with_out(args: &[String], out: &str) -> Vec<String> {
    args.iter()
        .map(|a| {
            if a == "OUT" {
                out.to_string()
            } else {
                a.clone()
            }
        })
        .collect()
}

struct Victim {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Victim {
    fn new() -> Victim {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("victim");
        std::fs::write(&path, "secret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Victim { _dir: dir, path }
    }

    fn assert_untouched(&self, what: &str) {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::read_to_string(&self.path).unwrap(),
            "secret\n",
            "{what} wrote through a symlink"
        );
        let meta = std::fs::metadata(&self.path).unwrap();
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (me, 0o600), "{what}");
    }
}

fn stacks_bundle(dir: &Path) -> PathBuf {
    let bundle = dir.join("stacks.json");
    run_ok(
        Command::new(kk_path())
            .arg("replay")
            .arg(fixtures().join("stacks-demo.json"))
            .arg(&bundle),
    );
    bundle
}

fn assert_regular(path: &Path, what: &str) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(meta.file_type().is_file(), "{what}: {meta:?}");
    assert!(meta.len() > 0, "{what}: empty");
}

#[test]
fn a_symlink_at_the_output_path_is_replaced_not_followed() {
    let work = tempfile::tempdir().unwrap();
    let bundle = stacks_bundle(work.path());
    let victim = Victim::new();
    for args in output_commands(&bundle) {
        let out = work.path().join(format!("{}.out", args[0]));
        std::os::unix::fs::symlink(&victim.path, &out).unwrap();
        run_ok(Command::new(kk_path()).args(with_out(&args, &out.display().to_string())));
        victim.assert_untouched(&args[0]);
        assert_regular(&out, &args[0]);
    }
}

/// kernelkite wrote every output through `.NAME.tmp-<its pid>` with `File::create`: a
/// symlink planted there by anyone who can write the directory (the pid is easy to
/// guess) was followed. The shell plants it for its own pid and then becomes kernelkite.
#[test]
fn a_symlink_at_the_old_temporary_name_is_not_followed() {
    let work = tempfile::tempdir().unwrap();
    let bundle = stacks_bundle(work.path());
    let victim = Victim::new();
    for args in output_commands(&bundle) {
        let name = format!("{}.out", args[0]);
        let mut cmd = Command::new("sh");
        cmd.current_dir(work.path())
            .env("VICTIM", &victim.path)
            .env("NAME", &name)
            .args([
                "-c",
                r#"ln -s "$VICTIM" ".$NAME.tmp-$$" && exec "$@""#,
                "sh",
            ])
            .arg(kk_path())
            .args(with_out(&args, &name));
        run_ok(&mut cmd);
        victim.assert_untouched(&args[0]);
        assert_regular(&work.path().join(&name), &args[0]);
    }
}

/// A pipe whose reader is already gone: every write to it fails with EPIPE.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer
}

/// `kernelkite summary x.json | head -1` and friends: the reader going away is not an
/// error, and never a panic.
#[test]
fn a_closed_stdout_is_no_panic() {
    let work = tempfile::tempdir().unwrap();
    let bundle = stacks_bundle(work.path());
    let b = bundle.display().to_string();
    for args in [
        vec!["summary", &b],
        vec!["summary", "--json", &b],
        vec!["tree", &b],
        vec!["stacks", &b],
        vec!["viewer", &b],
        vec!["export", &b, "--format", "prometheus"],
        vec!["flamegraph", &b, "--folded"],
        vec!["doctor"],
        vec!["man"],
    ] {
        let out = Command::new(kk_path())
            .args(&args)
            .env_remove("RUST_BACKTRACE")
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
    }
}

/// `kernelkite run out.json -- cmd 2>&1 | head`: a closed stderr must not turn the
/// command's status into a panic's once the bundle is written.
#[test]
fn a_closed_stderr_keeps_runs_status_and_bundle() {
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("run.json");
    let out = Command::new(kk_path())
        .args(["--backend", "proc", "run"])
        .arg(&bundle)
        .args(["--", "sh", "-c", "exit 3"])
        .stderr(closed_pipe())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    kernelkite::model::load_bundle(&bundle).unwrap();
}
