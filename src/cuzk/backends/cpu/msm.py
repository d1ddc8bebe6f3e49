"""Pippenger multi-scalar multiplication on the CPU, one implementation for G1 and G2.

Plan of one MSM Σ kᵢ·Pᵢ:

1. Classify each term: skipped (k = 0 or Pᵢ at infinity), k = ±1 (k = 1 or r − 1: these
   are summed directly, which makes the boolean-heavy witnesses of hashing circuits
   cheap), or general.
2. General scalars are recoded into signed c-bit digits in [−2^(c−1), 2^(c−1)) by adding
   the constant H = Σ_w 2^(c−1)·2^(wc) once: digit w of k is then simply bits
   [wc, wc + c) of k + H minus 2^(c−1). Signed digits halve the bucket count, and the
   sign costs only a negated y of an affine point. c comes from a cost model over the
   number of general terms and the largest scalar's bit length.
3. Each (window, chunk of points) is an independent task, run on a thread pool: the points are
   counting-sorted by bucket, then every bucket is summed as a tree of *affine*
   additions. All the additions of one tree level (across every bucket of the task) share
   a single field inversion (Montgomery's trick), so one addition costs about 6 field
   products instead of 11 for a mixed Jacobian addition. The buckets are then folded with
   the running-sum trick in Jacobian coordinates.
4. Window sums are combined by Horner's rule (c doublings per window) and the result is
   converted to a reference affine point.

Bases with a window table (``TabledBases``: a resident key's, built once by ``window_table``)
hold 2^(wc)·Pᵢ for every window w, so digit w of kᵢ is a digit of that row: every window goes
into ONE set of buckets (a task covers all windows of a chunk of points), the fold runs once
per task instead of once per window, and no Horner doublings remain. A larger c then pays
(``table_window_bits``: c ≈ 12 at 4k points, ≈ 1.4x fewer products than the plain plan's c ≈ 9).
The plain plan still runs where it is cheaper (few general scalars among many ±1 ones).

An MSM of at most ``SMALL_MSM_POINTS`` points, or of at most ``BIT_MSM_POINTS`` 0/1
scalars, skips this plan: Straus's method or a Pippenger with Jacobian buckets
(``_jacobian_msm``), in the calling thread.
"""

from __future__ import annotations

import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
from numba import njit

from ...curves import Curve
from ...curves.ec import Point
from .ec import jac_add, jac_add_affine, jac_double, jac_from_affine, jac_set_inf, jac_to_affine
from .fixed_base import batch_to_affine
from ...ff.field import (
    as_u64,
    fe_add,
    fe_copy,
    fe_double,
    fe_eq,
    fe_is_zero,
    fe_mul,
    fe_neg,
    fe_set_one,
    fe_sqr,
    fe_inv,
    fe_sub,
    field_consts,
    from_mont_row,
    read_only,
)

SKIP, PLUS_ONE, MINUS_ONE, GENERAL = 0, 1, 2, 3
WINDOW_TASK, ONES_TASK = 0, 1

# Upper bound on the points one task sorts into its buckets: bounds a task's scratch
# (about 3 coordinates per point) independently of the MSM size.
MAX_TASK_POINTS = 1 << 18
# At most this many points (the prover's blinding, a verifier's public inputs), or of 0/1
# scalars (a hashing circuit's public bits): Jacobian sums in the calling thread, measured
# 2-10x faster there than the batched affine additions, whose inversion per tree level
# costs more than it saves on so few additions (0/1 scalars: up to ~2000 points).
SMALL_MSM_POINTS = 64
BIT_MSM_POINTS = 1024
# Relative costs in field products, for the window-size model.
AFFINE_ADD_COST = 7  # batched affine addition incl. the sort and gather
BUCKET_FOLD_COST = 27  # one mixed + one full Jacobian addition per bucket
MAX_TABLE_WINDOW = 16  # a window table's c: 2^15 buckets already outweigh the additions below ~10^5 points
TABLE_BUILD_CHUNK = 4096  # points of one table-building task (its Jacobian scratch: ~12 coordinates each)


class MsmInputError(ValueError):
    """Bases or scalars that do not fit the layout of backends/base.py."""


# ----------------------------------------------------------------------------------
# Numba kernels


@njit(cache=True)
def _scalar_bits(scalars, i, start, width):
    """Bits [start, start + width) of scalar i (rows of 64-bit limbs, standard form)."""
    limb = start >> 6
    shift = start & 63
    v = scalars[i, limb] >> np.uint64(shift)
    if shift + width > 64 and limb + 1 < scalars.shape[1]:
        v |= scalars[i, limb + 1] << np.uint64(64 - shift)
    return np.int64(v & np.uint64((1 << width) - 1))


@njit(cache=True, nogil=True)
def _jacobian_msm(bases, scalars, nbits, window, out_affine, fc):
    """Σ scalars[i]·bases[i] for few points, with Jacobian sums only; False for infinity.

    window == 1 is Straus's method: one doubling per bit and a mixed addition per set bit.
    Otherwise Pippenger: per window, mixed additions into 2^window − 1 Jacobian buckets,
    folded by running sums.
    """
    coord_shape = bases.shape[2:]
    acc = np.empty((3,) + coord_shape, np.uint64)
    jac_set_inf(acc)
    if window == 1:
        for bit in range(nbits - 1, -1, -1):
            jac_double(acc, acc, fc)
            for i in range(bases.shape[0]):
                if _scalar_bits(scalars, i, bit, 1) != 0 and not fe_is_zero(bases[i]):
                    jac_add_affine(acc, bases[i], acc, fc)
        return jac_to_affine(acc, out_affine, fc)
    buckets = np.empty(((1 << window) - 1, 3) + coord_shape, np.uint64)
    running = np.empty((3,) + coord_shape, np.uint64)
    for w in range((nbits + window - 1) // window - 1, -1, -1):
        for _ in range(window):
            jac_double(acc, acc, fc)
        for b in range(buckets.shape[0]):
            jac_set_inf(buckets[b])
        for i in range(bases.shape[0]):
            d = _scalar_bits(scalars, i, w * window, window)
            if d != 0 and not fe_is_zero(bases[i]):
                jac_add_affine(buckets[d - 1], bases[i], buckets[d - 1], fc)
        jac_set_inf(running)
        for b in range(buckets.shape[0] - 1, -1, -1):
            jac_add(running, buckets[b], running, fc)
            jac_add(acc, running, acc, fc)
    return jac_to_affine(acc, out_affine, fc)


@njit(cache=True)
def _classify(bases_flat, scalars, r_minus_1, kinds):
    """Fill ``kinds`` (SKIP / PLUS_ONE / MINUS_ONE / GENERAL); return the OR of all general scalars' limbs."""
    n = scalars.shape[0]
    n_limbs = scalars.shape[1]
    acc = np.zeros(n_limbs, np.uint64)
    for i in range(n):
        any_scalar = np.uint64(0)
        for j in range(n_limbs):
            any_scalar |= scalars[i, j]
        any_base = np.uint64(0)
        for j in range(bases_flat.shape[1]):
            any_base |= bases_flat[i, j]
        if any_scalar == 0 or any_base == 0:
            kinds[i] = SKIP
            continue
        high = np.uint64(0)
        minus_one = True
        for j in range(n_limbs):
            if j > 0:
                high |= scalars[i, j]
            if scalars[i, j] != r_minus_1[j]:
                minus_one = False
        if high == 0 and scalars[i, 0] == 1:
            kinds[i] = PLUS_ONE
        elif minus_one:
            kinds[i] = MINUS_ONE
        else:
            kinds[i] = GENERAL
            for j in range(n_limbs):
                acc[j] |= scalars[i, j]
    return acc


@njit(cache=True)
def _offset_scalars(scalars, idx, offset, out):
    """out[q] = scalars[idx[q]] + offset (multi-limb; out has one more limb than the scalars)."""
    n_limbs = scalars.shape[1]
    for q in range(idx.shape[0]):
        carry = np.uint64(0)
        i = idx[q]
        for j in range(out.shape[1]):
            x = scalars[i, j] if j < n_limbs else np.uint64(0)
            s = x + offset[j]
            c1 = s < x
            s2 = s + carry
            c2 = s2 < s
            out[q, j] = s2
            carry = np.uint64(c1 | c2)


@njit(inline="always")
def _window_digits(kp, window, c, lo, hi):
    """Signed digit ``window`` of the offset scalars kp[lo:hi]: bits [wc, wc + c) minus 2^(c−1)."""
    out = np.empty(hi - lo, np.int32)
    bit = window * c
    limb = bit >> 6
    off = bit & 63
    mask = np.uint64((1 << c) - 1)
    half = np.int32(1 << (c - 1))
    spill = off + c > 64 and limb + 1 < kp.shape[1]
    for q in range(hi - lo):
        v = kp[lo + q, limb] >> np.uint64(off)
        if spill:
            v |= kp[lo + q, limb + 1] << np.uint64(64 - off)
        out[q] = np.int32(v & mask) - half
    return out


@njit(inline="always")
def _sum_into_buckets(bases, table, idx, digits, n_buckets, fc):
    """Sum the points into buckets by |digit| (negated where the digit is negative).

    Point i is bases[i] for i < len(bases), else table[i − len(bases)] (a window table's row; the
    table of an MSM without one is empty). Returns (points, is_inf, starts, lens): bucket b's sum is points[starts[b]] when
    lens[b] == 1 and not is_inf there; lens[b] == 0 means an empty bucket.
    """
    m = idx.shape[0]
    lens = np.zeros(n_buckets, np.int64)
    for q in range(m):
        d = digits[q]
        if d != 0:
            lens[abs(d) - 1] += 1
    starts = np.empty(n_buckets, np.int64)
    total = 0
    for b in range(n_buckets):
        starts[b] = total
        total += lens[b]
    coord_shape = bases.shape[2:]
    points = np.empty((total, 2) + coord_shape, np.uint64)
    is_inf = np.zeros(total, np.uint8)
    fill = starts.copy()
    n_bases = bases.shape[0]
    for q in range(m):
        d = digits[q]
        if d == 0:
            continue
        b = abs(d) - 1
        pos = fill[b]
        fill[b] += 1
        i = idx[q]
        src = bases[i] if i < n_bases else table[i - n_bases]
        fe_copy(src[0], points[pos, 0])
        if d > 0:
            fe_copy(src[1], points[pos, 1])
        else:
            fe_neg(src[1], points[pos, 1], fc)

    max_pairs = total // 2
    left = np.empty(max_pairs, np.int64)
    dest = np.empty(max_pairs, np.int64)
    case = np.empty(max_pairs, np.uint8)
    den = np.empty((max_pairs,) + coord_shape, np.uint64)
    prefix = np.empty((max_pairs,) + coord_shape, np.uint64)
    scratch = np.empty((4,) + coord_shape, np.uint64)
    acc, inv, lam, tmp = scratch[0], scratch[1], scratch[2], scratch[3]
    while True:
        # One tree level: pair up neighbours inside every bucket.
        n_pairs = 0
        for b in range(n_buckets):
            s = starts[b]
            for k in range(lens[b] // 2):
                left[n_pairs] = s + 2 * k
                dest[n_pairs] = s + k
                n_pairs += 1
        if n_pairs == 0:
            break
        # Denominators (x2 − x1, or 2y for a doubling) and their prefix products.
        fe_set_one(acc, fc)
        for e in range(n_pairs):
            i = left[e]
            j = i + 1
            if is_inf[i] or is_inf[j]:
                case[e] = 3 if is_inf[i] else 4  # 3: take right, 4: take left
                fe_set_one(den[e], fc)
            elif not fe_eq(points[i, 0], points[j, 0]):
                case[e] = 0
                fe_sub(points[j, 0], points[i, 0], den[e], fc)
            elif fe_eq(points[i, 1], points[j, 1]) and not fe_is_zero(points[i, 1]):
                case[e] = 1
                fe_double(points[i, 1], den[e], fc)
            else:
                case[e] = 2  # P + (−P) = infinity
                fe_set_one(den[e], fc)
            fe_copy(acc, prefix[e])
            fe_mul(acc, den[e], acc, fc)
        # One inversion, then every denominator's inverse, walking back.
        fe_inv(acc, inv, fc)
        for e in range(n_pairs - 1, -1, -1):
            fe_copy(den[e], tmp)
            fe_mul(inv, prefix[e], den[e], fc)
            fe_mul(inv, tmp, inv, fc)
        # The sums, in increasing order so that dest[e] <= left[e] never clobbers unread input.
        for e in range(n_pairs):
            i = left[e]
            j = i + 1
            d = dest[e]
            ce = case[e]
            if ce == 3 or ce == 4:
                src = j if ce == 3 else i
                fe_copy(points[src, 0], points[d, 0])
                fe_copy(points[src, 1], points[d, 1])
                is_inf[d] = is_inf[src]
                continue
            if ce == 2:
                is_inf[d] = 1
                continue
            if ce == 0:
                fe_sub(points[j, 1], points[i, 1], lam, fc)
            else:
                fe_sqr(points[i, 0], lam, fc)
                fe_double(lam, tmp, fc)
                fe_add(lam, tmp, lam, fc)  # 3x1²
            fe_mul(lam, den[e], lam, fc)
            fe_sqr(lam, tmp, fc)
            fe_sub(tmp, points[i, 0], tmp, fc)
            fe_sub(tmp, points[j, 0], tmp, fc)  # x3 = λ² − x1 − x2
            fe_sub(points[i, 0], tmp, acc, fc)
            fe_mul(lam, acc, acc, fc)
            fe_sub(acc, points[i, 1], points[d, 1], fc)  # y3 = λ(x1 − x3) − y1
            fe_copy(tmp, points[d, 0])
            is_inf[d] = 0
        # Odd leftovers move down next to their bucket's sums.
        for b in range(n_buckets):
            n_b = lens[b]
            if n_b >= 2:
                s = starts[b]
                if n_b & 1:
                    src = s + n_b - 1
                    d = s + n_b // 2
                    fe_copy(points[src, 0], points[d, 0])
                    fe_copy(points[src, 1], points[d, 1])
                    is_inf[d] = is_inf[src]
                lens[b] = (n_b + 1) // 2
    return points, is_inf, starts, lens


@njit(inline="always")
def _fold_buckets(points, is_inf, starts, lens, out, fc):
    """out = Σ_b (b + 1)·bucket_b by running sums (Jacobian)."""
    running = np.empty((3,) + points.shape[2:], np.uint64)
    jac_set_inf(running)
    jac_set_inf(out)
    for b in range(lens.shape[0] - 1, -1, -1):
        if lens[b] == 1 and not is_inf[starts[b]]:
            jac_add_affine(running, points[starts[b]], running, fc)
        if not fe_is_zero(running[2]):
            jac_add(out, running, out, fc)


@njit(cache=True, nogil=True)
def _run_task(bases, no_table, kp, general_idx, ones_idx, ones_digits, task, c, result, fc):
    """One (window, chunk) or (±1 terms, chunk) task; releases the GIL so tasks run on a thread pool."""
    kind, window, lo, hi = task[0], task[1], task[2], task[3]
    if kind == WINDOW_TASK:
        digits = _window_digits(kp, window, c, lo, hi)
        idx = general_idx[lo:hi]
        n_buckets = 1 << (c - 1)
    else:
        digits = ones_digits[lo:hi].copy()
        idx = ones_idx[lo:hi]
        n_buckets = 1
    points, is_inf, starts, lens = _sum_into_buckets(bases, no_table, idx, digits, n_buckets, fc)
    _fold_buckets(points, is_inf, starts, lens, result, fc)


@njit(cache=True, nogil=True)
def _run_table_task(bases, table, kp, general_idx, lo, hi, n_windows, c, result, fc):
    """Every window of the general terms [lo, hi) into ONE set of buckets: window w of term i is row
    w·n + i of bases ++ table (2^(wc)·Pᵢ), so its digit needs no Horner doublings afterwards."""
    m = hi - lo
    n = bases.shape[0]
    idx = np.empty(m * n_windows, np.int64)
    digits = np.empty(m * n_windows, np.int32)
    for w in range(n_windows):
        window_digits = _window_digits(kp, w, c, lo, hi)
        for q in range(m):
            idx[w * m + q] = w * n + general_idx[lo + q]
            digits[w * m + q] = window_digits[q]
    points, is_inf, starts, lens = _sum_into_buckets(bases, table, idx, digits, 1 << (c - 1), fc)
    _fold_buckets(points, is_inf, starts, lens, result, fc)


@njit(cache=True, nogil=True)
def _build_table_rows(bases, table, c, lo, hi, fc):
    """table[(w−1)·n + i] = 2^(wc)·bases[i] for i in [lo, hi) and every window w ≥ 1: c Jacobian doublings of the
    previous window's point, then one batch inversion per window back to affine (infinity stays all-zero)."""
    n = bases.shape[0]
    m = hi - lo
    n_windows = table.shape[0] // n + 1
    coord_shape = bases.shape[2:]
    jac = np.empty((m, 3) + coord_shape, np.uint64)
    prefix = np.empty((m,) + coord_shape, np.uint64)
    for w in range(1, n_windows):
        for k in range(m):
            src = bases[lo + k] if w == 1 else table[(w - 2) * n + lo + k]
            if fe_is_zero(src[0]) and fe_is_zero(src[1]):
                jac_set_inf(jac[k])
                continue
            jac_from_affine(src, jac[k], fc)
            for _ in range(c):
                jac_double(jac[k], jac[k], fc)
        batch_to_affine(jac, table[(w - 1) * n : w * n], lo, hi, prefix, fc)


@njit(cache=True)
def _combine(results, tasks, n_windows, c, out_affine, fc):
    """Σ_w 2^(wc)·window_w + (±1 terms), as affine into ``out_affine``; False for infinity."""
    coord_shape = results.shape[2:]
    windows = np.empty((max(n_windows, 1), 3) + coord_shape, np.uint64)
    for w in range(windows.shape[0]):
        jac_set_inf(windows[w])
    acc = np.empty((3,) + coord_shape, np.uint64)
    ones = np.empty((3,) + coord_shape, np.uint64)
    jac_set_inf(acc)
    jac_set_inf(ones)
    for t in range(tasks.shape[0]):
        if tasks[t, 0] == WINDOW_TASK:
            jac_add(windows[tasks[t, 1]], results[t], windows[tasks[t, 1]], fc)
        else:
            jac_add(ones, results[t], ones, fc)
    for w in range(n_windows - 1, -1, -1):
        for _ in range(c):
            jac_double(acc, acc, fc)
        jac_add(acc, windows[w], acc, fc)
    jac_add(acc, ones, acc, fc)
    return jac_to_affine(acc, out_affine, fc)


# ----------------------------------------------------------------------------------
# Planning and the Python entry points


def _jacobian_window(n_points: int, nbits: int) -> int:
    """The window of ``_jacobian_msm`` with the fewest field products, counting ~7 per doubling,
    ~11 per mixed and ~16 per full addition: Straus (window 1) for few points, buckets for more."""
    if nbits == 0:
        return 1

    def cost(c: int) -> int:
        if c == 1:
            return nbits * (7 + 11 * n_points // 2)
        return -(-nbits // c) * (7 * c + 11 * n_points + 16 * 2 * ((1 << c) - 1))

    return min(range(1, 13), key=cost)


@functools.cache  # a pure function of two small ints, asked ~400 times a proof by the plans and the sizing (~5 ms)
def _windows_needed(max_bits: int, c: int) -> int:
    """Fewest windows W with (2^max_bits − 1) + H < 2^(Wc), H the signed-digit offset."""
    w = max(1, -(-max_bits // c))
    while (1 << max_bits) - 1 + _digit_offset(c, w) >= 1 << (w * c):
        w += 1
    return w


def _digit_offset(c: int, n_windows: int) -> int:
    return sum(1 << (w * c + c - 1) for w in range(n_windows))


def _plain_cost(n_terms: int, max_bits: int, c: int) -> int:
    """Field products of the plain plan with window c: W(c)·(n·affine-add + 2^(c−1)·bucket-fold)."""
    return _windows_needed(max_bits, c) * (n_terms * AFFINE_ADD_COST + (1 << (c - 1)) * BUCKET_FOLD_COST)


def choose_window(n_terms: int, max_bits: int) -> int:
    """Window bits c minimising the plain plan's field products (``_plain_cost``)."""
    best_c, best_cost = 2, math.inf
    for c in range(2, 21):  # c = 1 would leave signed digits {−1, 0}: no positive scalar fits
        cost = _plain_cost(n_terms, max_bits, c)
        if cost < best_cost:
            best_c, best_cost = c, cost
    return best_c


@dataclass(frozen=True, eq=False)
class WindowTable:
    """2^(wc)·Pᵢ for every window w ≥ 1 of some bases (window 0 is the bases themselves), in the MSM's limb rows.

    With it every window of an MSM shares one set of 2^(c−1) buckets: the bucket fold runs once instead of once
    per window and no Horner doublings remain, so a larger c pays. It costs ``n_windows − 1`` times the bases.
    """

    c: int
    n_windows: int
    rows: np.ndarray  # ((n_windows − 1)·n, 2, …) uint64 limbs, affine Montgomery, all-zero for infinity


class TabledBases(np.ndarray):
    """Bases carrying their window table (a resident key's: keys.host), which ``msm_g1``/``msm_g2`` use.

    A slice or other view of them is not given the table (it holds other bases): the attribute is not inherited."""

    window_table: WindowTable | None = None

    @classmethod
    def of(cls, bases: np.ndarray, table: WindowTable) -> TabledBases:
        out = bases.view(cls)
        out.window_table = table
        return out


def _table_cost(n_general: int, n_windows: int, c: int, pieces: int) -> int:
    """Field products of a table MSM: every window's affine additions, and one bucket fold per task."""
    return n_windows * n_general * AFFINE_ADD_COST + pieces * (1 << (c - 1)) * BUCKET_FOLD_COST


def _table_pieces(n_general: int, n_windows: int, threads: int) -> int:
    """Tasks of a table MSM: one per thread, or where a task would sort more than MAX_TASK_POINTS entries, the
    next multiple of the threads: equal tasks then end together (3 tasks on 2 threads took as long as 4 would)."""
    rounds = -(-n_general * n_windows // (MAX_TASK_POINTS * threads))
    return max(1, min(n_general, threads * rounds))


def table_window_bits(n: int, scalar_bits: int, threads: int | None = None) -> int:
    """Window c of a table for n bases: the fewest field products for n general scalars of ``scalar_bits`` bits."""
    threads = threads or numba.config.NUMBA_NUM_THREADS

    def cost(c: int) -> int:
        w = _windows_needed(scalar_bits, c)
        return _table_cost(n, w, c, _table_pieces(n, w, threads))

    return min(range(2, MAX_TABLE_WINDOW + 1), key=cost)


def table_task_entries(n: int, scalar_bits: int) -> int:
    """The most (point, window) entries one task of a table MSM over n bases sorts into its buckets: what its
    scratch grows with (prover/sizing.py bounds it)."""
    threads = numba.config.NUMBA_NUM_THREADS
    w = _windows_needed(scalar_bits, table_window_bits(n, scalar_bits, threads))
    return -(-n // _table_pieces(n, w, threads)) * w


def table_bytes(curve: Curve, group: str, n: int) -> int:
    """Bytes of the window table ``window_table`` builds for n bases of ``group`` ("g1"/"g2") on ``curve``."""
    c = table_window_bits(n, curve.r.bit_length())
    point = 2 * curve.Fq.n8 * (2 if group == "g2" else 1)
    return (_windows_needed(curve.r.bit_length(), c) - 1) * n * point


def _build_pieces(n: int) -> list[tuple[int, int]]:
    return _chunks(n, min(n, max(numba.config.NUMBA_NUM_THREADS, -(-n // TABLE_BUILD_CHUNK))))


def table_build_scratch_bytes(curve: Curve, group: str, n: int) -> int:
    """Most bytes ``window_table`` holds beside the table while it builds one for n bases: each running task's
    Jacobian points and prefix products (4 coordinates a point)."""
    pieces = _build_pieces(n)
    most = max((hi - lo for lo, hi in pieces), default=0)
    return min(len(pieces), numba.config.NUMBA_NUM_THREADS) * most * 4 * curve.Fq.n8 * (2 if group == "g2" else 1)


def window_table(curve: Curve, bases: np.ndarray, c: int | None = None) -> WindowTable:
    """The window table of ``bases`` (backends/base.py's layout, any scalar below r), window c from
    ``table_window_bits`` unless given; built on the MSM thread pool (c doublings per point and window)."""
    rows = read_only(as_u64(np.ascontiguousarray(bases)))
    n = rows.shape[0]
    bits = curve.r.bit_length()
    c = c or table_window_bits(n, bits)
    n_windows = _windows_needed(bits, c)
    table = np.empty(((n_windows - 1) * n,) + rows.shape[1:], np.uint64)
    fc = field_consts(curve.Fq)
    list(_pool().map(lambda span: _build_table_rows(rows, table, c, span[0], span[1], fc), _build_pieces(n)))
    return WindowTable(c, n_windows, read_only(table))


_pools: dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    """Worker threads for MSM tasks, one pool per process (a forked child gets its own).

    A thread pool rather than a numba parallel loop: a prange kernel would re-optimise the
    whole task code once more (seconds of compile time), and a pool hands out the unevenly
    sized tasks dynamically.
    """
    pid = os.getpid()
    pool = _pools.get(pid)
    if pool is None:
        pool = _pools[pid] = ThreadPoolExecutor(max_workers=numba.config.NUMBA_NUM_THREADS, thread_name_prefix="cuzk-msm")
    return pool


def _chunks(m: int, pieces: int) -> list[tuple[int, int]]:
    return [(k * m // pieces, (k + 1) * m // pieces) for k in range(pieces)]


def _plan_tasks(n_general: int, n_windows: int, c: int, n_ones: int, threads: int, table: bool = False) -> np.ndarray:
    """Rows (kind, window, lo, hi), costliest first (the pool hands them out in that order). With a ``table``, a
    general task covers every window of its points (window 0 stands for all of them)."""
    rows: list[tuple[int, int, int, int, int]] = []
    if n_general and table:
        for lo, hi in _chunks(n_general, _table_pieces(n_general, n_windows, threads)):
            rows.append((_table_cost(hi - lo, n_windows, c, 1), WINDOW_TASK, 0, lo, hi))
    elif n_general:
        pieces = -(-n_general // MAX_TASK_POINTS)
        if n_windows * pieces < threads:
            # Few windows: split the points too, where each piece still outweighs its bucket fold.
            pieces = max(pieces, min(-(-threads // n_windows), max(1, n_general // (1 << (c + 1)))))
        for w in range(n_windows):
            for lo, hi in _chunks(n_general, pieces):
                rows.append(((hi - lo) * AFFINE_ADD_COST + (1 << (c - 1)) * BUCKET_FOLD_COST, WINDOW_TASK, w, lo, hi))
    if n_ones:
        pieces = max(-(-n_ones // MAX_TASK_POINTS), min(2 * threads, -(-n_ones // 2048)))
        for lo, hi in _chunks(n_ones, pieces):
            rows.append(((hi - lo) * AFFINE_ADD_COST, ONES_TASK, 0, lo, hi))
    rows.sort(reverse=True)
    return np.array([r[1:] for r in rows], dtype=np.int64).reshape(-1, 4)


def _checked(curve: Curve, bases: np.ndarray, scalars: np.ndarray, coords: tuple[int, ...], group: str) -> tuple[np.ndarray, np.ndarray]:
    limbs_q = curve.Fq.n8 // 4
    limbs_r = curve.Fr.n8 // 4
    bases = np.asarray(bases)
    scalars = np.asarray(scalars)
    want = coords + (limbs_q,)
    if bases.dtype != np.uint32 or bases.ndim != 1 + len(want) or bases.shape[1:] != want:
        raise MsmInputError(f"{curve.name} {group} bases must be uint32 of shape (n, {', '.join(map(str, want))}), got {bases.dtype} {bases.shape}")
    if scalars.dtype != np.uint32 or scalars.ndim != 2 or scalars.shape[1] != limbs_r:
        raise MsmInputError(f"{curve.name} scalars must be uint32 of shape (n, {limbs_r}), got {scalars.dtype} {scalars.shape}")
    if bases.shape[0] != scalars.shape[0]:
        raise MsmInputError(f"{group} MSM needs one scalar per base: {bases.shape[0]} bases, {scalars.shape[0]} scalars")
    return as_u64(np.ascontiguousarray(bases)), as_u64(np.ascontiguousarray(scalars))


def _use_table(table: WindowTable | None, n_general: int, max_bits: int, c: int, threads: int) -> int:
    """The windows a table MSM needs when ``table`` covers the scalars and costs less than the plain plan (c its
    window), else 0. Mostly ±1 or zero scalars leave few general ones: then one fold of 2^(c_t−1) buckets may not pay."""
    if table is None or not n_general:
        return 0
    n_windows = _windows_needed(max_bits, table.c)
    if n_windows > table.n_windows:  # scalars of more bits than any below r: not a key's
        return 0
    plain = _plain_cost(n_general, max_bits, c)
    tabled = _table_cost(n_general, n_windows, table.c, _table_pieces(n_general, n_windows, threads))
    return n_windows if tabled < plain else 0


def msm_rows(curve: Curve, bases: np.ndarray, scalars: np.ndarray, table: WindowTable | None = None) -> np.ndarray | None:
    """Σ scalars[i]·bases[i] on C-contiguous uint64 limb rows; the affine Montgomery result, or None for infinity.

    bases: (n, 2, Lq/2) or (n, 2, 2, Lq/2) affine Montgomery, all-zero for infinity;
    scalars: (n, Lr/2) standard form; ``table``: the bases' window table (``window_table``), used where it pays.
    """
    fc = field_consts(curve.Fq)
    bases, scalars = read_only(bases), read_only(scalars)
    n = bases.shape[0]
    if n == 0:
        return None
    out = np.empty((2,) + bases.shape[2:], np.uint64)
    if n <= BIT_MSM_POINTS:
        nbits = int.from_bytes(np.bitwise_or.reduce(scalars, axis=0).tobytes(), "little").bit_length()
        if n <= SMALL_MSM_POINTS or nbits <= 1:
            return out if _jacobian_msm(bases, scalars, nbits, _jacobian_window(n, nbits), out, fc) else None
    kinds = np.empty(n, np.uint8)
    r_minus_1 = tuple(np.uint64(((curve.r - 1) >> (64 * j)) & (2**64 - 1)) for j in range(scalars.shape[1]))
    general_or = _classify(bases.reshape(n, -1), scalars, r_minus_1, kinds)
    general_idx = np.flatnonzero(kinds == GENERAL)
    ones_idx = np.flatnonzero((kinds == PLUS_ONE) | (kinds == MINUS_ONE))
    ones_digits = np.where(kinds[ones_idx] == PLUS_ONE, 1, -1).astype(np.int32)

    max_bits = int.from_bytes(general_or.tobytes(), "little").bit_length()
    threads = numba.config.NUMBA_NUM_THREADS
    c = choose_window(len(general_idx), max_bits) if len(general_idx) else 2
    n_windows = _windows_needed(max_bits, c) if len(general_idx) else 0
    table_windows = _use_table(table, len(general_idx), max_bits, c, threads)
    if table_windows:
        c, n_windows = table.c, table_windows
    offset_limbs = scalars.shape[1] + 1
    offset = _digit_offset(c, n_windows)
    kp = np.empty((len(general_idx), offset_limbs), np.uint64)
    if len(general_idx):
        _offset_scalars(scalars, general_idx, tuple(np.uint64((offset >> (64 * j)) & (2**64 - 1)) for j in range(offset_limbs)), kp)

    tasks = _plan_tasks(len(general_idx), n_windows, c, len(ones_idx), threads, table=bool(table_windows))
    results = np.empty((len(tasks), 3) + bases.shape[2:], np.uint64)
    no_table = bases[:0]

    def run(t: int) -> None:
        kind, _, lo, hi = tasks[t]
        if table_windows and kind == WINDOW_TASK:
            _run_table_task(bases, table.rows, kp, general_idx, lo, hi, n_windows, c, results[t], fc)
        else:
            _run_task(bases, no_table, kp, general_idx, ones_idx, ones_digits, tasks[t], c, results[t], fc)

    list(_pool().map(run, range(len(tasks))))
    # A table MSM's tasks each hold every window already: one "window", no Horner doublings.
    return out if _combine(results, tasks, 1 if table_windows else n_windows, c, out, fc) else None


def _table_of(bases: np.ndarray) -> WindowTable | None:
    table = getattr(bases, "window_table", None)
    if table is not None and table.rows.shape[0] != (table.n_windows - 1) * bases.shape[0]:
        raise MsmInputError(f"a window table of {table.rows.shape[0]} rows does not fit {bases.shape[0]} bases")
    return table


def msm_g1(curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point:
    """Σ kᵢ·Pᵢ over G1: bases (n, 2, limbs_q) affine Montgomery (``TabledBases`` for a table MSM), scalars (n, 8) standard form."""
    b, s = _checked(curve, bases, scalars, (2,), "G1")
    out = msm_rows(curve, b, s, _table_of(bases))
    if out is None:
        return None
    return (from_mont_row(curve.Fq, out[0]), from_mont_row(curve.Fq, out[1]))


def msm_g2(curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point:
    """Σ kᵢ·Qᵢ over G2: bases (n, 2, 2, limbs_q) (x.c0, x.c1, y.c0, y.c1), scalars (n, 8) standard form."""
    b, s = _checked(curve, bases, scalars, (2, 2), "G2")
    out = msm_rows(curve, b, s, _table_of(bases))
    if out is None:
        return None
    F = curve.Fq
    return ((from_mont_row(F, out[0, 0]), from_mont_row(F, out[0, 1])), (from_mont_row(F, out[1, 0]), from_mont_row(F, out[1, 1])))
