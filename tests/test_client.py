"""The Python client on its own: how it names keys and priorities, and how it fails when no daemon answers.

Everything that needs a daemon is in test_daemon.py; the retry across an engine restart is
exercised for real in test_daemon_recovery.py (kill -9).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuzk.client import Client, DaemonUnavailable, key_ref
from cuzk.proto import cuzk_pb2 as pb
from cuzk.proto import priority_to_pb


def test_key_ref_tells_paths_from_names(tmp_path):
    assert key_ref("sha256").WhichOneof("ref") == "name"
    assert key_ref("keys/sha.zkey").path.endswith("/keys/sha.zkey")
    assert key_ref("sha.zkey").path.startswith("/")
    existing = tmp_path / "k"
    existing.write_bytes(b"")
    assert key_ref(str(existing)).path == str(existing)
    assert key_ref(tmp_path / "any").path == str(tmp_path / "any")


@given(st.sampled_from(["low", "NORMAL", "High", " critical "]))
def test_priorities_by_name_in_any_case(name):
    assert pb.Priority.Name(priority_to_pb(name)) == "PRIORITY_" + name.strip().upper()


def test_unknown_priority_is_a_value_error():
    with pytest.raises(ValueError, match="unknown priority 'urgent'"):
        priority_to_pb("urgent")


def test_no_daemon_fails_fast_for_status_and_within_the_grace_for_retried_calls(tmp_path):
    import socket

    waits = []
    with Client(f"unix:{tmp_path}/nobody.sock", restart_grace=30, on_wait=waits.append) as client:
        for call in (client.status, lambda: client.await_proof("0" * 32)):  # no socket file: no daemon was ever there
            with pytest.raises(DaemonUnavailable, match="no cuzk daemon answers .*the socket file does not exist"):
                call()
        assert waits == []
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(str(tmp_path / "gone.sock"))  # a daemon's socket file, nothing accepting on it (restarting)
        with Client(f"unix:{tmp_path}/gone.sock", restart_grace=0.5, on_wait=waits.append) as client:
            t0 = time.monotonic()
            with pytest.raises(DaemonUnavailable, match="no cuzk daemon answers"):
                client.status()
            assert waits == []
            with pytest.raises(DaemonUnavailable):
                client.await_proof("0" * 32)  # retried while unreachable, then given up after the grace
            assert time.monotonic() - t0 >= 0.5 and len(waits) == 1 and waits[0].endswith("giving up after 0.5 s")
