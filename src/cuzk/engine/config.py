"""The engine's settings: the ``[engine]`` table of the daemon's config, checked when made."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..memory.units import MiB, parse_size

MAX_FSYNC_DELAY_S = 60.0  # journal_fsync as a delay: beyond a minute, false says it better


@dataclass
class EngineConfig:
    data_dir: Path
    budget_bytes: int | None = None  # None: derived from the real limit (cgroup, MemTotal) by memory.plan
    budget_over_limit: bool = False  # trust budget_bytes over a lower detected limit (memory.plan, loud warning)
    backend: str = "auto"  # "auto" | "cpu" | "cuda"
    devices: str | list[int] = "all"  # CUDA ordinals with a proving worker each (as CuPy numbers them)
    # Proofs each GPU runs at once, each on its own CUDA streams. "auto": as many as fit in its VRAM budget beside the
    # largest registered key's resident bases, at most prover.sizing.MAX_PROOFS_PER_DEVICE; a count that does not fit
    # is lowered (logged). The CPU backend proves one at a time.
    proofs_per_device: int | str = "auto"
    # Each proving device owned by a worker process of its own (engine/procs.py): its backend, keys and K lanes live
    # there, fed job ids and witness paths. For isolation (a crash kills one worker, which is restarted; a CUDA error
    # self-tests its device as in-process) and lanes beyond the intake's GIL (x1.49 at 2^16, x1.15 at 2^20 through
    # the daemon on one H200; even at 2^20 in session 10). "auto": on wherever the engine proves on GPUs, off on the
    # CPU backend (one proof at a time, on the daemon's cores either way); true/false force it.
    device_processes: bool | str = "auto"
    # CPU synthesis threads (each also bounds a synthesized job waiting for a prover). "auto": one more than the
    # proofs all GPUs run at once, so every proving slot finds its next job ready; 1 on the CPU backend, whose
    # proving needs the same cores.
    synth_workers: int | str = "auto"
    verify: bool = True
    key_tier: str = "hot"  # host tier keys are loaded to for proving: "hot" or "warm"
    # Where a key lives for proving on GPUs (keys.manager): "auto" — in VRAM, loaded from disk through a staging ring,
    # when every device holds it beside a proof, else in host memory at key_tier; "device" — in VRAM or refused;
    # "host" — in host memory at key_tier, uploaded from there. The CPU backend keeps keys in host memory.
    key_home: str = "auto"
    # The CPU backend's hot keys hold window tables for their MSMs (keys.host.with_msm_tables: ~20x the bases, built
    # once per load; x1.42 less MSM time at 2^12, x1.17 at 2^14): true, false, or "auto" — for MSMs of at most 2^14
    # points whose tables take at most an eighth of the memory budget (keys.manager). Not used on GPUs.
    cpu_msm_tables: bool | str = "auto"
    key_idle_evict_s: float = 10.0
    load_chunk_bytes: int = 64 * MiB
    result_ttl_s: float = 24 * 3600.0
    result_max_bytes: int = 64 * MiB
    # When an accepted job is on the disk (engine/journal.py); every setting survives the daemon's death (an OOM kill
    # included). A number of seconds (default 1): within that delay — a syncer thread fsyncs what is still unfinished,
    # so the witnesses of jobs that end sooner never reach the disk, and a crash of the machine can lose the jobs of the
    # last second (Redis's appendfsync everysec). true: before its submit returns, so it survives the machine's crash
    # too; false: when the kernel writes back. At 2^20 on one H200 with a ~1 GB/s disk, true set the pace: 32-35
    # proofs/s, GPU busy 67-76 %, against 40.8 and 86 % with 1 s (2^22 under 6 GiB: 7.7 against 10.2; GPU_NOTES,
    # session 10).
    journal_fsync: bool | float = 1.0
    max_attempts: int = 3
    device_errors_per_job: int = 2  # CUDA errors (on any devices) after which a job fails instead of being requeued
    keys: dict[str, str] = field(default_factory=dict)  # name → .zkey path
    r1cs: dict[str, str] = field(default_factory=dict)  # name → .r1cs path (optional satisfaction check)
    wasm: dict[str, str] = field(default_factory=dict)  # name → circom .wasm: the key takes input JSON, the daemon calculates the witness
    witness_workers: int = 2  # threads calculating witnesses from input JSON (each runs its own instance of a circuit's .wasm)
    # A cluster front door's memory for those calculations, taken out of the budget of the host engine on its own node
    # so the two never plan the same memory (None: an eighth of that node's budget). A daemon's engine calculates them
    # inside its own budget.
    witness_budget_bytes: int | None = None
    reconcile: bool = True  # run the memory reconciler on an engine-made budget
    measure_peaks: bool = True
    heartbeat: bool = False  # write <data_dir>/run/engine-state.json for the supervisor
    housekeeping_interval_s: float = 0.25

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if isinstance(self.witness_workers, bool) or not isinstance(self.witness_workers, int) or self.witness_workers < 1:
            raise ValueError(f"witness_workers must be a whole number of at least 1, got {self.witness_workers!r}")
        if self.witness_budget_bytes is not None and self.witness_budget_bytes <= 0:
            raise ValueError(f"witness_budget_bytes must be positive, got {self.witness_budget_bytes}")
        for name in ("synth_workers", "proofs_per_device"):
            value = getattr(self, name)
            if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be \"auto\" or a whole number of at least 1, got {value!r}")
        if not (isinstance(self.device_processes, bool) or self.device_processes == "auto"):
            raise ValueError(f"device_processes must be true, false or \"auto\", got {self.device_processes!r}")
        fsync = self.journal_fsync
        if not (isinstance(fsync, bool) or (isinstance(fsync, (int, float)) and 0 < fsync <= MAX_FSYNC_DELAY_S)):
            raise ValueError(f"journal_fsync must be true, false or a delay in seconds (above 0, at most "
                             f"{MAX_FSYNC_DELAY_S:g}), got {fsync!r}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        limit = self.device_errors_per_job
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"device_errors_per_job must be a whole number of at least 1, got {limit!r}")
        if self.key_tier not in ("hot", "warm"):
            raise ValueError(f"key_tier must be 'hot' or 'warm', got {self.key_tier!r}")
        if self.key_home not in ("auto", "host", "device"):
            raise ValueError(f"key_home must be 'auto', 'host' or 'device', got {self.key_home!r}")
        if not (isinstance(self.cpu_msm_tables, bool) or self.cpu_msm_tables == "auto"):
            raise ValueError(f"cpu_msm_tables must be true, false or \"auto\", got {self.cpu_msm_tables!r}")
        if self.housekeeping_interval_s <= 0:
            raise ValueError("housekeeping_interval_s must be positive")
        if self.devices != "all":
            ordinals = self.devices if isinstance(self.devices, (list, tuple)) else [self.devices]
            if not ordinals or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in ordinals) or len(set(ordinals)) != len(ordinals):
                raise ValueError(f"devices must be \"all\" or a list of distinct CUDA device ordinals, got {self.devices!r}")
            self.devices = list(ordinals)

    @classmethod
    def from_mapping(cls, data_dir: str | Path, values: Mapping[str, Any]) -> EngineConfig:
        """From the daemon config's ``[engine]`` table: sizes may be strings ("64MiB"); unknown keys are an error."""
        known = {f.name: f for f in fields(cls)}
        out: dict[str, Any] = {"data_dir": Path(data_dir)}
        for key, value in values.items():
            if key not in known or key == "data_dir":
                raise ValueError(f"[engine] {key}: unknown setting (known: {', '.join(sorted(set(known) - {'data_dir'}))})")
            if key.endswith("_bytes") and value is not None:
                value = parse_size(value)
            out[key] = value
        return cls(**out)
