"""broker_sim.common.logs: ThrottledLog (a burst per interval and key, then a line counting those
left out) on a clock of the test's own, and the JSON format's fields."""

import json
import logging
import re
import sys
import threading

import pytest

from broker_sim.common import logs
from broker_sim.common.logs import JsonFormatter, ThrottledLog
from support.clock import Clock

BOUND_S = 10.0  # the longest a test waits for the background thread


class Lines(logging.Handler):
    """The records a logger writes."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.added = threading.Condition()

    def emit(self, record):
        with self.added:
            self.records.append(record)
            self.added.notify_all()

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def lines():
    logger = logging.getLogger("tests.throttled")
    handler = Lines()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)
    logger.propagate = True


def throttled(clock, **options) -> ThrottledLog:
    return ThrottledLog(logging.getLogger("tests.throttled"), burst=3, interval_s=10.0, now=clock, background=False,
                        **options)


def test_a_burst_then_one_line_counting_the_rest_then_a_new_window(lines):
    clock = Clock(100.0)
    log = throttled(clock)
    written = [log.warning("refused %s", f"client-{i}", key="c", extra={"client": "1.2.3.4", "n": i})
               for i in range(10)]
    assert written == [True] * 3 + [False] * 7
    assert lines.messages == ["refused client-0", "refused client-1", "refused client-2"]
    assert [r.client for r in lines.records] == ["1.2.3.4"] * 3

    clock.now += 9.9
    assert log.roll() is True  # still inside the window: the count is held
    assert len(lines.records) == 3

    clock.now += 0.1
    assert log.warning("refused %s", "client-10", key="c", extra={"client": "1.2.3.4"}) is True  # a new window
    count, line = lines.records[3:]
    assert count.getMessage() == '7 more lines like "refused %s" were left out in the last 10 s'
    assert count.levelno == logging.WARNING
    assert (count.dropped, count.client) == (7, "1.2.3.4")
    assert not hasattr(count, "n"), "a field the lines left out had with different values is not the count's"
    assert line.getMessage() == "refused client-10"
    for _ in range(2):
        log.warning("refused %s", "again", key="c")
    assert log.warning("refused %s", "once more", key="c") is False  # the new window's burst is spent too


def test_the_count_is_said_by_roll_once_the_window_is_over(lines):
    clock = Clock(100.0)
    log = throttled(clock)
    for _ in range(5):
        log.error("disk full")
    clock.now += 12
    assert log.roll() is False
    assert lines.messages[-1] == '2 more lines like "disk full" were left out in the last 12 s'
    assert lines.records[-1].levelno == logging.ERROR
    assert log.roll() is False and len(lines.records) == 4, "said once"


def test_flush_says_the_counts_of_windows_not_over(lines):
    clock = Clock(100.0)
    log = throttled(clock)
    for _ in range(4):
        log.warning("slow reader")
    clock.now += 2
    log.flush()
    assert lines.messages[-1] == '1 more lines like "slow reader" were left out in the last 2 s'
    assert log.roll() is False and log.warning("slow reader") is True, "a new window"


def test_each_template_and_subject_has_its_own_window(lines):
    clock = Clock(100.0)
    log = throttled(clock)
    for _ in range(5):
        log.warning("denied %s", "a", key="a")
        log.warning("denied %s", "b", key="b")
        log.warning("other")
    assert lines.messages.count("denied a") == lines.messages.count("denied b") == lines.messages.count("other") == 3


def test_shared_lines_have_one_window_and_their_own_count(lines):
    clock = Clock(100.0)
    log = throttled(clock, shared=True, summary="%(dropped)d more connections closed in %(seconds).0f s")
    for i in range(6):
        log.warning("closing %d: idle" if i % 2 else "closing %d: slow", i)
    clock.now += 10
    log.roll()
    assert lines.messages == ["closing 0: slow", "closing 1: idle", "closing 2: slow",
                              "3 more connections closed in 10 s"]


def test_past_max_keys_new_subjects_share_their_templates_window(lines):
    clock = Clock(100.0)
    log = throttled(clock, max_keys=2)
    for client in ["a", "b", "c", "d", "e", "f"]:
        log.warning("refused %s", client, key=client)
    assert lines.messages == ["refused a", "refused b", "refused c", "refused d", "refused e"]


def test_a_line_its_logger_would_not_write_is_not_counted(lines):
    clock = Clock(100.0)
    logging.getLogger("tests.throttled").setLevel(logging.WARNING)
    log = throttled(clock)
    for _ in range(5):
        assert log.info("chatter") is False
    clock.now += 10
    assert log.roll() is False and lines.records == []


def test_the_background_thread_says_a_count_nobody_rolls(lines, monkeypatch):
    monkeypatch.setattr(logs, "ROLL_EVERY_S", 0.01)
    clock = Clock(100.0)
    log = ThrottledLog(logging.getLogger("tests.throttled"), burst=1, interval_s=10.0, now=clock)
    log.warning("flood")
    log.warning("flood")
    clock.now += 10
    with lines.added:
        assert lines.added.wait_for(lambda: len(lines.records) == 2, BOUND_S), lines.messages
    assert lines.messages[-1] == '1 more lines like "flood" were left out in the last 10 s'


# --- the JSON format ---------------------------------------------------------------------------

def _record(message="topic %s refused", *args, exc_info=None, **extra) -> logging.LogRecord:
    record = logging.getLogger("broker_sim.test").makeRecord(
        "broker_sim.test", logging.WARNING, __file__, 1, message, args or ("t",), exc_info, extra=extra)
    record.created, record.msecs = 1767225600.1234, 123.0  # 2026-01-01T00:00:00.123Z
    return record


def test_json_lines_carry_the_fields_and_the_subject():
    line = JsonFormatter().format(_record(topic="t", client="127.0.0.1:5000", account="bob", queue=3))
    assert "\n" not in line
    assert json.loads(line) == {"time": "2026-01-01T00:00:00.123Z", "level": "WARNING", "logger": "broker_sim.test",
                                "message": "topic t refused", "topic": "t", "client": "127.0.0.1:5000",
                                "account": "bob", "queue": 3}


def test_json_lines_carry_the_exception_and_values_json_has_no_form_for():
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = _record("failed %s", exc_info=sys.exc_info(), path=logs, big=1 << 70, raw=b"\x00")
    fields = json.loads(JsonFormatter().format(record))
    assert fields["message"] == "failed t"
    assert re.search(r"Traceback .*\nValueError: bad\nthing$", fields["exception"], re.S), fields["exception"]
    assert fields["big"] == 1 << 70 and fields["path"].startswith("<module 'broker_sim.common.logs'")
    assert fields["raw"] == "b'\\x00'"


def test_the_text_format_is_the_sentence_without_the_fields():
    line = logs.formatter("text").format(_record(topic="t"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:00,123 WARNING broker_sim.test: topic t refused", line), line
