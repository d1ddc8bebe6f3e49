"""The optimal ate Miller loop, with G2 line coefficients that can be prepared once per point.

The loop runs over the NAF of 6u+2 (BN, D-type twist, then two Frobenius line steps) or the
bits of |x| (BLS12, M-type twist, conjugated at the end since x < 0). The G2 point stays in
homogeneous projective coordinates, so there is no inversion in the loop, and each step's
line is kept as three Fq2 coefficients (c_y, c_x, c_0): the line at an affine G1 point P is
c_y y_P + c_x x_P w + c_0 w^3 (D-type) or c_0 + c_x x_P w^2 + c_y y_P w^3 (M-type), a sparse
Fq12 element multiplied in 13 Fq2 products. A G2 point's lines depend on it alone, so a
verifying key's gamma and delta are prepared once (``prepare_g2_kernel``), and several
pairings share one loop, squaring f once per step for all of them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...backends.cpu.field import fe_add, fe_copy, fe_double, fe_half, fe_mul, fe_neg, fe_set_one, fe_sqr, fe_sub
from .curve import g2_psi
from .tower import (
    fq2_mul_fq,
    fq2_scratch,
    fq6_add,
    fq6_mul_by_01,
    fq6_mul_by_1,
    fq6_mul_by_fq2,
    fq6_mul_by_v,
    fq6_scratch,
    fq6_sub,
    fq12_conj,
    fq12_set_one,
    fq12_sqr,
)


def line_steps(loop_naf: np.ndarray, family_bn: bool) -> int:
    """How many lines a G2 point's preparation gives: one per digit, two per non-zero digit (+2 on BN)."""
    return sum(1 if d == 0 else 2 for d in loop_naf[:-1]) + (2 if family_bn else 0)


@njit(cache=True)
def _double_step(T, line, cc):
    """T = 2T (homogeneous projective on the twist) and the tangent line's (c_y, c_x, c_0).

    Costello-Lange-Naehrig: with A = XY/2, B = Y^2, C = Z^2, E = 3b'C, F = 3E, G = (B+F)/2,
    H = 2YZ: 2T = (A(B - F), G^2 - 3E^2, BH); line = (H, -3X^2, B - E).
    """
    fc = cc.tower.fc
    X, Y, Z = T[0], T[1], T[2]
    t = fq2_scratch(7, fc)
    A, B, C, E, F, G, H = t[0], t[1], t[2], t[3], t[4], t[5], t[6]
    fe_mul(X, Y, A, fc)
    fe_half(A, A, fc)
    fe_sqr(Y, B, fc)
    fe_sqr(Z, C, fc)
    fe_mul(C, cc.b3, E, fc)
    fe_double(E, F, fc)
    fe_add(F, E, F, fc)
    fe_add(B, F, G, fc)
    fe_half(G, G, fc)
    fe_add(Y, Z, H, fc)
    fe_sqr(H, H, fc)
    fe_sub(H, B, H, fc)
    fe_sub(H, C, H, fc)
    fe_copy(H, line[0])
    fe_sqr(X, line[1], fc)
    fe_double(line[1], C, fc)
    fe_add(line[1], C, line[1], fc)
    fe_neg(line[1], line[1], fc)
    fe_sub(B, E, line[2], fc)
    fe_sub(B, F, C, fc)
    fe_mul(A, C, X, fc)
    fe_sqr(G, Y, fc)
    fe_sqr(E, C, fc)
    fe_double(C, E, fc)
    fe_add(E, C, E, fc)
    fe_sub(Y, E, Y, fc)
    fe_mul(B, H, Z, fc)


@njit(cache=True)
def _add_step(T, Q, line, cc):
    """T = T + Q (Q affine) and the line through them.

    With t = Y - y_Q Z and l = X - x_Q Z: line = (l, -t, t x_Q - l y_Q); C = t^2, D = l^2,
    E = l D, F = Z C, G = X D, H = E + F - 2G: T + Q = (l H, t (G - H) - Y E, Z E).
    """
    fc = cc.tower.fc
    X, Y, Z = T[0], T[1], T[2]
    s = fq2_scratch(8, fc)
    t, l, C, D, E, F, G, H = s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
    fe_mul(Q[1], Z, t, fc)
    fe_sub(Y, t, t, fc)
    fe_mul(Q[0], Z, l, fc)
    fe_sub(X, l, l, fc)
    fe_copy(l, line[0])
    fe_neg(t, line[1], fc)
    fe_mul(t, Q[0], C, fc)
    fe_mul(l, Q[1], D, fc)
    fe_sub(C, D, line[2], fc)
    fe_sqr(t, C, fc)
    fe_sqr(l, D, fc)
    fe_mul(l, D, E, fc)
    fe_mul(Z, C, F, fc)
    fe_mul(X, D, G, fc)
    fe_add(E, F, H, fc)
    fe_sub(H, G, H, fc)
    fe_sub(H, G, H, fc)
    fe_mul(l, H, X, fc)
    fe_sub(G, H, G, fc)
    fe_mul(t, G, G, fc)
    fe_mul(Y, E, Y, fc)
    fe_sub(G, Y, Y, fc)
    fe_mul(Z, E, Z, fc)


@njit(cache=True, nogil=True)
def prepare_g2_kernel(Q, steps, cc):
    """The Miller loop's (steps, 3, 2, N) line coefficients for the affine G2 point Q (2, 2, N), not infinity."""
    fc = cc.tower.fc
    lines = np.empty((steps, 3, 2, len(fc.p)), np.uint64)
    s = fq2_scratch(9, fc)
    T, q, neg, q2 = s[0:3], s[3:5], s[5:7], s[7:9]
    fe_copy(Q, q)
    fe_copy(Q[0], T[0])
    fe_copy(Q[1], T[1])
    fe_set_one(T[2], fc)
    fe_copy(Q[0], neg[0])
    fe_neg(Q[1], neg[1], fc)
    digits = cc.loop_naf
    step = 0
    for i in range(len(digits) - 2, -1, -1):
        _double_step(T, lines[step], cc)
        step += 1
        if digits[i] != 0:
            _add_step(T, q if digits[i] == 1 else neg, lines[step], cc)
            step += 1
    if cc.family_bn:
        # T = [6u+2] Q; add psi(Q), then -psi^2(Q) (only that line is needed)
        g2_psi(q, neg, cc)
        g2_psi(neg, q2, cc)
        fe_neg(q2[1], q2[1], fc)
        _add_step(T, neg, lines[step], cc)
        _add_step(T, q2, lines[step + 1], cc)
    return lines


@njit(cache=True)
def _fq12_mul_by_line(f, la, lb, lc, cc):
    """f *= a sparse line, in place: 13 Fq2 products.

    D-type: line = la + lb w + lc w^3, i.e. A = (la, 0, 0), B = (lb, lc, 0) in f0 + f1 w.
    M-type: line = la + lb w^2 + lc w^3, i.e. A = (la, lb, 0), B = (0, lc, 0).
    (f0 + f1 w)(A + B w) = (f0 A + v f1 B) + ((f0 + f1)(A + B) - f0 A - f1 B) w.
    """
    tc = cc.tower
    fc = tc.fc
    t = fq6_scratch(3, fc)
    f0A, f1B, s = t[0], t[1], t[2]
    ab = fq2_scratch(1, fc)[0]
    fq6_add(f[0], f[1], s, fc)
    if cc.twist_m:
        fq6_mul_by_01(f[0], la, lb, f0A, tc)
        fq6_mul_by_1(f[1], lc, f1B, tc)
        fe_add(lb, lc, ab, fc)
        fq6_mul_by_01(s, la, ab, s, tc)
    else:
        fq6_mul_by_fq2(f[0], la, f0A, fc)
        fq6_mul_by_01(f[1], lb, lc, f1B, tc)
        fe_add(la, lb, ab, fc)
        fq6_mul_by_01(s, ab, lc, s, tc)
    fq6_sub(s, f0A, s, fc)
    fq6_sub(s, f1B, f[1], fc)
    fq6_mul_by_v(f1B, f1B, tc)
    fq6_add(f0A, f1B, f[0], fc)


@njit(cache=True)
def _mul_by_lines(f, Ps, lines, step, cc):
    """f *= line ``step`` of every pair, at that pair's affine G1 point."""
    fc = cc.tower.fc
    t = fq2_scratch(2, fc)
    for j in range(Ps.shape[0]):
        line = lines[j, step]
        if cc.twist_m:
            fq2_mul_fq(line[1], Ps[j, 0], t[0], fc)  # c_x x_P
            fq2_mul_fq(line[0], Ps[j, 1], t[1], fc)  # c_y y_P
            _fq12_mul_by_line(f, line[2], t[0], t[1], cc)
        else:
            fq2_mul_fq(line[0], Ps[j, 1], t[0], fc)
            fq2_mul_fq(line[1], Ps[j, 0], t[1], fc)
            _fq12_mul_by_line(f, t[0], t[1], line[2], cc)


@njit(cache=True)
def miller_loop(Ps, lines, f, cc):
    """f = the product of the Miller functions of the pairs (Ps[j], the G2 point with lines[j]).

    Ps: (pairs, 2, N) affine G1 points; lines: (pairs, steps, 3, 2, N) from ``prepare_g2_kernel``.
    """
    tc = cc.tower
    fq12_set_one(f, tc.fc)
    digits = cc.loop_naf
    step = 0
    for i in range(len(digits) - 2, -1, -1):
        if i != len(digits) - 2:
            fq12_sqr(f, f, tc)
        _mul_by_lines(f, Ps, lines, step, cc)
        step += 1
        if digits[i] != 0:
            _mul_by_lines(f, Ps, lines, step, cc)
            step += 1
    if cc.family_bn:
        _mul_by_lines(f, Ps, lines, step, cc)
        _mul_by_lines(f, Ps, lines, step + 1, cc)
    if cc.param_negative:
        fq12_conj(f, f, tc.fc)


@njit(cache=True, nogil=True)
def miller_loop_kernel(Ps, lines, cc):
    f = np.empty((2, 3, 2, len(cc.tower.fc.p)), np.uint64)
    miller_loop(Ps, lines, f, cc)
    return f
