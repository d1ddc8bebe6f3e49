"""Short-Weierstrass point arithmetic (y² = x³ + b, a = 0) for numba kernels, written once for G1 and G2.

A coordinate is an Fp row ``(N,)`` for G1 or an Fp2 block ``(2, N)`` for G2; the ``fe_*``
functions of ``field`` pick the arithmetic from that shape. Points are arrays whose first
axis lists the coordinates:

- affine ``(2, ...)``: x, y (the caller tracks infinity, e.g. all-zero input rows);
- Jacobian ``(3, ...)``: X, Y, Z with x = X/Z², y = Y/Z³; Z = 0 is infinity.

Formulas are the a = 0 ones from the Explicit-Formulas Database (dbl-2009-l,
madd-2007-bl, add-2007-bl) with the exceptional cases (P = ±Q, infinity) handled, since
MSM buckets do meet equal points. Every function lets ``out`` alias an input. The MSMs,
the fixed-base tables and the pairing's subgroup checks all use these.
"""

from __future__ import annotations

from numba import njit, types
from numba.extending import overload

from .field import _stack_array, fe_add, fe_copy, fe_double, fe_eq, fe_inv, fe_is_zero, fe_mul, fe_neg, fe_set_one, fe_set_zero, fe_sqr, fe_sub


def coord_scratch(point, fc):
    """Numba-only: 12 stack temporaries shaped like one coordinate of ``point``.

    Inlined into the caller (inline="always"): the stack memory belongs to the frame that
    executes the alloca, so a called function could not hand it back.
    """


@overload(coord_scratch, inline="always")
def _coord_scratch(point, fc):
    if not isinstance(point, types.Array):
        return None
    if point.ndim == 2:  # G1: (k, N)
        return lambda point, fc: _stack_array(fc.p, 12, 0)
    return lambda point, fc: _stack_array(fc.p, 24, 0).reshape((12, 2, len(fc.p)))


@njit(inline="always")
def jac_set_inf(out):
    fe_set_zero(out[2])


@njit(inline="always")
def jac_copy(P, out):
    fe_copy(P[0], out[0])
    fe_copy(P[1], out[1])
    fe_copy(P[2], out[2])


@njit(inline="always")
def jac_from_affine(A, out, fc):
    fe_copy(A[0], out[0])
    fe_copy(A[1], out[1])
    fe_set_one(out[2], fc)


@njit(cache=True)
def jac_double(P, out, fc):
    """dbl-2009-l: 2M + 5S."""
    if fe_is_zero(P[2]):
        fe_set_zero(out[2])
        return
    t = coord_scratch(P, fc)
    A, B, C, D, E, F = t[0], t[1], t[2], t[3], t[4], t[5]
    fe_sqr(P[0], A, fc)
    fe_sqr(P[1], B, fc)
    fe_sqr(B, C, fc)
    fe_add(P[0], B, D, fc)
    fe_sqr(D, D, fc)
    fe_sub(D, A, D, fc)
    fe_sub(D, C, D, fc)
    fe_double(D, D, fc)  # D = 2((X+B)² - A - C)
    fe_double(A, E, fc)
    fe_add(E, A, E, fc)  # E = 3A
    fe_sqr(E, F, fc)
    fe_mul(P[1], P[2], out[2], fc)
    fe_double(out[2], out[2], fc)  # Z3 = 2YZ (Y, Z read before X3, Y3 are written)
    fe_double(D, A, fc)
    fe_sub(F, A, out[0], fc)  # X3 = F - 2D
    fe_sub(D, out[0], D, fc)
    fe_mul(E, D, out[1], fc)
    fe_double(C, C, fc)
    fe_double(C, C, fc)
    fe_double(C, C, fc)
    fe_sub(out[1], C, out[1], fc)  # Y3 = E(D - X3) - 8C


@njit(cache=True)
def _same_x(P, H, r, out, fc):
    """The additions' exceptional case H = 0 (equal x): out = 2P when r = 0 (P = Q), else infinity (P = -Q).

    Returns whether it applied.
    """
    if not fe_is_zero(H):
        return False
    if fe_is_zero(r):
        jac_double(P, out, fc)
    else:
        fe_set_zero(out[2])
    return True


@njit(cache=True)
def _add_finish(r, J, V, SJ, out, fc):
    """X3 = r² - J - 2V and Y3 = r(V - X3) - 2·SJ, the end both additions share (V, SJ are clobbered)."""
    fe_sqr(r, out[0], fc)
    fe_sub(out[0], J, out[0], fc)
    fe_sub(out[0], V, out[0], fc)
    fe_sub(out[0], V, out[0], fc)
    fe_sub(V, out[0], V, fc)
    fe_mul(r, V, out[1], fc)
    fe_double(SJ, SJ, fc)
    fe_sub(out[1], SJ, out[1], fc)


@njit(cache=True)
def jac_add_affine(P, Q, out, fc):
    """P + Q for Jacobian P and affine Q (not infinity): madd-2007-bl, 7M + 4S."""
    if fe_is_zero(P[2]):
        jac_from_affine(Q, out, fc)
        return
    t = coord_scratch(P, fc)
    Z1Z1, U2, S2, H, HH, I, J, r, V = t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]
    fe_sqr(P[2], Z1Z1, fc)
    fe_mul(Q[0], Z1Z1, U2, fc)
    fe_mul(Q[1], P[2], S2, fc)
    fe_mul(S2, Z1Z1, S2, fc)
    fe_sub(U2, P[0], H, fc)
    fe_sub(S2, P[1], r, fc)
    if _same_x(P, H, r, out, fc):
        return
    fe_double(r, r, fc)
    fe_sqr(H, HH, fc)
    fe_double(HH, I, fc)
    fe_double(I, I, fc)
    fe_mul(H, I, J, fc)
    fe_mul(P[0], I, V, fc)
    # Z3 = (Z1 + H)² - Z1Z1 - HH (before Z1 may be overwritten)
    fe_add(P[2], H, out[2], fc)
    fe_sqr(out[2], out[2], fc)
    fe_sub(out[2], Z1Z1, out[2], fc)
    fe_sub(out[2], HH, out[2], fc)
    fe_mul(P[1], J, S2, fc)  # S2 reused: Y1·J
    _add_finish(r, J, V, S2, out, fc)


@njit(cache=True)
def jac_add(P, Q, out, fc):
    """P + Q, both Jacobian: add-2007-bl, 11M + 5S."""
    if fe_is_zero(P[2]):
        jac_copy(Q, out)
        return
    if fe_is_zero(Q[2]):
        jac_copy(P, out)
        return
    t = coord_scratch(P, fc)
    Z1Z1, Z2Z2, U1, U2, S1, S2, H, I, J, r, V = t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10]
    fe_sqr(P[2], Z1Z1, fc)
    fe_sqr(Q[2], Z2Z2, fc)
    fe_mul(P[0], Z2Z2, U1, fc)
    fe_mul(Q[0], Z1Z1, U2, fc)
    fe_mul(P[1], Q[2], S1, fc)
    fe_mul(S1, Z2Z2, S1, fc)
    fe_mul(Q[1], P[2], S2, fc)
    fe_mul(S2, Z1Z1, S2, fc)
    fe_sub(U2, U1, H, fc)
    fe_sub(S2, S1, r, fc)
    if _same_x(P, H, r, out, fc):
        return
    fe_double(r, r, fc)
    fe_double(H, I, fc)
    fe_sqr(I, I, fc)
    fe_mul(H, I, J, fc)
    fe_mul(U1, I, V, fc)
    fe_add(P[2], Q[2], out[2], fc)
    fe_sqr(out[2], out[2], fc)
    fe_sub(out[2], Z1Z1, out[2], fc)
    fe_sub(out[2], Z2Z2, out[2], fc)
    fe_mul(out[2], H, out[2], fc)  # Z3 = ((Z1 + Z2)² - Z1Z1 - Z2Z2)·H
    fe_mul(S1, J, S1, fc)
    _add_finish(r, J, V, S1, out, fc)


@njit(cache=True)
def jac_to_affine(P, out, fc):
    """Affine (x, y) of a Jacobian point; returns False (out untouched) for infinity."""
    if fe_is_zero(P[2]):
        return False
    t = coord_scratch(P, fc)
    zi, zi2 = t[0], t[1]
    fe_inv(P[2], zi, fc)
    fe_sqr(zi, zi2, fc)
    fe_mul(P[0], zi2, out[0], fc)
    fe_mul(zi2, zi, zi2, fc)
    fe_mul(P[1], zi2, out[1], fc)
    return True


@njit(cache=True)
def jac_eq(P, Q, fc):
    """P = Q for Jacobian points: X1·Z2² = X2·Z1² and Y1·Z2³ = Y2·Z1³, or both infinity."""
    p_inf, q_inf = fe_is_zero(P[2]), fe_is_zero(Q[2])
    if p_inf or q_inf:
        return p_inf and q_inf
    t = coord_scratch(P, fc)
    zz1, zz2, u1, u2 = t[0], t[1], t[2], t[3]
    fe_sqr(P[2], zz1, fc)
    fe_sqr(Q[2], zz2, fc)
    fe_mul(P[0], zz2, u1, fc)
    fe_mul(Q[0], zz1, u2, fc)
    if not fe_eq(u1, u2):
        return False
    fe_mul(zz1, P[2], zz1, fc)
    fe_mul(zz2, Q[2], zz2, fc)
    fe_mul(P[1], zz2, u1, fc)
    fe_mul(Q[1], zz1, u2, fc)
    return fe_eq(u1, u2)


@njit(cache=True)
def jac_mul_naf(A, naf, out, fc):
    """out = [e]A for an affine A (not infinity) and e > 0 given by its NAF digits, least significant first.

    Left to right: a doubling per digit and a mixed addition of ±A per non-zero digit.
    """
    t = coord_scratch(A, fc)
    neg = t[0:2]
    fe_copy(A[0], neg[0])
    fe_neg(A[1], neg[1], fc)
    jac_from_affine(A, out, fc)
    for i in range(len(naf) - 2, -1, -1):
        jac_double(out, out, fc)
        if naf[i] != 0:
            jac_add_affine(out, A if naf[i] == 1 else neg, out, fc)
