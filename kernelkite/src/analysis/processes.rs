//! The process rows: every process seen in a frame, and (eBPF) those known only from
//! their lifecycle events; then the session's CPU time and its source.

use std::collections::{BTreeMap, BTreeSet};

use super::accumulate::{frame_t, Accumulated, Window};
use super::classes::ThreadClasses;
use super::{commands, lifetimes_from_events, CpuSource, ProcessRow, RssSource};
use crate::model::{Backend, Bundle, LifecycleKind};

/// Processes known only from lifecycle events (eBPF: pids in events that never
/// appeared in a frame): pid → (ppid, comm, first event, last event).
pub(super) fn lifecycle_only(
    bundle: &Bundle,
    acc: &Accumulated,
) -> BTreeMap<i32, (i32, String, u64, u64)> {
    // Lifecycle-only processes (eBPF): pids in events that never appeared in a frame.
    let frame_pids: BTreeSet<i32> = acc.procs.keys().map(|k| k.0).collect();
    let mut lifecycle_only: BTreeMap<i32, (i32, String, u64, u64)> = BTreeMap::new();
    for ev in &bundle.lifecycle {
        if frame_pids.contains(&ev.pid) {
            continue;
        }
        // Parent and name come from the main thread's events (a fork, then exec/exit
        // renames); a lost-exit record has neither (ppid 0, empty comm).
        let e = lifecycle_only
            .entry(ev.pid)
            .or_insert_with(|| (0, String::new(), ev.t_ns, ev.t_ns));
        let main_thread = ev.tid == ev.pid;
        if main_thread && e.0 == 0 && ev.ppid != 0 {
            e.0 = ev.ppid;
        }
        if !ev.comm.is_empty()
            && (e.1.is_empty() || (main_thread && ev.kind != LifecycleKind::Fork))
        {
            e.1 = ev.comm.clone();
        }
        e.2 = e.2.min(ev.t_ns);
        e.3 = e.3.max(ev.t_ns);
    }
    lifecycle_only
}

/// Every process's row, in order of first appearance.
pub(super) fn process_rows(
    bundle: &Bundle,
    window: &Window,
    acc: &Accumulated,
    classes: &ThreadClasses,
    lifecycle_only: &BTreeMap<i32, (i32, String, u64, u64)>,
) -> Vec<ProcessRow> {
    // Process rows.
    let frames = &bundle.frames;
    let hz = window.hz;
    let mut processes: Vec<ProcessRow> = (acc.procs.iter())
        .map(|(&(pid, start), a)| ProcessRow {
            pid,
            ppid: a.ppid,
            comm: a.comm.to_string(),
            start_time_ticks: start,
            started_in_session: a.in_session,
            first_seen_ns: match (a.frames, a.exit_t_ns) {
                (0, Some(exit)) => window.start_of_unframed(start, exit),
                _ => frame_t(frames, a.first_frame),
            },
            last_seen_ns: match (a.frames, a.exit_t_ns) {
                (0, Some(exit)) => exit,
                (_, exit) => frame_t(frames, a.last_frame).max(exit.unwrap_or(0)),
            },
            frames: a.frames,
            cpu_seconds: Some(match a.exact_cpu_ns {
                Some(ns) => ns as f64 / 1e9,
                None => a.cpu.total as f64 / hz as f64,
            }),
            exact_at_exit: a.exact_cpu_ns.is_some(),
            peak_rss_bytes: Some(a.peak_rss),
            read_bytes: a.read.total,
            write_bytes: a.write.total,
            io_visible: a.io_visible,
            classes: classes
                .by_process
                .get(&(pid, start))
                .copied()
                .unwrap_or_default(),
            threads: a.threads.len() as u64,
            argv: None,
            placement: None,
        })
        .collect();
    for (&pid, (ppid, comm, first, last)) in lifecycle_only {
        let threads_seen = classes.exit_classes.keys().filter(|k| k.0 == pid).count() as u64;
        processes.push(ProcessRow {
            pid,
            ppid: *ppid,
            comm: comm.clone(),
            start_time_ticks: 0,
            started_in_session: true,
            first_seen_ns: *first,
            last_seen_ns: *last,
            frames: 0,
            // Never sampled: not measured (eBPF fills in on_cpu below when its threads
            // have time).
            cpu_seconds: None,
            exact_at_exit: false,
            peak_rss_bytes: None,
            read_bytes: 0,
            write_bytes: 0,
            io_visible: false,
            classes: classes
                .by_process
                .get(&(pid, 0))
                .copied()
                .unwrap_or_default(),
            threads: threads_seen,
            argv: None,
            placement: None,
        });
    }
    let commands = commands::latest_by_pid(bundle);
    let placements = super::placement::latest_by_pid(bundle);
    for p in &mut processes {
        p.argv = commands.get(&p.pid).map(|c| c.argv.clone());
        p.placement = placements.get(&p.pid).cloned();
    }
    // The eBPF backend measured every process's on-CPU time exactly (switch-in to
    // switch-out, including processes that lived between two snapshots): use it
    // instead of the tick samples.
    if bundle.backend == Backend::Ebpf {
        for p in &mut processes {
            if p.frames > 0 || p.classes.total_ns() > 0 {
                p.cpu_seconds = Some(p.classes.on_cpu as f64 / 1e9);
            }
        }
        lifetimes_from_events(&mut processes, &bundle.lifecycle);
    }
    processes.sort_by_key(|p| (p.first_seen_ns, p.pid, p.start_time_ticks));
    processes
}

/// The session's CPU time: exact from the launched command's rusage when there is
/// one, else the eBPF on-CPU time, else the tick samples.
pub(super) struct CpuTotals {
    pub(super) cpu_seconds: f64,
    pub(super) cpu_source: CpuSource,
    pub(super) sampled_cpu_seconds: f64,
    pub(super) cpu_coverage: Option<f64>,
    pub(super) max_single_rss_bytes: u64,
    pub(super) max_single_rss_source: RssSource,
}

pub(super) fn cpu_totals(
    bundle: &Bundle,
    window: &Window,
    acc: &Accumulated,
    processes: &[ProcessRow],
) -> CpuTotals {
    let hz = window.hz;
    let max_sample_rss = acc.max_sample_rss;
    let sampled_cpu_seconds = match bundle.backend {
        Backend::Ebpf => processes.iter().filter_map(|p| p.cpu_seconds).sum(),
        // With exit accounting, the rows: some hold the exact CPU read at the exit.
        Backend::Proc if processes.iter().any(|p| p.exact_at_exit) => {
            processes.iter().filter_map(|p| p.cpu_seconds).sum()
        }
        Backend::Proc => {
            let sampled_ticks = (acc.procs)
                .values()
                .fold(0u64, |a, p| a.saturating_add(p.cpu.total));
            sampled_ticks as f64 / hz as f64
        }
    };
    let rusage = bundle.launched.as_ref().and_then(|l| l.rusage);
    let (cpu_seconds, cpu_source, cpu_coverage) = match rusage {
        Some(r) => {
            let exact = r.user_us.saturating_add(r.system_us) as f64 / 1e6;
            let coverage = if exact > 0.0 {
                Some(sampled_cpu_seconds / exact)
            } else {
                None
            };
            (exact, CpuSource::Rusage, coverage)
        }
        None if bundle.backend == Backend::Ebpf => {
            (sampled_cpu_seconds, CpuSource::EbpfOnCpu, None)
        }
        None => (sampled_cpu_seconds, CpuSource::Samples, None),
    };
    let (max_single_rss_bytes, max_single_rss_source) = match rusage {
        Some(r)
            if bundle
                .launched
                .as_ref()
                .is_some_and(|l| l.max_rss_upper_bound) =>
        {
            (
                r.max_rss_kib.saturating_mul(1024),
                RssSource::RusageUpperBound,
            )
        }
        Some(r) => (r.max_rss_kib.saturating_mul(1024), RssSource::Rusage),
        None => (max_sample_rss, RssSource::Samples),
    };
    CpuTotals {
        cpu_seconds,
        cpu_source,
        sampled_cpu_seconds,
        cpu_coverage,
        max_single_rss_bytes,
        max_single_rss_source,
    }
}
