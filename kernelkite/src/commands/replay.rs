//! `kernelkite replay`: fixture or recording → bundle, byte for byte the same every time.
//! The input's first bytes decide: the recording magic (see `recording`) or JSON; a
//! `.kkr` name is always read as a recording.

use std::io::Read;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::ReplayArgs;
use crate::collect::replay_recording_file;
use crate::model::fixture::load_fixture;
use crate::model::{write_bundle, Bundle};
use crate::recording::{has_magic, MAGIC};

pub fn execute(args: &ReplayArgs) -> Result<ExitCode> {
    let mut bundle = if is_recording(&args.input) {
        replay_file(&args.input)?
    } else {
        load_fixture(&args.input)?
    };
    if let Some(label) = &args.label {
        bundle.label = Some(label.clone());
    }
    write_bundle(&args.bundle, &bundle)
        .with_context(|| format!("cannot write {}", args.bundle.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// Whether `path` is read as a recording: it starts with the recording magic, or is
/// named `.kkr` (a `.kkr` file with the wrong magic is a damaged recording).
pub fn is_recording(path: &std::path::Path) -> bool {
    starts_with_recording_magic(path) || path.extension().is_some_and(|e| e == "kkr")
}

/// A bundle, or the bundle a recording replays to: every report takes either.
pub fn load_input(path: &std::path::Path) -> Result<Bundle> {
    if is_recording(path) {
        replay_file(path)
    } else {
        Ok(crate::model::load_bundle(path)?)
    }
}

fn starts_with_recording_magic(path: &std::path::Path) -> bool {
    let mut head = [0u8; MAGIC.len()];
    crate::model::io::open_input(path)
        .and_then(|(mut f, _)| f.read_exact(&mut head))
        .is_ok_and(|()| has_magic(&head))
}

/// Rebuild a recording's bundle; a recording cut short replays its complete chunks with
/// a warning on stderr.
fn replay_file(path: &std::path::Path) -> Result<Bundle> {
    let replayed =
        replay_recording_file(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if let Some(tail) = replayed.incomplete_tail {
        crate::note!(
            "kernelkite: warning: {}: the last {} bytes (from byte {}) are an incomplete chunk, ignored; replayed the {} complete chunks (the session was cut short)",
            path.display(),
            tail.bytes,
            tail.offset,
            replayed.chunks
        );
    } else if !replayed.ended {
        crate::note!(
            "kernelkite: warning: {}: no end record: the session was cut short; replayed its {} complete chunks",
            path.display(),
            replayed.chunks
        );
    }
    Ok(replayed.bundle)
}
