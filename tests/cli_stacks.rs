//! End-to-end tests of `stacks` and `flamegraph` on a replayed fixture with stacks:
//! the numbers, `--class`/`--top`, the JSON contract, atomic outputs, and the one-line
//! error for a bundle recorded without `--stacks`.

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::{kk, replay_fixture};

use assert_cmd::Command;

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A failure: exit 2 and exactly one line on stderr, without a panic.
fn one_line_error(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let s = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(s.trim_end().lines().count(), 1, "stderr: {s:?}");
    assert!(s.starts_with("kernelkite: error: "), "stderr: {s:?}");
    s
}

#[test]
fn stacks_text_json_class_and_top() {
    let dir = tempfile::tempdir().unwrap();
    let b = replay_fixture(dir.path(), "stacks-demo.json");
    let text = stdout_of(kk().arg("stacks").arg(&b));
    assert!(text.contains(
        "lock_wait: 1.857 s with stacks = 96.7% of the class's 1.920 s, 62.90 ms without; 675 intervals, 2 distinct stack(s)"
    ));
    assert!(text.contains("  #1  1.671 s  90.0% of stacks  87.1% of lock_wait  600 intervals"));
    assert!(text.contains("kv::Cache::get(std::string const&)  src/cache.cc:88"));
    assert!(text.contains("ext4_sync_file [k]"));
    assert!(text.contains("libsnappy.so.1+0x6c40"));

    let one = stdout_of(
        kk().args(["stacks", "--class", "io_wait", "--top", "1"])
            .arg(&b),
    );
    assert_eq!(one.matches("  #").count(), 1);
    assert!(one.contains("io_wait: ") && !one.contains("lock_wait"));
    assert!(one.contains("  ... 1 more stack(s): 70.30 ms"));

    let doc: serde_json::Value =
        serde_json::from_str(&stdout_of(kk().args(["stacks", "--json"]).arg(&b))).unwrap();
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["kind"], "stacks");
    assert_eq!(doc["sample_hz"], 99);
    let classes = doc["classes"].as_array().unwrap();
    let lock = classes.iter().find(|c| c["class"] == "lock_wait").unwrap();
    assert_eq!(lock["class_ns"], 1_920_000_000u64);
    assert_eq!(lock["stack_ns"], 1_857_099_800u64);
    let top = &lock["stacks"][0];
    assert_eq!(top["total_ns"], 1_671_419_300u64);
    let frames = top["frames"].as_array().unwrap();
    assert_eq!(frames[0]["name"], "clone3");
    assert_eq!(frames.last().unwrap()["name"], "__schedule");
    assert_eq!(frames.last().unwrap()["kernel"], true);
    // The stack time of a class is the sum of the samples of that class.
    for c in classes {
        let sum: u64 = c["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["total_ns"].as_u64().unwrap())
            .sum();
        if c["distinct_stacks"].as_u64().unwrap() <= 5 {
            assert_eq!(sum, c["stack_ns"].as_u64().unwrap(), "{}", c["class"]);
        }
    }
}

#[test]
fn flamegraph_svg_and_folded() {
    let dir = tempfile::tempdir().unwrap();
    let b = replay_fixture(dir.path(), "stacks-demo.json");
    let svg = dir.path().join("lock.svg");
    kk().args(["flamegraph", "--class", "lock_wait", "-o"])
        .arg(&svg)
        .arg(&b)
        .assert()
        .success()
        .stdout("");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<?xml"));
    assert!(text.contains("lock_wait: off-CPU time by stack"));
    assert!(text.contains("<title>all (1,857,099,800 ns, 100%)</title>"));

    let folded_out = stdout_of(kk().args(["flamegraph", "--folded"]).arg(&b));
    let file = dir.path().join("all.folded");
    kk().args(["flamegraph", "--folded", "-o"])
        .arg(&file)
        .arg(&b)
        .assert()
        .success();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), folded_out);
    let total: u64 = folded_out
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    // Every sample's time is in exactly one line.
    let bundle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
    let samples: u64 = bundle["stacks"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["total_ns"].as_u64().unwrap())
        .sum();
    assert_eq!(total, samples);
    assert!(folded_out
        .lines()
        .all(|l| l.split(';').next().is_some_and(|c| [
            "on_cpu",
            "runqueue",
            "io_wait",
            "lock_wait",
            "syscall_blocked"
        ]
        .contains(&c))));
    let per_process = stdout_of(
        kk().args([
            "flamegraph",
            "--folded",
            "--per-process",
            "--class",
            "on_cpu",
        ])
        .arg(&b),
    );
    assert!(
        per_process.lines().all(|l| l.starts_with("kvstore;")),
        "{per_process}"
    );
}

#[test]
fn bundles_without_stacks_and_bad_outputs_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let plain = replay_fixture(dir.path(), "api-server-ebpf.json");
    let err = one_line_error(kk().arg("stacks").arg(&plain));
    assert!(
        err.contains("api-server-ebpf.json has no stacks (record with --stacks)"),
        "{err}"
    );
    let out = dir.path().join("x.svg");
    let err = one_line_error(kk().args(["flamegraph", "-o"]).arg(&out).arg(&plain));
    assert!(
        err.contains("has no stacks (record with --stacks)"),
        "{err}"
    );
    let err = one_line_error(kk().args(["flamegraph", "--folded"]).arg(&plain));
    assert!(err.contains("has no stacks"), "{err}");
    assert!(!out.exists());

    let b = replay_fixture(dir.path(), "stacks-demo.json");
    let err = one_line_error(
        kk().args(["flamegraph", "--class", "unknown_wait", "-o"])
            .arg(&out)
            .arg(&b),
    );
    assert!(
        err.contains("stacks-demo.json has no unknown_wait stacks"),
        "{err}"
    );
    assert!(!out.exists());
    let missing_dir = dir.path().join("no/such/dir/x.svg");
    let err = one_line_error(kk().args(["flamegraph", "-o"]).arg(&missing_dir).arg(&b));
    assert!(err.contains("cannot write"), "{err}");
    // Nothing but the two bundles was left behind (no temp file).
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["api-server-ebpf.json", "stacks-demo.json"]);
    // A bad class is a usage error.
    let out = kk()
        .args(["stacks", "--class", "napping"])
        .arg(&b)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown class \"napping\""));
}
