"""Compute backends behind one protocol (base.Backend): cpu (numba) and cuda (CuPy)."""

from __future__ import annotations

from .base import Backend

BACKEND_NAMES = ("auto", "cpu", "cuda")


class BackendUnavailableError(ValueError):
    pass


def cuda_available() -> bool:
    from importlib.util import find_spec

    if find_spec("cupy") is None:  # no CuPy: no need to import the CUDA backend (~0.1 s of a one-shot prove) to say so
        return False
    try:
        from . import cuda
    except ImportError:
        return False
    return cuda.available()


def get_backend(name: str = "auto") -> Backend:
    """The named backend; "auto" is CUDA when CuPy finds a GPU, else the CPU."""
    if name not in BACKEND_NAMES:
        raise BackendUnavailableError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if name == "cuda" or (name == "auto" and cuda_available()):
        if not cuda_available():
            raise BackendUnavailableError("the cuda backend needs CuPy and an NVIDIA GPU; none was found")
        from .cuda import CudaBackend

        return CudaBackend()
    from .cpu import CpuBackend

    return CpuBackend()
