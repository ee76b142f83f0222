//! eBPF tracing overhead, measured side by side: every configuration runs once per
//! round, rounds interleaved, medians reported, so machine noise hits all alike.
//!
//! - `read()` loop (2,000,000 one-byte reads of /dev/zero, `kk-workload read_loop`):
//!   untraced; with empty sys_enter/sys_exit tp_btf programs (the floor,
//!   `kernelkite bench-floor`); under `kernelkite trace --pid`; untargeted while
//!   `kernelkite trace` traces another process; under bpftrace with a `hist()` of
//!   syscall latency; under libbpf-tools `syscount -L`.
//! - `perf bench sched pipe` pinned to CPU 0: untraced, under `kernelkite trace --follow`
//!   (with and without `--stacks`), under libbpf-tools `runqlat` and `offcputime`.
//! - Tracer start: from spawning `kernelkite trace` to its "hooks live" line.
//! - Tracer RSS while tracing a read loop, sampled every second.
//!
//! Peers that use classic tracepoints need tracefs; it is mounted when missing.

use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{json_f64, median, release, spawn_gated, vm_rss_kb, Ctx, Row};

pub(super) const READS: u64 = 2_000_000;
pub(super) const PIPE_LOOPS: u64 = 200_000;
/// Issue 15: BPF program time per traced read() against the clock floor's (the earlier
/// target, 1.3 × the empty floor, was below what two clock reads cost; docs/PERFORMANCE.md).
const CLOCK_FLOOR_RATIO_TARGET: f64 = 1.3;
/// Issue 15: the scheduler hooks' program time per sched-pipe op against runqlat's.
const SCHED_VS_RUNQLAT_TARGET: f64 = 0.5;
/// Rounds with kernel BPF statistics on, of which each configuration's median is shown.
const STATS_ROUNDS: usize = 3;
/// Rounds of the side-by-side run (three tracers at once), of which the median is shown.
const SIDE_BY_SIDE_ROUNDS: usize = 5;
/// Issue 15: an untargeted process may pay at most the empty floor plus this share.
const UNTARGETED_RATIO_TARGET: f64 = 1.05;
/// `trace --stacks` may add at most this share of what offcputime adds to sched pipe.
pub(super) const STACKS_VS_OFFCPUTIME_TARGET: f64 = 0.5;
const START_TARGET_MS: f64 = 300.0;
const RSS_TARGET_MB: f64 = 20.0;

/// A tracer running in the background until [`Tracer::stop`].
pub(super) struct Tracer {
    pub(super) child: Child,
}

impl Tracer {
    /// Start `cmd` and wait until it has attached its programs (BPF links and perf
    /// events in its fd table, stable for 300 ms), so measurement starts with the probes live.
    pub(super) fn start(cmd: Command) -> Result<Tracer> {
        Tracer::start_to(cmd, Stdio::null())
    }

    /// [`Tracer::start`] with the tracer's output to `stdout`.
    pub(super) fn start_to(mut cmd: Command, stdout: Stdio) -> Result<Tracer> {
        let shown = format!("{cmd:?}");
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {shown}"))?;
        let mut tracer = Tracer { child };
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut last, mut since) = (0, Instant::now());
        loop {
            if let Some(status) = tracer.child.try_wait()? {
                bail!("{shown} exited before attaching ({status})");
            }
            let links = bpf_links(tracer.child.id());
            if links != last {
                (last, since) = (links, Instant::now());
            } else if links > 0 && since.elapsed() > Duration::from_millis(300) {
                return Ok(tracer);
            }
            if Instant::now() > deadline {
                tracer.stop();
                bail!("{shown} did not attach within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGINT (what a user's Ctrl-C sends), then wait.
    pub(super) fn stop(mut self) {
        drop(self.child.stdin.take());
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Attachments a process holds: BPF links (fdinfo `link_id:`) and perf events (how
/// classic tracepoints are attached, e.g. by bpftrace).
fn bpf_links(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            let perf = std::fs::read_link(e.path())
                .is_ok_and(|t| t.to_string_lossy().contains("[perf_event]"));
            let link = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                e.file_name().to_string_lossy()
            ))
            .is_ok_and(|info| info.lines().any(|l| l.starts_with("link_id:")));
            perf || link
        })
        .count()
}

pub(super) fn mount_tracefs() {
    if Path::new("/sys/kernel/tracing/events").exists() {
        return;
    }
    let ok = Command::new("mount")
        .args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"])
        .status()
        .is_ok_and(|s| s.success());
    println!(
        "    mounted tracefs at /sys/kernel/tracing for the classic-tracepoint peers: {}",
        if ok { "ok" } else { "FAILED" }
    );
}

pub(super) fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ReadConfig {
    Untraced,
    Floor,
    BitFloor,
    ClockFloor,
    Kernelkite,
    Untargeted,
    UntargetedCgroup,
    Bpftrace,
    Syscount,
}

impl ReadConfig {
    fn label(self) -> &'static str {
        match self {
            ReadConfig::Untraced => "untraced",
            ReadConfig::Floor => "empty sys_enter/sys_exit tp_btf programs (floor)",
            ReadConfig::BitFloor => "target bit test alone, process not traced (bit floor)",
            ReadConfig::ClockFloor => {
                "target check + clock read at sys_enter and sys_exit (clock floor)"
            }
            ReadConfig::Kernelkite => "kernelkite trace --pid (classes + syscall latency)",
            ReadConfig::Untargeted => "untargeted, while kernelkite traces another pid",
            ReadConfig::UntargetedCgroup => {
                "untargeted, while kernelkite traces a cgroup (--cgroup)"
            }
            ReadConfig::Bpftrace => "bpftrace hist() of syscall latency",
            ReadConfig::Syscount => "libbpf-tools syscount -L",
        }
    }
}

/// One read-loop run under `config`: wall-clock nanoseconds per read(), and the time
/// the tracer's BPF programs ran per read() when kernel BPF stats are on.
fn read_run(ctx: &Ctx, config: ReadConfig, idle_pid: u32) -> Result<(f64, Option<f64>)> {
    read_run_beside(ctx, config, idle_pid, None)
}

/// [`read_run`]; `cgroup` is the cgroup `UntargetedCgroup` traces.
fn read_run_beside(
    ctx: &Ctx,
    config: ReadConfig,
    idle_pid: u32,
    cgroup: Option<&Path>,
) -> Result<(f64, Option<f64>)> {
    let args = ["read_loop", "--count", &READS.to_string()];
    let (child, stdin, lines, pid) = spawn_gated(&ctx.workload, &args)?;
    let tracer = match config {
        ReadConfig::Untraced => None,
        ReadConfig::Floor => {
            let mut c = Command::new(&ctx.kernelkite);
            c.arg("bench-floor");
            Some(Tracer::start(c)?)
        }
        ReadConfig::ClockFloor => {
            let mut c = Command::new(&ctx.kernelkite);
            c.args(["bench-floor", "--clock", "--pid", &pid.to_string()]);
            Some(Tracer::start(c)?)
        }
        ReadConfig::BitFloor => {
            // The idle process's bit is set, as under `trace --pid` of it: the read loop
            // is tested and not traced.
            let mut c = Command::new(&ctx.kernelkite);
            c.args(["bench-floor", "--bit", "--pid", &idle_pid.to_string()]);
            Some(Tracer::start(c)?)
        }
        ReadConfig::Kernelkite | ReadConfig::Untargeted => {
            let target = if config == ReadConfig::Kernelkite {
                pid
            } else {
                idle_pid
            };
            let mut c = Command::new(&ctx.kernelkite);
            c.args(["trace", "--pid", &target.to_string()]);
            Some(Tracer::start(c)?)
        }
        ReadConfig::UntargetedCgroup => {
            let dir = cgroup.context("no cgroup to trace")?;
            let mut c = Command::new(&ctx.kernelkite);
            c.arg("trace").arg("--cgroup").arg(dir);
            Some(Tracer::start(c)?)
        }
        ReadConfig::Bpftrace => {
            let script = format!(
                "tracepoint:raw_syscalls:sys_enter /pid == {pid}/ {{ @start[tid] = nsecs; }} \
                 tracepoint:raw_syscalls:sys_exit /pid == {pid} && @start[tid]/ \
                 {{ @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }}"
            );
            let mut c = Command::new("bpftrace");
            c.args(["-e", &script]);
            Some(Tracer::start(c)?)
        }
        ReadConfig::Syscount => {
            let mut c = Command::new("syscount");
            c.args(["-L", "-p", &pid.to_string()]);
            Some(Tracer::start(c)?)
        }
    };
    // Poll the tracer's program statistics while the workload runs: kernelkite stops
    // (and its programs go away) as soon as its target exits.
    let poller = tracer
        .as_ref()
        .map(|t| ProgramTimePoller::start(t.child.id()));
    let result = release(child, stdin, lines);
    let program_ns = poller
        .and_then(ProgramTimePoller::finish)
        .map(|times| times.iter().map(|p| p.run_time_ns).sum::<u64>());
    if let Some(t) = tracer {
        t.stop();
    }
    let per_call = json_f64(&result?, "ns_per_call")?;
    Ok((per_call, program_ns.map(|ns| ns as f64 / READS as f64)))
}

/// `(prog_id, run_time_ns)` of each BPF program a process holds (fdinfo; counted only
/// while kernel.bpf_stats_enabled is 1). None when it holds none.
fn bpf_program_times(pid: u32) -> Option<Vec<(u32, u64)>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    let mut programs = Vec::new();
    for entry in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let field = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(ns)) = (field("prog_id:"), field("run_time_ns:")) {
            // The same program may be held by several fds.
            if !programs.iter().any(|&(p, _)| p == id as u32) {
                programs.push((id as u32, ns));
            }
        }
    }
    (!programs.is_empty()).then_some(programs)
}

/// A BPF program's name, from `bpftool prog show id N` ("N: tracing  name X  tag ...").
pub(super) fn bpf_program_name(id: u32) -> Option<String> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    words.find(|w| *w == "name")?;
    words.next().map(str::to_string)
}

/// `run_time_ns` of one BPF program of a tracer.
pub(super) struct ProgramTime {
    /// Its name (empty when bpftool could not say).
    name: String,
    pub(super) run_time_ns: u64,
}

/// Polls a tracer's program statistics while a workload runs and keeps the last reading
/// (tracers that stop with their target take their programs with them), naming each
/// program while it is still loaded.
pub(super) struct ProgramTimePoller {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Option<Vec<ProgramTime>>>,
}

impl ProgramTimePoller {
    pub(super) fn start(pid: u32) -> ProgramTimePoller {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let thread = std::thread::spawn(move || {
            let mut names = std::collections::HashMap::new();
            let mut last = None;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(times) = bpf_program_times(pid) {
                    for &(id, _) in &times {
                        names
                            .entry(id)
                            .or_insert_with(|| bpf_program_name(id).unwrap_or_default());
                    }
                    last = Some(times);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            last.map(|times| {
                times
                    .into_iter()
                    .map(|(id, run_time_ns)| ProgramTime {
                        name: names.get(&id).cloned().unwrap_or_default(),
                        run_time_ns,
                    })
                    .collect()
            })
        });
        ProgramTimePoller { done, thread }
    }

    pub(super) fn finish(self) -> Option<Vec<ProgramTime>> {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().ok().flatten()
    }
}

/// Turns kernel BPF run-time statistics on, and back to what they were when dropped.
pub(super) struct BpfStats {
    before: String,
}

impl BpfStats {
    const PATH: &'static str = "/proc/sys/kernel/bpf_stats_enabled";

    pub(super) fn enable() -> Option<BpfStats> {
        let before = std::fs::read_to_string(Self::PATH).ok()?;
        std::fs::write(Self::PATH, "1").ok()?;
        Some(BpfStats { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, self.before.trim());
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum PipeConfig {
    Untraced,
    ClockFloor,
    SchedFloor,
    WakerFloor,
    Kernelkite,
    KernelkiteNoWakers,
    KernelkiteNoRuntime,
    KernelkiteStacks,
    Runqlat,
    Offcputime,
}

impl PipeConfig {
    pub(super) fn label(self) -> &'static str {
        match self {
            PipeConfig::Untraced => "sched pipe: untraced",
            PipeConfig::ClockFloor => {
                "sched pipe: clock floor (target check + clock reads at sys_enter/sys_exit)"
            }
            PipeConfig::SchedFloor => {
                "sched pipe: scheduler floor (target test, one clock read, the thread's interval closed at sched_switch/sched_wakeup)"
            }
            PipeConfig::WakerFloor => {
                "sched pipe: waker floor (the scheduler floor, the waker noted at sched_waking, the sleep added to its total at sched_wakeup)"
            }
            PipeConfig::Kernelkite => "sched pipe: kernelkite trace --follow",
            PipeConfig::KernelkiteNoWakers => {
                "sched pipe: kernelkite trace --follow, waker aggregation off (KERNELKITE_WAKERS=off)"
            }
            PipeConfig::KernelkiteNoRuntime => {
                "sched pipe: kernelkite trace --follow, no sum_exec_runtime read (KERNELKITE_TASK_RUNTIME=off)"
            }
            PipeConfig::KernelkiteStacks => "sched pipe: kernelkite trace --follow --stacks",
            PipeConfig::Runqlat => "sched pipe: libbpf-tools runqlat",
            PipeConfig::Offcputime => "sched pipe: libbpf-tools offcputime",
        }
    }
}

/// A shell that waits for a line on its stdin, then execs `taskset -c 0 perf bench
/// sched pipe -T -l PIPE_LOOPS` (its output to `stdout`): tracers can attach to it (and
/// follow the two perf threads) before the benchmark starts. Threads (-T), so the clock
/// floor, which targets one process, covers both ends.
fn gated_pipe_bench(stdout: Stdio) -> Result<Child> {
    let script = format!("read go; exec taskset -c 0 perf bench sched pipe -T -l {PIPE_LOOPS}");
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start perf bench")
}

/// One `perf bench sched pipe` run pinned to CPU 0: microseconds per operation, and the
/// tracer's programs' run times (when kernel BPF stats are on).
pub(super) fn pipe_run(ctx: &Ctx, config: PipeConfig) -> Result<(f64, Option<Vec<ProgramTime>>)> {
    let mut shell = gated_pipe_bench(Stdio::piped())?;
    let tracer = match config {
        PipeConfig::Untraced => None,
        PipeConfig::ClockFloor | PipeConfig::SchedFloor | PipeConfig::WakerFloor => {
            let floor = match config {
                PipeConfig::ClockFloor => "--clock",
                PipeConfig::SchedFloor => "--sched",
                _ => "--wakers",
            };
            let mut c = Command::new(&ctx.kernelkite);
            c.args(["bench-floor", floor, "--pid", &shell.id().to_string()]);
            Some(Tracer::start(c)?)
        }
        PipeConfig::Kernelkite
        | PipeConfig::KernelkiteStacks
        | PipeConfig::KernelkiteNoWakers
        | PipeConfig::KernelkiteNoRuntime => {
            let mut c = Command::new(&ctx.kernelkite);
            if config == PipeConfig::KernelkiteNoWakers {
                c.env("KERNELKITE_WAKERS", "off");
            }
            if config == PipeConfig::KernelkiteNoRuntime {
                c.env("KERNELKITE_TASK_RUNTIME", "off");
            }
            c.args(["trace", "--follow", "--pid", &shell.id().to_string()]);
            if config == PipeConfig::KernelkiteStacks {
                c.arg("--stacks");
            }
            Some(Tracer::start(c)?)
        }
        PipeConfig::Runqlat => Some(Tracer::start(Command::new("runqlat"))?),
        // System-wide, as run by default: it sees the same switches of the benchmark.
        PipeConfig::Offcputime => Some(Tracer::start(Command::new("offcputime"))?),
    };
    let poller = tracer
        .as_ref()
        .map(|t| ProgramTimePoller::start(t.child.id()));
    shell.stdin.take().unwrap().write_all(b"go\n")?;
    let out = BufReader::new(shell.stdout.take().unwrap());
    let mut usecs = None;
    for line in out.lines() {
        let line = line?;
        // "     5.123 usecs/op"
        if let Some(v) = line.trim().strip_suffix("usecs/op") {
            usecs = v.trim().parse::<f64>().ok();
        }
    }
    let status = shell.wait()?;
    let programs = poller.and_then(ProgramTimePoller::finish);
    if let Some(t) = tracer {
        t.stop();
    }
    if !status.success() {
        bail!("perf bench sched pipe failed ({status})");
    }
    Ok((usecs.context("perf bench printed no usecs/op")?, programs))
}

/// One [`pipe_run`] of each configuration, printed as it goes, its µs/op pushed to the
/// configuration's samples.
pub(super) fn pipe_round(
    ctx: &Ctx,
    configs: &[PipeConfig],
    samples: &mut [Vec<f64>],
) -> Result<()> {
    for (i, &c) in configs.iter().enumerate() {
        let (us, _) = pipe_run(ctx, c)?;
        print!(" {us:.2}");
        let _ = std::io::stdout().flush();
        samples[i].push(us);
    }
    Ok(())
}

pub(super) fn benchmarks(ctx: &Ctx) -> Result<Vec<Row>> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(vec![Row::missing(
            "eBPF overhead",
            "needs root",
            "cargo xtask bench --only ebpf",
        )]);
    }
    mount_tracefs();
    let mut rows = Vec::new();
    let runs = ctx.opts.runs;

    // An idle process for the untargeted configuration.
    let mut idle = Command::new(&ctx.workload)
        .args(["idle", "--seconds", "3600"])
        .stdout(Stdio::null())
        .spawn()
        .context("cannot start the idle workload")?;
    let mut configs = vec![
        ReadConfig::Untraced,
        ReadConfig::Floor,
        ReadConfig::BitFloor,
        ReadConfig::ClockFloor,
        ReadConfig::Kernelkite,
        ReadConfig::Untargeted,
    ];
    if have("bpftrace") {
        configs.push(ReadConfig::Bpftrace);
    }
    if have("syscount") {
        configs.push(ReadConfig::Syscount);
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..runs {
        print!("    read() round {}/{runs}:", round + 1);
        for (i, &config) in configs.iter().enumerate() {
            let (ns, _) = read_run(ctx, config, idle.id())?;
            print!(" {ns:.0}");
            let _ = std::io::stdout().flush();
            samples[i].push(ns);
        }
        println!(" ns/call");
    }
    // One more round with kernel BPF statistics on: the time each tracer's programs
    // ran, per read() — free of the wall-clock noise of a shared machine (but each
    // program run then also pays for the two clock reads of the statistics).
    // Three rounds, interleaved, and each configuration's median: one round moves by a
    // few percent on this machine, as much as the margin of a 1.3 × target.
    let mut program_ns: Vec<Option<f64>> = vec![None; configs.len()];
    if let Some(_stats) = BpfStats::enable() {
        let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        for _ in 0..STATS_ROUNDS {
            for (i, &config) in configs.iter().enumerate().skip(1) {
                if let Some(ns) = read_run(ctx, config, idle.id())?.1 {
                    rounds[i].push(ns);
                }
            }
        }
        for (i, r) in rounds.iter_mut().enumerate() {
            if !r.is_empty() {
                r.sort_by(f64::total_cmp);
                program_ns[i] = Some(median(r));
            }
        }
    }
    let _ = idle.kill();
    let _ = idle.wait();
    let med: Vec<f64> = samples
        .iter_mut()
        .map(|s| {
            s.sort_by(f64::total_cmp);
            median(s)
        })
        .collect();
    let base = med[0];
    let added = |c: ReadConfig| configs.iter().position(|x| *x == c).map(|i| med[i] - base);
    let shown = format!("kk-workload read_loop --count {READS}");
    for (i, &config) in configs.iter().enumerate() {
        rows.push(Row::new(
            format!("read(): {}", config.label()),
            med[i],
            "ns/call",
            &shown,
        ));
    }
    let floor = added(ReadConfig::Floor).unwrap_or(f64::NAN);
    if let Some(kk) = added(ReadConfig::Kernelkite) {
        println!("    added per read(): floor {floor:.1} ns, kernelkite {kk:.1} ns");
        rows.push(Row::new(
            "read(): kernelkite added cost / floor added cost",
            kk / floor,
            "×",
            &shown,
        ));
        if let Some(clock) = added(ReadConfig::ClockFloor) {
            rows.push(Row::new(
                "read(): clock floor added cost / floor added cost",
                clock / floor,
                "×",
                &shown,
            ));
            rows.push(Row::new(
                "read(): kernelkite added cost / clock floor added cost",
                kk / clock,
                "×",
                &shown,
            ));
        }
        for peer in [ReadConfig::Bpftrace, ReadConfig::Syscount] {
            if let Some(p) = added(peer) {
                rows.push(
                    Row::new(
                        format!(
                            "read(): kernelkite added cost / {} added cost",
                            peer.label()
                        ),
                        kk / p,
                        "×",
                        &shown,
                    )
                    .target(1.0),
                );
            }
        }
    }
    let prog = |c: ReadConfig| {
        configs
            .iter()
            .position(|x| *x == c)
            .and_then(|i| program_ns[i])
    };
    let stats_shown = format!(
        "{shown}, kernel.bpf_stats_enabled=1: run_time_ns of the tracer's programs / reads"
    );
    for (i, &config) in configs.iter().enumerate() {
        if let Some(ns) = program_ns[i] {
            rows.push(Row::new(
                format!("BPF program time per read(): {}", config.label()),
                ns,
                "ns/call",
                &stats_shown,
            ));
        }
    }
    if let (Some(kk), Some(fl)) = (prog(ReadConfig::Kernelkite), prog(ReadConfig::Floor)) {
        rows.push(Row::new(
            "BPF program time per read(): kernelkite / floor",
            kk / fl,
            "×",
            &stats_shown,
        ));
        if let Some(clock) = prog(ReadConfig::ClockFloor) {
            rows.push(Row::new(
                "BPF program time per read(): clock floor / floor",
                clock / fl,
                "×",
                &stats_shown,
            ));
            // Issue 15: the cost of timing a syscall is two clock reads, which no
            // tracer of syscall latency avoids; the target is against that floor.
            rows.push(
                Row::new(
                    "BPF program time per read(): kernelkite / clock floor",
                    kk / clock,
                    "×",
                    &stats_shown,
                )
                .target(CLOCK_FLOOR_RATIO_TARGET),
            );
        }
        if let Some(u) = prog(ReadConfig::Untargeted) {
            rows.push(
                Row::new(
                    "BPF program time per read(): untargeted / floor",
                    u / fl,
                    "×",
                    &stats_shown,
                )
                .target(UNTARGETED_RATIO_TARGET),
            );
            if let Some(bit) = prog(ReadConfig::BitFloor) {
                rows.push(Row::new(
                    "BPF program time per read(): bit floor / floor",
                    bit / fl,
                    "×",
                    &stats_shown,
                ));
                rows.push(Row::new(
                    "BPF program time per read(): untargeted / bit floor",
                    u / bit,
                    "×",
                    &stats_shown,
                ));
            }
        }
        for peer in [ReadConfig::Bpftrace, ReadConfig::Syscount] {
            if let Some(p) = prog(peer) {
                rows.push(
                    Row::new(
                        format!("BPF program time per read(): kernelkite / {}", peer.label()),
                        kk / p,
                        "×",
                        &stats_shown,
                    )
                    .target(1.0),
                );
            }
        }
    }
    if let Some(u) = added(ReadConfig::Untargeted) {
        rows.push(
            Row::new(
                "read(): untargeted added cost / floor added cost",
                u / floor,
                "×",
                &shown,
            )
            .target(UNTARGETED_RATIO_TARGET),
        );
    }

    // perf bench sched pipe, pinned.
    if have("perf") {
        let mut pipe_configs = vec![
            PipeConfig::Untraced,
            PipeConfig::ClockFloor,
            PipeConfig::SchedFloor,
            PipeConfig::Kernelkite,
            PipeConfig::KernelkiteNoWakers,
            PipeConfig::KernelkiteNoRuntime,
            PipeConfig::KernelkiteStacks,
        ];
        if have("runqlat") {
            pipe_configs.push(PipeConfig::Runqlat);
        }
        if have("offcputime") {
            pipe_configs.push(PipeConfig::Offcputime);
        }
        let mut pipe: Vec<Vec<f64>> = vec![Vec::new(); pipe_configs.len()];
        for round in 0..runs {
            print!("    sched pipe round {}/{runs}:", round + 1);
            pipe_round(ctx, &pipe_configs, &mut pipe)?;
            println!(" usecs/op");
        }
        let pmed: Vec<f64> = pipe
            .iter_mut()
            .map(|s| {
                s.sort_by(f64::total_cmp);
                median(s)
            })
            .collect();
        let shown = format!("taskset -c 0 perf bench sched pipe -T -l {PIPE_LOOPS}");
        let med = |c: PipeConfig| pipe_configs.iter().position(|&p| p == c).map(|i| pmed[i]);
        for (i, c) in pipe_configs.iter().enumerate() {
            rows.push(Row::new(c.label(), pmed[i], "µs/op", &shown));
        }
        let untraced = pmed[0];
        let added = |c: PipeConfig| med(c).map(|v| v - untraced);
        // What one part of kernelkite costs: kernelkite against itself without it.
        for (what, without) in [
            (
                "sched pipe: waker aggregation's cost (kernelkite − kernelkite with KERNELKITE_WAKERS=off)",
                PipeConfig::KernelkiteNoWakers,
            ),
            (
                "sched pipe: reading sum_exec_runtime's cost (kernelkite − kernelkite with KERNELKITE_TASK_RUNTIME=off)",
                PipeConfig::KernelkiteNoRuntime,
            ),
        ] {
            if let (Some(on), Some(off)) = (med(PipeConfig::Kernelkite), med(without)) {
                rows.push(Row::new(what, on - off, "µs/op", &shown));
            }
        }
        for (what, ours, peer, target) in [
            (
                "sched pipe: kernelkite added cost / runqlat added cost",
                PipeConfig::Kernelkite,
                PipeConfig::Runqlat,
                1.0,
            ),
            (
                "sched pipe: clock floor added cost / runqlat added cost",
                PipeConfig::ClockFloor,
                PipeConfig::Runqlat,
                1.0,
            ),
            (
                "sched pipe: kernelkite --stacks added cost / offcputime added cost",
                PipeConfig::KernelkiteStacks,
                PipeConfig::Offcputime,
                STACKS_VS_OFFCPUTIME_TARGET,
            ),
        ] {
            if let (Some(a), Some(b)) = (added(ours), added(peer)) {
                rows.push(Row::new(what, a / b, "×", &shown).target(target));
            }
        }
        // Issue 15's every-hook target in wall time, beside its BPF-time rows: what
        // kernelkite adds to an operation against what runqlat and the clock floor add.
        let every_hook = (added(PipeConfig::Kernelkite))
            .zip(added(PipeConfig::Runqlat))
            .zip(added(PipeConfig::ClockFloor));
        if let Some(((ours, runqlat), floor)) = every_hook {
            rows.push(Row::new(
                "sched pipe, wall time: kernelkite added cost / (runqlat + clock floor added cost)",
                ours / (runqlat + floor),
                "×",
                &shown,
            ));
        }
        rows.extend(pipe_program_times(ctx, &pipe_configs)?);
        if pipe_configs.contains(&PipeConfig::Runqlat) {
            rows.extend(pipe_side_by_side(ctx)?);
        }
    } else {
        rows.push(Row::missing(
            "sched pipe",
            "perf is not installed (linux-perf)",
            "perf bench sched pipe",
        ));
    }

    rows.push(start_time(ctx)?);
    rows.extend(tracer_rss(ctx)?);
    // Issue 15's whole-machine rows: no target filter (the agent), against syscount -L
    // and runqlat also tracing every process (the agent group shows them too).
    if !ctx.opts.groups.iter().any(|g| g == "agent") {
        println!("==> whole machine: kernelkite agent, syscount -L and runqlat, no target filter");
        rows.extend(super::agent::cost_benchmarks(ctx)?);
    }
    Ok(rows)
}

/// One more sched-pipe run of kernelkite and runqlat with kernel BPF statistics on: the
/// time their programs ran per operation, kernelkite's split into its scheduler hooks
/// (what runqlat has) and its syscall hooks (four syscalls per operation, timed with two
/// clock reads each, which runqlat does not do).
fn pipe_program_times(ctx: &Ctx, configs: &[PipeConfig]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    if !configs.contains(&PipeConfig::Runqlat) {
        return Ok(rows);
    }
    let Some(_stats) = BpfStats::enable() else {
        return Ok(rows);
    };
    let per_op = |programs: &[ProgramTime], keep: &dyn Fn(&str) -> bool| {
        programs
            .iter()
            .filter(|p| keep(&p.name))
            .map(|p| p.run_time_ns)
            .sum::<u64>() as f64
            / PIPE_LOOPS as f64
    };
    let shown = format!(
        "taskset -c 0 perf bench sched pipe -T -l {PIPE_LOOPS}, kernel.bpf_stats_enabled=1: run_time_ns of the tracer's programs / operations"
    );
    // STATS_ROUNDS interleaved rounds; of each configuration the run whose programs'
    // total is the median.
    let measured = [
        PipeConfig::Kernelkite,
        PipeConfig::KernelkiteNoRuntime,
        PipeConfig::KernelkiteNoWakers,
        PipeConfig::Runqlat,
        PipeConfig::ClockFloor,
        PipeConfig::SchedFloor,
        PipeConfig::WakerFloor,
    ];
    let mut runs: Vec<Vec<Vec<ProgramTime>>> = (0..measured.len()).map(|_| Vec::new()).collect();
    for _ in 0..STATS_ROUNDS {
        for (i, &config) in measured.iter().enumerate() {
            if let (_, Some(programs)) = pipe_run(ctx, config)? {
                runs[i].push(programs);
            }
        }
    }
    let mut medians = runs.into_iter().map(|mut r| {
        r.sort_by_key(|programs| programs.iter().map(|p| p.run_time_ns).sum::<u64>());
        let middle = r.len() / 2;
        (!r.is_empty()).then(|| r.swap_remove(middle))
    });
    let mut next = || medians.next().flatten();
    let (ours, no_runtime, no_wakers) = (next(), next(), next());
    let (runqlat, clock_floor, sched_floor, waker_floor) = (next(), next(), next(), next());
    let (Some(ours), Some(runqlat)) = (ours, runqlat) else {
        return Ok(rows);
    };
    let is_syscall_hook = |name: &str| name.starts_with("sys_");
    let all = per_op(&ours, &|_| true);
    let sched = per_op(&ours, &|n| !is_syscall_hook(n));
    let peer = per_op(&runqlat, &|_| true);
    rows.push(Row::new(
        "BPF program time per sched-pipe op: kernelkite, every hook",
        all,
        "ns/op",
        &shown,
    ));
    rows.push(Row::new(
        "BPF program time per sched-pipe op: kernelkite, scheduler hooks",
        sched,
        "ns/op",
        &shown,
    ));
    if let Some(no_runtime) = &no_runtime {
        // Issue 21: the switch hook's read of the outgoing task's se.sum_exec_runtime
        // (and the on_cpu/steal split it feeds), against the same hooks timing on_cpu by
        // the clock.
        let sched_without = per_op(no_runtime, &|n| !is_syscall_hook(n));
        rows.push(Row::new(
            "BPF program time per sched-pipe op: kernelkite scheduler hooks without the sum_exec_runtime read (KERNELKITE_TASK_RUNTIME=off)",
            sched_without,
            "ns/op",
            &shown,
        ));
        rows.push(Row::new(
            "BPF program time per sched-pipe op: the sum_exec_runtime read and split (scheduler hooks − without)",
            sched - sched_without,
            "ns/op",
            &shown,
        ));
    }
    if let Some(no_wakers) = &no_wakers {
        // Issue 12: waker aggregation (sched_waking, the WAKERS update at sched_wakeup,
        // the irq/softirq/hrtimer notes), against the same hooks with it off.
        let without = per_op(no_wakers, &|_| true);
        rows.push(Row::new(
            "BPF program time per sched-pipe op: kernelkite, every hook, waker aggregation off (KERNELKITE_WAKERS=off)",
            without,
            "ns/op",
            &shown,
        ));
        rows.push(Row::new(
            "BPF program time per sched-pipe op: waker aggregation (every hook − with it off)",
            all - without,
            "ns/op",
            &shown,
        ));
    }
    rows.push(Row::new(
        "BPF program time per sched-pipe op: kernelkite, sys_enter/sys_exit",
        all - sched,
        "ns/op",
        &shown,
    ));
    rows.push(Row::new(
        "BPF program time per sched-pipe op: libbpf-tools runqlat",
        peer,
        "ns/op",
        &shown,
    ));
    rows.push(
        Row::new(
            "BPF program time per sched-pipe op: kernelkite scheduler hooks / runqlat",
            sched / peer,
            "×",
            &shown,
        )
        .target(SCHED_VS_RUNQLAT_TARGET),
    );
    // The scheduler floor: what any tracer that splits each thread's time at its
    // switches and wakeups pays at least. The waker floor: the least a tracer does that
    // also says who ended each sleep (issue 12), which runqlat does not, so the
    // scheduler target's floor for kernelkite.
    let sched_floor = sched_floor.map(|f| per_op(&f, &|_| true));
    let waker_floor = waker_floor.map(|f| per_op(&f, &|_| true));
    for (name, floor) in [
        ("scheduler floor", sched_floor),
        ("waker floor", waker_floor),
    ] {
        let Some(floor) = floor else {
            continue;
        };
        for (what, value, unit) in [
            (name.to_string(), floor, "ns/op"),
            (format!("{name} / runqlat"), floor / peer, "×"),
            (
                format!("kernelkite scheduler hooks / {name}"),
                sched / floor,
                "×",
            ),
        ] {
            rows.push(Row::new(
                format!("BPF program time per sched-pipe op: {what}"),
                value,
                unit,
                &shown,
            ));
        }
    }
    if let (Some(floor), Some(no_wakers)) = (sched_floor, &no_wakers) {
        let sched_no_wakers = per_op(no_wakers, &|n| !is_syscall_hook(n));
        rows.push(Row::new(
            "BPF program time per sched-pipe op: kernelkite scheduler hooks, waker aggregation off / scheduler floor",
            sched_no_wakers / floor,
            "×",
            &shown,
        ));
    }
    if let Some(clock) = &clock_floor {
        // Issue 15: every hook against runqlat plus what timing the op's four syscalls
        // costs at least (the clock floor's programs on the same op).
        let clock = per_op(clock, &|_| true);
        rows.push(Row::new(
            "BPF program time per sched-pipe op: clock floor (the four syscalls timed)",
            clock,
            "ns/op",
            &shown,
        ));
        rows.push(
            Row::new(
                "BPF program time per sched-pipe op: kernelkite, every hook / (runqlat + clock floor)",
                all / (peer + clock),
                "×",
                &shown,
            )
            .target(1.0),
        );
    }
    Ok(rows)
}

/// Issue 15's "every hook" target side by side: kernelkite (`trace --follow`), runqlat
/// and the clock floor attached at once to each of SIDE_BY_SIDE_ROUNDS sched-pipe runs, so all
/// three run on the same operations under the same conditions (the separate runs above
/// differ by a few percent from run to run). Each tracer's BPF program time from just
/// before the workload starts to its end, per operation; the median round's ratio.
fn pipe_side_by_side(ctx: &Ctx) -> Result<Vec<Row>> {
    let Some(_stats) = BpfStats::enable() else {
        return Ok(Vec::new());
    };
    let total = |pid: u32| -> u64 {
        (bpf_program_times(pid).unwrap_or_default().iter())
            .map(|p| p.1)
            .sum()
    };
    let mut rounds: Vec<[f64; 3]> = Vec::new();
    for _ in 0..SIDE_BY_SIDE_ROUNDS {
        let mut shell = gated_pipe_bench(Stdio::null())?;
        let target = shell.id().to_string();
        let mut ours = Command::new(&ctx.kernelkite);
        ours.args(["trace", "--follow", "--pid", &target]);
        let mut clock = Command::new(&ctx.kernelkite);
        clock.args(["bench-floor", "--clock", "--pid", &target]);
        let tracers = [
            Tracer::start(ours)?,
            Tracer::start(Command::new("runqlat"))?,
            Tracer::start(clock)?,
        ];
        let before: Vec<u64> = tracers.iter().map(|t| total(t.child.id())).collect();
        let pollers: Vec<ProgramTimePoller> = (tracers.iter())
            .map(|t| ProgramTimePoller::start(t.child.id()))
            .collect();
        shell.stdin.take().unwrap().write_all(b"go\n")?;
        let status = shell.wait()?;
        let after: Vec<Option<u64>> = (pollers.into_iter())
            .map(|p| p.finish().map(|ps| ps.iter().map(|p| p.run_time_ns).sum()))
            .collect();
        for t in tracers {
            t.stop();
        }
        if !status.success() {
            bail!("perf bench sched pipe failed ({status})");
        }
        let per_op =
            |i: usize| after[i].map(|a| a.saturating_sub(before[i]) as f64 / PIPE_LOOPS as f64);
        if let (Some(k), Some(r), Some(c)) = (per_op(0), per_op(1), per_op(2)) {
            rounds.push([k, r, c]);
        }
    }
    rounds.sort_by(|a, b| (a[0] / (a[1] + a[2])).total_cmp(&(b[0] / (b[1] + b[2]))));
    let Some(&[ours, runqlat, clock]) = rounds.get(rounds.len() / 2) else {
        return Ok(Vec::new());
    };
    let shown = format!(
        "kernelkite trace --follow, runqlat and bench-floor --clock at once on taskset -c 0 perf bench sched pipe -T -l {PIPE_LOOPS}, kernel.bpf_stats_enabled=1: each one's run_time_ns / operations (median of {SIDE_BY_SIDE_ROUNDS} rounds)"
    );
    Ok(vec![
        Row::new(
            "BPF program time per sched-pipe op, side by side: kernelkite, every hook",
            ours,
            "ns/op",
            &shown,
        ),
        Row::new(
            "BPF program time per sched-pipe op, side by side: runqlat",
            runqlat,
            "ns/op",
            &shown,
        ),
        Row::new(
            "BPF program time per sched-pipe op, side by side: clock floor",
            clock,
            "ns/op",
            &shown,
        ),
        Row::new(
            "BPF program time per sched-pipe op, side by side: kernelkite, every hook / (runqlat + clock floor)",
            ours / (runqlat + clock),
            "×",
            &shown,
        )
        .target(1.0),
    ])
}

/// From spawning `kernelkite trace` to its "hooks live" line (median of the runs).
fn start_time(ctx: &Ctx) -> Result<Row> {
    let mut idle = Command::new(&ctx.workload)
        .args(["idle", "--seconds", "3600"])
        .stdout(Stdio::null())
        .spawn()?;
    let mut ms = Vec::new();
    for _ in 0..ctx.opts.runs {
        let t0 = Instant::now();
        let mut child = Command::new(&ctx.kernelkite)
            .args(["trace", "--pid", &idle.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line)?;
        if !line.contains("hooks live") {
            bail!("kernelkite trace did not go live: {line}");
        }
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        child.wait()?;
    }
    let _ = idle.kill();
    let _ = idle.wait();
    ms.sort_by(f64::total_cmp);
    Ok(Row::new(
        "kernelkite trace: spawn to all hooks live",
        median(&ms),
        "ms",
        "kernelkite trace --pid <idle pid>",
    )
    .target(START_TARGET_MS))
}

/// The tracer's RSS, sampled every second while it traces a busy read loop.
fn tracer_rss(ctx: &Ctx) -> Result<Vec<Row>> {
    let seconds = ctx.opts.seconds.max(5.0);
    // Enough reads to keep the loop busy for `seconds` (at ~0.5 µs per traced call).
    let count = (seconds * 1.5e6) as u64;
    let (child, stdin, lines, pid) =
        spawn_gated(&ctx.workload, &["read_loop", "--count", &count.to_string()])?;
    let mut tracer = Command::new(&ctx.kernelkite);
    tracer.args(["trace", "--pid", &pid.to_string()]);
    let tracer = Tracer::start(tracer)?;
    let tracer_pid = tracer.child.id();
    let go = std::thread::spawn(move || release(child, stdin, lines));
    let mut rss_kb = Vec::new();
    let t0 = Instant::now();
    while !go.is_finished() && t0.elapsed().as_secs_f64() < seconds * 4.0 {
        if let Some(kb) = vm_rss_kb(tracer_pid) {
            rss_kb.push(kb);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let result = go
        .join()
        .map_err(|_| anyhow::anyhow!("workload thread panicked"))??;
    tracer.stop();
    let calls_per_s = READS.max(count) as f64 / json_f64(&result, "elapsed_ns")? * 1e9;
    let max_mb = rss_kb.iter().copied().max().unwrap_or(0) as f64 / 1024.0;
    let growth_mb = match (rss_kb.get(1), rss_kb.last()) {
        (Some(a), Some(b)) => (*b as f64 - *a as f64) / 1024.0,
        _ => 0.0,
    };
    let shown = format!(
        "kernelkite trace --pid <read_loop> for {elapsed:.0} s at {:.0}k syscalls/s",
        calls_per_s / 1e3
    );
    Ok(vec![
        Row::new(
            "kernelkite trace: max RSS while tracing",
            max_mb,
            "MB",
            &shown,
        )
        .target(RSS_TARGET_MB),
        Row::new(
            "kernelkite trace: RSS growth after the first second",
            growth_mb,
            "MB",
            &shown,
        ),
    ])
}

/// A cgroup v2 directory made for the benchmark, removed when dropped.
struct BenchCgroup(std::path::PathBuf);

impl BenchCgroup {
    fn new() -> Result<BenchCgroup> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        let mount = mountinfo
            .lines()
            .find_map(|l| {
                let (left, right) = l.split_once(" - ")?;
                if right.split(' ').next()? != "cgroup2" {
                    return None;
                }
                Some(std::path::PathBuf::from(left.split(' ').nth(4)?))
            })
            .context("no cgroup v2 mount")?;
        let dir = mount.join(format!("kk-bench-{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        Ok(BenchCgroup(dir))
    }
}

impl Drop for BenchCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `--only cgroup`: a read loop outside the traced set while `trace --cgroup` traces a
/// cgroup holding one idle process, against `trace --pid` of that process: the target
/// check is the same bit test, so the ratio is the cost of selecting by cgroup.
pub(super) fn cgroup_benchmarks(ctx: &Ctx) -> Result<Vec<Row>> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(vec![Row::missing(
            "trace --cgroup overhead",
            "needs root",
            "cargo xtask bench --only cgroup",
        )]);
    }
    mount_tracefs();
    let cgroup = BenchCgroup::new()?;
    let mut idle = Command::new(&ctx.workload)
        .args(["idle", "--seconds", "3600"])
        .stdout(Stdio::null())
        .spawn()
        .context("cannot start the idle workload")?;
    std::fs::write(cgroup.0.join("cgroup.procs"), idle.id().to_string())?;
    let configs = [
        ReadConfig::Untraced,
        ReadConfig::Floor,
        ReadConfig::Untargeted,
        ReadConfig::UntargetedCgroup,
    ];
    let runs = ctx.opts.runs;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..runs {
        print!("    read() round {}/{runs}:", round + 1);
        for (i, &config) in configs.iter().enumerate() {
            let (ns, _) = read_run_beside(ctx, config, idle.id(), Some(&cgroup.0))?;
            print!(" {ns:.0}");
            let _ = std::io::stdout().flush();
            samples[i].push(ns);
        }
        println!(" ns/call");
    }
    let mut program_ns: Vec<Option<f64>> = vec![None; configs.len()];
    if let Some(_stats) = BpfStats::enable() {
        for (i, &config) in configs.iter().enumerate().skip(1) {
            program_ns[i] = read_run_beside(ctx, config, idle.id(), Some(&cgroup.0))?.1;
        }
    }
    let _ = idle.kill();
    let _ = idle.wait();
    let med: Vec<f64> = (samples.iter_mut())
        .map(|s| {
            s.sort_by(f64::total_cmp);
            median(s)
        })
        .collect();
    let shown = format!("kk-workload read_loop --count {READS}");
    let stats_shown = format!(
        "{shown}, kernel.bpf_stats_enabled=1: run_time_ns of the tracer's programs / reads"
    );
    let mut rows = Vec::new();
    for (i, &config) in configs.iter().enumerate() {
        rows.push(Row::new(
            format!("read(): {}", config.label()),
            med[i],
            "ns/call",
            &shown,
        ));
        if let Some(ns) = program_ns[i] {
            rows.push(Row::new(
                format!("BPF program time per read(): {}", config.label()),
                ns,
                "ns/call",
                &stats_shown,
            ));
        }
    }
    if let (Some(pid), Some(cg)) = (program_ns[2], program_ns[3]) {
        rows.push(
            Row::new(
                "BPF program time per read(): untargeted under --cgroup / under --pid",
                cg / pid,
                "×",
                &stats_shown,
            )
            .target(1.05),
        );
    }
    let (base, pid, cg) = (med[0], med[2], med[3]);
    rows.push(Row::new(
        "read(): untargeted added cost under --cgroup / under --pid",
        (cg - base) / (pid - base),
        "×",
        &shown,
    ));
    Ok(rows)
}
