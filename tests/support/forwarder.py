"""A TCP forwarder for the limits tests: connections made to its port reach ``target`` from
another loopback address (127.0.0.2), so that the broker sees a second client address on a
machine where every client is 127.0.0.1."""

from __future__ import annotations

import socket
import threading

OTHER_CLIENT_IP = "127.0.0.2"


class Forwarder:
    def __init__(self, target: str, source_ip: str = OTHER_CLIENT_IP):
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.source_ip = source_ip
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="forwarder-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.socket()
            upstream.bind((self.source_ip, 0))
            try:
                upstream.connect(self.target)
            except OSError:
                downstream.close()
                upstream.close()
                continue
            with self._lock:
                if self._closed:
                    downstream.close()
                    upstream.close()
                    return
                self._sockets += [downstream, upstream]
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=_pump, args=(a, b), name="forwarder-pump", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self._listener.close()
        for sock in sockets:
            _close(sock)

    def __enter__(self) -> "Forwarder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until either side ends; then end both."""
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    _close(sink)
    _close(source)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
