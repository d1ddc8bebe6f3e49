"""Keys given by path rather than by name, on the daemon's local listeners (gRPC's ``KeyRef.path``, the local HTTP
socket's absolute path): each is registered once under its resolved path as its name, so that jobs for it replay
after a restart like any other."""

from __future__ import annotations

import threading
from pathlib import Path

from ..engine.jobs import JobError


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
