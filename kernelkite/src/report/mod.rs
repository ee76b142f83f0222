//! Renderers: pure functions from analyses to bytes (text, JSON, HTML), one file per format.
//!
//! `summary`, `compare` and `tree` render text and the versioned `--json` documents
//! described in `docs/JSON.md`; numbers are formatted by `crate::format`, the same way
//! everywhere.

pub mod compare;
pub mod critical_path;
pub mod flamegraph;
pub mod html;
pub mod stacks;
pub mod summary;
pub mod trace;
pub mod tree;
pub mod viewer;
pub mod waits;

pub use crate::format::{
    clean, columns, display_argv, fmt_bytes, fmt_bytes_f, fmt_ms, fmt_ns, fmt_secs, fmt_share,
    or_na,
};

/// Write a rendered document to standard output. A closed pipe (`kernelkite summary x
/// | head`) is not an error: the reader has what it wanted.
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    crate::output::write_stdout(text.as_bytes())
}

/// `text` to standard error, as [`write_stdout`] writes standard output.
pub fn write_stderr(text: &str) -> std::io::Result<()> {
    crate::output::write_stderr(text.as_bytes())
}

/// Pretty JSON with a trailing newline, as every `--json` command prints it.
pub fn json_text(value: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".to_string());
    s.push('\n');
    s
}

/// What the duration measures, as `analyze` computes it: the eBPF backend counts from
/// the session start (t = 0, when tracking began), a sampler from its first frame.
pub fn window_label(a: &crate::analysis::Analysis) -> &'static str {
    match a.backend {
        crate::model::Backend::Ebpf => "session start to last frame",
        crate::model::Backend::Proc => "first to last frame",
    }
}

/// The text and JSON reports render any analysis, however odd its bundle.
#[test]
#[cfg(test)]
fn reports_never_panic_on_arbitrary_bundles() {
    for b in crate::analysis::tests::arbitrary_bundles() {
        let a = crate::analysis::analyze(&b);
        let _ = summary::summary_text(&a);
        let _ = summary::summary_json(&a);
        let _ = tree::tree_text(&a);
        let cmp = crate::analysis::compare::compare(&a, &a);
        let _ = compare::compare_text(&cmp, &[]);
    }
}

/// Snapshots of every text and JSON document for the shipped fixtures.
#[cfg(test)]
mod snapshot_tests {
    use crate::analysis::compare::{compare, FailRule};
    use crate::analysis::{analyze, Analysis};
    use crate::model::fixture::fixture_to_bundle;

    fn fixture(name: &str) -> Analysis {
        analyze(&crate::model::fixture::committed(name))
    }

    #[test]
    fn summary_before() {
        let a = fixture("cargo-build-before.json");
        insta::assert_snapshot!("summary_before_text", super::summary::summary_text(&a));
        insta::assert_json_snapshot!("summary_before_json", super::summary::summary_json(&a));
    }

    #[test]
    fn summary_after() {
        let a = fixture("cargo-build-after.json");
        insta::assert_snapshot!("summary_after_text", super::summary::summary_text(&a));
        insta::assert_json_snapshot!("summary_after_json", super::summary::summary_json(&a));
    }

    #[test]
    fn compare_before_after() {
        let cmp = compare(
            &fixture("cargo-build-before.json"),
            &fixture("cargo-build-after.json"),
        );
        let rules: Vec<_> = ["cpu_seconds>+10%", "peak_rss_bytes<-50%"]
            .iter()
            .map(|r| FailRule::parse(r).unwrap().evaluate(&cmp))
            .collect();
        insta::assert_snapshot!("compare_text", super::compare::compare_text(&cmp, &rules));
        insta::assert_json_snapshot!("compare_json", super::compare::compare_json(&cmp, &rules));
    }

    #[test]
    fn tree_before() {
        let a = fixture("cargo-build-before.json");
        insta::assert_snapshot!("tree_before_text", super::tree::tree_text(&a));
        insta::assert_json_snapshot!("tree_before_json", super::tree::tree_json(&a));
    }

    #[test]
    fn summary_ebpf() {
        let a = fixture("api-server-ebpf.json");
        assert!(a.latency_classes_exact);
        // The fixture's own durations: 6000 and 6001 run through its frames (0..1500 ms),
        // 6100 from its fork at 600 ms to its exit at 700 ms.
        let walls: Vec<(i32, u64)> = (a.threads.iter())
            .map(|t| (t.tid, t.classes.total_ns()))
            .collect();
        assert_eq!(
            walls,
            [
                (6000, 1_500_000_000),
                (6001, 1_500_000_000),
                (6100, 100_000_000)
            ]
        );
        insta::assert_snapshot!("summary_ebpf_text", super::summary::summary_text(&a));
        insta::assert_json_snapshot!("summary_ebpf_json", super::summary::summary_json(&a));
        insta::assert_snapshot!("tree_ebpf_text", super::tree::tree_text(&a));
    }

    /// The duration's label names what it is measured from: an eBPF bundle's window
    /// starts at t = 0 (its first frame comes later), a sampler's at its first frame.
    #[test]
    fn duration_label_names_where_the_window_starts() {
        for (name, from_zero) in [
            ("api-server-ebpf.json", true),
            ("cargo-build-before.json", false),
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../fixtures")
                .join(name);
            let mut bundle = fixture_to_bundle(&std::fs::read(&path).unwrap(), name).unwrap();
            if bundle.frames[0].t_ns == 0 {
                // A session's first snapshot comes one interval after tracking began.
                bundle.frames.remove(0);
            }
            let a = analyze(&bundle);
            let first = bundle.frames.first().unwrap().t_ns;
            let last = bundle.frames.last().unwrap().t_ns;
            assert!(first > 0, "{name}: the fixture must tell the two apart");
            let start = if from_zero { 0 } else { first };
            assert_eq!(a.duration_ns, last - start, "{name}");
            let text = super::summary::summary_text(&a);
            let html = super::html::render(&bundle);
            let label = if from_zero {
                "session start to last frame"
            } else {
                "first to last frame"
            };
            assert!(
                text.contains(&format!("({label}; interval")),
                "{name}: {text}"
            );
            assert!(
                html.contains(&format!("<div class=\"sub\">{label}</div>")),
                "{name}"
            );
        }
    }

    /// The issue asks for this: the folded output of a fixture-driven replay.
    #[test]
    fn stacks_demo() {
        use crate::analysis::stacks::{analyze_stacks, folded_lines, FoldOptions};
        use kernelkite_common::LatencyClass;
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/stacks-demo.json");
        let bundle = crate::model::fixture::load_fixture(&path).unwrap();
        let a = analyze(&bundle);
        let s = analyze_stacks(&bundle, &a, None, 3).unwrap();
        let calls = crate::analysis::stacks::slow_call_stacks(&bundle, 5);
        assert_eq!(calls.len(), 2);
        insta::assert_snapshot!(
            "stacks_demo_text",
            super::stacks::stacks_text(&a, &s, &calls)
        );
        insta::assert_json_snapshot!(
            "stacks_demo_json",
            super::stacks::stacks_json(&a, &s, &calls)
        );
        let folded = |opts: FoldOptions| folded_lines(&bundle, &opts).join("\n");
        insta::assert_snapshot!(
            "stacks_demo_folded",
            folded(FoldOptions {
                class: None,
                class_root: true,
                per_process: false
            })
        );
        insta::assert_snapshot!(
            "stacks_demo_folded_io_wait_per_process",
            folded(FoldOptions {
                class: Some(LatencyClass::IoWait),
                class_root: false,
                per_process: true
            })
        );
        let lock = crate::analysis::stacks::top_stacks(&bundle, &a, LatencyClass::LockWait, 3);
        insta::assert_snapshot!(
            "stacks_demo_trace_lock_wait",
            super::stacks::top_stacks_text(LatencyClass::LockWait, &lock)
        );
        // What trace prints: the dominant class with stacks is syscall_blocked (2.736 s).
        let trace = super::stacks::dominant_stacks_text(&bundle, &a, 3).unwrap();
        assert!(
            trace.starts_with("heaviest syscall_blocked stacks:\n"),
            "{trace}"
        );
        assert_eq!(trace.matches("  #").count(), 3);
        let mut plain = bundle.clone();
        plain.stacks = None;
        assert_eq!(super::stacks::dominant_stacks_text(&plain, &a, 3), None);
    }

    #[test]
    fn fixture_numbers_are_exact() {
        let b = fixture("cargo-build-before.json");
        assert_eq!(b.duration_ms, 1500.0);
        assert_eq!(b.frames, 7);
        assert_eq!(b.distinct_pids, 4);
        assert_eq!(super::fmt_secs(b.cpu_seconds), "2.790 s");
        assert_eq!(super::fmt_bytes(b.peak_rss_bytes), "943.00 MiB");
        assert_eq!(super::fmt_bytes(b.read_bytes), "3.34 MiB");
        assert_eq!(super::fmt_bytes(b.write_bytes), "2.57 MiB");
        // Each thread's life in the fixture, which its on_cpu + runqueue never exceed:
        // from its process's start (start_time_ticks past the root's 100000, at 100 Hz:
        // 5010 at 20 ms, 5011 at 30 ms, 5020 at 900 ms) to its last frame (every 250 ms;
        // cargo's frames span the session).
        let walls: Vec<(i32, u64)> = (b.threads.iter())
            .map(|t| (t.tid, t.classes.total_ns() / 1_000_000))
            .collect();
        assert_eq!(
            walls,
            [
                (5000, 1500),
                (5010, 1250 - 20),
                (5013, 750 - 20),
                (5011, 750 - 30),
                (5014, 750 - 30),
                (5020, 1250 - 900)
            ]
        );
        let cmp = compare(&b, &fixture("cargo-build-after.json"));
        let pct = |m: &str| format!("{:.1}", cmp.delta(m).unwrap().pct.unwrap());
        assert_eq!(pct("duration_ms"), "-33.3");
        assert_eq!(pct("cpu_seconds"), "-55.9");
        assert_eq!(pct("peak_rss_bytes"), "-60.4");
        assert_eq!(pct("distinct_pids"), "-25.0");
        assert_eq!(pct("read_bytes"), "-57.0");
        assert_eq!(pct("write_bytes"), "-55.6");
    }
}
