//! `cargo xtask samples [--check]`: regenerate `samples/` from `fixtures/*.json` and the
//! recorded real-kernel sessions `fixtures/recordings/*.kkr`.
//!
//! For every fixture `NAME.json` (not `fixtures/bad/`): `NAME.bundle.json` (replay),
//! `NAME.summary.txt`/`.json`, `NAME.tree.txt`/`.json`, `NAME.viewer.json` and
//! `NAME.report.html`, and the exports `NAME.prom`, `.otlp.json`, `.otlp-traces.json`,
//! `.chrome-trace.json` and `.export.json`; for a fixture with stacks also
//! `NAME.stacks.txt`/`.json`, `NAME.folded` (every class, class root frames),
//! `NAME.flamegraph.svg` (the same) and `NAME.CLASS.flamegraph.svg` for every class with
//! stacks; the same for every recording `NAME.kkr`, named `recording-NAME.*`; for every
//! pair `X-before.json`/`X-after.json`:
//! `X.compare.txt`/`.json`. Commands run with the output directory as the working
//! directory and relative bundle names, so no absolute path ends up in a sample.
//!
//! `--check` generates into a temporary directory and fails, listing the files that
//! differ from (or are missing in, or are extra in) `samples/`. CI runs it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: cargo xtask samples [--check]
  Regenerates samples/ from fixtures/*.json with the kernelkite binary.
  --check: generate into a temporary directory and fail if anything differs from samples/.";

pub fn run(args: &[String]) -> Result<()> {
    let mut check = false;
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let root = crate::workspace_root();
    let bin = build_kernelkite(&root)?;
    let samples = root.join("samples");
    if check {
        let tmp = std::env::temp_dir().join(format!("kernelkite-samples-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp)?;
        let result = generate(&root, &bin, &tmp).and_then(|()| diff_dirs(&samples, &tmp));
        let _ = fs::remove_dir_all(&tmp);
        let differing = result?;
        if differing.is_empty() {
            println!("samples/ is up to date");
            Ok(())
        } else {
            for f in &differing {
                eprintln!("  {f}");
            }
            bail!(
                "{} file(s) in samples/ are out of date; run `cargo xtask samples` and commit the result",
                differing.len()
            )
        }
    } else {
        fs::create_dir_all(&samples)?;
        // Remove generated files that no fixture produces any more.
        for entry in fs::read_dir(&samples)? {
            let path = entry?.path();
            if path.is_file() && path.file_name().is_some_and(|n| n != ".gitkeep") {
                fs::remove_file(&path)?;
            }
        }
        generate(&root, &bin, &samples)?;
        println!("wrote {}", samples.display());
        Ok(())
    }
}

/// Build the kernelkite binary and return its path.
fn build_kernelkite(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args(["build", "-p", "kernelkite", "--bin", "kernelkite"])
        .current_dir(root)
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build -p kernelkite failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"));
    let bin = target.join("debug").join("kernelkite");
    if !bin.exists() {
        bail!("{} was not built", bin.display());
    }
    Ok(bin)
}

/// The files with extension `ext` directly in `dir`, sorted.
fn inputs(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    Ok(out)
}

struct Outcome {
    ok: bool,
    stdout: Vec<u8>,
    stderr: String,
}

fn kernelkite(bin: &Path, dir: &Path, args: &[&str]) -> Result<Outcome> {
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    Ok(Outcome {
        ok: out.status.success(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Run a command that must succeed and store its standard output in `dir/file`.
fn capture(bin: &Path, dir: &Path, args: &[&str], file: &str) -> Result<()> {
    let out = kernelkite(bin, dir, args)?;
    if !out.ok {
        bail!("kernelkite {} failed: {}", args.join(" "), out.stderr);
    }
    fs::write(dir.join(file), out.stdout)?;
    Ok(())
}

/// Run a command that must succeed and write `dir/file` itself.
fn written(bin: &Path, dir: &Path, args: &[&str], file: &str) -> Result<()> {
    let out = kernelkite(bin, dir, args)?;
    if !out.ok || !dir.join(file).exists() {
        bail!("kernelkite {} failed: {}", args.join(" "), out.stderr);
    }
    Ok(())
}

/// Run a command that writes `dir/file` itself; a command that is "not built yet" is
/// skipped with a note.
fn optional(bin: &Path, dir: &Path, args: &[&str], file: &str) -> Result<()> {
    let out = kernelkite(bin, dir, args)?;
    if out.ok {
        if !dir.join(file).exists() {
            fs::write(dir.join(file), out.stdout)?;
        }
        Ok(())
    } else if out.stderr.contains("not built yet") {
        println!("note: skipping {file}: {}", out.stderr);
        Ok(())
    } else {
        bail!("kernelkite {} failed: {}", args.join(" "), out.stderr)
    }
}

/// `kernelkite export` formats sampled per fixture, with the sample's file suffix (the
/// protobuf formats hold the same messages as the OTLP JSON ones and are not sampled).
const EXPORTS: &[(&str, &str)] = &[
    ("prometheus", "prom"),
    ("otlp", "otlp.json"),
    ("otlp-traces", "otlp-traces.json"),
    ("chrome-trace", "chrome-trace.json"),
    ("json", "export.json"),
];

fn generate(root: &Path, bin: &Path, dir: &Path) -> Result<()> {
    let mut names = BTreeSet::new();
    for fixture in inputs(&root.join("fixtures"), "json")? {
        names.insert(replay_and_render(bin, dir, &fixture, "")?);
    }
    // Real-kernel sessions recorded with `run --record`: explorable without root.
    let recordings = root.join("fixtures").join("recordings");
    if recordings.is_dir() {
        for recording in inputs(&recordings, "kkr")? {
            replay_and_render(bin, dir, &recording, "recording-")?;
        }
    }
    for name in &names {
        let Some(stem) = name.strip_suffix("-before") else {
            continue;
        };
        let after = format!("{stem}-after");
        if !names.contains(&after) {
            continue;
        }
        let (b, a) = (
            format!("{name}.bundle.json"),
            format!("{after}.bundle.json"),
        );
        capture(
            bin,
            dir,
            &["compare", &b, &a],
            &format!("{stem}.compare.txt"),
        )?;
        capture(
            bin,
            dir,
            &["compare", "--json", &b, &a],
            &format!("{stem}.compare.json"),
        )?;
    }
    Ok(())
}

/// The class names, as `kernelkite flamegraph --class` takes them.
const CLASSES: [&str; 6] = [
    "on_cpu",
    "runqueue",
    "io_wait",
    "lock_wait",
    "syscall_blocked",
    "unknown_wait",
];

/// The stacks outputs of a bundle recorded with stacks; nothing for one without.
fn stacks(bin: &Path, dir: &Path, name: &str, bundle: &str) -> Result<()> {
    let probe = kernelkite(bin, dir, &["stacks", bundle])?;
    if !probe.ok {
        if probe.stderr.contains("has no stacks") {
            return Ok(());
        }
        bail!("kernelkite stacks {bundle} failed: {}", probe.stderr);
    }
    fs::write(dir.join(format!("{name}.stacks.txt")), probe.stdout)?;
    capture(
        bin,
        dir,
        &["stacks", "--json", bundle],
        &format!("{name}.stacks.json"),
    )?;
    let folded = format!("{name}.folded");
    written(
        bin,
        dir,
        &["flamegraph", "--folded", bundle, "-o", &folded],
        &folded,
    )?;
    let svg = format!("{name}.flamegraph.svg");
    written(bin, dir, &["flamegraph", bundle, "-o", &svg], &svg)?;
    for class in CLASSES {
        let svg = format!("{name}.{class}.flamegraph.svg");
        let out = kernelkite(
            bin,
            dir,
            &["flamegraph", "--class", class, bundle, "-o", &svg],
        )?;
        if !out.ok && !out.stderr.contains(&format!("has no {class} stacks")) {
            bail!(
                "kernelkite flamegraph --class {class} {bundle} failed: {}",
                out.stderr
            );
        }
    }
    Ok(())
}

/// Replay `input` (a fixture or a recording) into `PREFIX+STEM.bundle.json` and render
/// its reports; returns the sample name.
fn replay_and_render(bin: &Path, dir: &Path, input: &Path, prefix: &str) -> Result<String> {
    let stem = input
        .file_stem()
        .and_then(|s| s.to_str())
        .context("input name is not UTF-8")?;
    let name = format!("{prefix}{stem}");
    let bundle = format!("{name}.bundle.json");
    let input_arg = input.to_str().context("input path is not UTF-8")?;
    let out = kernelkite(bin, dir, &["replay", input_arg, &bundle])?;
    if !out.ok {
        bail!("replay of {} failed: {}", input.display(), out.stderr);
    }
    capture(
        bin,
        dir,
        &["summary", &bundle],
        &format!("{name}.summary.txt"),
    )?;
    capture(
        bin,
        dir,
        &["summary", "--json", &bundle],
        &format!("{name}.summary.json"),
    )?;
    capture(bin, dir, &["tree", &bundle], &format!("{name}.tree.txt"))?;
    capture(
        bin,
        dir,
        &["tree", "--json", &bundle],
        &format!("{name}.tree.json"),
    )?;
    let viewer = format!("{name}.viewer.json");
    optional(bin, dir, &["viewer", &bundle, &viewer], &viewer)?;
    let html = format!("{name}.report.html");
    optional(bin, dir, &["report", &bundle, "-o", &html], &html)?;
    for (format, suffix) in EXPORTS {
        capture(
            bin,
            dir,
            &["export", "--format", format, &bundle],
            &format!("{name}.{suffix}"),
        )?;
    }
    stacks(bin, dir, &name, &bundle)?;
    critical_path(bin, dir, &name, &bundle)?;
    Ok(name)
}

/// `critical-path` (text and JSON) of a bundle recorded with `--critical-path`.
fn critical_path(bin: &Path, dir: &Path, name: &str, bundle: &str) -> Result<()> {
    let probe = kernelkite(bin, dir, &["critical-path", bundle])?;
    if !probe.ok {
        if probe.stderr.contains("has no critical path") {
            return Ok(());
        }
        bail!("kernelkite critical-path {bundle} failed: {}", probe.stderr);
    }
    fs::write(dir.join(format!("{name}.critical-path.txt")), probe.stdout)?;
    capture(
        bin,
        dir,
        &["critical-path", "--json", bundle],
        &format!("{name}.critical-path.json"),
    )
}

fn files(dir: &Path) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    if dir.exists() {
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_file() && name != ".gitkeep" {
                out.insert(name);
            }
        }
    }
    Ok(out)
}

/// Files that differ between the committed samples and a fresh generation.
fn diff_dirs(committed: &Path, fresh: &Path) -> Result<Vec<String>> {
    let (old, new) = (files(committed)?, files(fresh)?);
    let mut out = Vec::new();
    for name in old.union(&new) {
        match (old.contains(name), new.contains(name)) {
            (true, true) => {
                if fs::read(committed.join(name))? != fs::read(fresh.join(name))? {
                    out.push(format!("samples/{name} differs"));
                }
            }
            (false, true) => out.push(format!("samples/{name} is missing")),
            (true, false) => out.push(format!("samples/{name} is no longer generated")),
            (false, false) => {}
        }
    }
    Ok(out)
}
