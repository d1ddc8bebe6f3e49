"""A pairing-friendly curve as data: primes, generators, coefficients, FFT roots.

Each curve module (bn254.py, bls12_381.py) builds one ``Curve``; everything else — file
readers, backends, CUDA constants — derives from these values and never retypes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from .ec import WeierstrassGroup
from .field import PrimeField, QuadraticExtension


@dataclass(frozen=True)
class Curve:
    name: str  # snarkjs's name: "bn128" or "bls12381"
    Fq: PrimeField
    Fr: PrimeField
    Fq2: QuadraticExtension
    G1: WeierstrassGroup
    G2: WeierstrassGroup
    # Pairing data: the BN parameter u (6u+2 loop) or the BLS parameter x (|x| loop).
    family: str  # "bn" or "bls12"
    param: int
    twist: str  # "D" (BN254) or "M" (BLS12-381)
    aliases: tuple[str, ...] = ()
    fr_two_adicity: int = field(init=False)
    fr_nqr: int = field(init=False)

    def __post_init__(self) -> None:
        r = self.Fr.p
        s, t = 0, r - 1
        while t % 2 == 0:
            t //= 2
            s += 1
        nqr = 2
        while pow(nqr, (r - 1) // 2, r) != r - 1:
            nqr += 1
        object.__setattr__(self, "fr_two_adicity", s)
        object.__setattr__(self, "fr_nqr", nqr)

    @property
    def q(self) -> int:
        return self.Fq.p

    @property
    def r(self) -> int:
        return self.Fr.p

    def fr_root_of_unity(self, log_n: int) -> int:
        """The 2^log_n-th root of unity snarkjs (ffjavascript) uses: nqr^((r-1)/2^log_n).

        The H points of a zkey are tied to this exact root, so any other primitive
        root of the same order would give a wrong (though well-formed) proof.
        """
        if not 0 <= log_n <= self.fr_two_adicity:
            raise ValueError(f"{self.name}: no 2^{log_n} root of unity in Fr")
        return _root_of_unity(self.Fr.p, self.fr_nqr, self.fr_two_adicity, log_n)


@cache
def _root_of_unity(r: int, nqr: int, two_adicity: int, log_n: int) -> int:
    """nqr^((r-1)/2^log_n) mod r, remembered: every proof asks for its domain's root (a pow and up to 28 squarings)."""
    w = pow(nqr, (r - 1) >> two_adicity, r)
    for _ in range(two_adicity - log_n):
        w = w * w % r
    return w
