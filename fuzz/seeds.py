#!/usr/bin/env python3
"""Write the fuzz seeds that are derived from files in the repository.

- decode_recording: for each fixtures/recordings/*.kkr, the file itself (decoded as a
  file) and its records as one uncompressed payload (the target wraps input without
  the magic into a stored chunk with a correct CRC, so mutations reach the record
  decoders).
- decode_zstd_chunk: for each recording, its records behind mode byte 0 (the target
  compresses them), and each of its zstd chunks as mode byte 1, raw length, frame.
- bundle_json: a few samples/*.bundle.json.
- fixture_json: fixtures/*.json and fixtures/bad/*.json.

The seeds of the other targets (fail_on_rule, procfs_parsers, tracefs_format,
serve_request) are small hand-written files committed as they are. Needs the `zstd`
command. Run from anywhere: python3 fuzz/seeds.py
"""
import pathlib
import shutil
import struct
import subprocess

root = pathlib.Path(__file__).resolve().parent.parent
corpus = root / "fuzz" / "corpus"


def target(name):
    out = corpus / name
    out.mkdir(parents=True, exist_ok=True)
    return out


recordings, zstd_chunks = target("decode_recording"), target("decode_zstd_chunk")
for kkr in sorted((root / "fixtures" / "recordings").glob("*.kkr")):
    data = kkr.read_bytes()
    (recordings / f"file-{kkr.stem}").write_bytes(data)
    at, payload, frames = 16, b"", []
    while at + 16 <= len(data):
        stored, raw, encoding = struct.unpack_from("<IIB", data, at)
        body = data[at + 16 : at + 16 + stored]
        if encoding == 1:
            frames.append(struct.pack("<I", raw) + body)
            body = subprocess.run(["zstd", "-d", "-c"], input=body, capture_output=True, check=True).stdout
        assert len(body) == raw
        payload += body
        at += 16 + stored
    (recordings / f"records-{kkr.stem}").write_bytes(payload)
    (zstd_chunks / f"records-{kkr.stem}").write_bytes(b"\x00" + payload)
    for i, frame in enumerate(frames):
        (zstd_chunks / f"frame-{kkr.stem}-{i}").write_bytes(b"\x01" + frame)
    print(f"{kkr.name}: {len(data)} bytes, {len(payload)} bytes of records, {len(frames)} zstd chunks")

bundles = target("bundle_json")
for name in ["api-server-ebpf", "cargo-build-before", "recording-run-proc-cpu", "stacks-demo"]:
    shutil.copyfile(root / "samples" / f"{name}.bundle.json", bundles / f"{name}.json")

fixtures = target("fixture_json")
for path in sorted((root / "fixtures").glob("*.json")) + sorted((root / "fixtures" / "bad").glob("*.json")):
    prefix = "bad-" if path.parent.name == "bad" else ""
    shutil.copyfile(path, fixtures / f"{prefix}{path.name}")
print(f"bundle_json: {len(list(bundles.iterdir()))} seeds, fixture_json: {len(list(fixtures.iterdir()))} seeds")
