//! `cargo xtask build-ebpf [--check]`: build `kernelkite-ebpf` for `bpfel-unknown-none`
//! and install the object at `kernelkite/bpf/kernelkite.bpf.o`, where the kernelkite
//! crate embeds it (so users build kernelkite with stable Rust alone).
//!
//! It also writes the digest of the sources it was built from to
//! `kernelkite/bpf/kernelkite.bpf.sources` (kernelkite_common::sources), which
//! `kernelkite --version` compares with the sources it is built with.
//!
//! `--check` fails when that digest is not the sources' now, and rebuilds and fails if
//! the result differs from the committed bytes: the
//! build is byte-reproducible (no paths end up in the object; `Cargo.lock` pins the
//! crates; bpf-linker is pinned below). It then runs `cargo fmt --check` and `cargo
//! clippy -D warnings` on the BPF crate, which the workspace's do not reach.
//!
//! What the build needs, installed here when missing: the `rust-src` component
//! (`-Z build-std=core`, allowed on stable with `RUSTC_BOOTSTRAP=1`), Debian's
//! `llvm-22-dev` (rustc 1.95 uses LLVM 22) and `bpf-linker` built against it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use kernelkite_common::sources::{bpf_sources_stamp, BPF_SOURCES_STAMP};

/// The bpf-linker release known to work with rustc 1.95 and LLVM 22.
const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

pub fn run(args: &[String]) -> Result<()> {
    let check = match args {
        [] => false,
        [a] if a == "--check" => true,
        _ => bail!("usage: cargo xtask build-ebpf [--check]"),
    };
    ensure_tools()?;
    let root = crate::workspace_root();
    let built = build(&root)?;
    let committed = root.join("kernelkite").join("bpf").join("kernelkite.bpf.o");
    let new = std::fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
    let stamp_path = root.join(BPF_SOURCES_STAMP);
    let stamp = bpf_sources_stamp(&root).context("reading the BPF sources")?;
    if check {
        let recorded = std::fs::read_to_string(&stamp_path).unwrap_or_default();
        if recorded.trim() != stamp {
            bail!(
                "{} says {:?}, the BPF sources now {stamp:?}: run `cargo xtask build-ebpf` and commit it (kernelkite --version reports it)",
                stamp_path.display(),
                recorded.trim()
            );
        }
        let old = std::fs::read(&committed)
            .with_context(|| format!("reading {}", committed.display()))?;
        if old != new {
            bail!(
                "{} differs from a fresh build of kernelkite-ebpf ({} vs {} bytes): run `cargo xtask build-ebpf` and commit the object",
                committed.display(),
                old.len(),
                new.len()
            );
        }
        println!(
            "{} matches a fresh build ({} bytes)",
            committed.display(),
            new.len()
        );
        clippy(&root)?;
    } else {
        std::fs::write(&committed, &new)
            .with_context(|| format!("writing {}", committed.display()))?;
        println!("wrote {} ({} bytes)", committed.display(), new.len());
        std::fs::write(&stamp_path, format!("{stamp}\n"))
            .with_context(|| format!("writing {}", stamp_path.display()))?;
        println!("wrote {} ({stamp})", stamp_path.display());
    }
    Ok(())
}

/// Build the BPF object and return its path.
fn build(root: &Path) -> Result<PathBuf> {
    let dir = root.join("kernelkite-ebpf");
    let status = bpf_cargo(&dir, "build", &[])
        .status()
        .context("cannot run cargo for kernelkite-ebpf")?;
    if !status.success() {
        bail!("building kernelkite-ebpf failed ({status})");
    }
    Ok(dir.join("target/bpfel-unknown-none/release/kernelkite"))
}

/// `cargo fmt --check` and `cargo clippy -D warnings` of the BPF crate, for its own
/// target: it is outside the workspace (built for `bpfel-unknown-none`), so the
/// workspace's fmt and clippy never read it.
fn clippy(root: &Path) -> Result<()> {
    let dir = root.join("kernelkite-ebpf");
    let status = Command::new(cargo())
        .current_dir(&dir)
        .args(["fmt", "--", "--check"])
        .status()
        .context("cannot run cargo fmt for kernelkite-ebpf")?;
    if !status.success() {
        bail!("kernelkite-ebpf is not formatted: run `cargo fmt` in kernelkite-ebpf");
    }
    let status = bpf_cargo(&dir, "clippy", &["--", "-D", "warnings"])
        .status()
        .context("cannot run cargo clippy for kernelkite-ebpf")?;
    if !status.success() {
        bail!("clippy found warnings in kernelkite-ebpf ({status})");
    }
    println!("kernelkite-ebpf: formatted, clippy -D warnings clean");
    Ok(())
}

/// `cargo SUBCOMMAND` in the BPF crate for `bpfel-unknown-none`, with `extra` after.
fn bpf_cargo(dir: &Path, subcommand: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(cargo());
    cmd.current_dir(dir)
        .args([
            subcommand,
            "--release",
            "--locked",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ])
        .args(extra)
        .env("RUSTC_BOOTSTRAP", "1")
        // The outer `cargo xtask` sets these for the host build; they must not leak in.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env("PATH", path_with_cargo_bin());
    cmd
}

/// Install rust-src, llvm-22-dev and bpf-linker when they are missing.
pub fn ensure_tools() -> Result<()> {
    let sysroot = capture(Command::new("rustc").args(["--print", "sysroot"]))?;
    if !Path::new(sysroot.trim())
        .join("lib/rustlib/src/rust/library/core")
        .is_dir()
    {
        println!("installing the rust-src component");
        run_checked(Command::new("rustup").args(["component", "add", "rust-src"]))?;
    }
    if bpf_linker().is_some() {
        return Ok(());
    }
    if !Path::new(LLVM_PREFIX).join("lib/libLLVM.so").exists() {
        println!("installing llvm-22-dev (bpf-linker links against LLVM 22)");
        run_checked(Command::new("apt-get").args(["update", "-qq"]))?;
        run_checked(
            Command::new("apt-get")
                .args(["install", "-y", "-qq", "llvm-22-dev"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
    }
    println!("installing bpf-linker {BPF_LINKER_VERSION}");
    run_checked(
        Command::new(cargo())
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--no-default-features",
                "--features",
                "llvm-22",
            ])
            // bpf-linker's build script finds LLVM here (not on the default path).
            .env("LLVM_PREFIX", LLVM_PREFIX)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR"),
    )?;
    if bpf_linker().is_none() {
        bail!("bpf-linker is still not found after installing it");
    }
    Ok(())
}

fn bpf_linker() -> Option<PathBuf> {
    let in_cargo_home = cargo_home().join("bin").join("bpf-linker");
    if in_cargo_home.is_file() {
        return Some(in_cargo_home);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|p| p.join("bpf-linker"))
        .find(|p| p.is_file())
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
    )
}

/// PATH with $CARGO_HOME/bin first, so rustc finds bpf-linker there.
fn path_with_cargo_bin() -> std::ffi::OsString {
    let mut paths = vec![cargo_home().join("bin")];
    if let Some(p) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(paths).unwrap_or_default()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn run_checked(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

fn capture(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
