"""The engine's workers — synthesis, K per device, finishing — and the stages that hand jobs between them.

A job goes: ``Stages.queued`` → a ``SynthesisWorker`` admits it (``Admission``) and
synthesizes it → ``Stages.ready`` → a ``DeviceWorker`` proves it → ``Stages.proved`` → the
``Finisher`` verifies, journals and answers it. A device has K device workers, each proving
in its own lane (streams of its own on the device), so K proofs are in flight on it at once.
``Stages.slots`` counts jobs synthesizing or synthesized and waiting for a device, so
synthesis runs ahead of the devices by at most ``synth_workers`` jobs and never ahead of
memory. Every transition goes through the tracker.

Each worker's ``WorkerState`` is written by its own thread and read by status and by the
device-error policy; its lock is a leaf in the engine's lock order.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ..backends.base import is_device_backend, is_device_error_on
from ..backends.selftest import device_self_test
from ..curves import BN254
from ..formats.json_io import proof_to_json
from ..formats.wtns import read_wtns
from ..keys.manager import KeyLease, KeyManager
from ..prover.groth16 import Proof, ProofCancelled, ProvingError, prove_synthesized, synthesize, wait_for_vectors
from .admission import Admission
from .jobs import JobState
from .scheduler import Scheduler, SchedulerClosed
from .tracker import JobTracker, LiveJob

log = logging.getLogger("cuzk.engine")


class ProofRejected(ProvingError):
    """The proof did not pass self-verification; it is not returned."""


@dataclass
class WorkerState:
    """One worker as status shows it; changed only through ``update`` (its own thread) and read by ``snapshot``."""

    name: str
    kind: str  # "synthesis" | "proving" | "finishing" | "housekeeping"
    backend: str | None = None
    device: int | None = None
    job: str | None = None
    healthy: bool = True
    error: str | None = None
    device_errors: int = 0
    jobs_done: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def update(self, **changes: Any) -> None:
        with self._lock:
            for key, value in changes.items():
                setattr(self, key, value)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_lock"}


@dataclass
class Stages:
    """The hand-offs between workers, and the engine's stop signal."""

    queued: Scheduler[LiveJob] = field(default_factory=Scheduler)  # submitted, waiting for a synthesis worker
    ready: Scheduler[LiveJob] = field(default_factory=Scheduler)  # synthesized, waiting for a device
    proved: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # (job, proof) to finish; None ends the finisher
    slots: threading.Semaphore = field(default_factory=threading.Semaphore)  # synthesizing + synthesized-not-proving
    stopping: threading.Event = field(default_factory=threading.Event)


class SynthesisWorker:
    """Takes the most urgent queued job when a slot is free, admits it, and synthesizes it for the devices (unless
    they synthesize it themselves, in worker processes)."""

    def __init__(self, state: WorkerState, stages: Stages, tracker: JobTracker, admission: Admission,
                 synthesize_here: bool = True):
        """``synthesize_here``: False when device worker processes synthesize from the witness file (``engine.procs``):
        this worker then only admits."""
        self.state, self.stages, self.tracker, self.admission = state, stages, tracker, admission
        self.synthesize_here = synthesize_here

    def run(self) -> None:
        while True:
            self.stages.slots.acquire()
            if self.stages.stopping.is_set():
                return
            try:
                job_id, job = self.stages.queued.pop()
            except SchedulerClosed:
                return
            self.state.update(job=job_id)
            handed_over = False
            try:
                self._synthesize(job)
                handed_over = True
            except BaseException as exc:  # noqa: BLE001 — every failure ends the job, never the worker
                self.tracker.end_with(job, exc)
            finally:
                self.state.update(job=None)
                if not handed_over:
                    self.stages.slots.release()

    def _synthesize(self, job: LiveJob) -> None:
        job.grant = self.admission.admit(job)
        self.tracker.start(job, self.state.name)
        job.checkpoint()
        if self.synthesize_here:
            self._synthesize_here(job)
        self.stages.ready.push(job.id, job.priority, job.seq, job)

    def _synthesize_here(self, job: LiveJob) -> None:
        witness = read_wtns(self.tracker.journal.witness_path(job.id))
        lease = job.grant.lease  # with the r1cs parsed when the key was loaded, if it has one
        job.synthesis = synthesize(lease.zkey, witness, r1cs=lease.r1cs, cancelled=job.cancelled,
                                   defer_ab=job.grant.workset.device_synthesis)  # a/b then made on the device
        del witness
        job.checkpoint()


def _self_test_outcome(problem: str | None) -> str:
    return "self-test passed" if problem is None else f"self-test failed: {problem}"


class ReportedDeviceError(RuntimeError):
    """A device error met in a device worker process (``engine.procs``), as the process named it ("Type: message"),
    with the outcome of the self-test it ran on its device then (``problem``: None when it passed)."""

    def __init__(self, error: str, problem: str | None):
        super().__init__(error)
        self.problem = problem


def _error_text(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ReportedDeviceError) else f"{type(exc).__name__}: {exc}"


class DeviceErrorPolicy:
    """What a CUDA error while proving means for the device and the job: the one owner of that decision, for the
    in-process device workers and the device worker processes' lanes alike.

    The device runs a self-test (an NTT and an MSM against the reference arithmetic), which
    tells a sick device from a job that trips a kernel bug: a device that fails it is out of
    service, all its K workers with it (those waiting for a job stop at once, those proving
    after their proof); one that passes keeps proving. The job goes back to the queue for any
    healthy device until it has hit ``limit`` CUDA errors in all or no healthy device (not
    worker) is left; then it fails with a reason naming each device, error and self-test, so
    a poison job takes at most ``limit`` devices down.
    """

    def __init__(self, limit: int, stages: Stages, tracker: JobTracker):
        self.limit = limit
        self.provers: list[WorkerState] = []  # every proving worker, enlisted as it is made
        self.stages, self.tracker = stages, tracker
        self._lock = threading.Lock()  # a leaf: guards _failed and provers
        self._failed: dict[object, str] = {}  # device → its failed self-test

    def enlist(self, state: WorkerState) -> None:
        with self._lock:
            self.provers.append(state)

    @staticmethod
    def _device_of(state: WorkerState) -> object:
        return state.device if state.device is not None else state.name

    def out_of_service(self, state: WorkerState) -> bool:
        """Whether the worker's device failed its self-test (after another of its workers' errors, perhaps)."""
        with self._lock:
            return self._device_of(state) in self._failed

    def handle(self, state: WorkerState, job: LiveJob, exc: BaseException, self_test: Callable[[], str | None]) -> bool:
        """Self-test the device (``self_test()``: None when it passes, else what failed; not run on a device already
        out of service), then requeue or fail the job; returns whether the worker carries on."""
        error = _error_text(exc)
        device = self._device_of(state)
        with self._lock:
            problem = self._failed.get(device)
        if problem is None:  # a device already out of service is not tested again
            problem = self_test()
        outcome = _self_test_outcome(problem)
        where = f"device {state.device}" if state.device is not None else f"worker {state.name}"
        job.device_errors.append((where, error, problem))
        state.update(device_errors=state.device_errors + 1, error=f"{error} (job {job.id}; {outcome})",
                     healthy=state.healthy and problem is None)
        if problem is None:
            log.warning("%s (worker %s) hit a CUDA error on job %s but passed its self-test; it keeps proving: %s",
                        where, state.name, job.id, error, exc_info=exc)
        else:
            self._take_out_of_service(device, problem, state)
            log.error("%s (worker %s) is out of service: a CUDA error on job %s (%s), then its %s", where, state.name,
                      job.id, error, outcome, exc_info=exc)
        with self._lock:
            healthy = any(self._device_of(p) not in self._failed for p in self.provers)  # devices, not workers
        if job.cancelled():
            self.tracker.end_with(job, exc)
        elif len(job.device_errors) >= self.limit or not healthy:
            job.release()
            self.tracker.finish(job, JobState.FAILED, error=self._failure_reason(job, healthy))
        else:
            log.info("job %s goes back to the queue after its CUDA error on %s", job.id, where)
            job.release()
            self.tracker.requeue(job)
            self.stages.queued.push(job.id, job.priority, job.seq, job)
        return problem is None

    def _take_out_of_service(self, device: object, problem: str, failing: WorkerState) -> None:
        """Mark every worker of ``device`` unhealthy: none of them proves again."""
        with self._lock:
            if device in self._failed:  # another of its workers took it out already
                return
            self._failed[device] = problem
            provers = list(self.provers)
        for prover in provers:
            if prover is not failing and self._device_of(prover) == device:
                prover.update(healthy=False, error=f"device out of service: worker {failing.name}'s {_self_test_outcome(problem)}")
        self.stages.ready.wake()  # its idle workers waiting for a job stop now

    def _failure_reason(self, job: LiveJob, healthy: bool) -> str:
        count = len(job.device_errors)
        if not healthy:
            why = "no healthy device is left"
        else:
            why = f"it hit {count} CUDA error{'s' if count > 1 else ''} (device_errors_per_job = {self.limit})"
        errors = "; ".join(f"{where}: {error} ({_self_test_outcome(problem)})" for where, error, problem in job.device_errors)
        hint = ""
        if healthy and all(problem is None for _, _, problem in job.device_errors):
            hint = " — the devices passed their self-test afterwards, so this job's input likely triggers a kernel bug"
        return f"failed on the GPU and not retried: {why}: {errors}{hint}"


class ProvingWorker(abc.ABC):
    """One proving slot of a device: takes synthesized jobs while its device is in service, proves each
    (``_prove``), hands the proof to the finisher, and settles a failure (``_failed``): a device error goes to the
    ``DeviceErrorPolicy``. In-process (``DeviceWorker``) or feeding a device worker process (``procs.ProcessLane``)."""

    def __init__(self, state: WorkerState, stages: Stages, tracker: JobTracker, device_errors: DeviceErrorPolicy):
        self.state, self.stages, self.tracker = state, stages, tracker
        self.device_errors = device_errors
        device_errors.enlist(state)

    def out_of_service(self) -> bool:
        return self.device_errors.out_of_service(self.state)

    def _serve(self) -> None:
        while True:
            try:
                item = self.stages.ready.pop(give_up=self.out_of_service)  # woken when an error takes the device down
            except SchedulerClosed:
                return
            if item is None:
                return
            job_id, job = item
            if self.out_of_service():  # the device went down as this job was taken
                self._hand_back(job)
                return
            self.stages.slots.release()
            self.state.update(job=job_id)
            try:
                proof = self._prove(job)
            except BaseException as exc:  # noqa: BLE001
                self.state.update(job=None)
                if not self._failed(job, exc):
                    return  # the device failed its self-test: this worker stops for good
            else:
                self.state.update(job=None, jobs_done=self.state.jobs_done + 1)
                self.stages.proved.put((job, proof))

    @abc.abstractmethod
    def _prove(self, job: LiveJob) -> Proof:
        """The job's proving half on this worker's device; the proof is not verified yet."""

    @abc.abstractmethod
    def _failed(self, job: LiveJob, exc: BaseException) -> bool:
        """Settle a job that raised ``exc``; False when its device is now out of service."""

    def _hand_back(self, job: LiveJob) -> None:
        """Put a job taken from ``ready`` back for the other devices (its slot stays taken: it waits again)."""
        try:
            self.stages.ready.push(job.id, job.priority, job.seq, job)
        except SchedulerClosed:  # the engine is stopping: leave it to the journal's replay, as stop() does
            job.release()
            self.tracker.interrupt(job)


class DeviceWorker(ProvingWorker):
    """Proves synthesized jobs on one backend device, one at a time in its own lane (a device with K workers runs
    K proofs at once), and hands each proof to the finisher."""

    def __init__(self, state: WorkerState, backend, stages: Stages, tracker: JobTracker, keys: KeyManager,
                 device_errors: DeviceErrorPolicy):
        super().__init__(state, stages, tracker, device_errors)
        self.backend, self.keys = backend, keys
        self.lane = backend.new_lane() if is_device_backend(backend) else None

    def run(self) -> None:
        try:
            self._serve()
        finally:
            if self.lane is not None:
                self.lane.close()

    def _failed(self, job: LiveJob, exc: BaseException) -> bool:
        if not is_device_error_on(self.backend, exc):
            self.tracker.end_with(job, exc)
            return True
        curve = job.grant.lease.header.curve if job.grant is not None else BN254
        return self.device_errors.handle(self.state, job, exc, lambda: device_self_test(self.backend, curve))

    def _prove(self, job: LiveJob) -> Proof:
        """The proving half on this device; the proof is not verified yet. PROVING is live state only (a replay
        treats it as started, and the device should not wait on a journal commit)."""
        job.checkpoint()
        self.tracker.set_state(job, JobState.PROVING)
        grant = job.grant
        synthesis, job.synthesis = job.synthesis, None
        # Admission sized the job without host vectors because this device's whole budget holds them beside the key.
        vectors = wait_for_vectors(self.backend, grant.lease.header, job.cancelled) if grant.workset.device_vectors else None
        try:
            # Bases (and the coefficients a deferred synthesis needs) resident in VRAM when they fit. The lane is left
            # (its device work done) before they are released: nothing reads them after.
            with (self.keys.on_device(grant.lease, self.backend, coefficients=synthesis.deferred,
                                      vectors_reserved=vectors is not None, cancelled=job.cancelled) as device_key,
                  self.lane or contextlib.nullcontext()):
                return prove_synthesized(self.backend, device_key.zkey, synthesis, on_abc_released=grant.release_abc,
                                         cancelled=job.cancelled, vectors=vectors)
        finally:
            if vectors is not None:
                vectors.release()


# Proved jobs journaled in one commit at most. The finisher takes what waits when it gets to them, adding no wait.
FINISH_BATCH = 64


class Finisher:
    """Verifies, journals and answers each proved job, off the device workers.

    A device's next proof need not wait for this one's host-side ending: the pairing check,
    the journal's commit (fsync'd with ``journal_fsync = true``, when it queues behind other files'
    fsyncs while witnesses come in) and giving back the job's memory. The proofs that waited meanwhile
    are journaled together, one commit for all: one fsync'd commit per proof (tens of ms each behind the
    witnesses' fsyncs) was what set the daemon's pace at 2^20 (GPU_NOTES, session 9).
    """

    def __init__(self, state: WorkerState, stages: Stages, tracker: JobTracker, admission: Admission, verify: bool):
        self.state, self.stages, self.tracker, self.admission = state, stages, tracker, admission
        self.verify = verify
        self._vkey_lock = threading.Lock()

    def run(self) -> None:
        while (item := self.stages.proved.get()) is not None:
            batch, more = [item], True
            while more and len(batch) < FINISH_BATCH:  # what else waits now: journaled in the same commit
                try:
                    item = self.stages.proved.get_nowait()
                except queue.Empty:
                    break
                more = item is not None
                if more:
                    batch.append(item)
            done = []
            for job, proof in batch:
                self.state.update(job=job.id)
                try:
                    done.append((job, JobState.DONE, self._complete(job, proof)))
                except BaseException as exc:  # noqa: BLE001 — a rejected proof fails its job, never this thread
                    self.tracker.end_with(job, exc)
            try:
                self.tracker.finish_many(done)
            except BaseException as exc:  # noqa: BLE001 — the journal's failure fails these jobs, never this thread
                for job, _, _ in done:
                    self.tracker.end_with(job, exc)
            finally:
                self.state.update(job=None)
            if not more:
                return

    def _complete(self, job: LiveJob, proof: Proof) -> dict[str, Any]:
        """Self-verify a proof; returns the result for the journal (the job's resources released)."""
        if job.cancel_requested.is_set():  # cancel() said it would be; a stop() still lets a finished proof be kept
            raise ProofCancelled()
        grant = job.grant
        timings = {**grant.timings, **proof.timings}
        if self.verify:
            t = time.perf_counter()
            ok = self._verify(grant.lease, proof)
            timings["verify"] = time.perf_counter() - t
            if not ok:
                raise ProofRejected("the proof failed self-verification against the key, so it is not returned: the witness "
                                    "does not satisfy the circuit (register the key with its .r1cs to name the failing "
                                    "constraint) or the key is corrupt")
        proof_json = json.loads(proof_to_json(proof))
        public = [str(v) for v in proof.public_signals]
        job.release()
        return {"proof": proof_json, "public_signals": public, "timings": timings}

    def _verify(self, lease: KeyLease, proof: Proof) -> bool:
        from ..prover.verify import VerifyInputError, prepare_zkey, verify

        try:
            with self._vkey_lock:  # the prepared key is derived once per registration and kept across evictions
                prepared = lease.extras.get("prepared_vkey")
                if prepared is None:
                    prepared = lease.extras["prepared_vkey"] = prepare_zkey(lease.zkey)
            return verify(prepared, proof.public_signals, proof)
        except VerifyInputError as exc:  # a key point outside its group, or a proof point off its curve (from such bases)
            raise ProofRejected(f"the proof failed self-verification against the key, so it is not returned: {exc}: "
                                f"the key {lease.zkey.path} is corrupt") from None


def spawn(name: str, run: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=run, name=f"cuzk-{name}", daemon=True)
    thread.start()
    return thread
