//! Any bytes given to the bundle loader give a validated bundle or a one-line error,
//! never a panic; and a bundle that passes validation can be analysed, reported and
//! exported every way (validation is what the outputs rely on).

#![no_main]

use kernelkite::model::io::bundle_from_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match bundle_from_bytes(data) {
        Ok(bundle) => kernelkite_fuzz::render_all(&bundle),
        Err(e) => assert!(!e.contains('\n'), "one-line errors: {e}"),
    }
});
