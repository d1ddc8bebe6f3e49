"""`cuzk bench` under a real memory cgroup: the daemon is OOM-killed mid-run and the bench rides over it.

The daemon runs inside a child memory cgroup, planning against a 2 GiB ceiling; then the
cgroup's limit drops below what that ceiling lets it reserve (as when a container is
resized), so the kernel OOM-kills the engine once the jobs pile up. The bench must finish
every job through the supervisor's restart with its learned budget, and report the recovery.
"""

from __future__ import annotations

import json

import pytest

from cuzk.cli import main as cli_main
from cuzk.memory.units import MiB
from test_daemon import DaemonProcess, circuits_for
from test_daemon_recovery import engine_footprint, make_cgroup  # noqa: F401 (a fixture)


@pytest.mark.cgroup
@pytest.mark.slow
def test_bench_completes_every_job_through_an_oom_recovery_and_reports_it(make_cgroup, tmp_path, capsys):  # noqa: F811
    sha = circuits_for(tmp_path / "circuits", ("large",))["large"]
    cg = make_cgroup(2048 * MiB)
    daemon = DaemonProcess({sha.name: sha.zkey}, engine={"synth_workers": 4}, budget="2GiB", cgroup=cg,
                           supervisor={"min_budget": 64 * MiB, "backoff_initial_s": 0.1})
    try:
        with daemon.client() as client:
            client.preload(sha.name)
            idle, per_job = engine_footprint(client, sha)
        limit = idle + 2 * per_job + 96 * MiB  # room for about two proofs; eight are submitted at once
        cg.set_limit(limit)
        out = tmp_path / "out"
        code = cli_main(["bench", "--addr", f"unix:{daemon.socket}", "--zkey", str(sha.zkey), "--wtns", str(sha.witness),
                         "--jobs", "8", "--concurrency", "8", "--warmup", "0", "--max-oom-retries", "3", "--out", str(out),
                         "--json", "--no-progress", "--timeout", "900"])
        report = json.loads(capsys.readouterr().out)
        assert code == 0, report["aborted"]
        assert report["jobs"]["done"] == report["jobs"]["submitted"] == 8
        oom = report["oom"]
        assert oom["recoveries"] >= 1 and oom["oom_kills"] >= 1 and cg.oom_kills() >= 1
        event = next(e for e in oom["events"] if e["oom_kill"])
        assert event["ceiling_before_bytes"] == 2048 * MiB and event["limit_bytes"] == limit
        # The supervisor restarted the engine under the limit it learned, and the bench saw it answer again.
        assert event["ceiling_after_bytes"] < limit
        assert event["budget_after_bytes"] < event["budget_before_bytes"]
        assert 0 < event["time_to_recover_s"] < report["wall_s"]
        # Some job was running when the engine died: the journal replayed it and it finished.
        assert report["jobs"]["retried"] >= 1
        csv_rows = (out / "timeline.csv").read_text().splitlines()
        assert any(row.split(",")[2] == "0" for row in csv_rows[1:]), "no sample while the engine was down"
    finally:
        daemon.stop()
        daemon.cleanup()
