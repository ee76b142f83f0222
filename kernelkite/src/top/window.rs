//! Sliding windows over the feed's snapshots. A window is the span between a baseline
//! snapshot and the latest one; its numbers come from [`analyze`] run on a small bundle
//! of the snapshots inside the window, with every cumulative counter rebased to the
//! baseline. The UI never derives a number itself.

use std::collections::{BTreeMap, VecDeque};

use kernelkite_common::hist::bucket_upper;

use super::feed::{FeedInfo, Snapshot};
use crate::analysis::{analyze, waits, Analysis};
use crate::model::{
    Backend, Bundle, ClassTimes, StackProfile, StackSample, SyscallHistogram, WakerProfile,
    WakerSample,
};

/// Which span the view shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    LastSecond,
    LastTenSeconds,
    SinceStart,
}

/// The longest sliding window: snapshots older than this (but one) are dropped.
const LONGEST_SLIDING_NS: u64 = 10_000_000_000;

impl Window {
    pub fn next(self) -> Window {
        match self {
            Window::LastSecond => Window::LastTenSeconds,
            Window::LastTenSeconds => Window::SinceStart,
            Window::SinceStart => Window::LastSecond,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Window::LastSecond => "last 1 s",
            Window::LastTenSeconds => "last 10 s",
            Window::SinceStart => "since start",
        }
    }

    fn span_ns(self) -> Option<u64> {
        match self {
            Window::LastSecond => Some(1_000_000_000),
            Window::LastTenSeconds => Some(LONGEST_SLIDING_NS),
            Window::SinceStart => None,
        }
    }
}

/// The snapshots the windows need: the first one (for "since start") and a ring of the
/// recent ones covering the longest sliding window plus one baseline before it.
#[derive(Debug, Default)]
pub struct History {
    first: Option<Snapshot>,
    recent: VecDeque<Snapshot>,
}

impl History {
    pub fn push(&mut self, snapshot: Snapshot) {
        if self.first.is_none() {
            self.first = Some(without_stack_tables(snapshot.clone()));
        }
        // Only the latest snapshot's frame and stack tables are read (they only grow,
        // so they resolve every earlier snapshot's samples): don't keep a copy per
        // snapshot.
        if let Some(previous) = self.recent.pop_back() {
            self.recent.push_back(without_stack_tables(previous));
        }
        let latest_t = snapshot.frame.t_ns;
        self.recent.push_back(snapshot);
        let cutoff = latest_t.saturating_sub(LONGEST_SLIDING_NS);
        // Keep the newest snapshot at or before the cutoff: it is the 10 s baseline.
        while self.recent.len() >= 2 && self.recent[1].frame.t_ns <= cutoff {
            self.recent.pop_front();
        }
    }

    pub fn latest(&self) -> Option<&Snapshot> {
        self.recent.back()
    }

    pub fn len(&self) -> usize {
        self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.recent.is_empty()
    }

    /// The snapshots of `window`, oldest (the baseline) first. A sliding window starts
    /// at the newest snapshot at or before `latest - span` (or the oldest kept).
    pub fn snapshots(&self, window: Window) -> Vec<&Snapshot> {
        let Some(latest) = self.recent.back() else {
            return Vec::new();
        };
        match window.span_ns() {
            Some(span) => {
                let cutoff = latest.frame.t_ns.saturating_sub(span);
                let start = self
                    .recent
                    .iter()
                    .rposition(|s| s.frame.t_ns <= cutoff)
                    .unwrap_or(0);
                self.recent.iter().skip(start).collect()
            }
            None => {
                let mut out: Vec<&Snapshot> = Vec::with_capacity(self.recent.len() + 1);
                if let Some(first) = &self.first {
                    if self.recent.front().map(|s| s.frame.t_ns) != Some(first.frame.t_ns) {
                        out.push(first);
                    }
                }
                out.extend(self.recent.iter());
                out
            }
        }
    }
}

fn without_stack_tables(mut snapshot: Snapshot) -> Snapshot {
    if let Some(profile) = snapshot.stacks.as_mut() {
        profile.frames = Vec::new();
        profile.stacks = Vec::new();
    }
    snapshot
}

/// One window's derived numbers.
#[derive(Clone, Debug)]
pub struct WindowData {
    /// `analyze` of the rebased window bundle.
    pub analysis: Analysis,
    /// Per-(process, syscall) histograms of the calls that completed in the window.
    pub histograms: Vec<SyscallHistogram>,
    /// Latest minus baseline `t_ns`.
    pub window_ns: u64,
    /// Processes alive in the latest snapshot: `(pid, start_time_ticks)` -> live tids.
    pub alive: BTreeMap<(i32, u64), Vec<i32>>,
    /// Events lost since the feed started (kernel counters).
    pub events_lost: Option<u64>,
    /// `--stacks`: a bundle of the latest frame (it names the threads) and the window's
    /// stack profile (the latest profile's tables, its samples minus the baseline's), for
    /// `analysis::stacks`; `None` when the feed has no stacks (yet).
    pub stacks: Option<Bundle>,
    /// Each thread's main waker in the window (`(pid, tid)` -> who ended most of its
    /// sleep time there: `comm (tid)`, `timer`, `softirq:net_rx`...), live eBPF only.
    pub main_wakers: BTreeMap<(i32, i32), String>,
}

/// Per thread, the waker that ended the most sleep time in `wakers` (a window's
/// deltas); sleeps nothing ended (`not_woken`) name no waker.
fn main_wakers(wakers: Option<&WakerProfile>) -> BTreeMap<(i32, i32), String> {
    let mut best: BTreeMap<(i32, i32), (u64, String)> = BTreeMap::new();
    for w in wakers.into_iter().flat_map(|p| &p.wakeups) {
        if w.kind == "not_woken" || w.total_ns == 0 {
            continue;
        }
        let label = waits::waker_label(&waits::woken_by(w));
        let e = best.entry((w.pid, w.tid)).or_insert((0, String::new()));
        if w.total_ns > e.0 {
            *e = (w.total_ns, label);
        }
    }
    best.into_iter().map(|(k, (_, label))| (k, label)).collect()
}

/// `latest` minus `base`, per (thread, class, waker): the window's sleeps.
fn waker_deltas(latest: &WakerProfile, base: Option<&WakerProfile>) -> WakerProfile {
    let before: BTreeMap<_, (u64, u64)> = (base.into_iter())
        .flat_map(|b| &b.wakeups)
        .map(|w| (waker_key(w), (w.total_ns, w.count)))
        .collect();
    let wakeups = (latest.wakeups.iter())
        .filter_map(|w| {
            let (ns, n) = before.get(&waker_key(w)).copied().unwrap_or_default();
            let mut d = w.clone();
            d.total_ns = w.total_ns.saturating_sub(ns);
            d.count = w.count.saturating_sub(n);
            (d.total_ns > 0).then_some(d)
        })
        .collect();
    WakerProfile {
        wakeups,
        lost: latest.lost,
    }
}

fn waker_key(w: &WakerSample) -> (i32, i32, &str, &str, Option<&str>, Option<i32>) {
    (
        w.pid,
        w.tid,
        w.class.as_str(),
        w.kind.as_str(),
        w.source.as_deref(),
        w.waker_tid,
    )
}

/// The window bundle of `snapshots` (baseline first) and its analysis.
pub fn window_data(info: &FeedInfo, interval_ms: u64, snapshots: &[&Snapshot]) -> WindowData {
    let bundle = window_bundle(info, interval_ms, snapshots);
    let analysis = analyze(&bundle);
    let latest = snapshots.last();
    let alive = latest
        .map(|s| {
            s.frame
                .processes
                .iter()
                .map(|p| {
                    (
                        (p.pid, p.start_time_ticks),
                        p.threads.iter().map(|t| t.tid).collect(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    WindowData {
        analysis,
        window_ns: bundle.frames.last().map_or(0, |f| f.t_ns),
        stacks: bundle.stacks.map(|profile| {
            let mut stacks = Bundle::new(info.backend, info.host.clone(), interval_ms);
            stacks.frames.extend(bundle.frames.last().cloned());
            stacks.stacks = Some(profile);
            stacks
        }),
        main_wakers: main_wakers(bundle.wakers.as_ref()),
        histograms: bundle.syscalls,
        alive,
        events_lost: latest.and_then(|s| s.events_lost),
    }
}

/// A bundle holding only the window: times relative to the baseline, eBPF class
/// counters and syscall histograms minus the baseline's (the eBPF analysis takes a
/// thread's last class counters as its whole time; the /proc analysis already works
/// from deltas of the frames it is given).
pub fn window_bundle(info: &FeedInfo, interval_ms: u64, snapshots: &[&Snapshot]) -> Bundle {
    let mut bundle = Bundle::new(info.backend, info.host.clone(), interval_ms);
    let Some(base) = snapshots.first() else {
        return bundle;
    };
    let latest = snapshots.last().unwrap_or(base);
    let base_t = base.frame.t_ns;
    let base_classes: BTreeMap<(i32, u64, i32), ClassTimes> = base
        .frame
        .processes
        .iter()
        .flat_map(|p| {
            p.threads
                .iter()
                .filter_map(move |t| t.class_ns.map(|c| ((p.pid, p.start_time_ticks, t.tid), c)))
        })
        .collect();
    for s in snapshots {
        let mut frame = s.frame.clone();
        frame.t_ns = frame.t_ns.saturating_sub(base_t);
        if info.backend == Backend::Ebpf {
            for p in &mut frame.processes {
                for t in &mut p.threads {
                    let Some(c) = t.class_ns.as_mut() else {
                        continue;
                    };
                    if let Some(b) = base_classes.get(&(p.pid, p.start_time_ticks, t.tid)) {
                        *c = rebase_classes(c, b);
                    }
                    *c = clamp_to_window(*c, frame.t_ns);
                }
            }
        }
        bundle.frames.push(frame);
    }
    bundle.syscalls = histogram_deltas(&latest.syscalls, &base.syscalls);
    bundle.events_lost = latest.events_lost;
    bundle.stacks = latest
        .stacks
        .as_ref()
        .map(|p| stack_deltas(p, base.stacks.as_ref()));
    bundle.wakers = (latest.wakers.as_ref())
        .filter(|_| snapshots.len() > 1)
        .map(|w| waker_deltas(w, base.wakers.as_ref()));
    bundle
}

/// The window's stack profile: `latest`'s tables, its samples minus the baseline's (a
/// sample is cumulative time per thread, class and stacks), the ones with no time in
/// the window left out.
pub fn stack_deltas(latest: &StackProfile, base: Option<&StackProfile>) -> StackProfile {
    type Key<'a> = (i32, i32, &'a str, Option<u32>, Option<u32>);
    // A wait in progress is not cumulative: the latest one stands as it is.
    let before: BTreeMap<Key<'_>, (u64, u64, u64, u64)> = base
        .map(|b| {
            b.samples
                .iter()
                .filter(|s| !s.in_progress)
                .map(|s| {
                    (
                        (s.pid, s.tid, s.class.as_str(), s.user_stack, s.kernel_stack),
                        (s.total_ns, s.count, s.estimated_ns, s.sampled_count),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let samples = latest
        .samples
        .iter()
        .filter_map(|s| {
            if s.in_progress {
                return Some(s.clone());
            }
            let (total_ns, count, estimated_ns, sampled_count) = before
                .get(&(s.pid, s.tid, s.class.as_str(), s.user_stack, s.kernel_stack))
                .copied()
                .unwrap_or((0, 0, 0, 0));
            let total_ns = s.total_ns.saturating_sub(total_ns);
            let estimated_ns = s.estimated_ns.saturating_sub(estimated_ns);
            (total_ns > 0 || estimated_ns > 0).then(|| StackSample {
                total_ns,
                count: s.count.saturating_sub(count),
                estimated_ns,
                sampled_count: s.sampled_count.saturating_sub(sampled_count),
                ..s.clone()
            })
        })
        .collect();
    StackProfile {
        sample_hz: latest.sample_hz,
        min_block_ns: latest.min_block_ns,
        frames: latest.frames.clone(),
        stacks: latest.stacks.clone(),
        samples,
        captures_lost: latest
            .captures_lost
            .saturating_sub(base.map_or(0, |b| b.captures_lost)),
        skipped_files: latest.skipped_files.clone(),
        truncated_stacks: latest.truncated_stacks.clone(),
        modules: latest.modules.clone(),
        stack_copies: (latest.stack_copies).saturating_sub(base.map_or(0, |b| b.stack_copies)),
        stack_copies_short: (latest.stack_copies_short)
            .saturating_sub(base.map_or(0, |b| b.stack_copies_short)),
        stack_copies_lost: (latest.stack_copies_lost)
            .saturating_sub(base.map_or(0, |b| b.stack_copies_lost)),
        unwind_ns: (latest.unwind_ns).saturating_sub(base.map_or(0, |b| b.unwind_ns)),
    }
}

/// `later - earlier` per class, never below zero (the session never lets class counters
/// go backwards; a pid reused between two snapshots is a new thread anyway).
fn rebase_classes(later: &ClassTimes, earlier: &ClassTimes) -> ClassTimes {
    let (a, b) = (later.to_array(), earlier.to_array());
    let mut out = [0u64; kernelkite_common::NUM_CLASSES];
    for i in 0..out.len() {
        out[i] = a[i].saturating_sub(b[i]);
    }
    ClassTimes::from_array(out)
}

/// No thread spends more wall time in a window than the window. The session's counters
/// can run ahead of that once: a thread's first interval after attach is shown in the
/// class /proc saw and, rarely, closed by the kernel in another one (the session keeps
/// both, since counters never go back). The excess is taken from the thread's largest
/// class, the one that long first interval went to.
fn clamp_to_window(classes: ClassTimes, window_ns: u64) -> ClassTimes {
    let mut times = classes.to_array();
    let total: u64 = times.iter().fold(0u64, |a, b| a.saturating_add(*b));
    let excess = total.saturating_sub(window_ns);
    if excess > 0 {
        let largest = (0..times.len())
            .max_by_key(|&i| (times[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        times[largest] = times[largest].saturating_sub(excess);
    }
    ClassTimes::from_array(times)
}

/// The calls that completed between two cumulative histogram sets. The window's maximum
/// is exact when the cumulative maximum grew inside the window; otherwise it is bounded
/// by the upper end of the highest bucket that gained calls (and the old maximum).
pub fn histogram_deltas(
    latest: &[SyscallHistogram],
    base: &[SyscallHistogram],
) -> Vec<SyscallHistogram> {
    let base: BTreeMap<(i32, u32, bool), &SyscallHistogram> = base
        .iter()
        .map(|h| ((h.pid, h.nr, h.before_start), h))
        .collect();
    let mut out = Vec::new();
    for h in latest {
        let Some(b) = base.get(&(h.pid, h.nr, h.before_start)) else {
            if h.count > 0 {
                out.push(h.clone());
            }
            continue;
        };
        let before: BTreeMap<u32, u64> = b.buckets.iter().copied().collect();
        let buckets: Vec<(u32, u64)> = h
            .buckets
            .iter()
            .map(|&(i, n)| (i, n.saturating_sub(before.get(&i).copied().unwrap_or(0))))
            .filter(|&(_, n)| n > 0)
            .collect();
        let count: u64 = buckets.iter().map(|&(_, n)| n).sum();
        if count == 0 {
            continue;
        }
        let max_ns = if h.max_ns > b.max_ns {
            h.max_ns
        } else {
            let top = buckets.last().map_or(0, |&(i, _)| i as usize);
            h.max_ns.min(bucket_upper(top).saturating_sub(1))
        };
        out.push(SyscallHistogram {
            pid: h.pid,
            nr: h.nr,
            name: h.name.clone(),
            count,
            total_ns: h.total_ns.saturating_sub(b.total_ns),
            max_ns,
            buckets,
            before_start: h.before_start,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, HostConstants};

    fn host() -> HostConstants {
        HostConstants {
            num_cpus: 2,
            ..crate::model::test_builders::host()
        }
    }

    fn snap(t_ns: u64) -> Snapshot {
        Snapshot {
            frame: Frame {
                t_ns,
                processes: Vec::new(),
                network: None,
                host_steal_ticks: None,
            },
            syscalls: Vec::new(),
            events_lost: None,
            stacks: None,
            wakers: None,
            identities: Vec::new(),
        }
    }

    fn woken(tid: i32, kind: &str, waker_tid: Option<i32>, ns: u64) -> WakerSample {
        WakerSample {
            pid: 1,
            tid,
            class: "lock_wait".into(),
            kind: kind.into(),
            source: (kind == "interrupt").then(|| "timer".to_string()),
            source_id: None,
            waker_pid: waker_tid.map(|_| 1),
            waker_tid,
            waker_comm: waker_tid.map(|t| format!("w{t}")),
            total_ns: ns,
            count: 1,
        }
    }

    #[test]
    fn a_threads_main_waker_is_the_one_that_ended_most_of_its_sleep_in_the_window() {
        let profile = |samples: Vec<WakerSample>| WakerProfile {
            wakeups: samples,
            lost: 0,
        };
        let base = profile(vec![
            woken(2, "thread", Some(3), 900),
            woken(2, "interrupt", None, 10),
        ]);
        // In the window: thread 3 ended 100 ns more, the timer 500 ns more, and thread
        // 4's sleep no one ended.
        let latest = profile(vec![
            woken(2, "thread", Some(3), 1_000),
            woken(2, "interrupt", None, 510),
            woken(4, "not_woken", None, 7_000),
        ]);
        let window = waker_deltas(&latest, Some(&base));
        let main = main_wakers(Some(&window));
        assert_eq!(main.get(&(1, 2)).map(String::as_str), Some("timer"));
        assert_eq!(main.get(&(1, 4)), None);
        // Since the start (no baseline), thread 3 leads.
        let main = main_wakers(Some(&waker_deltas(&latest, None)));
        assert_eq!(main.get(&(1, 2)).map(String::as_str), Some("w3 (3)"));
    }

    #[test]
    fn sliding_windows_start_at_the_newest_snapshot_before_the_span() {
        let mut h = History::default();
        for s in 0..=30 {
            h.push(snap(s * 500_000_000));
        }
        let t = |w| -> Vec<u64> { h.snapshots(w).iter().map(|s| s.frame.t_ns).collect() };
        assert_eq!(
            t(Window::LastSecond),
            vec![14_000_000_000, 14_500_000_000, 15_000_000_000]
        );
        let ten = t(Window::LastTenSeconds);
        assert_eq!((ten[0], ten.len()), (5_000_000_000, 21));
        // The ring keeps only what the 10 s window needs, plus the first snapshot.
        assert_eq!(h.len(), 21);
        let all = t(Window::SinceStart);
        assert_eq!((all[0], all[1], all.len()), (0, 5_000_000_000, 22));
    }

    fn hist(pid: i32, buckets: Vec<(u32, u64)>, total_ns: u64, max_ns: u64) -> SyscallHistogram {
        SyscallHistogram {
            pid,
            nr: 202,
            name: "futex".into(),
            count: buckets.iter().map(|b| b.1).sum(),
            total_ns,
            max_ns,
            buckets,
            before_start: false,
        }
    }

    #[test]
    fn histogram_deltas_keep_only_the_window_calls() {
        let base = vec![
            hist(1, vec![(10, 5)], 50, 12),
            hist(2, vec![(10, 1)], 10, 10),
        ];
        let latest = vec![
            hist(1, vec![(10, 7), (40, 1)], 5_000, 4_000),
            hist(2, vec![(10, 1)], 10, 10),
            hist(3, vec![(12, 2)], 30, 14),
        ];
        let d = histogram_deltas(&latest, &base);
        assert_eq!(d.len(), 2, "pid 2 made no call in the window: {d:?}");
        assert_eq!((d[0].pid, d[0].count, d[0].total_ns), (1, 3, 4_950));
        assert_eq!(d[0].buckets, vec![(10, 2), (40, 1)]);
        // The maximum grew inside the window: it is exact.
        assert_eq!(d[0].max_ns, 4_000);
        assert_eq!((d[1].pid, d[1].count), (3, 2));
        // Otherwise it is bounded by the highest bucket that gained calls.
        let d = histogram_deltas(
            &[hist(1, vec![(3, 2)], 7, 900)],
            &[hist(1, vec![(3, 1)], 3, 900)],
        );
        assert_eq!(d[0].max_ns, bucket_upper(3) - 1);
    }

    #[test]
    fn ebpf_windows_rebase_class_counters_to_the_baseline() {
        use crate::model::{ProcessSample, ThreadSample};
        let proc_at = |t_ns: u64, lock_ns: u64, on_ns: u64| {
            let mut s = snap(t_ns);
            s.frame.processes.push(ProcessSample {
                pid: 7,
                ppid: 1,
                comm: "w".into(),
                state: "S".into(),
                start_time_ticks: 5,
                utime_ticks: 0,
                stime_ticks: 0,
                cutime_ticks: 0,
                cstime_ticks: 0,
                rss_pages: 1,
                num_threads: 1,
                io: None,
                threads: vec![ThreadSample {
                    tid: 7,
                    comm: "w".into(),
                    state: "S".into(),
                    schedstat: None,
                    syscall_nr: None,
                    class_ns: Some(ClassTimes {
                        on_cpu: on_ns,
                        lock_wait: lock_ns,
                        ..ClassTimes::default()
                    }),
                }],
            });
            s
        };
        let info = FeedInfo {
            backend: Backend::Ebpf,
            host: host(),
            scope: "pid 7".into(),
            hooks: Vec::new(),
            replay_of: None,
            stacks: false,
        };
        let a = proc_at(1_000_000_000, 900_000_000, 100_000_000);
        let b = proc_at(2_000_000_000, 1_700_000_000, 300_000_000);
        let data = window_data(&info, 1000, &[&a, &b]);
        assert_eq!(data.window_ns, 1_000_000_000);
        let p = &data.analysis.processes[0];
        assert_eq!(
            (p.classes.lock_wait, p.classes.on_cpu),
            (800_000_000, 200_000_000)
        );
        assert_eq!(data.alive[&(7, 5)], vec![7]);
        // A first event after attach adds time from before the baseline: clamped.
        let a = proc_at(1_000_000_000, 0, 0);
        let b = proc_at(2_000_000_000, 1_700_000_000, 300_000_000);
        let p = window_data(&info, 1000, &[&a, &b]).analysis.processes[0].clone();
        assert_eq!(
            (p.classes.lock_wait, p.classes.on_cpu),
            (700_000_000, 300_000_000)
        );
    }

    #[test]
    fn stack_deltas_keep_the_time_spent_in_the_window() {
        let sample = |tid: i32, user: u32, total_ns: u64, count: u64| StackSample {
            pid: 7,
            tid,
            class: "lock_wait".into(),
            user_stack: Some(user),
            kernel_stack: None,
            total_ns,
            count,
            estimated_ns: 0,
            sampled_count: 0,
            in_progress: false,
        };
        let profile = |samples: Vec<StackSample>, lost: u64| StackProfile {
            sample_hz: 99,
            min_block_ns: 1_000_000,
            frames: Vec::new(),
            stacks: vec![vec![], vec![]],
            samples,
            captures_lost: lost,
            skipped_files: Vec::new(),
            ..StackProfile::default()
        };
        let base = profile(vec![sample(7, 0, 500, 5), sample(8, 1, 300, 3)], 1);
        let latest = profile(
            vec![
                sample(7, 0, 800, 7),
                sample(8, 1, 300, 3),
                sample(8, 0, 50, 1),
            ],
            4,
        );
        let d = stack_deltas(&latest, Some(&base));
        // tid 8's first stack had no time in the window: left out.
        assert_eq!(d.samples, vec![sample(7, 0, 300, 2), sample(8, 0, 50, 1)]);
        assert_eq!((d.captures_lost, d.stacks.len()), (3, 2));
        assert_eq!(stack_deltas(&latest, None).samples, latest.samples);
    }
}
