//! A recording → its bundle, through the fold the live session built it with, so a
//! replay writes the live session's bundle byte for byte.

use std::io::Read;

use super::BundleFold;
use crate::model::frame_keeper::DEFAULT_MAX_FRAMES_MB;
use crate::model::validate::validate;
use crate::model::Bundle;
use crate::recording::{
    ClockAnchor, DecodeError, IncompleteTail, Record, RecordingReader, SessionStart,
};

/// Folds a recording's records, in file order, into its bundle (one [`BundleFold`],
/// from the session start record on).
#[derive(Debug, Default)]
struct ReplayFold {
    session: Option<(SessionStart, BundleFold)>,
}

impl ReplayFold {
    /// Apply one record. Records before the session start are ignored (the reader
    /// rejects such files).
    fn apply(&mut self, record: Record) {
        match (&mut self.session, record) {
            (None, Record::SessionStart(start)) => {
                let fold = BundleFold::new(&start, DEFAULT_MAX_FRAMES_MB << 20);
                self.session = Some((start, fold));
            }
            (Some((_, fold)), record) => {
                fold.apply(record);
            }
            (None, _) => {}
        }
    }

    /// The bundle, checked as a loaded bundle would be.
    fn finish(self) -> Result<Bundle, String> {
        let (_, fold) = self
            .session
            .ok_or_else(|| "the recording holds no complete session start record".to_string())?;
        if let Some(i) = fold.bad_slow_stack() {
            return Err(format!(
                "the stacks record names slow syscall {i}, but only {} were recorded",
                fold.slow_syscalls()
            ));
        }
        if fold.frames().is_empty() {
            return Err("the recording holds no complete frame".into());
        }
        let bundle = fold.finish();
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
    let mut fold = ReplayFold::default();
    let mut records = 0;
    while let Some(record) = reader.next_record()? {
        records += 1;
        fold.apply(record);
    }
    let clock = fold
        .session
        .as_ref()
        .map(|(s, _)| s.clock)
        .unwrap_or_default();
    let bundle = fold.finish().map_err(ReplayError::Invalid)?;
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
