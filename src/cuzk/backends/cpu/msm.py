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

An MSM of at most ``SMALL_MSM_POINTS`` points, or of at most ``BIT_MSM_POINTS`` 0/1
scalars, skips this plan: Straus's method or a Pippenger with Jacobian buckets
(``_jacobian_msm``), in the calling thread.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numba import njit

from ...curves import Curve
from ...curves.ec import Point
from .ec import jac_add, jac_add_affine, jac_double, jac_set_inf, jac_to_affine
from .field import (
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
def _sum_into_buckets(bases, idx, digits, n_buckets, fc):
    """Sum the points into buckets by |digit| (negated where the digit is negative).

    Returns (points, is_inf, starts, lens): bucket b's sum is points[starts[b]] when
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
    for q in range(m):
        d = digits[q]
        if d == 0:
            continue
        b = abs(d) - 1
        pos = fill[b]
        fill[b] += 1
        fe_copy(bases[idx[q], 0], points[pos, 0])
        if d > 0:
            fe_copy(bases[idx[q], 1], points[pos, 1])
        else:
            fe_neg(bases[idx[q], 1], points[pos, 1], fc)

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
def _run_task(bases, kp, general_idx, ones_idx, ones_digits, task, c, result, fc):
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
    points, is_inf, starts, lens = _sum_into_buckets(bases, idx, digits, n_buckets, fc)
    _fold_buckets(points, is_inf, starts, lens, result, fc)


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


def _windows_needed(max_bits: int, c: int) -> int:
    """Fewest windows W with (2^max_bits − 1) + H < 2^(Wc), H the signed-digit offset."""
    w = max(1, -(-max_bits // c))
    while (1 << max_bits) - 1 + _digit_offset(c, w) >= 1 << (w * c):
        w += 1
    return w


def _digit_offset(c: int, n_windows: int) -> int:
    return sum(1 << (w * c + c - 1) for w in range(n_windows))


def choose_window(n_terms: int, max_bits: int) -> int:
    """Window bits c minimising W(c)·(n·affine-add + 2^(c−1)·bucket-fold), in field products."""
    best_c, best_cost = 2, math.inf
    for c in range(2, 21):  # c = 1 would leave signed digits {−1, 0}: no positive scalar fits
        cost = _windows_needed(max_bits, c) * (n_terms * AFFINE_ADD_COST + (1 << (c - 1)) * BUCKET_FOLD_COST)
        if cost < best_cost:
            best_c, best_cost = c, cost
    return best_c


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


def _plan_tasks(n_general: int, n_windows: int, c: int, n_ones: int, threads: int) -> np.ndarray:
    """Rows (kind, window, lo, hi), costliest first (the pool hands them out in that order)."""
    rows: list[tuple[int, int, int, int, int]] = []
    if n_general:
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


def msm_rows(curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> np.ndarray | None:
    """Σ scalars[i]·bases[i] on C-contiguous uint64 limb rows; the affine Montgomery result, or None for infinity.

    bases: (n, 2, Lq/2) or (n, 2, 2, Lq/2) affine Montgomery, all-zero for infinity;
    scalars: (n, Lr/2) standard form.
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
    c = choose_window(len(general_idx), max_bits) if len(general_idx) else 2
    n_windows = _windows_needed(max_bits, c) if len(general_idx) else 0
    offset_limbs = scalars.shape[1] + 1
    offset = _digit_offset(c, n_windows)
    kp = np.empty((len(general_idx), offset_limbs), np.uint64)
    if len(general_idx):
        _offset_scalars(scalars, general_idx, tuple(np.uint64((offset >> (64 * j)) & (2**64 - 1)) for j in range(offset_limbs)), kp)

    tasks = _plan_tasks(len(general_idx), n_windows, c, len(ones_idx), numba.config.NUMBA_NUM_THREADS)
    results = np.empty((len(tasks), 3) + bases.shape[2:], np.uint64)
    list(_pool().map(lambda t: _run_task(bases, kp, general_idx, ones_idx, ones_digits, tasks[t], c, results[t], fc), range(len(tasks))))
    return out if _combine(results, tasks, n_windows, c, out, fc) else None


def msm_g1(curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point:
    """Σ kᵢ·Pᵢ over G1: bases (n, 2, limbs_q) affine Montgomery, scalars (n, 8) standard form."""
    b, s = _checked(curve, bases, scalars, (2,), "G1")
    out = msm_rows(curve, b, s)
    if out is None:
        return None
    return (from_mont_row(curve.Fq, out[0]), from_mont_row(curve.Fq, out[1]))


def msm_g2(curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point:
    """Σ kᵢ·Qᵢ over G2: bases (n, 2, 2, limbs_q) (x.c0, x.c1, y.c0, y.c1), scalars (n, 8) standard form."""
    b, s = _checked(curve, bases, scalars, (2, 2), "G2")
    out = msm_rows(curve, b, s)
    if out is None:
        return None
    F = curve.Fq
    return ((from_mont_row(F, out[0, 0]), from_mont_row(F, out[0, 1])), (from_mont_row(F, out[1, 0]), from_mont_row(F, out[1, 1])))
