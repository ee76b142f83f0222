//! Real-kernel tests of `trace --cgroup` and `--container`: the selection happens in the
//! kernel (processes already in the cgroup, forked there, or exec'd there after attach,
//! and none outside it), every process carries its cgroup and namespace pid, and the
//! traced cgroup's throttling and pressure are read. Each test makes its own cgroup v2
//! directory (and, where the cpu controller is bound to cgroup v1, a v1 cpu cgroup) and
//! removes it. See tests/support/ebpf.rs.

#[path = "support/ebpf.rs"]
mod support;
#[path = "support/tmux.rs"]
mod tmux;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kernelkite::analysis::ProcessRow;
use kernelkite_common::LatencyClass;
use support::*;

/// Where cgroup2 is mounted (this machine: /sys/fs/cgroup/unified).
fn v2_mount() -> PathBuf {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            if right.split(' ').next()? != "cgroup2" {
                return None;
            }
            Some(PathBuf::from(left.split(' ').nth(4)?))
        })
        .expect("a cgroup2 mount")
}

/// A cgroup directory made for one test, emptied and removed when dropped.
struct TestCgroup {
    dir: PathBuf,
}

impl TestCgroup {
    fn new(root: &Path, name: &str) -> TestCgroup {
        let dir = root.join(format!("kk-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        TestCgroup { dir }
    }

    fn procs(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    }

    /// Kill what is left inside and remove it (and any child cgroup), waiting for the
    /// kernel to let go of exited tasks.
    fn remove(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            for pid in self.procs() {
                // SAFETY: kill() has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            if let Ok(entries) = std::fs::read_dir(&self.dir) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            if Instant::now() > deadline {
                panic!("cannot remove {}", self.dir.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if self.dir.exists() {
            let _ = std::panic::catch_unwind(|| self.remove());
        }
    }
}

/// `cmd` started inside `cgroups` (each a cgroup directory, v2 or v1): the child moves
/// itself into each before it execs, as a container runtime does.
fn spawn_in(cgroups: &[&Path], cmd: &mut Command) -> Child {
    let files: Vec<std::ffi::CString> = cgroups
        .iter()
        .map(|d| {
            let procs = if d.join("cgroup.procs").exists() {
                d.join("cgroup.procs")
            } else {
                d.join("tasks")
            };
            std::ffi::CString::new(procs.as_os_str().as_encoded_bytes()).unwrap()
        })
        .collect();
    // SAFETY: the closure only calls async-signal-safe functions (getpid, open, write,
    // close) on memory made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let mut digits = [0u8; 12];
            let mut n = libc::getpid() as u32;
            let mut at = digits.len();
            loop {
                at -= 1;
                digits[at] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            for file in &files {
                let fd = libc::open(file.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let wrote = libc::write(fd, digits[at..].as_ptr().cast(), digits.len() - at);
                libc::close(fd);
                if wrote < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn().expect("spawn in cgroup")
}

fn wait_ok(mut child: Child, what: &str) {
    let status = child.wait().unwrap();
    assert!(status.success(), "{what}: {status}");
}

/// A shell that waits for a line on its stdin, then runs `script`.
fn held_shell(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("read go; {script}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    cmd
}

fn release(child: &mut Child) {
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
}

fn calls(traced: &Traced, pid: i32, name: &str) -> u64 {
    (traced.bundle.syscalls.iter())
        .filter(|h| h.pid == pid && h.name == name)
        .map(|h| h.count)
        .sum()
}

/// `kernelkite summary` of the trace's bundle.
fn summary_of(traced: &Traced) -> String {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    std::fs::write(&bundle, &traced.bundle_bytes).unwrap();
    let out = output_ok(
        "summary",
        Command::new(kernelkite_bin()).arg("summary").arg(&bundle),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn cgroup_of(p: &ProcessRow) -> Option<&str> {
    p.placement.as_ref().and_then(|pl| pl.cgroup.as_deref())
}

#[test]
fn trace_cgroup_sees_exactly_the_processes_inside_including_later_ones() {
    let Some(_serial) = ebpf_ready("trace_cgroup_sees_exactly_the_processes_inside") else {
        return;
    };
    let cg = TestCgroup::new(&v2_mount(), "select");
    let path_in_hierarchy = format!("/{}", cg.dir.file_name().unwrap().to_str().unwrap());
    // Inside before attach; its child (dd) forks after attach.
    let mut inside = spawn_in(
        &[&cg.dir],
        &mut held_shell("dd if=/dev/zero of=/dev/null bs=4k count=1000 2>/dev/null"),
    );
    // Outside, doing the same at the same time: none of it may be traced.
    let mut outside = held_shell("dd if=/dev/zero of=/dev/null bs=4k count=1000 2>/dev/null")
        .spawn()
        .unwrap();
    assert_eq!(cg.procs(), vec![inside.id() as i32]);
    let trace = RunningTrace::start(&[], &["--cgroup", cg.dir.to_str().unwrap()]);
    release(&mut inside);
    release(&mut outside);
    // Enters the cgroup after attach without being forked by anything in it (as a
    // runtime starts a container's command), in a pid namespace of its own.
    let late = spawn_in(
        &[&cg.dir],
        Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child"])
            .arg(workload_bin())
            .args(["read_loop", "--count", "5000"])
            .stdout(Stdio::null()),
    );
    let (inside_pid, outside_pid, late_pid) =
        (inside.id() as i32, outside.id() as i32, late.id() as i32);
    wait_ok(inside, "inside shell");
    wait_ok(outside, "outside shell");
    wait_ok(late, "unshare read_loop");
    // Removing the cgroup ends the trace.
    cg.remove();
    let traced = trace.finish();
    assert!(
        traced
            .stderr
            .iter()
            .any(|l| l.contains("the cgroup was removed")),
        "{:?}",
        traced.stderr
    );
    let traced_cgroup = traced.bundle.traced_cgroup.as_ref().expect("traced cgroup");
    assert_eq!(traced_cgroup.path, path_in_hierarchy);
    let procs = &traced.analysis.processes;
    let pids: Vec<(i32, i32, &str)> = procs
        .iter()
        .map(|p| (p.pid, p.ppid, p.comm.as_str()))
        .collect();
    // Nothing outside: not the outside shell, not its dd.
    assert!(
        !procs
            .iter()
            .any(|p| p.pid == outside_pid || p.ppid == outside_pid),
        "outside processes traced: {pids:?}"
    );
    // The inside shell, its dd (forked after attach) with every write counted.
    let dd = procs
        .iter()
        .find(|p| p.ppid == inside_pid && p.comm == "dd")
        .unwrap_or_else(|| panic!("no dd child of {inside_pid}: {pids:?}"));
    assert!(calls(&traced, dd.pid, "write") >= 1000, "{pids:?}");
    assert!(procs.iter().any(|p| p.pid == inside_pid), "{pids:?}");
    // The late one: unshare, and its child, pid 1 of its namespace, with all 5000 reads.
    let workload = procs
        .iter()
        .find(|p| p.ppid == late_pid)
        .unwrap_or_else(|| panic!("no child of unshare {late_pid}: {pids:?}"));
    assert_eq!(
        workload.placement.as_ref().and_then(|p| p.ns_pid),
        Some(1),
        "{:?}",
        workload.placement
    );
    // Traced from its exec: the dynamic loader's reads of its libraries come first.
    let reads = calls(&traced, workload.pid, "read");
    assert!((5000..5050).contains(&reads), "{reads} reads");
    // Every traced process is placed in the cgroup.
    for p in procs.iter().filter(|p| p.frames > 0) {
        assert_eq!(
            cgroup_of(p),
            Some(path_in_hierarchy.as_str()),
            "{}: {:?}",
            p.pid,
            p.placement
        );
    }
    traced.assert_classes_sum_to_wall();
    // The reports say it: the summary's header and its namespace pid column.
    let text = summary_of(&traced);
    assert!(text.contains(&path_in_hierarchy), "{text}");
    assert!(text.contains("ns pid"), "{text}");
}

/// The v1 cpu controller's mount point, where this host binds it there.
fn v1_cpu_mount() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut right = right.split(' ');
        if right.next()? != "cgroup" || !right.nth(1)?.split(',').any(|o| o == "cpu") {
            return None;
        }
        Some(PathBuf::from(left.split(' ').nth(4)?))
    })
}

#[test]
fn a_throttled_cgroup_shows_throttling_pressure_and_runqueue() {
    let Some(_serial) = ebpf_ready("a_throttled_cgroup_shows_throttling") else {
        return;
    };
    let cg = TestCgroup::new(&v2_mount(), "throttle");
    // 10% of one CPU: cpu.max in v2 where the cpu controller is there, else v1's quota.
    let v1 = if cg.dir.join("cpu.max").exists() {
        std::fs::write(cg.dir.join("cpu.max"), "10000 100000").unwrap();
        None
    } else {
        let v1 = TestCgroup::new(&v1_cpu_mount().expect("a cpu controller"), "throttle");
        std::fs::write(v1.dir.join("cpu.cfs_period_us"), "100000").unwrap();
        std::fs::write(v1.dir.join("cpu.cfs_quota_us"), "10000").unwrap();
        Some(v1)
    };
    let mut cgroups = vec![cg.dir.as_path()];
    cgroups.extend(v1.as_ref().map(|v| v.dir.as_path()));
    let trace = RunningTrace::start(&[], &["--cgroup", cg.dir.to_str().unwrap()]);
    let spinner = spawn_in(
        &cgroups,
        Command::new(workload_bin())
            .args(["cpu_stress", "--threads", "1", "--seconds", "2"])
            .stdout(Stdio::null()),
    );
    let spinner_pid = spinner.id() as i32;
    wait_ok(spinner, "cpu_stress");
    cg.remove();
    let traced = trace.finish();
    let c = traced.analysis.cgroup.as_ref().expect("cgroup counters");
    assert!(c.cpu_throttled_periods.unwrap_or(0) > 5, "{c:?}");
    assert!(c.cpu_throttled_ns.unwrap_or(0) > 500_000_000, "{c:?}");
    assert!(c.cpu_some_ns.unwrap_or(0) > 0, "{c:?}");
    // The spinning thread mostly waits for its next period: runqueue, not on_cpu.
    let thread = (traced.analysis.threads.iter())
        .find(|t| t.pid == spinner_pid && t.tid != spinner_pid)
        .expect("the spinning thread");
    let total = thread.classes.total_ns() as f64;
    let runqueue = thread.classes.get(LatencyClass::Runqueue) as f64 / total;
    assert!(
        runqueue > 0.5,
        "runqueue share {runqueue:.2}: {:?}",
        thread.classes
    );
    let text = summary_of(&traced);
    assert!(text.contains("cgroup throttled"), "{text}");
    assert!(text.contains("cgroup pressure"), "{text}");
}

#[test]
fn container_ids_resolve_by_unique_prefix_and_bad_selections_say_what_to_do() {
    let Some(_serial) = ebpf_ready("container_ids_resolve_by_unique_prefix") else {
        return;
    };
    let cg = TestCgroup::new(&v2_mount(), "containers");
    // Two docker-shaped (systemd driver) container cgroups sharing a prefix.
    let a = format!("abc1{}", "0".repeat(60));
    let b = format!("abd2{}", "0".repeat(60));
    for id in [&a, &b] {
        std::fs::create_dir(cg.dir.join(format!("docker-{id}.scope"))).unwrap();
    }
    let trace = |args: &[&str]| {
        Command::new(kernelkite_bin())
            .arg("trace")
            .args(args)
            .args(["--duration", "0.3"])
            .output()
            .unwrap()
    };
    let one_line_error = |out: &std::process::Output, needle: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(needle), "{err}");
    };
    one_line_error(&trace(&["--container", "ab"]), "2 containers");
    one_line_error(&trace(&["--container", "fedcba9"]), "no container");
    one_line_error(
        &trace(&["--cgroup", "/sys/fs/cgroup/unified/kk-no-such-cgroup"]),
        "no cgroup",
    );
    // A unique prefix traces that container's cgroup (empty: the trace runs out its
    // duration).
    let out = trace(&["--container", "abc"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("docker-{a}.scope")), "{err}");
}

/// `top --cgroup` in a real terminal: a workload that execs into the cgroup after top
/// started gets its row (lock_wait), and `g` puts it under its cgroup's row.
#[test]
fn top_cgroup_shows_a_process_that_enters_later_and_g_groups_it() {
    let test = "top_cgroup_shows_a_process_that_enters_later";
    let Some(_serial) = ebpf_ready(test) else {
        return;
    };
    if !tmux::tmux_ready(test) {
        return;
    }
    let cg = TestCgroup::new(&v2_mount(), "top");
    let name = cg.dir.file_name().unwrap().to_string_lossy().into_owned();
    let cmd = format!(
        "{} --backend ebpf top --cgroup {} --refresh 0.5",
        tmux::shell_quote(&kernelkite_bin().to_string_lossy()),
        tmux::shell_quote(&cg.dir.to_string_lossy())
    );
    let t = tmux::Tmux::start(test, &cmd, 160, 40);
    let wait = Duration::from_secs(30);
    let s = t.wait_for(wait, |s| s.contains("hooks ·"));
    assert!(s.contains(&format!("cgroup /{name}")), "{s}");
    let workload = spawn_in(
        &[&cg.dir],
        Command::new(workload_bin())
            .args(["futex_stress", "--threads", "4", "--seconds", "60"])
            .stdout(Stdio::null()),
    );
    let mut workload = KillOnDrop(workload);
    let pid = workload.0.id().to_string();
    let row = |s: &str| {
        s.lines()
            .any(|l| l.split_whitespace().next() == Some(pid.as_str()) && l.contains("lock_wait"))
    };
    let s = t.wait_for(wait, row);
    assert!(row(&s), "{s}");
    t.keys(&["g"]);
    // The group's row: its short name, its full path and dominant class at the end.
    let header = |s: &str| {
        s.lines().any(|l| {
            l.trim_start().starts_with("■ kk-test-top")
                && l.contains(&format!("/{name} · lock_wait"))
        })
    };
    let s = t.wait_for(wait, |s| header(s) && row(s));
    assert!(header(&s) && row(&s), "{s}");
    t.keys(&["q"]);
    let s = t.wait_for(wait, |s| s.contains("EXIT="));
    assert!(s.contains("EXIT=0"), "{s}");
    let _ = workload.0.kill();
    let _ = workload.0.wait();
}

/// A child killed and reaped when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
