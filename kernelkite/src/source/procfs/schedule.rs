//! The sampling schedule (the frame cap is `model::FrameKeeper`).

use std::time::{Duration, Instant};

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
