"""Device worker processes (``device_processes = true``): each proving device owned by a child process.

The parent keeps intake, the journal, admission, the schedulers, verification and the answers;
a child (``engine.device_process``, spawned, never forked) owns one device's backend, its keys
and its K lanes. Per proof, only the job id, the key's name and path, and the paths of the job's
witness (in the journal) and r1cs cross the pipe; the proof (a few hundred bytes) or a typed
error come back. Why: isolation — a segfault, a CUDA fault or a kill takes one worker, not the
daemon — and lanes that the daemon's intake never holds up: the engine alone proves at
0.97–1.10 of its bare lanes' rate in-process, but through the daemon at 2^16 the worker process
was ×1.19 on one H200 (benchmarks/GPU_NOTES.md, session 6).

- **What admission asks of the devices** (``synthesizes_on_devices``, ``holds_vectors_on_devices``,
  ``why_not_on_devices``) is answered by the children, from their own device's VRAM budget
  (``DeviceProcesses`` asks each once per key registration): the parent holds no backend. K is
  the child's, sized at its start beside the registered keys.
- **A device error** (a CUDA error, told from the job's own as in-process) makes the child
  self-test its device and report both (``ReportedDeviceError``); the engine's one
  ``DeviceErrorPolicy`` decides, as for an in-process worker: the job requeued or failed, and a
  device that failed its self-test out of service — its lanes stop taking jobs (those proving
  end theirs first), then its process is stopped and never restarted; status shows its lanes
  unhealthy and the process ``out_of_service``.
- **A death** (SIGKILL, segfault) is seen at once as the pipe's EOF by the child's
  reader thread, logged with the exit code or signal; the child is restarted (unless its device
  is out of service) and each job it held goes back to the queue through the tracker, or fails
  once it has been started ``max_attempts`` times — the journal's crash-count policy, as at an
  engine's replay. A result for a job the child no longer holds is dropped, so no proof is
  answered twice.
- **Cancel** reaches the child, which stops the job at its next cancellation check; its lane
  answers ``cancelled`` and the parent releases the job's reservation.
- **Stop** asks each child to exit (its jobs stop at their next check and stay in the journal)
  and joins it; a child whose parent dies sees its pipe's EOF and exits.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ..keys.manager import KeyManager
from ..memory.limits import read_rss_bytes
from ..prover.groth16 import Proof, ProofCancelled, ProvingError
from .config import EngineConfig
from .device_process import JOBS_AHEAD, ChildSpec, main
from .jobs import JobState, abandoned_reason
from .scheduler import SchedulerClosed
from .tracker import JobTracker, LiveJob
from .workers import DeviceErrorPolicy, ProvingWorker, ReportedDeviceError, Stages, WorkerState

log = logging.getLogger("cuzk.engine")

RESTART_BACKOFF_S = (0.5, 30.0)  # first and longest wait before restarting a child that died while starting


class DeviceProcessError(ProvingError):
    """A job's own error (its witness, its key), raised in a device worker process: the request's fault."""


class DeviceProcessInternalError(RuntimeError):
    """An internal error raised in a device worker process (reported as internal, never as the user's fault)."""


class DeviceProcessDied(RuntimeError):
    """The device worker process holding the job died before answering."""


class _Waiter(Future):
    """One answer awaited from a child (a job's outcome, or a call's value), and what to call when a job's proving
    half begins there."""

    def __init__(self, on_proving: Callable[[], object] | None = None):
        super().__init__()
        self.on_proving = on_proving


def _exit_cause(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


class DeviceProcess:
    """One device's worker process as the parent sees it: started, read, restarted when it dies, stopped."""

    def __init__(self, spec: ChildSpec):
        self.spec = spec
        self.restarts = 0
        self.key_loads = 0  # keys the process loaded ("loaded" messages): admission does not measure a window with one
        self.last_exit: str | None = None
        self.out_of_service: str | None = None  # why its device was taken out of service: never restarted then
        self.lanes = 0  # the parent's lanes feeding it (``DeviceProcesses.lanes``) not stopped for good
        self.report: dict[str, Any] = {}
        self.devices: dict[str, Any] | None = None  # its VRAM tier's status, as the child last sent it (a GPU's)
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()  # a leaf: guards the pipe, the waiters and the closing flag
        self._up = threading.Condition(self._lock)
        self._process = self._conn = None
        self._starting = None  # the pipe of a process launched, not ready yet
        self._jobs: dict[str, _Waiter] = {}
        self._calls: dict[int, _Waiter] = {}
        self._next_call = 0
        self._closing = False
        self._stopped = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"device {self.spec.device}" if self.spec.device is not None else "cpu"

    def launch(self) -> None:
        """Spawn the process (not waiting for it: start several at once, then ``wait_ready``)."""
        parent, child = self._context.Pipe()
        process = self._context.Process(target=main, args=(child, self.spec), name=f"cuzk-{self.name}", daemon=True)
        process.start()
        child.close()  # the child's end lives in the child alone: its death is this end's EOF
        self._process, self._starting = process, parent

    def wait_ready(self) -> None:
        """Read the child's report; raise when it died starting. Then its reader thread serves it."""
        conn, process = self._starting, self._process
        try:
            kind, report = conn.recv()
        except (EOFError, OSError):
            conn.close()
            process.join()
            raise RuntimeError(f"the {self.name} worker process failed to start ({_exit_cause(process.exitcode)})") from None
        with self._lock:
            self.report, self._conn = report, conn
            self._up.notify_all()
            if self._closing:  # stop() came while it started: it exits now
                self._send(("exit",))
        if self._reader is None:
            self._reader = threading.Thread(target=self._read, name=f"cuzk-reader-{self.name}", daemon=True)
            self._reader.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    # ---- requests ---------------------------------------------------------------------------
    def prove(self, job: LiveJob, key_path: str, witness_path: str, r1cs_path: str | None, on_proving) -> Proof:
        """The job's proof from the child (waiting for a restarting child); ``on_proving`` when its proving half begins
        there (synthesized)."""
        waiter = _Waiter(on_proving)
        with self._lock:
            while self._conn is None and not self._closing and self.out_of_service is None:
                self._up.wait()
            if self._closing:
                raise ProofCancelled()
            if self._conn is None:  # it died after its device went out of service: not restarted
                raise DeviceProcessDied(f"the {self.name} worker process is gone: {self.out_of_service}")
            self._jobs[job.id] = waiter
            self._send(("prove", job.id, job.circuit, key_path, witness_path, r1cs_path))
            if job.cancelled():  # cancelled while it was being sent: the child stops it at its first check
                self._send(("cancel", job.id))
        return waiter.result()

    def cancel(self, job_id: str) -> None:
        with self._lock:
            if job_id in self._jobs and self._conn is not None:
                self._send(("cancel", job_id))

    def drop(self, name: str, path: str) -> None:
        """Have the process free its copy of key ``name`` loaded from ``path`` (its reservation went back here)."""
        with self._lock:
            if self._conn is not None:
                self._send(("drop", name, path))

    def call(self, name: str, *args: Any) -> Any:
        """Run ``call_<name>(*args)`` in the child and return its value (RuntimeError with the child's reason)."""
        waiter = _Waiter()
        with self._lock:
            while self._conn is None and not self._closing:
                self._up.wait()
            if self._closing:
                raise RuntimeError(f"the {self.name} worker process is stopping")
            self._next_call += 1
            self._calls[self._next_call] = waiter
            self._send(("call", self._next_call, name, args))
        return waiter.result()

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def _send(self, message: tuple) -> None:
        """Under ``_lock``. A broken pipe means the child died: its reader settles the waiters at the EOF."""
        try:
            self._conn.send(message)
        except (BrokenPipeError, OSError) as exc:
            log.debug("%s worker process: send failed (%s); its death is being handled", self.name, exc)

    # ---- the reader -------------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            conn = self._conn
            try:
                message = conn.recv()
            except (EOFError, OSError):
                if not self._died():
                    return
                continue
            kind, key = message[0], message[1]
            if kind == "loaded":
                with self._lock:
                    self.key_loads += 1
                continue
            if kind == "devices":
                self.devices = key  # the status dict, replaced whole: readers see one or the other
                continue
            if kind == "proving":
                with self._lock:
                    waiter = self._jobs.get(key)
                if waiter is not None:
                    waiter.on_proving()
                continue
            with self._lock:
                waiter = (self._calls if kind == "answer" else self._jobs).pop(key, None)
            if waiter is None:  # its holder gave it up (a death in between): never answered twice
                log.warning("%s worker process: dropped a %s message for %s, no longer in its hands", self.name, kind, key)
            elif kind == "proved":
                waiter.set_result(message[2])
            elif kind == "cancelled":
                waiter.set_exception(ProofCancelled())
            elif kind == "failed":
                error = DeviceProcessError if message[2] == "request" else DeviceProcessInternalError
                waiter.set_exception(error(message[3]))
            elif kind == "device_error":
                waiter.set_exception(ReportedDeviceError(message[2], message[3]))
            elif message[2]:  # an answer
                waiter.set_result(message[3])
            else:
                waiter.set_exception(RuntimeError(f"{self.name} worker process: {message[3]}"))

    def _died(self) -> bool:
        """The pipe's EOF: settle what the child held, then restart it; False when it was asked to stop."""
        process = self._process
        process.join()
        with self._lock:
            self._conn.close()
            self._conn = None
            closing = self._closing
            jobs, waiters = len(self._jobs), [*self._jobs.values(), *self._calls.values()]
            self._jobs.clear()
            self._calls.clear()
        cause = _exit_cause(process.exitcode)
        died = DeviceProcessDied(f"the {self.name} worker process (pid {process.pid}) died: {cause}")
        for waiter in waiters:
            waiter.set_exception(ProofCancelled() if closing else died)
        if closing:
            return False
        self.last_exit = cause
        if self.out_of_service is not None:  # its device failed its self-test: no restart
            with self._lock:
                self._up.notify_all()  # a job sent now is requeued (``prove``)
            log.error("the %s worker process (pid %d) died (%s) holding %d job(s); its device is out of service, so it "
                      "is not restarted", self.name, process.pid, cause, jobs)
            return False
        log.error("the %s worker process (pid %d) died (%s) holding %d job(s); restarting it, its jobs go back to the "
                  "queue", self.name, process.pid, cause, jobs)
        backoff = RESTART_BACKOFF_S[0]
        while True:
            try:
                self.launch()
                self.wait_ready()
                break
            except RuntimeError as exc:
                log.error("%s; trying again in %.1f s", exc, backoff)
                if self._stopped.wait(backoff):
                    return False
                backoff = min(backoff * 2, RESTART_BACKOFF_S[1])
        self.restarts += 1
        log.info("the %s worker process restarted (pid %d, restart %d)", self.name, self.pid, self.restarts)
        return True

    @property
    def closed(self) -> bool:
        """Asked to stop (the engine stopping, or its device out of service): no restart, no more jobs."""
        return self._stopped.is_set()

    def lane_out_of_service(self, why: str) -> None:
        """One of its lanes stopped for good, its device out of service (``why``): no restart from now on; the last
        lane to stop (the others end the proofs they hold first, as in-process workers do) stops the process."""
        with self._lock:
            self.out_of_service = self.out_of_service or why
            self.lanes -= 1
            last = self.lanes == 0
        if last:
            log.error("the %s worker process is stopped for good: its device is out of service (%s)", self.name, why)
            self.close()

    def close(self, timeout: float | None = None) -> None:
        """Ask the child to exit (its jobs stop at their next check: the journal replays them) and join it: its reader
        ends at the EOF (a child still starting is told to exit once it is ready)."""
        with self._lock:
            self._closing = True
            self._up.notify_all()
            if self._conn is not None:
                self._send(("exit",))
        self._stopped.set()  # a restart waiting out its backoff gives up
        if self._reader is not None:
            self._reader.join(timeout)
        process = self._process
        if process is not None:
            process.join(0 if self._reader is not None and not self._reader.is_alive() else timeout)
            if process.is_alive():
                log.warning("the %s worker process did not exit in %s s; killing it", self.name, timeout)
                process.kill()
                process.join()

    def status(self) -> dict[str, Any]:
        alive = self._process is not None and self._process.is_alive()
        return {"name": self.name, "pid": self.pid, "device": self.spec.device, "backend": self.report.get("backend"),
                "proofs_per_device": self.report.get("proofs"), "vram_bytes": self.report.get("vram_bytes"), "alive": alive,
                "restarts": self.restarts, "key_loads": self.key_loads, "last_exit": self.last_exit,
                "out_of_service": self.out_of_service, "jobs": self.jobs()}


class DeviceProcesses:
    """The engine's device worker processes, and the one owner of what their devices can hold."""

    def __init__(self, config: EngineConfig, ordinals: list[int] | None, keys: KeyManager,
                 make_backend: Callable[[int], Any] | None = None):
        """``ordinals``: CUDA devices, one process each; None: one process proving on the CPU. ``keys``: the registered
        keys, whose files the children read (K is sized for those registered now). ``make_backend``: what each child
        makes its device's backend with (``ChildSpec.make_backend``)."""
        self.keys = keys
        registered = {name: str(keys.path(name)) for name in keys.names()}
        specs = [ChildSpec(device=d, proofs_per_device=config.proofs_per_device, keys=registered,
                           chunk_bytes=config.load_chunk_bytes, log_level=logging.getLogger().getEffectiveLevel(),
                           key_home=config.key_home, make_backend=make_backend)
                 for d in (ordinals if ordinals is not None else [None])]
        self.children = [DeviceProcess(spec) for spec in specs]
        try:
            for child in self.children:
                child.launch()
            for child in self.children:
                child.wait_ready()
        except BaseException:
            self.close(timeout=10)
            raise
        self.on_device = ordinals is not None
        self.proofs_per_device = [child.report["proofs"] for child in self.children]
        self.backend_names = [child.report["backend"] for child in self.children]
        self._described: dict[str, tuple[str, list[dict]]] = {}  # key name → (its path, each child's answer)
        self._lock = threading.Lock()  # a leaf: guards _described
        for name in registered:
            self.describe(name)

    # ---- what the devices hold (admission asks) ---------------------------------------------
    def _in_service(self) -> list[DeviceProcess]:
        return [child for child in self.children if child.out_of_service is None]

    def _answers(self, name: str, path: Path | None = None) -> list[dict]:
        """Each child's answer about key ``name`` (UnknownKeyError when unregistered), asked once per registration (of
        the children whose devices are in service). ``path``: the key's file, when the caller knows it (the key
        manager, under its lock: then it is not asked)."""
        path = str(path if path is not None else self.keys.path(name))
        with self._lock:
            described = self._described.get(name)
        if described is not None and described[0] == path:
            return described[1]
        answers = [child.call("describe", path) for child in self._in_service()]
        with self._lock:
            self._described[name] = (path, answers)
        return answers

    def describe(self, name: str) -> None:
        """Ask the children about key ``name`` now (at its registration), so that ``host_copies``, which the key
        manager asks under its lock, finds their answers; one that fails is asked again at first use."""
        try:
            self._answers(name)
        except (RuntimeError, OSError, ValueError) as exc:
            log.warning("key %r: the worker processes could not describe it now (%s); asked again at first use", name, exc)

    def host_copies(self, name: str, path: Path) -> int:
        """How many children prove key ``name`` (file ``path``) from a host copy (a CPU's, or a GPU's that does not home
        it in VRAM), which the parent reserves with the key's lease (``KeyManager.attach_provers``, under its lock:
        answered from what ``describe`` asked at registration, else asked of the children now)."""
        return sum(not a["home"] for a in self._answers(name, path))

    def synthesizes_on_devices(self, name: str) -> bool:
        answers = self._answers(name) if self.on_device else []
        return bool(answers) and all(a["synthesis"] for a in answers)

    def holds_vectors_on_devices(self, name: str) -> bool:
        answers = self._answers(name) if self.on_device else []
        return bool(answers) and all(a["vectors"] for a in answers)

    def why_not_on_devices(self, name: str) -> str:
        return "; ".join(a["why_not"] for a in self._answers(name) if a["why_not"]) if self.on_device else ""

    # ---- the rest ---------------------------------------------------------------------------
    def lanes(self, make_state, stages: Stages, tracker: JobTracker, max_attempts: int,
              device_errors: DeviceErrorPolicy) -> list[ProcessLane]:
        """K + ``JOBS_AHEAD`` parent-side lanes per child, each feeding one job at a time to it (so the child synthesizes
        the next while K prove); ``make_state(name, device)``."""
        for child, proofs in zip(self.children, self.proofs_per_device):
            child.lanes = proofs + JOBS_AHEAD
        return [ProcessLane(make_state(f"prove-{child.name.replace(' ', '')}-{k}", child.spec.device), child, stages,
                            tracker, max_attempts, device_errors)
                for child, proofs in zip(self.children, self.proofs_per_device) for k in range(proofs + JOBS_AHEAD)]

    def warm_up(self, curves: set[str]) -> float:
        """Every child proves the warm-up circuit on each curve (at once); the longest took this many seconds."""
        t = time.perf_counter()
        errors: list[BaseException] = []

        def one(child: DeviceProcess) -> None:
            try:
                child.call("warm_up", sorted(curves))
            except BaseException as exc:  # noqa: BLE001 — raised below
                errors.append(exc)
        threads = [threading.Thread(target=one, args=(child,)) for child in self.children]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return time.perf_counter() - t

    def cancel(self, job_id: str) -> None:
        for child in self.children:
            child.cancel(job_id)

    def drop(self, name: str, path) -> None:
        """Every process frees its copy of key ``name`` loaded from ``path`` (``KeyManager.attach_provers``)."""
        for child in self.children:
            child.drop(name, str(path))

    def device_status(self) -> list[dict]:
        """Each GPU's VRAM tier as its process last reported it (``KeyManager.device_status`` in this mode)."""
        return [child.devices for child in self.children if child.devices is not None]

    def pids(self) -> list[int]:
        """The processes the jobs' memory is in (admission measures their resident peaks)."""
        return [child.pid for child in self.children if child.pid is not None and not child.closed]

    def loads_total(self) -> int:
        """Key loads in the processes, and their restarts (a restarted process loads its keys again, its first jobs
        pay its warm-up): admission does not measure a window in which one happened."""
        return sum(child.key_loads + child.restarts for child in self.children)

    def rss_bytes(self) -> int:
        """What the kernel charges the children as resident (the runtime reading counts it with the parent's)."""
        total = 0
        for child in self.children:
            try:
                total += read_rss_bytes(child.pid) if child.pid is not None else 0
            except OSError:  # it died between the two reads: its memory is gone
                pass
        return total

    def close(self, timeout: float | None = None) -> None:
        for child in self.children:
            child.close(timeout)

    def status(self) -> list[dict[str, Any]]:
        return [child.status() for child in self.children]


class ProcessLane(ProvingWorker):
    """One of a child's K lanes on the parent's side: takes a synthesis-ready job, has the child prove it, hands the
    proof to the finisher; a device error the child reports goes to the ``DeviceErrorPolicy`` (as an in-process
    worker's), a child's death requeues the job (or fails it after ``max_attempts`` starts)."""

    def __init__(self, state: WorkerState, child: DeviceProcess, stages: Stages, tracker: JobTracker,
                 max_attempts: int, device_errors: DeviceErrorPolicy):
        super().__init__(state, stages, tracker, device_errors)
        self.child = child
        self.max_attempts = max_attempts

    def run(self) -> None:
        self._serve()
        if self.out_of_service():  # stopped for good with its device; the last of the child's lanes stops the child
            self.child.lane_out_of_service(self.state.error or "its device failed its self-test")

    def _prove(self, job: LiveJob) -> Proof:
        job.checkpoint()
        lease = job.grant.lease
        return self.child.prove(job, str(lease.home.path), str(self.tracker.journal.witness_path(job.id)),
                                None if lease.r1cs_path is None else str(lease.r1cs_path),
                                on_proving=lambda: self.tracker.set_state(job, JobState.PROVING))

    def _failed(self, job: LiveJob, exc: BaseException) -> bool:
        if isinstance(exc, ReportedDeviceError):  # the child ran the self-test; the policy decides as in-process
            return self.device_errors.handle(self.state, job, exc, lambda: exc.problem)
        if isinstance(exc, DeviceProcessDied):
            self._after_death(job, exc)
        else:
            self.tracker.end_with(job, exc)
        return True

    def _after_death(self, job: LiveJob, exc: DeviceProcessDied) -> None:
        job.release()
        self.state.update(error=str(exc))
        if job.interrupted:
            self.tracker.interrupt(job)
        elif job.cancel_requested.is_set():
            self.tracker.finish(job, JobState.CANCELLED, error=f"cancelled while {job.state.value}")
        elif job.attempts >= self.max_attempts:
            self.tracker.finish(job, JobState.FAILED, error=abandoned_reason(job.attempts, self.max_attempts,
                                                                            f"the {self.child.name} worker process"))
        else:
            log.info("job %s goes back to the queue: %s", job.id, exc)
            self.tracker.requeue(job)
            try:
                self.stages.queued.push(job.id, job.priority, job.seq, job)
            except SchedulerClosed:
                self.tracker.interrupt(job)
