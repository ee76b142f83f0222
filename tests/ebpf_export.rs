//! Real-kernel test of `kernelkite trace --serve`: trace a workload, scrape /metrics
//! with a plain TCP GET while it runs, and check the exposition with `promtool`.

#[path = "support/ebpf.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use std::sync::mpsc;

use support::{ebpf_ready, kernelkite_bin, GatedWorkload, RunningTrace};

/// A free loopback port (bound, then released for kernelkite to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(port: u16) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn serve_exposes_live_metrics_that_promtool_accepts() {
    let Some(_serial) = ebpf_ready("serve_exposes_live_metrics_that_promtool_accepts") else {
        return;
    };
    let promtool = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !promtool {
        return support::skip::required(
            "serve_exposes_live_metrics_that_promtool_accepts",
            "promtool is missing (Debian's prometheus)",
        );
    }
    // Long enough for both scrapes on a loaded machine; checked to be alive after them.
    let mut workload = GatedWorkload::spawn(&["futex_stress", "--threads", "4", "--seconds", "8"]);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let trace = RunningTrace::start(&[workload.pid], &["--serve", &addr]);
    workload.go();
    // Scrape while the workload runs until its lock_wait shows up (snapshots every 50 ms).
    let class_line = format!(
        "kernelkite_process_latency_class_seconds_total{{pid=\"{}\",comm=\"kk-workload\",class=\"lock_wait\"",
        workload.pid
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let response = loop {
        let r = scrape(port).unwrap_or_default();
        let seconds = r
            .lines()
            .find(|l| l.starts_with(&class_line))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        if seconds > 0.0 {
            break r;
        }
        assert!(Instant::now() < deadline, "no lock_wait in /metrics: {r}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    // Every process lives in a cgroup: its series carry it (docs/EXPORTS.md).
    assert!(body.contains(&format!("{class_line},cgroup=\"/")), "{body}");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(
        body.contains("kernelkite_syscall_latency_seconds_bucket{"),
        "{body}"
    );
    assert!(body.contains("syscall=\"futex\""), "{body}");
    assert!(body.contains("kernelkite_events_lost_total"), "{body}");
    // Every thread's time is counted while it passes, waits in progress included: a
    // second later, the process's class seconds over the session's are its five
    // threads, less the few ms its four contenders were not yet made after attach.
    // (Live series never go down: an open interval a frame counted in one class and
    // that closed in another stays in both, by at most a few hundred µs per thread.)
    let series_value = |text: &str, prefix: &str| -> Vec<f64> {
        (text.lines())
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect()
    };
    let session_of = |text: &str| series_value(text, "kernelkite_session_duration_seconds ")[0];
    let first_session = session_of(body);
    let deadline = Instant::now() + Duration::from_secs(30);
    let later = loop {
        let r = scrape(port).unwrap();
        if session_of(&r) >= first_session + 1.0 {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "the session did not advance 1 s: {r}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        workload.child.try_wait().unwrap().is_none(),
        "the workload ended before the second scrape"
    );
    let series_value = |prefix: &str| series_value(&later, prefix);
    let class_prefix = format!(
        "kernelkite_process_latency_class_seconds_total{{pid=\"{}\",",
        workload.pid
    );
    let classes: f64 = series_value(&class_prefix).iter().sum();
    let session = series_value("kernelkite_session_duration_seconds ")[0];
    let threads = classes / session;
    assert!(
        (4.8..=5.0 * 1.001).contains(&threads),
        "{threads} threads: {later}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live.prom");
    std::fs::write(&file, body).unwrap();
    let out = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.trim().is_empty(),
        "promtool: {text}\n{body}"
    );
    workload.finish();
    let traced = trace.finish();
    assert!(traced
        .stderr
        .iter()
        .any(|l| l.contains(&format!("serving metrics at http://{addr}/metrics"))));
    // Once the trace has stopped the port is closed.
    assert!(scrape(port).is_err());
}

/// A churny trace: `sh` runs 300 `/bin/true`s, then waits. `--serve` has series of their
/// own for the live `sh` only; the 300 exited processes add up in `pid="exited"`, and
/// the execve counts over the series are the 300 execs.
#[test]
fn serve_folds_exited_processes_into_one_series_and_keeps_the_totals() {
    let name = "serve_folds_exited_processes_into_one_series_and_keeps_the_totals";
    let Some(_serial) = ebpf_ready(name) else {
        return;
    };
    const RUNS: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let script = format!(
        "read _go; i=0; while [ $i -lt {RUNS} ]; do /bin/true; i=$((i+1)); done; : > '{}'; read _end || :",
        done.display()
    );
    let mut sh = Command::new("sh")
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = sh.stdin.take().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let trace = RunningTrace::start(&[sh.id() as i32], &["--follow", "--serve", &addr]);
    stdin.write_all(b"go\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the loop did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every child has been reaped: once a snapshot has seen them go, all are folded. The
    // exit events arrive with the ring buffer, the histograms with the next snapshot's
    // map read: a scrape in between counts the processes before their execs.
    let execs_of = |body: &str| -> f64 {
        (body.lines())
            .filter(|l| {
                l.starts_with("kernelkite_syscall_latency_seconds_count{")
                    && l.contains("syscall=\"execve\"")
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    let body = loop {
        let r = scrape(port).unwrap_or_default();
        let exited = (r.lines())
            .find_map(|l| l.strip_prefix("kernelkite_exited_processes_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if exited >= RUNS && execs_of(&r) >= RUNS as f64 {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "not {RUNS} exited processes: {r}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut pids = std::collections::BTreeSet::new();
    for line in body.lines().filter(|l| l.starts_with("kernelkite_")) {
        if let Some((_, rest)) = line.split_once("pid=\"") {
            pids.insert(rest.split('"').next().unwrap().to_string());
        }
    }
    let execs = execs_of(&body);
    let want: std::collections::BTreeSet<String> =
        [sh.id().to_string(), "exited".to_string()].into();
    assert_eq!(pids, want, "{body}");
    assert_eq!(execs, RUNS as f64, "{body}");
    // The end of input ends the sh (its `read` fails, `:` succeeds), and with it the trace.
    drop(stdin);
    assert!(sh.wait().unwrap().success());
    let traced = trace.finish();
    let bundle_execs: u64 = (traced.bundle.syscalls.iter())
        .filter(|h| h.name == "execve")
        .map(|h| h.count)
        .sum();
    assert_eq!(bundle_execs, RUNS);
}

/// A real trace with short-lived children and slow syscalls, exported in every format
/// and checked by the same consumers as the fixtures' exports.
#[test]
fn a_real_trace_exports_in_every_format() {
    use kernelkite::export::{chrome_trace, render, ExportOptions, Format};
    let Some(_serial) = ebpf_ready("a_real_trace_exports_in_every_format") else {
        return;
    };
    let (traced, _) = support::trace_workload(
        &[
            "exec_storm",
            "--count",
            "6",
            "--parallel",
            "2",
            "--self-exec",
        ],
        &["--follow", "--min-latency-us", "200"],
    );
    let (b, a) = (&traced.bundle, &traced.analysis);
    assert!(
        a.processes.len() > 3,
        "children traced: {}",
        a.processes.len()
    );
    assert!(!b.slow_syscalls.is_empty(), "no slow syscall recorded");
    let options = ExportOptions {
        start_unix_ns: 1_700_000_000_000_000_000,
    };
    let out = |f: Format| render(b, a, f, options).unwrap();

    let doc: serde_json::Value = serde_json::from_slice(&out(Format::ChromeTrace)).unwrap();
    let violations = chrome_trace::rule_violations(&doc);
    assert!(violations.is_empty(), "{violations:#?}");

    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("m.prom");
    std::fs::write(&prom, out(Format::Prometheus)).unwrap();
    let check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&prom).unwrap())
        .output();
    match check {
        Ok(o) => assert!(
            o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
            "promtool: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => assert!(std::env::var_os("CI").is_none(), "promtool: {e}"),
    }

    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/support/otlp_check.py");
    for (kind, json, proto) in [
        ("metrics", Format::Otlp, Format::OtlpProto),
        ("traces", Format::OtlpTraces, Format::OtlpTracesProto),
    ] {
        let (j, p) = (dir.path().join("o.json"), dir.path().join("o.pb"));
        std::fs::write(&j, out(json)).unwrap();
        std::fs::write(&p, out(proto)).unwrap();
        let o = Command::new("python3")
            .arg(&script)
            .arg(kind)
            .arg(&j)
            .arg(&p)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        if text.contains("ModuleNotFoundError") && std::env::var_os("CI").is_none() {
            eprintln!("skipped the OTLP check: {text}");
            continue;
        }
        assert!(o.status.success(), "{kind}: {text}");
    }
}

/// `kernelkite trace --pid PID --serve 127.0.0.1:PORT -o BUNDLE` with at most
/// `nofile` open files; returns once it serves, with its stderr lines so far.
fn serving_trace(
    pid: i32,
    port: u16,
    bundle: &std::path::Path,
    nofile: u64,
) -> (std::process::Child, mpsc::Receiver<String>) {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(kernelkite_bin());
    cmd.args(["trace", "--pid", &pid.to_string(), "--interval-ms", "50"])
        .args(["--serve", &format!("127.0.0.1:{port}"), "-o"])
        .arg(bundle)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and only affects the child.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.contains("serving metrics at") => return (child, rx),
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("trace never started serving");
            }
        }
    }
}

/// Wait (at most 60 s) for the trace to stop by itself.
fn wait_for_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("trace did not stop after its target exited");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 341 idle connections to --serve under `ulimit -n 256` used to take every file
/// descriptor, and the trace died on its next /proc read with no bundle. Connections
/// are capped: the trace runs to its end and writes the bundle.
#[test]
fn idle_connections_under_a_low_fd_limit_do_not_end_the_trace() {
    let Some(_serial) = ebpf_ready("idle_connections_under_a_low_fd_limit_do_not_end_the_trace")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("idle.json");
    let mut workload = GatedWorkload::spawn(&["futex_stress", "--threads", "2", "--seconds", "3"]);
    let port = free_port();
    let (mut trace, lines) = serving_trace(workload.pid, port, &bundle, 256);
    // Held open, sending nothing, reconnected as the server drops them.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
            let mut held: Vec<TcpStream> = Vec::new();
            let mut most = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                held.retain(|s| {
                    let mut b = [0u8; 1];
                    s.set_nonblocking(true).unwrap();
                    matches!(s.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                });
                while held.len() < 341 {
                    match TcpStream::connect_timeout(&addr, Duration::from_millis(50)) {
                        Ok(s) => held.push(s),
                        Err(_) => break,
                    }
                }
                most = most.max(held.len());
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    workload.go();
    workload.finish();
    let status = wait_for_exit(&mut trace);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let most = holder.join().unwrap();
    let stderr: Vec<String> = lines.try_iter().collect();
    assert!(status.success(), "trace failed: {status}: {stderr:?}");
    assert!(most >= 100, "only {most} connections were held open");
    let b = kernelkite::model::load_bundle(&bundle).expect("the bundle was written");
    assert!(!b.frames.is_empty());
}

/// A client that sends its request a byte at a time does not hold up other scrapes.
#[test]
fn a_slow_client_does_not_block_other_scrapes() {
    let Some(_serial) = ebpf_ready("a_slow_client_does_not_block_other_scrapes") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("slow.json");
    let mut workload = GatedWorkload::spawn(&["futex_stress", "--threads", "2", "--seconds", "2"]);
    let port = free_port();
    let (mut trace, _lines) = serving_trace(workload.pid, port, &bundle, 1024);
    workload.go();
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(b"GET /met").unwrap();
    let answer = scrape(port).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    // The slow request is still open: the scrape did not wait for it to time out.
    slow.write_all(b"r").unwrap();
    slow.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    assert!(
        matches!(slow.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the server already answered or closed the slow request"
    );
    workload.finish();
    assert!(wait_for_exit(&mut trace).success());
    // The frames the scrape was rendered from are still the session's (they are lent
    // to the scrape, not copied): the bundle starts before the scrape's time.
    let scraped_ns = answer
        .lines()
        .find(|l| l.starts_with("kernelkite_session_duration_seconds "))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|s| (s * 1e9).round() as u64) // 0.004027665 s * 1e9 is 4027664.99…
        .expect("a session duration in the scrape");
    let b = kernelkite::model::load_bundle(&bundle).unwrap();
    assert!(
        b.frames[0].t_ns <= scraped_ns && b.frames.len() > 1,
        "first frame at {} ns, scraped at {scraped_ns} ns",
        b.frames[0].t_ns
    );
}

/// A process stuck in one call since before tracing began (`sleep` in
/// `clock_nanosleep`): a live scrape shows its syscall_blocked time growing as it
/// passes, and the call itself, still running, with how long it has run so far
/// (issue 22: "in every live snapshot").
#[test]
fn serve_shows_a_process_stuck_in_one_call_while_it_is_stuck() {
    let Some(_serial) = ebpf_ready("serve_shows_a_process_stuck_in_one_call_while_it_is_stuck")
    else {
        return;
    };
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id() as i32;
    // It blocks before the trace attaches: exec'd, and asleep.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        if stat.contains("(sleep) S ") {
            break;
        }
        assert!(Instant::now() < deadline, "sleep never slept: {stat}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let trace = RunningTrace::start(&[pid], &["--serve", &addr]);
    let value = |body: &str, prefix: &str| -> f64 {
        (body.lines())
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    let blocked = format!(
        "kernelkite_process_latency_class_seconds_total{{pid=\"{pid}\",comm=\"sleep\",class=\"syscall_blocked\""
    );
    let calls = format!(
        "kernelkite_syscalls_in_progress{{pid=\"{pid}\",comm=\"sleep\",syscall=\"clock_nanosleep\""
    );
    let longest = format!(
        "kernelkite_syscall_in_progress_longest_seconds{{pid=\"{pid}\",comm=\"sleep\",syscall=\"clock_nanosleep\""
    );
    // Two scrapes at least a second apart (in the snapshots' own time), both while it
    // sleeps: the first once the call shows with over 0.3 s of it.
    let session = |body: &str| value(body, "kernelkite_session_duration_seconds ");
    let scrape_when = |done: &dyn Fn(&str) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let body = scrape(port).unwrap();
            if done(&body) {
                return body;
            }
            assert!(Instant::now() < deadline, "30 s of scrapes: {body}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let first = scrape_when(&|b| value(b, &calls) == 1.0 && value(b, &blocked) > 0.3);
    let second = scrape_when(&|b| session(b) >= session(&first) + 1.2);
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "sleep 30 ended before the second scrape"
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let _ = trace.finish();
    for body in [&first, &second] {
        assert_eq!(value(body, &calls), 1.0, "{body}");
        assert!(value(body, &blocked) > 0.3, "{body}");
        // The call's time so far is the sleep class's time so far (both since attach).
        let (b, l) = (value(body, &blocked), value(body, &longest));
        assert!((b - l).abs() < 0.1, "blocked {b} s, call {l} s: {body}");
    }
    let grew = value(&second, &blocked) - value(&first, &blocked);
    assert!(grew > 1.0, "syscall_blocked grew {grew} s between scrapes");
}
