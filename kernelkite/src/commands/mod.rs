//! One module per subcommand; each turns parsed arguments into effects and an exit code.

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use anyhow::Result;

pub mod agent;
pub mod compare;
pub mod critical_path;
pub mod doctor;
pub mod export;
pub mod flamegraph;
#[cfg(target_os = "linux")]
mod invocation;
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
            min_block_ns: args.min_block_us().saturating_mul(1000),
            sample_hz: args.sample_hz(),
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
    match cli.command {
        Command::Run(args) => run::execute(&args),
        Command::Trace(args) => trace::execute(&args),
        Command::Agent(args) => agent::execute(&args),
        Command::Top(args) => top::execute(&args),
        Command::Replay(args) => replay::execute(&args),
        Command::Summary(args) => summary::execute(&args),
        Command::Waits(args) => waits::execute(&args),
        Command::CriticalPath(args) => critical_path::execute(&args),
        Command::Compare(args) => compare::execute(&args),
        Command::Tree(args) => tree::execute(&args),
        Command::Viewer(args) => viewer::execute(&args),
        Command::Report(args) => report::execute(&args),
        Command::Export(args) => export::execute(&args),
        Command::Stacks(args) => stacks::execute(&args),
        Command::Flamegraph(args) => flamegraph::execute(&args),
        Command::Doctor(args) => doctor::execute(&args),
        Command::BenchFloor(args) => doctor::bench_floor(&args),
        Command::Completions(args) => {
            let mut cmd = crate::cli::command();
            let mut out = Vec::new();
            clap_complete::generate(args.shell, &mut cmd, "kernelkite", &mut out);
            crate::report::write_stdout(&String::from_utf8_lossy(&out))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(args) => {
            crate::report::write_stdout(&man_page(args.subcommand.as_deref())?)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `kernelkite man [NAME]`: kernelkite(1) (without a name, or with `kernelkite`), or
/// kernelkite-NAME(1), the pages the top page's SUBCOMMANDS section names.
pub fn man_page(name: Option<&str>) -> Result<String> {
    // No `help` subcommand on the page: there is no kernelkite-help(1) to name.
    let top = crate::cli::command().disable_help_subcommand(true);
    let cmd = match name {
        None | Some("kernelkite") => top,
        Some(name) => match top.find_subcommand(name).filter(|c| !c.is_hide_set()) {
            Some(sub) => {
                let name = sub.get_name().to_string();
                sub.clone()
                    .name(format!("kernelkite-{name}"))
                    .bin_name(format!("kernelkite {name}"))
            }
            None => anyhow::bail!("man: no subcommand {name:?} (`kernelkite help` lists them)"),
        },
    };
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    let mut synopsis = Vec::new();
    man.render_synopsis_section(&mut synopsis)?;
    let mut synopsis = String::from_utf8_lossy(&synopsis).into_owned();
    // clap_mangen leaves out the `--` before a trailing (`last`) argument: `run`'s
    // command must follow one.
    for arg in cmd.get_positionals().filter(|a| a.is_last_set()) {
        let name = arg
            .get_value_names()
            .map_or_else(|| arg.get_id().to_string(), |v| v.join(" "));
        let (open, close) = if arg.is_required_set() {
            ("<", ">")
        } else {
            ("[", "]")
        };
        let shown = format!("{open}\\fI{name}\\fR{close}");
        anyhow::ensure!(
            synopsis.contains(&shown),
            "man: the synopsis has no {shown:?} to mark with --"
        );
        synopsis = synopsis.replace(&shown, &format!("\\fB\\-\\-\\fR {shown}"));
    }
    out.extend_from_slice(synopsis.as_bytes());
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        man.render_extra_section(&mut out)?;
    }
    // One line each (clap_mangen runs the long version's lines together).
    out.extend_from_slice(b".SH VERSION\n.nf\n");
    for line in crate::cli::LONG_VERSION.lines() {
        out.extend_from_slice(roff_line(line).as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b".fi\n");
    // Each section rendered apart repeats roff's quote definition: keep the first.
    let page = String::from_utf8_lossy(&out).into_owned();
    const QUOTE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";
    Ok(match page.split_once(QUOTE) {
        Some((head, rest)) => format!("{head}{QUOTE}{}", rest.replace(QUOTE, "")),
        None => page,
    })
}

/// `text` as one roff text line: backslashes and dashes escaped, no control character
/// at its start.
fn roff_line(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}
