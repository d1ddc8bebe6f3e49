"""The engine's proving devices: which backends it proves on, and how many proofs each runs at once.

One CudaBackend per configured GPU (each its own VRAM budget), or the one CPU backend. A GPU
runs K proofs at once (``proofs_per_device``), each in a lane of its own streams, so it never
waits for one proof's host-side gaps; ``prover.sizing.proofs_in_flight`` says how many fit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..backends.base import is_device_backend
from ..formats.zkey import ZKeyHeader
from ..memory.units import format_size
from ..prover.sizing import proofs_in_flight
from .config import EngineConfig

log = logging.getLogger("cuzk.engine")


def make_backends(config: EngineConfig) -> list:
    """One backend per configured GPU (each its own CudaBackend and VRAM budget), or the one CPU backend."""
    from ..backends import get_backend

    ordinals = device_ordinals(config)
    if ordinals is None:
        return [get_backend("cpu")]
    from ..backends.cuda import CudaBackend

    return [CudaBackend(device=d) for d in ordinals]


def device_ordinals(config: EngineConfig) -> list[int] | None:
    """The CUDA ordinals the engine proves on, or None for the CPU backend (``backend``, ``devices``)."""
    from ..backends import BackendUnavailableError, cuda_available

    if config.backend == "cpu" or (config.backend == "auto" and not cuda_available()):
        return None
    if not cuda_available():
        raise BackendUnavailableError("the cuda backend needs CuPy and an NVIDIA GPU; none was found")
    from ..backends.cuda import cupy_device_count

    count = cupy_device_count()
    ordinals = list(range(count)) if config.devices == "all" else config.devices
    missing = [d for d in ordinals if d >= count]
    if missing:
        raise BackendUnavailableError(f"devices {missing} do not exist: CuPy sees {count} CUDA device(s) "
                                      "(ordinals count from 0 among those CUDA_VISIBLE_DEVICES leaves visible)")
    return ordinals


def proofs_per_backend(wanted: int | str, backends: list, headers: Iterable[ZKeyHeader]) -> list[int]:
    """K for each backend (1 for the CPU's); a configured count that does not fit a device is lowered, and logged."""
    headers = list(headers)
    out = []
    for backend in backends:
        if not is_device_backend(backend):
            out.append(1)  # CPU proving takes every core: a second proof would only take turns with it
            continue
        plan = proofs_in_flight(wanted, backend, headers)
        if plan.lowered:
            log.warning("device %d: proofs_per_device = %d lowered to %d: %d proofs of %s each do not fit beside the "
                        "largest registered key's resident bases (and coefficients, where they fit: %s) in its %s "
                        "VRAM budget", backend.device, plan.wanted, plan.proofs, plan.wanted,
                        format_size(plan.proof_bytes), format_size(plan.bases_bytes), format_size(plan.budget_bytes))
        out.append(plan.proofs)
    return out
