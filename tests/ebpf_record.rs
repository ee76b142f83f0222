//! Real-kernel tests of `--record` on the eBPF backend: `trace --stacks -o B --record R` and
//! `run --record R` replay to the live bundle byte for byte, and a `run` killed with
//! SIGKILL mid-session leaves a recording whose complete chunks replay.

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::replay;

#[path = "support/ebpf.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kernelkite::model::{load_bundle, Backend, LifecycleKind};
use kernelkite::recording::{Record, RecordingReader};
use support::*;

#[test]
fn trace_with_output_and_record_replays_byte_for_byte() {
    let Some(_serial) = ebpf_ready("trace_with_output_and_record_replays_byte_for_byte") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kkr = dir.path().join("trace.kkr");
    let kkr_arg = kkr.to_str().unwrap();
    let mut w = GatedWorkload::spawn(&["sleep_stress", "--nanosleeps", "6", "--sleep-ms", "20"]);
    let trace = RunningTrace::start(&[w.pid], &["--follow", "--stacks", "--record", kkr_arg]);
    w.go();
    w.finish();
    let traced = trace.finish();
    let replayed = dir.path().join("replayed.json");
    let (ok, stderr) = replay(&kkr, &replayed);
    assert!(ok && stderr.is_empty(), "{stderr}");
    assert!(
        std::fs::read(&replayed).unwrap() == traced.bundle_bytes,
        "the replayed bundle is the live one, byte for byte"
    );
    assert!(
        !traced.bundle.slow_syscalls.is_empty(),
        "20 ms sleeps are slow syscalls"
    );
    assert!(!traced.bundle.syscalls.is_empty());
    // --stacks: the profile with its symbol strings, and the slow calls' user stacks.
    let stacks = traced
        .bundle
        .stacks
        .as_ref()
        .expect("--stacks captured stacks");
    assert!(stacks.frames.iter().any(|f| f.symbol.is_some()));
    assert!(traced
        .bundle
        .slow_syscalls
        .iter()
        .any(|s| s.user_stack.is_some()));
    // The stream in order: start, then timestamps that place every record in time.
    let mut reader = RecordingReader::new(std::fs::File::open(&kkr).unwrap()).unwrap();
    let Some(Record::SessionStart(start)) = reader.next_record().unwrap() else {
        panic!("the first record is the session start");
    };
    assert_eq!(start.backend, Backend::Ebpf);
    assert_eq!(start.min_latency_ns, 10_000_000);
    assert!(start.clock.boottime_ns >= start.clock.monotonic_ns);
    let mut frames = 0;
    while let Some(r) = reader.next_record().unwrap() {
        frames += matches!(r, Record::Frame(_)) as usize;
        // Everything but the end-of-session stacks and wakers is placed in time.
        assert!(
            r.t_ns().is_some() || matches!(r, Record::Stacks { .. } | Record::Wakers(_)),
            "{r:?}"
        );
    }
    assert!(reader.ended());
    assert_eq!(frames, traced.bundle.frames.len());
}

#[test]
fn run_with_record_replays_byte_for_byte_with_every_lifecycle_event() {
    let Some(_serial) =
        ebpf_ready("run_with_record_replays_byte_for_byte_with_every_lifecycle_event")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (live, kkr) = (dir.path().join("live.json"), dir.path().join("run.kkr"));
    let out = Command::new(kernelkite_bin())
        .args(["--interval-ms", "20", "run"])
        .arg(&live)
        .arg("--record")
        .arg(&kkr)
        .arg("--")
        .arg(workload_bin())
        .args(["exec_storm", "--count", "40", "--self-exec"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed = dir.path().join("replayed.json");
    let (ok, stderr) = replay(&kkr, &replayed);
    assert!(ok && stderr.is_empty(), "{stderr}");
    assert_eq!(
        std::fs::read(&replayed).unwrap(),
        std::fs::read(&live).unwrap()
    );
    let bundle = load_bundle(&replayed).unwrap();
    assert_eq!(bundle.backend, Backend::Ebpf);
    let forks = bundle
        .lifecycle
        .iter()
        .filter(|e| e.kind == LifecycleKind::Fork && e.tid == e.pid)
        .count();
    assert_eq!(forks, 40);
    assert!(bundle.launched.as_ref().unwrap().rusage.is_some());
}

#[test]
fn an_ebpf_run_killed_with_sigkill_replays_its_complete_chunks() {
    let Some(_serial) = ebpf_ready("an_ebpf_run_killed_with_sigkill_replays_its_complete_chunks")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (live, kkr) = (dir.path().join("live.json"), dir.path().join("run.kkr"));
    let mut child = Command::new(kernelkite_bin())
        .args(["--interval-ms", "20", "run"])
        .arg(&live)
        .arg("--record")
        .arg(&kkr)
        .arg("--")
        .arg(workload_bin())
        .args(["sleep_stress", "--nanosleeps", "100", "--sleep-ms", "20"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let frames = std::fs::File::open(&kkr)
            .ok()
            .and_then(|f| RecordingReader::new(f).ok())
            .map_or(0, |r| {
                r.filter(|rec| matches!(rec, Ok(Record::Frame(_)))).count()
            });
        if frames >= 5 {
            break;
        }
        assert!(Instant::now() < deadline, "the recording never grew");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!live.exists());
    let replayed = dir.path().join("replayed.json");
    let (ok, stderr) = replay(&kkr, &replayed);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("cut short"),
        "{stderr}"
    );
    let bundle = load_bundle(&replayed).unwrap();
    assert!(bundle.frames.len() >= 5);
    assert!(
        !bundle.slow_syscalls.is_empty(),
        "slow syscalls recorded before the kill are kept"
    );
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(bundle.root_pids[0], libc::SIGKILL) };
}
