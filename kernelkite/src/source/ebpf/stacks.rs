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
//! Kernel frames: kallsyms. Files refused are counted in the profile's `skipped_files`.

use std::collections::{BTreeMap, HashMap as StdHashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use aya::maps::{HashMap, MapData, StackTraceMap};
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use kernelkite_common::bpf::{KernelStack, StackKey, StackTime, NO_STACK};
use kernelkite_common::LatencyClass;

use super::loader::StackOptions;
use super::map_batch::read_all;
use crate::model::{SkippedFile, StackFrame, StackProfile, StackSample};
use crate::source::untrusted::{self, Credentials, Door, FileCopy, FileId, Place, Rules, Skip};

/// Symbolizing at one snapshot stops after this long; the stacks not reached wait for
/// the next one. Keeps a signal's answer (trace's loop runs the snapshot) prompt.
const RESOLVE_BUDGET: Duration = Duration::from_millis(300);
/// At the end of a session: after this long, the stacks left keep their addresses and
/// `module+0xoffset` only, so a signal ends the session within a second.
const FINAL_BUDGET: Duration = Duration::from_millis(300);
/// One read through the door waits at most this long.
const READ_DEADLINE: Duration = Duration::from_millis(250);
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
    /// Mapped files the door refused, per process: not asked again.
    refused: BTreeMap<(u32, FileId), Skip>,
    /// (path, reason) → times refused: the profile's `skipped_files`.
    skipped: BTreeMap<(String, Skip), u64>,
    /// Interned frames and stacks, as they go into the bundle.
    frames: Vec<StackFrame>,
    frame_index: StdHashMap<StackFrame, u32>,
    stacks: Vec<Vec<u32>>,
    stack_index: StdHashMap<Vec<u32>, u32>,
    /// (pid, user stack id) → stack index, once resolved (`None`: the id held nothing).
    /// Bounded by the kernel's `STACK_TIMES` (one entry per key, never deleted) plus
    /// the slow calls' stacks.
    user_resolved: BTreeMap<(u32, i32), Option<u32>>,
    /// kernel stack key → stack index.
    kernel_resolved: BTreeMap<u64, Option<u32>>,
    /// User stacks wanted outside `STACK_TIMES` (slow syscalls, calls in progress).
    wanted_user: Vec<(u32, i32)>,
    /// The waits in progress at the latest snapshot.
    in_progress: Vec<InProgressWait>,
    /// Traced processes as last read. A process that has exited is dropped once its
    /// stacks are resolved.
    processes: BTreeMap<u32, TracedProcess>,
    /// Each process's perf map as last read (`None`: it has none, or it was refused).
    perf_maps: BTreeMap<u32, (Option<PerfMap>, Instant)>,
    /// The last resolve of the session: a read past its deadline is then final.
    final_pass: bool,
    /// A read for the stack being resolved is past its deadline: resolve it again
    /// at the next snapshot, when the read may have finished.
    read_pending: bool,
}

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
}

/// What a traced process's stacks are resolved with.
struct TracedProcess {
    maps: Vec<FileMapping>,
    who: Credentials,
    /// Whether the last refresh found it alive (its map_files then lead to its files).
    alive: bool,
}

/// One file-backed mapping of /proc/<pid>/maps.
struct FileMapping {
    start: u64,
    end: u64,
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
            door: Door::new(READ_DEADLINE),
            copies: StdHashMap::new(),
            copied_bytes: 0,
            refused: BTreeMap::new(),
            skipped: BTreeMap::new(),
            frames: Vec::new(),
            frame_index: StdHashMap::new(),
            stacks: Vec::new(),
            stack_index: StdHashMap::new(),
            user_resolved: BTreeMap::new(),
            kernel_resolved: BTreeMap::new(),
            wanted_user: Vec::new(),
            in_progress: Vec::new(),
            processes: BTreeMap::new(),
            perf_maps: BTreeMap::new(),
            final_pass: false,
            read_pending: false,
        }
    }

    /// Remember the file mappings and credentials of these (live, traced) processes;
    /// every other one known is marked as exited.
    pub fn refresh_maps(&mut self, pids: impl IntoIterator<Item = u32>) {
        for p in self.processes.values_mut() {
            p.alive = false;
        }
        for pid in pids {
            // A zombie's maps are empty: keep what it had while it lived.
            let Some(maps) = file_mappings(pid).filter(|f| !f.is_empty()) else {
                continue;
            };
            let Some(who) = Credentials::of_process(pid) else {
                continue;
            };
            self.processes.insert(
                pid,
                TracedProcess {
                    maps,
                    who,
                    alive: true,
                },
            );
        }
    }

    /// A slow syscall's user stack: resolve it with the others, while its process lives.
    pub fn want_user_stack(&mut self, pid: u32, id: i32) {
        if id != NO_STACK {
            self.wanted_user.push((pid, id));
        }
    }

    /// The waits in progress now (replacing the last snapshot's): their stacks are
    /// resolved with the others, and their time so far is in the profile, marked so.
    pub fn set_in_progress(&mut self, waits: Vec<InProgressWait>) {
        for w in &waits {
            self.want_user_stack(w.tgid, w.user_stack_id);
        }
        self.in_progress = waits;
    }

    /// The bundle stack index of a resolved user stack.
    pub fn user_stack_index(&self, pid: u32, id: i32) -> Option<u32> {
        self.user_resolved.get(&(pid, id)).copied().flatten()
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
        if !self.resolve(Instant::now() + FINAL_BUDGET, false) {
            self.resolve(Instant::now(), true);
        }
    }

    /// Resolve new stacks until `until` (then, with `addresses_only`, without symbols).
    /// Returns whether every stack was resolved.
    fn resolve(&mut self, until: Instant, addresses_only: bool) -> bool {
        let keys: Vec<StackKey> = read_all(&self.times).into_iter().map(|(k, _)| k).collect();
        let mut wanted = std::mem::take(&mut self.wanted_user);
        let mut users: Vec<(u32, i32)> = keys.iter().map(|k| (k.tgid, k.user_stack_id)).collect();
        users.append(&mut wanted);
        users.retain(|&(_, id)| id != NO_STACK);
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
        let pending_kernel: Vec<u64> = self.in_progress.iter().map(|w| w.kernel_stack).collect();
        for key in keys.iter().map(|k| k.kernel_stack).chain(pending_kernel) {
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
            // A copy is used for any mapping of its device and inode: keep only those
            // still mapped (an inode freed with its last mapping may be reused).
            let mapped: std::collections::HashSet<FileId> = (processes.values())
                .flat_map(|p| p.maps.iter().map(|m| m.file))
                .collect();
            self.copies.retain(|file, _| mapped.contains(file));
        }
        complete
    }

    /// The stack profile, from the final map contents (read after the programs are
    /// detached, so nothing changes under the read). `captures_lost` is the kernel's count.
    pub fn finish(mut self, captures_lost: u64) -> StackProfile {
        self.resolve_final();
        let samples = self.samples();
        let skipped_files = self.skipped_files();
        StackProfile {
            sample_hz: self.options.sample_hz,
            min_block_ns: self.options.min_block_ns,
            frames: self.frames,
            stacks: self.stacks,
            samples,
            captures_lost,
            skipped_files,
        }
    }

    /// The profile as it is now, the capture going on (live views): the stacks resolved
    /// so far (call [`StackCollector::resolve_new`] first; a stack captured since then
    /// counts as not captured) and the time per stack read from the map now.
    pub fn profile_so_far(&self, captures_lost: u64) -> StackProfile {
        StackProfile {
            sample_hz: self.options.sample_hz,
            min_block_ns: self.options.min_block_ns,
            frames: self.frames.clone(),
            stacks: self.stacks.clone(),
            samples: self.samples(),
            captures_lost,
            skipped_files: self.skipped_files(),
        }
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
        let mut samples: Vec<StackSample> = read_all(&self.times)
            .into_iter()
            .filter_map(|(key, time)| {
                let class = LatencyClass::from_id(key.class)?;
                Some(StackSample {
                    pid: key.tgid as i32,
                    tid: key.tid as i32,
                    class: class.name().to_string(),
                    user_stack: self.user_stack_index(key.tgid, key.user_stack_id),
                    kernel_stack: self
                        .kernel_resolved
                        .get(&key.kernel_stack)
                        .copied()
                        .flatten(),
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
            let kernel_stack = self.kernel_resolved.get(&w.kernel_stack).copied().flatten();
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
                    user_stack: self.user_stack_index(w.tgid, w.user_stack_id),
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
    fn resolve_user(&mut self, pid: u32, id: i32, symbols: bool) -> Option<u32> {
        let trace = self.user_stacks.get(&(id as u32), 0).ok()?;
        let addrs: Vec<u64> = trace
            .frames()
            .iter()
            .map(|f| f.ip)
            .filter(|&ip| ip != 0)
            .collect();
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
        Some(self.intern(frames))
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
            let mut elf = Elf::new(copy.fd_path());
            elf.debug_syms = !copy.has_debug_link();
            let src = Source::Elf(elf);
            let symbolized = self
                .symbolizer
                .symbolize(&src, Input::FileOffset(&offsets))
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
                    self.refused.insert((pid, file), Skip::Unreadable);
                    None
                }
            };
        }
        let (who, alive, path) = (p.who, p.alive, mapping.path.clone());
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
            result = self
                .door
                .copy(&Place::Path(PathBuf::from(&path)), rules, who);
        }
        match result {
            Ok(copy) => {
                if self.copied_bytes + copy.size_bytes() > MAX_COPIED_BYTES {
                    // Start afresh: blazesym's caches hold every copy they parsed.
                    self.symbolizer = Symbolizer::new();
                    self.copies.clear();
                    self.copied_bytes = 0;
                }
                self.copied_bytes += copy.size_bytes();
                self.copies.insert(file, copy);
                Some(file)
            }
            Err(skip) => {
                if self.skip(&path, skip) {
                    self.refused.insert((pid, file), skip);
                }
                None
            }
        }
    }

    /// `pid`'s perf map, read through the door (owned by its uid or root); `None` when
    /// it has none or it was refused (counted).
    fn read_perf_map(&mut self, pid: u32) -> Option<PerfMap> {
        let who = self.processes.get(&pid)?.who;
        let path = untrusted::perf_map_path(pid);
        let rules = Rules {
            max_bytes: MAX_PERF_MAP_BYTES,
            owner_is_target_or_root: true,
            file: None,
        };
        match self.door.read(&Place::Path(path.clone()), rules, who) {
            Ok(bytes) => Some(PerfMap::parse(&bytes)),
            // Most processes have none.
            Err(Skip::Missing) => None,
            Err(skip) => {
                self.skip(&path.to_string_lossy(), skip);
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
        Some(self.intern(frames))
    }

    /// Intern a stack's frames, then the stack; returns the stack's index.
    fn intern(&mut self, frames: Vec<StackFrame>) -> u32 {
        let ids: Vec<u32> = frames.into_iter().map(|f| self.intern_frame(f)).collect();
        self.intern_stack(ids)
    }

    fn intern_frame(&mut self, frame: StackFrame) -> u32 {
        if let Some(&i) = self.frame_index.get(&frame) {
            return i;
        }
        let i = self.frames.len() as u32;
        self.frame_index.insert(frame.clone(), i);
        self.frames.push(frame);
        i
    }

    fn intern_stack(&mut self, frame_ids: Vec<u32>) -> u32 {
        if let Some(&i) = self.stack_index.get(&frame_ids) {
            return i;
        }
        let i = self.stacks.len() as u32;
        self.stack_index.insert(frame_ids.clone(), i);
        self.stacks.push(frame_ids);
        i
    }
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

/// The file-backed mappings of a live process.
fn file_mappings(pid: u32) -> Option<Vec<FileMapping>> {
    use procfs::process::MMapPath;
    let maps = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.maps())
        .ok()?;
    Some(
        maps.into_iter()
            .filter_map(|m| match m.pathname {
                // The kernel's code, not the process's: named from our own copy.
                MMapPath::Vdso => Some(FileMapping {
                    start: m.address.0,
                    end: m.address.1,
                    offset: 0,
                    path: VDSO.to_string(),
                    file: VDSO_FILE,
                }),
                MMapPath::Path(path) => Some(FileMapping {
                    start: m.address.0,
                    end: m.address.1,
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
            .collect(),
    )
}

/// (index of the mapping, file offset) of `addr` in `maps`.
fn locate(maps: &[FileMapping], addr: u64) -> Option<(usize, u64)> {
    let i = maps.iter().position(|m| (m.start..m.end).contains(&addr))?;
    Some((i, addr - maps[i].start + maps[i].offset))
}

/// Addresses to look up: every frame but the leaf holds a return address, the
/// instruction after the call; one byte back is inside the call, so its line is the
/// call's line (and a call that ends a function still resolves to that function).
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
    fn an_address_in_our_own_code_is_located_in_our_executable() {
        let maps = file_mappings(std::process::id()).expect("own maps");
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
