//! Real-kernel tests of the door to files a traced process controls
//! (`source/untrusted.rs`, docs/SECURITY.md): root runs `kernelkite trace --stacks` on a
//! process of `nobody` that runs JIT-style code from an anonymous page
//! (tests/workloads/c/jitwork.c), whose `/tmp/perf-PID.map` is made a symlink to a
//! root-only file, a FIFO, another user's file, a 2 GB sparse file, or a genuine map;
//! and one that renames another binary over its own before it exits; and processes
//! in a mount and pid namespace of their own, whose binary and perf map exist only
//! there.

#[path = "support/ebpf.rs"]
mod support;

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kernelkite::model::{load_bundle, Bundle, SkippedFile, StackFrame};
use support::*;

const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;
/// Another unprivileged user (`daemon` on Debian and Ubuntu).
const DAEMON: u32 = 1;

/// A directory `nobody` can enter and write (and root's tests can clean up).
fn nobody_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOGROUP)).unwrap();
    dir
}

/// tests/workloads/c/jitwork.c built into `dir` as `name`, its spinning function
/// called `spin` (same length in every build, so the code does not move).
fn build_jitwork(dir: &Path, name: &str, spin: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/c/jitwork.c");
    let bin = dir.join(name);
    let status = Command::new("gcc")
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .arg(format!("-DSPIN={spin}"))
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .expect("gcc (the tests need a C compiler)");
    assert!(status.success(), "gcc failed");
    bin
}

/// jitwork running as `nobody`: its pid and the address of its JIT page.
struct Jit {
    child: Child,
    pid: u32,
    addr: u64,
}

/// `program args` run as `nobody` (setpriv execs it: the child is the process), and
/// the first line it prints.
fn spawn_as_nobody(program: &OsStr, args: &[&str]) -> (Child, String) {
    let mut child = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(program)
        .args(args)
        .current_dir("/tmp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("setpriv");
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

impl Jit {
    fn spawn(bin: &Path, args: &[&str]) -> Jit {
        let (child, line) = spawn_as_nobody(bin.as_os_str(), args);
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("jit"), "{line:?}");
        let pid = words.next().unwrap().parse().unwrap();
        let addr = u64::from_str_radix(words.next().unwrap(), 16).unwrap();
        assert_eq!(pid, child.id(), "setpriv execs the workload");
        Jit { child, pid, addr }
    }

    fn perf_map(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/perf-{}.map", self.pid))
    }

    /// A genuine perf map line for the JIT page.
    fn line(&self, name: &str) -> String {
        format!("{:x} 2 {name}\n", self.addr)
    }
}

impl Drop for Jit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.perf_map());
    }
}

/// `kernelkite [global] trace --pid PID --stacks --duration D -o BUNDLE`, killed (and
/// failed) if it has not ended after a minute: it must never hang.
fn trace(global: &[&str], pid: u32, duration: &str, bundle: &Path) -> Output {
    let child = trace_child(global, pid, duration, bundle);
    wait_bounded(child, Duration::from_secs(60))
}

fn trace_child(global: &[&str], pid: u32, duration: &str, bundle: &Path) -> Child {
    Command::new(kernelkite_bin())
        .args(global)
        .args([
            "trace",
            "--pid",
            &pid.to_string(),
            "--stacks",
            "--duration",
            duration,
        ])
        .arg("-o")
        .arg(bundle)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A trace whose hooks are live (its "tracing pid" line was printed).
struct LiveTrace {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
}

impl LiveTrace {
    fn start(global: &[&str], pid: u32, duration: &str, bundle: &Path) -> LiveTrace {
        use std::io::BufRead;
        let mut child = trace_child(global, pid, duration, bundle);
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("tracing pid") {
                break;
            }
        }
        assert!(seen.contains("tracing pid"), "trace did not start: {seen}");
        let stderr = std::thread::spawn(move || {
            lines
                .map_while(Result::ok)
                .fold(seen, |all, l| all + &l + "\n")
        });
        LiveTrace { child, stderr }
    }

    /// Its exit status and stderr; fails the test if it has not ended within `limit`.
    fn wait(mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let started = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            if started.elapsed() > limit {
                let _ = self.child.kill();
                panic!("kernelkite trace hung (killed after {limit:?})");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (self.child.wait().unwrap(), self.stderr.join().unwrap())
    }
}

fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "kernelkite trace hung (killed after {limit:?}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "trace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn skipped(bundle: &Bundle) -> &[SkippedFile] {
    &bundle
        .stacks
        .as_ref()
        .expect("bundle has stacks")
        .skipped_files
}

/// The swapped binary was either read while its process lived (the unwinder's copy,
/// through /proc/PID/map_files: the profile's `modules` lists it) or refused at its
/// path after the exit for `reason`.
fn assert_read_alive_or_skipped(bundle: &Bundle, path: &Path, reason: &str) {
    let read_alive = bundle
        .stacks
        .as_ref()
        .is_some_and(|p| p.modules.iter().any(|m| Path::new(&m.path) == path));
    if !read_alive {
        assert_skipped(bundle, path, reason);
    }
}

fn assert_skipped(bundle: &Bundle, path: &Path, reason: &str) {
    let path = path.to_string_lossy();
    assert!(
        skipped(bundle)
            .iter()
            .any(|f| f.path == path && f.reason == reason && f.count > 0),
        "{path} not skipped as {reason}: {:?}",
        skipped(bundle)
    );
}

fn frames(bundle: &Bundle) -> &[StackFrame] {
    &bundle.stacks.as_ref().expect("bundle has stacks").frames
}

/// Whether a frame of `module` has a symbol containing `name`.
fn has_frame(bundle: &Bundle, module: &str, name: &str) -> bool {
    frames(bundle).iter().any(|f| {
        f.module.as_deref() == Some(module) && f.symbol.as_deref().is_some_and(|s| s.contains(name))
    })
}

fn jit_frames(bundle: &Bundle, jit: &Jit) -> Vec<StackFrame> {
    frames(bundle)
        .iter()
        .filter(|f| f.addr >= jit.addr && f.addr < jit.addr + 2)
        .cloned()
        .collect()
}

/// What `stacks`, `stacks --json`, `summary --json` and the HTML report show.
fn reports(bundle: &Path) -> String {
    let mut all = String::new();
    for args in [
        &["stacks"][..],
        &["stacks", "--json"],
        &["--json", "summary"],
    ] {
        let out = Command::new(kernelkite_bin())
            .args(args)
            .arg(bundle)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        all.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    let html = bundle.with_extension("html");
    let out = Command::new(kernelkite_bin())
        .arg("report")
        .arg(bundle)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "report: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    all.push_str(&std::fs::read_to_string(&html).unwrap());
    all
}

/// Each report names the skipped file and its reason.
fn assert_reported(reports: &str, path: &Path, reason: &str) {
    let path = path.to_string_lossy();
    // Text, both JSON documents and the HTML.
    assert!(
        reports.matches(&*path).count() >= 4,
        "{path} not in every report"
    );
    assert!(
        reports.matches(reason).count() >= 4,
        "{reason} not in every report"
    );
}

#[test]
fn a_perf_map_symlink_to_a_root_only_file_is_not_followed() {
    let Some(_guard) = ebpf_ready("a_perf_map_symlink_to_a_root_only_file_is_not_followed") else {
        return;
    };
    let dir = nobody_dir();
    let bin = build_jitwork(dir.path(), "jitwork", "kk_spin_mapped__");
    let jit = Jit::spawn(&bin, &["30"]);
    // A root-only file whose line would name the JIT page.
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret");
    std::fs::write(&secret, jit.line("SECRET_ROOT_ONLY_LINE")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&secret, jit.perf_map()).unwrap();
    std::os::unix::fs::lchown(jit.perf_map(), Some(NOBODY), Some(NOGROUP)).unwrap();

    let bundle_path = dir.path().join("b.json");
    assert_ok(&trace(&[], jit.pid, "2", &bundle_path));
    let bytes = std::fs::read_to_string(&bundle_path).unwrap();
    assert!(
        !bytes.contains("SECRET_ROOT_ONLY_LINE"),
        "the root-only file leaked into the bundle"
    );
    let bundle = load_bundle(&bundle_path).unwrap();
    assert!(
        !jit_frames(&bundle, &jit).is_empty(),
        "no sample in the JIT page"
    );
    assert_skipped(&bundle, &jit.perf_map(), "symlink");
    let shown = reports(&bundle_path);
    assert!(
        !shown.contains("SECRET_ROOT_ONLY_LINE"),
        "the root-only file leaked into a report"
    );
    assert_reported(&shown, &jit.perf_map(), "symlink");
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOGROUP)).unwrap();
}

#[test]
fn a_perf_map_fifo_neither_hangs_a_trace_nor_its_signals() {
    let Some(_guard) = ebpf_ready("a_perf_map_fifo_neither_hangs_a_trace_nor_its_signals") else {
        return;
    };
    let dir = nobody_dir();
    let bin = build_jitwork(dir.path(), "jitwork", "kk_spin_mapped__");
    let jit = Jit::spawn(&bin, &["60"]);
    mkfifo(&jit.perf_map());

    // The duration ends it (wait_bounded fails the test on a hang).
    let bundle_path = dir.path().join("b.json");
    assert_ok(&trace(&[], jit.pid, "2", &bundle_path));
    let bundle = load_bundle(&bundle_path).unwrap();
    assert!(
        !jit_frames(&bundle, &jit).is_empty(),
        "no sample in the JIT page"
    );
    assert_skipped(&bundle, &jit.perf_map(), "not_regular");

    // SIGTERM, after stacks in the JIT page were resolved at a snapshot (where the old
    // reader blocked in open), ends it with a bundle.
    let second = dir.path().join("second.json");
    let live = LiveTrace::start(&[], jit.pid, "600", &second);
    // Snapshots every 100 ms resolve the JIT stack, reading the perf map.
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling our own child.
    assert_eq!(
        unsafe { libc::kill(live.child.id() as i32, libc::SIGTERM) },
        0
    );
    let signalled = Instant::now();
    let (status, err) = live.wait(Duration::from_secs(20));
    let took = signalled.elapsed();
    assert!(status.success(), "{err}");
    eprintln!("trace ended {took:?} after SIGTERM");
    // A bound against a hang, not a speed test: the old reader never returned.
    assert!(
        took < Duration::from_secs(5),
        "trace took {took:?} to end after SIGTERM"
    );
    assert!(err.contains("stopped: terminated"), "{err}");
    // With its stacks (whether the JIT stack was reached before the signal depends on
    // the machine's load: the first run checked the skip).
    let bundle = load_bundle(&second).unwrap();
    assert!(bundle.stacks.is_some());
}

#[test]
fn a_perf_map_of_another_user_is_not_read() {
    let Some(_guard) = ebpf_ready("a_perf_map_of_another_user_is_not_read") else {
        return;
    };
    let dir = nobody_dir();
    let bin = build_jitwork(dir.path(), "jitwork", "kk_spin_mapped__");
    let jit = Jit::spawn(&bin, &["30"]);
    std::fs::write(jit.perf_map(), jit.line("kk_planted_by_daemon")).unwrap();
    std::os::unix::fs::chown(jit.perf_map(), Some(DAEMON), Some(DAEMON)).unwrap();

    let bundle_path = dir.path().join("b.json");
    assert_ok(&trace(&[], jit.pid, "2", &bundle_path));
    let bundle = load_bundle(&bundle_path).unwrap();
    let in_page = jit_frames(&bundle, &jit);
    assert!(!in_page.is_empty(), "no sample in the JIT page");
    assert!(in_page.iter().all(|f| f.symbol.is_none()), "{in_page:?}");
    assert_skipped(&bundle, &jit.perf_map(), "wrong_owner");
    assert_reported(&reports(&bundle_path), &jit.perf_map(), "wrong_owner");
}

#[test]
fn a_huge_sparse_perf_map_is_refused_by_its_size() {
    let Some(_guard) = ebpf_ready("a_huge_sparse_perf_map_is_refused_by_its_size") else {
        return;
    };
    let dir = nobody_dir();
    let bin = build_jitwork(dir.path(), "jitwork", "kk_spin_mapped__");
    let jit = Jit::spawn(&bin, &["30"]);
    std::fs::write(jit.perf_map(), jit.line("kk_in_a_huge_map")).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(jit.perf_map())
        .unwrap();
    file.set_len(2 << 30).unwrap();
    std::os::unix::fs::chown(jit.perf_map(), Some(NOBODY), Some(NOGROUP)).unwrap();

    let bundle_path = dir.path().join("b.json");
    assert_ok(&trace(&[], jit.pid, "2", &bundle_path));
    let bundle = load_bundle(&bundle_path).unwrap();
    let in_page = jit_frames(&bundle, &jit);
    assert!(!in_page.is_empty(), "no sample in the JIT page");
    assert!(in_page.iter().all(|f| f.symbol.is_none()), "{in_page:?}");
    assert_skipped(&bundle, &jit.perf_map(), "too_large");
}

#[test]
fn a_genuine_perf_map_still_names_jit_code() {
    let Some(_guard) = ebpf_ready("a_genuine_perf_map_still_names_jit_code") else {
        return;
    };
    let dir = nobody_dir();
    let bin = build_jitwork(dir.path(), "jitwork", "kk_spin_mapped__");
    let jit = Jit::spawn(&bin, &["30"]);
    // As the runtime writes it: its own file, its own uid.
    std::fs::write(
        jit.perf_map(),
        format!("0 10 kk_other\n{}", jit.line("kk_jit_spin")),
    )
    .unwrap();
    std::os::unix::fs::chown(jit.perf_map(), Some(NOBODY), Some(NOGROUP)).unwrap();

    let bundle_path = dir.path().join("b.json");
    assert_ok(&trace(&[], jit.pid, "2", &bundle_path));
    let bundle = load_bundle(&bundle_path).unwrap();
    let in_page = jit_frames(&bundle, &jit);
    assert!(
        in_page
            .iter()
            .any(|f| f.symbol.as_deref() == Some("kk_jit_spin")
                && f.module.as_deref() == Some("[perf-map]")),
        "{in_page:?}"
    );
    // The binary's own code is named from the file it mapped.
    assert!(
        frames(&bundle)
            .iter()
            .any(|f| f.symbol.as_deref() == Some("kk_spin_mapped__")),
        "{:?}",
        frames(&bundle)
    );
    assert!(skipped(&bundle).is_empty(), "{:?}", skipped(&bundle));
}

/// jitwork as `nobody`, traced with no snapshot between the first (which reads its
/// mappings) and its exit, so its stacks are resolved after it has gone, from the path
/// it had mapped; before it exits it renames `make_replacement(dir)` over its binary.
/// The bundle, and the binary's path.
fn trace_a_swap(make_replacement: impl FnOnce(&Path) -> PathBuf) -> (Bundle, PathBuf) {
    let dir = nobody_dir();
    let bin = build_jitwork(dir.path(), "jitwork", "kk_spin_mapped__");
    std::os::unix::fs::chown(&bin, Some(NOBODY), Some(NOGROUP)).unwrap();
    let replacement = make_replacement(dir.path());
    std::os::unix::fs::chown(&replacement, Some(NOBODY), Some(NOGROUP)).unwrap();
    // Once told, spins 1.5 s, renames the replacement over its own binary, exits.
    let mut jit = Jit::spawn(
        &bin,
        &[
            "1.5",
            &bin.to_string_lossy(),
            &replacement.to_string_lossy(),
        ],
    );
    let bundle_path = dir.path().join("b.json");
    let live = LiveTrace::start(&["--interval-ms", "600000"], jit.pid, "30", &bundle_path);
    use std::io::Write;
    writeln!(jit.child.stdin.as_mut().unwrap(), "go").unwrap();
    assert!(jit.child.wait().unwrap().success(), "the swap failed");
    let (status, err) = live.wait(Duration::from_secs(60));
    assert!(status.success(), "{err}");
    assert!(err.contains("every traced process exited"), "{err}");
    let bundle = load_bundle(&bundle_path).unwrap();
    let in_binary: Vec<&StackFrame> = frames(&bundle)
        .iter()
        .filter(|f| f.module.as_deref() == Some(&*bin.to_string_lossy()))
        .collect();
    assert!(
        !in_binary.is_empty(),
        "no frame in the binary: {:?}",
        frames(&bundle)
    );
    assert!(in_binary.iter().all(|f| f.module_offset.is_some()));
    (bundle, bin)
}

#[test]
fn a_binary_renamed_over_after_its_process_exits_is_not_read() {
    let Some(_guard) = ebpf_ready("a_binary_renamed_over_after_its_process_exits_is_not_read")
    else {
        return;
    };
    let (bundle, bin) = trace_a_swap(|dir| build_jitwork(dir, "impostor", "kk_spin_IMPOSTOR"));
    for f in frames(&bundle) {
        assert!(
            !f.symbol.as_deref().unwrap_or("").contains("IMPOSTOR"),
            "a name from the file renamed over the mapped one: {f:?}"
        );
    }
    assert_read_alive_or_skipped(&bundle, &bin, "replaced");
}

/// Issue 16's case: the exited binary's path is a FIFO by the time it is read.
#[test]
fn a_binary_replaced_by_a_fifo_after_exit_does_not_hang_the_trace() {
    let Some(_guard) = ebpf_ready("a_binary_replaced_by_a_fifo_after_exit_does_not_hang_the_trace")
    else {
        return;
    };
    let (bundle, bin) = trace_a_swap(|dir| {
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        fifo
    });
    assert_read_alive_or_skipped(&bundle, &bin, "not_regular");
}

/// Node's own perf map (`--perf-basic-prof`), written as the traced user: its JIT
/// frames are named.
#[test]
fn node_perf_basic_prof_still_resolves() {
    let Some(_guard) = ebpf_ready("node_perf_basic_prof_still_resolves") else {
        return;
    };
    let script = "function kkHotLoop(n) { let s = 0; for (let i = 0; i < n; i++) { s = (s + i * i) % 1000003; } return s; }\n\
                  console.log('node ' + process.pid);\n\
                  const end = Date.now() + 60000; let x = 0; while (Date.now() < end) { x += kkHotLoop(1e6); }";
    let (mut node, line) =
        spawn_as_nobody(OsStr::new("node"), &["--perf-basic-prof", "-e", script]);
    let pid: u32 = line.trim().strip_prefix("node ").unwrap().parse().unwrap();
    let perf_map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    // Until V8 has compiled the loop.
    let waited = Instant::now();
    while !std::fs::read_to_string(&perf_map).is_ok_and(|m| m.contains("kkHotLoop")) {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "node wrote no perf map line for kkHotLoop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("b.json");
    let out = trace(&[], pid, "3", &bundle_path);
    let _ = node.kill();
    let _ = node.wait();
    let _ = std::fs::remove_file(&perf_map);
    assert_ok(&out);
    let bundle = load_bundle(&bundle_path).unwrap();
    assert!(
        has_frame(&bundle, "[perf-map]", "kkHotLoop"),
        "no JIT frame named from node's perf map: {:?}",
        frames(&bundle)
            .iter()
            .filter(|f| f.module.as_deref() == Some("[perf-map]"))
            .collect::<Vec<_>>()
    );
    assert!(
        skipped(&bundle)
            .iter()
            .all(|f| f.path != perf_map.to_string_lossy()),
        "{:?}",
        skipped(&bundle)
    );
}

/// vDSO frames are named from kernelkite's own copy of the kernel's vDSO (nothing of
/// the traced process is read for them).
#[test]
fn vdso_frames_are_named() {
    let Some(_guard) = ebpf_ready("vdso_frames_are_named") else {
        return;
    };
    let dir = nobody_dir();
    let src = dir.path().join("vdsoloop.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <time.h>\n#include <unistd.h>\n\
         int main(void) { struct timespec ts; printf(\"vdso %d\\n\", getpid()); fflush(stdout);\n\
         for (;;) clock_gettime(CLOCK_MONOTONIC, &ts); }\n",
    )
    .unwrap();
    let bin = dir.path().join("vdsoloop");
    let status = Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .expect("gcc");
    assert!(status.success());
    let (mut child, line) = spawn_as_nobody(bin.as_os_str(), &[]);
    let pid: u32 = line.trim().strip_prefix("vdso ").unwrap().parse().unwrap();
    let bundle_path = dir.path().join("b.json");
    let out = trace(&[], pid, "2", &bundle_path);
    let _ = child.kill();
    let _ = child.wait();
    assert_ok(&out);
    let bundle = load_bundle(&bundle_path).unwrap();
    assert!(
        has_frame(&bundle, "[vdso]", "clock_gettime"),
        "{:?}",
        frames(&bundle)
    );
}

/// Where a program run in a namespace of its own is copied to, on that namespace's
/// own /tmp (a tmpfs): the host has no such file.
const IN_NAMESPACE: &str = "/tmp/kk-in-namespace";

/// A program run as `nobody` in a mount and pid namespace of its own (`unshare`),
/// from a copy on the namespace's own /tmp, a tmpfs only that namespace has: its
/// binary, and any perf map, exist nowhere else.
struct InNamespace {
    unshare: Child,
    /// Its pid on the host (it is pid 1 in its namespace).
    pid: u32,
    /// The first line it printed.
    line: String,
}

impl InNamespace {
    fn spawn(program: &Path, args: &[&str]) -> InNamespace {
        // The program is opened (fd 3) before the namespace's /tmp is mounted over it:
        // a checkout may live below /tmp.
        let script = format!(
            "exec 3< \"$0\" && mount -t tmpfs kk-tmp /tmp && cat <&3 > {IN_NAMESPACE} && \
             exec 3<&- && chmod 755 {IN_NAMESPACE} && \
             exec setpriv --reuid=nobody --regid=nogroup --clear-groups {IN_NAMESPACE} \"$@\""
        );
        let mut unshare = Command::new("unshare")
            .args(["--pid", "--mount", "--fork", "--mount-proc", "--kill-child"])
            .args(["sh", "-c", &script])
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux)");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(unshare.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            !line.is_empty(),
            "the program in the namespace printed nothing"
        );
        // unshare's one child (sh, which exec'd setpriv, which exec'd the program).
        let u = unshare.id();
        let children = std::fs::read_to_string(format!("/proc/{u}/task/{u}/children")).unwrap();
        let pid: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(maps.contains(IN_NAMESPACE), "{maps}");
        assert!(
            !Path::new(IN_NAMESPACE).exists(),
            "the host has a {IN_NAMESPACE}"
        );
        InNamespace { unshare, pid, line }
    }

    /// `path` as the program sees it, from the host.
    fn inside(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", self.pid))
    }
}

impl Drop for InNamespace {
    fn drop(&mut self) {
        // unshare's --kill-child ends the program with it.
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// A directory for programs built for a namespace: not below /tmp, which the
/// namespace mounts over.
fn build_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// A live process of another mount and pid namespace: its own code is named from the
/// file it mapped, and its JIT code from the perf map in its own /tmp, named by its
/// pid there (1), not the host's.
#[test]
fn a_process_in_another_mount_namespace_has_its_perf_map_read_in_its_own_root() {
    let Some(_guard) =
        ebpf_ready("a_process_in_another_mount_namespace_has_its_perf_map_read_in_its_own_root")
    else {
        return;
    };
    let dir = build_dir();
    let bin = build_jitwork(dir.path(), "jitwork", "kk_spin_in_namespace");
    let ns = InNamespace::spawn(&bin, &["30"]);
    let mut words = ns.line.split_whitespace();
    assert_eq!(words.next(), Some("jit"), "{:?}", ns.line);
    let ns_pid: u32 = words.next().unwrap().parse().unwrap();
    let addr = u64::from_str_radix(words.next().unwrap(), 16).unwrap();
    assert_eq!(ns_pid, 1, "pid 1 of its own pid namespace");
    // As the runtime writes it: in its /tmp, by its pid there, owned by its uid.
    let perf_map = ns.inside(&format!("/tmp/perf-{ns_pid}.map"));
    std::fs::write(&perf_map, format!("{addr:x} 2 kk_jit_in_namespace\n")).unwrap();
    std::os::unix::fs::chown(&perf_map, Some(NOBODY), Some(NOGROUP)).unwrap();
    for host in [ns_pid, ns.pid] {
        let path = format!("/tmp/perf-{host}.map");
        assert!(!Path::new(&path).exists(), "the host has a {path}");
    }

    let bundle_path = dir.path().join("b.json");
    assert_ok(&trace(&[], ns.pid, "2", &bundle_path));
    let bundle = load_bundle(&bundle_path).unwrap();
    let in_page: Vec<&StackFrame> = (frames(&bundle).iter())
        .filter(|f| f.addr >= addr && f.addr < addr + 2)
        .collect();
    assert!(!in_page.is_empty(), "no sample in the JIT page");
    assert!(
        in_page
            .iter()
            .any(|f| f.symbol.as_deref() == Some("kk_jit_in_namespace")
                && f.module.as_deref() == Some("[perf-map]")),
        "the perf map in the namespace's /tmp was not read: {in_page:?}; skipped {:?}",
        skipped(&bundle)
    );
    assert!(
        has_frame(&bundle, IN_NAMESPACE, "kk_spin_in_namespace"),
        "{:?}",
        frames(&bundle)
    );
    assert!(skipped(&bundle).is_empty(), "{:?}", skipped(&bundle));
    // Both of its pids are shown: the host's, and its own namespace's.
    let analysis = kernelkite::analysis::analyze(&bundle);
    let row = (analysis.processes.iter())
        .find(|p| p.pid == ns.pid as i32)
        .expect("its process row");
    let placement = row.placement.as_ref().expect("its placement");
    assert_eq!(placement.ns_pid, Some(ns_pid as i32), "{placement:?}");
    let text = String::from_utf8_lossy(
        &Command::new(kernelkite_bin())
            .arg("summary")
            .arg(&bundle_path)
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    let line = (text.lines())
        .skip_while(|l| !l.starts_with("processes"))
        .find(|l| l.split_whitespace().next() == Some(&ns.pid.to_string()))
        .unwrap_or_else(|| panic!("no row of {} in {text}", ns.pid));
    assert_eq!(line.split_whitespace().nth(1), Some("1"), "{text}");
}

/// A program that maps a JIT-style page (as tests/workloads/c/jitwork.c does), prints
/// `spinner <pid> <hex address of the page>`, waits in read(2) for a line on stdin,
/// then spins SECONDS (argv[1]) in the page on a thread and in `kk_spin_in_namespace`
/// on the main thread, and exits.
fn build_spinner(dir: &Path) -> PathBuf {
    let src = dir.join("spinner.c");
    std::fs::write(
        &src,
        r#"#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
__attribute__((noinline)) void kk_spin_in_namespace(double seconds) {
    double end = now() + seconds;
    while (now() < end)
        for (volatile int i = 0; i < 100000; i++) {
        }
}
static void *jit(void *page) {
    ((void (*)(void))page)();
    return NULL;
}
int main(int argc, char **argv) {
#if defined(__x86_64__)
    unsigned char code[] = {0xeb, 0xfe}; /* jmp . */
#elif defined(__aarch64__)
    unsigned char code[] = {0x00, 0x00, 0x00, 0x14}; /* b . */
#else
#error "spinner: no spin loop for this architecture"
#endif
    unsigned char *page =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 1;
    memcpy(page, code, sizeof code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0)
        return 1;
    __builtin___clear_cache((char *)page, (char *)page + sizeof code);
    char go[16];
    printf("spinner %d %lx\n", getpid(), (unsigned long)page);
    fflush(stdout);
    if (read(0, go, sizeof go) <= 0)
        return 1;
    pthread_t t;
    pthread_create(&t, NULL, jit, page);
    kk_spin_in_namespace(argc > 1 ? atof(argv[1]) : 2);
    return 0;
}
"#,
    )
    .unwrap();
    let bin = dir.join("spinner");
    let status = Command::new("gcc")
        .args(["-O0", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .expect("gcc");
    assert!(status.success(), "gcc failed");
    bin
}

/// A process of another mount namespace that exits, and its namespace with it (it is
/// its namespaces' pid 1 and only process), before its stacks are resolved: the perf
/// map in its own /tmp is read after its exit, below the root held for its namespace,
/// which keeps that namespace's mounts (without the namespace held, its /tmp tmpfs
/// went with its last process). Its own code is named too; its binary is read by the
/// unwinder while it lives (its on-CPU samples are copied), so this does not tell
/// whether the binary's gone-process read below its root works: the door's unit tests
/// (`a_path_in_a_root_is_read_below_it_and_never_leaves_it`) cover that read.
#[test]
fn a_gone_process_of_another_mount_namespace_is_named_from_its_own_root() {
    let Some(_guard) =
        ebpf_ready("a_gone_process_of_another_mount_namespace_is_named_from_its_own_root")
    else {
        return;
    };
    let dir = build_dir();
    let bin = build_spinner(dir.path());
    let mut ns = InNamespace::spawn(&bin, &["2"]);
    let mut words = ns.line.split_whitespace();
    assert_eq!(words.next(), Some("spinner"), "{:?}", ns.line);
    assert_eq!(words.next(), Some("1"), "pid 1 of its own pid namespace");
    let addr = u64::from_str_radix(words.next().unwrap(), 16).unwrap();
    let perf_map = ns.inside("/tmp/perf-1.map");
    std::fs::write(&perf_map, format!("{addr:x} 2 kk_jit_after_exit\n")).unwrap();
    std::os::unix::fs::chown(&perf_map, Some(NOBODY), Some(NOGROUP)).unwrap();
    let bundle_path = dir.path().join("b.json");
    // One snapshot (at the start, while it waits in read) and none before it exits:
    // its JIT frames are resolved only after it has gone.
    let live = LiveTrace::start(&["--interval-ms", "600000"], ns.pid, "60", &bundle_path);
    use std::io::Write;
    writeln!(ns.unshare.stdin.as_mut().unwrap(), "go").unwrap();
    assert!(ns.unshare.wait().unwrap().success(), "the spinner failed");
    let (status, err) = live.wait(Duration::from_secs(60));
    assert!(status.success(), "{err}");
    assert!(err.contains("every traced process exited"), "{err}");
    let bundle = load_bundle(&bundle_path).unwrap();
    let in_page: Vec<&StackFrame> = (frames(&bundle).iter())
        .filter(|f| f.addr >= addr && f.addr < addr + 2)
        .collect();
    assert!(!in_page.is_empty(), "no sample in the JIT page");
    assert!(
        in_page
            .iter()
            .any(|f| f.symbol.as_deref() == Some("kk_jit_after_exit")),
        "the perf map was not read below its root after its exit: {in_page:?}; skipped {:?}",
        skipped(&bundle)
    );
    assert!(
        has_frame(&bundle, IN_NAMESPACE, "kk_spin_in_namespace"),
        "{:?}",
        frames(&bundle)
    );
    assert!(skipped(&bundle).is_empty(), "{:?}", skipped(&bundle));
}
