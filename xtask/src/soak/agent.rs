//! `cargo xtask soak --agent [--minutes N] [--rate R]`: `kernelkite agent --listen
//! 127.0.0.1:0` (the whole machine, default settings) for N minutes under process
//! churn and the soak's syscall loops (issue 14's churn soak).
//!
//! The churn is paced in the xtask itself: [`CHURN_THREADS`] threads each start
//! `/bin/true` and wait for it, on a schedule of R starts a second in all (default
//! 200), so the rate does not depend on how fast a shell forks; the rate achieved is
//! read back from the agent's `kernelkite_agent_processes_seen_total` (everything it
//! saw start, the machine's other work included).
//!
//! Every 5 s the agent's VmRSS, every 30 s a scrape of /metrics (processes seen, own
//! process series, events lost, sample lines). At the end SIGTERM; it must exit 0 and
//! every BPF program, link and map id it held must be gone within 20 s. The RSS
//! figures (first and last minute, growth, the slope after the first minute and the
//! hour it extrapolates to), its CPU and events lost are reported, not judged.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::{
    bpf_ids_held_by, count, cpu_seconds, ids_text, mean_mib, rss_parts, slope, still_loaded,
    syscall_loops, vm_rss_kb, Bins, Workload, SAMPLE_EVERY,
};
use crate::bench::agent::{metric, sample_lines, RunningAgent};

const SCRAPE_EVERY: Duration = Duration::from_secs(30);
const CHURN_THREADS: u32 = 4;
/// RSS before this is warm-up: not in the slope.
const WARM_UP_S: f64 = 60.0;

/// Threads starting `/bin/true` at a set rate until dropped.
struct Churn {
    stop: Arc<AtomicBool>,
    started: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Churn {
    fn start(rate: f64) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicU64::new(0));
        let period = Duration::from_secs_f64(f64::from(CHURN_THREADS) / rate);
        let threads = (0..CHURN_THREADS)
            .map(|_| {
                let (stop, started) = (stop.clone(), started.clone());
                std::thread::spawn(move || {
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        let ok = std::process::Command::new("/bin/true")
                            .stdin(std::process::Stdio::null())
                            .status()
                            .is_ok();
                        if ok {
                            started.fetch_add(1, Ordering::Relaxed);
                        }
                        next += period;
                        let now = Instant::now();
                        // Behind by more than a second (a stalled machine): start again
                        // from now rather than burst.
                        if now > next + Duration::from_secs(1) {
                            next = now;
                        }
                        std::thread::sleep(next.saturating_duration_since(now));
                    }
                })
            })
            .collect();
        Churn {
            stop,
            started,
            threads,
        }
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One scrape of /metrics.
struct Scrape {
    t: f64,
    processes_seen: Option<f64>,
    process_series: Option<f64>,
    events_lost: Option<f64>,
    lines: usize,
    bytes: usize,
}

fn scrape(agent: &RunningAgent, t: f64) -> Result<(Scrape, String)> {
    let text = agent.scrape()?;
    let s = Scrape {
        t,
        processes_seen: metric(&text, "kernelkite_agent_processes_seen_total"),
        process_series: metric(&text, "kernelkite_agent_process_series"),
        events_lost: metric(&text, "kernelkite_events_lost_total"),
        lines: sample_lines(&text),
        bytes: text.len(),
    };
    let opt = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.0}"));
    println!(
        "    {t:>6.0} s  /metrics: processes seen {}, own series {}, events lost {}, {} sample lines ({} KiB)",
        opt(s.processes_seen),
        opt(s.process_series),
        opt(s.events_lost),
        s.lines,
        s.bytes / 1024
    );
    Ok((s, text))
}

pub(super) fn run(bins: &Bins, work: &std::path::Path, minutes: f64, rate: f64) -> Result<()> {
    println!(
        "==> soak: kernelkite agent (whole machine) for {minutes} min, {rate} process starts/s + syscall loops"
    );
    let length = Duration::from_secs_f64(minutes * 60.0);
    let mut load = Workload::start(&syscall_loops(bins))?;
    let mut agent = RunningAgent::start(&bins.kernelkite, &[], &work.join("agent.stderr"))?;
    let pid = agent.pid();
    let mut ids = bpf_ids_held_by(pid);
    load.go()?;
    let churn = Churn::start(rate);
    let t0 = Instant::now();
    let mut rss = Vec::new();
    let mut scrapes = Vec::new();
    let mut last_text = String::new();
    let mut scrape_failures = Vec::new();
    while t0.elapsed() < length {
        let t = t0.elapsed().as_secs_f64();
        if let Some(kb) = vm_rss_kb(pid) {
            rss.push((t, kb));
            println!("    {t:>6.0} s  RSS {:.1} MiB", kb as f64 / 1024.0);
        }
        if rss.len() % (SCRAPE_EVERY.as_secs() / SAMPLE_EVERY.as_secs()) as usize == 1 {
            match scrape(&agent, t) {
                Ok((s, text)) => {
                    scrapes.push(s);
                    last_text = text;
                }
                Err(e) => scrape_failures.push(format!("{t:.0} s: {e:#}")),
            }
        }
        let next = SAMPLE_EVERY * rss.len() as u32;
        std::thread::sleep(next.saturating_sub(t0.elapsed()).min(SAMPLE_EVERY));
    }
    let seconds = t0.elapsed().as_secs_f64();
    if let Ok((s, text)) = scrape(&agent, seconds) {
        scrapes.push(s);
        last_text = text;
    }
    let started = churn.started.load(Ordering::Relaxed);
    let churn_s = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid);
    let parts = rss_parts(pid);
    ids.extend(bpf_ids_held_by(pid));
    ids.sort();
    ids.dedup();
    // Stopped under load, as a service is.
    let (status, exit_s) = agent.terminate(Duration::from_secs(60))?;
    drop(churn);
    drop(load);
    let left = still_loaded(&ids, Duration::from_secs(20))?;
    let log = std::fs::read_to_string(&agent.log).unwrap_or_default();

    let mut failures = Vec::new();
    match status {
        Some(s) if s.success() => {}
        Some(s) => failures.push(format!("the agent ended by SIGTERM: {s}")),
        None => failures.push("the agent did not exit within 60 s of SIGTERM".into()),
    }
    if count(&ids, "prog") == 0 {
        failures.push("the agent held no BPF program".into());
    }
    if !left.is_empty() {
        failures.push(format!(
            "still loaded 20 s after the agent exited: {}",
            left.join(", ")
        ));
    }

    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "soak: `cargo xtask soak --agent --minutes {minutes} --rate {rate}`, kernelkite agent (whole machine) for {seconds:.0} s"
    ));
    let first: Vec<_> = rss.iter().copied().filter(|p| p.0 < 60.0).collect();
    let last: Vec<_> = (rss.iter().copied())
        .filter(|p| p.0 >= seconds - 60.0)
        .collect();
    let second: Vec<_> = (rss.iter().copied())
        .filter(|p| (WARM_UP_S..WARM_UP_S + 60.0).contains(&p.0))
        .collect();
    let after_warmup: Vec<(f64, f64)> = (rss.iter())
        .filter(|p| p.0 >= WARM_UP_S)
        .map(|p| (p.0, p.1 as f64 / 1024.0))
        .collect();
    let fmt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.1} MiB"));
    let (m1, m2, mz) = (mean_mib(&first), mean_mib(&second), mean_mib(&last));
    line(format!(
        "  RSS: first minute {}, second minute {}, last minute {}, max {}",
        fmt(m1),
        fmt(m2),
        fmt(mz),
        fmt(rss.iter().map(|p| p.1).max().map(|kb| kb as f64 / 1024.0))
    ));
    let diff = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:+.1} MiB", b - a),
        _ => "—".into(),
    };
    line(format!(
        "  RSS growth: last minute − first minute {}; last minute − second minute (after warm-up) {}",
        diff(m1, mz),
        diff(m2, mz)
    ));
    let fit = slope(&after_warmup);
    let hour = fit.map(|s| {
        let n = after_warmup.len() as f64;
        let mean_t = after_warmup.iter().map(|p| p.0).sum::<f64>() / n;
        let mean_mb = after_warmup.iter().map(|p| p.1).sum::<f64>() / n;
        mean_mb + s * (3600.0 - mean_t)
    });
    line(format!(
        "  RSS slope after the first minute (least squares): {}; the line at 1 hour: {}",
        fit.map_or("—".to_string(), |s| format!(
            "{:+.2} MiB/hour",
            s * 3600.0
        )),
        fmt(hour)
    ));
    let series: Vec<String> = (rss.iter())
        .filter(|p| (p.0 as u64) % 60 < SAMPLE_EVERY.as_secs())
        .map(|p| format!("{:.0}s {:.1}", p.0, p.1 as f64 / 1024.0))
        .collect();
    line(format!("  RSS each minute (MiB): {}", series.join(", ")));
    if let Some((anon, file, shmem)) = parts {
        line(format!(
            "  RSS at the end: anonymous {:.1} MiB, files {:.1} MiB, shared memory {:.1} MiB",
            anon as f64 / 1024.0,
            file as f64 / 1024.0,
            shmem as f64 / 1024.0
        ));
    }
    if let Some(cpu) = cpu {
        line(format!(
            "  agent CPU: {cpu:.1} s over {seconds:.0} s ({:.2}% of one core, start-up included)",
            100.0 * cpu / seconds
        ));
    }
    line(format!(
        "  process starts: the churn started {started} ({:.0}/s)",
        started as f64 / churn_s
    ));
    let seen: Vec<(f64, f64)> = (scrapes.iter())
        .filter_map(|s| Some((s.t, s.processes_seen?)))
        .collect();
    if let (Some(a), Some(b)) = (seen.first(), seen.last()) {
        if b.0 > a.0 {
            line(format!(
                "  processes seen by the agent: {:.0} at the end; {:.0}/s between the first and last scrape",
                b.1,
                (b.1 - a.1) / (b.0 - a.0)
            ));
        }
    }
    let opt = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.0}"));
    if let (Some(a), Some(b)) = (scrapes.first(), scrapes.last()) {
        line(format!(
            "  /metrics sample lines: {} at {:.0} s, {} at {:.0} s (max {}); own process series {} → {}; {} KiB at the end",
            a.lines,
            a.t,
            b.lines,
            b.t,
            scrapes.iter().map(|s| s.lines).max().unwrap_or(0),
            opt(a.process_series),
            opt(b.process_series),
            b.bytes / 1024
        ));
        line(format!("  events lost: {}", opt(b.events_lost)));
    }
    let by_cause: Vec<String> = (last_text.lines())
        .filter_map(|l| l.strip_prefix("kernelkite_events_lost_by_cause_total{"))
        .filter(|l| !l.ends_with(" 0"))
        .map(|l| l.replace("} ", " "))
        .collect();
    if !by_cause.is_empty() {
        line(format!("  events lost by cause: {}", by_cause.join(", ")));
    }
    // What the lines are: the largest metric families, and the series they are in.
    let _ = std::fs::write(work.join("agent-metrics-end.txt"), &last_text);
    let mut families: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut pids = std::collections::BTreeSet::new();
    let mut groups = std::collections::BTreeSet::new();
    for l in last_text.lines().filter(|l| !l.starts_with('#')) {
        let name = l.split(['{', ' ']).next().unwrap_or("");
        *families.entry(name).or_default() += 1;
        if let Some(p) = l.split("pid=\"").nth(1).and_then(|r| r.split('"').next()) {
            pids.insert(p);
            if p == "folded" {
                if let Some(c) = l.split("comm=\"").nth(1).and_then(|r| r.split('"').next()) {
                    groups.insert(c);
                }
            }
        }
    }
    let mut families: Vec<_> = families.into_iter().collect();
    families.sort_by_key(|f| std::cmp::Reverse(f.1));
    let top: Vec<String> = (families.iter().take(4))
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    line(format!(
        "  sample lines at the end by family: {}; {} distinct pid labels (\"folded\" included), {} folded groups; kept in {}",
        top.join(", "),
        pids.len(),
        groups.len(),
        work.join("agent-metrics-end.txt").display()
    ));
    for l in log.lines().filter(|l| l.contains("msg=status")) {
        line(format!("  agent log: {l}"));
    }
    if !scrape_failures.is_empty() {
        line(format!("  failed scrapes: {}", scrape_failures.join("; ")));
    }
    line(format!(
        "  ended by SIGTERM: {} after {exit_s:.1} s; held {}; left loaded: {}",
        status.map_or("killed".to_string(), |s| s.to_string()),
        ids_text(&ids),
        if left.is_empty() {
            "none".to_string()
        } else {
            left.join(", ")
        }
    ));
    println!("\n{out}");
    if !failures.is_empty() {
        bail!("agent soak failed:\n  {}", failures.join("\n  "));
    }
    Ok(())
}
