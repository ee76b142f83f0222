//! `--record FILE` for the live commands: create the recording before the session
//! starts (a bad path fails before anything runs) and finish it at the end.

use anyhow::{Context, Result};

use crate::cli::{RecordArgs, RecordCompression};
use crate::recording::{Compression, RecordSink, SharedRecording};

/// The open recording of a session, if `--record` was given.
pub struct RecordingFile {
    pub recording: SharedRecording,
    path: std::path::PathBuf,
    /// The file as created, so a discard removes it only if the name still holds it.
    created: std::fs::File,
}

impl RecordingFile {
    pub fn create(args: &RecordArgs) -> Result<Option<RecordingFile>> {
        let Some(path) = &args.record else {
            return Ok(None);
        };
        let compression = match args.record_compression {
            RecordCompression::Zstd => Compression::Zstd,
            RecordCompression::None => Compression::None,
        };
        let context = || format!("cannot create recording {}", path.display());
        // In place under its name at once (see `crate::output`): a killed session
        // leaves its complete chunks there.
        let file = crate::output::create_streaming(path).with_context(context)?;
        let created = file.try_clone().with_context(context)?;
        let recording = SharedRecording::new(file, compression).with_context(context)?;
        Ok(Some(RecordingFile {
            recording,
            path: path.clone(),
            created,
        }))
    }

    /// A sink for the session (it appends to the same file).
    pub fn sink(&self) -> Box<dyn RecordSink> {
        Box::new(self.recording.clone())
    }

    /// The session never started (a bad pid, a command that cannot run): remove the
    /// file rather than leave a recording with nothing in it.
    pub fn discard_if_empty(&self) {
        if self.recording.records() == 0 {
            let _ = crate::output::remove_created(&self.path, &self.created);
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
        crate::note!(
            "kernelkite: recorded {} ({} records in {} chunks, {} bytes; {} bytes uncompressed); replay: {} replay {} OUT.json",
            self.path.display(),
            stats.records,
            stats.chunks,
            stats.file_bytes,
            stats.raw_bytes,
            crate::commands::invocation::self_command(),
            crate::commands::invocation::shell_quote(&self.path.to_string_lossy())
        );
        Ok(())
    }
}
