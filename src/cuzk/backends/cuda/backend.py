"""The CUDA backend: Fr vector ops, NTTs and MSMs on a GPU through CuPy.

Arrays follow base.py's layout. Host (numpy) arguments give host results; CuPy arrays
are taken without a copy to the host and give CuPy results, so a caller that keeps its
vectors on the device pays no transfers (the prover does: ``to_device``, ``upload_in_background``).

``CudaBackend`` is the base.DeviceBackend protocol over four parts, one concept each:
device.py (the device's runtime, VRAM budget, lanes, staging and uploads), ntt.py (Fr
vectors and transforms), msm.py (MSMs, their chunk planning and resident bases) and synth.py
(A·w and B·w from resident coefficients). Every method may be called from several threads at
once, each in its own lane (``new_lane``).
"""

from __future__ import annotations

from ...curves import Curve
from ...curves.ec import Point
from ..base import StagingSource
from .device import CudaDevice, Lane, on_device
from .modules import is_device_error
from .msm import MIN_MSM_CHUNK, CudaMsm
from .ntt import NTT_LOG_BLOCK_ELEMENTS, CudaNtt
from .synth import LONG_ROW_ENTRIES, CudaSynthesis, DeviceCoefficients
from .vram import DeviceBases, VramBudget, VramReservation


class CudaBackend:
    """The DeviceBackend protocol on one CUDA device (``runtime`` overrides it, e.g. the host emulation).

    ``ntt_log_block`` (elements per NTT block, log2), ``min_msm_chunk`` (the fewest
    points an MSM chunk may have) and ``long_row`` (entries above which synthesis sums a row
    with a block) are tuning knobs; tests lower them to reach the many-pass, many-chunk and
    long-row paths at small sizes. ``msm`` holds the MSM's own knobs
    (``overlap``, ``phase_log``) and its chunk planner (``msm.plan``).
    """

    name = "cuda"

    def __init__(self, device: int = 0, runtime=None, vram_budget: VramBudget | None = None,
                 ntt_log_block: int = NTT_LOG_BLOCK_ELEMENTS, min_msm_chunk: int = MIN_MSM_CHUNK,
                 long_row: int = LONG_ROW_ENTRIES):
        self.device = device
        self.gpu = CudaDevice(device, runtime, vram_budget)
        self.runtime, self.vram = self.gpu.runtime, self.gpu.vram
        self.transforms = CudaNtt(self.gpu, ntt_log_block)
        self.msm = CudaMsm(self.gpu, min_msm_chunk)
        self.synthesis = CudaSynthesis(self.gpu, long_row)

    # ---------------------------------------------------------------- the device
    is_device_error = staticmethod(is_device_error)  # a CUDA or driver failure (modules.py), not bad input

    def attach_staging(self, staging: StagingSource) -> None:
        self.gpu.attach_staging(staging)

    def new_lane(self) -> Lane:
        return self.gpu.new_lane()

    def try_reserve(self, nbytes: int, what: str) -> VramReservation | None:
        return self.gpu.try_reserve(nbytes, what)

    def to_device(self, a):
        return self.gpu.to_device(a)

    def upload_in_background(self, a):
        return self.gpu.upload_in_background(a)

    # ---------------------------------------------------------------- Fr vectors
    @on_device
    def fr_mul(self, curve: Curve, a, b):
        return self.transforms.elementwise(curve, 0, a, b)

    @on_device
    def fr_sub(self, curve: Curve, a, b):
        return self.transforms.elementwise(curve, 1, a, b)

    @on_device
    def fr_to_mont(self, curve: Curve, a):
        return self.transforms.elementwise(curve, 2, a)

    @on_device
    def fr_from_mont(self, curve: Curve, a):
        return self.transforms.elementwise(curve, 3, a)

    @on_device
    def ntt(self, curve: Curve, a):
        return self.transforms.transform(curve, a, inverse=False, shift=None)

    @on_device
    def intt(self, curve: Curve, a):
        return self.transforms.transform(curve, a, inverse=True, shift=None)

    @on_device
    def coset_ntt(self, curve: Curve, a, shift: int):
        return self.transforms.transform(curve, a, inverse=False, shift=shift)

    def coset_evaluations(self, curve: Curve, vectors: list, shift: int) -> list:
        """One vector after another (each transform fills the device), each input dropped once transformed."""
        out = []
        while vectors:
            out.append(self.coset_ntt(curve, self.intt(curve, vectors.pop(0)), shift))
        return out

    # ---------------------------------------------------------------- MSM
    @on_device
    def upload_bases(self, curve: Curve, group: str, bases) -> DeviceBases:
        return self.msm.upload_bases(curve, group, bases)

    @on_device
    def upload_bases_from(self, curve: Curve, group: str, n: int, chunks) -> DeviceBases:
        return self.msm.upload_bases_from(curve, group, n, chunks)

    @on_device
    def upload_key(self, zkey):
        return self.msm.upload_key(zkey)

    def free_key(self, key) -> None:
        self.msm.free_key(key)
        self.synthesis.free_key(key)

    @on_device
    def msm_g1(self, curve: Curve, bases, scalars) -> Point:
        return self.msm.msm(curve, "g1", bases, scalars)

    @on_device
    def msm_g2(self, curve: Curve, bases, scalars) -> Point:
        return self.msm.msm(curve, "g2", bases, scalars)

    @on_device
    def msm_many(self, curve: Curve, msms, checkpoint=None) -> list[Point]:
        return self.msm.msm_many(curve, msms, checkpoint)

    def msm_working_bytes(self, curve: Curve, group: str, n: int, resident: bool = False, buffers: int = 1) -> int:
        return self.msm.working_bytes(curve, group, n, resident, buffers)

    def msm_table_bytes(self, curve: Curve, group: str, n: int) -> int:
        return self.msm.table_bytes(curve, group, n) if self.msm.window_tables else 0

    def ntt_table_bytes(self, curve: Curve, n: int) -> int:
        return self.transforms.table_bytes(curve, n)

    # ---------------------------------------------------------------- synthesis
    @on_device
    def upload_coefficients(self, curve: Curve, coeffs, n_vars: int, domain_size: int) -> DeviceCoefficients:
        return self.synthesis.upload(curve, coeffs, n_vars, domain_size)

    @on_device
    def upload_coefficients_from(self, curve: Curve, n: int, n_vars: int, domain_size: int, passes) -> DeviceCoefficients:
        return self.synthesis.upload_from(curve, n, n_vars, domain_size, passes)

    def coefficient_layout_scratch_bytes(self, curve: Curve, domain_size: int, chunk_bytes: int) -> int:
        return self.synthesis.layout_scratch_bytes(curve, domain_size, chunk_bytes)

    @on_device
    def evaluate_ab(self, curve: Curve, coeffs: DeviceCoefficients, w):
        return self.synthesis.evaluate(curve, coeffs, w)
