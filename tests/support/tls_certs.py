"""Certificates made at test time (never committed): a CA, a broker certificate for 127.0.0.1
and localhost signed by it, a client certificate signed by it, and a stranger's CA with a
client certificate of its own. Keys are unencrypted PKCS#8 PEM, as RocketMQ's Java clients
read them."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA certificate that signed server and client
    server: Pair
    client: Pair
    stranger_ca: Path
    stranger_client: Pair  # a client certificate of another CA


def make_certs(directory: Path) -> Certs:
    ca_key, ca_cert = _ca("rmq-test-ca")
    stranger_key, stranger_cert = _ca("rmq-stranger-ca")
    server = _leaf("broker_sim", ca_key, ca_cert, server=True)
    client = _leaf("rmq-client", ca_key, ca_cert, server=False)
    stranger_client = _leaf("stranger", stranger_key, stranger_cert, server=False)
    return Certs(_write_cert(directory / "ca.pem", ca_cert), _write_pair(directory, "server", *server),
                 _write_pair(directory, "client", *client), _write_cert(directory / "stranger-ca.pem", stranger_cert),
                 _write_pair(directory, "stranger-client", *stranger_client))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2)))


def _ca(common_name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(common_name, _name(common_name), key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(common_name: str, ca_key, ca_cert, *, server: bool):
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (_builder(common_name, ca_cert.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                     else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _write_cert(path: Path, cert) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_pair(directory: Path, name: str, key, cert) -> Pair:
    key_path = directory / f"{name}-key.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return Pair(_write_cert(directory / f"{name}.pem", cert), key_path)
