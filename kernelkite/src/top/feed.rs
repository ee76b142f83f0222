//! Where `top`'s numbers come from: a [`TopFeed`] hands the view successive snapshots of
//! raw cumulative counters (a bundle [`Frame`] plus the syscall histograms so far). The
//! live feeds take them now (eBPF session, /proc sampler); a replay feed reads them from
//! a recorded bundle. Everything derived from them is computed by `analysis` (see
//! `window`), never here.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::model::{Backend, Bundle, Frame, HostConstants, SyscallHistogram};
use crate::source::host::current_host;
use crate::source::procfs::{Sampler, SamplerOptions, Scope, PROC_ROOT};

/// One instant of the observed processes: cumulative counters only.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Processes alive at this instant; `frame.t_ns` is ns since the feed started.
    pub frame: Frame,
    /// Per-(process, syscall) histograms, cumulative since the feed started (eBPF).
    pub syscalls: Vec<SyscallHistogram>,
    /// Events the kernel side could not record so far (eBPF), cumulative.
    pub events_lost: Option<u64>,
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
}

/// What to watch live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveTargets {
    /// Processes to watch; empty means every user-space process.
    pub pids: Vec<i32>,
    /// Also watch the pids' descendants (always on without pids).
    pub follow: bool,
}

impl LiveTargets {
    pub fn system_wide(&self) -> bool {
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
}

impl ProcFeed {
    pub fn new(targets: LiveTargets, interval: Duration) -> Result<ProcFeed> {
        // The same checks as the eBPF session: a thread id or a kernel thread gets a
        // message naming what to watch instead.
        crate::source::ebpf::session::check_pids_exist(&targets.pids)?;
        ProcFeed::with_root(Path::new(PROC_ROOT), targets, interval)
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
                host: current_host(),
                scope: targets.describe(),
                hooks: Vec::new(),
                replay_of: None,
            },
            sampler,
            targets,
            started: Instant::now(),
            interval,
        })
    }
}

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
        Ok(Some(Snapshot {
            frame,
            syscalls: Vec::new(),
            events_lost: None,
        }))
    }

    fn interval(&self) -> Duration {
        self.interval
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
        let scope = if bundle.root_pids.is_empty() {
            "recorded processes".to_string()
        } else {
            let list: Vec<String> = bundle.root_pids.iter().map(|p| p.to_string()).collect();
            format!("recorded pids {}", list.join(","))
        };
        BundleReplayFeed {
            info: FeedInfo {
                backend: bundle.backend,
                host: bundle.host.clone(),
                scope,
                hooks: Vec::new(),
                replay_of: Some(name.to_string()),
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
        Ok(Some(Snapshot {
            frame: frame.clone(),
            syscalls: if last {
                self.bundle.syscalls.clone()
            } else {
                Vec::new()
            },
            events_lost: self.bundle.events_lost,
        }))
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.bundle.interval_ms.max(1))
    }
}

#[cfg(target_os = "linux")]
pub use ebpf_feed::EbpfFeed;

#[cfg(target_os = "linux")]
mod ebpf_feed {
    use super::*;
    use crate::source::ebpf::session::{Session, TraceOptions};
    use aya::maps::{MapData, RingBuf};

    /// The eBPF session: every class exact, syscall latency histograms, events lost.
    pub struct EbpfFeed {
        info: FeedInfo,
        session: Session,
        ring: RingBuf<MapData>,
        interval: Duration,
        system_wide: bool,
        ended: bool,
    }

    impl EbpfFeed {
        /// Load and attach the programs and start tracking the targets. System-wide
        /// means every process below pid 1, with `follow` (new processes are tracked
        /// from their fork).
        pub fn start(targets: LiveTargets, interval: Duration) -> Result<EbpfFeed> {
            let system_wide = targets.system_wide();
            let follow = targets.follow || system_wide;
            let mut session = Session::start(TraceOptions {
                pids: targets.roots(),
                follow,
                // No slow-syscall stream: top shows histograms only.
                min_latency_ns: 0,
                interval,
                // Frames are handed over, not kept (see `snapshot_now`); the session's
                // own recorder holds only the attach frame.
                max_frames: 1,
                network: false,
                label: None,
                // The stacks panel is not built yet.
                stacks: None,
            })?;
            session.count_initial_in_frames(true);
            let ring = session.take_ring()?;
            let hooks = session.hooks().to_vec();
            Ok(EbpfFeed {
                info: FeedInfo {
                    backend: Backend::Ebpf,
                    host: current_host(),
                    scope: LiveTargets { follow, ..targets }.describe(),
                    hooks,
                    replay_of: None,
                },
                session,
                ring,
                interval,
                system_wide,
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
            let frame = self.session.snapshot_now()?;
            // System-wide never ends (and checking walks every thread's map entry).
            if !self.system_wide && !self.session.any_target_alive() {
                self.ended = true;
            }
            Ok(Some(Snapshot {
                frame,
                syscalls: self.session.syscall_histograms(),
                events_lost: Some(self.session.events_lost()),
            }))
        }

        fn pump(&mut self) {
            while let Some(item) = self.ring.next() {
                self.session.handle_record(&item);
            }
            // Nothing in top reads lifecycle events; don't let them pile up.
            drop(self.session.take_lifecycle());
        }

        fn interval(&self) -> Duration {
            self.interval
        }
    }
}
