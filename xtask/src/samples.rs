use anyhow::{bail, Result};

pub fn run(_args: &[String]) -> Result<()> {
    bail!("xtask samples is not built yet")
}
