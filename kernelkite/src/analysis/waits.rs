//! Who ended each thread's waits (the bundle's `wakers`), and which threads were idle.
//!
//! Idle rule (docs/PROFILE.md): a thread is idle when
//! - it spent most of its sleep time in sleeps no wakeup by work ended (`not_woken`:
//!   still open when the session ended, or ended only because its process exited, when
//!   the kernel wakes every thread to die: source `group_exit`): at least half of its
//!   sleep time (io_wait + lock_wait + syscall_blocked + unknown_wait), and more than
//!   its on-CPU time; or
//! - it slept through its whole traced life: its sleeps add up to at least 90% of its
//!   wall time and last a tenth of it on average, so there were at most ten (under `run`,
//!   a parked pool worker is woken once, by the exiting process, so its sleep does end;
//!   a main thread that only waits to join its workers is idle the same way).
//!
//! A pool worker parked on a condition variable for the whole session is idle; a thread
//! that waited for a lock many times and got it is not.

use std::collections::BTreeMap;

use kernelkite_common::LatencyClass;
use serde::Serialize;

use super::{Analysis, ThreadRow};
use crate::model::{Bundle, ClassTimes, LifecycleKind, WakerSample};

/// The sleep classes (every class but on_cpu, runqueue and steal).
pub const SLEEP_CLASSES: [LatencyClass; 4] = [
    LatencyClass::IoWait,
    LatencyClass::LockWait,
    LatencyClass::SyscallBlocked,
    LatencyClass::UnknownWait,
];

/// One waker of one thread's sleeps in one class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WokenBy {
    pub class: String,
    /// `thread`, `interrupt` or `not_woken`.
    pub kind: String,
    /// `interrupt`: `timer`, `hardirq:N`, `softirq:NAME` or `unknown`.
    pub source: Option<String>,
    /// `thread`: the waker.
    pub pid: Option<i32>,
    pub tid: Option<i32>,
    pub comm: Option<String>,
    pub ns: u64,
    pub count: u64,
}

/// One thread's waits by waker.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadWaits {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Its process's command line (`Bundle::command_lines`), when known.
    pub argv: Option<Vec<String>>,
    pub idle: bool,
    /// The thread's wall time and its sleep time (the four sleep classes).
    pub wall_ns: u64,
    pub sleep_ns: u64,
    pub on_cpu_ns: u64,
    pub not_woken_ns: u64,
    /// Largest first.
    pub woken_by: Vec<WokenBy>,
}

/// The threads that were idle and the classes of the others.
#[derive(Clone, Debug, PartialEq)]
pub struct IdleSplit {
    /// (pid, tid, comm, wall ns) of each idle thread.
    pub idle: Vec<(i32, i32, String, u64)>,
    /// Class times summed over the idle threads.
    pub idle_classes: ClassTimes,
    /// Class times summed over the other threads.
    pub busy_classes: ClassTimes,
}

fn sleep_ns(c: &ClassTimes) -> u64 {
    SLEEP_CLASSES.iter().map(|k| c.get(*k)).sum()
}

/// Whether a thread with these class times, `not_woken_ns` of open sleeps and `sleeps`
/// sleeps in all (ended or not) was idle.
pub fn is_idle(classes: &ClassTimes, not_woken_ns: u64, sleeps: u64) -> bool {
    let sleep = sleep_ns(classes);
    let mostly_not_woken = not_woken_ns > 0
        && not_woken_ns.saturating_mul(2) >= sleep
        && not_woken_ns > classes.get(LatencyClass::OnCpu);
    let wall = classes.total_ns() as f64;
    let slept_through =
        sleeps > 0 && sleep as f64 >= 0.9 * wall && sleep as f64 / sleeps as f64 >= wall / 10.0;
    mostly_not_woken || slept_through
}

/// One waker record of the bundle as a [`WokenBy`].
pub fn woken_by(s: &WakerSample) -> WokenBy {
    let source = match (s.source.as_deref(), s.source_id) {
        (Some("hardirq"), Some(irq)) => Some(format!("hardirq:{irq}")),
        (src, _) => src.map(str::to_string),
    };
    WokenBy {
        class: s.class.clone(),
        kind: s.kind.clone(),
        source,
        pid: s.waker_pid,
        tid: s.waker_tid,
        comm: s.waker_comm.clone(),
        ns: s.total_ns,
        count: s.count,
    }
}

/// A waker in a few words, as every view names it: `cargo (4242)`, `redis-benchmark
/// (4242, its own softirq:net_rx)` (a local send), `timer`, `softirq:block`, `not woken
/// (process exited)`.
pub fn waker_label(w: &WokenBy) -> String {
    match w.kind.as_str() {
        "thread" => match w.source.as_deref() {
            Some(s) => format!(
                "{} ({}, its own {s})",
                w.comm.as_deref().unwrap_or("?"),
                w.tid.unwrap_or(0)
            ),
            None => format!(
                "{} ({})",
                w.comm.as_deref().unwrap_or("?"),
                w.tid.unwrap_or(0)
            ),
        },
        "interrupt" => match w.source.as_deref() {
            Some("timer") => "timer".to_string(),
            Some("unknown") | None => "interrupt".to_string(),
            Some(s) => s.to_string(),
        },
        _ if w.source.as_deref() == Some("group_exit") => "not woken (process exited)".to_string(),
        _ => "not woken (asleep at the end)".to_string(),
    }
}

/// Every thread's waits, or `None` when the bundle has no waker data (the /proc
/// sampler, bundles written before kernelkite recorded wakers).
pub fn thread_waits(bundle: &Bundle, a: &Analysis) -> Option<Vec<ThreadWaits>> {
    let wakers = bundle.wakers.as_ref()?;
    let mut by_thread: BTreeMap<(i32, i32), Vec<WokenBy>> = BTreeMap::new();
    for s in &wakers.wakeups {
        by_thread
            .entry((s.pid, s.tid))
            .or_default()
            .push(woken_by(s));
    }
    let rows: BTreeMap<(i32, i32), &ThreadRow> =
        a.threads.iter().map(|t| ((t.pid, t.tid), t)).collect();
    // A thread that exited between snapshots has no comm from /proc: its exit record's.
    let exit_comms: BTreeMap<(i32, i32), &str> = (bundle.lifecycle.iter())
        .filter(|e| e.kind == LifecycleKind::Exit && !e.comm.is_empty())
        .map(|e| ((e.pid, e.tid), e.comm.as_str()))
        .collect();
    let commands = super::commands::latest_by_pid(bundle);
    let mut out = Vec::new();
    for ((pid, tid), mut list) in by_thread {
        list.sort_by(|x, y| y.ns.cmp(&x.ns).then_with(|| x.class.cmp(&y.class)));
        let not_woken_ns = (list.iter())
            .filter(|w| w.kind == "not_woken")
            .map(|w| w.ns)
            .sum();
        let (comm, classes) = match rows.get(&(pid, tid)) {
            Some(r) => (r.comm.clone(), r.classes),
            None => (String::new(), ClassTimes::default()),
        };
        let comm = match (comm.is_empty(), exit_comms.get(&(pid, tid))) {
            (true, Some(c)) => c.to_string(),
            _ => comm,
        };
        out.push(ThreadWaits {
            pid,
            tid,
            comm,
            argv: commands.get(&pid).map(|c| c.argv.clone()),
            idle: is_idle(&classes, not_woken_ns, list.iter().map(|w| w.count).sum()),
            wall_ns: classes.total_ns(),
            sleep_ns: sleep_ns(&classes),
            on_cpu_ns: classes.get(LatencyClass::OnCpu),
            not_woken_ns,
            woken_by: list,
        });
    }
    Some(out)
}

/// The idle threads and the class times of the rest, when the bundle has waker data.
pub fn idle_split(bundle: &Bundle, a: &Analysis) -> Option<IdleSplit> {
    let waits = thread_waits(bundle, a)?;
    let idle_tids: BTreeMap<(i32, i32), ()> = (waits.iter())
        .filter(|w| w.idle)
        .map(|w| ((w.pid, w.tid), ()))
        .collect();
    let mut split = IdleSplit {
        idle: Vec::new(),
        idle_classes: ClassTimes::default(),
        busy_classes: ClassTimes::default(),
    };
    for t in &a.threads {
        let into = if idle_tids.contains_key(&(t.pid, t.tid)) {
            let comm = (waits.iter())
                .find(|w| (w.pid, w.tid) == (t.pid, t.tid))
                .map_or_else(|| t.comm.clone(), |w| w.comm.clone());
            split.idle.push((t.pid, t.tid, comm, t.wall_ns));
            &mut split.idle_classes
        } else {
            &mut split.busy_classes
        };
        for class in LatencyClass::ALL {
            into.add(class, t.classes.get(class));
        }
    }
    Some(split)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(on_cpu: u64, lock: u64) -> ClassTimes {
        let mut c = ClassTimes::default();
        c.add(LatencyClass::OnCpu, on_cpu);
        c.add(LatencyClass::LockWait, lock);
        c
    }

    #[test]
    fn a_thread_mostly_not_woken_is_idle() {
        // Parked for the whole session.
        assert!(is_idle(&classes(1_000, 9_000_000), 9_000_000, 1));
        // Woken for most of its many sleeps.
        assert!(!is_idle(&classes(1_000, 9_000_000), 0, 11));
        assert!(!is_idle(&classes(1_000, 9_000_000), 1_000_000, 500));
        // Never left asleep at the end, but many sleeps.
        assert!(!is_idle(&classes(1_000, 9_000_000), 0, 500));
        // One sleep through its whole life, ended by the process's exit.
        assert!(is_idle(&classes(1_000, 9_000_000), 0, 1));
        // Busy on the CPU, then asleep at the end for less than it ran.
        assert!(!is_idle(&classes(9_000_000, 1_000_000), 1_000_000, 2));
    }
}
