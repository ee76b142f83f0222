//! `critical-path` renderers: which threads bounded the root's wall time, as text and a
//! JSON document (`docs/JSON.md`, "critical-path").

use kernelkite_common::LatencyClass;
use serde_json::{json, Map, Value};

use super::{clean, columns, fmt_ns, fmt_share};
use crate::analysis::commands::short_command;
use crate::analysis::critical_path::{CriticalPath, PathThread, Segment};
use crate::model::ClassTimes;

/// Version of the critical-path JSON document.
pub const CRITICAL_PATH_SCHEMA_VERSION: u32 = 1;

/// Threads listed in the text (the JSON lists all).
const TOP_THREADS: usize = 10;

/// The non-zero classes, largest first: `on_cpu 1.20 s, runqueue 3.1 ms`.
fn classes_text(c: &ClassTimes) -> String {
    let mut list: Vec<(LatencyClass, u64)> = LatencyClass::ALL
        .iter()
        .map(|&k| (k, c.get(k)))
        .filter(|(_, ns)| *ns > 0)
        .collect();
    list.sort_by_key(|&(_, ns)| std::cmp::Reverse(ns));
    let parts: Vec<String> = list
        .iter()
        .map(|(k, ns)| format!("{} {}", k.name(), fmt_ns(*ns as f64)))
        .collect();
    parts.join(", ")
}

fn classes_json(c: &ClassTimes) -> Value {
    let mut m = Map::new();
    for k in LatencyClass::ALL {
        if c.get(k) > 0 {
            m.insert(k.name().to_string(), json!(c.get(k)));
        }
    }
    Value::Object(m)
}

fn share(ns: u64, wall: u64) -> f64 {
    if wall == 0 {
        0.0
    } else {
        ns as f64 / wall as f64
    }
}

fn segment_text(s: &Segment, start_ns: u64) -> Vec<String> {
    let what = if s.running {
        format!("ran: {}", classes_text(&s.classes))
    } else {
        format!(
            "waited ({}) for {}",
            classes_text(&s.classes),
            clean(s.woken_by.as_deref().unwrap_or("?"))
        )
    };
    vec![
        format!("+{}", fmt_ns(s.start_ns.saturating_sub(start_ns) as f64)),
        fmt_ns((s.end_ns - s.start_ns) as f64),
        format!("{} ({}/{})", clean(&s.comm), s.pid, s.tid),
        what,
    ]
}

/// A thread as its users name it: its comm, with its process's distinguishing command
/// (`rustc --crate-name serde`) when that says more.
fn thread_name(t: &PathThread) -> String {
    match t.argv.as_deref().map(short_command) {
        Some(short) if !short.is_empty() && short != t.comm => {
            if t.comm == t.process_comm {
                short
            } else {
                format!("{} of {short}", t.comm)
            }
        }
        _ => t.comm.clone(),
    }
}

pub fn critical_path_text(p: &CriticalPath, max_segments: usize) -> String {
    let mut out = String::new();
    let wall = p.wall_ns;
    let head: Vec<String> = (p.by_thread.iter().take(3))
        .map(|t| {
            let top = LatencyClass::ALL
                .iter()
                .max_by_key(|&&k| t.classes.get(k))
                .map_or("on_cpu", |k| k.name());
            format!(
                "{} in {} (pid {}) {top}",
                fmt_ns(t.ns as f64),
                clean(&thread_name(t)),
                t.pid
            )
        })
        .collect();
    out.push_str(&format!(
        "Critical path of {} (pid {}): of {}, {}.\n\n",
        clean(&p.root_comm),
        p.root_pid,
        fmt_ns(wall as f64),
        head.join(", ")
    ));
    // Builds run the same command many times (rustc, cc): the path per command (the
    // process's main thread's comm, so a rustc's worker threads count as rustc).
    let mut by_comm: Vec<(String, u64, std::collections::BTreeSet<i32>)> = Vec::new();
    for t in &p.by_thread {
        match by_comm.iter_mut().find(|(c, _, _)| *c == t.process_comm) {
            Some(e) => {
                e.1 += t.ns;
                e.2.insert(t.pid);
            }
            None => by_comm.push((t.process_comm.clone(), t.ns, [t.pid].into())),
        }
    }
    by_comm.sort_by_key(|e| std::cmp::Reverse(e.1));
    let parts: Vec<String> = (by_comm.iter().take(TOP_THREADS))
        .map(|(comm, ns, pids)| {
            let n = match pids.len() {
                1 => String::new(),
                n => format!(" ({n} processes)"),
            };
            format!(
                "{} {}{n} {}",
                clean(comm),
                fmt_ns(*ns as f64),
                fmt_share(share(*ns, wall))
            )
        })
        .collect();
    out.push_str(&format!("By command: {}.\n\n", parts.join(", ")));
    let mut rows = vec![vec![
        "time".to_string(),
        "share".to_string(),
        "thread".to_string(),
        "classes".to_string(),
    ]];
    for t in p.by_thread.iter().take(TOP_THREADS) {
        rows.push(vec![
            fmt_ns(t.ns as f64),
            fmt_share(share(t.ns, wall)),
            format!("{} (pid {}, tid {})", clean(&thread_name(t)), t.pid, t.tid),
            classes_text(&t.classes),
        ]);
    }
    out.push_str(&columns(&rows, &[0, 1]));
    if p.by_thread.len() > TOP_THREADS {
        out.push_str(&format!(
            "... and {} more threads (--json lists all)\n",
            p.by_thread.len() - TOP_THREADS
        ));
    }
    // The longest segments, shown in time order.
    let mut longest: Vec<usize> = (0..p.segments.len()).collect();
    longest.sort_by_key(|&i| std::cmp::Reverse(p.segments[i].end_ns - p.segments[i].start_ns));
    longest.truncate(max_segments);
    longest.sort_unstable();
    out.push_str(&format!(
        "\nPath ({} of {} segments, the longest, in time order; + is from the root's start):\n",
        longest.len(),
        p.segments.len()
    ));
    let rows: Vec<Vec<String>> = longest
        .iter()
        .map(|&i| segment_text(&p.segments[i], p.start_ns))
        .collect();
    out.push_str(&columns(&rows, &[0, 1]));
    if p.wakeups_lost > 0 {
        out.push_str(&format!(
            "\nnote: {} wakeups were not recorded (ring buffer busy): the path may run through a sleep there\n",
            p.wakeups_lost
        ));
    }
    out
}

pub fn critical_path_json(p: &CriticalPath) -> Value {
    json!({
        "schema_version": CRITICAL_PATH_SCHEMA_VERSION,
        "kind": "critical_path",
        "root_pid": p.root_pid,
        "root_comm": p.root_comm,
        "start_ns": p.start_ns,
        "wall_ns": p.wall_ns,
        "wakeups_lost": p.wakeups_lost,
        "by_thread": p.by_thread.iter().map(|t| json!({
            "pid": t.pid,
            "tid": t.tid,
            "comm": t.comm,
            "process_comm": t.process_comm,
            "argv": t.argv,
            "ns": t.ns,
            "classes": classes_json(&t.classes),
        })).collect::<Vec<_>>(),
        "segments": p.segments.iter().map(|s| json!({
            "pid": s.pid,
            "tid": s.tid,
            "comm": s.comm,
            "start_ns": s.start_ns,
            "end_ns": s.end_ns,
            "state": if s.running { "running" } else { "waiting" },
            "classes": classes_json(&s.classes),
            "woken_by": s.woken_by,
        })).collect::<Vec<_>>(),
    })
}
