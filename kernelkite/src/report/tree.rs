//! `tree` renderers: an indented text tree and the nested JSON document (`docs/JSON.md`).

use serde_json::{json, Value};

use super::{columns, fmt_bytes, fmt_ms, fmt_secs};
use crate::analysis::{Analysis, TreeNode};

/// Version of the tree JSON document.
pub const TREE_SCHEMA_VERSION: u32 = 1;

fn node_json(n: &TreeNode) -> Value {
    json!({
        "pid": n.pid,
        "ppid": n.ppid,
        "comm": n.comm,
        "start_time_ticks": n.start_time_ticks,
        "first_seen_ms": n.first_seen_ns as f64 / 1e6,
        "last_seen_ms": n.last_seen_ns as f64 / 1e6,
        "cpu_seconds": n.cpu_seconds,
        "peak_rss_bytes": n.peak_rss_bytes,
        "children": n.children.iter().map(node_json).collect::<Vec<_>>(),
    })
}

/// The tree JSON document: `roots`, each node with nested `children`.
pub fn tree_json(a: &Analysis) -> Value {
    json!({
        "schema_version": TREE_SCHEMA_VERSION,
        "kind": "tree",
        "label": a.label,
        "backend": a.backend.name(),
        "roots": a.tree.iter().map(node_json).collect::<Vec<_>>(),
    })
}

fn walk(n: &TreeNode, prefix: &str, branch: &str, rows: &mut Vec<Vec<String>>) {
    rows.push(vec![
        format!("{prefix}{branch}{} {}", n.pid, super::clean(&n.comm)),
        format!(
            "{}-{}",
            fmt_ms(n.first_seen_ns as f64 / 1e6).trim_end_matches(" ms"),
            fmt_ms(n.last_seen_ns as f64 / 1e6)
        ),
        super::or_na(n.cpu_seconds, fmt_secs),
        super::or_na(n.peak_rss_bytes, fmt_bytes),
    ]);
    let child_prefix = match branch {
        "" => prefix.to_string(),
        "├── " => format!("{prefix}│   "),
        _ => format!("{prefix}    "),
    };
    for (i, c) in n.children.iter().enumerate() {
        let last = i + 1 == n.children.len();
        walk(c, &child_prefix, if last { "└── " } else { "├── " }, rows);
    }
}

/// The text tree: one line per process with its observed lifetime, CPU and peak RSS.
pub fn tree_text(a: &Analysis) -> String {
    let mut out = String::new();
    match &a.label {
        Some(l) => out.push_str(&format!("kernelkite tree: {l}\n")),
        None => out.push_str("kernelkite tree\n"),
    }
    let mut rows = vec![["pid comm", "seen", "cpu", "peak rss"]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()];
    for root in &a.tree {
        walk(root, "", "", &mut rows);
    }
    for line in columns(&rows, &[2, 3]).lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}
