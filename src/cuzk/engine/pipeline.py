"""The proving engine: the daemon's core, in-process, below any network layer.

Usage (what the gRPC/HTTP server, the CLI and the tests do)::

    from cuzk.engine import Engine, EngineConfig, Priority

    engine = Engine(EngineConfig(data_dir="/var/lib/cuzk", keys={"sha": "/keys/sha256.zkey"}))
    engine.start()
    job_id = engine.submit("sha", wtns_bytes, Priority.HIGH, request_id="client-42")  # durable on return
    record = engine.await_result(job_id, timeout=60)   # JobRecord; AwaitTimeout if not done in time
    record.state, record.proof, record.public_signals, record.error
    engine.stop()

The API, all thread-safe:

- ``submit(circuit, witness, priority=NORMAL, request_id=None) -> job_id`` — the witness is
  the .wtns file's bytes or its path (copied into the journal by the kernel). The witness is checked against the key's header (curve, number of
  signals) and the job is journaled (fsync'd) before this returns; a repeated
  ``request_id`` returns the first job's id. Raises a ``ValueError`` subclass for an unknown
  circuit, a malformed or mismatched witness, a request id reused for other work.
- ``await_result(job_id, timeout=None) -> JobRecord`` — the finished record (DONE with
  ``proof``/``public_signals``, FAILED with ``error``, or CANCELLED). ``AwaitTimeout`` when
  not finished in time, ``EngineStopped`` when the engine stopped first (the job is then
  replayed by the next engine on this data directory), ``UnknownJobError``. A DONE record's
  ``timings`` (seconds) are its phases: ``queue`` (submitted → admitted with its key and
  working set, less the key's part), ``key_load`` (waiting for room for the key and loading
  it; ~0 when resident), ``check``/``synthesize``, ``ntt``/``msm``/``blind``, ``verify``.
- ``get(job_id) -> JobRecord`` (now, without waiting), ``list_jobs(states, circuit, limit)``.
- ``cancel(job_id) -> bool`` — works at every stage. A queued job, or a synthesized one
  waiting for a prover, is CANCELLED when this returns; one that a worker holds (waiting
  for memory, synthesizing, proving) stops at its next phase boundary, so its state
  settles to CANCELLED shortly after (await it). False when the job had already finished.
- ``register_key(name, zkey_path, r1cs_path=None)`` / ``unregister_key(name)`` — remembered
  in the journal across restarts; with an r1cs every witness is checked for
  satisfaction before any MSM. ``preload(name, tier=None)``, ``evict(name) -> bytes``.
- ``status() -> dict`` — budget by category, reconciler reading, keys and tiers, jobs by
  state and priority, workers, measured peaks. ``working_set(circuit) -> WorkingSet``.
- ``record_peak(circuit, nbytes)`` — a measured working-set peak for a circuit (the
  engine measures one itself when a job runs alone, see ``workset.PeakProbe``); later
  reservations for that circuit use it when it exceeds the estimate.
- ``add_listener(fn)`` — ``fn(job_id, state)`` is called from the worker thread at every
  state change, before the worker's next cancellation check (observers, streaming status).

Inside: one priority queue of submitted jobs (``Scheduler``), ``synth_workers`` CPU threads
(auto: one more than the GPUs, 1 on the CPU backend)
that admit a job — key lease from the ``KeyManager`` (hot tier, loaded on demand), then a
working-set reservation sized from the header (``workset.working_set``), both waiting for
room rather than over-committing — and synthesize it; a second priority queue of
synthesized jobs; one proving thread per backend device (``devices``: "all" CUDA devices CuPy
sees — after CUDA_VISIBLE_DEVICES — or a list of ordinals), each taking the next synthesized
job when it is free, so the devices share the load. Each device has its own CudaBackend,
VRAM budget and resident keys (``KeyManager.on_device``); its copies are staged through one
pinned pool charged to the host budget. After a CUDA error the worker runs a tiny self-test on
its device (``device_self_test``: an NTT and a G1 MSM against the reference arithmetic), which
tells a sick device from a job that trips a kernel bug: a device that fails it is marked
unhealthy (status, with the error) and its worker stops for good; one that passes keeps
proving. The job goes back to the queue for any healthy device until it has hit
``device_errors_per_job`` CUDA errors in all (on whichever devices) or no healthy device is
left; then it fails with a reason naming each device, error and self-test outcome, so a
poison job takes at most that many devices down. A synthesis worker takes a new job
only while fewer than ``synth_workers`` synthesized jobs wait, so synthesis of the next job
overlaps the current proof without running ahead of memory. Admission is serialized (one
job at a time waits for memory) so two half-admitted jobs can never wait on each other; a
job whose key plus working set exceeds the whole budget fails at once with that reason.
Each proof is verified against the key before it is returned (``verify``); a proof that
does not verify is never returned — the job fails with the reason. Verifying, journaling the
result and giving back the job's memory happen on one finishing thread, so a device's next
proof never waits on them (the journal's commits queue behind witness fsyncs while jobs come
in). The journal records a job as started (SYNTHESIZING) once a worker takes it; PROVING is
live state, which ``get``, ``list_jobs`` and ``status`` show (a replay treats both alike).

``stop()`` interrupts work in flight at its next phase boundary and leaves it unfinished in
the journal, so the next engine on the data directory replays it (as after a crash). A job
whose attempts reach ``max_attempts`` (the engine died under it each time, e.g. OOM
kills) is failed at replay instead of being retried forever.

Threads, not processes. Synthesis's kernel releases the GIL (one synthesis at a time, on every
core), as do the CPU backend's MSM tasks; its NTT kernels do not, so on the CPU backend those
phases take turns with the rest on the GIL; with the CUDA backend the proving thread mostly waits on the GPU, which is
where the overlap pays.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NamedTuple


from ..backends.cuda.modules import is_device_error
from ..backends.selftest import device_self_test
from ..curves import BN254
from ..formats.json_io import proof_to_json
from ..formats.r1cs import read_r1cs
from ..formats.wtns import read_wtns, wtns_file_size
from ..keys.device import can_hold_keys
from ..keys.manager import KeyLease, KeyLoadCancelled, KeyManager, KeyTier, footprint
from ..memory.budget import AcquireTimeout, BudgetExceededError, MemoryBudget, Reservation
from ..memory.pinned import PageAlignedAllocator, PinnedPool
from ..memory.runtime import RuntimeReservation
from ..memory.units import MiB, format_size, parse_size
from ..prover.groth16 import ProofCancelled, ProvingError, Synthesis, check_inputs, prove_synthesized, synthesize
from .jobs import UNFINISHED_STATES, JobError, JobRecord, JobState, Priority, UnknownJobError
from .journal import DataDirLock, Journal, WitnessFile
from .scheduler import Scheduler, SchedulerClosed
from .workset import PeakProbe, WorkingSet, return_free_heap, working_set

log = logging.getLogger("cuzk.engine")


class WitnessFileError(JobError):
    """The witness path given to ``submit`` cannot be read as a file (missing, unreadable, a directory or a device)."""


class EngineStopped(RuntimeError):
    """The engine is stopping or stopped; the job (if any) stays in the journal for the next one."""


class AwaitTimeout(TimeoutError):
    def __init__(self, job_id: str, state: JobState, timeout: float | None):
        super().__init__(f"job {job_id} is still {state.value} after {timeout} s")
        self.job_id = job_id
        self.state = state


class JobTooLarge(ProvingError):
    """Key plus working set exceed the whole budget: waiting could never help."""


class ProofRejected(ProvingError):
    """The proof did not pass self-verification; it is not returned."""


@dataclass
class EngineConfig:
    data_dir: Path
    budget_bytes: int | None = None  # None: derived from the real limit (cgroup, MemTotal) by memory.plan
    budget_over_limit: bool = False  # trust budget_bytes over a lower detected limit (memory.plan, loud warning)
    backend: str = "auto"  # "auto" | "cpu" | "cuda"
    devices: str | list[int] = "all"  # CUDA ordinals with a proving worker each (as CuPy numbers them)
    # CPU synthesis threads (each also bounds a synthesized job waiting for a prover). "auto": one more than
    # the GPUs, so each device finds its next job ready; 1 on the CPU backend, whose proving needs the same cores.
    synth_workers: int | str = "auto"
    verify: bool = True
    key_tier: str = "hot"  # tier keys are loaded to for proving: "hot" or "warm"
    key_idle_evict_s: float = 10.0
    load_chunk_bytes: int = 64 * MiB
    result_ttl_s: float = 24 * 3600.0
    result_max_bytes: int = 64 * MiB
    max_attempts: int = 3
    device_errors_per_job: int = 2  # CUDA errors (on any devices) after which a job fails instead of being requeued
    keys: dict[str, str] = field(default_factory=dict)  # name → .zkey path
    r1cs: dict[str, str] = field(default_factory=dict)  # name → .r1cs path (optional satisfaction check)
    reconcile: bool = True  # run the memory reconciler on an engine-made budget
    measure_peaks: bool = True
    heartbeat: bool = False  # write <data_dir>/run/engine-state.json for the supervisor
    housekeeping_interval_s: float = 0.25

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if self.synth_workers != "auto" and (isinstance(self.synth_workers, bool) or not isinstance(self.synth_workers, int)
                                             or self.synth_workers < 1):
            raise ValueError(f"synth_workers must be \"auto\" or a whole number of at least 1, got {self.synth_workers!r}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        limit = self.device_errors_per_job
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"device_errors_per_job must be a whole number of at least 1, got {limit!r}")
        if self.key_tier not in ("hot", "warm"):
            raise ValueError(f"key_tier must be 'hot' or 'warm', got {self.key_tier!r}")
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


def _self_test_outcome(problem: str | None) -> str:
    return "self-test passed" if problem is None else f"self-test failed: {problem}"


class FileIdentity(NamedTuple):
    """A file as stat(2) shows it: what a client saw at a path, checked against what the engine opens there."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def _open_witness_file(path: str | os.PathLike, header, expected: FileIdentity | None) -> Iterator[WitnessFile]:
    """A caller's .wtns file, opened for the journal's copy; what cannot be one is refused before anything is copied."""
    try:  # O_NONBLOCK: a FIFO must not hang the caller; it is refused below as not a regular file
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise WitnessFileError(f"cannot open the witness file {os.fspath(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WitnessFileError(f"the witness path {os.fspath(path)} is not a regular file")
        if expected is not None and FileIdentity.of(st) != expected:
            raise WitnessFileError(f"{os.fspath(path)} is not the file the caller named ({FileIdentity.of(st)} here, "
                                   f"{expected} there): another file at that path, or one changed since")
        most = wtns_file_size(header.curve, header.n_vars)
        if st.st_size > most:
            raise JobError(f"the witness file {os.fspath(path)} is {format_size(st.st_size)}, more than a witness of this "
                           f"circuit's {header.n_vars} values ({format_size(most)}); it cannot be this circuit's witness")
        yield WitnessFile(fd, st.st_size)
    finally:
        os.close(fd)


class _StagingBuffers:
    """The backends' staging source over the pinned pool: a buffer only when the budget has room now.

    The proving thread must never wait for memory (it may be what frees it), so a copy that gets
    no buffer simply runs synchronously from pageable memory.
    """

    def __init__(self, pool: PinnedPool):
        self.pool = pool

    def get(self, nbytes: int, label: str = ""):
        try:
            return self.pool.get(nbytes, timeout=0, label=label)
        except (AcquireTimeout, BudgetExceededError):
            return None


class _Job:
    """A job while the engine holds it: its cancel flag, its place in the pipeline, the resources it holds."""

    def __init__(self, record: JobRecord):
        self.id = record.job_id
        self.circuit = record.circuit
        self.priority = record.priority
        self.seq = record.seq
        self.state = record.state
        self.submitted_at = record.submitted_at  # wall clock, as journaled: a replayed job's queue time includes the restart
        self.phase_timings: dict[str, float] = {}  # queue and key_load, measured at admission
        self.cancel_requested = threading.Event()
        self.interrupted = False  # the engine is stopping: leave the job unfinished for replay
        self.done = threading.Event()
        self.final: JobRecord | None = None
        self.lease: KeyLease | None = None
        self.reservation: Reservation | None = None
        self.workset: WorkingSet | None = None
        self.synthesis: Synthesis | None = None
        self.worker: str | None = None
        self.overlapped = False  # another job or key load ran beside it: its peak is not its own
        self.probe_baseline: int | None = None
        self.loads_at_start = 0
        self.lock = threading.Lock()
        self.device_errors: list[tuple[str, str, str | None]] = []  # (device, CUDA error, self-test problem or None)

    def cancelled(self) -> bool:
        return self.interrupted or self.cancel_requested.is_set()


class Engine:
    def __init__(self, config: EngineConfig, *, budget: MemoryBudget | None = None, reconciler=None, backends: list | None = None):
        """``budget``/``reconciler``: share the daemon's; by default the engine plans its own from the real limit.
        ``backends``: one proving worker per entry; by default one per device of ``config.backend``."""
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock = DataDirLock(config.data_dir)
        self._dir_lock.acquire()
        try:
            self._owns_reconciler = False
            self.runtime: RuntimeReservation | None = None
            if budget is None:
                budget, reconciler = self._plan_budget()
                # The engine's own memory, inside the budget it planned (a given budget is the caller's to size).
                self.runtime = RuntimeReservation(budget)
            self.budget = budget
            self.reconciler = reconciler
            self.journal = Journal(config.data_dir, result_ttl_s=config.result_ttl_s, result_max_bytes=config.result_max_bytes)
            self.backends = backends if backends is not None else self._make_backends()
            # Hot keys in page-locked memory only when a device copies from them (locking pages costs load time).
            allocator = None if any(can_hold_keys(b) for b in self.backends) else PageAlignedAllocator()
            self.keys = KeyManager(budget, chunk_bytes=config.load_chunk_bytes, idle_evict_s=config.key_idle_evict_s,
                                   default_tier=KeyTier(config.key_tier), allocator=allocator)
            self._pinned: PinnedPool | None = None
            self._attach_devices()
            self._r1cs: dict[str, str] = {}
            self._register_saved_keys()
        except BaseException:
            self._dir_lock.release()
            raise

        self._queue: Scheduler[_Job] = Scheduler()  # submitted, waiting for a synthesis worker
        self._ready: Scheduler[_Job] = Scheduler()  # synthesized, waiting for a proving worker
        self._proved: queue.SimpleQueue[tuple[_Job, Any] | None] = queue.SimpleQueue()  # proved, to verify and journal
        self.synth_workers = config.synth_workers if config.synth_workers != "auto" else (
            len(self.backends) + 1 if any(can_hold_keys(b) for b in self.backends) else 1)
        self._slots = threading.Semaphore(self.synth_workers)  # synthesizing + synthesized-but-not-proving
        self._admission = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._jobs_lock = threading.Lock()
        self._listeners: list[Callable[[str, JobState], None]] = []
        self._threads: list[threading.Thread] = []
        self._finisher: threading.Thread | None = None  # joined after the provers, so it finishes all they proved
        self._workers: dict[str, dict[str, Any]] = {}
        self._started = self._stopping = self._closed = False
        self._stop_event = threading.Event()
        self._finished = 0
        self._probe = PeakProbe() if config.measure_peaks else None
        self._measure_lock = threading.Lock()
        self._active: set[_Job] = set()
        self._seen_circuits: set[str] = set()  # circuits proved once in this process (the first run pays JIT warm-up)
        self._peaks = self.journal.saved_peaks()
        self._vkey_lock = threading.Lock()
        self._replay()

    # ---- construction helpers ----------------------------------------------------------------
    def _plan_budget(self) -> tuple[MemoryBudget, Any]:
        from ..memory.commands import check_memory
        from ..memory.reconcile import Reconciler

        _, plan, _, _ = check_memory(self.config.budget_bytes, trust_configured=self.config.budget_over_limit)
        for note in plan.notes:
            (log.warning if note.startswith("WARNING") else log.info)("memory plan: %s", note)
        budget = MemoryBudget(plan.total_bytes)
        reconciler = None
        if self.config.reconcile:
            reconciler = Reconciler(budget, plan)
            self._owns_reconciler = True
        log.info("memory budget %s (ceiling %s from %s, margin %s)", format_size(plan.total_bytes),
                 format_size(plan.ceiling_bytes), plan.ceiling_source, format_size(plan.margin_bytes))
        return budget, reconciler

    def _make_backends(self) -> list:
        """One proving worker per configured GPU (each its own CudaBackend and VRAM budget), or the one CPU backend."""
        from ..backends import BackendUnavailableError, cuda_available, get_backend

        if self.config.backend == "cpu" or (self.config.backend == "auto" and not cuda_available()):
            return [get_backend("cpu")]
        if not cuda_available():
            raise BackendUnavailableError("the cuda backend needs CuPy and an NVIDIA GPU; none was found")
        from ..backends.cuda import CudaBackend, cupy_device_count

        count = cupy_device_count()
        ordinals = list(range(count)) if self.config.devices == "all" else self.config.devices
        missing = [d for d in ordinals if d >= count]
        if missing:
            raise BackendUnavailableError(f"devices {missing} do not exist: CuPy sees {count} CUDA device(s) "
                                          "(ordinals count from 0 among those CUDA_VISIBLE_DEVICES leaves visible)")
        return [CudaBackend(device=d) for d in ordinals]

    def _attach_devices(self) -> None:
        """Give every device backend its VRAM tier in the key manager and the pinned staging pool (charged to
        the host budget)."""
        devices = [b for b in self.backends if can_hold_keys(b)]
        if devices:
            self._pinned = PinnedPool(self.budget, self.keys.allocator)
            for backend in devices:
                self.keys.add_device(backend)
                backend.staging = _StagingBuffers(self._pinned)

    def _register_saved_keys(self) -> None:
        saved = self.journal.saved_keys()
        wanted = dict(saved)
        for name, path in self.config.keys.items():
            wanted[name] = (path, self.config.r1cs.get(name))
        for name, (path, r1cs) in wanted.items():
            try:
                self.register_key(name, path, r1cs)
            except (ValueError, OSError) as exc:
                # A key that went away must not stop the daemon; its jobs fail with the reason.
                log.error("key %r not registered: %s", name, exc)

    def _replay(self) -> None:
        for record in self.journal.requeue_unfinished():
            if record.attempts >= self.config.max_attempts:
                self.journal.finish(record.job_id, JobState.FAILED, error=(
                    f"abandoned: the engine stopped unexpectedly {record.attempts} times while this job was running "
                    f"(out of memory?); not retried again (max_attempts = {self.config.max_attempts})"))
                continue
            self._enqueue(_Job(record))
        if self._jobs:
            log.info("replaying %d unfinished job(s) from the journal", len(self._jobs))

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Engine:
        if self._started:
            return self
        if self._stopping:
            raise EngineStopped("this engine was stopped; make a new one")
        self._started = True
        if self._owns_reconciler and self.reconciler is not None:
            self.reconciler.start()
        for i in range(self.synth_workers):
            self._spawn(f"synth-{i}", self._synth_loop, "synthesis", None)
        for i, backend in enumerate(self.backends):
            self._spawn(f"prove-{i}", self._prove_loop, "proving", backend)
        self._finisher = self._spawn("finish", self._finish_loop, "finishing", None)
        self._spawn("housekeeping", self._housekeeping_loop, "housekeeping", None)
        return self

    def _spawn(self, name: str, target, kind: str, backend) -> threading.Thread:
        self._workers[name] = {"name": name, "kind": kind, "backend": getattr(backend, "name", None), "job": None,
                               "device": getattr(getattr(backend, "vram", None), "device", None), "healthy": True, "error": None,
                               "device_errors": 0, "jobs_done": 0}
        args = (name, backend) if kind == "proving" else (name,)
        t = threading.Thread(target=target, args=args, name=f"cuzk-{name}", daemon=True)
        self._threads.append(t)
        t.start()
        return t

    def stop(self, timeout: float | None = None) -> None:
        """Stop the workers; jobs in flight stop at their next phase boundary and stay in the journal for replay."""
        if self._stopping:
            return
        self._stopping = True
        self._stop_event.set()
        with self._jobs_lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.interrupted = True
        self._queue.close()
        for job in self._ready.close():  # synthesized but never proved: give back what they hold
            self._release(job)
            self._interrupt(job)
        for _ in range(self.synth_workers):
            self._slots.release()  # wake synthesis workers waiting for a slot
        for t in self._threads:
            if t is self._finisher:  # every prover has stopped: what they proved is ahead of this
                self._proved.put(None)
            t.join(timeout)
        for job in jobs:  # queued ones never reached a worker
            if not job.done.is_set():
                self._interrupt(job)
        self.keys.close()
        if self._pinned is not None:
            self._pinned.close()
        if self.runtime is not None:
            self.runtime.close()
        if self._owns_reconciler and self.reconciler is not None:
            self.reconciler.stop()
        with self._jobs_lock:
            self._closed = True
        self.journal.close()
        self._dir_lock.release()

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- keys -------------------------------------------------------------------------------
    def register_key(self, name: str, zkey_path: str | Path, r1cs_path: str | Path | None = None) -> None:
        if r1cs_path is not None and not Path(r1cs_path).is_file():
            raise JobError(f"r1cs file {r1cs_path} for key {name!r} does not exist")
        self.keys.register(name, zkey_path)
        if r1cs_path is None:
            self._r1cs.pop(name, None)
        else:
            self._r1cs[name] = str(Path(r1cs_path).resolve())
        self.journal.save_key(name, str(Path(zkey_path).resolve()), self._r1cs.get(name))

    def unregister_key(self, name: str) -> None:
        self.keys.unregister(name)
        self._r1cs.pop(name, None)
        self.journal.forget_key(name)

    def preload(self, name: str, tier: str | KeyTier | None = None) -> str:
        """Load a key now (default tier: the config's); returns the tier it is at."""
        return self.keys.preload(name, KeyTier(tier) if tier is not None else None).value

    def evict(self, name: str) -> int:
        """Drop an idle key from memory; returns the bytes freed (KeyInUseError while a job uses it)."""
        return self.keys.evict(name)

    def working_set(self, circuit: str) -> WorkingSet:
        """The reservation one proof of ``circuit`` takes now (estimate, raised to the measured peak)."""
        return working_set(self.keys.header(circuit), backend=self.backends[0] if self.backends else None,
                           r1cs_path=self._r1cs.get(circuit), measured_bytes=self._peaks.get(circuit))

    def record_peak(self, circuit: str, nbytes: int) -> int:
        """Remember a measured working-set peak for ``circuit`` (the largest is kept); returns the stored value."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"peak must be a non-negative number of bytes, got {nbytes!r}")
        stored = self.journal.save_peak(circuit, nbytes)
        self._peaks[circuit] = stored
        return stored

    # ---- jobs -------------------------------------------------------------------------------
    def submit(self, circuit: str, witness: bytes | bytearray | memoryview | str | os.PathLike,
               priority: Priority | int | str = Priority.NORMAL, request_id: str | None = None, *,
               witness_identity: FileIdentity | None = None) -> str:
        """Journal a proof request (durable before this returns) and queue it; returns the job id.

        ``witness`` is the .wtns file's bytes or its path. A path is copied into the journal by the
        kernel, so a large witness costs no copies under the GIL (the daemon takes paths from
        clients on its unix socket); a file the engine cannot open, or one whose identity is not
        ``witness_identity`` (what the caller saw there), raises ``WitnessFileError``.
        """
        if self._stopping:
            raise EngineStopped("the engine is stopping; submit to the next one")
        priority = Priority.parse(priority)
        if not isinstance(witness, (bytes, bytearray, memoryview, str, os.PathLike)):
            raise JobError(f"witness must be the .wtns file's bytes or its path, got {type(witness).__name__}")
        header = self.keys.header(circuit)  # UnknownKeyError for a circuit nobody registered

        def check(path: Path) -> None:
            check_inputs(header, read_wtns(path))  # FormatError / ProvingError name what is wrong

        if isinstance(witness, (str, os.PathLike)):
            with _open_witness_file(witness, header, witness_identity) as source:
                record, created = self.journal.submit(circuit, priority, source, request_id, check=check)
        else:
            record, created = self.journal.submit(circuit, priority, bytes(witness), request_id, check=check)
        if created:
            self._enqueue(_Job(record))
        return record.job_id

    def _enqueue(self, job: _Job) -> None:
        with self._jobs_lock:
            self._jobs[job.id] = job
        try:
            self._queue.push(job.id, job.priority, job.seq, job)
        except SchedulerClosed:  # stop() raced the submit: the job is journaled and runs after a restart
            with self._jobs_lock:
                self._jobs.pop(job.id, None)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineStopped("the engine is stopped; its journal is closed (a new engine on the data directory has the jobs)")

    def get(self, job_id: str) -> JobRecord:
        self._check_open()
        record = self.journal.get(job_id)
        if record is None:
            raise UnknownJobError(job_id)
        return self._live(record)

    def _live(self, record: JobRecord) -> JobRecord:
        """The journal's record with this engine's live state (PROVING is not journaled)."""
        with self._jobs_lock:
            job = self._jobs.get(record.job_id)
        if job is None or record.finished or job.state is record.state or job.state.terminal:
            return record
        return replace(record, state=job.state)

    def await_result(self, job_id: str, timeout: float | None = None) -> JobRecord:
        with self._jobs_lock:
            job = self._jobs.get(job_id)
        if job is None:
            record = self.get(job_id)
            if not record.finished:
                raise EngineStopped(f"job {job_id} is {record.state.value} but this engine is not running it")
            return record
        if not job.done.wait(timeout):
            raise AwaitTimeout(job_id, job.state, timeout)
        if job.final is None or not job.final.finished:
            raise EngineStopped(f"the engine stopped before job {job_id} finished; it is replayed on restart")
        return job.final

    def cancel(self, job_id: str) -> bool:
        """Cancel a job wherever it is; False when it had already finished."""
        with self._jobs_lock:
            job = self._jobs.get(job_id)
        if job is None:
            self.get(job_id)  # UnknownJobError for an id never seen
            return False
        job.cancel_requested.set()
        if self._queue.remove(job_id) is not None:
            self._finish(job, JobState.CANCELLED, error="cancelled while queued")
        elif self._ready.remove(job_id) is not None:
            self._slots.release()
            self._release(job)
            self._finish(job, JobState.CANCELLED, error="cancelled after synthesis, before proving")
        # Otherwise a worker holds it and stops at its next checkpoint.
        return True

    def list_jobs(self, states: Iterable[JobState | str] | None = None, circuit: str | None = None, limit: int = 100) -> list[JobRecord]:
        """Most recent first; finished jobs stay listed until pruned."""
        self._check_open()
        wanted = None if states is None else {JobState(s) for s in states}
        if wanted is None or not wanted & set(UNFINISHED_STATES):
            return [self._live(r) for r in self.journal.list(states=wanted, circuit=circuit, limit=limit)]
        # A live job's state may differ from its journaled one: ask for every unfinished state, filter after.
        records = self.journal.list(states=wanted | set(UNFINISHED_STATES), circuit=circuit, limit=-1)
        return [r for r in map(self._live, records) if r.state in wanted][:limit]

    def add_listener(self, listener: Callable[[str, JobState], None]) -> None:
        self._listeners.append(listener)

    @property
    def jobs_finished(self) -> int:
        """Jobs this engine finished (any terminal state) since it started."""
        return self._finished

    # ---- the pipeline -----------------------------------------------------------------------
    def _synth_loop(self, name: str) -> None:
        while True:
            self._slots.acquire()
            if self._stopping:
                return
            try:
                job_id, job = self._queue.pop()
            except SchedulerClosed:
                return
            self._workers[name]["job"] = job_id
            handed_over = False
            try:
                handed_over = self._admit_and_synthesize(job, name)
            except BaseException as exc:  # noqa: BLE001 — every failure ends the job, never the worker
                self._end_with(job, exc)
            finally:
                self._workers[name]["job"] = None
                if not handed_over:
                    self._slots.release()

    def _admit_and_synthesize(self, job: _Job, worker: str) -> bool:
        with self._admission:
            self._checkpoint(job)
            # Refused from the header before anything loads: waiting or evicting could never make this room.
            job.workset = self.working_set(job.circuit)
            self._check_fits(job, self.keys.footprint(job.circuit))
            t_key = time.perf_counter()
            job.lease = self.keys.acquire(job.circuit, cancelled=job.cancelled)
            key_load = time.perf_counter() - t_key  # waiting for room for the key and loading it; ~0 when resident
            self._check_fits(job, footprint(job.lease.header, job.lease.tier))  # the key may be at another tier already
            job.reservation = self._reserve(job)
            # Submitted → admitted (a worker, the key and the working set), less the key's part.
            job.phase_timings = {"queue": max(0.0, time.time() - job.submitted_at - key_load), "key_load": key_load}
            self._begin_measure(job)
        job.worker = worker
        self.journal.mark_started(job.id)
        self._set_state(job, JobState.SYNTHESIZING)
        self._checkpoint(job)
        witness = read_wtns(self.journal.witness_path(job.id))
        r1cs_path = self._r1cs.get(job.circuit)
        r1cs = read_r1cs(r1cs_path) if r1cs_path else None
        job.synthesis = synthesize(job.lease.zkey, witness, r1cs=r1cs, cancelled=job.cancelled)
        del witness, r1cs
        self._checkpoint(job)
        self._ready.push(job.id, job.priority, job.seq, job)
        return True

    def _check_fits(self, job: _Job, key_bytes: int) -> None:
        runtime = self.runtime.nbytes if self.runtime is not None else 0  # the process itself: never given back
        if key_bytes + job.workset.total_bytes > self.budget.total_bytes - runtime:
            beside = f" beside the engine's own {format_size(runtime)}" if runtime else ""
            raise JobTooLarge(
                f"circuit {job.circuit!r} needs {format_size(key_bytes)} for its key plus {format_size(job.workset.total_bytes)} "
                f"of working memory, more than the whole budget of {format_size(self.budget.total_bytes)}{beside}; it can "
                "never run here (raise the memory limit or the budget)")

    def _reserve(self, job: _Job) -> Reservation:
        nbytes = job.workset.total_bytes
        label = f"job {job.id[:8]} ({job.circuit})"
        while True:  # bounded waits, so a cancel is seen while queued for memory
            self._checkpoint(job)
            try:
                return self.budget.acquire(nbytes, "working", timeout=0.2, label=label)
            except AcquireTimeout:
                continue

    def _prove_loop(self, name: str, backend) -> None:
        while True:
            try:
                job_id, job = self._ready.pop()
            except SchedulerClosed:
                return
            self._slots.release()
            worker = self._workers[name]
            worker["job"] = job_id
            try:
                proof = self._prove(job, backend)
            except BaseException as exc:  # noqa: BLE001
                worker["job"] = None
                if not is_device_error(exc):
                    self._end_with(job, exc)
                elif not self._device_error(name, backend, job, exc):
                    return  # the device failed its self-test: this worker stops for good
            else:
                worker["job"] = None
                worker["jobs_done"] += 1
                self._proved.put((job, proof))

    def _finish_loop(self, name: str) -> None:
        """Verify, journal and answer each proved job, off the proving threads.

        A device's next proof need not wait for this one's host-side ending: the pairing check,
        the journal's fsync'd commit (which queues behind other files' fsyncs when witnesses
        are coming in) and giving back the job's memory.
        """
        while (item := self._proved.get()) is not None:
            job, proof = item
            self._workers[name]["job"] = job.id
            try:
                self._finish(job, JobState.DONE, **self._complete(job, proof))
            except BaseException as exc:  # noqa: BLE001 — a rejected proof fails its job, never this thread
                self._end_with(job, exc)
            finally:
                self._workers[name]["job"] = None

    def _device_error(self, name: str, backend, job: _Job, exc: BaseException) -> bool:
        """A CUDA error on worker ``name`` while proving ``job``: self-test the device, then requeue or fail the job.

        A device that fails the self-test is marked unhealthy; one that passes keeps proving (the
        job's input, not the device, is then the likely trigger). The job, whose synthesis the
        failed attempt consumed, goes back to the synthesis queue (key lease and working set
        released, taken again) unless it has now hit ``device_errors_per_job`` device errors or no
        healthy device is left: then it fails, naming every device and error. Returns whether this
        worker carries on.
        """
        worker = self._workers[name]
        error = f"{type(exc).__name__}: {exc}"
        problem = device_self_test(backend, job.lease.header.curve if job.lease is not None else BN254)
        outcome = _self_test_outcome(problem)
        where = f"device {worker['device']}" if worker["device"] is not None else f"worker {name}"
        job.device_errors.append((where, error, problem))
        worker["device_errors"] += 1
        worker["error"] = f"{error} (job {job.id}; {outcome})"
        if problem is None:
            log.warning("%s (worker %s) hit a CUDA error on job %s but passed its self-test; it keeps proving: %s",
                        where, name, job.id, error, exc_info=exc)
        else:
            worker["healthy"] = False
            log.error("%s (worker %s) is out of service: a CUDA error on job %s (%s), then its %s", where, name, job.id,
                      error, outcome, exc_info=exc)
        healthy = any(w["kind"] == "proving" and w["healthy"] for w in self._workers.values())
        limit = self.config.device_errors_per_job
        if job.interrupted or job.cancel_requested.is_set():
            self._end_with(job, exc)
        elif len(job.device_errors) >= limit or not healthy:
            self._release(job)
            self._finish(job, JobState.FAILED, error=self._device_failure_reason(job, healthy))
        else:
            log.info("job %s goes back to the queue after its CUDA error on %s", job.id, where)
            self._release(job)
            self.journal.set_state(job.id, JobState.QUEUED)
            self._set_state(job, JobState.QUEUED)
            job.worker = None
            self._enqueue(job)
        return problem is None

    def _device_failure_reason(self, job: _Job, healthy: bool) -> str:
        count = len(job.device_errors)
        if not healthy:
            why = "no healthy device is left"
        else:
            limit = self.config.device_errors_per_job
            why = f"it hit {count} CUDA error{'s' if count > 1 else ''} (device_errors_per_job = {limit})"
        errors = "; ".join(f"{where}: {error} ({_self_test_outcome(problem)})" for where, error, problem in job.device_errors)
        hint = ""
        if healthy and all(problem is None for _, _, problem in job.device_errors):
            hint = " — the devices passed their self-test afterwards, so this job's input likely triggers a kernel bug"
        return f"failed on the GPU and not retried: {why}: {errors}{hint}"

    def _prove(self, job: _Job, backend):
        """The proving half on ``backend``; returns the proof, not yet verified.

        The journal keeps the job as started (SYNTHESIZING) meanwhile: PROVING is live state only
        (``get`` and ``list_jobs`` show it), since a replay treats both alike and the proving
        thread should not wait on a commit.
        """
        self._checkpoint(job)
        self._set_state(job, JobState.PROVING)
        abc = job.workset.abc_bytes

        def abc_released() -> None:
            job.reservation.release(min(abc, job.reservation.nbytes))

        synthesis, job.synthesis = job.synthesis, None
        with self.keys.on_device(job.lease, backend) as device_key:  # bases resident in this device's VRAM when they fit
            return prove_synthesized(backend, device_key.zkey, synthesis, on_abc_released=abc_released, cancelled=job.cancelled)

    def _complete(self, job: _Job, proof) -> dict[str, Any]:
        """Self-verify a proof; returns the result for the journal (the job's resources released)."""
        if job.cancel_requested.is_set():  # cancel() said it would be; a stop() still lets a finished proof be kept
            raise ProofCancelled()
        timings = {**job.phase_timings, **proof.timings}
        if self.config.verify:
            t = time.perf_counter()
            ok = self._verify(job.lease, proof)
            timings["verify"] = time.perf_counter() - t
            if not ok:
                raise ProofRejected("the proof failed self-verification against the key, so it is not returned: the witness "
                                    "does not satisfy the circuit (register the key with its .r1cs to name the failing "
                                    "constraint) or the key is corrupt")
        self._end_measure(job)
        proof_json = json.loads(proof_to_json(proof))
        public = [str(v) for v in proof.public_signals]
        self._release(job)
        return {"proof": proof_json, "public_signals": public, "timings": timings}

    def _verify(self, lease: KeyLease, proof) -> bool:
        from ..prover.verify import prepare_vkey, verify, vkey_from_zkey

        with self._vkey_lock:  # the prepared key is derived once per registration and kept across evictions
            prepared = lease.extras.get("prepared_vkey")
            if prepared is None:
                prepared = lease.extras["prepared_vkey"] = prepare_vkey(vkey_from_zkey(lease.zkey))
        return verify(prepared, proof.public_signals, proof)

    @staticmethod
    def _checkpoint(job: _Job) -> None:
        if job.cancelled():
            raise ProofCancelled()

    def _end_with(self, job: _Job, exc: BaseException) -> None:
        """A job left the pipeline through an exception: cancelled, failed with a reason, or interrupted by stop()."""
        self._release(job)
        if job.interrupted:
            self._interrupt(job)
        elif isinstance(exc, (ProofCancelled, KeyLoadCancelled)) or job.cancel_requested.is_set():
            self._finish(job, JobState.CANCELLED, error=f"cancelled while {job.state.value}")
        elif isinstance(exc, ValueError):  # bad input: unsatisfied witness, corrupt key, too large...
            self._finish(job, JobState.FAILED, error=str(exc))
        else:
            log.error("job %s failed with an internal error", job.id, exc_info=exc)
            self._finish(job, JobState.FAILED, error=f"internal error: {type(exc).__name__}: {exc}")
        if not isinstance(exc, Exception):
            raise exc

    def _release(self, job: _Job) -> None:
        with job.lock:
            with self._measure_lock:
                self._active.discard(job)
            job.synthesis = None
            if job.reservation is None and job.lease is None:
                return
            return_free_heap()  # the job's arrays are gone: hand their pages back before releasing their bytes
            if job.reservation is not None:
                job.reservation.release()
                job.reservation = None
            if job.lease is not None:
                job.lease.release()
                job.lease = None

    def _set_state(self, job: _Job, state: JobState) -> None:
        job.state = state
        self._notify(job.id, state)

    def _notify(self, job_id: str, state: JobState) -> None:
        for listener in list(self._listeners):
            try:
                listener(job_id, state)
            except Exception:
                log.exception("job listener %r failed", listener)

    def _finish(self, job: _Job, state: JobState, **result) -> None:
        with self._jobs_lock:
            if job.done.is_set():
                return
            job.final = self.journal.finish(job.id, state, **result)
            job.state = state
            self._jobs.pop(job.id, None)
            self._finished += 1
            job.done.set()
        self._notify(job.id, state)

    def _interrupt(self, job: _Job) -> None:
        """Stopping: the job stays unfinished in the journal; wake whoever awaits it."""
        with self._jobs_lock:
            if job.done.is_set():
                return
            job.final = None
            self._jobs.pop(job.id, None)
            job.done.set()

    # ---- measurement ------------------------------------------------------------------------
    def _begin_measure(self, job: _Job) -> None:
        with self._measure_lock:
            for other in self._active:
                other.overlapped = True
            # Not its own peak: another job beside it, a warm key (its page-ins would count), or the
            # circuit's first run in this process (numba's JIT and caches allocate then, once).
            job.overlapped = bool(self._active) or job.lease.tier is not KeyTier.HOT or job.circuit not in self._seen_circuits
            self._seen_circuits.add(job.circuit)
            self._active.add(job)
            job.loads_at_start = self.keys.loads_total()
            if self._probe is not None and not job.overlapped:
                job.probe_baseline = self._probe.begin()

    def _end_measure(self, job: _Job) -> None:
        if self._probe is None or job.probe_baseline is None:
            return
        with self._measure_lock:
            clean = not job.overlapped and self.keys.loads_total() == job.loads_at_start
            peak = self._probe.end(job.probe_baseline) if clean else None
        if peak is not None and peak > job.workset.estimated_bytes and peak > (self._peaks.get(job.circuit) or 0):
            log.info("circuit %s: measured working-set peak %s above the estimate %s", job.circuit, format_size(peak),
                     format_size(job.workset.estimated_bytes))
            self.record_peak(job.circuit, peak)

    # ---- housekeeping and status ------------------------------------------------------------
    def _housekeeping_loop(self, name: str) -> None:
        last_prune = last_heartbeat = 0.0
        while not self._stop_event.wait(self.config.housekeeping_interval_s):
            try:
                self.keys.maintain()
                if self.runtime is not None and self._idle():
                    self.runtime.update()
                now = time.monotonic()
                if now - last_prune >= 60:
                    self.journal.prune()
                    last_prune = now
                if self.config.heartbeat and now - last_heartbeat >= 1:
                    self._heartbeat()
                    last_heartbeat = now
            except Exception:
                log.exception("engine housekeeping failed; continuing")

    def _idle(self) -> bool:
        """No job holds memory and nobody waits for it: the process's RSS is its runtime plus its keys."""
        with self._measure_lock:
            if self._active:
                return False
        snap = self.budget.snapshot()
        return snap["waiters"] == 0 and snap["by_category"]["working"]["bytes"] == 0 and not self.keys.any_loading()

    def _heartbeat(self) -> None:
        from .supervisor import write_engine_state

        latest = self.reconciler.latest if self.reconciler is not None else None
        write_engine_state(
            self.config.data_dir, budget_total=self.budget.total_bytes, budget_reserved=self.budget.reserved_bytes,
            charged_bytes=latest.actual_bytes if latest else None,
            untracked_peak=self.reconciler.peak_untracked_bytes if self.reconciler is not None else None,
            jobs_finished=self._finished)

    def status(self) -> dict[str, Any]:
        self._check_open()
        with self._jobs_lock:
            active = [{"job_id": j.id, "circuit": j.circuit, "priority": j.priority.name, "state": j.state.value,
                       "reserved_bytes": j.reservation.nbytes if j.reservation else 0, "worker": j.worker,
                       "requeues": len(j.device_errors), "device_errors": len(j.device_errors)}  # a live job was requeued after each
                      for j in self._jobs.values() if j.state is not JobState.QUEUED]
        by_state = self.journal.counts()
        proving = min(by_state[JobState.SYNTHESIZING.value], sum(j["state"] == JobState.PROVING.value for j in active))
        by_state[JobState.SYNTHESIZING.value] -= proving  # journaled as started; PROVING is live state only
        by_state[JobState.PROVING.value] += proving
        reconciler = None
        if self.reconciler is not None:
            latest = self.reconciler.latest
            reconciler = {"latest": latest.to_dict() if latest else None,
                          "peak_untracked_bytes": self.reconciler.peak_untracked_bytes,
                          "peak_actual_bytes": self.reconciler.peak_actual_bytes}
        return {
            "running": self._started and not self._stopping,
            "budget": self.budget.snapshot(),
            "reconciler": reconciler,
            "runtime": self.runtime.to_dict() if self.runtime is not None else None,
            "keys": self.keys.status(),
            "devices": self.keys.device_status(),
            "jobs": {
                "by_state": by_state,
                "queued_by_priority": self._queue.depth_by_priority(),
                "waiting_for_prover": len(self._ready),
                "active": active,
                "finished_since_start": self._finished,
                "result_bytes": self.journal.result_bytes(),
            },
            "workers": [dict(w) for w in self._workers.values()],
            "peaks": dict(self._peaks),
            "config": {"backend": [getattr(b, "name", str(b)) for b in self.backends], "verify": self.config.verify,
                       "synth_workers": self.synth_workers, "key_tier": self.config.key_tier,
                       "data_dir": str(self.config.data_dir)},
        }
