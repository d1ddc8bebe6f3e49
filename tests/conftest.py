"""Shared fixtures: the real-circuit corpus (skipped where ../shared is absent), the snarkjs oracle and memory cgroups."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import settings

from cuzk.jit_cache import CACHE_ENV, cache_dir

# No per-example deadline: it is a timed assertion, and an example's first call may compile or load a numba kernel
# (hundreds of ms on a busy 2-core machine), which hypothesis then reports as a flaky failure.
settings.register_profile("cuzk", deadline=None)
settings.load_profile("cuzk")


@pytest.hookimpl(trylast=True)  # after -m has deselected: CUDA is looked for only when a selected test needs it
def pytest_collection_modifyitems(config, items):
    """A gpu test selected on a machine without CuPy and a CUDA device (`-m slow` picks the slow cases of a gpu test
    too) skips, rather than failing on the missing device."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items:
        from cuzk.backends import cuda_available

        if not cuda_available():
            for item in gpu_items:
                item.add_marker(pytest.mark.skip(reason="needs CuPy and a CUDA device"))

REPO = Path(__file__).resolve().parents[1]
# One numba cache for this checkout's tests and every daemon they start (children inherit the variable), the one
# scripts/test.sh warms: a test daemon's data directory is new, and its own cache there would compile cold each time.
os.environ.setdefault(CACHE_ENV, str(cache_dir(REPO / ".cache")))
CORPUS = Path(os.environ.get("CUZK_CORPUS") or REPO.parent / "shared" / "corpus")  # env: a worktree elsewhere
SNARKJS = REPO / "tests" / "oracle" / "node_modules" / ".bin" / "snarkjs"

CORPUS_CIRCUITS = sorted(p.name for p in CORPUS.iterdir() if (p / "circuit.zkey").exists()) if CORPUS.is_dir() else []


def corpus_dir(name: str) -> Path:
    d = CORPUS / name
    if not (d / "circuit.zkey").exists():
        pytest.skip(f"corpus circuit {name} not available (../shared/corpus)")
    return d


@pytest.fixture(params=CORPUS_CIRCUITS or [pytest.param(None, marks=pytest.mark.skip(reason="no ../shared/corpus"))])
def corpus_circuit(request) -> Path:
    """Each corpus circuit directory in turn."""
    return corpus_dir(request.param)


def snarkjs_available() -> bool:
    return SNARKJS.exists() and shutil.which("node") is not None


def keep_for_snarkjs_elsewhere(vkey: Path, public: Path, proof: Path) -> None:
    """Where node is missing (the GPU machine), $CUZK_UNVERIFIED_DIR collects what snarkjs should check later
    (scripts/verify_unverified.sh), so a GPU-made proof is still judged by snarkjs, not only by cuzk."""
    keep = os.environ.get("CUZK_UNVERIFIED_DIR")
    if not keep:
        return
    root = Path(keep)
    root.mkdir(parents=True, exist_ok=True)
    d = root / f"{len(list(root.iterdir())):04d}"
    d.mkdir()
    for src, name in ((vkey, "verification_key.json"), (public, "public.json"), (proof, "proof.json")):
        shutil.copyfile(src, d / name)


def snarkjs_verify(vkey: Path, public: Path, proof: Path) -> bool:
    """True when `snarkjs groth16 verify` accepts the proof."""
    if not snarkjs_available():
        keep_for_snarkjs_elsewhere(vkey, public, proof)
        pytest.skip("snarkjs oracle not installed (npm install --prefix tests/oracle)")
    res = subprocess.run([str(SNARKJS), "groth16", "verify", str(vkey), str(public), str(proof)], capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    return res.returncode == 0 and "OK" in out


def snarkjs_verify_all(vkey: Path, pairs: list[tuple[Path, Path]]) -> bool:
    """True when snarkjs accepts every (public, proof) pair; where node is missing all are kept before the one skip."""
    if not snarkjs_available():
        for public, proof in pairs:
            keep_for_snarkjs_elsewhere(vkey, public, proof)
    return all(snarkjs_verify(vkey, public, proof) for public, proof in pairs)


def load_json(p: Path):
    return json.loads(Path(p).read_text())


def setup_cli_error(args, capsys) -> str:
    """`cuzk setup ARGS` must fail with exit status 1 and one line on stderr; that line."""
    from cuzk.cli import main as cli_main

    assert cli_main(["setup", *map(str, args)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    return err


@pytest.fixture
def small_r1cs(tmp_path):
    """A 40-constraint synthetic BN254 circuit's .r1cs."""
    from cuzk.circuits.synthetic import synthesize, write_synthetic
    from cuzk.curves import BN254

    return write_synthetic(tmp_path / "small", synthesize(BN254, 40, 1, seed=2))[0]


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    """Poll ``predicate`` (backing off from 5 ms to 100 ms) until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


@pytest.fixture
def memory_cgroups():
    """``make(limit_bytes, prefix, oom_counter=False)``: a new child memory cgroup, closed after the test; the test is
    skipped where none is writable (or, with ``oom_counter``, where the kernel keeps no OOM-kill count)."""
    from cuzk.memory.cgroup import ChildCgroup
    from cuzk.memory.limits import CgroupError

    made = []

    def make(limit_bytes: int, prefix: str = "cuzk-test-", oom_counter: bool = False):
        try:
            cg = ChildCgroup.create(limit_bytes, prefix=prefix)
        except (CgroupError, PermissionError) as exc:
            pytest.skip(f"no writable memory cgroup here: {exc}")
        made.append(cg)
        if oom_counter:
            try:
                cg.oom_kills()
            except CgroupError as exc:
                pytest.skip(f"no OOM-kill counter in memory cgroup {cg.directory}: {exc}")
        return cg

    yield make
    for cg in reversed(made):
        cg.close()


def planned_budget_bytes(room: int = 1 << 30) -> int:
    """``budget_bytes`` for an engine that plans its own budget inside this test process: it counts the process's
    resident memory as its own (a daemon's process is the engine), and pytest's can near 1 GiB after many tests;
    ``room`` is what the jobs get beside it."""
    from cuzk.memory.limits import read_rss_bytes

    return read_rss_bytes() + room
