//! kernelkite: where does my program's time go?
//!
//! Data path: a source (`source::procfs` sampler, `source::ebpf` collector, fixture
//! replay) produces a [`model::Bundle`] of raw cumulative counters; `analysis` derives
//! every number from a bundle; `report` renders analyses as text, JSON and HTML.

/// `eprintln!` that never panics: a closed stderr (`2>&1 | head`) must not stop
/// kernelkite before it has written what it measured.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod analysis;
pub mod cli;
pub mod collect;
pub mod commands;
pub mod export;
pub mod format;
pub mod model;
#[cfg(unix)]
pub mod output;
pub mod recording;
pub mod report;
pub mod source;
/// The tests' skips (tests/support/skip.rs): a failure under CI, or reported to it.
#[cfg(test)]
#[path = "../../tests/support/skip.rs"]
pub(crate) mod test_skip;
#[cfg(target_os = "linux")]
pub mod top;
