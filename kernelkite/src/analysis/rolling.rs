//! `kernelkite agent`: running totals whose memory is bounded by configuration, not by
//! uptime or process churn.
//!
//! A bundle keeps every process it ever saw; an always-on agent cannot. Here each
//! snapshot's cumulative counters (thread class times, syscall histograms) become
//! deltas against the previous snapshot, and each delta is added to one **series**:
//!
//! * a process's own series, for at most [`RollingConfig::top_processes`] live
//!   processes at a time. A free slot goes to the busiest process without one (the
//!   most [`RankBy`] time, smoothed over about ten snapshots); a process keeps its
//!   slot until it exits, or, after [`MIN_TENURE_NS`], until a waiting process is
//!   [`DISPLACE_FACTOR`] times busier or it has been idle for [`IDLE_EVICT_NS`].
//! * otherwise its **group**: its command name, or its cgroup ([`FoldBy`]), for at most
//!   [`RollingConfig::max_groups`] groups; every later group name folds into
//!   [`OTHER_GROUP`].
//!
//! A series only ever grows (counters stay monotonic across slot changes: a process
//! that gets a slot keeps what it did before in its group), and the sum over all
//! series is every traced thread's time. A process's own series is dropped
//! [`EXITED_RETENTION_NS`] after it exited (a scraper has seen its final value);
//! groups are kept for good, which [`RollingConfig::max_groups`] bounds.
//!
//! What the agent keeps is then: one entry per live thread and process, one
//! histogram per live (process, syscall), and the series — whatever the uptime.

use std::collections::{BTreeMap, HashMap, HashSet};

use kernelkite_common::hist::{bucket_upper, NUM_BUCKETS};
use kernelkite_common::{LatencyClass, NUM_CLASSES};

use crate::model::{ClassTimes, Frame, LifecycleEvent, LifecycleKind, SyscallHistogram};

/// The group every group name past [`RollingConfig::max_groups`] folds into.
pub const OTHER_GROUP: &str = "(other)";
/// The group of a process whose cgroup is not known (`--fold-by cgroup`).
pub const UNKNOWN_CGROUP: &str = "(unknown)";
/// A slotted process that did no ranked work for this long gives its slot to any
/// busier one.
pub const IDLE_EVICT_NS: u64 = 60_000_000_000;
/// A process gets a series of its own only once it has lived this long (or was there
/// when the agent started).
pub const MIN_AGE_NS: u64 = 5_000_000_000;
/// A slotted process keeps its slot at least this long.
pub const MIN_TENURE_NS: u64 = 60_000_000_000;
/// How many times busier (smoothed) a waiting process must be to take a slot.
pub const DISPLACE_FACTOR: u64 = 2;
/// How long the series of an exited process is still shown (scrapers see its final
/// value), after which it is dropped.
pub const EXITED_RETENTION_NS: u64 = 60_000_000_000;
/// Snapshots a thread may be missing from the frames before it is forgotten without an
/// exit record (its record was lost: `events_lost` counts it).
const MISSING_SNAPSHOTS: u32 = 5;

/// Upper bounds (exclusive, ns) of the agent's histogram buckets: powers of four from
/// 1,024 ns to 2^34 ns (17 s), then +Inf. Each is a bucket boundary of the kernel's
/// log-linear histogram (`kernelkite_common::hist`), so the re-bucketing is exact.
pub const COARSE_BOUNDS_NS: [u64; 13] = [
    1 << 10,
    1 << 12,
    1 << 14,
    1 << 16,
    1 << 18,
    1 << 20,
    1 << 22,
    1 << 24,
    1 << 26,
    1 << 28,
    1 << 30,
    1 << 32,
    1 << 34,
];

/// What groups a process without a series of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FoldBy {
    /// Its command name (`comm`).
    #[default]
    Comm,
    /// Its cgroup v2 path.
    Cgroup,
}

/// Which time ranks processes for a series of their own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankBy {
    /// Every class but `syscall_blocked` (the sleeps of idle servers: epoll, accept,
    /// nanosleep): time doing work or waiting for it.
    #[default]
    Busy,
    OnCpu,
    Runqueue,
    IoWait,
    LockWait,
    SyscallBlocked,
}

impl RankBy {
    fn of(self, delta: &[u64; NUM_CLASSES]) -> u64 {
        let class = |c: LatencyClass| delta[c.id() as usize];
        match self {
            RankBy::Busy => (LatencyClass::ALL.iter())
                .filter(|&&c| c != LatencyClass::SyscallBlocked)
                .map(|&c| class(c))
                .fold(0u64, u64::saturating_add),
            RankBy::OnCpu => class(LatencyClass::OnCpu),
            RankBy::Runqueue => class(LatencyClass::Runqueue),
            RankBy::IoWait => class(LatencyClass::IoWait),
            RankBy::LockWait => class(LatencyClass::LockWait),
            RankBy::SyscallBlocked => class(LatencyClass::SyscallBlocked),
        }
    }
}

/// The limits that bound the series (reloadable: a change applies from the next
/// snapshot; slots and groups already given stay).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RollingConfig {
    pub top_processes: usize,
    pub max_groups: usize,
    pub fold_by: FoldBy,
    pub rank_by: RankBy,
}

impl Default for RollingConfig {
    fn default() -> Self {
        RollingConfig {
            top_processes: 20,
            max_groups: 50,
            fold_by: FoldBy::Comm,
            rank_by: RankBy::Busy,
        }
    }
}

/// Whose series: a process's own, or a group's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SeriesKey {
    /// A process with a series of its own; its pid and command name when it got it (an
    /// exec to another name starts a new series).
    Process { pid: i32, comm: String },
    /// Processes folded by command name or cgroup ([`FoldBy`]).
    Group { fold_by: FoldByKey, name: String },
}

/// [`FoldBy`] as part of a series key (groups made before a reload keep theirs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FoldByKey {
    Comm,
    Cgroup,
}

/// Histogram of one series and syscall, in [`COARSE_BOUNDS_NS`] buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoarseHistogram {
    pub count: u64,
    pub sum_ns: u64,
    /// Calls per bucket (not cumulative): `COARSE_BOUNDS_NS.len()` bounds, then +Inf.
    pub buckets_calls: [u64; COARSE_BOUNDS_NS.len() + 1],
}

/// One series' totals since the agent started (or since the series was made).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeriesTotals {
    pub class_ns: [u64; NUM_CLASSES],
    /// By syscall name.
    pub syscalls: BTreeMap<String, CoarseHistogram>,
    /// Processes whose time went here (a group) or 1 (a process).
    pub processes: u64,
    /// Session time the series' process exited (own series only).
    exited_at_ns: Option<u64>,
}

/// Counts of how the series were decided, for the agent's own metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RollingStats {
    /// Processes seen so far.
    pub processes_seen: u64,
    /// Processes that got a series of their own.
    pub processes_given_series: u64,
    /// Processes whose time went only into a group (never had a series).
    pub processes_folded: u64,
    /// Slots taken back from idle processes.
    pub slots_evicted: u64,
    /// Group names folded into [`OTHER_GROUP`] because [`RollingConfig::max_groups`] was
    /// reached.
    pub groups_overflowed: u64,
    /// Threads forgotten without an exit record (their last interval is not counted).
    pub threads_missing: u64,
}

/// What one snapshot brings.
pub struct Tick<'a> {
    /// The agent's time of the snapshot (ns; it goes on across sessions, where the
    /// frame's own time starts over with each).
    pub t_ns: u64,
    pub frame: &'a Frame,
    /// Lifecycle events since the previous tick (the exits carry each thread's final
    /// class times).
    pub events: &'a [LifecycleEvent],
    /// The cumulative syscall histograms, one per (process, syscall).
    pub histograms: &'a [SyscallHistogram],
    /// Cgroup paths read since the previous tick: (pid, path).
    pub cgroups: &'a [(i32, String)],
    /// The architecture the syscall numbers are of.
    pub arch: &'a str,
}

#[derive(Clone, Debug)]
struct ThreadPrev {
    pid: i32,
    class_ns: [u64; NUM_CLASSES],
    /// Snapshots in a row the thread was not in the frame.
    missing: u32,
}

#[derive(Clone, Debug)]
struct ProcessState {
    start_time_ticks: u64,
    comm: String,
    /// Its own series, while it has a slot.
    own: Option<SeriesKey>,
    /// Its group's series (decided at first sight).
    group: Option<SeriesKey>,
    /// Ranked time in the last interval.
    rank_ns: u64,
    /// Session time it last did ranked work.
    last_busy_ns: u64,
    /// `rank_ns` smoothed over about ten snapshots, and whether it has been ranked once.
    rank_avg_ns: u64,
    ranked: bool,
    /// Session time it got its slot.
    slot_since_ns: u64,
    /// Session time of the first snapshot that showed it, and whether that was the
    /// agent's first (it was running before the agent).
    first_seen_ns: u64,
    seen_at_start: bool,
    /// Whether any of its time has gone to its group.
    folded: bool,
    /// Snapshots in a row it was not in the frame.
    missing: u32,
}

#[derive(Clone, Debug, Default)]
struct HistPrev {
    count: u64,
    total_ns: u64,
    buckets: Vec<(u32, u64)>,
}

/// The agent's running totals.
#[derive(Debug, Default)]
pub struct RollingTotals {
    config: RollingConfig,
    threads: HashMap<i32, ThreadPrev>,
    processes: HashMap<i32, ProcessState>,
    hists: HashMap<(i32, u32), HistPrev>,
    cgroups: HashMap<i32, String>,
    series: BTreeMap<SeriesKey, SeriesTotals>,
    /// Group names given so far (they count against `max_groups`).
    groups: HashSet<(FoldByKey, String)>,
    stats: RollingStats,
    last_t_ns: u64,
    /// The command names of this tick's exit records, by pid.
    exit_comms: HashMap<i32, String>,
    /// Snapshots folded in so far.
    snapshots: u64,
}

impl RollingTotals {
    pub fn new(config: RollingConfig) -> RollingTotals {
        RollingTotals {
            config,
            ..RollingTotals::default()
        }
    }

    pub fn config(&self) -> RollingConfig {
        self.config
    }

    /// New limits (SIGHUP): slots past a lower `top_processes` are taken back from the
    /// least busy; groups already made stay.
    pub fn set_config(&mut self, config: RollingConfig) {
        self.config = config;
    }

    pub fn stats(&self) -> RollingStats {
        self.stats
    }

    /// Every series with its totals, processes first by pid, then groups by name.
    pub fn series(&self) -> impl Iterator<Item = (&SeriesKey, &SeriesTotals)> {
        self.series.iter()
    }

    /// Live processes with a series of their own.
    pub fn own_series(&self) -> usize {
        (self.processes.values())
            .filter(|p| p.own.is_some() && p.missing == 0)
            .count()
    }

    /// The series `pid`'s time goes to now, if it has had any.
    pub fn current_series(&self, pid: i32) -> Option<&SeriesKey> {
        let p = self.processes.get(&pid)?;
        p.own.as_ref().or(p.group.as_ref())
    }

    /// (pid, cgroup path) of the processes whose cgroup is known.
    pub fn cgroup_of(&self, pid: i32) -> Option<&str> {
        self.cgroups.get(&pid).map(String::as_str)
    }

    /// Entries kept, for the soak's size log: each is bounded by live threads,
    /// processes and (process, syscall) pairs, or by the configured series.
    pub fn sizes(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("rolling_threads", self.threads.len() as u64),
            ("rolling_processes", self.processes.len() as u64),
            ("rolling_histograms", self.hists.len() as u64),
            ("rolling_cgroups", self.cgroups.len() as u64),
            ("rolling_series", self.series.len() as u64),
        ]
    }

    /// The session was replaced by a new one whose counters start from zero: forget
    /// the previous readings (slots, groups and series stay).
    pub fn session_restarted(&mut self) {
        self.threads.clear();
        self.hists.clear();
    }

    /// Fold in one snapshot.
    pub fn apply(&mut self, tick: Tick<'_>) {
        let t_ns = tick.t_ns;
        self.last_t_ns = t_ns;
        for (pid, path) in tick.cgroups {
            self.cgroups.insert(*pid, path.clone());
        }
        // Who is alive now, and under which name.
        for p in &tick.frame.processes {
            self.see_process(p.pid, p.start_time_ticks, &p.comm);
        }
        for state in self.processes.values_mut() {
            state.rank_ns = 0;
        }
        self.exit_comms = (tick.events.iter())
            .filter(|e| e.kind == LifecycleKind::Exit)
            .map(|e| (e.pid, e.comm.clone()))
            .collect();
        // Threads that exited since the last tick: their final times close them.
        let mut deltas: Vec<(i32, [u64; NUM_CLASSES])> = Vec::new();
        for e in tick.events {
            if e.kind != LifecycleKind::Exit {
                continue;
            }
            let Some(final_ns) = e.class_ns else { continue };
            let before = self.threads.remove(&e.tid).map(|t| t.class_ns);
            let d = minus(final_ns.to_array(), before);
            if self.processes.contains_key(&e.pid) {
                deltas.push((e.pid, d));
            } else {
                // A process that came and went between two snapshots: its group.
                self.add_unseen(e, d);
            }
        }
        // Threads in the frame: what they did since the last one.
        let mut in_frame: HashSet<i32> = HashSet::new();
        for p in &tick.frame.processes {
            for t in &p.threads {
                let Some(now) = t.class_ns else { continue };
                in_frame.insert(t.tid);
                let now = now.to_array();
                let prev = self.threads.insert(
                    t.tid,
                    ThreadPrev {
                        pid: p.pid,
                        class_ns: now,
                        missing: 0,
                    },
                );
                // A reused tid of another process starts from nothing.
                let before = prev.filter(|t| t.pid == p.pid).map(|t| t.class_ns);
                deltas.push((p.pid, minus(now, before)));
            }
        }
        let mut lost = 0;
        self.threads.retain(|tid, t| {
            if in_frame.contains(tid) {
                return true;
            }
            t.missing += 1;
            let keep = t.missing <= MISSING_SNAPSHOTS;
            lost += u64::from(!keep);
            keep
        });
        self.stats.threads_missing += lost;
        // Rank on this interval's work, then give free slots before adding the deltas,
        // so a new busy process's first interval is in its own series.
        let rank_by = self.config.rank_by;
        for (pid, d) in &deltas {
            if let Some(p) = self.processes.get_mut(pid) {
                p.rank_ns = p.rank_ns.saturating_add(rank_by.of(d));
                if p.rank_ns > 0 {
                    p.last_busy_ns = t_ns;
                }
            }
        }
        for p in self.processes.values_mut() {
            // Smoothed over about ten snapshots; a new process starts at its first.
            p.rank_avg_ns = if p.ranked {
                (p.rank_avg_ns / 10) * 9 + p.rank_ns / 10
            } else {
                p.rank_ns
            };
            p.ranked = true;
        }
        self.give_slots(t_ns);
        for (pid, d) in deltas {
            let key = self.series_of(pid);
            let s = self.series.entry(key).or_default();
            for (acc, v) in s.class_ns.iter_mut().zip(d) {
                *acc = acc.saturating_add(v);
            }
        }
        self.apply_histograms(tick.histograms, tick.arch);
        self.forget_gone(tick.frame, t_ns);
        self.snapshots += 1;
    }

    /// A process in the frame: new, renamed by an exec, or the same.
    fn see_process(&mut self, pid: i32, start_time_ticks: u64, comm: &str) {
        let same = self
            .processes
            .get(&pid)
            .is_some_and(|p| p.start_time_ticks == start_time_ticks);
        if !same {
            // New, or a reused pid: the earlier process is gone.
            self.retire(pid);
            self.stats.processes_seen += 1;
            self.processes.insert(
                pid,
                ProcessState {
                    start_time_ticks,
                    comm: comm.to_string(),
                    own: None,
                    group: None,
                    rank_ns: 0,
                    last_busy_ns: 0,
                    rank_avg_ns: 0,
                    ranked: false,
                    slot_since_ns: 0,
                    first_seen_ns: self.last_t_ns,
                    seen_at_start: self.snapshots == 0,
                    folded: false,
                    missing: 0,
                },
            );
        }
        let p = self.processes.get_mut(&pid).expect("inserted above");
        p.missing = 0;
        if p.comm != comm {
            // An exec to another program: its old series ends (a new one may come with
            // a slot), and its time goes to the group of its new name meanwhile.
            p.comm = comm.to_string();
            p.group = None;
            p.folded = false;
            if let Some(old) = p.own.take() {
                if let Some(s) = self.series.get_mut(&old) {
                    s.exited_at_ns = Some(self.last_t_ns);
                }
            }
        }
    }

    /// Give free slots to the busiest processes without one (by their smoothed rank).
    /// With no slot free, a waiting process takes the slot of the least busy slotted
    /// one that has held it for [`MIN_TENURE_NS`], if that one has been idle for
    /// [`IDLE_EVICT_NS`] or the waiting one is [`DISPLACE_FACTOR`] times busier: the top
    /// processes get series of their own without series flapping between neighbours.
    fn give_slots(&mut self, t_ns: u64) {
        let mut slotted: Vec<(u64, u64, i32)> = (self.processes.iter())
            .filter(|(_, p)| p.own.is_some() && p.missing == 0)
            .map(|(&pid, p)| (p.rank_avg_ns, p.last_busy_ns, pid))
            .collect();
        // Least busy first (then longest idle).
        slotted.sort();
        // Fewer slots after a reload: the least busy give theirs back.
        let excess = slotted.len().saturating_sub(self.config.top_processes);
        for (_, _, pid) in slotted.drain(..excess) {
            self.evict(pid);
        }
        let mut waiting: Vec<(u64, i32)> = (self.processes.iter())
            .filter(|(_, p)| p.own.is_none() && p.missing == 0 && p.rank_avg_ns > 0)
            // A short-lived process stays in its group (series of their own for a
            // churn of `sleep`s would only come and go).
            .filter(|(_, p)| p.seen_at_start || t_ns.saturating_sub(p.first_seen_ns) >= MIN_AGE_NS)
            .map(|(&pid, p)| (p.rank_avg_ns, pid))
            .collect();
        if waiting.is_empty() {
            return;
        }
        // Busiest first; pid breaks ties so the choice does not depend on hash order.
        waiting.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut displaceable = (slotted.iter())
            .filter(|&&(_, _, pid)| {
                (self.processes.get(&pid))
                    .is_some_and(|p| t_ns.saturating_sub(p.slot_since_ns) >= MIN_TENURE_NS)
            })
            .copied()
            .collect::<Vec<_>>()
            .into_iter()
            .peekable();
        let mut free = self.config.top_processes.saturating_sub(slotted.len());
        for (rank, pid) in waiting {
            if free == 0 {
                let Some(&(their_rank, their_busy, victim)) = displaceable.peek() else {
                    break;
                };
                let idle = t_ns.saturating_sub(their_busy) >= IDLE_EVICT_NS;
                if !idle && rank < their_rank.saturating_mul(DISPLACE_FACTOR) {
                    // The rest wait less busy still.
                    break;
                }
                displaceable.next();
                self.evict(victim);
                free += 1;
            }
            let p = self.processes.get_mut(&pid).expect("listed above");
            let key = SeriesKey::Process {
                pid,
                comm: p.comm.clone(),
            };
            p.own = Some(key.clone());
            p.slot_since_ns = t_ns;
            free -= 1;
            self.stats.processes_given_series += 1;
            let s = self.series.entry(key).or_default();
            s.processes = 1;
            s.exited_at_ns = None;
        }
    }

    /// The exit of a thread of a process no frame showed: into the group of its name
    /// (or cgroup, read at its exec).
    fn add_unseen(&mut self, e: &LifecycleEvent, d: [u64; NUM_CLASSES]) {
        let key = self.group_key(e.pid, &e.comm);
        let s = self.series.entry(key).or_default();
        for (acc, v) in s.class_ns.iter_mut().zip(d) {
            *acc = acc.saturating_add(v);
        }
        if e.tid == e.pid {
            s.processes += 1;
            self.stats.processes_seen += 1;
            self.stats.processes_folded += 1;
            self.cgroups.remove(&e.pid);
        }
    }

    /// The group `pid` folds into, by [`FoldBy`], within [`RollingConfig::max_groups`].
    fn group_key(&mut self, pid: i32, comm: &str) -> SeriesKey {
        let (fold_by, name) = match self.config.fold_by {
            FoldBy::Comm => (FoldByKey::Comm, comm.to_string()),
            FoldBy::Cgroup => (
                FoldByKey::Cgroup,
                (self.cgroups.get(&pid).cloned()).unwrap_or_else(|| UNKNOWN_CGROUP.into()),
            ),
        };
        let name = if self.groups.contains(&(fold_by, name.clone())) {
            name
        } else if self.groups.len() < self.config.max_groups {
            self.groups.insert((fold_by, name.clone()));
            name
        } else {
            self.stats.groups_overflowed += 1;
            OTHER_GROUP.to_string()
        };
        SeriesKey::Group { fold_by, name }
    }

    /// Take `pid`'s slot back: its series ends (shown until its retention passes), and
    /// its time goes to its group from now on.
    fn evict(&mut self, pid: i32) {
        let Some(own) = self.processes.get_mut(&pid).and_then(|p| p.own.take()) else {
            return;
        };
        self.stats.slots_evicted += 1;
        if let Some(s) = self.series.get_mut(&own) {
            s.exited_at_ns = Some(self.last_t_ns);
        }
    }

    /// The series `pid`'s time goes to now.
    fn series_of(&mut self, pid: i32) -> SeriesKey {
        if let Some(own) = self.processes.get(&pid).and_then(|p| p.own.clone()) {
            return own;
        }
        let (comm, known) = match self.processes.get(&pid) {
            Some(p) => (p.comm.clone(), true),
            // A process no frame showed: the name its exit record gave, if any.
            None => (
                (self.exit_comms.get(&pid).cloned()).unwrap_or_else(|| "?".to_string()),
                false,
            ),
        };
        if let Some(group) = self.processes.get(&pid).and_then(|p| p.group.clone()) {
            if let Some(p) = self.processes.get_mut(&pid) {
                if !p.folded {
                    p.folded = true;
                    self.series.entry(group.clone()).or_default().processes += 1;
                }
            }
            return group;
        }
        let key = self.group_key(pid, &comm);
        if known {
            let p = self.processes.get_mut(&pid).expect("known");
            p.group = Some(key.clone());
            p.folded = true;
            self.series.entry(key.clone()).or_default().processes += 1;
        }
        key
    }

    fn apply_histograms(&mut self, histograms: &[SyscallHistogram], arch: &str) {
        let mut present: HashSet<(i32, u32)> = HashSet::with_capacity(histograms.len());
        for h in histograms {
            present.insert((h.pid, h.nr));
            let prev = self.hists.remove(&(h.pid, h.nr)).unwrap_or_default();
            // Fewer calls than before: the pid was reused and its entry started over.
            let prev = if h.count < prev.count {
                HistPrev::default()
            } else {
                prev
            };
            if h.count > prev.count {
                let key = self.series_of(h.pid);
                let name = crate::analysis::histogram_syscall_name(arch, h);
                let series = self.series.entry(key).or_default();
                let acc = series.syscalls.entry(name).or_default();
                acc.count = acc.count.saturating_add(h.count - prev.count);
                acc.sum_ns = acc
                    .sum_ns
                    .saturating_add(h.total_ns.saturating_sub(prev.total_ns));
                let mut old = prev.buckets.iter().peekable();
                for &(i, n) in &h.buckets {
                    while old.peek().is_some_and(|&&(j, _)| j < i) {
                        old.next();
                    }
                    let before = match old.peek() {
                        Some(&&(j, m)) if j == i => m,
                        _ => 0,
                    };
                    let slot = coarse_slot(i as usize);
                    acc.buckets_calls[slot] =
                        acc.buckets_calls[slot].saturating_add(n.saturating_sub(before));
                }
            }
            self.hists.insert(
                (h.pid, h.nr),
                HistPrev {
                    count: h.count,
                    total_ns: h.total_ns,
                    buckets: h.buckets.clone(),
                },
            );
        }
        // Exited processes' histograms, once the session no longer lists them.
        self.hists.retain(|k, _| present.contains(k));
    }

    /// Forget processes that left the frames, and drop own series past their retention.
    fn forget_gone(&mut self, frame: &Frame, t_ns: u64) {
        let live: HashSet<i32> = frame.processes.iter().map(|p| p.pid).collect();
        let gone: Vec<i32> = (self.processes.iter_mut())
            .filter(|(pid, _)| !live.contains(pid))
            .filter_map(|(&pid, p)| {
                p.missing += 1;
                // Its threads' exit records may still be on their way.
                (p.missing > MISSING_SNAPSHOTS).then_some(pid)
            })
            .collect();
        for pid in gone {
            self.retire(pid);
        }
        self.series.retain(|key, s| match key {
            SeriesKey::Process { .. } => s
                .exited_at_ns
                .is_none_or(|at| t_ns.saturating_sub(at) < EXITED_RETENTION_NS),
            SeriesKey::Group { .. } => true,
        });
    }

    /// The process of `pid` is gone: its series ages out, its entries go.
    fn retire(&mut self, pid: i32) {
        let Some(p) = self.processes.remove(&pid) else {
            return;
        };
        if p.own.is_none() && p.folded {
            self.stats.processes_folded += 1;
        }
        if let Some(own) = &p.own {
            if let Some(s) = self.series.get_mut(own) {
                s.exited_at_ns = Some(self.last_t_ns);
            }
        }
        self.cgroups.remove(&pid);
    }
}

/// `now - before` per class, 0 where it went backwards.
fn minus(now: [u64; NUM_CLASSES], before: Option<[u64; NUM_CLASSES]>) -> [u64; NUM_CLASSES] {
    let before = before.unwrap_or_default();
    let mut d = [0u64; NUM_CLASSES];
    for i in 0..NUM_CLASSES {
        d[i] = now[i].saturating_sub(before[i]);
    }
    d
}

/// The coarse bucket of the kernel's bucket `index`: the first bound at or above its
/// end.
fn coarse_slot(index: usize) -> usize {
    let end = bucket_upper(index.min(NUM_BUCKETS - 1));
    COARSE_BOUNDS_NS
        .iter()
        .position(|&b| end <= b)
        .unwrap_or(COARSE_BOUNDS_NS.len())
}

/// The [`ClassTimes`] of a series' class array.
pub fn class_times(ns: &[u64; NUM_CLASSES]) -> ClassTimes {
    ClassTimes::from_array(*ns)
}

#[cfg(test)]
mod tests;
