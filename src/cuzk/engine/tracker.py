"""The jobs an engine holds and every transition they make: the one owner of a live job's state.

Admission and the workers are handed the tracker and move a job through it (started, proving,
requeued, finished, interrupted); none of them writes a job's state itself, and the tracker
imports neither. The journal is the durable half of each transition (PROVING is live state
only: a replay treats it as started); listeners hear every change.

Lock order (outermost first): the tracker's ``_lock`` → the journal's. A job's own ``lock``
guards only the resources it holds (``LiveJob.release``) and is never held while taking the
tracker's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from ..formats.errors import FormatError
from ..keys.errors import KeyLoadCancelled, KeyManagerError
from ..prover.groth16 import ProofCancelled, ProvingError, Synthesis
from ..witness.inputs import InputError
from .jobs import UNFINISHED_STATES, JobError, JobRecord, JobState, UnknownJobError
from .journal import Journal

if TYPE_CHECKING:
    from .admission import Grant

log = logging.getLogger("cuzk.engine")

# Failures that are the request's own (its witness, its key, its size): the job fails with their message.
# Anything else that escapes a job is the engine's fault and is reported as an internal error.
REQUEST_ERRORS = (FormatError, ProvingError, JobError, KeyManagerError, InputError)


class EngineStopped(RuntimeError):
    """The engine is stopping or stopped; the job (if any) stays in the journal for the next one."""


class AwaitTimeout(TimeoutError):
    def __init__(self, job_id: str, state: JobState, timeout: float | None):
        super().__init__(f"job {job_id} is still {state.value} after {timeout} s")
        self.job_id = job_id
        self.state = state


class LiveJob:
    """A job while the engine holds it: its cancel flag, its place in the pipeline, what it holds."""

    def __init__(self, record: JobRecord, intake_s: float | None = None):
        """``intake_s``: seconds its submit took (checking the witness, journaling it), for a job submitted to this
        engine; None for a replayed one, whose queue time then counts from its submission, the restart included."""
        self.id = record.job_id
        self.circuit = record.circuit
        self.priority = record.priority
        self.seq = record.seq
        self.state = record.state
        self.submitted_at = record.submitted_at  # wall clock, as journaled
        self.intake_s = intake_s
        self.queued_at = time.time() if intake_s is not None else record.submitted_at  # wall clock: its queue time's start
        self.cancel_requested = threading.Event()
        self.interrupted = False  # the engine is stopping: leave the job unfinished for replay
        self.done = threading.Event()
        self.final: JobRecord | None = None
        self.grant: Grant | None = None  # what admission gave it: key lease, working-set reservation
        self.synthesis: Synthesis | None = None
        self.worker: str | None = None
        self.attempts = record.attempts  # times started, this one included (journaled): the crash-count policy's count
        self.device_errors: list[tuple[str, str, str | None]] = []  # (device, CUDA error, self-test problem or None)
        self.lock = threading.Lock()

    def cancelled(self) -> bool:
        return self.interrupted or self.cancel_requested.is_set()

    def checkpoint(self) -> None:
        """A phase boundary: stop here if the job was cancelled or the engine is stopping."""
        if self.cancelled():
            raise ProofCancelled()

    def release(self) -> None:
        """Give back everything the job holds (idempotent)."""
        with self.lock:
            self.synthesis = None
            grant, self.grant = self.grant, None
        if grant is not None:
            grant.release()


class JobTracker:
    """The live jobs by id, their transitions, and the listeners that hear them."""

    def __init__(self, journal: Journal):
        self.journal = journal
        self._jobs: dict[str, LiveJob] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str, JobState], None]] = []
        self._closed = False
        self.finished = 0  # jobs this engine finished (any terminal state)

    # ---- the table ---------------------------------------------------------------------------
    def add(self, job: LiveJob) -> None:
        with self._lock:
            self._jobs[job.id] = job

    def discard(self, job: LiveJob) -> None:
        with self._lock:
            self._jobs.pop(job.id, None)

    def get(self, job_id: str) -> LiveJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def jobs(self) -> list[LiveJob]:
        with self._lock:
            return list(self._jobs.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def close(self) -> None:
        """The journal is about to close: reads through the tracker fail from now on."""
        with self._lock:
            self._closed = True

    def check_open(self) -> None:
        if self._closed:
            raise EngineStopped("the engine is stopped; its journal is closed (a new engine on the data directory has the jobs)")

    # ---- transitions -------------------------------------------------------------------------
    def add_listener(self, listener: Callable[[str, JobState], None]) -> None:
        self._listeners.append(listener)

    def set_state(self, job: LiveJob, state: JobState) -> None:
        """A live transition (PROVING, or the live half of a journaled one)."""
        job.state = state
        self._notify(job.id, state)

    def start(self, job: LiveJob, worker: str) -> None:
        """A worker took the job with what admission gave it: journaled as started."""
        job.worker = worker
        job.attempts = self.journal.mark_started(job.id)
        self.set_state(job, JobState.SYNTHESIZING)

    def requeue(self, job: LiveJob) -> None:
        """Back to the queue (its resources already given back): journaled as queued again."""
        self.journal.set_state(job.id, JobState.QUEUED)
        job.worker = None
        self.set_state(job, JobState.QUEUED)

    def finish(self, job: LiveJob, state: JobState, **result) -> None:
        """A terminal state, journaled with its result; wakes whoever awaits the job."""
        self.finish_many([(job, state, result)])

    def finish_many(self, outcomes: list[tuple[LiveJob, JobState, dict]]) -> None:
        """``finish`` for several jobs, (job, state, result) each, journaled in one commit (``Journal.finish_many``)."""
        with self._lock:
            live = [(job, state, result) for job, state, result in outcomes if not job.done.is_set()]
            if not live:
                return
            records = self.journal.finish_many([(job.id, state, result) for job, state, result in live])
            for (job, state, _), record in zip(live, records):
                job.final = record
                job.state = state
                self._jobs.pop(job.id, None)
                self.finished += 1
                job.done.set()
        for job, state, _ in live:
            self._notify(job.id, state)

    def interrupt(self, job: LiveJob) -> None:
        """The engine is stopping: the job stays unfinished in the journal; wake whoever awaits it."""
        with self._lock:
            if job.done.is_set():
                return
            job.final = None
            self._jobs.pop(job.id, None)
            job.done.set()

    def end_with(self, job: LiveJob, exc: BaseException) -> None:
        """A job left the pipeline through an exception: cancelled, failed with a reason, or interrupted by stop().

        Only the request's own errors (``REQUEST_ERRORS``) fail it with their message; anything
        else is an internal error, logged with its traceback and reported as one.
        """
        job.release()
        if job.interrupted:
            self.interrupt(job)
        elif isinstance(exc, (ProofCancelled, KeyLoadCancelled)) or job.cancel_requested.is_set():
            self.finish(job, JobState.CANCELLED, error=f"cancelled while {job.state.value}")
        elif isinstance(exc, REQUEST_ERRORS):
            self.finish(job, JobState.FAILED, error=str(exc))
        else:
            log.error("job %s failed with an internal error", job.id, exc_info=exc)
            self.finish(job, JobState.FAILED, error=f"internal error: {type(exc).__name__}: {exc}")
        if not isinstance(exc, Exception):
            raise exc

    def _notify(self, job_id: str, state: JobState) -> None:
        for listener in list(self._listeners):
            try:
                listener(job_id, state)
            except Exception:
                log.exception("job listener %r failed", listener)

    # ---- reading -----------------------------------------------------------------------------
    def list_records(self, states: Iterable[JobState | str] | None = None, circuit: str | None = None,
                     limit: int = 100) -> list[JobRecord]:
        """Most recent first, live state overlaid; finished jobs stay listed until pruned."""
        self.check_open()
        wanted = None if states is None else {JobState(s) for s in states}
        if wanted is None or not wanted & set(UNFINISHED_STATES):
            return [self.live(r) for r in self.journal.list(states=wanted, circuit=circuit, limit=limit)]
        # A live job's state may differ from its journaled one: ask for every unfinished state, filter after.
        records = self.journal.list(states=wanted | set(UNFINISHED_STATES), circuit=circuit, limit=-1)
        return [r for r in map(self.live, records) if r.state in wanted][:limit]

    def to_cancel(self, job_id: str) -> LiveJob | None:
        """The live job ``job_id``, marked as asked to cancel (its holder stops at its next checkpoint); None when it
        had already finished, ``UnknownJobError`` for an id never seen."""
        job = self.get(job_id)
        if job is None:
            self.record(job_id)
            return None
        job.cancel_requested.set()
        return job

    def record(self, job_id: str) -> JobRecord:
        """The journal's record with the live state overlaid."""
        self.check_open()
        record = self.journal.get(job_id)
        if record is None:
            raise UnknownJobError(job_id)
        return self.live(record)

    def live(self, record: JobRecord) -> JobRecord:
        """``record`` with this engine's live state (PROVING is not journaled)."""
        job = self.get(record.job_id)
        if job is None or record.finished or job.state is record.state or job.state.terminal:
            return record
        return replace(record, state=job.state)

    def await_result(self, job_id: str, timeout: float | None = None) -> JobRecord:
        job = self.get(job_id)
        if job is None:
            record = self.record(job_id)
            if not record.finished:
                raise EngineStopped(f"job {job_id} is {record.state.value} but this engine is not running it")
            return record
        if not job.done.wait(timeout):
            raise AwaitTimeout(job_id, job.state, timeout)
        if job.final is None or not job.final.finished:
            raise EngineStopped(f"the engine stopped before job {job_id} finished; it is replayed on restart")
        return job.final


class TrackedJobs:
    """The reading half of an engine's job API, answered by its ``tracker``: the engine and the cluster's front door
    serve the daemon's API alike."""

    tracker: JobTracker

    def get(self, job_id: str) -> JobRecord:
        return self.tracker.record(job_id)

    def await_result(self, job_id: str, timeout: float | None = None) -> JobRecord:
        return self.tracker.await_result(job_id, timeout)

    def list_jobs(self, states: Iterable[JobState | str] | None = None, circuit: str | None = None,
                  limit: int = 100) -> list[JobRecord]:
        """Most recent first; finished jobs stay listed until pruned."""
        return self.tracker.list_records(states, circuit, limit)

    def add_listener(self, listener: Callable[[str, JobState], None]) -> None:
        self.tracker.add_listener(listener)

