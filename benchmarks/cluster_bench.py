"""A local three-node Ray cluster behind `cuzk cluster serve` against one `cuzk daemon`, same workload, same run.

Both are driven by `cuzk bench --addr` (the cluster's front door speaks the daemon's API), twice
each: one job at a time (the front door's added latency per job: cluster p50 − daemon p50) and
``--concurrency`` jobs at once (throughput). A tiny circuit stands in for proving, so what is
left is routing. The front door also times its own part of every job: ``route`` (its one
dispatcher deciding and sending: the witness into Ray's object store, the calls to the host,
the job journaled as started), ``dispatch`` (sent → the host journaled it; the dispatcher does
not wait for it) and ``door_wait`` (waiting for a host with room). The dispatcher routes jobs
one after another, so 1 / mean route is the most jobs per second one front door can route,
whatever the number of hosts.

    PYTHONPATH=src python benchmarks/cluster_bench.py [--circuit DIR] [--jobs 30] [--concurrency 6]

Every engine here (the daemon and each host) is a CPU engine with the same settings; on a
machine with fewer cores than engines they share the cores, so compare the figures of one run
with each other, not across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ray.cluster_utils import Cluster

from cuzk.client import Client
from cuzk.engine.supervisor import read_json

REPO = Path(__file__).resolve().parents[1]
CORPUS_TOY = REPO.parent / "shared" / "corpus" / "toy_multiplier"
EXAMPLE = REPO / "src" / "cuzk" / "examples" / "synthetic_bn254"
ENGINE = {"backend": "cpu"}


def serve(argv: list[str], data_dir: Path, circuit: Path) -> subprocess.Popen:
    """Start a daemon or a front door on ``data_dir`` with the circuit's key; returns once it listens."""
    config = data_dir / "cuzk.toml"
    config.write_text("\n".join([f'data_dir = "{data_dir}"', f'listen = ["unix:{data_dir / "cuzk.sock"}"]', 'http = ""',
                                 "[keys]", f'bench = "{circuit / "circuit.zkey"}"', "[engine]",
                                 *(f"{k} = {json.dumps(v)}" for k, v in ENGINE.items())]) + "\n")
    log = open(data_dir / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "cuzk.cli", *argv, "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 900
    while (info := read_json(data_dir / "run" / "daemon.json")) is None or info["pid"] != proc.pid:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{' '.join(argv)} did not start:\n{(data_dir / 'serve.log').read_text()}")
        time.sleep(0.1)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)


def bench(address: str, circuit: Path, jobs: int, concurrency: int, out: Path) -> dict:
    """`cuzk bench --addr`'s report."""
    res = subprocess.run([sys.executable, "-m", "cuzk.cli", "bench", "--addr", address, "--circuit", str(circuit),
                          "--jobs", str(jobs), "--concurrency", str(concurrency), "--warmup", "2", "--json", "--no-plot",
                          "--no-progress", "--out", str(out)], capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise SystemExit(f"cuzk bench against {address} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout)


def front_door_phases(address: str) -> dict[str, list[float]]:
    """The front door's own timings of every finished job (seconds)."""
    out: dict[str, list[float]] = {"route": [], "dispatch": [], "door_wait": []}
    with Client(address) as client:
        for job in client.list_jobs(states=["done"], limit=100000):
            timings = client.await_proof(job.job_id).timings
            for phase in out:
                if phase in timings:
                    out[phase].append(timings[phase])
    return out


def run(target: str, address: str, circuit: Path, args, out: Path) -> dict:
    one = bench(address, circuit, max(10, args.jobs // 2), 1, out / f"{target}-c1")
    many = bench(address, circuit, args.jobs, args.concurrency, out / f"{target}-c{args.concurrency}")
    return {"p50_one_s": next(iter(one["latency_by_circuit"].values()))["p50_s"],
            "proofs_per_s": many["proofs_per_s"], "ok": one["ok"] and many["ok"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--circuit", type=Path, default=CORPUS_TOY if (CORPUS_TOY / "circuit.zkey").exists() else EXAMPLE,
                        help="a directory with circuit.zkey and witness.wtns (default: the corpus's toy_multiplier)")
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=6)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="czb", dir="/tmp"))
    results = {}

    data = out / "daemon"
    data.mkdir()
    proc = serve(["daemon", "--no-supervise"], data, args.circuit)
    try:
        results["daemon"] = run("daemon", f"unix:{data / 'cuzk.sock'}", args.circuit, args, out)
    finally:
        stop(proc)

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        data = out / "cluster"
        data.mkdir()
        proc = serve(["cluster", "serve", "--ray-address", cluster.address], data, args.circuit)
        try:
            address = f"unix:{data / 'cuzk.sock'}"
            results["cluster"] = run("cluster", address, args.circuit, args, out)
            phases = front_door_phases(address)
        finally:
            stop(proc)
    finally:
        cluster.shutdown()

    d, c = results["daemon"], results["cluster"]
    routing = statistics.mean(phases["route"])
    print(f"circuit {args.circuit.name}, {args.jobs} jobs at concurrency {args.concurrency}, {os.cpu_count()} cores; "
          f"every engine: {ENGINE}")
    print(f"{'':<28}{'one daemon':>14}{'3-node cluster':>16}{'ratio':>8}")
    print(f"{'latency p50, 1 at a time':<28}{d['p50_one_s'] * 1000:>11.1f} ms{c['p50_one_s'] * 1000:>13.1f} ms"
          f"{c['p50_one_s'] / d['p50_one_s']:>8.2f}")
    print(f"{'throughput':<28}{d['proofs_per_s']:>9.2f} jobs/s{c['proofs_per_s']:>11.2f} jobs/s{c['proofs_per_s'] / d['proofs_per_s']:>8.2f}")
    print(f"front door added latency per job (p50 difference): {(c['p50_one_s'] - d['p50_one_s']) * 1000:.1f} ms")
    for phase, values in phases.items():
        print(f"front door {phase:<9} per job: mean {statistics.mean(values) * 1000:7.2f} ms, "
              f"p95 {sorted(values)[int(0.95 * (len(values) - 1))] * 1000:7.2f} ms over {len(values)} jobs")
    print(f"routing ceiling of one front door (1 / mean route): ~{1 / routing:.0f} jobs/s")
    print(f"all runs ok: {d['ok'] and c['ok']}; files in {out}")
    return 0 if d["ok"] and c["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
