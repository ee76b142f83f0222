//! Bundle types. Field order is the serialization order and is part of the format:
//! add fields at the end of a struct, with `#[serde(default)]`, and bump
//! [`BUNDLE_FORMAT_VERSION`] only for changes old readers cannot ignore.
//!
//! Format 2 writes the per-frame samples (processes, threads, their counters) as rows:
//! JSON arrays of the fields in declaration order, without repeating every key in every
//! frame (docs/BUNDLE.md lists the columns). A 100k-frame bundle is then about a sixth of
//! its keyed size and loads several times faster. The derived `Deserialize` reads a row
//! or, for format 1 bundles, the keyed object.

use std::collections::BTreeMap;
use std::fmt;

use kernelkite_common::{LatencyClass, NUM_CLASSES};
use serde::{Deserialize, Serialize};

/// A short string stored inline (up to 24 bytes, no heap allocation): a comm (at most
/// 15 bytes, TASK_COMM_LEN) or a state letter. A bundle holds millions of them, and
/// allocating each one dominated loading a large bundle.
pub type InlineStr = compact_str::CompactString;

/// The value of [`Bundle::format`]; anything else is not a kernelkite bundle.
pub const BUNDLE_FORMAT: &str = "kernelkite-bundle";
/// The bundle format version this build writes.
pub const BUNDLE_FORMAT_VERSION: u32 = 2;
/// The oldest bundle format version this build still reads (format 1: keyed samples).
pub const BUNDLE_FORMAT_VERSION_OLDEST: u32 = 1;

/// One profiling session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// Always [`BUNDLE_FORMAT`].
    pub format: String,
    /// Always [`BUNDLE_FORMAT_VERSION`] for bundles this build writes.
    pub format_version: u32,
    /// Which collector produced the frames.
    pub backend: Backend,
    /// Free text from `--label`.
    pub label: Option<String>,
    /// Facts about the machine needed to interpret the raw counters.
    pub host: HostConstants,
    /// The requested sampling/snapshot interval.
    pub interval_ms: u64,
    /// The pids the session was pointed at (`run`: the launched command; `trace`: `--pid`).
    pub root_pids: Vec<i32>,
    /// The command `run` launched, with its exit status and exact rusage.
    pub launched: Option<LaunchedCommand>,
    /// Snapshots in time order.
    pub frames: Vec<Frame>,
    /// Whether a cap on the number of frames was hit, and how many frames it dropped.
    pub frame_cap: FrameCap,
    /// Events of the traced threads that are not in the bundle: ring-buffer records and
    /// map entries the BPF programs could not store, the traced threads' missed exits
    /// they found, and what the session dropped past its caps (docs/BUNDLE.md). Not the
    /// program runs the kernel skipped for any task. `None` when the backend has no
    /// such loss (the /proc sampler).
    pub events_lost: Option<u64>,
    /// Process lifecycle events seen by the kernel (eBPF backend), in time order.
    pub lifecycle: Vec<LifecycleEvent>,
    /// Per-process syscall latency histograms (eBPF backend), cumulative over the session.
    pub syscalls: Vec<SyscallHistogram>,
    /// Single syscalls slower than the trace's `--min-latency-us` (eBPF backend).
    pub slow_syscalls: Vec<SlowSyscall>,
    /// Name of the fixture or recording file this bundle was replayed from, if any.
    pub replayed_from: Option<String>,
    /// Stacks captured with `--stacks` (eBPF backend), with their symbols resolved while
    /// the processes were alive; `None` (and absent from the file) when stacks were not
    /// captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<StackProfile>,
    /// Syscalls still running at the end (or at a live snapshot) of the session (eBPF
    /// backend): the threads blocked in them. Absent in bundles written before
    /// kernelkite reported them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub syscalls_in_progress: Vec<SyscallInProgress>,
    /// `events_lost` by what was lost (eBPF backend), the causes with a count only:
    /// `lifecycle_records`, `slow_call_records`, `stack_captures`, `histogram_updates`,
    /// `untracked_threads`, `missed_exits`, `undecodable_records`, `events_past_caps`,
    /// `waker_updates` (and `syscalls_past_caps` in bundles from before exited
    /// processes' histograms past their cap were folded into pid 0). Absent in bundles
    /// written before kernelkite named them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub events_lost_by_cause: BTreeMap<String, u64>,
    /// What ended each sleep of the traced threads (eBPF backend), summed in the kernel
    /// per (thread, class, waker); `None` (and absent from the file) for the /proc
    /// sampler and for bundles written before kernelkite recorded wakers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wakers: Option<WakerProfile>,
    /// Every wakeup of the traced threads, recorded with `--critical-path` (eBPF
    /// backend), for `kernelkite critical-path`; `None` (and absent from the file)
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wakeups: Option<WakeupStream>,
    /// Each process's command line, as its users name it (`rustc --crate-name serde
    /// ...`): read at exec by the BPF programs, or from /proc/PID/cmdline for a
    /// process found running (and under classic tracepoints); at most
    /// [`MAX_ARGV_BYTES`] of it. Empty (and absent from the file) for bundles written
    /// before kernelkite kept them; a process with none keeps its comm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_lines: Vec<CommandLine>,
    /// Each thread's final counters, read as it exited (`run` on /proc with exit
    /// accounting: ptrace exit stops), in time order: exact however short its life.
    /// Empty (and absent from the file) for the eBPF backend, `--no-exit-stops`, and
    /// bundles written before kernelkite read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thread_exits: Vec<ThreadExit>,
    /// Where each process lives beyond its host pid: its cgroup v2 path and its pid in
    /// its own pid namespace, read from /proc when the process is first seen and after
    /// each exec. Empty (and absent from the file) for bundles written before
    /// kernelkite read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_identities: Vec<ProcessIdentity>,
    /// `--cgroup`, `--container`: the traced cgroup's own counters, one reading per
    /// frame (pressure stall totals and CPU time with its throttling). Empty (and absent
    /// from the file) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup_samples: Vec<CgroupSample>,
    /// `--cgroup`, `--container`: the cgroup the session traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced_cgroup: Option<TracedCgroup>,
}

/// The cgroup v2 subtree a session traced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracedCgroup {
    /// Its path from the hierarchy's root.
    pub path: String,
    /// Its id (its directory's inode on the v2 mount).
    pub id: u64,
}

/// The most of a cgroup path a bundle keeps (bytes); a longer one is not kept.
pub const MAX_CGROUP_PATH_BYTES: usize = 4096;

/// A process's cgroup and pid namespace, as /proc showed them at `t_ns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessIdentity {
    /// Nanoseconds since the session's start of the reading.
    pub t_ns: u64,
    /// Its host pid.
    pub pid: i32,
    /// /proc/<pid>/cgroup, the `0::` line: its cgroup v2 path from the hierarchy's root
    /// (absent on a host without cgroup v2, or past [`MAX_CGROUP_PATH_BYTES`]).
    pub cgroup: Option<String>,
    /// The inode of that cgroup's directory on the v2 mount: the kernel's cgroup id
    /// (absent when the directory was gone or not found).
    pub cgroup_id: Option<u64>,
    /// /proc/<pid>/status `NSpid`: its pid in each pid namespace it is in, the host's
    /// first and its own last; one entry when it shares the host's.
    pub ns_pids: Vec<i32>,
}

/// The traced cgroup's counters at `t_ns`, each cumulative as its file gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CgroupSample {
    /// Nanoseconds since the session's start of the reading.
    pub t_ns: u64,
    /// `cpu.stat` `usage_usec`, `user_usec`, `system_usec`.
    pub cpu_usage_us: Option<u64>,
    pub cpu_user_us: Option<u64>,
    pub cpu_system_us: Option<u64>,
    /// `cpu.stat` `nr_periods`, `nr_throttled`, `throttled_usec`: the bandwidth
    /// controller's (cpu.max) periods, periods it throttled the cgroup in, and time
    /// throttled. From the v1 cpu controller's `cpu.stat` (`throttled_time`, ns, kept
    /// here in µs) on hosts that bind it there, for the traced processes' cpu cgroup.
    pub cpu_periods: Option<u64>,
    pub cpu_throttled_periods: Option<u64>,
    pub cpu_throttled_us: Option<u64>,
    /// `cpu.pressure`, `io.pressure`, `memory.pressure`: `some` and `full` `total=`
    /// (µs some/all of the cgroup's tasks stalled on the resource).
    pub cpu_some_us: Option<u64>,
    pub cpu_full_us: Option<u64>,
    pub io_some_us: Option<u64>,
    pub io_full_us: Option<u64>,
    pub memory_some_us: Option<u64>,
    pub memory_full_us: Option<u64>,
}

/// One thread's counters at its ptrace exit stop: the last moment they can be read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadExit {
    /// Nanoseconds since the session's start.
    pub t_ns: u64,
    /// Its process then, from /proc/<pid>/{stat,io} (CPU and I/O of the whole process
    /// so far, its exited threads included); `threads` holds the exiting thread only,
    /// with its final schedstat.
    pub process: ProcessSample,
    /// /proc/<pid>/status `VmHWM`: the process's peak resident set so far, KiB.
    pub peak_rss_kib: Option<u64>,
    /// /proc/<pid>/task/<tid>/status `voluntary_ctxt_switches` (the thread's own).
    pub voluntary_switches: Option<u64>,
    /// /proc/<pid>/task/<tid>/status `nonvoluntary_ctxt_switches`.
    pub involuntary_switches: Option<u64>,
}

/// The most of one command line a bundle keeps (its argv joined, bytes).
pub const MAX_ARGV_BYTES: usize = 4096;

/// One process's argv: after its exec at `t_ns`, or (`t_ns` 0) as found at the start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandLine {
    /// Nanoseconds since the session's start of the exec (0: read from /proc).
    pub t_ns: u64,
    pub pid: i32,
    /// The arguments, `argv[0]` first; the last may be cut at [`MAX_ARGV_BYTES`].
    pub argv: Vec<String>,
}

impl CommandLine {
    /// Split the kernel's NUL-separated argv bytes (lossy UTF-8; a trailing NUL ends
    /// the last argument, not an empty one after it).
    pub fn from_nul_separated(t_ns: u64, pid: i32, bytes: &[u8]) -> Option<CommandLine> {
        let bytes = &bytes[..bytes.len().min(MAX_ARGV_BYTES)];
        let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
        if bytes.is_empty() {
            return None;
        }
        let argv = (bytes.split(|b| *b == 0))
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        Some(CommandLine { t_ns, pid, argv })
    }
}

/// `--critical-path`: the wakeups of the traced threads, in the order they arrived.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakeupStream {
    pub wakeups: Vec<Wakeup>,
    /// Wakeups not in `wakeups`: records the kernel did not send (ring buffer half full)
    /// and those past the session's cap. Also in `events_lost_by_cause.wakeup_records`.
    pub lost: u64,
}

/// [`Wakeup::class`] of a new task's first wakeup, by the thread that created it.
pub const NEW_TASK_CLASS: &str = "new_task";

/// One wakeup of a traced thread: the sleep it ended and what ended it. Written as a
/// row (docs/BUNDLE.md lists the columns).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WakeupRow", into = "WakeupRow")]
pub struct Wakeup {
    /// Nanoseconds since the session's start, of the wakeup.
    pub t_ns: u64,
    /// Length of the sleep it ended (0 for [`NEW_TASK_CLASS`]).
    pub sleep_ns: u64,
    /// The woken thread.
    pub pid: i32,
    pub tid: i32,
    /// The sleep's latency class, or [`NEW_TASK_CLASS`].
    pub class: InlineStr,
    /// What ran the wakeup: `thread`, `timer`, `hardirq`, `softirq` or `interrupt`
    /// (as `WakerSample::kind`).
    pub waker_kind: InlineStr,
    /// The waking thread (kind `thread`), else 0.
    pub waker_pid: i32,
    pub waker_tid: i32,
    /// The woken thread's cumulative on_cpu, runqueue and steal time when the sleep
    /// began (raw counters: what it did between two sleeps is their difference).
    pub on_cpu_ns: u64,
    pub runqueue_ns: u64,
    pub steal_ns: u64,
}

type WakeupRow = (
    u64,
    u64,
    i32,
    i32,
    InlineStr,
    InlineStr,
    i32,
    i32,
    u64,
    u64,
    u64,
);

impl From<WakeupRow> for Wakeup {
    fn from(r: WakeupRow) -> Wakeup {
        Wakeup {
            t_ns: r.0,
            sleep_ns: r.1,
            pid: r.2,
            tid: r.3,
            class: r.4,
            waker_kind: r.5,
            waker_pid: r.6,
            waker_tid: r.7,
            on_cpu_ns: r.8,
            runqueue_ns: r.9,
            steal_ns: r.10,
        }
    }
}

impl From<Wakeup> for WakeupRow {
    fn from(w: Wakeup) -> WakeupRow {
        (
            w.t_ns,
            w.sleep_ns,
            w.pid,
            w.tid,
            w.class,
            w.waker_kind,
            w.waker_pid,
            w.waker_tid,
            w.on_cpu_ns,
            w.runqueue_ns,
            w.steal_ns,
        )
    }
}

/// The causes of `Bundle::events_lost_by_cause`: (key, how reports name it, what it
/// makes incomplete). A caveat names only what its causes affect.
pub const LOST_CAUSES: [(&str, &str, &str); 11] = [
    (
        "lifecycle_records",
        "lifecycle records",
        "lifecycle events (fork, exec, exit)",
    ),
    (
        "slow_call_records",
        "slow-call records",
        "the slow syscalls",
    ),
    ("stack_captures", "stack captures", "the stacks"),
    (
        "histogram_updates",
        "histogram updates",
        "the syscall histograms",
    ),
    (
        "untracked_threads",
        "untracked threads",
        "the threads' class times",
    ),
    ("missed_exits", "missed exits", "lifecycle events (exits)"),
    (
        "undecodable_records",
        "undecodable records",
        "lifecycle events and slow syscalls",
    ),
    (
        "events_past_caps",
        "events past the session's caps",
        "lifecycle events and slow syscalls",
    ),
    (
        "syscalls_past_caps",
        "syscalls past the session's caps",
        "the syscall histograms",
    ),
    (
        "waker_updates",
        "waker updates (waker table full)",
        "the wakers (`kernelkite waits`)",
    ),
    (
        "wakeup_records",
        "wakeup records (--critical-path)",
        "the critical path (`kernelkite critical-path`)",
    ),
];

/// How reports name a lost cause, and what it affects (the key itself if unknown).
pub fn lost_cause(key: &str) -> (&str, &str) {
    LOST_CAUSES
        .iter()
        .find(|(k, _, _)| *k == key)
        .map_or((key, "the data it names"), |(_, label, affects)| {
            (*label, *affects)
        })
}

/// `events lost` in words: `N (stack captures 3, ...)`, or just N for bundles that
/// do not say what was lost.
pub fn lost_text(total: u64, by_cause: &BTreeMap<String, u64>) -> String {
    if by_cause.is_empty() {
        return total.to_string();
    }
    let list: Vec<String> = by_cause
        .iter()
        .map(|(c, n)| format!("{} {n}", lost_cause(c).0))
        .collect();
    format!("{total} ({})", list.join(", "))
}

/// What the lost events make incomplete, each once, in cause order; empty when the
/// bundle does not say (then everything may be).
pub fn lost_affects(by_cause: &BTreeMap<String, u64>) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for (key, _, affects) in LOST_CAUSES {
        if by_cause.get(key).is_some_and(|&n| n > 0) && !out.contains(&affects) {
            out.push(affects);
        }
    }
    out
}

/// One syscall still running when the session (or a live snapshot) read the threads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyscallInProgress {
    pub pid: i32,
    pub tid: i32,
    /// Syscall number on `host.arch`.
    pub nr: u32,
    pub name: String,
    /// Its start, ns since the session's start (0 with `before_start`).
    pub t_ns: u64,
    /// Its time so far inside the session.
    pub elapsed_ns: u64,
    /// It was already running when tracing started: `elapsed_ns` is only the part of
    /// its time inside the session.
    #[serde(default, skip_serializing_if = "is_false")]
    pub before_start: bool,
    /// Index into the bundle's [`StackProfile::stacks`]: the caller's user stack, when
    /// a switch-out inside the call captured it (`--stacks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_stack: Option<u32>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Sleeps of the traced threads by what ended them: raw cumulative counters of the
/// kernel's `WAKERS` map, plus the sleeps still open when the session ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakerProfile {
    /// Per (pid, tid, class, kind, source, waker), sorted by that key.
    pub wakeups: Vec<WakerSample>,
    /// Sleeps whose waker could not be stored (the kernel's map was full); their time is
    /// still in the latency classes. Also in `events_lost`.
    pub lost: u64,
}

/// The sleeps of one thread in one class that one waker ended (or that were still open
/// at the end: kind `not_woken`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakerSample {
    /// The thread that slept.
    pub pid: i32,
    pub tid: i32,
    /// Latency class name of the sleep (`lock_wait`, `syscall_blocked`, ...).
    pub class: String,
    /// `thread`, `interrupt` or `not_woken`.
    pub kind: String,
    /// `interrupt`: `timer`, `hardirq` (with `irq`), `softirq` (with `softirq`) or
    /// `unknown`; otherwise `None`.
    pub source: Option<String>,
    /// `interrupt` with source `hardirq`: the irq number; `softirq`: the vector.
    pub source_id: Option<u32>,
    /// `thread`: the thread that ran the wakeup (it may be outside the traced set).
    pub waker_pid: Option<i32>,
    pub waker_tid: Option<i32>,
    /// `thread`: its comm at its latest wakeup.
    pub waker_comm: Option<String>,
    /// Summed ns of those sleeps (`not_woken`: from the sleep's start to the end).
    pub total_ns: u64,
    /// Number of sleeps.
    pub count: u64,
}

/// Where time was spent, by stack: off-CPU intervals summed per stack in the kernel, and
/// on-CPU time sampled by a perf event. Frames and stacks are interned: a sample names a
/// stack by index, a stack names its frames by index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackProfile {
    /// `--sample-hz`: on-CPU stacks are sampled at this rate; one sample stands for
    /// `1 / sample_hz` seconds of CPU.
    pub sample_hz: u64,
    /// `--min-block-us` in nanoseconds: off-CPU intervals shorter than this were not
    /// given a stack (their time is still in the latency classes).
    pub min_block_ns: u64,
    /// Every distinct frame, in first-seen order.
    pub frames: Vec<StackFrame>,
    /// Every distinct stack: indices into `frames`, innermost (leaf) first.
    pub stacks: Vec<Vec<u32>>,
    /// Time per (process, thread, class, user stack, kernel stack), sorted by that key.
    pub samples: Vec<StackSample>,
    /// Stack captures the kernel could not store (stack map full or hash collision, a
    /// failed walk, a full aggregation map), counted in the kernel. They are also in
    /// `events_lost`.
    pub captures_lost: u64,
    /// Files a traced process controls (its binaries, its perf map) that kernelkite
    /// refused to read, and why: their frames keep `module+0xoffset` or the bare
    /// address. Absent in bundles written before kernelkite reported them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_files: Vec<SkippedFile>,
    /// Indices into `stacks` of user stacks that were not unwound to their end (the
    /// copy ended, unwind information and frame pointers both failed, the frame limit,
    /// or a frame-pointer walk whose copy was not sent): reports add a `[truncated]`
    /// frame above them. Absent in bundles written before stacks were unwound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated_stacks: Vec<u32>,
    /// Every file a resolved user stack touched, with its build-id (so a binary gone or
    /// replaced since can be matched to its debug file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<StackModule>,
    /// User stack copies received and unwound, and those of them cut short by a failed
    /// page read (the stack's top mapping ended, or a page was not resident).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stack_copies: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stack_copies_short: u64,
    /// User stack copies the kernel did not send (over the copy rate bound, ring buffer
    /// half full): those stacks are frame-pointer walks, marked truncated. Also in
    /// `events_lost`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stack_copies_lost: u64,
    /// Nanoseconds userspace spent unwinding the copies (framehop's walk, once each
    /// file's unwind information is loaded): `unwind_ns / stack_copies` is the cost per
    /// captured stack.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unwind_ns: u64,
}

impl StackProfile {
    /// Whether the user stack at `index` is marked truncated.
    pub fn is_truncated(&self, index: u32) -> bool {
        self.truncated_stacks.binary_search(&index).is_ok()
    }
}

/// A mapped file that stack frames fall in.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackModule {
    pub path: String,
    /// The GNU build-id, lower-case hex; `None` when the file has none (or was not read).
    pub build_id: Option<String>,
}

/// A file not read for symbols (docs/STACKS.md lists the reasons).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkippedFile {
    /// The path as the process's mappings or the perf map convention name it.
    pub path: String,
    /// `symlink`, `not_regular`, `wrong_owner`, `too_large`, `replaced`, `missing`,
    /// `permission_denied`, `timed_out` or `unreadable`.
    pub reason: String,
    /// How many times it was refused.
    pub count: u64,
}

/// One frame of a stack, resolved while its process was alive (blazesym).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackFrame {
    /// The instruction address as captured (a kernel address, or a virtual address in
    /// the process).
    pub addr: u64,
    /// Whether this is a kernel frame.
    pub kernel: bool,
    /// The ELF file (or `[kernel]`, `[perf-map]`) the address falls in, when known.
    pub module: Option<String>,
    /// The address's offset in `module` (file offset for user code): a stripped binary
    /// is shown as `module+0xoffset`.
    pub module_offset: Option<u64>,
    /// The function, demangled, when a symbol table, DWARF, kallsyms or a perf map names it.
    pub symbol: Option<String>,
    /// Source file and line, when DWARF has them.
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// Time spent in one latency class with one pair of stacks by one thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackSample {
    pub pid: i32,
    pub tid: i32,
    /// Latency class name (`on_cpu`, `io_wait`, ...).
    pub class: String,
    /// Index into [`StackProfile::stacks`]; `None` when there is no user stack (a kernel
    /// thread) or it could not be captured.
    pub user_stack: Option<u32>,
    /// Index into [`StackProfile::stacks`]; `None` when the kernel stack was not captured.
    pub kernel_stack: Option<u32>,
    /// Off-CPU: the summed intervals at least `min_block_ns` long (exact); on_cpu:
    /// `count / sample_hz` seconds, in ns.
    pub total_ns: u64,
    /// Off-CPU intervals at least `min_block_ns` long, or on-CPU samples.
    pub count: u64,
    /// Off-CPU: the estimated time of the shorter intervals. Each was captured with
    /// probability `len / min_block_ns` and counts as `min_block_ns` (an unbiased
    /// estimate). Absent (0) in bundles written before kernelkite sampled them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub estimated_ns: u64,
    /// The short intervals captured so.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sampled_count: u64,
    /// The time is of a wait still in progress when the session ended (its time so
    /// far, exact; its stack was captured when it began).
    #[serde(default, skip_serializing_if = "is_false")]
    pub in_progress: bool,
}

impl StackSample {
    /// The time the sample stands for: exact plus estimated.
    pub fn time_ns(&self) -> u64 {
        self.total_ns.saturating_add(self.estimated_ns)
    }
}

impl StackFrame {
    /// How a frame is shown: `symbol`, else `module+0xoffset`, else the raw address.
    pub fn display_name(&self) -> String {
        match (&self.symbol, &self.module, self.module_offset) {
            (Some(sym), _, _) => sym.clone(),
            (None, Some(module), Some(off)) => {
                let base = module.rsplit('/').next().unwrap_or(module);
                format!("{base}+{off:#x}")
            }
            _ => format!("{:#x}", self.addr),
        }
    }
}

/// Which collector produced a bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Sampling /proc (unprivileged): on_cpu and runqueue exact, other classes estimated.
    Proc,
    /// BPF programs on scheduler and syscall tracepoints: every class exact.
    Ebpf,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Proc => "proc",
            Backend::Ebpf => "ebpf",
        }
    }

    /// Whether this backend measures every latency class (rather than estimating the
    /// four sleep classes from sampled thread states).
    pub fn latency_classes_exact(self) -> bool {
        matches!(self, Backend::Ebpf)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Constants of the machine the bundle was recorded on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConstants {
    /// `sysconf(_SC_CLK_TCK)`: the unit of utime/stime/starttime in /proc/<pid>/stat.
    pub clock_ticks_per_sec: u64,
    /// `sysconf(_SC_PAGESIZE)`: the unit of rss in /proc/<pid>/stat.
    pub page_size_bytes: u64,
    /// Online CPUs when the session started.
    pub num_cpus: u32,
    /// `uname -r`, if known.
    pub kernel_release: Option<String>,
    /// Machine architecture (`x86_64`, `aarch64`): syscall numbers are per architecture.
    pub arch: String,
    /// How the kernel accounted the threads' time in this session: where `on_cpu` came
    /// from and what the kernel leaves out of it. Absent in bundles written before
    /// kernelkite recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_accounting: Option<TimeAccounting>,
}

/// How the recording kernel accounts a thread's CPU time, read when the session started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeAccounting {
    /// Where every thread's `on_cpu` came from.
    pub on_cpu_source: OnCpuSource,
    /// `CONFIG_PARAVIRT_TIME_ACCOUNTING`: the kernel leaves hypervisor steal out of a
    /// task's runtime (so it is in `steal`, not `on_cpu`, on tp_btf hooks); `None`
    /// when no kernel config was readable.
    pub steal_accounted: Option<bool>,
    /// `CONFIG_IRQ_TIME_ACCOUNTING`: the kernel leaves interrupt service out of a task's
    /// runtime (so it is in `steal`); `None` when no kernel config was readable.
    pub irq_time_accounted: Option<bool>,
    /// `kernel.task_delayacct` (/proc/sys/kernel/task_delayacct) at the session's
    /// start: whether delay accounting (blkio delay, /proc/<pid>/stat field 42) runs;
    /// `None` when the kernel has no such setting.
    pub delay_accounting: Option<bool>,
    /// The kernel config the two `CONFIG_` answers were read from
    /// (`/proc/config.gz`, `/boot/config-<release>`).
    pub kernel_config: Option<String>,
}

/// The source of `on_cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCpuSource {
    /// tp_btf hooks: the move of `task->se.sum_exec_runtime` over each on-CPU interval,
    /// the kernel's accounted runtime (what rusage and schedstat report).
    SumExecRuntime,
    /// Classic tracepoints: the switch-in to switch-out interval by `bpf_ktime_get_ns`,
    /// steal and irq time included (`steal` is 0).
    Clock,
    /// The /proc sampler: `/proc/<pid>/task/<tid>/schedstat` field 1, the kernel's
    /// accounted runtime, up to each thread's last sample.
    Schedstat,
}

impl OnCpuSource {
    pub fn name(self) -> &'static str {
        match self {
            OnCpuSource::SumExecRuntime => "sum_exec_runtime",
            OnCpuSource::Clock => "clock",
            OnCpuSource::Schedstat => "schedstat",
        }
    }

    /// The recording's code for it.
    pub fn code(self) -> u8 {
        match self {
            OnCpuSource::SumExecRuntime => 0,
            OnCpuSource::Clock => 1,
            OnCpuSource::Schedstat => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<OnCpuSource> {
        Some(match code {
            0 => OnCpuSource::SumExecRuntime,
            1 => OnCpuSource::Clock,
            2 => OnCpuSource::Schedstat,
            _ => return None,
        })
    }
}

/// One snapshot of every observed process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frame {
    /// Nanoseconds since the session's start (CLOCK_MONOTONIC).
    pub t_ns: u64,
    /// Processes alive at this instant, sorted by pid.
    pub processes: Vec<ProcessSample>,
    /// Host-wide /proc/net/dev counters (`--network`), sorted by interface.
    pub network: Option<Vec<NetDevCounters>>,
    /// /proc/stat's steal column (the 8th value of the `cpu` line: USER_HZ ticks since
    /// boot, summed over every CPU) when the frame was taken. **Host-wide**: what the
    /// hypervisor took from this machine's vCPUs, not attributable to the profiled
    /// processes. Absent when /proc/stat was unreadable, and in bundles from before it
    /// was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_steal_ticks: Option<u64>,
}

/// One process at one instant: raw cumulative counters from /proc/<pid>/{stat,io}.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSample {
    /// /proc/<pid>/stat field 1.
    pub pid: i32,
    /// /proc/<pid>/stat field 4.
    pub ppid: i32,
    /// /proc/<pid>/stat field 2, without the parentheses (may contain spaces and parens).
    pub comm: InlineStr,
    /// /proc/<pid>/stat field 3: R, S, D, Z, T, t, X, I, ...
    pub state: InlineStr,
    /// /proc/<pid>/stat field 22, in clock ticks since boot: with `pid` it identifies a
    /// process across pid reuse.
    pub start_time_ticks: u64,
    /// /proc/<pid>/stat field 14, clock ticks.
    pub utime_ticks: u64,
    /// /proc/<pid>/stat field 15, clock ticks.
    pub stime_ticks: u64,
    /// /proc/<pid>/stat field 16: CPU of waited-for children, clock ticks.
    pub cutime_ticks: u64,
    /// /proc/<pid>/stat field 17: CPU of waited-for children, clock ticks.
    pub cstime_ticks: u64,
    /// /proc/<pid>/stat field 24, pages.
    pub rss_pages: u64,
    /// /proc/<pid>/stat field 20.
    pub num_threads: u64,
    /// /proc/<pid>/io; `None` when it was not readable (another user's process).
    pub io: Option<IoCounters>,
    /// Per-thread samples (sorted by tid); empty when threads were not sampled.
    pub threads: Vec<ThreadSample>,
}

/// /proc/<pid>/io, bytes and call counts, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IoCounters {
    /// `rchar`: bytes passed to read-like syscalls (includes cache hits and pipes).
    pub rchar_bytes: u64,
    /// `wchar`: bytes passed to write-like syscalls.
    pub wchar_bytes: u64,
    /// `syscr`: read-like syscalls.
    pub read_syscalls: u64,
    /// `syscw`: write-like syscalls.
    pub write_syscalls: u64,
    /// `read_bytes`: bytes fetched from the storage layer.
    pub read_bytes: u64,
    /// `write_bytes`: bytes sent to the storage layer.
    pub write_bytes: u64,
    /// `cancelled_write_bytes`: bytes whose writeback was cancelled (truncated files).
    pub cancelled_write_bytes: u64,
}

/// One thread at one instant.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadSample {
    pub tid: i32,
    /// /proc/<pid>/task/<tid>/comm (thread name).
    pub comm: InlineStr,
    /// /proc/<pid>/task/<tid>/stat field 3.
    pub state: InlineStr,
    /// /proc/<pid>/task/<tid>/schedstat; `None` when unreadable (no CONFIG_SCHEDSTATS).
    pub schedstat: Option<Schedstat>,
    /// First field of /proc/<pid>/task/<tid>/syscall: the syscall number the thread is
    /// blocked in, -1 when it is blocked outside a syscall; `None` when the thread was
    /// running or the file was not readable.
    pub syscall_nr: Option<i64>,
    /// Exact cumulative nanoseconds per latency class inside the session (eBPF backend).
    pub class_ns: Option<ClassTimes>,
}

/// /proc/<pid>/task/<tid>/schedstat, cumulative since the thread started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedstat {
    /// Field 1: time spent on the CPU, ns.
    pub on_cpu_ns: u64,
    /// Field 2: time spent runnable waiting on a run queue, ns.
    pub runqueue_ns: u64,
    /// Field 3: timeslices run on this CPU.
    pub timeslices: u64,
}

/// Nanoseconds per latency class. Serialized as a row in class order (on_cpu, runqueue,
/// io_wait, lock_wait, syscall_blocked, unknown_wait, steal); `steal` is left out of the
/// row when it is 0, so bundles from before it was measured (six columns) read and
/// rewrite unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassTimes {
    pub on_cpu: u64,
    pub runqueue: u64,
    pub io_wait: u64,
    pub lock_wait: u64,
    pub syscall_blocked: u64,
    pub unknown_wait: u64,
    #[serde(default)]
    pub steal: u64,
}

/// Serialize class times as an object keyed by class name (`{"on_cpu": ns, ...}`), the
/// form of derived documents such as `export --format json`; bundles use the row.
pub fn class_times_by_name<S: serde::Serializer>(
    times: &ClassTimes,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(Some(NUM_CLASSES))?;
    for class in LatencyClass::ALL {
        map.serialize_entry(class.name(), &times.get(class))?;
    }
    map.end()
}

impl ClassTimes {
    pub fn from_array(ns: [u64; NUM_CLASSES]) -> ClassTimes {
        ClassTimes {
            on_cpu: ns[0],
            runqueue: ns[1],
            io_wait: ns[2],
            lock_wait: ns[3],
            syscall_blocked: ns[4],
            unknown_wait: ns[5],
            steal: ns[6],
        }
    }

    pub fn to_array(self) -> [u64; NUM_CLASSES] {
        [
            self.on_cpu,
            self.runqueue,
            self.io_wait,
            self.lock_wait,
            self.syscall_blocked,
            self.unknown_wait,
            self.steal,
        ]
    }

    pub fn get(&self, class: LatencyClass) -> u64 {
        self.to_array()[class.id() as usize]
    }

    pub fn add(&mut self, class: LatencyClass, ns: u64) {
        let mut all = self.to_array();
        all[class.id() as usize] = all[class.id() as usize].saturating_add(ns);
        *self = ClassTimes::from_array(all);
    }

    pub fn total_ns(&self) -> u64 {
        self.to_array()
            .iter()
            .fold(0u64, |a, b| a.saturating_add(*b))
    }

    pub fn off_cpu_ns(&self) -> u64 {
        self.total_ns().saturating_sub(self.on_cpu)
    }

    /// Element-wise `self - earlier`, or `None` if any counter went backwards.
    pub fn checked_sub(&self, earlier: &ClassTimes) -> Option<ClassTimes> {
        let (a, b) = (self.to_array(), earlier.to_array());
        let mut out = [0u64; NUM_CLASSES];
        for i in 0..NUM_CLASSES {
            out[i] = a[i].checked_sub(b[i])?;
        }
        Some(ClassTimes::from_array(out))
    }

    pub fn saturating_add(&self, other: &ClassTimes) -> ClassTimes {
        let (a, b) = (self.to_array(), other.to_array());
        let mut out = [0u64; NUM_CLASSES];
        for i in 0..NUM_CLASSES {
            out[i] = a[i].saturating_add(b[i]);
        }
        ClassTimes::from_array(out)
    }
}

/// One /proc/net/dev row (host-wide: not attributable to the profiled processes).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetDevCounters {
    pub interface: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
}

/// The command `kernelkite run` launched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchedCommand {
    pub argv: Vec<String>,
    pub pid: i32,
    /// Exit code when it exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when a signal killed it.
    pub signal: Option<i32>,
    /// The rusage `wait4` returned for the command and for every descendant kernelkite
    /// reaped as their subreaper, summed (max RSS: the largest): exact CPU of the whole
    /// tree, however short-lived. Not `getrusage(RUSAGE_CHILDREN)`, which survives exec
    /// and would add what the process that exec'd kernelkite had reaped before. What
    /// the command's process used before its exec (kernelkite's copy of itself at the
    /// start gate: CPU, faults, switches, as its `getrusage` said right before the exec)
    /// is taken out; its max RSS cannot be (see `max_rss_upper_bound`).
    pub rusage: Option<Rusage>,
    /// eBPF: CPU the command's process had used when tracing began
    /// (`/proc/<pid>/schedstat` field 1 while it waited at the start gate): kernelkite's
    /// own start-up in the child (fork, the wait at the gate), outside the session. Not
    /// in `rusage` either (in bundles written before issue 41 it was, and on_cpu matched `rusage` minus
    /// this); on_cpu exceeds `rusage` by the child's last steps from the gate to its exec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untraced_cpu_ns: Option<u64>,
    /// `rusage.max_rss_kib` is only an upper bound of the program's own peak: it is the
    /// command process's `ru_maxrss`, which the kernel keeps across the exec from
    /// kernelkite's copy of itself before it (the fork of the start gate), and it was no
    /// larger than that copy's. Absent: the figure is the program's own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub max_rss_upper_bound: bool,
}

/// The fields of `struct rusage` kernelkite uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rusage {
    /// `ru_utime`, microseconds.
    pub user_us: u64,
    /// `ru_stime`, microseconds.
    pub system_us: u64,
    /// `ru_maxrss`: the largest resident set of any single process, KiB.
    pub max_rss_kib: u64,
    /// `ru_minflt`.
    pub minor_faults: u64,
    /// `ru_majflt`.
    pub major_faults: u64,
    /// `ru_nvcsw`.
    pub voluntary_switches: u64,
    /// `ru_nivcsw`.
    pub involuntary_switches: u64,
}

impl Rusage {
    /// Add a reaped process's rusage (as `wait4` gives it) to a tree's: times, faults and
    /// switches add up, the largest resident set is the larger one.
    pub fn add_reaped(&mut self, other: &Rusage) {
        self.user_us = self.user_us.saturating_add(other.user_us);
        self.system_us = self.system_us.saturating_add(other.system_us);
        self.max_rss_kib = self.max_rss_kib.max(other.max_rss_kib);
        self.minor_faults = self.minor_faults.saturating_add(other.minor_faults);
        self.major_faults = self.major_faults.saturating_add(other.major_faults);
        self.voluntary_switches = self
            .voluntary_switches
            .saturating_add(other.voluntary_switches);
        self.involuntary_switches = self
            .involuntary_switches
            .saturating_add(other.involuntary_switches);
    }
}

/// Whether frames were dropped because the session hit `max_frames` (`--max-frames`,
/// or the frames kept when the `--max-frames-mb` byte budget filled first). When the
/// cap is hit the sampler keeps replacing the last frame, so final counters stay exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameCap {
    pub max_frames: u64,
    pub frames_dropped: u64,
}

/// A process lifecycle event from the kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleEvent {
    /// Nanoseconds since the session's start.
    pub t_ns: u64,
    pub kind: LifecycleKind,
    /// Process (tgid) the event is about.
    pub pid: i32,
    /// Thread the event is about (equals `pid` for the main thread).
    pub tid: i32,
    /// Parent process (fork: the forking process; for a new thread, `pid` itself).
    pub ppid: i32,
    /// Command name after the event.
    pub comm: String,
    /// Exit: the exit code (`exit_code >> 8`) of a normal exit.
    pub exit_code: Option<i32>,
    /// Exit: the thread's exact latency-class times over its whole traced life.
    pub class_ns: Option<ClassTimes>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleKind {
    Fork,
    Exec,
    Exit,
}

/// Latency histogram of one syscall in one process. Buckets follow
/// `kernelkite_common::hist`; percentiles are derived at analysis time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyscallHistogram {
    pub pid: i32,
    /// Syscall number on `host.arch`.
    pub nr: u32,
    /// Its name on `host.arch` (from the `syscalls` crate when recorded).
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Non-empty buckets as `[bucket_index, count]`, ascending.
    pub buckets: Vec<(u32, u64)>,
    /// Calls already running when tracing started, which returned inside the session:
    /// their time is only the part inside the session. Kept apart from the calls that
    /// started inside it. Absent (false) in bundles written before.
    #[serde(default, skip_serializing_if = "is_false")]
    pub before_start: bool,
}

/// One syscall slower than the threshold, as streamed over the ring buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowSyscall {
    /// Start, nanoseconds since the session's start.
    pub t_ns: u64,
    pub pid: i32,
    pub tid: i32,
    pub nr: u32,
    pub name: String,
    pub duration_ns: u64,
    pub ret: i64,
    /// Index into the bundle's [`StackProfile::stacks`]: the caller's user stack
    /// (captured with `--stacks`; absent from the file otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_stack: Option<u32>,
}

/// Serialize a struct as a row: a JSON array of its fields in declaration order (the
/// order the derived `Deserialize` reads a sequence in). The destructuring makes a field
/// added to the struct but not here a compile error.
macro_rules! serialize_as_row {
    ($ty:ident { $($field:ident),+ $(,)? }) => {
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeTuple;
                let $ty { $($field),+ } = self;
                let mut row = serializer.serialize_tuple([$(stringify!($field)),+].len())?;
                $( row.serialize_element($field)?; )+
                row.end()
            }
        }
    };
}

serialize_as_row!(ProcessSample {
    pid,
    ppid,
    comm,
    state,
    start_time_ticks,
    utime_ticks,
    stime_ticks,
    cutime_ticks,
    cstime_ticks,
    rss_pages,
    num_threads,
    io,
    threads,
});
serialize_as_row!(IoCounters {
    rchar_bytes,
    wchar_bytes,
    read_syscalls,
    write_syscalls,
    read_bytes,
    write_bytes,
    cancelled_write_bytes,
});
serialize_as_row!(ThreadSample {
    tid,
    comm,
    state,
    schedstat,
    syscall_nr,
    class_ns,
});
serialize_as_row!(Schedstat {
    on_cpu_ns,
    runqueue_ns,
    timeslices,
});
impl Serialize for ClassTimes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let all = self.to_array();
        // The six-column row of bundles without steal (see the type's doc).
        let columns = if self.steal == 0 {
            NUM_CLASSES - 1
        } else {
            NUM_CLASSES
        };
        let mut row = serializer.serialize_tuple(columns)?;
        for v in &all[..columns] {
            row.serialize_element(v)?;
        }
        row.end()
    }
}
serialize_as_row!(NetDevCounters {
    interface,
    rx_bytes,
    rx_packets,
    tx_bytes,
    tx_packets,
});

impl Bundle {
    /// An empty bundle for a new session.
    pub fn new(backend: Backend, host: HostConstants, interval_ms: u64) -> Bundle {
        Bundle {
            format: BUNDLE_FORMAT.to_string(),
            format_version: BUNDLE_FORMAT_VERSION,
            backend,
            label: None,
            host,
            interval_ms,
            root_pids: Vec::new(),
            launched: None,
            frames: Vec::new(),
            frame_cap: FrameCap::default(),
            events_lost: None,
            lifecycle: Vec::new(),
            syscalls: Vec::new(),
            slow_syscalls: Vec::new(),
            replayed_from: None,
            stacks: None,
            syscalls_in_progress: Vec::new(),
            events_lost_by_cause: BTreeMap::new(),
            wakers: None,
            wakeups: None,
            command_lines: Vec::new(),
            thread_exits: Vec::new(),
            process_identities: Vec::new(),
            cgroup_samples: Vec::new(),
            traced_cgroup: None,
        }
    }
}

#[cfg(test)]
mod lost_tests {
    use super::*;

    #[test]
    fn lost_events_are_named_and_each_caveat_names_only_what_they_affect() {
        let none = BTreeMap::new();
        assert_eq!(lost_text(3, &none), "3");
        assert!(lost_affects(&none).is_empty());
        let stacks: BTreeMap<String, u64> = [("stack_captures".to_string(), 1)].into();
        assert_eq!(lost_text(1, &stacks), "1 (stack captures 1)");
        assert_eq!(lost_affects(&stacks), vec!["the stacks"]);
        let both: BTreeMap<String, u64> = [
            ("slow_call_records".to_string(), 2),
            ("lifecycle_records".to_string(), 5),
            ("missed_exits".to_string(), 1),
        ]
        .into();
        assert_eq!(
            lost_text(8, &both),
            "8 (lifecycle records 5, missed exits 1, slow-call records 2)"
        );
        assert_eq!(
            lost_affects(&both),
            vec![
                "lifecycle events (fork, exec, exit)",
                "the slow syscalls",
                "lifecycle events (exits)"
            ]
        );
    }
}
