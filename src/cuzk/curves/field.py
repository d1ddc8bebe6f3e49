"""Plain-int reference field arithmetic: the oracle every backend is tested against.

Elements of Fq/Fr are Python ints in [0, p); elements of Fq2 = Fq[u]/(u^2 + 1) are
tuples (c0, c1). Both curves use u^2 = -1, so one Fq2 implementation serves both.
Slow and obviously correct on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PrimeField:
    """A prime field with snarkjs's byte conventions (n8 bytes, Montgomery R = 2^(8*n8))."""

    p: int
    n8: int
    R: int = field(init=False)
    R_inv: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "R", pow(2, 8 * self.n8, self.p))
        object.__setattr__(self, "R_inv", pow(self.R, -1, self.p))

    @property
    def limbs32(self) -> int:
        return self.n8 // 4

    @property
    def limbs64(self) -> int:
        return self.n8 // 8

    # arithmetic ---------------------------------------------------------------
    def add(self, a: int, b: int) -> int:
        return (a + b) % self.p

    def sub(self, a: int, b: int) -> int:
        return (a - b) % self.p

    def neg(self, a: int) -> int:
        return (-a) % self.p

    def mul(self, a: int, b: int) -> int:
        return (a * b) % self.p

    def sqr(self, a: int) -> int:
        return (a * a) % self.p

    def inv(self, a: int) -> int:
        if a % self.p == 0:
            raise ZeroDivisionError("inverse of zero")
        return pow(a, -1, self.p)

    def pow(self, a: int, e: int) -> int:
        return pow(a, e, self.p)

    def is_zero(self, a: int) -> bool:
        return a % self.p == 0

    def eq(self, a: int, b: int) -> bool:
        return (a - b) % self.p == 0

    zero = 0
    one = 1

    # Montgomery and byte conversions (snarkjs layout: little-endian, n8 bytes) -------
    def to_mont(self, a: int) -> int:
        return (a * self.R) % self.p

    def from_mont(self, a: int) -> int:
        return (a * self.R_inv) % self.p

    def to_bytes(self, a: int) -> bytes:
        """Standard (non-Montgomery) little-endian encoding, as in .wtns and .r1cs."""
        return (a % self.p).to_bytes(self.n8, "little")

    def from_bytes(self, b: bytes) -> int:
        return int.from_bytes(b, "little")

    def to_mont_bytes(self, a: int) -> bytes:
        """Montgomery little-endian encoding, as zkey points use."""
        return self.to_mont(a).to_bytes(self.n8, "little")

    def from_mont_bytes(self, b: bytes) -> int:
        return self.from_mont(int.from_bytes(b, "little"))


@dataclass(frozen=True)
class QuadraticExtension:
    """Fq2 = Fq[u]/(u^2 - nonresidue); elements are (c0, c1) tuples."""

    base: PrimeField
    nonresidue: int  # -1 mod p for both BN254 and BLS12-381

    @property
    def zero(self) -> tuple[int, int]:
        return (0, 0)

    @property
    def one(self) -> tuple[int, int]:
        return (1, 0)

    def add(self, a, b):
        p = self.base.p
        return ((a[0] + b[0]) % p, (a[1] + b[1]) % p)

    def sub(self, a, b):
        p = self.base.p
        return ((a[0] - b[0]) % p, (a[1] - b[1]) % p)

    def neg(self, a):
        p = self.base.p
        return ((-a[0]) % p, (-a[1]) % p)

    def mul(self, a, b):
        p = self.base.p
        return (
            (a[0] * b[0] + self.nonresidue * a[1] * b[1]) % p,
            (a[0] * b[1] + a[1] * b[0]) % p,
        )

    def sqr(self, a):
        return self.mul(a, a)

    def mul_scalar(self, a, k: int):
        p = self.base.p
        return ((a[0] * k) % p, (a[1] * k) % p)

    def inv(self, a):
        p = self.base.p
        norm = (a[0] * a[0] - self.nonresidue * a[1] * a[1]) % p
        if norm == 0:
            raise ZeroDivisionError("inverse of zero")
        t = pow(norm, -1, p)
        return ((a[0] * t) % p, (-a[1] * t) % p)

    def is_zero(self, a) -> bool:
        return a[0] % self.base.p == 0 and a[1] % self.base.p == 0

    def eq(self, a, b) -> bool:
        return self.is_zero(self.sub(a, b))

    def conj(self, a):
        return (a[0], (-a[1]) % self.base.p)

    def pow(self, a, e: int):
        result = self.one
        while e:
            if e & 1:
                result = self.mul(result, a)
            a = self.sqr(a)
            e >>= 1
        return result

    def sqrt(self, a):
        """A square root of ``a``, or None when it has none (Adj and Rodríguez-Henríquez's algorithm 9, p ≡ 3 mod 4, u² = −1)."""
        p = self.base.p
        if p % 4 != 3 or self.nonresidue != p - 1:
            raise NotImplementedError("sqrt needs p ≡ 3 (mod 4) and u² = −1")
        minus_one = (p - 1, 0)
        a1 = self.pow(a, (p - 3) // 4)
        alpha = self.mul(self.sqr(a1), a)  # a^((p−1)/2)
        if self.eq(self.mul(self.conj(alpha), alpha), minus_one):  # a^((p²−1)/2) = −1: not a square
            return None
        x0 = self.mul(a1, a)
        if self.eq(alpha, minus_one):
            return self.mul((0, 1), x0)
        return self.mul(self.pow(self.add(self.one, alpha), (p - 1) // 2), x0)
