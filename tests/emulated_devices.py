"""Devices for the tests' device errors: the CUDA backend emulated on the host (the real kernels built for the CPU, each
backend its own VRAM budget), runtimes that fail as sick GPUs do, and a real GPU with an injected transient fault.

A module of its own so that a device worker process, which is spawned and imports what it unpickles, can make one:
``EmulatedDevices`` (or ``gpu_with_a_transient_fault``) is what ``Engine(process_backend=)`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from cuzk.backends.cuda import CudaBackend, CudaBackendError, HostRuntime, VramBudget
from cuzk.backends.cuda.modules import CupyRuntime, host_compiler

MiB = 1 << 20


def need_host_compiler() -> None:
    if host_compiler() is None:
        pytest.skip("no host C++ compiler for the CUDA host emulation")


@dataclass(frozen=True)
class EmulatedDevices:
    """Makes emulated devices: ordinal → a CudaBackend on the runtime class ``runtimes`` names for it (HostRuntime for
    the others), with a VRAM budget of ``vram_bytes``. Picklable, for device worker processes."""

    runtimes: dict[int, type[HostRuntime]] = field(default_factory=dict)
    vram_bytes: int = 256 * MiB

    def __call__(self, device: int, runtime: HostRuntime | None = None) -> CudaBackend:
        runtime = runtime or self.runtimes.get(device, HostRuntime)()
        return CudaBackend(device=device, runtime=runtime, vram_budget=VramBudget(self.vram_bytes, device))


def emulated(device: int, vram_bytes: int = 256 * MiB, runtime: HostRuntime | None = None) -> CudaBackend:
    need_host_compiler()
    return EmulatedDevices(vram_bytes=vram_bytes)(device, runtime)


class FailingRuntime(HostRuntime):
    """A device whose every kernel launch fails, as a GPU does after a fatal CUDA error."""

    def launch(self, *args, **kwargs):
        raise CudaBackendError("emulated device fault: an illegal memory access was encountered")


class OnceFailingRuntime(HostRuntime):
    """A device whose first launch fails and every later one works: a transient fault."""

    failed = False

    def launch(self, *args, **kwargs):
        if not self.failed:
            self.failed = True
            raise CudaBackendError("emulated transient fault: unspecified launch failure")
        return super().launch(*args, **kwargs)


class CorruptingRuntime(HostRuntime):
    """A device that computes but returns wrong bits."""

    @staticmethod
    def to_host(arr):
        out = np.array(arr)
        out.reshape(-1)[0] ^= 1
        return out


class OnceFailingNttRuntime(CupyRuntime):
    """A real GPU whose first NTT launch raises a CUDA error (injected: a transient fault, after which it works; NTTs
    are never captured in CUDA graphs, so the failed launch leaves nothing half-recorded)."""

    def __init__(self, device: int = 0):
        super().__init__(device)
        self.failed = False

    def launch(self, module, kernel, grid, block, args, shared_bytes=0):
        if not self.failed and kernel.startswith("ntt"):
            self.failed = True
            raise CudaBackendError(f"injected transient fault: {kernel} launch failed")
        return super().launch(module, kernel, grid, block, args, shared_bytes)


def gpu_with_a_transient_fault(device: int) -> CudaBackend:
    return CudaBackend(device=device, runtime=OnceFailingNttRuntime(device))
