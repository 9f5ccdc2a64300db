"""The broker's log lines: their two formats, and the rate of the ones that may repeat.

``formatter("text")`` (``TextFormatter``) is the sentence a line (``TEXT_FORMAT``: time, level,
logger, message), every character of the message that could end the line or steer a terminal
escaped (``escape``: a client's name, topic or transaction id cannot forge a line or clear the
screen of whoever tails the log), and a traceback's lines indented under it;
``formatter("json")`` (``JsonFormatter``) one JSON object a line, for machines: ``time`` (ISO-8601,
UTC, milliseconds), ``level``, ``logger``, ``message``, the fields a call gives with ``extra=``
(its subject: ``topic``, ``group``, ``client``, ``account``...) and ``exception``. A line about
a topic, group, client or account gives it so (``log.warning("...", topic, extra={"topic":
topic})``): the sentence stays as it reads, and a machine finds its subject without parsing it.

``ThrottledLog`` writes a line that may repeat at a high rate (a refusal per request, per
connection) a few times per interval and key, then once with the count of those left out.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Hashable

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")


def formatter(kind: str) -> logging.Formatter:
    """The formatter of ``--log-format`` ``kind`` (one of LOG_FORMATS)."""
    if kind == "json":
        return JsonFormatter()
    if kind == "text":
        return TextFormatter(TEXT_FORMAT)
    raise ValueError(f"log format {kind!r}: use {' or '.join(LOG_FORMATS)}")


# Control characters (C0, DEL, C1) and Unicode's line and paragraph separators: what ends a line
# or steers a terminal (ESC starts ANSI sequences), as backslash escapes.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES = {code: _NAMED.get(chr(code), f"\\x{code:02x}") for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029", ord("\\"): "\\\\"})


def escape(text: str) -> str:
    """``text`` on one line, nothing in it a terminal acts on: control characters, DEL, C1 and
    Unicode's line separators as backslash escapes (a backslash doubled, so that nothing reads
    as an escape that was not one)."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT`` with the message escaped (``escape``): the one place every string of a
    line passes through, whoever sent it; a traceback or stack follows indented, each of its
    lines with its control characters escaped too, so that no line but a record's first starts
    at the margin."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:  # noqa: N802 - logging's name
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join("    " + escape(line) for line in text.splitlines())


# What every LogRecord holds: the fields of a line beyond them came with its call's extra=.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message (formatted), then the record's
    fields from ``extra=`` (never over those four), then ``exception`` and ``stack`` when the
    record has them. A value JSON has no form for is written as its ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": _utc_ms(record.created), "level": record.levelname, "logger": record.name,
                "message": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in line:
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return _dumps(line)


def _utc_ms(created: float) -> str:
    return datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dumps(line: dict) -> str:
    try:
        return orjson.dumps(line, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # what orjson refuses even with default= (an int past 64 bits)
        return json.dumps(line, default=str, ensure_ascii=False)


# --- lines at a bounded rate -------------------------------------------------------------------

DEFAULT_SUMMARY = '%(dropped)d more lines like "%(template)s" were left out in the last %(seconds).0f s'
ROLL_EVERY_S = 1.0  # how often the background thread says the counts of windows that are over
_OVERFLOW = object()  # the key of a new subject's lines once max_keys windows are kept
_MISSING = object()


@dataclass
class _Window:
    start: float
    level: int
    template: str
    written: int = 0
    dropped: int = 0
    extra: dict = field(default_factory=dict)  # the fields every line left out had, with the same values


class ThrottledLog:
    """Lines of ``logger`` that may repeat at a high rate, at a bounded rate: per key, ``burst``
    lines per ``interval_s``, then, once the interval is over, one line counting those left out
    (``summary``: a %-template of ``dropped``, ``seconds`` and ``template``, the message left
    out; it carries the subject fields the lines left out had in common, and ``dropped``).

    A line's key is its message template, with the call's ``key=`` beside it if given (a
    subject: a client, an account, a topic): each kind of line about each subject has its own
    window, so that a flood about one client does not hide the lines about the others.
    ``shared=True`` gives all the lines one window per ``key=`` whatever their template (the
    remoting server's closed connections: five lines in all per interval). Past ``max_keys``
    windows, the lines of a new subject share their template's window.

    The counts are said when the key's next line comes after its window, at ``roll()`` (for a
    caller with a loop of its own), and within ``ROLL_EVERY_S`` of the window's end by a thread
    that runs while counts are held, or at the process's exit (``background=False``: only the
    first two, and ``flush()``, for tests with a clock of their own). ``now`` is the clock, in
    seconds (monotonic). Thread-safe.
    """

    def __init__(self, logger: logging.Logger, burst: int = 5, interval_s: float = 10.0, *, shared: bool = False,
                 summary: str = DEFAULT_SUMMARY, now: Callable[[], float] = time.monotonic, background: bool = True,
                 max_keys: int = 1024):
        self._log = logger
        self.burst = burst
        self.interval_s = interval_s
        self.shared = shared
        self.summary = summary
        self._now = now
        self.background = background
        self.max_keys = max_keys
        self._lock = threading.Lock()
        self._windows: dict[Hashable, _Window] = {}  # in the order they opened: by start
        self._next_end = math.inf  # when the oldest window ends
        self._holding = 0  # windows with a count
        self._rolled_by_thread = False

    def info(self, message: str, *args, key: Hashable = None, extra: dict | None = None) -> bool:
        return self.log(logging.INFO, message, *args, key=key, extra=extra)

    def warning(self, message: str, *args, key: Hashable = None, extra: dict | None = None) -> bool:
        return self.log(logging.WARNING, message, *args, key=key, extra=extra)

    def error(self, message: str, *args, key: Hashable = None, extra: dict | None = None,
              exc_info: bool = False) -> bool:
        return self.log(logging.ERROR, message, *args, key=key, extra=extra, exc_info=exc_info)

    def log(self, level: int, message: str, *args, key: Hashable = None, extra: dict | None = None,
            exc_info: bool = False) -> bool:
        """Write the line unless its window's burst is spent (then it is counted); whether it
        was written. A line its logger would not write is neither written nor counted."""
        if not self._log.isEnabledFor(level):
            return False
        now = self._now()
        with self._lock:
            counts = self._roll(now) if now >= self._next_end else []
            window_key = (None if self.shared else message, key)
            window = self._windows.get(window_key)
            if window is None and len(self._windows) >= self.max_keys:
                window_key = (window_key[0], _OVERFLOW)
                window = self._windows.get(window_key)
            if window is None:
                window = self._windows[window_key] = _Window(now, level, message)
                self._next_end = min(self._next_end, now + self.interval_s)
            written = window.written < self.burst
            if written:
                window.written += 1
            else:
                self._count(window, extra or {})
        for count in counts:
            self._say(*count)
        if written:
            self._log.log(level, message, *args, extra=extra, exc_info=exc_info)
        return written

    def roll(self) -> bool:
        """Say the counts of the windows that are over, and forget those windows; whether
        counts are still held (of windows not over yet)."""
        now = self._now()
        with self._lock:
            counts = self._roll(now)
            holding = self._holding > 0
            if not holding and self._rolled_by_thread:
                self._rolled_by_thread = False
                _ROLLER.discard(self)
        for count in counts:
            self._say(*count)
        return holding

    def flush(self) -> None:
        """Say every count held now, windows over or not (the process ends), and forget them."""
        now = self._now()
        with self._lock:
            counts = [(w, now - w.start) for w in self._windows.values() if w.dropped]
            self._windows.clear()
            self._next_end, self._holding = math.inf, 0
            if self._rolled_by_thread:
                self._rolled_by_thread = False
                _ROLLER.discard(self)
        for count in counts:
            self._say(*count)

    def _count(self, window: _Window, extra: dict) -> None:
        """A line left out: counted, its subject kept where the others left out had the same."""
        window.dropped += 1
        if window.dropped == 1:
            window.extra = dict(extra)
            self._holding += 1
            if self.background and not self._rolled_by_thread:
                self._rolled_by_thread = True
                _ROLLER.add(self)
        elif window.extra:
            window.extra = {k: v for k, v in window.extra.items() if extra.get(k, _MISSING) == v}

    def _roll(self, now: float) -> list:
        """(Under the lock) forget the windows that are over: their counts, to be said."""
        counts = []
        while self._windows:
            key, window = next(iter(self._windows.items()))
            if now - window.start < self.interval_s:
                self._next_end = window.start + self.interval_s
                return counts
            del self._windows[key]
            if window.dropped:
                self._holding -= 1
                counts.append((window, now - window.start))
        self._next_end = math.inf
        return counts

    def _say(self, window: _Window, seconds: float) -> None:
        self._log.log(window.level, self.summary,
                      {"dropped": window.dropped, "seconds": seconds, "template": window.template},
                      extra={**window.extra, "dropped": window.dropped})


class _Roller:
    """One thread for every ThrottledLog holding counts: each is rolled every ROLL_EVERY_S,
    so that a count is said even when no line of its kind comes after the flood, and flushed
    at the process's exit. The thread ends once no log holds counts, and starts again with the
    next."""

    def __init__(self):
        self._lock = threading.Lock()
        self._logs: set[ThrottledLog] = set()
        self._thread: threading.Thread | None = None

    def add(self, throttled: ThrottledLog) -> None:
        with self._lock:
            self._logs.add(throttled)
            if self._thread is None or not self._thread.is_alive():  # not alive: ended, or in a forked child
                self._thread = threading.Thread(target=self._run, name="throttled-log-counts", daemon=True)
                self._thread.start()

    def discard(self, throttled: ThrottledLog) -> None:
        with self._lock:
            self._logs.discard(throttled)

    def _run(self) -> None:
        while True:
            time.sleep(ROLL_EVERY_S)
            with self._lock:
                if not self._logs:
                    self._thread = None
                    return
                logs = list(self._logs)
            for throttled in logs:
                try:
                    throttled.roll()
                except Exception:  # a handler's failure: logging's own handleError reports those
                    pass

    def flush_all(self) -> None:
        with self._lock:
            logs = list(self._logs)
        for throttled in logs:
            throttled.flush()


_ROLLER = _Roller()
# Before logging's own exit hook (registered when logging was imported, so run after this one).
atexit.register(_ROLLER.flush_all)
