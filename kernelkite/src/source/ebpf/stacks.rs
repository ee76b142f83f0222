//! `--stacks`: read the stacks the BPF programs captured (see kernelkite-ebpf's
//! `stacks` module) and resolve them to symbols with blazesym while their processes are
//! alive, so the bundle carries the names and reports never need the binaries.
//!
//! User frames: blazesym's process source (ELF symbols, DWARF file:line, PIE and shared
//! libraries through /proc/<pid>/maps, `.gnu_debuglink` and build-id debug files,
//! `/tmp/perf-<pid>.map` for JIT runtimes, files through /proc/<pid>/map_files so
//! containers resolve), plus its normalizer for `module+0xoffset` where a binary has no
//! symbols. Kernel frames: kallsyms.

use std::collections::{BTreeMap, HashMap as StdHashMap};

use aya::maps::{HashMap, MapData, StackTraceMap};
use blazesym::normalize::{Normalizer, UserMeta};
use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::Pid;
use kernelkite_common::bpf::{KernelStack, StackKey, StackTime, NO_STACK};
use kernelkite_common::LatencyClass;

use super::loader::StackOptions;
use super::map_batch::read_all;
use crate::model::{StackFrame, StackProfile, StackSample};

/// The captured stacks of a session and their resolved frames.
pub struct StackCollector {
    options: StackOptions,
    times: HashMap<MapData, StackKey, StackTime>,
    user_stacks: StackTraceMap<MapData>,
    kernel_stacks: HashMap<MapData, u64, KernelStack>,
    symbolizer: Symbolizer,
    normalizer: Normalizer,
    /// Interned frames and stacks, as they go into the bundle.
    frames: Vec<StackFrame>,
    frame_index: StdHashMap<StackFrame, u32>,
    stacks: Vec<Vec<u32>>,
    stack_index: StdHashMap<Vec<u32>, u32>,
    /// (pid, user stack id) → stack index, once resolved (`None`: the id held nothing).
    user_resolved: BTreeMap<(u32, i32), Option<u32>>,
    /// kernel stack key → stack index.
    kernel_resolved: BTreeMap<u64, Option<u32>>,
    /// User stacks wanted outside `STACK_TIMES` (slow syscalls).
    wanted_user: Vec<(u32, i32)>,
    /// The file mappings of every traced process as last read, to resolve the stacks
    /// of a process that exited before its stacks were resolved.
    maps: BTreeMap<u32, Vec<FileMapping>>,
}

/// One file-backed mapping of /proc/<pid>/maps.
struct FileMapping {
    start: u64,
    end: u64,
    /// File offset of `start`.
    offset: u64,
    path: String,
}

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
            normalizer: Normalizer::new(),
            frames: Vec::new(),
            frame_index: StdHashMap::new(),
            stacks: Vec::new(),
            stack_index: StdHashMap::new(),
            user_resolved: BTreeMap::new(),
            kernel_resolved: BTreeMap::new(),
            wanted_user: Vec::new(),
            maps: BTreeMap::new(),
        }
    }

    /// Remember the file mappings of these (live, traced) processes.
    pub fn refresh_maps(&mut self, pids: impl IntoIterator<Item = u32>) {
        for pid in pids {
            // A zombie's maps are empty: keep what it had while it lived.
            if let Some(files) = file_mappings(pid).filter(|f| !f.is_empty()) {
                self.maps.insert(pid, files);
            }
        }
    }

    /// (file, file offset) of `addr` in `pid`'s last-read mappings.
    fn cached_location(&self, pid: u32, addr: u64) -> Option<(String, u64)> {
        locate(self.maps.get(&pid)?, addr)
    }

    /// A slow syscall's user stack: resolve it with the others, while its process lives.
    pub fn want_user_stack(&mut self, pid: u32, id: i32) {
        if id != NO_STACK {
            self.wanted_user.push((pid, id));
        }
    }

    /// The bundle stack index of a resolved user stack.
    pub fn user_stack_index(&self, pid: u32, id: i32) -> Option<u32> {
        self.user_resolved.get(&(pid, id)).copied().flatten()
    }

    /// Resolve every stack captured since the last call. Called at every snapshot, so
    /// a process's stacks are resolved while it is alive.
    pub fn resolve_new(&mut self) {
        let keys: Vec<StackKey> = read_all(&self.times).into_iter().map(|(k, _)| k).collect();
        let wanted = std::mem::take(&mut self.wanted_user);
        for (pid, id) in keys.iter().map(|k| (k.tgid, k.user_stack_id)).chain(wanted) {
            if id != NO_STACK && !self.user_resolved.contains_key(&(pid, id)) {
                let index = self.resolve_user(pid, id);
                self.user_resolved.insert((pid, id), index);
            }
        }
        for key in keys.iter().map(|k| k.kernel_stack) {
            if key != 0 && !self.kernel_resolved.contains_key(&key) {
                let index = self.resolve_kernel(key);
                self.kernel_resolved.insert(key, index);
            }
        }
    }

    /// The stack profile, from the final map contents (read after the programs are
    /// detached, so nothing changes under the read). `captures_lost` is the kernel's count.
    pub fn finish(mut self, captures_lost: u64) -> StackProfile {
        self.resolve_new();
        let samples = self.samples();
        StackProfile {
            sample_hz: self.options.sample_hz,
            min_block_ns: self.options.min_block_ns,
            frames: self.frames,
            stacks: self.stacks,
            samples,
            captures_lost,
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
        }
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
                })
            })
            .collect();
        // Keys that resolved to the same stacks (e.g. a stack id whose process had gone)
        // are one sample.
        samples.sort_by(|a, b| {
            (a.pid, a.tid, &a.class, a.user_stack, a.kernel_stack).cmp(&(
                b.pid,
                b.tid,
                &b.class,
                b.user_stack,
                b.kernel_stack,
            ))
        });
        samples.dedup_by(|later, kept| {
            let same = (
                later.pid,
                later.tid,
                &later.class,
                later.user_stack,
                later.kernel_stack,
            ) == (
                kept.pid,
                kept.tid,
                &kept.class,
                kept.user_stack,
                kept.kernel_stack,
            );
            if same {
                kept.total_ns += later.total_ns;
                kept.count += later.count;
            }
            same
        });
        samples
    }

    fn resolve_user(&mut self, pid: u32, id: i32) -> Option<u32> {
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
        let pid_b = Pid::from(pid);
        let normalized = self.normalizer.normalize_user_addrs(pid_b, &addrs).ok();
        let src = Source::Process(Process::new(pid_b));
        let symbols = self
            .symbolizer
            .symbolize(&src, Input::AbsAddr(&lookup))
            .unwrap_or_default();
        let mut frames = Vec::with_capacity(addrs.len());
        for (i, &addr) in addrs.iter().enumerate() {
            let live = normalized.as_ref().and_then(|n| {
                match n.outputs.get(i).map(|&(off, meta)| (off, n.meta.get(meta))) {
                    Some((off, Some(UserMeta::Elf(elf)))) => {
                        Some((elf.path.to_string_lossy().into_owned(), off))
                    }
                    _ => None,
                }
            });
            // The process may have exited: then its mappings as last read.
            let (module, module_offset) = match live.or_else(|| self.cached_location(pid, addr)) {
                Some((path, off)) => (Some(path), Some(off)),
                None => (None, None),
            };
            let mut frame = StackFrame {
                addr,
                kernel: false,
                module,
                module_offset,
                symbol: None,
                file: None,
                line: None,
            };
            let from_file;
            let symbol = match symbols.get(i) {
                Some(sym @ Symbolized::Sym(_)) => Some(sym),
                // Not resolvable through the (gone) process: through the file itself.
                _ => match (&frame.module, frame.module_offset) {
                    (Some(path), Some(off)) => {
                        let src = Source::Elf(Elf::new(path));
                        let at = if i == 0 { off } else { off.saturating_sub(1) };
                        from_file = self
                            .symbolizer
                            .symbolize(&src, Input::FileOffset(&[at][..]))
                            .unwrap_or_default();
                        from_file.first()
                    }
                    _ => None,
                },
            };
            if let Some(Symbolized::Sym(sym)) = symbol {
                frame.symbol = Some(sym.name.to_string());
                if frame.module.is_none() {
                    frame.module = sym
                        .module
                        .as_ref()
                        .map(|m| m.to_string_lossy().into_owned());
                }
                if let Some(code) = &sym.code_info {
                    let file = match &code.dir {
                        Some(dir) => dir.join(&*code.file).to_string_lossy().into_owned(),
                        None => code.file.to_string_lossy().into_owned(),
                    };
                    frame.file = Some(file);
                    frame.line = code.line;
                }
            }
            frames.push(frame);
        }
        drop(symbols);
        drop(normalized);
        Some(self.intern(frames))
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

/// The file-backed mappings of a live process.
fn file_mappings(pid: u32) -> Option<Vec<FileMapping>> {
    use procfs::process::MMapPath;
    let maps = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.maps())
        .ok()?;
    Some(
        maps.into_iter()
            .filter_map(|m| match m.pathname {
                MMapPath::Path(path) => Some(FileMapping {
                    start: m.address.0,
                    end: m.address.1,
                    offset: m.offset,
                    path: path.to_string_lossy().into_owned(),
                }),
                _ => None,
            })
            .collect(),
    )
}

/// (file, file offset) of `addr` in `maps`.
fn locate(maps: &[FileMapping], addr: u64) -> Option<(String, u64)> {
    let m = maps.iter().find(|m| (m.start..m.end).contains(&addr))?;
    Some((m.path.clone(), addr - m.start + m.offset))
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
        let (path, offset) = locate(&maps, addr).expect("own code is file-backed");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(std::path::Path::new(&path), exe);
        assert!(offset > 0 && offset < std::fs::metadata(&exe).unwrap().len());
        assert!(locate(&maps, 0).is_none());
    }

    #[test]
    fn return_addresses_are_looked_up_at_their_call() {
        assert_eq!(call_sites(&[100, 200, 300]), vec![100, 199, 299]);
        assert!(call_sites(&[]).is_empty());
    }
}
