//! The command `run` names at its end (`details: ... summary OUT`) runs where `run` ran:
//! `kernelkite` when the PATH finds this binary, its full path when it does not (after
//! `sudo`, or a binary run by its path). Run with `--backend proc`: no root needed.

#[path = "support/cli.rs"]
mod cli_support;

use std::path::Path;
use std::process::Command;

use cli_support::kk_path;

/// `run --backend proc OUT -- true` in `dir` with this `PATH` (and without `CARGO`, as
/// after `sudo`): the command its last line names.
fn named_command(dir: &Path, path: &str) -> String {
    let out = Command::new(kk_path())
        .args(["run", "--backend", "proc", "out.json", "--", "true"])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("CARGO")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("kernelkite: wrote out.json"))
        .unwrap_or_else(|| panic!("no `wrote` line in: {stderr}"));
    line.split_once("; details: ")
        .unwrap_or_else(|| panic!("no details in: {line}"))
        .1
        .trim_end()
        .to_string()
}

/// Run `command` with `sh` in `dir` with this `PATH`; its stdout.
fn runs(dir: &Path, path: &str, command: &str) -> String {
    let out = Command::new("/bin/sh")
        .args(["-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`{command}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn off_the_path_the_named_command_is_the_binarys_full_path_and_it_works() {
    let dir = tempfile::tempdir().unwrap();
    let path = "/usr/sbin:/usr/bin:/sbin:/bin";
    let command = named_command(dir.path(), path);
    let exe = kk_path().canonicalize().unwrap();
    assert_eq!(command, format!("{} summary out.json", exe.display()));
    assert!(runs(dir.path(), path, &command).starts_with("kernelkite summary"));
}

#[test]
fn on_the_path_the_named_command_is_kernelkite_and_it_works() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(kk_path(), bin.join("kernelkite")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let command = named_command(dir.path(), &path);
    assert_eq!(command, "kernelkite summary out.json");
    assert!(runs(dir.path(), &path, &command).starts_with("kernelkite summary"));
}
