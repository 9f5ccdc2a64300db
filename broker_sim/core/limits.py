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

import dataclasses
import threading
from dataclasses import dataclass
from typing import Callable

from broker_sim.store import CreateStatus, creation_problem, echo

from .errors import BrokerError, Reason


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

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not value > 0:
                raise ValueError(f"{field.name}={value!r}: give a positive number "
                                 f"(--{field.name.replace('_', '-')})")
        if not self.write_buffer_low_bytes <= self.write_buffer_high_bytes <= self.max_buffered_bytes_per_connection:
            raise ValueError(f"write buffer marks low {self.write_buffer_low_bytes} <= high "
                             f"{self.write_buffer_high_bytes} <= max_buffered_bytes_per_connection "
                             f"{self.max_buffered_bytes_per_connection} do not hold: raise "
                             "--max-buffered-bytes-per-connection")


def client_key(address: str, account: str | None = None) -> str:
    """Who "one client" is, for every per-client limit: its account once requests carry one
    (ACLs), otherwise its network address (an IP, without the port)."""
    return account or address


def too_many_requests(held: int, who: str, flag: str) -> BrokerError:
    """The refusal of a request past a limit of requests in flight."""
    return BrokerError(Reason.TOO_MANY_REQUESTS,
                       f"[TOO_MANY_REQUESTS] {who} has {held} requests being served, the broker's limit "
                       f"(--{flag}): retry later, send fewer requests at once (wait for answers before sending "
                       f"more), or raise --{flag}")


def too_many_connections(holding: str, flag: str) -> str:
    """The remark answering a connection past a connection limit; ``holding`` says who holds how many."""
    return (f"{holding}, the broker's limit (--{flag}): close connections no longer used (a process needs "
            f"one per broker), or raise --{flag}")


class TopicQuota:
    """Topics and queues created, per client and on the whole broker, checked before each
    creation of a topic of ``store`` (a MessageStore: its topics, its own included)."""

    def __init__(self, limits: ClientLimits, store):
        self.limits = limits
        self._store = store
        self._lock = threading.Lock()  # a check and its creation are one step
        self._created: dict[str, dict[str, int]] = {}  # client -> {topic: queues} it created

    def create(self, client: str, name: str, queue_count: int, queue_type, make: Callable[[], tuple]) -> tuple:
        """``make()`` (the store's creation: (CreateStatus, detail)) if ``client`` may create the
        topic; a topic that exists already, or settings the store refuses, are left to ``make``
        (it answers what was wrong). Raises LIMIT_EXCEEDED past a limit, creating nothing."""
        with self._lock:
            if self._store.find_topic(name) is None and creation_problem(name, queue_count, queue_type) is None:
                self._check(client, name, queue_count, self._store.all_topics())
            status, detail = make()
            if status is CreateStatus.CREATED and client:
                self._created.setdefault(client, {})[name] = queue_count
            return status, detail

    def forget(self, name: str) -> None:
        """The topic was deleted: its creator may create another in its place."""
        with self._lock:
            for client, created in list(self._created.items()):
                if created.pop(name, None) is not None and not created:
                    del self._created[client]

    def _check(self, client: str, name: str, queue_count: int, topics: list) -> None:
        limits = self.limits
        queues = sum(topic.queue_count for topic in topics)
        if len(topics) >= limits.max_topics:
            raise _limit(f"this broker holds {len(topics)} topics, its limit (--max-topics): topic {echo(name)} "
                         "was not created. Delete topics no longer used, or raise --max-topics")
        if queues + queue_count > limits.max_queues:
            raise _limit(f"topic {echo(name)} with {queue_count} queues would bring this broker to "
                         f"{queues + queue_count} queues, over its limit of {limits.max_queues} (--max-queues): "
                         "create fewer queues, delete topics no longer used, or raise --max-queues")
        if not client:
            return
        created = self._created.get(client, {})
        if len(created) >= limits.max_topics_created_per_client:
            raise _limit(f"client {client} has created {len(created)} topics, its limit "
                         f"(--max-topics-created-per-client): topic {echo(name)} was not created. Delete topics it "
                         "no longer uses, or raise --max-topics-created-per-client")
        mine = sum(created.values())
        if mine + queue_count > limits.max_queues_created_per_client:
            raise _limit(f"topic {echo(name)} with {queue_count} queues would bring the queues created by client "
                         f"{client} to {mine + queue_count}, over its limit of "
                         f"{limits.max_queues_created_per_client} (--max-queues-created-per-client): create fewer "
                         "queues, delete topics it no longer uses, or raise the limit")


def _limit(sentence: str) -> BrokerError:
    return BrokerError(Reason.LIMIT_EXCEEDED, sentence)
