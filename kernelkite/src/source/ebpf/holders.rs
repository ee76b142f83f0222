//! The holder words of a slot table (`THREAD_HOLDERS`, `HIST_HOLDERS`), shared with the
//! BPF programs through `mmap`: whose each slot is changes only by compare-and-swap,
//! here as in kernelkite-ebpf's `maps`. Only the holders are mapped: a mapping of a BPF
//! array is resident in full, and the slots themselves are megabytes.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use aya::maps::{Array, IterableMap, MapData};

use super::target_bits::map_shared;

/// The mapped holders; unmapped when dropped.
pub struct Holders {
    words: NonNull<AtomicU64>,
    /// Number of slots (a power of two).
    len: usize,
    /// The map itself: its fd stays open as long as the session's other maps'.
    _array: Array<MapData, u64>,
}

// SAFETY: the mapping is shared memory reached only through atomics.
unsafe impl Send for Holders {}

impl Holders {
    /// Map `array` (declared `BPF_F_MMAPABLE`), the holders of a table of `slots`.
    pub fn map(array: Array<MapData, u64>, slots: u32) -> io::Result<Holders> {
        let len = array.len() as usize;
        if !len.is_power_of_two() || slots as usize != len {
            return Err(io::Error::other(format!(
                "{len} holders for {slots} slots: not one power of two"
            )));
        }
        let words = map_shared(array.map(), len * std::mem::size_of::<u64>())?;
        Ok(Holders {
            words: words.cast::<AtomicU64>(),
            len,
            _array: array,
        })
    }

    /// Number of slots (never 0).
    pub fn slots(&self) -> u32 {
        self.len as u32
    }

    /// The index mask (`len - 1`).
    pub fn mask(&self) -> u32 {
        self.len as u32 - 1
    }

    /// Slot `index`'s holder (the index is masked).
    pub fn of(&self, index: u32) -> &AtomicU64 {
        // SAFETY: a masked index is < len, inside the mapping, which lives as long as
        // self; u64 words are 8-byte aligned in the map's value area.
        unsafe { &*self.words.as_ptr().add(index as usize & (self.len - 1)) }
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        let len = self.len * std::mem::size_of::<u64>();
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.words.as_ptr().cast(), len) };
    }
}
