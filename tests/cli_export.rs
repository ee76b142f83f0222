//! End-to-end tests of `kernelkite export` on the shipped fixtures, each format checked
//! by a real consumer: Debian's `promtool check metrics` for `prometheus`, the official
//! Python `opentelemetry-proto` package (strict protobuf JSON parsing, and protobuf
//! bytes) for the OTLP formats. The Trace Event and JSON Schema rules are checked in
//! the unit tests of `export::chrome_trace` and `export::json`.
//!
//! Without promtool or the Python package a test prints why and passes, except under
//! CI (`CI` set), where that is a failure (`cargo xtask ci` installs both).

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::kk;
#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

const FIXTURES: &[&str] = &[
    "api-server-ebpf.json",
    "cargo-build-before.json",
    "cargo-build-after.json",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Replay a fixture into `dir` and return the bundle path.
fn bundle(dir: &Path, fixture: &str) -> PathBuf {
    let out = dir.join(fixture.replace(".json", ".bundle.json"));
    kk().arg("replay")
        .arg(repo().join("fixtures").join(fixture))
        .arg(&out)
        .assert()
        .success();
    out
}

fn export(bundle: &Path, format: &str, out: &Path) {
    let o = kk()
        .args(["export", "--format", format, "-o"])
        .arg(out)
        .arg(bundle)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `Some(())` when `tool` can run; otherwise prints why and returns `None` (a failure
/// under CI: `skip::required`).
fn tool_ready(test: &str, ok: bool, what: &str) -> Option<()> {
    if ok {
        return Some(());
    }
    skip::required(
        test,
        &format!("{what} is missing (cargo xtask ci installs it)"),
    );
    None
}

fn promtool_ok() -> bool {
    StdCommand::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn otel_python_ok() -> bool {
    StdCommand::new("python3")
        .args([
            "-c",
            "import google.protobuf, opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `promtool check metrics < file`: (success, combined output).
pub fn promtool_check(file: &Path) -> (bool, String) {
    let out = StdCommand::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn prometheus_exports_pass_promtool() {
    if tool_ready(
        "prometheus_exports_pass_promtool",
        promtool_ok(),
        "promtool",
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for fixture in FIXTURES {
        let b = bundle(dir.path(), fixture);
        let out = dir.path().join("metrics.prom");
        export(&b, "prometheus", &out);
        let (ok, text) = promtool_check(&out);
        // promtool prints lint findings even when it exits 0: accept none.
        assert!(ok && text.trim().is_empty(), "{fixture}: promtool: {text}");
    }
    // The check can fail: a counter without `_total`, in milliseconds.
    let bad = dir.path().join("bad.prom");
    std::fs::write(
        &bad,
        "# HELP x_milliseconds x\n# TYPE x_milliseconds counter\nx_milliseconds 5\n",
    )
    .unwrap();
    let (ok, text) = promtool_check(&bad);
    assert!(!ok && text.contains("_total"), "promtool: {text}");
}

fn otlp_check(kind: &str, json: &Path, proto: &Path) -> (bool, String) {
    let out = StdCommand::new("python3")
        .arg(repo().join("tests/support/otlp_check.py"))
        .arg(kind)
        .arg(json)
        .arg(proto)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn otlp_exports_parse_strictly_with_the_official_python_package() {
    let test = "otlp_exports_parse_strictly_with_the_official_python_package";
    if tool_ready(test, otel_python_ok(), "python3 with opentelemetry-proto").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for fixture in FIXTURES {
        let b = bundle(dir.path(), fixture);
        for (kind, json_format, proto_format) in [
            ("metrics", "otlp", "otlp-proto"),
            ("traces", "otlp-traces", "otlp-traces-proto"),
        ] {
            let json = dir.path().join(format!("{kind}.json"));
            let proto = dir.path().join(format!("{kind}.pb"));
            export(&b, json_format, &json);
            export(&b, proto_format, &proto);
            let (ok, text) = otlp_check(kind, &json, &proto);
            assert!(ok, "{fixture} {kind}: {text}");
            assert!(text.starts_with("ok: "), "{text}");
        }
    }
    // The eBPF fixture's spans: two processes, two slow syscalls.
    let b = bundle(dir.path(), "api-server-ebpf.json");
    let (json, proto) = (dir.path().join("t.json"), dir.path().join("t.pb"));
    export(&b, "otlp-traces", &json);
    export(&b, "otlp-traces-proto", &proto);
    let (_, text) = otlp_check("traces", &json, &proto);
    assert_eq!(text.trim(), "ok: 2 resources, 4 spans");
    // The checks can fail: an id in protobuf's base64 instead of OTLP's hex, and a
    // field OTLP does not have.
    let doc = std::fs::read_to_string(&json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
    let id = v["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(&json, doc.replace(&id, "HYeZjiOnKAzR+xmJeW79sw==")).unwrap();
    let (ok, text) = otlp_check("traces", &json, &proto);
    assert!(!ok && text.contains("not lowercase hex"), "{text}");
    std::fs::write(&json, doc.replacen("\"name\":", "\"nom\": 1, \"name\":", 1)).unwrap();
    let (ok, text) = otlp_check("traces", &json, &proto);
    assert!(!ok && text.contains("strict parse failed"), "{text}");
}

#[test]
fn stdout_and_file_outputs_are_identical_and_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path(), "api-server-ebpf.json");
    for format in [
        "prometheus",
        "otlp",
        "otlp-traces",
        "otlp-proto",
        "chrome-trace",
        "json",
    ] {
        let out = dir.path().join("out");
        export(&b, format, &out);
        let stdout = kk()
            .args(["export", "--format", format])
            .arg(&b)
            .output()
            .unwrap();
        assert!(stdout.status.success());
        assert_eq!(stdout.stdout, std::fs::read(&out).unwrap(), "{format}");
    }
}

#[test]
fn otlp_times_are_anchored_by_start_unix_ns() {
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path(), "api-server-ebpf.json");
    let out = kk()
        .args([
            "export",
            "--format",
            "otlp-traces",
            "--start-unix-ns",
            "1700000000000000000",
        ])
        .arg(&b)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let spans = &v["resourceSpans"][0]["scopeSpans"][0]["spans"];
    // The futex call of the fixture starts 812 ms into the session.
    assert_eq!(spans[1]["startTimeUnixNano"], "1700000000812000000");
    assert_eq!(spans[1]["endTimeUnixNano"], "1700000000824000000");
}

#[test]
fn folded_without_stacks_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path(), "api-server-ebpf.json");
    let out_file = dir.path().join("out.folded");
    let out = kk()
        .args(["export", "--format", "folded", "-o"])
        .arg(&out_file)
        .arg(&b)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("bundle has no stacks; record with --stacks"),
        "{err}"
    );
    assert!(!out_file.exists());
}

#[test]
fn bad_inputs_are_one_line_errors_and_leave_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("out.prom");
    let missing = dir.path().join("missing.json");
    let out = kk()
        .args(["export", "--format", "prometheus", "-o"])
        .arg(&out_file)
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("missing.json"), "{err}");
    assert!(!err.contains("panicked"));
    assert!(!out_file.exists());

    let not_json = dir.path().join("garbage.json");
    std::fs::write(&not_json, "{\"format\": \"kernelkite-bundle\", ").unwrap();
    let out = kk()
        .args(["export", "--format", "json"])
        .arg(&not_json)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("garbage.json"));

    let b = bundle(dir.path(), "api-server-ebpf.json");
    let out = kk()
        .args(["export", "--format", "json", "-o"])
        .arg(dir.path().join("no-such-dir/out.json"))
        .arg(&b)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("no-such-dir/out.json"), "{err}");

    let out = kk()
        .args(["export", "--format", "svg"])
        .arg(&b)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// `export` (like every report) takes a recording: it exports the bundle the recording
/// replays to, which is its live session's bundle.
#[test]
fn a_recording_exports_like_the_bundle_of_its_live_session() {
    let dir = repo().join("fixtures/recordings");
    for format in ["prometheus", "json", "chrome-trace", "otlp"] {
        let export = |input: &str| {
            let out = kk()
                .args(["export", "--format", format])
                .arg(dir.join(input))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        assert_eq!(
            export("run-ebpf-futex.kkr"),
            export("run-ebpf-futex.bundle.json"),
            "{format}"
        );
    }
}

/// `kernelkite ARGS` on a bundle, its stdout.
fn stdout_of(args: &[&str], bundle: &Path) -> String {
    let o = kk().args(args).arg(bundle).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Steal per thread, from a real session beside CPU hogs on a VM (steal in every
/// thread): the summary lists it, and Prometheus, OTLP, the Chrome trace and the JSON
/// export each carry every thread's steal, adding up to the bundle's steal class.
#[test]
fn steal_is_reported_per_thread_in_the_summary_and_every_export() {
    let bundle = repo().join("fixtures/recordings/run-ebpf-steal.bundle.json");
    let summary: serde_json::Value =
        serde_json::from_str(&stdout_of(&["summary", "--json"], &bundle)).unwrap();
    let total = summary["latency_classes"]["steal"].as_u64().unwrap();
    let threads = summary["steal_threads"].as_array().unwrap();
    assert!(total > 0 && threads.len() >= 2, "{summary}");
    let per_thread: std::collections::BTreeMap<i64, u64> = threads
        .iter()
        .map(|t| (t["tid"].as_i64().unwrap(), t["steal_ns"].as_u64().unwrap()))
        .collect();
    assert_eq!(per_thread.values().sum::<u64>(), total);
    let text = stdout_of(&["summary"], &bundle);
    assert!(text.contains("steal by thread"), "{text}");
    for tid in per_thread.keys() {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(&tid.to_string())),
            "tid {tid} not in the steal table: {text}"
        );
    }
    let close = |what: &str, seconds: f64, ns: u64| {
        assert!(
            (seconds * 1e9 - ns as f64).abs() <= 1.0 + ns as f64 * 1e-9,
            "{what}: {seconds} s vs {ns} ns"
        );
    };

    let prom = stdout_of(&["export", "--format", "prometheus"], &bundle);
    for (tid, ns) in &per_thread {
        let line = prom
            .lines()
            .find(|l| {
                l.starts_with("kernelkite_thread_steal_seconds_total{")
                    && l.contains(&format!("tid=\"{tid}\""))
            })
            .unwrap_or_else(|| panic!("no steal series of tid {tid}: {prom}"));
        let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        close(&format!("prometheus tid {tid}"), value, *ns);
    }

    let otlp: serde_json::Value =
        serde_json::from_str(&stdout_of(&["export", "--format", "otlp"], &bundle)).unwrap();
    let mut otlp_steal = std::collections::BTreeMap::new();
    for rm in otlp["resourceMetrics"].as_array().unwrap() {
        for sm in rm["scopeMetrics"].as_array().unwrap() {
            for m in sm["metrics"].as_array().unwrap() {
                if m["name"] != "kernelkite.thread.steal.time" {
                    continue;
                }
                for p in m["sum"]["dataPoints"].as_array().unwrap() {
                    let tid = p["attributes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|a| a["key"] == "thread.id")
                        .map(|a| {
                            a["value"]["intValue"]
                                .as_str()
                                .unwrap()
                                .parse::<i64>()
                                .unwrap()
                        })
                        .unwrap();
                    otlp_steal.insert(tid, p["asDouble"].as_f64().unwrap());
                }
            }
        }
    }
    assert_eq!(
        otlp_steal.keys().collect::<Vec<_>>(),
        per_thread.keys().collect::<Vec<_>>()
    );
    for (tid, ns) in &per_thread {
        close(&format!("otlp tid {tid}"), otlp_steal[tid], *ns);
    }

    let trace: serde_json::Value =
        serde_json::from_str(&stdout_of(&["export", "--format", "chrome-trace"], &bundle)).unwrap();
    for (tid, ns) in &per_thread {
        let us: f64 = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "steal" && e["tid"].as_i64() == Some(*tid))
            .map(|e| e["dur"].as_f64().unwrap())
            .sum();
        assert!(
            (us * 1000.0 - *ns as f64).abs() <= 1.0 + *ns as f64 * 1e-6,
            "chrome trace tid {tid}: {us} µs of steal slices vs {ns} ns"
        );
    }

    let doc: serde_json::Value =
        serde_json::from_str(&stdout_of(&["export", "--format", "json"], &bundle)).unwrap();
    for t in doc["analysis"]["threads"].as_array().unwrap() {
        let tid = t["tid"].as_i64().unwrap();
        let steal = t["classes"]["steal"].as_u64().unwrap();
        assert_eq!(
            steal,
            per_thread.get(&tid).copied().unwrap_or(0),
            "tid {tid}"
        );
    }
}

/// `go tool pprof -top` reads the pprof export of a real `--stacks` session and names
/// its functions with the weights `kernelkite stacks` gives them, in every class.
#[test]
fn pprof_export_reads_in_go_tool_pprof_with_the_stacks_weights() {
    let go_ok = StdCommand::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if tool_ready("pprof_export", go_ok, "go (golang-go)").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bundle = repo().join("fixtures/recordings/run-ebpf-unwound.bundle.json");
    let out = dir.path().join("profile.pb.gz");
    export(&bundle, "pprof", &out);
    let stacks = kk()
        .args(["--json", "stacks", "--top", "100"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(stacks.status.success());
    let stacks: serde_json::Value = serde_json::from_slice(&stacks.stdout).unwrap();
    let mut checked = 0;
    for class in stacks["classes"].as_array().unwrap() {
        let name = class["class"].as_str().unwrap();
        let with_stacks = class["stack_ns"].as_u64().unwrap();
        if with_stacks == 0 {
            continue;
        }
        let top = StdCommand::new("go")
            .args(["tool", "pprof", "-top", "-nodecount=1000", "-unit=ns"])
            .arg(format!("-sample_index={name}"))
            .arg(&out)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&top.stdout);
        assert!(
            top.status.success(),
            "{}",
            String::from_utf8_lossy(&top.stderr)
        );
        // "Showing nodes accounting for N ns, 100% of N ns total"
        let total: f64 = (text.lines())
            .find_map(|l| {
                l.split(" of ")
                    .nth(1)?
                    .strip_suffix("ns total")
                    .map(str::to_string)
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no total in {text}"));
        assert_eq!(total as u64, with_stacks, "{name}: {text}");
        // The heaviest stack's leaf (frames are root first) is a flat entry with at
        // least its weight; kernel frames end in `_[k]`, as in folded stacks.
        let heaviest = &class["stacks"][0];
        let leaf_frame = heaviest["frames"].as_array().unwrap().last().unwrap();
        let mut leaf = leaf_frame["name"].as_str().unwrap().to_string();
        if leaf_frame["kernel"].as_bool().unwrap() {
            leaf.push_str("_[k]");
        }
        let weight = heaviest["total_ns"].as_u64().unwrap() as f64;
        let flat: f64 = (text.lines())
            .filter(|l| l.trim_end().ends_with(&format!(" {leaf}")))
            .filter_map(|l| {
                l.split_whitespace()
                    .next()?
                    .strip_suffix("ns")?
                    .parse::<f64>()
                    .ok()
            })
            .sum();
        assert!(
            flat >= weight * 0.999,
            "{name}: {leaf} flat {flat} < {weight}: {text}"
        );
        checked += 1;
    }
    assert!(checked >= 2, "{stacks}");
}
