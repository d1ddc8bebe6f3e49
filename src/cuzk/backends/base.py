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

A ``DeviceBackend`` (CUDA) also has memory of its own: the prover keeps its vectors there,
the key manager's VRAM tier keeps keys' bases (and coefficients, for synthesis on the device)
resident there, and the engine gives it pinned staging buffers and asks it which failures are
the device's. It runs several proofs at once, one per thread, each inside a lane of its own
(``new_lane``: its streams). The CPU backend is a plain ``Backend``: callers ask
``is_device_backend`` rather than probing for attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from ..curves import Curve
from ..curves.ec import Point
from ..curves.serialize import g1_to_bytes, g2_to_bytes

if TYPE_CHECKING:
    from ..memory.pinned import PinnedBuffer
    from .cuda.synth import DeviceCoefficients
    from .cuda.vram import VramBudget, VramReservation


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

    def coset_evaluations(self, curve: Curve, vectors: list, shift: int) -> list:
        """For each vector of evaluations on <w>: the evaluations of the same polynomial on shift·<w>
        (``coset_ntt(intt(v), shift)``), the vectors transformed together where the backend gains by it. It takes
        the list over, emptying it: an input whose caller kept no other reference is freed once it is transformed
        (or copied), so the memory figures of ``prover.sizing`` hold."""
        ...

    # Multi-scalar multiplication ---------------------------------------------------
    def msm_g1(self, curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point: ...
    def msm_g2(self, curve: Curve, bases: np.ndarray, scalars: np.ndarray) -> Point: ...
    def msm_many(self, curve: Curve, msms, checkpoint: Callable[[], None] | None = None) -> list[Point]:
        """The sums of ``msms``, a proof's MSMs as (group "g1" | "g2", bases, scalars), in order. A device backend
        queues them back to back and waits once; MSMs that run one after another call ``checkpoint()`` between them
        (it may raise to stop the rest)."""
        ...


class StagingSource(Protocol):
    """Page-locked host buffers for a device's copies (``memory.pinned.PinnedPool`` is one)."""

    def try_get(self, nbytes: int, label: str = "") -> PinnedBuffer | None:
        """A pinned buffer of at least ``nbytes`` when the budget has room now, else None: never waits, since the
        thread asking (a proving thread) may be what frees the memory. Its ``array`` is the bytes; ``release()``
        gives it back."""
        ...


@runtime_checkable
class DeviceBackend(Backend, Protocol):
    """A backend with memory of its own (CUDA): vectors, resident key bases and MSM working sets live in its VRAM.

    Its Fr/NTT/MSM methods also take and give device arrays (see ``to_device``), and take a key
    from ``upload_key`` in place of the host key.
    """

    device: int  # CUDA ordinal
    vram: VramBudget  # its VRAM budget (keys.device registers as its evictor)

    def is_device_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a failure of the device or its driver (self-test the device), not of the job's input."""
        ...

    def attach_staging(self, staging: StagingSource) -> None:
        """Lend it pinned buffers for its host→device copies, so they overlap kernels (without: synchronous copies)."""
        ...

    def new_lane(self):
        """A context manager, made once per proving thread and entered around each proof: everything the backend
        launches, allocates or copies for the proof inside it runs on the lane's own streams, so proofs in other
        lanes overlap it; leaving waits for the proof's device work to end. ``close()`` it when the thread ends."""
        ...

    def try_reserve(self, nbytes: int, what: str) -> VramReservation | None:
        """``nbytes`` of its VRAM budget (idle resident keys evicted for them), or None when they do not fit."""
        ...

    def to_device(self, a):
        """A device copy of ``a`` (host or device array), for a caller that keeps its vectors there across calls."""
        ...

    def upload_in_background(self, a):
        """Start copying host array ``a`` to the device off the calling thread; ``result()`` gives the device array
        (call it even when the array is not needed any more: it hands the staging buffer back)."""
        ...

    def upload_key(self, zkey):
        """A copy of ``zkey`` whose MSM bases (``formats.zkey.KEY_BASES``) are resident in VRAM; all or nothing
        (raises a MemoryError when they do not fit). Give them back with ``free_key``."""
        ...

    def upload_bases_from(self, curve: Curve, group: str, n: int, chunks):
        """``n`` MSM bases resident in VRAM (a ``DeviceBases``), filled from staged chunks of their bytes in the zkey's
        layout (``keys.stream.StagedChunk``: each copied from its ring slot, which it holds until the copy ends);
        raises a MemoryError before reading any chunk when they do not fit."""
        ...

    def free_key(self, key) -> None:
        """Give back the VRAM of a key from ``upload_key`` (its coefficients too, when they were made resident)."""
        ...

    def upload_coefficients(self, curve: Curve, coeffs: np.ndarray, n_vars: int, domain_size: int) -> DeviceCoefficients:
        """A key's coefficient section (the zkey's structured array) resident in VRAM in the layout ``evaluate_ab``
        reads; raises a MemoryError (nothing kept) when it does not fit. ``free()`` gives it back."""
        ...

    def upload_coefficients_from(self, curve: Curve, n: int, n_vars: int, domain_size: int, passes) -> DeviceCoefficients:
        """``upload_coefficients`` from the section read twice in staged chunks of whole entries (``passes()`` gives an
        iterable of them; the caller has checked their indices): the host holds one chunk at a time."""
        ...

    def coefficient_layout_scratch_bytes(self, curve: Curve, domain_size: int, chunk_bytes: int) -> int:
        """Device bytes ``upload_coefficients_from`` needs beside the layout while building it from chunks of at most
        ``chunk_bytes`` (freed when it returns)."""
        ...

    def evaluate_ab(self, curve: Curve, coeffs: DeviceCoefficients, w):
        """Synthesis on the device: (A·w, B·w) in Montgomery form from resident ``coeffs`` and the witness ``w``
        (standard form), as ``backends.cpu.synth.evaluate_ab`` computes them; device arrays for a device ``w``."""
        ...

    def msm_working_bytes(self, curve: Curve, group: str, n: int, resident: bool = False, buffers: int = 1) -> int:
        """Upper bound of an n-point MSM's device working set; ``buffers`` chunks of bases in flight when they are
        not ``resident`` (2 while the next chunk's upload overlaps this one)."""
        ...

    def msm_table_bytes(self, curve: Curve, group: str, n: int) -> int:
        """Device bytes of the window table that n resident bases get on their first MSM when the budget has room
        (0: none); a cache beside them that the budget evicts for proofs."""
        ...

    def ntt_table_bytes(self, curve: Curve, n: int) -> int:
        """Device bytes of the twiddle and coset tables an n-point NTT builds on first use and keeps (reserved in
        the VRAM budget, never evicted)."""
        ...


def is_device_backend(backend) -> bool:
    """Whether ``backend`` has memory of its own (a ``DeviceBackend``: CUDA); the CPU backend proves from host memory.

    Answered once per class: a runtime protocol check inspects every member (tens of µs, several times a proof)."""
    kind = type(backend)
    answer = _DEVICE_BACKEND_CLASSES.get(kind)
    if answer is None:
        answer = _DEVICE_BACKEND_CLASSES[kind] = isinstance(backend, DeviceBackend)
    return answer


_DEVICE_BACKEND_CLASSES: dict[type, bool] = {}


def is_device_error_on(backend, exc: BaseException) -> bool:
    """Whether ``exc``, raised while proving on ``backend``, is its device's failure (then the device self-tests,
    ``backends.selftest``), not the job's: never on the CPU backend. Asked by in-process device workers and device
    worker processes alike."""
    return is_device_backend(backend) and backend.is_device_error(exc)


def msm_each(msms, msm: Callable[[str, np.ndarray, np.ndarray], Point],
             checkpoint: Callable[[], None] | None = None) -> list[Point]:
    """``msm_many`` one MSM at a time: ``msm(group, bases, scalars)`` for each of ``msms``, ``checkpoint()`` (which may
    raise to stop the rest) between them."""
    sums = []
    for i, (group, bases, scalars) in enumerate(msms):
        if i and checkpoint is not None:
            checkpoint()
        sums.append(msm(group, bases, scalars))
    return sums


def point_rows(curve: Curve, group: str, points: list[Point]) -> np.ndarray:
    """Reference points (``curves.ec``) as MSM bases in the layout above (``group`` "g1" or "g2"; ``None`` → all zero)."""
    encode, coords = (g1_to_bytes, (2,)) if group == "g1" else (g2_to_bytes, (2, 2))
    raw = b"".join(encode(curve, P) for P in points)
    return np.frombuffer(raw, dtype="<u4").reshape((len(points),) + coords + (curve.Fq.limbs32,)).copy()
