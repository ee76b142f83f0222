//! `summary` renderers: aligned text and the versioned JSON document (`docs/JSON.md`).
//! `trace` prints the same JSON contract through [`summary_json`].

use kernelkite_common::LatencyClass;
use serde_json::{json, Map, Value};

use super::{columns, fmt_bytes, fmt_ms, fmt_ns, fmt_secs, fmt_share};
use crate::analysis::waits::IdleSplit;
use crate::analysis::{Analysis, CpuSource, RssSource};
use crate::model::{OnCpuSource, TimeAccounting};

/// Version of the summary JSON document. Bump when a field changes meaning or is
/// removed; adding fields does not bump it.
pub const SUMMARY_SCHEMA_VERSION: u32 = 1;

/// How many syscalls the text summary lists (the JSON lists all).
pub const TOP_SYSCALLS: usize = 10;

/// How many processes the text summary lists (the JSON lists all).
pub const TOP_PROCESSES: usize = 20;

/// How many threads the text summary's steal table lists (the JSON lists all).
pub const TOP_STEAL_THREADS: usize = 5;

fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The latency classes as a JSON object keyed by class name, values in ns.
pub fn classes_json(c: &crate::model::ClassTimes) -> Value {
    let mut m = Map::new();
    for class in LatencyClass::ALL {
        m.insert(class.name().to_string(), json!(c.get(class)));
    }
    Value::Object(m)
}

/// The summary JSON document of an analysis (schema [`SUMMARY_SCHEMA_VERSION`]).
pub fn summary_json(a: &Analysis) -> Value {
    summary_json_with(a, None)
}

/// [`summary_json`] with the idle split of a bundle with waker data: `idle_threads`
/// (count), `idle_threads_ns` (their summed class times) and `busy_latency_classes`
/// (the classes of the other threads). Absent without waker data.
pub fn summary_json_with(a: &Analysis, idle: Option<&IdleSplit>) -> Value {
    let mut doc = summary_json_base(a);
    if let (Some(idle), Value::Object(m)) = (idle, &mut doc) {
        m.insert("idle_threads".into(), json!(idle.idle.len()));
        m.insert(
            "idle_threads_ns".into(),
            json!(idle.idle_classes.total_ns()),
        );
        m.insert(
            "busy_latency_classes".into(),
            classes_json(&idle.busy_classes),
        );
    }
    doc
}

fn summary_json_base(a: &Analysis) -> Value {
    let mut shares = Map::new();
    for class in LatencyClass::ALL {
        shares.insert(class.name().to_string(), json!(a.class_share(class)));
    }
    let estimated: Vec<&str> = LatencyClass::ALL
        .iter()
        .filter(|c| !a.class_is_exact(**c))
        .map(|c| c.name())
        .collect();
    let syscalls: Vec<Value> = a
        .syscalls
        .iter()
        .map(|s| {
            let mut row = json!({
                "name": s.name,
                "count": s.count,
                "total_ns": s.total_ns,
                "p50_ns": s.p50_ns,
                "p95_ns": s.p95_ns,
                "p99_ns": s.p99_ns,
                "max_ns": s.max_ns,
                "processes": s.processes,
            });
            if !s.state.is_completed() {
                row["state"] = json!(s.state);
            }
            row
        })
        .collect();
    let processes: Vec<Value> = a
        .processes
        .iter()
        .map(|p| {
            let mut row = json!({
                "pid": p.pid,
                "ppid": p.ppid,
                "comm": p.comm,
                "argv": p.argv,
                "start_time_ticks": p.start_time_ticks,
                "started_in_session": p.started_in_session,
                "first_seen_ms": ns_to_ms(p.first_seen_ns),
                "last_seen_ms": ns_to_ms(p.last_seen_ns),
                "frames": p.frames,
                "cpu_seconds": p.cpu_seconds,
                "exact_at_exit": p.exact_at_exit,
                "peak_rss_bytes": p.peak_rss_bytes,
                "read_bytes": p.read_bytes,
                "write_bytes": p.write_bytes,
                "io_visible": p.io_visible,
                "threads": p.threads,
                "latency_classes": classes_json(&p.classes),
            });
            if let Some(place) = &p.placement {
                row["placement"] = json!(place);
            }
            row
        })
        .collect();
    let network = a.network.as_ref().map(|n| {
        json!({
            "host_wide": true,
            "rx_bytes": n.rx_bytes,
            "tx_bytes": n.tx_bytes,
            "interfaces": n.interfaces.iter().map(|i| json!({
                "interface": i.interface,
                "rx_bytes": i.rx_bytes,
                "rx_packets": i.rx_packets,
                "tx_bytes": i.tx_bytes,
                "tx_packets": i.tx_packets,
            })).collect::<Vec<_>>(),
        })
    });
    let launched = a.launched.as_ref().map(
        |l| json!({"argv": l.argv, "pid": l.pid, "exit_code": l.exit_code, "signal": l.signal}),
    );
    let host_steal = a
        .host_steal_ns
        .map(|ns| json!({"host_wide": true, "steal_ns": ns}));
    let steal_threads: Vec<Value> = a
        .steal_threads()
        .iter()
        .map(|t| {
            json!({
                "pid": t.pid,
                "tid": t.tid,
                "comm": t.comm,
                "on_cpu_ns": t.classes.on_cpu,
                "steal_ns": t.classes.steal,
            })
        })
        .collect();
    let mut summary = json!({
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "kind": "summary",
        "label": a.label,
        "backend": a.backend.name(),
        "replayed_from": a.replayed_from,
        "launched": launched,
        "duration_ms": a.duration_ms,
        "duration_ns": a.duration_ns,
        "interval_ms": a.interval_ms,
        "frames": a.frames,
        "max_frames": a.frame_cap.max_frames,
        "frames_dropped": a.frame_cap.frames_dropped,
        "distinct_pids": a.distinct_pids,
        "cpu_seconds": a.cpu_seconds,
        "cpu_source": a.cpu_source,
        "sampled_cpu_seconds": a.sampled_cpu_seconds,
        "cpu_coverage": a.cpu_coverage,
        "processes_exact_at_exit": a.processes_exact_at_exit,
        "peak_rss_bytes": a.peak_rss_bytes,
        "peak_rss_at_ms": ns_to_ms(a.peak_rss_t_ns),
        "max_single_rss_bytes": a.max_single_rss_bytes,
        "max_single_rss_source": a.max_single_rss_source,
        "read_bytes": a.read_bytes,
        "write_bytes": a.write_bytes,
        "processes_without_io": a.processes_without_io,
        "latency_classes": classes_json(&a.latency_classes),
        "latency_class_shares": shares,
        "latency_classes_exact": a.latency_classes_exact,
        "estimated_classes": estimated,
        "events_lost": a.events_lost,
        "events_lost_by_cause": a.events_lost_by_cause,
        "skipped_files": a.skipped_files,
        "syscalls": syscalls,
        "histogram_relative_error": a.histogram_relative_error,
        "network": network,
        "processes": processes,
        "on_cpu_source": a.time_accounting.as_ref().map(|t| t.on_cpu_source.name()),
        "time_accounting": a.time_accounting,
        "steal_threads": steal_threads,
        "host_steal": host_steal,
    });
    // Present only where known, so bundles without cgroups read as before.
    if !a.groups.is_empty() {
        summary["groups"] = json!(a.groups);
    }
    if let Some(c) = &a.cgroup {
        summary["cgroup"] = json!(c);
    }
    summary
}

/// The text summary.
pub fn summary_text(a: &Analysis) -> String {
    summary_text_with(a, None)
}

/// [`summary_text`] with the idle split of a bundle with waker data: the class table is
/// then over the threads that were not idle, and the idle ones get their own line.
pub fn summary_text_with(a: &Analysis, idle: Option<&IdleSplit>) -> String {
    let idle = idle.filter(|i| !i.idle.is_empty());
    // The syscall histograms are per process, idle threads' calls included: what they
    // explain is measured against every thread's classes, not the busy ones'.
    let all_threads = a;
    let busy;
    let a = match idle {
        Some(i) => {
            let mut b = a.clone();
            b.latency_classes = i.busy_classes;
            busy = b;
            &busy
        }
        None => a,
    };
    let mut out = String::new();
    match &a.label {
        Some(l) => out.push_str(&format!("kernelkite summary: {l}\n")),
        None => out.push_str("kernelkite summary\n"),
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |k: &str, v: String| rows.push(vec![k.to_string(), v]);
    let backend = match a.backend {
        crate::model::Backend::Proc => "proc (/proc sampler, unprivileged)",
        crate::model::Backend::Ebpf => "ebpf (kernel tracepoints)",
    };
    row("backend", backend.to_string());
    if let Some(r) = &a.replayed_from {
        row("replayed from", r.clone());
    }
    if let Some(l) = &a.launched {
        let status = match (l.exit_code, l.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "status unknown".to_string(),
        };
        row(
            "command",
            format!(
                "{} (pid {}, {status})",
                super::display_argv(&l.argv, 120),
                l.pid
            ),
        );
    }
    row(
        "duration",
        format!(
            "{}  ({}; interval {} ms)",
            fmt_ms(a.duration_ms),
            super::window_label(a),
            a.interval_ms
        ),
    );
    row("frames", a.frames.to_string());
    row("processes", format!("{} distinct pids", a.distinct_pids));
    let per_process = if a.processes_exact_at_exit > 0 {
        "per-process rows sum to"
    } else {
        "per-process samples saw"
    };
    let cpu_note = match (a.cpu_source, a.cpu_coverage) {
        (CpuSource::Rusage, Some(c)) => format!(
            "  (exact, from rusage; {per_process} {} = {})",
            fmt_secs(a.sampled_cpu_seconds),
            fmt_share(c)
        ),
        (CpuSource::Rusage, None) => "  (exact, from rusage)".to_string(),
        (CpuSource::EbpfOnCpu, _) => {
            "  (exact: on_cpu time of every traced thread, from the eBPF programs)".to_string()
        }
        (CpuSource::Samples, _) => {
            "  (from per-process samples; CPU of processes shorter than a frame is missed)"
                .to_string()
        }
    };
    row("CPU", format!("{}{cpu_note}", fmt_secs(a.cpu_seconds)));
    if a.processes_exact_at_exit > 0 {
        row(
            "CPU per process",
            format!(
                "exact for {} of {} processes  (exit accounting: each read as it exited{})",
                a.processes_exact_at_exit,
                a.processes.len(),
                if a.processes_exact_at_exit < a.processes.len() as u64 {
                    "; the rest from samples"
                } else {
                    ""
                }
            ),
        );
    }
    row(
        "peak RSS (tree)",
        if a.peak_rss_is_largest_process() {
            format!(
                "{}  (the largest process's exact peak: no frame's sum was larger)",
                fmt_bytes(a.peak_rss_bytes)
            )
        } else {
            format!(
                "{}  (largest sum over one frame, at {})",
                fmt_bytes(a.peak_rss_bytes),
                fmt_ms(ns_to_ms(a.peak_rss_t_ns))
            )
        },
    );
    let (at_most, rss_note) = match a.max_single_rss_source {
        RssSource::Rusage => ("", "(ru_maxrss, exact)"),
        RssSource::RusageUpperBound => (
            "at most ",
            "(ru_maxrss, an upper bound: no more than kernelkite's copy of itself held before the exec, which the kernel keeps in it)",
        ),
        RssSource::Samples => ("", "(largest sample)"),
    };
    row(
        "largest process",
        format!("{at_most}{}  {rss_note}", fmt_bytes(a.max_single_rss_bytes)),
    );
    let io_note = if a.processes_without_io > 0 {
        format!(
            "  ({} processes with unreadable /proc/<pid>/io not counted)",
            a.processes_without_io
        )
    } else {
        String::new()
    };
    row("disk read", format!("{}{io_note}", fmt_bytes(a.read_bytes)));
    row(
        "disk write",
        format!("{}{io_note}", fmt_bytes(a.write_bytes)),
    );
    match a.events_lost {
        Some(n) => row(
            "events lost",
            crate::model::lost_text(n, &a.events_lost_by_cause),
        ),
        None => row("events lost", "n/a (proc sampler)".to_string()),
    }
    if let Some(t) = &a.time_accounting {
        row("on_cpu source", on_cpu_source_text(t.on_cpu_source));
        row("kernel accounts", kernel_accounts_text(t));
    }
    if let Some(ns) = a.host_steal_ns {
        row(
            "steal (host-wide)",
            format!(
                "{}  (/proc/stat, every CPU over the window; not attributable to the profiled processes)",
                fmt_ns(ns as f64)
            ),
        );
    }
    if let Some(n) = &a.network {
        row(
            "network (host-wide)",
            format!(
                "rx {}, tx {}  (all interfaces except lo; not attributable to the profiled processes)",
                fmt_bytes(n.rx_bytes),
                fmt_bytes(n.tx_bytes)
            ),
        );
    }
    for (key, value) in a.cgroup.iter().flat_map(cgroup_rows) {
        row(key, value);
    }
    for line in columns(&rows, &[]).lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    if a.frame_cap.frames_dropped > 0 {
        out.push_str(&format!(
            "  warning: frame cap of {} reached, {} frames dropped (the last frame kept being refreshed, so totals are exact; the timeline is truncated)\n",
            a.frame_cap.max_frames, a.frame_cap.frames_dropped
        ));
    }

    out.push('\n');
    if let Some(i) = idle {
        out.push_str(&format!(
            "latency classes (sum over threads but the {} idle ones below; all exact)\n",
            i.idle.len()
        ));
    } else if a.latency_classes_exact {
        out.push_str("latency classes (sum over threads; all exact)\n");
    } else {
        out.push_str(
            "latency classes (sum over threads; on_cpu and runqueue exact from schedstat up to each thread's last sample, the sleep classes estimated from sampled thread states)\n",
        );
    }
    let total = a.latency_classes.total_ns();
    let mut rows = vec![vec![
        "class".to_string(),
        "time".to_string(),
        "share".to_string(),
        String::new(),
    ]];
    for class in LatencyClass::ALL {
        rows.push(vec![
            class.name().to_string(),
            fmt_ns(a.latency_classes.get(class) as f64),
            fmt_share(a.class_share(class)),
            if class == LatencyClass::Steal && !a.steal_measured() {
                "(not measured)".to_string()
            } else if a.class_is_exact(class) {
                String::new()
            } else {
                "(estimated)".to_string()
            },
        ]);
    }
    rows.push(vec![
        "total".to_string(),
        fmt_ns(total as f64),
        fmt_share(if total > 0 { 1.0 } else { 0.0 }),
        String::new(),
    ]);
    for line in columns(&rows, &[1, 2]).lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    if let Some(i) = idle {
        out.push_str(&idle_line(i));
    }
    out.push_str(&steal_text(a));

    out.push('\n');
    out.push_str(&syscalls_text(all_threads, TOP_SYSCALLS));

    out.push('\n');
    // Every process when there are few; otherwise the busiest ones.
    let mut shown: Vec<&crate::analysis::ProcessRow> = a.processes.iter().collect();
    if shown.len() > TOP_PROCESSES {
        shown.sort_by(|x, y| {
            y.cpu_seconds
                .unwrap_or(0.0)
                .total_cmp(&x.cpu_seconds.unwrap_or(0.0))
                .then_with(|| (x.first_seen_ns, x.pid).cmp(&(y.first_seen_ns, y.pid)))
        });
        shown.truncate(TOP_PROCESSES);
        out.push_str(&format!(
            "processes (top {TOP_PROCESSES} of {} by CPU; all in --json and `kernelkite tree`)\n",
            a.processes.len()
        ));
    } else {
        out.push_str("processes\n");
    }
    // With exit accounting, each row says where its figures came from.
    let figures = a.processes_exact_at_exit > 0;
    // Processes in pid namespaces: their pid there too; in several containers, units
    // or cgroups: which.
    let place = |p: &crate::analysis::ProcessRow| p.placement.clone().unwrap_or_default();
    let ns_pids = shown.iter().any(|p| place(p).ns_pid.is_some());
    let groups = a.shows_groups();
    let mut header = vec!["pid"];
    if ns_pids {
        header.push("ns pid");
    }
    header.extend(["ppid", "comm", "seen", "cpu", "peak rss", "read", "write"]);
    if groups {
        header.push("group");
    }
    if figures {
        header.push("figures");
    }
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for p in shown {
        rows.push(vec![
            p.pid.to_string(),
            p.ppid.to_string(),
            // The distinguishing part of its command line (`rustc --crate-name
            // serde`), else its comm.
            super::clean(
                &(p.argv.as_deref())
                    .map(crate::analysis::commands::short_command)
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(|| p.comm.clone()),
            ),
            format!(
                "{}-{}",
                fmt_ms(ns_to_ms(p.first_seen_ns)).trim_end_matches(" ms"),
                fmt_ms(ns_to_ms(p.last_seen_ns))
            ),
            super::or_na(p.cpu_seconds, fmt_secs),
            super::or_na(p.peak_rss_bytes, fmt_bytes),
            // Unreadable /proc/<pid>/io (or never sampled): not measured, not 0 B.
            super::or_na(p.io_visible.then_some(p.read_bytes), fmt_bytes),
            super::or_na(p.io_visible.then_some(p.write_bytes), fmt_bytes),
        ]);
        let row = rows.last_mut().expect("pushed above");
        if ns_pids {
            let ns = place(p).ns_pid.map_or("-".to_string(), |n| n.to_string());
            row.insert(1, ns);
        }
        if groups {
            row.push(super::clean(
                &place(p).group_name().unwrap_or_else(|| "-".into()),
            ));
        }
        if figures {
            let row = rows.last_mut().expect("pushed above");
            row.push(if p.exact_at_exit { "exact" } else { "sampled" }.to_string());
        }
    }
    let shift = usize::from(ns_pids);
    let mut right: Vec<usize> = vec![0, 1, 4 + shift, 5 + shift, 6 + shift, 7 + shift];
    if ns_pids {
        right.push(1);
        right[1] = 2;
    }
    for line in columns(&rows, &right).lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    if a.groups.len() > 1 {
        out.push('\n');
        out.push_str(&groups_text(&a.groups));
    }
    out
}

/// The header rows of a traced cgroup: what it is, and what its own counters say.
pub(super) fn cgroup_rows(
    c: &crate::analysis::cgroup_totals::CgroupTotals,
) -> Vec<(&'static str, String)> {
    let labels = crate::model::cgroup_path::labels(&c.path);
    let mut named = super::clean(&c.path);
    if let Some(id) = &labels.container_id {
        named.push_str(&format!(
            "  (container {}{})",
            crate::model::cgroup_path::short_container_id(id),
            labels.runtime.map(|r| format!(", {r}")).unwrap_or_default()
        ));
    }
    let mut rows = vec![("cgroup", named)];
    let ns = |v: Option<u64>| v.map_or("n/a".to_string(), |v| fmt_ns(v as f64));
    if let (Some(periods), Some(throttled)) = (c.cpu_periods, c.cpu_throttled_periods) {
        rows.push((
            "cgroup throttled",
            format!(
                "{} in {throttled} of {periods} periods of its CPU limit  (cpu.stat; its runnable threads wait for the next period: runqueue)",
                ns(c.cpu_throttled_ns)
            ),
        ));
    }
    let pressure = |some: Option<u64>, full: Option<u64>| match (some, full) {
        (None, None) => "n/a".to_string(),
        _ => format!("some {} full {}", ns(some), ns(full)),
    };
    rows.push((
        "cgroup pressure",
        format!(
            "cpu {}; io {}; memory {}  (PSI stall time over the session)",
            pressure(c.cpu_some_ns, c.cpu_full_ns),
            pressure(c.io_some_ns, c.io_full_ns),
            pressure(c.memory_some_ns, c.memory_full_ns)
        ),
    ));
    rows
}

/// The processes by container, unit or cgroup.
fn groups_text(groups: &[crate::analysis::placement::GroupRow]) -> String {
    let mut out = String::from("by container, unit or cgroup\n");
    let mut rows = vec![["group", "processes", "cpu", "dominant class", "cgroup"]
        .map(str::to_string)
        .to_vec()];
    for g in groups {
        let total = g.classes.total_ns();
        let dominant = LatencyClass::ALL
            .into_iter()
            .max_by_key(|c| g.classes.get(*c))
            .filter(|_| total > 0)
            .map_or("-".to_string(), |c| {
                format!(
                    "{} {}",
                    c.name(),
                    fmt_share(g.classes.get(c) as f64 / total as f64)
                )
            });
        rows.push(vec![
            super::clean(&g.name),
            g.processes.to_string(),
            fmt_secs(g.cpu_seconds),
            dominant,
            super::clean(g.cgroup.as_deref().unwrap_or("-")),
        ]);
    }
    for line in columns(&rows, &[1, 2]).lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Where on_cpu came from, in words.
fn on_cpu_source_text(source: OnCpuSource) -> String {
    match source {
        OnCpuSource::SumExecRuntime => {
            "sum_exec_runtime (the kernel's accounted runtime, as rusage and schedstat; tp_btf hooks)"
        }
        OnCpuSource::Clock => {
            "clock (switch-in to switch-out, classic tracepoints: steal and irq time are inside on_cpu, steal is not measured)"
        }
        OnCpuSource::Schedstat => "schedstat field 1 (the kernel's accounted runtime; /proc sampler)",
    }
    .to_string()
}

/// What the kernel leaves out of a task's runtime, and whether delay accounting ran.
fn kernel_accounts_text(t: &TimeAccounting) -> String {
    let part = |what: &str, accounted: Option<bool>| match accounted {
        Some(true) => format!("{what} apart"),
        Some(false) => format!("{what} as task time"),
        None => format!("{what} unknown"),
    };
    let delay = match t.delay_accounting {
        Some(true) => "delay accounting on",
        Some(false) => "delay accounting off",
        None => "no delay accounting",
    };
    let from = t.kernel_config.as_deref().map_or_else(
        || "no kernel config".to_string(),
        |c| format!("config from {c}"),
    );
    format!(
        "{}, {}, {delay}  ({from})",
        part("hypervisor steal", t.steal_accounted),
        part("irq time", t.irq_time_accounted),
    )
}

/// The threads with the most steal, when any has some: the feature /proc/stat cannot
/// give (it is host-wide there).
fn steal_text(a: &Analysis) -> String {
    let threads = a.steal_threads();
    if threads.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    if threads.len() > TOP_STEAL_THREADS {
        out.push_str(&format!(
            "  steal by thread (top {TOP_STEAL_THREADS} of {}; all in --json): time a thread was current on a CPU the kernel did not run it (hypervisor steal, irq time)\n",
            threads.len()
        ));
    } else {
        out.push_str(
            "  steal by thread: time a thread was current on a CPU the kernel did not run it (hypervisor steal, irq time)\n",
        );
    }
    let mut rows = vec![["pid", "tid", "comm", "on_cpu", "steal", "of on_cpu+steal"]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()];
    for t in threads.iter().take(TOP_STEAL_THREADS) {
        let running = t.classes.on_cpu + t.classes.steal;
        rows.push(vec![
            t.pid.to_string(),
            t.tid.to_string(),
            super::clean(&t.comm),
            fmt_ns(t.classes.on_cpu as f64),
            fmt_ns(t.classes.steal as f64),
            fmt_share(t.classes.steal as f64 / running as f64),
        ]);
    }
    for line in columns(&rows, &[0, 1, 3, 4, 5]).lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// How much of the sleep classes the syscall table's time explains: one line, or
/// `None` when they had no time. The histograms are per syscall, not per class, so the
/// share is of the three classes together (a call's time also holds its on-CPU part),
/// summed over every thread, idle ones included, as the histograms are.
fn explained_text(a: &Analysis) -> Option<String> {
    use kernelkite_common::LatencyClass::{IoWait, LockWait, SyscallBlocked};
    let classes: Vec<(LatencyClass, u64)> = [SyscallBlocked, IoWait, LockWait]
        .into_iter()
        .map(|c| (c, a.latency_classes.get(c)))
        .filter(|&(_, ns)| ns > 0)
        .collect();
    let sleep_ns: u64 = classes.iter().map(|&(_, ns)| ns).sum();
    if sleep_ns == 0 {
        return None;
    }
    let calls_ns = a
        .syscalls
        .iter()
        .fold(0u64, |t, s| t.saturating_add(s.total_ns));
    let names: Vec<String> = classes
        .iter()
        .map(|(c, ns)| format!("{} {}", c.name(), fmt_ns(*ns as f64)))
        .collect();
    Some(format!(
        "  all the calls in the table take {} = {:.1}% of every thread's time in syscall sleep classes ({}); a call's time includes its on-CPU part\n",
        fmt_ns(calls_ns as f64),
        calls_ns as f64 / sleep_ns as f64 * 100.0,
        names.join(", ")
    ))
}

/// The top syscalls by total time (`a.syscalls` is sorted that way) as an indented
/// table with its heading; `trace` prints the same table.
pub fn syscalls_text(a: &Analysis, top: usize) -> String {
    let mut out = String::new();
    if a.syscalls.is_empty() {
        out.push_str(match a.backend {
            crate::model::Backend::Proc => {
                "syscalls: none recorded (syscall histograms come from the eBPF backend)\n"
            }
            crate::model::Backend::Ebpf => "syscalls: none made inside the session\n",
        });
    } else {
        out.push_str(&format!(
            "top syscalls by total time (percentiles are histogram bucket midpoints, within ±{:.2}%)\n",
            a.histogram_relative_error * 100.0
        ));
        let mut rows = vec![["syscall", "count", "total", "p50", "p95", "p99", "max"]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()];
        for s in a.syscalls.iter().take(top) {
            rows.push(vec![
                super::clean(&s.label()),
                s.count.to_string(),
                fmt_ns(s.total_ns as f64),
                fmt_ns(s.p50_ns as f64),
                fmt_ns(s.p95_ns as f64),
                fmt_ns(s.p99_ns as f64),
                fmt_ns(s.max_ns as f64),
            ]);
        }
        for line in columns(&rows, &[1, 2, 3, 4, 5, 6]).lines() {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
        if a.syscalls.len() > top {
            out.push_str(&format!(
                "  ... {} more in --json\n",
                a.syscalls.len() - top
            ));
        }
        if a.syscalls.iter().any(|s| s.state.in_progress()) {
            out.push_str(
                "  (in progress: calls still running at the end, with their time so far; since start: running when tracing began, with the part inside the session)\n",
            );
        }
        if let Some(line) = explained_text(a) {
            out.push_str(&line);
        }
    }

    out
}

/// The idle threads on their own line: how many, their time, the first few by name.
fn idle_line(i: &IdleSplit) -> String {
    const SHOWN: usize = 6;
    let names: Vec<String> = (i.idle.iter().take(SHOWN))
        .map(|(_, tid, comm, _)| format!("{comm} ({tid})"))
        .collect();
    let more = if i.idle.len() > SHOWN {
        format!(", {} more", i.idle.len() - SHOWN)
    } else {
        String::new()
    };
    format!(
        "  idle threads     {}, {} in all, asleep through the session or never woken (not in the table): {}{more}\n",
        i.idle.len(),
        fmt_ns(i.idle_classes.total_ns() as f64),
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Backend, Bundle, Frame, HostConstants, ProcessSample};

    /// With idle threads split off, the class table is the busy threads', but the
    /// syscall histograms hold every thread's calls: the explained share is of every
    /// thread's sleep classes (it once read 338.9% on a cargo build).
    #[test]
    fn the_explained_share_is_of_every_threads_classes_with_an_idle_split() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/run-ebpf-critical-path.bundle.json");
        let b = crate::model::load_bundle(&path).unwrap();
        let a = crate::analysis::analyze(&b);
        // From the recording, added up outside kernelkite (python over the JSON): its
        // syscalls' total_ns is 3_512_342_624; its three exit records' syscall_blocked,
        // io_wait and lock_wait add up to 50_067_630 + 3_504_540_259 = 3_554_607_889.
        let calls_ns: u64 = a.syscalls.iter().map(|s| s.total_ns).sum();
        assert_eq!(calls_ns, 3_512_342_624);
        // An idle split whose busy threads slept a tenth as long.
        let mut busy = a.latency_classes;
        busy.syscall_blocked /= 10;
        busy.io_wait /= 10;
        busy.lock_wait /= 10;
        let split = IdleSplit {
            idle: vec![(1, 1, "idle".into(), 1)],
            idle_classes: crate::model::ClassTimes::default(),
            busy_classes: busy,
        };
        let text = summary_text_with(&a, Some(&split));
        // 3_512_342_624 / 3_554_607_889 (of the busy threads' tenth it would be 988%).
        let want = "= 98.8% of every thread's time in syscall sleep classes";
        assert!(text.contains(want), "{want}\n{text}");
    }

    #[test]
    fn long_process_lists_show_the_busiest() {
        let host = HostConstants {
            clock_ticks_per_sec: 100,
            page_size_bytes: 4096,
            num_cpus: 1,
            kernel_release: None,
            arch: "x86_64".into(),
            time_accounting: None,
        };
        let mut b = Bundle::new(Backend::Proc, host, 100);
        let processes = (0..30)
            .map(|i| ProcessSample {
                pid: 100 + i,
                ppid: 1,
                comm: format!("job{i}").into(),
                state: "R".into(),
                start_time_ticks: 10,
                utime_ticks: i as u64,
                stime_ticks: 0,
                cutime_ticks: 0,
                cstime_ticks: 0,
                rss_pages: 1,
                num_threads: 1,
                io: None,
                threads: Vec::new(),
            })
            .collect();
        b.frames = vec![Frame {
            t_ns: 0,
            processes,
            network: None,
            host_steal_ticks: None,
        }];
        b.launched = Some(crate::model::LaunchedCommand {
            argv: vec!["make".into()],
            pid: 1,
            exit_code: Some(0),
            signal: None,
            untraced_cpu_ns: None,
            max_rss_upper_bound: false,
            rusage: None,
        });
        let text = summary_text(&crate::analysis::analyze(&b));
        assert!(text.contains("processes (top 20 of 30 by CPU"), "{text}");
        assert!(text.contains("job29") && text.contains("job10") && !text.contains("job9 "));
        assert!(text.contains("30 processes with unreadable /proc/<pid>/io"));
    }
}
