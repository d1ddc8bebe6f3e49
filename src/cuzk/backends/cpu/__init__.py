"""The CPU backend: numpy + numba kernels (JIT, cached on disk), parallel over cores."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...curves import Curve
from ...curves.ec import Point
from ..base import msm_each
from . import msm, ntt
from ...ff.field import FROM_MONT, MUL, SUB, TO_MONT, FieldVectorError, as_u64, field_consts, fp_binary_vec, fp_unary_vec, fr_rows


def _binary(curve: Curve, a: np.ndarray, b: np.ndarray, op: int) -> np.ndarray:
    x, y = fr_rows(curve, a), fr_rows(curve, b)
    if x.shape != y.shape:
        raise FieldVectorError(f"field vectors differ in shape: {a.shape} vs {b.shape}")
    out = np.empty(a.shape, dtype=np.uint32)
    fp_binary_vec(x, y, as_u64(out), op, field_consts(curve.Fr))
    return out


def _unary(curve: Curve, a: np.ndarray, op: int) -> np.ndarray:
    x = fr_rows(curve, a)
    out = np.empty(a.shape, dtype=np.uint32)
    fp_unary_vec(x, as_u64(out), op, field_consts(curve.Fr))
    return out


class CpuBackend:
    """Implements backends.base.Backend on the host."""

    name = "cpu"

    def fr_mul(self, curve: Curve, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _binary(curve, a, b, MUL)

    def fr_sub(self, curve: Curve, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _binary(curve, a, b, SUB)

    def fr_to_mont(self, curve: Curve, a: np.ndarray) -> np.ndarray:
        return _unary(curve, a, TO_MONT)

    def fr_from_mont(self, curve: Curve, a: np.ndarray) -> np.ndarray:
        return _unary(curve, a, FROM_MONT)

    def ntt(self, curve: Curve, a: np.ndarray) -> np.ndarray:
        return ntt.ntt(curve, a)

    def intt(self, curve: Curve, a: np.ndarray) -> np.ndarray:
        return ntt.intt(curve, a)

    def coset_ntt(self, curve: Curve, a: np.ndarray, shift: int) -> np.ndarray:
        return ntt.coset_ntt(curve, a, shift)

    def coset_evaluations(self, curve: Curve, vectors: list, shift: int) -> list:
        return ntt.coset_evaluations(curve, vectors, shift)

    def msm_g1(self, curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point:
        return msm.msm_g1(curve, bases, scalars)

    def msm_g2(self, curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point:
        return msm.msm_g2(curve, bases, scalars)

    def msm_many(self, curve: Curve, msms, checkpoint: Callable[[], None] | None = None) -> list[Point]:
        return msm_each(msms, lambda group, bases, scalars: (self.msm_g1 if group == "g1" else self.msm_g2)(curve, bases, scalars),
                        checkpoint)


__all__ = ["CpuBackend", "FieldVectorError"]
