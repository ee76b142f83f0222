//! `kernelkite report`.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{ReportArgs, GlobalArgs};

pub fn execute(_global: &GlobalArgs, _args: &ReportArgs) -> Result<ExitCode> {
    anyhow::bail!("report is not built yet")
}
