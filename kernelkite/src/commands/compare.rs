//! `kernelkite compare`: deltas between two bundles, with `--fail-on` thresholds.
//!
//! Exit codes: 0 when every rule passes (or there are none), 1 when a rule fails (the
//! failing rules are also printed to standard error), 2 for a malformed rule or an
//! unreadable bundle.

use std::process::ExitCode;

use anyhow::{anyhow, Result};

use crate::analysis::analyze;
use crate::analysis::compare::{compare, FailRule};
use crate::cli::CompareArgs;
use crate::commands::replay::load_input;
use crate::report::compare::{compare_json, compare_text};
use crate::report::{json_text, write_stdout};

pub fn execute(args: &CompareArgs) -> Result<ExitCode> {
    // Rules first: a typo should not cost loading two bundles.
    let rules = args
        .fail_on
        .iter()
        .map(|r| FailRule::parse(r).map_err(|e| anyhow!(e)))
        .collect::<Result<Vec<_>>>()?;
    let before = analyze(&load_input(&args.before)?);
    let after = analyze(&load_input(&args.after)?);
    let cmp = compare(&before, &after);
    let outcomes: Vec<_> = rules.iter().map(|r| r.evaluate(&cmp)).collect();
    if args.json {
        write_stdout(&json_text(&compare_json(&cmp, &outcomes)))?;
    } else {
        write_stdout(&compare_text(&cmp, &outcomes))?;
    }
    let failed: Vec<_> = outcomes.iter().filter(|o| o.failed).collect();
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for f in failed {
            crate::note!("kernelkite: fail-on: {}", f.message);
        }
        Ok(ExitCode::from(1))
    }
}
