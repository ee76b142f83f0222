//! Skips that cannot hide. A test that cannot run here calls one of these and returns:
//!
//! - [`required`]: for what the CI machine always has (root, kernel BTF, cgroup v2,
//!   `CARGO`, every tool `cargo xtask ci` installs). Under CI (`CI` set) it panics, so
//!   the test fails instead of passing without checking anything; elsewhere it prints
//!   why and the test passes.
//! - [`skip`]: for what a CI machine may legitimately lack (a tmpfs under `target/`, a
//!   nosuid mount). It prints why, and under CI appends `test: why` to the file named by
//!   `KK_SKIP_LOG`, which `cargo xtask ci` counts and lists in its closing summary. Under
//!   CI without `KK_SKIP_LOG` there is nowhere to report it, so it panics.
//!
//! The test harness shows a passing test's output only with `--nocapture`: a skip
//! printed and nothing else is a silent pass. That is why CI gets the file.
//!
//! Used by the integration tests (`#[path = "support/skip.rs"]`) and by the library's
//! unit tests (`kernelkite::test_skip`).

#![allow(
    dead_code,
    reason = "each test binary uses a different subset of these helpers"
)]

use std::io::Write;

/// The environment variable naming the file skips are appended to under CI.
pub const SKIP_LOG_ENV: &str = "KK_SKIP_LOG";

fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// `test` cannot run here for want of something the CI machine always has: a failure
/// under CI, a printed skip elsewhere.
pub fn required(test: &str, why: &str) {
    if under_ci() {
        panic!("{test} cannot run under CI: {why}");
    }
    eprintln!("skipped {test}: {why}");
}

/// `test` cannot run here for want of something a CI machine may legitimately lack:
/// printed, and under CI recorded in `$KK_SKIP_LOG` for the closing summary.
pub fn skip(test: &str, why: &str) {
    eprintln!("skipped {test}: {why}");
    if !under_ci() {
        return;
    }
    let Some(path) = std::env::var_os(SKIP_LOG_ENV) else {
        panic!("{test} skipped under CI with no {SKIP_LOG_ENV} to report it in: {why}");
    };
    // One write of one line with O_APPEND: lines of tests running in parallel (and of
    // other test binaries) do not interleave.
    let line = format!("{test}: {}\n", why.replace('\n', " "));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{test}: cannot open {}: {e}", path.to_string_lossy()));
    f.write_all(line.as_bytes())
        .unwrap_or_else(|e| panic!("{test}: cannot write {}: {e}", path.to_string_lossy()));
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `true` when running as root; otherwise [`required`] (root-only tests: CI runs as
/// root) and `false`.
pub fn root_or_required(test: &str) -> bool {
    if is_root() {
        return true;
    }
    required(test, "needs root");
    false
}
