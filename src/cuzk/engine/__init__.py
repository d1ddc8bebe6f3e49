"""Jobs, journal, scheduler and the proving engine; the supervisor that restarts the engine process.

The in-process API is ``Engine`` (see ``engine.core``'s docstring); it and the names around it
are imported lazily so that the supervisor, which lives here too, starts without numba or the prover.
"""

from importlib import import_module

from .jobs import JobError, JobRecord, JobState, Priority, UnknownJobError

_LAZY = {
    "Engine": "core", "EngineConfig": "config", "EngineStopped": "tracker", "AwaitTimeout": "tracker",
    "JobTooLarge": "admission", "ProofRejected": "workers", "FileIdentity": "intake", "WitnessFileError": "intake",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'cuzk.engine' has no attribute {name!r}")


__all__ = ["JobError", "JobRecord", "JobState", "Priority", "UnknownJobError", *_LAZY]
