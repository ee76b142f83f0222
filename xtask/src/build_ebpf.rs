use anyhow::{bail, Result};

pub fn run(_args: &[String]) -> Result<()> {
    bail!("xtask build_ebpf is not built yet")
}
