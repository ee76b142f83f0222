//! Pure functions from a bundle to derived numbers. Nothing here reads the system.
//!
//! The entry point is [`analyze`]: `&Bundle → Analysis`. Every number of every report
//! (text, JSON, HTML, viewer) comes from an [`Analysis`]; `docs/PROFILE.md` names the
//! kernel field behind each one. `analyze` never panics, whatever the bundle holds
//! (validation rejects inconsistent bundles on load, but analysis does not rely on it):
//! counters that go backwards contribute nothing for that step, sums saturate.
//!
//! # Session-relative rules used throughout
//!
//! * **Window**: the session is the span from the first frame's `t_ns` (eBPF: from 0,
//!   when tracking began) to the last frame's.
//! * **Started inside the session**: when the bundle has a launched command that appears
//!   in the frames, its `start_time_ticks` is the session start and a process started
//!   inside iff its `start_time_ticks` ≥ that. A launched command that was never sampled
//!   leaves only its descendants: all started inside. Without a launched command
//!   (`trace` bundles) a process started inside iff it is absent from the first frame.
//! * **Baseline** of a cumulative counter: 0 for a process (thread) that started inside
//!   the session — everything it ever counted belongs to the session — else its first
//!   sample. A counter's session total is `(first − baseline) + Σ max(0, next − prev)`,
//!   which is `last − baseline` for well-formed data and never underflows.

mod accumulate;
pub mod cgroup_totals;
mod classes;
pub mod commands;
pub mod compare;
pub mod critical_path;
pub mod placement;
mod processes;
pub mod rolling;
pub mod stacks;
pub mod timeline;
pub mod waits;

use std::collections::{BTreeMap, BTreeSet};

use kernelkite_common::hist::{bucket_lower, bucket_upper, NUM_BUCKETS};
use kernelkite_common::{LatencyClass, NUM_CLASSES};
use schemars::JsonSchema;
use serde::Serialize;

use crate::model::{
    Backend, Bundle, ClassTimes, FrameCap, LifecycleKind, OnCpuSource, TimeAccounting,
};

pub use crate::model::syscalls::{
    sample_class, syscall_name, syscall_number, IO_SYSCALLS, LOCK_SYSCALLS,
};

/// Identity of a process across pid reuse: `(pid, start_time_ticks)`.
pub type ProcessKey = (i32, u64);

/// Everything the reports show about one bundle.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Analysis {
    /// `Bundle::label`.
    pub label: Option<String>,
    /// `Bundle::backend`.
    #[schemars(with = "crate::model::schema::Backend")]
    pub backend: Backend,
    /// `Bundle::replayed_from`.
    pub replayed_from: Option<String>,
    /// `Bundle::interval_ms`: the requested sampling interval.
    pub interval_ms: u64,
    /// The session window in nanoseconds: last frame's `t_ns` − first frame's (eBPF:
    /// − 0, the moment tracking began, from which every thread is counted).
    pub duration_ns: u64,
    /// [`Analysis::duration_ns`] in milliseconds as `f64` (`duration_ns / 1e6`), so
    /// sub-millisecond sessions are not reported as 0.
    pub duration_ms: f64,
    /// Number of frames in the bundle.
    pub frames: u64,
    /// `Bundle::frame_cap`: whether frames were dropped.
    #[schemars(with = "crate::model::schema::FrameCap")]
    pub frame_cap: FrameCap,
    /// Distinct `(pid, start_time_ticks)` processes in the frames, plus (eBPF) pids that
    /// only appear in lifecycle events.
    pub distinct_pids: u64,
    /// CPU seconds of the profiled tree: exact from `launched.rusage` when present,
    /// else [`Analysis::sampled_cpu_seconds`].
    pub cpu_seconds: f64,
    /// Where [`Analysis::cpu_seconds`] came from.
    pub cpu_source: CpuSource,
    /// Σ over processes of the utime+stime ticks seen in the samples, in seconds.
    pub sampled_cpu_seconds: f64,
    /// `sampled_cpu_seconds / cpu_seconds` when the exact rusage total is known (and
    /// non-zero): how much of the CPU the per-process rows account for. `None` otherwise.
    pub cpu_coverage: Option<f64>,
    /// Processes whose row holds the final counters read as they exited (exit
    /// accounting, [`ProcessRow::exact_at_exit`]).
    pub processes_exact_at_exit: u64,
    /// Peak over frames of Σ rss_pages × page_size of the processes in that frame, or
    /// the largest process's exact peak ([`RssSource::Rusage`]) where that is more.
    pub peak_rss_bytes: u64,
    /// `t_ns` of the frame where [`Analysis::peak_rss_bytes`] was reached.
    pub peak_rss_t_ns: u64,
    /// Largest resident set of any single process: `launched.rusage.max_rss_kib × 1024`
    /// when present, else the largest single-process sample.
    pub max_single_rss_bytes: u64,
    /// Where [`Analysis::max_single_rss_bytes`] came from.
    pub max_single_rss_source: RssSource,
    /// Σ over processes of /proc/<pid>/io `read_bytes` (session total, see module docs).
    pub read_bytes: u64,
    /// Σ over processes of /proc/<pid>/io `write_bytes`.
    pub write_bytes: u64,
    /// Processes whose /proc/<pid>/io was never readable (their I/O is not counted).
    pub processes_without_io: u64,
    /// Σ over threads of their latency classes within the window (ns).
    #[schemars(with = "crate::model::schema::ClassTimes")]
    #[serde(serialize_with = "crate::model::class_times_by_name")]
    pub latency_classes: ClassTimes,
    /// `backend.latency_classes_exact()`: false means io_wait, lock_wait,
    /// syscall_blocked and unknown_wait are estimates.
    pub latency_classes_exact: bool,
    /// `Bundle::events_lost` (`None` for the /proc sampler, which has no event loss).
    pub events_lost: Option<u64>,
    /// `Bundle::events_lost_by_cause`: what was lost (empty for bundles that do not
    /// say, and when nothing was).
    pub events_lost_by_cause: BTreeMap<String, u64>,
    /// Per-syscall statistics aggregated over processes, sorted by total time
    /// (descending), then name.
    pub syscalls: Vec<SyscallStats>,
    /// Worst-case relative error of the syscall percentiles (bucket midpoints).
    pub histogram_relative_error: f64,
    /// One row per process, sorted by first appearance, then pid.
    pub processes: Vec<ProcessRow>,
    /// One row per thread, sorted by pid, process start, tid.
    pub threads: Vec<ThreadRow>,
    /// The observed process tree: roots (processes whose parent was never observed),
    /// sorted by first appearance then pid.
    pub tree: Vec<TreeNode>,
    /// Host-wide /proc/net/dev deltas when the frames carry network counters.
    pub network: Option<NetworkTotals>,
    /// The launched command (`run` bundles).
    pub launched: Option<LaunchedSummary>,
    /// Children's I/O folded into an observed ancestor at reap time (already
    /// subtracted from the totals and process rows above), in child order.
    pub reap_folds: Vec<ReapFold>,
    /// Files a traced process controls that were not read for symbols
    /// (`stacks.skipped_files`), so a missing name is explained.
    pub skipped_files: Vec<SkippedFileRow>,
    /// `Bundle::host.time_accounting`: where on_cpu came from and what the kernel
    /// leaves out of it (`None` for bundles written before it was recorded).
    #[schemars(with = "Option<crate::model::schema::TimeAccounting>")]
    pub time_accounting: Option<TimeAccounting>,
    /// **Host-wide** hypervisor steal over the window, every CPU summed: the move of
    /// /proc/stat's steal column from the first frame that has it to the last, in ns
    /// (USER_HZ ticks × 1e9 / `clock_ticks_per_sec`). Not attributable to the profiled
    /// processes. `None` when the frames do not carry it.
    pub host_steal_ns: Option<u64>,
    /// The processes by container, systemd unit or cgroup (`Bundle::process_identities`),
    /// most CPU first; empty when no process's cgroup is known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<placement::GroupRow>,
    /// `--cgroup`, `--container`: the traced cgroup's own counters over the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<cgroup_totals::CgroupTotals>,
}

/// A file not read for symbols, and why (docs/STACKS.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SkippedFileRow {
    pub path: String,
    /// `symlink`, `not_regular`, `wrong_owner`, `too_large`, `replaced`, `missing`,
    /// `permission_denied`, `timed_out` or `unreadable`.
    pub reason: String,
    /// Times it was refused.
    pub count: u64,
}

/// A child's I/O that the kernel folded into an observed ancestor when it was reaped
/// (see `docs/PROFILE.md`, "Reap fold"). The ancestor's per-frame `io` counters jump by
/// at least these amounts in the interval `(child_last_seen_ns, reaper_next_seen_ns]`;
/// per-interval series should subtract them there to avoid counting the child twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ReapFold {
    pub child_pid: i32,
    pub child_start_time_ticks: u64,
    pub reaper_pid: i32,
    pub reaper_start_time_ticks: u64,
    /// `t_ns` of the child's last frame.
    pub child_last_seen_ns: u64,
    /// `t_ns` of the frame after it (where the reaper's counters include the fold).
    pub folded_by_ns: u64,
    /// The child's last sampled absolute `read_bytes` / `write_bytes`.
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// Source of [`Analysis::cpu_seconds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CpuSource {
    /// The rusage of every reaped process of the tree (`wait4`): exact, including
    /// processes shorter than a frame.
    Rusage,
    /// Per-process utime+stime samples: misses CPU of processes never sampled and CPU
    /// after a process's last sample.
    Samples,
    /// The eBPF backend's on_cpu intervals (switch-in to switch-out) of every traced
    /// thread: exact, including processes that lived between two snapshots.
    EbpfOnCpu,
}

impl Analysis {
    /// Whether [`Analysis::peak_rss_bytes`] is the largest process's exact peak, not a
    /// frame's sum (no frame held more: a process no frame caught alive).
    pub fn peak_rss_is_largest_process(&self) -> bool {
        self.max_single_rss_source == RssSource::Rusage
            && self.peak_rss_bytes > 0
            && self.peak_rss_bytes == self.max_single_rss_bytes
    }
}

/// Source of [`Analysis::max_single_rss_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RssSource {
    /// `ru_maxrss` of the reaped tree.
    Rusage,
    /// `ru_maxrss` of the command's process, no larger than what kernelkite's copy of
    /// itself held before the exec (`launched.max_rss_upper_bound`): the program's own
    /// largest process is at most this.
    RusageUpperBound,
    /// Largest rss sample of a single process.
    Samples,
}

/// The command a `run` bundle launched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LaunchedSummary {
    pub argv: Vec<String>,
    pub pid: i32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// One syscall, aggregated over every process that made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SyscallStats {
    pub name: String,
    /// Which calls the row counts: absent for calls that started and returned inside
    /// the session (the histograms), else `began_before_start` (returned inside it; only
    /// their time inside it), `in_progress` (still running at the end: their time so
    /// far) or `in_progress_since_start` (running all along).
    #[serde(default, skip_serializing_if = "SyscallState::is_completed")]
    pub state: SyscallState,
    /// Processes with a histogram for this syscall.
    pub processes: u64,
    pub count: u64,
    pub total_ns: u64,
    /// Percentiles: midpoint of the histogram bucket holding that rank, ≤ `max_ns`.
    pub p50_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    /// Exact maximum.
    pub max_ns: u64,
}

/// Which calls a [`SyscallStats`] row counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SyscallState {
    /// Started and returned inside the session.
    #[default]
    Completed,
    /// Already running at attach, returned inside the session.
    BeganBeforeStart,
    /// Started inside the session, still running at its end.
    InProgress,
    /// Running from before the start to the end.
    InProgressSinceStart,
}

impl SyscallState {
    pub fn is_completed(&self) -> bool {
        *self == SyscallState::Completed
    }

    /// Whether the calls are still running (their times are time so far).
    pub fn in_progress(&self) -> bool {
        matches!(
            self,
            SyscallState::InProgress | SyscallState::InProgressSinceStart
        )
    }
}

impl SyscallStats {
    /// The row's name in reports: the syscall, and which calls it counts unless they
    /// completed inside the session.
    pub fn label(&self) -> String {
        match self.state {
            SyscallState::Completed => self.name.clone(),
            SyscallState::BeganBeforeStart => format!("{} (began before start)", self.name),
            SyscallState::InProgress => format!("{} (in progress)", self.name),
            SyscallState::InProgressSinceStart => {
                format!("{} (in progress since start)", self.name)
            }
        }
    }
}

/// One process over the session.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ProcessRow {
    pub pid: i32,
    /// Parent pid of the first sample (or fork event).
    pub ppid: i32,
    /// Command name of the last sample.
    pub comm: String,
    pub start_time_ticks: u64,
    /// Whether it started inside the session (its counters' baseline is 0).
    pub started_in_session: bool,
    /// `t_ns` of its first and last frame (lifecycle-only processes: event times).
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// Number of frames it appears in (0: seen in lifecycle events only).
    pub frames: u64,
    /// Session utime+stime from its samples (eBPF: its exact on_cpu time; exit
    /// accounting: its threads' final schedstat run time), seconds; `None` when not
    /// measured (seen in lifecycle events only, no thread time).
    pub cpu_seconds: Option<f64>,
    /// Whether its figures (CPU, peak RSS, I/O) are its final counters, read as each of
    /// its threads exited (exit accounting, `Bundle::thread_exits`), rather than its
    /// last sample's.
    pub exact_at_exit: bool,
    /// Largest rss sample, bytes; `None` when never sampled.
    pub peak_rss_bytes: Option<u64>,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Whether /proc/<pid>/io was readable in at least one sample.
    pub io_visible: bool,
    /// Σ of its threads' classes.
    #[schemars(with = "crate::model::schema::ClassTimes")]
    #[serde(serialize_with = "crate::model::class_times_by_name")]
    pub classes: ClassTimes,
    /// Distinct threads observed.
    pub threads: u64,
    /// Its command line (`Bundle::command_lines`, the program it ran last); absent when
    /// not known (bundles without command lines: it keeps its comm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// Its cgroup, container, pod, unit and namespace pid (`Bundle::process_identities`);
    /// absent when never read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<placement::Placement>,
}

/// One thread over its window in the session.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ThreadRow {
    pub pid: i32,
    pub process_start_time_ticks: u64,
    pub tid: i32,
    pub comm: String,
    /// Window start (see `docs/PROFILE.md`), ns since session start.
    pub window_start_ns: u64,
    /// `t_ns` of the thread's last sample.
    pub window_end_ns: u64,
    /// Wall time attributed to the thread; the classes add up to exactly this.
    /// `max(window_end − window_start, on_cpu + runqueue)` from /proc, or the sum of
    /// the exact classes from eBPF.
    pub wall_ns: u64,
    #[schemars(with = "crate::model::schema::ClassTimes")]
    #[serde(serialize_with = "crate::model::class_times_by_name")]
    pub classes: ClassTimes,
    /// True when the classes came from the kernel (`class_ns`), false when the sleep
    /// classes were estimated from sampled states.
    pub exact: bool,
    /// Number of samples of this thread.
    pub samples: u64,
}

/// A node of the observed process tree.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TreeNode {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
    pub start_time_ticks: u64,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// As in [`ProcessRow::cpu_seconds`]: `None` when not measured.
    pub cpu_seconds: Option<f64>,
    /// As in [`ProcessRow::peak_rss_bytes`]: `None` when never sampled.
    pub peak_rss_bytes: Option<u64>,
    pub children: Vec<TreeNode>,
}

/// Host-wide network counters over the session (not attributable to the profiled tree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct NetworkTotals {
    /// Σ rx_bytes deltas of every interface except `lo`.
    pub rx_bytes: u64,
    /// Σ tx_bytes deltas of every interface except `lo`.
    pub tx_bytes: u64,
    pub interfaces: Vec<InterfaceDelta>,
}

/// Last − first of one interface's counters (0 when a counter went backwards).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct InterfaceDelta {
    pub interface: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
}

impl Analysis {
    /// Whether reports name each process's group: its processes span several
    /// containers, units or cgroups, or sit in a container.
    pub fn shows_groups(&self) -> bool {
        self.groups.len() > 1 || self.groups.iter().any(|g| g.container_id.is_some())
    }

    /// The class share of the total, 0..=1 (0 when no class time was observed).
    pub fn class_share(&self, class: LatencyClass) -> f64 {
        let total = self.latency_classes.total_ns();
        if total == 0 {
            0.0
        } else {
            self.latency_classes.get(class) as f64 / total as f64
        }
    }

    /// Whether `class` is measured exactly in this analysis (on_cpu and runqueue always
    /// are; the four sleep classes only when [`Analysis::latency_classes_exact`]).
    pub fn class_is_exact(&self, class: LatencyClass) -> bool {
        // Steal is never estimated: measured (tp_btf) or not at all (0: classic, /proc).
        self.latency_classes_exact
            || matches!(
                class,
                LatencyClass::OnCpu | LatencyClass::Runqueue | LatencyClass::Steal
            )
    }

    /// Whether the steal class was measured: tp_btf hooks (the kernel's runtime read),
    /// not classic tracepoints or /proc, where it is 0. Bundles that do not say: when
    /// eBPF and some thread has steal.
    pub fn steal_measured(&self) -> bool {
        match &self.time_accounting {
            Some(t) => t.on_cpu_source == OnCpuSource::SumExecRuntime,
            None => self.backend == Backend::Ebpf && self.latency_classes.steal > 0,
        }
    }

    /// The threads with steal, most first (then by pid, tid).
    pub fn steal_threads(&self) -> Vec<&ThreadRow> {
        let mut out: Vec<&ThreadRow> = self
            .threads
            .iter()
            .filter(|t| t.classes.steal > 0)
            .collect();
        out.sort_by(|x, y| {
            y.classes
                .steal
                .cmp(&x.classes.steal)
                .then_with(|| (x.pid, x.tid).cmp(&(y.pid, y.tid)))
        });
        out
    }

    /// The process row of `key`, if observed.
    pub fn process(&self, pid: i32, start_time_ticks: u64) -> Option<&ProcessRow> {
        self.processes
            .iter()
            .find(|p| p.pid == pid && p.start_time_ticks == start_time_ticks)
    }
}

/// Derive every reported number from a bundle. Pure and deterministic: one step per
/// concept, each in its own module.
pub fn analyze(bundle: &Bundle) -> Analysis {
    let window = accumulate::Window::of(bundle);
    let mut acc = accumulate::accumulate(bundle, &window);
    let reap_folds =
        accumulate::subtract_reaped_children_io(&mut acc.procs, &acc.frame_keys, &bundle.frames);
    let classes = classes::thread_classes(bundle, &window, &acc);
    let lifecycle_only = processes::lifecycle_only(bundle, &acc);
    let processes = processes::process_rows(bundle, &window, &acc, &classes, &lifecycle_only);
    let cpu = processes::cpu_totals(bundle, &window, &acc, &processes);
    let mut latency_classes = ClassTimes::default();
    for t in &classes.rows {
        latency_classes = latency_classes.saturating_add(&t.classes);
    }
    let read_bytes = (acc.procs)
        .values()
        .fold(0u64, |a, p| a.saturating_add(p.read.total));
    let write_bytes = (acc.procs)
        .values()
        .fold(0u64, |a, p| a.saturating_add(p.write.total));
    let processes_without_io = acc.procs.values().filter(|p| !p.io_visible).count() as u64;

    let tree = build_tree(&processes);
    let groups = placement::groups(&processes);

    Analysis {
        label: bundle.label.clone(),
        backend: bundle.backend,
        replayed_from: bundle.replayed_from.clone(),
        interval_ms: bundle.interval_ms,
        duration_ns: window.duration_ns(),
        duration_ms: window.duration_ns() as f64 / 1e6,
        frames: bundle.frames.len() as u64,
        frame_cap: bundle.frame_cap,
        distinct_pids: (acc.procs.len() + lifecycle_only.len()) as u64,
        cpu_seconds: cpu.cpu_seconds,
        cpu_source: cpu.cpu_source,
        sampled_cpu_seconds: cpu.sampled_cpu_seconds,
        cpu_coverage: cpu.cpu_coverage,
        processes_exact_at_exit: processes.iter().filter(|p| p.exact_at_exit).count() as u64,
        // The tree's peak is at least its largest process's exact peak (rusage, or
        // taskstats for the command): frames that never caught that process alive sum
        // to less (`run -- true` between two snapshots: 0 B).
        peak_rss_bytes: match cpu.max_single_rss_source {
            RssSource::Rusage => acc.peak_rss_bytes.max(cpu.max_single_rss_bytes),
            _ => acc.peak_rss_bytes,
        },
        peak_rss_t_ns: acc.peak_rss_t_ns,
        max_single_rss_bytes: cpu.max_single_rss_bytes,
        max_single_rss_source: cpu.max_single_rss_source,
        read_bytes,
        write_bytes,
        processes_without_io,
        latency_classes,
        latency_classes_exact: bundle.backend.latency_classes_exact(),
        events_lost: bundle.events_lost,
        events_lost_by_cause: bundle.events_lost_by_cause.clone(),
        skipped_files: (bundle.stacks.iter().flat_map(|s| &s.skipped_files))
            .map(|f| SkippedFileRow {
                path: f.path.clone(),
                reason: f.reason.clone(),
                count: f.count,
            })
            .collect(),
        syscalls: aggregate_syscalls(bundle),
        histogram_relative_error: kernelkite_common::hist::MIDPOINT_RELATIVE_ERROR,
        processes,
        threads: classes.rows,
        tree,
        network: network_totals(bundle),
        launched: bundle.launched.as_ref().map(|l| LaunchedSummary {
            argv: l.argv.clone(),
            pid: l.pid,
            exit_code: l.exit_code,
            signal: l.signal,
        }),
        reap_folds,
        time_accounting: bundle.host.time_accounting.clone(),
        host_steal_ns: host_steal_ns(bundle),
        groups,
        cgroup: cgroup_totals::cgroup_totals(bundle),
    }
}

/// See [`Analysis::host_steal_ns`].
fn host_steal_ns(bundle: &Bundle) -> Option<u64> {
    let mut ticks = bundle.frames.iter().filter_map(|f| f.host_steal_ticks);
    let first = ticks.next()?;
    let last = ticks.next_back().unwrap_or(first);
    let hz = bundle.host.clock_ticks_per_sec.max(1);
    Some(((last.saturating_sub(first)) as u128 * 1_000_000_000 / hz as u128) as u64)
}

/// The /proc estimate of one thread's classes over a window of `window_ns`.
///
/// `on_cpu` and `runqueue` are the schedstat deltas (exact). The rest of the wall time,
/// `max(0, window − on_cpu − runqueue)`, is split among the four sleep classes in
/// proportion to `votes` (one per off-CPU sample, see [`sample_class`]); integer
/// rounding leftovers go to the class with the most votes (ties: lowest class id); with
/// no off-CPU vote the remainder is `unknown_wait`. Without schedstat, running samples
/// (`votes[on_cpu]`) take part in the split as `on_cpu`. The classes add up to
/// `max(window, on_cpu + runqueue)`.
pub fn estimate_classes(
    window_ns: u64,
    on_cpu_ns: u64,
    runqueue_ns: u64,
    has_schedstat: bool,
    votes: &[u64; NUM_CLASSES],
) -> ClassTimes {
    let mut out = [0u64; NUM_CLASSES];
    let remainder;
    let mut weights = *votes;
    weights[LatencyClass::Runqueue.id() as usize] = 0;
    if has_schedstat {
        out[LatencyClass::OnCpu.id() as usize] = on_cpu_ns;
        out[LatencyClass::Runqueue.id() as usize] = runqueue_ns;
        remainder = window_ns.saturating_sub(on_cpu_ns.saturating_add(runqueue_ns));
        weights[LatencyClass::OnCpu.id() as usize] = 0;
    } else {
        remainder = window_ns;
    }
    let total_votes: u64 = weights.iter().sum();
    if total_votes == 0 {
        out[LatencyClass::UnknownWait.id() as usize] += remainder;
        return ClassTimes::from_array(out);
    }
    let mut given = 0u64;
    for i in 0..NUM_CLASSES {
        let share = (remainder as u128 * weights[i] as u128 / total_votes as u128) as u64;
        out[i] += share;
        given += share;
    }
    let mut best = 0;
    for i in 0..NUM_CLASSES {
        if weights[i] > weights[best] {
            best = i;
        }
    }
    out[best] += remainder - given;
    ClassTimes::from_array(out)
}

/// The value reported for percentile `p` (0..=100) of a histogram: the midpoint of the
/// bucket holding rank `ceil(p/100 × count)` (at least 1), never above `max_ns`.
/// Returns 0 for an empty histogram.
pub fn percentile_ns(buckets: &[(u32, u64)], count: u64, max_ns: u64, p: f64) -> u64 {
    if count == 0 {
        return 0;
    }
    let rank = ((p / 100.0 * count as f64).ceil() as u64).clamp(1, count);
    let mut seen = 0u64;
    for &(idx, n) in buckets {
        seen = seen.saturating_add(n);
        if seen >= rank {
            let idx = (idx as usize).min(NUM_BUCKETS - 1);
            let lo = bucket_lower(idx);
            let mid = lo + (bucket_upper(idx) - lo) / 2;
            return mid.min(max_ns);
        }
    }
    max_ns
}

/// The name a syscall histogram is reported under (see [`reported_syscall_name`]).
pub fn histogram_syscall_name(arch: &str, h: &crate::model::SyscallHistogram) -> String {
    reported_syscall_name(arch, h.nr, &h.name)
}

/// The name a recorded syscall is reported under: its recorded name, else the name of
/// its number on `arch`, else `syscall_<nr>`.
pub fn reported_syscall_name(arch: &str, nr: u32, recorded: &str) -> String {
    if recorded.is_empty() {
        syscall_name(arch, nr as i64)
            .map(str::to_string)
            .unwrap_or_else(|| format!("syscall_{nr}"))
    } else {
        recorded.to_string()
    }
}

/// Every row of the syscall table: the calls that completed (those that began before
/// the start apart), then the calls still in progress at the end, by total time.
fn aggregate_syscalls(bundle: &Bundle) -> Vec<SyscallStats> {
    let mut out = syscall_stats(&bundle.host.arch, &bundle.syscalls);
    out.extend(in_progress_stats(
        &bundle.host.arch,
        &bundle.syscalls_in_progress,
    ));
    sort_syscall_rows(&mut out);
    out
}

/// Heaviest first; ties by name, then state.
fn sort_syscall_rows(rows: &mut [SyscallStats]) {
    rows.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
            .then(a.state.cmp(&b.state))
    });
}

/// One row per (syscall, in progress since before the start or not) of the calls still
/// running: their count and time so far, with exact percentiles of the times so far.
pub fn in_progress_stats(
    arch: &str,
    calls: &[crate::model::SyscallInProgress],
) -> Vec<SyscallStats> {
    let mut by: BTreeMap<(String, SyscallState), (BTreeSet<i32>, Vec<u64>)> = BTreeMap::new();
    for c in calls {
        let state = if c.before_start {
            SyscallState::InProgressSinceStart
        } else {
            SyscallState::InProgress
        };
        let e = by
            .entry((reported_syscall_name(arch, c.nr, &c.name), state))
            .or_default();
        e.0.insert(c.pid);
        e.1.push(c.elapsed_ns);
    }
    by.into_iter()
        .map(|((name, state), (pids, mut times))| {
            times.sort_unstable();
            let rank = |p: f64| {
                let i = ((p / 100.0) * times.len() as f64).ceil() as usize;
                times[i.clamp(1, times.len()) - 1]
            };
            SyscallStats {
                name,
                state,
                processes: pids.len() as u64,
                count: times.len() as u64,
                total_ns: times.iter().fold(0u64, |t, &x| t.saturating_add(x)),
                p50_ns: rank(50.0),
                p95_ns: rank(95.0),
                p99_ns: rank(99.0),
                max_ns: times.last().copied().unwrap_or(0),
            }
        })
        .collect()
}

/// Aggregate per-process syscall histograms (recorded on `arch`) by syscall name, with
/// percentiles, sorted by total time (heaviest first). `analyze` uses it for the whole
/// bundle; live views use it for one process or one window.
pub fn syscall_stats<'a>(
    arch: &str,
    histograms: impl IntoIterator<Item = &'a crate::model::SyscallHistogram>,
) -> Vec<SyscallStats> {
    struct Acc {
        processes: BTreeSet<i32>,
        count: u64,
        total_ns: u64,
        max_ns: u64,
        buckets: BTreeMap<u32, u64>,
    }
    let mut by_name: BTreeMap<(String, SyscallState), Acc> = BTreeMap::new();
    for h in histograms {
        let name = histogram_syscall_name(arch, h);
        let state = if h.before_start {
            SyscallState::BeganBeforeStart
        } else {
            SyscallState::Completed
        };
        let a = by_name.entry((name, state)).or_insert_with(|| Acc {
            processes: BTreeSet::new(),
            count: 0,
            total_ns: 0,
            max_ns: 0,
            buckets: BTreeMap::new(),
        });
        a.processes.insert(h.pid);
        a.total_ns = a.total_ns.saturating_add(h.total_ns);
        a.max_ns = a.max_ns.max(h.max_ns);
        for &(idx, n) in &h.buckets {
            let b = a.buckets.entry(idx).or_default();
            *b = b.saturating_add(n);
            a.count = a.count.saturating_add(n);
        }
    }
    let mut out: Vec<SyscallStats> = by_name
        .into_iter()
        .map(|((name, state), a)| {
            let buckets: Vec<(u32, u64)> = a.buckets.into_iter().collect();
            SyscallStats {
                name,
                state,
                processes: a.processes.len() as u64,
                count: a.count,
                total_ns: a.total_ns,
                p50_ns: percentile_ns(&buckets, a.count, a.max_ns, 50.0),
                p95_ns: percentile_ns(&buckets, a.count, a.max_ns, 95.0),
                p99_ns: percentile_ns(&buckets, a.count, a.max_ns, 99.0),
                max_ns: a.max_ns,
            }
        })
        .collect();
    sort_syscall_rows(&mut out);
    out
}

fn network_totals(bundle: &Bundle) -> Option<NetworkTotals> {
    let mut first: BTreeMap<&str, &crate::model::NetDevCounters> = BTreeMap::new();
    let mut last: BTreeMap<&str, &crate::model::NetDevCounters> = BTreeMap::new();
    let mut any = false;
    for f in &bundle.frames {
        if let Some(net) = &f.network {
            any = true;
            for c in net {
                first.entry(c.interface.as_str()).or_insert(c);
                last.insert(c.interface.as_str(), c);
            }
        }
    }
    if !any {
        return None;
    }
    let interfaces: Vec<InterfaceDelta> = last
        .iter()
        .map(|(name, l)| {
            let f = first[name];
            InterfaceDelta {
                interface: name.to_string(),
                rx_bytes: l.rx_bytes.saturating_sub(f.rx_bytes),
                rx_packets: l.rx_packets.saturating_sub(f.rx_packets),
                tx_bytes: l.tx_bytes.saturating_sub(f.tx_bytes),
                tx_packets: l.tx_packets.saturating_sub(f.tx_packets),
            }
        })
        .collect();
    let non_lo = interfaces.iter().filter(|i| i.interface != "lo");
    let rx_bytes = non_lo
        .clone()
        .fold(0u64, |a, i| a.saturating_add(i.rx_bytes));
    let tx_bytes = non_lo.fold(0u64, |a, i| a.saturating_add(i.tx_bytes));
    Some(NetworkTotals {
        rx_bytes,
        tx_bytes,
        interfaces,
    })
}

/// Deepest tree the reports nest; a process deeper than this is shown as a root.
pub const MAX_TREE_DEPTH: usize = 256;

/// Build the observed tree from process rows: a process's parent is the process with pid
/// `ppid` that was seen no later than it (the latest such, across pid reuse); without
/// one it is a root. Children and roots are sorted by first appearance, then pid.
/// Impossible shapes cannot hurt: an edge that would close a cycle is dropped, and a
/// process nested deeper than [`MAX_TREE_DEPTH`] becomes a root.
/// The kernel's fork and exit times bound a process's lifetime exactly: widen each
/// row's first seen to its main thread's fork (the latest at or before the first
/// snapshot, so a reused pid keeps its own) and set its last seen to the exit (the
/// earliest after the first snapshot). The process tree needs this: a parent first snapshotted after its child
/// was forked would otherwise look younger than the child.
fn lifetimes_from_events(processes: &mut [ProcessRow], events: &[crate::model::LifecycleEvent]) {
    // The main threads' fork and exit times by pid, sorted: a long session has 100,000s
    // of processes and events, so each process looks its own up.
    let mut forks: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    let mut exits: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.tid == e.pid) {
        match e.kind {
            LifecycleKind::Fork => forks.entry(e.pid).or_default().push(e.t_ns),
            LifecycleKind::Exit => exits.entry(e.pid).or_default().push(e.t_ns),
            LifecycleKind::Exec => {}
        }
    }
    for times in forks.values_mut().chain(exits.values_mut()) {
        times.sort_unstable();
    }
    for p in processes.iter_mut() {
        // The latest fork at or before its first sighting.
        if let Some(times) = forks.get(&p.pid) {
            let n = times.partition_point(|&t| t <= p.first_seen_ns);
            if n > 0 {
                p.first_seen_ns = times[n - 1];
            }
        }
        // A zombie is sampled after its exit: the exit ends the lifetime either way.
        if let Some(times) = exits.get(&p.pid) {
            let n = times.partition_point(|&t| t < p.first_seen_ns);
            if let Some(&exit) = times.get(n) {
                p.last_seen_ns = exit;
            }
        }
    }
}

pub fn build_tree(processes: &[ProcessRow]) -> Vec<TreeNode> {
    let n = processes.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| {
        let p = &processes[i];
        (p.first_seen_ns, p.pid, p.start_time_ticks)
    });
    // Candidates per pid, in order of first appearance.
    let mut by_pid: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for &i in &order {
        by_pid.entry(processes[i].pid).or_default().push(i);
    }
    let mut parent: Vec<Option<usize>> = vec![None; n];
    for &i in &order {
        let child = &processes[i];
        parent[i] = by_pid.get(&child.ppid).and_then(|cands| {
            cands
                .iter()
                .copied()
                .rfind(|&j| j != i && processes[j].first_seen_ns <= child.first_seen_ns)
        });
    }
    // Drop edges that close a cycle (0 = unvisited, 1 = on the current path, 2 = done).
    let mut state = vec![0u8; n];
    for &start in &order {
        let mut path = Vec::new();
        let mut cur = Some(start);
        while let Some(c) = cur {
            match state[c] {
                2 => break,
                1 => {
                    if let Some(&last) = path.last() {
                        parent[last] = None;
                    }
                    break;
                }
                _ => {
                    state[c] = 1;
                    path.push(c);
                    cur = parent[c];
                }
            }
        }
        for c in path {
            state[c] = 2;
        }
    }
    // Depths, from the top of each chain down; too deep → root.
    let mut depth: Vec<Option<usize>> = vec![None; n];
    for &start in &order {
        let mut path = Vec::new();
        let mut cur = Some(start);
        while let Some(c) = cur {
            if depth[c].is_some() {
                break;
            }
            path.push(c);
            cur = parent[c];
        }
        for &c in path.iter().rev() {
            let d = parent[c].and_then(|p| depth[p]).map_or(0, |d| d + 1);
            if d > MAX_TREE_DEPTH {
                parent[c] = None;
                depth[c] = Some(0);
            } else {
                depth[c] = Some(d);
            }
        }
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &i in &order {
        if let Some(p) = parent[i] {
            children[p].push(i);
        }
    }
    fn node(i: usize, processes: &[ProcessRow], children: &[Vec<usize>]) -> TreeNode {
        let p = &processes[i];
        TreeNode {
            pid: p.pid,
            ppid: p.ppid,
            comm: p.comm.clone(),
            start_time_ticks: p.start_time_ticks,
            first_seen_ns: p.first_seen_ns,
            last_seen_ns: p.last_seen_ns,
            cpu_seconds: p.cpu_seconds,
            peak_rss_bytes: p.peak_rss_bytes,
            children: children[i]
                .iter()
                .map(|&c| node(c, processes, children))
                .collect(),
        }
    }
    order
        .iter()
        .filter(|&&i| parent[i].is_none())
        .map(|&i| node(i, processes, &children))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
