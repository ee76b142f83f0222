//! `kernelkite report`: one self-contained HTML page of a bundle, written atomically.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::ReportArgs;
use crate::commands::replay::load_input;
use crate::output::write_file;
use crate::report::html;

pub fn execute(args: &ReportArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let page = html::render(&bundle);
    write_file(&args.output, page.as_bytes())
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    Ok(ExitCode::SUCCESS)
}
