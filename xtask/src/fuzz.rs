//! `cargo xtask fuzz [--seconds N]`: run the recording decoder's fuzz target
//! (`fuzz/fuzz_targets/decode_recording.rs`) for N seconds (default 45) from the
//! committed seeds in `fuzz/corpus/decode_recording/`.
//!
//! cargo-fuzz needs nightly compiler flags; the stable toolchain accepts them with
//! `RUSTC_BOOTSTRAP=1`. No sanitizer: the decoder has no `unsafe`, and libFuzzer still
//! catches panics, timeouts and oversized allocations (`-rss_limit_mb`). New inputs the
//! run finds go to a scratch corpus, so the committed seeds only change on purpose.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N]
  Fuzzes the recording decoder for N seconds (default 45) with cargo-fuzz.";

/// The cargo-fuzz version `ensure_cargo_fuzz` installs.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

pub fn run(args: &[String]) -> Result<()> {
    let mut seconds = 45u64;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .with_context(|| format!("--seconds needs a number\n{USAGE}"))?;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let fuzz_dir = crate::workspace_root().join("fuzz");
    let seeds = fuzz_dir.join("corpus").join("decode_recording");
    let scratch = std::env::temp_dir().join(format!("kernelkite-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = fuzz(&fuzz_dir, &scratch, &seeds, seconds);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn fuzz(fuzz_dir: &Path, scratch: &Path, seeds: &Path, seconds: u64) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(fuzz_dir)
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("CARGO_TARGET_DIR")
        .args(["fuzz", "run", "--sanitizer", "none", "decode_recording"])
        .arg(scratch)
        .arg(seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .args(["-max_len=65536", "-rss_limit_mb=2048", "-timeout=10"])
        .status()
        .context("cannot run cargo fuzz (is cargo-fuzz installed? `cargo install cargo-fuzz`)")?;
    if !status.success() {
        bail!(
            "the recording decoder failed under fuzzing ({status}); the crashing input is in fuzz/artifacts/decode_recording/"
        );
    }
    Ok(())
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
