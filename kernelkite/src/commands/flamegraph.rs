//! `kernelkite flamegraph`: a flame graph (SVG) or the folded-stack text of a bundle's
//! stacks, written atomically (or the folded text to standard output).

use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};

use crate::cli::FlamegraphArgs;
use crate::commands::replay::load_input;
use crate::output::write_file;
use crate::report::flamegraph::{flamegraph_svg, folded_text, FlameGraphError, FlameGraphSpec};
use crate::report::write_stdout;

pub fn execute(args: &FlamegraphArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let spec = FlameGraphSpec {
        class: args.class,
        per_process: args.per_process,
    };
    // "<bundle> has no stacks (record with --stacks)", as `stacks` says it.
    let failed = |e: FlameGraphError| anyhow!("{} {e}", args.bundle.display());
    let bytes = if args.folded {
        if bundle.stacks.is_none() {
            return Err(failed(FlameGraphError::NoStacks));
        }
        folded_text(&bundle, &spec)
    } else {
        flamegraph_svg(&bundle, &spec).map_err(failed)?
    };
    match &args.output {
        Some(path) => write_file(path, bytes.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => write_stdout(&bytes).context("cannot write to standard output")?,
    }
    Ok(ExitCode::SUCCESS)
}
