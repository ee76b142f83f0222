//! `kernelkite replay`.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{ReplayArgs, GlobalArgs};

pub fn execute(_global: &GlobalArgs, _args: &ReplayArgs) -> Result<ExitCode> {
    anyhow::bail!("replay is not built yet")
}
