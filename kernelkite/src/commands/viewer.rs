//! `kernelkite viewer`: the timeline document (JSON) of a bundle, to a file
//! (atomically) or standard output.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::ViewerArgs;
use crate::commands::replay::load_input;
use crate::output::write_file;
use crate::report::{viewer, write_stdout};

pub fn execute(args: &ViewerArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let bytes = viewer::render(&bundle);
    match &args.output {
        Some(path) => {
            write_file(path, &bytes).with_context(|| format!("cannot write {}", path.display()))?
        }
        None => {
            let text = std::str::from_utf8(&bytes).expect("serde_json writes UTF-8");
            write_stdout(text).context("cannot write to standard output")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
