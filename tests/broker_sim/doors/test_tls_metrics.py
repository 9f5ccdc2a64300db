"""The metrics port behind TLS: HTTPS with the broker's certificate, a client certificate asked
for with ``--metrics-auth tls-client``, an admin account's credentials with ``--metrics-auth
admin`` (over HTTPS only: plain HTTP would hand its secret key to whoever listens)."""

from __future__ import annotations

import base64
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

from broker_sim.testing import die_with_parent, stop_process, wait_listening

CLI = [sys.executable, "-m", "broker_sim.cli", "--port", "0", "--metrics-port", "0", "--metrics-host", "127.0.0.1"]
METRICS_URL = re.compile(r"metrics on (https://127\.0\.0\.1:\d+/metrics)")


def metrics_url(process: subprocess.Popen) -> str:
    _endpoint, output = wait_listening(process, 60)
    for _ in range(20):
        if found := METRICS_URL.search(output):
            return found.group(1)
        output += process.stdout.readline()
    raise AssertionError(f"the CLI did not say where its metrics are:\n{output}")


def scraped(url: str, context: ssl.SSLContext, credentials: str | None = None) -> int | str:
    """The answer's HTTP status, or the name of the error that kept it from coming."""
    request = urllib.request.Request(url)
    if credentials:
        request.add_header("Authorization", "Basic " + base64.b64encode(credentials.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            assert b"rocketmq_topic_number" in answer.read()
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code
    except (urllib.error.URLError, OSError) as failed:
        return type(getattr(failed, "reason", failed)).__name__


def trusting(certs, client=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def broker(certs, tmp_path, *args) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "--data-dir", str(tmp_path / "data"), "--tls-cert", str(certs.server.cert),
                             "--tls-key", str(certs.server.key), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=die_with_parent)


def test_a_scrape_may_be_asked_for_a_client_certificate(certs, tmp_path):
    process = broker(certs, tmp_path, "--tls-client-ca", str(certs.ca), "--metrics-auth", "tls-client")
    try:
        url = metrics_url(process)
        assert scraped(url, trusting(certs, certs.client)) == 200
        assert scraped(url, trusting(certs)) != 200  # no certificate: the handshake fails
        assert scraped(url, trusting(certs, certs.stranger_client)) != 200
        assert scraped(url.replace("https", "http"), trusting(certs)) != 200
    finally:
        stop_process(process, 30)


def test_a_scrape_may_be_asked_for_an_admin_accounts_credentials(certs, tmp_path):
    acl = tmp_path / "acl.yml"
    acl.write_text("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n"
                   "  - {accessKey: app, secretKey: app-secret}\n")
    process = broker(certs, tmp_path, "--metrics-auth", "admin", "--acl-file", str(acl))
    try:
        url = metrics_url(process)
        context = trusting(certs)
        assert [scraped(url, context, None), scraped(url, context, "app:app-secret"),
                scraped(url, context, "ops:wrong"), scraped(url, context, "ops:ops-secret")] == [401, 401, 401, 200]
    finally:
        stop_process(process, 30)


def test_metrics_credentials_are_refused_without_what_protects_them(certs, tmp_path):
    acl = tmp_path / "acl.yml"
    acl.write_text("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n")
    tls = ["--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key)]
    cases = [
        (["--metrics-auth", "admin"], "--metrics-auth admin asks scrapes for an admin account's credentials: give "
                                      "--acl-file"),
        (["--metrics-auth", "admin", "--acl-file", str(acl)], "--metrics-auth admin sends an admin account's secret "
                                                              "key with every scrape: give --tls-cert"),
        (["--metrics-auth", "tls-client", *tls], "--metrics-auth tls-client asks scrapes for a client certificate"),
    ]
    for args, expected in cases:
        refused = subprocess.run([*CLI, "--data-dir", str(tmp_path / "data"), *args], capture_output=True, text=True,
                                 timeout=60)
        assert refused.returncode == 2 and expected in refused.stderr, (args, refused.stderr)
