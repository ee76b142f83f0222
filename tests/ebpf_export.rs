//! Real-kernel test of `kernelkite trace --serve`: trace a workload, scrape /metrics
//! with a plain TCP GET while it runs, and check the exposition with `promtool`.

#[path = "support/ebpf.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{ebpf_ready, GatedWorkload, RunningTrace};

/// A free loopback port (bound, then released for kernelkite to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(port: u16) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn serve_exposes_live_metrics_that_promtool_accepts() {
    let Some(_serial) = ebpf_ready("serve_exposes_live_metrics_that_promtool_accepts") else {
        return;
    };
    let promtool = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !promtool {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is missing under CI"
        );
        eprintln!("skipped: promtool is missing");
        return;
    }
    let mut workload = GatedWorkload::spawn(&["futex_stress", "--threads", "4", "--seconds", "3"]);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let trace = RunningTrace::start(&[workload.pid], &["--serve", &addr]);
    workload.go();
    // Scrape while the workload runs until its lock_wait shows up (snapshots every 50 ms).
    let class_line = format!(
        "kernelkite_process_latency_class_seconds_total{{pid=\"{}\",comm=\"kk-workload\",class=\"lock_wait\"}}",
        workload.pid
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let response = loop {
        let r = scrape(port).unwrap_or_default();
        let seconds = r
            .lines()
            .find(|l| l.starts_with(&class_line))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        if seconds > 0.0 {
            break r;
        }
        assert!(Instant::now() < deadline, "no lock_wait in /metrics: {r}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(
        body.contains("kernelkite_syscall_latency_seconds_bucket{"),
        "{body}"
    );
    assert!(body.contains("syscall=\"futex\""), "{body}");
    assert!(body.contains("kernelkite_events_lost_total"), "{body}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live.prom");
    std::fs::write(&file, body).unwrap();
    let out = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.trim().is_empty(),
        "promtool: {text}\n{body}"
    );
    workload.finish();
    let traced = trace.finish();
    assert!(traced
        .stderr
        .iter()
        .any(|l| l.contains(&format!("serving metrics at http://{addr}/metrics"))));
    // Once the trace has stopped the port is closed.
    assert!(scrape(port).is_err());
}

/// A real trace with short-lived children and slow syscalls, exported in every format
/// and checked by the same consumers as the fixtures' exports.
#[test]
fn a_real_trace_exports_in_every_format() {
    use kernelkite::export::{chrome_trace, render, ExportOptions, Format};
    let Some(_serial) = ebpf_ready("a_real_trace_exports_in_every_format") else {
        return;
    };
    let (traced, _) = support::trace_workload(
        &[
            "exec_storm",
            "--count",
            "6",
            "--parallel",
            "2",
            "--self-exec",
        ],
        &["--follow", "--min-latency-us", "200"],
    );
    let (b, a) = (&traced.bundle, &traced.analysis);
    assert!(
        a.processes.len() > 3,
        "children traced: {}",
        a.processes.len()
    );
    assert!(!b.slow_syscalls.is_empty(), "no slow syscall recorded");
    let options = ExportOptions {
        start_unix_ns: 1_700_000_000_000_000_000,
    };
    let out = |f: Format| render(b, a, f, options).unwrap();

    let doc: serde_json::Value = serde_json::from_slice(&out(Format::ChromeTrace)).unwrap();
    let violations = chrome_trace::rule_violations(&doc);
    assert!(violations.is_empty(), "{violations:#?}");

    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("m.prom");
    std::fs::write(&prom, out(Format::Prometheus)).unwrap();
    let check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&prom).unwrap())
        .output();
    match check {
        Ok(o) => assert!(
            o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
            "promtool: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => assert!(std::env::var_os("CI").is_none(), "promtool: {e}"),
    }

    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/support/otlp_check.py");
    for (kind, json, proto) in [
        ("metrics", Format::Otlp, Format::OtlpProto),
        ("traces", Format::OtlpTraces, Format::OtlpTracesProto),
    ] {
        let (j, p) = (dir.path().join("o.json"), dir.path().join("o.pb"));
        std::fs::write(&j, out(json)).unwrap();
        std::fs::write(&p, out(proto)).unwrap();
        let o = Command::new("python3")
            .arg(&script)
            .arg(kind)
            .arg(&j)
            .arg(&p)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        if text.contains("ModuleNotFoundError") && std::env::var_os("CI").is_none() {
            eprintln!("skipped the OTLP check: {text}");
            continue;
        }
        assert!(o.status.success(), "{kind}: {text}");
    }
}
