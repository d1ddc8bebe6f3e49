"""A bench run as plain data: the settings it ran with, and what it measured.

``BenchRun`` fills a ``BenchResult`` in once the jobs are over; the report and the plot read
nothing else, so both can be built (and tested) from a result made by hand, without a daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client import JobInfo
from .disk import DataDirDisk
from .gpu import GpuSetup
from .timeline import Recovery, Sample
from .workload import DEFAULT_PRIORITY, BenchCircuit, PlannedJob


@dataclass
class BenchOptions:
    circuits: list[BenchCircuit]
    out_dir: Path
    jobs: int = 8
    concurrency: int = 2
    priorities: list[str] = field(default_factory=lambda: [DEFAULT_PRIORITY])
    warmup: int = 1  # per circuit
    addr: str | None = None
    token: str | None = None
    tls_ca: str | None = None  # PEM CA file for a TLS --addr
    data_dir: Path | None = None
    budget: str | None = None
    budget_over_limit: bool = False
    engine: dict[str, Any] = field(default_factory=dict)
    memory_limit: int | None = None
    max_oom_retries: int = 3
    sample_interval: float = 0.25
    timeout: float | None = None
    plot: bool = True

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.max_oom_retries < 0:
            raise ValueError(f"--max-oom-retries must not be negative, got {self.max_oom_retries}")
        if self.addr and (self.budget or self.budget_over_limit or self.engine or self.memory_limit or self.data_dir):
            raise ValueError("--budget, --budget-over-limit, --engine, --memory-limit and --data-dir configure a daemon the "
                             "bench starts; they do not apply with --addr")
        if self.budget_over_limit and not self.budget:
            raise ValueError("--budget-over-limit needs --budget (the figure to trust over the detected limit)")


@dataclass
class JobOutcome:
    planned: PlannedJob
    request_id: str
    submitted_t: float  # seconds since the run began, when the submit call started
    job_id: str | None = None
    completed_t: float | None = None  # when the await returned
    state: str = "PENDING"  # DONE / FAILED / CANCELLED from the daemon; PENDING if the run stopped first
    error: str = ""
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchResult:
    """Everything the report and the plot need; times ending in ``_t`` are seconds since the run began."""

    options: BenchOptions
    planned: list[PlannedJob]  # every job the run meant to submit, warm-ups first
    outcomes: list[JobOutcome]  # every job it submitted, in submission order
    engine_jobs: dict[str, JobInfo]  # the engine's record of each of them (its timestamps, attempts), by job id
    metrics_text: str  # the daemon's Prometheus text at the end ("" when it could not be read)
    # The memory timeline and what the sampler saw along it.
    samples: list[Sample]
    key_loads: list[dict[str, Any]]  # one entry per load of a key seen (key, engine_pid, t_s, loads, seconds)
    recoveries: list[Recovery]  # each engine death during the run, and the restart after it
    oom_kills: int  # as the supervisor counted them during the run
    engine_peak_charged: dict[int, int]  # each engine's own reconciler peak, by engine pid
    final_status: dict[str, Any] | None  # the last status document the daemon answered
    # The daemon.
    daemon_attached: bool  # one the bench attached to (--addr), not one it started
    daemon_address: str
    daemon_data_dir: Path | None
    limit_source: str  # where the memory limit in the samples comes from (a cgroup, MemTotal, the engine's reading)
    key_names: dict[str, str]  # the name each circuit's key was submitted by
    witness_sent_as: str  # "path" (the daemon read each witness file) or "bytes"
    # The clock.
    started_unix: float  # the run's time zero, as unix time
    measure_started_t: float | None  # the first measured submit; None when the run stopped during the warm-up
    measure_ended_t: float | None  # the last measured completion
    aborted: str | None = None  # why the run stopped before all its jobs finished
    gpu: GpuSetup = GpuSetup()  # the GPUs the samples read through NVML, or why none
    disk: DataDirDisk | str | None = None  # the data directory's disk the samples read, or why none
