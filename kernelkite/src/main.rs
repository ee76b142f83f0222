use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = kernelkite::cli::Cli::parse();
    match kernelkite::commands::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            // One line: the error and its causes, no backtrace, no panic.
            // A cause whose text the message already quotes is not repeated.
            let mut line = format!("kernelkite: error: {err}");
            for cause in err.chain().skip(1) {
                let cause = cause.to_string();
                if !line.contains(&cause) {
                    line.push_str(&format!(": {cause}"));
                }
            }
            eprintln!("{line}");
            ExitCode::from(2)
        }
    }
}
