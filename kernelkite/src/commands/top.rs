//! `kernelkite top`: pick a feed (recording or bundle replay, eBPF session, /proc
//! sampler) and run the live view on it; with `--record`, finish the recording after.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::TopArgs;

#[cfg(not(target_os = "linux"))]
pub fn execute(_args: &TopArgs) -> Result<ExitCode> {
    anyhow::bail!("top needs Linux (it reads /proc and loads eBPF programs)")
}

#[cfg(target_os = "linux")]
pub fn execute(args: &TopArgs) -> Result<ExitCode> {
    use std::time::Duration;

    use anyhow::{bail, Context};

    use crate::cli::BackendChoice;
    use crate::commands::recording_file::RecordingFile;
    use crate::commands::replay::{is_recording, load_input};
    use crate::source::ebpf::availability::Availability;
    use crate::top::feed::{
        BundleReplayFeed, EbpfFeed, LiveTargets, ProcFeed, RecordingReplayFeed, TopFeed,
    };

    if !(args.refresh.is_finite() && (0.1..=3600.0).contains(&args.refresh)) {
        bail!("--refresh must be between 0.1 and 3600 seconds");
    }
    if !(args.speed.is_finite() && (1.0 / 64.0..=64.0).contains(&args.speed)) {
        bail!("--speed must be between 1/64 and 64");
    }
    if args.replay.is_some() && args.recording.record.is_some() {
        bail!("--record records a live session; it cannot be used with --replay");
    }
    if args.replay.is_some() && args.stacks.stacks {
        bail!("--stacks captures stacks live; a replay shows the stacks its recording holds");
    }
    if args.stacks.stacks && args.backend == BackendChoice::Proc {
        bail!("--stacks needs the eBPF backend");
    }
    let refresh = Duration::from_secs_f64(args.refresh);
    let stacks = crate::commands::stack_options(&args.stacks);
    // Created before the session starts: a bad path fails before the terminal changes.
    let record = RecordingFile::create(&args.recording)?;
    let live = |record: &Option<RecordingFile>| -> Result<Box<dyn TopFeed>> {
        let cgroup = match (&args.cgroup, &args.container) {
            (Some(path), _) => Some(crate::source::cgroups::resolve_dir(path)?),
            (None, Some(id)) => Some(crate::source::cgroups::resolve_container(id)?),
            (None, None) => None,
        };
        if cgroup.is_some() && args.backend == BackendChoice::Proc {
            bail!(
                "--cgroup and --container select in the kernel: they need the eBPF backend (sudo)"
            );
        }
        let targets = LiveTargets {
            pids: args.pids.clone(),
            follow: args.follow,
            cgroup,
        };
        // A pid that is no process (or a thread, or a kernel thread) is an error with
        // either backend, never a reason to fall back.
        crate::source::ebpf::session::check_pids_exist(&targets.pids)?;
        let sink = || record.as_ref().map(RecordingFile::sink);
        let proc_feed = |targets: LiveTargets| -> Result<Box<dyn TopFeed>> {
            let mut feed = ProcFeed::new(targets, refresh)?;
            if let Some(sink) = sink() {
                feed.record_to(sink);
            }
            Ok(Box::new(feed))
        };
        let ebpf_feed = |targets: LiveTargets| -> Result<Box<dyn TopFeed>> {
            Ok(Box::new(EbpfFeed::start(targets, refresh, stacks, sink())?))
        };
        Ok(match args.backend {
            BackendChoice::Proc => proc_feed(targets)?,
            BackendChoice::Ebpf => ebpf_feed(targets).context("eBPF is not available")?,
            BackendChoice::Auto => match Availability::probe().unavailable_reason() {
                Some(why) if stacks.is_some() => {
                    bail!("--stacks needs the eBPF backend, which is not available: {why}")
                }
                Some(why) if targets.cgroup.is_some() => {
                    bail!("--cgroup and --container need the eBPF backend, which is not available: {why}")
                }
                Some(why) => {
                    crate::note!(
                        "kernelkite: using the /proc sampler: eBPF is not available: {why}"
                    );
                    proc_feed(targets)?
                }
                // With --stacks, failing to load is the error (no stacks from /proc).
                None if stacks.is_some() || targets.cgroup.is_some() => ebpf_feed(targets)?,
                None => match ebpf_feed(targets.clone()) {
                    Err(e) => {
                        crate::note!(
                            "kernelkite: using the /proc sampler: eBPF is not available: {e:#}"
                        );
                        proc_feed(targets)?
                    }
                    Ok(feed) => feed,
                },
            },
        })
    };
    let mut feed: Box<dyn TopFeed> = if let Some(path) = &args.replay {
        if is_recording(path) {
            // Read it all once first: a damaged recording is a one-line error before
            // the terminal changes (and a cut-short one a warning), not a failure
            // halfway through the replay. The replay then streams it.
            let bundle = load_input(path)?;
            Box::new(RecordingReplayFeed::open(path, bundle.stacks.is_some())?)
        } else {
            let bundle = load_input(path)?;
            if bundle.frames.is_empty() {
                bail!("{}: the bundle has no frames to replay", path.display());
            }
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string());
            Box::new(BundleReplayFeed::new(bundle, &name))
        }
    } else {
        match live(&record) {
            Ok(feed) => feed,
            Err(e) => {
                record.iter().for_each(RecordingFile::discard_if_empty);
                return Err(e);
            }
        }
    };
    let outcome = crate::top::run(feed.as_mut(), args.speed);
    // Stop the session (and complete the recording) whatever ended the view.
    let end_t_ns = feed.finish();
    drop(feed);
    if let Some(record) = record {
        record.finish(*end_t_ns.as_ref().unwrap_or(&0))?;
    }
    let outcome = outcome?;
    end_t_ns?;
    if outcome.reason != "quit" {
        crate::note!("kernelkite: top stopped: {}", outcome.reason);
    }
    Ok(ExitCode::SUCCESS)
}
