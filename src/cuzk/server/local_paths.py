"""What the daemon's local listeners (the unix gRPC socket, the local HTTP socket) take by path, one implementation
for both: keys given by path (each registered once under its resolved path as its name, so that jobs for it replay
after a restart like any other) and witness files the engine copies itself."""

from __future__ import annotations

import threading
from pathlib import Path

from ..client_base import WITNESS_PATH_REFUSED
from ..engine import FileIdentity, WitnessFileError
from ..engine.jobs import JobError, Priority


class KeyPaths:
    """One per engine, shared by every listener (its lock makes concurrent first calls with one path register it once)."""

    def __init__(self, engine):
        self.engine = engine
        self._lock = threading.Lock()

    def name_for(self, path: str) -> str:
        """The key's name (its resolved path), registered now if it was not; FileNotFoundError where no file is."""
        resolved = Path(path).resolve()
        name = str(resolved)
        with self._lock:
            if name not in self.engine.keys.names():
                if not resolved.is_file():
                    raise FileNotFoundError(f"no proving key file {resolved} on the daemon's machine")
                try:
                    self.engine.register_key(name, resolved)
                except OSError as exc:  # the caller's path: unreadable there is the request's problem
                    raise JobError(f"cannot read the proving key {resolved} on the daemon's machine: "
                                   f"{exc.strerror or exc}") from None
        return name


def submit_witness_path(engine, circuit: str, path: str, identity: FileIdentity | None, priority: Priority | str,
                        request_id: str | None, *, paths_taken: bool) -> str:
    """``engine.submit`` of the witness file at ``path`` (which the client saw as ``identity``), or the refusal a client
    answers by sending the bytes: a ``WitnessFileError`` opening with ``WITNESS_PATH_REFUSED``. ``paths_taken``: this
    listener takes paths (a local one, while the daemon's ``witness_paths`` setting is true)."""
    if not paths_taken:
        raise WitnessFileError(f"{WITNESS_PATH_REFUSED} on this listener (paths are taken on the daemon's unix "
                               "sockets only, and only while its witness_paths setting is true): send the witness bytes")
    if not isinstance(path, str) or not Path(path).is_absolute():
        raise WitnessFileError(f"{WITNESS_PATH_REFUSED}: {path!r} is not an absolute path")
    try:
        return engine.submit(circuit, path, priority, request_id, witness_identity=identity)
    except WitnessFileError as exc:
        raise WitnessFileError(f"{WITNESS_PATH_REFUSED}: {exc} (on the daemon's machine)") from None
