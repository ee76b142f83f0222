//! The stacks part of the HTML report: a table of each class's stack time and heaviest
//! stack, and inferno's flame graphs inline (made script-free by
//! [`super::flamegraph::inline_svg`]): one of every class, then one per class, folded
//! in `<details>` so the page stays short and works without a script.

use std::fmt::Write as _;

use kernelkite_common::LatencyClass;

use super::esc;
use crate::analysis::stacks::analyze_stacks;
use crate::analysis::Analysis;
use crate::format::fmt_ns_compact;
use crate::model::Bundle;
use crate::report::flamegraph::{flamegraph_svg, inline_svg, FlameGraphSpec};

/// Styles of the section, added to the page's only when the bundle has stacks (so pages
/// without stacks are unchanged).
pub const CSS: &str = include_str!("stacks.css");

fn pct(share: Option<f64>) -> String {
    share.map_or_else(|| "n/a".to_string(), |s| format!("{:.1}%", s * 100.0))
}

/// One flame graph as inline SVG, or a line saying why it could not be drawn.
fn graph(h: &mut String, bundle: &Bundle, class: Option<LatencyClass>) {
    let uid = format!("fg-{}", class.map_or("all", |c| c.name()));
    let spec = FlameGraphSpec {
        class,
        per_process: false,
    };
    match flamegraph_svg(bundle, &spec)
        .map_err(|e| e.to_string())
        .and_then(|svg| inline_svg(&svg, &uid).map_err(|e| e.to_string()))
    {
        Ok(svg) => {
            let _ = writeln!(h, "<figure class=\"flame\" id=\"{uid}\">{svg}</figure>");
        }
        Err(why) => {
            let _ = writeln!(
                h,
                "<p class=\"hint\">The flame graph could not be drawn: {}</p>",
                esc(&why)
            );
        }
    }
}

/// The `#stacks` section; nothing when the bundle has no stacks.
pub fn stacks_section(h: &mut String, bundle: &Bundle, a: &Analysis) {
    let Some(stacks) = analyze_stacks(bundle, a, None, 1) else {
        return;
    };
    h.push_str("<section id=\"stacks\">\n<h2>Where the time went: stacks</h2>\n");
    let _ = writeln!(
        h,
        "<p class=\"hint\">Stacks captured with <code>--stacks</code>: off-CPU intervals of at \
         least {} and on-CPU samples at {} Hz, {} capture(s) lost. A frame's width is its \
         time; hover a frame for its time in ns and its share of the graph. Off-CPU classes \
         are blue, on-CPU warm; in the graph of every class the root frames are the \
         classes, in the colours above.</p>",
        esc(&fmt_ns_compact(stacks.min_block_ns)),
        stacks.sample_hz,
        stacks.captures_lost
    );
    if stacks.stack_copies_lost > 0 {
        let _ = writeln!(
            h,
            "<p class=\"hint\">{} stack copies not sent (rate bound or ring buffer half \
             full): those stacks are frame-pointer walks, which end early (marked \
             [truncated]) in code built without frame pointers.</p>",
            stacks.stack_copies_lost
        );
    }
    if !a.skipped_files.is_empty() {
        h.push_str(
            "<p class=\"hint\">Files the traced processes control that were not read for \
             symbols (their frames keep module+offset or the address):</p>\n<ul class=\"skipped\">\n",
        );
        for f in &a.skipped_files {
            let _ = writeln!(
                h,
                "<li><code>{}</code>: {} ({}&times;)</li>",
                esc(&f.path),
                esc(&f.reason),
                f.count
            );
        }
        h.push_str("</ul>\n");
    }
    h.push_str(
        "<table class=\"data\">\n<thead><tr><th>Class</th><th class=\"num\">With stacks</th>\
         <th class=\"num\">Of the class</th><th>Heaviest stack (leaf ← caller)</th>\
         <th class=\"num\">Its share</th></tr></thead>\n<tbody>\n",
    );
    for c in &stacks.classes {
        let (heaviest, share) = match c.top.first() {
            Some(s) => {
                // The user leaf and its caller say more than the scheduler frames under them.
                let user: Vec<&str> = s
                    .frames
                    .iter()
                    .rev()
                    .filter(|f| !f.kernel)
                    .take(2)
                    .map(|f| f.name.as_str())
                    .collect();
                let names = if user.is_empty() {
                    s.frames
                        .iter()
                        .rev()
                        .take(2)
                        .map(|f| f.name.as_str())
                        .collect()
                } else {
                    user
                };
                (names.join(" ← "), pct(s.share_of_class))
            }
            None => (
                crate::report::stacks::why_no_stacks(&stacks, c).unwrap_or_default(),
                String::new(),
            ),
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\" title=\"{} ns\">{}</td><td class=\"num\">{}</td>\
             <td><code>{}</code></td><td class=\"num\">{}</td></tr>",
            esc(c.class.name()),
            c.stack_ns,
            esc(&fmt_ns_compact(c.stack_ns)),
            esc(&pct(c.share_of_class())),
            esc(&heaviest),
            esc(&share)
        );
    }
    h.push_str("</tbody>\n</table>\n");
    if stacks.classes.iter().all(|c| c.distinct_stacks == 0) {
        h.push_str("<p class=\"hint\">No stack was captured.</p>\n</section>\n");
        return;
    }
    graph(h, bundle, None);
    for c in stacks.classes.iter().filter(|c| c.distinct_stacks > 0) {
        let _ = writeln!(
            h,
            "<details class=\"flame\"><summary>{}: {} with stacks</summary>",
            esc(c.class.name()),
            esc(&fmt_ns_compact(c.stack_ns))
        );
        graph(h, bundle, Some(c.class));
        h.push_str("</details>\n");
    }
    h.push_str("</section>\n");
}
