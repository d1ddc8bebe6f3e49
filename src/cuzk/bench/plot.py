"""The memory timeline as a picture: memory on top, the GPUs below it, each job's phases at the bottom, on one time axis.

Top: what is reserved, stacked by category, with the untracked memory on top of it (so the
stack reaches what the kernel charges); lines for the limit, the budget (total and
effective) and the charged memory. Engine deaths are red lines, the time without an engine
is shaded. Where NVML read the daemon's GPUs: each one's utilization (a step over the time
each reading covers) and its VRAM used against its total. Bottom: one row per job, coloured by
phase (queue, synthesis, waiting for a prover, prove, verify); warm-up jobs are drawn paler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..memory.units import GiB, MiB
from .report import build_report
from .result import BenchResult
from .timeline import categories

PHASE_COLOURS = {"queue": "#d9d9d9", "synthesis": "#fdae61", "prover_wait": "#fee08b", "prove": "#1a9641", "verify": "#7b3294"}


def _segments(job: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(phase, start, end) of one job, rebuilt from the engine's stamps and phase timings."""
    submitted, started, finished = job["engine_submitted_t_s"], job["engine_started_t_s"], job["engine_finished_t_s"]
    phases = job.get("phases_s") or {}
    if started is None or finished is None or not phases:
        end = job["completed_t_s"]
        return [] if end is None else [("queue", job["submitted_t_s"], end)]
    verify_at = finished - phases.get("verify", 0.0)
    prove_at = verify_at - phases.get("prove", 0.0)
    synth_end = min(started + phases.get("synthesis", 0.0), prove_at)
    out = [("queue", submitted, started), ("synthesis", started, synth_end), ("prover_wait", synth_end, prove_at),
           ("prove", prove_at, verify_at), ("verify", verify_at, finished)]
    return [(p, a, b) for p, a, b in out if b > a]


def _plot_gpus(axu, axm, gpus: list[dict[str, Any]]) -> None:
    """Utilization (each reading drawn over the time since the one before, as the busy fraction counts it) and VRAM."""
    import matplotlib.pyplot as plt

    colours = plt.get_cmap("tab10").colors
    for i, d in enumerate(gpus):
        colour, samples = colours[i % len(colours)], d["samples"]
        busy = "" if d["busy_fraction"] is None else f", busy {d['busy_fraction'] * 100:.0f} % measured"
        percent = [float("nan") if v is None else v for v in samples["utilization_percent"]]
        axu.step(samples["t_s"], percent, where="pre", color=colour, lw=1.2, label=f"GPU {d['device']}{busy}")
        used = [float("nan") if v is None else v / GiB for v in samples["memory_used_bytes"]]
        axm.plot(samples["t_s"], used, color=colour, lw=1.2, label=f"GPU {d['device']} used")
        axm.axhline(d["memory_total_bytes"] / GiB, color=colour, lw=0.8, ls="--", label=f"GPU {d['device']} total")
    axu.set_ylabel("GPU busy %")
    axu.set_ylim(0, 105)
    axm.set_ylabel("VRAM GiB")
    axm.set_ylim(bottom=0)
    for a in (axu, axm):
        a.grid(alpha=0.3)
        a.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)


PLOT_EXTRA_MISSING = ("matplotlib is not installed, so no timeline.png is drawn (results.json and timeline.csv are written); "
                      "install it with: pip install 'cuzk[plot]'")


def can_plot() -> bool:
    """Whether matplotlib (the ``plot`` extra, only the PNG needs it) can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_timeline(path: Path, result: BenchResult) -> None:
    """Draw ``result``'s timeline into the PNG file ``path``; the jobs' phases and the run's figures are the report's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    report = build_report(result)
    samples = result.samples
    jobs = report["job_records"]
    peak = max([s.limit_bytes or 0 for s in samples] + [s.charged_bytes or 0 for s in samples] + [1])
    unit, unit_name = (GiB, "GiB") if peak >= 2 * GiB else (MiB, "MiB")

    def series(values) -> np.ndarray:
        return np.array([np.nan if v is None else v / unit for v in values], dtype=float)

    t = np.array([s.t_s for s in samples])
    gpus = report["gpu"]["devices"]
    heights = [3, 1.5, 1.5, 2] if gpus else [3, 2]
    fig, axes = plt.subplots(len(heights), 1, sharex=True, figsize=(12, 11 if gpus else 8), height_ratios=heights,
                             layout="constrained")
    ax, axj = axes[0], axes[-1]
    if gpus:
        _plot_gpus(axes[1], axes[2], gpus)

    cats = categories(samples)
    layers = [series([s.reserved_by_category.get(c, 0) if s.engine_up else None for s in samples]) for c in cats]
    layers.append(series([s.untracked_bytes for s in samples]))
    labels = [f"reserved: {c}" for c in cats] + ["untracked"]
    colours = list(plt.get_cmap("tab20c").colors[: len(cats)]) + ["#bdbdbd"]
    if len(t):
        ax.stackplot(t, *[np.nan_to_num(layer) for layer in layers], labels=labels, colors=colours, alpha=0.85, step="post")
        attached = report["daemon"]["mode"] == "attached"  # the bench cannot read that daemon's cgroup: the engine's ceiling stands in
        ax.step(t, series([s.limit_bytes for s in samples]), where="post", color="#d7191c", lw=2,
                label="ceiling (the engine's view)" if attached else "limit")
        ax.step(t, series([s.budget_total_bytes for s in samples]), where="post", color="black", lw=1.5, label="budget")
        ax.step(t, series([s.budget_effective_bytes for s in samples]), where="post", color="black", lw=1, ls="--",
                label="budget (effective)")
        source = next((s.engine_reading_source for s in samples if s.engine_reading_source), None)
        ax.plot(t, series([s.charged_bytes for s in samples]), color="#2c7bb6", lw=1.5,
                label="engine's RSS" if source == "rss" else "charged (engine's reading)")
        if any(s.kernel_charged_bytes is not None for s in samples):
            ax.plot(t, series([s.kernel_charged_bytes for s in samples]), color="#2c7bb6", lw=0.8, ls=":",
                    label="charged (kernel, read by the bench)")
    down = [s.t_s for s in samples if not s.engine_up]
    for x in down:
        for a in axes:
            a.axvspan(x - result.options.sample_interval / 2, x + result.options.sample_interval / 2, color="#fbb4b9", alpha=0.3, lw=0)
    for event in report["oom"]["events"]:
        x = event["died_at"] - result.started_unix
        for a in axes:
            a.axvline(x, color="#d7191c", lw=1.5)
        ax.text(x, 0.98, " OOM kill" if event["oom_kill"] else " engine died", transform=ax.get_xaxis_transform(),
                color="#d7191c", va="top")
    measure_start = report["timeline"]["measure_started_t_s"]
    if measure_start:
        for a in axes:
            a.axvline(measure_start, color="grey", lw=1, ls=":")
    ax.set_ylabel(unit_name)
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.08)
    if measure_start:
        ax.text(measure_start, 0.98, " measured →", transform=ax.get_xaxis_transform(), color="grey", va="top")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    rate = report["proofs_per_s"]
    circuits = [c["name"] for c in report["workload"]["circuits"]]
    ax.set_title(f"cuzk bench: {', '.join(circuits) if len(circuits) <= 3 else f'{len(circuits)} circuits'} — {report['jobs']['done']} proofs"
                 + ("" if rate is None else f", {rate:.2f} proofs/s") + f", OOM recoveries: {report['oom']['recoveries']}")

    seen: set[str] = set()
    for row, job in enumerate(jobs):
        for phase, start, end in _segments(job):
            seen.add(phase)
            axj.barh(row, end - start, left=start, color=PHASE_COLOURS[phase], alpha=0.45 if job["warmup"] else 1.0,
                     edgecolor="none", height=0.8)
    axj.set_ylabel("job")
    axj.yaxis.set_major_locator(MaxNLocator(integer=True))
    axj.set_xlabel("seconds since the run began")
    axj.invert_yaxis()
    axj.grid(axis="x", alpha=0.3)
    if seen:
        handles = [Patch(color=c, label=p.replace("_", " ")) for p, c in PHASE_COLOURS.items() if p in seen]
        if any(j["warmup"] for j in jobs):
            handles.append(Patch(color=PHASE_COLOURS["prove"], alpha=0.45, label="(warm-up: paler)"))
        axj.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
