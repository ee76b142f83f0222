//! Keeping frames over a session under the frame cap, and its events under the event
//! cap. Shared by the live collectors and the replay of recordings (which applies the
//! caps exactly as the session did).

use std::collections::BTreeMap;

use super::bundle::{Frame, FrameCap, NetDevCounters, ProcessSample, ThreadSample};

/// The memory kept frames may take by default (`--max-frames-mb`), in MiB.
pub const DEFAULT_MAX_FRAMES_MB: u64 = 256;

/// Frames of one session: at most `max_frames` of them, and no more than fit in a byte
/// budget (their estimated size in memory, [`frame_bytes`]). Past either cap each new
/// frame replaces the last one, so the final counters stay exact while the middle thins
/// out. A frame of a session with 50 threads takes about 14 KB, so 100,000 of them would
/// be 1.4 GB: the byte budget is what bounds a long session of a busy process.
#[derive(Debug)]
pub struct FrameKeeper {
    frames: Vec<Frame>,
    cap: FrameCap,
    max_bytes: u64,
    /// Estimated bytes of `frames`.
    kept_bytes: u64,
    /// Whether the byte budget, not `max_frames`, ended the appending.
    byte_budget_hit: bool,
    /// With [`FrameKeeper::keep_digest`]: every kept frame but the last, folded.
    digest: Option<FrameDigest>,
}

/// Frames folded into one: every process (by pid and start time) and each of its
/// threads as last seen in them, at the time of the latest. Cumulative counters only
/// grow, so for what a live scrape shows (class times, CPU, names per process) the
/// digest followed by the last frame analyses like all the frames (tested in
/// export::serve), at a cost that does not grow with the number of frames.
#[derive(Debug, Default)]
pub struct FrameDigest {
    t_ns: u64,
    processes: BTreeMap<(i32, u64), (ProcessSample, BTreeMap<i32, ThreadSample>)>,
    network: Option<Vec<NetDevCounters>>,
    host_steal_ticks: Option<u64>,
}

impl FrameDigest {
    pub fn add(&mut self, frame: &Frame) {
        self.t_ns = frame.t_ns;
        for p in &frame.processes {
            let (sample, threads) = self
                .processes
                .entry((p.pid, p.start_time_ticks))
                .or_insert_with(|| (p.clone(), BTreeMap::new()));
            *sample = ProcessSample {
                threads: Vec::new(),
                ..p.clone()
            };
            for t in &p.threads {
                threads.insert(t.tid, t.clone());
            }
        }
        if frame.network.is_some() {
            self.network.clone_from(&frame.network);
        }
        self.host_steal_ticks = frame.host_steal_ticks.or(self.host_steal_ticks);
    }

    /// The digest as one frame (processes sorted by pid, then start time).
    pub fn frame(&self) -> Frame {
        Frame {
            t_ns: self.t_ns,
            processes: (self.processes.values())
                .map(|(p, threads)| ProcessSample {
                    threads: threads.values().cloned().collect(),
                    ..p.clone()
                })
                .collect(),
            network: self.network.clone(),
            host_steal_ticks: self.host_steal_ticks,
        }
    }
}

/// Lifecycle events, and separately slow syscalls, a session keeps (about 100 bytes
/// each); later ones are dropped and counted in `events_lost`.
pub const MAX_EVENTS: usize = 1_000_000;

/// Push `item` unless `list` holds [`MAX_EVENTS`] already; whether it was kept.
pub fn keep_capped<T>(list: &mut Vec<T>, item: T) -> bool {
    let room = list.len() < MAX_EVENTS;
    if room {
        list.push(item);
    }
    room
}

/// Estimated bytes a frame takes in memory: its rows (heap strings of network interface
/// names included; comms and states are inline). An estimate from the frame's own
/// contents, so a replay reaches the budget at the same frame as the session did.
pub fn frame_bytes(frame: &Frame) -> u64 {
    use std::mem::size_of;
    let threads: usize = frame.processes.iter().map(|p| p.threads.len()).sum();
    let network = frame.network.as_ref().map_or(0, |n| {
        n.iter()
            .map(|d| size_of::<NetDevCounters>() + d.interface.len())
            .sum()
    });
    (size_of::<Frame>()
        + frame.processes.len() * size_of::<ProcessSample>()
        + threads * size_of::<ThreadSample>()
        + network) as u64
}

impl FrameKeeper {
    /// `max_frames` below 1 is treated as 1: a bundle needs a frame. The byte budget is
    /// [`DEFAULT_MAX_FRAMES_MB`].
    pub fn new(max_frames: u64) -> FrameKeeper {
        FrameKeeper::with_byte_budget(max_frames, DEFAULT_MAX_FRAMES_MB << 20)
    }

    /// [`FrameKeeper::new`] with a budget of `max_bytes` for the kept frames (the first
    /// frame is always kept).
    pub fn with_byte_budget(max_frames: u64, max_bytes: u64) -> FrameKeeper {
        FrameKeeper {
            frames: Vec::new(),
            cap: FrameCap {
                max_frames: max_frames.max(1),
                frames_dropped: 0,
            },
            max_bytes,
            kept_bytes: 0,
            byte_budget_hit: false,
            digest: None,
        }
    }

    /// Also keep a [`FrameDigest`] of the frames (for [`FrameKeeper::digest_frames`]).
    pub fn keep_digest(&mut self) {
        let mut digest = FrameDigest::default();
        if let Some((_, permanent)) = self.frames.split_last() {
            permanent.iter().for_each(|f| digest.add(f));
        }
        self.digest = Some(digest);
    }

    /// The kept frames as at most two, the digest of all but the last and the last
    /// (needs [`FrameKeeper::keep_digest`]; otherwise every frame).
    pub fn digest_frames(&self) -> Vec<Frame> {
        match (&self.digest, self.frames.split_last()) {
            (Some(digest), Some((last, permanent))) if !permanent.is_empty() => {
                vec![digest.frame(), last.clone()]
            }
            _ => self.frames.clone(),
        }
    }

    pub fn push(&mut self, frame: Frame) {
        let bytes = frame_bytes(&frame);
        let below_cap = (self.frames.len() as u64) < self.cap.max_frames;
        let fits = self.frames.is_empty() || self.kept_bytes + bytes <= self.max_bytes;
        if below_cap && fits {
            self.kept_bytes += bytes;
            // The last frame stays for good now: into the digest.
            if let (Some(digest), Some(last)) = (self.digest.as_mut(), self.frames.last()) {
                digest.add(last);
            }
            self.frames.push(frame);
            return;
        }
        if below_cap {
            // The budget is full: the frames kept so far are the cap from now on, so
            // reports say a cap was hit and how many frames it dropped.
            self.cap.max_frames = self.frames.len() as u64;
            self.byte_budget_hit = true;
        }
        if let Some(last) = self.frames.last_mut() {
            self.kept_bytes = self.kept_bytes - frame_bytes(last) + bytes;
            *last = frame;
            self.cap.frames_dropped += 1;
        }
    }

    /// Estimated bytes of the kept frames ([`frame_bytes`]).
    pub fn kept_bytes(&self) -> u64 {
        self.kept_bytes
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    pub fn cap(&self) -> FrameCap {
        self.cap
    }

    /// Lend the frames out (see [`FrameKeeper::restore_frames`]); the keeper is
    /// empty until they come back.
    pub fn take_frames(&mut self) -> Vec<Frame> {
        std::mem::take(&mut self.frames)
    }

    /// Put back the frames [`FrameKeeper::take_frames`] lent.
    pub fn restore_frames(&mut self, frames: Vec<Frame>) {
        debug_assert!(self.frames.is_empty(), "frames pushed while lent");
        self.frames = frames;
    }

    /// Whether the byte budget lowered the frame cap (to `cap().max_frames`).
    pub fn byte_budget_hit(&self) -> bool {
        self.byte_budget_hit
    }

    pub fn into_parts(self) -> (Vec<Frame>, FrameCap) {
        (self.frames, self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(t_ns: u64) -> Frame {
        Frame {
            t_ns,
            processes: Vec::new(),
            network: None,
            host_steal_ticks: None,
        }
    }

    #[test]
    fn cap_replaces_the_last_frame_and_counts_drops() {
        let mut rec = FrameKeeper::new(3);
        for t in 0..7 {
            rec.push(frame(t));
        }
        let t: Vec<u64> = rec.frames().iter().map(|f| f.t_ns).collect();
        assert_eq!(t, [0, 1, 6]);
        assert_eq!(
            rec.cap(),
            FrameCap {
                max_frames: 3,
                frames_dropped: 4
            }
        );
    }

    /// A frame with one process of `threads` threads.
    fn busy_frame(t_ns: u64, threads: usize) -> Frame {
        let thread = |tid| ThreadSample {
            tid,
            comm: "worker".into(),
            state: "S".into(),
            schedstat: None,
            syscall_nr: None,
            class_ns: None,
        };
        Frame {
            t_ns,
            processes: vec![ProcessSample {
                pid: 1,
                ppid: 0,
                comm: "busy".into(),
                state: "S".into(),
                start_time_ticks: 0,
                utime_ticks: t_ns,
                stime_ticks: 0,
                cutime_ticks: 0,
                cstime_ticks: 0,
                rss_pages: 0,
                num_threads: threads as u64,
                io: None,
                threads: (0..threads as i32).map(thread).collect(),
            }],
            network: None,
            host_steal_ticks: None,
        }
    }

    #[test]
    fn the_byte_budget_lowers_the_cap_and_counts_drops() {
        let size = frame_bytes(&busy_frame(0, 50));
        // A 50-thread frame is several KB: the budget bounds a long session's memory.
        assert!(size > 5_000, "{size}");
        let mut rec = FrameKeeper::with_byte_budget(100_000, 3 * size + size / 2);
        for t in 0..10 {
            rec.push(busy_frame(t, 50));
        }
        let t: Vec<u64> = rec.frames().iter().map(|f| f.t_ns).collect();
        assert_eq!(t, [0, 1, 9], "the last frame keeps being refreshed");
        assert!(rec.byte_budget_hit());
        assert_eq!(
            rec.cap(),
            FrameCap {
                max_frames: 3,
                frames_dropped: 7
            }
        );
        // The first frame is kept whatever its size.
        let mut tiny = FrameKeeper::with_byte_budget(10, 1);
        tiny.push(busy_frame(0, 50));
        tiny.push(busy_frame(1, 50));
        assert_eq!(tiny.frames().len(), 1);
        assert_eq!(tiny.frames()[0].t_ns, 1);
    }

    #[test]
    fn below_the_cap_nothing_is_dropped() {
        let mut rec = FrameKeeper::new(10);
        rec.push(frame(1));
        rec.push(frame(2));
        assert_eq!(rec.frames().len(), 2);
        assert_eq!(rec.cap().frames_dropped, 0);
        assert_eq!(rec.cap().max_frames, 10);
    }
}
