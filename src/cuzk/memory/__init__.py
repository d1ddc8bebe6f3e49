"""The memory layer: real limits (cgroup v1/v2, meminfo), memprobe, the budget and its reservations,
the pinned pool inside the budget, and the reconciler that checks the budget against the kernel.

Modules: units (byte sizes), limits (what the kernel enforces), cgroup (child cgroups for
workloads), probe (memprobe), plan (limits -> budget), budget, pinned, reconcile, commands (CLI).
"""

from importlib import import_module

# Imported when first asked for: every CLI command (a daemon client too) reads `memory.units`, and the budget's
# module graph would otherwise cost each of them its import.
_LAZY = {name: "budget" for name in ("CATEGORIES", "AcquireTimeout", "BudgetExceededError", "MemoryBudget", "Reservation")}
_LAZY |= {name: "units" for name in ("GiB", "KiB", "MiB", "TiB", "format_size", "parse_size")}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'cuzk.memory' has no attribute {name!r}")


__all__ = list(_LAZY)
