"""A minimal Montgomery multiplier in numba for the formats layer's own checks.

The formats layer sits below the backends, so it cannot import their field kernels; it
needs just enough arithmetic to (1) convert a zkey's coefficients once and (2) evaluate
an R1CS against a witness. Field elements are rows of little-endian uint32 limbs (the
project's layout, see backends/base.py); R = 2^(32·limbs).

``mont_mul(a, b) = a·b·R⁻¹ mod p`` (CIOS, 64-bit accumulators). Inputs must be < p.
The backends have faster 64-bit-limb kernels, but this layer may not import them; this
one is simple and fast enough for one-off validation and conversion passes.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import parallel_kernel

MASK32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)


def montgomery_constants(p: int, n_limbs: int) -> tuple[np.ndarray, np.uint64]:
    """(p as uint32 limbs, -p⁻¹ mod 2^32): what the kernels take for a modulus."""
    p_limbs = np.array([(p >> (32 * i)) & 0xFFFFFFFF for i in range(n_limbs)], dtype=np.uint32)
    return p_limbs, np.uint64((-pow(p, -1, 1 << 32)) % (1 << 32))


@njit(cache=True)
def geq(x, p) -> bool:
    """x >= p, for limb rows of equal length."""
    for j in range(x.shape[0] - 1, -1, -1):
        if x[j] != p[j]:
            return x[j] > p[j]
    return True


@njit(cache=True)
def sub_in_place(x, p) -> None:
    """x -= p (caller guarantees x >= p, or that the borrow is cancelled by a carry limb)."""
    borrow = np.int64(0)
    for j in range(x.shape[0]):
        d = np.int64(x[j]) - np.int64(p[j]) - borrow
        borrow = np.int64(1) if d < 0 else np.int64(0)
        x[j] = np.uint32(d + (borrow << 32))


@njit(cache=True)
def add_mod(acc, b, p) -> None:
    """acc = (acc + b) mod p, in place; both < p."""
    carry = np.uint64(0)
    for j in range(acc.shape[0]):
        s = np.uint64(acc[j]) + np.uint64(b[j]) + carry
        acc[j] = np.uint32(s & MASK32)
        carry = s >> SHIFT32
    if carry != 0 or geq(acc, p):
        sub_in_place(acc, p)


@njit(cache=True)
def mont_mul(a, b, p, p_inv, out, t) -> None:
    """out = a·b·R⁻¹ mod p; ``t`` is uint64 scratch of len(p) + 2. ``out`` may alias ``a`` or ``b``."""
    n = p.shape[0]
    for j in range(n + 2):
        t[j] = 0
    for i in range(n):
        bi = np.uint64(b[i])
        c = np.uint64(0)
        for j in range(n):
            s = t[j] + np.uint64(a[j]) * bi + c
            t[j] = s & MASK32
            c = s >> SHIFT32
        s = t[n] + c
        t[n] = s & MASK32
        t[n + 1] = s >> SHIFT32
        m = (t[0] * p_inv) & MASK32
        s = t[0] + m * np.uint64(p[0])
        c = s >> SHIFT32
        for j in range(1, n):
            s = t[j] + m * np.uint64(p[j]) + c
            t[j - 1] = s & MASK32
            c = s >> SHIFT32
        s = t[n] + c
        t[n - 1] = s & MASK32
        t[n] = t[n + 1] + (s >> SHIFT32)
    for j in range(n):
        out[j] = np.uint32(t[j])
    if t[n] != 0 or geq(out, p):
        sub_in_place(out, p)


@parallel_kernel
def mont_mul_rows_by_constant(values, k, p, p_inv, out) -> None:
    """out[i] = values[i]·k·R⁻¹ mod p for every row (values may be a strided view)."""
    n = values.shape[0]
    n_chunks = min(n, 256)
    for chunk in prange(n_chunks):
        t = np.empty(p.shape[0] + 2, dtype=np.uint64)
        row = np.empty(p.shape[0], dtype=np.uint32)
        for i in range(chunk * n // n_chunks, (chunk + 1) * n // n_chunks):
            for j in range(p.shape[0]):
                row[j] = values[i, j]
            mont_mul(row, k, p, p_inv, row, t)
            for j in range(p.shape[0]):
                out[i, j] = row[j]
