"""Curve parameters and plain-int reference arithmetic (the oracle for every backend)."""

from .bls12_381 import BLS12_381
from .bn254 import BN254
from .curve import Curve

CURVES: tuple[Curve, ...] = (BN254, BLS12_381)


# circom's other --prime choices (circom 2.2), by their scalar field prime: a circuit compiled for one of them is
# named in the error, not only its prime, since the user chose the name, not the number.
CIRCOM_OTHER_PRIMES: dict[int, str] = {
    0x12AB655E9A2CA55660B44D1E5C37B00159AA76FED00000010A11800000000001: "bls12377",
    0xFFFFFFFF00000001: "goldilocks",
    0x30644E72E131A029B85045B68181585D97816A916871CA8D3C208C16D87CFD47: "grumpkin",
    0x40000000000000000000000000000000224698FC094CF91B992D30ED00000001: "pallas",
    0x40000000000000000000000000000000224698FC0994A8DD8C46EB2100000001: "vesta",
    0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF: "secq256r1",
}


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
    other = CIRCOM_OTHER_PRIMES.get(r)
    if other is not None:
        raise UnknownCurveError(f"scalar field prime {r:#x} is circom's --prime {other}: cuzk proves Groth16 over bn128 "
                                "(BN254) and bls12381 (BLS12-381) only, as snarkjs does; compile the circuit with "
                                "--prime bn128 or bls12381")
    raise UnknownCurveError(f"scalar field prime {r:#x} matches no supported curve (BN254, BLS12-381)")


__all__ = ["BN254", "BLS12_381", "CIRCOM_OTHER_PRIMES", "CURVES", "Curve", "UnknownCurveError", "curve_by_name", "curve_by_q", "curve_by_r"]
