//! `kernelkite agent`: always-on tracing of the whole machine (or a selection), served
//! as Prometheus metrics, pushed as OTLP metrics, and profiled on request as pprof.
//!
//! The session is the one `trace` runs, with nothing kept that grows with uptime:
//! frames are handed over (`Session::snapshot_now`), lifecycle events and identity
//! readings are taken at every snapshot, exited processes' histograms are forgotten
//! once read. Everything the agent shows lives in its [`RollingTotals`], which its
//! configuration bounds (docs/AGENT.md).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::analysis::rolling::{FoldBy, RankBy, RollingConfig};
use crate::cli::AgentArgs;

/// `--listen` without one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
/// The largest --config file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The --config file: the long options but --config in snake_case, each optional
/// (`tests::every_long_option_is_a_config_key` holds them to the command line's).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub allow_remote: Option<bool>,
    /// `pid = 1234` or `pid = [1234, 5678]` (`--pid`, repeatable).
    pub pid: Option<OneOrMany<i32>>,
    pub cgroup: Option<PathBuf>,
    pub container: Option<String>,
    pub max_threads: Option<u32>,
    pub stacks: Option<bool>,
    pub min_block_us: Option<u64>,
    pub sample_hz: Option<u64>,
    pub top_processes: Option<usize>,
    pub rank_by: Option<RankBy>,
    pub fold_by: Option<FoldBy>,
    pub max_groups: Option<usize>,
    pub interval: Option<f64>,
    pub otlp_endpoint: Option<String>,
    pub otlp_interval: Option<f64>,
    /// `otlp_header = { NAME = "VALUE" }` (`--otlp-header NAME=VALUE`, repeatable);
    /// `otlp_headers`, the name it had first, is read too.
    #[serde(alias = "otlp_headers")]
    pub otlp_header: Option<BTreeMap<String, String>>,
    pub otlp_queue: Option<usize>,
    pub stacks_epoch: Option<f64>,
}

/// A key given one value or a list of them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrMany::One(v) => vec![v.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// What the agent traces: every process (all empty), these processes and their
/// descendants, or one cgroup subtree (by path or by container or unit).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    pub pids: Vec<i32>,
    pub cgroup: Option<PathBuf>,
    pub container: Option<String>,
}

/// The settings in force: the command line over the file over the defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub listen: SocketAddr,
    pub allow_remote: bool,
    pub selection: Selection,
    pub max_threads: u32,
    pub stacks: bool,
    pub min_block_us: u64,
    pub sample_hz: u64,
    /// With `stacks`: how often the stack capture starts over.
    pub stacks_epoch: Duration,
    pub rolling: RollingConfig,
    pub interval: Duration,
    pub otlp: Option<OtlpSettings>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OtlpSettings {
    pub endpoint: String,
    pub interval: Duration,
    pub headers: Vec<(String, String)>,
    /// Requests kept while the collector is unreachable.
    pub queue_requests: usize,
}

/// Read and parse the --config file (one line on error: the file and what is wrong).
pub fn read_config(path: &Path) -> Result<FileConfig> {
    use std::io::Read;
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("{}: not UTF-8 text", path.display()))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        bail!("{}: larger than {MAX_CONFIG_BYTES} bytes", path.display());
    }
    toml::from_str(&text).map_err(|e| {
        let what = e.message().trim().to_string();
        match e.span() {
            Some(span) => {
                let before = &text.as_bytes()[..span.start.min(text.len())];
                let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
                anyhow::anyhow!("{} line {line}: {what}", path.display())
            }
            None => anyhow::anyhow!("{}: {what}", path.display()),
        }
    })
}

/// The settings from the command line and the file, checked.
pub fn resolve(args: &AgentArgs, file: &FileConfig) -> Result<Settings> {
    let listen = match (args.listen, file.listen) {
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => DEFAULT_LISTEN.parse().expect("a valid address"),
    };
    let allow_remote = args.allow_remote || file.allow_remote.unwrap_or(false);
    if !listen.ip().is_loopback() && !allow_remote {
        bail!(
            "--listen {listen} is not a loopback address: the metrics name every process on \
             the host; add --allow-remote (allow_remote = true) to serve them beyond it"
        );
    }
    let selection = if !args.pids.is_empty() || args.cgroup.is_some() || args.container.is_some() {
        Selection {
            pids: args.pids.clone(),
            cgroup: args.cgroup.clone(),
            container: args.container.clone(),
        }
    } else {
        Selection {
            pids: file.pid.as_ref().map(OneOrMany::to_vec).unwrap_or_default(),
            cgroup: file.cgroup.clone(),
            container: file.container.clone(),
        }
    };
    let chosen = [
        !selection.pids.is_empty(),
        selection.cgroup.is_some(),
        selection.container.is_some(),
    ];
    if chosen.iter().filter(|&&c| c).count() > 1 {
        bail!("pid, cgroup and container each select what is traced: give at most one");
    }
    let max_threads = args.max_threads.or(file.max_threads).unwrap_or(65_536);
    if max_threads == 0 {
        bail!("--max-threads must be at least 1");
    }
    let min_block_us = (args.stacks.min_block_us.or(file.min_block_us))
        .unwrap_or(crate::cli::DEFAULT_MIN_BLOCK_US);
    if min_block_us == 0 {
        bail!("--min-block-us must be at least 1");
    }
    let sample_hz =
        (args.stacks.sample_hz.or(file.sample_hz)).unwrap_or(crate::cli::DEFAULT_SAMPLE_HZ);
    if sample_hz > crate::cli::MAX_SAMPLE_HZ {
        bail!(
            "--sample-hz must be at most {}, got {sample_hz}",
            crate::cli::MAX_SAMPLE_HZ
        );
    }
    let top_processes = args.top_processes.or(file.top_processes).unwrap_or(20);
    if top_processes > 10_000 {
        bail!("--top-processes must be at most 10000, got {top_processes}");
    }
    let max_groups = args.max_groups.or(file.max_groups).unwrap_or(50);
    if !(1..=10_000).contains(&max_groups) {
        bail!("--max-groups must be between 1 and 10000, got {max_groups}");
    }
    let seconds = |name: &str, v: f64, lo: f64, hi: f64| -> Result<Duration> {
        if !(v.is_finite() && (lo..=hi).contains(&v)) {
            bail!("{name} must be between {lo} and {hi} seconds, got {v}");
        }
        Ok(Duration::from_secs_f64(v))
    };
    let interval = seconds(
        "--interval",
        args.interval.or(file.interval).unwrap_or(1.0),
        0.1,
        60.0,
    )?;
    let endpoint = args.otlp_endpoint.clone().or(file.otlp_endpoint.clone());
    let otlp = match endpoint {
        None => None,
        Some(endpoint) => {
            let interval = seconds(
                "--otlp-interval",
                args.otlp_interval.or(file.otlp_interval).unwrap_or(10.0),
                1.0,
                3600.0,
            )?;
            let mut headers: Vec<(String, String)> = (file.otlp_header.iter().flatten())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for h in &args.otlp_headers {
                let Some((k, v)) = h.split_once('=') else {
                    bail!("--otlp-header {h:?}: expected NAME=VALUE");
                };
                headers.retain(|(name, _)| !name.eq_ignore_ascii_case(k));
                headers.push((k.to_string(), v.to_string()));
            }
            let queue_requests = args.otlp_queue.or(file.otlp_queue).unwrap_or(64);
            if !(1..=10_000).contains(&queue_requests) {
                bail!("--otlp-queue must be between 1 and 10000, got {queue_requests}");
            }
            Some(OtlpSettings {
                endpoint,
                interval,
                headers,
                queue_requests,
            })
        }
    };
    Ok(Settings {
        listen,
        allow_remote,
        selection,
        max_threads,
        stacks: args.stacks.stacks || file.stacks.unwrap_or(false),
        min_block_us,
        sample_hz,
        stacks_epoch: seconds(
            "--stacks-epoch",
            args.stacks_epoch.or(file.stacks_epoch).unwrap_or(600.0),
            10.0,
            86_400.0,
        )?,
        rolling: RollingConfig {
            top_processes,
            max_groups,
            fold_by: args.fold_by.or(file.fold_by).unwrap_or_default(),
            rank_by: args.rank_by.or(file.rank_by).unwrap_or_default(),
        },
        interval,
        otlp,
    })
}

/// One logfmt line on stderr (journald and `kubectl logs` keep it as one record):
/// `level=info msg="..." key=value ...`.
pub fn log(level: &str, msg: &str, fields: &[(&str, String)]) {
    let mut line = format!("level={level} msg={}", logfmt_value(msg));
    for (k, v) in fields {
        line.push_str(&format!(" {k}={}", logfmt_value(v)));
    }
    crate::note!("{line}");
}

/// A logfmt value: bare when it has no space, quote or `=`, else quoted and escaped
/// (control characters too: a process name cannot forge a log line).
fn logfmt_value(v: &str) -> String {
    let bare = !v.is_empty()
        && v.chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '"' && c != '=');
    if bare {
        return v.to_string();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn execute(args: &AgentArgs) -> Result<ExitCode> {
    let file = match &args.config {
        Some(path) => read_config(path)?,
        None => FileConfig::default(),
    };
    let settings = resolve(args, &file)?;
    platform::execute(args, settings)
}

#[cfg(not(target_os = "linux"))]
mod platform {
    use super::*;
    pub fn execute(_: &AgentArgs, _: Settings) -> Result<ExitCode> {
        bail!("kernelkite agent needs Linux")
    }
}

#[cfg(target_os = "linux")]
mod platform {
    use std::time::Instant;

    use tokio::io::unix::AsyncFd;
    use tokio::signal::unix::{signal, SignalKind};
    use tokio::sync::{mpsc, oneshot};

    use super::*;
    use crate::analysis::rolling::{RollingTotals, Tick};
    use crate::export::otlp_push::{self, Endpoint, PushConfig, Pusher};
    use crate::export::prometheus::{render_snapshot, AgentMetrics, Snapshot};
    use crate::export::serve::{self, Ask};
    use crate::model::StackProfile;
    use crate::source::cgroups;
    use crate::source::ebpf::availability::Availability;
    use crate::source::ebpf::session::{Session, TraceOptions};

    /// Profiles being taken at once (each holds a copy of the stack profile).
    const MAX_PENDING_PROFILES: usize = 4;
    /// How long SIGTERM waits for the last OTLP requests to be delivered.
    const OTLP_FLUSH: Duration = Duration::from_secs(5);

    /// The pusher's configuration, checked (a bad URL or header is one line).
    fn push_config(o: &OtlpSettings) -> Result<PushConfig> {
        let endpoint = Endpoint::parse(&o.endpoint)?;
        let mut config = PushConfig::new(endpoint);
        for (name, value) in &o.headers {
            config.add_header(name, value)?;
        }
        config.queue_capacity_requests = o.queue_requests;
        Ok(config)
    }

    /// A `/debug/pprof/profile` request: the profile as of the latest snapshot when it
    /// came, and that snapshot's session time. Stacks are resolved at snapshots, so the
    /// profile spans whole snapshot intervals: it is answered at the first snapshot at
    /// least `seconds` after `since_ns`, with its real length.
    struct PendingProfile {
        since: StackProfile,
        since_ns: u64,
        seconds: u32,
        reply: oneshot::Sender<Result<Vec<u8>, String>>,
    }

    pub fn execute(args: &AgentArgs, settings: Settings) -> Result<ExitCode> {
        keep_large_buffers_mapped();
        if let Some(reason) = Availability::probe().unavailable_reason() {
            bail!("eBPF is not available: {reason}");
        }
        let listener = serve::bind(settings.listen)
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        // Port 0 picks a free port: the log says which.
        let bound = listener.local_addr()?;
        let selection = &settings.selection;
        let cgroup = match (&selection.cgroup, &selection.container) {
            (Some(path), _) => Some(cgroups::resolve_dir(path)?),
            (None, Some(id)) => Some(cgroups::resolve_container(id)?),
            (None, None) => None,
        };
        let whole_machine = selection.pids.is_empty() && cgroup.is_none();
        // A bad OTLP endpoint or header fails before anything is attached.
        let push = settings.otlp.as_ref().map(push_config).transpose()?;
        crate::source::ebpf::session::check_pids_exist(&selection.pids)?;
        let options = TraceOptions {
            // The whole machine: pid 1 and everything it forks (as `top` does).
            pids: if whole_machine {
                vec![1]
            } else {
                selection.pids.clone()
            },
            follow: true,
            cgroup: cgroup.clone(),
            // No slow-call stream: the histograms have every call.
            min_latency_ns: 0,
            interval: settings.interval,
            // Frames are handed over, never kept.
            max_frames: 2,
            max_frame_bytes: 64 << 20,
            max_threads: Some(settings.max_threads),
            network: false,
            label: None,
            stacks: settings
                .stacks
                .then_some(crate::source::ebpf::loader::StackOptions {
                    min_block_ns: settings.min_block_us.saturating_mul(1000),
                    sample_hz: settings.sample_hz,
                }),
            critical_path: false,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the event loop")?;
        let (mut interrupt, mut terminate, mut hangup) = {
            let _runtime = runtime.enter();
            (
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
                signal(SignalKind::hangup())?,
            )
        };
        let start = |options: TraceOptions| -> Result<Session> {
            let mut session = Session::start_recorded(options, None)?;
            session.count_initial_in_frames(true);
            if whole_machine {
                session.untrack_self()?;
            }
            Ok(session)
        };
        let mut session = start(options.clone())?;
        for note in session.notes() {
            log("warn", note, &[]);
        }
        let what = match (&cgroup, whole_machine) {
            (Some(c), _) => format!("cgroup {}", c.path),
            (None, true) => "the whole machine".to_string(),
            (None, false) => format!("{} process trees", selection.pids.len()),
        };
        log(
            "info",
            &format!("tracing {what}"),
            &[
                ("hooks", session.hooks().len().to_string()),
                ("attach_ms", format!("{:.0}", session.attach_ms())),
                ("listen", bound.to_string()),
            ],
        );
        if !settings.listen.ip().is_loopback() {
            log(
                "warn",
                "serving metrics beyond loopback (--allow-remote)",
                &[("listen", settings.listen.to_string())],
            );
        }
        let mut agent = Agent {
            rolling: RollingTotals::new(settings.rolling),
            settings,
            args,
            started: Instant::now(),
            start_unix_s: unix_now_s(),
            pending: Vec::new(),
            snapshot_ns: 0,
            pusher: None,
            next_push: Instant::now(),
            stack_epochs: 0,
            epoch_offset_ns: 0,
            host_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default(),
        };
        let stop = runtime.block_on(async {
            if let Some(config) = push {
                agent.start_pusher(config);
            }
            let (tx, mut asks) = mpsc::channel::<Ask>(16);
            tokio::spawn(serve::serve(listener, tx, agent.settings.stacks));
            let mut epoch_started = Instant::now();
            let mut tick = tokio::time::interval(agent.settings.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_log = Instant::now();
            // KERNELKITE_DEBUG_SIZES=SECONDS: what the session and the series keep, every
            // SECONDS (the soak reads it to find what grows; docs/TESTING.md).
            let sizes_every = crate::commands::debug_sizes_every();
            let mut last_sizes = Instant::now();
            let stop: Result<&str> = 'sessions: loop {
                // SAFETY: the session keeps its ring buffer's fd open while this AsyncFd
                // lives (it is dropped before the session is replaced or ends).
                let ring = unsafe { AsyncFd::register(crate::commands::RingFd(session.ring_fd())) }
                    .map_err(|e| {
                        anyhow::anyhow!("polling the ring buffer: {}", e.into_parts().1)
                    })?;
                loop {
                    tokio::select! {
                        guard = ring.readable() => {
                            let mut guard = guard?;
                            session.drain();
                            guard.clear_ready();
                        }
                        _ = tick.tick() => {
                            if let Err(e) = agent.snapshot(&mut session) {
                                break 'sessions Err(e);
                            }
                            agent.answer_due_profiles(&session);
                            agent.push_if_due(&session);
                            if sizes_every.is_some_and(|every| last_sizes.elapsed() >= every) {
                                last_sizes = Instant::now();
                                let fields: Vec<(&str, String)> = (session.sizes().into_iter())
                                    .chain(agent.rolling.sizes())
                                    .map(|(name, n)| (name, n.to_string()))
                                    .collect();
                                log("debug", "sizes", &fields);
                            }
                            if last_log.elapsed() >= Duration::from_secs(300) {
                                last_log = Instant::now();
                                agent.log_status(&session);
                            }
                            let epoch_over = agent.settings.stacks
                                && epoch_started.elapsed() >= agent.settings.stacks_epoch;
                            if epoch_over && agent.pending.is_empty() {
                                break;
                            }
                        }
                        Some(ask) = asks.recv() => agent.answer(ask, &session),
                        _ = hangup.recv() => agent.reload(),
                        _ = interrupt.recv() => break 'sessions Ok("interrupted"),
                        _ = terminate.recv() => break 'sessions Ok("terminated"),
                    }
                }
                // A new stack epoch: a new session, whose counters start from zero.
                drop(ring);
                let gap = Instant::now();
                session.detach();
                session = match start(options.clone()) {
                    Ok(s) => s,
                    Err(e) => break 'sessions Err(e),
                };
                agent.rolling.session_restarted();
                agent.stack_epochs += 1;
                // Agent time goes on across sessions, the gap included.
                agent.epoch_offset_ns = agent.snapshot_ns + gap.elapsed().as_nanos() as u64;
                epoch_started = Instant::now();
                log(
                    "info",
                    "stacks: the capture started over",
                    &[(
                        "gap_ms",
                        format!("{:.0}", gap.elapsed().as_secs_f64() * 1e3),
                    )],
                );
            };
            // What was measured last goes to the collector before the agent stops.
            if let Some(pusher) = agent.pusher.take() {
                agent.push(&session, &pusher);
                let stats = pusher.stats();
                pusher.shutdown(OTLP_FLUSH).await;
                log(
                    "info",
                    "otlp: stopped",
                    &[
                        ("sent", stats.sent_requests.to_string()),
                        ("dropped", stats.dropped_requests.to_string()),
                    ],
                );
            }
            stop
        })?;
        session.detach();
        agent.log_status(&session);
        log("info", "stopped", &[("reason", stop.to_string())]);
        drop(session);
        Ok(ExitCode::SUCCESS)
    }

    struct Agent<'a> {
        rolling: RollingTotals,
        settings: Settings,
        args: &'a AgentArgs,
        started: Instant,
        start_unix_s: f64,
        pending: Vec<PendingProfile>,
        /// Session time of the latest snapshot, which every series is as of.
        snapshot_ns: u64,
        /// `--otlp-endpoint`: the pusher, and when it is next given a request.
        pusher: Option<Pusher>,
        next_push: Instant,
        host_name: String,
        /// Times the stack capture started over (`--stacks-epoch`), and the agent time
        /// the current session started at.
        stack_epochs: u64,
        epoch_offset_ns: u64,
    }

    impl Agent<'_> {
        /// Take a snapshot and fold it into the series.
        fn snapshot(&mut self, session: &mut Session) -> Result<()> {
            // Exit records queued before the snapshot belong before it.
            session.drain();
            let frame = session.snapshot_now()?;
            self.snapshot_ns = self.epoch_offset_ns + frame.t_ns;
            let (events, identities) = session.take_live_events();
            let cgroups: Vec<(i32, String)> = (identities.into_iter())
                .filter_map(|i| Some((i.pid, i.cgroup?)))
                .collect();
            let histograms = session.syscall_histograms();
            let arch = session.host().arch.clone();
            self.rolling.apply(Tick {
                t_ns: self.snapshot_ns,
                frame: &frame,
                events: &events,
                histograms: &histograms,
                cgroups: &cgroups,
                arch: &arch,
            });
            session.forget_exited_histograms();
            // The agent does not report wakers (yet): what the session folds out of
            // the kernel map for them would only grow.
            session.forget_folded_wakers();
            Ok(())
        }

        fn answer(&mut self, ask: Ask, session: &Session) {
            match ask {
                Ask::Metrics(reply) => {
                    let _ = reply.send(self.exposition(session));
                }
                Ask::Profile { seconds, reply } => {
                    let Some(since) = session.stack_profile_so_far() else {
                        let _ = reply.send(Err("the agent runs without --stacks".into()));
                        return;
                    };
                    if self.pending.len() >= MAX_PENDING_PROFILES {
                        let _ = reply.send(Err(format!(
                            "{MAX_PENDING_PROFILES} profiles are being taken already"
                        )));
                        return;
                    }
                    self.pending.push(PendingProfile {
                        since,
                        since_ns: self.snapshot_ns,
                        seconds,
                        reply,
                    });
                }
            }
        }

        /// Answer the profiles whose time is up with the stacks since they began.
        fn answer_due_profiles(&mut self, session: &Session) {
            let now_ns = self.snapshot_ns;
            let (due, waiting): (Vec<_>, Vec<_>) = (std::mem::take(&mut self.pending).into_iter())
                .partition(|p| {
                    now_ns.saturating_sub(p.since_ns) >= u64::from(p.seconds) * 1_000_000_000
                });
            self.pending = waiting;
            for p in due {
                let body = session
                    .stack_profile_so_far()
                    .ok_or_else(|| "no stacks".to_string())
                    .and_then(|now| {
                        let stacks = crate::analysis::stacks::profile_between(&p.since, &now);
                        let mut bundle = crate::model::Bundle::new(
                            crate::model::Backend::Ebpf,
                            session.host().clone(),
                            self.settings.interval.as_millis() as u64,
                        );
                        bundle.stacks = Some(stacks);
                        // The profile's real length (pprof's duration).
                        bundle.frames = vec![crate::model::Frame {
                            t_ns: now_ns.saturating_sub(p.since_ns),
                            processes: Vec::new(),
                            network: None,
                            host_steal_ticks: None,
                        }];
                        crate::export::pprof::render(&bundle).map_err(|e| e.to_string())
                    });
                let _ = p.reply.send(body);
            }
        }

        fn start_pusher(&mut self, config: PushConfig) {
            log(
                "info",
                "otlp: pushing metrics",
                &[("endpoint", config.endpoint.to_string())],
            );
            self.pusher = Some(otlp_push::spawn(config));
            self.next_push = Instant::now();
        }

        /// Give the pusher a request of the series as of the latest snapshot, every
        /// --otlp-interval.
        fn push_if_due(&mut self, session: &Session) {
            let (Some(pusher), Some(o)) = (&self.pusher, &self.settings.otlp) else {
                return;
            };
            if Instant::now() < self.next_push {
                return;
            }
            self.next_push = Instant::now() + o.interval;
            self.push(session, pusher);
        }

        fn push(&self, session: &Session, pusher: &Pusher) {
            use prost::Message;
            let host = session.host();
            let resource = crate::export::otlp::AgentResource {
                host_name: &self.host_name,
                arch: &host.arch,
                kernel_release: host.kernel_release.as_deref(),
            };
            let start_unix_ns = (self.start_unix_s * 1e9) as u64;
            let now_unix_ns = start_unix_ns + self.snapshot_ns;
            let request = crate::export::otlp::agent_metrics_request(
                &self.rolling,
                &resource,
                session.events_lost(),
                start_unix_ns,
                now_unix_ns,
            );
            pusher.enqueue(request.encode_to_vec());
        }

        fn exposition(&self, session: &Session) -> String {
            let (cpu_seconds, resident_bytes) = self_usage();
            let agent = AgentMetrics {
                rolling: self.rolling.stats(),
                own_series: self.rolling.own_series(),
                stack_epochs: self.stack_epochs,
                cpu_seconds,
                resident_bytes,
                start_time_seconds: self.start_unix_s,
                otlp: self.pusher.as_ref().map(|p| {
                    let s = p.stats();
                    crate::export::prometheus::OtlpCounters {
                        sent_requests: s.sent_requests,
                        dropped_requests: s.dropped_requests,
                        rejected_requests: s.rejected_requests,
                        failed_attempts: s.failed_attempts,
                        queued_requests: s.queued_requests as u64,
                    }
                }),
            };
            let snapshot = Snapshot::from_rolling(
                &self.rolling,
                &session.syscalls_in_progress(),
                session.events_lost(),
                session.events_lost_by_cause(),
                // The series are as of the latest snapshot: rates over this are exact.
                self.snapshot_ns as f64 / 1e9,
                agent,
            );
            render_snapshot(snapshot)
                .unwrap_or_else(|e| format!("# kernelkite: cannot render metrics: {e}\n"))
        }

        /// SIGHUP: reread --config and apply what can change without a restart.
        fn reload(&mut self) {
            let Some(path) = &self.args.config else {
                log("info", "SIGHUP: no --config to reread", &[]);
                return;
            };
            let next = read_config(path).and_then(|file| resolve(self.args, &file));
            let next = next.and_then(|next| {
                let push = next.otlp.as_ref().map(push_config).transpose()?;
                Ok((next, push))
            });
            let (next, push) = match next {
                Ok(next) => next,
                Err(e) => {
                    log(
                        "error",
                        "SIGHUP: configuration not reloaded",
                        &[("error", format!("{e:#}"))],
                    );
                    return;
                }
            };
            for (what, changed) in [
                ("listen", next.listen != self.settings.listen),
                (
                    "allow_remote",
                    next.allow_remote != self.settings.allow_remote,
                ),
                (
                    "pid, cgroup or container",
                    next.selection != self.settings.selection,
                ),
                ("max_threads", next.max_threads != self.settings.max_threads),
                ("stacks", next.stacks != self.settings.stacks),
                (
                    "min_block_us",
                    next.min_block_us != self.settings.min_block_us,
                ),
                ("sample_hz", next.sample_hz != self.settings.sample_hz),
                (
                    "stacks_epoch",
                    next.stacks_epoch != self.settings.stacks_epoch,
                ),
                ("interval", next.interval != self.settings.interval),
            ] {
                if changed {
                    log(
                        "warn",
                        "SIGHUP: this setting changes at the next restart",
                        &[("setting", what.to_string())],
                    );
                }
            }
            self.rolling.set_config(next.rolling);
            self.settings.rolling = next.rolling;
            if next.otlp != self.settings.otlp {
                // The old pusher's queue goes with it (dropping it stops its task).
                self.pusher = None;
                match push {
                    Some(config) => self.start_pusher(config),
                    None => log("info", "otlp: push stopped", &[]),
                }
            }
            self.settings.otlp = next.otlp;
            log(
                "info",
                "SIGHUP: configuration reloaded",
                &[
                    ("top_processes", next.rolling.top_processes.to_string()),
                    ("max_groups", next.rolling.max_groups.to_string()),
                ],
            );
        }

        fn log_status(&self, session: &Session) {
            let stats = self.rolling.stats();
            let (cpu_seconds, resident_bytes) = self_usage();
            log(
                "info",
                "status",
                &[
                    (
                        "uptime_s",
                        format!("{:.0}", self.started.elapsed().as_secs_f64()),
                    ),
                    ("processes_seen", stats.processes_seen.to_string()),
                    ("process_series", self.rolling.own_series().to_string()),
                    ("events_lost", session.events_lost().to_string()),
                    ("cpu_s", format!("{cpu_seconds:.2}")),
                    ("rss_kib", (resident_bytes >> 10).to_string()),
                ],
            );
        }
    }

    /// Every snapshot reads whole BPF maps into buffers of megabytes (the syscall
    /// histograms: 2,448 bytes per live (process, syscall)). glibc's mmap threshold
    /// slides up to the largest buffer freed, after which such buffers come from the
    /// heap, whose fragments a week-long daemon never gets back (the agent soak saw RSS
    /// climb). A fixed threshold keeps them mapped, returned to the kernel when freed.
    fn keep_large_buffers_mapped() {
        #[cfg(target_env = "gnu")]
        // SAFETY: mallopt only changes allocator parameters; called before any thread
        // of ours starts.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        }
    }

    /// The agent's own CPU seconds and resident bytes (/proc/self).
    fn self_usage() -> (f64, u64) {
        let me = procfs::process::Process::myself().ok();
        let stat = me.as_ref().and_then(|p| p.stat().ok());
        let ticks = procfs::ticks_per_second() as f64;
        let cpu = stat
            .as_ref()
            .map_or(0.0, |s| (s.utime + s.stime) as f64 / ticks);
        let rss = stat
            .as_ref()
            .map_or(0, |s| s.rss.saturating_mul(procfs::page_size()));
        (cpu, rss)
    }

    fn unix_now_s() -> f64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(line: &[&str]) -> AgentArgs {
        let mut argv = vec!["kernelkite", "agent"];
        argv.extend(line);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Agent(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_command_line_wins_over_the_file_and_remote_needs_consent() {
        let file: FileConfig = toml::from_str(
            "top_processes = 7\nmax_groups = 3\nfold_by = \"cgroup\"\notlp_endpoint = \"http://c:4318\"\n\
             otlp_headers = { authorization = \"x\" }\n",
        )
        .unwrap();
        let s = resolve(&args(&["--top-processes", "9"]), &file).unwrap();
        assert_eq!(s.rolling.top_processes, 9);
        assert_eq!(s.rolling.max_groups, 3);
        assert_eq!(s.rolling.fold_by, FoldBy::Cgroup);
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        let otlp = s.otlp.unwrap();
        assert_eq!(otlp.headers, vec![("authorization".into(), "x".into())]);
        assert_eq!(otlp.interval, Duration::from_secs(10));
        let e = resolve(&args(&["--listen", "0.0.0.0:9464"]), &file).unwrap_err();
        assert!(e.to_string().contains("--allow-remote"), "{e}");
        assert!(resolve(
            &args(&["--listen", "0.0.0.0:9464", "--allow-remote"]),
            &file
        )
        .is_ok());
        let e = resolve(&args(&["--interval", "0"]), &file).unwrap_err();
        assert!(e.to_string().contains("--interval"), "{e}");
    }

    /// Each option, given on the command line, changes the settings `resolve` makes
    /// (tests/cli_help.rs points here for the options no cheaper test sees).
    #[test]
    fn every_option_changes_the_settings() {
        let endpoint = ["--otlp-endpoint", "http://c:4318"];
        // (option, the arguments with it, the arguments without it)
        let rows: &[(&str, &[&str], &[&str])] = &[
            ("--listen", &["--listen", "127.0.0.1:1"], &[]),
            ("--allow-remote", &["--allow-remote"], &[]),
            ("--pid", &["--pid", "7"], &[]),
            ("--cgroup", &["--cgroup", "/x"], &[]),
            ("--container", &["--container", "abc"], &[]),
            ("--top-processes", &["--top-processes", "3"], &[]),
            ("--rank-by", &["--rank-by", "on-cpu"], &[]),
            ("--fold-by", &["--fold-by", "cgroup"], &[]),
            ("--max-groups", &["--max-groups", "3"], &[]),
            ("--interval", &["--interval", "2"], &[]),
            ("--otlp-endpoint", &endpoint, &[]),
            (
                "--otlp-interval",
                &["--otlp-endpoint", "http://c:4318", "--otlp-interval", "3"],
                &endpoint,
            ),
            (
                "--otlp-header",
                &["--otlp-endpoint", "http://c:4318", "--otlp-header", "a=b"],
                &endpoint,
            ),
            (
                "--otlp-queue",
                &["--otlp-endpoint", "http://c:4318", "--otlp-queue", "3"],
                &endpoint,
            ),
            ("--max-threads", &["--max-threads", "3"], &[]),
            ("--stacks-epoch", &["--stacks-epoch", "60"], &[]),
            ("--stacks", &["--stacks"], &[]),
            ("--min-block-us", &["--min-block-us", "3"], &[]),
            ("--sample-hz", &["--sample-hz", "3"], &[]),
        ];
        let file = FileConfig::default();
        for (option, with, without) in rows {
            assert!(with.contains(option), "{option}");
            let a = resolve(&args(with), &file).unwrap();
            let b = resolve(&args(without), &file).unwrap();
            assert_ne!(a, b, "{option} changed nothing");
        }
        // Every long option but --config (which reads a file) has a row.
        let cli = crate::cli::command();
        for arg in cli.find_subcommand("agent").unwrap().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let long = format!("--{long}");
            assert!(
                long == "--config" || rows.iter().any(|(o, _, _)| *o == long),
                "{long} has no row"
            );
        }
    }

    #[test]
    fn every_long_option_is_a_config_key() {
        let cli = crate::cli::command();
        let agent = cli.find_subcommand("agent").unwrap();
        let mut keys = 0;
        for arg in agent.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long == "config" {
                continue;
            }
            let key = long.replace('-', "_");
            // A wrong type is fine here; an unknown key is what must not happen.
            if let Err(e) = toml::from_str::<FileConfig>(&format!("{key} = 1\n")) {
                assert!(!e.to_string().contains("unknown field"), "{key}: {e}");
            }
            keys += 1;
        }
        assert_eq!(keys, 19, "the agent's long options but --config");
        let e = toml::from_str::<FileConfig>("interval_ms = 1\n").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }

    #[test]
    fn the_selection_and_the_kernel_side_come_from_the_file_too() {
        let file: FileConfig = toml::from_str(
            "pid = [7, 9]\nmax_threads = 1000\nstacks = true\nmin_block_us = 50\nsample_hz = 0\n\
             otlp_endpoint = \"http://c:4318\"\notlp_header = { authorization = \"x\" }\n",
        )
        .unwrap();
        let s = resolve(&args(&[]), &file).unwrap();
        assert_eq!(s.selection.pids, [7, 9]);
        assert_eq!(s.max_threads, 1000);
        assert!(s.stacks);
        assert_eq!((s.min_block_us, s.sample_hz), (50, 0));
        let headers = s.otlp.unwrap().headers;
        assert_eq!(headers, vec![("authorization".into(), "x".into())]);
        // One pid, the older key name, and the command line's selection over the file's.
        let file: FileConfig = toml::from_str(
            "pid = 7\nsample_hz = 20\notlp_endpoint = \"http://c:4318\"\n\
             otlp_headers = { a = \"b\" }\n",
        )
        .unwrap();
        let s = resolve(&args(&["--cgroup", "/x", "--sample-hz", "5"]), &file).unwrap();
        assert_eq!(s.selection.pids, Vec::<i32>::new());
        assert_eq!(s.selection.cgroup.as_deref(), Some(Path::new("/x")));
        assert_eq!(s.sample_hz, 5);
        assert_eq!(s.otlp.unwrap().headers, vec![("a".into(), "b".into())]);
        let s = resolve(&args(&[]), &file).unwrap();
        assert_eq!(
            (s.selection.pids.as_slice(), s.max_threads),
            (&[7][..], 65_536)
        );
        let both: FileConfig = toml::from_str("pid = 7\ncontainer = \"abc\"\n").unwrap();
        let e = resolve(&args(&[]), &both).unwrap_err();
        assert!(e.to_string().contains("at most one"), "{e}");
        let bad: FileConfig = toml::from_str("sample_hz = 20000\n").unwrap();
        assert!(resolve(&args(&[]), &bad).is_err());
    }

    #[test]
    fn a_bad_config_file_is_one_line_with_its_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.toml");
        std::fs::write(&path, "top_processes = 5\nbogus = 1\n").unwrap();
        let e = format!("{:#}", read_config(&path).unwrap_err());
        assert!(e.contains("line 2") && e.contains("bogus"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn log_values_cannot_forge_lines() {
        assert_eq!(logfmt_value("redis"), "redis");
        assert_eq!(logfmt_value("a b"), "\"a b\"");
        assert_eq!(logfmt_value("x\nlevel=error"), "\"x\\nlevel=error\"");
        assert_eq!(logfmt_value(""), "\"\"");
    }
}
