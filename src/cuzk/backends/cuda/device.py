"""One CUDA device as the NTT and MSM code sees it: its runtime, VRAM budget, copy stream and uploads.

Kernels run on the device's current (legacy default) stream; host→device copies of bases and
vectors run on a separate non-blocking copy stream, from page-locked memory (a hot key's
buffer, or a staging buffer from the engine's pinned pool), so they overlap kernels. Every
copy waits for an event recorded on the compute stream when its destination was allocated,
because CuPy's pool hands a block freed there to the next allocation at once, trusting that
stream's order. The same orchestration runs on the host emulation runtime
(modules.HostRuntime), which is how it is tested without a GPU.
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..base import StagingSource
from .modules import CupyRuntime
from .vram import VramBudget, VramExhaustedError, VramReservation

THREADS = 256


class CudaInputError(ValueError):
    """An argument does not have the layout base.py specifies."""


def check_vector(a, limbs: int, what: str) -> int:
    if getattr(a, "ndim", None) != 2 or a.shape[1] != limbs or a.dtype != np.uint32:
        raise CudaInputError(
            f"{what}: expected a uint32 array of shape (n, {limbs}), got {getattr(a, 'dtype', type(a).__name__)} "
            f"{getattr(a, 'shape', '')}"
        )
    return int(a.shape[0])


def grid(n: int) -> int:
    """Blocks of THREADS threads for one thread per item."""
    return max(1, -(-n // THREADS))


def on_device(method):
    """Run a public method with its device current (``self.runtime``), so every array it makes lives there (multi-GPU)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.runtime.activate():
            return method(self, *args, **kwargs)
    return wrapper


class Upload:
    """A host→device copy in flight (``CudaDevice.upload_async``).

    ``result()`` orders the compute stream after the copy (without blocking the host unless a
    staging buffer must go back to its pool) and returns the device array.
    """

    def __init__(self, runtime, array, event, staging=None):
        self._runtime = runtime
        self._array = array
        self._event = event
        self._staging = staging

    def result(self):
        if self._event is not None:
            self._runtime.wait_event(self._event)
            if self._staging is not None:
                self._event.synchronize()  # the pinned buffer is read by the copy until here
            self._event = None
        if self._staging is not None:
            self._staging.release()
            self._staging: StagingSource | None = None
        return self._array


class _Deferred:
    """An Upload still being started on the copy thread."""

    def __init__(self, future):
        self._future = future

    def result(self):
        return self._future.result().result()


class CudaDevice:
    """The device ``runtime`` drives (a CupyRuntime on ordinal ``device`` unless given, e.g. the host emulation).

    ``vram``: the device's budget, by default what the device reports free. A staging source
    (``attach_staging``: a ``base.StagingSource`` such as the engine's pinned pool) lends
    page-locked buffers for copies from pageable host memory, so they run asynchronously on
    the copy stream and overlap kernels; without one such copies are synchronous. Sources
    already page-locked (hot keys) are copied directly.
    """

    def __init__(self, device: int = 0, runtime=None, vram_budget: VramBudget | None = None):
        self.runtime = runtime if runtime is not None else CupyRuntime(device)
        self.xp = self.runtime.xp
        if vram_budget is None:
            self.runtime.free_cached()
            free, _total = self.runtime.memory_info()
            vram_budget = VramBudget.from_free_memory(free, device)
        self.vram = vram_budget
        self._lock = threading.Lock()
        self._staging: StagingSource | None = None
        self._copier: ThreadPoolExecutor | None = None

    def attach_staging(self, staging: StagingSource) -> None:
        self._staging = staging

    def device_copy(self, a):
        """A device copy of ``a`` (host or device) and whether the caller gave a host array."""
        if isinstance(a, np.ndarray):
            return self.runtime.to_device(np.ascontiguousarray(a)), True
        return self.xp.ascontiguousarray(a).copy(), False

    def device_view(self, a):
        """``a`` on the device (a copy only of a host array) and whether the caller gave a host array."""
        if isinstance(a, np.ndarray):
            return self.runtime.to_device(np.ascontiguousarray(a)), True
        return self.xp.ascontiguousarray(a), False

    def result(self, dev, to_host: bool):
        """A result where the caller's input was: copied back to the host when it gave a host array."""
        return self.runtime.to_host(dev) if to_host else dev

    @on_device
    def upload_async(self, a, out=None, after=None) -> Upload:
        """Start copying host array ``a`` to the device (device arrays pass through); see ``Upload``.

        ``out`` (a device array of ``a``'s shape) receives it, with ``after`` the compute-stream event
        the copy must wait for (see ``CupyRuntime.compute_event``); by default a new array, allocated
        here on the calling thread.
        """
        if not isinstance(a, np.ndarray):
            return Upload(self.runtime, a, None)
        a = np.ascontiguousarray(a)
        if out is None:
            out = self.runtime.empty(a.shape, a.dtype)
            after = self.runtime.compute_event()
        buffer = None
        if self._staging is not None and a.nbytes and not self.runtime.is_pinned(a):
            buffer = self._staging.try_get(a.nbytes, label=f"staging for device {self.vram.device}")
        if buffer is None:  # page-locked already (hot keys), or no host memory to spare: straight from ``a``
            return Upload(self.runtime, out, self.runtime.copy_async(out, a, after))
        try:
            view = buffer.array[: a.nbytes].view(a.dtype).reshape(a.shape)
            np.copyto(view, a)
            event = self.runtime.copy_async(out, view, after)
        except BaseException:
            buffer.release()
            raise
        return Upload(self.runtime, out, event, buffer)

    @on_device
    def upload_in_background(self, a) -> Upload | _Deferred:
        """``upload_async`` run on the copy thread, so staging ``a`` (a host memcpy) overlaps the caller's kernels.

        The destination is allocated here, on the caller's thread and stream, so the copy is
        ordered after exactly the work queued before this call.
        """
        if not isinstance(a, np.ndarray):
            return Upload(self.runtime, a, None)
        out = self.runtime.empty(a.shape, a.dtype)
        return _Deferred(self.copy_thread().submit(self.upload_async, a, out, self.runtime.compute_event()))

    def try_reserve(self, nbytes: int, what: str) -> VramReservation | None:
        """``nbytes`` of the VRAM budget (idle resident keys evicted for it), or None when they do not fit."""
        try:
            return self.vram.reserve(nbytes, what)
        except VramExhaustedError:
            return None

    def to_device(self, a):
        """A device copy of ``a`` (for a caller that keeps its vectors on the device across calls)."""
        return self.upload_async(a).result()

    def copy_thread(self) -> ThreadPoolExecutor:
        """One thread that stages and starts the next chunk's upload while the proving thread drives kernels."""
        with self._lock:
            if self._copier is None:
                self._copier = ThreadPoolExecutor(1, thread_name_prefix=f"cuzk-copy-{self.vram.device}")
            return self._copier
