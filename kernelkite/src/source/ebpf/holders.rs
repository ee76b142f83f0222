//! Arrays of u64 words shared with the BPF programs through `mmap` and changed only by
//! atomics, here as in kernelkite-ebpf's `maps`: the TARGETS bitmap (`target_bits.rs`)
//! and the holder words of the slot tables (`THREAD_HOLDERS`, `HIST_HOLDERS`,
//! `WAKER_HOLDERS`). Only such word arrays are mapped: a mapping of a BPF array is
//! resident in full, and the slots themselves are megabytes.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::{Array, IterableMap, MapData};
use kernelkite_common::bpf::{hist_slots, thread_slots};
use kernelkite_common::wake::waker_slots;

/// Bit set in a holder while its slot is being filled or cleared: it is no key's yet,
/// or no longer.
const IN_TRANSITION: u64 = 1 << 63;
const _: () = assert!(
    thread_slots::FILLING & IN_TRANSITION != 0
        && hist_slots::CLEARING & IN_TRANSITION != 0
        && waker_slots::CLEARING & IN_TRANSITION != 0
        && waker_slots::FREE == 0
        && thread_slots::FREE == 0
        && hist_slots::FREE == 0
);

/// A mapped array of words; unmapped when dropped.
pub struct MappedWords {
    words: NonNull<AtomicU64>,
    /// Number of words (never 0).
    count: usize,
    /// The map itself: its fd stays open as long as the session's other maps'.
    _array: Array<MapData, u64>,
}

// SAFETY: the mapping is shared memory reached only through atomics.
unsafe impl Send for MappedWords {}

impl MappedWords {
    /// Map the first `count` words of `array` (declared `BPF_F_MMAPABLE`).
    pub fn map(array: Array<MapData, u64>, count: usize) -> io::Result<MappedWords> {
        if count == 0 || count > array.len() as usize {
            return Err(io::Error::other(format!(
                "{count} words of an array of {}",
                array.len()
            )));
        }
        let fd = array.map().fd().as_fd().as_raw_fd();
        // SAFETY: a fresh shared mapping of the map's fd; the kernel checks the size
        // against the map's and the flags against BPF_F_MMAPABLE.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                count * std::mem::size_of::<u64>(),
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
        Ok(MappedWords {
            words,
            count,
            _array: array,
        })
    }

    /// Number of words.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Word `index`, or the last word past the end.
    pub fn word(&self, index: usize) -> &AtomicU64 {
        // SAFETY: an index below count, inside the mapping, which lives as long as
        // self; u64 words are 8-byte aligned in the map's value area.
        unsafe { &*self.words.as_ptr().add(index.min(self.count - 1)) }
    }
}

impl Drop for MappedWords {
    fn drop(&mut self) {
        let len = self.count * std::mem::size_of::<u64>();
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.words.as_ptr().cast(), len) };
    }
}

/// The holders of a slot table: whose each slot is.
pub struct Holders {
    words: MappedWords,
}

impl Holders {
    /// Map `array`, the holders of a table of `slots` (a power of two).
    pub fn map(array: Array<MapData, u64>, slots: u32) -> io::Result<Holders> {
        if !slots.is_power_of_two() || array.len() != slots {
            return Err(io::Error::other(format!(
                "{} holders for {slots} slots: not one power of two",
                array.len()
            )));
        }
        Ok(Holders {
            words: MappedWords::map(array, slots as usize)?,
        })
    }

    /// Number of slots (never 0).
    pub fn slots(&self) -> u32 {
        self.words.count() as u32
    }

    /// The index mask (`slots - 1`).
    pub fn mask(&self) -> u32 {
        self.slots() - 1
    }

    /// Slot `index`'s holder (the index is masked).
    pub fn of(&self, index: u32) -> &AtomicU64 {
        self.words.word((index & self.mask()) as usize)
    }

    /// `copy(index)` of slot `index` if `holder` holds it, checked again after the copy
    /// (a slot freed and taken meanwhile is not its old holder's).
    pub fn copy_if_held<V>(
        &self,
        index: u32,
        holder: u64,
        copy: impl FnOnce(u32) -> Option<V>,
    ) -> Option<V> {
        if self.of(index).load(Ordering::SeqCst) != holder {
            return None;
        }
        let value = copy(index)?;
        (self.of(index).load(Ordering::SeqCst) == holder).then_some(value)
    }

    /// (holder, copy) of every slot held, skipping free slots and those being filled
    /// or cleared.
    pub fn copy_held<V>(&self, copy: impl Fn(u32) -> Option<V>) -> Vec<(u64, V)> {
        (self.held().into_iter())
            .filter_map(|(index, holder)| {
                let value = self.copy_if_held(index, holder, &copy)?;
                Some((holder, value))
            })
            .collect()
    }

    /// Free slots, each given as (index, its holder, the caller's tag): marked
    /// `clearing` (a holder no program matches, so none adds to the slot), then, once
    /// no program that found one held can still be running, read a last time and
    /// zeroed by `take` (a program claims a free slot as it is: `take` says whether the
    /// zeroing worked), and freed.
    /// Returns (tag, last reading) of each slot read, which count everything: without
    /// the wait, an add as the slot was marked could be lost, or left to its next
    /// holder. A slot that fails to be marked (another holder now), read or zeroed is
    /// not freed; left clearing, the programs take it for another's and use the
    /// overflow, so nothing is miscounted.
    pub fn free<T, V>(
        &self,
        slots: impl IntoIterator<Item = (u32, u64, T)>,
        clearing: u64,
        mut take: impl FnMut(u32) -> Option<(V, bool)>,
    ) -> Vec<(T, V)> {
        let marked: Vec<(u32, T)> = (slots.into_iter())
            .filter(|(index, holder, _)| {
                (self.of(*index))
                    .compare_exchange(*holder, clearing, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            })
            .map(|(index, _, tag)| (index, tag))
            .collect();
        if marked.is_empty() {
            return Vec::new();
        }
        wait_for_running_programs();
        let mut last = Vec::with_capacity(marked.len());
        for (index, tag) in marked {
            let Some((value, zeroed)) = take(index) else {
                continue;
            };
            last.push((tag, value));
            if zeroed {
                // Every table's FREE is 0 (asserted above).
                self.of(index).store(0, Ordering::SeqCst);
            }
        }
        last
    }

    /// (index, holder) of every slot held now, skipping free slots and those being
    /// filled or cleared: loads of the mapping, no syscall.
    pub fn held(&self) -> Vec<(u32, u64)> {
        (0..self.slots())
            .filter_map(|index| {
                let holder = self.of(index).load(Ordering::Relaxed);
                (holder != 0 && holder & IN_TRANSITION == 0).then_some((index, holder))
            })
            .collect()
    }
}

/// Wait until every BPF program running now has returned: they run inside RCU
/// read-side sections, and `membarrier(MEMBARRIER_CMD_GLOBAL)` is a `synchronize_rcu`
/// (kernel/sched/membarrier.c). Some milliseconds; once per snapshot that frees slots.
pub fn wait_for_running_programs() {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes no pointers.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if rc != 0 {
        // Not available: a second's sleep outlasts any program run by far.
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
