//! Shared helpers for the real-kernel eBPF tests: run a workload from
//! `tests/workloads` behind its start gate, trace it with `kernelkite trace`, and load
//! the bundle it wrote.
//!
//! On a machine where eBPF cannot run the tests print why and pass, except under CI
//! (`CI` set), where a skip is a failure: CI runs as root on a kernel with BTF.

#![allow(
    dead_code,
    reason = "each test binary uses a different subset of these helpers"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kernelkite::analysis::{analyze, Analysis};
use kernelkite::model::{load_bundle, Bundle};

#[path = "skip.rs"]
pub mod skip;

/// Real-kernel tests run one at a time: concurrent traces would share the CPUs (and
/// the leak check counts every loaded program).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `Some(guard)` when eBPF tests can run here (hold it for the whole test); otherwise
/// prints why and returns `None` (and panics under CI).
pub fn ebpf_ready(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    let reason = if euid != 0 {
        Some(format!("not root (euid {euid})"))
    } else if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        Some("no kernel BTF".to_string())
    } else {
        None
    };
    match reason {
        None => Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner())),
        Some(r) => {
            skip::required(test, &format!("real-kernel eBPF test: {r}"));
            None
        }
    }
}

pub fn kernelkite_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kernelkite"))
}

/// The `kk-workload` binary next to kernelkite's, built on demand.
pub fn workload_bin() -> PathBuf {
    let bin = kernelkite_bin().with_file_name("kk-workload");
    if !bin.exists() {
        let profile_release = kernelkite_bin()
            .parent()
            .is_some_and(|p| p.ends_with("release"));
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-q", "-p", "kernelkite-workloads"]);
        if profile_release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo build kernelkite-workloads");
        assert!(status.success(), "building kk-workload failed");
    }
    bin
}

/// Run `cmd` to its end; its output, after asserting it succeeded (its stderr and `what`
/// in the message when not).
pub fn output_ok(what: &str, cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A workload that printed `ready <pid>` and waits for the go line.
pub struct GatedWorkload {
    pub child: Child,
    pub pid: i32,
    stdout: BufReader<ChildStdout>,
}

impl Drop for GatedWorkload {
    /// A test that failed must not leave its workload running (some spin for minutes).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GatedWorkload {
    pub fn spawn(args: &[&str]) -> GatedWorkload {
        let mut child = Command::new(workload_bin())
            .args(args)
            .arg("--wait-stdin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn kk-workload");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read ready line");
        let pid = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("workload did not print `ready <pid>`: {line:?}"));
        GatedWorkload { child, pid, stdout }
    }

    /// Let the measured part start.
    pub fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next non-empty line on the workload's stdout, parsed as its JSON result
    /// (for workloads that print it and keep running: `cpu_stress --linger`).
    pub fn read_result(&mut self) -> serde_json::Value {
        let mut line = String::new();
        while line.trim().is_empty() {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap_or(0) > 0,
                "workload closed stdout without a result"
            );
        }
        serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("workload result {line:?}: {e}"))
    }

    /// Wait for a workload whose result was already read ([`GatedWorkload::read_result`]).
    pub fn finish_silently(mut self) {
        let mut sink = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stdout, &mut sink);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "workload failed: {status}");
    }

    /// Wait for the workload and return its JSON result line.
    pub fn finish(mut self) -> serde_json::Value {
        let mut last = String::new();
        let mut line = String::new();
        while self.stdout.read_line(&mut line).unwrap_or(0) > 0 {
            if !line.trim().is_empty() {
                last = line.trim().to_string();
            }
            line.clear();
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "workload failed: {status}");
        serde_json::from_str(&last).unwrap_or_else(|e| panic!("workload result {last:?}: {e}"))
    }
}

/// A running `kernelkite trace` whose hooks are live.
pub struct RunningTrace {
    pub child: Child,
    pub bundle_path: PathBuf,
    stderr_lines: mpsc::Receiver<String>,
    pub stderr: Vec<String>,
    _dir: tempfile::TempDir,
}

/// Under `KERNELKITE_HOOKS=classic` (CI runs the eBPF tests once more so), the trace
/// must say it attached classic tracepoints: a run that silently used tp_btf would
/// prove nothing about the fallback.
pub fn assert_hook_kind(stderr: &[String]) {
    if std::env::var("KERNELKITE_HOOKS").as_deref() == Ok("classic") {
        assert!(
            stderr.iter().any(|l| l.contains("classic tracepoints")),
            "KERNELKITE_HOOKS=classic but the trace did not say so: {stderr:?}"
        );
    }
}

/// Whether this test run forces classic tracepoints (`KERNELKITE_HOOKS=classic`).
pub fn classic_hooks() -> bool {
    std::env::var("KERNELKITE_HOOKS").as_deref() == Ok("classic")
}

/// For a test of `--stacks`, which needs BTF tracepoints: in the classic-hook pass (a
/// kernel without BTF) what there is to check is that `kernelkite SUBCOMMAND --stacks`
/// refuses with the one line that says why, rather than trace without stacks. `true`
/// when that was checked (the test then ends); `false` outside the classic pass.
pub fn stacks_refused_under_classic(subcommand: &str) -> bool {
    if !classic_hooks() {
        return false;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(kernelkite_bin());
    cmd.arg(subcommand);
    if subcommand == "agent" {
        cmd.args(["--listen", "127.0.0.1:0"]);
    } else {
        cmd.arg("-o").arg(dir.path().join("refused.json"));
    }
    let mut child = cmd
        .args(["--pid", &std::process::id().to_string(), "--stacks"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kernelkite");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{subcommand} --stacks on classic tracepoints still runs after 30 s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{subcommand} --stacks on classic tracepoints succeeded: {stderr}"
    );
    let why = "--stacks needs BTF-enabled tracepoints";
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(why)).collect();
    assert_eq!(lines.len(), 1, "{subcommand} --stacks, classic: {stderr}");
    true
}

/// Host-wide ns that clock-based on_cpu can hold beyond the kernel's accounted runtime:
/// steal, irq and softirq of every CPU (the aggregate `cpu` line of /proc/stat, in
/// USER_HZ ticks). Classic tracepoints time on-CPU intervals with the clock, so a
/// test compares their excess over rusage with this delta taken around the run.
pub fn host_steal_irq_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    let ticks = cpu[5] + cpu[6] + cpu[7]; // irq, softirq, steal
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    ticks * 1_000_000_000 / hz
}

/// Two busy loops beside the workload, so its threads wait for CPUs and (on a VM)
/// lose time to the hypervisor; killed when dropped.
pub struct CpuHogs(Vec<Child>);

impl CpuHogs {
    pub fn start() -> CpuHogs {
        CpuHogs(
            (0..2)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// No event of the traced threads lost. Exact, also on a busy machine with other
/// tracers: events lost count only what concerned the traced threads (the kernel's
/// skipped program runs, which can concern any task, are reported apart).
pub fn assert_events_lost_ok(lost: Option<u64>) {
    assert_eq!(lost, Some(0), "events lost");
}

impl RunningTrace {
    /// Start tracing `pids` and wait until the hooks are live.
    pub fn start(pids: &[i32], extra: &[&str]) -> RunningTrace {
        RunningTrace::start_env(pids, extra, &[])
    }

    /// [`RunningTrace::start`] with `env` set for kernelkite.
    pub fn start_env(pids: &[i32], extra: &[&str], env: &[(&str, &str)]) -> RunningTrace {
        let dir = tempfile::tempdir().unwrap();
        let bundle_path = dir.path().join("trace.bundle.json");
        let mut cmd = Command::new(kernelkite_bin());
        cmd.arg("trace");
        for p in pids {
            cmd.args(["--pid", &p.to_string()]);
        }
        cmd.args(["--interval-ms", "50", "-o"])
            .arg(&bundle_path)
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // As from a terminal: SIGHUP at its default, even when the tests themselves run
        // under nohup (which a trace honours by ignoring hangups).
        // SAFETY: signal() is async-signal-safe; it only changes this child's disposition.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn kernelkite trace");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                for part in line.split('\r') {
                    let _ = tx.send(part.to_string());
                }
            }
        });
        let mut trace = RunningTrace {
            child,
            bundle_path,
            stderr_lines: rx,
            stderr: Vec::new(),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match trace.stderr_lines.recv_timeout(left) {
                Ok(line) => {
                    let live = line.contains("hooks live");
                    trace.stderr.push(line);
                    if live {
                        assert_hook_kind(&trace.stderr);
                        return trace;
                    }
                }
                Err(_) => {
                    let _ = trace.child.kill();
                    let out = trace.child.wait_with_output().unwrap();
                    panic!(
                        "trace never went live; stderr: {:?} stdout: {}",
                        trace.stderr,
                        String::from_utf8_lossy(&out.stdout)
                    );
                }
            }
        }
    }

    /// Wait for the trace to stop by itself (targets exited) and load its bundle.
    pub fn finish(mut self) -> Traced {
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("trace did not stop after its targets exited");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stdout = String::new();
        if let Some(out) = self.child.stdout.as_mut() {
            std::io::Read::read_to_string(out, &mut stdout).unwrap();
        }
        while let Ok(line) = self.stderr_lines.recv_timeout(Duration::from_millis(500)) {
            self.stderr.push(line);
        }
        assert!(
            status.success(),
            "trace failed: {status}; stderr {:?}",
            self.stderr
        );
        let bundle = load_bundle(&self.bundle_path).expect("trace bundle loads");
        let bundle_bytes = std::fs::read(&self.bundle_path).expect("trace bundle reads");
        let analysis = analyze(&bundle);
        Traced {
            bundle,
            bundle_bytes,
            analysis,
            stdout,
            stderr: self.stderr,
        }
    }
}

pub struct Traced {
    pub bundle: Bundle,
    /// The bundle file as written.
    pub bundle_bytes: Vec<u8>,
    pub analysis: Analysis,
    pub stdout: String,
    pub stderr: Vec<String>,
}

/// Run `args` behind the gate under `kernelkite trace` and return both results.
pub fn trace_workload(args: &[&str], extra: &[&str]) -> (Traced, serde_json::Value) {
    trace_workload_env(args, extra, &[])
}

/// [`trace_workload`] with `env` set for kernelkite.
pub fn trace_workload_env(
    args: &[&str],
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Traced, serde_json::Value) {
    let mut w = GatedWorkload::spawn(args);
    let trace = RunningTrace::start_env(&[w.pid], extra, env);
    w.go();
    let result = w.finish();
    let traced = trace.finish();
    (traced, result)
}

impl Traced {
    /// Every thread's six classes add up to its wall time inside the window, measured
    /// independently: from the session start (or its fork) to its exit event.
    pub fn assert_classes_sum_to_wall(&self) {
        use kernelkite::model::LifecycleKind;
        let mut checked = 0;
        for t in &self.analysis.threads {
            let exit = self
                .bundle
                .lifecycle
                .iter()
                .find(|e| e.kind == LifecycleKind::Exit && e.tid == t.tid)
                .map(|e| e.t_ns);
            let fork = self
                .bundle
                .lifecycle
                .iter()
                .find(|e| e.kind == LifecycleKind::Fork && e.tid == t.tid)
                .map(|e| e.t_ns);
            let Some(end) = exit else { continue };
            // Traced from its fork, or (`--cgroup`: entering at its exec) its exec, or
            // else from the start.
            let at_start = (self.bundle.frames.first())
                .is_some_and(|f| f.processes.iter().any(|p| p.pid == t.pid));
            let exec = (self.bundle.lifecycle.iter())
                .find(|e| e.kind == LifecycleKind::Exec && e.tid == t.tid)
                .map(|e| e.t_ns)
                .filter(|_| !at_start);
            let start = fork.or(exec).unwrap_or(0);
            let wall = end - start;
            let sum = t.classes.total_ns();
            let diff = sum.abs_diff(wall) as f64;
            assert!(
                diff <= wall as f64 * 0.01 + 200_000.0,
                "tid {}: classes sum to {sum} ns but the thread lived {wall} ns in the window: {:?}; its events: {:?}",
                t.tid,
                t.classes,
                self.bundle.lifecycle.iter().filter(|e| e.tid == t.tid).collect::<Vec<_>>()
            );
            checked += 1;
        }
        assert!(checked > 0, "no thread had an exit event to check against");
    }

    pub fn assert_no_events_lost(&self) {
        assert_events_lost_ok(self.bundle.events_lost);
    }

    /// Time the gated workload spent in its gate (the `poll` on stdin that began
    /// before the trace attached and returned at `go`): syscall_blocked time that is
    /// not the measured part, and grows with how long attach-to-go takes on a busy
    /// machine.
    pub fn gate_wait_ns(&self) -> u64 {
        self.analysis
            .syscalls
            .iter()
            .filter(|s| {
                s.name == "poll" && s.state == kernelkite::analysis::SyscallState::BeganBeforeStart
            })
            .map(|s| s.total_ns)
            .sum()
    }

    /// Calls of `name` counted across the traced processes.
    pub fn syscall_count(&self, name: &str) -> u64 {
        self.analysis
            .syscalls
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.count)
            .sum()
    }
}

/// The BPF programs, links and maps a process holds, from its fdinfo.
pub fn bpf_ids_held_by(pid: u32) -> Vec<(String, u32)> {
    let mut ids = Vec::new();
    let dir = format!("/proc/{pid}/fdinfo");
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in info.lines() {
            for kind in ["prog_id", "link_id", "map_id"] {
                if let Some(v) = line.strip_prefix(kind).and_then(|r| r.strip_prefix(':')) {
                    if let Ok(id) = v.trim().parse() {
                        ids.push((kind.to_string(), id));
                    }
                }
            }
        }
    }
    ids.sort();
    ids.dedup();
    ids
}

/// Every program, link and map in `ids` (from [`bpf_ids_held_by`] of a process that has
/// exited) is gone from the kernel within 5 s (`bpftool ... show id N` fails). Without
/// bpftool the check is skipped, except under CI (`skip::required`).
pub fn assert_bpf_ids_gone(ids: &[(String, u32)]) {
    for (kind, id) in ids {
        let what = match kind.as_str() {
            "prog_id" => "prog",
            "link_id" => "link",
            _ => "map",
        };
        // The kernel frees maps from a work queue: give it a moment.
        let mut gone = false;
        for _ in 0..50 {
            match Command::new("bpftool")
                .args([what, "show", "id", &id.to_string()])
                .output()
            {
                Ok(o) if !o.status.success() => {
                    gone = true;
                    break;
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => {
                    let why = format!("the leak check needs bpftool: {e}");
                    return skip::required("assert_bpf_ids_gone", &why);
                }
            }
        }
        assert!(
            gone,
            "{what} {id} is still loaded 5 s after its holder exited"
        );
    }
}

/// The time of `class` in user stacks kernelkite marked truncated, when it also reports
/// stack copies it could not send (`stack_copies_lost`: over the copy rate bound, or
/// the ring buffer half full because its reader fell behind on a loaded machine). Those
/// stacks are frame-pointer walks that say they are short, and their time is counted
/// as lost copies; 0 when every copy was sent.
pub fn time_in_stacks_of_lost_copies(bundle: &Bundle, class: &str) -> u64 {
    let Some(profile) = bundle.stacks.as_ref() else {
        return 0;
    };
    if profile.stack_copies_lost == 0 {
        return 0;
    }
    (profile.samples.iter())
        .filter(|s| s.class == class && s.user_stack.is_some_and(|u| profile.is_truncated(u)))
        .map(|s| s.total_ns)
        .sum()
}
