//! Reading recordings as a stream: [`RecordingReader`] checks the header, then yields
//! records in the order the session wrote them, a chunk at a time (each chunk's CRC is
//! checked before any of its records is handed out).
//!
//! A file that ends inside a chunk was cut short (the session was killed, the disk
//! filled): the reader stops after the last complete chunk and says how many bytes
//! were left over ([`RecordingReader::incomplete_tail`]). Anything else that is wrong
//! is a [`DecodeError`] naming the byte offset; nothing here panics on any input.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io::{self, Read};

use super::encode::{ENCODING_STORED, ENCODING_ZSTD};
use super::wire::{FieldError, FieldResult, Take};
use super::{
    ClockAnchor, Record, RecordType, SessionStart, CHUNK_HEADER_LEN, FILE_HEADER_LEN,
    FORMAT_VERSION, MAGIC, MAX_RAW_LEN, MAX_STORED_LEN,
};
use crate::model::{
    Backend, CgroupSample, ClassTimes, CommandLine, Frame, HostConstants, IoCounters,
    LaunchedCommand, LifecycleEvent, LifecycleKind, NetDevCounters, OnCpuSource, ProcessIdentity,
    ProcessSample, Rusage, Schedstat, SkippedFile, SlowSyscall, StackFrame, StackModule,
    StackProfile, StackSample, SyscallHistogram, SyscallInProgress, ThreadExit, ThreadSample,
    TimeAccounting, TracedCgroup, WakerProfile, WakerSample, Wakeup, WakeupStream,
};

/// Why a recording cannot be read. Displays as one line with the byte offset.
#[derive(Debug)]
pub enum DecodeError {
    /// Reading the file failed.
    Io(io::Error),
    /// The bytes at `offset` (of the file) are not what the format allows.
    Corrupt { offset: u64, message: String },
    /// A record inside a chunk is malformed: `offset` is the chunk's in the file,
    /// `payload_offset` the position in its decompressed payload.
    Record {
        offset: u64,
        payload_offset: usize,
        message: String,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Io(e) => write!(f, "read error: {e}"),
            DecodeError::Corrupt { offset, message } => write!(f, "byte {offset}: {message}"),
            DecodeError::Record {
                offset,
                payload_offset,
                message,
            } => write!(
                f,
                "chunk at byte {offset}, payload byte {payload_offset}: {message}"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

fn corrupt<T>(offset: u64, message: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError::Corrupt {
        offset,
        message: message.into(),
    })
}

/// Bytes at the end of a file that do not make a complete chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IncompleteTail {
    /// Where the incomplete chunk starts.
    pub offset: u64,
    /// How many bytes of it are there.
    pub bytes: u64,
}

/// Decompressed payload bytes a recording of `input_len` bytes may hold in total: zstd
/// lets a few bytes stand for megabytes (and every decoded byte becomes up to ~10 bytes
/// of frames in memory), so the total is bounded by the input's own size. kernelkite's
/// recordings compress by 2 to 7 times; the budget allows 32 times, plus 4 MiB.
pub fn decode_budget(input_len: u64) -> u64 {
    input_len
        .saturating_mul(DECODED_PER_INPUT_BYTE)
        .saturating_add(DECODED_BUDGET_FLOOR)
}

const DECODED_PER_INPUT_BYTE: u64 = 32;
const DECODED_BUDGET_FLOOR: u64 = 4 << 20;

/// Streaming reader of one recording.
pub struct RecordingReader<R: Read> {
    input: R,
    /// Decompressed bytes the chunks may still hold (see [`decode_budget`]).
    decoded_budget_left: u64,
    /// The input length the budget was derived from, for the error message.
    input_len: Option<u64>,
    version: u16,
    /// File offset of the next chunk.
    offset: u64,
    /// Records decoded from the current chunk and not yet handed out.
    queue: VecDeque<Record>,
    tail: Option<IncompleteTail>,
    chunks: u64,
    done: bool,
    /// The session start record was read.
    started: bool,
    /// The end record was read.
    ended: bool,
}

/// Read until `buf` is full or the input ends; how many bytes were read.
fn read_up_to(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> RecordingReader<R> {
    /// Read and check the file header.
    pub fn new(mut input: R) -> Result<RecordingReader<R>, DecodeError> {
        let mut header = [0u8; FILE_HEADER_LEN];
        let n = read_up_to(&mut input, &mut header).map_err(DecodeError::Io)?;
        if n < MAGIC.len() || header[..MAGIC.len()] != MAGIC {
            return corrupt(0, "not a kernelkite recording (wrong magic bytes)");
        }
        if n < FILE_HEADER_LEN {
            return corrupt(
                n as u64,
                format!("the file header is cut short ({n} of {FILE_HEADER_LEN} bytes)"),
            );
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if version == 0 {
            return corrupt(8, "format version 0 does not exist");
        }
        if version > FORMAT_VERSION {
            return corrupt(
                8,
                format!(
                    "recording format version {version} is newer than this kernelkite reads \
                     (1 to {FORMAT_VERSION}); use a newer kernelkite"
                ),
            );
        }
        let flags = u16::from_le_bytes([header[10], header[11]]);
        if flags != 0 || header[12..16] != [0; 4] {
            return corrupt(10, "reserved header bytes are not zero");
        }
        Ok(RecordingReader {
            input,
            decoded_budget_left: u64::MAX,
            input_len: None,
            version,
            offset: FILE_HEADER_LEN as u64,
            queue: VecDeque::new(),
            tail: None,
            chunks: 0,
            done: false,
            started: false,
            ended: false,
        })
    }

    /// Bound what the chunks may decompress to by the input's length (see
    /// [`decode_budget`]); every reader of a file the user names does this.
    pub fn limit_to_input_len(mut self, input_len: u64) -> RecordingReader<R> {
        self.decoded_budget_left = decode_budget(input_len);
        self.input_len = Some(input_len);
        self
    }

    /// The file's format version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Complete chunks read so far.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Whether the end record was read: the session ended and wrote everything.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// After the last record: the incomplete chunk the file ends with, if any.
    pub fn incomplete_tail(&self) -> Option<IncompleteTail> {
        self.tail
    }

    /// The next record, `None` at the end of the file (or of its complete chunks).
    pub fn next_record(&mut self) -> Result<Option<Record>, DecodeError> {
        loop {
            if let Some(r) = self.queue.pop_front() {
                return Ok(Some(r));
            }
            if self.done {
                return Ok(None);
            }
            self.read_chunk()?;
        }
    }

    fn read_chunk(&mut self) -> Result<(), DecodeError> {
        let at = self.offset;
        let mut header = [0u8; CHUNK_HEADER_LEN];
        let n = read_up_to(&mut self.input, &mut header).map_err(DecodeError::Io)?;
        if n == 0 {
            self.done = true;
            return Ok(());
        }
        if n < CHUNK_HEADER_LEN {
            return self.cut_short(n as u64);
        }
        let le32 =
            |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let (stored_len, raw_len, encoding) = (le32(0), le32(4), header[8]);
        if stored_len > MAX_STORED_LEN {
            return corrupt(
                at,
                format!("chunk length {stored_len} is over the limit of {MAX_STORED_LEN} bytes"),
            );
        }
        if raw_len > MAX_RAW_LEN {
            return corrupt(
                at + 4,
                format!("chunk raw length {raw_len} is over the limit of {MAX_RAW_LEN} bytes"),
            );
        }
        if u64::from(raw_len) > self.decoded_budget_left {
            let budget = decode_budget(self.input_len.unwrap_or(0));
            return corrupt(
                at + 4,
                format!(
                    "the chunks decompress to more than the {budget} bytes a recording of {} bytes may hold",
                    self.input_len.unwrap_or(0)
                ),
            );
        }
        self.decoded_budget_left -= u64::from(raw_len);
        let mut payload = vec![0u8; stored_len as usize];
        let got = read_up_to(&mut self.input, &mut payload).map_err(DecodeError::Io)?;
        if got < payload.len() {
            return self.cut_short((CHUNK_HEADER_LEN + got) as u64);
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header[..12]);
        crc.update(&payload);
        let (want, have) = (le32(12), crc.finalize());
        if want != have {
            return corrupt(
                at,
                format!("chunk checksum mismatch (stored {want:08x}, computed {have:08x}): the file is corrupt"),
            );
        }
        if header[9..12] != [0; 3] {
            return corrupt(at + 9, "reserved chunk header bytes are not zero");
        }
        let raw = match encoding {
            ENCODING_STORED if stored_len == raw_len => payload,
            ENCODING_STORED => {
                return corrupt(
                    at,
                    format!("stored chunk: length {stored_len} differs from raw length {raw_len}"),
                )
            }
            ENCODING_ZSTD => match decompress(&payload, raw_len as usize) {
                Ok(raw) if raw.len() == raw_len as usize => raw,
                Ok(raw) => {
                    return corrupt(
                        at,
                        format!("chunk decompressed to {} bytes, not {raw_len}", raw.len()),
                    )
                }
                Err(e) => return corrupt(at, format!("chunk does not decompress: {e}")),
            },
            other => return corrupt(at + 8, format!("unknown chunk encoding {other}")),
        };
        let record_error = |payload_offset, message| DecodeError::Record {
            offset: at,
            payload_offset,
            message,
        };
        let records =
            decode_payload(&raw, self.version).map_err(|e| record_error(e.at, e.message))?;
        for (payload_offset, record) in records {
            // The session start comes first and once; nothing follows the end.
            let is_start = matches!(record, Record::SessionStart(_));
            let problem = if self.ended {
                Some("a record follows the end record")
            } else if is_start && self.started {
                Some("a second session start record")
            } else if !is_start && !self.started {
                Some("the first record is not the session start")
            } else {
                None
            };
            if let Some(p) = problem {
                return Err(record_error(payload_offset, p.to_string()));
            }
            self.started = true;
            self.ended |= matches!(record, Record::End { .. });
            self.queue.push_back(record);
        }
        self.chunks += 1;
        self.offset = at + (CHUNK_HEADER_LEN as u64) + stored_len as u64;
        Ok(())
    }

    fn cut_short(&mut self, bytes: u64) -> Result<(), DecodeError> {
        self.tail = Some(IncompleteTail {
            offset: self.offset,
            bytes,
        });
        self.done = true;
        Ok(())
    }
}

impl RecordingReader<io::BufReader<std::fs::File>> {
    /// Open a recording file (a regular file, see `model::io::open_input`), with its
    /// decode budget derived from its length.
    pub fn open(path: &std::path::Path) -> Result<Self, DecodeError> {
        let (file, len) = crate::model::io::open_input(path).map_err(DecodeError::Io)?;
        Ok(RecordingReader::new(io::BufReader::new(file))?.limit_to_input_len(len))
    }
}

impl<R: Read> Iterator for RecordingReader<R> {
    type Item = Result<Record, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_record() {
            Ok(r) => r.map(Ok),
            Err(e) => {
                // One error ends the stream.
                self.done = true;
                self.queue.clear();
                Some(Err(e))
            }
        }
    }
}

/// Every record of one chunk's decompressed payload, with its offset in the payload.
fn decode_payload(raw: &[u8], version: u16) -> FieldResult<Vec<(usize, Record)>> {
    let mut t = Take::new(raw, 0);
    let mut out = Vec::new();
    while t.remaining() > 0 {
        let at = t.offset();
        let kind = t.u8("record type")?;
        let len = t.u32("record length")? as usize;
        let body_at = t.offset();
        let body = t.bytes(len, "record body")?;
        let Some(kind) = RecordType::from_u8(kind) else {
            return Err(FieldError {
                at,
                message: format!("unknown record type {kind}"),
            });
        };
        let mut body = Take::new(body, body_at);
        body.version = version;
        out.push((at, decode_body(kind, &mut body)?));
    }
    Ok(out)
}

fn decode_body(kind: RecordType, t: &mut Take<'_>) -> FieldResult<Record> {
    let record = match kind {
        RecordType::SessionStart => Record::SessionStart(session_start(t)?),
        RecordType::Frame => Record::Frame(frame(t)?),
        RecordType::Lifecycle => Record::Lifecycle(lifecycle(t)?),
        RecordType::SlowSyscall => Record::SlowSyscall(slow_syscall(t)?),
        RecordType::Histograms => Record::Histograms {
            t_ns: t.u64("t_ns")?,
            histograms: t.vec("histograms", 37, histogram)?,
        },
        RecordType::EventsLost => Record::EventsLost {
            t_ns: t.u64("t_ns")?,
            count: t.u64("events lost")?,
            by_cause: if t.version >= 3 {
                t.vec("causes", 12, |t| {
                    Ok((t.str("cause")?, t.u64("cause count")?))
                })?
                .into_iter()
                .collect()
            } else {
                BTreeMap::new()
            },
        },
        RecordType::InProgress => Record::InProgress {
            t_ns: t.u64("t_ns")?,
            calls: t.vec("calls in progress", 34, in_progress)?,
        },
        RecordType::Launched => Record::Launched(launched(t)?),
        RecordType::Stacks => Record::Stacks {
            profile: stack_profile(t)?,
            slow_stacks: t.vec("slow_stacks", 8, |t| {
                Ok((t.u32("slow syscall index")?, t.u32("user stack")?))
            })?,
        },
        RecordType::Wakers => Record::Wakers(wakers(t)?),
        RecordType::Wakeups => Record::Wakeups(wakeups(t)?),
        RecordType::CommandLine => Record::CommandLine(CommandLine {
            t_ns: t.u64("t_ns")?,
            pid: t.i32("pid")?,
            argv: t.vec("argv", 4, |t| t.str("argument"))?,
        }),
        RecordType::ProcessIdentity => Record::ProcessIdentity(ProcessIdentity {
            t_ns: t.u64("t_ns")?,
            pid: t.i32("pid")?,
            cgroup: t.opt("cgroup", |t| t.str("cgroup"))?,
            cgroup_id: t.opt("cgroup_id", |t| t.u64("cgroup_id"))?,
            ns_pids: t.vec("ns_pids", 4, |t| t.i32("ns_pid"))?,
        }),
        RecordType::CgroupSample => Record::CgroupSample(cgroup_sample(t)?),
        RecordType::TracedCgroup => Record::TracedCgroup(TracedCgroup {
            path: t.str("path")?,
            id: t.u64("id")?,
        }),
        RecordType::ThreadExit => Record::ThreadExit(ThreadExit {
            t_ns: t.u64("t_ns")?,
            process: process(t)?,
            peak_rss_kib: t.opt("peak_rss_kib", |t| t.u64("peak_rss_kib"))?,
            voluntary_switches: t.opt("voluntary_switches", |t| t.u64("voluntary_switches"))?,
            involuntary_switches: t
                .opt("involuntary_switches", |t| t.u64("involuntary_switches"))?,
        }),
        RecordType::End => Record::End {
            t_ns: t.u64("t_ns")?,
        },
    };
    t.finish(&format!("{kind:?} record"))?;
    Ok(record)
}

fn session_start(t: &mut Take<'_>) -> FieldResult<SessionStart> {
    let backend = match t.u8("backend")? {
        0 => Backend::Proc,
        1 => Backend::Ebpf,
        b => return t.fail(format!("unknown backend {b}")),
    };
    let label = t.opt("label", |t| t.str("label"))?;
    let mut host = HostConstants {
        clock_ticks_per_sec: t.u64("clock_ticks_per_sec")?,
        page_size_bytes: t.u64("page_size_bytes")?,
        num_cpus: t.u32("num_cpus")?,
        kernel_release: t.opt("kernel_release", |t| t.str("kernel_release"))?,
        arch: t.str("arch")?,
        time_accounting: None,
    };
    let interval_ms = t.u64("interval_ms")?;
    let max_frames = t.u64("max_frames")?;
    let min_latency_ns = t.u64("min_latency_ns")?;
    let flags = t.u8("flags")?;
    if flags & !0b11 != 0 {
        return t.fail(format!("unknown session flags {flags:#x}"));
    }
    // Fields are read in the order written: the time accounting (version 5 on) last.
    Ok(SessionStart {
        backend,
        label,
        interval_ms,
        max_frames,
        min_latency_ns,
        follow: flags & 1 != 0,
        network: flags & 2 != 0,
        root_pids: t.vec("root_pids", 4, |t| t.i32("pid"))?,
        clock: ClockAnchor {
            monotonic_ns: t.u64("monotonic_ns")?,
            boottime_ns: t.u64("boottime_ns")?,
            realtime_ns: t.u64("realtime_ns")?,
        },
        host: {
            if t.version >= 5 {
                host.time_accounting = t.opt("time_accounting", time_accounting)?;
            }
            host
        },
    })
}

fn time_accounting(t: &mut Take<'_>) -> FieldResult<TimeAccounting> {
    let code = t.u8("on_cpu_source")?;
    let Some(on_cpu_source) = OnCpuSource::from_code(code) else {
        return t.fail(format!("unknown on_cpu source {code}"));
    };
    Ok(TimeAccounting {
        on_cpu_source,
        steal_accounted: t.opt("steal_accounted", |t| t.bool("steal_accounted"))?,
        irq_time_accounted: t.opt("irq_time_accounted", |t| t.bool("irq_time_accounted"))?,
        delay_accounting: t.opt("delay_accounting", |t| t.bool("delay_accounting"))?,
        kernel_config: t.opt("kernel_config", |t| t.str("kernel_config"))?,
    })
}

fn frame(t: &mut Take<'_>) -> FieldResult<Frame> {
    Ok(Frame {
        t_ns: t.u64("t_ns")?,
        processes: t.vec("processes", 77, process)?,
        network: t.opt("network", |t| t.vec("network", 36, netdev))?,
        host_steal_ticks: if t.version >= 5 {
            t.opt("host_steal_ticks", |t| t.u64("host_steal_ticks"))?
        } else {
            None
        },
    })
}

fn process(t: &mut Take<'_>) -> FieldResult<ProcessSample> {
    Ok(ProcessSample {
        pid: t.i32("pid")?,
        ppid: t.i32("ppid")?,
        comm: t.inline_str("comm")?,
        state: t.inline_str("state")?,
        start_time_ticks: t.u64("start_time_ticks")?,
        utime_ticks: t.u64("utime_ticks")?,
        stime_ticks: t.u64("stime_ticks")?,
        cutime_ticks: t.u64("cutime_ticks")?,
        cstime_ticks: t.u64("cstime_ticks")?,
        rss_pages: t.u64("rss_pages")?,
        num_threads: t.u64("num_threads")?,
        io: t.opt("io", |t| {
            Ok(IoCounters {
                rchar_bytes: t.u64("rchar_bytes")?,
                wchar_bytes: t.u64("wchar_bytes")?,
                read_syscalls: t.u64("read_syscalls")?,
                write_syscalls: t.u64("write_syscalls")?,
                read_bytes: t.u64("read_bytes")?,
                write_bytes: t.u64("write_bytes")?,
                cancelled_write_bytes: t.u64("cancelled_write_bytes")?,
            })
        })?,
        threads: t.vec("threads", 15, thread)?,
    })
}

fn thread(t: &mut Take<'_>) -> FieldResult<ThreadSample> {
    Ok(ThreadSample {
        tid: t.i32("tid")?,
        comm: t.inline_str("thread comm")?,
        state: t.inline_str("thread state")?,
        schedstat: t.opt("schedstat", |t| {
            Ok(Schedstat {
                on_cpu_ns: t.u64("on_cpu_ns")?,
                runqueue_ns: t.u64("runqueue_ns")?,
                timeslices: t.u64("timeslices")?,
            })
        })?,
        syscall_nr: t.opt("syscall_nr", |t| t.i64("syscall_nr"))?,
        class_ns: t.opt("class_ns", class_times)?,
    })
}

fn class_times(t: &mut Take<'_>) -> FieldResult<ClassTimes> {
    let mut ns = [0u64; kernelkite_common::NUM_CLASSES];
    // Version 1 rows have six columns: no steal.
    let columns = if t.version == 1 {
        kernelkite_common::NUM_CLASSES - 1
    } else {
        kernelkite_common::NUM_CLASSES
    };
    for v in ns.iter_mut().take(columns) {
        *v = t.u64("class_ns")?;
    }
    Ok(ClassTimes::from_array(ns))
}

fn netdev(t: &mut Take<'_>) -> FieldResult<NetDevCounters> {
    Ok(NetDevCounters {
        interface: t.str("interface")?,
        rx_bytes: t.u64("rx_bytes")?,
        rx_packets: t.u64("rx_packets")?,
        tx_bytes: t.u64("tx_bytes")?,
        tx_packets: t.u64("tx_packets")?,
    })
}

fn lifecycle(t: &mut Take<'_>) -> FieldResult<LifecycleEvent> {
    let t_ns = t.u64("t_ns")?;
    let kind = match t.u8("lifecycle kind")? {
        0 => LifecycleKind::Fork,
        1 => LifecycleKind::Exec,
        2 => LifecycleKind::Exit,
        k => return t.fail(format!("unknown lifecycle kind {k}")),
    };
    Ok(LifecycleEvent {
        t_ns,
        kind,
        pid: t.i32("pid")?,
        tid: t.i32("tid")?,
        ppid: t.i32("ppid")?,
        comm: t.str("comm")?,
        exit_code: t.opt("exit_code", |t| t.i32("exit_code"))?,
        class_ns: t.opt("class_ns", class_times)?,
    })
}

fn slow_syscall(t: &mut Take<'_>) -> FieldResult<SlowSyscall> {
    Ok(SlowSyscall {
        t_ns: t.u64("t_ns")?,
        pid: t.i32("pid")?,
        tid: t.i32("tid")?,
        nr: t.u32("nr")?,
        name: t.str("name")?,
        duration_ns: t.u64("duration_ns")?,
        ret: t.i64("ret")?,
        user_stack: t.opt("user_stack", |t| t.u32("user_stack"))?,
    })
}

fn in_progress(t: &mut Take<'_>) -> FieldResult<SyscallInProgress> {
    Ok(SyscallInProgress {
        pid: t.i32("pid")?,
        tid: t.i32("tid")?,
        nr: t.u32("nr")?,
        name: t.str("name")?,
        t_ns: t.u64("t_ns")?,
        elapsed_ns: t.u64("elapsed_ns")?,
        before_start: t.bool("before_start")?,
        user_stack: t.opt("user_stack", |t| t.u32("user_stack"))?,
    })
}

fn histogram(t: &mut Take<'_>) -> FieldResult<SyscallHistogram> {
    Ok(SyscallHistogram {
        pid: t.i32("pid")?,
        nr: t.u32("nr")?,
        name: t.str("name")?,
        count: t.u64("count")?,
        total_ns: t.u64("total_ns")?,
        max_ns: t.u64("max_ns")?,
        buckets: t.vec("buckets", 12, |t| {
            Ok((t.u32("bucket")?, t.u64("bucket count")?))
        })?,
        before_start: t.version >= 3 && t.bool("before_start")?,
    })
}

fn launched(t: &mut Take<'_>) -> FieldResult<LaunchedCommand> {
    Ok(LaunchedCommand {
        argv: t.vec("argv", 4, |t| t.str("argument"))?,
        pid: t.i32("pid")?,
        exit_code: t.opt("exit_code", |t| t.i32("exit_code"))?,
        signal: t.opt("signal", |t| t.i32("signal"))?,
        rusage: t.opt("rusage", |t| {
            Ok(Rusage {
                user_us: t.u64("user_us")?,
                system_us: t.u64("system_us")?,
                max_rss_kib: t.u64("max_rss_kib")?,
                minor_faults: t.u64("minor_faults")?,
                major_faults: t.u64("major_faults")?,
                voluntary_switches: t.u64("voluntary_switches")?,
                involuntary_switches: t.u64("involuntary_switches")?,
            })
        })?,
        untraced_cpu_ns: if t.version >= 2 {
            t.opt("untraced_cpu_ns", |t| t.u64("untraced_cpu_ns"))?
        } else {
            None
        },
        // A trailing byte (version 8 on), absent from files written before it.
        max_rss_upper_bound: t.remaining() > 0 && t.bool("max_rss_upper_bound")?,
    })
}

fn wakers(t: &mut Take<'_>) -> FieldResult<WakerProfile> {
    Ok(WakerProfile {
        wakeups: t.vec("wakeups", 34, |t| {
            Ok(WakerSample {
                pid: t.i32("pid")?,
                tid: t.i32("tid")?,
                class: t.str("class")?,
                kind: t.str("kind")?,
                source: t.opt("source", |t| t.str("source"))?,
                source_id: t.opt("source_id", |t| t.u32("source_id"))?,
                waker_pid: t.opt("waker_pid", |t| t.i32("waker_pid"))?,
                waker_tid: t.opt("waker_tid", |t| t.i32("waker_tid"))?,
                waker_comm: t.opt("waker_comm", |t| t.str("waker_comm"))?,
                total_ns: t.u64("total_ns")?,
                count: t.u64("count")?,
            })
        })?,
        lost: t.u64("wakers lost")?,
    })
}

fn wakeups(t: &mut Take<'_>) -> FieldResult<WakeupStream> {
    Ok(WakeupStream {
        wakeups: t.vec("wakeups", 64, |t| {
            Ok(Wakeup {
                t_ns: t.u64("t_ns")?,
                sleep_ns: t.u64("sleep_ns")?,
                pid: t.i32("pid")?,
                tid: t.i32("tid")?,
                class: t.inline_str("class")?,
                waker_kind: t.inline_str("waker_kind")?,
                waker_pid: t.i32("waker_pid")?,
                waker_tid: t.i32("waker_tid")?,
                on_cpu_ns: t.u64("on_cpu_ns")?,
                runqueue_ns: t.u64("runqueue_ns")?,
                steal_ns: t.u64("steal_ns")?,
            })
        })?,
        lost: t.u64("wakeups lost")?,
    })
}

fn stack_profile(t: &mut Take<'_>) -> FieldResult<StackProfile> {
    Ok(StackProfile {
        sample_hz: t.u64("sample_hz")?,
        min_block_ns: t.u64("min_block_ns")?,
        frames: t.vec("stack frames", 14, |t| {
            Ok(StackFrame {
                addr: t.u64("addr")?,
                kernel: match t.u8("kernel")? {
                    0 => false,
                    1 => true,
                    b => return t.fail(format!("kernel: {b} is not a boolean (0 or 1)")),
                },
                module: t.opt("module", |t| t.str("module"))?,
                module_offset: t.opt("module_offset", |t| t.u64("module_offset"))?,
                symbol: t.opt("symbol", |t| t.str("symbol"))?,
                file: t.opt("file", |t| t.str("file"))?,
                line: t.opt("line", |t| t.u32("line"))?,
            })
        })?,
        stacks: t.vec("stacks", 4, |t| t.vec("stack", 4, |t| t.u32("frame index")))?,
        samples: t.vec("stack samples", 30, |t| {
            Ok(StackSample {
                pid: t.i32("pid")?,
                tid: t.i32("tid")?,
                class: t.str("class")?,
                user_stack: t.opt("user_stack", |t| t.u32("user_stack"))?,
                kernel_stack: t.opt("kernel_stack", |t| t.u32("kernel_stack"))?,
                total_ns: t.u64("total_ns")?,
                count: t.u64("count")?,
                estimated_ns: if t.version >= 3 {
                    t.u64("estimated_ns")?
                } else {
                    0
                },
                sampled_count: if t.version >= 3 {
                    t.u64("sampled_count")?
                } else {
                    0
                },
                in_progress: t.version >= 3 && t.bool("in_progress")?,
            })
        })?,
        captures_lost: t.u64("captures_lost")?,
        ..if t.version >= 4 {
            StackProfile {
                skipped_files: t.vec("skipped files", 20, |t| {
                    Ok(SkippedFile {
                        path: t.str("path")?,
                        reason: t.str("reason")?,
                        count: t.u64("count")?,
                    })
                })?,
                truncated_stacks: t.vec("truncated stacks", 4, |t| t.u32("stack index"))?,
                modules: t.vec("modules", 5, |t| {
                    Ok(StackModule {
                        path: t.str("path")?,
                        build_id: t.opt("build_id", |t| t.str("build_id"))?,
                    })
                })?,
                stack_copies: t.u64("stack_copies")?,
                stack_copies_short: t.u64("stack_copies_short")?,
                stack_copies_lost: t.u64("stack_copies_lost")?,
                unwind_ns: t.u64("unwind_ns")?,
                ..StackProfile::default()
            }
        } else {
            StackProfile::default()
        }
    })
}

/// A zstd frame's content, reading at most one byte more than `limit` (a frame that
/// claims more is rejected by the caller, without inflating it).
fn decompress(payload: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let decoder = ruzstd::decoding::StreamingDecoder::new(payload).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(limit.min(1 << 20));
    decoder
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The fields of `encode::cgroup_counters`, in order.
fn cgroup_sample(t: &mut Take<'_>) -> FieldResult<CgroupSample> {
    let t_ns = t.u64("t_ns")?;
    let mut v = [None; 12];
    for slot in &mut v {
        *slot = t.opt("cgroup counter", |t| t.u64("cgroup counter"))?;
    }
    Ok(CgroupSample {
        t_ns,
        cpu_usage_us: v[0],
        cpu_user_us: v[1],
        cpu_system_us: v[2],
        cpu_periods: v[3],
        cpu_throttled_periods: v[4],
        cpu_throttled_us: v[5],
        cpu_some_us: v[6],
        cpu_full_us: v[7],
        io_some_us: v[8],
        io_full_us: v[9],
        memory_some_us: v[10],
        memory_full_us: v[11],
    })
}
