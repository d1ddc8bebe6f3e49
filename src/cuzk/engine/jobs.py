"""What a proving job is: its priority, its states, and the durable record callers get back.

A job moves QUEUED → SYNTHESIZING → PROVING → DONE, or ends FAILED / CANCELLED from any
earlier state. ``JobRecord`` is the one shape every caller sees (the journal stores it,
``Engine.await_result`` returns it, the server turns it into protobuf/JSON), so it carries
plain data only: the proof as snarkjs's ``proof.json`` object, the public signals as
decimal strings (``public.json``), the failure reason as text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any


class JobError(ValueError):
    """A request about jobs that cannot be honoured (bad priority, unknown job...)."""


class UnknownJobError(JobError):
    def __init__(self, job_id: str):
        super().__init__(f"no job {job_id!r} (never submitted, or its result was pruned)")
        self.job_id = job_id


def abandoned_reason(attempts: int, max_attempts: int, died: str) -> str:
    """Why a job that was running each time its runner died (``died``: the engine, a device worker process) is failed
    instead of retried: the one crash-count policy, ``max_attempts``."""
    return (f"abandoned: {died} stopped unexpectedly {attempts} times while this job was running (out of memory?); "
            f"not retried again (max_attempts = {max_attempts})")


class Priority(IntEnum):
    """Higher value runs first; FIFO within one level."""

    LOW = 0
    NORMAL = 1
    HIGH = 2
    CRITICAL = 3

    @classmethod
    def parse(cls, value: Priority | int | str) -> Priority:
        """Accept a Priority, its value, or its name in any case ("high", "CRITICAL")."""
        if isinstance(value, Priority):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        names = ", ".join(p.name for p in reversed(cls))
        raise JobError(f"unknown priority {value!r}; expected one of {names}")


class JobState(str, Enum):
    QUEUED = "queued"
    SYNTHESIZING = "synthesizing"
    PROVING = "proving"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


UNFINISHED_STATES = (JobState.QUEUED, JobState.SYNTHESIZING, JobState.PROVING)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    circuit: str
    priority: Priority
    state: JobState
    submitted_at: float  # wall-clock seconds (time.time())
    request_id: str | None = None
    seq: int = 0  # global submission order: FIFO within a priority, across restarts too
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0  # times a worker started it; a job that keeps killing the daemon stops being retried
    proof: dict[str, Any] | None = None  # snarkjs proof.json
    public_signals: list[str] | None = None  # snarkjs public.json
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state.terminal

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for status endpoints and the CLI)."""
        return {
            "job_id": self.job_id,
            "request_id": self.request_id,
            "circuit": self.circuit,
            "priority": self.priority.name,
            "state": self.state.value,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "attempts": self.attempts,
            "proof": self.proof,
            "public_signals": self.public_signals,
            "error": self.error,
            "timings": dict(self.timings),
        }
