"""The memory timeline of a bench run, and the engine deaths and recoveries seen along it.

A thread asks the daemon for its status every ``interval`` seconds and keeps one ``Sample``
per tick: the limit, the budget (total and effective), what is reserved by category, what
is untracked and what the kernel charges. While the engine is down (an OOM kill, a restart)
the daemon answers nothing, yet a started daemon's limit and charged memory are still read
from the kernel by the bench itself, so the gap shows in the timeline rather than vanishing.

Each tick also reads the daemon's GPUs through NVML where it can (``gpu.py``): utilization,
VRAM and SM clock per device, kept in the sample by the daemon's CUDA ordinal; and the bytes
written so far to the disk under the daemon's data directory (``disk.py``). And it reads
the supervisor's record (``supervisor.json``: the data directory's while
the bench runs the daemon, the status document's when attached). Every engine death recorded
since the run began becomes a ``Recovery``: the ceiling it planned against and the one the
supervisor restarted it with, its budget before and after, and how long it took from the
death until a new engine answered (to within one sampling interval).
"""

from __future__ import annotations

import csv
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..client import Client, DaemonError, DaemonUnavailable
from .disk import DataDirDisk
from .gpu import GpuReading, GpuSampler, on_this_machine

STATUS_TIMEOUT_S = 10.0
GPU_FIELDS = [f.name for f in fields(GpuReading)]  # the timeline CSV's columns for each GPU


@dataclass(frozen=True)
class Sample:
    t_s: float  # seconds since the run began (monotonic clock)
    unix_time: float
    engine_pid: int | None  # None: no engine answered
    limit_bytes: int | None  # the kernel's limit (or the engine's ceiling where the bench cannot see the kernel's)
    budget_total_bytes: int | None
    budget_effective_bytes: int | None
    reserved_bytes: int | None
    reserved_by_category: dict[str, int]
    untracked_bytes: int | None
    charged_bytes: int | None  # the engine's reconciler's reading: a kernel charge, or its RSS (engine_reading_source)
    kernel_charged_bytes: int | None  # the bench's own reading (a daemon it started; None when attached)
    jobs_done: int
    jobs_in_flight: int
    oom_kills: int
    gpus: dict[int, GpuReading] = field(default_factory=dict)  # by the daemon's CUDA ordinal; empty: no GPU read
    engine_reading_source: str | None = None  # what the engine's reading is: "cgroup" or "meminfo" (a kernel charge), "rss"
    disk_written_bytes: int | None = None  # the data directory's disk: bytes written since it booted (None: not read)

    @property
    def engine_up(self) -> bool:
        return self.engine_pid is not None


@dataclass
class Recovery:
    """One engine death during the run and the restart that followed."""

    engine_pid: int
    cause: str
    oom_kill: bool
    died_at: float  # unix time, from the supervisor's record
    limit_bytes: int | None  # the kernel's limit when it died
    ceiling_before_bytes: int | None  # the ceiling the dead engine planned against
    budget_before_bytes: int | None  # the dead engine's budget (ceiling minus margin), as last seen
    ceiling_after_bytes: int | None = None  # the ceiling the supervisor restarted it with (learned after an OOM)
    budget_after_bytes: int | None = None
    new_engine_pid: int | None = None
    recovered_at: float | None = None  # unix time the new engine first answered

    @property
    def time_to_recover_s(self) -> float | None:
        return None if self.recovered_at is None else max(0.0, self.recovered_at - self.died_at)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "time_to_recover_s": self.time_to_recover_s}


class RecoveryTracker:
    """Turns the supervisor's death records and the engines that answer into ``Recovery`` entries."""

    def __init__(self, since: float):
        self.since = since
        self.recoveries: list[Recovery] = []
        self.gave_up: str | None = None
        self.oom_kills_at_start: int | None = None
        self.oom_kills = 0
        self._seen: set[tuple[int, float]] = set()
        self._budget_of: dict[int, int] = {}
        self._lock = threading.Lock()

    def update(self, now: float, status: dict[str, Any] | None, supervisor: dict[str, Any]) -> None:
        with self._lock:
            if supervisor:
                kills = int(supervisor.get("oom_kills") or 0)
                if self.oom_kills_at_start is None:
                    self.oom_kills_at_start = kills
                self.oom_kills = kills - self.oom_kills_at_start
                self.gave_up = supervisor.get("gave_up")
            for death in supervisor.get("deaths") or []:
                key = (death["pid"], death["time"])
                if death["time"] < self.since or key in self._seen:
                    continue
                self._seen.add(key)
                self.recoveries.append(Recovery(
                    engine_pid=death["pid"], cause=death.get("cause", ""), oom_kill=bool(death.get("oom_kill")),
                    died_at=death["time"], limit_bytes=death.get("limit"), ceiling_before_bytes=death.get("planned_ceiling"),
                    budget_before_bytes=self._budget_of.get(death["pid"])))
            if status is None:
                return
            pid = status["server"]["pid"]
            total = status["budget"]["total_bytes"]
            self._budget_of[pid] = total
            for r in self.recoveries:
                if r.recovered_at is None and pid != r.engine_pid:
                    r.recovered_at, r.new_engine_pid, r.budget_after_bytes = now, pid, total
                    r.ceiling_after_bytes = supervisor.get("current_budget")

    def snapshot(self) -> list[Recovery]:
        with self._lock:
            return list(self.recoveries)

    @property
    def oom_recoveries(self) -> int:
        with self._lock:
            return sum(r.oom_kill for r in self.recoveries)


class TimelineSampler:
    """Samples the daemon every ``interval`` seconds on a thread of its own until ``stop()``."""

    def __init__(self, client: Client, daemon, interval: float, started_mono: float, started_wall: float, progress):
        """``progress()`` returns (jobs done, jobs in flight) as the bench counts them."""
        if interval <= 0:
            raise ValueError(f"--sample-interval must be positive, got {interval}")
        self.client = client
        self.daemon = daemon
        self.interval = interval
        self.started_mono = started_mono
        self.samples: list[Sample] = []
        self.last_status: dict[str, Any] | None = None
        self.tracker = RecoveryTracker(since=started_wall)
        self.key_loads: list[dict[str, Any]] = []  # one entry per load of a key seen in the run
        self.engine_peak_charged: dict[int, int] = {}  # each engine's reconciler peak since it started
        self.gpu = GpuSampler(daemon.address)
        self.disk: DataDirDisk | str | None = None  # the data directory's disk, or why it is not read; None until known
        self._loads_seen: dict[tuple[int, str], int] = {}
        self._progress = progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cuzk-bench-sampler", daemon=True)

    def start(self) -> TimelineSampler:
        self.sample_once()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample_once()  # the state at the end, after the last job
        self.gpu.close()

    def _run(self) -> None:
        next_at = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self.sample_once()
            next_at = max(next_at + self.interval, time.monotonic())

    def sample_once(self) -> Sample:
        try:
            status = self.client.status(timeout=STATUS_TIMEOUT_S)
        except (DaemonUnavailable, TimeoutError, DaemonError):
            status = None
        gpus = self.gpu.read(status)
        if self.disk is None:
            self.disk = self._data_dir_disk(status)
        now_mono, now_wall = time.monotonic(), time.time()
        supervisor = self.daemon.supervisor_state(status)
        self.tracker.update(now_wall, status, supervisor)
        limit, kernel_charged, _ = self.daemon.kernel_memory()
        done, in_flight = self._progress()
        budget = (status or {}).get("budget") or {}
        reading = ((status or {}).get("reconciler") or {}).get("latest") or {}
        if status is not None and limit is None:
            limit = reading.get("ceiling_bytes")
        sample = Sample(
            t_s=now_mono - self.started_mono, unix_time=now_wall,
            engine_pid=status["server"]["pid"] if status else None, limit_bytes=limit,
            budget_total_bytes=budget.get("total_bytes"), budget_effective_bytes=budget.get("effective_total_bytes"),
            reserved_bytes=budget.get("reserved_bytes"),
            reserved_by_category={c: e["bytes"] for c, e in (budget.get("by_category") or {}).items()},
            untracked_bytes=reading.get("untracked_bytes"), charged_bytes=reading.get("actual_bytes"),
            kernel_charged_bytes=kernel_charged, jobs_done=done, jobs_in_flight=in_flight, oom_kills=self.tracker.oom_kills,
            gpus=gpus, engine_reading_source=reading.get("source"),
            disk_written_bytes=self.disk.written_bytes() if isinstance(self.disk, DataDirDisk) else None)
        if status is not None:
            self.last_status = status
            self._note_engine(sample, status)
        if not self.samples or sample.t_s > self.samples[-1].t_s:
            self.samples.append(sample)
        return sample


    def _data_dir_disk(self, status: dict[str, Any] | None) -> DataDirDisk | str | None:
        """The disk of the daemon's data directory: the one the bench gave it, or an attached daemon's on this machine."""
        if self.daemon.data_dir is not None:
            return DataDirDisk.of(self.daemon.data_dir)
        if status is None:
            return None  # asked again at the next tick
        if not on_this_machine(self.daemon.address):
            return "the daemon runs on another machine"
        data_dir = (status.get("config") or {}).get("data_dir")
        return DataDirDisk.of(data_dir) if data_dir else "the daemon's status names no data directory"

    def _note_engine(self, sample: Sample, status: dict[str, Any]) -> None:
        """Key loads (the status counts them per key; the duration known is the latest one's) and the engine's own peak."""
        pid = sample.engine_pid
        for key in status.get("keys") or []:
            before = self._loads_seen.get((pid, key["name"]), 0)
            if key["loads"] > before and not key.get("loading"):
                self.key_loads.append({"key": key["name"], "engine_pid": pid, "t_s": sample.t_s, "loads": key["loads"] - before,
                                       "seconds": key.get("last_load_s")})
                self._loads_seen[(pid, key["name"])] = key["loads"]
        peak = ((status.get("reconciler") or {}).get("peak_actual_bytes"))
        if peak is not None:
            self.engine_peak_charged[pid] = peak


def categories(samples: list[Sample]) -> list[str]:
    """Every reservation category seen in the run, in a stable order."""
    return sorted({c for s in samples for c in s.reserved_by_category})


def write_csv(path: Path, samples: list[Sample]) -> None:
    """One row per sample, time increasing; empty cells where nothing was measured (engine down, no GPU reading)."""
    cats = categories(samples)
    devices = sorted({d for s in samples for d in s.gpus})
    columns = ["t_s", "unix_time", "engine_up", "engine_pid", "limit_bytes", "budget_total_bytes", "budget_effective_bytes",
               "reserved_bytes", *[f"reserved_{c}_bytes" for c in cats], "untracked_bytes", "charged_bytes",
               "engine_reading_source", "kernel_charged_bytes", "jobs_done", "jobs_in_flight", "oom_kills",
               *[f"gpu{d}_{name}" for d in devices for name in GPU_FIELDS], "disk_written_bytes"]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for s in samples:
            reserved = [s.reserved_by_category.get(c, 0) if s.engine_up else None for c in cats]
            row = [f"{s.t_s:.3f}", f"{s.unix_time:.3f}", int(s.engine_up), s.engine_pid, s.limit_bytes, s.budget_total_bytes,
                   s.budget_effective_bytes, s.reserved_bytes, *reserved, s.untracked_bytes, s.charged_bytes,
                   s.engine_reading_source, s.kernel_charged_bytes, s.jobs_done, s.jobs_in_flight, s.oom_kills,
                   *[None if d not in s.gpus else getattr(s.gpus[d], name) for d in devices for name in GPU_FIELDS],
                   s.disk_written_bytes]
            writer.writerow(["" if v is None else v for v in row])
