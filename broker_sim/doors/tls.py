"""TLS of the broker's ports: its certificate, key and optional client CA, read and checked once.

``TlsOptions.load`` reads the PEM files and checks them (readable, PEM, the key belongs to the
certificate) so that a mistake is one sentence at start, not a failed handshake later; the gRPC
port gets ``grpc_credentials()`` (of the bytes read) and the remoting port ``ssl_context()``
(Python's ssl loads a certificate and key from files only: the same files).
With a client CA both ports require a client certificate signed by it (mutual TLS).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

from broker_sim.common.faults import BrokerConfigError


class TlsConfigError(BrokerConfigError):
    """A TLS file that cannot be used; the message says which and how to fix it."""


@dataclass(frozen=True)
class TlsOptions:
    """The broker's TLS material, as PEM bytes.

    Attributes
    ----------
    cert_file, key_file : Path
        The broker's certificate (chain, leaf first) and its private key, unencrypted.
    client_ca_file : Path or None
        CA certificates that sign the clients' certificates: given, clients must present one
        (mutual TLS); None, clients are not asked for a certificate.
    cert_chain, private_key, client_ca : bytes
        The files' contents, read once by ``load``.
    """

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None
    cert_chain: bytes = field(repr=False)
    private_key: bytes = field(repr=False)  # never in a log line or a traceback
    client_ca: bytes | None = field(repr=False)

    @classmethod
    def load(cls, cert_file, key_file, client_ca_file=None) -> "TlsOptions":
        """Read and check the files; TlsConfigError saying what is wrong with which."""
        cert = _read_pem(cert_file, "--tls-cert", "CERTIFICATE")
        key = _read_pem(key_file, "--tls-key", "PRIVATE KEY")
        if b"ENCRYPTED" in key:
            raise TlsConfigError(f"--tls-key {key_file}: the key is encrypted; give it unencrypted (for example "
                                 f"`openssl pkey -in {key_file} -out broker-key.pem`) and keep the file private")
        ca = _read_pem(client_ca_file, "--tls-client-ca", "CERTIFICATE") if client_ca_file is not None else None
        options = cls(Path(cert_file), Path(key_file), Path(client_ca_file) if client_ca_file else None, cert, key, ca)
        options.ssl_context()  # parses all three: a key of another certificate fails here
        return options

    @property
    def mutual(self) -> bool:
        """Clients must present a certificate signed by the client CA."""
        return self.client_ca is not None

    def ssl_context(self) -> ssl.SSLContext:
        """The remoting port's server context (TLS 1.2 or newer)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file, password=_no_password)
        except ssl.SSLError as err:
            if err.reason == "KEY_VALUES_MISMATCH":
                raise TlsConfigError(f"--tls-key {self.key_file} and --tls-cert {self.cert_file} do not make a "
                                     "pair: give the key the certificate was made for") from None
            raise TlsConfigError(f"--tls-cert {self.cert_file} or --tls-key {self.key_file} cannot be read as PEM "
                                 f"({err.reason or err}): give a PEM certificate and its PEM key") from None
        if self.client_ca is not None:
            try:
                context.load_verify_locations(cadata=self.client_ca.decode("ascii", "replace"))
            except ssl.SSLError as err:
                raise TlsConfigError(f"--tls-client-ca {self.client_ca_file}: no CA certificate could be read "
                                     f"({err.reason or err}): give the PEM certificate of the CA that signs the "
                                     "clients' certificates") from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def grpc_credentials(self):
        """The gRPC port's server credentials (grpc is imported here: the CLI checks its flags first)."""
        import grpc

        return grpc.ssl_server_credentials([(self.private_key, self.cert_chain)], root_certificates=self.client_ca,
                                           require_client_auth=self.mutual)


def _read_pem(path, flag: str, kind: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise TlsConfigError(f"{flag} {path}: cannot read it ({err.strerror or err}); give a readable PEM file") \
            from None
    if b"-----BEGIN " not in data or kind.encode() + b"-----" not in data:
        what = "private key" if kind == "PRIVATE KEY" else "certificate"
        raise TlsConfigError(f"{flag} {path}: no PEM {what} in it (a '-----BEGIN ...{kind}-----' block); convert it "
                             f"to PEM (for example `openssl x509 -inform der -in FILE -out FILE.pem`)")
    return data


def _no_password():
    raise TlsConfigError("the key is encrypted; give it unencrypted")  # never prompt on a terminal
