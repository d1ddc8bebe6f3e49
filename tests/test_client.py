"""The Python client on its own: how it names keys and priorities, and how it fails when no daemon answers.

Everything that needs a daemon is in test_daemon.py; the retry across an engine restart is
exercised for real in test_daemon_recovery.py (kill -9).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuzk.client import Client, DaemonUnavailable, key_ref
from cuzk.proto import cuzk_pb2 as pb
from cuzk.proto import priority_to_pb


def test_key_ref_tells_paths_from_names(tmp_path):
    assert key_ref("sha256").WhichOneof("ref") == "name"
    assert key_ref("keys/sha.zkey").path.endswith("/keys/sha.zkey")
    assert key_ref("sha.zkey").path.startswith("/")
    existing = tmp_path / "k"
    existing.write_bytes(b"")
    assert key_ref(str(existing)).path == str(existing)
    assert key_ref(tmp_path / "any").path == str(tmp_path / "any")


@given(st.sampled_from(["low", "NORMAL", "High", " critical "]))
def test_priorities_by_name_in_any_case(name):
    assert pb.Priority.Name(priority_to_pb(name)) == "PRIORITY_" + name.strip().upper()


def test_unknown_priority_is_a_value_error():
    with pytest.raises(ValueError, match="unknown priority 'urgent'"):
        priority_to_pb("urgent")


def test_no_daemon_fails_fast_for_status_and_within_the_grace_for_retried_calls(tmp_path):
    import socket

    waits = []
    with Client(f"unix:{tmp_path}/nobody.sock", restart_grace=30, on_wait=waits.append) as client:
        for call in (client.status, lambda: client.await_proof("0" * 32)):  # no socket file: no daemon was ever there
            with pytest.raises(DaemonUnavailable, match="no cuzk daemon answers .*the socket file does not exist"):
                call()
        assert waits == []
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(str(tmp_path / "gone.sock"))  # a daemon's socket file, nothing accepting on it (restarting)
        with Client(f"unix:{tmp_path}/gone.sock", restart_grace=0.5, on_wait=waits.append) as client:
            t0 = time.monotonic()
            with pytest.raises(DaemonUnavailable, match="no cuzk daemon answers"):
                client.status()
            assert waits == []
            with pytest.raises(DaemonUnavailable):
                client.await_proof("0" * 32)  # retried while unreachable, then given up after the grace
            assert time.monotonic() - t0 >= 0.5 and len(waits) == 1 and waits[0].endswith("giving up after 0.5 s")


def _serve_unix(path, answer):
    """A one-connection-at-a-time server on the unix socket ``path``: ``answer(request_bytes) -> bytes`` is written back,
    then the connection is closed (as the daemon's HTTP/1.0 listener closes it)."""
    import socketserver
    import threading

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            head = b""
            while b"\r\n\r\n" not in head:
                head += self.request.recv(1 << 16)
            lengths = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
            length = int(lengths[0]) if lengths else 0
            while len(head.partition(b"\r\n\r\n")[2]) < length:
                head += self.request.recv(1 << 16)
            self.wfile.write(answer(head))

    server = socketserver.UnixStreamServer(str(path), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("text", ["/tmp/keys/sha256_32B.zkey", "sha", "a b/c?d#e%f", "ключ.zkey", "", "x+y&z=1"])
def test_the_local_http_client_writes_urls_as_urllib_parse_does(text):
    """The client writes plain URL parts itself (no urllib.parse import) and leaves the rest to urllib.parse: the same
    URL either way."""
    from urllib.parse import quote, urlencode

    from cuzk.local_client import url_quote, url_query

    assert url_quote(text) == quote(text, safe="")
    fields = {"priority": "normal", "request_id": text, "timeout_s": 1e9}
    assert url_query(fields) == urlencode(fields)
    assert url_query({"timeout_s": 0.001}) == urlencode({"timeout_s": 0.001})


def test_the_local_http_client_reads_the_daemons_answer_and_names_what_is_not_one(tmp_path):
    """``LocalHttpClient`` speaks HTTP/1.0 on the socket itself (no http.client): a whole answer becomes the proof, an
    answer cut short is a daemon that went away (retried within the grace, then DaemonUnavailable), and something
    other than HTTP on the socket is named, never parsed as a proof."""
    import json

    from cuzk.client_base import DaemonError
    from cuzk.local_client import LocalHttpClient, local_http_socket

    witness = tmp_path / "w.wtns"
    witness.write_bytes(b"\0" * 64)
    requests = []
    proof = {"pi_a": ["1", "2", "1"], "protocol": "groth16"}

    def whole(request: bytes) -> bytes:
        requests.append(request)
        body = json.dumps({"proof": proof, "publicSignals": ["7"]}).encode()
        return (b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nX-Cuzk-Job-Id: j1\r\n"
                b'X-Cuzk-Timings: {"msm": 0.5}\r\nX-Cuzk-Request-Seconds: 0.25\r\nContent-Length: ' + str(len(body)).encode()
                + b"\r\n\r\n" + body)

    cases = {"whole": whole,
             "cut": lambda request: b"HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\n{\"proof\"",
             "none": lambda request: b"",
             "other": lambda request: b"SSH-2.0-OpenSSH_9.6\r\n\r\n"}
    servers = [_serve_unix(local_http_socket(tmp_path / f"{name}.sock"), answer) for name, answer in cases.items()]
    try:
        result = LocalHttpClient(f"unix:{tmp_path}/whole.sock").prove("k", witness, priority="high")
        assert (result.job_id, result.proof, result.public_signals, result.timings) == ("j1", proof, ["7"], {"msm": 0.5})
        sent, answered, in_daemon = result.round_trip  # the client's clock around the exchange, the daemon's own time
        assert sent <= answered and in_daemon == 0.25
        head, _, body = requests[0].partition(b"\r\n\r\n")
        request_line, *headers = head.decode().split("\r\n")
        assert request_line.startswith("POST /v1/prove/k?timeout_s=") and request_line.endswith(" HTTP/1.0")
        assert f"Content-Length: {len(body)}" in headers and json.loads(body)["witness_path"] == str(witness)
        assert json.loads(body)["priority"] == "high"
        for name in ("cut", "none"):
            waits = []
            cut_short = LocalHttpClient(f"unix:{tmp_path}/{name}.sock", restart_grace=0.2, on_wait=waits.append)
            with pytest.raises(DaemonUnavailable, match=f"answers at unix:.*{name}.http.sock: the (answer|connection) ended"):
                cut_short.prove("k", witness)
            assert len(waits) == 1
        with pytest.raises(DaemonError, match="other.http.sock answered with something other than HTTP: 'SSH-2.0"):
            LocalHttpClient(f"unix:{tmp_path}/other.sock", restart_grace=0.2).prove("k", witness)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


@pytest.mark.parametrize("doc", [{}, [], {"proof": {"pi_a": ["1", "2", "1"], "protocol": "groth16"}, "publicSignals": []},
                                 {"t": 0.25, "n": -3, "ok": True, "no": None, "s": "é\u2028\"\\"}, [[1, [2, []]], {"a": {}}]])
def test_json_text_reads_what_json_reads_and_writes_what_snarkjs_writes(doc):
    """The daemon's client reads and writes JSON without importing json: the same values, and snarkjs's layout
    (json's indent=1, but an empty array or object written across two lines, as snarkjs's bfj does)."""
    import json

    from cuzk.json_text import dumps_like_snarkjs, loads

    assert loads(json.dumps(doc)) == doc and loads(f" {json.dumps(doc)}\n".encode()) == doc
    text = dumps_like_snarkjs(doc)
    assert json.loads(text) == doc
    if "[]" not in json.dumps(doc) and "{}" not in json.dumps(doc):
        assert text == json.dumps(doc, indent=1, ensure_ascii=False)
    assert dumps_like_snarkjs([]) == "[\n]" and dumps_like_snarkjs({"a": []}) == '{\n "a": [\n ]\n}'


@pytest.mark.parametrize("text", ["", "NaN", "[1] x", '{"a": }', b"\xff"])
def test_json_text_refuses_what_is_not_json(text):
    from cuzk.json_text import loads

    with pytest.raises(ValueError):
        loads(text)
