//! `--cgroup`, `--container`: the traced cgroup's own counters, read once per frame.
//!
//! From the cgroup v2 directory: `cpu.stat` (CPU time; with the cpu controller enabled
//! there, its bandwidth throttling) and the pressure stall totals of `cpu.pressure`,
//! `io.pressure` and `memory.pressure`. On a hybrid host whose cpu controller is bound to
//! cgroup v1 (this project's test machine), `cpu.max` does not exist in v2 and the
//! throttling counters come from the v1 cpu controller's `cpu.stat` of the cgroup the
//! traced processes are in there (found from /proc/PID/cgroup).

use std::path::{Path, PathBuf};

use crate::model::CgroupSample;
use crate::source::cgroups::mounts_of_type;

/// What one counter file may hold; they are a few hundred bytes.
const MAX_FILE_BYTES: u64 = 16 << 10;

/// Reads a cgroup's counters.
#[derive(Debug)]
pub struct CgroupCounters {
    /// The traced cgroup's v2 directory.
    v2_dir: PathBuf,
    /// Where the v1 cpu controller is mounted, when the v2 cgroup has no cpu controller
    /// (no `cpu.max`) and v1 has one: read once, from `mountinfo`, at the start.
    v1_cpu_mount: Option<PathBuf>,
    /// The v1 cpu controller's directory of the traced processes, once found.
    v1_cpu_dir: Option<PathBuf>,
}

impl CgroupCounters {
    /// The counters of `v2_dir`; `mountinfo` is /proc/self/mountinfo's text.
    pub fn new(v2_dir: &Path, mountinfo: &str) -> CgroupCounters {
        let v1_cpu_mount = (!v2_dir.join("cpu.max").exists())
            .then(|| v1_controller_mount(mountinfo, "cpu"))
            .flatten();
        CgroupCounters {
            v2_dir: v2_dir.to_path_buf(),
            v1_cpu_mount,
            v1_cpu_dir: None,
        }
    }

    /// Whether the throttling counters are still to be found in v1.
    pub fn wants_v1_cpu(&self) -> bool {
        self.v1_cpu_mount.is_some() && self.v1_cpu_dir.is_none()
    }

    /// The v1 cpu cgroup of `pid`, for the throttling counters, while
    /// [`CgroupCounters::wants_v1_cpu`]; `proc_root` is /proc.
    pub fn find_v1_cpu(&mut self, proc_root: &Path, pid: i32) {
        let Some(mount) = self
            .v1_cpu_mount
            .as_deref()
            .filter(|_| self.v1_cpu_dir.is_none())
        else {
            return;
        };
        let Some(text) = read_small(&proc_root.join(pid.to_string()).join("cgroup")) else {
            return;
        };
        // The root of the v1 hierarchy has no bandwidth limit: nothing to read there.
        let Some(path) = v1_controller_path(&text, "cpu").filter(|p| p != "/") else {
            return;
        };
        let Some(dir) = crate::source::cgroups::below(mount, &path) else {
            return;
        };
        if dir.join("cpu.stat").is_file() {
            self.v1_cpu_dir = Some(dir);
        }
    }

    /// One reading at `t_ns`; a file that is missing (the cgroup removed, a controller
    /// not enabled) leaves its fields absent.
    pub fn sample(&self, t_ns: u64) -> CgroupSample {
        let mut s = CgroupSample {
            t_ns,
            ..CgroupSample::default()
        };
        if let Some(text) = read_small(&self.v2_dir.join("cpu.stat")) {
            let value = |key: &str| keyed_value(&text, key);
            s.cpu_usage_us = value("usage_usec");
            s.cpu_user_us = value("user_usec");
            s.cpu_system_us = value("system_usec");
            s.cpu_periods = value("nr_periods");
            s.cpu_throttled_periods = value("nr_throttled");
            s.cpu_throttled_us = value("throttled_usec");
        }
        if let Some(text) = (self.v1_cpu_dir.as_ref()).and_then(|d| read_small(&d.join("cpu.stat")))
        {
            let value = |key: &str| keyed_value(&text, key);
            s.cpu_periods = s.cpu_periods.or(value("nr_periods"));
            s.cpu_throttled_periods = s.cpu_throttled_periods.or(value("nr_throttled"));
            s.cpu_throttled_us =
                (s.cpu_throttled_us).or(value("throttled_time").map(|ns| ns / 1000));
        }
        let pressure = |name: &str| {
            read_small(&self.v2_dir.join(name)).map_or((None, None), |t| pressure_totals(&t))
        };
        (s.cpu_some_us, s.cpu_full_us) = pressure("cpu.pressure");
        (s.io_some_us, s.io_full_us) = pressure("io.pressure");
        (s.memory_some_us, s.memory_full_us) = pressure("memory.pressure");
        s
    }
}

fn read_small(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_FILE_BYTES), &mut text)
        .ok()?;
    Some(text)
}

/// `key value` lines (cpu.stat).
pub(crate) fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A pressure file's `some` and `full` `total=` values (µs).
pub(crate) fn pressure_totals(text: &str) -> (Option<u64>, Option<u64>) {
    let total = |kind: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(kind))
            .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("total=")))
            .and_then(|v| v.parse().ok())
    };
    (total("some"), total("full"))
}

/// The mount point of the v1 hierarchy that holds `controller` (its super options
/// list it), from a mountinfo text.
fn v1_controller_mount(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    mounts_of_type(mountinfo, "cgroup")
        .find(|(_, options)| options.split(',').any(|o| o == controller))
        .map(|(mount, _)| mount)
}

/// The path of the v1 hierarchy holding `controller` in a /proc/PID/cgroup text
/// (`4:cpu,cpuacct:/x`).
fn v1_controller_path(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let _id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_and_cpu_stat_parse() {
        let text = "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=789\n";
        assert_eq!(pressure_totals(text), (Some(123_456), Some(789)));
        // cpu.pressure of the root cgroup before 5.13 had no full line.
        assert_eq!(
            pressure_totals("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"),
            (Some(5), None)
        );
        let stat = "usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 7\nnr_throttled 3\nthrottled_usec 900\n";
        assert_eq!(keyed_value(stat, "nr_throttled"), Some(3));
        assert_eq!(keyed_value(stat, "throttled_usec"), Some(900));
        assert_eq!(keyed_value(stat, "missing"), None);
    }

    #[test]
    fn the_v1_cpu_controller_is_found_in_mountinfo_and_proc_cgroup() {
        let mountinfo = "\
35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
36 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct
37 25 0:32 / /sys/fs/cgroup/cpu\\040set rw shared:12 - cgroup cgroup rw,cpuset
";
        assert_eq!(
            v1_controller_mount(mountinfo, "cpu"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(
            v1_controller_mount(mountinfo, "cpuset"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu set"))
        );
        assert_eq!(v1_controller_mount(mountinfo, "memory"), None);
        let cgroup = "9:name=systemd:/\n2:cpu,cpuacct:/kk/test\n0::/kk.slice\n";
        assert_eq!(v1_controller_path(cgroup, "cpu"), Some("/kk/test".into()));
        assert_eq!(v1_controller_path("0::/\n", "cpu"), None);
    }
}
