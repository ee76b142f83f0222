//! Resource limits kernelkite lifts for itself, and the originals the command `run`
//! launches gets back (it must not inherit an unlimited RLIMIT_MEMLOCK).

use std::sync::OnceLock;

/// RLIMIT_MEMLOCK as it was before [`raise_memlock_limit`] first changed it.
static MEMLOCK_BEFORE_RAISE: OnceLock<libc::rlimit> = OnceLock::new();

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; lift it (best effort: to
/// unlimited with CAP_SYS_RESOURCE, else the soft limit to the hard one), remembering
/// the limit it replaces.
pub fn raise_memlock_limit() {
    // SAFETY: getrlimit fills the local struct.
    let mut before: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut before) } != 0 {
        return;
    }
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    let to_hard = libc::rlimit {
        rlim_cur: before.rlim_max,
        rlim_max: before.rlim_max,
    };
    // SAFETY: setrlimit reads the struct we pass; failure is harmless here.
    let raised = unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) == 0
            || libc::setrlimit(libc::RLIMIT_MEMLOCK, &to_hard) == 0
    };
    if raised {
        MEMLOCK_BEFORE_RAISE.get_or_init(|| before);
    }
}

/// The RLIMIT_MEMLOCK to give back to a launched command, if kernelkite raised its own.
pub fn memlock_before_raise() -> Option<libc::rlimit> {
    MEMLOCK_BEFORE_RAISE.get().copied()
}
