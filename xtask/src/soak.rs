//! `cargo xtask soak [--minutes N] [--no-build]`: a long `kernelkite trace --follow
//! --stacks` session (release build, default 10 minutes) on a process-churn plus
//! syscall-heavy workload, then short sessions ended by SIGKILL, SIGTERM and SIGHUP.
//! Not part of `cargo xtask ci` (it takes N minutes and needs root).
//!
//! The workload is one `sh` (the traced process) whose children loop: `/bin/true` and
//! `sleep 0.02` (about 80 short processes a second), `dd bs=1` (1-byte reads and writes
//! of /dev/zero and /dev/null, 20,000 each per run), and `kk-workload pipe_pingpong`
//! (two threads passing a byte over pipes, context switches with stacks).
//!
//! It reports, not judges (no timed assertion): the tracer's RSS (VmRSS of
//! /proc/PID/status every 5 s) over time, the first-minute and last-minute means and
//! the least-squares slope after the first minute; the tracer's CPU; events lost and
//! what the bundle holds. It fails only when a session does not end as it should or
//! leaves a BPF program, link or map behind: every id the tracer held (from its
//! /proc/PID/fdinfo) must be gone (`bpftool prog|link|map show id N` fails) once it
//! has exited, for every way of ending it.
//!
//! `--agent` soaks `kernelkite agent` (the whole machine) instead: see `soak/agent.rs`.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bench::{build_release, stat_fields, vm_rss_kb};

mod agent;

const USAGE: &str =
    "usage: cargo xtask soak [--agent [--rate STARTS_PER_SEC]] [--minutes N] [--no-build]
  Traces a process-churn plus syscall-heavy workload with `kernelkite trace --follow
  --stacks` for N minutes (default 10), sampling the tracer's RSS; then ends short
  sessions with SIGKILL, SIGTERM and SIGHUP and checks nothing stays attached. Root.
  --agent      soak `kernelkite agent` (whole machine) instead: process starts at
               --rate a second (default 200) plus the syscall loops, RSS every 5 s,
               /metrics every 30 s, then SIGTERM
  --no-build   use the existing target/release binaries";

/// Seconds between RSS samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Length of each signal session.
const SIGNAL_SESSION: Duration = Duration::from_secs(8);

pub fn run(args: &[String]) -> Result<()> {
    let mut minutes = 10.0f64;
    let mut build = true;
    let mut agent_mode = false;
    let mut rate = 200.0f64;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--minutes" => {
                minutes = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|m: &f64| *m > 0.0)
                    .with_context(|| format!("--minutes needs a positive number\n{USAGE}"))?;
            }
            "--agent" => agent_mode = true,
            "--rate" => {
                rate = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|r: &f64| *r > 0.0 && *r <= 10_000.0)
                    .with_context(|| format!("--rate needs a number up to 10000\n{USAGE}"))?;
            }
            "--no-build" => build = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the soak traces with eBPF: run it as root");
    }
    let root = crate::workspace_root();
    if build {
        build_release(&root)?;
    }
    let target_dir =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let bins = Bins {
        kernelkite: target_dir.join("release").join("kernelkite"),
        workload: target_dir.join("release").join("kk-workload"),
    };
    for bin in [&bins.kernelkite, &bins.workload] {
        if !bin.is_file() {
            bail!("{} is missing (run without --no-build)", bin.display());
        }
    }
    let work = target_dir.join("soak");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;

    if agent_mode {
        return agent::run(&bins, &work, minutes, rate);
    }
    let mut failures = Vec::new();
    println!("==> soak: trace --follow --stacks for {minutes} min");
    let long = long_session(&bins, &work, Duration::from_secs_f64(minutes * 60.0))?;
    failures.extend(long.failures.iter().cloned());
    let mut signals = Vec::new();
    for (name, signal) in [
        ("SIGKILL", libc::SIGKILL),
        ("SIGTERM", libc::SIGTERM),
        ("SIGHUP", libc::SIGHUP),
    ] {
        println!("==> soak: a short session ended by {name}");
        let s = signal_session(&bins, &work, name, signal)?;
        failures.extend(s.failures.iter().cloned());
        signals.push(s);
    }
    println!("\n{}", render(&long, &signals, minutes));
    if !failures.is_empty() {
        bail!("soak failed:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

struct Bins {
    kernelkite: PathBuf,
    workload: PathBuf,
}

/// The traced `sh` and its looping children, in their own process group.
struct Workload {
    child: Child,
    go: Option<ChildStdin>,
}

impl Workload {
    /// Start the root `sh`; its loops wait for [`Workload::go`].
    fn spawn(bins: &Bins) -> Result<Workload> {
        Workload::start(&format!(
            "( while :; do /bin/true; sleep 0.02; done ) &\n{}",
            syscall_loops(bins)
        ))
    }

    /// An `sh` that reads a line, then runs `script`.
    fn start(script: &str) -> Result<Workload> {
        let script = format!("read _go\n{script}\nwait");
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .context("cannot start the workload sh")?;
        let go = child.stdin.take();
        Ok(Workload { child, go })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn go(&mut self) -> Result<()> {
        let mut stdin = self.go.take().expect("go once");
        stdin.write_all(b"go\n")?;
        Ok(())
    }
}

/// The syscall-heavy loops (`dd bs=1`, `pipe_pingpong`), in the background.
fn syscall_loops(bins: &Bins) -> String {
    format!(
        "( while :; do dd if=/dev/zero of=/dev/null bs=1 count=20000 2>/dev/null; sleep 0.2; done ) &
( while :; do '{}' pipe_pingpong --count 5000 >/dev/null; sleep 0.5; done ) &",
        bins.workload.display()
    )
}

impl Drop for Workload {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; the group is our child's.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// A `kernelkite trace` whose hooks are live; its stderr goes to a log file.
struct Tracer {
    child: Child,
    bundle: PathBuf,
    log: PathBuf,
    ended: mpsc::Receiver<()>,
}

impl Tracer {
    fn start(bins: &Bins, work: &Path, name: &str, pid: u32) -> Result<Tracer> {
        let bundle = work.join(format!("{name}.bundle.json"));
        let log = work.join(format!("{name}.stderr"));
        let mut cmd = Command::new(&bins.kernelkite);
        cmd.args([
            "trace",
            "--follow",
            "--stacks",
            "--pid",
            &pid.to_string(),
            "-o",
        ])
        .arg(&bundle);
        // What the session keeps, once a minute in its log (KERNELKITE_DEBUG_SIZES may
        // ask for more often).
        if std::env::var_os("KERNELKITE_DEBUG_SIZES").is_none() {
            cmd.env("KERNELKITE_DEBUG_SIZES", "60");
        }
        // SAFETY: signal() is async-signal-safe, as pre_exec requires. A soak started
        // with nohup or in the background inherits ignored SIGHUP/SIGINT; the tracer
        // gets the default dispositions a terminal session has.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start kernelkite trace")?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (live_tx, live_rx) = mpsc::channel();
        let (ended_tx, ended) = mpsc::channel();
        let mut file = std::fs::File::create(&log)?;
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = writeln!(file, "{line}");
                if line.contains("hooks live") {
                    let _ = live_tx.send(());
                }
            }
            let _ = ended_tx.send(());
        });
        let mut tracer = Tracer {
            child,
            bundle,
            log,
            ended,
        };
        if live_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = tracer.child.kill();
            let _ = tracer.child.wait();
            bail!(
                "kernelkite trace did not go live within 60 s; see {}",
                tracer.log.display()
            );
        }
        Ok(tracer)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `signal` and wait up to `wait` for the exit (then SIGKILL).
    fn end(mut self, signal: i32, wait: Duration) -> Result<Ended> {
        let t = Instant::now();
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let deadline = t + wait;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let exit_s = t.elapsed().as_secs_f64();
        let _ = self.ended.recv_timeout(Duration::from_secs(5));
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lost_by_cause = log
            .lines()
            .find_map(|l| l.split_once("events lost: "))
            .map(|(_, causes)| causes.to_string());
        let sizes = log
            .lines()
            .filter_map(|l| l.strip_prefix("kernelkite: sizes at "))
            .map(str::to_string)
            .collect();
        let last_lines = log
            .lines()
            .rev()
            .take(3)
            .map(str::to_string)
            .collect::<Vec<_>>();
        Ok(Ended {
            status,
            waited_s: wait.as_secs_f64(),
            exit_s,
            bundle_written: self.bundle.is_file(),
            last_lines,
            lost_by_cause,
            sizes,
        })
    }
}

struct Ended {
    /// `None` when it had to be killed after `waited_s`.
    status: Option<ExitStatus>,
    waited_s: f64,
    exit_s: f64,
    bundle_written: bool,
    /// The last lines of its stderr, newest first.
    last_lines: Vec<String>,
    /// Its "events lost: …" line (the causes), if it printed one.
    lost_by_cause: Option<String>,
    /// Its `KERNELKITE_DEBUG_SIZES` lines: "T s: structure entries, …".
    sizes: Vec<String>,
}

impl Ended {
    fn status_text(&self) -> String {
        match self.status {
            None => format!("did not exit within {:.0} s (killed)", self.waited_s),
            Some(s) => match (s.code(), s.signal()) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => s.to_string(),
            },
        }
    }
}

/// The BPF programs, links and maps a process holds, from its fdinfo.
fn bpf_ids_held_by(pid: u32) -> Vec<(&'static str, u32)> {
    let mut ids = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return ids;
    };
    for entry in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in info.lines() {
            for (key, kind) in [
                ("prog_id:", "prog"),
                ("link_id:", "link"),
                ("map_id:", "map"),
            ] {
                if let Some(id) = line.strip_prefix(key).and_then(|v| v.trim().parse().ok()) {
                    ids.push((kind, id));
                }
            }
        }
    }
    ids.sort();
    ids.dedup();
    ids
}

/// Of `ids`, those still loaded `wait` after their holder exited (the kernel frees maps
/// from a work queue, after an RCU grace period).
fn still_loaded(ids: &[(&'static str, u32)], wait: Duration) -> Result<Vec<String>> {
    let deadline = Instant::now() + wait;
    loop {
        let mut left = Vec::new();
        for (kind, id) in ids {
            let shown = Command::new("bpftool")
                .args([kind, "show", "id", &id.to_string()])
                .output()
                .context("bpftool is needed to check what stays attached")?;
            if shown.status.success() {
                left.push(format!("{kind} {id}"));
            }
        }
        if left.is_empty() || Instant::now() > deadline {
            return Ok(left);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn count(ids: &[(&str, u32)], kind: &str) -> usize {
    ids.iter().filter(|(k, _)| *k == kind).count()
}

/// RssAnon, RssFile and RssShmem of a live process, KiB: heap, mapped files, and the
/// memfd copies the symbolizer reads.
fn rss_parts(pid: u32) -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
    };
    Some((field("RssAnon:")?, field("RssFile:")?, field("RssShmem:")?))
}

/// CPU seconds (utime + stime) of a live process.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f = stat_fields(&stat)?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((f[0] + f[1]) as f64 / hz)
}

struct LongSession {
    /// (seconds since live, RSS KiB).
    rss: Vec<(f64, u64)>,
    seconds: f64,
    cpu_seconds: Option<f64>,
    /// RssAnon, RssFile and RssShmem (KiB) at the end of the session.
    rss_parts: Option<(u64, u64, u64)>,
    ids: Vec<(&'static str, u32)>,
    left: Vec<String>,
    ended: Ended,
    bundle: Option<BundleFacts>,
    failures: Vec<String>,
}

struct BundleFacts {
    bytes: u64,
    events_lost: Option<u64>,
    frames: usize,
    processes: usize,
    lifecycle_events: usize,
    stack_samples: usize,
}

fn bundle_facts(path: &Path) -> Result<BundleFacts> {
    let bytes = std::fs::read(path)?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let len = |key: &str| v[key].as_array().map_or(0, Vec::len);
    let pids: std::collections::BTreeSet<i64> = v["lifecycle"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["pid"].as_i64())
        .collect();
    Ok(BundleFacts {
        bytes: bytes.len() as u64,
        events_lost: v["events_lost"].as_u64(),
        frames: len("frames"),
        processes: pids.len(),
        lifecycle_events: len("lifecycle"),
        stack_samples: v["stacks"]["samples"].as_array().map_or(0, Vec::len),
    })
}

fn long_session(bins: &Bins, work: &Path, length: Duration) -> Result<LongSession> {
    let mut workload = Workload::spawn(bins)?;
    let tracer = Tracer::start(bins, work, "long", workload.pid())?;
    workload.go()?;
    let pid = tracer.pid();
    let t0 = Instant::now();
    let mut rss = Vec::new();
    let mut ids = Vec::new();
    while t0.elapsed() < length {
        if let Some(kb) = vm_rss_kb(pid) {
            let t = t0.elapsed().as_secs_f64();
            rss.push((t, kb));
            println!("    {t:>6.0} s  RSS {:.1} MiB", kb as f64 / 1024.0);
        }
        if ids.is_empty() {
            ids = bpf_ids_held_by(pid);
        }
        let next = SAMPLE_EVERY * rss.len() as u32;
        std::thread::sleep(next.saturating_sub(t0.elapsed()).min(SAMPLE_EVERY));
    }
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid);
    let rss_parts = rss_parts(pid);
    // The ids again at the end: a program attached later (none should be) counts too.
    ids.extend(bpf_ids_held_by(pid));
    ids.sort();
    ids.dedup();
    // Ending a long session (the last snapshot, symbols, the bundle) takes a while.
    let ended = tracer.end(libc::SIGINT, Duration::from_secs(600))?;
    drop(workload);
    let left = still_loaded(&ids, Duration::from_secs(10))?;
    let mut failures = Vec::new();
    if ended.status.is_none_or(|s| !s.success()) {
        failures.push(format!(
            "the long session ended by SIGINT: {}; last lines {:?}",
            ended.status_text(),
            ended.last_lines
        ));
    }
    if count(&ids, "prog") == 0 {
        failures.push("the long session held no BPF program".into());
    }
    if !left.is_empty() {
        failures.push(format!(
            "still loaded after the long session: {}",
            left.join(", ")
        ));
    }
    let bundle = match bundle_facts(&work.join("long.bundle.json")) {
        Ok(b) => Some(b),
        Err(e) => {
            failures.push(format!("the long session's bundle: {e:#}"));
            None
        }
    };
    Ok(LongSession {
        rss,
        seconds,
        cpu_seconds: cpu,
        rss_parts,
        ids,
        left,
        ended,
        bundle,
        failures,
    })
}

struct SignalSession {
    name: &'static str,
    ids: Vec<(&'static str, u32)>,
    left: Vec<String>,
    ended: Ended,
    failures: Vec<String>,
}

fn signal_session(
    bins: &Bins,
    work: &Path,
    name: &'static str,
    signal: i32,
) -> Result<SignalSession> {
    let mut workload = Workload::spawn(bins)?;
    let tracer = Tracer::start(bins, work, &name.to_lowercase(), workload.pid())?;
    workload.go()?;
    std::thread::sleep(SIGNAL_SESSION);
    let ids = bpf_ids_held_by(tracer.pid());
    let ended = tracer.end(signal, Duration::from_secs(30))?;
    drop(workload);
    let left = still_loaded(&ids, Duration::from_secs(10))?;
    let mut failures = Vec::new();
    if count(&ids, "prog") == 0 {
        failures.push(format!("the {name} session held no BPF program"));
    }
    if !left.is_empty() {
        failures.push(format!("still loaded after {name}: {}", left.join(", ")));
    }
    if ended.status.is_none() {
        failures.push(format!("the trace did not exit within 30 s of {name}"));
    }
    Ok(SignalSession {
        name,
        ids,
        left,
        ended,
        failures,
    })
}

/// Least-squares slope of `points`, per second.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

fn mean_mib(points: &[(f64, u64)]) -> Option<f64> {
    (!points.is_empty())
        .then(|| points.iter().map(|p| p.1 as f64).sum::<f64>() / points.len() as f64 / 1024.0)
}

fn ids_text(ids: &[(&str, u32)]) -> String {
    format!(
        "{} programs, {} links, {} maps",
        count(ids, "prog"),
        count(ids, "link"),
        count(ids, "map")
    )
}

fn render(long: &LongSession, signals: &[SignalSession], minutes: f64) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "soak: `cargo xtask soak --minutes {minutes}`, kernelkite trace --follow --stacks for {:.0} s",
        long.seconds
    ));
    let first: Vec<_> = long.rss.iter().copied().filter(|p| p.0 < 60.0).collect();
    let last: Vec<_> = long
        .rss
        .iter()
        .copied()
        .filter(|p| p.0 >= long.seconds - 60.0)
        .collect();
    let after_warmup: Vec<(f64, f64)> = long
        .rss
        .iter()
        .filter(|p| p.0 >= 60.0)
        .map(|p| (p.0, p.1 as f64 / 1024.0))
        .collect();
    let fmt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.1} MiB"));
    line(format!(
        "  RSS: first minute {}, last minute {}, max {}",
        fmt(mean_mib(&first)),
        fmt(mean_mib(&last)),
        fmt(long
            .rss
            .iter()
            .map(|p| p.1)
            .max()
            .map(|kb| kb as f64 / 1024.0))
    ));
    line(format!(
        "  RSS slope after the first minute: {}",
        slope(&after_warmup).map_or("—".to_string(), |s| format!("{:+.3} MiB/min", s * 60.0))
    ));
    let series: Vec<String> = long
        .rss
        .iter()
        .filter(|p| (p.0 as u64) % 60 < SAMPLE_EVERY.as_secs())
        .map(|p| format!("{:.0}s {:.1}", p.0, p.1 as f64 / 1024.0))
        .collect();
    line(format!("  RSS each minute (MiB): {}", series.join(", ")));
    if let Some((anon, file, shmem)) = long.rss_parts {
        line(format!(
            "  RSS at the end: anonymous {:.1} MiB, files {:.1} MiB, shared memory {:.1} MiB",
            anon as f64 / 1024.0,
            file as f64 / 1024.0,
            shmem as f64 / 1024.0
        ));
    }
    if let Some(cpu) = long.cpu_seconds {
        line(format!(
            "  tracer CPU: {cpu:.1} s ({:.1}% of one core)",
            100.0 * cpu / long.seconds
        ));
    }
    match &long.bundle {
        Some(b) => line(format!(
            "  bundle: {:.1} MiB, {} frames, {} processes with lifecycle events ({} events), {} stack samples; events lost: {}",
            b.bytes as f64 / (1024.0 * 1024.0),
            b.frames,
            b.processes,
            b.lifecycle_events,
            b.stack_samples,
            b.events_lost.map_or("not known".to_string(), |n| n.to_string())
        )),
        None => line("  bundle: not written".into()),
    }
    if let Some(causes) = &long.ended.lost_by_cause {
        line(format!("  events lost by cause: {causes}"));
    }
    // What the session kept (entries; `_kib`: estimated KiB), first and last report.
    for sizes in (long.ended.sizes.first().into_iter()).chain(long.ended.sizes.last()) {
        line(format!("  session sizes at {sizes}"));
    }
    line(format!(
        "  ended by SIGINT: {} after {:.1} s; held {}; left loaded: {}",
        long.ended.status_text(),
        long.ended.exit_s,
        ids_text(&long.ids),
        if long.left.is_empty() {
            "none".to_string()
        } else {
            long.left.join(", ")
        }
    ));
    for s in signals {
        line(format!(
            "  {}: {} after {:.1} s, bundle {}; held {}; left loaded: {}",
            s.name,
            s.ended.status_text(),
            s.ended.exit_s,
            if s.ended.bundle_written {
                "written"
            } else {
                "not written"
            },
            ids_text(&s.ids),
            if s.left.is_empty() {
                "none".to_string()
            } else {
                s.left.join(", ")
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_too_few_points() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 + 0.5 * i as f64)).collect();
        assert!((slope(&pts).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(slope(&pts[..1]), None);
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 2.0)]), None);
    }
}
