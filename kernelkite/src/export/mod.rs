//! Exporters: a bundle and its analysis rendered in formats other tools read
//! (`kernelkite export --format FORMAT`; `docs/EXPORTS.md` maps every field).
//!
//! Every exporter is a pure function of `(&Bundle, &Analysis)`: numbers come from
//! [`crate::analysis`] (class times, syscall histograms, process rows) and the report
//! timeline (process lifetimes); nothing is derived twice. One module per format.

pub mod chrome_trace;
pub mod folded;
pub mod json;
pub mod otlp;
#[cfg(target_os = "linux")]
pub mod otlp_push;
pub mod pprof;
pub mod prometheus;
#[cfg(target_os = "linux")]
pub mod serve;

use crate::analysis::Analysis;
use crate::model::Bundle;

/// The formats `kernelkite export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Prometheus text exposition format (0.0.4), as `promtool check metrics` reads it.
    Prometheus,
    /// OTLP/JSON ExportMetricsServiceRequest: syscall latency histograms, class times.
    Otlp,
    /// OTLP/JSON ExportTraceServiceRequest: process and slow-syscall spans.
    OtlpTraces,
    /// The `otlp` metrics request as protobuf bytes.
    OtlpProto,
    /// The `otlp-traces` request as protobuf bytes.
    OtlpTracesProto,
    /// Trace Event JSON for Perfetto UI and chrome://tracing.
    ChromeTrace,
    /// The analysis as versioned JSON (schema: docs/export.schema.json).
    Json,
    /// Folded stacks (`frame;frame;frame count`) for flame graph tools (bundles with
    /// stacks).
    Folded,
    /// The stacks as a gzip `profile.proto` (go tool pprof, Parca, Pyroscope): one
    /// sample type per latency class (ns) and the samples' counts.
    Pprof,
}

/// Options that apply to exporters with absolute timestamps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// Unix time (ns) of the session's t = 0. Bundles carry no wall-clock anchor, so
    /// OTLP timestamps are `start_unix_ns + t_ns` and default to the Unix epoch.
    pub start_unix_ns: u64,
}

/// Why an export could not be produced (one line; the command adds the file name).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("bundle has no stacks; record with --stacks")]
    NoStacks,
    #[error("encoding {format}: {source}")]
    Encode {
        format: &'static str,
        #[source]
        source: std::fmt::Error,
    },
}

/// Render `bundle` (analysed as `analysis`) in `format`.
pub fn render(
    bundle: &Bundle,
    analysis: &Analysis,
    format: Format,
    options: ExportOptions,
) -> Result<Vec<u8>, ExportError> {
    match format {
        Format::Prometheus => prometheus::render(bundle, analysis).map(String::into_bytes),
        Format::Otlp => Ok(otlp::metrics_json(bundle, analysis, options)),
        Format::OtlpTraces => Ok(otlp::traces_json(bundle, analysis, options)),
        Format::OtlpProto => Ok(otlp::metrics_proto(bundle, analysis, options)),
        Format::OtlpTracesProto => Ok(otlp::traces_proto(bundle, analysis, options)),
        Format::ChromeTrace => Ok(chrome_trace::render(bundle, analysis)),
        Format::Json => Ok(json::render(analysis)),
        Format::Folded => folded::render(bundle),
        Format::Pprof => pprof::render(bundle),
    }
}

/// Inclusive upper bound (ns) of histogram bucket `index`: bucket `i` holds the
/// integer values `bucket_lower(i) ..= bucket_upper(i) − 1`, which is exactly the
/// `le` (Prometheus) and explicit-bound (OTLP) meaning, "≤ bound".
pub fn bucket_le_ns(index: usize) -> u64 {
    kernelkite_common::hist::bucket_upper(index).saturating_sub(1)
}

/// A histogram of one syscall in one process, re-bucketed for exporters: counts at
/// every bucket bound from the lowest to the highest non-empty bucket of the whole
/// bundle (empty buckets in between included), so every series of a document shares
/// its bounds. Buckets below that range are empty in every series and left out.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportHistogram<'a> {
    pub pid: i32,
    pub comm: &'a str,
    pub syscall: String,
    /// Σ of the bucket counts.
    pub count: u64,
    pub sum_ns: u64,
    /// Exact slowest call.
    pub max_ns: u64,
    /// `(le_ns, count in this bucket)`, ascending, not cumulative.
    pub buckets: Vec<(u64, u64)>,
}

/// The bundle's per-process syscall histograms with their process names (from the
/// analysis's process rows) and syscall names (the analysis's naming rule).
pub fn syscall_histograms<'a>(bundle: &Bundle, analysis: &'a Analysis) -> Vec<ExportHistogram<'a>> {
    use kernelkite_common::hist::NUM_BUCKETS;
    let index = |i: u32| (i as usize).min(NUM_BUCKETS - 1);
    let used = || {
        bundle
            .syscalls
            .iter()
            .flat_map(|h| h.buckets.iter().map(|&(i, _)| index(i)))
    };
    let (Some(lo), Some(hi)) = (used().min(), used().max()) else {
        return Vec::new();
    };
    // The latest row of each pid, looked up once (a churny session has tens of
    // thousands of processes and histograms).
    let comms: std::collections::HashMap<i32, &str> = (analysis.processes.iter())
        .map(|p| (p.pid, p.comm.as_str()))
        .collect();
    bundle
        .syscalls
        .iter()
        .map(|h| {
            let mut counts = vec![0u64; hi - lo + 1];
            let mut count = 0u64;
            for &(i, n) in &h.buckets {
                let slot = &mut counts[index(i) - lo];
                *slot = slot.saturating_add(n);
                count = count.saturating_add(n);
            }
            ExportHistogram {
                pid: h.pid,
                comm: comms.get(&h.pid).copied().unwrap_or(""),
                syscall: crate::analysis::histogram_syscall_name(&bundle.host.arch, h),
                count,
                sum_ns: h.total_ns,
                max_ns: h.max_ns,
                buckets: counts
                    .into_iter()
                    .enumerate()
                    .map(|(k, n)| (bucket_le_ns(lo + k), n))
                    .collect(),
            }
        })
        .collect()
}

/// The command name of the latest process row with `pid` ("" when never observed).
pub fn process_comm(analysis: &Analysis, pid: i32) -> &str {
    analysis
        .processes
        .iter()
        .rev()
        .find(|p| p.pid == pid)
        .map_or("", |p| p.comm.as_str())
}
