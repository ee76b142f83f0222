//! Host constants recorded in every bundle.

use crate::model::{HostConstants, OnCpuSource, TimeAccounting};

/// Read this machine's constants (tick rate, page size, CPUs, kernel release, arch),
/// and how its kernel accounts time for a session whose on_cpu comes from `on_cpu`.
pub fn current_host(on_cpu: OnCpuSource) -> HostConstants {
    #[cfg(unix)]
    let (ticks, page, cpus) = {
        // SAFETY: sysconf has no memory-safety preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        (ticks.max(1) as u64, page.max(1) as u64, cpus.max(1) as u32)
    };
    #[cfg(not(unix))]
    let (ticks, page, cpus) = (100, 4096, 1);
    HostConstants {
        clock_ticks_per_sec: ticks,
        page_size_bytes: page,
        num_cpus: cpus,
        kernel_release: kernel_release(),
        arch: std::env::consts::ARCH.to_string(),
        time_accounting: Some(time_accounting(on_cpu)),
    }
}

fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
}

/// What this kernel leaves out of a task's runtime, from its config, and whether delay
/// accounting is on.
pub fn time_accounting(on_cpu_source: OnCpuSource) -> TimeAccounting {
    let config = kernel_config();
    let set = |key: &str| {
        config
            .as_ref()
            .map(|(_, text)| config_value(text, key).is_some_and(|v| v == "y"))
    };
    TimeAccounting {
        on_cpu_source,
        steal_accounted: set("PARAVIRT_TIME_ACCOUNTING"),
        irq_time_accounted: set("IRQ_TIME_ACCOUNTING"),
        delay_accounting: std::fs::read_to_string("/proc/sys/kernel/task_delayacct")
            .ok()
            .map(|v| v.trim() == "1"),
        kernel_config: config.map(|(path, _)| path),
    }
}

/// The running kernel's config: `/proc/config.gz` (`CONFIG_IKCONFIG_PROC`), else
/// `/boot/config-<release>`; with the path it came from.
pub fn kernel_config() -> Option<(String, String)> {
    // A config is about 300 KB; more than this is not one.
    const MAX_CONFIG_BYTES: usize = 4 << 20;
    if let Some(text) = std::fs::read("/proc/config.gz")
        .ok()
        .and_then(|gz| gunzip(&gz, MAX_CONFIG_BYTES))
        .and_then(|raw| String::from_utf8(raw).ok())
    {
        return Some(("/proc/config.gz".to_string(), text));
    }
    let path = format!("/boot/config-{}", kernel_release()?);
    let text = std::fs::read(&path).ok()?;
    (text.len() <= MAX_CONFIG_BYTES)
        .then(|| String::from_utf8(text).ok())
        .flatten()
        .map(|t| (path, t))
}

/// `CONFIG_<key>` in a kernel config text: `Some("y")`, or `Some("n")` for
/// `# CONFIG_<key> is not set`, None when absent.
pub fn config_value<'a>(config: &'a str, key: &str) -> Option<&'a str> {
    let set = format!("CONFIG_{key}=");
    let unset = format!("# CONFIG_{key} is not set");
    config.lines().find_map(|l| {
        if let Some(v) = l.strip_prefix(&set) {
            Some(v)
        } else if l == unset {
            Some("n")
        } else {
            None
        }
    })
}

/// The content of a gzip member (RFC 1952), at most `limit` bytes; None when it is not
/// one or inflates past the limit.
fn gunzip(gz: &[u8], limit: usize) -> Option<Vec<u8>> {
    const FHCRC: u8 = 2;
    const FEXTRA: u8 = 4;
    const FNAME: u8 = 8;
    const FCOMMENT: u8 = 16;
    if gz.len() < 18 || gz[0..3] != [0x1f, 0x8b, 8] {
        return None;
    }
    let flags = gz[3];
    let mut at = 10;
    if flags & FEXTRA != 0 {
        let len = u16::from_le_bytes([*gz.get(at)?, *gz.get(at + 1)?]) as usize;
        at += 2 + len;
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            at += gz.get(at..)?.iter().position(|&b| b == 0)? + 1;
        }
    }
    if flags & FHCRC != 0 {
        at += 2;
    }
    miniz_oxide::inflate::decompress_to_vec_with_limit(gz.get(at..)?, limit).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_parse() {
        let config = "CONFIG_PARAVIRT_TIME_ACCOUNTING=y\n# CONFIG_IRQ_TIME_ACCOUNTING is not set\n";
        assert_eq!(config_value(config, "PARAVIRT_TIME_ACCOUNTING"), Some("y"));
        assert_eq!(config_value(config, "IRQ_TIME_ACCOUNTING"), Some("n"));
        assert_eq!(config_value(config, "SCHEDSTATS"), None);
    }

    #[test]
    fn gunzip_reads_a_member_with_a_name_and_refuses_other_bytes() {
        let text = b"CONFIG_A=y\n".repeat(1000);
        let deflated = miniz_oxide::deflate::compress_to_vec(&text, 6);
        // gzip header with FNAME ("config\0"), the deflate stream, CRC32 and ISIZE (not
        // checked by gunzip).
        let mut gz = vec![0x1f, 0x8b, 8, 8, 0, 0, 0, 0, 0, 3];
        gz.extend_from_slice(b"config\0");
        gz.extend_from_slice(&deflated);
        gz.extend_from_slice(&[0; 8]);
        assert_eq!(gunzip(&gz, 1 << 20).as_deref(), Some(&text[..]));
        assert_eq!(gunzip(&gz, 100), None, "past the limit");
        assert_eq!(gunzip(b"CONFIG_A=y\nCONFIG_B=y\n", 1 << 20), None);
        assert_eq!(gunzip(&gz[..12], 1 << 20), None);
    }

    /// This machine's config, when it has one, answers the questions the bundle
    /// records (every kernel config names PARAVIRT_TIME_ACCOUNTING where the
    /// architecture has it, set or not).
    #[test]
    fn this_kernel_config_is_read_when_present() {
        let Some((path, text)) = kernel_config() else {
            return;
        };
        assert!(text.contains("CONFIG_"), "{path}");
        let ta = time_accounting(OnCpuSource::Schedstat);
        assert_eq!(ta.kernel_config.as_deref(), Some(path.as_str()));
        assert!(ta.steal_accounted.is_some() && ta.irq_time_accounted.is_some());
    }
}
