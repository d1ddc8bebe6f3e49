"""The proving engine: the daemon's core, in-process, below any network layer.

Usage (what the gRPC server, the CLI and the tests do)::

    from cuzk.engine import Engine, EngineConfig, Priority

    engine = Engine(EngineConfig(data_dir="/var/lib/cuzk", keys={"sha": "/keys/sha256.zkey"}))
    engine.start()
    job_id = engine.submit("sha", wtns_bytes, Priority.HIGH, request_id="client-42")  # durable on return
    record = engine.await_result(job_id, timeout=60)   # JobRecord; AwaitTimeout if not done in time
    record.state, record.proof, record.public_signals, record.error
    engine.stop()

The API, all thread-safe:

- ``submit(circuit, witness, priority=NORMAL, request_id=None) -> job_id`` — the witness is
  the .wtns file's bytes or its path (copied into the journal by the kernel, ``intake``). It is
  checked against the key's header (curve, number of signals) and the job is journaled
  before this returns (on the disk then or within ``journal_fsync``'s delay); a repeated ``request_id`` returns the first job's id. Raises a
  ``ValueError`` subclass for an unknown circuit, a malformed or mismatched witness, a request
  id reused for other work.
- ``await_result(job_id, timeout=None) -> JobRecord`` — the finished record (DONE with
  ``proof``/``public_signals``, FAILED with ``error``, or CANCELLED). ``AwaitTimeout`` when
  not finished in time, ``EngineStopped`` when the engine stopped first (the job is then
  replayed by the next engine on this data directory), ``UnknownJobError``. A DONE record's
  ``timings`` (seconds) are its phases: ``intake`` (its ``submit``: the witness checked and
  journaled), ``queue`` (queued → admitted with its key and working set, less the key's part;
  a replayed job's counts from its submission), ``key_load`` (waiting for room for the key and
  loading it; ~0 when resident), ``check``/``synthesize``, ``ntt``/``msm``/``blind``, ``verify``.
- ``get(job_id) -> JobRecord`` (now, without waiting), ``list_jobs(states, circuit, limit)``.
- ``cancel(job_id) -> bool`` — works at every stage. A queued job, or a synthesized one
  waiting for a device, is CANCELLED when this returns; one that a worker holds (waiting
  for memory, synthesizing, proving) stops at its next phase boundary, so its state
  settles to CANCELLED shortly after (await it). False when the job had already finished.
- ``submit_input(circuit, input_json, priority=NORMAL, request_id=None) -> job_id`` — the
  circuit's input (input.json text, or the parsed object) for a key registered with its
  circom .wasm: the witness is calculated on the engine's witness threads (``witness_workers``,
  so intake is never held by it), its instance's memory and the witness reserved in the
  budget while it runs, then submitted as above. Input that does not fit the
  circuit, or breaks one of its asserts, raises ``InputError`` (a ``ValueError``) naming the
  signal or the template.
- ``register_key(name, zkey_path, r1cs_path=None, wasm_path=None)`` / ``unregister_key(name)`` —
  remembered in the journal; with an r1cs every witness is checked for satisfaction before any
  MSM; with a wasm the key takes input JSON. ``preload(name, tier=None)``, ``evict(name)``.
- ``status() -> dict`` — budget by category, reconciler reading, keys and tiers, jobs by
  state and priority, workers, measured peaks. ``working_set(circuit) -> WorkingSet``.
- ``room(circuit) -> (jobs, reason)`` — jobs of ``circuit`` that could start now, or why none
  ever can (what ``cuzk.cluster`` routes by).
- ``record_peak(circuit, nbytes)`` — a measured working-set peak for a circuit on the path its
  jobs take (admission measures one itself when a job runs alone); later reservations for it
  are calibrated into [1, 1.2]× the largest.
- ``add_listener(fn)`` — ``fn(job_id, state)`` is called from the worker thread at every
  state change, before the worker's next cancellation check (observers, streaming status).

Inside, one owner per concept: ``tracker``, ``admission``, ``workers`` (synthesis, K per device,
finishing, the device-error policy), ``devices`` (the backends and their K), ``procs`` (with
``device_processes``: a worker process owns each device), ``scheduler``, the ``journal``; this
module builds and wires them, and nothing below imports it. GPUs get worker processes by default
(``device_processes = "auto"``): a crash or CUDA error stays in one child, and the intake never
holds its lanes' GIL; the CPU backend proves in the engine's threads.

Lock order (outermost first; a thread holding one only takes those below it):
``Admission._admitting`` → the key manager's locks → the budget's lock;
``JobTracker._lock`` → the journal's; ``Grant._lock`` → the budget's (to give bytes back);
a device's ``CudaNtt._lock`` (building a shared table) → its VRAM budget's evictor's
``DeviceKeys._lock`` and its ``VramBudget._lock`` (never held together), the runtime's locks;
the ready scheduler's condition → ``DeviceErrorPolicy._lock`` (a device worker's ``give_up``);
the key manager's lock → ``DeviceProcesses._lock`` (``host_copies``: the workers' answers, asked at
registration; only a failed one is asked of a worker again then, which never waits on this process).
Leaves: ``LiveJob.lock``, ``Admission._measuring``, ``WorkerState._lock``, the other
schedulers' conditions, a lane's lock, ``DeviceProcess._lock``, ``DeviceProcesses._lock``.
No lock is held while a job's listener runs, while a worker waits for a stage, while a
lane waits for another lane's key upload, or while a proof waits for its vectors' VRAM (but
the budget's own condition).

``stop()`` interrupts work in flight at its next phase boundary and leaves it unfinished in
the journal, so the next engine on the data directory replays it (as after a crash). A job
whose attempts reach ``max_attempts`` (the engine died under it each time, e.g. OOM kills)
is failed at replay instead of being retried forever.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..backends.base import is_device_backend
from ..keys.host import KeyTier, footprint
from ..keys.manager import KeyManager
from ..memory.budget import MemoryBudget, Reservation
from ..memory.limits import read_limits, read_rss_bytes
from ..memory.pinned import PageAlignedAllocator, PinnedPool
from ..memory.plan import plan_budget
from ..memory.probe import load_saved_probes
from ..memory.runtime import RuntimeReservation
from ..memory.units import format_size
from ..prover.sizing import WorkingSet
from ..witness.wasm import use_cache_dir as use_wasm_cache_dir
from .admission import Admission, JobTooLarge
from .config import EngineConfig
from .devices import device_ordinals, make_backends, proofs_per_backend
from .intake import FileIdentity, journal_witness
from .jobs import JobError, JobState, Priority, abandoned_reason
from .journal import DataDirLock, Journal
from .procs import DeviceProcesses
from .scheduler import SchedulerClosed
from .tracker import EngineStopped, JobTracker, LiveJob, TrackedJobs
from .witnesses import WitnessCalculators
from .workers import DeviceErrorPolicy, DeviceWorker, Finisher, Stages, SynthesisWorker, WorkerState, spawn

log = logging.getLogger("cuzk.engine")


class Engine(TrackedJobs):
    def __init__(self, config: EngineConfig, *, budget: MemoryBudget | None = None, reconciler=None, backends: list | None = None,
                 process_backend: Callable[[int], Any] | None = None):
        """``budget``/``reconciler``: share the daemon's; by default the engine plans its own from the real limit.
        ``backends``: K device workers per entry (``proofs_per_device``); by default one per device of ``config.backend``.
        ``process_backend``: with ``device_processes``, what the worker process of each of ``config.devices`` (a list)
        makes its backend with, from its ordinal, in place of ``CudaBackend(device=d)`` (pickled to the spawned
        process: a module-level function or class; devices emulated on the host, as ``backends`` gives in-process)."""
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock = DataDirLock(config.data_dir)
        self._dir_lock.acquire()
        try:
            self._owns_reconciler = False
            self._procs: DeviceProcesses | None = None  # device_processes: the devices' owners
            self.runtime: RuntimeReservation | None = None
            if budget is None:
                budget, reconciler = self._plan_budget()
                # The engine's own memory, inside the budget it planned (a given budget is the caller's to size): what
                # the kernel charges for it, so the file-backed pages another cgroup was charged for are not reserved.
                charged = self._resident_bytes if reconciler is None else (lambda: min(self._resident_bytes(), reconciler.measure()))
                self.runtime = RuntimeReservation(budget, rss=charged,
                                                  on_accounted=reconciler.accounted if reconciler is not None else None)
            self.budget = budget
            self.reconciler = reconciler
            self.journal = Journal.of(config)
            wanted = config.device_processes
            if process_backend is not None and not (wanted is not False and isinstance(config.devices, list)):
                raise ValueError("process_backend needs device_processes and devices listed by ordinal")
            ordinals = None  # the devices' worker processes, by CUDA ordinal (None: none, or a CPU worker's)
            if wanted is True or (wanted == "auto" and backends is None):  # "auto": given backends run in-process
                ordinals = config.devices if process_backend is not None else device_ordinals(config)
            # "auto": worker processes wherever the engine proves on GPUs of its own making
            self.device_processes = wanted if isinstance(wanted, bool) else ordinals is not None
            self.backends = [] if self.device_processes else backends if backends is not None else make_backends(config)
            on_device = ordinals is not None or any(is_device_backend(b) for b in self.backends)
            if config.key_home == "device" and not on_device:
                raise ValueError("key_home = \"device\" needs a device backend (CUDA); this engine proves on the CPU")
            # Hot keys in page-locked memory only when a device copies from them (locking pages costs load time).
            self.keys = KeyManager(budget, chunk_bytes=config.load_chunk_bytes, idle_evict_s=config.key_idle_evict_s,
                                   default_tier=KeyTier(config.key_tier), key_home=config.key_home,
                                   allocator=None if self.backends and on_device else PageAlignedAllocator(),
                                   provers_hold_keys=self.device_processes,
                                   msm_tables=config.cpu_msm_tables if not on_device and self.backends else False)
            self._pinned: PinnedPool | None = None
            self._attach_devices()
            use_wasm_cache_dir(config.data_dir)  # compiled circuits kept with the daemon's state
            self.witnesses = WitnessCalculators(budget, config.witness_workers)  # keys registered with their .wasm
            self._register_saved_keys()
            if self.device_processes:  # the devices' owners, started beside the registered keys (they size K for them)
                self._procs = DeviceProcesses(config, ordinals, self.keys, process_backend)
                # A worker's hot copy of a key (a CPU worker's; a GPU worker's that does not home it in VRAM) is reserved
                # with the key's lease here; the GPUs' VRAM tiers are the workers': status shows what they report.
                procs = self._procs
                self.keys.attach_provers(
                    lambda name, path, header: footprint(header, KeyTier.HOT) * procs.host_copies(name, path), procs.drop,
                    devices=procs.device_status if ordinals is not None else None)
                if self.runtime is not None:  # their interpreters and backends are the engine's own memory too
                    self.runtime.update()
        except BaseException:
            self._dir_lock.release()
            raise
        self.tracker = JobTracker(self.journal)
        self.admission = Admission(budget, self.keys, self.journal, on_device=on_device,
                                   runtime=self.runtime, measure_peaks=config.measure_peaks, devices=self._procs,
                                   prover_pids=self._procs.pids if self._procs is not None else None)
        headers = [self.keys.header(name) for name in self.keys.names()]
        self.proofs_per_device = (self._procs.proofs_per_device if self._procs is not None else  # K per device
                                  proofs_per_backend(config.proofs_per_device, self.backends, headers))
        # "auto": every proving slot finds its next job synthesized when it finishes, and one more is synthesizing;
        # admission still holds them all to the host budget.
        self.synth_workers = config.synth_workers if config.synth_workers != "auto" else (
            sum(self.proofs_per_device) + 1 if on_device else 1)
        self._stages = Stages(slots=threading.Semaphore(self.synth_workers))
        self._workers: list[WorkerState] = []
        self._synth_threads: list[threading.Thread] = []
        self._device_threads: list[threading.Thread] = []
        self._finisher: threading.Thread | None = None
        self._housekeeper: threading.Thread | None = None
        self._started = self._stopping = False
        self._replay()

    # ---- construction helpers ----------------------------------------------------------------
    def _plan_budget(self) -> tuple[MemoryBudget, Any]:
        from ..memory.reconcile import Reconciler

        probes, _ = load_saved_probes()
        plan = plan_budget(read_limits(), configured_bytes=self.config.budget_bytes, probes=probes,
                           trust_configured=self.config.budget_over_limit)
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

    def _attach_devices(self) -> None:
        """Give every device backend its VRAM tier in the key manager and the pinned staging pool (charged to
        the host budget)."""
        devices = [b for b in self.backends if is_device_backend(b)]
        if devices:
            self._pinned = PinnedPool(self.budget, self.keys.allocator)
            for backend in devices:
                self.keys.add_device(backend)
                backend.attach_staging(self._pinned)  # a device worker never waits for a buffer: try_get

    def _register_saved_keys(self) -> None:
        wanted = dict(self.journal.saved_keys())
        for name, path in self.config.keys.items():
            wanted[name] = (path, self.config.r1cs.get(name), self.config.wasm.get(name))
        for name, (path, r1cs, wasm) in wanted.items():
            try:
                self.register_key(name, path, r1cs, wasm)
            except (ValueError, OSError) as exc:
                # A key that went away must not stop the daemon; its jobs fail with the reason.
                log.error("key %r not registered: %s", name, exc)

    def _replay(self) -> None:
        for record in self.journal.requeue_unfinished():
            if record.attempts >= self.config.max_attempts:
                self.journal.finish(record.job_id, JobState.FAILED,
                                    error=abandoned_reason(record.attempts, self.config.max_attempts, "the engine"))
                continue
            self._enqueue(LiveJob(record))
        if len(self.tracker):
            log.info("replaying %d unfinished job(s) from the journal", len(self.tracker))

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Engine:
        if self._started:
            return self
        if self._stopping:
            raise EngineStopped("this engine was stopped; make a new one")
        self._started = True
        if self._owns_reconciler and self.reconciler is not None:
            self.reconciler.start()
        stages, tracker = self._stages, self.tracker
        for i in range(self.synth_workers):
            state = self._worker(f"synth-{i}", "synthesis")
            self._synth_threads.append(spawn(state.name, SynthesisWorker(state, stages, tracker, self.admission,
                                                                         synthesize_here=self._procs is None).run))
        policy = DeviceErrorPolicy(self.config.device_errors_per_job, stages, tracker)  # its provers enlist as made
        if self._procs is not None:  # K lanes per worker process, each feeding it one job at a time
            self._device_threads += [spawn(lane.state.name, lane.run) for lane in self._procs.lanes(
                lambda name, device: self._worker(name, "proving", device=device), stages, tracker,
                self.config.max_attempts, policy)]
        provers = [(self._worker(f"prove-{backend.device}-{k}" if is_device_backend(backend) else f"prove-{i}", "proving",
                                 backend), backend)
                   for i, (backend, lanes) in enumerate(zip(self.backends, self.proofs_per_device)) for k in range(lanes)]
        workers = [DeviceWorker(state, backend, stages, tracker, self.keys, policy) for state, backend in provers]
        self._device_threads += [spawn(worker.state.name, worker.run) for worker in workers]  # once all have enlisted
        state = self._worker("finish", "finishing")
        self._finisher = spawn(state.name, Finisher(state, stages, tracker, self.admission, self.config.verify).run)
        self._housekeeper = spawn(self._worker("housekeeping", "housekeeping").name, self._housekeeping_loop)
        return self

    def _worker(self, name: str, kind: str, backend=None, device: int | None = None) -> WorkerState:
        device = backend.device if is_device_backend(backend) else device
        state = WorkerState(name, kind, backend=backend.name if backend is not None else None, device=device)
        self._workers.append(state)
        return state

    def stop(self, timeout: float | None = None) -> None:
        """Stop the workers; jobs in flight stop at their next phase boundary and stay in the journal for replay.

        The order is the pipeline's: synthesis workers, then device workers, then the finisher
        (after everything the devices proved), then housekeeping.
        """
        if self._stopping:
            return
        self._stopping = True
        stages = self._stages
        stages.stopping.set()
        jobs = self.tracker.jobs()
        for job in jobs:
            job.interrupted = True
        self.witnesses.close()
        stages.queued.close()
        for job in stages.ready.close():  # synthesized but never proved: give back what they hold
            job.release()
            self.tracker.interrupt(job)
        for _ in range(self.synth_workers):
            stages.slots.release()  # wake synthesis workers waiting for a slot
        if self._procs is not None:  # their jobs stop at the next check and stay in the journal; their lanes end
            self._procs.close(timeout)
        for thread in self._synth_threads + self._device_threads:
            thread.join(timeout)
        stages.proved.put(None)  # every device worker has stopped: what they proved is ahead of this
        for thread in (self._finisher, self._housekeeper):
            if thread is not None:
                thread.join(timeout)
        for job in jobs:  # queued ones never reached a worker
            if not job.done.is_set():
                self.tracker.interrupt(job)
        self.keys.close()
        if self._pinned is not None:
            self._pinned.close()
        if self.runtime is not None:
            self.runtime.close()
        if self._owns_reconciler and self.reconciler is not None:
            self.reconciler.stop()
        self.tracker.close()
        self.journal.close()
        self._dir_lock.release()

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- keys -------------------------------------------------------------------------------
    def register_key(self, name: str, zkey_path: str | Path, r1cs_path: str | Path | None = None,
                     wasm_path: str | Path | None = None) -> None:
        if r1cs_path is not None and not Path(r1cs_path).is_file():
            raise JobError(f"r1cs file {r1cs_path} for key {name!r} does not exist")
        calculator = None if wasm_path is None else self.witnesses.prepare(name, zkey_path, wasm_path)
        self.keys.register(name, zkey_path, r1cs_path)  # the key holds its parsed r1cs while loaded
        if self._procs is not None:  # what its worker processes hold of it, known before any lease asks
            self._procs.describe(name)
        self.witnesses.set(name, calculator)
        r1cs = self.keys.r1cs_path(name)
        self.journal.save_key(name, str(Path(zkey_path).resolve()), None if r1cs is None else str(r1cs),
                              None if calculator is None else str(calculator.path))

    def unregister_key(self, name: str) -> None:
        self.keys.unregister(name)
        self.witnesses.set(name, None)
        self.journal.forget_key(name)

    def preload(self, name: str, tier: str | KeyTier | None = None) -> str:
        """Load a key now (default tier: the config's); returns the tier it is at."""
        return self.keys.preload(name, KeyTier(tier) if tier is not None else None).value

    def evict(self, name: str) -> int:
        """Drop an idle key from memory; returns the bytes freed (KeyInUseError while a job uses it)."""
        return self.keys.evict(name)

    def warm_up(self) -> float:
        """Compile or load the kernels of the registered keys' curves (BN254's when none) on the backends; seconds."""
        from .warmup import warm_up

        curves = {self.keys.header(name).curve.name for name in self.keys.names()} or {"bn254"}
        if self._procs is not None:
            return self._procs.warm_up(curves)
        return warm_up(self.backends, curves, msm_tables=self.keys.msm_tables is not False,
                       device_homes=self.config.key_home != "host")

    def working_set(self, circuit: str) -> WorkingSet:
        """The host reservation one proof of ``circuit`` takes now (the estimate, calibrated by the measured peak)."""
        return self.admission.working_set(circuit)

    def record_peak(self, circuit: str, nbytes: int) -> int:
        """Keep a measured working-set peak for ``circuit`` on its jobs' path (the largest); returns the stored one."""
        return self.admission.record_peak(circuit, nbytes)

    def room(self, circuit: str) -> tuple[int, str | None]:
        """Jobs of ``circuit`` that could start now beside those held — free pipeline slots, bounded by what admission's
        budget holds — or admission's reason why none ever can: what a router in front of engines asks (``cuzk.cluster``)."""
        try:
            self.admission.check_fits(circuit)  # UnknownKeyError for a circuit nobody registered
        except JobTooLarge as exc:
            return 0, str(exc)
        held = self.tracker.jobs()
        slots = self.synth_workers + sum(self.proofs_per_device) - len(held)
        waiting = [job.circuit for job in held if job.grant is None]
        return max(0, min(slots, self.admission.fitting_now(circuit, waiting))), None

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
        started = time.perf_counter()
        header = self.keys.header(circuit)  # UnknownKeyError for a circuit nobody registered
        record, created = journal_witness(self.journal, circuit, header, witness, Priority.parse(priority), request_id,
                                          witness_identity)
        if created:
            self._enqueue(LiveJob(record, intake_s=time.perf_counter() - started))
        return record.job_id

    def check_fits(self, circuit: str) -> None:
        """Whether a request for ``circuit`` can be taken at all: ``EngineStopped`` while stopping, ``UnknownKeyError``
        for an unregistered circuit, ``JobTooLarge`` when its proofs could never fit the budget."""
        if self._stopping:
            raise EngineStopped("the engine is stopping; submit to the next one")
        self.keys.header(circuit)
        self.admission.check_fits(circuit)

    def submit_input(self, circuit: str, input_json: str | bytes | Mapping[str, Any],
                     priority: Priority | int | str = Priority.NORMAL, request_id: str | None = None,
                     reservation: Reservation | None = None) -> str:
        """:meth:`submit` the witness ``witnesses`` calculates from ``circuit``'s input (input.json text or object;
        ``reservation``: ``witnesses.reserve``'s, taken by a caller that parsed the input itself)."""
        if self._stopping:
            raise EngineStopped("the engine is stopping; submit to the next one")
        self.keys.header(circuit)  # UnknownKeyError for a circuit nobody registered
        return self.submit(circuit, self.witnesses.wtns(circuit, input_json, reservation), priority, request_id)

    def _enqueue(self, job: LiveJob) -> None:
        self.tracker.add(job)
        try:
            self._stages.queued.push(job.id, job.priority, job.seq, job)
        except SchedulerClosed:  # stop() raced the submit: the job is journaled and runs after a restart
            self.tracker.discard(job)

    def cancel(self, job_id: str) -> bool:
        """Cancel a job wherever it is; False when it had already finished."""
        job = self.tracker.to_cancel(job_id)
        if job is None:
            return False
        if self._stages.queued.remove(job_id) is not None:
            self.tracker.finish(job, JobState.CANCELLED, error="cancelled while queued")
        elif self._stages.ready.remove(job_id) is not None:
            self._stages.slots.release()
            job.release()
            self.tracker.finish(job, JobState.CANCELLED, error="cancelled after synthesis, before proving")
        elif self._procs is not None:  # a worker process holds it, or will: it stops at its next checkpoint
            self._procs.cancel(job_id)
        # Otherwise a worker holds it and stops at its next checkpoint.
        return True

    # ---- housekeeping and status ------------------------------------------------------------
    def _resident_bytes(self) -> int:  # what the kernel holds resident for this engine and its worker processes
        return read_rss_bytes() + (self._procs.rss_bytes() if self._procs is not None else 0)

    def _housekeeping_loop(self) -> None:
        last_prune = last_heartbeat = 0.0
        while not self._stages.stopping.wait(self.config.housekeeping_interval_s):
            try:
                self.keys.maintain()
                if self.runtime is not None and self.admission.idle():
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

    def _heartbeat(self) -> None:
        from .supervisor import write_engine_state

        latest = self.reconciler.latest if self.reconciler is not None else None
        write_engine_state(
            self.config.data_dir, budget_total=self.budget.total_bytes, budget_reserved=self.budget.reserved_bytes,
            charged_bytes=latest.actual_bytes if latest else None,
            untracked_peak=self.reconciler.peak_untracked_bytes if self.reconciler is not None else None,
            jobs_finished=self.tracker.finished)

    def status(self) -> dict[str, Any]:
        self.tracker.check_open()
        active = []
        for job in self.tracker.jobs():
            if job.state is JobState.QUEUED:
                continue
            grant = job.grant
            active.append({"job_id": job.id, "circuit": job.circuit, "priority": job.priority.name, "state": job.state.value,
                           "reserved_bytes": grant.reservation.nbytes if grant is not None else 0, "worker": job.worker,
                           "device_errors": len(job.device_errors)})
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
                "queued_by_priority": self._stages.queued.depth_by_priority(),
                "waiting_for_prover": len(self._stages.ready),
                "active": active,
                "finished_since_start": self.tracker.finished,
                "result_bytes": self.journal.result_bytes(),
            },
            "workers": [w.snapshot() for w in self._workers],
            "device_processes": self._procs.status() if self._procs is not None else None,
            "peaks": self.admission.peaks,
            "config": {"backend": self._procs.backend_names if self._procs else [b.name for b in self.backends], "verify": self.config.verify,
                       "synth_workers": self.synth_workers, "proofs_per_device": self.proofs_per_device,
                       "key_tier": self.config.key_tier, "key_home": self.config.key_home,
                       "data_dir": str(self.config.data_dir)},
        }
