"""Jobs, journal, scheduler and the proving pipeline; the supervisor that restarts the engine process.

The in-process API is ``Engine`` (see ``engine.pipeline``'s docstring); it is imported
lazily so that the supervisor, which lives here too, starts without numba or the prover.
"""

from .jobs import JobError, JobRecord, JobState, Priority, UnknownJobError

_PIPELINE = ("Engine", "EngineConfig", "EngineStopped", "AwaitTimeout", "JobTooLarge", "ProofRejected")


def __getattr__(name: str):
    if name in _PIPELINE:
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'cuzk.engine' has no attribute {name!r}")


__all__ = ["JobError", "JobRecord", "JobState", "Priority", "UnknownJobError", *_PIPELINE]
