//! One module per subcommand; each turns parsed arguments into effects and an exit code.

use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::{Cli, Command};

pub mod agent;
pub mod compare;
pub mod critical_path;
pub mod doctor;
pub mod export;
pub mod flamegraph;
#[cfg(target_os = "linux")]
mod recording_file;
pub mod replay;
pub mod report;
pub mod run;
pub mod stacks;
pub mod summary;
pub mod top;
pub mod trace;
pub mod tree;
pub mod viewer;
pub mod waits;

/// Say why events were lost in an eBPF session (call once it is detached), and how
/// many program runs the kernel skipped. The skipped runs are not
/// in `events lost`: the kernel does not say which task a skipped run concerned, and
/// on a machine with other tracers most concern tasks that are not traced; the
/// programs count the traced threads' missed exits they find (docs/PROFILE.md).
#[cfg(target_os = "linux")]
pub fn note_lost_events(session: &crate::source::ebpf::session::Session) {
    let causes = session.events_lost_by_cause();
    if !causes.is_empty() {
        let total = causes.values().sum();
        eprintln!(
            "kernelkite: events lost: {}",
            crate::model::lost_text(total, &causes)
        );
    }
    let skipped = session.program_runs_skipped();
    if skipped > 0 {
        eprintln!(
            "kernelkite: the kernel skipped {skipped} runs of the programs on this machine (its BPF recursion guard; for tasks of any process; the traced threads' missed exits are in events lost)"
        );
    }
}

/// What `--stacks` and its options ask the eBPF backend to capture.
#[cfg(target_os = "linux")]
pub fn stack_options(
    args: &crate::cli::StackArgs,
) -> Option<crate::source::ebpf::loader::StackOptions> {
    args.stacks
        .then(|| crate::source::ebpf::loader::StackOptions {
            min_block_ns: args.min_block_us.saturating_mul(1000),
            sample_hz: args.sample_hz,
        })
}

/// `KERNELKITE_DEBUG_SIZES=SECONDS`: how often `trace` and `agent` log the sizes of
/// what they keep (finding what grows over a long session; docs/TESTING.md, Soak).
pub(crate) fn debug_sizes_every() -> Option<std::time::Duration> {
    std::env::var("KERNELKITE_DEBUG_SIZES")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(std::time::Duration::from_secs_f64)
}

/// A session's ring buffer fd, for `trace` and `agent` to poll (the session reads it).
#[cfg(target_os = "linux")]
pub(crate) struct RingFd(pub std::os::fd::RawFd);

#[cfg(target_os = "linux")]
impl std::os::fd::AsRawFd for RingFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// Run the parsed command line.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    // Under sudo, outputs are written for the invoking user (see `crate::output`).
    #[cfg(target_os = "linux")]
    {
        use anyhow::Context;
        let user =
            crate::source::launch::invoking_user().context("cannot look up the invoking user")?;
        crate::output::set_invoking_user(user.map(|u| crate::output::OutputOwner {
            uid: u.uid,
            gid: u.gid,
            groups: u.groups,
        }));
    }
    let global = cli.global;
    match cli.command {
        Command::Run(args) => run::execute(&global, &args),
        Command::Trace(args) => trace::execute(&global, &args),
        Command::Agent(args) => agent::execute(&global, &args),
        Command::Top(args) => top::execute(&global, &args),
        Command::Replay(args) => replay::execute(&global, &args),
        Command::Summary(args) => summary::execute(&global, &args),
        Command::Waits(args) => waits::execute(&global, &args),
        Command::CriticalPath(args) => critical_path::execute(&global, &args),
        Command::Compare(args) => compare::execute(&global, &args),
        Command::Tree(args) => tree::execute(&global, &args),
        Command::Viewer(args) => viewer::execute(&global, &args),
        Command::Report(args) => report::execute(&global, &args),
        Command::Export(args) => export::execute(&global, &args),
        Command::Stacks(args) => stacks::execute(&global, &args),
        Command::Flamegraph(args) => flamegraph::execute(&global, &args),
        Command::Doctor => doctor::execute(&global),
        Command::BenchFloor(args) => doctor::bench_floor(&args),
        Command::Completions(args) => {
            let mut cmd = Cli::command();
            let mut out = Vec::new();
            clap_complete::generate(args.shell, &mut cmd, "kernelkite", &mut out);
            crate::report::write_stdout(&String::from_utf8_lossy(&out))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(args) => {
            let top = Cli::command();
            let man = match &args.subcommand {
                None => clap_mangen::Man::new(top),
                // The top page's SEE ALSO names kernelkite-NAME(1) for each subcommand.
                Some(name) => match top.find_subcommand(name).filter(|c| !c.is_hide_set()) {
                    Some(sub) => {
                        let name = sub.get_name().to_string();
                        clap_mangen::Man::new(
                            sub.clone()
                                .name(format!("kernelkite-{name}"))
                                .bin_name(format!("kernelkite {name}")),
                        )
                    }
                    None => anyhow::bail!("man: no subcommand {name:?} (see kernelkite help)"),
                },
            };
            let mut out = Vec::new();
            man.render(&mut out)?;
            crate::report::write_stdout(&String::from_utf8_lossy(&out))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
