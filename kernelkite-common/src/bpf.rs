//! Map keys, map values and ring-buffer events shared with `kernelkite-ebpf`.
//!
//! Every type is `#[repr(C)]` with explicit padding so both sides agree on the layout
//! byte for byte; the size assertions at the bottom fail the build if they drift.
