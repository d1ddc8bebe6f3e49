"""Proving devices: the VRAM tier of the key manager, one proving worker per device, a failing device, a poison job.

The default tests emulate devices with the CUDA backend's host runtime (the real kernels built
for the CPU): two CudaBackends on HostRuntime are two devices with their own VRAM budgets.
The ``gpu`` tests do the same on real GPUs (``pytest -m gpu tests/test_multi_device.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, planned_budget_bytes, snarkjs_verify_all
from emulated_devices import MiB, CorruptingRuntime, FailingRuntime, OnceFailingRuntime, emulated
from test_engine import write_result
from cuzk.backends import get_backend
from cuzk.backends.cuda import CudaBackend, CudaBackendError, HostRuntime, VramBudget, available
from cuzk.backends.cuda.modules import is_device_error
from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.curves import BLS12_381, BN254
from cuzk.engine import Engine, EngineConfig, JobState
from cuzk.backends.selftest import device_self_test
from cuzk.formats.zkey import read_zkey
from cuzk.keys.device import DeviceKeys
from cuzk.keys.manager import KeyManager
from cuzk.memory.budget import MemoryBudget
from cuzk.prover.sizing import MAX_PROOFS_PER_DEVICE, bases_bytes, proof_vram_bytes
from cuzk.memory.pinned import PageAlignedAllocator, PinnedPool
from cuzk.prover.setup import setup
from cuzk.server.metrics import DaemonMetrics
from cuzk.prover.verify import vkey_from_zkey


@pytest.fixture(scope="module")
def circuits(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Two small BN254 circuits of the project's own (no corpus needed): name → (zkey, wtns)."""
    out = {}
    for name, n in (("one", 40), ("two", 60)):
        d = tmp_path_factory.mktemp(name)
        r1cs, wtns = write_synthetic(d, synthesize(BN254, n, n_public=2, seed=len(name) + n))
        setup(r1cs, d / "circuit.zkey")
        out[name] = (d / "circuit.zkey", wtns)
    return out


POISON_DOMAIN = 256  # the "poison" circuit's FFT domain; the test circuits "one" and "two" have 64


class NttBugRuntime(HostRuntime):
    """A kernel bug hit by one input: NTT launches over POISON_DOMAIN or more elements fail, on every device.

    ``sticky``: the first such failure breaks the device for good, as an illegal address does to a CUDA context.
    """

    def __init__(self, sticky: bool = False):
        super().__init__()
        self.sticky = sticky
        self.broken = False

    def launch(self, module, kernel, grid, block, args, shared_bytes=0):
        if self.broken:
            raise CudaBackendError("emulated sticky fault: an illegal memory access was encountered")
        if kernel.startswith("ntt") and any(isinstance(a, np.ndarray) and a.shape[0] >= POISON_DOMAIN for a in args):
            self.broken = self.sticky
            raise CudaBackendError(f"emulated kernel bug: {kernel} hit an illegal memory access")
        return super().launch(module, kernel, grid, block, args, shared_bytes)


def need_bytes(zkey, backend) -> int:
    return bases_bytes(zkey) + proof_vram_bytes(zkey, backend)


# ---------------------------------------------------------------- the VRAM tier
def test_a_resident_key_is_uploaded_once_and_counted_while_in_use(circuits):
    zkey = read_zkey(circuits["one"][0])
    backend = emulated(0)
    keys = DeviceKeys(backend)
    with keys.acquire("one", zkey) as first:
        assert first.resident and first.zkey.a.points is not None
        assert backend.vram.reserved_bytes == bases_bytes(zkey)
        with keys.acquire("one", zkey) as second:
            assert second.zkey.a is first.zkey.a  # the same resident bases: nothing uploaded again
            assert keys.status()["keys"]["one"]["in_use"] == 2
        bases = first.zkey.a
    assert keys.uploads == 1
    status = keys.status()
    assert status["keys"]["one"]["in_use"] == 0 and status["resident_bytes"] == bases_bytes(zkey)
    assert keys.drop("one") == bases_bytes(zkey)
    assert bases.points is None and backend.vram.reserved_bytes == 0


def test_least_recently_used_idle_key_makes_room_and_a_busy_one_never_does(circuits):
    one, two = (read_zkey(circuits[n][0]) for n in ("one", "two"))
    probe = emulated(0)
    room = max(need_bytes(one, probe), need_bytes(two, probe)) + min(bases_bytes(one), bases_bytes(two)) // 2
    backend = emulated(0, vram_bytes=room)  # one key and a proof fit, never both keys
    keys = DeviceKeys(backend)
    with keys.acquire("one", one):
        with keys.acquire("two", two) as busy:  # "one" is in use: "two" proves from host memory
            assert not busy.resident and busy.zkey is two
            assert "two" in keys.status()["not_resident"]
        assert keys.resident_names() == ["one"]
    with keys.acquire("two", two) as lease:  # "one" is idle now: evicted for "two"
        assert lease.resident
    assert keys.resident_names() == ["two"] and keys.evictions == 1
    assert backend.vram.reserved_bytes == bases_bytes(two)


def test_an_msm_working_set_evicts_idle_resident_keys(circuits):
    zkey = read_zkey(circuits["two"][0])
    probe = emulated(0)
    whole_msm = probe.msm_working_bytes(BN254, "g1", zkey.n_vars)
    backend = emulated(0, vram_bytes=need_bytes(zkey, probe) + MiB // 4)
    keys = DeviceKeys(backend)
    keys.acquire("two", zkey).release()
    short = bases_bytes(zkey) // 2  # the MSM fits only once the key's bases are gone
    backend.vram.reserve(backend.vram.available_bytes - (whole_msm - short), "another tenant")
    with backend.msm.plan(BN254, "g1", zkey.n_vars) as plan:
        assert plan.chunk == zkey.n_vars  # whole, after evicting the idle key
    assert keys.resident_names() == [] and keys.evictions == 1


def test_a_request_that_cannot_fit_evicts_nothing(circuits):
    zkey = read_zkey(circuits["one"][0])
    backend = emulated(0, vram_bytes=need_bytes(zkey, emulated(0)) + MiB)
    keys = DeviceKeys(backend)
    keys.acquire("one", zkey).release()
    backend.vram.reserve(1024, "a tenant that is not evictable")
    assert not backend.vram.make_room(backend.vram.total_bytes)  # evicting the key would not be enough: keep it
    assert keys.resident_names() == ["one"]
    assert backend.vram.make_room(backend.vram.available_bytes + bases_bytes(zkey))  # evicting the key is enough
    assert keys.resident_names() == []


def test_a_key_too_large_for_the_device_proves_from_host_memory(circuits):
    zkey = read_zkey(circuits["one"][0])
    backend = emulated(0, vram_bytes=bases_bytes(zkey))  # the bases alone: no room for the proof beside them
    keys = DeviceKeys(backend)
    with keys.acquire("one", zkey) as lease:
        assert not lease.resident and lease.zkey is zkey
    assert backend.vram.reserved_bytes == 0 and "proof working set" in keys.status()["not_resident"]["one"]


def test_key_manager_lists_residency_per_device_and_drops_it_on_reregistration(circuits, tmp_path):
    manager = KeyManager(MemoryBudget(256 * MiB), allocator=PageAlignedAllocator())
    manager.register("one", circuits["one"][0])
    devices = [emulated(0), emulated(1)]
    with manager.acquire("one") as lease:
        for backend in devices:
            with manager.on_device(lease, backend) as device_key:
                assert device_key.resident
    assert manager.status()[0]["resident_devices"] == [0, 1]
    assert [d["device"] for d in manager.device_status()] == [0, 1]
    manager.register("one", circuits["two"][0])  # another file under the name: its device copies are stale
    assert manager.status()[0]["resident_devices"] == []
    assert all(b.vram.reserved_bytes == 0 for b in devices)
    with manager.acquire("one") as lease, manager.on_device(lease, devices[0]) as device_key:
        assert device_key.resident
    manager.evict("one")  # the Evict request frees the device copies too
    assert manager.status()[0]["resident_devices"] == [] and devices[0].vram.reserved_bytes == 0
    manager.close()


# ---------------------------------------------------------------- staged, overlapped copies
class PoolStaging:
    """The pinned pool as a staging source, minus its never-wait rule: every copy here goes through the pool."""

    def __init__(self, pool: PinnedPool):
        self.pool = pool

    def try_get(self, nbytes: int, label: str = ""):
        return self.pool.get(nbytes, label=label)


@pytest.mark.parametrize("overlap", [True, False], ids=["double-buffered", "serial"])
def test_chunked_msm_from_staged_host_bases_matches_the_resident_one(circuits, overlap):
    zkey = read_zkey(circuits["two"][0])
    n = zkey.n_vars
    rng = np.random.default_rng(5)
    scalars = rng.integers(0, 1 << 32, size=(n, 8), dtype=np.uint32)
    scalars[:, 7] &= 0x0FFFFFFF  # below r
    reference = emulated(0)
    want = reference.msm_g1(BN254, reference.upload_bases(BN254, "g1", zkey.a), scalars)
    budget = MemoryBudget(64 * MiB)
    pool = PinnedPool(budget, PageAlignedAllocator())
    backend = CudaBackend(runtime=HostRuntime(), min_msm_chunk=8,
                          vram_budget=VramBudget(reference.msm_working_bytes(BN254, "g1", 16, buffers=2)))
    backend.attach_staging(PoolStaging(pool))
    backend.msm.overlap = overlap
    with backend.msm.plan(BN254, "g1", n) as plan:
        assert plan.chunk < n // 2  # several chunks
    assert backend.msm_g1(BN254, zkey.a, scalars) == want
    stats = pool.stats()
    assert stats["in_use_buffers"] == 0 and stats["misses"] >= 1  # every staging buffer went back to the pool
    assert budget.snapshot()["by_category"]["pinned"]["bytes"] == stats["pooled_bytes"]  # and stays charged while pooled
    assert backend.vram.reserved_bytes == 0


def test_prover_vectors_stay_on_the_device_and_hold_vram_only_while_proving(circuits):
    from cuzk.formats.wtns import read_wtns
    from cuzk.prover.groth16 import prove
    from cuzk.prover.sizing import device_vector_bytes
    from cuzk.prover.verify import verify

    zkey = read_zkey(circuits["one"][0])
    backend = emulated(0)
    seen = []
    original = backend.try_reserve
    backend.try_reserve = lambda nbytes, what: seen.append(nbytes) or original(nbytes, what)
    proof = prove(backend, zkey, read_wtns(circuits["one"][1]))
    assert seen == [device_vector_bytes(zkey)] and backend.vram.reserved_bytes < min(seen)
    assert verify(vkey_from_zkey(zkey), proof.public_signals, proof)


def test_a_proof_stopped_early_gives_back_its_staging_buffers_and_vram(circuits):
    from cuzk.formats.wtns import read_wtns
    from cuzk.prover.groth16 import ProofCancelled, prove_synthesized, synthesize as synthesize_witness

    zkey = read_zkey(circuits["one"][0])
    backend = emulated(0)
    pool = PinnedPool(MemoryBudget(64 * MiB), PageAlignedAllocator())
    backend.attach_staging(PoolStaging(pool))
    witness = read_wtns(circuits["one"][1])
    prove_synthesized(backend, zkey, synthesize_witness(zkey, witness))
    tables = backend.vram.reserved_bytes  # after a whole proof only the cached NTT tables stay reserved
    with pytest.raises(ProofCancelled):
        prove_synthesized(backend, zkey, synthesize_witness(zkey, witness), cancelled=lambda: True)  # stops after the NTTs
    assert pool.stats()["in_use_buffers"] == 0 and pool.stats()["misses"] >= 1
    assert backend.vram.reserved_bytes == tables


# ---------------------------------------------------------------- engine: one worker per device
@pytest.fixture(scope="module")
def poison(tmp_path_factory) -> tuple[Path, Path]:
    """A circuit whose domain (POISON_DOMAIN) trips NttBugRuntime: (zkey, wtns)."""
    d = tmp_path_factory.mktemp("poison")
    r1cs, wtns = write_synthetic(d, synthesize(BN254, 150, n_public=2, seed=9))
    setup(r1cs, d / "circuit.zkey")
    assert read_zkey(d / "circuit.zkey").domain_size == POISON_DOMAIN
    return d / "circuit.zkey", wtns


def engine_with(tmp_path, circuits, backends, **config) -> Engine:
    engine = Engine(EngineConfig(data_dir=tmp_path / "data", budget_bytes=planned_budget_bytes(), reconcile=False, measure_peaks=False,
                                 synth_workers=2, keys={n: str(z) for n, (z, _) in circuits.items()}, **config),
                    backends=backends)
    return engine.start()


def test_two_devices_prove_with_their_own_resident_keys(circuits, tmp_path):
    devices = [emulated(0), emulated(1)]
    with engine_with(tmp_path, circuits, devices) as engine:
        idle = engine.status()["devices"]  # listed before any job, with nothing resident
        assert [(d["device"], d["keys"], d["resident_bytes"]) for d in idle] == [(0, {}, 0), (1, {}, 0)]
        jobs = [engine.submit(name, circuits[name][1].read_bytes()) for name in ("one", "two") * 3]
        records = [engine.await_result(j, timeout=300) for j in jobs]
        assert [r.state for r in records] == [JobState.DONE] * len(jobs), [r.error for r in records]
        status = engine.status()
        tables = [d.msm.idle_bytes() for d in devices]  # the resident bases' MSM window tables, freed with them
    provers = [w for w in status["workers"] if w["kind"] == "proving"]
    lanes = MAX_PROOFS_PER_DEVICE  # "auto": small keys on a 256 MiB device leave room for the most
    assert status["config"]["proofs_per_device"] == [lanes, lanes]
    assert [w["name"] for w in provers] == [f"prove-{d}-{k}" for d in (0, 1) for k in range(lanes)]
    assert all(w["healthy"] for w in provers)
    assert status["budget"]["by_category"]["pinned"]["bytes"] > 0  # staging buffers, pooled and charged to the budget
    assert sum(w["jobs_done"] for w in provers) == len(jobs)
    metrics = DaemonMetrics(lambda: status).text()  # what /metrics shows per device (labels sorted by name)
    for w in provers:
        assert f'cuzk_worker_proofs_total{{device="{w["device"]}",worker="{w["name"]}"}} {float(w["jobs_done"])}' in metrics
        assert f'cuzk_worker_healthy{{device="{w["device"]}",worker="{w["name"]}"}} 1.0' in metrics
    assert 'cuzk_vram_total_bytes{device="1"}' in metrics and 'cuzk_vram_resident_keys_bytes{device="1"}' in metrics
    for device in status["devices"]:  # each device uploaded a key once, however many of its proofs used it
        assert device["uploads"] == len(device["keys"]) <= 2 and device["evictions"] == 0
    for device in status["devices"]:  # the engine stopped: every device copy freed (NTT tables stay cached)
        backend = devices[device["device"]]
        assert backend.vram.reserved_bytes == device["vram_reserved_bytes"] - device["resident_bytes"] - tables[device["device"]]


def test_a_failing_device_sends_its_jobs_to_the_healthy_one(circuits, tmp_path):
    failing, healthy = emulated(0, runtime=FailingRuntime()), emulated(1)
    witness = circuits["one"][1].read_bytes()
    with engine_with(tmp_path, circuits, [failing, healthy]) as engine:
        records = []
        for _ in range(20):  # until the failing device has taken a job (it takes one of the first few)
            records.append(engine.await_result(engine.submit("one", witness), timeout=300))
            workers = {w["device"]: w for w in engine.status()["workers"] if w["kind"] == "proving"}
            if not workers[0]["healthy"]:
                break
        assert not workers[0]["healthy"] and "illegal memory access" in workers[0]["error"]
        assert "self-test failed" in workers[0]["error"]
        assert workers[1]["healthy"]
        records.append(engine.await_result(engine.submit("one", witness), timeout=300))  # only device 1 is left
    assert all(r.state is JobState.DONE for r in records), [r.error for r in records]


def test_with_no_healthy_device_left_the_job_fails_with_the_device_error(circuits, tmp_path):
    with engine_with(tmp_path, {"one": circuits["one"]}, [emulated(0, runtime=FailingRuntime())]) as engine:
        record = engine.await_result(engine.submit("one", circuits["one"][1].read_bytes()), timeout=300)
    assert record.state is JobState.FAILED and "illegal memory access" in record.error


@pytest.mark.parametrize("runtime, problem", [
    (HostRuntime, None),
    (FailingRuntime, "illegal memory access"),
    (CorruptingRuntime, "differs from the reference"),
])
def test_the_device_self_test_passes_on_a_working_device_and_names_what_fails(runtime, problem):
    result = device_self_test(emulated(0, runtime=runtime()))
    assert result is None if problem is None else problem in result


def proving_workers(engine) -> list[dict]:
    return [w for w in engine.status()["workers"] if w["kind"] == "proving"]


@pytest.mark.parametrize("limit", [1, 2])
def test_a_poison_job_fails_after_its_device_errors_and_every_device_keeps_proving(circuits, poison, tmp_path, limit):
    devices = [emulated(0, runtime=NttBugRuntime()), emulated(1, runtime=NttBugRuntime())]
    with engine_with(tmp_path, {**circuits, "poison": poison}, devices, device_errors_per_job=limit) as engine:
        bad = engine.await_result(engine.submit("poison", poison[1].read_bytes()), timeout=300)
        workers = proving_workers(engine)
        good = [engine.await_result(engine.submit("one", circuits["one"][1].read_bytes()), timeout=300) for _ in range(2)]
    assert bad.state is JobState.FAILED
    assert f"it hit {limit} CUDA error" in bad.error and f"device_errors_per_job = {limit}" in bad.error
    assert bad.error.count("emulated kernel bug: ntt") == limit and "likely triggers a kernel bug" in bad.error
    assert all(w["healthy"] for w in workers) and sum(w["device_errors"] for w in workers) == limit
    assert all("self-test passed" in w["error"] for w in workers if w["device_errors"])
    assert [r.state for r in good] == [JobState.DONE] * 2, [r.error for r in good]


def test_a_poison_job_that_breaks_devices_takes_down_at_most_two(circuits, poison, tmp_path):
    devices = [emulated(d, runtime=NttBugRuntime(sticky=True)) for d in range(3)]
    with engine_with(tmp_path, {**circuits, "poison": poison}, devices) as engine:
        bad = engine.await_result(engine.submit("poison", poison[1].read_bytes()), timeout=300)
        good = engine.await_result(engine.submit("one", circuits["one"][1].read_bytes()), timeout=300)
        workers = proving_workers(engine)
    down = [w for w in workers if not w["healthy"]]
    down_devices = sorted({w["device"] for w in down})
    assert bad.state is JobState.FAILED and "it hit 2 CUDA errors" in bad.error
    assert len(down_devices) == 2 and all(f"device {d}:" in bad.error for d in down_devices)  # both named
    assert len(down) == 2 * MAX_PROOFS_PER_DEVICE  # every worker of a failed device is out of service with it
    assert bad.error.count("self-test failed: CudaBackendError: emulated sticky fault") == 2
    assert all("self-test failed" in w["error"] for w in down)
    assert good.state is JobState.DONE, good.error
    healthy = [w for w in workers if w["healthy"]]
    assert {w["device"] for w in healthy}.isdisjoint(down_devices)
    assert sum(w["jobs_done"] for w in healthy) == 1  # the third device proved the next job


def test_a_transient_device_error_requeues_the_job_and_keeps_the_device(circuits, tmp_path):
    with engine_with(tmp_path, circuits, [emulated(0, runtime=OnceFailingRuntime())]) as engine:
        record = engine.await_result(engine.submit("one", circuits["one"][1].read_bytes()), timeout=300)
        workers = proving_workers(engine)
    assert record.state is JobState.DONE, record.error
    assert all(w["healthy"] for w in workers) and sum(w["jobs_done"] for w in workers) == 1
    [worker] = [w for w in workers if w["device_errors"]]
    assert worker["device_errors"] == 1
    assert "unspecified launch failure" in worker["error"] and "self-test passed" in worker["error"]


def test_device_errors_are_told_from_input_errors():
    assert is_device_error(CudaBackendError("launch failed"))
    assert not is_device_error(ValueError("witness has 3 values but the circuit has 4 signals"))
    assert not is_device_error(MemoryError())


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "2"])
def test_device_errors_per_job_must_be_a_positive_count(tmp_path, limit):
    with pytest.raises(ValueError, match="device_errors_per_job"):
        EngineConfig(data_dir=tmp_path, device_errors_per_job=limit)


@pytest.mark.parametrize("devices", [[], [0, 0], [-1], "some", [True]])
def test_devices_setting_rejects_what_is_not_a_list_of_ordinals(tmp_path, devices):
    with pytest.raises(ValueError, match="devices"):
        EngineConfig(data_dir=tmp_path, devices=devices)


def test_devices_setting_from_the_daemon_config(tmp_path):
    assert EngineConfig.from_mapping(tmp_path, {"devices": [1, 0]}).devices == [1, 0]
    assert EngineConfig.from_mapping(tmp_path, {}).devices == "all"


def test_synth_workers_auto_keeps_a_job_ready_for_every_proving_slot(tmp_path):
    def workers(backends, **config) -> int:
        engine = Engine(EngineConfig(data_dir=tmp_path / f"d{len(backends)}{config}", budget_bytes=planned_budget_bytes(), reconcile=False,
                                     measure_peaks=False, **config), backends=backends)
        try:
            return engine.synth_workers
        finally:
            engine.stop()

    lanes = MAX_PROOFS_PER_DEVICE
    assert workers([emulated(0), emulated(1)]) == 2 * lanes + 1  # one more than the proofs the devices run at once
    assert workers([emulated(0), emulated(1)], proofs_per_device=1) == 3
    assert workers([emulated(0)]) == lanes + 1
    assert workers([get_backend("cpu")]) == 1  # CPU proving needs the cores synthesis would take
    assert workers([emulated(0), emulated(1)], synth_workers=5) == 5
    with pytest.raises(ValueError, match='synth_workers must be "auto" or a whole number'):
        EngineConfig(data_dir=tmp_path, synth_workers="many")


def test_without_a_gpu_the_engine_proves_on_the_cpu_and_refuses_cuda(tmp_path):
    if available():
        pytest.skip("a GPU is present")
    from cuzk.backends import BackendUnavailableError

    engine = Engine(EngineConfig(data_dir=tmp_path / "auto", reconcile=False, devices=[0, 1]))
    try:
        assert [b.name for b in engine.backends] == ["cpu"]
    finally:
        engine.stop()
    with pytest.raises(BackendUnavailableError, match="needs CuPy"):
        Engine(EngineConfig(data_dir=tmp_path / "cuda", backend="cuda", reconcile=False))


# ---------------------------------------------------------------- real GPUs
def _gpu_or_skip() -> None:
    if not available():
        pytest.skip("no CuPy or no CUDA device")


@pytest.mark.gpu
def test_gpu_engine_proves_corpus_circuits_that_snarkjs_accepts(corpus_circuit, tmp_path):
    _gpu_or_skip()
    zkey_path = corpus_circuit / "circuit.zkey"
    with Engine(EngineConfig(data_dir=tmp_path / "data", backend="cuda", reconcile=False, keys={"c": str(zkey_path)})) as engine:
        witness = (corpus_circuit / "witness.wtns").read_bytes()
        records = [engine.await_result(engine.submit("c", witness), timeout=600) for _ in range(2)]
        status = engine.status()
    assert all(r.state is JobState.DONE for r in records), [r.error for r in records]
    assert any("c" in d["keys"] for d in status["devices"])  # the second proof found the bases resident
    assert snarkjs_verify_all(corpus_circuit / "verification_key.json",
                              [write_result(r, tmp_path, str(i))[::-1] for i, r in enumerate(records)])


@pytest.mark.gpu
def test_gpu_chunked_double_buffered_msm_matches_resident(circuits):
    """Non-resident bases in many chunks (the overlapped upload path) give the resident result."""
    _gpu_or_skip()
    zkey = read_zkey(circuits["two"][0])
    backend = CudaBackend(min_msm_chunk=8)
    import numpy as np

    rng = np.random.default_rng(3)
    scalars = rng.integers(0, 1 << 32, size=(zkey.n_vars, 8), dtype=np.uint32)
    scalars[:, 7] &= 0x0FFFFFFF
    resident = backend.upload_bases(BN254, "g1", zkey.a)
    want = backend.msm_g1(BN254, resident, scalars)
    small = CudaBackend(min_msm_chunk=8, vram_budget=VramBudget(backend.msm_working_bytes(BN254, "g1", 16, buffers=2), 0))
    with small.msm.plan(BN254, "g1", zkey.n_vars) as plan:
        assert plan.chunk < zkey.n_vars
    assert small.msm_g1(BN254, zkey.a, scalars) == want
    resident.free()


@pytest.mark.gpu
@pytest.mark.parametrize("curve", [BN254, BLS12_381], ids=["bn254", "bls12_381"])
def test_gpu_every_device_passes_the_self_test(curve):
    _gpu_or_skip()
    from cuzk.backends.cuda import cupy_device_count

    assert [device_self_test(CudaBackend(device=d), curve) for d in range(cupy_device_count())] == [None] * cupy_device_count()


@pytest.mark.gpu
def test_gpu_every_device_works_on_its_own_memory(circuits):
    """A backend for the last device allocates and computes there, whichever device the thread had current."""
    _gpu_or_skip()
    from cuzk.backends.cuda import cupy_device_count

    if cupy_device_count() < 2:
        pytest.skip("needs two GPUs")
    import cupy

    zkey = read_zkey(circuits["two"][0])
    last = cupy_device_count() - 1
    backend = CudaBackend(device=last)
    resident = backend.upload_bases(BN254, "g1", zkey.a)
    assert resident.points.device.id == last
    scalars = np.ones((zkey.n_vars, 8), dtype=np.uint32)
    with cupy.cuda.Device(0):
        got = backend.msm_g1(BN254, resident, scalars)
    assert got == CudaBackend(device=0).msm_g1(BN254, zkey.a, scalars)
    resident.free()


@pytest.mark.gpu
def test_gpu_two_devices_share_the_engine_work(circuits, tmp_path):
    _gpu_or_skip()
    from cuzk.backends.cuda import cupy_device_count

    if cupy_device_count() < 2:
        pytest.skip("needs two GPUs")
    config = EngineConfig(data_dir=tmp_path / "data", backend="cuda", devices=[0, 1], reconcile=False, synth_workers=2,
                          keys={n: str(z) for n, (z, _) in circuits.items()})
    with Engine(config) as engine:
        jobs = [engine.submit(name, circuits[name][1].read_bytes()) for name in ("one", "two") * 16]
        records = [engine.await_result(j, timeout=600) for j in jobs]
        status = engine.status()
    assert all(r.state is JobState.DONE for r in records), [r.error for r in records]
    provers = [w for w in status["workers"] if w["kind"] == "proving"]
    assert [w["device"] for w in provers] == [0, 1] and all(w["healthy"] for w in provers)
    assert all(w["jobs_done"] > 0 for w in provers), provers  # 32 jobs: both devices took some


_VISIBLE = textwrap.dedent("""
    import sys
    from cuzk.engine import Engine, EngineConfig
    from cuzk.backends import BackendUnavailableError
    devices = sys.argv[2] if sys.argv[2] == "all" else [int(d) for d in sys.argv[2].split(",")]
    try:
        engine = Engine(EngineConfig(data_dir=sys.argv[1], backend="cuda", devices=devices, reconcile=False,
                                     device_processes=False))  # in-process: its backends show the devices it took
    except BackendUnavailableError as exc:
        print("refused:", exc)
    else:
        print("devices:", [b.vram.device for b in engine.backends], [b.runtime.device_name for b in engine.backends])
        engine.stop()
""")


@pytest.mark.gpu
@pytest.mark.parametrize("visible, devices, expect", [
    ("0", "all", "devices: [0]"),
    ("0", "0", "devices: [0]"),
    ("0", "1", "refused: devices [1] do not exist"),
    ("", "all", "refused: the cuda backend needs CuPy"),
])
def test_gpu_engine_workers_follow_cuda_visible_devices(tmp_path, visible, devices, expect):
    _gpu_or_skip()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible,
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-c", _VISIBLE, str(tmp_path / "d"), devices], env=env, capture_output=True,
                         text=True, timeout=300)
    assert expect in out.stdout, out.stdout + out.stderr
