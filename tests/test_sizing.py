"""Per-proof byte counts (prover.sizing): exact arithmetic from the header, an upper bound of what a proof really
uses, and the peak probe that measures it."""

from __future__ import annotations

import numpy as np
import pytest

from cuzk.backends import get_backend
from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.curves import BLS12_381, BN254
from cuzk.formats.wtns import read_wtns
from cuzk.formats.zkey import read_zkey, read_zkey_header
from cuzk.memory.process import PeakProbe, return_free_heap
from cuzk.prover.groth16 import prove
from cuzk.prover.setup import setup
from cuzk.prover.sizing import (ABC_VECTORS, CALIBRATION_HEADROOM, cpu_msm_scratch_bytes,
                                host_working_set, slack_bytes)


@pytest.fixture(scope="module", params=[(BN254, 3000), (BLS12_381, 1500)], ids=["bn254", "bls12_381"])
def circuit(request, tmp_path_factory):
    curve, n = request.param
    d = tmp_path_factory.mktemp(curve.name)
    r1cs, wtns = write_synthetic(d, synthesize(curve, n, n_public=3, seed=11))
    setup(r1cs, d / "circuit.zkey")
    return d / "circuit.zkey", wtns, r1cs


def test_estimate_is_the_documented_arithmetic(circuit):
    zkey_path, _, r1cs = circuit
    h = read_zkey_header(zkey_path)
    E, N, V = h.n8r, h.domain_size, h.n_vars
    scratch = max(cpu_msm_scratch_bytes(h, V, 2), cpu_msm_scratch_bytes(h, N, 1))
    ws = host_working_set(h, on_device=False)
    assert ws.abc_bytes == ABC_VECTORS * N * E + N * E + 8 * N
    assert ws.rest_bytes == V * E + N * E + scratch + slack_bytes()
    assert ws.total_bytes == ws.estimated_bytes and ws.measured_bytes is None
    with_r1cs = host_working_set(h, on_device=False, r1cs_path=r1cs)
    assert with_r1cs.total_bytes == ws.total_bytes + 2 * r1cs.stat().st_size
    # A measured peak calibrates the figure into [1, 1.2]× it: raising only the part released at the end ...
    raised = host_working_set(h, on_device=False, measured_bytes=ws.total_bytes + 12345)
    assert raised.total_bytes == ws.total_bytes + 12345 and raised.abc_bytes == ws.abc_bytes
    within = host_working_set(h, on_device=False, measured_bytes=ws.total_bytes - 1000)
    assert within.total_bytes == ws.total_bytes
    # ... and lowering the a/b/c phase first, so what stays reserved after it still covers the MSM phase.
    peak = ws.total_bytes // 2
    lowered = host_working_set(h, on_device=False, measured_bytes=peak)
    assert lowered.total_bytes == int(peak * CALIBRATION_HEADROOM) and lowered.estimated_bytes == ws.total_bytes
    assert lowered.rest_bytes == min(ws.rest_bytes, lowered.total_bytes)
    tiny = host_working_set(h, on_device=False, measured_bytes=1000)
    assert (tiny.abc_bytes, tiny.rest_bytes) == (0, int(1000 * CALIBRATION_HEADROOM))


def test_a_device_proof_reserves_no_host_msm_scratch_or_ntt_tables(circuit):
    """On a device backend the MSM scratch and the NTT tables live in VRAM: the host keeps the vectors and witness."""
    h = read_zkey_header(circuit[0])
    E, N, V = h.n8r, h.domain_size, h.n_vars
    host, device = host_working_set(h, on_device=False), host_working_set(h, on_device=True)
    assert device.abc_bytes == ABC_VECTORS * N * E
    assert device.rest_bytes == V * E + N * E + slack_bytes()
    assert host.total_bytes - device.total_bytes == N * E + 8 * N + max(cpu_msm_scratch_bytes(h, V, 2), cpu_msm_scratch_bytes(h, N, 1))


def _measured_peak(zkey_path, wtns) -> tuple[int, int]:
    """The resident peak of a whole proof from a trimmed heap, and the estimate for it.

    Measured after warm-up runs, as the engine does: what the first runs map for good (numba's
    cached code, in a fresh clone even in the second run) is not the job's and is not counted.
    """
    backend = get_backend("cpu")
    zkey = read_zkey(zkey_path)
    hot = {name: np.array(getattr(zkey, name)) for name in ("coeffs", "a", "b1", "b2", "c", "h")}  # resident, like a hot key
    zkey = type(zkey)(**{**{f: getattr(zkey, f) for f in zkey.__dataclass_fields__}, **hot})
    ws = host_working_set(zkey.header, on_device=False)
    probe = PeakProbe()
    if not probe.available:
        pytest.skip("/proc/self/clear_refs is not writable here")
    for _ in range(2):  # warm-up: numba compiles (and caches) per argument layout, and a layout first met in a
        prove(backend, zkey, read_wtns(wtns))  # second run would compile inside the measured one (not the job's memory)
    return_free_heap()
    baseline = probe.begin()
    prove(backend, zkey, read_wtns(wtns))
    return probe.end(baseline), ws.total_bytes


def test_estimate_bounds_a_real_proof(circuit):
    """The estimate (the witness counted once) is at least the resident peak of a whole proof of a synthetic circuit."""
    zkey_path, wtns, _ = circuit
    measured, estimate = _measured_peak(zkey_path, wtns)
    assert 0 < measured <= estimate, (measured, estimate)


def test_estimate_bounds_a_real_proof_of_a_corpus_circuit(corpus_circuit):
    """And of each real circom circuit of the corpus (the toy one's proof may not raise the resident set at all)."""
    measured, estimate = _measured_peak(corpus_circuit / "circuit.zkey", corpus_circuit / "witness.wtns")
    assert measured <= estimate, (measured, estimate)


def test_peak_probe_sees_an_allocation_and_a_mapped_file():
    probe = PeakProbe()
    if not probe.available:
        pytest.skip("/proc/self/clear_refs is not writable here")
    return_free_heap()
    baseline = probe.begin()
    block = np.ones(32 << 20, dtype=np.uint8)
    del block
    assert (31 << 20) <= probe.end(baseline) < (40 << 20)  # RSS counters lag by a few pages
    # A mapped file read in full counts as well (a job's witness is one): it is resident, and the kernel charges it.
    import mmap
    import tempfile

    with tempfile.TemporaryFile() as f:
        f.write(b"\x01" * (32 << 20))
        f.flush()
        return_free_heap()
        baseline = probe.begin()
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            assert sum(m[i] for i in range(0, len(m), 4096)) == (32 << 20) // 4096
            assert (31 << 20) <= probe.end(baseline) < (40 << 20)
    assert probe.end(None) is None
