//! `kernelkite agent --otlp-endpoint URL`: OTLP/HTTP metrics pushed to a collector.
//!
//! A deliberately small HTTP/1.1 client on tokio, in the style of [`super::serve`]: one
//! connection per request (`Connection: close`), plain `http://` only. TLS is left to a
//! local OpenTelemetry Collector, which forwards; an `https://` endpoint is refused.
//!
//! Requests wait in a bounded queue ([`PushConfig::queue_capacity_requests`] and
//! [`PushConfig::queue_capacity_bytes`]). When it is full the oldest request is
//! dropped: the metrics are cumulative, so a newer request supersedes it. A collector
//! that is down then costs a bounded amount of memory and a count of what was lost
//! ([`PushStats::dropped_requests`]), never a growing backlog.
//!
//! Answers follow the OTLP/HTTP rules
//! (<https://opentelemetry.io/docs/specs/otlp/#failures-1>): 2xx is delivered; 429, 502,
//! 503 and 504 are retried (after `Retry-After` seconds when the collector gives them),
//! as are connection errors and timeouts, with exponential backoff and jitter; every
//! other status is final, and the request is dropped and counted as rejected. An answer
//! is read to at most [`MAX_RESPONSE_BYTES`], and a whole exchange is bounded by
//! [`PushConfig::request_timeout`].

use std::collections::{HashSet, VecDeque};
use std::net::Ipv6Addr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The OTLP/HTTP port.
pub const DEFAULT_PORT: u16 = 4318;
/// The OTLP/HTTP metrics path, used when the endpoint has none.
pub const DEFAULT_PATH: &str = "/v1/metrics";
/// Most of an answer read; a collector's error body can be large and only its start
/// is shown.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Longest `Retry-After` honoured, so a bogus value cannot park the pusher for hours
/// (the queue bounds memory meanwhile either way).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// How much of a collector's error message [`PushStats::last_error`] keeps.
const MAX_DETAIL_CHARS: usize = 200;
const CONTENT_TYPE: &str = "application/x-protobuf";
/// Headers the pusher writes itself; a configured one of these would contradict them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "user-agent",
];

/// Why an endpoint or a header was refused (one line).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    #[error(
        "OTLP endpoint {0:?}: https is not supported; push to a local OpenTelemetry \
         Collector over http:// and let it forward with TLS"
    )]
    Https(String),
    #[error("OTLP endpoint {url:?}: {reason}")]
    Endpoint { url: String, reason: &'static str },
    #[error("OTLP header {name:?}: {reason}")]
    Header { name: String, reason: &'static str },
}

/// Where requests go: `http://host[:port][/path]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// A name or an IP address; an IPv6 address without its brackets.
    pub host: String,
    pub port: u16,
    /// The request target (path and query), starting with `/`.
    pub path: String,
}

impl Endpoint {
    /// Parse `http://host[:port][/path]`. The host is a name, an IPv4 address or an
    /// `[IPv6]` address; the port defaults to 4318; an empty path (or `/`, a
    /// collector's root, which never takes metrics) becomes `/v1/metrics`.
    pub fn parse(url: &str) -> Result<Endpoint, PushError> {
        let bad = |reason| PushError::Endpoint {
            url: url.to_string(),
            reason,
        };
        if !url.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad("has spaces, control or non-ASCII characters"));
        }
        let scheme_end = url.find("://").map_or(0, |i| i + 3);
        let rest = match url[..scheme_end].to_ascii_lowercase().as_str() {
            "http://" => &url[scheme_end..],
            "https://" => return Err(PushError::Https(url.to_string())),
            _ => return Err(bad("must start with http://")),
        };
        if rest.contains('#') {
            return Err(bad("has a fragment (#...)"));
        }
        let (authority, target) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        if authority.contains('@') {
            return Err(bad(
                "has user information (user@); send credentials as a header",
            ));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (address, after) = (bracketed.split_once(']')).ok_or(bad("has an unclosed ["))?;
            if address.parse::<Ipv6Addr>().is_err() {
                return Err(bad("has an invalid IPv6 address in [...]"));
            }
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or(bad("has junk after ]"))?),
            };
            (address, port)
        } else {
            let (host, port) = match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            };
            if port.is_some_and(|p| p.contains(':')) {
                return Err(bad("has an IPv6 address without [brackets]"));
            }
            if host.is_empty() {
                return Err(bad("has no host"));
            }
            let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
            if !host.chars().all(name_char) {
                return Err(bad("has an invalid host name"));
            }
            (host, port)
        };
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(port) if port != 0 && p.bytes().all(|b| b.is_ascii_digit()) => port,
                _ => return Err(bad("has an invalid port (1 to 65535)")),
            },
        };
        let path = match target {
            "" | "/" => DEFAULT_PATH.to_string(),
            query if query.starts_with('?') => format!("{DEFAULT_PATH}{query}"),
            path => path.to_string(),
        };
        Ok(Endpoint {
            host: host.to_string(),
            port,
            path,
        })
    }

    /// `host:port` as the `Host` header writes it (`[IPv6]:port`; no port when 80).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            80 => host,
            port => format!("{host}:{port}"),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path)
    }
}

/// Check a request header: the name an HTTP token, the value free of control
/// characters (a CR or LF would let it write headers of its own), neither one the
/// pusher writes itself.
pub fn check_header(name: &str, value: &str) -> Result<(), PushError> {
    let bad = |reason| PushError::Header {
        name: name.to_string(),
        reason,
    };
    let token_char = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token_char) {
        return Err(bad("is not a valid header name"));
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(bad("is written by kernelkite itself"));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(bad("has a control character (CR, LF, ...) in its value"));
    }
    Ok(())
}

/// Parse a `name=value` header (the form of `OTEL_EXPORTER_OTLP_HEADERS`), checked
/// with [`check_header`]; spaces around either part are trimmed.
pub fn parse_header(spec: &str) -> Result<(String, String), PushError> {
    let (name, value) = spec.split_once('=').ok_or_else(|| PushError::Header {
        name: spec.to_string(),
        reason: "must be name=value",
    })?;
    let (name, value) = (name.trim(), value.trim());
    check_header(name, value)?;
    Ok((name.to_string(), value.to_string()))
}

/// How the pusher sends and how much it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushConfig {
    pub endpoint: Endpoint,
    /// Extra request headers (an API key, a tenant), each passing [`check_header`]
    /// ([`PushConfig::add_header`] checks; [`spawn`] leaves out, with a note, any that
    /// does not).
    pub headers: Vec<(String, String)>,
    /// Requests held at most (at least 1).
    pub queue_capacity_requests: usize,
    /// Bytes of request bodies held at most; a single larger request is dropped.
    pub queue_capacity_bytes: usize,
    /// Bound of one exchange: connect, send, read the answer.
    pub request_timeout: Duration,
    /// First wait after a failed attempt; it doubles with each failure in a row.
    pub initial_backoff: Duration,
    /// Longest wait between attempts (`Retry-After` aside).
    pub max_backoff: Duration,
}

impl PushConfig {
    /// The defaults: 64 requests or 16 MiB, 10 s per exchange, backoff from 1 s to 60 s.
    pub fn new(endpoint: Endpoint) -> Self {
        PushConfig {
            endpoint,
            headers: Vec::new(),
            queue_capacity_requests: 64,
            queue_capacity_bytes: 16 << 20,
            request_timeout: Duration::from_secs(10),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }

    /// Add a request header after [`check_header`].
    pub fn add_header(&mut self, name: &str, value: &str) -> Result<(), PushError> {
        check_header(name, value)?;
        self.headers.push((name.to_string(), value.to_string()));
        Ok(())
    }
}

/// What the pusher has done so far; the counters only grow.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Requests the collector took (2xx).
    pub sent_requests: u64,
    /// Requests dropped unsent: superseded in a full queue, too large for it, or still
    /// queued when the pusher stopped.
    pub dropped_requests: u64,
    /// Requests the collector refused with a status that must not be retried.
    pub rejected_requests: u64,
    /// Attempts that did not deliver (each retry counts, and each rejection).
    pub failed_attempts: u64,
    /// Requests held now, the one being sent included.
    pub queued_requests: usize,
    pub queued_bytes: usize,
    /// The latest failure, one line.
    pub last_error: Option<String>,
}

/// A handle on the push task; clones share it. The task stops at [`Pusher::shutdown`]
/// or when the last handle is dropped.
#[derive(Clone)]
pub struct Pusher {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

/// What the handles and the task share.
struct Shared {
    config: PushConfig,
    state: Mutex<State>,
    /// Rung after every change the task waits for: a request queued, a shutdown.
    wake: Notify,
}

struct Queued {
    id: u64,
    body: Bytes,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    next_id: u64,
    /// The front request's id while an attempt sends it.
    sending: Option<u64>,
    /// The request being sent left the queue to make room: its attempt decides whether
    /// it counts as sent or dropped, and it is not retried.
    superseded: bool,
    /// When the task must be done (set by [`Pusher::shutdown`]).
    closing: Option<Instant>,
    stopped: bool,
    stats: PushStats,
}

/// A poisoned lock only means another thread panicked while holding it; the counters
/// stay usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// Append `body`, then drop the oldest requests until the queue fits.
    fn push(&mut self, body: Bytes, config: &PushConfig) {
        self.next_id += 1;
        self.queued_bytes += body.len();
        self.queue.push_back(Queued {
            id: self.next_id,
            body,
        });
        while self.queue.len() > config.queue_capacity_requests.max(1)
            || self.queued_bytes > config.queue_capacity_bytes
        {
            let Some(old) = self.queue.pop_front() else {
                break;
            };
            self.queued_bytes -= old.body.len();
            if self.sending == Some(old.id) {
                self.sending = None;
                self.superseded = true;
            } else {
                self.stats.dropped_requests += 1;
            }
        }
    }

    fn pop_front(&mut self) {
        if let Some(old) = self.queue.pop_front() {
            self.queued_bytes -= old.body.len();
        }
    }

    /// The end: whatever was not delivered is dropped.
    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let lost = self.queue.len() + usize::from(self.superseded);
        self.stats.dropped_requests += lost as u64;
        self.queue.clear();
        self.queued_bytes = 0;
        self.sending = None;
        self.superseded = false;
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

/// Start the push task on the current tokio runtime (it panics outside one, as
/// `tokio::spawn` does). Headers that fail [`check_header`] are left out with a note.
pub fn spawn(mut config: PushConfig) -> Pusher {
    config
        .headers
        .retain(|(name, value)| match check_header(name, value) {
            Ok(()) => true,
            Err(e) => {
                crate::note!("kernelkite: {e}; header left out");
                false
            }
        });
    let shared = Arc::new(Shared {
        config,
        state: Mutex::new(State::default()),
        wake: Notify::new(),
    });
    let task = tokio::spawn(run(shared.clone()));
    Pusher {
        inner: Arc::new(Inner {
            shared,
            task: Mutex::new(Some(task)),
        }),
    }
}

impl Pusher {
    /// Queue one request body (an encoded `ExportMetricsServiceRequest`). Never
    /// blocks: when the queue is full the oldest request is dropped, and after
    /// [`Pusher::shutdown`] the body itself is.
    pub fn enqueue(&self, body: Vec<u8>) {
        let shared = &self.inner.shared;
        let mut state = shared.lock();
        let capacity_bytes = shared.config.queue_capacity_bytes;
        if state.stopped {
            state.stats.dropped_requests += 1;
            return;
        }
        if body.len() > capacity_bytes {
            state.stats.dropped_requests += 1;
            state.stats.last_error = Some(format!(
                "a request of {} bytes is larger than the queue's {capacity_bytes} bytes; dropped",
                body.len()
            ));
            return;
        }
        state.push(Bytes::from(body), &shared.config);
        drop(state);
        shared.wake.notify_one();
    }

    /// The counters and the queue's size now.
    pub fn stats(&self) -> PushStats {
        let state = self.inner.shared.lock();
        PushStats {
            queued_requests: state.queue.len(),
            queued_bytes: state.queued_bytes,
            ..state.stats.clone()
        }
    }

    /// Send what is queued, for at most `deadline` (SIGTERM), then stop; what is still
    /// queued then counts as dropped.
    pub async fn shutdown(self, deadline: Duration) {
        let shared = &self.inner.shared;
        let until = Instant::now() + deadline;
        {
            let mut state = shared.lock();
            state.closing = Some(state.closing.map_or(until, |d| d.min(until)));
        }
        shared.wake.notify_one();
        let task = lock(&self.inner.task).take();
        if let Some(mut task) = task {
            // The task keeps to the deadline itself, but an attempt that began before
            // the shutdown runs to its own timeout: cut it off.
            let grace = Duration::from_millis(50);
            if tokio::time::timeout_at(until + grace, &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
        shared.lock().stop();
    }
}

/// How one attempt ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// 2xx; a partial success's message as a warning.
    Sent { warning: Option<String> },
    /// A status that must not be retried.
    Rejected { status: u16, error: String },
    /// A retryable status, a connection error or a timeout.
    Retry {
        error: String,
        retry_after: Option<Duration>,
    },
}

/// The push task: send the front request until it is delivered, rejected or dropped,
/// waiting out failures; end when a shutdown finds the queue empty or its deadline
/// passes.
async fn run(shared: Arc<Shared>) {
    let config = &shared.config;
    let initial_backoff = config.initial_backoff.max(Duration::from_millis(1));
    let max_backoff = config.max_backoff.max(initial_backoff);
    let mut backoff = initial_backoff;
    let mut jitter = Jitter::new();
    let mut logged_statuses = HashSet::new();
    loop {
        let (id, body, closing) = match shared.next() {
            Next::Send { id, body, closing } => (id, body, closing),
            Next::Wait => {
                shared.wake.notified().await;
                continue;
            }
            Next::Stop => break,
        };
        let timeout = match closing {
            Some(until) => {
                (config.request_timeout).min(until.saturating_duration_since(Instant::now()))
            }
            None => config.request_timeout,
        };
        let outcome = match tokio::time::timeout(timeout, exchange(config, &body)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Retry {
                error: format!(
                    "{}: no answer within {} ms",
                    config.endpoint,
                    timeout.as_millis()
                ),
                retry_after: None,
            },
        };
        if let Outcome::Rejected { status, error } = &outcome {
            if logged_statuses.insert(*status) {
                crate::note!("kernelkite: OTLP push: {error}; such requests are dropped");
            }
        }
        let Some(retry_after) = shared.record(id, outcome) else {
            // The collector answered: the next failure starts the backoff afresh.
            backoff = initial_backoff;
            continue;
        };
        let delay = match retry_after {
            Some(delay) => delay.min(MAX_RETRY_AFTER),
            None => jitter.apply(backoff),
        };
        backoff = (backoff * 2).min(max_backoff);
        if !pause(&shared, delay).await {
            break;
        }
    }
    shared.lock().stop();
}

/// What the task does next.
enum Next {
    Send {
        id: u64,
        body: Bytes,
        closing: Option<Instant>,
    },
    /// The queue is empty.
    Wait,
    /// Shut down: the queue is empty or the deadline passed.
    Stop,
}

impl Shared {
    /// The front request, now being sent.
    fn next(&self) -> Next {
        let mut state = self.lock();
        let closing = state.closing;
        if closing.is_some_and(|until| Instant::now() >= until) {
            return Next::Stop;
        }
        let Some(front) = state.queue.front() else {
            return if closing.is_some() {
                Next::Stop
            } else {
                Next::Wait
            };
        };
        let (id, body) = (front.id, front.body.clone());
        state.sending = Some(id);
        state.superseded = false;
        Next::Send { id, body, closing }
    }

    /// Count the attempt at request `id`; `Some(Retry-After)` when it is to be retried.
    fn record(&self, id: u64, outcome: Outcome) -> Option<Option<Duration>> {
        let mut state = self.lock();
        let superseded = std::mem::take(&mut state.superseded);
        let ours = state.sending.take() == Some(id);
        if ours && !matches!(outcome, Outcome::Retry { .. }) {
            state.pop_front();
        }
        let stats = &mut state.stats;
        match outcome {
            Outcome::Sent { warning } => {
                stats.sent_requests += 1;
                if warning.is_some() {
                    stats.last_error = warning;
                }
                None
            }
            Outcome::Rejected { error, .. } => {
                stats.failed_attempts += 1;
                stats.rejected_requests += 1;
                stats.last_error = Some(error);
                None
            }
            Outcome::Retry { error, retry_after } => {
                stats.failed_attempts += 1;
                stats.last_error = Some(error);
                // A superseded request is not retried: newer ones wait behind it.
                if superseded {
                    stats.dropped_requests += 1;
                }
                Some(retry_after)
            }
        }
    }
}

/// Wait `delay`, or less when a shutdown deadline comes first; false once that
/// deadline has passed.
async fn pause(shared: &Shared, delay: Duration) -> bool {
    let until = Instant::now() + delay;
    loop {
        let closing = shared.lock().closing;
        let end = closing.map_or(until, |c| c.min(until));
        if Instant::now() >= end {
            return closing.is_none_or(|c| Instant::now() < c);
        }
        // A new request also rings: the loop then sleeps on.
        tokio::select! {
            _ = tokio::time::sleep_until(end) => {}
            _ = shared.wake.notified() => {}
        }
    }
}

/// "Equal jitter": half the delay fixed, half random, so agents that lost the same
/// collector do not all come back at the same instant.
struct Jitter(u64);

impl Jitter {
    fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Jitter(seed | 1)
    }

    fn apply(&mut self, delay: Duration) -> Duration {
        // xorshift64: plenty for spreading retries.
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let half = delay / 2;
        let spread = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(self.0 % spread.saturating_add(1))
    }
}

/// The request head for a body of `body_len` bytes.
fn request_head(config: &PushConfig, body_len: usize) -> String {
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: kernelkite/{}\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {body_len}\r\nConnection: close\r\n",
        config.endpoint.path,
        config.endpoint.authority(),
        env!("CARGO_PKG_VERSION"),
    );
    for (name, value) in &config.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// One attempt: connect, send, read the answer (the caller bounds its time).
async fn exchange(config: &PushConfig, body: &[u8]) -> Outcome {
    let endpoint = &config.endpoint;
    let retry = |what: &str, e: std::io::Error| Outcome::Retry {
        error: format!("{endpoint}: {what}: {e}"),
        retry_after: None,
    };
    let mut stream = match TcpStream::connect((endpoint.host.as_str(), endpoint.port)).await {
        Ok(stream) => stream,
        Err(e) => return retry("connecting", e),
    };
    let _ = stream.set_nodelay(true);
    let head = request_head(config, body.len());
    let sent = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.flush().await
    };
    if let Err(e) = sent.await {
        return retry("sending", e);
    }
    let answer = match read_answer(&mut stream).await {
        Ok(answer) => answer,
        Err(e) => return retry("reading the answer", e),
    };
    // Closing with unread bytes resets the connection, which is the point past the cap.
    drop(stream);
    match parse_answer(&answer) {
        Some(answer) => classify(endpoint, &answer),
        None => Outcome::Retry {
            error: format!("{endpoint}: not an HTTP answer"),
            retry_after: None,
        },
    }
}

/// The answer's bytes: up to the end of its body (by `Content-Length`), the end of
/// the connection, or [`MAX_RESPONSE_BYTES`], whichever comes first.
async fn read_answer(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 8192];
    let mut end = None;
    while buf.len() < MAX_RESPONSE_BYTES && end.is_none_or(|end| buf.len() < end) {
        let room = chunk.len().min(MAX_RESPONSE_BYTES - buf.len());
        let n = stream.read(&mut chunk[..room]).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if end.is_none() {
            end = head_end(&buf).map(|head| {
                let length = parse_answer(&buf).and_then(|a| a.content_length);
                length.map_or(usize::MAX, |l| head.saturating_add(l))
            });
        }
    }
    if head_end(&buf).is_none() {
        let why = if buf.len() >= MAX_RESPONSE_BYTES {
            "an answer head larger than 64 KiB"
        } else {
            "the connection closed before an answer"
        };
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
    }
    Ok(buf)
}

/// Where the head ends (after its blank line).
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// An HTTP answer, its body possibly cut at [`MAX_RESPONSE_BYTES`].
#[derive(Debug, PartialEq, Eq)]
struct Answer<'a> {
    status: u16,
    reason: String,
    retry_after: Option<Duration>,
    content_type: Option<String>,
    content_length: Option<usize>,
    body: &'a [u8],
}

/// Parse an answer's head (pure; `None` when it is not HTTP/1.x).
fn parse_answer(buf: &[u8]) -> Option<Answer<'_>> {
    let end = head_end(buf)?;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let rest = status_line.strip_prefix("HTTP/1.")?;
    let mut parts = rest.splitn(3, ' ');
    let _minor = parts.next()?;
    let code = parts.next()?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut answer = Answer {
        status: code.parse().ok()?,
        reason: parts.next().unwrap_or("").trim().to_string(),
        retry_after: None,
        content_type: None,
        content_length: None,
        body: &buf[end..],
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            // Only the delay-seconds form; an HTTP date falls back to the backoff.
            "retry-after" => answer.retry_after = value.parse().ok().map(Duration::from_secs),
            "content-type" => answer.content_type = Some(value.to_ascii_lowercase()),
            "content-length" => answer.content_length = value.parse().ok(),
            _ => {}
        }
    }
    // These have no body whatever their headers say (RFC 9112, section 6.3).
    if matches!(answer.status, 100..=199 | 204 | 304) {
        answer.content_length = Some(0);
    }
    if let Some(length) = answer.content_length {
        answer.body = &answer.body[..length.min(answer.body.len())];
    }
    Some(answer)
}

/// The OTLP/HTTP verdict on an answer.
fn classify(endpoint: &Endpoint, answer: &Answer) -> Outcome {
    let status = format!("HTTP {} {}", answer.status, answer.reason);
    let status = status.trim_end();
    let error = || match detail(answer) {
        Some(detail) => format!("{endpoint}: {status}: {detail}"),
        None => format!("{endpoint}: {status}"),
    };
    match answer.status {
        200..=299 => Outcome::Sent {
            warning: partial_success(answer).map(|m| format!("{endpoint}: {m}")),
        },
        429 | 502 | 503 | 504 => Outcome::Retry {
            error: error(),
            retry_after: answer.retry_after,
        },
        _ => Outcome::Rejected {
            status: answer.status,
            error: error(),
        },
    }
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error (only its message is read).
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

fn is_protobuf(answer: &Answer) -> bool {
    (answer.content_type.as_deref()).is_some_and(|t| t.starts_with(CONTENT_TYPE))
}

/// An error answer's message, one line of at most [`MAX_DETAIL_CHARS`]: the `Status`
/// message of a protobuf body, otherwise the body's text.
fn detail(answer: &Answer) -> Option<String> {
    let status = is_protobuf(answer)
        .then(|| RpcStatus::decode(answer.body).ok())
        .flatten();
    let text = match status {
        Some(status) => status.message,
        None => String::from_utf8_lossy(answer.body).into_owned(),
    };
    let line: String = (text.split_whitespace())
        .flat_map(|word| std::iter::once(' ').chain(word.chars()))
        .skip(1)
        .filter(|c| !c.is_control())
        .take(MAX_DETAIL_CHARS)
        .collect();
    (!line.is_empty()).then_some(line)
}

/// A 2xx answer's partial success, when the collector refused some data points.
fn partial_success(answer: &Answer) -> Option<String> {
    if !is_protobuf(answer) {
        return None;
    }
    let response = ExportMetricsServiceResponse::decode(answer.body).ok()?;
    let partial = response.partial_success?;
    if partial.rejected_data_points == 0 && partial.error_message.is_empty() {
        return None;
    }
    let message: String = (partial.error_message.chars())
        .filter(|c| !c.is_control())
        .take(MAX_DETAIL_CHARS)
        .collect();
    Some(format!(
        "the collector rejected {} data points: {message}",
        partial.rejected_data_points
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn parses_endpoints() {
        let ok = |url: &str, host: &str, port: u16, path: &str| {
            let want = Endpoint {
                host: host.into(),
                port,
                path: path.into(),
            };
            assert_eq!(Endpoint::parse(url), Ok(want), "{url}");
        };
        ok("http://collector", "collector", 4318, "/v1/metrics");
        ok("http://collector/", "collector", 4318, "/v1/metrics");
        ok("HTTP://Collector:9000", "Collector", 9000, "/v1/metrics");
        ok(
            "http://10.0.0.7:4318/v1/metrics",
            "10.0.0.7",
            4318,
            "/v1/metrics",
        );
        ok(
            "http://otel-1.example_x.net/otlp/v1/metrics",
            "otel-1.example_x.net",
            4318,
            "/otlp/v1/metrics",
        );
        ok("http://[::1]", "::1", 4318, "/v1/metrics");
        ok(
            "http://[2001:db8::7]:80/m?tenant=a",
            "2001:db8::7",
            80,
            "/m?tenant=a",
        );
        ok("http://h?tenant=a", "h", 4318, "/v1/metrics?tenant=a");
        let e = Endpoint::parse("http://[::1]:80/x").unwrap();
        assert_eq!(e.authority(), "[::1]");
        assert_eq!(e.to_string(), "http://[::1]/x");
        let e = Endpoint::parse("http://localhost").unwrap();
        assert_eq!(e.to_string(), "http://localhost:4318/v1/metrics");
    }

    #[test]
    fn refuses_bad_endpoints_in_one_line() {
        let https = Endpoint::parse("https://collector:4318").unwrap_err();
        assert!(matches!(https, PushError::Https(_)));
        let text = https.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.contains("OpenTelemetry Collector") && text.contains("TLS"),
            "{text}"
        );
        for (url, reason) in [
            ("collector:4318", "must start with http://"),
            ("ftp://collector", "must start with http://"),
            ("http://", "no host"),
            ("http://:4318", "no host"),
            ("http://user:pw@collector", "user information"),
            ("http://collector/v1/metrics#x", "fragment"),
            ("http://collector:0", "invalid port"),
            ("http://collector:65536", "invalid port"),
            ("http://collector:+80", "invalid port"),
            ("http://collector:", "invalid port"),
            ("http://::1", "without [brackets]"),
            ("http://[::1", "unclosed ["),
            ("http://[nope]", "invalid IPv6"),
            ("http://[::1]x", "junk after ]"),
            ("http://coll ector", "spaces"),
            ("http://collector\r\nX: y", "control"),
            ("http://col%6Cector", "invalid host name"),
            ("http://caf\u{e9}", "non-ASCII"),
        ] {
            let e = Endpoint::parse(url).unwrap_err();
            assert!(e.to_string().contains(reason), "{url}: {e}");
            assert!(!e.to_string().contains('\n'), "{url}: {e}");
        }
    }

    #[test]
    fn headers_are_checked() {
        assert_eq!(
            parse_header("Authorization = Bearer abc"),
            Ok(("Authorization".into(), "Bearer abc".into()))
        );
        assert_eq!(
            parse_header("x-scope-orgid=a=b"),
            Ok(("x-scope-orgid".into(), "a=b".into()))
        );
        for (spec, reason) in [
            ("no-equals", "name=value"),
            ("=v", "not a valid header name"),
            ("bad name=v", "not a valid header name"),
            ("x:y=v", "not a valid header name"),
            ("Content-Type=text/plain", "written by kernelkite"),
            ("HOST=evil", "written by kernelkite"),
            ("x=a\r\nInjected: 1", "control character"),
            ("x=a\nb", "control character"),
        ] {
            let e = parse_header(spec).unwrap_err();
            assert!(e.to_string().contains(reason), "{spec:?}: {e}");
        }
        let mut config = PushConfig::new(Endpoint::parse("http://h").unwrap());
        assert!(config.add_header("x-api-key", "k").is_ok());
        assert!(config.add_header("x", "a\rb").is_err());
        assert_eq!(config.headers, [("x-api-key".into(), "k".into())]);
    }

    #[test]
    fn answers_are_parsed_and_classified_as_the_otlp_spec_says() {
        let raw = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\ncontent-length: 5\r\n\r\nbusy!extra";
        let answer = parse_answer(raw).unwrap();
        assert_eq!(answer.status, 503);
        assert_eq!(answer.reason, "Service Unavailable");
        assert_eq!(answer.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(answer.body, b"busy!");
        // An HTTP date is not honoured (the backoff applies).
        let raw = b"HTTP/1.0 429 Too Many\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n";
        assert_eq!(parse_answer(raw).unwrap().retry_after, None);
        // A 204 ends at its head: the read does not wait for a close.
        let raw = b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n";
        assert_eq!(parse_answer(raw).unwrap().content_length, Some(0));
        for junk in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"SSH-2.0\r\n\r\n",
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"\xff\r\n\r\n",
        ] {
            assert_eq!(parse_answer(junk), None, "{junk:?}");
        }
        let endpoint = Endpoint::parse("http://h").unwrap();
        let kind = |status: u16| {
            let raw = format!("HTTP/1.1 {status} X\r\nRetry-After: 2\r\n\r\n");
            match classify(&endpoint, &parse_answer(raw.as_bytes()).unwrap()) {
                Outcome::Sent { .. } => "sent",
                Outcome::Rejected { .. } => "rejected",
                Outcome::Retry { retry_after, .. } => {
                    assert_eq!(retry_after, Some(Duration::from_secs(2)));
                    "retry"
                }
            }
        };
        for status in [200, 202, 204] {
            assert_eq!(kind(status), "sent", "{status}");
        }
        for status in [429, 502, 503, 504] {
            assert_eq!(kind(status), "retry", "{status}");
        }
        for status in [301, 400, 401, 403, 404, 408, 413, 415, 500, 501] {
            assert_eq!(kind(status), "rejected", "{status}");
        }
    }

    #[test]
    fn error_details_come_from_the_status_message_or_the_text() {
        let status = RpcStatus {
            code: 3,
            message: "metric name\nis empty".into(),
        }
        .encode_to_vec();
        let mut raw =
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-protobuf\r\n\r\n".to_vec();
        raw.extend_from_slice(&status);
        let answer = parse_answer(&raw).unwrap();
        assert_eq!(detail(&answer).as_deref(), Some("metric name is empty"));
        let long = format!(
            "HTTP/1.1 400 Bad\r\nContent-Type: text/plain\r\n\r\n{}",
            "e".repeat(5000)
        );
        let answer = parse_answer(long.as_bytes()).unwrap();
        assert_eq!(detail(&answer).unwrap().len(), MAX_DETAIL_CHARS);
        // A partial success is a warning.
        let response = ExportMetricsServiceResponse {
            partial_success: Some(
                opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsPartialSuccess {
                    rejected_data_points: 3,
                    error_message: "bad units".into(),
                },
            ),
        };
        let mut raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n\r\n".to_vec();
        raw.extend_from_slice(&response.encode_to_vec());
        let endpoint = Endpoint::parse("http://h").unwrap();
        let Outcome::Sent { warning } = classify(&endpoint, &parse_answer(&raw).unwrap()) else {
            panic!("not sent");
        };
        assert_eq!(
            warning.as_deref(),
            Some("http://h:4318/v1/metrics: the collector rejected 3 data points: bad units")
        );
    }

    #[test]
    fn jitter_stays_between_half_and_all_of_the_delay() {
        let mut jitter = Jitter::new();
        let delay = Duration::from_millis(100);
        let mut seen = HashSet::new();
        for _ in 0..100 {
            let d = jitter.apply(delay);
            assert!(d >= delay / 2 && d <= delay, "{d:?}");
            seen.insert(d);
        }
        assert!(seen.len() > 50);
        assert_eq!(jitter.apply(Duration::ZERO), Duration::ZERO);
    }

    /// A request as the fake collector saw it.
    #[derive(Debug)]
    struct Seen {
        head: String,
        body: Vec<u8>,
    }

    /// What the fake collector answers to its n-th request (from 0): raw bytes, or
    /// nothing at all (it holds the connection open).
    type Script = fn(usize) -> Option<Vec<u8>>;

    fn ok_answer(_: usize) -> Option<Vec<u8>> {
        let body = ExportMetricsServiceResponse::default().encode_to_vec();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        Some([head.into_bytes(), body].concat())
    }

    /// A fake collector on `listener`: every request goes to the returned channel.
    fn fake_collector(listener: TcpListener, script: Script) -> mpsc::UnboundedReceiver<Seen> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut n = 0;
            while let Ok((mut stream, _)) = listener.accept().await {
                let Some(seen) = read_request(&mut stream).await else {
                    continue;
                };
                let _ = tx.send(seen);
                let answer = script(n);
                n += 1;
                tokio::spawn(async move {
                    match answer {
                        Some(bytes) => {
                            let _ = stream.write_all(&bytes).await;
                            let _ = stream.shutdown().await;
                        }
                        None => tokio::time::sleep(Duration::from_secs(3600)).await,
                    }
                });
            }
        });
        rx
    }

    async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = head_end(&buf) {
                let head = String::from_utf8(buf[..end].to_vec()).ok()?;
                let length: usize = (head.lines())
                    .find_map(|l| l.strip_prefix("Content-Length: "))?
                    .parse()
                    .ok()?;
                if buf.len() >= end + length {
                    let body = buf[end..end + length].to_vec();
                    return Some(Seen { head, body });
                }
            }
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn listener() -> (TcpListener, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (listener, addr)
    }

    /// Fast retries for tests.
    fn test_config(addr: SocketAddr) -> PushConfig {
        let mut config = PushConfig::new(Endpoint::parse(&format!("http://{addr}")).unwrap());
        config.request_timeout = Duration::from_millis(500);
        config.initial_backoff = Duration::from_millis(10);
        config.max_backoff = Duration::from_millis(40);
        config
    }

    /// Poll the pusher's stats until `ok` holds (5 s at most).
    async fn until(pusher: &Pusher, what: &str, ok: impl Fn(&PushStats) -> bool) -> PushStats {
        let start = Instant::now();
        loop {
            let stats = pusher.stats();
            if ok(&stats) {
                return stats;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{what}: {stats:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[test]
    fn a_request_arrives_as_an_otlp_http_post() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            let mut seen = fake_collector(listener, ok_answer);
            let mut config = test_config(addr);
            config.add_header("x-api-key", "secret").unwrap();
            let pusher = spawn(config);
            pusher.enqueue(b"\x0a\x00first".to_vec());
            let request = seen.recv().await.unwrap();
            let stats = until(&pusher, "sent", |s| s.sent_requests == 1).await;
            assert_eq!((stats.queued_requests, stats.queued_bytes), (0, 0));
            assert_eq!(stats.failed_attempts, 0);
            assert_eq!(stats.last_error, None);
            let lines: Vec<&str> = request.head.split("\r\n").collect();
            assert_eq!(lines[0], "POST /v1/metrics HTTP/1.1");
            for header in [
                format!("Host: {addr}"),
                "Content-Type: application/x-protobuf".into(),
                "Content-Length: 7".into(),
                "x-api-key: secret".into(),
                "Connection: close".into(),
            ] {
                assert!(lines.contains(&header.as_str()), "{header} in {lines:?}");
            }
            assert!(lines
                .iter()
                .any(|l| l.starts_with("User-Agent: kernelkite/")));
            assert_eq!(request.body, b"\x0a\x00first");
            // Requests go in order.
            pusher.enqueue(b"second".to_vec());
            pusher.enqueue(b"third".to_vec());
            assert_eq!(seen.recv().await.unwrap().body, b"second");
            assert_eq!(seen.recv().await.unwrap().body, b"third");
            until(&pusher, "all sent", |s| s.sent_requests == 3).await;
        });
    }

    #[test]
    fn a_503_with_retry_after_is_retried_after_it() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            let mut seen = fake_collector(listener, |n| match n {
                0 => Some(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 5\r\n\r\nbusy\n".to_vec()),
                _ => ok_answer(n),
            });
            let pusher = spawn(test_config(addr));
            pusher.enqueue(b"metrics".to_vec());
            let first = seen.recv().await.unwrap();
            let refused_at = Instant::now();
            let stats = until(&pusher, "a failed attempt", |s| s.failed_attempts == 1).await;
            let error = stats.last_error.unwrap();
            assert!(error.contains("HTTP 503 Service Unavailable: busy"), "{error}");
            assert_eq!(stats.queued_requests, 1);
            let second = seen.recv().await.unwrap();
            // Retry-After, not the 10 ms backoff.
            let waited = refused_at.elapsed();
            assert!(waited >= Duration::from_millis(900), "{waited:?}");
            assert_eq!(first.body, second.body);
            let stats = until(&pusher, "sent", |s| s.sent_requests == 1).await;
            assert_eq!((stats.failed_attempts, stats.rejected_requests), (1, 0));
            assert_eq!(stats.queued_requests, 0);
        });
    }

    #[test]
    fn with_the_collector_down_the_queue_stays_bounded_and_drops_the_oldest() {
        runtime().block_on(async {
            // A port with nothing listening.
            let (listener, addr) = listener().await;
            drop(listener);
            let mut config = test_config(addr);
            config.queue_capacity_requests = 4;
            let pusher = spawn(config);
            for i in 0..20u8 {
                pusher.enqueue(vec![i; 10]);
            }
            let stats = pusher.stats();
            assert_eq!((stats.queued_requests, stats.queued_bytes), (4, 40));
            assert_eq!(stats.dropped_requests, 16);
            // Retries fail (connection refused) and keep the queue as it is.
            let stats = until(&pusher, "retries", |s| s.failed_attempts >= 3).await;
            assert_eq!((stats.queued_requests, stats.dropped_requests), (4, 16));
            assert_eq!((stats.sent_requests, stats.rejected_requests), (0, 0));
            let error = stats.last_error.unwrap();
            assert!(
                error.contains("connecting") && error.contains("refused"),
                "{error}"
            );
            for i in 20..23u8 {
                pusher.enqueue(vec![i; 10]);
                tokio::time::sleep(Duration::from_millis(7)).await;
            }
            let stats = pusher.stats();
            assert_eq!((stats.queued_requests, stats.dropped_requests), (4, 19));
            // The collector comes back: the four newest arrive, in order.
            let listener = TcpListener::bind(addr).await.unwrap();
            let mut seen = fake_collector(listener, ok_answer);
            let stats = until(&pusher, "sent", |s| s.sent_requests == 4).await;
            assert_eq!((stats.queued_requests, stats.dropped_requests), (0, 19));
            for i in 19..23u8 {
                assert_eq!(seen.recv().await.unwrap().body, vec![i; 10]);
            }
        });
    }

    #[test]
    fn the_queue_is_bounded_in_bytes_too() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            drop(listener);
            let mut config = test_config(addr);
            config.queue_capacity_bytes = 100;
            let pusher = spawn(config);
            for _ in 0..5 {
                pusher.enqueue(vec![0; 30]);
            }
            let stats = pusher.stats();
            assert_eq!((stats.queued_requests, stats.queued_bytes), (3, 90));
            assert_eq!(stats.dropped_requests, 2);
            // Larger than the whole queue: dropped alone, the queue kept.
            pusher.enqueue(vec![0; 101]);
            let stats = pusher.stats();
            assert_eq!((stats.queued_requests, stats.dropped_requests), (3, 3));
            assert!(stats.last_error.unwrap().contains("101 bytes"));
        });
    }

    #[test]
    fn a_400_is_rejected_and_not_retried() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            let mut seen = fake_collector(listener, |_| {
                let status = RpcStatus {
                    code: 3,
                    message: "unknown field 7".into(),
                }
                .encode_to_vec();
                let head = format!(
                    "HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
                    status.len()
                );
                Some([head.into_bytes(), status].concat())
            });
            let pusher = spawn(test_config(addr));
            pusher.enqueue(b"one".to_vec());
            pusher.enqueue(b"two".to_vec());
            let stats = until(&pusher, "rejected", |s| s.rejected_requests == 2).await;
            assert_eq!(stats.failed_attempts, 2);
            assert_eq!((stats.sent_requests, stats.dropped_requests), (0, 0));
            assert_eq!(stats.queued_requests, 0);
            let error = stats.last_error.unwrap();
            assert!(error.ends_with("HTTP 400 Bad Request: unknown field 7"), "{error}");
            // No retry: nothing more arrives.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(seen.recv().await.unwrap().body, b"one");
            assert_eq!(seen.recv().await.unwrap().body, b"two");
            assert!(seen.try_recv().is_err());
            assert_eq!(pusher.stats().failed_attempts, 2);
        });
    }

    #[test]
    fn a_collector_that_never_answers_is_timed_out() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            let mut seen = fake_collector(listener, |_| None);
            let mut config = test_config(addr);
            config.request_timeout = Duration::from_millis(100);
            let pusher = spawn(config);
            pusher.enqueue(b"m".to_vec());
            let stats = until(&pusher, "timeouts", |s| s.failed_attempts >= 2).await;
            let error = stats.last_error.unwrap();
            assert!(error.contains("no answer within 100 ms"), "{error}");
            assert_eq!((stats.sent_requests, stats.queued_requests), (0, 1));
            assert!(seen.recv().await.is_some());
        });
    }

    #[test]
    fn a_huge_error_body_is_read_only_in_part() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            // A 400 announcing 10 MiB, sent by a server that then keeps the connection open.
            let _seen = fake_collector(listener, |_| {
                let mut answer =
                    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 10485760\r\n\r\n"
                        .to_vec();
                answer.resize(answer.len() + (10 << 20), b'x');
                Some(answer)
            });
            let mut config = test_config(addr);
            config.request_timeout = Duration::from_secs(5);
            let pusher = spawn(config);
            let start = Instant::now();
            pusher.enqueue(b"m".to_vec());
            let stats = until(&pusher, "rejected", |s| s.rejected_requests == 1).await;
            assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
            let error = stats.last_error.unwrap();
            assert!(error.ends_with(&"x".repeat(MAX_DETAIL_CHARS)), "{error}");
        });
    }

    #[test]
    fn a_request_superseded_while_it_is_sent_is_not_retried() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            // It never answers: every attempt times out.
            let mut seen = fake_collector(listener, |_| None);
            let mut config = test_config(addr);
            config.queue_capacity_requests = 1;
            config.request_timeout = Duration::from_millis(200);
            let pusher = spawn(config);
            pusher.enqueue(b"old".to_vec());
            assert_eq!(seen.recv().await.unwrap().body, b"old");
            // "old" is on the wire; "new" takes its place in the queue.
            pusher.enqueue(b"new".to_vec());
            let stats = pusher.stats();
            assert_eq!((stats.queued_requests, stats.dropped_requests), (1, 0));
            // "old" times out and counts as dropped; "new" is tried next.
            assert_eq!(seen.recv().await.unwrap().body, b"new");
            let stats = pusher.stats();
            assert_eq!((stats.failed_attempts, stats.dropped_requests), (1, 1));
        });
    }

    #[test]
    fn shutdown_flushes_the_queue_within_its_deadline() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            let mut seen = fake_collector(listener, ok_answer);
            let pusher = spawn(test_config(addr));
            let handle = pusher.clone();
            for i in 0..3u8 {
                pusher.enqueue(vec![i]);
            }
            pusher.shutdown(Duration::from_secs(5)).await;
            let stats = handle.stats();
            assert_eq!((stats.sent_requests, stats.dropped_requests), (3, 0));
            for i in 0..3u8 {
                assert_eq!(seen.recv().await.unwrap().body, [i]);
            }
            // Stopped: later requests are dropped.
            handle.enqueue(vec![9]);
            assert_eq!(handle.stats().dropped_requests, 1);
            assert_eq!(handle.stats().queued_requests, 0);
        });
    }

    #[test]
    fn shutdown_with_the_collector_down_gives_up_at_the_deadline() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            drop(listener);
            let pusher = spawn(test_config(addr));
            let handle = pusher.clone();
            pusher.enqueue(vec![1]);
            pusher.enqueue(vec![2]);
            let start = Instant::now();
            pusher.shutdown(Duration::from_millis(150)).await;
            let took = start.elapsed();
            assert!(
                took >= Duration::from_millis(140) && took < Duration::from_millis(400),
                "{took:?}"
            );
            let stats = handle.stats();
            assert_eq!((stats.sent_requests, stats.dropped_requests), (0, 2));
            assert_eq!(stats.queued_requests, 0);
            assert!(stats.failed_attempts >= 1);
        });
    }

    #[test]
    fn shutdown_cuts_off_an_attempt_that_outlives_the_deadline() {
        runtime().block_on(async {
            let (listener, addr) = listener().await;
            let mut seen = fake_collector(listener, |_| None);
            let mut config = test_config(addr);
            config.request_timeout = Duration::from_secs(30);
            let pusher = spawn(config);
            let handle = pusher.clone();
            pusher.enqueue(vec![1]);
            seen.recv().await.unwrap();
            let start = Instant::now();
            pusher.shutdown(Duration::from_millis(100)).await;
            assert!(start.elapsed() < Duration::from_millis(500));
            let stats = handle.stats();
            assert_eq!((stats.dropped_requests, stats.queued_requests), (1, 0));
        });
    }
}
