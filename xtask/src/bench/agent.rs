//! `kernelkite agent`'s cost, whole machine (issue 14):
//!
//! - CPU at `--interval 1` on a busy machine: 500 extra idle processes
//!   (`kk-workload idle_tree --count 500`) and a `dd bs=1` loop, scraped every 15 s as
//!   Prometheus would; utime + stime from /proc/PID/stat over [`CPU_SPAN`] after
//!   [`WARM_UP`], and its RSS at the end.
//! - BPF program time per syscall and per context switch, with
//!   `kernel.bpf_stats_enabled=1`, against libbpf-tools `syscount -L` and `runqlat`
//!   run system-wide, in the same run: each tracer's `run_time_ns` and `run_cnt` (from
//!   its /proc/PID/fdinfo) before and after a `kk-workload read_loop` and a pinned
//!   `perf bench sched pipe -T`. Everything on the machine runs the hooks meanwhile, so
//!   the divisor is the programs' own run count: per syscall, the time of the
//!   `sys_*` (raw_syscalls) programs over the runs of one of them; per context switch,
//!   the time of every other program over the runs of the `*switch*` one.
//! - Wall time per read() and per sched-pipe op with each attached (kernel statistics
//!   off), rounds interleaved, medians.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::ebpf::{bpf_program_name, have, mount_tracefs, BpfStats, Tracer, PIPE_LOOPS, READS};
use super::top::{children, process_count};
use super::{json_f64, median, release, spawn_gated, stat_fields, vm_rss_kb, Ctx, Row};

/// The figure (the OpenTelemetry eBPF profiler's published one): at most 1 % of
/// one core at 1 Hz with 500 processes.
const CPU_TARGET_PERCENT: f64 = 1.0;
const IDLE_PROCS: u64 = 500;
const WARM_UP: Duration = Duration::from_secs(10);
const CPU_SPAN: Duration = Duration::from_secs(60);
const SCRAPE_EVERY: Duration = Duration::from_secs(15);

/// A `kernelkite agent --listen 127.0.0.1:0` whose hooks are live, its stderr copied to
/// a log file. Killed on drop unless [`RunningAgent::terminate`] ended it.
pub(crate) struct RunningAgent {
    child: Child,
    /// The port it picked (its start line says which).
    pub(crate) port: u16,
    pub(crate) log: PathBuf,
    ended: mpsc::Receiver<()>,
}

impl RunningAgent {
    pub(crate) fn start(kernelkite: &Path, extra: &[&str], log: &Path) -> Result<RunningAgent> {
        let mut child = Command::new(kernelkite)
            .args(["agent", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start kernelkite agent")?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (port_tx, port_rx) = mpsc::channel();
        let (ended_tx, ended) = mpsc::channel();
        let mut file = std::fs::File::create(log)?;
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = writeln!(file, "{line}");
                // level=info msg="tracing the whole machine" hooks=.. listen=127.0.0.1:PORT
                if line.contains("msg=\"tracing ") {
                    let port = (line.split_whitespace())
                        .find_map(|w| w.strip_prefix("listen="))
                        .and_then(|a| a.rsplit(':').next()?.parse::<u16>().ok());
                    let _ = port_tx.send(port);
                }
            }
            let _ = ended_tx.send(());
        });
        let mut agent = RunningAgent {
            child,
            port: 0,
            log: log.to_path_buf(),
            ended,
        };
        match port_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(port)) => agent.port = port,
            _ => bail!(
                "kernelkite agent did not start tracing within 60 s; see {}",
                log.display()
            ),
        }
        Ok(agent)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GET /metrics: the exposition text.
    pub(crate) fn scrape(&self) -> Result<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        let (head, body) = answer.split_once("\r\n\r\n").context("no HTTP header")?;
        if !head.starts_with("HTTP/1.1 200") {
            bail!("/metrics: {}", head.lines().next().unwrap_or(""));
        }
        Ok(body.to_string())
    }

    /// SIGTERM, then wait up to `wait`: its exit status (`None` when it had to be
    /// killed) and the seconds it took.
    pub(crate) fn terminate(&mut self, wait: Duration) -> Result<(Option<ExitStatus>, f64)> {
        let t = Instant::now();
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break Some(status);
            }
            if t.elapsed() > wait {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = self.ended.recv_timeout(Duration::from_secs(5));
        Ok((status, t.elapsed().as_secs_f64()))
    }
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The value of the unlabelled sample `name` in an exposition.
pub(crate) fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Sample lines (not comments) in an exposition: the series a scrape stores.
pub(crate) fn sample_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// utime + stime of `pid`, seconds.
fn cpu_s(pid: u32) -> Option<f64> {
    let f = stat_fields(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((f[0] + f[1]) as f64 / hz)
}

/// A `sh` loop in its own process group, killed with it on drop.
struct ShLoop(Child);

impl ShLoop {
    fn start(script: &str) -> Result<ShLoop> {
        use std::os::unix::process::CommandExt as _;
        let child = Command::new("sh")
            .args(["-c", script])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start sh")?;
        Ok(ShLoop(child))
    }
}

impl Drop for ShLoop {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; the group is our child's.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

pub(super) fn benchmarks(ctx: &Ctx) -> Result<Vec<Row>> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(vec![Row::missing(
            "kernelkite agent",
            "needs root",
            "cargo xtask bench --only agent",
        )]);
    }
    mount_tracefs();
    let mut rows = cpu_benchmark(ctx)?;
    rows.extend(cost_benchmarks(ctx)?);
    Ok(rows)
}

/// The agent's steady-state CPU and its RSS on a machine with 500 more processes and a
/// syscall load.
fn cpu_benchmark(ctx: &Ctx) -> Result<Vec<Row>> {
    let name = format!("agent CPU, whole machine @ 1 s, +{IDLE_PROCS} idle procs + dd bs=1 loop");
    let rss_name = "agent RSS after the CPU run";
    let shown = format!(
        "kernelkite agent --interval 1, kk-workload idle_tree --count {IDLE_PROCS} and a dd bs=1 loop; /metrics every {} s; utime+stime over {} s after {} s",
        SCRAPE_EVERY.as_secs(),
        CPU_SPAN.as_secs(),
        WARM_UP.as_secs()
    );
    let mut idle = Command::new(&ctx.workload)
        .args(["idle_tree", "--count", &IDLE_PROCS.to_string(), "--seconds"])
        .arg(format!("{}", (WARM_UP + CPU_SPAN).as_secs() + 60))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("starting kk-workload idle_tree")?;
    let ipid = idle.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(20);
    while children(ipid).len() < IDLE_PROCS as usize && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // About 150,000 one-byte reads and writes a second, a few processes a second.
    let load = ShLoop::start(
        "while :; do dd if=/dev/zero of=/dev/null bs=1 count=20000 2>/dev/null; sleep 0.2; done",
    )?;
    let result = (|| -> Result<(f64, f64, usize)> {
        let mut agent = RunningAgent::start(
            &ctx.kernelkite,
            &["--interval", "1"],
            &ctx.work.join("agent-cpu.stderr"),
        )?;
        let pid = agent.pid();
        std::thread::sleep(WARM_UP);
        let (t0, c0) = (Instant::now(), cpu_s(pid).context("reading its stat")?);
        while t0.elapsed() < CPU_SPAN {
            agent.scrape()?;
            std::thread::sleep(SCRAPE_EVERY.min(CPU_SPAN.saturating_sub(t0.elapsed())));
        }
        let (t1, c1) = (Instant::now(), cpu_s(pid).context("reading its stat")?);
        let rss_mb = vm_rss_kb(pid).unwrap_or(0) as f64 / 1024.0;
        let procs = process_count();
        let (status, _) = agent.terminate(Duration::from_secs(30))?;
        if status.is_none_or(|s| !s.success()) {
            bail!("the agent did not exit cleanly on SIGTERM ({status:?})");
        }
        Ok((100.0 * (c1 - c0) / (t1 - t0).as_secs_f64(), rss_mb, procs))
    })();
    drop(load);
    for child in children(ipid) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(child, libc::SIGKILL) };
    }
    let _ = idle.kill();
    let _ = idle.wait();
    match result {
        Ok((percent, rss_mb, procs)) => {
            println!(
                "    {procs} processes on the machine, agent CPU {percent:.2} % of a core, RSS {rss_mb:.1} MiB"
            );
            Ok(vec![
                Row::new(name, percent, "% of a core", &shown).target(CPU_TARGET_PERCENT),
                Row::new(rss_name, rss_mb, "MiB", &shown),
            ])
        }
        Err(e) => Ok(vec![
            Row::missing(name, format!("{e:#}"), &shown),
            Row::missing(rss_name, format!("{e:#}"), &shown),
        ]),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Config {
    Untraced,
    Agent,
    Syscount,
    Runqlat,
}

impl Config {
    fn label(self) -> &'static str {
        match self {
            Config::Untraced => "untraced",
            Config::Agent => "kernelkite agent (whole machine)",
            Config::Syscount => "libbpf-tools syscount -L (system-wide)",
            Config::Runqlat => "libbpf-tools runqlat (system-wide)",
        }
    }
}

enum Attached {
    Agent(RunningAgent),
    Peer(Tracer),
}

impl Attached {
    fn start(ctx: &Ctx, config: Config) -> Result<Option<Attached>> {
        Ok(match config {
            Config::Untraced => None,
            Config::Agent => Some(Attached::Agent(RunningAgent::start(
                &ctx.kernelkite,
                &[],
                &ctx.work.join("agent-cost.stderr"),
            )?)),
            Config::Syscount => {
                let mut c = Command::new("syscount");
                c.arg("-L");
                Some(Attached::Peer(Tracer::start(c)?))
            }
            Config::Runqlat => Some(Attached::Peer(Tracer::start(Command::new("runqlat"))?)),
        })
    }

    fn pid(&self) -> u32 {
        match self {
            Attached::Agent(a) => a.pid(),
            Attached::Peer(t) => t.child.id(),
        }
    }

    fn stop(self) -> Result<()> {
        match self {
            Attached::Agent(mut a) => {
                a.terminate(Duration::from_secs(30))?;
            }
            Attached::Peer(t) => t.stop(),
        }
        Ok(())
    }
}

/// `run_time_ns` and `run_cnt` of one BPF program.
#[derive(Clone, Debug, Default)]
struct ProgStat {
    name: String,
    run_time_ns: u64,
    run_cnt: u64,
}

/// The BPF programs `pid` holds, by id (fdinfo; counted while kernel.bpf_stats_enabled
/// is 1), named once per id.
fn prog_stats(pid: u32, names: &mut HashMap<u32, String>) -> HashMap<u32, ProgStat> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let field = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(ns), Some(cnt)) =
            (field("prog_id:"), field("run_time_ns:"), field("run_cnt:"))
        {
            let id = id as u32;
            let name = names
                .entry(id)
                .or_insert_with(|| bpf_program_name(id).unwrap_or_default())
                .clone();
            out.insert(
                id,
                ProgStat {
                    name,
                    run_time_ns: ns,
                    run_cnt: cnt,
                },
            );
        }
    }
    out
}

/// What each program did between two readings.
fn delta(before: &HashMap<u32, ProgStat>, after: &HashMap<u32, ProgStat>) -> Vec<ProgStat> {
    after
        .iter()
        .map(|(id, a)| {
            let b = before.get(id).cloned().unwrap_or_default();
            ProgStat {
                name: a.name.clone(),
                run_time_ns: a.run_time_ns.saturating_sub(b.run_time_ns),
                run_cnt: a.run_cnt.saturating_sub(b.run_cnt),
            }
        })
        .collect()
}

fn is_syscall_hook(name: &str) -> bool {
    name.starts_with("sys_")
}

/// BPF time per syscall: the raw_syscalls programs' time over the runs of one of them.
fn per_syscall_ns(d: &[ProgStat]) -> Option<f64> {
    let sys = d.iter().filter(|p| is_syscall_hook(&p.name));
    let calls = sys.clone().map(|p| p.run_cnt).max()?;
    (calls > 0).then(|| sys.map(|p| p.run_time_ns).sum::<u64>() as f64 / calls as f64)
}

/// BPF time per context switch: every other program's time over the switch program's
/// runs.
fn per_switch_ns(d: &[ProgStat]) -> Option<f64> {
    per_switch_ns_of(d, &|name| !is_syscall_hook(name))
}

/// The programs runqlat also has (switch and wake-up), not the agent's process
/// lifecycle and irq/softirq/hrtimer waker notes.
fn is_scheduler_hook(name: &str) -> bool {
    name.starts_with("sched_") && !name.starts_with("sched_process")
}

/// The time of the programs `keep` names over the switch program's runs.
fn per_switch_ns_of(d: &[ProgStat], keep: &dyn Fn(&str) -> bool) -> Option<f64> {
    let switches = d
        .iter()
        .filter(|p| p.name.contains("switch"))
        .map(|p| p.run_cnt)
        .max()?;
    let ns: u64 = (d.iter())
        .filter(|p| keep(&p.name))
        .map(|p| p.run_time_ns)
        .sum();
    (switches > 0).then(|| ns as f64 / switches as f64)
}

/// One config's runs: wall ns per read(), µs per sched-pipe op, and (with kernel
/// statistics on) its programs' deltas over each.
struct Sample {
    read_ns: f64,
    pipe_us: f64,
    read_progs: Vec<ProgStat>,
    pipe_progs: Vec<ProgStat>,
}

fn sample(ctx: &Ctx, config: Config) -> Result<Sample> {
    let attached = Attached::start(ctx, config)?;
    let pid = attached.as_ref().map(Attached::pid);
    let mut names = HashMap::new();
    let stats =
        |names: &mut HashMap<u32, String>| pid.map(|p| prog_stats(p, names)).unwrap_or_default();
    let (child, stdin, lines, _) =
        spawn_gated(&ctx.workload, &["read_loop", "--count", &READS.to_string()])?;
    let before = stats(&mut names);
    let read = release(child, stdin, lines);
    let after = stats(&mut names);
    let read_progs = delta(&before, &after);
    let before = stats(&mut names);
    let pipe = Command::new("taskset")
        .args(["-c", "0", "perf", "bench", "sched", "pipe", "-T", "-l"])
        .arg(PIPE_LOOPS.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("cannot run perf bench sched pipe");
    let after = stats(&mut names);
    let pipe_progs = delta(&before, &after);
    if let Some(a) = attached {
        a.stop()?;
    }
    let pipe = pipe?;
    if !pipe.status.success() {
        bail!("perf bench sched pipe failed ({})", pipe.status);
    }
    // "     5.123 usecs/op"
    let pipe_us = String::from_utf8_lossy(&pipe.stdout)
        .lines()
        .find_map(|l| l.trim().strip_suffix("usecs/op")?.trim().parse().ok())
        .context("perf bench printed no usecs/op")?;
    Ok(Sample {
        read_ns: json_f64(&read?, "ns_per_call")?,
        pipe_us,
        read_progs,
        pipe_progs,
    })
}

/// Per syscall and per context switch, the agent against syscount and runqlat.
pub(super) fn cost_benchmarks(ctx: &Ctx) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    if !have("perf") {
        rows.push(Row::missing(
            "agent cost per syscall and per context switch",
            "perf is not installed (linux-perf)",
            "perf bench sched pipe",
        ));
        return Ok(rows);
    }
    let mut configs = vec![Config::Untraced, Config::Agent];
    for (tool, config) in [("syscount", Config::Syscount), ("runqlat", Config::Runqlat)] {
        if have(tool) {
            configs.push(config);
        } else {
            rows.push(Row::missing(
                Config::label(config),
                "not installed (libbpf-tools)",
                tool,
            ));
        }
    }
    let runs = ctx.opts.runs;
    let mut read: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    let mut pipe: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..runs {
        print!(
            "    round {}/{runs}: read() ns/call, sched pipe µs/op:",
            round + 1
        );
        for (i, &c) in configs.iter().enumerate() {
            let s = sample(ctx, c)?;
            print!(" {:.0} {:.2},", s.read_ns, s.pipe_us);
            let _ = std::io::stdout().flush();
            read[i].push(s.read_ns);
            pipe[i].push(s.pipe_us);
        }
        println!();
    }
    let med = |v: &mut Vec<Vec<f64>>| -> Vec<f64> {
        v.iter_mut()
            .map(|s| {
                s.sort_by(f64::total_cmp);
                median(s)
            })
            .collect()
    };
    let (read, pipe) = (med(&mut read), med(&mut pipe));
    let read_shown = format!("kk-workload read_loop --count {READS}");
    let pipe_shown = format!("taskset -c 0 perf bench sched pipe -T -l {PIPE_LOOPS}");
    for (i, c) in configs.iter().enumerate() {
        rows.push(Row::new(
            format!("read(): {}", c.label()),
            read[i],
            "ns/call",
            &read_shown,
        ));
    }
    for (i, c) in configs.iter().enumerate() {
        rows.push(Row::new(
            format!("sched pipe: {}", c.label()),
            pipe[i],
            "µs/op",
            &pipe_shown,
        ));
    }
    let at = |c: Config| configs.iter().position(|&x| x == c);
    if let (Some(a), Some(s)) = (at(Config::Agent), at(Config::Syscount)) {
        rows.push(Row::new(
            "read(): agent added cost / syscount -L added cost",
            (read[a] - read[0]) / (read[s] - read[0]),
            "×",
            &read_shown,
        ));
    }
    if let (Some(a), Some(r)) = (at(Config::Agent), at(Config::Runqlat)) {
        rows.push(Row::new(
            "sched pipe: agent added cost / runqlat added cost",
            (pipe[a] - pipe[0]) / (pipe[r] - pipe[0]),
            "×",
            &pipe_shown,
        ));
    }

    // One more run of each tracer with kernel BPF statistics on.
    let Some(_stats) = BpfStats::enable() else {
        return Ok(rows);
    };
    println!("    with kernel.bpf_stats_enabled=1:");
    let mut per: HashMap<&'static str, Sample> = HashMap::new();
    for &c in configs.iter().skip(1) {
        per.insert(c.label(), sample(ctx, c)?);
    }
    let get = |c: Config| per.get(c.label());
    let stats_read = format!(
        "{read_shown}, kernel.bpf_stats_enabled=1: run_time_ns / run_cnt of the tracer's programs (machine-wide)"
    );
    let stats_pipe = format!(
        "{pipe_shown}, kernel.bpf_stats_enabled=1: run_time_ns / run_cnt of the tracer's programs (machine-wide)"
    );
    let agent_syscall = get(Config::Agent).and_then(|s| per_syscall_ns(&s.read_progs));
    let agent_switch = get(Config::Agent).and_then(|s| per_switch_ns(&s.pipe_progs));
    let agent_sched =
        get(Config::Agent).and_then(|s| per_switch_ns_of(&s.pipe_progs, &is_scheduler_hook));
    let syscount = get(Config::Syscount).and_then(|s| per_syscall_ns(&s.read_progs));
    let runqlat = get(Config::Runqlat).and_then(|s| per_switch_ns(&s.pipe_progs));
    for (what, v, shown) in [
        (
            "BPF time per syscall: kernelkite agent",
            agent_syscall,
            &stats_read,
        ),
        ("BPF time per syscall: syscount -L", syscount, &stats_read),
        (
            "BPF time per context switch: kernelkite agent (every non-syscall hook)",
            agent_switch,
            &stats_pipe,
        ),
        (
            "BPF time per context switch: kernelkite agent, sched_switch/waking/wakeup hooks (what runqlat hooks)",
            agent_sched,
            &stats_pipe,
        ),
        ("BPF time per context switch: runqlat", runqlat, &stats_pipe),
    ] {
        match v {
            Some(ns) => rows.push(Row::new(what, ns, "ns", shown)),
            None => rows.push(Row::missing(what, "no program runs counted", shown)),
        }
    }
    if let (Some(a), Some(p)) = (agent_syscall, syscount) {
        rows.push(
            Row::new(
                "BPF time per syscall: agent / syscount -L",
                a / p,
                "×",
                &stats_read,
            )
            .target(1.0),
        );
    }
    if let (Some(a), Some(p)) = (agent_switch, runqlat) {
        rows.push(
            Row::new(
                "BPF time per context switch: agent (every non-syscall hook) / runqlat",
                a / p,
                "×",
                &stats_pipe,
            )
            .target(1.0),
        );
    }
    if let (Some(a), Some(p)) = (agent_sched, runqlat) {
        rows.push(
            Row::new(
                "BPF time per context switch: agent's scheduler hooks / runqlat",
                a / p,
                "×",
                &stats_pipe,
            )
            .target(1.0),
        );
    }
    // A sched-pipe op is two switches and four syscalls: the agent's every hook per op
    // against the two peers' together (what it replaces).
    let per_op = |c: Config| {
        get(c)
            .map(|s| s.pipe_progs.iter().map(|p| p.run_time_ns).sum::<u64>() as f64)
            .map(|ns| ns / PIPE_LOOPS as f64)
    };
    if let (Some(a), Some(s), Some(r)) = (
        per_op(Config::Agent),
        per_op(Config::Syscount),
        per_op(Config::Runqlat),
    ) {
        rows.push(Row::new(
            "BPF time per sched-pipe op: agent, every hook",
            a,
            "ns/op",
            &stats_pipe,
        ));
        rows.push(Row::new(
            "BPF time per sched-pipe op: syscount -L + runqlat",
            s + r,
            "ns/op",
            &stats_pipe,
        ));
        rows.push(Row::new(
            "BPF time per sched-pipe op: agent / (syscount -L + runqlat)",
            a / (s + r),
            "×",
            &stats_pipe,
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_unlabelled_samples_and_counts_sample_lines() {
        let text =
            "# HELP kernelkite_events_lost Events lost.\n# TYPE kernelkite_events_lost counter\n\
                    kernelkite_events_lost_total 12\n\
                    kernelkite_events_lost_by_cause_total{cause=\"x\"} 3\n\
                    kernelkite_agent_process_series 20\n# EOF\n";
        assert_eq!(metric(text, "kernelkite_events_lost_total"), Some(12.0));
        assert_eq!(metric(text, "kernelkite_agent_process_series"), Some(20.0));
        assert_eq!(metric(text, "kernelkite_events_lost"), None);
        assert_eq!(sample_lines(text), 3);
    }

    #[test]
    fn costs_per_syscall_and_per_switch_divide_by_the_programs_own_runs() {
        let p = |name: &str, run_time_ns, run_cnt| ProgStat {
            name: name.into(),
            run_time_ns,
            run_cnt,
        };
        let d = vec![
            p("sys_enter", 300, 10),
            p("sys_exit", 500, 10),
            p("sched_switch", 400, 4),
            p("sched_wakeup", 200, 2),
        ];
        assert_eq!(per_syscall_ns(&d), Some(80.0));
        assert_eq!(per_switch_ns(&d), Some(150.0));
        assert_eq!(per_switch_ns(&d[..2]), None);
        let lifecycle = p("sched_process_exit", 600, 1);
        let d = [d, vec![lifecycle]].concat();
        assert_eq!(per_switch_ns(&d), Some(300.0));
        assert_eq!(per_switch_ns_of(&d, &is_scheduler_hook), Some(150.0));
    }
}
