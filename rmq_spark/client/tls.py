"""TLS of the SDK's connections (``TransportConfig.tls``): the PEM files read once, a context
for RocketMQ's remoting protocol, and what to tell a user whose connection TLS failed.

A client and a broker that disagree about TLS fail in ways that say little (gRPC: UNAVAILABLE,
"Socket closed"; a plain socket: a reset). ``tls_mismatch`` finds out with one more connection
whether TLS is the cause, and says so in a sentence; it never guesses: a broker that cannot be
reached at all gets None, and the caller's own error stands.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from rmq_spark.errors import ConfigError

_PROBE_TIMEOUT_S = 2.0
_ALERT_WAIT_S = 0.5  # TLS 1.3: a broker refuses a client certificate after the handshake, closing at once
_FIELDS = {"tls_ca_file": "CERTIFICATE", "tls_cert_file": "CERTIFICATE", "tls_key_file": "PRIVATE KEY"}
ENABLE_TLS = "connect with TLS (TransportConfig(tls=True); rmq-admin --tls; the Spark option tls=true)"


def read_pem(config, field: str) -> bytes | None:
    """The PEM file that ``config``'s ``field`` names, checked; None when it names none."""
    path = getattr(config, field)
    if not path:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"{field} {path!r}: cannot read it ({err.strerror or err}); give a readable PEM file") \
            from None
    kind = _FIELDS[field]
    if b"-----BEGIN " not in data or kind.encode() + b"-----" not in data:
        raise ConfigError(f"{field} {path!r}: no PEM {kind.lower()} in it (a '-----BEGIN ...{kind}-----' block)")
    if field == "tls_key_file" and b"ENCRYPTED" in data:
        raise ConfigError(f"tls_key_file {path!r}: the key is encrypted; give it unencrypted")
    return data


def ssl_context(config) -> ssl.SSLContext:
    """A client context of ``config``'s TLS settings: the broker's certificate is checked
    (against tls_ca_file, else the system's CAs) and must name the host dialled."""
    for field in _FIELDS:
        read_pem(config, field)  # each file's problem in a sentence of its own
    try:
        context = ssl.create_default_context(cafile=config.tls_ca_file)
        if config.tls_cert_file:
            context.load_cert_chain(config.tls_cert_file, config.tls_key_file, password=_no_password)
    except ssl.SSLError as err:
        raise ConfigError(f"the TLS files cannot be used ({err.reason or err}): tls_ca_file must hold CA "
                          "certificates, tls_key_file the key of tls_cert_file") from None
    return context


def tls_mismatch(address: str, config, timeout_s: float = _PROBE_TIMEOUT_S) -> str | None:
    """Why TLS may have failed the connections to ``address`` ("host:port"), found by a probe
    connection: a sentence saying what to change, or None when TLS is not the cause."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    speaks_tls = _speaks_tls(host, int(port), timeout_s)
    if speaks_tls is None:
        return None  # not reachable: the caller's error says so
    if not config.tls:
        return f"the broker at {address} serves TLS only: {ENABLE_TLS}" if speaks_tls else None
    if not speaks_tls:
        return (f"{address} does not serve TLS: connect without TLS, or start the broker with --tls-cert and "
                "--tls-key")
    return _refusal(host, int(port), address, config, timeout_s)


def _speaks_tls(host: str, port: int, timeout_s: float) -> bool | None:
    """Whether ``host:port`` completes a TLS handshake (any certificate); None: no connection."""
    try:
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return None
    anything = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anything.check_hostname, anything.verify_mode = False, ssl.CERT_NONE
    try:
        with anything.wrap_socket(raw, server_hostname=host):
            return True
    except ssl.SSLError as err:
        return "ALERT" in (err.reason or "")  # an alert is TLS: the broker refused this handshake
    except OSError:
        return False  # closed or garbled: not TLS
    finally:
        raw.close()


def _refusal(host: str, port: int, address: str, config, timeout_s: float) -> str | None:
    """Why a TLS broker refuses ``config``'s TLS: its certificate untrusted here, or ours there.
    TLS 1.3 ends the handshake on the client's side before the broker has checked the client's
    certificate: a broker that refuses it closes the connection right after (an alert may come)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                ssl_context(config).wrap_socket(raw, server_hostname=host) as tls:
            tls.settimeout(_ALERT_WAIT_S)
            refused = tls.recv(1) == b""
    except ssl.SSLCertVerificationError as err:
        return (f"the certificate of the broker at {address} is not trusted ({err.verify_message}): give "
                "tls_ca_file the CA that signed it (rmq-admin --tls-ca, the Spark option tlsCaFile)")
    except ssl.SSLError as err:
        refused = "ALERT" in (err.reason or "")
    except OSError:
        refused = False  # a timeout: the connection works
    if not refused:
        return None
    if not config.tls_cert_file:
        return (f"the broker at {address} requires a client certificate (it closed the connection after the TLS "
                "handshake): give tls_cert_file and tls_key_file, a certificate signed by the CA of its "
                "--tls-client-ca (rmq-admin --tls-cert / --tls-key)")
    return (f"the broker at {address} refuses this client's certificate (it closed the connection after the TLS "
            "handshake): give a certificate signed by the CA of its --tls-client-ca")


def _no_password():
    raise ConfigError("tls_key_file: the key is encrypted; give it unencrypted")  # never prompt on a terminal
