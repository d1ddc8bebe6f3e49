"""The engine process's own memory, held in the budget under ``runtime``.

The interpreter, numpy, grpc and numba's compiled kernels take 180–250 MiB of a warm engine
that no job reserves. Left out of the budget, the reconciler sees it as *untracked* and
shrinks the effective budget by whatever exceeds the plan's allowance — the budget then
promises room the process itself already uses. So the engine measures itself and reserves it:

- at start, the process's resident size (VmRSS; the engine passes the smaller of it and what the
  kernel charges the limit's cgroup, so file-backed pages charged to another cgroup — the shared
  libraries and numba's cache another process read first — are not reserved twice over) less
  what reservations already hold;
- afterwards, whenever the engine is idle (no working set reserved, nobody waiting: on the
  engine's housekeeping ticks, and the moment admission sees the last running job end), the same
  figure again, growing the reservation when it rose by more than ``step_bytes`` (numba
  compiles and maps its kernels on the first proof of each kind). It never shrinks: code and
  interpreter arenas stay;
- and when a job waits for memory while no job runs and no key loads (``waiting``: admission,
  before it would refuse the job as stuck): the engine is idle but for the waiter, so the figure
  is as good, and a growth then is accounted even behind the waiter and past the free room
  (``MemoryBudget.account_resident``): those bytes are resident already, counted by the
  reconciler as untracked, so naming them takes nothing the waiter could have had. Without it
  the runtime measured at a restart, before the replayed jobs, stayed at its cold figure while
  they waited.

Every growth is reported to ``on_accounted`` (the reconciler's ``accounted``), which stops counting
those bytes as untracked at once.

Measured idle, ``VmRSS − (reserved − runtime)`` is what the process holds beyond its
reservations; a reservation not yet resident (a key still streaming in, a mapping not yet
touched) makes the figure smaller, never larger, so the runtime is not over-reserved. A
growth that does not fit now is retried on the next idle check (the reconciler covers it
meanwhile, as untracked).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .budget import MemoryBudget, Reservation
from .limits import read_rss_bytes
from .units import MiB, format_size

log = logging.getLogger(__name__)

CATEGORY = "runtime"


class RuntimeReservation:
    def __init__(self, budget: MemoryBudget, *, step_bytes: int = 8 * MiB, rss: Callable[[], int] = read_rss_bytes,
                 on_accounted: Callable[[int], object] | None = None):
        self.budget = budget
        self.step_bytes = step_bytes
        self._rss = rss
        self._on_accounted = on_accounted
        self.reservation: Reservation = budget.try_acquire(0, CATEGORY, label="engine runtime")
        if self.reservation is None:
            raise RuntimeError("the runtime reservation must be taken before anything queues on the budget")
        self.measured_bytes = 0
        self._updating = threading.Lock()  # the engine's housekeeping and admission both call update
        self.update()

    @property
    def nbytes(self) -> int:
        return self.reservation.nbytes

    def unreserved_bytes(self) -> int:
        """What this process holds beyond its reservations now (meaningful when the engine is idle)."""
        return max(0, self._rss() - (self.budget.reserved_bytes - self.reservation.nbytes))

    def update(self, *, waiting: bool = False) -> int:
        """Measure (call when idle; ``waiting``: idle but for a job waiting for memory, module docstring) and grow the
        reservation to match; returns the bytes added."""
        with self._updating:  # two measurements at once would both add the same growth
            self.measured_bytes = self.unreserved_bytes()
            grow = self.measured_bytes - self.reservation.nbytes
            if grow <= 0 or (grow < self.step_bytes and self.reservation.nbytes):
                return 0
            if waiting:
                self.budget.account_resident(self.reservation, grow)
            elif not self.budget.try_grow(self.reservation, grow):
                return 0
        log.info("engine runtime memory: %s reserved (measured %s resident beyond reservations%s)",
                 format_size(self.reservation.nbytes), format_size(self.measured_bytes),
                 ", while a job waited for memory" if waiting else "")
        if self._on_accounted is not None:
            self._on_accounted(grow)
        return grow

    def close(self) -> None:
        self.reservation.release()

    def to_dict(self) -> dict:
        return {"reserved_bytes": self.reservation.nbytes, "measured_bytes": self.measured_bytes}
