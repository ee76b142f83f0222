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
fn a_symlink_at_the_output_path_is_refused_neither_followed_nor_replaced() {
    let work = tempfile::tempdir().unwrap();
    let bundle = stacks_bundle(work.path());
    let victim = Victim::new();
    for args in output_commands(&bundle) {
        let out = work.path().join(format!("{}.out", args[0]));
        std::os::unix::fs::symlink(&victim.path, &out).unwrap();
        let got = Command::new(kk_path())
            .args(with_out(&args, &out.display().to_string()))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&got.stderr);
        assert!(!got.status.success(), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(stderr.contains("symbolic link"), "{args:?}: {stderr}");
        victim.assert_untouched(&args[0]);
        assert!(
            std::fs::symlink_metadata(&out).unwrap().is_symlink(),
            "{args:?}"
        );
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Every command that writes an output, as users run it, with `OUT` for the output: the
/// fixture commands, `run` on both backends, `run --record`, and (as root) `trace -o`.
fn every_output_command(bundle: &Path) -> Vec<Vec<String>> {
    let mut commands = output_commands(bundle);
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    commands.push(strings(&["--backend", "proc", "run", "OUT", "--", "true"]));
    commands.push(strings(&[
        "--backend",
        "proc",
        "run",
        "--record",
        "OUT",
        "run.json",
        "--",
        "true",
    ]));
    if is_root() {
        commands.push(strings(&["run", "OUT", "--", "true"]));
        commands.push(strings(&[
            "trace",
            "--pid",
            &std::process::id().to_string(),
            "--duration",
            "0.3",
            "-o",
            "OUT",
        ]));
    }
    commands
}

fn run_in(dir: &Path, args: &[String]) -> std::process::Output {
    let out = Command::new(kk_path())
        .current_dir(dir)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn mknod_char(path: &Path, major: u32, minor: u32) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is NUL-terminated.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is NUL-terminated.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
}

/// `-o /dev/null` as root replaced /dev/null with a regular file (outputs were renamed
/// over their name). A device node made with mknod (a copy of /dev/null's, 1:3, never the
/// real one) is written in place: afterwards it is the same node.
#[test]
fn a_device_node_at_the_output_path_is_written_in_place() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "mknod needs root, and CI runs as root"
        );
        eprintln!("skipped a_device_node_at_the_output_path_is_written_in_place: mknod needs root");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let bundle = stacks_bundle(work.path());
    let node = work.path().join("null");
    mknod_char(&node, 1, 3);
    let before = std::fs::symlink_metadata(&node).unwrap();
    for args in every_output_command(&bundle) {
        run_in(work.path(), &with_out(&args, "null"));
        let after = std::fs::symlink_metadata(&node).unwrap();
        assert!(after.file_type().is_char_device(), "{args:?}: {after:?}");
        assert_eq!(
            (after.ino(), after.rdev(), after.mode(), after.uid()),
            (before.ino(), before.rdev(), before.mode(), before.uid()),
            "{args:?}"
        );
    }
}

/// A FIFO at the output path stays a FIFO, and its reader gets exactly what the same
/// command writes to a regular file (for `run` and `trace`, a bundle that loads).
#[test]
fn a_fifo_at_the_output_path_is_written_in_place_and_read() {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let work = tempfile::tempdir().unwrap();
    let bundle = stacks_bundle(work.path());
    let fifo = work.path().join("fifo");
    mkfifo(&fifo);
    let before = std::fs::symlink_metadata(&fifo).unwrap();
    for args in every_output_command(&bundle) {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                std::fs::File::open(fifo)
                    .unwrap()
                    .read_to_end(&mut got)
                    .unwrap();
                got
            })
        };
        run_in(work.path(), &with_out(&args, "fifo"));
        let got = reader.join().unwrap();
        let after = std::fs::symlink_metadata(&fifo).unwrap();
        assert!(after.file_type().is_fifo(), "{args:?}: {after:?}");
        assert_eq!(
            (after.ino(), after.mode()),
            (before.ino(), before.mode()),
            "{args:?}"
        );
        assert!(!got.is_empty(), "{args:?}: the reader got nothing");
        let live = args.iter().any(|a| a == "run" || a == "trace");
        if args.iter().any(|a| a == "--record") {
            let kkr = work.path().join("got.kkr");
            std::fs::write(&kkr, &got).unwrap();
            run_in(
                work.path(),
                &["replay".into(), "got.kkr".into(), "replayed.json".into()],
            );
        } else if live {
            let copy = work.path().join("got.json");
            std::fs::write(&copy, &got).unwrap();
            kernelkite::model::load_bundle(&copy)
                .unwrap_or_else(|e| panic!("{args:?}: the FIFO's bytes are no bundle: {e:#}"));
        } else {
            run_in(work.path(), &with_out(&args, "regular.out"));
            let regular = std::fs::read(work.path().join("regular.out")).unwrap();
            assert!(
                got == regular,
                "{args:?}: the FIFO's bytes differ from the file's"
            );
        }
    }
}

/// `-o -` is standard output: the same bytes as the default, and no file named `-`.
#[test]
fn a_dash_writes_to_standard_output() {
    let work = tempfile::tempdir().unwrap();
    let bundle = stacks_bundle(work.path());
    let b = bundle.display().to_string();
    for (with_dash, plain) in [
        (
            vec!["export", &b, "--format", "json", "-o", "-"],
            vec!["export", &b, "--format", "json"],
        ),
        (
            vec!["flamegraph", &b, "--folded", "-o", "-"],
            vec!["flamegraph", &b, "--folded"],
        ),
        (vec!["viewer", &b, "-"], vec!["viewer", &b]),
    ] {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let dashed = run_in(work.path(), &strings(&with_dash));
        let default = run_in(work.path(), &strings(&plain));
        assert!(!dashed.stdout.is_empty(), "{with_dash:?}");
        assert!(dashed.stdout == default.stdout, "{with_dash:?}");
        assert!(
            !work.path().join("-").exists(),
            "{with_dash:?} made a file named -"
        );
    }
    let html = run_in(
        work.path(),
        &["report".into(), b.clone(), "-o".into(), "-".into()],
    );
    assert!(String::from_utf8_lossy(&html.stdout).starts_with("<!DOCTYPE html>"));
    // `run -`: the bundle on standard output, the command's own output beside it.
    let ran = run_in(
        work.path(),
        &["--backend", "proc", "run", "-", "--", "true"].map(String::from),
    );
    std::fs::write(work.path().join("ran.json"), &ran.stdout).unwrap();
    kernelkite::model::load_bundle(&work.path().join("ran.json")).unwrap();
    assert!(String::from_utf8_lossy(&ran.stderr).contains("wrote standard output"));
    assert!(!work.path().join("-").exists());
}

/// A directory at the output path: one line saying so, a failure, and nothing written.
#[test]
fn a_directory_at_the_output_path_is_a_one_line_error() {
    let work = tempfile::tempdir().unwrap();
    let bundle = stacks_bundle(work.path());
    for args in every_output_command(&bundle) {
        let dir = work.path().join("a-dir");
        std::fs::create_dir(&dir).unwrap();
        let out = Command::new(kk_path())
            .current_dir(work.path())
            .args(with_out(&args, "a-dir"))
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains("it is a directory"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            std::fs::read_dir(&dir).unwrap().next().is_none(),
            "{args:?}"
        );
        std::fs::remove_dir(&dir).unwrap();
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
