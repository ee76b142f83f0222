//! Any bytes given to the fixture converter give a validated bundle or a one-line
//! error, never a panic; a converted bundle can be analysed, reported and exported.

#![no_main]

use kernelkite::model::fixture::fixture_to_bundle;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match fixture_to_bundle(data, "fuzz.json") {
        Ok(bundle) => kernelkite_fuzz::render_all(&bundle),
        Err(e) => {
            let e = e.to_string();
            assert!(!e.contains('\n'), "one-line errors: {e}");
        }
    }
});
