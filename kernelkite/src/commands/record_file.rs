//! `--record FILE` for the live commands: create the recording before the session
//! starts (a bad path fails before anything runs) and finish it at the end.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{RecordArgs, RecordCompression};
use crate::recording::{Compression, RecordSink, SharedRecording};

/// The open recording of a session, if `--record` was given.
pub struct RecordFile {
    pub recording: SharedRecording,
    path: std::path::PathBuf,
}

impl RecordFile {
    pub fn create(args: &RecordArgs) -> Result<Option<RecordFile>> {
        let Some(path) = &args.record else {
            return Ok(None);
        };
        let compression = match args.record_compression {
            RecordCompression::Zstd => Compression::Zstd,
            RecordCompression::None => Compression::None,
        };
        let recording = SharedRecording::create(path, compression)
            .with_context(|| format!("cannot create recording {}", path.display()))?;
        Ok(Some(RecordFile {
            recording,
            path: path.clone(),
        }))
    }

    /// A sink for the session (it appends to the same file).
    pub fn sink(&self) -> Box<dyn RecordSink> {
        Box::new(self.recording.clone())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session never started (a bad pid, a command that cannot run): remove the
    /// file rather than leave a recording with nothing in it.
    pub fn discard_if_empty(&self) {
        if self.recording.records() == 0 {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Write the end record, sync, and say what was recorded.
    pub fn finish(self, end_t_ns: u64) -> Result<()> {
        let stats = self.recording.finish(end_t_ns).with_context(|| {
            format!(
                "recording {} is incomplete (its complete chunks still replay)",
                self.path.display()
            )
        })?;
        eprintln!(
            "kernelkite: recorded {} ({} records in {} chunks, {} bytes; {} bytes uncompressed); replay: kernelkite replay {} OUT.json",
            self.path.display(),
            stats.records,
            stats.chunks,
            stats.file_bytes,
            stats.raw_bytes,
            self.path.display()
        );
        Ok(())
    }
}
