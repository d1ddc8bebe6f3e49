"""The figures of a bench run (a JSON-ready dict built from its ``BenchResult``) and the table a person reads.

Phases of one job, from the engine's own record of it (``started_at`` is stamped when a
synthesis worker has the key and the job's memory reservation, so the queue phase includes
waiting for both):

- queue: submitted → started, less the key load where the engine times it per job (the engine's ``intake``,
  checking and journaling the witness, and its ``queue``);
- key load: the engine's per-job ``key_load`` timing where it reports one; otherwise each
  load of a key the timeline saw (the status counts loads per key and times the latest);
- synthesis: ``check`` + ``synthesize``;
- prover wait: synthesized, waiting for a proving worker (started → finished less the phases);
- prove: the NTT/MSM/blinding timings (everything the engine timed that is not another phase);
- verify: the self-check of the proof;
- end to end: the client's submit call → the await returning, as a caller sees it.

A GPU's busy fraction is the time-weighted mean of its NVML utilization/100 over the measured
window (first measured submit to last measured completion, what the throughput covers): each
reading covers the time since the reading before it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from ..client import JobInfo
from ..memory.units import format_size
from .disk import DataDirDisk
from .result import BenchResult, JobOutcome

SCHEMA = 1
SYNTHESIS_TIMINGS = ("check", "synthesize")
NOT_PROVE = {"check", "synthesize", "verify", "intake", "queue", "key_load"}
PHASES = ("queue", "key_load", "synthesis", "prover_wait", "prove", "verify", "end_to_end")
PHASE_LABELS = {"queue": "queue", "key_load": "key load", "synthesis": "synthesis", "prover_wait": "prover wait",
                "prove": "prove", "verify": "verify", "end_to_end": "end to end"}


def latency_stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    a = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"count": len(values), "p50_s": float(p50), "p95_s": float(p95), "p99_s": float(p99), "mean_s": float(a.mean()),
            "max_s": float(a.max()), "min_s": float(a.min())}


def job_phases(outcome: JobOutcome, info: JobInfo | None) -> dict[str, float]:
    """The phases of one finished job (seconds); a phase the data cannot give is left out."""
    t = outcome.timings
    out: dict[str, float] = {}
    if "key_load" in t:
        out["key_load"] = t["key_load"]
    if any(k in t for k in SYNTHESIS_TIMINGS):
        out["synthesis"] = sum(t.get(k, 0.0) for k in SYNTHESIS_TIMINGS)
    prove = [v for k, v in t.items() if k not in NOT_PROVE]
    if prove:
        out["prove"] = sum(prove)
    if "verify" in t:
        out["verify"] = t["verify"]
    if "queue" in t:
        out["queue"] = t["queue"] + t.get("intake", 0.0)  # the engine's intake (checking and journaling) and its queue
    elif info is not None and info.started_at:
        out["queue"] = max(0.0, info.started_at - info.submitted_at - out.get("key_load", 0.0))
    if info is not None and info.started_at and info.finished_at:
        ran = info.finished_at - info.started_at
        out["prover_wait"] = max(0.0, ran - out.get("synthesis", 0.0) - out.get("prove", 0.0) - out.get("verify", 0.0))
    out["end_to_end"] = outcome.completed_t - outcome.submitted_t
    return out


def job_record(outcome: JobOutcome, info: JobInfo | None, started_unix: float) -> dict[str, Any]:
    """One job as the JSON shows it; times in seconds since the run began (the engine's stamps converted)."""
    def t(stamp: float | None) -> float | None:
        return None if not stamp else round(stamp - started_unix, 4)

    record = {"index": outcome.planned.index, "circuit": outcome.planned.circuit.name, "priority": outcome.planned.priority,
              "warmup": outcome.planned.warmup, "job_id": outcome.job_id, "state": outcome.state,
              "submitted_t_s": round(outcome.submitted_t, 4),
              "completed_t_s": None if outcome.completed_t is None else round(outcome.completed_t, 4),
              "engine_submitted_t_s": t(info.submitted_at) if info else None, "engine_started_t_s": t(info.started_at) if info else None,
              "engine_finished_t_s": t(info.finished_at) if info else None, "attempts": info.attempts if info else None,
              "timings": outcome.timings, "error": outcome.error or None}
    if outcome.completed_t is not None and outcome.state == "DONE":
        record["phases_s"] = job_phases(outcome, info)
    return record


def parse_metrics(text: str) -> dict[str, Any]:
    """The daemon's own counters (per engine process: they restart from zero with the engine)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {"proofs": {}, "proofs_by_circuit": {}, "phase_count": {}, "phase_sum_s": {}}
    for family in text_string_to_metric_families(text or ""):
        for s in family.samples:
            if s.name == "cuzk_proofs_total":
                out["proofs"][s.labels["status"]] = out["proofs"].get(s.labels["status"], 0) + int(s.value)
                by = out["proofs_by_circuit"].setdefault(s.labels["circuit"], {})
                by[s.labels["status"]] = int(s.value)
            elif s.name == "cuzk_phase_seconds_count":  # one histogram per circuit and phase: summed over circuits
                phase = s.labels["phase"]
                out["phase_count"][phase] = out["phase_count"].get(phase, 0) + int(s.value)
            elif s.name == "cuzk_phase_seconds_sum":
                phase = s.labels["phase"]
                out["phase_sum_s"][phase] = out["phase_sum_s"].get(phase, 0.0) + s.value
            elif s.name == "cuzk_worker_proofs_total":
                out.setdefault("proofs_by_worker", {})[f"{s.labels['worker']} ({s.labels['device']})"] = int(s.value)
            elif s.name in ("cuzk_oom_restarts_total", "cuzk_engine_restarts_total"):
                out[s.name.removeprefix("cuzk_").removesuffix("_total")] = int(s.value)
    return out


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else a / b


def memory_summary(result: BenchResult) -> dict[str, Any]:
    """Memory over the run. "Charged" is what the kernel charges (the daemon's cgroup, or the whole machine where
    MemTotal binds), read by the bench itself; only for an attached daemon, whose cgroup the bench cannot see, is
    it the engine's reading, and only where that reading is a kernel charge (its reconciler reads the cgroup or
    /proc/meminfo): an engine reading its own RSS (a configured ceiling below the limit) has no "charged" figure,
    its peak is ``peak_engine_rss_bytes``. The engine's own reading is always reported under its own name too."""
    samples = result.samples
    up = [s for s in samples if s.charged_bytes is not None]
    kernel = [s for s in samples if s.kernel_charged_bytes is not None]
    out: dict[str, Any] = {"samples": len(samples), "sample_interval_s": result.options.sample_interval,
                           "limit_source": result.limit_source}
    if samples:
        out["limit_bytes_first"] = samples[0].limit_bytes
        out["limit_bytes_last"] = samples[-1].limit_bytes
    if up:
        out.update({
            "peak_engine_reading_bytes": max(s.charged_bytes for s in up),
            "peak_reserved_bytes": max(s.reserved_bytes or 0 for s in up),
            "peak_untracked_bytes": max(s.untracked_bytes or 0 for s in up),
            "budget_total_bytes_first": up[0].budget_total_bytes, "budget_total_bytes_last": up[-1].budget_total_bytes,
            "min_budget_effective_bytes": min((s.budget_effective_bytes for s in up if s.budget_effective_bytes is not None), default=None),
        })
    if kernel:
        out["peak_kernel_charged_bytes"] = max(s.kernel_charged_bytes for s in kernel)
    engine_source = next((s.engine_reading_source for s in reversed(up) if s.engine_reading_source), None)
    out["engine_reading_source"] = engine_source
    charged = kernel or ([] if engine_source == "rss" else up)
    if up and not charged:
        out["peak_engine_rss_bytes"] = out["peak_engine_reading_bytes"]
        out["peak_engine_rss_of_reserved"] = _ratio(out["peak_engine_rss_bytes"], out.get("peak_reserved_bytes"))
    if charged:
        read = (lambda s: s.kernel_charged_bytes) if kernel else (lambda s: s.charged_bytes)
        peak = max(charged, key=read)
        budget = peak.budget_total_bytes if peak.budget_total_bytes is not None else out.get("budget_total_bytes_last")
        limit = peak.limit_bytes if peak.limit_bytes is not None else out.get("limit_bytes_last")
        out.update({
            "charged_source": "kernel" if kernel else "engine",
            "peak_charged_bytes": read(peak), "peak_charged_t_s": round(peak.t_s, 3),
            "budget_at_peak_bytes": budget, "limit_at_peak_bytes": limit,
            "peak_charged_of_budget": _ratio(read(peak), budget),
            "peak_charged_of_limit": _ratio(read(peak), limit),
            "peak_charged_of_reserved": _ratio(read(peak), out.get("peak_reserved_bytes")),
        })
    if not result.daemon_attached and result.engine_peak_charged:
        # The engines were started for this run, so their reconcilers' peaks (sampled at their own pace) are the run's too.
        out["engine_reported_peak_reading_bytes"] = max(result.engine_peak_charged.values())
    return out


def busy_fraction(readings: list[tuple[float, float | None]], start: float, end: float) -> float | None:
    """Time-weighted mean of utilization/100 over [start, end]; (t, percent) covers the time since the reading before.

    None where no reading covers any of the window; a reading of None (NVML did not answer) counts for nothing."""
    covered = busy = 0.0
    for (before, _), (t, percent) in zip(readings, readings[1:]):
        overlap = min(t, end) - max(before, start)
        if overlap > 0 and percent is not None:
            covered += overlap
            busy += overlap * percent / 100
    return busy / covered if covered else None


def gpu_summary(result: BenchResult) -> dict[str, Any]:
    """Each GPU the samples read: its busy fraction over the measured window, its VRAM peak, its readings (columns)."""
    setup = result.gpu
    start, end = result.measure_started_t, result.measure_ended_t
    devices = []
    for device in setup.devices:
        readings = [(s.t_s, s.gpus.get(device.ordinal)) for s in result.samples]
        read = [(t, r) for t, r in readings if r is not None]
        used = [(r.memory_used_bytes, t) for t, r in read if r.memory_used_bytes is not None]
        peak, peak_t = max(used, default=(None, None))
        busy = None if start is None or end is None else busy_fraction(
            [(t, None if r is None else r.utilization_percent) for t, r in readings], start, end)
        devices.append({
            "device": device.ordinal, **{k: v for k, v in asdict(device).items() if k != "ordinal"},
            "busy_fraction": busy, "vram_peak_bytes": peak, "vram_peak_t_s": None if peak_t is None else round(peak_t, 3),
            "samples": {"t_s": [round(t, 3) for t, _ in read], **{name: [getattr(r, name) for _, r in read]
                                                                   for name in ("utilization_percent", "memory_used_bytes", "sm_clock_mhz")}},
        })
    return {"sampling": "off" if setup.off_reason else "on", "off_reason": setup.off_reason,
            "visible_devices": setup.visible_devices, "environment_source": setup.environment_source,
            "busy_window_t_s": None if start is None or end is None else [start, end], "devices": devices}


def disk_summary(result: BenchResult) -> dict[str, Any]:
    """What the data directory's disk wrote over the samples spanning the measured window (the journal's witnesses among
    it), and the fastest it wrote between two samples: beside the GPUs' busy fractions, whether the disk set the pace."""
    disk = result.disk
    if not isinstance(disk, DataDirDisk):
        return {"device": None, "off_reason": disk or "no sample read it", "written_bytes_per_s": None,
                "peak_written_bytes_per_s": None}
    start, end = result.measure_started_t, result.measure_ended_t
    read = [(s.t_s, s.disk_written_bytes) for s in result.samples if s.disk_written_bytes is not None]
    if start is None or end is None:
        read = []
    # The samples spanning the window: from the last at or before its start to the first at or after its end (a short
    # run's window may hold none of its own).
    first = max((i for i, (t, _) in enumerate(read) if t <= start), default=0)
    last = min((i for i, (t, _) in enumerate(read) if t >= end), default=len(read) - 1)
    span = read[first:last + 1]
    rates = [(b1 - b0) / (t1 - t0) for (t0, b0), (t1, b1) in zip(span, span[1:]) if t1 > t0]
    whole = (span[-1][1] - span[0][1]) / (span[-1][0] - span[0][0]) if rates else None
    return {"device": disk.name, "off_reason": None, "written_bytes_per_s": whole,
            "peak_written_bytes_per_s": max(rates, default=None)}


def build_report(result: BenchResult) -> dict[str, Any]:
    opts = result.options
    jobs_info = result.engine_jobs
    measured = [o for o in result.outcomes if not o.planned.warmup]
    warmup = [o for o in result.outcomes if o.planned.warmup]
    done = [o for o in measured if o.state == "DONE"]
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    by_priority: dict[str, list[float]] = {}
    by_circuit: dict[str, list[float]] = {}
    for o in done:
        for phase, seconds in job_phases(o, jobs_info.get(o.job_id)).items():
            phases[phase].append(seconds)
        by_priority.setdefault(o.planned.priority, []).append(o.completed_t - o.submitted_t)
        by_circuit.setdefault(o.planned.circuit.name, []).append(o.completed_t - o.submitted_t)
    key_loads = result.key_loads
    if not phases["key_load"]:
        phases["key_load"] = [e["seconds"] for e in key_loads if e["seconds"] is not None]
    wall = None
    if result.measure_started_t is not None and result.measure_ended_t is not None:
        wall = max(0.0, result.measure_ended_t - result.measure_started_t)
    recoveries = result.recoveries
    status = result.final_status or {}
    states: dict[str, int] = {}
    for o in measured:
        states[o.state] = states.get(o.state, 0) + 1
    errors = sorted({o.error for o in result.outcomes if o.error})
    key_info = {k["name"]: k for k in status.get("keys") or []}
    return {
        "schema": SCHEMA,
        "ok": result.aborted is None and len(done) == len(measured) and all(o.state == "DONE" for o in warmup),
        "aborted": result.aborted,
        "workload": {
            "circuits": [{"name": c.name, "zkey": str(c.zkey), "wtns": str(c.wtns),
                          **{k: key_info.get(result.key_names[c.name], {}).get(k) for k in ("curve", "domain_size", "hot_bytes", "working_set_bytes")}}
                         for c in opts.circuits],
            "jobs": opts.jobs, "warmup_jobs": sum(j.warmup for j in result.planned), "concurrency": opts.concurrency,
            "priorities": opts.priorities, "witness_sent_as": result.witness_sent_as,
        },
        "daemon": {
            "mode": "attached" if result.daemon_attached else "started", "address": result.daemon_address,
            "data_dir": None if result.daemon_data_dir is None else str(result.daemon_data_dir),
            "budget_requested": opts.budget, "memory_limit_bytes": opts.memory_limit, "engine_options": opts.engine,
            "config": status.get("config"), "version": (status.get("server") or {}).get("version"),
        },
        "wall_s": wall,
        "proofs_per_s": (len(done) / wall) if wall else None,
        "jobs": {"submitted": len(measured), "done": len(done), "failed": states.get("FAILED", 0),
                 "cancelled": states.get("CANCELLED", 0), "unfinished": states.get("PENDING", 0),
                 "warmup_done": sum(o.state == "DONE" for o in warmup),
                 "retried": sum(1 for o in result.outcomes if o.job_id in jobs_info and jobs_info[o.job_id].attempts > 1),
                 "errors": errors[:5]},
        "latency": {p: latency_stats(v) for p, v in phases.items()},
        "latency_by_priority": {p: latency_stats(v) for p, v in by_priority.items()},
        "latency_by_circuit": {c: latency_stats(v) for c, v in by_circuit.items()},
        "key_loads": {"count": sum(e["loads"] for e in key_loads), "events": key_loads},
        "memory": memory_summary(result),
        "gpu": gpu_summary(result),
        "disk": disk_summary(result),
        "oom": {"recoveries": sum(r.oom_kill for r in recoveries), "oom_kills": result.oom_kills,
                "restarts": len(recoveries), "max_oom_retries": opts.max_oom_retries,
                "events": [r.to_dict() for r in recoveries]},
        "daemon_metrics": parse_metrics(result.metrics_text),
        "job_records": [job_record(o, jobs_info.get(o.job_id), result.started_unix) for o in result.outcomes],
        "timeline": {"started_unix": result.started_unix, "measure_started_t_s": result.measure_started_t,
                     "measure_ended_t_s": result.measure_ended_t},
        "files": {"json": "results.json", "csv": "timeline.csv", "png": "timeline.png" if opts.plot else None,
                  "daemon_log": None if result.daemon_attached else "daemon.log"},
    }


# -- the table ----------------------------------------------------------------------------------

def _s(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(report: dict[str, Any], out_dir) -> list:
    """Rich renderables: the summary lines, the latency table, memory, OOM recoveries, files."""
    from rich.table import Table

    w, jobs, mem, oom = report["workload"], report["jobs"], report["memory"], report["oom"]
    head = Table.grid(padding=(0, 2))
    names = ", ".join(c["name"] + (f" (2^{c['domain_size'].bit_length() - 1})" if c.get("domain_size") else "") for c in w["circuits"])
    config = report["daemon"].get("config") or {}
    head.add_row("workload", f"{names}: {w['jobs']} jobs at concurrency {w['concurrency']}, priorities {', '.join(w['priorities'])}"
                 f" (+{w['warmup_jobs']} warm-up, not measured); witnesses sent as {w.get('witness_sent_as', 'bytes')}")
    head.add_row("daemon", f"{report['daemon']['mode']} {report['daemon']['address']}; backend {', '.join(config.get('backend') or ['?'])}, "
                 f"synth workers {config.get('synth_workers', '?')}"
                 + (f", proofs per device {config['proofs_per_device']}" if config.get("proofs_per_device") else ""))
    rate = report["proofs_per_s"]
    head.add_row("throughput", "-" if rate is None else f"{rate:.3f} proofs/s ({jobs['done']} proofs in {report['wall_s']:.2f} s)")
    extra = [f"{jobs[k]} {k}" for k in ("failed", "cancelled", "unfinished", "retried") if jobs[k]]
    head.add_row("jobs", f"{jobs['done']}/{jobs['submitted']} done" + (f", {', '.join(extra)}" if extra else ""))
    by_worker = report.get("daemon_metrics", {}).get("proofs_by_worker")
    if by_worker and len(by_worker) > 1:  # one line per GPU: how the work was shared (the engine's counts, warm-ups included)
        head.add_row("provers", ", ".join(f"{name}: {count}" for name, count in sorted(by_worker.items())))
    gpu = report["gpu"]
    if gpu["off_reason"]:
        head.add_row("GPU sampling", f"off ({gpu['off_reason']})")
    for d in gpu["devices"]:
        busy = "-" if d["busy_fraction"] is None else f"{d['busy_fraction'] * 100:.0f} %"
        peak = "-" if d["vram_peak_bytes"] is None else format_size(d["vram_peak_bytes"])
        head.add_row(f"GPU {d['device']}", f"busy {busy} (NVML, over the measured window), VRAM peak {peak} of "
                     f"{format_size(d['memory_total_bytes'])}; {d['name']}, NVML index {d['nvml_index']}")
    disk = report["disk"]
    if disk["off_reason"]:
        head.add_row("data disk", f"not read ({disk['off_reason']})")
    elif disk["written_bytes_per_s"] is None:
        head.add_row("data disk", f"{disk['device']}: fewer than two samples around the measured window")
    else:
        head.add_row("data disk", f"{disk['device']} wrote {format_size(int(disk['written_bytes_per_s']))}/s over the measured "
                     f"window, at most {format_size(int(disk['peak_written_bytes_per_s']))}/s between samples (the journal's "
                     "witnesses among it)")
    out = [head]

    table = Table(title="latency per phase", title_justify="left")
    for col in ("phase", "count", "p50", "p95", "p99", "mean", "max"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for phase in PHASES:
        st = report["latency"][phase]
        table.add_row(PHASE_LABELS[phase], str(st["count"]), *(_s(st.get(k)) for k in ("p50_s", "p95_s", "p99_s", "mean_s", "max_s")))
    for priority, st in report["latency_by_priority"].items():
        if len(report["latency_by_priority"]) > 1:
            table.add_row(f"end to end, {priority}", str(st["count"]), *(_s(st.get(k)) for k in ("p50_s", "p95_s", "p99_s", "mean_s", "max_s")))
    out.append(table)

    m = Table.grid(padding=(0, 2))
    m.add_row("limit", f"{format_size(mem.get('limit_at_peak_bytes', mem.get('limit_bytes_last')))} ({mem['limit_source']})"
              + ("; no cgroup limit, so charged means the whole machine's use" if mem["limit_source"].startswith("MemTotal") else ""))
    if "peak_charged_bytes" in mem and "peak_reserved_bytes" in mem:  # the engine answered at least once
        m.add_row("budget", f"{format_size(mem['budget_at_peak_bytes'])} at the peak"
                  + (f" (first {format_size(mem['budget_total_bytes_first'])}, last {format_size(mem['budget_total_bytes_last'])})"
                     if mem["budget_total_bytes_first"] != mem["budget_total_bytes_last"] else ""))
        whose = ("the kernel's figure" if mem["charged_source"] == "kernel"
                 else f"the kernel's figure as the attached engine reads it, from its {mem.get('engine_reading_source') or 'cgroup'}")
        m.add_row("peak charged", f"{format_size(mem['peak_charged_bytes'])} at {mem['peak_charged_t_s']:.1f} s = "
                  f"{_pct(mem['peak_charged_of_budget'])} of the budget, {_pct(mem['peak_charged_of_limit'])} of the limit "
                  f"({whose}, sampled every {mem['sample_interval_s']:g} s)")
        m.add_row("peak reserved", f"{format_size(mem['peak_reserved_bytes'])}; peak charged ÷ peak reserved "
                  f"{_ratio_text(mem['peak_charged_of_reserved'])}; peak untracked {format_size(mem['peak_untracked_bytes'])}")
    elif "peak_engine_rss_bytes" in mem:
        m.add_row("peak engine RSS", f"{format_size(mem['peak_engine_rss_bytes'])} (the attached engine reads its own RSS, "
                  "not a kernel charge); peak reserved "
                  f"{format_size(mem['peak_reserved_bytes'])}, RSS ÷ reserved {_ratio_text(mem['peak_engine_rss_of_reserved'])}")
    else:
        m.add_row("memory", "no sample from the engine")
    restarts = f"{oom['recoveries']} OOM recoveries (at most {oom['max_oom_retries']} allowed)"
    if oom["restarts"] > oom["recoveries"]:
        restarts += f", {oom['restarts'] - oom['recoveries']} other restarts"
    m.add_row("OOM", restarts)
    for e in oom["events"]:
        m.add_row("", f"engine {e['engine_pid']}: {e['cause']}; ceiling {format_size(e['ceiling_before_bytes'])} → "
                  f"{format_size(e['ceiling_after_bytes'])}, budget {format_size(e['budget_before_bytes'])} → "
                  f"{format_size(e['budget_after_bytes'])} (limit {format_size(e['limit_bytes'])}), back in "
                  + ("-" if e["time_to_recover_s"] is None else f"{e['time_to_recover_s']:.1f} s"))
    out.append(m)
    files = [str(out_dir / f) for f in report["files"].values() if f]
    out.append(f"files: {'  '.join(files)}")
    if report["aborted"]:
        out.append(f"[red]stopped early: {report['aborted']}[/red]")
    for error in report["jobs"]["errors"]:
        out.append(f"[red]job error: {error}[/red]")
    return out
