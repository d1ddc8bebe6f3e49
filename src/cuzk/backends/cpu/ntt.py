"""Radix-2 NTT over Fr with snarkjs's roots of unity, natural order in and out.

The zkey's H points are the Lagrange basis of snarkjs's exact domain (root
``curve.fr_root_of_unity(k)``, natural index order), so the transform must use that root;
any other primitive root would give a well-formed but wrong proof.
Iterative Cooley-Tukey after a bit-reversal permutation, in two parallel regions (see
``_ntt_in_place``): few synchronisations matter on a busy machine, where every barrier
waits for a descheduled thread. Twiddle tables are cached per (field, log n).
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
def _ntt_in_place(a, tw, log_n, fc):
    """All stages over a bit-reversed input ``a`` (n, N) uint64; tw[i] = w^i for i < n/2.

    Two parallel regions, no barrier per stage. With C chunks of n/C rows: stages whose
    butterflies span less than a chunk stay inside one chunk, so task c runs all of them
    on chunk c; the remaining log2(C) stages pair rows that differ only in their top
    log2(C) index bits, so the rows with equal index mod n/C form independent columns,
    and task c runs all those stages on its own range of columns.
    """
    n = a.shape[0]
    log_chunks = 0 if log_n < 10 else min(6, log_n // 2)
    n_chunks = 1 << log_chunks
    chunk = n >> log_chunks
    p, pinv, one, r2, pm2 = fc
    for c in prange(n_chunks):
        f = FieldConsts(p, pinv, one, r2, pm2)
        m = 1
        while m < chunk:
            for base in range(c * chunk, (c + 1) * chunk, 2 * m):
                _butterflies(a, tw, m, n // (2 * m), base, 0, m, f)
            m *= 2
    columns = chunk // n_chunks  # chunk >= n_chunks by the choice of log_chunks
    for c in prange(n_chunks if log_chunks else 0):
        f = FieldConsts(p, pinv, one, r2, pm2)
        j0 = c * columns
        m = chunk
        while m < n:
            for base in range(0, n, 2 * m):
                for k in range(0, m, chunk):
                    _butterflies(a, tw, m, n // (2 * m), base, k + j0, k + j0 + columns, f)
            m *= 2


@parallel_kernel
def _scale(a, factor, fc):
    p, pinv, one, r2, pm2 = fc
    for i in prange(a.shape[0]):
        fp_mul_tuple(a[i], factor, a[i], FieldConsts(p, pinv, one, r2, pm2))


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


def _transform(curve: Curve, a: np.ndarray, inverse: bool) -> np.ndarray:
    rows = fr_rows(curve, a, "NTT input")
    log_n = _log2(curve, a.shape[0])
    out = rows[_bit_reverse(log_n)]  # fancy index: a fresh, writable copy
    fc = field_consts(curve.Fr)
    _ntt_in_place(out, _twiddles(curve, log_n, inverse), log_n, fc)
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


def coset_ntt(curve: Curve, a: np.ndarray, shift: int) -> np.ndarray:
    """Evaluations on shift·<w>: a_i scaled by shift^i, then the NTT."""
    F = curve.Fr
    rows = fr_rows(curve, a, "NTT input")
    _log2(curve, a.shape[0])
    scaled = np.empty(a.shape, dtype=np.uint32)
    fp_mul_powers_vec(rows, to_mont_int(F, shift), as_u64(scaled), field_consts(F))
    return ntt(curve, scaled)
