//! Exit accounting's cost (issue 19): a churn of 1,000 short processes (`sh -c 'for i
//! in $(seq 1000); do /bin/true; done'`) run bare, under `kernelkite --backend proc run
//! --no-exit-stops`, and under `kernelkite --backend proc run` (every process stops at
//! its fork, exit and each signal, and is read at its exit stop), and under the floor:
//! a tracer in this process that seizes the command with the same options and reads
//! nothing (every stop resumed at once, detached at its exit), which is what the stops
//! themselves cost. The four are interleaved, `--runs` rounds of each, so load that
//! comes and goes falls on all of them; the medians and the ratios of added wall time
//! are reported. Target: at most 5% added wall time against `run --no-exit-stops`.
//! Runs as whoever runs the bench (as root too: the /proc backend is pinned).

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Result};

use super::{median, Ctx, Row};

/// At most 5% more wall time than the same run without exit stops.
const ADDED_WALL_TARGET_PERCENT: f64 = 5.0;
const CHURN: &str = "for i in $(seq 1000); do /bin/true; done";

pub(super) fn benchmarks(ctx: &Ctx) -> Result<Vec<Row>> {
    let kk = ctx.kernelkite.to_string_lossy().into_owned();
    let bundle = ctx.work.join("churn.json").to_string_lossy().into_owned();
    let run = |flags: &[&str]| -> Vec<String> {
        let mut argv: Vec<String> = [kk.as_str(), "--backend", "proc", "run"]
            .iter()
            .chain(flags)
            .map(|s| s.to_string())
            .collect();
        argv.extend([
            bundle.clone(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            CHURN.into(),
        ]);
        argv
    };
    let variants: [(&str, Vec<String>); 3] = [
        ("bare", vec!["sh".into(), "-c".into(), CHURN.into()]),
        ("run --no-exit-stops", run(&["--no-exit-stops"])),
        ("run (exit accounting)", run(&[])),
    ];
    let mut times: [Vec<f64>; 4] = Default::default();
    // One warm-up round, then the measured ones, interleaved.
    for round in 0..=ctx.opts.runs {
        let floor = floor_run(&["sh", "-c", CHURN])?;
        if round > 0 {
            times[3].push(floor);
        }
        for (i, (name, argv)) in variants.iter().enumerate() {
            let t = Instant::now();
            let status = Command::new(&argv[0])
                .args(&argv[1..])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            if !status.success() {
                bail!("{name} failed: {status}");
            }
            if round > 0 {
                times[i].push(t.elapsed().as_secs_f64());
            }
        }
    }
    let medians: Vec<f64> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            median(t)
        })
        .collect();
    for ((name, _), m) in variants.iter().zip(&medians) {
        println!(
            "    1,000 processes, {name}: median {m:.3} s ({} runs)",
            ctx.opts.runs
        );
    }
    let shown = |argv: &[String]| {
        argv.join(" ")
            .replace(&kk, "kernelkite")
            .replace(&bundle, "churn.json")
    };
    let added = |base: f64| 100.0 * (medians[2] - base) / base;
    let mut rows: Vec<Row> = variants
        .iter()
        .zip(&medians)
        .map(|((name, argv), m)| {
            Row::new(
                format!("1,000-process churn, {name}"),
                *m,
                "s",
                &shown(argv),
            )
        })
        .collect();
    rows.push(
        Row::new(
            "exit accounting: added wall time vs run --no-exit-stops",
            added(medians[1]).max(0.0),
            "%",
            "the two runs above, interleaved",
        )
        .target(ADDED_WALL_TARGET_PERCENT),
    );
    rows.push(Row::new(
        "exit accounting: added wall time vs the bare command",
        added(medians[0]).max(0.0),
        "%",
        "the first and last runs above, interleaved",
    ));
    rows.push(Row::new(
        "exit accounting: added wall time per process",
        ((medians[2] - medians[1]) / 1000.0 * 1e6).max(0.0),
        "µs",
        "the two runs above: (exit accounting − --no-exit-stops) / 1,000",
    ));
    rows.push(Row::new(
        "floor: a tracer that reads nothing, added wall time vs bare",
        (100.0 * (medians[3] - medians[0]) / medians[0]).max(0.0),
        "%",
        "xtask's own tracer: PTRACE_SEIZE with fork/vfork/clone/exit events, every stop resumed at once",
    ));
    Ok(rows)
}

/// Run `argv` under the floor tracer; wall seconds. This process forks it held at a
/// pipe, seizes it with kernelkite's options, and serves every stop at once: signals
/// delivered, exits detached. Nothing is read.
fn floor_run(argv: &[&str]) -> Result<f64> {
    use std::ffi::CString;
    let args: Vec<CString> = argv.iter().map(|a| CString::new(*a).unwrap()).collect();
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let devnull = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    let t = Instant::now();
    let mut gate = [0; 2];
    // SAFETY: plain system calls; the child only calls async-signal-safe ones on data
    // prepared before the fork.
    unsafe {
        if libc::pipe(gate.as_mut_ptr()) != 0 {
            bail!("pipe: {}", std::io::Error::last_os_error());
        }
        let pid = libc::fork();
        if pid == 0 {
            let mut b = 0u8;
            libc::close(gate[1]);
            libc::read(gate[0], (&mut b as *mut u8).cast(), 1);
            use std::os::fd::AsRawFd;
            libc::dup2(devnull.as_raw_fd(), 1);
            libc::dup2(devnull.as_raw_fd(), 2);
            libc::execvp(ptrs[0], ptrs.as_ptr());
            libc::_exit(127);
        }
        libc::close(gate[0]);
        let options = libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEVFORK
            | libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACEEXIT;
        if libc::ptrace(libc::PTRACE_SEIZE, pid, 0usize, options as usize) != 0 {
            bail!("PTRACE_SEIZE: {}", std::io::Error::last_os_error());
        }
        libc::write(gate[1], b"x".as_ptr().cast(), 1);
        libc::close(gate[1]);
        let mut exit_status = None;
        loop {
            let mut status = 0;
            let t_id = libc::waitpid(-1, &mut status, libc::__WALL);
            if t_id < 0 {
                break;
            }
            if libc::WIFSTOPPED(status) {
                let event = status >> 16;
                let request = if event == libc::PTRACE_EVENT_EXIT {
                    libc::PTRACE_DETACH
                } else {
                    libc::PTRACE_CONT
                };
                let sig = if event == 0 {
                    libc::WSTOPSIG(status)
                } else {
                    0
                };
                libc::ptrace(request, t_id, 0usize, sig as usize);
            } else if t_id == pid {
                exit_status = Some(status);
            }
        }
        if exit_status != Some(0) {
            bail!("the floor run failed: {exit_status:?}");
        }
    }
    Ok(t.elapsed().as_secs_f64())
}
