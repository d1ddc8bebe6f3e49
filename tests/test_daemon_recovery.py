"""The daemon survives its engine: kill -9 mid-run, jobs under a cgroup limit below their joint need, a forced OOM kill.

Real processes throughout: `cuzk daemon` (supervisor + engine), real SIGKILLs, real memory
cgroups (skipped where none is writable), the kernel's own OOM killer and counters.
"""

from __future__ import annotations

import os
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from cuzk.client import Client
from cuzk.memory.limits import CgroupError
from cuzk.memory.units import MiB, format_size
from test_daemon import Circuit, DaemonProcess, check_proofs, circuits_for, wait_for


def submit_all(client: Client, jobs: list[tuple[str, Circuit]]) -> dict[str, tuple[str, Circuit]]:
    """Submit each (request_id, circuit); returns job_id → (request_id, circuit)."""
    out = {}
    for request_id, circuit in jobs:
        job_id, _ = client.submit(circuit.name, circuit.witness_bytes(), request_id=request_id)
        out[job_id] = (request_id, circuit)
    return out


def await_all(client: Client, submitted: dict[str, tuple[str, Circuit]], tmp_path, timeout: float = 600) -> None:
    """Every job finishes DONE, with a proof snarkjs accepts, exactly once."""
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job_id: client.await_proof(job_id, timeout), submitted))
    check_proofs([(r, submitted[r.job_id][1]) for r in results], tmp_path)
    listed = [j for j in client.list_jobs() if j.request_id in {r for r, _ in submitted.values()}]
    assert sorted(j.job_id for j in listed) == sorted(submitted), "jobs lost or duplicated"


@pytest.fixture
def make_daemon():
    made = []

    def make(*args, **kwargs) -> DaemonProcess:
        d = DaemonProcess(*args, **kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.proc.poll() is None:
            d.stop()
        d.cleanup()


def test_kill_9_of_the_engine_mid_run_loses_and_duplicates_nothing(make_daemon, tmp_path):
    circuits = circuits_for(tmp_path / "circuits", ("small", "medium"))
    daemon = make_daemon({c.name: c.zkey for c in circuits.values()})
    jobs = [(f"k9-{i}-{uuid.uuid4().hex[:6]}", circuits["medium" if i % 2 else "small"]) for i in range(8)]
    with daemon.client() as client:
        submitted = submit_all(client, jobs)
        # Kill it while a job is in flight.
        wait_for(lambda: any(j.state in ("SYNTHESIZING", "PROVING") for j in client.list_jobs()), 120, "a job in flight")
        first = daemon.engine_pid()
        os.kill(first, signal.SIGKILL)
        daemon.wait_ready(not_pid=first)
        await_all(client, submitted, tmp_path)
        # Resubmitting after the restart finds the same jobs.
        assert set(submit_all(client, jobs)) == set(submitted)
    state = daemon.state()
    assert state.restarts == 1 and state.oom_kills == 0
    assert "SIGKILL" in state.deaths[-1]["cause"] and "not by the OOM killer" in state.deaths[-1]["cause"]
    assert daemon.stop() == 0


# -- memory cgroups -------------------------------------------------------------------------------

@pytest.fixture
def make_cgroup():
    from cuzk.memory.cgroup import ChildCgroup

    made = []

    def make(limit: int):
        try:
            cg = ChildCgroup.create(limit, prefix="cuzk-test-daemon-")
            cg.oom_kills()
        except (CgroupError, PermissionError) as exc:
            pytest.skip(f"no writable memory cgroup with an OOM counter: {exc}")
        made.append(cg)
        return cg

    yield make
    for cg in made:
        cg.close()


def engine_footprint(client: Client, circuit: Circuit) -> tuple[int, int]:
    """(bytes the idle engine process is charged, bytes one proof of ``circuit`` reserves: key + working set)."""
    status = client.status()
    key = next(k for k in status["keys"] if k["name"] == circuit.name)
    return status["reconciler"]["latest"]["actual_bytes"], key["hot_bytes"] + key["working_set_bytes"]


@pytest.mark.cgroup
@pytest.mark.slow
def test_jobs_under_a_limit_below_their_joint_need_complete_without_oom(make_daemon, make_cgroup, tmp_path):
    sha = circuits_for(tmp_path / "circuits", ("large",))["large"]
    cg = make_cgroup(4096 * MiB)
    daemon = make_daemon({sha.name: sha.zkey}, engine={"synth_workers": 4}, cgroup=cg)
    with daemon.client() as client:
        client.preload(sha.name)
        idle, per_job = engine_footprint(client, sha)
    daemon.stop()
    n_jobs = 8
    # Room for the idle engine and about two proofs: far below the eight submitted at once.
    limit = idle + 2 * per_job + 160 * MiB
    assert limit < idle + n_jobs * per_job
    cg.set_limit(limit)
    daemon = make_daemon({sha.name: sha.zkey}, engine={"synth_workers": 4}, cgroup=cg)
    with daemon.client() as client:
        submitted = submit_all(client, [(f"cg-{i}-{uuid.uuid4().hex[:6]}", sha) for i in range(n_jobs)])
        await_all(client, submitted, tmp_path)
    assert cg.oom_kills() == 0, f"OOM kill under a {format_size(limit)} limit"
    assert daemon.state().restarts == 0
    assert daemon.stop() == 0


@pytest.mark.cgroup
@pytest.mark.slow
def test_forced_oom_is_recognised_budget_lowered_and_every_job_completes(make_daemon, make_cgroup, tmp_path):
    sha = circuits_for(tmp_path / "circuits", ("large",))["large"]
    cg = make_cgroup(2048 * MiB)
    # The engine plans against 2 GiB; then the limit drops under it, as when a container is resized.
    daemon = make_daemon({sha.name: sha.zkey}, engine={"synth_workers": 4}, budget="2GiB", cgroup=cg,
                         supervisor={"min_budget": 64 * MiB})
    with daemon.client() as client:
        client.preload(sha.name)
        idle, per_job = engine_footprint(client, sha)
        limit = idle + 2 * per_job + 96 * MiB
        cg.set_limit(limit)
        first = daemon.engine_pid()
        submitted = submit_all(client, [(f"oom-{i}-{uuid.uuid4().hex[:6]}", sha) for i in range(8)])
        daemon.wait_ready(timeout=600, not_pid=first)
        await_all(client, submitted, tmp_path)
    state = daemon.state()
    assert cg.oom_kills() >= 1 and state.oom_kills >= 1
    oom = next(d for d in state.deaths if d["oom_kill"])
    assert "OOM kill" in oom["cause"] and oom["planned_ceiling"] == 2048 * MiB and oom["limit"] == limit
    assert state.learned_budget is not None and state.learned_budget < limit
    log = daemon.log_text()
    assert "OOM kill (the kernel's OOM counter moved)" in log and "budget lowered by" in log
    assert daemon.stop() == 0
