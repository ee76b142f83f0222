//! `--stacks`: unwinding a copied user stack (registers and the top of the stack, sent
//! by the BPF programs) with the call-frame information of the mapped binaries,
//! `.eh_frame` (indexed by `.eh_frame_hdr`) and `.debug_frame`, through `framehop`.
//! Where a module has no entry for an address framehop falls back to the frame pointer.
//!
//! The ELF files parsed here are our private copies (read through `source::untrusted`);
//! a malformed one gives no unwind information, never a panic (`object` checks every
//! offset it reads).

use std::ops::Range;
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment};

/// Frames unwound at most; a deeper stack is marked truncated.
pub const MAX_FRAMES: usize = 128;
/// Addresses below this are never code (the kernel does not map the first page).
const NULL_PAGE_END: u64 = 0x1000;

/// A section kept: its name, its address range as the file states it, its bytes.
type Section = (&'static [u8], Range<u64>, Arc<[u8]>);

/// What unwinding needs of one ELF file, and its build-id.
#[derive(Debug, Default)]
pub struct ModuleInfo {
    sections: Vec<Section>,
    /// PT_LOAD segments: (file offset, virtual address, file size).
    loads: Vec<(u64, u64, u64)>,
    /// The GNU build-id note, when the file has one.
    pub build_id: Option<Vec<u8>>,
}

/// The sections framehop reads (`.text` is left out: on x86_64 the CFI covers
/// prologues and epilogues, and the copy of the code would cost its size in memory).
const SECTIONS: [&[u8]; 4] = [b".eh_frame", b".eh_frame_hdr", b".debug_frame", b".got"];

impl ModuleInfo {
    /// Parse an ELF file's unwind sections; `None` when it is not an ELF `object` reads.
    pub fn parse(bytes: &[u8]) -> Option<ModuleInfo> {
        let file = object::File::parse(bytes).ok()?;
        let mut info = ModuleInfo {
            build_id: file.build_id().ok().flatten().map(<[u8]>::to_vec),
            ..ModuleInfo::default()
        };
        for name in SECTIONS {
            let Some(section) = file.section_by_name_bytes(name) else {
                continue;
            };
            let range = section.address()..section.address().saturating_add(section.size());
            // `.got` is only needed for its address.
            let data: Arc<[u8]> = if name == b".got" {
                Arc::from(&[][..])
            } else {
                match section.data() {
                    Ok(d) => Arc::from(d),
                    Err(_) => continue,
                }
            };
            info.sections.push((name, range, data));
        }
        for segment in file.segments() {
            let (offset, size) = segment.file_range();
            info.loads.push((offset, segment.address(), size));
        }
        Some(info)
    }

    /// Whether the file has call-frame information at all.
    pub fn has_cfi(&self) -> bool {
        self.sections
            .iter()
            .any(|(n, _, d)| (*n == b".eh_frame" || *n == b".debug_frame") && !d.is_empty())
    }

    /// The load bias of a mapping of this file at `start` from file offset `offset`
    /// (process address minus the address the file states), from the segment that
    /// holds that offset.
    pub fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        // A mapping starts at the page of its segment's start: that page can also end
        // the segment before (linkers pack them), so the segment starting there wins.
        let starts_here = |&&(o, _, _): &&(u64, u64, u64)| o & !0xfff == offset;
        let holds =
            |&&(o, _, size): &&(u64, u64, u64)| (o..o.saturating_add(size)).contains(&offset);
        let &(p_offset, p_vaddr, _) =
            (self.loads.iter().find(starts_here)).or_else(|| self.loads.iter().find(holds))?;
        // svma(offset) = offset - p_offset + p_vaddr; avma(offset) = start.
        start
            .checked_add(p_offset)?
            .checked_sub(offset)?
            .checked_sub(p_vaddr)
    }

    /// The address the file states for file offset `offset` (in a loaded segment).
    pub fn svma_of(&self, offset: u64) -> Option<u64> {
        let &(p_offset, p_vaddr, _) = (self.loads.iter())
            .find(|&&(o, _, size)| (o..o.saturating_add(size)).contains(&offset))?;
        (offset - p_offset).checked_add(p_vaddr)
    }

    fn section(&self, name: &[u8]) -> Option<&Section> {
        self.sections.iter().find(|(n, _, _)| *n == name)
    }

    #[cfg(target_arch = "x86_64")]
    fn section_info(&self) -> framehop::ExplicitModuleSectionInfo<Arc<[u8]>> {
        let range = |n: &[u8]| self.section(n).map(|(_, r, _)| r.clone());
        let data = |n: &[u8]| {
            self.section(n)
                .map(|(_, _, d)| d.clone())
                .filter(|d| !d.is_empty())
        };
        framehop::ExplicitModuleSectionInfo {
            base_svma: 0,
            eh_frame_svma: range(b".eh_frame"),
            eh_frame: data(b".eh_frame"),
            eh_frame_hdr_svma: range(b".eh_frame_hdr"),
            eh_frame_hdr: data(b".eh_frame_hdr"),
            debug_frame: data(b".debug_frame"),
            got_svma: range(b".got"),
            ..Default::default()
        }
    }
}

/// Why a stack ends before its first frame: the frame put where the stack is cut, so
/// a short stack says why in every report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cut {
    /// The next frame lies above the bytes copied.
    CopyEnded,
    /// The caller could not be found: no unwind information for the code, and no
    /// frame pointer that leads on.
    NoUnwindInfo,
    /// [`MAX_FRAMES`] were reached.
    TooDeep,
    /// The next "return address" is in a file mapping that is not executable, or in
    /// no mapping at all: not a return address.
    NotCode,
    /// The next return address is in anonymous executable memory (JIT code) that the
    /// process's perf map does not name.
    JitWithoutPerfMap,
    /// A Go thread's frames reached the boundary of its system stack (g0:
    /// `runtime.mcall`, `runtime.systemstack`, `runtime.mstart`). Go's own traceback
    /// stops there: what lies past it is a goroutine's stack the thread left (a parked
    /// M is not inside the last goroutine's lock), or the thread's start. The stack is
    /// complete as Go defines it, so this cut does not mark it truncated.
    GoSystemStack,
    /// The unwinder found no caller, but the outermost frame is not where a thread
    /// starts (`_start`, `clone3`, ...): it stopped early. framehop does so when it
    /// falls back to the frame pointer for code it has no unwind rule for (ld.so's
    /// lazy-binding trampoline, whose CFA lives in rbx) and finds rbp 0.
    BeforeThreadStart,
}

impl Cut {
    /// The name of the frame that marks the cut.
    pub fn frame_name(self) -> &'static str {
        match self {
            Cut::CopyEnded => "[cut: the stack goes on past the 16 KiB copied]",
            Cut::NoUnwindInfo => {
                "[cut: no unwind information or frame pointer leads to the caller]"
            }
            Cut::TooDeep => "[cut: 128 frames]",
            Cut::NotCode => "[cut: the next return address is in no executable mapping]",
            Cut::JitWithoutPerfMap => "[cut: JIT code with no perf map entry]",
            Cut::GoSystemStack => "[go scheduler: the thread's system stack (g0) ends here]",
            Cut::BeforeThreadStart => "[cut: the unwinder stopped before the thread's start]",
        }
    }
}

/// A copied stack: registers at the capture and the bytes from `sp` up.
pub struct CopiedStack<'a> {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub stack: &'a [u8],
}

impl CopiedStack<'_> {
    /// Whether `addr` lies just above the copy (within a MiB): the stack went on
    /// there, rather than the unwind reading a wild address.
    fn just_past(&self, addr: u64) -> bool {
        let end = self.sp.saturating_add(self.stack.len() as u64);
        addr >= end && addr - end < (1 << 20)
    }

    /// The u64 at `addr`, if the copy holds it.
    fn read(&self, addr: u64) -> Result<u64, ()> {
        let off = addr.checked_sub(self.sp).ok_or(())? as usize;
        let bytes = self
            .stack
            .get(off..off.checked_add(8).ok_or(())?)
            .ok_or(())?;
        Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
    }
}

/// The unwinder of one process: a module per executable mapping with unwind info.
pub struct ProcessUnwinder {
    #[cfg(target_arch = "x86_64")]
    unwinder: framehop::x86_64::UnwinderX86_64<Arc<[u8]>>,
}

/// framehop's cache of unwind rules, shared by every process.
pub struct UnwindCache {
    #[cfg(target_arch = "x86_64")]
    cache: framehop::x86_64::CacheX86_64,
}

impl Default for UnwindCache {
    fn default() -> UnwindCache {
        UnwindCache::new()
    }
}

impl Default for ProcessUnwinder {
    fn default() -> ProcessUnwinder {
        ProcessUnwinder::new()
    }
}

impl UnwindCache {
    pub fn new() -> UnwindCache {
        UnwindCache {
            #[cfg(target_arch = "x86_64")]
            cache: framehop::x86_64::CacheX86_64::new(),
        }
    }
}

impl ProcessUnwinder {
    pub fn new() -> ProcessUnwinder {
        ProcessUnwinder {
            #[cfg(target_arch = "x86_64")]
            unwinder: framehop::x86_64::UnwinderX86_64::new(),
        }
    }

    /// Add the executable mapping `range` of a file mapped from file offset `offset`.
    pub fn add_module(&mut self, name: &str, range: Range<u64>, offset: u64, info: &ModuleInfo) {
        let Some(bias) = info.bias(range.start, offset) else {
            return;
        };
        #[cfg(target_arch = "x86_64")]
        {
            use framehop::Unwinder;
            let module = framehop::Module::new(name.to_string(), range, bias, info.section_info());
            self.unwinder.add_module(module);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (name, bias);
    }

    /// The stack's addresses, leaf (the instruction pointer) first, then return
    /// addresses; and why it is cut, when the unwinder did not reach the stack's end.
    pub fn unwind(&self, cache: &mut UnwindCache, stack: &CopiedStack) -> (Vec<u64>, Option<Cut>) {
        #[cfg(target_arch = "x86_64")]
        {
            use framehop::Unwinder;
            let regs = framehop::x86_64::UnwindRegsX86_64::new(stack.ip, stack.sp, stack.bp);
            let mut read = |addr: u64| stack.read(addr);
            let mut frames = self
                .unwinder
                .iter_frames(stack.ip, regs, &mut cache.cache, &mut read);
            let mut addrs = Vec::new();
            loop {
                match frames.next() {
                    // No code lives in the first page: a "return address" there is
                    // the word above an entry point's frame (ld.so's `_start` has
                    // argc there), so the stack ended.
                    Ok(Some(frame)) if frame.address() < NULL_PAGE_END => return (addrs, None),
                    Ok(Some(frame)) => {
                        if addrs.len() == MAX_FRAMES {
                            return (addrs, Some(Cut::TooDeep));
                        }
                        addrs.push(frame.address());
                    }
                    Ok(None) => return (addrs, None),
                    Err(framehop::Error::CouldNotReadStack(at)) if stack.just_past(at) => {
                        return (addrs, Some(Cut::CopyEnded))
                    }
                    Err(_) => return (addrs, Some(Cut::NoUnwindInfo)),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = cache;
            (vec![stack.ip], Some(Cut::NoUnwindInfo))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_executable_has_cfi_and_a_bias_for_its_code() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let info = ModuleInfo::parse(&exe).expect("an ELF");
        assert!(info.has_cfi());
        // A PIE's first segment maps file offset 0 at its start: the bias is the start.
        assert_eq!(info.bias(0x5555_0000_0000, 0), Some(0x5555_0000_0000));
        assert!(ModuleInfo::parse(b"not an elf").is_none());
    }

    #[test]
    fn a_copy_gives_only_the_words_it_holds() {
        let bytes: Vec<u8> = (0u8..16).collect();
        let copy = CopiedStack {
            ip: 1,
            sp: 0x1000,
            bp: 0,
            stack: &bytes,
        };
        assert_eq!(copy.read(0x1000), Ok(0x0706_0504_0302_0100));
        assert_eq!(copy.read(0x1008), Ok(0x0f0e_0d0c_0b0a_0908));
        assert_eq!(copy.read(0x1009), Err(()));
        assert_eq!(copy.read(0xfff), Err(()));
        assert_eq!(copy.read(u64::MAX), Err(()));
    }

    /// This test's own thread, unwound from a copy of its stack: the caller chain must
    /// reach this test function through frames that have no frame pointers.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_copy_of_our_own_stack_unwinds_through_our_executable() {
        let maps = procfs::process::Process::myself().unwrap().maps().unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let info = ModuleInfo::parse(&std::fs::read(&exe).unwrap()).unwrap();
        let mut unwinder = ProcessUnwinder::new();
        for m in &maps {
            if let procfs::process::MMapPath::Path(p) = &m.pathname {
                if *p == exe && m.perms.contains(procfs::process::MMPermissions::EXECUTE) {
                    unwinder.add_module("self", m.address.0..m.address.1, m.offset, &info);
                }
            }
        }
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers, changes nothing.
        unsafe {
            std::arch::asm!("lea {0}, [rip]", "mov {1}, rsp", "mov {2}, rbp", out(reg) ip, out(reg) sp, out(reg) bp);
        }
        // Up to 16 KiB above our stack pointer, within its mapping (what BPF copies).
        let top = (maps.iter())
            .find(|m| (m.address.0..m.address.1).contains(&sp))
            .map(|m| m.address.1)
            .unwrap();
        let len = (top - sp).min(16 << 10) as usize;
        // SAFETY: [sp, sp + len) is inside this thread's mapped stack.
        let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, len) }.to_vec();
        let copy = CopiedStack {
            ip,
            sp,
            bp,
            stack: &stack,
        };
        let (addrs, _) = unwinder.unwind(&mut UnwindCache::new(), &copy);
        assert!(addrs.len() >= 3, "{addrs:x?}");
        assert_eq!(addrs[0], ip);
        // Every return address falls in our executable's code.
        let code: Vec<_> = (maps.iter())
            .filter(|m| m.perms.contains(procfs::process::MMPermissions::EXECUTE))
            .map(|m| m.address.0..m.address.1)
            .collect();
        assert!(addrs[1..4.min(addrs.len())]
            .iter()
            .all(|a| code.iter().any(|r| r.contains(a))));
    }
}
