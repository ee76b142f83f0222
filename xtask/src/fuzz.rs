//! `cargo xtask fuzz [--seconds N] [--target NAME]`: run every fuzz target
//! (`fuzz/fuzz_targets/*.rs`, listed in [`TARGETS`]) for N seconds each (default 10),
//! or only NAME, from the committed seeds in `fuzz/corpus/<target>/`.
//!
//! cargo-fuzz needs nightly compiler flags; the stable toolchain accepts them with
//! `RUSTC_BOOTSTRAP=1`. No sanitizer: the code under test has no `unsafe` on these
//! paths, and libFuzzer still catches panics (overflow checks and debug assertions are
//! on), timeouts and oversized allocations (`-rss_limit_mb`). New inputs a run finds go
//! to a scratch corpus, so the committed seeds only change on purpose. Every target is
//! built first in one cargo invocation, so the time given is fuzzing time.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// Every fuzz target, with what it feeds.
pub const TARGETS: &[(&str, &str)] = &[
    ("decode_recording", ".kkr decoder, stored chunks"),
    ("decode_zstd_chunk", ".kkr decoder, zstd chunks"),
    ("bundle_json", "bundle loader, then every report"),
    ("fixture_json", "fixture converter, then every report"),
    ("fail_on_rule", "--fail-on parse and evaluate"),
    ("procfs_parsers", "/proc file parsers"),
    ("tracefs_format", "tracefs format parser"),
    ("serve_request", "trace --serve request handling"),
];

const DEFAULT_SECONDS: u64 = 10;

fn usage() -> String {
    let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
    format!(
        "usage: cargo xtask fuzz [--seconds N] [--target NAME]
  Fuzzes each target for N seconds (default {DEFAULT_SECONDS}) with cargo-fuzz, or only NAME.
  Targets: {}",
        names.join(", ")
    )
}

pub fn run(args: &[String]) -> Result<()> {
    let mut seconds = DEFAULT_SECONDS;
    let mut only: Option<String> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .with_context(|| format!("--seconds needs a number\n{}", usage()))?;
            }
            "--target" => {
                let name = it
                    .next()
                    .with_context(|| format!("--target needs a name\n{}", usage()))?;
                if !TARGETS.iter().any(|(n, _)| n == name) {
                    bail!("unknown fuzz target {name:?}\n{}", usage());
                }
                only = Some(name.clone());
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{}", usage()),
        }
    }
    let fuzz_dir = crate::workspace_root().join("fuzz");
    let targets: Vec<&str> = TARGETS
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| only.as_deref().is_none_or(|o| o == *n))
        .collect();
    build(&fuzz_dir, only.as_deref())?;
    let mut report = Vec::new();
    for target in &targets {
        let seeds = fuzz_dir.join("corpus").join(target);
        let scratch =
            std::env::temp_dir().join(format!("kernelkite-fuzz-{}-{target}", std::process::id()));
        std::fs::create_dir_all(&scratch)?;
        let t = Instant::now();
        let result = fuzz(&fuzz_dir, target, &scratch, &seeds, seconds);
        let _ = std::fs::remove_dir_all(&scratch);
        let runs = result?;
        report.push((*target, runs, t.elapsed().as_secs_f64()));
    }
    println!("\nfuzzing done:");
    for (target, runs, secs) in report {
        let runs = runs.map_or("?".to_string(), |r| r.to_string());
        println!("  {target:<20} {runs:>10} runs in {secs:.0} s");
    }
    Ok(())
}

fn cargo_fuzz(fuzz_dir: &Path) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(fuzz_dir)
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("CARGO_TARGET_DIR")
        .arg("fuzz");
    cmd
}

/// Build the targets (all of them, or `only`) before any clock starts.
fn build(fuzz_dir: &Path, only: Option<&str>) -> Result<()> {
    let status = cargo_fuzz(fuzz_dir)
        .args(["build", "--sanitizer", "none"])
        .args(only)
        .status()
        .context("cannot run cargo fuzz (is cargo-fuzz installed? `cargo install cargo-fuzz`)")?;
    if !status.success() {
        bail!("cargo fuzz build failed ({status})");
    }
    Ok(())
}

/// Fuzz one target; the number of runs libFuzzer reports, when it says.
fn fuzz(
    fuzz_dir: &Path,
    target: &str,
    scratch: &Path,
    seeds: &Path,
    seconds: u64,
) -> Result<Option<u64>> {
    println!("\n==> fuzz {target} for {seconds} s");
    let mut child = cargo_fuzz(fuzz_dir)
        .args(["run", "--sanitizer", "none", target])
        .arg(scratch)
        .arg(seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .args(["-max_len=65536", "-rss_limit_mb=2048", "-timeout=10"])
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run cargo fuzz (is cargo-fuzz installed? `cargo install cargo-fuzz`)")?;
    // libFuzzer reports on stderr: pass it through, keeping its last word on runs
    // ("Done 123456 runs in 10 second(s)").
    let mut runs = None;
    let stderr = child.stderr.take().expect("stderr is piped");
    for line in BufReader::new(stderr).lines() {
        let line = line?;
        eprintln!("{line}");
        if let Some(n) = line
            .strip_prefix("Done ")
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        {
            runs = Some(n);
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!(
            "fuzz target {target} failed ({status}); the crashing input is in fuzz/artifacts/{target}/"
        );
    }
    Ok(runs)
}

/// Install cargo-fuzz when it is missing (CI's dependency step).
pub fn ensure_cargo_fuzz() -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let present = Command::new(&cargo)
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        println!("  {:<42} ok", "cargo-fuzz");
        return Ok(());
    }
    println!(
        "  {:<42} missing: installing {CARGO_FUZZ_VERSION}",
        "cargo-fuzz"
    );
    let status = Command::new(&cargo)
        .args([
            "install",
            "cargo-fuzz",
            "--locked",
            "--version",
            CARGO_FUZZ_VERSION,
        ])
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .context("cannot run cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed ({status})");
    }
    Ok(())
}

/// The cargo-fuzz version `ensure_cargo_fuzz` installs.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
