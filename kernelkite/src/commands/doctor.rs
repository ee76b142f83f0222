//! `kernelkite doctor`: which backend would be used here, and why.

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{BenchFloorArgs, DoctorArgs};

pub fn execute(args: &DoctorArgs) -> Result<ExitCode> {
    let report = platform::diagnose();
    let text = if args.json {
        crate::report::json_text(&json_document(report))
    } else {
        render_text(&report)
    };
    crate::report::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `doctor --json`: the diagnosis with the `schema_version` and `kind` every `--json`
/// document starts with (docs/JSON.md).
fn json_document(report: serde_json::Value) -> serde_json::Value {
    let mut doc = serde_json::Map::new();
    doc.insert("schema_version".into(), 1.into());
    doc.insert("kind".into(), "doctor".into());
    if let serde_json::Value::Object(fields) = report {
        doc.extend(fields);
    }
    serde_json::Value::Object(doc)
}

/// `kernelkite bench-floor` (hidden): attach the empty syscall programs the overhead
/// benchmark measures as its floor, say so, and hold them until stdin closes.
pub fn bench_floor(args: &BenchFloorArgs) -> Result<ExitCode> {
    platform::bench_floor(args)
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
    if let Some(notes) = report.get("notes").and_then(|h| h.as_array()) {
        for n in notes {
            out.push_str(&format!("note:             {}\n", s(n.clone())));
        }
    }
    out.push_str(&format!("backend (auto):   {}\n", s(field("backend"))));
    out.push_str(&format!("why:              {}\n", s(field("reason"))));
    if report.get("stacks").is_some() {
        out.push_str(&format!("--stacks:         {}\n", s(field("stacks"))));
    }
    if let Some(t) = report.get("time_accounting") {
        let part = |k: &str| s(t.get(k).cloned().unwrap_or(serde_json::Value::Null));
        out.push_str(&format!("on_cpu source:    {}\n", part("on_cpu")));
        out.push_str(&format!("steal time:       {}\n", part("steal")));
        out.push_str(&format!("irq time:         {}\n", part("irq")));
        out.push_str(&format!("delay accounting: {}\n", part("delayacct")));
    }
    out
}

#[cfg(not(target_os = "linux"))]
mod platform {
    pub fn bench_floor(_: &crate::cli::BenchFloorArgs) -> anyhow::Result<std::process::ExitCode> {
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
    use anyhow::Context;
    use kernelkite_common::bpf::map_names;
    use serde_json::json;

    use super::*;
    use crate::model::OnCpuSource;
    use crate::source::ebpf::availability::Availability;
    use crate::source::ebpf::loader::{self, ProbeOptions};

    pub fn bench_floor(args: &BenchFloorArgs) -> Result<ExitCode> {
        let mut probes =
            loader::load_floor(match (args.clock, args.bit, args.sched, args.wakers) {
                (true, ..) => loader::Floor::Clock,
                (_, true, ..) => loader::Floor::Bit,
                (_, _, true, _) => loader::Floor::Sched,
                (.., true) => loader::Floor::Wakers,
                _ => loader::Floor::Empty,
            })?;
        if let Some(pid) = args.pid {
            let mut targets: aya::maps::Array<&mut aya::maps::MapData, u64> = probes
                .ebpf
                .map_mut(map_names::TARGETS)
                .context("TARGETS missing from the object")?
                .try_into()?;
            use kernelkite_common::bpf::targets::{bit, word};
            targets.set(word(pid), bit(pid), 0)?;
        }
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
        let (backend, reason, hooks, notes, on_cpu) = match a.unavailable_reason() {
            Some(reason) => (
                "proc",
                format!("eBPF unavailable: {reason}"),
                Vec::new(),
                Vec::new(),
                OnCpuSource::Schedstat,
            ),
            // The syscall hooks too (a session attaches them after the targets' bits).
            None => match loader::load(ProbeOptions::default())
                .and_then(|mut p| p.attach_deferred().map(|()| p))
            {
                Ok(probes) => (
                    "ebpf",
                    format!(
                        "every hook attached in {:.0} ms (and was detached again)",
                        probes.attach_ms
                    ),
                    probes.hooks.clone(),
                    probes.notes.clone(),
                    probes.on_cpu_source,
                ),
                Err(e) => (
                    "proc",
                    format!("eBPF unavailable: {e}"),
                    Vec::new(),
                    Vec::new(),
                    OnCpuSource::Schedstat,
                ),
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
            "time_accounting": super::time_accounting::probe(on_cpu),
            "kernel_release": a.kernel_release,
            "arch": std::env::consts::ARCH,
            "btf": if a.btf { "yes (/sys/kernel/btf/vmlinux)" } else { "no" },
            "tracefs_mounted": if a.tracefs_mounted {
                "yes"
            } else if a.btf {
                "no (not needed with kernel BTF: kernelkite uses BTF tracepoints)"
            } else {
                "no (kernelkite mounts it for classic tracepoints)"
            },
            "privileges": privileges,
            "hooks": hooks,
            "notes": notes,
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

/// How this kernel accounts a thread's CPU time: what on_cpu (the kernel's runtime)
/// leaves out and the steal class measures.
mod time_accounting {
    use serde_json::json;

    use crate::model::OnCpuSource;
    use crate::source::host::{config_value, kernel_config};

    /// What the source of on_cpu means, in words.
    pub fn on_cpu_text(source: OnCpuSource) -> String {
        match source {
            OnCpuSource::SumExecRuntime => "sum_exec_runtime: the kernel's accounted runtime (tp_btf hooks read task->se.sum_exec_runtime at each switch), what rusage and schedstat report".to_string(),
            OnCpuSource::Clock => "clock: switch-in to switch-out by bpf_ktime_get_ns (classic tracepoints cannot read task_struct), steal and irq time included; steal is not measured".to_string(),
            OnCpuSource::Schedstat => "schedstat: /proc/<pid>/task/<tid>/schedstat field 1, the kernel's accounted runtime (the /proc sampler)".to_string(),
        }
    }

    pub fn probe(on_cpu: OnCpuSource) -> serde_json::Value {
        let config = kernel_config();
        let from_config = |key: &str| {
            config.as_ref().and_then(|(path, text)| {
                config_value(text, key).map(|v| format!("CONFIG_{key}={v} ({path})"))
            })
        };
        let steal_now = || {
            std::fs::read("/proc/stat")
                .ok()
                .and_then(|s| crate::source::procfs::parse::stat_steal_ticks(&s))
        };
        let before = steal_now();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let moving = matches!((before, steal_now()), (Some(a), Some(b)) if b > a);
        let steal = match (from_config("PARAVIRT_TIME_ACCOUNTING"), moving) {
            (Some(c), true) => format!("accounted ({c}): /proc/stat's steal column moves; on_cpu leaves it out, the steal class measures it per thread"),
            (None, true) => "accounted: /proc/stat's steal column moves; on_cpu leaves it out, the steal class measures it per thread".to_string(),
            (Some(c), false) => format!("{c}; no steal seen in /proc/stat over 200 ms"),
            (None, false) => "no steal seen in /proc/stat over 200 ms (none now, or not accounted)".to_string(),
        };
        let irq = from_config("IRQ_TIME_ACCOUNTING").map_or_else(
            || {
                "unknown (no kernel config in /proc/config.gz or /boot); where accounted, it is in steal, not on_cpu"
                    .to_string()
            },
            |c| format!("{c}; where set, irq time is in steal, not on_cpu"),
        );
        let delayacct = match std::fs::read_to_string("/proc/sys/kernel/task_delayacct") {
            Ok(v) if v.trim() == "1" => "on (kernel.task_delayacct=1)".to_string(),
            Ok(_) => "off (kernel.task_delayacct=0; `sysctl kernel.task_delayacct=1` turns it on)"
                .to_string(),
            Err(_) => "unknown (no kernel.task_delayacct)".to_string(),
        };
        json!({
            "on_cpu_source": on_cpu.name(),
            "on_cpu": on_cpu_text(on_cpu),
            "steal": steal,
            "irq": irq,
            "delayacct": delayacct,
        })
    }
}
