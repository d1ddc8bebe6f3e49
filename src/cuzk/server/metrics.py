"""Prometheus metrics of the daemon.

Two kinds: events counted as they happen (proofs by final state and circuit, phase
durations as histograms — fed by an engine listener), and gauges read from the daemon's
status document at scrape time (queue depth, jobs by state, budget total/reserved/untracked
and reserved by category, keys by tier, restarts and OOM kills from the supervisor's
record). Reading gauges at scrape time means they can never drift from ``/status``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..engine.jobs import JobRecord

# Proof phases run from milliseconds (toy circuits) to minutes (2^24 domains on a CPU).
PHASE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000)


class _StatusCollector(Collector):
    def __init__(self, status: Callable[[], dict[str, Any]]):
        self._status = status

    def collect(self):
        status = self._status()
        jobs = status.get("jobs", {})
        g = GaugeMetricFamily("cuzk_queue_depth", "Jobs waiting for a synthesis worker, by priority", labels=["priority"])
        for priority, depth in jobs.get("queued_by_priority", {}).items():
            g.add_metric([priority], depth)
        yield g
        g = GaugeMetricFamily("cuzk_jobs", "Jobs in the journal, by state", labels=["state"])
        for state, count in jobs.get("by_state", {}).items():
            g.add_metric([state], count)
        yield g

        budget = status.get("budget", {})
        reading = (status.get("reconciler") or {}).get("latest") or {}
        g = GaugeMetricFamily("cuzk_budget_bytes", "Host memory budget: total, effective total, reserved, untracked (kernel-charged minus reserved)",
                              labels=["kind"])
        for kind, value in (("total", budget.get("total_bytes")), ("effective_total", budget.get("effective_total_bytes")),
                            ("reserved", budget.get("reserved_bytes")), ("untracked", reading.get("untracked_bytes")),
                            ("charged", reading.get("actual_bytes"))):
            if value is not None:
                g.add_metric([kind], value)
        yield g

        reconciler = status.get("reconciler") or {}
        peak_reading = reconciler.get("peak_actual_bytes")
        if budget.get("peak_reserved_bytes") is not None:
            g = GaugeMetricFamily("cuzk_memory_peak_reserved_bytes", "The most host memory the budget had reserved at once")
            g.add_metric([], budget["peak_reserved_bytes"])
            yield g
        if peak_reading and reading.get("source"):
            # What the kernel charges (the cgroup's usage, or the machine's under MemTotal) is "charged"; the RSS
            # reading used when a configured budget is trusted over the limit carries its own name.
            kernel = reading["source"] in ("cgroup", "meminfo")
            name, doc = (("cuzk_memory_peak_charged_bytes", "The most host memory the kernel charged (cgroup or machine)")
                         if kernel else ("cuzk_memory_peak_rss_bytes", "The engine's largest RSS (no kernel charge is read)"))
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], peak_reading)
            yield g
        g = GaugeMetricFamily("cuzk_budget_reserved_bytes", "Reserved host memory by category", labels=["category"])
        for category, entry in budget.get("by_category", {}).items():
            g.add_metric([category], entry["bytes"])
        yield g

        g = GaugeMetricFamily("cuzk_key_reserved_bytes", "Memory reserved for each proving key, with its tier", labels=["key", "tier"])
        for key in status.get("keys", []):
            g.add_metric([key["name"], key["tier"]], key["reserved_bytes"])
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
        g = GaugeMetricFamily("cuzk_vram_bytes", "Each GPU's VRAM budget: total, reserved, held by resident keys", labels=["device", "kind"])
        for d in status.get("devices", []):
            for kind, key in (("total", "vram_total_bytes"), ("reserved", "vram_reserved_bytes"), ("resident_keys", "resident_bytes")):
                g.add_metric([str(d["device"]), kind], d[key])
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
        self.phase_seconds = Histogram("cuzk_phase_seconds", "Duration of each proving phase", ["phase"],
                                       buckets=PHASE_BUCKETS, registry=self.registry)
        self.registry.register(_StatusCollector(status))

    def observe(self, record: JobRecord) -> None:
        self.proofs.labels(record.circuit, record.state.value).inc()
        for phase, seconds in record.timings.items():
            self.phase_seconds.labels(phase).observe(seconds)

    def text(self) -> str:
        return generate_latest(self.registry).decode()
