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


def _tgkill(pid: int, tid: int, sig: int) -> None:
    """Send ``sig`` to one thread of process ``pid`` (Linux's tgkill; Python has no wrapper)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(234, pid, tid, sig) != 0:  # SYS_tgkill on x86-64
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig})")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="tgkill's syscall number is x86-64's")
def test_a_sigterm_the_kernel_hands_to_another_thread_still_stops_the_engine(make_daemon, tmp_path):
    """The kernel may give a process's SIGTERM to any of its threads; the engine's main thread must still hear it
    (it once waited untimed and the daemon ignored the signal). Sent here to a non-main thread on purpose."""
    circuits = circuits_for(tmp_path / "circuits", ("small",))
    daemon = make_daemon({c.name: c.zkey for c in circuits.values()})
    engine = daemon.engine_pid()
    other = next(int(t) for t in os.listdir(f"/proc/{engine}/task") if int(t) != engine)
    _tgkill(engine, other, signal.SIGTERM)
    wait_for(lambda: "cuzk daemon stopping" in daemon.log_text(), 30, "the engine to hear the SIGTERM")
    daemon.wait_ready(not_pid=engine)  # the supervisor, not asked to stop, restarts it
    assert daemon.stop() == 0


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


def test_the_local_http_client_rides_over_a_kill_9_and_proves_once(make_daemon, tmp_path):
    """`cuzk prove`'s client on the local HTTP socket: its connection cut by the engine's death, it retries with the
    same request id until the restarted engine answers, and gets the one job the journal replayed."""
    from cuzk.local_client import LocalHttpClient

    circuits = circuits_for(tmp_path / "circuits", ("medium", "large"))
    daemon = make_daemon({c.name: c.zkey for c in circuits.values()})
    medium, large = circuits["medium"], circuits["large"]
    request_id = f"local-k9-{uuid.uuid4().hex[:6]}"
    waits = []
    local = LocalHttpClient(f"unix:{daemon.socket}", restart_grace=120, on_wait=waits.append)
    with daemon.client() as client, ThreadPoolExecutor(1) as pool:
        ahead = [client.submit(large.name, large.witness_bytes())[0] for _ in range(2)]  # the local job waits behind them
        proving = pool.submit(local.prove, medium.name, medium.witness, request_id=request_id)
        wait_for(lambda: any(j.request_id == request_id for j in client.list_jobs()), 120, "the local client's job")
        first = daemon.engine_pid()
        os.kill(first, signal.SIGKILL)
        daemon.wait_ready(not_pid=first)
        result = proving.result(timeout=600)
        check_proofs([(result, medium)], tmp_path)
        assert [j.job_id for j in client.list_jobs() if j.request_id == request_id] == [result.job_id]
        assert all(client.await_proof(job_id, 600).state == "DONE" for job_id in ahead)
    assert len(waits) == 1 and daemon.state().restarts == 1


# -- memory cgroups -------------------------------------------------------------------------------

def engine_footprint(client: Client, circuit: Circuit) -> tuple[int, int]:
    """(bytes the idle engine takes once warm, bytes each concurrent proof of ``circuit`` adds: its working set).

    Warm means after one proof: the key is loaded and numba's compiled kernels are in memory.
    The idle figure is the larger of the cgroup's charge and the engine's RSS: the reconciler
    counts one or the other depending on which limit binds.
    """
    client.prove(circuit.name, circuit.witness_bytes(), timeout=600)
    status = client.status()
    key = next(k for k in status["keys"] if k["name"] == circuit.name)
    latest = status["reconciler"]["latest"]
    return max(latest["actual_bytes"], latest["rss_bytes"]), key["working_set_bytes"]


@pytest.mark.cgroup
@pytest.mark.slow
def test_jobs_under_a_limit_below_their_joint_need_complete_without_oom(make_daemon, memory_cgroups, tmp_path):
    sha = circuits_for(tmp_path / "circuits", ("large",))["large"]
    cg = memory_cgroups(4096 * MiB, oom_counter=True)
    daemon = make_daemon({sha.name: sha.zkey}, engine={"synth_workers": 4}, cgroup=cg)
    with daemon.client() as client:
        idle, per_job = engine_footprint(client, sha)
    daemon.stop()
    n_jobs = 8
    # Room for the idle engine, about two proofs and the engine's own margin: well below eight at once.
    limit = idle + 2 * per_job + 64 * MiB
    assert limit < idle + n_jobs * per_job, (format_size(idle), format_size(per_job))
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
def test_forced_oom_is_recognised_budget_lowered_and_every_job_completes(make_daemon, memory_cgroups, tmp_path):
    """Issue 4's forced OOM: a configured budget above the cgroup limit, trusted by --budget-over-limit."""
    from dataclasses import replace

    from test_daemon import synthetic_circuit

    # Fourteen keys (one 2^17-domain key under fourteen names): each proof loads its key into
    # memory, and an engine that believes it has 2 GiB keeps every loaded key resident.
    big = synthetic_circuit(tmp_path / "big", 1 << 16)
    keys = [replace(big, name=f"k{i}") for i in range(14)]
    cg = memory_cgroups(2048 * MiB, oom_counter=True)
    # A long idle time: after the OOM restart the learned budget holds one key at a time, and each
    # job must get the previous idle key evicted at once (waiting could not make the room), not
    # after ten minutes.
    engine = {"synth_workers": 2, "key_idle_evict_s": 600, "load_chunk_bytes": 8 * MiB}
    policy_step = 0.05  # SupervisorPolicy.min_oom_step: the learned ceiling is 95 % of the limit it died at
    # Measure first, within the limit: the warm engine, one key, one proof.
    measuring = make_daemon({keys[0].name: keys[0].zkey}, engine=engine, budget="2GiB", cgroup=cg)
    with measuring.client() as client:
        idle, per_job = engine_footprint(client, keys[0])
        hot = next(k for k in client.status()["keys"] if k["name"] == "k0")["hot_bytes"]
    assert measuring.stop() == 0
    # A limit with room for one more key and one proof beside the warm engine (what the learned
    # ceiling will need), far less than fourteen resident keys; the daemon is told 2 GiB anyway.
    limit = int((idle + hot + per_job + 160 * MiB) / (1 - policy_step))
    assert limit < idle + len(keys) * hot
    cg.set_limit(limit)
    limit = cg.read().limit_bytes  # as the kernel keeps it: whole pages
    daemon = make_daemon({k.name: k.zkey for k in keys}, engine=engine, budget="2GiB", budget_over_limit=True, cgroup=cg,
                         supervisor={"min_budget": 64 * MiB})
    with daemon.client() as client:
        submitted = submit_all(client, [(f"oom-{k.name}-{uuid.uuid4().hex[:6]}", k) for k in keys])
        await_all(client, submitted, tmp_path, timeout=1200)
    state = daemon.state()
    assert cg.oom_kills() >= 1 and state.oom_kills >= 1, f"no OOM kill under {format_size(limit)}"
    oom = next(d for d in state.deaths if d["oom_kill"])
    assert "OOM kill" in oom["cause"] and oom["planned_ceiling"] == 2048 * MiB and oom["limit"] == limit
    assert state.learned_budget is not None and state.learned_budget < limit
    assert state.current_budget == state.learned_budget  # the learned budget won over the trusted configured one
    log = daemon.log_text()
    assert "OOM kill (the kernel's OOM counter moved)" in log and "budget lowered by" in log
    assert "WARNING: configured budget 2.00 GiB is trusted over the real ceiling" in log
    assert daemon.stop() == 0
