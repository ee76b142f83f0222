use anyhow::{bail, Result};

pub fn run(_args: &[String]) -> Result<()> {
    bail!("xtask ci is not built yet")
}
