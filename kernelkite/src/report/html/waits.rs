//! The waits part of the HTML report, for bundles with waker data: the wait-for graph
//! (who ended the sleeps of the busiest waiting threads, as an SVG of edges from wakers
//! to waiters, widths by time) and, for a `--critical-path` recording, the critical path
//! of the root process by thread. No script: tooltips are SVG `<title>`s.

use std::fmt::Write as _;

use super::esc;
use crate::analysis::critical_path::critical_path;
use crate::analysis::waits::{thread_waits, waker_label, ThreadWaits, WokenBy};
use crate::analysis::Analysis;
use crate::format::fmt_ns_compact;
use crate::model::Bundle;

/// Styles of the sections, added to the page's only for bundles with waker data (so
/// other pages are unchanged).
pub const CSS: &str = include_str!("waits.css");

/// Waiting threads drawn, and wakers per waiting thread.
const MAX_WAITERS: usize = 8;
const MAX_WAKERS_EACH: usize = 3;
/// Threads of the critical path listed.
const MAX_PATH_THREADS: usize = 12;

/// A waker in words, short enough for a node label.
fn waiter_label(t: &ThreadWaits) -> String {
    let comm = if t.comm.is_empty() { "?" } else { &t.comm };
    format!("{comm} ({})", t.tid)
}

/// Both sections; nothing for a bundle without waker data.
pub fn waits_sections(h: &mut String, bundle: &Bundle, a: &Analysis) {
    if let Some(threads) = thread_waits(bundle, a) {
        wait_for_graph(h, &threads);
    }
    critical_path_section(h, bundle, a);
}

/// Edges (waker label, waiter index, class, ns, count) of the busiest non-idle waiters.
fn edges(threads: &[ThreadWaits]) -> (Vec<&ThreadWaits>, Vec<(String, usize, &WokenBy)>) {
    let mut waiters: Vec<&ThreadWaits> = threads
        .iter()
        .filter(|t| !t.idle && !t.woken_by.is_empty())
        .collect();
    waiters.sort_by(|p, q| q.sleep_ns.cmp(&p.sleep_ns).then(p.tid.cmp(&q.tid)));
    waiters.truncate(MAX_WAITERS);
    let mut out = Vec::new();
    for (i, t) in waiters.iter().enumerate() {
        for w in t.woken_by.iter().take(MAX_WAKERS_EACH) {
            out.push((waker_label(w), i, w));
        }
    }
    (waiters, out)
}

fn wait_for_graph(h: &mut String, threads: &[ThreadWaits]) {
    let (waiters, edges) = edges(threads);
    if edges.is_empty() {
        return;
    }
    let idle = threads.iter().filter(|t| t.idle).count();
    h.push_str("<section id=\"waits\">\n<h2>Who made them wait: the wait-for graph</h2>\n");
    let _ = writeln!(
        h,
        "<p class=\"hint\">What ended the sleeps of the {} (left: the waker, right: the waiting thread; a line's width is the sleep time it ended; orange: lock_wait, blue: io_wait, grey: the other sleep classes){}. <code>kernelkite waits</code> lists every thread.</p>",
        match waiters.len() {
            1 => "thread that waited".to_string(),
            n => format!("{n} threads that waited longest"),
        },
        match idle {
            0 => String::new(),
            1 => "; 1 idle thread, asleep through the session or never woken, is left out".to_string(),
            n => format!("; {n} idle threads, asleep through the session or never woken, are left out"),
        }
    );
    // Left column: distinct wakers in order of first use; right: the waiters.
    let mut wakers: Vec<String> = Vec::new();
    for (label, _, _) in &edges {
        if !wakers.contains(label) {
            wakers.push(label.clone());
        }
    }
    let row_h = 28.0;
    let rows = wakers.len().max(waiters.len()) as f64;
    let height = 20.0 + rows * row_h;
    let (width, left_x, right_x) = (900.0, 260.0, 640.0);
    let y_of = |i: usize| 24.0 + i as f64 * row_h;
    let max_ns = edges.iter().map(|e| e.2.ns).max().unwrap_or(1).max(1) as f64;
    let _ = writeln!(
        h,
        "<svg class=\"waitfor\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"wait-for graph\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    for (label, waiter, w) in &edges {
        let from = wakers.iter().position(|l| l == label).unwrap_or(0);
        let stroke = 1.0 + 9.0 * (w.ns as f64 / max_ns);
        let _ = writeln!(
            h,
            "<path class=\"edge {class}\" d=\"M{lx} {ly} C{mx} {ly}, {mx} {ry}, {rx} {ry}\" stroke-width=\"{stroke:.1}\" fill=\"none\"><title>{waker} ended {count} {class} sleeps of {waiter}: {ns}</title></path>",
            class = esc(&w.class),
            lx = left_x + 4.0,
            ly = y_of(from),
            mx = (left_x + right_x) / 2.0,
            rx = right_x - 4.0,
            ry = y_of(*waiter),
            waker = esc(label),
            count = w.count,
            waiter = esc(&waiter_label(waiters[*waiter])),
            ns = esc(&fmt_ns_compact(w.ns)),
        );
    }
    for (i, label) in wakers.iter().enumerate() {
        let _ = writeln!(
            h,
            "<text class=\"waker\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            left_x - 6.0,
            y_of(i) + 4.0,
            esc(label)
        );
    }
    for (i, t) in waiters.iter().enumerate() {
        let _ = writeln!(
            h,
            "<text class=\"waiter\" x=\"{}\" y=\"{}\">{} · asleep {}</text>",
            right_x + 6.0,
            y_of(i) + 4.0,
            esc(&waiter_label(t)),
            esc(&fmt_ns_compact(t.sleep_ns))
        );
    }
    h.push_str("</svg>\n</section>\n");
}

fn critical_path_section(h: &mut String, bundle: &Bundle, a: &Analysis) {
    let Ok(path) = critical_path(bundle, a) else {
        return;
    };
    if path.wall_ns == 0 {
        return;
    }
    h.push_str(
        "<section id=\"critical-path\">\n<h2>What bounded the wall time: the critical path</h2>\n",
    );
    let _ = writeln!(
        h,
        "<p class=\"hint\">{} ({}) ran for {}; following its waits back through the wakeups, these threads were on the path (running, waiting for a CPU, or in a sleep the path could not follow){}. <code>kernelkite critical-path</code> lists the segments.</p>",
        esc(&path.root_comm),
        path.root_pid,
        esc(&fmt_ns_compact(path.wall_ns)),
        if path.wakeups_lost > 0 {
            format!("; {} wakeups were not recorded, so the path may skip a sleep", path.wakeups_lost)
        } else {
            String::new()
        }
    );
    h.push_str(
        "<table class=\"data\">\n<thead><tr><th>Thread</th><th>Process</th><th class=\"num\">PID</th>\
         <th class=\"num\">TID</th><th class=\"num\">On the path</th><th class=\"num\">Share</th></tr></thead>\n<tbody>\n",
    );
    for t in path.by_thread.iter().take(MAX_PATH_THREADS) {
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.1}%</td></tr>",
            esc(&t.comm),
            esc(&t.process_comm),
            t.pid,
            t.tid,
            esc(&fmt_ns_compact(t.ns)),
            t.ns as f64 / path.wall_ns as f64 * 100.0
        );
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

#[cfg(test)]
mod tests {
    use crate::analysis::analyze;
    use crate::analysis::critical_path::critical_path;
    use crate::analysis::waits::thread_waits;

    /// The committed `--critical-path` recording: the page gets a wait-for graph with one
    /// edge per drawn (waker, waiter, class) and the critical path's threads, and a
    /// bundle without waker data gets neither section.
    #[test]
    fn a_recording_with_wakers_gets_the_graph_and_the_path() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/run-ebpf-critical-path.bundle.json");
        let b = crate::model::load_bundle(&path).unwrap();
        let a = analyze(&b);
        let html = super::super::render(&b);
        let threads = thread_waits(&b, &a).expect("waker data");
        let (_, edges) = super::edges(&threads);
        assert!(!edges.is_empty());
        assert_eq!(html.matches("<path class=\"edge ").count(), edges.len());
        assert!(html.contains("<section id=\"waits\">"));
        let cp = critical_path(&b, &a).unwrap();
        assert!(html.contains("<section id=\"critical-path\">"));
        for t in cp.by_thread.iter().take(super::MAX_PATH_THREADS) {
            assert!(html.contains(&format!(
                "<td class=\"num\">{}</td><td class=\"num\">{}</td>",
                t.pid, t.tid
            )));
        }

        let plain = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/run-ebpf-cpu.bundle.json");
        let b = crate::model::load_bundle(&plain).unwrap();
        if b.wakers.is_none() {
            let html = super::super::render(&b);
            assert!(!html.contains("id=\"waits\"") && !html.contains("id=\"critical-path\""));
        }
    }
}
