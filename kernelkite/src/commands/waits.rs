//! `kernelkite waits`: what ended each thread's sleeps (needs waker data: an eBPF bundle
//! recorded by a kernelkite that records wakers).

use std::process::ExitCode;

use anyhow::Result;

use crate::analysis::analyze;
use crate::analysis::waits::thread_waits;
use crate::cli::WaitsArgs;
use crate::commands::replay::load_input;
use crate::model::Backend;
use crate::report::waits::{waits_json, waits_text};
use crate::report::{json_text, write_stdout};

pub fn execute(args: &WaitsArgs) -> Result<ExitCode> {
    let bundle = load_input(&args.bundle)?;
    let analysis = analyze(&bundle);
    let Some(threads) = thread_waits(&bundle, &analysis) else {
        let why = match bundle.backend {
            Backend::Proc => {
                "the /proc sampler cannot see wakeups (run as root for the eBPF backend)"
            }
            Backend::Ebpf => {
                "it was recorded without waker data (by an older kernelkite, or with KERNELKITE_WAKERS=off)"
            }
        };
        crate::note!(
            "kernelkite: {} has no wakeup data: {why}",
            args.bundle.display()
        );
        return Ok(ExitCode::from(2));
    };
    if args.json {
        write_stdout(&json_text(&waits_json(&threads)))?;
    } else {
        write_stdout(&waits_text(&threads))?;
    }
    Ok(ExitCode::SUCCESS)
}
