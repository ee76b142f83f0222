//! `kernelkite trace`.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{TraceArgs, GlobalArgs};

pub fn execute(_global: &GlobalArgs, _args: &TraceArgs) -> Result<ExitCode> {
    anyhow::bail!("trace is not built yet")
}
