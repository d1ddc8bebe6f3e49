"""How many bytes one proof of a key needs, on the host and on a device: the one place that says so.

Admission reserves ``host_working_set`` in the host budget, asking ``holds_device_vectors`` whether
a device proof keeps all its vectors in VRAM; the VRAM tier asks ``proof_vram_bytes`` and
``coefficient_bytes`` before making a key's bases and coefficients resident; the prover reserves
``device_vector_bytes`` for the vectors it keeps on a device;
the engine runs ``proofs_in_flight`` proofs at once on each device. Every figure is exact arithmetic
over the key's header (N = domain size, E = bytes per Fr element, V = number of signals) and
follows what ``prover.groth16`` allocates:

- witness: the job's .wtns values, the journal's file memory-mapped and read in full — V·E, once:
  no path copies it on the host (the values are a contiguous view the kernels read in place,
  ``as_u64`` is a view, and a device's upload stages it through the pinned pool, whose buffers
  hold their own reservation, or copies straight from the mapping);
- a/b/c phase: A·w and B·w come from synthesis as two halves of one allocation (2·N·E,
  freed only when both are), C = A∘B (N·E), and while one vector is interpolated and
  evaluated on the coset, its inverse-NTT output, the coset-scaled copy and the transform's
  output exist at once (3·N·E): at worst, transforming B while A's new vector and the old
  A/B allocation are alive, 7·N·E. The CPU backend also keeps NTT tables per domain
  (twiddles of both directions, N/2 elements each, and the 8-byte bit-reversal index) —
  N·E + 8·N; a device keeps its tables in VRAM, counted in ``proof_vram_bytes``;
- MSM phase: the H scalars (N·E) and, on the CPU backend only, the Pippenger's scratch for its
  largest MSM (recoded scalar copy and indices per point, plus bounded per-task bucket
  sorting space: over a key's window tables a task sorts every window of its points); a device's MSM scratch is in VRAM and its staging buffers come from the
  pinned pool, which holds its own reservation;
- on a device, *with device vectors* (``device_vectors``: every device's whole VRAM budget holds
  the key's resident bases, its coefficients where they are resident, and one proof's vectors
  and largest MSM beside them — ``holds_device_vectors``), the proving worker waits for its
  vectors' VRAM reservation rather than proving without it, so a, b, c, the NTTs' outputs and
  the H scalars live only in VRAM: the host keeps the witness and, when synthesis ran on the
  CPU, the a/b halves until they are uploaded (2·N·E; none when ``device_synthesis`` — not yet
  covered: a deferred job that meets its key without resident coefficients makes its a/b on
  the CPU after all, 2·N·E beyond its reservation until they are uploaded). A key
  whose vectors can never fit is proved with each operation's inputs and outputs copied
  through the host, so such a proof reserves the a/b/c phase and the H scalars as the CPU
  path does (less its NTT tables), 7·N·E + N·E — 5·N·E + N·E when ``device_synthesis``;
- with an .r1cs to check satisfaction: its parsed CSR arrays, at most twice the file size;
- allocator slack (``slack_bytes``): each worker thread's malloc arena and stack pages first
  touched by a job, a fixed THREAD_SLACK_BYTES per thread, and JOB_SLACK_BYTES for the proof's
  own objects and the allocator's rounding (allowances sized from what small proofs were seen to
  need beyond the arithmetic, not a measurement of each job).

The host reservation is released in two phases: the a/b/c part when the prover reports
those vectors freed, the rest when the job ends. A measured peak for the circuit on the same
path (backend, device vectors, device synthesis) calibrates the estimate into [1, 1.05]× the
peak (``CALIBRATION_HEADROOM``): raised to it when the estimate is below it — the estimate
covers what the prover allocates, the measurement what it cannot see (allocator slack, backend
temporaries) — and lowered to 1.05× it when the estimate is above that — the arithmetic is a
worst case (every temporary alive at once, the CPU MSM's scratch bound) that the kernel was
seen not to charge, and reserving it would run fewer jobs than fit. Lowering takes from the
a/b/c phase first, so what stays reserved after phase one still covers the MSM phase.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import numba

from ..backends.base import DeviceBackend
from ..backends.cpu.msm import MAX_TABLE_WINDOW, table_task_entries
from ..formats.zkey import KEY_BASES, ZKeyHeader

ABC_VECTORS = 7  # see the module docstring: the worst moment of the a/b/c phase
# CPU Pippenger bounds (backends/cpu/msm.py): points one task sorts, and buckets of a window.
MSM_TASK_POINTS = 1 << 18
MSM_MAX_BUCKETS = 1 << 19  # window c <= 20, signed digits: 2^(c-1) buckets
# 256 KiB per thread was exceeded by up to 0.3 MB (2 threads) by a proof made in a process that had just compiled
# its numba kernels from a cold cache (tests/test_sizing.py in a fresh clone).
THREAD_SLACK_BYTES = 512 << 10
# Once the witness was counted once (not twice), small proofs in a fresh clone peaked up to 0.2 MiB above the
# arithmetic and the threads' slack (tests/test_sizing.py: 4.00 MB against 3.87 MB estimated at 2^10).
JOB_SLACK_BYTES = 1 << 20
# Proofs one device runs at once ("auto"). Two or three in flight fill the gaps one proof leaves on a GPU at small
# domains (launch latency, each MSM's result read back, the host's synthesis and hand-offs); beyond four the host
# side (one GIL issuing every lane's launches, synthesis feeding them) is the limit, while every lane costs a
# synthesized job's host memory waiting for it and a stream whose freed blocks CuPy's pool keeps for that stream.
MAX_PROOFS_PER_DEVICE = 4
# A calibrated reservation is at most this many times the circuit's measured peak (and never below it). The peak is
# the largest per-job figure of every measured window, so little headroom is needed: 5 % covers the kernel's lagging
# RSS counters (up to 64 pages per thread) and allocator variance. At 1.05, under a 288 MiB v1 cgroup limit that the
# budget nearly filled (benchmarks/memory_limit.py, sha256_32B, 60 jobs / 6, two rounds): no OOM kill, peak charged ÷
# peak reserved 0.87–0.90.
CALIBRATION_HEADROOM = 1.05


@dataclass(frozen=True)
class WorkingSet:
    """The host bytes one proof reserves, in its two release phases."""

    abc_bytes: int  # released when the prover frees a/b/c (phase one)
    rest_bytes: int  # witness, H scalars, MSM scratch, r1cs: released at the end
    estimated_bytes: int  # the header arithmetic alone
    measured_bytes: int | None = None  # the largest peak measured for this circuit on this path, if any
    device_synthesis: bool = False  # a/b are left to the device (synthesis on the host only checks the witness)
    device_vectors: bool = False  # the proof waits for its vectors' VRAM: no domain vector on the host past the upload
    path: str = "cpu"  # the path the proof takes (``proving_path``): a measured peak calibrates only the same path

    @property
    def total_bytes(self) -> int:
        return self.abc_bytes + self.rest_bytes

    def to_dict(self) -> dict:
        return {"total_bytes": self.total_bytes, "abc_bytes": self.abc_bytes, "rest_bytes": self.rest_bytes,
                "estimated_bytes": self.estimated_bytes, "measured_bytes": self.measured_bytes,
                "device_synthesis": self.device_synthesis,
                "device_vectors": self.device_vectors, "path": self.path}


def cpu_msm_scratch_bytes(header: ZKeyHeader, n: int, group: int, msm_tables: bool = False) -> int:
    """Upper bound of the CPU Pippenger's scratch for ``n`` points of G1 (group=1) or G2 (group=2), over the key's
    window tables where it has them (``msm_tables``)."""
    coord = header.n8q * group  # one coordinate of G1 is an Fq, of G2 an Fq2
    per_point = header.n8r + 24  # offset scalar (n8r + 8), index (8), kind and ±1 digit (5), rounded up
    # One task per thread at a time: its points sorted by bucket (x, y), the pair arrays of the
    # batched affine additions (at most one pair per two points: denominator, prefix product,
    # two indices and a case byte) and digit/infinity bytes; plus start/length per bucket.
    m = min(n, MSM_TASK_POINTS)
    per_task = m * (3 * coord + 16) + min(n, MSM_MAX_BUCKETS) * 16
    if msm_tables:  # a task sorts every window of its points: more entries, each with its row index and digit
        m = max(m, table_task_entries(n, header.curve.r.bit_length()))
        per_task = max(per_task, m * (3 * coord + 28) + (1 << (MAX_TABLE_WINDOW - 1)) * 16)
    return n * per_point + numba.config.NUMBA_NUM_THREADS * per_task


def proving_path(*, on_device: bool, device_synthesis: bool = False, device_vectors: bool = False) -> str:
    """A name for the way a proof runs, which sets its host working set: "cpu", or "device" with "+vectors" (held in
    VRAM) and "+synthesis" (A·w and B·w on the device). Peaks are measured and kept per circuit and path."""
    if not on_device:
        return "cpu"
    return "device" + ("+vectors" if device_vectors else "") + ("+synthesis" if device_synthesis else "")


def r1cs_resident_bytes(path: str | os.PathLike) -> int:
    """Bytes a parsed .r1cs takes (its CSR arrays): at most twice its file (a term's wire and coefficient keep their
    size; a row's u32 count becomes an int64 offset)."""
    return 2 * os.path.getsize(path)


def slack_bytes() -> int:
    """What a proof allocates beyond its vectors and scratch (the module docstring's allocator slack)."""
    return JOB_SLACK_BYTES + numba.config.NUMBA_NUM_THREADS * THREAD_SLACK_BYTES


def host_working_set(header: ZKeyHeader, *, on_device: bool, device_synthesis: bool = False,
                     device_vectors: bool = False, r1cs_path: str | os.PathLike | None = None,
                     measured_bytes: int | None = None, msm_tables: bool = False) -> WorkingSet:
    """The host reservation of one proof with this key, proved on a device or on the CPU, its a/b made on the
    device (``device_synthesis``) or on the host, its vectors held in VRAM for the whole proof (``device_vectors``)
    or copied through the host per operation (module docstring); both only ``on_device``. ``msm_tables``: the key's
    hot copy holds MSM window tables (on the CPU)."""
    if (device_synthesis or device_vectors) and not on_device:
        raise ValueError("synthesis and the proof's vectors are on a device only for a proof on a device")
    E, N, V = header.n8r, header.domain_size, header.n_vars
    ab = 0 if device_synthesis else 2 * N * E
    rest = V * E + slack_bytes()
    if device_vectors:
        abc = ab  # the a/b halves until they are uploaded; C, the NTTs' outputs and H are made on the device
    else:
        abc = (ABC_VECTORS - 2) * N * E + ab
        rest += N * E  # the H scalars
    if not on_device:
        abc += N * E + 8 * N
        rest += max(cpu_msm_scratch_bytes(header, V, 2, msm_tables), cpu_msm_scratch_bytes(header, N, 1, msm_tables))
    if r1cs_path is not None:
        rest += r1cs_resident_bytes(r1cs_path)
    estimated = abc + rest
    if measured_bytes is not None:
        target = min(max(estimated, measured_bytes), int(measured_bytes * CALIBRATION_HEADROOM))
        if target > estimated:
            rest += target - estimated
        else:
            cut = estimated - target
            abc, rest = max(0, abc - cut), rest - max(0, cut - abc)
    return WorkingSet(abc, rest, estimated, measured_bytes, device_synthesis, device_vectors,
                      proving_path(on_device=on_device, device_synthesis=device_synthesis, device_vectors=device_vectors))


def device_vector_bytes(header: ZKeyHeader) -> int:
    """Device bytes of one proof's field vectors at their peak: a, b, c, two NTT/elementwise temporaries, the witness."""
    fr = header.curve.Fr.n8
    return 5 * header.domain_size * fr + header.n_vars * fr


def bases_bytes(header: ZKeyHeader) -> int:
    """Device bytes of a key's resident MSM bases (the sections' sizes: the device layout is the file's)."""
    sizes = header.section_nbytes()
    return sum(sizes[name] for name, _ in KEY_BASES)


def tables_bytes(header: ZKeyHeader, backend: DeviceBackend) -> int:
    """Device bytes of the window tables a key's resident bases get on their first MSMs (``msm_table_bytes``): a
    cache the backend reserves beside the bases while the budget has room, and which gives way to proofs."""
    sizes, n8 = header.section_nbytes(), header.curve.Fq.n8
    return sum(backend.msm_table_bytes(header.curve, group, sizes[name] // ((2 if group == "g1" else 4) * n8))
               for name, group in KEY_BASES)


def coefficient_bytes(header: ZKeyHeader) -> int:
    """Device bytes of a key's resident coefficients at most (``backends.cuda.synth``'s row-sorted layout): a
    signal index and a value per entry, the 2N + 1 row boundaries, and the list of long rows (a long row has
    at least two entries)."""
    n, rows = header.n_coeffs, 2 * header.domain_size
    return n * (4 + header.n8r) + 4 * (rows + 1) + 4 * min(n // 2, rows)


def proof_vram_bytes(header: ZKeyHeader, backend: DeviceBackend, *, vectors_reserved: bool = False) -> int:
    """Device bytes one proof needs beside resident bases: its field vectors (unless ``vectors_reserved``: the proof
    holds them already), the working set of the largest MSM with resident bases — G1's over max(V, N) points or
    G2's over V, whose points are twice as wide (the MSM's own count: its chunk planner needs it too) — and the NTT
    tables of its domain, which the device caches on first use: counted with each proof (K proofs share one copy),
    because left out they took the room a tight budget had promised the proof's last MSM (VramExhaustedError)."""
    largest = max(backend.msm_working_bytes(header.curve, "g1", max(header.n_vars, header.domain_size), resident=True),
                  backend.msm_working_bytes(header.curve, "g2", header.n_vars, resident=True))
    tables = backend.ntt_table_bytes(header.curve, header.domain_size)
    return (0 if vectors_reserved else device_vector_bytes(header)) + largest + tables


def holds_device_vectors(header: ZKeyHeader, backend: DeviceBackend, *, coefficients: bool = False) -> bool:
    """Whether the device's whole VRAM budget holds the key's resident bases (and ``coefficients``) and one proof's
    vectors and largest MSM beside them: then a proof that waits for its vectors' reservation gets it once other
    proofs end and idle keys are evicted, so it never copies its vectors through the host."""
    need = bases_bytes(header) + proof_vram_bytes(header, backend) + (coefficient_bytes(header) if coefficients else 0)
    return need <= backend.vram.total_bytes


@dataclass(frozen=True)
class ProofsInFlight:
    """How many proofs one device runs at once (``proofs``), and the bytes that decided it."""

    proofs: int
    wanted: int | str  # the configured proofs_per_device ("auto" or a count)
    fit: int | None  # proofs whose working sets fit beside the binding key's resident bases (None: no key)
    budget_bytes: int  # the device's VRAM budget
    bases_bytes: int  # the binding key's resident bases (and coefficients, when synthesis runs on the device)
    proof_bytes: int  # one proof's device working set with that key (``proof_vram_bytes``)
    tables_bytes: int = 0  # its window tables where they fit beside the K proofs (else: built when room allows, evicted for proofs)

    @property
    def lowered(self) -> bool:
        """A configured count that does not fit and was lowered."""
        return self.wanted != "auto" and self.proofs < self.wanted


def proofs_in_flight(wanted: int | str, backend: DeviceBackend, headers: Iterable[ZKeyHeader]) -> ProofsInFlight:
    """K for one device: K proofs' working sets (``proof_vram_bytes``) must fit in its VRAM budget beside the
    resident bases (``bases_bytes``, and ``coefficient_bytes`` where they fit too) of the registered key that
    leaves room for the fewest. "auto" takes as many as fit, at most MAX_PROOFS_PER_DEVICE; a configured count is lowered to what fits. At least 1: a key too large to be
    resident even beside one proof is proved from host memory in chunked MSMs, one proof at a time. With no key
    registered, "auto" takes the cap: each proof still reserves what it holds (vectors that do not fit are copied per
    operation, an MSM that does not fit runs in chunks)."""
    budget = backend.vram.total_bytes
    binding = None  # (fit, bases, proof, tables) of the key that fits the fewest proofs
    for header in headers:
        bases, proof = bases_bytes(header), proof_vram_bytes(header, backend)
        if bases + coefficient_bytes(header) + proof <= budget:  # its coefficients are resident too (device synthesis)
            bases += coefficient_bytes(header)
        fit = max(0, budget - bases) // proof
        if binding is None or fit < binding[0]:
            binding = (fit, bases, proof, tables_bytes(header, backend))
    cap = MAX_PROOFS_PER_DEVICE if wanted == "auto" else wanted
    if binding is None:
        return ProofsInFlight(cap, wanted, None, budget, 0, 0)
    fit, bases, proof, tables = binding
    proofs = max(1, min(cap, fit))
    return ProofsInFlight(proofs, wanted, fit, budget, bases, proof, tables if bases + tables + proofs * proof <= budget else 0)
