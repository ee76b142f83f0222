//! `--stacks`: read the stacks the BPF programs captured (see kernelkite-ebpf's
//! `stacks` module) and resolve them to symbols while their processes are alive, so the
//! bundle carries the names and reports never need the binaries.
//!
//! Every file a traced process controls (its binaries and libraries, its perf map) is
//! read through the door (`source::untrusted`), with the process's own credentials,
//! never following a link, regular files only, bounded; blazesym only ever parses our
//! private copy. User frames: the file mapping of /proc/<pid>/maps the address falls
//! in (read at every snapshot; the last read serves a process that has exited) gives
//! `module+0xoffset`; the mapped file (through /proc/<pid>/map_files while the process
//! lives, by path with the mapping's device and inode checked once it has exited)
//! gives ELF symbols and DWARF file:line (DWARF only from the file itself: a
//! `.gnu_debuglink` names a path the target chose, so such a file gives ELF symbols
//! only). Addresses outside every file mapping: `/tmp/perf-<pid>.map` for JIT runtimes.
//! A process of another mount namespace (a container) has its perf map, and its
//! mapped files once it has exited, read below its own root (`untrusted::Root`, one
//! held per namespace from when a process of it was seen alive), its perf map named by
//! its pid in its own pid namespace.
//! Kernel frames: kallsyms. Files refused are counted in the profile's `skipped_files`.

use std::collections::{BTreeMap, HashMap as StdHashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aya::maps::{HashMap, MapData, StackTraceMap};
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use std::sync::Arc;

use kernelkite_common::bpf::{
    copy_flags, record_kind, KernelStack, StackCaptureRecord, StackKey, StackTime, COPIED_STACK,
    NO_CLASS, NO_STACK,
};
use kernelkite_common::LatencyClass;

use super::loader::StackOptions;
use super::map_batch::read_all;
use super::unwind::{CopiedStack, Cut, ModuleInfo, ProcessUnwinder, UnwindCache};
use crate::model::{SkippedFile, StackFrame, StackModule, StackProfile, StackSample};
use crate::source::untrusted::{
    self, Credentials, Door, FileCopy, FileId, Place, ProcessStatus, Root, RootKey, Rules, Skip,
};

/// Symbolizing at one snapshot stops after this long; the stacks not reached wait for
/// the next one. Keeps a signal's answer (trace's loop runs the snapshot) prompt.
const RESOLVE_BUDGET: Duration = Duration::from_millis(300);
/// At the end of a session: after this long, the stacks left keep their addresses and
/// `module+0xoffset` only, so a signal ends the session within seconds. (300 ms left
/// a short Node run's stacks nameless on a loaded machine: its waits that ended at
/// the exit are resolved only here, and naming them in node's 90 MB binary takes
/// longer there.)
const FINAL_BUDGET: Duration = Duration::from_millis(2000);
/// One read through the door waits at most this long.
const READ_DEADLINE: Duration = Duration::from_millis(250);

/// [`READ_DEADLINE`], or less with `KERNELKITE_DEBUG_READ_DEADLINE_MS` (tests: every
/// read slower than a loaded machine's, docs/TESTING.md); never more, so a session still
/// ends promptly whatever a file does.
fn read_deadline() -> Duration {
    (std::env::var("KERNELKITE_DEBUG_READ_DEADLINE_MS").ok())
        .and_then(|v| v.parse().ok())
        .map_or(READ_DEADLINE, |ms| {
            Duration::from_millis(ms).min(READ_DEADLINE)
        })
}
/// The largest binary or library read (it is copied into memory).
const MAX_BINARY_BYTES: u64 = 512 << 20;
/// Copies made for symbolizing since the symbolizer started: past this total, the
/// symbolizer and its copies start afresh (a cache only; resolved frames are already in
/// the bundle). blazesym keeps every file it parsed open until then, also the copies of
/// binaries whose processes exited (a churn of short processes copies them again and
/// again), so this bounds that memory.
const MAX_COPIED_BYTES: u64 = 128 << 20;
/// The vDSO mapping: its module name, and the key of our copy of it.
const VDSO: &str = "[vdso]";
const VDSO_FILE: FileId = FileId {
    dev_major: 0,
    dev_minor: 0,
    inode: 0,
};
/// A perf map that lacks an address is read again at most this often.
const PERF_MAP_REREAD: Duration = Duration::from_secs(1);
/// Skipped files listed by path; past this many, further ones are counted under
/// [`OTHER_SKIPPED_FILES`] (a process churning out refused files cannot grow the list).
const MAX_SKIPPED_FILES: usize = 1000;
const OTHER_SKIPPED_FILES: &str = "(other files)";
/// The largest perf map read (perf's format: one `START SIZE name` line per symbol).
const MAX_PERF_MAP_BYTES: u64 = 64 << 20;
/// Distinct unwound stacks kept, and distinct (thread, class, stack) times of copies:
/// past either, a copy's time is dropped and counted in `captures_lost`.
const MAX_UNWOUND_STACKS: usize = 65_536;
/// Distinct frames a session interns (about 250 bytes each with their strings): past
/// it, a stack that needs a new frame is kept as [`FRAMES_PAST_CAP`] alone, with its
/// time, and counted (a process churn makes new frames for every process, each with
/// its own addresses: bounded otherwise only through the stacks that name them).
const MAX_INTERNED_FRAMES: usize = 500_000;
/// The one frame of a stack that would have gone past [`MAX_INTERNED_FRAMES`].
pub const FRAMES_PAST_CAP: &str = "[stack not kept: past the 500,000 frames a session keeps]";
const MAX_COPIED_TIMES: usize = 65_536;
/// Copies waiting for their times (one per thread at most): past this, forgotten.
const MAX_PENDING_COPIES: usize = 65_536;
/// A process whose stack copies name a return address outside its known mappings (a
/// library loaded since) has its mappings read again at most this often: a
/// frame-pointer walk through code without frame pointers names addresses no mapping
/// holds, and this bounds what such stacks cost (reading node's 92 mappings took 62 µs
/// on a loaded 2-core VM, so at most 0.6% of a CPU).
const MAPS_REREAD: Duration = Duration::from_millis(10);
/// ... and one whose copy's instruction pointer is outside them, at most this often
/// (an instruction pointer is always in a mapping: only a read from before it was
/// mapped misses it, so this bound only keeps one drain's copies to one read).
const LEAF_MAPS_REREAD: Duration = Duration::from_millis(1);
/// Roots of other mount namespaces held at once ([`untrusted::Root`]: two fds each);
/// a process of one more is resolved as if it were in kernelkite's own, and counted in
/// `roots_refused`.
const MAX_ROOTS: usize = 256;
/// Where distributions install separate debug files by build-id.
const BUILD_ID_DEBUG_DIR: &str = "/usr/lib/debug/.build-id";
/// The largest separate debug file read.
const MAX_DEBUG_FILE_BYTES: u64 = 1 << 30;

/// A user stack as captured: walked by frame pointers in the kernel (its id in
/// `USER_STACKS`), or copied and unwound here (its index in `unwound`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UserStack {
    Walked(i32),
    Unwound(u32),
}

/// A stack copy waiting for its process's files to be read before it is unwound.
#[derive(Debug)]
struct DeferredCopy {
    pid: u32,
    ip: u64,
    sp: u64,
    bp: u64,
    /// Empty once unwound.
    bytes: Vec<u8>,
    /// The interned stack, once unwound.
    unwound: Option<Option<u32>>,
}

/// The bit of an unwound stack's index that says it is a [`DeferredCopy`]'s (the rest
/// is its index among them).
const DEFERRED: u32 = 1 << 31;
/// Copies waiting at once (16 KiB each at most: 16 MiB); past that a copy is unwound
/// with the unwinder there is.
const MAX_DEFERRED_COPIES: usize = 1024;
/// Copies deferred over a session (about 80 bytes each once unwound).
const MAX_DEFERRED: usize = 65_536;

/// One unwound stack: addresses leaf first, and why the unwind stopped early.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Unwound {
    pid: u32,
    addrs: Vec<u64>,
    cut: Option<Cut>,
}

/// The captured stacks of a session and their resolved frames.
pub struct StackCollector {
    options: StackOptions,
    times: HashMap<MapData, StackKey, StackTime>,
    user_stacks: StackTraceMap<MapData>,
    kernel_stacks: HashMap<MapData, u64, KernelStack>,
    symbolizer: Symbolizer,
    door: Door,
    /// Private copies of mapped files, by the mapped inode, and their total size.
    copies: StdHashMap<FileId, FileCopy>,
    copied_bytes: u64,
    /// Copies (and unwind information) of files no traced process maps any more, kept
    /// while the symbolizer holds them anyway: a new process of the same binary (a
    /// churn of short processes) reuses the copy when the file's bytes are the same,
    /// instead of the symbolizer parsing one more copy (an inode freed with its last
    /// mapping may be reused by another file, hence the comparison).
    retired: StdHashMap<FileId, RetiredCopy>,
    /// Mapped files the door refused, per process: not asked again (while the process
    /// runs the program it had). The value: `maps_read_ns` of the mappings it was
    /// refused for.
    refused: BTreeMap<(u32, FileId), u64>,
    /// (path, reason) → times refused: the profile's `skipped_files`.
    skipped: BTreeMap<(String, Skip), u64>,
    /// Interned frames and stacks, as they go into the bundle.
    frames: Interner<StackFrame>,
    /// Stacks kept as [`FRAMES_PAST_CAP`] because their frames would have gone past
    /// [`MAX_INTERNED_FRAMES`].
    stacks_past_frame_cap: u64,
    /// (frame indices, truncated).
    stacks: Interner<(Vec<u32>, bool)>,
    /// (pid, user stack) → stack index, once resolved (`None`: the id held nothing).
    /// Bounded by the kernel's `STACK_TIMES` (one entry per key, never deleted), the
    /// unwound stacks' bound, plus the slow calls' stacks.
    user_resolved: BTreeMap<(u32, UserStack), Option<u32>>,
    /// The files resolved stacks touched, with their build-ids.
    module_build_ids: std::collections::BTreeSet<StackModule>,
    /// kernel stack key → stack index.
    kernel_resolved: BTreeMap<u64, Option<u32>>,
    /// User stacks wanted outside `STACK_TIMES` (slow syscalls, calls in progress).
    wanted_user: Vec<(u32, UserStack)>,
    /// The waits in progress at the latest snapshot.
    in_progress: Vec<InProgressWait>,
    /// Threads blocked in one syscall since before attach: tid → (the call, its stacks
    /// read from /proc once). Kept while the thread stays in that first wait.
    blocked: BTreeMap<u32, (u32, ProcStacks)>,
    /// Stacks unwound from copies, interned, and the time of each (tgid, tid, class,
    /// unwound index, kernel stack key): the copies' share of `STACK_TIMES`.
    unwound: Interner<Unwound>,
    copied_times: BTreeMap<(u32, u32, u32, u32, u64), StackTime>,
    /// Switch-out and slow-call copies waiting for their times: tid → (capture ns,
    /// unwound index).
    pending_copies: StdHashMap<u32, (u64, u32)>,
    /// Copies whose time was dropped here (bounds above), for `captures_lost`.
    copies_dropped: u64,
    /// Copies cut short by a failed page read, and copies unwound.
    copies_short: u64,
    copies_unwound: u64,
    /// Time spent in the unwinder itself (modules already built), for the per-stack cost.
    unwind_ns: u64,
    /// Unwind information per mapped file (`None`: not read or not an ELF), and the
    /// unwinder of each process, built from its mappings (dropped when they change).
    module_info: StdHashMap<FileId, Option<Arc<ModuleInfo>>>,
    unwinders: BTreeMap<u32, ProcessUnwinder>,
    /// Copies waiting for their process's files ([`DEFERRED`] indices), and how many
    /// of them still hold their bytes.
    deferred: Vec<DeferredCopy>,
    deferred_held: usize,
    unwind_cache: UnwindCache,
    /// When each process's mappings were last read for a copy.
    maps_read_at: BTreeMap<u32, Instant>,
    /// Separate debug files by build-id (`None`: none found).
    debug_files: StdHashMap<Vec<u8>, Option<FileCopy>>,
    /// Traced processes as last read. A process that has exited is dropped once its
    /// stacks are resolved.
    processes: BTreeMap<u32, TracedProcess>,
    /// Each process's perf map as last read (`None`: it has none, or it was refused).
    perf_maps: BTreeMap<u32, (Option<PerfMap>, Instant)>,
    /// kernelkite's own mount namespace (`None`: unknown, then every process is
    /// resolved as if in it).
    own_mount_namespace: Option<u64>,
    /// Roots of the other mount namespaces of traced processes, at most [`MAX_ROOTS`];
    /// one is dropped when no process known holds it.
    roots: BTreeMap<RootKey, Arc<Root>>,
    /// Refreshes of a process of another mount namespace that left it resolved as if
    /// in ours: [`MAX_ROOTS`] roots were held, or its root could not be opened (it
    /// exited in between). For `KERNELKITE_DEBUG_SIZES` only: `skipped_files` has no
    /// reason for it.
    roots_refused: u64,
    /// The last resolve of the session: a read past its deadline is then final.
    final_pass: bool,
    /// Bundle stack indices of user stacks that are truncated.
    truncated: std::collections::BTreeSet<u32>,
    /// A read for the stack being resolved is past its deadline: resolve it again
    /// at the next snapshot, when the read may have finished.
    read_pending: bool,
}

/// A copy no traced process maps, and its unwind information if it was read (`Some(None)`:
/// read, not an ELF).
type RetiredCopy = (FileCopy, Option<Option<Arc<ModuleInfo>>>);

/// A wait still in progress at a snapshot (or the blocks of a syscall that has not
/// returned, still waiting for their user stack), read from the thread's entry.
#[derive(Clone, Debug)]
pub struct InProgressWait {
    pub tgid: u32,
    pub tid: u32,
    /// Class id of the asleep part.
    pub class: u32,
    pub sleep_ns: u64,
    pub runq_ns: u64,
    /// Id in `USER_STACKS`, or NO_STACK.
    pub user_stack_id: i32,
    /// Key in `KERNEL_STACKS`, or 0.
    pub kernel_stack: u64,
    /// Its times are sampled estimates (pending sampled blocks).
    pub sampled: bool,
    /// The stacks read from /proc for a wait running since before attach (then
    /// `user_stack_id` and `kernel_stack` are not used).
    pub from_proc: Option<ProcStacks>,
}

/// The stacks of a thread blocked since before attach, read from /proc
/// ([`StackCollector::blocked_stacks`]): the unwound user stack and the interned kernel
/// stack, each when it could be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStacks {
    pub user: Option<UserStack>,
    pub kernel: Option<u32>,
}

/// What a traced process's stacks are resolved with.
struct TracedProcess {
    maps: Vec<FileMapping>,
    /// Executable mappings of no file (JIT code), as (start, end).
    anon_exec: Vec<(u64, u64)>,
    who: Credentials,
    /// Its pid in its own pid namespace (its perf map's name).
    ns_pid: u32,
    /// Its root, when its mount namespace is not kernelkite's: its files are read below
    /// it (its perf map always, its mapped files once it has exited).
    root: Option<Arc<Root>>,
    /// Whether the last refresh found it alive (its map_files then lead to its files).
    alive: bool,
    /// When `maps` were read (CLOCK_MONOTONIC ns, the clock of the BPF records).
    maps_read_ns: u64,
}

/// One file-backed mapping of /proc/<pid>/maps.
struct FileMapping {
    start: u64,
    end: u64,
    /// Mapped executable: a module for the unwinder.
    exec: bool,
    /// File offset of `start`.
    offset: u64,
    path: String,
    file: FileId,
}

/// A perf map's symbols: (start, end, name), sorted by start.
struct PerfMap(Vec<(u64, u64, String)>);

impl StackCollector {
    pub fn new(
        options: StackOptions,
        times: HashMap<MapData, StackKey, StackTime>,
        user_stacks: StackTraceMap<MapData>,
        kernel_stacks: HashMap<MapData, u64, KernelStack>,
    ) -> StackCollector {
        StackCollector {
            options,
            times,
            user_stacks,
            kernel_stacks,
            symbolizer: Symbolizer::new(),
            door: Door::new(read_deadline()),
            copies: StdHashMap::new(),
            copied_bytes: 0,
            retired: StdHashMap::new(),
            refused: BTreeMap::new(),
            skipped: BTreeMap::new(),
            frames: Interner::default(),
            stacks_past_frame_cap: 0,
            stacks: Interner::default(),
            user_resolved: BTreeMap::new(),
            kernel_resolved: BTreeMap::new(),
            wanted_user: Vec::new(),
            in_progress: Vec::new(),
            blocked: BTreeMap::new(),
            unwound: Interner::default(),
            copied_times: BTreeMap::new(),
            pending_copies: StdHashMap::new(),
            copies_dropped: 0,
            copies_short: 0,
            copies_unwound: 0,
            unwind_ns: 0,
            module_info: StdHashMap::new(),
            unwinders: BTreeMap::new(),
            deferred: Vec::new(),
            deferred_held: 0,
            unwind_cache: UnwindCache::new(),
            maps_read_at: BTreeMap::new(),
            debug_files: StdHashMap::new(),
            truncated: std::collections::BTreeSet::new(),
            module_build_ids: std::collections::BTreeSet::new(),
            processes: BTreeMap::new(),
            perf_maps: BTreeMap::new(),
            own_mount_namespace: untrusted::mount_namespace(None),
            roots: BTreeMap::new(),
            roots_refused: 0,
            final_pass: false,
            read_pending: false,
        }
    }

    /// Entries of each long-lived structure, for `KERNELKITE_DEBUG_SIZES` (what grows
    /// over a long session).
    pub fn sizes(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("stack_frames", self.frames.len() as u64),
            ("stacks", self.stacks.len() as u64),
            ("user_resolved", self.user_resolved.len() as u64),
            ("kernel_resolved", self.kernel_resolved.len() as u64),
            ("file_copies", self.copies.len() as u64),
            ("file_copies_kib", self.copied_bytes >> 10),
            ("retired_copies", self.retired.len() as u64),
            ("refused", self.refused.len() as u64),
            ("skipped", self.skipped.len() as u64),
            ("module_build_ids", self.module_build_ids.len() as u64),
            ("wanted_user", self.wanted_user.len() as u64),
            ("unwound", self.unwound.len() as u64),
            ("copied_times", self.copied_times.len() as u64),
            ("pending_copies", self.pending_copies.len() as u64),
            ("module_info", self.module_info.len() as u64),
            ("unwinders", self.unwinders.len() as u64),
            ("maps_read_at", self.maps_read_at.len() as u64),
            ("debug_files", self.debug_files.len() as u64),
            ("stack_processes", self.processes.len() as u64),
            ("perf_maps", self.perf_maps.len() as u64),
            ("mount_roots", self.roots.len() as u64),
            ("mount_roots_refused", self.roots_refused),
            ("truncated", self.truncated.len() as u64),
            ("deferred_copies", self.deferred.len() as u64),
            ("deferred_copies_held", self.deferred_held as u64),
            ("stacks_past_frame_cap", self.stacks_past_frame_cap),
        ]
    }

    /// Remember the file mappings and credentials of these (live, traced) processes;
    /// every other one known is marked as exited.
    pub fn refresh_maps(&mut self, pids: impl IntoIterator<Item = u32>) {
        for p in self.processes.values_mut() {
            p.alive = false;
        }
        for pid in pids {
            self.refresh_process(pid);
        }
    }

    /// Read one process's mappings again; its unwinder is rebuilt if they changed.
    fn refresh_process(&mut self, pid: u32) {
        let maps_read_ns = super::session::monotonic_ns();
        // A zombie's maps are empty: keep what it had while it lived.
        let Some((maps, anon_exec)) = file_mappings(pid).filter(|f| !f.0.is_empty()) else {
            return;
        };
        let Some(status) = ProcessStatus::of_process(pid) else {
            return;
        };
        let root = self.root_of(pid);
        let same = self.processes.get(&pid).is_some_and(|p| {
            p.maps.len() == maps.len()
                && (p.maps.iter().zip(&maps)).all(|(a, b)| {
                    (a.start, a.end, a.offset, a.file) == (b.start, b.end, b.offset, b.file)
                })
        });
        if !same {
            self.unwinders.remove(&pid);
        }
        self.processes.insert(
            pid,
            TracedProcess {
                maps,
                anon_exec,
                who: status.who,
                ns_pid: status.ns_pid,
                root,
                alive: true,
                maps_read_ns,
            },
        );
    }

    /// The root to read live process `pid`'s files below: `None` when it is in
    /// kernelkite's own mount namespace (its files are read as today, by host path) or
    /// its namespace cannot be told. One root is held per namespace (and root
    /// directory), opened when its first process is seen.
    fn root_of(&mut self, pid: u32) -> Option<Arc<Root>> {
        let ns = untrusted::mount_namespace(Some(pid))?;
        if Some(ns) == self.own_mount_namespace || self.own_mount_namespace.is_none() {
            return None;
        }
        // Most refreshes: the one it had, still its namespace.
        if let Some(root) = (self.processes.get(&pid)).and_then(|p| p.root.as_ref()) {
            if root.key().mount_namespace == ns {
                return Some(Arc::clone(root));
            }
        }
        let Some(opened) = Root::of_process(pid) else {
            self.roots_refused += 1;
            return None;
        };
        if let Some(held) = self.roots.get(&opened.key()) {
            return Some(Arc::clone(held));
        }
        if self.roots.len() >= MAX_ROOTS {
            self.roots_refused += 1;
            return None;
        }
        let root = Arc::new(opened);
        self.roots.insert(root.key(), Arc::clone(&root));
        Some(root)
    }

    /// A STACK_COPY or STACK_PERIOD record (`stack`: the bytes after the record).
    /// Returns the unwound stack of a copy without times (a slow call's, or a
    /// switch-out's waiting for its period).
    pub fn take_capture(&mut self, r: &StackCaptureRecord, stack: &[u8]) {
        if r.kind == record_kind::STACK_PERIOD {
            // Kept: more periods of one syscall come with the copy its switch-out sent.
            match self.pending_copies.get(&r.tid).copied() {
                Some((at, index)) if at == r.capture_ns => self.add_copied_time(r, index),
                // Its copy was dropped here (bounds): the time with it.
                _ => self.copies_dropped += 1,
            }
            return;
        }
        let Some(index) = self.unwind_copy(r, stack) else {
            self.copies_dropped += 1;
            return;
        };
        if r.class == NO_CLASS {
            if self.pending_copies.len() >= MAX_PENDING_COPIES {
                self.pending_copies.clear();
            }
            self.pending_copies.insert(r.tid, (r.capture_ns, index));
        } else {
            self.add_copied_time(r, index);
        }
    }

    /// The copied stack of `tid`'s slow call that started at `start_ns` (sent just
    /// before the call's record).
    pub fn take_slow_copy(&mut self, tid: u32, start_ns: u64) -> Option<UserStack> {
        match self.pending_copies.get(&tid) {
            Some(&(at, index)) if at == start_ns => {
                self.pending_copies.remove(&tid);
                Some(UserStack::Unwound(index))
            }
            _ => None,
        }
    }

    fn add_copied_time(&mut self, r: &StackCaptureRecord, index: u32) {
        let mut add = |class: u32, ns: u64| {
            if ns == 0 {
                return true;
            }
            let key = (r.tgid, r.tid, class, index, r.kernel_stack);
            if self.copied_times.len() >= MAX_COPIED_TIMES && !self.copied_times.contains_key(&key)
            {
                return false;
            }
            let t = self.copied_times.entry(key).or_default();
            if r.flags & copy_flags::SAMPLED != 0 {
                t.estimated_ns += ns;
                t.sampled_count += r.count;
            } else {
                t.total_ns += ns;
                t.count += r.count;
            }
            true
        };
        let kept = add(r.class, r.class_ns) & add(LatencyClass::Runqueue as u32, r.runq_ns);
        if !kept {
            self.copies_dropped += 1;
        }
    }

    /// Unwind one copy into an interned stack; `None` when it gives no frame or the
    /// stacks kept are at their bound.
    fn unwind_copy(&mut self, r: &StackCaptureRecord, stack: &[u8]) -> Option<u32> {
        self.copies_unwound += 1;
        if r.flags & copy_flags::SHORT != 0 {
            self.copies_short += 1;
        }
        let copy = CopiedStack {
            ip: r.ip,
            sp: r.sp,
            bp: r.bp,
            stack: &stack[..stack.len().min(r.stack_len as usize)],
        };
        let started = Instant::now();
        let unwound = self.unwind(r.tgid, &copy);
        self.unwind_ns += started.elapsed().as_nanos() as u64;
        unwound
    }

    /// Unwind `copy` of a stack of `pid` into an interned stack; `None` when it gives
    /// no frame or the stacks kept are at their bound.
    fn unwind(&mut self, pid: u32, copy: &CopiedStack) -> Option<u32> {
        // An address in no mapping read so far is in one mapped since (a library
        // loaded, a process caught while ld.so mapped its libraries): the unwinder has
        // no rule for it and would fall back to the frame pointer, which in code built
        // without one ends or derails the stack. So the mappings are read again, and
        // the copy unwound again with them: at once for the leaf (the copy's own
        // instruction pointer), and at most every MAPS_REREAD for a caller (a
        // frame-pointer walk through code without one makes up addresses that no
        // mapping will ever hold).
        if !self.mapped(pid, copy.ip) && self.reread_due(pid, LEAF_MAPS_REREAD) {
            self.refresh_process(pid);
        }
        // With every file's unwind information at hand: a caller in no mapping read so
        // far has the mappings read again. If they changed, the unwinder is built
        // again, and the file just mapped (a library loaded) may be one still being
        // read: then the copy waits for it as below, not unwound by frame pointer
        // through the library (that cut a dlopen'ed library's caller when its read
        // passed the deadline on a loaded machine).
        let mut unwound = None;
        if self.unwinder_ready(pid) {
            let first = self.unwinders[&pid].unwind(&mut self.unwind_cache, copy);
            let stale = first.0.iter().skip(1).any(|&a| !self.mapped(pid, a));
            if stale && self.reread_due(pid, MAPS_REREAD) {
                self.refresh_process(pid);
            }
            if self.unwinders.contains_key(&pid) {
                unwound = Some(first);
            }
        }
        // A file of the process still being read (the door reads one file per user at
        // a time; node's 90 MB binary takes seconds on a loaded machine): without its
        // unwind information the unwinder would fall back to the frame pointer there
        // and end the stack. The copy waits for it, and is unwound when its stack is
        // resolved (at a snapshot, or at the end, when every read has ended).
        if unwound.is_none()
            && self.deferred_held < MAX_DEFERRED_COPIES
            && self.deferred.len() < MAX_DEFERRED
            && !self.unwinder_ready(pid)
        {
            // The copy may be unwound after the process has exited, when its mappings
            // can no longer be read: a library it mapped since the last read (dlopen
            // right before the block this copy stands for) is noted now, while it can.
            if self.reread_due(pid, MAPS_REREAD) {
                self.refresh_process(pid);
            }
            let k = self.deferred.len() as u32;
            self.deferred.push(DeferredCopy {
                pid,
                ip: copy.ip,
                sp: copy.sp,
                bp: copy.bp,
                bytes: copy.stack.to_vec(),
                unwound: None,
            });
            self.deferred_held += 1;
            return Some(DEFERRED | k);
        }
        match unwound {
            Some((addrs, cut)) => self.intern_unwound(pid, addrs, cut),
            None => self.unwind_now(pid, copy),
        }
    }

    /// [`StackCollector::unwind`] with the unwinder there is now.
    fn unwind_now(&mut self, pid: u32, copy: &CopiedStack) -> Option<u32> {
        let mut unwound = self.unwind_with_known_maps(pid, copy);
        let stale = unwound.0.iter().skip(1).any(|&a| !self.mapped(pid, a));
        if stale && self.reread_due(pid, MAPS_REREAD) {
            self.refresh_process(pid);
            if !self.unwinders.contains_key(&pid) {
                // The mappings changed: unwind with the new ones.
                unwound = self.unwind_with_known_maps(pid, copy);
            }
        }
        self.intern_unwound(pid, unwound.0, unwound.1)
    }

    /// The interned stack of unwound stack `i`, unwinding a deferred copy now if its
    /// process's files have been read (or this is the final pass, when every read
    /// has ended). `Err` while a read is still under way.
    fn settle(&mut self, i: u32) -> Result<Option<u32>, ()> {
        if i & DEFERRED == 0 {
            return Ok(Some(i));
        }
        let k = (i & !DEFERRED) as usize;
        let Some(d) = self.deferred.get(k) else {
            return Ok(None);
        };
        if let Some(done) = d.unwound {
            return Ok(done);
        }
        if !self.final_pass && !self.unwinder_ready(d.pid) {
            return Err(());
        }
        Ok(self.unwind_deferred(k, true))
    }

    /// Unwind deferred copy `k` now: with the mappings read again if they look stale
    /// (`reread`), else with the unwinder built already, without reading anything (a
    /// frame-pointer walk if there is none).
    fn unwind_deferred(&mut self, k: usize, reread: bool) -> Option<u32> {
        let d = &mut self.deferred[k];
        let bytes = std::mem::take(&mut d.bytes);
        let (pid, ip, sp, bp) = (d.pid, d.ip, d.sp, d.bp);
        self.deferred_held -= 1;
        let copy = CopiedStack {
            ip,
            sp,
            bp,
            stack: &bytes,
        };
        let started = Instant::now();
        let done = if reread {
            self.unwind_now(pid, &copy)
        } else {
            let (addrs, cut) = match self.unwinders.get(&pid) {
                Some(unwinder) => unwinder.unwind(&mut self.unwind_cache, &copy),
                None => ProcessUnwinder::new().unwind(&mut self.unwind_cache, &copy),
            };
            self.intern_unwound(pid, addrs, cut)
        };
        self.unwind_ns += started.elapsed().as_nanos() as u64;
        self.deferred[k].unwound = Some(done);
        done
    }

    /// Process `pid` ran exec at `exec_ns` (CLOCK_MONOTONIC): what was learned from
    /// the mappings read before it (its unwinder, its files' refusals) belonged to the
    /// program it was (under `run`, kernelkite's own fork held at the gate), not to the
    /// one it is now, which may map the same files (libc) and must have them read for
    /// it. Mappings read since (a snapshot reads /proc as things are, the ring's
    /// records may lag behind) are kept. Its copies still waiting for a read are
    /// unwound first, with what was built for the old program (no file is read for it
    /// now).
    pub fn on_exec(&mut self, pid: u32, exec_ns: u64) {
        let stale = |read_ns: u64| read_ns <= exec_ns;
        if (self.processes.get(&pid)).is_some_and(|p| stale(p.maps_read_ns)) {
            for k in 0..self.deferred.len() {
                if self.deferred[k].pid == pid && self.deferred[k].unwound.is_none() {
                    self.unwind_deferred(k, false);
                }
            }
            self.processes.remove(&pid);
            self.perf_maps.remove(&pid);
            self.maps_read_at.remove(&pid);
        }
        self.unwinders.remove(&pid);
        (self.refused).retain(|&(p, _), &mut read_ns| p != pid || !stale(read_ns));
    }

    fn unwind_with_known_maps(&mut self, pid: u32, copy: &CopiedStack) -> (Vec<u64>, Option<Cut>) {
        match self.incomplete_unwinder(pid) {
            // A file's read is still under way (the door allows one per user at a time,
            // and a large one can take seconds on a loaded machine): unwind with what
            // there is; it is built again for the next copy, so the file's unwind
            // information is used once it arrives.
            Some(partial) => partial.unwind(&mut self.unwind_cache, copy),
            None => self.unwinders[&pid].unwind(&mut self.unwind_cache, copy),
        }
    }

    /// Whether `pid`'s unwinder has every file's unwind information it can have (no
    /// read still under way); it is built, and kept, when so.
    fn unwinder_ready(&mut self, pid: u32) -> bool {
        self.incomplete_unwinder(pid).is_none()
    }

    /// `pid`'s unwinder when a read of one of its files is still under way; `None`
    /// when the complete one is kept in `unwinders` (built now if it was not).
    fn incomplete_unwinder(&mut self, pid: u32) -> Option<ProcessUnwinder> {
        if self.unwinders.contains_key(&pid) {
            return None;
        }
        let (unwinder, complete) = self.build_unwinder(pid);
        if !complete {
            return Some(unwinder);
        }
        self.unwinders.insert(pid, unwinder);
        None
    }

    /// Whether `addr` lies in a mapping of `pid` read so far (a file's, or anonymous
    /// executable memory).
    fn mapped(&self, pid: u32, addr: u64) -> bool {
        self.processes.get(&pid).is_some_and(|p| {
            locate(&p.maps, addr).is_some()
                || (p.anon_exec.iter()).any(|&(start, end)| (start..end).contains(&addr))
        })
    }

    /// Whether `pid`'s mappings were last read at least `every` ago (or never); if so,
    /// the read about to happen is noted.
    fn reread_due(&mut self, pid: u32, every: Duration) -> bool {
        let due = (self.maps_read_at.get(&pid)).is_none_or(|t| t.elapsed() >= every);
        if due {
            self.maps_read_at.insert(pid, Instant::now());
        }
        due
    }

    /// Intern an unwound stack; `None` when it has no frame or the stacks kept are at
    /// their bound.
    fn intern_unwound(&mut self, pid: u32, addrs: Vec<u64>, cut: Option<Cut>) -> Option<u32> {
        if addrs.is_empty() {
            return None;
        }
        let unwound = Unwound { pid, addrs, cut };
        if let Some(i) = self.unwound.get(&unwound) {
            return Some(i);
        }
        if self.unwound.len() >= MAX_UNWOUND_STACKS {
            return None;
        }
        Some(self.unwound.insert(unwound))
    }

    /// An unwinder with a module for every executable file mapping of `pid` whose file
    /// the door gives us (the others are unwound by frame pointer).
    /// Whether every file was read, or refused for good: `false` while a read is
    /// still under way.
    fn build_unwinder(&mut self, pid: u32) -> (ProcessUnwinder, bool) {
        let mut unwinder = ProcessUnwinder::new();
        let mut complete = true;
        let count = self.processes.get(&pid).map_or(0, |p| p.maps.len());
        for m in 0..count {
            let p = &self.processes[&pid];
            if !p.maps[m].exec {
                continue;
            }
            let (start, end, offset, path) = (
                p.maps[m].start,
                p.maps[m].end,
                p.maps[m].offset,
                p.maps[m].path.clone(),
            );
            match self.module_info(pid, m) {
                Some(info) => unwinder.add_module(&path, start..end, offset, &info),
                None => {
                    // Neither parsed (`module_info` keeps every file it read) nor
                    // refused: its read is pending.
                    let file = self.processes[&pid].maps[m].file;
                    complete &= self.module_info.contains_key(&file)
                        || self.refused.contains_key(&(pid, file));
                }
            }
        }
        (unwinder, complete)
    }

    /// The unwind information (and build-id) of the file `pid` mapped at mapping `m`.
    fn module_info(&mut self, pid: u32, m: usize) -> Option<Arc<ModuleInfo>> {
        let file = self.processes.get(&pid)?.maps.get(m)?.file;
        if let Some(info) = self.module_info.get(&file) {
            return info.clone();
        }
        let copy = self.copy_of(pid, m)?;
        let info = self.copies[&copy]
            .bytes()
            .and_then(|b| ModuleInfo::parse(&b))
            .map(Arc::new);
        self.module_info.insert(file, info.clone());
        info
    }

    /// A slow syscall's user stack: resolve it with the others, while its process lives.
    pub fn want_user_stack(&mut self, pid: u32, stack: UserStack) {
        if stack != UserStack::Walked(NO_STACK) && stack != UserStack::Walked(COPIED_STACK) {
            self.wanted_user.push((pid, stack));
        }
    }

    /// The stacks of `tid` of `tgid`, blocked in syscall `nr` since before attach with no
    /// event since (so no switch-out copied its stack), read from /proc the first time
    /// it is asked (`source::ebpf::blocked`) and kept while it stays in that wait; call
    /// [`StackCollector::keep_blocked`] with the threads still in theirs. `None` when
    /// /proc showed neither stack (it returned in between, or is not in a syscall).
    pub fn blocked_stacks(&mut self, tgid: u32, tid: u32, nr: u32) -> Option<ProcStacks> {
        if let Some(&(at, stacks)) = self.blocked.get(&tid) {
            if at == nr {
                return Some(stacks).filter(|s| s.user.is_some() || s.kernel.is_some());
            }
        }
        let read = super::blocked::read_blocked(tgid, tid, nr);
        let mut stacks = ProcStacks {
            user: None,
            kernel: None,
        };
        if let Some(b) = read {
            if !b.user.is_empty() {
                // The frame pointer is not in /proc: 0 makes a frame that needs it end
                // the unwind (marked truncated), never a guess.
                let copy = CopiedStack {
                    ip: b.ip,
                    sp: b.sp,
                    bp: 0,
                    stack: &b.user,
                };
                stacks.user = self.unwind_blocked(tgid, &copy).map(UserStack::Unwound);
            }
            if !b.kernel.is_empty() {
                let frames = (b.kernel.into_iter())
                    .map(|name| StackFrame {
                        addr: 0,
                        kernel: true,
                        module: Some("[kernel]".to_string()),
                        module_offset: None,
                        symbol: Some(name),
                        file: None,
                        line: None,
                    })
                    .collect();
                stacks.kernel = Some(self.intern(frames, false));
            }
        }
        self.blocked.insert(tid, (nr, stacks));
        Some(stacks).filter(|s| s.user.is_some() || s.kernel.is_some())
    }

    /// [`StackCollector::unwind`] of a stack read from /proc, with an unwinder of its
    /// own: the process's cached one is built by the copies, which may map more (a
    /// process still starting at attach).
    fn unwind_blocked(&mut self, pid: u32, copy: &CopiedStack) -> Option<u32> {
        if (self.processes.get(&pid)).is_none_or(|p| locate(&p.maps, copy.ip).is_none()) {
            self.refresh_process(pid);
        }
        let (unwinder, _) = self.build_unwinder(pid);
        let (addrs, cut) = unwinder.unwind(&mut self.unwind_cache, copy);
        self.intern_unwound(pid, addrs, cut)
    }

    /// Forget the /proc stacks of threads no longer in their first wait.
    pub fn keep_blocked(&mut self, tids: &std::collections::BTreeSet<u32>) {
        self.blocked.retain(|tid, _| tids.contains(tid));
    }

    /// The waits in progress now (replacing the last snapshot's): their stacks are
    /// resolved with the others, and their time so far is in the profile, marked so.
    pub fn set_in_progress(&mut self, waits: Vec<InProgressWait>) {
        for w in &waits {
            let stack = self.wait_stack(w);
            self.want_user_stack(w.tgid, stack);
        }
        self.in_progress = waits;
    }

    /// A wait's user stack: its frame-pointer walk, or the copy its switch-out sent
    /// (the thread's latest copy, joined on its tid).
    fn wait_stack(&self, w: &InProgressWait) -> UserStack {
        match w.from_proc {
            Some(p) => p.user.unwrap_or(UserStack::Walked(NO_STACK)),
            None => self.thread_stack(w.tid, w.user_stack_id),
        }
    }

    /// Whether a thread's state names a stack this collector has: a walked one, or
    /// (`COPIED_STACK`) a copy that arrived and was unwound.
    pub fn has_thread_stack(&self, tid: u32, id: i32) -> bool {
        !matches!(
            self.thread_stack(tid, id),
            UserStack::Walked(NO_STACK | COPIED_STACK)
        )
    }

    /// A thread's user stack as its state names it (`COPIED_STACK`: its latest copy).
    pub fn thread_stack(&self, tid: u32, id: i32) -> UserStack {
        match self.pending_copies.get(&tid) {
            Some(&(_, index)) if id == COPIED_STACK => UserStack::Unwound(index),
            _ => UserStack::Walked(id),
        }
    }

    /// The bundle stack index of a resolved user stack.
    pub fn user_stack_index(&self, pid: u32, stack: UserStack) -> Option<u32> {
        self.user_resolved.get(&(pid, stack)).copied().flatten()
    }

    /// Resolve the stacks captured since the last call, for at most
    /// [`RESOLVE_BUDGET`]. Called at every snapshot, so a process's stacks are
    /// resolved while it is alive.
    pub fn resolve_new(&mut self) {
        self.resolve(Instant::now() + RESOLVE_BUDGET, false);
    }

    /// Resolve every stack left: with symbols for [`FINAL_BUDGET`], then the rest with
    /// addresses and `module+0xoffset` only (no file is read).
    pub fn resolve_final(&mut self) {
        self.final_pass = true;
        let until = Instant::now() + FINAL_BUDGET;
        // Reads still under way are waited for, within the same budget.
        self.door.finish_by(until);
        if !self.resolve(until, false) {
            self.resolve(Instant::now(), true);
        }
    }

    /// Resolve new stacks until `until` (then, with `addresses_only`, without symbols).
    /// Returns whether every stack was resolved.
    fn resolve(&mut self, until: Instant, addresses_only: bool) -> bool {
        let keys: Vec<StackKey> = read_all(&self.times).into_iter().map(|(k, _)| k).collect();
        let mut wanted = std::mem::take(&mut self.wanted_user);
        let mut users: Vec<(u32, UserStack)> = (keys.iter())
            .filter(|k| k.user_stack_id >= 0)
            .map(|k| (k.tgid, UserStack::Walked(k.user_stack_id)))
            .collect();
        users.extend(
            (self.copied_times.keys()).map(|&(tgid, _, _, i, _)| (tgid, UserStack::Unwound(i))),
        );
        users.append(&mut wanted);
        users.sort_unstable();
        users.dedup();
        users.retain(|k| !self.user_resolved.contains_key(k));
        let mut complete = true;
        for (n, &(pid, id)) in users.iter().enumerate() {
            let symbols = !addresses_only && Instant::now() < until;
            if !symbols && !addresses_only {
                // Out of time: the rest waits for the next call.
                self.wanted_user.extend_from_slice(&users[n..]);
                complete = false;
                break;
            }
            self.read_pending = false;
            let index = self.resolve_user(pid, id, symbols);
            if self.read_pending {
                self.wanted_user.push((pid, id));
                complete = false;
                continue;
            }
            self.user_resolved.insert((pid, id), index);
        }
        let pending_kernel = self.in_progress.iter().map(|w| w.kernel_stack);
        let copied_kernel: Vec<u64> = self.copied_times.keys().map(|k| k.4).collect();
        let extra: Vec<u64> = pending_kernel.chain(copied_kernel).collect();
        for key in keys.iter().map(|k| k.kernel_stack).chain(extra) {
            if key != 0 && !self.kernel_resolved.contains_key(&key) {
                let index = self.resolve_kernel(key);
                self.kernel_resolved.insert(key, index);
            }
        }
        if complete {
            // Every stack of an exited process is resolved: its mappings are not needed.
            self.processes.retain(|_, p| p.alive);
            let processes = &self.processes;
            self.refused
                .retain(|(pid, _), _| processes.contains_key(pid));
            self.perf_maps.retain(|pid, _| processes.contains_key(pid));
            // A namespace's root is held while a process known is in it (or a read
            // below it is under way).
            self.roots.retain(|_, root| Arc::strong_count(root) > 1);
            self.unwinders.retain(|pid, _| processes.contains_key(pid));
            self.maps_read_at
                .retain(|pid, _| processes.contains_key(pid));
            // A copy is used for any mapping of its device and inode: keep only those
            // still mapped (an inode freed with its last mapping may be reused).
            let mapped: std::collections::HashSet<FileId> = (processes.values())
                .flat_map(|p| p.maps.iter().map(|m| m.file))
                .collect();
            let unmapped: Vec<FileId> = (self.copies.keys())
                .filter(|file| !mapped.contains(file))
                .copied()
                .collect();
            for file in unmapped {
                if let Some(copy) = self.copies.remove(&file) {
                    self.retired
                        .insert(file, (copy, self.module_info.remove(&file)));
                }
            }
            self.module_info.retain(|file, _| mapped.contains(file));
        }
        complete
    }

    /// The stack profile, from the final map contents (read after the programs are
    /// detached, so nothing changes under the read). `captures_lost` is the kernel's count.
    pub fn finish(mut self, captures_lost: u64, copies_lost: u64) -> StackProfile {
        self.resolve_final();
        self.profile_so_far(captures_lost, copies_lost)
    }

    /// The profile as it is now, the capture going on (live views): the stacks resolved
    /// so far (call [`StackCollector::resolve_new`] first; a stack captured since then
    /// counts as not captured) and the time per stack read from the map now.
    pub fn profile_so_far(&self, captures_lost: u64, copies_lost: u64) -> StackProfile {
        StackProfile {
            sample_hz: self.options.sample_hz,
            min_block_ns: self.options.min_block_ns,
            frames: self.frames.items().to_vec(),
            stacks: (self.stacks.items().iter())
                .map(|(frames, _)| frames.clone())
                .collect(),
            samples: self.samples(),
            captures_lost: captures_lost + self.copies_dropped,
            skipped_files: self.skipped_files(),
            truncated_stacks: self.truncated.iter().copied().collect(),
            modules: self.modules(),
            stack_copies: self.copies_unwound,
            stack_copies_short: self.copies_short,
            stack_copies_lost: copies_lost,
            unwind_ns: self.unwind_ns,
        }
    }

    /// Every file mapping a resolved stack touched, with its build-id.
    fn modules(&self) -> Vec<StackModule> {
        let mut modules: Vec<StackModule> = self.module_build_ids.iter().cloned().collect();
        modules.sort_by(|a, b| (&a.path, &a.build_id).cmp(&(&b.path, &b.build_id)));
        modules
    }

    fn skipped_files(&self) -> Vec<SkippedFile> {
        self.skipped
            .iter()
            .map(|((path, reason), &count)| SkippedFile {
                path: path.clone(),
                reason: reason.name().to_string(),
                count,
            })
            .collect()
    }

    /// Count a refusal; `false` for a read past its deadline that is asked again later.
    fn skip(&mut self, path: &str, reason: Skip) -> bool {
        if reason == Skip::TimedOut && !self.final_pass {
            self.read_pending = true;
            return false;
        }
        let mut key = (path.to_string(), reason);
        if self.skipped.len() >= MAX_SKIPPED_FILES && !self.skipped.contains_key(&key) {
            key.0 = OTHER_SKIPPED_FILES.to_string();
        }
        *self.skipped.entry(key).or_default() += 1;
        true
    }

    /// One sample per (thread, class, resolved user stack, resolved kernel stack), from
    /// the map's current contents.
    fn samples(&self) -> Vec<StackSample> {
        let walked = read_all(&self.times).into_iter().map(|(key, time)| {
            let user = UserStack::Walked(key.user_stack_id);
            ((key.tgid, key.tid, key.class, user, key.kernel_stack), time)
        });
        let copied = (self.copied_times.iter()).map(|(&(tgid, tid, class, i, kernel), &time)| {
            ((tgid, tid, class, UserStack::Unwound(i), kernel), time)
        });
        let mut samples: Vec<StackSample> = walked
            .chain(copied)
            .filter_map(|((tgid, tid, class, user, kernel), time)| {
                let class = LatencyClass::from_id(class)?;
                Some(StackSample {
                    pid: tgid as i32,
                    tid: tid as i32,
                    class: class.name().to_string(),
                    user_stack: self.user_stack_index(tgid, user),
                    kernel_stack: self.kernel_resolved.get(&kernel).copied().flatten(),
                    total_ns: time.total_ns,
                    count: time.count,
                    estimated_ns: time.estimated_ns,
                    sampled_count: time.sampled_count,
                    in_progress: false,
                })
            })
            .collect();
        for w in &self.in_progress {
            let Some(class) = LatencyClass::from_id(w.class) else {
                continue;
            };
            let kernel_stack = match w.from_proc {
                Some(p) => p.kernel,
                None => self.kernel_resolved.get(&w.kernel_stack).copied().flatten(),
            };
            for (class, ns) in [(class, w.sleep_ns), (LatencyClass::Runqueue, w.runq_ns)] {
                if ns == 0 {
                    continue;
                }
                let (total_ns, count, estimated_ns, sampled_count) = if w.sampled {
                    (0, 0, ns, 1)
                } else {
                    (ns, 1, 0, 0)
                };
                samples.push(StackSample {
                    pid: w.tgid as i32,
                    tid: w.tid as i32,
                    class: class.name().to_string(),
                    user_stack: self.user_stack_index(w.tgid, self.wait_stack(w)),
                    kernel_stack,
                    total_ns,
                    count,
                    estimated_ns,
                    sampled_count,
                    in_progress: true,
                });
            }
        }
        // Keys that resolved to the same stacks (e.g. a stack id whose process had gone)
        // are one sample.
        samples.sort_by(|a, b| {
            (
                a.pid,
                a.tid,
                &a.class,
                a.user_stack,
                a.kernel_stack,
                a.in_progress,
            )
                .cmp(&(
                    b.pid,
                    b.tid,
                    &b.class,
                    b.user_stack,
                    b.kernel_stack,
                    b.in_progress,
                ))
        });
        samples.dedup_by(|later, kept| {
            let same = (
                later.pid,
                later.tid,
                &later.class,
                later.user_stack,
                later.kernel_stack,
                later.in_progress,
            ) == (
                kept.pid,
                kept.tid,
                &kept.class,
                kept.user_stack,
                kept.kernel_stack,
                kept.in_progress,
            );
            if same {
                kept.total_ns += later.total_ns;
                kept.count += later.count;
                kept.estimated_ns += later.estimated_ns;
                kept.sampled_count += later.sampled_count;
            }
            same
        });
        samples
    }

    /// One user stack's frames: `module+0xoffset` from the process's mappings, names
    /// (with `symbols`) from its files and perf map read through the door.
    fn resolve_user(&mut self, pid: u32, stack: UserStack, symbols: bool) -> Option<u32> {
        let (addrs, truncated, cut) = match stack {
            UserStack::Walked(id) => {
                let trace = self.user_stacks.get(&(id as u32), 0).ok()?;
                let addrs: Vec<u64> = (trace.frames().iter())
                    .map(|f| f.ip)
                    .filter(|&ip| ip != 0)
                    .collect();
                // A frame-pointer walk (its copy was not sent) cannot tell whether it
                // skipped callers: it is marked truncated.
                (addrs, true, None)
            }
            UserStack::Unwound(i) => {
                let Ok(settled) = self.settle(i) else {
                    // Resolved again once the read has ended.
                    self.read_pending = true;
                    return None;
                };
                let u = self.unwound.items().get(settled? as usize)?;
                (u.addrs.clone(), u.cut.is_some(), u.cut)
            }
        };
        if addrs.is_empty() {
            return None;
        }
        let lookup = call_sites(&addrs);
        // (mapping index, file offset) of each address.
        let located: Vec<Option<(usize, u64)>> = match self.processes.get(&pid) {
            Some(p) => addrs.iter().map(|&a| locate(&p.maps, a)).collect(),
            None => vec![None; addrs.len()],
        };
        let mut frames: Vec<StackFrame> = addrs
            .iter()
            .zip(&located)
            .map(|(&addr, loc)| {
                let mapping = loc.map(|(m, off)| (&self.processes[&pid].maps[m], off));
                StackFrame {
                    addr,
                    kernel: false,
                    module: mapping.map(|(m, _)| m.path.clone()),
                    module_offset: mapping.map(|(_, off)| off),
                    symbol: None,
                    file: None,
                    line: None,
                }
            })
            .collect();
        if symbols {
            self.name_file_frames(pid, &mut frames, &located);
            let jit: Vec<usize> = (0..frames.len())
                .filter(|&i| located[i].is_none())
                .collect();
            if !jit.is_empty() {
                let misses = |map: &Option<PerfMap>| {
                    jit.iter()
                        .any(|&i| map.as_ref().and_then(|m| m.name(lookup[i])).is_none())
                };
                // Read again when it lacks an address (the runtime appends as it
                // compiles), at most every PERF_MAP_REREAD.
                let stale = match self.perf_maps.get(&pid) {
                    None => true,
                    Some((map, read_at)) => misses(map) && read_at.elapsed() >= PERF_MAP_REREAD,
                };
                if stale {
                    let map = self.read_perf_map(pid);
                    if !self.read_pending {
                        self.perf_maps.insert(pid, (map, Instant::now()));
                    }
                }
                if let Some((Some(perf_map), _)) = self.perf_maps.get(&pid) {
                    for (i, frame) in frames.iter_mut().enumerate() {
                        if located[i].is_some() {
                            continue;
                        }
                        if let Some(name) = perf_map.name(lookup[i]) {
                            frame.module = Some("[perf-map]".to_string());
                            frame.symbol = Some(name.to_string());
                        }
                    }
                }
            }
        }
        // A frame is a frame: a return address in no executable mapping (nor named by
        // the perf map) is not one, and the walk past it cannot be trusted, so the
        // stack ends there, with a frame saying why (the leaf is the instruction
        // pointer itself: kept). Without symbols the perf map was not read: only a
        // non-executable file mapping is known not to be code.
        let not_code = |i: usize| -> Option<Cut> {
            match located[i] {
                Some((m, _)) if !self.processes[&pid].maps[m].exec => Some(Cut::NotCode),
                Some(_) => None,
                None if !symbols || frames[i].module.is_some() => None,
                None => {
                    let jit = (self.processes.get(&pid).into_iter())
                        .flat_map(|p| p.anon_exec.iter())
                        .any(|&(start, end)| (start..end).contains(&addrs[i]));
                    Some(if jit {
                        Cut::JitWithoutPerfMap
                    } else {
                        Cut::NotCode
                    })
                }
            }
        };
        let bad = (1..frames.len()).find_map(|i| not_code(i).map(|c| (i, c)));
        let cut = match bad {
            Some((i, c)) => {
                frames.truncate(i);
                Some(c)
            }
            None => cut,
        };
        // A Go thread on its system stack (g0) ends at the switch from the goroutine,
        // whatever the unwinder found past it (issue 22).
        let go_g0 = frames
            .iter()
            .position(|f| f.symbol.as_deref().is_some_and(is_go_system_stack_root));
        let (truncated, cut) = match go_g0 {
            Some(i) => {
                frames.truncate(i + 1);
                (false, Some(Cut::GoSystemStack))
            }
            None => (truncated, cut),
        };
        // A stack the unwinder ended is complete only if it ends where a thread starts;
        // one ending at another named function stopped early (an unnamed end cannot be
        // judged, and is left as it is).
        let outermost = frames.last().and_then(|f| f.symbol.as_deref());
        let cut = match (cut, outermost) {
            (None, Some(name)) if !truncated && !is_thread_start(name) => {
                Some(Cut::BeforeThreadStart)
            }
            (cut, _) => cut,
        };
        if let Some(cut) = cut {
            frames.push(StackFrame {
                addr: 0,
                kernel: false,
                module: None,
                module_offset: None,
                symbol: Some(cut.frame_name().to_string()),
                file: None,
                line: None,
            });
        }
        let unknown = symbols
            && frames
                .iter()
                .any(|f| f.module.is_none() && f.symbol.is_none());
        let cut_truncates = cut.is_some_and(|c| c != Cut::GoSystemStack);
        Some(self.intern(frames, truncated || cut_truncates || unknown))
    }

    /// Names (and DWARF file:line) of the frames that fall in a file mapping, from a
    /// copy of the mapped file.
    fn name_file_frames(
        &mut self,
        pid: u32,
        frames: &mut [StackFrame],
        located: &[Option<(usize, u64)>],
    ) {
        // The frames of each mapped file, looked up together.
        let mut by_mapping: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, loc) in located.iter().enumerate() {
            if let Some((m, _)) = loc {
                by_mapping.entry(*m).or_default().push(i);
            }
        }
        for (m, indices) in by_mapping {
            let Some(file) = self.copy_of(pid, m) else {
                continue;
            };
            let info = self.module_info(pid, m);
            let build_id = info.as_ref().and_then(|i| i.build_id.clone());
            if self.module_build_ids.len() < MAX_SKIPPED_FILES {
                self.module_build_ids.insert(StackModule {
                    path: self.processes[&pid].maps[m].path.clone(),
                    build_id: build_id.as_deref().map(hex),
                });
            }
            let debug = build_id.and_then(|id| self.debug_file(pid, &id));
            let copy = &self.copies[&file];
            let offsets: Vec<u64> = indices
                .iter()
                .map(|&i| {
                    let off = located[i].map_or(0, |(_, off)| off);
                    if i == 0 {
                        off
                    } else {
                        off.saturating_sub(1)
                    }
                })
                .collect();
            // A separate debug file (found by build-id) has the names and lines the
            // stripped file lacks, at the file's virtual addresses.
            let svmas: Option<Vec<u64>> = match (&debug, &info) {
                (Some(_), Some(info)) => offsets.iter().map(|&o| info.svma_of(o)).collect(),
                _ => None,
            };
            let symbolized = match (
                debug.as_ref().and_then(|id| self.debug_files.get(id)),
                svmas,
            ) {
                (Some(Some(debug_copy)), Some(svmas)) => {
                    let src = Source::Elf(Elf::new(debug_copy.fd_path()));
                    self.symbolizer.symbolize(&src, Input::VirtOffset(&svmas))
                }
                _ => {
                    let mut elf = Elf::new(copy.fd_path());
                    elf.debug_syms = !copy.has_debug_link();
                    let src = Source::Elf(elf);
                    self.symbolizer.symbolize(&src, Input::FileOffset(&offsets))
                }
            }
            .unwrap_or_default();
            for (&i, sym) in indices.iter().zip(&symbolized) {
                let Symbolized::Sym(sym) = sym else {
                    continue;
                };
                let frame = &mut frames[i];
                frame.symbol = Some(sym.name.to_string());
                if let Some(code) = &sym.code_info {
                    let file = match &code.dir {
                        Some(dir) => dir.join(&*code.file).to_string_lossy().into_owned(),
                        None => code.file.to_string_lossy().into_owned(),
                    };
                    frame.file = Some(file);
                    frame.line = code.line;
                }
            }
        }
    }

    /// The key in `copies` of our copy of the file `pid` mapped at its mapping `m`;
    /// `None` when the door refused it (the refusal counted).
    fn copy_of(&mut self, pid: u32, m: usize) -> Option<FileId> {
        let p = self.processes.get(&pid)?;
        let mapping = &p.maps[m];
        let file = mapping.file;
        if self.copies.contains_key(&file) {
            return Some(file);
        }
        if self.refused.contains_key(&(pid, file)) {
            return None;
        }
        if file == VDSO_FILE {
            // The same kernel maps the same vDSO into every (native) process.
            let copy =
                untrusted::own_vdso().filter(|c| c.size_bytes() == mapping.end - mapping.start);
            return match copy {
                Some(copy) => {
                    self.copies.insert(file, copy);
                    Some(file)
                }
                None => {
                    self.refused.insert((pid, file), p.maps_read_ns);
                    None
                }
            };
        }
        let (who, alive, path, maps_read_ns) =
            (p.who, p.alive, mapping.path.clone(), p.maps_read_ns);
        // Once it has exited: the path as the process saw it, below its root when it
        // is in another mount namespace (the host's path there is another file, or none).
        let by_path = match &p.root {
            Some(root) => Place::InRoot {
                root: Arc::clone(root),
                path: PathBuf::from(&path),
            },
            None => Place::Path(PathBuf::from(&path)),
        };
        let rules = Rules {
            max_bytes: MAX_BINARY_BYTES,
            owner_is_target_or_root: false,
            file: Some(file),
        };
        let mapped = Place::Mapped {
            pid,
            start: mapping.start,
            end: mapping.end,
        };
        // Alive: the kernel's link to the very file mapped. Gone (or gone since): the
        // path, which must still name the same inode.
        let mut result = Err(Skip::Missing);
        if alive {
            result = self.door.copy(&mapped, rules, who);
        }
        if matches!(result, Err(Skip::Missing)) {
            result = self.door.copy(&by_path, rules, who);
        }
        match result {
            Ok(copy) => {
                if let Some((old, info)) = self.retired.remove(&file) {
                    if old.same_contents(&copy) {
                        // The copy the symbolizer has parsed already.
                        self.copies.insert(file, old);
                        if let Some(info) = info {
                            self.module_info.insert(file, info);
                        }
                        return Some(file);
                    }
                }
                if self.copied_bytes + copy.size_bytes() > MAX_COPIED_BYTES {
                    // Start afresh: blazesym's caches hold every copy they parsed.
                    self.symbolizer = Symbolizer::new();
                    self.copies.clear();
                    self.retired.clear();
                    self.copied_bytes = 0;
                }
                self.copied_bytes += copy.size_bytes();
                self.copies.insert(file, copy);
                Some(file)
            }
            Err(skip) => {
                if self.skip(&path, skip) {
                    self.refused.insert((pid, file), maps_read_ns);
                }
                None
            }
        }
    }

    /// The separate debug file of build-id `id` in the distribution's debug directory,
    /// copied through the door (root-owned files only); returns the key into
    /// `debug_files` when there is one.
    fn debug_file(&mut self, pid: u32, id: &[u8]) -> Option<Vec<u8>> {
        if id.len() < 2 {
            return None;
        }
        if !self.debug_files.contains_key(id) {
            let who = self.processes.get(&pid)?.who;
            let name = hex(id);
            let path = Path::new(BUILD_ID_DEBUG_DIR)
                .join(&name[..2])
                .join(format!("{}.debug", &name[2..]));
            let rules = Rules {
                max_bytes: MAX_DEBUG_FILE_BYTES,
                owner_is_target_or_root: true,
                file: None,
            };
            let copy = match self.door.copy(&Place::Path(path.clone()), rules, who) {
                Ok(copy) => Some(copy),
                Err(Skip::Missing) => None,
                Err(skip) => {
                    if !self.skip(&path.to_string_lossy(), skip) {
                        return None;
                    }
                    None
                }
            };
            self.debug_files.insert(id.to_vec(), copy);
        }
        self.debug_files[id].as_ref().map(|_| id.to_vec())
    }

    /// `pid`'s perf map, read through the door (owned by its uid or root); `None` when
    /// it has none or it was refused (counted).
    fn read_perf_map(&mut self, pid: u32) -> Option<PerfMap> {
        let p = self.processes.get(&pid)?;
        let who = p.who;
        // In another mount namespace: its own /tmp, and the pid it knows itself by.
        let place = match &p.root {
            Some(root) => Place::InRoot {
                root: Arc::clone(root),
                path: untrusted::perf_map_path(p.ns_pid),
            },
            None => Place::Path(untrusted::perf_map_path(pid)),
        };
        let rules = Rules {
            max_bytes: MAX_PERF_MAP_BYTES,
            owner_is_target_or_root: true,
            file: None,
        };
        match self.door.read(&place, rules, who) {
            Ok(bytes) => Some(PerfMap::parse(&bytes)),
            // Most processes have none.
            Err(Skip::Missing) => None,
            Err(skip) => {
                self.skip(&place.shown(), skip);
                None
            }
        }
    }

    fn resolve_kernel(&mut self, key: u64) -> Option<u32> {
        let stack = self.kernel_stacks.get(&key, 0).ok()?;
        let addrs: Vec<u64> = stack.iter().copied().take_while(|&ip| ip != 0).collect();
        if addrs.is_empty() {
            return None;
        }
        let lookup = call_sites(&addrs);
        let src = Source::Kernel(Kernel::default());
        let symbols = self
            .symbolizer
            .symbolize(&src, Input::AbsAddr(&lookup))
            .unwrap_or_default();
        let frames: Vec<StackFrame> = addrs
            .iter()
            .enumerate()
            .map(|(i, &addr)| StackFrame {
                addr,
                kernel: true,
                module: Some("[kernel]".to_string()),
                module_offset: None,
                symbol: match symbols.get(i) {
                    Some(Symbolized::Sym(sym)) => Some(sym.name.to_string()),
                    _ => None,
                },
                file: None,
                line: None,
            })
            .collect();
        drop(symbols);
        Some(self.intern(frames, false))
    }

    /// Intern a stack's frames, then the stack (a truncated one apart from the same
    /// frames complete); returns the stack's index.
    fn intern(&mut self, frames: Vec<StackFrame>, truncated: bool) -> u32 {
        let (ids, truncated) = match intern_frames(&mut self.frames, frames, MAX_INTERNED_FRAMES) {
            Some(ids) => (ids, truncated),
            None => {
                self.stacks_past_frame_cap += 1;
                (vec![self.intern_frame(past_cap_frame())], true)
            }
        };
        let i = self.intern_stack(ids, truncated);
        if truncated {
            self.truncated.insert(i);
        }
        i
    }

    fn intern_frame(&mut self, frame: StackFrame) -> u32 {
        match self.frames.get(&frame) {
            Some(i) => i,
            None => self.frames.insert(frame),
        }
    }

    fn intern_stack(&mut self, frame_ids: Vec<u32>, truncated: bool) -> u32 {
        let key = (frame_ids, truncated);
        match self.stacks.get(&key) {
            Some(i) => i,
            None => self.stacks.insert(key),
        }
    }
}

/// The frames' numbers in `interner`, adding the new ones; `None` (nothing added) when
/// the new ones would take it past `cap` items (one is left for [`past_cap_frame`]).
fn intern_frames(
    interner: &mut Interner<StackFrame>,
    frames: Vec<StackFrame>,
    cap: usize,
) -> Option<Vec<u32>> {
    let new = frames.iter().filter(|f| interner.get(f).is_none()).count();
    if new > 0 && interner.items().len() + new >= cap {
        return None;
    }
    Some(
        (frames.into_iter())
            .map(|f| match interner.get(&f) {
                Some(i) => i,
                None => interner.insert(f),
            })
            .collect(),
    )
}

/// The frame a stack past [`MAX_INTERNED_FRAMES`] is kept as.
fn past_cap_frame() -> StackFrame {
    StackFrame {
        addr: 0,
        kernel: false,
        module: None,
        module_offset: None,
        symbol: Some(FRAMES_PAST_CAP.to_string()),
        file: None,
        line: None,
    }
}

/// Items numbered in the order they came, each once. The index by hash holds a second
/// copy of no item (a churn of processes makes many frames and stacks, each process's
/// with its own addresses): the first item of each hash is found by its number, the
/// rare later ones with the same hash by value.
struct Interner<T> {
    items: Vec<T>,
    by_hash: StdHashMap<u64, u32>,
    collisions: StdHashMap<T, u32>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            items: Vec::new(),
            by_hash: StdHashMap::new(),
            collisions: StdHashMap::new(),
        }
    }
}

impl<T: std::hash::Hash + Eq + Clone> Interner<T> {
    fn get(&self, item: &T) -> Option<u32> {
        let first = *self.by_hash.get(&hash_of(item))?;
        if self.items[first as usize] == *item {
            return Some(first);
        }
        self.collisions.get(item).copied()
    }

    /// Add an item [`Interner::get`] does not find; its number.
    fn insert(&mut self, item: T) -> u32 {
        let i = self.items.len() as u32;
        if let Some(first) = self.by_hash.insert(hash_of(&item), i) {
            self.by_hash.insert(hash_of(&item), first);
            self.collisions.insert(item.clone(), i);
        }
        self.items.push(item);
        i
    }

    fn items(&self) -> &[T] {
        &self.items
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}

/// A 64-bit hash for the interning indices (equality is checked on the kept item).
fn hash_of(item: &impl std::hash::Hash) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(item)
}

impl PerfMap {
    /// perf's format, one symbol per line: `START SIZE name`, both numbers hex (an
    /// `0x` prefix allowed). Lines that do not parse are passed over; of two symbols at
    /// one address, the later (a JIT reusing the address) wins.
    fn parse(bytes: &[u8]) -> PerfMap {
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let text = String::from_utf8_lossy(bytes);
        let mut symbols: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ' ');
                let start = hex(parts.next()?)?;
                let size = hex(parts.next()?)?;
                let name = parts.next()?.trim();
                (size > 0 && !name.is_empty())
                    .then(|| (start, start.saturating_add(size), name.to_string()))
            })
            .collect();
        // Stable: among equal starts the later line ends up last, and is kept.
        symbols.sort_by_key(|s| s.0);
        let mut kept: Vec<(u64, u64, String)> = Vec::with_capacity(symbols.len());
        for s in symbols {
            match kept.last_mut() {
                Some(last) if last.0 == s.0 => *last = s,
                _ => kept.push(s),
            }
        }
        PerfMap(kept)
    }

    fn name(&self, addr: u64) -> Option<&str> {
        let i = self.0.partition_point(|s| s.0 <= addr).checked_sub(1)?;
        let (_, end, name) = &self.0[i];
        (addr < *end).then_some(name.as_str())
    }
}

/// Lower-case hex of a build-id.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The file-backed mappings of a live process.
type AnonExec = Vec<(u64, u64)>;

/// A live process's file-backed mappings, and its executable mappings of no file.
fn file_mappings(pid: u32) -> Option<(Vec<FileMapping>, AnonExec)> {
    use procfs::process::MMapPath;
    let maps = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.maps())
        .ok()?;
    let anon_exec = (maps.iter())
        .filter(|m| m.perms.contains(procfs::process::MMPermissions::EXECUTE))
        .filter(|m| {
            matches!(
                m.pathname,
                MMapPath::Anonymous | MMapPath::Heap | MMapPath::Other(_)
            )
        })
        .map(|m| m.address)
        .collect();
    let files = maps
        .into_iter()
        .filter_map(|m| match m.pathname {
            // The kernel's code, not the process's: named from our own copy.
            MMapPath::Vdso => Some(FileMapping {
                start: m.address.0,
                end: m.address.1,
                exec: true,
                offset: 0,
                path: VDSO.to_string(),
                file: VDSO_FILE,
            }),
            MMapPath::Path(path) => Some(FileMapping {
                start: m.address.0,
                end: m.address.1,
                exec: m.perms.contains(procfs::process::MMPermissions::EXECUTE),
                offset: m.offset,
                path: path.to_string_lossy().into_owned(),
                file: FileId {
                    dev_major: m.dev.0 as u32,
                    dev_minor: m.dev.1 as u32,
                    inode: m.inode,
                },
            }),
            _ => None,
        })
        .collect();
    Some((files, anon_exec))
}

/// (index of the mapping, file offset) of `addr` in `maps`.
fn locate(maps: &[FileMapping], addr: u64) -> Option<(usize, u64)> {
    let i = maps.iter().position(|m| (m.start..m.end).contains(&addr))?;
    Some((i, addr - maps[i].start + maps[i].offset))
}

/// Addresses to look up: every frame but the leaf holds a return address, the
/// instruction after the call; one byte back is inside the call, so its line is the
/// call's line (and a call that ends a function still resolves to that function).
/// The functions at which Go's traceback stops on a thread's system stack (g0): the
/// switches from a goroutine's stack (`runtime.mcall`, `runtime.systemstack`) and the
/// thread's start (`runtime.mstart`; `mstart0`/`mstart1` are called by it).
fn is_go_system_stack_root(symbol: &str) -> bool {
    matches!(
        symbol,
        "runtime.mcall" | "runtime.systemstack" | "runtime.mstart"
    )
}

/// The functions a thread's stack starts in: a process's entry point (glibc's and
/// musl's), the clone calls a thread starts in, and Go's goroutine and program starts.
fn is_thread_start(symbol: &str) -> bool {
    matches!(
        symbol,
        "_start"
            | "__start"
            | "_start_c"
            | "clone"
            | "clone3"
            | "__clone"
            | "__clone3"
            | "runtime.goexit"
            | "runtime.goexit.abi0"
            | "runtime.rt0_go"
            | "runtime.rt0_go.abi0"
            | "_rt0_amd64_linux"
    ) || is_go_system_stack_root(symbol)
}

fn call_sites(addrs: &[u64]) -> Vec<u64> {
    addrs
        .iter()
        .enumerate()
        .map(|(i, &a)| if i == 0 { a } else { a.saturating_sub(1) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_frame_cap_a_stack_adds_no_frame() {
        let frame = |addr: u64| StackFrame {
            addr,
            kernel: false,
            module: None,
            module_offset: None,
            symbol: None,
            file: None,
            line: None,
        };
        let mut interner = Interner::default();
        assert_eq!(
            intern_frames(&mut interner, vec![frame(1), frame(2)], 4),
            Some(vec![0, 1])
        );
        // Known frames still intern at the cap; two new ones would reach it.
        assert_eq!(
            intern_frames(&mut interner, vec![frame(3), frame(4)], 4),
            None
        );
        assert_eq!(interner.items().len(), 2);
        assert_eq!(
            intern_frames(&mut interner, vec![frame(2), frame(3), frame(1)], 4),
            Some(vec![1, 2, 0])
        );
        assert_eq!(intern_frames(&mut interner, vec![frame(5)], 4), None);
        assert_eq!(
            intern_frames(&mut interner, vec![frame(1)], 4),
            Some(vec![0])
        );
    }

    #[test]
    fn the_interner_numbers_each_item_once_also_when_hashes_collide() {
        /// Equal by value, every one with the same hash.
        #[derive(Clone, Debug, PartialEq, Eq)]
        struct Colliding(u32);
        impl std::hash::Hash for Colliding {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                state.write_u8(0);
            }
        }
        let mut interner = Interner::default();
        for round in 0..2 {
            for n in [5, 7, 5, 9] {
                let item = Colliding(n);
                let i = match interner.get(&item) {
                    Some(i) => i,
                    None => interner.insert(item.clone()),
                };
                assert_eq!(interner.items()[i as usize], item, "round {round}");
            }
        }
        assert_eq!(interner.items(), [Colliding(5), Colliding(7), Colliding(9)]);
        assert_eq!(interner.get(&Colliding(7)), Some(1));
        assert_eq!(interner.get(&Colliding(8)), None);
        let mut plain = Interner::default();
        assert_eq!(plain.insert("a"), 0);
        assert_eq!(plain.insert("b"), 1);
        assert_eq!((plain.get(&"b"), plain.len()), (Some(1), 2));
    }

    #[test]
    fn an_address_in_our_own_code_is_located_in_our_executable() {
        let (maps, _) = file_mappings(std::process::id()).expect("own maps");
        let addr = file_mappings as *const () as u64;
        let (i, offset) = locate(&maps, addr).expect("own code is file-backed");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(std::path::Path::new(&maps[i].path), exe);
        assert!(offset > 0 && offset < std::fs::metadata(&exe).unwrap().len());
        assert!(locate(&maps, 0).is_none());
        use std::os::unix::fs::MetadataExt;
        assert_eq!(maps[i].file.inode, std::fs::metadata(&exe).unwrap().ino());
    }

    #[test]
    fn return_addresses_are_looked_up_at_their_call() {
        assert_eq!(call_sites(&[100, 200, 300]), vec![100, 199, 299]);
        assert!(call_sites(&[]).is_empty());
    }

    #[test]
    fn perf_maps_name_the_latest_symbol_at_an_address() {
        let map = PerfMap::parse(
            b"1000 10 first\n0x2000 0x20 LazyCompile:*work /app.js:3\nzz 1 bad\n1000 8 again\n3000 0 empty\n",
        );
        assert_eq!(map.name(0x1004), Some("again"));
        assert_eq!(map.name(0x1008), None);
        assert_eq!(map.name(0x201f), Some("LazyCompile:*work /app.js:3"));
        assert_eq!(map.name(0x2020), None);
        assert_eq!(map.name(0xfff), None);
        assert_eq!(map.name(0x3000), None);
    }
}
