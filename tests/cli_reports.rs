//! End-to-end tests of `replay`, `summary`, `compare` and `tree` on the shipped fixtures:
//! exact numbers, `--fail-on` exit codes, and every bad-input case.

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::{fixtures, kk};

use std::path::PathBuf;

use assert_cmd::Command;
use predicates::prelude::*;

/// Replay both cargo-build fixtures into a temp dir.
fn bundles() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.json");
    let after = dir.path().join("after.json");
    kk().arg("replay")
        .arg(fixtures().join("cargo-build-before.json"))
        .arg(&before)
        .assert()
        .success();
    kk().arg("replay")
        .arg(fixtures().join("cargo-build-after.json"))
        .arg(&after)
        .assert()
        .success();
    (dir, before, after)
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json_of(cmd: &mut Command) -> serde_json::Value {
    serde_json::from_str(&stdout_of(cmd)).unwrap()
}

/// A failure must be exactly one line on stderr, without a panic or backtrace.
fn assert_one_line_error(stderr: &[u8]) -> String {
    let s = String::from_utf8_lossy(stderr).into_owned();
    assert_eq!(s.trim_end().lines().count(), 1, "stderr: {s:?}");
    assert!(!s.contains("panicked"), "stderr: {s:?}");
    assert!(s.starts_with("kernelkite: error: "), "stderr: {s:?}");
    s
}

#[test]
fn replay_is_byte_for_byte_deterministic() {
    let (dir, before, _) = bundles();
    let again = dir.path().join("again.json");
    kk().arg("replay")
        .arg(fixtures().join("cargo-build-before.json"))
        .arg(&again)
        .assert()
        .success();
    assert_eq!(
        std::fs::read(&before).unwrap(),
        std::fs::read(&again).unwrap()
    );
}

#[test]
fn summary_text_has_the_exact_fixture_numbers() {
    let (_dir, before, _) = bundles();
    let text = stdout_of(kk().arg("summary").arg(&before));
    for expected in [
        "duration             1500 ms",
        "frames               7",
        "processes            4 distinct pids",
        "CPU                  2.790 s",
        "peak RSS (tree)      943.00 MiB",
        "disk read            3.34 MiB",
        "disk write           2.57 MiB",
        "events lost          n/a (proc sampler)",
        "network (host-wide)",
        "(estimated)",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // on_cpu and runqueue are exact even from /proc.
    for line in text.lines() {
        let l = line.trim_start();
        if l.starts_with("on_cpu ") || l.starts_with("runqueue ") {
            assert!(!l.contains("estimated"), "{l}");
        }
    }
}

#[test]
fn summary_json_contract() {
    let (_dir, before, _) = bundles();
    let v = json_of(kk().arg("summary").arg("--json").arg(&before));
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["label"], "cargo build (before)");
    assert_eq!(v["backend"], "proc");
    assert_eq!(v["duration_ms"], 1500.0);
    assert_eq!(v["frames"], 7);
    assert_eq!(v["distinct_pids"], 4);
    assert_eq!(v["cpu_seconds"], 2.79);
    assert_eq!(v["peak_rss_bytes"], 943u64 * 1024 * 1024);
    assert_eq!(v["read_bytes"], 3_502_080);
    assert_eq!(v["write_bytes"], 2_695_168);
    assert_eq!(v["latency_classes_exact"], false);
    assert_eq!(v["events_lost"], serde_json::Value::Null);
    assert!(v["syscalls"].as_array().unwrap().is_empty());
    let classes = v["latency_classes"].as_object().unwrap();
    let keys: Vec<&str> = classes.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "on_cpu",
            "runqueue",
            "io_wait",
            "lock_wait",
            "syscall_blocked",
            "unknown_wait",
            "steal"
        ]
    );
    assert_eq!(v["latency_classes"]["on_cpu"], 2_720_000_000u64);
}

#[test]
fn compare_reports_the_expected_changes() {
    let (_dir, before, after) = bundles();
    let v = json_of(kk().arg("--json").arg("compare").arg(&before).arg(&after));
    assert_eq!(v["schema_version"], 1);
    let pct = |m: &str| {
        let d = v["deltas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["metric"] == m)
            .unwrap_or_else(|| panic!("no {m}"));
        format!("{:.1}", d["pct"].as_f64().unwrap())
    };
    assert_eq!(pct("duration_ms"), "-33.3");
    assert_eq!(pct("cpu_seconds"), "-55.9");
    assert_eq!(pct("peak_rss_bytes"), "-60.4");
    assert_eq!(pct("distinct_pids"), "-25.0");
    assert_eq!(pct("read_bytes"), "-57.0");
    assert_eq!(pct("write_bytes"), "-55.6");
    for class in [
        "on_cpu",
        "runqueue",
        "io_wait",
        "lock_wait",
        "syscall_blocked",
        "unknown_wait",
    ] {
        pct(&format!("{class}_ns"));
    }
    let text = stdout_of(kk().arg("compare").arg(&before).arg(&after));
    assert!(text.contains("-33.3%") && text.contains("-60.4%"), "{text}");
}

#[test]
fn fail_on_exit_codes() {
    let (_dir, before, after) = bundles();
    // Passing rules: exit 0.
    kk().args([
        "compare",
        "--fail-on",
        "cpu_seconds>+10%",
        "--fail-on",
        "peak_rss_bytes>+50MiB",
    ])
    .arg(&before)
    .arg(&after)
    .assert()
    .code(0);
    // The reverse comparison regresses: exit 1 and the failed rules on stderr.
    kk().args([
        "compare",
        "--fail-on",
        "cpu_seconds>+10%",
        "--fail-on",
        "duration_ms>+100",
    ])
    .arg(&after)
    .arg(&before)
    .assert()
    .code(1)
    .stderr(predicate::str::contains("cpu_seconds>+10%: FAILED"))
    .stderr(predicate::str::contains("duration_ms>+100: FAILED"));
    // A metric that must not drop.
    kk().args(["compare", "--fail-on", "distinct_pids<0"])
        .arg(&before)
        .arg(&after)
        .assert()
        .code(1);
    // Malformed rules: exit 2, one line.
    for bad in [
        "cpu_seconds",
        "cpu>+10%",
        "cpu_seconds>+10parsecs",
        "peak_rss_bytes>+5s",
    ] {
        let out = kk()
            .args(["compare", "--fail-on", bad])
            .arg(&before)
            .arg(&after)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let e = assert_one_line_error(&out.stderr);
        assert!(e.contains("invalid --fail-on rule"), "{e}");
    }
}

#[test]
fn tree_text_and_json() {
    let (_dir, before, _) = bundles();
    let text = stdout_of(kk().arg("tree").arg(&before));
    let lines: Vec<&str> = text.lines().skip(2).map(str::trim).collect();
    assert!(lines[0].starts_with("5000 cargo"), "{text}");
    assert!(lines[1].starts_with("├── 5010 rustc"), "{text}");
    assert!(lines[2].starts_with("│   └── 5020 ld"), "{text}");
    assert!(lines[3].starts_with("└── 5011 rustc"), "{text}");
    let v = json_of(kk().arg("tree").arg("--json").arg(&before));
    let root = &v["roots"][0];
    assert_eq!(root["pid"], 5000);
    let kids: Vec<i64> = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(kids, [5010, 5011]);
    assert_eq!(root["children"][0]["children"][0]["pid"], 5020);
    assert_eq!(v["roots"].as_array().unwrap().len(), 1);
}

#[test]
fn bad_fixtures_fail_cleanly_without_output() {
    let cases = [
        ("truncated.json", "not valid JSON"),
        ("unknown-version.json", "unsupported fixture version 2"),
        ("misaligned-arrays.json", "misaligned arrays"),
        ("counter-backwards.json", "goes backwards"),
        ("unknown-backend.json", "unknown backend \"dtrace\""),
    ];
    for (file, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let out_path = dir.path().join("out.json");
        let out = kk()
            .arg("replay")
            .arg(fixtures().join("bad").join(file))
            .arg(&out_path)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{file}");
        let e = assert_one_line_error(&out.stderr);
        assert!(e.contains(file), "{file}: {e}");
        assert!(e.contains(expected), "{file}: {e}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{file} left a file"
        );
    }
}

#[test]
fn unreadable_inputs_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    for cmd in ["summary", "tree"] {
        let out = kk().arg(cmd).arg(&missing).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(assert_one_line_error(&out.stderr).contains("missing.json"));
    }
    // A fixture is not a bundle.
    let out = kk()
        .arg("summary")
        .arg(fixtures().join("cargo-build-before.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out.stderr);
    // Replay into a directory that does not exist: error, nothing written.
    let out = kk()
        .arg("replay")
        .arg(fixtures().join("cargo-build-before.json"))
        .arg(dir.path().join("no/such/dir/out.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out.stderr);
    assert!(!dir.path().join("no").exists());
}

#[test]
fn critical_path_reads_a_recorded_stream_and_says_why_older_bundles_have_none() {
    let recordings = fixtures().join("recordings");
    // Recorded with --critical-path: the path tiles the root's wall time.
    let out = kk()
        .args(["--json", "critical-path"])
        .arg(recordings.join("run-ebpf-critical-path.kkr"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let wall = path["wall_ns"].as_u64().unwrap();
    let sum: u64 = (path["by_thread"].as_array().unwrap().iter())
        .map(|t| t["ns"].as_u64().unwrap())
        .sum();
    assert!(wall > 0);
    assert_eq!(sum, wall, "{path:#}");
    // Older recordings (eBPF without the stream, /proc): exit 2, one line saying why.
    for (file, why) in [
        ("run-ebpf-futex.kkr", "--critical-path"),
        ("run-proc-cpu.kkr", "/proc sampler"),
    ] {
        let out = kk()
            .arg("critical-path")
            .arg(recordings.join(file))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{file}");
        assert!(out.stdout.is_empty(), "{file}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("has no critical path") && err.contains(why),
            "{err}"
        );
    }
}

/// `kernelkite man` is kernelkite(1), whose SEE ALSO names kernelkite-NAME(1) for each
/// subcommand; `kernelkite man NAME` prints that page (the Debian package installs them
/// all); a hidden or unknown name is a one-line error.
#[test]
fn man_pages_for_the_top_and_every_subcommand() {
    let top = stdout_of(kk().arg("man"));
    assert!(top.contains(".TH kernelkite 1"), "{top}");
    assert!(top.contains("kernelkite\\-run(1)"), "{top}");
    let run = stdout_of(kk().args(["man", "run"]));
    assert!(run.contains(".TH kernelkite-run 1"), "{run}");
    assert!(run.contains("\\fBkernelkite run\\fR"), "{run}");
    assert!(run.contains("\\-\\-max\\-frames"), "{run}");
    for bad in ["no-such-command", "bench-floor"] {
        let out = kk().args(["man", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert_one_line_error(&out.stderr);
    }
}

/// `kernelkite --version` says the version, the commit it was built from and whether the
/// embedded BPF object was built from the BPF sources beside it (CI's object check keeps
/// the stamp current, so in a checkout it must say it was).
#[test]
fn version_names_the_commit_and_the_bpf_objects_sources() {
    let long = stdout_of(kk().arg("--version"));
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 3, "{long}");
    assert_eq!(lines[0], concat!("kernelkite ", env!("CARGO_PKG_VERSION")));
    let commit = lines[1].strip_prefix("commit:     ").expect(&long);
    let hash = commit.split_whitespace().next().unwrap_or_default();
    assert!(
        hash.len() == 12 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{long}"
    );
    assert!(
        lines[2].starts_with("BPF object: built from these sources (fnv1a64 "),
        "{long}"
    );
    let short = stdout_of(kk().arg("-V"));
    assert_eq!(short.trim_end(), lines[0]);
}
