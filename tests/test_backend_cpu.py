"""CPU backend (numba) against the plain-int reference in cuzk.curves: field, NTT, MSM, synthesis."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from cuzk.backends import BackendUnavailableError, get_backend
from cuzk.backends.base import Backend
from cuzk.backends.cpu import CpuBackend, msm, ntt
from cuzk.ff import field
from cuzk.curves import BLS12_381, BN254
from cuzk.curves.serialize import g1_to_bytes, g2_to_bytes
from cuzk.formats.limbs import ints_to_limbs, limbs_to_ints

from conftest import corpus_dir

CURVES = [BN254, BLS12_381]
FIELDS = {"bn254_fr": BN254.Fr, "bn254_fq": BN254.Fq, "bls12_381_fr": BLS12_381.Fr, "bls12_381_fq": BLS12_381.Fq}
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
backend = CpuBackend()


def elements(p: int, size: int = 24):
    """Lists of field elements that always include the edges 0, 1, p − 1."""
    edge = st.sampled_from([0, 1, 2, p - 1, p - 2, (p - 1) // 2])
    return st.lists(st.one_of(edge, st.integers(0, p - 1)), min_size=1, max_size=size)


def mont_rows(F, values) -> np.ndarray:
    return ints_to_limbs([F.to_mont(v) for v in values], F.n8 // 4)


def from_mont_rows(F, arr) -> list[int]:
    return [F.from_mont(v) for v in limbs_to_ints(arr)]


# field ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIELDS)
@SETTINGS
@given(data=st.data())
def test_field_vector_ops_match_reference(name, data):
    F = FIELDS[name]
    xs = data.draw(elements(F.p))
    ys = data.draw(st.lists(st.integers(0, F.p - 1), min_size=len(xs), max_size=len(xs)))
    fc = field.field_consts(F)
    a, b = mont_rows(F, xs), mont_rows(F, ys)
    out = np.empty_like(a)
    for op, ref in ((field.MUL, F.mul), (field.ADD, F.add), (field.SUB, F.sub)):
        field.fp_binary_vec(field.as_u64(a), field.as_u64(b), field.as_u64(out), op, fc)
        assert from_mont_rows(F, out) == [ref(x, y) for x, y in zip(xs, ys)]
    for op, ref in ((field.NEG, F.neg), (field.SQR, F.sqr)):
        field.fp_unary_vec(field.as_u64(a), field.as_u64(out), op, fc)
        assert from_mont_rows(F, out) == [ref(x) for x in xs]
    field.fp_unary_vec(field.as_u64(ints_to_limbs(xs, F.n8 // 4)), field.as_u64(out), field.TO_MONT, fc)
    assert limbs_to_ints(out) == [F.to_mont(x) for x in xs]
    field.fp_unary_vec(field.as_u64(a), field.as_u64(out), field.FROM_MONT, fc)
    assert limbs_to_ints(out) == xs
    field.fp_batch_inv_vec(field.as_u64(a), field.as_u64(out), fc)
    assert from_mont_rows(F, out) == [0 if x == 0 else F.inv(x) for x in xs]


@pytest.mark.parametrize("name", FIELDS)
def test_batch_inverse_and_powers_over_many_chunks(name):
    F = FIELDS[name]
    rng = random.Random(5)
    xs = [rng.randrange(F.p) for _ in range(5000)]
    xs[17] = 0
    fc = field.field_consts(F)
    a = mont_rows(F, xs)
    field.fp_batch_inv_vec(field.as_u64(a), field.as_u64(a), fc)  # in place, several parallel chunks
    assert from_mont_rows(F, a) == [0 if x == 0 else F.inv(x) for x in xs]
    base = rng.randrange(F.p)
    powers = np.empty((3000, F.n8 // 4), np.uint32)
    field.fp_mul_powers_vec(np.empty((0, F.n8 // 8), np.uint64), field.to_mont_int(F, base), field.as_u64(powers), fc)
    assert from_mont_rows(F, powers) == [pow(base, i, F.p) for i in range(3000)]


@njit(cache=True)
def _fp2_apply(a, b, out, op, fc):
    for i in range(a.shape[0]):
        if op == 0:
            field.fe_mul(a[i], b[i], out[i], fc)
        elif op == 1:
            field.fe_sqr(a[i], out[i], fc)
        elif op == 2:
            field.fe_inv(a[i], out[i], fc)
        elif op == 3:
            field.fe_add(a[i], b[i], out[i], fc)
        elif op == 4:
            field.fe_sub(a[i], b[i], out[i], fc)
        else:
            field.fe_neg(a[i], out[i], fc)


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@SETTINGS
@given(data=st.data())
def test_fp2_ops_match_reference(curve, data):
    F, F2 = curve.Fq, curve.Fq2
    xs = data.draw(st.lists(st.tuples(elements(F.p, 1).map(lambda v: v[0]), st.integers(0, F.p - 1)), min_size=1, max_size=8))
    ys = data.draw(st.lists(st.tuples(st.integers(0, F.p - 1), elements(F.p, 1).map(lambda v: v[0])), min_size=len(xs), max_size=len(xs)))
    n = F.n8 // 8

    def block(values):
        return field.as_u64(mont_rows(F, [c for v in values for c in v])).reshape(len(values), 2, n)

    a, b = block(xs), block(ys)
    out = np.empty_like(a)
    refs = [F2.mul, F2.sqr, lambda x: F2.zero if F2.is_zero(x) else F2.inv(x), F2.add, F2.sub, F2.neg]
    for op, ref in enumerate(refs):
        _fp2_apply(a, b, out, op, field.field_consts(F))
        flat = from_mont_rows(F, field.as_u32(out.reshape(-1, n)))
        got = list(zip(flat[0::2], flat[1::2]))
        want = [ref(x, y) for x, y in zip(xs, ys)] if op in (0, 3, 4) else [ref(x) for x in xs]
        assert got == [tuple(w) for w in want], f"op {op}"


def test_backend_fr_ops_and_errors():
    F = BN254.Fr
    xs = [0, 1, F.p - 1, 12345]
    a = mont_rows(F, xs)
    assert from_mont_rows(F, backend.fr_mul(BN254, a, a)) == [x * x % F.p for x in xs]
    assert from_mont_rows(F, backend.fr_sub(BN254, a, a[::-1].copy())) == [(x - y) % F.p for x, y in zip(xs, xs[::-1])]
    assert limbs_to_ints(backend.fr_from_mont(BN254, a)) == xs
    assert limbs_to_ints(backend.fr_to_mont(BN254, ints_to_limbs(xs, 8))) == [F.to_mont(x) for x in xs]
    with pytest.raises(ValueError, match="shape"):
        backend.fr_mul(BN254, a, a[:2])
    with pytest.raises(ValueError, match="uint32"):
        backend.fr_mul(BN254, a.astype(np.int64), a.astype(np.int64))
    with pytest.raises(ValueError, match=r"shape \(n, 8\)"):
        backend.fr_to_mont(BLS12_381, np.zeros((3, 12), np.uint32))


# NTT --------------------------------------------------------------------------------


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@pytest.mark.parametrize("log_n", [0, 1, 2, 3, 5])
def test_ntt_equals_naive_dft_with_snarkjs_root(curve, log_n):
    F, n = curve.Fr, 1 << log_n
    rng = random.Random(log_n)
    coeffs = [rng.randrange(F.p) for _ in range(n)]
    w = curve.fr_root_of_unity(log_n)
    shift = rng.randrange(1, F.p)
    dft = [sum(c * pow(w, i * j, F.p) for j, c in enumerate(coeffs)) % F.p for i in range(n)]
    coset = [sum(c * pow(shift * pow(w, i, F.p), j, F.p) for j, c in enumerate(coeffs)) % F.p for i in range(n)]
    a = mont_rows(F, coeffs)
    assert from_mont_rows(F, backend.ntt(curve, a)) == dft
    assert from_mont_rows(F, backend.intt(curve, mont_rows(F, dft))) == coeffs
    assert from_mont_rows(F, backend.coset_ntt(curve, a, shift)) == coset


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@pytest.mark.parametrize("log_n", [10, 13])
def test_intt_inverts_ntt_at_parallel_sizes(curve, log_n):
    F = curve.Fr
    rng = random.Random(log_n)
    values = [rng.randrange(F.p) for _ in range(1 << log_n)]
    a = mont_rows(F, values)
    assert np.array_equal(backend.intt(curve, backend.ntt(curve, a)), a)
    # One evaluation of the coset transform, checked by Horner at shift·w^i.
    shift, i = 7, (1 << log_n) - 3
    x = shift * pow(curve.fr_root_of_unity(log_n), i, F.p) % F.p
    horner = 0
    for c in reversed(values):
        horner = (horner * x + c) % F.p
    assert from_mont_rows(F, backend.coset_ntt(curve, a, shift)[i : i + 1]) == [horner]


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@pytest.mark.parametrize("log_n", [0, 3, 10, 12])
def test_coset_evaluations_transform_several_vectors_together(curve, log_n):
    """The prover's move of A·w, B·w and C to the coset: each as ``coset_ntt(intt(v))`` (checked against the naive DFT
    above), in one batch whose inputs the list hands over."""
    F = curve.Fr
    rng = random.Random(log_n)
    inputs = [mont_rows(F, [rng.randrange(F.p) for _ in range(1 << log_n)]) for _ in range(3)]
    shift = curve.fr_root_of_unity(log_n + 1)
    expected = [backend.coset_ntt(curve, backend.intt(curve, v), shift) for v in inputs]
    handed = list(inputs)
    got = backend.coset_evaluations(curve, handed, shift)
    assert handed == [] and len(got) == 3
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    # Horner at one point of the coset, for the first vector's interpolated polynomial.
    coeffs = from_mont_rows(F, backend.intt(curve, inputs[0]))
    i = (1 << log_n) - 1
    x = shift * pow(curve.fr_root_of_unity(log_n), i, F.p) % F.p
    horner = 0
    for c in reversed(coeffs):
        horner = (horner * x + c) % F.p
    assert from_mont_rows(F, got[0][i : i + 1]) == [horner]
    with pytest.raises(ValueError, match="one length"):
        backend.coset_evaluations(curve, [inputs[0], np.concatenate([inputs[0], inputs[0]])], shift)


def test_ntt_rejects_bad_sizes():
    with pytest.raises(ValueError, match="power of two"):
        backend.ntt(BN254, np.zeros((12, 8), np.uint32))
    with pytest.raises(ValueError, match="2-adicity"):
        ntt._log2(BLS12_381, 1 << 33)


# MSM --------------------------------------------------------------------------------


def encode(curve, group: str, points) -> np.ndarray:
    limbs = curve.Fq.n8 // 4
    if group == "G1":
        raw, shape = b"".join(g1_to_bytes(curve, P) for P in points), (len(points), 2, limbs)
    else:
        raw, shape = b"".join(g2_to_bytes(curve, P) for P in points), (len(points), 2, 2, limbs)
    return np.frombuffer(raw, dtype="<u4").reshape(shape).copy()


WINDOW_TABLES = False  # the msm_path fixture's "table" plan sets it: run_msm gives the bases a window table


def run_msm(curve, group: str, points, scalars, tables: bool | None = None):
    fn = backend.msm_g1 if group == "G1" else backend.msm_g2
    bases = encode(curve, group, points)
    if WINDOW_TABLES if tables is None else tables:
        bases = msm.TabledBases.of(bases, msm.window_table(curve, bases))
    return fn(curve, bases, ints_to_limbs(scalars, curve.Fr.n8 // 4))


GROUPS = [(c, g) for c in CURVES for g in ("G1", "G2")]
GROUP_IDS = [f"{c.name}-{g}" for c, g in GROUPS]


@pytest.fixture(params=["jacobian", "batch_affine", "table"])
def msm_path(request, monkeypatch):
    """Every MSM plan on small inputs: with no "small" sizes they take the batched affine plan too, and with
    window tables on their bases the table plan where it pays (``test_msm_table_plan``: wherever the general
    scalars are not few)."""
    if request.param != "jacobian":
        monkeypatch.setattr(msm, "SMALL_MSM_POINTS", 0)
        monkeypatch.setattr(msm, "BIT_MSM_POINTS", 0)
    monkeypatch.setattr(sys.modules[__name__], "WINDOW_TABLES", request.param == "table")
    return request.param


@pytest.mark.parametrize(("curve", "group"), GROUPS, ids=GROUP_IDS)
@settings(SETTINGS, suppress_health_check=[*SETTINGS.suppress_health_check, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_msm_small_matches_reference(curve, group, msm_path, data):
    G, r = getattr(curve, group), curve.r
    n = data.draw(st.integers(1, 6))
    ks = data.draw(st.lists(st.sampled_from([0, 1, 2, 3, r - 1, 12345]), min_size=n, max_size=n))  # base multiples (0: infinity)
    edge = st.sampled_from([0, 1, 2, r - 1, r - 2, (r - 1) // 2, 1 << 200])
    scalars = data.draw(st.lists(st.one_of(edge, st.integers(0, r - 1)), min_size=n, max_size=n))
    points = [G.mul(G.generator, k) for k in ks]
    assert run_msm(curve, group, points, scalars) == G.msm(points, scalars)


def chain(G, step, n: int):
    """[1·step, 2·step, ..., n·step] by repeated addition (cheap with the reference arithmetic)."""
    out, P = [], step
    for _ in range(n):
        out.append(P)
        P = G.add(P, step)
    return out


@pytest.mark.parametrize(("curve", "group"), GROUPS, ids=GROUP_IDS)
@pytest.mark.parametrize("n", [1, 2, 17, 300])
def test_msm_matches_closed_form(curve, group, n, msm_path):
    """Bases i·S give Σ s_i·P_i = (Σ s_i·k_i)·S: an exact check at sizes the reference MSM is too slow for."""
    G, r = getattr(curve, group), curve.r
    rng = random.Random(n)
    s = rng.randrange(1, r)
    step = G.mul(G.generator, s)
    ks = list(range(1, n + 1))
    points = chain(G, step, n)
    scalars = [rng.choice([0, 1, r - 1, rng.randrange(r), rng.randrange(1 << 20)]) for _ in range(n)]
    if n > 4:
        points[1], ks[1] = None, 0  # infinity base
        points[2], ks[2] = points[3], ks[3]  # a repeated base
        scalars[4] = 0
    expected = G.mul(step, sum(k * c for k, c in zip(ks, scalars)) % r)
    assert run_msm(curve, group, points, scalars) == expected


@pytest.mark.parametrize("group", ["G1", "G2"])
def test_msm_all_equal_bases_and_opposite_scalars(group, msm_path):
    """Bucket sums meet P + P (doubling) and P + (−P) (infinity) here."""
    curve = BN254
    G, r = getattr(curve, group), curve.r
    P = G.mul(G.generator, 99)
    assert run_msm(curve, group, [P] * 40, [5] * 40) == G.mul(P, 200)
    assert run_msm(curve, group, [P] * 40, [1, r - 1] * 20) is None
    assert run_msm(curve, group, [P] * 8, [3, r - 3] * 4) is None
    assert run_msm(curve, group, [None] * 5, [1, 2, 3, 4, 5]) is None
    assert run_msm(curve, group, [P] * 3, [0, 0, 0]) is None


@pytest.mark.parametrize(("curve", "group"), GROUPS, ids=GROUP_IDS)
def test_msm_5000_with_booleans_and_full_scalars(curve, group):
    G, r = getattr(curve, group), curve.r
    rng = random.Random(3)
    n = 5000
    step = G.mul(G.generator, rng.randrange(1, r))
    points = chain(G, step, n)
    mixed = [rng.choice([0, 1, r - 1, rng.randrange(r)]) for _ in range(n)]
    for scalars in ([rng.randrange(2) for _ in range(n)], [rng.randrange(r) for _ in range(n)], mixed):
        expected = G.mul(step, sum((i + 1) * c for i, c in enumerate(scalars)) % r)
        assert run_msm(curve, group, points, scalars, tables=False) == expected
        assert run_msm(curve, group, points, scalars, tables=True) == expected


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_g1_msm_matches_reference(curve, msm_path, data):
    """A verifier's public-input combination: a few points, cancellations, small and full scalars."""
    n = data.draw(st.integers(0, 12))
    ks = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    points = [None if k == 0 else curve.G1.mul(curve.G1.generator, k) for k in ks]
    if n >= 2:
        points[-1] = curve.G1.neg(points[0]) if points[0] is not None else None  # cancellations
    scalar_range = data.draw(st.sampled_from([(0, 1), (0, 15), (0, curve.r - 1)]))
    scalars = data.draw(st.lists(st.integers(*scalar_range), min_size=n, max_size=n))
    assert run_msm(curve, "G1", points, scalars) == curve.G1.msm(points, scalars)


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_g1_msm_many_points_with_bit_scalars(curve, msm_path):
    """The sha256 corpus circuit's shape: hundreds of 0/1 public signals."""
    G = curve.G1.generator
    points, P = [], G
    for _ in range(300):
        points.append(P)
        P = curve.G1.add(P, G)
    rng = random.Random(11)
    bits = [rng.randrange(2) for _ in points]
    expected = curve.G1.mul(G, sum((i + 1) * b for i, b in enumerate(bits)))
    assert run_msm(curve, "G1", points, bits) == expected
    assert run_msm(curve, "G1", points, [0] * 300) is None


def test_msm_window_plan():
    assert msm.choose_window(1, 254) >= 2
    assert 9 <= msm.choose_window(1 << 15, 254) <= 13
    for c in (2, 3, 11, 16):
        w = msm._windows_needed(254, c)
        assert (1 << 254) - 1 + msm._digit_offset(c, w) < 1 << (w * c)


def test_msm_table_plan():
    """A table's c is larger than the plain plan's (one bucket fold for all windows), it covers any scalar below r,
    and it is used for a key's general scalars but not for a few among many ±1 ones."""
    for n in (300, 4096, 1 << 16):
        c = msm.table_window_bits(n, 254)
        assert c > msm.choose_window(n, 254)
        assert msm._use_table(msm.WindowTable(c, msm._windows_needed(254, c), None), n, 254, msm.choose_window(n, 254), 2)
    table = msm.WindowTable(12, msm._windows_needed(254, 12), None)
    assert not msm._use_table(table, 20, 254, msm.choose_window(20, 254), 2)
    narrow = msm.WindowTable(8, msm._windows_needed(254, 8), None)
    assert msm._windows_needed(256, 8) > narrow.n_windows
    assert not msm._use_table(narrow, 4096, 256, msm.choose_window(4096, 256), 2)  # wider than any scalar below r
    assert msm.table_bytes(BN254, "g1", 4096) == (msm._windows_needed(254, msm.table_window_bits(4096, 254)) - 1) * 4096 * 64
    assert msm.table_bytes(BN254, "g2", 4096) == 2 * msm.table_bytes(BN254, "g1", 4096)


def test_window_table_rows_and_views():
    """Row (w − 1)·n + i is 2^(wc)·Pᵢ (infinity stays all-zero); a slice of tabled bases has no table; a table
    that does not fit its bases is refused."""
    curve, G = BN254, BN254.G1
    points = [G.generator, None, G.mul(G.generator, 7)]
    bases = encode(curve, "G1", points)
    table = msm.window_table(curve, bases, c=5)
    rows = table.rows.view(np.uint32).reshape(-1, 2, curve.Fq.n8 // 4)
    for w in range(1, table.n_windows):
        assert np.array_equal(rows[(w - 1) * 3 : w * 3], encode(curve, "G1", [None if P is None else G.mul(P, 1 << (5 * w)) for P in points]))
    tabled = msm.TabledBases.of(bases, table)
    assert tabled.window_table is table and tabled[1:].window_table is None
    with pytest.raises(msm.MsmInputError, match="does not fit"):
        backend.msm_g1(curve, msm.TabledBases.of(bases[1:], table), np.zeros((2, 8), np.uint32))


def test_msm_rejects_bad_input():
    good = encode(BN254, "G1", [BN254.G1.generator])
    with pytest.raises(ValueError, match="one scalar per base"):
        backend.msm_g1(BN254, good, np.zeros((2, 8), np.uint32))
    with pytest.raises(ValueError, match="bases must be uint32"):
        backend.msm_g1(BN254, good.astype(np.uint64), np.zeros((1, 8), np.uint32))
    with pytest.raises(ValueError, match="G2 bases"):
        backend.msm_g2(BN254, good, np.zeros((1, 8), np.uint32))
    with pytest.raises(ValueError, match="scalars"):
        backend.msm_g1(BN254, good, np.zeros((1, 4), np.uint32))
    assert backend.msm_g1(BN254, good[:0], np.zeros((0, 8), np.uint32)) is None


# backend selection ------------------------------------------------------------------


def test_cpu_backend_implements_protocol_and_selection():
    assert isinstance(backend, Backend)
    assert backend.name == "cpu"
    assert get_backend("cpu").name == "cpu"
    assert get_backend("auto").name in ("cpu", "cuda")
    with pytest.raises(BackendUnavailableError):
        get_backend("tpu")


# synthesis --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["toy_multiplier", "poseidon_chain_16", "chain4000_bls12381"])
def test_synthesis_matches_naive_evaluation(name):
    from cuzk.backends.cpu.synth import evaluate_ab
    from cuzk.formats.wtns import read_wtns
    from cuzk.formats.zkey import read_zkey

    d = corpus_dir(name)
    zkey, wit = read_zkey(d / "circuit.zkey"), read_wtns(d / "witness.wtns")
    curve, F = zkey.curve, zkey.curve.Fr
    w = limbs_to_ints(wit.values)
    r2_inv = pow(F.R * F.R, -1, F.p)
    want = [[0] * zkey.domain_size, [0] * zkey.domain_size]
    values = limbs_to_ints(zkey.coeffs["value"])
    for m, row, sig, v in zip(zkey.coeffs["matrix"].tolist(), zkey.coeffs["constraint"].tolist(), zkey.coeffs["signal"].tolist(), values):
        want[m][row] = (want[m][row] + v * r2_inv % F.p * w[sig]) % F.p
    a, b = evaluate_ab(curve, zkey.coeffs, wit.values, zkey.domain_size)
    assert a.shape == b.shape == (zkey.domain_size, F.n8 // 4)
    assert from_mont_rows(F, a) == want[0]
    assert from_mont_rows(F, b) == want[1]


def test_synthesis_sums_unsorted_entries_with_uneven_rows():
    """Entries in random order, one row holding most of them (task boundaries must move to row starts),
    rows beyond the tasks: the same sums as the naive loop, on the first call and on the cached order."""
    from cuzk.backends.cpu.synth import evaluate_ab
    from cuzk.formats.zkey import coeff_dtype

    F, rng, domain, n_vars = BN254.Fr, np.random.default_rng(7), 16, 9
    n = 400
    coeffs = np.zeros(n, dtype=coeff_dtype(F.n8))
    coeffs["matrix"] = rng.integers(0, 2, n)
    coeffs["constraint"] = np.where(rng.random(n) < 0.7, 3, rng.integers(0, domain, n))
    coeffs["signal"] = rng.integers(0, n_vars, n)
    values = [int(v) for v in rng.integers(0, 2**62, n)]
    values[:5] = [F.p - 1] * 5
    coeffs["value"] = ints_to_limbs(values, F.n8 // 4)
    w = [F.p - 1, 0, 1] + [int(v) for v in rng.integers(0, 2**62, n_vars - 3)]
    r2_inv = pow(F.R * F.R, -1, F.p)
    want = [[0] * domain, [0] * domain]
    for m, row, sig, v in zip(coeffs["matrix"].tolist(), coeffs["constraint"].tolist(), coeffs["signal"].tolist(), values):
        want[m][row] = (want[m][row] + v * r2_inv % F.p * w[sig]) % F.p
    for _ in range(2):
        a, b = evaluate_ab(BN254, coeffs, ints_to_limbs(w, F.n8 // 4), domain)
        assert from_mont_rows(F, a) == want[0]
        assert from_mont_rows(F, b) == want[1]


def test_synthesis_rejects_out_of_range_entries():
    from cuzk.backends.cpu.synth import SynthesisInputError, evaluate_ab
    from cuzk.formats.zkey import coeff_dtype

    coeffs = np.zeros(3, dtype=coeff_dtype(32))
    coeffs["signal"] = [0, 1, 5]
    witness = ints_to_limbs([1, 2, 3], 8)
    with pytest.raises(SynthesisInputError, match="coefficient #2: signal = 5"):
        evaluate_ab(BN254, coeffs, witness, 4)
    coeffs["signal"] = 0
    coeffs["constraint"] = [0, 4, 1]
    with pytest.raises(SynthesisInputError, match="constraint = 4"):
        evaluate_ab(BN254, coeffs, witness, 4)
    with pytest.raises(ValueError, match="witness"):
        evaluate_ab(BN254, coeffs, witness[:, :4], 4)


def test_concurrent_msms_from_several_threads():
    """The engine proves on several threads at once; the MSM task pool is shared."""
    from concurrent.futures import ThreadPoolExecutor

    curve, G, r = BN254, BN254.G1, BN254.r
    rng = random.Random(9)
    step = G.mul(G.generator, 1234567)
    bases = encode(curve, "G1", chain(G, step, 400))
    jobs = [[rng.randrange(r) for _ in range(400)] for _ in range(6)]
    want = [G.mul(step, sum((i + 1) * c for i, c in enumerate(s)) % r) for s in jobs]
    with ThreadPoolExecutor(max_workers=3) as ex:
        got = list(ex.map(lambda s: backend.msm_g1(curve, bases, ints_to_limbs(s, 8)), jobs))
    assert got == want


@pytest.mark.parametrize("preset", [None, "ACTIVE"])
def test_openmp_workers_sleep_between_parallel_regions_unless_the_environment_says_otherwise(preset):
    """What libgomp reads when numba's omp layer loads at the first parallel launch: PASSIVE by default (spinning
    workers took the cores of a busy machine from the Python threads between regions), the user's own choice else."""
    import os
    import subprocess
    import sys

    code = ("import os\nimport numpy as np\nfrom cuzk.backends.cpu import ntt\nfrom cuzk.curves import BN254\n"
            "ntt.ntt(BN254, np.zeros((8, 8), np.uint32))\nprint(os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | ({"OMP_WAIT_POLICY": preset} if preset else {})
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [preset or "PASSIVE"]
