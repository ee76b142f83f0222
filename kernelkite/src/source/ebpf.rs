//! eBPF collector.
