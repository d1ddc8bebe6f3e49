"""What a bench run submits: which circuits, how many jobs, in which order and at which priorities."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..engine.jobs import Priority

EXAMPLE_NAME = "synthetic_bn254"
# How the bench names priorities (in --priority and in its report): the engine's, in lower case.
PRIORITY_NAMES = tuple(level.name.lower() for level in Priority)
DEFAULT_PRIORITY = Priority.NORMAL.name.lower()  # also the warm-up jobs'


class WorkloadError(ValueError):
    """A workload that cannot be run (missing file, mismatched --zkey/--wtns, bad count)."""


@dataclass(frozen=True)
class BenchCircuit:
    name: str  # short label in reports; also the key's name on a daemon the bench starts
    zkey: Path
    wtns: Path

    def witness_bytes(self) -> bytes:
        return self.wtns.read_bytes()


@dataclass(frozen=True)
class PlannedJob:
    index: int
    circuit: BenchCircuit
    priority: str
    warmup: bool


def example_dir() -> Path:
    """The bundled example (a 2^10 synthetic BN254 circuit with a testing-only key), shipped as package data."""
    from importlib.resources import files  # here: the CLI builds bench's parser for every command, a prove too

    return Path(os.fspath(files("cuzk") / "examples" / EXAMPLE_NAME))


def _label(zkey: Path) -> str:
    """``.../sha256_32B/circuit.zkey`` reads ``sha256_32B``; ``.../foo.zkey`` reads ``foo``."""
    return zkey.parent.name if zkey.stem == "circuit" and zkey.parent.name else zkey.stem


def circuits_from_args(zkeys: list[str] | None, wtnses: list[str] | None, dirs: list[str] | None) -> list[BenchCircuit]:
    """Pairs of --zkey/--wtns, plus --circuit DIRs (circuit.zkey + witness.wtns); the bundled example when none."""
    zkeys, wtnses, dirs = zkeys or [], wtnses or [], dirs or []
    if len(zkeys) != len(wtnses):
        raise WorkloadError(f"give one --wtns per --zkey (got {len(zkeys)} --zkey and {len(wtnses)} --wtns)")
    pairs = [(Path(z), Path(w)) for z, w in zip(zkeys, wtnses)]
    pairs += [(Path(d) / "circuit.zkey", Path(d) / "witness.wtns") for d in dirs]
    if not pairs:
        d = example_dir()
        pairs = [(d / "circuit.zkey", d / "witness.wtns")]
    out: list[BenchCircuit] = []
    used: set[str] = set()
    for zkey, wtns in pairs:
        for path in (zkey, wtns):
            if not path.is_file():
                raise WorkloadError(f"no such file: {path}")
        name = base = _label(zkey)
        n = 2
        while name in used:
            name, n = f"{base}_{n}", n + 1
        used.add(name)
        out.append(BenchCircuit(name, zkey.resolve(), wtns.resolve()))
    return out


def plan_jobs(circuits: list[BenchCircuit], jobs: int, priorities: list[str], warmup: int) -> list[PlannedJob]:
    """``warmup`` jobs per circuit first (not measured), then ``jobs`` jobs cycling through circuits,
    and for each circuit through the priorities, so every circuit sees every priority."""
    if jobs < 1:
        raise WorkloadError(f"--jobs must be at least 1, got {jobs}")
    if warmup < 0:
        raise WorkloadError(f"--warmup must not be negative, got {warmup}")
    bad = [p for p in priorities if p not in PRIORITY_NAMES]
    if bad or not priorities:
        raise WorkloadError(f"unknown priority {', '.join(bad) or '(none)'}; use {', '.join(PRIORITY_NAMES)}")
    planned = [PlannedJob(i, c, DEFAULT_PRIORITY, True) for i, c in enumerate(c for _ in range(warmup) for c in circuits)]
    for i in range(jobs):
        circuit = circuits[i % len(circuits)]
        priority = priorities[(i // len(circuits)) % len(priorities)]
        planned.append(PlannedJob(len(planned), circuit, priority, False))
    return planned
