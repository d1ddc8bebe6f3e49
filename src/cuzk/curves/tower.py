"""Plain-int Fq6/Fq12 and a reference pairing, in snarkjs's (ffjavascript/wasmcurves) tower.

The tower is the one wasmcurves builds for both curves:

    Fq2  = Fq[u]  / (u^2 + 1)
    Fq6  = Fq2[v] / (v^3 - xi)      xi = 9 + u (BN254), 1 + u (BLS12-381)
    Fq12 = Fq6[w] / (w^2 - v)

An Fq6 element is a tuple (a0, a1, a2) of Fq2 tuples, an Fq12 element a pair (c0, c1) of
Fq6 tuples: exactly the nesting of snarkjs's ``vk_alphabeta_12`` (``to_json``/``from_json``
convert). In the w basis an Fq12 element is sum g_i w^i with g_i in Fq2 and w^6 = xi.

The pairing here is the optimal ate pairing written the obvious way (affine Miller loop on
points of E(Fq12), a plain ``pow`` for the final exponentiation); it is the oracle for the
numba pairing and is far too slow for verification. Its final exponentiation raises to
``(q^6 - 1)(q^2 + 1) * hard_exponent``, where ``hard_exponent`` is the multiple of
``(q^4 - q^2 + 1)/r`` that snarkjs's addition chains compute (2u(6u^2+3u+1) times it for
BN254, 3 times it for BLS12-381), so values match snarkjs's Gt bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from .curve import Curve
from .ec import Point

Fq2E = tuple[int, int]
Fq6E = tuple[Fq2E, Fq2E, Fq2E]
Fq12E = tuple[Fq6E, Fq6E]

# Storage slot (c0.a0, c0.a1, c0.a2, c1.a0, c1.a1, c1.a2) -> power of w it multiplies.
SLOT_W_POWER = (0, 2, 4, 1, 3, 5)


def naf(n: int) -> list[int]:
    """Non-adjacent form of n > 0, least significant digit first."""
    digits = []
    while n > 0:
        if n & 1:
            d = 2 - (n % 4)
            n -= d
        else:
            d = 0
        digits.append(d)
        n >>= 1
    return digits


def miller_loop_scalar(curve: Curve) -> int:
    """The optimal ate loop length: 6u + 2 for BN curves, |x| for BLS12 curves."""
    return 6 * curve.param + 2 if curve.family == "bn" else abs(curve.param)


def hard_exponent(curve: Curve) -> int:
    """The exponent snarkjs's hard part applies: a fixed multiple of (q^4 - q^2 + 1)/r.

    BN254 (Fuentes-Castaneda, Knapp, Rodriguez-Henriquez): sum lambda_i q^i with
    lambda = (12u^3+12u^2+6u+1, 12u^3+6u^2+4u, 12u^3+6u^2+6u, 12u^3+6u^2+4u-1).
    BLS12 (Hayashida, Hayasaka, Teruya): (x-1)^2 (x+q) (x^2+q^2-1) + 3.
    """
    q, z = curve.q, curve.param
    if curve.family == "bn":
        u3, u2 = 12 * z**3, 6 * z**2
        lam = (u3 + 2 * u2 + 6 * z + 1, u3 + u2 + 4 * z, u3 + u2 + 6 * z, u3 + u2 + 4 * z - 1)
        return sum(l * q**i for i, l in enumerate(lam))
    return (z - 1) ** 2 * (z + q) * (z * z + q * q - 1) + 3


@dataclass(frozen=True)
class Tower:
    """Fq6 and Fq12 arithmetic over ``curve.Fq2`` with snarkjs's non-residues."""

    curve: Curve
    xi: Fq2E = field(init=False)
    # frobenius[k][slot] = xi^(w_power(slot) * (q^k - 1) / 6): w^(q^k) = w * xi^((q^k-1)/6).
    frobenius_coeffs: tuple[tuple[Fq2E, ...], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        F2, b1, b2 = self.curve.Fq2, self.curve.G1.b, self.curve.G2.b
        # The sextic twist y^2 = x^3 + b' has b' = b/xi (D-type) or b*xi (M-type).
        xi = F2.mul((b1, 0), F2.inv(b2)) if self.curve.twist == "D" else F2.mul(b2, F2.inv((b1, 0)))
        object.__setattr__(self, "xi", xi)
        q = self.curve.q
        coeffs = []
        for k in range(12):
            # xi is a unit of Fq2, whose group has order q^2 - 1: the reduced exponent is 2 limbs long, not 2k.
            base = F2.pow(xi, ((q**k - 1) // 6) % (q * q - 1))
            coeffs.append(tuple(F2.pow(base, p) for p in SLOT_W_POWER))
        object.__setattr__(self, "frobenius_coeffs", tuple(coeffs))

    # Fq6 ------------------------------------------------------------------------
    def fq6_add(self, a: Fq6E, b: Fq6E) -> Fq6E:
        F2 = self.curve.Fq2
        return (F2.add(a[0], b[0]), F2.add(a[1], b[1]), F2.add(a[2], b[2]))

    def fq6_sub(self, a: Fq6E, b: Fq6E) -> Fq6E:
        F2 = self.curve.Fq2
        return (F2.sub(a[0], b[0]), F2.sub(a[1], b[1]), F2.sub(a[2], b[2]))

    def fq6_neg(self, a: Fq6E) -> Fq6E:
        F2 = self.curve.Fq2
        return (F2.neg(a[0]), F2.neg(a[1]), F2.neg(a[2]))

    def fq6_mul(self, a: Fq6E, b: Fq6E) -> Fq6E:
        F2, xi = self.curve.Fq2, self.xi
        # Schoolbook with v^3 = xi.
        c = [F2.zero] * 5
        for i in range(3):
            for j in range(3):
                c[i + j] = F2.add(c[i + j], F2.mul(a[i], b[j]))
        return (F2.add(c[0], F2.mul(xi, c[3])), F2.add(c[1], F2.mul(xi, c[4])), c[2])

    def fq6_mul_by_v(self, a: Fq6E) -> Fq6E:
        return (self.curve.Fq2.mul(self.xi, a[2]), a[0], a[1])

    def fq6_inv(self, a: Fq6E) -> Fq6E:
        F2, xi = self.curve.Fq2, self.xi
        a0, a1, a2 = a
        t0 = F2.sub(F2.sqr(a0), F2.mul(xi, F2.mul(a1, a2)))
        t1 = F2.sub(F2.mul(xi, F2.sqr(a2)), F2.mul(a0, a1))
        t2 = F2.sub(F2.sqr(a1), F2.mul(a0, a2))
        norm = F2.add(F2.mul(a0, t0), F2.mul(xi, F2.add(F2.mul(a2, t1), F2.mul(a1, t2))))
        n_inv = F2.inv(norm)
        return (F2.mul(t0, n_inv), F2.mul(t1, n_inv), F2.mul(t2, n_inv))

    # Fq12 -----------------------------------------------------------------------
    @property
    def one(self) -> Fq12E:
        z = (0, 0)
        return (((1, 0), z, z), (z, z, z))

    def from_fq(self, a: int) -> Fq12E:
        z = (0, 0)
        return (((a % self.curve.q, 0), z, z), (z, z, z))

    def from_slots(self, slots: list[Fq2E]) -> Fq12E:
        """Build from the six Fq2 coefficients in storage order (c0.a0 .. c1.a2)."""
        return ((slots[0], slots[1], slots[2]), (slots[3], slots[4], slots[5]))

    def slots(self, a: Fq12E) -> list[Fq2E]:
        return [*a[0], *a[1]]

    def add(self, a: Fq12E, b: Fq12E) -> Fq12E:
        return (self.fq6_add(a[0], b[0]), self.fq6_add(a[1], b[1]))

    def sub(self, a: Fq12E, b: Fq12E) -> Fq12E:
        return (self.fq6_sub(a[0], b[0]), self.fq6_sub(a[1], b[1]))

    def neg(self, a: Fq12E) -> Fq12E:
        return (self.fq6_neg(a[0]), self.fq6_neg(a[1]))

    def mul(self, a: Fq12E, b: Fq12E) -> Fq12E:
        a0b0 = self.fq6_mul(a[0], b[0])
        a1b1 = self.fq6_mul(a[1], b[1])
        cross = self.fq6_add(self.fq6_mul(a[0], b[1]), self.fq6_mul(a[1], b[0]))
        return (self.fq6_add(a0b0, self.fq6_mul_by_v(a1b1)), cross)

    def sqr(self, a: Fq12E) -> Fq12E:
        return self.mul(a, a)

    def conj(self, a: Fq12E) -> Fq12E:
        """a^(q^6): negates the w part; the inverse for elements of norm 1 (the cyclotomic subgroup)."""
        return (a[0], self.fq6_neg(a[1]))

    def inv(self, a: Fq12E) -> Fq12E:
        norm = self.fq6_sub(self.fq6_mul(a[0], a[0]), self.fq6_mul_by_v(self.fq6_mul(a[1], a[1])))
        if all(c == (0, 0) for c in norm):
            raise ZeroDivisionError("inverse of zero in Fq12")
        n_inv = self.fq6_inv(norm)
        return (self.fq6_mul(a[0], n_inv), self.fq6_neg(self.fq6_mul(a[1], n_inv)))

    def frobenius(self, a: Fq12E, k: int = 1) -> Fq12E:
        """a^(q^k): conjugate each Fq2 coefficient k times, times xi^(i (q^k-1)/6) for w^i."""
        F2 = self.curve.Fq2
        coeffs = self.frobenius_coeffs[k % 12]
        out = []
        for slot, g in enumerate(self.slots(a)):
            if k % 2:
                g = F2.conj(g)
            out.append(F2.mul(g, coeffs[slot]))
        return self.from_slots(out)

    def pow(self, a: Fq12E, e: int) -> Fq12E:
        if e < 0:
            return self.pow(self.inv(a), -e)
        result = self.one
        for bit in bin(e)[2:]:
            result = self.sqr(result)
            if bit == "1":
                result = self.mul(result, a)
        return result

    def eq(self, a: Fq12E, b: Fq12E) -> bool:
        q = self.curve.q
        return all((x - y) % q == 0 for sa, sb in zip(self.slots(a), self.slots(b)) for x, y in zip(sa, sb))

    def is_one(self, a: Fq12E) -> bool:
        return self.eq(a, self.one)

    # snarkjs JSON layout ------------------------------------------------------------
    def to_json(self, a: Fq12E) -> list[list[list[str]]]:
        return [[[str(c[0]), str(c[1])] for c in half] for half in a]

    def from_json(self, obj: Any, what: str = "Fq12 element") -> Fq12E:
        q = self.curve.q
        try:
            halves = [[(int(c[0]), int(c[1])) for c in half] for half in obj]
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"{what}: expected [[[c, c] x3] x2] decimal strings") from None
        if len(halves) != 2 or any(len(h) != 3 for h in halves) or any(len(c) != 2 for h in obj for c in h):
            raise ValueError(f"{what}: expected [[[c, c] x3] x2] decimal strings")
        if any(not 0 <= x < q for h in halves for c in h for x in c):
            raise ValueError(f"{what}: coefficient outside the base field")
        return (tuple(halves[0]), tuple(halves[1]))  # type: ignore[return-value]

    # Reference pairing ---------------------------------------------------------------
    def untwist(self, Q: Point) -> tuple[Fq12E, Fq12E]:
        """The G2 point on E(Fq12): (x w^2, y w^3) for a D-type twist, (x / w^2, y / w^3) for M-type."""
        F2 = self.curve.Fq2
        x, y = Q
        z = (0, 0)
        if self.curve.twist == "D":
            return ((z, x, z), (z, z, z)), ((z, z, z), (z, y, z))
        xi_inv = F2.inv(self.xi)
        # 1/w^2 = w^4/xi (slot c0.a2), 1/w^3 = w^3/xi (slot c1.a1)
        return ((z, z, F2.mul(x, xi_inv)), (z, z, z)), ((z, z, z), (z, F2.mul(y, xi_inv), z))

    def _line(self, T, S, P) -> tuple[Fq12E, Any]:
        """The line through T and S (tangent when equal) at P, and T + S; points on E(Fq12)."""
        (xt, yt), (xs, ys) = T, S
        xp, yp = P
        if self.eq(xt, xs):
            if not self.eq(yt, ys) or self.eq(yt, self.neg(yt)):
                return self.sub(xp, xt), None  # vertical line: T = -S
            lam = self.mul(self.mul(self.from_fq(3), self.sqr(xt)), self.inv(self.add(yt, yt)))
        else:
            lam = self.mul(self.sub(ys, yt), self.inv(self.sub(xs, xt)))
        x3 = self.sub(self.sub(self.sqr(lam), xt), xs)
        y3 = self.sub(self.mul(lam, self.sub(xt, x3)), yt)
        return self.sub(self.sub(yp, yt), self.mul(lam, self.sub(xp, xt))), (x3, y3)

    def miller_loop(self, P: Point, Q: Point) -> Fq12E:
        """f_{s,Q}(P) for the optimal ate loop (plus BN's two Frobenius lines); 1 if either is infinity."""
        if P is None or Q is None:
            return self.one
        Pt = (self.from_fq(P[0]), self.from_fq(P[1]))
        Qt = self.untwist(Q)
        s = miller_loop_scalar(self.curve)
        f, T = self.one, Qt
        for bit in bin(s)[3:]:
            line, T = self._line(T, T, Pt)
            f = self.mul(self.sqr(f), line)
            if bit == "1":
                line, T = self._line(T, Qt, Pt)
                f = self.mul(f, line)
        if self.curve.family == "bn":
            Q1 = (self.frobenius(Qt[0], 1), self.frobenius(Qt[1], 1))
            Q2 = (self.frobenius(Qt[0], 2), self.neg(self.frobenius(Qt[1], 2)))
            line, T = self._line(T, Q1, Pt)
            f = self.mul(f, line)
            line, _ = self._line(T, Q2, Pt)
            f = self.mul(f, line)
        elif self.curve.param < 0:
            f = self.inv(f)
        return f

    def final_exponentiation(self, f: Fq12E) -> Fq12E:
        q = self.curve.q
        return self.pow(f, (q**6 - 1) * (q**2 + 1) * hard_exponent(self.curve))

    def pairing(self, P: Point, Q: Point) -> Fq12E:
        """snarkjs's e(P, Q) for P in G1, Q in G2 (plain ints, seconds per call: tests only)."""
        return self.final_exponentiation(self.miller_loop(P, Q))


@cache
def tower(curve: Curve) -> Tower:
    return Tower(curve)
