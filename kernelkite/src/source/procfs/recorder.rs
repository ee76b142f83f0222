//! Keeping frames over a session: the frame cap and the sampling schedule.

use std::time::{Duration, Instant};

use crate::model::{Frame, FrameCap};

/// Frames of one session, at most `max_frames` of them. Past the cap each new frame
/// replaces the last one, so the final counters stay exact while the middle thins out.
#[derive(Debug)]
pub struct FrameRecorder {
    frames: Vec<Frame>,
    cap: FrameCap,
}

impl FrameRecorder {
    /// `max_frames` below 1 is treated as 1: a bundle needs a frame.
    pub fn new(max_frames: u64) -> FrameRecorder {
        FrameRecorder {
            frames: Vec::new(),
            cap: FrameCap {
                max_frames: max_frames.max(1),
                frames_dropped: 0,
            },
        }
    }

    pub fn push(&mut self, frame: Frame) {
        if (self.frames.len() as u64) < self.cap.max_frames {
            self.frames.push(frame);
        } else if let Some(last) = self.frames.last_mut() {
            *last = frame;
            self.cap.frames_dropped += 1;
        }
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    pub fn cap(&self) -> FrameCap {
        self.cap
    }

    pub fn into_parts(self) -> (Vec<Frame>, FrameCap) {
        (self.frames, self.cap)
    }
}

/// Drift-free sampling deadlines: start + k * interval. When a tick runs late past
/// whole intervals, the missed deadlines are skipped rather than sampled in a burst.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    start: Instant,
    interval: Duration,
    next: Instant,
}

impl Schedule {
    /// Deadlines at `start + interval`, `start + 2 * interval`, ...
    pub fn new(start: Instant, interval: Duration) -> Schedule {
        let interval = interval.max(Duration::from_millis(1));
        Schedule {
            start,
            interval,
            next: start + interval,
        }
    }

    /// When the next sample is due.
    pub fn next_deadline(&self) -> Instant {
        self.next
    }

    /// The sample due at the current deadline was taken at `now`: move to the next
    /// deadline after `now`.
    pub fn advance(&mut self, now: Instant) {
        self.next += self.interval;
        if self.next <= now {
            let behind = now.duration_since(self.next).as_nanos() / self.interval.as_nanos();
            self.next += self.interval * (behind as u32 + 1);
        }
    }

    /// Nanoseconds from the session start to `now` (the frame timestamp).
    pub fn t_ns(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_nanos() as u64
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
        }
    }

    #[test]
    fn cap_replaces_the_last_frame_and_counts_drops() {
        let mut rec = FrameRecorder::new(3);
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

    #[test]
    fn below_the_cap_nothing_is_dropped() {
        let mut rec = FrameRecorder::new(10);
        rec.push(frame(1));
        rec.push(frame(2));
        assert_eq!(rec.frames().len(), 2);
        assert_eq!(rec.cap().frames_dropped, 0);
        assert_eq!(rec.cap().max_frames, 10);
    }

    #[test]
    fn schedule_does_not_drift_and_skips_missed_deadlines() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Schedule::new(start, ms(100));
        assert_eq!(s.next_deadline(), start + ms(100));
        // A tick that ran 30 ms late does not push later deadlines back.
        s.advance(start + ms(130));
        assert_eq!(s.next_deadline(), start + ms(200));
        // A tick 250 ms late skips the deadlines it missed.
        s.advance(start + ms(450));
        assert_eq!(s.next_deadline(), start + ms(500));
        assert_eq!(s.t_ns(start + ms(450)), 450_000_000);
    }
}
