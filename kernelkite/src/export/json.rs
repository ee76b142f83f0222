//! `--format json`: the whole analysis of a bundle as one versioned JSON document.
//!
//! The document is `{schema, schema_version, analysis}` where `analysis` is
//! [`crate::analysis::Analysis`] serialized as is (every derived number the reports
//! use; units in the key names). Its JSON Schema, generated from the Rust types with
//! `schemars`, is published as `docs/export.schema.json`; a test regenerates it and fails
//! when it drifts, and validates the fixtures' exports against it.
//! Within a schema version fields are only added; a change of meaning bumps it.

use schemars::JsonSchema;
use serde::Serialize;

use crate::analysis::Analysis;

/// The value of [`ExportDocument::schema`].
pub const SCHEMA: &str = "kernelkite-analysis";
/// The value of [`ExportDocument::schema_version`].
pub const SCHEMA_VERSION: u32 = 1;

/// `kernelkite export --format json`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ExportDocument<'a> {
    /// Always `"kernelkite-analysis"`.
    pub schema: &'static str,
    /// Bumped when a field changes meaning or goes away.
    pub schema_version: u32,
    /// Every number kernelkite derives from the bundle (see docs/PROFILE.md).
    pub analysis: &'a Analysis,
}

/// The document of an analysis, pretty-printed with a trailing newline.
pub fn render(analysis: &Analysis) -> Vec<u8> {
    let doc = ExportDocument {
        schema: SCHEMA,
        schema_version: SCHEMA_VERSION,
        analysis,
    };
    let mut out = serde_json::to_vec_pretty(&doc).expect("analysis serializes");
    out.push(b'\n');
    out
}

/// The JSON Schema of [`ExportDocument`], as published in `docs/export.schema.json`.
pub fn schema_text() -> String {
    let schema = schemars::schema_for!(ExportDocument<'static>);
    let mut out = serde_json::to_string_pretty(&schema).expect("schema serializes");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyze;
    use crate::model::fixture::fixture_to_bundle;

    fn schema_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/export.schema.json")
    }

    /// `docs/export.schema.json` is what the types generate. With
    /// `KK_UPDATE_SCHEMA=1` the test rewrites it instead.
    #[test]
    fn published_schema_matches_the_types() {
        let fresh = schema_text();
        if std::env::var("KK_UPDATE_SCHEMA").is_ok_and(|v| v == "1") {
            std::fs::write(schema_path(), &fresh).unwrap();
        }
        let published = std::fs::read_to_string(schema_path()).unwrap_or_default();
        assert!(
            published == fresh,
            "docs/export.schema.json is out of date: run `KK_UPDATE_SCHEMA=1 cargo test -p kernelkite export::json`"
        );
    }

    #[test]
    fn every_fixture_export_validates_against_the_schema() {
        let schema: serde_json::Value = serde_json::from_str(&schema_text()).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        for name in [
            "api-server-ebpf.json",
            "cargo-build-before.json",
            "cargo-build-after.json",
        ] {
            let bundle = fixture_to_bundle(&std::fs::read(dir.join(name)).unwrap(), name).unwrap();
            let doc: serde_json::Value =
                serde_json::from_slice(&render(&analyze(&bundle))).unwrap();
            let errors: Vec<String> = validator
                .iter_errors(&doc)
                .map(|e| format!("{e} at {}", e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{name}: {errors:?}");
        }
    }

    #[test]
    fn schema_rejects_a_document_with_a_wrong_field() {
        let schema: serde_json::Value = serde_json::from_str(&schema_text()).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let bundle = fixture_to_bundle(
            &std::fs::read(dir.join("api-server-ebpf.json")).unwrap(),
            "x",
        )
        .unwrap();
        let mut doc: serde_json::Value =
            serde_json::from_slice(&render(&analyze(&bundle))).unwrap();
        doc["analysis"]["latency_classes"]["on_cpu"] = serde_json::json!("fast");
        assert!(!validator.is_valid(&doc));
        let mut doc2: serde_json::Value =
            serde_json::from_slice(&render(&analyze(&bundle))).unwrap();
        doc2["analysis"]["unexpected"] = serde_json::json!(1);
        assert!(!validator.is_valid(&doc2));
    }
}
