//! The latency classes of every thread: exact from the eBPF counters (the last frame,
//! or the exit record the thread wrote itself), else estimated from /proc samples
//! ([`super::estimate_classes`]); and each process's sum of its threads'.

use std::collections::{BTreeMap, BTreeSet};

use super::accumulate::{frame_t, Accumulated, Window};
use super::{estimate_classes, ProcessKey, ThreadRow};
use crate::model::{Bundle, ClassTimes, LifecycleKind};

/// The thread rows, and what the process rows take from them.
pub(super) struct ThreadClasses {
    /// Sorted by pid, process start time and tid.
    pub(super) rows: Vec<ThreadRow>,
    /// Each process's classes: the sum of its threads'.
    pub(super) by_process: BTreeMap<ProcessKey, ClassTimes>,
    /// The classes (and name) each exited thread's exit record holds (eBPF).
    pub(super) exit_classes: BTreeMap<(i32, i32), (ClassTimes, String)>,
}

/// Every thread's classes over its window in the session.
pub(super) fn thread_classes(bundle: &Bundle, window: &Window, acc: &Accumulated) -> ThreadClasses {
    let frames = &bundle.frames;
    // Exit events with exact class times (eBPF) complete threads that exited between
    // snapshots, and add threads that were never in a snapshot.
    let mut exit_classes: BTreeMap<(i32, i32), (ClassTimes, String)> = BTreeMap::new();
    // The time of each thread's last exit event (a long session has 100,000s of them:
    // looked up, not searched for).
    let mut exit_t_ns: BTreeMap<(i32, i32), u64> = BTreeMap::new();
    for ev in &bundle.lifecycle {
        if ev.kind == LifecycleKind::Exit {
            exit_t_ns.insert((ev.pid, ev.tid), ev.t_ns);
            if let Some(c) = ev.class_ns {
                exit_classes.insert((ev.pid, ev.tid), (c, ev.comm.clone()));
            }
        }
    }

    let mut thread_rows = Vec::new();
    let mut proc_classes: BTreeMap<ProcessKey, ClassTimes> = BTreeMap::new();
    let mut seen_exit: BTreeSet<(i32, i32)> = BTreeSet::new();
    for (&(pid, start, tid), t) in &acc.threads {
        let proc_acc = &acc.procs[&(pid, start)];
        let window_start = if t.samples == 0 {
            // Read only at its exit: from its process's start.
            window.start_of_unframed(start, t.exit_t_ns.unwrap_or(window.last_t))
        } else if t.baseline_zero {
            if t.first_frame == proc_acc.first_frame && proc_acc.in_session {
                window.start_of_new(frames, t.first_frame, Some(start))
            } else {
                window.start_of_new(frames, t.first_frame, None)
            }
        } else {
            frame_t(frames, t.first_frame)
        };
        let window_end = match t.exit_t_ns {
            Some(exit) if t.samples == 0 => exit,
            exit => frame_t(frames, t.last_frame).max(exit.unwrap_or(0)),
        }
        .max(window_start);
        let exit = exit_classes.get(&(pid, tid)).map(|(c, _)| *c);
        // The exit record is written by the exiting thread itself after its last interval
        // closed: it is the thread's final, exact value. Otherwise class_ns counters start
        // at 0 when the session starts tracking the thread (attach or fork), so the last
        // snapshot is its whole time in the session.
        let exact_classes = match (exit, t.class_last, t.class_broken) {
            (Some(e), _, _) => {
                seen_exit.insert((pid, tid));
                Some(e)
            }
            (None, Some(last), false) => Some(last),
            _ => None,
        };
        let (classes, exact) = if let Some(c) = exact_classes {
            (c, true)
        } else {
            (
                estimate_classes(
                    window_end - window_start,
                    t.on_cpu.total,
                    t.runqueue.total,
                    t.has_schedstat,
                    &t.votes,
                ),
                false,
            )
        };
        let wall_ns = classes.total_ns();
        let pc = proc_classes.entry((pid, start)).or_default();
        *pc = pc.saturating_add(&classes);
        thread_rows.push(ThreadRow {
            pid,
            process_start_time_ticks: start,
            tid,
            comm: t.comm.to_string(),
            window_start_ns: window_start,
            window_end_ns: window_end,
            wall_ns,
            classes,
            exact,
            samples: t.samples,
        });
    }

    // Exact classes of threads that exited without ever being in a snapshot.
    let framed_threads: BTreeSet<(i32, i32)> =
        acc.threads.keys().map(|&(p, _, t)| (p, t)).collect();
    for (&(pid, tid), (c, comm)) in &exit_classes {
        if framed_threads.contains(&(pid, tid)) || seen_exit.contains(&(pid, tid)) {
            continue;
        }
        let start = acc
            .procs
            .range((pid, 0)..=(pid, u64::MAX))
            .next_back()
            .map_or(0, |(k, _)| k.1);
        let pc = proc_classes.entry((pid, start)).or_default();
        *pc = pc.saturating_add(c);
        let end = exit_t_ns.get(&(pid, tid)).copied().unwrap_or(window.last_t);
        thread_rows.push(ThreadRow {
            pid,
            process_start_time_ticks: start,
            tid,
            comm: comm.clone(),
            window_start_ns: end.saturating_sub(c.total_ns()),
            window_end_ns: end,
            wall_ns: c.total_ns(),
            classes: *c,
            exact: true,
            samples: 0,
        });
    }
    thread_rows.sort_by_key(|t| (t.pid, t.process_start_time_ticks, t.tid));
    ThreadClasses {
        rows: thread_rows,
        by_process: proc_classes,
        exit_classes,
    }
}
