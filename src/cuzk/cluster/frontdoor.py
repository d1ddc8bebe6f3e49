"""The cluster's front door: the daemon's engine API over one host engine per Ray node.

``ClusterEngine`` has the methods the gRPC service and the daemon call on an ``Engine``
(``submit``, ``await_result``, ``get``, ``cancel``, ``list_jobs``, ``status``, ``keys``,
``register_key``, ``preload``, ``evict``, ``working_set``, ``add_listener``), so
``server.Daemon`` serves it unchanged and every client works against a cluster as against
one daemon.

A job's path:

1. ``submit`` checks the witness against the key's header and journals it in the front door's
   own ``Journal`` (fsync'd) before it returns: accepted means durable.
2. The dispatcher takes the most urgent job (``Scheduler``) and asks ``routing.route`` over
   each host's last ``HostView``. A job that must wait blocks the ones behind it, as the
   engine's admission does: one job at a time waits for room. The witness becomes a Ray
   object once (``ray.put``) and every host it is sent to fetches it from there.
3. The host journals it under the front door's job id as its request id (a second send is
   the same job there) and answers with its new view; ``await_job``'s result comes back on a
   Ray future and finishes the job here — once: a later answer for a finished job is dropped.

A host whose actor dies (its node gone) fails every call on it: each of its jobs goes back
to the queue and runs elsewhere; a job whose hosts died under it ``max_attempts`` times is
failed instead. Host engines verify every proof before they return it. A front door
restarted on its data directory replays its journal: each unfinished job a live host still
holds is awaited there again, the others are queued. Host actors are detached and named per
node, so they outlive a front door and are found again by the next one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..engine import EngineConfig, EngineStopped
from ..engine.intake import FileIdentity, journal_witness
from ..engine.jobs import UNFINISHED_STATES, JobRecord, JobState, Priority
from ..engine.journal import DataDirLock, Journal
from ..engine.scheduler import Scheduler, SchedulerClosed
from ..engine.tracker import REQUEST_ERRORS, JobTracker, LiveJob
from ..formats.zkey import ZKeyHeader, read_zkey_header
from ..keys.errors import UnknownKeyError
from ..prover.sizing import WorkingSet
from .host import HostEngine
from .routing import HostView, NoHost, Route, Wait, route

log = logging.getLogger("cuzk.cluster")

NAMESPACE = "cuzk"
ACTOR_THREADS = 1024  # each job on a host blocks one actor thread in await_job
CALL_TIMEOUT_S = 60.0  # a host that does not answer a short call in this long is skipped for now


@dataclass
class Host:
    node_id: str
    actor: Any  # the HostEngine actor handle
    view: HostView  # what it said it can take, less what was sent since
    unconfirmed: int = 0  # jobs sent to it whose submit it has not answered yet


class ClusterKeys:
    """The cluster's registered keys, with the ``KeyManager`` reads the gRPC service makes (names, status, header)."""

    def __init__(self, cluster: ClusterEngine):
        self._cluster = cluster
        self._headers: dict[str, ZKeyHeader] = {}

    def add(self, name: str, path: str) -> None:
        self._headers[name] = read_zkey_header(path)

    def names(self) -> list[str]:
        return sorted(self._headers)

    def header(self, name: str) -> ZKeyHeader:
        if name not in self._headers:
            raise UnknownKeyError(name, self.names())
        return self._headers[name]

    def status(self) -> list[dict]:
        """Each key once: its residency summed over the hosts, the tier of its warmest copy, the hosts holding it."""
        merged: dict[str, dict] = {}
        order = {"cold": 0, "warm": 1, "hot": 2}
        for host in self._cluster.host_statuses():
            for key in host.get("keys", []):
                entry = merged.setdefault(key["name"], {**key, "reserved_bytes": 0, "in_use": 0, "loads": 0, "hosts": [],
                                                        "resident_devices": [], "working_set_bytes": 0})
                if order[key["tier"]] > order[entry["tier"]]:
                    entry["tier"] = key["tier"]
                for field in ("reserved_bytes", "in_use", "loads"):
                    entry[field] += key[field]
                entry["working_set_bytes"] = max(entry["working_set_bytes"], key.get("working_set_bytes", 0))
                entry["resident_devices"] += [f"{host['host']}/{d}" for d in key.get("resident_devices", [])]
                if key["tier"] != "cold":
                    entry["hosts"].append(host["host"])
        return [merged[name] for name in sorted(merged)]


class ClusterEngine:
    def __init__(self, data_dir: str | os.PathLike, engine_settings: dict[str, Any] | None = None, *,
                 keys: dict[str, str] | None = None, r1cs: dict[str, str] | None = None, refresh_s: float = 1.0):
        """``engine_settings``: the ``[engine]`` table every host engine is built from (its data directory is
        ``<data_dir>/hosts/<node id>`` on its node); ``keys``/``r1cs``: name → path, the same path on every node."""
        self.engine_settings = dict(engine_settings or {})
        self.config = EngineConfig.from_mapping(data_dir, self.engine_settings)  # checked here, once, for every host
        self.data_dir = self.config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock = DataDirLock(self.data_dir)
        self._dir_lock.acquire()
        self.journal = Journal(self.data_dir, result_ttl_s=self.config.result_ttl_s, result_max_bytes=self.config.result_max_bytes)
        self.tracker = JobTracker(self.journal)
        self.keys = ClusterKeys(self)
        self._r1cs: dict[str, str | None] = {}
        self.refresh_s = refresh_s
        self._hosts: dict[str, Host] = {}  # host name → host
        self._placed: dict[str, str] = {}  # job id → the host running it
        self._witnesses: dict[str, ray.ObjectRef] = {}  # job id → its witness in Ray's object store
        # job id → the front door's own phases of its last send (seconds): "route" (deciding and sending, the
        # dispatcher's time) and "dispatch" (sent → the host journaled it)
        self._door_timings: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()  # the tables above, and each host's view and unconfirmed count
        self._changed = threading.Condition()  # a host's view changed: a waiting job may fit now
        self._version = 0
        self._pending: Scheduler[LiveJob] = Scheduler()
        self._dispatcher: threading.Thread | None = None
        self._started = self._stopping = False
        saved = self.journal.saved_keys()
        for name, path in (keys or {}).items():
            saved[name] = (path, (r1cs or {}).get(name))
        for name, (path, r1cs_path) in saved.items():
            try:
                self.register_key(name, path, r1cs_path)
            except (ValueError, OSError) as exc:  # a key that went away must not stop the front door
                log.error("key %r not registered: %s", name, exc)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ClusterEngine:
        if self._started:
            return self
        self._started = True
        self._discover_hosts()
        if not self._hosts:
            raise RuntimeError("the Ray cluster has no live node to run a cuzk host engine on")
        self._replay()
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="cuzk-cluster-dispatch", daemon=True)
        self._dispatcher.start()
        return self

    def stop(self, timeout: float | None = None, *, stop_hosts: bool = True) -> None:
        """Stop dispatching; unfinished jobs stay in the journal for the next front door. ``stop_hosts``: stop the host
        engines too (their unfinished jobs stay in their journals) and end their actors."""
        if self._stopping:
            return
        self._stopping = True
        self._pending.close()
        if self._dispatcher is not None:
            self._dispatcher.join(timeout)
        for job in self.tracker.jobs():
            job.interrupted = True
            self.tracker.interrupt(job)
        if stop_hosts:
            for host, ref in [(h, h.actor.stop.remote()) for h in self.hosts()]:
                try:
                    ray.get(ref, timeout=timeout)
                except (RayActorError, GetTimeoutError):
                    pass
                ray.kill(host.actor)
        self.tracker.close()
        self.journal.close()
        self._dir_lock.release()

    def __enter__(self) -> ClusterEngine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- hosts -------------------------------------------------------------------------------
    def _discover_hosts(self) -> None:
        """A host engine on every live Ray node without one (GPUs where the node has some); forget dead nodes."""
        nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        hosts = self.hosts()
        known = {h.node_id for h in hosts}
        for host in [h for h in hosts if h.node_id not in nodes]:
            self._host_lost(host, "its Ray node is gone")
        starting = []
        for node_id, node in nodes.items():
            if node_id in known:
                continue
            actor = ray.remote(HostEngine).options(
                name=self._actor_name(node_id), namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                max_concurrency=ACTOR_THREADS, max_restarts=0, num_cpus=0,
                num_gpus=node["Resources"].get("GPU", 0), scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(node_id, str(self.data_dir), self.engine_settings)
            starting.append((node_id, actor))
        for node_id, actor in starting:
            try:
                ray.get(actor.ready.remote(), timeout=600)
                for name in self.keys.names():
                    path = str(self._key_path(name))
                    reason = ray.get(actor.register_key.remote(name, path, self._r1cs.get(name)), timeout=CALL_TIMEOUT_S)
                    if reason:
                        log.warning("node %s: %s", node_id[:8], reason)
                view = ray.get(actor.view.remote(), timeout=CALL_TIMEOUT_S)
            except (RayActorError, RayTaskError, GetTimeoutError) as exc:
                log.error("no cuzk host engine on node %s: %s", node_id[:8], exc)
                continue
            host = Host(node_id, actor, view)
            with self._lock:
                self._hosts[view.name] = host
            log.info("host %s joined (%d pipeline slots)", view.name, view.slots)
            if self._dispatcher is not None:
                self._cancel_orphans(host)
            self._changed_views()

    def _cancel_orphans(self, host: Host) -> None:
        """A host that joins after the replay (its actor made again on a live node) replays its own journal: the jobs
        in it already went back to the queue when it was lost, so its copies are cancelled rather than run twice."""
        try:
            held = ray.get(host.actor.held.remote(), timeout=CALL_TIMEOUT_S)
        except (RayActorError, GetTimeoutError):
            return
        with self._lock:
            orphans = [r for r, state in held.items() if JobState(state) in UNFINISHED_STATES and self._placed.get(r) != host.view.name]
        for request_id in orphans:
            host.actor.cancel.remote(request_id)

    def _actor_name(self, node_id: str) -> str:
        """Per node and per front door data directory: a restarted front door finds its hosts, another one makes its own."""
        return f"cuzk-host-{node_id}-{hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:12]}"

    def _key_path(self, name: str) -> Path:
        return Path(self.journal.saved_keys()[name][0])

    def _host_lost(self, host: Host, why: str) -> None:
        with self._lock:
            if self._hosts.get(host.view.name) is not host:
                return
            del self._hosts[host.view.name]
        log.warning("host %s lost (%s); its unfinished jobs run elsewhere", host.view.name, why)
        self._changed_views()

    def _set_view(self, host: Host, view: HostView) -> None:
        """A host's own view, less the jobs sent to it that it has not confirmed yet (it may not count them)."""
        with self._lock:
            for _ in range(host.unconfirmed):
                view = view.taken()
            host.view = view
        self._changed_views()

    def _changed_views(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def _refresh(self) -> None:
        """Every host's view again (memory freed by idle keys, jobs that ended) and hosts on nodes that joined."""
        self._discover_hosts()
        hosts = self.hosts()
        for host, ref in [(h, h.actor.view.remote()) for h in hosts]:  # asked all at once: one round trip, not one per host
            try:
                self._set_view(host, ray.get(ref, timeout=CALL_TIMEOUT_S))
            except RayActorError as exc:
                self._host_lost(host, str(exc).splitlines()[0])
            except GetTimeoutError:
                log.warning("host %s did not answer in %g s; keeping its last view", host.view.name, CALL_TIMEOUT_S)

    def hosts(self) -> list[Host]:
        with self._lock:
            return list(self._hosts.values())

    def host_statuses(self) -> list[dict[str, Any]]:
        hosts = self.hosts()
        refs = [h.actor.status.remote() for h in hosts]
        out = []
        for host, ref in zip(hosts, refs):
            try:
                out.append(ray.get(ref, timeout=CALL_TIMEOUT_S))
            except (RayActorError, GetTimeoutError) as exc:
                out.append({"host": host.view.name, "node_id": host.node_id, "error": str(exc).splitlines()[0]})
        return out

    # ---- keys --------------------------------------------------------------------------------
    def register_key(self, name: str, zkey_path: str | os.PathLike, r1cs_path: str | os.PathLike | None = None) -> None:
        """Register on every host (a host that cannot says why, and is never sent the key's jobs); kept across restarts."""
        path = Path(zkey_path).resolve()
        self.keys.add(name, str(path))  # a key the front door cannot read is refused here (FormatError, OSError)
        r1cs = str(Path(r1cs_path).resolve()) if r1cs_path is not None else None
        self._r1cs[name] = r1cs
        self.journal.save_key(name, str(path), r1cs)
        for host in self.hosts():
            reason = ray.get(host.actor.register_key.remote(name, str(path), r1cs), timeout=CALL_TIMEOUT_S)
            if reason:
                log.warning("host %s: %s", host.view.name, reason)
            self._set_view(host, ray.get(host.actor.view.remote(), timeout=CALL_TIMEOUT_S))

    def preload(self, name: str, tier: str | None = None) -> str:
        """Load the key on every host that can hold it; the warmest tier reached."""
        self.keys.header(name)
        tiers = [ray.get(h.actor.preload.remote(name), timeout=600) for h in self.hosts() if name not in h.view.never]
        return "hot" if "hot" in tiers else "warm" if "warm" in tiers else "cold"

    def evict(self, name: str) -> int:
        self.keys.header(name)
        return sum(ray.get(h.actor.evict.remote(name), timeout=CALL_TIMEOUT_S) for h in self.hosts())

    def working_set(self, circuit: str) -> WorkingSet:
        """The most one proof of ``circuit`` reserves on any host (a GPU host reserves less than a CPU one)."""
        self.keys.header(circuit)
        sets = [ray.get(h.actor.working_set.remote(circuit), timeout=CALL_TIMEOUT_S) for h in self.hosts()
                if circuit not in h.view.never]
        if not sets:
            raise ValueError(f"no host can run circuit {circuit!r}")
        return max(sets, key=lambda w: w.total_bytes)

    # ---- jobs --------------------------------------------------------------------------------
    def submit(self, circuit: str, witness: bytes | bytearray | memoryview | str | os.PathLike,
               priority: Priority | int | str = Priority.NORMAL, request_id: str | None = None, *,
               witness_identity: FileIdentity | None = None) -> str:
        """Journal the job here (durable before this returns) and queue it for a host; returns the job id."""
        if self._stopping:
            raise EngineStopped("the cluster front door is stopping; submit to the next one")
        record, created = journal_witness(self.journal, circuit, self.keys.header(circuit), witness,
                                          Priority.parse(priority), request_id, witness_identity)
        if created:
            self._enqueue(LiveJob(record))
        return record.job_id

    def _enqueue(self, job: LiveJob) -> None:
        if self.tracker.get(job.id) is None:
            self.tracker.add(job)
        try:
            self._pending.push(job.id, job.priority, job.seq, job)
        except SchedulerClosed:  # stop() raced it: journaled, so the next front door runs it
            self.tracker.interrupt(job)

    def _replay(self) -> None:
        held: dict[str, Host] = {}
        for host in self.hosts():
            try:
                for request_id in ray.get(host.actor.held.remote(), timeout=CALL_TIMEOUT_S):
                    held[request_id] = host
            except (RayActorError, GetTimeoutError) as exc:
                self._host_lost(host, str(exc).splitlines()[0])
        records = self.journal.requeue_unfinished()
        for record in records:
            job = LiveJob(record)
            host = held.get(record.job_id)
            if host is None:
                self._enqueue(job)
                continue
            self.tracker.add(job)  # still on a live host: await it there again
            self._await_on(job, host)
        if records:
            log.info("replaying %d unfinished job(s) from the journal", len(records))

    def _dispatch_loop(self) -> None:
        while True:
            try:
                popped = self._pending.pop(timeout=self.refresh_s)
            except SchedulerClosed:
                return
            if popped is None:
                self._refresh()
                continue
            job = popped[1]
            if job.cancel_requested.is_set():
                self.tracker.finish(job, JobState.CANCELLED, error="cancelled while waiting at the front door")
                continue
            with self._changed:
                seen = self._version
            started = time.perf_counter()
            decision = route(job.circuit, [h.view for h in self.hosts()])
            if isinstance(decision, NoHost):
                self._forget(job)
                self.tracker.finish(job, JobState.FAILED, error=decision.message(job.circuit))
            elif isinstance(decision, Wait):
                self._enqueue(job)  # keeps its place: the most urgent job is the one that waits
                with self._changed:
                    if self._version == seen:
                        self._changed.wait(self.refresh_s)
                    changed = self._version != seen
                if not changed:
                    self._refresh()
            else:
                self._send(job, decision, started)

    def _witness(self, job: LiveJob) -> ray.ObjectRef:
        """The job's witness in Ray's object store: put there once, from the journal's file, whichever host runs it."""
        with self._lock:
            ref = self._witnesses.get(job.id)
        if ref is None:
            ref = ray.put(np.fromfile(self.journal.witness_path(job.id), dtype=np.uint8))
            with self._lock:
                self._witnesses[job.id] = ref
        return ref

    def _forget(self, job: LiveJob) -> dict[str, float]:
        """Drop what the front door keeps for a job while it runs (its witness object, its host); its own timings."""
        with self._lock:
            self._witnesses.pop(job.id, None)
            self._placed.pop(job.id, None)
            return self._door_timings.pop(job.id, {})

    def _send(self, job: LiveJob, decision: Route, started: float) -> None:
        """Send without waiting for the host: its view is taken down by the job at once (``HostView.taken``) and stays
        so until the host confirms, so the next decision never counts room this job took; ``await_job`` runs on the
        host after the submit (it takes the submit's answer as its argument)."""
        with self._lock:
            host = self._hosts.get(decision.host)
            if host is None:  # lost since its view was read
                self._enqueue(job)
                return
            host.unconfirmed += 1
            host.view = host.view.taken()
        submitted = host.actor.submit.remote(job.id, job.circuit, self._witness(job), int(job.priority))
        sent = time.perf_counter()
        self._await_on(job, host, submitted)
        with self._lock:
            self._door_timings[job.id] = {"route": time.perf_counter() - started}
        submitted.future().add_done_callback(lambda f: self._on_submitted(job, host, f, sent))

    def _on_submitted(self, job: LiveJob, host: Host, future, sent: float) -> None:
        """The host journaled the job (or refused it, or died: ``await_job``'s answer says so and is acted on)."""
        with self._lock:
            host.unconfirmed -= 1
            if future.exception() is None:
                self._door_timings.setdefault(job.id, {})["dispatch"] = time.perf_counter() - sent
        if future.exception() is None:
            self._set_view(host, future.result())

    def _await_on(self, job: LiveJob, host: Host, submitted: ray.ObjectRef | None = None) -> None:
        """The job runs on ``host``: journaled as started there, finished by the answer of ``await_job``."""
        with self._lock:
            self._placed[job.id] = host.view.name
        self.tracker.start(job, host.view.name)
        future = host.actor.await_job.remote(job.id, submitted).future()
        future.add_done_callback(lambda f: self._on_answer(job, host, f))
        if job.cancel_requested.is_set():  # cancelled while it was being sent
            host.actor.cancel.remote(job.id)

    def _on_answer(self, job: LiveJob, host: Host, future) -> None:
        try:
            record, view = future.result()
        except RayActorError as exc:
            self._host_lost(host, str(exc).splitlines()[0])
            self._requeue(job)
            return
        except RayTaskError as exc:
            if isinstance(exc.cause, EngineStopped):  # the host engine is stopping: the job is unfinished, not failed
                self._requeue(job)
            else:
                self._fail_from_host(job, host, exc)
            return
        except Exception:  # a Ray internal failure is no verdict on the job: run it again (bounded by max_attempts)
            log.exception("awaiting job %s on host %s failed", job.id, host.view.name)
            self._requeue(job)
            return
        self._set_view(host, view)
        if self._stopping:
            return
        door = self._forget(job)
        if "dispatch" in door:  # the front door's own phases first (with the wait for a host with room), then the host's
            door = {"door_wait": max(0.0, record.submitted_at - job.submitted_at - door["route"] - door["dispatch"]), **door}
        self.tracker.finish(job, record.state, proof=record.proof, public_signals=record.public_signals, error=record.error,
                            timings={**door, **record.timings})

    def _fail_from_host(self, job: LiveJob, host: Host, exc: RayTaskError) -> None:
        """A host refused or failed the job: its own message for the request's errors, an internal error otherwise."""
        cause = exc.cause
        self._forget(job)
        if isinstance(cause, REQUEST_ERRORS):
            error = str(cause)
        else:
            log.error("host %s failed job %s: %s", host.view.name, job.id, exc)
            error = f"internal error on host {host.view.name}: {type(cause).__name__}: {cause}"
        self.tracker.finish(job, JobState.FAILED, error=error)

    def _requeue(self, job: LiveJob) -> None:
        """The host running the job is gone: queue it for another one, unless it was cancelled or ran out of attempts."""
        with self._lock:
            self._placed.pop(job.id, None)
        if job.done.is_set() or self._stopping:
            return
        if job.cancel_requested.is_set():
            self._forget(job)
            self.tracker.finish(job, JobState.CANCELLED, error="cancelled (its host was lost)")
            return
        attempts = self.journal.get(job.id).attempts
        if attempts >= self.config.max_attempts:
            self._forget(job)
            self.tracker.finish(job, JobState.FAILED, error=(
                f"abandoned: the hosts running this job were lost {attempts} times; not retried again "
                f"(max_attempts = {self.config.max_attempts})"))
            return
        self.tracker.requeue(job)
        self._enqueue(job)

    def get(self, job_id: str) -> JobRecord:
        return self.tracker.record(job_id)

    def await_result(self, job_id: str, timeout: float | None = None) -> JobRecord:
        return self.tracker.await_result(job_id, timeout)

    def cancel(self, job_id: str) -> bool:
        """Cancel a job at the front door or on its host; False when it had already finished."""
        job = self.tracker.get(job_id)
        if job is None:
            self.get(job_id)  # UnknownJobError for an id never seen
            return False
        job.cancel_requested.set()
        if self._pending.remove(job_id) is not None:
            self._forget(job)
            self.tracker.finish(job, JobState.CANCELLED, error="cancelled while waiting at the front door")
            return True
        with self._lock:
            host = self._hosts.get(self._placed.get(job_id, ""))
        if host is not None:
            host.actor.cancel.remote(job_id)  # the host's answer finishes the job here
        return True

    def list_jobs(self, states: Iterable[JobState | str] | None = None, circuit: str | None = None, limit: int = 100) -> list[JobRecord]:
        self.tracker.check_open()
        wanted = None if states is None else {JobState(s) for s in states}
        live = self.tracker.live
        if wanted is None or not wanted & set(UNFINISHED_STATES):
            return [live(r) for r in self.journal.list(states=wanted, circuit=circuit, limit=limit)]
        records = self.journal.list(states=wanted | set(UNFINISHED_STATES), circuit=circuit, limit=-1)
        return [r for r in map(live, records) if r.state in wanted][:limit]

    def add_listener(self, listener: Callable[[str, JobState], None]) -> None:
        self.tracker.add_listener(listener)

    # ---- status ------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The daemon's status document, summed over the hosts, with each host's own under ``hosts``."""
        self.tracker.check_open()
        hosts = self.host_statuses()
        views = {h.view.name: h.view for h in self.hosts()}
        up = [h for h in hosts if "error" not in h]
        budget: dict[str, Any] = {"name": "cluster", "by_category": {}}
        for field in ("total_bytes", "effective_total_bytes", "reserved_bytes", "available_bytes", "peak_reserved_bytes",
                      "waiters", "waiting_bytes", "reservations"):
            budget[field] = sum(h["budget"].get(field, 0) for h in up)
        for h in up:
            for category, entry in h["budget"]["by_category"].items():
                total = budget["by_category"].setdefault(category, {"bytes": 0, "count": 0})
                total["bytes"] += entry["bytes"]
                total["count"] += entry["count"]
        by_state = self.journal.counts()
        for record in map(self.tracker.live, self.journal.list(states=[JobState.SYNTHESIZING], limit=-1)):
            if record.state is JobState.PROVING:
                by_state[JobState.SYNTHESIZING.value] -= 1
                by_state[JobState.PROVING.value] += 1
        for h in hosts:
            view = views.get(h["host"])
            h["routing"] = None if view is None else {"held": view.held, "slots": view.slots, "room": dict(view.room),
                                                      "never": dict(view.never), "resident": sorted(view.resident)}
        with self._lock:
            placed = len(self._placed)
        return {
            "running": self._started and not self._stopping,
            "budget": budget,
            "reconciler": None,
            "runtime": None,
            "keys": self.keys.status(),
            "devices": [{**d, "host": h["host"]} for h in up for d in h.get("devices", [])],
            "jobs": {
                "by_state": by_state,
                "queued_by_priority": self._pending.depth_by_priority(),
                "waiting_for_prover": 0,
                "on_hosts": placed,
                "active": [{**a, "host": h["host"]} for h in up for a in h["jobs"]["active"]],
                "finished_since_start": self.tracker.finished,
                "result_bytes": self.journal.result_bytes(),
            },
            "workers": [{**w, "name": f"{h['host']}/{w['name']}", "host": h["host"]} for h in up for w in h["workers"]],
            "peaks": {},
            "hosts": hosts,
            "config": {"cluster": True, "hosts": len(hosts), "data_dir": str(self.data_dir),
                       "engine": self.engine_settings},
        }

    @property
    def jobs_finished(self) -> int:
        return self.tracker.finished
