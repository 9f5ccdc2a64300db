"""A slow, lossy link between network namespaces, for the tests of what crosses one.

This kernel has no netem, so the link is a forwarder in user space: a client in a namespace of
its own (``SlowLink.run``) reaches the broker only through a veth pair and the forwarder, which
holds every chunk each way for ``delay_ms`` +- ``jitter_ms``, lets ``rate_bytes_s`` through a
second, and stalls the stream for a retransmission timeout at ``loss`` of the chunks, as TCP
over a lossy path stalls its reader (the bytes come, late and in order). The namespace, its veth
pair and the forwarder are removed when the ``with`` block ends, failed or not, and a namespace a
killed test run left behind is removed at the next start.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import threading
import time
from collections import deque

import pytest

PREFIX = "rmqslow"
RTO_S = 0.2  # Linux's minimum retransmission timeout: what a lost segment costs the stream
CHUNK_BYTES = 16 << 10
QUEUED_BYTES = 1 << 20  # a direction's bytes in the link: past it the sender waits, as a full window does


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale() -> None:
    """Namespaces a test process that died left behind (named by its pid)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        digits = name[len(PREFIX):]
        if name.startswith(PREFIX) and digits.isdigit() and not _alive(int(digits)):
            _ip("netns", "del", name, check=False)


def require_namespaces() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a slow link between network namespaces needs root and iproute2's `ip`")


class SlowLink:
    """``with SlowLink("127.0.0.1:10911") as link:`` then ``link.endpoint`` is the broker as
    the namespace sees it, and ``link.run([...])`` runs a command there."""

    def __init__(self, target: str, *, delay_ms: float = 50, jitter_ms: float = 10, loss: float = 0.02,
                 rate_bytes_s: float = 2e6, seed: int = 7):
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.delay_s, self.jitter_s, self.loss, self.rate = delay_ms / 1000, jitter_ms / 1000, loss, rate_bytes_s
        self.random = random.Random(seed)
        self.namespace = f"{PREFIX}{os.getpid()}"
        subnet = 16 + os.getpid() % 200
        self.outside, self.inside = f"10.213.{subnet}.1", f"10.213.{subnet}.2"
        self._veth = f"rs{os.getpid()}"[:13]
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self.endpoint = ""

    def __enter__(self) -> "SlowLink":
        require_namespaces()
        _remove_stale()
        try:
            ns, veth = self.namespace, self._veth
            _ip("netns", "add", ns)
            _ip("link", "add", f"{veth}a", "type", "veth", "peer", "name", f"{veth}b")
            _ip("link", "set", f"{veth}b", "netns", ns)
            _ip("addr", "add", f"{self.outside}/30", "dev", f"{veth}a")
            _ip("link", "set", f"{veth}a", "up")
            for args in (("addr", "add", f"{self.inside}/30", "dev", f"{veth}b"), ("link", "set", f"{veth}b", "up"),
                         ("link", "set", "lo", "up")):
                _ip("netns", "exec", ns, "ip", *args)
            self._listener = socket.create_server((self.outside, 0))
            self.endpoint = f"{self.outside}:{self._listener.getsockname()[1]}"
            threading.Thread(target=self._accept, name="slow-link-accept", daemon=True).start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, command: list[str], timeout_s: float, env: dict | None = None) -> subprocess.CompletedProcess:
        """``command`` in the namespace: its only way to the broker is ``endpoint``."""
        return subprocess.run(["ip", "netns", "exec", self.namespace, *command], capture_output=True, text=True,
                              timeout=timeout_s, env=env)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        if self._listener is not None:
            self._listener.close()
        for sock in sockets:
            _close(sock)
        _ip("netns", "del", self.namespace, check=False)  # its end of the veth pair goes, and so the pair
        _ip("link", "del", f"{self._veth}a", check=False)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    broker.close()
                    return
                self._sockets += [client, broker]
            for source, sink in ((client, broker), (broker, client)):
                _Direction(self, source, sink).start()

    def _hold_s(self) -> float:
        """How long a chunk is held: the delay, its jitter, and now and then a lost segment's
        retransmission timeout."""
        with self._lock:
            held = self.delay_s + self.random.uniform(-self.jitter_s, self.jitter_s)
            if self.random.random() < self.loss:
                held += RTO_S * self.random.choice((1, 1, 2))
            return held


class _Direction:
    """One way of one connection: chunks read, held, and written in order at the link's rate."""

    def __init__(self, link: SlowLink, source: socket.socket, sink: socket.socket):
        self.link, self.source, self.sink = link, source, sink
        self.chunks: deque = deque()  # (when it may go, bytes)
        self.queued = 0
        self.ended = False
        self.changed = threading.Condition()
        self.last_due = 0.0

    def start(self) -> None:
        threading.Thread(target=self._read, name="slow-link-read", daemon=True).start()
        threading.Thread(target=self._write, name="slow-link-write", daemon=True).start()

    def _read(self) -> None:
        try:
            while data := self.source.recv(CHUNK_BYTES):
                with self.changed:
                    while self.queued >= QUEUED_BYTES and not self.ended:
                        self.changed.wait(1.0)
                    # in order: never before the chunk ahead, and no faster than the rate
                    due = max(time.monotonic() + self.link._hold_s(), self.last_due + len(data) / self.link.rate)
                    self.last_due = due
                    self.chunks.append((due, data))
                    self.queued += len(data)
                    self.changed.notify_all()
        except OSError:
            pass
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def _write(self) -> None:
        try:
            while True:
                with self.changed:
                    while not self.chunks and not self.ended:
                        self.changed.wait(1.0)
                    if not self.chunks:
                        break
                    due, data = self.chunks[0]
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.sink.sendall(data)
                with self.changed:
                    self.chunks.popleft()
                    self.queued -= len(data)
                    self.changed.notify_all()
        except OSError:
            pass
        _close(self.sink)
        _close(self.source)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
