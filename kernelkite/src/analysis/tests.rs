use super::*;
use crate::model::test_builders::{bundle, frame, host};
use crate::model::*;

fn proc_(pid: i32, ppid: i32, start: u64, cpu: u64, rss: u64, rd: u64, wr: u64) -> ProcessSample {
    ProcessSample {
        pid,
        ppid,
        comm: format!("p{pid}").into(),
        state: "S".into(),
        start_time_ticks: start,
        utime_ticks: cpu,
        stime_ticks: 0,
        cutime_ticks: 0,
        cstime_ticks: 0,
        rss_pages: rss,
        num_threads: 1,
        io: Some(IoCounters {
            read_bytes: rd,
            write_bytes: wr,
            ..IoCounters::default()
        }),
        threads: Vec::new(),
    }
}

fn thread(tid: i32, state: &str, on: u64, rq: u64, nr: Option<i64>) -> ThreadSample {
    ThreadSample {
        tid,
        comm: format!("t{tid}").into(),
        state: state.into(),
        schedstat: Some(Schedstat {
            on_cpu_ns: on,
            runqueue_ns: rq,
            timeslices: 0,
        }),
        syscall_nr: nr,
        class_ns: None,
    }
}

#[test]
fn empty_bundle_does_not_panic() {
    let a = analyze(&bundle(Vec::new()));
    assert_eq!(a.frames, 0);
    assert_eq!(a.duration_ns, 0);
    assert_eq!(a.distinct_pids, 0);
    assert!(a.tree.is_empty());
}

#[test]
fn baselines_follow_the_session_start_rule() {
    // No launched command: processes in the first frame pre-existed (baseline = first
    // sample); process 20 appears later (baseline 0).
    let b = bundle(vec![
        frame(0, vec![proc_(10, 1, 50, 100, 10, 1000, 500)]),
        frame(
            100,
            vec![
                proc_(10, 1, 50, 110, 20, 1500, 700),
                proc_(20, 10, 900, 5, 5, 300, 0),
            ],
        ),
        frame(
            200,
            vec![
                proc_(10, 1, 50, 130, 15, 2000, 900),
                proc_(20, 10, 900, 9, 30, 400, 100),
            ],
        ),
    ]);
    let a = analyze(&b);
    assert_eq!(a.duration_ns, 200_000_000);
    assert_eq!(a.duration_ms, 200.0);
    assert_eq!(a.distinct_pids, 2);
    // (130 - 100) + 9 ticks = 39 ticks = 0.39 s
    assert!((a.cpu_seconds - 0.39).abs() < 1e-12);
    assert_eq!(a.cpu_source, CpuSource::Samples);
    assert_eq!(a.cpu_coverage, None);
    assert_eq!(a.read_bytes, 1000 + 400);
    assert_eq!(a.write_bytes, 400 + 100);
    // Frame 2: 15 + 30 pages; frame 1: 25 pages.
    assert_eq!(a.peak_rss_bytes, 45 * 4096);
    assert_eq!(a.peak_rss_t_ns, 200_000_000);
    assert_eq!(a.max_single_rss_bytes, 30 * 4096);
    assert_eq!(a.max_single_rss_source, RssSource::Samples);
    assert!(a.process(20, 900).unwrap().started_in_session);
    assert!(!a.process(10, 50).unwrap().started_in_session);
}

#[test]
fn launched_command_sets_session_start_and_rusage_is_exact() {
    let mut b = bundle(vec![
        frame(0, vec![proc_(10, 1, 500, 3, 10, 100, 0)]),
        frame(
            100,
            vec![
                proc_(10, 1, 500, 10, 10, 200, 0),
                proc_(11, 10, 505, 4, 10, 0, 0),
            ],
        ),
    ]);
    b.launched = Some(LaunchedCommand {
        argv: vec!["x".into()],
        pid: 10,
        exit_code: Some(0),
        signal: None,
        untraced_cpu_ns: None,
        max_rss_upper_bound: false,
        rusage: Some(Rusage {
            user_us: 150_000,
            system_us: 50_000,
            max_rss_kib: 64,
            ..Rusage::default()
        }),
    });
    let a = analyze(&b);
    // Launched process started at the session start: baseline 0.
    assert!((a.sampled_cpu_seconds - 0.14).abs() < 1e-12);
    assert!((a.cpu_seconds - 0.2).abs() < 1e-12);
    assert_eq!(a.cpu_source, CpuSource::Rusage);
    assert!((a.cpu_coverage.unwrap() - 0.7).abs() < 1e-12);
    assert_eq!(a.max_single_rss_bytes, 64 * 1024);
    assert_eq!(a.read_bytes, 200);
}

#[test]
fn counters_going_backwards_never_underflow() {
    let b = bundle(vec![
        frame(0, vec![proc_(10, 1, 50, 100, 10, 1000, 500)]),
        frame(100, vec![proc_(10, 1, 50, 40, 10, 10, 0)]),
        frame(200, vec![proc_(10, 1, 50, 45, 10, 20, 5)]),
    ]);
    let a = analyze(&b);
    assert!((a.cpu_seconds - 0.05).abs() < 1e-12);
    assert_eq!(a.read_bytes, 10);
    assert_eq!(a.write_bytes, 5);
}

#[test]
fn unsorted_times_do_not_panic() {
    let b = bundle(vec![
        frame(200, vec![proc_(1, 0, 1, 5, 1, 0, 0)]),
        frame(100, vec![]),
    ]);
    let a = analyze(&b);
    assert_eq!(a.duration_ns, 0);
}

#[test]
fn proc_estimate_splits_the_remainder_by_votes_and_adds_up() {
    // One thread, pre-existing, sampled 5 times over 400 ms.
    let mut frames = Vec::new();
    let states = [
        ("R", None),
        ("D", Some(0)),   // read in D state → io_wait
        ("S", Some(202)), // futex → lock_wait
        ("S", Some(202)),
        ("S", Some(-1)), // unknown_wait
    ];
    for (i, (st, nr)) in states.iter().enumerate() {
        let mut p = proc_(10, 1, 50, i as u64, 1, 0, 0);
        p.threads = vec![thread(
            10,
            st,
            1_000_000 + i as u64 * 50_000_000,
            i as u64 * 10_000_000,
            *nr,
        )];
        frames.push(frame(i as u64 * 100, vec![p]));
    }
    let a = analyze(&bundle(frames));
    let t = &a.threads[0];
    assert!(!t.exact);
    assert_eq!(t.window_start_ns, 0);
    assert_eq!(t.window_end_ns, 400_000_000);
    assert_eq!(t.wall_ns, 400_000_000);
    assert_eq!(t.classes.on_cpu, 200_000_000);
    assert_eq!(t.classes.runqueue, 40_000_000);
    // 160 ms remainder over 4 votes: io 1, lock 2, unknown 1.
    assert_eq!(t.classes.io_wait, 40_000_000);
    assert_eq!(t.classes.lock_wait, 80_000_000);
    assert_eq!(t.classes.unknown_wait, 40_000_000);
    assert_eq!(t.classes.syscall_blocked, 0);
    // The frames span 0..400 ms, and the thread lived through all of them.
    assert_eq!(t.classes.total_ns(), 400_000_000);
    assert_eq!(a.latency_classes, t.classes);
    assert!(!a.latency_classes_exact);
    assert!(a.class_is_exact(LatencyClass::OnCpu));
    assert!(!a.class_is_exact(LatencyClass::IoWait));
}

#[test]
fn estimate_always_adds_up_to_the_window() {
    let cases: &[(u64, u64, u64, bool, [u64; 7])] = &[
        (1_000, 300, 100, true, [0, 0, 1, 1, 1, 0, 0]),
        (1_000, 300, 100, true, [5, 0, 0, 0, 0, 0, 0]),
        (1_000, 900, 400, true, [0, 0, 1, 0, 0, 0, 0]),
        (999_999_937, 17, 3, true, [0, 0, 3, 7, 11, 13, 0]),
        (1_000, 0, 0, false, [2, 0, 1, 0, 0, 0, 0]),
        (0, 0, 0, true, [0, 0, 0, 0, 0, 0, 0]),
        (u64::MAX, 1, 1, true, [0, 0, u64::MAX / 4, 1, 1, 1, 0]),
    ];
    for &(window, on, rq, has, votes) in cases {
        let c = estimate_classes(window, on, rq, has, &votes);
        let expected = if has { window.max(on + rq) } else { window };
        assert_eq!(c.total_ns(), expected, "{window} {on} {rq} {votes:?}");
        if has {
            assert_eq!(c.on_cpu, on);
            assert_eq!(c.runqueue, rq);
        }
    }
}

#[test]
fn new_thread_window_starts_at_the_previous_frame() {
    let mut p0 = proc_(10, 1, 50, 0, 1, 0, 0);
    p0.threads = vec![thread(10, "S", 0, 0, Some(7))];
    let mut p1 = p0.clone();
    p1.threads = vec![
        thread(10, "S", 0, 0, Some(7)),
        thread(11, "R", 30_000_000, 0, None),
    ];
    let mut p2 = p0.clone();
    p2.threads = vec![
        thread(10, "S", 0, 0, Some(7)),
        thread(11, "D", 50_000_000, 5_000_000, None),
    ];
    let a = analyze(&bundle(vec![
        frame(0, vec![p0]),
        frame(100, vec![p1]),
        frame(200, vec![p2]),
    ]));
    let t11 = a.threads.iter().find(|t| t.tid == 11).unwrap();
    assert_eq!(t11.window_start_ns, 0);
    assert_eq!(t11.wall_ns, 200_000_000);
    assert_eq!(t11.classes.on_cpu, 50_000_000);
    assert_eq!(t11.classes.runqueue, 5_000_000);
    assert_eq!(t11.classes.io_wait, 145_000_000);
    let t10 = a.threads.iter().find(|t| t.tid == 10).unwrap();
    assert_eq!(t10.classes.syscall_blocked, 200_000_000);
    // Both lived the frames' whole 0..200 ms: 10 from the first frame on, 11 from the
    // frame before the one it first appeared in.
    assert_eq!(a.threads.len(), 2);
    for t in &a.threads {
        assert_eq!(t.classes.total_ns(), 200_000_000, "thread {}", t.tid);
    }
}

#[test]
fn ebpf_class_ns_is_exact_and_uses_exit_events() {
    let ct = |on, io| ClassTimes {
        on_cpu: on,
        io_wait: io,
        ..ClassTimes::default()
    };
    let mut t = thread(10, "S", 0, 0, None);
    t.class_ns = Some(ct(100, 50));
    let mut p0 = proc_(10, 1, 50, 0, 1, 0, 0);
    p0.threads = vec![t.clone()];
    let mut p1 = p0.clone();
    p1.threads[0].class_ns = Some(ct(300, 80));
    let mut b = bundle(vec![frame(0, vec![p0]), frame(100, vec![p1])]);
    b.backend = Backend::Ebpf;
    b.events_lost = Some(3);
    b.lifecycle = vec![
        LifecycleEvent {
            t_ns: 150_000_000,
            kind: LifecycleKind::Exit,
            pid: 10,
            tid: 10,
            ppid: 1,
            comm: "p10".into(),
            exit_code: Some(0),
            class_ns: Some(ct(350, 90)),
        },
        LifecycleEvent {
            t_ns: 50_000_000,
            kind: LifecycleKind::Fork,
            pid: 30,
            tid: 30,
            ppid: 10,
            comm: "child".into(),
            exit_code: None,
            class_ns: None,
        },
        LifecycleEvent {
            t_ns: 60_000_000,
            kind: LifecycleKind::Exit,
            pid: 30,
            tid: 30,
            ppid: 10,
            comm: "child".into(),
            exit_code: Some(0),
            class_ns: Some(ct(7, 3)),
        },
    ];
    // A lost exit record (no ppid, no comm) does not erase what the fork/exec said.
    b.lifecycle.push(LifecycleEvent {
        t_ns: 70_000_000,
        kind: LifecycleKind::Exit,
        pid: 30,
        tid: 31,
        ppid: 0,
        comm: String::new(),
        exit_code: Some(0),
        class_ns: Some(ct(1, 1)),
    });
    let a = analyze(&b);
    let child = a.processes.iter().find(|p| p.pid == 30).unwrap();
    assert_eq!(
        (child.ppid, child.comm.as_str(), child.threads),
        (10, "child", 2)
    );
    assert_eq!(child.classes, ct(8, 4));
    // class_ns counts from when the session started tracking the thread: the last (or
    // exit) value is the thread's whole time in the session.
    assert_eq!(a.latency_classes, ct(358, 94));
    assert!(a.latency_classes_exact);
    assert_eq!(a.events_lost, Some(3));
    assert_eq!(a.distinct_pids, 2);
    let t10 = a.threads.iter().find(|t| t.tid == 10).unwrap();
    assert!(t10.exact);
    assert_eq!(t10.classes, ct(350, 90));
    assert_eq!(a.tree.len(), 1);
    assert_eq!(a.tree[0].children[0].pid, 30);
}

#[test]
fn percentiles_are_bucket_midpoints_clamped_to_max() {
    use kernelkite_common::hist::bucket_index;
    let values = [1_000u64, 1_000, 1_000, 2_000, 50_000];
    let mut buckets: BTreeMap<u32, u64> = BTreeMap::new();
    for v in values {
        *buckets.entry(bucket_index(v) as u32).or_default() += 1;
    }
    let b: Vec<(u32, u64)> = buckets.into_iter().collect();
    let p50 = percentile_ns(&b, 5, 50_000, 50.0);
    let i = bucket_index(1_000);
    assert_eq!(
        p50,
        bucket_lower(i) + (bucket_upper(i) - bucket_lower(i)) / 2
    );
    assert!((p50 as f64 - 1000.0).abs() / 1000.0 <= 0.0625);
    assert_eq!(
        percentile_ns(&b, 5, 50_000, 99.0),
        50_000.min(percentile_ns(&b, 5, u64::MAX, 99.0))
    );
    assert!(percentile_ns(&b, 5, 50_000, 99.0) <= 50_000);
    assert_eq!(percentile_ns(&b, 5, 40_000, 99.0), 40_000);
    assert_eq!(percentile_ns(&[], 0, 0, 50.0), 0);
    assert_eq!(percentile_ns(&[(3, 2)], 2, 9, 50.0), 3);
}

#[test]
fn syscalls_aggregate_across_pids() {
    let mut b = bundle(vec![frame(0, vec![proc_(1, 0, 1, 0, 0, 0, 0)])]);
    b.syscalls = vec![
        SyscallHistogram {
            pid: 1,
            nr: 0,
            name: "read".into(),
            count: 2,
            total_ns: 2_000,
            max_ns: 1_100,
            buckets: vec![(kernelkite_common::hist::bucket_index(1_000) as u32, 2)],
            before_start: false,
        },
        SyscallHistogram {
            pid: 2,
            nr: 0,
            name: "read".into(),
            count: 1,
            total_ns: 9_000,
            max_ns: 9_000,
            buckets: vec![(kernelkite_common::hist::bucket_index(9_000) as u32, 1)],
            before_start: false,
        },
        SyscallHistogram {
            pid: 2,
            nr: 1,
            name: "write".into(),
            count: 1,
            total_ns: 10,
            max_ns: 10,
            buckets: vec![(kernelkite_common::hist::bucket_index(10) as u32, 1)],
            before_start: false,
        },
    ];
    let a = analyze(&b);
    assert_eq!(a.syscalls.len(), 2);
    let r = &a.syscalls[0];
    assert_eq!(
        (r.name.as_str(), r.count, r.total_ns, r.max_ns, r.processes),
        ("read", 3, 11_000, 9_000, 2)
    );
    assert!(r.p99_ns <= 9_000 && r.p99_ns > 8_000);
    assert!(r.p50_ns < 1_100);
}

#[test]
fn tree_follows_ppid_and_pid_reuse() {
    let b = bundle(vec![
        frame(0, vec![proc_(1, 0, 10, 0, 0, 0, 0)]),
        frame(
            100,
            vec![proc_(1, 0, 10, 0, 0, 0, 0), proc_(2, 1, 20, 0, 0, 0, 0)],
        ),
        frame(
            200,
            vec![proc_(1, 0, 10, 0, 0, 0, 0), proc_(3, 2, 30, 0, 0, 0, 0)],
        ),
        frame(
            300,
            vec![proc_(2, 1, 40, 0, 0, 0, 0), proc_(3, 2, 30, 0, 0, 0, 0)],
        ),
    ]);
    let a = analyze(&b);
    assert_eq!(a.distinct_pids, 4);
    assert_eq!(a.tree.len(), 1);
    let root = &a.tree[0];
    assert_eq!(root.pid, 1);
    assert_eq!(
        root.children
            .iter()
            .map(|c| c.start_time_ticks)
            .collect::<Vec<_>>(),
        vec![20, 40]
    );
    assert_eq!(root.children[0].children[0].pid, 3);
    assert!(root.children[1].children.is_empty());
}

#[test]
fn network_is_host_wide_delta_without_loopback() {
    let nd = |name: &str, rx, tx| NetDevCounters {
        interface: name.into(),
        rx_bytes: rx,
        rx_packets: 1,
        tx_bytes: tx,
        tx_packets: 1,
    };
    let mut f0 = frame(0, vec![]);
    f0.network = Some(vec![nd("eth0", 100, 50), nd("lo", 0, 0)]);
    let mut f1 = frame(100, vec![]);
    f1.network = Some(vec![nd("eth0", 1100, 80), nd("lo", 500, 500)]);
    let a = analyze(&bundle(vec![f0, f1]));
    let n = a.network.unwrap();
    assert_eq!((n.rx_bytes, n.tx_bytes), (1000, 30));
    assert_eq!(n.interfaces.len(), 2);
    assert_eq!(analyze(&bundle(vec![frame(0, vec![])])).network, None);
}

fn row(pid: i32, ppid: i32, first_seen_ns: u64) -> ProcessRow {
    ProcessRow {
        pid,
        ppid,
        comm: String::new(),
        start_time_ticks: pid as u64,
        started_in_session: true,
        first_seen_ns,
        last_seen_ns: first_seen_ns,
        frames: 1,
        cpu_seconds: Some(0.0),
        exact_at_exit: false,
        peak_rss_bytes: Some(0),
        read_bytes: 0,
        write_bytes: 0,
        io_visible: false,
        classes: ClassTimes::default(),
        threads: 0,
        argv: None,
        placement: None,
    }
}

fn count(nodes: &[TreeNode]) -> usize {
    nodes.iter().map(|n| 1 + count(&n.children)).sum()
}

#[test]
fn tree_survives_cycles_and_deep_chains() {
    // 1 <-> 2 seen at the same instant: one edge is dropped.
    let t = build_tree(&[row(1, 2, 0), row(2, 1, 0), row(3, 3, 0)]);
    assert_eq!(count(&t), 3);
    assert!(!t.is_empty());
    // A chain deeper than the limit is cut into several roots; nothing is lost.
    let chain: Vec<ProcessRow> = (1..=1000).map(|i| row(i, i - 1, i as u64)).collect();
    let t = build_tree(&chain);
    assert_eq!(count(&t), 1000);
    assert_eq!(t.len(), 1000usize.div_ceil(MAX_TREE_DEPTH + 1));
}

/// A tiny deterministic generator, so the robustness test needs no dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, max: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % max.max(1)
    }
}

/// 300 bundles of arbitrary, often invalid, content (a fixed seed).
pub(crate) fn arbitrary_bundles() -> Vec<Bundle> {
    let mut r = Lcg(42);
    let mut bundles = Vec::new();
    for _ in 0..300 {
        let mut frames = Vec::new();
        for f in 0..r.next(6) {
            let mut procs = Vec::new();
            for _ in 0..r.next(4) {
                let mut p = proc_(
                    r.next(5) as i32,
                    r.next(5) as i32,
                    r.next(3),
                    if r.next(8) == 0 {
                        u64::MAX - r.next(3)
                    } else {
                        r.next(1000)
                    },
                    r.next(u64::MAX),
                    r.next(1 << 40),
                    r.next(100),
                );
                for _ in 0..r.next(3) {
                    let mut t = thread(
                        r.next(6) as i32,
                        ["R", "S", "D", "Z", ""][r.next(5) as usize],
                        r.next(u64::MAX),
                        r.next(1 << 50),
                        [None, Some(-1), Some(0), Some(202), Some(99_999)][r.next(5) as usize],
                    );
                    if r.next(3) == 0 {
                        t.class_ns = Some(ClassTimes::from_array([
                            r.next(u64::MAX),
                            1,
                            2,
                            3,
                            4,
                            r.next(9),
                            r.next(3),
                        ]));
                    }
                    p.threads.push(t);
                }
                procs.push(p);
            }
            frames.push(frame(
                if r.next(4) == 0 {
                    r.next(1 << 60)
                } else {
                    f * 100
                },
                procs,
            ));
        }
        let mut b = bundle(frames);
        b.host.clock_ticks_per_sec = r.next(3);
        b.host.page_size_bytes = r.next(3) * 4096;
        b.host.arch = ["x86_64", "aarch64", "vax"][r.next(3) as usize].into();
        if r.next(2) == 0 {
            b.launched = Some(LaunchedCommand {
                argv: vec![],
                pid: r.next(5) as i32,
                exit_code: None,
                signal: None,
                untraced_cpu_ns: None,
                max_rss_upper_bound: false,
                rusage: Some(Rusage::default()),
            });
        }
        bundles.push(b);
    }
    bundles
}

#[test]
fn analysis_never_panics_on_arbitrary_bundles() {
    for (i, b) in arbitrary_bundles().iter().enumerate() {
        let a = analyze(b);
        for t in &a.threads {
            let what = format!("bundle {i}, thread {}/{}", t.pid, t.tid);
            // Every row is a thread of the input: in a frame, or in an exit record.
            let this_process = |p: &ProcessSample| {
                p.pid == t.pid && p.start_time_ticks == t.process_start_time_ticks
            };
            let frame_ts: Vec<u64> = (b.frames.iter())
                .filter(|f| {
                    (f.processes.iter())
                        .any(|p| this_process(p) && p.threads.iter().any(|th| th.tid == t.tid))
                })
                .map(|f| f.t_ns)
                .collect();
            let exited = (b.lifecycle.iter())
                .any(|e| e.kind == LifecycleKind::Exit && e.pid == t.pid && e.tid == t.tid);
            assert!(!frame_ts.is_empty() || exited, "{what}: not in the bundle");
            // The classes, added here without saturation, are the wall time (or it
            // saturated).
            let sum: u128 = t.classes.to_array().iter().map(|&c| u128::from(c)).sum();
            assert_eq!(
                u128::from(t.wall_ns),
                sum.min(u128::from(u64::MAX)),
                "{what}"
            );
            if !t.exact && t.samples > 0 {
                // An estimate covers the whole window, which reaches the last frame
                // that showed the thread.
                let span = t.window_end_ns - t.window_start_ns;
                assert!(t.wall_ns >= span, "{what}: {} < window {span}", t.wall_ns);
                let last = *frame_ts.last().unwrap();
                assert!(
                    t.window_end_ns >= last,
                    "{what}: ends before its frame at {last}"
                );
            }
        }
        let _ = compare::compare(&a, &a);
    }
}

#[test]
fn reaped_children_io_is_not_counted_twice() {
    // P reaps C, which reaped G in the same interval: P's counter absorbs C's final
    // (which includes G's final). Own I/O: P 100, C 82, G 8 = 190.
    let mut b = bundle(vec![
        frame(
            0,
            vec![
                proc_(10, 1, 500, 0, 1, 100, 0),
                proc_(11, 10, 501, 0, 1, 50, 0),
                proc_(12, 11, 502, 0, 1, 5, 0),
            ],
        ),
        frame(
            100,
            vec![
                proc_(10, 1, 500, 0, 1, 100, 0),
                proc_(11, 10, 501, 0, 1, 80, 0),
                proc_(12, 11, 502, 0, 1, 7, 0),
            ],
        ),
        frame(200, vec![proc_(10, 1, 500, 0, 1, 190, 0)]),
    ]);
    b.launched = Some(LaunchedCommand {
        argv: vec![],
        pid: 10,
        exit_code: Some(0),
        signal: None,
        untraced_cpu_ns: None,
        max_rss_upper_bound: false,
        rusage: None,
    });
    let a = analyze(&b);
    assert_eq!(a.read_bytes, 190);
    assert_eq!(a.process(10, 500).unwrap().read_bytes, 103);
    assert_eq!(a.process(11, 501).unwrap().read_bytes, 80);
    let folds: Vec<(i32, i32, u64)> = a
        .reap_folds
        .iter()
        .map(|f| (f.child_pid, f.reaper_pid, f.read_bytes))
        .collect();
    assert_eq!(folds, [(11, 10, 80), (12, 10, 7)]);
    assert_eq!(a.reap_folds[0].folded_by_ns, 200_000_000);
    // A child that outlives the session's last frame is not folded.
    let mut b2 = b.clone();
    b2.frames.truncate(2);
    assert_eq!(analyze(&b2).read_bytes, 187);
}

/// Host-wide steal: the move of /proc/stat's steal column over the frames that carry
/// it, in ns; none when no frame does.
#[test]
fn host_steal_is_the_move_of_the_frames_steal_ticks() {
    let mut b = Bundle::new(Backend::Proc, host(), 100);
    for (t, ticks) in [
        (0, None),
        (100, Some(100)),
        (200, Some(103)),
        (300, Some(107)),
    ] {
        let mut f = frame(t, vec![proc_(10, 1, 5, 0, 1, 0, 0)]);
        f.host_steal_ticks = ticks;
        b.frames.push(f);
    }
    // 7 ticks at 100 per second.
    assert_eq!(analyze(&b).host_steal_ns, Some(70_000_000));
    for f in &mut b.frames {
        f.host_steal_ticks = None;
    }
    assert_eq!(analyze(&b).host_steal_ns, None);
}

/// Exit accounting: a process that lived between two frames is a row, with its CPU
/// from its threads' final schedstat (ns, not ticks) and its peak RSS from VmHWM; a
/// process also seen in frames takes its exit counters as its last observation.
#[test]
fn thread_exits_make_exact_rows_for_processes_no_frame_saw() {
    let exit = |t_ns, p: ProcessSample, peak_kib| ThreadExit {
        t_ns,
        process: p,
        peak_rss_kib: Some(peak_kib),
        voluntary_switches: Some(1),
        involuntary_switches: Some(0),
    };
    let with_thread = |pid, ppid, cpu_ticks, tid, on_ns| {
        let mut p = proc_(pid, ppid, 900 + pid as u64, cpu_ticks, 10, 0, 0);
        p.threads = vec![thread(tid, "t", on_ns, 1_000, None)];
        p
    };
    let mut b = bundle(vec![
        frame(0, vec![proc_(10, 1, 50, 0, 10, 0, 0)]),
        frame(100_000_000, vec![proc_(10, 1, 50, 20, 10, 0, 0)]),
    ]);
    // Pid 20 (two threads, one read as it exited first) lived between the frames.
    b.thread_exits = vec![
        exit(40_000_000, with_thread(20, 10, 1, 21, 2_000_000), 4096),
        exit(60_000_000, with_thread(20, 10, 6, 20, 61_500_000), 8192),
    ];
    let a = analyze(&b);
    let row = a
        .processes
        .iter()
        .find(|p| p.pid == 20)
        .expect("a row for pid 20");
    assert!(row.exact_at_exit);
    assert_eq!(row.cpu_seconds, Some(0.0635));
    assert_eq!(row.peak_rss_bytes, Some(8192 * 1024));
    assert_eq!(row.threads, 2);
    assert_eq!(row.last_seen_ns, 60_000_000);
    assert_eq!(a.processes_exact_at_exit, 1);
    let framed = a.processes.iter().find(|p| p.pid == 10).unwrap();
    assert!(!framed.exact_at_exit, "pid 10 was never read at an exit");
}

/// `compare` groups CPU by program: two rustc in one session, one in the other; a
/// program that only ran after is "new".
#[test]
fn compare_groups_cpu_by_command_name() {
    let named = |pid, comm: &str, cpu| {
        let mut p = proc_(pid, 1, 10 + pid as u64, cpu, 1, 0, 0);
        p.comm = comm.into();
        p
    };
    let before = analyze(&bundle(vec![
        frame(0, vec![named(2, "rustc", 0), named(3, "rustc", 0)]),
        frame(100, vec![named(2, "rustc", 30), named(3, "rustc", 10)]),
    ]));
    let after = analyze(&bundle(vec![
        frame(0, vec![named(2, "rustc", 0), named(4, "ld", 0)]),
        frame(100, vec![named(2, "rustc", 44), named(4, "ld", 5)]),
    ]));
    let cmp = compare::compare(&before, &after);
    let rustc = &cmp.by_command[0];
    assert_eq!(rustc.command, "rustc");
    assert_eq!((rustc.before_processes, rustc.after_processes), (2, 1));
    assert!((rustc.cpu_pct.unwrap() - 10.0).abs() < 1e-9, "{rustc:?}");
    assert!(!rustc.exact, "sampled rows");
    let ld = &cmp.by_command[1];
    assert_eq!((ld.command.as_str(), ld.cpu_pct), ("ld", None));
}

/// A child read at its exit folded its final I/O into its parent when reaped: the
/// parent's own row does not count it again.
#[test]
fn a_reaped_childs_io_read_at_its_exit_is_not_counted_twice() {
    let exit = |t_ns, p: ProcessSample| ThreadExit {
        t_ns,
        process: p,
        peak_rss_kib: None,
        voluntary_switches: None,
        involuntary_switches: None,
    };
    let with_thread = |mut p: ProcessSample| {
        p.threads = vec![thread(p.pid, "t", 1_000, 0, None)];
        p
    };
    let mut b = bundle(vec![frame(0, vec![proc_(10, 1, 50, 0, 1, 0, 0)])]);
    b.thread_exits = vec![
        exit(10, with_thread(proc_(20, 10, 60, 1, 1, 1000, 40))),
        exit(20, with_thread(proc_(10, 1, 50, 2, 1, 1500, 100))),
    ];
    let a = analyze(&b);
    let row = |pid| a.processes.iter().find(|p| p.pid == pid).unwrap().clone();
    assert_eq!((row(20).read_bytes, row(20).write_bytes), (1000, 40));
    assert_eq!((row(10).read_bytes, row(10).write_bytes), (500, 60));
    assert_eq!(a.read_bytes, 1500);
}

/// pid_max wraps within minutes of a busy build: a new thread of a process may get an
/// old thread's tid. Its schedstat starts again; the bundle is valid and both threads'
/// CPU counts.
#[test]
fn a_tid_reused_inside_a_process_counts_as_a_new_thread() {
    let p = |on| {
        let mut p = proc_(10, 1, 50, 0, 1, 0, 0);
        p.threads = vec![
            thread(10, "S", 1_000, 0, None),
            thread(11, "S", on, 0, None),
        ];
        p
    };
    let b = bundle(vec![
        frame(0, vec![p(0)]),
        frame(100, vec![p(40_000_000)]),
        frame(200, vec![p(20_000_000)]),
    ]);
    crate::model::validate::validate(&b).expect("a reused tid is valid");
    let a = analyze(&b);
    let t11: u64 = a
        .threads
        .iter()
        .filter(|t| t.tid == 11)
        .map(|t| t.classes.on_cpu)
        .sum();
    assert_eq!(t11, 60_000_000);
}
