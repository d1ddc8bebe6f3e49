"""Setup on the CUDA backend: the GPU fixed-base kernel against the CPU table, and GPU-made keys.

Each kernel test runs on the host emulation of the kernel (the same .cu source built with
the host C++ compiler; default suite) and on a real device (``-m gpu``, skipped without
CuPy or a GPU). The CPU table (backends/cpu/fixed_base.py) is the oracle: the outputs must
agree byte for byte, and the CPU table is itself tested against the plain-int reference.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import corpus_dir, setup_cli_error, snarkjs_available, snarkjs_verify
from cuzk.backends.cpu.fixed_base import FixedBaseTable
from cuzk.backends.cuda import CudaBackend, HostRuntime, VramBudget, VramExhaustedError, available
from cuzk.backends.cuda.fixed_base import CudaFixedBaseTable
from cuzk.backends.cuda.modules import host_compiler
from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.cli import main as cli_main
from cuzk.curves import BLS12_381, BN254
from cuzk.curves.serialize import g1_from_bytes, g2_from_bytes
from cuzk.formats.limbs import ints_to_limbs
from cuzk.formats.zkey import read_zkey_header
from cuzk.prover.setup import TEST_ONLY_NAME, setup

CURVES = [pytest.param(BN254, id="bn254"), pytest.param(BLS12_381, id="bls12_381")]
_runtimes: dict[str, object] = {}


def runtime_of(kind: str):
    if kind not in _runtimes:
        if kind == "gpu":
            if not available():
                pytest.skip("no CuPy or no CUDA device")
            from cuzk.backends.cuda.modules import CupyRuntime

            _runtimes[kind] = CupyRuntime()
        else:
            if host_compiler() is None:
                pytest.skip("no host C++ compiler for the CUDA host emulation")
            _runtimes[kind] = HostRuntime()
    return _runtimes[kind]


@pytest.fixture(scope="module", params=["host", pytest.param("gpu", marks=pytest.mark.gpu)])
def kind(request) -> str:
    return request.param


def _edge_scalars(r: int) -> list[int]:
    """Zero, ±small, the halves where signed digits flip, all-ones windows (long carries), r − 1."""
    return [0, 1, 2, 3, r - 1, r - 2, (r - 1) // 2, (r + 1) // 2, 1 << 250, r - (1 << 16)] + [(1 << k) - 1 for k in (5, 13, 16, 64, 200, 253)]


def _scalars(curve, count: int, seed: int) -> np.ndarray:
    rng = random.Random(seed)
    values = _edge_scalars(curve.r) + [rng.randrange(curve.r) for _ in range(count)] + [rng.randrange(1 << 20) for _ in range(count // 4)]
    return ints_to_limbs(values, curve.Fr.limbs32)


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize(("batch", "launch_points"), [(None, 1 << 22), (1, 1 << 22), (3, 7), (16, 1 << 22)])
def test_kernel_matches_cpu_table_bit_for_bit(kind, curve, group, batch, launch_points):
    """Every batch shape (one scalar a thread, ragged strides, a 16-point shared inversion) and many launches."""
    rng = random.Random(group * 7 + (batch or 0))
    G = curve.G1 if group == 1 else curve.G2
    base = G.mul(G.generator, rng.randrange(1, curve.r))
    scalars = _scalars(curve, 40, seed=group)
    cpu = FixedBaseTable(curve, group, base, 500)
    gpu = CudaFixedBaseTable(curve, group, base, 500, runtime_of(kind), batch=batch, launch_points=launch_points)
    assert gpu.window == cpu.window
    got = gpu.mul(scalars)
    assert got.dtype == np.uint32 and got.shape == cpu.mul(scalars).shape
    assert got.tobytes() == cpu.mul(scalars).tobytes()
    decode = g1_from_bytes if group == 1 else g2_from_bytes
    assert decode(curve, got[4].tobytes()) == G.mul(base, curve.r - 1)  # and one point against the reference itself
    assert not got[0].any()  # 0·G is infinity, all-zero


@settings(max_examples=8, deadline=None)
@given(values=st.lists(st.integers(0, BN254.r - 1), min_size=0, max_size=20), batch=st.integers(1, 16))
def test_kernel_property_against_reference(values, batch):
    table = CudaFixedBaseTable(BN254, 1, BN254.G1.generator, 64, runtime_of("host"), batch=batch)
    got = table.mul(ints_to_limbs(values, 8)) if values else table.mul(np.zeros((0, 8), np.uint32))
    assert [g1_from_bytes(BN254, row.tobytes()) for row in got] == [BN254.G1.mul(BN254.G1.generator, k) for k in values]


@pytest.mark.gpu
@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("group", [1, 2])
def test_kernel_matches_cpu_at_setup_size(curve, group):
    """A real launch shape: 2^17 scalars, w = 16 windows, the batch picked from the device's SM count."""
    n = 1 << 17
    rng = np.random.default_rng(group)
    limbs = rng.integers(0, 1 << 32, size=(n, curve.Fr.limbs32), dtype=np.uint64).astype(np.uint32)
    limbs[:, -1] &= (1 << ((curve.r.bit_length() - 1) % 32)) - 1  # below 2^(bits−1) < r
    limbs[: len(_edge_scalars(curve.r))] = ints_to_limbs(_edge_scalars(curve.r), curve.Fr.limbs32)
    G = curve.G1 if group == 1 else curve.G2
    gpu = CudaFixedBaseTable(curve, group, G.generator, 1 << 24, runtime_of("gpu"))
    assert gpu.window == 16
    assert gpu.mul(limbs).tobytes() == FixedBaseTable(curve, group, G.generator, 1 << 24).mul(limbs).tobytes()


def test_bad_scalars_and_freed_tables_are_refused():
    table = CudaFixedBaseTable(BN254, 1, BN254.G1.generator, 4, runtime_of("host"))
    with pytest.raises(ValueError, match="not reduced"):
        table.mul(ints_to_limbs([5, BN254.r], 8))
    with pytest.raises(ValueError, match="uint32"):
        table.mul(np.zeros((3, 8), dtype=np.uint64))
    with pytest.raises(ValueError, match="batch"):
        CudaFixedBaseTable(BN254, 1, BN254.G1.generator, 4, runtime_of("host"), batch=17)
    table.free()
    with pytest.raises(ValueError, match="freed"):
        table.mul(ints_to_limbs([5], 8))


def test_vram_budget_holds_the_table_and_each_launch():
    rt = runtime_of("host")
    budget = VramBudget(64 << 20)
    table = CudaFixedBaseTable(BN254, 2, BN254.G2.generator, 100, rt, vram=budget)
    assert budget.reserved_bytes == table.nbytes > 0
    table.mul(_scalars(BN254, 10, seed=1))
    assert budget.reserved_bytes == table.nbytes  # the launch's buffers were given back
    table.free()
    assert budget.reserved_bytes == 0
    with pytest.raises(VramExhaustedError, match="fixed-base table"):
        CudaFixedBaseTable(BN254, 1, BN254.G1.generator, 1 << 24, rt, vram=VramBudget(1 << 20))  # a 32 MiB table
    small = CudaFixedBaseTable(BN254, 1, BN254.G1.generator, 4, rt, vram=VramBudget(1 << 20))
    with pytest.raises(VramExhaustedError, match="launch"):
        small.mul(np.zeros((20_000, 8), np.uint32))


# ----------------------------------------------------------------------------------
# Whole keys made with the CUDA backend: snarkjs verifies cuzk's proofs with them.


def _check_proof(vkey, public, proof):
    """cuzk's verifier always (the device machine has no node), snarkjs's where it is installed."""
    assert cli_main(["verify", str(vkey), str(public), str(proof)]) == 0
    if snarkjs_available():
        assert snarkjs_verify(vkey, public, proof)


def _gpu_key(kind, curve, n, tmp_path):
    r1cs_path, wtns_path = write_synthetic(tmp_path, synthesize(curve, n, 2, seed=n))
    backend = CudaBackend(runtime=runtime_of(kind))
    zkey = tmp_path / "circuit.zkey"
    result = setup(r1cs_path, zkey, backend=backend)
    assert result.backend == "cuda" and result.test_only
    assert backend.vram.reserved_bytes == 0  # the tables were given back
    header = read_zkey_header(zkey)
    assert [c.name for c in header.mpc.contributions] == [TEST_ONLY_NAME]
    vkey, proof, public = tmp_path / "verification_key.json", tmp_path / "proof.json", tmp_path / "public.json"
    assert cli_main(["zkey", "export-vkey", str(zkey), str(vkey)]) == 0
    prove_on = "cuda" if kind == "gpu" else "cpu"
    assert cli_main(["prove", "--backend", prove_on, "--no-verify", str(zkey), str(wtns_path), str(proof), str(public)]) == 0
    _check_proof(vkey, public, proof)


@pytest.mark.parametrize("curve", CURVES)
def test_gpu_made_key_verifies_with_snarkjs_host(curve, tmp_path):
    _gpu_key("host", curve, 150, tmp_path)


def test_gpu_made_key_for_a_corpus_circuit(tmp_path):
    """A real circom circuit's key made through the kernel (host emulation): its proof verifies."""
    d = corpus_dir("toy_multiplier")
    zkey, vkey, proof, public = (tmp_path / n for n in ("circuit.zkey", "vk.json", "proof.json", "public.json"))
    assert setup(d / "circuit.r1cs", zkey, backend=CudaBackend(runtime=runtime_of("host"))).backend == "cuda"
    assert cli_main(["zkey", "export-vkey", str(zkey), str(vkey)]) == 0
    assert cli_main(["prove", "--backend", "cpu", "--no-verify", str(zkey), str(d / "witness.wtns"), str(proof), str(public)]) == 0
    _check_proof(vkey, public, proof)


@pytest.mark.gpu
@pytest.mark.parametrize("curve", CURVES)
def test_gpu_made_key_verifies_with_snarkjs_device(curve, tmp_path):
    _gpu_key("gpu", curve, 1 << 12, tmp_path)


@pytest.mark.gpu
def test_cli_setup_on_the_gpu_then_cuda_prove(tmp_path, capsys):
    runtime_of("gpu")
    r1cs_path, wtns_path = write_synthetic(tmp_path, synthesize(BN254, 1 << 14, 2, seed=5))
    zkey = tmp_path / "circuit.zkey"
    assert cli_main(["setup", str(r1cs_path), str(zkey), "--backend", "cuda"]) == 0
    assert ", cuda, " in capsys.readouterr().out
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"
    assert cli_main(["prove", "--backend", "cuda", "--no-verify", str(zkey), str(wtns_path), str(proof), str(public)]) == 0
    _check_proof(tmp_path / "verification_key.json", public, proof)


# ----------------------------------------------------------------------------------
# The command line: backend choice and the memory budget.


def test_cuda_backend_without_a_gpu_is_a_clear_error(small_r1cs, tmp_path, capsys):
    if available():
        pytest.skip("this machine has a GPU")
    zkey = tmp_path / "out.zkey"
    assert "cuda backend needs CuPy" in setup_cli_error([small_r1cs, zkey, "--backend", "cuda"], capsys)
    assert not zkey.exists()


def test_key_larger_than_the_memory_budget_is_refused_up_front(small_r1cs, tmp_path, capsys):
    """The budget comes from the memory plan (a configured cap here; the cgroup limit wins when lower)."""
    zkey = tmp_path / "out.zkey"
    err = setup_cli_error([small_r1cs, zkey, "--memory-budget", "200MiB"], capsys)
    assert "GiB to set up, more than the 0.1 GiB of the memory budget (ceiling 200.00 MiB from configured, less a" in err
    assert not zkey.exists()
    assert "not a byte size" in _cli_usage_error(["setup", str(small_r1cs), str(zkey), "--memory-budget", "lots"], capsys)


def _cli_usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        cli_main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_cpu_backend_by_name(small_r1cs, tmp_path, capsys):
    assert cli_main(["setup", str(small_r1cs), str(tmp_path / "k.zkey"), "--backend", "cpu"]) == 0
    assert ", cpu, " in capsys.readouterr().out
