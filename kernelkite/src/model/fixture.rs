//! Fixtures: hand-writable, columnar descriptions of a session that `kernelkite replay`
//! turns into a bundle, byte for byte the same every time (no clock, no randomness,
//! sorted output).
//!
//! # Format (version 1)
//!
//! ```json
//! {
//!   "format": "kernelkite-fixture",       // required, exactly this
//!   "version": 1,                          // required; other versions are refused
//!   "label": "cargo build (before)",      // optional
//!   "backend": "proc",                     // "proc" or "ebpf"
//!   "host": {"clock_ticks_per_sec": 100, "page_size_bytes": 4096, "num_cpus": 4,
//!            "kernel_release": "6.1.0", "arch": "x86_64"},
//!   "interval_ms": 250,
//!   "frames_ms": [0, 250, 500],            // one entry per frame, non-decreasing
//!   "root_pids": [5000],                   // optional; default: launched.pid, else the
//!                                          // first frame's processes whose parent is absent
//!   "launched": { ... },                   // optional, as in a bundle (argv, pid,
//!                                          // exit_code, signal, rusage)
//!   "frame_cap": {"max_frames": 100000, "frames_dropped": 0},   // optional
//!   "events_lost": null,                   // optional
//!   "network": {"eth0": {"rx_bytes": [..], "rx_packets": [..],
//!                        "tx_bytes": [..], "tx_packets": [..]}},  // optional, one value per frame
//!   "processes": [{
//!     "pid": 5000, "ppid": 4000, "comm": "cargo", "start_time_ticks": 100000,
//!     "first_frame": 0, "last_frame": 6,   // inclusive frame indexes of its lifetime
//!     // per-frame arrays: exactly last_frame - first_frame + 1 values each
//!     "states": "RSSSSSS",                 // optional, one state letter per frame (default S)
//!     "utime_ticks": [..], "stime_ticks": [..],
//!     "cutime_ticks": [..], "cstime_ticks": [..],          // optional (default 0)
//!     "rss_kib": [..]  or  "rss_pages": [..],              // exactly one of them
//!     "read_bytes": [..], "write_bytes": [..],             // optional (default 0)
//!     "rchar_bytes": [..], "wchar_bytes": [..],            // optional (default 0); without
//!                                                          // any of these four, io is null
//!     "threads": [{                        // optional
//!       "tid": 5000, "comm": "cargo",      // comm defaults to the process's
//!       "first_frame": 0, "last_frame": 6, // default: the process's lifetime
//!       "states": "RSSSSSS",               // required, one letter per frame of the thread
//!       "syscall": [null, "futex", 7, -1], // optional: per frame a name, a number or null
//!       "on_cpu_ms": [..], "runqueue_ms": [..],     // schedstat, or on_cpu_ns/runqueue_ns;
//!       "timeslices": [..],                          // omit both for schedstat = null
//!       "class_ns": {"on_cpu": [..], "runqueue": [..], "io_wait": [..],   // optional (eBPF)
//!                    "lock_wait": [..], "syscall_blocked": [..], "unknown_wait": [..]}
//!     }]
//!   }],
//!   "syscalls": [{"pid": 5000, "name": "read", "latencies_ns": [[1500, 20], [90000, 1]]}],
//!   "lifecycle": [ ... ],                  // optional, bundle LifecycleEvent objects
//!   "slow_syscalls": [ ... ],              // optional, bundle SlowSyscall objects
//!   "stacks": {                            // optional: becomes the bundle's `stacks`
//!     "sample_hz": 99, "min_block_us": 1000, "captures_lost": 0,   // captures_lost optional
//!     "frames": [{"id": "lock", "addr": 94558443520, "kernel": false,  // kernel default false
//!                 "module": "/usr/lib/libc.so.6", "module_offset": 561536,  // all optional
//!                 "symbol": "pthread_mutex_lock", "file": "src/x.c", "line": 12}],
//!     "stacks": [{"id": "get", "frames": ["lock", "cache_get", "main"]}], // innermost first
//!     "samples": [{"pid": 5000, "tid": 5003, "class": "lock_wait",
//!                  "user_stack": "get", "kernel_stack": "futex",   // stack ids, or null
//!                  "total_ns": 900000000, "count": 42}],
//!     "skipped_files": [{"path": "/tmp/perf-5000.map", "reason": "symlink", "count": 1}]  // optional
//!   }
//! }
//! ```
//!
//! In `stacks`, frame and stack ids are names local to the fixture; the bundle interns
//! them as indices in the order listed, and its samples are sorted by (pid, tid, class,
//! user stack, kernel stack). A `slow_syscalls[].user_stack` is a stack index, as in a
//! bundle.
//!
//! `syscalls[].latencies_ns` lists `[latency_ns, calls]` pairs; the histogram (count,
//! total, max, buckets) is computed from them. The syscall number comes from the name on
//! `host.arch` (the `syscalls` crate) unless `"nr"` is given. Unknown keys are errors.
//!
//! Derived, not written: `num_threads` (threads alive in that frame, at least 1), the
//! I/O syscall counts and `cancelled_write_bytes` (0), `replayed_from` (the file name).
//!
//! # Rules checked (each failure is one line naming the problem)
//!
//! truncated or malformed JSON; `format`/`version` wrong; unknown backend; no frames or
//! frame times going backwards; a lifetime outside the frames; a per-frame array whose
//! length disagrees with the lifetime (misaligned arrays); a cumulative counter going
//! backwards; an unknown syscall name; the same pid twice in one frame; in `stacks`, a
//! frame or stack id given twice or naming nothing, an empty stack, an unknown class, a
//! sample of a pid that is in no frame, the same (pid, tid, class, stacks) twice. The resulting
//! bundle must also pass [`super::validate::validate`].

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::bundle::*;
use super::io::{one_line, LoadError};
use crate::model::syscalls::syscall_number;

/// The value of the fixture's `format` key.
pub const FIXTURE_FORMAT: &str = "kernelkite-fixture";
/// The fixture version this build reads.
pub const FIXTURE_VERSION: u64 = 1;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    #[allow(dead_code, reason = "checked by serde's shape; the value is not used")]
    format: String,
    #[allow(dead_code, reason = "checked by serde's shape; the value is not used")]
    version: u64,
    #[serde(default)]
    label: Option<String>,
    backend: String,
    host: HostConstants,
    interval_ms: u64,
    frames_ms: Vec<u64>,
    #[serde(default)]
    root_pids: Option<Vec<i32>>,
    #[serde(default)]
    launched: Option<LaunchedCommand>,
    #[serde(default)]
    frame_cap: Option<FrameCap>,
    #[serde(default)]
    events_lost: Option<u64>,
    #[serde(default)]
    network: Option<BTreeMap<String, FixtureNet>>,
    processes: Vec<FixtureProcess>,
    #[serde(default)]
    syscalls: Vec<FixtureSyscall>,
    #[serde(default)]
    lifecycle: Vec<LifecycleEvent>,
    #[serde(default)]
    slow_syscalls: Vec<SlowSyscall>,
    #[serde(default)]
    stacks: Option<FixtureStacks>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureStacks {
    sample_hz: u64,
    min_block_us: u64,
    #[serde(default)]
    captures_lost: u64,
    #[serde(default)]
    skipped_files: Vec<SkippedFile>,
    frames: Vec<FixtureFrame>,
    stacks: Vec<FixtureStack>,
    samples: Vec<FixtureStackSample>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureFrame {
    id: String,
    addr: u64,
    #[serde(default)]
    kernel: bool,
    #[serde(default)]
    module: Option<String>,
    #[serde(default)]
    module_offset: Option<u64>,
    #[serde(default)]
    symbol: Option<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    line: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureStack {
    id: String,
    frames: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureStackSample {
    pid: i32,
    tid: i32,
    class: String,
    #[serde(default)]
    user_stack: Option<String>,
    #[serde(default)]
    kernel_stack: Option<String>,
    total_ns: u64,
    count: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureNet {
    rx_bytes: Vec<u64>,
    #[serde(default)]
    rx_packets: Option<Vec<u64>>,
    tx_bytes: Vec<u64>,
    #[serde(default)]
    tx_packets: Option<Vec<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureProcess {
    pid: i32,
    ppid: i32,
    comm: String,
    start_time_ticks: u64,
    first_frame: usize,
    last_frame: usize,
    #[serde(default)]
    states: Option<String>,
    utime_ticks: Vec<u64>,
    stime_ticks: Vec<u64>,
    #[serde(default)]
    cutime_ticks: Option<Vec<u64>>,
    #[serde(default)]
    cstime_ticks: Option<Vec<u64>>,
    #[serde(default)]
    rss_kib: Option<Vec<u64>>,
    #[serde(default)]
    rss_pages: Option<Vec<u64>>,
    #[serde(default)]
    read_bytes: Option<Vec<u64>>,
    #[serde(default)]
    write_bytes: Option<Vec<u64>>,
    #[serde(default)]
    rchar_bytes: Option<Vec<u64>>,
    #[serde(default)]
    wchar_bytes: Option<Vec<u64>>,
    #[serde(default)]
    threads: Vec<FixtureThread>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureThread {
    tid: i32,
    #[serde(default)]
    comm: Option<String>,
    #[serde(default)]
    first_frame: Option<usize>,
    #[serde(default)]
    last_frame: Option<usize>,
    states: String,
    #[serde(default)]
    syscall: Option<Vec<Option<SyscallRef>>>,
    #[serde(default)]
    on_cpu_ms: Option<Vec<u64>>,
    #[serde(default)]
    on_cpu_ns: Option<Vec<u64>>,
    #[serde(default)]
    runqueue_ms: Option<Vec<u64>>,
    #[serde(default)]
    runqueue_ns: Option<Vec<u64>>,
    #[serde(default)]
    timeslices: Option<Vec<u64>>,
    #[serde(default)]
    class_ns: Option<FixtureClasses>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SyscallRef {
    Nr(i64),
    Name(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureClasses {
    on_cpu: Vec<u64>,
    runqueue: Vec<u64>,
    io_wait: Vec<u64>,
    lock_wait: Vec<u64>,
    syscall_blocked: Vec<u64>,
    unknown_wait: Vec<u64>,
    /// Optional: fixtures written before steal was measured have none (all 0).
    #[serde(default)]
    steal: Option<Vec<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureSyscall {
    pid: i32,
    name: String,
    #[serde(default)]
    nr: Option<u32>,
    latencies_ns: Vec<(u64, u64)>,
}

/// Read a fixture file and convert it to a bundle. Errors name the file and the problem
/// in one line. `replayed_from` is set to the file's name (not its directory, so the
/// bytes do not depend on where the command runs).
pub fn load_fixture(path: &Path) -> Result<Bundle, LoadError> {
    let bytes = super::io::read_input(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    fixture_to_bundle(&bytes, &name).map_err(|e| match e {
        FixtureError::Json(message) => LoadError::Parse {
            path: path.to_path_buf(),
            message,
        },
        FixtureError::Invalid(message) => LoadError::Invalid {
            path: path.to_path_buf(),
            message,
        },
    })
}

/// Why a fixture could not be converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FixtureError {
    /// Not JSON, truncated, or a value of the wrong type / an unknown key.
    Json(String),
    /// Well-formed JSON that breaks a fixture rule.
    Invalid(String),
}

impl std::fmt::Display for FixtureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FixtureError::Json(m) | FixtureError::Invalid(m) => f.write_str(m),
        }
    }
}

fn invalid<T>(msg: String) -> Result<T, FixtureError> {
    Err(FixtureError::Invalid(msg))
}

/// serde's message, on one line: it quotes keys from the file, which may hold newlines
/// (the fuzzer found "unknown field `durati\n_ns`").
fn json_error(e: serde_json::Error) -> FixtureError {
    FixtureError::Json(one_line(&e.to_string()))
}

/// Convert fixture bytes to a bundle (pure; `source_name` becomes `replayed_from`).
pub fn fixture_to_bundle(bytes: &[u8], source_name: &str) -> Result<Bundle, FixtureError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(json_error)?;
    let obj = match value.as_object() {
        Some(o) => o,
        None => return invalid("expected a JSON object at the top level".into()),
    };
    match obj.get("format").and_then(|v| v.as_str()) {
        Some(FIXTURE_FORMAT) => {}
        Some(other) => return invalid(format!("format is {other:?}, expected {FIXTURE_FORMAT:?}")),
        None => {
            return invalid(format!(
                "missing \"format\": {FIXTURE_FORMAT:?} (not a kernelkite fixture?)"
            ))
        }
    }
    match obj.get("version").and_then(|v| v.as_u64()) {
        Some(FIXTURE_VERSION) => {}
        Some(v) => {
            return invalid(format!(
                "unsupported fixture version {v} (this kernelkite reads version {FIXTURE_VERSION})"
            ))
        }
        None => return invalid("missing or non-integer \"version\"".into()),
    }
    match obj.get("backend").and_then(|v| v.as_str()) {
        Some("proc") | Some("ebpf") => {}
        Some(other) => {
            return invalid(format!(
                "unknown backend {other:?} (expected \"proc\" or \"ebpf\")"
            ))
        }
        None => return invalid("missing \"backend\" (\"proc\" or \"ebpf\")".into()),
    }
    let fx: Fixture = serde_json::from_value(value).map_err(json_error)?;
    convert(fx, source_name)
}

fn check_len(
    what: &str,
    values: usize,
    lifetime: usize,
    first: usize,
    last: usize,
) -> Result<(), FixtureError> {
    if values != lifetime {
        return invalid(format!(
            "{what} has {values} values but the lifetime is {lifetime} frames (frames {first}..={last}): misaligned arrays"
        ));
    }
    Ok(())
}

fn check_forward(what: &str, values: &[u64], first_frame: usize) -> Result<(), FixtureError> {
    for (i, w) in values.windows(2).enumerate() {
        if w[1] < w[0] {
            return invalid(format!(
                "{what} goes backwards at frame {} ({} -> {})",
                first_frame + i + 1,
                w[0],
                w[1]
            ));
        }
    }
    Ok(())
}

/// A per-frame array: its length must match the lifetime and (if cumulative) it must not
/// go backwards.
fn column<'a>(
    owner: &str,
    name: &str,
    values: &'a [u64],
    first: usize,
    last: usize,
    cumulative: bool,
) -> Result<&'a [u64], FixtureError> {
    let what = format!("{owner}: {name}");
    check_len(&what, values.len(), last - first + 1, first, last)?;
    if cumulative {
        check_forward(&what, values, first)?;
    }
    Ok(values)
}

fn state_column(
    owner: &str,
    states: &str,
    first: usize,
    last: usize,
) -> Result<Vec<String>, FixtureError> {
    let chars: Vec<String> = states.chars().map(|c| c.to_string()).collect();
    check_len(
        &format!("{owner}: states"),
        chars.len(),
        last - first + 1,
        first,
        last,
    )?;
    Ok(chars)
}

fn ms_or_ns(
    owner: &str,
    name: &str,
    ms: &Option<Vec<u64>>,
    ns: &Option<Vec<u64>>,
) -> Result<Option<Vec<u64>>, FixtureError> {
    match (ms, ns) {
        (Some(_), Some(_)) => invalid(format!("{owner}: give {name}_ms or {name}_ns, not both")),
        (Some(ms), None) => Ok(Some(
            ms.iter().map(|v| v.saturating_mul(1_000_000)).collect(),
        )),
        (None, Some(ns)) => Ok(Some(ns.clone())),
        (None, None) => Ok(None),
    }
}

fn convert(fx: Fixture, source_name: &str) -> Result<Bundle, FixtureError> {
    let backend = match fx.backend.as_str() {
        "proc" => Backend::Proc,
        "ebpf" => Backend::Ebpf,
        other => return invalid(format!("unknown backend {other:?}")),
    };
    let n = fx.frames_ms.len();
    if n == 0 {
        return invalid("frames_ms is empty: a fixture needs at least one frame".into());
    }
    check_forward("frames_ms", &fx.frames_ms, 0).map_err(|_| {
        FixtureError::Invalid("frames_ms is not in time order (times must not decrease)".into())
    })?;
    let arch = fx.host.arch.clone();
    let page = fx.host.page_size_bytes.max(1);

    let mut frames: Vec<Frame> = fx
        .frames_ms
        .iter()
        .map(|&ms| Frame {
            t_ns: ms.saturating_mul(1_000_000),
            processes: Vec::new(),
            network: None,
            host_steal_ticks: None,
        })
        .collect();

    for p in &fx.processes {
        add_process(&mut frames, p, &arch, page)?;
    }
    for f in &mut frames {
        f.processes.sort_by_key(|p| p.pid);
    }
    if let Some(net) = &fx.network {
        add_network(&mut frames, net)?;
    }
    let histograms = convert_syscalls(&fx.syscalls, &arch)?;
    let root_pids = root_pids_of(&fx, &frames);
    let mut bundle = Bundle::new(backend, fx.host, fx.interval_ms);
    bundle.label = fx.label;
    bundle.root_pids = root_pids;
    bundle.launched = fx.launched;
    bundle.frames = frames;
    bundle.frame_cap = fx.frame_cap.unwrap_or_default();
    bundle.events_lost = fx.events_lost;
    bundle.lifecycle = fx.lifecycle;
    bundle.syscalls = histograms;
    bundle.slow_syscalls = fx.slow_syscalls;
    bundle.replayed_from = Some(source_name.to_string());
    if let Some(stacks) = fx.stacks {
        bundle.stacks = Some(convert_stacks(stacks, &bundle.frames)?);
    }
    super::validate::validate(&bundle).map_err(FixtureError::Invalid)?;
    Ok(bundle)
}

/// Process `p`'s samples, added to the frames of its lifetime.
fn add_process(
    frames: &mut [Frame],
    p: &FixtureProcess,
    arch: &str,
    page: u64,
) -> Result<(), FixtureError> {
    let n = frames.len();
    let owner = format!("process {}", p.pid);
    let (first, last) = (p.first_frame, p.last_frame);
    if first > last || last >= n {
        return invalid(format!(
            "{owner}: lifetime frames {first}..={last} is outside the {n} frames (0..={})",
            n - 1
        ));
    }
    let life = last - first + 1;
    let utime = column(&owner, "utime_ticks", &p.utime_ticks, first, last, true)?;
    let stime = column(&owner, "stime_ticks", &p.stime_ticks, first, last, true)?;
    let zeros = vec![0u64; life];
    let opt = |name: &str,
               v: &Option<Vec<u64>>,
               cumulative: bool|
     -> Result<Option<Vec<u64>>, FixtureError> {
        match v {
            Some(v) => Ok(Some(
                column(&owner, name, v, first, last, cumulative)?.to_vec(),
            )),
            None => Ok(None),
        }
    };
    let cutime = opt("cutime_ticks", &p.cutime_ticks, true)?.unwrap_or_else(|| zeros.clone());
    let cstime = opt("cstime_ticks", &p.cstime_ticks, true)?.unwrap_or_else(|| zeros.clone());
    let rss_pages = match (
        opt("rss_kib", &p.rss_kib, false)?,
        opt("rss_pages", &p.rss_pages, false)?,
    ) {
        (Some(_), Some(_)) => {
            return invalid(format!("{owner}: give rss_kib or rss_pages, not both"))
        }
        (None, None) => return invalid(format!("{owner}: missing rss_kib (or rss_pages)")),
        (None, Some(pages)) => pages,
        (Some(kib), None) => {
            let mut pages = Vec::with_capacity(kib.len());
            for (i, k) in kib.iter().enumerate() {
                let bytes = k.saturating_mul(1024);
                if bytes % page != 0 {
                    return invalid(format!(
                        "{owner}: rss_kib {k} at frame {} is not a whole number of {page}-byte pages",
                        first + i
                    ));
                }
                pages.push(bytes / page);
            }
            pages
        }
    };
    let read = opt("read_bytes", &p.read_bytes, true)?;
    let write = opt("write_bytes", &p.write_bytes, true)?;
    let rchar = opt("rchar_bytes", &p.rchar_bytes, true)?;
    let wchar = opt("wchar_bytes", &p.wchar_bytes, true)?;
    let has_io = read.is_some() || write.is_some() || rchar.is_some() || wchar.is_some();
    let states = match &p.states {
        Some(s) => state_column(&owner, s, first, last)?,
        None => vec!["S".to_string(); life],
    };

    // Threads, converted to per-frame samples.
    let mut thread_samples: BTreeMap<usize, Vec<ThreadSample>> = BTreeMap::new();
    let mut tids = std::collections::BTreeSet::new();
    for t in &p.threads {
        if !tids.insert(t.tid) {
            return invalid(format!(
                "process {} thread {}: tid listed twice",
                p.pid, t.tid
            ));
        }
        add_thread(&mut thread_samples, p, t, arch)?;
    }
    for (k, fi) in (first..=last).enumerate() {
        let mut threads = thread_samples.remove(&fi).unwrap_or_default();
        threads.sort_by_key(|t| t.tid);
        let frame = &mut frames[fi];
        if frame.processes.iter().any(|q| q.pid == p.pid) {
            return invalid(format!(
                "{owner}: pid {} appears twice in frame {fi}",
                p.pid
            ));
        }
        let get = |v: &Option<Vec<u64>>| v.as_ref().map_or(0, |v| v[k]);
        frame.processes.push(ProcessSample {
            pid: p.pid,
            ppid: p.ppid,
            comm: p.comm.as_str().into(),
            state: states[k].as_str().into(),
            start_time_ticks: p.start_time_ticks,
            utime_ticks: utime[k],
            stime_ticks: stime[k],
            cutime_ticks: cutime[k],
            cstime_ticks: cstime[k],
            rss_pages: rss_pages[k],
            num_threads: (threads.len() as u64).max(1),
            io: has_io.then(|| IoCounters {
                rchar_bytes: get(&rchar),
                wchar_bytes: get(&wchar),
                read_syscalls: 0,
                write_syscalls: 0,
                read_bytes: get(&read),
                write_bytes: get(&write),
                cancelled_write_bytes: 0,
            }),
            threads,
        });
    }
    Ok(())
}

/// Thread `t` of process `p`, as a sample in each frame of its lifetime.
fn add_thread(
    thread_samples: &mut BTreeMap<usize, Vec<ThreadSample>>,
    p: &FixtureProcess,
    t: &FixtureThread,
    arch: &str,
) -> Result<(), FixtureError> {
    let (first, last) = (p.first_frame, p.last_frame);
    let towner = format!("process {} thread {}", p.pid, t.tid);
    let tf = t.first_frame.unwrap_or(first);
    let tl = t.last_frame.unwrap_or(last);
    if tf > tl || tf < first || tl > last {
        return invalid(format!(
            "{towner}: lifetime frames {tf}..={tl} is outside its process's frames {first}..={last}"
        ));
    }
    let tstates = state_column(&towner, &t.states, tf, tl)?;
    let on = ms_or_ns(&towner, "on_cpu", &t.on_cpu_ms, &t.on_cpu_ns)?;
    let rq = ms_or_ns(&towner, "runqueue", &t.runqueue_ms, &t.runqueue_ns)?;
    let sched = match (on, rq) {
        (Some(on), Some(rq)) => {
            column(&towner, "on_cpu", &on, tf, tl, true)?;
            column(&towner, "runqueue", &rq, tf, tl, true)?;
            let ts = match &t.timeslices {
                Some(ts) => column(&towner, "timeslices", ts, tf, tl, true)?.to_vec(),
                None => vec![0; tl - tf + 1],
            };
            Some((on, rq, ts))
        }
        (None, None) => None,
        _ => {
            return invalid(format!(
                "{towner}: on_cpu and runqueue must be given together"
            ))
        }
    };
    let syscalls: Vec<Option<i64>> = match &t.syscall {
        None => vec![None; tl - tf + 1],
        Some(v) => {
            check_len(&format!("{towner}: syscall"), v.len(), tl - tf + 1, tf, tl)?;
            let mut out = Vec::with_capacity(v.len());
            for s in v {
                out.push(match s {
                    None => None,
                    Some(SyscallRef::Nr(nr)) => Some(*nr),
                    Some(SyscallRef::Name(name)) => match syscall_number(arch, name) {
                        Some(nr) => Some(nr as i64),
                        None => {
                            return invalid(format!("{towner}: unknown syscall {name:?} on {arch}"))
                        }
                    },
                });
            }
            out
        }
    };
    let classes = match &t.class_ns {
        None => None,
        Some(c) => {
            let cols = [
                ("class_ns.on_cpu", &c.on_cpu),
                ("class_ns.runqueue", &c.runqueue),
                ("class_ns.io_wait", &c.io_wait),
                ("class_ns.lock_wait", &c.lock_wait),
                ("class_ns.syscall_blocked", &c.syscall_blocked),
                ("class_ns.unknown_wait", &c.unknown_wait),
            ];
            for (name, col) in cols {
                column(&towner, name, col, tf, tl, true)?;
            }
            if let Some(steal) = &c.steal {
                column(&towner, "class_ns.steal", steal, tf, tl, true)?;
            }
            Some(c)
        }
    };
    for (k, fi) in (tf..=tl).enumerate() {
        thread_samples.entry(fi).or_default().push(ThreadSample {
            tid: t.tid,
            comm: t.comm.as_deref().unwrap_or(&p.comm).into(),
            state: tstates[k].as_str().into(),
            schedstat: sched.as_ref().map(|(on, rq, ts)| Schedstat {
                on_cpu_ns: on[k],
                runqueue_ns: rq[k],
                timeslices: ts[k],
            }),
            syscall_nr: syscalls[k],
            class_ns: classes.map(|c| {
                ClassTimes::from_array([
                    c.on_cpu[k],
                    c.runqueue[k],
                    c.io_wait[k],
                    c.lock_wait[k],
                    c.syscall_blocked[k],
                    c.unknown_wait[k],
                    c.steal.as_ref().map_or(0, |s| s[k]),
                ])
            }),
        });
    }
    Ok(())
}

/// The network section: each interface's counters in every frame.
fn add_network(
    frames: &mut [Frame],
    net: &BTreeMap<String, FixtureNet>,
) -> Result<(), FixtureError> {
    let n = frames.len();
    for (name, c) in net {
        let owner = format!("network {name}");
        let all = |col: &str, v: &[u64]| column(&owner, col, v, 0, n - 1, false).map(|_| ());
        all("rx_bytes", &c.rx_bytes)?;
        all("tx_bytes", &c.tx_bytes)?;
        if let Some(v) = &c.rx_packets {
            all("rx_packets", v)?;
        }
        if let Some(v) = &c.tx_packets {
            all("tx_packets", v)?;
        }
    }
    for (i, f) in frames.iter_mut().enumerate() {
        f.network = Some(
            net.iter()
                .map(|(name, c)| NetDevCounters {
                    interface: name.clone(),
                    rx_bytes: c.rx_bytes[i],
                    rx_packets: c.rx_packets.as_ref().map_or(0, |v| v[i]),
                    tx_bytes: c.tx_bytes[i],
                    tx_packets: c.tx_packets.as_ref().map_or(0, |v| v[i]),
                })
                .collect(),
        );
    }
    Ok(())
}

/// The syscalls section as histograms: each latency in its bucket.
fn convert_syscalls(
    syscalls: &[FixtureSyscall],
    arch: &str,
) -> Result<Vec<SyscallHistogram>, FixtureError> {
    let mut histograms = Vec::new();
    for s in syscalls {
        let nr = match s.nr.or_else(|| syscall_number(arch, &s.name)) {
            Some(nr) => nr,
            None => {
                return invalid(format!(
                    "syscalls: unknown syscall {:?} on {arch} (give \"nr\" explicitly)",
                    s.name
                ))
            }
        };
        let mut buckets: BTreeMap<u32, u64> = BTreeMap::new();
        let (mut count, mut total, mut max) = (0u64, 0u64, 0u64);
        for &(ns, calls) in &s.latencies_ns {
            if calls == 0 {
                continue;
            }
            let b = buckets
                .entry(kernelkite_common::hist::bucket_index(ns) as u32)
                .or_default();
            *b = b.saturating_add(calls);
            count = count.saturating_add(calls);
            total = total.saturating_add(ns.saturating_mul(calls));
            max = max.max(ns);
        }
        histograms.push(SyscallHistogram {
            pid: s.pid,
            nr,
            name: s.name.clone(),
            count,
            total_ns: total,
            max_ns: max,
            buckets: buckets.into_iter().collect(),
            before_start: false,
        });
    }
    histograms.sort_by(|a, b| (a.pid, a.nr, &a.name).cmp(&(b.pid, b.nr, &b.name)));
    Ok(histograms)
}

/// The root pids: as given, else the launched command's, else the first frame's
/// processes whose parent is not in the fixture.
fn root_pids_of(fx: &Fixture, frames: &[Frame]) -> Vec<i32> {
    match &fx.root_pids {
        Some(r) => r.clone(),
        None => match &fx.launched {
            Some(l) => vec![l.pid],
            None => {
                let present: std::collections::BTreeSet<i32> =
                    fx.processes.iter().map(|p| p.pid).collect();
                frames[0]
                    .processes
                    .iter()
                    .filter(|p| !present.contains(&p.ppid))
                    .map(|p| p.pid)
                    .collect()
            }
        },
    }
}

/// The fixture's `stacks` section as a bundle [`StackProfile`]: ids become indices in
/// the order listed, samples are sorted by their key.
fn convert_stacks(fx: FixtureStacks, frames: &[Frame]) -> Result<StackProfile, FixtureError> {
    let mut frame_ids: BTreeMap<&str, u32> = BTreeMap::new();
    for (i, f) in fx.frames.iter().enumerate() {
        if frame_ids.insert(f.id.as_str(), i as u32).is_some() {
            return invalid(format!("stacks.frames: frame id {:?} listed twice", f.id));
        }
    }
    let mut stack_ids: BTreeMap<&str, u32> = BTreeMap::new();
    let mut stacks = Vec::with_capacity(fx.stacks.len());
    for (i, s) in fx.stacks.iter().enumerate() {
        if stack_ids.insert(s.id.as_str(), i as u32).is_some() {
            return invalid(format!("stacks.stacks: stack id {:?} listed twice", s.id));
        }
        if s.frames.is_empty() {
            return invalid(format!("stacks.stacks: stack {:?} has no frames", s.id));
        }
        let mut indices = Vec::with_capacity(s.frames.len());
        for f in &s.frames {
            match frame_ids.get(f.as_str()) {
                Some(&idx) => indices.push(idx),
                None => {
                    return invalid(format!(
                        "stacks.stacks: stack {:?} names unknown frame {f:?}",
                        s.id
                    ))
                }
            }
        }
        stacks.push(indices);
    }
    let pids: std::collections::BTreeSet<i32> = frames
        .iter()
        .flat_map(|f| f.processes.iter().map(|p| p.pid))
        .collect();
    let mut samples = Vec::with_capacity(fx.samples.len());
    for (i, s) in fx.samples.iter().enumerate() {
        let what = format!("stacks.samples[{i}]");
        if kernelkite_common::LatencyClass::from_name(&s.class).is_none() {
            return invalid(format!("{what}: unknown class {:?}", s.class));
        }
        if !pids.contains(&s.pid) {
            return invalid(format!("{what}: pid {} is in no frame", s.pid));
        }
        let stack = |id: &Option<String>, which: &str| -> Result<Option<u32>, FixtureError> {
            match id {
                None => Ok(None),
                Some(id) => match stack_ids.get(id.as_str()) {
                    Some(&idx) => Ok(Some(idx)),
                    None => invalid(format!("{what}: {which} names unknown stack {id:?}")),
                },
            }
        };
        samples.push(StackSample {
            pid: s.pid,
            tid: s.tid,
            class: s.class.clone(),
            user_stack: stack(&s.user_stack, "user_stack")?,
            kernel_stack: stack(&s.kernel_stack, "kernel_stack")?,
            total_ns: s.total_ns,
            count: s.count,
            estimated_ns: 0,
            sampled_count: 0,
            in_progress: false,
        });
    }
    let key = |s: &StackSample| (s.pid, s.tid, s.class.clone(), s.user_stack, s.kernel_stack);
    samples.sort_by_key(key);
    if let Some(w) = samples.windows(2).find(|w| key(&w[0]) == key(&w[1])) {
        return invalid(format!(
            "stacks.samples: pid {} tid {} class {} has the same pair of stacks twice",
            w[0].pid, w[0].tid, w[0].class
        ));
    }
    Ok(StackProfile {
        sample_hz: fx.sample_hz,
        min_block_ns: fx.min_block_us.saturating_mul(1000),
        frames: fx
            .frames
            .into_iter()
            .map(|f| StackFrame {
                addr: f.addr,
                kernel: f.kernel,
                module: f.module,
                module_offset: f.module_offset,
                symbol: f.symbol,
                file: f.file,
                line: f.line,
            })
            .collect(),
        stacks,
        samples,
        captures_lost: fx.captures_lost,
        skipped_files: fx.skipped_files,
        ..StackProfile::default()
    })
}

/// The committed fixture `fixtures/NAME`, as a bundle (for unit tests).
#[cfg(test)]
pub(crate) fn committed(name: &str) -> Bundle {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    fixture_to_bundle(&std::fs::read(dir.join(name)).unwrap(), name).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> serde_json::Value {
        serde_json::json!({
            "format": "kernelkite-fixture", "version": 1, "backend": "proc",
            "host": {"clock_ticks_per_sec": 100, "page_size_bytes": 4096, "num_cpus": 2,
                     "kernel_release": null, "arch": "x86_64"},
            "interval_ms": 100, "frames_ms": [0, 100, 200],
            "processes": [{
                "pid": 10, "ppid": 1, "comm": "a", "start_time_ticks": 5,
                "first_frame": 0, "last_frame": 2,
                "utime_ticks": [1, 2, 3], "stime_ticks": [0, 0, 1], "rss_kib": [4, 8, 8],
                "read_bytes": [0, 10, 20], "write_bytes": [0, 0, 0],
                "threads": [{"tid": 10, "states": "RSS", "syscall": [null, "futex", 7],
                             "on_cpu_ms": [10, 20, 40], "runqueue_ms": [0, 1, 1]}]
            }]
        })
    }

    fn conv(v: &serde_json::Value) -> Result<Bundle, FixtureError> {
        fixture_to_bundle(&serde_json::to_vec(v).unwrap(), "t.json")
    }

    #[test]
    fn converts_and_is_deterministic() {
        let b = conv(&base()).unwrap();
        assert_eq!(b.frames.len(), 3);
        assert_eq!(b.frames[1].t_ns, 100_000_000);
        let p = &b.frames[2].processes[0];
        assert_eq!(p.rss_pages, 2);
        assert_eq!(p.io.unwrap().read_bytes, 20);
        assert_eq!(p.threads[0].syscall_nr, Some(7));
        assert_eq!(b.frames[1].processes[0].threads[0].syscall_nr, Some(202));
        assert_eq!(p.threads[0].schedstat.unwrap().on_cpu_ns, 40_000_000);
        assert_eq!(b.root_pids, vec![10]);
        assert_eq!(b.replayed_from.as_deref(), Some("t.json"));
        let again = conv(&base()).unwrap();
        assert_eq!(
            crate::model::io::bundle_to_bytes(&b),
            crate::model::io::bundle_to_bytes(&again)
        );
    }

    #[test]
    fn rejects_bad_inputs_with_one_line() {
        type Mutation = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (
                Box::new(|v| v["version"] = 2.into()),
                "unsupported fixture version 2",
            ),
            (
                Box::new(|v| v["backend"] = "dtrace".into()),
                "unknown backend \"dtrace\"",
            ),
            (Box::new(|v| v["format"] = "x".into()), "format is \"x\""),
            (
                Box::new(|v| v["processes"][0]["stime_ticks"] = serde_json::json!([0, 0])),
                "process 10: stime_ticks has 2 values but the lifetime is 3 frames",
            ),
            (
                Box::new(|v| v["processes"][0]["utime_ticks"] = serde_json::json!([1, 3, 2])),
                "process 10: utime_ticks goes backwards at frame 2 (3 -> 2)",
            ),
            (
                Box::new(|v| v["processes"][0]["threads"][0]["states"] = "RS".into()),
                "process 10 thread 10: states has 2 values",
            ),
            (
                Box::new(|v| v["processes"][0]["last_frame"] = 3.into()),
                "outside the 3 frames",
            ),
            (
                Box::new(|v| v["frames_ms"] = serde_json::json!([0, 200, 100])),
                "not in time order",
            ),
            (
                Box::new(|v| {
                    v["processes"][0]["threads"][0]["syscall"] =
                        serde_json::json!([null, "nope", 1])
                }),
                "unknown syscall \"nope\"",
            ),
            (
                Box::new(|v| v["processes"][0]["rss_kib"] = serde_json::json!([1, 2, 3])),
                "whole number",
            ),
            // serde quotes the key; its newline is escaped (found by the fuzzer).
            (
                Box::new(|v| v["processes"][0]["durati\n_ns"] = 1.into()),
                "unknown field `durati\\n_ns`",
            ),
        ];
        for (mutate, expected) in cases {
            let mut v = base();
            mutate(&mut v);
            let err = conv(&v).unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
            assert!(!err.contains('\n'));
        }
        let truncated = &serde_json::to_vec(&base()).unwrap()[..40];
        assert!(matches!(
            fixture_to_bundle(truncated, "t"),
            Err(FixtureError::Json(_))
        ));
    }

    fn with_stacks() -> serde_json::Value {
        let mut v = base();
        v["stacks"] = serde_json::json!({
            "sample_hz": 99, "min_block_us": 1000,
            "frames": [
                {"id": "lock", "addr": 4096, "symbol": "pthread_mutex_lock"},
                {"id": "main", "addr": 8192, "module": "/bin/a", "module_offset": 4660},
                {"id": "futex", "addr": 18446744071562067968u64, "kernel": true, "symbol": "futex_wait"}
            ],
            "stacks": [{"id": "u", "frames": ["lock", "main"]}, {"id": "k", "frames": ["futex"]}],
            "samples": [
                {"pid": 10, "tid": 10, "class": "on_cpu", "user_stack": "u", "total_ns": 30, "count": 3},
                {"pid": 10, "tid": 10, "class": "lock_wait", "user_stack": "u", "kernel_stack": "k",
                 "total_ns": 500, "count": 2}
            ]
        });
        v
    }

    #[test]
    fn converts_stacks() {
        let b = conv(&with_stacks()).unwrap();
        let p = b.stacks.unwrap();
        assert_eq!(p.min_block_ns, 1_000_000);
        assert_eq!(p.stacks, vec![vec![0, 1], vec![2]]);
        assert_eq!(p.frames[1].display_name(), "a+0x1234");
        assert!(p.frames[2].kernel);
        // Sorted by (pid, tid, class, user stack, kernel stack).
        assert_eq!(p.samples[0].class, "lock_wait");
        assert_eq!(p.samples[0].kernel_stack, Some(1));
        assert_eq!(p.samples[1].class, "on_cpu");
        assert_eq!(p.samples[1].kernel_stack, None);
        assert!(conv(&base()).unwrap().stacks.is_none());
    }

    #[test]
    fn rejects_bad_stacks_with_one_line() {
        type Mutation = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (
                Box::new(|v| v["stacks"]["frames"][1]["id"] = "lock".into()),
                "frame id \"lock\" listed twice",
            ),
            (
                Box::new(|v| v["stacks"]["stacks"][0]["frames"][0] = "nope".into()),
                "stack \"u\" names unknown frame \"nope\"",
            ),
            (
                Box::new(|v| v["stacks"]["stacks"][1]["frames"] = serde_json::json!([])),
                "stack \"k\" has no frames",
            ),
            (
                Box::new(|v| v["stacks"]["samples"][0]["class"] = "napping".into()),
                "stacks.samples[0]: unknown class \"napping\"",
            ),
            (
                Box::new(|v| v["stacks"]["samples"][1]["kernel_stack"] = "zz".into()),
                "stacks.samples[1]: kernel_stack names unknown stack \"zz\"",
            ),
            (
                Box::new(|v| v["stacks"]["samples"][0]["pid"] = 99.into()),
                "stacks.samples[0]: pid 99 is in no frame",
            ),
            (
                Box::new(|v| v["stacks"]["samples"][0]["class"] = "lock_wait".into()),
                "pid 10 tid 10 class lock_wait has the same pair of stacks twice",
            ),
        ];
        for (mutate, expected) in cases {
            let mut v = with_stacks();
            v["stacks"]["samples"][0]["kernel_stack"] =
                if expected.contains("twice") && expected.contains("pair") {
                    "k".into()
                } else {
                    serde_json::Value::Null
                };
            mutate(&mut v);
            let err = conv(&v).unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
            assert!(!err.contains('\n'));
        }
        let mut v = with_stacks();
        v["stacks"]["frames"][0]["colour"] = "red".into();
        assert!(matches!(conv(&v), Err(FixtureError::Json(_))));
    }
}
