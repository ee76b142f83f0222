//! Can the eBPF backend run here, and if not, why? Used by `doctor`, by `--backend auto`
//! (to fall back to /proc with one line saying why) and by `--backend ebpf` (to fail
//! with that reason).

use std::path::Path;

use super::loader::KERNEL_BTF_PATH;

const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const CAP_SYS_ADMIN: u32 = 21;

/// What this machine offers the eBPF backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Availability {
    pub kernel_release: Option<String>,
    pub btf: bool,
    pub tracefs_mounted: bool,
    pub euid: u32,
    pub cap_bpf: bool,
    pub cap_perfmon: bool,
    pub cap_sys_admin: bool,
}

impl Availability {
    /// Probe this machine (reads /proc and /sys only; loads nothing).
    pub fn probe() -> Availability {
        let caps = effective_caps().unwrap_or(0);
        let has = |cap: u32| caps & (1u64 << cap) != 0;
        Availability {
            kernel_release: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string()),
            btf: Path::new(KERNEL_BTF_PATH).exists(),
            // /proc/self/mounts, not the directory: tracefs is root-only to list.
            tracefs_mounted: std::fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
                m.lines()
                    .any(|l| l.split_whitespace().nth(2) == Some("tracefs"))
            }),
            // SAFETY: geteuid cannot fail.
            euid: unsafe { libc::geteuid() },
            cap_bpf: has(CAP_BPF),
            cap_perfmon: has(CAP_PERFMON),
            cap_sys_admin: has(CAP_SYS_ADMIN),
        }
    }

    /// Enough privilege to load tracing programs: root, CAP_SYS_ADMIN, or CAP_BPF with
    /// CAP_PERFMON.
    pub fn privileged(&self) -> bool {
        self.euid == 0 || self.cap_sys_admin || (self.cap_bpf && self.cap_perfmon)
    }

    /// `None` when eBPF should work; otherwise the reason it cannot, in one line.
    pub fn unavailable_reason(&self) -> Option<String> {
        if !self.privileged() {
            return Some(format!(
                "not privileged (euid {}; needs root, or CAP_BPF and CAP_PERFMON)",
                self.euid
            ));
        }
        // Without BTF the programs attach as classic tracepoints (loader::HookKind).
        None
    }
}

/// CapEff from /proc/self/status.
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}
