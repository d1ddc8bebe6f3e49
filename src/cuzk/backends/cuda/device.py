"""One CUDA device as the NTT and MSM code sees it: its runtime, VRAM budget, lanes and uploads.

Several proofs run on one device at once, each in its own ``Lane``: a non-blocking compute
stream, which the proving thread makes its current stream (CuPy keeps one per thread), so
every kernel, elementwise op and pool allocation of that proof goes there; a copy stream and a
copy thread of its own for host→device copies, from page-locked memory (a hot key's buffer, or
a staging buffer from the engine's pinned pool), so they overlap kernels. Every copy waits for
an event recorded on its proof's compute stream when its destination was allocated, because
CuPy's pool hands a block freed there to the next allocation at once, trusting that stream's
order. A thread outside any lane uses the device's default lane: its current stream (the
legacy default one) and a shared copy stream. The same orchestration runs on the host
emulation runtime (modules.HostRuntime), which is how it is tested without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..base import StagingSource
from .modules import CupyRuntime
from .vram import VramBudget, VramReservation

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

    @property
    def event(self):
        """The copy's completion event (None once ``result`` has waited for it, or where copies are synchronous)."""
        return self._event

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


class Lane:
    """One proof's way onto the device: kernels and allocations on ``compute`` (None: the calling thread's current
    stream), its uploads on ``copy`` from its own ``copier`` thread, so K proofs never wait on each other's copies.

    ``with lane:`` around a proof makes ``compute`` the thread's current stream; leaving waits until the work
    queued there is done, so nothing a proof launched outlives it (its reservations and buffers go back after).
    """

    def __init__(self, gpu: CudaDevice, compute, copy, name: str):
        self._gpu, self.compute, self.copy, self._name = gpu, compute, copy, name
        self._copier: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._entered: contextlib.ExitStack | None = None

    def copier(self) -> ThreadPoolExecutor:
        """The thread that stages and starts this lane's next upload while its proving thread drives kernels."""
        with self._lock:
            if self._copier is None:
                self._copier = ThreadPoolExecutor(1, thread_name_prefix=f"cuzk-copy-{self._name}")
            return self._copier

    def __enter__(self) -> Lane:
        runtime = self._gpu.runtime
        stack = contextlib.ExitStack()
        stack.enter_context(runtime.activate())
        stack.enter_context(runtime.use_stream(self.compute))
        self._gpu._local.lane = self
        self._entered = stack
        return self

    def __exit__(self, exc_type, *exc) -> None:
        stack, self._entered = self._entered, None
        try:
            self._gpu.runtime.synchronize_stream()
        except Exception:
            if exc_type is None:  # a failing device: the proof's own error says more than this one
                raise
        finally:
            self._gpu._local.lane = None
            stack.close()

    def close(self) -> None:
        """Stop its copy thread (the lane's proving worker has ended)."""
        with self._lock:
            copier, self._copier = self._copier, None
        if copier is not None:
            copier.shutdown(wait=True)


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
        self._staging: StagingSource | None = None
        self._local = threading.local()  # .lane: the lane the calling thread is in
        self._lanes_lock = threading.Lock()
        self._lanes_made = 0
        with self.runtime.activate():
            self._default_lane = Lane(self, None, self.runtime.new_stream(), str(device))

    def new_lane(self) -> Lane:
        """A lane of its own (compute and copy streams, copy thread) for one proving thread; see ``Lane``."""
        with self._lanes_lock:
            self._lanes_made += 1
            name = f"{self.vram.device}-{self._lanes_made}"
        with self.runtime.activate():
            return Lane(self, self.runtime.new_stream(), self.runtime.new_stream(), name)

    def lane(self) -> Lane:
        """The lane the calling thread is in, or the device's default lane."""
        return getattr(self._local, "lane", None) or self._default_lane

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

    def host_copies(self, arrays, what: str):
        """Reserve, for the length of an operation, the device copies it makes of its host (numpy) ``arrays``: a proof
        whose vectors did not fit on the device passes host vectors, and each operation copies them in and out. Waits
        while other lanes' transient reservations (MSMs, such copies) leave no room; a no-op without host arrays."""
        nbytes = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
        return self.vram.reserve_waiting(nbytes, what) if nbytes else contextlib.nullcontext()

    def result(self, dev, to_host: bool):
        """A result where the caller's input was: copied back to the host when it gave a host array."""
        return self.runtime.to_host(dev) if to_host else dev

    @on_device
    def upload_async(self, a, out=None, after=None, lane: Lane | None = None) -> Upload:
        """Start copying host array ``a`` to the device (device arrays pass through); see ``Upload``.

        ``out`` (a device array of ``a``'s shape) receives it, with ``after`` the compute-stream event
        the copy must wait for (see ``CupyRuntime.compute_event``); by default a new array, allocated
        here on the calling thread. The copy runs on ``lane``'s copy stream (default: the calling
        thread's lane; a copy thread passes the lane of the proof it works for).
        """
        if not isinstance(a, np.ndarray):
            return Upload(self.runtime, a, None)
        a = np.ascontiguousarray(a)
        if out is None:
            out = self.runtime.empty(a.shape, a.dtype)
            after = self.runtime.compute_event()
        stream = (lane or self.lane()).copy
        buffer = None
        if self._staging is not None and a.nbytes and not self.runtime.is_pinned(a):
            buffer = self._staging.try_get(a.nbytes, label=f"staging for device {self.vram.device}")
        if buffer is None:  # page-locked already (hot keys), or no host memory to spare: straight from ``a``
            return Upload(self.runtime, out, self.runtime.copy_async(out, a, after, stream))
        try:
            view = buffer.array[: a.nbytes].view(a.dtype).reshape(a.shape)
            np.copyto(view, a)
            event = self.runtime.copy_async(out, view, after, stream)
        except BaseException:
            buffer.release()
            raise
        return Upload(self.runtime, out, event, buffer)

    @on_device
    def upload_in_background(self, a) -> Upload | _Deferred:
        """``upload_async`` run on the calling lane's copy thread, so staging ``a`` (a host memcpy) overlaps the
        caller's kernels.

        The destination is allocated here, on the caller's thread and stream, so the copy is
        ordered after exactly the work queued before this call.
        """
        if not isinstance(a, np.ndarray):
            return Upload(self.runtime, a, None)
        lane = self.lane()
        out = self.runtime.empty(a.shape, a.dtype)
        return _Deferred(lane.copier().submit(self.upload_async, a, out, self.runtime.compute_event(), lane))

    @on_device
    def copy_chunks(self, out, chunks) -> None:
        """Fill the flat uint32 device array ``out`` from consecutive staged chunks (``keys.stream.StagedChunk``: a
        ring slot's bytes, page-locked where CUDA exists, copied straight from it; a host chunk is staged through the
        pinned pool as any upload), each on the calling lane's copy stream with its slot held until its copy ends;
        the compute stream is ordered after every copy."""
        after, at = self.runtime.compute_event(), 0
        for chunk in chunks:
            words = chunk.array.view(np.uint32)
            if at + words.size > out.size:
                raise CudaInputError(f"staged chunks hold more than the {out.size * 4} bytes of their destination")
            upload = self.upload_async(words, out[at : at + words.size], after)
            chunk.hold(upload.event)
            upload.result()
            at += words.size
        if at != out.size:
            raise CudaInputError(f"staged chunks held {at * 4} bytes, their destination {out.size * 4}")

    def try_reserve(self, nbytes: int, what: str) -> VramReservation | None:
        """``nbytes`` of the VRAM budget (idle resident keys evicted for it), or None when they do not fit."""
        return self.vram.try_reserve(nbytes, what)

    def to_device(self, a):
        """A device copy of ``a`` (for a caller that keeps its vectors on the device across calls)."""
        return self.upload_async(a).result()
