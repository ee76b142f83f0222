//! `kernelkite stacks`: the heaviest stacks per latency class, as text and as the
//! versioned `--json` document (docs/JSON.md), and the short form `trace` prints.

use kernelkite_common::LatencyClass;
use serde_json::{json, Value};

use super::{clean, fmt_ns, fmt_share};
use crate::analysis::stacks::{dominant_busy_stacks, dominant_stack_class, top_stacks};
use crate::analysis::stacks::{
    ClassStacks, FrameView, HeavyStack, SlowCallStack, StacksAnalysis, ThreadRef, TimeParts,
};
use crate::analysis::Analysis;
use crate::model::Bundle;

/// The `stacks --json` document's `schema_version`.
pub const STACKS_SCHEMA_VERSION: u32 = 1;
/// At most this many threads are named after a stack in the text; the rest are counted.
const MAX_THREADS_SHOWN: usize = 4;

/// What a class's count counts.
pub fn count_unit(class: LatencyClass) -> &'static str {
    if class.is_off_cpu() {
        "intervals"
    } else {
        "samples"
    }
}

/// `or "n/a"` for a share of a class that had no time.
fn opt_share(share: Option<f64>) -> String {
    share.map_or_else(|| "n/a".to_string(), fmt_share)
}

/// A frame on one line: its name, then where it is (`file:line`, else the module);
/// kernel frames are marked `[k]`.
pub fn frame_line(f: &FrameView) -> String {
    let name = clean(&f.name);
    let place = match (&f.file, f.line, &f.module) {
        (Some(file), Some(line), _) => format!("  {}:{line}", clean(file)),
        (Some(file), None, _) => format!("  {}", clean(file)),
        (None, _, Some(m)) if !f.kernel && !f.name.starts_with(m.as_str()) => {
            format!("  ({})", clean(m))
        }
        _ => String::new(),
    };
    if f.kernel {
        format!("{name} [k]{place}")
    } else {
        format!("{name}{place}")
    }
}

/// The threads of a stack, the first few by pid/tid and name, the rest counted.
pub fn threads_text(threads: &[ThreadRef]) -> String {
    let mut shown: Vec<String> = threads
        .iter()
        .take(MAX_THREADS_SHOWN)
        .map(|t| {
            if t.comm.is_empty() {
                format!("{}/{}", t.pid, t.tid)
            } else {
                format!("{}/{} {}", t.pid, t.tid, clean(&t.comm))
            }
        })
        .collect();
    if threads.len() > MAX_THREADS_SHOWN {
        shown.push(format!("+{} more", threads.len() - MAX_THREADS_SHOWN));
    }
    shown.join(", ")
}

/// One ranked stack: a heading line, then its frames innermost first (kernel frames,
/// `--`, user frames, as perf and offcputime print them), indented.
fn stack_block(out: &mut String, rank: usize, class: LatencyClass, s: &HeavyStack) {
    out.push_str(&format!(
        "  #{rank}  {}  {} of stacks  {} of {}  {} {}  threads {}\n",
        fmt_ns(s.total_ns as f64),
        fmt_share(s.share_of_stacks),
        opt_share(s.share_of_class),
        class.name(),
        s.count,
        count_unit(class),
        threads_text(&s.threads)
    ));
    if s.frames.is_empty() {
        out.push_str("        [unknown] (no stack captured)\n");
    }
    let mut was_kernel = None;
    for f in s.frames.iter().rev() {
        if was_kernel == Some(true) && !f.kernel {
            out.push_str("        --\n");
        }
        was_kernel = Some(f.kernel);
        out.push_str(&format!("        {}\n", frame_line(f)));
    }
}

fn class_heading(c: &ClassStacks) -> String {
    let mut out = format!(
        "{}: {} with stacks = {} of the class's {}, {} without; {} {}, {} distinct stack(s)\n",
        c.class.name(),
        fmt_ns(c.stack_ns as f64),
        opt_share(c.share_of_class()),
        fmt_ns(c.class_ns as f64),
        fmt_ns(c.without_stack_ns() as f64),
        c.count,
        count_unit(c.class),
        c.distinct_stacks
    );
    if c.class.is_off_cpu() && c.stack_ns > 0 {
        out.push_str(&format!("  {}\n", parts_text(&c.parts)));
    }
    out
}

/// How a class's time with stacks was measured: exact, estimated (with its bound),
/// in progress.
fn parts_text(p: &TimeParts) -> String {
    let mut out = format!("exact {}", fmt_ns(p.exact_ns as f64));
    if p.in_progress_ns > 0 {
        out.push_str(&format!(
            " ({} of it in waits still in progress at the end)",
            fmt_ns(p.in_progress_ns as f64)
        ));
    }
    out.push_str(&format!(
        ", estimated {} from {} sampled short interval(s)",
        fmt_ns(p.estimated_ns as f64),
        p.sampled_count
    ));
    if p.estimated_ns > 0 {
        out.push_str(&format!(
            " (± {} at 3 standard deviations)",
            fmt_ns(3.0 * p.estimated_sd_ns as f64)
        ));
    }
    out
}

/// Why a class with time has no stack at all; `None` when it has one. The causes the
/// bundle cannot tell apart are all named.
pub fn why_no_stacks(s: &StacksAnalysis, c: &ClassStacks) -> Option<String> {
    if c.distinct_stacks > 0 {
        return None;
    }
    let mut why = if c.class == LatencyClass::Steal {
        // Not an off-CPU wait: no switch-out ends it, so nothing captures a stack.
        return Some(
            "no stack: steal is time a thread was current but not run (hypervisor steal, interrupt service), which has no stacks".to_string(),
        );
    } else if c.class.is_off_cpu() {
        format!(
            "no stack: its intervals were shorter than {} (--min-block-us) and none was sampled (each is with probability length / {}), or its thread waited since before tracing began and /proc showed no stack for it",
            fmt_ns(s.min_block_ns as f64),
            fmt_ns(s.min_block_ns as f64)
        )
    } else if s.sample_hz == 0 {
        "no stack: on-CPU sampling was off (--sample-hz 0)".to_string()
    } else {
        format!(
            "no stack: no on-CPU sample at {} Hz landed on it",
            s.sample_hz
        )
    };
    if s.captures_lost > 0 {
        why.push_str(&format!(
            ", or its capture was lost ({} lost)",
            s.captures_lost
        ));
    }
    Some(why)
}

/// How many slow syscalls with stacks `kernelkite stacks` lists.
pub const STACKS_SLOW_CALLS: usize = 5;

fn slow_calls_text(out: &mut String, calls: &[SlowCallStack]) {
    if calls.is_empty() {
        return;
    }
    out.push_str("\nslowest single syscalls with the user stack that made them:\n");
    for c in calls {
        let who = if c.comm.is_empty() {
            format!("{}/{}", c.pid, c.tid)
        } else {
            format!("{}/{} {}", c.pid, c.tid, clean(&c.comm))
        };
        let at = if c.in_progress && c.t_ns == 0 {
            "before start, still in progress".to_string()
        } else if c.in_progress {
            format!("{}, still in progress", fmt_ns(c.t_ns as f64))
        } else {
            fmt_ns(c.t_ns as f64)
        };
        out.push_str(&format!(
            "  {}  {}  at {at}  {who}\n",
            clean(&c.name),
            fmt_ns(c.duration_ns as f64),
        ));
        for f in c.frames.iter().rev() {
            out.push_str(&format!("        {}\n", frame_line(f)));
        }
    }
}

/// The text of `kernelkite stacks`: the classes, then `calls` (the slowest single
/// syscalls with a user stack; pass none to leave them out).
pub fn stacks_text(a: &Analysis, s: &StacksAnalysis, calls: &[SlowCallStack]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "kernelkite stacks: {}\n",
        a.label
            .as_deref()
            .map(clean)
            .unwrap_or_else(|| "(no label)".into())
    ));
    out.push_str(&format!(
        "  on-CPU stacks sampled at {} Hz; off-CPU intervals of at least {} have stacks and their exact time, shorter ones a stack with probability length / {} and then count as {} (an unbiased estimate); {} capture(s) lost\n",
        s.sample_hz,
        fmt_ns(s.min_block_ns as f64),
        fmt_ns(s.min_block_ns as f64),
        fmt_ns(s.min_block_ns as f64),
        s.captures_lost
    ));
    if s.stack_copies_lost > 0 {
        out.push_str(&format!(
            "  {} stack copies not sent (rate bound or ring buffer half full): those stacks are frame-pointer walks, which end early (marked [truncated]) in code built without frame pointers\n",
            s.stack_copies_lost
        ));
    }
    if s.classes.is_empty() {
        out.push_str("\nno time in the classes asked for, and no stack\n");
    }
    for c in &s.classes {
        out.push('\n');
        out.push_str(&class_heading(c));
        if let Some(why) = why_no_stacks(s, c) {
            out.push_str(&format!("  {why}\n"));
        }
        for (i, stack) in c.top.iter().enumerate() {
            stack_block(&mut out, i + 1, c.class, stack);
        }
        if c.distinct_stacks > c.top.len() {
            let shown = c.top.iter().fold(0u64, |t, s| t.saturating_add(s.total_ns));
            out.push_str(&format!(
                "  ... {} more stack(s): {}\n",
                c.distinct_stacks - c.top.len(),
                fmt_ns(c.stack_ns.saturating_sub(shown) as f64)
            ));
        }
    }
    slow_calls_text(&mut out, calls);
    skipped_files_text(&mut out, a);
    out
}

/// Files not read for symbols: why some frames have no name.
fn skipped_files_text(out: &mut String, a: &Analysis) {
    if a.skipped_files.is_empty() {
        return;
    }
    out.push_str(
        "
files not read for symbols (their frames keep module+offset or the address):
",
    );
    for f in &a.skipped_files {
        out.push_str(&format!(
            "  {}: {} ({}x)\n",
            clean(&f.path),
            f.reason,
            f.count
        ));
    }
}

/// The short form `trace` prints at the end: the heaviest stacks of one class.
pub fn top_stacks_text(class: LatencyClass, stacks: &[HeavyStack]) -> String {
    let mut out = format!("heaviest {} stacks:\n", class.name());
    if stacks.is_empty() {
        out.push_str("  (none captured)\n");
    }
    for (i, s) in stacks.iter().enumerate() {
        stack_block(&mut out, i + 1, class, s);
    }
    out
}

/// What `trace` prints at the end of a session with stacks: the `n` heaviest stacks of
/// the class with the most time among those with stacks; `None` without stacks. With
/// waker data, over the threads that were not idle, then a line naming the idle ones
/// (their stacks are in `kernelkite stacks`).
pub fn dominant_stacks_text(bundle: &Bundle, a: &Analysis, n: usize) -> Option<String> {
    let idle = crate::analysis::waits::idle_split(bundle, a).filter(|i| !i.idle.is_empty());
    let Some(idle) = idle else {
        let class = dominant_stack_class(bundle, a)?;
        return Some(top_stacks_text(class, &top_stacks(bundle, a, class, n)));
    };
    let Some((class, stacks)) = dominant_busy_stacks(bundle, &idle, n) else {
        // Every thread with stacks slept through the session (a hung process): where
        // they wait is the answer.
        let class = dominant_stack_class(bundle, a)?;
        let mut out = top_stacks_text(class, &top_stacks(bundle, a, class, n));
        out.push_str(
            "(every thread with stacks was asleep through the session: this is where it waits)\n",
        );
        return Some(out);
    };
    let mut out = top_stacks_text(class, &stacks);
    const NAMED: usize = 4;
    let names: Vec<String> = (idle.idle.iter().take(NAMED))
        .map(|(pid, tid, comm, _)| format!("{pid}/{tid} {}", clean(comm)))
        .collect();
    let more = idle.idle.len().saturating_sub(NAMED);
    out.push_str(&format!(
        "idle, left out above ({} thread(s) asleep through the session: {}{}; their stacks are in `kernelkite stacks`)\n",
        idle.idle.len(),
        names.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    ));
    Some(out)
}

fn frame_json(f: &FrameView) -> Value {
    json!({
        "name": f.name,
        "kernel": f.kernel,
        "module": f.module,
        "file": f.file,
        "line": f.line,
    })
}

/// The `--json` document of `kernelkite stacks`.
pub fn stacks_json(a: &Analysis, s: &StacksAnalysis, calls: &[SlowCallStack]) -> Value {
    let classes: Vec<Value> = s
        .classes
        .iter()
        .map(|c| {
            json!({
                "class": c.class.name(),
                "class_ns": c.class_ns,
                "stack_ns": c.stack_ns,
                "exact_ns": c.parts.exact_ns,
                "estimated_ns": c.parts.estimated_ns,
                "estimated_sd_ns": c.parts.estimated_sd_ns,
                "sampled_count": c.parts.sampled_count,
                "in_progress_ns": c.parts.in_progress_ns,
                "without_stack_ns": c.without_stack_ns(),
                "no_stacks_reason": why_no_stacks(s, c),
                "share_of_class": c.share_of_class(),
                "count": c.count,
                "count_unit": count_unit(c.class),
                "distinct_stacks": c.distinct_stacks,
                "stacks": c.top.iter().map(|st| json!({
                    "total_ns": st.total_ns,
                    "count": st.count,
                    "share_of_stacks": st.share_of_stacks,
                    "share_of_class": st.share_of_class,
                    "threads": st.threads.iter().map(|t| json!({
                        "pid": t.pid, "tid": t.tid, "comm": t.comm,
                    })).collect::<Vec<_>>(),
                    "frames": st.frames.iter().map(frame_json).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "schema_version": STACKS_SCHEMA_VERSION,
        "kind": "stacks",
        "label": a.label,
        "replayed_from": a.replayed_from,
        "sample_hz": s.sample_hz,
        "min_block_ns": s.min_block_ns,
        "captures_lost": s.captures_lost,
        "stack_copies_lost": s.stack_copies_lost,
        "skipped_files": a.skipped_files,
        "classes": classes,
        "slow_syscalls": calls.iter().map(|c| json!({
            "t_ns": c.t_ns,
            "pid": c.pid,
            "tid": c.tid,
            "comm": c.comm,
            "name": c.name,
            "duration_ns": c.duration_ns,
            "in_progress": c.in_progress,
            "frames": c.frames.iter().map(frame_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
