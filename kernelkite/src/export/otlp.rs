//! `--format otlp | otlp-traces | otlp-proto | otlp-traces-proto`: OpenTelemetry
//! protocol documents built from the `opentelemetry-proto` crate's message types.
//!
//! * Metrics (`ExportMetricsServiceRequest`), one resource per process
//!   (`process.pid`, `process.parent_pid`, `process.executable.name`) plus one for the
//!   session: `kernelkite.syscall.duration` (explicit-bucket histogram, seconds, bounds
//!   inclusive as OTLP defines them), `kernelkite.latency_class.time` (monotonic sum,
//!   seconds, one point per class), `kernelkite.thread.steal.time` (monotonic sum,
//!   seconds, one point per thread with steal: `thread.id`, `thread.name`),
//!   `process.cpu.time` (monotonic sum, seconds) and
//!   `kernelkite.events.lost` on the session resource. All cumulative over the session.
//! * Traces (`ExportTraceServiceRequest`): one trace per process whose root span is the
//!   process's observed lifetime and whose children are its slow syscalls (single calls
//!   above `--min-latency-us`, `thread.id` set). The bundle records no per-interval
//!   off-CPU events, so no off-CPU spans are made.
//!
//! Ids are deterministic: FNV-1a hashes of the session (label, roots, frame times) and
//! the process or call, never zero, so exporting a bundle twice gives the same ids.
//! Times: the bundle's times are relative to the session start and it has no wall-clock
//! anchor, so `unix_nano = start_unix_ns + t_ns` with `--start-unix-ns` (default 0).
//! JSON follows OTLP/JSON (lowerCamelCase keys, hex trace/span ids, 64-bit integers as
//! strings, enums as integers): the crate's serde support implements those rules.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Histogram, HistogramDataPoint, Metric,
    NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;

use kernelkite_common::LatencyClass;

use super::{syscall_histograms, ExportHistogram, ExportOptions};
use crate::analysis::timeline::{self, ProcessSpan};
use crate::analysis::Analysis;
use crate::model::Bundle;

const SCOPE_NAME: &str = "kernelkite";

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn kv_str(key: &str, value: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(value.to_string()))
}

fn kv_int(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: SCOPE_NAME.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    }
}

/// Attributes every resource carries: the machine and the session.
fn session_attributes(bundle: &Bundle) -> Vec<KeyValue> {
    let mut out = vec![
        kv_str("service.name", "kernelkite"),
        kv_str("os.type", "linux"),
        kv_str("host.arch", host_arch(&bundle.host.arch)),
        kv_str("kernelkite.backend", bundle.backend.name()),
    ];
    if let Some(release) = &bundle.host.kernel_release {
        out.push(kv_str("os.version", release));
    }
    if let Some(label) = &bundle.label {
        out.push(kv_str("kernelkite.label", label));
    }
    out
}

/// `host.arch` uses the semantic conventions' values (`amd64`, `arm64`).
fn host_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn process_resource(
    bundle: &Bundle,
    analysis: &Analysis,
    pid: i32,
    ppid: i32,
    comm: &str,
) -> Resource {
    let mut attributes = session_attributes(bundle);
    attributes.push(kv_int("process.pid", pid as i64));
    attributes.push(kv_int("process.parent_pid", ppid as i64));
    attributes.push(kv_str("process.executable.name", comm));
    let placement = (analysis.processes.iter().rev())
        .find(|p| p.pid == pid)
        .and_then(|p| p.placement.as_ref());
    if let Some(place) = placement {
        // OpenTelemetry semantic conventions (process, container, k8s).
        if let Some(ns_pid) = place.ns_pid {
            attributes.push(kv_int("process.vpid", ns_pid as i64));
        }
        if let Some(c) = &place.cgroup {
            attributes.push(kv_str("process.linux.cgroup", &format!("0::{c}")));
        }
        if let Some(id) = &place.container_id {
            attributes.push(kv_str("container.id", id));
        }
        if let Some(runtime) = &place.container_runtime {
            attributes.push(kv_str("container.runtime.name", runtime));
        }
        if let Some(uid) = &place.pod_uid {
            attributes.push(kv_str("k8s.pod.uid", uid));
        }
    }
    Resource {
        attributes,
        ..Default::default()
    }
}

/// The metrics request of a bundle.
pub fn metrics_request(
    bundle: &Bundle,
    analysis: &Analysis,
    options: ExportOptions,
) -> ExportMetricsServiceRequest {
    // The analysis window ends at the last frame (see `Analysis::duration_ns`).
    let window_start_ns = last_frame_ns(bundle).saturating_sub(analysis.duration_ns);
    let start = options.start_unix_ns.saturating_add(window_start_ns);
    let time = options.start_unix_ns.saturating_add(last_frame_ns(bundle));
    let histograms = syscall_histograms(bundle, analysis);
    let mut resource_metrics = Vec::new();
    for p in &analysis.processes {
        let mut metrics = Vec::new();
        let mine = histograms
            .iter()
            .filter(|h| h.pid == p.pid && last_row_of_pid(analysis, p));
        if let Some(m) = histogram_metric(mine, start, time) {
            metrics.push(m);
        }
        let class_points = LatencyClass::ALL
            .iter()
            .map(|c| NumberDataPoint {
                attributes: vec![kv_str("kernelkite.latency_class", c.name())],
                start_time_unix_nano: start,
                time_unix_nano: time,
                value: Some(number_data_point::Value::AsDouble(
                    p.classes.get(*c) as f64 / 1e9,
                )),
                ..Default::default()
            })
            .collect();
        metrics.push(monotonic_sum(
            "kernelkite.latency_class.time",
            "Time the process's threads spent in each latency class.",
            "s",
            class_points,
        ));
        let steal_points: Vec<NumberDataPoint> = analysis
            .steal_threads()
            .into_iter()
            .filter(|t| t.pid == p.pid && t.process_start_time_ticks == p.start_time_ticks)
            .map(|t| NumberDataPoint {
                attributes: vec![
                    kv_int("thread.id", t.tid as i64),
                    kv_str("thread.name", &t.comm),
                ],
                start_time_unix_nano: start,
                time_unix_nano: time,
                value: Some(number_data_point::Value::AsDouble(
                    t.classes.steal as f64 / 1e9,
                )),
                ..Default::default()
            })
            .collect();
        if !steal_points.is_empty() {
            metrics.push(monotonic_sum(
                "kernelkite.thread.steal.time",
                "Time each thread was current on a CPU that the kernel did not run it (hypervisor steal, irq time), for threads that have any.",
                "s",
                steal_points,
            ));
        }
        // A process whose CPU was not measured gets no point rather than a 0.
        if let Some(cpu) = p.cpu_seconds {
            metrics.push(monotonic_sum(
                "process.cpu.time",
                "CPU time (user + system) of the process inside the session.",
                "s",
                vec![NumberDataPoint {
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    value: Some(number_data_point::Value::AsDouble(cpu)),
                    ..Default::default()
                }],
            ));
        }
        resource_metrics.push(ResourceMetrics {
            resource: Some(process_resource(bundle, analysis, p.pid, p.ppid, &p.comm)),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope()),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    // Histograms of pids the session saw only in lifecycle events (no process row).
    let orphan_pids: std::collections::BTreeSet<i32> = histograms
        .iter()
        .map(|h| h.pid)
        .filter(|pid| !analysis.processes.iter().any(|p| p.pid == *pid))
        .collect();
    for pid in orphan_pids {
        let mine = histograms.iter().filter(|h| h.pid == pid);
        let mut attributes = session_attributes(bundle);
        attributes.push(kv_int("process.pid", pid as i64));
        resource_metrics.push(ResourceMetrics {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope()),
                metrics: histogram_metric(mine, start, time).into_iter().collect(),
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    if let Some(lost) = analysis.events_lost {
        resource_metrics.push(ResourceMetrics {
            resource: Some(Resource {
                attributes: session_attributes(bundle),
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope()),
                metrics: vec![monotonic_sum(
                    "kernelkite.events.lost",
                    "Ring-buffer records and map entries the BPF programs could not store; \
                     by kernelkite.lost.cause (lifecycle_records, slow_call_records, \
                     stack_captures, ...) when the bundle says what was lost.",
                    "{event}",
                    if analysis.events_lost_by_cause.is_empty() {
                        vec![NumberDataPoint {
                            start_time_unix_nano: start,
                            time_unix_nano: time,
                            value: Some(number_data_point::Value::AsInt(
                                i64::try_from(lost).unwrap_or(i64::MAX),
                            )),
                            ..Default::default()
                        }]
                    } else {
                        (analysis.events_lost_by_cause.iter())
                            .map(|(cause, &n)| NumberDataPoint {
                                attributes: vec![kv_str("kernelkite.lost.cause", cause)],
                                start_time_unix_nano: start,
                                time_unix_nano: time,
                                value: Some(number_data_point::Value::AsInt(
                                    i64::try_from(n).unwrap_or(i64::MAX),
                                )),
                                ..Default::default()
                            })
                            .collect()
                    },
                )],
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    ExportMetricsServiceRequest { resource_metrics }
}

/// `kernelkite.syscall.duration` with one point per histogram; `None` without any.
/// What every resource of the agent's requests carries.
pub struct AgentResource<'a> {
    /// `host.name` (the node's hostname).
    pub host_name: &'a str,
    pub arch: &'a str,
    pub kernel_release: Option<&'a str>,
}

/// The agent's push (`kernelkite agent --otlp-endpoint`): one resource per series of
/// `rolling` (a process's own: `process.pid`, `process.executable.name`, its container;
/// a group: `kernelkite.group.comm` or `process.linux.cgroup`, and
/// `kernelkite.folded=true`), each with `kernelkite.latency_class.time` and
/// `kernelkite.syscall.duration` cumulative since `start_unix_ns`; and the agent's own
/// resource with `kernelkite.events.lost`.
pub fn agent_metrics_request(
    rolling: &crate::analysis::rolling::RollingTotals,
    resource: &AgentResource<'_>,
    events_lost: u64,
    start_unix_ns: u64,
    now_unix_ns: u64,
) -> ExportMetricsServiceRequest {
    use crate::analysis::rolling::{FoldByKey, SeriesKey, COARSE_BOUNDS_NS};
    let base = || {
        let mut out = vec![
            kv_str("service.name", "kernelkite"),
            kv_str("host.name", resource.host_name),
            kv_str("os.type", "linux"),
            kv_str("host.arch", host_arch(resource.arch)),
        ];
        if let Some(release) = resource.kernel_release {
            out.push(kv_str("os.version", release));
        }
        out
    };
    let place = |attributes: &mut Vec<KeyValue>, path: &str| {
        attributes.push(kv_str("process.linux.cgroup", &format!("0::{path}")));
        let named = crate::model::cgroup_path::labels(path);
        if let Some(id) = &named.container_id {
            attributes.push(kv_str("container.id", id));
        }
        if let Some(runtime) = named.runtime {
            attributes.push(kv_str("container.runtime.name", runtime));
        }
        if let Some(uid) = &named.pod_uid {
            attributes.push(kv_str("k8s.pod.uid", uid));
        }
    };
    let point = |attributes: Vec<KeyValue>, v: f64| NumberDataPoint {
        attributes,
        start_time_unix_nano: start_unix_ns,
        time_unix_nano: now_unix_ns,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..Default::default()
    };
    let mut resource_metrics = Vec::new();
    for (key, totals) in rolling.series() {
        let mut attributes = base();
        match key {
            SeriesKey::Process { pid, comm } => {
                attributes.push(kv_int("process.pid", *pid as i64));
                attributes.push(kv_str("process.executable.name", comm));
                if let Some(path) = rolling.cgroup_of(*pid) {
                    place(&mut attributes, path);
                }
            }
            SeriesKey::Group { fold_by, name } => {
                attributes.push(kv("kernelkite.folded", any_value::Value::BoolValue(true)));
                match fold_by {
                    FoldByKey::Comm => attributes.push(kv_str("kernelkite.group.comm", name)),
                    FoldByKey::Cgroup => place(&mut attributes, name),
                }
            }
        }
        let class_points = (LatencyClass::ALL.iter())
            .map(|c| {
                let ns = totals.class_ns[c.id() as usize];
                point(
                    vec![kv_str("kernelkite.latency_class", c.name())],
                    ns as f64 / 1e9,
                )
            })
            .collect();
        let mut metrics = vec![monotonic_sum(
            "kernelkite.latency_class.time",
            "Time the threads spent in each latency class.",
            "s",
            class_points,
        )];
        let hist_points: Vec<HistogramDataPoint> = (totals.syscalls.iter())
            .map(|(syscall, h)| HistogramDataPoint {
                attributes: vec![kv_str("kernelkite.syscall.name", syscall)],
                start_time_unix_nano: start_unix_ns,
                time_unix_nano: now_unix_ns,
                count: h.count,
                sum: Some(h.sum_ns as f64 / 1e9),
                bucket_counts: h.buckets_calls.to_vec(),
                // Inclusive bounds: a call below 2^k ns is at most 2^k - 1 ns.
                explicit_bounds: (COARSE_BOUNDS_NS.iter())
                    .map(|&b| (b - 1) as f64 / 1e9)
                    .collect(),
                ..Default::default()
            })
            .collect();
        if !hist_points.is_empty() {
            metrics.push(Metric {
                name: "kernelkite.syscall.duration".to_string(),
                description: "Latency of each syscall (power-of-four buckets, bounds inclusive)."
                    .to_string(),
                unit: "s".to_string(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points: hist_points,
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                })),
                ..Default::default()
            });
        }
        resource_metrics.push(ResourceMetrics {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope()),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    let mut attributes = base();
    attributes.push(kv_int("process.pid", std::process::id() as i64));
    attributes.push(kv_str("process.executable.name", "kernelkite"));
    resource_metrics.push(ResourceMetrics {
        resource: Some(Resource {
            attributes,
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            scope: Some(scope()),
            metrics: vec![monotonic_sum(
                "kernelkite.events.lost",
                "Ring-buffer records and map entries the BPF programs could not store.",
                "{event}",
                vec![point(Vec::new(), events_lost as f64)],
            )],
            ..Default::default()
        }],
        ..Default::default()
    });
    ExportMetricsServiceRequest { resource_metrics }
}

fn histogram_metric<'a>(
    histograms: impl Iterator<Item = &'a ExportHistogram<'a>>,
    start: u64,
    time: u64,
) -> Option<Metric> {
    let points: Vec<HistogramDataPoint> = histograms
        .map(|h| {
            let mut bucket_counts: Vec<u64> = h.buckets.iter().map(|&(_, n)| n).collect();
            // The overflow bucket (> last bound) is empty by construction.
            bucket_counts.push(0);
            HistogramDataPoint {
                attributes: vec![kv_str("kernelkite.syscall.name", &h.syscall)],
                start_time_unix_nano: start,
                time_unix_nano: time,
                count: h.count,
                sum: Some(h.sum_ns as f64 / 1e9),
                bucket_counts,
                explicit_bounds: h.buckets.iter().map(|&(le, _)| le as f64 / 1e9).collect(),
                min: None,
                max: Some(h.max_ns as f64 / 1e9),
                ..Default::default()
            }
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    Some(Metric {
        name: "kernelkite.syscall.duration".to_string(),
        description: "Latency of each syscall (log-linear buckets, bounds inclusive).".to_string(),
        unit: "s".to_string(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    })
}

/// Histograms are per pid: a reused pid's histograms go to its latest process row,
/// whose command name they are labelled with (see [`super::process_comm`]).
fn last_row_of_pid(analysis: &Analysis, row: &crate::analysis::ProcessRow) -> bool {
    analysis
        .processes
        .iter()
        .rev()
        .find(|q| q.pid == row.pid)
        .is_some_and(|q| std::ptr::eq(q, row))
}

fn last_frame_ns(bundle: &Bundle) -> u64 {
    bundle.frames.last().map_or(0, |f| f.t_ns)
}

fn monotonic_sum(
    name: &str,
    description: &str,
    unit: &str,
    points: Vec<NumberDataPoint>,
) -> Metric {
    Metric {
        name: name.to_string(),
        description: description.to_string(),
        unit: unit.to_string(),
        data: Some(metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

/// 64-bit FNV-1a of `parts` (each followed by a 0xff separator), from `seed`.
fn fnv1a(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h = seed;
    for part in parts {
        for &b in part.iter().chain(&[0xffu8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// What identifies the session among others: its label, roots, backend and frame times.
fn session_seed(bundle: &Bundle) -> u64 {
    let roots: Vec<u8> = bundle
        .root_pids
        .iter()
        .flat_map(|p| p.to_le_bytes())
        .collect();
    let times: Vec<u8> = [
        bundle.frames.first().map_or(0, |f| f.t_ns),
        last_frame_ns(bundle),
        bundle.frames.len() as u64,
    ]
    .iter()
    .flat_map(|t| t.to_le_bytes())
    .collect();
    fnv1a(
        FNV_OFFSET,
        &[
            bundle.label.as_deref().unwrap_or("").as_bytes(),
            bundle.backend.name().as_bytes(),
            &roots,
            &times,
        ],
    )
}

/// A non-zero 16-byte trace id.
fn trace_id(seed: u64, process: &[u8]) -> Vec<u8> {
    let hi = fnv1a(seed, &[b"trace", process]);
    let lo = fnv1a(hi, &[b"trace-lo", process]);
    let mut id = [hi.to_be_bytes(), lo.to_be_bytes()].concat();
    if id.iter().all(|&b| b == 0) {
        id[15] = 1;
    }
    id
}

/// A non-zero 8-byte span id.
fn span_id(seed: u64, what: &[u8]) -> Vec<u8> {
    let v = fnv1a(seed, &[b"span", what]).max(1);
    v.to_be_bytes().to_vec()
}

/// The traces request of a bundle.
pub fn traces_request(
    bundle: &Bundle,
    analysis: &Analysis,
    options: ExportOptions,
) -> ExportTraceServiceRequest {
    let seed = session_seed(bundle);
    let unix = |t_ns: u64| options.start_unix_ns.saturating_add(t_ns);
    let spans_of = timeline::extract(bundle, Some(analysis)).processes;
    let mut resource_spans = Vec::new();
    let mut covered = std::collections::BTreeSet::new();
    for (i, p) in spans_of.iter().enumerate() {
        let ident = process_ident(p, i);
        let trace = trace_id(seed, &ident);
        let root = span_id(seed, &ident);
        let mut attributes = vec![
            kv_int("process.pid", p.pid as i64),
            kv_int("process.parent_pid", p.ppid as i64),
            kv_str("process.executable.name", &p.comm),
        ];
        if let Some(code) = p.exit_code {
            attributes.push(kv_int("process.exit.code", code as i64));
        }
        let mut spans = vec![Span {
            trace_id: trace.clone(),
            span_id: root.clone(),
            name: format!("process {}", p.comm),
            kind: span::SpanKind::Internal as i32,
            start_time_unix_nano: unix(p.start_ns()),
            end_time_unix_nano: unix(p.end_ns()),
            attributes,
            ..Default::default()
        }];
        // Slow syscalls of this process that fall inside its lifetime (a reused pid's
        // calls go to the incarnation alive at the time).
        for (j, s) in bundle.slow_syscalls.iter().enumerate() {
            if s.pid != p.pid
                || s.t_ns < p.start_ns()
                || s.t_ns > p.end_ns()
                || covered.contains(&j)
            {
                continue;
            }
            covered.insert(j);
            spans.push(syscall_span(bundle, seed, &trace, Some(&root), j, unix));
        }
        resource_spans.push(ResourceSpans {
            resource: Some(process_resource(bundle, analysis, p.pid, p.ppid, &p.comm)),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope()),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    // Calls of processes the session never saw alive: their own traces, without parent.
    let orphans: Vec<Span> = (0..bundle.slow_syscalls.len())
        .filter(|j| !covered.contains(j))
        .map(|j| {
            let s = &bundle.slow_syscalls[j];
            let trace = trace_id(seed, &[s.pid.to_le_bytes(), [0xff; 4]].concat());
            syscall_span(bundle, seed, &trace, None, j, unix)
        })
        .collect();
    if !orphans.is_empty() {
        resource_spans.push(ResourceSpans {
            resource: Some(Resource {
                attributes: session_attributes(bundle),
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope()),
                spans: orphans,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    ExportTraceServiceRequest { resource_spans }
}

/// Bytes that identify one process span: pid, start identity, position.
fn process_ident(p: &ProcessSpan, index: usize) -> Vec<u8> {
    let mut out = p.pid.to_le_bytes().to_vec();
    out.extend(p.start_time_ticks.unwrap_or(u64::MAX).to_le_bytes());
    out.extend((index as u64).to_le_bytes());
    out
}

fn syscall_span(
    bundle: &Bundle,
    seed: u64,
    trace: &[u8],
    parent: Option<&[u8]>,
    index: usize,
    unix: impl Fn(u64) -> u64,
) -> Span {
    let s = &bundle.slow_syscalls[index];
    let name = crate::analysis::reported_syscall_name(&bundle.host.arch, s.nr, &s.name);
    let status = if s.ret < 0 {
        Status {
            code: status::StatusCode::Error as i32,
            message: format!("returned {} (-errno)", s.ret),
        }
    } else {
        Status::default()
    };
    Span {
        trace_id: trace.to_vec(),
        span_id: span_id(
            seed,
            &[b"syscall".as_slice(), &(index as u64).to_le_bytes()].concat(),
        ),
        parent_span_id: parent.map(<[u8]>::to_vec).unwrap_or_default(),
        name: format!("syscall {name}"),
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: unix(s.t_ns),
        end_time_unix_nano: unix(s.t_ns.saturating_add(s.duration_ns)),
        attributes: vec![
            kv_int("process.pid", s.pid as i64),
            kv_int("thread.id", s.tid as i64),
            kv_str("kernelkite.syscall.name", &name),
            kv_int("kernelkite.syscall.nr", s.nr as i64),
            kv_int("kernelkite.syscall.ret", s.ret),
        ],
        status: Some(status),
        ..Default::default()
    }
}

fn pretty_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(value).expect("OTLP messages serialize");
    out.push(b'\n');
    out
}

/// `--format otlp`.
pub fn metrics_json(bundle: &Bundle, analysis: &Analysis, options: ExportOptions) -> Vec<u8> {
    pretty_json(&metrics_request(bundle, analysis, options))
}

/// `--format otlp-traces`.
pub fn traces_json(bundle: &Bundle, analysis: &Analysis, options: ExportOptions) -> Vec<u8> {
    pretty_json(&traces_request(bundle, analysis, options))
}

/// `--format otlp-proto`.
pub fn metrics_proto(bundle: &Bundle, analysis: &Analysis, options: ExportOptions) -> Vec<u8> {
    metrics_request(bundle, analysis, options).encode_to_vec()
}

/// `--format otlp-traces-proto`.
pub fn traces_proto(bundle: &Bundle, analysis: &Analysis, options: ExportOptions) -> Vec<u8> {
    traces_request(bundle, analysis, options).encode_to_vec()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::analysis::analyze;

    use crate::model::fixture::committed as fixture;

    #[test]
    fn histogram_points_are_consistent_and_exact() {
        let b = fixture("api-server-ebpf.json");
        let req = metrics_request(&b, &analyze(&b), ExportOptions::default());
        let mut read_count = None;
        for rm in &req.resource_metrics {
            for m in &rm.scope_metrics[0].metrics {
                if let Some(metric::Data::Histogram(h)) = &m.data {
                    for p in &h.data_points {
                        assert_eq!(p.bucket_counts.len(), p.explicit_bounds.len() + 1);
                        assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count);
                        assert!(p.explicit_bounds.windows(2).all(|w| w[0] < w[1]));
                        let pid = rm
                            .resource
                            .as_ref()
                            .unwrap()
                            .attributes
                            .iter()
                            .find(|a| a.key == "process.pid")
                            .cloned();
                        let name = &p.attributes[0].value.as_ref().unwrap().value;
                        if name == &Some(any_value::Value::StringValue("read".into()))
                            && pid.is_some_and(|a| {
                                a.value.unwrap().value == Some(any_value::Value::IntValue(6000))
                            })
                        {
                            read_count = Some(p.count);
                        }
                    }
                }
            }
        }
        // The fixture's read histogram of pid 6000: 900 + 60 + 3 calls.
        assert_eq!(read_count, Some(963));
    }

    #[test]
    fn span_ids_are_unique_non_zero_deterministic_and_parented() {
        let b = fixture("api-server-ebpf.json");
        let a = analyze(&b);
        let req = traces_request(&b, &a, ExportOptions::default());
        assert_eq!(req, traces_request(&b, &a, ExportOptions::default()));
        let spans: Vec<&Span> = req
            .resource_spans
            .iter()
            .flat_map(|r| r.scope_spans.iter().flat_map(|s| s.spans.iter()))
            .collect();
        let ids: BTreeSet<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
        assert_eq!(ids.len(), spans.len());
        for s in &spans {
            assert_eq!(s.trace_id.len(), 16);
            assert_eq!(s.span_id.len(), 8);
            assert!(s.trace_id.iter().any(|&x| x != 0) && s.span_id.iter().any(|&x| x != 0));
            assert!(s.end_time_unix_nano >= s.start_time_unix_nano);
            if !s.parent_span_id.is_empty() {
                let parent = spans
                    .iter()
                    .find(|p| p.span_id == s.parent_span_id)
                    .unwrap();
                assert_eq!(parent.trace_id, s.trace_id);
                assert!(parent.start_time_unix_nano <= s.start_time_unix_nano);
            }
        }
        // Two slow syscalls in the fixture, both children of the api-server span.
        let calls: Vec<&&Span> = spans
            .iter()
            .filter(|s| s.name.starts_with("syscall "))
            .collect();
        assert_eq!(calls.len(), 2);
        assert!(calls.iter().all(|s| !s.parent_span_id.is_empty()));
        // Another session (another label) gets other ids.
        let mut other = b.clone();
        other.label = Some("another session".into());
        let req2 = traces_request(&other, &analyze(&other), ExportOptions::default());
        assert_ne!(
            req2.resource_spans[0].scope_spans[0].spans[0].trace_id,
            spans[0].trace_id
        );
    }
}
