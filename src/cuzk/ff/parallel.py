"""numba ``parallel=True`` kernels that any thread may launch.

numba runs parallel kernels on a threading layer: tbb and omp are thread-safe; workqueue — what
numba falls back to where neither TBB nor an OpenMP runtime (libgomp) is installed, as in slim
container images — terminates the whole process when two threads launch parallel kernels at
once. The engine's threads do (a synthesis beside a CPU proof's NTT). ``parallel_kernel``
compiles like ``@njit(cache=True, parallel=True)`` and, under workqueue only, makes launches
take turns on one process-wide lock. It lives in the lowest layer with numba kernels, so every
layer above can use it.

OpenMP's worker threads are told to sleep between parallel regions rather than spin
(``OMP_WAIT_POLICY=PASSIVE``, unless the environment says otherwise; libgomp reads it when numba
loads its omp layer, at the first parallel launch). A proof runs dozens of short regions between
which Python runs (and the MSM's own thread pool works): spinning workers took those cores, and
on a busy 2-core machine a 2^15 proof's NTTs took 2-3x as long, its MSMs ~1.5x (a descheduled
worker delays every region's end). Where the machine is idle a sleeping worker wakes in microseconds.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable

import numba
from numba import njit

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see the module; before any parallel launch loads libgomp

_LAUNCH_LOCK = threading.RLock()
_layer: str | None = None


def launches_take_turns() -> bool:
    """Whether parallel launches must be serialized: the workqueue layer, or no launch yet to tell."""
    global _layer
    if _layer is None:
        try:
            _layer = numba.threading_layer()
        except ValueError:  # numba picks its layer at the first parallel launch
            return True
    return _layer == "workqueue"


def parallel_kernel(fn: Callable | None = None, **options) -> Callable:
    """``@njit(cache=True, parallel=True, **options)`` whose launches are safe from any thread (see the module)."""

    def wrap(f: Callable) -> Callable:
        kernel = njit(cache=True, parallel=True, **options)(f)

        @functools.wraps(f)
        def launch(*args, **kwargs):
            if launches_take_turns():
                with _LAUNCH_LOCK:
                    return kernel(*args, **kwargs)
            return kernel(*args, **kwargs)

        launch.kernel = kernel  # the dispatcher itself (signatures, inspection)
        return launch

    return wrap(fn) if fn is not None else wrap
