//! The text `trace` prints when it stops: per-process (or per-thread) latency classes,
//! the top syscalls by total time, and events lost.

use kernelkite_common::LatencyClass;

use super::{columns, fmt_ns, fmt_share};
use crate::analysis::Analysis;
use crate::model::ClassTimes;

/// How many syscalls `trace` lists.
pub const TRACE_TOP_SYSCALLS: usize = 10;

fn class_cells(c: &ClassTimes) -> Vec<String> {
    let wall = c.total_ns().max(1) as f64;
    LatencyClass::ALL
        .iter()
        .map(|class| {
            let ns = c.get(*class);
            format!("{} {}", fmt_ns(ns as f64), fmt_share(ns as f64 / wall))
        })
        .collect()
}

fn class_header(first: &[&str]) -> Vec<String> {
    let mut h: Vec<String> = first.iter().map(|s| s.to_string()).collect();
    h.extend(LatencyClass::ALL.iter().map(|c| c.name().to_string()));
    h
}

/// Render the end-of-trace report.
pub fn trace_text(a: &Analysis, per_thread: bool) -> String {
    let mut out = String::new();
    let exact = if a.latency_classes_exact {
        "exact"
    } else {
        "estimated"
    };
    out.push_str(&format!(
        "traced {} process(es) for {} with {} ({} latency classes)\n",
        a.distinct_pids,
        fmt_ns(a.duration_ns as f64),
        a.backend,
        exact
    ));
    // `--cgroup`: which, and what its own counters say.
    if let Some(c) = &a.cgroup {
        let rows: Vec<Vec<String>> = (super::summary::cgroup_rows(c).into_iter())
            .map(|(k, v)| vec![k.to_string(), v])
            .collect();
        for line in columns(&rows, &[]).lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push('\n');
    if per_thread {
        let mut rows = vec![class_header(&["PID", "TID", "THREAD", "WALL"])];
        for t in &a.threads {
            let mut row = vec![
                t.pid.to_string(),
                t.tid.to_string(),
                t.comm.clone(),
                fmt_ns(t.wall_ns as f64),
            ];
            row.extend(class_cells(&t.classes));
            rows.push(row);
        }
        out.push_str("latency classes per thread (time and share of the thread's wall time):\n");
        out.push_str(&columns(&rows, &[0, 1, 3, 4, 5, 6, 7, 8, 9]));
    } else {
        let mut rows = vec![class_header(&["PID", "COMM", "THREADS"])];
        for p in &a.processes {
            let mut row = vec![
                p.pid.to_string(),
                super::clean(&p.comm),
                p.threads.to_string(),
            ];
            row.extend(class_cells(&p.classes));
            rows.push(row);
        }
        out.push_str("latency classes per process (time summed over threads, and share):\n");
        out.push_str(&columns(&rows, &[0, 2, 3, 4, 5, 6, 7, 8]));
    }
    out.push('\n');
    out.push_str(&super::summary::syscalls_text(a, TRACE_TOP_SYSCALLS));
    out.push('\n');
    match a.events_lost {
        Some(n) => out.push_str(&format!(
            "events lost: {} (counted in the kernel)\n",
            crate::model::lost_text(n, &a.events_lost_by_cause)
        )),
        None => out.push_str("events lost: n/a (proc sampler)\n"),
    }
    out
}
