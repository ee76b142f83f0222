//! `kernelkite summary`: totals, latency classes and syscalls of one bundle.

use std::process::ExitCode;

use anyhow::Result;

use crate::analysis::analyze;
use crate::analysis::waits::idle_split;
use crate::cli::SummaryArgs;
use crate::commands::replay::load_input;
use crate::report::summary::{summary_json_with, summary_text_with};
use crate::report::{json_text, write_stdout};

pub fn execute(args: &SummaryArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let analysis = analyze(&bundle);
    let idle = idle_split(&bundle, &analysis);
    if args.json {
        write_stdout(&json_text(&summary_json_with(&analysis, idle.as_ref())))?;
    } else {
        write_stdout(&summary_text_with(&analysis, idle.as_ref()))?;
    }
    Ok(ExitCode::SUCCESS)
}
