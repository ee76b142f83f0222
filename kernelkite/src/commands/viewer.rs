//! `kernelkite viewer`.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{ViewerArgs, GlobalArgs};

pub fn execute(_global: &GlobalArgs, _args: &ViewerArgs) -> Result<ExitCode> {
    anyhow::bail!("viewer is not built yet")
}
