//! `kernelkite top`: pick a feed (bundle replay, eBPF session, /proc sampler) and run
//! the live view on it.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{GlobalArgs, TopArgs};

#[cfg(not(target_os = "linux"))]
pub fn execute(_global: &GlobalArgs, _args: &TopArgs) -> Result<ExitCode> {
    anyhow::bail!("top needs Linux (it reads /proc and loads eBPF programs)")
}

#[cfg(target_os = "linux")]
pub fn execute(global: &GlobalArgs, args: &TopArgs) -> Result<ExitCode> {
    use std::time::Duration;

    use anyhow::{bail, Context};

    use crate::cli::BackendChoice;
    use crate::commands::replay::load_input;
    use crate::source::ebpf::availability::Availability;
    use crate::top::feed::{BundleReplayFeed, EbpfFeed, LiveTargets, ProcFeed, TopFeed};

    if !(args.refresh.is_finite() && (0.1..=3600.0).contains(&args.refresh)) {
        bail!("--refresh must be between 0.1 and 3600 seconds");
    }
    if !(args.speed.is_finite() && (1.0 / 64.0..=64.0).contains(&args.speed)) {
        bail!("--speed must be between 1/64 and 64");
    }
    let refresh = Duration::from_secs_f64(args.refresh);
    let feed: Box<dyn TopFeed> = if let Some(path) = &args.replay {
        let bundle = load_input(path)?;
        if bundle.frames.is_empty() {
            bail!("{}: the bundle has no frames to replay", path.display());
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        Box::new(BundleReplayFeed::new(bundle, &name))
    } else {
        let targets = LiveTargets {
            pids: args.pids.clone(),
            follow: args.follow,
        };
        // A pid that is no process (or a thread, or a kernel thread) is an error with
        // either backend, never a reason to fall back.
        crate::source::ebpf::session::check_pids_exist(&targets.pids)?;
        match global.backend {
            BackendChoice::Proc => Box::new(ProcFeed::new(targets, refresh)?),
            BackendChoice::Ebpf => {
                Box::new(EbpfFeed::start(targets, refresh).context("eBPF is not available")?)
            }
            BackendChoice::Auto => match Availability::probe().unavailable_reason() {
                Some(why) => {
                    eprintln!("kernelkite: using the /proc sampler: eBPF is not available: {why}");
                    Box::new(ProcFeed::new(targets, refresh)?)
                }
                None => auto_ebpf(targets, refresh)?,
            },
        }
    };
    let outcome = crate::top::run(feed, args.speed)?;
    if outcome.reason != "quit" {
        eprintln!("kernelkite: top stopped: {}", outcome.reason);
    }
    Ok(ExitCode::SUCCESS)
}

/// `--backend auto` with the privilege for eBPF: try it, fall back to /proc with the
/// reason if loading fails.
#[cfg(target_os = "linux")]
fn auto_ebpf(
    targets: crate::top::feed::LiveTargets,
    refresh: std::time::Duration,
) -> Result<Box<dyn crate::top::feed::TopFeed>> {
    use crate::top::feed::{EbpfFeed, ProcFeed};
    Ok(match EbpfFeed::start(targets.clone(), refresh) {
        Err(e) => {
            eprintln!("kernelkite: using the /proc sampler: eBPF is not available: {e:#}");
            Box::new(ProcFeed::new(targets, refresh)?)
        }
        Ok(feed) => Box::new(feed),
    })
}
