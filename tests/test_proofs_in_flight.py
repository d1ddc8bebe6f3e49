"""Several proofs in flight on one device: lanes of their own streams, VRAM reserved per proof, K from the budget.

The default tests run on devices emulated by the CUDA backend's host runtime (as test_multi_device.py
does); the ``gpu`` test proves K proofs at once on a real one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import planned_budget_bytes, snarkjs_verify_all
from test_engine import write_result
from cuzk.backends.cuda import CudaBackend, HostRuntime, VramBudget, VramExhaustedError, available
from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.curves import BN254
from cuzk.engine import Engine, EngineConfig, JobState
from cuzk.formats.json_io import write_vkey
from cuzk.formats.wtns import read_wtns
from cuzk.formats.zkey import read_zkey
from cuzk.memory.budget import MemoryBudget
from cuzk.memory.pinned import PageAlignedAllocator, PinnedPool
from cuzk.memory.units import format_size
from cuzk.prover.groth16 import prove_synthesized, synthesize as synthesize_witness
from cuzk.prover.setup import setup
from cuzk.prover.sizing import MAX_PROOFS_PER_DEVICE, bases_bytes, coefficient_bytes, proof_vram_bytes, proofs_in_flight
from cuzk.prover.verify import verify, vkey_from_zkey
from emulated_devices import FailingRuntime, emulated
from test_multi_device import PoolStaging

MiB = 1 << 20


@pytest.fixture(scope="module")
def circuit(tmp_path_factory) -> tuple[Path, Path]:
    """A small BN254 circuit of the project's own: (zkey, wtns)."""
    d = tmp_path_factory.mktemp("inflight")
    r1cs, wtns = write_synthetic(d, synthesize(BN254, 40, n_public=2, seed=21))
    setup(r1cs, d / "circuit.zkey")
    return d / "circuit.zkey", wtns


def start_engine(tmp_path: Path, circuit, backends, **config) -> Engine:
    config = {"synth_workers": 3, **config}
    return Engine(EngineConfig(data_dir=tmp_path / "data", budget_bytes=planned_budget_bytes(), reconcile=False, measure_peaks=False,
                               keys={"c": str(circuit[0])}, **config), backends=backends).start()


def wait_until(condition, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


class RendezvousRuntime(HostRuntime):
    """Holds each proving thread at its first MSM kernel until ``parties`` threads are inside an MSM at once: the
    proofs really overlap on the device (a BrokenBarrierError fails the job when they never do)."""

    def __init__(self, parties: int):
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=120)
        self.met: set[str] = set()

    def launch(self, module, kernel, grid, block, args, shared_bytes=0):
        name = threading.current_thread().name
        if kernel == "msm_count" and name not in self.met:
            self.barrier.wait()  # outside the emulation's launch lock, so the others can get here
            self.met.add(name)
        return super().launch(module, kernel, grid, block, args, shared_bytes)


class GateRuntime(HostRuntime):
    """Holds the first MSM kernel launched after ``arm()`` until ``open``: a proof caught on the device."""

    def __init__(self):
        super().__init__()
        self.armed = False
        self.reached, self.opened = threading.Event(), threading.Event()

    def launch(self, module, kernel, grid, block, args, shared_bytes=0):
        if kernel == "msm_count" and self.armed:
            self.armed = False
            self.reached.set()
            assert self.opened.wait(120)
        return super().launch(module, kernel, grid, block, args, shared_bytes)


class InsideLanes:
    """Counts the proofs inside their lanes on ``backend`` at once (``most``): wraps the lanes it makes."""

    def __init__(self, backend):
        self.inside = self.most = 0
        self._lock = threading.Lock()
        make = backend.new_lane
        backend.new_lane = lambda: _CountedLane(make(), self)

    def change(self, by: int) -> None:
        with self._lock:
            self.inside += by
            self.most = max(self.most, self.inside)


class _CountedLane:
    def __init__(self, lane, counter: InsideLanes):
        self.lane, self.counter = lane, counter

    def __enter__(self):
        self.counter.change(+1)
        return self.lane.__enter__()

    def __exit__(self, *exc):
        try:
            return self.lane.__exit__(*exc)
        finally:
            self.counter.change(-1)

    def close(self) -> None:
        self.lane.close()


class Stream:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Event:
    """A point in one stream's work (the emulation's work is done by the time it is recorded)."""

    def __init__(self, stream):
        self.stream = stream

    def synchronize(self) -> None:
        pass


class StreamCheckingRuntime(HostRuntime):
    """Host emulation that keeps CuPy's stream bookkeeping: a current stream per thread, events that remember their
    stream, and a record of the stream each kernel, copy and wait went to."""

    def __init__(self):
        super().__init__()
        self._current = threading.local()
        self._made = 0
        self.launches: list[tuple[str, object]] = []  # (thread, stream)
        self.copies: list[tuple[object, object]] = []  # (copy stream, the event it waited for)
        self.waits: list[tuple[object, object]] = []  # (waiting stream, event)

    def new_stream(self):
        self._made += 1
        return Stream(f"stream-{self._made}")

    @contextlib.contextmanager
    def use_stream(self, stream):
        before = getattr(self._current, "stream", None)
        self._current.stream = stream
        try:
            yield
        finally:
            self._current.stream = before

    def stream(self):
        return getattr(self._current, "stream", None)

    def compute_event(self):
        return Event(self.stream())

    def copy_async(self, out, host, after, stream):
        self.copies.append((stream, after))
        super().copy_async(out, host, after, stream)
        return Event(stream)

    def wait_event(self, event) -> None:
        self.waits.append((self.stream(), event))

    def launch(self, module, kernel, grid, block, args, shared_bytes=0):
        self.launches.append((threading.current_thread().name, self.stream()))
        return super().launch(module, kernel, grid, block, args, shared_bytes)


# ---------------------------------------------------------------- lanes and reservations in the backend
def test_each_proof_runs_on_its_own_lane_streams(circuit):
    """Two proofs on one device at once: every kernel on its lane's compute stream, every upload on its lane's copy
    stream after an event of that compute stream, and the wait for it on that compute stream."""
    zkey = read_zkey(circuit[0])
    runtime = StreamCheckingRuntime()
    backend = emulated(0, runtime=runtime)
    backend.attach_staging(PoolStaging(PinnedPool(MemoryBudget(64 * MiB), PageAlignedAllocator())))
    witness = read_wtns(circuit[1])
    lanes = [backend.new_lane() for _ in range(2)]
    proofs, start = [None, None], threading.Barrier(2, timeout=60)

    def prove(i: int) -> None:
        synthesis = synthesize_witness(zkey, witness)
        start.wait()
        with lanes[i]:
            proofs[i] = prove_synthesized(backend, zkey, synthesis)

    threads = [threading.Thread(target=prove, args=(i,), name=f"lane-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert all(verify(vkey_from_zkey(zkey), p.public_signals, p) for p in proofs)
    compute = {f"lane-{i}": lane.compute for i, lane in enumerate(lanes)}
    assert {(thread, stream) for thread, stream in runtime.launches} == set(compute.items())
    copy_of = {lane.compute: lane.copy for lane in lanes}
    assert runtime.copies and all(after is not None and copy_of[after.stream] is stream for stream, after in runtime.copies)
    assert runtime.waits and all(copy_of[stream] is event.stream for stream, event in runtime.waits)
    for lane in lanes:
        lane.close()


def test_concurrent_msm_plans_reserve_and_never_overcommit(circuit):
    """The chunk plan is the reservation: a second MSM planned while the first holds the budget gets what is left."""
    zkey = read_zkey(circuit[0])
    n = zkey.n_vars
    probe = emulated(0)
    whole = probe.msm_working_bytes(BN254, "g1", n)
    smallest = probe.msm_working_bytes(BN254, "g1", 8, buffers=2)
    backend = CudaBackend(runtime=HostRuntime(), min_msm_chunk=8, vram_budget=VramBudget(whole + smallest))
    with backend.msm.plan(BN254, "g1", n) as first:
        assert first.chunk == n and backend.vram.reserved_bytes == whole
        with backend.msm.plan(BN254, "g1", n) as second:  # reading available_bytes would have said "whole" again
            assert second.chunk < n
            assert backend.vram.reserved_bytes <= backend.vram.total_bytes
    assert backend.vram.reserved_bytes == 0
    backend.vram.reserve(whole + 1, "a tenant that no MSM waits for")  # not transient: waiting could not help
    with pytest.raises(VramExhaustedError, match="too little for even 8 points"):
        backend.msm.plan(BN254, "g1", n)


class PeakVram(VramBudget):
    """A VRAM budget that remembers the most it ever had reserved."""

    peak = 0

    def reserve(self, nbytes, what, **options):
        reservation = super().reserve(nbytes, what, **options)
        self.peak = max(self.peak, self.reserved_bytes)
        return reservation


def test_concurrent_msms_on_one_device_stay_within_its_budget(circuit):
    zkey = read_zkey(circuit[0])
    n = zkey.n_vars
    rng = np.random.default_rng(8)
    scalars = rng.integers(0, 1 << 32, size=(4, n, 8), dtype=np.uint32)
    scalars[..., 7] &= 0x0FFFFFFF  # below r
    reference = emulated(0)
    resident = reference.upload_bases(BN254, "g1", zkey.a)
    want = [reference.msm_g1(BN254, resident, s) for s in scalars]
    budget = PeakVram(reference.msm_working_bytes(BN254, "g1", n) + reference.msm_working_bytes(BN254, "g1", 16, buffers=2))
    backend = CudaBackend(runtime=HostRuntime(), min_msm_chunk=8, vram_budget=budget)
    got, start = [None] * len(scalars), threading.Barrier(len(scalars), timeout=60)

    def run(i: int) -> None:
        with backend.new_lane() as lane:
            start.wait()
            got[i] = backend.msm_g1(BN254, zkey.a, scalars[i])
        lane.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(scalars))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert got == want
    assert 0 < budget.peak <= budget.total_bytes and budget.reserved_bytes == 0


class NoRoomForVectors(VramBudget):
    """A budget that never has room for a proof's vectors (as when other lanes' proofs hold it), and logs the rest."""

    def __init__(self, total_bytes: int):
        super().__init__(total_bytes)
        self.reserved: list[tuple[str, int]] = []

    def reserve(self, nbytes, what, **options):
        if what == "proof vectors":
            raise VramExhaustedError("no room for them in this test")
        self.reserved.append((what, nbytes))
        return super().reserve(nbytes, what, **options)


def test_a_proof_whose_vectors_do_not_fit_reserves_each_operations_copies(circuit):
    zkey = read_zkey(circuit[0])
    budget = NoRoomForVectors(256 * MiB)
    backend = CudaBackend(runtime=HostRuntime(), vram_budget=budget)
    proof = prove_synthesized(backend, zkey, synthesize_witness(zkey, read_wtns(circuit[1])))
    assert verify(vkey_from_zkey(zkey), proof.public_signals, proof)
    kinds = {what for what, _ in budget.reserved}
    assert {"an Fr vector op's host operands and result", "an NTT's host vector"} <= kinds
    tables = sum(n for what, n in budget.reserved if "twiddles" in what or "coset factors" in what)
    assert budget.reserved_bytes == tables  # every operation's copies and MSM working set given back


# ---------------------------------------------------------------- K from the VRAM budget
def test_proofs_in_flight_fit_beside_the_largest_key(circuit):
    header = read_zkey(circuit[0])
    probe = emulated(0)
    bases, proof = bases_bytes(header), proof_vram_bytes(header, probe)
    room_for_two = emulated(0, vram_bytes=bases + 2 * proof + proof // 2)
    assert proofs_in_flight("auto", room_for_two, [header]).proofs == 2
    lowered = proofs_in_flight(3, room_for_two, [header])
    resident = bases + coefficient_bytes(header)  # the coefficients fit too: synthesis runs on the device, beside them
    assert lowered.proofs == 2 and lowered.lowered and (lowered.bases_bytes, lowered.proof_bytes) == (resident, proof)
    assert proofs_in_flight("auto", probe, [header]).proofs == MAX_PROOFS_PER_DEVICE  # 256 MiB: capped
    assert proofs_in_flight("auto", probe, []).proofs == MAX_PROOFS_PER_DEVICE  # no key yet
    assert not proofs_in_flight(2, probe, [header]).lowered
    too_small = emulated(0, vram_bytes=bases)  # not even one proof beside the bases: one, proved from host memory
    assert proofs_in_flight("auto", too_small, [header]).proofs == 1


@pytest.mark.parametrize("value", [0, -2, 1.5, True, "many"])
def test_proofs_per_device_must_be_auto_or_a_positive_count(tmp_path, value):
    with pytest.raises(ValueError, match="proofs_per_device"):
        EngineConfig(data_dir=tmp_path, proofs_per_device=value)


def test_a_configured_count_that_does_not_fit_is_lowered_and_logged(circuit, tmp_path, caplog):
    header = read_zkey(circuit[0])
    probe = emulated(0)
    bases, proof = bases_bytes(header), proof_vram_bytes(header, probe)
    device = emulated(0, vram_bytes=bases + 2 * proof + proof // 2)
    with caplog.at_level(logging.WARNING, logger="cuzk.engine"):
        engine = start_engine(tmp_path, circuit, [device], proofs_per_device=4, synth_workers="auto")
    with engine:
        records = [engine.await_result(engine.submit("c", circuit[1].read_bytes()), timeout=300) for _ in range(2)]
        status = engine.status()
    assert [r.state for r in records] == [JobState.DONE] * 2, [r.error for r in records]
    [line] = [r.getMessage() for r in caplog.records if "proofs_per_device" in r.getMessage()]
    assert "device 0: proofs_per_device = 4 lowered to 2" in line
    resident = bases + coefficient_bytes(header)  # the coefficients fit beside the bases: synthesis on the device
    assert all(format_size(n) in line for n in (proof, resident, device.vram.total_bytes)), line
    assert status["config"]["proofs_per_device"] == [2] and status["config"]["synth_workers"] == 3  # auto: K + 1
    assert [w["name"] for w in status["workers"] if w["kind"] == "proving"] == ["prove-0-0", "prove-0-1"]  # never 4


# ---------------------------------------------------------------- the engine
def test_k_proofs_overlap_on_one_device_and_snarkjs_accepts_them(circuit, tmp_path):
    runtime = RendezvousRuntime(parties=2)
    device = emulated(0, runtime=runtime)
    proving: set[str] = set()
    most = [0]
    lock = threading.Lock()

    def track(job_id: str, state: JobState) -> None:
        with lock:
            (proving.add if state is JobState.PROVING else proving.discard)(job_id)
            most[0] = max(most[0], len(proving))

    lanes = InsideLanes(device)
    engine = start_engine(tmp_path, circuit, [device], proofs_per_device=2)
    engine.add_listener(track)
    with engine:
        jobs = [engine.submit("c", circuit[1].read_bytes()) for _ in range(4)]
        records = [engine.await_result(j, timeout=300) for j in jobs]
        status = engine.status()
    assert [r.state for r in records] == [JobState.DONE] * 4, [r.error for r in records]
    assert runtime.met == {"cuzk-prove-0-0", "cuzk-prove-0-1"}  # both lanes were inside an MSM at once
    assert most[0] >= 2  # two jobs PROVING on the one device at once (a proved one stays so until it is verified)
    assert lanes.most == 2  # and two proofs inside their lanes at once
    provers = [w for w in status["workers"] if w["kind"] == "proving"]
    assert all(w["jobs_done"] > 0 for w in provers) and sum(w["jobs_done"] for w in provers) == 4
    [state] = status["devices"]
    assert state["uploads"] == 1  # the lanes shared one resident copy of the key
    write_vkey(tmp_path / "vkey.json", vkey_from_zkey(read_zkey(circuit[0])))
    assert snarkjs_verify_all(tmp_path / "vkey.json", [write_result(r, tmp_path, str(i))[::-1] for i, r in enumerate(records)])


def test_cancelling_a_proof_on_the_device_gives_back_its_vram(circuit, tmp_path):
    runtime = GateRuntime()
    device = emulated(0, runtime=runtime)
    with start_engine(tmp_path, circuit, [device], proofs_per_device=2) as engine:
        warm = engine.await_result(engine.submit("c", circuit[1].read_bytes()), timeout=300)
        assert warm.state is JobState.DONE, warm.error
        # What stays reserved between proofs: the key's resident bases and coefficients (synthesis runs on the device;
        # their exact layout is within sizing's bound), the cached NTT tables (twiddles, N/2 each way, and the
        # coset factors, N + 1) and the bases' MSM window tables (a cache, idle now).
        idle = device.vram.reserved_bytes
        header = read_zkey(circuit[0])
        resident = engine.status()["devices"][0]["resident_bytes"]
        assert bases_bytes(header) < resident <= bases_bytes(header) + coefficient_bytes(header)
        assert idle == resident + (2 * header.domain_size + 1) * header.n8r + device.msm.idle_bytes()
        runtime.armed = True
        job = engine.submit("c", circuit[1].read_bytes())
        assert runtime.reached.wait(120)
        assert engine.get(job).state is JobState.PROVING
        assert device.vram.reserved_bytes > idle  # its vectors and its MSM's working set
        assert engine.cancel(job)
        runtime.opened.set()
        record = engine.await_result(job, timeout=300)
        assert record.state is JobState.CANCELLED
        assert device.vram.reserved_bytes == idle


def test_a_device_failing_its_self_test_takes_all_its_workers_out(circuit, tmp_path):
    failing, healthy = emulated(0, runtime=FailingRuntime()), emulated(1)
    history: dict[str, list[JobState]] = {}
    witness = circuit[1].read_bytes()
    engine = start_engine(tmp_path, circuit, [failing, healthy], proofs_per_device=2, synth_workers=2)
    engine.add_listener(lambda job_id, state: history.setdefault(job_id, []).append(state))

    def device_workers(device: int) -> list[dict]:
        return [w for w in engine.status()["workers"] if w["kind"] == "proving" and w["device"] == device]

    with engine:
        records = []
        for _ in range(20):  # until the failing device has taken a job (it takes one of the first few)
            records.append(engine.await_result(engine.submit("c", witness), timeout=300))
            if not all(w["healthy"] for w in device_workers(0)):
                break
        down = device_workers(0)
        assert [w["healthy"] for w in down] == [False, False]
        assert sum("self-test failed" in w["error"] for w in down) == 2
        assert sum(w["error"].startswith("device out of service") for w in down) == 1  # the one that did not err
        wait_until(lambda: not any(t.name.startswith("cuzk-prove-0-") for t in threading.enumerate()))  # both stopped
        records += [engine.await_result(engine.submit("c", witness), timeout=300) for _ in range(3)]
        assert all(w["healthy"] for w in device_workers(1))
        assert sum(w["jobs_done"] for w in device_workers(1)) == len(records)  # device 1 proved every job
    assert all(r.state is JobState.DONE for r in records), [r.error for r in records]
    requeued = [states for states in history.values() if JobState.QUEUED in states[states.index(JobState.PROVING):]]
    assert len(requeued) == 1 and requeued[0][-1] is JobState.DONE  # the job the device failed went to device 1


# ---------------------------------------------------------------- a real GPU
@pytest.mark.gpu
def test_gpu_three_proofs_in_flight_on_one_device_verify(tmp_path):
    if not available():
        pytest.skip("no CuPy or no CUDA device")
    d = tmp_path / "circuit"
    d.mkdir()
    r1cs, wtns = write_synthetic(d, synthesize(BN254, 1 << 15, n_public=2, seed=5))
    setup(r1cs, d / "circuit.zkey")
    device = CudaBackend(device=0)
    lanes = InsideLanes(device)
    config = EngineConfig(data_dir=tmp_path / "data", proofs_per_device=3, reconcile=False, keys={"c": str(d / "circuit.zkey")})
    with Engine(config, backends=[device]) as engine:
        assert engine.status()["config"]["proofs_per_device"] == [3]
        jobs = [engine.submit("c", wtns.read_bytes()) for _ in range(12)]
        records = [engine.await_result(j, timeout=600) for j in jobs]
        status = engine.status()
    assert all(r.state is JobState.DONE for r in records), [r.error for r in records]  # self-verified by the engine
    assert lanes.most >= 2, "no two proofs were ever in flight on the device at once"
    provers = [w for w in status["workers"] if w["kind"] == "proving"]
    assert [w["name"] for w in provers] == ["prove-0-0", "prove-0-1", "prove-0-2"]
    [device] = status["devices"]
    assert device["vram_reserved_bytes"] >= device["resident_bytes"]
    write_vkey(tmp_path / "vkey.json", vkey_from_zkey(read_zkey(d / "circuit.zkey")))
    assert snarkjs_verify_all(tmp_path / "vkey.json", [write_result(r, tmp_path, str(i))[::-1] for i, r in enumerate(records[:3])])

