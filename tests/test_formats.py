"""cuzk.formats: readers and writers of snarkjs's files, on synthetic files (always) and the real corpus (when present)."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import stat
import subprocess
import threading
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, SNARKJS, snarkjs_available, snarkjs_verify
from cuzk.ff.field import as_u64, field_consts, fp_scale_vec
from cuzk.curves import BLS12_381, BN254, Curve
from cuzk.curves.serialize import g1_to_bytes, g2_to_bytes
from cuzk.formats.binfile import BinFile, write_binfile
from cuzk.formats.json_io import (
    Groth16Proof,
    VerificationKey,
    dumps_like_snarkjs,
    proof_to_json,
    public_to_json,
    read_proof,
    read_public,
    read_vkey,
    vkey_to_json,
    write_proof,
    write_public,
    write_vkey,
)
from cuzk.formats.limbs import first_not_below, ints_to_limbs, limbs_to_int, limbs_to_ints
from cuzk.formats.r1cs import R1CS, SparseMatrix, check_satisfied, read_r1cs, write_r1cs
from cuzk.formats.errors import FormatError
from cuzk.formats.wtns import read_wtns, write_wtns, wtns_bytes
from cuzk.formats.zkey import (
    MPCParams,
    ZKey,
    ZKeyContribution,
    coeff_dtype,
    coeff_values_mont,
    coeff_values_standard,
    encode_coeff_values,
    read_zkey,
    read_zkey_header,
    write_zkey,
)

CURVES = [pytest.param(BN254, id="bn254"), pytest.param(BLS12_381, id="bls12_381")]


# synthetic files (no corpus needed) ------------------------------------------------------
def synthetic_circuit(curve: Curve, n_chain: int = 6, x: int = 3, y: int = 5) -> tuple[dict, list[int]]:
    """A small chain circuit and its witness, as write_r1cs arguments.

    Wires: 0 = one, 1 = out (public output), 2 = x (public input), 3 = y (private input),
    then t_0..t_{n-1} with −t_i = (2·t_{i−1} + i)·x (t_{−1} = y), and out·1 = t_{n−1}.
    The −1 coefficient makes the coefficients span the whole field.
    """
    r = curve.r
    w = [1, 0, x, y]
    A, B, C = [], [], []
    prev = 3
    for i in range(n_chain):
        new = len(w)
        w.append(-(2 * w[prev] + i) * x % r)
        A.append({prev: 2, 0: i} if i else {prev: 2})
        B.append({2: 1})
        C.append({new: r - 1})
        prev = new
    w[1] = w[prev]
    A.append({prev: 1})
    B.append({0: 1})
    C.append({1: 1})
    L = curve.Fr.limbs32
    args = dict(
        curve=curve, n_pub_out=1, n_pub_in=1, n_prv_in=1,
        A=SparseMatrix.from_rows(A, L), B=SparseMatrix.from_rows(B, L), C=SparseMatrix.from_rows(C, L),
    )  # fmt: skip
    return args, w


def point_rows(curve: Curve, group: int, scalars: list[int]) -> np.ndarray:
    """Real points k·G as (n, 2, Lq) or (n, 2, 2, Lq) uint32 Montgomery arrays (k = 0 is infinity)."""
    G = curve.G1 if group == 1 else curve.G2
    enc = g1_to_bytes if group == 1 else g2_to_bytes
    raw = b"".join(enc(curve, G.mul(G.generator, k)) for k in scalars)
    shape = (len(scalars), 2, curve.Fq.limbs32) if group == 1 else (len(scalars), 2, 2, curve.Fq.limbs32)
    return np.frombuffer(raw, dtype="<u4").reshape(shape).copy()


def zkey_coeffs_for(curve: Curve, r1cs_args: dict, n_public: int) -> np.ndarray:
    """The coefficient section snarkjs's setup derives from an r1cs: A and B per constraint, then one A row per public signal."""
    A, B = r1cs_args["A"], r1cs_args["B"]
    entries = []
    for c in range(A.n_rows):
        for m, M in ((0, A), (1, B)):
            lo, hi = M.row_ptr[c], M.row_ptr[c + 1]
            entries += [(m, c, int(M.col[k]), limbs_to_int(M.values[k])) for k in range(lo, hi)]
    entries += [(0, A.n_rows + s, s, 1) for s in range(n_public + 1)]
    coeffs = np.zeros(len(entries), dtype=coeff_dtype(curve.Fr.n8))
    coeffs["matrix"], coeffs["constraint"], coeffs["signal"] = (np.array([e[i] for e in entries]) for i in range(3))
    coeffs["value"] = encode_coeff_values(curve, ints_to_limbs((e[3] for e in entries), curve.Fr.limbs32))
    return coeffs


def synthetic_zkey_args(curve: Curve, n_chain: int = 6) -> dict:
    """write_zkey arguments for the synthetic circuit: real header points, real (meaningless) section points."""
    r1cs_args, w = synthetic_circuit(curve, n_chain)
    n_vars, n_public = len(w), 2
    n_rows = r1cs_args["A"].n_rows + n_public + 1
    domain_size = 1 << (n_rows - 1).bit_length()
    G1, G2 = curve.G1, curve.G2
    contribution = ZKeyContribution(
        G1.mul(G1.generator, 7), G1.mul(G1.generator, 8), G1.mul(G1.generator, 9), G2.mul(G2.generator, 10),
        bytes(range(64)), 0, "synthetic",
    )  # fmt: skip
    return dict(
        curve=curve, n_vars=n_vars, n_public=n_public, domain_size=domain_size,
        alpha1=G1.mul(G1.generator, 11), beta1=G1.mul(G1.generator, 12), beta2=G2.mul(G2.generator, 13),
        gamma2=G2.generator, delta1=G1.mul(G1.generator, 14), delta2=G2.mul(G2.generator, 15),
        ic=point_rows(curve, 1, list(range(n_public + 1))),
        coeffs=zkey_coeffs_for(curve, r1cs_args, n_public),
        a=point_rows(curve, 1, list(range(100, 100 + n_vars))),
        b1=point_rows(curve, 1, list(range(200, 200 + n_vars))),
        b2=point_rows(curve, 2, list(range(300, 300 + n_vars))),
        c=point_rows(curve, 1, list(range(400, 400 + n_vars - n_public - 1))),
        h=point_rows(curve, 1, list(range(500, 500 + domain_size))),
        mpc=MPCParams(bytes(range(64, 128)), (contribution,)),
    )  # fmt: skip


_SYNTHETIC_ZKEY_ARGS: dict[str, dict] = {}


def cached_zkey_args(curve: Curve) -> dict:
    """Synthetic zkey arguments, built once per curve (the G2 point multiplications take a moment)."""
    if curve.name not in _SYNTHETIC_ZKEY_ARGS:
        _SYNTHETIC_ZKEY_ARGS[curve.name] = synthetic_zkey_args(curve)
    return _SYNTHETIC_ZKEY_ARGS[curve.name]


def write_synthetic_files(curve: Curve, directory: Path) -> dict[str, Path]:
    """circuit.r1cs, witness.wtns and circuit.zkey of the synthetic circuit in ``directory``."""
    r1cs_args, w = synthetic_circuit(curve)
    paths = {"r1cs": directory / "circuit.r1cs", "wtns": directory / "witness.wtns", "zkey": directory / "circuit.zkey"}
    write_r1cs(paths["r1cs"], **r1cs_args)
    write_wtns(paths["wtns"], curve, w)
    write_zkey(paths["zkey"], **cached_zkey_args(curve))
    return paths


def reference_row_holds(r1cs: R1CS, w: list[int], i: int) -> bool:
    """(A_i·w)(B_i·w) = C_i·w with plain ints: the oracle for check_satisfied."""
    r = r1cs.curve.r

    def dot(M: SparseMatrix) -> int:
        lo, hi = M.row_ptr[i], M.row_ptr[i + 1]
        return sum(v * w[int(j)] for v, j in zip(limbs_to_ints(M.values[lo:hi]), M.col[lo:hi])) % r

    return dot(r1cs.A) * dot(r1cs.B) % r == dot(r1cs.C)


def assert_zkey_matches_r1cs(zkey: ZKey, r1cs: R1CS) -> None:
    """The key's coefficients are exactly the r1cs's A and B entries plus snarkjs's extra public rows."""
    assert zkey.curve is r1cs.curve and zkey.n_vars == r1cs.n_wires and zkey.n_public == r1cs.n_public
    assert zkey.domain_size >= r1cs.n_constraints + r1cs.n_public + 1
    values = limbs_to_ints(coeff_values_standard(zkey))
    from_key = sorted(zip(zkey.coeffs["matrix"].tolist(), zkey.coeffs["constraint"].tolist(), zkey.coeffs["signal"].tolist(), values))
    expected = []
    for m, M in ((0, r1cs.A), (1, r1cs.B)):
        rows = np.repeat(np.arange(M.n_rows), np.diff(M.row_ptr))
        expected += zip([m] * M.nnz, rows.tolist(), M.col.tolist(), limbs_to_ints(M.values))
    expected += [(0, r1cs.n_constraints + s, s, 1) for s in range(r1cs.n_public + 1)]
    assert from_key == sorted(expected)


# limbs and the Montgomery kernel ---------------------------------------------------------
@given(st.lists(st.integers(0, (1 << 384) - 1), max_size=20))
def test_limbs_round_trip(values):
    assert limbs_to_ints(ints_to_limbs(values, 12)) == values


def test_ints_to_limbs_rejects_values_that_do_not_fit():
    with pytest.raises(ValueError, match="does not fit"):
        ints_to_limbs([1 << 256], 8)
    with pytest.raises(ValueError, match="does not fit"):
        ints_to_limbs([-1], 8)


@given(st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=30), st.integers(0, 2))
def test_first_not_below_finds_first_unreduced(values, which):
    bound = [1 << 63, 2**64 - 59, 12345][which]
    expected = next((i for i, v in enumerate(values) if v >= bound), None)
    assert first_not_below(ints_to_limbs(values, 2), bound) == expected


def test_first_not_below_across_chunk_boundaries(monkeypatch):
    from cuzk.formats import limbs

    monkeypatch.setattr(limbs, "CHECK_CHUNK_ROWS", 3)
    values = [5] * 10
    for bad in (0, 2, 3, 7, 9):
        assert first_not_below(ints_to_limbs(values[:bad] + [BN254.r] + values[bad + 1 :], 8), BN254.r) == bad
    assert first_not_below(ints_to_limbs(values, 8), BN254.r) is None


@pytest.mark.parametrize("curve", CURVES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_montgomery_kernel_matches_plain_ints(curve, data):
    for F in (curve.Fr, curve.Fq):
        p, L = F.p, F.limbs32
        xs = data.draw(st.lists(st.integers(0, p - 1), min_size=1, max_size=10)) + [0, 1, p - 1]
        k = data.draw(st.integers(0, p - 1))
        out = np.empty((len(xs), L), dtype=np.uint32)
        fp_scale_vec(as_u64(ints_to_limbs(xs, L)), as_u64(ints_to_limbs([k], L))[0], as_u64(out), field_consts(F))
        assert limbs_to_ints(out) == [x * k * F.R_inv % p for x in xs]


# container --------------------------------------------------------------------------------
def test_binfile_round_trip_and_zero_copy_views(tmp_path):
    path = tmp_path / "x.bin"
    big = np.arange(4 * 1000, dtype=np.uint32).reshape(1000, 4)

    def chunks():
        yield big[:300]
        yield big[300:]

    write_binfile(path, "zkey", 1, [(7, [b"abcd"]), (3, chunks()), (9, [])])
    with BinFile(path, "zkey", 1, {3: "numbers"}) as f:
        assert [(s.type, s.size) for s in f.sections] == [(7, 4), (3, big.nbytes), (9, 0)]
        assert f.read(7) == b"abcd" and f.read(9) == b""
        view = f.view(3, "<u4", (1000, 4))
    assert np.array_equal(view, big)
    assert not view.flags.writeable and not view.flags.owndata  # a view of the map, not a copy
    assert not list(tmp_path.glob(".*.tmp"))


def test_write_binfile_leaves_no_file_when_a_piece_fails(tmp_path):
    path = tmp_path / "x.bin"

    def failing():
        yield b"1234"
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError):
        write_binfile(path, "wtns", 2, [(1, failing())])
    assert list(tmp_path.iterdir()) == []


def test_write_binfile_writes_through_links_and_into_pipes(tmp_path):
    """A pipe or device (`wtns calculate ... /dev/stdout`) is written, not replaced by a renamed file (as root that
    would have put a regular file in place of /dev/stdout's target), and a symlink keeps pointing at the new file."""
    expected = tmp_path / "expected.bin"
    write_binfile(expected, "wtns", 2, [(1, [b"12345678"]), (2, [b"abcd"])])
    link, target = tmp_path / "link.bin", tmp_path / "target.bin"
    target.write_bytes(b"old")
    link.symlink_to(target)
    write_binfile(link, "wtns", 2, [(1, [b"12345678"]), (2, [b"abcd"])])
    assert link.is_symlink() and target.read_bytes() == expected.read_bytes()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    write_binfile(fifo, "wtns", 2, [(1, [b"12345678"]), (2, [b"abcd"])])
    reader.join()
    assert read == [expected.read_bytes()] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not list(tmp_path.glob(".*.tmp"))


def test_write_binfile_fills_sections_in_another_order(tmp_path):
    taken = []

    def piece(name: str, data: bytes):
        taken.append(name)
        yield data

    sections = [(1, piece("a", b"aaaa"), 4), (2, piece("b", b"bb"), 2), (3, piece("c", b"c"))]
    write_binfile(tmp_path / "x.bin", "zkey", 1, sections, fill_order=[2, 0, 1])
    assert taken == ["c", "a", "b"]
    write_binfile(tmp_path / "y.bin", "zkey", 1, [(1, [b"aaaa"]), (2, [b"bb"]), (3, [b"c"])])
    assert filecmp.cmp(tmp_path / "x.bin", tmp_path / "y.bin", shallow=False)  # laid out as if written in order
    with pytest.raises(ValueError, match="section 1: 4 bytes written where 3 were laid out"):
        write_binfile(tmp_path / "z.bin", "zkey", 1, [(1, [b"aaaa"], 3), (2, [b"b"])], fill_order=[1, 0])
    with pytest.raises(ValueError, match="not an order"):
        write_binfile(tmp_path / "z.bin", "zkey", 1, [(1, [b"aaaa"], 4), (2, [b"b"])], fill_order=[0, 0])
    assert not (tmp_path / "z.bin").exists()


# wtns -------------------------------------------------------------------------------------
@pytest.mark.parametrize("curve", CURVES)
def test_wtns_round_trip(curve, tmp_path):
    values = [0, 1, curve.r - 1, 12345678901234567890, 2**200 + 7]
    write_wtns(tmp_path / "w.wtns", curve, values)
    wit = read_wtns(tmp_path / "w.wtns")
    assert wit.curve is curve and len(wit) == len(values)
    assert wit.values.dtype == np.uint32 and wit.values.shape == (5, curve.Fr.limbs32)
    assert limbs_to_ints(wit.values) == values
    write_wtns(tmp_path / "again.wtns", curve, wit.values)
    assert (tmp_path / "again.wtns").read_bytes() == (tmp_path / "w.wtns").read_bytes()


def test_a_wtns_only_checked_stays_out_of_the_resident_set(tmp_path):
    """``read_wtns(resident=False)`` (the engine's intake) validates as ``read_wtns`` does, yet the process's resident
    set never holds more than a chunk or two of the values — a 64 MiB witness mapped whole would raise it by 64 MiB,
    which admission's peak probe would count against the jobs running then — and the values still read back."""
    from cuzk.formats.wtns import CHECK_CHUNK_BYTES
    from cuzk.memory.process import PeakProbe, return_free_heap

    probe = PeakProbe()
    if not probe.available:
        pytest.skip("/proc/self/clear_refs is not writable here")
    n = (64 << 20) // 32
    values = np.zeros((n, 8), dtype=np.uint32)
    values[:, 0] = np.arange(n, dtype=np.uint32)
    path = tmp_path / "big.wtns"
    write_wtns(path, BN254, values)
    del values
    return_free_heap()
    baseline = probe.begin()
    checked = read_wtns(path, resident=False)
    assert probe.end(baseline) < 2 * CHECK_CHUNK_BYTES + (4 << 20)
    assert len(checked) == n and int(checked.values[n - 1, 0]) == n - 1
    baseline = probe.begin()
    assert read_wtns(path).values.shape == (n, 8)
    assert probe.end(baseline) >= 60 << 20  # mapped whole and range-checked: all of it resident
    bad = bytearray(path.read_bytes())
    at = len(bad) - 3 * 32  # the third value from the end, in the last chunk
    bad[at : at + 32] = BN254.r.to_bytes(32, "little")
    path.write_bytes(bytes(bad))
    with pytest.raises(FormatError, match=f"value #{n - 3} is not reduced"):
        read_wtns(path, resident=False)


def test_write_wtns_rejects_unreduced_values_and_wrong_arrays(tmp_path):
    with pytest.raises(ValueError, match="#1 is not reduced"):
        write_wtns(tmp_path / "w.wtns", BN254, [1, BN254.r])
    with pytest.raises(ValueError, match="uint32"):
        write_wtns(tmp_path / "w.wtns", BN254, np.zeros((3, 8), dtype=np.int64))
    assert not (tmp_path / "w.wtns").exists()


def test_witness_bytes_for_the_engine_are_checked_where_the_engine_reads_them(tmp_path):
    """wtns_bytes (a client's witness on its way to the daemon) leaves the range check to read_wtns, the engine's
    intake: the client of a daemon need not load the numba kernel that does it."""
    path = tmp_path / "w.wtns"
    path.write_bytes(wtns_bytes(BN254, [1, BN254.r, 2]))
    with pytest.raises(FormatError, match="value #1 is not reduced"):
        read_wtns(path, resident=False)
    with pytest.raises(ValueError, match="uint32"):
        wtns_bytes(BN254, np.zeros((3, 8), dtype=np.int64))


# r1cs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("curve", CURVES)
def test_r1cs_round_trip_and_satisfied(curve, tmp_path):
    args, w = synthetic_circuit(curve)
    write_r1cs(tmp_path / "c.r1cs", **args)
    r1cs = read_r1cs(tmp_path / "c.r1cs")
    assert (r1cs.curve, r1cs.n_wires, r1cs.n_pub_out, r1cs.n_pub_in, r1cs.n_prv_in, r1cs.n_constraints) == (curve, len(w), 1, 1, 1, 7)
    assert r1cs.n_labels == len(w) and np.array_equal(r1cs.wire_to_label, np.arange(len(w)))
    for name in "ABC":
        got, want = getattr(r1cs, name), args[name]
        assert np.array_equal(got.row_ptr, want.row_ptr) and np.array_equal(got.col, want.col) and np.array_equal(got.values, want.values)
    assert check_satisfied(r1cs, ints_to_limbs(w, curve.Fr.limbs32)) is None
    w[5] = (w[5] + 1) % curve.r  # t_1: first used by constraint 1 (as its output)
    assert check_satisfied(r1cs, ints_to_limbs(w, curve.Fr.limbs32)) == 1


@st.composite
def random_system(draw, curve: Curve):
    """A random satisfied R1CS: random A, B rows over random wires, C_i = {0: (A_i·w)(B_i·w)}."""
    r = curve.r
    n_wires = draw(st.integers(2, 12))
    w = [1] + draw(st.lists(st.integers(0, r - 1), min_size=n_wires - 1, max_size=n_wires - 1))
    n_rows = draw(st.integers(1, 10))
    row = st.dictionaries(st.integers(0, n_wires - 1), st.integers(0, r - 1), max_size=4)
    A = draw(st.lists(row, min_size=n_rows, max_size=n_rows))
    B = draw(st.lists(row, min_size=n_rows, max_size=n_rows))
    C = [{0: sum(v * w[j] for j, v in a.items()) * sum(v * w[j] for j, v in b.items()) % r} for a, b in zip(A, B)]
    return n_wires, w, A, B, C


@pytest.mark.parametrize("curve", CURVES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_check_satisfied_finds_first_broken_constraint(curve, data, tmp_path):
    n_wires, w, A, B, C = data.draw(random_system(curve))
    L = curve.Fr.limbs32
    path = tmp_path / "rand.r1cs"
    write_r1cs(path, curve, 0, 0, 0, *(SparseMatrix.from_rows(M, L) for M in (A, B, C)), n_wires=n_wires)
    r1cs = read_r1cs(path)
    assert check_satisfied(r1cs, ints_to_limbs(w, L)) is None
    broken = data.draw(st.sets(st.integers(0, len(C) - 1), min_size=1))
    for i in broken:
        C[i] = {0: (C[i][0] + 1) % curve.r}
    write_r1cs(path, curve, 0, 0, 0, *(SparseMatrix.from_rows(M, L) for M in (A, B, C)), n_wires=n_wires)
    assert check_satisfied(read_r1cs(path), ints_to_limbs(w, L)) == min(broken)


# zkey -------------------------------------------------------------------------------------
@pytest.mark.parametrize("curve", CURVES)
def test_zkey_round_trip(curve, tmp_path):
    args = cached_zkey_args(curve)
    write_zkey(tmp_path / "k.zkey", **args)
    zkey = read_zkey(tmp_path / "k.zkey")
    header = read_zkey_header(tmp_path / "k.zkey")
    assert zkey.header == header
    for name in ("n_vars", "n_public", "domain_size", "alpha1", "beta1", "beta2", "gamma2", "delta1", "delta2", "mpc"):
        assert getattr(zkey, name) == args[name], name
    assert zkey.curve is curve and (zkey.n8q, zkey.n8r) == (curve.Fq.n8, curve.Fr.n8)
    assert zkey.power == zkey.domain_size.bit_length() - 1 and zkey.n_coeffs == len(args["coeffs"])
    for name in ("ic", "coeffs", "a", "b1", "b2", "c", "h"):
        arr = getattr(zkey, name)
        assert np.array_equal(arr, args[name]) and arr.dtype == args[name].dtype, name
        assert header.section_nbytes()[name] == arr.nbytes
    assert zkey.ic_points() == [curve.G1.mul(curve.G1.generator, k) for k in range(zkey.n_public + 1)]
    write_zkey(tmp_path / "again.zkey", **{**args, **{f.name: getattr(zkey, f.name) for f in fields(ZKey) if f.name in args}})
    assert filecmp.cmp(tmp_path / "again.zkey", tmp_path / "k.zkey", shallow=False)


@pytest.mark.parametrize("curve", CURVES)
def test_zkey_coefficients_match_r1cs_and_convert(curve, tmp_path):
    paths = write_synthetic_files(curve, tmp_path)
    zkey, r1cs = read_zkey(paths["zkey"]), read_r1cs(paths["r1cs"])
    assert_zkey_matches_r1cs(zkey, r1cs)
    standard = limbs_to_ints(coeff_values_standard(zkey))
    raw = limbs_to_ints(zkey.coeffs["value"])
    mont = limbs_to_ints(coeff_values_mont(zkey))
    R, r = curve.Fr.R, curve.r
    assert raw == [c * R * R % r for c in standard]
    assert mont == [c * R % r for c in standard]


def test_write_zkey_streams_chunks_and_checks_counts(tmp_path):
    args = cached_zkey_args(BN254)
    h = args["h"]
    write_zkey(tmp_path / "chunked.zkey", **{**args, "h": iter([h[:3], h[3:]])})
    write_zkey(tmp_path / "whole.zkey", **args)
    assert filecmp.cmp(tmp_path / "chunked.zkey", tmp_path / "whole.zkey", shallow=False)
    with pytest.raises(ValueError, match="h: expected 16 points, got 15"):
        write_zkey(tmp_path / "short.zkey", **{**args, "h": h[:-1]})
    with pytest.raises(ValueError, match="b2: expected uint32 chunks of shape"):
        write_zkey(tmp_path / "short.zkey", **{**args, "b2": args["b1"]})
    assert not (tmp_path / "short.zkey").exists()


def test_write_zkey_takes_sections_in_the_order_zkey_new_hashes_them(tmp_path):
    """IC, H, C, A, B1, B2 (what setup's circuit hash relies on), the contributions last; laid out 1..10 all the same."""
    args = cached_zkey_args(BN254)
    taken = []

    def watched(name: str):
        taken.append(name)
        yield args[name]

    def mpc():
        taken.append("mpc")
        return args["mpc"]

    write_zkey(tmp_path / "watched.zkey", **{**args, **{n: watched(n) for n in ("ic", "a", "b1", "b2", "c", "h")}, "mpc": mpc})
    assert taken == ["ic", "h", "c", "a", "b1", "b2", "mpc"]
    write_zkey(tmp_path / "whole.zkey", **args)
    assert filecmp.cmp(tmp_path / "watched.zkey", tmp_path / "whole.zkey", shallow=False)
    assert [s.type for s in read_zkey_header(tmp_path / "whole.zkey").sections] == list(range(1, 11))


# JSON ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("obj", [[], {}, {"a": [], "b": [[]], "c": {}}, ["1", ["2", "3"]], {"k": 1, "z": "é"}])
def test_dumps_like_snarkjs_matches_bfj(obj, tmp_path):
    """Compare with the bfj that snarkjs uses (it differs from JSON.stringify on empty containers)."""
    bfj = REPO / "tests" / "oracle" / "node_modules" / "bfj"
    if not (bfj.exists() and shutil.which("node")):
        pytest.skip("node + bfj (tests/oracle) not installed")
    out = tmp_path / "o.json"
    script = f"require({json.dumps(str(bfj))}).write({json.dumps(str(out))}, {json.dumps(obj)}, {{space: 1}}).then(() => 0)"
    subprocess.run(["node", "-e", script], check=True, timeout=60)
    assert dumps_like_snarkjs(obj) == out.read_text()


def test_empty_public_json_is_written_like_snarkjs():
    assert public_to_json([]) == "[\n]"


@pytest.mark.parametrize("curve", CURVES)
def test_json_round_trip(curve, tmp_path):
    G1, G2 = curve.G1, curve.G2
    proof = Groth16Proof(curve, G1.mul(G1.generator, 5), G2.mul(G2.generator, 6), None)
    write_proof(tmp_path / "proof.json", proof)
    assert read_proof(tmp_path / "proof.json") == proof
    public = [0, 1, curve.r - 1]
    write_public(tmp_path / "public.json", public)
    assert read_public(tmp_path / "public.json", curve, 3) == public
    alphabeta = [[[(i * 6 + j * 2 + k) * 1000 + 1 for k in range(2)] for j in range(3)] for i in range(2)]
    vkey = VerificationKey(curve, 2, G1.generator, G2.generator, G2.mul(G2.generator, 2), G2.mul(G2.generator, 3), alphabeta, (G1.generator, None, G1.mul(G1.generator, 9)))
    write_vkey(tmp_path / "vk.json", vkey)
    back = read_vkey(tmp_path / "vk.json")
    assert back == vkey
    doc = json.loads((tmp_path / "vk.json").read_text())
    assert list(doc) == ["protocol", "curve", "nPublic", "vk_alpha_1", "vk_beta_2", "vk_gamma_2", "vk_delta_2", "vk_alphabeta_12", "IC"]
    assert doc["IC"][1] == ["0", "1", "0"] and doc["curve"] == curve.name


# corpus --------------------------------------------------------------------------------------
def test_corpus_files_are_consistent(corpus_circuit):
    zkey = read_zkey(corpus_circuit / "circuit.zkey")
    wit = read_wtns(corpus_circuit / "witness.wtns")
    r1cs = read_r1cs(corpus_circuit / "circuit.r1cs")
    vkey = read_vkey(corpus_circuit / "verification_key.json")
    assert wit.curve is r1cs.curve is zkey.curve is vkey.curve
    assert len(wit) == r1cs.n_wires == zkey.n_vars
    assert zkey.n_public == r1cs.n_public == vkey.n_public
    assert (zkey.alpha1, zkey.beta2, zkey.gamma2, zkey.delta2) == (vkey.alpha1, vkey.beta2, vkey.gamma2, vkey.delta2)
    assert tuple(zkey.ic_points()) == vkey.ic
    assert read_public(corpus_circuit / "public.json", zkey.curve, zkey.n_public) == limbs_to_ints(wit.values[1 : zkey.n_public + 1])
    assert_zkey_matches_r1cs(zkey, r1cs)
    header = read_zkey_header(corpus_circuit / "circuit.zkey")
    assert header == zkey.header
    sizes = {s.type: s.size for s in header.sections}
    nbytes = header.section_nbytes()
    assert [nbytes[k] for k in ("ic", "a", "b1", "b2", "c", "h")] == [sizes[t] for t in (3, 5, 6, 7, 8, 9)]
    assert nbytes["coeffs"] + 4 == sizes[4]
    assert len(header.mpc.contributions) == 1 and len(header.mpc.cs_hash) == 64


def test_corpus_witness_satisfies_and_tampering_is_located(corpus_circuit):
    r1cs = read_r1cs(corpus_circuit / "circuit.r1cs")
    wit = read_wtns(corpus_circuit / "witness.wtns")
    assert check_satisfied(r1cs, wit) is None
    # Tamper with a private wire that a constraint halfway through uses; the oracle finds where it first shows.
    C = r1cs.C
    middle = next(i for i in range(r1cs.n_constraints // 2, r1cs.n_constraints) if C.row_ptr[i + 1] > C.row_ptr[i])
    wire = int(r1cs.C.col[r1cs.C.row_ptr[middle]])
    w = limbs_to_ints(wit.values)
    w[wire] = (w[wire] + 1) % r1cs.curve.r
    using = sorted({i for M in (r1cs.A, r1cs.B, r1cs.C) for i in np.repeat(np.arange(M.n_rows), np.diff(M.row_ptr))[M.col == wire].tolist()})
    expected = next(i for i in using if not reference_row_holds(r1cs, w, i))
    assert expected <= middle
    assert check_satisfied(r1cs, ints_to_limbs(w, r1cs.curve.Fr.limbs32)) == expected


def test_corpus_files_round_trip_byte_for_byte(corpus_circuit, tmp_path):
    zkey = read_zkey(corpus_circuit / "circuit.zkey")
    write_zkey(tmp_path / "k.zkey", zkey.curve, **{f.name: getattr(zkey, f.name) for f in fields(ZKey) if f.name not in set(_HEADER_ONLY)})
    assert filecmp.cmp(tmp_path / "k.zkey", corpus_circuit / "circuit.zkey", shallow=False)
    r1cs = read_r1cs(corpus_circuit / "circuit.r1cs")
    write_r1cs(tmp_path / "c.r1cs", r1cs.curve, r1cs.n_pub_out, r1cs.n_pub_in, r1cs.n_prv_in, r1cs.A, r1cs.B, r1cs.C,
               n_wires=r1cs.n_wires, n_labels=r1cs.n_labels, wire_to_label=r1cs.wire_to_label)  # fmt: skip
    assert filecmp.cmp(tmp_path / "c.r1cs", corpus_circuit / "circuit.r1cs", shallow=False)
    wit = read_wtns(corpus_circuit / "witness.wtns")
    write_wtns(tmp_path / "w.wtns", wit.curve, wit.values)
    assert filecmp.cmp(tmp_path / "w.wtns", corpus_circuit / "witness.wtns", shallow=False)


_HEADER_ONLY = ("path", "curve", "n8q", "n8r", "power", "n_coeffs", "sections")


def test_corpus_json_written_byte_for_byte(corpus_circuit, tmp_path):
    vkey = read_vkey(corpus_circuit / "verification_key.json")
    proof = read_proof(corpus_circuit / "proof.json")
    public = read_public(corpus_circuit / "public.json", vkey.curve, vkey.n_public)
    assert vkey_to_json(vkey) == (corpus_circuit / "verification_key.json").read_text()
    assert proof_to_json(proof) == (corpus_circuit / "proof.json").read_text()
    assert public_to_json(public) == (corpus_circuit / "public.json").read_text()
    # A vkey assembled from the zkey (alphabeta from the pairing helper; here from the corpus) is identical too.
    zkey = read_zkey(corpus_circuit / "circuit.zkey")
    rebuilt = VerificationKey(zkey.curve, zkey.n_public, zkey.alpha1, zkey.beta2, zkey.gamma2, zkey.delta2, vkey.alphabeta_12, tuple(zkey.ic_points()))
    write_vkey(tmp_path / "vk.json", rebuilt)
    assert (tmp_path / "vk.json").read_bytes() == (corpus_circuit / "verification_key.json").read_bytes()


def test_snarkjs_proves_with_a_key_written_by_write_zkey(tmp_path):
    """A key rewritten with a fresh MPC record (no contributions) is still a key snarkjs proves with."""
    from conftest import corpus_dir

    d = corpus_dir("toy_multiplier")
    if not snarkjs_available():
        pytest.skip("snarkjs oracle not installed")
    zkey = read_zkey(d / "circuit.zkey")
    args = {f.name: getattr(zkey, f.name) for f in fields(ZKey) if f.name not in set(_HEADER_ONLY)}
    write_zkey(tmp_path / "k.zkey", zkey.curve, **{**args, "mpc": MPCParams(bytes(64))})
    proof, public = tmp_path / "proof.json", tmp_path / "public.json"
    subprocess.run([str(SNARKJS), "groth16", "prove", str(tmp_path / "k.zkey"), str(d / "witness.wtns"), str(proof), str(public)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    assert snarkjs_verify(d / "verification_key.json", public, proof)
