"""Prometheus metrics of the daemon.

Two kinds: events counted as they happen (proofs by final state and circuit, phase
durations by circuit and phase as histograms — fed by an engine listener), and gauges read
from the daemon's status document at scrape time (queue depth, jobs by state, the budget's
quantities and reserved by category, keys by tier, each GPU's VRAM, restarts and OOM kills
from the supervisor's record). Reading gauges at scrape time means they can never drift
from ``/status``. Beside them: the standard ``process_*`` collector and ``cuzk_build_info``.

Prometheus's conventions: one metric per quantity (never a ``kind`` label whose values
cannot be summed), base units in the name, label values in lower case, and a key's label
is its name (``key_label``), never a file path.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..engine.jobs import JobRecord

# Proof phases run from milliseconds (toy circuits) to minutes (2^24 domains on a CPU).
PHASE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000)


def key_label(name: str) -> str:
    """A key's metric label: its registered name, or for a key the client named by path, the file's stem and a digest
    of the path (distinct keys stay distinct, and no file path reaches a metrics store)."""
    if not PurePath(name).is_absolute():
        return name
    return f"{PurePath(name).stem}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _gauge(name: str, doc: str, value: float | None):
    """One unlabelled gauge, or nothing while its reading is unknown."""
    if value is None:
        return []
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return [g]


class _StatusCollector(Collector):
    def __init__(self, status: Callable[[], dict[str, Any]]):
        self._status = status

    def collect(self):
        status = self._status()
        jobs = status.get("jobs", {})
        g = GaugeMetricFamily("cuzk_queue_depth", "Jobs waiting for a synthesis worker, by priority", labels=["priority"])
        for priority, depth in jobs.get("queued_by_priority", {}).items():
            g.add_metric([priority.lower()], depth)
        yield g
        g = GaugeMetricFamily("cuzk_jobs", "Jobs in the journal, by state", labels=["state"])
        for state, count in jobs.get("by_state", {}).items():
            g.add_metric([state.lower()], count)
        yield g

        budget = status.get("budget", {})
        reading = (status.get("reconciler") or {}).get("latest") or {}
        yield from _gauge("cuzk_budget_total_bytes", "Host memory budget: the real limit (or the configured one) less the margin",
                          budget.get("total_bytes"))
        yield from _gauge("cuzk_budget_effective_total_bytes", "The budget less what the reconciler holds back for untracked memory",
                          budget.get("effective_total_bytes"))
        yield from _gauge("cuzk_memory_untracked_bytes", "Memory charged beyond what the budget has reserved",
                          reading.get("untracked_bytes"))
        # What the kernel charges (the cgroup's usage, or the machine's under MemTotal) is "charged"; the RSS reading used
        # when a configured budget is trusted over the limit carries its own name.
        kernel = reading.get("source") in ("cgroup", "meminfo")
        if reading.get("actual_bytes") is not None:
            yield from (_gauge("cuzk_memory_charged_bytes", "Host memory the kernel charges now (cgroup or machine)", reading["actual_bytes"])
                        if kernel else _gauge("cuzk_memory_rss_bytes", "The engine's RSS now (no kernel charge is read)", reading["actual_bytes"]))

        reconciler = status.get("reconciler") or {}
        peak_reading = reconciler.get("peak_actual_bytes")
        yield from _gauge("cuzk_memory_peak_reserved_bytes", "The most host memory the budget had reserved at once",
                          budget.get("peak_reserved_bytes"))
        if peak_reading and reading.get("source"):
            yield from (_gauge("cuzk_memory_peak_charged_bytes", "The most host memory the kernel charged (cgroup or machine)", peak_reading)
                        if kernel else _gauge("cuzk_memory_peak_rss_bytes", "The engine's largest RSS (no kernel charge is read)", peak_reading))
        g = GaugeMetricFamily("cuzk_budget_reserved_bytes", "Reserved host memory by category (their sum: all reserved)",
                              labels=["category"])
        for category, entry in budget.get("by_category", {}).items():
            g.add_metric([category.lower()], entry["bytes"])
        yield g

        g = GaugeMetricFamily("cuzk_key_reserved_bytes", "Memory reserved for each proving key, with its tier", labels=["key", "tier"])
        for key in status.get("keys", []):
            g.add_metric([key_label(key["name"]), key["tier"].lower()], key["reserved_bytes"])
        yield g

        workers = [w for w in status.get("workers", []) if w.get("kind") == "proving"]
        c = CounterMetricFamily("cuzk_worker_proofs", "Proofs finished by each proving worker (one per GPU, or the CPU)",
                                labels=["worker", "device"])
        g = GaugeMetricFamily("cuzk_worker_healthy", "1 while a proving worker's device passes its checks, 0 once marked unhealthy",
                              labels=["worker", "device"])
        e = CounterMetricFamily("cuzk_worker_device_errors", "CUDA errors met by each proving worker", labels=["worker", "device"])
        for w in workers:
            labels = [w["name"], "cpu" if w.get("device") is None else str(w["device"])]
            c.add_metric(labels, w.get("jobs_done", 0))
            g.add_metric(labels, 1 if w.get("healthy", True) else 0)
            e.add_metric(labels, w.get("device_errors", 0))
        yield c
        yield g
        yield e
        for name, doc, field in (("cuzk_vram_total_bytes", "Each GPU's VRAM budget", "vram_total_bytes"),
                                 ("cuzk_vram_reserved_bytes", "VRAM reserved on each GPU (resident keys included)", "vram_reserved_bytes"),
                                 ("cuzk_vram_resident_keys_bytes", "VRAM held by the keys resident on each GPU", "resident_bytes")):
            g = GaugeMetricFamily(name, doc, labels=["device"])
            for d in status.get("devices", []):
                g.add_metric([str(d["device"])], d[field])
            yield g

        yield from _host_metrics(status.get("hosts"))

        supervisor = status.get("supervisor") or {}
        c = CounterMetricFamily("cuzk_oom_restarts", "Engine restarts after an OOM kill (kernel OOM counter), since the data directory was made")
        c.add_metric([], supervisor.get("oom_kills", 0))
        yield c
        c = CounterMetricFamily("cuzk_engine_restarts", "Engine restarts by the supervisor, any cause")
        c.add_metric([], supervisor.get("restarts", 0))
        yield c
        if supervisor.get("learned_budget") is not None:
            g = GaugeMetricFamily("cuzk_learned_budget_bytes", "Memory ceiling learned from OOM kills")
            g.add_metric([], supervisor["learned_budget"])
            yield g


def _host_metrics(hosts: list[dict[str, Any]] | None):
    """A cluster's front door (``cuzk.cluster``): each host's health, jobs and budget, labelled by host."""
    if hosts is None:
        return
    up = GaugeMetricFamily("cuzk_host_up", "1 for each cluster host that answers its front door, else 0", labels=["host"])
    jobs = GaugeMetricFamily("cuzk_host_jobs", "Each cluster host's unfinished jobs (held) and pipeline slots", labels=["host", "kind"])
    budget = GaugeMetricFamily("cuzk_host_budget_bytes", "Each cluster host's memory budget: total and reserved",
                               labels=["host", "kind"])
    for host in hosts:
        up.add_metric([host["host"]], 0 if "error" in host else 1)
        routing = host.get("routing") or {}
        for kind in ("held", "slots"):
            if kind in routing:
                jobs.add_metric([host["host"], kind], routing[kind])
        for kind in ("total", "reserved"):
            if "budget" in host:
                budget.add_metric([host["host"], kind], host["budget"][f"{kind}_bytes"])
    yield from (up, jobs, budget)


class DaemonMetrics:
    """The daemon's registry; ``observe`` is called once per job that reaches a final state."""

    def __init__(self, status: Callable[[], dict[str, Any]]):
        self.registry = CollectorRegistry(auto_describe=False)
        self.proofs = Counter("cuzk_proofs", "Jobs finished, by final status and circuit", ["circuit", "status"], registry=self.registry)
        self.phase_seconds = Histogram("cuzk_phase_seconds", "Duration of each proving phase, by circuit", ["circuit", "phase"],
                                       buckets=PHASE_BUCKETS, registry=self.registry)
        self.registry.register(_StatusCollector(status))
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
        from .. import __version__

        Info("cuzk_build", "The cuzk build serving", registry=self.registry).info(
            {"version": __version__, "python": platform.python_version()})

    def observe(self, record: JobRecord) -> None:
        circuit = key_label(record.circuit)
        self.proofs.labels(circuit, record.state.value.lower()).inc()
        for phase, seconds in record.timings.items():
            self.phase_seconds.labels(circuit, phase).observe(seconds)

    def text(self) -> str:
        return generate_latest(self.registry).decode()
