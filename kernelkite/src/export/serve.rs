//! `kernelkite trace --serve ADDR` and `kernelkite agent --listen ADDR`: Prometheus
//! metrics of the running session at `http://ADDR/metrics`, and (the agent with
//! `--stacks`) a pprof profile of the next N seconds at
//! `http://ADDR/debug/pprof/profile?seconds=N`, the path Parca and Pyroscope scrape.
//!
//! A deliberately small HTTP/1.1 responder on a tokio listener: it reads one request
//! head (at most [`MAX_HEAD_BYTES`], within [`READ_TIMEOUT`]), answers `GET /metrics`
//! (and `HEAD`) with the exposition, anything else with 404 or 405, and closes the
//! connection. At most [`MAX_CONNECTIONS`] are open at once (more wait in the kernel's
//! listen backlog, holding none of the tracer's file descriptors), an answer must be
//! taken within [`WRITE_TIMEOUT`], and a failed accept (out of file descriptors) only
//! pauses accepting: a scraper can neither starve the trace of descriptors nor end it. Each scrape asks the trace loop for a fresh exposition through a
//! channel ([`Scrape`]), so the numbers are those of the session's latest snapshot and
//! nothing is rendered when nobody scrapes.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::analysis::analyze;
use crate::model::Bundle;

/// Largest request head accepted.
pub const MAX_HEAD_BYTES: usize = 8192;
/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to read the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; Prometheus opens one per scrape.
pub const MAX_CONNECTIONS: usize = 16;

/// What a request asks the trace loop for.
pub enum Ask {
    /// The exposition of the session so far.
    Metrics(oneshot::Sender<String>),
    /// The gzip profile.proto of the next `seconds` (an error: a one-line reason).
    Profile {
        seconds: u32,
        reply: oneshot::Sender<Result<Vec<u8>, String>>,
    },
}

/// A scrape of /metrics (the name `trace --serve` uses).
pub type Scrape = Ask;

/// `/debug/pprof/profile` without `seconds=`: Go's default.
pub const DEFAULT_PROFILE_SECONDS: u32 = 30;
/// The longest profile served.
pub const MAX_PROFILE_SECONDS: u32 = 300;

/// Bind `addr` now (before tracing starts, so a taken port fails early).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The exposition of a live session's bundle.
pub fn exposition(bundle: &Bundle) -> String {
    let analysis = analyze(bundle);
    super::prometheus::render_live(bundle, &analysis)
        .unwrap_or_else(|e| format!("# kernelkite: cannot render metrics: {e}\n"))
}

/// Accept connections until the runtime stops; each request is sent to `scrapes`.
/// `profiles`: whether /debug/pprof/profile is served (else 404).
pub async fn serve(listener: std::net::TcpListener, scrapes: mpsc::Sender<Ask>, profiles: bool) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            crate::note!("kernelkite: --serve: {e}");
            return;
        }
    };
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A free slot first: at the cap, clients wait in the listen backlog.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors and the like: back off instead of spinning.
            drop(slot);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let scrapes = scrapes.clone();
        tokio::spawn(async move {
            let _ = respond(stream, scrapes, profiles).await;
            drop(slot);
        });
    }
}

async fn respond(
    mut stream: TcpStream,
    scrapes: mpsc::Sender<Ask>,
    profiles: bool,
) -> std::io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) => {
            return write(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request head too large\n",
                true,
            )
            .await
        }
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return write(
                &mut stream,
                "408 Request Timeout",
                "text/plain",
                b"timeout\n",
                true,
            )
            .await
        }
    };
    let with_body = match parse_request(head.as_bytes()) {
        Request::Metrics { with_body } => with_body,
        Request::Profile { seconds } if profiles => {
            return respond_profile(&mut stream, scrapes, seconds).await
        }
        Request::Profile { .. } | Request::NotFound => {
            return write(
                &mut stream,
                "404 Not Found",
                "text/plain",
                if profiles {
                    b"kernelkite serves /metrics and /debug/pprof/profile?seconds=N\n"
                } else {
                    b"kernelkite serves /metrics\n"
                },
                true,
            )
            .await
        }
        Request::MethodNotAllowed => {
            return write(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                b"GET /metrics (or /debug/pprof/profile)\n",
                true,
            )
            .await
        }
    };
    let (reply, answer) = oneshot::channel();
    let body = if scrapes.send(Ask::Metrics(reply)).await.is_ok() {
        answer.await.ok()
    } else {
        None
    };
    match body {
        Some(body) => {
            write(
                &mut stream,
                "200 OK",
                super::prometheus::CONTENT_TYPE,
                body.as_bytes(),
                with_body,
            )
            .await
        }
        None => {
            write(
                &mut stream,
                "503 Service Unavailable",
                "text/plain",
                b"the session has ended\n",
                true,
            )
            .await
        }
    }
}

/// `/debug/pprof/profile?seconds=N`: the trace loop answers after N seconds.
async fn respond_profile(
    stream: &mut TcpStream,
    scrapes: mpsc::Sender<Ask>,
    seconds: Option<u32>,
) -> std::io::Result<()> {
    let seconds = seconds.unwrap_or(DEFAULT_PROFILE_SECONDS);
    if !(1..=MAX_PROFILE_SECONDS).contains(&seconds) {
        let body = format!("seconds must be between 1 and {MAX_PROFILE_SECONDS}\n");
        return write(
            stream,
            "400 Bad Request",
            "text/plain",
            body.as_bytes(),
            true,
        )
        .await;
    }
    let (reply, answer) = oneshot::channel();
    let ask = Ask::Profile { seconds, reply };
    let body = if scrapes.send(ask).await.is_ok() {
        answer.await.ok()
    } else {
        None
    };
    match body {
        Some(Ok(profile)) => {
            write(stream, "200 OK", "application/octet-stream", &profile, true).await
        }
        Some(Err(why)) => {
            let body = format!("{why}\n");
            write(
                stream,
                "503 Service Unavailable",
                "text/plain",
                body.as_bytes(),
                true,
            )
            .await
        }
        None => {
            let body = b"the session has ended\n";
            write(stream, "503 Service Unavailable", "text/plain", body, true).await
        }
    }
}

/// What a request head asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics` (with the body) or `HEAD /metrics` (without).
    Metrics { with_body: bool },
    /// `GET /debug/pprof/profile`, with `seconds=N` if given (a value that is no
    /// number: 0, refused).
    Profile { seconds: Option<u32> },
    /// Any other path.
    NotFound,
    /// `/metrics` with a method other than GET or HEAD.
    MethodNotAllowed,
}

/// Parse a request head (the bytes before the blank line): only its request line
/// matters, and a query string is ignored. Pure, so the fuzz target reaches it.
pub fn parse_request(head: &[u8]) -> Request {
    let head = String::from_utf8_lossy(head);
    let request_line = head.lines().next().unwrap_or("");
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/metrics" if method == "GET" || method == "HEAD" => Request::Metrics {
            with_body: method == "GET",
        },
        "/debug/pprof/profile" if method == "GET" => Request::Profile {
            seconds: (query.split('&'))
                .find_map(|kv| kv.strip_prefix("seconds="))
                .map(|v| v.parse().unwrap_or(0)),
        },
        "/metrics" | "/debug/pprof/profile" => Request::MethodNotAllowed,
        _ => Request::NotFound,
    }
}

/// The request head up to the blank line; `None` when it exceeds [`MAX_HEAD_BYTES`].
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(String::from_utf8_lossy(&buf[..end]).into_owned()));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            // A client that closed early (or sent a bare request line): answer what came.
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Write the answer and close, within [`WRITE_TIMEOUT`] (a client that does not read
/// would otherwise hold its connection forever).
async fn write(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    with_body: bool,
) -> std::io::Result<()> {
    let written = write_untimed(stream, status, content_type, body, with_body);
    match tokio::time::timeout(WRITE_TIMEOUT, written).await {
        Ok(result) => result,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

async fn write_untimed(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    with_body: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if with_body {
        stream.write_all(body).await?;
    }
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn try_get(addr: SocketAddr, request: &str) -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(request.as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    async fn get(addr: SocketAddr, request: &str) -> String {
        try_get(addr, request).await.unwrap()
    }

    #[test]
    fn answers_metrics_and_refuses_the_rest() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, mut rx) = mpsc::channel::<Ask>(4);
            tokio::spawn(serve(listener, tx, false));
            // The "trace loop": answers every scrape with a counter that grows.
            tokio::spawn(async move {
                let mut n = 0;
                while let Some(ask) = rx.recv().await {
                    n += 1;
                    if let Ask::Metrics(reply) = ask {
                        let _ = reply.send(format!("scrape_total {n}\n"));
                    }
                }
            });
            let first = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
            assert!(
                first.contains("Content-Type: text/plain; version=0.0.4"),
                "{first}"
            );
            assert!(first.ends_with("\r\n\r\nscrape_total 1\n"), "{first}");
            let second = get(addr, "GET /metrics HTTP/1.1\r\n\r\n").await;
            assert!(second.ends_with("scrape_total 2\n"), "{second}");
            let missing = get(addr, "GET / HTTP/1.1\r\n\r\n").await;
            assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
            let post = get(addr, "POST /metrics HTTP/1.1\r\n\r\n").await;
            assert!(post.starts_with("HTTP/1.1 405"), "{post}");
            let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
            // The server answers 431 and closes; unread request bytes may turn that into a
            // reset on the client side. Either way no metrics are served.
            if let Ok(answer) = try_get(addr, &huge).await {
                assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
            }
        });
    }

    /// An eBPF session's frames: a long-lived process whose two threads' class times
    /// grow, and short processes (two with a reused pid, one renamed by an exec) seen in
    /// one to three frames, some threads exiting with an exit event.
    fn churning_session() -> (crate::model::Bundle, Vec<crate::model::Frame>) {
        use crate::model::{
            Backend, ClassTimes, Frame, LifecycleEvent, LifecycleKind, ProcessSample, ThreadSample,
        };
        let times = |n: u64| ClassTimes {
            on_cpu: 3 * n,
            runqueue: n,
            syscall_blocked: 5 * n,
            ..ClassTimes::default()
        };
        let thread = |tid: i32, n: u64| ThreadSample {
            tid,
            comm: "t".into(),
            state: "S".into(),
            schedstat: None,
            syscall_nr: None,
            class_ns: Some(times(n)),
        };
        let process =
            |pid: i32, start: u64, comm: &str, threads: Vec<ThreadSample>| ProcessSample {
                pid,
                ppid: 1,
                comm: comm.into(),
                state: "S".into(),
                start_time_ticks: start,
                utime_ticks: 0,
                stime_ticks: 0,
                cutime_ticks: 0,
                cstime_ticks: 0,
                rss_pages: 10,
                num_threads: threads.len() as u64,
                io: None,
                threads,
            };
        let host = crate::model::HostConstants {
            clock_ticks_per_sec: 100,
            page_size_bytes: 4096,
            num_cpus: 2,
            kernel_release: None,
            arch: "x86_64".into(),
            time_accounting: None,
        };
        let mut bundle = crate::model::Bundle::new(Backend::Ebpf, host, 100);
        let mut frames = Vec::new();
        for i in 0..300u64 {
            let mut processes = vec![process(
                100,
                1,
                "server",
                vec![thread(100, i * 10), thread(101, i * 7)],
            )];
            // A short process every frame, alive for (i % 3) + 1 frames; pids cycle
            // through 40 values, so they are reused with a later start time.
            for age in 0..=(i % 3) {
                let born = i - age.min(i);
                let pid = 1000 + (born % 40) as i32;
                let comm = if age > 0 { "renamed" } else { "short" };
                processes.push(process(pid, born + 2, comm, vec![thread(pid, age + 1)]));
            }
            processes.sort_by_key(|p| p.pid);
            processes.dedup_by_key(|p| p.pid);
            frames.push(Frame {
                t_ns: i * 100_000_000,
                processes,
                network: None,
                host_steal_ticks: None,
            });
            if i % 2 == 0 {
                let pid = 1000 + (i % 40) as i32;
                bundle.lifecycle.push(LifecycleEvent {
                    t_ns: i * 100_000_000 + 50,
                    kind: LifecycleKind::Exit,
                    pid,
                    tid: pid,
                    ppid: 1,
                    comm: "short".into(),
                    exit_code: Some(0),
                    class_ns: Some(times(9)),
                });
            }
        }
        bundle.events_lost = Some(3);
        (bundle, frames)
    }

    #[test]
    fn a_scrape_of_the_frame_digest_shows_what_one_of_every_frame_does() {
        use crate::model::FrameKeeper;
        let (template, frames) = churning_session();
        // Below the frame cap, and past it (the last frame is replaced from then on).
        for max_frames in [100_000, 50] {
            let mut all = FrameKeeper::new(max_frames);
            let mut digested = FrameKeeper::new(max_frames);
            digested.keep_digest();
            for (n, f) in frames.iter().enumerate() {
                all.push(f.clone());
                digested.push(f.clone());
                if n % 37 != 0 && n + 1 != frames.len() {
                    continue;
                }
                let mut full = template.clone();
                full.frames = all.frames().to_vec();
                let mut digest = template.clone();
                digest.frames = digested.digest_frames();
                assert!(digest.frames.len() <= 2);
                assert_eq!(
                    exposition(&digest),
                    exposition(&full),
                    "after {} frames, cap {max_frames}",
                    n + 1
                );
            }
        }
    }

    /// Values of the series of `metric` in `text`: (its labels, value).
    fn series<'a>(text: &'a str, metric: &str) -> Vec<(&'a str, f64)> {
        (text.lines())
            .filter_map(|l| l.strip_prefix(metric)?.strip_prefix('{'))
            .filter_map(|l| l.rsplit_once("} "))
            .map(|(labels, v)| (labels, v.parse().unwrap()))
            .collect()
    }

    fn pid_of(labels: &str) -> &str {
        let rest = labels.strip_prefix("pid=\"").unwrap();
        &rest[..rest.find('"').unwrap()]
    }

    #[test]
    fn a_churny_session_has_series_for_its_live_processes_and_the_totals_add_up() {
        use crate::analysis::analyze;
        use crate::model::{FrameKeeper, SyscallHistogram};
        use kernelkite_common::LatencyClass;
        use std::collections::BTreeSet;
        let (mut template, frames) = churning_session();
        // read() histograms for the server and every short process's pid.
        for pid in std::iter::once(100).chain(1000..1040) {
            template.syscalls.push(SyscallHistogram {
                pid,
                nr: 0,
                name: "read".into(),
                count: 5 + pid as u64 % 3,
                total_ns: 9_000,
                max_ns: 4_000,
                buckets: vec![(10, 3), (20 + pid as u32 % 5, 2 + pid as u64 % 3)],
                before_start: false,
            });
        }
        let calls: u64 = template.syscalls.iter().map(|h| h.count).sum();
        let mut keeper = FrameKeeper::new(100_000);
        keeper.keep_digest();
        let mut last_checked = None;
        for (n, f) in frames.iter().enumerate() {
            keeper.push(f.clone());
            if n % 50 != 49 {
                continue;
            }
            let mut bundle = template.clone();
            bundle.frames = keeper.digest_frames();
            let analysis = analyze(&bundle);
            let text = exposition(&bundle);
            let live: BTreeSet<String> = (f.processes.iter())
                .map(|p| p.pid.to_string())
                .chain([crate::export::prometheus::EXITED_PID.to_string()])
                .collect();
            // Series of their own for the live processes only, the rest in `exited`.
            let classes = series(&text, "kernelkite_process_latency_class_seconds_total");
            let counts = series(&text, "kernelkite_syscall_latency_seconds_count");
            for (labels, _) in classes.iter().chain(&counts) {
                assert!(live.contains(pid_of(labels)), "{labels} after {n} frames");
            }
            // The totals are the session's.
            let class_sum: f64 = classes.iter().map(|s| s.1).sum();
            let want: f64 = (analysis.processes.iter())
                .flat_map(|p| LatencyClass::ALL.map(|c| p.classes.get(c) as f64 / 1e9))
                .sum();
            assert!(
                (class_sum - want).abs() < 1e-9 * want.max(1.0),
                "{class_sum} {want}"
            );
            let count_sum: f64 = counts.iter().map(|s| s.1).sum();
            assert_eq!(count_sum as u64, calls);
            let exited: usize = (text.lines())
                .find_map(|l| l.strip_prefix("kernelkite_exited_processes_total "))
                .unwrap()
                .parse()
                .unwrap();
            let live_rows = (analysis.processes.iter())
                .filter(|p| {
                    (f.processes.iter())
                        .any(|q| (q.pid, q.start_time_ticks) == (p.pid, p.start_time_ticks))
                })
                .count();
            assert_eq!(exited + live_rows, analysis.processes.len());
            last_checked = Some((analysis.processes.len(), text));
        }
        // Hundreds of processes seen, a handful of series: what --serve exposes does
        // not grow with them, where the export of the same bundle does.
        let (seen, text) = last_checked.unwrap();
        assert!(seen > 200, "{seen}");
        let pids: BTreeSet<&str> = (series(&text, "kernelkite_process_cpu_seconds_total").iter())
            .map(|(labels, _)| pid_of(labels))
            .collect();
        assert!(pids.len() <= 5, "{pids:?}");
        let mut bundle = template.clone();
        bundle.frames = keeper.frames().to_vec();
        let full = crate::export::prometheus::render(&bundle, &analyze(&bundle)).unwrap();
        assert!(full.len() > 5 * text.len(), "{} {}", full.len(), text.len());
    }
}
