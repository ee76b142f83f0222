//! The one definition of everything that crosses the kernel/user boundary.
//!
//! `no_std` so the BPF programs in `kernelkite-ebpf` can use it; with the `user`
//! feature the map and event types also implement `aya::Pod`.
#![no_std]

pub mod bpf;
pub mod class;
pub mod hist;
#[cfg(feature = "sources")]
pub mod sources;
pub mod wake;

pub use class::{LatencyClass, NUM_CLASSES};
