"""A device self-test: a tiny NTT and G1 MSM checked against the reference arithmetic.

The engine runs it after a CUDA error to tell a sick device from a job whose input trips a
kernel bug; it works on any backend.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..curves import BN254, Curve
from ..curves.ec import Point
from ..formats.limbs import ints_to_limbs
from .base import Backend, point_rows


@dataclass(frozen=True)
class _SelfTestCase:
    """Inputs of the device self-test on one curve and the results the reference arithmetic gives."""

    values: np.ndarray  # Fr rows, Montgomery form
    transformed: np.ndarray  # their NTT, Montgomery form
    bases: np.ndarray  # i·G for i = 1..n, G1 layout
    scalars: np.ndarray  # standard form, the largest ones included
    msm: Point  # (Σ i·s_i)·G


_SELF_TEST_LOG_N = 3  # 8 elements: a handful of launches, milliseconds on a GPU and on the host emulation
_self_test_cases: dict[str, _SelfTestCase] = {}
_self_test_lock = threading.Lock()


def _self_test_case(curve: Curve) -> _SelfTestCase:
    with _self_test_lock:
        case = _self_test_cases.get(curve.name)
        if case is None:
            case = _self_test_cases[curve.name] = _make_self_test_case(curve)
        return case


def _make_self_test_case(curve: Curve) -> _SelfTestCase:
    Fr, G, r, n = curve.Fr, curve.G1, curve.r, 1 << _SELF_TEST_LOG_N
    values = [r - 1 - 7 * i for i in range(n)]
    w = curve.fr_root_of_unity(_SELF_TEST_LOG_N)
    transformed = [sum(v * pow(w, i * j, r) for j, v in enumerate(values)) % r for i in range(n)]
    scalars = [r - 1 - 3 * i if i % 2 else i for i in range(n)]
    points, acc = [], G.generator
    for _ in range(n):
        points.append(acc)
        acc = G.add(acc, G.generator)
    return _SelfTestCase(
        values=ints_to_limbs([Fr.to_mont(v) for v in values], Fr.limbs32),
        transformed=ints_to_limbs([Fr.to_mont(v) for v in transformed], Fr.limbs32),
        bases=point_rows(curve, "g1", points), scalars=ints_to_limbs(scalars, Fr.limbs32),
        msm=G.mul(G.generator, sum((i + 1) * s for i, s in enumerate(scalars)) % r))


def device_self_test(backend: Backend, curve: Curve = BN254) -> str | None:
    """Run a tiny NTT and G1 MSM on ``backend``; None when both equal the reference, else what went wrong.

    After a CUDA error this tells a sick device from a job whose input trips a kernel bug. A
    sticky CUDA error (an illegal address, say) leaves the device's context unusable, so every
    launch here fails too and the device is rightly taken out of service.
    """
    case = _self_test_case(curve)
    try:
        if not np.array_equal(np.asarray(backend.ntt(curve, case.values)), case.transformed):
            return "an NTT of 8 elements differs from the reference"
        if not curve.G1.eq(backend.msm_g1(curve, case.bases, case.scalars), case.msm):
            return "a G1 MSM of 8 points differs from the reference"
    except Exception as exc:  # noqa: BLE001 — any failure here is the device's
        return f"{type(exc).__name__}: {exc}"
    return None
