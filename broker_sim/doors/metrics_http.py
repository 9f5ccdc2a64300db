"""The metrics port (``--metrics-port``): the broker's metrics in Prometheus' text format at
``/metrics``, over HTTP, or HTTPS with the broker's TLS certificate.

What a stranger who reaches the port can do is bounded: at most ``max_connections`` requests
are served at once (a connection past them is closed at once), each connection has
``timeout_s`` to send its request and take its answer (a half-sent request is dropped), and
scrapes that arrive while the page is being made share the next one made (never an older one). The port listens where
``--metrics-host`` says (default: the broker's ``--host``), and ``auth`` may require what a
scrape must show: ``tls-client``, a client certificate signed by the broker's
``--tls-client-ca``; ``admin``, the access key and secret key of an admin account of the ACL
file, as HTTP Basic credentials (Prometheus' ``basic_auth``), over HTTPS only.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from broker_sim.common.logs import ThrottledLog

log = logging.getLogger(__name__)

METRICS_AUTH = ("none", "tls-client", "admin")
MAX_CONNECTIONS = 8
TIMEOUT_S = 10.0


class MetricsServer(ThreadingHTTPServer):
    """``registry``'s page at ``address``; ``ssl_context``: HTTPS (asking for a client
    certificate where the context requires one); ``admins``: a callable giving the admin accounts
    {access key: secret key} whose Basic credentials a scrape must show (None: none needed)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], registry, *, ssl_context=None, admins=None,
                 max_connections: int = MAX_CONNECTIONS, timeout_s: float = TIMEOUT_S):
        self.registry = registry
        self.ssl_context = ssl_context
        self.admins = admins
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._page_lock = threading.Lock()
        self._page: tuple[int, bytes] | None = None  # (when it was begun, in time.monotonic_ns, the page)
        self.refusals = ThrottledLog(log)
        super().__init__(address, _Handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):  # as many scrapes as it serves at once: closed at once
            self.refusals.warning("metrics port: a connection was closed at once: %d are being served, its limit",
                                  self.max_connections, key=client_address[0], extra={"client": client_address[0]})
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request, client_address) -> None:
        request.settimeout(self.timeout_s)  # the TLS handshake and the request, each within it
        if self.ssl_context is not None:
            try:
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except OSError as err:  # a plain client, a missing or foreign certificate, a silent one
                self.refusals.warning("metrics port: a TLS handshake failed: %s", err, key=client_address[0],
                                      extra={"client": client_address[0]})
                return
        super().finish_request(request, client_address)

    def page(self) -> bytes:
        """The metrics in Prometheus' text format, as of this call or later: a page begun after
        the call arrived is shared, so a flood of scrapes costs one page per one being made."""
        asked = time.monotonic_ns()
        with self._page_lock:
            if self._page is None or self._page[0] < asked:
                self._page = (time.monotonic_ns(), generate_latest(self.registry))
            return self._page[1]

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header carries an admin account's credentials (or none are
        needed)."""
        if self.admins is None:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            access_key, _, secret_key = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        expected = self.admins().get(access_key)
        return expected is not None and hmac.compare_digest(secret_key.encode(), expected.encode())


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    protocol_version = "HTTP/1.0"  # one request a connection: nothing is held between scrapes

    def setup(self) -> None:
        self.timeout = self.server.timeout_s
        super().setup()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self._answer(404, b"the broker's metrics are at /metrics\n", "text/plain; charset=utf-8")
        elif not self.server.authorized(self.headers.get("Authorization")):
            self.server.refusals.warning("metrics port: a scrape without an admin account's credentials was refused",
                                         key=self.client_address[0], extra={"client": self.client_address[0]})
            self._answer(401, b"the metrics need an admin account's access key and secret key (HTTP Basic)\n",
                         "text/plain; charset=utf-8", {"WWW-Authenticate": 'Basic realm="rmq-broker-sim metrics"'})
        else:
            self._answer(200, self.server.page(), CONTENT_TYPE_LATEST)

    def _answer(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("metrics port: %s " + format, self.client_address[0], *args)
