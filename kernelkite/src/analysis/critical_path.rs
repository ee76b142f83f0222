//! The critical path of a session's root process (`kernelkite critical-path`), from the
//! wakeup stream `--critical-path` records (docs/PROFILE.md, "Critical path").
//!
//! Walk the root's wall time backwards from its end. While the current thread ran or
//! waited for a CPU (between two sleeps), it is on the path. At a sleep, the path moves
//! to the thread that ended it, at the moment of the wakeup (an exiting child wakes its
//! parent's wait4); a sleep ended by a timer, an interrupt or an untraced thread stays
//! on the sleeper, in the sleep's class. At a thread's start the path moves to the
//! thread that created it. The segments tile the root's wall time, so the time per
//! thread adds up to it exactly.
//!
//! A running period's class split (on_cpu, runqueue, steal) comes from the counters the
//! wakeup records carry (the thread's cumulative times when each sleep began); a part of
//! a period gets the period's split, in proportion.

use std::collections::BTreeMap;

use kernelkite_common::{LatencyClass, NUM_CLASSES};

use super::Analysis;
use crate::model::{Bundle, ClassTimes, LifecycleKind, Wakeup, NEW_TASK_CLASS};

/// Consecutive moves to a waker that consume no time before the walk gives up following
/// wakers at that moment (two threads each "woken" by the other at the same ns, from
/// clock skew between CPUs, would otherwise loop).
const MAX_JUMPS_AT_ONE_TIME: u32 = 16;

/// One piece of the path: one thread over one interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Nanoseconds since the session's start.
    pub start_ns: u64,
    pub end_ns: u64,
    /// True while the thread ran or waited for a CPU; false for a sleep the path could
    /// not follow further (`woken_by` says why).
    pub running: bool,
    pub classes: ClassTimes,
    /// A sleep's waker, in words: `timer`, `hardirq`, `softirq`, `interrupt`,
    /// `untraced thread COMM (pid P, tid T)`, or `not woken` (still asleep at the end).
    pub woken_by: Option<String>,
}

/// One thread's share of the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathThread {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// The comm of its process's main thread (a rustc worker thread's is `rustc`).
    pub process_comm: String,
    /// Its process's command line (`Bundle::command_lines`), when known.
    pub argv: Option<Vec<String>>,
    pub ns: u64,
    pub classes: ClassTimes,
}

/// The critical path of the root process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriticalPath {
    pub root_pid: i32,
    pub root_comm: String,
    /// The root's wall time: from its exec (`run`) or the start of tracing to its exit
    /// or the end of the session.
    pub start_ns: u64,
    pub wall_ns: u64,
    /// Largest first; their `ns` add up to `wall_ns`.
    pub by_thread: Vec<PathThread>,
    /// In time order; they tile `start_ns .. start_ns + wall_ns`.
    pub segments: Vec<Segment>,
    /// Wakeups that were not recorded (the path may skip a sleep there).
    pub wakeups_lost: u64,
}

/// Why there is no path to show.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoPath {
    #[error("it was recorded without --critical-path (no wakeup stream)")]
    NoStream,
    #[error("it names no root process")]
    NoRoot,
    #[error("its root process {0} has no traced main thread")]
    RootNotTraced(i32),
}

/// A sleep of one thread, from the stream.
#[derive(Clone, Debug)]
struct Sleep {
    start_ns: u64,
    wake_ns: u64,
    class: LatencyClass,
    waker_kind: String,
    waker_pid: i32,
    waker_tid: i32,
    /// The thread's cumulative class times when the sleep began.
    before: [u64; NUM_CLASSES],
}

#[derive(Clone, Debug)]
struct Timeline {
    pid: i32,
    tid: i32,
    comm: String,
    start_ns: u64,
    end_ns: u64,
    /// Class times over the thread's whole traced life.
    total: [u64; NUM_CLASSES],
    /// By start time.
    sleeps: Vec<Sleep>,
    /// The thread that created it, from its first wakeup.
    creator: Option<i32>,
}

impl Timeline {
    /// Class times at the end of sleep `i` (or, `None`, at the thread's start).
    fn after(&self, i: Option<usize>) -> [u64; NUM_CLASSES] {
        match i {
            None => [0; NUM_CLASSES],
            Some(i) => {
                let s = &self.sleeps[i];
                let mut c = s.before;
                let k = s.class as usize;
                c[k] = c[k].saturating_add(s.wake_ns.saturating_sub(s.start_ns));
                c
            }
        }
    }

    /// The class times of the running period after sleep `i` (or the start) and before
    /// the next sleep (or the end).
    fn period_classes(&self, i: Option<usize>) -> [u64; NUM_CLASSES] {
        let from = self.after(i);
        let next = i.map_or(0, |i| i + 1);
        let to = match self.sleeps.get(next) {
            Some(s) => s.before,
            None => self.total,
        };
        let mut out = [0; NUM_CLASSES];
        for k in 0..NUM_CLASSES {
            out[k] = to[k].saturating_sub(from[k]);
        }
        out
    }
}

/// `len` ns split over the classes in the proportions of `mix` (all on_cpu when the mix
/// is empty); the parts add up to `len` exactly.
fn split(len: u64, mix: [u64; NUM_CLASSES]) -> ClassTimes {
    let sum: u128 = mix.iter().map(|&v| v as u128).sum();
    let mut out = [0u64; NUM_CLASSES];
    if sum == 0 {
        out[LatencyClass::OnCpu as usize] = len;
        return ClassTimes::from_array(out);
    }
    let mut given = 0;
    let mut largest = 0;
    for k in 0..NUM_CLASSES {
        out[k] = (len as u128 * mix[k] as u128 / sum) as u64;
        given += out[k];
        if mix[k] > mix[largest] {
            largest = k;
        }
    }
    out[largest] += len - given;
    ClassTimes::from_array(out)
}

fn timelines(bundle: &Bundle, a: &Analysis, wakeups: &[Wakeup]) -> BTreeMap<i32, Timeline> {
    let mut out: BTreeMap<i32, Timeline> = BTreeMap::new();
    let exit_comms: BTreeMap<i32, &str> = (bundle.lifecycle.iter())
        .filter(|e| e.kind == LifecycleKind::Exit && !e.comm.is_empty())
        .map(|e| (e.tid, e.comm.as_str()))
        .collect();
    // The kernel's class times add up to the thread's traced life, which ends at its
    // exit record (or the end of the session) and so began wall_ns before.
    let exits: BTreeMap<i32, u64> = (bundle.lifecycle.iter())
        .filter(|e| e.kind == LifecycleKind::Exit)
        .map(|e| (e.tid, e.t_ns))
        .collect();
    for t in &a.threads {
        let end_ns = exits.get(&t.tid).copied().unwrap_or(t.window_end_ns);
        let comm = match (t.comm.is_empty(), exit_comms.get(&t.tid)) {
            (true, Some(c)) => c.to_string(),
            _ => t.comm.clone(),
        };
        out.insert(
            t.tid,
            Timeline {
                pid: t.pid,
                tid: t.tid,
                comm,
                start_ns: end_ns.saturating_sub(t.wall_ns),
                end_ns,
                total: t.classes.to_array(),
                sleeps: Vec::new(),
                creator: None,
            },
        );
    }
    for w in wakeups {
        let Some(t) = out.get_mut(&w.tid) else {
            continue;
        };
        if w.class == NEW_TASK_CLASS {
            if w.waker_kind == "thread" && w.waker_tid != w.tid {
                t.creator.get_or_insert(w.waker_tid);
            }
            continue;
        }
        let Some(class) = LatencyClass::from_name(&w.class) else {
            continue;
        };
        // The stream holds the sleep class counters implicitly (each sleep is one
        // record); they are summed below.
        let mut before = [0; NUM_CLASSES];
        before[LatencyClass::OnCpu as usize] = w.on_cpu_ns;
        before[LatencyClass::Runqueue as usize] = w.runqueue_ns;
        before[LatencyClass::Steal as usize] = w.steal_ns;
        t.sleeps.push(Sleep {
            start_ns: w.t_ns.saturating_sub(w.sleep_ns),
            wake_ns: w.t_ns,
            class,
            waker_kind: w.waker_kind.to_string(),
            waker_pid: w.waker_pid,
            waker_tid: w.waker_tid,
            before,
        });
    }
    for t in out.values_mut() {
        t.sleeps.sort_by_key(|s| (s.start_ns, s.wake_ns));
        let mut slept = [0u64; NUM_CLASSES];
        for s in &mut t.sleeps {
            for (b, done) in s.before.iter_mut().zip(slept) {
                *b = b.saturating_add(done);
            }
            let k = s.class as usize;
            slept[k] = slept[k].saturating_add(s.wake_ns.saturating_sub(s.start_ns));
        }
    }
    // Threads without a creator record (it was lost, or the thread predates the
    // session): the main thread of the process that forked it, if traced.
    let forks: BTreeMap<i32, i32> = (bundle.lifecycle.iter())
        .filter(|e| e.kind == LifecycleKind::Fork)
        .map(|e| (e.tid, if e.pid == e.tid { e.ppid } else { e.pid }))
        .collect();
    let tids: Vec<i32> = out.keys().copied().collect();
    for tid in tids {
        let parent = forks.get(&tid).copied();
        if let Some(t) = out.get_mut(&tid) {
            if t.creator.is_none() {
                t.creator = parent.filter(|&p| p != tid);
            }
        }
    }
    out
}

/// Untraced wakers' comms, from the waker profile.
fn waker_comms(bundle: &Bundle) -> BTreeMap<i32, String> {
    let mut out = BTreeMap::new();
    if let Some(w) = &bundle.wakers {
        for s in &w.wakeups {
            if let (Some(tid), Some(comm)) = (s.waker_tid, &s.waker_comm) {
                out.insert(tid, comm.clone());
            }
        }
    }
    out
}

/// The root process's critical path.
pub fn critical_path(bundle: &Bundle, a: &Analysis) -> Result<CriticalPath, NoPath> {
    let stream = bundle.wakeups.as_ref().ok_or(NoPath::NoStream)?;
    let root = (bundle.launched.as_ref().map(|l| l.pid))
        .or_else(|| bundle.root_pids.first().copied())
        .ok_or(NoPath::NoRoot)?;
    let threads = timelines(bundle, a, &stream.wakeups);
    let root_thread = threads.get(&root).ok_or(NoPath::RootNotTraced(root))?;
    // Under `run` the root is kernelkite's gate until it execs the command.
    let exec_ns = (bundle.lifecycle.iter())
        .find(|e| e.kind == LifecycleKind::Exec && e.pid == root)
        .map(|e| e.t_ns);
    let floor = exec_ns
        .unwrap_or(root_thread.start_ns)
        .clamp(root_thread.start_ns, root_thread.end_ns);
    let end = root_thread.end_ns;
    let comms = waker_comms(bundle);

    let mut backwards: Vec<Segment> = Vec::new();
    let mut cur = root;
    let mut t = end;
    let mut jumps = 0u32;
    let mut steps = 0usize;
    // Each step ends a segment or follows a waker (at most MAX_JUMPS_AT_ONE_TIME in a
    // row), and each sleep and running period gives at most a few segments: a bound
    // only a malformed bundle reaches.
    let step_limit = 20 * (stream.wakeups.len() + threads.len()) + 64;
    while t > floor {
        steps += 1;
        let th = &threads[&cur];
        if steps > step_limit {
            push(
                &mut backwards,
                seg(th, floor, t, false, unknown(), Some("?".into())),
            );
            break;
        }
        // The latest sleep that began before t.
        let i = th.sleeps.partition_point(|s| s.start_ns < t);
        let last = i.checked_sub(1);
        match last.map(|i| (i, &th.sleeps[i])) {
            Some((i, s)) if s.wake_ns < t => {
                // Running (or runnable) from the wakeup to t.
                let lo = s.wake_ns.max(floor);
                let mix = th.period_classes(Some(i));
                push(
                    &mut backwards,
                    seg(th, lo, t, true, split(t - lo, mix), None),
                );
                t = lo;
                jumps = 0;
            }
            Some((_, s)) => {
                // Asleep at t: follow the waker if it can be followed.
                // A thread woken to die (`group_exit`) waited for the thread that ran
                // the exit: the path goes on there too.
                let waker = threads.get(&s.waker_tid).filter(|w| {
                    (s.waker_kind == "thread" || s.waker_kind == "group_exit")
                        && w.tid != cur
                        && w.start_ns < t
                        && jumps < MAX_JUMPS_AT_ONE_TIME
                });
                if let Some(w) = waker {
                    // The wakeup's time is sched_wakeup's, which can run after the
                    // waker's try_to_wake_up (on the wakee's CPU, from an IPI); by then
                    // the waker may have gone to sleep itself. It woke us before that
                    // sleep: the gap is the wakee's wait for the wakeup to land, and the
                    // path goes on in the waker from where it was last running.
                    let j = w.sleeps.partition_point(|x| x.start_ns < t);
                    let asleep_since = (j.checked_sub(1).map(|j| &w.sleeps[j]))
                        .filter(|x| x.wake_ns >= t && x.start_ns > s.start_ns.max(floor))
                        .map(|x| x.start_ns);
                    if let Some(lo) = asleep_since {
                        let mut c = ClassTimes::default();
                        c.add(s.class, t - lo);
                        let why = format!("{} (pid {}, tid {})", w.comm, s.waker_pid, w.tid);
                        push(&mut backwards, seg(th, lo, t, false, c, Some(why)));
                        t = lo;
                    }
                    cur = w.tid;
                    jumps += 1;
                    continue;
                }
                let lo = s.start_ns.max(floor);
                let why = match s.waker_kind.as_str() {
                    "thread" if threads.contains_key(&s.waker_tid) => format!(
                        "{} (pid {}, tid {})",
                        threads[&s.waker_tid].comm, s.waker_pid, s.waker_tid
                    ),
                    "thread" => format!(
                        "untraced thread {} (pid {}, tid {})",
                        comms.get(&s.waker_tid).map_or("?", String::as_str),
                        s.waker_pid,
                        s.waker_tid
                    ),
                    other => other.to_string(),
                };
                let mut c = ClassTimes::default();
                c.add(s.class, t - lo);
                push(&mut backwards, seg(th, lo, t, false, c, Some(why)));
                t = lo;
                jumps = 0;
            }
            None => {
                // Running since the thread's start (or the tail of a thread with no
                // sleep at all).
                let lo = th.start_ns.max(floor).min(t);
                if lo < t {
                    let mix = th.period_classes(None);
                    push(
                        &mut backwards,
                        seg(th, lo, t, true, split(t - lo, mix), None),
                    );
                    t = lo;
                    jumps = 0;
                }
                if t <= floor {
                    break;
                }
                match th.creator.filter(|c| threads.contains_key(c) && *c != cur) {
                    Some(c) if jumps < MAX_JUMPS_AT_ONE_TIME => {
                        cur = c;
                        jumps += 1;
                    }
                    _ => {
                        let why = Some("its creator was not traced".to_string());
                        push(
                            &mut backwards,
                            seg(th, floor, t, false, unknown_of(t - floor), why),
                        );
                        break;
                    }
                }
            }
        }
    }
    backwards.reverse();
    let segments = backwards;
    let commands = super::commands::latest_by_pid(bundle);
    let mut by: BTreeMap<i32, PathThread> = BTreeMap::new();
    for s in &segments {
        let e = by.entry(s.tid).or_insert_with(|| PathThread {
            pid: s.pid,
            tid: s.tid,
            comm: s.comm.clone(),
            process_comm: threads.get(&s.pid).map_or(&s.comm, |m| &m.comm).clone(),
            argv: commands.get(&s.pid).map(|c| c.argv.clone()),
            ns: 0,
            classes: ClassTimes::default(),
        });
        e.ns = e.ns.saturating_add(s.end_ns - s.start_ns);
        e.classes = e.classes.saturating_add(&s.classes);
    }
    let mut by_thread: Vec<PathThread> = by.into_values().collect();
    by_thread.sort_by(|x, y| y.ns.cmp(&x.ns).then(x.tid.cmp(&y.tid)));
    Ok(CriticalPath {
        root_pid: root,
        root_comm: root_thread.comm.clone(),
        start_ns: floor,
        wall_ns: end - floor,
        by_thread,
        segments,
        wakeups_lost: stream.lost,
    })
}

fn unknown() -> ClassTimes {
    ClassTimes::default()
}

fn unknown_of(ns: u64) -> ClassTimes {
    let mut c = ClassTimes::default();
    c.add(LatencyClass::UnknownWait, ns);
    c
}

fn seg(
    th: &Timeline,
    lo: u64,
    hi: u64,
    running: bool,
    classes: ClassTimes,
    woken_by: Option<String>,
) -> Segment {
    let classes = if classes.total_ns() == 0 && hi > lo {
        unknown_of(hi - lo)
    } else {
        classes
    };
    Segment {
        pid: th.pid,
        tid: th.tid,
        comm: th.comm.clone(),
        start_ns: lo,
        end_ns: hi,
        running,
        classes,
        woken_by,
    }
}

/// Add a segment found walking backwards, merged into the previous one when it
/// continues it (same thread, same state, touching).
fn push(backwards: &mut Vec<Segment>, s: Segment) {
    if s.end_ns <= s.start_ns {
        return;
    }
    if let Some(prev) = backwards.last_mut() {
        if prev.tid == s.tid
            && prev.running == s.running
            && prev.woken_by == s.woken_by
            && prev.start_ns == s.end_ns
        {
            prev.start_ns = s.start_ns;
            prev.classes = prev.classes.saturating_add(&s.classes);
            return;
        }
    }
    backwards.push(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_adds_up_to_its_length() {
        let mut mix = [0; NUM_CLASSES];
        mix[LatencyClass::OnCpu as usize] = 2;
        mix[LatencyClass::Runqueue as usize] = 1;
        let c = split(1000, mix);
        assert_eq!(c.total_ns(), 1000);
        assert_eq!(c.get(LatencyClass::OnCpu), 667);
        assert_eq!(split(5, [0; NUM_CLASSES]).get(LatencyClass::OnCpu), 5);
    }
}
