//! `kernelkite tree`.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{TreeArgs, GlobalArgs};

pub fn execute(_global: &GlobalArgs, _args: &TreeArgs) -> Result<ExitCode> {
    anyhow::bail!("tree is not built yet")
}
