"""From the limits the kernel enforces to the budget cuzk reserves against.

    ceiling = min(cgroup limit (memory.max / memory.high / memory.limit_in_bytes, tightest on
                  the way up), MemTotal, configured)
    total   = ceiling − margin
    margin  = headroom + allowance

``headroom`` must stay free under the ceiling at all times; ``allowance`` is room for memory
the budget does not track (interpreter, libraries, page tables, driver bookkeeping). The
reconciler keeps ``reserved + untracked + headroom <= ceiling`` by shrinking the effective
budget once untracked memory outgrows the allowance.

A configured budget above the real ceiling normally loses to it (a note says so). An
operator who knows better than the kernel's figures (a limit raised after start, a test that
wants the OOM killer to fire) passes ``trust_configured`` (``--budget-over-limit``): the
configured figure becomes the ceiling and the plan carries a loud warning. The supervisor's
budget learned from an OOM kill is never passed this way, so after the first kill the real
limit is respected again.

Where a memprobe result for this same cgroup and limit exists, the allowance is the overhead
it measured, scaled from the bytes it allocated to the whole ceiling, and the headroom is the
safety distance it kept (which it proved safe; never under 32 MiB). Otherwise both are defaults:
5 % of the ceiling each, headroom within [32 MiB, 2 GiB], allowance within [64 MiB, 1 GiB].
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .limits import MemoryLimits
from .probe import ProbeResult
from .units import GiB, MiB, format_size


class BudgetPlanError(ValueError):
    """The limits leave no room for a budget (margin at or above the ceiling)."""


@dataclass(frozen=True)
class BudgetPlan:
    ceiling_bytes: int
    ceiling_source: str
    margin_bytes: int
    margin_source: str
    headroom_bytes: int
    total_bytes: int
    notes: list[str] = field(default_factory=list)

    @property
    def untracked_allowance_bytes(self) -> int:
        return self.margin_bytes - self.headroom_bytes

    def to_dict(self) -> dict:
        out = asdict(self)
        out["untracked_allowance_bytes"] = self.untracked_allowance_bytes
        return out


_MIN_HEADROOM = 32 * MiB
# Page tables cost ~0.2 %, pinned-memory driver bookkeeping a few %: far beyond that, the probe measured someone else.
_PLAUSIBLE_OVERHEAD = 0.25


def _default_headroom(ceiling: int) -> int:
    return min(2 * GiB, max(_MIN_HEADROOM, ceiling // 20))


def _default_allowance(ceiling: int) -> int:
    return min(GiB, max(64 * MiB, ceiling // 20))


def _probe_applies(probe: ProbeResult, limits: MemoryLimits) -> str | None:
    """Why ``probe`` does not describe these limits, or None when it does."""
    cgroup = limits.cgroup
    if probe.oom_killed or probe.allocated_bytes <= 0:
        return "it did not complete (OOM-killed or nothing allocated)"
    if probe.overhead_ratio > _PLAUSIBLE_OVERHEAD:
        return (f"its overhead of {probe.overhead_ratio * 100:.0f} % of what it allocated is implausible "
                f"(usage measured by {probe.usage_source} moved under other processes?)")
    if cgroup is None or cgroup.effective_limit_bytes is None:
        return None if probe.cgroup_limit_bytes is None else "it was measured under a cgroup limit this process does not have"
    if (probe.cgroup_version, probe.cgroup_path, probe.cgroup_limit_bytes) != (cgroup.version, cgroup.path, cgroup.effective_limit_bytes):
        return (f"it was measured in cgroup v{probe.cgroup_version} {probe.cgroup_path} limited to "
                f"{format_size(probe.cgroup_limit_bytes)}, not v{cgroup.version} {cgroup.path} limited to "
                f"{format_size(cgroup.effective_limit_bytes)}")
    return None


OVER_LIMIT_SOURCE = "configured, over the detected limit"


def plan_budget(limits: MemoryLimits, configured_bytes: int | None = None, margin_bytes: int | None = None,
                probes: list[ProbeResult] = (), trust_configured: bool = False) -> BudgetPlan:
    """The budget these limits allow. A configured margin is all headroom (kept free at all times).

    ``trust_configured``: a configured budget above the real ceiling replaces it (see the module docstring).
    """
    notes = list(limits.notes)
    ceiling, ceiling_source = limits.ceiling_bytes, limits.ceiling_source
    if trust_configured and configured_bytes is None:
        raise BudgetPlanError("trusting the configured budget over the detected limit needs a configured budget")
    if configured_bytes is not None:
        if configured_bytes <= 0:
            raise BudgetPlanError(f"configured memory budget must be positive, got {configured_bytes}")
        if configured_bytes < ceiling:
            ceiling, ceiling_source = configured_bytes, "configured"
        elif trust_configured and configured_bytes > ceiling:
            notes.append(f"WARNING: configured budget {format_size(configured_bytes)} is trusted over the real ceiling "
                         f"{format_size(ceiling)} ({ceiling_source}) by --budget-over-limit: the kernel may OOM-kill the "
                         "engine (the supervisor then learns a budget under the real limit)")
            ceiling, ceiling_source = configured_bytes, OVER_LIMIT_SOURCE
        else:
            notes.append(f"configured budget {format_size(configured_bytes)} is above the real ceiling "
                         f"{format_size(ceiling)} ({ceiling_source}); the ceiling wins")

    usable = []
    for probe in probes:
        reason = _probe_applies(probe, limits)
        if reason is None:
            usable.append(probe)
        else:
            notes.append(f"memprobe result ({probe.mode}) ignored: {reason}")

    if margin_bytes is not None:
        if margin_bytes < 0:
            raise BudgetPlanError(f"memory margin must not be negative, got {margin_bytes}")
        headroom, margin, margin_source = margin_bytes, margin_bytes, "configured"
    elif usable:
        # The worst probe decides: pinned memory carries driver overhead anonymous memory does not.
        ratio = max(p.overhead_ratio for p in usable)
        headroom = max(_MIN_HEADROOM, max(p.safety_bytes for p in usable))
        allowance = math.ceil(ratio * ceiling)
        margin = headroom + allowance
        modes = ", ".join(sorted({p.mode for p in usable}))
        margin_source = (f"memprobe ({modes}): overhead {ratio * 100:.2f} % of the ceiling "
                         f"+ its safety distance {format_size(headroom)}")
    else:
        headroom, allowance = _default_headroom(ceiling), _default_allowance(ceiling)
        margin, margin_source = headroom + allowance, "default (no memprobe result): 5 % headroom + 5 % allowance"

    if margin >= ceiling:
        raise BudgetPlanError(f"margin {format_size(margin)} ({margin_source}) leaves nothing of the ceiling "
                              f"{format_size(ceiling)} ({ceiling_source})")
    return BudgetPlan(ceiling_bytes=ceiling, ceiling_source=ceiling_source, margin_bytes=margin,
                      margin_source=margin_source, headroom_bytes=headroom, total_bytes=ceiling - margin, notes=notes)
