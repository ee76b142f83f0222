//! Any bytes given to the /proc file parsers (stat, io, schedstat, syscall, net/dev)
//! give fields or nothing, never a panic: a comm holds any bytes a process chose.

#![no_main]

use kernelkite::source::procfs::fuzz_support::parse_all;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_all(data);
});
