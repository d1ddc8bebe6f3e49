"""`cuzk bench` under a real memory cgroup: the daemon is OOM-killed mid-run and the bench rides over it.

The daemon runs inside a child memory cgroup and plans against a 2 GiB ceiling; then the
cgroup's limit drops to what one proof needs plus room for the restarted engine's margins
(as when a container is resized under a running daemon). The bench then runs a mix of
twelve keys (copies of one circuit's key: twelve distinct keys to the daemon), so the engine,
still planning against 2 GiB, keeps more keys resident than the limit holds and the kernel
OOM-kills it. The supervisor restarts it under a ceiling learned from the kill, the journal
replays the jobs in flight, and the bench must finish every job and report the recovery.
"""

from __future__ import annotations

import json
import shutil

import pytest

from cuzk.cli import main as cli_main
from cuzk.memory.units import MiB
from test_daemon import DaemonProcess, circuits_for
from test_daemon_recovery import make_cgroup  # noqa: F401 (a fixture)

N_KEYS = 12


@pytest.mark.cgroup
@pytest.mark.slow
def test_bench_completes_every_job_through_an_oom_recovery_and_reports_it(make_cgroup, tmp_path, capsys):  # noqa: F811
    sha = circuits_for(tmp_path / "circuits", ("large",))["large"]
    keys = {}
    for i in range(N_KEYS):
        keys[f"key{i}"] = tmp_path / f"key{i}.zkey"
        shutil.copyfile(sha.zkey, keys[f"key{i}"])
    cg = make_cgroup(2048 * MiB)
    daemon = DaemonProcess(keys, engine={"synth_workers": 4}, budget="2GiB", cgroup=cg,
                           supervisor={"min_budget": 64 * MiB, "backoff_initial_s": 0.1})
    try:
        with daemon.client() as client:
            client.prove("key0", sha.witness_bytes(), timeout=300)
            one_proof_peak = cg.read().peak_bytes  # the kernel's own high-water mark: idle daemon + one key + one proof
            hot = next(k for k in client.status()["keys"] if k["name"] == "key0")["hot_bytes"]
        # Room for one proof with the restarted engine's footprint and margins (measured: ~150 MiB), far from all keys resident.
        limit = one_proof_peak + 160 * MiB
        assert limit < one_proof_peak + (N_KEYS - 1) * hot
        cg.set_limit(limit)
        out = tmp_path / "out"
        args = ["bench", "--addr", f"unix:{daemon.socket}", "--jobs", str(2 * N_KEYS), "--concurrency", str(N_KEYS),
                "--warmup", "0", "--max-oom-retries", "3", "--out", str(out), "--json", "--no-progress", "--timeout", "600"]
        for path in keys.values():
            args += ["--zkey", str(path), "--wtns", str(sha.witness)]
        code = cli_main(args)
        report = json.loads(capsys.readouterr().out)
        assert code == 0, (report["aborted"], report["jobs"], daemon.log_text()[-3000:])
        assert report["jobs"]["done"] == report["jobs"]["submitted"] == 2 * N_KEYS
        oom = report["oom"]
        assert oom["recoveries"] >= 1 and oom["oom_kills"] >= 1 and cg.oom_kills() >= 1, daemon.log_text()[-3000:]
        event = next(e for e in oom["events"] if e["oom_kill"])
        assert event["ceiling_before_bytes"] == 2048 * MiB and event["limit_bytes"] == limit
        # The supervisor restarted the engine under the ceiling it learned, and the bench saw the new engine answer.
        assert event["ceiling_after_bytes"] < limit
        assert event["budget_after_bytes"] < event["budget_before_bytes"]
        assert 0 < event["time_to_recover_s"] < report["wall_s"]
        csv_rows = (out / "timeline.csv").read_text().splitlines()
        assert any(row.split(",")[2] == "0" for row in csv_rows[1:]), "no sample while the engine was down"
        assert (out / "timeline.png").stat().st_size > 10_000
    finally:
        daemon.stop()
        daemon.cleanup()
