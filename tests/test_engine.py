"""The engine end to end on real circuits: proofs, durability and replay, priorities, cancellation at
every stage, await timeouts, failures with reasons, and a budget that is never exceeded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, corpus_dir, load_json, snarkjs_verify
from cuzk.engine import AwaitTimeout, Engine, EngineConfig, EngineStopped, JobState, Priority
from cuzk.engine.jobs import UnknownJobError
from cuzk.engine.journal import DataDirLocked, Journal, RequestIdConflict
from cuzk.backends import get_backend
from cuzk.engine.workset import working_set
from cuzk.formats.wtns import read_wtns, write_wtns
from cuzk.formats.zkey import read_zkey_header
from cuzk.keys.manager import KeyTier, footprint, load_peak
from cuzk.memory.budget import MemoryBudget
from cuzk.prover.groth16 import ProvingError

TOY = "toy_multiplier"
POSEIDON = "poseidon_chain_16"


class Gate:
    """An engine listener that holds the worker thread when a job reaches ``state``, until opened."""

    def __init__(self, state: JobState):
        self.state = state
        self.reached = threading.Event()
        self.opened = threading.Event()
        self.job_id: str | None = None

    def __call__(self, job_id: str, state: JobState) -> None:
        if state is self.state and self.job_id in (None, job_id) and not self.opened.is_set():
            self.job_id = job_id
            self.reached.set()
            self.opened.wait(60)

    def wait(self) -> str:
        assert self.reached.wait(60), f"no job reached {self.state.value}"
        return self.job_id

    def open(self) -> None:
        self.opened.set()


def sizes(name: str) -> tuple[int, int, int]:
    """(hot key bytes, one job's working set, the key's load peak) as the engine computes them."""
    header = read_zkey_header(corpus_dir(name) / "circuit.zkey")
    work = working_set(header, backend=get_backend("cpu")).total_bytes
    return footprint(header, KeyTier.HOT), work, load_peak(header, KeyTier.HOT, EngineConfig(data_dir=".").load_chunk_bytes)


def witness_bytes(name: str) -> bytes:
    return (corpus_dir(name) / "witness.wtns").read_bytes()


def unsatisfied_witness(name: str, tmp_path: Path) -> bytes:
    """The corpus witness with its last (private) signal changed: right shape, wrong values."""
    w = read_wtns(corpus_dir(name) / "witness.wtns")
    values = np.array(w.values)
    values[-1, 0] ^= 1
    path = tmp_path / "bad.wtns"
    write_wtns(path, w.curve, values)
    return path.read_bytes()


@pytest.fixture
def make_engine(tmp_path):
    """Engines on a data dir under tmp_path with an explicit budget; stopped at teardown."""
    made: list[Engine] = []

    def make(*, budget: int = 1 << 30, circuits=(TOY,), data_dir=None, start=True, **overrides) -> Engine:
        cfg = dict(backend="cpu", key_idle_evict_s=0, reconcile=False)
        cfg.update(overrides)
        config = EngineConfig(data_dir=data_dir or tmp_path / "data", **cfg)
        engine = Engine(config, budget=MemoryBudget(budget))
        made.append(engine)
        for name in circuits:
            engine.register_key(name, corpus_dir(name) / "circuit.zkey")
        return engine.start() if start else engine

    yield make
    for engine in made:
        engine.stop()


def test_proof_round_trip_verifies_with_snarkjs(make_engine, tmp_path):
    engine = make_engine()
    job_id = engine.submit(TOY, witness_bytes(TOY), Priority.HIGH)
    record = engine.await_result(job_id, timeout=120)
    assert record.state is JobState.DONE, record.error
    assert record.public_signals == load_json(corpus_dir(TOY) / "public.json")
    assert set(record.timings) >= {"synthesize", "ntt", "msm", "verify"}
    (tmp_path / "proof.json").write_text(json.dumps(record.proof))
    (tmp_path / "public.json").write_text(json.dumps(record.public_signals))
    assert snarkjs_verify(corpus_dir(TOY) / "verification_key.json", tmp_path / "public.json", tmp_path / "proof.json")
    assert engine.get(job_id) == record
    assert engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0  # everything given back


def test_request_id_is_idempotent(make_engine):
    engine = make_engine()
    w = witness_bytes(TOY)
    first = engine.submit(TOY, w, request_id="req-1")
    assert engine.submit(TOY, w, request_id="req-1") == first
    assert engine.await_result(first, timeout=120).state is JobState.DONE
    assert engine.submit(TOY, w, request_id="req-1") == first  # still the same after it finished
    with pytest.raises(RequestIdConflict):
        engine.submit(TOY, w[:-32] + bytes(32), request_id="req-1")
    assert len(engine.list_jobs()) == 1


def test_priority_order_then_fifo(make_engine):
    engine = make_engine(start=False)
    order: list[str] = []
    engine.add_listener(lambda job_id, state: order.append(job_id) if state is JobState.SYNTHESIZING else None)
    w = witness_bytes(TOY)
    names = {}
    for tag, prio in [("low", "LOW"), ("normal-1", "normal"), ("critical", Priority.CRITICAL), ("high", 2), ("normal-2", "NORMAL")]:
        names[engine.submit(TOY, w, prio, request_id=tag)] = tag
    engine.start()
    for job_id in names:
        assert engine.await_result(job_id, timeout=120).state is JobState.DONE
    assert [names[j] for j in order] == ["critical", "high", "normal-1", "normal-2", "low"]


def test_cancel_while_queued(make_engine):
    engine = make_engine(start=False)
    job_id = engine.submit(TOY, witness_bytes(TOY))
    assert engine.cancel(job_id) is True
    record = engine.await_result(job_id, timeout=1)
    assert record.state is JobState.CANCELLED and "queued" in record.error
    assert engine.cancel(job_id) is False  # already finished
    with pytest.raises(UnknownJobError):
        engine.cancel("no-such-job")


@pytest.mark.parametrize("stage", [JobState.SYNTHESIZING, JobState.PROVING])
def test_cancel_while_running_frees_everything_and_the_engine_keeps_serving(make_engine, stage):
    engine = make_engine(start=False)
    gate = Gate(stage)
    engine.add_listener(gate)
    engine.start()
    job_id = engine.submit(TOY, witness_bytes(TOY))
    assert gate.wait() == job_id
    assert engine.get(job_id).state is stage
    assert engine.cancel(job_id) is True
    gate.open()
    record = engine.await_result(job_id, timeout=60)
    assert record.state is JobState.CANCELLED and stage.value in record.error
    snap = engine.budget.snapshot()
    assert snap["by_category"]["working"]["bytes"] == 0
    assert engine.status()["keys"][0]["in_use"] == 0
    assert engine.await_result(engine.submit(TOY, witness_bytes(TOY)), timeout=120).state is JobState.DONE


def test_cancel_while_waiting_for_memory(make_engine):
    key, work, _ = sizes(TOY)
    engine = make_engine(budget=key + work + work // 2, start=False)  # room for one job's working set
    gate = Gate(JobState.PROVING)
    engine.add_listener(gate)
    engine.start()
    first = engine.submit(TOY, witness_bytes(TOY))
    gate.wait()
    second = engine.submit(TOY, witness_bytes(TOY))
    while engine.budget.snapshot()["waiters"] == 0:  # the second job queues for memory
        threading.Event().wait(0.005)
    assert engine.get(second).state is JobState.QUEUED
    engine.cancel(second)
    record = engine.await_result(second, timeout=30)
    assert record.state is JobState.CANCELLED
    gate.open()
    assert engine.await_result(first, timeout=120).state is JobState.DONE


def test_await_timeout_then_result(make_engine):
    engine = make_engine(start=False)
    gate = Gate(JobState.SYNTHESIZING)
    engine.add_listener(gate)
    engine.start()
    job_id = engine.submit(TOY, witness_bytes(TOY))
    gate.wait()
    with pytest.raises(AwaitTimeout, match="synthesizing"):
        engine.await_result(job_id, timeout=0.05)
    gate.open()
    assert engine.await_result(job_id, timeout=120).state is JobState.DONE


def test_unsatisfied_witness_fails_with_a_reason_and_the_engine_keeps_serving(make_engine, tmp_path):
    engine = make_engine()
    bad = engine.submit(TOY, unsatisfied_witness(TOY, tmp_path))
    record = engine.await_result(bad, timeout=120)
    assert record.state is JobState.FAILED and record.proof is None
    assert "self-verification" in record.error
    # With the r1cs registered the failing constraint is named before any MSM.
    engine.register_key(TOY, corpus_dir(TOY) / "circuit.zkey", corpus_dir(TOY) / "circuit.r1cs")
    record = engine.await_result(engine.submit(TOY, unsatisfied_witness(TOY, tmp_path)), timeout=120)
    assert record.state is JobState.FAILED and "constraint" in record.error
    good = engine.submit(TOY, witness_bytes(TOY))
    assert engine.await_result(good, timeout=120).state is JobState.DONE


def test_mismatched_or_garbage_witness_is_refused_at_submit(make_engine):
    engine = make_engine(circuits=(TOY, POSEIDON))
    with pytest.raises(ProvingError, match="signals"):
        engine.submit(TOY, witness_bytes(POSEIDON))
    with pytest.raises(ValueError, match="wtns"):
        engine.submit(TOY, b"garbage")
    with pytest.raises(ValueError, match="unknown circuit key"):
        engine.submit("nope", witness_bytes(TOY))
    with pytest.raises(ValueError, match="priority"):
        engine.submit(TOY, witness_bytes(TOY), "urgent")
    assert engine.list_jobs() == []


def test_job_larger_than_the_whole_budget_fails_at_once(make_engine):
    _, _, key_load = sizes(TOY)
    engine = make_engine(budget=key_load + 1)  # the key loads, the job cannot fit
    record = engine.await_result(engine.submit(TOY, witness_bytes(TOY)), timeout=60)
    assert record.state is JobState.FAILED and "more than the whole budget" in record.error


def test_budget_is_never_exceeded_while_several_jobs_run(make_engine):
    key, work, peak_load = sizes(POSEIDON)
    budget = max(key + work + work // 2, peak_load)  # one working set at a time
    engine = make_engine(budget=budget, circuits=(POSEIDON,), synth_workers=2)
    running = []
    most = [0]
    lock = threading.Lock()

    def track(job_id, state):
        with lock:
            if state in (JobState.SYNTHESIZING,):
                running.append(job_id)
            elif state.terminal and job_id in running:
                running.remove(job_id)
            most[0] = max(most[0], len(running))

    engine.add_listener(track)
    ids = [engine.submit(POSEIDON, witness_bytes(POSEIDON)) for _ in range(3)]
    for job_id in ids:
        assert engine.await_result(job_id, timeout=300).state is JobState.DONE
    snap = engine.budget.snapshot()
    assert snap["peak_reserved_bytes"] <= budget
    assert snap["peak_reserved_bytes"] >= key + work  # the jobs really held their reservations
    assert most[0] == 1  # the budget admitted one job at a time
    assert snap["reserved_bytes"] == key  # only the (idle, hot) key remains


def test_sigkilled_engine_loses_no_job(tmp_path):
    """A child engine is SIGKILLed mid-proof; a new engine on the data dir replays and finishes both jobs."""
    data_dir = tmp_path / "data"
    zkey = corpus_dir(TOY) / "circuit.zkey"
    code = textwrap.dedent(f"""
        import sys, threading
        from cuzk.engine import Engine, EngineConfig, JobState
        from cuzk.memory.budget import MemoryBudget
        engine = Engine(EngineConfig(data_dir={str(data_dir)!r}, backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
        engine.register_key("toy", {str(zkey)!r})
        proving = threading.Event()
        engine.add_listener(lambda j, s: (proving.set(), threading.Event().wait()) if s is JobState.PROVING else None)
        w = open({str(corpus_dir(TOY) / "witness.wtns")!r}, "rb").read()
        ids = [engine.submit("toy", w, request_id="a"), engine.submit("toy", w, request_id="b")]
        engine.start()
        proving.wait()
        print(*ids, flush=True)
        threading.Event().wait()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        ids = child.stdout.readline().split()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert len(ids) == 2
    states = {r.job_id: r.state for r in Journal(data_dir).list()}
    assert states[ids[0]] is JobState.PROVING and states[ids[1]] is JobState.QUEUED

    engine = Engine(EngineConfig(data_dir=data_dir, backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
    try:
        assert engine.keys.names() == ["toy"]  # the registration survived too
        engine.start()
        for job_id in ids:
            record = engine.await_result(job_id, timeout=120)
            assert record.state is JobState.DONE, record.error
        assert engine.get(ids[0]).attempts == 2
    finally:
        engine.stop()


def test_stop_leaves_jobs_for_the_next_engine_and_locks_the_data_dir(make_engine, tmp_path):
    engine = make_engine(start=False)
    job_id = engine.submit(TOY, witness_bytes(TOY))
    with pytest.raises(DataDirLocked):
        Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
    engine.stop()
    with pytest.raises(EngineStopped):
        engine.await_result(job_id, timeout=1)
    with pytest.raises(EngineStopped):
        engine.submit(TOY, witness_bytes(TOY))
    again = make_engine(circuits=())
    assert again.await_result(job_id, timeout=120).state is JobState.DONE


def test_a_job_that_keeps_killing_the_engine_is_abandoned(make_engine, tmp_path):
    journal = Journal(tmp_path / "data")
    record, _ = journal.submit(TOY, Priority.NORMAL, witness_bytes(TOY))
    for _ in range(3):
        journal.mark_started(record.job_id)
    journal.close()
    engine = make_engine(max_attempts=3)
    result = engine.await_result(record.job_id, timeout=5)
    assert result.state is JobState.FAILED and "abandoned" in result.error


def test_measured_peak_raises_later_reservations(make_engine):
    engine = make_engine(start=False)
    estimate = engine.working_set(TOY)
    assert estimate.measured_bytes is None and estimate.total_bytes == estimate.estimated_bytes
    engine.record_peak(TOY, estimate.estimated_bytes * 3)
    raised = engine.working_set(TOY)
    assert raised.total_bytes == estimate.estimated_bytes * 3 and raised.abc_bytes == estimate.abc_bytes
    assert engine.record_peak(TOY, 1) == estimate.estimated_bytes * 3  # the largest is kept
    assert engine.status()["peaks"] == {TOY: estimate.estimated_bytes * 3}


def test_status_reports_budget_keys_jobs_and_workers(make_engine):
    engine = make_engine()
    engine.await_result(engine.submit(TOY, witness_bytes(TOY)), timeout=120)
    status = engine.status()
    assert status["running"]
    assert set(status["budget"]["by_category"]) == {"key", "pinned", "working", "transient"}
    assert status["keys"][0]["name"] == TOY and status["keys"][0]["tier"] == "hot"
    assert status["jobs"]["by_state"]["done"] == 1
    kinds = sorted(w["kind"] for w in status["workers"])
    assert kinds == ["housekeeping", "proving", "synthesis"]
    assert engine.evict(TOY) > 0 and engine.status()["keys"][0]["tier"] == "cold"
    assert engine.preload(TOY) == "hot"
