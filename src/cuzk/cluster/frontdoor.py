"""The cluster's front door: the daemon's engine API over one host engine per Ray node.

``ClusterEngine`` has the methods the gRPC service and the daemon call on an ``Engine``
(``submit``, ``await_result``, ``get``, ``cancel``, ``list_jobs``, ``status``, ``keys``,
``register_key``, ``preload``, ``evict``, ``working_set``, ``add_listener``), so
``server.Daemon`` serves it unchanged and every client works against a cluster as against
one daemon.

A job's path:

1. ``submit`` checks the witness against the key's header and journals it in the front door's
   own ``Journal`` before it returns: accepted means it survives the front door's death (on the disk
   then, or within ``journal_fsync``'s delay).
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
holds is awaited there again, the others are queued (the hosts themselves: ``hosts``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from ..engine import EngineConfig, EngineStopped
from ..engine.intake import FileIdentity, journal_witness
from ..engine.jobs import UNFINISHED_STATES, JobState, Priority
from ..engine.journal import DataDirLock, Journal
from ..engine.scheduler import Scheduler, SchedulerClosed
from ..engine.tracker import REQUEST_ERRORS, JobTracker, LiveJob, TrackedJobs
from ..engine.witnesses import WitnessCalculators
from ..memory.budget import MemoryBudget, Reservation
from ..memory.limits import read_limits
from ..memory.plan import plan_budget
from ..prover.sizing import WorkingSet
from .hosts import CALL_TIMEOUT_S, Host, HostTable, first_line
from .keys import ClusterKeys
from .routing import NoHost, Route, Wait, route
from .status import merged_status

WARM_UP_TIMEOUT_S = 900.0  # a host compiling numba's kernels cold takes minutes
WITNESS_SHARE = 8  # without [engine] witness_budget_bytes, the front door's witness budget is 1/8 of its node's

log = logging.getLogger("cuzk.cluster")


class ClusterEngine(TrackedJobs):
    def __init__(self, data_dir: str | os.PathLike, engine_settings: dict[str, Any] | None = None, *,
                 keys: dict[str, str] | None = None, refresh_s: float = 1.0):
        """``engine_settings``: the ``[engine]`` table every host engine is built from (its data directory is
        ``<data_dir>/hosts/<node id>`` on its node; its ``r1cs`` and ``wasm`` tables name the keys' files);
        ``keys``: name → path, the same path on every node."""
        self.engine_settings = dict(engine_settings or {})
        self.config = EngineConfig.from_mapping(data_dir, self.engine_settings)  # checked here, once, for every host
        self.data_dir = self.config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock = DataDirLock(self.data_dir)
        self._dir_lock.acquire()
        self.journal = Journal.of(self.config)
        self.tracker = JobTracker(self.journal)
        self.refresh_s = refresh_s
        self._changed = threading.Condition()  # a host's view changed: a waiting job may fit now
        self._version = 0
        # Witnesses from input JSON are calculated here, for keys registered with their .wasm (the hosts get witnesses,
        # as from any client), each calculation reserving in a budget of the front door's own. That budget comes out
        # of the host engine's on this node: both plan against the same machine's limit.
        plan = plan_budget(read_limits(), self.config.budget_bytes, trust_configured=self.config.budget_over_limit)
        witness_bytes = self.config.witness_budget_bytes or plan.total_bytes // WITNESS_SHARE
        if witness_bytes >= plan.total_bytes:
            raise ValueError(f"[engine] witness_budget_bytes = {witness_bytes} leaves nothing of this node's "
                             f"{plan.total_bytes}-byte budget for its host engine")
        self.witness_budget = MemoryBudget(witness_bytes, name="front door witnesses")
        self.witnesses = WitnessCalculators(self.witness_budget, self.config.witness_workers)
        self.hosts = HostTable(self.data_dir, self.engine_settings, self._changed_views,
                               here={"budget_bytes": plan.ceiling_bytes - witness_bytes})
        self.keys = ClusterKeys(self.hosts.statuses)
        self._placed: dict[str, str] = {}  # job id → the host running it
        self._witnesses: dict[str, ray.ObjectRef] = {}  # job id → its witness in Ray's object store
        # job id → the front door's own phases of its last send (seconds): "route" (deciding and sending, the
        # dispatcher's time) and "dispatch" (sent → the host journaled it)
        self._door_timings: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()  # the three tables above
        self._pending: Scheduler[LiveJob] = Scheduler()
        self._dispatcher: threading.Thread | None = None
        self._started = self._stopping = False
        saved = self.journal.saved_keys()
        for name, path in {**self.config.keys, **(keys or {})}.items():
            saved[name] = (path, self.config.r1cs.get(name), self.config.wasm.get(name))
        for name, (path, r1cs_path, wasm_path) in saved.items():
            try:
                self.register_key(name, path, r1cs_path, wasm_path)
            except (ValueError, OSError) as exc:  # a key that went away must not stop the front door
                log.error("key %r not registered: %s", name, exc)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ClusterEngine:
        if self._started:
            return self
        self._started = True
        if not self.hosts.discover(self.journal.saved_keys()):
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
            self.hosts.stop_all(timeout)
        self.witnesses.close()
        self.tracker.close()
        self.journal.close()
        self._dir_lock.release()

    def __enter__(self) -> ClusterEngine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- hosts -------------------------------------------------------------------------------
    def _changed_views(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def _refresh(self) -> None:
        """Hosts for nodes that joined (a host made again on a live node cancels its orphans), every view again."""
        for host in self.hosts.discover(self.journal.saved_keys()):
            self._cancel_orphans(host)
        self.hosts.refresh()

    def _cancel_orphans(self, host: Host) -> None:
        """A host that joins after the replay (its actor made again on a live node) replays its own journal: the jobs
        in it already went back to the queue when it was lost, so its copies are cancelled rather than run twice."""
        try:
            held = ray.get(host.actor.held.remote(), timeout=CALL_TIMEOUT_S)
        except (RayActorError, GetTimeoutError):
            return
        with self._lock:
            orphans = [r for r, state in held.items() if JobState(state) in UNFINISHED_STATES and self._placed.get(r) != host.name]
        for request_id in orphans:
            host.actor.cancel.remote(request_id)

    # ---- keys --------------------------------------------------------------------------------
    def register_key(self, name: str, zkey_path: str | os.PathLike, r1cs_path: str | os.PathLike | None = None,
                     wasm_path: str | os.PathLike | None = None) -> None:
        """Register on every host (a host that cannot says why, and is never sent the key's jobs); kept across restarts.
        With ``wasm_path`` the front door takes the circuit's input JSON and calculates the witness itself."""
        path = Path(zkey_path).resolve()
        calculator = None if wasm_path is None else self.witnesses.prepare(name, path, wasm_path)
        self.keys.add(name, str(path))  # a key the front door cannot read is refused here (FormatError, OSError)
        self.witnesses.set(name, calculator)
        r1cs = str(Path(r1cs_path).resolve()) if r1cs_path is not None else None
        self.journal.save_key(name, str(path), r1cs, None if calculator is None else str(calculator.path))
        for host, reason in self.hosts.ask_all(lambda actor: actor.register_key.remote(name, str(path), r1cs)):
            if reason:
                log.warning("host %s: %s", host.name, reason)
        self.hosts.refresh()

    def preload(self, name: str, tier: str | None = None) -> str:
        """Load the key on every host that can hold it; the warmest tier reached."""
        self.keys.header(name)
        tiers = [answer for _, answer in self.hosts.ask_all(lambda actor: actor.preload.remote(name), timeout=600)
                 if isinstance(answer, str)]
        return "hot" if "hot" in tiers else "warm" if "warm" in tiers else "cold"

    def evict(self, name: str) -> int:
        self.keys.header(name)
        return sum(answer for _, answer in self.hosts.ask_all(lambda actor: actor.evict.remote(name))
                   if isinstance(answer, int))

    def working_set(self, circuit: str) -> WorkingSet:
        """The most one proof of ``circuit`` reserves on any host (a GPU host reserves less than a CPU one)."""
        self.keys.header(circuit)
        sets = [answer for _, answer in self.hosts.ask_all(lambda actor: actor.working_set.remote(circuit))
                if isinstance(answer, WorkingSet)]
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

    def warm_up(self) -> float:
        """Every host's JIT warm-up at once; the longest, in seconds (a host that failed it proves, compiling as it goes)."""
        answers = self.hosts.ask_all(lambda actor: actor.warm_up.remote(), timeout=WARM_UP_TIMEOUT_S)
        for host, answer in answers:
            if isinstance(answer, Exception):
                log.warning("host %s: JIT warm-up failed: %s", host.name, first_line(answer))
        return max((answer for _, answer in answers if isinstance(answer, float)), default=0.0)

    def check_fits(self, circuit: str) -> None:
        """Whether a request for ``circuit`` can be taken: stopping, or a key nobody registered. Whether a host can ever
        hold it is the router's question: a job none can hold fails with every host's reason."""
        if self._stopping:
            raise EngineStopped("the cluster front door is stopping; submit to the next one")
        self.keys.header(circuit)

    def submit_input(self, circuit: str, input_json, priority: Priority | int | str = Priority.NORMAL,
                     request_id: str | None = None, reservation: Reservation | None = None) -> str:
        """:meth:`submit` the witness calculated here from ``circuit``'s input (keys registered with their .wasm;
        ``reservation`` as the engine's)."""
        self.check_fits(circuit)
        return self.submit(circuit, self.witnesses.wtns(circuit, input_json, reservation), priority, request_id)

    def _enqueue(self, job: LiveJob) -> None:
        if self.tracker.get(job.id) is None:
            self.tracker.add(job)
        try:
            self._pending.push(job.id, job.priority, job.seq, job)
        except SchedulerClosed:  # stop() raced it: journaled, so the next front door runs it
            self.tracker.interrupt(job)

    def _replay(self) -> None:
        held: dict[str, Host] = {}
        for host, answer in self.hosts.ask_all(lambda actor: actor.held.remote()):
            if isinstance(answer, Exception):
                self.hosts.lost(host, first_line(answer))
            else:
                held.update(dict.fromkeys(answer, host))
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
        """Route the most urgent job; every ``refresh_s``, busy or idle, look for nodes that came or went first."""
        refreshed = time.monotonic()
        while True:
            if time.monotonic() - refreshed >= self.refresh_s:
                self._refresh()
                refreshed = time.monotonic()
            try:
                popped = self._pending.pop(timeout=self.refresh_s)
            except SchedulerClosed:
                return
            if popped is None:
                continue
            job = popped[1]
            if job.cancel_requested.is_set():
                self._forget(job)
                self.tracker.finish(job, JobState.CANCELLED, error="cancelled while waiting at the front door")
                continue
            with self._changed:
                seen = self._version
            started = time.perf_counter()
            decision = route(job.circuit, self.hosts.views())
            if isinstance(decision, NoHost):
                self._forget(job)
                self.tracker.finish(job, JobState.FAILED, error=decision.message(job.circuit))
            elif isinstance(decision, Wait):
                self._enqueue(job)  # keeps its place: the most urgent job is the one that waits
                with self._changed:
                    if self._version == seen:
                        self._changed.wait(self.refresh_s)  # nothing changed by then: the loop refreshes
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
        """Send without waiting for the host: its view is taken down by the job at once (``HostTable.take``) and stays
        so until the host confirms, so the next decision never counts room this job took; ``await_job`` runs on the
        host after the submit (it takes the submit's answer as its argument)."""
        host = self.hosts.take(decision.host)
        if host is None:  # lost since its view was read
            self._enqueue(job)
            return
        submitted = host.actor.submit.remote(job.id, job.circuit, self._witness(job), int(job.priority))
        sent = time.perf_counter()
        self._await_on(job, host, submitted)
        with self._lock:
            self._door_timings[job.id] = {"route": time.perf_counter() - started}
        submitted.future().add_done_callback(lambda f: self._on_submitted(job, host, f, sent))

    def _on_submitted(self, job: LiveJob, host: Host, future, sent: float) -> None:
        """The host journaled the job (or refused it, or died: ``await_job``'s answer says so and is acted on)."""
        ok = future.exception() is None
        if ok:
            with self._lock:
                self._door_timings.setdefault(job.id, {})["dispatch"] = time.perf_counter() - sent
        self.hosts.confirmed(host, future.result() if ok else None)

    def _await_on(self, job: LiveJob, host: Host, submitted: ray.ObjectRef | None = None) -> None:
        """The job runs on ``host``: journaled as started there, finished by the answer of ``await_job``."""
        with self._lock:
            self._placed[job.id] = host.name
        self.tracker.start(job, host.name)
        future = host.actor.await_job.remote(job.id, submitted).future()
        future.add_done_callback(lambda f: self._on_answer(job, host, f))
        if job.cancel_requested.is_set():  # cancelled while it was being sent
            host.actor.cancel.remote(job.id)

    def _on_answer(self, job: LiveJob, host: Host, future) -> None:
        try:
            record, view = future.result()
        except RayActorError as exc:
            self.hosts.lost(host, first_line(exc))
            self._requeue(job)
            return
        except RayTaskError as exc:
            if isinstance(exc.cause, EngineStopped):  # the host engine is stopping: the job is unfinished, not failed
                self._requeue(job)
            else:
                self._fail_from_host(job, host, exc)
            return
        except Exception:  # a Ray internal failure is no verdict on the job: run it again (bounded by max_attempts)
            log.exception("awaiting job %s on host %s failed", job.id, host.name)
            self._requeue(job)
            return
        self.hosts.set_view(host, view)
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
            log.error("host %s failed job %s: %s", host.name, job.id, exc)
            error = f"internal error on host {host.name}: {type(cause).__name__}: {cause}"
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

    def cancel(self, job_id: str) -> bool:
        """Cancel a job at the front door or on its host; False when it had already finished."""
        job = self.tracker.to_cancel(job_id)
        if job is None:
            return False
        if self._pending.remove(job_id) is not None:
            self._forget(job)
            self.tracker.finish(job, JobState.CANCELLED, error="cancelled while waiting at the front door")
            return True
        with self._lock:
            host = self.hosts.get(self._placed.get(job_id, ""))
        if host is not None:
            host.actor.cancel.remote(job_id)  # the host's answer finishes the job here
        return True

    # ---- status ------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The daemon's status document, summed over the hosts, with each host's own under ``hosts``."""
        self.tracker.check_open()
        by_state = self.journal.counts()
        for record in map(self.tracker.live, self.journal.list(states=[JobState.SYNTHESIZING], limit=-1)):
            if record.state is JobState.PROVING:  # live state only, as the engine reports it
                by_state[JobState.SYNTHESIZING.value] -= 1
                by_state[JobState.PROVING.value] += 1
        with self._lock:
            placed = len(self._placed)
        merged = merged_status(self.hosts.statuses(), {h.name: h.view for h in self.hosts.hosts()})
        active = merged.pop("active")
        return {
            "running": self._started and not self._stopping,
            **merged,
            "witness_budget": self.witness_budget.snapshot(),  # the front door's own, beside the hosts' budgets
            "reconciler": None,
            "runtime": None,
            "jobs": {
                "by_state": by_state,
                "queued_by_priority": self._pending.depth_by_priority(),
                "waiting_for_prover": 0,
                "on_hosts": placed,
                "active": active,
                "finished_since_start": self.tracker.finished,
                "result_bytes": self.journal.result_bytes(),
            },
            "peaks": {},
            "config": {"cluster": True, "hosts": len(merged["hosts"]), "data_dir": str(self.data_dir),
                       "engine": self.engine_settings},
        }
