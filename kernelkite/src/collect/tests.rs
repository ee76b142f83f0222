use super::*;
use crate::model::Backend;
use crate::recording::tests::{encode, frame, session_records, start};
use crate::recording::{Compression, Record};

#[test]
fn the_rebuild_applies_the_frame_cap_and_sorts_events_like_the_live_session() {
    let mut records = session_records();
    records[0] = Record::SessionStart(start(Backend::Ebpf, 1));
    let bytes = encode(&records, Compression::Zstd);
    let replayed = replay_recording(bytes.as_slice(), bytes.len() as u64).unwrap();
    let b = &replayed.bundle;
    assert_eq!(b.frames.len(), 1);
    assert_eq!(
        b.frames[0].t_ns, 100,
        "past the cap the last frame is replaced"
    );
    assert_eq!(b.frame_cap.frames_dropped, 1);
    let order: Vec<u64> = b.lifecycle.iter().map(|e| e.t_ns).collect();
    assert_eq!(order, [10, 20]);
    assert_eq!(b.events_lost, Some(3));
    assert_eq!(b.syscalls.len(), 1);
    assert_eq!(b.launched.as_ref().unwrap().argv[1], "--x");
    assert_eq!(b.label.as_deref(), Some("label é"));
    assert_eq!(b.replayed_from, None, "the live session's bundle, exactly");
    assert!(replayed.ended);
    assert_eq!(replayed.clock.boottime_ns, 2);
    assert_eq!(b.stacks.as_ref().unwrap().captures_lost, 2);
    assert_eq!(
        b.slow_syscalls[0].user_stack,
        Some(0),
        "set from the stacks record"
    );
}

#[test]
fn a_recording_without_frames_or_with_a_backwards_frame_does_not_become_a_bundle() {
    let only_start = encode(
        &[Record::SessionStart(start(Backend::Proc, 10))],
        Compression::Zstd,
    );
    let e = replay_recording(only_start.as_slice(), only_start.len() as u64).unwrap_err();
    assert_eq!(e.to_string(), "the recording holds no complete frame");
    let backwards = encode(
        &[
            Record::SessionStart(start(Backend::Proc, 10)),
            Record::Frame(frame(100, 1)),
            Record::Frame(frame(50, 2)),
        ],
        Compression::Zstd,
    );
    let e = replay_recording(backwards.as_slice(), backwards.len() as u64).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("the replayed bundle is invalid: frame 1"),
        "{e}"
    );
}

#[test]
fn a_recorded_fold_and_the_replay_of_its_recording_make_the_same_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.kkr");
    let file = std::fs::File::create(&path).unwrap();
    let recording = crate::recording::SharedRecording::new(file, Compression::Zstd).unwrap();
    let mut records = session_records().into_iter();
    let Some(Record::SessionStart(mut start)) = records.next() else {
        panic!("the session starts with its start record");
    };
    // Past the frame cap, and with events out of order: both applied once, by the fold.
    start.max_frames = 1;
    let byte_budget = crate::model::frame_keeper::DEFAULT_MAX_FRAMES_MB << 20;
    let mut kept = RecordedFold::new(start, byte_budget, Some(Box::new(recording.clone())));
    let mut end_t_ns = 0;
    for record in records {
        match record {
            Record::End { t_ns } => end_t_ns = t_ns,
            record => {
                kept.push(record);
            }
        }
    }
    let live = kept.finish();
    recording.finish(end_t_ns).unwrap();
    let replayed = replay_recording_file(&path).unwrap().bundle;
    assert_eq!(live.frame_cap.frames_dropped, 1);
    assert!(live.lifecycle.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    assert_eq!(
        serde_json::to_string(&replayed).unwrap(),
        serde_json::to_string(&live).unwrap()
    );
}
