//! `cargo xtask bench`: kernelkite's performance figures, measured (not timed tests: a
//! slow machine prints a worse figure, it does not fail). Results are printed as a table
//! with the targets from docs/PERFORMANCE.md, and appended to a file with `--append`.
//!
//! Groups (`--only GROUP[,GROUP]`, default all):
//! - `sampler`: `kernelkite --backend proc run` on `kk-workload idle_tree` (100 idle
//!   processes) at 100 ms and 10 ms. kernelkite's own CPU is read from
//!   /proc/<pid>/stat utime+stime (its threads, not its children) after it exits and
//!   before it is reaped (`waitid(WNOWAIT)`); reported as % of one core over the run and
//!   as CPU per process sample (per process per frame). The same with `--backend ebpf`
//!   at 100 ms (kernelkite's user-space side).
//! - `commands`: median wall time of `summary`, `summary --json`, `compare` and
//!   `report` on a synthetic 100,000-frame bundle written by [`write_synthetic_bundle`].
//! - `ebpf`: tracing overhead, side by side with an empty-program floor and peer tools
//!   (see `bench/ebpf.rs`; needs root; peers such as bpftrace, libbpf-tools and perf are
//!   used when installed and reported as not measured otherwise).
//!
//! - `top`: `kernelkite top` system-wide at 1 Hz in tmux with 500 extra idle processes,
//!   both backends: its steady-state CPU (see `bench/top.rs`; needs tmux).
//! - `stacks`: `--stacks` against libbpf-tools offcputime (sched pipe and a glibc mutex
//!   workload) and against `perf record --call-graph dwarf` + `perf report` (total CPU,
//!   session end to stacks report, completeness), and the unwinding cost per stack (see
//!   `bench/stacks.rs`; needs root, gcc and the peers).
//! - `exits`: exit accounting's added wall time on a churn of 1,000 short processes,
//!   against `run --no-exit-stops` and the bare command (see `bench/exits.rs`).
//! - `agent`: `kernelkite agent` (whole machine) at 1 Hz with 500 extra idle processes
//!   and a syscall load: its CPU and RSS; its BPF program time per syscall and per
//!   context switch against libbpf-tools `syscount -L` and `runqlat` run system-wide,
//!   and wall time per read() and per sched-pipe op beside them (see `bench/agent.rs`;
//!   needs root).
//! - `cgroup`: what `trace --cgroup` adds to a process it does not trace (the target
//!   check), against `trace --pid` of another process, per read() (see `bench/ebpf.rs`;
//!   needs root and a cgroup v2 mount).
//!
//! Everything runs the release build (`cargo build --release` first); the sampler and
//! command benchmarks need nothing beyond the workspace.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub(crate) mod agent;
mod ebpf;
mod exits;
mod stacks;
mod top;

const USAGE: &str = "usage: cargo xtask bench [options]
  --only GROUPS      comma-separated: sampler, commands, ebpf, top, stacks, exits,
                     cgroup, agent
                     (default: all)
  --runs N           timed runs per command benchmark; the median is reported (default 5)
  --seconds S        length of each sampler run (default 10)
  --procs N          idle processes profiled by the sampler benchmark (default 100)
  --frames N         frames in the synthetic bundle (default 100000)
  --append FILE      also append the results (markdown) to FILE
  --no-build         use the existing target/release binaries";

/// The sampler must cost at most this share of one core at 100 ms with 100 processes.
const SAMPLER_TARGET_PERCENT: f64 = 1.0;
/// `kernelkite summary` of a 100k-frame bundle must take less than this.
const SUMMARY_TARGET_S: f64 = 1.0;

struct Opts {
    groups: Vec<String>,
    runs: usize,
    seconds: f64,
    procs: u64,
    frames: u64,
    append: Option<PathBuf>,
    build: bool,
}

fn parse_opts(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        groups: vec![
            "sampler".into(),
            "commands".into(),
            "ebpf".into(),
            "top".into(),
            "stacks".into(),
            "exits".into(),
            "cgroup".into(),
            "agent".into(),
        ],
        runs: 5,
        seconds: 10.0,
        procs: 100,
        frames: 100_000,
        append: None,
        build: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--only" => {
                o.groups = value("--only")?.split(',').map(str::to_string).collect();
                for g in &o.groups {
                    if ![
                        "sampler", "commands", "ebpf", "top", "stacks", "exits", "cgroup", "agent",
                    ]
                    .contains(&g.as_str())
                    {
                        bail!("unknown group {g:?}\n{USAGE}");
                    }
                }
            }
            "--runs" => o.runs = value("--runs")?.parse::<usize>()?.max(1),
            "--seconds" => o.seconds = value("--seconds")?.parse()?,
            "--procs" => o.procs = value("--procs")?.parse()?,
            "--frames" => o.frames = value("--frames")?.parse::<u64>()?.max(1),
            "--append" => o.append = Some(value("--append")?.into()),
            "--no-build" => o.build = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(o)
}

/// Paths and options shared by the benchmarks.
struct Ctx {
    opts: Opts,
    kernelkite: PathBuf,
    workload: PathBuf,
    /// Scratch directory: target/bench.
    work: PathBuf,
    /// /proc/loadavg when the benchmarks started: other work on the machine skews them.
    load_at_start: String,
}

/// One line of the results table. `value` is `Err(reason)` when the figure could not be
/// measured (e.g. the command is not built yet).
struct Row {
    name: String,
    value: std::result::Result<f64, String>,
    unit: &'static str,
    /// The figure passes when value <= target (lower is better for every benchmark).
    target: Option<f64>,
    /// How it was measured (command line).
    command: String,
}

impl Row {
    fn new(name: impl Into<String>, value: f64, unit: &'static str, command: &str) -> Row {
        Row {
            name: name.into(),
            value: Ok(value),
            unit,
            target: None,
            command: command.to_string(),
        }
    }

    fn missing(name: impl Into<String>, why: impl Into<String>, command: &str) -> Row {
        Row {
            name: name.into(),
            value: Err(why.into()),
            unit: "",
            target: None,
            command: command.to_string(),
        }
    }

    fn target(mut self, max: f64) -> Row {
        self.target = Some(max);
        self
    }

    fn value_text(&self) -> String {
        match &self.value {
            Ok(v) if *v >= 100.0 => format!("{v:.0} {}", self.unit),
            Ok(v) if *v >= 1.0 => format!("{v:.2} {}", self.unit),
            Ok(v) => format!("{v:.4} {}", self.unit),
            Err(_) => "—".to_string(),
        }
    }

    fn verdict(&self) -> String {
        match (&self.value, self.target) {
            (Err(why), _) => format!("not measured: {why}"),
            (Ok(_), None) => String::new(),
            (Ok(v), Some(t)) => {
                let ratio = v / t;
                let word = if *v <= t { "ok" } else { "OVER TARGET" };
                format!("{word}: {ratio:.2}× of ≤ {t} {}", self.unit)
            }
        }
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let opts = parse_opts(args)?;
    let root = crate::workspace_root();
    let target_dir =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    if opts.build {
        build_release(&root)?;
    }
    let work = target_dir.join("bench");
    std::fs::create_dir_all(&work)?;
    let ctx = Ctx {
        kernelkite: target_dir.join("release").join("kernelkite"),
        workload: target_dir.join("release").join("kk-workload"),
        work,
        opts,
        load_at_start: loadavg(),
    };
    for bin in [&ctx.kernelkite, &ctx.workload] {
        if !bin.is_file() {
            bail!("{} is missing (run without --no-build)", bin.display());
        }
    }

    let mut rows = Vec::new();
    let wants = |g: &str| ctx.opts.groups.iter().any(|x| x == g);
    if wants("sampler") {
        for interval in [100, 10] {
            println!(
                "==> sampler: {} idle processes at {interval} ms for {} s",
                ctx.opts.procs, ctx.opts.seconds
            );
            rows.extend(sampler_benchmark(&ctx, "proc", interval)?);
        }
        println!(
            "==> run --backend ebpf: {} idle processes at 100 ms for {} s",
            ctx.opts.procs, ctx.opts.seconds
        );
        rows.extend(sampler_benchmark(&ctx, "ebpf", 100)?);
    }
    if wants("commands") {
        println!(
            "==> commands on a synthetic {}-frame bundle",
            ctx.opts.frames
        );
        rows.extend(command_benchmarks(&ctx)?);
    }
    if wants("ebpf") {
        println!("==> eBPF tracing overhead");
        rows.extend(ebpf_benchmarks(&ctx)?);
    }

    if wants("stacks") {
        println!(
            "==> stacks: trace --stacks against offcputime and perf record --call-graph dwarf"
        );
        rows.extend(stacks::benchmarks(&ctx)?);
    }

    if wants("exits") {
        println!("==> exit accounting: 1,000 short processes");
        rows.extend(exits::benchmarks(&ctx)?);
    }

    if wants("cgroup") {
        println!("==> an untraced process while trace --cgroup runs, against trace --pid");
        rows.extend(ebpf::cgroup_benchmarks(&ctx)?);
    }

    if wants("agent") {
        println!("==> agent: its CPU at 1 Hz on a busy machine, and its cost per syscall and per context switch against syscount and runqlat");
        rows.extend(agent::benchmarks(&ctx)?);
    }

    if wants("top") {
        // The eBPF row needs root; without it the row says why.
        for backend in ["proc", "ebpf"] {
            println!(
                "==> top --backend {backend}: system-wide, 500 extra idle processes, {} s",
                ctx.opts.seconds
            );
            rows.push(top::top_benchmark(&ctx, backend)?);
        }
    }

    let table = render_table(&rows);
    println!("\n{table}");
    if let Some(path) = &ctx.opts.append {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        f.write_all(render_markdown(&rows, &ctx).as_bytes())?;
        println!("appended to {}", path.display());
    }
    Ok(())
}

fn render_table(rows: &[Row]) -> String {
    let w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(10)
        .max(9);
    let mut s = format!("{:<w$}  {:>16}  {}\n", "benchmark", "value", "target");
    s.push_str(&format!("{}\n", "-".repeat(w + 40)));
    for r in rows {
        let _ = writeln!(s, "{:<w$}  {:>16}  {}", r.name, r.value_text(), r.verdict());
    }
    s
}

fn render_markdown(rows: &[Row], ctx: &Ctx) -> String {
    let date = command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let rev = command_output("git", &["rev-parse", "--short", "HEAD"]);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kernel = command_output("uname", &["-r"]);
    let mut s = format!(
        "\n### {date}, commit {rev}\n\nMachine: {cpus} CPUs ({cpu}), kernel {kernel}; load average \
         {} at the start, {} at the end. Command: `cargo xtask bench{}`.\n\n",
        ctx.load_at_start,
        loadavg(),
        ctx.opts_text()
    );
    s.push_str("| benchmark | value | target | measured with |\n|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | `{}` |",
            r.name,
            r.value_text(),
            r.verdict(),
            r.command
        );
    }
    s
}

impl Ctx {
    fn opts_text(&self) -> String {
        let o = &self.opts;
        let mut s = String::new();
        if o.groups.len() != 5 {
            let _ = write!(s, " --only {}", o.groups.join(","));
        }
        let _ = write!(
            s,
            " --runs {} --seconds {} --procs {} --frames {}",
            o.runs, o.seconds, o.procs, o.frames
        );
        s
    }
}

/// The 1-, 5- and 15-minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn command_output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

// ----------------------------------------------------------------------------------
// Measuring another process's own CPU.

/// A finished child: wall time, its own CPU (all its threads, excluding its children)
/// and its children's CPU, both from /proc/<pid>/stat read while it was a zombie.
struct Measured {
    status: ExitStatus,
    wall: Duration,
    self_cpu_s: f64,
    children_cpu_s: f64,
}

/// Spawn `cmd`, wait for it to exit without reaping it, read its CPU from
/// /proc/<pid>/stat (utime+stime: all its threads; cutime+cstime: its reaped children),
/// then reap it. Resolution: one clock tick (10 ms at 100 Hz) over the whole run.
fn run_measured(cmd: &mut Command) -> Result<Measured> {
    let t0 = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    wait_measured(child, t0)
}

/// [`run_measured`] of a child already spawned (at `t0`).
fn wait_measured(mut child: Child, t0: Instant) -> Result<Measured> {
    let pid = child.id();
    // SAFETY: siginfo_t is plain data; waitid fills it. WNOWAIT leaves the zombie.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            let _ = child.kill();
            bail!("waitid({pid}): {e}");
        }
    }
    let wall = t0.elapsed();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
    let status = child.wait()?;
    let stat = stat.with_context(|| format!("reading /proc/{pid}/stat of the exited process"))?;
    let f = stat_fields(&stat).context("unparsable /proc/<pid>/stat")?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(Measured {
        status,
        wall,
        self_cpu_s: (f[0] + f[1]) as f64 / hz,
        children_cpu_s: (f[2] + f[3]) as f64 / hz,
    })
}

/// `cargo build --release` of kernelkite and kk-workload (bench and soak run these).
pub(crate) fn build_release(root: &Path) -> Result<()> {
    println!("==> cargo build --release -p kernelkite -p kernelkite-workloads");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "kernelkite",
            "-p",
            "kernelkite-workloads",
        ])
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build --release failed ({status})");
    }
    Ok(())
}

/// A process's resident set (VmRSS of /proc/<pid>/status), KiB.
pub(crate) fn vm_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// utime, stime, cutime, cstime (fields 14-17) of a /proc/<pid>/stat line.
pub(crate) fn stat_fields(stat: &str) -> Option<[u64; 4]> {
    // comm (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state), so field n is f[n - 3].
    let get = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some([get(14)?, get(15)?, get(16)?, get(17)?])
}

pub fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "no output".into())
}

// ----------------------------------------------------------------------------------
// (a) the /proc sampler's own cost.

/// `kernelkite --backend <backend> run` on `idle_tree`: kernelkite's own CPU. With
/// `ebpf` this is the user-space side only (snapshots, bundle); the BPF programs run in
/// the traced tasks' context and are charged to them.
fn sampler_benchmark(ctx: &Ctx, backend: &str, interval_ms: u64) -> Result<Vec<Row>> {
    let o = &ctx.opts;
    let bundle = ctx.work.join(format!("{backend}-run-{interval_ms}ms.json"));
    let stderr_path = ctx
        .work
        .join(format!("{backend}-run-{interval_ms}ms.stderr"));
    let _ = std::fs::remove_file(&bundle);
    let shown = format!(
        "kernelkite --backend {backend} --interval-ms {interval_ms} run B -- kk-workload idle_tree --count {} --seconds {}",
        o.procs, o.seconds
    );
    let (name_cpu, name_cost) = if backend == "proc" {
        (
            format!("sampler CPU, {} procs @ {interval_ms} ms", o.procs),
            format!("sampler CPU per process per frame @ {interval_ms} ms"),
        )
    } else {
        (
            format!(
                "run --backend {backend}: kernelkite CPU, {} procs @ {interval_ms} ms",
                o.procs
            ),
            format!("run --backend {backend}: CPU per process per frame @ {interval_ms} ms"),
        )
    };
    let mut cmd = Command::new(&ctx.kernelkite);
    cmd.args([
        "--backend",
        backend,
        "--interval-ms",
        &interval_ms.to_string(),
        "run",
    ])
    .arg(&bundle)
    .arg("--")
    .arg(&ctx.workload)
    .args([
        "idle_tree",
        "--count",
        &o.procs.to_string(),
        "--seconds",
        &o.seconds.to_string(),
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(File::create(&stderr_path)?);
    let m = run_measured(&mut cmd)?;
    if !m.status.success() || !bundle.is_file() {
        let why = format!("kernelkite run: {} ({})", last_line(&stderr_path), m.status);
        return Ok(vec![
            Row::missing(name_cpu, why.clone(), &shown),
            Row::missing(name_cost, why, &shown),
        ]);
    }
    let (frames, samples) = count_samples(&bundle)?;
    println!(
        "    {frames} frames, {samples} process samples, wall {:.2} s, kernelkite CPU {:.3} s (children {:.3} s, excluded)",
        m.wall.as_secs_f64(),
        m.self_cpu_s,
        m.children_cpu_s
    );
    let percent = 100.0 * m.self_cpu_s / m.wall.as_secs_f64();
    let mut cpu_row = Row::new(name_cpu, percent, "% of a core", &shown);
    if backend == "proc" && interval_ms == 100 && o.procs == 100 {
        cpu_row = cpu_row.target(SAMPLER_TARGET_PERCENT);
    }
    let per_sample_us = 1e6 * m.self_cpu_s / samples.max(1) as f64;
    Ok(vec![
        cpu_row,
        Row::new(name_cost, per_sample_us, "µs", &shown),
    ])
}

/// Frames and process samples (one process in one frame) in a bundle.
fn count_samples(bundle: &Path) -> Result<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_reader(BufReader::new(File::open(bundle)?))
        .with_context(|| format!("{} is not JSON", bundle.display()))?;
    let frames = v["frames"]
        .as_array()
        .context("bundle has no frames array")?;
    let samples = frames
        .iter()
        .map(|f| f["processes"].as_array().map_or(0, |p| p.len() as u64))
        .sum();
    Ok((frames.len() as u64, samples))
}

// ----------------------------------------------------------------------------------
// (b) summary, compare and report on a big bundle.

fn command_benchmarks(ctx: &Ctx) -> Result<Vec<Row>> {
    let frames = ctx.opts.frames;
    let a = ctx
        .work
        .join(format!("synthetic-v{SYNTHETIC_VERSION}-{frames}-a.json"));
    let b = ctx
        .work
        .join(format!("synthetic-v{SYNTHETIC_VERSION}-{frames}-b.json"));
    for (path, variant) in [(&a, 0), (&b, 1)] {
        if !path.is_file() {
            let t = Instant::now();
            write_synthetic_bundle(path, frames, variant)?;
            println!(
                "    wrote {} ({:.0} MB) in {:.1} s",
                path.display(),
                std::fs::metadata(path)?.len() as f64 / 1e6,
                t.elapsed().as_secs_f64()
            );
        }
    }
    let size = format!("{:.0} MB", std::fs::metadata(&a)?.len() as f64 / 1e6);
    let html = ctx.work.join("report.html");
    let a_s = a.to_string_lossy().into_owned();
    let b_s = b.to_string_lossy().into_owned();
    let html_s = html.to_string_lossy().into_owned();
    let cases: Vec<(String, Vec<&str>, Option<f64>)> = vec![
        (
            format!("summary, {frames} frames ({size})"),
            vec!["summary", &a_s],
            (frames == 100_000).then_some(SUMMARY_TARGET_S),
        ),
        (
            format!("summary --json, {frames} frames ({size})"),
            vec!["--json", "summary", &a_s],
            None,
        ),
        (
            format!("compare, 2 × {frames} frames ({size} each)"),
            vec!["compare", &a_s, &b_s],
            None,
        ),
        (
            format!("report (HTML), {frames} frames ({size})"),
            vec!["report", &a_s, "-o", &html_s],
            None,
        ),
    ];
    let mut rows = Vec::new();
    for (name, args, target) in cases {
        let shown = format!("kernelkite {}", args.join(" "))
            .replace(&*ctx.work.to_string_lossy(), "target/bench");
        match time_median(&ctx.kernelkite, &args, ctx.opts.runs) {
            Ok((median, min, max)) => {
                println!(
                    "    {name}: median {median:.3} s (min {min:.3}, max {max:.3}, {} runs)",
                    ctx.opts.runs
                );
                let mut row = Row::new(name, median, "s", &shown);
                if let Some(t) = target {
                    row = row.target(t);
                }
                rows.push(row);
            }
            Err(why) => {
                println!("    {name}: not measured: {why}");
                rows.push(Row::missing(name, why, &shown));
            }
        }
    }
    Ok(rows)
}

/// Run `bin args` once to warm the page cache, then `runs` times; (median, min, max)
/// wall seconds. `Err` with the command's last stderr line when it fails.
fn time_median(
    bin: &Path,
    args: &[&str],
    runs: usize,
) -> std::result::Result<(f64, f64, f64), String> {
    let once = || -> std::result::Result<f64, String> {
        let t = Instant::now();
        let out = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| e.to_string())?;
        let secs = t.elapsed().as_secs_f64();
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let line = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(format!("{} ({})", line.trim(), out.status));
        }
        Ok(secs)
    };
    once()?;
    let mut times = (0..runs)
        .map(|_| once())
        .collect::<std::result::Result<Vec<f64>, String>>()?;
    times.sort_by(f64::total_cmp);
    Ok((median(&times), times[0], times[times.len() - 1]))
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Bumped whenever [`write_synthetic_bundle`] changes, so cached files are rewritten.
const SYNTHETIC_VERSION: u32 = 2;

/// Processes in every synthetic frame (a root and its workers) and threads per process.
const SYNTHETIC_PROCS: i32 = 3;
const SYNTHETIC_THREADS: i32 = 2;

/// Write a valid /proc-backend bundle of `frames` frames at 100 ms: a root process and
/// two busy workers, two threads each, with monotonic counters. `variant` 1 gives the
/// workers 10% more CPU (the "after" side of `compare`). Written in the layout of
/// kernelkite's own bundles (format 2: a line per frame, samples as rows), directly
/// (no serde tree), so 100k frames take seconds.
///
/// Follows kernelkite/src/model/bundle.rs and docs/BUNDLE.md; `kernelkite summary`
/// validates it, so a format change shows up as a "not measured: ... invalid" row.
pub fn write_synthetic_bundle(path: &Path, frames: u64, variant: u64) -> Result<()> {
    let tmp = path.with_extension("json.partial");
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
    let cpu_pct = |worker: bool| {
        if !worker {
            1
        } else if variant == 1 {
            77
        } else {
            70
        }
    };
    let last = frames - 1;
    let label = if variant == 1 {
        "synthetic after"
    } else {
        "synthetic before"
    };
    let total_ticks: u64 = (0..SYNTHETIC_PROCS)
        .map(|i| last * cpu_pct(i > 0) / 10)
        .sum();
    write!(
        out,
        r#"{{
  "format": "kernelkite-bundle",
  "format_version": 2,
  "backend": "proc",
  "label": "{label}",
  "host": {{
    "clock_ticks_per_sec": 100,
    "page_size_bytes": 4096,
    "num_cpus": 8,
    "kernel_release": "6.18.0-bench",
    "arch": "x86_64"
  }},
  "interval_ms": 100,
  "root_pids": [
    1000
  ],
  "launched": {{"argv":["bench-root"],"pid":1000,"exit_code":0,"signal":null,"rusage":{{"user_us":{user_us},"system_us":{system_us},"max_rss_kib":40960,"minor_faults":12345,"major_faults":3,"voluntary_switches":{vcsw},"involuntary_switches":{ivcsw}}}}},
  "frames": ["#,
        user_us = total_ticks * 10_000 * 9 / 10,
        system_us = total_ticks * 10_000 / 10,
        vcsw = last * 20,
        ivcsw = last * 2,
    )?;
    let mut line = String::new();
    for k in 0..frames {
        line.clear();
        let sep = if k == 0 { "" } else { "," };
        let _ = write!(
            line,
            "{sep}\n    {{\"t_ns\":{},\"processes\":[",
            k * 100_000_000
        );
        for i in 0..SYNTHETIC_PROCS {
            let pid = 1000 + i;
            let worker = i > 0;
            let ticks = k * cpu_pct(worker) / 10; // cumulative CPU ticks at 100 ms per frame
            let comm = if worker { "worker" } else { "bench-root" };
            let state = if worker && !k.is_multiple_of(3) {
                "R"
            } else {
                "S"
            };
            let i64_ = i as u64;
            // pid, ppid, comm, state, start_time_ticks, utime, stime, cutime, cstime,
            // rss_pages, num_threads, io row, thread rows
            let _ = write!(
                line,
                "{}[{pid},{},\"{comm}\",\"{state}\",{},{},{},0,0,{},{SYNTHETIC_THREADS},[{},{},{},{},{},{},0],[",
                if i == 0 { "" } else { "," },
                if worker { 1000 } else { 1 },
                500_000 + i64_,
                ticks * 9 / 10,
                ticks - ticks * 9 / 10,
                2_560 + (k % 97) * (i64_ + 1),
                k * 65_536 * i64_,
                k * 16_384 * i64_,
                k * 16 * i64_,
                k * 4 * i64_,
                k * 4_096 * i64_,
                k * 8_192 * i64_,
            );
            for j in 0..SYNTHETIC_THREADS {
                let tid = if j == 0 { pid } else { 20_000 + pid * 8 + j };
                let on_cpu = ticks * 10_000_000 / SYNTHETIC_THREADS as u64;
                let running = worker && !(k + j as u64).is_multiple_of(3);
                let syscall_nr = if running {
                    "null".to_string()
                } else {
                    (if j == 0 { 61 } else { 202 }).to_string()
                };
                // tid, comm, state, schedstat row, syscall_nr, class_ns
                let _ = write!(
                    line,
                    "{}[{tid},\"{comm}\",\"{}\",[{on_cpu},{},{}],{syscall_nr},null]",
                    if j == 0 { "" } else { "," },
                    if running { "R" } else { "S" },
                    k * 3_000_000 * i64_,
                    k * 7,
                );
            }
            line.push_str("]]");
        }
        line.push_str("],\"network\":null}");
        out.write_all(line.as_bytes())?;
    }
    write!(
        out,
        r#"
  ],
  "frame_cap": {{
    "max_frames": {},
    "frames_dropped": 0
  }},
  "events_lost": null,
  "lifecycle": [],
  "syscalls": [],
  "slow_syscalls": [],
  "replayed_from": null
}}
"#,
        frames.max(100_000)
    )?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

// ----------------------------------------------------------------------------------
// eBPF tracing overhead.

/// eBPF backend overhead: see `bench/ebpf.rs`.
fn ebpf_benchmarks(ctx: &Ctx) -> Result<Vec<Row>> {
    ebpf::benchmarks(ctx)
}

type Lines = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// Start a workload with `--wait-stdin` and wait for its `ready <pid>` line: it has done
/// its setup and waits, so a tracer can attach to `pid` before [`release`].
fn spawn_gated(workload: &Path, args: &[&str]) -> Result<(Child, ChildStdin, Lines, u32)> {
    let mut child = Command::new(workload)
        .args(args)
        .arg("--wait-stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", workload.display()))?;
    let stdin = child.stdin.take().expect("piped stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let ready = lines
        .next()
        .context("workload exited before it was ready")??;
    let pid = ready
        .strip_prefix("ready ")
        .and_then(|p| p.trim().parse().ok())
        .with_context(|| format!("expected \"ready <pid>\", got {ready:?}"))?;
    Ok((child, stdin, lines, pid))
}

/// Let a gated workload run; returns its JSON result line once it exits successfully.
fn release(mut child: Child, mut stdin: ChildStdin, lines: Lines) -> Result<String> {
    stdin.write_all(b"go\n")?;
    drop(stdin);
    let mut last = String::new();
    for l in lines {
        last = l?;
    }
    let status = child.wait()?;
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        bail!("workload failed ({status}) {err}");
    }
    Ok(last)
}

fn json_f64(line: &str, key: &str) -> Result<f64> {
    let v: serde_json::Value =
        serde_json::from_str(line).with_context(|| format!("not JSON: {line:?}"))?;
    v[key]
        .as_f64()
        .with_context(|| format!("no number {key:?} in {line}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_bundle_is_json_with_the_expected_shape() {
        let dir = std::env::temp_dir().join(format!("kk-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.json");
        write_synthetic_bundle(&path, 5, 0).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format"], "kernelkite-bundle");
        assert_eq!(v["frames"].as_array().unwrap().len(), 5);
        let procs = v["frames"][4]["processes"].as_array().unwrap();
        assert_eq!(procs.len(), SYNTHETIC_PROCS as usize);
        // A process row has 13 columns, its last the thread rows (6 columns each).
        assert_eq!(procs[1].as_array().unwrap().len(), 13);
        let threads = procs[1][12].as_array().unwrap();
        assert_eq!(threads.len(), SYNTHETIC_THREADS as usize);
        assert_eq!(threads[0].as_array().unwrap().len(), 6);
        // A line per frame, as kernelkite writes bundles.
        assert_eq!(text.lines().filter(|l| l.contains("\"t_ns\"")).count(), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parses_proc_stat_cpu_fields() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 11 13 20 0 1 0 55 0 0";
        assert_eq!(stat_fields(line), Some([7, 3, 11, 13]));
    }
}
