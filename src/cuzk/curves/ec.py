"""Plain reference arithmetic on short Weierstrass curves y^2 = x^3 + b, generic over the field.

Points are affine tuples (x, y) with coordinates in the group's field (ints for G1, Fq2
tuples for G2); the point at infinity is ``None``. Slow, obviously correct: the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Point = Any  # tuple (x, y) or None for the point at infinity


@dataclass(frozen=True)
class WeierstrassGroup:
    """A group of points on y^2 = x^3 + b over field ``F`` with a generator and order."""

    name: str
    F: Any  # PrimeField or QuadraticExtension
    b: Any
    generator: Point
    order: int
    cofactor: int  # the curve has order·cofactor points: times the cofactor, any of them lands in the group

    def is_on_curve(self, P: Point) -> bool:
        if P is None:
            return True
        F = self.F
        x, y = P
        return F.eq(F.sqr(y), F.add(F.mul(F.sqr(x), x), self.b))

    def neg(self, P: Point) -> Point:
        if P is None:
            return None
        return (P[0], self.F.neg(P[1]))

    def eq(self, P: Point, Q: Point) -> bool:
        if P is None or Q is None:
            return P is None and Q is None
        return self.F.eq(P[0], Q[0]) and self.F.eq(P[1], Q[1])

    def double(self, P: Point) -> Point:
        if P is None:
            return None
        F = self.F
        x, y = P
        if F.is_zero(y):
            return None
        three_x2 = F.mul(F.add(F.add(F.one, F.one), F.one), F.sqr(x))
        lam = F.mul(three_x2, F.inv(F.add(y, y)))
        x3 = F.sub(F.sqr(lam), F.add(x, x))
        y3 = F.sub(F.mul(lam, F.sub(x, x3)), y)
        return (x3, y3)

    def add(self, P: Point, Q: Point) -> Point:
        if P is None:
            return Q
        if Q is None:
            return P
        F = self.F
        if F.eq(P[0], Q[0]):
            if F.eq(P[1], Q[1]):
                return self.double(P)
            return None
        lam = F.mul(F.sub(Q[1], P[1]), F.inv(F.sub(Q[0], P[0])))
        x3 = F.sub(F.sub(F.sqr(lam), P[0]), Q[0])
        y3 = F.sub(F.mul(lam, F.sub(P[0], x3)), P[1])
        return (x3, y3)

    def sub(self, P: Point, Q: Point) -> Point:
        return self.add(P, self.neg(Q))

    def mul(self, P: Point, k: int) -> Point:
        """k·P for any integer k (negative k negates), by double-and-add."""
        if k < 0:
            return self.mul(self.neg(P), -k)
        result = None
        addend = P
        while k:
            if k & 1:
                result = self.add(result, addend)
            addend = self.double(addend)
            k >>= 1
        return result

    def msm(self, points: list[Point], scalars: list[int]) -> Point:
        """Σ k_i·P_i, the reference for every backend's MSM."""
        acc = None
        for P, k in zip(points, scalars):
            acc = self.add(acc, self.mul(P, k))
        return acc
