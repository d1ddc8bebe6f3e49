"""The daemon proves from the circuit's input: a key registered with its .wasm takes input JSON over gRPC and over
HTTP (POST /v1/prove/{key}); every bad request is answered with its own error and status, and the daemon keeps serving."""

from __future__ import annotations

import http.client
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_json, snarkjs_verify
from cuzk.client import DaemonError
from cuzk.engine import Engine, EngineConfig
from cuzk.curves import BN254
from cuzk.engine.admission import JobTooLarge
from cuzk.engine.witnesses import WitnessCalculators
from cuzk.formats.wtns import wtns_bytes
from cuzk.memory.budget import MemoryBudget
from cuzk.server.http_prove import HttpProver
from cuzk.witness import InputError, WitnessCalculator
from test_daemon import REPO, TOKEN, DaemonProcess
from test_witness import BUS_WASM, CHECKS_WASM, FIXTURES, GRID, REJECTED

GOOD = {"grid": GRID, "x": 2}
GOOD_PUBLIC = ["11", "2"]  # sum = 2+1+1+1+1+1 + x², then x


@pytest.fixture(scope="module")
def checks_key(tmp_path_factory) -> tuple[Path, Path]:
    """A test-only key for the fixture circuit: (zkey, verification key)."""
    from cuzk.cli import main as cli_main

    d = tmp_path_factory.mktemp("checks")
    zkey, vkey = d / "checks.zkey", d / "verification_key.json"
    assert cli_main(["setup", str(FIXTURES / "checks.r1cs"), str(zkey), "--vkey", str(vkey), "--backend", "cpu"]) == 0
    return zkey, vkey


@pytest.fixture(scope="module")
def daemon(checks_key):
    zkey, _ = checks_key
    yield from DaemonProcess({"checks": zkey, "nowasm": zkey}, tcp=True, engine={"wasm": {"checks": str(CHECKS_WASM)}}).serving()


def check_proof(proof: dict, public: list[str], vkey: Path, tmp_path: Path) -> None:
    (tmp_path / "proof.json").write_text(json.dumps(proof))
    (tmp_path / "public.json").write_text(json.dumps(public))
    assert public == GOOD_PUBLIC
    assert snarkjs_verify(vkey, tmp_path / "public.json", tmp_path / "proof.json")


# -- gRPC -------------------------------------------------------------------------------------------

def test_grpc_input_is_proved_and_verifies_with_snarkjs(daemon, checks_key, tmp_path):
    with daemon.client() as client:
        result = client.prove("checks", input=GOOD, timeout=120)
    check_proof(result.proof, result.public_signals, checks_key[1], tmp_path)


def test_grpc_bad_inputs_are_the_requests_errors_and_the_daemon_keeps_serving(daemon, checks_key, tmp_path):
    with daemon.client() as client:
        for name in ("missing signal", "unknown signal", "too many values", "fraction", "circom assert"):
            doc, message = REJECTED[name]
            with pytest.raises(DaemonError) as exc:
                client.submit("checks", input=doc)
            assert exc.value.code == "INVALID_ARGUMENT" and message in str(exc.value), name
        with pytest.raises(DaemonError, match="not JSON") as exc:
            client.submit("checks", input='{"x": ')
        with pytest.raises(DaemonError, match="key 'nowasm' has no witness generator") as exc:
            client.submit("nowasm", input=GOOD)
        assert exc.value.code == "INVALID_ARGUMENT"
        for both_or_neither in ({}, {"witness": b"wtns", "input": GOOD}):
            with pytest.raises(ValueError, match="give a witness or the circuit's input"):
                client.submit("checks", **both_or_neither)
        with pytest.raises(DaemonError) as exc:  # an error quoting 100 KB overflowed the trailers: "Stream removed"
            client.submit("checks", input={"grid": GRID, "x": "y" * 100_000})
        assert exc.value.code == "INVALID_ARGUMENT" and str(exc.value).endswith("more characters)")
        assert "input x: 'yyy" in str(exc.value)
        result = client.prove("checks", input=json.dumps(GOOD), timeout=120)  # JSON text is taken as is
    check_proof(result.proof, result.public_signals, checks_key[1], tmp_path)


# -- HTTP -------------------------------------------------------------------------------------------

def post(daemon: DaemonProcess, key: str, body: bytes, *, token: str | None = TOKEN,
         content_type: str = "application/json", length: int | None = None) -> tuple[int, dict, dict]:
    """POST /v1/prove/<key>; (status, JSON body, headers)."""
    host, port = daemon.http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.putrequest("POST", f"/v1/prove/{key}")
        conn.putheader("Content-Type", content_type)
        conn.putheader("Content-Length", str(len(body) if length is None else length))
        if token is not None:
            conn.putheader("Authorization", f"Bearer {token}")
        conn.endheaders(body if length is None else b"")
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), dict(resp.getheaders())
    finally:
        conn.close()


def test_http_methods_and_a_silent_client(monkeypatch):
    """Methods the endpoints do not take get a 405 in the endpoints' JSON form (http.server's own answer was an HTML
    501 page), HEAD answers as GET without a body, and a client that announces a body and sends nothing is dropped
    after the read timeout rather than holding its thread for ever."""
    import socket

    from cuzk.server import http as http_server

    monkeypatch.setattr(http_server, "READ_TIMEOUT_S", 0.5)
    prover = HttpProver(None, TOKEN, 1000)  # the refusals and the body's read come before the engine is asked
    server = http_server.StatusHttpServer("127.0.0.1:0", lambda: "", lambda: {}, lambda: "serving", prover).start()
    try:
        host, port = server.address.rsplit(":", 1)
        for method, path, allowed in [("PUT", "/v1/prove/k", "POST"), ("DELETE", "/status", "GET"), ("PATCH", "/", "GET")]:
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request(method, path, body=b"x")
            resp = conn.getresponse()
            assert (resp.status, resp.getheader("Allow")) == (405, allowed)
            assert json.loads(resp.read()) == {"error": f"method {method} not allowed here: {allowed} {path}"}
            conn.close()
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("HEAD", "/healthz")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Length") == "8" and resp.read() == b""
        conn.close()
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.sendall(f"POST /v1/prove/k HTTP/1.1\r\nContent-Length: 100\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        assert sock.recv(1) == b""  # the server closed it (a read of 0 bytes), before this test's own 30 s timeout
        sock.close()
    finally:
        server.stop()


def test_http_input_proof_is_snarkjs_layout_and_verifies(daemon, checks_key, tmp_path):
    status, body, headers = post(daemon, "checks", json.dumps({"input": GOOD}).encode())
    assert status == 200, body
    assert list(body) == ["proof", "publicSignals"] and headers["X-Cuzk-Job-Id"]
    assert body["proof"]["protocol"] == "groth16" and body["proof"]["curve"] == "bn128"
    check_proof(body["proof"], body["publicSignals"], checks_key[1], tmp_path)


def test_http_witness_upload(daemon, checks_key, tmp_path):
    calculator = WitnessCalculator(CHECKS_WASM)
    witness = wtns_bytes(calculator.curve, calculator.calculate(GOOD))
    status, body, _ = post(daemon, "nowasm", witness, content_type="application/octet-stream")
    assert status == 200, body
    check_proof(body["proof"], body["publicSignals"], checks_key[1], tmp_path)


def test_http_upload_that_asks_to_continue_is_invited_at_once_and_a_refused_one_is_not(daemon, checks_key, tmp_path):
    """A client sending ``Expect: 100-continue`` (curl does, above 1 MiB) gets the interim answer before it sends its
    body — without it curl waits a second per proof — and a request refused on its headers gets its refusal instead."""
    import socket

    calculator = WitnessCalculator(CHECKS_WASM)
    witness = wtns_bytes(calculator.curve, calculator.calculate(GOOD))
    host, port = daemon.http.rsplit(":", 1)

    def ask(token: str) -> tuple[bytes, socket.socket]:
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.sendall(f"POST /v1/prove/nowasm HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                     f"Content-Length: {len(witness)}\r\nAuthorization: Bearer {token}\r\nExpect: 100-continue\r\n\r\n".encode())
        return sock.recv(64), sock  # what the daemon says before any body byte was sent

    first, sock = ask(TOKEN)
    assert first == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.sendall(witness)
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    body = json.loads(answer.read())
    assert answer.status == 200, body
    check_proof(body["proof"], body["publicSignals"], checks_key[1], tmp_path)
    refused, sock = ask("wrong token")
    sock.close()
    assert refused.startswith(b"HTTP/1.0 401")


@pytest.mark.parametrize("case, key, body, status, message", [
    ("unknown key", "nope", {"input": GOOD}, 404, "nope"),
    ("missing signal", "checks", {"input": REJECTED["missing signal"][0]}, 400, REJECTED["missing signal"][1]),
    ("circom assert", "checks", {"input": REJECTED["circom assert"][0]}, 400, "assert failed: Error in template Checks_0"),
    ("no input field", "checks", {"inputs": GOOD}, 400, "unknown field(s) 'inputs'"),
    ("nested too deeply", "checks", {"input": {"grid": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}, 400,
     "input grid: arrays nested more than 64 deep"),
    ("not an object", "checks", [GOOD], 400, 'request body: must be a JSON object {"input": {<signal>: <value>, ...}}, not a JSON array'),
    ("key without wasm", "nowasm", {"input": GOOD}, 400, "has no witness generator"),
    ("a value past Python's 4300 digits", "checks", {"input": {"grid": GRID, "x": "9" * 5000}}, 400,
     "input x: a number of 5000 digits is outside the circuit's field"),  # was a 500: int()'s plain ValueError
])
def test_http_bad_requests_get_their_status(daemon, case, key, body, status, message):
    got, answer, _ = post(daemon, key, json.dumps(body).encode())
    assert got == status and message in answer["error"], (case, answer)


def test_http_refusals_before_the_body_is_read(daemon):
    body = json.dumps({"input": GOOD}).encode()
    assert post(daemon, "checks", body, token=None)[:2] == (401, {"error": "missing or wrong bearer token (send 'Authorization: Bearer <token>')"})
    assert post(daemon, "checks", body, token="x" * 32)[0] == 401
    status, answer, _ = post(daemon, "checks", b"", length=1 << 40)
    assert status == 413 and "max_request" in answer["error"]
    status, answer, _ = post(daemon, "checks", b"not json")
    assert status == 400 and answer["error"].startswith("request body: not JSON")
    assert post(daemon, "checks", json.dumps({"input": GOOD}).encode())[0] == 200  # still serving


# -- the engine's answers that a live daemon cannot be made to give on cue -----------------------------

def test_http_prover_answers_507_for_a_key_that_can_never_fit_and_503_once_stopping(checks_key, tmp_path):
    zkey, _ = checks_key
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False, key_idle_evict_s=0),
                    budget=MemoryBudget(1 << 12))  # less than the key itself
    engine.register_key("checks", zkey, wasm_path=CHECKS_WASM)
    engine.start()
    prover = HttpProver(engine, TOKEN, 1 << 20)
    body = json.dumps({"input": GOOD}).encode()
    try:
        answer = prover.prove("checks", "application/json", body, {})
        assert answer.status == 507 and b"never run here" in answer.body
    finally:
        engine.stop()
    assert prover.prove("checks", "application/json", body, {}).status == 503


def test_the_parsed_input_is_counted_in_the_budget_before_the_text_is_parsed(checks_key, tmp_path):
    """A JSON body is parsed into Python objects up to ~12 times its size: at max_request (256 MiB) gigabytes the
    budget never saw, on a machine whose limit it was sized to. Its parse is reserved first: a body that could never
    fit is a 507 (gRPC's input_json likewise JobTooLarge), one that fits is proved as before."""
    from cuzk.engine.witnesses import PARSED_BYTES_PER_TEXT_BYTE

    calculator = WitnessCalculator(CHECKS_WASM)
    headroom = 8 << 20  # above the proof's own working memory (~3 MiB), so the key fits and the small input proves
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False, key_tier="warm"),
                    budget=MemoryBudget(calculator.calculation_bytes + headroom))
    engine.register_key("checks", checks_key[0], wasm_path=CHECKS_WASM)
    prover = HttpProver(engine, TOKEN, 1 << 24)
    small = json.dumps({"input": GOOD}).encode()
    large = small + b" " * (headroom // PARSED_BYTES_PER_TEXT_BYTE + 1)  # still valid JSON
    try:
        answer = prover.prove("checks", "application/json", large, {"timeout_s": ["0.001"]})
        assert answer.status == 507 and f"from {len(large)} bytes of input".encode() in answer.body, answer.body
        with pytest.raises(JobTooLarge, match=f"from {len(large) - 1} bytes of input"):
            engine.submit_input("checks", large.decode()[1:])  # gRPC's input_json: text, parsed in the engine
        assert prover.prove("checks", "application/json", small, {"timeout_s": ["0.001"]}).status in (200, 504)
        assert engine.budget.snapshot()["by_category"]["transient"]["bytes"] == 0
    finally:
        engine.stop()


def test_a_wasm_of_another_circuit_is_refused_at_registration(checks_key, tmp_path):
    from conftest import corpus_dir

    toy = corpus_dir("toy_multiplier")
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
    try:
        with pytest.raises(ValueError, match="not this key's circuit"):
            engine.register_key("checks", checks_key[0], wasm_path=toy / "circuit.wasm")
        assert "checks" not in engine.keys.names()
    finally:
        engine.stop()


def test_engine_input_errors_are_input_errors(checks_key, tmp_path):
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
    engine.register_key("checks", checks_key[0], wasm_path=CHECKS_WASM)
    try:
        with pytest.raises(InputError, match="line: 16"):
            engine.submit_input("checks", REJECTED["circom assert"][0])
        assert engine.list_jobs() == []
    finally:
        engine.stop()


def test_the_witness_calculation_holds_a_reservation_while_it_runs(checks_key, tmp_path):
    calculator = WitnessCalculator(CHECKS_WASM)
    small = Engine(EngineConfig(data_dir=tmp_path / "small", backend="cpu", reconcile=False),
                   budget=MemoryBudget(calculator.calculation_bytes - 1))
    small.register_key("checks", checks_key[0], wasm_path=CHECKS_WASM)
    try:
        with pytest.raises(JobTooLarge, match="calculating a witness of 'checks'.*never run here"):
            small.submit_input("checks", GOOD)
    finally:
        small.stop()
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
    engine.register_key("checks", checks_key[0], wasm_path=CHECKS_WASM)
    try:
        engine.submit_input("checks", GOOD)  # not started: the job stays queued, the calculation is over
        assert engine.budget.snapshot()["by_category"]["transient"]["bytes"] == 0
    finally:
        engine.stop()


def test_cli_fullprove_with_daemon_calculates_here_and_proves_there(daemon, checks_key, tmp_path):
    from cuzk.cli import main as cli_main

    inp, proof, public = tmp_path / "input.json", tmp_path / "p.json", tmp_path / "pub.json"
    inp.write_text(json.dumps(GOOD))
    assert cli_main(["fullprove", str(inp), str(CHECKS_WASM), "nowasm", str(proof), str(public), "--daemon", f"unix:{daemon.socket}"]) == 0
    assert load_json(public) == GOOD_PUBLIC
    assert snarkjs_verify(checks_key[1], public, proof)


def test_a_plain_fullprove_goes_to_the_local_daemon_unless_told_otherwise(daemon, checks_key, tmp_path, monkeypatch):
    """As a plain `cuzk prove`: the witness is calculated here and proved by the daemon on this machine's socket;
    --local (or --backend, --no-verify) proves in this process."""
    from cuzk.cli import _main

    monkeypatch.setenv("CUZK_DAEMON", f"unix:{daemon.socket}")  # where `cuzk status` would look
    inp, proof, public = tmp_path / "input.json", tmp_path / "p.json", tmp_path / "pub.json"
    inp.write_text(json.dumps(GOOD))
    files = [str(inp), str(CHECKS_WASM), str(checks_key[0]), str(proof), str(public)]
    for flags, on_daemon in (([], True), (["--local"], False), (["--no-verify"], False)):
        public.unlink(missing_ok=True)
        code, args = _main(["fullprove", *flags, *files])
        assert (code, args.answered_by_daemon) == (0, on_daemon), flags
        assert load_json(public) == GOOD_PUBLIC and snarkjs_verify(checks_key[1], public, proof), flags


def test_a_fullprove_the_daemon_answers_calculates_the_witness_without_the_prover(daemon, checks_key, tmp_path):
    """The client calculates the witness (numpy, wasmtime) and hands the daemon its bytes, which the daemon's intake
    checks: it imports neither numba nor gRPC nor the prover, nor argparse for a plain command line."""
    inp, proof, public = tmp_path / "input.json", tmp_path / "p.json", tmp_path / "pub.json"
    inp.write_text(json.dumps(GOOD))
    done = subprocess.run([sys.executable, "-X", "importtime", str(REPO / "bin" / "cuzk"), "fullprove", str(inp), str(CHECKS_WASM),
                           str(checks_key[0]), str(proof), str(public)],
                          env={**os.environ, "CUZK_DAEMON": f"unix:{daemon.socket}"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert {"cuzk.local_client", "wasmtime"} <= imported
    heavy = sorted(m for m in imported if m.split(".")[0] in ("numba", "llvmlite", "grpc", "google", "argparse")
                   or m.startswith(("cuzk.prover", "cuzk.backends", "cuzk.engine", "cuzk.ff", "cuzk.formats.r1cs",
                                    "cuzk.formats.zkey")))
    assert heavy == []
    assert load_json(public) == GOOD_PUBLIC and snarkjs_verify(checks_key[1], public, proof)


def test_compiled_circuits_are_cached_in_the_data_directory(daemon, tmp_path):
    """wasmtime's module cache lives under the data directory (the daemon's; the CLI's, $CUZK_DATA_DIR), where a
    container keeps its state, not under $XDG_CACHE_HOME; its settings file sits beside it, out of wasmtime's clean-up."""
    assert list((daemon.data_dir / "wasm-cache" / "modules").iterdir())  # the daemon compiled the key's .wasm at start
    data = tmp_path / "data"
    inp = tmp_path / "input.json"
    inp.write_text(json.dumps(GOOD))
    env = {**os.environ, "CUZK_DATA_DIR": str(data), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    for _ in range(2):
        done = subprocess.run([sys.executable, str(REPO / "bin" / "cuzk"), "wtns", "calculate", str(CHECKS_WASM), str(inp),
                               str(tmp_path / "w.wtns")], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    assert f'directory = "{data / "wasm-cache"}"' in (data / "wasm-cache.toml").read_text()
    assert list((data / "wasm-cache" / "modules").iterdir()) and not (tmp_path / "xdg").exists()


def test_the_daemon_logs_a_circuits_log_lines_at_debug_only(caplog):
    """A circuit's log() lines, which the CLI prints, go to the daemon's log with the key's name at DEBUG, and are not
    even assembled otherwise."""
    calculators = WitnessCalculators(MemoryBudget(1 << 30), workers=1)
    calculators.set("bus", WitnessCalculator(BUS_WASM))
    inputs = {"p": [{"x": 3, "y": 5}, {"x": 7, "y": 11}]}
    try:
        with caplog.at_level(logging.INFO, logger="cuzk.witness"):
            calculators.wtns("bus", inputs)
        assert caplog.records == []
        with caplog.at_level(logging.DEBUG, logger="cuzk.witness"):
            calculators.wtns("bus", inputs)
        assert [r.getMessage() for r in caplog.records] == [f"bus: r = 21 236 p.x - q.x = {BN254.r - 4}"]
    finally:
        calculators.close()


def test_a_keys_wasm_is_remembered_across_restarts(checks_key, tmp_path):
    config = EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False)
    first = Engine(config, budget=MemoryBudget(1 << 30))
    first.register_key("checks", checks_key[0], wasm_path=CHECKS_WASM)
    first.stop()
    again = Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
    try:
        assert again.submit_input("checks", GOOD)  # journaled: the .wasm came back with the key
    finally:
        again.stop()


def test_http_request_id_and_priority(daemon):
    body = json.dumps({"input": GOOD, "priority": "high", "request_id": "http-once"}).encode()
    first, second = post(daemon, "checks", body), post(daemon, "checks", body)
    assert first[0] == second[0] == 200 and first[2]["X-Cuzk-Job-Id"] == second[2]["X-Cuzk-Job-Id"]
    status, answer, _ = post(daemon, "checks", json.dumps({"input": GOOD, "priority": "urgent"}).encode())
    assert status == 400 and "unknown priority 'urgent'" in answer["error"]


def test_http_timeout_without_bound(daemon):
    """A wait past threading.TIMEOUT_MAX (inf, 1e308) overflowed the engine's wait: a 500 for a positive number."""
    for timeout in ("inf", "1e308"):
        status, answer, _ = post(daemon, f"checks?timeout_s={timeout}", json.dumps({"input": GOOD}).encode())
        assert status == 200, answer
