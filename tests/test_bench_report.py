"""`cuzk bench`'s report and plot from a ``BenchResult`` made by hand: every figure checked against the
jobs, samples and recoveries it was built from, with no daemon (tests/test_bench.py runs real ones)."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from cuzk.bench.plot import plot_timeline
from cuzk.bench.report import build_report, render
from cuzk.bench.result import BenchOptions, BenchResult, JobOutcome
from cuzk.bench.timeline import Recovery, Sample
from cuzk.bench.workload import BenchCircuit, PlannedJob, plan_jobs
from cuzk.client import JobInfo
from cuzk.memory.units import MiB, format_size

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T0 = 1_700_000_000.0  # the run's time zero (unix time); the engine stamps its jobs in unix time
A = BenchCircuit("a", Path("/keys/a.zkey"), Path("/wtns/a.wtns"))
B = BenchCircuit("b", Path("/keys/b.zkey"), Path("/wtns/b.wtns"))


def _job(planned: PlannedJob, submitted_t: float, completed_t: float | None, timings: dict[str, float],
         engine: tuple[float, float, float] | None, *, state: str = "DONE", attempts: int = 1,
         error: str = "") -> tuple[JobOutcome, JobInfo | None]:
    """One job as the runner records it, and the engine's record of it (submitted, started, finished: run seconds)."""
    job_id = f"job{planned.index}"
    outcome = JobOutcome(planned, f"bench-test-{planned.index}", submitted_t, job_id, completed_t, state, error, timings)
    info = None if engine is None else JobInfo(
        job_id=job_id, circuit=planned.circuit.name, priority=planned.priority.upper(), state=state,
        submitted_at=T0 + engine[0], started_at=T0 + engine[1], finished_at=T0 + engine[2], error=error,
        request_id=outcome.request_id, attempts=attempts)
    return outcome, info


def _sample(t_s: float, pid: int | None, *, budget: int | None = None, effective: int | None = None,
            reserved: dict[str, int] | None = None, untracked: int | None = None, charged: int | None = None,
            kernel: int, done: int = 0, in_flight: int = 0, oom_kills: int = 0) -> Sample:
    reserved = reserved or {}
    return Sample(t_s=t_s, unix_time=T0 + t_s, engine_pid=pid, limit_bytes=1000 * MiB, budget_total_bytes=budget,
                  budget_effective_bytes=effective, reserved_bytes=sum(reserved.values()) if pid else None,
                  reserved_by_category=reserved, untracked_bytes=untracked, charged_bytes=charged,
                  kernel_charged_bytes=kernel, jobs_done=done, jobs_in_flight=in_flight, oom_kills=oom_kills)


SAMPLES = [
    _sample(0.0, 100, budget=800 * MiB, effective=800 * MiB, reserved={"key": 50 * MiB}, untracked=20 * MiB,
            charged=100 * MiB, kernel=110 * MiB),
    _sample(0.5, None, kernel=5 * MiB, in_flight=2, oom_kills=1),  # the engine was OOM-killed at 0.4 s
    _sample(1.0, 101, budget=700 * MiB, effective=650 * MiB, reserved={"key": 50 * MiB, "working": 150 * MiB},
            untracked=100 * MiB, charged=300 * MiB, kernel=320 * MiB, done=2, in_flight=3, oom_kills=1),
    _sample(13.0, 101, budget=700 * MiB, effective=700 * MiB, reserved={"key": 50 * MiB, "working": 100 * MiB},
            untracked=100 * MiB, charged=250 * MiB, kernel=260 * MiB, done=5, oom_kills=1),
]
RECOVERY = Recovery(engine_pid=100, cause="OOM kill", oom_kill=True, died_at=T0 + 0.4, limit_bytes=1000 * MiB,
                    ceiling_before_bytes=1000 * MiB, budget_before_bytes=800 * MiB, ceiling_after_bytes=900 * MiB,
                    budget_after_bytes=700 * MiB, new_engine_pid=101, recovered_at=T0 + 0.9)
KEY_LOADS = [{"key": "a", "engine_pid": 100, "t_s": 0.0, "loads": 1, "seconds": 2.0},
             {"key": "a", "engine_pid": 101, "t_s": 1.0, "loads": 1, "seconds": 1.5}]
STATUS = {"keys": [{"name": "a", "path": "/keys/a.zkey", "curve": "bn254", "domain_size": 1024, "hot_bytes": 5 * MiB,
                    "working_set_bytes": 9 * MiB}],
          "config": {"backend": ["cpu"], "synth_workers": 2}, "server": {"version": "0.1.0"}}
METRICS = ('# TYPE cuzk_proofs counter\ncuzk_proofs_total{circuit="a",status="done"} 3.0\n'
           'cuzk_proofs_total{circuit="b",status="done"} 2.0\n')


def _result(tmp_path: Path, jobs: list[tuple[JobOutcome, JobInfo | None]], **changes) -> BenchResult:
    options = BenchOptions(circuits=[A, B], out_dir=tmp_path, jobs=3, priorities=["low", "high"], sample_interval=0.5)
    result = BenchResult(
        options=options, planned=plan_jobs(options.circuits, options.jobs, options.priorities, options.warmup),
        outcomes=[o for o, _ in jobs], engine_jobs={i.job_id: i for _, i in jobs if i is not None}, metrics_text=METRICS,
        samples=SAMPLES, key_loads=KEY_LOADS, recoveries=[RECOVERY], oom_kills=1,
        engine_peak_charged={100: 310 * MiB, 101: 305 * MiB}, final_status=STATUS, daemon_attached=False,
        daemon_address="unix:/run/cuzk-test.sock", daemon_data_dir=tmp_path / "daemon", limit_source="cgroup /sys/fs/cgroup/x",
        key_names={"a": "a", "b": "b"}, witness_sent_as="path", started_unix=T0, measure_started_t=10.0,
        measure_ended_t=12.6)
    return dataclasses.replace(result, **changes)


def _warmups(plan: list[PlannedJob]) -> list[tuple[JobOutcome, JobInfo | None]]:
    return [_job(plan[0], 0.1, 4.0, {"key_load": 2.0, "synthesize": 0.5, "msm": 0.8, "verify": 0.1}, (0.11, 2.2, 3.9)),
            _job(plan[1], 0.1, 4.5, {"synthesize": 0.4, "msm": 0.6, "verify": 0.1}, (0.12, 3.0, 4.4))]


@pytest.fixture
def good_run(tmp_path) -> BenchResult:
    """Two warm-ups, then three measured jobs (a low, b low, a high), all done; one OOM recovery during the warm-up."""
    plan = plan_jobs([A, B], 3, ["low", "high"], 1)
    assert [(j.circuit.name, j.priority, j.warmup) for j in plan[2:]] == [("a", "low", False), ("b", "low", False),
                                                                          ("a", "high", False)]
    jobs = _warmups(plan) + [
        # Engine-timed queue and key load.
        _job(plan[2], 10.0, 12.0, {"queue": 0.5, "key_load": 0.1, "check": 0.1, "synthesize": 0.3, "ntt": 0.2, "msm": 0.4,
                                   "verify": 0.05}, (10.01, 10.6, 11.9)),
        # No queue timing: the queue is the engine's started - submitted; ran twice (a restart replayed it).
        _job(plan[3], 10.0, 12.5, {"synthesize": 0.2, "msm": 0.3, "verify": 0.1}, (10.0, 11.0, 11.8), attempts=2),
        _job(plan[4], 11.0, 12.6, {"queue": 0.2, "check": 0.05, "synthesize": 0.25, "msm": 0.5, "blind": 0.1,
                                   "verify": 0.05}, (11.0, 11.2, 12.4)),
    ]
    return _result(tmp_path, jobs)


def test_report_figures_come_from_the_jobs_of_the_result(good_run):
    report = build_report(good_run)
    assert report["ok"] and report["aborted"] is None
    assert report["wall_s"] == pytest.approx(2.6) and report["proofs_per_s"] == pytest.approx(3 / 2.6)
    assert report["jobs"] == {"submitted": 3, "done": 3, "failed": 0, "cancelled": 0, "unfinished": 0, "warmup_done": 2,
                              "retried": 1, "errors": []}
    latency = report["latency"]
    assert latency["end_to_end"]["count"] == 3
    assert (latency["end_to_end"]["min_s"], latency["end_to_end"]["p50_s"], latency["end_to_end"]["max_s"]) == pytest.approx(
        (1.6, 2.0, 2.5))
    assert latency["queue"]["mean_s"] == pytest.approx((0.5 + 1.0 + 0.2) / 3)
    assert latency["key_load"]["count"] == 1 and latency["key_load"]["max_s"] == pytest.approx(0.1)  # the engine's timing wins
    assert latency["synthesis"]["max_s"] == pytest.approx(0.4) and latency["prove"]["min_s"] == pytest.approx(0.3)
    assert latency["prover_wait"]["max_s"] == pytest.approx(0.25) and latency["verify"]["count"] == 3
    assert {p: s["count"] for p, s in report["latency_by_priority"].items()} == {"low": 2, "high": 1}
    assert report["latency_by_circuit"]["a"]["max_s"] == pytest.approx(2.0)
    assert report["latency_by_circuit"]["b"]["max_s"] == pytest.approx(2.5)
    records = report["job_records"]
    assert [r["warmup"] for r in records] == [True, True, False, False, False]
    assert records[3]["phases_s"] == pytest.approx({"synthesis": 0.2, "prove": 0.3, "verify": 0.1, "queue": 1.0,
                                                    "prover_wait": 0.2, "end_to_end": 2.5})
    assert (records[3]["engine_started_t_s"], records[3]["attempts"]) == (pytest.approx(11.0), 2)
    a, b = report["workload"]["circuits"]
    assert (a["curve"], a["domain_size"], b["domain_size"]) == ("bn254", 1024, None)  # b's key was not in the status
    assert report["workload"]["warmup_jobs"] == 2 and report["workload"]["witness_sent_as"] == "path"
    assert report["daemon"]["mode"] == "started" and report["daemon"]["config"]["synth_workers"] == 2
    assert report["key_loads"]["count"] == 2 and report["daemon_metrics"]["proofs"] == {"done": 5}
    assert json.loads(json.dumps(report, default=str))["jobs"] == report["jobs"]  # what results.json holds


def test_report_memory_and_recoveries_come_from_the_samples(good_run):
    report = build_report(good_run)
    mem = report["memory"]
    assert mem["samples"] == 4 and mem["limit_source"] == "cgroup /sys/fs/cgroup/x"
    # "Charged" is the kernel's figure the bench read itself (320), not the engine's reading (300), which has its own name.
    assert (mem["peak_charged_bytes"], mem["peak_charged_t_s"], mem["charged_source"]) == (320 * MiB, 1.0, "kernel")
    assert mem["peak_engine_reading_bytes"] == 300 * MiB
    assert (mem["budget_at_peak_bytes"], mem["limit_at_peak_bytes"]) == (700 * MiB, 1000 * MiB)
    assert mem["peak_charged_of_budget"] == pytest.approx(32 / 70) and mem["peak_charged_of_limit"] == pytest.approx(0.32)
    assert (mem["peak_reserved_bytes"], mem["peak_untracked_bytes"]) == (200 * MiB, 100 * MiB)
    assert mem["peak_charged_of_reserved"] == pytest.approx(320 / 200)
    assert (mem["budget_total_bytes_first"], mem["budget_total_bytes_last"]) == (800 * MiB, 700 * MiB)
    assert mem["min_budget_effective_bytes"] == 650 * MiB and mem["peak_kernel_charged_bytes"] == 320 * MiB
    assert mem["engine_reported_peak_reading_bytes"] == 310 * MiB  # engines the bench started: their peaks are the run's
    oom = report["oom"]
    assert (oom["recoveries"], oom["oom_kills"], oom["restarts"], oom["max_oom_retries"]) == (1, 1, 1, 3)
    (event,) = oom["events"]
    assert event["time_to_recover_s"] == pytest.approx(0.5) and event["budget_after_bytes"] == 700 * MiB


def test_the_table_shows_the_report_s_figures(good_run, tmp_path):
    report = build_report(good_run)
    console = Console(width=200, file=io.StringIO())
    console.print(*render(report, tmp_path))
    text = console.file.getvalue()
    assert f"{3 / 2.6:.3f} proofs/s (3 proofs in 2.60 s)" in text and "3/3 done, 1 retried" in text
    assert "end to end, low" in text and "end to end, high" in text  # two priorities: a row for each
    assert f"{format_size(320 * MiB)} at 1.0 s = 45.7 % of the budget, 32.0 % of the limit (the kernel's figure" in text
    assert "peak charged ÷ peak reserved 1.60" in text
    assert "1 OOM recoveries (at most 3 allowed)" in text and "engine 100: OOM kill" in text
    assert str(tmp_path / "results.json") in text and "stopped early" not in text


def test_an_attached_daemon_s_charged_memory_is_its_engine_s_reading(tmp_path):
    """The bench cannot see an attached daemon's cgroup: then, and only then, "charged" is the engine's own reading
    of the kernel's charge."""
    samples = [dataclasses.replace(s, kernel_charged_bytes=None, engine_reading_source="cgroup") for s in SAMPLES]
    report = build_report(_result(tmp_path, [], samples=samples, daemon_attached=True, daemon_data_dir=None))
    mem = report["memory"]
    assert (mem["peak_charged_bytes"], mem["charged_source"], mem["peak_engine_reading_bytes"]) == (300 * MiB, "engine", 300 * MiB)
    assert "peak_kernel_charged_bytes" not in mem and mem["peak_charged_of_reserved"] == pytest.approx(1.5)
    console = Console(width=200, file=io.StringIO())
    console.print(*render(report, tmp_path))
    assert "(the kernel's figure as the attached engine reads it, from its cgroup, sampled every" in console.file.getvalue()


def test_an_attached_engine_reading_its_own_rss_reports_no_charged_figure(tmp_path):
    """An engine whose reconciler reads its RSS (a configured ceiling below the limit) has no kernel charge to
    report: its peak is named RSS, never "charged"."""
    samples = [dataclasses.replace(s, kernel_charged_bytes=None, engine_reading_source="rss") for s in SAMPLES]
    report = build_report(_result(tmp_path, [], samples=samples, daemon_attached=True, daemon_data_dir=None))
    mem = report["memory"]
    assert "peak_charged_bytes" not in mem and "charged_source" not in mem
    assert mem["peak_engine_rss_bytes"] == 300 * MiB and mem["peak_engine_rss_of_reserved"] == pytest.approx(1.5)
    console = Console(width=200, file=io.StringIO())
    console.print(*render(report, tmp_path))
    text = console.file.getvalue()
    assert "peak engine RSS" in text and "not a kernel charge" in text and "peak charged" not in text


def test_an_aborted_run_reports_what_finished_and_why_it_stopped(tmp_path):
    plan = plan_jobs([A, B], 3, ["low", "high"], 1)
    jobs = _warmups(plan) + [
        _job(plan[2], 10.0, 12.0, {"synthesize": 0.3, "msm": 0.4, "verify": 0.05}, (10.01, 10.6, 11.9)),
        _job(plan[3], 10.0, 10.3, {}, None, state="FAILED", error="the witness is for another circuit"),
        _job(plan[4], 11.0, None, {}, None, state="PENDING"),
    ]
    result = _result(tmp_path, jobs, aborted="--timeout 12 s reached", measure_ended_t=12.0, daemon_attached=True,
                     daemon_data_dir=None)
    report = build_report(result)
    assert not report["ok"] and report["aborted"] == "--timeout 12 s reached"
    assert report["jobs"] == {"submitted": 3, "done": 1, "failed": 1, "cancelled": 0, "unfinished": 1, "warmup_done": 2,
                              "retried": 0, "errors": ["the witness is for another circuit"]}
    assert report["proofs_per_s"] == pytest.approx(1 / 2.0)
    assert report["latency"]["key_load"]["count"] == 2  # no job timed its key load: each load the timeline saw
    records = report["job_records"]
    assert "phases_s" not in records[3] and records[4]["completed_t_s"] is None
    assert report["daemon"]["mode"] == "attached" and report["files"]["daemon_log"] is None
    assert "engine_reported_peak_reading_bytes" not in report["memory"]  # an attached daemon's engines ran before the run
    console = Console(width=200, file=io.StringIO())
    console.print(*render(report, tmp_path))
    text = console.file.getvalue()
    assert "1/3 done, 1 failed, 1 unfinished" in text and "stopped early: --timeout 12 s reached" in text
    assert "job error: the witness is for another circuit" in text


@pytest.mark.parametrize("aborted", [False, True])
def test_the_plot_is_written_from_the_result_alone(good_run, tmp_path, aborted):
    result = good_run
    if aborted:  # a job that never finished and one the daemon refused: drawn as far as they went
        plan = result.planned
        result = dataclasses.replace(result, aborted="interrupted", outcomes=[
            *result.outcomes[:3], JobOutcome(plan[3], "r3", 10.0, None, 10.3, "FAILED", "refused"),
            JobOutcome(plan[4], "r4", 11.0, "job4")])
    path = tmp_path / "timeline.png"
    plot_timeline(path, result)
    png = path.read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
