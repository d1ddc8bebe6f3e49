"""TLS on the daemon's TCP listener: the bearer token never crosses the network in clear.

A self-signed certificate for localhost/127.0.0.1 is made per test run with the openssl
command line (skipped where it is absent); the daemon and the clients are real processes and
real gRPC channels.
"""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from conftest import snarkjs_verify
from cuzk.cli import main as cli_main
from cuzk.client import Client, DaemonError, DaemonUnavailable
from cuzk.config import ConfigError, load_config
from test_daemon import TOKEN, DaemonProcess, check_proof, circuits_for


def self_signed(directory: Path, name: str = "server") -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not available to make a test certificate")
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def tls_daemon(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    cert, key = self_signed(d)
    small = circuits_for(d / "circuits", ("small",))["small"]
    daemon = DaemonProcess({small.name: small.zkey}, tcp=True, tls=(cert, key))
    try:
        yield daemon, small, cert, d
        assert daemon.stop() == 0, daemon.log_text()
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
        daemon.cleanup()


def test_a_tls_client_with_the_token_proves_over_tcp(tls_daemon, tmp_path):
    daemon, small, cert, _ = tls_daemon
    with Client(daemon.tcp, token=TOKEN, tls_ca=cert) as client:
        assert client.status()["server"]["listen"]
        check_proof(client.prove(small.name, small.witness_bytes(), timeout=300), small, tmp_path)
    # The token is still checked inside the encrypted channel.
    with Client(daemon.tcp, token="wrong-token-" + "y" * 16, tls_ca=cert) as wrong, pytest.raises(DaemonError, match="bearer token"):
        wrong.status()
    # The unix socket stays plain (its file permissions are the access control).
    with daemon.client() as local:
        assert local.status()["server"]["pid"] > 0
    assert "without TLS" not in daemon.log_text()


def test_plaintext_and_untrusting_clients_are_refused(tls_daemon):
    daemon, _, _, d = tls_daemon
    with Client(daemon.tcp, token=TOKEN, restart_grace=0.5) as plain, pytest.raises(DaemonUnavailable):
        plain.status()  # a clear-text channel cannot talk to a TLS port: the token is never sent in clear
    other, _ = self_signed(d, "other")
    with Client(daemon.tcp, token=TOKEN, tls_ca=other, restart_grace=0.5) as untrusting, pytest.raises(DaemonUnavailable):
        untrusting.status()  # a certificate the client does not trust
    not_pem = d / "not-a-certificate.zkey"
    not_pem.write_bytes(b"zkey\x01\x00\x00\x00")
    with pytest.raises(ValueError, match="no PEM certificate"):
        Client(daemon.tcp, token=TOKEN, tls_ca=not_pem)


def test_cli_status_over_tls(tls_daemon, capsys, monkeypatch):
    daemon, _, cert, _ = tls_daemon
    monkeypatch.setenv("CUZK_TOKEN", TOKEN)
    assert cli_main(["status", "--daemon", daemon.tcp, "--tls-ca", str(cert), "--json"]) == 0
    assert '"listen"' in capsys.readouterr().out


def test_bench_attaches_over_tls(tls_daemon, tmp_path, capsys):
    import json

    daemon, small, cert, _ = tls_daemon
    args = ["bench", "--addr", daemon.tcp, "--token", TOKEN, "--tls-ca", str(cert), "--zkey", str(small.zkey), "--wtns",
            str(small.witness), "--jobs", "2", "--concurrency", "1", "--warmup", "0", "--out", str(tmp_path / "out"), "--json",
            "--no-progress", "--no-plot", "--timeout", "300"]
    assert cli_main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["jobs"]["done"] == 2 and report["daemon"]["mode"] == "attached"
    assert report["workload"]["witness_sent_as"] == "bytes"  # over TCP the bytes travel


def test_tls_config_needs_both_files_and_a_tcp_listener(tmp_path):
    cert, key = self_signed(tmp_path)
    base = {"data_dir": str(tmp_path / "data"), "listen": ["127.0.0.1:7750"], "token": TOKEN}
    cfg = load_config(overrides={**base, "tls_cert": str(cert), "tls_key": str(key)}, env={})
    assert (cfg.tls_cert, cfg.tls_key) == (str(cert), str(key))
    with pytest.raises(ConfigError, match="both tls_cert"):
        load_config(overrides={**base, "tls_cert": str(cert)}, env={})
    with pytest.raises(ConfigError, match="not a readable file"):
        load_config(overrides={**base, "tls_cert": str(cert), "tls_key": str(tmp_path / "missing.key")}, env={})
    with pytest.raises(ConfigError, match="none is configured"):
        load_config(overrides={**base, "listen": [], "tls_cert": str(cert), "tls_key": str(key)}, env={})


def test_http_prove_is_https_with_the_daemons_certificate(tls_daemon, tmp_path):
    """POST /v1/prove/{key} (and /metrics beside it) is served over TLS when the daemon has a certificate."""
    daemon, small, cert, _ = tls_daemon
    host, port = daemon.http.rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), timeout=300, context=ssl.create_default_context(cafile=str(cert)))
    conn.request("POST", f"/v1/prove/{small.name}", body=small.witness_bytes(),
                 headers={"Content-Type": "application/octet-stream", "Authorization": f"Bearer {TOKEN}"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    assert resp.status == 200, body
    (tmp_path / "proof.json").write_text(json.dumps(body["proof"]))
    (tmp_path / "public.json").write_text(json.dumps(body["publicSignals"]))
    assert snarkjs_verify(small.vkey, tmp_path / "public.json", tmp_path / "proof.json")
    plain = http.client.HTTPConnection(host, int(port), timeout=30)
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        plain.request("GET", "/metrics")
        plain.getresponse()
    plain.close()
