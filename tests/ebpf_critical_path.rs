//! Real-kernel tests of `run --critical-path` and `kernelkite critical-path`: process
//! trees whose critical path is known, read back through `critical-path --json` as users
//! read it.

#[path = "support/ebpf.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::*;

/// `[env] kernelkite run --critical-path --record <dir>/r.kkr <dir>/b.json -- command...`,
/// then `critical-path --json` of the bundle (checked against the recording's replay).
fn path_of(hooks: Option<&str>, cwd: &Path, command: &[&str]) -> (Value, Value, PathBuf) {
    let bundle = cwd.join("b.json");
    let mut run = Command::new(kernelkite_bin());
    if let Some(h) = hooks {
        run.env("KERNELKITE_HOOKS", h);
    }
    output_ok(
        "run --critical-path",
        run.current_dir(cwd)
            .args(["run", "--critical-path", "--record"])
            .arg(cwd.join("r.kkr"))
            .arg(&bundle)
            .arg("--")
            .args(command),
    );
    let out = output_ok(
        "critical-path",
        Command::new(kernelkite_bin())
            .args(["--json", "critical-path"])
            .arg(&bundle),
    );
    let path: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The recording carries the stream: its replay is the bundle, byte for byte.
    let replayed = cwd.join("replayed.json");
    output_ok(
        "replay",
        Command::new(kernelkite_bin())
            .arg("replay")
            .arg(cwd.join("r.kkr"))
            .arg(&replayed),
    );
    assert!(
        std::fs::read(&replayed).unwrap() == std::fs::read(&bundle).unwrap(),
        "the replay of the recording differs from the bundle"
    );
    let bundle_json: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    check_tiles(&path);
    (path, bundle_json, bundle)
}

/// The contract: by_thread adds up to wall_ns, and the segments are in time order and
/// tile the root's wall time.
fn check_tiles(path: &Value) {
    let wall = path["wall_ns"].as_u64().unwrap();
    assert!(wall > 0, "{path:#}");
    let by_thread: u64 = (path["by_thread"].as_array().unwrap().iter())
        .map(|t| t["ns"].as_u64().unwrap())
        .sum();
    assert_eq!(by_thread, wall, "{path:#}");
    let mut t = path["start_ns"].as_u64().unwrap();
    for s in path["segments"].as_array().unwrap() {
        assert_eq!(s["start_ns"].as_u64().unwrap(), t, "segments tile: {s}");
        let end = s["end_ns"].as_u64().unwrap();
        assert!(end > t, "{s}");
        let classes: u64 = (s["classes"].as_object().unwrap().values())
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(classes, end - t, "a segment's classes add up to it: {s}");
        t = end;
    }
    assert_eq!(t, path["start_ns"].as_u64().unwrap() + wall);
}

/// Path time of the threads whose comm is `comm`.
fn path_ns_of_comm(path: &Value, comm: &str) -> u64 {
    (path["by_thread"].as_array().unwrap().iter())
        .filter(|t| t["comm"] == comm)
        .map(|t| t["ns"].as_u64().unwrap())
        .sum()
}

/// (first segment start, last segment end) of thread `tid` on the path.
fn span_of(path: &Value, tid: i64) -> Option<(u64, u64)> {
    let segs: Vec<&Value> = (path["segments"].as_array().unwrap().iter())
        .filter(|s| s["tid"].as_i64() == Some(tid))
        .collect();
    Some((
        segs.first()?["start_ns"].as_u64().unwrap(),
        segs.last()?["end_ns"].as_u64().unwrap(),
    ))
}

/// A thread's traced life from the bundle's fork and exit events: (fork, exit) t_ns.
fn life_of(bundle: &Value, tid: i64) -> (u64, u64) {
    let t_of = |kind: &str| {
        (bundle["lifecycle"].as_array().unwrap().iter())
            .find(|e| e["kind"] == kind && e["tid"].as_i64() == Some(tid))
            .and_then(|e| e["t_ns"].as_u64())
            .unwrap_or_else(|| panic!("no {kind} of {tid}"))
    };
    (t_of("fork"), t_of("exit"))
}

fn workload() -> String {
    workload_bin().to_string_lossy().into_owned()
}

#[test]
fn a_long_background_job_holds_the_critical_path_of_its_shell() {
    let Some(_serial) = ebpf_ready("a_long_background_job_holds_the_critical_path_of_its_shell")
    else {
        return;
    };
    let script = format!(
        "{} burn --iterations 300000000 & sleep 0.05; wait",
        workload()
    );
    for hooks in [None, Some("classic")] {
        let dir = tempfile::tempdir().unwrap();
        let (path, _, _) = path_of(hooks, dir.path(), &["sh", "-c", &script]);
        let wall = path["wall_ns"].as_u64().unwrap();
        let long = path_ns_of_comm(&path, "kk-workload");
        assert!(
            long as f64 >= 0.8 * wall as f64,
            "{hooks:?}: the long job holds {long} of {wall} ns: {path:#}"
        );
        // The short job ran while the long one did: it is not on the path.
        let short = path_ns_of_comm(&path, "sleep");
        assert!(short < wall / 10, "{hooks:?}: {path:#}");
    }
}

#[test]
fn the_path_of_a_make_runs_through_each_stage_in_order() {
    let Some(_serial) = ebpf_ready("the_path_of_a_make_runs_through_each_stage_in_order") else {
        return;
    };
    if Command::new("make").arg("--version").output().is_err() {
        return skip::required(
            "the_path_of_a_make_runs_through_each_stage_in_order",
            "make is not installed",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    // Stage 2 (a sleep) needs stage 1 (a CPU burn): make runs them one after the other
    // and waits for each, so the path is make -> burn -> make -> sleep -> make.
    std::fs::write(
        dir.path().join("Makefile"),
        format!(
            "all: stage2\nstage1:\n\t{} burn --iterations 200000000\nstage2: stage1\n\tsleep 0.3\n.PHONY: all stage1 stage2\n",
            workload()
        ),
    )
    .unwrap();
    let (path, bundle, _) = path_of(None, dir.path(), &["make", "-s"]);
    let tid_of = |comm: &str| {
        (path["by_thread"].as_array().unwrap().iter())
            .find(|t| t["comm"] == comm)
            .and_then(|t| t["tid"].as_i64())
            .unwrap_or_else(|| panic!("no {comm} on the path: {path:#}"))
    };
    let (burn, sleep) = (tid_of("kk-workload"), tid_of("sleep"));
    let (burn_span, sleep_span) = (
        span_of(&path, burn).unwrap(),
        span_of(&path, sleep).unwrap(),
    );
    assert!(
        burn_span.1 <= sleep_span.0,
        "stage 1 before stage 2: {path:#}"
    );
    // Each stage is on the path for (nearly) its whole life: the forks and exits are
    // where the path crosses between make and its children.
    for tid in [burn, sleep] {
        let (fork, exit) = life_of(&bundle, tid);
        let on_path: u64 = (path["by_thread"].as_array().unwrap().iter())
            .filter(|t| t["tid"].as_i64() == Some(tid))
            .map(|t| t["ns"].as_u64().unwrap())
            .sum();
        assert!(
            on_path as f64 >= 0.9 * (exit - fork) as f64,
            "tid {tid} lived {} ns, {on_path} on the path: {path:#}",
            exit - fork
        );
    }
    // The sleep's own time is a wait for a timer, in its class.
    let sleep_wait = (path["segments"].as_array().unwrap().iter())
        .filter(|s| s["tid"].as_i64() == Some(sleep) && s["state"] == "waiting")
        .map(|s| s["classes"]["syscall_blocked"].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert!(sleep_wait > 0, "{path:#}");
    // Nothing else is on the path but make itself.
    for t in path["by_thread"].as_array().unwrap() {
        let comm = t["comm"].as_str().unwrap();
        assert!(["make", "kk-workload", "sleep"].contains(&comm), "{path:#}");
    }
}

#[test]
fn bundles_without_the_stream_say_why_and_exit_2() {
    let Some(_serial) = ebpf_ready("bundles_without_the_stream_say_why_and_exit_2") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for backend in ["ebpf", "proc"] {
        let bundle = dir.path().join(format!("{backend}.json"));
        output_ok(
            "run",
            Command::new(kernelkite_bin())
                .args(["--backend", backend, "run"])
                .arg(&bundle)
                .args(["--", "true"]),
        );
        let out = Command::new(kernelkite_bin())
            .arg("critical-path")
            .arg(&bundle)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{backend}");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("has no critical path"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn the_path_of_a_cargo_build_runs_through_the_rustc_invocations() {
    let Some(_serial) = ebpf_ready("the_path_of_a_cargo_build_runs_through_the_rustc_invocations")
    else {
        return;
    };
    // The cargo that runs the tests, else the one that built them (never a skip).
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    // A crate with one path dependency: nothing to fetch, so --offline builds it.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (krate, body) in [
        (
            "dep",
            "pub fn table() -> Vec<u64> { (0..1000u64).map(|i| i * 7 % 97).collect() }\n",
        ),
        (
            "app",
            "fn main() { println!(\"{}\", dep::table().iter().sum::<u64>()); }\n",
        ),
    ] {
        std::fs::create_dir_all(root.join(krate).join("src")).unwrap();
        let file = if krate == "dep" { "lib.rs" } else { "main.rs" };
        std::fs::write(root.join(krate).join("src").join(file), body).unwrap();
        let deps = if krate == "app" {
            "dep = { path = \"../dep\" }\n"
        } else {
            ""
        };
        std::fs::write(
            root.join(krate).join("Cargo.toml"),
            format!("[package]\nname = \"{krate}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\n{deps}"),
        )
        .unwrap();
    }
    let target = root.join("target");
    let target = target.to_str().unwrap();
    let app = root.join("app");
    let (path, bundle, bundle_path) = path_of(
        None,
        &app,
        &[&cargo, "build", "--offline", "-q", "--target-dir", target],
    );
    // The path names each rustc by the crate it builds (its argv, read at exec), in
    // --json and in the text.
    for krate in ["dep", "app"] {
        let named = (path["by_thread"].as_array().unwrap().iter()).any(|t| {
            (t["argv"].as_array().into_iter().flatten())
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w[0] == "--crate-name" && w[1] == krate)
        });
        assert!(named, "no rustc --crate-name {krate} on the path: {path:#}");
    }
    // A thread woken to die when its rustc exited waited for the thread that ran the
    // exit: the path follows it there instead of charging that wait to the build.
    let stuck: Vec<&Value> = (path["segments"].as_array().unwrap().iter())
        .filter(|s| s["woken_by"] == "group_exit")
        .collect();
    assert!(stuck.is_empty(), "{stuck:#?}");
    let text = output_ok(
        "critical-path",
        Command::new(kernelkite_bin())
            .arg("critical-path")
            .arg(&bundle_path),
    );
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("rustc --crate-name dep"), "{text}");
    // The rustc processes: those that exec'd rustc.
    let rustc: Vec<i64> = (bundle["lifecycle"].as_array().unwrap().iter())
        .filter(|e| e["kind"] == "exec" && e["comm"] == "rustc")
        .map(|e| e["pid"].as_i64().unwrap())
        .collect();
    let in_rustc: Vec<&Value> = (path["by_thread"].as_array().unwrap().iter())
        .filter(|t| rustc.contains(&t["pid"].as_i64().unwrap()))
        .collect();
    let mut pids: Vec<i64> = in_rustc
        .iter()
        .map(|t| t["pid"].as_i64().unwrap())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    // Both crates' compilations (and cargo's rustc probes) are on the path.
    assert!(pids.len() >= 2, "{path:#}");
    let ns: u64 = in_rustc.iter().map(|t| t["ns"].as_u64().unwrap()).sum();
    let wall = path["wall_ns"].as_u64().unwrap();
    assert!(
        ns as f64 >= 0.5 * wall as f64,
        "rustc holds {ns} of {wall} ns: {path:#}"
    );
}
