"""The gRPC protocol package: the committed generated modules are what cuzk.proto generates, and its enums
map onto the engine's by name, every value both ways."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from cuzk.engine.jobs import JobState, Priority
from cuzk.proto import cuzk_pb2 as pb
from cuzk.proto import priority_from_pb, priority_to_pb, state_from_pb, state_to_pb

ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = ROOT / "src" / "cuzk" / "proto"
GENERATED = ("cuzk_pb2.py", "cuzk_pb2.pyi", "cuzk_pb2_grpc.py")


def test_committed_modules_are_what_scripts_gen_proto_generates(tmp_path):
    generator = ROOT / ".gen-proto-venv" / "bin" / "python"  # the pinned generator's venv, made by scripts/gen_proto.sh
    if not generator.exists():
        pytest.skip("run scripts/gen_proto.sh once: it makes .gen-proto-venv with the pinned grpcio-tools")
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHON": str(generator)})
    assert run.returncode == 0, run.stderr
    for name in GENERATED:
        fresh, committed = (tmp_path / "cuzk" / "proto" / name).read_text(), (PROTO_DIR / name).read_text()
        assert fresh == committed, f"{name} is stale: run scripts/gen_proto.sh"


def test_declared_runtime_floors_are_the_generators_versions():
    """pyproject's grpcio/protobuf floors are what the committed modules were generated for (scripts/gen_proto.sh)."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    grpc_gen = re.search(r"^GRPC_GENERATED_VERSION = '(.+)'$", (PROTO_DIR / "cuzk_pb2_grpc.py").read_text(), re.M).group(1)
    pb_gen = re.search(r"^# Protobuf Python Version: (.+)$", (PROTO_DIR / "cuzk_pb2.py").read_text(), re.M).group(1)
    assert f'"grpcio>={grpc_gen}"' in pyproject
    assert f'"protobuf>={pb_gen}"' in pyproject


def test_every_priority_maps_to_its_wire_value_and_back():
    for level in Priority:
        wire = priority_to_pb(level)
        assert pb.Priority.Name(wire) == f"PRIORITY_{level.name}"
        assert priority_from_pb(wire) is level
        assert priority_to_pb(level.name.lower()) == priority_to_pb(int(level)) == wire
    assert {priority_from_pb(v) for v in pb.Priority.values() if v != pb.PRIORITY_UNSPECIFIED} == set(Priority)
    assert priority_from_pb(pb.PRIORITY_UNSPECIFIED) is Priority.NORMAL  # a request that sets none


def test_every_job_state_maps_to_its_wire_value_and_back():
    for state in JobState:
        assert state_from_pb(state_to_pb(state)) is state
    assert {state_from_pb(v) for v in pb.JobState.values() if v != pb.JOB_STATE_UNSPECIFIED} == set(JobState)
