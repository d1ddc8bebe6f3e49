"""Groth16 setup: keys snarkjs reads and verifies with, from sampled toxic waste or a snarkjs .ptau."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CORPUS_CIRCUITS, SNARKJS, corpus_dir, load_json, setup_cli_error, snarkjs_available, snarkjs_verify
from cuzk.backends.cpu.fixed_base import FixedBaseTable, column_sums, csr_to_columns, sparse_combinations, window_for
from cuzk.circuits.synthetic import synthesize, write_synthetic
from cuzk.cli import main as cli_main
from cuzk.curves import BLS12_381, BN254
from cuzk.curves.serialize import g1_from_bytes, g1_to_bytes, g1_to_uncompressed, g2_from_bytes, g2_to_bytes
from cuzk.formats.binfile import BinFile, write_binfile
from cuzk.formats.limbs import ints_to_limbs, limbs_to_ints
from cuzk.formats.ptau import read_ptau
from cuzk.formats.r1cs import SparseMatrix, read_r1cs, write_r1cs
from cuzk.formats.wtns import write_wtns
from cuzk.formats.zkey import read_zkey, read_zkey_header
from cuzk.prover.ceremony import hash_to_g2
from cuzk.prover.pairing.engine import engine
from cuzk.prover.setup import TEST_ONLY_NAME, SetupError, coefficient_section, domain_power, lagrange_at, setup

CURVES = [BN254, BLS12_381]
FAST_CORPUS = ["toy_multiplier", "chain4000_bls12381"]  # one circuit per curve by default, the rest with -m slow
SLOW_CORPUS = [c for c in CORPUS_CIRCUITS if c not in FAST_CORPUS]


def _points(curve, group, rows):
    decode = g1_from_bytes if group == 1 else g2_from_bytes
    return [decode(curve, row.tobytes()) for row in rows]


def _rows(curve, group, points):
    encode = g1_to_bytes if group == 1 else g2_to_bytes
    L = curve.Fq.limbs32
    shape = (len(points), 2, L) if group == 1 else (len(points), 2, 2, L)
    return np.frombuffer(b"".join(encode(curve, P) for P in points), dtype="<u4").reshape(shape).copy()


# ----------------------------------------------------------------------------------
# Kernels against the plain-int reference.


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@pytest.mark.parametrize("log_n", [1, 3, 5])
def test_lagrange_basis_matches_reference(curve, log_n):
    Fr, r = curve.Fr, curve.r
    tau = random.randrange(2, r)
    n = 1 << log_n
    for odd in (False, True):
        size = 2 * n if odd else n
        w = curve.fr_root_of_unity(log_n + 1 if odd else log_n)
        domain = [pow(w, k, r) for k in range(size)]
        points = domain[1::2] if odd else domain
        expected = []
        for x in points:
            num = den = 1
            for y in domain:
                if y != x:
                    num, den = num * (tau - y) % r, den * (x - y) % r
            expected.append(num * pow(den, -1, r) % r)
        got = [Fr.from_mont(v) for v in limbs_to_ints(lagrange_at(curve, log_n, tau, odd_of_double=odd))]
        assert got == expected


def _edge_scalars(r):
    return [0, 1, 2, 3, r - 1, r - 2, (r - 1) // 2, (r + 1) // 2, 1 << 250] + [(1 << k) - 1 for k in (5, 13, 16, 64, 200)]


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("n_hint", [1, 2000, pytest.param(200_000, marks=pytest.mark.slow)])
def test_fixed_base_matches_reference(curve, group, n_hint):
    G = curve.G1 if group == 1 else curve.G2
    base = G.mul(G.generator, random.randrange(1, curve.r))
    scalars = _edge_scalars(curve.r) + [random.randrange(curve.r) for _ in range(20)]
    table = FixedBaseTable(curve, group, base, n_hint)
    assert table.window == window_for(curve.r.bit_length(), n_hint)
    got = _points(curve, group, table.mul(ints_to_limbs(scalars, curve.Fr.limbs32)))
    assert got == [G.mul(base, k) for k in scalars]


@settings(max_examples=10, deadline=None)
@given(scalars=st.lists(st.integers(0, BN254.r - 1), min_size=0, max_size=12))
def test_fixed_base_property(scalars):
    table = FixedBaseTable(BN254, 1, BN254.G1.generator, 300)
    got = _points(BN254, 1, table.mul(ints_to_limbs(scalars, 8)))
    assert got == [BN254.G1.mul(BN254.G1.generator, k) for k in scalars]


def test_fixed_base_rejects_unreduced_scalars():
    table = FixedBaseTable(BN254, 1, BN254.G1.generator, 4)
    with pytest.raises(ValueError, match="not reduced"):
        table.mul(ints_to_limbs([5, BN254.r], 8))
    with pytest.raises(ValueError, match="uint32"):
        table.mul(np.zeros((3, 8), dtype=np.uint64))


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@pytest.mark.parametrize("group", [1, 2])
def test_sparse_combinations_match_reference(curve, group):
    G, r = (curve.G1 if group == 1 else curve.G2), curve.r
    points = [G.mul(G.generator, random.randrange(1, r)) for _ in range(6)] + [None]
    counts = [0, 1, 2, 5, 1, 3]
    index = [random.randrange(len(points)) for _ in range(sum(counts))]
    index[0] = 3
    index[1:3] = [4, 4]  # the same point twice in one sum
    coeffs = [1, r - 1, 2, random.randrange(r), 7, r - 7, 0, 1 << 200, random.randrange(r), 3, r - 1, random.randrange(r)]
    indptr = np.concatenate([[0], np.cumsum(counts)])
    got = _points(curve, group, sparse_combinations(curve, _rows(curve, group, points), indptr, np.array(index), ints_to_limbs(coeffs, curve.Fr.limbs32)))
    expected = []
    for k in range(len(counts)):
        acc = None
        for e in range(indptr[k], indptr[k + 1]):
            acc = G.add(acc, G.mul(points[index[e]], coeffs[e]) if points[index[e]] else None)
        expected.append(acc)
    assert got == expected
    with pytest.raises(ValueError, match="outside"):
        sparse_combinations(curve, _rows(curve, group, points[:2]), np.array([0, 1]), np.array([2]), ints_to_limbs([1], curve.Fr.limbs32))


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_column_sums_match_reference(curve):
    Fr, r = curve.Fr, curve.r
    lag = [random.randrange(r) for _ in range(9)]
    counts = [2, 0, 4, 1]
    rows = [random.randrange(9) for _ in range(7)]
    coeffs = [random.randrange(r) for _ in range(6)] + [r - 1]
    indptr = np.concatenate([[0], np.cumsum(counts)])
    got = limbs_to_ints(column_sums(curve, indptr, np.array(rows), ints_to_limbs(coeffs, 8), ints_to_limbs([Fr.to_mont(v) for v in lag], 8)))
    expected = [sum(coeffs[e] * lag[rows[e]] for e in range(indptr[k], indptr[k + 1])) % r for k in range(4)]
    assert got == expected


@settings(max_examples=25, deadline=None)
@given(data=st.data(), n_rows=st.integers(0, 12), n_cols=st.integers(1, 9), n_extra=st.integers(0, 4))
def test_csr_to_columns_is_a_stable_transpose(data, n_rows, n_cols, n_extra):
    counts = data.draw(st.lists(st.integers(0, 5), min_size=n_rows, max_size=n_rows))
    nnz = sum(counts)
    col = np.array(data.draw(st.lists(st.integers(0, n_cols - 1), min_size=nnz, max_size=nnz)), dtype=np.uint32)
    values = np.arange(nnz * 8, dtype=np.uint32).reshape(nnz, 8)
    extra_cols = np.array(data.draw(st.lists(st.integers(0, n_cols - 1), min_size=n_extra, max_size=n_extra)), dtype=np.int64)
    extra_rows = np.arange(n_rows, n_rows + n_extra, dtype=np.int64)
    one = np.full(8, 7, dtype=np.uint32)
    indptr, rows, got = csr_to_columns(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), col, values, n_cols, extra_rows, extra_cols, one)
    # The reference: every entry as (column, position in file order), sorted.
    entries = [(int(c), r, tuple(values[e])) for e, (r, c) in enumerate(zip(np.repeat(np.arange(n_rows), counts), col))]
    entries += [(int(c), int(r), tuple(one)) for r, c in zip(extra_rows, extra_cols)]
    entries.sort(key=lambda t: t[0])  # stable
    assert list(np.diff(indptr)) == [sum(1 for t in entries if t[0] == c) for c in range(n_cols)]
    assert [int(r) for r in rows] == [t[1] for t in entries]
    assert [tuple(v) for v in got] == [t[2] for t in entries]


# ----------------------------------------------------------------------------------
# What only depends on the r1cs is exactly what snarkjs writes.


@pytest.mark.parametrize("name", CORPUS_CIRCUITS or ["toy_multiplier"])
def test_domain_and_coefficients_match_snarkjs(name):
    d = corpus_dir(name)
    r1cs = read_r1cs(d / "circuit.r1cs")
    snarkjs_key = read_zkey(d / "circuit.zkey")
    assert 1 << domain_power(r1cs.n_constraints, r1cs.n_public) == snarkjs_key.domain_size
    assert coefficient_section(r1cs).tobytes() == snarkjs_key.coeffs.tobytes()


# ----------------------------------------------------------------------------------
# Whole keys: cuzk's proofs verify with snarkjs (and snarkjs's proofs with the key's vkey).


def _prove_and_check(zkey, wtns, vkey, tmp_path, snarkjs_proves=False):
    """cuzk proves, snarkjs verifies with the exported key; optionally snarkjs proves with the zkey and cuzk verifies."""
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"
    assert cli_main(["prove", str(zkey), str(wtns), str(proof), str(public)]) == 0
    assert snarkjs_verify(vkey, public, proof)
    if not snarkjs_proves:
        return
    s_proof, s_public = tmp_path / "snarkjs_proof.json", tmp_path / "snarkjs_public.json"
    res = subprocess.run([str(SNARKJS), "groth16", "prove", str(zkey), str(wtns), str(s_proof), str(s_public)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert load_json(s_public) == load_json(public)
    assert cli_main(["verify", str(vkey), str(s_public), str(s_proof)]) == 0


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@pytest.mark.parametrize(("n", "n_public"), [(200, 0), pytest.param(1 << 10, 3, marks=pytest.mark.slow)])
def test_test_only_key_for_synthetic_circuit(curve, n, n_public, tmp_path, capsys):
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed")
    r1cs_path, wtns_path = write_synthetic(tmp_path, synthesize(curve, n, n_public, seed=n))
    zkey = tmp_path / "circuit.zkey"
    assert cli_main(["setup", str(r1cs_path), str(zkey), "--curve", curve.name]) == 0
    out = capsys.readouterr().out
    assert "TESTING ONLY" in out
    header = read_zkey_header(zkey)
    assert [c.name for c in header.mpc.contributions] == [TEST_ONLY_NAME]
    assert header.delta1 == header.mpc.contributions[0].delta_after != curve.G1.generator
    assert header.gamma2 == curve.G2.generator
    assert 1 << header.power == header.domain_size >= n + n_public + 1
    _check_test_only_contribution(curve, header)
    _prove_and_check(zkey, wtns_path, tmp_path / "verification_key.json", tmp_path, snarkjs_proves=True)


def _check_test_only_contribution(curve, header):
    """No ceremony, no circuit hash (zero); the contribution is otherwise what snarkjs checks: a transcript of (s·G1,
    δ·s·G1) and g2_spx = δ·hashToG2(transcript) for the key's δ."""
    c = header.mpc.contributions[0]
    assert header.mpc.cs_hash == bytes(64)
    assert c.transcript == hashlib.blake2b(bytes(64) + g1_to_uncompressed(curve, c.g1_s) + g1_to_uncompressed(curve, c.g1_sx), digest_size=64).digest()
    pairings, g2_sp = engine(curve), hash_to_g2(curve, c.transcript)
    assert pairings.tower.eq(pairings.pairing(c.g1_s, c.g2_spx), pairings.pairing(c.g1_sx, g2_sp))
    assert pairings.tower.eq(pairings.pairing(curve.G1.generator, c.g2_spx), pairings.pairing(header.delta1, g2_sp))


@pytest.mark.parametrize("name", FAST_CORPUS + [pytest.param(c, marks=pytest.mark.slow) for c in SLOW_CORPUS])
def test_test_only_key_for_corpus_circuit(name, tmp_path):
    _corpus_key(name, tmp_path)


def _corpus_key(name, tmp_path):
    d = corpus_dir(name)
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed")
    zkey, vkey = tmp_path / "circuit.zkey", tmp_path / "vk.json"
    assert cli_main(["setup", str(d / "circuit.r1cs"), str(zkey), "--vkey", str(vkey)]) == 0
    theirs, ours = read_zkey_header(d / "circuit.zkey"), read_zkey_header(zkey)
    assert (ours.curve, ours.n_vars, ours.n_public, ours.domain_size) == (theirs.curve, theirs.n_vars, theirs.n_public, theirs.domain_size)
    assert ours.section_nbytes() == theirs.section_nbytes()
    _prove_and_check(zkey, d / "witness.wtns", vkey, tmp_path, snarkjs_proves=name == "toy_multiplier")


def test_every_setup_samples_fresh_secrets(tmp_path):
    r1cs = write_synthetic(tmp_path, synthesize(BN254, 20, 1, seed=1))[0]
    keys = [read_zkey_header(setup(r1cs, tmp_path / f"{i}.zkey").zkey) for i in range(2)]
    assert keys[0].alpha1 != keys[1].alpha1 and keys[0].delta2 != keys[1].delta2


def _matrix(curve, *rows: list[tuple[int, int]]) -> SparseMatrix:
    """A sparse matrix of (wire, coefficient) rows."""
    entries = [entry for row in rows for entry in row]
    return SparseMatrix(np.cumsum([0, *map(len, rows)]).astype(np.int64), np.array([w for w, _ in entries], np.uint32),
                        ints_to_limbs([c % curve.r for _, c in entries], curve.Fr.limbs32))


@pytest.mark.parametrize("shape", ["no constraints", "private input optimised away"])
def test_circuits_optimised_down_to_their_public_signals(shape, tmp_path):
    """What circom leaves of a circuit whose checks are all linear (snarkjs sets both up and proves with the keys):
    no constraint at all (only the public rows of the domain), or, after --O2, a private input substituted away, so
    that nPrvIn exceeds the wires left for it."""
    curve = BN254
    if shape == "no constraints":  # b <-- 3a: out b, in a
        nothing = _matrix(curve)
        write_r1cs(tmp_path / "c.r1cs", curve, 1, 1, 0, nothing, nothing, nothing)
        witness = [1, 15, 5]
    else:  # c <== a + b + 7; d <== 3a - b, b private: b leaves, c + d - 4a - 7 = 0 stays (0 · 0 = C·w)
        none = _matrix(curve, [])
        write_r1cs(tmp_path / "c.r1cs", curve, 2, 1, 1, none, none, _matrix(curve, [(0, -7), (1, 1), (2, 1), (3, -4)]), n_wires=4)
        witness = [1, 14, 33, 10]
    r1cs = read_r1cs(tmp_path / "c.r1cs")
    assert (r1cs.n_wires, r1cs.n_public) == (len(witness), len(witness) - 1)
    write_wtns(tmp_path / "c.wtns", curve, witness)
    zkey, vkey = tmp_path / "c.zkey", tmp_path / "vk.json"
    assert cli_main(["setup", str(tmp_path / "c.r1cs"), str(zkey), "--vkey", str(vkey), "-q"]) == 0
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"
    assert cli_main(["prove", "--local", "--r1cs", str(tmp_path / "c.r1cs"), str(zkey), str(tmp_path / "c.wtns"), str(proof), str(public)]) == 0
    assert load_json(public) == [str(v) for v in witness[1:]]
    assert cli_main(["verify", str(vkey), str(public), str(proof)]) == 0
    if snarkjs_available():
        assert snarkjs_verify(vkey, public, proof)


# ----------------------------------------------------------------------------------
# From a snarkjs powers of tau.


def _snarkjs(*args, cwd):
    res = subprocess.run([str(SNARKJS), *args], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert res.returncode == 0, res.stdout + res.stderr


def _make_ptau(factory, curve_name, power=8):
    """A prepared ptau made by snarkjs itself (new, one contribution, prepare phase2), and the unprepared one."""
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed")
    d = factory.mktemp(f"ptau_{curve_name}")
    _snarkjs("powersoftau", "new", curve_name, str(power), "pot0.ptau", cwd=d)
    _snarkjs("powersoftau", "contribute", "pot0.ptau", "pot1.ptau", "--name=cuzk test", "-e=cuzk test entropy", cwd=d)
    _snarkjs("powersoftau", "prepare", "phase2", "pot1.ptau", "final.ptau", cwd=d)
    return d / "final.ptau", d / "pot1.ptau"


@pytest.fixture(scope="session")
def ptau_bn254(tmp_path_factory):
    return _make_ptau(tmp_path_factory, "bn128")


@pytest.fixture(scope="session")
def ptau_bls12_381(tmp_path_factory):
    return _make_ptau(tmp_path_factory, "bls12381")


def _zkey_verify(r1cs, ptau, zkey) -> str | None:
    """`snarkjs zkey verify`'s complaint about the key, or None when it accepts it."""
    res = subprocess.run([str(SNARKJS), "zkey", "verify", str(r1cs), str(ptau), str(zkey)], capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    return None if res.returncode == 0 and "ZKey Ok!" in out else out


def _check_ceremony_record(curve, r1cs, ptau, zkey, tmp_path):
    """snarkjs's `zkey verify` accepts the key, whose circuit hash is `zkey new`'s, and rejects it with its contribution
    tampered (a wrong but valid g2_spx; the circuit hash changed under the transcript)."""
    _snarkjs("zkey", "new", str(r1cs), str(ptau), "new.zkey", cwd=tmp_path)
    header = read_zkey_header(zkey)
    assert header.mpc.cs_hash == read_zkey_header(tmp_path / "new.zkey").mpc.cs_hash
    assert _zkey_verify(r1cs, ptau, zkey) is None
    with BinFile(zkey, "zkey", 2) as f:
        mpc_at = f.section(10).offset  # the circuit hash, the count, then deltaAfter, g1_s, g1_sx, g2_spx...
    g2_spx_at = mpc_at + 64 + 4 + 3 * 2 * curve.Fq.n8

    def tampered(at: int, new: bytes):
        data = bytearray(zkey.read_bytes())
        data[at : at + len(new)] = new
        (tmp_path / "tampered.zkey").write_bytes(data)
        return tmp_path / "tampered.zkey"

    wrong_g2_spx = g2_to_bytes(curve, curve.G2.add(header.mpc.contributions[0].g2_spx, curve.G2.generator))
    assert "do not have the same ration" in (_zkey_verify(r1cs, ptau, tampered(g2_spx_at, wrong_g2_spx)) or "")
    other_hash = bytes([header.mpc.cs_hash[0] ^ 1])
    assert "Inconsistent transcript" in (_zkey_verify(r1cs, ptau, tampered(mpc_at, other_hash)) or "")


def _ptau_key(curve, ptau, tmp_path, capsys):
    r1cs_path, wtns_path = write_synthetic(tmp_path, synthesize(curve, 180, 2, seed=4))
    zkey = tmp_path / "circuit.zkey"
    assert cli_main(["setup", str(r1cs_path), str(ptau), str(zkey)]) == 0  # snarkjs's order (the --ptau flag: below)
    assert "TESTING ONLY" not in capsys.readouterr().out
    header = read_zkey_header(zkey)
    with read_ptau(ptau) as p:
        assert header.alpha1 == g1_from_bytes(curve, p.alpha_g1().tobytes())
        assert header.beta2 == g2_from_bytes(curve, p.beta_g2().tobytes())
    assert header.mpc.contributions[0].name == f"cuzk setup from {ptau.name}"
    _check_ceremony_record(curve, r1cs_path, ptau, zkey, tmp_path)
    _prove_and_check(zkey, wtns_path, tmp_path / "verification_key.json", tmp_path, snarkjs_proves=True)


def test_ptau_key_bn254(ptau_bn254, tmp_path, capsys):
    _ptau_key(BN254, ptau_bn254[0], tmp_path, capsys)


def test_ptau_key_for_corpus_circuit(ptau_bn254, tmp_path):
    d = corpus_dir("toy_multiplier")
    zkey = tmp_path / "circuit.zkey"
    assert cli_main(["setup", str(d / "circuit.r1cs"), str(zkey), "--ptau", str(ptau_bn254[0])]) == 0
    assert _zkey_verify(d / "circuit.r1cs", ptau_bn254[0], zkey) is None
    _prove_and_check(zkey, d / "witness.wtns", tmp_path / "verification_key.json", tmp_path)


@pytest.mark.slow
def test_ptau_key_bls12_381(ptau_bls12_381, tmp_path, capsys):
    _ptau_key(BLS12_381, ptau_bls12_381[0], tmp_path, capsys)


# ----------------------------------------------------------------------------------
# Bad inputs: one clear line, exit status 1.


def test_malformed_r1cs(tmp_path, small_r1cs, capsys):
    zkey = tmp_path / "out.zkey"
    data = small_r1cs.read_bytes()
    (tmp_path / "truncated.r1cs").write_bytes(data[: len(data) // 2])
    assert "truncated" in setup_cli_error([tmp_path / "truncated.r1cs", zkey], capsys)
    (tmp_path / "zkey.r1cs").write_bytes(b"zkey" + data[4:])
    assert "not a .r1cs file" in setup_cli_error([tmp_path / "zkey.r1cs", zkey], capsys)
    assert "cannot open" in setup_cli_error([tmp_path / "missing.r1cs", zkey], capsys)
    assert "is a bn128 circuit, not bls12-381" in setup_cli_error([small_r1cs, zkey, "--curve", "bls12-381"], capsys)
    assert not zkey.exists()


def test_malformed_ptau(ptau_bn254, tmp_path, small_r1cs, capsys):
    prepared, unprepared = ptau_bn254
    zkey = tmp_path / "out.zkey"
    assert "prepare phase2" in setup_cli_error([small_r1cs, zkey, "--ptau", unprepared], capsys)
    data = prepared.read_bytes()
    (tmp_path / "truncated.ptau").write_bytes(data[: len(data) - 1000])
    assert "truncated" in setup_cli_error([small_r1cs, zkey, "--ptau", tmp_path / "truncated.ptau"], capsys)
    (tmp_path / "garbage.ptau").write_bytes(b"\x00" * 100)
    assert "not a .ptau file" in setup_cli_error([small_r1cs, zkey, "--ptau", tmp_path / "garbage.ptau"], capsys)
    big = write_synthetic(tmp_path / "big", synthesize(BN254, 300, 1, seed=2))[0]
    assert "2^9" in setup_cli_error([big, zkey, "--ptau", prepared], capsys)
    bls = write_synthetic(tmp_path / "bls", synthesize(BLS12_381, 10, 1, seed=2))[0]
    assert "bn128" in setup_cli_error([bls, zkey, "--ptau", prepared], capsys)
    assert not zkey.exists()


def test_setup_error_is_a_value_error():
    assert issubclass(SetupError, ValueError)


def test_implausible_wire_count_is_refused_before_allocating(tmp_path, small_r1cs, capsys):
    """A header may claim 2^32 − 1 wires for a handful of constraints: a clear error, not a 400 GiB allocation."""
    with BinFile(small_r1cs, "r1cs", 1) as f:
        constraints = f.read(2)
    n_constraints = read_r1cs(small_r1cs).n_constraints
    header = b"".join([
        (32).to_bytes(4, "little"), BN254.r.to_bytes(32, "little"),
        *(v.to_bytes(4, "little") for v in (2**32 - 1, 0, 1, 2)), (2**32 - 1).to_bytes(8, "little"),
        n_constraints.to_bytes(4, "little"),
    ])  # fmt: skip
    huge = tmp_path / "huge.r1cs"
    write_binfile(huge, "r1cs", 1, [(2, [constraints]), (1, [header])])
    assert "GiB to set up" in setup_cli_error([huge, tmp_path / "out.zkey"], capsys)


def _ptau_sections(path) -> dict:
    with BinFile(path, "ptau", 1) as f:
        return {t: f.section(t) for t in (1, 4, 6, 12, 13, 14)}


def test_malformed_ptau_contents(ptau_bn254, tmp_path, small_r1cs, capsys):
    """A ptau whose framing is sound but whose header or points are not: each named, no key written."""
    prepared = ptau_bn254[0]
    data = bytearray(prepared.read_bytes())
    sec = _ptau_sections(prepared)
    zkey = tmp_path / "out.zkey"
    n8, g1 = 32, 64
    log_n = domain_power(read_r1cs(small_r1cs).n_constraints, 1)

    def bad(patch) -> str:
        d = bytearray(data)
        patch(d)
        path = tmp_path / "bad.ptau"
        path.write_bytes(bytes(d))
        return setup_cli_error([small_r1cs, zkey, "--ptau", path], capsys)

    def put(d, offset, raw):
        d[offset : offset + len(raw)] = raw

    h = sec[1].offset
    assert "field element size 40" in bad(lambda d: put(d, h, (40).to_bytes(4, "little")))
    assert "power 0 is outside" in bad(lambda d: put(d, h + 4 + n8, (0).to_bytes(4, "little")))
    assert "prime 0x3039 matches no supported curve" in bad(lambda d: put(d, h + 4, (12345).to_bytes(n8, "little")))
    # Points: the circuit's basis of size 2^log_n starts at point 2^log_n − 1 of each Lagrange section.
    first = (1 << log_n) - 1
    err = bad(lambda d: put(d, sec[12].offset + (first + 3) * g1 + n8, bytes([d[sec[12].offset + (first + 3) * g1 + n8] ^ 1])))
    assert f"2^{log_n} Lagrange basis of section lagrange tauG1: point 3 is not on bn128 G1" in err
    err = bad(lambda d: put(d, sec[13].offset + (first + 1) * 2 * g1, b"\xff" * n8))
    assert "lagrange tauG2: point 1 a coordinate is not reduced modulo q" in err
    err = bad(lambda d: put(d, sec[14].offset + (first + 2) * g1, b"\x01" + bytes(g1 - 1)))
    assert "lagrange alphaTauG1: point 2 is not on bn128 G1" in err
    assert "alpha·G1 (section alphaTauG1): point 0 is not on bn128 G1" in bad(lambda d: put(d, sec[4].offset, b"\x07" + bytes(g1 - 1)))
    # A byte flipped, not set: snarkjs mixes OS randomness into every contribution, so a set byte may already be there
    # (1 run in 256 wrote the same ptau back and the setup succeeded).
    assert "beta·G2 (section betaG2)" in bad(lambda d: put(d, sec[6].offset + 5, bytes([d[sec[6].offset + 5] ^ 0x09])))
    # H uses the odd points of the next basis up (size 2^(log_n+1), starting at point 2^(log_n+1) − 1).
    err = bad(lambda d: put(d, sec[12].offset + ((2 << log_n) - 1 + 5) * g1, b"\x02" + bytes(g1 - 1)))
    assert f"2^{log_n + 1} Lagrange basis of section lagrange tauG1: point 5 is not on bn128 G1" in err
    assert not zkey.exists()


@pytest.mark.cgroup
def test_key_too_large_for_the_cgroup_limit_is_refused_before_allocating(tmp_path, small_r1cs, memory_cgroups):
    """Inside a real 320 MiB memory cgroup the budget is that limit less the margin; setup says so and writes nothing."""
    cg = memory_cgroups(320 << 20, "cuzk-test-setup-")
    env = {**os.environ, "CUZK_STATE_DIR": str(tmp_path / "state")}
    zkey = tmp_path / "out.zkey"
    res = cg.run([sys.executable, "-m", "cuzk.cli", "setup", str(small_r1cs), str(zkey), "--backend", "cpu"], timeout=300, env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert "GiB to set up, more than the 0.2 GiB of the memory budget (ceiling 320.00 MiB from cgroup v" in res.stderr
    assert not zkey.exists() and cg.oom_kills() == 0
