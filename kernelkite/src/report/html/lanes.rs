//! The process lanes (each process's life and CPU over the session, in its tree's
//! order) and the slowest syscalls marked on them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::charts::*;
use super::*;

// ---------------------------------------------------------------------------------------
// Process lanes

pub(super) fn lanes_section(h: &mut String, bundle: &Bundle, a: &Analysis, tl: &Timeline) {
    h.push_str("<section id=\"lifetimes\">\n<h2>Process lifetimes</h2>\n");
    if tl.processes.is_empty() {
        h.push_str("<p class=\"hint\">No process was observed.</p>\n</section>\n");
        return;
    }
    let cpu_by_key: BTreeMap<(i32, u64), f64> = a
        .processes
        .iter()
        .filter_map(|r| Some(((r.pid, r.start_time_ticks), r.cpu_seconds?)))
        .collect();
    let cpu: Vec<f64> = tl
        .processes
        .iter()
        .map(|p| {
            p.start_time_ticks
                .and_then(|st| cpu_by_key.get(&(p.pid, st)).copied())
                .unwrap_or(0.0)
        })
        .collect();
    // Keep the lanes with most CPU (ties: longest, then earliest) when there are too many.
    let mut chosen: Vec<usize> = (0..tl.processes.len()).collect();
    if chosen.len() > MAX_LANES {
        chosen.sort_by(|&i, &j| {
            let (p, q) = (&tl.processes[i], &tl.processes[j]);
            cpu[j]
                .total_cmp(&cpu[i])
                .then((q.end_ns() - q.start_ns()).cmp(&(p.end_ns() - p.start_ns())))
                .then(i.cmp(&j))
        });
        chosen.truncate(MAX_LANES);
    }
    // Lanes in process-tree order: each process right below its parent.
    let (order, depth) = tree_order(a, tl);
    chosen.sort_by_key(|&i| order[i]);
    let max_cpu = chosen.iter().map(|&i| cpu[i]).fold(0.0f64, f64::max);
    // The slowest syscalls, drawn on their process's lane.
    let mut markers: BTreeMap<usize, Vec<&SlowSyscall>> = BTreeMap::new();
    for (s, span) in slowest(bundle, tl, MAX_MARKERS) {
        if let Some(i) = span {
            markers.entry(i).or_default().push(s);
        }
    }
    h.push_str(
        "<p class=\"hint\">One lane per process (pid and command), below its parent, from its \
         first to its last \
         sighting; a solid end cap marks an exact fork or exit time reported by the kernel, an \
         arrow a process still running at the end. Darker bars used more CPU; red marks are \
         single slow syscalls. Hover a bar for details.</p>\n",
    );
    let xs = XScale::new(tl);
    let (ticks, step) = xs.ticks();
    let lane_h = 18.0;
    let top = 6.0;
    let height = top + lane_h * chosen.len() as f64 + 26.0;
    let _ = writeln!(
        h,
        "<svg class=\"chart lanes\" viewBox=\"0 0 {SVG_W:.0} {height:.0}\" role=\"img\" \
         aria-label=\"Process lifetimes\">"
    );
    let _ = writeln!(
        h,
        "<rect class=\"plot\" x=\"{PLOT_L:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\"/>",
        SVG_W - PLOT_L - PLOT_R,
        lane_h * chosen.len() as f64
    );
    for &t in &ticks {
        let x = xs.x(t);
        let _ = writeln!(
            h,
            "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>",
            top + lane_h * chosen.len() as f64
        );
    }
    for (lane, &i) in chosen.iter().enumerate() {
        let p = &tl.processes[i];
        let y = top + lane as f64 * lane_h;
        if lane % 2 == 1 {
            let _ = writeln!(
                h,
                "<rect class=\"stripe\" x=\"0\" y=\"{y:.1}\" width=\"{SVG_W:.0}\" height=\"{lane_h:.1}\"/>"
            );
        }
        // Indented by tree depth (at most 6 levels shown), cut to the label column.
        let indent = depth[i].min(6);
        let label_x = 8.0 + indent as f64 * 9.0;
        let max_chars = ((PLOT_L - 8.0 - label_x) / 6.7).floor().max(4.0) as usize;
        let label = truncate_chars(&format!("{} {}", p.pid, p.comm), max_chars);
        let _ = writeln!(
            h,
            "<text class=\"lane-label\" x=\"{label_x:.1}\" y=\"{:.1}\">{}</text>",
            y + 13.0,
            esc(&label)
        );
        if indent > 0 {
            let _ = writeln!(
                h,
                "<path class=\"tree\" d=\"M{:.1},{:.1}v6h5\"/>",
                label_x - 7.0,
                y + 3.0
            );
        }
        let (x0, x1) = (xs.x(p.start_ns()), xs.x(p.end_ns()));
        let w = (x1 - x0).max(2.0);
        let cpu = cpu[i];
        let shade = if max_cpu > 0.0 { cpu / max_cpu } else { 0.0 };
        let fill = lane_color(shade);
        let mut tip = format!(
            "pid {} ({}), parent {}: {} to {}",
            p.pid,
            p.comm,
            p.ppid,
            fmt_ns_compact(p.start_ns()),
            fmt_ns_compact(p.end_ns())
        );
        if cpu > 0.0 {
            let _ = write!(tip, ", CPU {}", fmt_secs_compact(cpu));
        }
        if let Some(code) = p.exit_code {
            let _ = write!(tip, ", exit code {code}");
        }
        if p.alive_at_end {
            tip.push_str(", still running at the end");
        }
        let _ = write!(
            h,
            "<g><title>{}</title><rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"10\" \
             rx=\"2\" fill=\"{fill}\"/>",
            esc(&tip),
            y + 4.0
        );
        if p.fork_ns.is_some() {
            let _ = write!(
                h,
                "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"2\" height=\"14\" fill=\"#1a202c\"/>",
                y + 2.0
            );
        }
        if p.exit_ns.is_some() {
            let _ = write!(
                h,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"2\" height=\"14\" fill=\"#1a202c\"/>",
                x0 + w - 2.0,
                y + 2.0
            );
        } else if p.alive_at_end {
            let xe = x0 + w;
            let _ = write!(
                h,
                "<path d=\"M{xe:.1},{:.1}l6,5l-6,5Z\" fill=\"{fill}\"/>",
                y + 4.0
            );
        }
        h.push_str("</g>\n");
        for m in markers.get(&i).map(Vec::as_slice).unwrap_or(&[]) {
            let mx0 = xs.x(m.t_ns);
            let mx1 = xs.x(m.t_ns.saturating_add(m.duration_ns));
            let _ = writeln!(
                h,
                "<rect class=\"slow\" x=\"{mx0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"6\">\
                 <title>{}</title></rect>",
                y + 11.0,
                (mx1 - mx0).max(2.0),
                esc(&format!(
                    "slow {} in tid {}: {} at {}, returned {}",
                    m.name,
                    m.tid,
                    fmt_ns_compact(m.duration_ns),
                    fmt_ns_compact(m.t_ns),
                    m.ret
                ))
            );
        }
    }
    time_axis(
        h,
        &xs,
        &ticks,
        step,
        top + lane_h * chosen.len() as f64 + 4.0,
    );
    h.push_str("</svg>\n");
    if chosen.len() < tl.processes.len() {
        let _ = writeln!(
            h,
            "<p class=\"hint\">{} more processes with less CPU are not drawn.</p>",
            tl.processes.len() - chosen.len()
        );
    }
    h.push_str("</section>\n");
}

/// The `n` slowest recorded syscalls (longest first; ties: earliest, pid, tid), each with
/// the index of its process in `tl.processes` when one was alive then.
pub(super) fn slowest<'b>(
    bundle: &'b Bundle,
    tl: &Timeline,
    n: usize,
) -> Vec<(&'b SlowSyscall, Option<usize>)> {
    let mut all: Vec<&SlowSyscall> = bundle.slow_syscalls.iter().collect();
    all.sort_by(|a, b| {
        b.duration_ns
            .cmp(&a.duration_ns)
            .then(a.t_ns.cmp(&b.t_ns))
            .then(a.pid.cmp(&b.pid))
            .then(a.tid.cmp(&b.tid))
            .then(a.nr.cmp(&b.nr))
    });
    all.truncate(n);
    let mut by_pid: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, p) in tl.processes.iter().enumerate() {
        by_pid.entry(p.pid).or_default().push(i);
    }
    all.into_iter()
        .map(|s| {
            let candidates = by_pid.get(&s.pid).map(Vec::as_slice).unwrap_or(&[]);
            // The incarnation alive at the call, else the latest one started before it.
            let span = candidates
                .iter()
                .copied()
                .find(|&i| {
                    let p = &tl.processes[i];
                    p.start_ns() <= s.t_ns && s.t_ns <= p.end_ns()
                })
                .or_else(|| {
                    candidates
                        .iter()
                        .copied()
                        .filter(|&i| tl.processes[i].start_ns() <= s.t_ns)
                        .max_by_key(|&i| tl.processes[i].start_ns())
                });
            (s, span)
        })
        .collect()
}

pub(super) fn slow_syscalls_section(h: &mut String, bundle: &Bundle, tl: &Timeline) {
    if bundle.slow_syscalls.is_empty() {
        return;
    }
    let rows = slowest(bundle, tl, MAX_TABLE_ROWS);
    h.push_str("<section id=\"slow-syscalls\">\n<h2>Slowest single syscalls</h2>\n");
    let _ = writeln!(
        h,
        "<p class=\"hint\">Individual syscalls above the trace's latency threshold, as the \
         kernel streamed them (marked in red on the process lanes){}.</p>",
        if bundle.slow_syscalls.len() > rows.len() {
            format!(
                "; the {} longest of {}",
                rows.len(),
                bundle.slow_syscalls.len()
            )
        } else {
            String::new()
        }
    );
    h.push_str(
        "<table class=\"data\">\n<thead><tr><th class=\"num\">At</th><th>Syscall</th>\
         <th class=\"num\">Duration</th><th class=\"num\">PID</th><th class=\"num\">TID</th>\
         <th>Command</th><th class=\"num\">Returned</th></tr></thead>\n<tbody>\n",
    );
    for (s, span) in rows {
        let comm = span.map_or("", |i| tl.processes[i].comm.as_str());
        let _ = writeln!(
            h,
            "<tr><td class=\"num\">{}</td><td><code>{}</code></td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td><code>{}</code></td>\
             <td class=\"num\">{}</td></tr>",
            esc(&fmt_ns_compact(s.t_ns)),
            esc(&s.name),
            esc(&fmt_ns_compact(s.duration_ns)),
            s.pid,
            s.tid,
            esc(comm),
            s.ret
        );
    }
    h.push_str("</tbody>\n</table>\n</section>\n");
}

/// A position for every span of `tl.processes` in a depth-first walk of the analysis's
/// process tree (children in order of appearance), and each span's depth in that tree.
/// Spans the tree does not hold (lifecycle-only incarnations) keep their start order
/// after the tree, at depth 0.
pub(super) fn tree_order(a: &Analysis, tl: &Timeline) -> (Vec<usize>, Vec<usize>) {
    // (pid, start_time_ticks) → span; lifecycle-only spans are start time 0 in the rows.
    let mut by_key: BTreeMap<(i32, u64), Vec<usize>> = BTreeMap::new();
    for (i, p) in tl.processes.iter().enumerate() {
        by_key
            .entry((p.pid, p.start_time_ticks.unwrap_or(0)))
            .or_default()
            .push(i);
    }
    let n = tl.processes.len();
    let (mut order, mut depth) = (vec![usize::MAX; n], vec![0usize; n]);
    let mut next = 0;
    let mut stack: Vec<(&crate::analysis::TreeNode, usize)> =
        a.tree.iter().rev().map(|node| (node, 0)).collect();
    while let Some((node, d)) = stack.pop() {
        for &i in by_key
            .get(&(node.pid, node.start_time_ticks))
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            if order[i] == usize::MAX {
                order[i] = next;
                depth[i] = d;
                next += 1;
            }
        }
        stack.extend(node.children.iter().rev().map(|c| (c, d + 1)));
    }
    for o in order.iter_mut().filter(|o| **o == usize::MAX) {
        *o = next;
        next += 1;
    }
    (order, depth)
}

/// Light to dark blue by CPU share (0..=1), in four steps.
pub(super) fn lane_color(share: f64) -> &'static str {
    match share {
        s if s >= 0.66 => "#1e4e8c",
        s if s >= 0.33 => "#3474c4",
        s if s >= 0.05 => "#6b9fdc",
        _ => "#a9c6ec",
    }
}
