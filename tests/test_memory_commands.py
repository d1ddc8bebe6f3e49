"""`cuzk memcheck` and `cuzk memprobe` through the real CLI entry point, on this machine's own limits."""

import json

import pytest

from cuzk.cli import main
from cuzk.memory.pinned import cuda_available
from cuzk.memory.units import MiB


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    """memprobe saves its result under $CUZK_STATE_DIR: keep it out of the home directory."""
    monkeypatch.setenv("CUZK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_memcheck_json_tells_the_limits_and_how_the_budget_follows(capsys):
    code, out, _ = run_cli(capsys, "memcheck", "--json")
    assert code == 0
    report = json.loads(out)
    limits, plan, now = report["limits"], report["plan"], report["now"]
    assert limits["ceiling_bytes"] == plan["ceiling_bytes"] <= limits["meminfo"]["total_bytes"]
    assert plan["total_bytes"] == plan["ceiling_bytes"] - plan["margin_bytes"]
    assert plan["margin_bytes"] == plan["headroom_bytes"] + plan["untracked_allowance_bytes"]
    assert 0 <= now["effective_total_bytes"] <= plan["total_bytes"]
    assert now["source"] in ("cgroup", "meminfo") and report["probe_files"] == []


def test_memcheck_human_output_and_configured_values(capsys):
    code, out, _ = run_cli(capsys, "memcheck", "--budget", "1GiB", "--margin", "128M")
    assert code == 0
    assert "ceiling        1.00 GiB  (configured)" in out
    assert "margin         128.00 MiB = headroom 128.00 MiB + untracked allowance 0 B  (configured)" in out
    assert "budget total   896.00 MiB" in out
    with pytest.raises(SystemExit):
        main(["memcheck", "--budget", "lots"])
    assert "not a byte size: 'lots'" in capsys.readouterr().err


def test_memprobe_bounded_run_saves_a_result_memcheck_then_uses(capsys, state_dir):
    code, out, err = run_cli(capsys, "memprobe", "--chunk-mib", "16", "--margin-mib", "0", "--max-mib", "48")
    assert code == 0, err
    result = json.loads(out)
    assert result["allocated_bytes"] == 48 * MiB and result["probe_chunks"] == 3
    assert result["stop_reason"] == "--max-mib reached" and not result["oom_killed"]
    for key in ("cgroup_limit_bytes", "usage_before_bytes", "allocated_gib", "usage_peak_bytes", "usage_after_bytes",
                "overhead_bytes", "overhead_gib", "cgroup_version", "cgroup_path"):
        assert key in result
    saved = state_dir / "memprobe.json"
    assert json.loads(saved.read_text())["allocated_bytes"] == 48 * MiB and "saved to" in err
    code, out, _ = run_cli(capsys, "memcheck", "--json")
    report = json.loads(out)
    assert report["probe_files"] == [str(saved)]
    # Without a cgroup the probe reads machine-wide usage, which other processes move: the plan either uses the
    # result (naming it as the margin's source) or says why it set it aside (an implausible overhead).
    plan = report["plan"]
    used = plan["margin_source"].startswith("memprobe (anonymous)")
    set_aside = [n for n in plan["notes"] if n.startswith("memprobe result (anonymous) ignored: its overhead")]
    assert used != bool(set_aside), plan


@pytest.mark.parametrize("argv, message", [
    (["--chunk-mib", "0"], "--chunk-mib must be positive"),
    (["--margin-mib", "-1"], "--margin-mib must be >= 0"),
    (["--limit-mib", "0"], "--limit-mib must be positive"),
])
def test_memprobe_rejects_bad_arguments(capsys, argv, message):
    code, _, err = run_cli(capsys, "memprobe", "--no-save", *argv)
    assert code == 1 and message in err


@pytest.mark.skipif(cuda_available(), reason="CUDA is here: the pinned probe would run")
def test_pinned_memprobe_without_cuda_says_what_is_missing(capsys):
    code, out, err = run_cli(capsys, "memprobe", "--pinned", "--no-save", "--max-mib", "16")
    assert code == 1 and out == "" and "--pinned needs CuPy and a CUDA device" in err


def test_memcheck_into_a_closed_pipe_stops_quietly(tmp_path):
    """`cuzk memcheck | head -1`: the reader is gone before the output is written; no traceback, SIGPIPE's status."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: the first write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "cuzk.cli", "memcheck"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120, env={**os.environ, "CUZK_STATE_DIR": str(tmp_path)})
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr == "", (proc.returncode, proc.stderr)


def test_keys_preload_or_evict_without_a_key_is_a_usage_error(capsys):
    for action in ("preload", "evict"):
        code, out, err = run_cli(capsys, "keys", action)
        assert code == 2 and err == f"error: cuzk keys {action} needs a key: a registered name or a .zkey path\n"
