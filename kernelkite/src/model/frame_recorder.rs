//! Keeping frames over a session under the frame cap. Shared by the live collectors and
//! the replay of recordings (which applies the cap exactly as the session did).

use super::bundle::{Frame, FrameCap};

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

    /// Lend the frames out (see [`FrameRecorder::restore_frames`]); the recorder is
    /// empty until they come back.
    pub fn take_frames(&mut self) -> Vec<Frame> {
        std::mem::take(&mut self.frames)
    }

    /// Put back the frames [`FrameRecorder::take_frames`] lent.
    pub fn restore_frames(&mut self, frames: Vec<Frame>) {
        debug_assert!(self.frames.is_empty(), "frames pushed while lent");
        self.frames = frames;
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
}
