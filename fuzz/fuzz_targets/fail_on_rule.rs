//! Any text given to `--fail-on` parses to a rule or a one-line error, never a panic;
//! a parsed rule evaluates against any comparison (NaN, infinities, a missing metric)
//! to a verdict with a one-line message.
//!
//! Input: the rule text up to the first newline; after it, 8-byte little-endian f64
//! pairs (before, after) for the compared metrics in report order.

#![no_main]

use kernelkite::analysis::compare::{metric_names, Comparison, Delta, FailRule, MetricUnit};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (text, numbers) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let rule = match FailRule::parse(text) {
        Ok(rule) => rule,
        Err(e) => {
            assert!(!e.contains('\n'), "one-line errors: {e}");
            return;
        }
    };
    let mut values = numbers
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()));
    let units = [
        MetricUnit::Milliseconds,
        MetricUnit::Seconds,
        MetricUnit::Bytes,
        MetricUnit::Bytes,
        MetricUnit::Count,
        MetricUnit::Bytes,
        MetricUnit::Bytes,
    ];
    let mut deltas = Vec::new();
    for (i, metric) in metric_names().into_iter().enumerate() {
        let (Some(before), Some(after)) = (values.next(), values.next()) else {
            break;
        };
        let change = after - before;
        deltas.push(Delta {
            metric,
            unit: units.get(i).copied().unwrap_or(MetricUnit::Nanoseconds),
            before,
            after,
            change,
            pct: (before != 0.0).then(|| 100.0 * change / before),
            exact: true,
        });
    }
    let cmp = Comparison {
        before_label: None,
        after_label: None,
        deltas,
        by_command: Vec::new(),
    };
    let outcome = rule.evaluate(&cmp);
    assert!(!outcome.message.contains('\n'), "one-line message: {}", outcome.message);
});
