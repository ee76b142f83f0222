//! `kernelkite export BUNDLE --format FORMAT [-o FILE]`: a bundle in another tool's
//! format, to a file (atomically) or standard output.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::analysis::analyze;
use crate::cli::ExportArgs;
use crate::commands::replay::load_input;
use crate::export::{render, ExportOptions};
use crate::output::write_file;

pub fn execute(args: &ExportArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let analysis = analyze(&bundle);
    let options = ExportOptions {
        start_unix_ns: args.start_unix_ns,
    };
    let bytes = render(&bundle, &analysis, args.format, options)
        .with_context(|| format!("cannot export {}", args.bundle.display()))?;
    match &args.output {
        Some(path) => {
            write_file(path, &bytes).with_context(|| format!("cannot write {}", path.display()))?
        }
        // Bytes (protobuf is not text); a closed pipe is not an error.
        None => crate::output::write_stdout(&bytes).context("cannot write to standard output")?,
    }
    Ok(ExitCode::SUCCESS)
}
