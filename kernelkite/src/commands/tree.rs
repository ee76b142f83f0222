//! `kernelkite tree`: the observed process tree.

use std::process::ExitCode;

use anyhow::Result;

use crate::analysis::analyze;
use crate::cli::TreeArgs;
use crate::commands::replay::load_input;
use crate::report::tree::{tree_json, tree_text};
use crate::report::{json_text, write_stdout};

pub fn execute(args: &TreeArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let analysis = analyze(&bundle);
    if args.json {
        write_stdout(&json_text(&tree_json(&analysis)))?;
    } else {
        write_stdout(&tree_text(&analysis))?;
    }
    Ok(ExitCode::SUCCESS)
}
