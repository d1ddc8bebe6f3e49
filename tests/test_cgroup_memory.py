"""The memory layer against a real kernel limit: a child memory cgroup (v1 or v2) made for each test.

Skips cleanly where no memory cgroup is writable. Also runnable as a script: the workload that
the last tests run inside the cgroup, with and without the budget
(``python tests/test_cgroup_memory.py budget|unbudgeted``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from cuzk.memory.pinned import cuda_available
from cuzk.memory.units import MiB

pytestmark = pytest.mark.cgroup

CLI = [sys.executable, "-m", "cuzk.cli"]


def run_in(cg, args, tmp_path, timeout=120):
    return cg.run(args, timeout=timeout, env={**os.environ, "CUZK_STATE_DIR": str(tmp_path / "state")})


def test_memcheck_inside_a_limited_cgroup_reports_that_limit(memory_cgroups, tmp_path):
    cg = memory_cgroups(512 * MiB)
    res = run_in(cg, CLI + ["memcheck", "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    cgroup = report["limits"]["cgroup"]
    assert cgroup["version"] == cg.version and cgroup["directory"] == str(cg.directory) and cgroup["resolution"] == "exact"
    assert cgroup["limit_bytes"] == 512 * MiB and cgroup["oom_kills"] == 0
    assert report["plan"]["ceiling_bytes"] == 512 * MiB and report["plan"]["ceiling_source"].startswith(f"cgroup v{cg.version}")
    assert report["plan"]["total_bytes"] == 512 * MiB - report["plan"]["margin_bytes"]
    assert report["now"]["source"] == "cgroup" and 0 < report["now"]["actual_bytes"] < 512 * MiB
    human = run_in(cg, CLI + ["memcheck"], tmp_path)
    assert "limit        512.00 MiB" in human.stdout and "budget total" in human.stdout


def test_memprobe_stops_short_of_the_limit_and_reports_it(memory_cgroups, tmp_path):
    cg = memory_cgroups(512 * MiB)
    res = run_in(cg, CLI + ["memprobe", "--chunk-mib", "64", "--margin-mib", "64"], tmp_path)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    assert result["cgroup_limit_bytes"] == 512 * MiB and result["cgroup_version"] == cg.version
    assert result["cgroup_path"] == cg.read().path and result["stop_reason"] == "safety distance reached"
    assert not result["oom_killed"] and cg.oom_kills() == 0
    # It got within one minimum chunk (4 MiB) of the safety distance and never past it.
    target = 512 * MiB - 64 * MiB
    assert target - 8 * MiB <= result["usage_peak_bytes"] <= target
    assert result["allocated_bytes"] == result["usage_peak_bytes"] - result["usage_before_bytes"] - result["overhead_bytes"]
    assert 0 <= result["overhead_bytes"] < result["allocated_bytes"] * 0.05  # page tables and the like
    assert result["probe_chunks"] == -(-result["allocated_bytes"] // (64 * MiB))
    # The saved result now sets memcheck's margin (same cgroup, same limit).
    check = json.loads(run_in(cg, CLI + ["memcheck", "--json"], tmp_path).stdout)
    assert check["plan"]["margin_source"].startswith("memprobe (anonymous)")
    assert check["plan"]["headroom_bytes"] == 64 * MiB


def test_memprobe_reports_an_oom_kill_of_its_child_and_survives(memory_cgroups, tmp_path):
    cg = memory_cgroups(256 * MiB)
    # Told the limit is 1 GiB, the probe's child runs into the real 256 MiB and the kernel kills it, not the caller.
    res = run_in(cg, CLI + ["memprobe", "--chunk-mib", "32", "--margin-mib", "0", "--limit-mib", "1024"], tmp_path)
    assert res.returncode == 3, res.stderr
    result = json.loads(res.stdout)
    assert result["oom_killed"] and result["stop_reason"] == "OOM-killed" and result["child_exit_status"] == -9
    assert result["oom_kills_after"] == result["oom_kills_before"] + 1 == cg.oom_kills()
    assert "result not saved" in res.stderr and not (tmp_path / "state" / "memprobe.json").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device")
def test_pinned_memprobe_inside_a_cgroup(memory_cgroups, tmp_path):
    cg = memory_cgroups(2048 * MiB)
    # Bounded by --max-mib: page-locked memory the driver maps may not be charged to the cgroup at all,
    # in which case nothing but the bound stops the probe (and the result shows a negative overhead).
    res = run_in(cg, CLI + ["memprobe", "--pinned", "--chunk-mib", "128", "--margin-mib", "256", "--max-mib", "1024"], tmp_path)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    print(json.dumps(result, indent=1))
    assert result["mode"] == "pinned" and not result["oom_killed"] and cg.oom_kills() == 0
    assert result["allocated_bytes"] > 0 and result["usage_peak_bytes"] <= 2048 * MiB - 256 * MiB
    assert (tmp_path / "state" / "memprobe-pinned.json").exists()


WORKERS, JOBS, BUFFER, SCRATCH = 4, 2, 96 * MiB, 64 * MiB  # 4 x 160 MiB wanted at once under a 512 MiB limit
BALLAST = 96 * MiB  # held outside the budget all along (like a CUDA context): more than the default 64 MiB allowance


@pytest.mark.parametrize("mode", ["budget", "unbudgeted"])
def test_workload_survives_with_the_budget_and_is_oom_killed_without(memory_cgroups, tmp_path, mode):
    cg = memory_cgroups(512 * MiB)
    res = run_in(cg, [sys.executable, str(Path(__file__).resolve()), mode], tmp_path)
    if mode == "unbudgeted":
        assert res.returncode == -9 and cg.oom_kills() >= 1, (res.returncode, res.stdout, res.stderr[-2000:])
        return
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout)
    assert report["errors"] == [] and report["jobs_done"] == WORKERS * JOBS and cg.oom_kills() == 0
    assert report["peak_reserved_bytes"] <= report["budget_total_bytes"] < 512 * MiB
    assert report["reconciler_source"] == "cgroup" and report["peak_actual_bytes"] < 512 * MiB
    # The ballast was seen: the reconciler shrank the budget below its total to make room for it.
    assert report["min_effective_total_bytes"] <= report["budget_total_bytes"] - (BALLAST - 64 * MiB)
    assert report["pool"]["hits"] + report["pool"]["misses"] == WORKERS * JOBS


def workload(mode: str) -> dict:
    """Workers each wanting a pinned-pool buffer plus working memory, more than their share of the limit together."""
    import numpy as np

    from cuzk.memory.budget import MemoryBudget
    from cuzk.memory.limits import read_limits
    from cuzk.memory.pinned import PageAlignedAllocator, PinnedPool, size_class
    from cuzk.memory.plan import plan_budget
    from cuzk.memory.reconcile import Reconciler

    ballast = np.ones(BALLAST, dtype=np.uint8)  # held, untracked, for the whole run

    if mode == "budget":
        plan = plan_budget(read_limits())
        budget = MemoryBudget(plan.total_bytes)
        reconciler = Reconciler(budget, plan, interval_s=0.02).start()
    else:
        budget, reconciler = MemoryBudget(1 << 40), None  # the same code, but a budget that is not the real limit
    pool = PinnedPool(budget, PageAlignedAllocator())
    start = threading.Barrier(WORKERS)
    done, errors = [], []

    def worker(i):
        start.wait()
        try:
            for _ in range(JOBS):
                # One reservation for the whole job, the pool buffer drawn from it: a job never holds
                # memory while it waits for more, so the workers cannot deadlock on the budget.
                with budget.acquire(size_class(BUFFER) + SCRATCH, "working", timeout=30, label=f"worker {i}") as job, \
                        pool.get(BUFFER, reservation=job) as buf:
                    scratch = np.ones(SCRATCH, dtype=np.uint8)
                    for _ in range(3):  # some work on both, so the workers overlap
                        buf.array[:] = i
                        scratch += buf.array[:SCRATCH]
                    del scratch
                done.append(i)
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if reconciler is not None:
        reconciler.stop()
    snap = budget.snapshot()
    return {"jobs_done": len(done), "errors": errors, "ballast_bytes": ballast.nbytes, "budget_total_bytes": budget.total_bytes,
            "peak_reserved_bytes": snap["peak_reserved_bytes"], "reconciler_source": reconciler.source if reconciler else None,
            "peak_actual_bytes": reconciler.peak_actual_bytes if reconciler else None,
            "min_effective_total_bytes": min(r.effective_total_bytes for r in reconciler.history) if reconciler else None,
            "pool": pool.stats()}


if __name__ == "__main__":
    print(json.dumps(workload(sys.argv[1])))
