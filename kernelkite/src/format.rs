//! Formatting numbers and names for one line of text, the same way in every output:
//! byte amounts, durations, shares, command lines, and aligned columns. A leaf: it
//! imports nothing from the crate, so every layer may use it.

/// A count as an English word ("seven") up to twelve, digits past it.
pub fn number_word(n: usize) -> String {
    const WORDS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    WORDS
        .get(n)
        .map_or_else(|| n.to_string(), |w| (*w).to_string())
}

/// How many latency classes there are, as a word ("seven"): every text that counts
/// them says it from `NUM_CLASSES`.
pub fn classes_word() -> String {
    number_word(kernelkite_common::class::NUM_CLASSES)
}

/// A name from the kernel (comm, argv element) made safe for one line of text: control
/// characters are shown escaped (`\n`, `\u{1b}`).
pub fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A command line for one line of text: arguments with spaces or quotes are quoted
/// (shell style), control characters escaped, and the result cut at `max` characters.
pub fn display_argv(argv: &[String], max: usize) -> String {
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| {
            let a = clean(a);
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect();
    let line = quoted.join(" ");
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line
    }
}

/// Bytes with a binary unit and two decimals (`943.00 MiB`); below 1 KiB, `512 B`.
pub fn fmt_bytes(bytes: u64) -> String {
    fmt_bytes_f(bytes as f64)
}

/// [`fmt_bytes`] for a possibly negative or fractional amount (deltas).
pub fn fmt_bytes_f(bytes: f64) -> String {
    let units = ["KiB", "MiB", "GiB", "TiB"];
    let abs = bytes.abs();
    if abs < 1024.0 {
        return format!("{bytes:.0} B");
    }
    let mut v = bytes / 1024.0;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < units.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", units[unit])
}

/// A nanosecond duration in a readable unit: `812 ns`, `41.3 µs`, `12.50 ms`, `2.790 s`.
pub fn fmt_ns(ns: f64) -> String {
    let abs = ns.abs();
    if abs < 1e3 {
        format!("{ns:.0} ns")
    } else if abs < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if abs < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

/// Milliseconds without decimals when whole (`1500 ms`), else three (`0.250 ms`).
pub fn fmt_ms(ms: f64) -> String {
    if ms.fract() == 0.0 && ms.abs() < 1e15 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

/// A value formatted with `f`, or `n/a` when it was not measured.
pub fn or_na<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "n/a".to_string(), f)
}

/// Seconds with millisecond precision: `2.790 s`.
pub fn fmt_secs(s: f64) -> String {
    format!("{s:.3} s")
}

/// A fraction 0..=1 as a percentage with one decimal: `97.5%`.
pub fn fmt_share(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// Lay out rows as left-aligned columns separated by two spaces (the last column is
/// not padded). Columns whose index is in `right` are right-aligned.
pub fn columns(rows: &[Vec<String>], right: &[usize]) -> String {
    let ncol = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; ncol];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = widths[i] - cell.chars().count();
            let last = i + 1 == row.len();
            if right.contains(&i) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if !last {
                    line.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A duration for the HTML page, in the largest unit that keeps it short: `812 ns`,
/// `41.3 µs`, `12.5 ms`, `2.790 s`, `3 min 12.5 s` (one decimal less than [`fmt_ns`]
/// below a second: cards and tooltips are narrow).
pub fn fmt_ns_compact(ns: u64) -> String {
    let f = ns as f64;
    if ns >= 60_000_000_000 {
        let m = ns / 60_000_000_000;
        let s = (ns % 60_000_000_000) as f64 / 1e9;
        format!("{m} min {s:.1} s")
    } else if ns >= 1_000_000_000 {
        format!("{:.3} s", f / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", f / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", f / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// Seconds as [`fmt_ns_compact`] writes them; `n/a` when not a duration.
pub fn fmt_secs_compact(s: f64) -> String {
    if s.is_finite() && s >= 0.0 {
        fmt_ns_compact((s * 1e9).round() as u64)
    } else {
        "n/a".to_string()
    }
}

/// Bytes for the HTML page: a binary unit with one decimal, none from 100 up
/// (`943 MiB`, `12.5 KiB`; [`fmt_bytes`] has two).
pub fn fmt_bytes_compact(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// An integer with narrow no-break space thousands separators: `120 000`.
pub fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 * 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{202F}');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_bytes(943 * 1024 * 1024), "943.00 MiB");
        assert_eq!(fmt_bytes(3_502_080), "3.34 MiB");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes_f(-569.5 * 1024.0 * 1024.0), "-569.50 MiB");
        assert_eq!(fmt_ns(812.0), "812 ns");
        assert_eq!(fmt_ns(2.79e9), "2.790 s");
        assert_eq!(fmt_ms(1500.0), "1500 ms");
        assert_eq!(fmt_ms(0.25), "0.250 ms");
        assert_eq!(fmt_share(0.975), "97.5%");
        assert_eq!(clean("a\nb"), "a\\nb");
        let argv: Vec<String> = ["sh", "-c", "echo 'hi'\nls"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(display_argv(&argv, 100), "sh -c 'echo '\\''hi'\\''\\nls'");
        assert_eq!(display_argv(&argv, 8), "sh -c '…");
        assert_eq!(
            columns(
                &[
                    vec!["a".into(), "1".into()],
                    vec!["bbb".into(), "22".into()]
                ],
                &[1]
            ),
            "a     1\nbbb  22\n"
        );
    }
}
