//! `kernelkite top`: a live terminal view of where time goes.
//!
//! Data path: a [`feed::TopFeed`] (eBPF session, /proc sampler, bundle replay) yields
//! snapshots of cumulative counters; [`window`] keeps a ring of them and turns the
//! selected window into numbers with `analysis`; [`App`] holds the view state (window,
//! sort, filter, selection, expanded processes) and turns keys into state changes;
//! [`view`] draws an [`App`]; [`terminal`] owns the terminal and always restores it.
//! [`run`] is the event loop tying them together.

pub mod feed;
pub mod input;
pub mod terminal;
pub mod view;
pub mod window;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Result;
use kernelkite_common::LatencyClass;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::analysis::placement::Placement;
use crate::analysis::stacks::{dominant_stack_class, top_stacks, HeavyStack};
use crate::analysis::{syscall_stats, SyscallStats};
use crate::model::{ClassTimes, ProcessIdentity};
use feed::{FeedInfo, Snapshot, TopFeed};
use window::{History, Window, WindowData};

/// A sortable column of the process table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    Pid,
    Command,
    Threads,
    CpuPercent,
    OffCpu,
    Class(LatencyClass),
}

impl Column {
    /// Every sortable column, left to right (the seven classes are the bar's segments).
    pub const ALL: [Column; 12] = [
        Column::Pid,
        Column::Command,
        Column::Threads,
        Column::CpuPercent,
        Column::OffCpu,
        Column::Class(LatencyClass::OnCpu),
        Column::Class(LatencyClass::Runqueue),
        Column::Class(LatencyClass::IoWait),
        Column::Class(LatencyClass::LockWait),
        Column::Class(LatencyClass::SyscallBlocked),
        Column::Class(LatencyClass::UnknownWait),
        Column::Class(LatencyClass::Steal),
    ];

    pub fn label(self) -> &'static str {
        match self {
            Column::Pid => "pid",
            Column::Command => "command",
            Column::Threads => "threads",
            Column::CpuPercent => "cpu%",
            Column::OffCpu => "off-cpu",
            Column::Class(c) => c.name(),
        }
    }

    /// Numbers sort largest first by default, names and pids ascending.
    fn default_descending(self) -> bool {
        !matches!(self, Column::Pid | Column::Command)
    }

    fn index(self) -> usize {
        Column::ALL.iter().position(|&c| c == self).unwrap_or(0)
    }
}

/// One line of the process table: a process, or a thread of an expanded process.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub pid: i32,
    /// `Some` for a thread row.
    pub tid: Option<i32>,
    pub comm: String,
    pub threads: u64,
    pub classes: ClassTimes,
    /// On-CPU time over the window's wall time, percent of one CPU.
    pub cpu_percent: f64,
    pub off_cpu_ns: u64,
    /// Process rows only: whether its threads are shown.
    pub expanded: bool,
    /// Thread rows (live eBPF): who ended most of its sleep time in the window.
    pub main_waker: Option<String>,
    /// Grouped view (`g`): a container's, unit's or cgroup's row, its processes' sums,
    /// followed by them; its `pid` is a negative index of no process.
    pub group_header: bool,
}

impl Row {
    /// The class with the most time, if any time was measured.
    pub fn dominant(&self) -> Option<(LatencyClass, f64)> {
        let total = self.classes.total_ns();
        if total == 0 {
            return None;
        }
        let best = LatencyClass::ALL
            .into_iter()
            .max_by_key(|&c| (self.classes.get(c), std::cmp::Reverse(c.id())))?;
        Some((best, self.classes.get(best) as f64 / total as f64))
    }

    fn key(&self) -> (i32, Option<i32>) {
        (self.pid, self.tid)
    }
}

/// What the stacks panel shows.
#[derive(Clone, Debug, PartialEq)]
pub struct StackPanel {
    /// The class whose stacks are shown; `None` when the row has no time (or, with
    /// nothing selected, no stack has time).
    pub class: Option<LatencyClass>,
    /// Heaviest first.
    pub stacks: Vec<HeavyStack>,
}

/// A process's row and its threads' rows (when expanded).
type ProcessRows = (Row, Vec<Row>);

/// What a key press asks of the event loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    Quit,
}

/// The view state and the data it shows.
pub struct App {
    pub info: FeedInfo,
    interval: Duration,
    history: History,
    pub window: Window,
    pub sort: Column,
    pub descending: bool,
    pub filter: String,
    /// The filter line is being edited (`/` until Enter or Esc).
    pub editing_filter: bool,
    pub paused: bool,
    pub show_help: bool,
    /// Replay speed factor (replays only).
    pub speed: f64,
    expanded: BTreeSet<i32>,
    selected: Option<(i32, Option<i32>)>,
    /// First visible row of the table (scrolling).
    pub scroll: usize,
    data: Option<WindowData>,
    rows: Vec<Row>,
    /// kernelkite's own CPU, percent of one core, over the last refresh.
    pub overhead_percent: Option<f64>,
    /// Why the feed stopped, once it has.
    pub ended: Option<String>,
    /// Rows grouped by container, systemd unit or cgroup (`g`).
    pub grouped: bool,
    /// Each pid's latest cgroup and namespace pids, from every snapshot so far.
    identities: BTreeMap<i32, ProcessIdentity>,
}

impl App {
    pub fn new(info: FeedInfo, interval: Duration) -> App {
        App {
            info,
            interval,
            history: History::default(),
            window: Window::LastSecond,
            sort: Column::OffCpu,
            descending: true,
            filter: String::new(),
            editing_filter: false,
            paused: false,
            show_help: false,
            speed: 1.0,
            expanded: BTreeSet::new(),
            selected: None,
            scroll: 0,
            data: None,
            rows: Vec::new(),
            overhead_percent: None,
            ended: None,
            grouped: false,
            identities: BTreeMap::new(),
        }
    }

    /// Add a snapshot and recompute the current window.
    pub fn ingest(&mut self, mut snapshot: Snapshot) {
        for identity in std::mem::take(&mut snapshot.identities) {
            self.identities.insert(identity.pid, identity);
        }
        self.history.push(snapshot);
        self.recompute();
    }

    /// The current window's data, once there is at least one snapshot.
    pub fn data(&self) -> Option<&WindowData> {
        self.data.as_ref()
    }

    /// The visible rows, sorted and filtered.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Index of the selected row in [`App::rows`].
    pub fn selected_index(&self) -> Option<usize> {
        let key = self.selected?;
        self.rows.iter().position(|r| r.key() == key)
    }

    pub fn selected_row(&self) -> Option<&Row> {
        self.selected_index().map(|i| &self.rows[i])
    }

    /// The syscall panel: the selected process's syscalls (all processes' when nothing
    /// is selected), heaviest first.
    pub fn syscalls(&self) -> Vec<SyscallStats> {
        let Some(data) = &self.data else {
            return Vec::new();
        };
        let pid = self.selected_row().map(|r| r.pid);
        syscall_stats(
            &self.info.host.arch,
            data.histograms
                .iter()
                .filter(|h| pid.is_none_or(|p| h.pid == p)),
        )
    }

    /// The stacks panel (`--stacks`): the heaviest `n` stacks in the window of the
    /// selected row (its process, or its thread) in the row's dominant class; with
    /// nothing selected, of every process in the class with the most time among those
    /// with stacks. `None` when the feed has no stacks.
    pub fn stack_panel(&mut self, n: usize) -> Option<StackPanel> {
        let selected = self.selected_row().map(|r| (r.pid, r.tid, r.dominant()));
        let data = self.data.as_mut()?;
        let bundle = data.stacks.as_mut()?;
        let profile = bundle.stacks.as_mut()?;
        // Only the selected row's samples, without copying the profile's tables.
        let all = selected.map(|(pid, tid, _)| {
            let all = std::mem::take(&mut profile.samples);
            profile.samples = all
                .iter()
                .filter(|s| s.pid == pid && tid.is_none_or(|t| s.tid == t))
                .cloned()
                .collect();
            all
        });
        let class = match selected {
            Some((_, _, dominant)) => dominant.map(|(class, _)| class),
            None => dominant_stack_class(bundle, &data.analysis),
        };
        let stacks = class
            .map(|c| top_stacks(bundle, &data.analysis, c, n))
            .unwrap_or_default();
        if let (Some(profile), Some(all)) = (bundle.stacks.as_mut(), all) {
            profile.samples = all;
        }
        Some(StackPanel { class, stacks })
    }

    fn recompute(&mut self) {
        let snaps = self.history.snapshots(self.window);
        self.data = if snaps.is_empty() {
            None
        } else {
            Some(window::window_data(
                &self.info,
                self.interval.as_millis() as u64,
                &snaps,
            ))
        };
        self.rebuild_rows();
    }

    /// Rebuild the table from the window's analysis: alive processes only, filtered,
    /// sorted, expanded processes followed by their threads.
    fn rebuild_rows(&mut self) {
        self.rows.clear();
        let Some(data) = &self.data else { return };
        let window_s = data.window_ns as f64 / 1e9;
        let percent = |seconds: f64| {
            if window_s > 0.0 {
                seconds / window_s * 100.0
            } else {
                0.0
            }
        };
        let needle = self.filter.to_lowercase();
        let mut procs: Vec<(Row, Vec<Row>)> = Vec::new();
        for p in &data.analysis.processes {
            let Some(tids) = data.alive.get(&(p.pid, p.start_time_ticks)) else {
                continue;
            };
            if !needle.is_empty()
                && !p.comm.to_lowercase().contains(&needle)
                && !p.pid.to_string().contains(&needle)
            {
                continue;
            }
            let expanded = self.expanded.contains(&p.pid);
            let threads: Vec<Row> = if expanded {
                data.analysis
                    .threads
                    .iter()
                    .filter(|t| {
                        t.pid == p.pid
                            && t.process_start_time_ticks == p.start_time_ticks
                            && tids.contains(&t.tid)
                    })
                    .map(|t| Row {
                        pid: p.pid,
                        tid: Some(t.tid),
                        comm: t.comm.clone(),
                        threads: 1,
                        classes: t.classes,
                        cpu_percent: percent(t.classes.on_cpu as f64 / 1e9),
                        off_cpu_ns: t.classes.off_cpu_ns(),
                        expanded: false,
                        main_waker: data.main_wakers.get(&(p.pid, t.tid)).cloned(),
                        group_header: false,
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let row = Row {
                pid: p.pid,
                tid: None,
                comm: p.comm.clone(),
                threads: tids.len() as u64,
                classes: p.classes,
                cpu_percent: percent(p.cpu_seconds.unwrap_or(0.0)),
                off_cpu_ns: p.classes.off_cpu_ns(),
                expanded,
                main_waker: None,
                group_header: false,
            };
            procs.push((row, threads));
        }
        let (sort, descending) = (self.sort, self.descending);
        procs.sort_by(|a, b| compare_rows(&a.0, &b.0, sort, descending));
        if !self.grouped {
            for (row, mut threads) in procs {
                threads.sort_by(|a, b| compare_rows(a, b, sort, descending));
                self.rows.push(row);
                self.rows.extend(threads);
            }
        } else {
            self.push_grouped(procs);
        }
        if self.selected_index().is_none() {
            // The selected row went away (exited, filtered out): select nothing, so the
            // syscall panel shows every process.
            self.selected = None;
        }
    }

    /// The rows under one header row per container, unit or cgroup (sorted as the
    /// processes are), each header the sum of its processes.
    fn push_grouped(&mut self, procs: Vec<ProcessRows>) {
        let (sort, descending) = (self.sort, self.descending);
        let mut groups: BTreeMap<String, (Row, Vec<ProcessRows>)> = BTreeMap::new();
        for (row, threads) in procs {
            let name = (self.identities.get(&row.pid))
                .and_then(|i| Placement::of(i).group_name())
                .unwrap_or_else(|| "(cgroup not known)".to_string());
            let (header, members) = groups.entry(name.clone()).or_insert_with(|| {
                let header = Row {
                    pid: 0,
                    tid: None,
                    comm: name,
                    threads: 0,
                    classes: ClassTimes::default(),
                    cpu_percent: 0.0,
                    off_cpu_ns: 0,
                    expanded: false,
                    main_waker: None,
                    group_header: true,
                };
                (header, Vec::new())
            });
            header.threads += row.threads;
            header.classes = header.classes.saturating_add(&row.classes);
            header.cpu_percent += row.cpu_percent;
            header.off_cpu_ns += row.off_cpu_ns;
            members.push((row, threads));
        }
        let mut groups: Vec<(Row, Vec<ProcessRows>)> = groups.into_values().collect();
        // Header pids: negative and stable (by name), so a selected group stays selected.
        for (i, (header, _)) in groups.iter_mut().enumerate() {
            header.pid = -(i as i32) - 1;
        }
        groups.sort_by(|a, b| compare_rows(&a.0, &b.0, sort, descending));
        for (header, members) in groups {
            self.rows.push(header);
            for (row, mut threads) in members {
                threads.sort_by(|a, b| compare_rows(a, b, sort, descending));
                self.rows.push(row);
                self.rows.extend(threads);
            }
        }
    }

    /// Apply one key press.
    pub fn handle_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Continue;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C')) {
            return Action::Quit;
        }
        if self.editing_filter {
            match key.code {
                KeyCode::Enter => self.editing_filter = false,
                KeyCode::Esc => {
                    self.editing_filter = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if !ctrl => self.filter.push(c),
                _ => {}
            }
            self.rebuild_rows();
            return Action::Continue;
        }
        if self.show_help {
            // Any key closes the help; q still quits.
            self.show_help = false;
            return if key.code == KeyCode::Char('q') {
                Action::Quit
            } else {
                Action::Continue
            };
        }
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => self.show_help = true,
            KeyCode::Char('w') => {
                self.window = self.window.next();
                self.recompute();
            }
            KeyCode::Char('s') => {
                self.set_sort(Column::ALL[(self.sort.index() + 1) % Column::ALL.len()])
            }
            KeyCode::Char('>') => {
                self.set_sort(Column::ALL[(self.sort.index() + 1).min(Column::ALL.len() - 1)])
            }
            KeyCode::Char('<') => self.set_sort(Column::ALL[self.sort.index().saturating_sub(1)]),
            KeyCode::Char('r') => {
                self.descending = !self.descending;
                self.rebuild_rows();
            }
            KeyCode::Char('g') => {
                self.grouped = !self.grouped;
                self.rebuild_rows();
            }
            KeyCode::Char('/') => {
                self.editing_filter = true;
                self.filter.clear();
                self.rebuild_rows();
            }
            KeyCode::Esc => {
                self.filter.clear();
                self.selected = None;
                self.rebuild_rows();
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => self.paused = !self.paused,
            KeyCode::Char('+') | KeyCode::Char('=') => self.speed = (self.speed * 2.0).min(64.0),
            KeyCode::Char('-') => self.speed = (self.speed / 2.0).max(1.0 / 64.0),
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home => self.select_index(0),
            KeyCode::End => self.select_index(self.rows.len().saturating_sub(1)),
            KeyCode::Enter => self.toggle_expanded(),
            KeyCode::Right | KeyCode::Char('l') => self.set_expanded(true),
            KeyCode::Left => self.set_expanded(false),
            _ => {}
        }
        Action::Continue
    }

    fn set_sort(&mut self, column: Column) {
        if column != self.sort {
            self.sort = column;
            self.descending = column.default_descending();
        }
        self.rebuild_rows();
    }

    fn select_index(&mut self, index: usize) {
        self.selected = self.rows.get(index).map(Row::key);
    }

    fn move_selection(&mut self, delta: isize) {
        if self.rows.is_empty() {
            return;
        }
        let next = match self.selected_index() {
            None if delta > 0 => 0,
            None => self.rows.len() - 1,
            Some(i) => i.saturating_add_signed(delta).min(self.rows.len() - 1),
        };
        self.select_index(next);
    }

    fn toggle_expanded(&mut self) {
        let Some(row) = self.selected_row() else {
            return;
        };
        let pid = row.pid;
        let expand = !self.expanded.contains(&pid);
        self.set_expanded(expand);
    }

    fn set_expanded(&mut self, expand: bool) {
        let Some(row) = self.selected_row() else {
            return;
        };
        let pid = row.pid;
        if expand {
            self.expanded.insert(pid);
        } else {
            self.expanded.remove(&pid);
            // Collapsing from a thread row selects its process.
            self.selected = Some((pid, None));
        }
        self.rebuild_rows();
    }
}

fn compare_rows(a: &Row, b: &Row, column: Column, descending: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let primary = match column {
        Column::Pid => a.tid.unwrap_or(a.pid).cmp(&b.tid.unwrap_or(b.pid)),
        Column::Command => a.comm.cmp(&b.comm),
        Column::Threads => a.threads.cmp(&b.threads),
        Column::CpuPercent => a
            .cpu_percent
            .partial_cmp(&b.cpu_percent)
            .unwrap_or(Ordering::Equal),
        Column::OffCpu => a.off_cpu_ns.cmp(&b.off_cpu_ns),
        Column::Class(c) => a.classes.get(c).cmp(&b.classes.get(c)),
    };
    let primary = if descending {
        primary.reverse()
    } else {
        primary
    };
    // Ties: by pid (tid), so the order is stable from one refresh to the next.
    primary.then_with(|| a.tid.unwrap_or(a.pid).cmp(&b.tid.unwrap_or(b.pid)))
}

/// kernelkite's own CPU use, from /proc/self/stat (utime + stime) deltas.
struct SelfCpu {
    last: Option<(Instant, u64)>,
    ticks_per_sec: u64,
}

impl SelfCpu {
    fn new(ticks_per_sec: u64) -> SelfCpu {
        SelfCpu {
            last: None,
            ticks_per_sec: ticks_per_sec.max(1),
        }
    }

    /// Percent of one core since the previous call (`None` on the first).
    fn sample(&mut self) -> Option<f64> {
        let now = Instant::now();
        let ticks = self_cpu_ticks()?;
        let prev = self.last.replace((now, ticks));
        let (then, before) = prev?;
        let wall = now.duration_since(then).as_secs_f64();
        if wall <= 0.0 {
            return None;
        }
        let cpu = ticks.saturating_sub(before) as f64 / self.ticks_per_sec as f64;
        Some(cpu / wall * 100.0)
    }
}

/// utime + stime of this process, clock ticks.
fn self_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// How the event loop ends.
pub struct Outcome {
    pub reason: &'static str,
}

/// Own the terminal and run the view until the user quits or a signal arrives.
/// The terminal is restored however this returns (and on panic).
pub fn run(feed: &mut dyn TopFeed, speed: f64) -> Result<Outcome> {
    let signals = terminal::StopSignals::install()?;
    let mut term = terminal::TerminalGuard::enter()?;
    let mut app = App::new(feed.info().clone(), feed.interval());
    app.speed = speed;
    let mut self_cpu = SelfCpu::new(app.info.host.clock_ticks_per_sec);
    self_cpu.sample();
    let replay = feed.is_replay();
    let mut next_tick = Instant::now();
    let mut dirty = true;
    let reason = loop {
        if signals.stop_requested() {
            break "terminated by a signal";
        }
        if signals.take_resized() {
            dirty = true;
        }
        let now = Instant::now();
        if now >= next_tick {
            if !app.paused && app.ended.is_none() {
                match feed.next_snapshot()? {
                    Some(s) => {
                        app.ingest(s);
                        app.overhead_percent = self_cpu.sample();
                    }
                    None => {
                        app.ended = Some(if replay {
                            "replay finished".to_string()
                        } else {
                            "every watched process exited".to_string()
                        });
                    }
                }
                dirty = true;
            }
            let step = if replay {
                feed.interval().div_f64(app.speed.max(1.0 / 64.0))
            } else {
                feed.interval()
            };
            next_tick = now + step;
        }
        if dirty {
            term.draw(|f| view::draw(f, &mut app))?;
            dirty = false;
        }
        feed.pump();
        // Wake for the next snapshot, a key, or at least every 100 ms (signals, pump).
        let wait = next_tick
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(100));
        match input::wait(wait)? {
            input::Input::Keys(keys) => {
                if keys.into_iter().any(|k| app.handle_key(k) == Action::Quit) {
                    break "quit";
                }
                dirty = true;
            }
            input::Input::Idle => {}
            input::Input::Closed => break "the terminal went away",
        }
    };
    drop(term);
    Ok(Outcome { reason })
}
