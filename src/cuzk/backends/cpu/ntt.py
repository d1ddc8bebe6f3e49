"""Radix-2 NTT over Fr with snarkjs's roots of unity, natural order in and out.

The zkey's H points are the Lagrange basis of snarkjs's exact domain (root
``curve.fr_root_of_unity(k)``, natural index order), so the transform must use that root;
any other primitive root would give a well-formed but wrong proof.
Iterative Cooley-Tukey after a bit-reversal permutation, in two parallel regions (see
``_ntt_in_place``): few synchronisations matter on a busy machine, where every barrier
waits for a descheduled thread. Twiddle tables are cached per (field, log n).

A proof moves three vectors (A·w, B·w, C) from the domain to its coset: ``coset_evaluations``
transforms them together, each region's tasks spanning all three, with the inverse transform's
1/n and the coset's shift^i in one pass. One vector's 2^12 NTT has too little work to keep two
threads busy through a region (one thread did it in 1.1 ms, two in 1.4), and each vector paid
its own regions and copies: together the three took 13-17 % less on the 2-core machine
(2^12: 8.6-9.4 → 7.3-8.1 ms; 2^15: 70-74 → 60-64 ms).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit, prange

from ...curves import Curve
from ...ff.parallel import parallel_kernel
from ...ff.field import (
    FieldConsts,
    _stack_array,
    as_u32,
    as_u64,
    field_consts,
    fp_add,
    fp_mul,
    fp_mul_powers_vec,
    fp_mul_tuple,
    fp_pow_u64,
    fp_sub,
    fr_rows,
    read_only,
    to_mont_int,
)


class NttSizeError(ValueError):
    """An NTT length that is not a power of two or exceeds the field's 2-adicity."""


@njit(cache=True)
def _butterflies(a, tw, m, stride, base, k0, k1, fc):
    """Butterflies k0..k1 of the block at ``base`` in the stage whose half-block size is m."""
    t = _stack_array(fc.p, 1, 0)[0]
    ti = k0 * stride
    for k in range(k0, k1):
        fp_mul(a[base + k + m], tw[ti], t, fc)
        fp_sub(a[base + k], t, a[base + k + m], fc)
        fp_add(a[base + k], t, a[base + k], fc)
        ti += stride


@parallel_kernel
def _ntt_in_place(vectors, tw, log_n, fc):
    """All stages over each bit-reversed vector of ``vectors`` (k, n, N) uint64; tw[i] = w^i for i < n/2.

    Two parallel regions, no barrier per stage, their tasks spanning all k vectors. With C chunks
    of n/C rows: stages whose butterflies span less than a chunk stay inside one chunk, so a task
    runs all of them on one chunk; the remaining log2(C) stages pair rows that differ only in their
    top log2(C) index bits, so the rows with equal index mod n/C form independent columns, and a
    task runs all those stages on its own range of columns.
    """
    k = vectors.shape[0]
    n = vectors.shape[1]
    log_chunks = 0 if log_n < 10 else min(6, log_n // 2)
    n_chunks = 1 << log_chunks
    chunk = n >> log_chunks
    p, pinv, one, r2, pm2 = fc
    for task in prange(k * n_chunks):
        a = vectors[task // n_chunks]
        c = task % n_chunks
        f = FieldConsts(p, pinv, one, r2, pm2)
        m = 1
        while m < chunk:
            for base in range(c * chunk, (c + 1) * chunk, 2 * m):
                _butterflies(a, tw, m, n // (2 * m), base, 0, m, f)
            m *= 2
    columns = chunk // n_chunks  # chunk >= n_chunks by the choice of log_chunks
    for task in prange(k * n_chunks if log_chunks else 0):
        a = vectors[task // n_chunks]
        f = FieldConsts(p, pinv, one, r2, pm2)
        j0 = (task % n_chunks) * columns
        m = chunk
        while m < n:
            for base in range(0, n, 2 * m):
                for i in range(0, m, chunk):
                    _butterflies(a, tw, m, n // (2 * m), base, i + j0, i + j0 + columns, f)
            m *= 2


@parallel_kernel
def _scale(a, factor, fc):
    p, pinv, one, r2, pm2 = fc
    for i in prange(a.shape[0]):
        fp_mul_tuple(a[i], factor, a[i], FieldConsts(p, pinv, one, r2, pm2))


@parallel_kernel
def _scale_by_powers(vectors, start, base, fc):
    """vectors[j, i] ·= start·base^i for every vector j: one running power serves all k (k + 1 products a row)."""
    k = vectors.shape[0]
    n = vectors.shape[1]
    n_chunks = max(1, min(64, n // 256))
    p, pinv, one, r2, pm2 = fc
    for c in prange(n_chunks):
        f = FieldConsts(p, pinv, one, r2, pm2)
        lo, hi = c * n // n_chunks, (c + 1) * n // n_chunks
        power = _stack_array(p, 1, 0)[0]
        fp_pow_u64(base, lo, power, f)
        fp_mul(power, start, power, f)
        for i in range(lo, hi):
            for j in range(k):
                fp_mul(vectors[j, i], power, vectors[j, i], f)
            fp_mul(power, base, power, f)


@parallel_kernel
def _bit_reverse_in_place(vectors, rev):
    """Each vector of ``vectors`` (k, n, N) permuted by the bit reversal ``rev`` (an involution: pairs swap)."""
    k = vectors.shape[0]
    n = vectors.shape[1]
    n_chunks = max(1, min(64, n // 256))
    for task in prange(k * n_chunks):
        a = vectors[task // n_chunks]
        c = task % n_chunks
        for i in range(c * n // n_chunks, (c + 1) * n // n_chunks):
            r = rev[i]
            if i < r:
                for limb in range(a.shape[1]):
                    a[i, limb], a[r, limb] = a[r, limb], a[i, limb]


@lru_cache(maxsize=64)
def _bit_reverse(log_n: int) -> np.ndarray:
    idx = np.arange(1 << log_n, dtype=np.int64)
    rev = np.zeros_like(idx)
    for b in range(log_n):
        rev |= ((idx >> b) & 1) << (log_n - 1 - b)
    return rev


@lru_cache(maxsize=32)
def _twiddles(curve: Curve, log_n: int, inverse: bool) -> np.ndarray:
    F = curve.Fr
    w = curve.fr_root_of_unity(log_n)
    if inverse:
        w = F.inv(w)
    tw = np.empty((max(1, (1 << log_n) // 2), F.n8 // 8), dtype=np.uint64)
    fp_mul_powers_vec(read_only(np.empty((0, F.n8 // 8), dtype=np.uint64)), to_mont_int(F, w), tw, field_consts(F))
    tw.setflags(write=False)
    return tw


def _log2(curve: Curve, n: int) -> int:
    log_n = n.bit_length() - 1
    if n < 1 or n != 1 << log_n:
        raise NttSizeError(f"NTT size must be a power of two, got {n}")
    if log_n > curve.fr_two_adicity:
        raise NttSizeError(f"NTT size 2^{log_n} exceeds {curve.name}'s 2-adicity 2^{curve.fr_two_adicity}")
    return log_n


def _bit_reversed(curve: Curve, vectors: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """The vectors (equal lengths, Fr rows) stacked in one fresh (k, n, N) uint64 array, each in bit-reversed order."""
    rows = [fr_rows(curve, v, "NTT input") for v in vectors]
    n = rows[0].shape[0]
    if any(r.shape[0] != n for r in rows):
        raise NttSizeError(f"vectors transformed together need one length, got {[r.shape[0] for r in rows]}")
    log_n = _log2(curve, n)
    rev = _bit_reverse(log_n)
    stacked = np.empty((len(rows),) + rows[0].shape, np.uint64)
    for j, r in enumerate(rows):
        np.take(r, rev, axis=0, out=stacked[j])
    return stacked, log_n


def _transform(curve: Curve, a: np.ndarray, inverse: bool) -> np.ndarray:
    stacked, log_n = _bit_reversed(curve, [a])
    fc = field_consts(curve.Fr)
    _ntt_in_place(stacked, _twiddles(curve, log_n, inverse), log_n, fc)
    out = stacked[0]
    if inverse:
        n_inv = curve.Fr.to_mont(curve.Fr.inv(a.shape[0]))
        _scale(out, tuple(np.uint64((n_inv >> (64 * i)) & 0xFFFFFFFFFFFFFFFF) for i in range(curve.Fr.n8 // 8)), fc)
    return as_u32(out)


def ntt(curve: Curve, a: np.ndarray) -> np.ndarray:
    """Evaluations on <w> of the polynomial with coefficients ``a`` (Montgomery form)."""
    return _transform(curve, a, inverse=False)


def intt(curve: Curve, a: np.ndarray) -> np.ndarray:
    """Coefficients of the polynomial whose evaluations on <w> are ``a``."""
    return _transform(curve, a, inverse=True)


def coset_evaluations(curve: Curve, vectors: list[np.ndarray], shift: int) -> list[np.ndarray]:
    """For each vector of evaluations on <w> (Montgomery form): the evaluations on shift·<w> of the same polynomial,
    ``coset_ntt(intt(v), shift)``, the vectors transformed together (module docstring). Their results share one
    allocation of k vectors, the size of the inputs, which are copied into it first; then the list is emptied, so
    inputs nobody else holds are freed before the transforms run."""
    F = curve.Fr
    stacked, log_n = _bit_reversed(curve, vectors)
    vectors.clear()
    fc = field_consts(F)
    _ntt_in_place(stacked, _twiddles(curve, log_n, True), log_n, fc)
    _scale_by_powers(stacked, to_mont_int(F, F.inv(1 << log_n)), to_mont_int(F, shift), fc)
    _bit_reverse_in_place(stacked, _bit_reverse(log_n))
    _ntt_in_place(stacked, _twiddles(curve, log_n, False), log_n, fc)
    return [as_u32(v) for v in stacked]


def coset_ntt(curve: Curve, a: np.ndarray, shift: int) -> np.ndarray:
    """Evaluations on shift·<w>: a_i scaled by shift^i, then the NTT."""
    F = curve.Fr
    rows = fr_rows(curve, a, "NTT input")
    _log2(curve, a.shape[0])
    scaled = np.empty(a.shape, dtype=np.uint32)
    fp_mul_powers_vec(rows, to_mont_int(F, shift), as_u64(scaled), field_consts(F))
    return ntt(curve, scaled)
