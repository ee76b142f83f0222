//! One module per subcommand; each turns parsed arguments into effects and an exit code.

use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::{Cli, Command};

pub mod doctor;

/// Run the parsed command line.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Doctor => doctor::execute(&global),
        Command::Completions(args) => {
            let mut cmd = Cli::command();
            clap_complete::generate(args.shell, &mut cmd, "kernelkite", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            let man = clap_mangen::Man::new(Cli::command());
            man.render(&mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        other => anyhow::bail!("{other:?} is not built yet"),
    }
}
