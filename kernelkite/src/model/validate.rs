//! Validation of loaded bundles: everything a report relies on is checked here once,
//! so analysis code can assume a well-formed bundle. Messages are one line each.

use std::collections::BTreeMap;

use kernelkite_common::hist::NUM_BUCKETS;

use super::bundle::*;

/// Check `format` and `format_version` before full deserialization.
pub fn check_header(value: &serde_json::Value) -> Result<(), String> {
    let obj = value
        .as_object()
        .ok_or_else(|| "expected a JSON object at the top level".to_string())?;
    match obj.get("format").and_then(|v| v.as_str()) {
        Some(BUNDLE_FORMAT) => {}
        Some(other) => return Err(format!("format is {other:?}, expected {BUNDLE_FORMAT:?}")),
        None => {
            return Err(format!(
                "missing \"format\": {BUNDLE_FORMAT:?} (not a kernelkite bundle?)"
            ))
        }
    }
    match obj.get("format_version").and_then(|v| v.as_u64()) {
        Some(v) if (BUNDLE_FORMAT_VERSION_OLDEST as u64..=BUNDLE_FORMAT_VERSION as u64)
            .contains(&v) =>
        {
            Ok(())
        }
        Some(v) => Err(format!(
            "unsupported format_version {v} (this kernelkite reads versions {BUNDLE_FORMAT_VERSION_OLDEST} to {BUNDLE_FORMAT_VERSION})"
        )),
        None => Err("missing or non-integer format_version".to_string()),
    }
}

/// Check the invariants reports rely on.
pub fn validate(bundle: &Bundle) -> Result<(), String> {
    if bundle.host.clock_ticks_per_sec == 0 {
        return Err("host.clock_ticks_per_sec is 0".into());
    }
    if bundle.host.page_size_bytes == 0 {
        return Err("host.page_size_bytes is 0".into());
    }
    if bundle.frames.is_empty() {
        return Err("no frames".into());
    }
    // A process is (pid, start_time): the same pid with another start time is pid reuse.
    let mut last_seen: BTreeMap<(i32, u64), &ProcessSample> = BTreeMap::new();
    let mut last_thread: BTreeMap<(i32, u64, i32), &ThreadSample> = BTreeMap::new();
    let mut prev_t = None;
    for (i, frame) in bundle.frames.iter().enumerate() {
        if let Some(p) = prev_t {
            if frame.t_ns < p {
                return Err(format!(
                    "frame {i}: t_ns {} is before the previous frame's {p}",
                    frame.t_ns
                ));
            }
        }
        prev_t = Some(frame.t_ns);
        let mut prev_pid = None;
        for proc_ in &frame.processes {
            if prev_pid.is_some_and(|p| p >= proc_.pid) {
                return Err(format!(
                    "frame {i}: processes not sorted by pid or pid {} repeated",
                    proc_.pid
                ));
            }
            prev_pid = Some(proc_.pid);
            let key = (proc_.pid, proc_.start_time_ticks);
            if let Some(before) = last_seen.get(&key) {
                check_forward(
                    i,
                    proc_.pid,
                    "utime_ticks",
                    before.utime_ticks,
                    proc_.utime_ticks,
                )?;
                check_forward(
                    i,
                    proc_.pid,
                    "stime_ticks",
                    before.stime_ticks,
                    proc_.stime_ticks,
                )?;
                check_forward(
                    i,
                    proc_.pid,
                    "cutime_ticks",
                    before.cutime_ticks,
                    proc_.cutime_ticks,
                )?;
                check_forward(
                    i,
                    proc_.pid,
                    "cstime_ticks",
                    before.cstime_ticks,
                    proc_.cstime_ticks,
                )?;
                if let (Some(a), Some(b)) = (before.io, proc_.io) {
                    check_forward(i, proc_.pid, "io.read_bytes", a.read_bytes, b.read_bytes)?;
                    check_forward(i, proc_.pid, "io.write_bytes", a.write_bytes, b.write_bytes)?;
                    check_forward(i, proc_.pid, "io.rchar_bytes", a.rchar_bytes, b.rchar_bytes)?;
                    check_forward(i, proc_.pid, "io.wchar_bytes", a.wchar_bytes, b.wchar_bytes)?;
                }
            }
            last_seen.insert(key, proc_);
            let mut prev_tid = None;
            for thread in &proc_.threads {
                if prev_tid.is_some_and(|t| t >= thread.tid) {
                    return Err(format!(
                        "frame {i}: pid {}: threads not sorted by tid or tid {} repeated",
                        proc_.pid, thread.tid
                    ));
                }
                prev_tid = Some(thread.tid);
                let tkey = (proc_.pid, proc_.start_time_ticks, thread.tid);
                // A thread's schedstat is not checked: once pid_max wraps (32768 on
                // many machines: minutes of a busy build), a new thread of the same
                // process may get an old thread's tid, and its counters start again
                // (the analysis counts that as a new thread).
                if let Some(before) = last_thread.get(&tkey) {
                    if let (Some(a), Some(b)) = (before.class_ns, thread.class_ns) {
                        if b.checked_sub(&a).is_none() {
                            return Err(format!(
                                "frame {i}: tid {}: class_ns went backwards",
                                thread.tid
                            ));
                        }
                    }
                }
                last_thread.insert(tkey, thread);
            }
        }
    }
    for h in &bundle.syscalls {
        let mut prev = None;
        let mut sum = 0u64;
        for &(idx, count) in &h.buckets {
            if idx as usize >= NUM_BUCKETS {
                return Err(format!(
                    "syscall histogram {} of pid {}: bucket {idx} out of range",
                    h.name, h.pid
                ));
            }
            if prev.is_some_and(|p| p >= idx) {
                return Err(format!(
                    "syscall histogram {} of pid {}: buckets not ascending",
                    h.name, h.pid
                ));
            }
            prev = Some(idx);
            sum = sum.saturating_add(count);
        }
        if sum != h.count {
            return Err(format!(
                "syscall histogram {} of pid {}: buckets hold {sum} calls but count is {}",
                h.name, h.pid, h.count
            ));
        }
    }
    match &bundle.stacks {
        Some(profile) => validate_stacks(profile, bundle)?,
        None => {
            if bundle.slow_syscalls.iter().any(|s| s.user_stack.is_some()) {
                return Err("slow_syscalls name user stacks but the bundle has no stacks".into());
            }
            if (bundle.syscalls_in_progress.iter()).any(|s| s.user_stack.is_some()) {
                return Err(
                    "syscalls_in_progress name user stacks but the bundle has no stacks".into(),
                );
            }
        }
    }
    Ok(())
}

/// Every stack index names a stack, every frame index a frame, every class a class.
fn validate_stacks(profile: &StackProfile, bundle: &Bundle) -> Result<(), String> {
    let frames = profile.frames.len();
    for (i, stack) in profile.stacks.iter().enumerate() {
        if let Some(f) = stack.iter().find(|&&f| f as usize >= frames) {
            return Err(format!(
                "stacks.stacks[{i}]: frame {f} out of range ({frames} frames)"
            ));
        }
    }
    let stacks = profile.stacks.len();
    let check = |what: String, idx: Option<u32>| match idx {
        Some(s) if s as usize >= stacks => {
            Err(format!("{what}: stack {s} out of range ({stacks} stacks)"))
        }
        _ => Ok(()),
    };
    for (i, s) in profile.samples.iter().enumerate() {
        if kernelkite_common::LatencyClass::from_name(&s.class).is_none() {
            return Err(format!("stacks.samples[{i}]: unknown class {:?}", s.class));
        }
        check(format!("stacks.samples[{i}].user_stack"), s.user_stack)?;
        check(format!("stacks.samples[{i}].kernel_stack"), s.kernel_stack)?;
    }
    for (i, s) in bundle.slow_syscalls.iter().enumerate() {
        check(format!("slow_syscalls[{i}].user_stack"), s.user_stack)?;
    }
    for (i, &t) in profile.truncated_stacks.iter().enumerate() {
        check(format!("stacks.truncated_stacks[{i}]"), Some(t))?;
    }
    // `is_truncated` looks indices up by binary search.
    if !profile.truncated_stacks.is_sorted() {
        return Err("stacks.truncated_stacks: not sorted".to_string());
    }
    for (i, s) in bundle.syscalls_in_progress.iter().enumerate() {
        check(
            format!("syscalls_in_progress[{i}].user_stack"),
            s.user_stack,
        )?;
    }
    Ok(())
}

fn check_forward(
    frame: usize,
    id: i32,
    field: &str,
    before: u64,
    after: u64,
) -> Result<(), String> {
    if after < before {
        Err(format!(
            "frame {frame}: {id}: {field} went backwards ({before} -> {after})"
        ))
    } else {
        Ok(())
    }
}
