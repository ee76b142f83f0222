use super::charts::*;
use super::lanes::*;
use super::*;

use crate::model::{Frame, ProcessSample};

fn long_bundle(frames: u64) -> Bundle {
    let mut b = Bundle::new(Backend::Proc, crate::model::test_builders::host(), 10);
    for i in 0..frames {
        let p = ProcessSample {
            pid: 7,
            ppid: 1,
            comm: "busy".into(),
            state: "R".into(),
            start_time_ticks: 1,
            utime_ticks: i,
            stime_ticks: 0,
            cutime_ticks: 0,
            cstime_ticks: 0,
            rss_pages: if i == frames / 3 { 100_000 } else { 1000 },
            num_threads: 1,
            io: None,
            threads: Vec::new(),
        };
        b.frames.push(Frame {
            t_ns: i * 10_000_000,
            processes: vec![p],
            network: None,
            host_steal_ticks: None,
        });
    }
    b
}

#[test]
fn long_sessions_are_downsampled_keeping_means_and_peaks() {
    let b = long_bundle(20_000);
    let tl = extract(&b, None);
    let xs = XScale::new(&tl);
    let cpu = downsample_mean(&tl.cpu_cores, &xs);
    assert!(
        cpu.len() <= MAX_POINTS && cpu.len() >= MAX_POINTS / 2,
        "{}",
        cpu.len()
    );
    // One tick per 10 ms at 100 Hz: exactly one core throughout.
    assert!(cpu.values.iter().all(|&v| (v - 1.0).abs() < 1e-9));
    assert_eq!(cpu.start_ns[0], 0);
    assert_eq!(*cpu.end_ns.last().unwrap(), tl.end_ns);
    let rss = downsample_max(&tl.rss_bytes, &xs);
    assert!(rss.t_ns.len() <= MAX_POINTS);
    assert_eq!(
        rss.values.iter().max(),
        Some(&(100_000 * 4096)),
        "the peak survives"
    );
    let page = render(&b);
    assert!(
        page.len() < 400_000,
        "page of a 20k-frame session is {} bytes",
        page.len()
    );
}

/// Bundles no validator would accept: times out of order and repeated, counters that
/// go backwards or sit at u64::MAX, pid reuse, zero clock rate and page size,
/// lifecycle events in any order, slow syscalls past the end of time.
fn arbitrary_bundle(seed: u64) -> Bundle {
    use crate::model::{IoCounters, LifecycleEvent, LifecycleKind, NetDevCounters, SlowSyscall};
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n.max(1)
    };
    let pick = |r: u64| match r {
        0 => 0,
        1 => u64::MAX,
        2 => u64::MAX / 2,
        r => r * 1000,
    };
    let host = crate::model::HostConstants {
        clock_ticks_per_sec: next(3) * 100,
        page_size_bytes: next(2) * 4096,
        num_cpus: next(5) as u32,
        kernel_release: None,
        arch: "x86_64".into(),
        time_accounting: None,
    };
    let backend = if next(2) == 0 {
        Backend::Proc
    } else {
        Backend::Ebpf
    };
    let mut b = Bundle::new(backend, host, next(200));
    for _ in 0..next(12) {
        let mut processes = Vec::new();
        for _ in 0..next(5) {
            processes.push(ProcessSample {
                pid: next(4) as i32,
                ppid: next(4) as i32,
                comm: "<&\"'>\u{7}".into(),
                state: "R".into(),
                start_time_ticks: next(3),
                utime_ticks: pick(next(6)),
                stime_ticks: pick(next(6)),
                cutime_ticks: 0,
                cstime_ticks: 0,
                rss_pages: pick(next(6)),
                num_threads: 1,
                io: (next(2) == 0).then(|| IoCounters {
                    read_bytes: pick(next(6)),
                    write_bytes: pick(next(6)),
                    ..IoCounters::default()
                }),
                threads: Vec::new(),
            });
        }
        let network = (next(2) == 0).then(|| {
            vec![NetDevCounters {
                interface: "eth0".into(),
                rx_bytes: pick(next(6)),
                rx_packets: 0,
                tx_bytes: pick(next(6)),
                tx_packets: 0,
            }]
        });
        b.frames.push(Frame {
            t_ns: pick(next(8)),
            processes,
            network,
            host_steal_ticks: None,
        });
    }
    for _ in 0..next(10) {
        let kind = match next(3) {
            0 => LifecycleKind::Fork,
            1 => LifecycleKind::Exec,
            _ => LifecycleKind::Exit,
        };
        let pid = next(4) as i32;
        b.lifecycle.push(LifecycleEvent {
            t_ns: pick(next(8)),
            kind,
            pid,
            tid: if next(3) == 0 { pid + 1 } else { pid },
            ppid: next(4) as i32,
            comm: "x".into(),
            exit_code: Some(1),
            class_ns: None,
        });
    }
    for _ in 0..next(4) {
        b.slow_syscalls.push(SlowSyscall {
            t_ns: pick(next(8)),
            pid: next(4) as i32,
            tid: 0,
            nr: 0,
            name: "read".into(),
            duration_ns: pick(next(6)),
            ret: -1,
            user_stack: None,
        });
    }
    b
}

#[test]
fn arbitrary_bundles_render_without_panicking() {
    for seed in 0..400 {
        let b = arbitrary_bundle(seed);
        let page = render(&b);
        assert!(page.ends_with("</html>\n"), "seed {seed}");
        assert!(
            !page.contains("\u{7}"),
            "seed {seed}: a control character got through"
        );
        let bad_number = page
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
            .find(|w| matches!(*w, "NaN" | "inf" | "-inf"));
        assert_eq!(bad_number, None, "seed {seed}");
        let doc = crate::report::viewer::render(&b);
        serde_json::from_slice::<serde_json::Value>(&doc).unwrap();
    }
}

#[test]
fn lanes_follow_the_process_tree() {
    let mut b = long_bundle(3);
    let template = b.frames[0].processes[0].clone();
    let sample = |pid: i32, ppid: i32| ProcessSample {
        pid,
        ppid,
        comm: format!("p{pid}").into(),
        ..template.clone()
    };
    b.frames[0].processes = vec![sample(10, 1), sample(20, 1)];
    b.frames[1].processes = vec![sample(10, 1), sample(11, 10), sample(20, 1)];
    b.frames[2].processes = vec![sample(10, 1), sample(11, 10), sample(12, 11), sample(20, 1)];
    let a = analyze(&b);
    let tl = extract(&b, Some(&a));
    let (order, depth) = tree_order(&a, &tl);
    let mut lanes: Vec<usize> = (0..tl.processes.len()).collect();
    lanes.sort_by_key(|&i| order[i]);
    let shown: Vec<(i32, usize)> = lanes
        .iter()
        .map(|&i| (tl.processes[i].pid, depth[i]))
        .collect();
    assert_eq!(shown, [(10, 0), (11, 1), (12, 2), (20, 0)]);
}

#[test]
fn a_single_frame_has_no_charts_but_its_processes() {
    let page = render(&long_bundle(1));
    assert!(page.contains("single instant"));
    assert!(!page.contains("aria-label=\"Timeline of CPU"));
    assert!(page.contains("aria-label=\"Process lifetimes\""));
    assert!(page.contains("7 busy"));
}

#[test]
fn escapes_markup_quotes_and_controls() {
    assert_eq!(
        esc("a<b>&\"c'\u{1}\n"),
        "a&lt;b&gt;&amp;&quot;c&#39;\\u{1}\\n"
    );
}

#[test]
fn formats() {
    assert_eq!(fmt_ns_compact(999), "999 ns");
    assert_eq!(fmt_ns_compact(1_500), "1.5 µs");
    assert_eq!(fmt_ns_compact(2_500_000), "2.5 ms");
    assert_eq!(fmt_ns_compact(1_234_567_890), "1.235 s");
    assert_eq!(fmt_ns_compact(125_000_000_000), "2 min 5.0 s");
    assert_eq!(fmt_count(0), "0");
    assert_eq!(fmt_count(999), "999");
    assert_eq!(fmt_count(120_000), "120\u{202F}000");
    assert_eq!(fmt_count(1_234_567), "1\u{202F}234\u{202F}567");
    assert_eq!(fmt_bytes_compact(1023), "1023 B");
    assert_eq!(fmt_bytes_compact(1536), "1.5 KiB");
    assert_eq!(fmt_bytes_compact(300 * 1024 * 1024), "300 MiB");
    assert_eq!(nice_ceil(3.2), 4.0);
    assert_eq!(nice_ceil(1.0), 1.0);
    assert_eq!(nice_step(130.0), 200.0);
    assert_eq!(fmt_tick(1_500_000_000, 500_000_000), "1.5 s");
    assert_eq!(fmt_tick(2_000_000_000, 1_000_000_000), "2 s");
    assert_eq!(fmt_tick(250_000, 50_000), "0.25 ms");
}
