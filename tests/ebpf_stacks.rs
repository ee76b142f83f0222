//! Real-kernel tests of `--stacks`: a C workload built here with frame pointers and
//! DWARF blocks in functions of known names, one thread per latency class; each class's
//! stacks must name the function, with file:line, and io_wait must show the kernel's
//! fsync path. A stripped copy must give `module+0xoffset`, never a wrong name.

#[path = "support/ebpf.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use kernelkite::model::{load_bundle, Bundle, StackFrame};
use support::*;

/// Build tests/workloads/c/stackwork.c into `dir` (and a stripped copy).
fn build_stackwork(dir: &Path) -> (PathBuf, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/c/stackwork.c");
    let bin = dir.join("stackwork");
    let status = Command::new("gcc")
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .expect("gcc (the tests need a C compiler)");
    assert!(status.success(), "gcc failed");
    let stripped = dir.join("stackwork-stripped");
    std::fs::copy(&bin, &stripped).unwrap();
    assert!(Command::new("strip")
        .arg(&stripped)
        .status()
        .unwrap()
        .success());
    (bin, stripped)
}

/// `kernelkite run --stacks --min-block-us 100` of `stackwork` for `seconds`.
fn run_with_stacks(bin: &Path, work_dir: &Path, seconds: &str) -> Bundle {
    let bundle = work_dir.join("stacks.bundle.json");
    // fsync must reach a disk: not tmpfs.
    let fsync_dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = Command::new(kernelkite_bin())
        .args(["run", "--stacks", "--min-block-us", "100"])
        .arg(&bundle)
        .arg("--")
        .arg(bin)
        .arg(fsync_dir)
        .arg(seconds)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    load_bundle(&bundle).unwrap()
}

/// (user frames, kernel frames, ns) of every stack sample of `class`.
fn samples_of<'a>(
    bundle: &'a Bundle,
    class: &str,
) -> Vec<(Vec<&'a StackFrame>, Vec<&'a StackFrame>, u64)> {
    let profile = bundle.stacks.as_ref().expect("bundle has stacks");
    let frames = |idx: Option<u32>| -> Vec<&StackFrame> {
        idx.map(|i| {
            profile.stacks[i as usize]
                .iter()
                .map(|&f| &profile.frames[f as usize])
                .collect()
        })
        .unwrap_or_default()
    };
    profile
        .samples
        .iter()
        .filter(|s| s.class == class)
        .map(|s| (frames(s.user_stack), frames(s.kernel_stack), s.total_ns))
        .collect()
}

fn has_symbol(frames: &[&StackFrame], name: &str) -> bool {
    frames.iter().any(|f| f.symbol.as_deref() == Some(name))
}

/// The time of `class` spent in stacks whose user side names `function`.
fn time_in(bundle: &Bundle, class: &str, function: &str) -> u64 {
    samples_of(bundle, class)
        .iter()
        .filter(|(user, _, _)| has_symbol(user, function))
        .map(|(_, _, ns)| ns)
        .sum()
}

#[test]
fn every_class_has_the_stack_of_the_function_that_waits() {
    let Some(_guard) = ebpf_ready("every_class_has_the_stack_of_the_function_that_waits") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (bin, _) = build_stackwork(dir.path());
    let bundle = run_with_stacks(&bin, dir.path(), "1.5");
    let profile = bundle.stacks.as_ref().unwrap();
    assert_eq!(profile.captures_lost, 0, "stack captures lost");
    assert_eq!(bundle.events_lost, Some(0));
    assert_eq!(profile.sample_hz, 99);
    assert_eq!(profile.min_block_ns, 100_000);

    // Each thread's waits land in its class with the function it waits in.
    for (class, function) in [
        ("lock_wait", "kk_block_on_mutex"),
        ("syscall_blocked", "kk_nanosleep_loop"),
        ("io_wait", "kk_fsync_loop"),
        ("on_cpu", "kk_spin"),
    ] {
        let ns = time_in(&bundle, class, function);
        assert!(
            ns > 0,
            "no {class} time in {function}: {:#?}",
            samples_of(&bundle, class)
        );
    }
    // Lock waits: most of 1.5 s (the holder keeps the lock 20 ms at a time).
    assert!(time_in(&bundle, "lock_wait", "kk_block_on_mutex") > 500_000_000);
    // The spinner is sampled at 99 Hz while it runs: its sampled time is most of the
    // process's measured on_cpu, however little CPU a loaded machine leaves it.
    let on_cpu_ns = kernelkite::analysis::analyze(&bundle)
        .latency_classes
        .on_cpu;
    let spin_ns = time_in(&bundle, "on_cpu", "kk_spin");
    assert!(
        spin_ns as f64 > on_cpu_ns as f64 * 0.4,
        "kk_spin sampled {spin_ns} ns of on_cpu {on_cpu_ns} ns"
    );

    // DWARF gives the file and line of the call that waits.
    let lock = samples_of(&bundle, "lock_wait");
    let frame = lock
        .iter()
        .flat_map(|(user, _, _)| user.iter())
        .find(|f| f.symbol.as_deref() == Some("kk_block_on_mutex"))
        .unwrap();
    assert!(
        frame.file.as_deref().unwrap().ends_with("stackwork.c"),
        "{frame:?}"
    );
    assert!(frame.line.unwrap() > 0);
    assert!(frame.module.as_deref().unwrap().ends_with("/stackwork"));
    // ... and the caller chain continues through the thread function.
    assert!(lock.iter().any(|(user, _, _)| has_symbol(user, "waiter")));

    // Kernel frames: the futex wait, and fsync's path for io_wait.
    assert!(lock.iter().any(|(_, kernel, _)| kernel
        .iter()
        .any(|f| f.kernel && f.symbol.as_deref().is_some_and(|s| s.contains("futex")))));
    let io = samples_of(&bundle, "io_wait");
    assert!(
        io.iter()
            .any(|(user, kernel, _)| has_symbol(user, "kk_fsync_loop")
                && kernel
                    .iter()
                    .any(|f| f.symbol.as_deref().is_some_and(|s| s.contains("fsync")))),
        "no io_wait stack through fsync: {io:#?}"
    );
    // Slow calls (over run's 10 ms) carry their caller's stack.
    assert!(bundle.slow_syscalls.iter().any(|s| s.user_stack.is_some()));
}

#[test]
fn a_stripped_binary_gives_offsets_not_names() {
    let Some(_guard) = ebpf_ready("a_stripped_binary_gives_offsets_not_names") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, stripped) = build_stackwork(dir.path());
    let bundle = run_with_stacks(&stripped, dir.path(), "1");
    let profile = bundle.stacks.as_ref().unwrap();
    let in_binary: Vec<&StackFrame> = profile
        .frames
        .iter()
        .filter(|f| {
            f.module
                .as_deref()
                .is_some_and(|m| m.ends_with("/stackwork-stripped"))
        })
        .collect();
    assert!(!in_binary.is_empty(), "no frame in the stripped binary");
    for f in &in_binary {
        assert!(
            !f.symbol.as_deref().unwrap_or("").starts_with("kk_"),
            "a stripped binary cannot name {f:?}"
        );
        assert!(f.module_offset.is_some());
    }
    // Shown as module+0xoffset.
    let shown = in_binary
        .iter()
        .find(|f| f.symbol.is_none())
        .expect("an unnamed frame")
        .display_name();
    assert!(shown.starts_with("stackwork-stripped+0x"), "{shown}");
}

#[test]
fn stacks_need_the_ebpf_backend() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let out = Command::new(kernelkite_bin())
        .args(["--backend", "proc", "run", "--stacks"])
        .arg(&bundle)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!bundle.exists());
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--stacks needs the eBPF backend"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn doctor_checks_the_stack_sampler_too() {
    let Some(_guard) = ebpf_ready("doctor_checks_the_stack_sampler_too") else {
        return;
    };
    let out = Command::new(kernelkite_bin())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stacks = report["stacks"].as_str().unwrap();
    assert!(stacks.starts_with("yes (on_cpu_sample"), "{stacks}");
}
