//! Comparing two analyses: per-metric deltas and `--fail-on` threshold rules.
//!
//! Rule grammar: `<metric><op><threshold>` where `op` is `>` (fail when the change is
//! above the threshold) or `<` (fail when the change is below it), and `threshold` is a
//! signed number (`+` when no sign is given) followed by an optional unit:
//!
//! * `%` — relative change, `100 × (after − before) / before` (a rise from 0 is +∞);
//! * a byte unit for byte metrics: `B`, `KiB`, `MiB`, `GiB`, `TiB`, `KB`, `MB`, `GB`, `TB`;
//! * a time unit for time metrics: `ns`, `us`, `ms`, `s`;
//! * nothing — an absolute change in the metric's own unit (ms for `duration_ms`,
//!   seconds for `cpu_seconds`, bytes, ns for the class metrics, a count for pids).
//!
//! Examples: `cpu_seconds>+10%`, `peak_rss_bytes>+50MiB`, `duration_ms>+100`,
//! `distinct_pids<-1`, `on_cpu_ns>+200ms`.

use kernelkite_common::LatencyClass;
use serde::Serialize;

use super::Analysis;

/// The unit a metric is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricUnit {
    Milliseconds,
    Seconds,
    Nanoseconds,
    Bytes,
    Count,
}

/// One compared metric.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Delta {
    /// Metric name (also the name `--fail-on` rules use).
    pub metric: String,
    pub unit: MetricUnit,
    pub before: f64,
    pub after: f64,
    /// `after − before`.
    pub change: f64,
    /// `100 × change / before`; `None` when `before` is 0 and `after` is not; 0 when both are 0.
    pub pct: Option<f64>,
    /// False for the four sleep classes when either bundle estimated them.
    pub exact: bool,
}

/// Deltas of every compared metric, in a fixed order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub before_label: Option<String>,
    pub after_label: Option<String>,
    pub deltas: Vec<Delta>,
    /// CPU by program name, the programs with the most CPU first (a build's `rustc`,
    /// `cc`, `ld`: complete when every process has a row, as with eBPF or exit
    /// accounting).
    pub by_command: Vec<CommandDelta>,
}

/// One program's processes and CPU in both sessions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommandDelta {
    /// The program: its argv\[0\]'s file name, else its comm.
    pub command: String,
    pub before_processes: u64,
    pub after_processes: u64,
    pub before_cpu_seconds: f64,
    pub after_cpu_seconds: f64,
    /// `100 × (after − before) / before`; `None` when `before` is 0 and `after` is not.
    pub cpu_pct: Option<f64>,
    /// Whether every one of its processes' CPU is exact in both sessions (eBPF, or read
    /// at its exit), not sampled.
    pub exact: bool,
}

/// The program name a process row is grouped under.
fn command_name(p: &super::ProcessRow) -> String {
    p.argv
        .as_ref()
        .and_then(|a| a.first())
        .map(|a0| a0.rsplit('/').next().unwrap_or(a0).to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| p.comm.clone())
}

/// Processes, CPU seconds and exactness by program name.
fn by_command(a: &Analysis) -> std::collections::BTreeMap<String, (u64, f64, bool)> {
    let ebpf = a.backend == crate::model::Backend::Ebpf;
    let mut m = std::collections::BTreeMap::new();
    for p in &a.processes {
        let e = m.entry(command_name(p)).or_insert((0u64, 0.0f64, true));
        e.0 += 1;
        e.1 += p.cpu_seconds.unwrap_or(0.0);
        e.2 &= ebpf || p.exact_at_exit;
    }
    m
}

/// The per-program rows, most CPU (in either session) first.
fn command_deltas(before: &Analysis, after: &Analysis) -> Vec<CommandDelta> {
    let (b, a) = (by_command(before), by_command(after));
    let mut names: Vec<&String> = b.keys().chain(a.keys()).collect();
    names.sort();
    names.dedup();
    let mut rows: Vec<CommandDelta> = names
        .into_iter()
        .map(|name| {
            let (bp, bc, be) = b.get(name).copied().unwrap_or((0, 0.0, true));
            let (ap, ac, ae) = a.get(name).copied().unwrap_or((0, 0.0, true));
            CommandDelta {
                command: name.clone(),
                before_processes: bp,
                after_processes: ap,
                before_cpu_seconds: bc,
                after_cpu_seconds: ac,
                cpu_pct: pct(bc, ac),
                exact: be && ae,
            }
        })
        .collect();
    rows.sort_by(|x, y| {
        let most = |r: &CommandDelta| r.before_cpu_seconds.max(r.after_cpu_seconds);
        most(y)
            .total_cmp(&most(x))
            .then_with(|| x.command.cmp(&y.command))
    });
    rows
}

fn pct(b: f64, a: f64) -> Option<f64> {
    if b != 0.0 {
        Some(100.0 * (a - b) / b)
    } else if a == 0.0 {
        Some(0.0)
    } else {
        None
    }
}

impl Comparison {
    pub fn delta(&self, metric: &str) -> Option<&Delta> {
        self.deltas.iter().find(|d| d.metric == metric)
    }
}

/// Names of the comparable metrics, in report order.
pub fn metric_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "duration_ms",
        "cpu_seconds",
        "peak_rss_bytes",
        "max_single_rss_bytes",
        "distinct_pids",
        "read_bytes",
        "write_bytes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.extend(LatencyClass::ALL.iter().map(|c| format!("{}_ns", c.name())));
    names
}

fn values(a: &Analysis) -> Vec<(String, MetricUnit, f64, bool)> {
    let mut v = vec![
        (
            "duration_ms".to_string(),
            MetricUnit::Milliseconds,
            a.duration_ms,
            true,
        ),
        (
            "cpu_seconds".to_string(),
            MetricUnit::Seconds,
            a.cpu_seconds,
            true,
        ),
        (
            "peak_rss_bytes".to_string(),
            MetricUnit::Bytes,
            a.peak_rss_bytes as f64,
            true,
        ),
        (
            "max_single_rss_bytes".to_string(),
            MetricUnit::Bytes,
            a.max_single_rss_bytes as f64,
            true,
        ),
        (
            "distinct_pids".to_string(),
            MetricUnit::Count,
            a.distinct_pids as f64,
            true,
        ),
        (
            "read_bytes".to_string(),
            MetricUnit::Bytes,
            a.read_bytes as f64,
            true,
        ),
        (
            "write_bytes".to_string(),
            MetricUnit::Bytes,
            a.write_bytes as f64,
            true,
        ),
    ];
    for class in LatencyClass::ALL {
        v.push((
            format!("{}_ns", class.name()),
            MetricUnit::Nanoseconds,
            a.latency_classes.get(class) as f64,
            a.class_is_exact(class),
        ));
    }
    v
}

/// Compare two analyses metric by metric.
pub fn compare(before: &Analysis, after: &Analysis) -> Comparison {
    let deltas = values(before)
        .into_iter()
        .zip(values(after))
        .map(|((metric, unit, b, be), (_, _, a, ae))| {
            let change = a - b;
            let pct = pct(b, a);
            Delta {
                metric,
                unit,
                before: b,
                after: a,
                change,
                pct,
                exact: be && ae,
            }
        })
        .collect();
    Comparison {
        before_label: before.label.clone(),
        after_label: after.label.clone(),
        deltas,
        by_command: command_deltas(before, after),
    }
}

/// `>` or `<`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RuleOp {
    #[serde(rename = ">")]
    Above,
    #[serde(rename = "<")]
    Below,
}

/// A parsed `--fail-on` rule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailRule {
    /// The rule as written.
    pub text: String,
    pub metric: String,
    pub op: RuleOp,
    /// Threshold in percent (`relative`) or in the metric's own unit.
    pub threshold: f64,
    pub relative: bool,
}

/// The outcome of one rule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleOutcome {
    pub rule: String,
    pub failed: bool,
    /// One line: what changed and by how much.
    pub message: String,
}

fn unit_of(metric: &str) -> Option<MetricUnit> {
    let unit = match metric {
        "duration_ms" => MetricUnit::Milliseconds,
        "cpu_seconds" => MetricUnit::Seconds,
        "peak_rss_bytes" | "max_single_rss_bytes" | "read_bytes" | "write_bytes" => {
            MetricUnit::Bytes
        }
        "distinct_pids" => MetricUnit::Count,
        m if m.ends_with("_ns") && LatencyClass::from_name(&m[..m.len() - 3]).is_some() => {
            MetricUnit::Nanoseconds
        }
        _ => return None,
    };
    Some(unit)
}

impl FailRule {
    /// Parse a rule; the error is one line saying what is wrong.
    pub fn parse(text: &str) -> Result<FailRule, String> {
        let bad = |why: &str| format!("invalid --fail-on rule {text:?}: {why}");
        let s = text.trim();
        let pos = s.find(['>', '<']).ok_or_else(|| {
            bad("expected METRIC>THRESHOLD or METRIC<THRESHOLD, e.g. cpu_seconds>+10%")
        })?;
        let metric = s[..pos].trim();
        let op = if &s[pos..pos + 1] == ">" {
            RuleOp::Above
        } else {
            RuleOp::Below
        };
        let unit = unit_of(metric).ok_or_else(|| {
            bad(&format!(
                "unknown metric {metric:?} (known: {})",
                metric_names().join(", ")
            ))
        })?;
        let rest = s[pos + 1..].trim();
        let num_end = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '+' || c == '-') && i == 0)))
            .map_or(rest.len(), |(i, _)| i);
        let (num, suffix) = (&rest[..num_end], rest[num_end..].trim());
        let value: f64 = num
            .trim_start_matches('+')
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| bad(&format!("{num:?} is not a number")))?;
        let byte_units: &[(&str, f64)] = &[
            ("B", 1.0),
            ("KiB", 1024.0),
            ("MiB", 1024.0 * 1024.0),
            ("GiB", 1024.0 * 1024.0 * 1024.0),
            ("TiB", 1024.0 * 1024.0 * 1024.0 * 1024.0),
            ("KB", 1e3),
            ("MB", 1e6),
            ("GB", 1e9),
            ("TB", 1e12),
        ];
        let time_units: &[(&str, f64)] = &[
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
        ];
        let (threshold, relative) = if suffix.is_empty() {
            (value, false)
        } else if suffix == "%" {
            (value, true)
        } else if let Some(&(_, f)) = byte_units.iter().find(|(u, _)| *u == suffix) {
            if unit != MetricUnit::Bytes {
                return Err(bad(&format!(
                    "{suffix} is a byte unit but {metric} is not measured in bytes"
                )));
            }
            (value * f, false)
        } else if let Some(&(_, secs)) = time_units.iter().find(|(u, _)| *u == suffix) {
            let per_unit = match unit {
                MetricUnit::Milliseconds => 1e-3,
                MetricUnit::Seconds => 1.0,
                MetricUnit::Nanoseconds => 1e-9,
                _ => {
                    return Err(bad(&format!(
                        "{suffix} is a time unit but {metric} is not a time"
                    )))
                }
            };
            (value * secs / per_unit, false)
        } else {
            return Err(bad(&format!(
                "unknown unit {suffix:?} (use %, B/KiB/MiB/GiB, ns/us/ms/s, or none)"
            )));
        };
        Ok(FailRule {
            text: text.to_string(),
            metric: metric.to_string(),
            op,
            threshold,
            relative,
        })
    }

    /// Evaluate the rule against a comparison.
    pub fn evaluate(&self, cmp: &Comparison) -> RuleOutcome {
        let Some(d) = cmp.delta(&self.metric) else {
            return RuleOutcome {
                rule: self.text.clone(),
                failed: false,
                message: format!("{}: metric not compared", self.text),
            };
        };
        let observed = if self.relative {
            d.pct
                .unwrap_or(if d.change > 0.0 { f64::INFINITY } else { 0.0 })
        } else {
            d.change
        };
        let failed = match self.op {
            RuleOp::Above => observed > self.threshold,
            RuleOp::Below => observed < self.threshold,
        };
        let change = if self.relative {
            match d.pct {
                Some(p) => format!("{p:+.1}%"),
                None => "+inf% (from 0)".to_string(),
            }
        } else {
            format_value(d.unit, d.change, true)
        };
        let verdict = if failed { "FAILED" } else { "ok" };
        RuleOutcome {
            rule: self.text.clone(),
            failed,
            message: format!(
                "{}: {verdict}: {} changed {change} ({} -> {})",
                self.text,
                self.metric,
                format_value(d.unit, d.before, false),
                format_value(d.unit, d.after, false)
            ),
        }
    }
}

/// A metric value in its unit, human-readable (`943.00 MiB`, `2.790 s`, `1500 ms`);
/// `signed` adds a `+` to positive values (for changes).
pub fn format_value(unit: MetricUnit, v: f64, signed: bool) -> String {
    use crate::format::{fmt_bytes_f, fmt_ms, fmt_ns};
    let sign = if signed && v > 0.0 { "+" } else { "" };
    let body = match unit {
        MetricUnit::Milliseconds => fmt_ms(v),
        MetricUnit::Seconds => format!("{v:.3} s"),
        MetricUnit::Nanoseconds => fmt_ns(v),
        MetricUnit::Bytes => fmt_bytes_f(v),
        MetricUnit::Count => format!("{v:.0}"),
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rules() {
        let r = FailRule::parse("cpu_seconds>+10%").unwrap();
        assert_eq!((r.op, r.threshold, r.relative), (RuleOp::Above, 10.0, true));
        let r = FailRule::parse("peak_rss_bytes>+50MiB").unwrap();
        assert_eq!((r.threshold, r.relative), (50.0 * 1024.0 * 1024.0, false));
        let r = FailRule::parse("duration_ms>+100").unwrap();
        assert_eq!(r.threshold, 100.0);
        let r = FailRule::parse("duration_ms > 2s").unwrap();
        assert_eq!(r.threshold, 2000.0);
        let r = FailRule::parse("distinct_pids<-1").unwrap();
        assert_eq!((r.op, r.threshold), (RuleOp::Below, -1.0));
        let r = FailRule::parse("io_wait_ns>+5ms").unwrap();
        assert_eq!(r.threshold, 5e6);
        for bad in [
            "cpu_seconds",
            "cpu>+10%",
            "cpu_seconds>+ten%",
            "cpu_seconds>+10parsecs",
            "cpu_seconds>+10MiB",
            "peak_rss_bytes>+1s",
            "cpu_seconds>",
            "cpu_seconds>+",
        ] {
            let e = FailRule::parse(bad).unwrap_err();
            assert!(e.starts_with("invalid --fail-on rule"), "{bad}: {e}");
            assert!(!e.contains('\n'));
        }
    }
}
