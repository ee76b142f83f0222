#!/usr/bin/env python3
"""Write the fuzz seeds of decode_recording from fixtures/recordings/*.kkr.

For each recording: the file itself (decoded as a file), and its records as one
uncompressed payload (the fuzz target wraps input without the magic into a chunk with a
correct CRC, so mutations reach the record decoders). Needs the `zstd` command.
Run from the repository root: python3 fuzz/seeds.py
"""
import pathlib
import struct
import subprocess

root = pathlib.Path(__file__).resolve().parent.parent
out = root / "fuzz" / "corpus" / "decode_recording"
out.mkdir(parents=True, exist_ok=True)
for kkr in sorted((root / "fixtures" / "recordings").glob("*.kkr")):
    data = kkr.read_bytes()
    (out / f"file-{kkr.stem}").write_bytes(data)
    at, payload = 16, b""
    while at + 16 <= len(data):
        stored, raw, encoding = struct.unpack_from("<IIB", data, at)
        body = data[at + 16 : at + 16 + stored]
        if encoding == 1:
            body = subprocess.run(["zstd", "-d", "-c"], input=body, capture_output=True, check=True).stdout
        assert len(body) == raw
        payload += body
        at += 16 + stored
    (out / f"records-{kkr.stem}").write_bytes(payload)
    print(f"{kkr.name}: {len(data)} bytes, {len(payload)} bytes of records")
