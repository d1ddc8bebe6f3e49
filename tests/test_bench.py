"""`cuzk bench`: the workload plan, the recovery bookkeeping, the timeline files, and real runs.

The runs are real: `cuzk bench` starts `cuzk daemon` (supervisor + engine) on the bundled
example, or attaches to a daemon a test started on corpus circuits, and its figures are
checked against the daemon's own job records and Prometheus counters.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from cuzk.bench.daemon import _toml_value, fresh_data_dir
from cuzk.bench.disk import DataDirDisk
from cuzk.bench.report import PHASES, disk_summary, latency_stats, parse_metrics, render
from cuzk.bench.timeline import RecoveryTracker, Sample, write_csv
from cuzk.bench.workload import PRIORITY_NAMES, BenchCircuit, WorkloadError, circuits_from_args, example_dir, plan_jobs
from cuzk.cli import main as cli_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Engine stamps (time.time in the engine process) against the bench's monotonic clock: allow this much skew.
CLOCK_SLACK_S = 0.05


# -- workload -------------------------------------------------------------------------------------

def test_bundled_example_is_small_and_complete():
    d = example_dir()
    files = {p.name: p.stat().st_size for p in d.iterdir()}
    assert {"circuit.r1cs", "circuit.zkey", "witness.wtns", "verification_key.json"} <= set(files)
    assert sum(files.values()) < 1 << 20
    (only,) = circuits_from_args(None, None, None)
    assert only.name == "synthetic_bn254" and only.zkey == (d / "circuit.zkey").resolve()


def test_bad_workloads_name_what_is_wrong(tmp_path):
    with pytest.raises(WorkloadError, match="one --wtns per --zkey"):
        circuits_from_args(["a.zkey"], [], None)
    with pytest.raises(WorkloadError, match="no such file: .*missing.zkey"):
        circuits_from_args([str(tmp_path / "missing.zkey")], [str(tmp_path / "w.wtns")], None)
    c = BenchCircuit("x", tmp_path / "x.zkey", tmp_path / "x.wtns")
    with pytest.raises(WorkloadError, match="--jobs"):
        plan_jobs([c], 0, ["normal"], 0)
    with pytest.raises(WorkloadError, match="unknown priority urgent"):
        plan_jobs([c], 1, ["urgent"], 0)


def test_same_named_keys_get_distinct_labels():
    d = str(example_dir())
    a, b = circuits_from_args(None, None, [d, d])
    assert (a.name, b.name) == ("synthetic_bn254", "synthetic_bn254_2")


@given(n_circuits=st.integers(1, 4), jobs=st.integers(1, 40), warmup=st.integers(0, 2),
       priorities=st.lists(st.sampled_from(PRIORITY_NAMES), min_size=1, max_size=4, unique=True))
def test_plan_cycles_circuits_and_priorities(n_circuits, jobs, warmup, priorities):
    circuits = [BenchCircuit(f"c{i}", Path(f"/k{i}"), Path(f"/w{i}")) for i in range(n_circuits)]
    plan = plan_jobs(circuits, jobs, priorities, warmup)
    assert [j.index for j in plan] == list(range(len(plan)))
    assert [j.warmup for j in plan] == [True] * (warmup * n_circuits) + [False] * jobs
    measured = [j for j in plan if not j.warmup]
    per_circuit = [sum(j.circuit is c for j in measured) for c in circuits]
    assert max(per_circuit) - min(per_circuit) <= 1
    # Each circuit goes through the priorities in turn.
    for c in circuits:
        mine = [j.priority for j in measured if j.circuit is c]
        assert mine == [priorities[i % len(priorities)] for i in range(len(mine))]


# -- figures --------------------------------------------------------------------------------------

@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=200))
def test_latency_percentiles_are_ordered_and_bounded(values):
    s = latency_stats(values)
    assert s["count"] == len(values)
    assert s["min_s"] <= s["p50_s"] <= s["p95_s"] <= s["p99_s"] <= s["max_s"]
    assert s["max_s"] == max(values) and s["min_s"] == min(values)


def test_metrics_text_is_read_per_status_and_phase():
    text = ('# TYPE cuzk_proofs counter\ncuzk_proofs_total{circuit="a",status="done"} 3.0\n'
            'cuzk_proofs_total{circuit="b",status="done"} 2.0\ncuzk_proofs_total{circuit="b",status="failed"} 1.0\n'
            '# TYPE cuzk_phase_seconds histogram\ncuzk_phase_seconds_bucket{circuit="a",le="+Inf",phase="msm"} 3.0\n'
            'cuzk_phase_seconds_count{circuit="a",phase="msm"} 3.0\ncuzk_phase_seconds_sum{circuit="a",phase="msm"} 1.0\n'
            'cuzk_phase_seconds_bucket{circuit="b",le="+Inf",phase="msm"} 2.0\n'
            'cuzk_phase_seconds_count{circuit="b",phase="msm"} 2.0\ncuzk_phase_seconds_sum{circuit="b",phase="msm"} 0.5\n'
            '# TYPE cuzk_oom_restarts counter\ncuzk_oom_restarts_total 2.0\n'
            '# TYPE cuzk_worker_proofs counter\ncuzk_worker_proofs_total{device="0",worker="prove-0"} 4.0\n'
            'cuzk_worker_proofs_total{device="1",worker="prove-1"} 2.0\n')
    m = parse_metrics(text)
    assert m["proofs"] == {"done": 5, "failed": 1} and m["proofs_by_circuit"]["b"] == {"done": 2, "failed": 1}
    assert m["proofs_by_worker"] == {"prove-0 (0)": 4, "prove-1 (1)": 2}
    assert m["phase_count"] == {"msm": 5} and m["phase_sum_s"] == {"msm": 1.5} and m["oom_restarts"] == 2


def _status(pid: int, total: int) -> dict:
    return {"server": {"pid": pid}, "budget": {"total_bytes": total}}


def test_recovery_tracker_pairs_each_death_with_the_engine_that_answered_next():
    t0 = 1000.0
    tracker = RecoveryTracker(since=t0)
    old_death = {"pid": 7, "time": t0 - 50, "oom_kill": True, "cause": "OOM kill", "planned_ceiling": 1, "limit": 1}
    supervisor = {"oom_kills": 4, "deaths": [old_death], "current_budget": None}
    tracker.update(t0 + 1, _status(10, 900), supervisor)
    assert tracker.snapshot() == [] and tracker.oom_kills == 0  # a death from before the run is not this run's
    death = {"pid": 10, "time": t0 + 5, "oom_kill": True, "cause": "OOM kill (the kernel's OOM counter moved)",
             "planned_ceiling": 1000, "limit": 800}
    supervisor = {"oom_kills": 5, "deaths": [old_death, death], "current_budget": 760}
    tracker.update(t0 + 6, None, supervisor)  # engine down
    (r,) = tracker.snapshot()
    assert r.recovered_at is None and r.budget_before_bytes == 900 and tracker.oom_recoveries == 1
    tracker.update(t0 + 8.5, _status(11, 700), supervisor)
    (r,) = tracker.snapshot()
    assert (r.new_engine_pid, r.budget_after_bytes, r.ceiling_before_bytes, r.ceiling_after_bytes) == (11, 700, 1000, 760)
    assert r.time_to_recover_s == pytest.approx(3.5) and tracker.oom_kills == 1
    tracker.update(t0 + 9, _status(11, 700), supervisor)  # the same record seen again is not a second death
    assert len(tracker.snapshot()) == 1


def test_the_data_disk_rate_is_taken_over_the_measured_window_and_a_tmpfs_has_none(tmp_path):
    samples = [Sample(t_s=t, unix_time=t, engine_pid=1, limit_bytes=None, budget_total_bytes=None, budget_effective_bytes=None,
                      reserved_bytes=None, reserved_by_category={}, untracked_bytes=None, charged_bytes=None,
                      kernel_charged_bytes=None, jobs_done=0, jobs_in_flight=0, oom_kills=0, disk_written_bytes=b)
               for t, b in ((0.0, 0), (1.0, 500), (2.0, 1500), (3.0, 1600), (4.0, 9000))]
    disk = DataDirDisk("vda", tmp_path / "stat")
    result = SimpleNamespace(disk=disk, samples=samples, measure_started_t=1.0, measure_ended_t=3.0)
    assert disk_summary(result) == {"device": "vda", "off_reason": None, "written_bytes_per_s": 550.0,
                                    "peak_written_bytes_per_s": 1000.0}  # 1100 bytes in 2 s; 1000 in the fastest second
    short = SimpleNamespace(disk=disk, samples=samples, measure_started_t=2.2, measure_ended_t=2.6)  # no sample inside
    assert disk_summary(short)["written_bytes_per_s"] == 100.0  # the samples around it: 100 bytes from 2 s to 3 s
    if Path("/dev/shm").is_dir():
        assert "without a block device" in DataDirDisk.of("/dev/shm")
    assert disk_summary(SimpleNamespace(disk="the daemon runs on another machine"))["off_reason"] == "the daemon runs on another machine"


def test_csv_has_a_row_per_sample_and_blank_cells_while_the_engine_is_down(tmp_path):
    up = dict(limit_bytes=8, budget_total_bytes=6, budget_effective_bytes=6, reserved_bytes=3, untracked_bytes=1,
              charged_bytes=4, kernel_charged_bytes=5, jobs_done=0, jobs_in_flight=1, oom_kills=0)
    samples = [Sample(t_s=0.1, unix_time=1.0, engine_pid=3, reserved_by_category={"keys": 2, "working": 1}, **up),
               Sample(t_s=0.3, unix_time=1.2, engine_pid=None, reserved_by_category={},
                      **{**up, "budget_total_bytes": None, "reserved_bytes": None, "charged_bytes": None}),
               Sample(t_s=0.5, unix_time=1.4, engine_pid=4, reserved_by_category={"pinned": 7}, **up)]
    path = tmp_path / "t.csv"
    write_csv(path, samples)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 3
    assert [r["reserved_keys_bytes"] for r in rows] == ["2", "", "0"]
    assert [r["engine_up"] for r in rows] == ["1", "0", "1"] and rows[1]["charged_bytes"] == ""
    assert rows[2]["reserved_pinned_bytes"] == "7"


# -- real runs ------------------------------------------------------------------------------------

def _check_run(report: dict, out: Path, *, jobs: int) -> None:
    """What every successful run must satisfy, whatever the daemon."""
    assert report["ok"], (report["aborted"], report["jobs"])
    assert report["jobs"]["submitted"] == report["jobs"]["done"] == jobs
    wall = report["wall_s"]
    assert wall > 0 and report["proofs_per_s"] == pytest.approx(jobs / wall)
    for phase in PHASES:  # the engine times queue and key load per job: every phase has every job
        assert report["latency"][phase]["count"] == jobs, phase
        assert report["latency"][phase]["max_s"] <= wall + CLOCK_SLACK_S, phase
    # Every measured job ran inside the measured wall time, and its phases inside its own latency.
    for job in (j for j in report["job_records"] if not j["warmup"]):
        phases = job["phases_s"]
        assert phases["end_to_end"] <= wall + CLOCK_SLACK_S
        inside = sum(v for k, v in phases.items() if k != "end_to_end")
        assert inside <= phases["end_to_end"] + CLOCK_SLACK_S, job
    assert report["latency"]["end_to_end"]["max_s"] <= wall + CLOCK_SLACK_S
    # The timeline: a row per sample, time increasing, and a picture.
    rows = list(csv.DictReader((out / "timeline.csv").open()))
    assert len(rows) == report["memory"]["samples"] >= 2
    times = [float(r["t_s"]) for r in rows]
    assert all(a < b for a, b in zip(times, times[1:]))
    png = (out / "timeline.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    mem = report["memory"]
    assert 0 < mem["peak_charged_bytes"] and mem["peak_reserved_bytes"] > 0
    assert mem["peak_charged_of_budget"] == pytest.approx(mem["peak_charged_bytes"] / mem["budget_at_peak_bytes"])
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(report, default=str))


def test_bench_on_the_bundled_example_starts_a_daemon_and_reports(tmp_path, capsys):
    out = tmp_path / "out"
    code = cli_main(["bench", "--jobs", "4", "--concurrency", "2", "--priority", "low,high", "--out", str(out),
                     "--engine", "backend=cpu", "--sample-interval", "0.1", "--json", "--no-progress", "--timeout", "300"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    _check_run(report, out, jobs=4)
    assert report["daemon"]["mode"] == "started" and report["jobs"]["warmup_done"] == 1
    assert report["workload"]["witness_sent_as"] == "path"  # its unix socket: the daemon read each witness file
    assert set(report["latency_by_priority"]) == {"low", "high"}
    # A fresh daemon ran exactly our jobs: its counters say the same, and no OOM happened.
    metrics = report["daemon_metrics"]
    assert metrics["proofs"] == {"done": 5}
    assert metrics["oom_restarts"] == 0
    # Its phase histograms carry every phase the bench reports, one observation per proof (the warm-up's too).
    for phase in ("queue", "key_load", "check", "synthesize", "ntt", "msm", "blind", "verify"):
        assert metrics["phase_count"][phase] == 5, phase
    # Latencies within the measured wall time: the daemon's sums of the measured jobs' phases cannot exceed
    # the bench's sums of them plus the warm-up's share, nor the run.
    for phase, parts in (("queue", ("intake", "queue")), ("key_load", ("key_load",)), ("synthesis", ("check", "synthesize")),
                         ("verify", ("verify",))):
        measured = sum(j["phases_s"][phase] for j in report["job_records"] if not j["warmup"])
        warm = sum(j["phases_s"][phase] for j in report["job_records"] if j["warmup"])
        assert sum(metrics["phase_sum_s"][p] for p in parts) == pytest.approx(measured + warm, rel=1e-3, abs=1e-3), phase
        assert report["latency"][phase]["p99_s"] <= report["wall_s"] + CLOCK_SLACK_S
    assert report["oom"] == {**report["oom"], "recoveries": 0, "restarts": 0, "events": []}
    assert report["key_loads"]["count"] >= 1  # the example's key was loaded for the warm-up
    assert (out / "daemon" / "journal.sqlite3").exists()  # the data directory and its journal, made on first use

    # The table a person reads carries the same figures.
    console = Console(width=160, file=io.StringIO())
    console.print(*render(report, out))
    text = console.file.getvalue()
    assert f"{report['proofs_per_s']:.3f} proofs/s" in text and "end to end" in text and "0 OOM recoveries" in text
    # A CPU daemon: no GPU figures, and the table says why, once.
    assert (report["gpu"]["sampling"], report["gpu"]["devices"]) == ("off", [])
    assert text.count("GPU sampling  off (the daemon proves on the CPU)") == 1
    assert metrics["proofs_by_worker"] == {"prove-0 (cpu)": 5} and "provers" not in text  # one prover: no split to show
    # The data directory's disk, read on every sample where the kernel has counters for it.
    disk, written = DataDirDisk.of(out / "daemon"), [r["disk_written_bytes"] for r in csv.DictReader((out / "timeline.csv").open())]
    if isinstance(disk, DataDirDisk):
        assert report["disk"]["device"] == disk.name and f"data disk     {disk.name}" in text
        assert all(written) and [int(b) for b in written] == sorted(int(b) for b in written)  # a counter: never falls
    else:
        assert report["disk"]["off_reason"] == disk and not any(written)
    report["daemon_metrics"]["proofs_by_worker"] = {"prove-0 (0)": 3, "prove-1 (1)": 2}  # as two GPUs report it
    console = Console(width=160, file=io.StringIO())
    console.print(*render(report, out))
    assert "prove-0 (0): 3, prove-1 (1): 2" in console.file.getvalue()


def test_a_bench_data_directory_is_emptied_for_the_next_run_and_no_other(tmp_path):
    mine = fresh_data_dir(tmp_path / "daemon")
    (mine / "journal.sqlite3").write_text("old run")
    assert fresh_data_dir(mine) == mine and not (mine / "journal.sqlite3").exists()
    foreign = tmp_path / "someone-elses"
    foreign.mkdir()
    (foreign / "precious").write_text("keep")
    with pytest.raises(ValueError, match="not a bench data directory"):
        fresh_data_dir(foreign)
    assert (foreign / "precious").read_text() == "keep"


@pytest.fixture
def corpus_daemon(tmp_path):
    from test_daemon import DaemonProcess, corpus_circuit

    circuits = [corpus_circuit(n) for n in ("toy_multiplier", "poseidon_chain_16")]
    if any(c is None for c in circuits):
        pytest.skip("corpus circuits not available (../shared/corpus)")
    daemon = DaemonProcess({c.name: c.zkey for c in circuits})
    try:
        yield daemon, circuits
    finally:
        daemon.stop()
        daemon.cleanup()


def test_bench_attached_to_a_daemon_agrees_with_its_records(corpus_daemon, tmp_path, capsys):
    daemon, circuits = corpus_daemon
    out = tmp_path / "out"
    args = ["bench", "--addr", f"unix:{daemon.socket}", "--jobs", "6", "--concurrency", "3", "--out", str(out),
            "--sample-interval", "0.1", "--json", "--no-progress", "--timeout", "300"]
    for c in circuits:
        args += ["--zkey", str(c.zkey), "--wtns", str(c.witness)]
    assert cli_main(args) == 0
    report = json.loads(capsys.readouterr().out)
    _check_run(report, out, jobs=6)
    assert report["daemon"]["mode"] == "attached"
    with daemon.client() as client:
        jobs = {j.job_id: j for j in client.list_jobs()}
        metrics = parse_metrics(client.metrics())
    records = report["job_records"]
    # The daemon ran exactly the bench's jobs (by the registered names, not a second copy of each key), once each.
    assert sorted(r["job_id"] for r in records) == sorted(jobs)
    assert {jobs[r["job_id"]].circuit for r in records} == {c.name for c in circuits}
    assert all(jobs[r["job_id"]].state == "DONE" and jobs[r["job_id"]].attempts == 1 for r in records)
    assert metrics["proofs"] == {"done": report["jobs"]["done"] + report["jobs"]["warmup_done"]}
    for phase in ("queue", "key_load", "synthesize", "msm", "verify"):  # one histogram observation per proof, every phase
        assert metrics["phase_count"][phase] == metrics["proofs"]["done"], phase
    assert all(report["latency"][p]["p99_s"] <= report["wall_s"] + CLOCK_SLACK_S for p in PHASES)
    for c in circuits:
        assert metrics["proofs_by_circuit"][c.name]["done"] == sum(r["circuit"] == c.name for r in records)
    assert report["latency_by_circuit"].keys() == {c.name for c in circuits}
    assert all(jobs[r["job_id"]].request_id.startswith("bench-") for r in records)


def test_without_matplotlib_the_bench_says_so_and_writes_all_but_the_png(corpus_daemon, tmp_path, capsys, monkeypatch):
    import sys

    daemon, circuits = corpus_daemon
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # how Python spells "not installed": the import raises ImportError
    out = tmp_path / "out"
    assert cli_main(["bench", "--addr", f"unix:{daemon.socket}", "--jobs", "2", "--warmup", "0", "--out", str(out),
                     "--zkey", str(circuits[0].zkey), "--wtns", str(circuits[0].witness), "--sample-interval", "0.1",
                     "--json", "--no-progress", "--timeout", "300"]) == 0
    captured = capsys.readouterr()
    assert "matplotlib is not installed" in captured.err and "pip install 'cuzk[plot]'" in captured.err
    report = json.loads(captured.out)
    assert report["ok"] and report["files"]["png"] is None
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["results.json", "timeline.csv"]


def test_bench_refuses_options_that_do_not_apply_when_attached(tmp_path, capsys):
    assert cli_main(["bench", "--addr", "unix:/nonexistent.sock", "--budget", "1GiB", "--out", str(tmp_path)]) == 1
    assert "do not apply with --addr" in capsys.readouterr().err


def test_bench_reports_an_absent_daemon_clearly(tmp_path, capsys):
    assert cli_main(["bench", "--addr", f"unix:{tmp_path}/none.sock", "--out", str(tmp_path), "--no-progress"]) == 1
    assert "no cuzk daemon answers" in capsys.readouterr().err


@pytest.mark.cgroup
def test_memory_limit_runs_the_daemon_in_a_cgroup_of_its_own(tmp_path, capsys, memory_cgroups):
    from cuzk.memory.units import GiB

    memory_cgroups(GiB, "cuzk-test-probe-")  # skips where the bench could not make its own
    out = tmp_path / "out"
    assert cli_main(["bench", "--memory-limit", "3GiB", "--jobs", "2", "--out", str(out), "--engine", "backend=cpu",
                     "--sample-interval", "0.1", "--json", "--no-progress", "--no-plot", "--timeout", "300"]) == 0
    report = json.loads(capsys.readouterr().out)
    mem = report["memory"]
    assert "cgroup" in mem["limit_source"] and mem["limit_at_peak_bytes"] == 3 * GiB
    # The engine saw the same limit: its budget is what is left of it after the margin.
    assert mem["budget_at_peak_bytes"] < 3 * GiB and mem["peak_kernel_charged_bytes"] < 3 * GiB
    assert report["jobs"]["done"] == 2


@pytest.mark.parametrize("value", [2, True, "cpu", 1.5, [0, 1], []])
def test_engine_settings_are_written_as_toml_the_daemon_reads_back(value):
    import tomllib

    assert tomllib.loads(f"x = {_toml_value('x', value)}")["x"] == value


@pytest.mark.parametrize("value", [{"a": 1}, [[0]], None, [None]])
def test_engine_settings_toml_cannot_hold_are_refused(value):
    with pytest.raises(ValueError, match="--engine devices"):
        _toml_value("devices", value)
