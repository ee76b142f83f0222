//! The TARGETS bitmap, shared with the BPF programs through `mmap`: userspace sets and
//! clears a process's bit with an atomic OR or AND on the very word the programs
//! update with theirs. A map update from userspace writes a whole word, so one made
//! while a program set another bit in it (a traced process forking during attach, or
//! any fork in a cgroup under `--cgroup`) put that bit back to 0: the child went
//! untraced until the next pass, and its sleep read as runqueue wait.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::{Array, MapData};
use kernelkite_common::bpf::targets;

use super::holders::MappedWords;

/// The mapped bitmap.
pub struct TargetBits {
    words: MappedWords,
}

impl TargetBits {
    /// Map `array` (declared `BPF_F_MMAPABLE` in kernelkite-ebpf's `maps`).
    pub fn map(array: Array<MapData, u64>) -> io::Result<TargetBits> {
        Ok(TargetBits {
            words: MappedWords::map(array, targets::WORDS as usize)?,
        })
    }

    fn word(&self, tgid: u32) -> &AtomicU64 {
        self.words.word(targets::word(tgid) as usize)
    }

    /// Only before the syscall hooks attach (`Probes::attach_deferred`): they note the
    /// tasks they find untraced, and a note taken before the bit was set would hide
    /// the process's syscalls (kernelkite-ebpf's `UNTRACED_CPU`).
    pub fn set(&self, tgid: u32) {
        self.word(tgid)
            .fetch_or(targets::bit(tgid), Ordering::SeqCst);
    }

    pub fn clear(&self, tgid: u32) {
        self.word(tgid)
            .fetch_and(!targets::bit(tgid), Ordering::SeqCst);
    }

    pub fn is_set(&self, tgid: u32) -> bool {
        self.word(tgid).load(Ordering::SeqCst) & targets::bit(tgid) != 0
    }
}
