"""CUDA backend: NTT and MSM kernels (kernels/*.cu) compiled with CuPy on first use.

``available()`` says whether CuPy finds a device; ``CudaBackend`` is the DeviceBackend protocol
on one device. Importing this package needs neither CuPy nor a GPU.
"""

from __future__ import annotations

from .backend import CudaBackend
from .device import CudaInputError
from .modules import CudaBackendError, HostRuntime, cupy_device_count, is_device_error
from .msm import ScalarOutOfRangeError, window_bits
from .synth import DeviceCoefficients
from .vram import DeviceBases, VramBudget, VramExhaustedError


def available() -> bool:
    """True when CuPy is importable and sees at least one CUDA device."""
    return cupy_device_count() > 0


__all__ = [
    "CudaBackend",
    "CudaBackendError",
    "CudaInputError",
    "DeviceBases",
    "DeviceCoefficients",
    "HostRuntime",
    "ScalarOutOfRangeError",
    "VramBudget",
    "VramExhaustedError",
    "available",
    "is_device_error",
    "window_bits",
]
