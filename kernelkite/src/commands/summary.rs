//! `kernelkite summary`.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{SummaryArgs, GlobalArgs};

pub fn execute(_global: &GlobalArgs, _args: &SummaryArgs) -> Result<ExitCode> {
    anyhow::bail!("summary is not built yet")
}
