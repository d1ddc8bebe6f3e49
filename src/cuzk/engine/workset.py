"""How much host memory one proof needs, from the key's header alone, and how to measure it.

The estimate follows the prover's own steps (``prover.groth16``), with N = domain size,
E = bytes per Fr element (n8r), V = number of signals:

- witness: the job's .wtns values, memory-mapped and read in full, plus the aligned copy a
  kernel may take of them — 2·V·E;
- a/b/c phase: A·w and B·w come from synthesis as two halves of one allocation (2·N·E,
  freed only when both are), C = A∘B (N·E), and while one vector is interpolated and
  evaluated on the coset, its inverse-NTT output, the coset-scaled copy and the transform's
  output exist at once (3·N·E): at worst, transforming B while A's new vector and the old
  A/B allocation are alive, 7·N·E. Plus the NTT tables the backend keeps per domain
  (twiddles of both directions, N/2 elements each, and the 8-byte bit-reversal index) —
  N·E + 8·N. The H scalars are computed from these at the end of the phase;
- MSM phase: the H scalars (N·E) and the MSM scratch of the largest MSM: the backend's own
  ``msm_scratch_bytes(curve, n, group)`` where it has one, else the CPU Pippenger's bound
  (recoded scalar copy and indices per point, plus bounded per-task bucket sorting space);
- with an .r1cs to check satisfaction: its parsed CSR arrays, at most twice the file size;
- allocator slack: each worker thread's malloc arena and stack pages first touched by a job,
  a fixed THREAD_SLACK_BYTES per thread (an allowance, not a measurement).

The reservation is released in two phases: the a/b/c part when the prover reports those
vectors freed (``on_abc_released``), the rest when the job ends. A measured peak for the
circuit (``PeakProbe`` while a job runs alone, or a reconciler reading fed to
``Engine.record_peak``) replaces the estimate when it is larger: the estimate is exact
arithmetic over what the prover allocates, the measurement catches what it cannot see
(allocator slack, backend temporaries).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass

import numba

from ..formats.zkey import ZKeyHeader
from ..memory.limits import read_status_bytes

ABC_VECTORS = 7  # see the module docstring: the worst moment of the a/b/c phase
# CPU Pippenger bounds (backends/cpu/msm.py): points one task sorts, and coordinates kept per point.
MSM_TASK_POINTS = 1 << 18
MSM_MAX_BUCKETS = 1 << 19  # window c <= 20, signed digits: 2^(c-1) buckets


@dataclass(frozen=True)
class WorkingSet:
    abc_bytes: int  # released when the prover frees a/b/c (phase one)
    rest_bytes: int  # witness, H scalars, MSM scratch, r1cs: released at the end
    estimated_bytes: int  # the header arithmetic alone
    measured_bytes: int | None = None  # the largest peak measured for this circuit, if any

    @property
    def total_bytes(self) -> int:
        return self.abc_bytes + self.rest_bytes

    def to_dict(self) -> dict:
        return {"total_bytes": self.total_bytes, "abc_bytes": self.abc_bytes, "rest_bytes": self.rest_bytes,
                "estimated_bytes": self.estimated_bytes, "measured_bytes": self.measured_bytes}


def cpu_msm_scratch_bytes(header: ZKeyHeader, n: int, group: int) -> int:
    """Upper bound of the CPU Pippenger's scratch for ``n`` points of G1 (group=1) or G2 (group=2)."""
    coord = header.n8q * group  # one coordinate of G1 is an Fq, of G2 an Fq2
    per_point = header.n8r + 24  # offset scalar (n8r + 8), index (8), kind and ±1 digit (5), rounded up
    # One task per thread at a time: its points sorted by bucket (x, y), the pair arrays of the
    # batched affine additions (at most one pair per two points: denominator, prefix product,
    # two indices and a case byte) and digit/infinity bytes; plus start/length per bucket.
    m = min(n, MSM_TASK_POINTS)
    per_task = m * (3 * coord + 16) + min(n, MSM_MAX_BUCKETS) * 16
    return n * per_point + numba.config.NUMBA_NUM_THREADS * per_task


THREAD_SLACK_BYTES = 256 << 10


def working_set(header: ZKeyHeader, *, backend=None, r1cs_path: str | os.PathLike | None = None,
                measured_bytes: int | None = None) -> WorkingSet:
    """The working-set reservation of one proof with this key (see the module docstring for each term)."""
    E, N, V = header.n8r, header.domain_size, header.n_vars
    scratch_of = getattr(backend, "msm_scratch_bytes", None)
    if scratch_of is not None:
        scratch = max(scratch_of(header.curve, V, 2), scratch_of(header.curve, N, 1))
    else:
        scratch = max(cpu_msm_scratch_bytes(header, V, 2), cpu_msm_scratch_bytes(header, N, 1))
    abc = ABC_VECTORS * N * E + N * E + 8 * N
    rest = 2 * V * E + N * E + scratch + numba.config.NUMBA_NUM_THREADS * THREAD_SLACK_BYTES
    if r1cs_path is not None:
        rest += 2 * os.path.getsize(r1cs_path)
    estimated = abc + rest
    if measured_bytes is not None and measured_bytes > estimated:
        rest += measured_bytes - estimated
    return WorkingSet(abc, rest, estimated, measured_bytes)


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


def _read_status_kib(*names: str) -> dict[str, int] | None:
    """Fields of /proc/self/status in bytes (one read, so they describe the same moment); None if any is missing."""
    fields = read_status_bytes(*names)
    return fields if fields is not None and len(fields) == len(names) else None


def _file_backed(fields: dict[str, int]) -> int:
    return fields["RssFile"] + fields["RssShmem"]


class PeakProbe:
    """The peak of the process's *anonymous* memory over an interval, from the kernel's high-water mark.

    Why not VmHWM alone: it counts file-backed pages too, and a job first touches some of
    those (numba's cached machine code, shared libraries) — not memory the job allocated,
    and not memory the budget's working set is for. Why not sample RssAnon from a thread:
    the CPU backend's numba kernels hold the GIL, so a sampler would not run during the very
    kernels whose scratch is the peak.

    So: ``begin()`` resets VmHWM (writing 5 to /proc/self/clear_refs) and notes RssAnon;
    ``end()`` returns ``VmHWM − (RssFile + RssShmem now) − RssAnon at the start``. At the
    moment of the peak, VmHWM = anon + file-backed; file-backed RSS only grows while a job
    runs (pages are touched, not dropped), so subtracting its value at the end subtracts at
    least what it was at the peak: the result is at most the anonymous growth at the peak — a
    *lower* bound, as the engine needs (a measurement only ever raises an estimate). Only if
    the kernel reclaimed file pages during the job can it exceed that, by what was reclaimed,
    which errs toward a larger reservation. Memory malloc kept from earlier and reused does
    not raise RSS either (another reason it is a lower bound). It is process-wide, so the
    engine only trusts it for a job that ran with no other job or key load beside it.
    Unavailable (``available`` False) where clear_refs cannot be written or the kernel lacks
    the RssAnon/RssFile/RssShmem fields (before 4.5).
    """

    FIELDS = ("VmHWM", "RssAnon", "RssFile", "RssShmem")

    def __init__(self) -> None:
        self.available = self._reset() and _read_status_kib(*self.FIELDS) is not None

    @staticmethod
    def _reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def begin(self) -> int | None:
        """Reset the high-water mark; returns the baseline for ``end`` (anonymous RSS now), None if unavailable."""
        if not self.available or not self._reset():
            return None
        fields = _read_status_kib(*self.FIELDS)
        return None if fields is None else fields["RssAnon"]

    def end(self, baseline: int | None) -> int | None:
        """Bytes the anonymous memory rose above ``baseline`` at its peak since ``begin`` (a lower bound)."""
        if baseline is None:
            return None
        fields = _read_status_kib(*self.FIELDS)
        if fields is None:
            return None
        return max(0, fields["VmHWM"] - _file_backed(fields) - baseline)
