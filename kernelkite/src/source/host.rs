//! Host constants recorded in every bundle.

use crate::model::HostConstants;

/// Read this machine's constants (tick rate, page size, CPUs, kernel release, arch).
pub fn current_host() -> HostConstants {
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
    }
}

fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
}
