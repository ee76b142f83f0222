//! The TARGETS bitmap, shared with the BPF programs through `mmap`: userspace sets and
//! clears a process's bit with an atomic OR or AND on the very word the programs
//! update with theirs. A map update from userspace writes a whole word, so one made
//! while a program set another bit in it (a traced process forking during attach, or
//! any fork in a cgroup under `--cgroup`) put that bit back to 0: the child went
//! untraced until the next pass, and its sleep read as runqueue wait.
//!
//! Setting bits also clears the syscall hooks' per-CPU notes of untraced tasks
//! (kernelkite-ebpf's `UNTRACED_CPU`), once no program run that tested the old bits is
//! still in flight.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::{Array, IterableMap, MapData};
use kernelkite_common::bpf::{targets, untraced_notes};

/// The mapped bitmap; unmapped when dropped.
pub struct TargetBits {
    words: NonNull<AtomicU64>,
    len: usize,
    /// The map itself: its fd stays open as long as the session's other maps'.
    _array: Array<MapData, u64>,
    /// The notes (the object's `.bss`), when the programs write them
    /// (`Probes::untraced_notes`).
    notes: Option<Notes>,
}

/// kernelkite-ebpf's `UNTRACED_CPU`: the one value of the `.bss` array map.
pub type Notes = Array<MapData, [u64; untraced_notes::LEN]>;

/// `membarrier(2)` commands.
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;

/// Whether this kernel lets a process wait out an RCU grace period
/// (`membarrier(MEMBARRIER_CMD_GLOBAL)`; not with `nohz_full`): without it, set bits
/// could not void the notes, and the programs are loaded not to write them.
pub fn grace_period_available() -> bool {
    // SAFETY: the query command has no effect.
    let commands = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    commands > 0 && commands & MEMBARRIER_CMD_GLOBAL != 0
}

/// Wait until every BPF program run that started before has finished: the syscall
/// tracepoints run BPF programs with preemption off, an RCU read-side section, and
/// `MEMBARRIER_CMD_GLOBAL` is `synchronize_rcu()`.
fn wait_grace_period() -> io::Result<()> {
    // SAFETY: no pointers; the command blocks for a grace period and returns.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// SAFETY: the mapping is shared memory reached only through atomics.
unsafe impl Send for TargetBits {}

impl TargetBits {
    /// Map `array` (declared `BPF_F_MMAPABLE` in kernelkite-ebpf's `maps`); `notes`:
    /// `UNTRACED_CPU`, where the programs write notes.
    pub fn map(array: Array<MapData, u64>, notes: Option<Notes>) -> io::Result<TargetBits> {
        let len = targets::WORDS as usize * std::mem::size_of::<u64>();
        let fd = array.map().fd().as_fd().as_raw_fd();
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
        let words = NonNull::new(ptr.cast::<AtomicU64>()).ok_or(io::ErrorKind::Other)?;
        Ok(TargetBits {
            words,
            len,
            _array: array,
            notes,
        })
    }

    fn word(&self, tgid: u32) -> &AtomicU64 {
        let index = (targets::word(tgid) as usize).min(targets::WORDS as usize - 1);
        // SAFETY: index < WORDS, inside the mapping, which lives as long as self; u64
        // words are 8-byte aligned in the map's value area.
        unsafe { &*self.words.as_ptr().add(index) }
    }

    /// Set the bits of `tgids`. Then wait out the program runs in flight and zero every
    /// CPU's note: a note that one of the processes' tasks is untraced, taken before its
    /// bit was set, would hide its syscalls. Runs that start after the wait see the bits.
    pub fn set_all(&mut self, tgids: impl IntoIterator<Item = u32>) -> io::Result<()> {
        for tgid in tgids {
            self.word(tgid)
                .fetch_or(targets::bit(tgid), Ordering::SeqCst);
        }
        let Some(notes) = &mut self.notes else {
            return Ok(());
        };
        wait_grace_period()?;
        // The programs write notes meanwhile, valid ones (they see the bits); the
        // kernel copies ours over in 8-byte words, and a note with a zero word never
        // matches (no pt_regs at 0, generations start at 1).
        // On the heap: 64 KiB is much of a thread's stack.
        let zeros: Box<[u64; untraced_notes::LEN]> = vec![0u64; untraced_notes::LEN]
            .into_boxed_slice()
            .try_into()
            .map_err(|_| io::Error::other("notes: wrong length"))?;
        notes
            .set(0, zeros.as_ref(), 0)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    pub fn clear(&self, tgid: u32) {
        self.word(tgid)
            .fetch_and(!targets::bit(tgid), Ordering::SeqCst);
    }

    pub fn is_set(&self, tgid: u32) -> bool {
        self.word(tgid).load(Ordering::SeqCst) & targets::bit(tgid) != 0
    }
}

impl Drop for TargetBits {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.words.as_ptr().cast(), self.len) };
    }
}
