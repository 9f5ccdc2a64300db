"""Per-client limits: what one client may hold of the broker, so that one client cannot take
what every other client needs.

``ClientLimits`` holds every limit, with its default and its unit in its name; each door reads
the ones it enforces (the remoting door: connections, requests in flight per connection, bytes
waiting for a slow reader; the gRPC port: calls in flight per client address; the core: topics
and queues created). Past a limit the client gets a refusal saying which limit and what to do,
and the broker goes on serving everyone else.

``client_key`` is the one place that decides who "one client" is (today its address).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

from broker_sim.common.logs import ThrottledLog
from broker_sim.core.errors import BrokerFault, Reason, refused
from broker_sim.store import CreateStatus, creation_problem, echo

log = logging.getLogger(__name__)

MAX_LIMIT = 1 << 62  # any count or size past it is no limit but a typing error

@dataclass(frozen=True)
class ClientLimits:
    """The limits, each settable by the broker's flag of the same name (``--max-connections-per-ip``).

    Attributes
    ----------
    max_connections_per_ip : int
        Remoting connections open at once from one client address (512). Past it a new
        connection's first request is answered SYSTEM_BUSY with a remark, then it is closed.
    max_connections : int
        Remoting connections open at once from all clients (4096), refused in the same way.
    max_requests_in_flight_per_connection : int
        Remoting requests of one connection being served at once (10000, RocketMQ's producer
        back-pressure default): a request past it is answered SYSTEM_BUSY at once, not queued.
        Suspended pulls count while they wait.
    max_requests_in_flight_per_ip : int
        gRPC calls (our contract and RocketMQ 5's) of one client address being served at once
        (10000): a call past it is refused at once, RESOURCE_EXHAUSTED on our contract,
        TOO_MANY_REQUESTS (42900) on RocketMQ 5's. Telemetry sessions and ReceiveMessage long
        polls are not counted (long-polling pops have their own cap).
    max_buffered_bytes_per_connection : int
        Answers waiting in the broker for one remoting client that does not read them (64 MiB):
        past it the connection is closed, and the broker's log says why.
    write_buffer_high_bytes, write_buffer_low_bytes : int
        Above the high water mark (4 MiB) of answers waiting, the broker reads no more requests
        of that connection until they drain below the low one (1 MiB), as Netty's
        WRITE_BUFFER_WATER_MARK with RocketMQ's auto-read switch.
    slow_reader_timeout_s : float
        A remoting client whose answers stay above the high water mark this long (60 s) is
        disconnected, with a line in the broker's log.
    max_topics_created_per_client, max_queues_created_per_client : int
        Topics (10000) and their queues in all (200000) that one client may create and hold
        (deleting a topic gives its room back). Counted since the broker started.
    max_topics, max_queues : int
        Topics (100000) and queues (1000000) on the broker in all, its own topics included:
        past them every client's creations are refused (the broker's own retry and dead-letter
        topics are still made, so that no message is lost).
    memory_budget_bytes : int
        The broker's memory for what its doors buffer for clients, all clients together (1 GiB):
        answers waiting for a slow reader (ReadRanges responses, remoting answers), unfinished
        remoting frames, parked pulls. Past it the client holding the most is cut off (its
        stream ended, its connection closed, with a sentence) and the others go on
        (``MemoryBudget``).
    memory_budget_per_client_bytes : int
        What one client may hold of that budget (256 MiB): past it its next buffer is refused.
    idle_connection_timeout_s : float
        A remoting connection that sends nothing, is sent nothing and has no request being
        served for this long (120 s, RocketMQ's serverChannelMaxIdleTimeSeconds) is closed.
    unfinished_frame_timeout_s : float
        A remoting connection that started a frame (a request) and has not finished it this
        long (30 s) is closed: half-sent requests hold memory and room.
    max_parked_pulls : int
        Long-polling pulls waiting for messages at once, all clients and doors' holds each
        (10000): a pull past it is answered at once (SYSTEM_BUSY on remoting, its client waits
        and pulls again). Woken pulls are answered a batch at a time.
    max_sinks_per_account : int
        Sink ids (a Spark sink's exactly-once commits) one account owns (1000); each keeps its
        latest 1000 committed batches. Past it a new sink's first commit is refused.
    max_groups_per_client : int
        Consumer groups one client (its account, or its address without ACLs) brings into being
        by committing offsets or popping (10000); past it a new group is refused.
    max_ranges_per_read : int
        Offset ranges one ReadRanges call may name (16384, as many as the SDK's readers ask at
        once); more are refused, saying so.
    max_read_bytes_per_call : int
        Stored bytes one ReadRanges call returns at most (256 MiB), whatever budget it asks for:
        its reader asks again for the rest.
    """

    max_connections_per_ip: int = 512
    max_connections: int = 4096
    max_requests_in_flight_per_connection: int = 10_000
    max_requests_in_flight_per_ip: int = 10_000
    max_buffered_bytes_per_connection: int = 64 << 20
    write_buffer_high_bytes: int = 4 << 20
    write_buffer_low_bytes: int = 1 << 20
    slow_reader_timeout_s: float = 60.0
    max_topics_created_per_client: int = 10_000
    max_queues_created_per_client: int = 200_000
    max_topics: int = 100_000
    max_queues: int = 1_000_000
    memory_budget_bytes: int = 1 << 30
    memory_budget_per_client_bytes: int = 256 << 20
    idle_connection_timeout_s: float = 120.0
    unfinished_frame_timeout_s: float = 30.0
    max_parked_pulls: int = 10_000
    max_sinks_per_account: int = 1_000
    max_groups_per_client: int = 10_000
    max_ranges_per_read: int = 16_384
    max_read_bytes_per_call: int = 256 << 20

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not (value > 0 and math.isfinite(value)) or (isinstance(value, int) and value > MAX_LIMIT):
                raise ValueError(f"{field.name}={value!r}: give a positive number, at most {MAX_LIMIT:,} "
                                 f"(--{field.name.replace('_', '-')})")
        if self.write_buffer_low_bytes > self.write_buffer_high_bytes:
            raise ValueError(f"--write-buffer-low-bytes {self.write_buffer_low_bytes} is above "
                             f"--write-buffer-high-bytes {self.write_buffer_high_bytes}: the broker reads again below "
                             "the low mark once it stopped above the high one; lower --write-buffer-low-bytes or raise "
                             "--write-buffer-high-bytes")
        if self.write_buffer_high_bytes > self.max_buffered_bytes_per_connection:
            raise ValueError(f"--write-buffer-high-bytes {self.write_buffer_high_bytes} is above "
                             f"--max-buffered-bytes-per-connection {self.max_buffered_bytes_per_connection}: a "
                             "connection would be closed before the broker stopped reading it; lower "
                             "--write-buffer-high-bytes or raise --max-buffered-bytes-per-connection")
        if self.memory_budget_per_client_bytes > self.memory_budget_bytes:
            raise ValueError(f"memory_budget_per_client_bytes {self.memory_budget_per_client_bytes} is over "
                             f"memory_budget_bytes {self.memory_budget_bytes}: a client's share is part of the "
                             "budget; lower --memory-budget-per-client-bytes or raise --memory-budget-bytes")


def client_key(address: str, account: str | None = None) -> str:
    """Who "one client" is, for every per-client limit: its account once requests carry one
    (ACLs), otherwise its network address (an IP, without the port)."""
    return account or address


def too_many_requests(held: int, who: str, flag: str) -> BrokerFault:
    """The refusal of a request past a limit of requests in flight."""
    return refused(Reason.TOO_MANY_REQUESTS,
                   f"[TOO_MANY_REQUESTS] {who} has {held} requests being served, the broker's limit "
                   f"(--{flag}): retry later, send fewer requests at once (wait for answers before sending "
                   f"more), or raise --{flag}")


def too_many_connections(holding: str, flag: str) -> str:
    """The remark answering a connection past a connection limit; ``holding`` says who holds how many."""
    return (f"{holding}, the broker's limit (--{flag}): close connections no longer used (a process needs "
            f"one per broker), or raise --{flag}")


class MemoryBudget:
    """One budget of memory for what every door buffers for its clients (``ClientLimits``'
    ``memory_budget_bytes``), with a share per client (``memory_budget_per_client_bytes``).

    A door opens a ``Holding`` for each thing that buffers (a ReadRanges stream, a remoting
    connection), reserves bytes before it buffers them and releases them once they are gone
    (sent, parsed, answered). ``reserve`` refuses, raising TOO_MANY_REQUESTS with a sentence
    naming the limit and its flag, when the client would hold more than its share, or the
    budget is full and this client holds the most. Past the cut line (the budget less a
    client's share, or half the budget) a client that holds more than the asking one is cut:
    the ``cut`` of each of its holdings is called with the sentence (the door ends the stream
    or closes the connection), its bytes are counted free at once, and the asking client goes
    on. The cut client's buffers are freed a moment later (when its door has ended them): the
    room between the cut line and the budget is what keeps the broker within its budget
    meanwhile. Thread-safe; ``cut`` is called outside the lock and must return at once (hand
    the work to its door's loop).

    Freed buffers go back to the allocator; glibc keeps large freed areas of its arenas in the
    process rather than give them to the system, so after many megabytes are released the
    budget asks it to (``malloc_trim``), at most once a second.
    """

    TRIM_AFTER_BYTES = 16 << 20  # released since the last trim before the next one
    TRIM_INTERVAL_S = 0.25

    def __init__(self, total_bytes: int, per_client_bytes: int):
        self.total_bytes = total_bytes
        self.per_client_bytes = per_client_bytes
        self.cut_line_bytes = total_bytes - min(per_client_bytes, total_bytes // 2)
        self.held = 0
        self.clients: dict[str, int] = {}  # client -> bytes held
        self._holdings: dict[str, set] = {}  # client -> its open Holdings
        self._lock = threading.Lock()
        self._released_since_trim = 0
        self._last_trim = 0.0
        self._trim_timer: threading.Timer | None = None

    @classmethod
    def of(cls, limits: ClientLimits) -> "MemoryBudget":
        return cls(limits.memory_budget_bytes, limits.memory_budget_per_client_bytes)

    def holding(self, client: str, what: str, cut: Callable[[str], None] | None = None) -> "Holding":
        """A holder of ``client``'s buffers; ``what`` names it in sentences ("ReadRanges stream");
        ``cut(sentence)`` ends it when the broker needs its memory back (None: never cut)."""
        return Holding(self, client, what, cut)

    def _reserve(self, holding: "Holding", size: int) -> None:
        client = holding.client
        victims = []
        with self._lock:
            if holding.closed:
                raise self._refusal(f"{holding.what} of client {client} was ended (the broker needed its memory)",
                                    "memory-budget-bytes")
            mine = self.clients.get(client, 0)
            if mine + size > self.per_client_bytes:
                raise self._refusal(f"client {client} holds {mine} bytes of the broker's buffers and {holding.what} "
                                    f"asks {size} more, over its share of {self.per_client_bytes}",
                                    "memory-budget-per-client-bytes")
            if self.held + size > self.cut_line_bytes:
                greediest = max(self.clients, key=self.clients.get, default=client)
                greed = self.clients.get(greediest, 0)
                if greediest != client and greed > mine + size:
                    why = (f"the broker's buffers neared their budget ({self.held} bytes held of "
                           f"{self.total_bytes}, --memory-budget-bytes) and client {greediest} held the most of them "
                           f"({greed} bytes): read what the broker sends and finish requests as you send them, then "
                           "retry")
                    for victim in list(self._holdings.get(greediest, ())):
                        if victim.cut is not None:
                            self._drop(victim)
                            victims.append(victim)
                if self.held + size > self.total_bytes:
                    raise self._refusal(f"the broker's buffers hold {self.held} bytes of their budget of "
                                        f"{self.total_bytes} and client {client}, the one holding the most, asks "
                                        f"{size} more", "memory-budget-bytes")
            self.held += size
            self.clients[client] = mine + size
            holding.held += size
            self._holdings.setdefault(client, set()).add(holding)
        for victim in victims:
            victim.cut(why)

    def _release(self, holding: "Holding", size: int) -> None:
        with self._lock:
            size = min(size, holding.held)
            if not size:
                return
            holding.held -= size
            self._uncount(holding.client, size)
            if not holding.held:
                self._forget(holding)
            trim = self._trim_due(size)
        if trim:
            malloc_trim()

    def _close(self, holding: "Holding") -> None:
        with self._lock:
            size = holding.held
            if not holding.closed:
                self._drop(holding)
            trim = self._trim_due(size)
        if trim:
            malloc_trim()

    def _drop(self, holding: "Holding") -> None:
        """Count the holding's bytes free and forget it (under the lock)."""
        holding.closed = True
        if holding.held:
            self._uncount(holding.client, holding.held)
            holding.held = 0
        self._forget(holding)

    def _uncount(self, client: str, size: int) -> None:
        self.held -= size
        left = self.clients.pop(client, 0) - size
        if left > 0:
            self.clients[client] = left

    def _forget(self, holding: "Holding") -> None:
        mine = self._holdings.get(holding.client)
        if mine is not None:
            mine.discard(holding)
            if not mine:
                del self._holdings[holding.client]

    def _trim_due(self, released: int) -> bool:
        """Whether to trim now (under the lock); a trim due within the interval of the last one
        is made by a timer at the interval's end, so that a burst of releases is trimmed too."""
        self._released_since_trim += released
        if self._released_since_trim < self.TRIM_AFTER_BYTES or self._trim_timer is not None:
            return False
        wait_s = self._last_trim + self.TRIM_INTERVAL_S - time.monotonic()
        if wait_s > 0:
            self._trim_timer = threading.Timer(wait_s, self._trim_later)
            self._trim_timer.daemon = True
            self._trim_timer.start()
            return False
        self._released_since_trim, self._last_trim = 0, time.monotonic()
        return True

    def _trim_later(self) -> None:
        with self._lock:
            self._trim_timer = None
            self._released_since_trim, self._last_trim = 0, time.monotonic()
        malloc_trim()

    @staticmethod
    def _refusal(holding: str, flag: str) -> BrokerFault:
        return refused(Reason.TOO_MANY_REQUESTS,
                       f"[TOO_MANY_REQUESTS] {holding}, the broker's limit (--{flag}): read what the broker "
                       f"sends as it comes, send fewer requests at once, retry later, or raise --{flag}")


class Holding:
    """What one holder (a stream, a connection) has reserved of a ``MemoryBudget``."""

    __slots__ = ("budget", "client", "what", "cut", "held", "closed")

    def __init__(self, budget: MemoryBudget, client: str, what: str, cut):
        self.budget = budget
        self.client = client
        self.what = what
        self.cut = cut
        self.held = 0
        self.closed = False

    def reserve(self, size: int) -> None:
        """Count ``size`` more bytes held; raises TOO_MANY_REQUESTS past the budget or the share."""
        if size > 0:
            self.budget._reserve(self, size)

    def release(self, size: int) -> None:
        if size > 0:
            self.budget._release(self, size)

    def close(self) -> None:
        """All its bytes are free; it reserves no more."""
        self.budget._close(self)


def malloc_trim() -> None:
    """Give the allocator's free memory back to the system (glibc's malloc_trim; nothing elsewhere)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class TopicQuota:
    """Topics and queues created, per client and on the whole broker, checked before each
    creation of a topic of ``store`` (a MessageStore: its topics, its own included)."""

    def __init__(self, limits: ClientLimits, store):
        self.limits = limits
        self._store = store
        self._lock = threading.Lock()  # a check and its creation are one step
        self._created: dict[str, dict[str, int]] = {}  # client -> {topic: queues} it created
        self._added: dict[str, dict[str, int]] = {}  # client -> {topic: queues} its updates added
        self.refusal_log = ThrottledLog(log)  # a client creating topics in a loop is refused each time

    def create(self, client: str, name: str, queue_count: int, queue_type, make: Callable[[], tuple]) -> tuple:
        """``make()`` (the store's creation: (CreateStatus, detail)) if ``client`` may create the
        topic; a topic that exists already, or settings the store refuses, are left to ``make``
        (it answers what was wrong). Raises LIMIT_EXCEEDED past a limit, creating nothing
        (logged, at a bounded rate per client)."""
        with self._lock:
            if self._store.find_topic(name) is None and creation_problem(name, queue_count, queue_type) is None:
                try:
                    self._check(client, name, queue_count, self._store.all_topics())
                except BrokerFault as limit:
                    self.refusal_log.warning("topic creation refused: %s", limit.message, key=client,
                                             extra={"topic": name, "client": client or None, "queues": queue_count})
                    raise
            status, detail = make()
            if status is CreateStatus.CREATED and client:
                self._created.setdefault(client, {})[name] = queue_count
            return status, detail

    def update(self, client: str, name: str, queue_count: int, make: Callable[[], tuple]) -> tuple:
        """``make()`` (the store's update: (config, detail)) if ``client`` may add the queues a
        higher ``queue_count`` adds: queues past those the topic holds count as created by
        ``client``, as a creation's (fewer, or held queues served again, add none). Raises
        LIMIT_EXCEEDED past a limit, changing nothing (logged, at a bounded rate per client)."""
        with self._lock:
            existing = self._store.find_topic(name)
            added = queue_count - existing.stored_queues if existing is not None and queue_count else 0
            if added > 0:
                try:
                    self._check_queues(client, f"{added} more queues of topic {echo(name)}", added,
                                       self._store.all_topics())
                except BrokerFault as limit:
                    self.refusal_log.warning("topic update refused: %s", limit.message, key=client,
                                             extra={"topic": name, "client": client or None, "queues": queue_count})
                    raise
            config, detail = make()
            if config is not None and added > 0 and client:
                mine = self._added.setdefault(client, {})
                mine[name] = mine.get(name, 0) + added
            return config, detail

    def forget(self, name: str) -> None:
        """The topic was deleted: its creator may create another in its place."""
        with self._lock:
            for table in (self._created, self._added):
                for client, counted in list(table.items()):
                    if counted.pop(name, None) is not None and not counted:
                        del table[client]

    def _check(self, client: str, name: str, queue_count: int, topics: list) -> None:
        limits = self.limits
        if len(topics) >= limits.max_topics:
            raise _limit(f"this broker holds {len(topics)} topics, its limit (--max-topics): topic {echo(name)} "
                         "was not created. Delete topics no longer used, or raise --max-topics")
        created = self._created.get(client, {})
        if client and len(created) >= limits.max_topics_created_per_client:
            raise _limit(f"client {client} has created {len(created)} topics, its limit "
                         f"(--max-topics-created-per-client): topic {echo(name)} was not created. Delete topics it "
                         "no longer uses, or raise --max-topics-created-per-client")
        self._check_queues(client, f"topic {echo(name)} with {queue_count} queues", queue_count, topics)

    def _check_queues(self, client: str, what: str, queue_count: int, topics: list) -> None:
        """LIMIT_EXCEEDED when ``queue_count`` more queues (``what``) pass the broker's or the client's limit."""
        limits = self.limits
        queues = sum(topic.stored_queues for topic in topics)  # queues an update took out of service hold data too
        if queues + queue_count > limits.max_queues:
            raise _limit(f"{what} would bring this broker to {queues + queue_count} queues, over its limit of "
                         f"{limits.max_queues} (--max-queues): create fewer queues, delete topics no longer used, "
                         "or raise --max-queues")
        if not client:
            return
        mine = sum(self._created.get(client, {}).values()) + sum(self._added.get(client, {}).values())
        if mine + queue_count > limits.max_queues_created_per_client:
            raise _limit(f"{what} would bring the queues created by client {client} to {mine + queue_count}, over "
                         f"its limit of {limits.max_queues_created_per_client} (--max-queues-created-per-client): "
                         "create fewer queues, delete topics it no longer uses, or raise the limit")


def _limit(sentence: str) -> BrokerFault:
    return refused(Reason.LIMIT_EXCEEDED, sentence)


class GroupQuota:
    """Consumer groups a client brings into being (committing offsets, popping), at most
    ``max_groups_per_client`` each, counted since the broker started: a group that exists
    already (``known``) is anyone's to use."""

    def __init__(self, limits: ClientLimits):
        self.limits = limits
        self._lock = threading.Lock()
        self._made: dict[str, set[str]] = {}  # client -> the groups it made
        self.refusal_log = ThrottledLog(log)

    def admit(self, client: str, group: str, known: Callable[[str], bool]) -> None:
        """LIMIT_EXCEEDED when ``client`` would make one group more than its limit."""
        if not client:
            return
        with self._lock:
            made = self._made.get(client)
            if made is not None and group in made:
                return
            if known(group):
                return
            made = self._made.setdefault(client, set())
            if len(made) >= self.limits.max_groups_per_client:
                error = _limit(f"{client} made {len(made)} consumer groups, its limit (--max-groups-per-client): "
                               f"group {echo(group)} is refused; use a group of yours, or raise the limit")
                self.refusal_log.warning("consumer group refused: %s", error.message, key=client,
                                         extra={"group": group, "client": client})
                raise error
            made.add(group)

    def forget(self, group: str) -> None:
        """The group was deleted: the client that made it may make another in its place."""
        with self._lock:
            for client, made in list(self._made.items()):
                made.discard(group)
                if not made:
                    del self._made[client]

