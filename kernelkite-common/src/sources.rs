//! Which sources the BPF object is built from, and one digest of them: `cargo xtask
//! build-ebpf` writes it beside the object (`kernelkite/bpf/kernelkite.bpf.sources`), and
//! kernelkite's build script computes it again, so `kernelkite --version` can say whether
//! the object it embeds was built from the sources it was built with.
//!
//! The sources: every file below `kernelkite-ebpf/` and `kernelkite-common/` but those
//! in a `target` directory and hidden ones (editor swap files), in path order. The digest
//! is 64-bit FNV-1a over each file's path relative to the workspace (with `/`), a NUL,
//! its bytes and a NUL: stable across machines, not a defence against tampering.

extern crate std;

use std::io;
use std::path::{Path, PathBuf};
use std::string::String;
use std::vec::Vec;

/// The directories (relative to the workspace root) the BPF object is built from.
pub const BPF_SOURCE_DIRS: &[&str] = &["kernelkite-ebpf", "kernelkite-common"];

/// The stamp file, relative to the workspace root.
pub const BPF_SOURCES_STAMP: &str = "kernelkite/bpf/kernelkite.bpf.sources";

/// Every BPF source file below `workspace`, relative paths with `/`, sorted.
pub fn bpf_source_files(workspace: &Path) -> io::Result<Vec<String>> {
    let mut files = Vec::new();
    for dir in BPF_SOURCE_DIRS {
        walk(workspace, &workspace.join(dir), &mut files)?;
    }
    files.sort();
    Ok(files)
}

fn walk(workspace: &Path, dir: &Path, files: &mut Vec<String>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        let path: PathBuf = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(workspace, &path, files)?;
        } else if kind.is_file() {
            let rel = path.strip_prefix(workspace).unwrap_or(&path);
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            files.push(parts.join("/"));
        }
    }
    Ok(())
}

/// The stamp's text for the sources below `workspace`: `fnv1a64 <16 hex digits>`.
pub fn bpf_sources_stamp(workspace: &Path) -> io::Result<String> {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for rel in bpf_source_files(workspace)? {
        feed(rel.as_bytes());
        feed(&[0]);
        feed(&std::fs::read(workspace.join(&rel))?);
        feed(&[0]);
    }
    Ok(std::format!("fnv1a64 {hash:016x}"))
}
