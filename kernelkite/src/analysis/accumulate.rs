//! The first steps of an analysis: the session's window, one pass over the frames that
//! accumulates each process's and thread's counters from its baseline (the rules in
//! [`super`]), and undoing the kernel's fold of reaped children's I/O into their parent.

use std::collections::{BTreeMap, BTreeSet};

use kernelkite_common::{LatencyClass, NUM_CLASSES};

use super::{ProcessKey, ReapFold};
use crate::model::syscalls::sample_class;
use crate::model::{Backend, Bundle, ClassTimes, Frame, InlineStr};

/// The session's window, and what places a process inside it or before it.
pub(super) struct Window {
    /// Where the window starts: eBPF counts every thread from 0 (when tracking
    /// began); a sampler's window starts at its first frame.
    pub(super) first_t: u64,
    pub(super) last_t: u64,
    pub(super) hz: u64,
    /// The launched command's start time in clock ticks, if it was sampled.
    pub(super) session_start_ticks: Option<u64>,
    first_frame_keys: BTreeSet<ProcessKey>,
    /// A `run` bundle whose launched command was never sampled (it exited before the
    /// first frame) still only holds its descendants: all started inside the session.
    launched_unsampled: bool,
}

impl Window {
    pub(super) fn of(bundle: &Bundle) -> Window {
        let frames = &bundle.frames;
        let first_t = match bundle.backend {
            Backend::Ebpf => 0,
            Backend::Proc => frames.first().map_or(0, |f| f.t_ns),
        };
        let session_start_ticks = bundle.launched.as_ref().and_then(|l| {
            frames
                .iter()
                .flat_map(|f| f.processes.iter())
                .find(|p| p.pid == l.pid)
                .map(|p| p.start_time_ticks)
        });
        Window {
            first_t,
            last_t: frames.last().map_or(0, |f| f.t_ns),
            hz: bundle.host.clock_ticks_per_sec.max(1),
            session_start_ticks,
            first_frame_keys: frames
                .first()
                .map(|f| {
                    f.processes
                        .iter()
                        .map(|p| (p.pid, p.start_time_ticks))
                        .collect()
                })
                .unwrap_or_default(),
            launched_unsampled: bundle.launched.is_some() && session_start_ticks.is_none(),
        }
    }

    /// Where a process that started inside the session and is in no frame (read only
    /// at its exit) began: its start time in ticks placed on the session's clock, at
    /// most `end`.
    pub(super) fn start_of_unframed(&self, start_ticks: u64, end: u64) -> u64 {
        let since_start = match self.session_start_ticks {
            Some(s) => {
                (start_ticks.saturating_sub(s) as u128 * 1_000_000_000u128 / self.hz as u128)
                    .min(u64::MAX as u128) as u64
            }
            None => 0,
        };
        self.first_t.saturating_add(since_start).min(end)
    }

    pub(super) fn duration_ns(&self) -> u64 {
        self.last_t.saturating_sub(self.first_t)
    }

    /// Whether the process `key` started inside the session.
    pub(super) fn started_inside(&self, key: ProcessKey) -> bool {
        match self.session_start_ticks {
            Some(s) => key.1 >= s,
            None => self.launched_unsampled || !self.first_frame_keys.contains(&key),
        }
    }

    /// Window start of a process that started inside the session: its start time when
    /// the session start in ticks is known, clamped between the frame before its first
    /// frame and its first frame; without it, the frame before its first frame.
    pub(super) fn start_of_new(
        &self,
        frames: &[Frame],
        first_frame: usize,
        start_ticks: Option<u64>,
    ) -> u64 {
        let lo = if first_frame == 0 {
            self.first_t.min(frame_t(frames, 0))
        } else {
            frame_t(frames, first_frame - 1)
        };
        let hi = frame_t(frames, first_frame);
        let est = match (self.session_start_ticks, start_ticks) {
            (Some(s), Some(start_ticks)) if first_frame > 0 => {
                let ns = (start_ticks.saturating_sub(s) as u128 * 1_000_000_000u128
                    / self.hz as u128)
                    .min(u64::MAX as u128) as u64;
                ns.clamp(lo, hi.max(lo))
            }
            _ => lo,
        };
        est.max(lo)
    }
}

/// The time of frame `i` (0 past the end).
pub(super) fn frame_t(frames: &[Frame], i: usize) -> u64 {
    frames.get(i).map_or(0, |f| f.t_ns)
}

/// A cumulative counter's session total: `(first − baseline) + Σ max(0, next − prev)`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counter {
    pub(super) total: u64,
    pub(super) prev: Option<u64>,
}

impl Counter {
    /// The counter of a new thing that took this one's place (a thread that got the
    /// tid once pid_max wrapped): its value counts from 0.
    pub(super) fn restart(&mut self, value: u64) {
        self.total = self.total.saturating_add(value);
        self.prev = Some(value);
    }

    pub(super) fn push(&mut self, value: u64, baseline_zero: bool) {
        match self.prev {
            None => {
                if baseline_zero {
                    self.total = value;
                }
            }
            Some(prev) => self.total = self.total.saturating_add(value.saturating_sub(prev)),
        }
        self.prev = Some(value);
    }
}

#[derive(Default)]
pub(super) struct ProcAcc {
    pub(super) ppid: i32,
    pub(super) last_ppid: i32,
    pub(super) comm: InlineStr,
    pub(super) first_frame: usize,
    pub(super) last_frame: usize,
    pub(super) frames: u64,
    pub(super) in_session: bool,
    pub(super) cpu: Counter,
    pub(super) read: Counter,
    pub(super) write: Counter,
    pub(super) io_visible: bool,
    pub(super) peak_rss: u64,
    pub(super) threads: BTreeSet<i32>,
    /// The time of its last exit-stop observation (`Bundle::thread_exits`).
    pub(super) exit_t_ns: Option<u64>,
    /// Exit accounting: its exact CPU, the sum of its threads' final schedstat, when
    /// every thread it had was read at its exit stop.
    pub(super) exact_cpu_ns: Option<u64>,
}

pub(super) struct ThreadAcc {
    pub(super) comm: InlineStr,
    pub(super) first_frame: usize,
    pub(super) last_frame: usize,
    pub(super) samples: u64,
    pub(super) baseline_zero: bool,
    pub(super) on_cpu: Counter,
    pub(super) runqueue: Counter,
    pub(super) has_schedstat: bool,
    pub(super) votes: [u64; NUM_CLASSES],
    pub(super) class_first: Option<ClassTimes>,
    pub(super) class_last: Option<ClassTimes>,
    pub(super) class_broken: bool,
    /// When it was read at its exit stop (`Bundle::thread_exits`).
    pub(super) exit_t_ns: Option<u64>,
}

/// What one pass over the frames accumulates.
pub(super) struct Accumulated {
    pub(super) procs: BTreeMap<ProcessKey, ProcAcc>,
    pub(super) threads: BTreeMap<(i32, u64, i32), ThreadAcc>,
    /// Each frame's processes by pid.
    pub(super) frame_keys: Vec<BTreeMap<i32, ProcessKey>>,
    pub(super) peak_rss_bytes: u64,
    pub(super) peak_rss_t_ns: u64,
    pub(super) max_sample_rss: u64,
}

/// Accumulate every process's and thread's counters over the frames.
pub(super) fn accumulate(bundle: &Bundle, window: &Window) -> Accumulated {
    let frames = &bundle.frames;
    let page = bundle.host.page_size_bytes;
    let arch = bundle.host.arch.as_str();
    let first_t = window.first_t;
    let mut procs: BTreeMap<ProcessKey, ProcAcc> = BTreeMap::new();
    let mut threads: BTreeMap<(i32, u64, i32), ThreadAcc> = BTreeMap::new();
    let mut peak_rss_bytes = 0u64;
    let mut peak_rss_t_ns = first_t;
    let mut max_sample_rss = 0u64;

    let mut frame_keys: Vec<BTreeMap<i32, ProcessKey>> = Vec::with_capacity(frames.len());
    for (fi, frame) in frames.iter().enumerate() {
        frame_keys.push(
            frame
                .processes
                .iter()
                .map(|p| (p.pid, (p.pid, p.start_time_ticks)))
                .collect(),
        );
        let mut frame_rss = 0u64;
        for p in &frame.processes {
            let key = (p.pid, p.start_time_ticks);
            let rss = p.rss_pages.saturating_mul(page);
            frame_rss = frame_rss.saturating_add(rss);
            max_sample_rss = max_sample_rss.max(rss);
            let acc = procs.entry(key).or_insert_with(|| ProcAcc {
                ppid: p.ppid,
                first_frame: fi,
                in_session: window.started_inside(key),
                ..ProcAcc::default()
            });
            let zero = acc.in_session;
            acc.comm = p.comm.clone();
            acc.last_ppid = p.ppid;
            acc.last_frame = fi;
            acc.frames += 1;
            acc.cpu
                .push(p.utime_ticks.saturating_add(p.stime_ticks), zero);
            if let Some(io) = p.io {
                acc.io_visible = true;
                acc.read.push(io.read_bytes, zero);
                acc.write.push(io.write_bytes, zero);
            }
            acc.peak_rss = acc.peak_rss.max(rss);
            let proc_first_frame = acc.first_frame;
            for t in &p.threads {
                acc.threads.insert(t.tid);
                let tacc = threads
                    .entry((p.pid, p.start_time_ticks, t.tid))
                    .or_insert_with(|| ThreadAcc {
                        comm: InlineStr::default(),
                        first_frame: fi,
                        last_frame: fi,
                        samples: 0,
                        // A thread is new in the session if its process is, or if it appeared
                        // after its process's first frame.
                        baseline_zero: zero || fi > proc_first_frame,
                        on_cpu: Counter::default(),
                        runqueue: Counter::default(),
                        has_schedstat: false,
                        votes: [0; NUM_CLASSES],
                        class_first: None,
                        class_last: None,
                        class_broken: false,
                        exit_t_ns: None,
                    });
                tacc.comm = t.comm.clone();
                tacc.last_frame = fi;
                tacc.samples += 1;
                if let Some(s) = t.schedstat {
                    tacc.has_schedstat = true;
                    // Counters below the last sample's: another thread got the tid.
                    let reused = tacc.on_cpu.prev.is_some_and(|p| s.on_cpu_ns < p)
                        || tacc.runqueue.prev.is_some_and(|p| s.runqueue_ns < p);
                    if reused {
                        tacc.on_cpu.restart(s.on_cpu_ns);
                        tacc.runqueue.restart(s.runqueue_ns);
                    } else {
                        tacc.on_cpu.push(s.on_cpu_ns, tacc.baseline_zero);
                        tacc.runqueue.push(s.runqueue_ns, tacc.baseline_zero);
                    }
                }
                match sample_class(arch, &t.state, t.syscall_nr) {
                    Some(class) => tacc.votes[class.id() as usize] += 1,
                    None => tacc.votes[LatencyClass::OnCpu.id() as usize] += 1,
                }
                if let Some(c) = t.class_ns {
                    if tacc.class_first.is_none() {
                        tacc.class_first = Some(c);
                    }
                    if let Some(prev) = tacc.class_last {
                        if c.checked_sub(&prev).is_none() {
                            tacc.class_broken = true;
                        }
                    }
                    tacc.class_last = Some(c);
                }
            }
        }
        if frame_rss > peak_rss_bytes {
            peak_rss_bytes = frame_rss;
            peak_rss_t_ns = frame.t_ns;
        }
    }
    add_thread_exits(bundle, window, &mut procs, &mut threads);
    Accumulated {
        procs,
        threads,
        frame_keys,
        peak_rss_bytes,
        peak_rss_t_ns,
        max_sample_rss,
    }
}

/// Add each thread's final counters, read at its exit stop, as its process's and its
/// own last observation (after the frames: a zombie sampled later adds what exiting
/// cost, never less), and give a process whose every thread was read so its exact CPU.
fn add_thread_exits(
    bundle: &Bundle,
    window: &Window,
    procs: &mut BTreeMap<ProcessKey, ProcAcc>,
    threads: &mut BTreeMap<(i32, u64, i32), ThreadAcc>,
) {
    if bundle.thread_exits.is_empty() {
        return;
    }
    let page = bundle.host.page_size_bytes;
    // Past the last frame: the frame-indexed fields of a process seen only at its exit
    // name no frame.
    let no_frame = bundle.frames.len();
    for e in &bundle.thread_exits {
        let p = &e.process;
        let key = (p.pid, p.start_time_ticks);
        let acc = procs.entry(key).or_insert_with(|| ProcAcc {
            ppid: p.ppid,
            first_frame: no_frame,
            last_frame: no_frame,
            in_session: window.started_inside(key),
            ..ProcAcc::default()
        });
        let zero = acc.in_session;
        acc.comm = p.comm.clone();
        acc.last_ppid = p.ppid;
        acc.exit_t_ns = Some(e.t_ns);
        acc.cpu
            .push(p.utime_ticks.saturating_add(p.stime_ticks), zero);
        if let Some(io) = p.io {
            acc.io_visible = true;
            acc.read.push(io.read_bytes, zero);
            acc.write.push(io.write_bytes, zero);
        }
        let peak = match e.peak_rss_kib {
            Some(kib) => kib.saturating_mul(1024),
            None => p.rss_pages.saturating_mul(page),
        };
        acc.peak_rss = acc.peak_rss.max(peak);
        for t in &p.threads {
            acc.threads.insert(t.tid);
            let tacc = threads
                .entry((p.pid, p.start_time_ticks, t.tid))
                .or_insert_with(|| ThreadAcc {
                    comm: t.comm.clone(),
                    first_frame: no_frame,
                    last_frame: no_frame,
                    samples: 0,
                    // In no frame, not even the first: it started inside the session.
                    baseline_zero: true,
                    on_cpu: Counter::default(),
                    runqueue: Counter::default(),
                    has_schedstat: false,
                    votes: [0; NUM_CLASSES],
                    class_first: None,
                    class_last: None,
                    class_broken: false,
                    exit_t_ns: None,
                });
            tacc.comm = t.comm.clone();
            tacc.exit_t_ns = Some(e.t_ns);
            if let Some(s) = t.schedstat {
                tacc.has_schedstat = true;
                tacc.on_cpu.push(s.on_cpu_ns, tacc.baseline_zero);
                tacc.runqueue.push(s.runqueue_ns, tacc.baseline_zero);
            }
        }
    }
    for (&(pid, start), acc) in procs.iter_mut() {
        if acc.exit_t_ns.is_none() {
            continue;
        }
        let mut sum = 0u64;
        let mut all_read = true;
        for tid in &acc.threads {
            match threads.get(&(pid, start, *tid)) {
                Some(t) if t.exit_t_ns.is_some() && t.has_schedstat => {
                    sum = sum.saturating_add(t.on_cpu.total)
                }
                _ => all_read = false,
            }
        }
        acc.exact_cpu_ns = all_read.then_some(sum);
    }
}

/// Undo the kernel's fold of reaped children's I/O into their parent.
///
/// When a parent reaps a child, the kernel adds the child's final I/O counters to the
/// parent's (`/proc/<pid>/io` then includes reaped children), so summing processes would
/// count a child twice. For every process C that disappears between frames k and k+1,
/// the observed process that reaped it is its parent (ppid of C's last sample) if that
/// parent is still present after frame k; if the parent disappeared in the same interval,
/// its own parent (children are assumed to be reaped before their parent exits), and so
/// on. C's last sampled absolute `read_bytes`/`write_bytes` are subtracted from that
/// ancestor's session total (saturating), which leaves the ancestor with its own I/O plus
/// C's unseen tail (I/O after C's last sample). Children reaped by an unobserved process
/// (kernelkite itself as subreaper, init) are not folded into anything observed.
pub(super) fn subtract_reaped_children_io(
    procs: &mut BTreeMap<ProcessKey, ProcAcc>,
    frame_keys: &[BTreeMap<i32, ProcessKey>],
    frames: &[crate::model::Frame],
) -> Vec<ReapFold> {
    let mut folds = Vec::new();
    let nframes = frame_keys.len();
    let mut fold: BTreeMap<ProcessKey, (u64, u64)> = BTreeMap::new();
    // When a process was last observed: its exit stop, or its last frame.
    let last_t = |p: &ProcAcc| {
        (p.frames > 0)
            .then(|| frame_t(frames, p.last_frame))
            .max(p.exit_t_ns)
            .unwrap_or(0)
    };
    for (&key, child) in procs.iter() {
        if !child.io_visible {
            continue;
        }
        if let Some(exit_t) = child.exit_t_ns {
            // Read at its exit (exit accounting): its final I/O went to its parent at
            // the reap. The parent is the latest process of that pid started no later
            // than the child, if it was observed after the child's exit.
            let parent = procs
                .range((child.last_ppid, 0)..=(child.last_ppid, key.1))
                .next_back()
                .filter(|(&pk, p)| pk != key && last_t(p) > exit_t);
            if let Some((&pk, p)) = parent {
                let (read, write) = (child.read.prev.unwrap_or(0), child.write.prev.unwrap_or(0));
                let e = fold.entry(pk).or_default();
                e.0 = e.0.saturating_add(read);
                e.1 = e.1.saturating_add(write);
                folds.push(ReapFold {
                    child_pid: key.0,
                    child_start_time_ticks: key.1,
                    reaper_pid: pk.0,
                    reaper_start_time_ticks: pk.1,
                    child_last_seen_ns: exit_t,
                    folded_by_ns: last_t(p),
                    read_bytes: read,
                    write_bytes: write,
                });
            }
            continue;
        }
        if child.last_frame + 1 >= nframes {
            continue;
        }
        let k = child.last_frame;
        let read = child.read.prev.unwrap_or(0);
        let write = child.write.prev.unwrap_or(0);
        let mut cur = key;
        for _ in 0..=procs.len() {
            let cur_acc = &procs[&cur];
            let Some(&parent) = frame_keys
                .get(cur_acc.last_frame)
                .and_then(|m| m.get(&cur_acc.last_ppid))
            else {
                break;
            };
            let Some(p) = procs.get(&parent) else { break };
            if parent == cur || p.last_frame < k {
                break;
            }
            if p.last_frame > k {
                let e = fold.entry(parent).or_default();
                e.0 = e.0.saturating_add(read);
                e.1 = e.1.saturating_add(write);
                folds.push(ReapFold {
                    child_pid: key.0,
                    child_start_time_ticks: key.1,
                    reaper_pid: parent.0,
                    reaper_start_time_ticks: parent.1,
                    child_last_seen_ns: frames.get(k).map_or(0, |f| f.t_ns),
                    folded_by_ns: frames.get(k + 1).map_or(0, |f| f.t_ns),
                    read_bytes: read,
                    write_bytes: write,
                });
                break;
            }
            cur = parent;
        }
    }
    for (key, (read, write)) in fold {
        if let Some(p) = procs.get_mut(&key) {
            p.read.total = p.read.total.saturating_sub(read);
            p.write.total = p.write.total.saturating_sub(write);
        }
    }
    folds
}
