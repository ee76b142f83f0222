//! `compare` renderers: aligned text and the versioned JSON document (`docs/JSON.md`).

use serde_json::{json, Value};

use super::columns;
use crate::analysis::compare::{format_value, Comparison, Delta, MetricUnit, RuleOutcome};

/// Version of the compare JSON document.
pub const COMPARE_SCHEMA_VERSION: u32 = 1;

fn json_number(unit: MetricUnit, v: f64) -> Value {
    match unit {
        MetricUnit::Bytes | MetricUnit::Count | MetricUnit::Nanoseconds if v.fract() == 0.0 => {
            json!(v as i64)
        }
        _ => json!(v),
    }
}

/// The compare JSON document: `deltas` in a fixed metric order and the `--fail-on`
/// outcomes (`rules`, empty without rules).
pub fn compare_json(cmp: &Comparison, rules: &[RuleOutcome]) -> Value {
    let deltas: Vec<Value> = cmp
        .deltas
        .iter()
        .map(|d| {
            json!({
                "metric": d.metric,
                "unit": d.unit,
                "before": json_number(d.unit, d.before),
                "after": json_number(d.unit, d.after),
                "change": json_number(d.unit, d.change),
                "pct": d.pct,
                "exact": d.exact,
            })
        })
        .collect();
    json!({
        "schema_version": COMPARE_SCHEMA_VERSION,
        "kind": "compare",
        "before_label": cmp.before_label,
        "after_label": cmp.after_label,
        "deltas": deltas,
        "by_command": cmp.by_command,
        "rules": rules.iter().map(|r| json!({"rule": r.rule, "failed": r.failed, "message": r.message})).collect::<Vec<_>>(),
        "failed": rules.iter().any(|r| r.failed),
    })
}

fn fmt_pct(d: &Delta) -> String {
    match d.pct {
        Some(p) if p.abs() < 0.05 => "0.0%".to_string(),
        Some(p) => format!("{p:+.1}%"),
        None => "new".to_string(),
    }
}

/// How many programs the text shows (all are in `--json`).
const TOP_COMMANDS: usize = 15;

/// CPU by program: "rustc  1.200 s  1.344 s  +0.144 s  +12.0%  41 -> 41".
fn by_command_text(cmp: &Comparison) -> String {
    let shown = &cmp.by_command[..cmp.by_command.len().min(TOP_COMMANDS)];
    let mut out = if shown.len() < cmp.by_command.len() {
        format!(
            "CPU by command (top {TOP_COMMANDS} of {}; all in --json)\n",
            cmp.by_command.len()
        )
    } else {
        "CPU by command\n".to_string()
    };
    let mut rows = vec![["command", "before", "after", "change", "%", "processes"]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()];
    let mut any_sampled = false;
    for c in shown {
        let mut name = super::clean(&c.command);
        if !c.exact {
            name.push_str(" (sampled)");
            any_sampled = true;
        }
        let secs = MetricUnit::Seconds;
        rows.push(vec![
            name,
            format_value(secs, c.before_cpu_seconds, false),
            format_value(secs, c.after_cpu_seconds, false),
            format_value(secs, c.after_cpu_seconds - c.before_cpu_seconds, true),
            match c.cpu_pct {
                Some(p) if p.abs() < 0.05 => "0.0%".to_string(),
                Some(p) => format!("{p:+.1}%"),
                None => "new".to_string(),
            },
            format!("{} -> {}", c.before_processes, c.after_processes),
        ]);
    }
    for line in columns(&rows, &[1, 2, 3, 4, 5]).lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    if any_sampled {
        out.push_str("  (sampled): CPU from /proc samples in at least one bundle, which miss processes shorter than a frame\n");
    }
    out
}

/// The text comparison table, followed by one line per `--fail-on` rule.
pub fn compare_text(cmp: &Comparison, rules: &[RuleOutcome]) -> String {
    let mut out = String::new();
    let label = |l: &Option<String>| l.clone().unwrap_or_else(|| "(no label)".to_string());
    out.push_str(&format!(
        "kernelkite compare: {} -> {}\n",
        label(&cmp.before_label),
        label(&cmp.after_label)
    ));
    let mut rows = vec![["metric", "before", "after", "change", "%"]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()];
    let mut any_estimated = false;
    for d in &cmp.deltas {
        let mut name = d.metric.clone();
        if !d.exact {
            name.push_str(" (estimated)");
            any_estimated = true;
        }
        rows.push(vec![
            name,
            format_value(d.unit, d.before, false),
            format_value(d.unit, d.after, false),
            format_value(d.unit, d.change, true),
            fmt_pct(d),
        ]);
    }
    for line in columns(&rows, &[1, 2, 3, 4]).lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    if any_estimated {
        out.push_str("  (estimated): sleep classes estimated from sampled /proc thread states in at least one bundle\n");
    }
    if !cmp.by_command.is_empty() {
        out.push('\n');
        out.push_str(&by_command_text(cmp));
    }
    if !rules.is_empty() {
        out.push('\n');
        out.push_str("fail-on rules\n");
        for r in rules {
            out.push_str(&format!("  {}\n", r.message));
        }
    }
    out
}
