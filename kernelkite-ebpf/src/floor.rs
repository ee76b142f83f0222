//! Empty programs on the syscall hooks, of the same attach type as the real ones: the
//! floor the overhead benchmark compares kernelkite's syscall hooks against.

use aya_ebpf::macros::btf_tracepoint;
use aya_ebpf::programs::BtfTracePointContext;

#[btf_tracepoint(function = "sys_enter")]
pub fn floor_sys_enter(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "sys_exit")]
pub fn floor_sys_exit(_ctx: BtfTracePointContext) -> i32 {
    0
}
