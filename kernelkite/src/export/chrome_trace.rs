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
//! * With a `--critical-path` stream, every wakeup one thread ran for another as a flow
//!   (`s` on the waker's track, `f` with `bp: "e"` on the woken thread's, category
//!   `wakeup`, one id per wakeup), each end bound to a zero-length `X` slice of the same
//!   category and time ("wakes …", "woken by …"), so Perfetto and chrome://tracing draw
//!   an arrow from waker to wakee. A waker outside the traced set gets a track of its
//!   own, named by its comm when the stream's wakee side knows it.
//!
//! Times are microseconds since the session start (`ts`, `dur`), fractional.

use std::collections::{BTreeMap, BTreeSet};

use kernelkite_common::LatencyClass;
use serde_json::{json, Value};

use crate::analysis::timeline;
use crate::analysis::Analysis;
use crate::model::{Bundle, ClassTimes, LifecycleKind};

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
        // Runnable from the thread's side: it was current, the CPU was not given to it.
        LatencyClass::Steal => "thread_state_runnable",
    }
}

/// Class slices of `delta`, laid end to end so the last one ends at `end_ns`, but
/// never starting before `floor_ns` (the end of the thread's previous slices), so the
/// slices of one track never overlap. Returns where the slices end.
///
/// A delta longer than the room (an interval still open at the previous frame is
/// counted at the next one) is cut from its largest classes, so the small ones, steal
/// among them, keep their exact length.
fn class_slices(
    out: &mut Vec<Value>,
    (pid, tid): (i32, i32),
    (floor_ns, end_ns): (u64, u64),
    delta: &ClassTimes,
    classes: &[LatencyClass],
) -> u64 {
    let mut fitted = *delta;
    let total: u64 = classes
        .iter()
        .map(|c| delta.get(*c))
        .fold(0, u64::saturating_add);
    let mut over = total.saturating_sub(end_ns.saturating_sub(floor_ns));
    let mut largest_first = classes.to_vec();
    largest_first.sort_by_key(|c| std::cmp::Reverse(delta.get(*c)));
    for c in largest_first {
        let cut = over.min(fitted.get(c));
        let mut all = fitted.to_array();
        all[c.id() as usize] -= cut;
        fitted = ClassTimes::from_array(all);
        over -= cut;
    }
    let delta = &fitted;
    let total = total.min(end_ns.saturating_sub(floor_ns));
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
            process_names.insert(p.pid, p.comm.to_string());
            for t in &p.threads {
                thread_names.insert((p.pid, t.tid), t.comm.to_string());
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
                "name": crate::analysis::reported_syscall_name(&bundle.host.arch, s.nr, &s.name),
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

    if let Some(stream) = &bundle.wakeups {
        wakeup_flows(&mut events, &mut thread_names, &mut process_names, stream);
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
        } else if name.is_empty() {
            // A waker outside the traced set: only its pid is known.
            format!("pid {pid}")
        } else {
            format!("{name} ({pid})")
        };
        meta.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}));
    }
    // The container, unit or cgroup of each process, where known: Perfetto shows a
    // process's labels beside its name.
    let mut labelled = std::collections::BTreeSet::new();
    for p in &analysis.processes {
        let Some(group) = p.placement.as_ref().and_then(|pl| pl.group_name()) else {
            continue;
        };
        if process_names.contains_key(&p.pid) && labelled.insert(p.pid) {
            meta.push(json!({"name": "process_labels", "ph": "M", "pid": p.pid, "tid": 0, "args": {"labels": group}}));
        }
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

/// Flow arrows from waker to wakee for the stream's thread wakeups (module docs).
fn wakeup_flows(
    events: &mut Vec<Value>,
    thread_names: &mut BTreeMap<(i32, i32), String>,
    process_names: &mut BTreeMap<i32, String>,
    stream: &crate::model::WakeupStream,
) {
    let name_of = |names: &BTreeMap<(i32, i32), String>, pid: i32, tid: i32| {
        names
            .get(&(pid, tid))
            .filter(|n| !n.is_empty())
            .cloned()
            .unwrap_or_else(|| format!("tid {tid}"))
    };
    for (id, w) in stream.wakeups.iter().enumerate() {
        if w.waker_kind.as_str() != "thread" || w.waker_tid <= 0 || w.tid <= 0 {
            continue;
        }
        let ts = us(w.t_ns);
        let (waker, wakee) = ((w.waker_pid, w.waker_tid), (w.pid, w.tid));
        thread_names.entry(waker).or_default();
        thread_names.entry(wakee).or_default();
        process_names.entry(w.waker_pid).or_default();
        process_names.entry(w.pid).or_default();
        let waker_name = name_of(thread_names, waker.0, waker.1);
        let wakee_name = name_of(thread_names, wakee.0, wakee.1);
        let args = json!({
            "class": w.class.as_str(),
            "sleep_ns": w.sleep_ns,
            "waker_tid": w.waker_tid,
            "wakee_tid": w.tid,
        });
        for ((pid, tid), ph, name) in [
            (waker, "s", format!("wakes {wakee_name}")),
            (wakee, "f", format!("woken by {waker_name}")),
        ] {
            events.push(json!({
                "name": name, "cat": "wakeup", "ph": "X", "ts": ts, "dur": 0.0,
                "pid": pid, "tid": tid, "args": args,
            }));
            let mut flow = json!({
                "name": "wakeup", "cat": "wakeup", "ph": ph, "id": id, "ts": ts,
                "pid": pid, "tid": tid,
            });
            if ph == "f" {
                // Bind to the enclosing slice (the zero-length one at the same time).
                flow["bp"] = json!("e");
            }
            events.push(flow);
        }
    }
}

/// The reserved colour names (catapult's `color_scheme.js`) this exporter uses.
const CLASS_CNAMES: &[&str] = &[
    "thread_state_uninterruptible",
    "thread_state_iowait",
    "thread_state_running",
    "thread_state_runnable",
    "thread_state_sleeping",
    "thread_state_unknown",
];

/// The Trace Event Format's rules for the event types kernelkite writes
/// ("Trace Event Format", Google, 2016): object form with `traceEvents`; every event
/// has `name`, `ph`, integer `pid` and `tid`; all but metadata have a numeric
/// `ts` (µs); `X` has a non-negative `dur`; `b`/`e` (async) carry `cat` and `id`
/// and pair up; `s`/`f` (flows) carry `cat` and `id`, pair up, and do not end before
/// they start; `M` events are `process_name`/`thread_name` with `args.name`. On
/// top, what viewers need to draw it well: complete events on one track nest, and
/// every track used is named. Returns the violations (empty: the document is fine);
/// the tests run it on every export.
pub fn rule_violations(doc: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(events) = doc["traceEvents"].as_array() else {
        return vec!["no traceEvents array".into()];
    };
    let mut named_pids = BTreeSet::new();
    let mut named_tracks = BTreeSet::new();
    let mut used_tracks = BTreeSet::new();
    let mut open_async: BTreeMap<(String, i64, i64), f64> = BTreeMap::new();
    // Flow ids are global (not per process): the arrow crosses tracks.
    let mut open_flows: BTreeMap<(String, i64), f64> = BTreeMap::new();
    let mut complete: BTreeMap<(i64, i64), Vec<(f64, f64)>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let (Some(pid), Some(tid)) = (e["pid"].as_i64(), e["tid"].as_i64()) else {
            errors.push(format!("event {i}: pid/tid not integers: {e}"));
            continue;
        };
        if !e["name"].is_string() {
            errors.push(format!("event {i}: no name"));
        }
        let ph = e["ph"].as_str().unwrap_or("");
        if ph != "M" {
            match e["ts"].as_f64() {
                Some(ts) if ts >= 0.0 => {}
                _ => errors.push(format!("event {i}: ts missing or negative")),
            }
            used_tracks.insert((pid, tid));
        }
        if let Some(c) = e.get("cname") {
            if !CLASS_CNAMES.contains(&c.as_str().unwrap_or("")) {
                errors.push(format!("event {i}: unknown cname {c}"));
            }
        }
        match ph {
            "M" => {
                let labels = e["name"].as_str() == Some("process_labels");
                if !labels && !e["args"]["name"].is_string() {
                    errors.push(format!("event {i}: metadata without args.name"));
                }
                match e["name"].as_str() {
                    Some("process_name") => {
                        named_pids.insert(pid);
                    }
                    Some("process_labels") if e["args"]["labels"].is_string() => {}
                    Some("thread_name") => {
                        named_tracks.insert((pid, tid));
                    }
                    other => errors.push(format!("event {i}: metadata {other:?}")),
                }
            }
            "X" => match e["dur"].as_f64() {
                Some(d) if d >= 0.0 => complete
                    .entry((pid, tid))
                    .or_default()
                    .push((e["ts"].as_f64().unwrap_or(0.0), d)),
                _ => errors.push(format!("event {i}: X without non-negative dur")),
            },
            "b" | "e" => {
                let (Some(cat), Some(id)) = (e["cat"].as_str(), e["id"].as_i64()) else {
                    errors.push(format!("event {i}: async event without cat/id"));
                    continue;
                };
                let key = (cat.to_string(), id, pid);
                let ts = e["ts"].as_f64().unwrap_or(0.0);
                if ph == "b" {
                    if open_async.insert(key, ts).is_some() {
                        errors.push(format!("event {i}: async id {id} opened twice"));
                    }
                } else {
                    match open_async.remove(&key) {
                        Some(begin) if begin <= ts => {}
                        Some(_) => errors.push(format!("event {i}: async end before begin")),
                        None => errors.push(format!("event {i}: async end without begin")),
                    }
                }
            }
            "s" | "f" => {
                let (Some(cat), Some(id)) = (e["cat"].as_str(), e["id"].as_i64()) else {
                    errors.push(format!("event {i}: flow event without cat/id"));
                    continue;
                };
                let ts = e["ts"].as_f64().unwrap_or(0.0);
                let key = (cat.to_string(), id);
                if ph == "s" {
                    if open_flows.insert(key, ts).is_some() {
                        errors.push(format!("event {i}: flow id {id} started twice"));
                    }
                } else {
                    match open_flows.remove(&key) {
                        Some(start) if start <= ts => {}
                        Some(_) => errors.push(format!("event {i}: flow ends before it starts")),
                        None => errors.push(format!("event {i}: flow end without start")),
                    }
                }
            }
            other => errors.push(format!("event {i}: unexpected ph {other:?}")),
        }
    }
    if !open_flows.is_empty() {
        errors.push(format!("unfinished flows: {open_flows:?}"));
    }
    if !open_async.is_empty() {
        errors.push(format!("unbalanced async events: {open_async:?}"));
    }
    for (track, mut slices) in complete {
        // Nesting: sorted by start (longest first on ties), each slice either ends
        // before the next starts or contains it.
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut stack: Vec<f64> = Vec::new();
        for (ts, dur) in slices {
            while stack.last().is_some_and(|&end| end <= ts + 1e-6) {
                stack.pop();
            }
            if stack.last().is_some_and(|&end| ts + dur > end + 1e-6) {
                errors.push(format!(
                    "track {track:?}: slice at {ts} overlaps its parent"
                ));
            }
            stack.push(ts + dur);
        }
    }
    for (pid, tid) in &used_tracks {
        if !named_pids.contains(pid) || !named_tracks.contains(&(*pid, *tid)) {
            errors.push(format!("track {pid}/{tid} has no process_name/thread_name"));
        }
    }
    errors
}

/// `--format chrome-trace`: [`document`] as compact JSON with a trailing newline.
pub fn render(bundle: &Bundle, analysis: &Analysis) -> Vec<u8> {
    let mut out = serde_json::to_vec(&document(bundle, analysis)).expect("JSON serializes");
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::rule_violations;
    use crate::analysis::analyze;

    use crate::model::fixture::committed as fixture;

    fn export(name: &str) -> (Value, crate::analysis::Analysis) {
        let b = fixture(name);
        let a = analyze(&b);
        (serde_json::from_slice(&super::render(&b, &a)).unwrap(), a)
    }

    #[test]
    fn fixture_traces_follow_the_format_rules() {
        for name in [
            "api-server-ebpf.json",
            "cargo-build-before.json",
            "cargo-build-after.json",
        ] {
            let (doc, _) = export(name);
            let errors = rule_violations(&doc);
            assert!(errors.is_empty(), "{name}: {errors:#?}");
        }
    }

    /// The `--cgroup` recording: each process is labelled with its cgroup, within the
    /// format's rules.
    #[test]
    fn processes_are_labelled_with_their_cgroup() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/trace-ebpf-cgroup.bundle.json");
        let b = crate::model::load_bundle(&path).unwrap();
        let doc: Value = serde_json::from_slice(&super::render(&b, &analyze(&b))).unwrap();
        assert_eq!(rule_violations(&doc), Vec::<String>::new());
        let labels: Vec<&Value> = (doc["traceEvents"].as_array().unwrap().iter())
            .filter(|e| e["name"] == "process_labels")
            .collect();
        assert!(!labels.is_empty());
        assert!(
            labels.iter().all(|e| e["args"]["labels"] == "/kk-fixture"),
            "{labels:?}"
        );
    }

    /// The `--critical-path` recording (sh with a background loop): every wakeup one
    /// thread ran for another is one flow, from the waker's track to the wakee's, each end
    /// on a zero-length slice of its own; the document still follows the rules, and a
    /// flow without its end breaks them.
    #[test]
    fn wakeups_are_flows_from_waker_to_wakee() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/run-ebpf-critical-path.bundle.json");
        let b = crate::model::load_bundle(&path).unwrap();
        let a = analyze(&b);
        let doc: Value = serde_json::from_slice(&super::render(&b, &a)).unwrap();
        assert_eq!(rule_violations(&doc), Vec::<String>::new());
        let stream = b.wakeups.as_ref().expect("a critical-path stream");
        let expected: Vec<_> = stream
            .wakeups
            .iter()
            .filter(|w| w.waker_kind.as_str() == "thread" && w.waker_tid > 0 && w.tid > 0)
            .collect();
        assert!(!expected.is_empty());
        let events = doc["traceEvents"].as_array().unwrap();
        let flows = |ph: &str| -> Vec<&Value> {
            events
                .iter()
                .filter(|e| e["cat"] == "wakeup" && e["ph"] == ph)
                .collect()
        };
        let (starts, ends) = (flows("s"), flows("f"));
        assert_eq!(starts.len(), expected.len());
        assert_eq!(ends.len(), expected.len());
        for ((s, f), w) in starts.iter().zip(&ends).zip(&expected) {
            assert_eq!(s["id"], f["id"]);
            assert_eq!(
                (s["pid"].as_i64(), s["tid"].as_i64()),
                (Some(w.waker_pid.into()), Some(w.waker_tid.into()))
            );
            assert_eq!(
                (f["pid"].as_i64(), f["tid"].as_i64()),
                (Some(w.pid.into()), Some(w.tid.into()))
            );
            assert_eq!(f["bp"], "e");
            // Each end has a zero-length slice to bind to, at the same time.
            for end in [s, f] {
                assert!(events.iter().any(|e| e["ph"] == "X"
                    && e["cat"] == "wakeup"
                    && e["dur"] == 0.0
                    && e["ts"] == end["ts"]
                    && e["tid"] == end["tid"]));
            }
        }
        let mut broken = doc.clone();
        let list = broken["traceEvents"].as_array_mut().unwrap();
        let f = list.iter().position(|e| e["ph"] == "f").unwrap();
        list.remove(f);
        assert!(!rule_violations(&broken).is_empty());
    }

    #[test]
    fn the_rule_check_catches_broken_documents() {
        let (doc, _) = export("api-server-ebpf.json");
        let mut unbalanced = doc.clone();
        let events = unbalanced["traceEvents"].as_array_mut().unwrap();
        let e = events.iter().position(|e| e["ph"] == "e").unwrap();
        events.remove(e);
        assert!(!rule_violations(&unbalanced).is_empty());
        let mut string_pid = doc.clone();
        string_pid["traceEvents"][0]["pid"] = serde_json::json!("6000");
        assert!(!rule_violations(&string_pid).is_empty());
    }

    #[test]
    fn class_slices_add_up_to_each_threads_classes() {
        let (doc, a) = export("api-server-ebpf.json");
        let mut per_thread: BTreeMap<(i64, i64), f64> = BTreeMap::new();
        for e in doc["traceEvents"].as_array().unwrap() {
            if e["cat"] == "latency_class" {
                *per_thread
                    .entry((e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap()))
                    .or_default() += e["dur"].as_f64().unwrap();
            }
        }
        for t in &a.threads {
            let got_us = per_thread
                .get(&(t.pid as i64, t.tid as i64))
                .copied()
                .unwrap_or(0.0);
            let want_us = t.classes.total_ns() as f64 / 1000.0;
            assert!(
                (got_us - want_us).abs() < 1e-3,
                "thread {}: {got_us} µs vs {want_us} µs",
                t.tid
            );
        }
        let syscalls = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "syscall" && e["ph"] == "b")
            .count();
        assert_eq!(syscalls, 2);
    }
}
