//! `--format prometheus` and `trace --serve`: the Prometheus text exposition format
//! (version 0.0.4, what `promtool check metrics` and every Prometheus server read),
//! encoded by the `prometheus-client` crate from a [`Snapshot`] of the analysis.
//!
//! Every value is a session total, so counters are cumulative from the session start
//! (a live `--serve` endpoint's counters only grow while tracing). Metric names carry
//! their unit (`_seconds`) and counters end in `_total`. Label sets are unique: rows of
//! a reused pid with the same command name are added up.

use std::collections::{BTreeMap, BTreeSet};

use kernelkite_common::LatencyClass;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::{syscall_histograms, ExportError};
use crate::analysis::rolling::RollingTotals;
use crate::analysis::Analysis;
use crate::model::{Bundle, SyscallInProgress};

/// `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `pid` label of the series every exited process is folded into (live views).
pub const EXITED_PID: &str = "exited";
/// The `comm` label of that series.
pub const EXITED_COMM: &str = "(exited)";

/// Which processes have series of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessSeries {
    /// Every process of the bundle (`export --format prometheus`: one document, as
    /// large as the bundle).
    Every,
    /// Only the processes alive at the latest frame; every other one is added to one
    /// series per metric labelled `pid="exited"` (`trace --serve`: the series a
    /// scraper stores stay as many as the live processes, however many came and went,
    /// and the sum over the series stays the session's total).
    LiveOnly,
}

/// A series' process: every exited process ([`ProcessSeries::LiveOnly`]), a group of
/// the agent's (its index in `Snapshot::folded_labels`), or a pid; in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SeriesPid {
    Exited,
    Folded(usize),
    Pid(i32),
}

/// The `pid` label of the agent's group series.
pub const FOLDED_PID: &str = "folded";

/// The numbers one exposition shows, owned (a registry keeps its collectors).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// `((pid, comm, class), seconds)`.
    class_seconds: BTreeMap<(SeriesPid, String, &'static str), f64>,
    /// `((pid, comm), seconds)`.
    cpu_seconds: BTreeMap<(SeriesPid, String), f64>,
    /// `((pid, tid, thread comm), seconds)` of the threads with steal.
    thread_steal_seconds: BTreeMap<(i32, i32, String), f64>,
    /// `((pid, comm, syscall), histogram)` with bucket bounds in seconds.
    syscalls: BTreeMap<(SeriesPid, String, String), Hist>,
    /// `((pid, comm, syscall), (calls, longest seconds so far))` of the calls still
    /// running at the latest snapshot (`Bundle::syscalls_in_progress`): a process
    /// stuck in one call shows it while it is stuck, not when the call returns.
    in_progress: BTreeMap<(SeriesPid, String, String), (u64, f64)>,
    /// With [`ProcessSeries::LiveOnly`]: the processes folded into the `exited` series.
    exited_processes: Option<u64>,
    events_lost: Option<u64>,
    /// `Bundle::events_lost_by_cause`.
    events_lost_by_cause: BTreeMap<String, u64>,
    session_seconds: f64,
    /// Each pid's `cgroup` and `container_id` labels, where known
    /// (`Bundle::process_identities`); the `exited` series have none.
    place_labels: BTreeMap<i32, Labels>,
    /// `--cgroup`: the traced cgroup's counters.
    cgroup: Option<crate::analysis::cgroup_totals::CgroupTotals>,
    /// The agent's groups' labels beside `pid="folded"` (`comm`, or `cgroup`).
    folded_labels: Vec<Labels>,
    /// The agent's own numbers.
    agent: Option<AgentMetrics>,
    /// The agent's groups: `((pid, comm, syscall), (calls, seconds))`, counters in
    /// place of histograms (a histogram per group and syscall would be most of the
    /// exposition).
    syscall_totals: BTreeMap<(SeriesPid, String, String), (u64, f64)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Hist {
    sum_seconds: f64,
    count: u64,
    /// `(le_seconds, count)`, not cumulative, ascending.
    buckets: Vec<(f64, u64)>,
}

/// The processes alive at the bundle's latest frame: (pid, start time), not zombies.
fn live_processes(bundle: &Bundle) -> BTreeSet<(i32, u64)> {
    (bundle.frames.last().into_iter())
        .flat_map(|f| &f.processes)
        .filter(|p| !matches!(&*p.state, "Z" | "X" | "x"))
        .map(|p| (p.pid, p.start_time_ticks))
        .collect()
}

impl Snapshot {
    /// Every process with series of its own ([`ProcessSeries::Every`]).
    pub fn new(bundle: &Bundle, analysis: &Analysis) -> Snapshot {
        Snapshot::with_series(bundle, analysis, ProcessSeries::Every)
    }

    pub fn with_series(bundle: &Bundle, analysis: &Analysis, series: ProcessSeries) -> Snapshot {
        let live = match series {
            ProcessSeries::Every => None,
            ProcessSeries::LiveOnly => Some(live_processes(bundle)),
        };
        let live_pids: Option<BTreeSet<i32>> =
            (live.as_ref()).map(|l| l.iter().map(|&(pid, _)| pid).collect());
        let mut s = Snapshot {
            events_lost: analysis.events_lost,
            events_lost_by_cause: analysis.events_lost_by_cause.clone(),
            session_seconds: analysis.duration_ns as f64 / 1e9,
            exited_processes: live.as_ref().map(|_| 0),
            cgroup: analysis.cgroup.clone(),
            ..Snapshot::default()
        };
        for p in &analysis.processes {
            let Some(place) = &p.placement else { continue };
            let mut labels = Labels::new();
            if let Some(c) = &place.cgroup {
                labels.push(("cgroup", c.clone()));
            }
            if let Some(id) = &place.container_id {
                labels.push(("container_id", id.clone()));
            }
            s.place_labels.insert(p.pid, labels);
        }
        let exited_comm = || EXITED_COMM.to_string();
        let mut rows: Vec<&crate::analysis::ProcessRow> = analysis.processes.iter().collect();
        if live.is_some() {
            // The exited series add up many rows: in one order, so the same rows give
            // the same sums whatever order the analysis lists them in.
            rows.sort_by_key(|p| (p.pid, p.start_time_ticks));
        }
        for p in rows {
            let (pid, comm) = match &live {
                Some(live) if !live.contains(&(p.pid, p.start_time_ticks)) => {
                    *s.exited_processes.get_or_insert(0) += 1;
                    (SeriesPid::Exited, exited_comm())
                }
                _ => (SeriesPid::Pid(p.pid), p.comm.clone()),
            };
            for class in LatencyClass::ALL {
                *s.class_seconds
                    .entry((pid, comm.clone(), class.name()))
                    .or_default() += p.classes.get(class) as f64 / 1e9;
            }
            if let Some(cpu) = p.cpu_seconds {
                *s.cpu_seconds.entry((pid, comm)).or_default() += cpu;
            }
        }
        // Live views: threads of live processes only (an exited one's steal is in its
        // process's steal class, so in the pid="exited" series).
        let thread_shown = |pid: i32| live_pids.as_ref().is_none_or(|l| l.contains(&pid));
        for t in (analysis.steal_threads().into_iter()).filter(|t| thread_shown(t.pid)) {
            *s.thread_steal_seconds
                .entry((t.pid, t.tid, t.comm.clone()))
                .or_default() += t.classes.steal as f64 / 1e9;
        }
        let comms: BTreeMap<i32, &str> = (analysis.processes.iter())
            .map(|p| (p.pid, p.comm.as_str()))
            .collect();
        // Live views: calls of live processes only. A snapshot reads the calls from the
        // map before /proc: a process that exits in between is not live in the frame,
        // its call is over, and its time is in the exited series.
        for call in (bundle.syscalls_in_progress.iter()).filter(|c| thread_shown(c.pid)) {
            let comm = comms.get(&call.pid).copied().unwrap_or("?").to_string();
            let e = (s.in_progress)
                .entry((SeriesPid::Pid(call.pid), comm, call.name.clone()))
                .or_default();
            e.0 += 1;
            e.1 = e.1.max(call.elapsed_ns as f64 / 1e9);
        }
        for h in syscall_histograms(bundle, analysis) {
            // Histograms are per pid: a live pid's include an earlier process's of the
            // same pid (reuse), as its label set does without folding.
            let (pid, comm) = match &live_pids {
                Some(live) if !live.contains(&h.pid) => (SeriesPid::Exited, exited_comm()),
                _ => (SeriesPid::Pid(h.pid), h.comm.to_string()),
            };
            let e = s
                .syscalls
                .entry((pid, comm, h.syscall.clone()))
                .or_default();
            e.sum_seconds += h.sum_ns as f64 / 1e9;
            e.count = e.count.saturating_add(h.count);
            if e.buckets.is_empty() {
                e.buckets = h
                    .buckets
                    .iter()
                    .map(|&(le, _)| (le as f64 / 1e9, 0))
                    .collect();
            }
            for (b, &(_, n)) in e.buckets.iter_mut().zip(&h.buckets) {
                b.1 = b.1.saturating_add(n);
            }
        }
        s
    }
}

/// The agent's own numbers (`kernelkite agent`), beside its series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentMetrics {
    /// How the series were decided (`RollingTotals::stats`).
    pub rolling: crate::analysis::rolling::RollingStats,
    /// Live processes with a series of their own.
    pub own_series: usize,
    /// Times the stack capture started over (`--stacks-epoch`).
    pub stack_epochs: u64,
    /// The agent process: CPU seconds (user + system), resident bytes, start time
    /// (Unix seconds), from /proc/self.
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub start_time_seconds: f64,
    /// `--otlp-endpoint`: the pusher's counters.
    pub otlp: Option<OtlpCounters>,
}

/// The OTLP pusher's counters (`export::otlp_push::PushStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OtlpCounters {
    pub sent_requests: u64,
    pub dropped_requests: u64,
    pub rejected_requests: u64,
    pub failed_attempts: u64,
    pub queued_requests: u64,
}

impl Snapshot {
    /// The agent's exposition: one series per [`RollingTotals`] series (a process's
    /// own, labelled with its pid, or a group's, labelled `pid="folded"` and its command
    /// name or cgroup), the calls in progress by the same series, and the agent's own
    /// numbers. `series_of(pid)` names the series a pid's time goes to now.
    pub fn from_rolling(
        rolling: &RollingTotals,
        in_progress: &[SyscallInProgress],
        events_lost: u64,
        events_lost_by_cause: BTreeMap<String, u64>,
        session_seconds: f64,
        agent: AgentMetrics,
    ) -> Snapshot {
        use crate::analysis::rolling::{FoldByKey, SeriesKey, COARSE_BOUNDS_NS};
        let mut s = Snapshot {
            events_lost: Some(events_lost),
            events_lost_by_cause,
            session_seconds,
            agent: Some(agent),
            ..Snapshot::default()
        };
        let mut labels_of: BTreeMap<&SeriesKey, (SeriesPid, String)> = BTreeMap::new();
        for (key, totals) in rolling.series() {
            let (pid, comm) = match key {
                SeriesKey::Process { pid, comm } => {
                    if let Some(path) = rolling.cgroup_of(*pid) {
                        let mut labels: Labels = vec![("cgroup", path.to_string())];
                        let named = crate::model::cgroup_path::labels(path);
                        labels.extend(named.container_id.map(|id| ("container_id", id)));
                        s.place_labels.insert(*pid, labels);
                    }
                    (SeriesPid::Pid(*pid), comm.clone())
                }
                SeriesKey::Group { fold_by, name } => {
                    let i = s.folded_labels.len();
                    match fold_by {
                        FoldByKey::Comm => {
                            s.folded_labels.push(Vec::new());
                            (SeriesPid::Folded(i), name.clone())
                        }
                        FoldByKey::Cgroup => {
                            s.folded_labels.push(vec![("cgroup", name.clone())]);
                            (SeriesPid::Folded(i), String::new())
                        }
                    }
                }
            };
            labels_of.insert(key, (pid, comm.clone()));
            for class in LatencyClass::ALL {
                let ns = totals.class_ns[class.id() as usize];
                s.class_seconds
                    .insert((pid, comm.clone(), class.name()), ns as f64 / 1e9);
            }
            for (syscall, h) in &totals.syscalls {
                if let SeriesPid::Folded(_) = pid {
                    s.syscall_totals.insert(
                        (pid, comm.clone(), syscall.clone()),
                        (h.count, h.sum_ns as f64 / 1e9),
                    );
                    continue;
                }
                let bounds = COARSE_BOUNDS_NS.iter().map(|&b| (b - 1) as f64 / 1e9);
                s.syscalls.insert(
                    (pid, comm.clone(), syscall.clone()),
                    Hist {
                        sum_seconds: h.sum_ns as f64 / 1e9,
                        count: h.count,
                        // The +Inf bucket is the count's.
                        buckets: bounds.zip(h.buckets_calls).collect(),
                    },
                );
            }
        }
        for call in in_progress {
            // In the series the process's time goes to (its own, or its group's).
            let (pid, comm) = match rolling
                .current_series(call.pid)
                .and_then(|k| labels_of.get(k))
            {
                Some(labels) => labels.clone(),
                None => continue,
            };
            let e = (s.in_progress)
                .entry((pid, comm, call.name.clone()))
                .or_default();
            e.0 += 1;
            e.1 = e.1.max(call.elapsed_ns as f64 / 1e9);
        }
        s
    }
}

type Labels = Vec<(&'static str, String)>;

fn pid_label(pid: SeriesPid) -> String {
    match pid {
        SeriesPid::Exited => EXITED_PID.to_string(),
        SeriesPid::Folded(_) => FOLDED_PID.to_string(),
        SeriesPid::Pid(p) => p.to_string(),
    }
}

impl Snapshot {
    /// `labels` with the pid's `cgroup` and `container_id` after them, where known.
    fn placed(&self, pid: SeriesPid, mut labels: Labels) -> Labels {
        let place = match pid {
            SeriesPid::Pid(p) => self.place_labels.get(&p),
            SeriesPid::Folded(i) => self.folded_labels.get(i),
            SeriesPid::Exited => None,
        };
        labels.extend(place.into_iter().flatten().cloned());
        labels
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if !self.class_seconds.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_process_latency_class",
                "Time the process's threads spent in each latency class since the session started.",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            for ((pid, comm, class), secs) in &self.class_seconds {
                let labels = self.placed(
                    *pid,
                    vec![
                        ("pid", pid_label(*pid)),
                        ("comm", comm.clone()),
                        ("class", class.to_string()),
                    ],
                );
                ConstCounter::new(*secs).encode(m.encode_family(&labels)?)?;
            }
        }
        if !self.thread_steal_seconds.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_thread_steal",
                "Time the thread was current on a CPU that the kernel did not run it (hypervisor steal, irq time): its steal class, for threads that have any.",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            for ((pid, tid, comm), secs) in &self.thread_steal_seconds {
                let labels: Labels = vec![
                    ("pid", pid.to_string()),
                    ("tid", tid.to_string()),
                    ("comm", comm.clone()),
                ];
                ConstCounter::new(*secs).encode(m.encode_family(&labels)?)?;
            }
        }
        if !self.cpu_seconds.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_process_cpu",
                "CPU time (user + system) of the process inside the session.",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            for ((pid, comm), secs) in &self.cpu_seconds {
                let labels =
                    self.placed(*pid, vec![("pid", pid_label(*pid)), ("comm", comm.clone())]);
                ConstCounter::new(*secs).encode(m.encode_family(&labels)?)?;
            }
        }
        if !self.syscalls.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_syscall_latency",
                "Latency of each syscall per process (log-linear buckets, bounds inclusive).",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for ((pid, comm, syscall), h) in &self.syscalls {
                let labels = self.placed(
                    *pid,
                    vec![
                        ("pid", pid_label(*pid)),
                        ("comm", comm.clone()),
                        ("syscall", syscall.clone()),
                    ],
                );
                m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                    h.sum_seconds,
                    h.count,
                    &h.buckets,
                    None,
                )?;
            }
        }
        if !self.syscall_totals.is_empty() {
            let labelled = |(pid, comm, syscall): &(SeriesPid, String, String)| {
                let labels = vec![
                    ("pid", pid_label(*pid)),
                    ("comm", comm.clone()),
                    ("syscall", syscall.clone()),
                ];
                self.placed(*pid, labels)
            };
            let mut m = encoder.encode_descriptor(
                "kernelkite_syscall_calls",
                "Syscalls that returned, per group of processes (pid=\"folded\"); processes with series of their own have kernelkite_syscall_latency_seconds.",
                None,
                MetricType::Counter,
            )?;
            for (key, (calls, _)) in &self.syscall_totals {
                ConstCounter::new(*calls).encode(m.encode_family(&labelled(key))?)?;
            }
            let mut m = encoder.encode_descriptor(
                "kernelkite_syscall_time",
                "Time in syscalls that returned, per group of processes (pid=\"folded\").",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            for (key, (_, seconds)) in &self.syscall_totals {
                ConstCounter::new(*seconds).encode(m.encode_family(&labelled(key))?)?;
            }
        }
        if !self.in_progress.is_empty() {
            // (labels, calls, longest seconds) of each (process, syscall).
            let series: Vec<(Labels, u64, f64)> = (self.in_progress.iter())
                .map(|((pid, comm, syscall), &(calls, longest))| {
                    let labels = vec![
                        ("pid", pid_label(*pid)),
                        ("comm", comm.clone()),
                        ("syscall", syscall.clone()),
                    ];
                    (self.placed(*pid, labels), calls, longest)
                })
                .collect();
            let mut m = encoder.encode_descriptor(
                "kernelkite_syscalls_in_progress",
                "Calls still running at the latest snapshot, per process and syscall (not yet in kernelkite_syscall_latency, which counts calls that returned).",
                None,
                MetricType::Gauge,
            )?;
            for (labels, calls, _) in &series {
                ConstGauge::new(*calls as i64).encode(m.encode_family(labels)?)?;
            }
            let mut m = encoder.encode_descriptor(
                "kernelkite_syscall_in_progress_longest",
                "How long the longest call still running has run inside the session, per process and syscall.",
                Some(&Unit::Seconds),
                MetricType::Gauge,
            )?;
            for (labels, _, longest) in &series {
                ConstGauge::new(*longest).encode(m.encode_family(labels)?)?;
            }
        }
        if let Some(exited) = self.exited_processes {
            let m = encoder.encode_descriptor(
                "kernelkite_exited_processes",
                "Processes that exited (not alive at the latest snapshot), whose numbers are in the series labelled pid=\"exited\".",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(exited).encode(m)?;
        }
        if let Some(lost) = self.events_lost {
            let m = encoder.encode_descriptor(
                "kernelkite_events_lost",
                "Ring-buffer records and map entries the BPF programs could not store.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(lost).encode(m)?;
        }
        if !self.events_lost_by_cause.is_empty() {
            let mut m = encoder.encode_descriptor(
                "kernelkite_events_lost_by_cause",
                "kernelkite_events_lost by what was lost (lifecycle_records, slow_call_records, stack_captures, histogram_updates, ...).",
                None,
                MetricType::Counter,
            )?;
            for (cause, &n) in &self.events_lost_by_cause {
                let labels: Labels = vec![("cause", cause.clone())];
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }
        if let Some(c) = &self.cgroup {
            let cgroup: Labels = vec![("cgroup", c.path.clone())];
            let seconds = |ns: u64| ns as f64 / 1e9;
            if let Some(ns) = c.cpu_throttled_ns {
                let mut m = encoder.encode_descriptor(
                    "kernelkite_cgroup_throttled",
                    "Time the traced cgroup was throttled by its CPU bandwidth limit (cpu.stat throttled_usec) since the session started.",
                    Some(&Unit::Seconds),
                    MetricType::Counter,
                )?;
                ConstCounter::new(seconds(ns)).encode(m.encode_family(&cgroup)?)?;
            }
            let mut m = encoder.encode_descriptor(
                "kernelkite_cgroup_pressure_stall",
                "Pressure stall time of the traced cgroup since the session started (cpu, io, memory .pressure totals; kind some: some task stalled, full: all did).",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            let stalls = [
                ("cpu", "some", c.cpu_some_ns),
                ("cpu", "full", c.cpu_full_ns),
                ("io", "some", c.io_some_ns),
                ("io", "full", c.io_full_ns),
                ("memory", "some", c.memory_some_ns),
                ("memory", "full", c.memory_full_ns),
            ];
            for (resource, kind, ns) in stalls {
                let Some(ns) = ns else { continue };
                let mut labels = cgroup.clone();
                labels.push(("resource", resource.to_string()));
                labels.push(("kind", kind.to_string()));
                ConstCounter::new(seconds(ns)).encode(m.encode_family(&labels)?)?;
            }
        }
        if let Some(agent) = &self.agent {
            encode_agent(&mut encoder, agent)?;
        }
        let m = encoder.encode_descriptor(
            "kernelkite_session_duration",
            "Length of the session window so far.",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.session_seconds).encode(m)?;
        Ok(())
    }
}

/// The agent's own numbers: the `process_*` series every exporter has (so standard
/// dashboards and alerts see the agent itself), how its series were decided, and its
/// OTLP pusher.
fn encode_agent(encoder: &mut DescriptorEncoder, a: &AgentMetrics) -> Result<(), std::fmt::Error> {
    one(
        encoder,
        MetricType::Counter,
        "process_cpu",
        "Total user and system CPU time of the agent itself.",
        Some(&Unit::Seconds),
        a.cpu_seconds,
    )?;
    one(
        encoder,
        MetricType::Gauge,
        "process_resident_memory",
        "Resident memory of the agent itself.",
        Some(&Unit::Bytes),
        a.resident_bytes as f64,
    )?;
    one(
        encoder,
        MetricType::Gauge,
        "process_start_time",
        "Start time of the agent since the Unix epoch.",
        Some(&Unit::Seconds),
        a.start_time_seconds,
    )?;
    let r = &a.rolling;
    one(
        encoder,
        MetricType::Gauge,
        "kernelkite_agent_process_series",
        "Live processes with series of their own (at most --top-processes).",
        None,
        a.own_series as f64,
    )?;
    one(
        encoder,
        MetricType::Counter,
        "kernelkite_agent_processes_seen",
        "Processes the agent has seen.",
        None,
        r.processes_seen as f64,
    )?;
    one(
        encoder,
        MetricType::Counter,
        "kernelkite_agent_processes_given_series",
        "Processes given series of their own.",
        None,
        r.processes_given_series as f64,
    )?;
    one(
        encoder,
        MetricType::Counter,
        "kernelkite_agent_processes_folded",
        "Processes that ended with their time in a group series (pid=\"folded\") only.",
        None,
        r.processes_folded as f64,
    )?;
    one(
        encoder,
        MetricType::Counter,
        "kernelkite_agent_series_evicted",
        "Series of their own taken back from idle processes for busier ones.",
        None,
        r.slots_evicted as f64,
    )?;
    one(
        encoder,
        MetricType::Counter,
        "kernelkite_agent_groups_overflowed",
        "Group names folded into the (other) group because --max-groups was reached.",
        None,
        r.groups_overflowed as f64,
    )?;
    one(
        encoder,
        MetricType::Counter,
        "kernelkite_agent_threads_missing",
        "Threads forgotten without an exit record (their last interval is not counted).",
        None,
        r.threads_missing as f64,
    )?;
    one(
        encoder,
        MetricType::Counter,
        "kernelkite_agent_stack_epochs",
        "Times the stack capture started over (--stacks-epoch); each loses the moment it takes to re-attach.",
        None,
        a.stack_epochs as f64,
    )?;
    if let Some(o) = &a.otlp {
        one(
            encoder,
            MetricType::Counter,
            "kernelkite_agent_otlp_sent_requests",
            "OTLP export requests the collector accepted.",
            None,
            o.sent_requests as f64,
        )?;
        one(encoder, MetricType::Counter, "kernelkite_agent_otlp_dropped_requests", "OTLP export requests dropped because the bounded queue was full (the oldest go first).", None, o.dropped_requests as f64)?;
        one(
            encoder,
            MetricType::Counter,
            "kernelkite_agent_otlp_rejected_requests",
            "OTLP export requests the collector refused with a status that is not retried.",
            None,
            o.rejected_requests as f64,
        )?;
        one(
            encoder,
            MetricType::Counter,
            "kernelkite_agent_otlp_failed_attempts",
            "OTLP export attempts that failed (each retry counts).",
            None,
            o.failed_attempts as f64,
        )?;
        one(
            encoder,
            MetricType::Gauge,
            "kernelkite_agent_otlp_queued_requests",
            "OTLP export requests waiting to be sent.",
            None,
            o.queued_requests as f64,
        )?;
    }
    Ok(())
}

/// One unlabelled series of `kind` (a counter or a gauge) with value `v`.
fn one(
    encoder: &mut DescriptorEncoder,
    kind: MetricType,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: f64,
) -> Result<(), std::fmt::Error> {
    let m = encoder.encode_descriptor(name, help, unit, kind)?;
    match kind {
        MetricType::Counter => ConstCounter::new(v).encode(m),
        _ => ConstGauge::new(v).encode(m),
    }
}

/// The exposition of a snapshot.
pub fn render_snapshot(snapshot: Snapshot) -> Result<String, ExportError> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).map_err(|e| {
        ExportError::Encode {
            format: "prometheus",
            source: e,
        }
    })?;
    Ok(out)
}

/// The exposition of `bundle`, every process with series of its own.
pub fn render(bundle: &Bundle, analysis: &Analysis) -> Result<String, ExportError> {
    render_snapshot(Snapshot::new(bundle, analysis))
}

/// The exposition of a live session's `bundle`: series of their own for the live
/// processes only ([`ProcessSeries::LiveOnly`]).
pub fn render_live(bundle: &Bundle, analysis: &Analysis) -> Result<String, ExportError> {
    render_snapshot(Snapshot::with_series(
        bundle,
        analysis,
        ProcessSeries::LiveOnly,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyze;

    use crate::model::fixture::committed as fixture;

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_count() {
        let b = fixture("api-server-ebpf.json");
        let text = render(&b, &analyze(&b)).unwrap();
        // read in pid 6000: 900 + 60 + 3 calls (fixture), all ≤ the last bound.
        let inf = "kernelkite_syscall_latency_seconds_bucket{pid=\"6000\",comm=\"api-server\",syscall=\"read\",le=\"+Inf\"} 963";
        assert!(text.contains(inf), "{text}");
        assert!(text.contains(
            "kernelkite_syscall_latency_seconds_count{pid=\"6000\",comm=\"api-server\",syscall=\"read\"} 963"
        ));
        assert!(text.contains("kernelkite_events_lost_total 12"));
        let mut last = 0u64;
        for line in text.lines().filter(|l| {
            l.starts_with("kernelkite_syscall_latency_seconds_bucket{pid=\"6000\",comm=\"api-server\",syscall=\"read\"")
        }) {
            let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(n >= last, "{line}");
            last = n;
        }
        assert_eq!(last, 963);
    }

    #[test]
    fn class_counters_are_the_fixtures_class_times() {
        let b = fixture("api-server-ebpf.json");
        let text = render(&b, &analyze(&b)).unwrap();
        // The fixture's last class_ns of each thread, added up by hand: 6000's threads
        // on CPU 360 + 900 ms, in syscall_blocked 900 + 0 ms; 6100 (exited) 20 ms on CPU.
        for want in [
            "kernelkite_process_latency_class_seconds_total{pid=\"6000\",comm=\"api-server\",class=\"on_cpu\"} 1.26",
            "kernelkite_process_latency_class_seconds_total{pid=\"6000\",comm=\"api-server\",class=\"io_wait\"} 0.42",
            "kernelkite_process_latency_class_seconds_total{pid=\"6000\",comm=\"api-server\",class=\"syscall_blocked\"} 0.9",
            "kernelkite_process_latency_class_seconds_total{pid=\"6100\",comm=\"sh\",class=\"on_cpu\"} 0.02",
        ] {
            assert!(text.contains(want), "{want}\n{text}");
        }
    }

    /// A live view shows the calls of live processes only: one whose process is gone
    /// from the latest frame (it exited between the snapshot's map read and its /proc
    /// read) has no call in progress and no series of its own.
    #[test]
    fn a_live_view_shows_no_call_of_a_process_gone_from_the_frame() {
        let mut b = fixture("api-server-ebpf.json");
        let live = b.frames.last().unwrap().processes[0].pid;
        let gone = 1
            + (b.frames.iter().flat_map(|f| &f.processes))
                .map(|p| p.pid)
                .max()
                .unwrap();
        for pid in [live, gone] {
            b.syscalls_in_progress.push(SyscallInProgress {
                pid,
                tid: pid,
                nr: 59,
                name: "execve".into(),
                t_ns: 0,
                elapsed_ns: 1_000_000,
                before_start: false,
                user_stack: None,
            });
        }
        let a = analyze(&b);
        let live_only = Snapshot::with_series(&b, &a, ProcessSeries::LiveOnly);
        let text = render_snapshot(live_only).unwrap();
        let calls = |text: &str, pid: i32| {
            (text.lines())
                .filter(|l| l.starts_with("kernelkite_syscalls_in_progress{"))
                .any(|l| l.contains(&format!("pid=\"{pid}\"")))
        };
        assert!(calls(&text, live), "{text}");
        assert!(!calls(&text, gone), "{text}");
        // Every process's own series (`serve` without folding) keeps both.
        let every = render_snapshot(Snapshot::new(&b, &a)).unwrap();
        assert!(calls(&every, live) && calls(&every, gone), "{every}");
    }

    #[test]
    fn proc_bundle_has_no_syscall_or_loss_metrics() {
        let b = fixture("cargo-build-before.json");
        let text = render(&b, &analyze(&b)).unwrap();
        assert!(!text.contains("kernelkite_syscall_latency"));
        assert!(!text.contains("events_lost"));
        assert!(text.contains("kernelkite_process_cpu_seconds_total"));
    }
}
