"""The Backend protocol: what the Groth16 prover needs from a compute backend.

Data layout shared by all backends (it is snarkjs's own, so zkey sections map onto it
without copying):
- a field vector is a C-contiguous ``uint32`` array of shape ``(n, limbs)``, little-endian
  32-bit limbs (limbs = n8 // 4: 8 for Fr and BN254's Fq, 12 for BLS12-381's Fq);
- Fr vectors passed to NTT/elementwise ops are in Montgomery form (R = 2^(8*n8r));
- MSM scalars are in *standard* form (as .wtns stores them);
- G1 bases: ``(n, 2, limbsq)`` affine Montgomery x, y; G2 bases ``(n, 2, 2, limbsq)``
  (x.c0, x.c1, y.c0, y.c1); an all-zero point is the point at infinity.
MSM results come back as reference affine points (``curves.ec`` tuples, ``None`` for
infinity), so the prover and the tests compare them directly with the oracle.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..curves import Curve
from ..curves.ec import Point
from ..curves.serialize import g1_to_bytes, g2_to_bytes


@runtime_checkable
class Backend(Protocol):
    name: str

    # Fr vectors (Montgomery form) --------------------------------------------------
    def fr_mul(self, curve: Curve, a: np.ndarray, b: np.ndarray) -> np.ndarray: ...
    def fr_sub(self, curve: Curve, a: np.ndarray, b: np.ndarray) -> np.ndarray: ...
    def fr_to_mont(self, curve: Curve, a: np.ndarray) -> np.ndarray: ...
    def fr_from_mont(self, curve: Curve, a: np.ndarray) -> np.ndarray: ...

    # Transforms over the 2^k domain of snarkjs's roots (curve.fr_root_of_unity) ----
    def ntt(self, curve: Curve, a: np.ndarray) -> np.ndarray: ...
    def intt(self, curve: Curve, a: np.ndarray) -> np.ndarray: ...
    def coset_ntt(self, curve: Curve, a: np.ndarray, shift: int) -> np.ndarray:
        """Evaluations of the polynomial with coefficients ``a`` on shift·<w>: scale a_i by shift^i, then NTT."""
        ...

    # Multi-scalar multiplication ---------------------------------------------------
    def msm_g1(self, curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point: ...
    def msm_g2(self, curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point: ...


def point_rows(curve: Curve, group: str, points: list[Point]) -> np.ndarray:
    """Reference points (``curves.ec``) as MSM bases in the layout above (``group`` "g1" or "g2"; ``None`` → all zero)."""
    encode, coords = (g1_to_bytes, (2,)) if group == "g1" else (g2_to_bytes, (2, 2))
    raw = b"".join(encode(curve, P) for P in points)
    return np.frombuffer(raw, dtype="<u4").reshape((len(points),) + coords + (curve.Fq.limbs32,)).copy()
