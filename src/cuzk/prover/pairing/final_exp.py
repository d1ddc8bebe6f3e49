"""The final exponentiation f^((q^12 - 1)/r * m), with snarkjs's addition chains.

The easy part f^((q^6 - 1)(q^2 + 1)) costs an inversion and a Frobenius map and leaves f in
the cyclotomic subgroup, where squarings are cheaper (Granger-Scott) and conjugation
inverts. The hard part raises to ``curves.tower.hard_exponent``, the multiple m of
(q^4 - q^2 + 1)/r that snarkjs computes, so values equal snarkjs's Gt bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...backends.cpu.field import fe_add, fe_copy, fe_double, fe_sqr, fe_sub
from .tower import fq2_mul_xi, fq2_scratch, fq12_conj, fq12_frobenius, fq12_inv, fq12_mul, fq12_scratch


@njit(cache=True)
def _fq4_sqr(a, b, out0, out1, tc):
    """(a + b s)^2 with s^2 = xi: (a^2 + xi b^2) + ((a + b)^2 - a^2 - b^2) s."""
    fc = tc.fc
    t = fq2_scratch(2, fc)
    fe_sqr(a, t[0], fc)
    fe_sqr(b, t[1], fc)
    fe_add(a, b, out1, fc)
    fe_sqr(out1, out1, fc)
    fe_sub(out1, t[0], out1, fc)
    fe_sub(out1, t[1], out1, fc)
    fq2_mul_xi(t[1], t[1], tc)
    fe_add(t[0], t[1], out0, fc)


@njit(cache=True)
def _granger_scott(x, t, subtract, out, fc):
    """out = 3t - 2x (subtract) or 3t + 2x."""
    if subtract:
        fe_sub(t, x, out, fc)
    else:
        fe_add(t, x, out, fc)
    fe_double(out, out, fc)
    fe_add(out, t, out, fc)


@njit(cache=True)
def cyclotomic_sqr(a, out, tc):
    """Granger-Scott squaring of an element of the cyclotomic subgroup.

    With s = w^3 (s^2 = xi) the element is A + B w + C w^2 over Fq4 = Fq2[s], A = g0 + g3 s,
    B = g1 + g4 s, C = g2 + g5 s (g_i the coefficient of w^i), and its square is
    (3A^2 - 2 conj A) + (3 s C^2 + 2 conj B) w + (3 B^2 - 2 conj C) w^2.
    """
    fc = tc.fc
    g0, g2, g4, g1, g3, g5 = a[0, 0], a[0, 1], a[0, 2], a[1, 0], a[1, 1], a[1, 2]
    t = fq2_scratch(6, fc)
    A0, A1, B0, B1, C0, C1 = t[0], t[1], t[2], t[3], t[4], t[5]
    _fq4_sqr(g0, g3, A0, A1, tc)
    _fq4_sqr(g1, g4, B0, B1, tc)
    _fq4_sqr(g2, g5, C0, C1, tc)
    fq2_mul_xi(C1, C1, tc)  # s C^2 = xi C1 + C0 s
    _granger_scott(g0, A0, True, out[0, 0], fc)
    _granger_scott(g3, A1, False, out[1, 1], fc)
    _granger_scott(g1, C1, False, out[1, 0], fc)
    _granger_scott(g4, C0, True, out[0, 2], fc)
    _granger_scott(g2, B0, True, out[0, 1], fc)
    _granger_scott(g5, B1, False, out[1, 2], fc)


@njit(cache=True)
def cyclotomic_exp(a, naf, negative, out, tc):
    """a^e for a in the cyclotomic subgroup, e given by its NAF digits (least significant first) and sign."""
    fc = tc.fc
    t = fq12_scratch(2, fc)
    r, a_conj = t[0], t[1]
    fq12_conj(a, a_conj, fc)
    fe_copy(a, r)
    for i in range(len(naf) - 2, -1, -1):
        cyclotomic_sqr(r, r, tc)
        if naf[i] != 0:
            fq12_mul(r, a if naf[i] == 1 else a_conj, r, tc)
    if negative:
        fq12_conj(r, out, fc)
    else:
        fe_copy(r, out)


@njit(cache=True)
def final_exponentiation(f, out, cc):
    """out = f^((q^6 - 1)(q^2 + 1) hard_exponent)."""
    tc = cc.tower
    fc = tc.fc
    naf, negative = cc.param_naf, cc.param_negative
    t = fq12_scratch(6, fc)
    a, b, c, d, e, g = t[0], t[1], t[2], t[3], t[4], t[5]
    # easy part: m = conj(f) / f, then m^(q^2) m
    fq12_inv(f, a, tc)
    fq12_conj(f, b, fc)
    fq12_mul(a, b, a, tc)
    fq12_frobenius(a, 2, b, tc)
    fq12_mul(a, b, a, tc)  # a = f^((q^6-1)(q^2+1)), cyclotomic from here
    if cc.family_bn:
        cyclotomic_exp(a, naf, negative, b, tc)  # f^u
        cyclotomic_sqr(b, b, tc)  # f^2u
        cyclotomic_sqr(b, c, tc)  # f^4u
        fq12_mul(c, b, c, tc)  # f^6u
        cyclotomic_exp(c, naf, negative, d, tc)  # f^6u^2
        cyclotomic_sqr(d, e, tc)  # f^12u^2
        cyclotomic_exp(e, naf, negative, e, tc)  # f^12u^3
        fq12_mul(e, d, e, tc)
        fq12_mul(e, c, e, tc)  # K = f^(12u^3+6u^2+6u)
        fq12_conj(b, b, fc)
        fq12_mul(b, e, b, tc)  # L = K f^-2u = f^(12u^3+6u^2+4u)
        fq12_mul(d, e, d, tc)  # K f^6u^2
        fq12_mul(d, a, d, tc)  # N = f^(12u^3+12u^2+6u+1)
        fq12_conj(a, c, fc)
        fq12_mul(c, b, c, tc)  # T = L / f
        fq12_frobenius(b, 1, g, tc)
        fq12_mul(d, g, d, tc)
        fq12_frobenius(e, 2, g, tc)
        fq12_mul(d, g, d, tc)
        fq12_frobenius(c, 3, g, tc)
        fq12_mul(d, g, out, tc)
    else:
        cyclotomic_exp(a, naf, negative, b, tc)  # f^x
        fq12_conj(a, c, fc)
        fq12_mul(b, c, b, tc)  # t1 = f^(x-1)
        cyclotomic_exp(b, naf, negative, c, tc)
        fq12_conj(b, b, fc)
        fq12_mul(b, c, b, tc)  # t2 = t1^(x-1) = f^((x-1)^2)
        cyclotomic_exp(b, naf, negative, c, tc)
        fq12_frobenius(b, 1, d, tc)
        fq12_mul(c, d, b, tc)  # A = t2^(x+q)
        cyclotomic_exp(b, naf, negative, c, tc)
        cyclotomic_exp(c, naf, negative, c, tc)  # A^(x^2)
        fq12_frobenius(b, 2, d, tc)
        fq12_mul(c, d, c, tc)
        fq12_conj(b, d, fc)
        fq12_mul(c, d, c, tc)  # A^(x^2+q^2-1)
        cyclotomic_sqr(a, d, tc)
        fq12_mul(d, a, d, tc)  # f^3
        fq12_mul(c, d, out, tc)


@njit(cache=True, nogil=True)
def final_exponentiation_kernel(f, cc):
    out = np.empty_like(f)
    final_exponentiation(f, out, cc)
    return out
