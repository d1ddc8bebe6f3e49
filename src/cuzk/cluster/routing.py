"""Where a job goes: one pure decision over what each host said about itself.

A host answers for each circuit how many more of its jobs it could start now (``Engine.room``:
free pipeline slots and free budget, net of the jobs it already holds) or why it never can
(admission's fit check). The router prefers a host that already holds the circuit's key and
has room (no load, and its cache stays useful), else the least loaded host with room. When
hosts could run the job but none has room now, the job waits at the front door: no host is
sent more than it said it can start. When no host can ever run it, the answer carries every
host's reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class HostView:
    """One host's answer, as of its last report."""

    name: str
    held: int  # unfinished jobs it holds
    slots: int  # jobs its pipeline runs at once (synthesis plus proving)
    resident: frozenset[str] = frozenset()  # keys loaded in its memory (warm or hot)
    room: Mapping[str, int] = field(default_factory=dict)  # circuit → jobs it could start now
    never: Mapping[str, str] = field(default_factory=dict)  # circuit → why it can never run one

    @property
    def load(self) -> float:
        return self.held / max(1, self.slots)

    def taken(self) -> HostView:
        """This view once one more job is sent to the host: one more held, and one
        less room for every circuit, since the job takes a pipeline slot and memory they share — never more room
        than the host would say, so a job sent before the host answers cannot over-commit it."""
        return replace(self, held=self.held + 1, room={c: max(0, n - 1) for c, n in self.room.items()})


@dataclass(frozen=True)
class Route:
    host: str


@dataclass(frozen=True)
class Wait:
    """Some host can run the job, none has room now."""


@dataclass(frozen=True)
class NoHost:
    reasons: Mapping[str, str]  # host → why it can never run the job

    def message(self, circuit: str) -> str:
        if not self.reasons:
            return f"no host is serving circuit {circuit!r} (the cluster has no live host)"
        lines = "; ".join(f"{host}: {reason}" for host, reason in sorted(self.reasons.items()))
        return f"no host of the cluster can ever run circuit {circuit!r}: {lines}"


def route(circuit: str, hosts: list[HostView]) -> Route | Wait | NoHost:
    able = [h for h in hosts if circuit not in h.never]
    if not able:
        return NoHost({h.name: h.never[circuit] for h in hosts})
    ready = [h for h in able if h.room.get(circuit, 0) > 0]
    if not ready:
        return Wait()
    best = min(ready, key=lambda h: (circuit not in h.resident, h.load, h.name))
    return Route(best.name)
