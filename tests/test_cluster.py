"""Many hosts as one prover: `cuzk cluster serve` in front of a real three-node Ray cluster on this machine.

One ``ray.cluster_utils.Cluster`` (three nodes of one CPU each) and one front door process
serve the whole module: starting Ray and three host engines costs seconds, and the tests run
in order — a mixed workload, a job no host can ever hold, the front door SIGKILLed and
restarted, and last a node removed mid-run (the cluster has two nodes after it). Clients
talk to the front door through ``cuzk.client`` exactly as to a daemon; every proof it
returns is checked by snarkjs.

Every host engine runs a small budget (40 MiB after the plan's margin, less the front door's witness budget on its
own node; no reconciler, no learned peaks) so the largest circuit can never fit there while the small ones do.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import snarkjs_verify, wait_for
from test_daemon import Circuit, corpus_circuit, synthetic_circuit

ray_cluster_utils = pytest.importorskip("ray.cluster_utils", reason="the cluster extra (Ray) is not installed")
from rich.console import Console  # noqa: E402

from cuzk.cli import main as cli_main  # noqa: E402
from cuzk.client import Client, DaemonError, JobFailed  # noqa: E402
from cuzk.engine.supervisor import read_json  # noqa: E402
from cuzk.server.commands import render_status  # noqa: E402

pytestmark = pytest.mark.cluster

HOST_ENGINE = {"backend": "cpu", "budget_bytes": "136MiB", "reconcile": False, "measure_peaks": False}
# Role → (corpus circuit, or the project's own synthetic one of that curve and size where the corpus is absent).
ROLES = {"bn254": ("toy_multiplier", "bn254", 60), "bls12-381": ("chain4000_bls12381", "bls12-381", 60),
         "too_large": ("sha256_32B", "bn254", 1 << 15)}


@pytest.fixture(scope="module")
def circuits(tmp_path_factory) -> dict[str, Circuit]:
    out = tmp_path_factory.mktemp("circuits")
    return {role: corpus_circuit(name) or synthetic_circuit(out / role, n, curve) for role, (name, curve, n) in ROLES.items()}


@pytest.fixture(scope="module")
def ray_cluster():
    cluster = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


class FrontDoor:
    """`cuzk cluster serve` in a child process, on a data directory that outlives it (a restart replays it)."""

    def __init__(self, ray_address: str, keys: dict[str, Path], wasm: dict[str, Path]):
        self.ray_address = ray_address
        self.data_dir = Path(tempfile.mkdtemp(prefix="czc", dir="/tmp"))  # short: the unix socket lives here
        self.socket = self.data_dir / "cuzk.sock"
        lines = [f'data_dir = "{self.data_dir}"', f'listen = ["unix:{self.socket}"]', 'http = ""', "[keys]"]
        lines += [f'{name} = "{path}"' for name, path in keys.items()]
        lines.append("[engine]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in HOST_ENGINE.items()]
        lines.append("[engine.wasm]")  # keys whose input JSON the front door turns into witnesses
        lines += [f'{name} = "{path}"' for name, path in wasm.items()]
        self.config = self.data_dir / "cuzk.toml"
        self.config.write_text("\n".join(lines) + "\n")
        self.log = self.data_dir / "frontdoor.log"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        argv = [sys.executable, "-m", "cuzk.cli", "cluster", "serve", "--ray-address", self.ray_address, "--config", str(self.config)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUZK_")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"front door exited with {self.proc.returncode}:\n{self.log.read_text()}")
            info = read_json(self.data_dir / "run" / "daemon.json")
            return info if info and info["pid"] == self.proc.pid else None

        wait_for(ready, timeout=600, what="the cluster front door to listen")

    def client(self) -> Client:
        return Client(f"unix:{self.socket}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def front_door(ray_cluster, circuits):
    small = circuits["bn254"]
    wasm = {small.name: small.zkey.parent / "circuit.wasm"} if (small.zkey.parent / "circuit.wasm").exists() else {}
    door = FrontDoor(ray_cluster.address, {c.name: c.zkey for c in circuits.values()}, wasm)
    try:
        yield door
    finally:
        door.stop()


def check_with_snarkjs(result, circuit: Circuit, tmp_path: Path) -> None:
    d = tmp_path / result.job_id
    d.mkdir()
    result.write(d / "proof.json", d / "public.json")
    assert result.public_signals == circuit.public
    assert snarkjs_verify(circuit.vkey, d / "public.json", d / "proof.json")


def done_jobs(client: Client) -> dict[str, int]:
    """Job id → how many times the front door's journal lists it DONE."""
    counts: dict[str, int] = {}
    for job in client.list_jobs(states=["done"]):
        counts[job.job_id] = counts.get(job.job_id, 0) + 1
    return counts


def test_mixed_curves_across_the_hosts_every_proof_accepted_by_snarkjs(front_door, circuits, tmp_path):
    mix = [circuits["bn254"], circuits["bls12-381"]] * 3
    with front_door.client() as client:
        jobs = [(client.submit(c.name, c.witness, priority=p)[0], c) for c, p in zip(mix, ["normal", "high"] * 3)]
        status = client.status()
        for job_id, circuit in jobs:
            check_with_snarkjs(client.await_proof(job_id, timeout=600), circuit, tmp_path)
        metrics = client.metrics()
    bls = circuits["bls12-381"]  # the command line, unchanged, against the front door
    assert cli_main(["prove", "--daemon", f"unix:{front_door.socket}", bls.name, str(bls.witness),
                     str(tmp_path / "cli-proof.json"), str(tmp_path / "cli-public.json")]) == 0
    assert snarkjs_verify(bls.vkey, tmp_path / "cli-public.json", tmp_path / "cli-proof.json")
    assert len(status["hosts"]) == 3 and all("error" not in h for h in status["hosts"])
    # The front door's witness budget comes out of the host engine's on its own node: one host plans less by it.
    door, totals = status["witness_budget"]["total_bytes"], sorted(h["budget"]["total_bytes"] for h in status["hosts"])
    assert door > 0 and totals[0] + door <= totals[1] == totals[2]
    assert {h["routing"]["slots"] for h in status["hosts"]} == {2}  # CPU engines: one synthesis, one proof each
    console = Console(record=True, width=240)
    console.print(*render_status(status, []))  # what `cuzk status` and each frame of `cuzk top` show
    shown = console.export_text()
    for h in status["hosts"]:
        assert f'cuzk_host_up{{host="{h["host"]}"}} 1.0' in metrics
        assert h["host"] in shown


def test_input_json_at_the_front_door_becomes_a_witness_proved_on_a_host(front_door, circuits, tmp_path):
    small = circuits["bn254"]
    inputs = small.zkey.parent / "input.json"
    if not (small.zkey.parent / "circuit.wasm").exists() or not inputs.exists():
        pytest.skip("no corpus circuit with its .wasm and input.json here")
    with front_door.client() as client:
        check_with_snarkjs(client.prove(small.name, input=json.loads(inputs.read_text()), timeout=600), small, tmp_path)
        with pytest.raises(DaemonError, match="not_a_signal"):  # bad input: the request's error, the door serves on
            client.submit(small.name, input={"not_a_signal": "1"})
        assert client.status()["jobs"]["by_state"]["done"] >= 1


def test_a_job_no_host_can_ever_hold_fails_naming_each_hosts_reason(front_door, circuits):
    big = circuits["too_large"]
    with front_door.client() as client:
        job_id, _ = client.submit(big.name, big.witness)
        with pytest.raises(JobFailed) as failed:
            client.await_proof(job_id, timeout=120)
        hosts = [h["host"] for h in client.status()["hosts"]]
    message = str(failed.value)
    assert f"no host of the cluster can ever run circuit {big.name!r}" in message
    for host in hosts:
        assert f"{host}: circuit {big.name!r} needs" in message
    assert message.count("more than the whole budget") == len(hosts) == 3


def test_front_door_killed_and_restarted_loses_nothing(front_door, circuits, tmp_path):
    mix = [circuits["bn254"], circuits["bls12-381"]] * 4
    with front_door.client() as client:
        jobs = [(client.submit(c.name, c.witness)[0], c) for c in mix]
    front_door.kill()  # some jobs on hosts, some waiting at the front door, maybe some done
    front_door.start()
    assert "unfinished job(s) from the journal" in front_door.log.read_text()  # the restart had work to replay
    with front_door.client() as client:
        for job_id, circuit in jobs:
            check_with_snarkjs(client.await_proof(job_id, timeout=600), circuit, tmp_path)
        done = done_jobs(client)
    assert all(done.get(job_id) == 1 for job_id, _ in jobs)


def test_a_node_removed_mid_run_every_job_done_exactly_once(ray_cluster, front_door, circuits, tmp_path):
    victim = next(node for node in ray_cluster.list_all_nodes() if node is not ray_cluster.head_node)
    victim_host = f":{victim.node_id[:8]}"
    mix = [circuits["bls12-381"], circuits["bn254"]] * 4
    with front_door.client() as client:
        jobs = [(client.submit(c.name, c.witness)[0], c) for c in mix]
        wait_for(lambda: any(a["host"].endswith(victim_host) for a in client.status()["jobs"]["active"]), timeout=300,
                 what="a job running on the node about to be removed")
        ray_cluster.remove_node(victim, allow_graceful=False)
        for job_id, circuit in jobs:
            check_with_snarkjs(client.await_proof(job_id, timeout=600), circuit, tmp_path)
        done = done_jobs(client)
        retried = [j for j in client.list_jobs(states=["done"]) if j.job_id in dict(jobs) and j.attempts > 1]
        hosts = client.status()["hosts"]
    assert all(done.get(job_id) == 1 for job_id, _ in jobs)
    assert retried, "the removed node held a job, which must have run again elsewhere"
    assert len(hosts) == 2 and not any(h["host"].endswith(victim_host) for h in hosts)
