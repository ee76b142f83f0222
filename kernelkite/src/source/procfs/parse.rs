//! From /proc file contents to model types. The `procfs` crate does the parsing; this
//! module only maps its types onto the bundle's (and parses the one file it lacks,
//! `/proc/<pid>/task/<tid>/syscall`).

use procfs::net::InterfaceDeviceStatus;
use procfs::process::{Io, Schedstat as ProcSchedstat, Stat};
use procfs::{FromBufRead, FromRead};

use crate::model::{IoCounters, NetDevCounters, Schedstat};

/// `PF_KTHREAD` in /proc/<pid>/stat field 9 (flags).
const PF_KTHREAD: u32 = 0x0020_0000;
/// kthreadd: the parent of every kernel thread.
const KTHREADD_PID: i32 = 2;

/// The /proc/<pid>/stat fields a sample records: a compact copy of procfs's `Stat`,
/// which the sampler keeps for every process between ticks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StatFields {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
    pub state: char,
    /// PF_KTHREAD set, or kthreadd or one of its children.
    pub kernel_thread: bool,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub cutime_ticks: u64,
    pub cstime_ticks: u64,
    pub num_threads: u64,
    pub start_time_ticks: u64,
    pub rss_pages: u64,
}

pub(crate) fn stat(bytes: &[u8]) -> Option<StatFields> {
    if !stat_shape_ok(bytes) {
        return None;
    }
    let s = Stat::from_read(bytes).ok()?;
    Some(StatFields {
        kernel_thread: s.flags & PF_KTHREAD != 0 || s.pid == KTHREADD_PID || s.ppid == KTHREADD_PID,
        pid: s.pid,
        ppid: s.ppid,
        comm: s.comm,
        state: s.state,
        utime_ticks: s.utime,
        stime_ticks: s.stime,
        cutime_ticks: non_negative(s.cutime),
        cstime_ticks: non_negative(s.cstime),
        num_threads: non_negative(s.num_threads),
        start_time_ticks: s.starttime,
        rss_pages: s.rss,
    })
}

pub(crate) fn io(bytes: &[u8]) -> Option<IoCounters> {
    // The kernel writes this file in ASCII; procfs cuts each field's last byte (the
    // ':') by index and panics inside a multi-byte character (found by fuzzing).
    if !bytes.is_ascii() {
        return None;
    }
    // A byte slice is already a BufRead: no BufReader (and its 8 KiB buffer) needed.
    let io = Io::from_buf_read(bytes).ok()?;
    Some(IoCounters {
        rchar_bytes: io.rchar,
        wchar_bytes: io.wchar,
        read_syscalls: io.syscr,
        write_syscalls: io.syscw,
        read_bytes: io.read_bytes,
        write_bytes: io.write_bytes,
        cancelled_write_bytes: io.cancelled_write_bytes,
    })
}

pub(crate) fn schedstat(bytes: &[u8]) -> Option<Schedstat> {
    let s = ProcSchedstat::from_read(bytes).ok()?;
    Some(Schedstat {
        on_cpu_ns: s.sum_exec_runtime,
        runqueue_ns: s.run_delay,
        timeslices: s.pcount,
    })
}

/// The first field of /proc/<pid>/task/<tid>/syscall: the syscall number the thread is
/// blocked in, or -1 when it is blocked outside a syscall; "running" (and anything else)
/// is `None`.
pub(crate) fn syscall_nr(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.split_ascii_whitespace().next()?.parse().ok()
}

/// The /proc/<tid>/status fields an exit stop records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StatusFields {
    pub tgid: Option<i32>,
    pub ppid: Option<i32>,
    pub peak_rss_kib: Option<u64>,
    pub voluntary_switches: Option<u64>,
    pub involuntary_switches: Option<u64>,
}

/// /proc/<pid>/status `NSpid`: the pid in each pid namespace, the reader's first (at
/// most 32 levels, the kernel's limit); empty when the line is missing.
pub(crate) fn ns_pids(bytes: &[u8]) -> Vec<i32> {
    let Some(line) = (bytes.split(|b| *b == b'\n')).find_map(|l| l.strip_prefix(b"NSpid:")) else {
        return Vec::new();
    };
    (std::str::from_utf8(line)
        .unwrap_or("")
        .split_ascii_whitespace())
    .take(32)
    .map_while(|v| v.parse::<i32>().ok())
    .collect()
}

/// /proc/<tid>/status: `Name:\tvalue` lines; a line that does not parse is skipped.
pub(crate) fn status(bytes: &[u8]) -> StatusFields {
    let mut f = StatusFields::default();
    for line in bytes.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let value = std::str::from_utf8(&line[colon + 1..]).unwrap_or("");
        // VmHWM's value ends in " kB".
        let number = || value.split_ascii_whitespace().next()?.parse::<u64>().ok();
        match &line[..colon] {
            b"Tgid" => f.tgid = number().and_then(|v| i32::try_from(v).ok()),
            b"PPid" => f.ppid = number().and_then(|v| i32::try_from(v).ok()),
            b"VmHWM" => f.peak_rss_kib = number(),
            b"voluntary_ctxt_switches" => f.voluntary_switches = number(),
            b"nonvoluntary_ctxt_switches" => f.involuntary_switches = number(),
            _ => {}
        }
    }
    f
}

/// /proc/net/dev rows, sorted by interface.
/// /proc/stat: the host-wide steal ticks (the 8th value of the `cpu` line).
pub fn stat_steal_ticks(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

pub(crate) fn net_dev(bytes: &[u8]) -> Option<Vec<NetDevCounters>> {
    let InterfaceDeviceStatus(map) = InterfaceDeviceStatus::from_read(bytes).ok()?;
    let mut rows: Vec<NetDevCounters> = map
        .into_values()
        .map(|d| NetDevCounters {
            interface: d.name,
            rx_bytes: d.recv_bytes,
            rx_packets: d.recv_packets,
            tx_bytes: d.sent_bytes,
            tx_packets: d.sent_packets,
        })
        .collect();
    rows.sort_by(|a, b| a.interface.cmp(&b.interface));
    Some(rows)
}

/// Whether a stat file has the kernel's `PID (COMM) STATE ...` shape around comm's
/// parentheses. procfs's parser slices the text at the first '(' and the last ')'
/// without checking, and panics otherwise (a ')' before the '(' or followed by a
/// multi-byte character; found by the procfs_parsers fuzz target).
fn stat_shape_ok(bytes: &[u8]) -> bool {
    // The positions procfs uses: in the lossily decoded, trimmed text.
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim().as_bytes();
    let (Some(open), Some(close)) = (
        text.iter().position(|&b| b == b'('),
        text.iter().rposition(|&b| b == b')'),
    ) else {
        return false;
    };
    open >= 2 && text[open - 1] == b' ' && open < close && text.get(close + 1) == Some(&b' ')
}

/// Counters the kernel prints as signed (`cutime`, `num_threads`) are never negative;
/// clamp instead of wrapping if a synthetic file says otherwise.
fn non_negative(v: i64) -> u64 {
    v.max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_of_an_exiting_thread() {
        let text = b"Name:\tcc1\nTgid:\t4242\nPid:\t4243\nVmHWM:\t   10240 kB\n\
            voluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t3\n";
        let f = status(text);
        assert_eq!(f.tgid, Some(4242));
        assert_eq!(f.peak_rss_kib, Some(10240));
        assert_eq!(
            (f.voluntary_switches, f.involuntary_switches),
            (Some(7), Some(3))
        );
        // A kernel thread has no VmHWM; garbage gives nothing, never a panic.
        assert_eq!(status(b"Tgid:\tx\n\xff:\n").tgid, None);
    }

    #[test]
    fn syscall_first_field() {
        assert_eq!(
            syscall_nr(b"0 0x3 0x7ffd 0x1 0x0 0x0 0x0 0x7ffd 0x7f00\n"),
            Some(0)
        );
        assert_eq!(syscall_nr(b"230 0x1 0x0\n"), Some(230));
        assert_eq!(syscall_nr(b"-1 0x7ffc 0x401000\n"), Some(-1));
        assert_eq!(syscall_nr(b"running\n"), None);
        assert_eq!(syscall_nr(b""), None);
    }

    #[test]
    fn stat_of_the_kernel_shape_parses_and_a_misshapen_one_is_refused() {
        let good = b"4242 (kk (work)) S 1 4242 4242 34816 4242 4194304 120 0 0 0 15 3 0 0 20 0 3 0 987654 12345678 456 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        let s = stat(good).unwrap();
        assert_eq!((s.pid, s.comm.as_str(), s.state), (4242, "kk (work)", 'S'));
        // The fuzzer's crash: the last ')' is followed by a multi-byte character (and a
        // '(' only after it); procfs sliced inside the character and panicked.
        let crash = include_bytes!(
            "../../../../fuzz/corpus/procfs_parsers/regression-paren-before-multibyte"
        );
        assert_eq!(stat(crash), None);
        for bad in [
            &b"(x) S 1"[..],
            b"1 x) S (1",
            b"1 (x)S 1",
            b"1 (x)\xff 1",
            b"1 (x)",
            b"",
        ] {
            assert_eq!(stat(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn io_with_a_non_ascii_field_is_refused() {
        let good = b"rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 5\nwrite_bytes: 6\ncancelled_write_bytes: 7\n";
        assert_eq!(io(good).unwrap().cancelled_write_bytes, 7);
        let crash =
            include_bytes!("../../../../fuzz/corpus/procfs_parsers/regression-io-multibyte-field");
        assert_eq!(io(crash), None);
    }

    #[test]
    fn stat_steal_is_the_eighth_value_of_the_cpu_line() {
        let stat = b"cpu  4705 356 584 3699 23 23 0 7 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(stat_steal_ticks(stat), Some(7));
        assert_eq!(stat_steal_ticks(b"intr 1\n"), None);
        assert_eq!(stat_steal_ticks(b"cpu  1 2 3\n"), None);
    }

    #[test]
    fn net_dev_sorted_by_interface() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n\
  wlan0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n\
    lo: 300 3 0 0 0 0 0 0 300 3 0 0 0 0 0 0\n\
  eth0: 5 1 0 0 0 0 0 0 7 2 0 0 0 0 0 0\n";
        let rows = net_dev(text.as_bytes()).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r.interface.as_str()).collect();
        assert_eq!(names, ["eth0", "lo", "wlan0"]);
        assert_eq!(rows[2].rx_bytes, 1000);
        assert_eq!(rows[2].tx_packets, 20);
    }
}
