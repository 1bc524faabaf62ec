"""The report's first screen: one line per grid point and baseline saying what the
measurement allows one to conclude, with each engine's peak memory and, where the planner
priced the jobs, whether the measurement agrees with its prediction.

"Significant" means the 95% interval over paired repeats excludes 0 (harness.report.
significance); anything else is "no detectable difference", with what to do about it.
"""

from __future__ import annotations

import pandas as pd

from harness.report.jobs import ReportJobs
from harness.report.markdown import bullets, callout, fmt_bytes
from harness.report.matching import STATUS_CELL, metric, point_label
from harness.report.speedups import Speedup

# Other processes taking more than this share of the CPUs make a machine a noisy one.
BUSY_SHARE = 0.10
# Repeats to suggest where an interval holds 0: two more than ran, at least this many.
SUGGESTED_REPEATS = 5


def _pct(x: float) -> str:
    return f"{x:+.0f}"


def _share(row: Speedup) -> str:
    if row.other_cpu_share is None:
        return ""
    low, high = row.other_cpu_share
    took = f"{high:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%}-{high:.0%}"
    return f"; other processes took {took} of the CPUs"


def _missing(row: Speedup, baseline: str) -> str | None:
    """Why there is no speedup at the point, or None where there is one."""
    if row.speedup_pct is not None and row.estimate is not None:
        return None
    said = []
    for label, job in (("yafsdp", row.yafsdp), (baseline, row.baseline)):
        if job is None:
            said.append(f"{label} did not run")
        elif job["status"] != "ok":
            said.append(f"{label} {STATUS_CELL.get(str(job['status']), job['status'])}")
    if not said and row.other_round:  # both finished, in different runner invocations
        said.append(f"no pair ({row.other_round} from another round: rerun both together)")
    return "no comparison: " + (", ".join(said) or "no pair of runs finished on both sides")


def timing_words(row: Speedup) -> str:
    """`yafsdp 38% faster [21, 55], 3 repeats, significant`, or no detectable difference
    and what to do about it."""
    e = row.estimate
    assert e is not None and row.speedup_pct is not None
    if e.low_pct is None or e.high_pct is None:
        return (
            f"{_pct(e.speedup_pct)}% from 1 repeat, run-to-run noise not measured"
            f"{_share(row)} → rerun with repeats=3"
        )
    interval = f"[{e.low_pct:.0f}, {e.high_pct:.0f}], {e.n} repeats"
    if e.significant:
        way = "faster" if e.speedup_pct > 0 else "slower"
        return f"yafsdp {abs(e.speedup_pct):.0f}% {way} {interval}, significant"
    busy = row.other_cpu_share is not None and row.other_cpu_share[1] > BUSY_SHARE
    more = max(SUGGESTED_REPEATS, e.n + 2)
    fix = (
        f"rerun on a quiet machine or with repeats={more}" if busy else f"rerun with repeats={more}"
    )
    return (
        f"no detectable difference ({_pct(e.speedup_pct)}% [{_pct(e.low_pct)}, "
        f"{_pct(e.high_pct)}], {e.n} repeats{_share(row)}) → {fix}"
    )


def _peak(job: pd.Series | None) -> tuple[float | None, str]:
    allocated = metric(job, "peak_memory_allocated_bytes")
    if allocated is not None:
        return float(allocated), ""
    rss = metric(job, "peak_rss_bytes")
    return (float(rss), " RSS") if rss is not None else (None, "")


def memory_words(row: Speedup, baseline: str) -> str:
    """`peak yafsdp 1.2 GiB, fsdp1 1.1 GiB`: each engine's peak per rank."""
    parts = []
    for label, job in (("yafsdp", row.yafsdp), (baseline, row.baseline)):
        peak, kind = _peak(job)
        if peak is not None:
            parts.append(f"{label} {fmt_bytes(peak)}{kind}")
    return f"peak {', '.join(parts)}" if parts else ""


def planner_words(row: Speedup) -> str:
    """Whether the measured interval holds the planner's predicted speedup."""
    times = [metric(job, "predicted") for job in (row.yafsdp, row.baseline)]
    if not all(isinstance(t, dict) and t.get("iteration_time_s") for t in times):
        return ""
    t_y, t_b = (float(t["iteration_time_s"]) for t in times)
    predicted = (t_b - t_y) / t_b * 100.0
    e = row.estimate
    if e is None or e.low_pct is None or e.high_pct is None:
        return f"planner {_pct(predicted)}%"
    agrees = e.low_pct <= predicted <= e.high_pct
    return f"planner {_pct(predicted)}%: {'agrees' if agrees else 'outside the interval'}"


def verdict_line(row: Speedup, baseline: str) -> str:
    head = f"yafsdp vs {baseline} at {point_label(row.key)}: "
    missing = _missing(row, baseline)
    if missing is not None:
        return head + missing
    if row.loss_mismatch:
        return head + "void: the engines' losses differ (see Loss parity)"
    extras = [w for w in (memory_words(row, baseline), planner_words(row)) if w]
    return head + timing_words(row) + "".join(f" · {w}" for w in extras)


def verdict_box(r: ReportJobs) -> list[str]:
    """The box at the top of the report: one line per point and baseline."""
    lines = [
        verdict_line(row, baseline)
        for baseline in r.baselines()
        for _, rows in r.speedup_tables(baseline)
        for row in rows
    ]
    if not lines:
        return []
    several = len(r.settings) > 1
    note = " (each setting's points in turn)" if several else ""
    return [
        callout(
            "IMPORTANT",
            f"**Verdict**{note}: significant only where the 95% interval over paired "
            "repeats excludes 0 ([Definitions](#definitions)).\n" + bullets(lines),
        )
    ]
