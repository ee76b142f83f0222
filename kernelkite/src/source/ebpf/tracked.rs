//! What a session remembers about the threads and processes it traces, between
//! snapshots. Bounded by what is still alive: a thread is forgotten once the kernel's
//! THREADS map no longer holds it, a process once it has no traced thread and /proc no
//! longer shows it (as a zombie holding its final counters).
//!
//! Thread and process ids are reused (pid_max is 32768 on small machines, so they wrap
//! within a long session): a thread is its tid and the time its tracking started
//! (`ThreadState::start_ns`), a process its pid and its start time in /proc. A new
//! thread with an old tid is then neither taken for dead nor given the old one's times.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ClassTimes, Frame};

/// A traced thread: (tid, CLOCK_MONOTONIC ns its tracking started).
pub type ThreadKey = (u32, u64);

#[derive(Debug, Default)]
pub struct Tracked {
    /// Threads whose exit record arrived, while the map may still hold their entry (the
    /// exit hook removes it right after sending the record), so a snapshot does not
    /// count them as alive.
    exited: BTreeSet<ThreadKey>,
    /// Class times last put in a frame, per thread: frames must never go backwards.
    last_emitted: BTreeMap<ThreadKey, ClassTimes>,
    /// Processes traced, by pid, with their /proc start time once a frame showed them
    /// with a live traced thread.
    processes: BTreeMap<u32, Option<u64>>,
}

impl Tracked {
    /// A thread's exit was seen; false if it already was.
    pub fn exit_seen(&mut self, thread: ThreadKey) -> bool {
        self.exited.insert(thread)
    }

    pub fn has_exited(&self, thread: ThreadKey) -> bool {
        self.exited.contains(&thread)
    }

    /// Class times for a frame, never below what an earlier frame showed of the thread.
    pub fn clamp_monotonic(&mut self, thread: ThreadKey, times: ClassTimes) -> ClassTimes {
        let prev = self.last_emitted.entry(thread).or_default();
        let a = times.to_array();
        let b = prev.to_array();
        let mut out = [0u64; kernelkite_common::NUM_CLASSES];
        for i in 0..out.len() {
            out[i] = a[i].max(b[i]);
        }
        *prev = ClassTimes::from_array(out);
        *prev
    }

    /// After a snapshot read the map: forget the threads it no longer holds (`present`:
    /// every entry read, exited ones included).
    pub fn keep_threads(&mut self, present: &BTreeSet<ThreadKey>) {
        self.exited.retain(|t| present.contains(t));
        self.last_emitted.retain(|t, _| present.contains(t));
    }

    /// Every pid with a traced thread is a traced process.
    pub fn add_processes(&mut self, pids: impl IntoIterator<Item = u32>) {
        for pid in pids {
            self.processes.entry(pid).or_insert(None);
        }
    }

    pub fn forget_process(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// The pids of the traced processes (the /proc scope of a snapshot).
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.processes.keys().copied()
    }

    /// Keep only our processes in a frame sampled from /proc, and forget the processes
    /// that are gone: no traced thread left (`live`: pids with one) and not in /proc, or
    /// in /proc with another start time than when it had one (the pid was reused by a
    /// process we do not trace).
    ///
    /// `still_held(pid)` asks the map again, after /proc was read, for a pid in `live`
    /// that /proc shows for the first time or with a new start time: an entry the map
    /// held when it was read can be a thread whose exit was missed, removed by the fork
    /// hook when an untraced task took its tid since (pid reuse between the two reads).
    /// A traced process that /proc shows for the first time and whose every thread
    /// exited in that window is left out of this frame too, like a process shorter than
    /// one interval: its exit records still carry its times.
    pub fn keep_ours(
        &mut self,
        frame: &mut Frame,
        live: &BTreeSet<u32>,
        mut still_held: impl FnMut(u32) -> bool,
    ) {
        let processes = &mut self.processes;
        let mut reused = Vec::new();
        frame.processes.retain(|p| {
            let pid = p.pid as u32;
            let Some(start) = processes.get_mut(&pid) else {
                return false;
            };
            if live.contains(&pid) {
                if *start != Some(p.start_time_ticks) && !still_held(pid) {
                    reused.push(pid);
                    return false;
                }
                // A traced thread in it: ours, also a traced child that reused the pid.
                *start = Some(p.start_time_ticks);
                return true;
            }
            start.is_none_or(|s| s == p.start_time_ticks)
        });
        for pid in reused {
            processes.remove(&pid);
        }
        let shown: BTreeSet<u32> = frame.processes.iter().map(|p| p.pid as u32).collect();
        processes.retain(|pid, _| live.contains(pid) || shown.contains(pid));
    }

    /// Entries of each structure, for `KERNELKITE_DEBUG_SIZES`.
    pub fn sizes(&self) -> [(&'static str, u64); 3] {
        [
            ("exited_threads", self.exited.len() as u64),
            ("last_emitted", self.last_emitted.len() as u64),
            ("tracked_processes", self.processes.len() as u64),
        ]
    }

    /// Entries held, for tests of the bound.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.exited.len() + self.last_emitted.len() + self.processes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessSample;

    fn times(on_cpu: u64) -> ClassTimes {
        ClassTimes {
            on_cpu,
            ..ClassTimes::default()
        }
    }

    fn process(pid: i32, start_time_ticks: u64) -> ProcessSample {
        ProcessSample {
            pid,
            ppid: 1,
            comm: "p".into(),
            state: "S".into(),
            start_time_ticks,
            utime_ticks: 0,
            stime_ticks: 0,
            cutime_ticks: 0,
            cstime_ticks: 0,
            rss_pages: 0,
            num_threads: 1,
            io: None,
            threads: Vec::new(),
        }
    }

    fn frame(processes: Vec<ProcessSample>) -> Frame {
        Frame {
            t_ns: 0,
            processes,
            network: None,
            host_steal_ticks: None,
        }
    }

    #[test]
    fn a_reused_tid_is_a_new_thread() {
        let mut t = Tracked::default();
        let old = (4242, 1_000);
        assert_eq!(t.clamp_monotonic(old, times(900)).on_cpu, 900);
        assert!(t.exit_seen(old));
        // The tid comes back for a thread whose tracking started later.
        let new = (4242, 5_000);
        assert!(!t.has_exited(new), "the new thread is alive");
        assert_eq!(
            t.clamp_monotonic(new, times(10)).on_cpu,
            10,
            "the new thread does not inherit the old one's class times"
        );
        // Frames of one thread still never go backwards.
        assert_eq!(t.clamp_monotonic(new, times(5)).on_cpu, 10);
    }

    #[test]
    fn threads_gone_from_the_map_are_forgotten() {
        let mut t = Tracked::default();
        // A long session: 100,000 short-lived threads, one snapshot each, two alive at a time.
        for i in 0..100_000u32 {
            let key = (i % 32_768, u64::from(i));
            t.clamp_monotonic(key, times(1));
            t.exit_seen(key);
            let present: BTreeSet<ThreadKey> = [key, (99_999, 0)].into();
            t.keep_threads(&present);
            t.keep_threads(&[(99_999, 0)].into());
        }
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn processes_are_forgotten_once_reaped_and_a_reused_pid_is_not_ours() {
        let mut t = Tracked::default();
        t.add_processes([10, 11]);
        let mut f = frame(vec![process(10, 100), process(11, 200)]);
        t.keep_ours(&mut f, &[10, 11].into(), |_| true);
        assert_eq!(f.processes.len(), 2);
        // 10's threads exited; it is a zombie in /proc: still shown.
        let mut f = frame(vec![process(10, 100), process(11, 200)]);
        t.keep_ours(&mut f, &[11].into(), |_| true);
        assert_eq!(f.processes.len(), 2);
        // 10 was reaped and its pid reused by a process we do not trace.
        let mut f = frame(vec![process(10, 900), process(11, 200), process(12, 50)]);
        t.keep_ours(&mut f, &[11].into(), |_| true);
        let pids: Vec<i32> = f.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [11]);
        assert_eq!(t.pids().collect::<Vec<_>>(), [11]);
        // A traced child gets pid 11 again (11 exited and was reaped in between): ours.
        let mut f = frame(vec![process(11, 700)]);
        t.keep_ours(&mut f, &[11].into(), |_| true);
        assert_eq!(f.processes.len(), 1);
        let mut f = frame(vec![process(11, 700)]);
        t.keep_ours(&mut f, &BTreeSet::new(), |_| true);
        assert_eq!(f.processes.len(), 1, "its zombie is shown");
        // 11 exits and is reaped: nothing is left.
        let mut f = frame(Vec::new());
        t.keep_ours(&mut f, &BTreeSet::new(), |_| true);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_pid_whose_stale_entry_left_the_map_before_proc_was_read_is_not_ours() {
        let mut t = Tracked::default();
        // The map held an entry under pid 30 (a thread whose exit was missed); an
        // untraced process took the pid before /proc was read, and the fork hook removed
        // the entry: the map, asked again, no longer holds 30.
        t.add_processes([30, 31]);
        let mut f = frame(vec![process(30, 500), process(31, 100)]);
        t.keep_ours(&mut f, &[30, 31].into(), |pid| pid != 30);
        let pids: Vec<i32> = f.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [31]);
        assert_eq!(t.pids().collect::<Vec<_>>(), [31], "30 is forgotten");
        // A process already shown with the same start time is not asked about again.
        let mut f = frame(vec![process(31, 100)]);
        t.keep_ours(&mut f, &[31].into(), |_| {
            panic!("asked about a known process")
        });
        assert_eq!(f.processes.len(), 1);
    }
}
