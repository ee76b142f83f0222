//! `kernelkite replay`: fixture → bundle, byte for byte the same every time.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::{GlobalArgs, ReplayArgs};
use crate::model::fixture::load_fixture;
use crate::model::write_bundle;

pub fn execute(global: &GlobalArgs, args: &ReplayArgs) -> Result<ExitCode> {
    let mut bundle = load_fixture(&args.input)?;
    if let Some(label) = &global.label {
        bundle.label = Some(label.clone());
    }
    write_bundle(&args.bundle, &bundle)
        .with_context(|| format!("cannot write {}", args.bundle.display()))?;
    Ok(ExitCode::SUCCESS)
}
