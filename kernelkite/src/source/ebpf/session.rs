//! One eBPF tracing session: point the loaded programs at the target threads, take
//! snapshots of their in-kernel counters as frames, and fold ring-buffer records into
//! lifecycle events. The result is an ordinary [`Bundle`] with `backend: ebpf`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use kernelkite_common::bpf::{
    exit_flags, lost, map_names, record_flags, record_kind, run_state, sys_flags, ThreadState,
    COPIED_STACK, NO_PENDING, NO_RUNTIME, NO_STACK, NO_SYSCALL, SYSCALL_BEFORE_START,
};
use kernelkite_common::LatencyClass;

use super::histograms::{KernelHistograms, SyscallHistograms};
use super::loader::{
    self, MapAccessError, ProbeError, ProbeOptions, Probes, StackOptions, TargetCgroup,
};
use super::records::{argv_bytes, comm_string, decode, stack_bytes, Record};
use super::stacks::{InProgressWait, StackCollector, UserStack};
use super::syscall_table;
use super::target_bits::TargetBits;
use super::thread_table::{InsertError, ThreadTable};
use super::tracked::{ThreadKey, Tracked};
use super::wakers::{waker_kind_name, WakerReader};
use crate::collect::RecordedFold;
use crate::model::frame_keeper::MAX_EVENTS;
use crate::model::syscalls::sample_class;
use crate::model::{
    Backend, Bundle, ClassTimes, CommandLine, Frame, HostConstants, LifecycleEvent, LifecycleKind,
    OnCpuSource, SlowSyscall, SyscallHistogram, SyscallInProgress, ThreadSample, TracedCgroup,
    Wakeup, WakeupStream, MAX_ARGV_BYTES, NEW_TASK_CLASS,
};
use crate::recording::{ClockAnchor, Record as KeptRecord, RecordRef, RecordSink, SessionStart};
use crate::source::cgroup_counters::CgroupCounters;
use crate::source::cgroups::{self, CgroupDir};
use crate::source::host::current_host;
use crate::source::procfs::{IdentityReader, Sampler, SamplerOptions, Scope, PROC_ROOT};
use kernelkite_common::wake::NEW_TASK;

/// What to trace.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    pub pids: Vec<i32>,
    pub follow: bool,
    pub min_latency_ns: u64,
    pub interval: Duration,
    pub max_frames: u64,
    /// Memory the kept frames may take (`--max-frames-mb`, in bytes).
    pub max_frame_bytes: u64,
    /// Entries of the kernel's thread table (`--max-threads`); `None`: 65,536.
    pub max_threads: Option<u32>,
    pub network: bool,
    pub label: Option<String>,
    /// Capture stacks (`--stacks`).
    pub stacks: Option<StackOptions>,
    /// Record every wakeup (`--critical-path`).
    pub critical_path: bool,
    /// `--cgroup`, `--container`: trace every process of this cgroup v2 subtree, those
    /// there at attach and those that fork or exec there later (`pids` is then ignored).
    pub cgroup: Option<CgroupDir>,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    #[error("{tid} is a thread of process {tgid}: trace --pid {tgid} (every thread is traced)")]
    ThreadNotProcess { tid: i32, tgid: i32 },
    #[error("pid {0} is a kernel thread: kernelkite traces user-space processes")]
    KernelThread(i32),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("BPF map {map}: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: MapAccessError,
    },
    #[error("reading /proc: {0}")]
    Proc(#[from] std::io::Error),
}

/// How many processes' last known parents a session keeps before pruning them to the
/// processes it still tracks.
const PARENTS_KEPT: usize = 100_000;

/// A running session. Dropping it detaches every program.
pub struct Session {
    /// The attached programs; `None` once detached (at the end, before the final read).
    probes: Option<Probes>,
    /// The `EVENTS` ring buffer (`None` only while [`Session::drain`] reads it).
    ring: Option<RingBuf<MapData>>,
    /// The processes whose current program's command line is known (the live ones:
    /// the others are read from /proc at the next snapshot).
    argv_known: BTreeSet<i32>,
    /// Each process's cgroup and namespace pids, read once per program.
    identities: IdentityReader,
    /// `--cgroup`: the traced cgroup's counters, read at every snapshot.
    cgroup_counters: Option<CgroupCounters>,
    hooks: Vec<String>,
    attach_ms: f64,
    /// Where the attached programs take on_cpu from (the bundle's time accounting).
    on_cpu_source: OnCpuSource,
    /// The traced threads and processes, as far as frames need to remember them.
    tracked: Tracked,
    threads: ThreadTable,
    /// The syscall latency histograms: the kernel map's, and exited processes'.
    hists: SyscallHistograms,
    lost: PerCpuArray<MapData, u64>,
    /// The TARGETS bitmap, mapped: bits set and cleared atomically beside the programs'.
    targets: TargetBits,
    sampler: Sampler,
    options: TraceOptions,
    start_mono_ns: u64,
    /// Everything the session keeps, folded into its bundle as it comes (and recorded,
    /// with `--record`). Replaced at attach, when the session's clock starts.
    kept: RecordedFold,
    /// Where the records go once the session starts (`--record`), until attach.
    sink_at_attach: Option<Box<dyn RecordSink>>,
    undecodable_records: u64,
    /// What userspace could not keep, counted in `events_lost` with the kernel's counters.
    dropped: Dropped,
    /// The last known parent of every traced process (from its fork record, then from
    /// each snapshot): the BPF exit record carries no parent, and an exit event with
    /// ppid 0 would read as an orphan. Pruned to the tracked processes past
    /// [`PARENTS_KEPT`] entries.
    parent_of: BTreeMap<u32, i32>,
    /// `--stacks`: the captured stacks, resolved at every snapshot.
    stacks: Option<StackCollector>,
    /// The syscalls in progress at the latest snapshot (the threads inside one).
    in_progress: Vec<SyscallInProgress>,
    /// `--stacks`: (index into `in_progress`, pid, user stack id) of those with a stack.
    /// (call index, pid, tid, the thread state's user stack id, or the stack read from
    /// /proc for a call blocked since before attach).
    in_progress_stack_ids: Vec<(usize, u32, u32, i32, Option<UserStack>)>,
    /// `--stacks`: (arrival index among the slow calls, pid, user stack id) of slow
    /// calls with a stack.
    slow_stack_ids: Vec<(usize, u32, UserStack)>,
    /// What ended the traced threads' sleeps.
    wakers: WakerReader,
    /// `--critical-path`: the wakeups so far (at most [`MAX_WAKEUPS`]), and the kernel's
    /// count of those it did not send.
    wakeups: Option<(Vec<Wakeup>, PerCpuArray<MapData, u64>)>,
    /// The traced threads' entries and the clock at the final snapshot: the sleeps
    /// still open then are the `not_woken` wakers.
    final_states: (Vec<(u32, ThreadState)>, u64),
    /// Live views: count a thread still waiting for its first event (INITIAL) in the
    /// class /proc showed at attach, as the final frame does, instead of not at all.
    count_initial_in_frames: bool,
    /// [`Probes::recursion_misses`] read just before the programs were detached.
    recursion_misses_at_detach: u64,
    /// CLOCK_MONOTONIC ns of the previous snapshot, taken before its /proc reads (0:
    /// none yet): a thread asleep since before it did not move its /proc counters.
    proc_read_ns: u64,
    /// The machine's constants when the session's clock started.
    host: HostConstants,
    /// Session time of the last histogram snapshot sent to the recording.
    last_sink_histograms_ns: u64,
}

/// What a session dropped on its side, each counted in `events_lost`.
#[derive(Clone, Copy, Debug, Default)]
struct Dropped {
    /// Threads found at attach that did not fit in the THREADS map (`--max-threads`).
    untracked_threads: u64,
    /// Lifecycle events and slow syscalls past [`MAX_EVENTS`].
    events: u64,
    /// `--critical-path`: wakeups past [`MAX_WAKEUPS`].
    wakeups: u64,
}

/// `--critical-path`: wakeups a session keeps (about 100 bytes each in memory, so at
/// most about 100 MiB); the rest are counted as lost. A `cargo build` of a small crate
/// makes about 30,000 (docs/PERFORMANCE.md).
pub const MAX_WAKEUPS: usize = 1_000_000;

/// How often (session time) a recorded session also records its histograms and lost
/// event count: they cost a walk of the kernel maps, and only a killed session's
/// replay needs the intermediate ones.
const SINK_HISTOGRAM_INTERVAL_NS: u64 = 1_000_000_000;

/// Every pid must be a live user-space process (not a thread id, not a kernel thread).
pub(crate) fn check_pids_exist(pids: &[i32]) -> Result<(), SessionError> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    for &pid in pids {
        let dir = Path::new(PROC_ROOT).join(pid.to_string());
        let status = match std::fs::read_to_string(dir.join("status")) {
            Ok(s) if pid > 0 => s,
            _ => return Err(SessionError::NoSuchProcess(pid)),
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<i32>().ok())
        };
        if let Some(tgid) = field("Tgid:") {
            if tgid != pid {
                return Err(SessionError::ThreadNotProcess { tid: pid, tgid });
            }
        }
        // /proc/<pid>/stat field 9 is the task's flags.
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let flags = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(6))
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
        if flags & PF_KTHREAD != 0 {
            return Err(SessionError::KernelThread(pid));
        }
    }
    Ok(())
}

/// The user-space processes of the cgroup subtree at `dir`, but kernelkite.
fn cgroup_processes(dir: &Path) -> Vec<i32> {
    let me = std::process::id() as i32;
    (cgroups::processes_in(dir).into_iter())
        .filter(|&pid| pid != me && check_pids_exist(&[pid]).is_ok())
        .collect()
}

/// CLOCK_MONOTONIC in ns: the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl SessionError {
    fn map(map: &'static str, source: MapAccessError) -> SessionError {
        SessionError::Map { map, source }
    }
}

fn take_map<T>(probes: &mut Probes, name: &'static str) -> Result<T, SessionError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = probes
        .ebpf
        .take_map(name)
        .ok_or(SessionError::map(name, MapAccessError::Missing))?;
    T::try_from(map).map_err(|e| SessionError::map(name, e.into()))
}

impl Session {
    /// Check the targets exist, load and attach the programs, and start tracking every
    /// thread of the targets (with `follow`, of their existing descendants too),
    /// sending everything the session keeps to `sink` as well, if given.
    pub fn start_recorded(
        options: TraceOptions,
        sink: Option<Box<dyn RecordSink>>,
    ) -> Result<Session, SessionError> {
        let mut pids = options.pids.clone();
        if options.cgroup.is_none() {
            check_pids_exist(&pids)?;
        }
        let cgroup_dir = options.cgroup.as_ref().map(|c| c.dir.clone());
        let mut session = Session::load(options)?;
        if let Some(dir) = cgroup_dir {
            // Listed once the hooks are live: a process forked since is caught by the
            // fork hook (its parent is in the cgroup), one that leaves is not missed.
            pids = cgroup_processes(&dir);
        }
        session.sink_at_attach = sink;
        session.attach_to(&pids)?;
        Ok(session)
    }

    /// Send everything the session keeps from its start on (call before attaching) to
    /// `sink` as well.
    pub fn record_to(&mut self, sink: Box<dyn RecordSink>) {
        self.sink_at_attach = Some(sink);
    }

    /// Load and attach the programs with no target yet (see [`Session::attach_to`]).
    pub fn load(mut options: TraceOptions) -> Result<Session, SessionError> {
        options.pids.clear();
        let mut probes = loader::load(ProbeOptions {
            follow: options.follow,
            min_latency_ns: options.min_latency_ns,
            stacks: options.stacks,
            max_threads: options.max_threads,
            critical_path: options.critical_path,
            cgroup: options.cgroup.as_ref().map(|c| TargetCgroup {
                id: c.id,
                level: c.level,
            }),
        })?;
        let stacks = match options.stacks {
            Some(stack_options) => Some(StackCollector::new(
                stack_options,
                take_map(&mut probes, map_names::STACK_TIMES)?,
                take_map(&mut probes, map_names::USER_STACKS)?,
                take_map(&mut probes, map_names::KERNEL_STACKS)?,
            )),
            None => None,
        };
        // Attribution needs the v2 hierarchy; without it, say so once.
        let (identities, note) = IdentityReader::new();
        probes.notes.extend(note);
        let ring = take_map(&mut probes, map_names::EVENTS)?;
        let threads = ThreadTable::map(
            take_map(&mut probes, map_names::THREAD_HOLDERS)?,
            take_map(&mut probes, map_names::THREAD_SLOTS)?,
            take_map(&mut probes, map_names::THREADS)?,
        )
        .map_err(|e| SessionError::map(map_names::THREAD_HOLDERS, MapAccessError::Mmap(e)))?;
        let hists = KernelHistograms::map(
            take_map(&mut probes, map_names::HIST_HOLDERS)?,
            take_map(&mut probes, map_names::HIST_SLOTS)?,
            take_map(&mut probes, map_names::SYSCALL_HISTS)?,
        )
        .map_err(|e| SessionError::map(map_names::HIST_HOLDERS, MapAccessError::Mmap(e)))?;
        let lost = take_map(&mut probes, map_names::LOST)?;
        let targets: Array<MapData, u64> = take_map(&mut probes, map_names::TARGETS)?;
        let targets = TargetBits::map(targets)
            .map_err(|e| SessionError::map(map_names::TARGETS, MapAccessError::Mmap(e)))?;
        let wakers = WakerReader::map(
            take_map(&mut probes, map_names::WAKER_HOLDERS)?,
            take_map(&mut probes, map_names::WAKER_SLOTS)?,
            take_map(&mut probes, map_names::WAKERS)?,
            take_map(&mut probes, map_names::WAKERS_LOST)?,
        )
        .map_err(|e| SessionError::map(map_names::WAKER_HOLDERS, MapAccessError::Mmap(e)))?;
        let wakeups = if options.critical_path {
            Some((
                Vec::new(),
                take_map(&mut probes, map_names::CRITICAL_PATH_LOST)?,
            ))
        } else {
            None
        };
        let sampler = Sampler::new(
            Path::new(PROC_ROOT),
            SamplerOptions {
                threads: true,
                network: options.network,
            },
        )?;
        let host = current_host(probes.on_cpu_source);
        Ok(Session {
            hooks: probes.hooks.clone(),
            attach_ms: probes.attach_ms,
            on_cpu_source: probes.on_cpu_source,
            probes: Some(probes),
            ring: Some(ring),
            argv_known: BTreeSet::new(),
            identities,
            cgroup_counters: (options.cgroup.as_ref()).map(|c| {
                let mountinfo = std::fs::read_to_string("/proc/self/mountinfo");
                CgroupCounters::new(&c.dir, &mountinfo.unwrap_or_default())
            }),
            targets,
            tracked: Tracked::default(),
            threads,
            hists: SyscallHistograms::new(hists),
            lost,
            sampler,
            kept: RecordedFold::new(
                session_start(&options, &host, ClockAnchor::read()),
                options.max_frame_bytes,
                None,
            ),
            sink_at_attach: None,
            host,
            options,
            start_mono_ns: monotonic_ns(),
            undecodable_records: 0,
            dropped: Dropped::default(),
            parent_of: BTreeMap::new(),
            stacks,
            wakeups,
            slow_stack_ids: Vec::new(),
            in_progress: Vec::new(),
            in_progress_stack_ids: Vec::new(),
            wakers,
            final_states: (Vec::new(), 0),
            count_initial_in_frames: false,
            recursion_misses_at_detach: 0,
            proc_read_ns: 0,
            last_sink_histograms_ns: 0,
        })
    }

    /// Start tracking every thread of `pids` (with `follow`, of their existing
    /// descendants too). The session's clock starts here.
    pub fn attach_to(&mut self, pids: &[i32]) -> Result<(), SessionError> {
        self.attach(pids, false)
    }

    /// [`Session::attach_to`] for a process still in kernelkite's start gate: its
    /// syscalls count only from its exec of the command on.
    pub fn attach_to_gated(&mut self, pid: i32) -> Result<(), SessionError> {
        self.attach(&[pid], true)
    }

    /// `gated`: the one pid is `run`'s gate process (see [`Session::attach_to_gated`]).
    fn attach(&mut self, pids: &[i32], gated: bool) -> Result<(), SessionError> {
        if self.options.cgroup.is_none() {
            check_pids_exist(pids)?;
        }
        self.options.pids = pids.to_vec();
        let clock = ClockAnchor::read();
        self.start_mono_ns = clock.monotonic_ns;
        self.host = current_host(self.on_cpu_source);
        self.kept = RecordedFold::new(
            session_start(&self.options, &self.host, clock),
            self.options.max_frame_bytes,
            self.sink_at_attach.take(),
        );
        if let Some(c) = &self.options.cgroup {
            let traced = TracedCgroup {
                path: c.path.clone(),
                id: c.id,
            };
            self.keep_event(KeptRecord::TracedCgroup(traced));
        }
        if gated {
            // Still kernelkite until its exec: its command line is the exec's.
            self.argv_known.insert(pids[0]);
            let mut gate: Array<&mut MapData, u32> = self
                .probes
                .as_mut()
                .and_then(|p| p.ebpf.map_mut(map_names::GATE))
                .ok_or(SessionError::map(map_names::GATE, MapAccessError::Missing))?
                .try_into()
                .map_err(|e: aya::maps::MapError| SessionError::map(map_names::GATE, e.into()))?;
            gate.set(0, pids[0] as u32, 0)
                .map_err(|e| SessionError::map(map_names::GATE, e.into()))?;
        }
        self.add_initial_targets()?;
        // The syscall hooks go live only now: no note of theirs predates a bit set
        // above, and userspace sets no bit after this (kernelkite-ebpf's `maps`).
        if let Some(probes) = self.probes.as_mut() {
            probes.attach_deferred()?;
            self.attach_ms = probes.attach_ms;
            self.hooks = probes.hooks.clone();
        }
        // Before the first frame: a thread gone already is never shown as a live row.
        self.retire_exited_before_attach();
        let mut first = self.snapshot_frame(false)?;
        if gated {
            // Before its exec the gated process is kernelkite's copy of itself: its
            // resident set is kernelkite's memory, and the command has none of its own
            // yet (`run -- true` showed kernelkite's 9 MiB as the tree's peak).
            for p in first.processes.iter_mut().filter(|p| p.pid == pids[0]) {
                p.rss_pages = 0;
            }
        }
        self.keep_frame(first);
        Ok(())
    }

    /// Threads taken from /proc alive that had exited when their target bit was set
    /// (exiting during the attach, between the /proc read and the map insert) never
    /// reach the exit hook: end them here, or the session waits for an exit that never
    /// comes (`trace --pid` of a process exiting as it started hung until Ctrl-C). A
    /// thread the hooks have seen is no longer INITIAL, and its exit is recorded by the
    /// hook. Neither its exit code nor its time before the exit is known. A process left
    /// with no thread loses its target bit: its pid is free for a process we do not trace.
    fn retire_exited_before_attach(&mut self) {
        let t_ns = self.t_ns(monotonic_ns());
        let entries = self.threads.read_all();
        let mut retired_tgids = BTreeSet::new();
        for &(tid, ref state) in &entries {
            if state.run_state != run_state::INITIAL || thread_alive(state.tgid, tid) {
                continue;
            }
            // Read again just before the delete: the fork hook may have replaced a stale
            // entry with a new thread's under the same tid since the map was read.
            let still = self.threads.get(tid);
            if still
                .is_none_or(|s| s.run_state != run_state::INITIAL || s.start_ns != state.start_ns)
            {
                continue;
            }
            self.keep_exit_from_map(t_ns, tid, state, None, ClassTimes::default());
            self.threads.remove(tid);
            retired_tgids.insert(state.tgid);
        }
        let left: BTreeSet<u32> = self
            .threads
            .read_all()
            .into_iter()
            .map(|(_, s)| s.tgid)
            .collect();
        for tgid in retired_tgids.difference(&left) {
            let _ = self.clear_target_bit(*tgid);
        }
    }

    /// The exit of a thread known only from its map entry (no exit record: it exited
    /// before attach, or its record was lost), once.
    fn keep_exit_from_map(
        &mut self,
        t_ns: u64,
        tid: u32,
        state: &ThreadState,
        exit_code: Option<i32>,
        class_ns: ClassTimes,
    ) {
        if self.tracked.exit_seen((tid, state.start_ns)) {
            self.keep_event(KeptRecord::Lifecycle(LifecycleEvent {
                t_ns,
                kind: LifecycleKind::Exit,
                pid: state.tgid as i32,
                tid: tid as i32,
                ppid: self.parent_of.get(&state.tgid).copied().unwrap_or(0),
                comm: String::new(),
                exit_code,
                class_ns: Some(class_ns),
            }));
        }
    }

    /// Keep a frame (under the frame cap), and record it.
    fn keep_frame(&mut self, frame: Frame) {
        self.kept.push(KeptRecord::Frame(frame));
    }

    /// Keep an event (lifecycle, slow call, command line) under the event cap.
    fn keep_event(&mut self, record: KeptRecord) {
        if !self.kept.push(record) {
            self.dropped.events += 1;
        }
    }

    /// Keep the histograms, the lost event count and the calls in progress as they
    /// are at `t_ns` (each record replaces the one before).
    fn keep_histograms(&mut self, t_ns: u64) {
        let histograms = self.syscall_histograms();
        let count = self.events_lost();
        let by_cause = self.events_lost_by_cause();
        let calls = self.in_progress.clone();
        self.kept.push(KeptRecord::Histograms { t_ns, histograms });
        self.kept.push(KeptRecord::EventsLost {
            t_ns,
            count,
            by_cause,
        });
        self.kept.push(KeptRecord::InProgress { t_ns, calls });
        self.last_sink_histograms_ns = t_ns;
    }

    /// Stop tracing kernelkite itself (system-wide views, where it descends from pid 1
    /// like everything else): otherwise each of its own /proc and map reads runs the
    /// syscall programs, charged to it, and it shows as a process it mostly measures
    /// itself in. Its own CPU is reported apart (`top`'s status line).
    pub fn untrack_self(&mut self) -> Result<(), SessionError> {
        let me = std::process::id();
        self.clear_target_bit(me)?;
        for (tid, state) in self.threads.read_all() {
            if state.tgid == me {
                self.threads.remove(tid);
            }
        }
        self.hists.forget_process(me);
        self.tracked.forget_process(me);
        Ok(())
    }

    /// Processes with a live traced thread (for passing on signals).
    pub fn live_pids(&self) -> Vec<i32> {
        let set: BTreeSet<i32> = self
            .threads
            .read_all()
            .into_iter()
            .filter(|(_, s)| s.run_state != run_state::EXITED)
            .map(|(_, s)| s.tgid as i32)
            .collect();
        set.into_iter().collect()
    }

    /// Hooks attached, for status lines and doctor.
    pub fn hooks(&self) -> &[String] {
        &self.hooks
    }

    /// The machine's constants as the session records them (with its time accounting).
    pub fn host(&self) -> &HostConstants {
        &self.host
    }

    /// What the user should know about how the hooks attached (the classic-tracepoint
    /// fallback, tracefs mounted by kernelkite), one line each.
    pub fn notes(&self) -> &[String] {
        self.probes.as_ref().map_or(&[], |p| &p.notes)
    }

    /// Milliseconds from starting the load to every hook attached.
    pub fn attach_ms(&self) -> f64 {
        self.attach_ms
    }

    /// The ring buffer's file descriptor, for the caller to poll: readable when records
    /// wait for [`Session::drain`]. It stays open as long as the session.
    pub fn ring_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.ring.as_ref().map_or(-1, |r| r.as_raw_fd())
    }

    /// Fold every record waiting in the ring buffer into the session. Returns whether
    /// one was a thread's exit.
    pub fn drain(&mut self) -> bool {
        // Out of `self` while its records are folded in (each borrows the ring).
        let Some(mut ring) = self.ring.take() else {
            return false;
        };
        let mut exits = false;
        while let Some(item) = ring.next() {
            exits |= self.handle_record(&item);
        }
        self.ring = Some(ring);
        exits
    }

    fn scope_pids(&self) -> Vec<i32> {
        self.options.pids.clone()
    }

    /// Insert every existing thread as INITIAL (classified from its /proc state until
    /// its first event), then set the target bits. Repeat once to catch threads created
    /// between the /proc read and the bits being set (later ones go through the fork hook).
    fn add_initial_targets(&mut self) -> Result<(), SessionError> {
        let roots = self.scope_pids();
        // Threads the map had no room for, counted once over both passes.
        let mut untracked = BTreeSet::new();
        for _ in 0..2 {
            let frame = self.sampler.sample(Scope::Subtrees(&roots), 0)?;
            let mut tgids = BTreeSet::new();
            for p in &frame.processes {
                // A cgroup's processes are its own; their children elsewhere are not.
                let only_roots = !self.options.follow || self.options.cgroup.is_some();
                if only_roots && !roots.contains(&p.pid) {
                    continue;
                }
                // The retired threads' exit events need it before the first snapshot.
                self.parent_of.insert(p.pid as u32, p.ppid);
                for t in &p.threads {
                    // Exited before attach (a zombie leader whose other threads run on):
                    // not a thread of the session, and no exit hook will run for it.
                    if matches!(&*t.state, "Z" | "X" | "x") {
                        continue;
                    }
                    // Its target bit only with a thread that has not exited.
                    tgids.insert(p.pid as u32);
                    let class = initial_class(&t.state, t.syscall_nr);
                    // A thread asleep in a syscall: the call is in progress since
                    // before attach; its return is counted apart, with the part of its
                    // time inside the session (sys_flags::BEFORE_START).
                    let asleep_in = t
                        .syscall_nr
                        .filter(|&nr| nr >= 0 && class != LatencyClass::OnCpu)
                        .map(|nr| nr as u32);
                    let state = ThreadState {
                        tgid: p.pid as u32,
                        run_state: run_state::INITIAL,
                        since_ns: self.start_mono_ns,
                        sleep_class: class as u32,
                        sys_nr: asleep_in.unwrap_or(NO_SYSCALL),
                        sys_enter_ns: self.start_mono_ns,
                        sys_is_lock: (class == LatencyClass::LockWait) as u32,
                        sys_flags: if asleep_in.is_some() {
                            sys_flags::BEFORE_START
                        } else {
                            0
                        },
                        start_ns: self.start_mono_ns,
                        ..Default::default()
                    };
                    // Never over an entry the fork hook already made.
                    match self.threads.insert_new(t.tid as u32, state) {
                        Ok(()) | Err(InsertError::Exists) => {}
                        Err(InsertError::Full) => {
                            untracked.insert(t.tid);
                        }
                    }
                }
            }
            self.set_target_bits(&tgids)?;
        }
        self.dropped.untracked_threads += untracked.len() as u64;
        Ok(())
    }

    fn clear_target_bit(&mut self, tgid: u32) -> Result<(), SessionError> {
        self.targets.clear(tgid);
        Ok(())
    }

    fn set_target_bits(&mut self, tgids: &BTreeSet<u32>) -> Result<(), SessionError> {
        for &tgid in tgids {
            self.targets.set(tgid);
        }
        Ok(())
    }

    /// Read one thread's entry consistently. The BPF programs update entries in place
    /// while we copy them, so a copy can be torn; a consistent copy satisfies
    /// `sum(class_ns) == since_ns - start_ns` (see `close_interval`). Retry a few times.
    fn read_thread(&self, tid: u32, first: ThreadState) -> ThreadState {
        let mut state = first;
        for _ in 0..4 {
            if consistent(&state) {
                break;
            }
            match self.threads.get(tid) {
                Some(s) => state = s,
                None => break,
            }
        }
        state
    }

    fn t_ns(&self, mono_ns: u64) -> u64 {
        mono_ns.saturating_sub(self.start_mono_ns)
    }

    /// Fold one ring-buffer record into the session. Returns true for a thread's exit.
    fn handle_record(&mut self, bytes: &[u8]) -> bool {
        let record = match decode(bytes) {
            Ok(r) => r,
            Err(_) => {
                self.undecodable_records += 1;
                return false;
            }
        };
        match record {
            Record::Lifecycle(r) => {
                let kind = match r.kind {
                    record_kind::FORK => LifecycleKind::Fork,
                    record_kind::EXEC => LifecycleKind::Exec,
                    _ => LifecycleKind::Exit,
                };
                let exit = kind == LifecycleKind::Exit;
                if exit {
                    self.tracked.exit_seen((r.tid, r.start_ns));
                }
                if kind == LifecycleKind::Exec {
                    // A new program: its ARGV record follows, or the next snapshot reads
                    // /proc.
                    self.argv_known.remove(&(r.tgid as i32));
                    // Its cgroup now (a runtime moves a container's first process in
                    // before the exec), while it surely lives: a short one is gone by
                    // the next snapshot.
                    self.identities.exec(r.tgid as i32);
                    self.read_identity(r.tgid as i32, self.t_ns(r.ts_ns));
                    if let Some(stacks) = &mut self.stacks {
                        stacks.on_exec(r.tgid, r.ts_ns);
                    }
                }
                if kind == LifecycleKind::Fork && r.tgid != r.parent_tgid {
                    self.parent_of.insert(r.tgid, r.parent_tgid as i32);
                }
                let ppid = match r.parent_tgid {
                    0 => self.parent_of.get(&r.tgid).copied().unwrap_or(0),
                    parent => parent as i32,
                };
                self.keep_event(KeptRecord::Lifecycle(LifecycleEvent {
                    t_ns: self.t_ns(r.ts_ns),
                    kind,
                    pid: r.tgid as i32,
                    tid: r.tid as i32,
                    ppid,
                    comm: comm_string(&r.comm),
                    exit_code: (exit && r.flags & record_flags::EXIT_CODE_UNKNOWN == 0)
                        .then_some((r.exit_code >> 8) as i32 & 0xff),
                    class_ns: exit.then_some(ClassTimes::from_array(r.class_ns)),
                }));
                exit
            }
            Record::SlowSyscall(r) => {
                let index = self.kept.fold().slow_syscalls();
                let room = index < MAX_EVENTS;
                if let Some(stacks) = self.stacks.as_mut().filter(|_| room) {
                    let stack = match r.user_stack_id {
                        COPIED_STACK => stacks.take_slow_copy(r.tid, r.start_ns),
                        NO_STACK => None,
                        id => Some(UserStack::Walked(id)),
                    };
                    if let Some(stack) = stack {
                        stacks.want_user_stack(r.tgid, stack);
                        self.slow_stack_ids.push((index, r.tgid, stack));
                    }
                }
                let slow = SlowSyscall {
                    t_ns: self.t_ns(r.start_ns),
                    pid: r.tgid as i32,
                    tid: r.tid as i32,
                    nr: r.nr,
                    name: syscall_table::name(r.nr),
                    duration_ns: r.duration_ns,
                    ret: r.ret,
                    user_stack: None,
                };
                self.keep_event(KeptRecord::SlowSyscall(slow));
                false
            }
            Record::Wakeup(r) => {
                let t_ns = self.t_ns(r.wake_ns);
                let Some((kept, _)) = self.wakeups.as_mut() else {
                    return false;
                };
                if kept.len() >= MAX_WAKEUPS {
                    self.dropped.wakeups += 1;
                    return false;
                }
                kept.push(Wakeup {
                    t_ns,
                    sleep_ns: r.wake_ns.saturating_sub(r.sleep_start_ns),
                    pid: r.tgid as i32,
                    tid: r.tid as i32,
                    class: match LatencyClass::from_id(r.class) {
                        Some(c) if r.class != NEW_TASK => c.name().into(),
                        _ => NEW_TASK_CLASS.into(),
                    },
                    waker_kind: waker_kind_name(r.waker_kind).into(),
                    waker_pid: r.waker_tgid as i32,
                    waker_tid: r.waker_tid as i32,
                    on_cpu_ns: r.on_cpu_ns,
                    runqueue_ns: r.runqueue_ns,
                    steal_ns: r.steal_ns,
                });
                false
            }
            Record::Argv(r) => {
                let line = CommandLine::from_nul_separated(
                    self.t_ns(r.ts_ns),
                    r.tgid as i32,
                    argv_bytes(bytes, &r),
                );
                if let Some(line) = line {
                    self.keep_command_line(line);
                }
                false
            }
            Record::StackCapture(r) => {
                if let Some(stacks) = self.stacks.as_mut() {
                    stacks.take_capture(&r, stack_bytes(bytes, &r));
                }
                false
            }
        }
    }

    /// Keep a process's command line (once per program: a /proc read that raced its
    /// ARGV record is not kept twice), and send it to the recording.
    fn keep_command_line(&mut self, line: CommandLine) {
        self.argv_known.insert(line.pid);
        let same = (self.kept.fold().command_lines().iter().rev())
            .find(|l| l.pid == line.pid)
            .is_some_and(|l| l.argv == line.argv);
        if same {
            return;
        }
        self.keep_event(KeptRecord::CommandLine(line));
    }

    /// Read /proc/PID/cmdline of the processes in `frame` whose program's command line
    /// is not known (found running at attach, or exec'd with no ARGV record: classic
    /// tracepoints), and forget the processes no longer in it.
    fn read_command_lines(&mut self, t_ns: u64, frame: &Frame) {
        for p in &frame.processes {
            if self.argv_known.contains(&p.pid) {
                continue;
            }
            self.argv_known.insert(p.pid);
            let path = Path::new(PROC_ROOT).join(p.pid.to_string()).join("cmdline");
            let Ok(file) = std::fs::File::open(path) else {
                continue;
            };
            let mut bytes = Vec::new();
            let _ = std::io::Read::read_to_end(
                &mut std::io::Read::take(file, MAX_ARGV_BYTES as u64),
                &mut bytes,
            );
            if let Some(line) = CommandLine::from_nul_separated(t_ns, p.pid, &bytes) {
                self.keep_command_line(line);
            }
        }
        let live: BTreeSet<i32> = frame.processes.iter().map(|p| p.pid).collect();
        self.argv_known.retain(|pid| live.contains(pid));
    }

    /// Read the cgroup and namespace pids of the processes in `frame` not read since
    /// they were first seen or exec'd (a runtime moves a container's first process into
    /// its cgroup before the exec), and forget the processes no longer in it.
    fn read_identities(&mut self, t_ns: u64, frame: &Frame) {
        for p in &frame.processes {
            self.read_identity(p.pid, t_ns);
        }
        let live: BTreeSet<i32> = frame.processes.iter().map(|p| p.pid).collect();
        self.identities.retain(|pid| live.contains(&pid));
    }

    /// Read `pid`'s cgroup and namespace pids once (until its next exec), and keep them
    /// unless they are what was kept last for it.
    fn read_identity(&mut self, pid: i32, t_ns: u64) {
        let Some((identity, ppid)) = self.identities.read(&mut self.sampler, pid, t_ns) else {
            return;
        };
        // A process that entered the session at its exec (`--cgroup`) has no fork record.
        if let Some(ppid) = ppid {
            self.parent_of.entry(pid as u32).or_insert(ppid);
        }
        if let Some(identity) = identity {
            self.keep_event(KeptRecord::ProcessIdentity(identity));
        }
    }

    /// The cgroup and namespace pid readings kept, from the `from`th on (live views
    /// take the new ones at each snapshot).
    pub fn identities_since(&self, from: usize) -> &[crate::model::ProcessIdentity] {
        let all = self.kept.fold().process_identities();
        &all[from.min(all.len())..]
    }

    /// Take a snapshot frame and keep it.
    pub fn snapshot(&mut self) -> Result<(), SessionError> {
        let frame = self.snapshot_frame(false)?;
        let t_ns = frame.t_ns;
        self.keep_frame(frame);
        // Only a killed session's replay needs them before the end.
        if self.kept.is_recording()
            && t_ns.saturating_sub(self.last_sink_histograms_ns) >= SINK_HISTOGRAM_INTERVAL_NS
        {
            self.keep_histograms(t_ns);
        }
        Ok(())
    }

    /// Frames count a thread that has had no event since attach (say, blocked in one
    /// long wait) in the class /proc showed at attach, so a live view sees its time as
    /// it passes. The BPF programs close that first interval in the same class (a
    /// wakeup uses it; a switch-out means /proc saw it running, on_cpu), so the
    /// counters stay monotonic; off by default (bundles count it at the end).
    pub fn count_initial_in_frames(&mut self, on: bool) {
        self.count_initial_in_frames = on;
    }

    /// Take a snapshot frame and hand it over without keeping it in memory (live views
    /// such as `top` keep their own history). A recorded session still records it, and
    /// its histograms as [`Session::snapshot`] does, so the recording replays the same.
    pub fn snapshot_now(&mut self) -> Result<Frame, SessionError> {
        let frame = self.snapshot_frame(false)?;
        if self.kept.is_recording() {
            self.kept.record_only(RecordRef::Frame(&frame));
            if frame.t_ns.saturating_sub(self.last_sink_histograms_ns) >= SINK_HISTOGRAM_INTERVAL_NS
            {
                self.keep_histograms(frame.t_ns);
            }
        }
        Ok(frame)
    }

    /// `--stacks`: the stack profile so far (every stack resolved at the latest
    /// snapshot, cumulative time per stack), without stopping the capture; `None`
    /// without `--stacks`.
    pub fn stack_profile_so_far(&self) -> Option<crate::model::StackProfile> {
        let stacks = self.stacks.as_ref()?;
        Some(stacks.profile_so_far(
            self.lost_count(lost::STACK),
            self.lost_count(lost::STACK_COPY),
        ))
    }

    /// The waker profile so far (cumulative time per thread, class and waker, of the
    /// sleeps that ended), for live views; `None` with waker aggregation off.
    pub fn wakers_so_far(&self) -> Option<crate::model::WakerProfile> {
        loader::wakers_on().then(|| self.wakers.profile(&[], monotonic_ns()))
    }

    /// The cumulative syscall histograms as of the last snapshot, one per (process,
    /// syscall), sorted.
    pub fn syscall_histograms(&self) -> Vec<SyscallHistogram> {
        self.hists.histograms()
    }

    /// Entries (and estimated bytes) of every structure the session keeps that could
    /// grow with its length: `KERNELKITE_DEBUG_SIZES` prints them, to find what grows
    /// over a long session (`cargo xtask soak`).
    pub fn sizes(&self) -> Vec<(&'static str, u64)> {
        let mut sizes = vec![
            ("frames", self.kept.fold().frames().len() as u64),
            ("frames_kib", self.kept.fold().frame_bytes() >> 10),
            ("lifecycle", self.kept.fold().lifecycle_events() as u64),
            ("slow", self.kept.fold().slow_syscalls() as u64),
            ("slow_stack_ids", self.slow_stack_ids.len() as u64),
            ("folded_wakers", self.wakers.folded.len() as u64),
            ("parent_of", self.parent_of.len() as u64),
            ("in_progress", self.in_progress.len() as u64),
        ];
        sizes.extend(self.hists.sizes());
        sizes.extend(self.tracked.sizes());
        if let Some(stacks) = &self.stacks {
            sizes.extend(stacks.sizes());
        }
        sizes
    }

    /// Drop the lifecycle events kept so far (a long-running live view that reads none
    /// keeps them from growing without bound; a recording got them as they came).
    pub fn drop_lifecycle(&mut self) {
        self.kept.fold_mut().drop_lifecycle();
    }

    /// The lifecycle events and identity readings since the last call, moved out; the
    /// other per-event records are dropped (see `BundleFold::take_live_events`).
    pub fn take_live_events(
        &mut self,
    ) -> (
        Vec<crate::model::LifecycleEvent>,
        Vec<crate::model::ProcessIdentity>,
    ) {
        self.kept.fold_mut().take_live_events()
    }

    /// The syscalls in progress at the latest snapshot.
    pub fn syscalls_in_progress(&self) -> Vec<SyscallInProgress> {
        self.in_progress.clone()
    }

    /// Forget the waker entries folded out of the kernel map (exited wakees, gone
    /// wakers): an always-on view that does not report wakers must not keep them.
    pub fn forget_folded_wakers(&mut self) {
        self.wakers.folded = BTreeMap::new();
    }

    /// Forget the histograms of exited processes, once read (an always-on view keeps
    /// their totals in its own series).
    pub fn forget_exited_histograms(&mut self) {
        self.hists.forget_exited();
    }

    /// Number of frames kept so far.
    pub fn frames(&self) -> usize {
        self.kept.fold().frames().len()
    }

    /// Whether a thread that exited has not left its CPU for the last time yet: its exit
    /// record, sent at that final switch-out, is still to come (a parent can reap a
    /// process before its last thread's final switch).
    pub fn exits_pending(&self) -> bool {
        self.threads
            .read_all()
            .into_iter()
            .any(|(_, s)| s.exit_flags & exit_flags::EXITING != 0)
    }

    /// Whether any traced thread is still alive.
    pub fn any_target_alive(&self) -> bool {
        self.threads.read_all().into_iter().any(|(tid, s)| {
            s.run_state != run_state::EXITED && !self.tracked.has_exited((tid, s.start_ns))
        })
    }

    /// One of the kernel's `lost::*` counters, summed over CPUs.
    fn lost_count(&self, which: u32) -> u64 {
        self.lost
            .get(&which, 0)
            .map_or(0, |per_cpu| per_cpu.iter().sum())
    }

    /// [`Session::events_lost`] by what was lost (`model::LOST_CAUSES`), the causes
    /// with a count only.
    pub fn events_lost_by_cause(&self) -> BTreeMap<String, u64> {
        let causes = [
            ("lifecycle_records", self.lost_count(lost::RINGBUF_FULL)),
            ("slow_call_records", self.lost_count(lost::SLOW_RECORD)),
            (
                "untracked_threads",
                self.lost_count(lost::THREADS_FULL) + self.dropped.untracked_threads,
            ),
            ("histogram_updates", self.lost_count(lost::HIST_FULL)),
            ("stack_captures", self.lost_count(lost::STACK)),
            ("missed_exits", self.lost_count(lost::MISSED)),
            ("undecodable_records", self.undecodable_records),
            ("events_past_caps", self.dropped.events),
            ("waker_updates", self.wakers.lost()),
            ("wakeup_records", self.wakeups_lost()),
        ];
        causes
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| (c.to_string(), n))
            .collect()
    }

    /// Events of the traced threads lost so far: as counted by the BPF programs (full
    /// maps and ring buffer, and the exits of traced threads they found missed), plus
    /// records we could not decode, plus what the session dropped on its side (threads
    /// the map had no room for at attach, events past its caps).
    pub fn events_lost(&self) -> u64 {
        self.undecodable_records
            + self.dropped.untracked_threads
            + self.dropped.events
            // A copy not sent still leaves a (frame-pointer) stack, marked truncated and
            // counted in the profile's `stack_copies_lost`: nothing is lost.
            + (0..lost::COUNT)
                .filter(|&i| i != lost::STACK_COPY)
                .map(|i| self.lost_count(i))
                .sum::<u64>()
            + self.wakers.lost()
            + self.wakeups_lost()
    }

    /// `--critical-path`: wakeups the kernel did not send plus those past the cap.
    fn wakeups_lost(&self) -> u64 {
        let kernel = self.wakeups.as_ref().map_or(0, |(_, lost)| {
            lost.get(&0, 0).map_or(0, |v| v.iter().sum::<u64>())
        });
        kernel + self.dropped.wakeups
    }

    /// The syscalls and waits the threads are in at `now`: each thread inside a syscall
    /// is one call in progress, and (`--stacks`) each one off the CPU is one wait in
    /// progress, with the stack its switch-out captured.
    fn note_in_progress(
        &mut self,
        by_tgid: &BTreeMap<u32, BTreeMap<u32, ThreadState>>,
        now: u64,
        final_frame: bool,
    ) {
        self.in_progress.clear();
        self.in_progress_stack_ids.clear();
        let mut waits = Vec::new();
        // Threads still in the call they were blocked in at attach.
        let mut blocked = BTreeSet::new();
        for (&tgid, states) in by_tgid {
            for (&tid, s) in states {
                if s.exit_flags & exit_flags::EXITING != 0 {
                    continue;
                }
                let in_syscall = s.sys_nr != NO_SYSCALL;
                let stacks = self.stacks.is_some();
                // The stacks /proc gave a call in progress whose switch-out copied none.
                let mut wait_from_proc = None;
                if in_syscall {
                    let before_start = s.sys_flags & sys_flags::BEFORE_START != 0;
                    let nr = s.sys_nr & !SYSCALL_BEFORE_START;
                    let blocked_at_attach = before_start && s.run_state == run_state::INITIAL;
                    let copied = (self.stacks.as_ref())
                        .is_some_and(|c| c.has_thread_stack(tid, s.sys_user_stack_id));
                    if copied && !blocked_at_attach {
                        self.in_progress_stack_ids.push((
                            self.in_progress.len(),
                            tgid,
                            tid,
                            s.sys_user_stack_id,
                            None,
                        ));
                    } else if let (true, Some(collector)) = (
                        // At the end only (the programs detached): read during the
                        // session, it held up the ring buffer's reader.
                        final_frame,
                        self.stacks.as_mut(),
                    ) {
                        // No switch-out copied its stack: blocked since before attach
                        // with no event since, or its one switch-out came within the
                        // capture rate bound of the thread's last capture (or its copy
                        // was lost). It is still in the call, so /proc has the stack.
                        // Live views go without.
                        let from_proc = collector.blocked_stacks(tgid, tid, nr);
                        if let Some(user) = from_proc.and_then(|p| p.user) {
                            self.in_progress_stack_ids.push((
                                self.in_progress.len(),
                                tgid,
                                tid,
                                NO_STACK,
                                Some(user),
                            ));
                        }
                        if blocked_at_attach {
                            // Its wait's time (all of the session) goes to that stack.
                            blocked.insert(tid);
                            if let Some(from_proc) = from_proc {
                                waits.push(InProgressWait {
                                    tgid,
                                    tid,
                                    class: s.sleep_class,
                                    sleep_ns: now.saturating_sub(s.since_ns),
                                    runq_ns: 0,
                                    user_stack_id: NO_STACK,
                                    kernel_stack: 0,
                                    sampled: false,
                                    from_proc: Some(from_proc),
                                });
                            }
                        } else {
                            wait_from_proc = from_proc;
                        }
                    }
                    self.in_progress.push(SyscallInProgress {
                        pid: tgid as i32,
                        tid: tid as i32,
                        nr,
                        name: syscall_table::name(nr),
                        t_ns: if before_start {
                            0
                        } else {
                            self.t_ns(s.sys_enter_ns)
                        },
                        elapsed_ns: now.saturating_sub(s.sys_enter_ns),
                        before_start,
                        user_stack: None,
                    });
                }
                if !stacks {
                    continue;
                }
                let user_stack_id = if in_syscall {
                    s.sys_user_stack_id
                } else {
                    s.user_stack_id
                };
                let off_cpu =
                    s.run_state == run_state::SLEEPING || s.run_state == run_state::RUNNABLE;
                if off_cpu && s.off_cpu_since_ns != 0 && now > s.off_cpu_since_ns {
                    let off_ns = now - s.off_cpu_since_ns;
                    let sleep_ns = if s.run_state == run_state::SLEEPING {
                        off_ns
                    } else {
                        s.off_cpu_sleep_ns.min(off_ns)
                    };
                    waits.push(InProgressWait {
                        tgid,
                        tid,
                        class: s.sleep_class,
                        sleep_ns,
                        runq_ns: off_ns - sleep_ns,
                        user_stack_id,
                        kernel_stack: 0,
                        sampled: false,
                        from_proc: wait_from_proc,
                    });
                }
                if s.pending_class != NO_PENDING {
                    // Waits of a call that has not returned: their user stack was to be
                    // taken at its return.
                    waits.push(InProgressWait {
                        tgid,
                        tid,
                        class: s.pending_class,
                        sleep_ns: s.pending_sleep_ns,
                        runq_ns: s.pending_runq_ns,
                        user_stack_id: NO_STACK,
                        kernel_stack: s.pending_kernel_stack,
                        sampled: s.pending_sampled != 0,
                        from_proc: None,
                    });
                }
            }
        }
        if let Some(stacks) = &mut self.stacks {
            for &(_, pid, tid, id, from_proc) in &self.in_progress_stack_ids {
                let stack = from_proc.unwrap_or_else(|| stacks.thread_stack(tid, id));
                stacks.want_user_stack(pid, stack);
            }
            stacks.keep_blocked(&blocked);
            stacks.set_in_progress(waits);
        }
    }

    fn snapshot_frame(&mut self, final_frame: bool) -> Result<Frame, SessionError> {
        // Read the map first: a thread's counters are then never ahead of its /proc row.
        let mut by_tgid: BTreeMap<u32, BTreeMap<u32, ThreadState>> = BTreeMap::new();
        let mut lost_exits = Vec::new();
        let entries: Vec<(u32, ThreadState)> = (self.threads.read_all().into_iter())
            .map(|(tid, state)| (tid, self.read_thread(tid, state)))
            .collect();
        // The clock after the copies: no interval a copy closed ends after it, so a
        // thread's classes add up to its time in the frame, never more (read before,
        // a thread that switched during the read was ahead of the frame by the read).
        let now = monotonic_ns();
        let t_ns = self.t_ns(now);
        let present: BTreeSet<ThreadKey> = entries.iter().map(|(t, s)| (*t, s.start_ns)).collect();
        if final_frame {
            self.final_states = (entries.clone(), now);
        }
        for (tid, state) in entries {
            if state.run_state == run_state::EXITED {
                lost_exits.push((tid, state));
                continue;
            }
            by_tgid.entry(state.tgid).or_default().insert(tid, state);
        }
        // Exits whose record was lost (ring buffer full): collect the final counters
        // from the map, so no measured time is lost with the record.
        for (tid, state) in lost_exits {
            let exit_code = Some((state.exit_code >> 8) as i32 & 0xff);
            let class_ns = ClassTimes::from_array(state.class_ns);
            self.keep_exit_from_map(t_ns, tid, &state, exit_code, class_ns);
            self.threads.remove(tid);
        }
        self.hists.fold_exited(&by_tgid);
        if loader::wakers_on() {
            // A process with no thread in the map has exited, unless it was forked after
            // the map was read: /proc says which (an entry moved while still updated
            // would lose the update between the copy and the delete).
            self.wakers.fold_exited(
                |k| !by_tgid.contains_key(&k.tgid) && !thread_alive(k.tgid, k.tid),
                // A waker thread is alive while traced, or while /proc shows it.
                |tgid, tid| {
                    by_tgid.get(&tgid).is_some_and(|t| t.contains_key(&tid))
                        || thread_alive(tgid, tid)
                },
            );
        }
        self.note_in_progress(&by_tgid, now, final_frame);
        if let Some(stacks) = &mut self.stacks {
            // Mappings first: a process that exits before the next snapshot is then
            // resolved with the mappings it had at this one.
            stacks.refresh_maps(by_tgid.keys().copied());
            stacks.resolve_new();
        }
        self.tracked.add_processes(by_tgid.keys().copied());
        // System-wide (pid 1 with follow), every traced process stays below pid 1: a
        // fixed scope lets the /proc walker keep its cache of the processes outside it
        // (kernel threads) from tick to tick, where the known set, growing with every
        // new process, would reset it.
        let roots: Vec<i32> = if self.options.follow && self.options.pids.contains(&1) {
            vec![1]
        } else {
            self.tracked.pids().map(|t| t as i32).collect()
        };
        // Threads asleep since before the last /proc reads (the map was read above, so
        // they slept through to `now`, which the reads below come after): their stat,
        // schedstat and syscall files read the same, so the sampler repeats them (a
        // sleeping pool of 1,000 threads: `trace --pid` takes less than half the CPU it
        // did, docs/PERFORMANCE.md).
        let read_ns = self.proc_read_ns;
        self.sampler.set_unchanged_threads(
            (by_tgid.values().flatten())
                .filter(|(_, s)| asleep_since(s, read_ns))
                .map(|(&tid, _)| tid as i32),
        );
        // The clock read after the map copies: earlier than these reads, so a thread
        // counted asleep since it at the next snapshot was asleep when they ran.
        self.proc_read_ns = now;
        let mut frame = self.sampler.sample(Scope::Subtrees(&roots), t_ns)?;
        let threads = &self.threads;
        let still_held = |tgid: u32| {
            by_tgid.get(&tgid).is_some_and(|states| {
                states.iter().any(|(tid, state)| {
                    threads
                        .get(*tid)
                        .is_some_and(|now| now.tgid == tgid && now.start_ns == state.start_ns)
                })
            })
        };
        self.tracked
            .keep_ours(&mut frame, &by_tgid.keys().copied().collect(), still_held);
        for p in &frame.processes {
            self.parent_of.insert(p.pid as u32, p.ppid);
        }
        // Bounded: past the cap, only the processes still tracked keep their parent (a
        // process that exited since the last snapshot may still need it, so not always).
        if self.parent_of.len() > PARENTS_KEPT {
            let remembered: BTreeSet<u32> = self.tracked.pids().collect();
            self.parent_of.retain(|pid, _| remembered.contains(pid));
        }
        // The kernel runtime of each thread /proc read off the CPU just now (not R): it
        // ends the run in progress of a thread the map still shows on a CPU (its
        // switch-out can go unseen). A running thread's runtime lags its run by up to a
        // tick, so it bounds nothing.
        let runtime_now: BTreeMap<u32, u64> = frame
            .processes
            .iter()
            .flat_map(|p| &p.threads)
            .filter(|t| !t.state.as_str().starts_with('R'))
            .filter_map(|t| Some((t.tid as u32, t.schedstat?.on_cpu_ns)))
            .collect();
        let mut emitted: BTreeMap<u32, ClassTimes> = BTreeMap::new();
        for states in by_tgid.values() {
            for (&tid, state) in states {
                let runtime = runtime_now.get(&tid).copied();
                let times = if final_frame || self.count_initial_in_frames {
                    class_times_final(state, now, runtime)
                } else {
                    class_times_at(state, now, runtime)
                };
                emitted.insert(
                    tid,
                    self.tracked.clamp_monotonic((tid, state.start_ns), times),
                );
            }
        }
        self.tracked.keep_threads(&present);
        for p in &mut frame.processes {
            let Some(states) = by_tgid.get(&(p.pid as u32)) else {
                // Every thread has exited (a zombie): its class times are in the exit
                // records, and a thread row here would go backwards.
                p.threads.clear();
                continue;
            };
            let mut proc_threads: BTreeMap<i32, ThreadSample> = std::mem::take(&mut p.threads)
                .into_iter()
                .map(|t| (t.tid, t))
                .collect();
            p.threads = states
                .keys()
                .map(|&tid| {
                    let mut sample =
                        proc_threads
                            .remove(&(tid as i32))
                            .unwrap_or_else(|| ThreadSample {
                                tid: tid as i32,
                                comm: Default::default(),
                                state: "?".into(),
                                schedstat: None,
                                syscall_nr: None,
                                class_ns: None,
                            });
                    sample.class_ns = emitted.get(&tid).copied();
                    sample
                })
                .collect();
        }
        self.read_command_lines(t_ns, &frame);
        self.read_identities(t_ns, &frame);
        if let Some(counters) = self.cgroup_counters.as_mut() {
            if let Some(p) = frame.processes.first().filter(|_| counters.wants_v1_cpu()) {
                counters.find_v1_cpu(Path::new(PROC_ROOT), p.pid);
            }
            let sample = counters.sample(t_ns);
            self.keep_event(KeptRecord::CgroupSample(sample));
        }
        Ok(frame)
    }

    /// Runs of the programs the kernel skipped (its recursion guard: a tracepoint that
    /// fires while a BPF program already runs on that CPU, say a wakeup from an
    /// interrupt, runs no program), for any task on the machine: most concern tasks
    /// that are not traced, which the programs would have ignored. A skipped exit hook
    /// of a traced thread is found when its tid is reused, and counted in
    /// [`Session::events_lost`]; other skipped runs are not (docs/PROFILE.md).
    pub fn program_runs_skipped(&self) -> u64 {
        self.probes
            .as_ref()
            .map_or(self.recursion_misses_at_detach, Probes::recursion_misses)
    }

    /// Detach every program (the session stops observing); [`Session::finish`] does it
    /// too. The programs' skipped runs are read first: only loaded programs say.
    pub fn detach(&mut self) {
        if let Some(probes) = self.probes.take() {
            self.recursion_misses_at_detach = probes.recursion_misses();
        }
    }

    /// Stop: one last drain-free snapshot, the histograms, and the bundle.
    pub fn finish(mut self) -> Result<Bundle, SessionError> {
        // Detach first: with no program running, the final read is consistent and the
        // open intervals end now, when observation ended.
        self.detach();
        let last = self.snapshot_frame(true)?;
        // When everything has exited, the last frame that still showed the processes
        // (as zombies) holds their final counters; an empty frame would replace it
        // under a frame cap.
        let t_end_ns = last.t_ns;
        if !last.processes.is_empty() || self.kept.fold().frames().is_empty() {
            self.keep_frame(last);
        }
        let mut stacks = None;
        if let Some(mut collector) = self.stacks.take() {
            // Bounded: what is left past the deadline keeps module+offset only.
            collector.resolve_final();
            // The slow calls' stacks are only known now: by arrival index.
            let slow_stacks: Vec<(u32, u32)> = (self.slow_stack_ids.iter())
                .filter_map(|&(i, pid, id)| Some((i as u32, collector.user_stack_index(pid, id)?)))
                .collect();
            for &(i, pid, tid, id, from_proc) in &self.in_progress_stack_ids {
                if let Some(call) = self.in_progress.get_mut(i) {
                    let stack = from_proc.unwrap_or_else(|| collector.thread_stack(tid, id));
                    call.user_stack = collector.user_stack_index(pid, stack);
                }
            }
            let profile = collector.finish(
                self.lost_count(lost::STACK),
                self.lost_count(lost::STACK_COPY),
            );
            stacks = Some(KeptRecord::Stacks {
                profile,
                slow_stacks,
            });
        }
        self.keep_histograms(t_end_ns);
        if let Some(stacks) = stacks {
            self.kept.push(stacks);
        }
        let (states, now) = std::mem::take(&mut self.final_states);
        if loader::wakers_on() {
            let wakers = self.wakers.profile(&states, now);
            self.kept.push(KeptRecord::Wakers(wakers));
        }
        let lost = self.wakeups_lost();
        if let Some((mut wakeups, _)) = self.wakeups.take() {
            wakeups.sort_by_key(|w| (w.t_ns, w.tid));
            self.kept
                .push(KeptRecord::Wakeups(WakeupStream { wakeups, lost }));
        }
        Ok(self.kept.finish())
    }

    /// Keep the kept frames' digest as well, for [`Session::with_bundle_so_far`]:
    /// `trace --serve`, whose scrapes then cost what the processes seen do, not what
    /// the frames kept do.
    pub fn keep_frame_digest(&mut self) {
        self.kept.fold_mut().keep_frame_digest();
    }

    /// `f` of the bundle as it would be if the session stopped at its latest snapshot,
    /// for live views (`trace --serve`): the histograms and loss counters as the kernel
    /// holds them now, the calls in progress with the stacks resolved so far, and the
    /// frames so far, as their digest and the last frame when the session keeps one
    /// ([`Session::keep_frame_digest`]; what a scrape shows per process is the same,
    /// without analysing every frame on the trace loop). The programs stay attached.
    pub fn with_bundle_so_far<R>(&mut self, f: impl FnOnce(&Bundle) -> R) -> R {
        let events_lost = self.events_lost();
        let by_cause = self.events_lost_by_cause();
        let syscalls = self.syscall_histograms();
        let mut in_progress = self.in_progress.clone();
        if let Some(collector) = &self.stacks {
            for &(i, pid, tid, id, from_proc) in &self.in_progress_stack_ids {
                if let Some(call) = in_progress.get_mut(i) {
                    let stack = from_proc.unwrap_or_else(|| collector.thread_stack(tid, id));
                    call.user_stack = call.user_stack.or(collector.user_stack_index(pid, stack));
                }
            }
        }
        let frames = self.kept.fold().digest_frames();
        let live = |bundle: &mut Bundle| {
            bundle.events_lost = Some(events_lost);
            bundle.events_lost_by_cause = by_cause;
            bundle.syscalls = syscalls;
            bundle.syscalls_in_progress = in_progress;
        };
        self.kept.fold_mut().with_bundle_so_far(frames, live, f)
    }
}

/// The start record of the session `options` describe.
fn session_start(options: &TraceOptions, host: &HostConstants, clock: ClockAnchor) -> SessionStart {
    SessionStart {
        backend: Backend::Ebpf,
        label: options.label.clone(),
        host: host.clone(),
        interval_ms: options.interval.as_millis() as u64,
        max_frames: options.max_frames,
        min_latency_ns: options.min_latency_ns,
        follow: options.follow,
        network: options.network,
        root_pids: options.pids.clone(),
        clock,
    }
}

/// The class a thread found asleep at attach time is assumed to be in until its first
/// event: from its /proc state and the syscall it is blocked in.
fn initial_class(state: &str, syscall_nr: Option<i64>) -> LatencyClass {
    // The /proc estimate's rule for one sample; running or runnable (no sleep class):
    // the BPF programs count a first switch-out as on_cpu and a first switch-in as
    // runqueue.
    sample_class(std::env::consts::ARCH, state, syscall_nr).unwrap_or(LatencyClass::OnCpu)
}

/// A thread's class times up to `now`: completed intervals plus the one in progress.
/// INITIAL threads' first interval is not counted until it is known (see finish).
/// `runtime_ns` is the kernel runtime of a thread /proc saw off the CPU at or after
/// `now`, if known: a run the map shows in progress then ended, and is on_cpu only as
/// far as the runtime moved since the interval began, the rest unknown_wait (a
/// switch-out the hooks did not see leaves a sleeping thread on a CPU in the map,
/// `ThreadState::close_missed_switch_out`).
fn class_times_at(state: &ThreadState, now: u64, runtime_ns: Option<u64>) -> ClassTimes {
    let mut times = ClassTimes::from_array(state.class_ns);
    let open = now.saturating_sub(state.since_ns);
    if state.run_state == run_state::ON_CPU {
        let ran = match runtime_ns {
            Some(r) if state.runtime_ns != NO_RUNTIME => r.saturating_sub(state.runtime_ns),
            _ => open,
        };
        times.add(LatencyClass::OnCpu, open.min(ran));
        times.add(LatencyClass::UnknownWait, open - open.min(ran));
        return times;
    }
    let class = match state.run_state {
        run_state::RUNNABLE => Some(LatencyClass::Runqueue),
        run_state::SLEEPING => LatencyClass::from_id(state.sleep_class),
        _ => None,
    };
    if let Some(class) = class {
        times.add(class, open);
    }
    times
}

/// Whether a thread has been off the CPU since before `t_ns` (CLOCK_MONOTONIC; 0: no
/// such time): asleep since then, or found asleep at attach with no event since.
fn asleep_since(state: &ThreadState, t_ns: u64) -> bool {
    let asleep = match state.run_state {
        run_state::SLEEPING => true,
        run_state::INITIAL => state.sleep_class != LatencyClass::OnCpu as u32,
        _ => false,
    };
    asleep && t_ns != 0 && state.since_ns < t_ns
}

/// A thread's class times at the end of the session. A thread still INITIAL had no
/// event at all: it spent the whole window in the state /proc showed at attach time.
fn class_times_final(state: &ThreadState, now: u64, runtime_ns: Option<u64>) -> ClassTimes {
    if state.run_state != run_state::INITIAL {
        return class_times_at(state, now, runtime_ns);
    }
    let mut times = ClassTimes::from_array(state.class_ns);
    let class = LatencyClass::from_id(state.sleep_class).unwrap_or(LatencyClass::UnknownWait);
    times.add(class, now.saturating_sub(state.since_ns));
    times
}

/// Whether thread `tid` of `tgid` has not exited: its /proc entry exists and is not a
/// zombie (Z) or dead (X).
fn thread_alive(tgid: u32, tid: u32) -> bool {
    let stat = Path::new(PROC_ROOT)
        .join(tgid.to_string())
        .join("task")
        .join(tid.to_string())
        .join("stat");
    std::fs::read_to_string(stat).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X" | "x"))
    })
}

/// Whether a copied entry satisfies the invariant of `close_interval`.
fn consistent(state: &ThreadState) -> bool {
    let sum = state.class_ns.iter().fold(0u64, |a, b| a.wrapping_add(*b));
    sum == state.since_ns.wrapping_sub(state.start_ns)
}

/// Whether a map insert failed only because the key is there already (`BPF_NOEXIST`).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::syscalls::syscall_number;
    use kernelkite_common::NUM_CLASSES;

    fn state(run_state: u32, since_ns: u64, class_ns: [u64; NUM_CLASSES]) -> ThreadState {
        ThreadState {
            tgid: 1,
            run_state,
            since_ns,
            sleep_class: LatencyClass::SyscallBlocked as u32,
            sys_nr: NO_SYSCALL,
            class_ns,
            start_ns: 100,
            ..Default::default()
        }
    }

    #[test]
    fn open_interval_goes_to_the_current_state_class() {
        let on = state(run_state::ON_CPU, 150, [50, 0, 0, 0, 0, 0, 0]);
        assert_eq!(class_times_at(&on, 170, None).on_cpu, 70);
        let asleep = state(run_state::SLEEPING, 150, [50, 0, 0, 0, 0, 0, 0]);
        let t = class_times_at(&asleep, 170, None);
        assert_eq!((t.on_cpu, t.syscall_blocked), (50, 20));
        let waiting = state(run_state::RUNNABLE, 150, [50, 0, 0, 0, 0, 0, 0]);
        assert_eq!(class_times_at(&waiting, 170, None).runqueue, 20);
        // An INITIAL thread's first interval is unknown until its first event, and is
        // only attributed (to the class /proc showed) at the end of the session.
        let initial = state(run_state::INITIAL, 100, [0; NUM_CLASSES]);
        assert_eq!(class_times_at(&initial, 170, None).total_ns(), 0);
        assert_eq!(class_times_final(&initial, 170, None).syscall_blocked, 70);
        // A clock a little behind since_ns never underflows.
        assert_eq!(class_times_at(&on, 140, None).on_cpu, 50);
    }

    /// A thread the map shows on a CPU since 150 whose kernel runtime moved 5 ns since
    /// then (its switch-out went unseen): 5 ns of the 20 are on_cpu, the rest unknown.
    #[test]
    fn a_run_in_progress_is_on_cpu_only_as_far_as_the_runtime_moved() {
        let mut on = state(run_state::ON_CPU, 150, [50, 0, 0, 0, 0, 0, 0]);
        on.runtime_ns = 1_000;
        let t = class_times_at(&on, 170, Some(1_005));
        assert_eq!((t.on_cpu, t.unknown_wait), (55, 15));
        // A runtime ahead of the interval: all of it on_cpu, never more.
        let t = class_times_at(&on, 170, Some(9_000));
        assert_eq!((t.on_cpu, t.unknown_wait), (70, 0));
        // Without a baseline the runtime says nothing.
        on.runtime_ns = NO_RUNTIME;
        assert_eq!(class_times_at(&on, 170, Some(1_005)).on_cpu, 70);
        assert_eq!(class_times_final(&on, 170, Some(1_005)).on_cpu, 70);
    }

    #[test]
    fn torn_copies_break_the_invariant() {
        // Consistent: the closed intervals add up to since_ns - start_ns.
        assert!(consistent(&state(
            run_state::SLEEPING,
            150,
            [30, 20, 0, 0, 0, 0, 0]
        )));
        // A copy that saw since_ns move but not the class counter it went with.
        assert!(!consistent(&state(
            run_state::SLEEPING,
            180,
            [30, 20, 0, 0, 0, 0, 0]
        )));
    }

    #[test]
    fn threads_found_at_attach_start_in_the_class_their_proc_state_says() {
        let arch = std::env::consts::ARCH;
        let futex = syscall_number(arch, "futex").map(i64::from);
        let read = syscall_number(arch, "read").map(i64::from);
        assert_eq!(initial_class("R", None), LatencyClass::OnCpu);
        assert_eq!(initial_class("S", futex), LatencyClass::LockWait);
        assert_eq!(initial_class("D", read), LatencyClass::IoWait);
        assert_eq!(initial_class("S", read), LatencyClass::SyscallBlocked);
        assert_eq!(initial_class("S", Some(-1)), LatencyClass::UnknownWait);
    }
}
