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

/// The largest input any reader accepts (bundles, fixtures, recordings): 64 GiB, far
/// above a bundle at the frame cap, but a bound (an input is read into memory whole).
pub const MAX_INPUT_BYTES: u64 = 64 << 30;

/// Open an input file for reading: regular files only, at most [`MAX_INPUT_BYTES`].
/// A device (`/dev/zero` never ends), a FIFO (it would block, or never end) or a
/// directory is refused with what it is. Returns the file and its length.
pub fn open_input(path: &Path) -> std::io::Result<(fs::File, u64)> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    // Non-blocking, so opening a FIFO with no writer does not hang before the check.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = input_kind(&kind);
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file"),
        ));
    }
    if meta.len() > MAX_INPUT_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} bytes, over the {} GiB an input may have",
                meta.len(),
                MAX_INPUT_BYTES >> 30
            ),
        ));
    }
    Ok((file, meta.len()))
}

/// What a file that is not a regular file is, for an error message.
fn input_kind(kind: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() {
            return "a character device";
        } else if kind.is_block_device() {
            return "a block device";
        } else if kind.is_fifo() {
            return "a FIFO";
        } else if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

/// A whole input file (see [`open_input`]), read with no more than its length.
pub fn read_input(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (file, len) = open_input(path)?;
    let mut bytes = Vec::with_capacity(len as usize);
    // A file that grew since fstat is read up to the length it had.
    file.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
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
/// Pre-fault the whole mapping in one call where the kernel offers it (Linux).
#[cfg(target_os = "linux")]
const MAP_POPULATE: libc::c_int = libc::MAP_POPULATE;
#[cfg(all(unix, not(target_os = "linux")))]
const MAP_POPULATE: libc::c_int = 0;

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
            let (file, len) = open_input(path)?;
            let len = len as usize;
            if len > 0 {
                // SAFETY: a private, read-only mapping of a regular file we opened;
                // MAP_FAILED is checked, and the mapping is unmapped once, on drop.
                let ptr = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | MAP_POPULATE,
                        file.as_raw_fd(),
                        0,
                    )
                };
                if ptr != libc::MAP_FAILED {
                    return Ok(FileBytes::Mapped { ptr, len });
                }
            }
        }
        read_input(path).map(FileBytes::Read)
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
            return Err(ParseFailure::Json(one_line(&e.to_string())));
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

/// `message` on one line: validation messages quote strings from the file (a comm, a
/// syscall name, a JSON key), which may hold control characters such as newlines.
pub fn one_line(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for c in message.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Parse and validate a bundle's bytes, as [`load_bundle`] does after reading the file
/// (the error is its message without the path). The fuzz target's entry point.
#[doc(hidden)]
pub fn bundle_from_bytes(bytes: &[u8]) -> Result<Bundle, String> {
    parse_bundle(bytes).map_err(|(ParseFailure::Json(m) | ParseFailure::Invalid(m))| m)
}

/// Serialize a bundle: JSON with one line per top-level field and per element of its
/// top-level arrays (a frame, a lifecycle event, a histogram), so a diff of two bundles
/// reads frame by frame; deterministic for equal input, with a trailing newline.
pub fn bundle_to_bytes(bundle: &Bundle) -> Vec<u8> {
    use serde::Serialize;
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, LinePerElement::default());
    bundle.serialize(&mut ser).expect("bundle serializes");
    out.push(b'\n');
    out
}

/// A JSON layout between compact and pretty: containers nested at most
/// [`LinePerElement::LINE_DEPTH`] deep put each element on its own indented line; deeper
/// ones are written compactly, on the line of the element that holds them.
#[derive(Default)]
struct LinePerElement {
    /// How many containers enclose the current position.
    depth: usize,
    /// Whether the innermost open container has had an element yet.
    has_value: bool,
}

impl LinePerElement {
    /// The bundle object (1) and its arrays and objects (2) are laid out a line per element.
    const LINE_DEPTH: usize = 2;

    fn begin<W: ?Sized + Write>(&mut self, w: &mut W, open: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(open)
    }

    fn end<W: ?Sized + Write>(&mut self, w: &mut W, close: &[u8]) -> std::io::Result<()> {
        if self.depth <= Self::LINE_DEPTH && self.has_value {
            self.newline(w, self.depth - 1)?;
        }
        self.depth -= 1;
        // The enclosing container is non-empty: it holds the one just closed.
        self.has_value = true;
        w.write_all(close)
    }

    fn element<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        if self.depth <= Self::LINE_DEPTH {
            self.newline(w, self.depth)?;
        }
        Ok(())
    }

    fn newline<W: ?Sized + Write>(&self, w: &mut W, indent: usize) -> std::io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..indent {
            w.write_all(b"  ")?;
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for LinePerElement {
    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.begin(w, b"[")
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.end(w, b"]")
    }
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.element(w, first)
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.begin(w, b"{")
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.end(w, b"}")
    }
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.element(w, first)
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(if self.depth <= Self::LINE_DEPTH {
            b": "
        } else {
            b":"
        })
    }
    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Write a bundle atomically, with the rules of every output (see `crate::output`).
pub fn write_bundle(path: &Path, bundle: &Bundle) -> std::io::Result<()> {
    crate::output::write_file(path, &bundle_to_bytes(bundle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    /// A bundle with every optional field present and distinct values everywhere, so a
    /// row written in the wrong column order cannot read back equal.
    fn every_field_bundle() -> Bundle {
        let host = HostConstants {
            clock_ticks_per_sec: 100,
            page_size_bytes: 4096,
            num_cpus: 2,
            kernel_release: Some("6.18.0".into()),
            arch: "x86_64".into(),
            time_accounting: None,
        };
        let mut b = Bundle::new(Backend::Ebpf, host, 100);
        b.root_pids = vec![10];
        let thread = ThreadSample {
            tid: 11,
            comm: "(my cmd) x".into(),
            state: "D".into(),
            schedstat: Some(Schedstat {
                on_cpu_ns: 1,
                runqueue_ns: 2,
                timeslices: 3,
            }),
            syscall_nr: Some(-1),
            class_ns: Some(ClassTimes::from_array([4, 5, 6, 7, 8, 9, 0])),
        };
        let process = ProcessSample {
            pid: 10,
            ppid: 1,
            comm: "proc".into(),
            state: "S".into(),
            start_time_ticks: 12,
            utime_ticks: 13,
            stime_ticks: 14,
            cutime_ticks: 15,
            cstime_ticks: 16,
            rss_pages: 17,
            num_threads: 18,
            io: Some(IoCounters {
                rchar_bytes: 19,
                wchar_bytes: 20,
                read_syscalls: 21,
                write_syscalls: 22,
                read_bytes: 23,
                write_bytes: 24,
                cancelled_write_bytes: 25,
            }),
            threads: vec![thread],
        };
        b.frames.push(Frame {
            t_ns: 0,
            processes: vec![process],
            network: Some(vec![NetDevCounters {
                interface: "lo".into(),
                rx_bytes: 26,
                rx_packets: 27,
                tx_bytes: 28,
                tx_packets: 29,
            }]),
            host_steal_ticks: Some(30),
        });
        b
    }

    #[test]
    fn bundle_rows_read_back_equal() {
        let b = every_field_bundle();
        let bytes = bundle_to_bytes(&b);
        let text = std::str::from_utf8(&bytes).unwrap();
        // One line per frame, samples as rows.
        assert!(text.contains(
            "\n    {\"t_ns\":0,\"processes\":[[10,1,\"proc\",\"S\",12,13,14,15,16,17,18,"
        ));
        let back: Bundle = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, b);
        assert!(matches!(parse_bundle(&bytes), Ok(ref l) if *l == b));
    }

    #[test]
    fn format_1_bundles_with_keyed_samples_still_load() {
        let b = every_field_bundle();
        // Format 1 wrote every sample as an object keyed by field name.
        let mut v = serde_json::to_value(&b).unwrap();
        v["format_version"] = 1.into();
        v["frames"][0]["processes"][0] = serde_json::json!({
            "pid": 10, "ppid": 1, "comm": "proc", "state": "S", "start_time_ticks": 12,
            "utime_ticks": 13, "stime_ticks": 14, "cutime_ticks": 15, "cstime_ticks": 16,
            "rss_pages": 17, "num_threads": 18,
            "io": {"rchar_bytes": 19, "wchar_bytes": 20, "read_syscalls": 21,
                   "write_syscalls": 22, "read_bytes": 23, "write_bytes": 24,
                   "cancelled_write_bytes": 25},
            "threads": [{"tid": 11, "comm": "(my cmd) x", "state": "D",
                "schedstat": {"on_cpu_ns": 1, "runqueue_ns": 2, "timeslices": 3},
                "syscall_nr": -1,
                "class_ns": {"on_cpu": 4, "runqueue": 5, "io_wait": 6, "lock_wait": 7,
                             "syscall_blocked": 8, "unknown_wait": 9}}]
        });
        let loaded = match parse_bundle(&serde_json::to_vec_pretty(&v).unwrap()) {
            Ok(l) => l,
            Err(_) => panic!("format 1 bundle did not load"),
        };
        assert_eq!(loaded.format_version, 1);
        assert_eq!(loaded.frames, b.frames);
    }

    #[test]
    fn a_row_with_a_missing_or_extra_column_is_rejected() {
        let b = every_field_bundle();
        for edit in [
            |row: &mut Vec<serde_json::Value>| {
                row.pop();
            },
            |row: &mut Vec<serde_json::Value>| row.push(0.into()),
        ] {
            let mut v = serde_json::to_value(&b).unwrap();
            edit(
                v["frames"][0]["processes"][0]
                    .as_array_mut()
                    .expect("process row"),
            );
            assert!(matches!(
                parse_bundle(&serde_json::to_vec(&v).unwrap()),
                Err(ParseFailure::Json(_))
            ));
        }
    }
}
