//! The viewer document: a JSON timeline of one bundle for other tools (trace viewers,
//! notebooks, dashboards). `docs/VIEWER.md` is its reference.
//!
//! Pure and deterministic: the same bundle always gives the same bytes (object keys in
//! a fixed order, floats rounded to 6 decimals).

use kernelkite_common::LatencyClass;
use serde_json::{json, Value};

use crate::analysis::{analyze, Analysis};
use crate::model::Bundle;

use crate::analysis::timeline::{extract, InstantSeries, IntervalSeries, ProcessSpan, Timeline};

/// The value of the document's `schema` field.
pub const SCHEMA: &str = "kernelkite-viewer";
/// The document's `schema_version`: bumped when a field changes meaning or goes away
/// (new fields may appear without a bump).
pub const SCHEMA_VERSION: u32 = 1;

/// The viewer document of `bundle`, as pretty JSON with a trailing newline.
pub fn render(bundle: &Bundle) -> Vec<u8> {
    let analysis = analyze(bundle);
    let timeline = extract(bundle, Some(&analysis));
    let mut out = serde_json::to_vec_pretty(&document(bundle, &analysis, &timeline))
        .expect("JSON values serialize");
    out.push(b'\n');
    out
}

/// The viewer document as a JSON value.
pub fn document(bundle: &Bundle, analysis: &Analysis, timeline: &Timeline) -> Value {
    let mut series = serde_json::Map::new();
    series.insert(
        "cpu_cores".into(),
        interval_f64(
            &timeline.cpu_cores,
            "cores",
            "CPU use of the observed processes",
        ),
    );
    series.insert(
        "rss_bytes".into(),
        instant(
            &timeline.rss_bytes,
            "bytes",
            "sum of the resident set sizes",
        ),
    );
    series.insert(
        "process_count".into(),
        instant(
            &timeline.process_count,
            "processes",
            "processes sampled in the frame",
        ),
    );
    series.insert(
        "disk_read_bytes".into(),
        interval_u64(
            &timeline.disk_read_bytes,
            "bytes",
            "bytes read from storage (io.read_bytes)",
        ),
    );
    series.insert(
        "disk_write_bytes".into(),
        interval_u64(
            &timeline.disk_write_bytes,
            "bytes",
            "bytes written to storage (io.write_bytes)",
        ),
    );
    if let Some(rx) = &timeline.net_rx_bytes {
        series.insert(
            "net_rx_bytes".into(),
            interval_u64(
                rx,
                "bytes",
                "host-wide bytes received, every interface but lo",
            ),
        );
    }
    if let Some(tx) = &timeline.net_tx_bytes {
        series.insert(
            "net_tx_bytes".into(),
            interval_u64(tx, "bytes", "host-wide bytes sent, every interface but lo"),
        );
    }

    let total_class_ns = analysis.latency_classes.total_ns();
    let classes: Vec<Value> = LatencyClass::ALL
        .iter()
        .map(|&c| {
            json!({
                "name": c.name(),
                "ns": analysis.latency_classes.get(c),
                "share": round6(analysis.class_share(c)),
                "exact": analysis.class_is_exact(c),
                "rule": c.rule(),
            })
        })
        .collect();

    let host = &bundle.host;
    json!({
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "session": {
            "label": bundle.label,
            "backend": bundle.backend.name(),
            "replayed_from": bundle.replayed_from,
            "host": {
                "arch": host.arch,
                "num_cpus": host.num_cpus,
                "kernel_release": host.kernel_release,
                "clock_ticks_per_sec": host.clock_ticks_per_sec,
                "page_size_bytes": host.page_size_bytes,
            },
            "interval_ms": bundle.interval_ms,
            "root_pids": bundle.root_pids,
            "launched": bundle.launched.as_ref().map(|l| json!({
                "argv": l.argv,
                "pid": l.pid,
                "exit_code": l.exit_code,
                "signal": l.signal,
            })),
            "start_ns": timeline.start_ns,
            "end_ns": timeline.end_ns,
            "duration_ns": analysis.duration_ns,
            "frames": analysis.frames,
            "frame_cap": {
                "max_frames": bundle.frame_cap.max_frames,
                "frames_dropped": bundle.frame_cap.frames_dropped,
                "hit": bundle.frame_cap.frames_dropped > 0,
            },
            "events_lost": bundle.events_lost,
            "events_lost_by_cause": bundle.events_lost_by_cause,
        },
        "totals": {
            "cpu_seconds": round6(analysis.cpu_seconds),
            "cpu_source": analysis.cpu_source,
            "peak_rss_bytes": analysis.peak_rss_bytes,
            "read_bytes": analysis.read_bytes,
            "write_bytes": analysis.write_bytes,
            "processes": analysis.distinct_pids,
            "network": analysis.network.as_ref().map(|n| json!({
                "rx_bytes": n.rx_bytes,
                "tx_bytes": n.tx_bytes,
            })),
        },
        "series": series,
        "processes": timeline.processes.iter().map(span).collect::<Vec<_>>(),
        "slow_syscalls": slow_syscalls(bundle),
        "latency_classes": {
            "exact": analysis.latency_classes_exact,
            "total_ns": total_class_ns,
            "classes": classes,
        },
    })
}

fn instant(s: &InstantSeries<u64>, unit: &str, what: &str) -> Value {
    json!({
        "kind": "instant",
        "unit": unit,
        "description": what,
        "t_ns": s.t_ns,
        "values": s.values,
    })
}

fn interval_u64(s: &IntervalSeries<u64>, unit: &str, what: &str) -> Value {
    json!({
        "kind": "interval",
        "unit": unit,
        "description": what,
        "t_start_ns": s.start_ns,
        "t_ns": s.end_ns,
        "values": s.values,
    })
}

fn interval_f64(s: &IntervalSeries<f64>, unit: &str, what: &str) -> Value {
    json!({
        "kind": "interval",
        "unit": unit,
        "description": what,
        "t_start_ns": s.start_ns,
        "t_ns": s.end_ns,
        "values": s.values.iter().map(|&v| round6(v)).collect::<Vec<f64>>(),
    })
}

fn span(p: &ProcessSpan) -> Value {
    json!({
        "pid": p.pid,
        "ppid": p.ppid,
        "comm": p.comm,
        "start_time_ticks": p.start_time_ticks,
        "start_ns": p.start_ns(),
        "end_ns": p.end_ns(),
        "start_exact": p.fork_ns.is_some(),
        "end_exact": p.exit_ns.is_some(),
        "first_seen_ns": p.first_seen_ns,
        "last_seen_ns": p.last_seen_ns,
        "samples": p.samples,
        "exit_code": p.exit_code,
        "alive_at_end": p.alive_at_end,
    })
}

/// Every slow syscall of the bundle, in time order (ties: pid, tid, nr).
fn slow_syscalls(bundle: &Bundle) -> Vec<Value> {
    let mut all: Vec<_> = bundle.slow_syscalls.iter().collect();
    all.sort_by_key(|s| (s.t_ns, s.pid, s.tid, s.nr, s.duration_ns));
    all.into_iter()
        .map(|s| {
            json!({
                "t_ns": s.t_ns,
                "pid": s.pid,
                "tid": s.tid,
                "name": s.name,
                "nr": s.nr,
                "duration_ns": s.duration_ns,
                "ret": s.ret,
            })
        })
        .collect()
}

fn round6(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1e6).round() / 1e6
    } else {
        0.0
    }
}
