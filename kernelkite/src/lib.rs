//! kernelkite: where does my program's time go?
//!
//! Data path: a source (`source::procfs` sampler, `source::ebpf` collector, fixture
//! replay) produces a [`model::Bundle`] of raw cumulative counters; `analysis` derives
//! every number from a bundle; `report` renders analyses as text, JSON and HTML.

pub mod analysis;
pub mod cli;
pub mod commands;
pub mod export;
pub mod model;
pub mod recording;
pub mod report;
pub mod source;
#[cfg(target_os = "linux")]
pub mod top;
