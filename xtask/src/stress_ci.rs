//! `cargo xtask stress-ci [--runs N] [--rev REV]`: the full CI (`bash .ci/run`) on fresh
//! clones, N times in a row (default 3), while a `stress-ng` load and another BPF tracer
//! (a bpftrace syscall counter) run beside it — issue 16's "passes on a shared, noisy
//! machine". Not part of `cargo xtask ci` (one run takes 30-40 minutes on 2 cores).
//!
//! Each run clones REV (default HEAD) of this repository into a new directory under
//! `target/stress-ci/`, with a copy of `../shared` beside it when there is one (as CI
//! has), and runs `bash .ci/run` there with `CI=true`, its output in `run-K.log`. The load
//! is started before the first run and stopped after the last; it stops at the first
//! failing run. The exit status is non-zero unless every run passed.
//!
//! `--same-clone`: runs after the first run CI again in the first run's clone, its
//! build kept (the rebuild steps are then incremental, a run takes about half as
//! long): what is repeated is the tests under load, which is where flakiness lives.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::bench::last_line;

const USAGE: &str = "usage: cargo xtask stress-ci [--runs N] [--rev REV] [--same-clone]
  Runs `bash .ci/run` on a fresh clone of REV (default HEAD) N times in a row (default 3)
  with `stress-ng --cpu 1 --io 1 --vm 1 --vm-bytes 512M` and a bpftrace syscall counter
  running beside it. Root. Logs: target/stress-ci/run-K.log.
  --same-clone: runs 2..N run CI again in run 1's fresh clone, its build kept.";

/// The load beside each run: one CPU hog, one sync() loop, one memory thrasher.
const STRESS_ARGS: &[&str] = &["--cpu", "1", "--io", "1", "--vm", "1", "--vm-bytes", "512M"];
/// Another BPF tracer on the same tracepoints kernelkite uses.
const BPFTRACE_PROGRAM: &str = "tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }";

pub fn run(args: &[String]) -> Result<()> {
    let mut runs = 3u32;
    let mut rev = "HEAD".to_string();
    let mut same_clone = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => {
                runs = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--runs needs a positive number\n{USAGE}"))?;
            }
            "--rev" => rev = it.next().cloned().context(USAGE)?,
            "--same-clone" => same_clone = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("CI runs as root, and so does this: run it as root");
    }
    let root = crate::workspace_root();
    let commit = git_output(&root, &["rev-parse", &rev])?;
    let out_dir = root.join("target").join("stress-ci");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;

    ensure_load_tools()?;
    let mut load = Load::start(&out_dir)?;
    let mut results = Vec::new();
    for k in 1..=runs {
        let reuse = same_clone && k > 1;
        let clone = out_dir.join(format!("clone-{}", if same_clone { 1 } else { k }));
        let log = out_dir.join(format!("run-{k}.log"));
        println!(
            "==> stress-ci run {k}/{runs}: commit {commit}, log {}",
            log.display()
        );
        let t = Instant::now();
        let passed = one_run(&root, &commit, &clone, &log, reuse)?;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "    run {k}: {} in {secs:.0} s; last line: {}",
            if passed { "passed" } else { "FAILED" },
            last_line(&log)
        );
        results.push((k, passed, secs));
        if !passed {
            break;
        }
        if !same_clone || k == runs {
            // A passed clone's target holds gigabytes; the log is what is kept.
            let _ = std::fs::remove_dir_all(&clone);
        }
    }
    load.stop();
    println!(
        "\n==> stress-ci summary (commit {commit}; load: stress-ng {} + bpftrace)",
        STRESS_ARGS.join(" ")
    );
    for (k, passed, secs) in &results {
        println!(
            "  run {k}: {} in {secs:.0} s",
            if *passed { "passed" } else { "FAILED" }
        );
    }
    let passed = results.iter().filter(|r| r.1).count();
    println!("  {passed} passed in a row of {runs} asked");
    if passed as u32 != runs {
        bail!("stress-ci: {passed} of {runs} runs passed in a row");
    }
    Ok(())
}

/// One CI run in `clone`: cloned afresh, or (`reuse`) the clone an earlier run left.
fn one_run(root: &Path, commit: &str, clone: &Path, log: &Path, reuse: bool) -> Result<bool> {
    if !reuse {
        clone_at(root, commit, clone)?;
    }
    run_ci(clone, log)
}

fn clone_at(root: &Path, commit: &str, clone: &Path) -> Result<()> {
    if clone.exists() {
        std::fs::remove_dir_all(clone).with_context(|| format!("removing {}", clone.display()))?;
    }
    let status = Command::new("git")
        .args(["clone", "-q"])
        .arg(root)
        .arg(clone)
        .status()
        .context("git clone")?;
    if !status.success() {
        bail!("git clone {} failed", root.display());
    }
    let status = Command::new("git")
        .args(["checkout", "-q", commit])
        .current_dir(clone)
        .status()
        .context("git checkout")?;
    if !status.success() {
        bail!("git checkout {commit} failed");
    }
    // CI has a read-only copy of shared/ beside the clone; the clone's parent is
    // target/stress-ci, so a link to the real one stands in for it.
    let shared = root.parent().map(|p| p.join("shared"));
    let beside = clone.parent().map(|p| p.join("shared"));
    if let (Some(shared), Some(beside)) = (shared, beside) {
        if shared.is_dir() && !beside.exists() {
            std::os::unix::fs::symlink(&shared, &beside).context("linking shared/")?;
        }
    }
    Ok(())
}

fn run_ci(clone: &Path, log: &Path) -> Result<bool> {
    let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let status = Command::new("bash")
        .arg(".ci/run")
        .current_dir(clone)
        .env("CI", "true")
        // The clone builds into its own target (cold on a fresh clone), as CI's does.
        .env_remove("CARGO_TARGET_DIR")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .context("running .ci/run")?;
    Ok(status.success())
}

/// stress-ng and bpftrace, installed from Debian when missing.
fn ensure_load_tools() -> Result<()> {
    let missing: Vec<&str> = [("stress-ng", "stress-ng"), ("bpftrace", "bpftrace")]
        .into_iter()
        .filter(|(cmd, _)| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {cmd}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|(_, pkg)| pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let _ = Command::new("apt-get").arg("update").status();
    let status = Command::new("apt-get")
        .args(["install", "-y"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("apt-get install")?;
    if !status.success() {
        bail!("apt-get install {} failed", missing.join(" "));
    }
    Ok(())
}

/// The processes that load the machine while the runs go on.
struct Load {
    children: Vec<Child>,
}

impl Load {
    fn start(out_dir: &Path) -> Result<Load> {
        // bpftrace needs tracefs, which is not mounted at boot here.
        if !Path::new("/sys/kernel/tracing/events").exists() {
            let _ = Command::new("mount")
                .args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"])
                .status();
        }
        let log = |name: &str| -> Result<File> {
            let p: PathBuf = out_dir.join(name);
            File::create(&p).with_context(|| format!("creating {}", p.display()))
        };
        let stress = Command::new("stress-ng")
            .args(STRESS_ARGS)
            .stdout(log("stress-ng.log")?)
            .stderr(Stdio::null())
            .spawn()
            .context("starting stress-ng")?;
        let bpftrace = Command::new("bpftrace")
            .args(["-e", BPFTRACE_PROGRAM])
            .stdout(log("bpftrace.log")?)
            .stderr(log("bpftrace.stderr")?)
            .spawn()
            .context("starting bpftrace")?;
        println!(
            "load: stress-ng {} (pid {}), bpftrace (pid {})",
            STRESS_ARGS.join(" "),
            stress.id(),
            bpftrace.id()
        );
        Ok(Load {
            children: vec![stress, bpftrace],
        })
    }

    fn stop(&mut self) {
        for child in &mut self.children {
            // SIGINT: stress-ng stops its workers, bpftrace prints its map and detaches.
            // SAFETY: kill has no memory preconditions; the pid is our live child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let _ = child.wait();
        }
        self.children.clear();
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop();
    }
}

fn git_output(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .context("git")?;
    if !out.status.success() {
        bail!("git {} failed", args.join(" "));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
