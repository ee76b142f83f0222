//! Build facts for `kernelkite --version`: the git commit the binary was built from, and
//! whether the embedded BPF object (`bpf/kernelkite.bpf.o`) was built from the BPF
//! sources beside it (the digest `cargo xtask build-ebpf` wrote to
//! `bpf/kernelkite.bpf.sources`, computed again here; kernelkite_common::sources).

use std::path::{Path, PathBuf};
use std::process::Command;

use kernelkite_common::sources::{bpf_source_files, bpf_sources_stamp, BPF_SOURCES_STAMP};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest
        .parent()
        .expect("kernelkite lives in the workspace")
        .to_path_buf();
    println!("cargo:rustc-env=KK_BUILD_COMMIT={}", commit(&workspace));
    println!("cargo:rustc-env=KK_BUILD_BPF={}", bpf_object(&workspace));
}

fn git(workspace: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `0123456789ab`, `0123456789ab (uncommitted changes)`, or why there is none.
fn commit(workspace: &Path) -> String {
    let Some(hash) = git(workspace, &["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown (not built from a git checkout)".into();
    };
    // Rebuild when HEAD moves, the branch's ref changes or the index does.
    let mut watched = vec!["HEAD".to_string(), "index".into(), "packed-refs".into()];
    watched.extend(git(workspace, &["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(workspace, &["rev-parse", "--git-path", &name]) {
            let path = workspace.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let dirty = git(
        workspace,
        &["status", "--porcelain", "--untracked-files=no"],
    )
    .is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{hash} (uncommitted changes)")
    } else {
        hash
    }
}

/// Whether the BPF object's stamp matches the BPF sources as they are now.
fn bpf_object(workspace: &Path) -> String {
    let stamp_path = workspace.join(BPF_SOURCES_STAMP);
    println!("cargo:rerun-if-changed={}", stamp_path.display());
    let Ok(files) = bpf_source_files(workspace) else {
        return "prebuilt (its sources are not beside this build)".into();
    };
    for f in &files {
        println!("cargo:rerun-if-changed={}", workspace.join(f).display());
    }
    // A new or removed source file changes the directories.
    for dir in kernelkite_common::sources::BPF_SOURCE_DIRS {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(dir).join("src").display()
        );
    }
    let recorded = std::fs::read_to_string(&stamp_path).unwrap_or_default();
    match bpf_sources_stamp(workspace) {
        Ok(now) if now == recorded.trim() => format!("built from these sources ({now})"),
        Ok(now) => format!(
            "STALE: the BPF sources changed since `cargo xtask build-ebpf` ({now}, the object's stamp: {})",
            if recorded.trim().is_empty() { "none" } else { recorded.trim() }
        ),
        Err(e) => format!("unknown (reading its sources: {e})"),
    }
}
