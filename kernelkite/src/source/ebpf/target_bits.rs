//! The TARGETS bitmap, shared with the BPF programs through `mmap`: userspace sets and
//! clears a process's bit with an atomic OR or AND on the very word the programs
//! update with theirs. A map update from userspace writes a whole word, so one made
//! while a program set another bit in it (a traced process forking during attach, or
//! any fork in a cgroup under `--cgroup`) put that bit back to 0: the child went
//! untraced until the next pass, and its sleep read as runqueue wait.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::{Array, IterableMap, MapData};
use kernelkite_common::bpf::targets;

/// The mapped bitmap; unmapped when dropped.
pub struct TargetBits {
    words: NonNull<AtomicU64>,
    len: usize,
    /// The map itself: its fd stays open as long as the session's other maps'.
    _array: Array<MapData, u64>,
}

// SAFETY: the mapping is shared memory reached only through atomics.
unsafe impl Send for TargetBits {}

impl TargetBits {
    /// Map `array` (declared `BPF_F_MMAPABLE` in kernelkite-ebpf's `maps`).
    pub fn map(array: Array<MapData, u64>) -> io::Result<TargetBits> {
        let len = targets::WORDS as usize * std::mem::size_of::<u64>();
        let words = map_shared(array.map(), len)?.cast::<AtomicU64>();
        Ok(TargetBits {
            words,
            len,
            _array: array,
        })
    }

    fn word(&self, tgid: u32) -> &AtomicU64 {
        let index = (targets::word(tgid) as usize).min(targets::WORDS as usize - 1);
        // SAFETY: index < WORDS, inside the mapping, which lives as long as self; u64
        // words are 8-byte aligned in the map's value area.
        unsafe { &*self.words.as_ptr().add(index) }
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

/// Map the first `len` bytes of `map`'s values (an array declared `BPF_F_MMAPABLE`)
/// shared and writable; the caller unmaps them.
pub fn map_shared(map: &MapData, len: usize) -> io::Result<NonNull<u8>> {
    let fd = map.fd().as_fd().as_raw_fd();
    // SAFETY: a fresh shared mapping of the map's fd; the kernel checks the size
    // against the map's and the flags against BPF_F_MMAPABLE.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::ErrorKind::Other.into())
}

impl Drop for TargetBits {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.words.as_ptr().cast(), self.len) };
    }
}
