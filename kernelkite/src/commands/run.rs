//! `kernelkite run <bundle> -- <cmd> [args...]`: launch a command, sample it and every
//! descendant from /proc until the whole tree has exited, write the bundle, and exit
//! with the command's own status (128 + N when signal N killed it). Its own failures
//! exit as `env` and `timeout` do: 125 kernelkite failed, 126 the command was found but
//! cannot be run, 127 it was not found.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::RunArgs;

/// `run`'s status when kernelkite itself failed (the command's own statuses are its own).
pub const STATUS_OWN_ERROR: u8 = 125;

/// The command could not be started: the status says why, as a shell's would.
#[derive(Debug, thiserror::Error)]
#[error("cannot run {program}")]
pub struct CommandNotStarted {
    pub program: String,
    /// 127: not found; 126: found but not executable.
    pub status: u8,
}

impl CommandNotStarted {
    /// Whether `err` (from finding or executing `program`) is the command's fault, and
    /// with which status.
    pub fn classify(program: &str, err: &std::io::Error) -> Option<CommandNotStarted> {
        let status = match err.raw_os_error()? {
            libc::ENOENT | libc::ENOTDIR => 127,
            libc::EACCES | libc::EPERM | libc::ENOEXEC | libc::EISDIR | libc::ETXTBSY => 126,
            _ => return None,
        };
        Some(CommandNotStarted {
            program: program.to_string(),
            status,
        })
    }
}

/// The error `run` fails with when starting `program` failed: a [`CommandNotStarted`]
/// when the command is at fault, else kernelkite's own error.
#[cfg(target_os = "linux")]
fn not_started(program: &str, err: std::io::Error) -> anyhow::Error {
    match CommandNotStarted::classify(program, &err) {
        Some(not_started) => anyhow::Error::new(err).context(not_started),
        None => anyhow::Error::new(err).context(format!("cannot run {program}")),
    }
}

pub fn execute(args: &RunArgs) -> Result<ExitCode> {
    #[cfg(target_os = "linux")]
    {
        linux::execute(args)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = args;
        anyhow::bail!("kernelkite run needs Linux")
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::path::Path;
    use std::process::ExitCode;
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context, Result};

    use crate::cli::{BackendChoice, RunArgs};
    use crate::collect::RecordedFold;
    use crate::commands::recording_file::RecordingFile;
    use crate::model::{self, Backend, Bundle, Frame, HostConstants, LaunchedCommand, OnCpuSource};
    use crate::recording::{
        ClockAnchor, Record, RecordRef, RecordSink, SessionStart, SharedRecording,
    };
    use crate::source::ebpf::availability::Availability;
    use crate::source::ebpf::session::{self as ebpf, TraceOptions};
    use crate::source::exit_stops::{Stop, READ_AGAIN_RSS_BYTES};
    use crate::source::host::current_host;
    use crate::source::launch::{
        find_program, raise_open_file_limit, signal_child, ChildEvent, CommandUsers, Exit,
        Launcher, ReapedRusage, StartGate,
    };
    use crate::source::procfs::{
        IdentityReader, Sampler, SamplerOptions, Schedule, Scope, PROC_ROOT,
    };

    /// `run` streams single syscalls at least this slow (10 ms), as `trace` does by default.
    const RUN_MIN_LATENCY_NS: u64 = 10_000_000;

    pub(super) fn execute(args: &RunArgs) -> Result<ExitCode> {
        args.frame_cap.max_frame_bytes()?;
        let users = CommandUsers::resolve(args.user.as_deref())?;
        crate::output::check_writable(&args.bundle)?;
        let recording_file = RecordingFile::create(&args.recording)?;
        let profiled = profile(args, users, recording_file.as_ref());
        if profiled.is_err() {
            recording_file
                .iter()
                .for_each(RecordingFile::discard_if_empty);
        }
        let (bundle, exit) = profiled?;
        model::write_bundle(&args.bundle, &bundle)
            .with_context(|| format!("cannot write bundle {}", args.bundle.display()))?;
        report_written(&args.bundle, &bundle);
        if let Some(record) = recording_file {
            if let Some(launched) = &bundle.launched {
                record.recording.append(RecordRef::Launched(launched));
            }
            record.finish(bundle.frames.last().map_or(0, |f| f.t_ns))?;
        }
        // Only if someone else reaped the command (it cannot happen: we are its parent).
        Ok(ExitCode::from(exit.map_or(1, Exit::shell_status)))
    }

    /// Choose the backend, launch the command and profile it until its whole tree has
    /// been reaped.
    fn profile(
        args: &RunArgs,
        users: CommandUsers,
        recording_file: Option<&RecordingFile>,
    ) -> Result<(Bundle, Option<Exit>)> {
        match args.backend {
            BackendChoice::Proc if args.stacks.stacks => {
                bail!("--stacks needs the eBPF backend (not --backend proc)")
            }
            BackendChoice::Proc if args.critical_path => {
                bail!("--critical-path needs the eBPF backend (not --backend proc)")
            }
            _ => {}
        }
        let mut launcher =
            Launcher::prepare(users).context("cannot prepare to launch the command")?;
        // The command's process is forked first, held at its gate until it is watched:
        // it starts as a copy of kernelkite, and the kernel keeps that copy's resident
        // set in the command's ru_maxrss across the exec. Forked now, before the probes
        // are loaded (their object and BTF take 8 MiB of kernelkite's heap), the copy is
        // smaller than nearly any program's own peak.
        find_program(&args.command[0]).map_err(|e| super::not_started(&args.command[0], e))?;
        let (pid, gate) = launcher
            .spawn_gated(&args.command)
            .map_err(|e| super::not_started(&args.command[0], e))?;
        raise_open_file_limit();
        let recording = recording_file.map(|r| &r.recording);
        match choose_backend(args) {
            Ok(Some(mut ebpf)) => {
                if let Some(r) = recording_file {
                    ebpf.record_to(r.sink());
                }
                record_ebpf(&mut launcher, pid, gate, ebpf, args)
            }
            Ok(None) => {
                let options = SamplerOptions {
                    threads: true,
                    network: args.session.network,
                };
                let sampler = match Sampler::new(Path::new(PROC_ROOT), options) {
                    Ok(sampler) => sampler,
                    Err(e) => {
                        abandon(&mut launcher, gate);
                        return Err(anyhow::Error::new(e).context("cannot sample /proc"));
                    }
                };
                let host = current_host(OnCpuSource::Schedstat);
                let run = record(&mut launcher, pid, gate, sampler, args, host, recording)?;
                let mut bundle = run.kept.finish();
                let mut rusage = run.rusage;
                make_max_rss_exact(&launcher, &mut rusage, &bundle);
                bundle.launched = Some(launched_command(args, run.pid, run.exit, rusage));
                Ok((bundle, run.exit))
            }
            Err(e) => {
                abandon(&mut launcher, gate);
                Err(e)
            }
        }
    }

    /// The eBPF session when it may be used (loaded, not attached), else `None` for the
    /// /proc sampler; never a silent downgrade.
    fn choose_backend(args: &RunArgs) -> Result<Option<ebpf::Session>> {
        Ok(match args.backend {
            BackendChoice::Proc => None,
            BackendChoice::Ebpf => Some(load_probes(args).context("eBPF is not available")?),
            BackendChoice::Auto => match load_probes(args) {
                Ok(session) => Some(session),
                Err(e) if args.stacks.stacks => {
                    return Err(e.context("--stacks needs the eBPF backend, which is not available"))
                }
                Err(e) if args.critical_path => {
                    return Err(
                        e.context("--critical-path needs the eBPF backend, which is not available")
                    )
                }
                Err(e) => {
                    crate::note!(
                        "kernelkite: using the /proc sampler: eBPF is not available: {e:#}"
                    );
                    None
                }
            },
        })
    }

    /// The command never runs: the dropped gate makes its process exit (std's spawn
    /// reaps it); reap anything else.
    fn abandon(launcher: &mut Launcher, gate: StartGate) {
        drop(gate);
        while launcher.reap().unwrap_or(false) {
            launcher.wait_until(Instant::now() + Duration::from_millis(50));
        }
    }

    /// Say so once the command runs as root without anybody having asked for it.
    fn note_root(launcher: &Launcher) {
        if let Some(note) = launcher.users().root_without_invoker() {
            crate::note!("kernelkite: {note}");
        }
    }

    /// What one /proc-sampled run of the command produced.
    struct SampledRun {
        pid: i32,
        exit: Option<Exit>,
        rusage: ReapedRusage,
        /// The frames, folded as a recording of them is replayed.
        kept: RecordedFold,
    }

    /// Launch the command and sample its tree until every process in it has exited
    /// and been reaped.
    fn record(
        launcher: &mut Launcher,
        pid: i32,
        gate: StartGate,
        mut sampler: Sampler,
        args: &RunArgs,
        host: HostConstants,
        recording: Option<&SharedRecording>,
    ) -> Result<SampledRun> {
        let clock = ClockAnchor::read();
        let start = Instant::now();
        // Whether to read a thread again once it is gone: a large process's teardown.
        let page_bytes = host.page_size_bytes.max(1);
        let start_record = SessionStart {
            backend: Backend::Proc,
            label: args.session.label.clone(),
            host,
            interval_ms: args.session.interval_ms,
            max_frames: args.frame_cap.max_frames,
            min_latency_ns: 0,
            follow: true,
            network: args.session.network,
            root_pids: vec![pid],
            clock,
        };
        let sink = recording.map(|r| Box::new(r.clone()) as Box<dyn RecordSink>);
        let mut kept = RecordedFold::new(start_record, args.frame_cap.max_frame_bytes()?, sink);
        let me = std::process::id() as i32;
        let mut schedule = Schedule::new(start, Duration::from_millis(args.session.interval_ms));
        // At an exit stop, the thread's final counters, and a process's command line.
        let exits_past_cap = std::cell::Cell::new(0u64);
        let (identities, note) = IdentityReader::new();
        if let Some(note) = note {
            crate::note!("kernelkite: {note}");
        }
        let identities = std::cell::RefCell::new(identities);
        let at_stop = |kept: &mut RecordedFold, sampler: &mut Sampler, stop: Stop, t_ns| {
            let (exit, leader_alive) = match stop {
                Stop::Exit { tid } => (sampler.sample_exit(tid, t_ns), true),
                Stop::Gone { tid, pid } => (sampler.sample_gone(tid, pid, t_ns), false),
            };
            let Some(exit) = exit else {
                return false;
            };
            // By the process's peak (VmHWM): the last thread to go may read an RSS of 0
            // (its leader, a zombie, holds no memory) and still be the one to unmap it.
            let peak_bytes = match exit.peak_rss_kib {
                Some(kib) => kib.saturating_mul(1024),
                None => exit.process.rss_pages.saturating_mul(page_bytes),
            };
            let read_again = peak_bytes >= READ_AGAIN_RSS_BYTES;
            let tid = exit.process.threads.first().map_or(0, |t| t.tid);
            let leader = leader_alive && exit.process.pid == tid;
            if !kept.push(Record::ThreadExit(exit)) {
                exits_past_cap.set(exits_past_cap.get() + 1);
            }
            if let Some(line) = leader.then(|| sampler.command_line(tid, t_ns)).flatten() {
                kept.push(Record::CommandLine(line));
            }
            // A process shorter than a frame is read here, at its exit, if not before.
            let identity = leader.then(|| identities.borrow_mut().read(sampler, tid, t_ns));
            if let Some(Some((Some(identity), _))) = identity {
                kept.push(Record::ProcessIdentity(identity));
            }
            read_again
        };
        if args.no_exit_stops {
            gate.open_or_killed()
                .map_err(|e| super::not_started(&args.command[0], e))?;
        } else {
            let fell_back = launcher
                .start_with_exit_stops(gate, &mut |stop| {
                    at_stop(&mut kept, &mut sampler, stop, schedule.t_ns(Instant::now()))
                })
                .map_err(|e| super::not_started(&args.command[0], e))?;
            if let Some(why) = fell_back {
                crate::note!("kernelkite: {why}");
            }
        }
        note_root(launcher);
        let take_frame = |kept: &mut RecordedFold, sampler: &mut Sampler, schedule: &Schedule| {
            let now = Instant::now();
            // The whole tree is below kernelkite, its subreaper; only a vanished /proc
            // can fail here, and then the tick is skipped.
            if let Ok(frame) = sampler.sample(Scope::DescendantsOf(me), schedule.t_ns(now)) {
                let mut identities = identities.borrow_mut();
                for p in &frame.processes {
                    if let Some((Some(identity), _)) = identities.read(sampler, p.pid, frame.t_ns) {
                        kept.push(Record::ProcessIdentity(identity));
                    }
                }
                let live: std::collections::BTreeSet<i32> =
                    frame.processes.iter().map(|p| p.pid).collect();
                identities.retain(|pid| live.contains(&pid));
                kept.push(Record::Frame(frame));
            }
        };

        take_frame(&mut kept, &mut sampler, &schedule);
        // Zombie samples hold exited children's final counters; the root's exit is the
        // final frame unless orphans outlive it.
        until_reaped(launcher, &mut schedule, None, |tick, schedule| {
            match tick {
                Tick::Woke => {}
                Tick::ForwardToOrphans(sig) => signal_orphans(kept.fold().frames().last(), me, sig),
                Tick::Sample => take_frame(&mut kept, &mut sampler, schedule),
                Tick::Stopped(stop) => {
                    let t_ns = schedule.t_ns(Instant::now());
                    return Ok(at_stop(&mut kept, &mut sampler, stop, t_ns));
                }
            }
            Ok(false)
        })?;
        if exits_past_cap.get() > 0 {
            crate::note!(
                "kernelkite: {} thread exits past the {} kept were not recorded: their processes' rows are sampled",
                exits_past_cap.get(),
                crate::model::frame_keeper::MAX_EVENTS
            );
        }
        // Everything is reaped: the reaped processes' rusage covers the whole tree exactly.
        let rusage = launcher.reaped_rusage();
        if kept.fold().frames().is_empty() {
            // Only if /proc failed on every tick; a bundle needs a frame.
            let t_ns = schedule.t_ns(Instant::now());
            kept.push(Record::Frame(Frame {
                t_ns,
                processes: Vec::new(),
                network: None,
                host_steal_ticks: None,
            }));
        }
        Ok(SampledRun {
            pid,
            exit: launcher.exit(),
            rusage,
            kept,
        })
    }

    /// What [`until_reaped`] asks of a keeper.
    enum Tick {
        /// A child changed state, a signal arrived, or a deadline passed.
        Woke,
        /// SIGINT/SIGTERM arrived after the command exited: pass it to the orphans.
        ForwardToOrphans(i32),
        /// Take a frame: the interval is up, or children exited and are zombies still
        /// holding their final counters.
        Sample,
        /// A traced thread stopped (exit accounting): read what it holds now, before it
        /// goes on.
        Stopped(Stop),
    }

    /// The launcher loop both backends share: wake at every deadline or child exit
    /// (and at least every `wake_every`), sample every interval and whenever children
    /// exit (before reaping them), and return once every descendant has been reaped.
    /// `on` answers `true` to a [`Tick::Stopped`] exit stop to have the thread read
    /// again once it is gone; its answer to other ticks is ignored.
    fn until_reaped(
        launcher: &mut Launcher,
        schedule: &mut Schedule,
        wake_every: Option<Duration>,
        mut on: impl FnMut(Tick, &Schedule) -> Result<bool>,
    ) -> Result<()> {
        loop {
            let deadline = match wake_every {
                Some(d) => schedule.next_deadline().min(Instant::now() + d),
                None => schedule.next_deadline(),
            };
            launcher.wait_until(deadline);
            on(Tick::Woke, schedule)?;
            if let Some(sig) = launcher.take_signal_for_orphans() {
                on(Tick::ForwardToOrphans(sig), schedule)?;
            }
            loop {
                let mut failed = None;
                let event = launcher
                    .serve_stops(&mut |stop| match on(Tick::Stopped(stop), schedule) {
                        Ok(read_again) => read_again,
                        Err(e) => {
                            failed.get_or_insert(e);
                            false
                        }
                    })
                    .context("cannot wait for the command")?;
                if let Some(e) = failed {
                    return Err(e);
                }
                match event {
                    ChildEvent::Nothing => break,
                    ChildEvent::AllGone => return Ok(()),
                    ChildEvent::Exited => {
                        on(Tick::Sample, schedule)?;
                        if !launcher.reap().context("cannot wait for the command")? {
                            return Ok(());
                        }
                    }
                }
            }
            let now = Instant::now();
            if now >= schedule.next_deadline() {
                on(Tick::Sample, schedule)?;
                schedule.advance(now);
            }
        }
    }

    /// How often `run --stacks` drains the ring buffer (about 25 copies a CPU at the
    /// copy rate bound, a tenth of what the ring holds for them).
    const RING_DRAIN_WITH_STACKS: Duration = Duration::from_millis(10);

    /// The eBPF programs, loaded and attached, with no target yet.
    fn load_probes(args: &RunArgs) -> Result<ebpf::Session> {
        if let Some(reason) = Availability::probe().unavailable_reason() {
            bail!("{reason}");
        }
        let session = ebpf::Session::load(TraceOptions {
            pids: Vec::new(),
            follow: true,
            min_latency_ns: RUN_MIN_LATENCY_NS,
            interval: Duration::from_millis(args.session.interval_ms),
            max_frames: args.frame_cap.max_frames,
            max_frame_bytes: args.frame_cap.max_frame_bytes()?,
            max_threads: None,
            network: args.session.network,
            label: args.session.label.clone(),
            stacks: crate::commands::stack_options(&args.stacks),
            critical_path: args.critical_path,
            cgroup: None,
        })?;
        for note in session.notes() {
            crate::note!("kernelkite: {note}");
        }
        Ok(session)
    }

    /// Launch the command held at a start gate, point the loaded programs at it (and,
    /// through fork, at every descendant), let it run, and snapshot the in-kernel
    /// counters every interval until the whole tree has exited and been reaped.
    fn record_ebpf(
        launcher: &mut Launcher,
        pid: i32,
        gate: StartGate,
        mut session: ebpf::Session,
        args: &RunArgs,
    ) -> Result<(Bundle, Option<Exit>)> {
        // Once the child waits at the gate, its CPU so far is kernelkite's start-up in
        // it; read before the attach, so none of it is also traced.
        let untraced_cpu_ns = waits_at_gate(pid).then(|| schedstat_cpu_ns(pid)).flatten();
        match session.attach_to_gated(pid) {
            Ok(()) => {}
            Err(e) => {
                abandon(launcher, gate);
                return Err(e).context("cannot trace the command");
            }
        };
        gate.open_or_killed()
            .map_err(|e| super::not_started(&args.command[0], e))?;
        note_root(launcher);
        let mut schedule = Schedule::new(
            Instant::now(),
            Duration::from_millis(args.session.interval_ms),
        );
        // `--stacks` copies fill the ring buffer far faster than lifecycle records:
        // drain it every 10 ms.
        // So do --critical-path's wakeup records.
        let wake_every =
            (args.stacks.stacks || args.critical_path).then_some(RING_DRAIN_WITH_STACKS);
        until_reaped(launcher, &mut schedule, wake_every, |tick, _| {
            match tick {
                Tick::Woke => {
                    session.drain();
                }
                Tick::ForwardToOrphans(sig) => {
                    for p in session.live_pids() {
                        signal_child(p, sig);
                    }
                }
                Tick::Sample => session.snapshot()?,
                // The eBPF programs see every exit: the command is not ptraced.
                Tick::Stopped(_) => {}
            }
            Ok(false)
        })?;
        // The last thread of a reaped process may still be on its way off the CPU; its
        // exit record follows within moments of the reap, unless the hypervisor stalls
        // that CPU first (then seconds, on a busy host). The wait ends as soon as no
        // exit is pending, so only a thread stuck in its exit makes `run` wait it out.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            session.drain();
            if !session.exits_pending() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Everything is reaped: the reaped processes' rusage covers the whole tree exactly.
        let mut rusage = launcher.reaped_rusage();
        let exit = launcher.exit();
        session.detach();
        crate::commands::note_lost_events(&session);
        let mut bundle = session.finish()?;
        make_max_rss_exact(launcher, &mut rusage, &bundle);
        let mut launched = launched_command(args, pid, exit, rusage);
        launched.untraced_cpu_ns = untraced_cpu_ns;
        bundle.launched = Some(launched);
        Ok((bundle, exit))
    }

    /// Where the command's `ru_maxrss` is only a bound (it holds kernelkite's pre-exec
    /// copy), make the largest process's figure exact from each process's own peak:
    /// taskstats' (as root, [`Launcher::adopt_exit_peaks`]), else exit accounting's
    /// VmHWM read at each exit stop, after any exec, where every process of the tree
    /// (the bundle's rows and lifecycle-only processes) has one. The bundle is analysed
    /// only then.
    fn make_max_rss_exact(launcher: &Launcher, rusage: &mut ReapedRusage, bundle: &Bundle) {
        if !rusage.max_rss_upper_bound {
            return;
        }
        let a = crate::analysis::analyze(bundle);
        let pids: Vec<u32> = a.processes.iter().map(|p| p.pid as u32).collect();
        launcher.adopt_exit_peaks(rusage, &pids);
        if !rusage.max_rss_upper_bound {
            return;
        }
        let peaks: Option<Vec<u64>> = (a.processes.iter())
            .map(|p| p.exact_at_exit.then_some(p.peak_rss_bytes).flatten())
            .collect();
        if let Some(largest) = peaks.and_then(|p| p.into_iter().max()) {
            rusage.tree.max_rss_kib = largest / 1024;
            rusage.max_rss_upper_bound = false;
        }
    }

    /// Wait (up to 5 s) until the gated child blocks in the gate's one-byte read(2), as
    /// `/proc/<pid>/syscall` shows (the dynamic loader's reads are larger).
    fn waits_at_gate(pid: i32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall"));
            let fields: Vec<String> = syscall
                .map(|s| s.split_whitespace().take(4).map(str::to_owned).collect())
                .unwrap_or_default();
            if fields.len() == 4
                && fields[0].parse::<i64>().ok() == Some(libc::SYS_read)
                && fields[3] == "0x1"
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// `/proc/<pid>/schedstat` field 1: the CPU the kernel accounted to the process's
    /// (only) thread, ns.
    fn schedstat_cpu_ns(pid: i32) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
        text.split_whitespace().next()?.parse().ok()
    }

    fn launched_command(
        args: &RunArgs,
        pid: i32,
        exit: Option<Exit>,
        rusage: ReapedRusage,
    ) -> LaunchedCommand {
        LaunchedCommand {
            argv: args.command.clone(),
            pid,
            exit_code: match exit {
                Some(Exit::Code(c)) => Some(c),
                _ => None,
            },
            signal: match exit {
                Some(Exit::Signal(s)) => Some(s),
                _ => None,
            },
            rusage: Some(rusage.tree),
            untraced_cpu_ns: None,
            max_rss_upper_bound: rusage.max_rss_upper_bound,
        }
    }

    /// Tell the user where the bundle went, with the headline numbers.
    fn report_written(path: &Path, bundle: &Bundle) {
        let a = crate::analysis::analyze(bundle);
        let at_most = match a.max_single_rss_source {
            crate::analysis::RssSource::RusageUpperBound => "at most ",
            _ => "",
        };
        crate::note!(
            "kernelkite: wrote {} ({} backend, {}, {} processes, CPU {}, peak RSS {}, largest process {at_most}{}); details: {} summary {}",
            crate::output::display_name(path),
            a.backend,
            crate::report::fmt_ms(a.duration_ms.round()),
            a.distinct_pids,
            crate::report::fmt_secs(a.cpu_seconds),
            crate::report::fmt_bytes(a.peak_rss_bytes),
            crate::report::fmt_bytes(a.max_single_rss_bytes),
            crate::commands::invocation::self_command(),
            crate::commands::invocation::shell_quote(&path.to_string_lossy())
        );
    }

    /// Pass a signal on to the processes that were reparented to kernelkite after the
    /// command itself exited.
    fn signal_orphans(last: Option<&Frame>, me: i32, sig: i32) {
        for p in last
            .into_iter()
            .flat_map(|f| &f.processes)
            .filter(|p| p.ppid == me)
        {
            signal_child(p.pid, sig);
        }
    }
}
