//! `--record` and `replay` of recordings, without privileges: the committed recordings
//! of real-kernel sessions replay to the bundles their live sessions wrote, a live /proc
//! session replays byte for byte, a session killed with SIGKILL replays its complete
//! chunks, and damaged recordings are one-line errors that write nothing.

#![cfg(target_os = "linux")]

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::{kk, replay};

#[path = "support/ebpf.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use kernelkite::model::{load_bundle, Backend};
use kernelkite::recording::{RecordingReader, FORMAT_VERSION};
use support::workload_bin;

fn recordings_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("fixtures")
        .join("recordings")
}

fn committed_recordings() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(recordings_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kkr"))
        .collect();
    out.sort();
    out
}

#[test]
fn committed_recordings_of_every_version_replay_to_their_live_bundles() {
    let dir = tempfile::tempdir().unwrap();
    let mut versions = std::collections::BTreeSet::new();
    let files = committed_recordings();
    assert!(files.len() >= 4, "{files:?}");
    for kkr in files {
        let reader = RecordingReader::new(std::fs::File::open(&kkr).unwrap()).unwrap();
        versions.insert(reader.version());
        let out = dir.path().join("replayed.json");
        let (ok, stderr) = replay(&kkr, &out);
        assert!(ok && stderr.is_empty(), "{}: {stderr}", kkr.display());
        let live = kkr.with_extension("bundle.json");
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&live).unwrap(),
            "{} does not replay to {}",
            kkr.display(),
            live.display()
        );
    }
    // Older versions stay readable: a committed file of each.
    for v in 1..=FORMAT_VERSION {
        assert!(
            versions.contains(&v),
            "no committed recording of version {v}"
        );
    }
}

#[test]
fn a_live_proc_session_replays_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (live, kkr) = (dir.path().join("live.json"), dir.path().join("s.kkr"));
    let out = kk()
        .args([
            "--backend",
            "proc",
            "--interval-ms",
            "20",
            "--network",
            "--label",
            "rec",
        ])
        .arg("run")
        .arg(&live)
        .arg("--record")
        .arg(&kkr)
        .arg("--")
        .arg(workload_bin())
        .args(["pipe_pingpong", "--count", "2000", "--processes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("kernelkite: recorded "), "{stderr}");
    let replayed = dir.path().join("replayed.json");
    let (ok, err) = replay(&kkr, &replayed);
    assert!(ok && err.is_empty(), "{err}");
    assert_eq!(
        std::fs::read(&replayed).unwrap(),
        std::fs::read(&live).unwrap()
    );
    let bundle = load_bundle(&replayed).unwrap();
    assert_eq!(bundle.backend, Backend::Proc);
    assert!(bundle.frames.len() >= 2);
    assert!(bundle.frames.iter().all(|f| f.network.is_some()));
    // Every report of the replayed bundle is the live one's.
    let summary = |b: &Path| kk().arg("summary").arg(b).output().unwrap().stdout;
    assert_eq!(summary(&replayed), summary(&live));
}

#[test]
fn an_uncompressed_recording_and_a_frame_cap_replay_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (live, kkr) = (dir.path().join("live.json"), dir.path().join("s.kkr"));
    let out = kk()
        .args(["--backend", "proc", "--interval-ms", "10"])
        .arg("run")
        .arg(&live)
        .args([
            "--max-frames",
            "3",
            "--record-compression",
            "none",
            "--record",
        ])
        .arg(&kkr)
        .arg("--")
        .arg(workload_bin())
        .args(["idle", "--seconds", "0.2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed = dir.path().join("replayed.json");
    assert!(replay(&kkr, &replayed).0);
    assert_eq!(
        std::fs::read(&replayed).unwrap(),
        std::fs::read(&live).unwrap()
    );
    let bundle = load_bundle(&replayed).unwrap();
    assert_eq!(bundle.frames.len(), 3);
    assert!(bundle.frame_cap.frames_dropped > 0);
}

/// Chunk boundaries of a recording: (offset, length) of each chunk.
fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 16;
    while at + 16 <= bytes.len() {
        let len = 16 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if at + len > bytes.len() {
            break;
        }
        out.push((at, len));
        at += len;
    }
    out
}

#[test]
fn a_session_killed_with_sigkill_replays_every_complete_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let (live, kkr) = (dir.path().join("live.json"), dir.path().join("s.kkr"));
    let mut child = StdCommand::new(assert_cmd::cargo::cargo_bin("kernelkite"))
        .args(["--backend", "proc", "--interval-ms", "20"])
        .arg("run")
        .arg(&live)
        .arg("--record")
        .arg(&kkr)
        .arg("--")
        .arg(workload_bin())
        .args(["idle", "--seconds", "5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for a few chunks (frames) to be written, then kill it mid-session.
    let deadline = Instant::now() + Duration::from_secs(20);
    while chunks(&std::fs::read(&kkr).unwrap_or_default()).len() < 5 {
        assert!(Instant::now() < deadline, "the recording never grew");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!live.exists(), "a killed session writes no bundle");

    let replayed = dir.path().join("replayed.json");
    let (ok, stderr) = replay(&kkr, &replayed);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("cut short") && stderr.lines().count() == 1,
        "{stderr}"
    );
    let bundle = load_bundle(&replayed).unwrap();
    assert!(bundle.frames.len() >= 4, "{} frames", bundle.frames.len());
    assert_eq!(bundle.launched, None, "the session never ended");
    // The orphaned workload: end it.
    let pid = bundle.root_pids[0];
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };

    // A chunk cut in the middle (a full disk): the complete ones replay, and the
    // warning says how many bytes were incomplete and where they start.
    let bytes = std::fs::read(&kkr).unwrap();
    let all = chunks(&bytes);
    let (last_at, last_len) = *all.last().unwrap();
    let cut = dir.path().join("cut.kkr");
    std::fs::write(&cut, &bytes[..last_at + last_len / 2]).unwrap();
    let (ok, stderr) = replay(&cut, &replayed);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the last {} bytes (from byte {last_at}) are an incomplete chunk",
            last_len / 2
        )),
        "{stderr}"
    );
    assert_eq!(
        load_bundle(&replayed).unwrap().frames.len(),
        bundle.frames.len() - 1
    );
}

#[test]
fn damaged_recordings_are_one_line_errors_naming_the_offset_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(recordings_dir().join("run-proc-cpu.kkr")).unwrap();
    let first = chunks(&good)[0];
    let mut cases: Vec<(&str, Vec<u8>, String)> = Vec::new();
    let mut b = good.clone();
    b[0] = b'{';
    cases.push(("magic", b, "byte 0: not a kernelkite recording".into()));
    let mut b = good.clone();
    b[8] = FORMAT_VERSION as u8 + 1;
    cases.push((
        "version",
        b,
        format!(
            "byte 8: recording format version {} is newer",
            FORMAT_VERSION + 1
        ),
    ));
    let mut b = good.clone();
    b[first.0 + 16 + 1] ^= 0xff;
    cases.push((
        "crc",
        b,
        format!("byte {}: chunk checksum mismatch", first.0),
    ));
    let mut b = good.clone();
    b[first.0..first.0 + 4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    cases.push((
        "length",
        b,
        format!("byte {}: chunk length 4294967280", first.0),
    ));
    cases.push((
        "empty",
        Vec::new(),
        "byte 0: not a kernelkite recording".into(),
    ));
    for (name, bytes, want) in cases {
        let input = dir.path().join(format!("{name}.kkr"));
        std::fs::write(&input, bytes).unwrap();
        let out = dir.path().join(format!("{name}.json"));
        let (ok, stderr) = replay(&input, &out);
        assert!(!ok, "{name}");
        let line = stderr.trim();
        assert_eq!(line.lines().count(), 1, "{name}: {stderr}");
        assert!(
            line.contains(&format!("{}: {want}", input.display())),
            "{name}: {stderr}"
        );
        assert!(!line.contains("panicked"), "{name}: {stderr}");
        assert!(!out.exists(), "{name}: no bundle is written");
    }
}

#[test]
fn an_unwritable_recording_path_fails_before_the_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let out = kk()
        .args(["--backend", "proc", "run"])
        .arg(dir.path().join("b.json"))
        .arg("--record")
        .arg(dir.path().join("missing").join("s.kkr"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot create recording"), "{stderr}");
    assert!(!marker.exists(), "the command must not run");
}

#[test]
fn a_command_that_cannot_run_leaves_no_recording_behind() {
    let dir = tempfile::tempdir().unwrap();
    let kkr = dir.path().join("s.kkr");
    let out = kk()
        .args(["--backend", "proc", "run"])
        .arg(dir.path().join("b.json"))
        .arg("--record")
        .arg(&kkr)
        .args(["--", "/nonexistent/kk-no-such-program"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!kkr.exists(), "an empty recording is removed");
}

/// A small tmpfs: a disk that really fills up (needs root to mount).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = StdCommand::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("kk-full")
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = StdCommand::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_disk_that_fills_up_mid_session_leaves_a_replayable_recording() {
    // Mounting a small tmpfs needs root.
    if !support::skip::root_or_required(
        "a_disk_that_fills_up_mid_session_leaves_a_replayable_recording",
    ) {
        return;
    }
    let Some(disk) = SmallDisk::mount(16 * 1024) else {
        panic!("cannot mount a tmpfs");
    };
    let dir = tempfile::tempdir().unwrap();
    let kkr = disk.dir.path().join("s.kkr");
    let live = dir.path().join("live.json");
    let out = kk()
        .args(["--backend", "proc", "--interval-ms", "5"])
        .arg("run")
        .arg(&live)
        .args(["--record-compression", "none", "--record"])
        .arg(&kkr)
        .arg("--")
        .arg(workload_bin())
        .args(["idle", "--seconds", "1.5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The session goes on and writes its bundle; the command then fails naming the
    // recording and the cause.
    assert!(!out.status.success(), "{stderr}");
    assert!(live.exists(), "the bundle is still written: {stderr}");
    assert!(
        stderr.contains(&format!("recording {} is incomplete", kkr.display()))
            && stderr.contains("No space left on device"),
        "{stderr}"
    );
    let replayed = dir.path().join("replayed.json");
    let (ok, err) = replay(&kkr, &replayed);
    assert!(ok, "{err}");
    assert!(err.contains("cut short"), "{err}");
    let (partial, full) = (load_bundle(&replayed).unwrap(), load_bundle(&live).unwrap());
    assert!(
        partial.frames.len() >= 10,
        "{} frames",
        partial.frames.len()
    );
    assert!(partial.frames.len() < full.frames.len());
    assert_eq!(partial.frames[..], full.frames[..partial.frames.len()]);
}
