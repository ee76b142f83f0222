use anyhow::{bail, Result};

pub fn run(_args: &[String]) -> Result<()> {
    bail!("xtask bench is not built yet")
}
