"""The timeline picture: one profiler step per engine, lanes for the compute and the
communication streams (threads on CPU), engines stacked on one shared time axis."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from harness.jobdir.paths import JobDir  # noqa: E402
from harness.jobdir.result import CorruptResultError, read_result  # noqa: E402
from harness.trace.classify import COMM, COMPUTE, MEMORY  # noqa: E402
from harness.trace.overlap import Intervals, clip, merge, subtract  # noqa: E402
from harness.trace.parse import TraceError, load_trace  # noqa: E402
from harness.trace.phases import BACKWARD, FORWARD, OPTIMIZER, step_phases, thread_titles  # noqa: E402
from harness.trace.summary import Analysis, analyse, find_traces  # noqa: E402

COLORS = {COMPUTE: "#4C72B0", COMM: "#DD8452", MEMORY: "#55A868", "exposed": "#C44E52",
          FORWARD: "#8FB3D9", BACKWARD: "#B39DDB", OPTIMIZER: "#E0C060"}  # fmt: skip
_LANE_TITLE = {COMPUTE: "compute", COMM: "comm", MEMORY: "memcpy"}


def engine_label(job_dir: Path) -> str:
    """config.engine.label from the job's result.json, else the engine name, else the dir."""
    try:
        engine = read_result(JobDir(job_dir).result).engine
    except (CorruptResultError, AttributeError):
        return job_dir.name
    return str(engine.get("label") or engine.get("name") or job_dir.name)


def step_lanes(a: Analysis, step: int) -> tuple[float, float, list[tuple[str, str, Intervals]]]:
    """(window start, window end, [(lane title, class, intervals)]) for one step."""
    w = a.windows[a.windows["step"] == step]
    if w.empty:
        raise TraceError(f"{a.trace.path}: no step {step}; steps are {list(a.windows['step'])}")
    lo, hi = float(w["start"].iloc[0]), float(w["end"].iloc[0])
    ev = a.trace.events
    ts = ev["ts"].to_numpy()
    end = ts + ev["dur"].to_numpy()
    lane_key = ev["stream"].to_numpy() if a.kind == "gpu" else ev["tid"].to_numpy().astype(str)
    threads = thread_titles(ev, a.trace.thread_names) if a.kind == "cpu" else {}
    lanes: list[tuple[str, str, Intervals]] = [
        (f"phase: {phase}", phase, iv) for phase, iv in step_phases(ev, lo, hi).items()
    ]
    for cls in (COMPUTE, COMM, MEMORY):
        m = a.labels == cls
        for key in sorted(set(lane_key[m].tolist()), key=str):
            if a.kind == "cpu" and cls == COMPUTE:
                iv = a.busy.compute  # collective calls already cut out
            else:
                sel = m & (lane_key == key)
                iv = merge(ts[sel], end[sel])
            iv = clip(iv, lo, hi)
            if iv.start.size:
                where = f"stream {key}" if a.kind == "gpu" else threads.get(key, f"thread {key}")
                lanes.append((f"{_LANE_TITLE[cls]} ({where})", cls, iv))
    exposed = clip(subtract(a.busy.comm, a.busy.compute), lo, hi)
    lanes.append(("exposed comm", "exposed", exposed))
    return lo, hi, lanes


def plot_timeline(
    job_dirs: Sequence[Path | str],
    out: Path | str,
    *,
    rank: int = 0,
    step: int | None = None,
) -> Path:
    """Write a PNG with one panel per job (its engine label), all on one time scale in ms.

    step defaults to each trace's first profiled step.
    """
    panels = []
    for d in map(Path, job_dirs):
        traces = [p for p in find_traces(d) if p.name.startswith(f"rank{rank}.")]
        if not traces:
            raise TraceError(f"{d}: no trace for rank {rank}")
        a = analyse(load_trace(traces[0]))
        s = int(a.windows["step"].iloc[0]) if step is None else step
        row = a.steps[a.steps["step"] == s]
        panels.append((engine_label(d), s, a, row, *step_lanes(a, s)))

    span_ms = max((hi - lo) / 1e3 for _, _, _, _, lo, hi, _ in panels)
    heights = [max(len(p[6]), 1) * 0.45 + 0.9 for p in panels]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(12, sum(heights)), sharex=True, squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )  # fmt: skip
    for ax, (label, s, a, row, lo, _hi, lanes) in zip(axes[:, 0], panels, strict=True):
        for y, (_title, cls, iv) in enumerate(lanes):
            bars = np.column_stack([(iv.start - lo) / 1e3, (iv.end - iv.start) / 1e3])
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=COLORS[cls], linewidth=0)
        ax.set_yticks(range(len(lanes)), [t for t, _, _ in lanes], fontsize=8)
        ax.set_ylim(len(lanes) - 0.5, -0.5)
        pct = row["overlap_pct"].iloc[0] if not row.empty else float("nan")
        exposed = row["exposed_comm_s"].iloc[0] * 1e3 if not row.empty else float("nan")
        ax.set_title(
            f"{label}: step {s}, rank {a.rank}, overlap {pct:.1f}%, exposed comm "
            f"{exposed:.2f} ms",
            fontsize=10, loc="left",
        )  # fmt: skip
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlim(0, span_ms)
    axes[-1, 0].set_xlabel("time since step start (ms)")
    fig.legend(
        handles=[Patch(color=c, label=k) for k, c in COLORS.items()],
        loc="upper right", ncol=7, fontsize=8,
    )  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
