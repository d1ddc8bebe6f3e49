"""`cuzk daemon` with ``device_processes = true``: a proof still arrives when the device worker process holding its job
is killed; status shows the worker's pid and restarts, and `cuzk status` renders them."""

from __future__ import annotations

import os
import signal

import pytest

from conftest import wait_for
from cuzk.server.commands import render_status
from test_daemon import DaemonProcess, check_proof, circuits_for


@pytest.fixture(scope="module")
def circuits(tmp_path_factory):
    return circuits_for(tmp_path_factory.mktemp("circuits"), ("small", "large"))


@pytest.fixture(scope="module")
def daemon(circuits):
    yield from DaemonProcess({c.name: c.zkey for c in circuits.values()}, engine={"device_processes": True}).serving()


def _worker(client) -> dict:
    (worker,) = client.status()["device_processes"]
    return worker


def _holding(client, job_id: str) -> dict | None:
    worker = _worker(client)
    return worker if job_id in worker["jobs"] else None


def test_the_proof_arrives_though_its_worker_process_is_killed(daemon, circuits, tmp_path):
    large = circuits["large"]
    with daemon.client() as client:
        before = _worker(client)
        assert before["alive"] and before["pid"] != daemon.engine_pid()
        job_id, _ = client.submit(large.name, large.witness_bytes())
        holder = wait_for(lambda: _holding(client, job_id), 300, "the job in the worker")
        os.kill(holder["pid"], signal.SIGKILL)
        result = client.await_proof(job_id, timeout=600)
        check_proof(result, large, tmp_path)
        after = _worker(client)
        assert after["restarts"] == before["restarts"] + 1 and after["pid"] != holder["pid"]
        assert after["last_exit"] == "killed by SIGKILL"
        assert daemon.engine_pid() is not None and "died (killed by SIGKILL)" in daemon.log_text()
        # A later job proves on the restarted worker; `cuzk status` shows it.
        small = circuits["small"]
        check_proof(client.await_proof(client.submit(small.name, small.witness_bytes())[0], timeout=300), small, tmp_path)
        rendered = render_status(client.status(), [])
        assert any(getattr(t, "title", None) == "device worker processes" for t in rendered)
