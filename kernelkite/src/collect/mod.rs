//! Building a bundle. Every collector (the eBPF session, `run`'s /proc sampler) and the
//! replay of a recording fold the same records into a bundle through one
//! [`BundleFold`], so "a replay is byte-identical to the live bundle" holds by
//! construction: a live collector records each record as it folds it in
//! ([`RecordedFold`]), and the replay folds them again in file order.

mod fold;
mod replay;

pub use fold::{BundleFold, RecordedFold};
pub use replay::{replay_recording, replay_recording_file, ReplayError, Replayed};

#[cfg(test)]
mod tests;
