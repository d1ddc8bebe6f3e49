"""Trust, but verify: compare what the kernel charges with what the budget has reserved.

Each sample reads the kernel's figure for the limit being defended, computes
``untracked = max(0, actual − reserved)`` and sets the budget's effective total to

    min(total, ceiling − headroom − untracked)

so that reserved + untracked + headroom never passes the ceiling. While untracked memory
stays within the plan's allowance this leaves the budget whole; past it, the budget shrinks
by the excess at once. It grows back only when the untracked memory has stayed low for
``recover_after_s`` (the effective total follows the largest untracked figure of that
window), and then in steps of at least ``hysteresis_bytes`` or all the way.

Why the window: a reservation is taken before its memory is touched, so while a buffer fills
(a key streaming in for seconds) ``actual − reserved`` dips and untracked memory of that size
is hidden. Recovering on such a dip would hand that memory out twice; a real workload was
OOM-killed that way before the window existed.

What "actual" is depends on which limit binds (``source="auto"``):
- a cgroup limit: the cgroup's charged usage (usage − inactive_file) at the level holding the
  limit, other processes in it included, since the OOM killer counts them too;
- MemTotal: machine-wide use (MemTotal − MemAvailable), since every process competes for it;
- a configured ceiling below both: this process's RSS.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, replace

from .budget import MemoryBudget
from .limits import find_memory_cgroup, read_cgroup, read_meminfo, read_rss_bytes
from .plan import BudgetPlan
from .units import MiB, format_size

log = logging.getLogger(__name__)

SOURCES = ("auto", "cgroup", "meminfo", "rss")


@dataclass(frozen=True)
class ReconcileReading:
    at: float
    source: str
    actual_bytes: int
    rss_bytes: int
    reserved_bytes: int
    untracked_bytes: int
    untracked_held_bytes: int  # the largest untracked figure of the recovery window: what the effective total follows
    untracked_allowance_bytes: int
    ceiling_bytes: int
    headroom_bytes: int
    total_bytes: int
    effective_total_bytes: int

    @property
    def shrunk_bytes(self) -> int:
        return self.total_bytes - self.effective_total_bytes

    def to_dict(self) -> dict:
        out = asdict(self)
        out["shrunk_bytes"] = self.shrunk_bytes
        return out


class Reconciler:
    """Samples the kernel's charge against ``budget`` and adjusts its effective total; ``start()`` runs it in a thread."""

    def __init__(self, budget: MemoryBudget, plan: BudgetPlan, source: str = "auto", interval_s: float = 0.5,
                 hysteresis_bytes: int | None = None, recover_after_s: float = 10.0, history: int = 240):
        if source not in SOURCES:
            raise ValueError(f"unknown reconciler source {source!r} (one of {', '.join(SOURCES)})")
        if interval_s <= 0:
            raise ValueError(f"reconciler interval must be positive, got {interval_s}")
        if recover_after_s < 0:
            raise ValueError(f"reconciler recovery window must not be negative, got {recover_after_s}")
        self.recover_after_s = recover_after_s
        self._window: deque[tuple[float, int]] = deque()  # (monotonic time, untracked bytes) of recent samples
        self.budget = budget
        self.plan = plan
        self.interval_s = interval_s
        self.hysteresis_bytes = hysteresis_bytes if hysteresis_bytes is not None else max(16 * MiB, budget.total_bytes // 100)
        self._location = find_memory_cgroup()
        self.source = self._choose_source(source)
        self.history: deque[ReconcileReading] = deque(maxlen=history)
        self.peak_actual_bytes = 0
        self.peak_untracked_bytes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _choose_source(self, source: str) -> str:
        if source == "cgroup" and self._location is None:
            raise ValueError("reconciler source 'cgroup' asked for, but no memory cgroup is visible")
        if source != "auto":
            return source
        if self.plan.ceiling_source.startswith("cgroup") and self._location is not None:
            return "cgroup"
        return "meminfo" if self.plan.ceiling_source.startswith("MemTotal") else "rss"

    def measure(self) -> int:
        """The kernel's figure for this source, in bytes."""
        if self.source == "cgroup":
            charged = read_cgroup(self._location).charged_bytes
            if charged is None:
                raise ValueError(f"cgroup {self._location.directory} exposes no usage counter")
            return charged
        if self.source == "meminfo":
            info = read_meminfo()
            return info.total_bytes - info.available_bytes
        return read_rss_bytes()

    @property
    def latest(self) -> ReconcileReading | None:
        with self._lock:
            return self.history[-1] if self.history else None

    def preview(self) -> ReconcileReading:
        """Measure once and say what the effective total should be, without touching the budget."""
        actual = self.measure()
        rss = actual if self.source == "rss" else read_rss_bytes()
        plan, budget = self.plan, self.budget
        reserved = budget.reserved_bytes
        untracked = max(0, actual - reserved)
        horizon = time.monotonic() - self.recover_after_s
        with self._lock:
            held = max([untracked] + [u for t, u in self._window if t >= horizon])
        target = max(0, min(budget.total_bytes, plan.ceiling_bytes - plan.headroom_bytes - held))
        return ReconcileReading(
            at=time.time(), source=self.source, actual_bytes=actual, rss_bytes=rss, reserved_bytes=reserved,
            untracked_bytes=untracked, untracked_held_bytes=held, untracked_allowance_bytes=plan.untracked_allowance_bytes,
            ceiling_bytes=plan.ceiling_bytes, headroom_bytes=plan.headroom_bytes, total_bytes=budget.total_bytes,
            effective_total_bytes=target)

    def sample(self) -> ReconcileReading:
        """Measure once and adjust the budget's effective total: shrink at once, grow back after the window, by steps."""
        reading = self.preview()
        budget, target = self.budget, reading.effective_total_bytes
        current = budget.effective_total_bytes
        if target < current or (target > current and (target == budget.total_bytes or target - current >= self.hysteresis_bytes)):
            budget.set_effective_limit(target)
            if target < budget.total_bytes and current == budget.total_bytes:
                log.warning("memory budget shrunk to %s: %s untracked (allowance %s) by %s", format_size(target),
                            format_size(reading.untracked_held_bytes), format_size(reading.untracked_allowance_bytes), self.source)
            elif target == budget.total_bytes and current < target:
                log.info("memory budget back to its full %s", format_size(target))
        elif target != current:
            reading = replace(reading, effective_total_bytes=current)
        now = time.monotonic()
        with self._lock:
            self._window.append((now, reading.untracked_bytes))
            while self._window and self._window[0][0] < now - self.recover_after_s:
                self._window.popleft()
            self.history.append(reading)
            self.peak_actual_bytes = max(self.peak_actual_bytes, reading.actual_bytes)
            self.peak_untracked_bytes = max(self.peak_untracked_bytes, reading.untracked_bytes)
        return reading

    def accounted(self, nbytes: int) -> ReconcileReading:
        """``nbytes`` the budget now reserves were resident and untracked until now (``MemoryBudget.account_resident``:
        the engine's runtime measured and reserved): the recovery window's figures drop by them, so the effective total
        gives them back at once instead of holding them out twice for ``recover_after_s``. Samples at once."""
        with self._lock:
            self._window = deque((t, max(0, u - nbytes)) for t, u in self._window)
        return self.sample()

    def start(self) -> "Reconciler":
        if self._thread is None:
            self.sample()
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="cuzk-reconciler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:
                log.exception("memory reconciler sample failed; trying again in %.1f s", self.interval_s)

    def __enter__(self) -> "Reconciler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
