//! Per-frame time series of a bundle, shared by `kernelkite viewer` (JSON) and
//! `kernelkite report` (HTML): CPU use, resident memory, disk and host network traffic
//! per interval, and the lifetime of every observed process.
//!
//! Pure: `&Bundle` in, numbers out. Works on any bundle, validated or not: a cumulative
//! counter that goes backwards between two frames (which validation rejects) is treated
//! as absent for that interval instead of underflowing.
//!
//! Frames that share a timestamp are collapsed to the last of them, so every interval
//! has a positive length.
//!
//! A process is identified by `(pid, start_time_ticks)`: a pid seen again with another
//! start time is a new process (pid reuse).

use std::collections::{BTreeMap, BTreeSet};

use super::{Analysis, ReapFold};
use crate::model::{Bundle, Frame, IoCounters, LifecycleKind, ProcessSample};

/// Values sampled at instants (one per distinct frame time).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstantSeries<T> {
    /// Frame times, ns since the session start, strictly increasing.
    pub t_ns: Vec<u64>,
    /// `values[i]` holds at `t_ns[i]`.
    pub values: Vec<T>,
}

/// Values over the intervals between consecutive distinct frame times.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntervalSeries<T> {
    /// Interval starts (the earlier frame's time).
    pub start_ns: Vec<u64>,
    /// Interval ends (the later frame's time); `end_ns[i] > start_ns[i]`.
    pub end_ns: Vec<u64>,
    /// `values[i]` covers `start_ns[i]..end_ns[i]`.
    pub values: Vec<T>,
}

impl<T> IntervalSeries<T> {
    fn push(&mut self, start: u64, end: u64, value: T) {
        self.start_ns.push(start);
        self.end_ns.push(end);
        self.values.push(value);
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// One process's life as observed by the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSpan {
    pub pid: i32,
    /// Parent at the last sample (or from the fork event when never sampled).
    pub ppid: i32,
    /// Command name at the last sample, or after the last exec event.
    pub comm: String,
    /// With `pid`, the process's identity; `None` when it was only seen in lifecycle
    /// events (born and dead between two frames).
    pub start_time_ticks: Option<u64>,
    /// First and last frame the process was sampled in; `None` when never sampled.
    pub first_seen_ns: Option<u64>,
    pub last_seen_ns: Option<u64>,
    /// Number of frames the process was sampled in.
    pub samples: u64,
    /// Fork time from a lifecycle event, when the kernel reported it.
    pub fork_ns: Option<u64>,
    /// Exit time of its main thread from a lifecycle event, when the kernel reported it.
    pub exit_ns: Option<u64>,
    /// Exit code from that exit event.
    pub exit_code: Option<i32>,
    /// Sampled in the last frame and no exit event: still running when the session ended.
    pub alive_at_end: bool,
}

impl ProcessSpan {
    /// Best-known start: the fork time, else the first sample.
    pub fn start_ns(&self) -> u64 {
        self.fork_ns.or(self.first_seen_ns).unwrap_or(0)
    }

    /// Best-known end: the exit time, else the last sample.
    pub fn end_ns(&self) -> u64 {
        self.exit_ns
            .or(self.last_seen_ns)
            .unwrap_or_else(|| self.start_ns())
            .max(self.start_ns())
    }
}

/// Every per-frame series of a bundle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// Session start and end, ns: the first and last frame times (0, 0 without frames).
    pub start_ns: u64,
    pub end_ns: u64,
    /// CPU use of the observed tree, in cores: Δ(utime+stime) of the processes sampled
    /// in both frames, divided by the interval. eBPF bundles: Δ of every thread's exact
    /// `on_cpu` (threads that exited inside the interval counted from their exit record).
    pub cpu_cores: IntervalSeries<f64>,
    /// Sum of the resident set sizes of the processes in each frame, bytes.
    pub rss_bytes: InstantSeries<u64>,
    /// Number of processes in each frame.
    pub process_count: InstantSeries<u64>,
    /// Δ io.read_bytes (storage reads) of the processes with readable io in both frames.
    pub disk_read_bytes: IntervalSeries<u64>,
    /// Δ io.write_bytes (storage writes), likewise.
    pub disk_write_bytes: IntervalSeries<u64>,
    /// Host-wide Δ rx/tx bytes over every interface but `lo`, when the bundle recorded
    /// /proc/net/dev (`--network`); intervals where either frame lacks it are left out.
    pub net_rx_bytes: Option<IntervalSeries<u64>>,
    pub net_tx_bytes: Option<IntervalSeries<u64>>,
    /// Every process, ordered by start, then pid.
    pub processes: Vec<ProcessSpan>,
}

type Key = (i32, u64);

/// eBPF bundles: on-CPU nanoseconds of every interval between consecutive frames, from
/// the threads' cumulative `class_ns.on_cpu` (0 when tracking started) and, for threads
/// that exited inside an interval, their exit record's final value.
fn on_cpu_per_interval(bundle: &Bundle, frames: &[&crate::model::Frame]) -> Vec<u64> {
    use crate::model::LifecycleKind;
    let mut last: BTreeMap<(i32, i32), u64> = BTreeMap::new();
    let mut exits = bundle
        .lifecycle
        .iter()
        .filter(|e| e.kind == LifecycleKind::Exit)
        .filter_map(|e| e.class_ns.map(|c| (e.t_ns, e.pid, e.tid, c.on_cpu)))
        .collect::<Vec<_>>();
    exits.sort_unstable();
    let mut next_exit = 0;
    // A thread's on-CPU time since it was last seen, remembering its new total.
    fn seen(last: &mut BTreeMap<(i32, i32), u64>, key: (i32, i32), total: u64) -> u64 {
        let before = last.insert(key, total).unwrap_or(0);
        total.saturating_sub(before)
    }
    if let Some(first) = frames.first() {
        for p in &first.processes {
            for t in &p.threads {
                if let Some(c) = t.class_ns {
                    seen(&mut last, (p.pid, t.tid), c.on_cpu);
                }
            }
        }
        while next_exit < exits.len() && exits[next_exit].0 <= first.t_ns {
            let (_, pid, tid, on_cpu) = exits[next_exit];
            seen(&mut last, (pid, tid), on_cpu);
            next_exit += 1;
        }
    }
    let mut out = Vec::new();
    for pair in frames.windows(2) {
        let b = pair[1];
        let mut ns = 0u64;
        while next_exit < exits.len() && exits[next_exit].0 <= b.t_ns {
            let (_, pid, tid, on_cpu) = exits[next_exit];
            ns = ns.saturating_add(seen(&mut last, (pid, tid), on_cpu));
            next_exit += 1;
        }
        for p in &b.processes {
            for t in &p.threads {
                if let Some(c) = t.class_ns {
                    ns = ns.saturating_add(seen(&mut last, (p.pid, t.tid), c.on_cpu));
                }
            }
        }
        out.push(ns);
    }
    out
}

/// Extract every series of `bundle`, using two facts the analysis derived:
///
/// * processes that **started inside the session** (`ProcessRow::started_in_session`)
///   and first appear after the first frame count their whole first sample (CPU and
///   I/O since they started) in the interval before it — otherwise a process shorter
///   than a few frames would be missing from the charts;
/// * **reap folds** (`Analysis::reap_folds`): a child's I/O the kernel added to its
///   reaper's counters is taken out of the reaper's delta where it landed, so the
///   child's bytes count once.
///
/// With `None`, the series are the raw deltas of processes sampled in both frames.
pub fn extract(bundle: &Bundle, analysis: Option<&Analysis>) -> Timeline {
    let reap_folds: &[ReapFold] = analysis.map_or(&[], |a| a.reap_folds.as_slice());
    let started_inside: BTreeSet<Key> = analysis
        .map(|a| {
            a.processes
                .iter()
                .filter(|r| r.started_in_session)
                .map(|r| (r.pid, r.start_time_ticks))
                .collect()
        })
        .unwrap_or_default();
    let frames = distinct_frames(&bundle.frames);
    let mut tl = Timeline {
        start_ns: frames.first().map_or(0, |f| f.t_ns),
        end_ns: frames.last().map_or(0, |f| f.t_ns),
        ..Timeline::default()
    };
    let page = bundle.host.page_size_bytes;
    let hz = bundle.host.clock_ticks_per_sec;

    for f in &frames {
        let rss = f.processes.iter().fold(0u64, |a, p| {
            a.saturating_add(p.rss_pages.saturating_mul(page))
        });
        tl.rss_bytes.t_ns.push(f.t_ns);
        tl.rss_bytes.values.push(rss);
        tl.process_count.t_ns.push(f.t_ns);
        tl.process_count.values.push(f.processes.len() as u64);
    }

    // (reaper pid, reaper start time, frame time where the fold shows) → (read, write).
    let mut folds: BTreeMap<(i32, u64, u64), (u64, u64)> = BTreeMap::new();
    for f in reap_folds {
        let e = folds
            .entry((f.reaper_pid, f.reaper_start_time_ticks, f.folded_by_ns))
            .or_default();
        e.0 = e.0.saturating_add(f.read_bytes);
        e.1 = e.1.saturating_add(f.write_bytes);
    }

    let has_network = frames.iter().any(|f| f.network.is_some());
    let mut rx = IntervalSeries::default();
    let mut tx = IntervalSeries::default();
    let mut seen: BTreeSet<Key> = frames
        .first()
        .map(|f| {
            f.processes
                .iter()
                .map(|p| (p.pid, p.start_time_ticks))
                .collect()
        })
        .unwrap_or_default();
    let exact_on_cpu = (bundle.backend == crate::model::Backend::Ebpf)
        .then(|| on_cpu_per_interval(bundle, &frames));
    for (i, pair) in frames.windows(2).enumerate() {
        let (a, b) = (pair[0], pair[1]);
        let dt_ns = b.t_ns - a.t_ns; // > 0: frames are distinct and ordered
        let before: BTreeMap<Key, &ProcessSample> = a
            .processes
            .iter()
            .map(|p| ((p.pid, p.start_time_ticks), p))
            .collect();
        let (mut ticks, mut read, mut write) = (0u64, 0u64, 0u64);
        for p in &b.processes {
            let key = (p.pid, p.start_time_ticks);
            let new_here = seen.insert(key);
            let (then, io_then) = match before.get(&key) {
                Some(q) => (q.utime_ticks.saturating_add(q.stime_ticks), q.io),
                // Started inside the session, first sampled now: everything it counted
                // happened since the previous frame.
                None if new_here && started_inside.contains(&key) => {
                    (0, Some(IoCounters::default()))
                }
                None => continue,
            };
            let now = p.utime_ticks.saturating_add(p.stime_ticks);
            ticks = ticks.saturating_add(now.saturating_sub(then));
            if let (Some(i0), Some(i1)) = (io_then, p.io) {
                let (fr, fw) = folds
                    .get(&(p.pid, p.start_time_ticks, b.t_ns))
                    .copied()
                    .unwrap_or((0, 0));
                let dr = i1.read_bytes.saturating_sub(i0.read_bytes);
                let dw = i1.write_bytes.saturating_sub(i0.write_bytes);
                read = read.saturating_add(dr.saturating_sub(fr));
                write = write.saturating_add(dw.saturating_sub(fw));
            }
        }
        let cores = match &exact_on_cpu {
            Some(on_cpu_ns) => round6(on_cpu_ns[i] as f64 / dt_ns as f64),
            None if hz == 0 => 0.0,
            None => round6(ticks as f64 / hz as f64 / (dt_ns as f64 / 1e9)),
        };
        tl.cpu_cores.push(a.t_ns, b.t_ns, cores);
        tl.disk_read_bytes.push(a.t_ns, b.t_ns, read);
        tl.disk_write_bytes.push(a.t_ns, b.t_ns, write);
        if let (Some(na), Some(nb)) = (&a.network, &b.network) {
            let (r, t) = net_delta(na, nb);
            rx.push(a.t_ns, b.t_ns, r);
            tx.push(a.t_ns, b.t_ns, t);
        }
    }
    if has_network {
        tl.net_rx_bytes = Some(rx);
        tl.net_tx_bytes = Some(tx);
    }
    tl.processes = spans(bundle, &frames);
    tl
}

/// The frames in time order with equal timestamps collapsed to the last one.
fn distinct_frames(frames: &[Frame]) -> Vec<&Frame> {
    let mut out: Vec<&Frame> = Vec::with_capacity(frames.len());
    for f in frames {
        match out.last_mut() {
            Some(last) if last.t_ns == f.t_ns => *last = f,
            // An out-of-order frame (rejected by validation) is skipped.
            Some(last) if last.t_ns > f.t_ns => {}
            _ => out.push(f),
        }
    }
    out
}

fn net_delta(a: &[crate::model::NetDevCounters], b: &[crate::model::NetDevCounters]) -> (u64, u64) {
    let (mut rx, mut tx) = (0u64, 0u64);
    for nb in b.iter().filter(|n| n.interface != "lo") {
        if let Some(na) = a.iter().find(|n| n.interface == nb.interface) {
            rx = rx.saturating_add(nb.rx_bytes.saturating_sub(na.rx_bytes));
            tx = tx.saturating_add(nb.tx_bytes.saturating_sub(na.tx_bytes));
        }
    }
    (rx, tx)
}

fn round6(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1e6).round() / 1e6
    } else {
        0.0
    }
}

/// Process spans from the frames, refined (and completed) by the lifecycle events.
fn spans(bundle: &Bundle, frames: &[&Frame]) -> Vec<ProcessSpan> {
    let last_t = frames.last().map(|f| f.t_ns);
    let mut by_key: BTreeMap<Key, ProcessSpan> = BTreeMap::new();
    for f in frames {
        for p in &f.processes {
            let span = by_key
                .entry((p.pid, p.start_time_ticks))
                .or_insert_with(|| ProcessSpan {
                    pid: p.pid,
                    ppid: p.ppid,
                    comm: p.comm.to_string(),
                    start_time_ticks: Some(p.start_time_ticks),
                    first_seen_ns: Some(f.t_ns),
                    last_seen_ns: Some(f.t_ns),
                    samples: 0,
                    fork_ns: None,
                    exit_ns: None,
                    exit_code: None,
                    alive_at_end: false,
                });
            span.ppid = p.ppid;
            if span.comm != p.comm {
                span.comm = p.comm.to_string();
            }
            span.last_seen_ns = Some(f.t_ns);
            span.samples += 1;
        }
    }
    // Incarnations of each pid in order of first sample.
    let mut spans: Vec<ProcessSpan> = by_key.into_values().collect();
    spans.sort_by_key(|s| (s.pid, s.first_seen_ns, s.start_time_ticks));

    // Lifecycle events about whole processes (the main thread), in time order.
    let mut events: Vec<&crate::model::LifecycleEvent> =
        bundle.lifecycle.iter().filter(|e| e.tid == e.pid).collect();
    events.sort_by_key(|e| e.t_ns); // stable: equal times keep their recorded order
    let mut used = vec![false; events.len()];
    // Indices into `events` of each pid's events, in time order.
    let mut by_pid: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (j, e) in events.iter().enumerate() {
        by_pid.entry(e.pid).or_default().push(j);
    }
    let none: Vec<usize> = Vec::new();

    // Attach fork/exit events to sampled incarnations: a fork belongs to the incarnation
    // if it happened after the previous incarnation's last sample and no later than this
    // one's first; an exit, at or after this one's first sample (a zombie is sampled
    // after its exit) and before the next one's first.
    for i in 0..spans.len() {
        let pid = spans[i].pid;
        let mine = by_pid.get(&pid).unwrap_or(&none);
        let prev_last = (i > 0 && spans[i - 1].pid == pid)
            .then(|| spans[i - 1].last_seen_ns)
            .flatten();
        let next_first = spans
            .get(i + 1)
            .filter(|s| s.pid == pid)
            .and_then(|s| s.first_seen_ns);
        let first = spans[i].first_seen_ns.unwrap_or(0);
        let last = spans[i].last_seen_ns.unwrap_or(0);
        let after_prev = |t: u64| prev_last.is_none_or(|p| t > p);
        let before_next = |t: u64| next_first.is_none_or(|n| t < n);
        // The latest fork in range.
        let fork = mine.iter().rev().copied().find(|&j| {
            let e = events[j];
            !used[j] && e.kind == LifecycleKind::Fork && e.t_ns <= first && after_prev(e.t_ns)
        });
        if let Some(j) = fork {
            used[j] = true;
            spans[i].fork_ns = Some(events[j].t_ns);
        }
        // At or after its first sample: a zombie can be sampled after its exit.
        let exit = mine.iter().copied().find(|&j| {
            let e = events[j];
            !used[j] && e.kind == LifecycleKind::Exit && e.t_ns >= first && before_next(e.t_ns)
        });
        if let Some(j) = exit {
            used[j] = true;
            spans[i].exit_ns = Some(events[j].t_ns);
            spans[i].exit_code = events[j].exit_code;
        }
        // Execs inside the incarnation: those after its last sample rename it, earlier
        // ones are already reflected in the sampled comm.
        let end = spans[i].exit_ns.unwrap_or(u64::MAX);
        for &j in mine {
            let e = events[j];
            if used[j] || e.kind != LifecycleKind::Exec {
                continue;
            }
            if e.t_ns > last && e.t_ns <= end && before_next(e.t_ns) {
                spans[i].comm.clone_from(&e.comm);
                used[j] = true;
            } else if e.t_ns <= last && after_prev(e.t_ns) {
                used[j] = true;
            }
        }
        spans[i].alive_at_end = spans[i].exit_ns.is_none() && spans[i].last_seen_ns == last_t;
    }

    // Processes only seen in lifecycle events: a fork, then exec(s) and an exit.
    for j in 0..events.len() {
        let e = events[j];
        if used[j] || e.kind == LifecycleKind::Exit {
            continue;
        }
        // A lone exec (no fork, never sampled) starts the span at the exec.
        used[j] = true;
        let mut span = ProcessSpan {
            pid: e.pid,
            ppid: e.ppid,
            comm: e.comm.clone(),
            start_time_ticks: None,
            first_seen_ns: None,
            last_seen_ns: None,
            samples: 0,
            fork_ns: Some(e.t_ns),
            exit_ns: None,
            exit_code: None,
            alive_at_end: false,
        };
        let mine = by_pid.get(&e.pid).unwrap_or(&none);
        let pos = mine.partition_point(|&k| k <= j);
        for &k in &mine[pos..] {
            let f = events[k];
            if used[k] {
                continue;
            }
            match f.kind {
                LifecycleKind::Fork => break, // a new incarnation of this pid
                LifecycleKind::Exec => {
                    used[k] = true;
                    span.comm.clone_from(&f.comm);
                }
                LifecycleKind::Exit => {
                    used[k] = true;
                    span.exit_ns = Some(f.t_ns);
                    span.exit_code = f.exit_code;
                    break;
                }
            }
        }
        spans.push(span);
    }

    spans.sort_by(|a, b| {
        (a.start_ns(), a.pid, a.start_time_ticks).cmp(&(b.start_ns(), b.pid, b.start_time_ticks))
    });
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Backend, IoCounters, LifecycleEvent, NetDevCounters};

    use crate::model::test_builders::{bundle, frame};

    fn proc_(
        pid: i32,
        start: u64,
        cpu_ticks: u64,
        rss_pages: u64,
        io: Option<(u64, u64)>,
    ) -> ProcessSample {
        ProcessSample {
            pid,
            ppid: 1,
            comm: format!("p{pid}").into(),
            state: "R".into(),
            start_time_ticks: start,
            utime_ticks: cpu_ticks,
            stime_ticks: 0,
            cutime_ticks: 0,
            cstime_ticks: 0,
            rss_pages,
            num_threads: 1,
            io: io.map(|(r, w)| IoCounters {
                read_bytes: r,
                write_bytes: w,
                ..IoCounters::default()
            }),
            threads: Vec::new(),
        }
    }

    #[test]
    fn ebpf_cpu_comes_from_exact_on_cpu_including_threads_that_exited_between_frames() {
        use crate::model::{ClassTimes, LifecycleKind, ThreadSample};
        let thread = |tid: i32, on_cpu_ms: u64| ThreadSample {
            tid,
            comm: "t".into(),
            state: "S".into(),
            schedstat: None,
            syscall_nr: None,
            class_ns: Some(ClassTimes {
                on_cpu: on_cpu_ms * 1_000_000,
                ..ClassTimes::default()
            }),
        };
        let with_threads = |threads: Vec<ThreadSample>| {
            let mut p = proc_(10, 5, 0, 1, None);
            p.threads = threads;
            p
        };
        let mut b = bundle(vec![
            frame(0, vec![with_threads(vec![thread(10, 0), thread(11, 0)])]),
            frame(
                100,
                vec![with_threads(vec![thread(10, 50), thread(11, 20)])],
            ),
            frame(200, vec![with_threads(vec![thread(10, 60)])]),
        ]);
        b.backend = Backend::Ebpf;
        // Thread 11 ran 30 ms more after the second frame, then exited at 150 ms; a
        // process that lived only between frames ran 40 ms.
        for (pid, tid, t_ms, on_cpu_ms) in [(10, 11, 150, 50), (20, 20, 170, 40)] {
            b.lifecycle.push(LifecycleEvent {
                t_ns: t_ms * 1_000_000,
                kind: LifecycleKind::Exit,
                pid,
                tid,
                ppid: 10,
                comm: "t".into(),
                exit_code: Some(0),
                class_ns: Some(ClassTimes {
                    on_cpu: on_cpu_ms * 1_000_000,
                    ..ClassTimes::default()
                }),
            });
        }
        let tl = extract(&b, None);
        // (50 + 20) ms in the first 100 ms; (10 + 30 + 40) ms in the second.
        assert_eq!(tl.cpu_cores.values, vec![0.7, 0.8]);
    }

    #[test]
    fn cpu_rss_and_disk_per_interval() {
        let b = bundle(vec![
            frame(0, vec![proc_(10, 5, 0, 100, Some((0, 0)))]),
            // 50 ticks = 0.5 s of CPU in 0.5 s: one core.
            frame(
                500,
                vec![
                    proc_(10, 5, 50, 200, Some((4096, 8192))),
                    proc_(11, 7, 30, 10, None),
                ],
            ),
            // pid 11 appeared in the previous frame: its 30 → 130 ticks count now.
            frame(
                1500,
                vec![
                    proc_(10, 5, 150, 200, Some((4096, 8192))),
                    proc_(11, 7, 130, 10, None),
                ],
            ),
        ]);
        let tl = extract(&b, None);
        assert_eq!(tl.start_ns, 0);
        assert_eq!(tl.end_ns, 1_500_000_000);
        assert_eq!(tl.cpu_cores.values, vec![1.0, 2.0]);
        assert_eq!(tl.cpu_cores.start_ns, vec![0, 500_000_000]);
        assert_eq!(tl.cpu_cores.end_ns, vec![500_000_000, 1_500_000_000]);
        assert_eq!(
            tl.rss_bytes.values,
            vec![100 * 4096, 210 * 4096, 210 * 4096]
        );
        assert_eq!(tl.process_count.values, vec![1, 2, 2]);
        assert_eq!(tl.disk_read_bytes.values, vec![4096, 0]);
        assert_eq!(tl.disk_write_bytes.values, vec![8192, 0]);
        assert!(tl.net_rx_bytes.is_none());
        assert_eq!(tl.processes.len(), 2);
        assert_eq!(tl.processes[0].pid, 10);
        assert!(tl.processes[0].alive_at_end);
        assert_eq!(tl.processes[1].first_seen_ns, Some(500_000_000));
    }

    #[test]
    fn pid_reuse_is_two_processes_and_does_not_count_cpu_across_incarnations() {
        let b = bundle(vec![
            frame(0, vec![proc_(10, 5, 1000, 1, Some((1000, 1000)))]),
            // Same pid, new start time: a new process with small counters. Without the
            // start time in the key this would be a huge underflow or a negative delta.
            frame(100, vec![proc_(10, 9, 3, 1, Some((0, 0)))]),
            frame(200, vec![proc_(10, 9, 8, 1, Some((10, 0)))]),
        ]);
        let tl = extract(&b, None);
        assert_eq!(tl.cpu_cores.values, vec![0.0, 0.5]);
        assert_eq!(tl.disk_read_bytes.values, vec![0, 10]);
        assert_eq!(tl.processes.len(), 2);
        let (a, c) = (&tl.processes[0], &tl.processes[1]);
        assert_eq!(
            (a.start_time_ticks, a.first_seen_ns, a.last_seen_ns),
            (Some(5), Some(0), Some(0))
        );
        assert!(!a.alive_at_end);
        assert_eq!(
            (c.start_time_ticks, c.first_seen_ns, c.last_seen_ns),
            (Some(9), Some(100_000_000), Some(200_000_000))
        );
        assert!(c.alive_at_end);
    }

    #[test]
    fn reaped_childrens_io_is_not_counted_twice() {
        let mut child = proc_(11, 6, 0, 1, Some((0, 0)));
        child.ppid = 10;
        let mut child1 = proc_(11, 6, 0, 1, Some((5000, 700)));
        child1.ppid = 10;
        let b = bundle(vec![
            frame(0, vec![proc_(10, 5, 0, 1, Some((100, 0))), child]),
            frame(100, vec![proc_(10, 5, 0, 1, Some((100, 0))), child1]),
            // The child was reaped: the parent's counters absorb its 5000/700 bytes (and a
            // 100-byte unseen tail); the parent itself read 10 bytes.
            frame(200, vec![proc_(10, 5, 0, 1, Some((100 + 5100 + 10, 700)))]),
        ]);
        let a = crate::analysis::analyze(&b);
        assert_eq!(a.reap_folds.len(), 1, "{:?}", a.reap_folds);
        let tl = extract(&b, Some(&a));
        assert_eq!(tl.disk_read_bytes.values, vec![5000, 110]);
        assert_eq!(tl.disk_write_bytes.values, vec![700, 0]);
        // The series add up to the analysis totals.
        let sum: u64 = tl.disk_read_bytes.values.iter().sum();
        assert_eq!(sum, a.read_bytes);
        // Without the folds the child's bytes show twice.
        let raw = extract(&b, None);
        assert_eq!(raw.disk_read_bytes.values, vec![5000, 5110]);
    }

    #[test]
    fn processes_started_inside_count_from_their_first_sample() {
        let b = bundle(vec![
            frame(0, vec![proc_(10, 5, 0, 1, Some((0, 0)))]),
            // pid 11 was born after frame 0: its 5 ticks and 1000 bytes are this interval's.
            frame(
                100,
                vec![
                    proc_(10, 5, 0, 1, Some((0, 0))),
                    proc_(11, 9, 5, 1, Some((1000, 0))),
                ],
            ),
            frame(
                200,
                vec![
                    proc_(10, 5, 0, 1, Some((0, 0))),
                    proc_(11, 9, 15, 1, Some((1500, 0))),
                ],
            ),
        ]);
        let a = crate::analysis::analyze(&b);
        let tl = extract(&b, Some(&a));
        assert_eq!(tl.cpu_cores.values, vec![0.5, 1.0]);
        assert_eq!(tl.disk_read_bytes.values, vec![1000, 500]);
        let sum: u64 = tl.disk_read_bytes.values.iter().sum();
        assert_eq!(sum, a.read_bytes);
        // Raw deltas only see what happened between two samples of the same process.
        let raw = extract(&b, None);
        assert_eq!(raw.cpu_cores.values, vec![0.0, 1.0]);
        assert_eq!(raw.disk_read_bytes.values, vec![0, 500]);
    }

    #[test]
    fn counters_going_backwards_count_as_absent() {
        let b = bundle(vec![
            frame(0, vec![proc_(10, 5, 100, 1, Some((500, 500)))]),
            frame(100, vec![proc_(10, 5, 90, 1, Some((400, 600)))]),
        ]);
        let tl = extract(&b, None);
        assert_eq!(tl.cpu_cores.values, vec![0.0]);
        assert_eq!(tl.disk_read_bytes.values, vec![0]);
        assert_eq!(tl.disk_write_bytes.values, vec![100]);
    }

    #[test]
    fn single_frame_has_points_but_no_intervals() {
        let b = bundle(vec![frame(0, vec![proc_(10, 5, 100, 3, None)])]);
        let tl = extract(&b, None);
        assert!(tl.cpu_cores.is_empty());
        assert!(tl.disk_read_bytes.is_empty());
        assert_eq!(tl.rss_bytes.values, vec![3 * 4096]);
        assert_eq!(tl.processes.len(), 1);
        assert_eq!(tl.processes[0].start_ns(), 0);
        assert_eq!(tl.processes[0].end_ns(), 0);
        assert!(tl.processes[0].alive_at_end);
    }

    #[test]
    fn no_frames_and_duplicate_times_are_harmless() {
        let tl = extract(&bundle(Vec::new()), None);
        assert_eq!(tl, Timeline::default());
        let b = bundle(vec![
            frame(0, vec![proc_(10, 5, 0, 1, None)]),
            frame(0, vec![proc_(10, 5, 10, 1, None)]),
            frame(100, vec![proc_(10, 5, 20, 1, None)]),
        ]);
        let tl = extract(&b, None);
        assert_eq!(tl.cpu_cores.values, vec![1.0]);
        assert_eq!(tl.rss_bytes.t_ns, vec![0, 100_000_000]);
    }

    #[test]
    fn lifecycle_events_give_exact_times_and_unsampled_processes() {
        let ev = |t_ms: u64, kind, pid, comm: &str, code| LifecycleEvent {
            t_ns: t_ms * 1_000_000,
            kind,
            pid,
            tid: pid,
            ppid: 10,
            comm: comm.into(),
            exit_code: code,
            class_ns: None,
        };
        let mut b = bundle(vec![
            frame(0, vec![proc_(10, 5, 0, 1, None)]),
            frame(
                100,
                vec![proc_(10, 5, 0, 1, None), proc_(20, 6, 0, 1, None)],
            ),
            frame(200, vec![proc_(10, 5, 0, 1, None)]),
        ]);
        b.backend = Backend::Ebpf;
        b.lifecycle = vec![
            ev(50, LifecycleKind::Fork, 20, "sh", None),
            ev(60, LifecycleKind::Exec, 20, "cc", None),
            ev(120, LifecycleKind::Fork, 30, "cc", None),
            ev(121, LifecycleKind::Exec, 30, "as <x>", None),
            ev(130, LifecycleKind::Exit, 30, "as <x>", Some(1)),
            ev(150, LifecycleKind::Exit, 20, "cc", Some(0)),
            // A thread of pid 10 exiting is not the process exiting.
            LifecycleEvent {
                tid: 11,
                ..ev(160, LifecycleKind::Exit, 10, "t", None)
            },
        ];
        let tl = extract(&b, None);
        let pids: Vec<i32> = tl.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![10, 20, 30]);
        let p20 = &tl.processes[1];
        assert_eq!(
            (p20.fork_ns, p20.exit_ns, p20.exit_code),
            (Some(50_000_000), Some(150_000_000), Some(0))
        );
        assert_eq!((p20.start_ns(), p20.end_ns()), (50_000_000, 150_000_000));
        let p30 = &tl.processes[2];
        assert_eq!(p30.start_time_ticks, None);
        assert_eq!(p30.comm, "as <x>");
        assert_eq!(
            (p30.start_ns(), p30.end_ns(), p30.exit_code),
            (120_000_000, 130_000_000, Some(1))
        );
        assert!(tl.processes[0].alive_at_end);
        assert_eq!(tl.processes[0].exit_ns, None);
    }

    #[test]
    fn network_is_host_wide_without_loopback() {
        let net = |rx, tx| {
            Some(vec![
                NetDevCounters {
                    interface: "eth0".into(),
                    rx_bytes: rx,
                    rx_packets: 0,
                    tx_bytes: tx,
                    tx_packets: 0,
                },
                NetDevCounters {
                    interface: "lo".into(),
                    rx_bytes: rx * 9,
                    rx_packets: 0,
                    tx_bytes: 0,
                    tx_packets: 0,
                },
            ])
        };
        let mut f0 = frame(0, vec![]);
        f0.network = net(100, 100);
        let mut f1 = frame(100, vec![]);
        f1.network = net(300, 50);
        let tl = extract(&bundle(vec![f0, f1]), None);
        assert_eq!(tl.net_rx_bytes.unwrap().values, vec![200]);
        assert_eq!(tl.net_tx_bytes.unwrap().values, vec![0]);
    }
}
