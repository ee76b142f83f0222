//! Writing recordings: each record's fields in the documented order (see the module
//! docs of `recording`), grouped into checksummed, optionally zstd-compressed chunks
//! that are written out whole, one `write` per chunk, as the session goes.

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use super::wire::Put;
use super::{
    RecordRef, RecordSink, RecordType, SessionStart, CHUNK_HEADER_LEN, FORMAT_VERSION, MAGIC,
    MAX_RAW_LEN,
};
use crate::model::{
    Backend, CgroupSample, ClassTimes, Frame, IoCounters, LaunchedCommand, LifecycleEvent,
    LifecycleKind, NetDevCounters, ProcessSample, Rusage, Schedstat, SkippedFile, SlowSyscall,
    StackFrame, StackModule, StackProfile, StackSample, SyscallHistogram, SyscallInProgress,
    ThreadSample, WakerProfile, WakerSample, Wakeup, WakeupStream,
};

/// A chunk ends after every frame (so a killed session loses at most the events since
/// the last frame) or once this many bytes of records are pending.
const CHUNK_TARGET_BYTES: usize = 1 << 20;
/// zstd level: 3 is zstd's default, fast enough to run once per frame on the tracing
/// thread.
/// ruzstd's fastest level (about zstd's level 1): pure Rust, so recordings work on every
/// platform kernelkite builds on without a C toolchain.
const ZSTD_LEVEL: ruzstd::encoding::CompressionLevel = ruzstd::encoding::CompressionLevel::Fastest;

/// How chunk payloads are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// As is (encoding 0).
    None,
    /// One zstd frame per chunk (encoding 1), unless that is not smaller.
    Zstd,
}

/// Encoding byte of a chunk stored as is.
pub(crate) const ENCODING_STORED: u8 = 0;
/// Encoding byte of a chunk holding one zstd frame.
pub(crate) const ENCODING_ZSTD: u8 = 1;

/// The 16-byte file header.
pub(crate) fn file_header(version: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(super::FILE_HEADER_LEN);
    out.extend_from_slice(&MAGIC);
    let mut p = Put(&mut out);
    p.u16(version);
    p.u16(0);
    p.u32(0);
    out
}

/// Append one record (type, body length, body) to `out`.
pub fn encode_record(record: RecordRef<'_>, out: &mut Vec<u8>) {
    let (kind, at) = (record_type(record), out.len());
    out.push(kind as u8);
    out.extend_from_slice(&[0; 4]);
    let mut p = Put(out);
    match record {
        RecordRef::SessionStart(s) => session_start(&mut p, s),
        RecordRef::Frame(f) => frame(&mut p, f),
        RecordRef::Lifecycle(e) => lifecycle(&mut p, e),
        RecordRef::SlowSyscall(s) => slow_syscall(&mut p, s),
        RecordRef::Histograms { t_ns, histograms } => {
            p.u64(t_ns);
            p.vec(histograms, histogram);
        }
        RecordRef::EventsLost {
            t_ns,
            count,
            by_cause,
        } => {
            p.u64(t_ns);
            p.u64(count);
            p.vec(&by_cause.iter().collect::<Vec<_>>(), |p, (cause, n)| {
                p.str(cause);
                p.u64(**n);
            });
        }
        RecordRef::InProgress { t_ns, calls } => {
            p.u64(t_ns);
            p.vec(calls, in_progress);
        }
        RecordRef::Launched(l) => launched(&mut p, l),
        RecordRef::Stacks {
            profile,
            slow_stacks,
        } => {
            stack_profile(&mut p, profile);
            p.vec(slow_stacks, |p, (slow, stack)| {
                p.u32(*slow);
                p.u32(*stack);
            });
        }
        RecordRef::Wakers(w) => wakers(&mut p, w),
        RecordRef::Wakeups(w) => wakeups(&mut p, w),
        RecordRef::CommandLine(c) => {
            p.u64(c.t_ns);
            p.i32(c.pid);
            p.vec(&c.argv, |p, a| p.str(a));
        }
        RecordRef::ProcessIdentity(i) => {
            p.u64(i.t_ns);
            p.i32(i.pid);
            p.opt(i.cgroup.as_deref(), |p, c| p.str(c));
            p.opt(i.cgroup_id, |p, v| p.u64(v));
            p.vec(&i.ns_pids, |p, v| p.i32(*v));
        }
        RecordRef::CgroupSample(c) => {
            p.u64(c.t_ns);
            for v in cgroup_counters(c) {
                p.opt(v, |p, v| p.u64(v));
            }
        }
        RecordRef::TracedCgroup(c) => {
            p.str(&c.path);
            p.u64(c.id);
        }
        RecordRef::ThreadExit(e) => {
            p.u64(e.t_ns);
            process(&mut p, &e.process);
            p.opt(e.peak_rss_kib, |p, v| p.u64(v));
            p.opt(e.voluntary_switches, |p, v| p.u64(v));
            p.opt(e.involuntary_switches, |p, v| p.u64(v));
        }
        RecordRef::End { t_ns } => p.u64(t_ns),
    }
    let body_len = (out.len() - at - 5) as u32;
    out[at + 1..at + 5].copy_from_slice(&body_len.to_le_bytes());
}

fn record_type(record: RecordRef<'_>) -> RecordType {
    match record {
        RecordRef::SessionStart(_) => RecordType::SessionStart,
        RecordRef::Frame(_) => RecordType::Frame,
        RecordRef::Lifecycle(_) => RecordType::Lifecycle,
        RecordRef::SlowSyscall(_) => RecordType::SlowSyscall,
        RecordRef::Histograms { .. } => RecordType::Histograms,
        RecordRef::EventsLost { .. } => RecordType::EventsLost,
        RecordRef::InProgress { .. } => RecordType::InProgress,
        RecordRef::Launched(_) => RecordType::Launched,
        RecordRef::Stacks { .. } => RecordType::Stacks,
        RecordRef::Wakers(_) => RecordType::Wakers,
        RecordRef::Wakeups(_) => RecordType::Wakeups,
        RecordRef::CommandLine(_) => RecordType::CommandLine,
        RecordRef::ThreadExit(_) => RecordType::ThreadExit,
        RecordRef::ProcessIdentity(_) => RecordType::ProcessIdentity,
        RecordRef::CgroupSample(_) => RecordType::CgroupSample,
        RecordRef::TracedCgroup(_) => RecordType::TracedCgroup,
        RecordRef::End { .. } => RecordType::End,
    }
}

fn session_start(p: &mut Put<'_>, s: &SessionStart) {
    p.u8(match s.backend {
        Backend::Proc => 0,
        Backend::Ebpf => 1,
    });
    p.opt(s.label.as_deref(), |p, l| p.str(l));
    p.u64(s.host.clock_ticks_per_sec);
    p.u64(s.host.page_size_bytes);
    p.u32(s.host.num_cpus);
    p.opt(s.host.kernel_release.as_deref(), |p, r| p.str(r));
    p.str(&s.host.arch);
    p.u64(s.interval_ms);
    p.u64(s.max_frames);
    p.u64(s.min_latency_ns);
    p.u8(s.follow as u8 | (s.network as u8) << 1);
    p.vec(&s.root_pids, |p, pid| p.i32(*pid));
    p.u64(s.clock.monotonic_ns);
    p.u64(s.clock.boottime_ns);
    p.u64(s.clock.realtime_ns);
    p.opt(s.host.time_accounting.as_ref(), |p, t| {
        p.u8(t.on_cpu_source.code());
        for answer in [t.steal_accounted, t.irq_time_accounted, t.delay_accounting] {
            p.opt(answer, |p, b| p.u8(b as u8));
        }
        p.opt(t.kernel_config.as_deref(), |p, c| p.str(c));
    });
}

fn frame(p: &mut Put<'_>, f: &Frame) {
    p.u64(f.t_ns);
    p.vec(&f.processes, process);
    p.opt(f.network.as_deref(), |p, n| p.vec(n, netdev));
    p.opt(f.host_steal_ticks, |p, t| p.u64(t));
}

fn process(p: &mut Put<'_>, s: &ProcessSample) {
    p.i32(s.pid);
    p.i32(s.ppid);
    p.str(&s.comm);
    p.str(&s.state);
    for v in [
        s.start_time_ticks,
        s.utime_ticks,
        s.stime_ticks,
        s.cutime_ticks,
        s.cstime_ticks,
        s.rss_pages,
        s.num_threads,
    ] {
        p.u64(v);
    }
    p.opt(s.io, io_counters);
    p.vec(&s.threads, thread);
}

fn io_counters(p: &mut Put<'_>, io: IoCounters) {
    for v in [
        io.rchar_bytes,
        io.wchar_bytes,
        io.read_syscalls,
        io.write_syscalls,
        io.read_bytes,
        io.write_bytes,
        io.cancelled_write_bytes,
    ] {
        p.u64(v);
    }
}

fn thread(p: &mut Put<'_>, t: &ThreadSample) {
    p.i32(t.tid);
    p.str(&t.comm);
    p.str(&t.state);
    p.opt(t.schedstat, |p, s: Schedstat| {
        p.u64(s.on_cpu_ns);
        p.u64(s.runqueue_ns);
        p.u64(s.timeslices);
    });
    p.opt(t.syscall_nr, |p, nr| p.i64(nr));
    p.opt(t.class_ns, class_times);
}

fn class_times(p: &mut Put<'_>, c: ClassTimes) {
    for v in c.to_array() {
        p.u64(v);
    }
}

fn netdev(p: &mut Put<'_>, n: &NetDevCounters) {
    p.str(&n.interface);
    p.u64(n.rx_bytes);
    p.u64(n.rx_packets);
    p.u64(n.tx_bytes);
    p.u64(n.tx_packets);
}

fn lifecycle(p: &mut Put<'_>, e: &LifecycleEvent) {
    p.u64(e.t_ns);
    p.u8(match e.kind {
        LifecycleKind::Fork => 0,
        LifecycleKind::Exec => 1,
        LifecycleKind::Exit => 2,
    });
    p.i32(e.pid);
    p.i32(e.tid);
    p.i32(e.ppid);
    p.str(&e.comm);
    p.opt(e.exit_code, |p, c| p.i32(c));
    p.opt(e.class_ns, class_times);
}

fn slow_syscall(p: &mut Put<'_>, s: &SlowSyscall) {
    p.u64(s.t_ns);
    p.i32(s.pid);
    p.i32(s.tid);
    p.u32(s.nr);
    p.str(&s.name);
    p.u64(s.duration_ns);
    p.i64(s.ret);
    p.opt(s.user_stack, |p, i| p.u32(i));
}

fn stack_profile(p: &mut Put<'_>, s: &StackProfile) {
    p.u64(s.sample_hz);
    p.u64(s.min_block_ns);
    p.vec(&s.frames, |p, f: &StackFrame| {
        p.u64(f.addr);
        p.u8(f.kernel as u8);
        p.opt(f.module.as_deref(), |p, m| p.str(m));
        p.opt(f.module_offset, |p, o| p.u64(o));
        p.opt(f.symbol.as_deref(), |p, m| p.str(m));
        p.opt(f.file.as_deref(), |p, m| p.str(m));
        p.opt(f.line, |p, l| p.u32(l));
    });
    p.vec(&s.stacks, |p, stack| p.vec(stack, |p, i| p.u32(*i)));
    p.vec(&s.samples, |p, x: &StackSample| {
        p.i32(x.pid);
        p.i32(x.tid);
        p.str(&x.class);
        p.opt(x.user_stack, |p, i| p.u32(i));
        p.opt(x.kernel_stack, |p, i| p.u32(i));
        p.u64(x.total_ns);
        p.u64(x.count);
        p.u64(x.estimated_ns);
        p.u64(x.sampled_count);
        p.u8(x.in_progress as u8);
    });
    p.u64(s.captures_lost);
    // Version 4 on.
    p.vec(&s.skipped_files, |p, f: &SkippedFile| {
        p.str(&f.path);
        p.str(&f.reason);
        p.u64(f.count);
    });
    p.vec(&s.truncated_stacks, |p, i| p.u32(*i));
    p.vec(&s.modules, |p, m: &StackModule| {
        p.str(&m.path);
        p.opt(m.build_id.as_deref(), |p, b| p.str(b));
    });
    p.u64(s.stack_copies);
    p.u64(s.stack_copies_short);
    p.u64(s.stack_copies_lost);
    p.u64(s.unwind_ns);
}

fn wakers(p: &mut Put<'_>, w: &WakerProfile) {
    p.vec(&w.wakeups, |p, x: &WakerSample| {
        p.i32(x.pid);
        p.i32(x.tid);
        p.str(&x.class);
        p.str(&x.kind);
        p.opt(x.source.as_deref(), |p, s| p.str(s));
        p.opt(x.source_id, |p, i| p.u32(i));
        p.opt(x.waker_pid, |p, i| p.i32(i));
        p.opt(x.waker_tid, |p, i| p.i32(i));
        p.opt(x.waker_comm.as_deref(), |p, s| p.str(s));
        p.u64(x.total_ns);
        p.u64(x.count);
    });
    p.u64(w.lost);
}

fn wakeups(p: &mut Put<'_>, w: &WakeupStream) {
    p.vec(&w.wakeups, |p, x: &Wakeup| {
        p.u64(x.t_ns);
        p.u64(x.sleep_ns);
        p.i32(x.pid);
        p.i32(x.tid);
        p.str(&x.class);
        p.str(&x.waker_kind);
        p.i32(x.waker_pid);
        p.i32(x.waker_tid);
        p.u64(x.on_cpu_ns);
        p.u64(x.runqueue_ns);
        p.u64(x.steal_ns);
    });
    p.u64(w.lost);
}

fn histogram(p: &mut Put<'_>, h: &SyscallHistogram) {
    p.i32(h.pid);
    p.u32(h.nr);
    p.str(&h.name);
    p.u64(h.count);
    p.u64(h.total_ns);
    p.u64(h.max_ns);
    p.vec(&h.buckets, |p, (i, c)| {
        p.u32(*i);
        p.u64(*c);
    });
    p.u8(h.before_start as u8);
}

fn in_progress(p: &mut Put<'_>, c: &SyscallInProgress) {
    p.i32(c.pid);
    p.i32(c.tid);
    p.u32(c.nr);
    p.str(&c.name);
    p.u64(c.t_ns);
    p.u64(c.elapsed_ns);
    p.u8(c.before_start as u8);
    p.opt(c.user_stack, |p, i| p.u32(i));
}

fn launched(p: &mut Put<'_>, l: &LaunchedCommand) {
    p.vec(&l.argv, |p, a| p.str(a));
    p.i32(l.pid);
    p.opt(l.exit_code, |p, c| p.i32(c));
    p.opt(l.signal, |p, s| p.i32(s));
    p.opt(l.rusage, |p, r: Rusage| {
        for v in [
            r.user_us,
            r.system_us,
            r.max_rss_kib,
            r.minor_faults,
            r.major_faults,
            r.voluntary_switches,
            r.involuntary_switches,
        ] {
            p.u64(v);
        }
    });
    p.opt(l.untraced_cpu_ns, |p, v| p.u64(v));
    // A trailing byte: readers before it ignore it, and read its absence as 0.
    p.u8(l.max_rss_upper_bound as u8);
}

/// One chunk (header and payload) holding `raw` records.
pub(crate) fn encode_chunk(raw: &[u8], compression: Compression) -> io::Result<Vec<u8>> {
    if raw.len() > MAX_RAW_LEN as usize {
        return Err(io::Error::other(format!(
            "a chunk of {} bytes is over the format's limit of {MAX_RAW_LEN}",
            raw.len()
        )));
    }
    let compressed = match compression {
        Compression::None => None,
        Compression::Zstd => Some(ruzstd::encoding::compress_to_vec(raw, ZSTD_LEVEL)),
    };
    let (encoding, payload) = match &compressed {
        Some(z) if z.len() < raw.len() => (ENCODING_ZSTD, z.as_slice()),
        _ => (ENCODING_STORED, raw),
    };
    Ok(chunk_with_payload(payload, raw.len() as u32, encoding))
}

/// A chunk around an already encoded payload (tests build corrupt ones with it).
pub(crate) fn chunk_with_payload(payload: &[u8], raw_len: u32, encoding: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHUNK_HEADER_LEN + payload.len());
    let mut p = Put(&mut out);
    p.u32(payload.len() as u32);
    p.u32(raw_len);
    p.u8(encoding);
    p.u8(0);
    p.u8(0);
    p.u8(0);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out);
    crc.update(payload);
    let crc = crc.finalize();
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// What a finished recording holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordingStats {
    pub records: u64,
    pub chunks: u64,
    /// Bytes of records before compression.
    pub raw_bytes: u64,
    /// Bytes of the file.
    pub file_bytes: u64,
}

/// Writes a recording to `W` as records arrive.
pub struct RecordingWriter<W: Write> {
    out: W,
    compression: Compression,
    pending: Vec<u8>,
    stats: RecordingStats,
    /// The first write error; nothing is written after it (a recording with a hole in
    /// it would be corrupt rather than truncated).
    error: Option<io::Error>,
}

impl<W: Write> RecordingWriter<W> {
    /// Write the file header to `out`.
    pub fn new(mut out: W, compression: Compression) -> io::Result<RecordingWriter<W>> {
        let header = file_header(FORMAT_VERSION);
        out.write_all(&header)?;
        Ok(RecordingWriter {
            out,
            compression,
            pending: Vec::new(),
            stats: RecordingStats {
                file_bytes: header.len() as u64,
                ..RecordingStats::default()
            },
            error: None,
        })
    }

    /// Encode one record; end the chunk after a frame, the end record, or when enough
    /// is pending.
    pub fn append(&mut self, record: RecordRef<'_>) {
        if self.error.is_some() {
            return;
        }
        encode_record(record, &mut self.pending);
        self.stats.records += 1;
        let closes_chunk = matches!(record, RecordRef::Frame(_) | RecordRef::End { .. });
        if closes_chunk || self.pending.len() >= CHUNK_TARGET_BYTES {
            self.flush_chunk();
        }
    }

    /// Write the pending records as one chunk.
    pub fn flush_chunk(&mut self) {
        if self.pending.is_empty() || self.error.is_some() {
            return;
        }
        let result = encode_chunk(&self.pending, self.compression).and_then(|chunk| {
            self.out.write_all(&chunk)?;
            self.out.flush()?;
            Ok(chunk.len())
        });
        match result {
            Ok(n) => {
                self.stats.chunks += 1;
                self.stats.raw_bytes += self.pending.len() as u64;
                self.stats.file_bytes += n as u64;
            }
            Err(e) => self.error = Some(e),
        }
        self.pending.clear();
    }

    /// Write what is pending; the first write error, if there was one.
    pub fn finish(mut self) -> io::Result<(W, RecordingStats)> {
        self.flush_chunk();
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok((self.out, self.stats)),
        }
    }
}

/// Encode whole records into an in-memory recording (tests, fuzz seeds).
pub fn encode_to_vec(records: &[RecordRef<'_>], compression: Compression) -> Vec<u8> {
    let mut w = RecordingWriter::new(Vec::new(), compression).expect("writing to memory");
    for r in records {
        w.append(*r);
    }
    w.finish().expect("writing to memory").0
}

/// A recording file shared between the session that appends to it (as its
/// [`RecordSink`]) and the command that finishes it.
#[derive(Clone)]
pub struct SharedRecording(Arc<Mutex<Option<RecordingWriter<File>>>>);

impl SharedRecording {
    /// Write the header to `file` (one `crate::output::create_streaming` made).
    pub fn new(file: File, compression: Compression) -> io::Result<SharedRecording> {
        let writer = RecordingWriter::new(file, compression)?;
        Ok(SharedRecording(Arc::new(Mutex::new(Some(writer)))))
    }

    /// Records appended so far.
    pub fn records(&self) -> u64 {
        let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map_or(0, |w| w.stats.records)
    }

    pub fn append(&self, record: RecordRef<'_>) {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = guard.as_mut() {
            w.append(record);
        }
    }

    /// Write the end record and what is pending, and sync the file.
    pub fn finish(&self, end_t_ns: u64) -> io::Result<RecordingStats> {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut w = guard
            .take()
            .ok_or_else(|| io::Error::other("the recording was already finished"))?;
        w.append(RecordRef::End { t_ns: end_t_ns });
        let (file, stats) = w.finish()?;
        crate::output::sync_output(&file)?;
        Ok(stats)
    }
}

impl RecordSink for SharedRecording {
    fn record(&mut self, record: RecordRef<'_>) {
        self.append(record);
    }
}

/// A cgroup sample's counters in their order on the wire (decode's `cgroup_sample`).
pub(super) fn cgroup_counters(c: &CgroupSample) -> [Option<u64>; 12] {
    [
        c.cpu_usage_us,
        c.cpu_user_us,
        c.cpu_system_us,
        c.cpu_periods,
        c.cpu_throttled_periods,
        c.cpu_throttled_us,
        c.cpu_some_us,
        c.cpu_full_us,
        c.io_some_us,
        c.io_full_us,
        c.memory_some_us,
        c.memory_full_us,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_magic_then_version() {
        let h = file_header(1);
        assert_eq!(h.len(), super::super::FILE_HEADER_LEN);
        assert_eq!(&h[..8], &MAGIC);
        assert_eq!(&h[8..], &[1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn incompressible_chunks_are_stored_as_is() {
        let raw: Vec<u8> = (0..64u32).map(|i| (i * 37 % 251) as u8).collect();
        let chunk = encode_chunk(&raw, Compression::Zstd).unwrap();
        assert_eq!(chunk[8], ENCODING_STORED);
        assert_eq!(&chunk[CHUNK_HEADER_LEN..], raw.as_slice());
        let zeros = vec![0u8; 4096];
        let chunk = encode_chunk(&zeros, Compression::Zstd).unwrap();
        assert_eq!(chunk[8], ENCODING_ZSTD);
        assert!(chunk.len() < 100);
    }
}
