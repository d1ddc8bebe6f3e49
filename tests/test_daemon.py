"""The daemon end to end: `cuzk daemon` (supervisor + engine process) driven over gRPC, HTTP and the CLI.

One daemon serves the whole module (starting an engine process costs seconds); it listens
on a unix socket and on TCP with a token, with a small request limit so the oversized-payload
case is cheap. Every proof it returns is verified with snarkjs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from conftest import CORPUS, REPO, SNARKJS, load_json, snarkjs_available, wait_for
from cuzk.client import AwaitTimeout, Client, DaemonError, DaemonUnavailable, JobCancelled, RequestTooLarge
from cuzk.engine.supervisor import SupervisorState, read_json
from cuzk.memory.units import MiB
from cuzk.engine.jobs import JobError
from cuzk.client_base import WITNESS_PATH_REFUSED
from cuzk.proto import priority_from_pb
from cuzk.proto import cuzk_pb2 as pb
from cuzk.proto import cuzk_pb2_grpc as pb_grpc
from cuzk.server.http_prove import answer_for
from cuzk.server.service import status_for
from cuzk.witness.inputs import InputError

TOKEN = "test-token-" + "x" * 16
MAX_REQUEST = 4 * MiB
PRIORITY_RANK = {"LOW": 0, "NORMAL": 1, "HIGH": 2, "CRITICAL": 3}


@dataclass(frozen=True)
class Circuit:
    name: str  # the key's name in the daemon
    zkey: Path
    witness: Path
    vkey: Path
    public: list[str]

    def witness_bytes(self) -> bytes:
        return self.witness.read_bytes()


# Roles the tests use → the corpus circuit that plays it; the project's own synthetic circuit of a
# similar size plays it where the corpus is absent.
ROLES = {"small": ("toy_multiplier", 60), "medium": ("poseidon_chain_16", 3000), "large": ("sha256_32B", 30000)}


def corpus_circuit(name: str) -> Circuit | None:
    d = CORPUS / name
    if not (d / "circuit.zkey").exists():
        return None
    return Circuit(name, d / "circuit.zkey", d / "witness.wtns", d / "verification_key.json", load_json(d / "public.json"))


def synthetic_circuit(out_dir: Path, n_constraints: int, curve: str = "bn254") -> Circuit:
    """A circuit the project makes itself: synthetic constraints over ``curve``, a test-only key from cuzk's own setup."""
    from cuzk.circuits.synthetic import synthesize, write_synthetic
    from cuzk.curves import curve_by_name
    from cuzk.prover.setup import setup

    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed (it exports the verification key of a generated circuit)")
    made = synthesize(curve_by_name(curve), n_constraints, n_public=2, seed=n_constraints)
    r1cs, wtns = write_synthetic(out_dir, made)
    zkey, vkey = out_dir / "circuit.zkey", out_dir / "verification_key.json"
    setup(r1cs, zkey)
    subprocess.run([str(SNARKJS), "zkey", "export", "verificationkey", str(zkey), str(vkey)], check=True, capture_output=True, timeout=300)
    name = f"synthetic_{n_constraints}" if curve == "bn254" else f"synthetic_{curve.replace('-', '')}_{n_constraints}"
    return Circuit(name, zkey, wtns, vkey, [str(v) for v in made.public_signals])


def circuits_for(out_dir: Path, roles=("small", "medium")) -> dict[str, Circuit]:
    """Corpus circuits by role, or the project's own synthetic ones where the corpus is absent."""
    found = {role: corpus_circuit(ROLES[role][0]) for role in roles}
    if any(c is None for c in found.values()):
        found = {role: synthetic_circuit(out_dir / role, ROLES[role][1]) for role in roles}
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml(value) -> str:
    """A TOML value: JSON's spelling for scalars and arrays, an inline table for a dict (``[engine] wasm``)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


class DaemonProcess:
    """`cuzk daemon` in a child process (optionally inside a memory cgroup), stopped with SIGTERM."""

    def __init__(self, keys: dict[str, Path], *, engine: dict | None = None, budget: str | None = None, tcp: bool = False,
                 max_request: int = MAX_REQUEST, supervisor: dict | None = None, cgroup=None, budget_over_limit: bool = False,
                 tls: tuple[Path, Path] | None = None):
        # Short path: a unix socket path must fit in 107 bytes.
        self.data_dir = Path(tempfile.mkdtemp(prefix="cz", dir="/tmp"))
        self.socket = self.data_dir / "cuzk.sock"
        self.tcp = f"127.0.0.1:{free_port()}" if tcp else None
        listen = [f"unix:{self.socket}"] + ([self.tcp] if self.tcp else [])
        lines = [f'data_dir = "{self.data_dir}"', f"listen = {json.dumps(listen)}", 'http = "127.0.0.1:0"',
                 f"max_request = {max_request}", f'token = "{TOKEN}"', 'log_level = "info"']
        if budget:
            lines.append(f'budget = "{budget}"')
        if tls:  # (certificate chain, private key) for the TCP listener
            lines += [f'tls_cert = "{tls[0]}"', f'tls_key = "{tls[1]}"']
        lines.append("[keys]")
        lines += [f'{name} = "{path}"' for name, path in keys.items()]
        lines.append("[engine]")
        lines += [f"{k} = {_toml(v)}" for k, v in {"backend": "cpu", **(engine or {})}.items()]
        lines.append("[supervisor]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in {"backoff_initial_s": 0.1, "backoff_max_s": 1.0, **(supervisor or {})}.items()]
        self.config = self.data_dir / "cuzk.toml"
        self.config.write_text("\n".join(lines) + "\n")
        self.log = self.data_dir / "daemon.log"
        argv = [sys.executable, "-m", "cuzk.cli", "daemon", "--config", str(self.config)]
        if budget_over_limit:  # trust the budget over the (lower) cgroup limit: how the OOM tests force a kill
            argv.append("--budget-over-limit")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUZK_")}
        with open(self.log, "wb") as log:
            popen = cgroup.popen if cgroup is not None else subprocess.Popen
            self.proc = popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.wait_ready()

    def state(self) -> SupervisorState:
        return SupervisorState.load(self.data_dir)

    def engine_pid(self) -> int | None:
        return self.state().engine_pid

    def wait_ready(self, timeout: float = 120.0, not_pid: int | None = None) -> dict:
        """Until the engine process (a new one, if ``not_pid``) listens."""
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log_text()}")
            info = read_json(self.data_dir / "run" / "daemon.json")
            return info if info and info["pid"] != not_pid and info["pid"] == self.engine_pid() else None

        self.info = wait_for(ready, timeout, "the daemon to listen")
        return self.info

    @property
    def http(self) -> str:
        return self.info["http"]

    def client(self, **kwargs) -> Client:
        return Client(f"unix:{self.socket}", **kwargs)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"daemon did not stop on SIGTERM:\n{self.log_text()}")
        return self.proc.returncode

    def cleanup(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def serving(self):
        """A module fixture's body: yield this daemon, then check it stops cleanly on SIGTERM, and remove its files."""
        try:
            yield self
            assert self.stop() == 0, self.log_text()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.cleanup()


# One node process verifies a whole batch: node's start-up, not the pairing, is most of a verify.
VERIFY_MANY_JS = """
const snarkjs = require(process.argv[1]);
const fs = require("fs");
const read = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
(async () => {
  const out = [];
  for (const [vkey, pub, proof] of JSON.parse(fs.readFileSync(0, "utf8"))) {
    out.push(await snarkjs.groth16.verify(read(vkey), read(pub), read(proof)));
  }
  console.log(JSON.stringify(out));
  process.exit(0);
})();
"""


def snarkjs_verify_all(items: list[tuple[Path, Path, Path]]) -> list[bool]:
    """snarkjs's verdict on each (vkey, public, proof), in one node process."""
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed (npm install --prefix tests/oracle)")
    run = subprocess.run(["node", "-e", VERIFY_MANY_JS, str(SNARKJS.parents[1] / "snarkjs")],
                         input=json.dumps([[str(p) for p in item] for item in items]), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def check_proofs(pairs: list, tmp_path: Path) -> None:
    """Each (result, circuit): DONE, its public signals right, and its proof (written as snarkjs writes it) accepted by snarkjs."""
    items = []
    for result, circuit in pairs:
        assert result.state == "DONE", result.error
        assert result.public_signals == circuit.public
        tag = uuid.uuid4().hex[:8]
        proof, public = tmp_path / f"proof-{tag}.json", tmp_path / f"public-{tag}.json"
        result.write(proof, public)
        items.append((circuit.vkey, public, proof))
    verdicts = snarkjs_verify_all(items)
    rejected = [pairs[i][0].job_id for i, ok in enumerate(verdicts) if ok is not True]
    assert not rejected, f"snarkjs rejects the daemon's proofs of jobs {rejected}"


def check_proof(result, circuit: Circuit, tmp_path: Path) -> None:
    check_proofs([(result, circuit)], tmp_path)


# -- the module's daemon ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def circuits(tmp_path_factory) -> dict[str, Circuit]:
    return circuits_for(tmp_path_factory.mktemp("circuits"), ("small", "medium", "large"))


@pytest.fixture(scope="module")
def daemon(circuits):
    yield from DaemonProcess({c.name: c.zkey for c in circuits.values()}, tcp=True).serving()


@pytest.fixture
def client(daemon):
    with daemon.client() as c:
        yield c


@pytest.fixture
def blocker(circuits):
    """The largest circuit: a job that keeps the engine busy while others queue behind it."""
    return circuits["large"]


def job_state(client: Client, job_id: str) -> str:
    return next(j.state for j in client.list_jobs() if j.job_id == job_id)


# -- proofs ---------------------------------------------------------------------------------------

def test_concurrent_mixed_jobs_all_verify_with_snarkjs(client, circuits, tmp_path):
    mix = [circuits["small"], circuits["medium"]] * 3
    with ThreadPoolExecutor(len(mix)) as pool:
        results = list(pool.map(lambda c: client.prove(c.name, c.witness_bytes(), timeout=300), mix))
    assert len({r.job_id for r in results}) == len(mix)
    assert [r.circuit for r in results] == [c.name for c in mix]
    assert all({"synthesize", "msm"} <= set(r.timings) for r in results)
    check_proofs(list(zip(results, mix)), tmp_path)


def test_key_by_path_and_cli_prove_with_daemon_flag(daemon, circuits, tmp_path):
    from cuzk.cli import main as cli_main

    toy, medium = circuits["small"], circuits["medium"]
    out = [(tmp_path / f"proof{i}.json", tmp_path / f"public{i}.json") for i in range(2)]
    # Same positional arguments as the local prove: the zkey is a path here ...
    assert cli_main(["prove", "--daemon", f"unix:{daemon.socket}", str(toy.zkey), str(toy.witness), *map(str, out[0])]) == 0
    # ... or a registered name.
    assert cli_main(["prove", "--daemon", str(daemon.socket), medium.name, str(medium.witness), *map(str, out[1])]) == 0
    assert snarkjs_verify_all([(toy.vkey, out[0][1], out[0][0]), (medium.vkey, out[1][1], out[1][0])]) == [True, True]
    assert load_json(out[1][1]) == medium.public


def test_cli_submit_await_status_keys_top(daemon, circuits, tmp_path, capsys):
    from cuzk.cli import main as cli_main

    toy = circuits["small"]
    addr = ["--daemon", f"unix:{daemon.socket}"]
    assert cli_main(["submit", *addr, "--priority", "high", "--request-id", "cli-1", toy.name, str(toy.witness)]) == 0
    job_id = capsys.readouterr().out.strip()
    proof, public = tmp_path / "p.json", tmp_path / "pub.json"
    assert cli_main(["await", *addr, "--timeout", "120", job_id, str(proof), str(public)]) == 0
    assert snarkjs_verify_all([(toy.vkey, public, proof)]) == [True]

    assert cli_main(["status", *addr, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert {"budget", "keys", "jobs", "workers", "reconciler", "supervisor", "server"} <= set(status)
    assert status["supervisor"]["engine_pid"] == daemon.engine_pid()

    medium = circuits["medium"]
    assert cli_main(["keys", *addr, "preload", medium.name]) == 0
    assert f"{medium.name}: hot" in capsys.readouterr().out
    assert cli_main(["keys", *addr]) == 0
    listing = capsys.readouterr().out
    assert toy.name in listing and medium.name in listing
    assert cli_main(["top", *addr, "--once"]) == 0
    frame = capsys.readouterr().out
    assert "budget" in frame and "workers" in frame and job_id[:12] in frame
    assert cli_main(["cancel", *addr, job_id]) == 0
    assert "already finished" in capsys.readouterr().out


def test_cli_jobs_json_lists_what_the_client_lists(daemon, client, circuits, capsys):
    from cuzk.cli import main as cli_main

    toy = circuits["small"]
    done = client.prove(toy.name, toy.witness_bytes(), timeout=120)
    assert cli_main(["jobs", "--json", "--daemon", f"unix:{daemon.socket}", "--limit", "5"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [j["job_id"] for j in listed] == [j.job_id for j in client.list_jobs(limit=5)]
    mine = next(j for j in listed if j["job_id"] == done.job_id)
    assert (mine["state"], mine["circuit"], mine["attempts"]) == ("DONE", toy.name, 1) and mine["finished_at"] >= mine["started_at"]


def test_a_plain_prove_goes_to_the_local_daemon_unless_told_otherwise(daemon, client, circuits, tmp_path, monkeypatch):
    from cuzk.cli import main as cli_main

    toy = circuits["small"]
    monkeypatch.setenv("CUZK_DAEMON", f"unix:{daemon.socket}")  # where `cuzk status` would look
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"

    def jobs() -> int:
        return len(client.list_jobs())

    before = jobs()
    assert cli_main(["prove", str(toy.zkey), str(toy.witness), str(proof), str(public)]) == 0
    assert jobs() == before + 1 and load_json(public) == toy.public
    assert snarkjs_verify_all([(toy.vkey, public, proof)]) == [True]
    for local in (["--local"], ["--backend", "cpu"], ["--no-verify"]):  # in this process: the daemon sees no job
        assert cli_main(["prove", *local, str(toy.zkey), str(toy.witness), str(proof), str(public)]) == 0
    assert jobs() == before + 1 and load_json(public) == toy.public


def test_a_prove_the_daemon_makes_imports_no_prover_in_the_client(daemon, client, circuits, tmp_path):
    """The `cuzk` command (bin/cuzk) of a `cuzk prove` the daemon answers loads neither numpy nor numba nor the
    prover, nor (through the local HTTP socket) grpc or protobuf, nor http.client (its email parser and ssl), nor
    tomllib without a config file, nor argparse, dataclasses, typing or pathlib (a plain command line, no config file),
    nor the socket module's wrappers or urllib.parse (plain paths), nor json or re (and so no enum, functools or
    collections): a one-shot call through a daemon pays Python's start-up, not the JIT's or gRPC's."""
    toy = circuits["small"]
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"
    before = len(client.list_jobs())
    done = subprocess.run([sys.executable, "-X", "importtime", str(REPO / "bin" / "cuzk"), "prove", str(toy.zkey), str(toy.witness),
                           str(proof), str(public)],
                          env={**os.environ, "CUZK_DAEMON": f"unix:{daemon.socket}"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "cuzk.local_client" in imported
    heavy = sorted(m for m in imported if m.split(".")[0] in ("numpy", "numba", "llvmlite", "grpc", "google", "email", "ssl",
                                                              "tomllib", "argparse", "dataclasses", "typing", "pathlib",
                                                              "json", "re", "enum", "functools", "collections")
                   or m in ("http.client", "socket", "selectors", "urllib.parse")
                   or m.startswith(("cuzk.prover", "cuzk.backends", "cuzk.formats", "cuzk.engine.core")))
    assert heavy == []
    assert len(client.list_jobs()) == before + 1 and load_json(public) == toy.public


def _running(pid: int) -> bool:
    """The process exists and is no zombie (a daemon whose parent exited is reaped by whoever adopted it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_keep_daemon_starts_one_daemon_that_later_proves_use_and_that_stops_when_idle(circuits, tmp_path):
    toy = circuits["small"]
    data = Path(tempfile.mkdtemp(prefix="cz", dir="/tmp"))  # short: a unix socket path must fit in 107 bytes
    config = data / "cuzk.toml"
    config.write_text(f'data_dir = "{data}"\nhttp = "127.0.0.1:0"\n[engine]\nbackend = "cpu"\n')
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CUZK_")}, "CUZK_CONFIG": str(config)}

    def prove(tag: str) -> subprocess.Popen:
        argv = [sys.executable, "-m", "cuzk.cli", "prove", "--keep-daemon", "--idle-exit", "10", str(toy.zkey), str(toy.witness),
                str(tmp_path / f"proof-{tag}.json"), str(tmp_path / f"public-{tag}.json")]
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    supervisor = None
    try:
        first = [prove("a"), prove("b")]  # at once: one starts the daemon, the other finds it
        errs = [p.communicate(timeout=600)[1] for p in first]
        assert [p.returncode for p in first] == [0, 0], errs
        assert sum("started a cuzk daemon" in e for e in errs) == 1, errs
        supervisor = SupervisorState.load(data).supervisor_pid
        assert supervisor and _running(supervisor)
        later = prove("c")
        err = later.communicate(timeout=600)[1]
        assert later.returncode == 0 and "started" not in err, err
        assert SupervisorState.load(data).supervisor_pid == supervisor
        assert all(load_json(tmp_path / f"public-{tag}.json") == toy.public for tag in "abc")
        with Client(f"unix:{data / 'cuzk.sock'}") as c:
            assert [j.state for j in c.list_jobs()] == ["DONE"] * 3  # all three proofs were the daemon's
        wait_for(lambda: not _running(supervisor), 120, "the idle daemon to stop by itself")
        assert "(--idle-exit): stopping" in (data / "cuzk.log").read_text()
    finally:
        if supervisor and _running(supervisor):
            os.kill(supervisor, signal.SIGTERM)
            wait_for(lambda: not _running(supervisor), 60, "the daemon to stop")
        shutil.rmtree(data, ignore_errors=True)


def test_idempotent_resubmit(client, circuits):
    toy, poseidon = circuits["small"], circuits["medium"]
    request_id = f"idem-{uuid.uuid4().hex}"
    first, dup1 = client.submit(toy.name, toy.witness_bytes(), request_id=request_id)
    second, dup2 = client.submit(toy.name, toy.witness_bytes(), request_id=request_id)
    assert first == second and (dup1, dup2) == (False, True)
    assert client.await_proof(first, 120).state == "DONE"
    third, dup3 = client.submit(toy.name, toy.witness_bytes(), request_id=request_id)  # after it finished, too
    assert third == first and dup3
    assert sum(1 for j in client.list_jobs() if j.request_id == request_id) == 1
    with pytest.raises(DaemonError, match="already used") as info:
        client.submit(poseidon.name, poseidon.witness_bytes(), request_id=request_id)
    assert info.value.code == "ALREADY_EXISTS"


def test_priorities_respected(client, circuits, blocker):
    toy = circuits["small"]
    block_id, _ = client.submit(blocker.name, blocker.witness_bytes(), priority="critical")
    wait_for(lambda: job_state(client, block_id) != "QUEUED", 60, "the blocker to start")
    order = ["LOW", "NORMAL", "LOW", "HIGH", "NORMAL", "CRITICAL", "LOW", "HIGH"]
    ids = {client.submit(toy.name, toy.witness_bytes(), priority=p)[0]: p for p in order}
    all_queued = time.time()  # the journal's started_at is the engine's time.time() on this machine
    for job_id in ids:
        client.await_proof(job_id, 300)
    client.await_proof(block_id, 300)
    jobs = {j.job_id: j for j in client.list_jobs()}
    started = sorted(ids, key=lambda i: jobs[i].started_at)
    # A job taken while the others were still being submitted (the blocker left synthesis meanwhile) could only be
    # ordered against those already there; from the moment all were queued, strict priority order.
    behind = [i for i in started if jobs[i].started_at >= all_queued]
    if len(behind) < len(order) - 1:
        pytest.skip(f"only {len(behind)} of {len(order)} jobs were still queued once all were submitted (the blocker "
                    "finished first: machine too fast, or too loaded, for this check)")
    ranks = [PRIORITY_RANK[ids[i]] for i in behind]
    assert ranks == sorted(ranks, reverse=True), [ids[i] for i in started]
    for level in set(order):  # FIFO within a level
        same = [i for i in behind if ids[i] == level]
        assert same == sorted(same, key=lambda i: jobs[i].submitted_at)


def test_cancel_at_each_stage(client, circuits, blocker):
    toy = circuits["small"]
    # Queued: behind two blockers — one proving, one holding the synthesis slot that overlaps
    # it — so the low-priority job cannot have left the queue when it is cancelled.
    block_ids = [client.submit(blocker.name, blocker.witness_bytes(), priority="critical")[0] for _ in range(2)]
    wait_for(lambda: job_state(client, block_ids[0]) != "QUEUED", 60, "the first blocker to start")
    queued_id, _ = client.submit(toy.name, toy.witness_bytes(), priority="low")
    assert job_state(client, queued_id) == "QUEUED"
    assert client.cancel(queued_id) == (True, "CANCELLED")
    with pytest.raises(JobCancelled):
        client.await_proof(queued_id, 30)
    for block_id in block_ids:
        client.await_proof(block_id, 300)

    # Synthesizing and proving: caught in the act by polling the job's state.
    for stage in ("SYNTHESIZING", "PROVING"):
        job_id, _ = client.submit(blocker.name, blocker.witness_bytes())
        seen = wait_for(lambda: (s := job_state(client, job_id)) in (stage, "DONE") and s, 120, f"a job {stage.lower()}")
        if seen == "DONE":
            pytest.skip(f"{blocker.name} finished before it could be seen {stage.lower()}")
        cancelled, state = client.cancel(job_id)
        if not cancelled:  # it finished between the poll and the cancel
            assert state == "DONE"
            pytest.skip(f"{blocker.name} finished before it could be cancelled while {stage.lower()}")
        result = client.await_proof(job_id, 120, check=False)
        assert result.state == "CANCELLED", f"cancelled while {stage}: {result.state} {result.error}"

    # Done: nothing to cancel.
    done = client.prove(toy.name, toy.witness_bytes(), timeout=120)
    assert client.cancel(done.job_id) == (False, "DONE")
    # The daemon still proves after all that.
    assert client.prove(toy.name, toy.witness_bytes(), timeout=120).state == "DONE"


def test_await_timeout_then_result(client, circuits, blocker):
    job_id, _ = client.submit(blocker.name, blocker.witness_bytes())
    t0 = time.monotonic()
    with pytest.raises(AwaitTimeout, match="still"):
        client.await_proof(job_id, 0.05)
    assert time.monotonic() - t0 < 5
    assert client.await_proof(job_id, 300).state == "DONE"


# -- bad requests ---------------------------------------------------------------------------------

def test_bad_requests_get_clear_errors_and_the_daemon_keeps_serving(daemon, client, circuits, tmp_path):
    toy, poseidon = circuits["small"], circuits["medium"]

    with pytest.raises(DaemonError, match="unknown circuit key 'nope'") as info:
        client.submit("nope", toy.witness_bytes())
    assert info.value.code == "NOT_FOUND"
    with pytest.raises(DaemonError, match="no proving key file") as info:
        client.submit(tmp_path / "missing.zkey", toy.witness_bytes())
    assert info.value.code == "NOT_FOUND"

    with pytest.raises(DaemonError, match=r"wtns") as info:
        client.submit(toy.name, b"not a witness at all" * 10)
    assert info.value.code == "INVALID_ARGUMENT"
    assert str(info.value).startswith("witness: ") and "/witness/" not in str(info.value)  # not the journal's copy
    bad_file = tmp_path / "bad.wtns"
    bad_file.write_bytes(b"not a witness at all" * 10)
    with pytest.raises(DaemonError, match=re.escape(str(bad_file))) as info:  # sent as its path: named by it
        client.submit(toy.name, bad_file)
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(DaemonError, match="no witness"):
        client.submit(toy.name, b"")

    with pytest.raises(DaemonError, match="signals") as info:  # poseidon's witness for the toy key
        client.submit(toy.name, poseidon.witness_bytes())
    assert info.value.code == "INVALID_ARGUMENT"

    with pytest.raises(RequestTooLarge, match="larger than max"):
        client.submit(toy.name, b"\0" * (MAX_REQUEST + 1024))

    with pytest.raises(DaemonError, match="no job"):
        client.await_proof("0" * 32, 1)

    # TCP: the token is required and checked.
    with Client(daemon.tcp) as anonymous, pytest.raises(DaemonError, match="bearer token") as info:
        anonymous.status()
    assert info.value.code == "UNAUTHENTICATED"
    with Client(daemon.tcp, token="wrong-token-" + "y" * 16) as wrong, pytest.raises(DaemonError, match="bearer token"):
        wrong.submit(toy.name, toy.witness_bytes())
    with Client(daemon.tcp, token=TOKEN) as good:
        result = good.prove(toy.name, toy.witness_bytes(), timeout=120)
    check_proof(result, toy, tmp_path)

    # No daemon at all: a clear connection error, quickly.
    with Client(f"unix:{tmp_path}/none.sock") as nobody, pytest.raises(DaemonUnavailable, match="no cuzk daemon answers"):
        nobody.status()


def test_witness_paths_on_the_unix_socket_and_bytes_over_tcp(daemon, client, circuits, tmp_path):
    medium, toy = circuits["medium"], circuits["small"]
    assert client.sends_witness_paths  # unix socket: the daemon reads the file itself
    result = client.prove(medium.name, medium.witness, timeout=300)
    assert client.sends_witness_paths  # taken, not refused and resent as bytes
    check_proof(result, medium, tmp_path)

    # The daemon's refusals, as a raw request gets them.
    def raw_submit(c: Client, witness_path: str, identity: pb.FileIdentity | None = None):
        request = pb.SubmitProofRequest(key=pb.KeyRef(name=toy.name), witness_path=witness_path, witness_identity=identity)
        return c._rpc(c._stub.SubmitProof, request, timeout=30, retry=False)

    with pytest.raises(DaemonError, match=f"^{WITNESS_PATH_REFUSED}: 'w.wtns' is not an absolute path") as info:
        raw_submit(client, "w.wtns")
    assert info.value.code == "FAILED_PRECONDITION"
    with pytest.raises(DaemonError, match=f"^{WITNESS_PATH_REFUSED}: .*{tmp_path}/none.wtns': No such file"):
        raw_submit(client, str(tmp_path / "none.wtns"))
    with pytest.raises(DaemonError, match="is not a regular file"):
        raw_submit(client, str(tmp_path))
    st = toy.witness.stat()
    elsewhere = pb.FileIdentity(device=st.st_dev, inode=st.st_ino + 1, size=st.st_size, mtime_ns=st.st_mtime_ns)
    with pytest.raises(DaemonError, match=f"^{WITNESS_PATH_REFUSED}: .* is not the file the caller named") as info:
        raw_submit(client, str(toy.witness), elsewhere)  # the client saw another file at that path
    assert info.value.code == "FAILED_PRECONDITION"
    with pytest.raises(DaemonError, match="more than a witness of this circuit") as info:
        raw_submit(client, str(medium.witness))  # another circuit's larger witness: sized before any copy
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(FileNotFoundError, match="none.wtns: cannot open: No such file"):  # checked before anything is sent
        client.submit(toy.name, tmp_path / "none.wtns")
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path}: cannot open: it is a directory$"):
        client.submit(toy.name, tmp_path)

    # TCP never takes a path (a remote client's path names nothing here): refused, and the client resends the bytes.
    with Client(daemon.tcp, token=TOKEN) as remote:
        assert not remote.sends_witness_paths
        with pytest.raises(DaemonError, match=f"^{WITNESS_PATH_REFUSED} on this listener") as info:
            raw_submit(remote, str(toy.witness))
        assert info.value.code == "FAILED_PRECONDITION"
        remote.sends_witness_paths = True  # as if it were local: the refusal makes it fall back for good
        result = remote.prove(toy.name, toy.witness, timeout=120)
        assert not remote.sends_witness_paths
    check_proof(result, toy, tmp_path)


def test_the_local_http_client_proves_as_the_grpc_client_does_and_fails_alike(daemon, client, circuits, tmp_path):
    """``LocalHttpClient`` (what `cuzk prove` uses on a local daemon) on the daemon's local HTTP socket: key and witness
    by path or by name and bytes, proofs snarkjs accepts, and each error the gRPC client's, message and code alike."""
    from cuzk.local_client import LocalHttpClient, local_http_socket

    toy, medium = circuits["small"], circuits["medium"]
    local = LocalHttpClient(f"unix:{daemon.socket}", restart_grace=0.0)
    assert local.available and local.address == f"unix:{local_http_socket(daemon.socket)}"
    assert daemon.info["local_http"] == client.status()["server"]["local_http"] == local.address  # where tools find it
    assert oct(os.stat(local.address[5:]).st_mode & 0o777) == "0o600"  # the socket file's permissions guard it
    before = len(client.list_jobs())
    by_path = local.prove(toy.zkey, toy.witness, priority="high")  # the witness goes as its path, taken
    assert local.sends_witness_paths and {"intake", "queue", "msm", "verify", "answer"} <= set(by_path.timings)
    sent, answered, in_daemon = by_path.round_trip  # the daemon's own time on the request lies within the round trip
    assert 0 < sum(by_path.timings.values()) <= in_daemon <= answered - sent
    by_name = local.prove(medium.name, medium.witness_bytes(), priority="low", request_id="local-1")  # the bytes
    check_proofs([(by_path, toy), (by_name, medium)], tmp_path)
    jobs = {j.job_id: j for j in client.list_jobs()}
    assert len(jobs) == before + 2 and jobs[by_path.job_id].priority == "HIGH" and jobs[by_name.job_id].priority == "LOW"
    assert jobs[by_name.job_id].request_id == "local-1" and local.prove(medium.name, medium.witness_bytes(),
                                                                         request_id="local-1").job_id == by_name.job_id
    assert jobs[by_path.job_id].circuit == str(toy.zkey.resolve())  # registered under its path, as over gRPC

    def both(call):
        """The gRPC client's and the local client's error for the same call."""
        errors = []
        for c in (client, local):
            with pytest.raises((DaemonError, FileNotFoundError)) as info:
                call(c)
            errors.append(info.value)
        return errors

    for call in (lambda c: c.prove("nope", toy.witness_bytes()),  # unknown key
                 lambda c: c.prove(tmp_path / "missing.zkey", toy.witness_bytes()),  # no key file there
                 lambda c: c.prove(toy.name, b"not a witness at all" * 10),  # not a .wtns
                 lambda c: c.prove(toy.name, tmp_path / "none.wtns")):  # checked here, before anything is sent
        assert len({(type(e), re.sub("[0-9a-f]{32}", "<job>", str(e)), getattr(e, "code", None)) for e in both(call)}) == 1
    grpc_error, local_error = both(lambda c: c.prove(toy.name, medium.witness))  # another circuit's witness, by path
    assert local_error.code == grpc_error.code and str(local_error) == str(grpc_error)

    # A refused witness path (the client saw another file there): the bytes are sent instead, from then on.
    with_identity = local._with_witness
    local._with_witness = lambda witness, input, send: with_identity(witness, input, lambda fields: send(
        {**fields, "witness_identity": (0, 0, 0, 0)} if "witness_path" in fields else fields))
    resent = local.prove(toy.name, toy.witness)
    assert not local.sends_witness_paths and resent.public_signals == toy.public

    # No daemon: no local socket (the CLI then asks gRPC), or a socket file nobody listens on (fails after the grace).
    assert not LocalHttpClient(f"unix:{tmp_path}/none.sock").available
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(local_http_socket(tmp_path / "gone.sock"))
        waits = []
        nobody = LocalHttpClient(f"unix:{tmp_path}/gone.sock", restart_grace=0.3, on_wait=waits.append)
        with pytest.raises(DaemonUnavailable, match="no cuzk daemon answers at unix:.*gone.http.sock"):
            nobody.prove(toy.name, toy.witness_bytes())
        assert len(waits) == 1 and waits[0].endswith("giving up after 0.3 s")


# -- HTTP -----------------------------------------------------------------------------------------

def test_http_metrics_and_status(daemon, client, circuits):
    from prometheus_client.parser import text_string_to_metric_families

    from cuzk import __version__
    from cuzk.server.metrics import key_label

    toy = circuits["small"]
    client.prove(toy.name, toy.witness_bytes(), timeout=120)
    client.prove(toy.zkey, toy.witness_bytes(), timeout=120)  # a key named by its path: labelled by name, not the path
    by_path = key_label(str(toy.zkey.resolve()))

    def scrape_with_both():  # a job's counters are written by the engine's listener, just after its result is ready
        text = urllib.request.urlopen(f"http://{daemon.http}/metrics", timeout=10).read().decode()
        return text if f'cuzk_proofs_total{{circuit="{by_path}",status="done"}}' in text else None

    metrics = wait_for(scrape_with_both, 30, "the metrics of the proof by path")
    assert by_path.startswith(toy.zkey.stem + "-") and "/" not in by_path
    for name in (f'cuzk_proofs_total{{circuit="{toy.name}",status="done"}}', f'cuzk_proofs_total{{circuit="{by_path}",status="done"}}',
                 f'cuzk_phase_seconds_bucket{{circuit="{toy.name}",le="+Inf",phase="msm"}}', 'cuzk_queue_depth{priority="normal"}',
                 "cuzk_budget_total_bytes ", "cuzk_budget_effective_total_bytes ", "cuzk_memory_untracked_bytes ",
                 'cuzk_budget_reserved_bytes{category="key"}', 'cuzk_jobs{state="done"}', "cuzk_oom_restarts_total",
                 'cuzk_worker_proofs_total{device="cpu",worker="prove-0"}', 'cuzk_worker_healthy{device="cpu",worker="prove-0"} 1.0',
                 "process_resident_memory_bytes ", "process_cpu_seconds_total ", f'cuzk_build_info{{python="'):
        assert name in metrics, name
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    assert families["cuzk_build_info"].samples[0].labels["version"] == __version__
    for family in families.values():  # one quantity per metric, no paths, one case for the values of a kind
        for sample in family.samples:
            assert "kind" not in sample.labels and all("/" not in v for v in sample.labels.values()), sample
            for label in {"state", "status", "priority", "tier", "category", "phase"} & sample.labels.keys():
                assert sample.labels[label] == sample.labels[label].lower(), sample
    assert client.metrics().startswith("# HELP")
    status = json.loads(urllib.request.urlopen(f"http://{daemon.http}/status", timeout=10).read())
    assert status["budget"]["total_bytes"] > 0 and "by_category" in status["budget"]
    assert {k["name"] for k in status["keys"]} >= {c.name for c in circuits.values()}
    assert all(k["working_set_bytes"] > 0 for k in status["keys"])
    assert status["jobs"]["by_state"].get("done", 0) >= 1
    assert status["workers"] and status["reconciler"]["latest"]["actual_bytes"] > 0
    # The peaks: reserved by the budget, and what the kernel charged — named for what was read (an RSS reading is not
    # a charge). The reading may be taken after the scrape above, so read the metrics again.
    metrics = urllib.request.urlopen(f"http://{daemon.http}/metrics", timeout=10).read().decode()
    gauges = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("cuzk_memory_peak")}
    assert gauges["cuzk_memory_peak_reserved_bytes"] >= status["budget"]["peak_reserved_bytes"] > 0
    kernel = status["reconciler"]["latest"]["source"] in ("cgroup", "meminfo")
    charged, other = ("cuzk_memory_peak_charged_bytes", "cuzk_memory_peak_rss_bytes")[:: 1 if kernel else -1]
    assert gauges[charged] > 0 and other not in gauges
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://{daemon.http}/nothing", timeout=10)


def _health(target: str) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:  # on TCP without the token: health checks are open
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="cuzk.v1.Cuzk"), timeout=10).status


def _healthz(daemon) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{daemon.http}/healthz", timeout=10) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def test_health_reports_warming_until_the_jit_is_warm_then_serving(daemon):
    from grpc_health.v1 import health_pb2

    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    readings = []

    def ready():
        # Read in this order; the state only goes warming → serving, so a later reading never says less than an earlier.
        reading = (_health(f"unix:{daemon.socket}"), _health(daemon.tcp), _healthz(daemon),
                   json.loads(urllib.request.urlopen(f"http://{daemon.http}/status", timeout=10).read())["server"])
        readings.append(reading)
        return reading[3]["state"] == "serving" and reading

    unix, tcp, healthz, server = wait_for(ready, 600, "the JIT warm-up")
    assert (unix, tcp, healthz) == (serving, serving, (200, "serving"))
    assert server["warmup"]["error"] is None and server["warmup"]["seconds"] > 0
    for unix, tcp, healthz, server in readings:
        assert unix in (serving, not_serving) and healthz in ((200, "serving"), (503, "warming"))
        if unix == serving:
            assert tcp == serving and healthz == (200, "serving") and server["state"] == "serving"
        if server["state"] == "warming":
            assert (unix, tcp, healthz) == (not_serving, not_serving, (503, "warming")) and server["warmup"]["seconds"] is None


def test_reflection_lists_the_services_and_needs_the_token_on_tcp(daemon):
    import grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    def services(target: str, metadata=()) -> set[str]:
        with grpc.insecure_channel(target) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            (answer,) = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                  metadata=metadata, timeout=10)
            return {s.name for s in answer.list_services_response.service}

    expected = {"cuzk.v1.Cuzk", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}
    assert services(f"unix:{daemon.socket}") == expected
    assert services(daemon.tcp, [("authorization", f"Bearer {TOKEN}")]) == expected
    with pytest.raises(grpc.RpcError) as refused:
        services(daemon.tcp)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


# -- start-up failures ----------------------------------------------------------------------------

def test_a_second_daemon_on_the_same_data_dir_stops_with_a_clear_message(daemon):
    base = [sys.executable, "-m", "cuzk.cli", "daemon", "--config", str(daemon.config)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUZK_")}
    # Unsupervised: the engine finds the data directory locked and exits with the "cannot start" status.
    run = subprocess.run([*base, "--no-supervise", "--listen", f"unix:{daemon.data_dir}/other.sock", "--http", ""],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 78 and "in use by another cuzk engine" in run.stderr, run.stderr
    # Supervised: the supervisor refuses to share the directory with the running one.
    run = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 3 and "already supervises" in run.stderr, run.stderr
    # The first daemon is unharmed.
    with daemon.client() as client:
        assert client.status()["supervisor"]["engine_pid"] == daemon.engine_pid()


def test_unusable_config_is_refused_before_anything_starts(tmp_path):
    from cuzk.cli import main as cli_main

    assert cli_main(["daemon", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:7750"]) == 1  # TCP without a token
    assert not (tmp_path / "run").exists()


def test_standard_health_and_reflection_services(daemon):
    """grpc.health.v1 answers SERVING (over TCP without the token: probes carry none), reflection lists the services."""
    for address in (f"unix:{daemon.socket}", daemon.tcp):
        with grpc.insecure_channel(address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            for service in ("", "cuzk.v1.Cuzk"):
                assert check(health_pb2.HealthCheckRequest(service=service), timeout=30).status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as exc:
                check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=30)
            assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answer = next(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=30))
        assert {s.name for s in answer.list_services_response.service} >= {"cuzk.v1.Cuzk", "grpc.health.v1.Health"}
    with grpc.insecure_channel(daemon.tcp) as channel, pytest.raises(grpc.RpcError) as exc:
        pb_grpc.CuzkStub(channel).GetStatus(pb.GetStatusRequest(), timeout=30)  # everything else still needs the token
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("exc, code", [
    (OSError(28, "No space left on device"), grpc.StatusCode.INTERNAL),  # the journal's disk: never the caller's fault
    (ValueError("a bug deep in the prover"), grpc.StatusCode.INTERNAL),
    (JobError("the request names no key"), grpc.StatusCode.INVALID_ARGUMENT),
    (InputError("main.x: missing"), grpc.StatusCode.INVALID_ARGUMENT),
])
def test_only_the_requests_own_errors_are_answered_as_the_callers_fault(exc, code):
    assert status_for(exc)[0] == code
    assert answer_for(exc).status == {grpc.StatusCode.INTERNAL: 500, grpc.StatusCode.INVALID_ARGUMENT: 400}[code]


def test_an_unknown_wire_enum_is_the_requests_error():
    with pytest.raises(JobError, match="unknown priority 99"):
        priority_from_pb(99)
