//! Drawing an [`App`]: header with the class legend, the process table with a stacked
//! bar of the seven latency classes per row, the syscall panel, the stacks panel (when the
//! feed has stacks), the status line, and the help overlay. Every number shown comes from the app's window analysis; this module
//! only lays it out. Any terminal size renders (tiny ones get a one-line notice).

use kernelkite_common::{LatencyClass, NUM_CLASSES};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, Paragraph, Row as TableRow, Table, TableState, Wrap,
};
use ratatui::Frame;

use super::{App, Column, Row};
use crate::report::{clean, fmt_ns};

/// The syscall table's width (its columns' widths added up).
const SYSCALL_TABLE_WIDTH: u16 = 18 + 9 + 9 + 11 + 10 * 4 + 7;
/// From this width on, the stacks panel goes beside the syscall panel.
const SIDE_BY_SIDE_WIDTH: u16 = SYSCALL_TABLE_WIDTH + 50;
/// At most this many stacks are listed.
const PANEL_STACKS: usize = 5;

/// Below this size only a notice is drawn.
const MIN_WIDTH: u16 = 40;
const MIN_HEIGHT: u16 = 10;

/// The colour of each class's bar segment and legend entry.
pub fn class_color(class: LatencyClass) -> Color {
    match class {
        LatencyClass::OnCpu => Color::Green,
        LatencyClass::Runqueue => Color::Yellow,
        LatencyClass::IoWait => Color::Blue,
        LatencyClass::LockWait => Color::Red,
        LatencyClass::SyscallBlocked => Color::Magenta,
        LatencyClass::UnknownWait => Color::Gray,
        LatencyClass::Steal => Color::Cyan,
    }
}

/// Draw the whole screen.
pub fn draw(f: &mut Frame<'_>, app: &mut App) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let notice = format!(
            "terminal too small ({}x{}); q quits",
            area.width, area.height
        );
        f.render_widget(Paragraph::new(notice).wrap(Wrap { trim: true }), area);
        return;
    }
    let show_stacks = app.info.stacks || app.data().is_some_and(|d| d.stacks.is_some());
    // Stacks beside the syscalls on a wide terminal, below them on a narrow one.
    let side_by_side = area.width >= SIDE_BY_SIDE_WIDTH;
    let panel_height = if show_stacks && !side_by_side {
        (area.height / 2).clamp(8, 24)
    } else {
        (area.height / 3).clamp(5, 14)
    };
    let [header, legend, table, panels, status, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(panel_height),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(header_line(app)), header);
    f.render_widget(Paragraph::new(legend_line(app)), legend);
    draw_table(f, app, table);
    if show_stacks {
        let [syscalls, stacks] = if side_by_side {
            Layout::horizontal([Constraint::Length(SYSCALL_TABLE_WIDTH), Constraint::Min(20)])
                .spacing(1)
                .areas(panels)
        } else {
            Layout::vertical([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(panels)
        };
        draw_syscalls(f, app, syscalls);
        draw_stacks(f, app, stacks);
    } else {
        draw_syscalls(f, app, panels);
    }
    f.render_widget(Paragraph::new(status_line(app)), status);
    f.render_widget(
        Paragraph::new(keys_line(app)).style(Style::new().fg(Color::DarkGray)),
        keys,
    );
    if app.show_help {
        draw_help(f, area, &app.info.hooks);
    }
}

fn header_line(app: &App) -> Line<'static> {
    let backend = if let Some(name) = &app.info.replay_of {
        format!(
            "replay of {} ({}, {}x)",
            clean(name),
            app.info.backend,
            app.speed
        )
    } else {
        app.info.backend.to_string()
    };
    let window = match app.data() {
        Some(d) => format!("{:.1} s", d.window_ns as f64 / 1e9),
        None => "-".to_string(),
    };
    let arrow = if app.descending { "▼" } else { "▲" };
    let processes = app
        .rows()
        .iter()
        .filter(|r| r.tid.is_none() && !r.group_header)
        .count();
    let spans = vec![
        Span::styled("kernelkite top", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            " · {} ({} shown) · {} · {} ({}) · sort {} {}",
            clean(&app.info.scope),
            processes,
            backend,
            app.window.label(),
            window,
            app.sort.label(),
            arrow,
        )),
    ];
    Line::from(spans)
}

fn legend_line(app: &App) -> Line<'static> {
    let mut spans = Vec::new();
    for class in LatencyClass::ALL {
        spans.push(Span::styled("■ ", Style::new().fg(class_color(class))));
        spans.push(Span::raw(format!("{} ", class.name())));
    }
    if app.info.backend.latency_classes_exact() {
        spans.push(Span::styled(
            "(all exact)",
            Style::new().fg(Color::DarkGray),
        ));
    } else {
        spans.push(Span::styled(
            "(on_cpu, runqueue exact; the rest estimated from /proc)",
            Style::new().fg(Color::Yellow),
        ));
    }
    Line::from(spans)
}

/// Split `width` cells among the classes in proportion to their time (largest
/// remainders get the leftover cells), so the segments always fill the bar exactly.
pub fn bar_cells(classes: &crate::model::ClassTimes, width: u16) -> [u16; NUM_CLASSES] {
    let times = classes.to_array();
    let total: u128 = times.iter().map(|&t| t as u128).sum();
    let mut cells = [0u16; NUM_CLASSES];
    if total == 0 || width == 0 {
        return cells;
    }
    let mut remainders = [(0u128, 0usize); NUM_CLASSES];
    let mut given = 0u16;
    for i in 0..NUM_CLASSES {
        let exact = times[i] as u128 * width as u128;
        cells[i] = (exact / total) as u16;
        given += cells[i];
        remainders[i] = (exact % total, i);
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take((width - given) as usize) {
        cells[i] += 1;
    }
    cells
}

fn bar(row: &Row, width: u16) -> Line<'static> {
    let cells = bar_cells(&row.classes, width);
    let spans: Vec<Span<'static>> = LatencyClass::ALL
        .into_iter()
        .zip(cells)
        .filter(|(_, n)| *n > 0)
        .map(|(class, n)| Span::styled("█".repeat(n as usize), Style::new().fg(class_color(class))))
        .collect();
    Line::from(spans)
}

fn draw_table(f: &mut Frame<'_>, app: &mut App, area: Rect) {
    // The STEAL column where the bar keeps at least 15 cells beside it.
    let show_steal = area.width >= 7 + 17 + 4 + 7 + 10 + 24 + 6 + 11 + 15;
    let bar_width = area
        .width
        .saturating_sub(7 + 17 + 4 + 7 + 10 + 24 + 6 + if show_steal { 11 } else { 0 })
        .clamp(6, 60);
    let mut header_cells = vec![
        (Column::Pid, "PID"),
        (Column::Command, "COMMAND"),
        (Column::Threads, "THR"),
        (Column::CpuPercent, "CPU%"),
        (Column::OffCpu, "OFF-CPU"),
    ];
    if show_steal {
        // Per thread, the time the hypervisor (or irq service) took while it was current:
        // a bar segment too small to see, so it has a number of its own.
        header_cells.push((Column::Class(LatencyClass::Steal), "STEAL"));
    }
    let mut header: Vec<Cell> = header_cells
        .iter()
        .map(|&(col, name)| {
            let style = if app.sort == col {
                Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
            } else {
                Style::new().add_modifier(Modifier::BOLD)
            };
            Cell::from(name).style(style)
        })
        .collect();
    let bar_title = match app.sort {
        Column::Class(c) => format!("TIME BY CLASS (sort {})", c.name()),
        _ => "TIME BY CLASS".to_string(),
    };
    header.push(Cell::from(bar_title).style(Style::new().add_modifier(Modifier::BOLD)));
    header.push(Cell::from("DOMINANT").style(Style::new().add_modifier(Modifier::BOLD)));

    // Only the rows that fit are built (a system-wide view has hundreds): scroll so the
    // selection stays visible, as ratatui's TableState would.
    let visible = area.height.saturating_sub(1).max(1) as usize;
    let selected = app.selected_index();
    let total = app.rows().len();
    let mut offset = app.scroll.min(total.saturating_sub(visible));
    if let Some(sel) = selected {
        if sel < offset {
            offset = sel;
        } else if sel >= offset + visible {
            offset = sel + 1 - visible;
        }
    }
    app.scroll = offset;
    let rows: Vec<TableRow> = app
        .rows()
        .iter()
        .skip(offset)
        .take(visible)
        .map(|r| {
            let (id, name) = match r.tid {
                // The group's name in full goes in the last (widest) column.
                _ if r.group_header => {
                    let short = r.comm.rsplit(['/', ' ']).next().unwrap_or(&r.comm);
                    (String::new(), format!("■ {}", clean(short)))
                }
                Some(tid) => (format!("  {tid}"), format!("  └ {}", clean(&r.comm))),
                None => {
                    let marker = if r.expanded {
                        "▾ "
                    } else if r.threads > 1 {
                        "▸ "
                    } else {
                        "  "
                    };
                    (r.pid.to_string(), format!("{marker}{}", clean(&r.comm)))
                }
            };
            let mut dominant = match r.dominant() {
                Some((class, share)) => format!("{} {:.0}%", class.name(), share * 100.0),
                None => "-".to_string(),
            };
            if r.group_header {
                dominant = format!("{} · {dominant}", clean(&r.comm));
            }
            // A thread row names who ended most of its sleeps in the window.
            if let Some(waker) = &r.main_waker {
                dominant.push_str(&format!(" ← {}", clean(waker)));
            }
            let mut cells = vec![
                Cell::from(id),
                Cell::from(name),
                Cell::from(if r.tid.is_some() {
                    String::new()
                } else {
                    r.threads.to_string()
                }),
                Cell::from(format!("{:.1}", r.cpu_percent)),
                Cell::from(fmt_ns(r.off_cpu_ns as f64)),
            ];
            if show_steal {
                cells.push(Cell::from(fmt_ns(r.classes.steal as f64)));
            }
            cells.push(Cell::from(bar(r, bar_width)));
            cells.push(Cell::from(dominant));
            TableRow::new(cells)
        })
        .collect();
    let empty = rows.is_empty();
    let mut widths = vec![
        Constraint::Length(7),
        Constraint::Length(17),
        Constraint::Length(4),
        Constraint::Length(6),
        Constraint::Length(10),
    ];
    if show_steal {
        widths.push(Constraint::Length(10));
    }
    widths.extend([Constraint::Length(bar_width), Constraint::Min(10)]);
    let table = Table::new(rows, widths)
        .header(TableRow::new(header))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(selected.map(|i| i - offset));
    f.render_stateful_widget(table, area, &mut state);
    if empty {
        let msg = if app.data().is_none() {
            "waiting for the first snapshot…".to_string()
        } else if !app.filter.is_empty() {
            format!("no process matches \"{}\"", clean(&app.filter))
        } else {
            "no live process in view".to_string()
        };
        let line = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        f.render_widget(
            Paragraph::new(msg).style(Style::new().fg(Color::DarkGray)),
            line,
        );
    }
}

fn draw_syscalls(f: &mut Frame<'_>, app: &App, area: Rect) {
    let whose = match app.selected_row() {
        Some(r) => format!("pid {} {}", r.pid, clean(&r.comm)),
        None => "all processes".to_string(),
    };
    let title = format!(" syscalls · {whose} · {} ", app.window.label());
    let block = Block::default().borders(Borders::TOP).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    if app.info.backend != crate::model::Backend::Ebpf {
        f.render_widget(
            Paragraph::new("syscall latency needs the eBPF backend (run as root)")
                .style(Style::new().fg(Color::DarkGray)),
            inner,
        );
        return;
    }
    let window_s = app.data().map_or(0.0, |d| d.window_ns as f64 / 1e9);
    let stats = app.syscalls();
    if stats.is_empty() {
        let msg = if app.info.replay_of.is_some() && app.ended.is_none() {
            "a bundle holds only its final histograms: they show when the replay ends"
        } else {
            "no syscall completed in this window"
        };
        f.render_widget(
            Paragraph::new(msg).style(Style::new().fg(Color::DarkGray)),
            inner,
        );
        return;
    }
    let ns = |v: u64| fmt_ns(v as f64);
    let rows: Vec<TableRow> = stats
        .iter()
        .take(inner.height.saturating_sub(1) as usize)
        .map(|s| {
            let rate = if window_s > 0.0 {
                format!("{:.1}", s.count as f64 / window_s)
            } else {
                "-".to_string()
            };
            TableRow::new(vec![
                s.label(),
                s.count.to_string(),
                rate,
                ns(s.total_ns),
                ns(s.p50_ns),
                ns(s.p95_ns),
                ns(s.p99_ns),
                ns(s.max_ns),
            ])
        })
        .collect();
    let header = TableRow::new(vec![
        "SYSCALL", "COUNT", "RATE/s", "TOTAL", "P50", "P95", "P99", "MAX",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let table = Table::new(
        rows,
        [
            Constraint::Length(18),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(11),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(10),
        ],
    )
    .header(header);
    f.render_widget(table, inner);
}

/// The stacks panel: per stack, a heading (time, share of the class's stacks in view,
/// count, threads), the kernel frames on one line (leaf first), then the user frames,
/// innermost first, as many as fit.
fn draw_stacks(f: &mut Frame<'_>, app: &mut App, area: Rect) {
    use crate::report::stacks::{count_unit, frame_line, threads_text};
    let whose = match app.selected_row() {
        Some(r) => match r.tid {
            Some(tid) => format!("thread {tid} {}", clean(&r.comm)),
            None => format!("pid {} {}", r.pid, clean(&r.comm)),
        },
        None => "all processes".to_string(),
    };
    let window = app.window.label();
    let panel = app.stack_panel(PANEL_STACKS);
    let class_name = panel
        .as_ref()
        .and_then(|p| p.class)
        .map_or("-", |c| c.name());
    let title = format!(" stacks · {whose} · {class_name} · {window} ");
    let block = Block::default().borders(Borders::TOP).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let dim = Style::new().fg(Color::DarkGray);
    let Some(panel) = panel else {
        let msg = if app.info.replay_of.is_some() {
            "stacks arrive with the last frame (a session writes them when it ends)"
        } else {
            "no stacks yet"
        };
        f.render_widget(
            Paragraph::new(msg).wrap(Wrap { trim: true }).style(dim),
            inner,
        );
        return;
    };
    let Some(class) = panel.class else {
        f.render_widget(
            Paragraph::new("no time measured for this row in the window").style(dim),
            inner,
        );
        return;
    };
    if panel.stacks.is_empty() {
        f.render_widget(
            Paragraph::new(format!(
                "no {} stack captured in this window (off-CPU periods shorter than --min-block-us get none)",
                class.name()
            ))
            .wrap(Wrap { trim: true })
            .style(dim),
            inner,
        );
        return;
    }
    let height = inner.height as usize;
    // Each stack shown gets its heading and at least one frame line; the heavier ones
    // get the lines left over first.
    let shown = panel.stacks.len().min((height / 2).max(1));
    let mut remaining = height;
    let mut lines: Vec<Line> = Vec::new();
    for (i, s) in panel.stacks.iter().take(shown).enumerate() {
        let room = remaining.saturating_sub(1 + 2 * (shown - i - 1)).max(1);
        lines.push(Line::from(vec![
            Span::styled(
                format!("#{} {}", i + 1, fmt_ns(s.total_ns as f64)),
                Style::new()
                    .fg(class_color(class))
                    .add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(
                " {} of stacks · {} {} · {}",
                crate::report::fmt_share(s.share_of_stacks),
                s.count,
                count_unit(class),
                threads_text(&s.threads)
            )),
        ]));
        let mut body: Vec<Line> = Vec::new();
        let kernel: Vec<String> = (s.frames.iter().rev())
            .filter(|fr| fr.kernel)
            .map(|fr| clean(&fr.name))
            .collect();
        if !kernel.is_empty() {
            body.push(Line::styled(format!("  [k] {}", kernel.join(" ← ")), dim));
        }
        for fr in s.frames.iter().rev().filter(|fr| !fr.kernel) {
            body.push(Line::raw(format!("  {}", frame_line(fr))));
        }
        if s.frames.is_empty() {
            body.push(Line::styled("  [unknown] (no stack captured)", dim));
        }
        let taken = body.len().min(room);
        lines.extend(body.into_iter().take(taken));
        remaining = remaining.saturating_sub(1 + taken);
    }
    f.render_widget(Paragraph::new(lines), inner);
}

fn status_line(app: &App) -> Line<'static> {
    let lost = match app.data().and_then(|d| d.events_lost) {
        Some(n) => format!("events lost {n}"),
        None => "events lost n/a (/proc)".to_string(),
    };
    let hooks = if app.info.hooks.is_empty() {
        format!("backend {}", app.info.backend)
    } else {
        format!(
            "backend {} · {} hooks",
            app.info.backend,
            app.info.hooks.len()
        )
    };
    let overhead = match app.overhead_percent {
        Some(p) => format!("kernelkite CPU {p:.1}%"),
        None => "kernelkite CPU -".to_string(),
    };
    let mut spans = Vec::new();
    if app.paused {
        spans.push(Span::styled(
            "PAUSED · ",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    let lost_any = app
        .data()
        .and_then(|d| d.events_lost)
        .is_some_and(|n| n > 0);
    let lost_style = if lost_any {
        Style::new().fg(Color::Red)
    } else {
        Style::new()
    };
    spans.push(Span::styled(lost, lost_style));
    spans.push(Span::raw(format!(" · {hooks} · {overhead}")));
    // What the hypervisor took from the whole machine over the window (/proc/stat).
    if let Some(d) = app.data() {
        if let (Some(ns), true) = (d.analysis.host_steal_ns, d.window_ns > 0) {
            let cpus = app.info.host.num_cpus.max(1) as f64;
            let share = ns as f64 / (d.window_ns as f64 * cpus);
            spans.push(Span::raw(format!(
                " · host steal {:.1}% (host-wide)",
                share * 100.0
            )));
        }
    }
    if app.editing_filter || !app.filter.is_empty() {
        let cursor = if app.editing_filter { "▏" } else { "" };
        spans.push(Span::styled(
            format!(" · filter: {}{cursor}", clean(&app.filter)),
            Style::new().fg(Color::Cyan),
        ));
    }
    if let Some(why) = &app.ended {
        spans.push(Span::styled(
            format!(" · {why}"),
            Style::new().fg(Color::Yellow),
        ));
    }
    Line::from(spans)
}

fn keys_line(app: &App) -> String {
    if app.editing_filter {
        return "type a name or pid · Enter keep · Esc clear".to_string();
    }
    let mut keys =
        "q quit · ? help · w window · s < > sort · r reverse · / filter · g group · p pause · ↵ → ← threads"
            .to_string();
    if app.info.replay_of.is_some() {
        keys.push_str(" · + - speed");
    }
    keys
}

/// The help overlay's text; `hooks` are the attached eBPF hooks (empty for /proc).
pub fn help_lines(hooks: &[String]) -> Vec<String> {
    let mut lines = vec![
        "kernelkite top: where time goes, live".to_string(),
        String::new(),
        "q, Ctrl-C    quit".to_string(),
        "w            window: last 1 s, last 10 s, since start".to_string(),
        "s, <, >      sort column: next, left, right".to_string(),
        "r            reverse the sort order".to_string(),
        "g            group by container, systemd unit or cgroup (and back)".to_string(),
        "/            filter by name or pid (Enter keeps, Esc clears)".to_string(),
        "p, space     pause / resume".to_string(),
        "↑ ↓ j k      select a row (the syscall and stacks panels follow it)".to_string(),
        "Enter, → ←   expand / collapse a process's threads".to_string(),
        "+ -          replay speed".to_string(),
        "Esc          clear filter and selection".to_string(),
        String::new(),
        "Classes (the bar splits each row's wall time):".to_string(),
    ];
    for class in LatencyClass::ALL {
        lines.push(format!("  {:<16} {}", class.name(), class.rule()));
    }
    if !hooks.is_empty() {
        lines.push(String::new());
        lines.push(format!("eBPF hooks: {}", hooks.join(", ")));
    }
    lines.push(String::new());
    lines.push("any key closes this help".to_string());
    lines
}

fn draw_help(f: &mut Frame<'_>, area: Rect, hooks: &[String]) {
    let lines = help_lines(hooks);
    let width = area.width.saturating_sub(4).min(110);
    // Lines wider than the box wrap: count the rows they take.
    let inner = width.saturating_sub(2).max(1) as usize;
    let rows: usize = lines
        .iter()
        .map(|l| l.chars().count().div_ceil(inner).max(1))
        .sum();
    let height = (rows as u16).saturating_add(2).min(area.height);
    let rect = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    f.render_widget(Clear, rect);
    let text: Vec<Line> = lines.into_iter().map(Line::from).collect();
    f.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL).title(" help ")),
        rect,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ClassTimes;

    #[test]
    fn bar_cells_fill_the_bar_in_proportion() {
        let c = ClassTimes {
            on_cpu: 1,
            lock_wait: 2,
            unknown_wait: 1,
            ..ClassTimes::default()
        };
        assert_eq!(bar_cells(&c, 8), [2, 0, 0, 4, 0, 2, 0]);
        assert_eq!(bar_cells(&c, 7).iter().sum::<u16>(), 7);
        assert_eq!(bar_cells(&ClassTimes::default(), 7), [0; 7]);
        let huge = ClassTimes {
            on_cpu: u64::MAX,
            runqueue: u64::MAX,
            ..ClassTimes::default()
        };
        assert_eq!(bar_cells(&huge, 3).iter().sum::<u16>(), 3);
    }
}
