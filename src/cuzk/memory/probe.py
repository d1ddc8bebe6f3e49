"""memprobe: measure how much memory can really be used, and what the kernel charges on top.

A child process allocates chunks (anonymous mmap, or page-locked host memory through CuPy
with ``pinned=True``) and touches every page, reading the cgroup's charged usage before each
chunk and stopping a safety distance short of the limit. The child runs with
``oom_score_adj = 1000`` so that, if the kernel kills anyway, it kills the child and the
caller lives to report it.

The parent reads the charged usage (usage − inactive_file, see limits.py) while the child is
ready but idle (``usage_before``), while it holds everything (``usage_peak``) and after it
exits (``usage_after``). ``overhead = usage_peak − usage_before − allocated`` is what the
kernel charged beyond the bytes allocated: page tables, and for pinned memory the driver's
own bookkeeping. The budget's margin is taken from it (plan.py).

Without a memory limit (no cgroup, or an unlimited one) the child stops a safety distance
short of MemAvailable instead.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import NamedTuple

from .limits import CgroupLocation, find_memory_cgroup, read_cgroup, read_meminfo
from .units import GiB, MiB, gib

# Below this the next chunk is not worth the page faults: the probe is done.
_MIN_CHUNK = 4 * MiB
_CHILD_SLACK = MiB


class ProbeError(RuntimeError):
    """The probe could not run (no CuPy for --pinned, the child failed to start, ...)."""


@dataclass
class ProbeResult:
    mode: str
    cgroup_version: int | None
    cgroup_path: str | None
    cgroup_limit_bytes: int | None
    cgroup_limit_source: str | None
    ceiling_bytes: int
    usage_source: str
    usage_before_bytes: int
    allocated_bytes: int
    allocated_gib: float
    usage_peak_bytes: int
    usage_after_bytes: int
    overhead_bytes: int
    overhead_gib: float
    probe_chunks: int
    chunk_bytes: int
    safety_bytes: int
    stop_reason: str
    oom_killed: bool
    oom_kills_before: int | None
    oom_kills_after: int | None
    kernel_peak_bytes: int | None
    child_exit_status: int
    child_init_bytes: int | None
    duration_s: float
    measured_at: float
    hostname: str

    @property
    def overhead_ratio(self) -> float:
        """Charged overhead per byte allocated (0 when nothing was allocated or the figure came out negative)."""
        return max(0, self.overhead_bytes) / self.allocated_bytes if self.allocated_bytes > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["overhead_ratio"] = round(self.overhead_ratio, 6)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "ProbeResult":
        names = {f.name for f in fields(cls)}
        missing = names - data.keys()
        if missing:
            raise ValueError(f"memprobe result lacks {', '.join(sorted(missing))}")
        return cls(**{k: data[k] for k in names})

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)


def default_probe_path(pinned: bool = False) -> Path:
    """Where memprobe saves its result and the budget looks for it: $CUZK_STATE_DIR, else ~/.local/state/cuzk."""
    base = os.environ.get("CUZK_STATE_DIR") or os.path.join(os.path.expanduser("~"), ".local", "state", "cuzk")
    return Path(base) / ("memprobe-pinned.json" if pinned else "memprobe.json")


def load_probe_result(path: Path) -> ProbeResult | None:
    """The saved result at ``path``, or None where there is none; a damaged file is an error naming it."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return ProbeResult.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a memprobe result ({exc})") from exc


def load_saved_probes(paths: list[Path] | None = None) -> tuple[list[ProbeResult], list[str]]:
    """The saved results at ``paths`` (default: the anonymous and the pinned probe's places) and the paths they came from."""
    paths = paths or [default_probe_path(False), default_probe_path(True)]
    probes, used = [], []
    for path in paths:
        probe = load_probe_result(path)
        if probe is not None:
            probes.append(probe)
            used.append(str(path))
    return probes, used


# ---------------------------------------------------------------------------------------------
# measuring


class _Usage(NamedTuple):
    charged: int
    limit: int | None
    oom_kills: int | None
    kernel_peak: int | None
    source: str


def _usage_now(location: CgroupLocation | None) -> _Usage:
    """The cgroup's charged usage where it has a limit, else machine-wide use (MemTotal − MemAvailable)."""
    if location is not None:
        reading = read_cgroup(location)
        if reading.effective_limit_bytes is not None and reading.charged_bytes is not None:
            return _Usage(reading.charged_bytes, reading.effective_limit_bytes, reading.oom_kills, reading.peak_bytes,
                          "cgroup usage - inactive_file")
        oom_kills = reading.oom_kills
    else:
        oom_kills = None
    info = read_meminfo()
    return _Usage(info.total_bytes - info.available_bytes, None, oom_kills, None, "MemTotal - MemAvailable")


def _room(location: CgroupLocation | None, safety: int, assumed_limit: int | None) -> int:
    usage = _usage_now(location)
    limit = assumed_limit if assumed_limit is not None else usage.limit
    if limit is not None:
        return limit - usage.charged - safety
    return read_meminfo().available_bytes - safety


class _Anonymous:
    def __init__(self):
        import numpy as np

        self._np = np

    def allocate_and_touch(self, nbytes: int) -> object:
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view = self._np.frombuffer(region, dtype=self._np.uint8)
        view[:: mmap.PAGESIZE] = 1  # one write per page faults every page in
        del view
        return region


class _Pinned:
    def __init__(self):
        try:
            import cupy
            import numpy as np

            cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:
            raise ProbeError(f"--pinned needs CuPy and a CUDA device: {exc}") from exc
        self._cuda, self._np = cupy.cuda, np
        self.allocate_and_touch(mmap.PAGESIZE)  # create the CUDA context now, so its cost lands in the baseline

    def allocate_and_touch(self, nbytes: int) -> object:
        memory = self._cuda.PinnedMemory(nbytes)
        view = self._np.frombuffer(self._cuda.PinnedMemoryPointer(memory, 0), dtype=self._np.uint8, count=nbytes)
        view[:: mmap.PAGESIZE] = 1
        del view
        return memory


def _emit(**event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _child(chunk: int, safety: int, max_bytes: int | None, pinned: bool, assumed_limit: int | None) -> int:
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass  # raising one's own score is always allowed on Linux; elsewhere there is nothing to raise
    location = find_memory_cgroup()
    baseline = _usage_now(location).charged
    try:
        allocator = _Pinned() if pinned else _Anonymous()
    except ProbeError as exc:
        _emit(event="error", message=str(exc))
        return 2
    _emit(event="ready", pid=os.getpid(), init_bytes=_usage_now(location).charged - baseline)
    if not sys.stdin.readline():
        return 0
    held, allocated, reason = [], 0, "safety distance reached"
    while True:
        room = _room(location, safety, assumed_limit)
        # Keep back 1/256 of the room for the chunk's own page tables (1/512 of it; cgroup v2 charges
        # them) and 1 MiB for the child's own small allocations, so the last chunk lands under the
        # safety distance, not just on it.
        size = min(chunk, room - room // 256 - _CHILD_SLACK)
        if max_bytes is not None and allocated + size >= max_bytes:
            size, reason = max_bytes - allocated, "--max-mib reached"
        size -= size % mmap.PAGESIZE
        if size < min(_MIN_CHUNK, chunk):
            break
        try:
            held.append(allocator.allocate_and_touch(size))
        except Exception as exc:  # OSError/MemoryError from mmap; CuPy raises its own types
            reason = f"allocation failed: {exc}"
            break
        allocated += size
        _emit(event="chunk", allocated=allocated)
        if reason == "--max-mib reached":
            break
    _emit(event="holding", allocated=allocated, chunks=len(held), reason=reason)
    sys.stdin.readline()
    return 0


def run_probe(chunk_bytes: int = GiB, safety_bytes: int = 2 * GiB, max_bytes: int | None = None,
              pinned: bool = False, assumed_limit_bytes: int | None = None) -> ProbeResult:
    """Run the probe in a child process and report what it measured, an OOM kill of the child included.

    ``assumed_limit_bytes`` replaces the detected limit, for a limit the process cannot see;
    if it is wrong (too high) the child is OOM-killed and the result says so.
    """
    if chunk_bytes < mmap.PAGESIZE:
        raise ValueError(f"probe chunk must be at least one page ({mmap.PAGESIZE} bytes), got {chunk_bytes}")
    if safety_bytes < 0:
        raise ValueError(f"probe safety distance must not be negative, got {safety_bytes}")
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"probe maximum must be positive, got {max_bytes}")
    if assumed_limit_bytes is not None and assumed_limit_bytes <= 0:
        raise ValueError(f"assumed memory limit must be positive, got {assumed_limit_bytes}")
    location = find_memory_cgroup()
    reading = read_cgroup(location) if location is not None else None
    start = time.monotonic()
    command = [sys.executable, "-m", "cuzk.memory.probe", "--chunk", str(chunk_bytes), "--safety", str(safety_bytes)]
    command += ["--max", str(max_bytes)] if max_bytes is not None else []
    command += ["--pinned"] if pinned else []
    command += ["--limit", str(assumed_limit_bytes)] if assumed_limit_bytes is not None else []
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    before = holding = None
    init_bytes = None
    allocated = chunks = 0
    reason = "child exited early"
    try:
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # something in the child printed to stdout; only our events matter
            if event["event"] == "error":
                raise ProbeError(event["message"])
            if event["event"] == "ready":
                before, init_bytes = _usage_now(location), event["init_bytes"]
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif event["event"] == "chunk":
                allocated, chunks = event["allocated"], chunks + 1
            elif event["event"] == "holding":
                allocated, reason = event["allocated"], event["reason"]
                holding = _usage_now(location)
                proc.stdin.write("done\n")
                proc.stdin.flush()
        status = proc.wait()
        stderr = proc.stderr.read()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    after = _usage_now(location)
    if before is None:
        raise ProbeError(f"the probe child exited ({status}) before it was ready: {stderr.strip()[-500:]}")
    # SIGKILL with the cgroup's kill counter unchanged was someone else, not the OOM killer.
    oom_killed = status == -signal.SIGKILL and (after.oom_kills is None or before.oom_kills is None
                                                or after.oom_kills > before.oom_kills)
    if holding is not None:
        peak, kernel_peak = holding.charged, holding.kernel_peak
    else:
        # Killed while allocating: the kernel's own high-water mark is the best peak there is.
        kernel_peak = after.kernel_peak
        peak = kernel_peak if kernel_peak is not None else before.charged + allocated
        reason = "OOM-killed" if oom_killed else f"child died (exit status {status}): {stderr.strip()[-300:]}"
    ceiling = assumed_limit_bytes if assumed_limit_bytes is not None else before.limit
    overhead = peak - before.charged - allocated
    return ProbeResult(
        mode="pinned" if pinned else "anonymous",
        cgroup_version=location.version if location else None,
        cgroup_path=reading.path if reading else None,
        cgroup_limit_bytes=reading.effective_limit_bytes if reading else None,
        cgroup_limit_source=reading.effective_limit_source if reading else None,
        ceiling_bytes=ceiling if ceiling is not None else read_meminfo().total_bytes,
        usage_source=before.source, usage_before_bytes=before.charged, allocated_bytes=allocated,
        allocated_gib=gib(allocated), usage_peak_bytes=peak, usage_after_bytes=after.charged,
        overhead_bytes=overhead, overhead_gib=gib(overhead), probe_chunks=chunks, chunk_bytes=chunk_bytes,
        safety_bytes=safety_bytes, stop_reason=reason, oom_killed=oom_killed, oom_kills_before=before.oom_kills,
        oom_kills_after=after.oom_kills, kernel_peak_bytes=kernel_peak, child_exit_status=status,
        child_init_bytes=init_bytes, duration_s=round(time.monotonic() - start, 3), measured_at=time.time(),
        hostname=socket.gethostname())


def _main(argv: list[str] | None = None) -> int:
    """The child's entry point (``python -m cuzk.memory.probe``); people run ``cuzk memprobe``."""
    parser = argparse.ArgumentParser(prog="python -m cuzk.memory.probe")
    parser.add_argument("--chunk", type=int, required=True)
    parser.add_argument("--safety", type=int, required=True)
    parser.add_argument("--max", type=int)
    parser.add_argument("--pinned", action="store_true")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args(argv)
    return _child(args.chunk, args.safety, args.max, args.pinned, args.limit)


if __name__ == "__main__":
    sys.exit(_main())
