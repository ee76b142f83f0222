//! `kernelkite agent` on a real kernel (root): its /metrics count waits still in
//! progress (a process's class rates add up to its threads), a real Prometheus server
//! scrapes it and stores what it serves, `go tool pprof` reads its profile endpoint,
//! and SIGTERM leaves none of its BPF programs loaded.

#[path = "support/ebpf.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{ebpf_ready, kernelkite_bin, skip, stacks_refused_under_classic, GatedWorkload};

/// A running agent whose hooks are live, and where it listens.
struct Agent {
    child: Child,
    addr: SocketAddr,
    stderr: std::sync::mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Agent {
    fn start(args: &[&str]) -> Agent {
        let mut child = Command::new(kernelkite_bin())
            .args(["agent", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kernelkite agent");
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut log = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("the agent did not start: {log:#?}"));
            log.push(line.clone());
            if line.contains("msg=\"tracing") {
                let addr = (line.split_whitespace())
                    .find_map(|kv| kv.strip_prefix("listen="))
                    .expect("listen= in the start line");
                break addr.parse().unwrap();
            }
        };
        Agent {
            child,
            addr,
            stderr: rx,
            log,
        }
    }

    fn metrics(&self) -> String {
        let (status, body) = http_get(self.addr, "/metrics");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        String::from_utf8(body).unwrap()
    }

    /// SIGTERM, and the log lines to its end.
    fn stop(mut self) -> Vec<String> {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        let mut log = std::mem::take(&mut self.log);
        // Every line to the end of stderr: the reader thread may still be forwarding
        // the last ones after the exit (`try_iter` missed "msg=stopped" once in CI).
        // The channel closes when the thread reaches the end of the pipe.
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Ok(line) =
            (self.stderr).recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            log.push(line);
        }
        assert!(status.success(), "agent exit {status}: {log:#?}");
        log
    }
}

impl Drop for Agent {
    /// A test that failed must not leave its agent tracing.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path`: (status, body).
fn http_get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..end]);
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, raw[end + 4..].to_vec())
}

/// The value of the series of `metric` whose labels include every one of `want`.
fn value(text: &str, metric: &str, want: &[(&str, &str)]) -> Option<f64> {
    (text.lines())
        .filter_map(|l| l.strip_prefix(metric)?.strip_prefix('{'))
        .filter_map(|l| l.rsplit_once("} "))
        .filter(|(labels, _)| {
            want.iter()
                .all(|(k, v)| labels.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|(_, v)| v.parse().unwrap())
        .reduce(|a, b| a + b)
}

const CLASSES: &str = "kernelkite_process_latency_class_seconds_total";

/// The sum over classes of `pid`'s series, and the snapshot time they are as of.
fn class_sum(agent: &Agent, pid: i32) -> (f64, f64) {
    let text = agent.metrics();
    let sum = value(&text, CLASSES, &[("pid", &pid.to_string())]).unwrap_or(0.0);
    (sum, session_seconds(&text))
}

/// The snapshot time an exposition is as of (`kernelkite_session_duration_seconds`).
fn session_seconds(text: &str) -> f64 {
    value(text, "kernelkite_session_duration_seconds", &[])
        .or_else(|| {
            (text.lines())
                .find_map(|l| l.strip_prefix("kernelkite_session_duration_seconds "))
                .map(|v| v.parse().unwrap())
        })
        .unwrap()
}

/// A five-thread process (four contending threads and a main thread blocked in
/// pthread_join since before the agent started): between two scrapes its class times
/// grow by five times the time between the snapshots they show — the wait still in
/// progress counts as it passes, not when it ends.
#[test]
fn class_rates_of_a_process_add_up_to_its_threads() {
    let Some(_guard) = ebpf_ready("class_rates_of_a_process_add_up_to_its_threads") else {
        return;
    };
    // Longer than any attach and both readings take (it is killed after them): the
    // readings are checked to fall inside its life, not hoped to.
    let mut work = GatedWorkload::spawn(&["futex_stress", "--threads", "4", "--seconds", "120"]);
    work.go();
    let pid = work.pid;
    // All five threads exist (the main thread then sits in pthread_join).
    poll_until("the workload's five threads", || threads_of(pid) == 5);
    let agent = Agent::start(&["--pid", &pid.to_string(), "--interval", "0.5"]);
    let mut first = (0.0, 0.0);
    poll_until("the workload's first class series", || {
        first = class_sum(&agent, pid);
        first.0 > 0.0
    });
    let (a, ta) = first;
    let mut second = (0.0, 0.0);
    poll_until("snapshots 3 s after the first", || {
        second = class_sum(&agent, pid);
        second.1 - ta >= 3.0
    });
    let (b, tb) = second;
    assert!(
        work.child.try_wait().unwrap().is_none(),
        "the workload ended before the second reading"
    );
    let threads = (b - a) / (tb - ta);
    assert!(
        (4.8..=5.005).contains(&threads),
        "class seconds grew {} over {} s of snapshots: {threads} threads",
        b - a,
        tb - ta
    );
    drop(work);
    let log = agent.stop();
    assert!(log.iter().any(|l| l.contains("msg=stopped")), "{log:#?}");
}

/// Poll `done` every 50 ms until it holds; a failure naming `what` after 60 s.
fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "60 s without {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The number of threads of `pid` (0 once it is gone).
fn threads_of(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// A free port on loopback (bound and released: Prometheus binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real Prometheus server scrapes the whole-machine agent; once a contention
/// workload has exited, the lock_wait Prometheus stored for it is the agent's own
/// figure, and the agent's self metrics are there too.
#[test]
fn a_prometheus_server_stores_what_the_agent_serves() {
    let Some(_guard) = ebpf_ready("a_prometheus_server_stores_what_the_agent_serves") else {
        return;
    };
    let Ok(prometheus) = which("prometheus") else {
        return skip::required(
            "a_prometheus_server_stores_what_the_agent_serves",
            "prometheus is not installed (CI installs Debian's prometheus)",
        );
    };
    // Every busy process gets a series of its own, whatever else the machine runs.
    let agent = Agent::start(&["--top-processes", "1000", "--interval", "0.5"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: kernelkite\n    static_configs:\n      - targets: ['{}']\n",
            agent.addr
        ),
    )
    .unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut server = Command::new(prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    // Longer than the 5 s a process lives before it gets a series of its own.
    let work = GatedWorkload::spawn(&["futex_stress", "--threads", "3", "--seconds", "8"]);
    let pid = work.pid.to_string();
    let mut work = work;
    work.go();
    work.finish();
    // The agent's figure, once its last snapshot has the exit: the series no longer
    // moves over a whole snapshot interval (0.5 s of the snapshots' own time).
    let labels = [("pid", pid.as_str()), ("class", "lock_wait")];
    let (mut text, mut seen) = (String::new(), None::<(f64, f64)>);
    poll_until("the workload's series to settle after its exit", || {
        text = agent.metrics();
        let Some(now) = value(&text, CLASSES, &labels) else {
            return false;
        };
        let at = session_seconds(&text);
        match seen {
            Some((before, then)) if at - then >= 0.5 => {
                seen = Some((now, at));
                before == now
            }
            Some(_) => false,
            None => {
                seen = Some((now, at));
                false
            }
        }
    });
    let ours = seen.unwrap().0;
    // promtool's linter accepts the exposition as it is.
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(ours > 1.0, "lock_wait {ours}");
    let query = format!("{CLASSES}{{pid=\"{pid}\",class=\"lock_wait\"}}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let stored = loop {
        let path = format!("/api/v1/query?query={}", percent_encode(&query));
        let answer = std::panic::catch_unwind(|| http_get(web, &path)).ok();
        let got = answer.and_then(|(status, body)| {
            let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
            (status == 200).then_some(())?;
            let s = v["data"]["result"][0]["value"][1].as_str()?.to_string();
            s.parse::<f64>().ok()
        });
        match got {
            Some(v) if (v - ours).abs() <= 1e-9 * ours => break v,
            _ if Instant::now() > deadline => {
                panic!("Prometheus has {got:?} for {query}, the agent {ours}")
            }
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    };
    assert_eq!(stored, ours);
    // The agent's own numbers are scraped as well.
    let (_, body) = http_get(web, "/api/v1/query?query=process_resident_memory_bytes");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let rss: f64 = v["data"]["result"][0]["value"][1]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rss > 1e6, "{v}");
    let _ = server.kill();
    let _ = server.wait();
    agent.stop();
}

/// With --stacks, `go tool pprof` fetches /debug/pprof/profile?seconds=N and names the
/// spinning workload's own function; SIGTERM then leaves none of the agent's BPF
/// programs loaded.
#[test]
fn go_tool_pprof_reads_the_profile_endpoint_and_sigterm_unloads_everything() {
    let Some(_guard) = ebpf_ready("go_tool_pprof_reads_the_profile_endpoint") else {
        return;
    };
    // --stacks needs BTF (the classic pass stands for a kernel without it).
    if stacks_refused_under_classic("agent") {
        return;
    }
    let go_ok = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !go_ok {
        return skip::required(
            "go_tool_pprof_reads_the_profile_endpoint",
            "go (golang-go) is missing",
        );
    }
    let mut work = GatedWorkload::spawn(&["cpu_stress", "--threads", "2", "--seconds", "8"]);
    let pid = work.pid;
    let agent = Agent::start(&["--pid", &pid.to_string(), "--stacks"]);
    let programs = programs_of(agent.child.id());
    assert!(
        !programs.is_empty(),
        "bpftool lists no program of the agent"
    );
    work.go();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}/debug/pprof/profile?seconds=3", agent.addr);
    let top = Command::new("go")
        .args(["tool", "pprof", "-top", "-unit=ms", "-sample_index=on_cpu"])
        .arg(&url)
        .env("HOME", dir.path())
        .env("PPROF_TMPDIR", dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{}",
        String::from_utf8_lossy(&top.stderr)
    );
    // "Duration: 3.50s, Total samples = 6424.24ms (183.55%)": two spinning threads run
    // at most twice the profile's length, and (whatever else the machine runs) some.
    let share: f64 = (text.lines())
        .find_map(|l| {
            l.split_once("Total samples = ")?
                .1
                .split_once('(')?
                .1
                .split_once('%')
        })
        // Padded to a width: "(  100%)".
        .and_then(|(pct, _)| pct.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total in {text}"));
    assert!(
        (20.0..=202.0).contains(&share),
        "{share}% of the profile's length: {text}"
    );
    // The workload's spin loop, by its Rust name, holds nearly all of its on-CPU time
    // (its `cum%`, callees included).
    let spin: f64 = (text.lines())
        .find(|l| l.trim_end().ends_with("cpu::spin_for"))
        .and_then(|l| l.split_whitespace().nth(4)?.strip_suffix('%')?.parse().ok())
        .unwrap_or_else(|| panic!("no spin_for in {text}"));
    assert!(spin >= 90.0, "spin_for {spin}%: {text}");
    // A bad request is a clear 400.
    let (status, body) = http_get(agent.addr, "/debug/pprof/profile?seconds=9999");
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    work.finish();
    agent.stop();
    // The kernel frees a program shortly after its last reference goes (RCU).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<u64> = (loaded_programs().into_iter())
            .filter(|id| programs.contains(id))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still loaded 20 s after SIGTERM: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Ids of the BPF programs `pid` holds: the `prog_id` of each of its program and link
/// file descriptors (/proc/PID/fdinfo).
fn programs_of(pid: u32) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            (info.lines())
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

fn loaded_programs() -> Vec<u64> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .expect("bpftool");
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (all.as_array().into_iter().flatten())
        .filter_map(|p| p["id"].as_u64())
        .collect()
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The OTLP receiver of tests/support (opentelemetry-proto), on a free port.
struct Receiver {
    child: Child,
    port: u16,
    out: std::path::PathBuf,
}

impl Receiver {
    fn start(dir: &std::path::Path) -> Receiver {
        let port_file = dir.join("port");
        let out = dir.join("requests.jsonl");
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/support/otlp_receiver.py");
        let child = Command::new("python3")
            .arg(script)
            .arg("--port-file")
            .arg(&port_file)
            .arg("--out")
            .arg(&out)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse().ok())
            {
                break p;
            }
            assert!(Instant::now() < deadline, "the OTLP receiver did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        Receiver { child, port, out }
    }

    /// Every request received so far, parsed.
    fn requests(&self) -> Vec<serde_json::Value> {
        (std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
    }

    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "receiver exit {status}");
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent pushes OTLP metrics that the official opentelemetry-proto package parses:
/// the workload's resource (host.name, process.pid, its command), its class times equal
/// to what /metrics says, its syscall histograms; with the receiver stopped, the queue
/// stays at --otlp-queue and the overflow is counted.
#[test]
fn otlp_push_reaches_a_real_receiver_and_a_down_one_costs_a_bounded_queue() {
    let Some(_guard) = ebpf_ready("otlp_push_reaches_a_real_receiver") else {
        return;
    };
    let python_ok = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.proto.collector.metrics.v1.metrics_service_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        python_ok,
        "python3 with opentelemetry-proto is needed (`cargo xtask ci` installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut receiver = Receiver::start(dir.path());
    let mut work = GatedWorkload::spawn(&["futex_stress", "--threads", "2", "--seconds", "2"]);
    let pid = work.pid;
    let endpoint = format!("http://127.0.0.1:{}", receiver.port);
    let agent = Agent::start(&[
        "--pid",
        &pid.to_string(),
        "--interval",
        "0.5",
        "--otlp-endpoint",
        &endpoint,
        "--otlp-interval",
        "1",
        "--otlp-queue",
        "3",
    ]);
    work.go();
    work.finish();
    // Past the exit: the last snapshots, and a push of them. Its lock_wait stops
    // growing then, and the pushes catch up with /metrics.
    let labels = [("pid", pid.to_string()), ("class", "lock_wait".to_string())];
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let pushed_lock_wait = |request: &serde_json::Value| {
        (request["resources"].as_array()?.iter())
            .find(|r| r["attributes"]["process.pid"].as_i64() == Some(pid.into()))?["metrics"]
            .as_array()?
            .iter()
            .find(|m| m["name"] == "kernelkite.latency_class.time")?["data_points"]
            .as_array()?
            .iter()
            .find(|p| p["attributes"]["kernelkite.latency_class"] == "lock_wait")?["as_double"]
            .as_f64()
    };
    let (mut ours, mut requests) = (None, Vec::new());
    poll_until("a push of the workload's final lock_wait", || {
        ours = value(&agent.metrics(), CLASSES, &labels);
        requests = receiver.requests();
        let pushed = requests.last().and_then(pushed_lock_wait);
        matches!((ours, pushed), (Some(o), Some(p)) if requests.len() >= 2 && p == o)
    });
    let ours = ours.unwrap();
    assert!(ours > 0.5, "lock_wait {ours}");
    let last = requests.last().unwrap();
    assert_eq!(last["status"], 200);
    let resources = last["resources"].as_array().unwrap();
    let mine = (resources.iter())
        .find(|r| r["attributes"]["process.pid"].as_i64() == Some(pid.into()))
        .unwrap_or_else(|| panic!("no resource of pid {pid}: {last}"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(mine["attributes"]["host.name"], host.trim());
    assert_eq!(mine["attributes"]["process.executable.name"], "kk-workload");
    let metric = |name: &str| {
        (mine["metrics"].as_array().unwrap().iter())
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {mine}"))
            .clone()
    };
    let classes = metric("kernelkite.latency_class.time");
    assert_eq!(classes["type"], "sum");
    assert_eq!(classes["is_monotonic"], true);
    let lock_wait = (classes["data_points"].as_array().unwrap().iter())
        .find(|p| p["attributes"]["kernelkite.latency_class"] == "lock_wait")
        .and_then(|p| p["as_double"].as_f64())
        .unwrap();
    assert!(
        (lock_wait - ours).abs() <= 1e-9 * ours,
        "OTLP {lock_wait}, /metrics {ours}"
    );
    let syscalls = metric("kernelkite.syscall.duration");
    assert!(
        (syscalls["data_points"].as_array().unwrap().iter())
            .any(|p| p["attributes"]["kernelkite.syscall.name"] == "futex"),
        "{syscalls}"
    );
    // The collector goes away: the queue stays at 3 requests, the rest are dropped.
    receiver.stop();
    let counter = |text: &str, name: &str| {
        (text.lines())
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .map(|v| v.parse::<f64>().unwrap())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let mut text = String::new();
    poll_until("a dropped push", || {
        text = agent.metrics();
        counter(&text, "kernelkite_agent_otlp_dropped_requests_total") >= 1.0
    });
    let counter = |name: &str| counter(&text, name);
    assert!(counter("kernelkite_agent_otlp_queued_requests") <= 3.0);
    assert!(counter("kernelkite_agent_otlp_dropped_requests_total") >= 1.0);
    assert!(counter("kernelkite_agent_otlp_failed_attempts_total") >= 1.0);
    assert!(counter("kernelkite_agent_otlp_sent_requests_total") >= 2.0);
    agent.stop();
}

/// SIGHUP rereads --config: a bad file is logged and changes nothing, a good one
/// applies its series limits at once, and a setting that needs a restart says so.
#[test]
fn sighup_rereads_the_config() {
    let Some(_guard) = ebpf_ready("sighup_rereads_the_config") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "top_processes = 1\nmax_groups = 5\n").unwrap();
    let mut work = GatedWorkload::spawn(&["idle", "--seconds", "30"]);
    let mut agent = Agent::start(&[
        "--pid",
        &work.pid.to_string(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let hup_until = |agent: &mut Agent, want: &str| {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(agent.child.id() as i32, libc::SIGHUP) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let line = agent
                .stderr
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("no {want:?} after SIGHUP: {:#?}", agent.log));
            agent.log.push(line.clone());
            if line.contains(want) {
                return line;
            }
        }
    };
    std::fs::write(&config, "top_processes = 2\nbogus = 1\n").unwrap();
    let line = hup_until(&mut agent, "not reloaded");
    assert!(
        line.contains("level=error") && line.contains("bogus"),
        "{line}"
    );
    std::fs::write(
        &config,
        "top_processes = 2\nmax_groups = 7\nstacks = true\n",
    )
    .unwrap();
    let line = hup_until(&mut agent, "changes at the next restart");
    assert!(line.contains("setting=stacks"), "{line}");
    let line = hup_until(&mut agent, "configuration reloaded");
    assert!(
        line.contains("top_processes=2") && line.contains("max_groups=7"),
        "{line}"
    );
    // Still serving.
    assert!(agent
        .metrics()
        .contains("kernelkite_session_duration_seconds"));
    agent.stop();
    work.go();
    let _ = work.child.kill();
    let _ = work.child.wait();
}

/// --stacks-epoch: the stack capture starts over (a new session), the series go on
/// without a step back or a double count, and the profile endpoint works after it.
#[test]
fn a_new_stack_epoch_keeps_the_series_going() {
    let Some(_guard) = ebpf_ready("a_new_stack_epoch_keeps_the_series_going") else {
        return;
    };
    if stacks_refused_under_classic("agent") {
        return;
    }
    // Spinning past the end of the test, however long a loaded machine takes to attach
    // twice (3.4 s each beside `cargo xtask stress-ci`'s load, where 16 s of spinning
    // ended before the second reading and the class time stopped growing).
    let mut work = GatedWorkload::spawn(&["cpu_stress", "--threads", "2", "--seconds", "120"]);
    let pid = work.pid;
    work.go();
    let mut agent = Agent::start(&[
        "--pid",
        &pid.to_string(),
        "--stacks",
        "--stacks-epoch",
        "10",
        "--interval",
        "0.5",
    ]);
    let (a, ta) = class_sum(&agent, pid);
    let deadline = Instant::now() + Duration::from_secs(30);
    let restarted = loop {
        let line = agent
            .stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no new epoch: {:#?}", agent.log));
        agent.log.push(line.clone());
        if line.contains("capture started over") {
            break line;
        }
    };
    std::thread::sleep(Duration::from_secs(2));
    let (b, tb) = class_sum(&agent, pid);
    // Two spinning threads and the main thread joining them: three threads' worth of
    // class time per second of snapshots, less the re-attaching gap, which neither
    // session counts (the log says how long it was).
    let gap_s: f64 = (restarted.split_whitespace())
        .find_map(|kv| kv.strip_prefix("gap_ms="))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap()
        / 1e3;
    let want = 3.0 * (tb - ta - gap_s);
    let got = b - a;
    assert!(
        (got - want).abs() <= 0.02 * want + 0.5,
        "{got} s of class time over {} s of snapshots with a {gap_s} s gap: want {want}",
        tb - ta
    );
    let text = agent.metrics();
    assert!(
        text.contains("kernelkite_agent_stack_epochs_total 1"),
        "{text}"
    );
    let (status, body) = http_get(agent.addr, "/debug/pprof/profile?seconds=1");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(&body[..2], &[0x1f, 0x8b], "a gzip profile");
    agent.stop();
    // The workload, still spinning, is killed as it is dropped.
    drop(work);
}
