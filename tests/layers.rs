//! Imports point down the layers (docs/ARCHITECTURE.md): every `crate::MODULE` path in a
//! top-level module of `kernelkite/src` names a module below it. A source never reaches
//! into an analysis, an analysis never into a renderer, a renderer never into a command.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module and the modules it may use, lowest layer first.
const LAYERS: &[(&str, &[&str])] = &[
    // Leaves: formatting, and the one way files are created.
    ("format", &[]),
    ("output", &[]),
    // The data: bundle, fixtures, syscall tables; recordings of it.
    ("model", &["format", "output"]),
    ("recording", &["format", "model", "output"]),
    // The one fold from records to a bundle (live collectors and replay).
    ("collect", &["format", "model", "output", "recording"]),
    // Where data comes from, and what is derived from it (siblings: neither uses the
    // other).
    (
        "source",
        &["collect", "format", "model", "output", "recording"],
    ),
    ("analysis", &["format", "model"]),
    // Renderers of analyses.
    ("report", &["analysis", "format", "model", "output"]),
    ("export", &["analysis", "format", "model", "output"]),
    // The interfaces: arguments, the live view, the subcommands that wire it all. The
    // arguments name option types of the layers below (export formats, the agent's
    // --fold-by and --rank-by).
    ("cli", &["analysis", "export", "format", "model"]),
    (
        "top",
        &[
            "analysis",
            "collect",
            "format",
            "model",
            "output",
            "recording",
            "report",
            "source",
        ],
    ),
    (
        "commands",
        &[
            "analysis",
            "cli",
            "collect",
            "export",
            "format",
            "model",
            "output",
            "recording",
            "report",
            "source",
            "top",
        ],
    ),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a file names as `crate::NAME`.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        let tail = &rest[at + "crate::".len()..];
        let name: String = tail
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `crate::note!` is the stderr macro, not a module.
        if !name.is_empty() && !tail[name.len()..].starts_with('!') {
            names.insert(name);
        }
        rest = tail;
    }
    names
}

#[test]
fn every_import_points_down_the_layers() {
    let root = src();
    let mut violations = Vec::new();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    for file in files {
        let rel = file.strip_prefix(&root).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if matches!(top.as_str(), "lib" | "main" | "build") {
            continue;
        }
        let allowed = LAYERS
            .iter()
            .find(|(name, _)| *name == top)
            .unwrap_or_else(|| panic!("{top} (from {rel:?}) is not in LAYERS: give it a layer"))
            .1;
        let text = std::fs::read_to_string(&file).unwrap();
        for name in crate_paths(&text) {
            // The tests' skip rule (tests/support/skip.rs, `#[cfg(test)]` only) is
            // used by unit tests in every layer and is no layer of the program.
            if name == "test_skip" {
                continue;
            }
            if name != top && !allowed.contains(&name.as_str()) {
                violations.push(format!("{}: crate::{name}", rel.display()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports that point up or sideways:\n{}",
        violations.join("\n")
    );
}

/// The table itself is layered: a module uses only modules listed before it.
#[test]
fn the_layers_have_no_cycle() {
    for (i, (name, uses)) in LAYERS.iter().enumerate() {
        for used in *uses {
            let below = LAYERS[..i].iter().any(|(n, _)| n == used);
            assert!(below, "{name} uses {used}, which is not below it");
        }
    }
}

#[test]
fn a_path_into_another_module_is_found() {
    let names = crate_paths(
        "use crate::analysis::x;\ncrate::note!(\"a\"); let _ = crate::report::clean(s);",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["analysis", "report"]
    );
}
