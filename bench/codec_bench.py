"""Codec benchmark: decoding 1 KB messages in batches of 256, both codecs x lz4 / none.

Rows:
- ``decode_records``: a 4 MiB read chunk (as ReadRanges streams it) of stored BatchCQ
  records, each an inner batch of 256, decoded into the read schema. The target is
  >= 3,000,000 msgs/s for arrow+lz4 and rmq+lz4, so that a 1,000,000 msgs/s end-to-end read
  has room on this 2-core machine.
- ``decode_batch``: each payload of the chunk decoded on its own into the batch columns.
- bodies of 512 to 1535 bytes (lz4): every message's size differs.
- SimpleCQ: the same messages stored one record each, decoded with ``decode_records``.
- baselines, measured in the same run: ``pa.ipc`` reading an uncompressed table of the same
  bodies from memory (zero copy: the ceiling), and copying those bodies into one Arrow
  array once (``pa.concat_arrays``: the floor of any decoder that returns one contiguous
  batch from several payloads).

Bodies are random bytes (as the store benchmark's; LZ4 stores them as they are) or, with
``--body text``, compressible text. Keys are ``key-<n>`` (sizes vary), tags ``TagA``.
Each case runs --repeat rounds back to back (as a reader decodes chunk after chunk), in
--sweeps sweeps over the cases; msgs/s of the best round and of the median one. This VM's
timings are noisy (a shared host): the best round is the machine's capability, the median
what a run usually sees.

    python bench/codec_bench.py [--batch 256] [--chunk-bytes 4194304] [--repeat 25] [--sweeps 2]
                                [--body random|text]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
import zlib
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from rmq_wire.codec import Compression, decode_batch, encode_batch  # noqa: E402
from rmq_wire.codec.records import decode_records  # noqa: E402

BODY_BYTES = 1024
TARGET = 3_000_000
# V1 record header up to BODYLEN (RocketMQ's layout; see rmq_wire/codec/records.py).
HEADER = struct.Struct(">iIIiiqqiq8sq8siqi")
MAGIC_V1 = 0xDAA320A7
INNER_BATCH, NEED_UNWRAP = 0x80, 0x40


def bodies(count: int, kind: str) -> list[bytes]:
    if kind == "random":
        return [os.urandom(BODY_BYTES) for _ in range(count)]
    line = b'{"user": %d, "event": "page_view", "url": "/products/%d?ref=home", "ms": %d} '
    return [(line % (i, i * 7 % 1000, i * 13) * 20)[:BODY_BYTES] for i in range(count)]


def record(topic: bytes, queue_offset: int, body: bytes, properties: dict, sys_flag: int) -> bytes:
    """One stored record as the broker writes it (record CRC property included)."""
    props = b"".join(k.encode() + b"\x01" + v.encode() + b"\x02" for k, v in properties.items())
    props += b"__HCRC32#\x01" + b"%010d" % 0 + b"\x02"
    total = 91 + len(body) + len(topic) + len(props)
    header = HEADER.pack(total, MAGIC_V1, zlib.crc32(body), 0, 0, queue_offset, 0, sys_flag, 1_700_000_000_000,
                         bytes(8), 1_700_000_000_123, bytes(8), 0, 0, len(body))
    return header + body + bytes([len(topic)]) + topic + struct.pack(">h", len(props)) + props


def inner_chunk(table: pa.Table, batch: int, codec: str, compression: str, chunk_bytes: int):
    """Records of inner batches of ``batch`` messages, up to ``chunk_bytes``; and their payloads."""
    records, payloads, offset, size = [], [], 0, 0
    while True:
        part = table.slice(offset % table.num_rows, batch)
        payload = encode_batch(part, codec, compression)
        sys_flag = INNER_BATCH | NEED_UNWRAP | Compression.parse(compression).sys_flag()
        raw = record(b"bench", offset, payload, {"TAGS": "TagA", "INNER_NUM": str(part.num_rows),
                                                  "BATCH_CODEC": codec, "INNER_BASE": str(offset)}, sys_flag)
        if size + len(raw) > chunk_bytes and records:
            return b"".join(records), payloads, offset
        records.append(raw)
        payloads.append(payload)
        size += len(raw)
        offset += part.num_rows


def simple_chunk(table: pa.Table, chunk_bytes: int):
    records, size, offset = [], 0, 0
    rows = table.to_pylist()
    while True:
        row = rows[offset % len(rows)]
        raw = record(b"bench", offset, row["body"], {"TAGS": row["tags"], "KEYS": row["keys"]}, 0)
        if size + len(raw) > chunk_bytes:
            return b"".join(records), offset
        records.append(raw)
        size += len(raw)
        offset += 1


def timed(run, rounds: int) -> list[float]:
    """Seconds of ``rounds`` back-to-back calls, as a reader decodes chunk after chunk."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--chunk-bytes", type=int, default=4 << 20)
    parser.add_argument("--repeat", type=int, default=25, help="back-to-back rounds per case and sweep")
    parser.add_argument("--sweeps", type=int, default=2)
    parser.add_argument("--body", choices=("random", "text"), default="random")
    args = parser.parse_args()

    count = 16 * args.batch
    table = pa.table({"body": pa.array(bodies(count, args.body), pa.binary()),
                      "keys": [f"key-{i}" for i in range(count)], "tags": ["TagA"] * count})
    cases, runs = {}, {}
    for codec in ("arrow", "rmq"):
        for compression in ("lz4", "none"):
            buf, payloads, messages = inner_chunk(table, args.batch, codec, compression, args.chunk_bytes)
            name = f"{codec}+{compression}"
            cases[f"decode_records {name}"] = messages
            runs[f"decode_records {name}"] = lambda buf=buf: decode_records(buf, 0, None)
            cases[f"decode_batch {name}"] = messages
            runs[f"decode_batch {name}"] = lambda p=payloads, c=codec, z=compression: [
                decode_batch(x, c, z, None) for x in p]
    # Bodies of 512 to 1535 bytes: every rmq entry's size differs, so the TOTALSIZE chain is
    # walked one entry at a time (equal sizes are walked by numpy).
    varied = table.set_column(0, "body", pa.array([b[: 512 + i * 389 % 1024] for i, b in
                                                   enumerate(table.column("body").to_pylist())], pa.binary()))
    for codec in ("arrow", "rmq"):
        buf_varied, _, varied_messages = inner_chunk(varied, args.batch, codec, "lz4", args.chunk_bytes)
        key = f"decode_records {codec}+lz4, bodies of 512-1535 bytes"
        cases[key] = varied_messages
        runs[key] = lambda buf=buf_varied: decode_records(buf, 0, None)
    simple, simple_messages = simple_chunk(table, args.chunk_bytes)
    cases["decode_records SimpleCQ (a record per message)"] = simple_messages
    runs["decode_records SimpleCQ (a record per message)"] = lambda: decode_records(simple, 0, None)

    base_rows = cases["decode_records arrow+lz4"]  # the same messages as the main rows
    cycle = pa.array([i % table.num_rows for i in range(base_rows)])  # the chunk cycles over the bodies too
    base_table = pa.table({"body": table.column("body").take(cycle)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, base_table.schema) as writer:
        writer.write_table(base_table, max_chunksize=args.batch)
    ipc = sink.getvalue()
    chunks = base_table.column("body").chunks
    cases["baseline: pa.ipc read, uncompressed, zero copy"] = base_rows
    runs["baseline: pa.ipc read, uncompressed, zero copy"] = lambda: pa.ipc.open_stream(ipc).read_all()
    cases["baseline: one copy of the bodies (concat_arrays)"] = base_rows
    runs["baseline: one copy of the bodies (concat_arrays)"] = lambda: pa.concat_arrays(
        [c.slice(i * args.batch, args.batch) for c in chunks for i in range(len(c) // args.batch)])

    for key, run in runs.items():  # a check that every decoder returns every message
        result = run()
        rows = sum(b.num_rows for b in result) if isinstance(result, list) else result.num_rows if hasattr(
            result, "num_rows") else len(result)
        if rows != cases[key]:
            raise AssertionError(f"{key}: decoded {rows} messages of {cases[key]}")
    timings: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(args.sweeps):  # each case runs its rounds back to back; the sweeps interleave cases
        for key, run in runs.items():
            timings[key] += timed(run, args.repeat)

    rows = []
    for key, messages in cases.items():
        times = sorted(timings[key])
        best, median = times[0], times[len(times) // 2]
        rate = messages / best
        targeted = key.startswith("decode_records") and key.endswith("+lz4")
        target = ("yes" if rate >= TARGET else "NO") if targeted else ""
        rows.append({"case": key, "messages": messages, "best ms": best * 1e3, "msgs/s (best)": rate,
                     "msgs/s (median)": messages / median, "MB/s of bodies": rate * BODY_BYTES / 1e6,
                     "target 3M": target})
    columns = ["case", "messages", "best ms", "msgs/s (best)", "msgs/s (median)", "MB/s of bodies", "target 3M"]
    notes = [f"{BODY_BYTES}-byte {args.body} bodies, batches of {args.batch}, chunks of {args.chunk_bytes} bytes; "
             f"{args.sweeps} sweeps of {args.repeat} back-to-back rounds per case; one thread."]
    report.write("codec", rows, columns, notes)


if __name__ == "__main__":
    main()
