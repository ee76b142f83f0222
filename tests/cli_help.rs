//! `--help` and the man pages say only what is true: every option a subcommand shows
//! does something there (the table below says how that is seen, and a sample of cheap
//! options is run on the committed bundles with and without), every argument is
//! described, the latency classes are counted right, and the man pages' names and
//! synopses work.

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::{fixtures, kk, kk_path};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// How an option's effect is seen.
enum Effect {
    /// A test observes it: the file (under the repository) has `fn NAME(` and names the
    /// option.
    Test(&'static str, &'static str),
    /// The subcommand's code reads it: the file has this text (for options whose effect
    /// needs a live eBPF session no test here can cheaply start).
    Reads(&'static str, &'static str),
    /// Running `kernelkite WITH` and `kernelkite WITHOUT` (in an empty directory; `{R}`
    /// is fixtures/recordings) differ: in exit status, stdout, or the files written.
    Differs(&'static [&'static str], &'static [&'static str]),
}
use Effect::{Differs, Reads, Test};

const CPU: &str = "{R}/run-ebpf-cpu.bundle.json";
const SLEEP: &str = "{R}/run-ebpf-sleep.bundle.json";
const STACKS: &str = "{R}/run-ebpf-unwound.bundle.json";
const PATH: &str = "{R}/run-ebpf-critical-path.bundle.json";

/// Every (subcommand, option) the help shows, and how its effect is seen. An option
/// added to a subcommand without a row here fails `every_shown_option_has_an_effect`.
#[rustfmt::skip]
const EFFECTS: &[(&str, &str, Effect)] = &[
    ("run", "user", Test("tests/run_privileges.rs", "user_cannot_name_someone_else_than_who_started_kernelkite")),
    ("run", "stacks", Test("tests/ebpf_stacks.rs", "run_stacks_with")),
    ("run", "min-block-us", Test("tests/ebpf_stacks.rs", "run_stacks_with")),
    ("run", "sample-hz", Reads("kernelkite/src/commands/mod.rs", "sample_hz: args.sample_hz()")),
    ("run", "critical-path", Test("tests/ebpf_critical_path.rs", "path_of")),
    ("run", "no-exit-stops", Test("tests/cli_run.rs", "rusage_matches_usr_bin_time")),
    ("run", "record", Test("tests/cli_recording.rs", "a_live_proc_session_replays_byte_for_byte")),
    ("run", "record-compression", Test("tests/cli_recording.rs", "an_uncompressed_recording_and_a_frame_cap_replay_byte_for_byte")),
    ("run", "max-frames", Test("tests/cli_run.rs", "frame_cap_keeps_refreshing_the_last_frame")),
    ("run", "max-frames-mb", Test("tests/cli_run.rs", "frame_byte_budget_caps_the_frames_of_a_big_tree")),
    ("run", "interval-ms", Test("tests/cli_recording.rs", "a_live_proc_session_replays_byte_for_byte")),
    ("run", "label", Test("tests/cli_run.rs", "samples_children_and_grandchildren_with_their_ppid_chain")),
    ("run", "network", Test("tests/cli_run.rs", "network_counters_when_asked")),
    ("run", "backend", Test("tests/ebpf_stacks.rs", "stacks_need_the_ebpf_backend")),
    ("trace", "pid", Test("tests/ebpf_trace.rs", "trace_json_carries_the_summary_contract_and_syscalls")),
    ("trace", "cgroup", Test("tests/ebpf_cgroup.rs", "trace_cgroup_sees_exactly_the_processes_inside_including_later_ones")),
    ("trace", "container", Test("tests/ebpf_cgroup.rs", "container_ids_resolve_by_unique_prefix_and_bad_selections_say_what_to_do")),
    ("trace", "follow", Test("tests/ebpf_export.rs", "serve_folds_exited_processes_into_one_series_and_keeps_the_totals")),
    ("trace", "duration", Test("tests/ebpf_coverage.rs", "calls_still_blocked_at_the_end_are_in_the_syscall_table_and_stacks")),
    ("trace", "output", Test("tests/support/ebpf.rs", "start_env")),
    ("trace", "threads", Test("tests/ebpf_cgroup.rs", "a_throttled_cgroup_shows_throttling_pressure_and_runqueue")),
    ("trace", "min-latency-us", Test("tests/ebpf_export.rs", "a_real_trace_exports_in_every_format")),
    ("trace", "max-frames", Test("tests/ebpf_trace.rs", "trace_max_frames_keeps_refreshing_the_last_frame")),
    ("trace", "max-frames-mb", Reads("kernelkite/src/commands/trace.rs", "max_frame_bytes: args.frame_cap.max_frame_bytes()?")),
    ("trace", "max-threads", Test("tests/ebpf_trace.rs", "threads_past_the_thread_table_are_counted_as_lost")),
    ("trace", "stacks", Test("tests/ebpf_coverage.rs", "calls_still_blocked_at_the_end_are_in_the_syscall_table_and_stacks")),
    ("trace", "min-block-us", Reads("kernelkite/src/commands/trace.rs", "stacks: crate::commands::stack_options(&args.stacks)")),
    ("trace", "sample-hz", Test("tests/ebpf_explained.rs", "a_busy_redis_is_explained_by_its_calls_and_on_cpu_stacks")),
    ("trace", "critical-path", Reads("kernelkite/src/commands/trace.rs", "critical_path: args.critical_path")),
    ("trace", "serve", Test("tests/ebpf_export.rs", "serve_exposes_live_metrics_that_promtool_accepts")),
    ("trace", "record", Test("tests/ebpf_record.rs", "trace_with_output_and_record_replays_byte_for_byte")),
    ("trace", "record-compression", Test("tests/ebpf_faults.rs", "a_recording_that_fills_the_disk_keeps_the_session_and_its_complete_chunks")),
    ("trace", "interval-ms", Test("tests/ebpf_faults.rs", "a_recording_that_fills_the_disk_keeps_the_session_and_its_complete_chunks")),
    ("trace", "label", Reads("kernelkite/src/commands/trace.rs", "label: args.session.label.clone()")),
    ("trace", "network", Reads("kernelkite/src/commands/trace.rs", "network: args.session.network")),
    ("trace", "json", Test("tests/ebpf_trace.rs", "trace_json_carries_the_summary_contract_and_syscalls")),
    // Each agent option changes the settings `resolve` makes (a unit test runs every
    // one of them with and without); the eBPF tests see them at work.
    ("agent", "config", Test("tests/ebpf_agent.rs", "sighup_rereads_the_config")),
    ("agent", "listen", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "allow-remote", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "pid", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "cgroup", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "container", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "top-processes", Test("tests/ebpf_agent.rs", "a_prometheus_server_stores_what_the_agent_serves")),
    ("agent", "rank-by", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "fold-by", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "max-groups", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "interval", Test("tests/ebpf_agent.rs", "class_rates_of_a_process_add_up_to_its_threads")),
    ("agent", "otlp-endpoint", Test("tests/ebpf_agent.rs", "otlp_push_reaches_a_real_receiver_and_a_down_one_costs_a_bounded_queue")),
    ("agent", "otlp-interval", Test("tests/ebpf_agent.rs", "otlp_push_reaches_a_real_receiver_and_a_down_one_costs_a_bounded_queue")),
    ("agent", "otlp-header", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "otlp-queue", Test("tests/ebpf_agent.rs", "otlp_push_reaches_a_real_receiver_and_a_down_one_costs_a_bounded_queue")),
    ("agent", "max-threads", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "stacks-epoch", Test("tests/ebpf_agent.rs", "a_new_stack_epoch_keeps_the_series_going")),
    ("agent", "stacks", Test("tests/ebpf_agent.rs", "go_tool_pprof_reads_the_profile_endpoint_and_sigterm_unloads_everything")),
    ("agent", "min-block-us", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("agent", "sample-hz", Test("kernelkite/src/commands/agent.rs", "every_option_changes_the_settings")),
    ("top", "pid", Test("tests/cli_top.rs", "proc_backend_shows_a_sleeper_blocked_in_a_syscall_and_stops_on_sigterm")),
    ("top", "cgroup", Test("tests/ebpf_cgroup.rs", "top_cgroup_shows_a_process_that_enters_later_and_g_groups_it")),
    ("top", "container", Test("tests/ebpf_cgroup.rs", "container_ids_resolve_by_unique_prefix_and_bad_selections_say_what_to_do")),
    ("top", "follow", Reads("kernelkite/src/commands/top.rs", "follow: args.follow")),
    ("top", "refresh", Test("tests/cli_top.rs", "proc_top_records_a_session_that_replays")),
    ("top", "replay", Test("tests/cli_top.rs", "replay_of_a_committed_recording_shows_its_dominant_class")),
    ("top", "speed", Test("tests/cli_top.rs", "replay_in_tmux_follows_the_keys_and_restores_the_terminal")),
    ("top", "stacks", Test("tests/ebpf_top.rs", "top_stacks_shows_the_lock_wait_stacks_of_the_selected_process")),
    ("top", "min-block-us", Reads("kernelkite/src/commands/top.rs", "crate::commands::stack_options(&args.stacks)")),
    ("top", "sample-hz", Reads("kernelkite/src/commands/top.rs", "crate::commands::stack_options(&args.stacks)")),
    ("top", "record", Test("tests/cli_top.rs", "proc_top_records_a_session_that_replays")),
    ("top", "record-compression", Reads("kernelkite/src/commands/top.rs", "RecordingFile::create(&args.recording)")),
    ("top", "backend", Test("tests/cli_top.rs", "proc_backend_shows_a_sleeper_blocked_in_a_syscall_and_stops_on_sigterm")),
    ("replay", "label", Differs(&["replay", "--label", "x", "{R}/run-ebpf-cpu.kkr", "b.json"], &["replay", "{R}/run-ebpf-cpu.kkr", "b.json"])),
    ("summary", "json", Differs(&["summary", "--json", CPU], &["summary", CPU])),
    ("waits", "json", Differs(&["waits", "--json", PATH], &["waits", PATH])),
    ("critical-path", "segments", Differs(&["critical-path", "--segments", "1", PATH], &["critical-path", PATH])),
    ("critical-path", "json", Differs(&["critical-path", "--json", PATH], &["critical-path", PATH])),
    ("compare", "fail-on", Differs(&["compare", "--fail-on", "cpu_seconds>+0%", SLEEP, CPU], &["compare", SLEEP, CPU])),
    ("compare", "json", Differs(&["compare", "--json", SLEEP, CPU], &["compare", SLEEP, CPU])),
    ("tree", "json", Differs(&["tree", "--json", CPU], &["tree", CPU])),
    ("report", "output", Differs(&["report", CPU, "-o", "r.html"], &["report", CPU])),
    ("export", "format", Differs(&["export", "--format", "prometheus", CPU], &["export", "--format", "json", CPU])),
    ("export", "output", Differs(&["export", "--format", "json", CPU, "-o", "e.json"], &["export", "--format", "json", CPU])),
    ("export", "start-unix-ns", Differs(&["export", "--format", "otlp", "--start-unix-ns", "5", CPU], &["export", "--format", "otlp", CPU])),
    ("stacks", "class", Differs(&["stacks", "--class", "on_cpu", STACKS], &["stacks", STACKS])),
    ("stacks", "top", Differs(&["stacks", "--top", "1", STACKS], &["stacks", STACKS])),
    ("stacks", "json", Differs(&["stacks", "--json", STACKS], &["stacks", STACKS])),
    ("flamegraph", "class", Differs(&["flamegraph", "--folded", "--class", "on_cpu", STACKS], &["flamegraph", "--folded", STACKS])),
    ("flamegraph", "output", Differs(&["flamegraph", "--folded", STACKS, "-o", "f.txt"], &["flamegraph", "--folded", STACKS])),
    ("flamegraph", "folded", Differs(&["flamegraph", "--folded", STACKS, "-o", "f"], &["flamegraph", STACKS, "-o", "f"])),
    ("flamegraph", "per-process", Differs(&["flamegraph", "--folded", "--per-process", STACKS], &["flamegraph", "--folded", STACKS])),
    ("doctor", "json", Differs(&["doctor", "--json"], &["doctor"])),
];

/// The visible subcommands and their options (by long name; help and version aside).
fn shown_options() -> BTreeSet<(String, String)> {
    let cmd = kernelkite::cli::command();
    let mut shown = BTreeSet::new();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                shown.insert((sub.get_name().to_string(), long.to_string()));
            }
        }
    }
    shown
}

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// What a run leaves: exit status, stdout, and the files it wrote in its directory.
type Outcome = (Option<i32>, Vec<u8>, BTreeMap<String, Vec<u8>>);

fn outcome(args: &[&str]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let recordings = fixtures().join("recordings");
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("{R}", recordings.to_str().unwrap()))
        .collect();
    let out = std::process::Command::new(kk_path())
        .args(&args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        files.insert(name, std::fs::read(entry.path()).unwrap());
    }
    (out.status.code(), out.stdout, files)
}

#[test]
fn every_shown_option_has_an_effect() {
    let shown = shown_options();
    let mut table = BTreeSet::new();
    for (sub, option, _) in EFFECTS {
        assert!(
            table.insert((sub.to_string(), option.to_string())),
            "{sub} --{option} twice in the table"
        );
    }
    let unexplained: Vec<_> = shown.difference(&table).collect();
    assert!(
        unexplained.is_empty(),
        "options shown with no effect in the table (say how each is seen, or take it off the subcommand): {unexplained:?}"
    );
    let gone: Vec<_> = table.difference(&shown).collect();
    assert!(gone.is_empty(), "rows for options no help shows: {gone:?}");
}

#[test]
fn the_named_tests_and_code_exist_and_name_their_option() {
    for (sub, option, effect) in EFFECTS {
        match effect {
            Test(file, name) => {
                let text = std::fs::read_to_string(repo().join(file)).unwrap();
                assert!(
                    text.contains(&format!("fn {name}(")),
                    "{sub} --{option}: {file} has no fn {name}"
                );
                assert!(
                    text.contains(&format!("--{option}"))
                        || (*option == "output" && text.contains("\"-o\"")),
                    "{sub} --{option}: {file} never names the option"
                );
            }
            Reads(file, needle) => {
                let text = std::fs::read_to_string(repo().join(file)).unwrap();
                assert!(
                    text.contains(needle),
                    "{sub} --{option}: {file} does not read it ({needle:?})"
                );
            }
            Differs(..) => {}
        }
    }
}

#[test]
fn the_cheap_options_change_what_their_subcommand_does() {
    for (sub, option, effect) in EFFECTS {
        let Differs(with, without) = effect else {
            continue;
        };
        assert!(
            with.contains(&format!("--{option}").as_str())
                || (with.contains(&"-o") && *option == "output"),
            "{sub} --{option}: the row does not use it"
        );
        let a = outcome(with);
        let b = outcome(without);
        assert_ne!(
            a, b,
            "{sub} --{option} changed nothing: {with:?} vs {without:?}"
        );
        // A run that fails both ways proves nothing about the option.
        assert!(
            a.0 == Some(0) || b.0 == Some(0),
            "{sub} --{option}: both runs failed"
        );
    }
}

#[test]
fn options_once_global_work_before_the_subcommand_where_it_has_them() {
    let cpu = fixtures().join("recordings/run-ebpf-cpu.bundle.json");
    let before = kk()
        .arg("--json")
        .arg("summary")
        .arg(&cpu)
        .output()
        .unwrap();
    let after = kk()
        .arg("summary")
        .arg("--json")
        .arg(&cpu)
        .output()
        .unwrap();
    assert!(before.status.success());
    assert_eq!(before.stdout, after.stdout);
    // Where the subcommand has no such option it is refused, named, with its usage.
    for (args, sub, says) in [
        (&["--label", "x", "summary"][..], "summary", "--label is not an option of summary: it does nothing there (it is an option of run, trace, replay)"),
        (&["--json", "export", "--format", "json"], "export", "--json is not an option of export"),
        (&["--interval-ms", "5", "top"], "top", "--interval-ms is not an option of top"),
        (&["--backend", "proc", "trace", "--pid", "1"], "trace", "--backend is not an option of trace"),
        (&["summary", "--network"], "summary", "unexpected argument '--network'"),
    ] {
        let out = kk().args(args).arg(&cpu).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(stderr.contains(&format!("Usage: kernelkite {sub}")), "{args:?}: {stderr}");
    }
    // `run` keeps its own status for its own errors (125).
    let out = kk()
        .args(["--json", "run", "b.json", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn every_argument_is_described() {
    let cmd = kernelkite::cli::command();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        assert!(sub.get_about().is_some(), "{} has no about", sub.get_name());
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            assert!(
                arg.get_help()
                    .is_some_and(|h| !h.to_string().trim().is_empty()),
                "{} {}: no description",
                sub.get_name(),
                arg.get_id()
            );
        }
    }
}

/// The classes, counted by hand: the help must say this many.
fn classes_counted() -> (String, Vec<&'static str>) {
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
    ];
    let names: Vec<&str> = kernelkite_common::LatencyClass::ALL
        .iter()
        .map(|c| c.name())
        .collect();
    assert_eq!(
        names,
        [
            "on_cpu",
            "runqueue",
            "io_wait",
            "lock_wait",
            "syscall_blocked",
            "unknown_wait",
            "steal"
        ]
    );
    (words[names.len()].to_string(), names)
}

fn stdout(args: &[&str]) -> String {
    let out = kk().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_classes_are_counted_right_everywhere() {
    let (word, names) = classes_counted();
    let top = stdout(&["--help"]);
    assert!(top.contains(&format!("{word} latency classes")), "{top}");
    assert!(top.contains(&names.join(", ")), "{top}");
    for sub in ["trace", "top"] {
        let help = stdout(&[sub, "--help"]);
        assert!(
            help.contains(&format!("the {word} latency classes")),
            "{sub}: {help}"
        );
    }
    let man = stdout(&["man"]);
    assert!(man.contains(&format!("{word} latency classes")), "{man}");
    let stacks = stdout(&["stacks", "--help"]);
    assert!(stacks.contains(&names.join(", ")), "{stacks}");
    for (what, text) in [("help", &top), ("man", &man)] {
        for wrong in ["six latency", "six classes"] {
            assert!(!text.contains(wrong), "{what} says {wrong}");
        }
    }
    let doc = std::fs::read_to_string(repo().join("docs/TOP.md")).unwrap();
    assert!(doc.contains(&format!("the {word} latency classes")));
}

#[test]
fn the_json_list_names_every_subcommand_with_json() {
    let top = stdout(&["--help"]);
    let line = top
        .lines()
        .find(|l| l.trim_start().starts_with("--json:"))
        .unwrap_or_else(|| panic!("no --json line: {top}"));
    let listed: BTreeSet<&str> = line
        .split(':')
        .nth(1)
        .unwrap()
        .split(',')
        .map(str::trim)
        .collect();
    let has: BTreeSet<String> = shown_options()
        .into_iter()
        .filter(|(_, o)| o == "json")
        .map(|(s, _)| s)
        .collect();
    let has: BTreeSet<&str> = has.iter().map(String::as_str).collect();
    assert_eq!(listed, has);
    // By hand: the subcommands that print JSON.
    let by_hand: BTreeSet<&str> = [
        "trace",
        "summary",
        "waits",
        "critical-path",
        "compare",
        "tree",
        "stacks",
        "doctor",
    ]
    .into();
    assert_eq!(listed, by_hand);
}

#[test]
fn trace_without_a_target_names_every_way_to_give_one() {
    let out = kk().arg("trace").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    for option in ["--pid", "--cgroup", "--container"] {
        assert!(stderr.contains(option), "{stderr}");
    }
    let out = kk()
        .args(["trace", "--pid", "1", "--cgroup", "/"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn man_pages_name_only_pages_that_exist_and_show_the_synopsis_right() {
    let top = stdout(&["man"]);
    assert_eq!(stdout(&["man", "kernelkite"]), top);
    assert!(
        top.contains("\n.TH kernelkite 1 "),
        "{}",
        &top[..200.min(top.len())]
    );
    assert_eq!(
        top.matches(".ds Aq").count(),
        2,
        "one quote definition (.ie/.el)"
    );
    assert!(
        !top.contains("kernelkite\\-help(1)"),
        "names kernelkite-help(1)"
    );
    // Every page the top page names (its SUBCOMMANDS entries, one a line) exists.
    let mut named = 0;
    for line in top.lines() {
        let Some(name) = line
            .strip_prefix("kernelkite\\-")
            .and_then(|l| l.strip_suffix("(1)"))
        else {
            continue;
        };
        let name = name.replace("\\-", "-");
        let page = stdout(&["man", &name]);
        assert!(
            page.contains(&format!(".TH kernelkite-{name} 1")),
            "{name}: {}",
            &page[..200]
        );
        named += 1;
    }
    assert!(named >= 17, "{named} pages named");
    let man = std::process::Command::new(kk_path())
        .args(["man", "nope"])
        .output()
        .unwrap();
    assert_eq!(man.status.code(), Some(2));
    // run's command follows a `--`.
    let run = stdout(&["man", "run"]);
    let synopsis = run
        .split(".SH SYNOPSIS")
        .nth(1)
        .unwrap()
        .split(".SH")
        .next()
        .unwrap();
    assert!(
        synopsis.contains("\\fB\\-\\-\\fR <\\fICOMMAND\\fR>"),
        "{synopsis}"
    );
    // The version's lines stay lines.
    let version = top.split(".SH VERSION").nth(1).unwrap();
    let lines: Vec<&str> = version.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines[0], ".nf", "{version}");
    assert!(lines[1].starts_with(env!("CARGO_PKG_VERSION")), "{version}");
    assert!(lines[2].starts_with("commit:"), "{version}");
    assert!(lines[3].starts_with("BPF object:"), "{version}");
    assert_eq!(lines[4], ".fi", "{version}");
}
