use super::*;
use crate::model::{ProcessSample, ThreadSample};

fn thread(tid: i32, ns: [u64; NUM_CLASSES]) -> ThreadSample {
    ThreadSample {
        tid,
        comm: "t".into(),
        state: "S".into(),
        schedstat: None,
        syscall_nr: None,
        class_ns: Some(ClassTimes::from_array(ns)),
    }
}

fn process(pid: i32, start: u64, comm: &str, threads: Vec<ThreadSample>) -> ProcessSample {
    ProcessSample {
        pid,
        ppid: 1,
        comm: comm.into(),
        state: "S".into(),
        start_time_ticks: start,
        utime_ticks: 0,
        stime_ticks: 0,
        cutime_ticks: 0,
        cstime_ticks: 0,
        rss_pages: 1,
        num_threads: threads.len() as u64,
        io: None,
        threads,
    }
}

fn frame(t_s: u64, processes: Vec<ProcessSample>) -> Frame {
    Frame {
        t_ns: t_s * 1_000_000_000,
        processes,
        network: None,
        host_steal_ticks: None,
    }
}

fn exit(pid: i32, tid: i32, comm: &str, ns: [u64; NUM_CLASSES]) -> LifecycleEvent {
    LifecycleEvent {
        t_ns: 0,
        kind: LifecycleKind::Exit,
        pid,
        tid,
        ppid: 1,
        comm: comm.into(),
        exit_code: Some(0),
        class_ns: Some(ClassTimes::from_array(ns)),
    }
}

fn on_cpu(ns: u64) -> [u64; NUM_CLASSES] {
    let mut a = [0; NUM_CLASSES];
    a[LatencyClass::OnCpu.id() as usize] = ns;
    a
}

fn tick(r: &mut RollingTotals, f: &Frame, events: &[LifecycleEvent]) {
    r.apply(Tick {
        t_ns: f.t_ns,
        frame: f,
        events,
        histograms: &[],
        cgroups: &[],
        arch: "x86_64",
    });
}

fn total(r: &RollingTotals) -> u64 {
    r.series()
        .map(|(_, s)| s.class_ns.iter().sum::<u64>())
        .sum()
}

/// A churning machine: one long-lived server, and every second a short process with
/// one of many names that lives one to three seconds and exits with an exit record
/// carrying a bit more time than its last frame showed. The sum over the series is
/// every thread's final time, every series only grows, and the series stay within the
/// limits however many processes came and went.
#[test]
fn churn_keeps_the_totals_exact_and_the_series_bounded() {
    let config = RollingConfig {
        top_processes: 3,
        max_groups: 4,
        ..RollingConfig::default()
    };
    let mut r = RollingTotals::new(config);
    let mut want = 0u64;
    let mut dropped = 0u64;
    let mut seen: BTreeMap<SeriesKey, u64> = BTreeMap::new();
    let mut short: Vec<(i32, u64, u64)> = Vec::new(); // (pid, born, lifetime)
    for t in 1..=600u64 {
        let mut processes = vec![process(100, 1, "server", vec![thread(100, on_cpu(t * 7))])];
        let mut events = Vec::new();
        short.push((1000 + (t % 50) as i32, t, 1 + t % 3));
        short.retain(|&(pid, born, life)| {
            let age = t - born;
            let comm = format!("job{}", born % 9);
            if age < life {
                processes.push(process(
                    pid,
                    born,
                    &comm,
                    vec![thread(pid, on_cpu((age + 1) * 11))],
                ));
                true
            } else {
                // Its exit: its last frame showed age * 11, it ran 5 ns more.
                events.push(exit(pid, pid, &comm, on_cpu(age * 11 + 5)));
                want += age * 11 + 5;
                false
            }
        });
        processes.sort_by_key(|p| p.pid);
        tick(&mut r, &frame(t, processes), &events);
        // Series dropped after their retention: what they held leaves the sum.
        seen.retain(|k, v| {
            let shown = r.series().any(|(key, _)| key == k);
            if !shown {
                dropped += *v;
            }
            shown
        });
        for (key, s) in r.series() {
            let now: u64 = s.class_ns.iter().sum();
            let before = seen.insert(key.clone(), now).unwrap_or(0);
            assert!(now >= before, "{key:?} went from {before} to {now}");
        }
        let groups = r
            .series()
            .filter(|(k, _)| matches!(k, SeriesKey::Group { .. }))
            .count();
        assert!(groups <= config.max_groups + 1, "{groups}");
        assert!(r.own_series() <= config.top_processes);
        // Own series: live slots plus those in their retention window.
        let own = r
            .series()
            .filter(|(k, _)| matches!(k, SeriesKey::Process { .. }))
            .count();
        assert!(own <= config.top_processes * (2 + (EXITED_RETENTION_NS / 1_000_000_000) as usize));
    }
    // The server, still alive, has done 600 * 7.
    want += 600 * 7;
    // The short ones still alive: what their last frame showed.
    for &(_, born, _) in &short {
        want += (600 - born + 1) * 11;
    }
    let sizes: BTreeMap<_, _> = r.sizes().into_iter().collect();
    assert!(sizes["rolling_processes"] <= 10, "{sizes:?}");
    assert!(sizes["rolling_threads"] <= 10, "{sizes:?}");
    // The sum over the series still shown is below the total by exactly what the
    // dropped ones held.
    assert!(dropped > 0);
    assert_eq!(total(&r) + dropped, want);
    assert_eq!(r.stats().processes_seen, 601);
    assert!(r.stats().groups_overflowed > 0);
}

#[test]
fn the_busiest_get_slots_and_an_idle_one_gives_its_slot_back() {
    let config = RollingConfig {
        top_processes: 1,
        ..RollingConfig::default()
    };
    let mut r = RollingTotals::new(config);
    // pid 10 busy first, then idle; pid 20 idle first, then busy.
    for t in 1..=200u64 {
        let a = if t <= 5 { t * 100 } else { 500 };
        let b = if t <= 5 { 0 } else { (t - 5) * 100 };
        let f = frame(
            t,
            vec![
                process(10, 1, "first", vec![thread(10, on_cpu(a))]),
                process(20, 1, "second", vec![thread(20, on_cpu(b))]),
            ],
        );
        tick(&mut r, &f, &[]);
    }
    let own = |pid: i32, comm: &str| {
        (r.series())
            .find(|(k, _)| {
                **k == SeriesKey::Process {
                    pid,
                    comm: comm.into(),
                }
            })
            .map(|(_, s)| s.class_ns.iter().sum::<u64>())
    };
    // pid 10 had the slot from the first snapshot; pid 20 got it once pid 10 had held
    // it for MIN_TENURE_NS, and what it did before sits in its group.
    let evicted_at = 1 + MIN_TENURE_NS / 1_000_000_000;
    assert_eq!(own(10, "first"), None, "dropped after its retention");
    // From the tick of the eviction on (ticks evicted_at..=200).
    assert_eq!(own(20, "second"), Some((200 - evicted_at + 1) * 100));
    let group = (r.series())
        .find(|(k, _)| matches!(k, SeriesKey::Group { name, .. } if name == "second"))
        .map(|(_, s)| s.class_ns.iter().sum::<u64>());
    assert_eq!(group, Some((evicted_at - 6) * 100));
    assert_eq!(r.stats().slots_evicted, 1);
}

#[test]
fn histograms_are_rebucketed_exactly_and_a_reused_pid_starts_over() {
    use kernelkite_common::hist::bucket_index;
    let mut r = RollingTotals::new(RollingConfig::default());
    let hist = |pid: i32, values: &[u64]| {
        let mut buckets: BTreeMap<u32, u64> = BTreeMap::new();
        for &v in values {
            *buckets.entry(bucket_index(v) as u32).or_default() += 1;
        }
        SyscallHistogram {
            pid,
            nr: 0,
            name: "read".into(),
            count: values.len() as u64,
            total_ns: values.iter().sum(),
            max_ns: values.iter().copied().max().unwrap_or(0),
            buckets: buckets.into_iter().collect(),
            before_start: false,
        }
    };
    let f = frame(1, vec![process(7, 1, "reader", vec![thread(7, on_cpu(1))])]);
    let first = [500, 1023, 1024, 5000, 1 << 40];
    r.apply(Tick {
        t_ns: f.t_ns,
        frame: &f,
        events: &[],
        histograms: &[hist(7, &first)],
        cgroups: &[],
        arch: "x86_64",
    });
    // The pid is reused: its new histogram has fewer calls than the old one.
    let f = frame(2, vec![process(7, 2, "reader", vec![thread(7, on_cpu(1))])]);
    r.apply(Tick {
        t_ns: f.t_ns,
        frame: &f,
        events: &[],
        histograms: &[hist(7, &[2_000_000])],
        cgroups: &[],
        arch: "x86_64",
    });
    // The first process had a slot (it ran), the second folded into its group.
    let mut count = 0;
    let mut got = [0u64; COARSE_BOUNDS_NS.len() + 1];
    for h in r.series().filter_map(|(_, s)| s.syscalls.get("read")) {
        count += h.count;
        for (g, n) in got.iter_mut().zip(h.buckets_calls) {
            *g += n;
        }
    }
    assert_eq!(count, 6);
    let mut want = [0u64; COARSE_BOUNDS_NS.len() + 1];
    for v in first.iter().chain(&[2_000_000]) {
        want[COARSE_BOUNDS_NS
            .iter()
            .position(|&b| *v < b)
            .unwrap_or(COARSE_BOUNDS_NS.len())] += 1;
    }
    assert_eq!(got, want);
}

#[test]
fn a_process_seen_only_in_its_exit_record_goes_to_its_group() {
    let mut r = RollingTotals::new(RollingConfig::default());
    let f = frame(1, vec![]);
    tick(&mut r, &f, &[exit(55, 55, "blip", on_cpu(42))]);
    let (key, s) = r.series().next().unwrap();
    assert_eq!(
        *key,
        SeriesKey::Group {
            fold_by: FoldByKey::Comm,
            name: "blip".into()
        }
    );
    assert_eq!((s.class_ns.iter().sum::<u64>(), s.processes), (42, 1));
}

#[test]
fn a_much_busier_process_takes_a_slot_after_the_tenure_and_a_little_busier_one_does_not() {
    let mut r = RollingTotals::new(RollingConfig {
        top_processes: 1,
        ..RollingConfig::default()
    });
    let own = |r: &RollingTotals| -> Vec<i32> {
        (r.series())
            .filter(|(_, s)| s.exited_at_ns.is_none())
            .filter_map(|(k, _)| match k {
                SeriesKey::Process { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect()
    };
    for t in 1..=100u64 {
        // A: 10 ns a snapshot from the start; B (from t=2): 15, not twice A's; C (from
        // t=30): 100.
        let mut processes = vec![process(1, 1, "a", vec![thread(1, on_cpu(t * 10))])];
        if t >= 2 {
            processes.push(process(2, 2, "b", vec![thread(2, on_cpu((t - 1) * 15))]));
        }
        if t >= 30 {
            processes.push(process(3, 3, "c", vec![thread(3, on_cpu((t - 29) * 100))]));
        }
        tick(&mut r, &frame(t, processes), &[]);
        let holder = own(&r);
        let want = if t <= MIN_TENURE_NS / 1_000_000_000 {
            1
        } else {
            3
        };
        assert_eq!(holder, vec![want], "at {t}");
    }
    assert_eq!(r.stats().slots_evicted, 1);
}

#[test]
fn a_process_gets_a_series_only_once_it_has_lived_a_while() {
    let mut r = RollingTotals::new(RollingConfig::default());
    let mut given_at = None;
    for t in 1..=20u64 {
        let mut processes = vec![process(1, 1, "idle", vec![thread(1, [0; NUM_CLASSES])])];
        if t >= 10 {
            processes.push(process(
                2,
                10,
                "busy",
                vec![thread(2, on_cpu((t - 9) * 100))],
            ));
        }
        tick(&mut r, &frame(t, processes), &[]);
        let own = r
            .series()
            .any(|(k, _)| matches!(k, SeriesKey::Process { pid: 2, .. }));
        if own && given_at.is_none() {
            given_at = Some(t);
        }
    }
    assert_eq!(given_at, Some(10 + MIN_AGE_NS / 1_000_000_000));
}
