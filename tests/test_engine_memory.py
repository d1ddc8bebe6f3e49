"""The engine under a small budget: idle keys go at once when waiting cannot help, stay while it can,
jobs that can never fit fail at once, and keys held by queued work never deadlock admission.

Real engines, real key manager and budget (only its size is chosen), real proofs on the CPU backend.
"""

from __future__ import annotations

import time

import pytest

from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.curves import BLS12_381, BN254
from cuzk.engine import Engine, EngineConfig, JobState
from cuzk.memory.budget import MemoryBudget
from cuzk.prover.setup import setup
from test_engine import SLOW, Circuit, Gate, sizes, wait_until

LONG_IDLE_S = 3600.0  # an idle time no test waits out: any eviction seen happened under the at-once rule


@pytest.fixture(scope="module")
def circuits(tmp_path_factory) -> dict[str, Circuit]:
    out = {}
    for name, curve in (("small", BN254), ("bls", BLS12_381)):
        d = tmp_path_factory.mktemp(name)
        r1cs, wtns = write_synthetic(d, synthesize(curve, 40, n_public=2, seed=11))
        setup(r1cs, d / "circuit.zkey")
        out[name] = Circuit(name, d / "circuit.zkey", wtns, r1cs)
    return out


@pytest.fixture
def make_engine(tmp_path, circuits):
    made: list[Engine] = []

    def make(budget: int, *, start: bool = True, **overrides) -> Engine:
        # No MSM window tables unless a test asks: budgets here are computed from the keys' plain footprints.
        cfg = dict(backend="cpu", cpu_msm_tables=False, reconcile=False, measure_peaks=False, key_idle_evict_s=LONG_IDLE_S)
        cfg.update(overrides)
        engine = Engine(EngineConfig(data_dir=tmp_path / f"data{len(made)}", **cfg), budget=MemoryBudget(budget))
        made.append(engine)
        for name, c in circuits.items():
            engine.register_key(name, c.zkey)
        return engine.start() if start else engine

    yield make
    for engine in made:
        engine.stop()


def one_key_budget(circuits) -> int:
    """Room for either key plus one job, never for both keys beside a job."""
    s = [sizes(c) for c in circuits.values()]
    budget = max(k + w for k, w, _ in s) + min(k for k, _, _ in s) // 2
    return max(budget, *(peak for _, _, peak in s))


def keys_by_name(engine: Engine) -> dict[str, dict]:
    return {k["name"]: k for k in engine.status()["keys"]}


def test_alternating_circuits_on_a_one_key_budget_do_not_wait_out_the_idle_time(make_engine, circuits):
    """The post-OOM stall: with an hour of idle time, each job still gets the other circuit's idle key at once."""
    budget = one_key_budget(circuits)
    engine = make_engine(budget, synth_workers=2)
    order = ["small", "bls", "small", "bls"]
    assert engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW).state is JobState.DONE  # warm
    t0 = time.monotonic()
    ids = [engine.submit(name, circuits[name].witness) for name in order]
    records = [engine.await_result(job_id, timeout=SLOW) for job_id in ids]
    elapsed = time.monotonic() - t0
    assert [r.state for r in records] == [JobState.DONE] * len(order), [r.error for r in records]
    assert elapsed < 120 < LONG_IDLE_S
    keys = keys_by_name(engine)
    assert keys["small"]["evictions"] >= 1 and keys["bls"]["evictions"] >= 1
    assert engine.budget.snapshot()["peak_reserved_bytes"] <= budget


def test_idle_keys_stay_while_a_job_in_flight_will_make_the_room(make_engine, circuits):
    """Both keys fit, two working sets do not: the second job waits for the first's working set, evicting nothing."""
    s = {name: sizes(c) for name, c in circuits.items()}
    chunk = max(peak - k for k, _, peak in s.values())
    budget = sum(k for k, _, _ in s.values()) + max(w for _, w, _ in s.values()) + chunk
    assert budget < sum(k for k, _, _ in s.values()) + sum(w for _, w, _ in s.values())
    engine = make_engine(budget, synth_workers=2, start=False)
    gate = Gate(JobState.PROVING)
    engine.add_listener(gate)
    engine.start()
    first = engine.submit("small", circuits["small"].witness)
    gate.wait()  # the first job holds its working set
    rest = [engine.submit(name, circuits[name].witness) for name in ("bls", "small", "bls")]
    wait_until(lambda: engine.budget.snapshot()["waiters"] > 0)  # "bls" waits for the working set, not for an eviction
    gate.open()
    for job_id in [first, *rest]:
        record = engine.await_result(job_id, timeout=SLOW)
        assert record.state is JobState.DONE, record.error
    keys = keys_by_name(engine)
    assert {n: (k["loads"], k["evictions"]) for n, k in keys.items()} == {"small": (1, 0), "bls": (1, 0)}
    assert engine.budget.snapshot()["peak_reserved_bytes"] <= budget


def test_a_job_that_can_never_fit_fails_at_once_without_loading_its_key(make_engine, circuits):
    key, work, peak = sizes(circuits["small"])
    engine = make_engine(max(peak, key + work - 1))
    t0 = time.monotonic()
    record = engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW)
    assert record.state is JobState.FAILED
    assert "more than the whole budget" in record.error and "can never run here" in record.error
    assert time.monotonic() - t0 < 30
    assert keys_by_name(engine)["small"]["loads"] == 0  # refused from the header: nothing was loaded for it
    assert engine.budget.reserved_bytes == 0


def test_a_job_waiting_for_a_key_held_by_queued_work_does_not_deadlock(make_engine, circuits):
    """One key fits: "bls" waits while "small" is held by a job proving and another synthesized behind it."""
    budget = one_key_budget(circuits)
    engine = make_engine(budget, synth_workers=2, start=False)
    gate = Gate(JobState.PROVING)
    engine.add_listener(gate)
    engine.start()
    first = engine.submit("small", circuits["small"].witness)
    gate.wait()  # proving, holding the "small" key
    second = engine.submit("small", circuits["small"].witness)  # queued for the same key (its working set waits)
    third = engine.submit("bls", circuits["bls"].witness)  # needs the room "small" holds
    wait_until(lambda: engine.budget.snapshot()["waiters"] > 0)
    assert engine.get(third).state is JobState.QUEUED
    gate.open()
    for job_id in (first, second, third):
        record = engine.await_result(job_id, timeout=SLOW)
        assert record.state is JobState.DONE, record.error
    assert keys_by_name(engine)["small"]["evictions"] >= 1
    assert engine.budget.snapshot()["peak_reserved_bytes"] <= budget



def test_the_engines_own_memory_is_reserved_as_runtime_so_little_stays_untracked(circuits, tmp_path):
    """An engine-made budget holds the process itself (interpreter, numba's code) under "runtime", measured while idle."""
    from conftest import planned_budget_bytes
    from cuzk.memory.limits import read_rss_bytes
    from cuzk.memory.units import MiB

    config = EngineConfig(data_dir=tmp_path / "data", backend="cpu", budget_bytes=planned_budget_bytes(), housekeeping_interval_s=0.05)
    with Engine(config) as engine:
        at_start = engine.status()["runtime"]["reserved_bytes"]
        assert at_start > 20 * MiB  # the interpreter and its libraries, measured at start
        engine.register_key("small", circuits["small"].zkey)
        assert engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW).state is JobState.DONE

        def settled():  # idle again: the runtime grew to what the process holds beyond its reservations
            runtime = engine.status()["runtime"]
            beyond = read_rss_bytes() - (engine.budget.reserved_bytes - runtime["reserved_bytes"])
            return runtime["reserved_bytes"] >= beyond - engine.runtime.step_bytes - 4 * MiB

        wait_until(settled)
        status = engine.status()
        assert status["budget"]["by_category"]["runtime"] == {"bytes": status["runtime"]["reserved_bytes"], "count": 1}
        assert status["runtime"]["reserved_bytes"] >= at_start
        # The reconciler now counts the runtime as tracked: untracked is what moved since the last idle measurement.
        reading = engine.reconciler.preview()
        assert reading.untracked_bytes < engine.runtime.step_bytes + 16 * MiB, reading
        assert reading.reserved_bytes == engine.budget.reserved_bytes
    assert engine.budget.snapshot()["by_category"]["runtime"]["bytes"] == 0  # given back at stop
