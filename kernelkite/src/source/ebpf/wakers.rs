//! Reading the kernel's waker entries (kernelkite-ebpf's wakers.rs: `WAKER_SLOTS`, and
//! `WAKERS` their overflow) into the bundle's [`WakerProfile`], with the sleeps still
//! open at the end of the session as `not_woken`.

use std::collections::{BTreeMap, BTreeSet};

use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use kernelkite_common::bpf::{run_state, ThreadState};
use kernelkite_common::wake::{
    waker_kind, waker_slots, WakerKey, WakerSlot, WakerTime, WAKERS_MAX_ENTRIES,
};
use kernelkite_common::LatencyClass;

use super::holders::Holders;
use super::map_batch::read_all;
use super::records::comm_string;
use crate::model::{WakerProfile, WakerSample};

/// The waker maps of a session.
pub struct WakerReader {
    holders: Holders,
    slots: Array<MapData, WakerSlot>,
    /// The slots' overflow.
    map: HashMap<MapData, WakerKey, WakerTime>,
    lost: PerCpuArray<MapData, u64>,
    /// Entries of wakees whose process has exited, and of waker threads gone, moved out
    /// of the kernel map (which would otherwise fill under process churn and drop the
    /// live threads' wakers).
    pub folded: BTreeMap<WakerKey, WakerTime>,
    /// Waker threads found gone at the last fold: their entries move at the next one,
    /// when no wakeup they started (noted at sched_waking, added at sched_wakeup) can
    /// still be adding to them between the read and the delete.
    pub gone_wakers: BTreeSet<(u32, u32)>,
}

/// Where a kernel entry is: in slot `index`, or in the overflow map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    Slot(u32),
    Overflow,
}

/// From this many entries in the kernel map on, the entries of waker threads that are
/// gone are folded too: a long-lived thread woken by each of a churn of short processes
/// (a shell waiting for its children, a build's make) has one entry per process, and
/// filled the map in a 10-minute soak (4.8 M waker updates lost).
pub const FOLD_GONE_WAKERS_AT: usize = WAKERS_MAX_ENTRIES as usize / 4;

/// (wakee, class, waker) entries of exited processes a session keeps (about 64 bytes
/// each); later ones are added to the same (class, waker) of wakee pid and tid
/// [`FOLDED_WAKEE`], so their time and count stay in the profile, only not per wakee.
pub const MAX_FOLDED_WAKERS: usize = 200_000;
/// The wakee pid and tid of folded entries past [`MAX_FOLDED_WAKERS`] (pid 0 is the
/// kernel's idle task, never a traced thread).
pub const FOLDED_WAKEE: u32 = 0;
/// Folded entries past which a new (class, waker) of wakee [`FOLDED_WAKEE`] also has
/// its waker thread summed as pid and tid [`FOLDED_WAKEE`]: with gone wakers folded,
/// a churn of short wakers would otherwise add one entry each for ever.
pub const MAX_FOLDED_WAKERS_PER_WAKER: usize = MAX_FOLDED_WAKERS + 20_000;

/// Softirq vector names (include/linux/interrupt.h, `softirq_to_name`), lowercase.
const SOFTIRQ_NAMES: [&str; 10] = [
    "hi", "timer", "net_tx", "net_rx", "block", "irq_poll", "tasklet", "sched", "hrtimer", "rcu",
];

/// A `waker_kind` as `Wakeup::waker_kind` names it.
pub fn waker_kind_name(kind: u32) -> &'static str {
    match kind {
        waker_kind::THREAD => "thread",
        waker_kind::TIMER => "timer",
        waker_kind::HARDIRQ => "hardirq",
        waker_kind::SOFTIRQ => "softirq",
        waker_kind::GROUP_EXIT => "group_exit",
        _ => "interrupt",
    }
}

impl WakerReader {
    /// The waker entries of `holders` (mapped here), `slots` and their overflow `map`,
    /// and the count of those lost.
    pub fn map(
        holders: Array<MapData, u64>,
        slots: Array<MapData, WakerSlot>,
        map: HashMap<MapData, WakerKey, WakerTime>,
        lost: PerCpuArray<MapData, u64>,
    ) -> std::io::Result<WakerReader> {
        Ok(WakerReader {
            holders: Holders::map(holders, slots.len())?,
            slots,
            map,
            lost,
            folded: BTreeMap::new(),
            gone_wakers: BTreeSet::new(),
        })
    }

    /// Every kernel entry: the slots held and counted, then the overflow (a key may be in
    /// both).
    fn read_entries(&self) -> Vec<(WakerKey, WakerTime, Home)> {
        self.entries_with(read_all(&self.map))
    }

    /// The slots held and counted, then `overflow` (the overflow map as read).
    fn entries_with(
        &self,
        overflow: Vec<(WakerKey, WakerTime)>,
    ) -> Vec<(WakerKey, WakerTime, Home)> {
        let mut out: Vec<(WakerKey, WakerTime, Home)> = (self.holders)
            .copy_held(|i| Some((i, self.slots.get(&i, 0).ok()?)))
            .into_iter()
            // A slot counted 0 is being filled (its key may be half written).
            .filter(|(holder, (_, slot))| {
                slot.time.count > 0 && *holder == waker_slots::holder(slot.key.tgid, slot.key.tid)
            })
            .map(|(_, (i, slot))| (slot.key, slot.time, Home::Slot(i)))
            .collect();
        out.extend(overflow.into_iter().map(|(k, v)| (k, v, Home::Overflow)));
        out
    }

    /// The kernel entries [`WakerReader::fold_exited`] looks at. Below
    /// [`FOLD_GONE_WAKERS_AT`] it needs only each entry's wakee, which a slot's holder
    /// says: the slots are not copied (a thread pool holds one per thread and waker,
    /// ten snapshots a second), and a slot moved is read once it is final.
    fn entries_to_check(&self) -> Vec<(WakerKey, WakerTime, Home)> {
        let overflow = read_all(&self.map);
        let held = self.holders.held();
        if overflow.len() + held.len() >= FOLD_GONE_WAKERS_AT {
            return self.entries_with(overflow);
        }
        (held.into_iter())
            .map(|(index, holder)| {
                let (tgid, tid) = waker_slots::wakee(holder);
                let wakee = WakerKey {
                    tgid,
                    tid,
                    ..WakerKey::default()
                };
                (wakee, WakerTime::default(), Home::Slot(index))
            })
            .chain(overflow.into_iter().map(|(k, v)| (k, v, Home::Overflow)))
            .collect()
    }

    /// Sleeps whose waker the kernel could not store.
    pub fn lost(&self) -> u64 {
        self.lost.get(&0, 0).map_or(0, |v| v.iter().sum())
    }

    /// Move the entries whose wakee has exited (`wakee_exited(key)`) out of the kernel
    /// map into [`WakerReader::folded`]: the wakee will not sleep again, so the copy is
    /// final. With the map at [`FOLD_GONE_WAKERS_AT`] entries or more, also those of
    /// waker threads gone since the last fold (`waker_alive(tgid, tid)` says, asked once
    /// per waker).
    pub fn fold_exited(
        &mut self,
        wakee_exited: impl Fn(&WakerKey) -> bool,
        waker_alive: impl Fn(u32, u32) -> bool,
    ) -> usize {
        let (dead, gone_now) = entries_to_fold(
            self.entries_to_check(),
            |e| &e.0,
            &self.gone_wakers,
            wakee_exited,
            waker_alive,
        );
        self.gone_wakers = gone_now;
        let caps = (MAX_FOLDED_WAKERS, MAX_FOLDED_WAKERS_PER_WAKER);
        let mut slots = Vec::new();
        for (key, value, home) in &dead {
            match home {
                Home::Overflow => {
                    fold_waker(&mut self.folded, *key, value, caps);
                    let _ = self.map.remove(key);
                }
                // Folded from its last reading once freed (below).
                Home::Slot(index) => {
                    slots.push((*index, waker_slots::holder(key.tgid, key.tid), ()));
                }
            }
        }
        let last = self.holders.free(slots, waker_slots::CLEARING, |index| {
            let last = self.slots.get(&index, 0).ok()?;
            Some((last, self.slots.set(index, WakerSlot::default(), 0).is_ok()))
        });
        for ((), slot) in last {
            fold_waker(&mut self.folded, slot.key, &slot.time, caps);
        }
        dead.len()
    }

    /// The profile now. `open_sleeps` are the traced threads' entries at the end of the
    /// session, `now` the clock then: a thread asleep then was not woken for
    /// `now - since_ns` of its sleep's class.
    pub fn profile(&self, open_sleeps: &[(u32, ThreadState)], now: u64) -> WakerProfile {
        let mut all = self.folded.clone();
        for (key, value, _) in self.read_entries() {
            add_waker(all.entry(key).or_default(), &value);
        }
        let mut wakeups: Vec<WakerSample> = all.iter().filter_map(|(k, v)| sample(k, v)).collect();
        for (tid, state) in open_sleeps {
            if let Some((class, ns)) = open_sleep(state, now) {
                wakeups.push(WakerSample {
                    pid: state.tgid as i32,
                    tid: *tid as i32,
                    class: class.name().to_string(),
                    kind: "not_woken".into(),
                    source: None,
                    source_id: None,
                    waker_pid: None,
                    waker_tid: None,
                    waker_comm: None,
                    total_ns: ns,
                    count: 1,
                });
            }
        }
        wakeups.sort();
        WakerProfile {
            wakeups,
            lost: self.lost(),
        }
    }
}

/// Of the kernel's `entries` (`key` gives each one's key), those
/// [`WakerReader::fold_exited`] moves, and the waker threads found gone now
/// (`gone_before`: those found gone at the last fold).
fn entries_to_fold<E>(
    entries: Vec<E>,
    key: impl Fn(&E) -> &WakerKey,
    gone_before: &BTreeSet<(u32, u32)>,
    wakee_exited: impl Fn(&WakerKey) -> bool,
    waker_alive: impl Fn(u32, u32) -> bool,
) -> (Vec<E>, BTreeSet<(u32, u32)>) {
    let crowded = entries.len() >= FOLD_GONE_WAKERS_AT;
    let mut alive: BTreeMap<(u32, u32), bool> = BTreeMap::new();
    let mut gone_now = BTreeSet::new();
    let dead = entries
        .into_iter()
        .filter(|e| {
            let k = key(e);
            if wakee_exited(k) {
                return true;
            }
            if !crowded || k.kind != waker_kind::THREAD {
                return false;
            }
            let waker = (k.waker_tgid, k.waker_tid);
            if *alive
                .entry(waker)
                .or_insert_with(|| waker_alive(waker.0, waker.1))
            {
                return false;
            }
            gone_now.insert(waker);
            gone_before.contains(&waker)
        })
        .collect();
    (dead, gone_now)
}

/// Add a folded entry to `folded`; with `caps.0` entries there already, to the same
/// (class, waker) of wakee [`FOLDED_WAKEE`], and with `caps.1`, a new one of those to
/// waker [`FOLDED_WAKEE`] too.
fn fold_waker(
    folded: &mut BTreeMap<WakerKey, WakerTime>,
    key: WakerKey,
    value: &WakerTime,
    caps: (usize, usize),
) {
    let mut key = key;
    if folded.len() >= caps.0 && !folded.contains_key(&key) {
        key.tgid = FOLDED_WAKEE;
        key.tid = FOLDED_WAKEE;
        if folded.len() >= caps.1 && !folded.contains_key(&key) {
            key.waker_tgid = FOLDED_WAKEE;
            key.waker_tid = FOLDED_WAKEE;
            // Many wakers summed: none of their names is the entry's.
            let nameless = WakerTime {
                comm: [0; 16],
                ..*value
            };
            add_waker(folded.entry(key).or_default(), &nameless);
            return;
        }
    }
    add_waker(folded.entry(key).or_default(), value);
}

/// Sum two entries of one key: time and count add up; the waker's comm is the latest
/// one known.
fn add_waker(sum: &mut WakerTime, more: &WakerTime) {
    sum.total_ns = sum.total_ns.saturating_add(more.total_ns);
    sum.count = sum.count.saturating_add(more.count);
    if more.comm[0] != 0 {
        sum.comm = more.comm;
    }
}

/// The class and length of the sleep a thread is in at `now`, if it is asleep. A thread
/// still INITIAL (no event since attach) sleeps in the class /proc showed then.
fn open_sleep(state: &ThreadState, now: u64) -> Option<(LatencyClass, u64)> {
    if state.run_state != run_state::SLEEPING && state.run_state != run_state::INITIAL {
        return None;
    }
    let class = LatencyClass::from_id(state.sleep_class)?;
    if matches!(
        class,
        LatencyClass::OnCpu | LatencyClass::Runqueue | LatencyClass::Steal
    ) {
        return None;
    }
    let ns = now.checked_sub(state.since_ns).filter(|ns| *ns > 0)?;
    Some((class, ns))
}

fn sample(k: &WakerKey, v: &WakerTime) -> Option<WakerSample> {
    let class = LatencyClass::from_id(k.class)?;
    let softirq_name = |vec: u32| -> String {
        let name = SOFTIRQ_NAMES
            .get(vec as usize)
            .copied()
            .unwrap_or("softirq");
        format!("softirq:{name}")
    };
    let (kind, source, source_id) = match k.kind {
        // A softirq the thread ran itself, inside its own syscall (a local send).
        waker_kind::THREAD if k.source != 0 => (
            "thread",
            Some(softirq_name(k.source - 1)),
            Some(k.source - 1),
        ),
        waker_kind::THREAD => ("thread", None, None),
        waker_kind::TIMER => ("interrupt", Some("timer".to_string()), None),
        waker_kind::HARDIRQ => ("interrupt", Some("hardirq".to_string()), Some(k.source)),
        waker_kind::SOFTIRQ => ("interrupt", Some(softirq_name(k.source)), Some(k.source)),
        // Woken to die with its process: no wakeup by work ended the sleep.
        waker_kind::GROUP_EXIT => ("not_woken", Some("group_exit".to_string()), None),
        _ => ("interrupt", Some("unknown".to_string()), None),
    };
    let thread = k.kind == waker_kind::THREAD;
    Some(WakerSample {
        pid: k.tgid as i32,
        tid: k.tid as i32,
        class: class.name().to_string(),
        kind: kind.to_string(),
        source,
        source_id,
        waker_pid: thread.then_some(k.waker_tgid as i32),
        waker_tid: thread.then_some(k.waker_tid as i32),
        waker_comm: thread.then(|| comm_string(&v.comm)),
        total_ns: v.total_ns,
        count: v.count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_keys_become_named_samples() {
        let mut comm = [0u8; 16];
        comm[..8].copy_from_slice(b"worker-1");
        let key = WakerKey {
            tgid: 10,
            tid: 11,
            class: LatencyClass::LockWait as u32,
            kind: waker_kind::THREAD,
            waker_tgid: 10,
            waker_tid: 12,
            ..WakerKey::default()
        };
        let s = sample(
            &key,
            &WakerTime {
                total_ns: 5,
                count: 2,
                comm,
            },
        )
        .unwrap();
        assert_eq!(
            (s.kind.as_str(), s.class.as_str(), s.waker_tid),
            ("thread", "lock_wait", Some(12))
        );
        assert_eq!(s.waker_comm.as_deref(), Some("worker-1"));
        let soft = WakerKey {
            kind: waker_kind::SOFTIRQ,
            source: 3,
            ..key
        };
        let s = sample(&soft, &WakerTime::default()).unwrap();
        assert_eq!(
            (s.kind.as_str(), s.source.as_deref(), s.waker_pid),
            ("interrupt", Some("softirq:net_rx"), None)
        );
        // The client's own send ran the softirq that woke it: the client is the waker.
        let own = WakerKey {
            kind: waker_kind::THREAD,
            source: 3 + 1,
            ..key
        };
        let s = sample(&own, &WakerTime::default()).unwrap();
        assert_eq!(
            (s.kind.as_str(), s.source.as_deref(), s.waker_tid),
            ("thread", Some("softirq:net_rx"), Some(12))
        );
        // Woken to die with its process: not woken, and no waker thread.
        let exit = WakerKey {
            kind: waker_kind::GROUP_EXIT,
            ..key
        };
        let s = sample(&exit, &WakerTime::default()).unwrap();
        assert_eq!(
            (s.kind.as_str(), s.source.as_deref(), s.waker_tid),
            ("not_woken", Some("group_exit"), None)
        );
    }

    /// A churn of short wakers (a shell's children) fills the map with one entry each
    /// for a live wakee: once the map is crowded, a gone waker's entries move out at the
    /// second fold that finds it gone (no wakeup it started can still add to them then);
    /// a live waker's, and the timer's, stay.
    #[test]
    fn entries_of_gone_wakers_fold_at_the_second_fold_once_the_map_is_crowded() {
        let entry = |waker_tid: u32, kind: u32| {
            (
                WakerKey {
                    tgid: 1,
                    tid: 1,
                    class: 3,
                    kind,
                    waker_tgid: waker_tid,
                    waker_tid,
                    ..WakerKey::default()
                },
                WakerTime::default(),
            )
        };
        let crowd: Vec<(WakerKey, WakerTime)> = (100..100 + FOLD_GONE_WAKERS_AT as u32)
            .map(|w| entry(w, waker_kind::THREAD))
            .chain([entry(0, waker_kind::TIMER)])
            .collect();
        let alive = |_: u32, tid: u32| tid.is_multiple_of(2);
        fn key(e: &(WakerKey, WakerTime)) -> &WakerKey {
            &e.0
        }
        let live_wakee = |_: &WakerKey| false;
        let (dead, gone) = entries_to_fold(crowd.clone(), key, &BTreeSet::new(), live_wakee, alive);
        assert!(dead.is_empty());
        assert_eq!(gone.len(), FOLD_GONE_WAKERS_AT / 2);
        let (dead, _) = entries_to_fold(crowd.clone(), key, &gone, live_wakee, alive);
        assert_eq!(dead.len(), FOLD_GONE_WAKERS_AT / 2);
        assert!(dead
            .iter()
            .all(|(k, _)| k.kind == waker_kind::THREAD && !k.waker_tid.is_multiple_of(2)));
        // Below the threshold gone wakers stay; exited wakees always go.
        let few: Vec<_> = crowd[..10].to_vec();
        let (dead, gone_few) = entries_to_fold(few.clone(), key, &gone, live_wakee, alive);
        assert!(dead.is_empty() && gone_few.is_empty());
        let (dead, _) = entries_to_fold(few, key, &gone, |_| true, alive);
        assert_eq!(dead.len(), 10);
    }

    #[test]
    fn past_the_cap_exited_wakees_fold_into_wakee_0_and_keep_their_time() {
        let key = |tid: u32, waker_tid: u32| WakerKey {
            tgid: tid,
            tid,
            class: LatencyClass::LockWait as u32,
            kind: waker_kind::THREAD,
            waker_tgid: 1,
            waker_tid,
            ..WakerKey::default()
        };
        let time = |ns: u64| WakerTime {
            total_ns: ns,
            count: 1,
            comm: [0; 16],
        };
        let mut folded = BTreeMap::new();
        let caps = (2, 4);
        fold_waker(&mut folded, key(10, 1), &time(5), caps);
        fold_waker(&mut folded, key(11, 1), &time(7), caps);
        // A known key still adds to itself at the cap.
        fold_waker(&mut folded, key(10, 1), &time(1), caps);
        // New wakees past the cap go to wakee 0, per (class, waker).
        fold_waker(&mut folded, key(12, 1), &time(3), caps);
        fold_waker(&mut folded, key(13, 1), &time(4), caps);
        fold_waker(&mut folded, key(14, 2), &time(9), caps);
        assert_eq!(folded.len(), 4);
        assert_eq!(folded[&key(10, 1)].total_ns, 6);
        assert_eq!(folded[&key(10, 1)].count, 2);
        let zero = |waker_tid| WakerKey {
            tgid: FOLDED_WAKEE,
            tid: FOLDED_WAKEE,
            ..key(0, waker_tid)
        };
        assert_eq!((folded[&zero(1)].total_ns, folded[&zero(1)].count), (7, 2));
        assert_eq!(folded[&zero(2)].total_ns, 9);
        // Past the second cap, new wakers of wakee 0 are summed as waker 0; known
        // ones still add to themselves.
        fold_waker(&mut folded, key(15, 3), &time(2), caps);
        fold_waker(&mut folded, key(16, 4), &time(8), caps);
        fold_waker(&mut folded, key(17, 2), &time(1), caps);
        assert_eq!(folded.len(), 5);
        let zero_waker = WakerKey {
            waker_tgid: FOLDED_WAKEE,
            waker_tid: FOLDED_WAKEE,
            ..zero(0)
        };
        assert_eq!(folded[&zero_waker].total_ns, 2 + 8);
        assert_eq!(folded[&zero(2)].total_ns, 9 + 1);
        let total: u64 = folded.values().map(|v| v.total_ns).sum();
        assert_eq!(total, 5 + 7 + 1 + 3 + 4 + 9 + 2 + 8 + 1, "nothing dropped");
    }

    #[test]
    fn only_sleeping_threads_have_an_open_sleep() {
        let mut t = ThreadState {
            run_state: run_state::SLEEPING,
            sleep_class: LatencyClass::SyscallBlocked as u32,
            since_ns: 100,
            ..ThreadState::default()
        };
        assert_eq!(
            open_sleep(&t, 150),
            Some((LatencyClass::SyscallBlocked, 50))
        );
        t.run_state = run_state::RUNNABLE;
        assert_eq!(open_sleep(&t, 150), None);
        t.run_state = run_state::INITIAL;
        t.sleep_class = LatencyClass::OnCpu as u32;
        assert_eq!(open_sleep(&t, 150), None);
    }
}
