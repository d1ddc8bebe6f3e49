"""The engine end to end on real circuits: proofs, durability and replay, priorities, cancellation at
every stage, await timeouts, failures with reasons, and a budget that is never exceeded."""

from __future__ import annotations

import json
import mmap
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, corpus_dir, load_json, snarkjs_verify
from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.curves import BLS12_381, BN254
from cuzk.engine import AwaitTimeout, Engine, EngineConfig, EngineStopped, JobState, Priority
from cuzk.engine.admission import JobTooLarge
from cuzk.engine.jobs import JobError, UnknownJobError
from cuzk.engine.journal import DataDirLocked, Journal, RequestIdConflict
from cuzk.engine import FileIdentity, WitnessFileError
from cuzk.prover.sizing import CALIBRATION_HEADROOM, host_working_set
from cuzk.formats.json_io import write_vkey
from cuzk.formats.wtns import read_wtns, write_wtns
from cuzk.formats.zkey import read_zkey, read_zkey_header
from cuzk.keys.host import KeyTier, footprint, load_peak, msm_table_bytes
from cuzk.memory.process import PeakProbe
from cuzk.memory.budget import MemoryBudget
from cuzk.prover.groth16 import ProvingError
from cuzk.prover.setup import setup
from cuzk.prover.verify import vkey_from_zkey

TOY = "toy_multiplier"
SLOW = 900  # seconds an await may take on a cold numba cache (the first proof compiles the kernels); warm, it is well under 1 s


@dataclass(frozen=True)
class Circuit:
    name: str
    zkey: Path
    wtns: Path
    r1cs: Path

    @property
    def witness(self) -> bytes:
        return self.wtns.read_bytes()


@pytest.fixture(scope="module")
def circuits(tmp_path_factory) -> dict[str, Circuit]:
    """The project's own circuits with test-only keys (no corpus needed): small and larger BN254, small BLS12-381."""
    out = {}
    for name, curve, n in (("small", BN254, 40), ("large", BN254, 3000), ("bls", BLS12_381, 40)):
        d = tmp_path_factory.mktemp(name)
        r1cs, wtns = write_synthetic(d, synthesize(curve, n, n_public=2, seed=7))
        setup(r1cs, d / "circuit.zkey")
        out[name] = Circuit(name, d / "circuit.zkey", wtns, r1cs)
    return out


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


def wait_until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def sizes(c: Circuit) -> tuple[int, int, int]:
    """(hot key bytes, one job's working set, the key's load peak) as the engine computes them."""
    header = read_zkey_header(c.zkey)
    work = host_working_set(header, on_device=False).total_bytes
    return footprint(header, KeyTier.HOT), work, load_peak(header, KeyTier.HOT, EngineConfig(data_dir=".").load_chunk_bytes)


def unsatisfied_witness(c: Circuit, tmp_path: Path) -> bytes:
    """The witness with its last (private) signal changed: right shape, wrong values."""
    w = read_wtns(c.wtns)
    values = np.array(w.values)
    values[-1, 0] ^= 1
    path = tmp_path / "bad.wtns"
    write_wtns(path, w.curve, values)
    return path.read_bytes()


@pytest.fixture
def make_engine(tmp_path, circuits):
    """Engines on a data dir under tmp_path with an explicit budget and the small circuit; stopped at teardown."""
    made: list[Engine] = []

    def make(*, budget: int = 1 << 30, keys=("small",), data_dir=None, start=True, **overrides) -> Engine:
        # No MSM window tables unless a test asks: budgets here are computed from the keys' plain footprints.
        cfg = dict(backend="cpu", cpu_msm_tables=False, key_idle_evict_s=0, reconcile=False)
        cfg.update(overrides)
        engine = Engine(EngineConfig(data_dir=data_dir or tmp_path / "data", **cfg), budget=MemoryBudget(budget))
        made.append(engine)
        for name in keys:
            engine.register_key(name, circuits[name].zkey)
        return engine.start() if start else engine

    yield make
    for engine in made:
        engine.stop()


def write_result(record, tmp_path: Path, tag: str = "") -> tuple[Path, Path]:
    """A finished job's proof.json and public.json (proof<tag>.json, ... to keep several side by side)."""
    proof, public = tmp_path / f"proof{tag}.json", tmp_path / f"public{tag}.json"
    proof.write_text(json.dumps(record.proof))
    public.write_text(json.dumps(record.public_signals))
    return proof, public


@pytest.mark.parametrize("name", ["small", "bls"])
def test_proof_round_trip_verifies_with_snarkjs(make_engine, circuits, tmp_path, name):
    c = circuits[name]
    engine = make_engine(keys=(name,))
    job_id = engine.submit(name, c.witness, Priority.HIGH)
    record = engine.await_result(job_id, timeout=SLOW)
    assert record.state is JobState.DONE, record.error
    assert record.public_signals == [str(v) for v in synthesize_public(c)]
    assert set(record.timings) >= {"intake", "queue", "synthesize", "ntt", "msm", "verify"}
    vkey = tmp_path / "vkey.json"
    write_vkey(vkey, vkey_from_zkey(read_zkey(c.zkey)))
    assert snarkjs_verify(vkey, *reversed(write_result(record, tmp_path)))
    assert engine.get(job_id) == record
    assert engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0  # everything given back


def synthesize_public(c: Circuit) -> list[int]:
    w = read_wtns(c.wtns)
    n_public = read_zkey_header(c.zkey).n_public
    return [int.from_bytes(row.tobytes(), "little") for row in w.values[1 : n_public + 1]]


def test_corpus_circuit_through_the_engine(make_engine, tmp_path):
    d = corpus_dir(TOY)
    engine = make_engine(keys=())
    engine.register_key(TOY, d / "circuit.zkey")
    record = engine.await_result(engine.submit(TOY, (d / "witness.wtns").read_bytes()), timeout=SLOW)
    assert record.state is JobState.DONE, record.error
    assert record.public_signals == load_json(d / "public.json")
    proof, public = write_result(record, tmp_path)
    assert snarkjs_verify(d / "verification_key.json", public, proof)


@pytest.mark.parametrize("name", ["large", "bls", "poseidon_chain_16"])
def test_proofs_with_msm_window_tables_verify_with_snarkjs(make_engine, circuits, tmp_path, name):
    """cpu_msm_tables = true: the key's hot copy holds its MSMs' window tables (counted in its footprint), and the
    proofs made with them verify (the project's circuits, and a corpus one where ../shared is present)."""
    if name in circuits:
        c, vkey = circuits[name], tmp_path / "vkey.json"
        zkey, witness = c.zkey, c.witness
        write_vkey(vkey, vkey_from_zkey(read_zkey(zkey)))
    else:
        d = corpus_dir(name)
        zkey, witness, vkey = d / "circuit.zkey", (d / "witness.wtns").read_bytes(), d / "verification_key.json"
    engine = make_engine(keys=(), cpu_msm_tables=True)
    engine.register_key(name, zkey)
    records = [engine.await_result(engine.submit(name, witness), timeout=SLOW) for _ in range(2)]
    key = next(k for k in engine.status()["keys"] if k["name"] == name)
    assert key["msm_table_bytes"] == msm_table_bytes(read_zkey_header(zkey)) > 0 and key["loads"] == 1
    assert key["reserved_bytes"] == footprint(read_zkey_header(zkey), KeyTier.HOT, msm_tables=True)
    for i, record in enumerate(records):
        assert record.state is JobState.DONE, record.error
        assert snarkjs_verify(vkey, *reversed(write_result(record, tmp_path, str(i))))


def test_request_id_is_idempotent(make_engine, circuits):
    engine = make_engine()
    w = circuits["small"].witness
    first = engine.submit("small", w, request_id="req-1")
    assert engine.submit("small", w, request_id="req-1") == first
    assert engine.await_result(first, timeout=SLOW).state is JobState.DONE
    assert engine.submit("small", w, request_id="req-1") == first  # still the same after it finished
    with pytest.raises(RequestIdConflict):
        engine.submit("small", w[:-8] + bytes(8), request_id="req-1")
    assert len(engine.list_jobs()) == 1


def test_priority_order_then_fifo(make_engine, circuits):
    engine = make_engine(start=False)
    order: list[str] = []
    engine.add_listener(lambda job_id, state: order.append(job_id) if state is JobState.SYNTHESIZING else None)
    w = circuits["small"].witness
    names = {}
    for tag, prio in [("low", "LOW"), ("normal-1", "normal"), ("critical", Priority.CRITICAL), ("high", 2), ("normal-2", "NORMAL")]:
        names[engine.submit("small", w, prio, request_id=tag)] = tag
    engine.start()
    for job_id in names:
        assert engine.await_result(job_id, timeout=SLOW).state is JobState.DONE
    assert [names[j] for j in order] == ["critical", "high", "normal-1", "normal-2", "low"]


def test_cancel_while_queued(make_engine, circuits):
    engine = make_engine(start=False)
    job_id = engine.submit("small", circuits["small"].witness)
    assert engine.cancel(job_id) is True
    record = engine.await_result(job_id, timeout=1)
    assert record.state is JobState.CANCELLED and "queued" in record.error
    assert engine.cancel(job_id) is False  # already finished
    with pytest.raises(UnknownJobError):
        engine.cancel("no-such-job")


@pytest.mark.parametrize("stage", [JobState.SYNTHESIZING, JobState.PROVING])
def test_cancel_while_running_frees_everything_and_the_engine_keeps_serving(make_engine, circuits, stage):
    engine = make_engine(start=False)
    gate = Gate(stage)
    engine.add_listener(gate)
    engine.start()
    w = circuits["small"].witness
    job_id = engine.submit("small", w)
    assert gate.wait() == job_id
    assert engine.get(job_id).state is stage
    assert engine.cancel(job_id) is True
    gate.open()
    record = engine.await_result(job_id, timeout=SLOW)
    assert record.state is JobState.CANCELLED and stage.value in record.error
    assert engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0
    assert engine.status()["keys"][0]["in_use"] == 0
    assert engine.await_result(engine.submit("small", w), timeout=SLOW).state is JobState.DONE


def test_cancel_while_waiting_for_memory(make_engine, circuits):
    key, work, _ = sizes(circuits["small"])
    engine = make_engine(budget=key + work + work // 2, start=False)  # room for one job's working set
    gate = Gate(JobState.PROVING)
    engine.add_listener(gate)
    engine.start()
    w = circuits["small"].witness
    first = engine.submit("small", w)
    gate.wait()
    second = engine.submit("small", w)
    wait_until(lambda: engine.budget.snapshot()["waiters"] > 0)  # the second job queues for memory
    assert engine.get(second).state is JobState.QUEUED
    engine.cancel(second)
    assert engine.await_result(second, timeout=SLOW).state is JobState.CANCELLED
    gate.open()
    assert engine.await_result(first, timeout=SLOW).state is JobState.DONE


def test_await_timeout_then_result(make_engine, circuits):
    engine = make_engine(start=False)
    gate = Gate(JobState.SYNTHESIZING)
    engine.add_listener(gate)
    engine.start()
    job_id = engine.submit("small", circuits["small"].witness)
    gate.wait()
    with pytest.raises(AwaitTimeout, match="synthesizing"):
        engine.await_result(job_id, timeout=0.05)
    gate.open()
    assert engine.await_result(job_id, timeout=SLOW).state is JobState.DONE


def test_unsatisfied_witness_fails_with_a_reason_and_the_engine_keeps_serving(make_engine, circuits, tmp_path):
    c = circuits["small"]
    engine = make_engine()
    record = engine.await_result(engine.submit("small", unsatisfied_witness(c, tmp_path)), timeout=SLOW)
    assert record.state is JobState.FAILED and record.proof is None
    assert "self-verification" in record.error
    # With the r1cs registered the failing constraint is named before any MSM.
    engine.register_key("small", c.zkey, c.r1cs)
    record = engine.await_result(engine.submit("small", unsatisfied_witness(c, tmp_path)), timeout=SLOW)
    assert record.state is JobState.FAILED and "constraint" in record.error
    assert engine.await_result(engine.submit("small", c.witness), timeout=SLOW).state is JobState.DONE


def test_a_key_with_points_off_their_curve_fails_its_jobs_naming_the_key(make_engine, circuits, tmp_path):
    """A proving base off its curve gives a proof point off it, which the self-check's verifier refuses as malformed
    (not merely false): that was an internal error; a bad IC point failed the key's preparation the same way."""
    from cuzk.formats.binfile import BinFile

    c = circuits["small"]
    data = c.zkey.read_bytes()
    with BinFile(c.zkey, "zkey", 2) as f:
        offsets = {s.type: s.offset for s in f.sections}
    engine = make_engine(keys=())
    for section, problem in ((5, "proof A is not on the bn128 G1 curve: the key .* is corrupt"),
                             (3, r"section 3 \(IC points\): IC\[1\] is not a point of bn128 G1")):
        bad = tmp_path / f"bad{section}.zkey"
        at = offsets[section] + 64 + 3  # the second point's x
        bad.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
        engine.register_key(f"bad{section}", bad)
        record = engine.await_result(engine.submit(f"bad{section}", c.witness), timeout=SLOW)
        assert record.state is JobState.FAILED and re.search(problem, record.error), record.error
        assert not record.error.startswith("internal error") and str(bad) in record.error
    engine.register_key("small", c.zkey)
    assert engine.await_result(engine.submit("small", c.witness), timeout=SLOW).state is JobState.DONE


def test_a_key_registered_with_its_r1cs_holds_it_parsed_in_its_reservation(make_engine, circuits, tmp_path, monkeypatch):
    """The r1cs is parsed once, with the key's load, not per job: its bytes are in the key's reservation (the one
    budget), an unsatisfied witness is still refused naming its constraint, and evicting the key frees them."""
    import cuzk.keys.manager as manager

    c = circuits["small"]
    parsed: list[Path] = []
    read = manager.read_r1cs
    monkeypatch.setattr(manager, "read_r1cs", lambda path: parsed.append(path) or read(path))  # counts, then reads
    engine = make_engine(keys=())
    engine.register_key("small", c.zkey, c.r1cs)
    for _ in range(2):
        assert engine.await_result(engine.submit("small", c.witness), timeout=SLOW).state is JobState.DONE
    record = engine.await_result(engine.submit("small", unsatisfied_witness(c, tmp_path)), timeout=SLOW)
    assert record.state is JobState.FAILED and "constraint" in record.error
    assert parsed == [c.r1cs.resolve()]
    r1cs_bytes = 2 * c.r1cs.stat().st_size
    (key,) = engine.status()["keys"]
    assert key["r1cs"] == str(c.r1cs.resolve()) and key["r1cs_bytes"] == r1cs_bytes
    assert key["tier"] == "hot" and key["reserved_bytes"] == footprint(read_zkey_header(c.zkey), KeyTier.HOT) + r1cs_bytes
    keys_reserved = engine.budget.snapshot()["by_category"]["key"]["bytes"]
    assert engine.evict("small") == key["reserved_bytes"]
    assert engine.budget.snapshot()["by_category"]["key"]["bytes"] == keys_reserved - key["reserved_bytes"]
    # Loaded again for the next job, with its r1cs: the check still names the constraint.
    record = engine.await_result(engine.submit("small", unsatisfied_witness(c, tmp_path)), timeout=SLOW)
    assert record.state is JobState.FAILED and "constraint" in record.error and len(parsed) == 2


def test_an_internal_value_error_is_not_blamed_on_the_request(make_engine, circuits, monkeypatch):
    """A ValueError from the engine's own code (a numpy shape mistake, say) is an internal error, not bad input."""
    import cuzk.engine.workers as workers

    def broken(*args, **kwargs):
        raise ValueError("operands could not be broadcast together with shapes (8,) (9,)")

    engine = make_engine()
    monkeypatch.setattr(workers, "synthesize", broken)
    record = engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW)
    assert record.state is JobState.FAILED
    assert record.error.startswith("internal error: ValueError: operands could not be broadcast"), record.error
    monkeypatch.undo()
    assert engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW).state is JobState.DONE


def test_mismatched_or_garbage_witness_is_refused_at_submit(make_engine, circuits):
    engine = make_engine(keys=("small", "large"))
    with pytest.raises(ProvingError, match="signals"):
        engine.submit("small", circuits["large"].witness)
    with pytest.raises(ProvingError, match="bls12381"):
        engine.submit("small", circuits["bls"].witness)
    with pytest.raises(ValueError, match="wtns"):
        engine.submit("small", b"garbage")
    with pytest.raises(ValueError, match="unknown circuit key"):
        engine.submit("nope", circuits["small"].witness)
    with pytest.raises(ValueError, match="priority"):
        engine.submit("small", circuits["small"].witness, "urgent")
    assert engine.list_jobs() == []


def test_witness_by_path_is_copied_into_the_journal_and_proved(make_engine, circuits, tmp_path):
    c = circuits["small"]
    engine = make_engine()
    source = tmp_path / "w.wtns"
    source.write_bytes(c.witness)
    job_id = engine.submit("small", source, request_id="by-path")
    source.write_bytes(b"overwritten after submit")  # the journal holds its own copy
    record = engine.await_result(job_id, timeout=SLOW)
    assert record.state is JobState.DONE, record.error
    assert record.public_signals == [str(v) for v in synthesize_public(c)]
    assert engine.submit("small", c.witness, request_id="by-path") == job_id  # same witness, by bytes: the same job
    other = tmp_path / "other.wtns"
    other.write_bytes(c.witness)
    seen = FileIdentity.of(os.stat(other))  # what a caller saw at the path: the file the engine opens must be it
    assert engine.await_result(engine.submit("small", other, witness_identity=seen), timeout=SLOW).state is JobState.DONE
    with pytest.raises(WitnessFileError, match="is not the file the caller named"):
        engine.submit("small", source, witness_identity=seen)  # another file (another inode) at the path
    os.utime(other, ns=(seen.mtime_ns + 10**9, seen.mtime_ns + 10**9))
    with pytest.raises(WitnessFileError, match="or one changed since"):
        engine.submit("small", other, witness_identity=seen)
    unsatisfied_witness(c, tmp_path)  # writes bad.wtns: another witness of the right shape
    with pytest.raises(RequestIdConflict):
        engine.submit("small", str(tmp_path / "bad.wtns"), request_id="by-path")


def test_bad_witness_paths_are_refused_before_anything_is_copied(make_engine, circuits, tmp_path):
    engine = make_engine(keys=("small", "large"))
    with pytest.raises(WitnessFileError, match=f"cannot open the witness file '{tmp_path}/missing.wtns': No such file"):
        engine.submit("small", tmp_path / "missing.wtns")
    with pytest.raises(WitnessFileError, match="embedded null byte"):
        engine.submit("small", f"{tmp_path}/a\0b.wtns")
    with pytest.raises(WitnessFileError, match="is not a regular file"):
        engine.submit("small", tmp_path)
    fifo = tmp_path / "fifo.wtns"
    os.mkfifo(fifo)  # opened without blocking, then refused: no writer ever comes
    with pytest.raises(WitnessFileError, match="is not a regular file"):
        engine.submit("small", fifo)
    with pytest.raises(JobError, match=r"more than a witness of this circuit's \d+ values"):
        engine.submit("small", circuits["large"].wtns)  # sized against the key's header, before the copy
    with pytest.raises(ProvingError, match="bls12381"):
        engine.submit("small", circuits["bls"].wtns)
    truncated = tmp_path / "truncated.wtns"
    truncated.write_bytes(circuits["small"].witness[:-40])
    with pytest.raises(ValueError, match="wtns"):
        engine.submit("small", truncated)
    assert engine.list_jobs() == []
    assert list(engine.journal.witness_dir.iterdir()) == []  # nothing half-written was kept


def test_job_larger_than_the_whole_budget_fails_at_once(make_engine, circuits):
    _, _, key_load = sizes(circuits["small"])
    engine = make_engine(budget=key_load + 1)  # the key loads, the job cannot fit beside it
    record = engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW)
    assert record.state is JobState.FAILED and "more than the whole budget" in record.error


def test_budget_is_never_exceeded_while_several_jobs_run(make_engine, circuits):
    key, work, key_load = sizes(circuits["large"])
    budget = max(key + work + work // 2, key_load)  # one working set at a time
    assert budget < key + 2 * work
    engine = make_engine(budget=budget, keys=("large",), synth_workers=2)
    ids = [engine.submit("large", circuits["large"].witness) for _ in range(3)]
    for job_id in ids:
        assert engine.await_result(job_id, timeout=SLOW).state is JobState.DONE
    snap = engine.budget.snapshot()
    # The budget's peak, not the jobs' states, shows admission: the finisher gives a job's memory back before it
    # journals the result, so the next job may be SYNTHESIZING while this one is not yet DONE.
    assert key + work <= snap["peak_reserved_bytes"] <= budget  # each job held its working set; two never did
    assert snap["reserved_bytes"] == key  # only the (idle, hot) key remains


def test_two_circuits_share_a_budget_that_holds_one_key(make_engine, circuits):
    """Alternating circuits on a budget for one key + one job: each load evicts the other idle key."""
    sizes_small, sizes_bls = sizes(circuits["small"]), sizes(circuits["bls"])
    budget = max(k + w for k, w, _ in (sizes_small, sizes_bls)) + min(k for k, _, _ in (sizes_small, sizes_bls)) // 2
    budget = max(budget, sizes_small[2], sizes_bls[2])
    engine = make_engine(budget=budget, keys=("small", "bls"))
    for name in ("small", "bls", "small"):
        assert engine.await_result(engine.submit(name, circuits[name].witness), timeout=SLOW).state is JobState.DONE
    keys = {k["name"]: k for k in engine.status()["keys"]}
    assert keys["small"]["loads"] == 2 and keys["bls"]["evictions"] == 1
    assert engine.budget.snapshot()["peak_reserved_bytes"] <= budget


def test_sigkilled_engine_loses_no_job(circuits, tmp_path):
    """A child engine is SIGKILLed mid-proof; a new engine on the data dir replays and finishes both jobs."""
    c = circuits["small"]
    data_dir = tmp_path / "data"
    code = textwrap.dedent(f"""
        import threading
        from cuzk.engine import Engine, EngineConfig, JobState
        from cuzk.memory.budget import MemoryBudget
        engine = Engine(EngineConfig(data_dir={str(data_dir)!r}, backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
        engine.register_key("small", {str(c.zkey)!r})
        proving = threading.Event()
        engine.add_listener(lambda j, s: (proving.set(), threading.Event().wait()) if s is JobState.PROVING else None)
        w = open({str(c.wtns)!r}, "rb").read()
        ids = [engine.submit("small", w, request_id="a"), engine.submit("small", w, request_id="b")]
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
    assert states[ids[0]] is JobState.SYNTHESIZING  # killed mid-proof: journaled as started (PROVING is live state only)
    assert not states[ids[1]].terminal  # queued, or being synthesized beside it

    engine = Engine(EngineConfig(data_dir=data_dir, backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
    try:
        assert engine.keys.names() == ["small"]  # the registration survived too
        engine.start()
        for job_id in ids:
            record = engine.await_result(job_id, timeout=SLOW)
            assert record.state is JobState.DONE, record.error
        assert engine.get(ids[0]).attempts == 2
    finally:
        engine.stop()


def test_threads_launch_parallel_kernels_safely_on_numbas_workqueue_layer(circuits, tmp_path):
    """Where numba has neither TBB nor OpenMP it uses workqueue, which kills the process when two threads
    launch parallel kernels at once; synthesis beside a CPU proof does. The launches take turns there."""
    c = circuits["large"]
    code = textwrap.dedent(f"""
        import numba
        from cuzk.engine import Engine, EngineConfig
        from cuzk.memory.budget import MemoryBudget
        engine = Engine(EngineConfig(data_dir={str(tmp_path / "data")!r}, backend="cpu", reconcile=False, synth_workers=2),
                        budget=MemoryBudget(1 << 30))
        engine.register_key("large", {str(c.zkey)!r})
        with engine:
            jobs = [engine.submit("large", {str(c.wtns)!r}) for _ in range(6)]
            states = [engine.await_result(j, timeout=600).state.value for j in jobs]
        print(numba.threading_layer(), *states)  # known once a parallel kernel has run
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=900,
                         env={**os.environ, "NUMBA_THREADING_LAYER": "workqueue"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["workqueue"] + ["done"] * 6


@pytest.mark.parametrize("journal_fsync", [True, 0.5, False])
def test_stop_leaves_jobs_for_the_next_engine_and_locks_the_data_dir(make_engine, circuits, tmp_path, journal_fsync):
    engine = make_engine(start=False, journal_fsync=journal_fsync)
    assert engine.journal.fsync == journal_fsync
    w = circuits["small"].witness
    job_id = engine.submit("small", w)
    with pytest.raises(DataDirLocked):
        Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", reconcile=False), budget=MemoryBudget(1 << 30))
    engine.stop()
    with pytest.raises(EngineStopped):
        engine.await_result(job_id, timeout=1)
    with pytest.raises(EngineStopped):
        engine.submit("small", w)
    again = make_engine(keys=(), journal_fsync=journal_fsync)  # the key comes back from the journal
    assert again.await_result(job_id, timeout=SLOW).state is JobState.DONE


def test_a_job_that_keeps_killing_the_engine_is_abandoned(make_engine, circuits, tmp_path):
    journal = Journal(tmp_path / "data")
    record, _ = journal.submit("small", Priority.NORMAL, circuits["small"].witness)
    for _ in range(3):
        journal.mark_started(record.job_id)
    journal.close()
    engine = make_engine(max_attempts=3)
    result = engine.await_result(record.job_id, timeout=5)
    assert result.state is JobState.FAILED and "abandoned" in result.error


def test_measured_peak_calibrates_later_reservations(make_engine):
    engine = make_engine(start=False)
    estimate = engine.working_set("small")
    assert estimate.measured_bytes is None and estimate.total_bytes == estimate.estimated_bytes
    engine.record_peak("small", estimate.estimated_bytes * 3)
    raised = engine.working_set("small")
    assert raised.total_bytes == estimate.estimated_bytes * 3 and raised.abc_bytes == estimate.abc_bytes
    assert engine.record_peak("small", 1) == estimate.estimated_bytes * 3  # the largest is kept
    assert engine.status()["peaks"] == {"small": {"cpu": estimate.estimated_bytes * 3}}


def test_a_measured_run_calibrates_the_circuits_reservation_to_within_1_2x_of_its_peak(make_engine, circuits):
    """The engine measures a job that runs alone (after the circuit's first, JIT-warming run) and keeps its peak;
    the next reservation is in [1, CALIBRATION_HEADROOM]× it, whichever side of it the header's arithmetic was."""
    if not PeakProbe().available:
        pytest.skip("no /proc/self/clear_refs here: peaks cannot be measured")
    engine = make_engine(measure_peaks=True, keys=("large",))
    for _ in range(2):
        assert engine.await_result(engine.submit("large", circuits["large"].witness), timeout=300).state is JobState.DONE
    peak = engine.status()["peaks"]["large"]["cpu"]
    reserved = engine.working_set("large").total_bytes
    assert peak <= reserved <= CALIBRATION_HEADROOM * peak, (peak, reserved, engine.working_set("large").estimated_bytes)


def _admitted(engine: Engine, circuit: str = "small"):
    """A job of ``circuit`` admitted by the engine's admission directly (no workers): its grant measures what the test
    allocates while it is held."""
    from cuzk.engine.tracker import LiveJob

    record, _ = engine.journal.submit(circuit, Priority.NORMAL, b"unused: no worker reads it")
    return engine.admission.admit(LiveJob(record))


def _touch(nbytes: int) -> mmap.mmap:
    """``nbytes`` of anonymous memory, every page written, in a mapping of its own: dropping it unmaps it, whatever
    malloc's thresholds have become in this process (after earlier tests freed large blocks, glibc serves 16 MiB
    from its heap and keeps it resident when freed, which a later window would then see)."""
    block = mmap.mmap(-1, nbytes)
    np.frombuffer(block, dtype=np.uint8)[:] = 1
    return block


def test_a_job_that_waits_for_memory_nothing_will_free_is_refused_not_left_waiting(make_engine, monkeypatch):
    """No job runs and no key loads, yet the budget cannot give a job its bytes (here the reconciler's usable total
    shrank under it): after STUCK_WAIT_S it fails naming what holds the memory, instead of waiting forever."""
    from cuzk.engine import admission as admission_module

    monkeypatch.setattr(admission_module, "STUCK_WAIT_S", 0.3)
    engine = make_engine(start=False)
    need = engine.working_set("small").total_bytes
    engine.budget.set_effective_limit(engine.budget.reserved_bytes + need // 2)
    with pytest.raises(JobTooLarge, match=r"with no job running: the engine's own memory .* it cannot run here"):
        _admitted(engine)
    assert engine.budget.snapshot()["waiters"] == 0 and engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0
    engine.budget.set_effective_limit(None)  # room again: the next job is admitted
    _admitted(engine).release()


def test_the_engines_own_memory_is_measured_and_reserved_while_a_job_waits_for_memory(tmp_path, circuits, monkeypatch):
    """The runtime reservation grows while a job waits (nothing running, no key loading), not only once nobody waits:
    64 MiB the engine's process took after its runtime was measured (as a restarted engine's replayed jobs find it,
    measured cold) is reserved before the waiting job is refused, and the refusal names that figure."""
    from cuzk.engine import admission as admission_module
    from cuzk.memory.units import format_size

    monkeypatch.setattr(admission_module, "STUCK_WAIT_S", 0.3)
    from conftest import planned_budget_bytes

    # The engine plans its budget, so it measures its own memory: this test process's, however large earlier tests left it.
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", backend="cpu", key_idle_evict_s=0, reconcile=False,
                                 budget_bytes=planned_budget_bytes()))
    try:
        engine.register_key("small", circuits["small"].zkey)
        before = engine.runtime.nbytes
        grown = _touch(64 << 20)  # the process's own memory, resident and reserved by nobody
        need = engine.working_set("small").total_bytes
        engine.budget.set_effective_limit(engine.budget.reserved_bytes + need // 2)
        with pytest.raises(JobTooLarge, match="with no job running") as refused:
            _admitted(engine)
        assert engine.runtime.nbytes - before >= 60 << 20, (before, engine.runtime.nbytes)
        assert f"{format_size(engine.runtime.nbytes)} reserved" in str(refused.value)
        assert engine.budget.snapshot()["by_category"]["working"]["bytes"] == 0
        del grown
    finally:
        engine.stop()


def test_jobs_that_always_overlap_still_calibrate_their_circuit_from_a_shared_peak(make_engine):
    """Two jobs admitted together, each allocating 16 MiB, never run alone: the window in which both hold their
    memory (32 MiB read from the kernel's high-water mark) is attributed in proportion to their reservations, 16 MiB
    each, and once a job ends the circuit's reservation becomes [1, CALIBRATION_HEADROOM]× that."""
    if not PeakProbe().available:
        pytest.skip("no /proc/self/clear_refs here: peaks cannot be measured")
    engine = make_engine(start=False, measure_peaks=True)
    _admitted(engine).release()  # the circuit's first job in this process is never measured (numba's JIT)
    assert engine.status()["peaks"] == {}
    a, b = _admitted(engine), _admitted(engine)  # the window {a} closed before a allocated anything ...
    blocks = [_touch(16 << 20), _touch(16 << 20)]
    del blocks
    assert engine.status()["peaks"] == {}  # ... and lowers nothing: a job's share counts once its whole life was seen
    a.release()  # closes the window {a, b}: both blocks were alive in it, and only in it
    b.release()
    peak = engine.status()["peaks"]["small"]["cpu"]
    assert (15 << 20) <= peak <= (18 << 20), peak  # RSS counters lag by a few pages; the allocator's own pages add a few
    reserved = engine.working_set("small").total_bytes
    assert peak <= reserved <= CALIBRATION_HEADROOM * peak


def test_a_peak_reached_alone_is_kept_beside_a_smaller_shared_one(make_engine):
    """One job allocates 24 MiB alone, then beside a second one that allocates 8 MiB: the shared window implies
    16 MiB per job, but the circuit keeps the 24 MiB one job reached by itself."""
    if not PeakProbe().available:
        pytest.skip("no /proc/self/clear_refs here: peaks cannot be measured")
    engine = make_engine(start=False, measure_peaks=True)
    _admitted(engine).release()
    a = _admitted(engine)
    first = _touch(24 << 20)
    b = _admitted(engine)  # closes the window {a}
    second = _touch(8 << 20)
    del first
    a.release()
    del second
    b.release()
    peak = engine.status()["peaks"]["small"]["cpu"]
    assert (23 << 20) <= peak <= (26 << 20), peak


def test_a_key_loaded_while_jobs_run_spoils_the_measurement_until_the_engine_is_idle(make_engine):
    """A key loaded beside running jobs moves memory the baseline does not describe: nothing is attributed until the
    engine is next idle, and from then on it measures again."""
    if not PeakProbe().available:
        pytest.skip("no /proc/self/clear_refs here: peaks cannot be measured")
    engine = make_engine(start=False, measure_peaks=True, keys=("small", "large"))
    _admitted(engine).release()
    a = _admitted(engine)
    lease = engine.keys.acquire("large")  # a load beside the job
    block = _touch(16 << 20)
    del block
    a.release()
    lease.release()
    assert engine.status()["peaks"] == {}
    a = _admitted(engine)
    block = _touch(16 << 20)
    del block
    a.release()
    assert (15 << 20) <= engine.status()["peaks"]["small"]["cpu"] <= (18 << 20)


def proofs_made(engine: Engine) -> int:
    """Proofs the proving workers have made, whether or not the finishing thread has ended their jobs yet."""
    return sum(w["jobs_done"] for w in engine.status()["workers"] if w["kind"] == "proving")


def test_proving_is_live_state_and_the_prover_does_not_wait_for_the_journal(make_engine, circuits):
    engine = make_engine(start=False)
    proving, done = Gate(JobState.PROVING), Gate(JobState.DONE)
    engine.add_listener(proving)
    engine.add_listener(done)
    first, second = (engine.submit("small", circuits["small"].witness) for _ in range(2))
    engine.start()
    assert proving.wait() == first
    assert engine.get(first).state is JobState.PROVING  # live, while the journal keeps it as started
    assert engine.journal.get(first).state is JobState.SYNTHESIZING
    assert [r.job_id for r in engine.list_jobs(states=["proving"])] == [first]
    assert engine.status()["jobs"]["by_state"]["proving"] == 1
    proving.open()
    assert done.wait() == first  # the finishing thread is held in the DONE listener...
    wait_until(lambda: proofs_made(engine) == 2, SLOW)
    assert engine.get(second).state is JobState.PROVING  # ...while the prover has proved the next job
    done.open()
    assert engine.await_result(second, timeout=SLOW).state is JobState.DONE


def test_proofs_that_wait_for_the_finisher_are_journaled_in_one_commit(make_engine, circuits, monkeypatch):
    """While the finishing thread is busy (here: held), the proofs made meanwhile queue for it; it journals them
    together (``Journal.finish_many``: one fsync'd commit), and each is answered."""
    engine = make_engine(start=False)
    done = Gate(JobState.DONE)
    engine.add_listener(done)
    jobs = [engine.submit("small", circuits["small"].witness) for _ in range(4)]
    batches, finish_many = [], engine.journal.finish_many
    monkeypatch.setattr(engine.journal, "finish_many", lambda outcomes: batches.append([o[0] for o in outcomes]) or finish_many(outcomes))
    engine.start()
    first = done.wait()
    wait_until(lambda: proofs_made(engine) == 4, SLOW)
    done.open()
    for job in jobs:
        assert engine.await_result(job, timeout=SLOW).state is JobState.DONE
    assert batches[0] == [first] and sorted(batches[1]) == sorted(set(jobs) - {first}) and len(batches) == 2


def test_stop_keeps_a_proof_that_was_waiting_to_be_finished(make_engine, circuits):
    engine = make_engine(start=False)
    done = Gate(JobState.DONE)
    engine.add_listener(done)
    first, second = (engine.submit("small", circuits["small"].witness) for _ in range(2))
    engine.start()
    assert done.wait() == first  # the finishing thread is held while the second proof is made
    wait_until(lambda: proofs_made(engine) == 2, SLOW)
    stopping = threading.Thread(target=engine.stop)
    stopping.start()
    wait_until(lambda: not engine.status()["running"])
    done.open()
    stopping.join(60)
    assert not stopping.is_alive()
    journal = Journal(engine.config.data_dir)
    assert journal.get(second).state is JobState.DONE and journal.get(second).proof is not None  # not left to replay


def test_status_reports_budget_keys_jobs_and_workers(make_engine, circuits):
    engine = make_engine()
    engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW)
    status = engine.status()
    assert status["running"]
    assert set(status["budget"]["by_category"]) == {"key", "pinned", "working", "transient", "runtime"}
    assert status["keys"][0]["name"] == "small" and status["keys"][0]["tier"] == "hot"
    assert status["jobs"]["by_state"]["done"] == 1
    assert sorted(w["kind"] for w in status["workers"]) == ["finishing", "housekeeping", "proving", "synthesis"]
    assert engine.evict("small") > 0 and engine.status()["keys"][0]["tier"] == "cold"
    assert engine.preload("small") == "hot"


def test_engine_config_from_the_daemon_table(tmp_path):
    cfg = EngineConfig.from_mapping(tmp_path, {"load_chunk_bytes": "8MiB", "verify": False, "synth_workers": 2})
    assert cfg.load_chunk_bytes == 8 << 20 and cfg.verify is False and cfg.data_dir == tmp_path
    with pytest.raises(ValueError, match="unknown setting"):
        EngineConfig.from_mapping(tmp_path, {"nonsense": 1})
    with pytest.raises(ValueError, match="synth_workers"):
        EngineConfig(data_dir=tmp_path, synth_workers=0)
    assert EngineConfig.from_mapping(tmp_path, {"cpu_msm_tables": False}).cpu_msm_tables is False
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError, match="cpu_msm_tables"):
            EngineConfig(data_dir=tmp_path, cpu_msm_tables=bad)
    assert EngineConfig(data_dir=tmp_path).device_processes == "auto"
    with pytest.raises(ValueError, match="device_processes must be true, false or \"auto\""):
        EngineConfig(data_dir=tmp_path, device_processes="yes")
    assert EngineConfig(data_dir=tmp_path).journal_fsync == 1.0  # on the disk within a second (engine/config.py says why)
    assert EngineConfig.from_mapping(tmp_path, {"journal_fsync": False}).journal_fsync is False
    assert EngineConfig.from_mapping(tmp_path, {"journal_fsync": 0.5}).journal_fsync == 0.5
    for bad in ("no", 0, -1.0, 61):
        with pytest.raises(ValueError, match="journal_fsync must be true, false or a delay in seconds"):
            EngineConfig(data_dir=tmp_path, journal_fsync=bad)


def test_default_budget_from_the_real_limit_and_supervisor_heartbeat(circuits, tmp_path):
    """Without a given budget the engine plans one from the machine's limits and runs the reconciler."""
    config = EngineConfig(data_dir=tmp_path / "data", backend="cpu", heartbeat=True, housekeeping_interval_s=0.05)
    with Engine(config) as engine:
        assert 0 < engine.budget.total_bytes and engine.reconciler is not None
        engine.register_key("small", circuits["small"].zkey)
        assert engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW).state is JobState.DONE
        state_file = tmp_path / "data" / "run" / "engine-state.json"
        wait_until(lambda: state_file.exists() and json.loads(state_file.read_text())["jobs_finished"] == 1)
        state = json.loads(state_file.read_text())
        assert state["budget_total"] == engine.budget.total_bytes and state["charged_bytes"] > 0
        assert engine.status()["reconciler"]["latest"]["source"] in ("cgroup", "meminfo", "rss")


def test_warm_tier_engine_proves_from_the_mapping(make_engine, circuits):
    engine = make_engine(key_tier="warm")
    assert engine.await_result(engine.submit("small", circuits["small"].witness), timeout=SLOW).state is JobState.DONE
    key = engine.status()["keys"][0]
    assert key["tier"] == "warm" and key["reserved_bytes"] == key["warm_bytes"]
