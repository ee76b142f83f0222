//! Reading the kernel's `WAKERS` map (kernelkite-ebpf's wakers.rs) into the bundle's
//! [`WakerProfile`], with the sleeps still open at the end of the session as
//! `not_woken`.

use std::collections::BTreeMap;

use aya::maps::{HashMap, MapData, PerCpuArray};
use kernelkite_common::bpf::{run_state, ThreadState};
use kernelkite_common::wake::{waker_kind, WakerKey, WakerTime};
use kernelkite_common::LatencyClass;

use super::map_batch::read_all;
use super::records::comm_string;
use crate::model::{WakerProfile, WakerSample};

/// The waker maps of a session.
pub struct WakerReader {
    pub map: HashMap<MapData, WakerKey, WakerTime>,
    pub lost: PerCpuArray<MapData, u64>,
    /// Entries of wakees whose process has exited, moved out of the kernel map (which
    /// would otherwise fill under process churn and drop the live threads' wakers).
    pub folded: BTreeMap<WakerKey, WakerTime>,
}

/// (wakee, class, waker) entries of exited processes a session keeps (about 64 bytes
/// each); later ones are added to the same (class, waker) of wakee pid and tid
/// [`FOLDED_WAKEE`], so their time and count stay in the profile, only not per wakee.
pub const MAX_FOLDED_WAKERS: usize = 200_000;
/// The wakee pid and tid of folded entries past [`MAX_FOLDED_WAKERS`] (pid 0 is the
/// kernel's idle task, never a traced thread).
pub const FOLDED_WAKEE: u32 = 0;

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
    /// Sleeps whose waker the kernel could not store.
    pub fn lost(&self) -> u64 {
        self.lost.get(&0, 0).map_or(0, |v| v.iter().sum())
    }

    /// Move the entries whose wakee has exited (`exited(key)`) out of the kernel map into
    /// [`WakerReader::folded`]: the wakee will not sleep again, so the copy is final.
    pub fn fold_exited(&mut self, exited: impl Fn(&WakerKey) -> bool) -> usize {
        let dead: Vec<(WakerKey, WakerTime)> = read_all(&self.map)
            .into_iter()
            .filter(|(k, _)| exited(k))
            .collect();
        for (key, value) in &dead {
            fold_waker(&mut self.folded, *key, value, MAX_FOLDED_WAKERS);
            let _ = self.map.remove(key);
        }
        dead.len()
    }

    /// The profile now. `open_sleeps` are the traced threads' entries at the end of the
    /// session, `now` the clock then: a thread asleep then was not woken for
    /// `now - since_ns` of its sleep's class.
    pub fn profile(&self, open_sleeps: &[(u32, ThreadState)], now: u64) -> WakerProfile {
        let mut all = self.folded.clone();
        for (key, value) in read_all(&self.map) {
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

/// Add an exited wakee's entry to `folded`; with `cap` entries there already, to the same
/// (class, waker) of wakee [`FOLDED_WAKEE`].
fn fold_waker(
    folded: &mut BTreeMap<WakerKey, WakerTime>,
    key: WakerKey,
    value: &WakerTime,
    cap: usize,
) {
    let key = if folded.len() < cap || folded.contains_key(&key) {
        key
    } else {
        WakerKey {
            tgid: FOLDED_WAKEE,
            tid: FOLDED_WAKEE,
            ..key
        }
    };
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
    let (kind, source, source_id) = match k.kind {
        waker_kind::THREAD => ("thread", None, None),
        waker_kind::TIMER => ("interrupt", Some("timer".to_string()), None),
        waker_kind::HARDIRQ => ("interrupt", Some("hardirq".to_string()), Some(k.source)),
        waker_kind::SOFTIRQ => {
            let name = SOFTIRQ_NAMES
                .get(k.source as usize)
                .copied()
                .unwrap_or("softirq");
            ("interrupt", Some(format!("softirq:{name}")), Some(k.source))
        }
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
        fold_waker(&mut folded, key(10, 1), &time(5), 2);
        fold_waker(&mut folded, key(11, 1), &time(7), 2);
        // A known key still adds to itself at the cap.
        fold_waker(&mut folded, key(10, 1), &time(1), 2);
        // New wakees past the cap go to wakee 0, per (class, waker).
        fold_waker(&mut folded, key(12, 1), &time(3), 2);
        fold_waker(&mut folded, key(13, 1), &time(4), 2);
        fold_waker(&mut folded, key(14, 2), &time(9), 2);
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
        let total: u64 = folded.values().map(|v| v.total_ns).sum();
        assert_eq!(total, 5 + 7 + 1 + 3 + 4 + 9, "nothing dropped");
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
