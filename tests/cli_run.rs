//! End-to-end tests of `kernelkite run` on real process trees: the sampled tree and its
//! ppid chain, orphans reparented to kernelkite, exit status forwarding, exact rusage
//! against independent measurements, signal forwarding, the frame cap, and bad input.

#![cfg(target_os = "linux")]

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::kk_path;
#[path = "support/skip.rs"]
mod skip;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use kernelkite::model::{load_bundle, Backend, Bundle};

/// kernelkite pinned to the /proc sampler (these tests are about it; as root `auto`
/// would pick eBPF, which tests/ebpf_run.rs covers), for `run`: the reports have no
/// --backend and take `cli_support::kk()`.
fn kk() -> Command {
    let mut c = cli_support::kk();
    c.args(PROC);
    c
}

const PROC: [&str; 2] = ["--backend", "proc"];

/// `kk()` with what sudo sets for `sudo kernelkite ...` run by uid 65534 (nobody).
fn kk_under_sudo_by_nobody() -> Command {
    let mut c = kk();
    c.env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .env("SUDO_USER", "nobody");
    c
}

/// Every (pid -> ppid) the bundle saw; a pid whose ppid changed (reparenting) keeps the
/// last one.
fn last_ppids(bundle: &Bundle) -> BTreeMap<i32, i32> {
    let mut out = BTreeMap::new();
    for f in &bundle.frames {
        for p in &f.processes {
            out.insert(p.pid, p.ppid);
        }
    }
    out
}

fn first_ppids(bundle: &Bundle) -> BTreeMap<i32, i32> {
    let mut out = BTreeMap::new();
    for f in &bundle.frames {
        for p in &f.processes {
            out.entry(p.pid).or_insert(p.ppid);
        }
    }
    out
}

/// A shell script that writes "<level> <pid> <ppid>" to OUT, burns a little CPU, starts
/// two copies of itself one level down (until level 2) and waits for them.
const TREE_SH: &str = r#"
level=$1; out=$2
echo "$level $$ $PPID" >> "$out"
i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done
if [ "$level" -lt 2 ]; then
  sh "$0" $((level + 1)) "$out" &
  sh "$0" $((level + 1)) "$out" &
fi
sleep 0.5
wait
"#;

#[test]
fn samples_children_and_grandchildren_with_their_ppid_chain() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tree.sh");
    std::fs::write(&script, TREE_SH).unwrap();
    let record = dir.path().join("pids.txt");
    let bundle_path = dir.path().join("tree.json");
    let out = kk()
        .args(["--interval-ms", "50", "--label", "tree test", "run"])
        .arg(&bundle_path)
        .arg("--")
        .arg("sh")
        .arg(&script)
        .arg("0")
        .arg(&record)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("kernelkite: wrote {}", bundle_path.display()))
            && stderr.contains("proc backend"),
        "{stderr}"
    );

    // level -> [(pid, ppid)] as the processes themselves saw it.
    let mut by_level: BTreeMap<u32, Vec<(i32, i32)>> = BTreeMap::new();
    for line in std::fs::read_to_string(&record).unwrap().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        by_level
            .entry(f[0].parse().unwrap())
            .or_default()
            .push((f[1].parse().unwrap(), f[2].parse().unwrap()));
    }
    assert_eq!(by_level[&0].len(), 1);
    assert_eq!(by_level[&1].len(), 2);
    assert_eq!(by_level[&2].len(), 4);

    let bundle = load_bundle(&bundle_path).unwrap();
    assert_eq!(bundle.backend, Backend::Proc);
    assert_eq!(bundle.label.as_deref(), Some("tree test"));
    assert_eq!(bundle.interval_ms, 50);
    assert_eq!(bundle.events_lost, None);
    let root = by_level[&0][0].0;
    assert_eq!(bundle.root_pids, [root]);
    let launched = bundle.launched.as_ref().unwrap();
    assert_eq!(launched.pid, root);
    assert_eq!(launched.argv[0], "sh");
    assert_eq!((launched.exit_code, launched.signal), (Some(0), None));
    let rusage = launched.rusage.unwrap();
    assert!(rusage.user_us + rusage.system_us > 0, "{rusage:?}");
    assert!(rusage.max_rss_kib > 0);

    // Every process of the tree was sampled, with the parent it reported itself.
    let seen = first_ppids(&bundle);
    for (level, procs) in &by_level {
        for &(pid, ppid) in procs {
            assert_eq!(
                seen.get(&pid),
                Some(&ppid),
                "level {level} pid {pid}: {seen:?}"
            );
        }
    }
    // The chain: grandchildren -> children -> root.
    let children: BTreeSet<i32> = by_level[&1].iter().map(|p| p.0).collect();
    assert!(by_level[&1].iter().all(|&(_, ppid)| ppid == root));
    assert!(by_level[&2].iter().all(|(_, ppid)| children.contains(ppid)));
    // Nothing outside the tree: exactly the 7 shells (plus their `sleep`s).
    let ours: BTreeSet<i32> = by_level.values().flatten().map(|p| p.0).collect();
    for (pid, ppid) in &seen {
        assert!(
            ours.contains(pid) || ours.contains(ppid),
            "stranger pid {pid} (ppid {ppid})"
        );
    }
    // Frames are in time order and carry thread samples.
    assert!(bundle.frames.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    let grandchild = by_level[&2][0].0;
    let sample = bundle
        .frames
        .iter()
        .flat_map(|f| &f.processes)
        .find(|p| p.pid == grandchild)
        .unwrap();
    assert_eq!(sample.comm, "sh");
    assert_eq!(sample.threads.len(), 1);
    assert_eq!(sample.threads[0].tid, grandchild);
    assert!(sample.threads[0].schedstat.is_some());
    assert_eq!(bundle.frame_cap.max_frames, 100_000);
    assert_eq!(bundle.frame_cap.frames_dropped, 0);
}

#[test]
fn orphans_are_reparented_sampled_and_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("orphan-done");
    let bundle_path = dir.path().join("orphan.json");
    // The root exits with 3 after 0.2 s; its background child outlives it by ~0.6 s.
    let script = format!(
        "sh -c 'sleep 0.8; echo $$ > {}' & sleep 0.2; exit 3",
        done.display()
    );
    let started = Instant::now();
    kk().args(["--interval-ms", "50", "run"])
        .arg(&bundle_path)
        .args(["--", "sh", "-c", &script])
        .assert()
        .code(3);
    // kernelkite returned only after the orphan finished.
    assert!(done.exists(), "kernelkite exited before the orphan");
    assert!(started.elapsed() >= Duration::from_millis(700));
    let orphan: i32 = std::fs::read_to_string(&done)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let bundle = load_bundle(&bundle_path).unwrap();
    let root = bundle.root_pids[0];
    let kernelkite_pid = first_ppids(&bundle)[&root];
    assert_eq!(
        first_ppids(&bundle)[&orphan],
        root,
        "first seen as the root's child"
    );
    assert_eq!(
        last_ppids(&bundle)[&orphan],
        kernelkite_pid,
        "then reparented to kernelkite, the subreaper"
    );
    let launched = bundle.launched.unwrap();
    assert_eq!((launched.exit_code, launched.signal), (Some(3), None));
    // Sampled after the root was gone.
    let root_gone = bundle
        .frames
        .iter()
        .position(|f| f.processes.iter().all(|p| p.pid != root))
        .unwrap();
    assert!(bundle.frames[root_gone..]
        .iter()
        .any(|f| f.processes.iter().any(|p| p.pid == orphan)));
}

#[test]
fn exit_status_is_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("exit.json");
    kk().arg("run")
        .arg(&bundle_path)
        .args(["--", "sh", "-c", "exit 7"])
        .assert()
        .code(7);
    let launched = load_bundle(&bundle_path).unwrap().launched.unwrap();
    assert_eq!((launched.exit_code, launched.signal), (Some(7), None));
    assert!(launched.rusage.is_some());

    // Killed by a signal: 128 + N, like a shell.
    kk().arg("run")
        .arg(&bundle_path)
        .args(["--", "sh", "-c", "kill -TERM $$"])
        .assert()
        .code(128 + 15);
    let launched = load_bundle(&bundle_path).unwrap().launched.unwrap();
    assert_eq!((launched.exit_code, launched.signal), (None, Some(15)));
}

/// 300 short processes, CPU burners in short-lived children, and orphans that burn
/// after their parent (and the root) exited: the work the sampler can't see between
/// ticks, and work only a subreaper that waits for orphans accounts for.
const MANY_SHORT: &str = r#"
burn() { i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; }
for i in $(seq 300); do /bin/true; done
for i in $(seq 8); do ( burn ); done
for i in $(seq 6); do ( (sleep 0.3; burn) & ); done
burn
"#;

/// Total user+system CPU (µs) the bundle's rusage reports.
fn bundle_cpu_us(path: &Path) -> u64 {
    let ru = load_bundle(path).unwrap().launched.unwrap().rusage.unwrap();
    ru.user_us + ru.system_us
}

/// kernelkite exec'd by a process that had reaped a CPU-heavy child before (as `cargo
/// run -- run ...` does after compiling): the bundle's rusage is the command tree's only.
/// `getrusage(RUSAGE_CHILDREN)` survives exec, so it once reported the compile's CPU too.
#[test]
fn rusage_leaves_out_what_the_exec_ing_parent_had_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("after-exec.json");
    // The subshell burns CPU and is reaped by sh, which then becomes kernelkite.
    let script = format!(
        "(i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done); exec {} {} run {} -- true",
        kk_path().display(),
        PROC.join(" "),
        bundle_path.display()
    );
    let out = StdCommand::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours_us = bundle_cpu_us(&bundle_path);
    // `true` takes well under 50 ms; the subshell's loop takes several hundred.
    assert!(
        ours_us < 50_000,
        "the bundle's rusage holds {ours_us} µs of CPU for `true`: the parent's reaped child leaked in"
    );
}

#[test]
fn rusage_matches_usr_bin_time() {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        return skip::required(
            "rusage_matches_usr_bin_time",
            "/usr/bin/time is not installed (the `time` package)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("many.json");
    let times = dir.path().join("times.txt");
    // A long interval keeps kernelkite's own CPU (which `time` also counts) tiny. Exit
    // stops are off: serving them costs kernelkite CPU per process, which the control
    // run below (one process) would not measure (`cargo xtask bench` does).
    let status = StdCommand::new(time)
        .args(["-f", "%U %S", "-o"])
        .arg(&times)
        .arg(kk_path())
        .args(PROC)
        .args(["--interval-ms", "1000", "run", "--no-exit-stops"])
        .arg(&bundle_path)
        .args(["--", "sh", "-c", MANY_SHORT])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&times).unwrap();
    let f: Vec<f64> = text
        .split_whitespace()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("unexpected time output {text:?}"))
        })
        .collect();
    let time_us = ((f[0] + f[1]) * 1e6) as u64;
    let ours = bundle_cpu_us(&bundle_path);
    // `time` counts kernelkite's own CPU too (start-up, the samples, the bundle), so it
    // is the larger. That share is measured on its own, by the same command around a
    // command that does nothing, so a slow (debug, loaded) kernelkite is not taken for a
    // rusage error; beyond it, within 2% (and time's 10 ms resolution).
    let own_us = {
        let control = dir.path().join("control.json");
        let control_times = dir.path().join("control-times.txt");
        let status = StdCommand::new(time)
            .args(["-f", "%U %S", "-o"])
            .arg(&control_times)
            .arg(kk_path())
            .args(PROC)
            .args(["--interval-ms", "1000", "run"])
            .arg(&control)
            .args(["--", "true"])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let text = std::fs::read_to_string(&control_times).unwrap();
        let v: Vec<f64> = text
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        ((v[0] + v[1]) * 1e6) as u64
    };
    let tolerance = time_us / 50 + 20_000 + own_us;
    assert!(
        ours <= time_us + 20_000 && time_us - ours.min(time_us) <= tolerance,
        "bundle rusage {ours} us vs /usr/bin/time {time_us} us"
    );
    assert!(
        ours > 300_000,
        "the workload should burn well over 0.3 s, got {ours} us"
    );
}

/// What a separate subreaper parent measured around one `kernelkite` run.
struct ParentMeasurement {
    /// kernelkite's exit status (waitpid encoding).
    status: i32,
    /// kernelkite's own utime + stime, µs (from its stat while a zombie: one clock tick
    /// resolution).
    kernelkite_self_us: u64,
    /// `getrusage(RUSAGE_CHILDREN)` of the parent after it reaped kernelkite and every
    /// orphan that reached it: kernelkite, its tree, and anything kernelkite failed to
    /// adopt.
    all_children_us: u64,
}

/// Run kernelkite with `args` under a forked copy of this test process that is itself a
/// child subreaper: if kernelkite failed to adopt (or wait for) an orphan, the orphan
/// would be reaped here and show up in `all_children_us` but not in the bundle.
fn run_under_subreaper_parent(args: &[&str]) -> ParentMeasurement {
    use std::ffi::CString;
    // Everything the forked child touches is prepared here: after fork() in a
    // multi-threaded process it may only make async-signal-safe calls.
    let prog = CString::new(kk_path().to_str().unwrap()).unwrap();
    let c_args: Vec<CString> = std::iter::once(prog.clone())
        .chain(args.iter().map(|a| CString::new(*a).unwrap()))
        .collect();
    let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut fds = [0; 2];
    // SAFETY: plain libc calls; the child side only uses async-signal-safe ones.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        let helper = libc::fork();
        assert!(helper >= 0);
        if helper == 0 {
            libc::close(fds[0]);
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
            let kk = libc::fork();
            if kk == 0 {
                libc::execv(prog.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                kk as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            );
            // "/proc/<kk>/stat" without allocating.
            let mut path = [0u8; 32];
            let mut len = 0;
            for &b in b"/proc/" {
                path[len] = b;
                len += 1;
            }
            let mut digits = [0u8; 10];
            let (mut n, mut d) = (kk as u32, 0);
            loop {
                digits[d] = b'0' + (n % 10) as u8;
                d += 1;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            while d > 0 {
                d -= 1;
                path[len] = digits[d];
                len += 1;
            }
            for &b in b"/stat" {
                path[len] = b;
                len += 1;
            }
            let mut stat = [0u8; 1024];
            let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY);
            let len = libc::read(fd, stat.as_mut_ptr().cast(), stat.len()).max(0) as usize;
            libc::close(fd);
            let mut status = 0;
            let mut kk_status = 0;
            loop {
                let r = libc::wait4(-1, &mut status, 0, std::ptr::null_mut());
                if r == kk {
                    kk_status = status;
                }
                if r < 0 && *libc::__errno_location() != libc::EINTR {
                    break;
                }
            }
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
            let us = (ru.ru_utime.tv_sec * 1_000_000
                + ru.ru_utime.tv_usec
                + ru.ru_stime.tv_sec * 1_000_000
                + ru.ru_stime.tv_usec) as u64;
            let mut out = [0u8; 12 + 1024];
            out[..4].copy_from_slice(&kk_status.to_le_bytes());
            out[4..12].copy_from_slice(&us.to_le_bytes());
            out[12..12 + len].copy_from_slice(&stat[..len]);
            libc::write(fds[1], out.as_ptr().cast(), 12 + len);
            libc::_exit(0);
        }
        libc::close(fds[1]);
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = libc::read(fds[0], chunk.as_mut_ptr().cast(), chunk.len());
            if n <= 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n as usize]);
        }
        libc::close(fds[0]);
        let mut st = 0;
        assert_eq!(libc::waitpid(helper, &mut st, 0), helper);
        assert!(buf.len() > 12, "the measuring parent reported nothing");
        let stat = String::from_utf8_lossy(&buf[12..]).into_owned();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks = libc::sysconf(libc::_SC_CLK_TCK) as u64;
        let self_ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        ParentMeasurement {
            status: i32::from_le_bytes(buf[..4].try_into().unwrap()),
            kernelkite_self_us: self_ticks * 1_000_000 / ticks,
            all_children_us: u64::from_le_bytes(buf[4..12].try_into().unwrap()),
        }
    }
}

#[test]
fn rusage_matches_a_separate_subreaper_parent() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("many.json");
    let m = run_under_subreaper_parent(&[
        "--backend",
        "proc",
        "--interval-ms",
        "20",
        "run",
        bundle_path.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        MANY_SHORT,
    ]);
    assert!(
        libc::WIFEXITED(m.status) && libc::WEXITSTATUS(m.status) == 0,
        "status {}",
        m.status
    );
    let tree_us = m.all_children_us.saturating_sub(m.kernelkite_self_us);
    let ours = bundle_cpu_us(&bundle_path);
    // kernelkite's own CPU is known to one clock tick only.
    let tick_us = 1_000_000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let tolerance = tree_us / 50 + tick_us;
    assert!(
        ours.abs_diff(tree_us) <= tolerance,
        "bundle rusage {ours} us vs parent's {} us - kernelkite's own {} us = {tree_us} us",
        m.all_children_us,
        m.kernelkite_self_us
    );
    assert!(
        ours > 300_000,
        "the workload should burn well over 0.3 s, got {ours} us"
    );
}

/// Start `kernelkite run` on `cmd` and wait until kernelkite has a child running `comm`.
#[allow(
    clippy::zombie_processes,
    reason = "the caller waits for the returned child"
)]
fn start_and_wait_for(bundle: &Path, cmd: &[&str], comm: &str) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut kk = StdCommand::new(kk_path());
    kk.args(PROC)
        .args(["--interval-ms", "50", "run"])
        .arg(bundle)
        .arg("--")
        .args(cmd)
        .stderr(Stdio::piped());
    // A test run in the background has SIGINT ignored, which kernelkite rightly passes
    // on to the command; these tests are about a terminal's Ctrl-C.
    // SAFETY: signal() is async-signal-safe; it only changes this child's disposition.
    unsafe {
        kk.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = kk.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    loop {
        let started = std::fs::read_to_string(&children)
            .unwrap_or_default()
            .split_whitespace()
            .any(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
            });
        if started {
            return child;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{comm} never started under kernelkite");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_with_timeout(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kernelkite did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigint_is_forwarded_and_the_bundle_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("int.json");
    let mut child = start_and_wait_for(&bundle_path, &["sleep", "120"], "sleep");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    // The bundle's signal proves the interruption (a sleep that ran out exits 0).
    let status = wait_with_timeout(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(130), "{status:?}");
    let bundle = load_bundle(&bundle_path).unwrap();
    let launched = bundle.launched.unwrap();
    assert_eq!(
        (launched.exit_code, launched.signal),
        (None, Some(libc::SIGINT))
    );
    assert!(bundle
        .frames
        .iter()
        .any(|f| f.processes.iter().any(|p| p.comm == "sleep")));
}

#[test]
fn sigterm_is_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("term.json");
    let mut child = start_and_wait_for(&bundle_path, &["sleep", "30"], "sleep");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = wait_with_timeout(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    let launched = load_bundle(&bundle_path).unwrap().launched.unwrap();
    assert_eq!(launched.signal, Some(libc::SIGTERM));
}

/// A closed terminal or ssh session (SIGHUP) ends the command, not kernelkite: the
/// bundle is written once the tree has exited, and nothing is left running.
#[test]
fn sighup_is_forwarded_and_the_bundle_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("hup.json");
    let mut child = start_and_wait_for(&bundle_path, &["sleep", "30"], "sleep");
    let sleep_pid = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
        .unwrap()
        .trim()
        .to_string();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGHUP) }, 0);
    let status = wait_with_timeout(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + libc::SIGHUP), "{status:?}");
    let launched = load_bundle(&bundle_path).unwrap().launched.unwrap();
    assert_eq!(launched.signal, Some(libc::SIGHUP));
    assert!(
        !Path::new(&format!("/proc/{sleep_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{sleep_pid}/comm"))
                .is_ok_and(|c| c.trim() != "sleep"),
        "the command was left running"
    );
}

/// Held by tests that count frames per second of sampling and by the ones that load
/// the machine, so they do not run at once.
static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn frame_cap_keeps_refreshing_the_last_frame() {
    let _alone = TIMED.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("cap.json");
    kk().args(["--interval-ms", "10", "run", "--max-frames", "3"])
        .arg(&bundle_path)
        .args(["--", "sleep", "0.4"])
        .assert()
        .success();
    let bundle = load_bundle(&bundle_path).unwrap();
    assert_eq!(bundle.frames.len(), 3);
    assert_eq!(bundle.frame_cap.max_frames, 3);
    assert!(
        bundle.frame_cap.frames_dropped >= 10,
        "{:?}",
        bundle.frame_cap
    );
    // The kept last frame is the final one: taken when sleep exited.
    assert!(
        bundle.frames[2].t_ns >= 390_000_000,
        "{}",
        bundle.frames[2].t_ns
    );
    assert!(bundle.frames[1].t_ns < 100_000_000);
    let last = &bundle.frames[2].processes;
    assert_eq!(last.len(), 1);
    assert_eq!(
        last[0].state, "Z",
        "sampled as a zombie, with its final counters"
    );
}

#[test]
fn missing_command_is_one_line_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("none.json");
    let out = kk()
        .arg("run")
        .arg(&bundle_path)
        .args(["--", "/nonexistent/kk-no-such-command", "arg"])
        .output()
        .unwrap();
    // Not found: 127, as a shell (and `env`) would say.
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("kk-no-such-command"), "{stderr}");
    assert!(!bundle_path.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "temporary files left behind"
    );
}

/// `run` exits with its command's status, so its own failures have their own: 125
/// kernelkite failed, 126 the command cannot be run, 127 not found; a command's own 2
/// (or 125) is passed through.
#[test]
fn own_failures_have_statuses_apart_from_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("s.json");
    let status = |cmd: &mut Command| cmd.output().unwrap().status.code();
    let not_executable = dir.path().join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    assert_eq!(
        status(
            kk().arg("run")
                .arg(&bundle_path)
                .arg("--")
                .arg(&not_executable)
        ),
        Some(126)
    );
    assert_eq!(
        status(
            kk().arg("run")
                .arg(&bundle_path)
                .args(["--", "kk-no-such-command-on-path"])
        ),
        Some(127)
    );
    // kernelkite's own: a bad flag, a bundle it cannot write.
    assert_eq!(
        status(
            kk().args(["run", "--no-such-flag"])
                .arg(&bundle_path)
                .args(["--", "true"])
        ),
        Some(125)
    );
    assert_eq!(
        status(
            kk().arg("run")
                .arg(dir.path().join("no-dir/b.json"))
                .args(["--", "true"])
        ),
        Some(125)
    );
    for code in ["2", "125"] {
        assert_eq!(
            status(kk().arg("run").arg(&bundle_path).args([
                "--",
                "sh",
                "-c",
                &format!("exit {code}")
            ])),
            Some(code.parse().unwrap())
        );
    }
    // Other commands keep 2 for their errors.
    assert_eq!(
        status(cli_support::kk().args(["summary", "/nonexistent/b.json"])),
        Some(2)
    );
}

#[test]
fn unwritable_bundle_path_fails_before_launching() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("launched");
    let bundle_path = dir.path().join("no-such-dir").join("b.json");
    let out = kk()
        .arg("run")
        .arg(&bundle_path)
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("b.json"), "{stderr}");
    assert!(
        !marker.exists(),
        "the command ran although the bundle could not be written"
    );

    // A directory in place of the bundle.
    let out = kk()
        .arg("run")
        .arg(dir.path())
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("directory"));
}

#[test]
fn network_counters_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("net.json");
    kk().args(["--network", "run"])
        .arg(&bundle_path)
        .args(["--", "sleep", "0.1"])
        .assert()
        .success();
    let bundle = load_bundle(&bundle_path).unwrap();
    for f in &bundle.frames {
        let net = f.network.as_ref().expect("network rows in every frame");
        assert!(net.iter().any(|r| r.interface == "lo"), "{net:?}");
        assert!(net.windows(2).all(|w| w[0].interface < w[1].interface));
    }
}

#[test]
fn under_sudo_the_command_runs_as_the_invoking_user() {
    if !skip::root_or_required("under_sudo_the_command_runs_as_the_invoking_user") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("sudo.json");
    let out = kk_under_sudo_by_nobody()
        .env("HOME", "/root")
        .arg("run")
        .arg(&bundle_path)
        .args([
            "--",
            "sh",
            "-c",
            "id -u; id -g; id -G; echo \"$HOME $USER\"",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "65534", "{stdout}");
    assert_eq!(lines[1], "65534", "{stdout}");
    assert!(
        !lines[2].split_whitespace().any(|g| g == "0"),
        "root group kept: {stdout}"
    );
    assert!(
        lines[3].ends_with(" nobody") && !lines[3].starts_with("/root"),
        "{stdout}"
    );
    // The bundle belongs to the user too, and still records the process.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&bundle_path).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    let bundle = load_bundle(&bundle_path).unwrap();
    assert_eq!(bundle.launched.unwrap().exit_code, Some(0));
}

/// The `kk-workload` binary next to kernelkite's, built on demand.
fn workload_bin() -> PathBuf {
    let bin = kk_path().with_file_name("kk-workload");
    if !bin.exists() {
        let mut cmd = StdCommand::new(env!("CARGO"));
        cmd.args(["build", "-q", "-p", "kernelkite-workloads"]);
        if kk_path().parent().is_some_and(|p| p.ends_with("release")) {
            cmd.arg("--release");
        }
        assert!(
            cmd.status().expect("cargo build").success(),
            "building kk-workload failed"
        );
    }
    bin
}

#[test]
fn threads_are_sampled_with_the_syscall_they_block_in() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("threads.json");
    // 4 threads take turns holding a mutex for 5 ms, sleeping: the others wait in futex.
    let mut child = StdCommand::new(kk_path())
        .args(PROC)
        .args(["--interval-ms", "50", "run"])
        .arg(&bundle_path)
        .arg("--")
        .arg(workload_bin())
        .args([
            "futex_stress",
            "--threads",
            "4",
            "--seconds",
            "0.6",
            "--hold-us",
            "5000",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_with_timeout(&mut child, Duration::from_secs(60));
    assert!(status.success(), "{status:?}");
    let bundle = load_bundle(&bundle_path).unwrap();
    let futex_nr = match bundle.host.arch.as_str() {
        "x86_64" => 202,
        "aarch64" => 98,
        other => {
            eprintln!("no futex syscall number known for {other}; checking threads only");
            -2
        }
    };
    let root = bundle.root_pids[0];
    let samples: Vec<_> = bundle
        .frames
        .iter()
        .flat_map(|f| &f.processes)
        .filter(|p| p.pid == root && p.num_threads >= 5)
        .collect();
    assert!(
        !samples.is_empty(),
        "never saw the workload with its 4 worker threads"
    );
    let mut saw_futex = false;
    for p in &samples {
        assert_eq!(p.threads.len() as u64, p.num_threads, "pid {}", p.pid);
        assert!(p.threads.windows(2).all(|w| w[0].tid < w[1].tid));
        assert_eq!(p.threads[0].tid, root, "the leader comes first");
        for t in &p.threads {
            assert!(t.schedstat.is_some(), "tid {} has no schedstat", t.tid);
            assert!(!t.state.is_empty());
            if t.state == "R" {
                assert_eq!(t.syscall_nr, None, "a running thread is in no syscall");
            }
            saw_futex |= t.syscall_nr == Some(futex_nr);
        }
    }
    assert!(
        saw_futex || futex_nr == -2,
        "no thread was ever seen blocked in futex"
    );
}

#[test]
fn signals_after_the_root_exited_go_to_the_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("orphan-term.json");
    // The root exits at once with 4; `sleep 30` is left to kernelkite. (SIGTERM: a
    // non-interactive shell starts background jobs with SIGINT ignored.)
    let mut child = start_and_wait_for(&bundle_path, &["sh", "-c", "sleep 120 & exit 4"], "sleep");
    // Let kernelkite reap the root and sample the orphan under it.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    // kernelkite ends once the last orphan is reaped: within the limit (well short of
    // the sleep's 120 s) only if the orphan was terminated, however loaded the machine.
    let status = wait_with_timeout(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(4), "the root's own status: {status:?}");
    let launched = load_bundle(&bundle_path).unwrap().launched.unwrap();
    assert_eq!(launched.exit_code, Some(4));
}

/// A signal ignored where kernelkite was started (a background job's SIGINT, nohup)
/// stays ignored in the command, as it would without kernelkite.
#[test]
fn ignored_signals_stay_ignored_in_the_command() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("sig.json");
    let mut cmd = StdCommand::new(kk_path());
    cmd.args(PROC)
        .arg("run")
        .arg(&bundle_path)
        .args(["--", "cat", "/proc/self/status"]);
    // SAFETY: signal() is async-signal-safe; it only changes this child's disposition.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    let status = String::from_utf8_lossy(&out.stdout);
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    assert_ne!(
        ignored & (1 << (libc::SIGINT - 1)),
        0,
        "SIGINT not ignored: {status}"
    );
    // SIGTERM was not ignored, so it is not ignored in the command either.
    assert_eq!(ignored & (1 << (libc::SIGTERM - 1)), 0, "{status}");
}

/// The command starts with the signal mask kernelkite started with, not with the
/// SIGCHLD kernelkite blocks for itself: std's spawn passes the parent's mask on, and a
/// shell's `wait` for a background job then sleeps in sigsuspend forever.
#[test]
fn the_command_gets_the_signal_mask_kernelkite_started_with() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("mask.json");
    let mut child = StdCommand::new(kk_path())
        .args(PROC)
        .arg("run")
        .arg(&bundle_path)
        .args([
            "--",
            "sh",
            "-c",
            "sleep 0.1 & wait; grep SigBlk /proc/self/status",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_with_timeout(&mut child, Duration::from_secs(30));
    assert!(status.success());
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    // The same command started directly by this test, whose mask kernelkite inherited.
    let direct = StdCommand::new("grep")
        .args(["SigBlk", "/proc/self/status"])
        .output()
        .unwrap();
    assert_eq!(out, String::from_utf8_lossy(&direct.stdout), "{out}");
}

/// As root, a directory the user `nobody` owns and a root-only 0600 file elsewhere.
fn users_dir_and_root_only_file() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret_dir = dir.path().join("root-only");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::set_permissions(&secret_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = secret_dir.join("file");
    std::fs::write(&victim, "secret\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    Some((dir, home, victim))
}

fn assert_untouched(victim: &Path) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(victim).unwrap();
    assert_eq!(std::fs::read_to_string(victim).unwrap(), "secret\n");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (0, 0, 0o600)
    );
}

fn assert_users_regular_file(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(meta.file_type().is_file(), "{}: {meta:?}", path.display());
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
}

/// Issue 16's reproduction: under sudo the command (running as the user) plants a
/// symlink at the temporary name kernelkite used to write the bundle through (then
/// chowned by path), pointing at a root-only file.
#[test]
fn the_command_cannot_redirect_the_bundle_to_a_root_file() {
    let Some((_dir, home, victim)) = users_dir_and_root_only_file() else {
        return skip::required(
            "the_command_cannot_redirect_the_bundle_to_a_root_file",
            "needs root",
        );
    };
    let plant = format!("ln -s {} .out.json.tmp-$PPID", victim.display());
    let out = kk_under_sudo_by_nobody()
        .current_dir(&home)
        .args(["run", "out.json", "--", "sh", "-c", &plant])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_untouched(&victim);
    assert_users_regular_file(&home.join("out.json"));
    load_bundle(&home.join("out.json")).unwrap();
}

/// `--record` created its final path with `File::create`: a symlink planted there (by
/// the user, in their directory) had a root-only file truncated and overwritten. A
/// symlink at an output path is now refused (never followed, never replaced), before
/// the command starts.
#[test]
fn a_symlink_at_the_recording_path_is_refused_not_followed() {
    let Some((_dir, home, victim)) = users_dir_and_root_only_file() else {
        return skip::required(
            "a_symlink_at_the_recording_path_is_refused_not_followed",
            "needs root",
        );
    };
    let kkr = home.join("out.kkr");
    std::os::unix::fs::symlink(&victim, &kkr).unwrap();
    let marker = home.join("ran");
    let refused = |out: std::process::Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains("symbolic link"), "{stderr}");
        assert_untouched(&victim);
        assert!(std::fs::symlink_metadata(&kkr).unwrap().is_symlink());
        assert!(!marker.exists(), "the command ran: {stderr}");
    };
    let touch = ["--", "touch", marker.to_str().unwrap()];
    refused(
        kk_under_sudo_by_nobody()
            .arg("run")
            .arg(home.join("out.json"))
            .arg("--record")
            .arg(&kkr)
            .args(touch)
            .output()
            .unwrap(),
    );
    // As plain root (no sudo) too.
    refused(
        std::process::Command::new(kk_path())
            .arg("run")
            .arg(home.join("root.json"))
            .arg("--record")
            .arg(&kkr)
            .args(touch)
            .output()
            .unwrap(),
    );
    // Without the link, the recording is the user's and replays.
    std::fs::remove_file(&kkr).unwrap();
    let out = kk_under_sudo_by_nobody()
        .arg("run")
        .arg(home.join("out.json"))
        .arg("--record")
        .arg(&kkr)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_users_regular_file(&kkr);
    assert_users_regular_file(&home.join("out.json"));
    cli_support::kk()
        .arg("replay")
        .arg(&kkr)
        .arg(home.join("replayed.json"))
        .assert()
        .success();
}

/// The frame cap also bounds memory: a big process tree fills `--max-frames-mb` long
/// before `--max-frames`, and the frames kept are then the cap (150 processes make a
/// frame of about 50 KB; 100,000 of them would be 5 GB).
#[test]
fn frame_byte_budget_caps_the_frames_of_a_big_tree() {
    use kernelkite::model::frame_keeper::frame_bytes;
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("budget.json");
    let _alone = TIMED.lock().unwrap_or_else(|e| e.into_inner());
    kk().args(["--interval-ms", "50", "run", "--max-frames-mb", "1"])
        .arg(&bundle_path)
        .args([
            "--",
            "sh",
            "-c",
            "for i in $(seq 150); do sleep 2.5 & done; wait",
        ])
        .assert()
        .success();
    let bundle = load_bundle(&bundle_path).unwrap();
    let cap = bundle.frame_cap;
    assert!(cap.frames_dropped > 0, "{cap:?}");
    assert_eq!(cap.max_frames, bundle.frames.len() as u64, "{cap:?}");
    let kept: u64 = bundle.frames.iter().map(frame_bytes).sum();
    let largest = bundle.frames.iter().map(frame_bytes).max().unwrap();
    assert!(kept <= (1 << 20) + largest, "{kept} bytes kept");
    kk().args(["run", "--max-frames-mb", "0"])
        .arg(&bundle_path)
        .args(["--", "true"])
        .assert()
        .code(125)
        .stderr(predicates::str::contains(
            "--max-frames-mb must be at least 1",
        ));
}

/// /proc/stat's steal column, the 8th value of the `cpu` line.
fn host_steal_ticks_now() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    stat.lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(8)
        .unwrap()
        .parse()
        .unwrap()
}

/// The /proc backend records the host-wide steal ticks in every frame (between the
/// test's own reads of /proc/stat around the run, never going backwards), and the
/// summary reports their move, labelled host-wide.
#[test]
fn proc_frames_carry_host_wide_steal() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("steal.json");
    let before = host_steal_ticks_now();
    kk().args(["--interval-ms", "50", "run"])
        .arg(&bundle_path)
        .args(["--", "sleep", "0.3"])
        .assert()
        .success();
    let after = host_steal_ticks_now();
    let bundle = load_bundle(&bundle_path).unwrap();
    let ticks: Vec<u64> = bundle
        .frames
        .iter()
        .map(|f| f.host_steal_ticks.expect("every frame has the steal ticks"))
        .collect();
    assert!(ticks.len() >= 2, "{ticks:?}");
    assert!(ticks.windows(2).all(|w| w[0] <= w[1]), "{ticks:?}");
    assert!(before <= ticks[0] && *ticks.last().unwrap() <= after);
    let summary = cli_support::kk()
        .args(["summary", "--json"])
        .arg(&bundle_path)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&summary.stdout).unwrap();
    let hz = bundle.host.clock_ticks_per_sec;
    assert_eq!(doc["host_steal"]["host_wide"], true);
    assert_eq!(
        doc["host_steal"]["steal_ns"].as_u64(),
        Some((ticks.last().unwrap() - ticks[0]) * 1_000_000_000 / hz)
    );
    let text = cli_support::kk()
        .arg("summary")
        .arg(&bundle_path)
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("steal (host-wide)"), "{text}");
}

/// Every process of the tree carries its cgroup (the one the test runs in: children
/// inherit it) and its namespace pids, however short its life: read at first sight, or
/// at its exit stop (exit accounting).
#[test]
fn every_process_carries_its_cgroup() {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let Some(cgroup) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
        // CI's machine has cgroup v2 (/sys/fs/cgroup/unified).
        return skip::required("every_process_carries_its_cgroup", "no cgroup v2 here");
    };
    let dir = tempfile::tempdir().unwrap();
    let bundle_path = dir.path().join("cg.json");
    kk().arg("run")
        .arg(&bundle_path)
        .args([
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5; do /bin/true; done; sleep 0.3",
        ])
        .assert()
        .success();
    let bundle = load_bundle(&bundle_path).unwrap();
    let pids: BTreeSet<i32> = (bundle.frames.iter())
        .flat_map(|f| f.processes.iter().map(|p| p.pid))
        .chain(bundle.thread_exits.iter().map(|e| e.process.pid))
        .collect();
    assert!(pids.len() >= 6, "the shell and five /bin/true: {pids:?}");
    for pid in &pids {
        let identity = (bundle.process_identities.iter())
            .find(|i| i.pid == *pid)
            .unwrap_or_else(|| {
                panic!("pid {pid} has no identity: {:?}", bundle.process_identities)
            });
        assert_eq!(identity.cgroup.as_deref(), Some(cgroup), "{identity:?}");
        assert_eq!(identity.ns_pids.first(), Some(pid), "{identity:?}");
    }
}
