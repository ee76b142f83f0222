//! `--format folded`: folded stacks (`frame;frame;frame count` per line), the input of
//! flamegraph.pl, inferno and speedscope.
//!
//! Bundles do not record stacks yet (the stacks issue adds them); until a bundle can
//! carry stacks this exporter refuses, rather than invent any.

use super::ExportError;
use crate::model::Bundle;

/// The folded stacks of a bundle: none can be derived from today's bundle model.
pub fn render(_bundle: &Bundle) -> Result<Vec<u8>, ExportError> {
    Err(ExportError::NoStacks)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bundle_without_stacks_is_refused() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let bytes = std::fs::read(dir.join("api-server-ebpf.json")).unwrap();
        let bundle =
            crate::model::fixture::fixture_to_bundle(&bytes, "api-server-ebpf.json").unwrap();
        let err = super::render(&bundle).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bundle has no stacks; record with --stacks"
        );
    }
}
