"""Synthesis on a device: A·w and B·w from the key's coefficients resident in VRAM (backends/cuda/synth.py).

The default tests run the kernels on the host emulation (HostRuntime); the ``gpu`` ones on a real
device (``pytest -m gpu tests/test_synthesis_device.py``).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conftest import planned_budget_bytes, snarkjs_verify
from cuzk.backends.cpu.synth import SynthesisInputError, evaluate_ab
from cuzk.backends.cuda import CudaBackend, HostRuntime, VramBudget, available
from cuzk.backends.cuda.modules import host_compiler
from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.curves import BLS12_381, BN254
from cuzk.engine import Engine, EngineConfig, JobState
from cuzk.formats.json_io import proof_to_json, public_to_json, write_vkey
from cuzk.formats.r1cs import SparseMatrix
from cuzk.formats.wtns import read_wtns
from cuzk.formats.zkey import read_zkey
from cuzk.keys.device import DeviceKeys
from cuzk.prover.groth16 import prove_synthesized, synthesize as synthesize_witness
from cuzk.prover.setup import setup
from cuzk.prover.sizing import bases_bytes, coefficient_bytes, host_working_set, proof_vram_bytes
from cuzk.prover.verify import verify, vkey_from_zkey

MiB = 1 << 20
CURVES = [pytest.param(BN254, id="bn254"), pytest.param(BLS12_381, id="bls12_381")]
LONG_ROW_WIRES = 300


def emulated(vram_bytes: int = 256 * MiB, **options) -> CudaBackend:
    if host_compiler() is None:
        pytest.skip("no host C++ compiler for the CUDA host emulation")
    return CudaBackend(runtime=HostRuntime(), vram_budget=VramBudget(vram_bytes, 0), **options)


def with_long_row(r1cs, n_wires: int):
    """``r1cs`` and one more constraint (Σ c_i·x_i)·1 = Σ c_i·x_i over its first ``n_wires`` wires (at most all):
    satisfied by any witness, it gives A a long row."""
    rng = np.random.default_rng(7)
    n_wires = min(n_wires, r1cs.n_wires)
    wires = np.arange(n_wires, dtype=np.uint32)
    coeffs = np.zeros((n_wires, r1cs.curve.Fr.limbs32), np.uint32)
    coeffs[:, 0] = rng.integers(1, 1 << 32, n_wires, dtype=np.uint64).astype(np.uint32)

    def append(m: SparseMatrix, cols, values) -> SparseMatrix:
        return SparseMatrix(np.append(m.row_ptr, m.row_ptr[-1] + len(cols)), np.concatenate([m.col, cols]),
                            np.concatenate([m.values, values]))

    one = np.zeros((1, r1cs.curve.Fr.limbs32), np.uint32)
    one[0, 0] = 1
    return dataclasses.replace(r1cs, path=None, n_constraints=r1cs.n_constraints + 1, A=append(r1cs.A, wires, coeffs),
                               B=append(r1cs.B, np.zeros(1, np.uint32), one), C=append(r1cs.C, wires, coeffs))


@pytest.fixture(scope="module", params=CURVES)
def circuit(request, tmp_path_factory):
    """A synthetic circuit with one long A row (and, like every circuit, empty rows): (zkey path, wtns path)."""
    curve = request.param
    d = tmp_path_factory.mktemp(curve.name)
    made = synthesize(curve, 120, n_public=2, seed=5)
    _, wtns = write_synthetic(d, made)
    setup(with_long_row(made.r1cs, LONG_ROW_WIRES), d / "circuit.zkey")
    return d / "circuit.zkey", wtns


@pytest.mark.parametrize("long_row", [32, 1], ids=["threshold-32", "every-row-long"])
def test_device_ab_equal_the_cpus(circuit, long_row):
    zkey = read_zkey(circuit[0])
    w = np.ascontiguousarray(read_wtns(circuit[1]).values)
    empty_a_rows = np.setdiff1d(np.arange(zkey.domain_size), zkey.coeffs["constraint"][zkey.coeffs["matrix"] == 0])
    assert len(empty_a_rows) > 4  # linear constraints and the domain's last rows
    backend = emulated(long_row=long_row)
    coeffs = backend.upload_coefficients(zkey.curve, zkey.coeffs, zkey.n_vars, zkey.domain_size)
    assert coeffs.nbytes <= coefficient_bytes(zkey) and backend.vram.reserved_bytes == coeffs.nbytes
    assert len(coeffs.long_rows) >= 1 and (long_row > 1 or len(coeffs.long_rows) > 20)
    a, b = backend.evaluate_ab(zkey.curve, coeffs, w)
    want_a, want_b = evaluate_ab(zkey.curve, zkey.coeffs, w, zkey.domain_size)
    assert np.array_equal(a, want_a) and np.array_equal(b, want_b)
    assert not a[empty_a_rows].any()  # written, as zero
    coeffs.free()
    assert backend.vram.reserved_bytes == 0


def test_coefficients_upload_in_chunks_through_the_staging_pool(circuit, monkeypatch):
    from cuzk.backends.cuda import synth as cuda_synth
    from cuzk.memory.budget import MemoryBudget
    from cuzk.memory.pinned import PageAlignedAllocator, PinnedPool

    zkey = read_zkey(circuit[0])
    w = np.ascontiguousarray(read_wtns(circuit[1]).values)
    monkeypatch.setattr(cuda_synth, "UPLOAD_CHUNK_ENTRIES", 64)
    pool = PinnedPool(MemoryBudget(64 * MiB), PageAlignedAllocator())
    backend = emulated()
    backend.attach_staging(pool)
    coeffs = backend.upload_coefficients(zkey.curve, zkey.coeffs, zkey.n_vars, zkey.domain_size)
    stats, chunks = pool.stats(), -(-len(zkey.coeffs) // 64)
    assert chunks > 4 and stats["hits"] + stats["misses"] >= 2 * chunks  # each chunk staged in each of the layout's two passes
    assert stats["in_use_buffers"] == 0  # and every staging buffer given back
    a, b = backend.evaluate_ab(zkey.curve, coeffs, w)
    want_a, want_b = evaluate_ab(zkey.curve, zkey.coeffs, w, zkey.domain_size)
    assert np.array_equal(a, want_a) and np.array_equal(b, want_b)


def test_a_deferred_synthesis_is_evaluated_on_the_device_and_the_proof_verifies(circuit, tmp_path):
    zkey_path, wtns_path = circuit
    zkey = read_zkey(zkey_path)
    witness = read_wtns(wtns_path)
    backend = emulated()
    keys = DeviceKeys(backend)
    synthesis = synthesize_witness(zkey, witness, defer_ab=True)
    assert synthesis.deferred and synthesis.a is None and synthesis.b is None
    evaluated = []
    original = backend.evaluate_ab
    backend.evaluate_ab = lambda *args: evaluated.append(args[1]) or original(*args)
    with keys.acquire("k", zkey, coefficients=True) as lease:
        assert lease.resident and keys.status()["keys"]["k"]["coefficients"]
        resident = lease.zkey.coeffs
        assert keys.status()["keys"]["k"]["bytes"] == bases_bytes(zkey) + resident.nbytes
        proof = prove_synthesized(backend, lease.zkey, synthesis)
    assert evaluated == [resident] and "synthesize" in proof.timings
    assert verify(vkey_from_zkey(zkey), proof.public_signals, proof)
    write_vkey(tmp_path / "vkey.json", vkey_from_zkey(zkey))
    (tmp_path / "proof.json").write_text(proof_to_json(proof))
    (tmp_path / "public.json").write_text(public_to_json(proof.public_signals))
    held = backend.vram.reserved_bytes
    tables = backend.msm.idle_bytes()  # the bases' MSM window tables: a cache that goes with them
    keys.close()  # the key's bases, coefficients and window tables freed (the cached NTT tables stay)
    assert held - backend.vram.reserved_bytes == bases_bytes(zkey) + resident.nbytes + tables
    assert resident.values is None
    assert snarkjs_verify(tmp_path / "vkey.json", tmp_path / "public.json", tmp_path / "proof.json")  # last: may skip


def test_coefficients_that_do_not_fit_leave_synthesis_on_the_cpu(circuit):
    zkey = read_zkey(circuit[0])
    probe = emulated()
    room = bases_bytes(zkey) + proof_vram_bytes(zkey, probe) + coefficient_bytes(zkey) // 2  # bases fit, coefficients not
    backend = emulated(vram_bytes=room)  # the budget proof_vram_bytes promises (its NTT tables included) is enough
    keys = DeviceKeys(backend)
    assert not keys.can_synthesize(zkey) and DeviceKeys(emulated()).can_synthesize(zkey)
    synthesis = synthesize_witness(zkey, read_wtns(circuit[1]), defer_ab=True)
    with keys.acquire("k", zkey, coefficients=True) as lease:
        assert lease.resident and not keys.status()["keys"]["k"]["coefficients"]
        assert lease.zkey.coeffs is zkey.coeffs  # the host key's: the deferred a/b are made on the CPU
        backend.evaluate_ab = lambda *args: pytest.fail("A·w and B·w asked of the device")
        proof = prove_synthesized(backend, lease.zkey, synthesis)
    assert verify(vkey_from_zkey(zkey), proof.public_signals, proof)


def test_a_resident_key_gains_its_coefficients_when_a_deferred_job_asks_and_they_fit(circuit):
    zkey = read_zkey(circuit[0])
    backend = emulated()
    keys = DeviceKeys(backend)
    with keys.acquire("k", zkey) as lease:  # a job that synthesized on the CPU: bases only
        assert lease.resident and lease.zkey.coeffs is zkey.coeffs
    assert backend.vram.reserved_bytes == bases_bytes(zkey)
    with keys.acquire("k", zkey, coefficients=True) as lease:
        assert not isinstance(lease.zkey.coeffs, np.ndarray)
        added = lease.zkey.coeffs.nbytes
    assert keys.uploads == 1 and keys.status()["resident_bytes"] == bases_bytes(zkey) + added
    assert keys.drop("k") == bases_bytes(zkey) + added and backend.vram.reserved_bytes == 0


def test_coefficients_outside_the_key_are_refused_and_nothing_stays_reserved(circuit):
    zkey = read_zkey(circuit[0])
    short = dataclasses.replace(zkey, n_vars=int(zkey.coeffs["signal"].max()))  # the highest signal is out of range
    backend = emulated()
    with pytest.raises(SynthesisInputError, match="signal"):
        backend.upload_coefficients(short.curve, short.coeffs, short.n_vars, short.domain_size)
    keys = DeviceKeys(backend)
    with pytest.raises(SynthesisInputError):
        keys.acquire("k", short, coefficients=True)
    assert backend.vram.reserved_bytes == 0 and keys.resident_names() == []
    keys.acquire("k", zkey).release()  # resident without coefficients; a deferred job's acquire then fails alone
    with pytest.raises(SynthesisInputError):
        keys.acquire("k", short, coefficients=True)
    assert keys.status()["keys"]["k"]["in_use"] == 0 and backend.vram.reserved_bytes == bases_bytes(zkey)


def test_a_deferred_jobs_host_working_set_has_no_ab_halves(circuit):
    header = read_zkey(circuit[0]).header
    host, device = host_working_set(header, on_device=True), host_working_set(header, on_device=True, device_synthesis=True)
    assert host.abc_bytes - device.abc_bytes == 2 * header.domain_size * header.n8r
    assert device.rest_bytes == host.rest_bytes and device.device_synthesis and not host.device_synthesis
    with pytest.raises(ValueError):
        host_working_set(header, on_device=False, device_synthesis=True)


def _engine(tmp_path, zkey_path, backends) -> Engine:
    config = EngineConfig(data_dir=tmp_path / "data", budget_bytes=planned_budget_bytes(), reconcile=False, measure_peaks=False,
                          synth_workers=1, keys={"k": str(zkey_path)})
    return Engine(config, backends=backends).start()


@pytest.mark.parametrize("fits", [True, False], ids=["coefficients-fit", "coefficients-do-not-fit"])
def test_the_engine_defers_synthesis_to_devices_that_hold_the_coefficients(circuit, tmp_path, fits):
    zkey_path, wtns_path = circuit
    zkey = read_zkey(zkey_path)
    probe = emulated()
    beside = coefficient_bytes(zkey) + MiB if fits else coefficient_bytes(zkey) // 2
    # small MSM chunks: the cached NTT tables, which proof_vram_bytes leaves out, may take some of the MSMs' room
    backend = emulated(vram_bytes=bases_bytes(zkey) + proof_vram_bytes(zkey, probe) + beside, min_msm_chunk=16)
    deferred = []
    original = backend.evaluate_ab
    backend.evaluate_ab = lambda *args: deferred.append(True) or original(*args)
    with _engine(tmp_path, zkey_path, [backend]) as engine:
        assert engine.admission.working_set("k").device_synthesis is fits
        records = [engine.await_result(engine.submit("k", wtns_path.read_bytes()), timeout=300) for _ in range(2)]
        device = engine.status()["devices"][0]
    assert [r.state for r in records] == [JobState.DONE] * 2, [r.error for r in records]
    assert len(deferred) == (2 if fits else 0)
    assert device["keys"]["k"]["coefficients"] is fits and device["uploads"] == 1
    write_vkey(tmp_path / "vkey.json", vkey_from_zkey(zkey))
    (tmp_path / "proof.json").write_text(json.dumps(records[0].proof))
    (tmp_path / "public.json").write_text(json.dumps(records[0].public_signals))
    assert snarkjs_verify(tmp_path / "vkey.json", tmp_path / "public.json", tmp_path / "proof.json")


def test_the_cpu_engine_synthesizes_on_the_cpu(circuit, tmp_path):
    from cuzk.backends import get_backend

    with _engine(tmp_path, circuit[0], [get_backend("cpu")]) as engine:
        assert not engine.admission.working_set("k").device_synthesis
        record = engine.await_result(engine.submit("k", circuit[1].read_bytes()), timeout=300)
    assert record.state is JobState.DONE, record.error


# ---------------------------------------------------------------- on a real GPU
def _gpu_or_skip() -> CudaBackend:
    if not available():
        pytest.skip("no CuPy or no CUDA device")
    return CudaBackend()


@pytest.mark.gpu
@pytest.mark.parametrize("curve", CURVES)
def test_gpu_device_ab_equal_the_cpus_at_2_18(curve):
    from cuzk.prover.setup import coefficient_section

    backend = _gpu_or_skip()
    made = synthesize(curve, (1 << 18) - 8, n_public=2, seed=18)
    section = coefficient_section(with_long_row(made.r1cs, 5000))  # the zkey's section, without a whole setup
    n, w = 1 << 18, made.witness
    coeffs = backend.upload_coefficients(curve, section, len(w), n)
    try:
        assert len(coeffs.long_rows) >= 1
        a, b = backend.evaluate_ab(curve, coeffs, w)
        want_a, want_b = evaluate_ab(curve, section, w, n)
        assert np.array_equal(a, want_a) and np.array_equal(b, want_b)
        da, db = backend.evaluate_ab(curve, coeffs, backend.to_device(w))  # device in, device out
        assert np.array_equal(da.get(), want_a) and np.array_equal(db.get(), want_b)
    finally:
        coeffs.free()


@pytest.mark.gpu
def test_gpu_corpus_circuit_proved_with_device_synthesis_is_accepted_by_snarkjs(corpus_circuit, tmp_path):
    backend = _gpu_or_skip()
    zkey = read_zkey(corpus_circuit / "circuit.zkey")
    keys = DeviceKeys(backend)
    try:
        with keys.acquire("c", zkey, coefficients=True) as lease:
            assert keys.status()["keys"]["c"]["coefficients"]
            proof = prove_synthesized(backend, lease.zkey, synthesize_witness(zkey, read_wtns(corpus_circuit / "witness.wtns"),
                                                                               defer_ab=True))
    finally:
        keys.close()
    (tmp_path / "proof.json").write_text(proof_to_json(proof))
    (tmp_path / "public.json").write_text(public_to_json(proof.public_signals))
    assert snarkjs_verify(corpus_circuit / "verification_key.json", tmp_path / "public.json", tmp_path / "proof.json")
