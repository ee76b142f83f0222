//! JSON Schemas of the bundle types the analysis embeds (`export --format json`, its
//! schema in docs/export.schema.json). The bundle model itself carries no schema
//! derive; these mirror its serialized shape and the export's drift test keeps them
//! true.

use schemars::JsonSchema;

/// Nanoseconds per latency class (`model::ClassTimes`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code, reason = "a schema only: never constructed")]
pub struct ClassTimes {
    pub on_cpu: u64,
    pub runqueue: u64,
    pub io_wait: u64,
    pub lock_wait: u64,
    pub syscall_blocked: u64,
    pub unknown_wait: u64,
    /// Current on a CPU but not run: hypervisor steal, irq time (0 where the
    /// kernel's runtime cannot be read: classic tracepoints, /proc).
    pub steal: u64,
}

/// How the kernel accounted time (`model::TimeAccounting`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code, reason = "a schema only: never constructed")]
pub struct TimeAccounting {
    /// Where on_cpu came from: `sum_exec_runtime` (tp_btf hooks: the kernel's
    /// accounted runtime), `clock` (classic tracepoints: switch to switch, steal and
    /// irq time included), `schedstat` (/proc sampler: the kernel's runtime).
    pub on_cpu_source: OnCpuSource,
    /// `CONFIG_PARAVIRT_TIME_ACCOUNTING` (null: no kernel config readable).
    pub steal_accounted: Option<bool>,
    /// `CONFIG_IRQ_TIME_ACCOUNTING` (null: no kernel config readable).
    pub irq_time_accounted: Option<bool>,
    /// `kernel.task_delayacct` at the session's start.
    pub delay_accounting: Option<bool>,
    /// The config file the answers came from.
    pub kernel_config: Option<String>,
}

/// The source of on_cpu (`model::OnCpuSource`).
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema only: never constructed")]
pub enum OnCpuSource {
    SumExecRuntime,
    Clock,
    Schedstat,
}

/// The frame cap (`model::FrameCap`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code, reason = "a schema only: never constructed")]
pub struct FrameCap {
    pub max_frames: u64,
    pub frames_dropped: u64,
}

/// The collector (`model::Backend`).
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, reason = "a schema only: never constructed")]
pub enum Backend {
    Proc,
    Ebpf,
}
