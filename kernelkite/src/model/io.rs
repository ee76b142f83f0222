//! Reading and writing bundles: validated loads, atomic writes.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::bundle::Bundle;
use super::validate::validate;

/// Why a bundle (or another input document) could not be loaded. Every variant renders
/// as one line that names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON for this document: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path} is invalid: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Load and validate a bundle.
pub fn load_bundle(path: &Path) -> Result<Bundle, LoadError> {
    let bytes = FileBytes::open(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_bundle(bytes.as_slice()).map_err(|e| match e {
        ParseFailure::Json(message) => LoadError::Parse {
            path: path.to_path_buf(),
            message,
        },
        ParseFailure::Invalid(message) => LoadError::Invalid {
            path: path.to_path_buf(),
            message,
        },
    })
}

/// A file's bytes: mapped on Unix, so a large bundle is parsed straight from the page
/// cache (no copy into a fresh, zeroed buffer); read elsewhere. Bundles are replaced by
/// rename and never rewritten in place, so a mapping never sees its file shrink.
enum FileBytes {
    #[cfg(unix)]
    Mapped {
        ptr: *mut libc::c_void,
        len: usize,
    },
    Read(Vec<u8>),
}

impl FileBytes {
    fn open(path: &Path) -> std::io::Result<FileBytes> {
        #[cfg(unix)]
        {
            use std::os::unix::io::AsRawFd;
            let file = fs::File::open(path)?;
            let len = file.metadata()?.len() as usize;
            if len > 0 && file.metadata()?.is_file() {
                // SAFETY: a private, read-only mapping of a regular file we opened;
                // MAP_FAILED is checked, and the mapping is unmapped once, on drop.
                let ptr = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_POPULATE,
                        file.as_raw_fd(),
                        0,
                    )
                };
                if ptr != libc::MAP_FAILED {
                    return Ok(FileBytes::Mapped { ptr, len });
                }
            }
        }
        fs::read(path).map(FileBytes::Read)
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            // SAFETY: the mapping is valid for `len` bytes until drop.
            #[cfg(unix)]
            FileBytes::Mapped { ptr, len } => unsafe {
                std::slice::from_raw_parts(ptr.cast::<u8>(), *len)
            },
            FileBytes::Read(v) => v,
        }
    }
}

impl Drop for FileBytes {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let FileBytes::Mapped { ptr, len } = self {
            // SAFETY: unmapping our own mapping, once.
            unsafe { libc::munmap(*ptr, *len) };
        }
    }
}

enum ParseFailure {
    Json(String),
    Invalid(String),
}

fn parse_bundle(bytes: &[u8]) -> Result<Bundle, ParseFailure> {
    // Straight into the typed bundle (building a generic JSON value first would double
    // the time and memory of loading a large bundle).
    // Validating UTF-8 once for the whole document is cheaper than string by string.
    let parsed = match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    };
    let bundle: Bundle = match parsed {
        Ok(b) => b,
        Err(e) => {
            // A future or foreign document fails on whichever field serde meets first;
            // when the JSON itself is fine, say what is wrong with its header instead.
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
                super::validate::check_header(&value).map_err(ParseFailure::Invalid)?;
            }
            return Err(ParseFailure::Json(e.to_string()));
        }
    };
    let header = serde_json::json!({
        "format": bundle.format,
        "format_version": bundle.format_version,
    });
    super::validate::check_header(&header).map_err(ParseFailure::Invalid)?;
    validate(&bundle).map_err(ParseFailure::Invalid)?;
    Ok(bundle)
}

/// Fail early (before a long session) when `path` could not be written at the end:
/// create and remove a probe file beside it, as the atomic write will.
pub fn check_writable(path: &Path) -> Result<(), std::io::Error> {
    let err = |msg: String| std::io::Error::other(msg);
    if path.is_dir() {
        return Err(err(format!(
            "cannot write bundle {}: it is a directory",
            path.display()
        )));
    }
    let Some(name) = path.file_name() else {
        return Err(err(format!(
            "cannot write bundle {}: no file name",
            path.display()
        )));
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut probe_name = std::ffi::OsString::from(".");
    probe_name.push(name);
    probe_name.push(format!(".probe-{}", std::process::id()));
    let probe = dir.join(probe_name);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| err(format!("cannot write bundle {}: {e}", path.display())))?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// Serialize a bundle: pretty JSON with a trailing newline, deterministic for equal input.
pub fn bundle_to_bytes(bundle: &Bundle) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(bundle).expect("bundle serializes");
    out.push(b'\n');
    out
}

/// Write a bundle atomically (see [`write_atomically`]).
pub fn write_bundle(path: &Path, bundle: &Bundle) -> std::io::Result<()> {
    write_atomically(path, &bundle_to_bytes(bundle))
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename,
/// so readers see either the old file or the complete new one, never a partial file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "output path has no file name",
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn atomic_write_into_missing_directory_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("out.json");
        assert!(write_atomically(&path, b"x").is_err());
        assert!(!path.exists());
    }
}
