//! Records → bundle: the same steps the live session took to build its bundle (the frame
//! cap, the final sort of events), so a replay writes the live session's bundle byte for
//! byte.

use std::io::Read;

use super::decode::{DecodeError, IncompleteTail, RecordingReader};
use super::{ClockAnchor, Record, SessionStart};
use crate::model::frame_keeper::keep_capped;
use crate::model::validate::validate;
use crate::model::FrameKeeper;
use crate::model::{Backend, Bundle};

/// Folds records, in file order, into a bundle.
#[derive(Debug, Default)]
pub struct BundleBuilder {
    session: Option<(SessionStart, Bundle, FrameKeeper)>,
    /// A stacks record named a slow syscall that was not recorded.
    bad_slow_stack: Option<u32>,
}

impl BundleBuilder {
    pub fn new() -> BundleBuilder {
        BundleBuilder::default()
    }

    /// The session's start record, once seen.
    pub fn session(&self) -> Option<&SessionStart> {
        self.session.as_ref().map(|(s, _, _)| s)
    }

    /// Apply one record. Records before the session start are ignored (the reader
    /// rejects such files).
    pub fn apply(&mut self, record: Record) {
        if let Record::SessionStart(start) = record {
            let mut bundle = Bundle::new(start.backend, start.host.clone(), start.interval_ms);
            bundle.label = start.label.clone();
            bundle.root_pids = start.root_pids.clone();
            // The eBPF session counts lost events from 0; /proc has no such loss.
            bundle.events_lost = (start.backend == Backend::Ebpf).then_some(0);
            let keeper = FrameKeeper::new(start.max_frames);
            self.session = Some((start, bundle, keeper));
            return;
        }
        let Some((_, bundle, keeper)) = self.session.as_mut() else {
            return;
        };
        match record {
            Record::SessionStart(_) => {}
            Record::Frame(f) => keeper.push(f),
            // Under the session's event cap (the drops are in its events lost count).
            Record::Lifecycle(e) => {
                keep_capped(&mut bundle.lifecycle, e);
            }
            Record::SlowSyscall(s) => {
                keep_capped(&mut bundle.slow_syscalls, s);
            }
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
                // As the live session does before its final sort: by arrival index.
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
            Record::CommandLine(c) => {
                keep_capped(&mut bundle.command_lines, c);
            }
            Record::End { .. } => {}
        }
    }

    /// The bundle, checked as a loaded bundle would be.
    pub fn finish(self) -> Result<Bundle, String> {
        let (_, mut bundle, keeper) = self
            .session
            .ok_or_else(|| "the recording holds no complete session start record".to_string())?;
        if let Some(i) = self.bad_slow_stack {
            return Err(format!(
                "the stacks record names slow syscall {i}, but only {} were recorded",
                bundle.slow_syscalls.len()
            ));
        }
        let (frames, cap) = keeper.into_parts();
        bundle.frames = frames;
        bundle.frame_cap = cap;
        // What the eBPF session does when it finishes (events arrive out of order
        // across CPUs); stable sorts of the arrival order, as live.
        bundle.lifecycle.sort_by_key(|e| (e.t_ns, e.pid, e.tid));
        bundle.slow_syscalls.sort_by_key(|s| (s.t_ns, s.tid));
        bundle.syscalls.sort_by_key(|h| (h.pid, h.nr));
        if bundle.frames.is_empty() {
            return Err("the recording holds no complete frame".into());
        }
        validate(&bundle).map_err(|e| {
            format!(
                "the replayed bundle is invalid: {}",
                crate::model::io::one_line(&e)
            )
        })?;
        Ok(bundle)
    }
}

/// A replayed recording.
#[derive(Debug)]
pub struct Replayed {
    pub bundle: Bundle,
    pub version: u16,
    pub chunks: u64,
    pub records: u64,
    pub clock: ClockAnchor,
    /// Whether the session's end record was there (it ended and wrote everything).
    pub ended: bool,
    /// The incomplete chunk the file ends with (a killed session, a full disk).
    pub incomplete_tail: Option<IncompleteTail>,
}

/// Why a recording could not be replayed (one line).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("{0}")]
    Invalid(String),
}

/// Read a whole recording of `input_len` bytes and rebuild its bundle (what it
/// decompresses to is bounded by `input_len`, see `decode::decode_budget`).
pub fn replay_recording(input: impl Read, input_len: u64) -> Result<Replayed, ReplayError> {
    replay_reader(RecordingReader::new(input)?.limit_to_input_len(input_len))
}

/// Read a whole recording file and rebuild its bundle.
pub fn replay_recording_file(path: &std::path::Path) -> Result<Replayed, ReplayError> {
    replay_reader(RecordingReader::open(path)?)
}

fn replay_reader<R: Read>(mut reader: RecordingReader<R>) -> Result<Replayed, ReplayError> {
    let mut builder = BundleBuilder::new();
    let mut records = 0;
    while let Some(record) = reader.next_record()? {
        records += 1;
        builder.apply(record);
    }
    let clock = builder.session().map(|s| s.clock).unwrap_or_default();
    let bundle = builder.finish().map_err(ReplayError::Invalid)?;
    Ok(Replayed {
        bundle,
        version: reader.version(),
        chunks: reader.chunks(),
        records,
        clock,
        ended: reader.ended(),
        incomplete_tail: reader.incomplete_tail(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn messages_quoting_file_strings_stay_on_one_line() {
        assert_eq!(
            crate::model::io::one_line("syscall histogram pi\n\tx of pid 1"),
            "syscall histogram pi\\n\\tx of pid 1"
        );
    }
}
