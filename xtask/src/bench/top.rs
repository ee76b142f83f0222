//! `kernelkite top`'s own cost: system-wide top at 1 Hz on a machine with 500 extra
//! idle processes (`kk-workload idle_tree --count 500`), in a real terminal (tmux).
//! kernelkite's utime + stime is read from /proc/<pid>/stat after a warm-up and again
//! after the measured span: steady-state % of one core (start-up, e.g. loading the BPF
//! programs, is not included).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{stat_fields, Ctx, Row};

/// The figure: at most 2 % of one core at 1 Hz with 500 processes.
const TOP_TARGET_PERCENT: f64 = 2.0;
const TOP_PROCS: u64 = 500;
const WARM_UP: Duration = Duration::from_secs(3);

/// A private tmux server, killed on drop.
struct Tmux(String);

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.0, "-f", "/dev/null"]);
        c
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").stderr(Stdio::null()).status();
        // tmux leaves the socket file behind.
        let dir = std::env::var_os("TMUX_TMPDIR").unwrap_or_else(|| "/tmp".into());
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let _ = std::fs::remove_file(
            std::path::Path::new(&dir)
                .join(format!("tmux-{uid}"))
                .join(&self.0),
        );
    }
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f = stat_fields(&stat)?;
    Some(f[0] + f[1])
}

pub(super) fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Processes on the machine now (numeric entries of /proc).
pub(super) fn process_count() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count()
        })
        .unwrap_or(0)
}

/// One row: `kernelkite --backend <backend> top --refresh 1` (system-wide).
pub(super) fn top_benchmark(ctx: &Ctx, backend: &str) -> Result<Row> {
    let seconds = ctx.opts.seconds.max(1.0);
    let name = format!("top --backend {backend}, system-wide, +{TOP_PROCS} procs @ 1 s");
    let shown = format!(
        "tmux: kernelkite --backend {backend} top --refresh 1, while kk-workload idle_tree --count {TOP_PROCS} runs; utime+stime over {seconds} s after {} s",
        WARM_UP.as_secs()
    );
    let tmux_ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !tmux_ok {
        return Ok(Row::missing(name, "tmux is not installed", &shown));
    }
    let mut workload = Command::new(&ctx.workload)
        .args([
            "idle_tree",
            "--count",
            &TOP_PROCS.to_string(),
            "--seconds",
            &format!("{}", seconds + WARM_UP.as_secs_f64() + 30.0),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("starting kk-workload idle_tree")?;
    let wpid = workload.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(20);
    while children(wpid).len() < TOP_PROCS as usize && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let result = measure(ctx, backend, seconds);
    // The idle children outlive their parent (they sleep for the run's length): stop
    // them too, or the next backend's run is measured with twice the processes.
    for child in children(wpid) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(child, libc::SIGKILL) };
    }
    let _ = workload.kill();
    let _ = workload.wait();
    match result {
        Ok((percent, procs)) => {
            println!("    {procs} processes on the machine, top CPU {percent:.2} % of a core");
            Ok(Row::new(name, percent, "% of a core", &shown).target(TOP_TARGET_PERCENT))
        }
        Err(e) => Ok(Row::missing(name, format!("{e:#}"), &shown)),
    }
}

fn measure(ctx: &Ctx, backend: &str, seconds: f64) -> Result<(f64, usize)> {
    let tmux = Tmux(format!("kk-bench-top-{}", std::process::id()));
    let line = format!(
        "'{}' --backend {backend} top --refresh 1",
        ctx.kernelkite.to_string_lossy().replace('\'', "'\\''")
    );
    let status = tmux
        .cmd()
        .args([
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "160",
            "-y",
            "50",
            &line,
        ])
        .status()
        .context("starting tmux")?;
    anyhow::ensure!(status.success(), "tmux new-session failed");
    let pane = tmux
        .cmd()
        .args(["display-message", "-p", "-t", "top", "#{pane_pid}"])
        .output()
        .context("tmux display-message")?;
    let pane: i32 = String::from_utf8_lossy(&pane.stdout).trim().parse()?;
    std::thread::sleep(WARM_UP);
    // The shell may have exec'd kernelkite, or run it as its child.
    let pid = std::iter::once(pane)
        .chain(children(pane))
        .find(|&p| comm(p) == "kernelkite")
        .context("kernelkite is not running in the tmux pane (did top fail to start?)")?;
    let (t0, c0) = (Instant::now(), cpu_ticks(pid).context("reading its stat")?);
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (t1, c1) = (Instant::now(), cpu_ticks(pid).context("reading its stat")?);
    let procs = process_count();
    let _ = tmux.cmd().args(["send-keys", "-t", "top", "q"]).status();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu_s = c1.saturating_sub(c0) as f64 / hz;
    Ok((100.0 * cpu_s / (t1 - t0).as_secs_f64(), procs))
}
