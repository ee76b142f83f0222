//! Any text in a tracefs `format` file gives the field offsets the classic hooks read,
//! or nothing, never a panic.

#![no_main]

use kernelkite::source::ebpf::tracefs::fuzz_parse_field;
use libfuzzer_sys::fuzz_target;

/// The fields `ClassicLayout::read` asks for.
const FIELDS: [&str; 7] = [
    "prev_state",
    "next_pid",
    "pid",
    "child_pid",
    "id",
    "args",
    "group_dead",
];

fuzz_target!(|data: &[u8]| {
    let Ok(format) = std::str::from_utf8(data) else {
        return;
    };
    for field in FIELDS {
        let _ = fuzz_parse_field(format, field);
    }
});
