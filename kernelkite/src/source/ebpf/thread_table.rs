//! The kernel's thread table, as userspace sees it: each traced thread's `ThreadState`
//! is in `THREAD_SLOTS` at index `tid & (slots - 1)` when that slot is its own, else in
//! the `THREADS` hash map (the overflow; `kernelkite_common::bpf::thread_slots`). The
//! BPF programs find a thread in its slot with a few loads, where the hash lookup
//! cost every hook about 8 ns (docs/PERFORMANCE.md).
//!
//! The slots are shared through `mmap`, and whose a slot is (`ThreadState::tid`) changes
//! only by compare-and-swap, here as in kernelkite-ebpf's `maps::insert_thread`: a slot
//! is claimed with the tid and `FILLING`, filled, then given the tid. A thread is in one
//! home: when two inserters of one tid race (this session at attach and the fork hook),
//! the slot wins and the overflow entry goes.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::{Array, HashMap, IterableMap, MapData, MapError};
use kernelkite_common::bpf::{thread_slots, ThreadState};

use super::map_batch::read_all;
use super::target_bits::map_shared;

/// Why an insert did not happen.
#[derive(Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The thread has an entry already (the fork hook made it).
    Exists,
    /// Its slot is another thread's and the overflow is full.
    Full,
}

/// The mapped slots and the overflow map; unmapped when dropped.
pub struct ThreadTable {
    slots: NonNull<ThreadState>,
    /// Number of slots (a power of two).
    len: usize,
    mapped_bytes: usize,
    /// The slots' map: its fd stays open as long as the session's other maps'.
    _slots_map: Array<MapData, ThreadState>,
    overflow: HashMap<MapData, u32, ThreadState>,
}

// SAFETY: the mapping is shared memory; whose a slot is changes only through atomics,
// and entries are copied with volatile reads (a torn copy is detected by the caller,
// as with the map's own lookups).
unsafe impl Send for ThreadTable {}

impl ThreadTable {
    /// Map `slots` (declared `BPF_F_MMAPABLE` in kernelkite-ebpf's `maps`) beside the
    /// `overflow` map.
    pub fn map(
        slots: Array<MapData, ThreadState>,
        overflow: HashMap<MapData, u32, ThreadState>,
    ) -> io::Result<ThreadTable> {
        let len = slots.len() as usize;
        if !len.is_power_of_two() {
            return Err(io::Error::other(format!(
                "THREAD_SLOTS has {len} entries, not a power of two"
            )));
        }
        let mapped_bytes = len * std::mem::size_of::<ThreadState>();
        let slots_ptr = map_shared(slots.map(), mapped_bytes)?.cast::<ThreadState>();
        Ok(ThreadTable {
            slots: slots_ptr,
            len,
            mapped_bytes,
            _slots_map: slots,
            overflow,
        })
    }

    fn slot(&self, index: usize) -> *mut ThreadState {
        // SAFETY: index < len (masked by the callers), inside the mapping, which lives
        // as long as self. Array values are laid out at `size_of::<ThreadState>()`
        // apart (248 bytes, a multiple of 8).
        unsafe { self.slots.as_ptr().add(index & (self.len - 1)) }
    }

    fn holder(&self, index: usize) -> &AtomicU64 {
        // SAFETY: the slot's `tid` field, 8-byte aligned, changed only by atomics.
        unsafe { &*(&raw mut (*self.slot(index)).tid).cast::<AtomicU64>() }
    }

    /// A copy of slot `index` if it is `tid`'s, checked again after the copy (a slot
    /// freed and taken by another thread meanwhile is not returned).
    fn copy_if_held(&self, index: usize, tid: u64) -> Option<ThreadState> {
        if self.holder(index).load(Ordering::SeqCst) != tid {
            return None;
        }
        // SAFETY: a valid ThreadState in the mapping (every bit pattern is one).
        let state = unsafe { std::ptr::read_volatile(self.slot(index)) };
        (self.holder(index).load(Ordering::SeqCst) == tid).then_some(state)
    }

    /// Thread `tid`'s entry.
    pub fn get(&self, tid: u32) -> Option<ThreadState> {
        if u64::from(tid) != thread_slots::FREE {
            if let Some(state) = self.copy_if_held(tid as usize, u64::from(tid)) {
                return Some(state);
            }
        }
        self.overflow.get(&tid, 0).ok()
    }

    /// Every entry: the slots held, then the overflow (a tid in both, for the moment
    /// two inserters race, is taken from its slot, as the programs take it).
    pub fn read_all(&self) -> Vec<(u32, ThreadState)> {
        let mut out = Vec::new();
        for index in 0..self.len {
            let holder = self.holder(index).load(Ordering::Relaxed);
            if holder == thread_slots::FREE || holder & thread_slots::FILLING != 0 {
                continue;
            }
            if let Some(state) = self.copy_if_held(index, holder) {
                out.push((holder as u32, state));
            }
        }
        let in_slots = out.len();
        for (tid, state) in read_all(&self.overflow) {
            if !out[..in_slots].iter().any(|(t, _)| *t == tid) {
                out.push((tid, state));
            }
        }
        out
    }

    /// Insert `state` as thread `tid`'s entry unless it has one (BPF_NOEXIST): into its
    /// slot when free, else the overflow.
    pub fn insert_new(&mut self, tid: u32, mut state: ThreadState) -> Result<(), InsertError> {
        if u64::from(tid) == thread_slots::FREE || self.get(tid).is_some() {
            return Err(InsertError::Exists);
        }
        let index = tid as usize;
        let filling = u64::from(tid) | thread_slots::FILLING;
        match self.holder(index).compare_exchange(
            thread_slots::FREE,
            filling,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => {
                state.tid = filling;
                // SAFETY: the slot is ours (claimed above); the programs do not match
                // it until its holder is `tid`.
                unsafe { std::ptr::write_volatile(self.slot(index), state) };
                self.holder(index).store(u64::from(tid), Ordering::SeqCst);
                // The fork hook may have put it in the overflow meanwhile: the slot wins.
                let _ = self.overflow.remove(&tid);
                return Ok(());
            }
            Err(seen) if seen & !thread_slots::FILLING == u64::from(tid) => {
                // The fork hook is filling it: a program runs to its end, so this wait
                // is short (bounded all the same).
                for _ in 0..1_000_000 {
                    if self.holder(index).load(Ordering::SeqCst) != filling {
                        break;
                    }
                    std::hint::spin_loop();
                }
                return Err(InsertError::Exists);
            }
            Err(_) => {}
        }
        state.tid = u64::from(tid);
        // NOEXIST: never overwrite an entry the fork hook already made.
        match self.overflow.insert(tid, state, 1) {
            Ok(()) => {}
            Err(e) if already_exists(&e) => return Err(InsertError::Exists),
            Err(_) => return Err(InsertError::Full),
        }
        // The slot may have been freed and taken for this tid since the look above.
        let holder = self.holder(index).load(Ordering::SeqCst);
        if holder & !thread_slots::FILLING == u64::from(tid) {
            let _ = self.overflow.remove(&tid);
            return Err(InsertError::Exists);
        }
        Ok(())
    }

    /// Forget thread `tid`'s entry.
    pub fn remove(&mut self, tid: u32) {
        let freed = u64::from(tid) != thread_slots::FREE
            && self
                .holder(tid as usize)
                .compare_exchange(
                    u64::from(tid),
                    thread_slots::FREE,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok();
        if !freed {
            let _ = self.overflow.remove(&tid);
        }
    }
}

fn already_exists(e: &MapError) -> bool {
    matches!(e, MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::EEXIST))
}

impl Drop for ThreadTable {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.slots.as_ptr().cast(), self.mapped_bytes) };
    }
}
