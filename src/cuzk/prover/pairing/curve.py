"""G1 and G2 for the pairing: a curve's kernel constants, the endomorphism psi and subgroup checks.

Points are the CPU backend's (``backends/cpu/ec.py``, whose formulas these use): affine
``(2, ...)`` and Jacobian ``(3, ...)`` arrays of Fq rows (G1) or Fq2 blocks (G2, on the
sextic twist), in Montgomery form.

Subgroup checks use endomorphisms instead of multiplying by r: BLS12 G1, Bowe's
(beta x, y) = [-x^2] P; BLS12 G2, Scott's psi(Q) = [x] Q; BN G2, El Housni, Guillevic and
Piellard's [u+1] Q + psi([u] Q) + psi^2([u] Q) = psi^3([2u] Q). BN254's G1 has cofactor 1.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ...backends.cpu.ec import jac_add, jac_add_affine, jac_double, jac_eq, jac_from_affine, jac_mul_naf
from ...backends.cpu.field import fe_mul, fe_neg
from .tower import TowerConsts, fq2_conj


class CurveConsts(NamedTuple):
    """A curve's constants in the forms the pairing kernels take (built by ``engine.PairingEngine``)."""

    tower: TowerConsts
    b3: np.ndarray  # (2, N): 3 b', the twist's coefficient times 3
    psi: np.ndarray  # (2, 2, N): psi(x, y) = (conj(x) psi[0], conj(y) psi[1])
    beta: np.ndarray  # (N,): BLS12 G1's cube root of unity with (beta x, y) = [-x^2] P (zero on BN)
    loop_naf: np.ndarray  # int8 NAF of the Miller loop's scalar (6u + 2 or |x|), least significant first
    param_naf: np.ndarray  # int8 NAF of |u| or |x|
    param_sq_naf: np.ndarray  # int8 NAF of x^2 (BLS12 G1's check)
    param_negative: bool
    family_bn: bool
    twist_m: bool  # M-type twist (BLS12-381) rather than D-type (BN254)


@njit(cache=True)
def g2_psi(P, out, cc):
    """The untwist-Frobenius-twist endomorphism psi on an affine (2, 2, N) or Jacobian (3, 2, N) G2 point.

    On Jacobian coordinates Z is conjugated too: conjugation commutes with the division by Z^2, Z^3.
    """
    fc = cc.tower.fc
    for i in range(2):
        fq2_conj(P[i], out[i], fc)
        fe_mul(out[i], cc.psi[i], out[i], fc)
    if P.shape[0] == 3:
        fq2_conj(P[2], out[2], fc)


@njit(cache=True, nogil=True)
def g1_subgroup_kernel(A, cc):
    """BLS12 G1 membership of the affine A (Bowe): [x^2] A = (beta x, -y)."""
    fc = cc.tower.fc
    points = np.empty((2, 3, len(fc.p)), np.uint64)
    lhs, rhs = points[0], points[1]
    jac_mul_naf(A, cc.param_sq_naf, lhs, fc)
    jac_from_affine(A, rhs, fc)
    fe_mul(A[0], cc.beta, rhs[0], fc)
    fe_neg(A[1], rhs[1], fc)
    return jac_eq(lhs, rhs, fc)


@njit(cache=True, nogil=True)
def g2_subgroup_kernel(Q, cc):
    """G2 membership of the affine Q by psi, whose eigenvalue on G2 is q mod r."""
    fc = cc.tower.fc
    points = np.empty((4, 3, 2, len(fc.p)), np.uint64)
    uq, lhs, rhs, t = points[0], points[1], points[2], points[3]
    jac_mul_naf(Q, cc.param_naf, uq, fc)
    if not cc.family_bn:
        # psi(Q) = [x] Q = -[|x|] Q  (x < 0)
        fe_neg(uq[1], uq[1], fc)
        jac_from_affine(Q, t, fc)
        g2_psi(t, t, cc)
        return jac_eq(uq, t, fc)
    # [u] Q + Q + psi([u] Q) + psi^2([u] Q) = psi^3([2u] Q)
    jac_add_affine(uq, Q, lhs, fc)
    g2_psi(uq, t, cc)
    jac_add(lhs, t, lhs, fc)
    g2_psi(t, t, cc)
    jac_add(lhs, t, lhs, fc)
    jac_double(uq, rhs, fc)
    for _ in range(3):
        g2_psi(rhs, rhs, cc)
    return jac_eq(lhs, rhs, fc)
