"""rmq-admin message: send lines, peek at a queue, follow a topic (tail), find messages by key or
by id (kafka-console-producer / kafka-console-consumer; mqadmin sendMessage, queryMsgByKey,
queryMsgById, queryMsgByUniqueKey)."""

from __future__ import annotations

import json
import sys
import time

from rmq_spark.cli.arguments import client, timestamp_ms
from rmq_spark.cli.output import preview, with_broker
from rmq_spark.client.admin import Admin
from rmq_spark.errors import ConfigError

TAIL_READ_MAX = 1000  # messages a queue gives one read of a tail, at most


def add_commands(commands, after) -> None:
    message = commands.add_parser("message", help="send, peek at, follow and find messages").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    send = message.add_parser("send", help="send each line of stdin (or --file) as a message", parents=[after])
    send.add_argument("topic")
    send.add_argument("--file", help="read the lines from this file rather than stdin")
    send.add_argument("--keys", help="the keys of every message (space-separated)")
    send.add_argument("--tags", help="the tag of every message")
    send.add_argument("--key-separator", metavar="SEP",
                      help="each line is KEYS SEP BODY: the keys of that message come before the first SEP")
    send.add_argument("--queue", type=int, metavar="N", help="send every message to queue N (otherwise the "
                                                             "producer's selector: by keys, else in turn)")
    send.add_argument("--broker", help="with --queue: of this broker, for a topic served by several")
    send.set_defaults(run=_send)
    peek = message.add_parser("peek", help="the first messages of a topic (or of a queue from an offset)",
                              parents=[after])
    peek.add_argument("topic")
    peek.add_argument("--queue", type=int, help="only this queue")
    peek.add_argument("--offset", type=int, help="with --queue: start at this offset (default: the first stored)")
    peek.add_argument("--count", type=int, default=10, help="messages to show in all (default 10)")
    peek.set_defaults(run=_peek)
    tail = message.add_parser("tail", help="print a topic's messages as they arrive, a line each (--json: a JSON "
                                           "object a line); Ctrl-C ends", parents=[after])
    tail.add_argument("topic")
    tail.add_argument("--from-beginning", action="store_true", help="start at the first stored message (default: "
                                                                    "at the end, the messages from now on)")
    tail.add_argument("--max-messages", type=int, metavar="N", help="end after N messages")
    tail.add_argument("--idle-timeout-ms", type=int, metavar="MS",
                      help="end when no message came for this long (default: wait on)")
    tail.add_argument("--tags", help="only the messages of these tags (TagA || TagB)")
    tail.set_defaults(run=_tail)
    find = message.add_parser("find", help="the stored messages of a topic sent with a key (KEYS)", parents=[after])
    find.add_argument("topic")
    find.add_argument("--key", required=True)
    find.add_argument("--begin", type=timestamp_ms, metavar="ISO", help="stored at or after (default: the start)")
    find.add_argument("--end", type=timestamp_ms, metavar="ISO", help="stored at or before (default: now)")
    find.add_argument("--max", type=int, default=32, help="messages at most, from each broker (default 32)")
    find.set_defaults(run=_find)
    get = message.add_parser("get", help="a stored message by its id: the offset message id a send's answer "
                                         "names, or with --topic the id its producer gave it (UNIQ_KEY)",
                             parents=[after])
    get.add_argument("id")
    get.add_argument("--topic", help="the message's topic: ID is then its producer's id (UNIQ_KEY)")
    get.set_defaults(run=_get)


def _send(admin: Admin, args):
    from rmq_spark.producer import Producer  # here: pyarrow is loaded for the message commands only
    from rmq_spark.structs import Message

    if args.broker is not None and args.queue is None:
        raise ConfigError("--broker names the broker of a queue: give --queue too")
    if args.queue is not None and args.queue < 0:
        raise ConfigError(f"--queue {args.queue}: queues are numbered from 0")
    if args.file:
        try:
            with open(args.file, "rb") as lines:
                messages = [_message(args, line) for line in lines]
        except OSError as err:
            raise ConfigError(f"cannot read --file {args.file}: {err.strerror or err}") from None
    else:
        messages = [_message(args, line) for line in sys.stdin.buffer]
    queues: dict[tuple[str, int], dict] = {}
    with client(Producer, args) as producer:  # each message to --queue, or to the queue the selector picks
        futures = [producer.send_async(Message(args.topic, body, args.tags, keys, queue_id=args.queue,
                                               broker=args.broker)) for body, keys in messages]
        producer.flush()
        for future in futures:
            sent = future.result()
            row = queues.setdefault((sent.broker, sent.queue_id), {
                "topic": args.topic, "broker": sent.broker, "queue_id": sent.queue_id, "messages": 0,
                "first_offset": sent.queue_offset})
            row["messages"] += 1
            row["last_offset"] = sent.queue_offset
    rows = [queues[key] for key in sorted(queues)]
    return rows, with_broker(rows, ["topic", "queue_id", "messages", "first_offset", "last_offset"], at=1)


def _message(args, line: bytes) -> tuple[bytes, str | None]:
    """A line's body (without its line end) and keys."""
    body = line.rstrip(b"\r\n")
    if args.key_separator:
        keys, sep, rest = body.partition(args.key_separator.encode())
        if sep:
            return rest, keys.decode() or args.keys
    return body, args.keys


def _peek(admin: Admin, args):
    from rmq_spark.consumer import RangeReader  # here: pyarrow is loaded for the message commands only
    from rmq_spark.structs import OffsetRange

    if args.offset is not None and args.queue is None:
        raise ConfigError("--offset is an offset of one queue: give --queue too")
    if args.count < 1:
        raise ConfigError(f"--count {args.count}: give 1 or more")
    _topic, queues = admin.describe_topic(args.topic)
    if args.queue is not None:
        queues = [q for q in queues if q.queue_id == args.queue]
        if not queues:
            raise ConfigError(f"topic {args.topic!r} has no queue {args.queue} (rmq-admin topic describe "
                              f"{args.topic} lists its queues)")
    ranges = []
    for q in queues:
        start = q.min_offset if args.offset is None else args.offset
        if start < q.min_offset:
            raise ConfigError(f"queue {q.queue_id} of topic {args.topic!r} holds offsets from {q.min_offset} (the "
                              f"ones before were deleted or never were): give --offset {q.min_offset} or more")
        if start < q.max_offset:
            ranges.append(OffsetRange(args.topic, q.queue_id, start, min(q.max_offset, start + args.count), q.broker))
    rows = []
    with client(RangeReader, args, on_data_loss="fail") as reader:
        for batch in reader.read(ranges):
            rows += [_read_row(m, args.json) for m in batch.to_pylist()]
    rows = sorted(rows, key=lambda r: (r["broker"], r["queue_id"], r["offset"]))[:args.count]
    return rows, with_broker(rows, ["queue_id", "offset", "keys", "tags", "time", "bytes", "body"])


def _read_row(m: dict, whole: bool) -> dict:
    text = m["body"].decode("utf-8", "replace")
    return {"broker": m["broker"] or "", "queue_id": m["queue_id"], "offset": m["queue_offset"],
            "keys": m["keys"] or "", "tags": m["tags"] or "",
            "time": m["store_timestamp"].isoformat(timespec="milliseconds"), "bytes": len(m["body"]),
            "body": text if whole else preview(text)}


def _tail(admin: Admin, args):
    """Follow the topic: read what each queue holds past where the tail is, then wait at the
    brokers for more (Admin.offsets' long poll), printing each message as it is read."""
    from rmq_spark.consumer import RangeReader  # here: pyarrow is loaded for the message commands only
    from rmq_spark.structs import OffsetRange

    if args.max_messages is not None and args.max_messages < 1:
        raise ConfigError(f"--max-messages {args.max_messages}: give 1 or more")
    _topic, queues = admin.describe_topic(args.topic)
    at = {(q.broker, q.queue_id): q.min_offset if args.from_beginning else q.max_offset for q in queues}
    ends = {(q.broker, q.queue_id): q.max_offset for q in queues}
    printed, idle_since = 0, time.monotonic()
    with client(RangeReader, args, on_data_loss="skip", tag_filter=args.tags or "*") as reader:
        while args.max_messages is None or printed < args.max_messages:
            ranges = [OffsetRange(args.topic, queue_id, at[(broker, queue_id)],
                                  min(end, at[(broker, queue_id)] + TAIL_READ_MAX), broker)
                      for (broker, queue_id), end in sorted(ends.items()) if end > at[(broker, queue_id)]]
            if ranges:
                for batch in reader.read(ranges):
                    for m in batch.to_pylist():
                        if args.max_messages is not None and printed >= args.max_messages:
                            break
                        _print_tailed(m, args.json)
                        printed += 1
                for r in ranges:
                    at[(r.broker, r.queue_id)] = r.end
                idle_since = time.monotonic()
                continue
            left_ms = None if args.idle_timeout_ms is None else \
                args.idle_timeout_ms - (time.monotonic() - idle_since) * 1000
            if left_ms is not None and left_ms <= 0:
                break
            wait_ms = int(min(admin.MAX_WAIT_MS, left_ms if left_ms is not None else admin.MAX_WAIT_MS))
            past = {(args.topic, broker, queue_id): offset for (broker, queue_id), offset in at.items()}
            for q in admin.offsets([args.topic], past=past, wait_ms=max(1, wait_ms))[args.topic]:
                ends[(q.broker, q.queue_id)] = q.max_offset
                at.setdefault((q.broker, q.queue_id), q.min_offset)  # a queue added meanwhile: from its start
    return None


def _print_tailed(m: dict, as_json: bool) -> None:
    if as_json:
        row = _read_row(m, whole=True)
        print(json.dumps(row), flush=True)
    else:
        print(m["body"].decode("utf-8", "replace"), flush=True)


_FOUND_COLUMNS = ["topic", "queue_id", "offset", "message_id", "unique_key", "keys", "tags", "time", "bytes", "body"]


def _found_row(m, whole: bool) -> dict:
    text = m.body.decode("utf-8", "replace") if m.messages == 1 else f"(a batch of {m.messages} messages)"
    return {"broker": m.broker, "topic": m.topic, "queue_id": m.queue_id, "offset": m.queue_offset,
            "message_id": m.message_id, "unique_key": m.unique_key, "keys": m.keys, "tags": m.tags,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(m.store_timestamp_ms / 1000)) +
            f".{m.store_timestamp_ms % 1000:03d}Z", "bytes": len(m.body), "messages": m.messages,
            "body": text if whole else preview(text)}


def _find(admin: Admin, args):
    found = admin.find_messages(args.topic, args.key, begin_ms=args.begin or 0, end_ms=args.end or 0,
                                max_messages=args.max)
    rows = [_found_row(m, args.json) for m in found]
    return rows, with_broker(rows, _FOUND_COLUMNS, at=1)


def _get(admin: Admin, args):
    m = admin.message(args.id, args.topic)
    row = _found_row(m, True)
    row["properties"] = " ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))
    if args.json:
        row["properties"] = dict(sorted(m.properties.items()))
    return [row], with_broker([row], _FOUND_COLUMNS[:-1] + ["properties", "body"], at=1)
