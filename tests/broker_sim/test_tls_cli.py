"""rmq-broker-sim with TLS as a process: it serves TLS with good files, and refuses unusable
ones with a sentence and exit code 2, before it touches its data directory."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading

from rmq_spark import Admin, TransportConfig

CLI = [sys.executable, "-m", "broker_sim.cli"]
LISTENING = re.compile(r"rmq-broker-sim listening on (\S+), data in ")
TIMEOUT_S = 60


def bad_files(certs, tmp_path) -> list:
    (tmp_path / "hello.txt").write_text("hello")
    (tmp_path / "broken.pem").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    cert, key = str(certs.server.cert), str(certs.server.key)
    return [
        (["--tls-cert", cert], "TLS needs both --tls-cert and --tls-key"),
        (["--tls-client-ca", str(certs.ca)], "--tls-client-ca asks clients for certificates over TLS: give "
                                             "--tls-cert and --tls-key too"),
        (["--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", key], "missing.pem: cannot read it"),
        (["--tls-cert", str(tmp_path / "hello.txt"), "--tls-key", key], "hello.txt: no PEM certificate in it"),
        (["--tls-cert", cert, "--tls-key", cert], f"--tls-key {cert}: no PEM private key in it"),
        (["--tls-cert", str(tmp_path / "broken.pem"), "--tls-key", key], "cannot be read as PEM"),
        (["--tls-cert", cert, "--tls-key", str(certs.client.key)], "do not make a pair"),
        (["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", key], "--tls-client-ca"),
    ]


def test_unusable_tls_files_are_refused_with_a_sentence(certs, tmp_path):
    for args, expected in bad_files(certs, tmp_path):
        result = subprocess.run(CLI + ["--data-dir", str(tmp_path / "data"), *args], capture_output=True, text=True,
                                timeout=TIMEOUT_S)
        assert result.returncode == 2 and result.stdout == "", (args, result.stderr)
        assert result.stderr.startswith("rmq-broker-sim: error: ") and expected in result.stderr, result.stderr
        assert not (tmp_path / "data").exists()


def test_the_broker_process_serves_tls(certs, tmp_path):
    process = subprocess.Popen(CLI + ["--data-dir", str(tmp_path / "data"), "--port", "0", "--tls-cert",
                                      str(certs.server.cert), "--tls-key", str(certs.server.key)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
        endpoint = LISTENING.match(lines.get(timeout=TIMEOUT_S)).group(1)
        with Admin(endpoint, TransportConfig(tls=True, tls_ca_file=str(certs.ca))) as admin:
            admin.create_topic("over-tls", 2)
            assert [t.name for t in admin.list_topics()] == ["over-tls"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT_S)
