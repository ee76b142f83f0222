//! `kernelkite viewer`: the timeline document on standard output or in a file (written
//! atomically), its shape, and one-line errors on bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use kernelkite::model::*;
use serde_json::Value;

/// Two processes over three frames; pid 20 is reused by a new process in the last frame.
fn small_bundle() -> Bundle {
    let host = HostConstants {
        clock_ticks_per_sec: 100,
        page_size_bytes: 4096,
        num_cpus: 2,
        kernel_release: Some("6.1.0".into()),
        arch: "x86_64".into(),
        time_accounting: None,
    };
    let sample = |pid: i32, start: u64, ticks: u64, rss: u64, read: u64| ProcessSample {
        pid,
        ppid: if pid == 10 { 1 } else { 10 },
        comm: if pid == 10 {
            "sh".into()
        } else {
            "a \"quoted\" <comm>".into()
        },
        state: "R".into(),
        start_time_ticks: start,
        utime_ticks: ticks,
        stime_ticks: ticks / 4,
        cutime_ticks: 0,
        cstime_ticks: 0,
        rss_pages: rss,
        num_threads: 1,
        io: Some(IoCounters {
            read_bytes: read,
            ..IoCounters::default()
        }),
        threads: Vec::new(),
    };
    let mut b = Bundle::new(Backend::Proc, host, 250);
    b.label = Some("small".into());
    b.root_pids = vec![10];
    b.frames = vec![
        Frame {
            t_ns: 0,
            processes: vec![sample(10, 500, 0, 100, 0)],
            network: None,
            host_steal_ticks: None,
        },
        Frame {
            t_ns: 250_000_000,
            processes: vec![sample(10, 500, 20, 120, 4096), sample(20, 510, 4, 50, 0)],
            network: None,
            host_steal_ticks: None,
        },
        Frame {
            t_ns: 500_000_000,
            processes: vec![sample(10, 500, 40, 120, 8192), sample(20, 540, 1, 60, 0)],
            network: None,
            host_steal_ticks: None,
        },
    ];
    b
}

fn kernelkite() -> Command {
    Command::cargo_bin("kernelkite").expect("kernelkite binary")
}

fn bundle_file(dir: &Path) -> PathBuf {
    let path = dir.join("small.json");
    write_bundle(&path, &small_bundle()).unwrap();
    path
}

#[test]
fn stdout_and_file_are_the_same_deterministic_document() {
    let dir = tempfile::tempdir().unwrap();
    let input = bundle_file(dir.path());
    let a = kernelkite().arg("viewer").arg(&input).output().unwrap();
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = kernelkite().arg("viewer").arg(&input).output().unwrap();
    assert_eq!(a.stdout, b.stdout, "same bundle, same bytes");

    let out = dir.path().join("timeline.json");
    let c = kernelkite()
        .arg("viewer")
        .arg(&input)
        .arg(&out)
        .output()
        .unwrap();
    assert!(c.status.success());
    assert!(c.stdout.is_empty(), "nothing on stdout when writing a file");
    assert_eq!(std::fs::read(&out).unwrap(), a.stdout);
    // Atomic write: no temporary file left next to it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn document_shape() {
    let doc: Value =
        serde_json::from_slice(&kernelkite::report::viewer::render(&small_bundle())).unwrap();
    assert_eq!(doc["schema"], "kernelkite-viewer");
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["session"]["label"], "small");
    assert_eq!(doc["session"]["backend"], "proc");
    assert_eq!(doc["session"]["duration_ns"], 500_000_000);
    for (name, series) in doc["series"].as_object().unwrap() {
        let n = series["values"].as_array().unwrap().len();
        assert_eq!(series["t_ns"].as_array().unwrap().len(), n, "{name}");
        if series["kind"] == "interval" {
            assert_eq!(series["t_start_ns"].as_array().unwrap().len(), n, "{name}");
        }
    }
    // pid 10: 25 ticks (20 utime + 5 stime) per 0.25 s at 100 Hz, one core. Each pid 20
    // started inside the session (absent from the first frame) and counts from its first
    // sample: 5 ticks in the first interval, then 1 tick for the new process that reused
    // the pid (never a delta across the two).
    assert_eq!(
        doc["series"]["cpu_cores"]["values"],
        serde_json::json!([1.2, 1.04])
    );
    assert_eq!(
        doc["series"]["disk_read_bytes"]["values"],
        serde_json::json!([4096, 4096])
    );
    assert_eq!(
        doc["series"]["rss_bytes"]["values"],
        serde_json::json!([409600, 696320, 737280])
    );
    let procs = doc["processes"].as_array().unwrap();
    let pids: Vec<i64> = procs.iter().map(|p| p["pid"].as_i64().unwrap()).collect();
    assert_eq!(pids, [10, 20, 20]);
    assert_eq!(procs[1]["start_time_ticks"], 510);
    assert_eq!(procs[1]["alive_at_end"], false);
    assert_eq!(procs[2]["alive_at_end"], true);
    let classes = doc["latency_classes"]["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 7);
    assert_eq!(doc["latency_classes"]["exact"], false);
    assert_eq!(classes[0]["name"], "on_cpu");
    assert_eq!(classes[0]["exact"], true);
    assert_eq!(classes[2]["exact"], false);
    assert!(doc["series"].get("net_rx_bytes").is_none());
}

#[test]
fn snapshot_of_a_small_document() {
    let bytes = kernelkite::report::viewer::render(&small_bundle());
    insta::assert_snapshot!("viewer_small", String::from_utf8(bytes).unwrap());
}

#[test]
fn bad_input_is_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str); 3] = [
        ("truncated.json", "{\"format\": \"kernelkite-bundle\""),
        (
            "other.json",
            "{\"format\": \"something-else\", \"format_version\": 1}",
        ),
        (
            "future.json",
            "{\"format\": \"kernelkite-bundle\", \"format_version\": 99}",
        ),
    ];
    for (name, text) in cases {
        let input = dir.path().join(name);
        std::fs::write(&input, text).unwrap();
        let out = dir.path().join(format!("{name}.out"));
        let r = kernelkite()
            .arg("viewer")
            .arg(&input)
            .arg(&out)
            .output()
            .unwrap();
        assert!(!r.status.success(), "{name}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(
            err.contains(name),
            "{name}: the error names the file: {err}"
        );
        assert!(!out.exists(), "{name}: no output file");
        assert!(r.stdout.is_empty());
    }
    let r = kernelkite()
        .arg("viewer")
        .arg(dir.path().join("missing.json"))
        .output()
        .unwrap();
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("missing.json"));
}
