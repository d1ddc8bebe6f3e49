"""One host of the cluster: a cuzk ``Engine`` inside a Ray actor pinned to one Ray node.

The engine is built exactly as the daemon builds it (``EngineConfig`` from the ``[engine]``
table, its budget planned by ``memory.plan`` against the node's own limit), in its own data
directory on that node, so it keeps its own journal: a job it accepted survives the actor's
process and is found again by its request id, which is the front door's job id. The front
door asks it what it can take (``view``: ``Engine.room`` for each key) and gives it only
that; the witness arrives as a Ray object, fetched by Ray straight to this node.

Each call blocks a thread of the actor (``await_job`` for as long as the proof takes), so the
actor is threaded (``max_concurrency``); the engine itself is thread-safe.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import numpy as np

from ..engine import Engine, EngineConfig, Priority
from ..engine.jobs import JobRecord
from ..keys.host import KeyTier
from ..prover.sizing import WorkingSet
from .routing import HostView

log = logging.getLogger("cuzk.cluster")

HOSTS_DIR = "hosts"  # <data_dir>/hosts/<node id>: each host engine's own data directory


class HostEngine:
    def __init__(self, node_id: str, data_dir: str, engine_settings: dict[str, Any]):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.node_id = node_id
        self.name = f"{socket.gethostname()}:{node_id[:8]}"
        config = EngineConfig.from_mapping(Path(data_dir) / HOSTS_DIR / node_id, engine_settings)
        self.engine = Engine(config).start()
        self._missing: dict[str, str] = {}  # key name → why this host could not register it
        self._jobs: dict[str, str] = {}  # request id (the front door's job id) → this engine's job id

    def ready(self) -> str:
        return self.name

    def warm_up(self) -> float:
        return self.engine.warm_up()

    # ---- keys ---------------------------------------------------------------------------------
    def register_key(self, name: str, zkey_path: str, r1cs_path: str | None = None) -> str | None:
        """Register a key the front door knows; None, or why this host cannot (the file is not here...)."""
        try:
            self.engine.register_key(name, zkey_path, r1cs_path)
        except (ValueError, OSError) as exc:
            self._missing[name] = f"cannot register key {name!r} here: {exc}"
            return self._missing[name]
        self._missing.pop(name, None)
        return None

    def preload(self, name: str) -> str:
        return self.engine.preload(name)

    def evict(self, name: str) -> int:
        return self.engine.evict(name)

    def working_set(self, circuit: str) -> WorkingSet:
        return self.engine.working_set(circuit)

    # ---- what the router sees -----------------------------------------------------------------
    def view(self) -> HostView:
        room, never = {}, dict(self._missing)
        resident = set()
        for entry in self.engine.keys.status():
            name = entry["name"]
            free, reason = self.engine.room(name)
            if reason is None:
                room[name] = free
            else:
                never[name] = reason
            if entry["tier"] != KeyTier.COLD.value:
                resident.add(name)
        return HostView(self.name, held=len(self.engine.tracker), slots=self.engine.synth_workers + sum(self.engine.proofs_per_device),
                        resident=frozenset(resident), room=room, never=never)

    # ---- jobs ---------------------------------------------------------------------------------
    def submit(self, request_id: str, circuit: str, witness: np.ndarray, priority: int) -> HostView:
        """Journal the job here (a repeated request id is the same job) and answer with what room is left."""
        self._jobs[request_id] = self.engine.submit(circuit, memoryview(witness), Priority(priority), request_id)
        return self.view()

    def await_job(self, request_id: str, submitted: HostView | None = None) -> tuple[JobRecord, HostView]:
        """The finished record of a job submitted here; ``EngineStopped`` when this engine stops first.

        ``submitted``: the answer of this job's ``submit``, passed as its Ray object so that Ray runs this call after
        it (a threaded actor runs calls in any order); a refused submit fails this call with the same error."""
        record = self.engine.await_result(self._job_id(request_id))
        return record, self.view()

    def cancel(self, request_id: str) -> bool:
        return self.engine.cancel(self._job_id(request_id))

    def held(self) -> dict[str, str]:
        """Request id → state of every job this engine's journal holds (what a restarted front door reattaches to)."""
        records = self.engine.list_jobs(limit=-1)
        self._jobs.update({r.request_id: r.job_id for r in records if r.request_id})
        return {r.request_id: r.state.value for r in records if r.request_id}

    def _job_id(self, request_id: str) -> str:
        if request_id not in self._jobs:
            self.held()
        return self._jobs[request_id]

    def status(self) -> dict[str, Any]:
        status = self.engine.status()
        for key in status["keys"]:
            key["working_set_bytes"] = self.engine.working_set(key["name"]).total_bytes
        return {"host": self.name, "node_id": self.node_id, **status}

    def stop(self) -> None:
        self.engine.stop()
