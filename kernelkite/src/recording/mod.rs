//! Session recordings (`.kkr`): the stream a live `trace`/`run` session produces, written
//! to a compact binary file while it runs, and replayed later (without root, on any OS)
//! into the very bundle the live session wrote.
//!
//! # Format, version 7 (docs/FORMAT.md has the same, with examples)
//!
//! Every integer is little-endian, fixed width. A file is a header and then chunks:
//!
//! ```text
//! header (16 bytes)
//!   0  magic        8 bytes  89 4B 4B 52 0D 0A 1A 0A  ("\x89KKR\r\n\x1a\n")
//!   8  version      u16      7 (6: no thread exit records; 5: no command line records; 4: no time accounting; 3: no stack profile extras
//!                            or wakers; 2: no in-progress calls, sampled stack
//!                            estimates or lost causes; 1: also class rows without steal)
//!  10  flags        u16      0 (reserved; a reader rejects other values)
//!  12  reserved     u32      0
//! chunk (16-byte header + payload), repeated until the end of the file
//!   0  stored_len   u32      bytes of payload that follow the chunk header (<= 64 MiB)
//!   4  raw_len      u32      bytes of the payload once decompressed (<= 256 MiB)
//!   8  encoding     u8       0 = stored as is (stored_len == raw_len), 1 = one zstd frame
//!   9  reserved     3 bytes  0
//!  12  crc32        u32      CRC-32 (IEEE) of header bytes 0..12 followed by the payload
//! raw payload: records, back to back
//!   0  type         u8       see [`RecordType`]
//!   1  body_len     u32      bytes of body
//!   5  body                  the record's fields, in order (below)
//! ```
//!
//! Field types in record bodies: `u8 u32 u64 i32 i64` fixed width; `str` = u32 byte
//! length + UTF-8; `opt<T>` = u8 0 (absent) or 1 followed by a T; `vec<T>` = u32 count +
//! that many T. A body must be consumed exactly. The record types:
//!
//! | type | record | fields |
//! |---|---|---|
//! | 1 | session start | backend u8 (0 proc, 1 ebpf), label opt<str>, host (clock_ticks_per_sec u64, page_size_bytes u64, num_cpus u32, kernel_release opt<str>, arch str), interval_ms u64, max_frames u64, min_latency_ns u64, flags u8 (bit 0 follow, bit 1 network), root_pids vec<i32>, clock anchor at t_ns 0 (monotonic_ns u64, boottime_ns u64, realtime_ns u64), version 5 on: time_accounting opt<(on_cpu_source u8, steal_accounted opt<u8>, irq_time_accounted opt<u8>, delay_accounting opt<u8>, kernel_config opt<str>)> |
//! | 2 | frame | t_ns u64, processes vec<process>, network opt<vec<netdev>>, version 5 on: host_steal_ticks opt<u64> |
//! | 3 | lifecycle | t_ns u64, kind u8 (0 fork, 1 exec, 2 exit), pid i32, tid i32, ppid i32, comm str, exit_code opt<i32>, class_ns opt<classes> |
//! | 4 | slow syscall | t_ns u64, pid i32, tid i32, nr u32, name str, duration_ns u64, ret i64, user_stack opt<u32> |
//! | 5 | histograms | t_ns u64, vec<(pid i32, nr u32, name str, count u64, total_ns u64, max_ns u64, buckets vec<(index u32, count u64)>, version 3 on: before_start u8)>: every histogram, cumulative; the last one wins |
//! | 6 | events lost | t_ns u64, count u64 (cumulative; the last one wins); version 3 on: by cause vec<(cause str, count u64)> |
//! | 7 | launched | argv vec<str>, pid i32, exit_code opt<i32>, signal opt<i32>, rusage opt<(user_us, system_us, max_rss_kib, minor_faults, major_faults, voluntary_switches, involuntary_switches: u64)>, untraced_cpu_ns opt<u64> (version 2 on), max_rss_upper_bound u8 (a trailing byte, version 8 on; absent: 0) |
//! | 10 | in progress | version 3 on: t_ns u64, vec<(pid i32, tid i32, nr u32, name str, t_ns u64, elapsed_ns u64, before_start u8, user_stack opt<u32>)>: the syscalls still running at a snapshot; the last one wins |
//! | 11 | wakers | the bundle's waker profile: vec<(pid i32, tid i32, class str, kind str, source opt<str>, source_id opt<u32>, waker_pid opt<i32>, waker_tid opt<i32>, waker_comm opt<str>, total_ns u64, count u64)>, lost u64; written when the session ends |
//! | 13 | command line | version 6 on: t_ns u64, pid i32, argv vec<str>: a process's command line, when kernelkite learnt it (an exec's, or read from /proc) |
//! | 12 | wakeups | `--critical-path`: the bundle's wakeup stream: vec<(t_ns u64, sleep_ns u64, pid i32, tid i32, class str, waker_kind str, waker_pid i32, waker_tid i32, on_cpu_ns u64, runqueue_ns u64, steal_ns u64)>, lost u64; written when the session ends |
//! | 14 | thread exit | version 7 on: t_ns u64, process, peak_rss_kib opt<u64>, voluntary_switches opt<u64>, involuntary_switches opt<u64>: a thread's final counters at its ptrace exit stop (`run` on /proc); `process.threads` holds that thread only |
//! | 8 | end | t_ns u64: the session ended and every record was written |
//! | 9 | stacks | the bundle's stack profile (`--stacks`): sample_hz u64, min_block_ns u64, frames vec<(addr u64, kernel u8, module opt<str>, module_offset opt<u64>, symbol opt<str>, file opt<str>, line opt<u32>)>, stacks vec<vec<u32>>, samples vec<(pid i32, tid i32, class str, user_stack opt<u32>, kernel_stack opt<u32>, total_ns u64, count u64, version 3 on: estimated_ns u64, sampled_count u64, in_progress u8)>, captures_lost u64, slow_stacks vec<(slow syscall arrival index u32, user stack index u32)>; written when the session ends |
//!
//! `process` = pid i32, ppid i32, comm str, state str, start_time_ticks, utime_ticks,
//! stime_ticks, cutime_ticks, cstime_ticks, rss_pages, num_threads (u64 each),
//! io opt<7 × u64>, threads vec<thread>; `thread` = tid i32, comm str, state str,
//! schedstat opt<3 × u64>, syscall_nr opt<i64>, class_ns opt<classes>; `classes` = 7 × u64
//! in class order (on_cpu, runqueue, io_wait, lock_wait, syscall_blocked, unknown_wait,
//! steal; version 1: the first six, steal 0);
//! `netdev` = interface str, rx_bytes, rx_packets, tx_bytes, tx_packets (u64 each).
//!
//! The session start record comes first and once; a frame record is written each time
//! the live session keeps a frame (the replay applies the same frame cap), events as
//! they are appended, and the writer ends a chunk after every frame, so a session that
//! is killed leaves every complete chunk replayable. Readers accept versions 1 to
//! [`FORMAT_VERSION`]; `fixtures/recordings/` keeps a file of every version.

pub mod decode;
pub mod encode;
mod wire;

pub use decode::{DecodeError, IncompleteTail, RecordingReader};
pub use encode::{Compression, RecordingWriter, SharedRecording};

use crate::model::{
    Backend, CgroupSample, CommandLine, Frame, HostConstants, LaunchedCommand, LifecycleEvent,
    ProcessIdentity, SlowSyscall, StackProfile, SyscallHistogram, SyscallInProgress, ThreadExit,
    TracedCgroup, WakerProfile, WakeupStream,
};
use std::collections::BTreeMap;

/// The first 8 bytes of every recording: a high byte (not text), "KKR", then CR LF,
/// ^Z and LF, which text-mode transfers and line-ending conversions visibly break.
pub const MAGIC: [u8; 8] = [0x89, b'K', b'K', b'R', b'\r', b'\n', 0x1a, b'\n'];
/// The version this build writes (and the newest it reads).
pub const FORMAT_VERSION: u16 = 8;
/// Length of the file header.
pub const FILE_HEADER_LEN: usize = 16;
/// Length of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 16;
/// Largest payload a chunk may store; a larger length field is corruption.
pub const MAX_STORED_LEN: u32 = 64 << 20;
/// Largest payload a chunk may decompress to.
pub const MAX_RAW_LEN: u32 = 256 << 20;

/// Whether `bytes` starts like a recording (for commands that accept several formats).
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// Record type codes (the `type` byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    SessionStart = 1,
    Frame = 2,
    Lifecycle = 3,
    SlowSyscall = 4,
    Histograms = 5,
    EventsLost = 6,
    Launched = 7,
    End = 8,
    Stacks = 9,
    InProgress = 10,
    /// The waker profile (`Bundle::wakers`), once at the end.
    Wakers = 11,
    /// The wakeup stream (`Bundle::wakeups`, `--critical-path`), once at the end.
    Wakeups = 12,
    /// A process's command line (`Bundle::command_lines`), version 6 on.
    CommandLine = 13,
    /// A thread's counters at its exit stop (`Bundle::thread_exits`), version 7 on.
    ThreadExit = 14,
    /// A process's cgroup and namespace pids (`Bundle::process_identities`), version 8 on.
    ProcessIdentity = 15,
    /// The traced cgroup's counters (`Bundle::cgroup_samples`), version 8 on.
    CgroupSample = 16,
    /// The cgroup traced (`Bundle::traced_cgroup`), once at the start; version 8 on.
    TracedCgroup = 17,
}

impl RecordType {
    pub fn from_u8(b: u8) -> Option<RecordType> {
        Some(match b {
            1 => RecordType::SessionStart,
            2 => RecordType::Frame,
            3 => RecordType::Lifecycle,
            4 => RecordType::SlowSyscall,
            5 => RecordType::Histograms,
            6 => RecordType::EventsLost,
            7 => RecordType::Launched,
            8 => RecordType::End,
            9 => RecordType::Stacks,
            10 => RecordType::InProgress,
            11 => RecordType::Wakers,
            12 => RecordType::Wakeups,
            13 => RecordType::CommandLine,
            14 => RecordType::ThreadExit,
            15 => RecordType::ProcessIdentity,
            16 => RecordType::CgroupSample,
            17 => RecordType::TracedCgroup,
            _ => return None,
        })
    }
}

/// The three clocks at the session's t_ns 0, so a reader can place any `t_ns` on the
/// boot timeline (BPF timestamps are CLOCK_MONOTONIC) or on the wall clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockAnchor {
    /// CLOCK_MONOTONIC: nanoseconds since boot, not counting suspend.
    pub monotonic_ns: u64,
    /// CLOCK_BOOTTIME: nanoseconds since boot, counting suspend.
    pub boottime_ns: u64,
    /// CLOCK_REALTIME: nanoseconds since the Unix epoch.
    pub realtime_ns: u64,
}

#[cfg(target_os = "linux")]
impl ClockAnchor {
    /// Read the three clocks back to back.
    pub fn read() -> ClockAnchor {
        let read = |clock| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes into the timespec we own.
            unsafe { libc::clock_gettime(clock, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        ClockAnchor {
            monotonic_ns: read(libc::CLOCK_MONOTONIC),
            boottime_ns: read(libc::CLOCK_BOOTTIME),
            realtime_ns: read(libc::CLOCK_REALTIME),
        }
    }
}

/// What a session is, written once at its start.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionStart {
    pub backend: Backend,
    pub label: Option<String>,
    pub host: HostConstants,
    pub interval_ms: u64,
    /// The frame cap (`--max-frames`); the replay applies it as the session did.
    pub max_frames: u64,
    /// `--min-latency-us` in ns (eBPF); 0 for the /proc sampler.
    pub min_latency_ns: u64,
    pub follow: bool,
    pub network: bool,
    pub root_pids: Vec<i32>,
    pub clock: ClockAnchor,
}

/// One decoded record, owned (what [`RecordingReader`] yields).
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    SessionStart(SessionStart),
    Frame(Frame),
    Lifecycle(LifecycleEvent),
    SlowSyscall(SlowSyscall),
    Histograms {
        t_ns: u64,
        histograms: Vec<SyscallHistogram>,
    },
    EventsLost {
        t_ns: u64,
        count: u64,
        /// Version 3 on: the count by what was lost (`Bundle::events_lost_by_cause`).
        by_cause: BTreeMap<String, u64>,
    },
    /// Version 3 on: the syscalls in progress at a snapshot (the last one wins).
    InProgress {
        t_ns: u64,
        calls: Vec<SyscallInProgress>,
    },
    Launched(LaunchedCommand),
    /// The stack profile, and the user stack of each slow syscall that has one, by the
    /// slow syscall's arrival index (stacks are resolved when the session ends).
    Stacks {
        profile: StackProfile,
        slow_stacks: Vec<(u32, u32)>,
    },
    Wakers(WakerProfile),
    Wakeups(WakeupStream),
    /// Version 6 on: a process's command line, as it was learnt.
    CommandLine(CommandLine),
    /// Version 7 on: a thread's final counters, read at its exit stop.
    ThreadExit(ThreadExit),
    ProcessIdentity(ProcessIdentity),
    CgroupSample(CgroupSample),
    TracedCgroup(TracedCgroup),
    End {
        t_ns: u64,
    },
}

impl Record {
    /// Nanoseconds since the session's start, for records that happen at an instant.
    pub fn t_ns(&self) -> Option<u64> {
        match self {
            Record::SessionStart(_) => Some(0),
            Record::Frame(f) => Some(f.t_ns),
            Record::Lifecycle(e) => Some(e.t_ns),
            Record::CommandLine(c) => Some(c.t_ns),
            Record::ThreadExit(e) => Some(e.t_ns),
            Record::ProcessIdentity(i) => Some(i.t_ns),
            Record::CgroupSample(c) => Some(c.t_ns),
            Record::TracedCgroup(_) => None,
            Record::SlowSyscall(s) => Some(s.t_ns),
            Record::Histograms { t_ns, .. }
            | Record::EventsLost { t_ns, .. }
            | Record::InProgress { t_ns, .. }
            | Record::End { t_ns } => Some(*t_ns),
            Record::Launched(_)
            | Record::Stacks { .. }
            | Record::Wakers(_)
            | Record::Wakeups(_) => None,
        }
    }

    pub fn as_ref(&self) -> RecordRef<'_> {
        match self {
            Record::SessionStart(s) => RecordRef::SessionStart(s),
            Record::Frame(f) => RecordRef::Frame(f),
            Record::Lifecycle(e) => RecordRef::Lifecycle(e),
            Record::SlowSyscall(s) => RecordRef::SlowSyscall(s),
            Record::Histograms { t_ns, histograms } => RecordRef::Histograms {
                t_ns: *t_ns,
                histograms,
            },
            Record::EventsLost {
                t_ns,
                count,
                by_cause,
            } => RecordRef::EventsLost {
                t_ns: *t_ns,
                count: *count,
                by_cause,
            },
            Record::InProgress { t_ns, calls } => RecordRef::InProgress { t_ns: *t_ns, calls },
            Record::Launched(l) => RecordRef::Launched(l),
            Record::Stacks {
                profile,
                slow_stacks,
            } => RecordRef::Stacks {
                profile,
                slow_stacks,
            },
            Record::Wakers(w) => RecordRef::Wakers(w),
            Record::Wakeups(w) => RecordRef::Wakeups(w),
            Record::CommandLine(c) => RecordRef::CommandLine(c),
            Record::ThreadExit(e) => RecordRef::ThreadExit(e),
            Record::ProcessIdentity(i) => RecordRef::ProcessIdentity(i),
            Record::CgroupSample(c) => RecordRef::CgroupSample(c),
            Record::TracedCgroup(c) => RecordRef::TracedCgroup(c),
            Record::End { t_ns } => RecordRef::End { t_ns: *t_ns },
        }
    }
}

/// A record borrowed from the live session (what a [`RecordSink`] is handed: nothing is
/// cloned on the tracing path).
#[derive(Clone, Copy, Debug)]
pub enum RecordRef<'a> {
    SessionStart(&'a SessionStart),
    Frame(&'a Frame),
    Lifecycle(&'a LifecycleEvent),
    SlowSyscall(&'a SlowSyscall),
    Histograms {
        t_ns: u64,
        histograms: &'a [SyscallHistogram],
    },
    EventsLost {
        t_ns: u64,
        count: u64,
        by_cause: &'a BTreeMap<String, u64>,
    },
    InProgress {
        t_ns: u64,
        calls: &'a [SyscallInProgress],
    },
    Launched(&'a LaunchedCommand),
    /// A process's command line (version 6 on).
    CommandLine(&'a CommandLine),
    /// A thread's counters at its exit stop (version 7 on).
    ThreadExit(&'a ThreadExit),
    ProcessIdentity(&'a ProcessIdentity),
    CgroupSample(&'a CgroupSample),
    TracedCgroup(&'a TracedCgroup),
    Stacks {
        profile: &'a StackProfile,
        slow_stacks: &'a [(u32, u32)],
    },
    Wakers(&'a WakerProfile),
    Wakeups(&'a WakeupStream),
    End {
        t_ns: u64,
    },
}

/// Where a live session sends each piece of its bundle as it appends it. Recording must
/// not stop a session: a sink remembers its first write error and reports it at the end.
pub trait RecordSink: Send {
    fn record(&mut self, record: RecordRef<'_>);
}

#[cfg(test)]
pub(crate) mod tests;

/// Helpers for the fuzz target (`fuzz/`) and its seeds.
#[doc(hidden)]
pub mod fuzz_support {
    use super::encode::{chunk_with_payload, file_header, ENCODING_STORED, ENCODING_ZSTD};
    use super::{has_magic, FORMAT_VERSION, MAX_RAW_LEN};

    /// `data` itself when it starts with the magic; otherwise a file holding `data` as
    /// the payload of one stored chunk with a correct checksum.
    pub fn as_recording(data: &[u8]) -> Vec<u8> {
        if has_magic(data) {
            return data.to_vec();
        }
        let mut out = file_header(FORMAT_VERSION);
        out.extend(chunk_with_payload(data, data.len() as u32, ENCODING_STORED));
        out
    }

    /// A file holding one zstd chunk with a correct checksum, so the fuzzer reaches the
    /// decompressor and the record decoders behind it. The first byte picks the mode:
    /// even, the rest is a records payload that is compressed here (every input reaches
    /// the record decoders through a real zstd frame); odd, the rest is a raw length
    /// (u32 LE, wrapped to the format's limit) and the zstd frame itself (hostile frames
    /// reach the decompressor; the seeds carry lengths that match).
    pub fn as_zstd_recording(data: &[u8]) -> Vec<u8> {
        let mut out = file_header(FORMAT_VERSION);
        let Some((&mode, rest)) = data.split_first() else {
            return out;
        };
        if mode % 2 == 0 {
            let frame = ruzstd::encoding::compress_to_vec(
                rest,
                ruzstd::encoding::CompressionLevel::Fastest,
            );
            out.extend(chunk_with_payload(&frame, rest.len() as u32, ENCODING_ZSTD));
        } else if rest.len() >= 4 {
            let (len, frame) = rest.split_at(4);
            let raw_len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) % (MAX_RAW_LEN + 1);
            out.extend(chunk_with_payload(frame, raw_len, ENCODING_ZSTD));
        }
        out
    }
}
