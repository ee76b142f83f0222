//! End to end: the OTLP/HTTP pusher (`export::otlp_push`) against a real receiver
//! built on the official Python opentelemetry-proto package
//! (`tests/support/otlp_receiver.py`), with the metrics of a committed fixture.
//!
//! Needs python3 with opentelemetry-proto (`cargo xtask ci` installs it); without it
//! the test fails and says so.
#![cfg(target_os = "linux")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kernelkite::export::otlp::{metrics_proto, metrics_request};
use kernelkite::export::otlp_push::{self, Endpoint, PushConfig, PushStats, Pusher};
use kernelkite::export::ExportOptions;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn require_python() {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import google.protobuf, opentelemetry.proto.collector.metrics.v1.metrics_service_pb2",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs python3 with the opentelemetry-proto package \
         (`cargo xtask ci` installs it; by hand: pip install opentelemetry-proto protobuf)"
    );
}

/// A running `otlp_receiver.py`.
struct Receiver {
    child: Option<Child>,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    /// Start the receiver on `port` (0: any) and wait until it listens.
    fn start(dir: &Path, name: &str, port: u16, extra: &[&str]) -> Receiver {
        let port_file = dir.join(format!("{name}.port"));
        let out = dir.join(format!("{name}.jsonl"));
        let mut child = Command::new("python3")
            .arg(repo().join("tests/support/otlp_receiver.py"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--out")
            .arg(&out)
            .args(["--port", &port.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs");
        let start = Instant::now();
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break text.trim().parse().expect("a port in the port file");
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("otlp_receiver.py exited before listening: {status}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "receiver not listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Receiver {
            child: Some(child),
            port,
            out,
        }
    }

    /// SIGTERM: the receiver must stop cleanly.
    fn stop(&mut self) {
        let mut child = self.child.take().expect("running");
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let status = child.wait().unwrap();
        assert!(status.success(), "receiver on SIGTERM: {status}");
    }

    /// The requests it logged.
    fn requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        (text.lines())
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The fixture's metrics request, its times anchored at `start_unix_ns`.
fn request(start_unix_ns: u64) -> (ExportMetricsServiceRequest, Vec<u8>) {
    let fixture = repo().join("fixtures/api-server-ebpf.json");
    let bundle = kernelkite::model::fixture::load_fixture(&fixture).unwrap();
    let analysis = kernelkite::analysis::analyze(&bundle);
    let options = ExportOptions { start_unix_ns };
    (
        metrics_request(&bundle, &analysis, options),
        metrics_proto(&bundle, &analysis, options),
    )
}

/// Attributes as the receiver writes them.
fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, Value> {
    let value = |kv: &KeyValue| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::from(s.as_str()),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::BoolValue(b)) => Value::from(*b),
        Some(any_value::Value::DoubleValue(d)) => Value::from(*d),
        other => panic!("unexpected attribute value {other:?}"),
    };
    kvs.iter().map(|kv| (kv.key.clone(), value(kv))).collect()
}

/// (resource attributes, metric names) of each resource.
type Shape = Vec<(BTreeMap<String, Value>, Vec<String>)>;

fn sent_shape(request: &ExportMetricsServiceRequest) -> Shape {
    (request.resource_metrics.iter())
        .map(|rm| {
            let resource = rm.resource.as_ref().unwrap();
            let names = (rm.scope_metrics.iter())
                .flat_map(|sm| sm.metrics.iter().map(|m| m.name.clone()))
                .collect();
            (attributes(&resource.attributes), names)
        })
        .collect()
}

fn received_shape(line: &Value) -> Shape {
    (line["resources"].as_array().unwrap().iter())
        .map(|r| {
            let attrs = serde_json::from_value(r["attributes"].clone()).unwrap();
            let names = (r["metrics"].as_array().unwrap().iter())
                .map(|m| m["name"].as_str().unwrap().to_string())
                .collect();
            (attrs, names)
        })
        .collect()
}

/// The first data point's start time: it tells the requests apart.
fn sent_start(request: &ExportMetricsServiceRequest) -> u64 {
    let m = &request.resource_metrics[0].scope_metrics[0].metrics[0];
    match m.data.as_ref().unwrap() {
        metric::Data::Histogram(h) => h.data_points[0].start_time_unix_nano,
        metric::Data::Sum(s) => s.data_points[0].start_time_unix_nano,
        other => panic!("unexpected first metric {other:?}"),
    }
}

fn received_start(line: &Value) -> u64 {
    line["resources"][0]["metrics"][0]["data_points"][0]["start_time_unix_nano"]
        .as_u64()
        .unwrap()
}

async fn until(pusher: &Pusher, what: &str, ok: impl Fn(&PushStats) -> bool) -> PushStats {
    let start = Instant::now();
    loop {
        let stats = pusher.stats();
        if ok(&stats) {
            return stats;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn the_pusher_delivers_to_an_otlp_receiver_and_bounds_its_queue_while_it_is_down() {
    require_python();
    let dir = tempfile::tempdir().unwrap();
    // The first answer is a 503: retried, then delivered.
    let mut receiver = Receiver::start(dir.path(), "first", 0, &["--status-sequence", "503,200"]);
    let port = receiver.port;
    let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    let mut config = PushConfig::new(endpoint);
    config.add_header("x-kernelkite-test", "e2e").unwrap();
    config.queue_capacity_requests = 4;
    config.request_timeout = Duration::from_secs(5);
    config.initial_backoff = Duration::from_millis(20);
    config.max_backoff = Duration::from_millis(100);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pusher = otlp_push::spawn(config);
        let (sent, body) = request(1_000_000_000);
        pusher.enqueue(body);
        let stats = until(&pusher, "first request sent", |s| s.sent_requests == 1).await;
        assert_eq!(stats.failed_attempts, 1, "{stats:?}");
        let logged = receiver.requests();
        let statuses: Vec<u64> = logged
            .iter()
            .map(|l| l["status"].as_u64().unwrap())
            .collect();
        assert_eq!(statuses, [503, 200]);
        let line = &logged[1];
        assert_eq!(line["headers"]["x-kernelkite-test"], "e2e");
        assert_eq!(line["headers"]["content-type"], "application/x-protobuf");
        // What the receiver parsed is what was built: resources and metric names.
        let shape = received_shape(line);
        assert_eq!(shape, sent_shape(&sent));
        assert_eq!(shape.len(), 3);
        let server = &shape[0].0;
        assert_eq!(server["service.name"], "kernelkite");
        assert_eq!(server["kernelkite.backend"], "ebpf");
        assert_eq!(server["process.pid"], 6000);
        assert_eq!(server["process.executable.name"], "api-server");
        assert_eq!(
            shape[0].1,
            [
                "kernelkite.syscall.duration",
                "kernelkite.latency_class.time",
                "process.cpu.time"
            ]
        );
        assert_eq!(shape[2].1, ["kernelkite.events.lost"]);
        let metrics = line["resources"][0]["metrics"].as_array().unwrap();
        assert_eq!(metrics[0]["type"], "histogram");
        assert_eq!(metrics[0]["unit"], "s");
        assert_eq!(metrics[1]["type"], "sum");
        assert_eq!(metrics[1]["is_monotonic"], true);
        // AGGREGATION_TEMPORALITY_CUMULATIVE
        assert_eq!(metrics[1]["aggregation_temporality"], 2);
        assert_eq!(received_start(line), sent_start(&sent));

        // The collector goes away: ten requests, four kept (the newest), six dropped.
        receiver.stop();
        let failed_before = pusher.stats().failed_attempts;
        let mut starts = Vec::new();
        for i in 2..12u64 {
            let (sent, body) = request(i * 1_000_000_000);
            starts.push(sent_start(&sent));
            pusher.enqueue(body);
        }
        let queued = pusher.stats();
        assert_eq!((queued.queued_requests, queued.dropped_requests), (4, 6));
        let stats = until(&pusher, "retries while down", |s| {
            s.failed_attempts >= failed_before + 3
        })
        .await;
        assert_eq!(stats.queued_requests, 4, "{stats:?}");
        assert_eq!(stats.queued_bytes, queued.queued_bytes);
        assert_eq!((stats.dropped_requests, stats.sent_requests), (6, 1));
        let error = stats.last_error.unwrap();
        assert!(error.contains("refused"), "{error}");

        // Back on the same port: the four newest arrive, oldest first.
        let receiver = Receiver::start(dir.path(), "second", port, &[]);
        let stats = until(&pusher, "queue flushed", |s| s.sent_requests == 5).await;
        assert_eq!((stats.queued_requests, stats.dropped_requests), (0, 6));
        let logged = receiver.requests();
        let got: Vec<u64> = logged.iter().map(received_start).collect();
        assert_eq!(got, starts[6..]);
        assert!(logged.iter().all(|l| l["status"] == 200));
        pusher.shutdown(Duration::from_secs(1)).await;
        let mut receiver = receiver;
        receiver.stop();
    });
}
