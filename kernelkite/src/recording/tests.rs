//! Round trips, the rebuild, and every kind of damaged input.

use super::encode::{chunk_with_payload, encode_record, encode_to_vec, file_header};
use super::*;
use crate::model::{
    ClassTimes, IoCounters, LifecycleKind, NetDevCounters, ProcessSample, Rusage, Schedstat,
    StackFrame, StackSample, ThreadSample,
};

pub(crate) fn start(backend: Backend, max_frames: u64) -> SessionStart {
    SessionStart {
        backend,
        label: Some("label é".into()),
        host: HostConstants {
            clock_ticks_per_sec: 100,
            page_size_bytes: 4096,
            num_cpus: 2,
            kernel_release: Some("6.18.0".into()),
            arch: "x86_64".into(),
            time_accounting: None,
        },
        interval_ms: 100,
        max_frames,
        min_latency_ns: 10_000_000,
        follow: true,
        network: true,
        root_pids: vec![42],
        clock: ClockAnchor {
            monotonic_ns: 1,
            boottime_ns: 2,
            realtime_ns: 3,
        },
    }
}

pub(crate) fn frame(t_ns: u64, utime: u64) -> Frame {
    Frame {
        t_ns,
        processes: vec![ProcessSample {
            pid: 42,
            ppid: 1,
            comm: "work (x)".into(),
            state: "S".into(),
            start_time_ticks: 7,
            utime_ticks: utime,
            stime_ticks: 1,
            cutime_ticks: 0,
            cstime_ticks: 0,
            rss_pages: 100,
            num_threads: 1,
            io: Some(IoCounters {
                rchar_bytes: 5,
                ..IoCounters::default()
            }),
            threads: vec![ThreadSample {
                tid: 42,
                comm: "work".into(),
                state: "S".into(),
                schedstat: Some(Schedstat {
                    on_cpu_ns: utime * 10_000_000,
                    runqueue_ns: 3,
                    timeslices: 4,
                }),
                syscall_nr: Some(-1),
                class_ns: Some(ClassTimes::from_array([utime, 1, 2, 3, 4, 5, 6])),
            }],
        }],
        network: Some(vec![NetDevCounters {
            interface: "lo".into(),
            rx_bytes: 1,
            rx_packets: 2,
            tx_bytes: 3,
            tx_packets: 4,
        }]),
        host_steal_ticks: Some(utime),
    }
}

pub(crate) fn lifecycle(t_ns: u64, pid: i32, kind: LifecycleKind) -> LifecycleEvent {
    LifecycleEvent {
        t_ns,
        kind,
        pid,
        tid: pid,
        ppid: 42,
        comm: "child".into(),
        exit_code: (kind == LifecycleKind::Exit).then_some(0),
        class_ns: (kind == LifecycleKind::Exit).then(|| ClassTimes::from_array([1; 7])),
    }
}

/// One record of every type, as a session would write them.
pub(crate) fn session_records() -> Vec<Record> {
    vec![
        Record::SessionStart(start(Backend::Ebpf, 100)),
        Record::Frame(frame(0, 1)),
        // Out of order, as events arrive from several CPUs.
        Record::Lifecycle(lifecycle(20, 43, LifecycleKind::Exit)),
        Record::Lifecycle(lifecycle(10, 43, LifecycleKind::Fork)),
        Record::SlowSyscall(SlowSyscall {
            t_ns: 15,
            pid: 42,
            tid: 42,
            nr: 35,
            name: "nanosleep".into(),
            duration_ns: 20_000_000,
            ret: -4,
            user_stack: None,
        }),
        Record::Frame(frame(100, 2)),
        Record::Histograms {
            t_ns: 100,
            histograms: vec![SyscallHistogram {
                pid: 42,
                nr: 35,
                name: "nanosleep".into(),
                count: 1,
                total_ns: 20_000_000,
                max_ns: 20_000_000,
                buckets: vec![(24, 1)],
                before_start: false,
            }],
        },
        Record::EventsLost {
            t_ns: 100,
            count: 3,
            by_cause: [("stack_captures".to_string(), 3)].into_iter().collect(),
        },
        Record::InProgress {
            t_ns: 100,
            calls: vec![crate::model::SyscallInProgress {
                pid: 42,
                tid: 43,
                nr: 0,
                name: "read".into(),
                t_ns: 0,
                elapsed_ns: 99,
                before_start: true,
                user_stack: Some(0),
            }],
        },
        Record::Launched(LaunchedCommand {
            argv: vec!["work".into(), "--x".into()],
            pid: 42,
            exit_code: Some(0),
            signal: None,
            untraced_cpu_ns: Some(1_234_567),
            max_rss_upper_bound: true,
            rusage: Some(Rusage {
                user_us: 10,
                ..Rusage::default()
            }),
        }),
        Record::Stacks {
            profile: StackProfile {
                sample_hz: 99,
                min_block_ns: 1000,
                frames: vec![StackFrame {
                    addr: 0xffff_ffff_8100_0000,
                    kernel: true,
                    module: Some("[kernel]".into()),
                    module_offset: None,
                    symbol: Some("schedule".into()),
                    file: None,
                    line: Some(7),
                }],
                stacks: vec![vec![0]],
                samples: vec![StackSample {
                    pid: 42,
                    tid: 42,
                    class: "lock_wait".into(),
                    user_stack: None,
                    kernel_stack: Some(0),
                    total_ns: 5,
                    count: 1,
                    estimated_ns: 0,
                    sampled_count: 0,
                    in_progress: false,
                }],
                captures_lost: 2,
                skipped_files: Vec::new(),
                ..StackProfile::default()
            },
            slow_stacks: vec![(0, 0)],
        },
        Record::Wakeups(WakeupStream {
            wakeups: vec![crate::model::Wakeup {
                t_ns: 70,
                sleep_ns: 30,
                pid: 42,
                tid: 43,
                class: "lock_wait".into(),
                waker_kind: "thread".into(),
                waker_pid: 42,
                waker_tid: 42,
                on_cpu_ns: 11,
                runqueue_ns: 2,
                steal_ns: 1,
            }],
            lost: 3,
        }),
        Record::End { t_ns: 100 },
    ]
}

pub(crate) fn encode(records: &[Record], compression: Compression) -> Vec<u8> {
    let refs: Vec<RecordRef<'_>> = records.iter().map(Record::as_ref).collect();
    encode_to_vec(&refs, compression)
}

fn read_all(bytes: &[u8]) -> Result<(Vec<Record>, Option<IncompleteTail>), DecodeError> {
    let mut reader = RecordingReader::new(bytes)?;
    let mut out = Vec::new();
    while let Some(r) = reader.next_record()? {
        out.push(r);
    }
    Ok((out, reader.incomplete_tail()))
}

fn error_of(bytes: &[u8]) -> String {
    match read_all(bytes) {
        Ok(r) => panic!("expected an error, read {} records", r.0.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_record_type_round_trips_with_and_without_compression() {
    let records = session_records();
    for compression in [Compression::None, Compression::Zstd] {
        let bytes = encode(&records, compression);
        let (back, tail) = read_all(&bytes).unwrap();
        assert_eq!(back, records);
        assert_eq!(tail, None);
    }
    // Frames end chunks: the two frames and the end record close three chunks.
    let reader = {
        let bytes = encode(&records, Compression::Zstd);
        let mut r = RecordingReader::new(std::io::Cursor::new(bytes)).unwrap();
        while r.next_record().unwrap().is_some() {}
        (r.chunks(), r.ended())
    };
    assert_eq!(reader, (3, true));
}

#[test]
fn a_file_cut_anywhere_replays_its_complete_chunks_and_counts_the_rest() {
    let records = session_records();
    let bytes = encode(&records, Compression::Zstd);
    // Where each chunk ends.
    let mut ends = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += CHUNK_HEADER_LEN + len;
        ends.push(at);
    }
    for cut in 0..bytes.len() {
        let result = read_all(&bytes[..cut]);
        if cut < FILE_HEADER_LEN {
            assert!(result.is_err(), "cut {cut}");
            continue;
        }
        let (got, tail) = result.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let complete = ends.iter().filter(|&&e| e <= cut).count();
        let last_end = ends
            .iter()
            .rev()
            .find(|&&e| e <= cut)
            .copied()
            .unwrap_or(FILE_HEADER_LEN);
        assert!(got.len() <= records.len());
        assert_eq!(got[..], records[..got.len()], "cut {cut}: a prefix");
        if cut == last_end {
            assert_eq!(tail, None, "cut {cut}");
        } else {
            assert_eq!(
                tail,
                Some(IncompleteTail {
                    offset: last_end as u64,
                    bytes: (cut - last_end) as u64
                }),
                "cut {cut} ({complete} complete chunks)"
            );
        }
    }
}

#[test]
fn a_flipped_bit_anywhere_in_a_chunk_is_a_checksum_error_at_that_chunk() {
    let bytes = encode(&session_records(), Compression::None);
    let second_chunk = FILE_HEADER_LEN
        + CHUNK_HEADER_LEN
        + u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let mut bad = bytes.clone();
    bad[second_chunk + CHUNK_HEADER_LEN + 3] ^= 0x10;
    let e = error_of(&bad);
    assert!(
        e.starts_with(&format!("byte {second_chunk}: chunk checksum mismatch")),
        "{e}"
    );
    // The CRC covers the header too.
    let mut bad = bytes.clone();
    bad[second_chunk + 4] ^= 1;
    assert!(error_of(&bad).contains("checksum mismatch"));
}

#[test]
fn wrong_magic_future_version_and_huge_lengths_are_one_line_errors_with_offsets() {
    let bytes = encode(&session_records(), Compression::Zstd);
    let mut bad = bytes.clone();
    bad[1] = b'X';
    assert_eq!(
        error_of(&bad),
        "byte 0: not a kernelkite recording (wrong magic bytes)"
    );
    assert!(error_of(b"{\"json\": 1}").contains("wrong magic"));
    let mut bad = bytes.clone();
    bad[8] = 9;
    let e = error_of(&bad);
    assert!(
        e.starts_with("byte 8: recording format version 9 is newer"),
        "{e}"
    );
    let mut bad = bytes.clone();
    bad[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        error_of(&bad),
        "byte 16: chunk length 4294967295 is over the limit of 67108864 bytes"
    );
    let mut bad = bytes.clone();
    bad[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(error_of(&bad).starts_with("byte 20: chunk raw length"));
}

/// A file of the given records, each chunk built by hand (valid CRC).
fn file_of_payloads(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut out = file_header(FORMAT_VERSION);
    for p in payloads {
        out.extend(chunk_with_payload(p, p.len() as u32, 0));
    }
    out
}

fn payload(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        encode_record(r.as_ref(), &mut out);
    }
    out
}

#[test]
fn malformed_records_inside_a_valid_chunk_name_the_chunk_and_payload_offset() {
    let start = Record::SessionStart(start(Backend::Proc, 10));
    let first = payload(std::slice::from_ref(&start));
    // A frame whose process count claims 4 billion processes.
    let mut huge = Vec::new();
    encode_record(RecordRef::Frame(&frame(0, 1)), &mut huge);
    huge[5 + 8..5 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = error_of(&file_of_payloads(&[first.clone(), huge]));
    let chunk2 = FILE_HEADER_LEN + CHUNK_HEADER_LEN + first.len();
    assert!(
        e.starts_with(&format!(
            "chunk at byte {chunk2}, payload byte 13: processes: count 4294967295 cannot fit"
        )),
        "{e}"
    );
    // Unknown record type, a record length past the payload, trailing body bytes.
    let e = error_of(&file_of_payloads(&[first.clone(), vec![99, 0, 0, 0, 0]]));
    assert!(e.ends_with("unknown record type 99"), "{e}");
    let e = error_of(&file_of_payloads(&[
        first.clone(),
        vec![8, 200, 0, 0, 0, 1],
    ]));
    assert!(e.contains("record body needs 200 bytes"), "{e}");
    let mut long_end = payload(&[Record::End { t_ns: 1 }]);
    long_end[1] = 9;
    long_end.push(0);
    let e = error_of(&file_of_payloads(&[first.clone(), long_end]));
    assert!(e.contains("End record: 1 unexpected bytes"), "{e}");
    // Order: the start first and once, nothing after the end.
    let e = error_of(&file_of_payloads(&[payload(&[Record::End { t_ns: 0 }])]));
    assert!(
        e.ends_with("the first record is not the session start"),
        "{e}"
    );
    let e = error_of(&file_of_payloads(&[first.clone(), first.clone()]));
    assert!(e.ends_with("a second session start record"), "{e}");
    let e = error_of(&file_of_payloads(&[
        first.clone(),
        payload(&[Record::End { t_ns: 0 }, Record::Frame(frame(0, 1))]),
    ]));
    assert!(e.ends_with("a record follows the end record"), "{e}");
}
