"""Check kernelkite's OTLP exports with the official opentelemetry-proto package.

usage: otlp_check.py metrics|traces JSON_FILE PROTO_FILE

* The JSON document must follow OTLP/JSON: trace and span ids are lowercase hex
  (32 and 16 digits, not all zero), 64-bit integers are strings. It is then parsed
  strictly (unknown fields rejected) with google.protobuf.json_format, after the hex
  ids are turned into the base64 that protobuf's own JSON mapping uses for bytes (the
  one rule where OTLP/JSON departs from it).
* The protobuf bytes must parse (ParseFromString) into the same message.
Prints one summary line; exits non-zero with the reason on any failure.
"""

import base64
import json
import re
import sys

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

ID_LENGTHS = {"traceId": 32, "spanId": 16, "parentSpanId": 16}
U64_KEYS = {"startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "count", "intValue", "asInt"}


def fail(msg):
    print(f"otlp_check: {msg}", file=sys.stderr)
    sys.exit(1)


def hex_ids_to_base64(node, path="$"):
    """Validate OTLP/JSON id and integer encodings; rewrite ids for json_format."""
    if isinstance(node, dict):
        for key, value in list(node.items()):
            where = f"{path}.{key}"
            if key in ID_LENGTHS:
                if key == "parentSpanId" and value == "":
                    continue
                if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]+", value):
                    fail(f"{where} is not lowercase hex: {value!r}")
                if len(value) != ID_LENGTHS[key]:
                    fail(f"{where} has {len(value)} hex digits, want {ID_LENGTHS[key]}")
                if set(value) == {"0"}:
                    fail(f"{where} is all zero (invalid id)")
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            elif key in U64_KEYS:
                if not isinstance(value, str) or not re.fullmatch(r"-?[0-9]+", value):
                    fail(f"{where} must be a decimal string in OTLP/JSON, got {value!r}")
            elif key == "bucketCounts":
                if not all(isinstance(v, str) for v in value):
                    fail(f"{where} must hold decimal strings")
            else:
                hex_ids_to_base64(value, where)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            hex_ids_to_base64(value, f"{path}[{i}]")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("metrics", "traces"):
        fail(__doc__)
    kind, json_path, proto_path = sys.argv[1:]
    cls = ExportMetricsServiceRequest if kind == "metrics" else ExportTraceServiceRequest
    with open(json_path) as f:
        doc = json.load(f)
    hex_ids_to_base64(doc)
    from_json = cls()
    try:
        json_format.ParseDict(doc, from_json, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        fail(f"{json_path}: strict parse failed: {e}")
    with open(proto_path, "rb") as f:
        from_proto = cls()
        from_proto.ParseFromString(f.read())
    if from_json != from_proto:
        fail(f"{json_path} and {proto_path} hold different messages")
    if kind == "metrics":
        n = sum(len(sm.metrics) for rm in from_json.resource_metrics for sm in rm.scope_metrics)
        points = 0
        for rm in from_json.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind_name = m.WhichOneof("data")
                    if kind_name == "histogram":
                        for p in m.histogram.data_points:
                            if len(p.bucket_counts) != len(p.explicit_bounds) + 1:
                                fail(f"{m.name}: bucket_counts must be one longer than explicit_bounds")
                            if sum(p.bucket_counts) != p.count:
                                fail(f"{m.name}: bucket counts do not add up to count")
                            if list(p.explicit_bounds) != sorted(set(p.explicit_bounds)):
                                fail(f"{m.name}: explicit_bounds not strictly increasing")
                            points += 1
                    elif kind_name == "sum":
                        points += len(m.sum.data_points)
        print(f"ok: {len(from_json.resource_metrics)} resources, {n} metrics, {points} points")
    else:
        spans = [s for rs in from_json.resource_spans for ss in rs.scope_spans for s in ss.spans]
        for s in spans:
            if s.end_time_unix_nano < s.start_time_unix_nano:
                fail(f"span {s.name} ends before it starts")
        print(f"ok: {len(from_json.resource_spans)} resources, {len(spans)} spans")


main()
