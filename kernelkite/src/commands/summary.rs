//! `kernelkite summary`: totals, latency classes and syscalls of one bundle.

use std::process::ExitCode;

use anyhow::Result;

use crate::analysis::analyze;
use crate::cli::{GlobalArgs, SummaryArgs};
use crate::commands::replay::load_input;
use crate::report::summary::{summary_json, summary_text};
use crate::report::{json_text, write_stdout};

pub fn execute(global: &GlobalArgs, args: &SummaryArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let analysis = analyze(&bundle);
    if global.json {
        write_stdout(&json_text(&summary_json(&analysis)))?;
    } else {
        write_stdout(&summary_text(&analysis))?;
    }
    Ok(ExitCode::SUCCESS)
}
