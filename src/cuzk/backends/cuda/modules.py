"""Building the kernel modules: the same .cu sources for the GPU (CuPy/NVRTC) or the host.

A module is one kernel file (ntt.cu and synth.cu for a curve's Fr, msm.cu for one curve's G1 or G2)
with its includes inlined and a constants prelude from constants.py. Inlining here, rather
than passing -I to NVRTC, makes the source string the whole input, so CuPy's on-disk
kernel cache can never serve a binary built from older headers.

Two runtimes run them with one interface (``xp`` is the array module, ``launch`` runs a
kernel): ``CupyRuntime`` on a GPU, and ``HostRuntime``, which compiles the same sources with
the host C++ compiler and runs each block's threads one after another (common.cuh). The host
runtime is how CI, which has no GPU, checks the kernels and all the orchestration around
them; it is slow and only for small inputs.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

from ...curves import Curve
from .constants import msm_prelude, ntt_prelude

KERNEL_DIR = Path(__file__).parent / "kernels"
_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.MULTILINE)


class CudaBackendError(RuntimeError):
    """The CUDA backend cannot run here (no compiler, no device) or a kernel failed."""


def _inline(name: str, seen: set[str]) -> str:
    if name in seen:
        return ""
    seen.add(name)
    text = (KERNEL_DIR / name).read_text().replace("#pragma once", "")
    return _INCLUDE.sub(lambda m: _inline(m.group(1), seen), text)


def module_source(curve: Curve, kind: str) -> str:
    """Full source of module ``kind`` ("ntt", "synth", "msm_g1", "msm_g2") for ``curve``."""
    if kind in ("ntt", "synth"):
        file, prelude = f"{kind}.cu", ntt_prelude(curve)
    elif kind in ("msm_g1", "msm_g2"):
        file, prelude = "msm.cu", msm_prelude(curve, kind[4:])
    else:
        raise ValueError(f"unknown kernel module {kind!r}")
    seen: set[str] = set()
    return _inline("common.cuh", seen) + prelude + _inline(file, seen)


def group_source(curve: Curve, group: str, body: str) -> str:
    """``body`` (CUDA kernels) compiled with one group's field and point types (group.cuh).

    For code outside the package that works on points with the same arithmetic, e.g. the
    benchmark's input generator.
    """
    seen: set[str] = set()
    return _inline("common.cuh", seen) + msm_prelude(curve, group) + _inline("group.cuh", seen) + body


def source_digest(source: str) -> str:
    """Name of a module's prebuilt binary: the source's hash, so a stale binary is never picked up."""
    return hashlib.sha256(source.encode()).hexdigest()[:32]


PREBUILT_ENV = "CUZK_CUDA_PREBUILT"


def prebuild(source: str, directory: Path, arch: str = "sm_90", nvcc: str = "nvcc") -> Path:
    """Compile ``source`` to ``directory/<digest>.cubin`` with nvcc (a machine without a GPU can do this).

    CupyRuntime loads such a cubin instead of compiling when $CUZK_CUDA_PREBUILT names the
    directory: it saves the first-use NVRTC compile, which is mostly ptxas on the inlined field
    products (nvcc 13, one loaded CPU core, GPU_NOTES v8): BN254 msm_g1 ~40-60 s, BLS12-381
    msm_g1 ~20-27 s (its 12-limb products inline only in the accumulation and bucket joins,
    field.cuh), msm_g2 ~10 s, ntt, synth and fixed_base a few seconds each.
    """
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{source_digest(source)}.cubin"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "module.cu"
        src.write_text(source)
        out = Path(tmp) / "module.cubin"
        res = subprocess.run([nvcc, "-std=c++17", f"-arch={arch}", "-cubin", "-o", str(out), str(src)], capture_output=True, text=True)
        if res.returncode != 0:
            raise CudaBackendError(f"nvcc failed:\n{res.stderr[-4000:]}")
        shutil.copyfile(out, target)
    return target


class _Modules:
    """A runtime's modules by (curve, kind): kernels launch by the thousand per second, and building a module's source
    (reading and inlining the .cu files, hashing the result) at each launch cost more host time than the launches."""

    def module(self, curve: Curve, kind: str):
        key = (curve.name, kind)
        mod = self._by_kind.get(key)
        if mod is None:
            mod = self._by_kind[key] = self.compile(module_source(curve, kind))
        return mod


class CupyRuntime(_Modules):
    """Kernels compiled by NVRTC through CuPy (cached on disk by CuPy), arrays in device memory."""

    name = "cuda"

    def __init__(self, device: int = 0):
        import cupy

        self.xp = cupy
        self.device_id = device
        self.device = cupy.cuda.Device(device)
        self._modules: dict[str, object] = {}
        self._by_kind: dict[tuple[str, str], object] = {}
        self._functions: dict[tuple[int, str], object] = {}  # (id of a kept module, kernel) → its function
        self._lock = threading.Lock()
        self._prebuilt = os.environ.get(PREBUILT_ENV)
        self.launch_count = 0  # kernel launches and graph replays so far (benchmarks count them per MSM or proof)
        with self.device:
            props = cupy.cuda.runtime.getDeviceProperties(device)
        self.device_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        self.multiprocessors = int(props["multiProcessorCount"])

    def activate(self):
        """Context that makes this device current (arrays allocated and kernels run on it)."""
        return self.device

    def new_stream(self):
        """A non-blocking stream on this device: its work never waits for (nor holds up) the legacy default stream's."""
        with self.device:
            return self.xp.cuda.Stream(non_blocking=True)

    @contextlib.contextmanager
    def use_stream(self, stream):
        """Make ``stream`` the calling thread's current stream on this device (CuPy keeps one per thread): every
        kernel, elementwise op and pool allocation the thread makes here goes to it."""
        with self.device, stream:
            yield

    def synchronize_stream(self) -> None:
        """Block until the calling thread's current stream has done the work queued on it."""
        with self.device:
            self.xp.cuda.get_current_stream().synchronize()

    def empty(self, shape, dtype):
        with self.device:
            return self.xp.empty(shape, dtype=dtype)

    def compute_event(self):
        """An event after the work queued so far on the calling thread's current stream (its proof's compute stream).

        CuPy's memory pool reuses a block freed on a stream for the next allocation there,
        ordered by that stream; a copy on a copy stream into such a block must first wait for
        this event, or it could overwrite memory a queued kernel still reads.
        """
        with self.device:
            event = self.xp.cuda.Event(disable_timing=True)
            event.record()
        return event

    def copy_async(self, out, host: np.ndarray, after, stream):
        """Copy ``host`` into device array ``out`` on copy ``stream`` once ``after`` has happened; returns the
        copy's completion event. It overlaps kernels only when ``host`` is page-locked, and ``host`` must
        stay unchanged until the event has completed."""
        with self.device:
            if after is not None:
                stream.wait_event(after)
            out.set(host, stream=stream)
            done = self.xp.cuda.Event(disable_timing=True)
            done.record(stream)
        return done

    def wait_event(self, event) -> None:
        """Make later work on the calling thread's current stream wait for ``event``, without blocking the host."""
        with self.device:
            self.xp.cuda.get_current_stream().wait_event(event)

    def is_pinned(self, host: np.ndarray) -> bool:
        """Whether ``host``'s memory is page-locked (a DMA source the copy engine reads without a staging copy)."""
        try:
            attrs = self.xp.cuda.runtime.pointerGetAttributes(host.ctypes.data)
        except Exception:  # pageable memory unknown to CUDA: older runtimes raise instead of answering 0
            return False
        kind = getattr(attrs, "type", getattr(attrs, "memoryType", -1))  # the field's name differs across CuPy versions
        if kind is not None and kind >= 0:
            return int(kind) == 1  # cudaMemoryTypeHost
        return bool(attrs.hostPointer)  # versions without it: only registered host memory has a host pointer

    def compile(self, source: str):
        digest = source_digest(source)
        with self._lock:
            mod = self._modules.get(digest)
            if mod is None:
                cubin = Path(self._prebuilt) / f"{digest}.cubin" if self._prebuilt else None
                with self.device:
                    if cubin is not None and cubin.exists():
                        mod = self.xp.RawModule(path=str(cubin))
                    else:
                        mod = self.xp.RawModule(code=source, options=("-std=c++17",))
                        mod.compile()
                self._modules[digest] = mod
            return mod

    def launch(self, module, kernel: str, grid: int, block: int, args: tuple, shared_bytes: int = 0) -> None:
        self.launch_count += 1
        fn = self._functions.get((id(module), kernel))
        if fn is None:
            fn = self._functions[(id(module), kernel)] = module.get_function(kernel)
        if shared_bytes > 48 * 1024 and fn.max_dynamic_shared_size_bytes < shared_bytes:
            fn.max_dynamic_shared_size_bytes = shared_bytes
        with self.device:
            fn((grid,), (block,), args, shared_mem=shared_bytes)

    def memset(self, arr, byte: int) -> None:
        """Every byte of contiguous device array ``arr`` set to ``byte``, on the current stream (capturable)."""
        with self.device:
            self.xp.cuda.runtime.memsetAsync(arr.data.ptr, byte, arr.nbytes, self.xp.cuda.get_current_stream().ptr)

    def copy(self, out, src) -> None:
        """Contiguous device array ``src`` into ``out`` (as many bytes) on the current stream: one memcpy where CuPy's
        ``out[...] = src`` launches a copy kernel (host time that a small MSM's graph replay waits for)."""
        rt = self.xp.cuda.runtime
        with self.device:
            rt.memcpyAsync(out.data.ptr, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice, self.xp.cuda.get_current_stream().ptr)

    def capture(self, record: Callable[[], None]):
        """The launches and memsets ``record()`` queues, captured (not run) as a CUDA graph to ``replay``. They must
        neither allocate nor wait for the device; relaxed mode, so other threads' work goes on meanwhile."""
        cuda = self.xp.cuda
        with self.device:
            stream = cuda.Stream(non_blocking=True)
            with stream:
                stream.begin_capture(mode=cuda.runtime.streamCaptureModeRelaxed)
                try:
                    record()
                finally:
                    graph = stream.end_capture()
        return graph

    def replay(self, graph) -> None:
        """Run a captured graph on the calling thread's current stream: one launch for all of it."""
        self.launch_count += 1
        with self.device:
            graph.launch(self.xp.cuda.get_current_stream())

    def to_device(self, host: np.ndarray):
        with self.device:
            return self.xp.asarray(host)

    def to_host(self, arr) -> np.ndarray:
        with self.device:
            return self.xp.asnumpy(arr)

    def synchronize(self) -> None:
        self.device.synchronize()

    def mark(self):
        """A point in the device's stream of work (for phase timings, and for waiting on copies)."""
        with self.device:
            event = self.xp.cuda.Event()
            event.record()
        return event

    def elapsed_ms(self, start, stop) -> float:
        stop.synchronize()
        return self.xp.cuda.get_elapsed_time(start, stop)

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes on the device, as cudaMemGetInfo reports them."""
        with self.device:
            return self.xp.cuda.runtime.memGetInfo()

    def free_cached(self) -> None:
        """Hand CuPy's cached free blocks back to the driver, so memGetInfo tells the truth."""
        with self.device:
            self.xp.get_default_memory_pool().free_all_blocks()


def host_compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


def _cache_dir() -> Path:
    base = os.environ.get("CUZK_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cuzk")
    path = Path(base) / "cuda-host"
    path.mkdir(parents=True, exist_ok=True)
    return path


class HostRuntime(_Modules):
    """The kernels built for the host CPU and run serially: CI's stand-in for a GPU."""

    name = "cuda-host-emulation"
    multiprocessors = 1
    # A built module is loaded once per process and its launch state (block index, shared memory) is global,
    # so emulated devices in several threads take turns launching.
    _launch_lock = threading.Lock()

    def __init__(self):
        self.xp = np
        self._compiler = host_compiler()
        if self._compiler is None:
            raise CudaBackendError("no host C++ compiler (g++/clang++) for the CUDA host emulation")
        self._modules: dict[str, ctypes.CDLL] = {}
        self._by_kind: dict[tuple[str, str], ctypes.CDLL] = {}
        self._lock = threading.Lock()
        self.launch_count = 0

    def compile(self, source: str) -> ctypes.CDLL:
        digest = source_digest(source)
        with self._lock:
            lib = self._modules.get(digest)
            if lib is None:
                lib = ctypes.CDLL(str(self._build(source)))
                self._modules[digest] = lib
            return lib

    def _build(self, source: str) -> Path:
        digest = hashlib.sha256((self._compiler + "\0" + source).encode()).hexdigest()[:24]
        target = _cache_dir() / f"{digest}.so"
        if target.exists():
            return target
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            src = Path(tmp) / "module.cpp"
            src.write_text(source)
            out = Path(tmp) / "module.so"
            cmd = [self._compiler, "-std=c++17", "-O1", "-fno-strict-aliasing", "-shared", "-fPIC", "-w", "-o", str(out), str(src)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise CudaBackendError(f"host build of a CUDA module failed:\n{res.stderr[-4000:]}")
            os.replace(out, target)  # atomic: concurrent builders never load a half-written file
        return target

    def launch(self, module: ctypes.CDLL, kernel: str, grid: int, block: int, args: tuple, shared_bytes: int = 0) -> None:
        self.launch_count += 1
        fn = getattr(module, kernel)
        cargs = [_ctype(a) for a in args]
        smem = np.zeros(max(shared_bytes, 16) // 16 + 1, dtype=np.dtype((np.void, 16)))
        smem_ptr = ctypes.c_void_p(smem.ctypes.data)
        with HostRuntime._launch_lock:
            for b in range(grid):
                module.cuzk_emu_set_launch(ctypes.c_uint32(b), ctypes.c_uint32(grid), ctypes.c_uint32(block), smem_ptr)
                fn(*cargs)

    @staticmethod
    def activate():
        return contextlib.nullcontext()

    @staticmethod
    def new_stream():
        return None  # one serial "stream": each call runs to completion before it returns

    @staticmethod
    def use_stream(stream):
        return contextlib.nullcontext()

    @staticmethod
    def synchronize_stream() -> None:
        pass

    @staticmethod
    def empty(shape, dtype) -> np.ndarray:
        return aligned_empty(shape, dtype)

    @staticmethod
    def compute_event():
        return None

    @staticmethod
    def copy_async(out: np.ndarray, host: np.ndarray, after, stream):
        np.copyto(out, host)
        return None

    @staticmethod
    def wait_event(event) -> None:
        pass

    @staticmethod
    def is_pinned(host: np.ndarray) -> bool:
        return False

    @staticmethod
    def memset(arr: np.ndarray, byte: int) -> None:
        arr.reshape(-1).view(np.uint8)[:] = byte

    @staticmethod
    def copy(out: np.ndarray, src: np.ndarray) -> None:
        np.copyto(out, src)

    @staticmethod
    def capture(record: Callable[[], None]) -> Callable[[], None]:
        """The emulation's graph: the recording itself, run again at each replay."""
        return record

    def replay(self, graph: Callable[[], None]) -> None:
        launches = self.launch_count
        graph()
        self.launch_count = launches + 1  # one replay, as on the device

    @staticmethod
    def to_device(host: np.ndarray) -> np.ndarray:
        return aligned_copy(host)

    @staticmethod
    def to_host(arr: np.ndarray) -> np.ndarray:
        return np.array(arr)

    def synchronize(self) -> None:
        pass

    @staticmethod
    def mark() -> float:
        return time.perf_counter()

    @staticmethod
    def elapsed_ms(start: float, stop: float) -> float:
        return (stop - start) * 1e3

    def memory_info(self) -> tuple[int, int]:
        """The emulation pretends to have a small device, so chunking paths run in tests."""
        return (1 << 30, 1 << 30)

    def free_cached(self) -> None:
        pass


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array at a 64-byte-aligned address (kernels load 16-byte vectors)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, dtype=np.uint8)
    offset = (-raw.ctypes.data) % 64
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` at a 64-byte-aligned address."""
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def _ctype(arg):
    if isinstance(arg, np.ndarray):
        return ctypes.c_void_p(arg.ctypes.data)
    if isinstance(arg, np.uint32):
        return ctypes.c_uint32(int(arg))
    if isinstance(arg, np.uint64):
        return ctypes.c_uint64(int(arg))
    raise TypeError(f"kernel argument of unsupported type {type(arg).__name__}")


def is_device_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the device or its driver (a CUDA error), not of the job's inputs.

    The engine moves such a job to another device and stops using the failing one.
    """
    if isinstance(exc, CudaBackendError):
        return True
    kind = type(exc)
    return kind.__module__.startswith(("cupy", "cupy_backends")) and "CUDA" in kind.__name__


@cache
def cupy_device_count() -> int:
    """Number of CUDA devices CuPy sees (0 without CuPy, driver or device)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # ImportError, CUDARuntimeError, driver missing: all mean none
        return 0
