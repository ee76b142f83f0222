//! `kernelkite critical-path`: which threads bounded the root process's wall time (needs
//! a bundle recorded with `--critical-path`).

use std::process::ExitCode;

use anyhow::Result;

use crate::analysis::analyze;
use crate::analysis::critical_path::{critical_path, NoPath};
use crate::cli::CriticalPathArgs;
use crate::commands::replay::load_input;
use crate::model::Backend;
use crate::report::critical_path::{critical_path_json, critical_path_text};
use crate::report::{json_text, write_stdout};

pub fn execute(args: &CriticalPathArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let analysis = analyze(&bundle);
    let path = match critical_path(&bundle, &analysis) {
        Ok(p) => p,
        Err(why) => {
            let why = match (why, bundle.backend) {
                (NoPath::NoStream, Backend::Proc) => {
                    "the /proc sampler cannot see wakeups (run as root for the eBPF backend, with --critical-path)".to_string()
                }
                (why, _) => why.to_string(),
            };
            crate::note!(
                "kernelkite: {} has no critical path: {why}",
                args.bundle.display()
            );
            return Ok(ExitCode::from(2));
        }
    };
    if args.json {
        write_stdout(&json_text(&critical_path_json(&path)))?;
    } else {
        write_stdout(&critical_path_text(&path, args.segments))?;
    }
    Ok(ExitCode::SUCCESS)
}
