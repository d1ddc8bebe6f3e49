"""The memory layer: real limits (cgroup v1/v2, meminfo), memprobe, the budget and its reservations,
the pinned pool inside the budget, and the reconciler that checks the budget against the kernel.

Modules: units (byte sizes), limits (what the kernel enforces), cgroup (child cgroups for
workloads), probe (memprobe), plan (limits -> budget), budget, pinned, reconcile, commands (CLI).
"""

from .budget import CATEGORIES, AcquireTimeout, BudgetExceededError, MemoryBudget, Reservation
from .units import GiB, KiB, MiB, TiB, format_size, parse_size

__all__ = ["CATEGORIES", "AcquireTimeout", "BudgetExceededError", "MemoryBudget", "Reservation",
           "GiB", "KiB", "MiB", "TiB", "format_size", "parse_size"]
