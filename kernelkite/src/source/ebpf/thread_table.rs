//! The kernel's thread table, as userspace sees it: each traced thread's `ThreadState`
//! is in `THREAD_SLOTS` at index `tid & (slots - 1)` when that slot is its own, else in
//! the `THREADS` hash map (the overflow; `kernelkite_common::bpf::thread_slots`). The
//! BPF programs find a thread in its slot with a few loads, where the hash lookup
//! cost every hook about 8 ns (docs/PERFORMANCE.md).
//!
//! Whose a slot is lives in `THREAD_HOLDERS`, shared through `mmap`, and changes only by
//! compare-and-swap, here as in kernelkite-ebpf's `maps::insert_thread`: a slot is
//! claimed with the tid and `FILLING`, filled, then given the tid. A thread is in one
//! home: when two inserters of one tid race (this session at attach and the fork hook),
//! the slot wins and the overflow entry goes. The slots themselves are read and written
//! with map syscalls: a mapping of them would be resident in full (3.75 MiB).

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use aya::maps::{Array, HashMap, MapData, MapError};
use kernelkite_common::bpf::{thread_slots, ThreadState};

use super::holders::Holders;
use super::map_batch::read_all;

/// Why an insert did not happen.
#[derive(Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The thread has an entry already (the fork hook made it).
    Exists,
    /// Its slot is another thread's and the overflow is full.
    Full,
}

/// The thread table: the mapped holders, the slots and the overflow map.
pub struct ThreadTable {
    holders: Holders,
    slots: Array<MapData, ThreadState>,
    overflow: HashMap<MapData, u32, ThreadState>,
}

impl ThreadTable {
    /// The table of `holders` (mapped here), `slots` and `overflow`.
    pub fn map(
        holders: Array<MapData, u64>,
        slots: Array<MapData, ThreadState>,
        overflow: HashMap<MapData, u32, ThreadState>,
    ) -> io::Result<ThreadTable> {
        Ok(ThreadTable {
            holders: Holders::map(holders, slots.len())?,
            slots,
            overflow,
        })
    }

    fn index(&self, tid: u32) -> u32 {
        tid & self.holders.mask()
    }

    fn holder(&self, index: u32) -> &AtomicU64 {
        self.holders.of(index)
    }

    /// Slot `index`'s entry, however it is held.
    fn copy(&self, index: u32) -> Option<ThreadState> {
        self.slots.get(&index, 0).ok()
    }

    /// Thread `tid`'s entry.
    pub fn get(&self, tid: u32) -> Option<ThreadState> {
        if u64::from(tid) != thread_slots::FREE {
            let held = self
                .holders
                .copy_if_held(self.index(tid), u64::from(tid), |i| self.copy(i));
            if held.is_some() {
                return held;
            }
        }
        self.overflow.get(&tid, 0).ok()
    }

    /// Every entry: the slots held, then the overflow (a tid in both, for the moment
    /// two inserters race, is taken from its slot, as the programs take it).
    pub fn read_all(&self) -> Vec<(u32, ThreadState)> {
        let mut out: Vec<(u32, ThreadState)> = (self.holders.copy_held(|i| self.copy(i)))
            .into_iter()
            .map(|(holder, state)| (holder as u32, state))
            .collect();
        let in_slots: BTreeSet<u32> = out.iter().map(|(tid, _)| *tid).collect();
        out.extend(
            read_all(&self.overflow)
                .into_iter()
                .filter(|(tid, _)| !in_slots.contains(tid)),
        );
        out
    }

    /// Insert `state` as thread `tid`'s entry unless it has one (BPF_NOEXIST): into its
    /// slot when free, else the overflow.
    pub fn insert_new(&mut self, tid: u32, state: ThreadState) -> Result<(), InsertError> {
        if u64::from(tid) == thread_slots::FREE || self.get(tid).is_some() {
            return Err(InsertError::Exists);
        }
        let index = self.index(tid);
        let filling = u64::from(tid) | thread_slots::FILLING;
        match self.holder(index).compare_exchange(
            thread_slots::FREE,
            filling,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => {
                // The programs do not match the slot until its holder is `tid`.
                if self.slots.set(index, state, 0).is_err() {
                    self.holder(index)
                        .store(thread_slots::FREE, Ordering::SeqCst);
                    return Err(InsertError::Full);
                }
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
                .holder(self.index(tid))
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
