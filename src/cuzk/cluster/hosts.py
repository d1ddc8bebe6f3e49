"""The hosts as the front door knows them: one ``HostEngine`` actor per live Ray node, and what each last said.

A node without a host gets one (placed on it by node affinity, claiming the node's GPUs when
it has some; detached and named per node and per front door data directory, so a restarted
front door finds its hosts and another front door makes its own), with every registered key.
A host whose calls fail because its actor died, or whose node is no longer alive, is dropped.
Each host's view is what it last reported less the jobs sent to it since that it has not
confirmed (``HostView.taken``), so two decisions never count the same room.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .host import HostEngine
from .routing import HostView

log = logging.getLogger("cuzk.cluster")

NAMESPACE = "cuzk"
ACTOR_THREADS = 1024  # each job on a host blocks one actor thread in await_job
CALL_TIMEOUT_S = 60.0  # a host that does not answer a short call in this long is skipped for now
START_TIMEOUT_S = 600.0  # a host engine's first start may compile numba kernels


@dataclass
class Host:
    node_id: str
    actor: Any  # the HostEngine actor handle
    view: HostView  # what it said it can take, less what was sent since
    unconfirmed: int = 0  # jobs sent to it whose submit it has not answered yet

    @property
    def name(self) -> str:
        return self.view.name


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class HostTable:
    def __init__(self, data_dir: Path, engine_settings: dict[str, Any], on_change: Callable[[], None],
                 here: dict[str, Any] | None = None):
        """``on_change``: called after any host's view changed or a host came or went (a waiting job may fit now);
        ``here``: settings over ``engine_settings`` for the host on this process's own Ray node."""
        self.data_dir = data_dir
        self.engine_settings = engine_settings
        self.here = here or {}
        self._on_change = on_change
        self._hosts: dict[str, Host] = {}  # host name → host
        self._lock = threading.Lock()  # _hosts, and each host's view and unconfirmed count
        self._suffix = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]

    def hosts(self) -> list[Host]:
        with self._lock:
            return list(self._hosts.values())

    def get(self, name: str) -> Host | None:
        with self._lock:
            return self._hosts.get(name)

    def views(self) -> list[HostView]:
        with self._lock:
            return [h.view for h in self._hosts.values()]

    def discover(self, keys: dict[str, tuple[str, str | None, str | None]]) -> list[Host]:
        """A host on every live node without one, each given ``keys`` (name → zkey, r1cs, wasm: not sent); hosts of dead nodes dropped.
        Returns the hosts that joined."""
        nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        hosts = self.hosts()
        for host in hosts:
            if host.node_id not in nodes:
                self.lost(host, "its Ray node is gone")
        known = {h.node_id for h in hosts}
        local = ray.get_runtime_context().get_node_id()
        starting = [(node_id, ray.remote(HostEngine).options(
            name=f"cuzk-host-{node_id}-{self._suffix}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
            max_concurrency=ACTOR_THREADS, max_restarts=0, num_cpus=0, num_gpus=node["Resources"].get("GPU", 0),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(node_id, str(self.data_dir), {**self.engine_settings, **(self.here if node_id == local else {})}))
            for node_id, node in nodes.items() if node_id not in known]
        joined = []
        for node_id, actor in starting:
            try:
                ray.get(actor.ready.remote(), timeout=START_TIMEOUT_S)
                for name, (path, r1cs, _wasm) in keys.items():
                    reason = ray.get(actor.register_key.remote(name, path, r1cs), timeout=CALL_TIMEOUT_S)
                    if reason:
                        log.warning("node %s: %s", node_id[:8], reason)
                host = Host(node_id, actor, ray.get(actor.view.remote(), timeout=CALL_TIMEOUT_S))
            except (RayActorError, RayTaskError, GetTimeoutError) as exc:
                log.error("no cuzk host engine on node %s: %s", node_id[:8], first_line(exc))
                continue
            with self._lock:
                self._hosts[host.name] = host
            log.info("host %s joined (%d pipeline slots)", host.name, host.view.slots)
            joined.append(host)
        if joined:
            self._on_change()
        return joined

    def lost(self, host: Host, why: str) -> None:
        with self._lock:
            if self._hosts.get(host.name) is not host:
                return
            del self._hosts[host.name]
        log.warning("host %s lost (%s); its unfinished jobs run elsewhere", host.name, why)
        self._on_change()

    def set_view(self, host: Host, view: HostView) -> None:
        """A host's own view, less the jobs sent to it that it has not confirmed yet (it may not count them)."""
        with self._lock:
            for _ in range(host.unconfirmed):
                view = view.taken()
            host.view = view
        self._on_change()

    def take(self, name: str) -> Host | None:
        """A job is being sent to host ``name``: its view is taken down at once, until ``confirmed``. None if it is gone."""
        with self._lock:
            host = self._hosts.get(name)
            if host is not None:
                host.unconfirmed += 1
                host.view = host.view.taken()
            return host

    def confirmed(self, host: Host, view: HostView | None) -> None:
        """The host answered a submit (with its new view, or None when it refused or died)."""
        with self._lock:
            host.unconfirmed -= 1
        if view is not None:
            self.set_view(host, view)

    def refresh(self) -> None:
        """Every host's view again (memory freed by idle keys, jobs that ended), asked of all at once."""
        for host, ref in [(h, h.actor.view.remote()) for h in self.hosts()]:
            try:
                self.set_view(host, ray.get(ref, timeout=CALL_TIMEOUT_S))
            except RayActorError as exc:
                self.lost(host, first_line(exc))
            except GetTimeoutError:
                log.warning("host %s did not answer in %g s; keeping its last view", host.name, CALL_TIMEOUT_S)

    def ask_all(self, call: Callable[[Any], ray.ObjectRef], timeout: float = CALL_TIMEOUT_S) -> list[tuple[Host, Any]]:
        """``call(actor)`` on every host at once; each host with its answer, or the exception it raised."""
        hosts = self.hosts()
        refs = [call(h.actor) for h in hosts]
        out = []
        for host, ref in zip(hosts, refs):
            try:
                out.append((host, ray.get(ref, timeout=timeout)))
            except (RayActorError, RayTaskError, GetTimeoutError) as exc:
                out.append((host, exc))
        return out

    def statuses(self) -> list[dict[str, Any]]:
        """Each host's own status document, or its error."""
        return [answer if not isinstance(answer, Exception) else {"host": host.name, "node_id": host.node_id,
                                                                  "error": first_line(answer)}
                for host, answer in self.ask_all(lambda actor: actor.status.remote())]

    def stop_all(self, timeout: float | None) -> None:
        """Stop every host engine (its unfinished jobs stay in its journal) and end its actor."""
        for host, _ in self.ask_all(lambda actor: actor.stop.remote(), timeout=timeout):
            ray.kill(host.actor)
