//! kernelkite's BPF programs: latency classes, syscall latency and process lifecycle
//! of a set of target threads, aggregated in the kernel.
//!
//! Every program first checks the target bitmap (an array-map load the verifier
//! inlines), so untargeted processes pay as little as possible. Kernel struct offsets
//! come from userspace, which reads them from the running kernel's BTF (`task` module).
#![no_std]
#![no_main]
// Atomic OR on the target bitmap (see maps::set_target); built with RUSTC_BOOTSTRAP=1.
#![feature(core_intrinsics)]
#![allow(
    internal_features,
    reason = "core_intrinsics gives the BPF atomic OR that core::sync lacks on bpfel"
)]
#![allow(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values go by reference: a copy by value would take BPF stack (512 bytes in all)"
)]

mod cgroup;
mod classic;
mod critical_path;
mod floor;
mod lifecycle;
mod maps;
mod sched;
mod stacks;
mod syscalls;
mod task;
mod wakers;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the verifier proves no panic path is reachable; a reachable one would be
    // rejected at load time rather than looping.
    unsafe { core::hint::unreachable_unchecked() }
}

/// License section. The kernel lets only GPL-compatible programs call some of the
/// helpers used here (bpf_probe_read_kernel, bpf_get_current_task); "Dual MIT/GPL" is
/// such a declaration, and keeps the MIT terms of the rest of kernelkite available.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
