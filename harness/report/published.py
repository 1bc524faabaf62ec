"""The report's speedup sections as markdown: the published-format tables, their noise
legend and notes, the A/A verdict, and the why (predicted and measured) under each table."""

from __future__ import annotations

import pandas as pd

from harness.engines.registry import ENGINES
from harness.report.jobs import ReportJobs
from harness.report.markdown import bullets, callout, fmt_bytes, md_table
from harness.report.matching import (
    BASELINES,
    STATUS_CELL,
    YAFSDP,
    baseline_title,
    metric,
    off_registered,
    point_label,
)
from harness.report.measured import Measured, measured_block
from harness.report.picture_links import Pictures
from harness.report.speedups import METHOD, MIN_STEPS_FOR_SPREAD, Speedup
from harness.report.tables import (
    FLAG,
    speedup_table,
)

NOISE_LEGEND = (
    "Speedup = (T_fsdp - T_yafsdp) / T_fsdp, T = median iteration time of a run. With "
    "`repeats=N` each engine ran N times at each point, the engines taking turns; the "
    "speedup is measured per repeat (repeat r of YaFSDP against repeat r of the baseline, "
    "paired only when both finished ok in one round: one invocation of the runner, where "
    "the engines took turns, as `round` in result.json records; a failed repeat or one "
    "measured in another round, by a resume or another sweep, is left out and counted in "
    "the cell) and the cell gives their mean, its 95% confidence interval "
    f"({METHOD}: mean ± t(0.975, n-1) · sd / √n over the n per-repeat speedups) and n: "
    "`9.92% [7.1, 12.5], 3 repeats`. The verdict is significant only when the interval "
    "excludes 0; **n.s.** (not significant) where it holds 0. With 1 repeat, run-to-run "
    "noise was not measured and no verdict is given. The times are the median over the "
    f"paired runs. Flags ({FLAG}): *within the step spread*: |speedup| is no larger than the "
    "largest p10-p90 step-time range of the runs (in % of T_fsdp), so step-to-step "
    "variation inside a job could produce it (with fewer than "
    f"{MIN_STEPS_FOR_SPREAD} timed steps the spread says nothing of that variation: *too few "
    "for the step spread to judge*); *uneven interference*: the point's runs met "
    "very different loads from other processes (see below the table). A failed job shows its "
    f"status ({', '.join(f'`{c}`' for c in STATUS_CELL.values())}); `—` means no such job "
    "in the sweep."
)


def published_tables(
    r: ReportJobs, pictures: Pictures, measured: Measured | None = None
) -> list[str]:
    """The speedup tables; under each, why: predicted, and `measured` from the traces
    (`harness.report.measured`; None: not looked at, so no measured block)."""
    blocks = ["## Speedup tables (the YaFSDP README's format)"]
    df = r.jobs
    present = r.baselines()
    if not present:
        engines = ", ".join(sorted(df["engine"].dropna().unique())) if not df.empty else ""
        return [
            *blocks,
            f"No engine to compare yafsdp with ({', '.join(BASELINES)}) in these sweeps, "
            "so there is no "
            f"speedup to show. Engines found: {engines or 'none'}.",
        ]
    if df.empty or not (df["engine"] == YAFSDP).any():
        blocks.append(
            "**YaFSDP did not run in these sweeps**: every speedup below is `—` (missing)."
        )
    blocks.append(
        "Each cell: the mean speedup over paired repeats, its 95% interval and n; what the "
        "flags mean is under [Definitions](#definitions)."
    )
    late_named: set[str] = set()  # jobs whose late ranks a why block above named
    for baseline in present:
        blocks.append(f"### YaFSDP vs {baseline_title(baseline)}")
        for setting, rows in r.speedup_tables(baseline):
            twin = baseline if baseline not in BASELINES else None  # an A/A check's label
            blocks += [f"Setting: {setting.label()}.", md_table(*speedup_table(rows, twin))]
            blocks += off_registered_note(rows, baseline)
            gaps = _gaps(rows, baseline)
            if gaps:
                blocks.append("Missing baseline or engine (`—`): " + "; ".join(gaps) + ".")
            blocks += noise_notes(rows)
            if baseline not in BASELINES:
                blocks.append(aa_verdict(rows))
            link = pictures.speedup.get((baseline, setting))
            if link:
                blocks.append(f"![YaFSDP speedup over {baseline}]({link})")
            blocks += why_block(rows, baseline)
            if measured is not None:
                blocks += measured_block(rows, baseline, measured, predicted_terms, late_named)
    return blocks


def definitions() -> list[str]:
    """The speedup tables' terms, at the end of the report."""
    return ["## Definitions", NOISE_LEGEND]


def off_registered_note(rows: list[Speedup], baseline: str) -> list[str]:
    """Where this table's jobs ran an engine with a knob away from its label's registered
    value, the heading's description does not hold for them: said under the table."""
    off = {
        (label, knob)
        for r in rows
        for label, row in ((YAFSDP, r.yafsdp), (baseline, r.baseline))
        if row is not None
        for knob in off_registered(row)
    }
    if not off:
        return []
    knobs = "; ".join(f"{label} with {knob}" for label, knob in sorted(off))
    titles = {label: ENGINES[label].title if label in ENGINES else label for label, _ in off}
    named = sorted({title.split(" (")[0] for title in titles.values()})
    return [
        f"**Not as registered**: these jobs ran {knobs}, so this table is not "
        f"{' or '.join(named)} as the heading describes it, but the variant its setting "
        "names."
    ]


def aa_verdict(rows: list[Speedup]) -> str:
    """An A/A check's verdict: the same job under two labels must not differ."""
    measured = [r for r in rows if r.significant is not None]
    hits = [r for r in measured if r.significant]
    if not measured:
        return (
            "**A/A verdict: not measured** (no point has 2 or more repeats on both labels; "
            "run with repeats>=2)."
        )
    if not hits:
        return (
            f"**A/A verdict: not significant** at all {len(measured)} point(s): the same "
            "engine under two labels showed no difference beyond run-to-run noise, as it "
            "must."
        )
    return (
        f"**A/A verdict: significant at {len(hits)} of {len(measured)} point(s)**: the same "
        "engine differed from itself. About 1 point in 20 does so by chance at 95% "
        "confidence; more means this machine's noise is not what the interval assumes "
        "(drift within a point, say), and its verdicts should not be trusted."
    )


def noise_notes(rows: list[Speedup]) -> list[str]:
    """What the table cannot say: noise not measured, points under uneven interference."""
    notes = []
    single = [r for r in rows if r.repeats == 1]
    if single:
        which = "every point" if len(single) == len(rows) else f"{len(single)} point(s)"
        notes.append(
            f"**Run-to-run noise was not measured** at {which} (1 repeat): a second run on "
            "the same machine may differ by more than these steps do, so no speedup here is "
            "a verdict. Run with `repeats=3` (or more) for intervals."
        )
    unchecked = [f"{point_label(r.key)} ({r.unchecked})" for r in rows if r.unchecked]
    if unchecked:
        notes.append(
            "Pairs with no round recorded (results written before rounds were): that their "
            "runs ran together cannot be checked, at " + "; ".join(unchecked) + "."
        )
    uneven = [f"{point_label(r.key)}: {r.interference}" for r in rows if r.interference]
    if uneven:
        notes.append(
            f"{FLAG} Uneven interference (other processes' load differed very much between "
            "the runs compared):\n" + bullets(uneven)
        )
    return notes


# A job recorded before jobs wrote prediction.json keeps its predicted terms in result.json
# (`metrics.predicted`) but no why-lines; the report plans nothing, so it says so.
NO_STORED_WHY = (
    "(no why-lines stored: the yafsdp job predates prediction.json; "
    "`python -m harness.plan --why {point}` prints them)"
)


def why_block(rows: list[Speedup], baseline: str) -> list[str]:
    """Beside the measured speedups, the planner's: by how much and why, term by term
    (the lines `python -m harness.plan` prints, stored by the yafsdp job in its
    prediction.json; the report reads them, it never plans)."""
    explained = []
    for row in rows:
        if row.yafsdp is None or row.baseline is None:
            continue
        mine, theirs = predicted_terms(row.yafsdp), predicted_terms(row.baseline)
        if mine is None or theirs is None:
            continue
        t_y, t_b = mine["iteration_time_s"], theirs["iteration_time_s"]
        measured = "—" if row.speedup_pct is None else f"{row.speedup_pct:+.1f}%"
        explained.append(f"{point_label(row.key)}: measured speedup {measured}, predicted "
                         f"{(t_b - t_y) / t_b * 100:+.1f}%")  # fmt: skip
        lines = (mine.get("why") or {}).get(baseline)
        if lines is None:
            lines = [NO_STORED_WHY.format(point=row.key.words())]
        explained += [f"    {line}" for line in lines]
    if not explained:
        return ["Why (predicted): no time prediction for these jobs (the hardware profile "
                "has no peak FLOP/s or memory bandwidth, as on CPU)."]  # fmt: skip
    return ["Why (predicted, term by term; `python -m harness.plan` prints the same):",
            "```text\n" + "\n".join(explained) + "\n```"]  # fmt: skip


def predicted_terms(row: pd.Series) -> dict | None:
    """The job's recorded prediction with its terms, or None where it has no time."""
    found = metric(row, "predicted")
    if not isinstance(found, dict) or found.get("iteration_time_s") is None:
        return None
    if not found.get("breakdown"):
        return None
    return found


def _gaps(rows: list[Speedup], baseline: str) -> list[str]:
    missing_y = sum(r.yafsdp is None for r in rows)
    missing_b = sum(r.baseline is None for r in rows)
    gaps = []
    if missing_y:
        gaps.append(f"YaFSDP is missing at {missing_y} of {len(rows)} points")
    if missing_b:
        gaps.append(f"{baseline} is missing at {missing_b} of {len(rows)} points")
    return gaps


# The verdict: the report's first screen, one line per grid point and baseline saying what
# the measurement allows one to conclude ("significant": the 95% interval over paired
# repeats excludes 0), with each engine's peak memory and the planner's word.

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
