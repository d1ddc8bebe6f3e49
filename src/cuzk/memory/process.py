"""This process's own memory as the engine sees it between jobs: the peak a job reached, and giving back free heap.

``PeakProbe`` measures how far the resident set rose at its peak (admission attributes it to the
jobs that ran, which calibrates later reservations for their circuits); ``return_free_heap`` hands pages malloc keeps after a job back to the kernel, so
the kernel's charge follows what the budget reserves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

from .limits import read_status_bytes


def _libc_malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _libc_malloc_trim()


def return_free_heap() -> None:
    """Give memory that malloc holds free back to the kernel (glibc ``malloc_trim``).

    After a job its arrays are freed, but glibc keeps much of that memory mapped for
    reuse; the kernel still charges it, so the reconciler would count it as untracked and
    shrink the budget. Trimming after each job keeps the kernel's figure close to what the
    budget reserves, and makes the next peak measurement start from a clean baseline.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class PeakProbe:
    """The peak of the resident memory of this process (and of the processes ``pids`` names) over an interval, from
    the kernel's high-water marks.

    Why the high-water mark: the CPU backend's numba kernels hold the GIL, so a sampling
    thread would not run during the very kernels whose scratch is the peak. ``begin()``
    resets VmHWM (writing 5 to /proc/<pid>/clear_refs) and returns VmRSS; ``end(baseline)``
    returns ``VmHWM − baseline``: how far the resident set rose above the baseline at its peak.

    Resident means anonymous memory, shared memory and mapped file pages alike: a job's
    witness is a mapped file (the journal's copy, in the page cache the kernel charges to the
    cgroup) as much as its vectors are anonymous memory, and the working-set estimate counts
    both. What a job does *not* own and still maps for the first time — numba's cached machine
    code, shared libraries — is touched by a circuit's first run in a process, which the engine
    never measures; memory malloc kept from before and reuses does not raise the figure. It is
    process-wide, so the engine attributes it across the jobs that ran together
    (``engine.admission``). Unavailable (``available`` False) where clear_refs cannot be written.

    ``pids`` (the device worker processes, ``engine.procs``, where the jobs' memory is): their marks are reset and
    read with this process's, and the figures summed — each process's own peak, so the sum is never below the peak of
    them together. A process that is replaced between ``begin`` and ``end`` (a worker restarted) makes ``end`` None:
    that interval cannot be measured.
    """

    FIELDS = ("VmHWM", "VmRSS")

    def __init__(self, pids: Callable[[], list[int]] | None = None) -> None:
        self._pids = pids
        self._measured: tuple[int | str, ...] = ()  # the processes the last begin reset
        self.available = self._reset(("self",)) and self._read(("self",)) is not None

    def _processes(self) -> tuple[int | str, ...]:
        return ("self", *(self._pids() if self._pids is not None else ()))

    @staticmethod
    def _reset(processes: tuple[int | str, ...]) -> bool:
        try:
            for pid in processes:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            return True
        except OSError:
            return False

    def _read(self, processes: tuple[int | str, ...]) -> dict[str, int] | None:
        total = dict.fromkeys(self.FIELDS, 0)
        for pid in processes:
            fields = read_status_bytes(*self.FIELDS, pid=pid)
            if fields is None or len(fields) != len(self.FIELDS):
                return None
            for name in self.FIELDS:
                total[name] += fields[name]
        return total

    def begin(self) -> int | None:
        """Reset the high-water marks; returns the baseline for ``end`` (the resident sets now), None if unavailable."""
        self._measured = processes = self._processes()
        if not self.available or not self._reset(processes):
            return None
        fields = self._read(processes)
        return None if fields is None else fields["VmRSS"]

    def end(self, baseline: int | None) -> int | None:
        """Bytes the resident sets rose above ``baseline`` at their peaks since the last ``begin``."""
        if baseline is None or self._processes() != self._measured:
            return None
        fields = self._read(self._measured)
        return None if fields is None else max(0, fields["VmHWM"] - baseline)
