"""Synthetic circuits: exact sizes, satisfied witnesses, realistic structure, files snarkjs reads."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SNARKJS, load_json, snarkjs_available
from cuzk.circuits.synthetic import MAX_CONSTRAINTS, SyntheticError, estimated_memory, synthesize, write_synthetic
from cuzk.cli import main as cli_main
from cuzk.curves import BLS12_381, BN254
from cuzk.formats.limbs import limbs_to_ints
from cuzk.formats.r1cs import check_satisfied, read_r1cs
from cuzk.formats.wtns import read_wtns

CURVES = [BN254, BLS12_381]


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@pytest.mark.parametrize(("n", "n_public"), [(1, 0), (1, 1), (7, 7), (300, 2), (1024, 5)])
def test_exact_size_and_satisfied(curve, n, n_public):
    c = synthesize(curve, n, n_public, seed=n)
    r = c.r1cs
    assert r.n_constraints == r.A.n_rows == r.B.n_rows == r.C.n_rows == n
    assert (r.n_pub_out, r.n_pub_in, r.n_public) == (0, n_public, n_public)
    assert r.n_wires == 1 + n_public + r.n_prv_in + n == c.witness.shape[0]
    assert check_satisfied(r, c.witness) is None
    assert limbs_to_ints(c.witness[:1]) == [1]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 400), public_share=st.floats(0, 1), seed=st.integers(0, 2**32), bls=st.booleans())
def test_any_size_is_satisfied_and_rows_are_sparse(n, public_share, seed, bls):
    curve = BLS12_381 if bls else BN254
    c = synthesize(curve, n, int(public_share * n), seed=seed)
    assert check_satisfied(c.r1cs, c.witness) is None
    for M in (c.r1cs.A, c.r1cs.B, c.r1cs.C):
        per_row = np.diff(M.row_ptr)
        assert per_row.max(initial=0) <= 33
        rows = np.repeat(np.arange(n), per_row)
        pairs = set(zip(rows.tolist(), M.col.tolist()))
        assert len(pairs) == M.nnz  # no wire twice in one linear combination


def test_structure_is_a_realistic_mix():
    c = synthesize(BN254, 1 << 12, 4, seed=7)
    r, w = c.r1cs, c.witness
    a_terms, b_terms, c_terms = (np.diff(M.row_ptr) for M in (r.A, r.B, r.C))
    linear = (a_terms == 0) & (b_terms == 0)
    boolean = (c_terms == 0) & (b_terms == 2)
    products = ~linear & ~boolean
    for kind, share in ((linear, 0.3), (boolean, 0.2), (products, 0.5)):
        assert abs(kind.mean() - share) < 0.05
    assert c_terms[linear].max() > 12  # bit recompositions are the widest rows
    values = limbs_to_ints(w)
    zeros, ones = sum(v == 0 for v in values), sum(v == 1 for v in values)
    full = sum(v.bit_length() > 200 for v in values)
    assert zeros > 0.1 * len(values) and ones > 0.05 * len(values) and full > 0.3 * len(values)
    coeffs = limbs_to_ints(r.C.values)
    assert {1, BN254.r - 1} <= set(coeffs) and sum(v.bit_length() > 200 for v in coeffs) > 0.05 * len(coeffs)
    # every public input is read by some constraint
    used = set(np.concatenate([r.A.col, r.B.col, r.C.col]).tolist())
    assert set(range(1, 5)) <= used


def test_same_seed_same_circuit(tmp_path):
    paths = []
    for d in ("one", "two"):
        paths.append(write_synthetic(tmp_path / d, synthesize(BLS12_381, 500, 3, seed=11)))
    for a, b in zip(*paths):
        assert a.read_bytes() == b.read_bytes()
    other = write_synthetic(tmp_path / "three", synthesize(BLS12_381, 500, 3, seed=12))
    assert other[1].read_bytes() != paths[0][1].read_bytes()


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_files_round_trip_and_snarkjs_accepts_the_witness(curve, tmp_path):
    c = synthesize(curve, 200, 2, seed=3)
    r1cs_path, wtns_path = write_synthetic(tmp_path, c)
    r1cs, wtns = read_r1cs(r1cs_path), read_wtns(wtns_path)
    assert np.array_equal(wtns.values, c.witness)
    for M, N in zip((r1cs.A, r1cs.B, r1cs.C), (c.r1cs.A, c.r1cs.B, c.r1cs.C)):
        assert np.array_equal(M.row_ptr, N.row_ptr) and np.array_equal(M.col, N.col) and np.array_equal(M.values, N.values)
    assert check_satisfied(r1cs, wtns) is None
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed")
    res = subprocess.run([str(SNARKJS), "wtns", "check", str(r1cs_path), str(wtns_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "WITNESS IS CORRECT" in res.stdout + res.stderr


@pytest.mark.parametrize(("n", "n_public"), [(0, 0), (-1, 0), (MAX_CONSTRAINTS + 1, 0), (10, 11), (10, -1)])
def test_impossible_parameters_are_clear_errors(n, n_public):
    with pytest.raises(SyntheticError, match="constraints|public inputs"):
        synthesize(BN254, n, n_public)


def test_too_large_for_this_machine_is_refused_before_allocating():
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    n = next((1 << k for k in range(20, 29) if estimated_memory(BN254, 1 << k) > total), None)
    if n is None:
        pytest.skip("this machine could generate even the largest circuit")
    with pytest.raises(SyntheticError, match="GiB to generate"):
        synthesize(BN254, n, 1)


def test_cli_writes_circuit_witness_and_public(tmp_path, capsys):
    out = tmp_path / "c"
    assert cli_main(["circuit", "synth", "--constraints", "2^9", "--public", "3", "--curve", "bls12-381", "--out", str(out), "--seed", "5"]) == 0
    assert "512 constraints" in capsys.readouterr().out
    r1cs, wtns = read_r1cs(out / "circuit.r1cs"), read_wtns(out / "witness.wtns")
    assert r1cs.curve is BLS12_381 and r1cs.n_constraints == 512 and r1cs.n_public == 3
    assert check_satisfied(r1cs, wtns) is None
    assert load_json(out / "public.json") == [str(v) for v in limbs_to_ints(wtns.values[1:4])]


def test_cli_rejects_bad_counts_and_curves(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli_main(["circuit", "synth", "--constraints", "lots", "--out", str(tmp_path)])
    assert "not a count" in capsys.readouterr().err
    assert cli_main(["circuit", "synth", "--constraints", "8", "--curve", "secp256k1", "--out", str(tmp_path)]) == 1
    assert "unknown curve" in capsys.readouterr().err
    assert cli_main(["circuit", "synth", "--constraints", "8", "--public", "9", "--out", str(tmp_path)]) == 1
    assert "public inputs" in capsys.readouterr().err
