//! `kernelkite report`: snapshot of the HTML and of the viewer JSON for a bundle built
//! here, static checks (self-contained, no script, escaped), and a headless-Chromium
//! render whose screenshot must show a real page and whose DOM must hold every section.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use kernelkite::model::*;
use kernelkite::report::{html, viewer};
use kernelkite_common::hist::bucket_index;

/// A comm that would break the page if it were not escaped.
const NASTY_COMM: &str = "<script>alert(\"x\")</script>&'q'";

/// (pid, comm, start_ms, end_ms, CPU % of one core, RSS MiB, read KiB, write KiB per frame)
type SimProcess = (i32, &'static str, u64, u64, u64, u64, u64, u64);

/// A deterministic eBPF session of a small build: `make` forking compilers (one of them
/// twice under the same pid), with lifecycle events, syscall histograms, host network,
/// lost events, and exact latency classes.
fn build_session(backend: Backend) -> Bundle {
    let host = HostConstants {
        clock_ticks_per_sec: 100,
        page_size_bytes: 4096,
        num_cpus: 8,
        kernel_release: Some("6.1.0-test".into()),
        arch: "x86_64".into(),
        time_accounting: None,
    };
    let mut b = Bundle::new(backend, host, 100);
    b.label = Some("make -j8 (demo build)".into());
    b.root_pids = vec![1000];
    b.launched = Some(LaunchedCommand {
        argv: vec!["make".into(), "-j8".into()],
        pid: 1000,
        exit_code: Some(0),
        signal: None,
        untraced_cpu_ns: None,
        max_rss_upper_bound: false,
        rusage: Some(Rusage {
            user_us: 9_100_000,
            system_us: 1_300_000,
            max_rss_kib: 310_000,
            minor_faults: 120_000,
            major_faults: 12,
            voluntary_switches: 4000,
            involuntary_switches: 900,
        }),
    });
    // (pid, comm, start_ms, end_ms, cpu share of one core, rss MiB, read/write KiB per frame)
    let procs: &[SimProcess] = &[
        (1000, "make", 0, 4000, 5, 8, 4, 0),
        (1001, "cc1", 100, 1500, 95, 120, 64, 16),
        (1002, "cc1", 200, 2600, 90, 180, 32, 24),
        (1003, "as", 300, 900, 60, 20, 8, 40),
        (1004, NASTY_COMM, 400, 3200, 40, 60, 0, 8),
        (1003, "cc1plus", 1200, 3600, 99, 260, 128, 32),
        (1005, "ld", 3000, 3900, 70, 300, 512, 1024),
        (1006, "sh", 3400, 4000, 2, 4, 0, 0),
    ];
    let frame_ms: Vec<u64> = (0..=40).map(|i| i * 100).collect();
    // As the kernel does, `make` absorbs the final I/O counters of the children it has
    // reaped (at their last frame) into its own.
    let reaped = |pid: i32, t: u64| -> (u64, u64) {
        if pid != 1000 {
            return (0, 0);
        }
        procs
            .iter()
            .filter(|p| p.0 != 1000 && p.3 < t)
            .fold((0, 0), |(r, w), p| {
                let last = p.3 / 100 * 100; // the child's last frame
                let frames_alive = (last - p.2) / 100;
                (r + frames_alive * p.6 * 1024, w + frames_alive * p.7 * 1024)
            })
    };
    for &t in &frame_ms {
        let mut processes = Vec::new();
        for (n, &(pid, comm, start, end, share, rss_mib, rkib, wkib)) in procs.iter().enumerate() {
            if t < start || t > end {
                continue;
            }
            let age = t - start; // ms
            let cpu_ticks = age * share / 1000; // share% of a core, 100 Hz
            let frames_alive = age / 100;
            let class_ns = ClassTimes {
                on_cpu: age * share * 10_000,
                runqueue: age * (100 - share) * 2_000,
                io_wait: age * (100 - share) * 3_000,
                lock_wait: if n % 2 == 0 {
                    age * (100 - share) * 1_000
                } else {
                    0
                },
                syscall_blocked: age * (100 - share) * 2_500,
                unknown_wait: age * (100 - share) * 500,
                steal: 0,
            };
            // The thread classes must add up to wall time; here they come close.
            processes.push(ProcessSample {
                pid,
                ppid: if pid == 1000 { 900 } else { 1000 },
                comm: comm.into(),
                state: if share > 50 { "R".into() } else { "S".into() },
                start_time_ticks: 50_000 + start / 10,
                utime_ticks: cpu_ticks * 9 / 10,
                stime_ticks: cpu_ticks - cpu_ticks * 9 / 10,
                cutime_ticks: 0,
                cstime_ticks: 0,
                rss_pages: (rss_mib * 256).min(frames_alive * 64 + 256),
                num_threads: 1,
                io: Some(IoCounters {
                    rchar_bytes: frames_alive * rkib * 2048,
                    wchar_bytes: frames_alive * wkib * 1024,
                    read_syscalls: frames_alive * 10,
                    write_syscalls: frames_alive * 5,
                    read_bytes: frames_alive * rkib * 1024 + reaped(pid, t).0,
                    write_bytes: frames_alive * wkib * 1024 + reaped(pid, t).1,
                    cancelled_write_bytes: 0,
                }),
                threads: {
                    let thread = |tid: i32, name: &str, c: ClassTimes| ThreadSample {
                        tid,
                        comm: name.chars().take(15).collect(),
                        state: "S".into(),
                        schedstat: Some(Schedstat {
                            on_cpu_ns: c.on_cpu,
                            runqueue_ns: c.runqueue,
                            timeslices: frames_alive,
                        }),
                        syscall_nr: None,
                        class_ns: (backend == Backend::Ebpf).then_some(c),
                    };
                    let mut threads = vec![thread(pid, comm, class_ns)];
                    if pid == 1004 {
                        // A second thread that mostly waits on a lock.
                        let age_ns = age * 1_000_000;
                        let waiting = ClassTimes {
                            on_cpu: age_ns / 10,
                            lock_wait: age_ns - age_ns / 10,
                            ..ClassTimes::default()
                        };
                        threads.push(thread(pid + 100, "pool <2>", waiting));
                    }
                    threads
                },
            });
        }
        processes.sort_by_key(|p| p.pid);
        let net = |i: u64| {
            vec![
                NetDevCounters {
                    interface: "eth0".into(),
                    rx_bytes: 10_000_000 + i * i * 20_000,
                    rx_packets: 5000 + i * 20,
                    tx_bytes: 3_000_000 + i * 15_000,
                    tx_packets: 2000 + i * 9,
                },
                NetDevCounters {
                    interface: "lo".into(),
                    rx_bytes: 1000 + i * 100,
                    rx_packets: 10 + i,
                    tx_bytes: 1000 + i * 100,
                    tx_packets: 10 + i,
                },
            ]
        };
        b.frames.push(Frame {
            t_ns: t * 1_000_000,
            processes,
            network: Some(net(t / 100)),
            host_steal_ticks: None,
        });
    }
    if backend == Backend::Ebpf {
        b.events_lost = Some(3);
        for &(pid, comm, start, end, ..) in procs.iter().filter(|p| p.0 != 1000) {
            let ev = |t_ms: u64, kind, comm: &str, exit_code| LifecycleEvent {
                t_ns: t_ms * 1_000_000,
                kind,
                pid,
                tid: pid,
                ppid: 1000,
                comm: comm.into(),
                exit_code,
                class_ns: None,
            };
            b.lifecycle
                .push(ev(start - 40, LifecycleKind::Fork, "make", None));
            b.lifecycle
                .push(ev(start - 30, LifecycleKind::Exec, comm, None));
            if end < 4000 {
                b.lifecycle
                    .push(ev(end + 40, LifecycleKind::Exit, comm, Some(0)));
            }
        }
        // A process born and dead between two frames: only the kernel saw it.
        for (t, kind, code) in [
            (2510, LifecycleKind::Fork, None),
            (2520, LifecycleKind::Exec, None),
            (2570, LifecycleKind::Exit, Some(1)),
        ] {
            b.lifecycle.push(LifecycleEvent {
                t_ns: t * 1_000_000,
                kind,
                pid: 1010,
                tid: 1010,
                ppid: 1000,
                comm: "true".into(),
                exit_code: code,
                class_ns: None,
            });
        }
        b.lifecycle.sort_by_key(|e| e.t_ns);
        let hist = |pid: i32, nr: u32, name: &str, lat: &[(u64, u64)]| {
            let mut buckets = std::collections::BTreeMap::new();
            let (mut count, mut total, mut max) = (0, 0, 0);
            for &(ns, n) in lat {
                *buckets.entry(bucket_index(ns) as u32).or_insert(0u64) += n;
                count += n;
                total += ns * n;
                max = max.max(ns);
            }
            SyscallHistogram {
                pid,
                nr,
                name: name.into(),
                count,
                total_ns: total,
                max_ns: max,
                buckets: buckets.into_iter().collect(),
                before_start: false,
            }
        };
        let slow =
            |t_ms: u64, pid: i32, tid: i32, nr: u32, name: &str, dur_ms: u64, ret| SlowSyscall {
                t_ns: t_ms * 1_000_000,
                pid,
                tid,
                nr,
                name: name.into(),
                duration_ns: dur_ms * 1_000_000,
                ret,
                user_stack: None,
            };
        b.slow_syscalls = vec![
            slow(450, 1001, 1001, 0, "read", 2, 4096),
            slow(1300, 1003, 1003, 202, "futex", 12, 0),
            slow(2200, 1004, 1004, 202, "futex", 12, -110),
            slow(3050, 1005, 1005, 257, "openat", 60, 3),
            slow(3500, 1000, 1000, 61, "wait4", 400, 1005),
        ];
        b.syscalls = vec![
            hist(
                1001,
                0,
                "read",
                &[(900, 4000), (25_000, 300), (2_000_000, 12)],
            ),
            hist(1001, 1, "write", &[(1_500, 2500), (40_000, 40)]),
            hist(1002, 0, "read", &[(1_100, 3000), (30_000, 200)]),
            hist(1000, 61, "wait4", &[(350_000_000, 8), (900_000_000, 2)]),
            hist(1004, 202, "futex", &[(5_000, 500), (12_000_000, 30)]),
            hist(1005, 257, "openat", &[(3_000, 1200), (80_000, 20)]),
            hist(1005, 9, "mmap", &[(2_000, 800)]),
        ];
    }
    b
}

fn kernelkite() -> Command {
    Command::cargo_bin("kernelkite").expect("kernelkite binary")
}

fn write_bundle_to(dir: &Path, name: &str, bundle: &Bundle) -> PathBuf {
    let path = dir.join(name);
    write_bundle(&path, bundle).unwrap();
    path
}

#[test]
fn sample_bundles_are_valid() {
    for backend in [Backend::Ebpf, Backend::Proc] {
        let dir = tempfile::tempdir().unwrap();
        let path = write_bundle_to(dir.path(), "b.json", &build_session(backend));
        load_bundle(&path).expect("the test bundle passes validation");
    }
}

#[test]
fn html_snapshot_ebpf() {
    insta::assert_snapshot!("report_ebpf", html::render(&build_session(Backend::Ebpf)));
}

#[test]
fn html_snapshot_proc() {
    insta::assert_snapshot!("report_proc", html::render(&build_session(Backend::Proc)));
}

#[test]
fn viewer_snapshot_ebpf() {
    let bytes = viewer::render(&build_session(Backend::Ebpf));
    insta::assert_snapshot!("viewer_ebpf", String::from_utf8(bytes).unwrap());
}

#[test]
fn html_is_deterministic_self_contained_and_escaped() {
    for backend in [Backend::Ebpf, Backend::Proc] {
        let bundle = build_session(backend);
        let page = html::render(&bundle);
        assert_eq!(
            page,
            html::render(&bundle.clone()),
            "same bundle, same bytes"
        );
        let lower = page.to_ascii_lowercase();
        for needle in [
            "http://", "https://", "//cdn", "<script", "<link", "@import", "src=",
        ] {
            assert!(
                !lower.contains(needle),
                "{backend}: the page contains {needle:?}"
            );
        }
        // url( is only allowed for the in-page hatch pattern.
        assert_eq!(
            lower.matches("url(").count(),
            lower.matches("url(#kk-hatch)").count()
        );
        assert!(
            !page.contains(NASTY_COMM),
            "{backend}: comm was not escaped"
        );
        assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;q&#39;"));
        for id in ["totals", "timeline", "lifetimes", "classes", "processes"] {
            assert!(
                page.contains(&format!("<section id=\"{id}\"")),
                "{backend}: no {id}"
            );
        }
        let exact = backend == Backend::Ebpf;
        assert_eq!(page.contains("estimated</span>"), !exact, "{backend}");
        assert_eq!(
            page.contains("<section id=\"syscalls\""),
            exact,
            "{backend}"
        );
        assert!(page.contains("<section id=\"network\""));
        assert_eq!(page.contains("events were lost"), exact);
        assert_eq!(page.contains("<section id=\"slow-syscalls\""), exact);
        // The 400 ms wait4 of make is marked on make's lane.
        assert_eq!(page.contains("slow wait4 in tid 1000: 400.0 ms"), exact);
        assert!(page.contains("<section id=\"threads\""));
        assert!(page.contains("pool &lt;2&gt;"));
    }
}

/// Every fixture (as `kernelkite replay` turns it into a bundle) renders to a
/// self-contained page with its sections, and to a viewer document whose series are
/// aligned.
#[test]
fn every_fixture_renders() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no fixtures in {}", dir.display());
    for path in names {
        let bundle = kernelkite::model::fixture::load_fixture(&path).unwrap();
        let page = html::render(&bundle);
        let lower = page.to_ascii_lowercase();
        for needle in ["http://", "https://", "<script", "<link", "src="] {
            assert!(!lower.contains(needle), "{}: {needle}", path.display());
        }
        for id in ["totals", "timeline", "lifetimes", "classes"] {
            assert!(
                page.contains(&format!("<section id=\"{id}\"")),
                "{}: #{id}",
                path.display()
            );
        }
        assert_eq!(
            page.contains("<section id=\"stacks\""),
            bundle.stacks.is_some(),
            "{}: a stacks section exactly when the bundle has stacks",
            path.display()
        );
        if bundle.stacks.is_some() {
            assert!(
                page.contains("<figure class=\"flame\" id=\"fg-all\"><svg class=\"flamegraph\"")
            );
        }
        let a = kernelkite::analysis::analyze(&bundle);
        assert_eq!(
            page.contains("<section id=\"threads\""),
            a.processes.iter().any(|p| p.threads > 1),
            "{}: a threads table exactly when some process has several threads",
            path.display()
        );
        let doc: serde_json::Value = serde_json::from_slice(&viewer::render(&bundle)).unwrap();
        assert_eq!(doc["schema"], viewer::SCHEMA);
        for (name, series) in doc["series"].as_object().unwrap() {
            let n = series["values"].as_array().unwrap().len();
            assert_eq!(series["t_ns"].as_array().unwrap().len(), n, "{name}");
        }
        assert_eq!(
            doc["processes"].as_array().unwrap().is_empty(),
            bundle.frames.iter().all(|f| f.processes.is_empty()) && bundle.lifecycle.is_empty()
        );
    }
}

/// End to end on a real recording: `kernelkite run` (the /proc sampler, no privileges)
/// of a shell that starts busy children, then `report` and `viewer` of that bundle.
#[test]
fn a_real_recording_renders() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("real.json");
    let st = kernelkite()
        .args([
            "--backend",
            "proc",
            "--interval-ms",
            "10",
            "--label",
            "real <run>",
            "run",
        ])
        .arg(&bundle)
        .args([
            "--",
            "sh",
            "-c",
            "for n in 1 2; do sh -c 'i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done'; done",
        ])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let page_path = dir.path().join("real.html");
    let st = kernelkite()
        .arg("report")
        .arg(&bundle)
        .arg("-o")
        .arg(&page_path)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert!(page.contains("<h1>real &lt;run&gt;</h1>"));
    assert!(page.contains("/proc sampling"));
    assert!(page.contains("exit code 0"));
    assert!(page.contains("estimated</span>"));
    // The shell and its busy children each have a lane.
    let lanes = page.matches("class=\"lane-label\"").count();
    assert!(lanes >= 2, "{lanes} lanes");
    assert!(!page.to_ascii_lowercase().contains("http"));

    let st = kernelkite().arg("viewer").arg(&bundle).output().unwrap();
    assert!(st.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let cores: Vec<f64> = doc["series"]["cpu_cores"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(!cores.is_empty());
    assert!(
        cores.iter().any(|&c| c > 0.0),
        "busy children but no CPU: {cores:?}"
    );
    assert!(cores.iter().all(|&c| c.is_finite() && c >= 0.0));
}

#[test]
fn report_command_writes_the_page_and_fails_cleanly_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = build_session(Backend::Ebpf);
    let input = write_bundle_to(dir.path(), "session.json", &bundle);
    let out = dir.path().join("report.html");
    let st = kernelkite()
        .arg("report")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        html::render(&bundle)
    );

    // A broken bundle: one line on stderr, non-zero exit, no file (and no temp file).
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        "{\"format\": \"kernelkite-bundle\", \"format_version\": 1",
    )
    .unwrap();
    let out2 = dir.path().join("bad.html");
    let st = kernelkite()
        .arg("report")
        .arg(&bad)
        .arg("-o")
        .arg(&out2)
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("bad.json"), "{err}");
    assert!(!out2.exists());
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["bad.json", "report.html", "session.json"]);

    // A valid bundle and an unwritable destination: an error, not a panic.
    let st = kernelkite()
        .arg("report")
        .arg(&input)
        .arg("-o")
        .arg(dir.path().join("missing-dir").join("r.html"))
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert_eq!(
        String::from_utf8_lossy(&st.stderr)
            .trim_end()
            .lines()
            .count(),
        1
    );
}

/// The stacks section of a replayed fixture in Chromium: the flame graphs parse as SVG
/// inside the page, keep their hover titles, draw, and log nothing (inferno's script and
/// its `onload` handler must be gone).
#[test]
fn stacks_report_renders_in_headless_chromium() {
    let Some(bin) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!("chromium is not installed, but CI is set (apt-get install chromium)");
        }
        eprintln!("SKIP stacks_report_renders_in_headless_chromium: no chromium found");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/stacks-demo.json");
    let bundle = work.path().join("stacks.json");
    let page = work.path().join("report.html");
    for args in [
        vec!["replay".as_ref(), fixture.as_os_str(), bundle.as_os_str()],
        vec![
            "report".as_ref(),
            bundle.as_os_str(),
            "-o".as_ref(),
            page.as_os_str(),
        ],
    ] {
        let st = kernelkite().args(args).output().unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    }
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let profile = tempfile::tempdir().unwrap();
    let mut c = chromium_command(&bin, profile.path());
    c.args(["--dump-dom", &url]);
    let out = run_with_timeout(c, 120);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && dom.contains("</html>"));
    assert!(dom.contains("id=\"stacks\""), "no #stacks in the DOM");
    assert!(
        !dom.contains("<script"),
        "a script element exists in the DOM"
    );
    // The graph of every class and one per class with stacks (5 in the fixture).
    assert_eq!(dom.matches("<svg class=\"flamegraph\"").count(), 6);
    assert_eq!(dom.matches("<details class=\"flame\"").count(), 5);
    for id in ["fg-all", "fg-lock_wait", "fg-io_wait", "fg-on_cpu"] {
        assert!(dom.contains(&format!("id=\"{id}\"")), "no #{id}");
    }
    assert!(dom.contains("<title>kv::Cache::get(std::string const&amp;) ("));
    assert!(dom.contains("<title>lock_wait ("));
    assert!(dom.contains("ext4_sync_file"));

    let stats = screenshot_of(&bin, &page, "1280,4000", "stacks-report");
    assert_eq!((stats.width, stats.height), (1280, 4000));
}

// ---------------------------------------------------------------------------------------
// Headless Chromium

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KERNELKITE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// Chromium with flags that keep it off the network and away from the user's profile.
fn chromium_command(bin: &Path, profile: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ]);
    c.arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Run with a timeout, so a wedged browser fails the test instead of hanging CI.
fn run_with_timeout(mut cmd: Command, secs: u64) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chromium");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    std::process::Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Screenshot `page` at `window` ("W,H"): Chromium must succeed and log no problem of
/// the page (console messages, uncaught errors, failed loads: it has no script and
/// nothing to load), and the picture must look drawn. The page and the picture are
/// copied to target/tmp/html_report/NAME.{html,png} for a person to see.
fn screenshot_of(bin: &Path, page: &Path, window: &str, name: &str) -> ScreenshotStats {
    let work = tempfile::tempdir().unwrap();
    let png_path = work.path().join("shot.png");
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let mut c = chromium_command(bin, &work.path().join("profile"));
    c.arg(format!("--screenshot={}", png_path.display())).args([
        &format!("--window-size={window}"),
        "--enable-logging=stderr",
        "--v=0",
        &url,
    ]);
    let out = run_with_timeout(c, 120);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "chromium --screenshot failed: {stderr}"
    );
    let problems = page_problems(&stderr);
    assert!(
        problems.is_empty(),
        "chromium logged page problems: {problems:#?}"
    );
    let stats = ScreenshotStats::of(&png_path);
    eprintln!("screenshot {name}: {stats:?}");
    let shown = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("html_report");
    if std::fs::create_dir_all(&shown).is_ok() {
        let _ = std::fs::copy(page, shown.join(format!("{name}.html")));
        let _ = std::fs::copy(&png_path, shown.join(format!("{name}.png")));
    }
    if let Err(why) = stats.looks_drawn() {
        panic!(
            "the screenshot looks blank: {why} (see {})",
            shown.display()
        );
    }
    stats
}

/// What a screenshot shows, roughly.
#[derive(Debug)]
struct ScreenshotStats {
    width: u32,
    height: u32,
    /// Distinct RGB colours.
    colours: usize,
    /// Share of pixels darker than near-white (text, lines, fills).
    drawn: f64,
    /// Share of clearly coloured pixels (chart fills), as opposed to greys.
    coloured: f64,
}

impl ScreenshotStats {
    fn of(png_path: &Path) -> ScreenshotStats {
        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(png_path).expect("screenshot written"),
        ));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        assert!(
            channels >= 3,
            "unexpected PNG colour type {:?}",
            info.color_type
        );
        let mut colours = std::collections::BTreeSet::new();
        let (mut drawn, mut coloured) = (0usize, 0usize);
        for px in buf[..info.buffer_size()].chunks_exact(channels) {
            let (r, g, b) = (px[0], px[1], px[2]);
            colours.insert((r, g, b));
            if r < 235 || g < 235 || b < 235 {
                drawn += 1;
            }
            if r.max(g).max(b) - r.min(g).min(b) > 60 {
                coloured += 1;
            }
        }
        let total = (info.width as usize * info.height as usize).max(1) as f64;
        ScreenshotStats {
            width: info.width,
            height: info.height,
            colours: colours.len(),
            drawn: drawn as f64 / total,
            coloured: coloured as f64 / total,
        }
    }

    /// Whether this looks like the report rather than a blank or unstyled page.
    fn looks_drawn(&self) -> Result<(), String> {
        if self.colours < 200 {
            return Err(format!("only {} distinct colours", self.colours));
        }
        if self.drawn < 0.03 {
            return Err(format!(
                "only {:.2}% of the pixels are drawn",
                self.drawn * 100.0
            ));
        }
        if self.coloured < 0.005 {
            return Err(format!(
                "only {:.2}% of the pixels are coloured",
                self.coloured * 100.0
            ));
        }
        Ok(())
    }
}

/// Lines of Chromium's log (`--enable-logging=stderr --v=0`) that report a problem of
/// the page: a console message (`INFO:CONSOLE:1] "..."`), an uncaught exception, a failed
/// load.
fn page_problems(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|line| {
            let l = line.to_ascii_lowercase();
            l.contains(":console")
                || l.contains("console(")
                || l.contains("uncaught")
                || l.contains("net::err_")
        })
        .map(str::to_string)
        .collect()
}

/// The log check above must be able to fail: a page that logs to the console and throws
/// is caught.
#[test]
fn chromium_console_problems_are_detected() {
    let Some(bin) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!("chromium is not installed, but CI is set (apt-get install chromium)");
        }
        eprintln!("SKIP chromium_console_problems_are_detected: no chromium found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("bad.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><p>x</p>\
         <script>console.error(\"boom\"); notDefined();</script></body></html>",
    )
    .unwrap();
    let profile = tempfile::tempdir().unwrap();
    let mut c = chromium_command(&bin, profile.path());
    c.arg(format!(
        "--screenshot={}",
        dir.path().join("bad.png").display()
    ))
    .args(["--window-size=400,300", "--enable-logging=stderr", "--v=0"])
    .arg(format!("file://{}", page.display()));
    let out = run_with_timeout(c, 120);
    let problems = page_problems(&String::from_utf8_lossy(&out.stderr));
    assert!(
        problems.iter().any(|l| l.contains("boom")),
        "console.error was not detected: {problems:#?}"
    );
    assert!(
        problems.iter().any(|l| l.contains("notDefined")),
        "the uncaught exception was not detected: {problems:#?}"
    );
    // And the blank-page check rejects this nearly empty page.
    let stats = ScreenshotStats::of(&dir.path().join("bad.png"));
    assert!(
        stats.looks_drawn().is_err(),
        "a blank page passed: {stats:?}"
    );
}

#[test]
fn report_renders_in_headless_chromium() {
    let Some(bin) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!(
                "chromium is not installed, but CI is set: install the Debian package \
                 `chromium` (apt-get install chromium) or set KERNELKITE_CHROMIUM"
            );
        }
        eprintln!("SKIP report_renders_in_headless_chromium: no chromium found (set CI to fail)");
        return;
    };
    // Work in a private directory (concurrent runs share target/); the page and the
    // screenshot are copied to target/tmp/html_report/ at the end for a person to see.
    let work = tempfile::tempdir().unwrap();
    let keep = work.path();
    let bundle_path = write_bundle_to(keep, "session.json", &build_session(Backend::Ebpf));
    let page = keep.join("report.html");
    let st = kernelkite()
        .arg("report")
        .arg(&bundle_path)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let url = format!("file://{}", page.canonicalize().unwrap().display());

    // 1. The DOM as Chromium parsed it: every section, the escaped comm as text, and no
    //    element the page did not write (a parse accident would add or drop some).
    let profile = tempfile::tempdir().unwrap();
    let mut c = chromium_command(&bin, profile.path());
    c.args(["--dump-dom", &url]);
    let out = run_with_timeout(c, 120);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium --dump-dom failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for id in [
        "totals",
        "timeline",
        "lifetimes",
        "classes",
        "processes",
        "threads",
        "syscalls",
        "slow-syscalls",
        "network",
    ] {
        assert!(
            dom.contains(&format!("id=\"{id}\"")),
            "the rendered DOM has no #{id}"
        );
    }
    assert!(
        !dom.contains("<script"),
        "a script element exists in the DOM"
    );
    assert!(
        dom.contains("&lt;script&gt;alert"),
        "the nasty comm is not text in the DOM"
    );
    assert!(
        dom.matches("<svg").count() >= 3,
        "the charts did not parse as SVG"
    );
    assert!(dom.contains("Where the time went"));

    // 2. A screenshot: the page must draw many colours over a large non-white area.
    let stats = screenshot_of(&bin, &page, "1280,2000", "report");
    assert_eq!((stats.width, stats.height), (1280, 2000));
}
