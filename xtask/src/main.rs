//! `cargo xtask <task>`: project automation. Nothing here is needed at run time.

mod bench;
mod build_ebpf;
mod ci;
mod fuzz;
mod package;
mod readme;
mod samples;
mod soak;
mod stress_ci;

use std::path::PathBuf;

use anyhow::{bail, Result};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let task = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    match task.as_str() {
        "ci" => ci::run(&rest),
        "build-ebpf" => build_ebpf::run(&rest),
        "samples" => samples::run(&rest),
        "readme" => readme::run(&rest),
        "bench" => bench::run(&rest),
        "fuzz" => fuzz::run(&rest),
        "soak" => soak::run(&rest),
        "package" => package::run(&rest),
        "stress-ci" => stress_ci::run(&rest),
        _ => bail!(
            "usage: cargo xtask <ci|build-ebpf|samples|readme|bench|fuzz|soak|package|stress-ci> [args]"
        ),
    }
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}
