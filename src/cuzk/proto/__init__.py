"""The daemon's gRPC protocol, shared by the client and the server: ``cuzk.proto``, its generated modules
(regenerate with scripts/gen_proto.sh), and the mapping of its enums to the engine's.

The wire enums and the engine's are matched by name (``PRIORITY_HIGH`` is ``Priority.HIGH``), so
neither list is typed a second time; tests/test_proto.py checks that every name has its match.
"""

from __future__ import annotations

from ..engine.jobs import JobError, JobState, Priority
from . import cuzk_pb2 as pb


def priority_to_pb(priority: Priority | int | str) -> int:
    """The wire value of a priority given as a ``Priority``, its value, or its name in any case."""
    return pb.Priority.Value("PRIORITY_" + Priority.parse(priority).name)


def priority_from_pb(value: int) -> Priority:
    """A request that sets no priority (proto3's zero) asks for NORMAL."""
    if value == pb.PRIORITY_UNSPECIFIED:
        return Priority.NORMAL
    return Priority[_wire_name(pb.Priority, value, "priority").removeprefix("PRIORITY_")]


def state_to_pb(state: JobState) -> int:
    return pb.JobState.Value("JOB_STATE_" + state.name)


def state_from_pb(value: int) -> JobState:
    return JobState[_wire_name(pb.JobState, value, "job state").removeprefix("JOB_STATE_")]


def _wire_name(enum, value: int, what: str) -> str:
    """The name of a wire enum value; proto3 lets a client send any integer, which is the request's error."""
    try:
        return enum.Name(value)
    except ValueError:
        raise JobError(f"unknown {what} {value} (known: {', '.join(map(str, enum.values()))})") from None
