//! `--cgroup`, `--container`: what the traced cgroup's own counters
//! (`Bundle::cgroup_samples`) moved by over the session: CPU time, bandwidth
//! throttling, and pressure stall time. Throttled time explains runqueue waits that
//! the processes' own accounting cannot: a throttled cgroup's runnable threads wait for
//! the next period, not for another task.

use schemars::JsonSchema;
use serde::Serialize;

use crate::model::{Bundle, CgroupSample};

/// The traced cgroup's counters, last reading minus first, in ns (the files give µs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CgroupTotals {
    /// Its path from the hierarchy's root, and its id.
    pub path: String,
    pub id: u64,
    /// Time from the first reading to the last.
    pub span_ns: u64,
    /// `cpu.stat` `usage_usec`.
    pub cpu_usage_ns: Option<u64>,
    /// Bandwidth periods, those throttled, and the time throttled (`cpu.stat`).
    pub cpu_periods: Option<u64>,
    pub cpu_throttled_periods: Option<u64>,
    pub cpu_throttled_ns: Option<u64>,
    /// Pressure stall time: some task of the cgroup stalled on the resource (`some`),
    /// all of its non-idle tasks did (`full`).
    pub cpu_some_ns: Option<u64>,
    pub cpu_full_ns: Option<u64>,
    pub io_some_ns: Option<u64>,
    pub io_full_ns: Option<u64>,
    pub memory_some_ns: Option<u64>,
    pub memory_full_ns: Option<u64>,
}

/// The totals, when a cgroup was traced and read at least once.
pub fn cgroup_totals(bundle: &Bundle) -> Option<CgroupTotals> {
    let traced = bundle.traced_cgroup.as_ref()?;
    let samples = &bundle.cgroup_samples;
    let (first, last) = (samples.first()?, samples.last()?);
    // Each counter from its first reading to its last: a file can appear late (the v1
    // cpu cgroup, found once a process is in it) or vanish (the cgroup removed).
    let moved = |f: fn(&CgroupSample) -> Option<u64>| {
        let mut values = samples.iter().filter_map(f);
        let first = values.next()?;
        Some(values.next_back().unwrap_or(first).saturating_sub(first))
    };
    let moved_ns = |f: fn(&CgroupSample) -> Option<u64>| moved(f).map(|us| us.saturating_mul(1000));
    Some(CgroupTotals {
        path: traced.path.clone(),
        id: traced.id,
        span_ns: last.t_ns.saturating_sub(first.t_ns),
        cpu_usage_ns: moved_ns(|s| s.cpu_usage_us),
        cpu_periods: moved(|s| s.cpu_periods),
        cpu_throttled_periods: moved(|s| s.cpu_throttled_periods),
        cpu_throttled_ns: moved_ns(|s| s.cpu_throttled_us),
        cpu_some_ns: moved_ns(|s| s.cpu_some_us),
        cpu_full_ns: moved_ns(|s| s.cpu_full_us),
        io_some_ns: moved_ns(|s| s.io_some_us),
        io_full_ns: moved_ns(|s| s.io_full_us),
        memory_some_ns: moved_ns(|s| s.memory_some_us),
        memory_full_ns: moved_ns(|s| s.memory_full_us),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::test_builders::host;
    use crate::model::{Backend, TracedCgroup};

    #[test]
    fn totals_are_the_last_reading_minus_the_first_in_ns() {
        let mut bundle = Bundle::new(Backend::Ebpf, host(), 100);
        assert_eq!(cgroup_totals(&bundle), None);
        bundle.traced_cgroup = Some(TracedCgroup {
            path: "/kk".into(),
            id: 9,
        });
        let sample = |t_ns, throttled, some| CgroupSample {
            t_ns,
            cpu_throttled_us: Some(throttled),
            cpu_some_us: Some(some),
            ..CgroupSample::default()
        };
        bundle.cgroup_samples = vec![sample(0, 100, 10), sample(5, 150, 10), sample(9, 400, 70)];
        let t = cgroup_totals(&bundle).unwrap();
        assert_eq!(t.span_ns, 9);
        assert_eq!(t.cpu_throttled_ns, Some(300_000));
        assert_eq!(t.cpu_some_ns, Some(60_000));
        assert_eq!(t.io_some_ns, None);
    }
}
