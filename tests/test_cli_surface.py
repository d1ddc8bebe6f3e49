"""The command line's surface: --version, the JIT cache's place, and the rough edges new users met (issue 17)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from cuzk.cli import main as cli_main
from cuzk.jit_cache import CACHE_ENV, build_key, cache_dir, use_cache_dir


def test_version_comes_from_the_installed_package(capsys):
    with pytest.raises(SystemExit) as done:
        cli_main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"cuzk {version('cuzk')}\n"


def test_the_jit_cache_is_keyed_by_the_build_and_a_users_choice_wins(tmp_path):
    key = build_key()
    assert key.startswith(version("cuzk") + "-") and cache_dir(tmp_path) == tmp_path / "numba-cache" / key
    # A fresh interpreter: the data directory's folder is used unless NUMBA_CACHE_DIR says otherwise.
    code = ("import sys, os; from cuzk.jit_cache import use_cache_dir; print(use_cache_dir(sys.argv[1])); "
            "import numba; print(numba.config.CACHE_DIR)")
    env = {k: v for k, v in os.environ.items() if k != CACHE_ENV}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(cache_dir(tmp_path))] * 2
    env[CACHE_ENV] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(tmp_path / "mine")] * 2
    # Once numba is imported it has read its configuration: nothing changes, and the caller hears so.
    import numba  # noqa: F401

    saved = os.environ.pop(CACHE_ENV)
    try:
        assert use_cache_dir(tmp_path) is None and CACHE_ENV not in os.environ
    finally:
        os.environ[CACHE_ENV] = saved


@pytest.mark.slow
def test_a_daemon_keeps_its_kernels_under_its_data_directory(monkeypatch):
    """Without NUMBA_CACHE_DIR, a daemon compiles cold into <data_dir>/numba-cache/<build> (minutes: slow)."""
    import json
    import urllib.request

    from conftest import wait_for
    from test_daemon import DaemonProcess, _healthz

    monkeypatch.delenv(CACHE_ENV)
    daemon = DaemonProcess({})
    try:
        def status():
            return json.loads(urllib.request.urlopen(f"http://{daemon.http}/status", timeout=10).read())["server"]

        wait_for(lambda: status()["state"] == "serving", 1800, "the cold JIT warm-up")
        assert _healthz(daemon) == (200, "serving") and status()["warmup"]["error"] is None
        assert any((daemon.data_dir / "numba-cache" / build_key()).rglob("*.nbi"))
    finally:
        daemon.stop()
        daemon.cleanup()
