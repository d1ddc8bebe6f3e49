"""A blocking priority queue of job ids: CRITICAL > HIGH > NORMAL > LOW, FIFO within a level.

The engine keeps two of them: jobs waiting for synthesis, and synthesized jobs waiting for
a proving worker, so a CRITICAL job overtakes at both hand-offs. ``remove`` takes a job
out wherever it sits (cancellation of a queued job); removal is lazy — the heap entry is
skipped when it surfaces — so it costs O(1) and never reorders the others.

FIFO is by the job's ``seq`` (its journal submission order), not by push time: a job
replayed after a restart keeps its place ahead of newer jobs of the same priority.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from .jobs import Priority

T = TypeVar("T")


class SchedulerClosed(Exception):
    """The queue was closed while waiting (the engine is stopping)."""


class Scheduler(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str]] = []
        self._items: dict[str, tuple[T, Priority]] = {}
        self._cond = threading.Condition()
        self._closed = False

    def push(self, job_id: str, priority: Priority, seq: int, item: T) -> None:
        with self._cond:
            if self._closed:
                raise SchedulerClosed()
            if job_id in self._items:
                raise ValueError(f"job {job_id} is already queued")
            self._items[job_id] = (item, priority)
            heapq.heappush(self._heap, (-int(priority), seq, job_id))
            self._cond.notify()

    def pop(self, timeout: float | None = None, give_up: Callable[[], bool] | None = None) -> tuple[str, T] | None:
        """The most urgent job, waiting up to ``timeout`` seconds (None = forever); None on timeout, or as soon as
        ``give_up()`` says so (asked before taking a job and whenever ``wake`` is called; it must not block)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise SchedulerClosed()
                if give_up is not None and give_up():
                    return None
                while self._heap:
                    _, _, job_id = heapq.heappop(self._heap)
                    entry = self._items.pop(job_id, None)
                    if entry is not None:  # else: removed while queued
                        return job_id, entry[0]
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def wake(self) -> None:
        """Wake every waiter, so that each asks its ``give_up`` again."""
        with self._cond:
            self._cond.notify_all()

    def remove(self, job_id: str) -> T | None:
        """Take a queued job out; returns its item, or None when it is not queued (any more)."""
        with self._cond:
            entry = self._items.pop(job_id, None)
            if not self._items:
                self._heap.clear()  # drop the lazily-deleted entries while it is free to do so
            return None if entry is None else entry[0]

    def __contains__(self, job_id: str) -> bool:
        with self._cond:
            return job_id in self._items

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def depth_by_priority(self) -> dict[str, int]:
        with self._cond:
            out = {p.name: 0 for p in reversed(Priority)}
            for _, priority in self._items.values():
                out[priority.name] += 1
            return out

    def close(self) -> list[T]:
        """Wake every waiter with SchedulerClosed; returns the items still queued."""
        with self._cond:
            self._closed = True
            left = [item for item, _ in self._items.values()]
            self._items.clear()
            self._heap.clear()
            self._cond.notify_all()
            return left
