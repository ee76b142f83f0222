//! Any bytes given to the recording decoder give records or a one-line error, never a
//! panic, a hang or a huge allocation.
//!
//! Input that starts with the recording magic is decoded as a file. Any other input is
//! wrapped as the payload of one stored chunk with a correct CRC behind a valid header,
//! so the fuzzer also reaches the record decoders (it could not forge a checksum).

#![no_main]

use kernelkite::collect::replay_recording;
use kernelkite::recording::{fuzz_support, RecordingReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = fuzz_support::as_recording(data);
    // The streaming API, record by record.
    let len = file.len() as u64;
    if let Ok(mut reader) = RecordingReader::new(file.as_slice()).map(|r| r.limit_to_input_len(len)) {
        while let Ok(Some(record)) = reader.next_record() {
            let _ = record.t_ns();
        }
    }
    // And the whole replay, which validates the rebuilt bundle.
    if let Err(e) = replay_recording(file.as_slice(), len) {
        assert!(!e.to_string().contains('\n'), "one-line errors");
    }
});
