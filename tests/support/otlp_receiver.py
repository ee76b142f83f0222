"""An OTLP/HTTP metrics receiver for integration tests, built on the official
opentelemetry-proto package.

usage: otlp_receiver.py --port-file PATH --out PATH [--port N]
                        [--status-sequence 503,503,200] [--retry-after SECONDS]

* Listens on 127.0.0.1 (port N, default 0: any free one) and writes the port to
  --port-file once listening (written whole, then renamed into place).
* Accepts POST /v1/metrics with Content-Type application/x-protobuf, parses the body
  as an ExportMetricsServiceRequest and appends one JSON line per request to --out:
  {"status", "headers", "resources": [{"attributes", "metrics": [{"name", "unit",
  "type", "is_monotonic", "aggregation_temporality", "data_points": [...]}]}]}.
  Data points carry their attributes, times and value (as_double or as_int;
  count, sum, bucket_counts and explicit_bounds for histograms).
* Answers 200 with an empty ExportMetricsServiceResponse, or the next status of
  --status-sequence (200 once it is used up). Error answers carry a protobuf
  google.rpc.Status, as OTLP/HTTP asks; --retry-after adds a Retry-After header to
  429 and 503 answers. A request that is not OTLP is answered 400, 404, 405 or 415.
* SIGTERM (or SIGINT) stops it cleanly: exit status 0.
"""

import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

PATH = "/v1/metrics"
CONTENT_TYPE = "application/x-protobuf"
MAX_BODY_BYTES = 64 << 20


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def rpc_status(message):
    """google.rpc.Status{message} encoded by hand (field 2, a string): the package
    that defines it (googleapis-common-protos) is not a test dependency."""
    data = message.encode()
    return b"\x12" + varint(len(data)) + data


def any_value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def number_point(p):
    out = {
        "attributes": attributes(p.attributes),
        "start_time_unix_nano": p.start_time_unix_nano,
        "time_unix_nano": p.time_unix_nano,
    }
    kind = p.WhichOneof("value")
    if kind is not None:
        out[kind] = getattr(p, kind)
    return out


def histogram_point(p):
    out = {
        "attributes": attributes(p.attributes),
        "start_time_unix_nano": p.start_time_unix_nano,
        "time_unix_nano": p.time_unix_nano,
        "count": p.count,
        "bucket_counts": list(p.bucket_counts),
        "explicit_bounds": list(p.explicit_bounds),
    }
    for optional in ("sum", "min", "max"):
        if p.HasField(optional):
            out[optional] = getattr(p, optional)
    return out


def metric(m):
    kind = m.WhichOneof("data")
    out = {"name": m.name, "unit": m.unit, "type": kind}
    if kind == "sum":
        out["is_monotonic"] = m.sum.is_monotonic
        out["aggregation_temporality"] = m.sum.aggregation_temporality
        out["data_points"] = [number_point(p) for p in m.sum.data_points]
    elif kind == "gauge":
        out["data_points"] = [number_point(p) for p in m.gauge.data_points]
    elif kind == "histogram":
        out["aggregation_temporality"] = m.histogram.aggregation_temporality
        out["data_points"] = [histogram_point(p) for p in m.histogram.data_points]
    else:
        # Exponential histograms and summaries: named, not unpacked.
        out["data_points"] = []
    return out


def summary(request):
    return [
        {
            "attributes": attributes(rm.resource.attributes),
            "metrics": [metric(m) for sm in rm.scope_metrics for m in sm.metrics],
        }
        for rm in request.resource_metrics
    ]


class Receiver(ThreadingHTTPServer):
    # A client that keeps a connection open must not hold up the others.
    daemon_threads = True

    def __init__(self, port, out, statuses, retry_after):
        super().__init__(("127.0.0.1", port), Handler)
        self.out = out
        self.statuses = statuses
        self.retry_after = retry_after
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def answer(self, status, body, content_type=CONTENT_TYPE, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def refuse(self, status, message):
        self.close_connection = True
        self.answer(status, rpc_status(message))

    def do_GET(self):
        self.refuse(405, "POST OTLP metrics to " + PATH)

    do_PUT = do_GET

    def do_POST(self):
        if self.path.split("?", 1)[0] != PATH:
            return self.refuse(404, "this receiver takes " + PATH)
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type.lower() != CONTENT_TYPE:
            return self.refuse(415, "Content-Type must be " + CONTENT_TYPE)
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self.refuse(411, "Content-Length required")
        if not 0 <= length <= MAX_BODY_BYTES:
            return self.refuse(413, "body too large")
        body = self.rfile.read(length)
        request = ExportMetricsServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError as e:
            return self.refuse(400, f"not an ExportMetricsServiceRequest: {e}")
        server = self.server
        with server.lock:
            status = server.statuses.pop(0) if server.statuses else 200
            line = {
                "status": status,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body_bytes": length,
                "resources": summary(request),
            }
            server.out.write(json.dumps(line) + "\n")
            server.out.flush()
        if 200 <= status < 300:
            return self.answer(status, ExportMetricsServiceResponse().SerializeToString())
        extra = []
        if server.retry_after is not None and status in (429, 503):
            extra.append(("Retry-After", str(server.retry_after)))
        self.answer(status, rpc_status(f"scripted status {status}"), extra=extra)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--status-sequence", default="")
    parser.add_argument("--retry-after", type=int)
    args = parser.parse_args()
    try:
        statuses = [int(s) for s in args.status_sequence.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--status-sequence: not a list of statuses: {args.status_sequence!r}")
    if any(not 100 <= s <= 599 for s in statuses):
        parser.error(f"--status-sequence: statuses are 100 to 599: {args.status_sequence!r}")

    with open(args.out, "a") as out:
        server = Receiver(args.port, out, statuses, args.retry_after)

        def stop(signum, frame):
            # shutdown() waits for serve_forever() to return: not from its own thread.
            threading.Thread(target=server.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{server.server_address[1]}\n")
        os.replace(tmp, args.port_file)
        server.serve_forever(poll_interval=0.05)
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
