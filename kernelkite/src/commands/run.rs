//! `kernelkite run`.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{RunArgs, GlobalArgs};

pub fn execute(_global: &GlobalArgs, _args: &RunArgs) -> Result<ExitCode> {
    anyhow::bail!("run is not built yet")
}
