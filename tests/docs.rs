//! The docs checked against the code: docs/BUNDLE.md's field and column lists against
//! the bundle types (kernelkite/src/model/bundle.rs, whose field order is the
//! serialized order), docs/JSON.md's key tables against the documents the binary
//! prints, and every code-like backticked name in docs/ARCHITECTURE.md against the
//! source tree.

#[path = "support/cli.rs"]
mod cli_support;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use cli_support::kk;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The backticked spans of `text`, in order.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The `pub` fields of `pub struct NAME { ... }` in `source`, in declaration order.
fn struct_fields(source: &str, name: &str) -> Vec<String> {
    let start = format!("pub struct {name} {{");
    let body: Vec<&str> = source
        .lines()
        .skip_while(|l| !l.starts_with(&start))
        .skip(1)
        .take_while(|l| !l.starts_with('}'))
        .collect();
    assert!(!body.is_empty(), "no `{start}` in the source");
    body.iter()
        .filter_map(|l| l.strip_prefix("    pub "))
        .filter_map(|l| l.split_once(':'))
        .map(|(field, _)| field.to_string())
        .collect()
}

// ---------------------------------------------------------------- docs/BUNDLE.md

/// The first column of the markdown table whose header line starts with `header`.
fn table_keys(text: &str, header: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').nth(1).unwrap().trim().to_string())
        .collect()
}

#[test]
fn bundle_md_lists_the_bundles_fields_in_their_serialized_order() {
    let doc = read("docs/BUNDLE.md");
    let source = read("kernelkite/src/model/bundle.rs");
    let documented: Vec<String> = table_keys(&doc, "| field | type | meaning |")
        .iter()
        .map(|k| k.trim_matches('`').to_string())
        .collect();
    assert_eq!(documented, struct_fields(&source, "Bundle"));
    // A frame's keys, as the sentence after the table gives them.
    let frame = doc
        .split("A frame is `")
        .nth(1)
        .and_then(|s| s.split('`').next())
        .expect("docs/BUNDLE.md says what a frame is");
    let keys: Vec<String> = frame
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert_eq!(keys, struct_fields(&source, "Frame"));
}

/// The columns a row paragraph (`**NAME row** (N columns...) ...: `a`, `b`...`) names,
/// and its column count.
fn row_paragraph(doc: &str, row: &str) -> (usize, Vec<String>) {
    let marker = format!("**{row} row** (");
    let after = doc
        .split(&marker)
        .nth(1)
        .unwrap_or_else(|| panic!("docs/BUNDLE.md has no {marker}"));
    let count: usize = after
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{marker} does not start with a column count"));
    let paragraph = after.split("\n\n").next().unwrap();
    // Past the "(N columns ...)" part (which may hold a colon and a backtick of its
    // own) and the source that follows it, up to the colon before the list.
    let close = paragraph.find(')').unwrap();
    let list = &paragraph[close..];
    let list = &list[list.find(':').expect("a colon before the column list") + 1..];
    (count, backticked(list))
}

#[test]
fn bundle_md_row_columns_are_the_row_types_fields_in_order() {
    let doc = read("docs/BUNDLE.md");
    let source = read("kernelkite/src/model/bundle.rs");
    let process: Vec<String> = table_keys(&doc, "| # | column | source |")
        .iter()
        .zip(
            doc.lines()
                .skip_while(|l| !l.starts_with("| # | column |"))
                .skip(2),
        )
        .map(|(_, line)| {
            line.split('|')
                .nth(2)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_string()
        })
        .collect();
    let fields = struct_fields(&source, "ProcessSample");
    assert_eq!(process, fields, "process row");
    assert!(doc.contains(&format!("**process row** ({} columns)", fields.len())));
    for (row, ty) in [
        ("io", "IoCounters"),
        ("thread", "ThreadSample"),
        ("schedstat", "Schedstat"),
        ("class", "ClassTimes"),
        ("netdev", "NetDevCounters"),
    ] {
        let (count, columns) = row_paragraph(&doc, row);
        let fields = struct_fields(&source, ty);
        assert_eq!(columns, fields, "{row} row");
        assert_eq!(count, fields.len(), "{row} row's column count");
    }
}

// ---------------------------------------------------------------- docs/JSON.md

/// The sections of docs/JSON.md that document a `kind`: (kind, the keys of its table).
/// A row `` `a`, `b` `` documents two keys; `` `x[].k` `` a key of the elements of `x`
/// (`` `x[].a`, `b` `` two of them); a row of plain words (`node`) none.
fn json_md_tables() -> Vec<(String, Vec<(String, bool)>)> {
    let doc = read("docs/JSON.md");
    let mut out = Vec::new();
    for section in doc.split("\n## ").skip(1) {
        let heading = section.lines().next().unwrap();
        let Some(kind) = heading
            .split("(`kind: \"")
            .nth(1)
            .and_then(|s| s.split('"').next())
        else {
            continue;
        };
        let mut keys = Vec::new();
        for line in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split('|').collect();
            let absent = cells.get(2).is_some_and(|c| c.contains("absent"));
            let mut prefix = String::new();
            for key in backticked(cells[1]) {
                let key = match key.split_once("[].") {
                    Some((parent, _)) => {
                        prefix = format!("{parent}[].");
                        key
                    }
                    None => format!("{prefix}{key}"),
                };
                keys.push((key, absent));
            }
        }
        out.push((kind.to_string(), keys));
    }
    out
}

/// `kernelkite ARGS` (in the samples directory): its stdout as JSON.
fn json_of(args: &[&str]) -> Value {
    let out = kk()
        .args(args)
        .current_dir(root().join("samples"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kernelkite {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The documents each kind's table is checked against: committed samples (kept true
/// by `cargo xtask samples --check`) or fresh output, with the optional keys present.
fn documents(kind: &str) -> Vec<Value> {
    let sample =
        |name: &str| -> Value { serde_json::from_str(&read(&format!("samples/{name}"))).unwrap() };
    match kind {
        "summary" => [
            "api-server-ebpf.summary.json",
            "recording-run-ebpf-accounting.summary.json",
            "recording-trace-ebpf-cgroup.summary.json",
            "recording-run-proc-exits.summary.json",
        ]
        .iter()
        .map(|n| sample(n))
        .collect(),
        "waits" => vec![json_of(&[
            "waits",
            "recording-run-ebpf-accounting.bundle.json",
            "--json",
        ])],
        "critical_path" => vec![sample(
            "recording-run-ebpf-critical-path.critical-path.json",
        )],
        "compare" => vec![
            sample("cargo-build.compare.json"),
            json_of(&[
                "compare",
                "cargo-build-before.bundle.json",
                "cargo-build-after.bundle.json",
                "--fail-on",
                "cpu_seconds>+1000%",
                "--json",
            ]),
        ],
        "tree" => vec![sample("api-server-ebpf.tree.json")],
        "stacks" => vec![sample("stacks-demo.stacks.json")],
        "doctor" => vec![json_of(&["doctor", "--json"])],
        other => panic!("docs/JSON.md documents kind {other:?}, which this test does not know"),
    }
}

/// The keys of `doc` at `parent` (`""`: the top level; `x[]`: the elements of every
/// array under a key `x`, at any depth: `stacks[]` is `classes[].stacks[]`).
fn keys_at(doc: &Value, parent: &str) -> Vec<String> {
    fn arrays<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
        match v {
            Value::Object(o) => {
                for (k, child) in o {
                    if k == key {
                        if let Some(a) = child.as_array() {
                            out.extend(a.iter());
                        }
                    }
                    arrays(child, key, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|child| arrays(child, key, out)),
            _ => {}
        }
    }
    let mut values: Vec<&Value> = Vec::new();
    match parent.strip_suffix("[]") {
        None => values.push(doc),
        Some(key) => arrays(doc, key, &mut values),
    }
    let mut out: Vec<String> = Vec::new();
    for v in values {
        for k in v.as_object().into_iter().flat_map(|o| o.keys()) {
            if !out.contains(k) {
                out.push(k.clone());
            }
        }
    }
    out
}

#[test]
fn json_md_tables_list_every_key_of_their_documents_in_order() {
    let tables = json_md_tables();
    let kinds: Vec<&str> = tables.iter().map(|(k, _)| k.as_str()).collect();
    for kind in [
        "summary",
        "waits",
        "critical_path",
        "compare",
        "tree",
        "stacks",
        "doctor",
    ] {
        assert!(
            kinds.contains(&kind),
            "docs/JSON.md has no section for {kind}"
        );
    }
    let mut problems = Vec::new();
    for (kind, keys) in &tables {
        let docs = documents(kind);
        for doc in &docs {
            assert_eq!(doc["kind"], Value::from(kind.as_str()), "{kind}: `kind`");
            assert!(doc["schema_version"].is_u64(), "{kind}: `schema_version`");
        }
        let parents: BTreeSet<String> = keys
            .iter()
            .map(|(k, _)| {
                k.rsplit_once('.')
                    .map_or(String::new(), |(p, _)| p.to_string())
            })
            .collect();
        for parent in &parents {
            let documented: Vec<&str> = keys
                .iter()
                .map(|(k, _)| k.as_str())
                .filter_map(|k| match k.rsplit_once('.') {
                    Some((p, key)) if p == parent => Some(key),
                    None if parent.is_empty() => Some(k),
                    _ => None,
                })
                .collect();
            let mut seen: Vec<String> = Vec::new();
            for doc in &docs {
                let found = keys_at(doc, parent);
                for key in &found {
                    if !documented.contains(&key.as_str()) && parent.is_empty() {
                        problems.push(format!("{kind}: key `{key}` is not documented"));
                    }
                    if !seen.contains(key) {
                        seen.push(key.clone());
                    }
                }
                // The documented keys the document has, in the document's order.
                let present: Vec<&str> = documented
                    .iter()
                    .copied()
                    .filter(|k| found.iter().any(|f| f == k))
                    .collect();
                let order: Vec<&str> = found
                    .iter()
                    .map(String::as_str)
                    .filter(|k| present.contains(k))
                    .collect();
                if present != order && parent.is_empty() {
                    problems.push(format!(
                        "{kind}: documented order {present:?}, printed order {order:?}"
                    ));
                }
            }
            for (key, absent) in keys.iter().filter(|(k, _)| {
                k.rsplit_once('.')
                    .map_or(parent.is_empty(), |(p, _)| p == parent)
            }) {
                let bare = key.rsplit_once('.').map_or(key.as_str(), |(_, k)| k);
                if !absent && !seen.iter().any(|s| s == bare) {
                    problems.push(format!(
                        "{kind}: documented key `{key}` is in none of the documents"
                    ));
                }
            }
        }
    }
    problems.dedup();
    assert!(
        problems.is_empty(),
        "docs/JSON.md:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------- docs/ARCHITECTURE.md

/// The source tree as the check reads it: every file and directory (relative, `/`
/// separated; not target/ or .git/), and the lines of code (no comment lines) of its
/// source files (not docs/).
struct Tree {
    paths: Vec<String>,
    code: Vec<String>,
}

const SOURCE_EXTS: &[&str] = &[
    "rs", "c", "h", "toml", "py", "sh", "go", "proto", "css", "js", "yaml", "yml", "service",
];

fn tree() -> Tree {
    fn walk(root: &Path, dir: &Path, tree: &mut Tree) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let name = entry.file_name().to_string_lossy().into_owned();
            let file_type = entry.file_type().unwrap();
            if file_type.is_dir() {
                if name.starts_with('.') || name == "target" {
                    continue;
                }
                tree.paths.push(format!("{rel}/"));
                walk(root, &path, tree);
            } else if file_type.is_file() {
                tree.paths.push(rel.clone());
                // Not the docs, and not this test, whose examples of names that do not
                // exist are code.
                if rel.starts_with("docs/") || rel == "tests/docs.rs" {
                    continue;
                }
                let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
                if !SOURCE_EXTS.contains(&ext) {
                    continue;
                }
                let Ok(text) = fs::read_to_string(&path) else {
                    continue;
                };
                let hash_comments =
                    !matches!(ext, "rs" | "c" | "h" | "go" | "proto" | "css" | "js");
                for line in text.lines() {
                    let t = line.trim_start();
                    let comment = t.starts_with("//")
                        || t.starts_with("/*")
                        || t.starts_with("* ")
                        || (hash_comments && t.starts_with('#'));
                    if !comment {
                        tree.code.push(line.to_string());
                    }
                }
            }
        }
    }
    let root = root();
    let mut tree = Tree {
        paths: Vec::new(),
        code: Vec::new(),
    };
    walk(&root, &root, &mut tree);
    tree
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// Whether `word` occurs as a whole word in `line`.
fn has_word(line: &str, word: &str) -> bool {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    line.match_indices(word).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + word.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

impl Tree {
    fn in_code(&self, word: &str) -> bool {
        self.code.iter().any(|l| has_word(l, word))
    }

    /// A definition of `name`: an item, or a variant or field at the start of a line.
    fn defines(&self, name: &str) -> bool {
        const ITEMS: &[&str] = &[
            "fn ",
            "struct ",
            "enum ",
            "const ",
            "static mut ",
            "static ",
            "mod ",
            "type ",
            "trait ",
            "union ",
            "macro_rules! ",
        ];
        self.code.iter().any(|l| {
            let t = l.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub "))
                .unwrap_or(t);
            ITEMS.iter().any(|item| {
                t.strip_prefix(item).is_some_and(|rest| {
                    rest.starts_with(name)
                        && !rest[name.len()..]
                            .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
            }) || (t.starts_with(name) && t[name.len()..].starts_with([',', '(', ' ', '{', ':']))
        })
    }

    /// A file or directory whose path ends with `rel` (`foo.rs`, `commands/run.rs`,
    /// `analysis/`).
    fn has_path(&self, rel: &str) -> bool {
        self.paths.iter().any(|p| {
            p == rel
                || p.ends_with(&format!("/{rel}"))
                || p.ends_with(&format!("/{rel}/"))
                || p.as_str() == format!("{rel}/")
        })
    }
}

/// What is wrong with a backticked span of docs/ARCHITECTURE.md, if it names code
/// that is not in the tree; `None` also for spans that are not code names (phrases,
/// kernel interfaces with punctuation such as `/proc/<pid>/stat`).
fn check_span(tree: &Tree, span: &str) -> Option<String> {
    let span = span.trim();
    let missing = |what: &str| Some(format!("`{span}`: {what}"));
    if span.is_empty() || span.contains(' ') || span.starts_with('/') || span.starts_with('.') {
        return None;
    }
    if let Some(option) = span.strip_prefix("--") {
        let field = option.replace('-', "_");
        let cli = fs::read_to_string(root().join("kernelkite/src/cli.rs")).unwrap();
        return (!cli
            .lines()
            .any(|l| has_word(l, &field) || l.contains(&format!("\"{option}\""))))
        .then(|| format!("`{span}`: no such option in kernelkite/src/cli.rs"));
    }
    if span.contains('*') || span.contains('…') || span.contains('<') {
        return None;
    }
    let is_path = span.contains('/')
        || [".rs", ".o", ".css", ".proto", ".sources", ".toml"]
            .iter()
            .any(|e| span.ends_with(e));
    if is_path && !span.contains("::") {
        return (!tree.has_path(span)).then(|| format!("`{span}`: no such file or directory"));
    }
    // `a::b::C`, `Type::method`: the last segment is defined; the first is a name in
    // the code (a module, a type or a crate).
    if span.contains("::") {
        let segments: Vec<&str> = span.split("::").collect();
        if !segments.iter().all(|s| is_ident(s)) {
            return None;
        }
        let last = segments.last().unwrap();
        if tree.code.iter().any(|l| l.contains(span)) {
            return None;
        }
        if !tree.defines(last) {
            return missing("its last segment is defined nowhere");
        }
        if !tree.in_code(segments[0]) && !tree.has_path(&format!("{}.rs", segments[0])) {
            return missing("its first segment is not in the code");
        }
        return None;
    }
    // Field paths (`frames[].processes[].threads[].class_ns`, `syscalls[]`), flag
    // sets (`O_CREAT|O_EXCL`), assignments (`KERNELKITE_HOOKS=classic`), calls and
    // attributes: each name in it.
    let span = span.replace("->", ".");
    let names: Vec<&str> = span
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .filter(|s| !s.is_empty())
        .collect();
    if span.contains('=') {
        let var = names[0];
        return (!tree.in_code(var)).then(|| format!("`{span}`: `{var}` is not in the code"));
    }
    for name in names {
        // A crate or command name (`kernelkite-common`, `build-ebpf`, `kk-workload`).
        let found = if name.contains('-') {
            tree.code.iter().any(|l| l.contains(name)) || tree.has_path(name)
        } else {
            tree.in_code(name)
        };
        if !found {
            return missing(&format!("`{name}` is not in the code"));
        }
    }
    None
}

#[test]
fn every_code_name_in_architecture_md_is_in_the_source_tree() {
    let tree = tree();
    assert!(tree.code.len() > 10_000, "the source tree was not found");
    let doc = read("docs/ARCHITECTURE.md");
    let problems: Vec<String> = backticked(&doc)
        .iter()
        .filter_map(|span| check_span(&tree, span))
        .collect();
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md names code that is not in the tree:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_architecture_check_finds_a_renamed_function_a_missing_file_and_an_option() {
    let tree = tree();
    assert!(check_span(&tree, "commands/run.rs").is_none());
    assert!(check_span(&tree, "commands/sprint.rs").is_some());
    assert!(check_span(&tree, "Session::drain").is_none());
    assert!(check_span(&tree, "Session::drain_everything_twice").is_some());
    assert!(check_span(&tree, "SyscallHistograms::fold_exited").is_none());
    assert!(check_span(&tree, "SyscallHistograms::fold_exited_histograms").is_some());
    assert!(check_span(&tree, "forget_exited_histograms").is_none());
    assert!(check_span(&tree, "fold_exited_histograms").is_some());
    assert!(check_span(&tree, "--stacks").is_none());
    assert!(check_span(&tree, "--no-such-option").is_some());
    assert!(check_span(&tree, "frames[].processes[].threads[].class_nz").is_some());
}
