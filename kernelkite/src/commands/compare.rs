//! `kernelkite compare`.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{CompareArgs, GlobalArgs};

pub fn execute(_global: &GlobalArgs, _args: &CompareArgs) -> Result<ExitCode> {
    anyhow::bail!("compare is not built yet")
}
