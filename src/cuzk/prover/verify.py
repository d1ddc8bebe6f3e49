"""Groth16 verification as snarkjs checks it, on the numba pairing.

A proof (A, B, C) is valid for public signals s when

    e(-A, B) * e(L, gamma) * e(C, delta) * e(alpha, beta) == 1,   L = IC[0] + sum s_i IC[i+1].

Everything that depends only on the key is done once by :func:`prepare_vkey`: point checks,
the IC points in limb form, the Miller-loop lines of gamma and delta, and 1/e(alpha, beta).
That last value is recomputed from alpha and beta, not taken from ``vk_alphabeta_12``
(snarkjs's verifier ignores it too, so a key with a stale value verifies the same way).
Each :func:`verify` then computes L with the CPU backend's MSM, B's lines, and one Miller
loop shared by the three pairs with one final exponentiation.

A key that checks a single proof (a one-shot prove's self-check, ``prepare_zkey(zkey,
single_proof=True)``) keeps (alpha, beta) as a fourth pair of that proof's Miller loop
instead: e(alpha, beta) alone costs a Miller loop and a final exponentiation of its own,
and loading those two kernels from numba's cache costs a fresh process ~45 ms more.

Malformed input (wrong curve, wrong signal count, a signal >= r, a point off its curve or
outside the order-r subgroup) raises :class:`VerifyInputError`; a well-formed proof that
does not satisfy the equation gives False.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from ..ff.field import as_u64
from ..backends.cpu.msm import msm_rows
from ..curves import Curve
from ..curves.ec import Point
from ..formats.binfile import section_label
from ..formats.errors import FormatError
from ..formats.json_io import VerificationKey
from ..formats.limbs import ints_to_limbs
from ..formats.zkey import GROTH16_HEADER, IC, SECTION_NAMES, ZKey
from .pairing import PairingEngine, engine

Fq12Json = list[list[list[int]]]


class VerifyInputError(ValueError):
    """The key, the public signals or the proof is malformed (not merely a false proof)."""


@dataclass(frozen=True, eq=False)
class PreparedVerifyingKey:
    """A checked verification key with its proof-independent pairing work done."""

    curve: Curve
    n_public: int
    ic: np.ndarray = field(repr=False)  # (n_public + 1, 2, Lq) affine Montgomery limbs, all-zero for infinity
    lines: np.ndarray = field(repr=False)  # (2, steps, 3, 2, Lq): Miller-loop lines of gamma, delta (and beta, below)
    target: np.ndarray = field(repr=False)  # (2, 3, 2, Lq): 1 / e(alpha, beta), or one when (alpha, beta) is paired
    # For a single proof: alpha's limbs (2, Lq), paired with beta's lines (the last of ``lines``) in the proof's product.
    alpha: np.ndarray | None = field(default=None, repr=False)


def alphabeta(curve: Curve, alpha1: Point, beta2: Point) -> Fq12Json:
    """e(alpha1, beta2) as snarkjs writes ``vk_alphabeta_12``: [[[c, c] x3] x2] ints (decimal in JSON)."""
    e = engine(curve).pairing(alpha1, beta2)
    return [[list(c) for c in half] for half in e]


def vkey_from_zkey(zkey: ZKey) -> VerificationKey:
    """The verification key snarkjs's ``zkey export verificationkey`` would write (needs the IC points), its points
    checked as :func:`prepare_vkey` checks them: a key no verifier takes (a point at infinity or outside its
    subgroup; the reader checks only that they are on their curves) is the zkey's FormatError, not exported."""
    _check_key_points(zkey, GROTH16_HEADER, [(zkey.alpha1, 1, "alpha1"), (zkey.beta2, 2, "beta2"),
                                             (zkey.gamma2, 2, "gamma2"), (zkey.delta2, 2, "delta2")], allow_infinity=False)
    vkey = _vkey_from_zkey(zkey, alphabeta(zkey.curve, zkey.alpha1, zkey.beta2))
    _check_key_points(zkey, IC, [(P, 1, f"IC[{i}]") for i, P in enumerate(vkey.ic)])
    return vkey


def _check_key_points(zkey: ZKey, section: int, points: list[tuple[Point, int, str]], allow_infinity: bool = True) -> None:
    """:func:`_check_point` on points of ``zkey``'s ``section``: a failure is the key file's FormatError."""
    E = engine(zkey.curve)
    try:
        for P, group, what in points:
            _check_point(E, P, group, what, allow_infinity)
    except VerifyInputError as exc:
        raise FormatError(zkey.path, str(exc), section_label(section, SECTION_NAMES)) from None


def _vkey_from_zkey(zkey: ZKey, alphabeta_12: Fq12Json) -> VerificationKey:
    return VerificationKey(curve=zkey.curve, n_public=zkey.n_public, alpha1=zkey.alpha1, beta2=zkey.beta2, gamma2=zkey.gamma2,
                           delta2=zkey.delta2, alphabeta_12=alphabeta_12, ic=tuple(zkey.ic_points()))


def prepare_zkey(zkey: ZKey, *, single_proof: bool = False) -> PreparedVerifyingKey:
    """``prepare_vkey(vkey_from_zkey(zkey))`` without computing e(alpha, beta) twice; ``single_proof``: for checking
    one proof only, with (alpha, beta) paired in its product rather than e(alpha, beta) computed (see the module)."""
    if single_proof:
        return _prepare(zkey.curve, zkey.n_public, zkey.alpha1, zkey.beta2, zkey.gamma2, zkey.delta2, tuple(zkey.ic_points()),
                        None, single_proof=True)
    ab = alphabeta(zkey.curve, zkey.alpha1, zkey.beta2)
    return _prepare_vkey(_vkey_from_zkey(zkey, ab), tuple(tuple(tuple(c) for c in half) for half in ab))


def _check_point(E: PairingEngine, P: object, group: int, what: str, allow_infinity: bool = True) -> Point:
    """P as a checked affine point of G1 (group 1) or G2 (group 2): coordinates in Fq, on the curve, order r."""
    curve = E.curve
    if P is None:
        if not allow_infinity:
            raise VerifyInputError(f"{what} is the point at infinity")
        return None
    width = 1 if group == 1 else 2
    try:
        x, y = P  # type: ignore[misc]
        coords = [x, y] if width == 1 else [*x, *y]
    except (TypeError, ValueError):
        raise VerifyInputError(f"{what}: expected an affine point (x, y) of {curve.name} G{group}") from None
    if len(coords) != 2 * width or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < curve.q for v in coords):
        raise VerifyInputError(f"{what}: coordinates must be integers in [0, q) of {curve.name}'s base field")
    G = curve.G1 if group == 1 else curve.G2
    if not G.is_on_curve(P):
        raise VerifyInputError(f"{what} is not on the {curve.name} G{group} curve")
    if not (E.g1_in_subgroup(P) if group == 1 else E.g2_in_subgroup(P)):
        raise VerifyInputError(f"{what} is on the curve but not in the order-r subgroup of {curve.name} G{group}")
    return P


def prepare_vkey(vkey: VerificationKey) -> PreparedVerifyingKey:
    """Check a verification key and precompute its pairing data; reuse the result for every proof."""
    if isinstance(vkey, PreparedVerifyingKey):
        return vkey
    return _prepare_vkey(vkey, None)


def _prepare_vkey(vkey: VerificationKey, e_alpha_beta) -> PreparedVerifyingKey:
    return _prepare(vkey.curve, vkey.n_public, vkey.alpha1, vkey.beta2, vkey.gamma2, vkey.delta2, vkey.ic, e_alpha_beta)


def _prepare(curve: Curve, n_public: int, alpha1: Point, beta2: Point, gamma2: Point, delta2: Point, ic_points,
             e_alpha_beta, *, single_proof: bool = False) -> PreparedVerifyingKey:
    """``e_alpha_beta``: e(alpha, beta) when this process just computed it from the same points, else None (computed,
    unless ``single_proof`` pairs alpha with beta in the proof's product instead)."""
    E = engine(curve)
    if isinstance(n_public, bool) or not isinstance(n_public, int) or n_public < 0:
        raise VerifyInputError(f"verification key: n_public must be a non-negative integer, got {n_public!r}")
    if len(ic_points) != n_public + 1:
        raise VerifyInputError(f"verification key: n_public = {n_public} needs {n_public + 1} IC points, got {len(ic_points)}")
    alpha = _check_point(E, alpha1, 1, "vk_alpha_1", allow_infinity=False)
    beta = _check_point(E, beta2, 2, "vk_beta_2", allow_infinity=False)
    gamma = _check_point(E, gamma2, 2, "vk_gamma_2", allow_infinity=False)
    delta = _check_point(E, delta2, 2, "vk_delta_2", allow_infinity=False)
    n = curve.Fq.limbs64
    ic = np.zeros((n_public + 1, 2, n), np.uint64)
    for i, P in enumerate(ic_points):
        if _check_point(E, P, 1, f"IC[{i}]") is not None:
            ic[i] = E.g1_limbs(P)
    if single_proof:
        lines = np.stack([E.prepare_g2(gamma), E.prepare_g2(delta), E.prepare_g2(beta)])
        return PreparedVerifyingKey(curve, n_public, ic, lines, E.fq12_limbs(E.tower.one), E.g1_limbs(alpha))
    lines = np.stack([E.prepare_g2(gamma), E.prepare_g2(delta)])
    if e_alpha_beta is None:
        e_alpha_beta = E.pairing(alpha, beta)
    target = E.fq12_limbs(E.tower.conj(e_alpha_beta))  # Gt elements are unitary: conj = inverse
    return PreparedVerifyingKey(curve, n_public, ic, lines, target)


def _ic_scalars(curve: Curve, n_public: int, public_signals: list[int]) -> np.ndarray:
    """The IC points' coefficients (1, s_1, ..., s_n) as 64-bit limb rows (standard form), the signals checked."""
    if len(public_signals) != n_public:
        raise VerifyInputError(f"the key has {n_public} public signals, got {len(public_signals)}")
    r = curve.r
    values = []
    for i, s in enumerate(public_signals):
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise VerifyInputError(f"public signal #{i}: expected an integer, got {type(s).__name__}")
        s = int(s)
        if not 0 <= s < r:
            raise VerifyInputError(f"public signal #{i}: {s} is outside {curve.name}'s scalar field [0, r)")
        values.append(s)
    return as_u64(ints_to_limbs([1, *values], curve.Fr.limbs32))


def verify(key: VerificationKey | PreparedVerifyingKey, public_signals: list[int], proof) -> bool:
    """True iff ``proof`` (anything with ``a``, ``b``, ``c`` and optionally ``curve``) is valid.

    Pass a :class:`PreparedVerifyingKey` when verifying many proofs against one key: a plain
    :class:`VerificationKey` is prepared on every call (about one extra pairing).
    """
    pvk = prepare_vkey(key)
    curve = pvk.curve
    E = engine(curve)
    proof_curve = getattr(proof, "curve", curve)
    if not isinstance(proof_curve, Curve) or proof_curve.r != curve.r:
        name = getattr(proof_curve, "name", proof_curve)
        raise VerifyInputError(f"the proof is for {name} but the key is for {curve.name}")
    scalars = _ic_scalars(curve, pvk.n_public, list(public_signals))
    a = _check_point(E, proof.a, 1, "proof A")
    b = _check_point(E, proof.b, 2, "proof B")
    c = _check_point(E, proof.c, 1, "proof C")
    g1_points, lines = [], []  # pairs with a point at infinity contribute 1 and are left out
    if a is not None and b is not None:
        g1_points.append(E.g1_limbs(curve.G1.neg(a)))
        lines.append(E.prepare_g2(b))
    L = msm_rows(curve, pvk.ic, scalars)  # IC[0] + sum s_i IC[i+1]
    if L is not None:
        g1_points.append(L)
        lines.append(pvk.lines[0])
    if c is not None:
        g1_points.append(E.g1_limbs(c))
        lines.append(pvk.lines[1])
    if pvk.alpha is not None:  # prepared for a single proof: e(alpha, beta) is in this product, the target is one
        g1_points.append(pvk.alpha)
        lines.append(pvk.lines[2])
    return E.pairing_product_is(g1_points, lines, pvk.target)
