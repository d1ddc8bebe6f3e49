"""The CPU kernels of a Groth16 setup: many scalars times one base, sparse point sums, QAP columns.

A setup without a ceremony file multiplies the two generators by millions of known
scalars (the A, B, C, H and IC points are all g·(something)). One base means one
precomputed table: with signed w-bit digits, table[j][d−1] = d·2^(w·j)·g for
d = 1..2^(w−1), so each scalar costs ⌈(bits+1)/w⌉ − 1 additions and no doubling at all.
The additions are affine: a chunk of scalars goes window by window, and all its
additions of one window share one inversion (≈ 6 products each, against 11 for a mixed
Jacobian addition, and no normalisation at the end). ``FixedBaseTable`` picks w from the
number of scalars it will serve. Those scalars, each wire's QAP polynomials at τ, are
sparse column sums over Fr (``column_sums``).

A setup from a .ptau file cannot know τ; each key point is a short linear combination
of the file's Lagrange-basis points, Σ c_t·P_t. ``sparse_combinations`` evaluates each
such sum with Straus's interleaving (one shared doubling chain per output, an addition per
set coefficient bit), taking each coefficient as ±min(c, r − c) so −1 costs as 1 does.

Points are the backends' layout (backends/base.py): affine Montgomery uint32 limbs,
``(n, 2, L)`` for G1, ``(n, 2, 2, L)`` for G2, all-zero for infinity; scalars are
standard-form ``(n, Lr)`` uint32 rows below r. The arithmetic is ff/field.py's ``fe_*``,
which serve Fp (G1) and Fp2 (G2) coordinates alike. Work is split into chunks run in
parallel; the Jacobian kernels end each chunk with one batch inversion to go affine.
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import njit, prange
from numba.core.errors import NumbaIRAssumptionWarning

from ...curves import Curve
from ...curves.ec import Point
from ...formats.limbs import first_not_below
from ...ff.parallel import parallel_kernel
from ..base import point_rows
from .ec import jac_add_affine, jac_double, jac_from_affine
from ...ff.field import (
    FieldConsts,
    as_u64,
    fe_add,
    fe_copy,
    fe_double,
    fe_eq,
    fe_inv,
    fe_is_zero,
    fe_mul,
    fe_neg,
    fe_set_one,
    fe_set_zero,
    fe_sqr,
    fe_sub,
    field_consts,
    fp_add,
    fp_copy,
    fp_mul,
    fp_set_zero,
)

# Compiling the parallel Straus kernel over ff/field.py's inline="always" overloads makes numba's
# own pedantic IR check print dozens of "please report" warnings; the compiled code is
# correct (tests compare it with the reference), so they are silenced for this file only.
warnings.filterwarnings("ignore", category=NumbaIRAssumptionWarning, module=r".*fixed_base")

CHUNK = 512  # points normalised per batch inversion (one inversion ≈ 400 products)
FIXED_BASE_CHUNK = 4096  # rows sharing each window's inversion in the fixed-base kernel
MAX_WINDOW = 16


# ----------------------------------------------------------------------------------
# Shared pieces.


@njit(cache=True)
def _add_signed(P, Q, negate, neg, fc):
    """P += ±Q for Jacobian P and affine Q (not infinity); ``neg`` is an affine scratch point."""
    if negate:
        fe_copy(Q[0], neg[0])
        fe_neg(Q[1], neg[1], fc)
        jac_add_affine(P, neg, P, fc)
    else:
        jac_add_affine(P, Q, P, fc)


@njit(cache=True)
def batch_to_affine(jac, out, lo, hi, prefix, fc):
    """out[lo:hi] = affine of jac[0:hi−lo] with one inversion; infinity (Z = 0) becomes all zero."""
    t = np.zeros((3,) + jac.shape[2:], dtype=np.uint64)
    acc = t[0]
    zinv = t[1]
    fe_set_one(acc, fc)
    for k in range(hi - lo):
        fe_copy(acc, prefix[k])
        if not fe_is_zero(jac[k, 2]):
            fe_mul(acc, jac[k, 2], acc, fc)
    fe_inv(acc, acc, fc)
    for k in range(hi - lo - 1, -1, -1):
        P = jac[k]
        if fe_is_zero(P[2]):
            fe_set_zero(out[lo + k, 0])
            fe_set_zero(out[lo + k, 1])
            continue
        fe_mul(acc, prefix[k], zinv, fc)  # 1/Z_k
        fe_mul(acc, P[2], acc, fc)
        fe_sqr(zinv, t[2], fc)
        fe_mul(P[0], t[2], out[lo + k, 0], fc)
        fe_mul(t[2], zinv, t[2], fc)
        fe_mul(P[1], t[2], out[lo + k, 1], fc)


# ----------------------------------------------------------------------------------
# Fixed base.


@njit(cache=True)
def _window_digit(s, offset, w):
    """The w-bit window of the uint64-limb scalar s starting at bit ``offset``."""
    limb = offset >> 6
    shift = offset & 63
    if limb >= s.shape[0]:
        return np.int64(0)
    raw = s[limb] >> np.uint64(shift)
    if shift + w > 64 and limb + 1 < s.shape[0]:
        raw |= s[limb + 1] << np.uint64(64 - shift)
    return np.int64(raw & ((np.uint64(1) << np.uint64(w)) - np.uint64(1)))


@njit(cache=True)
def _build_window(base, table_window, fc):
    """table_window[d−1] = d·base (affine) for d = 1..len(table_window)."""
    half = table_window.shape[0]
    jac = np.zeros((half, 3) + table_window.shape[2:], dtype=np.uint64)
    prefix = np.zeros((half,) + table_window.shape[2:], dtype=np.uint64)
    jac_from_affine(base, jac[0], fc)
    for d in range(1, half):
        jac_add_affine(jac[d - 1], base, jac[d], fc)
    batch_to_affine(jac, table_window, 0, half, prefix, fc)


# A parallel loop body cannot capture the nested tuple ``fc`` (see ff/field.py), so each
# parallel kernel unpacks it before its prange and rebuilds it inside.


@parallel_kernel
def _build_table(window_bases, table, fc):
    """table[j, d−1] = d·window_bases[j], one window per parallel task."""
    p, pinv, one, r2, pm2 = fc
    for j in prange(table.shape[0]):
        _build_window(window_bases[j], table[j], FieldConsts(p, pinv, one, r2, pm2))


@njit(cache=True)
def _affine_double(x, y, t, fc):
    """(x, y) = 2·(x, y) in place with its own inversion (only for the rare P = Q case); t: 3 coordinates."""
    fe_sqr(x, t[0], fc)
    fe_double(t[0], t[1], fc)
    fe_add(t[0], t[1], t[0], fc)  # 3x²
    fe_double(y, t[1], fc)
    fe_inv(t[1], t[1], fc)
    fe_mul(t[0], t[1], t[0], fc)  # λ
    fe_sqr(t[0], t[1], fc)
    fe_sub(t[1], x, t[1], fc)
    fe_sub(t[1], x, t[1], fc)  # x3
    fe_sub(x, t[1], t[2], fc)
    fe_mul(t[0], t[2], t[2], fc)
    fe_sub(t[2], y, y, fc)
    fe_copy(t[1], x)


@njit(cache=True)
def _fixed_base_range(table, w, scalars, out, lo, hi, fc):
    """out[lo:hi] by affine accumulation: window by window, every row's addition shares one inversion.

    An affine addition with a batch-inverted denominator costs about 6 products against
    11 for a mixed Jacobian one, and the result needs no final normalisation.
    """
    n_windows, half = table.shape[0], table.shape[1]
    full = np.int64(1) << np.int64(w)
    k = hi - lo
    acc = out[lo:hi]  # affine accumulators, written in place
    coord = out.shape[2:]
    den = np.zeros((k,) + coord, dtype=np.uint64)
    prefix = np.zeros((k,) + coord, dtype=np.uint64)
    t = np.zeros((6,) + coord, dtype=np.uint64)
    carry = np.zeros(k, dtype=np.int64)
    digit = np.zeros(k, dtype=np.int64)
    empty = np.ones(k, dtype=np.bool_)
    action = np.zeros(k, dtype=np.int8)  # 0 nothing, 1 add, 2 equal x (double or cancel)
    for j in range(n_windows):
        fe_set_one(t[0], fc)
        for i in range(k):
            d = _window_digit(scalars[lo + i], j * w, w) + carry[i]
            carry[i] = 0
            if d > half:
                d -= full
                carry[i] = 1
            digit[i] = d
            action[i] = 0
            if d == 0:
                continue
            T = table[j, abs(d) - 1]
            if empty[i]:
                fe_copy(T[0], acc[i, 0])
                if d < 0:
                    fe_neg(T[1], acc[i, 1], fc)
                else:
                    fe_copy(T[1], acc[i, 1])
                empty[i] = False
                continue
            fe_sub(T[0], acc[i, 0], den[i], fc)
            if fe_is_zero(den[i]):
                action[i] = 2
                continue
            action[i] = 1
            fe_copy(t[0], prefix[i])
            fe_mul(t[0], den[i], t[0], fc)
        fe_inv(t[0], t[0], fc)  # 1 / Π den
        for i in range(k - 1, -1, -1):
            if action[i] == 0:
                continue
            d = digit[i]
            T = table[j, abs(d) - 1]
            ty = t[1]
            if d < 0:
                fe_neg(T[1], ty, fc)
            else:
                fe_copy(T[1], ty)
            x, y = acc[i, 0], acc[i, 1]
            if action[i] == 2:
                if fe_eq(ty, y):
                    _affine_double(x, y, t[3:6], fc)
                else:
                    empty[i] = True
                continue
            fe_mul(t[0], prefix[i], t[2], fc)  # 1/den_i
            fe_mul(t[0], den[i], t[0], fc)
            fe_sub(ty, y, ty, fc)
            fe_mul(ty, t[2], t[2], fc)  # λ
            fe_sqr(t[2], t[3], fc)
            fe_sub(t[3], x, t[3], fc)
            fe_sub(t[3], T[0], t[3], fc)  # x3 = λ² − x − x_T
            fe_sub(x, t[3], t[4], fc)
            fe_mul(t[2], t[4], t[4], fc)
            fe_sub(t[4], y, y, fc)  # y3 = λ(x − x3) − y
            fe_copy(t[3], x)
    for i in range(k):
        if empty[i]:
            fe_set_zero(acc[i, 0])
            fe_set_zero(acc[i, 1])


@parallel_kernel
def _fixed_base_mul(table, w, scalars, out, fc):
    """out[i] = scalars[i]·g from the signed-window table of g (see FixedBaseTable)."""
    n = scalars.shape[0]
    p, pinv, one, r2, pm2 = fc
    chunk = min(FIXED_BASE_CHUNK, max(64, (n + 1) // 2))  # at least two tasks for two cores
    for c in prange((n + chunk - 1) // chunk):
        _fixed_base_range(table, w, scalars, out, c * chunk, min(n, (c + 1) * chunk), FieldConsts(p, pinv, one, r2, pm2))


def check_scalars(curve: Curve, scalars: np.ndarray) -> np.ndarray:
    """``scalars`` as a C-contiguous (n, Lr) uint32 array of standard-form values below r, or ValueError."""
    L = curve.Fr.limbs32
    if scalars.dtype != np.uint32 or scalars.ndim != 2 or scalars.shape[1] != L:
        raise ValueError(f"scalars must be an (n, {L}) uint32 array, got {scalars.dtype} {scalars.shape}")
    bad = first_not_below(scalars, curve.r)
    if bad is not None:
        raise ValueError(f"scalar #{bad} is not reduced modulo r")
    return np.ascontiguousarray(scalars)


def window_for(bits: int, n_scalars: int) -> int:
    """The window width minimising table building plus additions for ``n_scalars`` scalars."""

    def cost(w: int) -> float:
        n_windows = -(-(bits + 1) // w)
        return n_windows * (1.5 * 2 ** (w - 1) + n_scalars)

    return min(range(2, MAX_WINDOW + 1), key=cost)


class FixedBaseTable:
    """Multiples of one base point, ready to multiply it by many scalars.

    ``group`` is 1 (G1) or 2 (G2); ``n_scalars`` is how many scalars the table will serve
    in all (it sets the window width: a 2^20-point setup uses w = 16, a test w ≈ 6).
    The CUDA fixed base (backends/cuda/fixed_base.py) runs on this same table.
    """

    chunk_points = 1 << 16  # scalars a caller should hand to one mul() (a setup streams its sections in such pieces)

    def __init__(self, curve: Curve, group: int, base: Point, n_scalars: int):
        if group not in (1, 2):
            raise ValueError(f"group must be 1 or 2, got {group}")
        if base is None:
            raise ValueError("a fixed base must not be the point at infinity")
        self.curve, self.group = curve, group
        G = curve.G1 if group == 1 else curve.G2
        bits = curve.r.bit_length()
        self.window = window_for(bits, max(1, n_scalars))
        n_windows = -(-(bits + 1) // self.window)
        bases, P = [], base
        for _ in range(n_windows):
            bases.append(P)
            P = G.mul(P, 1 << self.window)
        self._fc = field_consts(curve.Fq)
        window_bases = as_u64(point_rows(curve, f"g{group}", bases))
        half = 1 << (self.window - 1)
        self._table = np.zeros((n_windows, half) + window_bases.shape[1:], dtype=np.uint64)
        _build_table(window_bases, self._table, self._fc)

    @property
    def nbytes(self) -> int:
        return self._table.nbytes

    @property
    def points(self) -> np.ndarray:
        """The table as affine rows in the backends' layout: (windows, 2^(w−1), 2, L) or (…, 2, 2, L) uint32."""
        return self._table.view(np.uint32)

    def mul(self, scalars: np.ndarray) -> np.ndarray:
        """scalars[i]·base for every row, as affine points in the backends' layout."""
        scalars = check_scalars(self.curve, scalars)
        L = self.curve.Fq.limbs32
        shape = (scalars.shape[0], 2, L) if self.group == 1 else (scalars.shape[0], 2, 2, L)
        out = np.zeros(shape, dtype=np.uint32)
        if scalars.shape[0]:
            _fixed_base_mul(self._table, self.window, as_u64(scalars), as_u64(out), self._fc)
        return out


# ----------------------------------------------------------------------------------
# Sparse combinations of given points (the .ptau path).


@njit(cache=True)
def _bit(s, k):
    return (s[k >> 6] >> np.uint64(k & 63)) & np.uint64(1)


@njit(cache=True)
def _bit_length(s):
    for limb in range(s.shape[0] - 1, -1, -1):
        if s[limb] != 0:
            v = s[limb]
            n = 0
            while v != 0:
                v >>= np.uint64(1)
                n += 1
            return 64 * limb + n
    return 0


@njit(cache=True)
def _sparse_range(points, indptr, index, magnitude, negative, out, lo, hi, fc):
    jac = np.zeros((hi - lo, 3) + out.shape[2:], dtype=np.uint64)
    prefix = np.zeros((hi - lo,) + out.shape[2:], dtype=np.uint64)
    neg = np.zeros(out.shape[1:], dtype=np.uint64)
    for k in range(lo, hi):
        P = jac[k - lo]
        top = 0
        for e in range(indptr[k], indptr[k + 1]):
            top = max(top, _bit_length(magnitude[e]))
        for bit in range(top - 1, -1, -1):
            jac_double(P, P, fc)
            for e in range(indptr[k], indptr[k + 1]):
                if _bit(magnitude[e], bit):
                    B = points[index[e]]
                    if not (fe_is_zero(B[0]) and fe_is_zero(B[1])):
                        _add_signed(P, B, negative[e], neg, fc)
    batch_to_affine(jac, out, lo, hi, prefix, fc)


@parallel_kernel
def _sparse_combinations(points, indptr, index, magnitude, negative, out, fc):
    """out[k] = Σ_t ±magnitude[t]·points[index[t]] over t in indptr[k]..indptr[k+1] (Straus)."""
    n = out.shape[0]
    p, pinv, one, r2, pm2 = fc
    for c in prange((n + CHUNK - 1) // CHUNK):
        _sparse_range(points, indptr, index, magnitude, negative, out, c * CHUNK, min(n, (c + 1) * CHUNK), FieldConsts(p, pinv, one, r2, pm2))


def sparse_combinations(curve: Curve, points: np.ndarray, indptr: np.ndarray, index: np.ndarray, coeffs: np.ndarray) -> np.ndarray:
    """out[k] = Σ coeffs[t]·points[index[t]] for t in indptr[k]..indptr[k+1].

    ``points`` are affine rows (G1 or G2, told apart by shape), ``coeffs`` standard-form
    scalars. Each coefficient is used as ±min(c, r − c), so small negative numbers are as
    cheap as small positive ones.
    """
    coeffs = check_scalars(curve, coeffs)
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    index = np.ascontiguousarray(index, dtype=np.int64)
    if indptr.ndim != 1 or indptr.size < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != index.size:
        raise ValueError("indptr must rise from 0 to len(index)")
    if index.size != coeffs.shape[0]:
        raise ValueError(f"{index.size} indices but {coeffs.shape[0]} coefficients")
    if index.size and (index.min() < 0 or index.max() >= points.shape[0]):
        raise ValueError(f"an index is outside the {points.shape[0]} points")
    negative = _is_upper_half(curve, coeffs)
    magnitude = coeffs.copy()
    if negative.any():
        magnitude[negative] = _negate(curve, coeffs[negative])
    out = np.zeros((indptr.size - 1,) + points.shape[1:], dtype=np.uint32)
    if out.shape[0]:
        pts = np.ascontiguousarray(points, dtype=np.uint32)
        _sparse_combinations(as_u64(pts), indptr, index, as_u64(magnitude), negative, as_u64(out), field_consts(curve.Fq))
    return out


def _is_upper_half(curve: Curve, scalars: np.ndarray) -> np.ndarray:
    """Rows above (r − 1)/2, i.e. the ones whose negation r − c is the shorter number."""
    half = (curve.r - 1) // 2
    limbs = [(half >> (32 * i)) & 0xFFFFFFFF for i in range(scalars.shape[1])]
    above = np.zeros(scalars.shape[0], dtype=bool)
    equal = np.ones(scalars.shape[0], dtype=bool)
    for i in range(scalars.shape[1] - 1, -1, -1):
        col = scalars[:, i]
        above |= equal & (col > limbs[i])
        equal &= col == limbs[i]
    return above


def _negate(curve: Curve, scalars: np.ndarray) -> np.ndarray:
    """r − c for nonzero standard-form rows, by vectorised borrow propagation."""
    r_limbs = np.array([(curve.r >> (32 * i)) & 0xFFFFFFFF for i in range(scalars.shape[1])], dtype=np.int64)
    out = np.empty_like(scalars)
    borrow = np.zeros(scalars.shape[0], dtype=np.int64)
    for i in range(scalars.shape[1]):
        d = r_limbs[i] - scalars[:, i].astype(np.int64) - borrow
        borrow = (d < 0).astype(np.int64)
        out[:, i] = (d + (borrow << 32)).astype(np.uint32)
    return out


# ----------------------------------------------------------------------------------
# Checking given points (a ceremony file's) before building a key on them.


@njit(cache=True)
def _first_off_curve_range(points, b, lo, hi, fc):
    """Least i in [lo, hi) whose point is not on y² = x³ + b (all-zero infinity passes), or −1."""
    t = np.zeros((2,) + points.shape[2:], dtype=np.uint64)
    for i in range(lo, hi):
        x, y = points[i, 0], points[i, 1]
        if fe_is_zero(x) and fe_is_zero(y):
            continue
        fe_sqr(x, t[0], fc)
        fe_mul(t[0], x, t[0], fc)
        fe_add(t[0], b, t[0], fc)
        fe_sqr(y, t[1], fc)
        if not fe_eq(t[0], t[1]):
            return i
    return -1


@parallel_kernel
def _first_off_curve(points, b, fc):
    n = points.shape[0]
    p, pinv, one, r2, pm2 = fc
    chunks = (n + CHUNK - 1) // CHUNK
    found = np.full(chunks, -1, dtype=np.int64)
    for c in prange(chunks):
        found[c] = _first_off_curve_range(points, b, c * CHUNK, min(n, (c + 1) * CHUNK), FieldConsts(p, pinv, one, r2, pm2))
    for c in range(chunks):
        if found[c] >= 0:
            return found[c]
    return -1


def first_invalid_point(curve: Curve, points: np.ndarray) -> tuple[int, str] | None:
    """(index, what is wrong) of the first row that is not a point of the curve, or None.

    ``points``: affine Montgomery rows in the backends' layout, G1 or G2 told apart by shape.
    A coordinate must be below q, and the point on the curve; there is no subgroup check
    (this catches corrupted files, not a malicious ceremony).
    """
    group = 1 if points.ndim == 3 else 2
    bad = first_not_below(np.ascontiguousarray(points).reshape(-1, curve.Fq.limbs32), curve.q)
    if bad is not None:
        return bad // (2 * group), "a coordinate is not reduced modulo q"
    G = curve.G1 if group == 1 else curve.G2
    b = point_rows(curve, f"g{group}", [(G.b, G.b)])[0, 0]  # the curve coefficient b, in Montgomery limbs
    if points.shape[0] == 0:
        return None
    i = _first_off_curve(as_u64(np.ascontiguousarray(points, dtype=np.uint32)), as_u64(b), field_consts(curve.Fq))
    return None if i < 0 else (int(i), f"is not on {curve.name} G{group}")


# ----------------------------------------------------------------------------------
# The QAP polynomials of every wire at τ (the no-ceremony path): column sums over Fr.


@njit(cache=True)
def _scatter_by_column(row_ptr, col, values, extra_rows, extra_cols, extra_value, indptr, rows_out, values_out):
    """Each entry to its column's next free slot, in row order, then the extra entries: a stable transpose."""
    cursor = indptr[:-1].copy()
    limbs = values.shape[1]
    for r in range(row_ptr.shape[0] - 1):
        for e in range(row_ptr[r], row_ptr[r + 1]):
            c = col[e]
            pos = cursor[c]
            cursor[c] = pos + 1
            rows_out[pos] = r
            for k in range(limbs):
                values_out[pos, k] = values[e, k]
    for e in range(extra_rows.shape[0]):
        c = extra_cols[e]
        pos = cursor[c]
        cursor[c] = pos + 1
        rows_out[pos] = extra_rows[e]
        for k in range(limbs):
            values_out[pos, k] = extra_value[k]


def csr_to_columns(row_ptr: np.ndarray, col: np.ndarray, values: np.ndarray, n_cols: int, extra_rows: np.ndarray | None = None,
                   extra_cols: np.ndarray | None = None, extra_value: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR matrix's entries grouped by column: (indptr, rows, values), each column's entries in row order.

    ``extra_rows/extra_cols`` are entries appended after the matrix's own, all with the value
    ``extra_value`` (a setup's public A-rows). A counting sort: two passes over the entries,
    where a stable argsort and two gathers took ~15 s at 2^22 constraints.
    """
    if extra_rows is None:
        extra_rows = extra_cols = np.zeros(0, dtype=np.int64)
        extra_value = np.zeros(values.shape[1], dtype=values.dtype)
    indptr = np.zeros(n_cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(col, minlength=n_cols) + np.bincount(extra_cols, minlength=n_cols), out=indptr[1:])
    rows = np.empty(int(indptr[-1]), dtype=np.int64)
    out = np.empty((rows.size, values.shape[1]), dtype=values.dtype)
    _scatter_by_column(np.ascontiguousarray(row_ptr, dtype=np.int64), np.ascontiguousarray(col), np.ascontiguousarray(values),
                       np.ascontiguousarray(extra_rows, dtype=np.int64), np.ascontiguousarray(extra_cols, dtype=np.int64),
                       np.ascontiguousarray(extra_value, dtype=values.dtype), indptr, rows, out)
    return indptr, rows, out


@njit(cache=True)
def _column_sums_range(indptr, rows, coeffs, lagrange, out, lo, hi, fc):
    t = np.zeros((2,) + out.shape[1:], dtype=np.uint64)
    for k in range(lo, hi):
        fp_set_zero(t[0])
        for e in range(indptr[k], indptr[k + 1]):
            fp_mul(coeffs[e], lagrange[rows[e]], t[1], fc)  # standard × Montgomery = standard
            fp_add(t[0], t[1], t[0], fc)
        fp_copy(t[0], out[k])


@parallel_kernel
def _column_sums(indptr, rows, coeffs, lagrange, out, fc):
    n = out.shape[0]
    p, pinv, one, r2, pm2 = fc
    for c in prange((n + CHUNK - 1) // CHUNK):
        _column_sums_range(indptr, rows, coeffs, lagrange, out, c * CHUNK, min(n, (c + 1) * CHUNK), FieldConsts(p, pinv, one, r2, pm2))


def column_sums(curve: Curve, indptr: np.ndarray, rows: np.ndarray, coeffs: np.ndarray, lagrange: np.ndarray) -> np.ndarray:
    """out[k] = Σ coeffs[t]·lagrange[rows[t]] for t in indptr[k]..indptr[k+1], over Fr.

    With a matrix's columns (one per wire) and the Lagrange basis at τ, this is every
    wire's QAP polynomial at τ. ``coeffs`` are standard form and ``lagrange`` Montgomery
    form, so the Montgomery product comes out in standard form, ready to be a scalar.
    """
    L = curve.Fr.limbs32
    out = np.zeros((indptr.shape[0] - 1, L), dtype=np.uint32)
    if out.shape[0] and rows.shape[0]:
        _column_sums(
            np.ascontiguousarray(indptr, dtype=np.int64), np.ascontiguousarray(rows, dtype=np.int64),
            as_u64(np.ascontiguousarray(coeffs)), as_u64(np.ascontiguousarray(lagrange)), as_u64(out), field_consts(curve.Fr),
        )  # fmt: skip
    return out
