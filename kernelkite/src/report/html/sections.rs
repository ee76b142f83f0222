//! The sections of the page that are text and tables: header, warnings, totals, the
//! latency classes, and the process, thread, syscall and network tables.

use std::fmt::Write as _;

use super::charts::SVG_W;
use super::*;

// ---------------------------------------------------------------------------------------
// Sections

pub(super) fn header(h: &mut String, bundle: &Bundle, a: &Analysis, title: &str) {
    h.push_str("<header>\n");
    let _ = writeln!(
        h,
        "<p class=\"brand\">kernelkite report</p>\n<h1>{}</h1>",
        esc(title)
    );
    h.push_str("<dl class=\"meta\">\n");
    let backend = match bundle.backend {
        Backend::Ebpf => "eBPF (kernel tracepoints)",
        Backend::Proc => "/proc sampling",
    };
    meta(h, "Backend", &esc(backend));
    meta(h, "Duration", &esc(&fmt_ns_compact(a.duration_ns)));
    let host = &bundle.host;
    let mut host_text = format!("{}, {} CPUs", host.arch, host.num_cpus);
    if let Some(k) = &host.kernel_release {
        let _ = write!(host_text, ", Linux {k}");
    }
    meta(h, "Host", &esc(&host_text));
    meta(
        h,
        "Sampling",
        &esc(&format!(
            "every {} ms, {} frames",
            bundle.interval_ms, a.frames
        )),
    );
    if let Some(l) = &bundle.launched {
        meta(
            h,
            "Command",
            &format!(
                "<code>{}</code>",
                esc(&crate::format::display_argv(&l.argv, 2000))
            ),
        );
        let status = match (l.exit_code, l.signal) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            (None, None) => "unknown".to_string(),
        };
        meta(h, "Status", &esc(&status));
    } else if !bundle.root_pids.is_empty() {
        let pids: Vec<String> = bundle.root_pids.iter().map(|p| p.to_string()).collect();
        meta(h, "Traced pids", &esc(&pids.join(", ")));
    }
    h.push_str("</dl>\n</header>\n");
}

pub(super) fn meta(h: &mut String, key: &str, value_html: &str) {
    let _ = writeln!(h, "<div><dt>{}</dt><dd>{value_html}</dd></div>", esc(key));
}

pub(super) fn warnings(h: &mut String, bundle: &Bundle, a: &Analysis) {
    let mut items: Vec<(&str, String)> = Vec::new();
    if a.frame_cap.frames_dropped > 0 {
        items.push((
            "warn",
            format!(
                "Frame cap hit: the session stopped recording new frames at {} and dropped {} \
                 (the last frame kept being refreshed, so totals stay exact; the timeline's last \
                 interval spans the dropped frames).",
                a.frame_cap.max_frames, a.frame_cap.frames_dropped
            ),
        ));
    }
    if let Some(lost) = a.events_lost.filter(|&n| n > 0) {
        let affects = crate::model::lost_affects(&a.events_lost_by_cause);
        // Bundles that do not say what was lost: everything they could affect.
        let affects = if affects.is_empty() {
            "lifecycle events, syscall histograms, slow-syscall records and stacks".to_string()
        } else {
            affects.join(", ")
        };
        items.push((
            "warn",
            format!(
                "{} kernel events were lost: {affects} may be incomplete.",
                crate::model::lost_text(lost, &a.events_lost_by_cause)
            ),
        ));
    }
    if !a.latency_classes_exact {
        items.push((
            "info",
            "Backend /proc: on_cpu and runqueue are exact (schedstat); io_wait, lock_wait, \
             syscall_blocked and unknown_wait are estimated from sampled thread states."
                .to_string(),
        ));
    }
    if a.processes_without_io > 0 {
        items.push((
            "info",
            format!(
                "{} processes had an unreadable /proc/<pid>/io: their disk I/O is not counted.",
                a.processes_without_io
            ),
        ));
    }
    if bundle.frames.len() < 2 {
        items.push((
            "info",
            "The bundle has a single frame: there are no intervals to chart rates over."
                .to_string(),
        ));
    }
    if items.is_empty() {
        return;
    }
    h.push_str("<section id=\"notes\" class=\"notes\">\n");
    for (kind, text) in items {
        let label = if kind == "warn" { "Warning" } else { "Note" };
        let _ = writeln!(
            h,
            "<p class=\"{kind}\"><strong>{label}:</strong> {}</p>",
            esc(&text)
        );
    }
    h.push_str("</section>\n");
}

pub(super) fn totals(h: &mut String, bundle: &Bundle, a: &Analysis) {
    h.push_str("<section id=\"totals\">\n<h2>Key totals</h2>\n<div class=\"cards\">\n");
    card(
        h,
        "Wall time",
        &fmt_ns_compact(a.duration_ns),
        crate::report::window_label(a),
    );
    let dur_s = a.duration_ns as f64 / 1e9;
    let mut cpu_sub = match a.cpu_source {
        CpuSource::Rusage => "exact (rusage of the reaped tree)".to_string(),
        CpuSource::Samples => "from per-process samples".to_string(),
        CpuSource::EbpfOnCpu => "exact (eBPF on_cpu time of every traced thread)".to_string(),
    };
    if dur_s > 0.0 {
        cpu_sub = format!("{:.2} cores on average; {cpu_sub}", a.cpu_seconds / dur_s);
    }
    card(h, "CPU time", &fmt_secs_compact(a.cpu_seconds), &cpu_sub);
    let single = match a.max_single_rss_source {
        RssSource::Rusage => "largest process (ru_maxrss)",
        RssSource::RusageUpperBound => "largest process (ru_maxrss, at most)",
        RssSource::Samples => "largest process sample",
    };
    card(
        h,
        "Peak memory (RSS)",
        &fmt_bytes_compact(a.peak_rss_bytes),
        &if a.peak_rss_is_largest_process() {
            format!("all processes: no frame's sum was larger than the {single}")
        } else {
            format!(
                "all processes, at {}; {single}: {}",
                fmt_ns_compact(a.peak_rss_t_ns),
                fmt_bytes_compact(a.max_single_rss_bytes)
            )
        },
    );
    card(
        h,
        "Disk read",
        &fmt_bytes_compact(a.read_bytes),
        "io.read_bytes: from storage",
    );
    card(
        h,
        "Disk written",
        &fmt_bytes_compact(a.write_bytes),
        "io.write_bytes: to storage",
    );
    card(
        h,
        "Processes",
        &a.distinct_pids.to_string(),
        &format!("{} threads observed", a.threads.len()),
    );
    if let Some(n) = &a.network {
        card(
            h,
            "Network received",
            &fmt_bytes_compact(n.rx_bytes),
            "host-wide, every interface but lo",
        );
        card(
            h,
            "Network sent",
            &fmt_bytes_compact(n.tx_bytes),
            "host-wide, every interface but lo",
        );
    }
    if bundle.backend == Backend::Ebpf || a.events_lost.is_some() {
        let lost = a.events_lost.unwrap_or(0);
        card(
            h,
            "Events lost",
            &lost.to_string(),
            if lost == 0 {
                "none: every kernel event was stored"
            } else {
                "see the warning above"
            },
        );
    }
    if let Some(r) = bundle.launched.as_ref().and_then(|l| l.rusage) {
        card(
            h,
            "Page faults",
            &fmt_count(r.major_faults),
            &format!(
                "major (needed I/O); {} minor — whole tree (rusage)",
                fmt_count(r.minor_faults)
            ),
        );
        card(
            h,
            "Context switches",
            &fmt_count(r.voluntary_switches.saturating_add(r.involuntary_switches)),
            &format!(
                "{} voluntary (blocked), {} involuntary (preempted) — rusage",
                fmt_count(r.voluntary_switches),
                fmt_count(r.involuntary_switches)
            ),
        );
    }
    h.push_str("</div>\n</section>\n");
}

pub(super) fn card(h: &mut String, label: &str, value: &str, sub: &str) {
    let _ = writeln!(
        h,
        "<div class=\"card\"><div class=\"label\">{}</div><div class=\"value\">{}</div>\
         <div class=\"sub\">{}</div></div>",
        esc(label),
        esc(value),
        esc(sub)
    );
}

// ---------------------------------------------------------------------------------------
// Latency classes

pub(super) fn class_color(c: LatencyClass) -> &'static str {
    match c {
        LatencyClass::OnCpu => "#2f855a",
        LatencyClass::Runqueue => "#d69e2e",
        LatencyClass::IoWait => "#2b6cb0",
        LatencyClass::LockWait => "#c53030",
        LatencyClass::SyscallBlocked => "#805ad5",
        LatencyClass::UnknownWait => "#718096",
        LatencyClass::Steal => "#319795",
    }
}

pub(super) fn classes_section(h: &mut String, a: &Analysis) {
    h.push_str("<section id=\"classes\">\n<h2>Where the time went: latency classes</h2>\n");
    let total = a.latency_classes.total_ns();
    if a.latency_classes_exact {
        h.push_str(&format!(
            "<p class=\"hint\">Wall time of every observed thread, split into {} classes \
             measured exactly by the kernel (eBPF).</p>\n",
            crate::format::classes_word()
        ));
    } else {
        h.push_str(&format!(
            "<p class=\"hint\">Wall time of every observed thread, split into {} classes. \
             Hatched classes are <em>estimated</em> from sampled thread states; on_cpu and \
             runqueue are exact (schedstat).</p>\n",
            crate::format::classes_word()
        ));
    }
    if total == 0 {
        h.push_str("<p class=\"hint\">No thread time was observed.</p>\n</section>\n");
        return;
    }
    let bar_h = 40.0;
    let _ = writeln!(
        h,
        "<svg class=\"chart classbar\" viewBox=\"0 0 {SVG_W:.0} {bar_h:.0}\" role=\"img\" \
         aria-label=\"Latency class breakdown\">\n<defs><pattern id=\"kk-hatch\" \
         patternUnits=\"userSpaceOnUse\" width=\"8\" height=\"8\" \
         patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"8\" fill=\"#ffffff\" \
         fill-opacity=\"0.45\"/></pattern></defs>"
    );
    let mut x = 0.0;
    let mut acc = 0u64;
    for c in LatencyClass::ALL {
        let ns = a.latency_classes.get(c);
        if ns == 0 {
            continue;
        }
        // Cumulative rounding, so the segments tile the bar exactly.
        acc += ns;
        let x_end = acc as f64 / total as f64 * SVG_W;
        let w = x_end - x;
        let share = a.class_share(c);
        let tip = format!(
            "{}: {} ({}){}",
            c.name(),
            fmt_ns_compact(ns),
            fmt_share(share),
            if a.class_is_exact(c) {
                ""
            } else {
                ", estimated"
            }
        );
        let _ = write!(
            h,
            "<g><title>{}</title><rect x=\"{x:.1}\" y=\"0\" width=\"{w:.1}\" height=\"{bar_h:.0}\" fill=\"{}\"/>",
            esc(&tip),
            class_color(c)
        );
        if !a.class_is_exact(c) {
            let _ = write!(
                h,
                "<rect x=\"{x:.1}\" y=\"0\" width=\"{w:.1}\" height=\"{bar_h:.0}\" fill=\"url(#kk-hatch)\"/>"
            );
        }
        let label = format!("{} {}", c.name(), fmt_share(share));
        if w >= 7.2 * label.len() as f64 + 12.0 {
            let _ = write!(
                h,
                "<text class=\"seg\" x=\"{:.1}\" y=\"25\" text-anchor=\"middle\">{}</text>",
                x + w / 2.0,
                esc(&label)
            );
        }
        h.push_str("</g>\n");
        x = x_end;
    }
    h.push_str("</svg>\n");

    h.push_str(
        "<table class=\"data\">\n<thead><tr><th>Class</th><th class=\"num\">Time</th>\
         <th class=\"num\">Share</th><th>Measured</th><th>Rule</th></tr></thead>\n<tbody>\n",
    );
    for c in LatencyClass::ALL {
        let ns = a.latency_classes.get(c);
        let measured = if c == LatencyClass::Steal && !a.steal_measured() {
            "<span class=\"badge est\">not measured</span>"
        } else if a.class_is_exact(c) {
            "<span class=\"badge exact\">exact</span>"
        } else {
            "<span class=\"badge est\">estimated</span>"
        };
        let _ = writeln!(
            h,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>\
             <td class=\"num\" title=\"{ns} ns\">{}</td><td class=\"num\">{}</td><td>{measured}</td>\
             <td class=\"rule\">{}</td></tr>",
            class_color(c),
            esc(c.name()),
            esc(&fmt_ns_compact(ns)),
            esc(&fmt_share(a.class_share(c))),
            esc(c.rule())
        );
    }
    let _ = writeln!(
        h,
        "</tbody>\n<tfoot><tr><td>total</td><td class=\"num\">{}</td><td class=\"num\">100.0%</td>\
         <td></td><td class=\"rule\">off-CPU: {}</td></tr></tfoot>\n</table>\n</section>",
        esc(&fmt_ns_compact(total)),
        esc(&fmt_ns_compact(a.latency_classes.off_cpu_ns()))
    );
}

// ---------------------------------------------------------------------------------------
// Tables

pub(super) fn processes_section(h: &mut String, a: &Analysis) {
    if a.processes.is_empty() {
        return;
    }
    let mut rows: Vec<&crate::analysis::ProcessRow> = a.processes.iter().collect();
    rows.sort_by(|p, q| {
        q.cpu_seconds
            .unwrap_or(0.0)
            .total_cmp(&p.cpu_seconds.unwrap_or(0.0))
            .then(q.peak_rss_bytes.cmp(&p.peak_rss_bytes))
            .then(p.first_seen_ns.cmp(&q.first_seen_ns))
            .then(p.pid.cmp(&q.pid))
    });
    h.push_str("<section id=\"processes\">\n<h2>Processes by CPU time</h2>\n");
    let exit_accounting = a.processes_exact_at_exit > 0;
    if exit_accounting {
        let _ = writeln!(
            h,
            "<p class=\"hint\">CPU per process: exact for {} of {} processes (exit accounting: \
             each read as it exited); the others are marked sampled.</p>",
            a.processes_exact_at_exit,
            a.processes.len()
        );
    }
    if let Some(c) = &a.cgroup {
        let ns = |v: Option<u64>| v.map_or("n/a".to_string(), fmt_ns_compact);
        let throttled = match (c.cpu_periods, c.cpu_throttled_periods) {
            (Some(periods), Some(n)) => format!(
                "; throttled {} in {n} of {periods} cpu.max periods",
                ns(c.cpu_throttled_ns)
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            h,
            "<p class=\"hint\">Traced cgroup <code>{}</code>{}; pressure stall (some/full): \
             cpu {}/{}, io {}/{}, memory {}/{}.</p>",
            esc(&c.path),
            esc(&throttled),
            ns(c.cpu_some_ns),
            ns(c.cpu_full_ns),
            ns(c.io_some_ns),
            ns(c.io_full_ns),
            ns(c.memory_some_ns),
            ns(c.memory_full_ns)
        );
    }
    if rows.len() > MAX_TABLE_ROWS {
        let _ = writeln!(
            h,
            "<p class=\"hint\">The {MAX_TABLE_ROWS} busiest of {} processes.</p>",
            rows.len()
        );
    }
    // Processes in several containers, units or cgroups: which.
    let groups = a.shows_groups();
    h.push_str(
        "<table class=\"data\">\n<thead><tr><th class=\"num\">PID</th><th>Command</th>\
         <th class=\"num\">Parent</th><th class=\"num\">CPU</th><th class=\"num\">Peak RSS</th>\
         <th class=\"num\">Read</th><th class=\"num\">Written</th><th class=\"num\">Threads</th>",
    );
    if groups {
        h.push_str("<th>Group</th>");
    }
    h.push_str("<th>Time split</th></tr></thead>\n<tbody>\n");
    for p in rows.iter().take(MAX_TABLE_ROWS) {
        let io = |b: u64| {
            if p.io_visible {
                fmt_bytes_compact(b)
            } else {
                "n/a".to_string()
            }
        };
        let place = p.placement.clone().unwrap_or_default();
        let group = if groups {
            format!(
                "<td>{}</td>",
                esc(&place.group_name().unwrap_or_else(|| "-".into()))
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"num\">{}</td><td><code>{}</code></td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td>{group}<td>{}</td></tr>",
            match place.ns_pid {
                Some(ns) => format!("{} (ns {ns})", p.pid),
                None => p.pid.to_string(),
            },
            esc(&p.comm),
            p.ppid,
            esc(&format!(
                "{}{}",
                crate::format::or_na(p.cpu_seconds, fmt_secs_compact),
                if exit_accounting && !p.exact_at_exit {
                    " (sampled)"
                } else {
                    ""
                }
            )),
            esc(&crate::format::or_na(p.peak_rss_bytes, fmt_bytes_compact)),
            esc(&io(p.read_bytes)),
            esc(&io(p.write_bytes)),
            p.threads,
            mini_class_bar(&p.classes, a)
        );
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

/// Threads, when some process has more than one: where each thread's time went.
pub(super) fn threads_section(h: &mut String, a: &Analysis) {
    if !a.processes.iter().any(|p| p.threads > 1) {
        return;
    }
    let mut rows: Vec<&crate::analysis::ThreadRow> = a.threads.iter().collect();
    rows.sort_by(|p, q| {
        q.wall_ns
            .cmp(&p.wall_ns)
            .then(p.pid.cmp(&q.pid))
            .then(p.process_start_time_ticks.cmp(&q.process_start_time_ticks))
            .then(p.tid.cmp(&q.tid))
    });
    h.push_str("<section id=\"threads\">\n<h2>Threads</h2>\n");
    let _ = writeln!(
        h,
        "<p class=\"hint\">Each thread's wall time inside the session and its latency classes{}.</p>",
        if rows.len() > MAX_TABLE_ROWS {
            format!("; the {MAX_TABLE_ROWS} longest of {} threads", rows.len())
        } else {
            String::new()
        }
    );
    h.push_str(
        "<table class=\"data\">\n<thead><tr><th class=\"num\">PID</th><th class=\"num\">TID</th>\
         <th>Thread</th><th class=\"num\">Wall</th><th class=\"num\">On CPU</th>\
         <th class=\"num\">Off CPU</th><th>Time split</th></tr></thead>\n<tbody>\n",
    );
    for t in rows.iter().take(MAX_TABLE_ROWS) {
        let _ = writeln!(
            h,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td><code>{}</code></td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td>{}</td></tr>",
            t.pid,
            t.tid,
            esc(&t.comm),
            esc(&fmt_ns_compact(t.wall_ns)),
            esc(&fmt_ns_compact(t.classes.on_cpu)),
            esc(&fmt_ns_compact(t.classes.off_cpu_ns())),
            mini_class_bar(&t.classes, a)
        );
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

/// A small stacked bar of one process's latency classes, with the numbers as a tooltip.
pub(super) fn mini_class_bar(classes: &ClassTimes, a: &Analysis) -> String {
    let total = classes.total_ns();
    if total == 0 {
        return "<span class=\"hint\">no thread time</span>".to_string();
    }
    const W: f64 = 140.0;
    let mut tip = String::new();
    let mut bars = String::new();
    let (mut acc, mut x) = (0u64, 0.0);
    for c in LatencyClass::ALL {
        let ns = classes.get(c);
        if ns == 0 {
            continue;
        }
        acc += ns;
        let x_end = acc as f64 / total as f64 * W;
        let _ = write!(
            bars,
            "<rect x=\"{x:.1}\" y=\"0\" width=\"{:.1}\" height=\"12\" fill=\"{}\"/>",
            x_end - x,
            class_color(c)
        );
        if !tip.is_empty() {
            tip.push_str(", ");
        }
        let _ = write!(
            tip,
            "{} {} ({}{})",
            c.name(),
            fmt_ns_compact(ns),
            fmt_share(ns as f64 / total as f64),
            if a.class_is_exact(c) {
                ""
            } else {
                ", estimated"
            }
        );
        x = x_end;
    }
    format!(
        "<svg class=\"mini\" viewBox=\"0 0 {W:.0} 12\" width=\"{W:.0}\" height=\"12\" \
         role=\"img\" aria-label=\"{0}\"><title>{0}</title>{bars}</svg>",
        esc(&tip)
    )
}

pub(super) fn syscalls_section(h: &mut String, a: &Analysis) {
    if a.syscalls.is_empty() {
        return;
    }
    h.push_str("<section id=\"syscalls\">\n<h2>Syscalls by total time</h2>\n");
    let _ = writeln!(
        h,
        "<p class=\"hint\">Percentiles are histogram bucket midpoints (within ±{:.2}%); the \
         maximum is exact.{}</p>",
        a.histogram_relative_error * 100.0,
        if a.syscalls.len() > MAX_TABLE_ROWS {
            format!(
                " The {MAX_TABLE_ROWS} slowest of {} syscalls.",
                a.syscalls.len()
            )
        } else {
            String::new()
        }
    );
    h.push_str(
        "<table class=\"data\">\n<thead><tr><th>Syscall</th><th class=\"num\">Calls</th>\
         <th class=\"num\">Total</th><th class=\"num\">p50</th><th class=\"num\">p95</th>\
         <th class=\"num\">p99</th><th class=\"num\">Max</th><th class=\"num\">Processes</th>\
         </tr></thead>\n<tbody>\n",
    );
    for s in a.syscalls.iter().take(MAX_TABLE_ROWS) {
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&s.label()),
            s.count,
            esc(&fmt_ns_compact(s.total_ns)),
            esc(&fmt_ns_compact(s.p50_ns)),
            esc(&fmt_ns_compact(s.p95_ns)),
            esc(&fmt_ns_compact(s.p99_ns)),
            esc(&fmt_ns_compact(s.max_ns)),
            s.processes
        );
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

pub(super) fn network_section(h: &mut String, a: &Analysis) {
    let Some(n) = &a.network else {
        return;
    };
    h.push_str("<section id=\"network\">\n<h2>Network (host-wide)</h2>\n");
    h.push_str(
        "<p class=\"hint\">/proc/net/dev counters of the whole host over the session: they \
         include traffic of every process, not only the profiled tree.</p>\n",
    );
    h.push_str(
        "<table class=\"data\">\n<thead><tr><th>Interface</th><th class=\"num\">Received</th>\
         <th class=\"num\">Packets in</th><th class=\"num\">Sent</th>\
         <th class=\"num\">Packets out</th></tr></thead>\n<tbody>\n",
    );
    for i in &n.interfaces {
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&i.interface),
            esc(&fmt_bytes_compact(i.rx_bytes)),
            i.rx_packets,
            esc(&fmt_bytes_compact(i.tx_bytes)),
            i.tx_packets
        );
    }
    let _ = writeln!(
        h,
        "</tbody>\n<tfoot><tr><td>total (without lo)</td><td class=\"num\">{}</td><td></td>\
         <td class=\"num\">{}</td><td></td></tr></tfoot>\n</table>\n</section>",
        esc(&fmt_bytes_compact(n.rx_bytes)),
        esc(&fmt_bytes_compact(n.tx_bytes))
    );
}
