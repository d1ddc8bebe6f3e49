"""``Engine.room``: how many more jobs of a circuit an engine could start now, or why it never can (what the cluster routes by)."""

from __future__ import annotations

import pytest

from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.curves import BN254
from cuzk.engine import Engine, EngineConfig
from cuzk.formats.zkey import read_zkey_header
from cuzk.keys.host import KeyTier, footprint
from cuzk.memory.budget import MemoryBudget
from cuzk.prover.setup import setup
from cuzk.prover.sizing import host_working_set


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    r1cs, wtns = write_synthetic(d, synthesize(BN254, 40, n_public=2, seed=7))
    setup(r1cs, d / "circuit.zkey")
    header = read_zkey_header(d / "circuit.zkey")
    return d / "circuit.zkey", wtns, footprint(header, KeyTier.HOT), host_working_set(header, on_device=False).total_bytes


@pytest.fixture
def engine_with(tmp_path, small):
    made: list[Engine] = []

    def make(budget: int) -> Engine:
        # No MSM window tables: the budgets here are computed from the key's plain footprint.
        engine = Engine(EngineConfig(data_dir=tmp_path / f"data{len(made)}", backend="cpu", cpu_msm_tables=False, reconcile=False),
                        budget=MemoryBudget(budget))
        made.append(engine)
        engine.register_key("small", small[0])
        return engine  # not started: submitted jobs stay held, not admitted

    yield make
    for engine in made:
        engine.stop()


def test_room_is_the_free_pipeline_slots_when_memory_is_plenty(engine_with):
    engine = engine_with(1 << 30)
    slots = engine.synth_workers + sum(engine.proofs_per_device)
    assert engine.room("small") == (slots, None)


def test_room_counts_the_key_still_to_load_and_the_held_jobs_working_sets(engine_with, small):
    zkey, wtns, key, work = small
    engine = engine_with(key + 2 * work + work // 2)  # the key and two working sets
    assert engine.room("small") == (2, None)
    engine.submit("small", wtns)  # held, not admitted yet: its working set is spoken for
    assert engine.room("small") == (1, None)
    engine.submit("small", wtns)
    assert engine.room("small") == (0, None)  # full, but not forever: no reason


def test_a_circuit_that_can_never_fit_gets_admissions_reason(engine_with, small):
    zkey, wtns, key, work = small
    engine = engine_with(key + work - 1)
    room, reason = engine.room("small")
    assert room == 0 and "'small'" in reason and "more than the whole budget" in reason
