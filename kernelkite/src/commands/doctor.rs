//! `kernelkite doctor`: which backend would be used here, and why.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::GlobalArgs;

pub fn execute(global: &GlobalArgs) -> Result<ExitCode> {
    let report = platform::diagnose();
    if global.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// `kernelkite bench-floor` (hidden): attach the empty syscall programs the overhead
/// benchmark measures as its floor, say so, and hold them until stdin closes.
pub fn bench_floor() -> Result<ExitCode> {
    platform::bench_floor()
}

fn render_text(report: &serde_json::Value) -> String {
    let mut out = String::new();
    let field = |k: &str| report.get(k).cloned().unwrap_or(serde_json::Value::Null);
    let s = |v: serde_json::Value| match v {
        serde_json::Value::String(s) => s,
        serde_json::Value::Null => "unknown".into(),
        other => other.to_string(),
    };
    out.push_str(&format!(
        "kernel release:   {}\n",
        s(field("kernel_release"))
    ));
    out.push_str(&format!("architecture:     {}\n", s(field("arch"))));
    out.push_str(&format!("kernel BTF:       {}\n", s(field("btf"))));
    out.push_str(&format!(
        "tracefs mounted:  {}\n",
        s(field("tracefs_mounted"))
    ));
    out.push_str(&format!("privileges:       {}\n", s(field("privileges"))));
    if let Some(hooks) = report.get("hooks").and_then(|h| h.as_array()) {
        out.push_str("hooks:\n");
        for h in hooks {
            out.push_str(&format!("  {}\n", s(h.clone())));
        }
    }
    out.push_str(&format!("backend (auto):   {}\n", s(field("backend"))));
    out.push_str(&format!("why:              {}\n", s(field("reason"))));
    if report.get("stacks").is_some() {
        out.push_str(&format!("--stacks:         {}\n", s(field("stacks"))));
    }
    out
}

#[cfg(not(target_os = "linux"))]
mod platform {
    pub fn bench_floor() -> anyhow::Result<std::process::ExitCode> {
        anyhow::bail!("bench-floor needs Linux")
    }

    pub fn diagnose() -> serde_json::Value {
        serde_json::json!({
            "arch": std::env::consts::ARCH,
            "backend": "none",
            "reason": "kernelkite profiles Linux only; replay, summary, compare, tree, viewer and report work here",
        })
    }
}

#[cfg(target_os = "linux")]
mod platform {
    use serde_json::json;

    use super::*;
    use crate::source::ebpf::availability::Availability;
    use crate::source::ebpf::loader::{self, ProbeOptions};

    pub fn bench_floor() -> Result<ExitCode> {
        let probes = loader::load_floor()?;
        println!("attached {}", probes.hooks.join(", "));
        let mut sink = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)?;
        drop(probes);
        Ok(ExitCode::SUCCESS)
    }

    /// Probe the machine; when privileged, really load and attach the programs (and
    /// detach them again) so "would attach" is a fact, not a guess.
    pub fn diagnose() -> serde_json::Value {
        let a = Availability::probe();
        let privileges = if a.euid == 0 {
            "root".to_string()
        } else {
            format!(
                "euid {}, CAP_BPF {}, CAP_PERFMON {}, CAP_SYS_ADMIN {}",
                a.euid,
                yes(a.cap_bpf),
                yes(a.cap_perfmon),
                yes(a.cap_sys_admin)
            )
        };
        let (backend, reason, hooks) = match a.unavailable_reason() {
            Some(reason) => ("proc", format!("eBPF unavailable: {reason}"), Vec::new()),
            None => match loader::load(ProbeOptions::default()) {
                Ok(probes) => (
                    "ebpf",
                    format!(
                        "every hook attached in {:.0} ms (and was detached again)",
                        probes.attach_ms
                    ),
                    probes.hooks.clone(),
                ),
                Err(e) => ("proc", format!("eBPF unavailable: {e}"), Vec::new()),
            },
        };
        // `--stacks` adds a perf-event sampler and stack maps: try them on their own, so
        // a failure there does not hide a working backend.
        let stacks = if backend != "ebpf" {
            "no: the eBPF backend is unavailable".to_string()
        } else {
            let options = ProbeOptions {
                stacks: Some(loader::StackOptions {
                    min_block_ns: 1_000_000,
                    sample_hz: 99,
                }),
                ..ProbeOptions::default()
            };
            match loader::load(options) {
                Ok(probes) => format!("yes ({})", probes.hooks.last().map_or("", String::as_str)),
                Err(e) => format!("no: {e}"),
            }
        };
        json!({
            "kernel_release": a.kernel_release,
            "arch": std::env::consts::ARCH,
            "btf": if a.btf { "yes (/sys/kernel/btf/vmlinux)" } else { "no" },
            "tracefs_mounted": if a.tracefs_mounted {
                "yes"
            } else {
                "no (not needed: kernelkite uses BTF tracepoints)"
            },
            "privileges": privileges,
            "hooks": hooks,
            "backend": backend,
            "reason": reason,
            "stacks": stacks,
        })
    }

    fn yes(b: bool) -> &'static str {
        if b {
            "yes"
        } else {
            "no"
        }
    }
}
