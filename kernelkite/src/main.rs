use std::process::ExitCode;

use kernelkite::commands::run::{CommandNotStarted, STATUS_OWN_ERROR};

fn main() -> ExitCode {
    // `run` exits with its command's status, so its own failures (a bad flag included)
    // use statuses a command rarely does, as `env` and `timeout` do.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let own_error = if is_run(&kernelkite::cli::hoist_leading_options(args.clone())) {
        STATUS_OWN_ERROR
    } else {
        2
    };
    let cli = match kernelkite::cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return match err.exit_code() {
                0 => ExitCode::SUCCESS,
                _ => ExitCode::from(own_error),
            };
        }
    };
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
            kernelkite::note!("{line}");
            match err.downcast_ref::<CommandNotStarted>() {
                Some(not_started) if own_error == STATUS_OWN_ERROR => {
                    ExitCode::from(not_started.status)
                }
                _ => ExitCode::from(own_error),
            }
        }
    }
}

/// Whether the command line asks for `run` (parsed leniently, so a bad flag still tells).
fn is_run(args: &[std::ffi::OsString]) -> bool {
    kernelkite::cli::command()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .is_ok_and(|m| m.subcommand_name() == Some("run"))
}
