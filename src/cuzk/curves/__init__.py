"""Curve parameters and plain-int reference arithmetic (the oracle for every backend)."""

from .bls12_381 import BLS12_381
from .bn254 import BN254
from .curve import Curve

CURVES: tuple[Curve, ...] = (BN254, BLS12_381)


class UnknownCurveError(ValueError):
    pass


def curve_by_name(name: str) -> Curve:
    key = name.lower()
    for c in CURVES:
        if key == c.name or key in c.aliases:
            return c
    raise UnknownCurveError(f"unknown curve {name!r}; known: bn128 (bn254), bls12381 (bls12-381)")


def curve_by_q(q: int) -> Curve:
    """The curve whose base field prime is q (what a .zkey header carries)."""
    for c in CURVES:
        if c.q == q:
            return c
    raise UnknownCurveError(f"base field prime {q:#x} matches no supported curve (BN254, BLS12-381)")


def curve_by_r(r: int) -> Curve:
    """The curve whose scalar field prime is r (what .wtns and .r1cs headers carry)."""
    for c in CURVES:
        if c.r == r:
            return c
    raise UnknownCurveError(f"scalar field prime {r:#x} matches no supported curve (BN254, BLS12-381)")


__all__ = ["BN254", "BLS12_381", "CURVES", "Curve", "UnknownCurveError", "curve_by_name", "curve_by_q", "curve_by_r"]
