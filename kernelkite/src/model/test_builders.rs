//! Builders of small bundles for unit tests: a fixed host, a frame, a /proc bundle.

use super::{Backend, Bundle, Frame, HostConstants, ProcessSample};

/// An x86_64 host with 4 CPUs, 100 ticks a second and 4 KiB pages.
pub fn host() -> HostConstants {
    HostConstants {
        clock_ticks_per_sec: 100,
        page_size_bytes: 4096,
        num_cpus: 4,
        kernel_release: None,
        arch: "x86_64".into(),
        time_accounting: None,
    }
}

/// A frame at `t_ms` milliseconds holding `processes`.
pub fn frame(t_ms: u64, processes: Vec<ProcessSample>) -> Frame {
    Frame {
        t_ns: t_ms * 1_000_000,
        processes,
        network: None,
        host_steal_ticks: None,
    }
}

/// A /proc bundle of [`host`] sampled every 100 ms, with `frames`.
pub fn bundle(frames: Vec<Frame>) -> Bundle {
    let mut b = Bundle::new(Backend::Proc, host(), 100);
    b.frames = frames;
    b
}
