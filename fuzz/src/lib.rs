//! What the fuzz targets share: every report and export of a bundle that loaded, so a
//! bundle that passes validation is shown to be one every output can handle.

use kernelkite::analysis::analyze;
use kernelkite::export::{self, ExportOptions, Format};
use kernelkite::model::Bundle;
use kernelkite::report;

/// Analyse `bundle` and render it every way the commands do (summary, tree, HTML
/// report, viewer data, each export format); none of them may panic.
pub fn render_all(bundle: &Bundle) {
    let analysis = analyze(bundle);
    let _ = report::summary::summary_text(&analysis);
    let _ = report::summary::summary_json(&analysis);
    let _ = report::tree::tree_text(&analysis);
    let timeline = kernelkite::analysis::timeline::extract(bundle, Some(&analysis));
    let _ = report::html::render_with(bundle, &analysis, &timeline);
    let _ = report::viewer::document(bundle, &analysis, &timeline);
    for format in [
        Format::Prometheus,
        Format::Otlp,
        Format::OtlpTraces,
        Format::OtlpProto,
        Format::OtlpTracesProto,
        Format::ChromeTrace,
        Format::Json,
        Format::Folded,
    ] {
        let _ = export::render(bundle, &analysis, format, ExportOptions::default());
    }
}
