//! `--format folded`: folded stacks (`class;root;...;leaf ns` per line), the input of
//! flamegraph.pl, inferno and speedscope. The same lines as `kernelkite flamegraph
//! --folded` without `--class`: every class, the class as the root frame.

use super::ExportError;
use crate::analysis::stacks::{folded_lines, FoldOptions};
use crate::model::Bundle;

/// The folded stacks of a bundle recorded with `--stacks`.
pub fn render(bundle: &Bundle) -> Result<Vec<u8>, ExportError> {
    if bundle.stacks.is_none() {
        return Err(ExportError::NoStacks);
    }
    let options = FoldOptions {
        class: None,
        class_root: true,
        per_process: false,
    };
    let mut out = String::new();
    for line in folded_lines(bundle, &options) {
        out.push_str(&line);
        out.push('\n');
    }
    Ok(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use crate::model::fixture::committed as fixture;

    #[test]
    fn a_bundle_without_stacks_is_refused() {
        let err = super::render(&fixture("api-server-ebpf.json")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bundle has no stacks; record with --stacks"
        );
    }

    #[test]
    fn stacks_fold_with_the_class_as_root_and_sum_to_the_samples() {
        let bundle = fixture("stacks-demo.json");
        let text = String::from_utf8(super::render(&bundle).unwrap()).unwrap();
        let total: u64 = text
            .lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        let samples: u64 = bundle
            .stacks
            .as_ref()
            .unwrap()
            .samples
            .iter()
            .map(|s| s.time_ns())
            .sum();
        assert_eq!(total, samples);
        assert!(text.lines().all(|l| kernelkite_common::LatencyClass::ALL
            .iter()
            .any(|c| l.starts_with(&format!("{};", c.name())))));
    }
}
