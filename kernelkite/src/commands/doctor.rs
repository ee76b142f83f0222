//! `kernelkite doctor`: which backend would be used here, and why.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::GlobalArgs;

pub fn execute(_global: &GlobalArgs) -> Result<ExitCode> {
    anyhow::bail!("doctor is not built yet")
}
