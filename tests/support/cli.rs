//! Shared helpers for the tests that run the `kernelkite` binary on files: the binary,
//! the committed fixtures, and `replay`.

#![allow(
    dead_code,
    reason = "each test binary uses a different subset of these helpers"
)]

use std::path::{Path, PathBuf};

/// The `kernelkite` binary cargo built for these tests.
pub fn kk_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kernelkite"))
}

/// `kernelkite` as an `assert_cmd` command, without an inherited `RUST_BACKTRACE` (it
/// would change what a failing command prints).
pub fn kk() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::new(kk_path());
    c.env_remove("RUST_BACKTRACE");
    c
}

/// The repository's `fixtures/` directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// `kernelkite replay IN OUT`: (success, stderr).
pub fn replay(input: &Path, out: &Path) -> (bool, String) {
    let o = kk().arg("replay").arg(input).arg(out).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Replay the committed fixture `name` into `dir/name`, asserting success.
pub fn replay_fixture(dir: &Path, name: &str) -> PathBuf {
    let bundle = dir.join(name);
    let (ok, stderr) = replay(&fixtures().join(name), &bundle);
    assert!(ok, "replay of {name} failed: {stderr}");
    bundle
}
