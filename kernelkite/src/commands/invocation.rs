//! How to run kernelkite again from where this one was started, for the lines that
//! name the next command (`details: ... summary build.json`, `replay: ... replay ...`).
//!
//! `kernelkite` itself only when the `kernelkite` the PATH finds is this binary;
//! `cargo run [--release] --` when cargo started it (`cargo run` sets `CARGO`) from a
//! target directory; otherwise the binary's full path (after `sudo`, whose PATH is not
//! the user's, or a binary run by its path).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The words that run this kernelkite again, shell-quoted, for the user's next command.
pub(crate) fn self_command() -> String {
    let exe = std::env::current_exe().ok();
    let cargo = std::env::var_os("CARGO").is_some();
    let path = std::env::var_os("PATH");
    command_for(exe.as_deref(), cargo, path.as_deref())
}

/// `self_command` from its inputs: this binary's path, whether cargo started it, and
/// the PATH.
fn command_for(exe: Option<&Path>, under_cargo: bool, path: Option<&OsStr>) -> String {
    let Some(exe) = exe else {
        return "kernelkite".into();
    };
    if path.is_some_and(|p| on_path_is(p, exe)) {
        return "kernelkite".into();
    }
    if under_cargo {
        if let Some(run) = cargo_run(exe) {
            return run;
        }
    }
    shell_quote(&exe.to_string_lossy())
}

/// Whether the first `kernelkite` on `path` is the file `exe`.
fn on_path_is(path: &OsStr, exe: &Path) -> bool {
    let Ok(exe) = exe.canonicalize() else {
        return false;
    };
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("kernelkite"))
        .find(|candidate| is_executable(candidate))
        .and_then(|found| found.canonicalize().ok())
        .is_some_and(|found| found == exe)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `cargo run --` for a binary in a target directory's profile directory
/// (`target/debug/kernelkite`, `target/release/kernelkite`, `target/NAME/kernelkite`).
fn cargo_run(exe: &Path) -> Option<String> {
    if exe.file_name()? != "kernelkite" {
        return None;
    }
    let profile_dir: PathBuf = exe.parent()?.to_path_buf();
    let profile = profile_dir.file_name()?.to_str()?;
    // A target directory holds the profile directories (and a CACHEDIR.TAG).
    let target = profile_dir.parent()?;
    if !target.join("CACHEDIR.TAG").exists() {
        return None;
    }
    Some(match profile {
        "debug" => "cargo run --".to_string(),
        "release" => "cargo run --release --".to_string(),
        other => format!("cargo run --profile {} --", shell_quote(other)),
    })
}

/// `word` as one shell word: unchanged when it is made of characters no shell treats
/// specially, else in single quotes.
pub(crate) fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./+:,=@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn executable(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kk-invocation-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_plain_name_only_when_the_path_finds_this_binary() {
        let dir = tempdir("path");
        let exe = dir.join("bin").join("kernelkite");
        executable(&exe);
        let other = dir.join("other").join("kernelkite");
        executable(&other);
        let path = |dirs: &[&Path]| std::env::join_paths(dirs).unwrap();
        let bin = dir.join("bin");
        let other_dir = dir.join("other");
        assert_eq!(
            command_for(Some(&exe), false, Some(&path(&[&bin]))),
            "kernelkite"
        );
        // Another kernelkite first on the PATH: this one by its path.
        assert_eq!(
            command_for(Some(&exe), false, Some(&path(&[&other_dir, &bin]))),
            exe.display().to_string()
        );
        // sudo's PATH, without the user's directories.
        assert_eq!(
            command_for(Some(&exe), false, Some(OsStr::new("/usr/sbin:/usr/bin"))),
            exe.display().to_string()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cargo_run_for_a_binary_cargo_started_from_a_target_directory() {
        let dir = tempdir("cargo");
        let target = dir.join("target");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("CACHEDIR.TAG"), b"").unwrap();
        let release = target.join("release").join("kernelkite");
        let debug = target.join("debug").join("kernelkite");
        let profiling = target.join("profiling").join("kernelkite");
        for exe in [&release, &debug, &profiling] {
            executable(exe);
        }
        let path = Some(OsStr::new("/usr/bin"));
        assert_eq!(
            command_for(Some(&release), true, path),
            "cargo run --release --"
        );
        assert_eq!(command_for(Some(&debug), true, path), "cargo run --");
        assert_eq!(
            command_for(Some(&profiling), true, path),
            "cargo run --profile profiling --"
        );
        // Not started by cargo (sudo drops CARGO): the full path.
        assert_eq!(
            command_for(Some(&release), false, path),
            release.display().to_string()
        );
        // CARGO set, but the binary is not in a target directory (an installed copy).
        let installed = dir.join("bin").join("kernelkite");
        executable(&installed);
        assert_eq!(
            command_for(Some(&installed), true, path),
            installed.display().to_string()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_path_with_spaces_or_quotes_is_one_shell_word() {
        assert_eq!(shell_quote("/usr/bin/kernelkite"), "/usr/bin/kernelkite");
        assert_eq!(
            shell_quote("/home/a b/kernelkite"),
            "'/home/a b/kernelkite'"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(
            command_for(Some(Path::new("/nowhere/my dir/kernelkite")), false, None),
            "'/nowhere/my dir/kernelkite'"
        );
    }
}
