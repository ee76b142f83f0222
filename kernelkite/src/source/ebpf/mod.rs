//! The eBPF collector: BPF programs on scheduler, syscall and lifecycle tracepoints
//! aggregate exact latency classes and syscall histograms in the kernel; this module
//! loads them, tells them what to trace, and folds their maps and ring-buffer records
//! into bundle frames.

pub mod availability;
pub mod blocked;
pub mod btf_layout;
pub mod histograms;
pub mod holders;
pub mod loader;
pub mod map_batch;
pub mod records;
pub mod session;
pub mod stacks;
pub mod syscall_table;
pub mod target_bits;
pub mod thread_table;
pub mod tracefs;
pub mod tracked;
pub mod unwind;
pub mod wakers;
