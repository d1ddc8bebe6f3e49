"""Fq2, Fq6 and Fq12 arithmetic for numba kernels, in snarkjs's tower, on the CPU backend's field.

    Fq6 = Fq2[v] / (v^3 - xi),  xi = xi_re + u;   Fq12 = Fq6[w] / (w^2 - v)

Elements are C-contiguous uint64 arrays in Montgomery form whose last axis is one Fq
coefficient as N 64-bit limbs (``backends/cpu/field.py``): Fq2 ``(2, N)`` (re, im), Fq6
``(3, 2, N)`` (the coefficients of 1, v, v^2), Fq12 ``(2, 3, 2, N)`` (of 1, w). An Fq12
array so holds its coefficients in snarkjs's order (c0.a0.re, c0.a0.im, c0.a1.re, ...
c1.a2.im), which is what ``cuzk.curves.tower`` reads and writes. Fq2 products, squares and
inverses are the backend's ``fe_*`` operations on (2, N) blocks; this module builds the
rest of the tower on them. Every function writes into ``out``, which may alias an input,
and takes its temporaries from its own stack frame (the ``*_scratch`` helpers), so a
kernel allocates nothing per operation.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit, types
from numba.extending import overload

from ...backends.cpu.field import FieldConsts, _stack_array, fe_add, fe_copy, fe_double, fe_inv, fe_mul, fe_neg, fe_set_one, fe_set_zero, fe_sqr, fe_sub


class TowerConsts(NamedTuple):
    """What the tower's kernels need besides the base field."""

    fc: FieldConsts  # Fq
    xi_re: np.int64  # xi = xi_re + u (9 on BN254, 1 on BLS12-381)
    frobenius: np.ndarray  # (3, 2, 3, 2, N): the Fq2 factor of each Fq12 coefficient of a^(q^k), k = 1, 2, 3


# ------------------------------------------------------------------------------ stack temporaries
def _scratch_helper(element_shape: tuple[int, ...]):
    """An inline numba helper ``(count, fc)`` giving ``count`` (a literal) elements of ``element_shape + (N,)``.

    Inlined (inline="always"): the stack memory belongs to the frame that executes the
    alloca, so a called function could not hand it back.
    """

    def helper(count, fc):
        """Numba only: ``count`` tower elements on the caller's stack."""

    @overload(helper, inline="always", prefer_literal=True)
    def _helper(count, fc):
        if not isinstance(count, types.IntegerLiteral):
            return None
        rows = count.literal_value * math.prod(element_shape)
        shape = (count.literal_value, *element_shape)
        return lambda count, fc: _stack_array(fc.p, rows, 0).reshape(shape + (len(fc.p),))

    return helper


fq2_scratch = _scratch_helper((2,))
fq6_scratch = _scratch_helper((3, 2))
fq12_scratch = _scratch_helper((2, 3, 2))


# ------------------------------------------------------------------------------ Fq2 beyond fe_*
@njit(cache=True)
def fq2_conj(a, out, fc):
    fe_copy(a[0], out[0])
    fe_neg(a[1], out[1], fc)


@njit(cache=True)
def fq2_mul_fq(a, s, out, fc):
    """a * s for an Fq element s: 2 Fq products."""
    fe_mul(a[0], s, out[0], fc)
    fe_mul(a[1], s, out[1], fc)


@njit(cache=True)
def _fq_mul_small(a, k, out, fc):
    """out = k * a for a small k >= 1, by doublings and additions (out must not alias a)."""
    fe_copy(a, out)
    top = 0
    while k >> (top + 1):
        top += 1
    for bit in range(top - 1, -1, -1):
        fe_double(out, out, fc)
        if (k >> bit) & 1:
            fe_add(out, a, out, fc)


@njit(cache=True)
def fq2_mul_xi(a, out, tc):
    """a * (xi_re + u) = (xi_re a0 - a1) + (a0 + xi_re a1) u; xi_re is small, so no products."""
    fc = tc.fc
    t = fq2_scratch(1, fc)[0]
    _fq_mul_small(a[0], tc.xi_re, t[0], fc)
    _fq_mul_small(a[1], tc.xi_re, t[1], fc)
    fe_sub(t[0], a[1], t[0], fc)
    fe_add(t[1], a[0], out[1], fc)
    fe_copy(t[0], out[0])


# ------------------------------------------------------------------------------ Fq6
@njit(cache=True)
def fq6_add(a, b, out, fc):
    for i in range(3):
        fe_add(a[i], b[i], out[i], fc)


@njit(cache=True)
def fq6_sub(a, b, out, fc):
    for i in range(3):
        fe_sub(a[i], b[i], out[i], fc)


@njit(cache=True)
def fq6_neg(a, out, fc):
    for i in range(3):
        fe_neg(a[i], out[i], fc)


@njit(cache=True)
def fq6_mul_by_v(a, out, tc):
    """(a0, a1, a2) * v = (xi a2, a0, a1)."""
    fc = tc.fc
    t = fq2_scratch(1, fc)[0]
    fq2_mul_xi(a[2], t, tc)
    fe_copy(a[1], out[2])
    fe_copy(a[0], out[1])
    fe_copy(t, out[0])


@njit(cache=True)
def _karatsuba_cross(x0, x1, y0, y1, p0, p1, out, fc):
    """out = (x0 + x1)(y0 + y1) - p0 - p1 over Fq2: x0 y1 + x1 y0 when p_i = x_i y_i."""
    t = fq2_scratch(2, fc)
    fe_add(x0, x1, t[0], fc)
    fe_add(y0, y1, t[1], fc)
    fe_mul(t[0], t[1], t[0], fc)
    fe_sub(t[0], p0, t[0], fc)
    fe_sub(t[0], p1, out, fc)


@njit(cache=True)
def fq6_mul(a, b, out, tc):
    """Karatsuba over Fq2: 6 Fq2 products."""
    fc = tc.fc
    t = fq2_scratch(6, fc)
    t0, t1, t2, r0, r1, r2 = t[0], t[1], t[2], t[3], t[4], t[5]
    fe_mul(a[0], b[0], t0, fc)
    fe_mul(a[1], b[1], t1, fc)
    fe_mul(a[2], b[2], t2, fc)
    # r0 = t0 + xi (a1 b2 + a2 b1)
    _karatsuba_cross(a[1], a[2], b[1], b[2], t1, t2, r0, fc)
    fq2_mul_xi(r0, r0, tc)
    fe_add(r0, t0, r0, fc)
    # r1 = a0 b1 + a1 b0 + xi t2
    _karatsuba_cross(a[0], a[1], b[0], b[1], t0, t1, r1, fc)
    fq2_mul_xi(t2, r2, tc)
    fe_add(r1, r2, r1, fc)
    # r2 = a0 b2 + a2 b0 + t1
    _karatsuba_cross(a[0], a[2], b[0], b[2], t0, t2, r2, fc)
    fe_add(r2, t1, out[2], fc)
    fe_copy(r1, out[1])
    fe_copy(r0, out[0])


@njit(cache=True)
def fq6_mul_by_01(a, b0, b1, out, tc):
    """a * (b0 + b1 v): 5 Fq2 products."""
    fc = tc.fc
    t = fq2_scratch(4, fc)
    t0, t1, r0, r1 = t[0], t[1], t[2], t[3]
    fe_mul(a[0], b0, t0, fc)
    fe_mul(a[1], b1, t1, fc)
    # r0 = t0 + xi a2 b1
    fe_mul(a[2], b1, r0, fc)
    fq2_mul_xi(r0, r0, tc)
    fe_add(r0, t0, r0, fc)
    # r1 = a0 b1 + a1 b0
    _karatsuba_cross(a[0], a[1], b0, b1, t0, t1, r1, fc)
    # r2 = t1 + a2 b0
    fe_mul(a[2], b0, t0, fc)
    fe_add(t0, t1, out[2], fc)
    fe_copy(r1, out[1])
    fe_copy(r0, out[0])


@njit(cache=True)
def fq6_mul_by_1(a, b1, out, tc):
    """a * (b1 v) = (xi a2 b1, a0 b1, a1 b1): 3 Fq2 products."""
    fc = tc.fc
    t = fq2_scratch(1, fc)[0]
    fe_mul(a[2], b1, t, fc)
    fe_mul(a[1], b1, out[2], fc)
    fe_mul(a[0], b1, out[1], fc)
    fq2_mul_xi(t, out[0], tc)


@njit(cache=True)
def fq6_mul_by_fq2(a, b0, out, fc):
    for i in range(3):
        fe_mul(a[i], b0, out[i], fc)


@njit(cache=True)
def fq6_inv(a, out, tc):
    """The adjugate over the norm: 9 Fq2 products, 3 squares and an Fq2 inversion."""
    fc = tc.fc
    t = fq2_scratch(5, fc)
    t0, t1, t2, s, norm = t[0], t[1], t[2], t[3], t[4]
    # t0 = a0^2 - xi a1 a2, t1 = xi a2^2 - a0 a1, t2 = a1^2 - a0 a2
    fe_mul(a[1], a[2], s, fc)
    fq2_mul_xi(s, s, tc)
    fe_sqr(a[0], t0, fc)
    fe_sub(t0, s, t0, fc)
    fe_sqr(a[2], t1, fc)
    fq2_mul_xi(t1, t1, tc)
    fe_mul(a[0], a[1], s, fc)
    fe_sub(t1, s, t1, fc)
    fe_sqr(a[1], t2, fc)
    fe_mul(a[0], a[2], s, fc)
    fe_sub(t2, s, t2, fc)
    # norm = a0 t0 + xi (a2 t1 + a1 t2)
    fe_mul(a[2], t1, norm, fc)
    fe_mul(a[1], t2, s, fc)
    fe_add(norm, s, norm, fc)
    fq2_mul_xi(norm, norm, tc)
    fe_mul(a[0], t0, s, fc)
    fe_add(norm, s, norm, fc)
    fe_inv(norm, norm, fc)
    fe_mul(t0, norm, out[0], fc)
    fe_mul(t1, norm, out[1], fc)
    fe_mul(t2, norm, out[2], fc)


# ------------------------------------------------------------------------------ Fq12
@njit(cache=True)
def fq12_set_one(out, fc):
    fe_set_zero(out)
    fe_set_one(out[0, 0, 0], fc)


@njit(cache=True)
def fq12_conj(a, out, fc):
    """The q^6-power (the inverse on the cyclotomic subgroup)."""
    fe_copy(a[0], out[0])
    fq6_neg(a[1], out[1], fc)


@njit(cache=True)
def fq12_mul(a, b, out, tc):
    """Karatsuba over Fq6 (w^2 = v): 3 Fq6 products."""
    fc = tc.fc
    t = fq6_scratch(4, fc)
    t0, t1, s1, s2 = t[0], t[1], t[2], t[3]
    fq6_mul(a[0], b[0], t0, tc)
    fq6_mul(a[1], b[1], t1, tc)
    fq6_add(a[0], a[1], s1, fc)
    fq6_add(b[0], b[1], s2, fc)
    fq6_mul(s1, s2, s1, tc)
    fq6_sub(s1, t0, s1, fc)
    fq6_sub(s1, t1, out[1], fc)
    fq6_mul_by_v(t1, t1, tc)
    fq6_add(t0, t1, out[0], fc)


@njit(cache=True)
def fq12_sqr(a, out, tc):
    """(a0 + a1 w)^2 = (a0 + a1)(a0 + v a1) - t - v t + 2t w with t = a0 a1: 2 Fq6 products."""
    fc = tc.fc
    s = fq6_scratch(3, fc)
    t, s1, s2 = s[0], s[1], s[2]
    fq6_mul(a[0], a[1], t, tc)
    fq6_add(a[0], a[1], s1, fc)
    fq6_mul_by_v(a[1], s2, tc)
    fq6_add(s2, a[0], s2, fc)
    fq6_mul(s1, s2, s1, tc)
    fq6_sub(s1, t, s1, fc)
    fq6_add(t, t, out[1], fc)
    fq6_mul_by_v(t, t, tc)
    fq6_sub(s1, t, out[0], fc)


@njit(cache=True)
def fq12_inv(a, out, tc):
    """(a0 - a1 w) / (a0^2 - v a1^2)."""
    fc = tc.fc
    t = fq6_scratch(2, fc)
    t0, t1 = t[0], t[1]
    fq6_mul(a[0], a[0], t0, tc)
    fq6_mul(a[1], a[1], t1, tc)
    fq6_mul_by_v(t1, t1, tc)
    fq6_sub(t0, t1, t0, fc)
    fq6_inv(t0, t0, tc)
    fq6_mul(a[0], t0, out[0], tc)
    fq6_mul(a[1], t0, out[1], tc)
    fq6_neg(out[1], out[1], fc)


@njit(cache=True)
def fq12_frobenius(a, k, out, tc):
    """a^(q^k) for k = 1, 2, 3: each Fq2 coefficient conjugated k times, times its constant."""
    fc = tc.fc
    t = fq2_scratch(1, fc)[0]
    for c in range(2):
        for i in range(3):
            if k % 2 == 1:
                fq2_conj(a[c, i], t, fc)
            else:
                fe_copy(a[c, i], t)
            fe_mul(t, tc.frobenius[k - 1, c, i], out[c, i], fc)
