"""The Python side of the pairing: a curve's constants, conversions and the kernel entry points."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ...backends.cpu.field import fe_eq, field_consts, from_mont_row, to_mont_int
from ...curves import Curve
from ...curves.ec import Point
from ...curves.tower import Fq12E, Tower, miller_loop_scalar, naf, tower
from .curve import CurveConsts, g1_subgroup_kernel, g2_subgroup_kernel
from .final_exp import final_exponentiation, final_exponentiation_kernel
from .miller import line_steps, miller_loop, miller_loop_kernel, prepare_g2_kernel
from .tower import TowerConsts


@njit(cache=True, nogil=True)
def _pairing_product_is_kernel(Ps, lines, target, cc):
    """prod_j e(Ps[j], Q_j) == target, each Q_j given by its lines: one Miller loop, one final exponentiation."""
    f = np.empty_like(target)
    miller_loop(Ps, lines, f, cc)
    final_exponentiation(f, f, cc)
    return fe_eq(f, target)


def _int8_naf(n: int) -> np.ndarray:
    return np.array(naf(n), np.int8)


@dataclass(frozen=True, eq=False)
class PairingEngine:
    """Per-curve constants and conversions around the numba kernels; points are ``curves.ec`` tuples."""

    curve: Curve
    tower: Tower = field(init=False, repr=False)
    consts: CurveConsts = field(init=False, repr=False)
    line_steps: int = field(init=False)

    def __post_init__(self) -> None:
        c = self.curve
        T = tower(c)
        if T.xi[1] != 1:
            raise ValueError(f"{c.name}: the Fq6 non-residue must be k + u, got {T.xi}")
        frobenius = np.stack([self.fq2_limbs(coeff) for k in (1, 2, 3) for coeff in T.frobenius_coeffs[k]])
        n = c.Fq.limbs64
        F2 = c.Fq2
        psi_x, psi_y = T.frobenius_coeffs[1][1], T.frobenius_coeffs[1][4]  # xi^((q-1)/3), xi^((q-1)/2)
        if c.twist == "M":
            psi_x, psi_y = F2.inv(psi_x), F2.inv(psi_y)
        loop_naf = _int8_naf(miller_loop_scalar(c))
        consts = CurveConsts(
            tower=TowerConsts(field_consts(c.Fq), np.int64(T.xi[0]), frobenius.reshape(3, 2, 3, 2, n)),
            b3=self.fq2_limbs(F2.mul_scalar(c.G2.b, 3)),
            psi=np.stack([self.fq2_limbs(psi_x), self.fq2_limbs(psi_y)]),
            beta=to_mont_int(c.Fq, self._g1_beta()),
            loop_naf=loop_naf,
            param_naf=_int8_naf(abs(c.param)),
            param_sq_naf=_int8_naf(c.param**2),
            param_negative=c.param < 0,
            family_bn=c.family == "bn",
            twist_m=c.twist == "M",
        )
        object.__setattr__(self, "tower", T)
        object.__setattr__(self, "consts", consts)
        object.__setattr__(self, "line_steps", line_steps(loop_naf, consts.family_bn))

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

    # conversions (Montgomery form, 64-bit limbs) ----------------------------------------
    def fq2_limbs(self, a: tuple[int, int]) -> np.ndarray:
        return np.stack([to_mont_int(self.curve.Fq, a[0]), to_mont_int(self.curve.Fq, a[1])])

    def g1_limbs(self, P: Point) -> np.ndarray:
        """(2, N): x, y."""
        return self.fq2_limbs(P)

    def g2_limbs(self, Q: Point) -> np.ndarray:
        """(2, 2, N): x, y over Fq2."""
        return np.stack([self.fq2_limbs(Q[0]), self.fq2_limbs(Q[1])])

    def fq12_limbs(self, a: Fq12E) -> np.ndarray:
        """(2, 3, 2, N) in snarkjs's coefficient order."""
        return np.stack([self.fq2_limbs(slot) for slot in self.tower.slots(a)]).reshape(2, 3, 2, -1)

    def fq12_from_limbs(self, limbs: np.ndarray) -> Fq12E:
        F = self.curve.Fq
        return self.tower.from_slots([(from_mont_row(F, x), from_mont_row(F, y)) for x, y in limbs.reshape(6, 2, -1)])

    # pairing -------------------------------------------------------------------------
    def prepare_g2(self, Q: Point) -> np.ndarray:
        """The Miller loop's (steps, 3, 2, N) line coefficients for a G2 point (affine, not infinity)."""
        return prepare_g2_kernel(self.g2_limbs(Q), self.line_steps, self.consts)

    def miller_loop(self, pairs: list[tuple[Point, Point]]) -> Fq12E:
        """Product of the Miller loops of (P in G1, Q in G2) pairs; infinity pairs contribute 1."""
        live = [(P, Q) for P, Q in pairs if P is not None and Q is not None]
        Ps = np.stack([self.g1_limbs(P) for P, _ in live]) if live else self._no_g1_points()
        lines = np.stack([self.prepare_g2(Q) for _, Q in live]) if live else self._no_lines()
        return self.fq12_from_limbs(miller_loop_kernel(Ps, lines, self.consts))

    def final_exponentiation(self, f: Fq12E) -> Fq12E:
        return self.fq12_from_limbs(final_exponentiation_kernel(self.fq12_limbs(f), self.consts))

    def pairing(self, P: Point, Q: Point) -> Fq12E:
        return self.final_exponentiation(self.miller_loop([(P, Q)]))

    def pairing_product_is(self, g1_points: list[np.ndarray], lines: list[np.ndarray], target: np.ndarray) -> bool:
        """prod e(P_j, Q_j) == target for G1 points in limb form and G2 points as their prepared lines."""
        Ps = np.stack(g1_points) if g1_points else self._no_g1_points()
        all_lines = np.stack(lines) if lines else self._no_lines()
        return bool(_pairing_product_is_kernel(Ps, all_lines, target, self.consts))

    def _no_g1_points(self) -> np.ndarray:
        return np.empty((0, 2, self.curve.Fq.limbs64), np.uint64)

    def _no_lines(self) -> np.ndarray:
        return np.empty((0, self.line_steps, 3, 2, self.curve.Fq.limbs64), np.uint64)

    # subgroup checks -------------------------------------------------------------------
    def g1_in_subgroup(self, P: Point) -> bool:
        """P (on the curve) lies in the order-r subgroup; BN254's G1 has cofactor 1."""
        if P is None or self.consts.family_bn:
            return True
        return bool(g1_subgroup_kernel(self.g1_limbs(P), self.consts))

    def g2_in_subgroup(self, Q: Point) -> bool:
        """Q (on the twist) lies in the order-r subgroup."""
        if Q is None:
            return True
        return bool(g2_subgroup_kernel(self.g2_limbs(Q), self.consts))


_engines: dict[str, PairingEngine] = {}


def engine(curve: Curve) -> PairingEngine:
    """The curve's engine, built once (a dict by name: hashing a Curve costs more than a verify's Python work)."""
    found = _engines.get(curve.name)
    if found is None:
        found = _engines[curve.name] = PairingEngine(curve)
    return found
