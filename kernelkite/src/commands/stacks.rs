//! `kernelkite stacks`: the heaviest stacks per latency class of one bundle.

use std::process::ExitCode;

use anyhow::{bail, Result};

use crate::analysis::analyze;
use crate::analysis::stacks::{analyze_stacks, slow_call_stacks};
use crate::cli::StacksArgs;
use crate::commands::replay::load_input;
use crate::report::stacks::{stacks_json, stacks_text, STACKS_SLOW_CALLS};
use crate::report::{json_text, write_stdout};

pub fn execute(args: &StacksArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let analysis = analyze(&bundle);
    let top = usize::try_from(args.top).unwrap_or(usize::MAX);
    let Some(stacks) = analyze_stacks(&bundle, &analysis, args.class, top) else {
        bail!(
            "{} has no stacks (record with --stacks)",
            args.bundle.display()
        );
    };
    // Slow calls have no class: listed only when every class is.
    let calls = match args.class {
        Some(_) => Vec::new(),
        None => slow_call_stacks(&bundle, STACKS_SLOW_CALLS),
    };
    if args.json {
        write_stdout(&json_text(&stacks_json(&analysis, &stacks, &calls)))?;
    } else {
        write_stdout(&stacks_text(&analysis, &stacks, &calls))?;
    }
    Ok(ExitCode::SUCCESS)
}
