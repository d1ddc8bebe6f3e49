"""The cluster's status document: each host engine's own status, merged into the shape a daemon's has.

Summed where a sum means something (budgets, reservations by category), listed with the host
named where it does not (devices, active jobs, workers), and every host's own document kept
under ``hosts`` with what the router last saw of it (``routing``), or its error when it did
not answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .routing import HostView

BUDGET_SUMS = ("total_bytes", "effective_total_bytes", "reserved_bytes", "available_bytes", "peak_reserved_bytes",
               "waiters", "waiting_bytes", "reservations")
TIER_ORDER = {"cold": 0, "warm": 1, "hot": 2}


def merged_keys(hosts: list[dict[str, Any]]) -> list[dict]:
    """Each key once: its residency summed over the hosts, the tier of its warmest copy, the hosts holding it."""
    merged: dict[str, dict] = {}
    for host in hosts:
        for key in host.get("keys", []):
            entry = merged.setdefault(key["name"], {**key, "reserved_bytes": 0, "in_use": 0, "loads": 0, "hosts": [],
                                                    "resident_devices": [], "working_set_bytes": 0})
            if TIER_ORDER[key["tier"]] > TIER_ORDER[entry["tier"]]:
                entry["tier"] = key["tier"]
            for field in ("reserved_bytes", "in_use", "loads"):
                entry[field] += key[field]
            entry["working_set_bytes"] = max(entry["working_set_bytes"], key.get("working_set_bytes", 0))
            entry["resident_devices"] += [f"{host['host']}/{d}" for d in key.get("resident_devices", [])]
            if key["tier"] != "cold":
                entry["hosts"].append(host["host"])
    return [merged[name] for name in sorted(merged)]


def merged_status(hosts: list[dict[str, Any]], views: Mapping[str, HostView]) -> dict[str, Any]:
    """budget, keys, devices, active (jobs), workers and hosts of the cluster's status document."""
    up = [h for h in hosts if "error" not in h]
    budget: dict[str, Any] = {"name": "cluster", "by_category": {}}
    for field in BUDGET_SUMS:
        budget[field] = sum(h["budget"].get(field, 0) for h in up)
    for h in up:
        for category, entry in h["budget"]["by_category"].items():
            total = budget["by_category"].setdefault(category, {"bytes": 0, "count": 0})
            total["bytes"] += entry["bytes"]
            total["count"] += entry["count"]
    for h in hosts:
        view = views.get(h["host"])
        h["routing"] = None if view is None else {"held": view.held, "slots": view.slots, "room": dict(view.room),
                                                  "never": dict(view.never), "resident": sorted(view.resident)}
    return {
        "budget": budget,
        "keys": merged_keys(up),
        "devices": [{**d, "host": h["host"]} for h in up for d in h.get("devices", [])],
        "active": [{**a, "host": h["host"]} for h in up for a in h["jobs"]["active"]],
        "workers": [{**w, "name": f"{h['host']}/{w['name']}", "host": h["host"]} for h in up for w in h["workers"]],
        "hosts": hosts,
    }
