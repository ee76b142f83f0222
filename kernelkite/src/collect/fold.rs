//! The one fold from records to a bundle, and the fold that also records them.

use std::mem::take;

use crate::model::frame_keeper::keep_capped;
use crate::model::{
    Backend, Bundle, CommandLine, Frame, FrameCap, FrameKeeper, LifecycleEvent, ProcessIdentity,
};
use crate::recording::{Record, RecordRef, RecordSink, SessionStart};

/// Folds a session's records, in the order they were made, into its bundle: frames
/// under the frame cap and byte budget ([`FrameKeeper`]), events under
/// [`crate::model::frame_keeper::MAX_EVENTS`], and for the records that hold a whole
/// part (histograms, losses, calls in progress, stacks, wakers), the last one.
#[derive(Debug)]
pub struct BundleFold {
    /// Everything but the frames, which the keeper holds.
    bundle: Bundle,
    keeper: FrameKeeper,
    /// A stacks record named a slow syscall that was not folded in.
    bad_slow_stack: Option<u32>,
}

impl BundleFold {
    /// The fold of the session `start` describes; its frames also stay within
    /// `max_frame_bytes` (`--max-frames-mb`, which recordings do not hold: a replay
    /// passes the default).
    pub fn new(start: &SessionStart, max_frame_bytes: u64) -> BundleFold {
        let mut bundle = Bundle::new(start.backend, start.host.clone(), start.interval_ms);
        bundle.label = start.label.clone();
        bundle.root_pids = start.root_pids.clone();
        // The eBPF session counts lost events from 0; /proc has no such loss.
        bundle.events_lost = (start.backend == Backend::Ebpf).then_some(0);
        BundleFold {
            bundle,
            keeper: FrameKeeper::with_byte_budget(start.max_frames, max_frame_bytes),
            bad_slow_stack: None,
        }
    }

    /// Fold one record in. False when it was an event past the event cap, not kept (the
    /// collector counts it in `events_lost`).
    pub fn apply(&mut self, record: Record) -> bool {
        let bundle = &mut self.bundle;
        match record {
            Record::SessionStart(_) | Record::End { .. } => {}
            Record::Frame(f) => self.keeper.push(f),
            Record::Lifecycle(e) => return keep_capped(&mut bundle.lifecycle, e),
            Record::SlowSyscall(s) => return keep_capped(&mut bundle.slow_syscalls, s),
            Record::CommandLine(c) => return keep_capped(&mut bundle.command_lines, c),
            Record::ThreadExit(e) => return keep_capped(&mut bundle.thread_exits, e),
            Record::ProcessIdentity(i) => return keep_capped(&mut bundle.process_identities, i),
            Record::CgroupSample(c) => return keep_capped(&mut bundle.cgroup_samples, c),
            Record::TracedCgroup(c) => bundle.traced_cgroup = Some(c),
            Record::Histograms { histograms, .. } => bundle.syscalls = histograms,
            Record::EventsLost {
                count, by_cause, ..
            } => {
                bundle.events_lost = Some(count);
                bundle.events_lost_by_cause = by_cause;
            }
            Record::InProgress { calls, .. } => bundle.syscalls_in_progress = calls,
            Record::Launched(l) => bundle.launched = Some(l),
            Record::Stacks {
                profile,
                slow_stacks,
            } => {
                bundle.stacks = Some(profile);
                // Stacks are resolved when the session ends: by arrival index.
                for (i, stack) in slow_stacks {
                    match bundle.slow_syscalls.get_mut(i as usize) {
                        Some(slow) => slow.user_stack = Some(stack),
                        None => {
                            self.bad_slow_stack.get_or_insert(i);
                        }
                    }
                }
            }
            Record::Wakers(w) => bundle.wakers = Some(w),
            Record::Wakeups(w) => bundle.wakeups = Some(w),
        }
        true
    }

    pub fn frames(&self) -> &[Frame] {
        self.keeper.frames()
    }

    /// The bundle folded so far, without its frames and before the final sorts (a
    /// replay that shows each frame with the records before it: `top --replay`).
    pub fn so_far(&self) -> &Bundle {
        &self.bundle
    }

    pub fn frame_cap(&self) -> FrameCap {
        self.keeper.cap()
    }

    /// Estimated bytes of the kept frames.
    pub fn frame_bytes(&self) -> u64 {
        self.keeper.kept_bytes()
    }

    /// The slow syscalls kept so far (the next one's arrival index).
    pub fn slow_syscalls(&self) -> usize {
        self.bundle.slow_syscalls.len()
    }

    pub fn lifecycle_events(&self) -> usize {
        self.bundle.lifecycle.len()
    }

    pub fn command_lines(&self) -> &[CommandLine] {
        &self.bundle.command_lines
    }

    pub fn process_identities(&self) -> &[ProcessIdentity] {
        &self.bundle.process_identities
    }

    /// Drop the lifecycle events kept so far (a live view that reads none).
    pub fn drop_lifecycle(&mut self) {
        self.bundle.lifecycle = Vec::new();
    }

    /// Move out the lifecycle events and identity readings kept so far, and drop the
    /// other per-event records (command lines, thread exits, slow calls, cgroup
    /// samples): an always-on view (`agent`) folds what it needs at every snapshot and
    /// must keep nothing that grows with uptime.
    pub fn take_live_events(&mut self) -> (Vec<LifecycleEvent>, Vec<ProcessIdentity>) {
        let b = &mut self.bundle;
        b.command_lines = Vec::new();
        b.thread_exits = Vec::new();
        b.slow_syscalls = Vec::new();
        b.cgroup_samples = Vec::new();
        let mut lifecycle = take(&mut b.lifecycle);
        sort_lifecycle(&mut lifecycle);
        (lifecycle, take(&mut b.process_identities))
    }

    /// The first slow syscall index a stacks record named that was never folded in.
    pub fn bad_slow_stack(&self) -> Option<u32> {
        self.bad_slow_stack
    }

    /// Also keep a digest of the frames, for [`BundleFold::with_bundle_so_far`] with
    /// [`BundleFold::digest_frames`].
    pub fn keep_frame_digest(&mut self) {
        self.keeper.keep_digest();
    }

    /// The kept frames as their digest and the last one (see [`FrameKeeper`]).
    pub fn digest_frames(&self) -> Vec<Frame> {
        self.keeper.digest_frames()
    }

    /// `f` of the bundle as [`BundleFold::finish`] would make it now, with `frames` for
    /// its frames (a live view passes their digest), no slow syscalls (no live view
    /// shows them), and `live` filling in what the collector holds itself (the
    /// histograms and losses as the kernel holds them now). The lifecycle events are
    /// lent, not copied: sorted in place as `finish` sorts them (a stable sort of
    /// events that are only appended, so the final order does not change) and taken
    /// back after `f`.
    pub fn with_bundle_so_far<R>(
        &mut self,
        frames: Vec<Frame>,
        live: impl FnOnce(&mut Bundle),
        f: impl FnOnce(&Bundle) -> R,
    ) -> R {
        let mut lifecycle = take(&mut self.bundle.lifecycle);
        let slow = take(&mut self.bundle.slow_syscalls);
        let mut view = self.bundle.clone();
        self.bundle.slow_syscalls = slow;
        sort_lifecycle(&mut lifecycle);
        view.lifecycle = lifecycle;
        view.frames = frames;
        view.frame_cap = self.keeper.cap();
        live(&mut view);
        let result = f(&view);
        self.bundle.lifecycle = take(&mut view.lifecycle);
        result
    }

    /// The bundle. Events arrive out of order across CPUs: they are sorted here, by
    /// stable sorts of the arrival order, for a live session and its replay alike.
    pub fn finish(self) -> Bundle {
        let mut bundle = self.bundle;
        let (frames, cap) = self.keeper.into_parts();
        bundle.frames = frames;
        bundle.frame_cap = cap;
        sort_lifecycle(&mut bundle.lifecycle);
        bundle.slow_syscalls.sort_by_key(|s| (s.t_ns, s.tid));
        bundle.syscalls.sort_by_key(|h| (h.pid, h.nr));
        bundle
    }
}

fn sort_lifecycle(events: &mut [crate::model::LifecycleEvent]) {
    events.sort_by_key(|e| (e.t_ns, e.pid, e.tid));
}

/// A [`BundleFold`] whose records also go to a recording (`--record`) as they are
/// folded in: the replay of that recording folds the same records, in the same order,
/// so it rebuilds the same bundle.
pub struct RecordedFold {
    fold: BundleFold,
    sink: Option<Box<dyn RecordSink>>,
}

impl RecordedFold {
    /// Start the fold of `start`'s session, recording its start to `sink` first.
    pub fn new(
        start: SessionStart,
        max_frame_bytes: u64,
        mut sink: Option<Box<dyn RecordSink>>,
    ) -> RecordedFold {
        if let Some(sink) = sink.as_mut() {
            sink.record(RecordRef::SessionStart(&start));
        }
        RecordedFold {
            fold: BundleFold::new(&start, max_frame_bytes),
            sink,
        }
    }

    /// Record `record`, then fold it in (see [`BundleFold::apply`]).
    pub fn push(&mut self, record: Record) -> bool {
        if let Some(sink) = self.sink.as_mut() {
            sink.record(record.as_ref());
        }
        self.fold.apply(record)
    }

    /// Record `record` without folding it in: for a live view that keeps its own
    /// history (`top`), whose frames would otherwise be kept twice. Its bundle then
    /// lacks what its recording holds, so only such a view may use this.
    pub fn record_only(&mut self, record: RecordRef<'_>) {
        if let Some(sink) = self.sink.as_mut() {
            sink.record(record);
        }
    }

    /// Whether the records go to a recording as well.
    pub fn is_recording(&self) -> bool {
        self.sink.is_some()
    }

    pub fn fold(&self) -> &BundleFold {
        &self.fold
    }

    pub fn fold_mut(&mut self) -> &mut BundleFold {
        &mut self.fold
    }

    pub fn finish(self) -> Bundle {
        self.fold.finish()
    }
}
