//! The syscall latency histograms of a session: the kernel's, per (thread, syscall) in
//! its slot and per (process, syscall) in the overflow map
//! (`kernelkite_common::bpf::hist_slots`; a process's histogram of a syscall is the
//! sum of them all), and those of threads and processes gone, folded out of them at
//! each snapshot so the kernel's never fill up.

use std::collections::BTreeMap;

use aya::maps::{Array, HashMap, MapData};
use kernelkite_common::bpf::{
    hist_slots, SyscallHist, SyscallKey, ThreadState, SYSCALL_BEFORE_START,
};

use super::holders::Holders;
use super::map_batch::read_all;
use super::syscall_table;
use crate::model::SyscallHistogram;

/// (process, syscall) histograms of exited processes a session keeps (about a hundred
/// bytes each); later ones are added to their syscall's histogram of pid
/// [`FOLDED_PID`], so the session keeps at most this many plus one per syscall.
pub const MAX_FOLDED_HISTOGRAMS: usize = 100_000;
/// The pid of the histograms of exited processes past [`MAX_FOLDED_HISTOGRAMS`] (no
/// user-space process has it: pid 0 is the kernel's idle task).
pub const FOLDED_PID: u32 = 0;

/// The kernel's histograms: slots with their holders, and the overflow map.
pub struct KernelHistograms {
    holders: Holders,
    slots: Array<MapData, SyscallHist>,
    overflow: HashMap<MapData, SyscallKey, SyscallHist>,
}

/// Where a kernel histogram is: the slot `index` of thread `tid`, or the overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    Slot { index: u32, tid: u32 },
    Overflow,
}

impl KernelHistograms {
    /// The histograms of `holders` (mapped here), `slots` and `overflow`.
    pub fn map(
        holders: Array<MapData, u64>,
        slots: Array<MapData, SyscallHist>,
        overflow: HashMap<MapData, SyscallKey, SyscallHist>,
    ) -> std::io::Result<KernelHistograms> {
        Ok(KernelHistograms {
            holders: Holders::map(holders, slots.len())?,
            slots,
            overflow,
        })
    }

    /// (key, home) of every slot held now, from the holders alone (no copy).
    fn held_slots(&self) -> Vec<(SyscallKey, Home)> {
        (self.holders.held().into_iter())
            .map(|(index, holder)| {
                let (tgid, tid, nr) = hist_slots::key(holder);
                (SyscallKey { tgid, nr }, Home::Slot { index, tid })
            })
            .collect()
    }

    /// `f` of every entry: the slots held, each copied in turn (a thread pool holds
    /// thousands: a vector of their copies cost the agent a percent of a core in
    /// allocation and moves), then the overflow (a key has many).
    fn for_each(&self, mut f: impl FnMut(SyscallKey, &SyscallHist, Home)) {
        for (index, holder) in self.holders.held() {
            let copy = |i: u32| self.slots.get(&i, 0).ok();
            if let Some(hist) = self.holders.copy_if_held(index, holder, copy) {
                let (tgid, tid, nr) = hist_slots::key(holder);
                f(SyscallKey { tgid, nr }, &hist, Home::Slot { index, tid });
            }
        }
        for (key, hist) in read_all(&self.overflow) {
            f(key, &hist, Home::Overflow);
        }
    }

    /// Drop `entries`: overflow entries are removed, slots freed
    /// ([`Holders::free`]: no call ending meanwhile is lost). Returns the slots' last
    /// readings.
    fn remove(&mut self, entries: &[(SyscallKey, Home)]) -> Vec<(SyscallKey, SyscallHist)> {
        let mut slots = Vec::new();
        for &(key, home) in entries {
            match home {
                Home::Overflow => {
                    let _ = self.overflow.remove(&key);
                }
                Home::Slot { index, tid } => {
                    if let Some(holder) = hist_slots::holder(key.tgid, tid, key.nr) {
                        slots.push((index, holder, key));
                    }
                }
            }
        }
        self.holders.free(slots, hist_slots::CLEARING, |index| {
            let last = self.slots.get(&index, 0).ok()?;
            Some((last, self.slots.set(index, zeroed_hist(), 0).is_ok()))
        })
    }
}

fn zeroed_hist() -> SyscallHist {
    // SAFETY: SyscallHist is plain integers (repr(C)); all zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The histograms: the kernel's, read when asked for, and those folded out.
pub struct SyscallHistograms {
    map: KernelHistograms,
    /// Histograms of exited processes, moved out of the map so it never fills up.
    folded: BTreeMap<SyscallKey, HistAccumulator>,
    /// The calls of live processes' threads that are gone (their slots freed); moved to
    /// `folded` when the process exits.
    retired: BTreeMap<SyscallKey, HistAccumulator>,
}

impl SyscallHistograms {
    pub fn new(map: KernelHistograms) -> SyscallHistograms {
        SyscallHistograms {
            map,
            folded: BTreeMap::new(),
            retired: BTreeMap::new(),
        }
    }

    /// Drop `tgid`'s entries from the map (kernelkite's own, once it stops tracing
    /// itself).
    pub fn forget_process(&mut self, tgid: u32) {
        let overflow = read_all(&self.map.overflow)
            .into_iter()
            .map(|(key, _)| (key, Home::Overflow));
        let entries: Vec<(SyscallKey, Home)> = (self.map.held_slots().into_iter())
            .chain(overflow)
            .filter(|(key, _)| key.tgid == tgid)
            .collect();
        self.map.remove(&entries);
        self.retired.retain(|key, _| key.tgid != tgid);
    }

    /// The cumulative histograms now: exited processes' (folded out of the kernel map),
    /// gone threads', plus the kernel's entries, read now (at the end, after the
    /// programs were detached), one per (process, syscall), sorted. The kernel's are
    /// read here, not at every snapshot: a thread pool holds a slot per thread and
    /// syscall, thousands of 2,448-byte copies.
    pub fn histograms(&self) -> Vec<SyscallHistogram> {
        // Merged without copying the folded map (100,000 entries at its cap).
        let mut live: BTreeMap<SyscallKey, HistAccumulator> = BTreeMap::new();
        let folded = |key: &SyscallKey| self.folded.get(key).cloned().unwrap_or_default();
        for (key, acc) in &self.retired {
            live.entry(*key).or_insert_with(|| folded(key)).merge(acc);
        }
        self.map.for_each(|key, value, _| {
            live.entry(key).or_insert_with(|| folded(&key)).add(value);
        });
        let mut syscalls: Vec<SyscallHistogram> = (self.folded.iter())
            .filter(|(key, _)| !live.contains_key(key))
            .map(|(key, acc)| acc.histogram(*key))
            .chain(live.iter().map(|(key, acc)| acc.histogram(*key)))
            .collect();
        syscalls.sort_by_key(|h| (h.pid, h.nr));
        syscalls
    }

    /// Drop the exited processes' histograms (see `Session::forget_exited_histograms`).
    pub fn forget_exited(&mut self) {
        self.folded = BTreeMap::new();
    }

    /// Move the histograms of processes with no live thread, and the slots of threads
    /// not in `live` (gone, or started since it was read: their calls are kept all the
    /// same), out of the kernel map. The slots are found by their holders: only those
    /// moved are read.
    pub fn fold_exited(&mut self, live: &BTreeMap<u32, BTreeMap<u32, ThreadState>>) {
        let mut gone: Vec<(SyscallKey, Home)> = (self.map.held_slots().into_iter())
            .filter(|(key, home)| match home {
                Home::Slot { tid, .. } => !live.get(&key.tgid).is_some_and(|t| t.contains_key(tid)),
                Home::Overflow => false,
            })
            .collect();
        for (key, hist) in read_all(&self.map.overflow) {
            if !live.contains_key(&key.tgid) {
                // No thread of the process is left to update the entry: the copy is final.
                fold_histogram(&mut self.folded, key, &hist, MAX_FOLDED_HISTOGRAMS);
                gone.push((key, Home::Overflow));
            }
        }
        for (key, hist) in self.map.remove(&gone) {
            if live.contains_key(&key.tgid) {
                self.retired.entry(key).or_default().add(&hist);
            } else {
                fold_histogram(&mut self.folded, key, &hist, MAX_FOLDED_HISTOGRAMS);
            }
        }
        // Processes gone: their retired threads' calls join their folded histograms.
        let exited: Vec<SyscallKey> = (self.retired.keys())
            .filter(|key| !live.contains_key(&key.tgid))
            .copied()
            .collect();
        for key in exited {
            if let Some(acc) = self.retired.remove(&key) {
                fold_accumulator(&mut self.folded, key, acc, MAX_FOLDED_HISTOGRAMS);
            }
        }
    }

    /// What the histograms keep (`KERNELKITE_DEBUG_SIZES`).
    pub fn sizes(&self) -> [(&'static str, u64); 3] {
        let buckets: usize = self.folded.values().map(|h| h.buckets.len()).sum();
        [
            ("folded_hists", self.folded.len() as u64),
            ("folded_hist_buckets", buckets as u64),
            ("retired_hists", self.retired.len() as u64),
        ]
    }
}

/// Add an exited process's histogram to `folded`; with `cap` histograms there already,
/// to its syscall's histogram of [`FOLDED_PID`]: the calls stay counted, only not per
/// process.
fn fold_histogram(
    folded: &mut BTreeMap<SyscallKey, HistAccumulator>,
    key: SyscallKey,
    value: &SyscallHist,
    cap: usize,
) {
    folded_entry(folded, key, cap).add(value);
}

/// [`fold_histogram`] of an accumulated histogram.
fn fold_accumulator(
    folded: &mut BTreeMap<SyscallKey, HistAccumulator>,
    key: SyscallKey,
    value: HistAccumulator,
    cap: usize,
) {
    folded_entry(folded, key, cap).merge(&value);
}

/// The entry of `folded` that `key`'s calls are added to (see [`fold_histogram`]).
fn folded_entry(
    folded: &mut BTreeMap<SyscallKey, HistAccumulator>,
    key: SyscallKey,
    cap: usize,
) -> &mut HistAccumulator {
    let key = if folded.len() < cap || folded.contains_key(&key) {
        key
    } else {
        SyscallKey {
            tgid: FOLDED_PID,
            ..key
        }
    };
    folded.entry(key).or_default()
}

/// Sum of one (process, syscall) histogram across map generations. Compact: a session
/// keeps up to [`MAX_FOLDED_HISTOGRAMS`] of them (exited processes'), so the buckets are
/// the non-zero ones only, `(bucket, count)` sorted, in an exactly sized vector.
#[derive(Clone, Default)]
struct HistAccumulator {
    total_ns: u64,
    max_ns: u64,
    buckets: Vec<(u32, u64)>,
}

impl HistAccumulator {
    fn add(&mut self, h: &SyscallHist) {
        let nonzero = (h.buckets.iter().enumerate()).filter(|(_, c)| **c > 0);
        self.add_counts(h.total_ns, h.max_ns, nonzero.map(|(i, &c)| (i as u32, c)));
    }

    fn merge(&mut self, other: &HistAccumulator) {
        self.add_counts(other.total_ns, other.max_ns, other.buckets.iter().copied());
    }

    /// Add a histogram given as its total, max and non-zero `(bucket, count)`s.
    fn add_counts(
        &mut self,
        total_ns: u64,
        max_ns: u64,
        buckets: impl Iterator<Item = (u32, u64)>,
    ) {
        self.total_ns += total_ns;
        self.max_ns = self.max_ns.max(max_ns);
        for (i, c) in buckets {
            match self.buckets.binary_search_by_key(&i, |b| b.0) {
                Ok(j) => self.buckets[j].1 += c,
                Err(j) => self.buckets.insert(j, (i, c)),
            }
        }
        self.buckets.shrink_to_fit();
    }

    fn histogram(&self, key: SyscallKey) -> SyscallHistogram {
        // Fields are incremented one at a time; a copy taken while a call is being
        // counted could see its bucket but not `count`: the buckets are the count.
        let nr = key.nr & !SYSCALL_BEFORE_START;
        SyscallHistogram {
            pid: key.tgid as i32,
            nr,
            before_start: key.nr & SYSCALL_BEFORE_START != 0,
            name: syscall_table::name(nr),
            count: self.buckets.iter().map(|b| b.1).sum(),
            total_ns: self.total_ns,
            max_ns: self.max_ns,
            buckets: self.buckets.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn past_the_cap_exited_histograms_fold_into_pid_0_and_keep_every_call() {
        let hist = |bucket: usize, n: u64| {
            let mut h = SyscallHist::default();
            h.buckets[bucket] = n;
            h.total_ns = 10 * n;
            h.max_ns = 7;
            h
        };
        let mut folded = BTreeMap::new();
        let mut calls = 0;
        // 50 processes × 2 syscalls (one of them before the session's start), cap 10.
        for tgid in 100..150 {
            for nr in [1, 3 | SYSCALL_BEFORE_START] {
                let n = tgid as u64 % 7 + 1;
                calls += n;
                fold_histogram(&mut folded, SyscallKey { tgid, nr }, &hist(4, n), 10);
            }
        }
        // The first 10 (process, syscall) kept, the rest one per syscall under pid 0.
        assert_eq!(folded.len(), 12);
        let pids: BTreeSet<u32> = folded.keys().map(|k| k.tgid).collect();
        assert_eq!(pids, [0, 100, 101, 102, 103, 104].into());
        let histograms: Vec<SyscallHistogram> =
            folded.iter().map(|(k, acc)| acc.histogram(*k)).collect();
        assert_eq!(histograms.iter().map(|h| h.count).sum::<u64>(), calls);
        let pid0: Vec<_> = histograms.iter().filter(|h| h.pid == 0).collect();
        assert_eq!(pid0.len(), 2);
        assert!(pid0.iter().any(|h| h.before_start && h.nr == 3));
        // A kept process's histogram still adds to its own past the cap.
        fold_histogram(
            &mut folded,
            SyscallKey { tgid: 100, nr: 1 },
            &hist(5, 2),
            10,
        );
        assert_eq!(folded.len(), 12);
        assert_eq!(
            folded[&SyscallKey { tgid: 100, nr: 1 }].buckets,
            [(4, 3), (5, 2)]
        );
    }
}
