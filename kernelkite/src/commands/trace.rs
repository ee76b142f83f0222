//! `kernelkite trace --pid N`: attach eBPF programs to running processes and explain
//! where their time goes.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::TraceArgs;

pub fn execute(args: &TraceArgs) -> Result<ExitCode> {
    if let Some(d) = args.duration {
        // At most a year: keeps the deadline representable.
        if !(d.is_finite() && d > 0.0 && d <= 31_536_000.0) {
            anyhow::bail!(
                "--duration must be a number of seconds above 0 and at most a year, got {}",
                if d.abs() < 1e9 {
                    d.to_string()
                } else {
                    format!("{d:e}")
                }
            );
        }
    }
    platform::execute(args)
}

#[cfg(not(target_os = "linux"))]
mod platform {
    use super::*;
    pub fn execute(_args: &TraceArgs) -> Result<ExitCode> {
        anyhow::bail!("kernelkite trace needs Linux")
    }
}

#[cfg(target_os = "linux")]
mod platform {
    use std::io::{IsTerminal, Write};
    use std::time::{Duration, Instant};

    use anyhow::Context;
    use tokio::io::unix::AsyncFd;
    use tokio::signal::unix::{signal, Signal, SignalKind};

    use super::*;
    use crate::analysis::analyze;
    use crate::commands::recording_file::RecordingFile;
    use crate::export::serve;
    use crate::model::write_bundle;
    use crate::report::stacks::dominant_stacks_text;
    use crate::report::summary::summary_json_with;
    use crate::report::trace::trace_text;
    use crate::report::{json_text, write_stdout};
    use crate::source::cgroups;
    use crate::source::ebpf::availability::Availability;
    use crate::source::ebpf::session::{Session, TraceOptions};

    pub fn execute(args: &TraceArgs) -> Result<ExitCode> {
        if let Some(reason) = Availability::probe().unavailable_reason() {
            anyhow::bail!("eBPF is not available: {reason}");
        }
        if let Some(out) = &args.output {
            crate::output::check_writable(out)?;
        }
        let listener = match args.serve {
            Some(addr) => {
                Some(serve::bind(addr).with_context(|| format!("cannot serve metrics on {addr}"))?)
            }
            None => None,
        };
        let cgroup = match (&args.cgroup, &args.container) {
            (Some(path), _) => Some(cgroups::resolve_dir(path)?),
            (None, Some(id)) => Some(cgroups::resolve_container(id)?),
            (None, None) => None,
        };
        let options = TraceOptions {
            pids: args.pids.clone(),
            // A cgroup's new processes are its own, whoever forks them.
            follow: args.follow || cgroup.is_some(),
            cgroup: cgroup.clone(),
            min_latency_ns: args.min_latency_us.saturating_mul(1000),
            interval: Duration::from_millis(args.session.interval_ms),
            max_frames: args.frame_cap.max_frames,
            max_frame_bytes: args.frame_cap.max_frame_bytes()?,
            max_threads: Some(args.max_threads),
            network: args.session.network,
            label: args.session.label.clone(),
            stacks: crate::commands::stack_options(&args.stacks),
            critical_path: args.critical_path,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the event loop")?;
        // Listen for Ctrl-C before the hooks go live: a signal sent as soon as the
        // "hooks live" line appears must end the trace with its report, not be lost.
        let signals = {
            let _runtime = runtime.enter();
            Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
                // Under nohup (SIGHUP ignored on entry) a hangup is meant not to stop it.
                hangup: if ignored_on_entry(libc::SIGHUP) {
                    None
                } else {
                    Some(signal(SignalKind::hangup())?)
                },
            }
        };
        let record = RecordingFile::create(&args.recording)?;
        let started = Session::start_recorded(options, record.as_ref().map(RecordingFile::sink));
        let mut session = match started {
            Ok(session) => session,
            Err(e) => {
                record.iter().for_each(RecordingFile::discard_if_empty);
                return Err(e.into());
            }
        };
        if listener.is_some() {
            session.keep_frame_digest();
            // A scrape shows a thread blocked since attach as its time passes.
            session.count_initial_in_frames(true);
        }
        for note in session.notes() {
            crate::note!("kernelkite: {note}");
        }
        let what = match &cgroup {
            Some(c) => {
                let n = session.live_pids().len();
                let s = if n == 1 { "" } else { "es" };
                format!("cgroup {} ({n} process{s} now)", c.path)
            }
            None => format!(
                "pid {}",
                (args.pids.iter().map(|p| p.to_string()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        crate::note!(
            "kernelkite: tracing {what} with eBPF ({} hooks live in {:.0} ms); Ctrl-C to stop",
            session.hooks().len(),
            session.attach_ms()
        );
        let stop = runtime.block_on(async {
            let mut scrapes = None;
            if let Some(listener) = listener {
                let (tx, rx) = tokio::sync::mpsc::channel::<serve::Scrape>(16);
                crate::note!(
                    "kernelkite: serving metrics at http://{}/metrics",
                    listener.local_addr()?
                );
                tokio::spawn(serve::serve(listener, tx, false));
                scrapes = Some(rx);
            }
            let cgroup_dir = cgroup.as_ref().map(|c| c.dir.as_path());
            event_loop(&mut session, args, cgroup_dir, scrapes, signals).await
        })?;
        if std::io::stderr().is_terminal() {
            // Over the status line.
            crate::note!("\rkernelkite: stopped: {stop}{:40}", "");
        } else {
            crate::note!("kernelkite: stopped: {stop}");
        }
        session.detach();
        crate::commands::note_lost_events(&session);
        let bundle = session.finish()?;
        // What was measured goes to disk first: printing can fail (a closed pipe) and
        // must not lose it.
        let written = match &args.output {
            Some(out) => write_bundle(out, &bundle)
                .with_context(|| format!("cannot write {}", out.display()))
                .map(|()| crate::note!("kernelkite: wrote {}", crate::output::display_name(out))),
            None => Ok(()),
        };
        let recorded = match record {
            Some(record) => record.finish(bundle.frames.last().map_or(0, |f| f.t_ns)),
            None => Ok(()),
        };
        let analysis = analyze(&bundle);
        let text = if args.json {
            let idle = crate::analysis::waits::idle_split(&bundle, &analysis);
            json_text(&summary_json_with(&analysis, idle.as_ref()))
        } else {
            let mut text = trace_text(&analysis, args.threads);
            // With --stacks: where the dominant class's time went.
            if let Some(stacks) = dominant_stacks_text(&bundle, &analysis, 3) {
                text.push('\n');
                text.push_str(&stacks);
            }
            text
        };
        // The bundle itself went to standard output (`-o -`): the text goes beside it.
        let printed = if args.output.as_deref().is_some_and(crate::output::is_stdout) {
            crate::report::write_stderr(&text).context("cannot write to standard error")
        } else {
            write_stdout(&text).context("cannot write to standard output")
        };
        written?;
        recorded?;
        printed?;
        Ok(ExitCode::SUCCESS)
    }

    /// The signals that end a trace, listened for from before the hooks go live.
    struct Signals {
        interrupt: Signal,
        terminate: Signal,
        /// A closed terminal or ssh session: ends the trace like SIGTERM, with its bundle.
        hangup: Option<Signal>,
    }

    /// Whether `sig` was ignored when kernelkite started (nohup, a background job).
    fn ignored_on_entry(sig: libc::c_int) -> bool {
        // SAFETY: sigaction with a null new action only reads the disposition.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
        }
    }

    /// The next delivery of `signal`; never, without one.
    async fn recv_opt(signal: &mut Option<Signal>) {
        match signal {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }

    /// Drain the ring buffer as records arrive and snapshot the counters every interval,
    /// until the duration passes, a signal arrives, or every target has exited.
    async fn event_loop(
        session: &mut Session,
        args: &TraceArgs,
        cgroup_dir: Option<&std::path::Path>,
        mut scrapes: Option<tokio::sync::mpsc::Receiver<serve::Scrape>>,
        mut signals: Signals,
    ) -> Result<&'static str> {
        // SAFETY: the session keeps its ring buffer's fd open, and outlives this
        // function, where the AsyncFd is dropped.
        let ring = unsafe { AsyncFd::register(crate::commands::RingFd(session.ring_fd())) }
            .map_err(|e| anyhow::anyhow!("polling the ring buffer: {}", e.into_parts().1))?;
        let mut tick = tokio::time::interval(Duration::from_millis(args.session.interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let deadline = args
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d));
        let started = Instant::now();
        let live_status = std::io::stderr().is_terminal();
        let mut last_status = Instant::now() - Duration::from_secs(1);
        // KERNELKITE_DEBUG_SIZES=SECONDS: what the session keeps, every SECONDS (finding
        // what grows over a long session; docs/TESTING.md, Soak).
        let sizes_every = crate::commands::debug_sizes_every();
        let mut last_sizes = Instant::now();
        let stop = loop {
            let until_deadline = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            tokio::select! {
                guard = ring.readable() => {
                    let mut guard = guard?;
                    let exits = session.drain();
                    guard.clear_ready();
                    // Stop as soon as the last traced thread is gone, not a tick later.
                    if exits && cgroup_dir.is_none() && !session.any_target_alive() {
                        break "every traced process exited";
                    }
                }
                _ = tick.tick() => {
                    session.snapshot()?;
                    // The one-line status rewrites itself on a terminal; in a log it
                    // would only pile up.
                    if live_status && last_status.elapsed() >= Duration::from_millis(500) {
                        last_status = Instant::now();
                        let mut stderr = std::io::stderr();
                        let _ = write!(
                            stderr,
                            "\r  {:.1} s  frames {}  events lost {}   ",
                            started.elapsed().as_secs_f64(),
                            session.frames(),
                            session.events_lost()
                        );
                        let _ = stderr.flush();
                    }
                    if sizes_every.is_some_and(|every| last_sizes.elapsed() >= every) {
                        last_sizes = Instant::now();
                        let sizes: Vec<String> = (session.sizes().into_iter())
                            .map(|(name, n)| format!("{name} {n}"))
                            .collect();
                        crate::note!(
                            "kernelkite: sizes at {:.0} s: {}",
                            started.elapsed().as_secs_f64(),
                            sizes.join(", ")
                        );
                    }
                    match cgroup_dir {
                        // A cgroup's processes come and go; it ends with the cgroup.
                        Some(dir) if !dir.exists() => break "the cgroup was removed",
                        Some(_) => {}
                        None if !session.any_target_alive() => {
                            break "every traced process exited";
                        }
                        None => {}
                    }
                }
                Some(ask) = next_scrape(&mut scrapes) => {
                    // Profiles are not served here (the server answers 404).
                    if let serve::Ask::Metrics(reply) = ask {
                        let _ = reply.send(session.with_bundle_so_far(serve::exposition));
                    }
                }
                _ = signals.interrupt.recv() => break "interrupted",
                _ = signals.terminate.recv() => break "terminated",
                _ = recv_opt(&mut signals.hangup) => break "hung up",
                _ = sleep_opt(until_deadline) => break "duration reached",
            }
        };
        // Whatever is still queued belongs to the session.
        session.drain();
        Ok(stop)
    }

    /// The next `--serve` scrape; never, without `--serve`.
    async fn next_scrape(
        scrapes: &mut Option<tokio::sync::mpsc::Receiver<serve::Scrape>>,
    ) -> Option<serve::Scrape> {
        match scrapes {
            Some(rx) => rx.recv().await,
            None => std::future::pending().await,
        }
    }

    async fn sleep_opt(d: Option<Duration>) {
        match d {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    }
}
