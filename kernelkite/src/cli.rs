//! Command-line definitions (clap derive). `--help`, shell completions and the man page
//! are all generated from these types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::format::classes_word;

/// `kernelkite --version`: the version, the commit it was built from, and whether the
/// BPF object it embeds was built from the BPF sources it was built with (build.rs).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit:     ",
    env!("KK_BUILD_COMMIT"),
    "\nBPF object: ",
    env!("KK_BUILD_BPF"),
);

/// The latency classes' names, comma separated, in id order.
pub fn class_names() -> String {
    kernelkite_common::LatencyClass::ALL
        .iter()
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn top_about() -> String {
    format!(
        "Where does my program's time go? kernelkite explains a process tree's time in {} \
         latency classes ({}) with eBPF when it may, or by sampling /proc without privileges.",
        classes_word(),
        class_names()
    )
}

#[derive(Debug, Parser)]
#[command(
    name = "kernelkite",
    about = top_about(),
    version,
    long_version = LONG_VERSION,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The options that were once global to every subcommand: `kernelkite --json summary B` and
/// `kernelkite --backend proc run B -- CMD` still parse, for the subcommands that have the
/// option (see [`hoist_leading_options`]): each name, and whether it takes a value.
pub const LEADING_OPTIONS: [(&str, bool); 5] = [
    ("--backend", true),
    ("--interval-ms", true),
    ("--label", true),
    ("--json", false),
    ("--network", false),
];

/// `kernelkite OPTIONS... SUBCOMMAND REST...` → `kernelkite SUBCOMMAND OPTIONS... REST...`
/// for the [`LEADING_OPTIONS`] before the subcommand's name, so they are parsed as the
/// subcommand's own: a subcommand that does not have one rejects it, naming it, with its
/// own usage line (never a flag accepted and ignored).
pub fn hoist_leading_options(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut i = 1;
    while let Some(arg) = args.get(i).and_then(|a| a.to_str()) {
        let known = LEADING_OPTIONS.iter().find(|(name, takes_value)| {
            arg == *name
                || (*takes_value && arg.strip_prefix(name).is_some_and(|r| r.starts_with('=')))
        });
        match known {
            Some((name, true)) if arg == *name => i += 2,
            Some(_) => i += 1,
            None => break,
        }
    }
    let is_subcommand = args
        .get(i)
        .and_then(|a| a.to_str())
        .is_some_and(|a| !a.starts_with('-'));
    if i == 1 || !is_subcommand {
        return args;
    }
    let mut out = Vec::with_capacity(args.len());
    out.push(args[0].clone());
    out.push(args[i].clone());
    out.extend(args[1..i].iter().cloned());
    out.extend(args[i + 1..].iter().cloned());
    out
}

/// The command tree, with the top page's closing text saying which subcommands take
/// each of the [`LEADING_OPTIONS`] (read from the tree, so it cannot drift).
pub fn command() -> clap::Command {
    let cmd = <Cli as clap::CommandFactory>::command();
    let mut lines = vec![
        "Options of a subcommand come after its name. These may also come before it, \
         for the subcommands that have them (`kernelkite --json summary B`):"
            .to_string(),
    ];
    for (option, _) in LEADING_OPTIONS {
        let subs = subcommands_with(&cmd, option.trim_start_matches('-'));
        lines.push(format!("  {option}: {}", subs.join(", ")));
    }
    cmd.after_help(lines.join("\n"))
}

/// The visible subcommands that have the long option `long`.
pub fn subcommands_with(cmd: &clap::Command, long: &str) -> Vec<String> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set())
        .filter(|s| s.get_arguments().any(|a| a.get_long() == Some(long)))
        .map(|s| s.get_name().to_string())
        .collect()
}

/// Parse a command line (the first item is the program's name).
pub fn try_parse_from(
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString>>,
) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let given: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let args = hoist_leading_options(given.clone());
    if args != given {
        refuse_hoisted_options_not_had(&given, &args[1])?;
    }
    let mut matches = command().try_get_matches_from(args)?;
    Cli::from_arg_matches_mut(&mut matches)
}

/// A [`LEADING_OPTIONS`] option given before a subcommand that does not have it: an
/// error naming the subcommands that do (clap's own would suggest `-- --label`).
fn refuse_hoisted_options_not_had(
    given: &[std::ffi::OsString],
    sub_name: &std::ffi::OsStr,
) -> Result<(), clap::Error> {
    let mut cmd = command();
    cmd.build();
    let Some(sub) = sub_name
        .to_str()
        .and_then(|name| cmd.find_subcommand(name))
        .cloned()
    else {
        return Ok(()); // clap says the subcommand is unknown
    };
    for arg in given[1..].iter().map_while(|a| a.to_str()) {
        if arg == sub.get_name() {
            break;
        }
        let Some((option, _)) = LEADING_OPTIONS
            .iter()
            .find(|(name, _)| arg == *name || arg.starts_with(&format!("{name}=")))
        else {
            continue; // a value
        };
        let long = option.trim_start_matches('-');
        if !sub.get_arguments().any(|a| a.get_long() == Some(long)) {
            let mut sub = sub
                .clone()
                .bin_name(format!("kernelkite {}", sub.get_name()));
            return Err(sub.error(
                clap::error::ErrorKind::UnknownArgument,
                format!(
                    "{option} is not an option of {}: it does nothing there (it is an option of {})",
                    sub.get_name(),
                    subcommands_with(&cmd, long).join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// `--interval-ms`, `--label` and `--network`: what a recording session (`run`, `trace`)
/// stores and how often it snapshots.
#[derive(Debug, Args, Clone)]
pub struct SessionArgs {
    /// Sampling (/proc) or snapshot (eBPF) interval in milliseconds.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub interval_ms: u64,
    /// Free-text label stored in the bundle and shown in reports.
    #[arg(long)]
    pub label: Option<String>,
    /// Also record host-wide /proc/net/dev counters (not attributable to the profiled processes).
    #[arg(long)]
    pub network: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// eBPF when it can be used here, otherwise /proc (with one line saying why).
    Auto,
    /// Sample /proc (no privileges needed).
    Proc,
    /// eBPF tracepoints; fails with the reason when it cannot be used.
    Ebpf,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Launch a command, profile it and all its descendants, write a bundle, exit with its status.
    ///
    /// With privileges (root, or CAP_BPF and CAP_PERFMON) the eBPF backend traces the
    /// command from its first instruction: exact latency classes, syscall latency and
    /// every short-lived process. Without them (or with `--backend proc`) /proc is
    /// sampled every `--interval-ms`: on_cpu and runqueue exact, the other classes
    /// estimated. Either way the tree's CPU comes from the kernel's exact rusage.
    /// Under sudo the bundle belongs to the invoking user. Ctrl-C, SIGTERM and SIGHUP
    /// are passed to the command; the bundle is still written (atomically) once its tree
    /// has exited.
    ///
    /// Exit status: the command's own (128 + N when signal N killed it); 125 when
    /// kernelkite itself failed (a bad flag, a bundle it cannot write), 126 when the command was
    /// found but could not be run, 127 when it was not found (as `env` and `timeout`).
    ///
    /// Who the command runs as: started as root through sudo (SUDO_UID, SUDO_GID), doas
    /// (DOAS_USER) or pkexec (PKEXEC_UID), the command runs as that user, with their
    /// groups and HOME, USER, LOGNAME, SHELL and MAIL from their passwd entry, and
    /// without the SUDO_* variables. As root with none of these set (su, a root login)
    /// it runs as root, and a line on stderr says so; `--user USER` runs it as USER.
    /// Either way it gets neither kernelkite's ambient or inheritable capabilities nor
    /// the unlimited RLIMIT_MEMLOCK kernelkite sets for loading BPF.
    Run(RunArgs),
    #[command(
        about = "Attach to running processes with eBPF and explain where their time goes (needs root)",
        long_about = trace_long_about()
    )]
    Trace(TraceArgs),
    /// Run as an always-on agent: trace the whole machine (or a selection) with eBPF
    /// and serve Prometheus metrics, push OTLP metrics, and serve pprof profiles (needs
    /// root, or CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH).
    ///
    /// Memory is bounded by configuration, not by uptime: at most --top-processes live
    /// processes have series of their own; every other process's time adds up in the
    /// series of its command name or cgroup (--fold-by), at most --max-groups of them
    /// (docs/AGENT.md has the rule and every metric). SIGHUP rereads --config; SIGTERM
    /// and Ctrl-C detach everything and exit. Logs are logfmt lines on stderr.
    Agent(AgentArgs),
    #[command(
        about = "A live terminal view of where time goes, per process (and thread)",
        long_about = top_long_about()
    )]
    Top(TopArgs),
    /// Turn a fixture or a recording into a bundle, byte for byte the same every time.
    ///
    /// A recording (`trace`/`run --record`) becomes the bundle its live session wrote,
    /// byte for byte. A recording cut short (the session was killed, the disk filled)
    /// replays every complete chunk and says on stderr how many bytes at its end were
    /// incomplete (exit 0); a corrupt one is an error naming the byte offset.
    Replay(ReplayArgs),
    /// Totals, latency classes and syscalls of one bundle.
    Summary(SummaryArgs),
    /// What ended each thread's waits: another thread (named, also outside the traced
    /// set), a timer or interrupt, or nothing (still asleep at the end).
    ///
    /// One sentence per thread and sleep class names the main waker ("worker-2 waited
    /// 1.82 s for the lock; worker-1 (pid 7, tid 9) released it 61% of the time"); idle
    /// threads (asleep through the session or never woken) are listed apart. Needs an
    /// eBPF bundle with waker data: others exit 2 saying why (docs/PROFILE.md, "Wakers").
    Waits(WaitsArgs),
    /// Which threads bounded the root process's wall time, and in which class.
    ///
    /// Follows the root's wall time backwards through the recorded wakeups: while a
    /// thread ran or waited for a CPU it is on the path; while it slept, the path moves
    /// to the thread that woke it (a parent in wait4 is woken by its exiting child), and
    /// from a thread's start to the thread that created it. The times per thread add up
    /// to the wall time (docs/PROFILE.md, "Critical path"). Needs a bundle recorded with
    /// `run`/`trace --critical-path`: others exit 2 saying why.
    CriticalPath(CriticalPathArgs),
    /// Compare two bundles; optionally fail when a metric regresses past a threshold.
    Compare(CompareArgs),
    /// The observed process tree with command names.
    Tree(TreeArgs),
    /// Write a timeline document (JSON) of a bundle for other tools.
    Viewer(ViewerArgs),
    /// Write a self-contained HTML report of a bundle.
    Report(ReportArgs),
    /// Export a bundle for other tools: Prometheus, OpenTelemetry (OTLP), Perfetto, pprof,
    /// JSON.
    ///
    /// Formats (docs/EXPORTS.md maps every field): `prometheus` (text exposition format,
    /// as `promtool check metrics` reads it), `otlp` (OTLP/JSON metrics request),
    /// `otlp-traces` (OTLP/JSON traces request: process and slow-syscall spans),
    /// `otlp-proto` and `otlp-traces-proto` (the same as protobuf bytes),
    /// `chrome-trace` (Trace Event JSON for Perfetto UI and chrome://tracing), `json`
    /// (the analysis, schema in docs/export.schema.json), `folded` (folded stacks) and
    /// `pprof` (the stacks as gzip profile.proto, one sample type per latency class, for
    /// go tool pprof, Parca and Pyroscope); the last two need a bundle with stacks.
    Export(ExportArgs),
    /// The heaviest stacks of each latency class, with time and share (needs a bundle
    /// recorded with --stacks).
    ///
    /// A stack is the user stack joined to the kernel stack, printed innermost frame
    /// first (kernel frames marked [k], then `--`, then user frames). Its time is the
    /// summed off-CPU intervals (or on-CPU samples / sample rate) of every thread in it;
    /// its shares are of the class's time with stacks and of the class's time in the
    /// latency classes (docs/STACKS.md).
    Stacks(StacksArgs),
    /// Draw a flame graph (SVG, with the inferno crate) of a bundle's stacks, or write
    /// their folded-stack text.
    ///
    /// One class: on_cpu in a hot palette, off-CPU classes in a blue one. Without
    /// --class, one graph of every class with the class as the root frame. Frame width
    /// is time in nanoseconds. A file is renamed into place when complete.
    Flamegraph(FlamegraphArgs),
    /// Say which backend would be used here, and why.
    Doctor(DoctorArgs),
    /// Print shell completions.
    Completions(CompletionsArgs),
    /// Print the man page (roff): kernelkite(1), or with a subcommand's name its own
    /// page, kernelkite-NAME(1).
    Man(ManArgs),
    /// Benchmark helper: attach empty sys_enter/sys_exit programs until stdin closes.
    #[command(hide = true)]
    BenchFloor(BenchFloorArgs),
}

fn trace_long_about() -> String {
    format!(
        "Attach to running processes with eBPF and explain where their time goes (needs root).

Shows a one-line status while it runs. It stops after `--duration`, on Ctrl-C, or \
when every traced process has exited, then prints each process's (`--threads`: \
each thread's) time in the {} latency classes, the top syscalls by total time \
with count and p50/p95/p99/max latency, and the number of events lost (counted in \
the kernel). Cost on the reference machine: about 0.25 µs per traced syscall \
(less than libbpf-tools `syscount -L`); other processes pay a bitmap check \
(docs/PERFORMANCE.md has the measurements).",
        classes_word()
    )
}

fn top_long_about() -> String {
    format!(
        "A live terminal view of where time goes, per process (and thread).

Each row is a process (Enter or → shows its threads) with a stacked bar of its \
wall time in the {} latency classes, its CPU% and off-CPU time; below, the top \
syscalls of the selected process (or all) with count, rate and p50/p95/p99/max; \
the status line shows events lost, the backend and hooks, and kernelkite's own \
CPU. Windows: last 1 s, last 10 s, since start (`w`). Sort with `s`, `<`, `>` \
(`r` reverses), filter with `/`, pause with `p` or space, help with `?`, quit \
with `q` or Ctrl-C. Without `--pid` it watches every process, heaviest off-CPU \
first. With privileges every class is exact (eBPF); without them (or with \
`--backend proc`) /proc is sampled: on_cpu and runqueue exact, the rest \
estimated, and no syscall latency. `--stacks` (eBPF) adds a panel of the heaviest \
stacks of the selected row's dominant class in the window. `--record FILE.kkr` \
writes the session as it runs (`kernelkite replay` reads it like any recording); \
`--replay` plays a recording or a bundle through the same view (`+`/`-` speed).",
        classes_word()
    )
}

fn class_help() -> String {
    format!("Only this latency class ({}).", class_names())
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON (docs/JSON.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchFloorArgs {
    /// Attach the clock floor instead: a target check and a clock read at entry and
    /// exit, the least a syscall-latency tracer does.
    #[arg(long, conflicts_with_all = ["bit", "sched", "wakers"])]
    pub clock: bool,
    /// Attach the bit floor instead: the target bit test alone on sys_enter and
    /// sys_exit, what a process a tracer does not select pays at least.
    #[arg(long, conflicts_with_all = ["sched", "wakers"])]
    pub bit: bool,
    /// Attach the scheduler floor instead: on sched_switch and sched_wakeup, a target
    /// test, one clock read and each traced thread's interval closed.
    #[arg(long, conflicts_with = "wakers")]
    pub sched: bool,
    /// Attach the waker floor instead: the scheduler floor, and a traced thread's waker
    /// noted at sched_waking and its sleep added to that waker's total at sched_wakeup.
    #[arg(long)]
    pub wakers: bool,
    /// Process the floor measures (its target bit is set).
    #[arg(long)]
    pub pid: Option<u32>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where to write the bundle (also when interrupted): a new file renamed into place,
    /// `-` for standard output, a device or FIFO written in place (docs/SECURITY.md).
    pub bundle: PathBuf,
    /// The command to profile, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub frame_cap: FrameCapArgs,
    /// Run the command as USER (a name or a uid). Needs root; when sudo, doas or pkexec
    /// started kernelkite, USER must be the user who ran it (unless that was root).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    #[command(flatten)]
    pub stacks: StackArgs,
    /// Record every wakeup of the traced threads (what ended each sleep, when, and the
    /// thread's CPU time so far), for `kernelkite critical-path`: which threads bounded
    /// the root process's wall time. About 100 bytes in the bundle per wakeup, at most
    /// 1,000,000 (the rest are counted as lost); eBPF backend only.
    #[arg(long)]
    pub critical_path: bool,
    /// /proc backend: do not trace the command's tree for exit accounting. By default
    /// every process and thread stops once as it exits (ptrace, no syscall stops) and
    /// its final counters are read there, so each is exact however short its life; off,
    /// each is only as exact as the samples. setuid programs in the tree run with their
    /// owner's privileges only with this flag (a traced exec never raises them).
    #[arg(long)]
    pub no_exit_stops: bool,
    #[command(flatten)]
    pub recording: RecordArgs,
    #[command(flatten)]
    pub session: SessionArgs,
    /// Which collector to use: auto picks eBPF when privileged, else /proc.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
}

/// How many frames a session keeps in memory (and writes to its bundle).
#[derive(Debug, Args, Clone, Copy)]
pub struct FrameCapArgs {
    /// Stop recording new frames after this many (the last frame keeps being refreshed so
    /// totals stay exact; the bundle and reports say the cap was hit).
    #[arg(long, default_value_t = 100_000)]
    pub max_frames: u64,
    /// Stop recording new frames, as with --max-frames, once the kept frames take this
    /// many MiB of memory (estimated from their rows: a frame of 50 threads is about
    /// 14 KB); the bundle's frame cap is then the number of frames kept.
    #[arg(long, value_name = "MIB", default_value_t = crate::model::frame_keeper::DEFAULT_MAX_FRAMES_MB)]
    pub max_frames_mb: u64,
}

impl FrameCapArgs {
    /// The byte budget, after checking both caps are usable.
    pub fn max_frame_bytes(&self) -> anyhow::Result<u64> {
        if self.max_frames == 0 {
            anyhow::bail!("--max-frames must be at least 1");
        }
        match self.max_frames_mb.checked_mul(1 << 20) {
            Some(bytes) if bytes > 0 => Ok(bytes),
            _ => anyhow::bail!(
                "--max-frames-mb must be at least 1 and at most {}, got {}",
                u64::MAX >> 20,
                self.max_frames_mb
            ),
        }
    }
}

/// Stack capture options (eBPF backend).
#[derive(Debug, Args, Clone)]
pub struct StackArgs {
    /// Capture user and kernel stacks: off-CPU periods of at least --min-block-us with
    /// their exact time, shorter ones with probability length / --min-block-us (each
    /// then counts as --min-block-us: an unbiased estimate, reported apart), waits still
    /// in progress at the end, on-CPU samples at --sample-hz, slow syscalls. Symbols are resolved while the processes
    /// live and stored in the bundle (see `kernelkite stacks`, `kernelkite flamegraph`);
    /// their binaries and perf maps are read with the process's own rights, never
    /// through a symlink or from a non-regular file (refusals are listed in the bundle).
    /// Needs the eBPF backend. Cost: about one stack walk per --min-block-us of a
    /// thread's off-CPU time (and per on-CPU sample), so short blocks cost a random draw
    /// and a few ns of bookkeeping (docs/PERFORMANCE.md has offcputime side by side).
    #[arg(long)]
    pub stacks: bool,
    /// With --stacks: off-CPU periods at least this long get a stack and their exact
    /// time; shorter ones are sampled with probability length / this (their time always
    /// counts in the latency classes). Default 1000.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(1..))]
    pub min_block_us: Option<u64>,
    /// With --stacks: on-CPU stack samples per second per CPU (0: none). Default 99.
    #[arg(long, value_name = "HZ", value_parser = clap::value_parser!(u64).range(0..=MAX_SAMPLE_HZ))]
    pub sample_hz: Option<u64>,
}

/// `--min-block-us` without one.
pub const DEFAULT_MIN_BLOCK_US: u64 = 1000;
/// `--sample-hz` without one.
pub const DEFAULT_SAMPLE_HZ: u64 = 99;
/// The most `--sample-hz` takes.
pub const MAX_SAMPLE_HZ: u64 = 10_000;

impl StackArgs {
    /// `--min-block-us`, or its default.
    pub fn min_block_us(&self) -> u64 {
        self.min_block_us.unwrap_or(DEFAULT_MIN_BLOCK_US)
    }

    /// `--sample-hz`, or its default.
    pub fn sample_hz(&self) -> u64 {
        self.sample_hz.unwrap_or(DEFAULT_SAMPLE_HZ)
    }
}

/// `--record`: the session's stream, written while it runs.
#[derive(Debug, Args, Clone)]
pub struct RecordArgs {
    /// Also write the session as it runs to this recording file (.kkr, docs/FORMAT.md),
    /// one checksummed chunk per frame, so even a killed session leaves every complete
    /// chunk; `kernelkite replay FILE OUT.json` rebuilds the bundle, without root, on any OS.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// How the recording's chunks are stored.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = RecordCompression::Zstd)]
    pub record_compression: RecordCompression,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordCompression {
    /// zstd per chunk (a chunk that would not shrink is stored as is).
    Zstd,
    /// Every chunk as is.
    None,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("target").required(true).multiple(false).args(["pids", "cgroup", "container"]))]
pub struct TraceArgs {
    /// Process to trace (every thread), by its host pid (docs/CONTAINERS.md: finding
    /// it from inside a container); repeatable. One of --pid, --cgroup or --container
    /// is required.
    #[arg(long = "pid", value_name = "PID", num_args = 1)]
    pub pids: Vec<i32>,
    /// Trace every process of this cgroup v2 directory and the cgroups below it: those
    /// there at the start and those that fork or exec there later, selected in the
    /// kernel. A directory under the v2 mount (/sys/fs/cgroup/system.slice/my.service)
    /// or a path within the hierarchy (/system.slice/my.service). Runs until Ctrl-C,
    /// --duration, or the cgroup's removal.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Trace a container, by its id or a unique prefix of it (Docker, containerd and
    /// Kubernetes, CRI-O, Podman), or a systemd unit by name (nginx.service, nginx):
    /// its cgroup, as with --cgroup.
    #[arg(long, value_name = "ID")]
    pub container: Option<String>,
    /// Also trace the descendants of the traced processes: those already running and
    /// those started while tracing. Without it only the given processes are traced.
    #[arg(long)]
    pub follow: bool,
    /// Stop after this many seconds (default: until Ctrl-C or every target exits).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Write the bundle here (`-`: standard output, and the text goes to standard error;
    /// a device or FIFO is written in place, docs/SECURITY.md).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Break the latency classes down per thread.
    #[arg(long)]
    pub threads: bool,
    /// Stream single syscalls at least this slow (microseconds) into the bundle; 0 streams none.
    #[arg(long, default_value_t = 10_000)]
    pub min_latency_us: u64,
    #[command(flatten)]
    pub frame_cap: FrameCapArgs,
    /// Threads the kernel side can track at once, at least: its thread table's overflow
    /// map has this many entries, beside up to 16,384 slots (the largest power of two
    /// not above it; a thread's slot is its tid modulo their count); about 250 bytes of
    /// locked kernel memory each. Threads past it are not traced and are counted in
    /// `events lost`.
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_threads: u32,
    #[command(flatten)]
    pub stacks: StackArgs,
    /// Record every wakeup of the traced threads (what ended each sleep, when, and the
    /// thread's CPU time so far), for `kernelkite critical-path`: which threads bounded
    /// the root process's wall time. About 100 bytes in the bundle per wakeup, at most
    /// 1,000,000 (the rest are counted as lost); eBPF backend only.
    #[arg(long)]
    pub critical_path: bool,
    /// Serve Prometheus metrics of the running session at http://ADDR/metrics; ADDR is
    /// IP:PORT, e.g. 127.0.0.1:9464 (bind a loopback address unless the metrics may
    /// leave the host; port 0 picks a free port, printed at start). Only live processes
    /// have series of their own; exited ones add up in series with pid="exited".
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub recording: RecordArgs,
    #[command(flatten)]
    pub session: SessionArgs,
    /// Print the report as JSON (the `summary --json` document, docs/JSON.md) instead
    /// of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// A TOML file of settings (docs/AGENT.md): the keys are this command's other long
    /// options in snake_case (`top_processes = 30`, `otlp_endpoint = "..."`, `pid =
    /// [1234]`, `otlp_header = { authorization = "..." }`). An option given on the
    /// command line wins (any of --pid, --cgroup, --container replaces the file's
    /// selection). SIGHUP rereads it: the series limits and the OTLP settings change at
    /// once; a change of anything else is logged and needs a restart.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve /metrics (and, with --stacks, /debug/pprof/profile) at IP:PORT (default
    /// 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Allow --listen on an address other than loopback (the metrics name every
    /// process and command on the host).
    #[arg(long)]
    pub allow_remote: bool,
    /// Trace only these processes (and their descendants), by host pid; repeatable.
    /// Default: every process on the machine.
    #[arg(long = "pid", value_name = "PID", num_args = 1, conflicts_with_all = ["cgroup", "container"])]
    pub pids: Vec<i32>,
    /// Trace only this cgroup v2 subtree (as `trace --cgroup`).
    #[arg(long, value_name = "PATH", conflicts_with = "container")]
    pub cgroup: Option<PathBuf>,
    /// Trace only this container or systemd unit (as `trace --container`).
    #[arg(long, value_name = "ID")]
    pub container: Option<String>,
    /// Live processes with series of their own, the busiest first (default 20).
    #[arg(long, value_name = "N")]
    pub top_processes: Option<usize>,
    /// What ranks processes for a series of their own (default busy: every class but
    /// syscall_blocked).
    #[arg(long, value_name = "TIME")]
    pub rank_by: Option<crate::analysis::rolling::RankBy>,
    /// What the other processes add up by (default comm).
    #[arg(long, value_name = "KEY")]
    pub fold_by: Option<crate::analysis::rolling::FoldBy>,
    /// Group series at most (default 50); later names add up in "(other)".
    #[arg(long, value_name = "N")]
    pub max_groups: Option<usize>,
    /// Seconds between snapshots (default 1).
    #[arg(long, value_name = "SECS")]
    pub interval: Option<f64>,
    /// Push OTLP metrics over HTTP/protobuf to this URL (http://HOST[:PORT][/PATH];
    /// default port 4318, path /v1/metrics). Plain HTTP: send to a local OpenTelemetry
    /// Collector, which forwards with TLS.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Seconds between OTLP pushes (default 10).
    #[arg(long, value_name = "SECS")]
    pub otlp_interval: Option<f64>,
    /// A header for every OTLP request (NAME=VALUE, repeatable), e.g. an API key.
    #[arg(long = "otlp-header", value_name = "NAME=VALUE")]
    pub otlp_headers: Vec<String>,
    /// OTLP requests kept while the collector is unreachable (default 64); past it the
    /// oldest are dropped and counted (kernelkite_agent_otlp_dropped_requests_total).
    #[arg(long, value_name = "N")]
    pub otlp_queue: Option<usize>,
    /// Threads the kernel side can track at once, at least (its thread table: this many
    /// overflow entries beside up to 16,384 slots, as `trace --max-threads`; default
    /// 65,536).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_threads: Option<u32>,
    /// With --stacks: the stack capture starts over every this many seconds (default
    /// 600; at once when no profile is being taken), which bounds what it keeps by the
    /// distinct stacks of one period rather than of the agent's whole uptime.
    #[arg(long, value_name = "SECS")]
    pub stacks_epoch: Option<f64>,
    /// With --stacks, /debug/pprof/profile?seconds=N serves the stacks of the next N
    /// seconds (default 30, at most 300) as a gzip profile.proto.
    #[command(flatten)]
    pub stacks: StackArgs,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Process to watch (every thread), by host pid; repeatable. Default: every process.
    #[arg(long = "pid", value_name = "PID", num_args = 1, conflicts_with_all = ["replay", "cgroup", "container"])]
    pub pids: Vec<i32>,
    /// Watch every process of this cgroup v2 directory and below it, as
    /// `trace --cgroup` does (eBPF backend).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["replay", "container"])]
    pub cgroup: Option<PathBuf>,
    /// Watch a container, by its id or a unique prefix of it, or a systemd unit by
    /// name (eBPF backend).
    #[arg(long, value_name = "ID", conflicts_with = "replay")]
    pub container: Option<String>,
    /// Also watch the children of the `--pid` processes (new ones too).
    #[arg(long, conflicts_with = "replay")]
    pub follow: bool,
    /// Seconds between snapshots (the screen refreshes with each).
    #[arg(long, default_value_t = 1.0)]
    pub refresh: f64,
    /// Play a recording (.kkr, from `--record`, `trace --record` or `run --record`) or a
    /// bundle's frames through the view instead of watching live. A recording's syscall
    /// panel fills in as it plays; a bundle holds only its final histograms.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Replay speed factor (`+` and `-` change it while playing).
    #[arg(long, default_value_t = 1.0, requires = "replay")]
    pub speed: f64,
    /// The heaviest stacks of the selected row's dominant class, in a panel (eBPF).
    #[command(flatten)]
    pub stacks: StackArgs,
    #[command(flatten)]
    pub recording: RecordArgs,
    /// Which collector watches live: auto picks eBPF when privileged, else /proc (not
    /// used with --replay).
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Fixture (JSON) or recording (.kkr, recognised by its magic bytes) to replay.
    pub input: PathBuf,
    /// Where to write the bundle.
    pub bundle: PathBuf,
    /// Free-text label stored in the bundle (in place of the input's own).
    #[arg(long)]
    pub label: Option<String>,
}

/// What every report reads: a bundle or a recording (`commands::replay::load_input`).
const BUNDLE_HELP: &str =
    "Bundle to read (as `run`, `trace -o` or `replay` write it), or a recording (.kkr)";

#[derive(Debug, Args)]
pub struct SummaryArgs {
    #[arg(help = BUNDLE_HELP)]
    pub bundle: PathBuf,
    /// Print the summary as JSON (docs/JSON.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct WaitsArgs {
    /// Bundle (or recording) of an eBPF session.
    pub bundle: PathBuf,
    /// Print the waits as JSON (docs/JSON.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CriticalPathArgs {
    /// Bundle (or recording) of a session recorded with --critical-path.
    pub bundle: PathBuf,
    /// How many path segments the text lists (the longest, in time order; --json has
    /// them all).
    #[arg(long, default_value_t = 20)]
    pub segments: usize,
    /// Print the whole path as JSON (docs/JSON.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline bundle.
    pub before: PathBuf,
    /// The bundle compared with it.
    pub after: PathBuf,
    /// Exit non-zero when a metric crosses a threshold, e.g. 'cpu_seconds>+10%',
    /// 'peak_rss_bytes>+50MiB', 'duration_ms>+0'. Repeatable.
    #[arg(long = "fail-on", value_name = "RULE")]
    pub fail_on: Vec<String>,
    /// Print the comparison as JSON (docs/JSON.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TreeArgs {
    #[arg(help = BUNDLE_HELP)]
    pub bundle: PathBuf,
    /// Print the tree as JSON (docs/JSON.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ViewerArgs {
    #[arg(help = BUNDLE_HELP)]
    pub bundle: PathBuf,
    /// Output file (default, or `-`: standard output; a device or FIFO is written in
    /// place).
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The bundle to export (as `run`, `trace -o` or `replay` write it).
    pub bundle: PathBuf,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: crate::export::Format,
    /// Output file, renamed into place when complete (default, or `-`: standard output;
    /// a device or FIFO is written in place).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Unix time in nanoseconds of the session start, for OTLP timestamps. Bundles hold
    /// times relative to the session start only; without this flag OTLP times count
    /// from the Unix epoch (0).
    #[arg(long, default_value_t = 0)]
    pub start_unix_ns: u64,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[arg(help = BUNDLE_HELP)]
    pub bundle: PathBuf,
    /// Output HTML file (`-`: standard output; a device or FIFO is written in place).
    #[arg(short = 'o', long = "output", required = true)]
    pub output: PathBuf,
}

/// A latency class name on the command line.
fn parse_class(s: &str) -> Result<kernelkite_common::LatencyClass, String> {
    kernelkite_common::LatencyClass::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = kernelkite_common::LatencyClass::ALL
            .iter()
            .map(|c| c.name())
            .collect();
        format!("unknown class {s:?} (expected one of {})", names.join(", "))
    })
}

#[derive(Debug, Args)]
pub struct StacksArgs {
    /// Bundle recorded with --stacks.
    pub bundle: PathBuf,
    #[arg(long, value_parser = parse_class, help = class_help())]
    pub class: Option<kernelkite_common::LatencyClass>,
    /// How many stacks per class.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub top: u64,
    /// Print the stacks as JSON (docs/JSON.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// Bundle recorded with --stacks.
    pub bundle: PathBuf,
    /// Only this latency class (default: every class, each under its own root frame).
    #[arg(long, value_parser = parse_class)]
    pub class: Option<kernelkite_common::LatencyClass>,
    /// Output file (SVG; with --folded, the folded text, else standard output; `-`:
    /// standard output; a device or FIFO is written in place).
    #[arg(short = 'o', long = "output", required_unless_present = "folded")]
    pub output: Option<PathBuf>,
    /// Write folded-stack lines (`class;root;...;leaf ns`) instead of an SVG.
    #[arg(long)]
    pub folded: bool,
    /// Add each process's command name as a frame under the class.
    #[arg(long)]
    pub per_process: bool,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print (e.g. `run`); without it, or with
    /// `kernelkite`, the top page.
    pub subcommand: Option<String>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print completions for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hoisted(line: &[&str]) -> Vec<String> {
        let args = line.iter().map(std::ffi::OsString::from).collect();
        hoist_leading_options(args)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn leading_options_move_after_the_subcommand_name_and_nothing_else_does() {
        assert_eq!(
            hoisted(&[
                "kk",
                "--backend",
                "proc",
                "--label=x",
                "--json",
                "run",
                "B",
                "--",
                "--json"
            ]),
            [
                "kk",
                "run",
                "--backend",
                "proc",
                "--label=x",
                "--json",
                "B",
                "--",
                "--json"
            ]
        );
        // Nothing before the subcommand, or not one of them, or no subcommand: as given.
        for line in [
            &["kk", "summary", "--json", "B"][..],
            &["kk", "--version"],
            &["kk", "--json", "--version", "summary"],
            &["kk", "--label"],
            &["kk", "--json"],
        ] {
            assert_eq!(hoisted(line), line);
        }
    }

    #[test]
    fn a_leading_option_the_subcommand_lacks_is_refused_by_name() {
        let e = try_parse_from(["kk", "--label", "x", "summary", "B"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("--label is not an option of summary"),
            "{e}"
        );
        let cli = try_parse_from(["kk", "--json", "--network", "trace", "--pid", "1"]).unwrap();
        match cli.command {
            Command::Trace(t) => assert!(t.json && t.session.network && t.pids == [1]),
            _ => unreachable!(),
        }
    }
}
