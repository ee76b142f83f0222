//! `trace --stacks` side by side with its peers, rounds interleaved, medians reported:
//!
//! - Added cost against libbpf-tools `offcputime` (system-wide, as run by default) on
//!   `perf bench sched pipe` (µs/op, as in the `ebpf` group) and on a mutex-contention
//!   workload through glibc (tests/workloads/c/libcwork.c `mutex`, built
//!   `-O2 -g -fomit-frame-pointer` as tests/ebpf_stacks.rs builds it): the workload's
//!   own CPU (wait4 rusage, user + system, all its threads) per context switch, also
//!   under `perf record -e sched:sched_switch --call-graph dwarf -p PID`. The tracers'
//!   BPF programs (and perf's copy of the user stack) run in the switching task's
//!   context, so their cost is in it.
//! - Against `perf record -e sched:sched_switch --call-graph dwarf` + `perf report
//!   --stdio` on the same mutex workload, against `kernelkite run --stacks` +
//!   `kernelkite stacks`: the tool's total CPU (kernelkite: its rusage plus its BPF
//!   programs' `run_time_ns` with kernel.bpf_stats_enabled; perf: perf record's and perf
//!   report's rusage), the time from the workload's exit to
//!   the stacks report printed, and how many of the stacks through glibc's mutex wait
//!   name the function that called pthread_mutex_lock.
//! - The unwinding cost per captured stack: the profile's own counters
//!   (`stacks.unwind_ns / stacks.stack_copies`) of the `kernelkite run --stacks` bundles.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use super::ebpf::{
    have, mount_tracefs, pipe_round, BpfStats, PipeConfig, ProgramTimePoller, Tracer, PIPE_LOOPS,
    STACKS_VS_OFFCPUTIME_TARGET,
};
use super::{median, run_measured, wait_measured, Ctx, Row};

/// Length of each mutex-workload run.
const MUTEX_SECONDS: &str = "2";
/// perf's off-CPU stacks: every switch-out, its user stack unwound with DWARF.
const PERF_RECORD: [&str; 6] = [
    "record",
    "-q",
    "-e",
    "sched:sched_switch",
    "--call-graph",
    "dwarf",
];
/// Where the untimed `offcputime -p` run writes its report (in the scratch directory).
const OFFCPUTIME_REPORT: &str = "stacks-bench.offcputime.txt";
/// Frames that call pthread_mutex_lock in libcwork (the waiter's and the holder's).
const LOCK_CALLERS: [&str; 2] = ["kk_lock_caller", "kk_lock_holder"];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MutexConfig {
    Untraced,
    KernelkiteStacks,
    Offcputime,
    PerfRecord,
    /// `trace --follow` without `--stacks`: what the stacks add on top of it.
    Kernelkite,
    /// `offcputime -p PID`, its report to a file: for completeness, not timed.
    OffcputimeReport,
}

impl MutexConfig {
    fn label(self) -> &'static str {
        match self {
            MutexConfig::Untraced => "glibc mutex: untraced",
            MutexConfig::KernelkiteStacks => "glibc mutex: kernelkite trace --follow --stacks",
            MutexConfig::Kernelkite => "glibc mutex: kernelkite trace --follow",
            MutexConfig::Offcputime => "glibc mutex: libbpf-tools offcputime",
            MutexConfig::PerfRecord => {
                "glibc mutex: perf record -e sched:sched_switch --call-graph dwarf -p PID"
            }
            MutexConfig::OffcputimeReport => "glibc mutex: libbpf-tools offcputime -p PID 1",
        }
    }
}

/// gcc of libcwork.c into `dir`, as tests/ebpf_stacks.rs builds it.
fn build_libcwork(root: &Path, dir: &Path) -> Result<PathBuf> {
    let bin = dir.join("libcwork");
    let status = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-pthread"])
        .arg(root.join("tests/workloads/c/libcwork.c"))
        .arg("-o")
        .arg(&bin)
        .status()
        .context("cannot run gcc")?;
    if !status.success() {
        bail!("gcc of libcwork.c failed ({status})");
    }
    Ok(bin)
}

/// One mutex-workload run under `config`: the workload's CPU (ns, user + system, every
/// thread) and its context switches (voluntary + involuntary), from wait4's rusage.
fn mutex_run(ctx: &Ctx, libcwork: &Path, config: MutexConfig) -> Result<(f64, f64)> {
    // A shell that waits for a line, then execs the workload: the tracer attaches first.
    let script = format!(
        "read go; exec '{}' mutex '{}' {MUTEX_SECONDS}",
        libcwork.display(),
        ctx.work.display()
    );
    let mut shell = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("cannot start libcwork")?;
    let pid = shell.id();
    let tracer = match config {
        MutexConfig::Untraced => None,
        MutexConfig::KernelkiteStacks | MutexConfig::Kernelkite => {
            let mut c = Command::new(&ctx.kernelkite);
            c.args(["trace", "--follow", "--pid", &pid.to_string()]);
            if config == MutexConfig::KernelkiteStacks {
                c.arg("--stacks");
            }
            Some(Tracer::start(c)?)
        }
        MutexConfig::Offcputime => Some(Tracer::start(Command::new("offcputime"))?),
        MutexConfig::PerfRecord => {
            let mut c = Command::new("perf");
            c.args(PERF_RECORD)
                .arg("-o")
                .arg(ctx.work.join("stacks-bench.perf-p.data"))
                .args(["-p", &pid.to_string()]);
            Some(Tracer::start(c)?)
        }
        MutexConfig::OffcputimeReport => {
            let mut c = Command::new("offcputime");
            // For 1 s of the 2: it names user frames when it prints, from the live
            // process's maps.
            c.args(["-p", &pid.to_string(), "1"]);
            let out = std::fs::File::create(ctx.work.join(OFFCPUTIME_REPORT))?;
            Some(Tracer::start_to(c, out.into())?)
        }
    };
    shell.stdin.take().unwrap().write_all(b"go\n")?;
    // SAFETY: rusage is plain data that wait4 fills; the pid is our unreaped child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut status = 0;
    let r = loop {
        let r = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
        if r >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break r;
        }
    };
    if let Some(t) = tracer {
        t.stop();
    }
    if r < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("libcwork mutex failed (wait4 {r}, status {status:#x})");
    }
    let ns = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
    let cpu_ns = ns(usage.ru_utime) + ns(usage.ru_stime);
    let switches = (usage.ru_nvcsw + usage.ru_nivcsw) as f64;
    Ok((cpu_ns, switches))
}

/// One session of a stacks tool on the mutex workload, then its stacks report.
struct Session {
    /// The tool's own CPU, session and report, seconds (kernelkite: plus its BPF time).
    tool_cpu_s: f64,
    /// Of it, kernelkite's BPF programs' run time (kernel.bpf_stats_enabled).
    bpf_s: Option<f64>,
    /// From the workload's exit to the report printed, seconds.
    end_to_report_s: f64,
    /// Stacks through glibc's mutex wait, and those of them naming a LOCK_CALLERS frame.
    lock_stacks: u64,
    named_caller: u64,
    /// `stacks.unwind_ns / stacks.stack_copies` (kernelkite), µs.
    unwind_us: Option<f64>,
}

/// The workload as the tools run it: the shell writes the wall clock (ns since the
/// epoch) to `marker` as soon as libcwork has exited.
fn marked_workload(ctx: &Ctx, libcwork: &Path, marker: &Path) -> [String; 3] {
    [
        "sh".into(),
        "-c".into(),
        format!(
            "'{}' mutex '{}' {MUTEX_SECONDS}; date +%s%N > '{}'",
            libcwork.display(),
            ctx.work.display(),
            marker.display()
        ),
    ]
}

fn since_marker(marker: &Path) -> Result<f64> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as f64;
    let text = std::fs::read_to_string(marker).context("the workload wrote no end marker")?;
    let end: f64 = text.trim().parse().context("unparsable end marker")?;
    Ok((now - end) / 1e9)
}

fn kernelkite_session(ctx: &Ctx, libcwork: &Path) -> Result<Session> {
    let bundle = ctx.work.join("stacks-bench.bundle.json");
    let marker = ctx.work.join("stacks-bench.kk.end");
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(&bundle);
    let stats = BpfStats::enable();
    let t0 = Instant::now();
    let child = Command::new(&ctx.kernelkite)
        .args(["run", "--stacks"])
        .arg(&bundle)
        .arg("--")
        .args(marked_workload(ctx, libcwork, &marker))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start kernelkite run")?;
    let poller = stats.as_ref().map(|_| ProgramTimePoller::start(child.id()));
    let run = wait_measured(child, t0)?;
    let bpf_s = poller
        .and_then(ProgramTimePoller::finish)
        .map(|p| p.iter().map(|p| p.run_time_ns).sum::<u64>() as f64 / 1e9);
    drop(stats);
    if !run.status.success() {
        bail!("kernelkite run --stacks failed ({})", run.status);
    }
    let report = run_measured(
        Command::new(&ctx.kernelkite)
            .arg("stacks")
            .arg(&bundle)
            .stdout(Stdio::null()),
    )?;
    let end_to_report_s = since_marker(&marker)?;
    if !report.status.success() {
        bail!("kernelkite stacks failed ({})", report.status);
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&bundle)?)?;
    let profile = &json["stacks"];
    let (lock_stacks, named_caller) = kernelkite_lock_stacks(profile);
    let counter = |k: &str| profile[k].as_u64().unwrap_or(0) as f64;
    let copies = counter("stack_copies");
    Ok(Session {
        tool_cpu_s: run.self_cpu_s
            + bpf_s.unwrap_or(0.0)
            + report.self_cpu_s
            + report.children_cpu_s,
        bpf_s,
        end_to_report_s,
        lock_stacks,
        named_caller,
        unwind_us: (copies > 0.0).then(|| counter("unwind_ns") / copies / 1e3),
    })
}

/// Whether a frame is glibc's mutex wait (pthread_mutex_lock or the __lll_lock_wait it calls).
fn is_lock_wait(symbol: &str) -> bool {
    symbol.contains("pthread_mutex_lock") || symbol.contains("lll_lock_wait")
}

/// The bundle's user stacks through glibc's mutex wait (counted by off-CPU periods) and
/// those of them that name the caller of pthread_mutex_lock.
fn kernelkite_lock_stacks(profile: &serde_json::Value) -> (u64, u64) {
    let empty = Vec::new();
    let frames = profile["frames"].as_array().unwrap_or(&empty);
    let stacks = profile["stacks"].as_array().unwrap_or(&empty);
    let (mut lock, mut named) = (0, 0);
    for sample in profile["samples"].as_array().unwrap_or(&empty) {
        let Some(stack) = sample["user_stack"]
            .as_u64()
            .and_then(|u| stacks.get(u as usize))
            .and_then(|s| s.as_array())
        else {
            continue;
        };
        let symbols: Vec<&str> = stack
            .iter()
            .filter_map(|f| frames.get(f.as_u64()? as usize)?["symbol"].as_str())
            .collect();
        if !symbols.iter().any(|s| is_lock_wait(s)) {
            continue;
        }
        let count =
            sample["count"].as_u64().unwrap_or(0) + sample["sampled_count"].as_u64().unwrap_or(0);
        lock += count;
        if symbols.iter().any(|s| LOCK_CALLERS.contains(s)) {
            named += count;
        }
    }
    (lock, named)
}

fn perf_session(ctx: &Ctx, libcwork: &Path) -> Result<Session> {
    let data = ctx.work.join("stacks-bench.perf.data");
    let marker = ctx.work.join("stacks-bench.perf.end");
    let _ = std::fs::remove_file(&marker);
    let record = run_measured(
        Command::new("perf")
            .args(PERF_RECORD)
            .arg("-o")
            .arg(&data)
            .arg("--")
            .args(marked_workload(ctx, libcwork, &marker))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    if !record.status.success() {
        bail!("perf record failed ({})", record.status);
    }
    let report = run_measured(
        Command::new("perf")
            .args(["report", "--stdio", "-i"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    let end_to_report_s = since_marker(&marker)?;
    if !report.status.success() {
        bail!("perf report failed ({})", report.status);
    }
    // Completeness from perf script (not timed): one sample a block, one frame a line.
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .context("cannot run perf script")?;
    let text = String::from_utf8_lossy(&script.stdout);
    let (mut lock_stacks, mut named_caller) = (0, 0);
    for sample in text.split("\n\n") {
        let symbols: Vec<&str> = sample
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(|s| s.split('+').next().unwrap_or(s))
            .collect();
        if symbols.iter().any(|s| is_lock_wait(s)) {
            lock_stacks += 1;
            if symbols.iter().any(|s| LOCK_CALLERS.contains(s)) {
                named_caller += 1;
            }
        }
    }
    Ok(Session {
        tool_cpu_s: record.self_cpu_s + report.self_cpu_s + report.children_cpu_s,
        bpf_s: None,
        end_to_report_s,
        lock_stacks,
        named_caller,
        unwind_us: None,
    })
}

/// offcputime's report (one stack a block: kernel frames, user frames, "-  comm (pid)",
/// microseconds): µs of the stacks through glibc's mutex wait, and of those naming its
/// caller. A futex wait in the kernel frames counts too: its frame-pointer walk of glibc
/// may stop before __lll_lock_wait (libcwork's other futex wait, main's pthread_join, is
/// a few ms).
fn offcputime_lock_stacks(report: &str) -> (u64, u64) {
    let (mut lock, mut named) = (0, 0);
    for block in report.split("\n\n") {
        let lines: Vec<&str> = block.lines().map(str::trim).collect();
        if !lines.iter().any(|l| is_lock_wait(l) || *l == "futex_wait") {
            continue;
        }
        let us = lines
            .last()
            .and_then(|l| l.parse::<u64>().ok())
            .unwrap_or(0);
        lock += us;
        if lines.iter().any(|l| LOCK_CALLERS.contains(l)) {
            named += us;
        }
    }
    (lock, named)
}

/// `--stacks`'s added cost against offcputime's, in all and on top of `trace --follow`,
/// from the medians `m` of the configurations at `[untraced, stacks, offcputime, follow]`.
fn against_offcputime(workload: &str, m: &[f64], at: [usize; 4], shown: &str) -> [Row; 2] {
    let [untraced, stacks, offcputime, follow] = at.map(|i| m[i]);
    let peer = offcputime - untraced;
    [
        Row::new(
            format!("{workload}: kernelkite --stacks added cost / offcputime added cost"),
            (stacks - untraced) / peer,
            "×",
            shown,
        )
        .target(STACKS_VS_OFFCPUTIME_TARGET),
        Row::new(
            format!("{workload}: what --stacks adds to trace --follow / offcputime added cost"),
            (stacks - follow) / peer,
            "×",
            shown,
        ),
    ]
}

fn sorted_median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    median(&v)
}

pub(super) fn benchmarks(ctx: &Ctx) -> Result<Vec<Row>> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(vec![Row::missing(
            "stacks",
            "needs root",
            "cargo xtask bench --only stacks",
        )]);
    }
    for tool in ["gcc", "perf", "offcputime"] {
        if !have(tool) {
            return Ok(vec![Row::missing(
                "stacks",
                format!("{tool} is not installed (gcc, linux-perf, libbpf-tools)"),
                "cargo xtask bench --only stacks",
            )]);
        }
    }
    mount_tracefs();
    let libcwork = build_libcwork(&crate::workspace_root(), &ctx.work)?;
    let runs = ctx.opts.runs;
    let pipe_configs = [
        PipeConfig::Untraced,
        PipeConfig::KernelkiteStacks,
        PipeConfig::Offcputime,
        PipeConfig::Kernelkite,
    ];
    let mutex_configs = [
        MutexConfig::Untraced,
        MutexConfig::KernelkiteStacks,
        MutexConfig::Offcputime,
        MutexConfig::PerfRecord,
        MutexConfig::Kernelkite,
    ];
    let mut pipe = vec![Vec::new(); pipe_configs.len()];
    let mut mutex_per_switch = vec![Vec::new(); mutex_configs.len()];
    let mut sessions: [Vec<Session>; 2] = [Vec::new(), Vec::new()];
    for round in 0..runs {
        print!("    round {}/{runs}: sched pipe", round + 1);
        pipe_round(ctx, &pipe_configs, &mut pipe)?;
        print!(" µs/op; mutex");
        for (i, &c) in mutex_configs.iter().enumerate() {
            let (cpu_ns, switches) = mutex_run(ctx, &libcwork, c)?;
            print!(" {:.0}", cpu_ns / switches);
            let _ = std::io::stdout().flush();
            mutex_per_switch[i].push(cpu_ns / switches);
        }
        print!(" ns/switch; sessions");
        for (i, session) in [kernelkite_session, perf_session].iter().enumerate() {
            let s = session(ctx, &libcwork)?;
            print!(" {:.3}/{:.3}", s.tool_cpu_s, s.end_to_report_s);
            let _ = std::io::stdout().flush();
            sessions[i].push(s);
        }
        println!(" s CPU/s to report");
    }

    let mut rows = Vec::new();
    let pipe_shown = format!("taskset -c 0 perf bench sched pipe -T -l {PIPE_LOOPS}");
    let pmed: Vec<f64> = pipe.into_iter().map(sorted_median).collect();
    for (i, c) in pipe_configs.iter().enumerate() {
        rows.push(Row::new(c.label(), pmed[i], "µs/op", &pipe_shown));
    }
    rows.extend(against_offcputime(
        "sched pipe",
        &pmed,
        [0, 1, 2, 3],
        &pipe_shown,
    ));
    let mutex_shown = format!(
        "libcwork mutex DIR {MUTEX_SECONDS} (gcc -O2 -g -fomit-frame-pointer): its rusage CPU / its context switches"
    );
    let mmed: Vec<f64> = mutex_per_switch.into_iter().map(sorted_median).collect();
    for (i, c) in mutex_configs.iter().enumerate() {
        rows.push(Row::new(
            format!("{}, workload CPU per context switch", c.label()),
            mmed[i],
            "ns",
            &mutex_shown,
        ));
    }
    rows.extend(against_offcputime(
        "glibc mutex",
        &mmed,
        [0, 1, 2, 4],
        &mutex_shown,
    ));
    rows.push(
        Row::new(
            "glibc mutex: kernelkite --stacks added cost / perf record --call-graph dwarf added cost",
            (mmed[1] - mmed[0]) / (mmed[3] - mmed[0]),
            "×",
            &mutex_shown,
        )
        .target(1.0),
    );

    let session_shown = [
        format!("kernelkite run --stacks B -- libcwork mutex DIR {MUTEX_SECONDS}; kernelkite stacks B"),
        format!(
            "perf record -e sched:sched_switch --call-graph dwarf -o D -- libcwork mutex DIR {MUTEX_SECONDS}; perf report --stdio -i D"
        ),
    ];
    let names = ["kernelkite", "perf"];
    let mut cpu = [0.0; 2];
    let mut to_report = [0.0; 2];
    for i in 0..2 {
        let s = &sessions[i];
        let m = |f: &dyn Fn(&Session) -> f64| sorted_median(s.iter().map(f).collect());
        cpu[i] = m(&|s| s.tool_cpu_s);
        to_report[i] = m(&|s| s.end_to_report_s);
        rows.push(Row::new(
            format!(
                "glibc mutex: {}, tool CPU (session + report, user + kernel)",
                names[i]
            ),
            cpu[i] * 1e3,
            "ms",
            &session_shown[i],
        ));
        if s.iter().all(|s| s.bpf_s.is_some()) {
            rows.push(Row::new(
                "glibc mutex: kernelkite, of it BPF program time (kernel.bpf_stats_enabled)",
                m(&|s| s.bpf_s.unwrap_or(0.0)) * 1e3,
                "ms",
                &session_shown[i],
            ));
        }
        rows.push(Row::new(
            format!(
                "glibc mutex: {}, workload exit to stacks report printed",
                names[i]
            ),
            to_report[i] * 1e3,
            "ms",
            &session_shown[i],
        ));
        let lock: u64 = s.iter().map(|s| s.lock_stacks).sum();
        let named: u64 = s.iter().map(|s| s.named_caller).sum();
        let rounds_named = s.iter().filter(|s| s.named_caller > 0).count();
        rows.push(Row::new(
            format!(
                "glibc mutex: {}, stacks through pthread_mutex_lock naming its caller ({named} of {lock}; in {rounds_named} of {runs} rounds)",
                names[i]
            ),
            if lock == 0 {
                0.0
            } else {
                100.0 * named as f64 / lock as f64
            },
            "%",
            &session_shown[i],
        ));
    }
    rows.push(
        Row::new(
            "glibc mutex: tool CPU, kernelkite / perf",
            cpu[0] / cpu[1],
            "×",
            &session_shown[0],
        )
        .target(1.0),
    );
    rows.push(
        Row::new(
            "glibc mutex: workload exit to stacks report, kernelkite / perf",
            to_report[0] / to_report[1],
            "×",
            &session_shown[0],
        )
        .target(1.0),
    );
    // offcputime's completeness, from one more (untimed) run with its report kept.
    mutex_run(ctx, &libcwork, MutexConfig::OffcputimeReport)?;
    let report = std::fs::read_to_string(ctx.work.join(OFFCPUTIME_REPORT))?;
    let (lock_us, named_us) = offcputime_lock_stacks(&report);
    rows.push(Row::new(
        format!(
            "glibc mutex: offcputime, time in stacks through pthread_mutex_lock naming its caller ({named_us} of {lock_us} µs)"
        ),
        if lock_us == 0 {
            0.0
        } else {
            100.0 * named_us as f64 / lock_us as f64
        },
        "%",
        &format!("offcputime -p PID 1 during libcwork mutex DIR {MUTEX_SECONDS}"),
    ));
    let unwind: Vec<f64> = sessions[0].iter().filter_map(|s| s.unwind_us).collect();
    if !unwind.is_empty() {
        rows.push(Row::new(
            "kernelkite: unwinding per captured user stack (stacks.unwind_ns / stacks.stack_copies)",
            sorted_median(unwind),
            "µs",
            &session_shown[0],
        ));
    }
    Ok(rows)
}
