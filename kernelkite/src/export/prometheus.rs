//! `--format prometheus` and `trace --serve`: the Prometheus text exposition format
//! (version 0.0.4, what `promtool check metrics` and every Prometheus server read),
//! encoded by the `prometheus-client` crate from a [`Snapshot`] of the analysis.
//!
//! Every value is a session total, so counters are cumulative from the session start
//! (a live `--serve` endpoint's counters only grow while tracing). Metric names carry
//! their unit (`_seconds`) and counters end in `_total`. Label sets are unique: rows of
//! a reused pid with the same command name are added up.

use std::collections::BTreeMap;

use kernelkite_common::LatencyClass;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::{syscall_histograms, ExportError};
use crate::analysis::Analysis;
use crate::model::Bundle;

/// `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The numbers one exposition shows, owned (a registry keeps its collectors).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// `((pid, comm, class), seconds)`.
    class_seconds: BTreeMap<(i32, String, &'static str), f64>,
    /// `((pid, comm), seconds)`.
    cpu_seconds: BTreeMap<(i32, String), f64>,
    /// `((pid, tid, thread comm), seconds)` of the threads with steal.
    thread_steal_seconds: BTreeMap<(i32, i32, String), f64>,
    /// `((pid, comm, syscall), histogram)` with bucket bounds in seconds.
    syscalls: BTreeMap<(i32, String, String), Hist>,
    events_lost: Option<u64>,
    /// `Bundle::events_lost_by_cause`.
    events_lost_by_cause: BTreeMap<String, u64>,
    session_seconds: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Hist {
    sum_seconds: f64,
    count: u64,
    /// `(le_seconds, count)`, not cumulative, ascending.
    buckets: Vec<(f64, u64)>,
}

impl Snapshot {
    pub fn new(bundle: &Bundle, analysis: &Analysis) -> Snapshot {
        let mut s = Snapshot {
            events_lost: analysis.events_lost,
            events_lost_by_cause: analysis.events_lost_by_cause.clone(),
            session_seconds: analysis.duration_ns as f64 / 1e9,
            ..Snapshot::default()
        };
        for p in &analysis.processes {
            for class in LatencyClass::ALL {
                *s.class_seconds
                    .entry((p.pid, p.comm.clone(), class.name()))
                    .or_default() += p.classes.get(class) as f64 / 1e9;
            }
            if let Some(cpu) = p.cpu_seconds {
                *s.cpu_seconds.entry((p.pid, p.comm.clone())).or_default() += cpu;
            }
        }
        for t in analysis.steal_threads() {
            *s.thread_steal_seconds
                .entry((t.pid, t.tid, t.comm.clone()))
                .or_default() += t.classes.steal as f64 / 1e9;
        }
        for h in syscall_histograms(bundle, analysis) {
            let e = s
                .syscalls
                .entry((h.pid, h.comm.to_string(), h.syscall.clone()))
                .or_default();
            e.sum_seconds += h.sum_ns as f64 / 1e9;
            e.count = e.count.saturating_add(h.count);
            if e.buckets.is_empty() {
                e.buckets = h
                    .buckets
                    .iter()
                    .map(|&(le, _)| (le as f64 / 1e9, 0))
                    .collect();
            }
            for (b, &(_, n)) in e.buckets.iter_mut().zip(&h.buckets) {
                b.1 = b.1.saturating_add(n);
            }
        }
        s
    }
}

type Labels = Vec<(&'static str, String)>;

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if !self.class_seconds.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_process_latency_class",
                "Time the process's threads spent in each latency class since the session started.",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            for ((pid, comm, class), secs) in &self.class_seconds {
                let labels: Labels = vec![
                    ("pid", pid.to_string()),
                    ("comm", comm.clone()),
                    ("class", class.to_string()),
                ];
                ConstCounter::new(*secs).encode(m.encode_family(&labels)?)?;
            }
        }
        if !self.thread_steal_seconds.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_thread_steal",
                "Time the thread was current on a CPU that the kernel did not run it (hypervisor steal, irq time): its steal class, for threads that have any.",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            for ((pid, tid, comm), secs) in &self.thread_steal_seconds {
                let labels: Labels = vec![
                    ("pid", pid.to_string()),
                    ("tid", tid.to_string()),
                    ("comm", comm.clone()),
                ];
                ConstCounter::new(*secs).encode(m.encode_family(&labels)?)?;
            }
        }
        if !self.cpu_seconds.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_process_cpu",
                "CPU time (user + system) of the process inside the session.",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            for ((pid, comm), secs) in &self.cpu_seconds {
                let labels: Labels = vec![("pid", pid.to_string()), ("comm", comm.clone())];
                ConstCounter::new(*secs).encode(m.encode_family(&labels)?)?;
            }
        }
        if !self.syscalls.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_syscall_latency",
                "Latency of each syscall per process (log-linear buckets, bounds inclusive).",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for ((pid, comm, syscall), h) in &self.syscalls {
                let labels: Labels = vec![
                    ("pid", pid.to_string()),
                    ("comm", comm.clone()),
                    ("syscall", syscall.clone()),
                ];
                m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                    h.sum_seconds,
                    h.count,
                    &h.buckets,
                    None,
                )?;
            }
        }
        if let Some(lost) = self.events_lost {
            let m = encoder.encode_descriptor(
                "kernelkite_events_lost",
                "Ring-buffer records and map entries the BPF programs could not store.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(lost).encode(m)?;
        }
        if !self.events_lost_by_cause.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_events_lost_by_cause",
                "kernelkite_events_lost by what was lost (lifecycle_records, slow_call_records, stack_captures, histogram_updates, ...).",
                None,
                MetricType::Counter,
            )?;
            for (cause, &n) in &self.events_lost_by_cause {
                let labels: Labels = vec![("cause", cause.clone())];
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }
        let m = encoder.encode_descriptor(
            "kernelkite_session_duration",
            "Length of the session window so far.",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.session_seconds).encode(m)?;
        Ok(())
    }
}

/// The exposition of a snapshot.
pub fn render_snapshot(snapshot: Snapshot) -> Result<String, ExportError> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).map_err(|e| {
        ExportError::Encode {
            format: "prometheus",
            message: e.to_string(),
        }
    })?;
    Ok(out)
}

/// The exposition of `bundle`.
pub fn render(bundle: &Bundle, analysis: &Analysis) -> Result<String, ExportError> {
    render_snapshot(Snapshot::new(bundle, analysis))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyze;
    use crate::model::fixture::fixture_to_bundle;

    fn fixture(name: &str) -> Bundle {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures")
            .join(name);
        fixture_to_bundle(&std::fs::read(&path).unwrap(), name).unwrap()
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_count() {
        let b = fixture("api-server-ebpf.json");
        let text = render(&b, &analyze(&b)).unwrap();
        // read in pid 6000: 900 + 60 + 3 calls (fixture), all ≤ the last bound.
        let inf = "kernelkite_syscall_latency_seconds_bucket{pid=\"6000\",comm=\"api-server\",syscall=\"read\",le=\"+Inf\"} 963";
        assert!(text.contains(inf), "{text}");
        assert!(text.contains(
            "kernelkite_syscall_latency_seconds_count{pid=\"6000\",comm=\"api-server\",syscall=\"read\"} 963"
        ));
        assert!(text.contains("kernelkite_events_lost_total 12"));
        let mut last = 0u64;
        for line in text.lines().filter(|l| {
            l.starts_with("kernelkite_syscall_latency_seconds_bucket{pid=\"6000\",comm=\"api-server\",syscall=\"read\"")
        }) {
            let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(n >= last, "{line}");
            last = n;
        }
        assert_eq!(last, 963);
    }

    #[test]
    fn class_counters_match_the_analysis() {
        let b = fixture("api-server-ebpf.json");
        let a = analyze(&b);
        let text = render(&b, &a).unwrap();
        let p = &a.processes[0];
        let want = format!(
            "kernelkite_process_latency_class_seconds_total{{pid=\"{}\",comm=\"{}\",class=\"on_cpu\"}} {}",
            p.pid,
            p.comm,
            p.classes.on_cpu as f64 / 1e9
        );
        assert!(text.contains(&want), "{want}\n{text}");
    }

    #[test]
    fn proc_bundle_has_no_syscall_or_loss_metrics() {
        let b = fixture("cargo-build-before.json");
        let text = render(&b, &analyze(&b)).unwrap();
        assert!(!text.contains("kernelkite_syscall_latency"));
        assert!(!text.contains("events_lost"));
        assert!(text.contains("kernelkite_process_cpu_seconds_total"));
    }
}
