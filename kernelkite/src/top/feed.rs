//! Where `top`'s numbers come from: a [`TopFeed`] hands the view successive snapshots of
//! raw cumulative counters (a bundle [`Frame`] plus the syscall histograms and stack
//! profile so far). The live feeds take them now (eBPF session, /proc sampler) and,
//! with `--record`, write them to a recording as they go; the replay feeds read them
//! from a recording (streamed, [`RecordingReplayFeed`]) or a bundle. Everything derived
//! from them is computed by `analysis` (see `window`), never here.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::collect::{BundleFold, RecordedFold};
use crate::model::frame_keeper::DEFAULT_MAX_FRAMES_MB;
use crate::model::{
    Backend, Bundle, Frame, HostConstants, OnCpuSource, ProcessIdentity, StackProfile,
    SyscallHistogram, WakerProfile,
};
use crate::recording::{ClockAnchor, Record, RecordRef, RecordSink, RecordingReader, SessionStart};
use crate::source::host::current_host;
use crate::source::procfs::{IdentityReader, Sampler, SamplerOptions, Scope, PROC_ROOT};

/// One instant of the observed processes: cumulative counters only.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Processes alive at this instant; `frame.t_ns` is ns since the feed started.
    pub frame: Frame,
    /// Per-(process, syscall) histograms, cumulative since the feed started (eBPF).
    pub syscalls: Vec<SyscallHistogram>,
    /// Events the kernel side could not record so far (eBPF), cumulative.
    pub events_lost: Option<u64>,
    /// `--stacks`: the stack profile so far, cumulative (eBPF). Its frame and stack
    /// tables only grow, so the latest snapshot's tables resolve every earlier one's
    /// samples.
    pub stacks: Option<StackProfile>,
    /// What ended the traced threads' sleeps so far, cumulative (live eBPF; `None`
    /// for /proc and replays, whose recording holds it only at the end).
    pub wakers: Option<WakerProfile>,
    /// Cgroup and namespace pid readings since the previous snapshot (live eBPF, and
    /// replays of bundles that have them).
    pub identities: Vec<ProcessIdentity>,
}

/// What a feed is, for the header and status line.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedInfo {
    pub backend: Backend,
    pub host: HostConstants,
    /// What is watched: "pid 42", "pids 1,2 and children", "all processes", a file name.
    pub scope: String,
    /// Hooks the eBPF programs are attached to (empty for /proc and replays).
    pub hooks: Vec<String>,
    /// The recording a replay reads, if any.
    pub replay_of: Option<String>,
    /// The feed has stacks (live `--stacks`, a replay of a session that had them): the
    /// view shows the stacks panel.
    pub stacks: bool,
}

/// A source of successive snapshots for the live view. Live feeds sample when asked;
/// a replay feed returns its recorded frames in order (the caller paces it).
pub trait TopFeed {
    fn info(&self) -> &FeedInfo;
    /// The next snapshot, or `None` once the feed has nothing more (replay finished,
    /// every traced process exited).
    fn next_snapshot(&mut self) -> Result<Option<Snapshot>>;
    /// Called often between snapshots: a live eBPF feed drains its ring buffer here so
    /// that it never fills up (and never counts spurious lost events).
    fn pump(&mut self) {}
    /// How far apart (in the recording's time) the snapshots are meant to be.
    fn interval(&self) -> Duration;
    /// Whether snapshots come from a recording (pacing follows `t_ns`, speed applies).
    fn is_replay(&self) -> bool {
        self.info().replay_of.is_some()
    }
    /// The view is closing: a live feed stops its session and writes what a recording
    /// still lacks (the last frame, histograms, stacks). Returns the session time of
    /// the end, in ns (what the recording's end record says).
    fn finish(&mut self) -> Result<u64> {
        Ok(0)
    }
}

/// What to watch live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveTargets {
    /// Processes to watch; empty means every user-space process.
    pub pids: Vec<i32>,
    /// Also watch the pids' descendants (always on without pids).
    pub follow: bool,
    /// `--cgroup`, `--container`: every process of this cgroup subtree instead (eBPF).
    #[cfg(target_os = "linux")]
    pub cgroup: Option<crate::source::cgroups::CgroupDir>,
}

impl LiveTargets {
    pub fn system_wide(&self) -> bool {
        #[cfg(target_os = "linux")]
        if self.cgroup.is_some() {
            return false;
        }
        self.pids.is_empty()
    }

    /// Root pids of the watched subtrees: pid 1 covers every user-space process (the
    /// sampler skips kernel threads, which descend from pid 2).
    fn roots(&self) -> Vec<i32> {
        if self.pids.is_empty() {
            vec![1]
        } else {
            self.pids.clone()
        }
    }

    fn describe(&self) -> String {
        #[cfg(target_os = "linux")]
        if let Some(c) = &self.cgroup {
            return format!("cgroup {}", c.path);
        }
        if self.pids.is_empty() {
            return "all processes".to_string();
        }
        let list = self
            .pids
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let noun = if self.pids.len() == 1 { "pid" } else { "pids" };
        if self.follow {
            format!("{noun} {list} and children")
        } else {
            format!("{noun} {list}")
        }
    }
}

/// Samples /proc: exact on_cpu and runqueue (schedstat), the sleep classes estimated
/// from sampled thread states.
pub struct ProcFeed {
    info: FeedInfo,
    sampler: Sampler,
    targets: LiveTargets,
    started: Instant,
    interval: Duration,
    /// `--record`: the recording each frame also goes to (top keeps its own history,
    /// so the fold keeps no frame).
    recorded: Option<RecordedFold>,
    last_t_ns: u64,
    /// The processes whose cgroup and namespace pids were read.
    identities: IdentityReader,
}

impl ProcFeed {
    pub fn new(targets: LiveTargets, interval: Duration) -> Result<ProcFeed> {
        // The same checks as the eBPF session: a thread id or a kernel thread gets a
        // message naming what to watch instead.
        crate::source::ebpf::session::check_pids_exist(&targets.pids)?;
        ProcFeed::with_root(Path::new(PROC_ROOT), targets, interval)
    }

    #[cfg(target_os = "linux")]
    /// Also write the session to `sink` (`--record`), starting with its start record;
    /// the feed's clock restarts here.
    pub fn record_to(&mut self, sink: Box<dyn RecordSink>) {
        let clock = ClockAnchor::read();
        self.started = Instant::now();
        let start = SessionStart {
            backend: Backend::Proc,
            label: None,
            host: self.info.host.clone(),
            interval_ms: self.interval.as_millis() as u64,
            max_frames: RECORDED_MAX_FRAMES,
            min_latency_ns: 0,
            follow: self.targets.follow || self.targets.system_wide(),
            network: false,
            root_pids: self.targets.roots(),
            clock,
        };
        // The frame cap and byte budget are the replay's: the fold keeps no frame.
        self.recorded = Some(RecordedFold::new(
            start,
            DEFAULT_MAX_FRAMES_MB << 20,
            Some(sink),
        ));
    }

    /// A feed reading the procfs at `proc_root` (tests use a synthetic tree).
    pub fn with_root(
        proc_root: &Path,
        targets: LiveTargets,
        interval: Duration,
    ) -> Result<ProcFeed> {
        for &pid in &targets.pids {
            if !proc_root.join(pid.to_string()).join("stat").exists() {
                anyhow::bail!("no process with pid {pid}");
            }
        }
        let sampler = Sampler::new(proc_root, SamplerOptions::default())
            .with_context(|| format!("cannot sample {}", proc_root.display()))?;
        Ok(ProcFeed {
            info: FeedInfo {
                backend: Backend::Proc,
                host: current_host(OnCpuSource::Schedstat),
                scope: targets.describe(),
                hooks: Vec::new(),
                replay_of: None,
                stacks: false,
            },
            sampler,
            targets,
            started: Instant::now(),
            interval,
            recorded: None,
            last_t_ns: 0,
            identities: IdentityReader::new().0,
        })
    }
}

/// The frame cap a recording of `top` asks its replay to apply (`trace`'s default).
pub const RECORDED_MAX_FRAMES: u64 = 100_000;

impl TopFeed for ProcFeed {
    fn info(&self) -> &FeedInfo {
        &self.info
    }

    fn next_snapshot(&mut self) -> Result<Option<Snapshot>> {
        let t_ns = self.started.elapsed().as_nanos() as u64;
        let roots = self.targets.roots();
        let mut frame = self
            .sampler
            .sample(Scope::Subtrees(&roots), t_ns)
            .context("sampling /proc")?;
        if !self.targets.follow && !self.targets.system_wide() {
            frame.processes.retain(|p| roots.contains(&p.pid));
        }
        if !self.targets.system_wide() && frame.processes.is_empty() {
            return Ok(None);
        }
        let mut identities = Vec::new();
        for p in &frame.processes {
            if let Some((Some(identity), _)) = self.identities.read(&mut self.sampler, p.pid, t_ns)
            {
                identities.push(identity);
            }
        }
        let live: std::collections::BTreeSet<i32> = frame.processes.iter().map(|p| p.pid).collect();
        self.identities.retain(|pid| live.contains(&pid));
        if let Some(recorded) = self.recorded.as_mut() {
            for identity in &identities {
                recorded.record_only(RecordRef::ProcessIdentity(identity));
            }
            recorded.record_only(RecordRef::Frame(&frame));
        }
        self.last_t_ns = frame.t_ns;
        Ok(Some(Snapshot {
            frame,
            syscalls: Vec::new(),
            events_lost: None,
            stacks: None,
            wakers: None,
            identities,
        }))
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn finish(&mut self) -> Result<u64> {
        Ok(self.last_t_ns)
    }
}

/// Replays a bundle's frames. Bundles keep only the final syscall histograms, so they
/// arrive with the last frame (the syscall panel fills in when the replay ends).
pub struct BundleReplayFeed {
    info: FeedInfo,
    bundle: Bundle,
    next: usize,
}

impl BundleReplayFeed {
    pub fn new(bundle: Bundle, name: &str) -> BundleReplayFeed {
        let scope = recorded_scope(&bundle.root_pids);
        BundleReplayFeed {
            info: FeedInfo {
                backend: bundle.backend,
                host: bundle.host.clone(),
                scope,
                hooks: Vec::new(),
                replay_of: Some(name.to_string()),
                stacks: bundle.stacks.is_some(),
            },
            bundle,
            next: 0,
        }
    }
}

impl TopFeed for BundleReplayFeed {
    fn info(&self) -> &FeedInfo {
        &self.info
    }

    fn next_snapshot(&mut self) -> Result<Option<Snapshot>> {
        let Some(frame) = self.bundle.frames.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        let last = self.next == self.bundle.frames.len();
        let after_ns = match self.next {
            1 => None,
            n => Some(self.bundle.frames[n - 2].t_ns),
        };
        let identities = (self.bundle.process_identities.iter())
            .filter(|i| i.t_ns <= frame.t_ns && after_ns.is_none_or(|a| i.t_ns > a))
            .cloned()
            .collect();
        Ok(Some(Snapshot {
            identities,
            frame: frame.clone(),
            syscalls: if last {
                self.bundle.syscalls.clone()
            } else {
                Vec::new()
            },
            events_lost: self.bundle.events_lost,
            stacks: if last {
                self.bundle.stacks.clone()
            } else {
                None
            },
            wakers: if last {
                self.bundle.wakers.clone()
            } else {
                None
            },
        }))
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.bundle.interval_ms.max(1))
    }
}

/// Streams a recording's frames, each with the histograms and lost-event count the
/// session recorded with it (a recorded session writes them every second), so the
/// syscall panel fills in as the replay plays. Stack profiles are written when a session
/// ends, so they arrive with the last frame.
pub struct RecordingReplayFeed {
    info: FeedInfo,
    name: String,
    reader: RecordingReader<std::io::BufReader<std::fs::File>>,
    interval: Duration,
    /// The last frame read, handed out once the records that follow it are applied.
    pending: Option<Frame>,
    /// Identity readings not handed over yet.
    identities: Vec<ProcessIdentity>,
    /// Every other record, folded as `replay` folds them: each snapshot shows the
    /// histograms, losses and stacks as they are so far.
    fold: BundleFold,
}

impl RecordingReplayFeed {
    /// Open a recording and read its session start record. `stacks`: the recording
    /// holds a stack profile (it comes last, so the caller says).
    pub fn open(path: &Path, stacks: bool) -> Result<RecordingReplayFeed> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let mut reader =
            RecordingReader::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let start = match reader.next_record() {
            Ok(Some(Record::SessionStart(start))) => start,
            Ok(_) => anyhow::bail!(
                "{}: the recording holds no session start record",
                path.display()
            ),
            Err(e) => anyhow::bail!("{}: {e}", path.display()),
        };
        Ok(RecordingReplayFeed {
            info: FeedInfo {
                backend: start.backend,
                host: start.host.clone(),
                scope: recorded_scope(&start.root_pids),
                hooks: Vec::new(),
                replay_of: Some(name.clone()),
                stacks,
            },
            name,
            reader,
            interval: Duration::from_millis(start.interval_ms.max(1)),
            pending: None,
            identities: Vec::new(),
            fold: BundleFold::new(&start, DEFAULT_MAX_FRAMES_MB << 20),
        })
    }

    fn snapshot_of(&mut self, frame: Frame) -> Snapshot {
        let so_far = self.fold.so_far();
        Snapshot {
            frame,
            syscalls: so_far.syscalls.clone(),
            events_lost: so_far.events_lost,
            stacks: so_far.stacks.clone(),
            wakers: None,
            identities: std::mem::take(&mut self.identities),
        }
    }
}

impl TopFeed for RecordingReplayFeed {
    fn info(&self) -> &FeedInfo {
        &self.info
    }

    fn next_snapshot(&mut self) -> Result<Option<Snapshot>> {
        loop {
            let record = self
                .reader
                .next_record()
                .map_err(|e| anyhow::anyhow!("{}: {e}", self.name))?;
            match record {
                Some(Record::Frame(frame)) => {
                    if let Some(previous) = self.pending.replace(frame) {
                        return Ok(Some(self.snapshot_of(previous)));
                    }
                }
                // Lifecycle events and the rest: top shows none of them.
                Some(
                    record @ (Record::Histograms { .. }
                    | Record::EventsLost { .. }
                    | Record::Stacks { .. }),
                ) => {
                    self.fold.apply(record);
                }
                // Handed over once, with the next frame (`g` groups by them).
                Some(Record::ProcessIdentity(identity)) => self.identities.push(identity),
                Some(_) => {}
                None => {
                    let last = self.pending.take();
                    return Ok(last.map(|f| self.snapshot_of(f)));
                }
            }
        }
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}

fn recorded_scope(root_pids: &[i32]) -> String {
    if root_pids.is_empty() {
        "recorded processes".to_string()
    } else {
        let list: Vec<String> = root_pids.iter().map(|p| p.to_string()).collect();
        format!("recorded pids {}", list.join(","))
    }
}

#[cfg(target_os = "linux")]
pub use ebpf_feed::EbpfFeed;

#[cfg(target_os = "linux")]
mod ebpf_feed {
    use super::*;
    use crate::source::ebpf::session::{Session, TraceOptions};

    /// The eBPF session: every class exact, syscall latency histograms, events lost.
    pub struct EbpfFeed {
        info: FeedInfo,
        /// `None` once finished.
        session: Option<Session>,
        interval: Duration,
        system_wide: bool,
        /// Tracing a cgroup: the view runs until `q`, whoever is in it.
        cgroup: bool,
        /// Identity readings handed over so far.
        identities_seen: usize,
        ended: bool,
    }

    impl EbpfFeed {
        /// Load and attach the programs and start tracking the targets. System-wide
        /// means every process below pid 1, with `follow` (new processes are tracked
        /// from their fork).
        /// With `stacks`, stacks are captured and every snapshot carries the profile so
        /// far; with `record`, the session is written to it as it runs.
        pub fn start(
            targets: LiveTargets,
            interval: Duration,
            stacks: Option<crate::source::ebpf::loader::StackOptions>,
            record: Option<Box<dyn RecordSink>>,
        ) -> Result<EbpfFeed> {
            let system_wide = targets.system_wide();
            let cgroup = targets.cgroup.is_some();
            let follow = targets.follow || system_wide || cgroup;
            let options = TraceOptions {
                pids: targets.roots(),
                follow,
                // No slow-syscall stream: top shows histograms only.
                min_latency_ns: 0,
                interval,
                // Frames are handed over, not kept in memory (see `snapshot_now`); this
                // is the cap a replay of the recording applies.
                max_frames: RECORDED_MAX_FRAMES,
                max_frame_bytes: crate::model::frame_keeper::DEFAULT_MAX_FRAMES_MB << 20,
                max_threads: None,
                network: false,
                label: None,
                stacks,
                critical_path: false,
                cgroup: targets.cgroup.clone(),
            };
            let mut session = Session::start_recorded(options, record)?;
            session.count_initial_in_frames(true);
            if system_wide {
                session.untrack_self()?;
            }
            let hooks = session.hooks().to_vec();
            Ok(EbpfFeed {
                info: FeedInfo {
                    backend: Backend::Ebpf,
                    host: session.host().clone(),
                    scope: LiveTargets { follow, ..targets }.describe(),
                    hooks,
                    replay_of: None,
                    stacks: stacks.is_some(),
                },
                session: Some(session),
                interval,
                system_wide,
                cgroup,
                identities_seen: 0,
                ended: false,
            })
        }
    }

    impl TopFeed for EbpfFeed {
        fn info(&self) -> &FeedInfo {
            &self.info
        }

        fn next_snapshot(&mut self) -> Result<Option<Snapshot>> {
            if self.ended {
                return Ok(None);
            }
            self.pump();
            let Some(session) = self.session.as_mut() else {
                return Ok(None);
            };
            let frame = session.snapshot_now()?;
            // System-wide never ends (and checking walks every thread's map entry).
            // A cgroup's processes come and go: it ends with `q`.
            if !self.system_wide && !self.cgroup && !session.any_target_alive() {
                self.ended = true;
            }
            Ok(Some(Snapshot {
                frame,
                syscalls: session.syscall_histograms(),
                events_lost: Some(session.events_lost()),
                stacks: session.stack_profile_so_far(),
                wakers: session.wakers_so_far(),
                identities: {
                    let new = session.identities_since(self.identities_seen).to_vec();
                    self.identities_seen += new.len();
                    new
                },
            }))
        }

        fn pump(&mut self) {
            let Some(session) = self.session.as_mut() else {
                return;
            };
            session.drain();
            // Nothing in top reads lifecycle events (a recording got them as they
            // came); don't let them pile up.
            session.drop_lifecycle();
        }

        fn interval(&self) -> Duration {
            self.interval
        }

        /// Detach, take the final frame, and (when recording) write it with the final
        /// histograms and stacks.
        fn finish(&mut self) -> Result<u64> {
            self.pump();
            let Some(session) = self.session.take() else {
                return Ok(0);
            };
            let bundle = session.finish()?;
            Ok(bundle.frames.last().map_or(0, |f| f.t_ns))
        }
    }
}
