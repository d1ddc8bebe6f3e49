"""Optimal ate pairing for BN254 and BLS12-381 in numba, in snarkjs's Fq12 tower.

Values equal ``cuzk.curves.tower``'s reference pairing (and so snarkjs's Gt) exactly; this is
the fast path the Groth16 verifier runs.

Representation. All arithmetic works on one 2-D uint64 "register file" ``W`` of shape
(rows, N): a row is an Fq element in Montgomery form as N little-endian 64-bit words
(N = 4 for BN254, 6 for BLS12-381). R is 2^256 / 2^384 either way, so a row holds the same
bytes as the project's 32-bit-limb layout (``backends.base``); 64-bit words let each limb
product be one 64x64->128 multiply (an LLVM i128 intrinsic below), a quarter of the
32-bit-limb products. Fq2/Fq6/Fq12 elements are 2/6/12 consecutive rows in snarkjs's order
(c0.a0.re, c0.a0.im, c0.a1.re, ... c1.a2.im). Kernels take row indices, never allocate, and
get scratch space from ``sp``: the first free row, which each kernel advances past its own
temporaries before calling the next. Rows [0, NUM_CONST_ROWS) hold per-curve constants
(Montgomery one, Frobenius and twist coefficients).

The field context ``F = (P, pinv, xi_k)`` carries the modulus as a tuple, so numba compiles
one specialisation per word count with constant loop bounds (which LLVM unrolls) and caches
both. xi = xi_k + u is the Fq6 non-residue. Fq kernels are inlined into the Fq2 ones (numba
``inline="always"``); everything from Fq2 up is an ordinary call, cheap next to its work,
which keeps compile times to minutes.

Algorithms. Miller loop over the NAF of 6u+2 (BN, D-type twist, two Frobenius line steps)
or the bits of |x| (BLS12, M-type twist, conjugate at the end since x < 0); the G2 point
stays in homogeneous projective coordinates, so there is no inversion in the loop; each
step's line is kept as three Fq2 coefficients (c_y, c_x, c_0): the line at an affine G1
point P is c_y*y_P + c_x*x_P*w + c_0*w^3 (D-type) or c_0 + c_x*x_P*w^2 + c_y*y_P*w^3
(M-type), a sparse Fq12 element multiplied in 13 Fq2 products. Coefficients for a fixed
G2 point (a verifying key's gamma, delta) are computed once (``prepare_g2``). Several
pairings share one loop and one final exponentiation, whose hard part uses cyclotomic
squarings and the same exponent as snarkjs.

Also here, for the verifier: subgroup checks by endomorphisms instead of multiplying by r
(BLS12 G1: Bowe's (beta x, y) = [-x^2] P; BLS12 G2: Scott's psi(Q) = [x] Q; BN G2: El Housni,
Guillevic and Piellard's [u+1] Q + psi([u] Q) + psi^2([u] Q) = psi^3([2u] Q); BN254's G1 has
cofactor 1), and a Straus/Pippenger G1 MSM for the public-input combination of IC points.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ..curves import Curve
from ..curves.ec import Point
from ..curves.tower import Fq12E, Tower, miller_loop_scalar, naf, tower

ZERO64 = np.uint64(0)
ONE64 = np.uint64(1)
MASK64 = (1 << 64) - 1

# Constant rows of W.
K_ONE = 0  # Montgomery 1 (Fq)
K_FROB = 1  # 3 x 6 Fq2: xi^(w_power(slot) (q^k - 1)/6) for k = 1, 2, 3
K_B3 = K_FROB + 36  # Fq2: 3 b', the twist's coefficient times 3
K_PSI_X = K_B3 + 2  # Fq2: the G2 endomorphism psi(x, y) = (conj(x) c_x, conj(y) c_y)
K_PSI_Y = K_PSI_X + 2
K_BETA = K_PSI_Y + 2  # Fq: the cube root of unity with (beta x, y) = [-x^2] P on BLS12 G1
NUM_CONST_ROWS = K_BETA + 1

TWIST_D, TWIST_M = 0, 1


# ============================================================================ 128-bit helpers
def _wide_result(context, builder, signature, value):
    i128 = ir.IntType(128)
    lo = builder.trunc(value, ir.IntType(64))
    hi = builder.trunc(builder.lshr(value, ir.Constant(i128, 64)), ir.IntType(64))
    return context.make_tuple(builder, signature.return_type, (lo, hi))


@intrinsic
def mul_add(typingctx, t, a, b, c):
    """(low, high) 64-bit words of t + a*b + c, which always fits in 128 bits."""
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        t, a, b, c = (builder.zext(x, ir.IntType(128)) for x in args)
        return _wide_result(context, builder, signature, builder.add(builder.add(builder.mul(a, b), t), c))

    return sig, codegen


@intrinsic
def add_carry(typingctx, a, b, c):
    """(a + b + c mod 2^64, carry out)."""
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        a, b, c = (builder.zext(x, ir.IntType(128)) for x in args)
        return _wide_result(context, builder, signature, builder.add(builder.add(a, b), c))

    return sig, codegen


@intrinsic
def sub_borrow(typingctx, a, b, br):
    """(a - b - br mod 2^64, borrow out as 0 or 1)."""
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i128 = ir.IntType(128)
        a, b, br = (builder.zext(x, i128) for x in args)
        d = builder.sub(builder.sub(a, b), br)
        lo = builder.trunc(d, ir.IntType(64))
        borrow = builder.trunc(builder.lshr(d, ir.Constant(i128, 127)), ir.IntType(64))
        return context.make_tuple(builder, signature.return_type, (lo, borrow))

    return sig, codegen


# ============================================================================ Fq (one row: N 64-bit limbs)
@njit(cache=True, inline="always")
def fq_copy(W, o, a, F):
    for j in range(len(F[0])):
        W[o, j] = W[a, j]


@njit(cache=True, inline="always")
def fq_set_zero(W, o, F):
    for j in range(len(F[0])):
        W[o, j] = ZERO64


@njit(cache=True, inline="always")
def fq_is_zero(W, a, F):
    acc = ZERO64
    for j in range(len(F[0])):
        acc |= W[a, j]
    return acc == ZERO64


@njit(cache=True, inline="always")
def fq_eq(W, a, b, F):
    acc = ZERO64
    for j in range(len(F[0])):
        acc |= W[a, j] ^ W[b, j]
    return acc == ZERO64


@njit(cache=True, inline="always")
def _fq_reduce_once(W, o, F):
    """W[o] -= P if W[o] >= P (inputs below 2P)."""
    P = F[0]
    n = len(P)
    br = ZERO64
    for j in range(n):
        _, br = sub_borrow(W[o, j], P[j], br)
    if br == ZERO64:
        for j in range(n):
            W[o, j], br = sub_borrow(W[o, j], P[j], br)


@njit(cache=True, inline="always")
def fq_add_unreduced(W, o, a, b, F):
    """a + b without the final subtraction: below 2P, which fq_mul accepts (4P < R for both curves).

    P < 2^(64N - 2) for both curves, so the sum of two values below 2P fits in N limbs.
    """
    c = ZERO64
    for j in range(len(F[0])):
        W[o, j], c = add_carry(W[a, j], W[b, j], c)


@njit(cache=True, inline="always")
def fq_add(W, o, a, b, F):
    fq_add_unreduced(W, o, a, b, F)
    _fq_reduce_once(W, o, F)


@njit(cache=True, inline="always")
def fq_sub(W, o, a, b, F):
    P = F[0]
    n = len(P)
    br = ZERO64
    for j in range(n):
        W[o, j], br = sub_borrow(W[a, j], W[b, j], br)
    if br != ZERO64:
        c = ZERO64
        for j in range(n):
            W[o, j], c = add_carry(W[o, j], P[j], c)


@njit(cache=True, inline="always")
def fq_neg(W, o, a, F):
    P = F[0]
    if fq_is_zero(W, a, F):
        fq_set_zero(W, o, F)
        return
    br = ZERO64
    for j in range(len(P)):
        W[o, j], br = sub_borrow(P[j], W[a, j], br)


@njit(cache=True, inline="always")
def fq_half(W, o, a, F):
    """a / 2: add P when odd, then shift (the sum fits: P < 2^(64N-2))."""
    P = F[0]
    n = len(P)
    odd = W[a, 0] & ONE64
    c = ZERO64
    for j in range(n):
        W[o, j], c = add_carry(W[a, j], P[j] if odd else ZERO64, c)
    for j in range(n - 1):
        W[o, j] = (W[o, j] >> ONE64) | (W[o, j + 1] << np.uint64(63))
    W[o, n - 1] = W[o, n - 1] >> ONE64


@njit(cache=True, inline="always")
def fq_mul(W, sp, o, a, b, F):
    """Montgomery product a*b/R (CIOS on 64-bit words), accumulating in row sp; o may alias a or b.

    Inputs below 2P give an output below P: t < ab/R + P < (4P/R + 1) P < 2P before the final
    subtraction, as 4P < R for both curves.
    """
    P = F[0]
    pinv = F[1]
    n = len(P)
    t = sp
    for j in range(n):
        W[t, j] = ZERO64
    top = ZERO64
    for i in range(n):
        bi = W[b, i]
        c = ZERO64
        for j in range(n):
            W[t, j], c = mul_add(W[t, j], W[a, j], bi, c)
        top_lo, top_hi = add_carry(top, c, ZERO64)
        m = W[t, 0] * pinv
        _, c = mul_add(W[t, 0], m, P[0], ZERO64)
        for j in range(1, n):
            W[t, j - 1], c = mul_add(W[t, j], m, P[j], c)
        W[t, n - 1], c = add_carry(top_lo, c, ZERO64)
        top = top_hi + c
    br = ZERO64
    for j in range(n):
        _, br = sub_borrow(W[t, j], P[j], br)
    if top != ZERO64 or br == ZERO64:
        br = ZERO64
        for j in range(n):
            W[o, j], br = sub_borrow(W[t, j], P[j], br)
    else:
        for j in range(n):
            W[o, j] = W[t, j]


@njit(cache=True, inline="always")
def fq_mul_small(W, o, a, k, F):
    """k*a for a small k >= 1 (BN254's non-residue has k = 9); o must not alias a.

    One multiply pass gives V = k*a below k*P; the quotient V // P (at most k) is estimated
    from the top words in floating point, at most two below the truth, so after subtracting
    that multiple of P a short loop of conditional subtractions finishes the reduction.
    """
    P = F[0]
    n = len(P)
    kk = np.uint64(k)
    c = ZERO64
    for j in range(n):
        W[o, j], c = mul_add(ZERO64, W[a, j], kk, c)
    est = np.int64((float(c) * 18446744073709551616.0 + float(W[o, n - 1])) / (float(P[n - 1]) + 1.0)) - 1
    if est > 0:
        m = np.uint64(est)
        br = ZERO64
        for j in range(n):
            lo, hi = mul_add(br, m, P[j], ZERO64)
            W[o, j], b = sub_borrow(W[o, j], lo, ZERO64)
            br = hi + b
        c -= br
    reduced = False
    while not reduced:
        if c == ZERO64:
            br = ZERO64
            for j in range(n):
                _, br = sub_borrow(W[o, j], P[j], br)
            reduced = br != ZERO64
        if not reduced:
            br = ZERO64
            for j in range(n):
                W[o, j], br = sub_borrow(W[o, j], P[j], br)
            c -= br


@njit(cache=True)
def fq_inv(W, sp, o, a, F):
    """a^(P-2) (Fermat); the inverse of zero comes out as zero."""
    P = F[0]
    r, base = sp, sp + 1
    fq_copy(W, base, a, F)
    fq_copy(W, r, K_ONE, F)
    for j in range(len(P) - 1, -1, -1):
        limb = P[j] - np.uint64(2) if j == 0 else P[j]  # P[0] > 2 for both curves: no borrow
        for bit in range(63, -1, -1):
            fq_mul(W, sp + 2, r, r, r, F)
            if (limb >> np.uint64(bit)) & ONE64:
                fq_mul(W, sp + 2, r, r, base, F)
    fq_copy(W, o, r, F)


# ============================================================================ Fq2 (rows e, e+1)
@njit(cache=True)
def fq2_copy(W, o, a, F):
    fq_copy(W, o, a, F)
    fq_copy(W, o + 1, a + 1, F)


@njit(cache=True)
def fq2_set_one(W, o, F):
    fq_copy(W, o, K_ONE, F)
    fq_set_zero(W, o + 1, F)


@njit(cache=True)
def fq2_add(W, o, a, b, F):
    fq_add(W, o, a, b, F)
    fq_add(W, o + 1, a + 1, b + 1, F)


@njit(cache=True)
def fq2_sub(W, o, a, b, F):
    fq_sub(W, o, a, b, F)
    fq_sub(W, o + 1, a + 1, b + 1, F)


@njit(cache=True)
def fq2_neg(W, o, a, F):
    fq_neg(W, o, a, F)
    fq_neg(W, o + 1, a + 1, F)


@njit(cache=True)
def fq2_conj(W, o, a, F):
    fq_copy(W, o, a, F)
    fq_neg(W, o + 1, a + 1, F)


@njit(cache=True)
def fq2_mul(W, sp, o, a, b, F):
    """Karatsuba: 3 Fq products (u^2 = -1)."""
    t0, t1, t2, t3 = sp, sp + 1, sp + 2, sp + 3
    fq_mul(W, sp + 4, t0, a, b, F)
    fq_mul(W, sp + 4, t1, a + 1, b + 1, F)
    fq_add_unreduced(W, t2, a, a + 1, F)
    fq_add_unreduced(W, t3, b, b + 1, F)
    fq_mul(W, sp + 4, t2, t2, t3, F)
    fq_sub(W, o, t0, t1, F)
    fq_sub(W, t2, t2, t0, F)
    fq_sub(W, o + 1, t2, t1, F)


@njit(cache=True)
def fq2_sqr(W, sp, o, a, F):
    """(a0 + a1)(a0 - a1) + 2 a0 a1 u: 2 Fq products."""
    t0, t1, t2 = sp, sp + 1, sp + 2
    fq_add_unreduced(W, t0, a, a + 1, F)
    fq_sub(W, t1, a, a + 1, F)
    fq_mul(W, sp + 3, t2, a, a + 1, F)
    fq_mul(W, sp + 3, o, t0, t1, F)
    fq_add(W, o + 1, t2, t2, F)


@njit(cache=True)
def fq2_mul_fq(W, sp, o, a, s, F):
    fq_mul(W, sp, o, a, s, F)
    fq_mul(W, sp, o + 1, a + 1, s, F)


@njit(cache=True)
def fq2_mul_xi(W, sp, o, a, F):
    """a * (xi_k + u) = (xi_k a0 - a1) + (a0 + xi_k a1) u."""
    k = F[2]
    t0, t1 = sp, sp + 1
    if k == 1:
        fq_copy(W, t0, a, F)
        fq_copy(W, t1, a + 1, F)
    else:
        fq_mul_small(W, t0, a, k, F)
        fq_mul_small(W, t1, a + 1, k, F)
    fq_sub(W, t0, t0, a + 1, F)
    fq_add(W, t1, t1, a, F)
    fq_copy(W, o, t0, F)
    fq_copy(W, o + 1, t1, F)


@njit(cache=True)
def fq2_inv(W, sp, o, a, F):
    t0, t1 = sp, sp + 1
    fq_mul(W, sp + 2, t0, a, a, F)
    fq_mul(W, sp + 2, t1, a + 1, a + 1, F)
    fq_add(W, t0, t0, t1, F)
    fq_inv(W, sp + 2, t0, t0, F)
    fq_mul(W, sp + 2, o, a, t0, F)
    fq_mul(W, sp + 2, t1, a + 1, t0, F)
    fq_neg(W, o + 1, t1, F)


# ============================================================================ Fq6 (rows e .. e+5)
@njit(cache=True)
def fq6_copy(W, o, a, F):
    for i in range(3):
        fq2_copy(W, o + 2 * i, a + 2 * i, F)


@njit(cache=True)
def fq6_add(W, o, a, b, F):
    for i in range(3):
        fq2_add(W, o + 2 * i, a + 2 * i, b + 2 * i, F)


@njit(cache=True)
def fq6_sub(W, o, a, b, F):
    for i in range(3):
        fq2_sub(W, o + 2 * i, a + 2 * i, b + 2 * i, F)


@njit(cache=True)
def fq6_neg(W, o, a, F):
    for i in range(3):
        fq2_neg(W, o + 2 * i, a + 2 * i, F)


@njit(cache=True)
def fq6_mul_by_v(W, sp, o, a, F):
    """(a0, a1, a2) * v = (xi a2, a0, a1); o may alias a."""
    fq2_mul_xi(W, sp + 2, sp, a + 4, F)
    fq2_copy(W, o + 4, a + 2, F)
    fq2_copy(W, o + 2, a, F)
    fq2_copy(W, o, sp, F)


@njit(cache=True)
def fq6_mul(W, sp, o, a, b, F):
    """Karatsuba over Fq2: 6 Fq2 products."""
    t0, t1, t2, s1, s2 = sp, sp + 2, sp + 4, sp + 6, sp + 8
    r0, r1, r2 = sp + 10, sp + 12, sp + 14
    nsp = sp + 16
    a0, a1, a2 = a, a + 2, a + 4
    b0, b1, b2 = b, b + 2, b + 4
    fq2_mul(W, nsp, t0, a0, b0, F)
    fq2_mul(W, nsp, t1, a1, b1, F)
    fq2_mul(W, nsp, t2, a2, b2, F)
    # r0 = t0 + xi ((a1 + a2)(b1 + b2) - t1 - t2)
    fq2_add(W, s1, a1, a2, F)
    fq2_add(W, s2, b1, b2, F)
    fq2_mul(W, nsp, r0, s1, s2, F)
    fq2_sub(W, r0, r0, t1, F)
    fq2_sub(W, r0, r0, t2, F)
    fq2_mul_xi(W, nsp, r0, r0, F)
    fq2_add(W, r0, r0, t0, F)
    # r1 = (a0 + a1)(b0 + b1) - t0 - t1 + xi t2
    fq2_add(W, s1, a0, a1, F)
    fq2_add(W, s2, b0, b1, F)
    fq2_mul(W, nsp, r1, s1, s2, F)
    fq2_sub(W, r1, r1, t0, F)
    fq2_sub(W, r1, r1, t1, F)
    fq2_mul_xi(W, nsp, s1, t2, F)
    fq2_add(W, r1, r1, s1, F)
    # r2 = (a0 + a2)(b0 + b2) - t0 - t2 + t1
    fq2_add(W, s1, a0, a2, F)
    fq2_add(W, s2, b0, b2, F)
    fq2_mul(W, nsp, r2, s1, s2, F)
    fq2_sub(W, r2, r2, t0, F)
    fq2_sub(W, r2, r2, t2, F)
    fq2_add(W, r2, r2, t1, F)
    fq6_copy(W, o, r0, F)


@njit(cache=True)
def fq6_mul_by_01(W, sp, o, a, b0, b1, F):
    """a * (b0 + b1 v): 5 Fq2 products."""
    t0, t1, s1, s2, r0, r1, r2 = sp, sp + 2, sp + 4, sp + 6, sp + 8, sp + 10, sp + 12
    nsp = sp + 14
    a0, a1, a2 = a, a + 2, a + 4
    fq2_mul(W, nsp, t0, a0, b0, F)
    fq2_mul(W, nsp, t1, a1, b1, F)
    # r0 = t0 + xi a2 b1
    fq2_mul(W, nsp, r0, a2, b1, F)
    fq2_mul_xi(W, nsp, r0, r0, F)
    fq2_add(W, r0, r0, t0, F)
    # r1 = (a0 + a1)(b0 + b1) - t0 - t1
    fq2_add(W, s1, a0, a1, F)
    fq2_add(W, s2, b0, b1, F)
    fq2_mul(W, nsp, r1, s1, s2, F)
    fq2_sub(W, r1, r1, t0, F)
    fq2_sub(W, r1, r1, t1, F)
    # r2 = t1 + a2 b0
    fq2_mul(W, nsp, r2, a2, b0, F)
    fq2_add(W, r2, r2, t1, F)
    fq6_copy(W, o, r0, F)


@njit(cache=True)
def fq6_mul_by_1(W, sp, o, a, b1, F):
    """a * (b1 v) = (xi a2 b1, a0 b1, a1 b1): 3 Fq2 products."""
    r0, r1, r2 = sp, sp + 2, sp + 4
    nsp = sp + 6
    fq2_mul(W, nsp, r0, a + 4, b1, F)
    fq2_mul_xi(W, nsp, r0, r0, F)
    fq2_mul(W, nsp, r1, a, b1, F)
    fq2_mul(W, nsp, r2, a + 2, b1, F)
    fq6_copy(W, o, r0, F)


@njit(cache=True)
def fq6_mul_by_fq2(W, sp, o, a, b0, F):
    for i in range(3):
        fq2_mul(W, sp, o + 2 * i, a + 2 * i, b0, F)


@njit(cache=True)
def fq6_inv(W, sp, o, a, F):
    t0, t1, t2, s, nrm = sp, sp + 2, sp + 4, sp + 6, sp + 8
    nsp = sp + 10
    a0, a1, a2 = a, a + 2, a + 4
    # t0 = a0^2 - xi a1 a2, t1 = xi a2^2 - a0 a1, t2 = a1^2 - a0 a2
    fq2_mul(W, nsp, s, a1, a2, F)
    fq2_mul_xi(W, nsp, s, s, F)
    fq2_sqr(W, nsp, t0, a0, F)
    fq2_sub(W, t0, t0, s, F)
    fq2_sqr(W, nsp, t1, a2, F)
    fq2_mul_xi(W, nsp, t1, t1, F)
    fq2_mul(W, nsp, s, a0, a1, F)
    fq2_sub(W, t1, t1, s, F)
    fq2_sqr(W, nsp, t2, a1, F)
    fq2_mul(W, nsp, s, a0, a2, F)
    fq2_sub(W, t2, t2, s, F)
    # norm = a0 t0 + xi (a2 t1 + a1 t2)
    fq2_mul(W, nsp, nrm, a2, t1, F)
    fq2_mul(W, nsp, s, a1, t2, F)
    fq2_add(W, nrm, nrm, s, F)
    fq2_mul_xi(W, nsp, nrm, nrm, F)
    fq2_mul(W, nsp, s, a0, t0, F)
    fq2_add(W, nrm, nrm, s, F)
    fq2_inv(W, nsp, nrm, nrm, F)
    fq2_mul(W, nsp, o, t0, nrm, F)
    fq2_mul(W, nsp, o + 2, t1, nrm, F)
    fq2_mul(W, nsp, o + 4, t2, nrm, F)


# ============================================================================ Fq12 (rows e .. e+11)
@njit(cache=True)
def fq12_copy(W, o, a, F):
    for i in range(12):
        fq_copy(W, o + i, a + i, F)


@njit(cache=True)
def fq12_set_one(W, o, F):
    for i in range(1, 12):
        fq_set_zero(W, o + i, F)
    fq_copy(W, o, K_ONE, F)


@njit(cache=True)
def fq12_eq(W, a, b, F):
    for i in range(12):
        if not fq_eq(W, a + i, b + i, F):
            return False
    return True


@njit(cache=True)
def fq12_conj(W, o, a, F):
    fq6_copy(W, o, a, F)
    fq6_neg(W, o + 6, a + 6, F)


@njit(cache=True)
def fq12_mul(W, sp, o, a, b, F):
    """Karatsuba over Fq6: 3 Fq6 products (w^2 = v)."""
    t0, t1, s1, s2 = sp, sp + 6, sp + 12, sp + 18
    nsp = sp + 24
    fq6_mul(W, nsp, t0, a, b, F)
    fq6_mul(W, nsp, t1, a + 6, b + 6, F)
    fq6_add(W, s1, a, a + 6, F)
    fq6_add(W, s2, b, b + 6, F)
    fq6_mul(W, nsp, s1, s1, s2, F)
    fq6_sub(W, s1, s1, t0, F)
    fq6_sub(W, o + 6, s1, t1, F)
    fq6_mul_by_v(W, nsp, t1, t1, F)
    fq6_add(W, o, t0, t1, F)


@njit(cache=True)
def fq12_sqr(W, sp, o, a, F):
    """(a0 + a1 w)^2 = (a0 + a1)(a0 + v a1) - t - v t + 2t w with t = a0 a1: 2 Fq6 products."""
    t, s1, s2 = sp, sp + 6, sp + 12
    nsp = sp + 18
    fq6_mul(W, nsp, t, a, a + 6, F)
    fq6_add(W, s1, a, a + 6, F)
    fq6_mul_by_v(W, nsp, s2, a + 6, F)
    fq6_add(W, s2, s2, a, F)
    fq6_mul(W, nsp, s1, s1, s2, F)
    fq6_sub(W, s1, s1, t, F)
    fq6_add(W, o + 6, t, t, F)
    fq6_mul_by_v(W, nsp, t, t, F)
    fq6_sub(W, o, s1, t, F)


@njit(cache=True)
def fq12_inv(W, sp, o, a, F):
    """(a0 - a1 w) / (a0^2 - v a1^2)."""
    t0, t1 = sp, sp + 6
    nsp = sp + 12
    fq6_mul(W, nsp, t0, a, a, F)
    fq6_mul(W, nsp, t1, a + 6, a + 6, F)
    fq6_mul_by_v(W, nsp, t1, t1, F)
    fq6_sub(W, t0, t0, t1, F)
    fq6_inv(W, nsp, t0, t0, F)
    fq6_mul(W, nsp, o, a, t0, F)
    fq6_mul(W, nsp, o + 6, a + 6, t0, F)
    fq6_neg(W, o + 6, o + 6, F)


@njit(cache=True)
def fq12_frobenius(W, sp, o, a, k, F):
    """a^(q^k) for k = 1, 2, 3: conjugate each Fq2 slot k times, times its constant."""
    for slot in range(6):
        src = a + 2 * slot
        dst = o + 2 * slot
        if k % 2 == 1:
            fq2_conj(W, sp, src, F)
        else:
            fq2_copy(W, sp, src, F)
        fq2_mul(W, sp + 2, dst, sp, K_FROB + 12 * (k - 1) + 2 * slot, F)


@njit(cache=True)
def _fq4_sqr(W, sp, o0, o1, a, b, F):
    """(a + b s)^2 with s^2 = xi: (a^2 + xi b^2) + ((a + b)^2 - a^2 - b^2) s."""
    t0, t1 = sp, sp + 2
    nsp = sp + 4
    fq2_sqr(W, nsp, t0, a, F)
    fq2_sqr(W, nsp, t1, b, F)
    fq2_add(W, o1, a, b, F)
    fq2_sqr(W, nsp, o1, o1, F)
    fq2_sub(W, o1, o1, t0, F)
    fq2_sub(W, o1, o1, t1, F)
    fq2_mul_xi(W, nsp, t1, t1, F)
    fq2_add(W, o0, t0, t1, F)


@njit(cache=True)
def _cyclotomic_combine(W, o, x, t, sign, F):
    """o = 3t + 2 sign x (sign = +1 or -1), the Granger-Scott update."""
    if sign > 0:
        fq2_add(W, o, t, x, F)
    else:
        fq2_sub(W, o, t, x, F)
    fq2_add(W, o, o, o, F)
    fq2_add(W, o, o, t, F)


@njit(cache=True)
def fq12_cyclotomic_sqr(W, sp, o, a, F):
    """Granger-Scott squaring for elements of the cyclotomic subgroup (after the easy part).

    With s = w^3 (s^2 = xi) an element is A + B w + C w^2, A = g0 + g3 s, B = g1 + g4 s,
    C = g2 + g5 s over Fq4 = Fq2[s], and its square is
    (3A^2 - 2 conj A) + (3 s C^2 + 2 conj B) w + (3 B^2 - 2 conj C) w^2.
    """
    g0, g2, g4, g1, g3, g5 = a, a + 2, a + 4, a + 6, a + 8, a + 10
    A0, A1, B0, B1, C0, C1 = sp, sp + 2, sp + 4, sp + 6, sp + 8, sp + 10
    nsp = sp + 12
    _fq4_sqr(W, nsp, A0, A1, g0, g3, F)
    _fq4_sqr(W, nsp, B0, B1, g1, g4, F)
    _fq4_sqr(W, nsp, C0, C1, g2, g5, F)
    # s C^2 = xi C1 + C0 s
    fq2_mul_xi(W, nsp, C1, C1, F)
    _cyclotomic_combine(W, o, g0, A0, -1, F)  # g0 (c0.a0)
    _cyclotomic_combine(W, o + 8, g3, A1, 1, F)  # g3 (c1.a1)
    _cyclotomic_combine(W, o + 6, g1, C1, 1, F)  # g1 (c1.a0)
    _cyclotomic_combine(W, o + 4, g4, C0, -1, F)  # g4 (c0.a2)
    _cyclotomic_combine(W, o + 2, g2, B0, -1, F)  # g2 (c0.a1)
    _cyclotomic_combine(W, o + 10, g5, B1, 1, F)  # g5 (c1.a2)


@njit(cache=True)
def fq12_cyclotomic_exp(W, sp, o, a, naf, negative, F):
    """a^e for a in the cyclotomic subgroup, e given by its NAF digits (LSB first) and sign."""
    r, a_conj = sp, sp + 12
    nsp = sp + 24
    fq12_conj(W, a_conj, a, F)
    fq12_copy(W, r, a, F)
    for i in range(len(naf) - 2, -1, -1):
        fq12_cyclotomic_sqr(W, nsp, r, r, F)
        if naf[i] == 1:
            fq12_mul(W, nsp, r, r, a, F)
        elif naf[i] == -1:
            fq12_mul(W, nsp, r, r, a_conj, F)
    if negative:
        fq12_conj(W, o, r, F)
    else:
        fq12_copy(W, o, r, F)


@njit(cache=True)
def fq12_mul_line(W, sp, f, la, lb, lc, twist, F):
    """f *= a sparse line, in place, 13 Fq2 products.

    D-type: line = la + lb w + lc w^3, i.e. A = (la, 0, 0), B = (lb, lc, 0) in f0 + f1 w.
    M-type: line = la + lb w^2 + lc w^3, i.e. A = (la, lb, 0), B = (0, lc, 0).
    (f0 + f1 w)(A + B w) = (f0 A + v f1 B) + ((f0 + f1)(A + B) - f0 A - f1 B) w.
    """
    f0A, f1B, s, ab1 = sp, sp + 6, sp + 12, sp + 18
    nsp = sp + 20
    fq6_add(W, s, f, f + 6, F)
    if twist == TWIST_D:
        fq6_mul_by_fq2(W, nsp, f0A, f, la, F)
        fq6_mul_by_01(W, nsp, f1B, f + 6, lb, lc, F)
        fq2_add(W, ab1, la, lb, F)
        fq6_mul_by_01(W, nsp, s, s, ab1, lc, F)
    else:
        fq6_mul_by_01(W, nsp, f0A, f, la, lb, F)
        fq6_mul_by_1(W, nsp, f1B, f + 6, lc, F)
        fq2_add(W, ab1, lb, lc, F)
        fq6_mul_by_01(W, nsp, s, s, la, ab1, F)
    fq6_sub(W, s, s, f0A, F)
    fq6_sub(W, f + 6, s, f1B, F)
    fq6_mul_by_v(W, nsp, f1B, f1B, F)
    fq6_add(W, f, f0A, f1B, F)


# ============================================================================ G2 lines
@njit(cache=True)
def _g2_double_step(W, sp, T, line, F):
    """T = 2T (homogeneous projective on the twist) and the tangent line's (c_y, c_x, c_0).

    Costello-Lange-Naehrig: with A = XY/2, B = Y^2, C = Z^2, E = 3b'C, F = 3E, G = (B+F)/2,
    H = 2YZ: 2T = (A(B - F), G^2 - 3E^2, BH); line = (H, -3X^2, B - E).
    """
    X, Y, Z = T, T + 2, T + 4
    A, B, C, E, Fv, G, H = sp, sp + 2, sp + 4, sp + 6, sp + 8, sp + 10, sp + 12
    nsp = sp + 14
    fq2_mul(W, nsp, A, X, Y, F)
    fq_half(W, A, A, F)
    fq_half(W, A + 1, A + 1, F)
    fq2_sqr(W, nsp, B, Y, F)
    fq2_sqr(W, nsp, C, Z, F)
    fq2_mul(W, nsp, E, C, K_B3, F)
    fq2_add(W, Fv, E, E, F)
    fq2_add(W, Fv, Fv, E, F)
    fq2_add(W, G, B, Fv, F)
    fq_half(W, G, G, F)
    fq_half(W, G + 1, G + 1, F)
    fq2_add(W, H, Y, Z, F)
    fq2_sqr(W, nsp, H, H, F)
    fq2_sub(W, H, H, B, F)
    fq2_sub(W, H, H, C, F)
    # line: c_y = H, c_x = -3 X^2, c_0 = B - E
    fq2_copy(W, line, H, F)
    fq2_sqr(W, nsp, line + 2, X, F)
    fq2_add(W, C, line + 2, line + 2, F)
    fq2_add(W, line + 2, line + 2, C, F)
    fq2_neg(W, line + 2, line + 2, F)
    fq2_sub(W, line + 4, B, E, F)
    # point
    fq2_sub(W, C, B, Fv, F)
    fq2_mul(W, nsp, X, A, C, F)
    fq2_sqr(W, nsp, Y, G, F)
    fq2_sqr(W, nsp, C, E, F)
    fq2_sub(W, Y, Y, C, F)
    fq2_sub(W, Y, Y, C, F)
    fq2_sub(W, Y, Y, C, F)
    fq2_mul(W, nsp, Z, B, H, F)


@njit(cache=True)
def _g2_add_step(W, sp, T, Qx, Qy, line, F):
    """T = T + Q (Q affine) and the line through them: with t = Y - y_Q Z, l = X - x_Q Z,
    line = (l, -t, t x_Q - l y_Q)."""
    X, Y, Z = T, T + 2, T + 4
    th, lm, C, D, E, Fv, G, H = sp, sp + 2, sp + 4, sp + 6, sp + 8, sp + 10, sp + 12, sp + 14
    nsp = sp + 16
    fq2_mul(W, nsp, th, Qy, Z, F)
    fq2_sub(W, th, Y, th, F)
    fq2_mul(W, nsp, lm, Qx, Z, F)
    fq2_sub(W, lm, X, lm, F)
    # line
    fq2_copy(W, line, lm, F)
    fq2_neg(W, line + 2, th, F)
    fq2_mul(W, nsp, C, th, Qx, F)
    fq2_mul(W, nsp, D, lm, Qy, F)
    fq2_sub(W, line + 4, C, D, F)
    # point: C = t^2, D = l^2, E = l D, F = Z C, G = X D, H = E + F - 2G
    fq2_sqr(W, nsp, C, th, F)
    fq2_sqr(W, nsp, D, lm, F)
    fq2_mul(W, nsp, E, lm, D, F)
    fq2_mul(W, nsp, Fv, Z, C, F)
    fq2_mul(W, nsp, G, X, D, F)
    fq2_add(W, H, E, Fv, F)
    fq2_sub(W, H, H, G, F)
    fq2_sub(W, H, H, G, F)
    fq2_mul(W, nsp, X, lm, H, F)
    fq2_sub(W, G, G, H, F)
    fq2_mul(W, nsp, G, th, G, F)
    fq2_mul(W, nsp, Y, Y, E, F)
    fq2_sub(W, Y, G, Y, F)
    fq2_mul(W, nsp, Z, Z, E, F)


@njit(cache=True)
def g2_psi(W, sp, o, a, F):
    """The untwist-Frobenius-twist endomorphism on an affine (or Jacobian x, y) G2 point."""
    fq2_conj(W, sp, a, F)
    fq2_mul(W, sp + 2, o, sp, K_PSI_X, F)
    fq2_conj(W, sp, a + 2, F)
    fq2_mul(W, sp + 2, o + 2, sp, K_PSI_Y, F)


@njit(cache=True)
def num_line_steps(digits, family_bn):
    steps = 0
    for i in range(len(digits) - 1):
        steps += 1 if digits[i] == 0 else 2
    return steps + (2 if family_bn else 0)


@njit(cache=True)
def _prepare_g2_into(W, sp, Q, digits, family_bn, out, F):
    """Line coefficients of the Miller loop for the affine G2 point in rows Q..Q+3."""
    n = len(F[0])
    T, negQ, line = sp, sp + 6, sp + 10
    nsp = sp + 16
    fq2_copy(W, T, Q, F)
    fq2_copy(W, T + 2, Q + 2, F)
    fq2_set_one(W, T + 4, F)
    fq2_copy(W, negQ, Q, F)
    fq2_neg(W, negQ + 2, Q + 2, F)
    step = 0
    for i in range(len(digits) - 2, -1, -1):
        _g2_double_step(W, nsp, T, line, F)
        out[step, :, :] = W[line : line + 6, :n]
        step += 1
        if digits[i] != 0:
            addend = Q if digits[i] == 1 else negQ
            _g2_add_step(W, nsp, T, addend, addend + 2, line, F)
            out[step, :, :] = W[line : line + 6, :n]
            step += 1
    if family_bn:
        # T = [6u+2]Q; add pi(Q), then -pi^2(Q) (only its line is needed).
        Q1, Q2 = nsp, nsp + 4
        fq2_copy(W, negQ, Q, F)
        fq2_copy(W, negQ + 2, Q + 2, F)
        g2_psi(W, nsp + 8, Q1, negQ, F)
        g2_psi(W, nsp + 8, Q2, Q1, F)
        fq2_neg(W, Q2 + 2, Q2 + 2, F)
        _g2_add_step(W, nsp + 8, T, Q1, Q1 + 2, line, F)
        out[step, :, :] = W[line : line + 6, :n]
        step += 1
        _g2_add_step(W, nsp + 8, T, Q2, Q2 + 2, line, F)
        out[step, :, :] = W[line : line + 6, :n]


@njit(cache=True, nogil=True)
def prepare_g2_kernel(K, Q, digits, family_bn, F):
    """Q: (4, N) affine Montgomery (x0, x1, y0, y1) -> (steps, 6, N) line coefficients."""
    n = len(F[0])
    W = np.zeros((NUM_CONST_ROWS + 256, n), np.uint64)
    W[:NUM_CONST_ROWS] = K
    q = NUM_CONST_ROWS
    W[q : q + 4] = Q
    out = np.empty((num_line_steps(digits, family_bn), 6, n), np.uint64)
    _prepare_g2_into(W, q + 4, q, digits, family_bn, out, F)
    return out


# ============================================================================ Miller loop
@njit(cache=True)
def _mul_step_lines(W, sp, f, Ps, coeffs, npairs, step, twist, F):
    """f *= the lines of step `step` of each pair, at that pair's affine G1 point."""
    n = len(F[0])
    px, py, line, la, lb, lc = sp, sp + 1, sp + 2, sp + 8, sp + 10, sp + 12
    nsp = sp + 14
    for j in range(npairs):
        W[px, :n] = Ps[j, 0]
        W[py, :n] = Ps[j, 1]
        W[line : line + 6, :n] = coeffs[j, step]
        if twist == TWIST_D:
            fq2_mul_fq(W, nsp, la, line, py, F)  # c_y y_P
            fq2_mul_fq(W, nsp, lb, line + 2, px, F)  # c_x x_P
            fq12_mul_line(W, nsp, f, la, lb, line + 4, twist, F)
        else:
            fq2_mul_fq(W, nsp, lb, line + 2, px, F)
            fq2_mul_fq(W, nsp, lc, line, py, F)
            fq12_mul_line(W, nsp, f, line + 4, lb, lc, twist, F)


@njit(cache=True)
def _miller_loop(W, sp, f, Ps, coeffs, npairs, digits, family_bn, twist, negative, F):
    """Product of the Miller functions of `npairs` pairs, sharing the squarings."""
    fq12_set_one(W, f, F)
    step = 0
    for i in range(len(digits) - 2, -1, -1):
        if i != len(digits) - 2:
            fq12_sqr(W, sp, f, f, F)
        _mul_step_lines(W, sp, f, Ps, coeffs, npairs, step, twist, F)
        step += 1
        if digits[i] != 0:
            _mul_step_lines(W, sp, f, Ps, coeffs, npairs, step, twist, F)
            step += 1
    if family_bn:
        _mul_step_lines(W, sp, f, Ps, coeffs, npairs, step, twist, F)
        _mul_step_lines(W, sp, f, Ps, coeffs, npairs, step + 1, twist, F)
    if negative:
        fq12_conj(W, f, f, F)


# ============================================================================ final exponentiation
@njit(cache=True)
def _final_exponentiation(W, sp, o, f, u_naf, u_negative, family_bn, F):
    """f^((q^6 - 1)(q^2 + 1) * hard_exponent), the hard exponent as in ``tower.hard_exponent``."""
    a, b, c, d, e, g = sp, sp + 12, sp + 24, sp + 36, sp + 48, sp + 60
    nsp = sp + 72
    # easy part: m = conj(f) / f, then m^(q^2) * m
    fq12_inv(W, nsp, a, f, F)
    fq12_conj(W, b, f, F)
    fq12_mul(W, nsp, a, a, b, F)
    fq12_frobenius(W, nsp, b, a, 2, F)
    fq12_mul(W, nsp, a, a, b, F)  # a = f^((q^6-1)(q^2+1)), cyclotomic from here
    if family_bn:
        fq12_cyclotomic_exp(W, nsp, b, a, u_naf, u_negative, F)  # f^u
        fq12_cyclotomic_sqr(W, nsp, b, b, F)  # f^2u
        fq12_cyclotomic_sqr(W, nsp, c, b, F)  # f^4u
        fq12_mul(W, nsp, c, c, b, F)  # f^6u
        fq12_cyclotomic_exp(W, nsp, d, c, u_naf, u_negative, F)  # f^6u^2
        fq12_cyclotomic_sqr(W, nsp, e, d, F)  # f^12u^2
        fq12_cyclotomic_exp(W, nsp, e, e, u_naf, u_negative, F)  # f^12u^3
        fq12_mul(W, nsp, e, e, d, F)
        fq12_mul(W, nsp, e, e, c, F)  # K = f^(12u^3+6u^2+6u)
        fq12_conj(W, b, b, F)
        fq12_mul(W, nsp, b, b, e, F)  # L = K f^-2u = f^(12u^3+6u^2+4u)
        fq12_mul(W, nsp, d, d, e, F)  # K f^6u^2
        fq12_mul(W, nsp, d, d, a, F)  # N = f^(12u^3+12u^2+6u+1)
        fq12_conj(W, c, a, F)
        fq12_mul(W, nsp, c, c, b, F)  # T = L / f
        fq12_frobenius(W, nsp, g, b, 1, F)
        fq12_mul(W, nsp, d, d, g, F)
        fq12_frobenius(W, nsp, g, e, 2, F)
        fq12_mul(W, nsp, d, d, g, F)
        fq12_frobenius(W, nsp, g, c, 3, F)
        fq12_mul(W, nsp, o, d, g, F)
    else:
        fq12_cyclotomic_exp(W, nsp, b, a, u_naf, u_negative, F)  # f^x
        fq12_conj(W, c, a, F)
        fq12_mul(W, nsp, b, b, c, F)  # t1 = f^(x-1)
        fq12_cyclotomic_exp(W, nsp, c, b, u_naf, u_negative, F)
        fq12_conj(W, b, b, F)
        fq12_mul(W, nsp, b, b, c, F)  # t2 = t1^(x-1) = f^((x-1)^2)
        fq12_cyclotomic_exp(W, nsp, c, b, u_naf, u_negative, F)
        fq12_frobenius(W, nsp, d, b, 1, F)
        fq12_mul(W, nsp, b, c, d, F)  # A = t2^(x+q)
        fq12_cyclotomic_exp(W, nsp, c, b, u_naf, u_negative, F)
        fq12_cyclotomic_exp(W, nsp, c, c, u_naf, u_negative, F)  # A^(x^2)
        fq12_frobenius(W, nsp, d, b, 2, F)
        fq12_mul(W, nsp, c, c, d, F)
        fq12_conj(W, d, b, F)
        fq12_mul(W, nsp, c, c, d, F)  # A^(x^2+q^2-1)
        fq12_cyclotomic_sqr(W, nsp, d, a, F)
        fq12_mul(W, nsp, d, d, a, F)  # f^3
        fq12_mul(W, nsp, o, c, d, F)


# ============================================================================ EC (Jacobian), over Fq (deg 1) or Fq2 (deg 2)
@njit(cache=True)
def ext_mul(W, sp, o, a, b, deg, F):
    if deg == 1:
        fq_mul(W, sp, o, a, b, F)
    else:
        fq2_mul(W, sp, o, a, b, F)


@njit(cache=True)
def ext_sqr(W, sp, o, a, deg, F):
    if deg == 1:
        fq_mul(W, sp, o, a, a, F)
    else:
        fq2_sqr(W, sp, o, a, F)


@njit(cache=True)
def ext_add(W, o, a, b, deg, F):
    for i in range(deg):
        fq_add(W, o + i, a + i, b + i, F)


@njit(cache=True)
def ext_sub(W, o, a, b, deg, F):
    for i in range(deg):
        fq_sub(W, o + i, a + i, b + i, F)


@njit(cache=True)
def ext_neg(W, o, a, deg, F):
    for i in range(deg):
        fq_neg(W, o + i, a + i, F)


@njit(cache=True)
def ext_copy(W, o, a, deg, F):
    for i in range(deg):
        fq_copy(W, o + i, a + i, F)


@njit(cache=True)
def ext_is_zero(W, a, deg, F):
    for i in range(deg):
        if not fq_is_zero(W, a + i, F):
            return False
    return True


@njit(cache=True)
def ext_eq(W, a, b, deg, F):
    for i in range(deg):
        if not fq_eq(W, a + i, b + i, F):
            return False
    return True


@njit(cache=True)
def ext_set_one(W, o, deg, F):
    fq_copy(W, o, K_ONE, F)
    for i in range(1, deg):
        fq_set_zero(W, o + i, F)


@njit(cache=True)
def ext_set_zero(W, o, deg, F):
    for i in range(deg):
        fq_set_zero(W, o + i, F)


@njit(cache=True)
def jac_double(W, sp, o, p, deg, F):
    """dbl-2009-l (a = 0); o may alias p; Z = 0 is the point at infinity."""
    X, Y, Z = p, p + deg, p + 2 * deg
    A, B, C, D, E, Fv = sp, sp + deg, sp + 2 * deg, sp + 3 * deg, sp + 4 * deg, sp + 5 * deg
    nsp = sp + 6 * deg
    ext_sqr(W, nsp, A, X, deg, F)
    ext_sqr(W, nsp, B, Y, deg, F)
    ext_sqr(W, nsp, C, B, deg, F)
    ext_add(W, D, X, B, deg, F)
    ext_sqr(W, nsp, D, D, deg, F)
    ext_sub(W, D, D, A, deg, F)
    ext_sub(W, D, D, C, deg, F)
    ext_add(W, D, D, D, deg, F)
    ext_add(W, E, A, A, deg, F)
    ext_add(W, E, E, A, deg, F)
    ext_sqr(W, nsp, Fv, E, deg, F)
    # Z3 = 2 Y Z (before Y is overwritten)
    ext_mul(W, nsp, o + 2 * deg, Y, Z, deg, F)
    ext_add(W, o + 2 * deg, o + 2 * deg, o + 2 * deg, deg, F)
    # X3 = F - 2D
    ext_sub(W, o, Fv, D, deg, F)
    ext_sub(W, o, o, D, deg, F)
    # Y3 = E (D - X3) - 8C
    ext_sub(W, D, D, o, deg, F)
    ext_mul(W, nsp, D, E, D, deg, F)
    ext_add(W, C, C, C, deg, F)
    ext_add(W, C, C, C, deg, F)
    ext_add(W, C, C, C, deg, F)
    ext_sub(W, o + deg, D, C, deg, F)


@njit(cache=True)
def jac_add_affine(W, sp, o, p, q, deg, F):
    """o = p + q with q affine (madd-2007-bl), handling infinity and p = +-q; o may alias p."""
    X1, Y1, Z1 = p, p + deg, p + 2 * deg
    X2, Y2 = q, q + deg
    if ext_is_zero(W, Z1, deg, F):
        ext_copy(W, o, X2, deg, F)
        ext_copy(W, o + deg, Y2, deg, F)
        ext_set_one(W, o + 2 * deg, deg, F)
        return
    Z1Z1, U2, S2, H, HH = sp, sp + deg, sp + 2 * deg, sp + 3 * deg, sp + 4 * deg
    I, J, R, V = sp + 5 * deg, sp + 6 * deg, sp + 7 * deg, sp + 8 * deg
    nsp = sp + 9 * deg
    ext_sqr(W, nsp, Z1Z1, Z1, deg, F)
    ext_mul(W, nsp, U2, X2, Z1Z1, deg, F)
    ext_mul(W, nsp, S2, Y2, Z1, deg, F)
    ext_mul(W, nsp, S2, S2, Z1Z1, deg, F)
    ext_sub(W, H, U2, X1, deg, F)
    ext_sub(W, R, S2, Y1, deg, F)
    if ext_is_zero(W, H, deg, F):
        if ext_is_zero(W, R, deg, F):
            jac_double(W, nsp, o, p, deg, F)
        else:
            ext_set_zero(W, o + 2 * deg, deg, F)
        return
    ext_add(W, R, R, R, deg, F)
    ext_sqr(W, nsp, HH, H, deg, F)
    ext_add(W, I, HH, HH, deg, F)
    ext_add(W, I, I, I, deg, F)
    ext_mul(W, nsp, J, H, I, deg, F)
    ext_mul(W, nsp, V, X1, I, deg, F)
    # Z3 = (Z1 + H)^2 - Z1Z1 - HH
    ext_add(W, o + 2 * deg, Z1, H, deg, F)
    ext_sqr(W, nsp, o + 2 * deg, o + 2 * deg, deg, F)
    ext_sub(W, o + 2 * deg, o + 2 * deg, Z1Z1, deg, F)
    ext_sub(W, o + 2 * deg, o + 2 * deg, HH, deg, F)
    # Y1 J before Y1 is overwritten
    ext_mul(W, nsp, S2, Y1, J, deg, F)
    ext_add(W, S2, S2, S2, deg, F)
    # X3 = r^2 - J - 2V
    ext_sqr(W, nsp, o, R, deg, F)
    ext_sub(W, o, o, J, deg, F)
    ext_sub(W, o, o, V, deg, F)
    ext_sub(W, o, o, V, deg, F)
    # Y3 = r (V - X3) - 2 Y1 J
    ext_sub(W, V, V, o, deg, F)
    ext_mul(W, nsp, V, R, V, deg, F)
    ext_sub(W, o + deg, V, S2, deg, F)


@njit(cache=True)
def jac_add(W, sp, o, p, q, deg, F):
    """o = p + q, both Jacobian (add-2007-bl), handling infinity and p = +-q; o may alias p or q."""
    X1, Y1, Z1 = p, p + deg, p + 2 * deg
    X2, Y2, Z2 = q, q + deg, q + 2 * deg
    if ext_is_zero(W, Z2, deg, F):
        if o != p:
            for k in range(3):
                ext_copy(W, o + k * deg, p + k * deg, deg, F)
        return
    if ext_is_zero(W, Z1, deg, F):
        for k in range(3):
            ext_copy(W, o + k * deg, q + k * deg, deg, F)
        return
    Z1Z1, Z2Z2, U1, U2, S1, S2 = sp, sp + deg, sp + 2 * deg, sp + 3 * deg, sp + 4 * deg, sp + 5 * deg
    H, I, J, R, V = sp + 6 * deg, sp + 7 * deg, sp + 8 * deg, sp + 9 * deg, sp + 10 * deg
    nsp = sp + 11 * deg
    ext_sqr(W, nsp, Z1Z1, Z1, deg, F)
    ext_sqr(W, nsp, Z2Z2, Z2, deg, F)
    ext_mul(W, nsp, U1, X1, Z2Z2, deg, F)
    ext_mul(W, nsp, U2, X2, Z1Z1, deg, F)
    ext_mul(W, nsp, S1, Y1, Z2, deg, F)
    ext_mul(W, nsp, S1, S1, Z2Z2, deg, F)
    ext_mul(W, nsp, S2, Y2, Z1, deg, F)
    ext_mul(W, nsp, S2, S2, Z1Z1, deg, F)
    ext_sub(W, H, U2, U1, deg, F)
    ext_sub(W, R, S2, S1, deg, F)
    if ext_is_zero(W, H, deg, F):
        if ext_is_zero(W, R, deg, F):
            jac_double(W, nsp, o, p, deg, F)
        else:
            ext_set_zero(W, o + 2 * deg, deg, F)
        return
    ext_add(W, R, R, R, deg, F)
    ext_add(W, I, H, H, deg, F)
    ext_sqr(W, nsp, I, I, deg, F)
    ext_mul(W, nsp, J, H, I, deg, F)
    ext_mul(W, nsp, V, U1, I, deg, F)
    # Z3 = ((Z1 + Z2)^2 - Z1Z1 - Z2Z2) H
    ext_add(W, U2, Z1, Z2, deg, F)
    ext_sqr(W, nsp, U2, U2, deg, F)
    ext_sub(W, U2, U2, Z1Z1, deg, F)
    ext_sub(W, U2, U2, Z2Z2, deg, F)
    ext_mul(W, nsp, o + 2 * deg, U2, H, deg, F)
    ext_mul(W, nsp, S1, S1, J, deg, F)
    ext_add(W, S1, S1, S1, deg, F)
    ext_sqr(W, nsp, o, R, deg, F)
    ext_sub(W, o, o, J, deg, F)
    ext_sub(W, o, o, V, deg, F)
    ext_sub(W, o, o, V, deg, F)
    ext_sub(W, V, V, o, deg, F)
    ext_mul(W, nsp, V, R, V, deg, F)
    ext_sub(W, o + deg, V, S1, deg, F)


@njit(cache=True)
def jac_eq_affine(W, sp, p, q, deg, F):
    """Jacobian p equals affine q: X = x Z^2 and Y = y Z^3."""
    if ext_is_zero(W, p + 2 * deg, deg, F):
        return False
    zz, t = sp, sp + deg
    nsp = sp + 2 * deg
    ext_sqr(W, nsp, zz, p + 2 * deg, deg, F)
    ext_mul(W, nsp, t, q, zz, deg, F)
    if not ext_eq(W, t, p, deg, F):
        return False
    ext_mul(W, nsp, zz, zz, p + 2 * deg, deg, F)
    ext_mul(W, nsp, t, q + deg, zz, deg, F)
    return ext_eq(W, t, p + deg, deg, F)


@njit(cache=True)
def jac_mul_naf(W, sp, o, q, naf, deg, F):
    """o = [e] q for affine q and e > 0 given by its NAF (LSB first); result Jacobian."""
    negq = sp
    nsp = sp + 2 * deg
    ext_copy(W, negq, q, deg, F)
    ext_neg(W, negq + deg, q + deg, deg, F)
    ext_copy(W, o, q, deg, F)
    ext_copy(W, o + deg, q + deg, deg, F)
    ext_set_one(W, o + 2 * deg, deg, F)
    for i in range(len(naf) - 2, -1, -1):
        jac_double(W, nsp, o, o, deg, F)
        if naf[i] == 1:
            jac_add_affine(W, nsp, o, o, q, deg, F)
        elif naf[i] == -1:
            jac_add_affine(W, nsp, o, o, negq, deg, F)


@njit(cache=True)
def jac_mul_naf_jacobian(W, sp, o, p, naf, deg, F):
    """o = [e] p for a Jacobian p (full additions, so no inversion to make p affine)."""
    base, negbase = sp, sp + 3 * deg
    nsp = sp + 6 * deg
    for k in range(3):
        ext_copy(W, base + k * deg, p + k * deg, deg, F)
        ext_copy(W, negbase + k * deg, p + k * deg, deg, F)
    ext_neg(W, negbase + deg, negbase + deg, deg, F)
    for k in range(3):
        ext_copy(W, o + k * deg, base + k * deg, deg, F)
    for i in range(len(naf) - 2, -1, -1):
        jac_double(W, nsp, o, o, deg, F)
        if naf[i] == 1:
            jac_add(W, nsp, o, o, base, deg, F)
        elif naf[i] == -1:
            jac_add(W, nsp, o, o, negbase, deg, F)


@njit(cache=True)
def jac_eq(W, sp, p, q, deg, F):
    """Two Jacobian points are equal: X1 Z2^2 = X2 Z1^2 and Y1 Z2^3 = Y2 Z1^3 (or both infinity)."""
    p_inf = ext_is_zero(W, p + 2 * deg, deg, F)
    q_inf = ext_is_zero(W, q + 2 * deg, deg, F)
    if p_inf or q_inf:
        return p_inf and q_inf
    z1, z2, t1, t2 = sp, sp + deg, sp + 2 * deg, sp + 3 * deg
    nsp = sp + 4 * deg
    ext_sqr(W, nsp, z1, p + 2 * deg, deg, F)
    ext_sqr(W, nsp, z2, q + 2 * deg, deg, F)
    ext_mul(W, nsp, t1, p, z2, deg, F)
    ext_mul(W, nsp, t2, q, z1, deg, F)
    if not ext_eq(W, t1, t2, deg, F):
        return False
    ext_mul(W, nsp, z1, z1, p + 2 * deg, deg, F)
    ext_mul(W, nsp, z2, z2, q + 2 * deg, deg, F)
    ext_mul(W, nsp, t1, p + deg, z2, deg, F)
    ext_mul(W, nsp, t2, q + deg, z1, deg, F)
    return ext_eq(W, t1, t2, deg, F)


@njit(cache=True)
def jac_to_affine(W, sp, o, p, deg, F):
    """Affine (x, y) of a Jacobian point into o; returns False for infinity."""
    if ext_is_zero(W, p + 2 * deg, deg, F):
        return False
    zi, zi2 = sp, sp + deg
    nsp = sp + 2 * deg
    if deg == 1:
        fq_inv(W, nsp, zi, p + 2, F)
    else:
        fq2_inv(W, nsp, zi, p + 4, F)
    ext_sqr(W, nsp, zi2, zi, deg, F)
    ext_mul(W, nsp, o, p, zi2, deg, F)
    ext_mul(W, nsp, zi2, zi2, zi, deg, F)
    ext_mul(W, nsp, o + deg, p + deg, zi2, deg, F)
    return True


# ============================================================================ subgroup checks
@njit(cache=True, nogil=True)
def g1_subgroup_kernel(K, P, x_naf, F):
    """BLS12 G1 membership (Bowe): (beta x, y) = [-x^2] P, i.e. [x^2] P = (beta x, -y)."""
    n = len(F[0])
    W = np.zeros((NUM_CONST_ROWS + 160, n), np.uint64)
    W[:NUM_CONST_ROWS] = K
    p, t, t2, expect = NUM_CONST_ROWS, NUM_CONST_ROWS + 2, NUM_CONST_ROWS + 5, NUM_CONST_ROWS + 8
    sp = NUM_CONST_ROWS + 10
    W[p : p + 2] = P
    jac_mul_naf(W, sp, t, p, x_naf, 1, F)
    jac_mul_naf_jacobian(W, sp, t2, t, x_naf, 1, F)  # [x^2] P (the sign of x cancels)
    fq_mul(W, sp, expect, p, K_BETA, F)
    fq_neg(W, expect + 1, p + 1, F)
    return jac_eq_affine(W, sp, t2, expect, 1, F)


@njit(cache=True, nogil=True)
def g2_subgroup_kernel(K, Q, u_naf, family_bn, F):
    """G2 membership by the endomorphism psi (eigenvalue q mod r on G2).

    BLS12 (Scott): psi(Q) = [x] Q. BN (El Housni-Guillevic-Piellard):
    [u+1] Q + psi([u] Q) + psi^2([u] Q) = psi^3([2u] Q).
    """
    n = len(F[0])
    W = np.zeros((NUM_CONST_ROWS + 256, n), np.uint64)
    W[:NUM_CONST_ROWS] = K
    q = NUM_CONST_ROWS
    uq, lhs, rhs, tmp, aff = q + 4, q + 10, q + 16, q + 22, q + 28
    sp = q + 32
    W[q : q + 4] = Q
    jac_mul_naf(W, sp, uq, q, u_naf, 2, F)
    if not family_bn:
        # psi(Q) = [x] Q = -[|x|] Q  (x < 0)
        g2_psi(W, sp, aff, q, F)
        fq2_neg(W, uq + 2, uq + 2, F)
        return jac_eq_affine(W, sp, uq, aff, 2, F)
    # lhs = [u] Q + Q + psi([u] Q) + psi^2([u] Q); psi acts on Jacobian (X, Y) with Z conjugated.
    jac_add_affine(W, sp, lhs, uq, q, 2, F)
    g2_psi(W, sp, tmp, uq, F)
    fq2_conj(W, tmp + 4, uq + 4, F)
    jac_add(W, sp, lhs, lhs, tmp, 2, F)
    g2_psi(W, sp, tmp, tmp, F)
    fq2_conj(W, tmp + 4, tmp + 4, F)
    jac_add(W, sp, lhs, lhs, tmp, 2, F)
    # rhs = psi^3([2u] Q)
    jac_double(W, sp, rhs, uq, 2, F)
    for _ in range(3):
        g2_psi(W, sp, rhs, rhs, F)
        fq2_conj(W, rhs + 4, rhs + 4, F)
    return jac_eq(W, sp, lhs, rhs, 2, F)


# ============================================================================ G1 MSM (for the verifier's public-input combination)
@njit(cache=True)
def _scalar_window(scalars, i, start, width):
    """Bits [start, start + width) of scalar i (rows of 64-bit limbs, standard form)."""
    limb = start >> 6
    shift = start & 63
    v = scalars[i, limb] >> np.uint64(shift)
    if shift + width > 64 and limb + 1 < scalars.shape[1]:
        v |= scalars[i, limb + 1] << np.uint64(64 - shift)
    return np.int64(v & np.uint64((1 << width) - 1))


@njit(cache=True)
def _g1_msm_into(W, sp, acc, points, infinity, scalars, nbits, window, F):
    """acc = sum scalars[i] * points[i] (affine points, Jacobian result).

    window == 1 is Straus's method: one doubling per bit and a mixed addition per set bit.
    Otherwise Pippenger: per window, mixed additions into 2^window - 1 Jacobian buckets,
    summed by running sums.
    """
    n = len(F[0])
    fq_set_zero(W, acc + 2, F)
    if window == 1:
        pt = sp
        for bit in range(nbits - 1, -1, -1):
            jac_double(W, sp + 2, acc, acc, 1, F)
            for i in range(points.shape[0]):
                if not infinity[i] and _scalar_window(scalars, i, bit, 1) != 0:
                    W[pt, :n] = points[i, 0]
                    W[pt + 1, :n] = points[i, 1]
                    jac_add_affine(W, sp + 2, acc, acc, pt, 1, F)
        return
    nbuckets = (1 << window) - 1
    buckets = sp
    running, pt = sp + 3 * nbuckets, sp + 3 * nbuckets + 3
    nsp = pt + 2
    nwin = (nbits + window - 1) // window
    for w in range(nwin - 1, -1, -1):
        for _ in range(window):
            jac_double(W, nsp, acc, acc, 1, F)
        for b in range(nbuckets):
            fq_set_zero(W, buckets + 3 * b + 2, F)
        for i in range(points.shape[0]):
            if infinity[i]:
                continue
            d = _scalar_window(scalars, i, w * window, window)
            if d != 0:
                W[pt, :n] = points[i, 0]
                W[pt + 1, :n] = points[i, 1]
                jac_add_affine(W, nsp, buckets + 3 * (d - 1), buckets + 3 * (d - 1), pt, 1, F)
        # sum_d d * bucket_d by running sums from the top bucket down
        fq_set_zero(W, running + 2, F)
        for b in range(nbuckets - 1, -1, -1):
            jac_add(W, nsp, running, running, buckets + 3 * b, 1, F)
            jac_add(W, nsp, acc, acc, running, 1, F)


def msm_window(n_points: int, nbits: int) -> int:
    """The window with the fewest Fq products, counting ~7 per doubling, ~11 per mixed and ~16
    per full addition: Straus (window 1) for few points, Pippenger buckets for many."""
    if nbits == 0:
        return 1

    def cost(c: int) -> int:
        if c == 1:
            return nbits * (7 + 11 * n_points // 2)
        return -(-nbits // c) * (7 * c + 11 * n_points + 16 * 2 * ((1 << c) - 1))

    return min(range(1, 13), key=cost)


@njit(cache=True, nogil=True)
def g1_msm_kernel(K, points, infinity, scalars, nbits, window, F):
    """MSM -> (2, N) affine Montgomery and an infinity flag."""
    n = len(F[0])
    W = np.zeros((NUM_CONST_ROWS + 3 * (1 << window) + 128, n), np.uint64)
    W[:NUM_CONST_ROWS] = K
    acc = NUM_CONST_ROWS
    out = acc + 3
    _g1_msm_into(W, out + 2, acc, points, infinity, scalars, nbits, window, F)
    finite = jac_to_affine(W, out + 2, out, acc, 1, F)
    return W[out : out + 2, :n].copy(), not finite


# ============================================================================ top-level pairing kernels
@njit(cache=True, nogil=True)
def miller_loop_kernel(K, Ps, coeffs, digits, family_bn, twist, negative, F):
    n = len(F[0])
    W = np.zeros((NUM_CONST_ROWS + 512, n), np.uint64)
    W[:NUM_CONST_ROWS] = K
    f = NUM_CONST_ROWS
    _miller_loop(W, f + 12, f, Ps, coeffs, Ps.shape[0], digits, family_bn, twist, negative, F)
    return W[f : f + 12, :n].copy()


@njit(cache=True, nogil=True)
def final_exponentiation_kernel(K, f_in, u_naf, u_negative, family_bn, F):
    n = len(F[0])
    W = np.zeros((NUM_CONST_ROWS + 512, n), np.uint64)
    W[:NUM_CONST_ROWS] = K
    f = NUM_CONST_ROWS
    W[f : f + 12] = f_in
    _final_exponentiation(W, f + 24, f + 12, f, u_naf, u_negative, family_bn, F)
    return W[f + 12 : f + 24, :n].copy()


@njit(cache=True, nogil=True)
def groth16_kernel(K, ic, ic_infinity, scalars, nbits, window, neg_a, b2, c1, ab_live, c_live, fixed_coeffs, target, digits, u_naf, family_bn, twist, negative, F):
    """e(-A, B) e(L, gamma) e(C, delta) == target (= 1 / e(alpha, beta)), one Miller loop.

    L = ic[0] + sum scalars[i] ic[i+1] is computed here; `fixed_coeffs` holds the prepared
    lines of gamma and delta; B's lines are prepared on the fly. neg_a, c1: (2, N) affine,
    b2: (4, N) affine; a pair whose `*_live` flag is False (a point at infinity) contributes 1.
    """
    n = len(F[0])
    W = np.zeros((NUM_CONST_ROWS + 3 * (1 << window) + 512, n), np.uint64)
    W[:NUM_CONST_ROWS] = K
    base = NUM_CONST_ROWS
    acc, l_aff, bq, f, res = base, base + 3, base + 5, base + 9, base + 21
    sp = base + 33
    # L
    _g1_msm_into(W, sp, acc, ic[1:], ic_infinity[1:], scalars, nbits, window, F)
    if not ic_infinity[0]:
        W[l_aff, :n] = ic[0, 0]
        W[l_aff + 1, :n] = ic[0, 1]
        jac_add_affine(W, sp, acc, acc, l_aff, 1, F)
    l_live = jac_to_affine(W, sp, l_aff, acc, 1, F)
    npairs = int(ab_live) + int(c_live) + int(l_live)
    steps = fixed_coeffs.shape[1]
    Ps = np.empty((npairs, 2, n), np.uint64)
    coeffs = np.empty((npairs, steps, 6, n), np.uint64)
    k = 0
    if ab_live:
        Ps[k] = neg_a
        W[bq : bq + 4] = b2
        _prepare_g2_into(W, sp, bq, digits, family_bn, coeffs[k], F)
        k += 1
    if l_live:
        Ps[k, 0] = W[l_aff, :n]
        Ps[k, 1] = W[l_aff + 1, :n]
        coeffs[k] = fixed_coeffs[0]
        k += 1
    if c_live:
        Ps[k] = c1
        coeffs[k] = fixed_coeffs[1]
    _miller_loop(W, sp, f, Ps, coeffs, npairs, digits, family_bn, twist, negative, F)
    _final_exponentiation(W, sp, res, f, u_naf, negative, family_bn, F)
    W[f : f + 12] = target
    return fq12_eq(W, res, f, F)


# ============================================================================ Python side
@dataclass(frozen=True, eq=False)
class PairingEngine:
    """Per-curve constants and conversions around the numba kernels."""

    curve: Curve
    tower: Tower = field(init=False, repr=False)
    F: tuple = field(init=False, repr=False)
    K: np.ndarray = field(init=False, repr=False)
    loop_digits: np.ndarray = field(init=False, repr=False)  # NAF of the Miller loop scalar
    param_naf: np.ndarray = field(init=False, repr=False)  # NAF of |u| or |x|
    family_bn: bool = field(init=False)
    twist_code: int = field(init=False)
    line_steps: int = field(init=False)

    def __post_init__(self) -> None:
        c = self.curve
        T = tower(c)
        n = c.Fq.limbs64
        q = c.q
        set_ = object.__setattr__
        set_(self, "tower", T)
        P = tuple(np.uint64((q >> (64 * j)) & MASK64) for j in range(n))
        pinv = np.uint64((-pow(q, -1, 1 << 64)) % (1 << 64))
        if T.xi[1] != 1:
            raise ValueError(f"{c.name}: the Fq6 non-residue must be k + u, got {T.xi}")
        set_(self, "F", (P, pinv, np.int64(T.xi[0])))
        F2 = c.Fq2
        b3 = F2.mul_scalar(c.G2.b, 3)
        psi_x, psi_y = T.frobenius_coeffs[1][1], T.frobenius_coeffs[1][4]  # xi^((q-1)/3), xi^((q-1)/2)
        if c.twist == "M":
            psi_x, psi_y = F2.inv(psi_x), F2.inv(psi_y)
        rows = [1]
        for k in (1, 2, 3):
            for coeff in T.frobenius_coeffs[k]:
                rows.extend(coeff)
        rows += [*b3, *psi_x, *psi_y, self._g1_beta()]
        assert len(rows) == NUM_CONST_ROWS
        set_(self, "K", np.stack([self.to_mont(v) for v in rows]))
        set_(self, "loop_digits", np.array(naf(miller_loop_scalar(c)), np.int8))
        set_(self, "param_naf", np.array(naf(abs(c.param)), np.int8))
        set_(self, "family_bn", c.family == "bn")
        set_(self, "twist_code", TWIST_D if c.twist == "D" else TWIST_M)
        set_(self, "line_steps", int(num_line_steps(self.loop_digits, self.family_bn)))

    def _g1_beta(self) -> int:
        """The primitive cube root beta of unity in Fq with (beta x, y) = [-x^2] P on G1 (BLS12 only)."""
        c = self.curve
        if c.family == "bn":
            return 0
        q = c.q
        g = 2
        while pow(g, (q - 1) // 3, q) == 1:
            g += 1
        beta = pow(g, (q - 1) // 3, q)
        G = c.G1.generator
        target = c.G1.mul(G, -(c.param**2))
        return beta if target == (beta * G[0] % q, G[1]) else beta * beta % q

    # conversions -------------------------------------------------------------------
    def to_mont(self, x: int) -> np.ndarray:
        m = self.curve.Fq.to_mont(x)
        return np.array([(m >> (64 * j)) & MASK64 for j in range(self.curve.Fq.limbs64)], np.uint64)

    def from_mont(self, limbs: np.ndarray) -> int:
        return self.curve.Fq.from_mont(sum(int(v) << (64 * j) for j, v in enumerate(limbs)))

    def g1_limbs(self, P: Point) -> np.ndarray:
        return np.stack([self.to_mont(P[0]), self.to_mont(P[1])])

    def g2_limbs(self, Q: Point) -> np.ndarray:
        return np.stack([self.to_mont(v) for v in (*Q[0], *Q[1])])

    def fq12_limbs(self, a: Fq12E) -> np.ndarray:
        return np.stack([self.to_mont(x) for slot in self.tower.slots(a) for x in slot])

    def fq12_from_limbs(self, rows: np.ndarray) -> Fq12E:
        v = [self.from_mont(r) for r in rows]
        return self.tower.from_slots([(v[2 * i], v[2 * i + 1]) for i in range(6)])

    # pairing -------------------------------------------------------------------------
    def prepare_g2(self, Q: Point) -> np.ndarray:
        """The Miller loop's line coefficients for a fixed G2 point (affine, not infinity)."""
        return prepare_g2_kernel(self.K, self.g2_limbs(Q), self.loop_digits, self.family_bn, self.F)

    def miller_loop(self, pairs: list[tuple[Point, Point]]) -> Fq12E:
        """Product of the Miller loops of (P in G1, Q in G2) pairs; infinity pairs contribute 1."""
        live = [(P, Q) for P, Q in pairs if P is not None and Q is not None]
        n = self.curve.Fq.limbs64
        Ps = np.zeros((len(live), 2, n), np.uint64)
        coeffs = np.zeros((len(live), self.line_steps, 6, n), np.uint64)
        for i, (P, Q) in enumerate(live):
            Ps[i] = self.g1_limbs(P)
            coeffs[i] = self.prepare_g2(Q)
        f = miller_loop_kernel(self.K, Ps, coeffs, self.loop_digits, self.family_bn, self.twist_code, self.curve.param < 0, self.F)
        return self.fq12_from_limbs(f)

    def final_exponentiation(self, f: Fq12E) -> Fq12E:
        out = final_exponentiation_kernel(self.K, self.fq12_limbs(f), self.param_naf, self.curve.param < 0, self.family_bn, self.F)
        return self.fq12_from_limbs(out)

    def pairing(self, P: Point, Q: Point) -> Fq12E:
        return self.final_exponentiation(self.miller_loop([(P, Q)]))

    def multi_pairing(self, pairs: list[tuple[Point, Point]]) -> Fq12E:
        """prod e(P_i, Q_i) with one shared Miller loop and one final exponentiation."""
        return self.final_exponentiation(self.miller_loop(pairs))

    # group checks and MSM ----------------------------------------------------------------
    def g1_in_subgroup(self, P: Point) -> bool:
        """P (on the curve) lies in the order-r subgroup; BN254's G1 has cofactor 1."""
        if P is None or self.family_bn:
            return True
        return bool(g1_subgroup_kernel(self.K, self.g1_limbs(P), self.param_naf, self.F))

    def g2_in_subgroup(self, Q: Point) -> bool:
        """Q (on the twist) lies in the order-r subgroup."""
        if Q is None:
            return True
        return bool(g2_subgroup_kernel(self.K, self.g2_limbs(Q), self.param_naf, self.family_bn, self.F))

    def g1_msm(self, points: list[Point], scalars: list[int]) -> Point:
        n = self.curve.Fq.limbs64
        arr = np.zeros((len(points), 2, n), np.uint64)
        inf = np.zeros(len(points), np.bool_)
        for i, P in enumerate(points):
            if P is None:
                inf[i] = True
            else:
                arr[i] = self.g1_limbs(P)
        sc = scalar_limbs(scalars)
        nbits = max((s.bit_length() for s in scalars), default=0)
        xy, is_inf = g1_msm_kernel(self.K, arr, inf, sc, nbits, msm_window(len(points), nbits), self.F)
        return None if is_inf else (self.from_mont(xy[0]), self.from_mont(xy[1]))


def scalar_limbs(scalars: list[int]) -> np.ndarray:
    """Scalars in [0, 2^256) as rows of four 64-bit limbs (standard form)."""
    raw = b"".join(s.to_bytes(32, "little") for s in scalars)
    return np.frombuffer(raw, "<u8").reshape(len(scalars), 4).copy()


_engines: dict[str, PairingEngine] = {}


def engine(curve: Curve) -> PairingEngine:
    """The curve's engine, built once (a dict by name: hashing a Curve costs more than a verify's Python work)."""
    found = _engines.get(curve.name)
    if found is None:
        found = _engines[curve.name] = PairingEngine(curve)
    return found
