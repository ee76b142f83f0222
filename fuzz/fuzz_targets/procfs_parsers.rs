//! Any bytes given to the /proc file parsers (stat, io, schedstat, syscall, net/dev,
//! status) and the cgroup files' parsers (/proc/PID/cgroup and the names in its path,
//! mountinfo, cpu.stat, pressure) give fields or nothing, never a panic: a comm and a
//! cgroup name hold any bytes their owner chose.

#![no_main]

use kernelkite::source::procfs::fuzz_support::parse_all;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_all(data);
});
