"""Run the engine in a child process and outlive it; learn a smaller budget from each OOM kill.

Why a separate process: when the kernel's OOM killer fires it takes the biggest process in
the cgroup, which must be the engine, never the small supervisor that can explain the death
and start again (the engine is given a high ``oom_score_adj``, the supervisor a low one where
permitted). The journal makes restarts lossless: unfinished jobs are replayed.

Telling an OOM kill from any other death uses the kernel's OOM counters (cgroup v2
``memory.events`` / v1 ``memory.oom_control`` ``oom_kill``; ``/proc/vmstat`` where no
cgroup is visible): a SIGKILL is an OOM kill only if the counter moved while the engine ran.

The budget the supervisor hands the engine is a *ceiling* in ``memory.plan``'s sense (the
engine takes ``min(it, the kernel's limit)`` and subtracts its margin; its reconciler keeps
untracked memory inside that). So after an OOM kill the supervisor measures the overshoot
as the ceiling the engine planned against minus the limit the kernel killed it at (non-zero
when the limit was lowered under a running engine, or the engine was told a budget the
machine never had), and lowers the ceiling by that overshoot plus ``min_oom_step`` of it
(the step alone when the engine knew the limit and a spike its reconciler could not see
got it killed: each such OOM widens the safety margin). It then waits, polling, until the
kernel's charged usage has really fallen, restarts with exponential backoff, and persists
the learned ceiling in ``<data_dir>/supervisor.json`` together with the limit it was
learned under (a different limit later makes it moot).

``budget_over_limit`` (``cuzk daemon --budget-over-limit``): the engine is told to trust the
configured budget over the detected limit, and the supervisor plans the same way (the
overshoot of an OOM kill is then the configured ceiling minus the real limit). Only the
configured budget is trusted so: once a budget is learned it is passed plainly, so the
learned budget wins, under the real limit, from the first restart on.

The engine reports through ``<data_dir>/run/engine-state.json`` (``write_engine_state``):
its budget, what is reserved and charged, and how many jobs it finished. A run that
finished a job or stayed up ``healthy_after_s`` made progress; ``max_fruitless_restarts``
deaths in a row without progress, or a learned ceiling under ``min_budget``, stop the
supervisor with a message saying why.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import SupervisorPolicy  # noqa: F401 (its settings live with the configuration)
from ..memory.limits import MemoryLimits, read_limits
from ..memory.units import format_size


# How often a main thread waiting for SIGTERM/SIGINT (the engine's, this supervisor's) comes back to the interpreter. The
# kernel may hand a signal to any thread of the process (numba's, gRPC's, the engine's, `--idle-exit`'s); CPython then
# runs the Python handler only when the main thread next runs bytecode, which a main thread blocked in an untimed wait
# never does: an engine ignored SIGTERM twice in one run of the slow tests (orphaned once its supervisor was killed).
SIGNAL_POLL_S = 0.25

log = logging.getLogger("cuzk.supervisor")

STATE_FILE = "supervisor.json"
LOCK_FILE = "supervisor.lock"
ENGINE_STATE_FILE = Path("run") / "engine-state.json"
# The engine exits with this when it cannot start at all (bad config, address in use, data dir
# locked): restarting would only repeat it.
EXIT_CONFIG = 78
EXIT_GAVE_UP = 3
ENGINE_OOM_SCORE_ADJ = 800
SUPERVISOR_OOM_SCORE_ADJ = -500


def atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    """Write-then-rename, so a reader (or a crash) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def write_engine_state(data_dir: Path, *, budget_total: int, budget_reserved: int, charged_bytes: int | None,
                       untracked_peak: int | None, jobs_finished: int) -> None:
    """Called by the engine process every heartbeat.

    ``untracked_peak`` is the largest ``charged − reserved`` the engine has seen since it
    started, kept by the engine itself so that no reading is lost between the supervisor's polls.
    """
    atomic_write_json(Path(data_dir) / ENGINE_STATE_FILE, {
        "pid": os.getpid(), "time": time.time(), "budget_total": budget_total, "budget_reserved": budget_reserved,
        "charged_bytes": charged_bytes, "untracked_peak": untracked_peak, "jobs_finished": jobs_finished})


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class SupervisorState:
    """What survives the supervisor itself (``supervisor.json``); /status and /metrics read it too."""

    learned_budget: int | None = None
    learned_under_limit: int | None = None
    restarts: int = 0
    oom_kills: int = 0
    supervisor_pid: int | None = None
    engine_pid: int | None = None
    current_budget: int | None = None
    deaths: list[dict[str, Any]] = field(default_factory=list)  # the most recent few, newest last
    gave_up: str | None = None

    @classmethod
    def load(cls, data_dir: Path) -> SupervisorState:
        data = read_json(Path(data_dir) / STATE_FILE) or {}
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def save(self, data_dir: Path) -> None:
        atomic_write_json(Path(data_dir) / STATE_FILE, asdict(self))


@dataclass
class Death:
    pid: int
    returncode: int
    uptime_s: float
    oom_kill: bool
    jobs_finished: int
    budget: int | None  # what the engine was given (None: no configured budget)
    planned_ceiling: int  # min(budget, the kernel's ceiling when it started): what the engine planned against
    limit: int  # the kernel's ceiling (cgroup limit or MemTotal) when it died
    last_state: dict[str, Any] = field(default_factory=dict)  # its last heartbeat

    @property
    def cause(self) -> str:
        if self.oom_kill:
            return "OOM kill (the kernel's OOM counter moved)"
        if self.returncode < 0:
            name = signal.Signals(-self.returncode).name if -self.returncode in signal.valid_signals() else str(-self.returncode)
            extra = ", not by the OOM killer (its counter did not move)" if self.returncode == -signal.SIGKILL else ""
            return f"killed by {name}{extra}"
        return f"exited with status {self.returncode}"


class OomCounter:
    """The kernel's OOM-kill count for our memory cgroup, or machine-wide where no cgroup is visible."""

    def __init__(self) -> None:
        self.source = "cgroup"
        if self._cgroup_count() is None:
            self.source = "/proc/vmstat"

    @staticmethod
    def _cgroup_count() -> int | None:
        cgroup = read_limits().cgroup
        return None if cgroup is None else cgroup.oom_kills

    @staticmethod
    def _vmstat_count() -> int | None:
        try:
            for line in Path("/proc/vmstat").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        except OSError:
            pass
        return None

    def read(self) -> int | None:
        return self._cgroup_count() if self.source == "cgroup" else self._vmstat_count()


def _set_oom_score_adj(pid: int | str, value: int) -> None:
    try:
        Path(f"/proc/{pid}/oom_score_adj").write_text(str(value))
    except OSError:
        pass  # lowering needs CAP_SYS_RESOURCE; the engine is the biggest process anyway


class Supervisor:
    """Start the engine with ``engine_argv(budget)``; restart it as the policy says until ``stop()``."""

    def __init__(self, engine_argv: Callable[..., list[str]], data_dir: Path, configured_budget: int | None,
                 policy: SupervisorPolicy | None = None, env: dict[str, str] | None = None, budget_over_limit: bool = False):
        """``engine_argv(budget)`` is the engine's command line; with ``budget_over_limit`` it is also called as
        ``engine_argv(budget, over_limit=True)`` for a run that trusts the configured budget over the detected limit."""
        if budget_over_limit and configured_budget is None:
            raise ValueError("budget_over_limit needs a configured budget to trust")
        self.engine_argv = engine_argv
        self.budget_over_limit = budget_over_limit
        self.data_dir = Path(data_dir)
        self.configured_budget = configured_budget
        self.policy = policy or SupervisorPolicy()
        self.env = env
        self.state = SupervisorState.load(self.data_dir)
        self.oom = OomCounter()
        self._stop = threading.Event()
        self._proc: subprocess.Popen | None = None

    # -- budget -----------------------------------------------------------------------------

    def starting_budget(self) -> int | None:
        """The configured budget, lowered by one learned under the same kernel limit."""
        ceiling = read_limits().ceiling_bytes
        learned = self.state.learned_budget
        if learned is not None and self.state.learned_under_limit != ceiling:
            log.info("forgetting the learned budget %s: it was learned under a limit of %s, now %s",
                     format_size(learned), format_size(self.state.learned_under_limit), format_size(ceiling))
            self.state.learned_budget = self.state.learned_under_limit = None
            learned = None
        if learned is None:
            return self.configured_budget
        if self.configured_budget is None:
            return learned
        return min(self.configured_budget, learned)

    def trusts_over_limit(self, budget: int | None) -> bool:
        """Whether this run trusts ``budget`` over the detected limit: only the configured one, before anything was learned."""
        return self.budget_over_limit and budget is not None and budget == self.configured_budget and self.state.learned_budget is None

    def lowered_budget(self, death: Death) -> int:
        """The ceiling after an OOM kill: the planned one minus the overshoot measured, minus a safety step."""
        overshoot = max(0, death.planned_ceiling - death.limit)
        return int((death.planned_ceiling - overshoot) * (1 - self.policy.min_oom_step))

    # -- the loop ---------------------------------------------------------------------------

    def stop(self, *_signal_args: Any) -> None:
        """Ask the engine to finish (SIGTERM) and the loop to end; safe from a signal handler."""
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        """Supervise until ``stop()`` (returns 0) or until restarting cannot help (returns EXIT_GAVE_UP)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # One supervisor per data directory: a second one would overwrite the first's record.
        lock_fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            log.error("cuzk supervisor: another cuzk daemon already supervises %s", self.data_dir)
            return EXIT_GAVE_UP
        try:
            return self._supervise()
        finally:
            os.close(lock_fd)

    def _supervise(self) -> int:
        _set_oom_score_adj("self", SUPERVISOR_OOM_SCORE_ADJ)
        self.state.supervisor_pid = os.getpid()
        self.state.gave_up = None
        baseline = _charged(read_limits())
        budget = self.starting_budget()
        fruitless = 0
        while not self._stop.is_set():
            death = self._run_once(budget)
            if death is None:  # stopped on request
                break
            progressed = death.jobs_finished > 0 or death.uptime_s >= self.policy.healthy_after_s
            fruitless = 0 if progressed else fruitless + 1
            self.state.deaths = (self.state.deaths + [{**asdict(death), "cause": death.cause, "time": time.time()}])[-10:]
            if death.returncode == EXIT_CONFIG:
                return self._give_up(f"the engine could not start (exit status {EXIT_CONFIG}, see its error above); not restarting")
            if death.oom_kill:
                self.state.oom_kills += 1
                last = death.last_state
                log.warning("engine pid %d: %s after %.1f s; it planned against a ceiling of %s, the kernel's limit is %s "
                            "(last heartbeat: reserved %s, charged %s, untracked peak %s)", death.pid, death.cause, death.uptime_s,
                            format_size(death.planned_ceiling), format_size(death.limit), format_size(last.get("budget_reserved")),
                            format_size(last.get("charged_bytes")), format_size(last.get("untracked_peak")))
                lowered = self.lowered_budget(death)
                if lowered < self.policy.min_budget:
                    return self._give_up(
                        f"the engine was OOM-killed planning against {format_size(death.planned_ceiling)}; the budget that would "
                        f"fit ({format_size(lowered)}) is below the minimum {format_size(self.policy.min_budget)}: the memory "
                        "limit is too small for this daemon; not restarting")
                budget = lowered
                self.state.learned_budget = lowered
                self.state.learned_under_limit = death.limit
                log.warning("budget lowered by %s to %s (learned; persisted in %s)", format_size(death.planned_ceiling - lowered),
                            format_size(lowered), self.data_dir / STATE_FILE)
            else:
                log.warning("engine pid %d: %s after %.1f s; restarting with the same budget", death.pid, death.cause, death.uptime_s)
            if fruitless >= self.policy.max_fruitless_restarts:
                return self._give_up(f"the engine died {fruitless} times in a row without finishing a job (last: {death.cause}); "
                                     f"not restarting. Budget now {format_size(budget)}; history in {self.data_dir / STATE_FILE}")
            self.state.save(self.data_dir)
            self._wait_for_usage_to_fall(baseline, budget)
            delay = min(self.policy.backoff_max_s, self.policy.backoff_initial_s * 2 ** max(0, fruitless - 1))
            if self._stop.wait(delay):
                break
            self.state.restarts += 1
        self.state.engine_pid = None
        self.state.save(self.data_dir)
        return 0

    def _give_up(self, message: str) -> int:
        log.error("cuzk supervisor: %s", message)
        self.state.gave_up = message
        self.state.engine_pid = None
        self.state.save(self.data_dir)
        return EXIT_GAVE_UP

    def _run_once(self, budget: int | None) -> Death | None:
        """Run one engine to its end; None when it ended because we asked it to."""
        engine_state_path = self.data_dir / ENGINE_STATE_FILE
        engine_state_path.unlink(missing_ok=True)
        oom_before = self.oom.read()
        ceiling = read_limits().ceiling_bytes
        over_limit = self.trusts_over_limit(budget)
        planned_ceiling = ceiling if budget is None else budget if over_limit else min(budget, ceiling)
        if over_limit and budget > ceiling:
            log.warning("trusting the configured budget %s over the detected limit %s (--budget-over-limit): the engine "
                        "may be OOM-killed; the supervisor will then learn a budget under the real limit",
                        format_size(budget), format_size(ceiling))
        argv = self.engine_argv(budget, over_limit=True) if over_limit else self.engine_argv(budget)
        started = time.monotonic()
        self._proc = proc = subprocess.Popen(argv, env=self.env, start_new_session=True)
        _set_oom_score_adj(proc.pid, ENGINE_OOM_SCORE_ADJ)
        self.state.engine_pid = proc.pid
        self.state.current_budget = budget
        self.state.save(self.data_dir)
        log.info("engine started: pid %d, budget %s", proc.pid, format_size(budget) if budget else "auto")
        if self._stop.is_set():
            self.stop()
        while (returncode := proc.poll()) is None:  # not an untimed wait (SIGNAL_POLL_S says why)
            time.sleep(SIGNAL_POLL_S)
        uptime = time.monotonic() - started
        _kill_group(proc.pid)
        self._proc = None
        if self._stop.is_set() and returncode in (0, -signal.SIGTERM):
            log.info("engine stopped")
            return None
        engine_state = read_json(engine_state_path) or {}
        oom_after = self.oom.read()
        oom_kill = returncode == -signal.SIGKILL and oom_before is not None and oom_after is not None and oom_after > oom_before
        return Death(pid=proc.pid, returncode=returncode, uptime_s=uptime, oom_kill=oom_kill,
                     jobs_finished=int(engine_state.get("jobs_finished") or 0), budget=budget,
                     planned_ceiling=planned_ceiling, limit=read_limits().ceiling_bytes, last_state=engine_state)

    def _wait_for_usage_to_fall(self, baseline: int | None, budget: int | None) -> None:
        """Poll the kernel's charged usage until the next engine's budget fits beside it, or it is back near where it started."""
        limits = read_limits()
        charged = _charged(limits)
        if charged is None:
            return
        limit = limits.ceiling_bytes
        targets = [limit - budget if budget is not None else None,
                   baseline + max(16 << 20, limit // 50) if baseline is not None else None]
        target = max(t for t in targets if t is not None) if any(t is not None for t in targets) else None
        if target is None:
            return
        deadline = time.monotonic() + self.policy.settle_timeout_s
        delay = 0.01
        while charged > target:
            if time.monotonic() > deadline:
                log.warning("charged usage is still %s after %.0f s (waiting for %s); restarting anyway",
                            format_size(charged), self.policy.settle_timeout_s, format_size(target))
                return
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, 0.25)
            charged = _charged(read_limits()) or 0
        log.info("charged usage is down to %s", format_size(charged))


def _charged(limits: MemoryLimits) -> int | None:
    return limits.cgroup.charged_bytes if limits.cgroup is not None else None


def _kill_group(pgid: int) -> None:
    """The engine ran in its own session: take down anything it left behind (worker processes)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
