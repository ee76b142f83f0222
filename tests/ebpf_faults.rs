//! Real-kernel fault tests: what a user sees when a session is killed, the disk fills
//! while a bundle or recording is written, a traced process execs a setuid binary, or
//! the target is gone before the hooks attach. Each asserts on user-visible behaviour
//! only (exit status, one-line errors, files left behind, what the kernel still holds),
//! not on how kernelkite writes its files. See tests/support/ebpf.rs.

#[path = "support/ebpf.rs"]
mod support;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kernelkite::model::{load_bundle, LifecycleKind};
use support::*;

/// `kernelkite ARGS`, killed (and failed) after 60 s: a hang is a failure, not a stuck
/// test run.
fn kernelkite(args: &[&str], cwd: &Path) -> Output {
    let mut child = Command::new(kernelkite_bin())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "kernelkite {args:?} hung for 60 s; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A kernelkite error as users see it: one line, `kernelkite: error: ...`, no panic.
fn assert_one_line_error(out: &Output, what: &str) -> String {
    let err = stderr_of(out);
    assert!(!out.status.success(), "{what}: exit 0; stderr {err}");
    assert!(!err.contains("panicked"), "{what}: panic: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{what}: one error line expected: {err}");
    assert!(
        errors[0].starts_with("kernelkite: error: "),
        "{what}: {err}"
    );
    errors[0].to_string()
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn sigkill_mid_session_leaves_no_bpf_behind_and_its_recording_replays() {
    let Some(_serial) =
        ebpf_ready("sigkill_mid_session_leaves_no_bpf_behind_and_its_recording_replays")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("killed.kkr");
    let mut w = GatedWorkload::spawn(&[
        "sleep_stress",
        "--nanosleeps",
        "40",
        "--sleep-ms",
        "50",
        "--reads",
        "0",
    ]);
    let mut trace = RunningTrace::start(
        &[w.pid],
        &["--record", recording.to_str().unwrap(), "--duration", "60"],
    );
    w.go();
    // Long enough for several frames to reach the recording.
    std::thread::sleep(Duration::from_millis(1200));
    let ids = bpf_ids_held_by(trace.child.id());
    assert!(
        ids.iter().filter(|(kind, _)| kind == "prog_id").count() >= 8,
        "{ids:?}"
    );
    assert!(ids.iter().any(|(kind, _)| kind == "link_id"), "{ids:?}");
    trace.child.kill().unwrap();
    let status = trace.child.wait().unwrap();
    assert!(!status.success());
    assert_bpf_ids_gone(&ids);
    let pid = w.pid;
    w.finish();

    // Every complete chunk replays, without root, to a bundle of the traced process.
    let out = kernelkite(&["replay", "killed.kkr", "killed.bundle.json"], dir.path());
    let err = stderr_of(&out);
    assert!(out.status.success(), "replay of a killed session: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let bundle =
        load_bundle(&dir.path().join("killed.bundle.json")).expect("replayed bundle loads");
    assert!(bundle.frames.len() >= 2, "{} frames", bundle.frames.len());
    assert!(
        bundle
            .frames
            .iter()
            .all(|f| f.processes.iter().any(|p| p.pid == pid)),
        "the traced process {pid} is in every replayed frame"
    );
}

/// A small tmpfs mounted at a temporary directory, unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// A `size_kib` tmpfs, filled so about `free_kib` is left.
    fn mount(size_kib: u64, free_kib: u64) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_kib}k,mode=0755")])
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mount a tmpfs at {}",
            dir.path().display()
        );
        let disk = SmallDisk { dir };
        let filler = vec![0xa5u8; ((size_kib - free_kib) * 1024) as usize];
        std::fs::write(disk.path().join("filler"), filler).unwrap();
        disk
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A bundle that does not fit on the disk: a clear one-line error naming the file, a
/// non-zero exit, and nothing left beside the filler (no partial bundle, no temp file).
fn assert_full_disk_failure(out: &Output, disk: &SmallDisk, what: &str, final_name: &str) {
    let line = assert_one_line_error(out, what);
    assert!(
        line.contains(final_name) && line.to_lowercase().contains("no space left"),
        "{what}: the error names the file and the cause: {line}"
    );
    assert_eq!(
        names_in(disk.path()),
        ["filler"],
        "{what}: a half-written file was left on the full disk"
    );
}

#[test]
fn a_disk_that_fills_mid_write_gives_a_clear_error_and_no_half_written_file() {
    let Some(_serial) =
        ebpf_ready("a_disk_that_fills_mid_write_gives_a_clear_error_and_no_half_written_file")
    else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let fixture = fixtures.join("stacks-demo.json");
    // Each output below is larger than the 4 KiB (one page) left on the disk.
    let disk = SmallDisk::mount(64, 4);

    // A live session: `trace -o` on the full disk, of a shell starting short processes
    // (their lifecycle events make the bundle larger than the space left).
    let mut churn = Command::new("sh")
        .args(["-c", "while :; do /bin/true; sleep 0.02; done"])
        .process_group(0)
        .spawn()
        .unwrap();
    let out_path = disk.path().join("trace.bundle.json");
    let out = kernelkite(
        &[
            "trace",
            "--follow",
            "--pid",
            &churn.id().to_string(),
            "--duration",
            "2",
            "-o",
            out_path.to_str().unwrap(),
        ],
        work.path(),
    );
    // SAFETY: kill has no memory-safety preconditions; the group is our child's.
    unsafe { libc::kill(-(churn.id() as i32), libc::SIGKILL) };
    let _ = churn.wait();
    assert_full_disk_failure(&out, &disk, "trace -o", "trace.bundle.json");

    // `run` as root: the bundle argument on the full disk.
    let out_path = disk.path().join("run.bundle.json");
    let out = kernelkite(
        &[
            "run",
            out_path.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "for i in $(seq 40); do /bin/true; done",
        ],
        work.path(),
    );
    assert_full_disk_failure(&out, &disk, "run", "run.bundle.json");

    // Commands without the kernel write their outputs the same way.
    let replayed = work.path().join("stacks.bundle.json");
    let out = kernelkite(
        &[
            "replay",
            fixture.to_str().unwrap(),
            replayed.to_str().unwrap(),
        ],
        work.path(),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let bundle = replayed.to_str().unwrap();
    for (what, args, name) in [
        (
            "replay",
            vec!["replay", fixture.to_str().unwrap(), "x.bundle.json"],
            "x.bundle.json",
        ),
        ("report", vec!["report", bundle, "-o", "x.html"], "x.html"),
        (
            "export",
            vec!["export", bundle, "--format", "chrome-trace", "-o", "x.json"],
            "x.json",
        ),
        (
            "viewer",
            vec!["viewer", bundle, "x.viewer.json"],
            "x.viewer.json",
        ),
    ] {
        let out = kernelkite(&args, disk.path());
        assert_full_disk_failure(&out, &disk, what, name);
    }
}

#[test]
fn a_recording_that_fills_the_disk_keeps_the_session_and_its_complete_chunks() {
    let Some(_serial) =
        ebpf_ready("a_recording_that_fills_the_disk_keeps_the_session_and_its_complete_chunks")
    else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(64, 8);
    let recording = disk.path().join("full.kkr");
    let bundle_path = work.path().join("trace.bundle.json");
    // Stored chunks, 20 frames a second for the whole 3 s (the workload sleeps 4 s, on
    // any machine): the recording outgrows 8 KiB within the first second.
    let mut w = GatedWorkload::spawn(&["sleep_stress", "--nanosleeps", "400", "--sleep-ms", "10"]);
    let pid = w.pid.to_string();
    let mut child = Command::new(kernelkite_bin())
        .args([
            "trace",
            "--pid",
            &pid,
            "--interval-ms",
            "50",
            "--duration",
            "3",
        ])
        .args(["--record-compression", "none", "--record"])
        .arg(&recording)
        .arg("-o")
        .arg(&bundle_path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    w.go();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "trace hung on a full disk");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    w.finish();
    // The session's bundle is whole; the recording error is one line and exit 2.
    let line = assert_one_line_error(&out, "trace --record on a full disk");
    assert!(line.contains("full.kkr"), "{line}");
    assert_eq!(out.status.code(), Some(2));
    load_bundle(&bundle_path).expect("the session's bundle is written whole");
    // What reached the disk replays (every complete chunk).
    let replayed = work.path().join("replayed.bundle.json");
    let out = kernelkite(
        &[
            "replay",
            recording.to_str().unwrap(),
            replayed.to_str().unwrap(),
        ],
        work.path(),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    load_bundle(&replayed).expect("the complete chunks replay to a bundle");
}

/// A root-owned copy of `id`, setuid, in a directory anyone can enter.
fn setuid_id(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("suid-id");
    std::fs::copy("/usr/bin/id", &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o4755)).unwrap();
    bin
}

/// uid and gid of the `nobody` user (and its group), from the passwd database.
fn nobody() -> (u32, u32) {
    let name = std::ffi::CString::new("nobody").unwrap();
    // SAFETY: a NUL-terminated name; the result is read before any other getpw* call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(!pw.is_null(), "no nobody user");
    // SAFETY: non-null, points to libc's static passwd entry.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

/// The exec'd processes of `bundle` named `comm`.
fn execs_of(bundle: &kernelkite::model::Bundle, comm: &str) -> Vec<i32> {
    bundle
        .lifecycle
        .iter()
        .filter(|e| e.kind == LifecycleKind::Exec && e.comm == comm)
        .map(|e| e.pid)
        .collect()
}

#[test]
fn a_traced_process_that_execs_a_setuid_binary_is_followed_and_nothing_breaks() {
    let Some(_serial) =
        ebpf_ready("a_traced_process_that_execs_a_setuid_binary_is_followed_and_nothing_breaks")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let suid = setuid_id(dir.path());
    let (uid, gid) = nobody();
    let script = format!("read _go; '{0}' -u; '{0}' -u", suid.display());

    // trace --follow of an unprivileged shell that execs it.
    let mut sh = Command::new("sh")
        .args(["-c", &script])
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let trace = RunningTrace::start(&[sh.id() as i32], &["--follow"]);
    sh.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = sh.wait_with_output().unwrap();
    assert!(out.status.success());
    // The binary really ran with euid 0 (else the test proves nothing).
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\n0\n");
    let traced = trace.finish();
    assert!(
        !traced.stderr.iter().any(|l| l.contains("panicked")),
        "{:?}",
        traced.stderr
    );
    let execs = execs_of(&traced.bundle, "suid-id");
    assert_eq!(execs.len(), 2, "both setuid execs are in the bundle");
    for pid in execs {
        assert!(
            traced.analysis.processes.iter().any(|p| p.pid == pid),
            "setuid process {pid} is reported"
        );
    }

    // run, with the command dropped to nobody through SUDO_UID/SUDO_GID.
    let out_dir = tempfile::tempdir().unwrap();
    let bundle_path = out_dir.path().join("run.bundle.json");
    let out = Command::new(kernelkite_bin())
        .env("SUDO_UID", uid.to_string())
        .env("SUDO_GID", gid.to_string())
        .arg("run")
        .arg(&bundle_path)
        .args([
            "--",
            "sh",
            "-c",
            &format!("'{0}' -u; '{0}' -u", suid.display()),
        ])
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert!(out.status.success(), "run: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("0\n0\n"),
        "the setuid binary ran as root under run: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let bundle = load_bundle(&bundle_path).expect("run's bundle loads");
    assert_eq!(
        execs_of(&bundle, "suid-id").len(),
        2,
        "{:?}",
        bundle.lifecycle
    );
}

#[test]
fn a_target_that_exits_before_attach_gives_an_error_or_an_empty_bundle_not_a_hang() {
    let Some(_serial) = ebpf_ready(
        "a_target_that_exits_before_attach_gives_an_error_or_an_empty_bundle_not_a_hang",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();

    // Exited and reaped: nothing to trace.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id().to_string();
    gone.wait().unwrap();
    let out = kernelkite(&["trace", "--pid", &pid], dir.path());
    let line = assert_one_line_error(&out, "trace --pid of a reaped process");
    assert!(line.contains(&pid), "{line}");

    // Exited but not reaped (a zombie), and exiting while the hooks attach: either a
    // one-line error or a bundle that loads, and the trace ends by itself.
    let mut zombie = Command::new("true").spawn().unwrap();
    while std::fs::read_to_string(format!("/proc/{}/stat", zombie.id()))
        .is_ok_and(|s| !s.contains(") Z "))
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut cases = vec![("zombie", zombie.id(), None)];
    for delay_ms in [0u64, 50, 150, 300] {
        let child = Command::new("sleep")
            .arg(format!("{}", delay_ms as f64 / 1000.0))
            .spawn()
            .unwrap();
        cases.push(("exits during attach", child.id(), Some(child)));
    }
    for (i, (what, pid, _child)) in cases.iter().enumerate() {
        let bundle_name = format!("early-{i}.bundle.json");
        let out = kernelkite(
            &["trace", "--pid", &pid.to_string(), "-o", &bundle_name],
            dir.path(),
        );
        let err = stderr_of(&out);
        assert!(!err.contains("panicked"), "{what}: {err}");
        if out.status.success() {
            load_bundle(&dir.path().join(&bundle_name))
                .unwrap_or_else(|e| panic!("{what}: exit 0 but the bundle does not load: {e}"));
        } else {
            assert_one_line_error(&out, what);
            assert!(
                !dir.path().join(&bundle_name).exists(),
                "{what}: failed but left a bundle"
            );
        }
    }
    zombie.wait().unwrap();
    for (_, _, child) in cases.iter_mut() {
        if let Some(c) = child {
            let _ = c.wait();
        }
    }
}

/// Threads start and exit while the hooks attach (a thread can exit between
/// kernelkite's /proc read and its map insert), and the process's main thread exited
/// before the attach (a zombie leader in /proc while the process runs on). The session
/// must end by itself when the process exits (a thread left in the map would keep it
/// waiting), and the leader, gone before the session, is neither a thread row nor an exit
/// of the session.
#[test]
fn threads_exiting_during_attach_are_neither_kept_nor_reported_as_exits_of_the_session() {
    let Some(_serial) = ebpf_ready(
        "threads_exiting_during_attach_are_neither_kept_nor_reported_as_exits_of_the_session",
    ) else {
        return;
    };
    let mut churn = Command::new(workload_bin())
        .args(["thread_churn", "--seconds", "4", "--leader-exits"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = churn.id() as i32;
    let leader = format!("/proc/{pid}/task/{pid}/stat");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&leader).is_ok_and(|s| s.contains(") Z ")) {
        assert!(Instant::now() < deadline, "the main thread never exited");
        std::thread::sleep(Duration::from_millis(5));
    }
    let traced = RunningTrace::start(&[pid], &["--follow"]).finish();
    assert!(churn.wait().unwrap().success());
    let b = &traced.bundle;
    let leader_rows = (b.frames.iter())
        .flat_map(|f| &f.processes)
        .filter(|p| p.pid == pid)
        .flat_map(|p| &p.threads)
        .filter(|t| t.tid == pid)
        .count();
    assert_eq!(leader_rows, 0, "the exited main thread shown as a thread");
    let exits: Vec<_> = (b.lifecycle.iter())
        .filter(|e| e.kind == LifecycleKind::Exit && e.pid == pid)
        .collect();
    assert!(
        exits.iter().all(|e| e.tid != pid),
        "the main thread's exit, before the session, reported in it: {:?}",
        exits.iter().find(|e| e.tid == pid)
    );
    // The churn was traced: threads forked and exited inside the session.
    assert!(exits.len() > 10, "{} exits", exits.len());
    assert!(
        traced
            .stderr
            .iter()
            .any(|l| l.contains("every traced process exited")),
        "{:?}",
        traced.stderr
    );
}
