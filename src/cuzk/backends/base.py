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
