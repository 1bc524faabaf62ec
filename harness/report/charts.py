"""The report's figures (matplotlib, Agg backend: no display, no torch)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.jobdir.grid_point import GridPoint  # noqa: E402
from harness.report.matching import (  # noqa: E402
    engine_rank,
    match_key,
    metric,
    model_display,
    sort_jobs,
)
from harness.report.speedups import Speedup  # noqa: E402


def speedup_figure(rows: list[Speedup], baseline: str, path: Path) -> Path | None:
    """Bars of YaFSDP's speedup over one baseline: x = model size (and gpus, ckpt), bars per
    sequence length. Whiskers are the 95% interval over repeats (± the step spread where a
    point ran once); a bar is hatched unless the report calls it significant."""
    rows = [r for r in rows if r.speedup_pct is not None]
    if not rows:
        return None
    seq_lens = sorted({r.key.seq_len for r in rows})
    groups: list[GridPoint] = []  # one group of bars per point, whatever its sequence length
    for r in rows:  # already in README order
        g = replace(r.key, seq_len=None)
        if g not in groups:
            groups.append(g)
    width = 0.8 / len(seq_lens)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups) + 2), 4.2))
    for i, seq in enumerate(seq_lens):
        xs, ys, hatches = [], [], []
        errs: list[list[float]] = [[], []]
        for r in rows:
            if r.key.seq_len != seq:
                continue
            group = groups.index(replace(r.key, seq_len=None))
            xs.append(group - 0.4 + width * (i + 0.5))
            y = r.speedup_pct or 0.0  # rows without a speedup were left out above
            ys.append(y)
            low, high = _whisker(r, y)
            errs[0].append(low)
            errs[1].append(high)
            hatches.append("" if r.significant else "//")
        bars = ax.bar(xs, ys, width, yerr=errs, capsize=3, label=f"seq {seq}")
        for bar, hatch in zip(bars, hatches, strict=True):
            bar.set_hatch(hatch)
    several_settings = len({g.setting for g in groups}) > 1
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(
        [
            f"{model_display(g.model)}\n{g.gpus} GPUs, ckpt {g.ckpt_layers}"
            + (
                f"\nmb={g.setting.micro_batch} ga={g.setting.grad_accum} {g.setting.dtype}"
                if several_settings
                else ""
            )
            for g in groups
        ],
        fontsize=8,
    )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("speedup over baseline (%)")
    ax.set_title(
        f"YaFSDP vs {baseline}: (T_fsdp - T_yafsdp) / T_fsdp\n"
        # one clause a line: the narrowest picture (one point, 6 in) must not cut it
        "whiskers: 95% interval over repeats (1 repeat: ± step spread)\n"
        "hatched: not significant",
        fontsize=9,
    )
    ax.legend(title="sequence length", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _whisker(r: Speedup, y: float) -> tuple[float, float]:
    """(below, above) the bar: the interval over repeats, else ± the step spread."""
    e = r.estimate
    if e is not None and e.low_pct is not None and e.high_pct is not None:
        return y - e.low_pct, e.high_pct - y
    return r.spread_pct or 0.0, r.spread_pct or 0.0


def primary_memory(row: pd.Series) -> tuple[float | None, str]:
    """The peak to compare engines by: the allocator's peak, else the process RSS."""
    allocated = metric(row, "peak_memory_allocated_bytes")
    if allocated is not None:
        return float(allocated), "allocated"
    rss = metric(row, "peak_rss_bytes")
    if rss is not None:
        return float(rss), "RSS"
    return None, ""


def memory_figure(df: pd.DataFrame, path: Path) -> Path | None:
    """Peak memory per engine at every grid point (MiB, or GiB for GPU-sized peaks)."""
    ok = sort_jobs(df[df["status"] == "ok"])
    points: list[GridPoint] = []
    data: dict[str, dict[GridPoint, float]] = {}
    kinds = set()
    for _, row in ok.iterrows():
        peak, kind = primary_memory(row)
        if peak is None:
            continue
        key = match_key(row)
        if key not in points:
            points.append(key)
        data.setdefault(row["engine"], {})[key] = peak
        kinds.add(kind)
    if not data:
        return None
    engines = sorted(data, key=engine_rank)
    largest = max(v for per_point in data.values() for v in per_point.values())
    unit, scale = ("GiB", 2**30) if largest >= 4 * 2**30 else ("MiB", 2**20)
    width = 0.8 / len(engines)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 * len(points) + 2), 4.5))
    for i, engine in enumerate(engines):
        xs = [points.index(k) - 0.4 + width * (i + 0.5) for k in data[engine]]
        ax.bar(xs, [v / scale for v in data[engine].values()], width, label=engine)
    several_settings = len({k.setting for k in points}) > 1
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels(
        [
            f"{model_display(k.model)}\n{k.gpus} GPUs\nseq {k.seq_len}, ckpt {k.ckpt_layers}"
            + ("\n" + k.setting.label().replace(", ", " ") if several_settings else "")
            for k in points
        ],
        fontsize=8,
    )
    ax.set_ylabel(f"peak memory per rank ({unit}, {' / '.join(sorted(kinds))})")
    ax.set_title("Peak memory per engine", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
