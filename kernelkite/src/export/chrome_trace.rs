//! `--format chrome-trace`: the Trace Event Format (JSON object form) that Perfetto UI
//! and chrome://tracing open.
//!
//! * One track per thread (`pid` = process, `tid` = thread), named by `M` metadata
//!   events (`process_name`, `thread_name`).
//! * Latency-class slices (`X`, coloured with `cname`) per snapshot interval: the
//!   thread's class deltas between two frames (eBPF: exact `class_ns`; /proc: the
//!   schedstat `on_cpu` and `runqueue` deltas, the only classes a sampler measures per
//!   interval). The kernel reports how much time each class took in the interval, not
//!   when, so the slices are laid end to end in class order, ending at the interval's
//!   end: a slice's length is exact, its position inside the interval is not.
//!   A thread that exited between frames gets its last interval from its exit record.
//! * Slow syscalls as async slices (`b`/`e`, category `syscall`): they overlap the class
//!   slices of their thread, which complete events on one track could not.
//! * Process lifetimes as `X` slices on the tracks of a synthetic process (pid 0,
//!   "process lifetimes"), one track per traced pid.
//!
//! Times are microseconds since the session start (`ts`, `dur`), fractional.

use std::collections::BTreeMap;

use kernelkite_common::LatencyClass;
use serde_json::{json, Value};

use crate::analysis::Analysis;
use crate::model::{Bundle, ClassTimes, LifecycleKind};
use crate::report::timeline;

/// The synthetic process whose tracks show process lifetimes.
pub const LIFETIMES_PID: i32 = 0;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The trace-viewer colour of a class.
pub fn class_cname(class: LatencyClass) -> &'static str {
    match class {
        LatencyClass::OnCpu => "thread_state_running",
        LatencyClass::Runqueue => "thread_state_runnable",
        LatencyClass::IoWait => "thread_state_iowait",
        LatencyClass::LockWait => "thread_state_uninterruptible",
        LatencyClass::SyscallBlocked => "thread_state_sleeping",
        LatencyClass::UnknownWait => "thread_state_unknown",
    }
}

/// Class slices of `delta`, laid end to end so the last one ends at `end_ns`, but
/// never starting before `floor_ns` (the end of the thread's previous slices), so the
/// slices of one track never overlap. Returns where the slices end.
fn class_slices(
    out: &mut Vec<Value>,
    (pid, tid): (i32, i32),
    (floor_ns, end_ns): (u64, u64),
    delta: &ClassTimes,
    classes: &[LatencyClass],
) -> u64 {
    let total: u64 = classes
        .iter()
        .map(|c| delta.get(*c))
        .fold(0, u64::saturating_add);
    let mut t = end_ns.saturating_sub(total).max(floor_ns);
    for &c in classes {
        let d = delta.get(c).min(end_ns.saturating_sub(t));
        if d == 0 {
            continue;
        }
        out.push(json!({
            "name": c.name(),
            "cat": "latency_class",
            "ph": "X",
            "ts": us(t),
            "dur": us(d),
            "pid": pid,
            "tid": tid,
            "cname": class_cname(c),
        }));
        t += d;
    }
    t.max(floor_ns)
}

/// The trace document of a bundle.
pub fn document(bundle: &Bundle, analysis: &Analysis) -> Value {
    let mut events: Vec<Value> = Vec::new();
    let mut process_names: BTreeMap<i32, String> = BTreeMap::new();
    let mut thread_names: BTreeMap<(i32, i32), String> = BTreeMap::new();

    // Per thread: the cumulative classes at its previous sample (eBPF) or its previous
    // schedstat (proc), to take deltas from.
    let mut last: BTreeMap<(i32, i32), ClassTimes> = BTreeMap::new();
    let mut slices_end: BTreeMap<(i32, i32), u64> = BTreeMap::new();
    for f in &bundle.frames {
        for p in &f.processes {
            process_names.insert(p.pid, p.comm.clone());
            for t in &p.threads {
                thread_names.insert((p.pid, t.tid), t.comm.clone());
                let (now, classes): (Option<ClassTimes>, &[LatencyClass]) =
                    match (t.class_ns, t.schedstat) {
                        (Some(c), _) => (Some(c), &LatencyClass::ALL),
                        (None, Some(s)) => {
                            let mut c = ClassTimes::default();
                            c.add(LatencyClass::OnCpu, s.on_cpu_ns);
                            c.add(LatencyClass::Runqueue, s.runqueue_ns);
                            (Some(c), &[LatencyClass::OnCpu, LatencyClass::Runqueue])
                        }
                        (None, None) => (None, &[]),
                    };
                let Some(now) = now else { continue };
                // eBPF counters start at 0 when tracking began: a thread's first sample
                // covers the interval before it.
                let before = match last.get(&(p.pid, t.tid)) {
                    Some(b) => Some(*b),
                    None if t.class_ns.is_some() => Some(ClassTimes::default()),
                    None => None,
                };
                if let Some(delta) = before.and_then(|b| now.checked_sub(&b)) {
                    let key = (p.pid, t.tid);
                    let floor = slices_end.get(&key).copied().unwrap_or(0);
                    let end = class_slices(&mut events, key, (floor, f.t_ns), &delta, classes);
                    slices_end.insert(key, end);
                }
                last.insert((p.pid, t.tid), now);
            }
        }
    }
    // Threads that exited after their last sample: the exit record holds their final
    // classes; the slices end at the exit.
    for e in &bundle.lifecycle {
        if e.kind != LifecycleKind::Exit {
            continue;
        }
        thread_names
            .entry((e.pid, e.tid))
            .or_insert_with(|| e.comm.clone());
        process_names.entry(e.pid).or_insert_with(|| e.comm.clone());
        let Some(final_classes) = e.class_ns else {
            continue;
        };
        let before = last.remove(&(e.pid, e.tid)).unwrap_or_default();
        if let Some(delta) = final_classes.checked_sub(&before) {
            let key = (e.pid, e.tid);
            let floor = slices_end.get(&key).copied().unwrap_or(0);
            let end = class_slices(
                &mut events,
                key,
                (floor, e.t_ns.max(floor)),
                &delta,
                &LatencyClass::ALL,
            );
            slices_end.insert(key, end);
        }
    }

    for (i, s) in bundle.slow_syscalls.iter().enumerate() {
        thread_names.entry((s.pid, s.tid)).or_default();
        let args = json!({
            "tid": s.tid,
            "nr": s.nr,
            "duration_ns": s.duration_ns,
            "ret": s.ret,
        });
        for (ph, t) in [("b", s.t_ns), ("e", s.t_ns.saturating_add(s.duration_ns))] {
            let mut ev = json!({
                "name": s.name,
                "cat": "syscall",
                "ph": ph,
                "id": i,
                "ts": us(t),
                "pid": s.pid,
                "tid": s.tid,
            });
            if ph == "b" {
                ev["args"] = args.clone();
            }
            events.push(ev);
        }
    }

    let lifetimes = timeline::extract(bundle, Some(analysis)).processes;
    if !lifetimes.is_empty() {
        process_names.insert(LIFETIMES_PID, "process lifetimes".to_string());
    }
    for p in &lifetimes {
        process_names.entry(p.pid).or_insert_with(|| p.comm.clone());
        thread_names.insert((LIFETIMES_PID, p.pid), format!("pid {}", p.pid));
        events.push(json!({
            "name": p.comm,
            "cat": "process",
            "ph": "X",
            "ts": us(p.start_ns()),
            "dur": us(p.end_ns() - p.start_ns()),
            "pid": LIFETIMES_PID,
            "tid": p.pid,
            "args": {
                "pid": p.pid,
                "ppid": p.ppid,
                "exit_code": p.exit_code,
                "alive_at_end": p.alive_at_end,
            },
        }));
    }

    let mut meta: Vec<Value> = Vec::new();
    for (pid, name) in &process_names {
        let name = if *pid == LIFETIMES_PID {
            name.clone()
        } else {
            format!("{name} ({pid})")
        };
        meta.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}));
    }
    for ((pid, tid), name) in &thread_names {
        let name = if name.is_empty() {
            format!("thread {tid}")
        } else {
            name.clone()
        };
        meta.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}));
    }
    meta.extend(events);
    json!({
        "traceEvents": meta,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "kernelkite",
            "backend": bundle.backend.name(),
            "label": bundle.label,
            "duration_ns": analysis.duration_ns,
        },
    })
}

/// `--format chrome-trace`: [`document`] as compact JSON with a trailing newline.
pub fn render(bundle: &Bundle, analysis: &Analysis) -> Vec<u8> {
    let mut out = serde_json::to_vec(&document(bundle, analysis)).expect("JSON serializes");
    out.push(b'\n');
    out
}
