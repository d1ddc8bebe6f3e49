"""Groth16 proving exactly as snarkjs 0.7 computes it, written once against the Backend protocol.

The steps follow snarkjs's groth16_prove: evaluate A·w and B·w on the domain from the
key's coefficient section (on the CPU, or — a deferred synthesis — on the device from the
key's resident coefficients, so the vectors never exist on the host), C = A∘B,
interpolate each and evaluate on the odd coset of the double domain (the zkey's H points
are that coset's Lagrange basis, divided by Z), then five MSMs and the blinding with fresh
r, s from the OS CSPRNG.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..backends.base import Backend, is_device_backend, point_rows
from ..backends.cpu import CpuBackend
from ..backends.cpu.synth import evaluate_ab
from ..curves import Curve
from ..curves.ec import Point
from ..formats.limbs import ints_to_limbs
from ..formats.r1cs import R1CS, check_satisfied
from ..formats.wtns import Witness
from ..formats.zkey import ZKey
from .sizing import device_vector_bytes

if TYPE_CHECKING:
    from ..backends.cuda.vram import VramReservation


class ProvingError(ValueError):
    """The inputs cannot give a valid proof (wrong witness, mismatched key...)."""


class UnsatisfiedWitnessError(ProvingError):
    def __init__(self, constraint: int):
        super().__init__(f"witness does not satisfy the circuit: constraint {constraint} fails (A·w)·(B·w) = C·w")
        self.constraint = constraint


class ProofCancelled(Exception):
    """Raised from a phase boundary when the caller's cancel check fires."""


@dataclass
class Proof:
    curve: Curve
    a: Point
    b: Point
    c: Point
    public_signals: list[int]
    timings: dict[str, float] = field(default_factory=dict)


def public_signals(witness: Witness, n_public: int) -> list[int]:
    """Signals 1..n_public of the witness (signal 0 is the constant 1)."""
    limbs = witness.values[1 : n_public + 1].astype(np.uint64)
    out = []
    for row in limbs:
        v = 0
        for i in range(len(row) - 1, -1, -1):
            v = (v << 32) | int(row[i])
        out.append(v)
    return out


def check_inputs(zkey: ZKey, witness: Witness, r1cs: R1CS | None = None) -> None:
    """Reject a witness that cannot belong to this key (and, with the r1cs, one that is unsatisfied)."""
    if witness.curve.r != zkey.curve.r:
        raise ProvingError(f"witness is over the {witness.curve.name} scalar field but the key is for {zkey.curve.name}")
    if len(witness.values) != zkey.n_vars:
        raise ProvingError(f"witness has {len(witness.values)} values but the circuit has {zkey.n_vars} signals")
    if r1cs is not None:
        if r1cs.curve.r != zkey.curve.r:
            raise ProvingError(f"r1cs is for {r1cs.curve.name} but the key is for {zkey.curve.name}")
        if r1cs.n_wires != zkey.n_vars:
            raise ProvingError(f"r1cs has {r1cs.n_wires} wires but the key has {zkey.n_vars} signals")
        failing = check_satisfied(r1cs, witness.values)
        if failing is not None:
            raise UnsatisfiedWitnessError(failing)


@dataclass
class Synthesis:
    """One witness evaluated on the key's domain: the CPU half of a proof, handed to the proving half.

    The engine runs :func:`synthesize` on CPU worker threads and :func:`prove_synthesized`
    on a device worker, so the next job's synthesis overlaps this job's NTTs and MSMs.
    ``a`` and ``b`` (A·w, B·w, Montgomery form) are taken over by the proving half, which
    drops them as soon as the H scalars exist. A ``deferred`` synthesis has only checked the
    witness: the proving half evaluates a and b itself, on the device where it can.
    """

    witness: Witness
    w: np.ndarray  # the witness values, (n_vars, Lr) uint32 standard form
    a: np.ndarray | None
    b: np.ndarray | None
    timings: dict[str, float] = field(default_factory=dict)
    deferred: bool = False

    def take_ab(self) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.a, self.b
        if a is None or b is None:
            raise ValueError("this synthesis was already proved (its a/b vectors are gone)")
        self.a = self.b = None
        return a, b


def _checkpoint(cancelled: Callable[[], bool] | None) -> None:
    if cancelled is not None and cancelled():
        raise ProofCancelled()


def synthesize(
    zkey: ZKey,
    witness: Witness,
    *,
    r1cs: R1CS | None = None,
    cancelled: Callable[[], bool] | None = None,
    defer_ab: bool = False,
) -> Synthesis:
    """Check the witness against the key (and the r1cs when given), then evaluate A·w and B·w on the CPU — unless
    ``defer_ab`` leaves them to :func:`prove_synthesized` (on a device with the key's coefficients resident)."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    check_inputs(zkey, witness, r1cs)
    w = np.ascontiguousarray(witness.values)
    timings["check"] = time.perf_counter() - t
    _checkpoint(cancelled)
    if defer_ab:
        return Synthesis(witness, w, None, None, timings, deferred=True)

    t = time.perf_counter()
    a, b = evaluate_ab(zkey.curve, zkey.coeffs, w, zkey.domain_size)
    timings["synthesize"] = time.perf_counter() - t
    _checkpoint(cancelled)
    return Synthesis(witness, w, a, b, timings)


def _scalar_rows(curve: Curve, scalars: list[int]) -> np.ndarray:
    return ints_to_limbs(scalars, curve.Fr.limbs32)


_host = CpuBackend()  # the blinding's MSMs of 1-3 points: on a GPU each would cost a launch sequence's latency


def blinding_terms(curve: Curve, delta1: Point, delta2: Point, r: int, s: int) -> tuple[Point, Point, Point]:
    """r·δ1, s·δ1, s·δ2 through the CPU backend's MSMs: well under a millisecond each."""
    g1 = point_rows(curve, "g1", [delta1])
    return (_host.msm_g1(curve, g1, _scalar_rows(curve, [r])),
            _host.msm_g1(curve, g1, _scalar_rows(curve, [s])),
            _host.msm_g2(curve, point_rows(curve, "g2", [delta2]), _scalar_rows(curve, [s])))


def _evaluate_deferred(backend: Backend, zkey: ZKey, synthesis: Synthesis, w_upload) -> tuple:
    """A·w and B·w of a deferred synthesis: on the device from the key's resident coefficients (from the witness's
    device copy when the proof's vectors are on the device), else on the CPU from the host key's."""
    if is_device_backend(backend) and not isinstance(zkey.coeffs, np.ndarray):
        return backend.evaluate_ab(zkey.curve, zkey.coeffs, w_upload.result() if w_upload is not None else synthesis.w)
    return evaluate_ab(zkey.curve, zkey.coeffs, synthesis.w, zkey.domain_size)


def wait_for_vectors(backend: Backend, header, cancelled: Callable[[], bool]) -> VramReservation | None:
    """The VRAM of one proof's vectors on a device whose whole budget holds them beside the key, waited for (a device
    worker, in-process or in a worker process, calls it before taking the key's device lease, so a waiting proof holds
    nothing on the device: the room it waits for is held by proofs that end, or by idle keys that are evicted).
    Raises ProofCancelled when cancelled while waiting (nothing is then reserved); None only for vectors beyond the
    whole budget (the callers rule that out): the proof then copies per operation. ``prove_synthesized(vectors=)``
    takes it; the caller releases it."""
    vectors = backend.vram.reserve_when_free(device_vector_bytes(header), "proof vectors", cancelled)
    if cancelled():
        if vectors is not None:
            vectors.release()
        raise ProofCancelled()
    return vectors


@contextlib.contextmanager
def _device_vectors(backend: Backend, zkey: ZKey, w: np.ndarray, vectors: VramReservation | None):
    """On a backend with device memory (CUDA): the proof's vectors reserved in its VRAM budget so that they
    are copied once and stay there — ``vectors``, the caller's reservation (it waited for it and releases it), or
    one taken here when they fit now — and the witness's upload started (staged and copied on the backend's
    copy thread while the NTTs run); yields that upload. Yields None on the CPU backend, or when the
    vectors do not fit (each operation then copies its own inputs)."""
    owned = None
    if vectors is None and is_device_backend(backend):
        vectors = owned = backend.try_reserve(device_vector_bytes(zkey), "proof vectors")
    if vectors is None:
        yield None
        return
    try:
        upload = backend.upload_in_background(w)
        try:
            yield upload
        finally:
            upload.result()  # a proof that stopped early still hands the upload's staging buffer back
    finally:
        if owned is not None:
            owned.release()


def prove_synthesized(
    backend: Backend,
    zkey: ZKey,
    synthesis: Synthesis,
    *,
    on_abc_released: Callable[[], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    vectors: VramReservation | None = None,
) -> Proof:
    """The proving half: (A·w and B·w of a deferred synthesis,) C = A∘B, H by NTTs, the five MSMs and the blinding.

    ``on_abc_released`` fires when the host's a/b/c vectors are freed (phase-one release of the
    working-set reservation): once a and b are on the device when the vectors stay there, else after the NTTs;
    ``cancelled`` is polled between phases. ``vectors``: the VRAM reservation of the proof's vectors, when the
    caller waited for it (it stays the caller's to release).
    """
    curve = zkey.curve
    timings = dict(synthesis.timings)
    w = synthesis.w
    a, b = (None, None) if synthesis.deferred else synthesis.take_ab()
    release_abc = on_abc_released or (lambda: None)
    with _device_vectors(backend, zkey, w, vectors) as w_upload:
        if synthesis.deferred:
            t = time.perf_counter()
            a, b = _evaluate_deferred(backend, zkey, synthesis, w_upload)
            timings["synthesize"] = time.perf_counter() - t
        t = time.perf_counter()
        if w_upload is not None:  # a, b, c and H stay on the device: the host's a/b halves go once uploaded
            a, b = backend.to_device(a), backend.to_device(b)
            release_abc()
        c = backend.fr_mul(curve, a, b)
        shift = curve.fr_root_of_unity(zkey.power + 1)
        on_domain = [a, b, c]
        del a, b, c  # the list holds the only references: the backend drops each input when done with it
        a, b, c = backend.coset_evaluations(curve, on_domain, shift)
        h_scalars = backend.fr_from_mont(curve, backend.fr_sub(curve, backend.fr_mul(curve, a, b), c))
        del a, b, c
        timings["ntt"] = time.perf_counter() - t
        if w_upload is None:  # the host's vectors live until here
            release_abc()
        _checkpoint(cancelled)

        t = time.perf_counter()
        scalars = w_upload.result() if w_upload is not None else w
        pi_a, pib1, pi_b, pi_c, res_h = backend.msm_many(
            curve, [("g1", zkey.a, scalars), ("g1", zkey.b1, scalars), ("g2", zkey.b2, scalars),
                    ("g1", zkey.c, scalars[zkey.n_public + 1 :]), ("g1", zkey.h, h_scalars)],
            checkpoint=lambda: _checkpoint(cancelled))
        del scalars, h_scalars
        timings["msm"] = time.perf_counter() - t

    t = time.perf_counter()
    G1, r_mod = curve.G1, curve.r
    r = secrets.randbelow(r_mod)
    s = secrets.randbelow(r_mod)
    r_delta1, s_delta1, s_delta2 = blinding_terms(curve, zkey.delta1, zkey.delta2, r, s)
    pi_a = G1.add(G1.add(pi_a, zkey.alpha1), r_delta1)
    pi_b = curve.G2.add(curve.G2.add(pi_b, zkey.beta2), s_delta2)
    pib1 = G1.add(G1.add(pib1, zkey.beta1), s_delta1)
    # s·A + r·B1 − rs·δ1 in one small MSM
    cross = _host.msm_g1(curve, point_rows(curve, "g1", [pi_a, pib1, zkey.delta1]),
                           _scalar_rows(curve, [s, r, (-r * s) % r_mod]))
    pi_c = G1.add(G1.add(pi_c, res_h), cross)
    timings["blind"] = time.perf_counter() - t

    return Proof(curve, pi_a, pi_b, pi_c, public_signals(synthesis.witness, zkey.n_public), timings)


def prove(
    backend: Backend,
    zkey: ZKey,
    witness: Witness,
    *,
    r1cs: R1CS | None = None,
    on_abc_released: Callable[[], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Proof:
    """Prove one witness: :func:`synthesize` then :func:`prove_synthesized`."""
    synthesis = synthesize(zkey, witness, r1cs=r1cs, cancelled=cancelled)
    return prove_synthesized(backend, zkey, synthesis, on_abc_released=on_abc_released, cancelled=cancelled)
