"""`cuzk bench`: run a workload against a daemon and measure it honestly.

The run: start a daemon on a fresh data directory (or attach to one with ``--addr``); start
the timeline sampler; run the warm-up jobs (not measured: the first proof of a circuit in a
new engine pays the key load and numba's cache load); then submit the measured jobs from
``concurrency`` client threads, each submitting one job and awaiting it before the next.
Every job carries a ``request_id``, so a job in flight when the engine is OOM-killed is the
same job after the restart: the client keeps awaiting it while the supervisor restarts the
engine with its learned budget and the journal replays it. The run gives up only when
more OOM recoveries happened than ``--max-oom-retries`` allows, when the supervisor gives up,
or at ``--timeout``.

Every figure comes from a measurement of this run: throughput is measured proofs over the
measured wall time (first submit to last completion); per-phase latencies come from the
engine's own timestamps and phase timings of each job; memory from the timeline.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..client import AwaitTimeout, Client, DaemonError, DaemonUnavailable
from .daemon import AttachedDaemon, StartedDaemon, fresh_data_dir
from .report import build_report
from .result import BenchOptions, BenchResult, JobOutcome
from .timeline import TimelineSampler, write_csv
from .workload import PlannedJob, plan_jobs

# How long one await waits before the worker looks up to see whether the run was aborted.
AWAIT_SLICE_S = 5.0
# Unreachable daemon: how long one client call retries before the worker checks for an abort.
RETRY_SLICE_S = 5.0


class BenchRun:
    """One run; ``run()`` returns the report (a JSON-ready dict) and writes the files into ``out_dir``."""

    def __init__(self, options: BenchOptions, on_progress: Callable[[BenchRun], None] | None = None):
        self.options = options
        self.on_progress = on_progress
        self.run_id = uuid.uuid4().hex[:10]
        self.planned = plan_jobs(options.circuits, options.jobs, options.priorities, options.warmup)
        self.outcomes: list[JobOutcome] = []
        self.abort_reason: str | None = None
        self.phase = "starting"
        self.started_mono = self.started_wall = 0.0
        self.measure_started_t: float | None = None
        self.measure_ended_t: float | None = None
        self.sampler: TimelineSampler | None = None
        self._lock = threading.Lock()
        self._witness: dict[str, Path | bytes] = {}
        self.witness_sent_as = "bytes"  # or "path": the daemon read each witness file itself
        # What a job names its key by: a daemon the bench starts registers each circuit under its name.
        self.key_names: dict[str, str] = {c.name: c.name for c in options.circuits}

    # -- counters the sampler and the progress bar read -------------------------------------------

    def counts(self) -> tuple[int, int]:
        """(jobs finished, jobs submitted and not yet finished)."""
        with self._lock:
            done = sum(o.completed_t is not None for o in self.outcomes)
            return done, len(self.outcomes) - done

    def now(self) -> float:
        return time.monotonic() - self.started_mono

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        opts = self.options
        opts.out_dir.mkdir(parents=True, exist_ok=True)
        if opts.addr:
            daemon = AttachedDaemon(opts.addr)
        else:
            data_dir = Path(opts.data_dir) if opts.data_dir else fresh_data_dir(opts.out_dir / "daemon")
            data_dir.mkdir(parents=True, exist_ok=True)
            daemon = StartedDaemon(data_dir, opts.circuits, opts.out_dir / "daemon.log", budget=opts.budget,
                                   budget_over_limit=opts.budget_over_limit, engine=opts.engine, memory_limit=opts.memory_limit)
        self.daemon = daemon
        try:
            if isinstance(daemon, StartedDaemon):
                daemon.start()
            client = Client(daemon.address, opts.token, restart_grace=RETRY_SLICE_S, tls_ca=opts.tls_ca)
            # A local daemon reads each witness file itself; over TCP the bytes are read once and sent with each job.
            self._witness = {c.name: c.wtns if client.sends_witness_paths else c.witness_bytes() for c in opts.circuits}
            try:
                if daemon.attached:
                    self._use_registered_keys(client.status())  # also: a clear error now rather than jobs that never start
                return self._measure(client, daemon)
            finally:
                client.close()
        finally:
            daemon.stop()

    def _use_registered_keys(self, status: dict[str, Any]) -> None:
        """Submit by the name an attached daemon already knows a key file by: by path it would register and load it twice."""
        names = {str(Path(k["path"]).resolve()): k["name"] for k in status.get("keys") or []}
        for c in self.options.circuits:
            self.key_names[c.name] = names.get(str(c.zkey), str(c.zkey))

    def _measure(self, client: Client, daemon) -> dict[str, Any]:
        opts = self.options
        self.started_mono, self.started_wall = time.monotonic(), time.time()
        self.sampler = TimelineSampler(client, daemon, opts.sample_interval, self.started_mono, self.started_wall, self.counts)
        self.sampler.start()
        metrics_text, jobs_info = "", {}
        try:
            warmup = [j for j in self.planned if j.warmup]
            measured = [j for j in self.planned if not j.warmup]
            if warmup:
                # Each circuit's first job alone: it pays the one-time costs (key load, JIT), which the daemon never
                # counts as a job's memory; the rest at the bench's concurrency, so the daemon has measured the
                # circuit's working set under load (and calibrated its reservations) before anything is measured here.
                self.phase = "warm-up"
                firsts = list({j.circuit.name: j for j in reversed(warmup)}.values())[::-1]
                self._run_jobs(client, firsts, 1)
                rest = [j for j in warmup if j not in firsts]
                if rest and self.abort_reason is None:
                    self._run_jobs(client, rest, min(opts.concurrency, len(rest)))
            if self.abort_reason is None:
                self.phase = "measuring"
                self.measure_started_t = self.now()
                self._run_jobs(client, measured, opts.concurrency)
                finished = [o.completed_t for o in self.outcomes if not o.planned.warmup and o.completed_t is not None]
                self.measure_ended_t = max(finished) if finished else self.now()
            self.phase = "collecting"
            if daemon.alive():
                jobs_info, metrics_text = self._collect(client)
        finally:
            self.sampler.stop()
        self.witness_sent_as = "path" if client.sends_witness_paths else "bytes"
        result = self._result(daemon, jobs_info, metrics_text)
        report = build_report(result)
        self._write_files(result, report)
        return report

    def _result(self, daemon, jobs_info: dict[str, Any], metrics_text: str) -> BenchResult:
        sampler = self.sampler
        return BenchResult(
            options=self.options, planned=list(self.planned), outcomes=list(self.outcomes), engine_jobs=jobs_info,
            metrics_text=metrics_text, samples=list(sampler.samples), key_loads=list(sampler.key_loads),
            recoveries=sampler.tracker.snapshot(), oom_kills=sampler.tracker.oom_kills,
            engine_peak_charged=dict(sampler.engine_peak_charged), final_status=sampler.last_status,
            daemon_attached=daemon.attached, daemon_address=daemon.address, daemon_data_dir=daemon.data_dir,
            limit_source=daemon.kernel_memory()[2], key_names=dict(self.key_names), witness_sent_as=self.witness_sent_as,
            started_unix=self.started_wall, measure_started_t=self.measure_started_t, measure_ended_t=self.measure_ended_t,
            aborted=self.abort_reason, gpu=sampler.gpu.setup(), disk=sampler.disk)

    def _collect(self, client: Client) -> tuple[dict[str, Any], str]:
        """The engine's record of each of our jobs (timestamps) and its metrics, while it still runs."""
        try:
            ours = {o.job_id for o in self.outcomes if o.job_id}
            infos = {j.job_id: j for j in client.list_jobs(limit=0) if j.job_id in ours}
            return infos, client.metrics()
        except (DaemonUnavailable, DaemonError, TimeoutError) as exc:
            self.abort_reason = self.abort_reason or f"could not read the daemon's job records at the end: {exc}"
            return {}, ""

    def _run_jobs(self, client: Client, jobs: list[PlannedJob], concurrency: int) -> None:
        pending = iter(jobs)
        pending_lock = threading.Lock()

        def worker() -> None:
            while self.abort_reason is None:
                with pending_lock:
                    job = next(pending, None)
                if job is None:
                    return
                self._run_one(client, job)

        with ThreadPoolExecutor(concurrency, thread_name_prefix="cuzk-bench-job") as pool:
            futures = [pool.submit(worker) for _ in range(concurrency)]
            try:
                while not all(f.done() for f in futures):
                    self._check_abort()
                    if self.on_progress is not None:
                        self.on_progress(self)
                    time.sleep(0.1)
            except BaseException:  # Ctrl-C: the workers stop within one await slice, then the daemon is stopped
                self.abort_reason = self.abort_reason or "interrupted"
                raise
            for f in futures:
                f.result()
        if self.on_progress is not None:
            self.on_progress(self)

    def _check_abort(self) -> None:
        if self.abort_reason is not None:
            return
        tracker = self.sampler.tracker
        if tracker.oom_recoveries > self.options.max_oom_retries:
            self.abort_reason = (f"the engine was OOM-killed {tracker.oom_recoveries} times, more than --max-oom-retries "
                                 f"{self.options.max_oom_retries}")
        elif tracker.gave_up:
            self.abort_reason = f"the daemon's supervisor gave up: {tracker.gave_up}"
        elif not self.daemon.alive():
            self.abort_reason = f"the daemon exited (status {self.daemon.proc.returncode}):\n{self.daemon.log_tail()}"
        elif self.options.timeout is not None and self.now() > self.options.timeout:
            self.abort_reason = f"--timeout {self.options.timeout:g} s reached"

    def _run_one(self, client: Client, job: PlannedJob) -> None:
        opts = self.options
        outcome = JobOutcome(job, request_id=f"bench-{self.run_id}-{job.index}", submitted_t=self.now())
        with self._lock:
            self.outcomes.append(outcome)
        key = self.key_names[job.circuit.name]
        try:
            while outcome.job_id is None:
                try:
                    outcome.job_id, _ = client.submit(key, self._witness[job.circuit.name], priority=job.priority,
                                                      request_id=outcome.request_id, timeout=opts.timeout)
                except DaemonUnavailable:
                    if self.abort_reason is not None:
                        return
            while True:
                try:
                    result = client.await_proof(outcome.job_id, AWAIT_SLICE_S, check=False)
                    break
                except (AwaitTimeout, DaemonUnavailable):
                    if self.abort_reason is not None:
                        return
        except DaemonError as exc:  # the daemon refused the job (unknown key, witness for another circuit...)
            outcome.state, outcome.error, outcome.completed_t = "FAILED", str(exc), self.now()
            return
        outcome.completed_t = self.now()
        outcome.state, outcome.error, outcome.timings = result.state, result.error, dict(result.timings)

    def _write_files(self, result: BenchResult, report: dict[str, Any]) -> None:
        out = self.options.out_dir
        files = report["files"]
        write_csv(out / files["csv"], result.samples)
        if self.options.plot:
            from .plot import plot_timeline

            plot_timeline(out / files["png"], result)
        (out / files["json"]).write_text(json.dumps(report, indent=1, default=str) + "\n")
