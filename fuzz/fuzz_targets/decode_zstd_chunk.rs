//! Any bytes in a zstd chunk with a correct checksum give records or a one-line error,
//! never a panic, a hang or a huge allocation: the decompressor meets hostile frames,
//! and the record decoders meet whatever a frame inflates to.
//!
//! The first input byte picks how the rest becomes the chunk
//! (`fuzz_support::as_zstd_recording`): even, compressed here as a records payload;
//! odd, a raw length and the zstd frame itself.

#![no_main]

use kernelkite::collect::replay_recording;
use kernelkite::recording::{fuzz_support, RecordingReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = fuzz_support::as_zstd_recording(data);
    // Within the budget a recording of this length gets (as `replay` and the reports).
    let len = file.len() as u64;
    if let Ok(mut reader) = RecordingReader::new(file.as_slice()).map(|r| r.limit_to_input_len(len)) {
        loop {
            match reader.next_record() {
                Ok(Some(record)) => {
                    let _ = record.t_ns();
                }
                Ok(None) => break,
                Err(e) => {
                    assert!(!e.to_string().contains('\n'), "one-line errors: {e}");
                    break;
                }
            }
        }
    }
    if let Err(e) = replay_recording(file.as_slice(), len) {
        assert!(!e.to_string().contains('\n'), "one-line errors: {e}");
    }
});
