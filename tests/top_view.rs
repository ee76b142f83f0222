//! Rendered frames of `kernelkite top` (ratatui TestBackend) fed with the shipped
//! fixtures' frames through the same feed, windows and view the live command uses:
//! deterministic, so the screens are insta snapshots.

use std::path::Path;

use kernelkite::model::fixture::load_fixture;
use kernelkite::top::feed::{BundleReplayFeed, RecordingReplayFeed, TopFeed};
use kernelkite::top::{view, Action, App, Column};
use kernelkite_common::LatencyClass;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

/// An app that has seen every frame of a fixture (the first `frames`, if given).
fn app_from_fixture(name: &str, frames: Option<usize>) -> (App, Box<dyn TopFeed>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(format!("{name}.json"));
    let bundle = load_fixture(&path).unwrap();
    let mut feed: Box<dyn TopFeed> =
        Box::new(BundleReplayFeed::new(bundle, &format!("{name}.json")));
    let mut app = App::new(feed.info().clone(), feed.interval());
    let mut n = 0;
    while frames.is_none_or(|f| n < f) {
        match feed.next_snapshot().unwrap() {
            Some(s) => app.ingest(s),
            None => {
                app.ended = Some("replay finished".into());
                break;
            }
        }
        n += 1;
    }
    (app, feed)
}

fn screen(app: &mut App, width: u16, height: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(width, height)).unwrap();
    term.draw(|f| view::draw(f, app)).unwrap();
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn key(app: &mut App, code: KeyCode) -> Action {
    app.handle_key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn keys(app: &mut App, text: &str) {
    for c in text.chars() {
        key(app, KeyCode::Char(c));
    }
}

#[test]
fn ebpf_replay_at_the_end_with_threads_expanded() {
    let (mut app, _) = app_from_fixture("api-server-ebpf", None);
    insta::assert_snapshot!("ebpf_end_last_1s", screen(&mut app, 120, 30));
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Enter);
    keys(&mut app, "w");
    assert_eq!(app.rows().len(), 3, "the process and its two threads");
    insta::assert_snapshot!("ebpf_end_last_10s_threads", screen(&mut app, 120, 30));
    // Left on a thread collapses its process and selects it.
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Left);
    assert_eq!(app.rows().len(), 1);
    assert_eq!(app.selected_row().map(|r| r.tid), Some(None));
}

#[test]
fn the_syscall_panel_waits_for_a_bundles_final_histograms() {
    let (mut app, _) = app_from_fixture("api-server-ebpf", Some(2));
    let text = screen(&mut app, 120, 24);
    assert!(text.contains("they show when the replay ends"), "{text}");
    assert!(text.contains("api-server"), "{text}");
}

#[test]
fn proc_backend_labels_estimates_and_sorts_by_any_column() {
    let (mut app, _) = app_from_fixture("cargo-build-before", Some(5));
    insta::assert_snapshot!("proc_mid_replay", screen(&mut app, 130, 24));
    // `s` walks the columns; `<` and `>` move left and right.
    assert_eq!(app.sort, Column::OffCpu);
    keys(&mut app, "s");
    assert_eq!(app.sort, Column::Class(LatencyClass::OnCpu));
    keys(&mut app, "<<<<<");
    assert_eq!(app.sort, Column::Pid);
    let pids: Vec<i32> = app.rows().iter().map(|r| r.pid).collect();
    let mut sorted = pids.clone();
    sorted.sort();
    assert_eq!(pids, sorted);
    keys(&mut app, "r");
    let pids: Vec<i32> = app.rows().iter().map(|r| r.pid).collect();
    assert_eq!(pids, sorted.into_iter().rev().collect::<Vec<_>>());
    keys(&mut app, ">");
    insta::assert_snapshot!("proc_sorted_by_command", screen(&mut app, 130, 24));
}

#[test]
fn filter_pause_help_and_quit() {
    let (mut app, _) = app_from_fixture("cargo-build-before", Some(5));
    keys(&mut app, "/rust");
    assert!(app.editing_filter);
    key(&mut app, KeyCode::Enter);
    assert!(
        app.rows().iter().all(|r| r.comm.contains("rust")),
        "{:?}",
        app.rows()
    );
    assert!(!app.rows().is_empty());
    keys(&mut app, "/zzz");
    key(&mut app, KeyCode::Enter);
    let text = screen(&mut app, 120, 20);
    assert!(text.contains("no process matches \"zzz\""), "{text}");
    key(&mut app, KeyCode::Esc);
    assert!(app.filter.is_empty());
    keys(&mut app, " ");
    assert!(app.paused);
    assert!(screen(&mut app, 120, 20).contains("PAUSED"));
    keys(&mut app, "p?");
    assert!(!app.paused);
    insta::assert_snapshot!("help_overlay", screen(&mut app, 120, 30));
    // Any key closes the help; q quits, as does Ctrl-C.
    keys(&mut app, "x");
    assert!(!app.show_help);
    assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(app.handle_key(ctrl_c), Action::Quit);
}

#[test]
fn any_terminal_size_renders() {
    let (mut app, _) = app_from_fixture("api-server-ebpf", None);
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Enter);
    key(&mut app, KeyCode::Char('?'));
    for (w, h) in [
        (0, 0),
        (1, 1),
        (39, 9),
        (40, 10),
        (41, 11),
        (80, 12),
        (300, 5),
        (15, 200),
    ] {
        let text = screen(&mut app, w, h);
        if w < 40 || h < 10 {
            assert!(w == 0 || h == 0 || text.starts_with('t'), "{w}x{h}: {text}");
        }
    }
}

#[test]
fn the_table_scrolls_to_keep_the_selection_visible() {
    let (mut app, _) = app_from_fixture("cargo-build-before", Some(5));
    assert_eq!(app.rows().len(), 3);
    let pid_at = |app: &App, i: usize| app.rows()[i].pid.to_string();
    // At 100x12 the table has a header and two rows: one of the three is off screen.
    let table =
        |text: &str| -> Vec<String> { text.lines().skip(3).take(2).map(str::to_string).collect() };
    key(&mut app, KeyCode::End);
    let shown = table(&screen(&mut app, 100, 12));
    assert!(shown[1].starts_with(&pid_at(&app, 2)), "{shown:?}");
    assert!(
        !shown.iter().any(|l| l.starts_with(&pid_at(&app, 0))),
        "{shown:?}"
    );
    key(&mut app, KeyCode::Home);
    let shown = table(&screen(&mut app, 100, 12));
    assert!(shown[0].starts_with(&pid_at(&app, 0)), "{shown:?}");
    assert!(
        !shown.iter().any(|l| l.starts_with(&pid_at(&app, 2))),
        "{shown:?}"
    );
}

#[test]
fn the_stacks_panel_follows_the_selected_rows_dominant_class() {
    let (mut app, _) = app_from_fixture("stacks-demo", None);
    assert!(app.info.stacks, "the fixture has a stack profile");
    // Nothing selected: every process, in the class with the most time with stacks.
    insta::assert_snapshot!("stacks_all_processes_wide", screen(&mut app, 160, 40));
    // The process row: its dominant class's stacks.
    key(&mut app, KeyCode::Down);
    let row = app.selected_row().unwrap().clone();
    let (class, _) = row.dominant().unwrap();
    let panel = app.stack_panel(5).unwrap();
    assert_eq!(panel.class, Some(class));
    assert!(!panel.stacks.is_empty());
    assert!(panel
        .stacks
        .iter()
        .all(|s| s.threads.iter().all(|t| t.pid == row.pid)));
    insta::assert_snapshot!("stacks_process_narrow", screen(&mut app, 110, 44));
    // A thread row: that thread's stacks only.
    key(&mut app, KeyCode::Enter);
    key(&mut app, KeyCode::Down);
    let thread = app.selected_row().unwrap().clone();
    let tid = thread.tid.expect("a thread row");
    let panel = app.stack_panel(5).unwrap();
    assert_eq!(panel.class, thread.dominant().map(|d| d.0));
    assert!(panel
        .stacks
        .iter()
        .all(|s| s.threads.iter().all(|t| t.tid == tid)));
    let text = screen(&mut app, 160, 40);
    assert!(text.contains(&format!("stacks · thread {tid}")), "{text}");
}

#[test]
fn the_stacks_panel_waits_for_a_bundles_profile() {
    let (mut app, _) = app_from_fixture("stacks-demo", Some(2));
    let text = screen(&mut app, 160, 40);
    assert!(text.contains(" stacks · all processes"), "{text}");
    assert!(text.contains("stacks arrive with the last frame"), "{text}");
}

/// A recording of a fixture's frames, its histograms recorded after frame
/// `histograms_after` (as a session records them every second).
fn recording_of(name: &str, histograms_after: usize) -> tempfile::NamedTempFile {
    use kernelkite::recording::encode::encode_to_vec;
    use kernelkite::recording::{ClockAnchor, Compression, RecordRef, SessionStart};
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(format!("{name}.json"));
    let bundle = load_fixture(&path).unwrap();
    let start = SessionStart {
        backend: bundle.backend,
        label: None,
        host: bundle.host.clone(),
        interval_ms: bundle.interval_ms,
        max_frames: 100_000,
        min_latency_ns: 0,
        follow: true,
        network: false,
        root_pids: bundle.root_pids.clone(),
        clock: ClockAnchor::default(),
    };
    let mut records = vec![RecordRef::SessionStart(&start)];
    for (i, frame) in bundle.frames.iter().enumerate() {
        records.push(RecordRef::Frame(frame));
        if i + 1 == histograms_after {
            records.push(RecordRef::Histograms {
                t_ns: frame.t_ns,
                histograms: &bundle.syscalls,
            });
        }
    }
    let end = bundle.frames.last().unwrap().t_ns;
    records.push(RecordRef::End { t_ns: end });
    let file = tempfile::Builder::new().suffix(".kkr").tempfile().unwrap();
    std::fs::write(file.path(), encode_to_vec(&records, Compression::Zstd)).unwrap();
    file
}

#[test]
fn a_recordings_histograms_fill_the_syscall_panel_as_it_plays() {
    let file = recording_of("api-server-ebpf", 2);
    let mut feed = RecordingReplayFeed::open(file.path(), false).unwrap();
    assert!(feed.is_replay());
    let mut app = App::new(feed.info().clone(), feed.interval());
    let mut counts = Vec::new();
    while let Some(s) = feed.next_snapshot().unwrap() {
        counts.push(s.syscalls.len());
        app.ingest(s);
        if counts.len() == 2 {
            // Mid-replay, the histograms recorded with the second frame are shown.
            let text = screen(&mut app, 120, 30);
            assert!(text.contains("epoll_wait"), "{text}");
            assert!(text.contains("replay of"), "{text}");
        }
    }
    assert_eq!(counts[0], 0);
    assert!(counts[1] > 0 && counts.iter().skip(1).all(|&n| n == counts[1]));
    // The feed streams every frame of the recording.
    assert_eq!(counts.len(), 4, "{counts:?}");
}

#[test]
fn g_groups_the_rows_by_cgroup_and_back() {
    // A `trace --cgroup` recording (pid-namespaced shell loop in /kk-fixture).
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/recordings/trace-ebpf-cgroup.kkr");
    let mut feed = RecordingReplayFeed::open(&path, false).unwrap();
    let mut app = App::new(feed.info().clone(), feed.interval());
    // Up to the middle of the loop, while its processes live.
    for _ in 0..4 {
        let s = feed.next_snapshot().unwrap().expect("a frame");
        app.ingest(s);
    }
    let flat: Vec<i32> = app.rows().iter().map(|r| r.pid).collect();
    assert!(!flat.is_empty() && app.rows().iter().all(|r| !r.group_header));
    keys(&mut app, "g");
    let rows = app.rows();
    assert!(rows[0].group_header, "{rows:?}");
    assert_eq!(rows[0].comm, "/kk-fixture");
    assert_eq!(rows.len(), flat.len() + 1, "one group, then every process");
    let members = &rows[1..];
    assert_eq!(
        rows[0].threads,
        members.iter().map(|r| r.threads).sum::<u64>(),
        "the group's row is the sum of its processes"
    );
    let text = screen(&mut app, 120, 30);
    assert!(
        text.contains("■ kk-fixture") && text.contains("/kk-fixture · "),
        "{text}"
    );
    keys(&mut app, "g");
    assert_eq!(app.rows().iter().map(|r| r.pid).collect::<Vec<_>>(), flat);
}
